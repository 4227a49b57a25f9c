"""The prolog, epilog, health and check flows. Library code: the CLI edge builds a ``HookEnv`` and exits with
``Report.exit_code``; nothing here reads the environment or prints.

Slurm semantics followed (anchors §6):
- prolog: exit 0 on pass or warn. On a drain-level failure set our own reason first (a bounded scontrol call, the
  reason survives because slurmctld's _drain_node keeps an existing one), then exit 1: Slurm drains and requeues.
- epilog: clean up, check, exit 1 only when the node must not take jobs.
- health: exit status is only logged by slurmd, so it drains/resumes itself; resumes only our own drains after N
  passes; never touches a foreign reason or a DOWN node; no Slurm call on the run slurmd makes before registering.
- every Slurm call and the NVML gather fit in ``policy.budget_s`` together.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slurmkit.errors import SlurmCommandError, SlurmkitError
from slurmkit.health import state
from slurmkit.health.decide import Decision, Verb, decide_fail, decide_health, ours
from slurmkit.health.expect import Expectations, load_expectations
from slurmkit.health.host import HostPaths, process_start_ticks
from slurmkit.health.nvmlworker import GatherResult, Worker
from slurmkit.health.output import Report, prometheus_text
from slurmkit.health.policy import Policy, load_site_policy, parse_policy
from slurmkit.health.result import Action, CheckResult, Status, drain_reason, with_hint, worst_action
from slurmkit.health.runner import RunSpec, run_checks

if TYPE_CHECKING:
    from slurmkit.health.slurmctl import NodeState

# The way out of a sticky-XID drain, in the reason itself (admins read it in `sinfo -R`): a reboot clears it (new
# boot id), an admin clears it after resetting the GPU.
XID_WAY_OUT = "after a GPU reset: slurmkit check --clear-xid"
ACTIVE_WAY_OUT = "clears when slurmkit check --active passes"

# Time kept back from the gather for what must follow it (scontrol calls, writing outputs).
_OUTPUT_MARGIN_S = 0.15


@dataclass
class HookEnv:
    hook: str  # prolog | epilog | health | check
    node: str
    state_dir: str
    inventory: str | None = None
    policy_file: str | None = None
    fake_nvml: str | None = None
    job_id: str | None = None
    job_uid: int | None = None
    job_user: str | None = None
    # SLURM_JOB_GPUS (node-level gres indices). In a prolog/epilog: [] = the job has no GPUs (Slurm leaves the variable
    # unset, slurm-22-05-8-1 src/plugins/gres/common/gres_common.c gres_common_epilog_set_env), None = unknown (all
    # GPUs' hardware is checked; processes of other running jobs are still never judged or killed).
    job_gpus: list[int] | None = None
    textfile_dir: str | None = None
    # node_exporter's textfile directory on this host, found by the edge (hookrun.host_textfile_dir) for a real node;
    # used when neither textfile_dir nor the policy names one. None (tests, benches, a fake node): the state dir.
    host_textfile_dir: str | None = None
    paths: HostPaths = field(default_factory=HostPaths)
    shm_dir: str = "/dev/shm"
    ppid: int | None = None
    runner: Callable[..., Any] | None = None  # Slurm command runner; None = backend.run.run (tests pass a fake)
    started_mono: float = field(default_factory=time.monotonic)
    write_outputs: bool = True
    worker: Worker | None = None  # an NVML worker the edge pre-forked (Worker.prefork); run_hook instructs or ends it
    job_exit: str | None = None  # SLURM_JOB_EXIT_CODE2 in an epilog (``<exit>:<signal>``): epilog_active's trigger


def _remaining(deadline: float) -> float:
    return deadline - time.monotonic()


def load_policy(env: HookEnv, expect: Expectations) -> Policy:
    if env.policy_file:
        return load_site_policy(env.policy_file)
    return parse_policy(expect.checks, source=env.inventory)


def run_hook(env: HookEnv) -> Report:
    started = time.time()
    readonly = env.hook == "check"
    bookkeeping: list[str] = []
    ndir: str | None = None
    if not readonly or os.path.isdir(os.path.join(env.state_dir, env.node)):
        try:
            ndir = state.node_dir(env.state_dir, env.node)
        except OSError as exc:  # slurmkit's own bookkeeping: never the job's failure; run without state
            bookkeeping.append(f"state dir unusable: {state.write_error(os.path.join(env.state_dir, env.node), exc)}")
    config_error: str | None = None
    try:
        expect = load_expectations(env.inventory, env.node, ndir, write_cache=not readonly)
        policy = load_policy(env, expect)
    except (SlurmkitError, OSError) as exc:
        if readonly:
            raise  # an admin running `check` wants the error itself
        # A broken inventory push must not drain the whole cluster: run every check with the defaults (hardware
        # faults still fail closed) and report the config problem as a warning in every record.
        config_error = exc.one_line() if isinstance(exc, SlurmkitError) else f"{env.inventory}: {exc}"
        expect, policy = Expectations(node=env.node, source="inventory unusable"), parse_policy({})
    hard_deadline = env.started_mono + policy.budget_s - _OUTPUT_MARGIN_S
    # Slurm calls that may follow the gather: read the node + drain (+ reboot, or squeue in the epilog).
    slurm_calls = 0 if readonly else 2
    reserve = min(0.4 * policy.budget_s, slurm_calls * policy.scontrol_timeout_s + 0.1)
    spec = RunSpec(
        hook=env.hook, node=env.node, policy=policy, expect=expect, node_state_dir=ndir, fake_nvml=env.fake_nvml,
        paths=env.paths, job_gres_indices=env.job_gpus if env.hook != "health" else None,
        ppid=env.ppid, deadline=hard_deadline - reserve, commit_xid=not readonly, job_id=env.job_id,
        worker=env.worker, policy_source=(env.policy_file or env.inventory) if config_error is None else None,
    )
    notes: list[str] = []
    cleanup_log: dict[str, Any] = {}
    between = None
    if env.hook == "epilog":
        def between(gathered: GatherResult | None, owners: dict[str, Any]) -> dict[str, Any]:
            cleanup_log.update(_epilog_cleanup(env, gathered, hard_deadline, notes, owners))
            return {"cleanup": cleanup_log}

    out = run_checks(spec, between=between)
    bookkeeping += out.bookkeeping
    if config_error:
        out.results.insert(0, CheckResult("config", Status.WARN, f"inventory/policy unusable, defaults used: "
                                          f"{config_error}", ["config error"], action=Action.WARN))
    if env.hook == "epilog":  # after the passive checks, so their verdict decides whether it is needed
        out.results += _epilog_active(env, policy, expect, ndir, worst_action(out.results), notes, bookkeeping)
    elif env.hook in ("health", "check") and ndir is not None:
        out.results += _active_failure_kept(ndir)
    action = worst_action(out.results)
    reason = drain_reason(out.results) if action >= Action.DRAIN else ""
    if reason and any(r.name == "xid" and r.action >= Action.DRAIN and r.evidence.get("sticky") for r in out.results):
        reason = with_hint(reason, XID_WAY_OUT)  # a sticky XID outlives the fault: say how it ends
    elif reason and any(r.name.startswith("active") and r.action >= Action.DRAIN for r in out.results):
        reason = with_hint(reason, ACTIVE_WAY_OUT)
    report = Report(hook=env.hook, node=env.node, started=started, duration_s=0.0, results=out.results,
                    action=action, reason=reason, exit_code=0, job_id=env.job_id, notes=notes,
                    bookkeeping=bookkeeping, cleanup=cleanup_log)
    report.nvml = {"init": out.nvml_devices, "data": out.gathered.data if out.gathered is not None else {}}
    report.expected_gpus = expect.gpu_count
    init_s = out.nvml_devices.get("init_s") if isinstance(out.nvml_devices, dict) else None
    report.nvml_init_s = init_s if isinstance(init_s, (int, float)) else None
    if isinstance(out.nvml_devices, dict) and not out.nvml_devices.get("error"):
        from slurmkit.health.gpuid import table

        report.gpus = table(out.nvml_devices)  # minor, bus id, UUID, serial: the part behind each label
    if env.hook == "prolog":
        report.exit_code = 1 if action >= Action.DRAIN else 0
        if action >= Action.DRAIN:
            report.slurm = _act_on_failure(env, policy, action, reason, hard_deadline)
    elif env.hook == "epilog":
        # No Slurm command from the epilog (prolog_epilog.shtml: scripts "should not call Slurm commands"; a
        # 1,000-node job ending must not send 1,000 RPCs): exit 1 makes slurmctld drain with "Epilog error", and the
        # health check, reading our claim file, puts our reason on that drain (slurm_drain_was_ours).
        report.exit_code = 1 if action >= Action.DRAIN else 0
        if action >= Action.DRAIN:
            report.slurm = {"wanted": action.label, "reason": reason,
                            "done": "nothing (epilog: no Slurm calls; Slurm drains with 'Epilog error', "
                                    "the health check puts this reason on it)"}
    if env.hook in ("prolog", "epilog") and report.exit_code == 1 and not _drain_landed(report.slurm) \
            and ndir is not None:
        # Slurm will drain with its own "Prolog error"/"Epilog error": leave a claim the health check can read
        try:
            write_claim(ndir, env.hook, env.job_id, reason)
        except OSError as exc:
            bookkeeping.append(state.write_error(claim_path(ndir, env.hook), exc))
    if env.hook == "health":
        report.slurm = _health_slurm(env, policy, action, reason, ndir, hard_deadline, bookkeeping,
                                     lambda node: _reset_when_idle(node, report))
        report.exit_code = 1 if report.action >= Action.DRAIN else 0
    elif env.hook == "check":  # an admin's look; exit 1 when something would drain the node
        report.exit_code = 1 if action >= Action.DRAIN else 0
    if expect.dcgm_job_map_dir and env.job_id and env.write_outputs and env.hook in ("prolog", "epilog"):
        _dcgm_job_map(env, expect, out.nvml_devices, report)
    report.duration_s = time.monotonic() - env.started_mono
    textfile_dir = env.textfile_dir or policy.textfile_dir or env.host_textfile_dir
    if textfile_dir:  # %n: the node's name, as Slurm expands it in SlurmdLogFile/SlurmdSpoolDir (slurm.conf(5))
        textfile_dir = textfile_dir.replace("%n", env.node)
    if env.write_outputs and not readonly:
        write_outputs(report, ndir, textfile_dir)
    elif env.write_outputs and env.textfile_dir:  # `check --textfile-dir`: the metrics only, nothing else
        write_outputs(report, None, env.textfile_dir)
    elif bookkeeping:
        _add_bookkeeping_result(report)
    return report


def _dcgm_job_map(env: HookEnv, expect: Expectations, init: dict[str, Any], report: Report) -> None:
    """dcgm-exporter's job mapping files (slurmkit/health/dcgmmap.py): the prolog of a job that starts (exit 0) adds
    it to the files of its GPUs, the epilog removes it from every file. A failure is bookkeeping (a WARN in the
    record and the metrics), never the job's: dcgm-exporter then labels those GPUs without the job."""
    from slurmkit.health import dcgmmap

    path = expect.dcgm_job_map_dir.replace("%n", env.node)
    job = env.job_id or ""
    mode = dcgmmap.PRIVATE_FILE_MODE if state.private_data() else dcgmmap.FILE_MODE
    try:
        if env.hook == "prolog":
            if report.exit_code != 0 or not env.job_gpus:
                return  # the job does not start here, or has no GPU (None: unknown, nothing to guess)
            devices = init.get("devices", []) if isinstance(init, dict) else []
            ids = dcgmmap.dcgm_ids(devices, expect.job_minors(env.job_gpus))
            if ids:
                report.notes.append(f"dcgm job map: job {job} on GPU {','.join(map(str, sorted(ids)))} in {path}")
                dcgmmap.add_job(path, job, ids, mode, exclusive=not expect.gpu_shared)
        else:
            changed = dcgmmap.remove_job(path, job, mode)
            if changed:
                report.notes.append(f"dcgm job map: job {job} removed from GPU {','.join(changed)} in {path}")
    except (OSError, ValueError) as exc:
        report.bookkeeping.append(f"dcgm job map {path}: {exc}")


