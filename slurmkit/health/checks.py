"""Check evaluation: pure functions from gathered data to OK / WARN / FAIL / SKIP with evidence.

Gathering lives elsewhere (``nvmlworker.py`` for NVML, ``host.py`` and ``xid.py`` for the rest); here each registered
check reads its slice of the gathered data and its policy. Rules that hold everywhere:

- NVML NOT_SUPPORTED (or a function the driver lacks) is SKIP for that GPU, never FAIL.
- GPU_IS_LOST / RESET_REQUIRED / CORRUPTED_INFOROM on any call is FAIL (the GPU is gone or must be reset).
- Other NVML errors (NoPermission, Unknown, ...) are WARN: we could not tell, and a hook must not drain on noise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurmkit.health import gpuid
from slurmkit.health.expect import Expectations
from slurmkit.health.policy import CLOCK_REASON_BITS, CheckPolicy
from slurmkit.health.result import Status
from slurmkit.health.xid import XidScan, is_critical, norm_bus_id

# A call the GPU, the driver or the binding cannot answer: NOT_SUPPORTED, a function the driver lacks, or a struct
# version the driver does not know (NVML_ERROR_ARGUMENT_VERSION_MISMATCH: a newer binding on an older driver).
SKIP_ERRORS = frozenset({"NotSupported", "FunctionNotFound", "ArgumentVersionMismatch"})
FATAL_ERRORS = frozenset({"GpuIsLost", "ResetRequired", "CorruptedInforom"})

RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}


@dataclass
class Verdict:
    status: Status
    summary: str
    findings: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalContext:
    hook: str
    policy: CheckPolicy
    expect: Expectations
    init: dict[str, Any]  # the NVML "init" record (devices, driver, count), {} when NVML did not answer
    extra: dict[str, Any] = field(default_factory=dict)  # hook-specific facts (epilog cleanup outcome)

    def gpu_label(self, idx: str | int) -> str:
        return f"gpu{idx}"


def _err(v: Any) -> str | None:
    return v["error"] if isinstance(v, dict) and set(v) == {"error"} else None


def per_gpu(data: dict[str, Any], key: str, judge: Callable[[str, Any], tuple[Status, str | None, str]],
            what: str) -> Verdict:
    """Apply ``judge(idx, value) -> (status, finding, detail)`` to each GPU; aggregate worst-first."""
    statuses: list[Status] = []
    findings: list[str] = []
    details: dict[str, Any] = {}
    for idx in sorted(data, key=int):
        v = data[idx].get(key, {"error": "NotSupported"})
        e = _err(v)
        if e in SKIP_ERRORS:
            statuses.append(Status.SKIP)
            details[idx] = "not supported"
            continue
        if e in FATAL_ERRORS:
            statuses.append(Status.FAIL)
            findings.append(f"gpu{idx} {e.lower()}")
            details[idx] = e
            continue
        if e is not None:
            statuses.append(Status.WARN)
            findings.append(f"gpu{idx} {what} {e}")
            details[idx] = e
            continue
        detail: Any
        try:
            st, finding, detail = judge(idx, v)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # a value of an unexpected shape (a driver's odd answer, an error inside a list): a finding for this GPU,
            # never a crash that turns every check into SKIP
            st, finding, detail = Status.WARN, f"gpu{idx} {what} unreadable", {"value": v, "error": str(exc)}
        statuses.append(st)
        if finding:
            findings.append(finding)
        details[idx] = detail
    if not statuses:
        return Verdict(Status.SKIP, "no GPUs in scope", evidence={"gpus": details})
    worst = max(statuses)
    if all(s == Status.SKIP for s in statuses):
        return Verdict(Status.SKIP, f"{what}: not supported on these GPUs", evidence={"gpus": details})
    if worst <= Status.OK:
        checked = sum(1 for s in statuses if s != Status.SKIP)
        return Verdict(Status.OK, f"{what}: {checked} GPU(s) ok", evidence={"gpus": details})
    return Verdict(worst, "; ".join(findings), findings, {"gpus": details})


# --- NVML: node level ---------------------------------------------------------------------------------------

def _expected_count(ctx: EvalContext) -> int | None:
    v = ctx.policy.get("expected") if ctx.policy.name == "gpu_count" else None
    return v if v is not None else ctx.expect.gpu_count


def eval_nvml(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """NVML answers at all. ``data``: {"init": ..., "load_error", "stalled", "crashed", "gpus_expected": bool}."""
    expected = data.get("gpus_expected", False)
    problem = None
    if data.get("load_error"):
        problem = f"NVML not loadable: {data['load_error']}"
    elif data.get("stalled") == "init":
        problem = f"nvmlInit did not answer within {data['stalled_after_s']:.1f}s (NVML hung)"
        if data.get("persistenced") is False:
            problem += ("; nvidia-persistenced is not running: without persistence mode nvmlInit initialises every "
                        "GPU and can take seconds (enable it, or raise hooks.checks.nvml.timeout_s)")
    elif data.get("crashed") and not data.get("init"):
        problem = f"NVML worker failed: {data['crashed']}"
    elif isinstance(data.get("init"), dict) and data["init"].get("error"):
        problem = f"nvmlInit failed: {data['init']['error']}"
    ev = {k: data[k] for k in ("load_error", "stalled", "crashed", "persistenced") if data.get(k) is not None
          and data.get(k) != ""}
    if problem:
        if not expected and "hung" not in problem:
            return Verdict(Status.SKIP, f"{problem}; no GPUs expected on this node", evidence=ev)
        token = "nvml hung" if "hung" in problem else "nvml down"
        return Verdict(Status.FAIL, problem, [token], ev)
    init = data["init"]
    return Verdict(Status.OK, f"NVML up, driver {init.get('driver_version')}, {init.get('count')} GPU(s)",
                   evidence={"driver_version": init.get("driver_version"), "count": init.get("count")})


def _norm_type(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def eval_gpu_count(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    init = ctx.init
    expected = _expected_count(ctx)
    if not init or init.get("error") or not isinstance(init.get("count"), int):
        return Verdict(Status.SKIP, "NVML unavailable (see the nvml check)")
    devices = init.get("devices", [])
    lost = [d for d in devices if d.get("lost") or _err({"error": d.get("error")} if d.get("error") else None)]
    present = [d for d in devices if d not in lost]
    # a lost GPU by the name it had while it worked (gpuid.recall: from the baseline), else gpu<index> (relabelled)
    recalled = gpuid.recall(lost, init, ctx.extra.get("gpu_baseline"))
    by_index = {r.get("index"): r for r in recalled}
    findings = []
    for d in lost:
        name = by_index.get(d.get("index"), {}).get("label") or f"gpu{d['index']}"
        findings.append(f"{name} {'lost' if d.get('lost') or d.get('error') == 'GpuIsLost' else d.get('error')}")
    ev: dict[str, Any] = {"reported": init["count"], "usable": len(present), "expected": expected,
                          "lost": recalled}
    status = Status.FAIL if lost else Status.OK
    if expected is not None and len(present) < expected:
        status = Status.FAIL
        # which board: the expected bus ids NVML no longer lists (inventory bus_ids, else the node's baseline)
        base: list[dict[str, Any]] | None = ctx.extra.get("gpu_baseline")
        gone = gpuid.missing(base, init) if base else []
        lost_bus = {gpuid.norm_bus(g.get("pci_bus_id")) for g in ev["lost"]} - {None}
        gone = [g for g in gone if gpuid.norm_bus(g.get("pci_bus_id")) not in lost_bus]  # lost, not missing
        ev["missing"] = gone
        ev["expected_from"] = ctx.extra.get("gpu_baseline_source") if base else \
            "nothing (no hooks.checks.gpu_count.bus_ids, no healthy run recorded yet)"
        findings[:0] = [f"gpu_count {len(present)}/{expected}"] + [f"{gpuid.label(g)} missing" for g in gone]
    elif expected is not None and len(present) > expected:
        status = max(status, Status.WARN)
        findings.append(f"gpu_count {len(present)}>{expected}")
    want = ctx.expect.gpu_type
    if want and present:
        names = {str(d.get("name")) for d in present if isinstance(d.get("name"), str)}
        ev["names"] = sorted(names)
        if names and not any(_norm_type(want) in _norm_type(n) for n in names):
            status = max(status, Status.WARN)
            findings.append(f"gpu type {sorted(names)[0]!r} is not {want!r}")
    if status == Status.OK:
        exp = f" of {expected} expected" if expected is not None else " (no expectation)"
        return Verdict(Status.OK, f"{len(present)} GPU(s){exp}", evidence=ev)
    return Verdict(status, "; ".join(findings), findings, ev)


def eval_driver(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    want = ctx.policy.get("version")
    have = ctx.init.get("driver_version") if ctx.init else None
    if not want:
        return Verdict(Status.SKIP, f"no baseline (hooks.checks.driver.version); driver {have}",
                       evidence={"driver_version": have})
    if not isinstance(have, str):
        return Verdict(Status.SKIP, "NVML unavailable (see the nvml check)")
    if have == want:
        return Verdict(Status.OK, f"driver {have}", evidence={"driver_version": have})
    return Verdict(Status.FAIL, f"driver {have}, baseline {want}", [f"driver {have}!={want}"],
                   {"driver_version": have, "baseline": want})


# --- NVML: per GPU ------------------------------------------------------------------------------------------

def _counts(v: Any) -> dict[str, int] | None:
    """An SRAM/DRAM counter set with every value readable, else None (not supported: fall back)."""
    if not isinstance(v, dict) or "error" in v:
        return None
    out = {k: x for k, x in v.items() if isinstance(x, int) and not isinstance(x, bool)}
    return out if out else None


def eval_ecc(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """ECC on, and the error counts. Volatile uncorrected (since the last reset) > ``max_volatile_uncorrected``
    fails (the seed rule). Where NVML splits the counts by location (Turing+: NVML_MEMORY_LOCATION_SRAM/DRAM), they
    are judged apart as AzNHC does (azure_gpu_ecc.nhc check_ecc, thresholds from its H100 conf
    ``check_gpu_ecc 20000000 10000``): any SRAM uncorrectable, volatile or aggregate, fails (SRAM errors are not
    contained by row remapping); SRAM correctable above ``max_sram_correctable`` fails; a DRAM count above
    ``max_dram_errors`` (lifetime, aggregate included) fails."""
    limit = ctx.policy.get("max_volatile_uncorrected") or 0
    sram_cor_max = ctx.policy.get("max_sram_correctable")
    dram_max = ctx.policy.get("max_dram_errors")

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        dev = data[idx]
        mode = dev.get("ecc_mode")
        agg = dev.get("ecc_aggregate_uncorrected")
        sram, dram = _counts(dev.get("ecc_sram")), _counts(dev.get("ecc_dram"))
        detail: dict[str, Any] = {"volatile_uncorrected": v, "aggregate_uncorrected": agg, "mode": mode}
        if sram is not None:
            detail["sram"] = sram
        if dram is not None:
            detail["dram"] = dram
        if isinstance(mode, list) and mode and mode[0] == 0:
            return Status.FAIL, f"gpu{idx} ecc off", detail
        sram_unc = max(sram.get("unc_volatile", 0), sram.get("unc_aggregate", 0)) if sram else 0
        if sram_unc > 0:
            return Status.FAIL, f"gpu{idx} sram-unc={sram_unc}", detail
        if v > limit:
            return Status.FAIL, f"gpu{idx} ecc-unc={v}", detail
        sram_cor = max(sram.get("cor_volatile", 0), sram.get("cor_aggregate", 0)) if sram else 0
        if sram_cor_max is not None and sram_cor > sram_cor_max:
            return Status.FAIL, f"gpu{idx} sram-cor={sram_cor}>{sram_cor_max}", detail
        dram_top = max(dram.values()) if dram else 0
        if dram_max is not None and dram_top > dram_max:
            return Status.FAIL, f"gpu{idx} dram-errors={dram_top}>{dram_max}", detail
        return Status.OK, None, detail

    return per_gpu(data, "ecc_volatile_uncorrected", judge, "ecc")


def eval_remapped_rows(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """NVIDIA "A100 GPU memory error management", row remapping: with the *pending* flag "unaffected applications can
    continue running ... and new workloads can be launched"; the remap takes effect at the next GPU reset. Only the
    *failure* flag (no spare row left) means RMA. Pending is a WARN asking for a reset when the GPU is idle."""
    unc_max = ctx.policy.get("max_uncorrectable")

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        corr, unc, pending, failure = v
        detail = {"correctable": corr, "uncorrectable": unc, "pending": pending, "failure": failure}
        if failure:
            return Status.FAIL, f"gpu{idx} remap-failed", detail  # out of spare rows: RMA
        if unc_max is not None and unc > unc_max:
            return Status.FAIL, f"gpu{idx} remaps-unc={unc}>{unc_max}", detail  # AzNHC's bank limit
        if pending:
            detail["todo"] = "reset the GPU when it is idle (nvidia-smi -r) to activate the remap"
            return Status.WARN, f"gpu{idx} remap-pending (reset when idle)", detail
        return Status.OK, None, detail

    verdict = per_gpu(data, "remapped_rows", judge, "remapped rows")
    pending = sorted((i for i, d in verdict.evidence.get("gpus", {}).items() if isinstance(d, dict) and d.get("pending")
                      and not d.get("failure")), key=int)
    if pending and verdict.status == Status.WARN and ctx.policy.get("drain_pending_when_idle"):
        verdict.evidence["reset_pending"] = pending  # the health check drains the node for the reset once it is idle
    return verdict


def eval_retired_pages(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        if v:
            return Status.FAIL, f"gpu{idx} retire-pending", {"pending": v}
        return Status.OK, None, {"pending": v}

    return per_gpu(data, "retired_pages_pending", judge, "retired pages")


def eval_recovery_action(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        name = RECOVERY_ACTIONS.get(v, f"action{v}")
        if v:
            return Status.FAIL, f"gpu{idx} recovery={name}", {"action": name}
        return Status.OK, None, {"action": name}

    return per_gpu(data, "recovery_action", judge, "recovery action")


def eval_clocks(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    watched = {r: CLOCK_REASON_BITS[r] for r in ctx.policy.get("reasons") or ()}

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        active = [name for name, bit in CLOCK_REASON_BITS.items() if v & bit]
        bad = [name for name, bit in watched.items() if v & bit]
        detail = {"mask": hex(v), "active": active}
        if bad:
            return Status.FAIL, f"gpu{idx} clocks {'+'.join(bad)}", detail
        return Status.OK, None, detail

    return per_gpu(data, "clocks_event_reasons", judge, "clock events")


def eval_temperature(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    warn_c, max_c = ctx.policy.get("warn_c"), ctx.policy.get("max_c")

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        if max_c is not None and v >= max_c:
            return Status.FAIL, f"gpu{idx} temp {v}C>={max_c:g}C", v
        if warn_c is not None and v >= warn_c:
            return Status.WARN, f"gpu{idx} temp {v}C>={warn_c:g}C", v
        return Status.OK, None, v

    return per_gpu(data, "temperature_c", judge, "temperature")


def eval_persistence(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """Persistence mode off: every NVML client (each hook, each job start) pays the driver's GPU initialisation, which
    on 8 GPUs can exceed the hook's NVML budget and read as "nvml hung" on a healthy node. A FAIL where the site
    expects it on (``expected: true``), a WARN where it said nothing, OK where it expects it off."""
    want = ctx.policy.get("expected")

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        if want is False:
            return Status.OK, None, v
        if not v:
            return (Status.FAIL if want else Status.WARN), f"gpu{idx} persistence off", v
        return Status.OK, None, v

    return per_gpu(data, "persistence_mode", judge, "persistence")


def eval_nvlink(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    want = ctx.expect.nvlink
    if want is False:
        return Verdict(Status.SKIP, "no NVLink expected (inventory links: none)")
    statuses: list[Status] = []
    findings: list[str] = []
    details: dict[str, Any] = {}
    for idx in sorted(data, key=int):
        v = data[idx].get("nvlink_state", {"error": "NotSupported"})
        e = _err(v)
        if e in SKIP_ERRORS:
            if want:
                statuses.append(Status.FAIL)
                findings.append(f"gpu{idx} nvlink missing")
            else:
                statuses.append(Status.SKIP)
            details[idx] = "not supported"
            continue
        if e is not None:
            statuses.append(Status.FAIL if e in FATAL_ERRORS else Status.WARN)
            findings.append(f"gpu{idx} nvlink {e}")
            details[idx] = e
            continue
        down = [i for i, s in enumerate(v) if s != 1]
        details[idx] = {"links": len(v), "down": down}
        if down:
            statuses.append(Status.FAIL)
            findings.append(f"gpu{idx} nvlink {len(down)}/{len(v)} down")
        else:
            statuses.append(Status.OK)
    if not statuses:
        return Verdict(Status.SKIP, "no GPUs in scope")
    worst = max(statuses)
    if all(s == Status.SKIP for s in statuses):
        return Verdict(Status.SKIP, "no NVLink on these GPUs", evidence={"gpus": details})
    if worst <= Status.OK:
        return Verdict(Status.OK, "nvlink: all links up", evidence={"gpus": details})
    return Verdict(worst, "; ".join(findings), findings, {"gpus": details})


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def eval_pcie(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """Width below max fails. The current *generation* drops at idle for power saving, so it is never judged; the
    generation the slot allows (nvmlDeviceGetMaxPcieLinkGeneration) below what the GPU can do
    (nvmlDeviceGetGpuMaxPcieLinkGeneration) is a WARN (a link trained down). Replays per minute since the last run
    above ``max_replays_per_min`` (DCGM DCGM_FR_PCI_REPLAY_RATE, default 8) are a WARN."""
    rate_max = ctx.policy.get("max_replays_per_min")

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        dev = data[idx]
        cur, mx = v
        detail: dict[str, Any] = {"width": cur, "max": mx}
        gen = dev.get("pcie_gen")
        if isinstance(gen, list) and len(gen) == 3:
            detail["gen"] = {"current": gen[0], "max": gen[1], "gpu_max": gen[2]}
        if _int(dev.get("pcie_replay")) is not None:
            detail["replays"] = dev["pcie_replay"]
        if cur < mx:
            return Status.FAIL, f"gpu{idx} pcie x{cur}/x{mx}", detail
        delta, elapsed = _int(dev.get("pcie_replay_delta")), dev.get("elapsed_s")
        if delta is not None and isinstance(elapsed, (int, float)) and elapsed > 0:
            per_min = delta / (elapsed / 60.0)
            detail.update(replay_delta=delta, replays_per_min=round(per_min, 3))
            if rate_max is not None and delta > 0 and per_min > rate_max:
                return Status.WARN, f"gpu{idx} pcie replays {per_min:.0f}/min", detail
        if isinstance(gen, list) and len(gen) == 3 and _int(gen[1]) and _int(gen[2]) and gen[1] < gen[2]:
            return Status.WARN, f"gpu{idx} pcie gen{gen[1]}<gen{gen[2]}", detail
        return Status.OK, None, detail

    return per_gpu(data, "pcie_width", judge, "pcie")


def eval_nvlink_errors(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """NVLink CRC (flit/data), replay and recovery error totals: their growth since the last run above ``max_delta``
    (DCGM's NVLink health watch treats growing CRC/replay/recovery counters as a warning). The first run on a boot
    records the baseline."""
    if ctx.expect.nvlink is False:
        return Verdict(Status.SKIP, "no NVLink expected (inventory links: none)")
    max_delta = ctx.policy.get("max_delta") or 0
    after = ctx.policy.get("escalate_after")
    escalated: list[str] = []

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        delta = data[idx].get("nvlink_errors_delta")
        streak = data[idx].get("nvlink_streak", 0)
        detail = {"totals": v, "delta": delta, "elapsed_s": data[idx].get("elapsed_s"), "streak": streak}
        if not isinstance(delta, dict):
            return Status.OK, None, {**detail, "baseline": "recorded"}
        grown = {k: d for k, d in sorted(delta.items()) if d > max_delta}
        if after and isinstance(streak, int) and streak >= after:
            escalated.append(idx)
            return Status.FAIL, f"gpu{idx} nvlink errors above rate {streak} runs", detail
        if grown:
            return Status.FAIL, f"gpu{idx} nvlink " + ",".join(f"{k}+{d}" for k, d in grown.items()), detail
        return Status.OK, None, detail

    verdict = per_gpu(data, "nvlink_errors", judge, "nvlink errors")
    if escalated:
        # the warning lasted escalate_after health intervals: the check's escalate_action (drain by default)
        verdict.evidence["escalate_to"] = ctx.policy.get("escalate_action") or "drain"
        verdict.evidence["escalated"] = escalated
    return verdict


FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


def eval_fabric(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """GPU fabric registration on NVSwitch systems (nvmlDeviceGetGpuFabricInfo[V]): state NVML_GPU_FABRIC_STATE_
    COMPLETED (3) with status SUCCESS once the fabric manager has trained the fabric; anything else means the GPU
    cannot use NVLink peers (fabric manager down or failed). State NOT_SUPPORTED (0): no fabric here, SKIP. A health
    mask saying degraded bandwidth (NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE) is a WARN."""

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        state, status = v.get("state"), v.get("status")
        detail = {**v, "state_name": FABRIC_STATES.get(state, str(state))}
        if state == 0:
            return Status.SKIP, None, detail
        if state != 3:
            return Status.FAIL, f"gpu{idx} fabric {FABRIC_STATES.get(state, state)}", detail
        if status != "Success":
            return Status.FAIL, f"gpu{idx} fabric {status}", detail
        mask = v.get("health_mask")
        if isinstance(mask, int) and (mask & 0x3) == 1:
            return Status.WARN, f"gpu{idx} fabric degraded bandwidth", detail
        return Status.OK, None, detail

    return per_gpu(data, "fabric", judge, "fabric")


def eval_inforom(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """nvmlDeviceValidateInforom: NVML_ERROR_CORRUPTED_INFOROM fails (a FATAL_ERRORS code), success is OK."""

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        return Status.OK, None, v

    return per_gpu(data, "inforom_valid", judge, "inforom")


def eval_power(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """The enforced power limit against the board's default (nvmlDeviceGetEnforcedPowerLimit vs
    nvmlDeviceGetPowerManagementDefaultLimit, milliwatts): a GPU capped below ``min_limit_pct`` of its default runs
    slow and drags a synchronous job with it."""
    pct = ctx.policy.get("min_limit_pct") or 0

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        enforced, default = v
        detail = {"enforced_w": enforced / 1000, "default_w": default / 1000}
        if default and enforced < default * pct / 100.0:
            return Status.FAIL, f"gpu{idx} power limit {enforced / 1000:.0f}W<{pct:g}% of {default / 1000:.0f}W", \
                detail
        return Status.OK, None, detail

    return per_gpu(data, "power_limit_mw", judge, "power limit")


def eval_mig(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    forced = ctx.policy.get("expected")
    per = ctx.expect.mig

    def want_for(idx: str) -> bool | None:
        if forced is not None:
            return bool(forced)
        if per is not None and int(idx) < len(per):
            return per[int(idx)]
        return None

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        cur, pending = v
        want = want_for(idx)
        detail = {"current": cur, "pending": pending, "expected": want}
        if cur != pending:
            return Status.FAIL, f"gpu{idx} mig change pending", detail  # takes effect only after a reset
        if want is not None and bool(cur) != want:
            return Status.FAIL, f"gpu{idx} mig {'on' if cur else 'off'}", detail
        return Status.OK, None, detail

    verdict = per_gpu(data, "mig_mode", judge, "mig")
    if verdict.status == Status.SKIP and any(want_for(i) for i in data):
        return Verdict(Status.FAIL, "MIG expected but not supported", ["mig unsupported"], verdict.evidence)
    return verdict


def eval_gpu_procs(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """Prolog: a compute process on the job's GPUs that no running job owns is a leftover (busy GPU). A process of
    another job that still runs here (shards, MPS share a GPU) is never judged. Epilog: judged after cleanup.
    Health/check (node-wide, no job of its own): a process whose job ended (known from /proc, no slurmstepd of it
    runs here) is a leftover, and so is a process with no job at all while no job runs on the node; a running job's
    process is never judged, nor one without evidence while some job runs (it may be that job's)."""
    if ctx.hook in ("health", "check"):
        return _eval_leftovers(data, ctx)
    if ctx.hook not in ("prolog", "epilog"):
        return Verdict(Status.SKIP, "only judged at prolog/epilog/health")
    if ctx.hook == "epilog":
        return _eval_epilog_procs(ctx)
    owners: dict[str, Any] = ctx.extra.get("owners", {})
    job_id = ctx.extra.get("job_id")

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        busy, shared = [], []
        for p in v:
            o = owners.get(str(p["pid"])) or {}
            if o.get("job") and (o["job"] == job_id or o.get("running")):
                shared.append({"pid": p["pid"], "job": o["job"]})  # this job's own, or a running job's (shared GPU)
            else:
                busy.append(p["pid"])
        detail = {"pids": [p["pid"] for p in v], "running_jobs": shared}
        if busy:
            return Status.FAIL, f"gpu{idx} busy pid {busy[0]}" + (f" +{len(busy) - 1}" if len(busy) > 1 else ""), \
                detail
        return Status.OK, None, detail

    return per_gpu(data, "compute_processes", judge, "gpu processes")


# What the health check does next about a process the epilog left running (``_eval_leftovers``), said in the message.
_NEXT = ("the health check drains the node ('busy pid') if it still holds the GPU once its job has ended, or once no "
         "job runs here when /proc ties it to none")


def _procs_text(entries: list[dict[str, Any]]) -> str:
    return ", ".join(f"gpu{e['gpu']} pid {e['pid']} uid {e['uid']}" + (f" job {e['job']}" if e.get("job") else "")
                     for e in entries)


def _eval_epilog_procs(ctx: EvalContext) -> Verdict:
    """The epilog's cleanup, judged: survivors of SIGKILL fail; what was left running is named for what it is (another
    user's process, a root job's root process /proc does not tie to the job) with what happens next."""
    cleanup = ctx.extra.get("cleanup", {})
    job = ctx.extra.get("job_id") or "?"
    ev = {k: cleanup.get(k, []) for k in ("killed", "survivors", "foreign", "held", "unproven")}
    if cleanup.get("changed"):  # the pid names another process than the one judged (it exited; the pid was reused)
        ev["changed"] = cleanup["changed"]
    if ev["survivors"]:
        return Verdict(Status.FAIL, f"job {job}'s processes survived SIGKILL: {_procs_text(ev['survivors'])}",
                       [f"gpu{s['gpu']} unkillable pid {s['pid']}" for s in ev["survivors"]], ev)
    left = []
    if ev["foreign"]:
        left.append(f"not job {job}'s, other users' processes left running: {_procs_text(ev['foreign'])}")
    if ev["unproven"]:
        left.append(f"job {job} ran as root; root processes that /proc does not tie to it (no job cgroup, no "
                    f"slurmstepd ancestor, no SLURM_JOB_ID) left running: {_procs_text(ev['unproven'])}")
    killed = f"killed {len(ev['killed'])} leftover process(es) of job {job}" if ev["killed"] else ""
    if left:
        return Verdict(Status.WARN, "; ".join(x for x in (killed, *left, _NEXT) if x),
                       [f"gpu{e['gpu']} {'foreign' if e in ev['foreign'] else 'root'} pid {e['pid']}"
                        for e in ev["foreign"] + ev["unproven"]], ev)
    held = f"; left {len(ev['held'])} process(es) of running jobs alone" if ev["held"] else ""
    if ev.get("changed"):
        held += f"; {len(ev['changed'])} pid(s) taken over by another process since judged, not signalled"
    return Verdict(Status.OK, (killed or "no leftover processes") + held, evidence=ev)


def _eval_leftovers(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    owners: dict[str, Any] = ctx.extra.get("owners", {})
    jobs_running = ctx.extra.get("jobs_running", True)  # unknown: assume some job runs (judge nothing unowned)

    def judge(idx: str, v: Any) -> tuple[Status, str | None, Any]:
        leftover, held, unknown = [], [], []
        for p in v:
            o = owners.get(str(p["pid"])) or {}
            if o.get("job") and o.get("running"):
                held.append({"pid": p["pid"], "job": o["job"]})
            elif o.get("job") or not jobs_running:
                leftover.append({"pid": p["pid"], "job": o.get("job")})
            else:
                unknown.append(p["pid"])
        detail = {"pids": [p["pid"] for p in v], "running_jobs": held, "leftovers": leftover, "unknown": unknown}
        if leftover:
            pid = leftover[0]["pid"]
            # the prolog's finding for the same process, so the drain reason it set stays as it is
            return Status.FAIL, f"gpu{idx} busy pid {pid}" + (f" +{len(leftover) - 1}" if len(leftover) > 1
                                                              else ""), detail
        return Status.OK, None, detail

    return per_gpu(data, "compute_processes", judge, "gpu processes")


def node_gpu_buses(ctx: EvalContext) -> tuple[set[str], str | None]:
    """The bus ids of this node's GPUs: NVML's, and the expected boards' (the inventory's hooks.checks.gpu_count
    .bus_ids, else the node's first healthy run), which still name a GPU NVML lost. The second value is None when
    that list is complete, else why an XID on a bus outside it may still be one of this node's GPUs."""
    devices = [d for d in ctx.init.get("devices", []) if isinstance(d, dict)]
    nvml = {b for d in devices if (b := norm_bus_id(str(d.get("pci_bus_id") or "")))}
    base = [g for g in ctx.extra.get("gpu_baseline") or () if isinstance(g, dict)]
    known = nvml | {b for g in base if (b := norm_bus_id(str(g.get("pci_bus_id") or "")))}
    if base:
        return known, None
    if not ctx.init:
        return known, "NVML did not answer and no GPU list is recorded"
    expected = ctx.extra.get("gpu_expected")
    if not isinstance(expected, int):
        return known, "no expected GPU count or bus ids for this node"
    short = max(expected - len(nvml), len(devices) - len(nvml))
    if short > 0:
        return known, f"{short} of the node's {expected} GPU(s) without a known bus id"
    return known, None


def eval_xid(scan: XidScan | None, ctx: EvalContext) -> Verdict:
    """XIDs and SXids since the cursor, and the critical ones still standing. Only a GPU of this node fails (or,
    in a prolog, only the job's GPUs): an XID whose bus id none of the node's GPUs has is a WARN naming that bus
    id, never a drain (issue 32 item 1; xid.py keeps out every record that is not a driver's own)."""
    if scan is None:
        return Verdict(Status.SKIP, "kernel log unreadable")
    fail_codes = set(ctx.policy.get("codes") or ())
    bus_to_idx = {norm_bus_id(str(d.get("pci_bus_id", ""))): d["index"] for d in ctx.init.get("devices", [])
                  if isinstance(d.get("pci_bus_id"), str)}
    in_scope = set(ctx.init.get("selected", [])) if ctx.hook == "prolog" else None
    known, unverified = node_gpu_buses(ctx)
    foreign: set[str] = set()

    def label(bus: str, kind: str = "xid") -> tuple[str, bool]:
        if kind == "sxid":
            return f"nvswitch{bus}", True  # an NVSwitch serves every GPU's NVLink: in every job's scope
        idx = bus_to_idx.get(bus)
        if idx is None:
            if unverified is None and bus not in known:
                foreign.add(bus)
                return f"pci{bus}", False
            return f"pci{bus}", True  # the GPU may be the one that vanished (expected, or unaccounted for): count it
        return f"gpu{idx}", in_scope is None or idx in in_scope

    findings: list[str] = []
    status = Status.OK
    for s in scan.sticky:
        kind = s.get("kind", "xid")
        name, scoped = label(s["bus_id"], kind)
        if scoped:
            findings.append(f"{name} {kind}{s['xid']}")
            status = Status.FAIL
    for e in scan.new:
        if not is_critical(e, frozenset(fail_codes)):
            name, scoped = label(e.bus_id, e.kind)
            if scoped:
                findings.append(f"{name} {e.kind}{e.xid}")
                status = max(status, Status.WARN)
    not_ours = [f"pci{e['bus_id']} xid{e['xid']} (no GPU of this node has bus {e['bus_id']}: not counted)"
                for e in [*scan.sticky, *(x.to_json() for x in scan.new)]
                if e.get("kind", "xid") == "xid" and e["bus_id"] in foreign]
    findings = list(dict.fromkeys(findings + not_ours))  # de-duplicate, keep order
    if not_ours:
        status = max(status, Status.WARN)
    ev: dict[str, Any] = {"new": [e.to_json() for e in scan.new][-20:], "sticky": scan.sticky,
                          "source": scan.source, "cursor": scan.state.seq}
    if foreign:
        ev["foreign_bus"] = sorted(foreign)  # the metrics leave these out: no GPU of this node, no XID series
        ev["gpu_buses"] = sorted(known)
    elif unverified and any(e.get("kind", "xid") == "xid" and e["bus_id"] not in known
                            for e in [*scan.sticky, *(x.to_json() for x in scan.new)]):
        ev["bus_unverified"] = unverified  # counted, and said so: the bus id could not be checked
    if scan.sticky:
        ev["way_out"] = ("sticky until the node reboots (new boot id) or, after a GPU reset, "
                         "`slurmkit check --clear-xid --node <node>`")
    since = "in the kernel log past the hooks' cursor (read-only: cursor not moved)" if ctx.hook == "check" \
        else "since the last run"
    if status == Status.OK:
        return Verdict(Status.OK, f"no XID {since} ({len(scan.new)} new, cursor {scan.state.seq})", evidence=ev)
    summary = "; ".join(findings)
    if status == Status.FAIL and scan.sticky:
        summary += f" ({ev['way_out']})"
    if "bus_unverified" in ev:
        summary += f" (bus id unverified: {unverified})"
    return Verdict(status, summary, findings, ev)


# --- host ---------------------------------------------------------------------------------------------------

def _gbps(rate: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) if m else None


def eval_ib(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    expected = ctx.expect.nics
    floor = ctx.policy.get("min_rate_gbps")
    # IPoIB MTU as the site says (65520 in connected mode, e.g. 2044/4092 in datagram mode), as NHC's check_hw_ib
    # takes it; link_downed / symbol_error growth since the last run above these is a flap (WARN)
    want_mtu = ctx.policy.get("mtu")
    flap_max, symbol_max = ctx.policy.get("max_link_downed_delta"), ctx.policy.get("max_symbol_error_delta")
    devices = data.get("devices", {})
    if data.get("absent") and not expected:
        return Verdict(Status.SKIP, "no /sys/class/infiniband and no NICs expected")
    findings: list[str] = []
    status = Status.OK
    want_names = [n.name for n in expected]
    targets = want_names or sorted(devices)
    rates = {n.name: n.rate_gbps for n in expected}
    # Without an inventory we do not know which ports are meant to be cabled: a down port is a warning.
    down_status = Status.FAIL if expected else Status.WARN
    for name in targets:
        ports = devices.get(name)
        if not ports:
            findings.append(f"{name} missing")
            status = Status.FAIL
            continue
        want_rate = floor if floor is not None else (rates.get(name) or None)
        for port, p in sorted(ports.items()):
            state, phys = p.get("state") or "", p.get("phys_state") or ""
            if "ACTIVE" not in state:
                findings.append(f"{name}/{port} {state.split(':')[-1].strip().lower() or 'no state'}")
                status = max(status, down_status)
                continue
            if "LinkUp" not in phys:
                findings.append(f"{name}/{port} phys {phys.split(':')[-1].strip() or '?'}")
                status = max(status, down_status)
                continue
            got = _gbps(p.get("rate"))
            if want_rate and (got is None or got < want_rate):
                findings.append(f"{name}/{port} rate {got:g}<{want_rate:g}" if got is not None
                                else f"{name}/{port} rate unknown")
                status = max(status, down_status)
            # link flaps since the last run (ib_core counters): a WARN, the port is up now
            delta = p.get("counters_delta") or {}
            for counter, limit in (("link_downed", flap_max), ("symbol_error", symbol_max)):
                d = delta.get(counter)
                if isinstance(d, int) and limit is not None and d > limit:
                    findings.append(f"{name}/{port} {counter}+{d}")
                    status = max(status, Status.WARN)
        if want_mtu is not None and "InfiniBand" in " ".join(str(p.get("link_layer")) for p in ports.values()):
            for ifname, mtu in sorted((data.get("mtu") or {}).get(name, {}).items()):
                if mtu != want_mtu:
                    findings.append(f"{name} {ifname} mtu {mtu}!={want_mtu}")
                    status = Status.FAIL  # the site said which MTU: anything else is a misconfiguration
    ev = {"devices": devices, "mtu": data.get("mtu") or {}, "expected": [n.__dict__ for n in expected]}
    if status == Status.OK:
        return Verdict(Status.OK, f"{len(targets)} HCA(s) active", evidence=ev)
    return Verdict(status, "; ".join(findings), [f"ib {f}" for f in findings], ev)


def eval_cpu_governor(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    if data.get("absent"):
        return Verdict(Status.SKIP, "no cpufreq in sysfs (VM or driver without governors)")
    want = ctx.policy.get("expected")
    govs: dict[str, int] = data["governors"]
    other = {g: n for g, n in govs.items() if g != want}
    if not other:
        return Verdict(Status.OK, f"{want} on {data['cpus']} CPU(s)", evidence=data)
    g, n = max(other.items(), key=lambda kv: kv[1])
    return Verdict(Status.FAIL, f"governor {g} on {n}/{data['cpus']} CPU(s), expected {want}",
                   [f"cpu governor {g}"], data)


def eval_memory(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    total, avail = data.get("total_kb"), data.get("available_kb")
    if not total or avail is None:
        return Verdict(Status.SKIP, "no MemAvailable in /proc/meminfo", evidence=data)
    pct = 100.0 * avail / total
    floor = ctx.policy.get("min_available_pct")
    ev = {**data, "available_pct": round(pct, 2)}
    if pct < floor:
        return Verdict(Status.FAIL, f"{pct:.1f}% memory available < {floor:g}%", [f"mem avail {pct:.0f}%"], ev)
    return Verdict(Status.OK, f"{pct:.0f}% memory available", evidence=ev)


def eval_disk_space(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    floor = ctx.policy.get("min_free_pct")
    findings = []
    for path, v in data.items():
        if "error" in v:
            findings.append(f"{path} {v['error'].lower()}")
        elif v["total_bytes"] and 100.0 * v["avail_bytes"] / v["total_bytes"] < floor:
            findings.append(f"{path} {100.0 * v['avail_bytes'] / v['total_bytes']:.0f}% free")
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings) + f" (min {floor:g}%)", findings, data)
    return Verdict(Status.OK, ", ".join(f"{p} ok" for p in data), evidence=data)


def eval_slurmd_oom(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    if data.get("absent"):
        return Verdict(Status.SKIP, "no slurmd process found", evidence=data)
    want = ctx.policy.get("expected_adj")
    adj = data.get("oom_score_adj")
    if adj is None:
        return Verdict(Status.WARN, "slurmd oom_score_adj unreadable", ["slurmd oom unknown"], data)
    if adj > want:
        return Verdict(Status.FAIL, f"slurmd (pid {data['pid']}) oom_score_adj {adj}, expected {want}",
                       [f"slurmd oom_score_adj {adj}"], data)
    return Verdict(Status.OK, f"slurmd oom_score_adj {adj}", evidence=data)


# --- node checks NHC sites run (issue 23 item 5) ---------------------------------------------------------------

def eval_filesystems(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """Network filesystems and the required mount points: mounted, answering statvfs within the time budget."""
    mounts: dict[str, Any] = data.get("mounts", {})
    findings = []
    for point, m in sorted(mounts.items()):
        if m.get("mounted") is False:
            findings.append(f"fs {point} not mounted")
        elif m.get("hung"):
            findings.append(f"fs {point} hung >{data.get('timeout_s', 0):g}s")
        elif m.get("ok") is False:
            # ESTALE: the server lost the export or was replaced under the mount (NHC's stale-handle case)
            findings.append(f"fs {point} {'stale' if m.get('errno') == 116 else m.get('error', 'error')}")
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, data)
    if not mounts:
        return Verdict(Status.OK, "no network filesystems mounted, none required", evidence=data)
    return Verdict(Status.OK, f"{len(mounts)} filesystem(s) mounted and answering", evidence=data)


def eval_edac(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    if data.get("absent"):
        return Verdict(Status.SKIP, "no EDAC memory controllers (edac driver not loaded)")
    max_ue, max_ce = ctx.policy.get("max_uncorrectable") or 0, ctx.policy.get("max_correctable")
    st, findings = Status.OK, list[str]()
    for mc, c in sorted(data.get("controllers", {}).items()):
        ue, ce = c.get("ue"), c.get("ce")
        if isinstance(ue, int) and ue > max_ue:
            st, findings = Status.FAIL, findings + [f"mem {mc} ue={ue}"]
        elif isinstance(ce, int) and max_ce is not None and ce > max_ce:
            st, findings = max(st, Status.WARN), findings + [f"mem {mc} ce={ce}>{max_ce}"]
    if findings:
        return Verdict(st, "host memory errors: " + "; ".join(findings), findings, data)
    return Verdict(Status.OK, f"{len(data.get('controllers', {}))} memory controller(s) without errors", evidence=data)


def eval_mce(scan: XidScan | None, ctx: EvalContext) -> Verdict:
    if scan is None:
        return Verdict(Status.SKIP, "kernel log unreadable")
    m = scan.mce
    ue, ce = int(m.get("uncorrected", 0)), int(m.get("corrected", 0))
    max_ue, max_ce = ctx.policy.get("max_uncorrectable") or 0, ctx.policy.get("max_correctable")
    ev = {**m, "source": scan.source}
    if ue > max_ue:
        return Verdict(Status.FAIL, f"host memory: {ue} uncorrected machine check(s) this boot ({m.get('last', '')})",
                       [f"mce uncorrected={ue}"], ev)
    if max_ce is not None and ce > max_ce:
        return Verdict(Status.WARN, f"host: {ce} corrected machine-check event(s) logged this boot (> {max_ce})",
                       [f"mce corrected={ce}>{max_ce}"], ev)
    return Verdict(Status.OK, f"no uncorrected machine check this boot ({ce} corrected)", evidence=ev)


# comm is the kernel's 15-character task name (TASK_COMM_LEN 16)
def _comm15(name: str) -> str:
    return name[:15]


# Who each daemon runs as, where it is not root (a site adds its own with the daemons check's ``users``):
# - munged: Debian's munge.service has ``User=munge`` (the lab and some sites run it as root);
# - nvidia-persistenced drops to the user its --user names: NVIDIA's unit template (nvidia-persistenced's
#   init/systemd/nvidia-persistenced.service.template, the CUDA repository's package) ``--user nvidia-persistenced``,
#   Debian's nvidia-persistenced package ``--user nvpd``; many sites run it ``--user root``.
# nvidia-imex, nv-fabricmanager and nv-hostengine (DCGM) run as root in NVIDIA's units.
DAEMON_USERS: dict[str, tuple[str, ...]] = {
    "munged": ("munge", "root"),
    "nvidia-persistenced": ("root", "nvidia-persistenced", "nvpd"),
}
# the GPU daemons _node_facts may add to a real GPU node's list, and the optional ones
GPU_DAEMONS = ("nvidia-persistenced", "nv-fabricmanager", "nvidia-imex", "nv-hostengine")


def daemon_names(policy: Any) -> frozenset[str]:
    """Every name the daemons check may ask for under ``policy``: the processes whose identity the /proc pass reads."""
    return frozenset((*(policy.get("required") or ()), *GPU_DAEMONS))


def _daemon_uids(name: str, users: dict[str, tuple[str, ...]]) -> set[int]:
    import pwd

    out: set[int] = set()
    for u in (*DAEMON_USERS.get(name, ("root",)), *users.get(name, ())):
        if u.isdigit():
            out.add(int(u))
            continue
        try:
            out.add(pwd.getpwnam(u).pw_uid)
        except KeyError:
            continue  # that package's user is not on this node
    return out


def eval_daemons(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """A required daemon runs when some process of its name runs a root-controlled executable named so
    (``host.exe_identity``: a file only root could have put there) as one of the daemon's users
    (``DAEMON_USERS`` + the policy's ``users``). A name alone proves nothing: any user can run a copy of
    /bin/sleep called nvidia-imex, or rename a process with prctl."""
    if data.get("error"):
        return Verdict(Status.WARN, f"/proc unreadable: {data['error']}", ["daemons unreadable"])
    want = list(ctx.policy.get("required") or ())
    want += [d for d in ctx.extra.get("gpu_daemons", ()) if d not in want]
    if ctx.policy.get("imex"):
        want.append("nvidia-imex")
    if ctx.policy.get("dcgm"):
        want.append("nv-hostengine")
    users = ctx.policy.get("users") or {}
    seen = data.get("daemons") or {}
    missing: list[str] = []
    impostors: dict[str, list[dict[str, Any]]] = {}
    for d in want:
        rec = seen.get(_comm15(d)) or {}
        uids = _daemon_uids(d, users)
        if not any(int(u) in uids for u in rec.get("by_uid") or {}):
            missing.append(d)
            others = [{"pid": p, "uid": int(u), "why": "not one of its users"} for u, p in
                      (rec.get("by_uid") or {}).items()] + list(rec.get("untrusted") or [])
            if others:
                impostors[d] = others[:5]
    ev = {"required": want, "missing": missing, **({"impostors": impostors} if impostors else {})}
    if missing:
        fake = [d for d in missing if d in impostors]
        note = f" (only processes that merely carry the name: {', '.join(fake)})" if fake else ""
        return Verdict(Status.FAIL, "not running: " + ", ".join(missing) + note, [f"{d} down" for d in missing], ev)
    return Verdict(Status.OK, "running: " + ", ".join(want) if want else "no daemons required", evidence=ev)


def eval_dstate(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    if data.get("error"):
        return Verdict(Status.SKIP, f"/proc unreadable: {data['error']}")
    d = data.get("dstate", [])
    limit = ctx.policy.get("max_count") or 0
    ev = {"dstate": d[:20], "count": len(d)}
    if len(d) > limit:
        names = ", ".join(f"{p['comm']}({p['pid']})" for p in d[:5]) + (f" +{len(d) - 5}" if len(d) > 5 else "")
        return Verdict(Status.FAIL, f"{len(d)} process(es) in D state: {names}", [f"{len(d)} procs in D state"], ev)
    return Verdict(Status.OK, "no process stuck in D state" if not d else f"{len(d)} in D state (limit {limit})",
                   evidence=ev)


def eval_hardware(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    if ctx.extra.get("simulated"):
        return Verdict(Status.SKIP, "simulated node (fake NVML): the host's CPUs and memory are not this node's")
    cpus, total_kb = data.get("cpus"), data.get("total_kb")
    want_cpus, want_mb = ctx.expect.cpus, ctx.expect.memory_mb
    if want_cpus is None and want_mb is None:
        return Verdict(Status.SKIP, "no inventory CPUs/memory for this node", evidence=data)
    findings = []
    if want_cpus is not None and isinstance(cpus, int) and cpus < want_cpus:
        findings.append(f"cpus {cpus}/{want_cpus}")
    fudge = float(ctx.policy.get("memory_fudge_pct") or 0.0)
    if want_mb is not None and isinstance(total_kb, int) and total_kb // 1024 < want_mb * (1 - fudge / 100):
        findings.append(f"memory {total_kb // 1024}<{want_mb}MB")
    ev = {**data, "expected_cpus": want_cpus, "expected_memory_mb": want_mb}
    if findings:
        return Verdict(Status.FAIL, "below the inventory: " + "; ".join(findings), findings, ev)
    return Verdict(Status.OK, f"{cpus} CPUs, {None if total_kb is None else total_kb // 1024} MB", evidence=ev)


def eval_firmware(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """Driver, VBIOS and InfoROM image versions against the expected set; without one, recorded for the fleet report."""
    driver = ctx.init.get("driver_version") if ctx.init else None
    want = {k: ctx.policy.get(k) for k in ("driver", "vbios", "inforom")}
    findings: list[str] = []
    gpus: dict[str, Any] = {}
    if want["driver"] and isinstance(driver, str) and driver not in want["driver"]:
        findings.append(f"driver {driver} not in {'/'.join(want['driver'])}")
    for idx in sorted(data, key=int):
        d = data[idx]
        vb, ir = d.get("vbios_version"), d.get("inforom_image_version")
        vb = vb if isinstance(vb, str) else None
        ir = ir if isinstance(ir, str) else None
        gpus[idx] = {"vbios": vb, "inforom": ir}
        if want["vbios"] and vb and vb not in want["vbios"]:
            findings.append(f"gpu{idx} vbios {vb}")
        if want["inforom"] and ir and ir not in want["inforom"]:
            findings.append(f"gpu{idx} inforom {ir}")
    ev = {"driver": driver, "gpus": gpus, "expected": {k: list(v) for k, v in want.items() if v}}
    if findings:
        return Verdict(Status.FAIL, "not the fleet's versions: " + "; ".join(findings), findings, ev)
    seen = sorted({g["vbios"] for g in gpus.values() if g["vbios"]})
    summary = f"driver {driver}, vbios {'/'.join(seen) or 'unknown'}"
    return Verdict(Status.OK, summary + ("" if any(want.values()) else " (no expected set: see slurmkit report firmware)"),
                   evidence=ev)


def eval_topology(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """NUMA placement of GPUs and HCAs against hooks.checks.topology, else the node's first run (a GPU or HCA that
    moved NUMA node after maintenance: a riser in the wrong slot, a BIOS change)."""
    from slurmkit.health.gpuid import norm_bus, short_bus

    base = ctx.extra.get("topology_baseline") or {}
    want_g = {norm_bus(k): v for k, v in (ctx.policy.get("gpu_numa") or base.get("gpus") or {}).items()}
    want_h = dict(ctx.policy.get("hca_numa") or base.get("hcas") or {})
    findings = []
    for bus, node in sorted(data.get("gpus", {}).items()):
        w = want_g.get(norm_bus(bus))
        if w is not None and node != w:
            findings.append(f"gpu@{short_bus(bus)} numa {node}!={w}")
    for name, node in sorted(data.get("hcas", {}).items()):
        w = want_h.get(name)
        if w is not None and node != w:
            findings.append(f"{name} numa {node}!={w}")
    ev = {**data, "expected_from": "hooks.checks.topology" if ctx.policy.get("gpu_numa") or ctx.policy.get("hca_numa")
          else ("the node's first run (topology.json)" if base else "nothing yet (this run is recorded)")}
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, ev)
    return Verdict(Status.OK, f"{len(data.get('gpus', {}))} GPU(s), {len(data.get('hcas', {}))} HCA(s) placed as "
                              "expected", evidence=ev)


def eval_bmc(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """The verdict `slurmkit bmc --state-dir` wrote for this node (monitor/bmc.py ``write_verdict``): its findings'
    states (fan_failed FAIL; psu_redundancy_lost, inlet_over_limit WARN). Only a fresh verdict fails: a stale one, a
    BMC that did not answer or an unreadable file warns (none of them says the node is broken)."""
    if data.get("absent"):
        return Verdict(Status.SKIP, f"no BMC verdict ({data.get('why')}; `slurmkit bmc --state-dir` writes it)")
    if data.get("read_error"):
        return Verdict(Status.WARN, f"BMC verdict unreadable: {data['read_error']}", ["bmc verdict unreadable"])
    age, max_age = float(data.get("age_s") or 0), float(ctx.policy.get("max_age_s") or 1800)
    ev = {k: data.get(k) for k in ("path", "age_s", "seen_s", "stamped_age_s", "clock_note", "source", "error",
                                   "findings") if data.get(k) is not None}
    if age > max_age:
        return Verdict(Status.WARN, f"BMC verdict {age:.0f}s old (max_age_s {max_age:g}): `slurmkit bmc` stopped?",
                       ["bmc verdict stale"], ev)
    if data.get("error"):
        return Verdict(Status.WARN, f"BMC did not answer: {data['error']}", ["bmc unreachable"], ev)
    found = [f for f in data.get("findings") or [] if isinstance(f, dict)]
    if not found:
        return Verdict(Status.OK, f"BMC ({data.get('source')}) reports no fault, {age:.0f}s ago", evidence=ev)
    fails = [f for f in found if f.get("state") == "fail"]
    warns = [f for f in found if f.get("state") != "fail"]

    def said(fs: list[dict[str, Any]]) -> str:
        return "; ".join(f"{f.get('check')}: {f.get('summary')}" for f in fs)

    if fails:
        # the findings become the drain reason: only what drains is named there; the warnings ride in the summary
        also = f" (also, not draining: {said(warns)})" if warns else ""
        return Verdict(Status.FAIL, f"BMC: {said(fails)}{also}", [f"bmc {f.get('check')}" for f in fails], ev)
    return Verdict(Status.WARN, f"BMC: {said(warns)}", [f"bmc {f.get('check')}" for f in warns], ev)


# --- what NHC / AzNHC configurations check besides (issue 35 item 5) -------------------------------------------

def for_group(ctx: EvalContext, key: str) -> Any:
    """The check's ``key``, or the node group's entry in its ``by_group`` where there is one."""
    by = ctx.policy.get("by_group") or {}
    if ctx.expect.group is not None and ctx.expect.group in by:
        return by[ctx.expect.group]
    return ctx.policy.get(key)


def eval_inodes(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    floor = ctx.policy.get("min_free_pct")
    findings, judged = [], []
    for path, v in data.items():
        if "error" in v:
            findings.append(f"{path} {v['error'].lower()}")
        elif v["inodes"]:  # 0: no inode count (btrfs, some pseudo filesystems), nothing to judge
            pct = 100.0 * v["free"] / v["inodes"]
            v["free_pct"] = round(pct, 2)
            judged.append(path)
            if pct < floor:
                findings.append(f"{path} {pct:.0f}% inodes free")
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings) + f" (min {floor:g}%)", findings, data)
    if not judged:
        return Verdict(Status.SKIP, "no inode counts on " + ", ".join(data) if data else "no paths", evidence=data)
    return Verdict(Status.OK, ", ".join(f"{p} {data[p]['free_pct']:.0f}% inodes free" for p in judged), evidence=data)


def eval_swap(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    total, free = data.get("total_kb"), data.get("free_kb")
    if total is None:
        return Verdict(Status.SKIP, "no SwapTotal in /proc/meminfo", evidence=data)
    lo, hi, free_pct = ctx.policy.get("min_mb"), ctx.policy.get("max_mb"), ctx.policy.get("min_free_pct")
    mb = total // 1024
    findings = []
    if lo is not None and mb < lo:
        findings.append(f"swap {mb}<{lo}MB")
    if hi is not None and mb > hi:
        findings.append(f"swap {mb}>{hi}MB")
    if free_pct is not None and total and free is not None and 100.0 * free / total < free_pct:
        findings.append(f"swap {100.0 * free / total:.0f}% free<{free_pct:g}%")
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, data)
    said = "" if any(x is not None for x in (lo, hi, free_pct)) else " (no limits: hooks.checks.swap)"
    return Verdict(Status.OK, f"swap {mb} MB, {(free or 0) // 1024} MB free{said}", evidence=data)


def interfaces_wanted(ctx: EvalContext) -> tuple[str, ...]:
    """The required interfaces: the policy's (or the node group's by_group list) and the inventory's eth NICs."""
    want = list(for_group(ctx, "required") or ())
    want += [n for n in ctx.expect.interfaces if n not in want]
    return tuple(want)


def eval_interfaces(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    want = interfaces_wanted(ctx)
    if not want:
        return Verdict(Status.SKIP, "no interfaces required (interfaces.required, inventory kind: eth NICs)")
    findings = []
    for n in want:
        v = data.get(n) or {"present": False}
        if not v.get("present"):
            findings.append(f"if {n} missing")
        elif v.get("admin_up") is False:
            findings.append(f"if {n} admin down")
        # "unknown": a driver that does not report (lo, dummy) -- up if the carrier is there
        elif v.get("operstate") not in ("up", "unknown") or v.get("carrier") == "0":
            findings.append(f"if {n} {v.get('operstate') or 'no state'}")
    ev = {"required": list(want), "interfaces": data}
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, ev)
    return Verdict(Status.OK, f"{len(want)} interface(s) up: {', '.join(want)}", evidence=ev)


def eval_dmi(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    want: dict[str, tuple[str, ...]] = for_group(ctx, "expected") or {}
    if data.get("absent"):
        if want:
            return Verdict(Status.WARN, "no /sys/class/dmi/id on this node: the DMI expectations cannot be checked",
                           ["dmi unreadable"])
        return Verdict(Status.SKIP, "no DMI table (/sys/class/dmi/id)")
    got: dict[str, str | None] = data.get("fields") or {}
    if not want:
        shown = {k: v for k, v in got.items() if v}
        return Verdict(Status.OK, "; ".join(f"{k} {v}" for k, v in shown.items()) + " (no expected values)",
                       evidence={"fields": got})
    findings = []
    for k, vals in want.items():
        v = got.get(k)
        if v is None:
            findings.append(f"dmi {k} unreadable")
        elif v not in vals:
            findings.append(f"dmi {k} {v!r} not {'/'.join(vals)}")
    ev = {"fields": got, "expected": {k: list(v) for k, v in want.items()}}
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, ev)
    return Verdict(Status.OK, "; ".join(f"{k} {got[k]}" for k in want), evidence=ev)


def eval_nvme(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    want = for_group(ctx, "expected")
    ns = data.get("namespaces") or []
    ctrls: dict[str, Any] = data.get("controllers") or {}
    findings = [f"nvme {c} {v.get('state')}" for c, v in sorted(ctrls.items())
                if v.get("state") not in (None, "live")]  # dead, resetting, deleting: the controller is not serving
    if want is not None and len(ns) != want:
        findings.insert(0, f"nvme count {len(ns)}/{want}")
    ev = {**data, "expected": want}
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, ev)
    if want is None:
        return Verdict(Status.OK, f"{len(ns)} NVMe namespace(s) (no expected count: hooks.checks.nvme.expected)",
                       evidence=ev)
    return Verdict(Status.OK, f"{len(ns)} NVMe namespace(s) of {want} expected", evidence=ev)


def eval_load(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    if data.get("error"):
        return Verdict(Status.SKIP, data["error"])
    load, cpus = data["load"], data.get("cpus")
    per_cpu = bool(ctx.policy.get("per_cpu"))
    limits = [ctx.policy.get(k) for k in ("max_1m", "max_5m", "max_15m")]
    findings = []
    for label, v, lim in zip(("1m", "5m", "15m"), load, limits, strict=True):
        if lim is None:
            continue
        if per_cpu:
            if not cpus:
                return Verdict(Status.SKIP, "online CPUs unknown: per_cpu limits cannot be applied", evidence=data)
            lim = lim * cpus
        if v >= lim:  # NHC check_ps_loadavg: at or above the limit fails
            findings.append(f"load {label} {v:g}>={lim:g}")
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, data)
    said = "" if any(x is not None for x in limits) else " (no limits: hooks.checks.load)"
    return Verdict(Status.OK, f"load {load[0]:g} {load[1]:g} {load[2]:g}{said}", evidence=data)


def exempt_uids(policy: Any) -> frozenset[int]:
    """The uids of ``unauth_procs.exempt_users`` (names through the passwd database; unknown names exempt nothing)."""
    import pwd

    out: set[int] = set()
    for u in policy.get("exempt_users") or ():
        if u.isdigit():
            out.add(int(u))
            continue
        try:
            out.add(pwd.getpwnam(u).pw_uid)
        except KeyError:
            continue
    return frozenset(out)


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def eval_unauth_procs(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """A process of an ordinary user with no job on this node (no process of that uid runs in a job that still runs
    here) is unauthorised, as NHC's check_ps_unauth_users judges a user without a job. Whose job a process is in
    comes from the kernel (job cgroup, a real slurmstepd above it), never from its name or environment."""
    if data.get("error"):
        return Verdict(Status.WARN, f"/proc unreadable: {data['error']}", ["unauth_procs unreadable"])
    procs = data.get("procs") or []
    allowed = {p["uid"] for p in procs if p.get("running")}
    bad = [p for p in procs if p["uid"] not in allowed]
    ev: dict[str, Any] = {"jobs": data.get("jobs"), "users_with_jobs": sorted(allowed), "scanned": data.get("scanned"),
                          "min_uid": ctx.policy.get("min_uid")}
    if not bad:
        return Verdict(Status.OK, f"{len(procs)} process(es) of {len(allowed)} user(s) with jobs here; none without",
                       evidence=ev)
    by_uid: dict[int, list[dict[str, Any]]] = {}
    for p in bad:
        by_uid.setdefault(p["uid"], []).append(p)
    ev["unauthorised"] = [{k: p.get(k) for k in ("pid", "uid", "comm", "job")} for p in bad[:20]]
    findings = []
    for uid, ps in sorted(by_uid.items()):
        first = min(ps, key=lambda p: p["pid"])
        more = f" +{len(ps) - 1}" if len(ps) > 1 else ""
        findings.append(f"user {_user(uid)} pid {first['pid']}{more} without a job")
    return Verdict(Status.FAIL, "; ".join(findings), findings, ev)


_FILE_TEST_WORDS = {"exists": "missing", "file": "not a file", "dir": "not a directory", "symlink": "not a symlink",
                    "socket": "not a socket", "pipe": "not a pipe", "block": "not a block device",
                    "char": "not a char device", "nonempty": "empty", "readable": "not readable",
                    "writable": "not writable", "executable": "not executable", "setuid": "not setuid",
                    "setgid": "not setgid", "sticky": "not sticky", "owned": "not ours", "group_owned": "not our group"}


def eval_files(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    """The site's file tests (NHC check_file_test): every operator must hold; ``not``: the test fails when every one
    holds (NHC's ``-!``). ``match``: the file's head must match; ``no_match``: it must not."""
    tests = data.get("tests") or []
    if not tests:
        return Verdict(Status.SKIP, "no file tests (hooks.checks.files.tests)")
    findings = []
    for t in tests:
        path, failed = t["path"], t["failed"]
        if t["not"]:
            if not failed:
                findings.append(f"file {path} is {'+'.join(t['test'])}")
            continue
        if failed:
            findings.append(f"file {path} {'missing' if not t.get('exists') else _FILE_TEST_WORDS[failed[0]]}")
            continue
        if t.get("read_error") and ("matched" not in t and "no_match_found" not in t):
            findings.append(f"file {path} unreadable ({t['read_error']})")
        elif t.get("matched") is False:
            findings.append(f"file {path} lacks the expected line")
        elif t.get("no_match_found"):
            findings.append(f"file {path} has a forbidden line")
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, data)
    return Verdict(Status.OK, f"{len(tests)} file test(s) pass", evidence=data)


def eval_commands(data: dict[str, Any], ctx: EvalContext) -> Verdict:
    if data.get("untrusted"):
        # not the node's fault: a WARN naming why, so the site fixes the file's owner or mode (never a drain)
        return Verdict(Status.WARN, f"site commands not run: {data['untrusted']} (they run only from a policy "
                                    "file no one but root can change)", ["commands untrusted policy"], data)
    cmds = data.get("commands") or []
    if not cmds:
        return Verdict(Status.SKIP, "no site commands (hooks.checks.commands.run)")
    findings = [c["finding"] for c in cmds if c.get("finding")]
    if findings:
        return Verdict(Status.FAIL, "; ".join(findings), findings, data)
    return Verdict(Status.OK, f"{len(cmds)} site command(s) pass: " + ", ".join(c["name"] for c in cmds),
                   evidence=data)


@dataclass(frozen=True)
class Check:
    name: str
    source: str  # "nvml:<probe>" | "nvml:init" | "host" | "xid"
    evaluate: Callable[[Any, EvalContext], Verdict]


CHECKS: dict[str, Check] = {c.name: c for c in (
    Check("nvml", "nvml:init", eval_nvml),
    Check("gpu_count", "nvml:init", eval_gpu_count),
    Check("driver", "nvml:init", eval_driver),
    Check("ecc", "nvml:ecc", eval_ecc),
    Check("remapped_rows", "nvml:remapped_rows", eval_remapped_rows),
    Check("retired_pages", "nvml:retired_pages", eval_retired_pages),
    Check("recovery_action", "nvml:recovery_action", eval_recovery_action),
    Check("xid", "xid", eval_xid),
    Check("clocks", "nvml:clocks", eval_clocks),
    Check("temperature", "nvml:temperature", eval_temperature),
    Check("persistence", "nvml:persistence", eval_persistence),
    Check("nvlink", "nvml:nvlink", eval_nvlink),
    Check("nvlink_errors", "nvml:nvlink_errors", eval_nvlink_errors),
    Check("pcie", "nvml:pcie", eval_pcie),
    Check("fabric", "nvml:fabric", eval_fabric),
    Check("inforom", "nvml:inforom", eval_inforom),
    Check("power", "nvml:power", eval_power),
    Check("mig", "nvml:mig", eval_mig),
    Check("gpu_procs", "nvml:gpu_procs", eval_gpu_procs),
    Check("ib", "host", eval_ib),
    Check("cpu_governor", "host", eval_cpu_governor),
    Check("memory", "host", eval_memory),
    Check("disk_space", "host", eval_disk_space),
    Check("slurmd_oom", "host", eval_slurmd_oom),
    Check("filesystems", "host", eval_filesystems),
    Check("edac", "host", eval_edac),
    Check("mce", "host:xid", eval_mce),
    Check("daemons", "host:procs", eval_daemons),
    Check("hardware", "host", eval_hardware),
    Check("dstate", "host:procs", eval_dstate),
    Check("firmware", "nvml:firmware", eval_firmware),
    Check("topology", "host", eval_topology),
    Check("bmc", "host", eval_bmc),
    Check("inodes", "host", eval_inodes),
    Check("swap", "host", eval_swap),
    Check("interfaces", "host", eval_interfaces),
    Check("dmi", "host", eval_dmi),
    Check("nvme", "host", eval_nvme),
    Check("load", "host", eval_load),
    Check("unauth_procs", "host", eval_unauth_procs),
    Check("files", "host", eval_files),
    Check("commands", "host", eval_commands),
)}
