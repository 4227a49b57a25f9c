"""The lab's Slurm files: its inventory rendered by slurmkit's own generator, plus the overlay a single host
needs (ports, paths, auth socket, linuxproc without --cgroups), written to DIR/etc with the overlay itself
(``OVERRIDES_FILE``) so `conf generate|diff|apply --overrides` reproduce the running config. Where the lab's own
overlay differs by Slurm release (cgroup.conf's CgroupPlugin), the branch is here with its citation; the fake GPU
devices gres.conf names are made here too."""

from __future__ import annotations

import os
import socket
import stat
from typing import TYPE_CHECKING

import yaml

from slurmkit import hostlist
from slurmkit.lab.hooks import HooksMixin
from slurmkit.lab.inventory import lab_inventory
from slurmkit.lab.ports import port_list
from slurmkit.lab.spec import read_yaml
from slurmkit.release import release_key

if TYPE_CHECKING:
    from slurmkit.model.cluster import Cluster

OVERRIDES_FILE = "lab-overrides.yaml"


def host_cores() -> int:
    """The CPUs this process may run on: the cgroup mode's nodes claim exactly these (a real cpuset each)."""
    return len(os.sched_getaffinity(0))


class ConfigMixin(HooksMixin):
    def write_config(self, hooks_command: str | None = None) -> dict[str, str]:
        """Render the lab's inventory with slurmkit's generator plus single-host overrides; returns the files."""
        from slurmkit.generate import EXECUTABLE_FILES, Overrides, generate
        from slurmkit.model import load_cluster_text

        s = self.spec
        if s.preset:
            from slurmkit.lab.inventory import lab_from_preset

            inv = lab_from_preset(read_yaml(s.preset), s.nodes, s.nodes_per_leaf, accounting=s.accounting,
                                  hooks_command=hooks_command, healthcheck_interval=s.healthcheck_interval,
                                  slurm_version=self.release, submit_policy=s.submit_policy,
                                  tenants=s.tenants)
        else:
            inv = lab_inventory(
                s.nodes, s.gpus_per_node, s.gpu_type, s.nodes_per_leaf, accounting=s.accounting,
                hooks_command=hooks_command, healthcheck_interval=s.healthcheck_interval, slurm_version=self.release,
                topology=s.topology, submit_policy=s.submit_policy, cores=host_cores() if s.cgroups else None,
                power_nodes=s.power,
                power_command=self._hooks_command() if s.power and not hooks_command else None,
                suspend_time=s.suspend_time,
                tenants=s.tenants,
            )
        if s.monitoring:
            from slurmkit.lab.monitoring import inventory_section

            inv["monitoring"] = inventory_section(self)
        text = yaml.safe_dump(inv, sort_keys=False)
        cluster = load_cluster_text(text, source="lab inventory")
        d = self.dir
        host = socket.gethostname().split(".")[0]
        slurm_over = [
            ("SlurmctldHost", f"{host}(127.0.0.1)"),
            ("SlurmctldPort", str(s.ctld_port)),
            # cred_expire is also how long Slurm holds a requeued batch job before it may start again (default
            # 120 s): starting it earlier fails with "Job credential revoked" on the node it last ran on
            ("AuthInfo", f"socket={self.munge_socket},cred_expire=10"),
            ("SlurmUser", "root"),
            ("SlurmdUser", "root"),
            ("StateSaveLocation", str(d / "state")),
            ("SlurmdSpoolDir", str(d / "spool" / "%n")),
            ("SlurmctldPidFile", str(self.run_dir / "slurmctld.pid")),
            ("SlurmdPidFile", str(self.run_dir / "slurmd-%n.pid")),
            ("SlurmctldLogFile", str(d / "log" / "slurmctld.log")),
            ("SlurmdLogFile", str(d / "log" / "slurmd-%n.log")),
            ("JobAcctGatherType", "jobacct_gather/linux"),
            ("SlurmdParameters", "config_overrides"),  # the host has fewer CPUs/less memory than the fake nodes
            # start jobs as soon as they are submitted (the default batch_sched_delay=3 makes every test wait);
            # merged item by item into what the generator set (nohold_on_prolog_fail with hooks)
            # with accounting also sched_interval (slurm.conf(5) SchedulerParameters, 22.05 and 24.11: how often the
            # main scheduling loop tests all pending jobs, default 60 s): a job requeued by preemption waits for its
            # BeginTime and then for that loop, a minute of nothing in every preemption test
            ("SchedulerParameters", "batch_sched_delay=0,sched_min_interval=0" + (",sched_interval=5" if s.accounting else "")),
            ("JobCompType", "jobcomp/filetxt"),
            ("JobCompLoc", str(d / "log" / "jobcomp.txt")),
            ("SlurmctldTimeout", "30"),
            ("SlurmdTimeout", "60"),
            ("MessageTimeout", "10"),
            ("KillWait", "5"),
            ("MinJobAge", "600"),
        ]
        if not s.cgroups:
            # without --cgroups no node has a cgroup tree of its own (slurmkit/lab/cgroups.py gives each one):
            slurm_over += [
                ("ProctrackType", "proctrack/linuxproc"),
                ("TaskPlugin", "task/none"),
                ("PrologFlags", "-Contain"),  # Contain needs proctrack/cgroup; Alloc stays
            ]
        ctld_params = []
        if s.power:
            # slurm.conf(5) 22.05 and 24.11 SlurmctldParameters power_save_interval: "How often the power_save
            # thread looks to resume and suspend nodes ... Default is 10 seconds"
            ctld_params += ["power_save_interval=1", "power_save_min_interval=0"]
        if s.configless:
            # configless_slurm.shtml (22.05, 24.11): "setting SlurmctldParameters=enable_configless in slurm.conf";
            # slurmd then starts with --conf-server and caches the files in SlurmdSpoolDir/conf-cache
            ctld_params.append("enable_configless")
        if ctld_params:
            slurm_over.append(("SlurmctldParameters", ",".join(ctld_params)))
        if self.foreign:
            # the root's plugins, for daemons in the view and for clients run through the root's loader alike
            from slurmkit.lab import image, view

            img = image.find(self.release)
            if img is not None:
                slurm_over.append(("PluginDir", view.plugin_dir(img.root)))
        if s.accounting:
            slurm_over += [
                ("AccountingStorageHost", "localhost"),
                ("AccountingStoragePort", str(s.dbd_port)),
                ("AccountingStoragePass", str(self.munge_socket)),  # slurmdbd connections ignore AuthInfo
                # slurm.conf(5) PriorityCalcPeriod: "The period of time in minutes in which the half-life decay will be
                # re-calculated" (default 5): running jobs' usage reaches fair-share once a minute, not every five
                ("PriorityCalcPeriod", "1"),
            ]
        cgroup_over: list[tuple[str, str]] = []
        if s.cgroups:
            # cgroup.conf.5 (22.05 and 24.11): CgroupPlugin=cgroup/v1 explicitly; autodetect reads the node's
            # /sys/fs/cgroup, which here is the lab's own tmpfs of v1 mounts (cgroups.mount_script)
            cgroup_over.append(("CgroupPlugin", "cgroup/v1"))
        elif release_key(self.release) >= (24, 5):
            # cgroup.conf.5 of slurm-24-05-8-1 and slurm-24-11-5-1: CgroupPlugin=disabled "to completely disable any
            # interaction with the cgroups" (not in 22.05-23.11). With proctrack/linuxproc + task/none the lab needs
            # none, and autodetect would make cgroup/v1 trees named slurm_<nodename> on the host, shared by every
            # lab with the same node names; cgroup/v2 is fatal on a hybrid-v1 host.
            cgroup_over.append(("CgroupPlugin", "disabled"))
        dbd_over: list[tuple[str, str]] = []
        if s.accounting:
            # the generated slurmdbd.conf (rollout.PRIVATE_FILES: mode 600, owned by SlurmUser) with the lab's ports,
            # paths and user: slurmdbd loading it at `lab up` is the test of what `conf generate` writes
            dbd_over = [
                ("AuthInfo", f"socket={self.munge_socket}"),
                ("DbdPort", str(s.dbd_port)),
                ("SlurmUser", "root"),
                ("LogFile", str(d / "log" / "slurmdbd.log")),
                ("PidFile", str(self.run_dir / "slurmdbd.pid")),
                ("StoragePort", str(s.db_port)),
            ]
        ov = Overrides(
            slurm_conf=tuple(slurm_over),
            cgroup_conf=tuple(cgroup_over),
            slurmdbd_conf=tuple(dbd_over),
            node_params=self.node_params(cluster),
            gres_file_prefix=str(d / "dev"),
        )
        files = generate(cluster, conf_dir=str(self.etc), overrides=ov)
        self.etc.mkdir(parents=True, exist_ok=True)
        from slurmkit import safefs
        from slurmkit.generate.rollout import PRIVATE_FILES

        for name, body in files.items():
            p = self.etc / name
            if name in PRIVATE_FILES:  # slurmdbd.conf: its mode from the open on, never readable meanwhile
                p.unlink(missing_ok=True)
                safefs.write_new(p, body, PRIVATE_FILES[name], durable=False)
                continue
            p.write_text(body)
            if name in EXECUTABLE_FILES:
                p.chmod(0o755)
        (self.etc / "slurmkit.yaml").write_text(text)
        # the lab's own overlay, in `conf generate|diff|apply --overrides` form: the inventory + this file reproduce
        # the running config exactly (what `conf apply` on the lab needs)
        overlay = {
            "slurm_conf": dict(ov.slurm_conf),
            **({"cgroup_conf": dict(ov.cgroup_conf)} if ov.cgroup_conf else {}),
            **({"slurmdbd_conf": dict(ov.slurmdbd_conf)} if ov.slurmdbd_conf else {}),
            "node_params": {g: dict(kv) for g, kv in ov.node_params.items()},
            "gres_file_prefix": ov.gres_file_prefix,
        }
        (self.etc / OVERRIDES_FILE).write_text(
            "# generated by slurmkit lab: what a single host needs on top of slurmkit.yaml\n"
            + yaml.safe_dump(overlay, sort_keys=False)
        )
        hosts = ["127.0.0.1 localhost " + socket.gethostname(), *(f"127.0.0.1 {n}" for n in s.all_node_names)]
        (self.etc / "hosts").write_text("\n".join(hosts) + "\n")
        return files

    def node_params(self, cluster: Cluster) -> dict[str, tuple[tuple[str, str], ...]]:
        """Each node group's NodeAddr and Port: nodeI listens on port base+I. Slurm reads a NodeName line's Port as a
        hostlist of numbers, one per host in order (22.05 src/slurmctld/read_config.c _build_single_nodeline_info:
        ``port_list = hostlist_create(port_str)``), so a group of any node set gets its own bracket list."""
        out: dict[str, tuple[tuple[str, str], ...]] = {}
        for g in cluster.node_groups:
            ports = [self.spec.slurmd_port(self.spec.node_index(h)) for h in hostlist.expand(g.hosts)]
            out[g.name] = (("NodeAddr", "127.0.0.1"), ("Port", port_list(ports)))
        return out

    def _make_devices(self) -> None:
        for i in range(self.spec.gpus_per_node):
            p = self.dir / "dev" / f"nvidia{i}"
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(195, i))