def _add_bookkeeping_result(report: Report) -> None:
    """The run's bookkeeping failures as one WARN ``state`` result (log line, record, metric), kept current as more
    writes fail; the exit code stays the checks' verdict: a prolog whose checks passed still lets the job start."""
    if not report.bookkeeping:
        return
    summary = "state not saved: " + "; ".join(report.bookkeeping)
    for r in report.results:
        if r.name == "state":
            r.summary, r.evidence = summary, {"errors": list(report.bookkeeping)}
            return
    report.results.append(CheckResult("state", Status.WARN, summary, ["state not saved"],
                                      {"errors": list(report.bookkeeping)}, action=Action.WARN))
    report.action = max(report.action, Action.WARN)


def _call_timeout(policy: Policy, deadline: float) -> float | None:
    t = min(policy.scontrol_timeout_s, _remaining(deadline))
    return t if t > 0.05 else None


def _execute(env: HookEnv, d: Decision, policy: Policy, deadline: float, log: dict[str, Any]) -> None:
    from slurmkit.health import slurmctl

    steps: list[tuple[str, Any]] = []
    if d.verb in (Verb.DRAIN, Verb.UPDATE_REASON, Verb.DRAIN_REBOOT):
        steps.append(("drain", lambda t: slurmctl.drain(env.node, d.reason, t, env.runner)))
    if d.verb == Verb.DRAIN_REBOOT:
        steps.append(("reboot", lambda t: slurmctl.request_reboot(env.node, d.reason, t, env.runner)))
    if d.verb == Verb.RESUME:
        steps.append(("resume", lambda t: slurmctl.resume(env.node, t, env.runner, d.reason)))
    done: list[str] = []
    for name, fn in steps:
        t = _call_timeout(policy, deadline)
        if t is None:
            log["error"] = f"no time left for {name}"
            break
        try:
            fn(t)
            done.append(name)
        except SlurmCommandError as exc:
            log["error"] = f"{name}: {exc.one_line()}"
            break
    log["done"] = "+".join(done) if done else "nothing"


