"""The running jobs and the blocked job as the defrag planner needs them, from the backend's job records
(``CLIBackend.job_details``: the release's JSON job listing, whose fields no job name or comment can forge; I/O at
the edge of the pure plan).

A job is movable when Slurm may requeue it (``Requeue=1``) and it keeps its work across a requeue: a gpusub job
(its StdOut lies in a gpusub run dir, whose batch shell checkpoints on the preemption signal and resumes), or a job
the site marks movable (the inventory's ``defrag.movable_qos`` / ``movable_accounts``). Its cost is what a move
loses: its GPUs x (seconds since its last checkpoint -- the newest file under the run dir's checkpoints/, else
since it started -- plus ``restart_s``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from slurmkit import hostlist, safefs
from slurmkit.backend.jobjson import JobRecord, job_table
from slurmkit.defrag.plan import RunningJob, Target
from slurmkit.errors import UsageError

_GPU = re.compile(r"(?:^|,)gpu(?::[^:(,]+)?:(\d+)")
RESTART_S = 60.0


@dataclass(frozen=True)
class Policy:
    """The inventory's ``defrag:`` section (checked by slurmkit/model/load.py ``_defrag``). The first three keys are
    what ``defrag plan|run`` read; the rest is ``defrag watch``'s policy."""

    movable_qos: frozenset[str] = frozenset()
    movable_accounts: frozenset[str] = frozenset()
    restart_s: float = RESTART_S
    partitions: frozenset[str] = frozenset()  # blocked jobs of these partitions only (empty: any)
    qos: frozenset[str] = frozenset()  # blocked jobs of these QOS only (empty: any)
    min_wait_s: float = 600.0  # a blocked job waits this long before watch acts for it
    max_moves_per_hour: int = 4  # jobs moved in any 60 minutes, all blocked jobs together
    max_moves_per_job: int = 4  # jobs moved to unblock one job
    protect_h: float = 6.0  # a moved job is not moved again within this many hours
    quiet_hours: tuple[tuple[int, int], ...] = ()  # (start, end) minutes of the local day; end < start wraps
    max_holds: int = 1  # future reservations (holds) watch keeps at once for jobs moves alone cannot start; 0: none
    hold_grace_s: float = 900.0  # a hold whose job has not started this long after its start time is given up


def _gpus(gres: str) -> int:
    return sum(int(m.group(1)) for m in _GPU.finditer(gres.split("(", 1)[0] if "(IDX" in gres else gres))


def _epoch(v: str) -> float | None:
    try:
        return datetime.fromisoformat(v).timestamp()
    except ValueError:
        return None


# What root reads of a job's run dir (issue 32 item 4): the job's user writes all of it, so nothing there is followed
# or trusted -- the run dir and checkpoints/ must be directories of the job's user opened with O_NOFOLLOW (a
# `checkpoints -> /` link made root stat 784k files and priced the job as "just checkpointed"), submit.json a regular
# file of theirs, and the walk of checkpoints/ counts only their regular files, never follows a symlink, and stops at
# CKPT_ENTRIES entries (all of one user's jobs in one call together), CKPT_DEPTH levels or CKPT_SECONDS; a walk that
# stops proves nothing and the job is priced from its start. A real checkpoints/ holds a few steps of a few files
# per rank.
CKPT_ENTRIES = 10_000
CKPT_DEPTH = 6
CKPT_SECONDS = 1.0


def gpusub_run_dir(stdout: str, uid: int | None) -> Path | None:
    """The gpusub run dir of a job whose StdOut is <run dir>/logs/slurm-<id>.out (render.directives --output),
    when it is a directory of the job's user (``uid``, from its UserId) with their submit.json in it; None for a
    job whose uid is unknown."""
    p = Path(stdout)
    if uid is None or p.parent.name != "logs":
        return None
    fd = safefs.open_owned_dir(p.parent.parent, uid)
    if fd is None:
        return None
    try:
        return p.parent.parent if safefs.owned_file(fd, "submit.json", uid) is not None else None
    finally:
        os.close(fd)


def job_run_dir(rec: Mapping[str, str]) -> Path | None:
    """``gpusub_run_dir`` of a job record (its StdOut= and UserId=)."""
    return gpusub_run_dir(rec.get("StdOut", ""), safefs.uid_of_record(rec.get("UserId")))


def last_checkpoint(run_dir: Path, uid: int, walk: safefs.Walk | None = None) -> float | None:
    """The newest mtime of the job user's files under ``run_dir``/checkpoints/ (bounded: see CKPT_ENTRIES)."""
    walk = walk or safefs.Walk(uid, CKPT_ENTRIES, CKPT_DEPTH, CKPT_SECONDS)
    top = safefs.open_owned_dir(run_dir, uid)
    if top is None:
        return None
    try:
        ck = safefs.open_owned_dir("checkpoints", uid, dir_fd=top)
    finally:
        os.close(top)
    if ck is None:
        return None
    try:
        return safefs.newest_mtime(ck, walk)
    finally:
        os.close(ck)


