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
) -> Result:
    """Run ``argv`` and return its output.

    ``env`` entries are added to (not substituted for) the current environment; ``unset`` names are removed.
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


def stream(argv: Sequence[str], timeout: float, on_line: Callable[[str], float | None]) -> tuple[int | None, bool]:
    """Run ``argv`` (stdout and stderr together) and hand each line to ``on_line`` as it comes, for a child that
    may never exit on its own (``slurmctld -D``): ``on_line`` may return a new deadline, in seconds from now.
    At EOF or the deadline the child's process group is stopped (TERM, then KILL after 5 s) and always reaped.
    -> (its return code, whether the deadline ended it). List argv, no shell."""
    if isinstance(argv, str):
        raise TypeError("stream() takes a list argv, not a string")
    proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
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
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stdout:
            proc.stdout.close()
    return proc.returncode, timed_out


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
