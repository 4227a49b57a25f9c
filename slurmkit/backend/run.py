"""The one choke point for every Slurm (and other external) process slurmkit starts.

List argv only, never a shell; a timeout on every call; failures become SlurmCommandError.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmkit.errors import SlurmCommandError, SlurmTimeout

DEFAULT_TIMEOUT = 30.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent_hook() -> Callable[[], None]:
    """A preexec_fn that makes the child get SIGKILL when this process dies, however it dies (prctl(2)
    PR_SET_PDEATHSIG): a SIGKILLed `conf validate` must not leave its slurmctld running. libc is loaded here, before
    the fork; the child only calls into it. If this process died between fork and prctl, the child exits at once."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return hook


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str


def run(
    argv: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    check: bool = True,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    unset: Sequence[str] = (),
    die_with_parent: bool = False,
) -> Result:
    """Run ``argv`` and return its output.

    ``env`` entries are added to (not substituted for) the current environment; ``unset`` names are removed.
    ``die_with_parent``: the child gets SIGKILL when this process dies (a real-parse daemon in namespaces).
    Raises SlurmTimeout after ``timeout`` seconds and SlurmCommandError on a non-zero exit when ``check``.
    A missing executable is a SlurmCommandError with rc 127.
    """
    if isinstance(argv, str):  # a str is a Sequence too; refuse the shell-string footgun early
        raise TypeError("run() takes a list argv, not a string")
    argv = [str(a) for a in argv]
    full_env = None
    if env or unset:
        full_env = dict(os.environ)
        full_env.update(env or {})
        for k in unset:
            full_env.pop(k, None)
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env=full_env,
            cwd=cwd,
            stdin=None if input is not None else subprocess.DEVNULL,
            preexec_fn=_die_with_parent_hook() if die_with_parent else None,
        )
    except subprocess.TimeoutExpired as exc:
        raise SlurmTimeout(argv, timeout) from exc
    except FileNotFoundError as exc:
        raise SlurmCommandError(argv, 127, f"{argv[0]}: command not found") from exc
    except PermissionError as exc:
        raise SlurmCommandError(argv, 126, f"{argv[0]}: permission denied") from exc
    result = Result(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise SlurmCommandError(argv, proc.returncode, proc.stderr or proc.stdout)
    return result


def stream(argv: Sequence[str], timeout: float, on_line: Callable[[str], float | None],
           env: Mapping[str, str] | None = None) -> tuple[int | None, bool]:
    """Run ``argv`` (stdout and stderr together) and hand each line to ``on_line`` as it comes, for a child that
    may never exit on its own (``slurmctld -D``): ``on_line`` may return a new deadline, in seconds from now.
    At EOF or the deadline the child's process group is stopped (TERM, then KILL after 5 s) and always reaped --
    on every way out, an exception too (the CLI edge turns SIGTERM/SIGINT/SIGHUP into one: cli/main.py); and the
    child gets SIGKILL from the kernel if this process dies without that (PR_SET_PDEATHSIG).
    ``env`` entries are added to the current environment, as run() does.
    -> (its return code, whether the deadline ended it). List argv, no shell."""
    if isinstance(argv, str):
        raise TypeError("stream() takes a list argv, not a string")
    proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent_hook(),
                            env={**os.environ, **env} if env else None)
    timed_out = False
    try:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        pending = b""
        eof = False
        while not eof:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            # raw fd reads: a buffered readline would hide already-read lines from select()
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            eof = not chunk
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if eof and pending:
                lines.append(pending)
            for raw in lines:
                later = on_line(raw.decode(errors="replace").rstrip())
                if later is not None:
                    deadline = time.monotonic() + later
    finally:
        _stop_group(proc)
        if proc.stdout:
            proc.stdout.close()
    return proc.returncode, timed_out


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """TERM the child's process group, KILL it after 5 s, reap the child. Only while the child is unreaped: its pid,
    which is the group's id, cannot belong to anyone else until then. (The real parse's child is unshare with
    --kill-child over a pid namespace: when it goes, everything under it goes.)"""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def log_tail(path: Path, n: int = 5) -> list[str]:
    """The last ``n`` non-empty lines of a daemon log (read from its last 64 KiB); [] when there is none."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            text = fh.read().decode(errors="replace")
    except OSError:
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip()][-n:]
