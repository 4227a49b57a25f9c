"""`slurmkit exporter`: the cluster's view for Prometheus, from the controller or a login node.

One scrape = one batch of Slurm queries (nodes, jobs, and sacct for GPU-hours where accounting runs), each with a
timeout, cached for ``cache_s`` so several Prometheus servers (or a slow scrape retried) cost slurmctld one batch.
``render(cluster, nodes, jobs, ...)`` is pure: it turns the parsed records into the exposition text, and is what
bench/exporter_bench.py times on a recorded 4,096-node state.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slurmkit.backend.parse import JobInfo, NodeInfo, gres_gpu_count
from slurmkit.model.cluster import Cluster
from slurmkit.monitor.metrics import Exposition, M

_DOWN_STATES = {"down", "future", "unknown"}
_DOWN_FLAGS = {"NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "FAIL"}


def job_gpus(job: JobInfo) -> int:
    """GPUs a job asks for (pending) or holds (running): --gpus (TresPerJob), --gpus-per-node/--gres (TresPerNode
    x NumNodes), --gpus-per-task (TresPerTask x NumTasks) -- the fields of `scontrol show job` (22.05 and 24.11)."""
    raw = job.raw

    def per(key: str) -> int:
        v = raw.get(key, "")
        return gres_gpu_count(",".join(x.replace("gres:", "", 1).replace("gres/", "", 1).replace("=", ":")
                                       for x in v.split(",") if "gpu" in x)) if v and v != "(null)" else 0

    if n := per("TresPerJob"):
        return n
    nodes = _num(raw.get("NumNodes", "1"))
    if n := per("TresPerNode"):
        return n * max(1, nodes)
    if n := per("TresPerTask"):
        return n * max(1, _num(raw.get("NumTasks", "1")))
    return 0


def _num(v: str | None) -> int:
    head = (v or "").split("-")[0].split(":")[0]
    return int(head) if head.isdigit() else 0


def _user(raw: dict[str, str]) -> str:
    return raw.get("UserId", "").split("(")[0]


def _epoch(v: str) -> float | None:
    try:
        return datetime.strptime(v, "%Y-%m-%dT%H:%M:%S").timestamp()
    except (TypeError, ValueError):
        return None


@dataclass
class Usage:
    """GPU-hours per account over the window (sacct), or None where accounting does not run."""

    gpu_hours: dict[str, float] = field(default_factory=dict)


# slurm.conf(5) PrivateData (22.05): "jobs" prevents users from viewing jobs belonging to other users, "users"
# information of any user other than themselves, "usage" usage of any other user (sshare, sreport). `scontrol show
# config` prints the set comma-separated, or "none" (private_data_string(), src/common/slurm_protocol_defs.c and
# src/api/config_info.c, 22.05).
HIDES_USERS = frozenset({"jobs", "users"})


def private_data(show_config: str) -> frozenset[str]:
    """PrivateData's values from ``scontrol show config`` (``PrivateData = jobs,usage``); ValueError without it."""
    for line in show_config.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() == "PrivateData":
            return frozenset(x.strip().lower() for x in v.split(",") if x.strip() and x.strip().lower() != "none")
    raise ValueError("scontrol show config: no PrivateData line")


def inventory_private_data(cluster: Cluster) -> frozenset[str]:
    """PrivateData as the inventory's ``slurm_conf:`` sets it (slurm.conf keys are case-insensitive)."""
    for k, v in cluster.slurm_conf:
        if k.lower() == "privatedata":
            return frozenset(x.strip().lower() for x in v.split(",") if x.strip() and x.strip().lower() != "none")
    return frozenset()


def label_policy(setting: bool | None, private: frozenset[str] | None) -> tuple[bool, bool]:
    """(user= labels, per-account usage) to publish: ``setting`` is monitoring.per_user_labels (None: auto);
    ``private`` the PrivateData in force, None when it could not be read (then auto publishes neither)."""
    usage = private is not None and "usage" not in private
    if setting is not None:
        return setting, usage
    return private is not None and not (private & HIDES_USERS), usage


