"""The hooks' Prometheus textfile (node_exporter's textfile collector), from a finished run's Report.

Every hook writes its verdicts, durations and timestamps (label ``hook``). Only the health check writes the per-GPU
raw values, the node's GPU counts and what Slurm did with the node: it runs on an interval over every GPU and reads
the node from slurmctld, so its series are current; a prolog's or epilog's would be one job's GPUs, stale until the
next job, and an admin's `slurmkit check --textfile-dir` stale until the next check. One writer per series per node:
the same series in two files is a duplicate node_exporter will not serve (or serves the stale one).
XID events are consumed by whichever hook reads the kernel log first: each run adds its new events to a per-node
counts file (``xid-counts.json``), and the health textfile exposes those counts as a counter per code.
"""

from __future__ import annotations

import json
import os
from typing import Any

from slurmkit.monitor.metrics import Exposition, M

_STATES = ("ok", "warn", "fail", "skip")
_HOOK_SLURM_REASONS = ("Prolog error", "Epilog error")  # Slurm's own drain after a failed hook (claimed by us)


def _num(v: Any) -> float | int | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return v if isinstance(v, str) else ""


def gpu_labels(node: str, dev: dict[str, Any]) -> dict[str, object]:
    """The GPU's stable identity (metrics.GPU_LABELS): the drain reason's ``nvidia<minor>@<bus>``, never the index."""
    from slurmkit.health.gpuid import label

    minor = dev.get("minor")
    return {"node": node, "gpu": label(dev),
            "minor": str(minor) if isinstance(minor, int) and not isinstance(minor, bool) else "",
            "uuid": _text(dev.get("uuid")), "pci_bus_id": _text(dev.get("pci_bus_id")),
            "serial": _text(dev.get("serial")), "model": _text(dev.get("name"))}


def drained_by_us(slurm: dict[str, Any], reason_set: str = "") -> tuple[int, str] | None:
    """(1, reason) while slurmkit's drain stands after this health run, (0, "") when it does not, None when the run
    did not read the node (first run of a slurmd, scontrol failed, another run held the lock)."""
    before = slurm.get("before")
    if not isinstance(before, dict):
        return None
    done = str(slurm.get("done", "")).split("+")
    if "drain" in done:
        return 1, reason_set or str(before.get("reason") or "")
    if "resume" in done:
        return 0, ""
    state = str(before.get("state", "")).upper()
    flags = {str(f).upper() for f in before.get("flags", [])}
    reason = str(before.get("reason") or "")
    drained = "DRAIN" in flags or state in ("DRAIN", "DRAINED", "DRAINING")
    if drained and (reason.startswith("slurmkit:") or slurm.get("claimed")):
        return 1, reason
    return 0, ""


