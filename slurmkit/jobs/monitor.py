"""status / logs / follow / cancel for gpusub jobs.

One throttled poll: a single ``scontrol -o show job`` (``Backend.jobs``) answers every job asked about, with an
exponential backoff between polls (never ``sbatch --wait``, never a query per job: submitit#1759). Jobs that
slurmctld already forgot (older than MinJobAge) are looked up in ONE ``sacct`` call when accounting exists, else
in the run dir, where the batch shell recorded each attempt's exit code.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from slurmkit.backend.parse import JobInfo
from slurmkit.backend.run import run
from slurmkit.errors import SlurmkitError
from slurmkit.jobs.rundir import (
    STOPPED_EXIT,
    array_task_logs,
    attempt_logs,
    checkpoint_step,
    cluster_key,
    index_dir,
    last_exit,
    last_reason_of,
    lookup_run_dir,
)

if TYPE_CHECKING:
    from slurmkit.backend.base import Backend


class JobUnknown(SlurmkitError):
    pass


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str
    source: str  # slurmctld | sacct | run dir | unknown
    nodes: str = ""
    reason: str = ""
    exit_code: str = ""
    restarts: int = 0
    run_dir: str | None = None
    note: str = ""  # why the last attempt ended, as the batch shell recorded it (preempted, requeued, ...)
    kept_pin: str = ""  # a requeued job still pending on gpusub's own submit-time --nodelist (see _kept_pin)
    # the step the attempt of ``note`` recorded in its checkpoint ($GPUSUB_CHECKPOINT_STEP_FILE); None: none recorded
    checkpoint_step: int | None = None

    def line(self) -> str:
        parts = [f"{self.job_id}", self.state]
        if self.reason and self.reason not in ("None", "(null)"):
            parts.append(f"reason={self.reason}")
        if self.nodes:
            parts.append(f"nodes={self.nodes}")
        if self.exit_code:
            parts.append(f"exit={self.exit_code}")
        if self.restarts:
            parts.append(f"restarts={self.restarts}")
        if self.note:
            parts.append(f"note={self.note!r}")
        parts.append(f"[{self.source}]")
        if self.run_dir:
            parts.append(f"run_dir={self.run_dir}")
        return " ".join(parts)

    @property
    def finished(self) -> bool:
        from slurmkit.backend.parse import TERMINAL_STATES

        return self.state in TERMINAL_STATES or self.source == "run dir"


class Backoff:
    """Poll interval: ``first`` doubling to ``cap`` seconds, but at most ``fast_cap`` until ``fast_for`` seconds of
    intervals have been handed out. A short job (a smoke test, a debug run: what a researcher waits on) is seen
    ending within ``fast_cap`` s, not up to ``cap`` s later (``--follow`` took 8 s for a 4 s job, issue 25); a
    long one costs one ``scontrol show job`` per ``fast_cap`` s for its first minute only, then one per ``cap`` s."""

    def __init__(self, first: float = 0.25, cap: float = 5.0, fast_cap: float = 1.0, fast_for: float = 60.0):
        self.next = first
        self.cap = cap
        self.fast_cap = min(fast_cap, cap)
        self.fast_for = fast_for
        self.elapsed = 0.0

    def __call__(self) -> float:
        cur = min(self.next, self.fast_cap) if self.elapsed < self.fast_for else self.next
        self.next = min(self.cap, self.next * 2)
        self.elapsed += cur
        return cur


def _fold(nodes: Sequence[str]) -> str:
    from slurmkit import hostlist

    return hostlist.fold(nodes) if nodes else ""


def _array_key(j: JobInfo) -> tuple[str, str] | None:
    a, t = j.raw.get("ArrayJobId"), j.raw.get("ArrayTaskId")
    return (a, t) if a and t else None


def _task_order(key: str) -> tuple[int, str]:
    head = key.strip("[").split("-", 1)[0].split(",", 1)[0].split("%", 1)[0]
    return (int(head) if head.isdigit() else 1 << 30, key)


class _Index:
    """The run-dir index of the cluster ``backend`` talks to (``cluster_key`` over its environment: a lab's
    backend carries the lab's SLURM_CONF), the key read once and only when a lookup needs it."""

    def __init__(self, env: Mapping[str, str], backend: Backend | None):
        self.env = env
        self.slurm_env = {**env, **(getattr(backend, "env", None) or {})}
        self._key: str | None = None
        self._known = False

    @property
    def key(self) -> str | None:
        if not self._known:
            self._key, self._known = cluster_key(self.slurm_env), True
        return self._key

    def run_dir(self, job_id: str) -> str | None:
        return lookup_run_dir(job_id, self.env, self.key or "")

    def missing(self, job_id: str) -> str:
        """Why the index has no run dir for ``job_id``."""
        if not self.key:
            return "cluster unknown (no ClusterName from $SLURM_CONF or scontrol show config), so no run dir"
        why = f"no run dir recorded for {job_id} on cluster {self.key}"
        base = job_id.split("_", 1)[0]
        old = index_dir(self.env) / base
        if base.isdigit() and old.is_file():  # written before the per-cluster keys: may be any cluster's job with this id
            why += f" ({old} is from an older gpusub, its cluster unknown: not used)"
        return why


def statuses(job_ids: Sequence[str], backend: Backend, environ: Mapping[str, str] | None = None) -> list[JobStatus]:
    """One line per job; an array id gives one line per task (``A_T``, pending tasks as ``A_[T-U]``), and an
    array task is asked for as ``A_T`` (slurmctld knows it under its own job id, with ArrayJobId/ArrayTaskId)."""
    env = os.environ if environ is None else environ
    index = _Index(env, backend)
    every = backend.jobs()
    by_id = {j.job_id: j for j in every}
    tasks: dict[str, list[tuple[str, JobInfo]]] = {}
    for j in every:
        key = _array_key(j)
        if key:
            tasks.setdefault(key[0], []).append((key[1], j))
    rows: list[tuple[str, JobStatus | None]] = []  # (asked id, status or None = look elsewhere)
    for jid in job_ids:
        base, _, task = jid.partition("_")
        if task:
            hit = next((j for t, j in tasks.get(base, []) if t == task), None)
            rows.append((jid, _live(jid, hit, index) if hit else None))
        elif jid in tasks:  # the whole array: one line per task
            for t, j in sorted(tasks[jid], key=lambda tj: _task_order(tj[0])):
                rows.append((f"{jid}_{t}", _live(f"{jid}_{t}", j, index)))
        else:
            hit = by_id.get(jid)
            rows.append((jid, _live(jid, hit, index) if hit else None))
    missing = [jid for jid, st in rows if st is None]
    found: dict[str, JobStatus] = {}
    if missing:
        for jid, st in _sacct(missing, backend).items():
            found[jid] = JobStatus(jid, st[0], "sacct", st[2], "", st[1], 0, index.run_dir(jid))
    for jid in missing:
        if jid in found:
            continue
        rd = index.run_dir(jid)
        rec = last_exit(rd, jid) if rd else None
        if rec is not None and rd:
            attempt, rc = rec
            why, step = _reason(rd, jid)
            # a clean step that stopped unfinished (--max-restarts reached): the batch shell exited STOPPED_EXIT
            stopped = rc == 0 and "not requeued" in why and why.startswith("preempted")
            found[jid] = JobStatus(jid, "FAILED" if rc or stopped else "COMPLETED", "run dir", "", "",
                                   str(STOPPED_EXIT if stopped else rc), attempt, rd, note=why, checkpoint_step=step)
        else:
            found[jid] = JobStatus(jid, "UNKNOWN", "unknown",
                                   reason=f"not in slurmctld, no accounting record, {index.missing(jid)}")
    return [st if st is not None else found[jid] for jid, st in rows]


def _live(jid: str, j: JobInfo, index: _Index) -> JobStatus:
    # slurmctld's own record first: the index is per cluster, but a cluster re-created under the same name and
    # controller starts its ids again, so an index entry may still name an older job with this id
    rd = _run_dir_from_stdout(j) or index.run_dir(jid)
    pin = None if j.finished else _kept_pin(j, rd)
    note, step = "", None
    if pin:
        note = _kept_pin_note(jid, pin)
    elif rd and (j.finished or j.restarts):  # a requeued job: how its last attempt ended ("requeued after checkpoint")
        note, step = _reason(rd, jid)
    return JobStatus(jid, j.state, "slurmctld", _fold(j.nodes), j.reason, j.exit_code, j.restarts, rd, note=note,
                     kept_pin=pin or "", checkpoint_step=step)


def _reason(rd: str, jid: str) -> tuple[str, int | None]:
    """The latest attempt's reason (the batch shell's words: "requeued after checkpoint at step 42 (...)", or the
    step's exit when the program recorded no checkpoint) and the step that attempt recorded."""
    found = last_reason_of(rd, jid)
    if found is None:
        return "", None
    return found[1], checkpoint_step(rd, jid, found[0])


def _kept_pin_note(jid: str, pin: str) -> str:
    return (f"requeued still pinned to {pin} (no batch shell could clear the pin: its batch node was lost, the "
            "shell was killed first, or Slurm requeued it after the shell ended, as for a preemption inside a "
            "GraceTime from 24.05): "
            f"it waits for those nodes; `scontrol update JobId={jid} ReqNodeList=` lets Slurm place it anew "
            "(`gpusub --follow` and the API's Job.wait() do it)")


UNPIN_TRIES = 3  # per attempt: a busy slurmctld that times out one update must not leave the job waiting


class Unpinner:
    """What a follower (``follow``, ``Job.wait``) does about a kept pin (``_kept_pin``): clears it as the batch shell
    would have, ``scontrol update JobId=N ReqNodeList=``, which slurmctld takes for any pending job (job_mgr.c
    _update_job, 22.05, 24.11, 26.05; a second one is harmless, so a shell that clears it too, or two followers, do
    no harm). Once per attempt (Restarts) when it succeeds; a failure (a slurmctld timeout) is tried again on the
    next polls, UNPIN_TRIES in all."""

    def __init__(self) -> None:
        self.done: set[int] = set()
        self.tries: dict[int, int] = {}

    def wants(self, restarts: int) -> bool:
        return restarts not in self.done and self.tries.get(restarts, 0) < UNPIN_TRIES

    def clear(self, job_id: str, pin: str, restarts: int, backend: Backend) -> str:
        """-> the line to show the user."""
        self.tries[restarts] = self.tries.get(restarts, 0) + 1
        update = getattr(backend, "update_job", None)
        if update is None:
            self.done.add(restarts)
            return f"gpusub: job {job_id}: requeued still pinned to {pin}; this backend cannot clear the pin"
        try:
            update(job_id, ReqNodeList="")
        except SlurmkitError as exc:
            again = " (tried again)" if self.tries[restarts] < UNPIN_TRIES else ""
            return (f"gpusub: job {job_id}: requeued still pinned to {pin}; clearing the pin failed{again}: "
                    f"{exc.one_line()} (`scontrol update JobId={job_id} ReqNodeList=`)")
        self.done.add(restarts)
        return (f"gpusub: job {job_id}: requeued still pinned to {pin} with no batch shell left to clear it (its "
                "batch node lost, or a requeue after the shell ended): pin cleared, Slurm places it anew")


def _kept_pin(j: JobInfo, rd: str | None) -> str | None:
    """The pin of a requeued job still pending on gpusub's own submit-time pin. The batch shell clears it when Slurm requeues
    the job, but when the batch host itself failed no shell was left to do it, and Slurm keeps ReqNodeList across a
    requeue (job_mgr.c _job_requeue_op touches no req_nodes, 22.05 to 26.05): the job waits for the lost node. From
    24.05 a job preempted inside a QOS GraceTime is requeued by slurmctld once its batch script has ended
    (proc_req.c _slurm_rpc_complete_batch_script, GRACE_PREEMPT), when no shell is left either: it waits for the
    preemptor's nodes.
    Measured on the 22.05 lab: batch host's slurmd and batch step SIGKILLed, node set DOWN; Restarts=1,
    ReqNodeList=node[1-2] with node1 DOWN. Only gpusub's own pin counts, the nodes of the run dir's script.sh
    ``#SBATCH --nodelist=`` (what the batch shell clears), or of its ``pin`` where check_pin moved it: a pin the user asked for (-w) is theirs, and so is one a
    user or admin set by hand (`scontrol update ReqNodeList=`) on a job gpusub did not pin, or after the batch shell
    cleared gpusub's at any requeue so far (it leaves ``attempts/<job>.r<N>.unpinned``), even on the same nodes."""
    pin = j.raw.get("ReqNodeList") or ""
    if j.state != "PENDING" or not j.restarts or pin in ("", "(null)") or not rd:
        return None
    import json

    try:
        spec = json.loads((Path(rd) / "submit.json").read_text()).get("spec") or {}
    except (OSError, ValueError):
        return None
    if spec.get("nodelist"):
        return None
    own = _script_pin(Path(rd) / "script.sh")
    try:  # check_pin moved or cleared the pin after the submission (jobs/submit.py _record_pin)
        own = (Path(rd) / "pin").read_text().strip() or None
    except OSError:
        pass
    if own is None:
        return None
    for k in range(j.restarts):
        if (Path(rd) / "attempts" / f"{j.job_id}.r{k}.unpinned").exists():
            return None  # a batch shell cleared gpusub's pin at an earlier requeue: the pin now is a person's
    from slurmkit.hostlist import expand

    try:  # Slurm prints the list it keeps, folded its own way: the nodes decide
        same = set(expand(pin)) == set(expand(own))
    except SlurmkitError:
        return None
    return pin if same else None


def _script_pin(path: Path) -> str | None:
    """The ``--nodelist`` of the #SBATCH lines of the script given to sbatch (sbatch(1) 22.05 and 24.11: "sbatch will
    stop processing further #SBATCH directives once the first non-comment non-whitespace line has been reached");
    None when it has none or cannot be read."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = None
    for line in lines[1:]:
        text = line.strip()
        if text and not text.startswith("#"):
            break
        if text.startswith("#SBATCH --nodelist="):
            found = text.split("=", 1)[1].strip()
    return found or None


def _sacct(job_ids: Sequence[str], backend: Backend) -> dict[str, tuple[str, str, str]]:
    """One ``sacct`` for every job slurmctld forgot; {} when accounting is absent (22.05: needs slurmdbd)."""
    res = run(
        ["sacct", "-X", "-P", "-n", "-j", ",".join(job_ids), "-o", "JobID,State,ExitCode,NodeList"],
        timeout=15, check=False, env=getattr(backend, "env", None),
    )
    if res.rc != 0:
        return {}
    out: dict[str, tuple[str, str, str]] = {}
    for line in res.stdout.splitlines():
        f = line.split("|")
        if len(f) >= 4:
            out[f[0]] = (f[1].split()[0] if f[1] else "UNKNOWN", f[2], f[3])
    return out


def _run_dir_from_stdout(j: JobInfo) -> str | None:
    """Our ``--output`` is ``<run_dir>/logs/slurm-%j.out`` (``slurm-%A_%a.out`` for arrays)."""
    if j.stdout and "/logs/slurm-" in j.stdout:
        return j.stdout.rsplit("/logs/", 1)[0]
    return None


def find_run_dir(job_id: str, backend: Backend | None, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    index = _Index(env, backend)
    if backend is not None:  # slurmctld's record first (see _live), the index for a job it forgot
        try:
            jobs = backend.jobs([job_id])
        except SlurmkitError:
            jobs = []
        for j in jobs:
            rd = _run_dir_from_stdout(j)
            if rd:
                return rd
    rd = index.run_dir(job_id)
    if rd:
        return rd
    raise JobUnknown(f"job {job_id}: not known to slurmctld, and {index.missing(job_id)} (not submitted by gpusub "
                     "from this account, or forgotten)")


def _log_id(job_id: str, j: JobInfo | None) -> str:
    """Array tasks log under ``<array job>_<task>``; plain jobs under their id."""
    if j is not None:
        a, t = j.raw.get("ArrayJobId"), j.raw.get("ArrayTaskId")
        if a and t and t.isdigit():
            return f"{a}_{t}"
    return job_id


def print_logs(job_id: str, run_dir: str, out: IO[str]) -> int:
    n = 0
    logs = attempt_logs(run_dir, job_id)
    if not logs and "_" not in job_id:  # `gpusub logs 7` for array 7: every task's logs
        logs = array_task_logs(run_dir, job_id)
    for p in logs:
        out.write(p.read_text(errors="replace"))
        n += 1
    return n


def follow(
    job_id: str,
    backend: Backend,
    out: IO[str],
    *,
    run_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    cap: float = 5.0,
    max_poll_failures: int = 5,
) -> JobStatus:
    """Tail every attempt's log of ``job_id`` until the job ends; returns its final status.

    Polls slurmctld with backoff (one ``scontrol show job`` per poll); a controller that stops answering is
    retried ``max_poll_failures`` times before the error is raised.
    """
    env = os.environ if environ is None else environ
    index = _Index(env, backend)
    rd = run_dir  # else from the first poll's record (find_run_dir's order, without a second scontrol call)
    offsets: dict[Path, int] = {}
    backoff = Backoff(cap=cap)
    failures = 0
    seen = False
    info: JobInfo | None = None
    unpin = Unpinner()
    while True:
        try:
            found = backend.jobs([job_id])
            failures = 0
        except SlurmkitError:
            failures += 1
            if failures > max_poll_failures:
                raise
            sleep(backoff())
            continue
        info = found[0] if found else None
        seen = seen or info is not None
        if rd is None:
            rd = (_run_dir_from_stdout(info) if info is not None else None) or index.run_dir(job_id)
            if rd is None:
                raise JobUnknown(f"job {job_id}: not known to slurmctld, and {index.missing(job_id)} (not submitted "
                                 "by gpusub from this account, or forgotten)")
        _drain(rd, _log_id(job_id, info), offsets, out)
        if info is None:
            if not seen:
                # slurmctld forgot it (MinJobAge): what sacct or the run dir says, after the logs
                st = statuses([job_id], backend, env)[0]
                if st.state == "UNKNOWN":
                    raise JobUnknown(f"job {job_id} is not known to slurmctld, accounting or its run dir")
                return st
            break
        if info.finished:
            break
        if info.state == "PENDING" and info.restarts and unpin.wants(info.restarts):
            pin = _kept_pin(info, rd)
            if pin:  # requeued with no shell left to clear gpusub's pin: it would wait for the lost nodes forever
                out.write(unpin.clear(job_id, pin, info.restarts, backend) + "\n")
                out.flush()
        exit_record = Path(rd) / "attempts" / f"{_log_id(job_id, info)}.r{info.restarts}.exit"
        if exit_record.exists():  # the step has ended: the job ends within moments (or is requeued)
            sleep(ENDING_POLL)
        else:
            _nap(backoff(), exit_record, sleep)
    _drain(rd, _log_id(job_id, info), offsets, out)
    if info is None:
        return statuses([job_id], backend, env)[0]
    note, step = _reason(rd, job_id)
    return JobStatus(job_id, info.state, "slurmctld", _fold(info.nodes), info.reason, info.exit_code, info.restarts,
                     rd, note=note, checkpoint_step=step)


# After the batch script's exit record appears (base.sh.j2 writes attempts/<job>.r<N>.exit when the step ends), the
# job is COMPLETED (or requeued) once the script's last lines and the epilog have run: poll this often then, instead
# of waiting out the backoff (up to 1 s in the first minute, 5 s later). A stat per ENDING_POLL while napping, no RPC.
ENDING_POLL = 0.2


def _nap(seconds: float, exit_record: Path, sleep: Callable[[float], None]) -> None:
    """Sleep ``seconds``, in ENDING_POLL slices, cut short when the attempt's exit record appears."""
    left = seconds
    while left > 1e-9:
        step = min(ENDING_POLL, left)
        sleep(step)
        left -= step
        if exit_record.exists():
            return


def exit_status(st: JobStatus) -> int:
    """The exit code `gpusub --follow` ends with: the job's own. COMPLETED is 0; otherwise the batch script's exit
    code from ExitCode=<code>:<signal> (75 for a run stopped unfinished, STOPPED_EXIT), 128 + the signal that killed
    it, and 1 when Slurm ended it without either (CANCELLED 0:0, a node failure)."""
    if st.state == "COMPLETED":
        return 0
    code, _, sig = (st.exit_code or "").partition(":")
    try:
        c, s = int(code or 0), int(sig or 0)
    except ValueError:
        return 1
    if c > 0:
        return min(c, 255)
    if s > 0:
        return 128 + s
    return 1


def _drain(run_dir: str, log_id: str, offsets: dict[Path, int], out: IO[str]) -> None:
    for p in attempt_logs(run_dir, log_id):
        try:
            with open(p, "rb") as f:
                f.seek(offsets.get(p, 0))
                data = f.read()
        except OSError:
            continue
        if data:
            # write whole lines only, except what a finished writer left
            cut = data.rfind(b"\n") + 1
            chunk = data[:cut] if cut else b""
            if chunk:
                out.write(chunk.decode("utf-8", errors="replace"))
                out.flush()
                offsets[p] = offsets.get(p, 0) + len(chunk)


def cancel(job_id: str, backend: Backend, signal: str | None = None) -> JobInfo:
    """scancel (or scancel --signal --batch); refuses a job slurmctld does not know or that already ended: scancel
    itself only prints an error for those and exits 0."""
    info = backend.job(job_id)  # JobNotFound when slurmctld does not know it
    if info.finished:
        raise JobUnknown(f"job {job_id} already ended ({info.state}): nothing to "
                         f"{'signal' if signal else 'cancel'}")
    backend.cancel(job_id, signal=signal, batch=bool(signal))
    return info