def render(cluster: Cluster, nodes: Iterable[NodeInfo], jobs: Iterable[JobInfo], now: float,
           usage: Usage | None = None, query_s: float = 0.0, errors: dict[str, int] | None = None,
           ok: bool = True, per_user: bool = True, age_s: float = 0.0) -> str:
    """``per_user`` False: jobs and GPUs per account/QOS/state with user="" (one series per account, no names).
    ``age_s``: seconds since the last batch whose queries all answered (these records are that old)."""
    nodes = list(nodes)
    ex = Exposition()
    ex.add(M.up, {}, int(ok))
    ex.add(M.last_success_age, {}, round(age_s, 3))
    ex.add(M.scrape_s, {}, round(query_s, 6))
    for cmd, count in sorted((errors or {}).items()):
        ex.add(M.scrape_errors, {"command": cmd}, count)
    group_of: dict[str, tuple[str, str]] = {}
    for g in cluster.node_groups:
        gtype = g.gpus.type if g.gpus else ""
        for h in g.hostnames:
            group_of[h] = (g.name, gtype)
    gpus: dict[tuple[str, str, str, str], int] = defaultdict(int)
    node_states: dict[tuple[str, str], int] = defaultdict(int)
    free: set[str] = set()
    capacity = 0
    for n in nodes:
        total = gres_gpu_count(n.gres)
        used = min(total, gres_gpu_count(n.gres_used))
        capacity += total
        group, gtype = group_of.get(n.name, ("", ""))
        down = n.state in _DOWN_STATES or bool(n.flags & _DOWN_FLAGS)
        drained = "DRAIN" in n.flags
        for part in n.partitions or ("",):
            node_states[(part, "down" if down else "drained" if drained else n.state)] += 1
            if down:
                gpus[(part, group, gtype, "down")] += total
                continue
            gpus[(part, group, gtype, "allocated")] += used
            gpus[(part, group, gtype, "drained" if drained else "idle")] += total - used
        if not down and not drained and n.state == "idle" and used == 0:
            free.add(n.name)
    for n in sorted(nodes, key=lambda n: n.name):  # Slurm's own view of each node: DOWN alerts without node_exporter
        ex.add(M.node_state, {"node": n.name, "state": n.state, "flags": "+".join(sorted(n.flags)),
                              "reason": n.reason}, 1)
    for n in sorted(nodes, key=lambda n: n.name):
        for part in n.partitions:
            ex.add(M.node_partition, {"node": n.name, "partition": part}, 1)
    for (part, group, gtype, state), v in sorted(gpus.items()):
        ex.add(M.cluster_gpus, {"partition": part, "group": group, "gpu_type": gtype, "state": state}, v)
    for (part, state), v in sorted(node_states.items()):
        ex.add(M.cluster_nodes, {"partition": part, "state": state}, v)
    ex.add(M.cluster_gpu_total, {}, capacity)

    counts: dict[tuple[str, str, str, str], int] = defaultdict(int)
    gpu_counts: dict[tuple[str, str, str, str], int] = defaultdict(int)
    reasons: dict[tuple[str, str], int] = defaultdict(int)
    oldest: dict[tuple[str, str], float] = {}
    pending_largest = 0
    for j in jobs:
        state = {"RUNNING": "running", "PENDING": "pending"}.get(j.state, "")
        if not state:
            continue
        raw = j.raw
        acct, qos = raw.get("Account", "") or "", raw.get("QOS", "") or ""
        key = (acct if acct != "(null)" else "", qos if qos != "(null)" else "", _user(raw) if per_user else "",
               state)
        ngpu = job_gpus(j)
        counts[key] += 1
        gpu_counts[key] += ngpu
        if state == "pending" and ngpu:
            r = (key[0], j.reason or "None")
            reasons[r] += 1
            sub = _epoch(raw.get("SubmitTime", ""))
            if sub is not None:
                oldest[r] = max(oldest.get(r, 0.0), now - sub)
            pending_largest = max(pending_largest, _num(raw.get("NumNodes", "1")))
    for k, v in sorted(counts.items()):
        ex.add(M.jobs, dict(zip(("account", "qos", "user", "state"), k, strict=True)), v)
    for k, v in sorted(gpu_counts.items()):
        ex.add(M.job_gpus, dict(zip(("account", "qos", "user", "state"), k, strict=True)), v)
    for (acct, reason), v in sorted(reasons.items()):
        ex.add(M.pending_reason, {"account": acct, "reason": reason}, v)
    for (acct, reason), age in sorted(oldest.items()):
        ex.add(M.pending_oldest, {"account": acct, "reason": reason}, round(max(0.0, age), 1))

    from slurmkit.hostlist import expand

    best_leaf = 0
    for sw in cluster.topology.switches:
        if not sw.nodes:
            continue
        members = expand(sw.nodes)
        n_free = sum(1 for m in members if m in free)
        best_leaf = max(best_leaf, n_free)
        ex.add(M.leaf_free_nodes, {"switch": sw.name}, n_free)
        ex.add(M.leaf_nodes, {"switch": sw.name}, len(members))
    ex.add(M.largest_leaf, {}, best_leaf if cluster.topology.switches else len(free))
    ex.add(M.largest_any, {}, len(free))
    ex.add(M.pending_largest, {}, pending_largest)
    from slurmkit.elastic.reserve import reserve

    # the same count as `slurmkit report reserve` (one rule for both); nodes of no group are "(other)"
    for res in reserve(cluster, nodes):
        ex.add(M.reserve_spare, {"group": res.group}, res.spare)
        ex.add(M.reserve_planned, {"group": res.group}, res.planned)
    if cluster.tenants is not None:
        for a in cluster.tenants.accounts:
            if a.gpus.total is not None:
                ex.add(M.account_quota, {"account": a.name}, a.gpus.total)
    if usage is not None:
        for acct, hours in sorted(usage.gpu_hours.items()):
            ex.add(M.account_gpu_hours, {"account": acct}, round(hours, 3))
    return ex.text()


