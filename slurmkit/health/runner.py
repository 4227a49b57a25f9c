"""Run the enabled checks of one hook within a global budget: gather (NVML worker + host threads), then evaluate.

Order matters for speed and safety: the NVML worker is forked first (before any thread exists, so the fork is
clean), the host gathers run in daemon threads while NVML works, and everything is joined against deadlines.
A gather that misses its deadline makes its check FAIL ("timed out") — fail closed — and the hook goes on.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurmkit.health import gpuid, host, xid
from slurmkit.health import policy as policy_mod
from slurmkit.health.checks import CHECKS, EvalContext, Verdict, daemon_names, exempt_uids, interfaces_wanted
from slurmkit.health.expect import Expectations
from slurmkit.health.nvmlworker import PROBES, GatherResult, Worker
from slurmkit.health.policy import Policy
from slurmkit.health.result import Action, CheckResult, Status
from slurmkit.health.state import LockTimeout, atomic_write, locked_or_unwritable, record_mode, write_error


@dataclass
class RunSpec:
    hook: str  # prolog | epilog | health | check
    node: str
    policy: Policy
    expect: Expectations
    node_state_dir: str | None  # None: read-only run (no cursor commits)
    fake_nvml: str | None = None
    paths: host.HostPaths = field(default_factory=host.HostPaths)
    # The job's GPUs (SLURM_JOB_GPUS, node-level gres indices); None = all GPUs (health, check). A prolog/epilog of a
    # job without GPUs passes [] and no per-GPU check touches any GPU.
    job_gres_indices: list[int] | None = None
    job_id: str | None = None
    ppid: int | None = None
    deadline: float = 0.0  # time.monotonic() by which gathering must be over
    commit_xid: bool = True
    worker: Worker | None = None  # pre-forked by the hook edge (Worker.prefork); None = fork here
    # the file the policy came from (the inventory or the site policy file): the commands check runs the site's
    # commands only when no one but root (or the hook's own user) can change it; None: no command runs
    policy_source: str | None = None


@dataclass
class RunOutput:
    results: list[CheckResult]
    gathered: GatherResult | None
    nvml_devices: dict[str, Any]  # the NVML "init" record
    bookkeeping: list[str] = field(default_factory=list)  # state that could not be saved (never a check failure)


class _Job(threading.Thread):
    """A gather in a daemon thread: a stuck statvfs on a dead mount cannot keep the hook alive."""

    def __init__(self, name: str, fn: Callable[[], Any]):
        super().__init__(name=f"gather-{name}", daemon=True)
        self.fn = fn
        self.value: Any = None
        self.error: BaseException | None = None
        self.elapsed = 0.0

    def run(self) -> None:
        t = time.monotonic()
        try:
            self.value = self.fn()
        except BaseException as exc:  # reported as the check's result, never raised into the hook
            self.error = exc
        self.elapsed = time.monotonic() - t


def _xid_gather(spec: RunSpec, fail_codes: frozenset[int]) -> xid.XidScan:
    if spec.fake_nvml:
        from slurmkit.health.fakenvml import load_state

        st = load_state(spec.fake_nvml, spec.node)
        # [seq, text] is a kernel record; [seq, text, prio] carries the /dev/kmsg prefix's prio (facility << 3 | level)
        records = [xid.Record(int(row[0]), str(row[1]).split("\n", 1)[0], int(row[2]) >> 3 if len(row) > 2 else 0)
                   for row in st.get("kmsg", [])]
        boot_id, source = str(st.get("boot_id", "fake-boot")), "fake kmsg"
    else:
        records, boot_id, source = None, xid.read_boot_id(), spec.paths.kmsg
    if not spec.node_state_dir:
        state = xid.XidState()
        if records is None:
            records = xid.read_kmsg(spec.paths.kmsg)
        return xid.scan(records, state, boot_id, fail_codes, source)
    path = os.path.join(spec.node_state_dir, "xid.json")
    if not spec.commit_xid:
        # read-only (`slurmkit check`): no lock taken or created; xid.json is replaced atomically, read it as it is
        state = xid.XidState.load(path)
        if records is None:
            records = xid.read_kmsg(spec.paths.kmsg, after=state.seq if state.boot_id == boot_id else -1)
        return xid.scan(records, state, boot_id, fail_codes, source)
    remaining = max(0.05, spec.deadline - time.monotonic())
    # The cursor is read-modify-write shared by concurrent prologs/epilogs/health runs: hold the lock across it.
    # A state dir that is read-only or full costs the cursor, never the verdict: scan, report, commit nothing.
    with locked_or_unwritable(path + ".lock", timeout=remaining) as lock_error:
        state = xid.XidState.load(path)
        if records is None:
            after = state.seq if state.boot_id == boot_id else -1
            records = xid.read_kmsg(spec.paths.kmsg, after=after)
        result = xid.scan(records, state, boot_id, fail_codes, source)
        result.commit_error = lock_error
        if not lock_error and result.state.to_json() != state.to_json():
            import json  # most runs see nothing new: no write

            try:
                # the sticky records quote kernel lines (a user's program can appear in one): a record's mode
                atomic_write(path, json.dumps(result.state.to_json()), mode=record_mode())
            except OSError as exc:
                result.commit_error = write_error(path, exc)
    return result


def _boot_id(spec: RunSpec) -> str:
    if spec.fake_nvml:
        from slurmkit.health.fakenvml import load_state

        try:
            return str(load_state(spec.fake_nvml, spec.node).get("boot_id", "fake-boot"))
        except (OSError, ValueError):
            return "fake-boot"
    return xid.read_boot_id()


def _expected_count(spec: RunSpec) -> int | None:
    n = spec.policy.check("gpu_count").get("expected")
    return n if n is not None else spec.expect.gpu_count


def gpus_expected(spec: RunSpec) -> bool:
    n = _expected_count(spec)
    if n is not None:
        return n > 0
    return host.gpus_expected_by_devices(spec.paths)


def run_checks(spec: RunSpec, extra: dict[str, Any] | None = None,
               between: Callable[[GatherResult | None, dict[str, Any]], dict[str, Any]] | None = None) -> RunOutput:
    """Gather and evaluate. ``between(gathered, owners)`` runs after gathering and before evaluation (epilog
    cleanup; ``owners``: pid -> the job it belongs to) and returns facts merged into ``EvalContext.extra``."""
    enabled = {c.name: c for c in spec.policy.enabled_for(spec.hook)}
    probes = [p for p in PROBES if p in enabled]
    need_nvml = bool(probes) or any(n in enabled for n in ("nvml", "gpu_count", "driver", "xid"))
    gathered: GatherResult | None = None
    minors = spec.expect.job_minors(spec.job_gres_indices) if spec.job_gres_indices is not None else None

    # 1. host gathers, started after the fork below (threads + fork do not mix)
    jobs: dict[str, _Job] = {}
    pol = spec.policy
    host_fns: dict[str, Callable[[], Any]] = {
        "ib": lambda: host.gather_ib(spec.paths),
        "cpu_governor": lambda: host.gather_cpu_governor(spec.paths),
        "memory": lambda: host.gather_memory(spec.paths),
        "disk_space": lambda: host.gather_disk(tuple(pol.check("disk_space").get("paths") or ())),
        "slurmd_oom": lambda: host.gather_slurmd_oom(spec.paths, spec.node, spec.ppid),
        "xid": lambda: _xid_gather(spec, frozenset(pol.check("xid").get("codes") or ())),
        # the statvfs probes get 80% of the check's timeout: the rest is the margin the gather thread needs to report
        # a hung mount by name before the runner gives up on the whole gather (50 ms was too thin on a loaded node)
        "filesystems": lambda: host.gather_filesystems(spec.paths, tuple(pol.check("filesystems").get("required") or ()),
                                                       max(0.05, 0.8 * pol.check("filesystems").timeout_s)),
        "edac": lambda: host.gather_edac(spec.paths),
        "hardware": lambda: host.gather_hardware(spec.paths),
        "topology": lambda: host.gather_pci_numa(spec.paths),
        "bmc": lambda: host.gather_bmc_verdict(spec.node_state_dir, time.time(), remember=spec.commit_xid),
        # one /proc pass for the daemons and D-state checks
        "procs": lambda: host.scan_processes(spec.paths, daemon_names(pol.check("daemons"))),
        "inodes": lambda: host.gather_inodes(tuple(pol.check("inodes").get("paths") or ())),
        "swap": lambda: host.gather_swap(spec.paths),
        "interfaces": lambda: host.gather_interfaces(spec.paths, _interfaces_wanted(spec)),
        "dmi": lambda: host.gather_dmi(spec.paths, policy_mod.DMI_FIELDS),
        "nvme": lambda: host.gather_nvme(spec.paths),
        "load": lambda: host.gather_load(spec.paths),
        "unauth_procs": lambda: host.gather_user_procs(spec.paths, int(pol.check("unauth_procs").get("min_uid")),
                                                       exempt_uids(pol.check("unauth_procs"))),
        "files": lambda: host.gather_files(tuple(pol.check("files").get("tests") or ()), spec.node),
        # the commands get 90% of the check's timeout (within the run's deadline): the rest lets the gather report
        # which command ran long before the runner gives up on it
        "commands": lambda: _site_commands().gather_commands(
            tuple(pol.check("commands").get("run") or ()), spec.policy_source,
            max(0.05, min(0.9 * pol.check("commands").timeout_s, spec.deadline - time.monotonic() - 0.05)))
        if pol.check("commands").get("run") else {"commands": []},
    }
    shared = {"procs": ("daemons", "dstate"), "xid": ("xid", "mce")}
    started = time.monotonic()
    worker: Worker | None = None
    if need_nvml:
        timeouts = {"init": pol.check("nvml").timeout_s, **{p: pol.check(p).timeout_s for p in probes}}
        # fork before any thread exists; collect after the host threads are running so the reads overlap
        if spec.worker is not None:
            worker = spec.worker.instruct(probes, minors, timeouts, spec.deadline)
        else:
            worker = Worker(spec.fake_nvml, spec.node, probes, minors, timeouts, spec.deadline).start()
    elif spec.worker is not None:
        spec.worker.abandon()
    for name, fn in host_fns.items():
        if name in enabled or any(c in enabled for c in shared.get(name, ())):
            jobs[name] = _Job(name, fn)
            jobs[name].start()
    if worker is not None:
        gathered = worker.collect()
    for name, j in jobs.items():
        limit = max(pol.check(c).timeout_s for c in shared[name]) if name in shared else pol.check(name).timeout_s
        j.join(max(0.0, min(spec.deadline, started + limit) - time.monotonic()))

    init = (gathered.data.get("init") if gathered else None) or {}
    bookkeeping: list[str] = []
    ib_job = jobs.get("ib")
    ib_data = ib_job.value if ib_job is not None and not ib_job.is_alive() and isinstance(ib_job.value, dict) else None
    if (gathered is not None and any(p in gathered.data for p in ("nvlink_errors", "pcie"))) or ib_data:
        # counters judged as growth since the last run (NVLink errors, PCIe replays, IB link flaps)
        from slurmkit.health import counters

        err = counters.apply(spec.node_state_dir, _boot_id(spec), time.time(), gathered.data if gathered else {},
                             init.get("devices", []) if not init.get("error") else [], ib_data,
                             commit=spec.commit_xid, lock_timeout=max(0.05, min(0.5, spec.deadline - time.monotonic())),
                             nvlink_limits=_nvlink_limits(spec))
        if err:
            bookkeeping.append(err)
    if gathered is not None and "gpu_procs" in gathered.data:
        # whose are the processes on the GPUs: another running job's (shards, MPS) are never judged or killed; the
        # health check judges the leftovers of ended jobs (the cause of a prolog's "busy" drain) node-wide
        procs = {i: d.get("compute_processes") for i, d in gathered.data["gpu_procs"].items()}
        owners = host.gpu_process_owners(spec.paths.proc_root, procs)
        extra = {**(extra or {}), "job_id": spec.job_id, "owners": owners}
        if spec.hook in ("health", "check") and any(o.get("job") is None for o in owners.values()):
            extra["jobs_running"] = bool(host.running_jobs(spec.paths.proc_root))
    if between is not None:
        extra = {**(extra or {}), **between(gathered, (extra or {}).get("owners", {}))}
    if ("gpu_count" in enabled and init and not init.get("error")) or "xid" in enabled:
        extra = {**(extra or {}), **_expected_gpus(spec)}
    if "xid" in enabled:
        # which bus ids are this node's GPUs (an XID on another bus drains nothing): NVML's, the expected boards'
        # (above), and how many GPUs the node should have (a GPU NVML no longer lists may be the XID's)
        extra = {**(extra or {}), "gpu_expected": _expected_count(spec)}
    if any(n in enabled for n in ("hardware", "daemons", "topology")):
        extra = {**(extra or {}), **_node_facts(spec, gathered, jobs)}
    results: list[CheckResult] = []
    for name, check in CHECKS.items():
        cp = enabled.get(name)
        if cp is None:
            continue
        ctx = EvalContext(hook=spec.hook, policy=cp, expect=spec.expect, init=init if not init.get("error") else {},
                          extra=extra or {})
        t0 = time.monotonic()
        verdict, took = _evaluate(name, check.source, ctx, gathered, jobs, spec)
        results.append(_apply_policy(name, verdict, cp.action, took + (time.monotonic() - t0)))
    if init and not init.get("error"):
        names = gpuid.labels(init)  # gpu<NVML index> -> nvidia<minor>@<bus> in what the run reports (gpuid.py)
        expected = (extra or {}).get("gpu_baseline")
        for r in results:
            r.summary = gpuid.relabel(r.summary, names, expected)
            r.findings = [gpuid.relabel(f, names, expected) for f in r.findings]
        err = _save_baseline(spec, init, results)
        if err:
            bookkeeping.append(err)
    xj = jobs.get("xid")
    if xj is not None and isinstance(xj.value, xid.XidScan) and xj.value.commit_error:
        bookkeeping.append(f"xid cursor not saved: {xj.value.commit_error}")
    return RunOutput(results=results, gathered=gathered, nvml_devices=init, bookkeeping=bookkeeping)


def _evaluate(name: str, source: str, ctx: EvalContext, gathered: GatherResult | None, jobs: dict[str, _Job],
              spec: RunSpec) -> tuple[Verdict, float]:
    if source.startswith("nvml:"):
        probe = source.split(":", 1)[1]
        assert gathered is not None
        if name == "nvml":
            return CHECKS[name].evaluate({
                "init": gathered.data.get("init"), "load_error": gathered.load_error, "stalled": gathered.stalled,
                "stalled_after_s": gathered.stalled_after_s, "crashed": gathered.crashed,
                "gpus_expected": gpus_expected(spec),
                # only when init hung: is the persistence daemon there (without it nvmlInit initialises every GPU)
                "persistenced": host.persistenced_running(spec.paths) if gathered.stalled == "init" else None},
                ctx), \
                gathered.durations.get("init", gathered.stalled_after_s if gathered.stalled == "init" else 0.0)
        if probe == "init":
            return CHECKS[name].evaluate({}, ctx), 0.0
        if gathered.stalled == probe:
            return Verdict(Status.FAIL, f"NVML did not answer within {gathered.stalled_after_s:.1f}s (hung)",
                           [f"{name} nvml hung"], {"timeout_s": ctx.policy.timeout_s}), gathered.stalled_after_s
        if probe not in gathered.data:
            why = (f"NVML stalled in {gathered.stalled}" if gathered.stalled else
                   gathered.crashed or gathered.load_error or "NVML unavailable (see the nvml check)")
            return Verdict(Status.SKIP, f"not run: {why}"), 0.0
        return CHECKS[name].evaluate(gathered.data[probe], ctx), gathered.durations.get(probe, 0.0)
    job = jobs[source.split(":", 1)[1] if source.startswith("host:") else name]
    if job.is_alive():
        return Verdict(Status.FAIL, f"gather did not finish within {ctx.policy.timeout_s:g}s",
                       [f"{name} timeout"], {"timeout_s": ctx.policy.timeout_s}), ctx.policy.timeout_s
    if job.error is not None:
        if isinstance(job.error, LockTimeout):
            return Verdict(Status.WARN, "state lock busy; XIDs will be read by the next run",
                           ["xid lock busy"]), job.elapsed
        if name in ("xid", "mce") and isinstance(job.error, OSError):
            return Verdict(Status.SKIP, f"kernel log unreadable: {job.error}"), job.elapsed
        return Verdict(Status.WARN, f"gather failed: {type(job.error).__name__}: {job.error}",
                       [f"{name} error"]), job.elapsed
    return CHECKS[name].evaluate(job.value, ctx), job.elapsed


def _node_facts(spec: RunSpec, gathered: GatherResult | None, jobs: dict[str, _Job]) -> dict[str, Any]:
    """What the node checks need beyond their own gather: is this a simulated node (fake NVML: the host's CPUs,
    memory and GPU daemons are not the node's), which GPU daemons this node needs, the topology baseline."""
    out: dict[str, Any] = {"simulated": bool(spec.fake_nvml)}
    if not spec.fake_nvml and gpus_expected(spec):
        need = ["nvidia-persistenced"]
        fabric = (gathered.data.get("fabric") if gathered else None) or {}
        if any(isinstance(d.get("fabric"), dict) and d["fabric"].get("state") in (1, 2, 3) for d in fabric.values()):
            need.append("nv-fabricmanager")  # NVML reports an NVSwitch fabric: the fabric manager trains it
        out["gpu_daemons"] = need
    tj = jobs.get("topology")
    if tj is not None and spec.node_state_dir and isinstance(tj.value, dict) and not tj.is_alive():
        path = os.path.join(spec.node_state_dir, "topology.json")
        from slurmkit.health.state import read_json

        base = read_json(path, {})
        if base:
            out["topology_baseline"] = base
        elif spec.commit_xid and (tj.value.get("gpus") or tj.value.get("hcas")):
            import json

            try:  # the first run's placement is the baseline later runs are held to
                atomic_write(path, json.dumps(tj.value))
            except OSError:
                pass
    return out


def _site_commands() -> Any:
    from slurmkit.health import sitecmd  # subprocess and selectors: only where a site command may run

    return sitecmd


def _interfaces_wanted(spec: RunSpec) -> tuple[str, ...]:
    cp = spec.policy.check("interfaces")
    return interfaces_wanted(EvalContext(hook=spec.hook, policy=cp, expect=spec.expect, init={}))


def _nvlink_limits(spec: RunSpec) -> tuple[int, float] | None:
    """Health runs count the intervals a GPU's NVLink errors grow above the rate (policy nvlink_errors)."""
    if spec.hook not in ("health", "check"):
        return None
    cp = spec.policy.check("nvlink_errors")
    return int(cp.get("max_delta") or 0), float(cp.get("max_crc_per_s") if cp.get("max_crc_per_s") is not None
                                                else 100)


def _expected_gpus(spec: RunSpec) -> dict[str, Any]:
    """The GPUs this node should have, by bus id: the inventory's hooks.checks.gpu_count.bus_ids, else the baseline."""
    bus_ids = spec.policy.check("gpu_count").get("bus_ids")
    if bus_ids:
        minors = spec.expect.minors
        return {"gpu_baseline": [{"minor": minors[i] if i < len(minors) else i, "pci_bus_id": b}
                                 for i, b in enumerate(bus_ids)],
                "gpu_baseline_source": "hooks.checks.gpu_count.bus_ids"}
    base = gpuid.load_baseline(spec.node_state_dir)
    return {"gpu_baseline": base, "gpu_baseline_source": "the node's first healthy run (gpus.json)"} if base else {}


def _save_baseline(spec: RunSpec, init: dict[str, Any], results: list[CheckResult]) -> str | None:
    """Record the boards of a run that saw every expected GPU usable (the first, or new boards after a swap)."""
    if not spec.commit_xid or not spec.node_state_dir or spec.job_gres_indices is not None:
        return None  # read-only, stateless, or a job's scoped run (its lost GPUs outside the scope go unseen)
    gc = next((r for r in results if r.name == "gpu_count"), None)
    expected = gc.evidence.get("expected") if gc is not None else None
    if gc is None or gc.status != Status.OK or not expected or gc.evidence.get("usable") != expected:
        return None
    now = gpuid.baseline_of(init)
    if gpuid.load_baseline(spec.node_state_dir) == now:
        return None
    import json

    path = gpuid.baseline_path(spec.node_state_dir)
    try:
        atomic_write(path, json.dumps({"gpus": now, "at": round(time.time(), 3), "hook": spec.hook}))
    except OSError as exc:
        return write_error(path, exc)
    return None


def _apply_policy(name: str, v: Verdict, action: Action, took: float) -> CheckResult:
    """FAIL takes the check's action; a FAIL whose action is ``warn`` is reported as WARN (noticed, not acted on)."""
    status, act = v.status, Action.NONE
    ev = dict(v.evidence)
    esc = ev.get("escalate_to")
    if status == Status.FAIL and isinstance(esc, str) and Action.parse(esc) > action:
        action = Action.parse(esc)  # a WARN-level check whose finding lasted too long (nvlink_errors' streak)
    if status == Status.FAIL:
        if action == Action.WARN:
            status, act = Status.WARN, Action.WARN
            ev["policy"] = "action=warn"
        else:
            act = action
    elif status == Status.WARN:
        act = Action.WARN
    return CheckResult(name=name, status=status, summary=v.summary, findings=v.findings, evidence=ev, action=act,
                       duration_s=took)
