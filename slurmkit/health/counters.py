"""Error counters judged as deltas since the last run: NVLink CRC/replay/recovery, PCIe replays, IB link flaps.

These counters only ever grow (until a driver reload or a reboot resets them), so their absolute value says little
about today; what matters is how much they grew since slurmkit last looked. The last snapshot lives in
``<state-dir>/<node>/counters.json``, keyed by GPU UUID (gres renumbering cannot mix two GPUs up) and by HCA port,
with the boot id: after a reboot, or when a counter went down (reset), there is no baseline and the run records one.

Pure except ``apply``'s one locked read-modify-write of the snapshot file. A read-only run (``slurmkit check``)
computes deltas against the snapshot and writes nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from slurmkit.health import state as st

SNAPSHOT = "counters.json"


def _delta(cur: Any, prev: Any) -> int | None:
    if isinstance(cur, bool) or isinstance(prev, bool) or not isinstance(cur, int) or not isinstance(prev, int):
        return None
    return cur - prev if cur >= prev else None  # went down: reset (driver reload), no baseline


def _deltas(cur: dict[str, Any], prev: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in cur.items():
        d = _delta(v, prev.get(k))
        if d is not None:
            out[k] = d
    return out


def collect(data: dict[str, dict[str, Any]], devices: list[dict[str, Any]],
            ib: dict[str, Any] | None) -> dict[str, Any]:
    """The counters of this run, keyed for the snapshot: ``{"gpu": {uuid: {...}}, "ib": {"mlx5_0/1": {...}}}``."""
    uuid_of = {str(d.get("index")): d.get("uuid") for d in devices if isinstance(d.get("uuid"), str)}
    gpus: dict[str, dict[str, Any]] = {}
    for idx, dev in (data.get("nvlink_errors") or {}).items():
        v, uuid = dev.get("nvlink_errors"), uuid_of.get(idx)
        if uuid and isinstance(v, dict) and "error" not in v:
            gpus.setdefault(uuid, {})["nvlink"] = {k: x for k, x in v.items() if isinstance(x, int)}
    for idx, dev in (data.get("pcie") or {}).items():
        v, uuid = dev.get("pcie_replay"), uuid_of.get(idx)
        if uuid and isinstance(v, int) and not isinstance(v, bool):
            gpus.setdefault(uuid, {})["pcie_replay"] = v
    ports: dict[str, dict[str, int]] = {}
    for name, dev_ports in ((ib or {}).get("devices") or {}).items():
        for port, p in dev_ports.items():
            c = p.get("counters")
            if isinstance(c, dict) and c:
                ports[f"{name}/{port}"] = {k: v for k, v in c.items() if isinstance(v, int)}
    return {"gpu": gpus, "ib": ports}


def _since(p: dict[str, Any], now: float) -> float | None:
    at = p.get("at")
    return round(now - at, 3) if isinstance(at, (int, float)) and not isinstance(at, bool) else None


def nvlink_above(delta: dict[str, int], elapsed_s: float | None, max_delta: int, max_crc_per_s: float) -> bool:
    """One GPU's NVLink counters grew too fast since the last run: CRC (flit + data) errors per second above
    ``max_crc_per_s``, or replay/recovery errors above ``max_delta``."""
    crc = delta.get("crc_flit", 0) + delta.get("crc_data", 0)
    if elapsed_s and elapsed_s > 0 and crc / elapsed_s > max_crc_per_s:
        return True
    return any(delta.get(k, 0) > max_delta for k in ("replay", "recovery"))


def attach(data: dict[str, dict[str, Any]], devices: list[dict[str, Any]], ib: dict[str, Any] | None,
           cur: dict[str, Any], prev: dict[str, Any], now: float,
           nvlink_limits: tuple[int, float] | None = None) -> None:
    """Put the deltas next to the values the checks read: ``nvlink_errors_delta``, ``pcie_replay_delta``,
    ``counters_delta`` (IB ports), each with the seconds they span (``elapsed_s``); absent = no baseline yet."""
    idx_of = {d.get("uuid"): str(d.get("index")) for d in devices if isinstance(d.get("uuid"), str)}
    pg = prev.get("gpu") or {}
    for uuid, c in cur["gpu"].items():
        idx, p = idx_of.get(uuid), pg.get(uuid)
        if idx is None or not isinstance(p, dict):
            continue
        elapsed_s = _since(p, now)
        if "nvlink" in c and isinstance(p.get("nvlink"), dict) and idx in (data.get("nvlink_errors") or {}):
            delta = _deltas(c["nvlink"], p["nvlink"])
            data["nvlink_errors"][idx]["nvlink_errors_delta"] = delta
            data["nvlink_errors"][idx]["elapsed_s"] = elapsed_s
            streak = p.get("nvlink_streak", 0) if isinstance(p.get("nvlink_streak"), int) else 0
            if nvlink_limits is not None:  # a health run: one interval more above the rate, or the streak ends
                streak = streak + 1 if nvlink_above(delta, elapsed_s, *nvlink_limits) else 0
            c["nvlink_streak"] = streak  # a prolog's run keeps the health check's count
            data["nvlink_errors"][idx]["nvlink_streak"] = streak
        if "pcie_replay" in c and idx in (data.get("pcie") or {}):
            d = _delta(c["pcie_replay"], p.get("pcie_replay"))
            if d is not None:
                data["pcie"][idx]["pcie_replay_delta"] = d
                data["pcie"][idx]["elapsed_s"] = elapsed_s
    pi = prev.get("ib") or {}
    for key, c in cur["ib"].items():
        name, _, port = key.partition("/")
        p = pi.get(key)
        if isinstance(p, dict) and ib is not None:
            ib["devices"][name][port]["counters_delta"] = _deltas(c, p)
            ib["devices"][name][port]["elapsed_s"] = _since(p, now)


def apply(node_state_dir: str | None, boot_id: str, now: float, data: dict[str, dict[str, Any]],
          devices: list[dict[str, Any]], ib: dict[str, Any] | None, commit: bool, lock_timeout: float,
          nvlink_limits: tuple[int, float] | None = None) -> str | None:
    """Attach deltas since the saved snapshot and (``commit``) save this run's counters. Returns a bookkeeping
    error (the snapshot could not be saved) or None. Without a state dir there is no baseline: nothing attached.
    ``nvlink_limits`` (max replay/recovery delta, max CRC errors per second), given by health runs only: count the
    consecutive runs a GPU's NVLink counters grew above them (``nvlink_streak``, kept in the snapshot)."""
    cur = collect(data, devices, ib)
    if node_state_dir is None or not (cur["gpu"] or cur["ib"]):
        return None
    for entries in (cur["gpu"], cur["ib"]):
        for e in entries.values():
            e["at"] = round(now, 3)  # per entry: a prolog sees only its job's GPUs, the others keep their time
    path = os.path.join(node_state_dir, SNAPSHOT)
    if not commit:
        # read-only (`slurmkit check`): no lock taken or created; the snapshot is replaced atomically, so a plain
        # read sees a whole old or new one
        prev = st.read_json(path, {})
        if prev.get("boot_id") == boot_id:
            attach(data, devices, ib, cur, prev, now, nvlink_limits)
        return None
    with st.locked_or_unwritable(path + ".lock", timeout=lock_timeout) as lock_error:
        prev = st.read_json(path, {})
        same_boot = prev.get("boot_id") == boot_id  # counters restart with the driver: no baseline across a reboot
        if same_boot:
            attach(data, devices, ib, cur, prev, now, nvlink_limits)
        if lock_error:
            return f"counter snapshot not saved: {lock_error}"
        merged = {"boot_id": boot_id,
                  "gpu": {**(prev.get("gpu") or {}), **cur["gpu"]} if same_boot else cur["gpu"],
                  "ib": {**(prev.get("ib") or {}), **cur["ib"]} if same_boot else cur["ib"]}
        try:
            st.atomic_write(path, json.dumps(merged, sort_keys=True), durable=False)
        except OSError as exc:
            return f"counter snapshot not saved: {st.write_error(path, exc)}"
    return None
