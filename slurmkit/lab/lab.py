"""A real multi-node Slurm on this one machine: private munged, one slurmctld, N ``slurmd -N nodeI``.

Each slurmd runs in its own UTS + mount namespace (``unshare``), so ``hostname`` inside a job prints the node
name, ``/etc/hosts`` resolves every node, and ``/etc/slurm`` is the lab's config dir. Fake GPUs are character
devices (``mknod c 195 N``) because gres.conf needs ``File=``. The config comes from slurmkit's own generator;
only what a single host needs is overridden here (ports, paths, auth socket, linuxproc).

Everything the lab starts is recorded in pid files under DIR/run; ``down`` stops exactly those processes plus
whatever jobs left behind inside the node namespaces.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from slurmkit import hostlist
from slurmkit.backend.parse import SINFO_NODE_FORMAT, parse_sinfo_nodes
from slurmkit.backend.run import log_tail, run
from slurmkit.errors import LabError, SlurmCommandError, UsageError
from slurmkit.lab.inventory import lab_inventory
from slurmkit.lab.ports import check_ports, port_free, port_list
from slurmkit.lab.procs import (
    alive,
    host_bin,
    is_program,
    kill,
    pids_in_ns,
    pids_with_arg,
    read_pid,
    uts_ns,
    wait_for,
)
from slurmkit.lab.spec import LabSpec, read_yaml
from slurmkit.release import release_key

if TYPE_CHECKING:
    from slurmkit.model.cluster import Cluster

OVERRIDES_FILE = "lab-overrides.yaml"
APT_PACKAGES = "slurmctld slurmd slurm-client munge"
APT_ACCOUNTING = "slurmdbd mariadb-server"
REQUIRED_BINARIES = ("slurmctld", "slurmd", "munged", "sinfo", "scontrol", "sbatch", "srun", "squeue", "scancel", "unshare")
ACCOUNTING_BINARIES = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacct")

Progress = Callable[[str], None]

# MariaDB for `--accounting`. slurmdbd checks at start that the server's CONCAT() works
# (src/plugins/accounting_storage/mysql/accounting_storage_mysql.c _check_mysql_concat_is_sane(), 22.05-25.11:
# `select @var := concat('');`, fatal on a null result). Measured: Debian 13's MariaDB 11.8 fails that query with
# slurmdbd 24.11.5 ("mysql_query failed: 5027 Number of columns in result (=1) set exceeds maximum allowed number
# of columns (=0)", then "fatal: _check_mysql_concat_is_sane: null result", also outside slurmkit), while Debian
# 12's MariaDB 10.11 passes it with slurmdbd 22.05.8 (the host's) and 24.11.5 (the trixie root's, the second pass
# of tests/run.sh). So the lab runs the host's MariaDB when it is a 10.x, and otherwise (11.x, or none installed)
# MariaDB 10.11 from the bookworm root (the 22.05 root, which carries mariadb-server: image.EXTRA_PACKAGES),
# chrooted, with whichever slurmdbd the lab's release has. Only 10.11 is known good, so 11.x below 11.8 takes
# the root too.
MARIADB_ROOT_RELEASE = "22.05"


def mariadb_root(host_mariadbd_version: str | None) -> str | None:
    """None: the host's MariaDB serves the lab's slurmdbd; else the Slurm release of the root whose MariaDB does
    (``host_mariadbd_version`` is what ``mariadbd --version`` prints, None where there is none)."""
    m = re.search(r"Ver (\d+)\.(\d+)\.\d+-MariaDB", host_mariadbd_version or "")
    if m and int(m.group(1)) == 10:
        return None
    return MARIADB_ROOT_RELEASE


def host_mariadbd_version() -> str | None:
    exe = shutil.which("mariadbd") or ("/usr/sbin/mariadbd" if Path("/usr/sbin/mariadbd").exists() else None)
    if exe is None:
        return None
    try:
        return run([exe, "--version"], timeout=10).stdout.strip()
    except SlurmCommandError:
        return None



class Lab:
    def __init__(self, spec: LabSpec):
        self.spec = spec
        self.dir = Path(spec.dir).resolve()
        self._host_release: str | None = None
        self._node_cgroups: dict[str, dict[str, Path]] = {}

    # --- release -------------------------------------------------------------------------------------------
    @property
    def host_release(self) -> str | None:
        if self._host_release is None:
            from slurmkit.lab.image import host_release

            self._host_release = host_release() or ""
        return self._host_release or None

    @property
    def foreign(self) -> bool:
        """True when the lab runs a Slurm release other than the host's (from a root, through a view)."""
        return self.spec.slurm is not None and self.spec.slurm != self.host_release

    @property
    def release(self) -> str:
        """The Slurm release this lab runs ("22.05", "24.11")."""
        rel = self.spec.slurm or self.host_release
        if rel is None:
            raise LabError("no Slurm on this host; pass --slurm RELEASE to run one from a root filesystem")
        return rel

    @property
    def bin_dir(self) -> Path:
        """Wrappers that run the lab's release of every Slurm program (only for a foreign release)."""
        return self.dir / "bin"

    def exe(self, name: str) -> str:
        """The program ``name`` of the lab's release: a wrapper into the view, or the host's binary."""
        from slurmkit.lab.view import PROGRAMS

        if self.foreign and name in PROGRAMS:
            return str(self.bin_dir / name)
        return host_bin(name)

    # --- paths ---------------------------------------------------------------------------------------------
    @property
    def etc(self) -> Path:
        return self.dir / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        from slurmkit.lab.view import is_lab_bin, lab_path

        path = os.environ.get("PATH", os.defpath)
        if self.foreign:
            return {"SLURM_CONF": str(self.conf), "PATH": lab_path(path, self.bin_dir)}
        if any(is_lab_bin(e) for e in path.split(os.pathsep)):  # another lab's wrappers would answer first
            return {"SLURM_CONF": str(self.conf), "PATH": lab_path(path, None)}
        return {"SLURM_CONF": str(self.conf)}

    @property
    def user_env(self) -> dict[str, str]:
        """What a shell using the lab needs (`slurmkit lab env`): SLURM_CONF for Slurm's commands and gpusub (which
        finds the inventory copy slurmkit.yaml beside it), SLURMKIT_LAB_DIR for `slurmkit lab status|down`, and with
        --hooks the per-node fake NVML states for running `slurmkit hook|check` by hand. (PATH, for a foreign
        release's wrappers, is printed by `lab env` itself: it extends the shell's own $PATH.)"""
        env = {"SLURM_CONF": str(self.conf), "SLURMKIT_LAB_DIR": str(self.dir)}
        if self.spec.hooks:
            env["SLURMKIT_FAKE_NVML"] = str(self.dir / "fake-nvml")
        if self.spec.monitoring:
            from slurmkit.lab.monitoring import url

            env["SLURMKIT_PROMETHEUS_URL"] = url(self)
        return env

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    @classmethod
    def load(cls, directory: str) -> Lab:
        """A lab that ``up`` started in ``directory`` (its spec is saved there)."""
        p = Path(directory).resolve() / "lab.json"
        if not p.exists():
            return cls(LabSpec(dir=directory))
        return cls(LabSpec(**json.loads(p.read_text())))

    # --- state ---------------------------------------------------------------------------------------------
    def _pidfiles(self) -> Iterator[Path]:
        if self.run_dir.is_dir():
            yield from sorted(self.run_dir.glob("*.pid"))

    def running_pids(self) -> dict[str, int]:
        """Daemons from our pid files that are alive *and* still the program the file names: a pid file left by
        a crash may hold a number the kernel has since given to an unrelated process, which must never be
        signalled."""
        out = {}
        for pf in self._pidfiles():
            pid = read_pid(pf)
            if pid and alive(pid) and is_program(pid, pf.stem.split("-", 1)[0]):
                out[pf.stem] = pid
        return out

    def is_up(self) -> bool:
        return bool(self.running_pids())

    # --- up ------------------------------------------------------------------------------------------------
    def preflight(self, progress: Progress = lambda m: None) -> None:
        """Refuse clearly, changing nothing."""
        if self.spec.topology == "block" and self.spec.spare:
            # room that `nodes add` would then refuse (elastic/edit.py add_hosts: no block topologies): on 24.11 a
            # reconfigure that adds blocks makes every slurmd re-read topology.conf and die ("children count lower
            # than bblock_node_cnt", issue 14, measured), so the lab offers none
            raise UsageError("--spare: `slurmkit nodes add` does not grow a block topology (a reconfigure that adds "
                             "blocks stops every slurmd reading topology.conf); use --topology tree, or no --spare")
        if os.geteuid() != 0:
            raise LabError("the lab needs root (slurmd runs jobs as their users, unshare needs CAP_SYS_ADMIN); run as root")
        need = REQUIRED_BINARIES + (ACCOUNTING_BINARIES if self.spec.accounting else ())
        if self.foreign:  # Slurm and munge come from the root; the host needs only these
            need = ("unshare", "chroot", "mount") + (("mariadbd", "mariadb-install-db") if self.spec.accounting else ())
        if self.spec.accounting and self.mariadb_root:  # MariaDB from a root (see mariadb_root), not the host's
            need = tuple(b for b in need if b not in ("mariadbd", "mariadb-install-db")) + ("chroot",)
        missing = [b for b in need if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
        if missing:
            pkgs = APT_PACKAGES + (" " + APT_ACCOUNTING if self.spec.accounting else "")
            raise LabError(
                f"missing {', '.join(missing)}; install with: apt-get update && apt-get install -y --no-install-recommends {pkgs}"
            )
        if self.is_up():
            raise LabError(f"a lab is already up in {self.dir} (pids {sorted(self.running_pids().values())}); run `slurmkit lab down --dir {self.dir}` first")
        if self.spec.nodes < 1 or self.spec.gpus_per_node < 1 or self.spec.nodes_per_leaf < 1:
            raise LabError("--nodes, --gpus-per-node and --nodes-per-leaf must be >= 1")
        if self.spec.topology not in ("tree", "block"):
            raise LabError(f"--topology must be tree or block, not {self.spec.topology!r}")
        if self.spec.topology == "block":
            # topology/block came in 23.11 (slurm.conf.5 of slurm-23-11-10-1, TopologyPlugin); BlockSizes in 24.05
            if release_key(self.release) < (24, 5):
                raise LabError(f"--topology block needs Slurm 24.05 or later (BlockSizes); this lab runs {self.release}"
                               "; try --slurm 24.11")
            if self.spec.nodes % self.spec.nodes_per_leaf:
                raise LabError(f"--topology block needs --nodes ({self.spec.nodes}) to be a multiple of --nodes-per-leaf "
                               f"({self.spec.nodes_per_leaf}): every block has the base size")
        types = self.spec.gpu_types  # a bad --gpu-type is refused here
        if len(types) > 1 and (self.spec.preset or self.spec.power or self.spec.fake_nvml_template):
            raise LabError("--gpu-type with several types: not together with --preset, --power or --fake-nvml "
                           "(each shapes the nodes after one GPU type)")
        if self.spec.hooks:
            self._nvml_state()  # a state that does not fit the lab is refused before anything starts
        if self.spec.cgroups:
            from slurmkit.lab import cgroups

            lacks = cgroups.problems()
            if lacks:
                raise LabError("--cgroups: this host cannot run the cgroup mode: " + "; ".join(lacks))
        if self.spec.spare < 0:
            raise LabError("--spare must be >= 0")
        if not 0 <= self.spec.power <= self.spec.nodes:
            raise LabError(f"--power must be 0..--nodes ({self.spec.nodes})")
        ports = self.spec.ports()
        if self.spec.monitoring:
            from slurmkit.lab import monitoring

            missing_mon = monitoring.binaries_missing()
            if missing_mon:
                raise LabError(f"--monitoring: missing {', '.join(missing_mon)}; install with: apt-get install -y "
                               f"--no-install-recommends {monitoring.APT} (the lab runs the binaries, not the "
                               "services)")
            for p in monitoring.ports(self):
                ports.setdefault(p, "monitoring (Prometheus, exporter, node_exporter), --monitoring-port")
        check_ports(ports, progress)

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
        from slurmkit.generate.rollout import PRIVATE_FILES

        for name, body in files.items():
            p = self.etc / name
            p.write_text(body)
            if name in EXECUTABLE_FILES:
                p.chmod(0o755)
            if name in PRIVATE_FILES:
                p.chmod(PRIVATE_FILES[name])
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

    def up(self, progress: Progress = lambda m: None, timeout: float = 60.0) -> float:
        """Start everything and wait until every node is exactly ``idle``. Returns seconds taken."""
        t0 = time.monotonic()
        self.spec.apply_preset()
        self.preflight(progress)
        s = self.spec
        nvml = self._nvml_state() if s.hooks else {}  # read before the lab dir is cleaned
        if self.dir.exists():
            from slurmkit.lab import cgroups

            cgroups.remove(self.dir, timeout=2)  # a crashed lab's trees, if it recorded any
            # a stale dir from a lab that is not running: start clean, but only if it is ours
            if not (self.dir / "lab.json").exists() and any(self.dir.iterdir()):
                raise LabError(f"{self.dir} exists, is not empty and is not a slurmkit lab; choose another --dir")
            shutil.rmtree(self.dir)
        for sub in ("etc", "state", "log", "run", "dev", "munge", "spool", "hookstate", "fake-nvml"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for n in s.all_node_names:
            (self.dir / "spool" / n).mkdir()
        # jobs submitted by other users must be able to reach their files: o+x along the path
        for p in (self.dir, self.dir / "munge", self.dir / "etc", self.dir / "log"):
            p.chmod(0o755)
        (self.dir / "lab.json").write_text(json.dumps(asdict(s), indent=1))
        try:
            if self.foreign:
                self._mount_release(progress)
            hooks_cmd = self._hooks_command() if s.hooks else None
            self.write_config(hooks_cmd)
            self._make_devices()
            if s.cgroups:
                from slurmkit.lab import cgroups

                self._node_cgroups = cgroups.create(self.dir, s.node_names)
            if s.hooks:
                self._seed_fake_nvml(nvml)
            progress("starting munged")
            self._start_munged()
            if s.accounting:
                progress("starting mariadb and slurmdbd")
                self._start_accounting(progress)
                # the QOS the partitions allow must exist before slurmctld reads AllowQOS (fatal from 25.11:
                # release.allow_qos_fatal); QOS are not per cluster, so they need no registered cluster
                progress("adding the inventory's QOS (before slurmctld: it refuses unknown AllowQOS)")
                self.apply_tenants(qos_only=True)
            progress("starting slurmctld")
            self._start_slurmctld()
            progress(f"starting {s.nodes} slurmd (one UTS+mount namespace each)")
            self._start_slurmds()
            self.wait_idle(progress, timeout=timeout - (time.monotonic() - t0))
            if s.accounting:
                progress("applying the inventory's tenants (slurmkit accounts apply)")
                self.apply_tenants(timeout=max(10.0, timeout - (time.monotonic() - t0)))
            if s.monitoring:
                from slurmkit.lab import monitoring

                progress(f"starting Prometheus on {monitoring.url(self)}, {s.nodes} node_exporter and the exporter")
                monitoring.start(self, timeout=max(30.0, timeout - (time.monotonic() - t0)))
        except BaseException:
            self.down()
            raise
        return time.monotonic() - t0

    def apply_tenants(self, inventory: Path | None = None, timeout: float = 30.0, qos_only: bool = False) -> int:
        """`slurmkit accounts apply` of the lab inventory's tenants (or ``inventory``'s); returns the steps run.
        Waits first until slurmctld has registered the cluster with slurmdbd (associations are per cluster).
        ``qos_only``: only add and set the QOS (``accounts.plan.qos_changes``), with no slurmctld running yet."""
        from slurmkit.accounts.plan import desired, diff, qos_changes, steps
        from slurmkit.accounts.sacct import Target, apply_steps, read_state
        from slurmkit.model import load_cluster

        cluster = load_cluster(inventory or self.etc / "slurmkit.yaml")
        if cluster.tenants is None:
            return 0
        t = Target(cluster.name, self.env, self.exe("sacctmgr"))

        def registered() -> bool:
            r = run([t.sacctmgr, "-P", "-n", "show", "cluster", "format=Cluster"], timeout=20, check=False, env=self.env)
            return cluster.name in r.stdout.split()

        if qos_only:
            todo = steps(qos_changes(diff(read_state(t), desired(cluster.tenants))), t.cluster)
            apply_steps(t, todo)
            return len(todo)
        wait_for(registered, timeout, "slurmctld to register the cluster with slurmdbd", self.dir / "log" / "slurmdbd.log")
        todo = steps(diff(read_state(t), desired(cluster.tenants), prune=True), t.cluster)
        apply_steps(t, todo)
        return len(todo)

    def _mount_release(self, progress: Progress) -> None:
        from slurmkit.lab import image, view

        img = image.ensure(self.release, progress)
        progress(f"Slurm {img.slurm_version} from {img.root}")
        where = view.mount_view(img, self.dir)
        view.write_wrappers(where, self.bin_dir, img.root)

    @property
    def view(self) -> Path:
        from slurmkit.lab.view import view_path

        return view_path(self.dir)

    def _hooks_command(self) -> str:
        env = [
            f"SLURMKIT_FAKE_NVML={self.dir / 'fake-nvml'}",
            f"SLURMKIT_STATE_DIR={self.dir / 'hookstate'}",
            # each virtual node's textfile in its own dir (never the host's node_exporter dir, one file per node)
            f"SLURMKIT_TEXTFILE_DIR={self.dir / 'textfile' / '%n'}",
            f"SLURMKIT_POWER_LOG={self.dir / 'log' / 'power.log'}",
            f"PYTHONPATH={Path(__file__).resolve().parents[2]}",
        ]
        return " ".join(["/usr/bin/env", *(shlex.quote(e) for e in env), shlex.quote(sys.executable), "-m", "slurmkit.cli.main"])

    def fake_nvml_file(self, node: str) -> Path:
        return self.dir / "fake-nvml" / f"{node}.json"

    def _nvml_state(self) -> dict:
        """The state every node starts with: --fake-nvml's, checked against the lab's shape, or a healthy one (per
        GPU type: {type: state})."""
        from slurmkit.lab.nvmlstate import healthy_state, load_template

        s = self.spec
        if s.fake_nvml_template:
            return {t: load_template(s.fake_nvml_template, s.gpus_per_node, t) for t, _n in s.gpu_types}
        return {t: healthy_state(s.gpus_per_node, t) for t, _n in s.gpu_types}

    def _seed_fake_nvml(self, states: dict) -> None:
        for n in self.spec.all_node_names:
            self.fake_nvml_file(n).write_text(json.dumps(states[self.spec.node_gpu_type(n)], indent=1))

    def _make_devices(self) -> None:
        for i in range(self.spec.gpus_per_node):
            p = self.dir / "dev" / f"nvidia{i}"
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(195, i))

    def _start_munged(self) -> None:
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.dir / "munge").chmod(0o711)
        run(
            [
                self.exe("munged"), f"--key-file={key}", f"--socket={self.munge_socket}",
                f"--pid-file={self.run_dir / 'munged.pid'}", f"--log-file={self.dir / 'log' / 'munged.log'}",
                f"--seed-file={self.dir / 'munge' / 'munged.seed'}", "--force",
            ],
            timeout=15,
        )
        wait_for(lambda: self.munge_socket.exists(), 5, "munged socket")

    @property
    def mariadb_root(self) -> str | None:
        """The release whose root's MariaDB serves ``--accounting`` (None: the host's); see ``mariadb_root()``."""
        if not hasattr(self, "_mariadb_root"):
            self._mariadb_root = mariadb_root(host_mariadbd_version())
        return self._mariadb_root

    def _mariadb_argv(self, argv: list[str], progress: Progress = lambda m: None) -> list[str]:
        """``argv`` (paths under the lab dir) as the host runs it, or chrooted into the MariaDB root: there the lab
        dir is bind-mounted on the root's /mnt and a tmpfs covers its /tmp, in a private mount namespace, so the
        cached root is never written; ``unshare`` and ``chroot`` exec, so the pid is mariadbd's own."""
        if not self.mariadb_root:
            return [host_bin(argv[0]) if argv[0] == "mariadbd" else argv[0], *argv[1:]]
        from slurmkit.lab import image

        img = image.ensure(self.mariadb_root, progress)
        if not (img.root / "usr/sbin/mariadbd").exists():
            raise LabError(f"the Slurm {img.release} root {img.root} has no MariaDB (built before it carried one); "
                           f"rebuild it: slurmkit lab image rm {img.release} && slurmkit lab image build {img.release}")
        q = shlex.quote
        where = {"mariadbd": "/usr/sbin/mariadbd", "mariadb-install-db": "/usr/bin/mariadb-install-db"}
        # a minbase root has no /etc/hosts: mariadb-install-db refuses ("Neither host ... nor 'localhost' could be
        # looked up") without --force ("run even if DNS does not work", its --help); the lab's slurmdbd comes over
        # 127.0.0.1 and grants are skipped, so mariadbd needs no name either
        dns = "--force" if argv[0] == "mariadb-install-db" else "--skip-name-resolve"
        inner = [where.get(argv[0], argv[0]), *(a.replace(str(self.dir), "/mnt") for a in argv[1:]), dns]
        script = "; ".join([
            "set -e",
            f"mount --bind {q(str(self.dir))} {q(str(img.root / 'mnt'))}",
            f"mount -t tmpfs -o mode=1777,size=64m slurmkit-tmp {q(str(img.root / 'tmp'))}",
            f"exec chroot {q(str(img.root))} {' '.join(q(a) for a in inner)}",
        ])
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]

    def _start_accounting(self, progress: Progress = lambda m: None) -> None:
        s = self.spec
        data = self.dir / "mysql"
        if self.mariadb_root:
            progress(f"MariaDB from the Slurm {self.mariadb_root} root (the host's does not serve slurmdbd)")
        run(self._mariadb_argv(["mariadb-install-db", f"--datadir={data}", "--user=root",
                                "--auth-root-authentication-method=normal", "--skip-test-db"], progress), timeout=60)
        log = open(self.dir / "log" / "mariadb.log", "ab")  # noqa: SIM115 - handed to the daemon
        proc = subprocess.Popen(
            self._mariadb_argv(["mariadbd", f"--datadir={data}", "--user=root", f"--port={s.db_port}",
                                "--bind-address=127.0.0.1", f"--socket={self.dir / 'run' / 'mysqld.sock'}",
                                f"--pid-file={self.run_dir / 'mariadbd.pid.tmp'}", "--skip-grant-tables",
                                "--skip-networking=0", "--innodb-buffer-pool-size=32M"], progress),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
        (self.run_dir / "mariadbd.pid").write_text(str(proc.pid))
        wait_for(lambda: not port_free(s.db_port), 20, "mariadb port")
        run([self.exe("slurmdbd")], timeout=20, env={"SLURM_CONF": str(self.conf)})
        wait_for(lambda: not port_free(s.dbd_port), 20, "slurmdbd port")

    def _start_slurmctld(self) -> None:
        run([self.exe("slurmctld"), "-f", str(self.conf), "-i"], timeout=20, env=self.env)
        wait_for(lambda: self._ping(), 15, "slurmctld to answer `scontrol ping`", self.dir / "log" / "slurmctld.log")

    def _ping(self) -> bool:
        try:
            return "UP" in run([self.exe("scontrol"), "ping"], timeout=3, env=self.env, check=False).stdout
        except SlurmCommandError:
            return False

    def node_params(self, cluster: Cluster) -> dict[str, tuple[tuple[str, str], ...]]:
        """Each node group's NodeAddr and Port: nodeI listens on port base+I. Slurm reads a NodeName line's Port as a
        hostlist of numbers, one per host in order (22.05 src/slurmctld/read_config.c _build_single_nodeline_info:
        ``port_list = hostlist_create(port_str)``), so a group of any node set gets its own bracket list."""
        out: dict[str, tuple[tuple[str, str], ...]] = {}
        for g in cluster.node_groups:
            ports = [self.spec.slurmd_port(self.spec.node_index(h)) for h in hostlist.expand(g.hosts)]
            out[g.name] = (("NodeAddr", "127.0.0.1"), ("Port", port_list(ports)))
        return out

    def start_slurmds(self, names: list[str], boot: bool = False) -> None:
        """Start the slurmd of nodes that the config in DIR/etc now has (`slurmkit nodes add`, the power provider).
        ``boot``: the node comes back from power saving, which slurmctld accepts only with a new boot time
        (slurm.conf(5) 22.05 ResumeProgram: "a responding slurmd and an updated BootTime ... If the node isn't
        actually rebooted ... starting slurmd with "-b" option might be useful"; slurmd(8) -b: "Report node rebooted
        when daemon restarted")."""
        for n in names:
            self.spec.node_index(n)
            (self.dir / "spool" / n).mkdir(exist_ok=True)
        self._start_slurmds(names, boot=boot)

    def stop_slurmds(self, names: list[str], timeout: float = 10.0) -> None:
        """Stop these nodes' slurmd (SIGTERM, then SIGKILL), as a node that leaves or powers off. Its running job
        steps (slurmstepd) are left to Slurm: stopping a slurmd does not end them."""
        pids = self.running_pids()
        victims = [pids[f"slurmd-{n}"] for n in names if f"slurmd-{n}" in pids]
        for pid in victims:
            kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(alive(p) for p in victims):
            time.sleep(0.02)
        for pid in victims:
            if alive(pid):
                kill(pid, signal.SIGKILL)
        for n in names:
            (self.run_dir / f"slurmd-{n}.pid").unlink(missing_ok=True)

    def stop_slurmctld(self, timeout: float = 60.0) -> None:
        """Stop slurmctld with SIGTERM: it saves its state first (jobs and node states survive the next start)."""
        pid = self.running_pids().get("slurmctld")
        if pid:
            kill(pid, signal.SIGTERM)
            wait_for(lambda: not alive(pid), timeout, "slurmctld to stop", self.dir / "log" / "slurmctld.log")
        (self.run_dir / "slurmctld.pid").unlink(missing_ok=True)

    def start_slurmctld(self, timeout: float = 60.0) -> None:
        """Start slurmctld on the files in DIR/etc with the saved state recovered (running jobs keep running on
        their slurmd); nothing happens when it already runs."""
        if "slurmctld" in self.running_pids():
            return
        # the port may linger a moment after the process is gone
        wait_for(lambda: port_free(self.spec.ctld_port), timeout, f"port {self.spec.ctld_port} to be free")
        self._start_slurmctld()

    def restart_slurmctld(self, timeout: float = 60.0) -> None:
        """Stop slurmctld (SIGTERM: it saves its state first) and start it again on the files in DIR/etc with the
        saved state (jobs, node states) recovered: running jobs keep running on their slurmd."""
        self.stop_slurmctld(timeout)
        self.start_slurmctld(timeout)

    def restart_slurmdbd(self, timeout: float = 60.0) -> None:
        """Stop slurmdbd (SIGTERM) and start it again on DIR/etc/slurmdbd.conf (MariaDB keeps running)."""
        if not self.spec.accounting:
            raise LabError("this lab has no slurmdbd (started without --accounting)")
        pid = self.running_pids().get("slurmdbd")
        if pid:
            kill(pid, signal.SIGTERM)
            wait_for(lambda: not alive(pid), timeout, "slurmdbd to stop", self.dir / "log" / "slurmdbd.log")
        (self.run_dir / "slurmdbd.pid").unlink(missing_ok=True)
        wait_for(lambda: port_free(self.spec.dbd_port), timeout, f"port {self.spec.dbd_port} to be free")
        run([self.exe("slurmdbd")], timeout=20, env={"SLURM_CONF": str(self.conf)})
        wait_for(lambda: not port_free(self.spec.dbd_port), 20, "slurmdbd port", self.dir / "log" / "slurmdbd.log")

    def restart_slurmds(self, names: list[str], timeout: float = 10.0) -> None:
        """Restart these nodes' slurmd on the files in DIR/etc (a node not running is started); their job steps
        (slurmstepd) go on and the new slurmd finds them again."""
        self.stop_slurmds(names, timeout)
        self.start_slurmds(names)

    def ctld_log_tail(self, n: int = 5) -> list[str]:
        """The last ``n`` lines of slurmctld's log, errors and fatals first in mind: what a dead controller said."""
        return log_tail(self.dir / "log" / "slurmctld.log", n)

    def _configless_steps(self, root: str) -> list[str]:
        """A configless slurmd has no AuthInfo before it has the files, so it asks munge on the default socket
        (/run/munge/munge.socket.2, munge's own default): in the node's namespace that path leads to the lab's
        munged. /run/slurm (where slurmd links its conf-cache) is private to the node too."""
        q = shlex.quote
        return [
            f"mkdir -p {q(root + '/run/slurm')} {q(root + '/run/munge')}",
            f"mount -t tmpfs tmpfs {q(root + '/run/slurm')}",
            f"mount -t tmpfs tmpfs {q(root + '/run/munge')}",
            f"ln -s {q(str(self.munge_socket))} {q(root + '/run/munge/munge.socket.2')}",
        ]

    def _start_slurmds(self, names: list[str] | None = None, boot: bool = False) -> None:
        procs = []
        q = shlex.quote
        if self.spec.cgroups:
            # nodes that joined after `up` (`nodes add`), or a Lab loaded from DIR/lab.json (the power provider), have
            # no tree here yet: each gets its own under the lab's group, as `up` gave the first ones
            from slurmkit.lab import cgroups

            todo = [n for n in (names if names is not None else self.spec.node_names) if n not in self._node_cgroups]
            if todo:
                self._node_cgroups.update(cgroups.create(self.dir, todo))
        node_cg = self._node_cgroups
        b = " -b" if boot else ""
        # configless_slurm.shtml: "The slurmd --conf-server $host[:$port] option" comes first in the order of
        # precedence (before -f and SLURM_CONF); the files land in SlurmdSpoolDir/conf-cache, with a symlink in
        # /run/slurm/conf, which each node gets on a private tmpfs so the nodes do not share one
        src = f"--conf-server 127.0.0.1:{self.spec.ctld_port}" if self.spec.configless else f"-f {q(str(self.conf))}"
        for name in names if names is not None else self.spec.node_names:
            cg_steps: list[str] = []
            if self.spec.cgroups:
                from slurmkit.lab import cgroups

                cg_steps = cgroups.mount_script(str(self.view / "sys/fs/cgroup") if self.foreign else "/sys/fs/cgroup")
            # the script is fixed text; every value in it goes through shlex.quote
            if self.foreign:
                # the node's own mounts go onto the view (private to this namespace), then slurmd runs inside it:
                # its slurmstepd, prologs and jobs see the root's Slurm and the host's everything else
                v = self.view
                steps = [
                    *cg_steps,
                    f"mount --bind {q(str(self.etc))} {q(str(v / 'etc/slurm'))}",
                    f"mount --bind {q(str(self.etc / 'hosts'))} {q(str(v / 'etc/hosts'))}",
                    *(self._configless_steps(str(v)) if self.spec.configless else []),
                    f"exec chroot {q(str(v))} /usr/sbin/slurmd{b} {src} -N {q(name)}",
                ]
            else:
                steps = [
                    *cg_steps,
                    "mkdir -p /etc/slurm",
                    f"mount --bind {q(str(self.etc))} /etc/slurm",
                    f"mount --bind {q(str(self.etc / 'hosts'))} /etc/hosts",
                    *(self._configless_steps("") if self.spec.configless else []),
                    f"exec {q(host_bin('slurmd'))}{b} {src} -N {q(name)}",
                ]
            script = "; ".join(["set -e", f"hostname {q(name)}", *steps])
            argv = ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script]
            if self.spec.cgroups:
                # into the node's group in every controller first: `unshare --cgroup` makes where it stands the root
                enter = "; ".join(f"echo $$ > {q(str(d / 'cgroup.procs'))}" for d in node_cg[name].values())
                argv = ["sh", "-c", f"set -e; {enter}; exec \"$@\"", "sh", "unshare", "--cgroup", *argv[1:]]
            procs.append(
                (name, subprocess.Popen(argv,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        env={**os.environ, **self.env}))
            )
        for name, p in procs:
            out, _ = p.communicate(timeout=30)
            if p.returncode != 0:
                raise LabError(f"slurmd for {name} failed to start (rc={p.returncode}): {out.decode(errors='replace').strip()[-300:]}")
        # what slurmd's systemd unit does (OOMScoreAdjust=-1000): the OOM killer must pick a job, never slurmd
        for name in names if names is not None else self.spec.node_names:
            pid = read_pid(self.run_dir / f"slurmd-{name}.pid")
            if pid:
                try:
                    Path(f"/proc/{pid}/oom_score_adj").write_text("-1000\n")
                except OSError:
                    pass

    def node_states(self) -> dict[str, str]:
        out = run([self.exe("sinfo"), "-N", "-h", "-o", SINFO_NODE_FORMAT], timeout=10, env=self.env).stdout
        res = {}
        for line in out.splitlines():
            f = line.split("|")
            if len(f) > 1:
                res[f[0]] = f[1]
        return res

    def wait_idle(self, progress: Progress = lambda m: None, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + max(timeout, 5)
        last = ""
        while True:
            try:
                states = self.node_states()
            except SlurmCommandError:
                states = {}
            idle = sum(1 for st in states.values() if st == "idle")
            msg = f"{idle}/{self.spec.nodes} nodes idle"
            if msg != last:
                progress(msg)
                last = msg
            if idle == self.spec.nodes and len(states) == self.spec.nodes:
                return
            if time.monotonic() > deadline:
                bad = {n: st for n, st in states.items() if st != "idle"}
                raise LabError(f"nodes not idle after {timeout:.0f}s: {bad or 'no nodes reported'}; see {self.dir / 'log'}")
            time.sleep(0.05)

    # --- status --------------------------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        pids = self.running_pids()
        nodes: list[dict[str, str]] = []
        problems: list[str] = []
        if pids and "slurmctld" not in pids:
            # the daemons of the lab run but slurmctld does not (a fatal on reconfigure, a kill): say so, with what
            # it wrote last, instead of "up"
            tail = self.ctld_log_tail()
            problems.append("slurmctld is not running" + (f"; its log ends: {' | '.join(tail)}" if tail else ""))
        elif "slurmctld" in pids and not self._ping():
            problems.append(f"slurmctld[{pids['slurmctld']}] does not answer `scontrol ping`")
        if "slurmctld" in pids:
            try:
                out = run([self.exe("sinfo"), "-N", "-h", "-o", SINFO_NODE_FORMAT], timeout=10, env=self.env).stdout
                nodes = [
                    {"name": n.name, "state": n.state + ("+" + "+".join(sorted(n.flags)) if n.flags else ""),
                     "gres": n.gres, "reason": n.reason}
                    for n in parse_sinfo_nodes(out)
                ]
            except SlurmCommandError as exc:
                nodes = [{"name": "?", "state": f"sinfo failed: {exc.one_line()}", "gres": "", "reason": ""}]
        return {"dir": str(self.dir), "up": bool(pids), "daemons": pids, "nodes": nodes, "slurm_conf": str(self.conf),
                "slurm": self.spec.slurm or self.host_release, "problems": problems}

    # --- down ----------------------------------------------------------------------------------------------
    def down(self, progress: Progress = lambda m: None) -> list[str]:
        """Stop what ``up`` started (pid files) and any process left inside the node namespaces."""
        stopped: list[str] = []
        pids = self.running_pids()
        if "slurmctld" in pids:
            try:
                scancel = self.exe("scancel")
                run([scancel, "--full", "--quiet", "--user=root"], timeout=5, env=self.env, check=False)
                # jobs of other users too: cancel every job id the controller still has
                out = run([self.exe("squeue"), "-h", "-o", "%i"], timeout=5, env=self.env, check=False).stdout.split()
                if out:
                    run([scancel, *out], timeout=5, env=self.env, check=False)
            except SlurmCommandError:
                pass
        # leftovers in each node's UTS namespace (linuxproc lets setsid children escape their job)
        node_ns = {uts_ns(pid) for name, pid in pids.items() if name.startswith("slurmd-")}
        node_ns.discard(None)
        host_ns = uts_ns(os.getpid())
        node_ns.discard(host_ns)
        order = [n for n in pids if n.startswith("slurmd-")] + [n for n in ("slurmctld", "slurmdbd", "mariadbd", "munged") if n in pids]
        order += [n for n in pids if n not in order]
        victims = [pids[n] for n in order]
        for pid in pids_in_ns(node_ns):
            if pid not in victims:
                victims.append(pid)
        # a daemon no pid file names: a reconfigure makes slurmd fork a successor that takes over
        # (src/slurmd/slurmd/slurmd.c _try_to_reconfig, slurm-24-11-5-1 and slurm-26-05-3-1) while the exiting one
        # may remove the shared pid file; any process started with this lab's slurm.conf is the lab's
        strays = [pid for pid in pids_with_arg(str(self.conf)) if pid not in victims and pid != os.getpid()]
        if strays:
            order.append(f"{len(strays)} daemon(s) no pid file named")
            victims += strays
        for pid in victims:
            kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(p) for p in victims):
            time.sleep(0.02)
        for pid in victims:
            if alive(pid):
                kill(pid, signal.SIGKILL)
        stopped = [n for n in order]
        for pf in self._pidfiles():
            pf.unlink(missing_ok=True)
        if self.spec.slurm is not None:
            from slurmkit.lab.view import unmount_view

            unmount_view(self.dir)
        from slurmkit.lab import cgroups

        left = cgroups.remove(self.dir)
        if left:
            raise LabError(f"lab down: {len(left)} cgroup(s) still in use, left on the host: {', '.join(left[:5])}")
        if stopped:
            progress(f"stopped {', '.join(stopped)}")
        return stopped


def host_cores() -> int:
    """The CPUs this process may run on: the cgroup mode's nodes claim exactly these (a real cpuset each)."""
    return len(os.sched_getaffinity(0))