def parse_sacct_usage(text: str) -> Usage:
    """``sacct -a -X -n -P --truncate -S now-1days -E now -o Account,ElapsedRaw,AllocTRES`` lines -> GPU-hours per
    account (AllocTRES lists gres/gpu=N where AccountingStorageTRES records it, as slurmkit's generated config
    does; --truncate clips each job to the window: sacct(1) 22.05 and 24.11)."""
    u = Usage()
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        gpus = 0
        for item in parts[2].split(","):
            k, _, v = item.partition("=")
            if k == "gres/gpu" and v.isdigit():
                gpus = int(v)
        if gpus:
            u.gpu_hours[parts[0]] = u.gpu_hours.get(parts[0], 0.0) + gpus * int(parts[1]) / 3600.0
    return u


class Scraper:
    """The batch behind one scrape, cached ``cache_s``; concurrent scrapes share the batch in flight.

    The batch runs on its own thread and a scrape waits for it at most ``wait_s``: while slurmctld hangs (each query
    then takes its whole --timeout) /metrics still answers in time, with the last batch's series,
    ``slurmkit_exporter_up 0`` and ``slurmkit_exporter_last_success_age_seconds`` saying how old they are; the batch
    in flight finishes (or times out) on its own and the next scrape after it starts a new one. A query that fails
    keeps the last answer of that query too (a controller outage must not turn every node's series off and on:
    each would resolve and fire again when it is back)."""

    def __init__(self, cluster: Cluster, backend: Any, cache_s: float = 15.0,
                 sacct: Callable[[], str] | None = None, clock: Callable[[], float] = time.time,
                 wait_s: float | None = 5.0):
        self.cluster, self.backend, self.cache_s, self.sacct, self.clock = cluster, backend, cache_s, sacct, clock
        self.wait_s = wait_s
        self.per_user = False  # what the last batch published (user= labels)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._text = ""
        self._at = float("-inf")
        self._batches = 0  # batches finished
        self._running = False
        self.errors: dict[str, int] = defaultdict(int)
        self._usage: Usage | None = None
        self._usage_at = float("-inf")
        self._nodes: list[NodeInfo] = []
        self._jobs: list[JobInfo] = []
        self._show_usage = False
        # clock() of the last batch whose queries all answered (the start until one has: the age is a lower bound)
        self._ok_at = clock()

    def text(self) -> str:
        with self._cond:
            if self.clock() - self._at < self.cache_s and self._text:
                return self._text
            seen = self._batches
            if not self._running:
                self._running = True
                threading.Thread(target=self._batch, name="slurm-batch", daemon=True).start()
            self._cond.wait_for(lambda: self._batches != seen, timeout=self.wait_s)
            if self._batches != seen:
                return self._text
            # slurmctld has not answered within wait_s: the last result, marked stale (not cached: the next scrape
            # picks up the batch as soon as it finishes)
            return self._render(self.clock(), 0.0, ok=False)

    def _render(self, now: float, query_s: float, ok: bool) -> str:
        age = 0.0 if ok else max(0.0, now - self._ok_at)
        return render(self.cluster, self._nodes, self._jobs, now, self._usage if self._show_usage else None,
                      query_s, dict(self.errors), ok, self.per_user, age)

    def _batch(self) -> None:
        try:
            self._run_batch()
        finally:
            with self._cond:
                self._running = False
                self._batches += 1
                self._cond.notify_all()

    def _run_batch(self) -> None:
        now = self.clock()
        t0 = time.monotonic()
        ok = True
        nodes: list[NodeInfo] | None = None
        jobs: list[JobInfo] | None = None
        # the compact squeue query where the backend has one (CliBackend.live_jobs), else every job's record
        jobs_fn = getattr(self.backend, "live_jobs", None) or self.backend.jobs
        errors: list[str] = []
        for name, fn in (("nodes", self.backend.nodes), ("jobs", jobs_fn)):
            try:
                if name == "nodes":
                    nodes = fn()
                else:
                    jobs = fn()
            except Exception:  # noqa: BLE001 - a failed query is a series (exporter_up 0), never a crash
                ok = False
                errors.append(name)
        private, config_failed = self._private_data()
        per_user, show_usage = label_policy(self.cluster.monitoring.per_user_labels, private)
        usage, usage_failed = self._usage, False
        if self.sacct is not None and now - self._usage_at >= max(self.cache_s, 300.0):
            try:  # the day's usage moves slowly: sacct at most every 5 minutes
                usage = parse_sacct_usage(self.sacct())
            except Exception:  # noqa: BLE001
                ok, usage_failed = False, True
        with self._cond:
            for name in errors + ["config"] * config_failed + ["sacct"] * usage_failed:
                self.errors[name] += 1
            if nodes is not None:
                self._nodes = nodes
            if jobs is not None:
                self._jobs = jobs
            if not usage_failed and usage is not self._usage:
                self._usage, self._usage_at = usage, now
            self.per_user, self._show_usage = per_user, show_usage
            if ok:
                self._ok_at = now
            self._text = self._render(now, time.monotonic() - t0, ok)
            self._at = now

    def _private_data(self) -> tuple[frozenset[str] | None, bool]:
        """(PrivateData, whether the query failed): as the running slurmctld says (a reconfigure that turns it on
        counts from the next batch); the inventory's where the backend cannot say; None (publish no names) when the
        query fails."""
        show = getattr(self.backend, "show_config", None)
        if show is None:
            return inventory_private_data(self.cluster), False
        try:
            return private_data(show()), False
        except Exception:  # noqa: BLE001 - unknown privacy: fail closed, count it
            return None, True


def serve(scraper: Scraper, host: str, port: int, web: Any = None, limits: Any = None) -> Any:
    """The /metrics server (text format 0.0.4; monitor/web.py: bounded connections, deadlines, TLS, basic auth);
    returns it bound (serve_forever is the caller's)."""
    from slurmkit.monitor.web import Server

    def metrics() -> tuple[str, bytes]:
        return "text/plain; version=0.0.4; charset=utf-8", scraper.text().encode()

    return Server(metrics, host, port, web, limits)
