"""GPU-hours over a window from Slurm's accounting (`slurmkit report utilisation`, issue 39 item 1).

- **available**: every node's GPUs (its Gres, as slurmctld has it now) times the window, less the time the node was
  down or drained by slurmdbd's node events (``sacctmgr show event``: one row per node state change it recorded,
  with its start and end; an open event runs to the window's end), down and drained said apart;
- **allocated**: each allocation's ``gres/gpu`` in AllocTRES times the part of its run inside the window (a job that
  started before the window counts from the window's start; a running job up to now). One line per allocation:
  ``sacct -X`` gives each array task (``123_4``) and each het component (``123+1``) a line of its own, so each counts
  once with its own GPUs; pending jobs (no Start) count nothing.

One sacct query and one sacctmgr query per window, read line by line and folded into totals per group and day as
they come: memory grows with the groups and days, not the jobs (bench/utilisation_bench.py, 1M jobs).

Not here: "used" GPU-hours (allocated GPUs that computed). Slurm records a step's GPU activity only through its
gpu/nvml plugin on real GPUs (TRES gres/gpuutil; gpu_nvml.c _get_gpuutil, per process) and slurmkit's hooks do not
sample utilisation, so no machine this project has can produce the figure to test it: the report says "not
measured" rather than print an untested number.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from slurmkit.errors import SlurmCommandError, SlurmTimeout, UsageError

BY = ("partition", "account", "user", "gpu-type")
# sacct's fields, in this order: JobID names the allocation (array task, het component), the rest as sacct(1) has
# them (22.05 to 26.05); -X: allocations only (no steps), -P: '|'-separated, --noconvert: plain numbers
SACCT_FIELDS = ("JobID", "User", "Account", "Partition", "AllocTRES", "Start", "End", "State")
EVENT_FIELDS = ("NodeName", "TimeStart", "TimeEnd", "State")


def parse_slurm_time(s: str) -> float | None:
    """sacct's and sacctmgr's ``2026-12-04T14:50:03`` (local time, as their default time format prints it) ->
    epoch seconds; ``Unknown``, ``None``, empty -> None."""
    s = s.strip()
    if not s or s in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(s).timestamp()  # naive: local time, as Slurm printed it
    except ValueError:
        return None


def alloc_gpus(tres: str) -> int:
    """AllocTRES ``billing=2,cpu=2,gres/gpu:h100=2,gres/gpu=2,mem=1000M,node=1`` -> 2: the untyped ``gres/gpu``
    (Slurm adds it beside every typed count, so adding both would count each GPU twice)."""
    typed = 0
    for item in tres.split(","):
        key, _, val = item.partition("=")
        if key == "gres/gpu":
            return int(val) if val.isdigit() else 0
        if key.startswith("gres/gpu:") and val.isdigit():
            typed += int(val)
    return typed


def gpu_types(gres: str) -> dict[str, int]:
    """A node's Gres ``gpu:h100:8(S:0-1),shard:16`` -> {"h100": 8}; an untyped ``gpu:4`` -> {"gpu": 4}."""
    from slurmkit.backend.parse import _split_gres

    out: dict[str, int] = {}
    for item in _split_gres(gres):
        fields = item.split("(", 1)[0].split(":")
        if fields[0] != "gpu" or len(fields) < 2 or not fields[-1].isdigit():
            continue
        t = fields[1] if len(fields) == 3 else "gpu"
        out[t] = out.get(t, 0) + int(fields[-1])
    return out


def overlap(start: float, end: float, w0: float, w1: float) -> float:
    return max(0.0, min(end, w1) - max(start, w0))


def _days(w0: float, w1: float) -> list[tuple[str, float, float]]:
    """The window cut at local midnights: (YYYY-MM-DD, start, end) each."""
    out = []
    t = w0
    while t < w1:
        d = datetime.fromtimestamp(t)
        nxt = datetime(d.year, d.month, d.day).timestamp() + 86400
        nxt = datetime.fromtimestamp(nxt).replace(hour=0, minute=0, second=0).timestamp()  # a DST day is 23/25 h
        out.append((d.strftime("%Y-%m-%d"), t, min(nxt, w1)))
        t = min(nxt, w1)
    return out