def _read_node(env: HookEnv, policy: Policy, deadline: float, log: dict[str, Any]) -> NodeState | None:
    from slurmkit.health import slurmctl

    t = _call_timeout(policy, deadline)
    if t is None:
        log["error"] = "no time left to read the node state"
        return None
    try:
        return slurmctl.show_node(env.node, t, env.runner)
    except (SlurmCommandError, ValueError) as exc:
        log["error"] = f"show node: {exc.one_line() if isinstance(exc, SlurmCommandError) else exc}"
        return None


def _act_on_failure(env: HookEnv, policy: Policy, action: Action, reason: str, deadline: float) -> dict[str, Any]:
    """Prolog/epilog: put our reason on the node before the non-zero exit (never over a foreign one)."""
    log: dict[str, Any] = {"wanted": action.label, "reason": reason}
    node = _read_node(env, policy, deadline, log)
    if node is None:
        log["done"] = "nothing (Slurm drains with its own reason on our non-zero exit)"
        return log
    d = decide_fail(node, action, reason)
    log["decision"], log["why"] = d.verb.value, d.why
    log["before"] = {"state": node.base, "flags": sorted(node.flags), "reason": node.reason}
    _execute(env, d, policy, deadline, log)
    return log


def slurmd_identity(env: HookEnv) -> str | None:
    """``<pid>:<start ticks>`` of the slurmd that runs us, or None when slurmd is not our parent."""
    if not env.ppid:
        return None
    try:
        with open(os.path.join(env.paths.proc_root, str(env.ppid), "comm")) as f:
            if f.read().strip() != "slurmd":
                return None
    except OSError:
        return None
    return f"{env.ppid}:{process_start_ticks(env.paths.proc_root, env.ppid)}"


