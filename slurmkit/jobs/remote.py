"""gpusub from a machine without Slurm: ``gpusub --remote [USER@]HOST[:PORT] ...`` over SSH (issue 34 item 3).

The laptop ships the working tree to a per-run dir on the cluster and runs the cluster's own ``gpusub`` there; every
later command (``status``, ``logs``, ``cancel``, ``wait``) is the cluster's ``gpusub`` too, so the job, its run dir,
its placement and its preemption contract are exactly those of a submit on the login node.

Transport: the user's own ``ssh`` (their ``~/.ssh/config``, keys and agent; ``--ssh-config`` is ``ssh -F``,
``--ssh-option`` is ``ssh -o``) with connection reuse: one OpenSSH ControlMaster per target (``ControlPersist``),
started on its own (``-o ControlMaster=yes -N -f``; adding ``-M`` to that would make it ``ask``, ssh(1), and
refuse every session without an askpass) and its output on /dev/null (a master that ``ControlMaster=auto`` backgrounds
from inside a call keeps that call's stderr pipe open, and a caller reading it to the end hangs until the master
exits); every call then goes through the master's socket, or connects directly when the master is gone.

Per-run dir on the cluster (``--remote-dir``, default ``gpusub-remote`` under the remote home)::

    <token>/tree/        the working tree: ``git archive HEAD`` + ``git diff HEAD --binary`` (+ untracked files that
                         .gitignore does not exclude), or an rsync of the directory when it is no git work tree
    <token>/ship/        what was shipped: head.tar, tree.patch, untracked.tar (the diff is kept as sent)
    <token>/run/         gpusub's run dir (--run-dir): script.sh, submit.json, logs/ ...
    <token>/.submit/     created by mkdir (atomic) by the one call that starts the submission
    <token>/submit.out, submit.err, submit.rc     the remote gpusub's output and exit code

A dropped connection never orphans or duplicates a job: the token (client-generated, or ``--remote-token``) names
the run dir; the submission starts only in the call whose ``mkdir .submit`` succeeds, detached from the SSH session
(``setsid``), so a connection lost mid-submit neither kills it nor lets a retry submit again; every retry (and a later
``gpusub --remote-token TOKEN`` of the same run) waits for ``submit.rc`` and reads the same job id. A tree is never
re-shipped into a run that was submitted.

Nothing the remote side sends is trusted here: its output (logs included) is printed with control characters
replaced (a remote
account could otherwise drive the local terminal), a job id is accepted only as digits, and no remote path is ever
opened locally.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from slurmkit.errors import SlurmkitError, UsageError

# ssh(1) of OpenSSH: "ssh exits with the exit status of the remote command or with 255 if an error occurred". The
# remote commands below map their own 255 to 254, so 255 always means the connection (or ssh itself) failed.
SSH_FAILED = 255
RETRIES = 6  # reconnects after a lost connection: 1, 2, 4, 8, 15, 15 s apart (~45 s in all)
TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")
_TARGET_RE = re.compile(r"(?:(?P<user>[^@\s:/]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^@\s:/\[\]]+)(?::(?P<port>[0-9]+))?")


class RemoteError(SlurmkitError):
    """The remote side could not be reached (after the retries), or answered something unreadable."""


@dataclass(frozen=True)
class Target:
    user: str | None
    host: str
    port: int | None

    @classmethod
    def parse(cls, text: str) -> Target:
        m = _TARGET_RE.fullmatch(text.strip())
        if not m or m.group("host").startswith("-"):
            raise UsageError(f"--remote {text!r}: expected [USER@]HOST[:PORT] (a host of your ssh config works too)")
        port = int(m.group("port")) if m.group("port") else None
        if port is not None and not 0 < port < 65536:
            raise UsageError(f"--remote {text!r}: port {port} is out of range")
        return cls(m.group("user"), m.group("host").strip("[]"), port)

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        return self.destination + (f":{self.port}" if self.port else "")


def clean(text: str) -> str:
    """Remote text for the local terminal: control characters but newline, tab and carriage return (a progress bar's)
    become '?' -- ESC above all, whose sequences can retitle, remap or answer back through the terminal."""
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x9b]", "?", text)


def _state_dir(environ: Mapping[str, str]) -> Path:
    if environ.get("SLURMKIT_STATE_DIR"):
        return Path(environ["SLURMKIT_STATE_DIR"])
    base = environ.get("XDG_STATE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"),
                                                         ".local", "state")
    return Path(base) / "slurmkit"


@dataclass
class Remote:
    """One cluster reached over ssh. ``call`` runs a POSIX shell command there, reconnecting after a lost
    connection (only for commands that are safe to run twice: every command this module sends is)."""

    target: Target
    ssh_config: str | None = None
    ssh_options: tuple[str, ...] = ()
    gpusub: str = "gpusub"  # the cluster's gpusub: a command (words), e.g. "/opt/slurmkit/bin/gpusub"
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    retries: int = RETRIES
    persist: str = "10m"
    err: IO[str] = field(default_factory=lambda: sys.stderr)
    sleep: Callable[[float], None] = time.sleep

    # --- ssh ------------------------------------------------------------------------------------------------
    def control_path(self) -> str:
        """``<state>/ssh/%C``: %C is ssh's hash of local host, remote host, port and user (ssh_config(5)), short
        enough for a socket path (sun_path holds 108 bytes on Linux). The directory is private (0700)."""
        d = _state_dir(self.environ) / "ssh"
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        if d.stat().st_mode & 0o077:
            os.chmod(d, 0o700)
        return str(d / "%C")

    def base_argv(self) -> list[str]:
        """ssh and its options, without the destination. The user's ``-o`` come first: ssh takes the first value
        it obtains for each option (ssh_config(5)), so theirs win over the reuse defaults below, which in turn win
        over their config file (``ControlMaster=no`` there does not turn reuse off; ``--ssh-option`` does)."""
        argv = ["ssh"]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        for opt in self.ssh_options:
            argv += ["-o", opt]
        argv += ["-o", f"ControlPath={self.control_path()}", "-o", "ServerAliveInterval=15",
                 "-o", "ServerAliveCountMax=3"]
        if self.target.port:
            argv += ["-p", str(self.target.port)]
        return argv

    @property
    def reuse(self) -> bool:
        """False when the user turned connection sharing off (``--ssh-option ControlMaster=no`` or
        ``ControlPath=none``): then no master is started (a ``-N -f`` master without a socket would be a
        background connection that nothing uses and nothing ends)."""
        for opt in self.ssh_options:
            key, _, val = opt.replace(" ", "=", 1).partition("=")
            if (key.lower(), val.strip().lower()) in (("controlmaster", "no"), ("controlpath", "none")):
                return False
        return True

    def _master(self) -> None:
        """Start the ControlMaster when none answers (``ssh -O check``); its failure is left to the call, which
        then connects on its own and reports ssh's own error."""
        if not self.reuse:
            return
        base = self.base_argv()
        chk = subprocess.run([*base, "-O", "check", self.target.destination], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.environ)
        if chk.returncode == 0:
            return
        # no BatchMode: a password or second factor is asked here (on /dev/tty), once per ControlPersist
        subprocess.run([*base, "-o", "ControlMaster=yes", "-o", f"ControlPersist={self.persist}", "-N", "-f",
                        self.target.destination],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=self.environ, timeout=120)

    def argv(self, command: str) -> list[str]:
        """The ssh call for ``command``; ``ControlMaster=no`` uses the master's socket when it is there and
        connects on its own otherwise (never backgrounding a master of its own: see the module docstring)."""
        return [*self.base_argv(), "-o", "ControlMaster=no", "-T", self.target.destination, "--", command]

    def call(self, command: str, *, stdin: bytes | Path | None = None, stream: IO[bytes] | None = None,
             what: str = "command") -> subprocess.CompletedProcess:
        """Run ``command`` (POSIX sh syntax, run by the remote login shell) and return its result, stdout and
        stderr as bytes (``stream``: stdout written there as it comes, and left out of the result). On ssh's own
        failure (exit 255) it reconnects and runs it again, at most ``retries`` times, saying so on ``err``."""
        delay = 1.0
        for attempt in range(self.retries + 1):
            self._master()
            src = open(stdin, "rb") if isinstance(stdin, Path) else None  # noqa: SIM115 - closed below
            try:
                proc = subprocess.run(self.argv(command), env=self.environ,
                                      input=stdin if isinstance(stdin, bytes) else None,
                                      stdin=src if src is not None else (None if isinstance(stdin, bytes)
                                                                         else subprocess.DEVNULL),
                                      stdout=stream if stream is not None else subprocess.PIPE,
                                      stderr=subprocess.PIPE)
            finally:
                if src is not None:
                    src.close()
            if proc.returncode != SSH_FAILED:
                return proc
            why = " ".join((proc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]) or "no output"
            if attempt == self.retries:
                raise RemoteError(f"ssh {self.target}: {what}: the connection failed {attempt + 1} times, last: "
                                  f"{clean(why)}")
            self.err.write(f"gpusub: ssh {self.target}: connection lost during {what} ({clean(why)}); "
                           f"reconnecting in {delay:g}s ({attempt + 1}/{self.retries})\n")
            self.err.flush()
            self.sleep(delay)
            delay = min(delay * 2, 15.0)
        raise AssertionError("unreachable")

    def gpusub_cmd(self, args: Sequence[str]) -> str:
        """The cluster's gpusub with ``args``, as a command whose own exit 255 reads 254 (255 is ssh's)."""
        return f"{self.gpusub} {shlex.join(args)}; rc=$?; [ $rc -eq 255 ] && rc=254; exit $rc"

    def close(self) -> None:
        """Stop the ControlMaster (``ssh -O exit``)."""
        subprocess.run([*self.base_argv(), "-O", "exit", self.target.destination], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.environ)

    # --- the commands -----------------------------------------------------------------------------------------
    def status(self, job_ids: Sequence[str]) -> list[dict[str, object]]:
        """``gpusub status --json`` on the cluster: one dict per job (JobStatus's fields)."""
        proc = self.call(self.gpusub_cmd(["status", "--json", *job_ids]), what="status")
        try:
            rows = json.loads(proc.stdout.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            err = clean(proc.stderr.decode(errors="replace").strip())
            raise RemoteError(f"ssh {self.target}: gpusub status --json: no JSON back (exit {proc.returncode}"
                              f"{': ' + err if err else ''})") from exc
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise RemoteError(f"ssh {self.target}: gpusub status --json: expected a list of objects")
        return rows

    def wait(self, job_id: str, poll: Callable[[], float] | None = None,
             on_change: Callable[[dict[str, object]], None] | None = None) -> dict[str, object]:
        """Poll ``status`` until the job has finished (each poll its own call: a connection lost between polls
        costs nothing, and one lost during a poll is retried). -> the last status."""
        from slurmkit.jobs.monitor import Backoff

        nap = poll or Backoff(first=1.0, cap=30.0, fast_cap=5.0, fast_for=120.0)
        last = None
        while True:
            rows = self.status([job_id])
            row: dict[str, object] = rows[0] if rows else {"job_id": job_id, "state": "UNKNOWN", "source": "unknown"}
            key = (row.get("state"), row.get("restarts"))
            if key != last and on_change is not None:
                on_change(row)
            last = key
            if row.get("finished") or row.get("state") == "UNKNOWN":
                return row
            self.sleep(nap())


def job_status(row: Mapping[str, object]):  # type: ignore[no-untyped-def]
    """A remote status row as a JobStatus (for exit_status and line())."""
    from dataclasses import fields

    from slurmkit.jobs.monitor import JobStatus

    names = {f.name for f in fields(JobStatus)}
    kw: dict[str, Any] = {k: v for k, v in row.items() if k in names}
    kw.update(job_id=str(row.get("job_id", "")), state=str(row.get("state", "UNKNOWN")),
              source=str(row.get("source", "unknown")))
    return JobStatus(**kw)


# --- shipping the tree ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tree:
    """What is shipped: the local root, how, and the script's and the working directory's place in it."""

    root: str
    kind: str  # "git" | "rsync"
    script_rel: str  # the script, relative to the remote working directory
    cwd_rel: str  # the working directory, relative to the root ("." when outside it)
    sha: str = ""
    dirty: bool = False
    untracked: tuple[str, ...] = ()


def _git(root: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", root, *args], capture_output=True, timeout=120)


def find_tree(script: str, cwd: str) -> Tree:
    """The git work tree holding the script (its top), else the working directory when it holds the script, else
    the script's directory."""
    script = os.path.abspath(os.path.join(cwd, script))
    if not os.path.isfile(script):
        raise UsageError(f"{script}: no such file (the script is shipped from here to the cluster)")
    top = _git(os.path.dirname(script), "rev-parse", "--show-toplevel")
    if top.returncode == 0 and top.stdout.strip():
        root, kind = os.path.realpath(top.stdout.decode().strip()), "git"
    else:
        inside = os.path.commonpath([os.path.realpath(cwd), os.path.realpath(script)]) == os.path.realpath(cwd)
        root, kind = os.path.realpath(cwd if inside else os.path.dirname(script)), "rsync"
    real_script, real_cwd = os.path.realpath(script), os.path.realpath(cwd)
    if os.path.commonpath([root, real_script]) != root:
        raise UsageError(f"{script}: outside the tree that is shipped ({root})")
    cwd_rel = os.path.relpath(real_cwd, root) if os.path.commonpath([root, real_cwd]) == root else "."
    script_rel = os.path.relpath(real_script, os.path.join(root, cwd_rel))
    if kind == "rsync":
        return Tree(root=root, kind=kind, script_rel=script_rel, cwd_rel=cwd_rel)
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    if head.returncode != 0:
        raise UsageError(f"{root}: a git work tree without a commit: commit once, or ship a directory that is "
                         "no git work tree")
    return Tree(root=root, kind=kind, script_rel=script_rel, cwd_rel=cwd_rel, sha=head.stdout.decode().strip())


def pack_git(tree: Tree, out: Path) -> Tree:
    """``out``: a tar of head.tar (``git archive HEAD``), tree.patch (``git diff HEAD --binary``: staged and
    unstaged changes, binary files and modes included) and untracked.tar (files git does not track and .gitignore
    does not exclude: a new train.py the user has not added is still what they run)."""
    with tempfile.TemporaryDirectory(prefix="gpusub-ship-") as tmp:
        head = Path(tmp) / "head.tar"
        with open(head, "wb") as fh:
            r = subprocess.run(["git", "-C", tree.root, "archive", "--format=tar", "HEAD"], stdout=fh,
                               stderr=subprocess.PIPE, timeout=600)
        if r.returncode != 0:
            raise UsageError(f"{tree.root}: git archive HEAD failed: {r.stderr.decode(errors='replace').strip()}")
        diff = _git(tree.root, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff")
        if diff.returncode != 0:
            raise UsageError(f"{tree.root}: git diff HEAD failed: {diff.stderr.decode(errors='replace').strip()}")
        (Path(tmp) / "tree.patch").write_bytes(diff.stdout)
        others = _git(tree.root, "ls-files", "-z", "--others", "--exclude-standard")
        names = tuple(n for n in others.stdout.decode(errors="surrogateescape").split("\0") if n)
        with tarfile.open(Path(tmp) / "untracked.tar", "w") as tf:
            for n in names:
                tf.add(os.path.join(tree.root, n), arcname=n, recursive=False)
        with tarfile.open(out, "w") as outer:
            for n in ("head.tar", "tree.patch", "untracked.tar"):
                outer.add(Path(tmp) / n, arcname=n)
    return Tree(**{**tree.__dict__, "dirty": bool(diff.stdout), "untracked": names})


# the remote halves: POSIX sh, run by the login shell through `sh -c` (the remote login shell may be csh or fish)
_SHIP = r"""set -eu
d=$1
mkdir -p "$d"
cd "$d"
if [ -e .submit ]; then echo "already-submitted"; exit 0; fi
new=.ship.$$
rm -rf "$new"; mkdir -p "$new/tree"
"""
_UNPACK_GIT = r"""cd "$new"
tar -xf -
tar -xf head.tar -C tree
if [ -s tree.patch ]; then
  # outside any repository (GIT_CEILING_DIRECTORIES): git apply then patches the files below it, as patch(1) would
  (cd tree && GIT_CEILING_DIRECTORIES=$(dirname "$PWD") git apply --binary --whitespace=nowarn ../tree.patch)
fi
tar -xf untracked.tar -C tree
cd ..
"""
_PLACE = r"""if [ -e .submit ]; then rm -rf "$new"; echo "already-submitted"; exit 0; fi
rm -rf tree ship
mv "$new/tree" tree
mkdir -p ship; for f in head.tar tree.patch untracked.tar; do [ -e "$new/$f" ] && mv "$new/$f" ship/; done
rm -rf "$new"
pwd
"""
# start the submission at most once (mkdir is atomic), detached from this session; then wait for its exit code
_SUBMIT = r"""set -u
d=$1; rel=$2; shift 2
cd "$d" || exit 2
command -v setsid >/dev/null || { echo "gpusub --remote: setsid not found on $(hostname)" >&2; exit 2; }
if mkdir .submit 2>/dev/null; then
  (cd "tree/$rel" && exec setsid sh -c 'd=$1; shift
    echo "$(hostname) $$" >"$d/.submit/owner.tmp"; mv "$d/.submit/owner.tmp" "$d/.submit/owner"
    "$@" >"$d/.submit/out" 2>"$d/.submit/err" </dev/null
    echo $? >"$d/.submit/rc"
    mv "$d/.submit/out" "$d/submit.out"; mv "$d/.submit/err" "$d/submit.err"; mv "$d/.submit/rc" "$d/submit.rc"' \
    sh "$d" "$@" </dev/null >/dev/null 2>&1) &
fi
# wait for the result; a submitter that died on this host (killed with the session: logind's KillUserProcesses, an
# OOM kill) writes none: then the job id its run dir recorded right after sbatch, or a clear failure, never a hang
me=$(hostname); n=0
while [ ! -e submit.rc ]; do
  if [ -e .submit/owner ]; then
    read -r host pid <.submit/owner
    if [ "$host" = "$me" ] && ! kill -0 "$pid" 2>/dev/null && [ ! -e submit.rc ]; then
      jid=$(sed -n 's/^ *"job_id": "\([0-9][0-9]*\)".*/\1/p' run/submit.json 2>/dev/null)
      if [ -n "$jid" ]; then
        echo "submitted job $jid"
        echo "gpusub --remote: the submission on $host (pid $pid) ended before its output was kept; its run dir recorded job $jid" >&2
        exit 0
      fi
      echo "gpusub --remote: the submission on $host (pid $pid) ended without a result and its run dir recorded no job id (had sbatch run, squeue --me shows the job); $d" >&2
      exit 2
    fi
  elif [ $((n += 1)) -gt 300 ]; then
    echo "gpusub --remote: no submission started in 60 s ($d/.submit has no owner)" >&2; exit 2
  fi
  sleep 0.2
done
cat submit.out; cat submit.err >&2
rc=$(cat submit.rc); [ "$rc" -eq 255 ] && rc=254; exit "$rc"
"""


def _sh(script: str, *args: str) -> str:
    """``sh -c SCRIPT sh ARGS...`` for the remote login shell, on one line: the script travels base64-encoded and
    is evaluated by sh, since csh and tcsh (login shells of some clusters) refuse a newline inside quotes."""
    import base64

    b64 = base64.b64encode(script.encode()).decode()
    return shlex.join(["sh", "-c", f'eval "$(printf %s {b64} | base64 -d)"', "sh", *args])


@dataclass(frozen=True)
class Submitted:
    token: str
    run_root: str  # the per-run dir on the cluster (absolute, as the cluster printed it)
    job_id: str | None
    rc: int
    stdout: str
    stderr: str
    already: bool  # the run had been submitted before (a retry with the same --remote-token)


def new_token(name: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)[:60] or "job"
    return f"{safe}-{stamp}-{os.urandom(4).hex()}"


def check_token(token: str) -> str:
    if not TOKEN_RE.fullmatch(token):
        raise UsageError(f"--remote-token {token!r}: letters, digits and _.+- only (at most 128), not starting with "
                         "a punctuation mark")
    return token


def check_remote_dir(path: str) -> str:
    if not path or "\n" in path or "\0" in path:
        raise UsageError(f"--remote-dir {path!r}: a directory on the cluster (relative: under the remote home)")
    return path


def ship(remote: Remote, tree: Tree, run_dir: str) -> tuple[str, bool]:
    """The tree into ``run_dir``/tree on the cluster. -> (the run dir's absolute path there, already submitted)."""
    if tree.kind == "git":
        with tempfile.TemporaryDirectory(prefix="gpusub-ship-") as tmp:
            outer = Path(tmp) / "ship.tar"
            pack_git(tree, outer)
            proc = remote.call(_sh(_SHIP + _UNPACK_GIT + _PLACE, run_dir), stdin=outer, what="shipping the tree")
    else:
        # rsync into a fresh directory beside the run's, then the same placement (never into a submitted run)
        stage = f"{run_dir.rstrip('/')}/.rsync"
        pre = remote.call(_sh('set -eu; mkdir -p "$1"; [ -e "$1/.submit" ] && echo already-submitted; '
                              'mkdir -p "$1/.rsync"; exit 0', run_dir), what="preparing the run dir")
        if pre.returncode != 0:
            raise RemoteError(f"ssh {remote.target}: cannot create {run_dir}: "
                              f"{clean(pre.stderr.decode(errors='replace').strip())}")
        if b"already-submitted" not in pre.stdout:
            _rsync(remote, tree.root, stage)
        proc = remote.call(_sh(_SHIP + 'rmdir "$new/tree"; mv .rsync "$new/tree"\n' + _PLACE, run_dir),
                           what="placing the tree")
    out = proc.stdout.decode(errors="replace")
    if proc.returncode != 0:
        raise RemoteError(f"ssh {remote.target}: shipping the tree to {run_dir} failed (exit {proc.returncode}): "
                          f"{clean(proc.stderr.decode(errors='replace').strip()) or 'no output'}")
    if "already-submitted" in out:
        return "", True
    return out.strip().splitlines()[-1] if out.strip() else run_dir, False


def _rsync(remote: Remote, src: str, dest: str) -> None:
    ssh = shlex.join([*remote.base_argv(), "-o", "ControlMaster=no"])
    argv = ["rsync", "-a", "--delete", "--exclude=/gpusub-runs/", "-e", ssh, f"{src.rstrip('/')}/",
            f"{remote.target.destination}:{dest}/"]
    delay = 1.0
    for attempt in range(remote.retries + 1):
        remote._master()
        r = subprocess.run(argv, env=remote.environ, stdin=subprocess.DEVNULL, capture_output=True)
        if r.returncode == 0:
            return
        why = clean(" ".join(r.stderr.decode(errors="replace").strip().splitlines()[-1:]))
        # rsync(1): 12 protocol data stream error, 30 timeout, 35 daemon timeout, 255 ssh: the connection
        if r.returncode not in (12, 30, 35, 255) or attempt == remote.retries:
            raise RemoteError(f"rsync to {remote.target}:{dest} failed (exit {r.returncode}): {why}")
        remote.err.write(f"gpusub: rsync to {remote.target}: connection lost ({why}); reconnecting in {delay:g}s\n")
        remote.sleep(delay)
        delay = min(delay * 2, 15.0)


def submit(remote: Remote, tree: Tree, gpusub_args: Sequence[str], token: str, remote_dir: str) -> Submitted:
    """Ship the tree (unless this token's run was submitted) and run the cluster's gpusub once for it."""
    run_dir = f"{remote_dir.rstrip('/')}/{token}"
    abs_dir, already = ship(remote, tree, run_dir)
    if already:  # submitted before: the run dir's absolute path, as the cluster's shell has it
        probe = remote.call(_sh('cd "$1" && pwd', run_dir), what="finding the run dir")
        lines = probe.stdout.decode(errors="replace").strip().splitlines()
        abs_dir = lines[-1] if probe.returncode == 0 and lines else run_dir
    args = ["--run-dir", f"{abs_dir}/run", *gpusub_args]
    proc = remote.call(_sh(_SUBMIT, abs_dir, tree.cwd_rel, *shlex.split(remote.gpusub), *args),
                       what="the submission")
    out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    m = re.search(r"^submitted job ([0-9]+)$", out, re.M)
    return Submitted(token=token, run_root=abs_dir, job_id=m.group(1) if m else None, rc=proc.returncode,
                     stdout=out, stderr=err, already=already)


def follow_logs(remote: Remote, job_id: str, out: IO[str]) -> int:
    """``gpusub logs -f JOB`` on the cluster, to ``out`` (``clean``ed); after a lost connection it runs again and
    skips what was already written (the logs only grow). -> its exit code (the job's, as ``gpusub --follow``)."""
    import codecs

    seen = 0  # bytes of the remote stream already written
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    delay = 1.0
    for attempt in range(remote.retries + 1):
        remote._master()
        pos = 0
        with tempfile.TemporaryFile() as errf:  # a file, not a pipe: nothing blocks while stdout is read
            proc = subprocess.Popen(remote.argv(remote.gpusub_cmd(["logs", "-f", job_id])), env=remote.environ,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errf)
            pipe = proc.stdout
            assert pipe is not None
            while True:
                chunk = os.read(pipe.fileno(), 65536)
                if not chunk:
                    break
                start = max(0, seen - pos)
                pos += len(chunk)
                if start < len(chunk):
                    out.write(clean(decoder.decode(chunk[start:])))
                    out.flush()
                    seen += len(chunk) - start
            rc = proc.wait()
            pipe.close()
            errf.seek(0)
            err = errf.read().decode(errors="replace")
        if rc != SSH_FAILED:
            out.write(clean(decoder.decode(b"", final=True)))
            if err:
                remote.err.write(clean(err))
            return rc
        if attempt == remote.retries:
            raise RemoteError(f"ssh {remote.target}: logs -f: the connection failed {attempt + 1} times")
        why = clean(" ".join(err.strip().splitlines()[-1:]))
        remote.err.write(f"gpusub: ssh {remote.target}: connection lost while following job {job_id} ({why}); "
                         f"reconnecting in {delay:g}s\n")
        remote.sleep(delay)
        delay = min(delay * 2, 15.0)
    raise AssertionError("unreachable")


def run_in_tree(remote: Remote, run_dir: str, cwd_rel: str, gpusub_args: Sequence[str]) -> subprocess.CompletedProcess:
    """The cluster's gpusub in the shipped tree, directly (a --dry-run: nothing is submitted, nothing to guard)."""
    script = 'd=$1; rel=$2; shift 2; cd "$d/tree/$rel" || exit 2; "$@"; rc=$?; [ $rc -eq 255 ] && rc=254; exit $rc'
    return remote.call(_sh(script, run_dir, cwd_rel, *shlex.split(remote.gpusub), *gpusub_args), what="gpusub")


@dataclass
class RemoteJob:
    """A handle on a job submitted through ``Remote`` (``gpusub --remote`` or ``submit_script``): what launch's
    ``Job`` offers, each call one ssh call to the cluster's gpusub (reconnecting after a lost connection)."""

    remote: Remote
    job_id: str
    run_root: str = ""  # the per-run dir on the cluster

    def status(self):  # type: ignore[no-untyped-def]
        rows = self.remote.status([self.job_id])
        return job_status(rows[0] if rows else {"job_id": self.job_id, "state": "UNKNOWN", "source": "unknown"})

    @property
    def state(self) -> str:
        return str(self.status().state)

    def wait(self):  # type: ignore[no-untyped-def]
        """Until the job has finished; -> its last JobStatus (``exit_status`` of it is what ``gpusub wait`` exits
        with)."""
        return job_status(self.remote.wait(self.job_id))

    def logs(self) -> str:
        proc = self.remote.call(self.remote.gpusub_cmd(["logs", self.job_id]), what="logs")
        if proc.returncode != 0:
            raise RemoteError(f"ssh {self.remote.target}: gpusub logs {self.job_id}: "
                              f"{clean(proc.stderr.decode(errors='replace').strip()) or f'exit {proc.returncode}'}")
        return clean(proc.stdout.decode(errors="replace"))

    def cancel(self, signal: str | None = None) -> None:
        args = ["cancel", *(["--signal", signal] if signal else []), self.job_id]
        proc = self.remote.call(self.remote.gpusub_cmd(args), what="cancel")
        if proc.returncode != 0:
            raise RemoteError(f"ssh {self.remote.target}: gpusub cancel {self.job_id}: "
                              f"{clean(proc.stderr.decode(errors='replace').strip()) or f'exit {proc.returncode}'}")


def submit_script(remote: Remote, script: str, *args: str, options: Sequence[str] = (), token: str | None = None,
                  remote_dir: str = "gpusub-remote", cwd: str | None = None) -> RemoteJob:
    """The API beside ``gpusub --remote``: ship the tree holding ``script`` and submit it with gpusub ``options``
    (its flags, e.g. ``["-N", "2", "--time", "1:00:00"]``) and the script's ``args``. The same token twice never
    submits twice (the second call returns the first call's job)."""
    tree = find_tree(script, cwd or os.getcwd())
    tok = check_token(token) if token else new_token(os.path.splitext(os.path.basename(script))[0])
    res = submit(remote, tree, [*options, tree.script_rel, "--", *args], tok, check_remote_dir(remote_dir))
    if res.rc != 0 or res.job_id is None:
        raise RemoteError(f"ssh {remote.target}: gpusub (exit {res.rc}): "
                          f"{clean(res.stderr.strip() or res.stdout.strip()) or 'no job id in its output'}")
    return RemoteJob(remote=remote, job_id=res.job_id, run_root=res.run_root)


# JobSpec field -> the gpusub option's click name, where they differ
_CLICK_NAMES = {"time": "time_", "env": "env_pairs"}


def gpusub_flags(opts: Mapping[str, Any]) -> list[str]:
    """``launch.submit``'s options (JobSpec names) as gpusub flags, from gpusub's own click options (so a new
    option needs no second table here): ``nodes=2`` -> ``--nodes 2``, ``exclusive=True`` -> ``--exclusive``,
    ``cpu_bind=False`` -> ``--no-cpu-bind``, ``env={"A": "1"}`` -> ``--env A=1``, ``sbatch_args=[...]`` repeated."""
    import click

    from slurmkit.cli.gpusub_cmds import submit_cmd

    params = {p.name: p for p in submit_cmd.params if isinstance(p, click.Option)}
    out: list[str] = []
    for key, val in opts.items():
        p = params.get(_CLICK_NAMES.get(key, key))
        if p is None or key in ("run_dir", "remote", "follow_", "dry_run") or key.startswith(("ssh_", "remote_")):
            raise UsageError(f"launch.submit(remote=...): option {key!r} has no gpusub flag to send "
                             "(the run dir is the cluster's)")
        flag = max(p.opts, key=len)
        if p.is_flag:
            if p.secondary_opts and not val:
                out.append(max(p.secondary_opts, key=len))
            elif val:
                out.append(flag)
            continue
        if key == "env" and isinstance(val, Mapping):
            vals: list[object] = [f"{k}={v}" for k, v in val.items()]
        elif p.multiple:
            vals = list(val) if not isinstance(val, str) else [val]
        else:
            vals = [val]
        for v in vals:
            out += [flag, "=".join(v) if isinstance(v, tuple) else str(v)]
    return out
