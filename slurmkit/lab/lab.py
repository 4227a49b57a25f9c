"""A real multi-node Slurm on this one machine: private munged, one slurmctld, N ``slurmd -N nodeI``.

Each slurmd runs in its own UTS + mount namespace (``unshare``), so ``hostname`` inside a job prints the node
name, ``/etc/hosts`` resolves every node, and ``/etc/slurm`` is the lab's config dir. Fake GPUs are character
devices (``mknod c 195 N``) because gres.conf needs ``File=``. The config comes from slurmkit's own generator;
only what a single host needs is overridden (ports, paths, auth socket, linuxproc: lab/config.py).

Everything the lab starts is recorded in pid files under DIR/run; ``down`` stops exactly those processes plus
whatever jobs left behind inside the node namespaces.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import asdict
from pathlib import Path

from slurmkit.backend.parse import SINFO_NODE_FORMAT, parse_sinfo_nodes
from slurmkit.backend.run import run
from slurmkit.errors import LabError, SlurmCommandError, UsageError
from slurmkit.lab.accounting import ACCOUNTING_BINARIES, APT_ACCOUNTING, AccountingMixin
from slurmkit.lab.base import Progress
from slurmkit.lab.config import ConfigMixin
from slurmkit.lab.daemons import DaemonsMixin
from slurmkit.lab.ports import check_ports
from slurmkit.lab.procs import alive, kill, pids_in_ns, pids_with_arg, uts_ns
from slurmkit.lab.spec import LabSpec
from slurmkit.release import release_key

APT_PACKAGES = "slurmctld slurmd slurm-client munge"
REQUIRED_BINARIES = ("slurmctld", "slurmd", "munged", "sinfo", "scontrol", "sbatch", "srun", "squeue", "scancel", "unshare")


class Lab(ConfigMixin, DaemonsMixin, AccountingMixin):
    """A lab: the concerns are mixins (lab/config.py the files, lab/daemons.py the daemons, lab/accounting.py
    slurmdbd and tenants, lab/hooks.py the hooks, over lab/base.py's paths and release); this class is its
    lifecycle: preflight, up, status, down."""

    @classmethod
    def load(cls, directory: str) -> Lab:
        """A lab that ``up`` started in ``directory`` (its spec is saved there)."""
        p = Path(directory).resolve() / "lab.json"
        if not p.exists():
            return cls(LabSpec(dir=directory))
        return cls(LabSpec(**json.loads(p.read_text())))

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

    def _mount_release(self, progress: Progress) -> None:
        from slurmkit.lab import image, view

        img = image.ensure(self.release, progress)
        progress(f"Slurm {img.slurm_version} from {img.root}")
        where = view.mount_view(img, self.dir)
        view.write_wrappers(where, self.bin_dir, img.root)

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
