"""Per-node state on disk: atomic writes, a bounded lock, the run history.

Layout: ``<state-dir>/<node>/`` (one directory per node because the lab runs many slurmd on one host)::

    xid.json            kernel-log cursor + sticky critical XIDs     (xid.py)
    health.json         consecutive passes while drained by us, the slurmd instance seen last
    last-<hook>.json    the latest run record of each hook
    claim-<hook>.json   a prolog/epilog failed and its drain did not land: Slurm's "Prolog/Epilog error" is ours
    history.jsonl       one line per run; rotated by day and kept 14 days by the logrotate rule `monitor generate`
                        writes (logs/logrotate-slurmkit); past MAX_HISTORY_BYTES it becomes history.jsonl.1
    slurmkit_health_<hook>.prom   Prometheus textfile (unless --textfile-dir points elsewhere)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from typing import Any

# A bound, not the retention: a run record of an 8-GPU node is ~10.7 KB (measured on a lab node, 22 health runs
# in 235,543 bytes), so a node with a 5-minute health check and 100 jobs a day writes ~5 MB a day; the day-by-day
# rotation (logrotate, compressed) keeps 14 days in ~8 MB. This cap holds ~6 such days where no logrotate runs,
# and bounds a hook in a crash loop to 2 x 32 MiB.
MAX_HISTORY_BYTES = 32 * 1024 * 1024

# The hooks' run records (last-<hook>.json, history.jsonl, claim-<hook>.json) name jobs, their users' uids, the pids
# on the GPUs and what was killed: root's (and root's group's) to read, never every local user's; and root's alone
# where slurm.conf hides jobs or users from other users (PrivateData=jobs|users: slurm.conf(5) of 22.05,
# "PrivateData ... jobs: prevents users from viewing jobs or job steps belonging to other users ... users: prevents
# users from viewing any information on the users"), so a node's disk does not tell what squeue would not.
RECORD_MODE = 0o640
PRIVATE_RECORD_MODE = 0o600
_PRIVATE_KINDS = frozenset({"jobs", "users"})


def _private_data_in(path: str, depth: int = 0) -> bool | None:
    """PrivateData in ``path`` (slurm.conf) or a file it Includes: True/False, None when unreadable."""
    try:
        with open(path) as f:
            text = f.read(1 << 20)
    except OSError:
        return None
    found = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        key, eq, value = line.partition("=")
        if eq and key.strip().lower() == "privatedata":
            found = found or bool(_PRIVATE_KINDS & {v.strip().lower() for v in value.split(",")})
        elif depth < 2 and line[:8].lower() == "include ":  # slurm.conf(5): "Include <file>", relative to its dir
            inc = os.path.join(os.path.dirname(path), line[8:].strip())
            found = found or bool(_private_data_in(inc, depth + 1))
    return found


def private_data() -> bool:
    """slurm.conf hides jobs or users (PrivateData=jobs or users): $SLURM_CONF (the hook's edge sets it beside the
    inventory), else Slurm's default /etc/slurm/slurm.conf, else the configless cache slurmd links at
    /run/slurm/conf. A conf that cannot be read counts as private (the narrower mode). A few KB read per record
    written: no cache, so a PrivateData change holds from the next run on."""
    env = os.environ.get("SLURM_CONF")
    paths = [env] if env else ["/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf"]
    found = next((r for r in (_private_data_in(p) for p in paths) if r is not None), None)
    return True if found is None else found


def record_mode() -> int:
    return PRIVATE_RECORD_MODE if private_data() else RECORD_MODE


def node_dir(state_dir: str, node: str) -> str:
    d = os.path.join(state_dir, node or "localhost")
    os.makedirs(d, mode=0o755, exist_ok=True)
    return d


def atomic_write(path: str, text: str, mode: int = 0o644, durable: bool = True) -> None:
    """Write to a temp file in the same directory, (fsync,) rename: readers see the old or the new file, never half.

    ``durable=False`` skips the fsync for files whose loss in a power cut costs nothing (the latest record, the
    metrics file): an fsync is the slowest thing a prolog does on a busy local disk."""
    d = os.path.dirname(path) or "."
    # a unique name without importing tempfile (and the shutil/random/bz2 it pulls in) on the hook's hot path; it
    # ends in ".tmp", never in the target's suffix: node_exporter's textfile collector reads every "*.prom" of its
    # directory on each scrape (collector/textfile.go Update: strings.HasSuffix(f.Name(), ".prom"), dot files
    # included), so a temp file named "*.prom" was parsed half-written ("456 error(s)") or as a duplicate family
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}-{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class LockTimeout(Exception):
    pass


def _flock(fd: int, path: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= end:
                raise LockTimeout(path) from exc
            time.sleep(0.005)


@contextlib.contextmanager
def locked(path: str, timeout: float) -> Iterator[None]:
    """flock ``path`` exclusively, polling until ``timeout``: prolog, epilog and health may run at once."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _flock(fd, path, timeout)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked_or_unwritable(path: str, timeout: float) -> Iterator[str | None]:
    """``locked``, except that a lock file that cannot be created (state dir read-only or full) yields that error
    (one line) instead of raising: the caller goes on without the lock and without writing, never fails the job."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        yield f"{path}: {exc.strerror or exc}"
        return
    try:
        _flock(fd, path, timeout)
        yield None
    finally:
        os.close(fd)


def write_error(path: str, exc: OSError) -> str:
    return f"{path}: {exc.strerror or exc}"


def read_json(path: str, default: dict[str, Any]) -> dict[str, Any]:
    try:
        with open(path) as f:
            d = json.load(f)
        return d if isinstance(d, dict) else default
    except (OSError, ValueError):
        return default


def append_history(path: str, record: dict[str, Any], lock_timeout: float = 1.0, mode: int = RECORD_MODE) -> None:
    """One line per run; past MAX_HISTORY_BYTES the file becomes ``.1``. Size check, rotation and append happen under
    one flock: two writers that both saw a full file used to rotate twice, the second rename throwing away the first
    one's ``.1`` (all its records). A writer that cannot get the lock in time appends without rotating."""
    line = json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"
    try:
        with locked(path + ".lock", timeout=lock_timeout):
            _rotate_and_append(path, line, rotate=True, mode=mode)
    except LockTimeout:
        _rotate_and_append(path, line, rotate=False, mode=mode)


def _rotate_and_append(path: str, line: str, rotate: bool, mode: int = RECORD_MODE) -> None:
    if rotate:
        try:
            if os.path.getsize(path) > MAX_HISTORY_BYTES:
                os.replace(path, path + ".1")
        except FileNotFoundError:
            pass
    # one write() of one line with O_APPEND: concurrent appenders do not interleave within a line
    # created with its final mode; one an older slurmkit left wider (0644) is narrowed before anything is added
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, mode)
    try:
        if os.fstat(fd).st_mode & 0o777 & ~mode:
            os.fchmod(fd, mode)
            with contextlib.suppress(OSError):  # its rotated half, written by the same older version
                old = os.open(path + ".1", os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    os.fchmod(old, mode)
                finally:
                    os.close(old)
        os.write(fd, line.encode())
    finally:
        os.close(fd)
