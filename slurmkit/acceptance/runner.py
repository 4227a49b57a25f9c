"""Runs a plan: measurements as Slurm jobs built by gpusub's code, the report saved after each, resume, drain.

Each measurement is one job: ``jobs.render`` (the srun launcher: one task per rank, gpusub's NCCL environment,
its run dir layout, rendezvous and resource sizing) with ``measure.py`` as the program, pinned to its nodes with
``--nodelist`` and ``--exclusive`` (nothing else on a node while it is measured). All jobs of a batch are
submitted at once; Slurm runs those that do not share nodes side by side and queues the rest.

The report (``report.json`` in the report dir) is rewritten after every finished measurement and holds the jobs
still in flight: a re-run with the same plan replays the plan against it, waits for those jobs instead of
submitting them again, and submits only what is missing.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmkit.acceptance.busbw import Expected, Rule
from slurmkit.acceptance.plan import Finding, Plan, Task, Topo
from slurmkit.errors import SlurmkitError, UsageError

if TYPE_CHECKING:
    from slurmkit.backend.base import Backend
    from slurmkit.backend.parse import Reservation
    from slurmkit.jobs.render import RenderedJob
    from slurmkit.jobs.spec import ClusterFacts, JobSpec
    from slurmkit.jobs.submit import Prepared

Progress = Callable[[str], None]
REPORT = "report.json"
FORMAT = 1
MEASURE = str(Path(__file__).with_name("measure.py"))

# sizes and iterations per transport: a CPU (gloo) sweep must stay cheap, a GPU one must reach the plateau
DEFAULT_SIZES = {"gloo": "256K,1M,4M", "nccl": "16M,64M,256M,1G", "nccl-tests": "16M,64M,256M,1G"}
DEFAULT_ITERS = {"gloo": 5, "nccl": 20, "nccl-tests": 20}


@dataclass
class Measurement:
    key: str
    level: str
    step: str
    nodes: list[str]
    leaves: list[str]
    ranks: int = 0
    transport: str = ""
    busbw: float | None = None  # peak GB/s; None: the measurement failed
    points: list[dict[str, float]] = field(default_factory=list)
    expected: float | None = None
    verdict: str = ""
    job_id: str = ""
    run_dir: str = ""
    error: str = ""
    seconds: float = 0.0
    hca: str = ""  # the hca level: the port measured


@dataclass(frozen=True)
class Settings:
    partition: str | None
    levels: tuple[str, ...]
    transport: str  # gloo | nccl | nccl-tests (resolved, never auto)
    sizes: str
    iters: int
    gpus_per_node: int
    job_time: str = "15:00"
    rule: Rule = Rule()
    all_pairs: bool = False
    # the maintenance window the jobs run in, and whose account/QOS they are charged to (sbatch --reservation,
    # --account, --qos): given to gpusub's prepare like any job's, so its preflight and placement honour them
    reservation: str | None = None
    account: str | None = None
    qos: str | None = None
    op: str = "all_reduce"  # all_reduce | alltoall (nccl-tests' <op>_perf; torch's all_reduce / all_to_all_single)
    mpi: str | None = None  # nccl-tests between nodes: srun's PMI plugin (SLURM_MPI_TYPE); None: torch instead
    hcas: tuple[str, ...] = ()  # the hca level's ports ("mlx5_0:1")

    def ranks_per_node(self, task: Task) -> int:
        """nccl/nccl-tests: every GPU of the node (nccl-tests' single process drives them all on the node level);
        gloo on CPU: two ranks for the node level (an all-reduce needs two), one per node between nodes; an HCA
        port: one ib_write_bw process per node."""
        if task.hca:
            return 1
        if self.transport == "gloo":
            return 2 if not task.inter else 1
        if self.transport == "nccl-tests" and not task.inter:
            return 1  # one all_reduce_perf process drives every GPU of the node (-g GPUS)
        return max(1, self.gpus_per_node)  # one task per GPU: torch ranks, or nccl-tests' MPI ranks with -g 1

    def tool(self, level: str) -> str:
        """What measures a level, in words (the report's ``measured_by`` says what actually did)."""
        if level == "hca":
            return f"perftest ib_write_bw per HCA port ({', '.join(self.hcas)})"
        torch_op = "all_reduce" if self.op == "all_reduce" else "all_to_all_single"
        if self.transport == "nccl-tests" and level == "node":
            return f"nccl-tests {self.op}_perf (one process, every GPU of the node)"
        if self.transport == "nccl-tests" and self.mpi:
            return f"nccl-tests {self.op}_perf over srun --mpi={self.mpi} (one task per GPU)"
        if self.transport == "gloo":
            return f"torch.distributed {torch_op} over gloo (CPU, TCP)"
        why = (" (nccl-tests between nodes needs a PMI plugin in srun --mpi=list: none found)"
               if self.transport == "nccl-tests" else "")
        return f"torch.distributed {torch_op} over NCCL{why}"

    def transport_for(self, task: Task) -> str:
        """nccl-tests on a node; between nodes too when srun gives its MPI ranks a PMI, else torch over NCCL."""
        if task.hca:
            return "ib_write_bw"
        if self.transport == "nccl-tests" and task.inter and not self.mpi:
            return "nccl"
        return self.transport

    def key(self, nodes: Sequence[str]) -> dict[str, object]:
        """What must match for a re-run to resume this report."""
        return {"partition": self.partition, "levels": list(self.levels), "transport": self.transport,
                "sizes": self.sizes, "iters": self.iters, "nodes": list(nodes), "all_pairs": self.all_pairs,
                "reservation": self.reservation, "account": self.account, "qos": self.qos, "op": self.op,
                "mpi": self.mpi, "hcas": list(self.hcas)}


class Store:
    """report.json in ``directory``: written atomically after every change."""

    def __init__(self, directory: str):
        self.dir = Path(directory)
        self.path = self.dir / REPORT
        self.doc: dict[str, Any] = {}
        self._lock_fd: int | None = None

    def load_or_start(self, key: dict[str, object], fresh: bool, progress: Progress) -> bool:
        """True when resuming. A finished or different previous report is kept as report-<time>.json."""
        old = None
        if self.path.is_file():
            try:
                old = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError):
                old = None
        if old and not fresh and not old.get("complete") and old.get("plan") == key:
            self.doc = old
            done = len(old.get("measurements", {}))
            progress(f"resuming {self.path}: {done} measurement(s) done, {len(old.get('pending', {}))} job(s) in flight")
            return True
        if old is not None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.path.stat().st_mtime))
            os.replace(self.path, self.dir / f"report-{stamp}.json")
        self.doc = {"format": FORMAT, "plan": key, "complete": False, "started": _now(), "measurements": {},
                    "pending": {}}
        self.save()
        return False

    def lock(self) -> None:
        """One run per report dir: a second one (another shell, another admin) would resume the same report,
        wait for the same jobs and submit the next ones twice. Held until the process exits (flock)."""
        import fcntl

        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(f"--out {self.dir}: cannot write the report: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UsageError(f"--out {self.dir}: another acceptance run (pid {holder}) is using this report dir; "
                             "wait for it or give another --out") from exc
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd  # kept open: the lock lives as long as this process

    @property
    def measurements(self) -> dict[str, dict[str, Any]]:
        return self.doc.setdefault("measurements", {})

    @property
    def pending(self) -> dict[str, dict[str, str]]:
        return self.doc.setdefault("pending", {})

    def save(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f".{REPORT}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(self.doc, indent=1, sort_keys=False) + "\n")
            os.replace(tmp, self.path)
        except OSError as exc:
            raise UsageError(f"--out {self.dir}: cannot write the report: {exc.strerror}") from exc


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# --- the driver ---------------------------------------------------------------------------------------------------

class Executor:
    """Runs tasks and returns their measurements (SlurmExecutor; bench/acceptance_sim.py has a modelled one)."""

    jobs_submitted: int = 0

    def run(self, tasks: list[Task], store: Store, progress: Progress) -> None:  # pragma: no cover - protocol
        raise NotImplementedError


def drive(p: Plan, executor: Executor, store: Store, progress: Progress) -> list[Finding]:
    """Feed the plan, serving every task already in the report from it."""
    try:
        batch = next(p)
    except StopIteration as stop:  # nothing to measure (one node and only inter-node levels)
        return list(stop.value)
    while True:
        todo = [t for t in batch if t.key not in store.measurements]
        if todo:
            executor.run(todo, store, progress)
        results = {t.key: store.measurements[t.key].get("busbw") if t.key in store.measurements else None
                   for t in batch}
        try:
            batch = p.send(results)
        except StopIteration as stop:
            return list(stop.value)


# --- Slurm -------------------------------------------------------------------------------------------------------

def _safe(key: str) -> str:
    """A run dir name for a task key; a long key (a leaf, all nodes) keeps its start plus a hash of the whole."""
    import hashlib

    name = re.sub(r"[^A-Za-z0-9_.-]", "_", key.replace("+", "-").replace(":", "-"))
    if len(name) > 100:
        name = f"{name[:80]}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    return name


class SlurmExecutor(Executor):
    def __init__(self, backend: Backend, facts: ClusterFacts, settings: Settings, topo: Topo, expected: Expected,
                 poll: float = 1.0, environ: Mapping[str, str] | None = None):
        self.backend = backend
        self.facts = facts
        self.settings = settings
        self.topo = topo
        self.expected = expected
        self.poll = poll
        self.environ = dict(os.environ if environ is None else environ)
        self.jobs_submitted = 0

    def spec(self, t: Task, run_dir: str) -> JobSpec:
        """The measurement as a gpusub job: the srun launcher, exclusive, pinned to the task's nodes (the user's
        own --nodelist, which placement leaves alone), in the reservation, account and QOS asked for."""
        from slurmkit.jobs.spec import JobSpec

        s = self.settings
        rpn = s.ranks_per_node(t)
        transport = s.transport_for(t)
        args = ["--sizes", s.sizes, "--iters", str(s.iters), "--transport", transport, "--op", s.op,
                "--out", f"{run_dir}/result.json"]
        env: tuple[tuple[str, str], ...] = ()
        if t.hca:
            args = ["--ib-write-bw", t.hca, "--out", f"{run_dir}/result.json"]
        elif transport == "nccl-tests" and not t.inter:
            args += ["--gpus", str(s.gpus_per_node)]
        elif transport == "nccl-tests":
            # srun(1) of slurm-22-05-8-1 and slurm-24-11-5-1: SLURM_MPI_TYPE "Same as --mpi": the job's srun starts
            # each task under that PMI, which the MPI build of nccl-tests joins (no mpirun, no ssh)
            env = (("SLURM_MPI_TYPE", s.mpi or "none"),)
        return JobSpec(
            script=MEASURE, args=tuple(args), nodes=len(t.nodes), gpus_per_node=rpn if transport != "nccl-tests"
            else s.gpus_per_node, partition=s.partition, time=s.job_time, name=f"acceptance-{t.level}",
            launcher="srun", exclusive=True, signal_grace=0, max_restarts=0, topology="off", run_dir=run_dir,
            python=sys.executable, nodelist=",".join(t.nodes), reservation=s.reservation, account=s.account,
            qos=s.qos, env=env,
        )

    def prepare(self, t: Task, run_dir: str, backend: Backend | None = None) -> Prepared:
        """gpusub's prepare (render and preflight; with ``backend`` also its tenant check and sbatch --test-only)
        on the measurement's spec, with the facts read once for the run."""
        from slurmkit.jobs.submit import prepare

        s = self.settings
        p = prepare(self.spec(t, run_dir), backend, facts=self.facts, environ=self.environ,
                    test_only=backend is not None)
        if s.transport_for(t) == "nccl-tests" and not t.inter:  # one process drives every GPU: one task per node
            job = p.job
            p = replace(p, job=replace(job, request=replace(job.request, script=job.request.script.replace(
                f"--ntasks-per-node={s.gpus_per_node}", "--ntasks-per-node=1"))))
        return p

    def render(self, t: Task, run_dir: str) -> RenderedJob:
        return self.prepare(t, run_dir).job

    def preflight(self, tasks: Sequence[Task], run_dir: str) -> Prepared:
        """Before anything is submitted: the widest measurement through gpusub's whole preflight against Slurm (the
        account and QOS exist and may be used, the reservation exists, sbatch --test-only accepts the job), so a
        wrong --account/--qos/--reservation is one error now, not a report of failed jobs."""
        widest = max(tasks, key=lambda t: len(t.nodes))
        return self.prepare(widest, run_dir, self.backend)

    def run(self, tasks: list[Task], store: Store, progress: Progress) -> None:
        """Run the tasks; one that failed without a result (a job that could not start its rendezvous: a port
        taken meanwhile, a node that went away) is submitted once more: a failed job measures nothing."""
        self._run(tasks, store, progress)
        failed = [t for t in tasks if store.measurements.get(t.key, {}).get("busbw") is None]
        if failed:
            progress(f"{len(failed)} measurement(s) failed, running them once more: "
                     + "; ".join(f"{t.key}: {store.measurements[t.key].get('error', '')[:120]}" for t in failed))
            first = {t.key: store.measurements.pop(t.key) for t in failed}
            self._run(failed, store, progress)
            for t in failed:
                store.measurements[t.key]["first_attempt_error"] = first[t.key].get("error", "")
            store.save()

    def _run(self, tasks: list[Task], store: Store, progress: Progress) -> None:
        from slurmkit.jobs.submit import submit_prepared

        root = store.dir / "jobs"
        inflight: dict[str, tuple[Task, str, str, float]] = {}  # job id -> (task, run dir, transport, t0)
        for t in tasks:
            if t.key in store.pending:  # a resumed run: the job was submitted before, wait for it
                pend = store.pending[t.key]
                inflight[pend["job_id"]] = (t, pend["run_dir"], self.settings.transport_for(t), time.time())
                continue
            run_dir = str((root / _safe(t.key)).resolve())
            if Path(run_dir).exists():
                run_dir = f"{run_dir}-{os.urandom(2).hex()}"
            res = submit_prepared(self.prepare(t, run_dir), self.backend, ["slurmkit", "acceptance", "run"],
                                  self.environ)
            self.jobs_submitted += 1
            inflight[res.job_id] = (t, run_dir, self.settings.transport_for(t), time.time())
            store.pending[t.key] = {"job_id": res.job_id, "run_dir": run_dir}
            store.save()
        last = ""
        while inflight:
            states = {j.job_id: j for j in self.backend.jobs(list(inflight))}
            for jid in list(inflight):
                info = states.get(jid)
                if info is not None and not info.finished:
                    continue
                t, run_dir, transport, t0 = inflight.pop(jid)
                store.measurements[t.key] = asdict(self._collect(t, jid, run_dir, transport, info, time.time() - t0))
                store.pending.pop(t.key, None)
                store.save()
            running = sum(1 for j in states.values() if j.state == "RUNNING")
            queued = sum(1 for j in states.values() if j.state == "PENDING")
            current = next((t.why for t, *_ in inflight.values()), "")
            msg = (f"{queued} queued, {running} running, {len(store.measurements)} done"
                   + (f"; now: {current}" if current else ""))
            if msg != last:
                progress(msg)
                last = msg
            if inflight:
                time.sleep(self.poll)

    def _collect(self, t: Task, job_id: str, run_dir: str, transport: str, info, seconds: float) -> Measurement:  # type: ignore[no-untyped-def]
        m = Measurement(t.key, t.level, t.step, list(t.nodes), [self.topo.leaf_of.get(n, "") for n in t.nodes],
                        ranks=self.settings.ranks_per_node(t) * len(t.nodes), transport=transport, job_id=job_id,
                        run_dir=run_dir, seconds=round(seconds, 2), hca=t.hca,
                        # one rail's ib_write_bw is not the node's all-reduce: no inventory expectation
                        expected=None if t.hca else self.expected.for_level("node" if not t.inter else "pair")[0])
        p = Path(run_dir) / "result.json"
        try:
            res = json.loads(p.read_text())
            m.busbw = float(res["peak_busbw"])
            m.points = list(res.get("points", []))
            m.transport = str(res.get("transport", transport))
            m.ranks = int(res.get("world", m.ranks))
        except (OSError, ValueError, KeyError, TypeError):
            state = info.state if info is not None else "gone from the queue"
            m.error = f"job {job_id} {state}, no result: see {run_dir}/logs/{job_id}.r0.log"
            m.error += _tail(Path(run_dir) / "logs" / f"{job_id}.r0.log")
        return m


def _tail(p: Path) -> str:
    try:
        lines = [ln for ln in p.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return (" (last line: " + lines[-1][-200:] + ")") if lines else ""


# --- facts, topology, expected values ------------------------------------------------------------------------------

def topology_of(facts: ClusterFacts, nodes: Sequence[str]) -> Topo:
    """The nodes in fabric order (leaf by leaf, as the topology lists them) with their leaf switch."""
    from slurmkit.jobs.topology import _topology

    topo = _topology(facts)
    leaf_of: dict[str, str] = {}
    order: list[str] = []
    want = set(nodes)
    if topo is not None:
        for name, members in zip(topo.leaf_names, topo.leaf_nodes, strict=True):
            for n in members:
                if n in want:
                    leaf_of[n] = name
                    order.append(n)
    order += [n for n in nodes if n not in leaf_of]
    return Topo(tuple(order), leaf_of)


def expected_of(facts: ClusterFacts) -> Expected:
    """From the site inventory when there is one (gpusub's facts), else nothing (the distribution decides)."""
    from slurmkit.acceptance.busbw import expected_from

    if not facts.source.startswith("inventory:"):
        return Expected()
    from slurmkit.model.cache import load_cluster_cached

    cluster = load_cluster_cached(facts.source.split(":", 1)[1])
    groups = [g for g in cluster.node_groups if g.gpus and any(h for h, _ in facts.node_gpus if h in set(g.hostnames))]
    if not groups:
        return Expected()
    g = groups[0]
    rates = [n.rate_gbps for n in g.nics if n.role == "compute" and n.kind in ("ib", "roce", "eth")]
    assert g.gpus is not None
    return expected_from(g.gpus.type, g.gpus.links, rates)


def choose_transport(asked: str, environ: Mapping[str, str], which: Callable[[str], str | None],
                     op: str = "all_reduce") -> str:
    """auto: nccl-tests when its <op>_perf is installed, NCCL when this host has the NVIDIA driver, else gloo.
    Decided on the submitting host (a login node without GPUs should pass --transport nccl)."""
    if asked != "auto":
        return asked
    if which(f"{op}_perf"):
        return "nccl-tests"
    if Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists():
        return "nccl"
    return "gloo"


def verdicts(store: Store, findings: list[Finding], rule: Rule) -> None:
    """Every measurement's verdict: error, slow (evidence of a confirmed finding), suspect (of one that was not
    confirmed), below-expected, or ok."""
    named = {k for f in findings if f.confirmed for k in f.evidence}
    suspect = {k for f in findings if not f.confirmed for k in f.evidence}
    for key, m in store.measurements.items():
        if m.get("busbw") is None:
            m["verdict"] = "error"
        elif key in named:
            m["verdict"] = "slow"
        elif key in suspect:
            m["verdict"] = "suspect"
        elif m.get("expected") and m["busbw"] < m["expected"] * (1 - rule.tol):
            m["verdict"] = "below-expected"
        else:
            m["verdict"] = "ok"


def measured_by(store: Store, levels: Sequence[str]) -> list[dict[str, Any]]:
    """Which tool measured each level, from what the jobs wrote (``transport`` of each result: ``nccl-tests`` with
    its binary and launch, ``torch-nccl``, ``torch-gloo``), with the count of measurements of each tool; a level with
    failed measurements only says so."""
    out = []
    for lv in levels:
        ms = [m for m in store.measurements.values() if m["level"] == lv]
        if not ms:
            continue
        count: dict[str, int] = {}
        for m in ms:
            if m.get("busbw") is not None:
                count[m.get("transport") or "?"] = count.get(m.get("transport") or "?", 0) + 1
        out.append({"level": lv, "tool": ", ".join(sorted(count)) or "none (every measurement failed)",
                    "measurements": count})
    return out


def drain(backend: Backend, findings: list[Finding], store: Store, progress: Progress) -> list[dict[str, str]]:
    """Drain each confirmed bad node, with a ``slurmkit:`` reason naming the measurement. A node already drained for
    someone else's reason keeps it (never overwrite a foreign reason)."""
    from slurmkit.backend.parse import strip_reason_stamp

    out = []
    for f in findings:
        if f.kind != "node" or not f.confirmed:
            continue
        n = f.nodes[0]
        key = f.evidence[-1]
        m = store.measurements.get(key, {})
        bw = m.get("busbw")
        reason = (f"slurmkit: acceptance {key} busbw {bw:.3g} GB/s" if bw is not None else f"slurmkit: acceptance {key}")
        reason += f" (report {store.path})"
        try:
            node = backend.node(n)
        except SlurmkitError as exc:
            out.append({"node": n, "action": "skipped", "why": exc.one_line()})
            continue
        current = strip_reason_stamp(node.reason) if node.reason else ""
        if node.drained and current and not current.startswith("slurmkit:"):
            out.append({"node": n, "action": "kept", "why": f"already drained: {current}"})
            continue
        backend.drain(n, reason)
        progress(f"drained {n}: {reason}")
        out.append({"node": n, "action": "drained", "reason": reason})
    return out


# --- the whole run ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    partition: str | None = None
    nodes: str | None = None  # hostlist
    levels: tuple[str, ...] = ("node", "pair", "hca", "leaf", "all")
    levels_given: bool = False  # --levels given: a level that cannot run (hca without HCAs) is an error, not skipped
    transport: str = "auto"
    sizes: str | None = None
    iters: int | None = None
    out: str = "slurmkit-acceptance"
    drain: bool = False
    fresh: bool = False
    all_pairs: bool = False
    job_time: str = "15:00"
    rule: Rule = Rule()
    reservation: str | None = None
    account: str | None = None
    qos: str | None = None
    op: str = "all_reduce"
    mpi: str = "auto"  # auto | pmix | pmi2 | ... | none: how nccl-tests' MPI ranks meet between nodes
    hcas: str | None = None  # the hca level's ports: "mlx5_0,mlx5_1:2"; None: the inventory's compute HCAs


MPI_PREFERENCE = ("pmix", "pmi2")


def choose_mpi(asked: str, plugins: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The srun PMI plugin for nccl-tests between nodes: the asked one (it must be listed), the site's own
    SLURM_MPI_TYPE, else PMIx, else PMI-2 (what ``srun --mpi=list`` shows); None: torch measures between nodes
    ("none" has no PMI, so an MPI build of nccl-tests would start n single-rank jobs)."""
    if asked == "none":
        return None
    if asked != "auto":
        if plugins and asked not in plugins:
            raise UsageError(f"--mpi: {asked!r} is not among srun --mpi=list: {', '.join(plugins)}")
        return asked
    site = environ.get("SLURM_MPI_TYPE", "")
    if site and site != "none" and (not plugins or site in plugins):
        return site
    return next((m for m in MPI_PREFERENCE if m in plugins), None)


def hcas_of(facts: ClusterFacts) -> tuple[str, ...]:
    """The compute HCA ports of the inventory's GPU node group (none without an inventory)."""
    from slurmkit.acceptance.ib import hcas_from

    if not facts.source.startswith("inventory:"):
        return ()
    from slurmkit.model.cache import load_cluster_cached

    cluster = load_cluster_cached(facts.source.split(":", 1)[1])
    hosts = {h for h, _ in facts.node_gpus}
    for g in cluster.node_groups:
        if g.gpus and hosts & set(g.hostnames):
            return hcas_from((n.name, n.kind, n.role) for n in g.nics)
    return ()


def _hca_levels(req: Request, facts: ClusterFacts, which: Callable[[str], str | None]
                ) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """(levels, HCA ports, note): the hca level runs where HCAs exist (--hcas, else the inventory's compute
    NICs) and perftest's ib_write_bw is installed; otherwise it is left out with a note, or refused when --levels
    asked for it."""
    from slurmkit.acceptance.ib import parse_hcas

    if "hca" not in req.levels:
        return tuple(req.levels), (), ""
    try:
        hcas = parse_hcas(req.hcas) if req.hcas else hcas_of(facts)
    except ValueError as exc:
        raise UsageError(f"--hcas: {exc}") from exc
    missing = ("no HCA known (the inventory's compute NICs of kind ib/roce, or --hcas mlx5_0,mlx5_1)" if not hcas
               else "" if which("ib_write_bw") else "ib_write_bw is not installed here (Debian package perftest)")
    if not missing:
        return tuple(req.levels), hcas, ""
    if req.levels_given:
        raise UsageError(f"--levels hca: {missing}")
    return tuple(lv for lv in req.levels if lv != "hca"), (), f"hca level left out: {missing}"


def _reservation(facts: ClusterFacts, name: str) -> Reservation:
    r = next((r for r in facts.reservations if r.name == name), None)
    if r is None:
        known = ", ".join(sorted(r.name for r in facts.reservations)) or "none"
        raise UsageError(f"--reservation: {name!r} does not exist (reservations: {known})")
    if facts.live_at and r.start > facts.live_at + 60 and "FLEX" not in r.flags:
        # a job in a reservation cannot start before it does (reservation.c job_test_resv, 22.05 and 24.11): the
        # measurement would sit queued until the window opens (one that opens within the minute is taken as open:
        # a window an admin created with StartTime=now a moment ago)
        from datetime import datetime

        raise UsageError(f"--reservation {name}: the window starts at {datetime.fromtimestamp(r.start):%Y-%m-%dT%H:%M:%S}"
                         "; run acceptance once it has begun (nothing submitted)")
    return r


def select_nodes(facts: ClusterFacts, asked: str | None, reservation: str | None = None
                 ) -> tuple[list[str], list[str]]:
    """(nodes to test, skipped with why): the partition's nodes (or the asked ones, which must be in it), minus
    those that cannot run a job now (down, drained, not responding).

    With ``reservation`` (a maintenance window): its nodes in the partition by default, and asked ones must be
    among them (a job in a reservation runs on its nodes only: scontrol(1) of slurm-22-05-8-1 and slurm-24-11-5-1,
    RESERVATIONS). Without it, a node in another active reservation is skipped with the flag that would test it:
    the reservation owns it, so a job outside it would wait until the window ends."""
    from slurmkit import hostlist

    members = [n for n, _ in facts.node_gpus] or [n[0] for n in facts.live_nodes]
    resv = _reservation(facts, reservation) if reservation else None
    bounded = resv is not None and bool(resv.nodes) and not resv.flags & {"ANY_NODES", "FLEX"}
    if resv is not None and bounded:
        inside = [n for n in members if n in set(resv.nodes)]
        if not inside:
            raise UsageError(f"--reservation {resv.name}: none of its nodes ({hostlist.fold(resv.nodes)}) is in "
                             f"partition {facts.partition}")
        if not asked:
            members = inside
    if asked:
        try:
            want = hostlist.expand(asked)
        except Exception as exc:  # noqa: BLE001 - ClusterShell raises its own parse errors
            raise UsageError(f"--nodes: {asked!r} is not a host list ({exc})") from exc
        outside = [n for n in want if n not in members]
        if outside:
            raise UsageError(f"--nodes: {', '.join(outside)} not in partition {facts.partition}")
        if resv is not None and bounded:
            stray = [n for n in want if n not in set(resv.nodes)]
            if stray:
                raise UsageError(f"--nodes: {', '.join(stray)} not in reservation {resv.name} "
                                 f"({hostlist.fold(resv.nodes)})")
        members = [n for n in members if n in set(want)]
    owned: dict[str, str] = {}
    now = facts.live_at or time.time()
    for r in facts.reservations:
        if r is resv or "ANY_NODES" in r.flags or not r.start <= now < r.end:
            continue
        for n in r.nodes:
            owned.setdefault(n, r.name)
    live = {n: (state, flags) for n, state, flags, _, _ in facts.live_nodes}
    keep, skipped = [], []
    for n in members:
        st = live.get(n)
        if st is not None and (st[0] in ("down", "unknown", "future") or "DRAIN" in st[1]
                               or "NOT_RESPONDING" in st[1]):
            skipped.append(f"{n} ({st[0]}{'+' + '+'.join(sorted(st[1])) if st[1] else ''})")
        elif n in owned:
            skipped.append(f"{n} (in reservation {owned[n]}: --reservation {owned[n]} tests it)")
        else:
            keep.append(n)
    if not keep:
        where = (f"--nodes {asked}" if asked else f"reservation {resv.name}" if resv is not None
                 else f"partition {facts.partition}")
        raise UsageError(f"{where}: no node can run a job now ({', '.join(skipped) or 'no nodes'})")
    return keep, skipped


def acceptance(req: Request, backend: Backend, progress: Progress, environ: Mapping[str, str] | None = None,
               which: Callable[[str], str | None] | None = None) -> dict[str, Any]:
    """Measure, bisect, report (report.json + report.png in ``req.out``), drain when asked. Returns the document."""
    import shutil

    from slurmkit.acceptance import plan as planmod
    from slurmkit.acceptance import report
    from slurmkit.acceptance.busbw import parse_sizes
    from slurmkit.jobs import facts as factsmod

    env = dict(os.environ if environ is None else environ)
    bad = [lv for lv in req.levels if lv not in planmod.LEVELS]
    if bad or not req.levels:
        raise UsageError(f"--levels: {','.join(bad) or '(empty)'} not among {','.join(planmod.LEVELS)}")
    transport = choose_transport(req.transport, env, which or shutil.which, req.op)
    if req.op not in ("all_reduce", "alltoall"):
        raise UsageError(f"--op: {req.op!r} is not all_reduce or alltoall")
    mpi = None
    if transport == "nccl-tests" and any(lv != "node" for lv in req.levels):
        lister = getattr(backend, "mpi_plugins", None)
        mpi = choose_mpi(req.mpi, lister() if lister is not None else [], env)
    sizes = req.sizes or DEFAULT_SIZES[transport]
    try:
        parse_sizes(sizes)
    except ValueError as exc:
        raise UsageError(f"--sizes: {exc}") from exc
    from slurmkit.slurmtime import parse_time_minutes

    try:  # before anything is written or submitted (gpusub's render would refuse it only at the first job)
        parse_time_minutes(req.job_time)
    except UsageError as exc:
        raise UsageError(f"--job-time: {req.job_time!r} is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)"
                         ) from exc
    if req.nodes is not None and not req.nodes.strip():
        raise UsageError("--nodes: empty host list (leave --nodes out to test the whole partition)")
    t0 = time.time()
    inv = factsmod.load_inventory_facts(req.partition, factsmod.inventory_path(env))
    facts = factsmod.from_slurm(backend, req.partition, inv)
    nodes, skipped = select_nodes(facts, req.nodes, req.reservation)
    for s in skipped:
        progress(f"skipping {s}: it cannot run a job now")
    gpus = max((g for n, g in facts.node_gpus if n in set(nodes)), default=0) or (facts.gpus_per_node or 0)
    levels, hcas, hca_note = _hca_levels(req, facts, which or shutil.which)
    if hca_note:
        progress(hca_note)
    settings = Settings(partition=facts.partition, levels=levels, transport=transport, sizes=sizes,
                        iters=req.iters or DEFAULT_ITERS[transport], gpus_per_node=gpus, job_time=req.job_time,
                        rule=req.rule, all_pairs=req.all_pairs, reservation=req.reservation, account=req.account,
                        qos=req.qos, op=req.op, mpi=mpi, hcas=hcas)
    topo = topology_of(facts, nodes)
    # gloo moves CPU buffers over TCP: the inventory's NVLink and NIC rates say nothing about it (the lab's h100
    # nodes would read 'below-expected' at 1 GB/s against NVLink's 450)
    expected = expected_of(facts) if transport != "gloo" else Expected()
    executor = SlurmExecutor(backend, facts, settings, topo, expected, environ=env)
    inter = len(topo.nodes) > 1 and any(lv != "node" for lv in levels)
    widest = planmod.task("all" if inter else "node", "measure", topo.nodes if inter else topo.nodes[:1], "preflight")
    pre = executor.preflight([widest], str(Path(req.out) / "jobs" / "preflight"))
    for w in pre.warnings:
        progress(f"preflight: {w}")
    store = Store(req.out)
    store.lock()
    resumed = store.load_or_start(settings.key(topo.nodes), req.fresh, progress)
    progress(f"{len(topo.nodes)} node(s) of {facts.partition} ({len(topo.leaves())} leaf/leaves), levels "
             f"{','.join(levels)}, transport {transport}, sizes {sizes}; "
             + "; ".join(f"{lv} level by {settings.tool(lv)}" for lv in levels))
    judged: list[dict[str, Any]] = []
    gen = planmod.plan(topo, levels, req.rule, {"all": expected.inter}, all_pairs=req.all_pairs, judged=judged,
                       hcas=hcas)
    findings = drive(gen, executor, store, progress)
    verdicts(store, findings, req.rule)
    doc = store.doc
    doc.update({
        "complete": True, "finished": _now(), "resumed": resumed, "partition": facts.partition,
        "nodes": list(topo.nodes), "leaves": topo.leaves(), "skipped": skipped, "transport": transport,
        "sizes": sizes, "rule": {"k": req.rule.k, "tol": req.rule.tol},
        "reservation": req.reservation, "account": req.account, "qos": req.qos, "op": req.op, "mpi": mpi,
        "measured_by": measured_by(store, levels), "hcas": list(hcas), "hca_note": hca_note,
        "expected": asdict(expected),
        "expected_note": "" if transport != "gloo" else
        "gloo measures CPU copies over TCP: the inventory's NVLink/NIC rates do not apply",
        # every application of the rule: what it judged, median, log-MAD, threshold, the lowest value and its
        # margin (lowest / threshold; below 1 is slow)
        "judged": judged,
        # every job behind the report (a resumed run adds its own to the earlier ones), and this run's share
        "jobs": len({m["job_id"] for m in store.measurements.values() if m.get("job_id")}),
        "jobs_this_run": executor.jobs_submitted,
        "wall_s": round(time.time() - t0, 1), "report": str(store.path),
        "facts": facts.source,
    })
    out = report.document(doc, findings)
    png = report.picture(out, store.dir / "report.png")
    out["png"] = png
    if png is None:
        out["png_note"] = "matplotlib not installed: pip install 'slurmkit[plot]' for report.png"
    out["drained"] = drain(backend, findings, store, progress) if req.drain else []
    doc.update({k: out[k] for k in ("outliers", "suspects", "png", "drained")})
    store.save()
    return out
