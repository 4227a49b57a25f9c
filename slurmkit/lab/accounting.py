"""``lab up --accounting``: MariaDB (the host's, or a root's where the host's does not serve slurmdbd) and
slurmdbd on the lab's ports, a slurmdbd restart, and the inventory's tenants applied with `slurmkit accounts apply`
(its QOS before slurmctld starts)."""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

from slurmkit.backend.run import run
from slurmkit.errors import LabError, SlurmCommandError
from slurmkit.lab.base import LabBase, Progress
from slurmkit.lab.ports import port_free
from slurmkit.lab.procs import alive, host_bin, kill, wait_for

APT_ACCOUNTING = "slurmdbd mariadb-server"
ACCOUNTING_BINARIES = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacct")

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


class AccountingMixin(LabBase):
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