# The reasons slurmctld sets itself when a prolog/epilog exits non-zero (slurm-22-05-8-1 and slurm-24-11-5-1
# src/slurmctld/node_mgr.c validate_node_specs: "Prolog error"; src/slurmctld/job_mgr.c: "Epilog error").
SLURM_HOOK_REASONS = {"Prolog error": "prolog", "Epilog error": "epilog"}


# A claim younger than this is kept even while the node is not (yet) drained with Slurm's reason: slurmctld drains
# only after slurmd reports the hook's exit, and a health run may fall in between.
CLAIM_GRACE_S = 120.0


def claim_path(ndir: str, hook: str) -> str:
    """``claim-<hook>.json``: written when a prolog/epilog failed and its own drain call did not land. Unlike
    ``last-<hook>.json`` no other job's passing hook overwrites it; the health check clears it."""
    return os.path.join(ndir, f"claim-{hook}.json")


def _drain_landed(slurm_log: dict[str, Any]) -> bool:
    return "drain" in str(slurm_log.get("done", "")).split(" ", 1)[0].split("+")  # "drain+reboot", "nothing (..)"


def write_claim(ndir: str, hook: str, job_id: str | None, reason: str) -> None:
    """Raises OSError (the caller reports it as bookkeeping)."""
    state.atomic_write(claim_path(ndir, hook), json.dumps({"hook": hook, "job_id": job_id, "reason": reason,
                                                           "at": round(time.time(), 3)}), mode=state.record_mode())


def slurm_drain_was_ours(node: NodeState, ndir: str | None) -> bool:
    """Slurm's own ``Prolog error``/``Epilog error`` drain that followed *our* non-zero exit whose drain call did not
    land (scontrol timed out, slurmctld busy, the hook crashed): our claim file for that hook says so. Such a drain
    is ours to keep current and to take back when the checks pass; any other foreign reason stays untouched."""
    hook = SLURM_HOOK_REASONS.get(node.reason)
    if hook is None or not node.drained or ndir is None:
        return False
    return os.path.exists(claim_path(ndir, hook))


def _clear_stale_claims(node: NodeState, ndir: str | None, resumed: bool, bookkeeping: list[str]) -> None:
    """Forget a claim once the node is no longer drained with that hook's Slurm reason (past the grace), or when we
    resumed it."""
    if ndir is None:
        return
    for reason, hook in SLURM_HOOK_REASONS.items():
        path = claim_path(ndir, hook)
        if not os.path.exists(path):
            continue
        still = node.drained and node.reason == reason and not resumed
        if still:
            continue
        if not resumed and time.time() - float(state.read_json(path, {}).get("at", 0) or 0) < CLAIM_GRACE_S:
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            bookkeeping.append(state.write_error(path, exc))


def _save(path: str, data: dict[str, Any], bookkeeping: list[str]) -> None:
    try:
        state.atomic_write(path, json.dumps(data))
    except OSError as exc:
        bookkeeping.append(state.write_error(path, exc))


# The way out of a "reset pending" drain, in the reason: the GPU reset nobody else performs (or a reboot).
RESET_WAY_OUT = "way out: reset the idle GPU (nvidia-smi -r) or reboot"