@dataclass(frozen=True)
class NodeGPUs:
    name: str
    gpus: dict[str, int]  # type -> count
    partitions: tuple[str, ...]

    @property
    def total(self) -> int:
        return sum(self.gpus.values())


@dataclass
class Totals:
    available_h: float = 0.0  # GPU-hours the nodes had, down and drained time taken out
    down_h: float = 0.0
    drained_h: float = 0.0
    allocated_h: float = 0.0
    jobs: int = 0  # allocations that held GPUs inside the window

    def utilisation(self) -> float | None:
        return self.allocated_h / self.available_h if self.available_h > 0 else None


@dataclass
class Report:
    start: float
    end: float
    by: str
    target: float  # 0.92
    cluster: Totals = field(default_factory=Totals)
    groups: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    days: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    skipped: int = 0  # sacct lines that were not an allocation this report can read (said, never silently lost)

    def to_json(self) -> dict[str, object]:
        def t(x: Totals) -> dict[str, object]:
            u = x.utilisation()
            return {"available_gpu_hours": round(x.available_h, 6), "down_gpu_hours": round(x.down_h, 6),
                    "drained_gpu_hours": round(x.drained_h, 6), "allocated_gpu_hours": round(x.allocated_h, 6),
                    "jobs": x.jobs, "utilisation": None if u is None else round(u, 4),
                    "below_target": None if u is None else u < self.target}
        return {"start": datetime.fromtimestamp(self.start).isoformat(timespec="seconds"),
                "end": datetime.fromtimestamp(self.end).isoformat(timespec="seconds"),
                "by": self.by, "target": self.target, "cluster": t(self.cluster),
                "groups": {k: t(v) for k, v in sorted(self.groups.items())},
                "days": {k: t(v) for k, v in sorted(self.days.items())},
                "used_gpu_hours": None, "used": "not measured (see docs/reports.md)",
                "skipped_lines": self.skipped}


def _node_groups(n: NodeGPUs, by: str) -> list[tuple[str, int]]:
    """(group, GPUs of this node in it) for the available side: a node is in each of its partitions (they may
    overlap, so partitions' sums can pass the cluster's), its GPUs split by type; by account or user every GPU of
    the cluster is every group's to use, so each group's share is of the cluster's available hours."""
    if by == "partition":
        return [(p, n.total) for p in n.partitions]
    if by == "gpu-type":
        return list(n.gpus.items())
    return []


Allocation = tuple[str, str, str, str, int, float, float, str]  # job, user, account, partition, GPUs, start, end, node


