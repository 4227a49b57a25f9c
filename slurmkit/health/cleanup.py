"""Epilog cleanup: the job user's leftover GPU processes and /dev/shm files.

Conservative by construction: only processes whose real uid is the job's uid are killed, and only those NVML reports
on the job's GPUs; a root process only when /proc proves it the ending job's (its job cgroup, a slurmstepd ancestor,
or, root's own environment, SLURM_JOB_ID: a root job's leftover), never an unproven one (a root daemon may hold a
GPU); each kill goes through a pidfd to the very process judged (``signal_if_same``); /dev/shm entries are removed only
when they belong to the job's uid *and* no other job of that user is on the node (a bounded squeue answers that; if
it cannot, nothing is removed).
"""

from __future__ import annotations

import os
import signal
import stat
import time
from typing import Any


def _uid_of(proc_root: str, pid: int) -> int | None:
    try:
        with open(os.path.join(proc_root, str(pid), "status")) as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])  # real uid
    except (OSError, ValueError, IndexError):
        return None
    return None


def _start_ticks(proc_root: str, pid: int) -> int | None:
    from slurmkit.health.host import process_start_ticks

    return process_start_ticks(proc_root, pid)


def signal_if_same(pid: int, sig: int, uid: int | None, start: int | None, proc_root: str = "/proc") -> str:
    """Send ``sig`` to ``pid`` only if it is still the process that was judged: real uid ``uid`` and start time
    ``start`` (/proc/<pid>/stat field 22; None: not checked). "sent", "gone" (exited), "changed" (the pid now names
    another process: refused) or "denied".

    The pid is pinned first (pidfd_open(2), Linux 5.3): from then on the pidfd names that one process, a pid the
    kernel hands out again names another, and pidfd_send_signal(2) reaches the pinned one or fails with ESRCH. The
    identity is read after the pin, so what was checked is what gets the signal: a kill by number after a separate
    uid read (os.kill) can land on a process that took the pid over in between."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "denied"
    try:
        got_uid, got_start = _uid_of(proc_root, pid), _start_ticks(proc_root, pid)
        if got_uid is None:
            return "gone"
        if (uid is not None and got_uid != uid) or (start is not None and got_start != start):
            return "changed"
        try:
            signal.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            return "gone"  # the pinned process exited after the read: its pid may be another's now, not signalled
        except PermissionError:
            return "denied"
        return "sent"
    finally:
        os.close(fd)


def _alive(proc_root: str, pid: int) -> bool:
    try:
        with open(os.path.join(proc_root, str(pid), "stat")) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has let go of the GPU
    except (OSError, IndexError):
        return False


def kill_gpu_leftovers(procs_by_gpu: dict[str, Any], job_uid: int | None, proc_root: str = "/proc",
                       wait_s: float = 1.0, owners: dict[str, Any] | None = None,
                       job_id: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """SIGKILL the job user's compute processes on the job's GPUs; report killed / survivors / foreign / held /
    unproven (a root job's: root processes /proc does not tie to the ending job, left running).

    ``procs_by_gpu`` holds only the ending job's GPUs (an empty dict for a job without GPUs). ``owners`` (pid ->
    ``{"job", "running"}``, from ``host.gpu_process_owners``) protects other jobs: a process of another job that still
    runs here is never killed, and on a GPU such a job shares with the ending one (shards, MPS) a process with no job
    of its own belongs to whoever still holds the GPU, so it is left alone too ("held").
    """
    killed: list[dict[str, Any]] = []
    foreign: list[dict[str, Any]] = []
    held: list[dict[str, Any]] = []
    unproven: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    owners = owners or {}
    if job_uid is None:
        return {"killed": [], "survivors": [], "foreign": [], "held": [], "unproven": [],
                "skipped": [{"why": "job uid unknown"}]}

    def other_running(pid: int) -> str | None:
        o = owners.get(str(pid)) or {}
        job = o.get("job")
        return job if job and job != job_id and o.get("running") else None

    for gpu, procs in sorted(procs_by_gpu.items(), key=lambda kv: int(kv[0])):
        if not isinstance(procs, list):
            continue
        holders = sorted({j for p in procs if (j := other_running(int(p["pid"])))})
        for p in procs:
            pid = int(p["pid"])
            uid = _uid_of(proc_root, pid)
            if uid is None:
                continue  # already gone (or in another pid namespace we cannot see): nothing to kill
            entry: dict[str, Any] = {"gpu": int(gpu), "pid": pid, "uid": uid}
            job = (owners.get(str(pid)) or {}).get("job")
            if job is not None:
                entry["job"] = job
            if other_running(pid) or (holders and job != job_id):
                held.append({**entry, "held_by": other_running(pid) or holders})
                continue
            if uid != job_uid:
                foreign.append(entry)
                continue
            if uid == 0 and job != job_id:
                unproven.append(entry)  # root's, and the job ran as root: not provably the job's
                continue
            start = (owners.get(str(pid)) or {}).get("start")
            how = signal_if_same(pid, signal.SIGKILL, uid, start if isinstance(start, int) else None, proc_root)
            if how == "sent":
                killed.append(entry)
            elif how == "changed":
                changed.append(entry)  # not the process whose owner was judged: left alone
            elif how == "denied":
                foreign.append(entry)
    end = time.monotonic() + wait_s
    survivors = [k for k in killed if _alive(proc_root, k["pid"])]
    while survivors and time.monotonic() < end:
        time.sleep(0.02)
        survivors = [k for k in survivors if _alive(proc_root, k["pid"])]
    out = {"killed": killed, "survivors": survivors, "foreign": foreign, "held": held, "unproven": unproven}
    return {**out, "changed": changed} if changed else out


# the epilog's /dev/shm cleanup is root acting on a tree the user built (issue 32 item 4): it follows no link, removes
# only what the user could, and is bounded -- a user's million-file tree must not hold the epilog past its timeout
# (slurmd drains the node "Epilog error"); what is left is said, and the next epilog of theirs goes on
SHM_ENTRIES = 200_000
SHM_SECONDS = 5.0


def clean_shm(uid: int, shm_dir: str = "/dev/shm", max_entries: int = SHM_ENTRIES,
              seconds: float = SHM_SECONDS) -> dict[str, Any]:
    """Remove top-level entries of ``shm_dir`` owned by ``uid``: files and links unlinked (never followed), the
    user's directories by ``safefs.remove_user_tree`` (from fds, O_NOFOLLOW, only what the user could remove),
    within ``max_entries`` directory entries and ``seconds``."""
    from slurmkit import safefs

    removed: list[str] = []
    errors: list[str] = []
    if uid == 0:
        return {"removed": [], "errors": ["refusing to clean root's files"]}
    budget = safefs.Budget(max_entries, seconds)
    try:
        top = os.open(shm_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return {"removed": [], "errors": [f"{shm_dir}: {exc.strerror}"]}
    try:
        names = os.listdir(top)
        for name in names:
            if not budget.take():
                break
            try:
                st = os.stat(name, dir_fd=top, follow_symlinks=False)
                if st.st_uid != uid:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if not safefs.remove_user_tree(top, name, uid, budget):
                        errors.append(f"{name}: {budget.spent or 'not all of it was theirs to remove'}; left in part")
                        continue
                else:
                    os.unlink(name, dir_fd=top)
                removed.append(name)
            except OSError as exc:
                errors.append(f"{name}: {exc.strerror}")
        if budget.spent:
            errors.append(f"{shm_dir}: {budget.spent}; the rest is left")
    except OSError as exc:
        errors.append(f"{shm_dir}: {exc.strerror}")
    finally:
        os.close(top)
    return {"removed": removed, "errors": errors}
