"""The lab's Slurm daemons: munged, slurmctld and one slurmd per node, each node in its own UTS + mount namespace
(``unshare``; with --cgroups its own cgroup namespace too), started from the host's binaries or chrooted into a
foreign release's view, configless or on DIR/etc; their start, stop and restart (what `slurmkit nodes add|remove`
and the power provider drive), and waiting until every node is idle."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from slurmkit.backend.parse import SINFO_NODE_FORMAT
from slurmkit.backend.run import log_tail, run
from slurmkit.errors import LabError, SlurmCommandError
from slurmkit.lab.base import LabBase, Progress
from slurmkit.lab.ports import port_free
from slurmkit.lab.procs import alive, host_bin, kill, read_pid, wait_for


class DaemonsMixin(LabBase):
    def _start_munged(self) -> None:
        from slurmkit import safefs

        key = self.dir / "munge" / "munge.key"
        # 0400 from its open on (issue 32 item 3): a key written 0644 and chmod'ed after could be opened meanwhile
        # by any user of this machine, who would then mint credentials for any uid, root's, to the lab's Slurm
        key.unlink(missing_ok=True)
        safefs.write_new(key, os.urandom(1024), 0o400)
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

    def _start_slurmctld(self) -> None:
        run([self.exe("slurmctld"), "-f", str(self.conf), "-i"], timeout=20, env=self.env)
        wait_for(lambda: self._ping(), 15, "slurmctld to answer `scontrol ping`", self.dir / "log" / "slurmctld.log")

    def _ping(self) -> bool:
        try:
            return "UP" in run([self.exe("scontrol"), "ping"], timeout=3, env=self.env, check=False).stdout
        except SlurmCommandError:
            return False

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
        # each node's namespace is made on the CPU whose namespace ids are lowest, and its slurmd gets every CPU back
        # at once: otherwise a job's private /tmp fails on Linux 6.18 (nsorder.py says why)
        from slurmkit.lab import nsorder

        ns_cpu = nsorder.oldest_cpu()
        unpin = [f"taskset -a -p -c {nsorder.cpu_list()} $$ >/dev/null 2>&1 || true"] if ns_cpu is not None else []
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
            script = "; ".join(["set -e", *unpin, f"hostname {q(name)}", *steps])
            argv = ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script]
            if self.spec.cgroups:
                # into the node's group in every controller first: `unshare --cgroup` makes where it stands the root
                enter = "; ".join(f"echo $$ > {q(str(d / 'cgroup.procs'))}" for d in node_cg[name].values())
                argv = ["sh", "-c", f"set -e; {enter}; exec \"$@\"", "sh", "unshare", "--cgroup", *argv[1:]]
            if ns_cpu is not None:
                argv = ["taskset", "-c", str(ns_cpu), *argv]
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