class Fold:
    """The report built as its inputs come: nodes, then node events, then allocations one at a time (sacct's
    stream), keeping only totals."""

    def __init__(self, start: float, end: float, by: str, target: float) -> None:
        if by not in BY:
            raise UsageError(f"--by: expected one of {', '.join(BY)}, got {by!r}")
        self.rep = Report(start=start, end=end, by=by, target=target)
        self.day_spans = _days(start, end)
        self.day_starts = [d0 for _, d0, _ in self.day_spans]
        self.nodes: dict[str, NodeGPUs] = {}
        self.type_of: dict[str, str] = {}

    def node(self, n: NodeGPUs) -> None:
        r = self.rep
        self.nodes[n.name] = n
        self.type_of[n.name] = next(iter(n.gpus)) if len(n.gpus) == 1 else ("mixed" if n.gpus else "none")
        for day, d0, d1 in self.day_spans:
            r.days[day].available_h += n.total * (d1 - d0) / 3600
        r.cluster.available_h += n.total * (r.end - r.start) / 3600
        for g, gpus in _node_groups(n, r.by):
            r.groups[g].available_h += gpus * (r.end - r.start) / 3600

    def event(self, node: str, e0: float, e1: float, state: str) -> None:
        """A node DOWN or DRAIN(ED/ING) from e0 to e1: its GPUs were not available then."""
        r = self.rep
        n = self.nodes.get(node)
        st = state.upper()
        kind = "down_h" if "DOWN" in st else "drained_h" if "DRAIN" in st else ""
        if n is None or not n.total or not kind:
            return
        spans = [(r.cluster, e0, e1, n.total)]
        spans += [(r.groups[g], e0, e1, gpus) for g, gpus in _node_groups(n, r.by)]
        spans += [(r.days[day], max(e0, d0), min(e1, d1), n.total) for day, d0, d1 in self.day_spans]
        for tot, a, b, gpus in spans:
            lost = overlap(a, b, r.start, r.end) * gpus / 3600
            tot.available_h -= lost
            setattr(tot, kind, getattr(tot, kind) + lost)

    def allocation(self, a: Allocation) -> None:
        r = self.rep
        _job, user, account, partition, gpus, j0, j1, node = a
        held = overlap(j0, j1, r.start, r.end)
        if gpus <= 0 or held <= 0:
            return
        key = {"partition": partition, "account": account, "user": user,
               "gpu-type": self.type_of.get(node, "unknown")}[r.by]
        for tot in (r.cluster, r.groups[key]):
            tot.allocated_h += gpus * held / 3600
            tot.jobs += 1
        # only the days the job touches (a year's window is 365 of them; a job, mostly one or two)
        for day, d0, d1 in self.day_spans[max(0, bisect.bisect_right(self.day_starts, j0) - 1):]:
            if d0 >= j1:
                break
            part = overlap(j0, j1, d0, d1)
            if part > 0:
                r.days[day].allocated_h += gpus * part / 3600
                r.days[day].jobs += 1

    def finish(self, skipped: int = 0) -> Report:
        r = self.rep
        if r.by in ("account", "user"):
            for tot in r.groups.values():
                tot.available_h, tot.down_h, tot.drained_h = (r.cluster.available_h, r.cluster.down_h,
                                                             r.cluster.drained_h)
        r.skipped = skipped
        return r