def _reset_when_idle(node: NodeState, report: Report) -> tuple[Action, str] | None:
    """A pending row remap needs a GPU reset that nobody performs (NVIDIA A100 memory error management: the remap
    takes effect at the next reset). While a job runs it is a WARN; once the node is idle the health check drains it
    with 'reset pending' and the way out, and resumes it after N passes once the reset has cleared the flag. Never
    while a job runs: only an IDLE node (no COMPLETING job) qualifies. Returns the new (action, reason) or None."""
    r = next((r for r in report.results if r.name == "remapped_rows" and r.evidence.get("reset_pending")), None)
    if r is None or report.action >= Action.DRAIN or node.base != "idle" or "COMPLETING" in node.flags:
        return None
    from slurmkit.health.gpuid import relabel

    labels = {str(g["index"]): g["label"] for g in report.gpus if "index" in g and "label" in g}
    r.findings = [relabel(f"gpu{i} reset pending (row remap)", labels) for i in r.evidence["reset_pending"]]
    r.status, r.action = Status.FAIL, Action.DRAIN
    r.summary = f"{'; '.join(r.findings)}: node idle, drained for the GPU reset"
    report.action = worst_action(report.results)
    report.reason = with_hint(drain_reason(report.results), RESET_WAY_OUT)
    return report.action, report.reason


def _health_slurm(env: HookEnv, policy: Policy, action: Action, reason: str, ndir: str | None,
                  deadline: float, bookkeeping: list[str],
                  escalate: Callable[[NodeState], tuple[Action, str] | None] | None = None) -> dict[str, Any]:
    log: dict[str, Any] = {"wanted": action.label}
    # Without a usable state dir the health check still drains on failure; it cannot count passes (nor resume).
    path = os.path.join(ndir, "health.json") if ndir is not None else ""
    lock = state.locked_or_unwritable(path + ".lock", timeout=max(0.05, min(0.5, _remaining(deadline)))) if path \
        else contextlib.nullcontext("no state dir")
    try:
        with lock as lerr:
            if lerr and path:
                bookkeeping.append(lerr)
            st = state.read_json(path, {"passes": 0, "slurmd": None})
            ident = slurmd_identity(env)
            if ident is not None and ident != st.get("slurmd") and not lerr:
                # The first run of a new slurmd happens before it registers with slurmctld: Slurm RPCs from here can
                # hang (NHC #159). Record the verdict, act on the next interval (or the prolog will).
                st["slurmd"] = ident
                _save(path, st, bookkeeping)
                log["done"] = "nothing (first run of this slurmd: before registration, no Slurm calls)"
                return log
            node = _read_node(env, policy, deadline, log)
            if node is None:
                log["done"] = "nothing"
                return log
            claimed = slurm_drain_was_ours(node, ndir)
            got = escalate(node) if escalate is not None else None
            if got is not None:
                action, reason = got
                log.update(wanted=action.label, escalated="row remap pending on an idle node: drain for the reset")
            d = decide_health(node, action, reason, int(st.get("passes", 0)), policy.resume_after_passes, claimed)
            log.update(decision=d.verb.value, why=d.why, passes=d.passes,
                       before={"state": node.base, "flags": sorted(node.flags), "reason": node.reason})
            if claimed:
                log["claimed"] = f"{node.reason!r} followed our own failed {SLURM_HOOK_REASONS[node.reason]}"
            if d.verb == Verb.RESUME and not ours(node.reason) and not claimed:
                raise AssertionError("decide_health resumed a foreign drain")  # belt and braces: never ship this
            _execute(env, d, policy, deadline, log)
            _clear_stale_claims(node, ndir, d.verb == Verb.RESUME and log.get("done") == "resume", bookkeeping)
            new = {**st, "passes": d.passes, "slurmd": ident if ident is not None else st.get("slurmd")}
            if new != st and not lerr:
                _save(path, new, bookkeeping)
    except state.LockTimeout:
        log["done"] = "nothing (another health run holds the lock)"
    return log


def _epilog_cleanup(env: HookEnv, gathered: GatherResult | None, deadline: float, notes: list[str],
                    owners: dict[str, Any]) -> dict[str, Any]:
    """Kill the job's leftover GPU processes, then remove the user's /dev/shm files if no other job of theirs runs
    here. Local facts only (no squeue): the user's other jobs are the running slurmstepds' jobs that own one of the
    user's processes (``host.other_jobs_of_uid``)."""
    from slurmkit.health.cleanup import SHM_SECONDS, clean_shm, kill_gpu_leftovers
    from slurmkit.health.host import other_jobs_of_uid

    procs: dict[str, Any] = {}
    if gathered is not None:
        for idx, d in gathered.data.get("gpu_procs", {}).items():
            procs[idx] = d.get("compute_processes")
    wait = max(0.0, min(1.0, _remaining(deadline) - 0.2))
    result: dict[str, Any] = kill_gpu_leftovers(procs, env.job_uid, env.paths.proc_root, wait_s=wait,
                                                owners=owners, job_id=env.job_id)
    if env.job_uid not in (None, 0):
        try:
            others = other_jobs_of_uid(env.paths.proc_root, env.job_uid, env.job_id)  # type: ignore[arg-type]
        except OSError as exc:
            others = None
            notes.append(f"shm cleanup skipped: /proc unreadable: {exc}")
        if others == []:
            result["shm"] = clean_shm(env.job_uid, env.shm_dir,  # type: ignore[arg-type]
                                      seconds=max(0.5, min(SHM_SECONDS, _remaining(deadline) - 0.5)))
        elif others:
            result["shm"] = {"skipped": f"user has other jobs here: {others}"}
    return result