def render(report: Any, xid_counts: dict[str, int] | None = None, expected_gpus: int | None = None) -> str:
    """``report``: slurmkit.health.output.Report. ``xid_counts``: {"<gpu>/<code>": n} for this node (health only)."""
    from slurmkit import __version__

    node, hook = report.node, report.hook
    base = {"node": node, "hook": hook}
    ex = Exposition()
    for r in report.results:
        for s in _STATES:
            ex.add(M.check_status, {**base, "check": r.name, "state": s}, int(r.status.label.lower() == s))
    for r in report.results:
        ex.add(M.check_duration, {**base, "check": r.name}, float(r.duration_s))
    ex.add(M.action, base, int(report.action))
    ex.add(M.run_duration, base, float(report.duration_s))
    ex.add(M.last_run, base, round(float(report.started), 3))
    if report.nvml_init_s is not None:
        ex.add(M.nvml_init, base, float(report.nvml_init_s))
    ex.add(M.bookkeeping, base, len(report.bookkeeping))
    ex.add(M.exit_code, base, report.exit_code)
    if hook != "health":  # one writer per series per node: `check --textfile-dir` into node_exporter's directory
        return ex.text()  # wrote the per-GPU series too, and its stale file hid the health check's (issue 35)
    nvml = getattr(report, "nvml", None) or {}
    init: dict[str, Any] = nvml["init"] if isinstance(nvml.get("init"), dict) else {}
    ex.add(M.info, {"node": node, "version": __version__, "driver": _text(init.get("driver_version"))}, 1)
    devices = [d for d in init.get("devices", []) if isinstance(d, dict)]
    if devices or isinstance(init.get("count"), int):
        lost = [d for d in devices if d.get("lost") or d.get("error")]
        ex.add(M.gpus_present, {"node": node}, len(devices) - len(lost))
    # a lost GPU (NVML lists it, GpuIsLost answers) and an expected board NVML no longer lists, under the identity
    # they had (the gpu_count check's evidence, filled from the node's baseline: gpuid.recall, gpuid.missing)
    count = next((r for r in report.results if r.name == "gpu_count"), None)
    if count is not None and isinstance(count.evidence.get("lost"), list):
        gone = [g for k in ("lost", "missing") for g in count.evidence.get(k) or [] if isinstance(g, dict)]
    else:
        gone = [d for d in devices if d.get("lost") or d.get("error")]
    for g in gone:
        ex.add(M.gpu_lost, gpu_labels(node, g), 1)
    if expected_gpus is not None:
        ex.add(M.gpus_expected, {"node": node}, expected_gpus)
    drained = drained_by_us(report.slurm, report.reason)
    if drained is not None:
        ex.add(M.drained, {"node": node}, drained[0])
        if drained[0]:
            failing = [r.name for r in report.results if int(r.action) >= 2]
            ex.add(M.drain_info, {"node": node, "check": failing[0] if failing else "", "reason": drained[1]}, 1)
    _gpu_series(ex, node, devices, nvml.get("data") or {})
    for key, n in sorted((xid_counts or {}).items()):
        gpu, _, code = key.partition("/")
        ex.add(M.xid_errors, {"node": node, "gpu": gpu, "xid": code}, n)
    xid = next((r for r in report.results if r.name == "xid"), None)
    if xid is not None:
        by_bus = _names_by_bus(devices)
        for s in xid.evidence.get("sticky", []) or []:
            if not _foreign(s, xid.evidence):
                ex.add(M.xid_sticky, {"node": node, "gpu": xid_target(s, by_bus), "xid": str(s.get("xid"))}, 1)
    return ex.text()


def _bus(bus_id: str) -> str:
    from slurmkit.health.xid import norm_bus_id

    return norm_bus_id(bus_id)


def _names_by_bus(devices: list[dict[str, Any]]) -> dict[str, str]:
    from slurmkit.health.gpuid import label

    return {_bus(str(d.get("pci_bus_id", ""))): label(d) for d in devices}