def running_jobs(details: str | Sequence[JobRecord], policy: Policy = Policy(),
                 now: float | None = None) -> list[RunningJob]:
    """The running jobs of ``details`` (the backend's records; text only in tests: ``jobjson.job_table``), each
    with its GPUs per node from the record's ``gres_by_node`` (the JSON's gres_detail), never from free text."""
    now = time.time() if now is None else now
    out = []
    budget: dict[int, int] = {}  # checkpoint-walk entries left to each user in this call
    for rec in job_table(details):
        if rec.get("JobState") != "RUNNING":
            continue
        gpus: dict[str, int] = {}
        for n, gres in rec.gres_by_node.items():
            gpus[n] = gpus.get(n, 0) + _gpus(gres)
        if not gpus:
            for n in hostlist.expand(rec.get("NodeList", "")) if rec.get("NodeList") not in (None, "(null)") else []:
                gpus[n] = 0
        uid = safefs.uid_of_record(rec.get("UserId"))
        run_dir = gpusub_run_dir(rec.get("StdOut", ""), uid)
        requeue = rec.get("Requeue") == "1"
        site = rec.get("QOS") in policy.movable_qos or rec.get("Account") in policy.movable_accounts
        why = ""
        if not requeue:
            why = "Requeue=0"
        elif run_dir is None and not site:
            why = "not a gpusub job and not marked movable (defrag.movable_qos/movable_accounts)"
        started = _epoch(rec.get("StartTime", "")) or now
        ckpt = None
        if run_dir is not None and uid is not None:
            walk = safefs.Walk(uid, max(0, budget.get(uid, CKPT_ENTRIES)), CKPT_DEPTH, CKPT_SECONDS)
            ckpt = last_checkpoint(run_dir, uid, walk)
            budget[uid] = budget.get(uid, CKPT_ENTRIES) - walk.entries
        since = max(0.0, now - (ckpt if ckpt is not None and ckpt >= started else started))
        total = sum(gpus.values())
        cost = max(1, total) * (since + policy.restart_s)
        out.append(RunningJob(rec["JobId"], gpus, movable=not why, cost=round(cost, 1), why_not=why,
                              checkpoint_age_s=round(now - ckpt, 1) if ckpt is not None else None))
    return out


def target_of(details: str | Sequence[JobRecord], job_id: str) -> tuple[Target, str | None]:
    """A pending job's shape: (Target, partition)."""
    for rec in job_table(details):
        if rec.get("JobId") != job_id:
            continue
        if rec.get("JobState") != "PENDING":
            raise UsageError(f"--for {job_id}: the job is {rec.get('JobState')}, not pending")
        per_node = _gpus(rec.get("TresPerNode", "").replace("gres/", "").replace("gres:", ""))
        # whole nodes: --exclusive. Through 25.11 `scontrol show job` says OverSubscribe=NO for it (OK for a plain
        # job: job_share_string(), src/scontrol/info_job.c at slurm-24-11-5-1); 26.05 adds Exclusive=NO|NODE|USER|
        # MCS|TOPO and says OverSubscribe=NO for a plain job too (info_job.c at slurm-26-05-3-1; recorded from a
        # 26.05.5 lab: tests/data/slurm/26.05/scontrol_show_job_*.txt)
        if "Exclusive" in rec:
            exclusive = rec["Exclusive"] in ("NODE", "TOPO")
        else:
            exclusive = rec.get("OverSubscribe") == "NO"
        return Target(max(1, int(rec.get("NumNodes", "1").split("-")[0])), per_node, exclusive), rec.get("Partition")
    raise UsageError(f"--for {job_id}: no such job in slurmctld")


def policy_from(inventory: Mapping[str, object] | None) -> Policy:
    d = (inventory or {}).get("defrag") if isinstance(inventory, Mapping) else None
    if not isinstance(d, Mapping):
        return Policy()

    def names(key: str) -> frozenset[str]:
        v = d.get(key, [])
        if not isinstance(v, Iterable) or isinstance(v, str):
            raise UsageError(f"defrag.{key}: expected a list of names")
        return frozenset(str(x) for x in v)

    def quiet(v: str) -> tuple[int, int]:
        a, b = v.replace(" ", "").split("-")
        return (int(a.split(":")[0]) * 60 + int(a.split(":")[1]), int(b.split(":")[0]) * 60 + int(b.split(":")[1]))

    base = Policy()
    return Policy(names("movable_qos"), names("movable_accounts"), float(d.get("restart_s", RESTART_S)),
                  names("partitions"), names("qos"), float(d.get("min_wait_s", base.min_wait_s)),
                  int(d.get("max_moves_per_hour", base.max_moves_per_hour)),
                  int(d.get("max_moves_per_job", base.max_moves_per_job)),
                  float(d.get("protect_h", base.protect_h)),
                  tuple(quiet(str(x)) for x in d.get("quiet_hours", []) or []),
                  int(d.get("max_holds", base.max_holds)), float(d.get("hold_grace_s", base.hold_grace_s)))