class Lines:
    """sacct's lines -> allocations, counting what it could not read."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.skipped = 0
        self.errors: list[str] = []

    def allocation(self, line: str) -> Allocation | None:
        f = line.split("|")
        if len(f) != len(SACCT_FIELDS) + 1:  # + NodeList
            if line.strip():
                self.skipped += 1
                if len(self.errors) < 5:
                    self.errors.append(line[:200])
            return None
        job, user, account, partition, tres, s, e, state, nodelist = f
        t0 = parse_slurm_time(s)
        if t0 is None:
            return None  # never started
        t1 = parse_slurm_time(e)
        if t1 is None:  # still running (End=Unknown): up to now
            t1 = self.now
        # the first node's name, by hand: expanding a 1,000-node hostlist per job would cost the 1M-job fold
        first = nodelist.split(",", 1)[0]
        if "[" in first:
            first = first.split("[", 1)[0] + first.split("[", 1)[1].split("-", 1)[0].split("]", 1)[0]
        return job, user, account, partition or "(none)", alloc_gpus(tres), t0, t1, first


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_argv(start: float, end: float, sacct: str = "sacct") -> list[str]:
    # -a every user's jobs; -X allocations; -S/-E: the jobs that ran at some point in [S, E] (sacct(1) of 22.05 to
    # 26.05: "--starttime: Select jobs in any state after the specified time", "--endtime: Select jobs in any state
    # before the specified time"); --noconvert keeps numbers plain
    return [sacct, "-a", "-X", "-n", "-P", "--noconvert", "-S", _ts(start), "-E", _ts(end),
            "-o", ",".join((*SACCT_FIELDS, "NodeList"))]


def events_argv(start: float, end: float, sacctmgr: str = "sacctmgr") -> list[str]:
    # sacctmgr(1) "list events": Start/End select the events in the window, All_Time... not needed; format fields
    # NodeName, TimeStart, TimeEnd, State as the man page names them (22.05 to 26.05)
    return [sacctmgr, "-n", "-P", "show", "event", f"start={_ts(start)}", f"end={_ts(end)}",
            f"format={','.join(EVENT_FIELDS)}"]


def read(start: float, end: float, by: str, target: float, nodes: list[NodeGPUs], env: dict[str, str] | None = None,
         now: float | None = None, timeout: float = 600.0) -> Report:
    """The report from the live cluster (SLURM_CONF's): one sacctmgr query for node events, one sacct streamed."""
    from slurmkit.backend.run import run, stream

    now = time.time() if now is None else now
    end = min(end, now)
    fold = Fold(start, end, by, target)
    for n in nodes:
        fold.node(n)
    for line in run(events_argv(start, end), timeout=120, env=env).stdout.splitlines():
        f = line.split("|")
        if len(f) != len(EVENT_FIELDS) or not f[0]:
            continue  # a cluster event names no node
        e0 = parse_slurm_time(f[1])
        if e0 is not None:
            e1 = parse_slurm_time(f[2])
            fold.event(f[0], e0, end if e1 is None else e1, f[3])
    lines = Lines(now)

    def on_line(line: str) -> None:
        a = lines.allocation(line)
        if a is not None:
            fold.allocation(a)

    argv = sacct_argv(start, end)
    rc, timed_out = stream(argv, timeout, on_line, env=env)
    if timed_out:
        raise SlurmTimeout(argv, timeout)
    if rc:
        raise SlurmCommandError(argv, rc, "\n".join(lines.errors))
    return fold.finish(lines.skipped)


def table(rep: Report) -> Iterator[str]:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    yield (f"GPU utilisation {datetime.fromtimestamp(rep.start):%Y-%m-%d %H:%M} .. "
           f"{datetime.fromtimestamp(rep.end):%Y-%m-%d %H:%M}, target {100 * rep.target:.0f}%")
    yield f"{rep.by:<20} {'available':>11} {'down':>9} {'drained':>9} {'allocated':>11} {'jobs':>7} {'util':>7}"
    for name, t in [("cluster", rep.cluster), *sorted(rep.groups.items())]:
        u = t.utilisation()
        mark = "  below target" if u is not None and u < rep.target else ""
        yield (f"{name[:20]:<20} {t.available_h:>11.1f} {t.down_h:>9.1f} {t.drained_h:>9.1f} {t.allocated_h:>11.1f} "
               f"{t.jobs:>7} {pct(u):>7}{mark}")
    yield "GPU-hours; used (allocated GPUs that computed): not measured (docs/reports.md)"
    if rep.skipped:
        yield f"{rep.skipped} sacct line(s) could not be read and are not counted"


def write_png(rep: Report, path: str) -> None:
    """Allocated and available GPU-hours per day, the target as a line (matplotlib, the 'plot' extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = sorted(rep.days)
    avail = [rep.days[d].available_h for d in days]
    alloc = [rep.days[d].allocated_h for d in days]
    fig, ax = plt.subplots(figsize=(max(6, len(days) * 0.6), 4))
    x = range(len(days))
    ax.bar(x, avail, color="#d0d7de", label="available GPU-hours")
    ax.bar(x, alloc, color="#2f81f7", label="allocated GPU-hours")
    ax.plot(x, [a * rep.target for a in avail], color="#cf222e", marker="_", linestyle="none", markersize=20,
            label=f"target {100 * rep.target:.0f}%")
    ax.set_xticks(list(x), days, rotation=45, ha="right")
    ax.set_ylabel("GPU-hours")
    u = rep.cluster.utilisation()
    ax.set_title(f"GPU utilisation {'-' if u is None else f'{100 * u:.1f}%'} (target {100 * rep.target:.0f}%)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