def write_outputs(report: Report, ndir: str | None, textfile_dir: str | None) -> None:
    """The record, the history line and the metrics file. Never raises: a read-only or full disk is reported (a
    WARN ``state`` result in the log line and the metrics, ``bookkeeping`` in whatever record could be written)
    and the run's verdict and exit code stay what the checks decided."""
    if report.bookkeeping:
        _add_bookkeeping_result(report)
    if ndir is not None:
        last = os.path.join(ndir, f"last-{report.hook}.json")
        hist = os.path.join(ndir, "history.jsonl")
        mode = state.record_mode()  # 0640, 0600 under PrivateData: other users' jobs, uids and pids are in it
        for path, write in ((last, lambda rec: state.atomic_write(last, json.dumps(rec, indent=1, sort_keys=True),
                                                                  mode=mode, durable=False)),
                            (hist, lambda rec: state.append_history(hist, rec, mode=mode))):
            try:
                write(report.to_json())
            except OSError as exc:
                report.bookkeeping.append(state.write_error(path, exc))
                _add_bookkeeping_result(report)
    tdir = textfile_dir or ndir
    if tdir is None:
        return
    prom = os.path.join(tdir, f"slurmkit_health_{report.hook}.prom")
    xid_counts: dict[str, int] | None = None
    if ndir is not None:
        from slurmkit.monitor.textfile import counts_path, update_xid_counts, xid_labels_of_run

        try:
            xid_counts = update_xid_counts(counts_path(ndir), xid_labels_of_run(report))
        except (OSError, state.LockTimeout) as exc:
            report.bookkeeping.append(f"{counts_path(ndir)}: {exc}")
    try:
        os.makedirs(tdir, exist_ok=True)
        state.atomic_write(prom, prometheus_text(report, xid_counts), durable=False)
    except OSError as exc:
        report.bookkeeping.append(state.write_error(prom, exc))
        _add_bookkeeping_result(report)


def record_internal_error(state_dir: str, node: str, hook: str, job_id: str | None, line: str,
                          exit_code: int) -> None:
    """Best effort: the record of a run that crashed, so the health check can tell Slurm's ``Prolog error`` drain
    that followed it was ours (``slurm_drain_was_ours``)."""
    rec = {"hook": hook, "node": node, "job_id": job_id, "started": round(time.time(), 3), "status": "FAIL",
           "action": "none", "reason": "", "exit_code": exit_code, "slurm": {"done": "nothing (internal error)"},
           "notes": [line], "bookkeeping": [], "checks": []}
    try:
        ndir = state.node_dir(state_dir, node)
        mode = state.record_mode()
        state.atomic_write(os.path.join(ndir, f"last-{hook}.json"), json.dumps(rec, indent=1, sort_keys=True),
                           mode=mode, durable=False)
        state.append_history(os.path.join(ndir, "history.jsonl"), rec, mode=mode)
    except OSError:
        pass
    if exit_code != 0:
        with contextlib.suppress(OSError):
            write_claim(state.node_dir(state_dir, node), hook, job_id, "")


def clear_xid(state_dir: str, node: str) -> int:
    """Admin acknowledgement (after a GPU reset): forget the sticky critical XIDs; the cursor stays."""
    from slurmkit.health.xid import XidState

    ndir = state.node_dir(state_dir, node)
    path = os.path.join(ndir, "xid.json")
    with state.locked(path + ".lock", timeout=2.0):
        st = XidState.load(path)
        n = len(st.sticky)
        st.sticky = []
        state.atomic_write(path, json.dumps(st.to_json()), mode=state.record_mode())
    return n


