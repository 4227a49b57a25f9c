"""The one choke point for every Slurm (and other external) process slurmkit starts.

List argv only, never a shell; a timeout on every call; failures become SlurmCommandError.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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
) -> Result:
    """Run ``argv`` and return its output.

    ``env`` entries are added to (not substituted for) the current environment.
    Raises SlurmTimeout after ``timeout`` seconds and SlurmCommandError on a non-zero exit when ``check``.
    A missing executable is a SlurmCommandError with rc 127.
    """
    if isinstance(argv, str):  # a str is a Sequence too; refuse the shell-string footgun early
        raise TypeError("run() takes a list argv, not a string")
    argv = [str(a) for a in argv]
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
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