def _foreign(event: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """An XID on a bus id none of the node's GPUs has (the xid check's WARN): no GPU's series, no XID alert."""
    return event.get("kind", "xid") == "xid" and event.get("bus_id") in (evidence.get("foreign_bus") or ())


def xid_target(event: dict[str, Any], by_bus: dict[str, str]) -> str:
    bus = str(event.get("bus_id", ""))
    if event.get("kind") == "sxid":
        return f"nvswitch{bus}"
    return by_bus.get(bus, f"pci{bus}")


def _gpu_series(ex: Exposition, node: str, devices: list[dict[str, Any]], data: dict[str, Any]) -> None:
    """One family at a time (the exposition format wants a family's samples together)."""
    per: list[tuple[dict[str, object], dict[str, Any]]] = []
    for dev in devices:
        if dev.get("lost") or dev.get("error"):
            continue
        raw: dict[str, Any] = {}
        for probe in data.values():
            if isinstance(probe, dict) and isinstance(probe.get(str(dev.get("index"))), dict):
                raw.update(probe[str(dev.get("index"))])
        per.append((gpu_labels(node, dev), raw))
    for lbl, _raw in per:
        ex.add(M.gpu_info, lbl, 1)
    for lbl, raw in per:
        if (t := _num(raw.get("temperature_c"))) is not None:
            ex.add(M.temperature, lbl, t)
    for metric, pos in ((M.power_limit, 0), (M.power_default, 1)):
        for lbl, raw in per:
            pl = raw.get("power_limit_mw")
            if isinstance(pl, list) and len(pl) > pos and (w := _num(pl[pos])) is not None:
                ex.add(metric, lbl, w / 1000.0)
    for lbl, raw in per:
        mode = raw.get("ecc_mode")
        if isinstance(mode, list) and mode and _num(mode[0]) is not None:
            ex.add(M.ecc_mode, lbl, int(mode[0] == 1))
    for lbl, raw in per:
        for counter in ("volatile", "aggregate"):
            if (v := _num(raw.get(f"ecc_{counter}_uncorrected"))) is not None:
                ex.add(M.ecc_errors, {**lbl, "type": "uncorrected", "location": "all", "counter": counter}, v)
        for where in ("sram", "dram"):
            counts = raw.get(f"ecc_{where}")
            if not isinstance(counts, dict):
                continue
            for kind, typ in (("unc", "uncorrected"), ("cor", "corrected")):
                for counter in ("volatile", "aggregate"):
                    if (v := _num(counts.get(f"{kind}_{counter}"))) is not None:
                        ex.add(M.ecc_errors, {**lbl, "type": typ, "location": where, "counter": counter}, v)
    rows = [(lbl, raw["remapped_rows"]) for lbl, raw in per
            if isinstance(raw.get("remapped_rows"), list) and len(raw["remapped_rows"]) == 4]
    for lbl, (corr, unc, _p, _f) in rows:
        ex.add(M.remapped_rows, {**lbl, "cause": "correctable"}, int(corr))
        ex.add(M.remapped_rows, {**lbl, "cause": "uncorrectable"}, int(unc))
    for lbl, (_c, _u, pending, _f) in rows:
        ex.add(M.remap_pending, lbl, int(bool(pending)))
    for lbl, (_c, _u, _p, failure) in rows:
        ex.add(M.remap_failure, lbl, int(bool(failure)))
    for metric, key in ((M.retired_pending, "retired_pages_pending"), (M.persistence, "persistence_mode"),
                        (M.clock_reasons, "clocks_event_reasons"), (M.recovery, "recovery_action")):
        for lbl, raw in per:
            if (v := _num(raw.get(key))) is not None:
                ex.add(metric, lbl, int(v))
    for lbl, raw in per:
        errs = raw.get("nvlink_errors")
        if isinstance(errs, dict) and "error" not in errs:
            for kind, v in errs.items():
                if _num(v) is not None:
                    ex.add(M.nvlink_errors, {**lbl, "kind": kind}, v)
    for lbl, raw in per:
        links = raw.get("nvlink_state")
        if isinstance(links, list):
            up = sum(1 for s in links if s == 1)
            ex.add(M.nvlink_links, {**lbl, "state": "up"}, up)
            ex.add(M.nvlink_links, {**lbl, "state": "down"}, len(links) - up)
    for lbl, raw in per:
        w = raw.get("pcie_width")
        if isinstance(w, list) and len(w) == 2:
            for which, v in zip(("current", "max"), w, strict=True):
                if _num(v) is not None:
                    ex.add(M.pcie_width, {**lbl, "which": which}, v)
    for lbl, raw in per:
        g = raw.get("pcie_gen")
        if isinstance(g, list):
            for which, v in zip(("current", "max", "gpu_max"), g, strict=False):
                if _num(v) is not None:
                    ex.add(M.pcie_gen, {**lbl, "which": which}, v)
    for lbl, raw in per:
        if (v := _num(raw.get("pcie_replay"))) is not None:
            ex.add(M.pcie_replays, lbl, v)
    for lbl, raw in per:
        f = raw.get("fabric")
        if isinstance(f, dict) and _num(f.get("state")) is not None:
            ex.add(M.fabric_state, {**lbl, "fabric_ok": str(int(f.get("status") == "Success"))}, f["state"])


def xid_labels_of_run(report: Any) -> list[str]:
    """``"<gpu>/<code>"`` for each new XID event this run read (every hook consumes the shared cursor)."""
    xid = next((r for r in report.results if r.name == "xid"), None)
    if xid is None:
        return []
    nvml = getattr(report, "nvml", None) or {}
    init: dict[str, Any] = nvml["init"] if isinstance(nvml.get("init"), dict) else {}
    by_bus = _names_by_bus([d for d in init.get("devices", []) if isinstance(d, dict)])
    return [f"{xid_target(e, by_bus)}/{e.get('xid')}" for e in xid.evidence.get("new", []) or []
            if isinstance(e, dict) and not _foreign(e, xid.evidence)]


def update_xid_counts(path: str, new: list[str], lock_timeout: float = 0.5) -> dict[str, int]:
    """Add this run's events to the node's counts file (under its lock) and return the counts. A counter only
    grows; the file lives in the node's state dir, so it survives reboots as a Prometheus counter may not need to
    (a reset is fine for increase())."""
    from slurmkit.health import state

    if not new:
        return state.read_json(path, {})
    with state.locked(path + ".lock", timeout=lock_timeout):
        counts = {k: int(v) for k, v in state.read_json(path, {}).items() if isinstance(v, int)}
        for k in new:
            counts[k] = counts.get(k, 0) + 1
        state.atomic_write(path, json.dumps(counts, sort_keys=True), durable=False)
    return counts


def counts_path(ndir: str) -> str:
    return os.path.join(ndir, "xid-counts.json")