def record_fixture(fake_nvml: str | None, node: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """Everything NVML says about this node, in the fake NVML's fixture shape (a healthy real GPU -> a fixture)."""
    from slurmkit.health.nvmlworker import PROBES, run_worker
    from slurmkit.health.xid import read_boot_id

    deadline = time.monotonic() + timeout_s
    g = run_worker(fake_nvml, node, list(PROBES), None, {p: timeout_s for p in ("init", *PROBES)}, deadline)
    init = g.data.get("init", {})
    devices: list[dict[str, Any]] = []
    for d in init.get("devices", []):
        dev = dict(d)
        for probe in PROBES:
            dev.update(g.data.get(probe, {}).get(str(d["index"]), {}))
        devices.append(dev)
    import platform

    return {
        "recorded": {"by": "slurmkit check --record-fixture", "host": platform.node(), "at": int(time.time()),
                     "stalled": g.stalled, "crashed": g.crashed, "load_error": g.load_error,
                     "init_error": init.get("error")},
        "driver_version": init.get("driver_version"),
        "count": init.get("count"),
        "boot_id": read_boot_id(),
        "kmsg": [],
        "devices": devices,
    }


def _active_stage(env: HookEnv, budget_s: float, level: int, method: str, peer_pct: float,
                  only_minors: frozenset[int] | None = None) -> tuple[list[CheckResult], list[str], dict[str, Any]]:
    """The active test itself: DCGM diag where dcgmi is installed (``method`` auto|dcgm), else the torch GEMM and
    memory-bandwidth test per GPU (active.py). ``only_minors``: the GPUs of a job (the epilog's stage must not load
    GPUs other jobs hold; dcgmi diag tests the whole node, so there the torch path is taken). Returns the results,
    notes and NVML's init facts."""
    from slurmkit.health import active
    from slurmkit.health.gpuid import labels
    from slurmkit.health.nvmlworker import run_worker

    t0 = time.monotonic()
    # the application clocks and the PCIe link (the host-to-GPU floor) of the GPUs under test, read with the init
    nv_s = min(20.0, budget_s)
    got = run_worker(env.fake_nvml, env.node, ["app_clocks", "pcie"], only_minors,
                     {"init": nv_s, "app_clocks": 5.0, "pcie": 5.0}, t0 + nv_s + 2.0).data
    init = got.get("init") or {}
    devices = [d for d in init.get("devices", []) if not d.get("lost") and not d.get("error")]
    if only_minors is not None:
        devices = [d for d in devices if d.get("minor", d.get("index")) in only_minors]
    names = labels(init)
    for d in devices:
        d["label"] = names.get(str(d["index"]), f"gpu{d['index']}")
    simulated = bool(env.fake_nvml)
    if env.fake_nvml:  # the fixture's per-device slowdown (a slow board to find)
        from slurmkit.health.fakenvml import load_state

        fx = {int(d.get("index", i)): d for i, d in enumerate(load_state(env.fake_nvml, env.node).get("devices", []))}
        for d in devices:
            d["active_slowdown"] = fx.get(int(d["index"]), {}).get("active_slowdown")
    results: list[CheckResult] = []
    notes: list[str] = []
    remaining = max(1.0, budget_s - (time.monotonic() - t0))
    dcgmi = None if simulated or only_minors is not None else active.dcgmi_path()
    if init.get("error") or not devices:
        results.append(CheckResult("active", Status.FAIL if init.get("error") else Status.SKIP,
                                   f"no GPU to test: {init.get('error') or 'NVML lists none'}",
                                   ["nvml down"] if init.get("error") else [], action=Action.DRAIN
                                   if init.get("error") else Action.NONE))
    elif method in ("auto", "dcgm") and dcgmi:
        notes.append(f"method: dcgmi diag -r {level} ({dcgmi})")
        results.append(active.run_dcgm(dcgmi, level, remaining))
    elif method == "dcgm" and only_minors is None:
        results.append(CheckResult("dcgm_diag", Status.SKIP, "dcgmi not installed (or a simulated node)"))
    else:
        try:
            import torch  # noqa: F401  (seconds to import: counted against the budget below)
        except ImportError:
            results.append(CheckResult("active", Status.SKIP, "neither dcgmi nor torch available: no active test"))
        else:
            notes.append("method: torch bf16 GEMM + device copy per GPU" + (" (on the CPU: simulated node)"
                                                                            if simulated else ""))
            t1 = time.monotonic()
            measured = active.run_torch(devices, max(0.5, budget_s - (t1 - t0)), simulated)
            # a job's GPUs alone have fewer peers: the model's floor still judges each (peers need two or more)
            judged = active.judge(measured, peer_pct, use_floor=not simulated)
            for r in judged:
                r.duration_s = time.monotonic() - t1
            results += judged
    if devices and not init.get("error"):
        # AzNHC's check_app_gpu_clocks and check_gpu_bw's host<->GPU part, whatever ran above
        wanted = {str(d["index"]) for d in devices}
        results.append(active.judge_app_clocks({i: v for i, v in (got.get("app_clocks") or {}).items()
                                                if i in wanted}, names))
        left = max(1.0, budget_s - (time.monotonic() - t0))
        results.append(active.run_h2d(devices, got.get("pcie") or {}, min(left, 10.0 * len(devices)), peer_pct,
                                      simulated))
    return results, notes, init


def run_active(env: HookEnv, budget_s: float = 120.0, level: int = 1, method: str = "auto",
               peer_pct: float = 85.0) -> Report:
    """`slurmkit check --active`: DCGM diag where dcgmi is installed (``method`` auto|dcgm), else the torch GEMM and
    memory-bandwidth test per GPU (active.py). The record goes to ``last-active.json`` and the history, the metrics
    to ``--textfile-dir``; exit 1 when a GPU fails."""
    from slurmkit.health.gpuid import table

    started, t0 = time.time(), time.monotonic()
    results, notes, init = _active_stage(env, budget_s, level, method, peer_pct)
    action = worst_action(results)
    report = Report(hook="active", node=env.node, started=started, duration_s=time.monotonic() - t0, results=results,
                    action=action, reason=drain_reason(results) if action >= Action.DRAIN else "",
                    exit_code=1 if action >= Action.DRAIN else 0, notes=notes)
    report.gpus = table(init) if not init.get("error") else []
    if env.write_outputs:
        ndir = None
        try:
            ndir = state.node_dir(env.state_dir, env.node)
        except OSError as exc:
            report.bookkeeping.append(state.write_error(os.path.join(env.state_dir, env.node), exc))
        write_outputs(report, ndir, env.textfile_dir)
        if ndir is not None and report.exit_code == 0 and any(r.status == Status.OK for r in results):
            # the way out of a failure an epilog's stage found: the same test, passing on every GPU
            stamp = os.path.join(ndir, _EPILOG_ACTIVE_STAMP)
            kept = state.read_json(stamp, {})
            if kept.get("findings"):
                _save(stamp, {**kept, "findings": [], "cleared_at": round(time.time(), 3)}, report.bookkeeping)
                report.notes.append("the failure an epilog's active stage found is cleared")
    return report


_EPILOG_ACTIVE_STAMP = "epilog-active.json"


def _epilog_active(env: HookEnv, policy: Policy, expect: Expectations, ndir: str | None, action: Action,
                   notes: list[str], bookkeeping: list[str]) -> list[CheckResult]:
    """``hooks.checks.epilog_active``: after a job that failed on its own (policy.job_failed_on_its_own), run the
    active stage on the job's GPUs before the node takes another job. Not when the passive checks already drain
    (the node is out either way), not for a job without GPUs, not twice within ``min_interval_s`` (a stamp in the
    node's state dir)."""
    from slurmkit.health.policy import job_failed_on_its_own

    ea = policy.epilog_active
    if ea is None or action >= Action.DRAIN or not env.job_gpus:
        return []
    failed = job_failed_on_its_own(env.job_exit)
    if not failed:
        if failed is None:
            notes.append("active stage: the job's exit status is unknown (no SLURM_JOB_EXIT_CODE2): not run")
        return []
    stamp = os.path.join(ndir, _EPILOG_ACTIVE_STAMP) if ndir else None
    now = time.time()
    if stamp:
        try:
            last = float(state.read_json(stamp, {}).get("at", 0) or 0)
        except (TypeError, ValueError):
            last = 0.0
        if 0 <= now - last < ea.min_interval_s:
            notes.append(f"active stage: skipped, ran {now - last:.0f}s ago (min_interval_s {ea.min_interval_s:g})")
            return []
    minors = expect.job_minors(env.job_gpus)
    notes.append(f"active stage: job {env.job_id} ended {env.job_exit}; testing its GPUs (minors "
                 f"{','.join(str(m) for m in sorted(minors))}) within {ea.budget_s:g}s")
    results, more, _ = _active_stage(env, ea.budget_s, ea.level, ea.method, ea.peer_pct, only_minors=minors)
    notes.extend(more)
    if stamp:
        # findings are kept: the health check's passive checks cannot see a slow board, so without this it would
        # resume the node after resume_after_passes (_active_failure_kept); a passing `check --active` clears them
        # one short token per board ("nvidia3@5d:00.0 active gemm,membw"): the numbers stay in the epilog's record
        per_gpu: dict[str, list[str]] = {}
        for r in results:
            if r.status == Status.FAIL and r.action >= Action.DRAIN:
                for finding in r.findings:
                    label, _, what = finding.partition(" ")
                    per_gpu.setdefault(label, []).append(what.split(" ")[0] or r.name)
        findings = [f"{label} active {','.join(dict.fromkeys(w))}" for label, w in per_gpu.items()]
        _save(stamp, {"at": now, "job_id": env.job_id, "exit": env.job_exit, "findings": findings}, bookkeeping)
    return results


def _active_failure_kept(ndir: str) -> list[CheckResult]:
    """What an epilog's active stage found, until `check --active` passes on the node: a DRAIN result the health
    check puts on the node (over Slurm's 'Epilog error', whose claim file says it followed our epilog)."""
    kept = state.read_json(os.path.join(ndir, _EPILOG_ACTIVE_STAMP), {})
    findings = kept.get("findings") if isinstance(kept, dict) else None
    if not findings or not isinstance(findings, list):
        return []
    return [CheckResult("active_kept", Status.FAIL, f"the epilog of job {kept.get('job_id')} found: "
                        + "; ".join(str(f) for f in findings), [str(f) for f in findings],
                        {"job_id": kept.get("job_id"), "at": kept.get("at"), "way_out": ACTIVE_WAY_OUT},
                        action=Action.DRAIN)]
