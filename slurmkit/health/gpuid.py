"""Which GPU is it: names that survive a lost GPU and identify the part for an RMA.

NVML's device index is an enumeration order: when a GPU falls off the bus the ones after it move down one (index 4
becomes 3), so "gpu3" in a reason may be a different board than gpu3 in the last record, and not the /dev/nvidia3 a
job was given. Reasons and records therefore name a GPU by its /dev/nvidiaN minor (what gres.conf File= and the job
see, stable while the GPU is gone) and its PCI bus id (the slot: what a technician pulls), e.g. ``nvidia4@3a:00.0``;
the record's ``gpus`` table adds UUID and serial (what the RMA form asks for).

A missing GPU (NVML counts 7 of 8) is found against the expected bus ids: ``hooks.checks.gpu_count.bus_ids`` in the
inventory, else the node's baseline, the GPUs of the first run that saw the expected count with every GPU usable
(``<state dir>/<node>/gpus.json``, rewritten when a healthy run sees other boards: a replaced GPU).

Checks keep speaking NVML indexes (``gpu3 ...``, pure and simple to test); ``relabel`` rewrites the tokens of one run's
results once, in the runner, from that run's own device list.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

_TOKEN = re.compile(r"\bgpu(\d+)\b")
_PCI_TOKEN = re.compile(r"\bpci([0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2})\b")  # an XID whose bus NVML no longer lists


_BUS = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])")


def short_bus(bus: Any) -> str | None:
    """``00000000:3A:00.0`` -> ``3a:00.0`` (domain kept when not 0: ``0001:3a:00.0``); None if not a bus id."""
    m = _BUS.fullmatch(bus.strip().lower()) if isinstance(bus, str) else None
    if m is None:
        return None
    dom, rest = m.groups()
    return rest if not dom or int(dom, 16) == 0 else f"{int(dom, 16):04x}:{rest}"


def norm_bus(bus: Any) -> str | None:
    """A bus id comparable across NVML (``00000000:3A:00.0``), sysfs (``0000:3a:00.0``) and the inventory."""
    s = short_bus(bus)
    if s is None:
        return None
    return s if s.count(":") == 2 else f"0000:{s}"


def label(dev: dict[str, Any]) -> str:
    """``nvidia<minor>@<bus>``; what is unreadable falls back (``gpu<index>`` without a minor)."""
    minor = dev.get("minor")
    name = f"nvidia{minor}" if isinstance(minor, int) and not isinstance(minor, bool) else f"gpu{dev.get('index')}"
    bus = short_bus(dev.get("pci_bus_id"))
    return f"{name}@{bus}" if bus else name


def labels(init: dict[str, Any]) -> dict[str, str]:
    """NVML index (as the checks key it) -> label, for this run's devices."""
    return {str(d["index"]): label(d) for d in init.get("devices", []) if isinstance(d, dict) and "index" in d}


def relabel(text: str, names: dict[str, str], expected: list[dict[str, Any]] | None = None) -> str:
    """``gpu<index>`` -> this run's label; ``pci<bus>`` (a GPU NVML lost) -> the expected GPU on that bus."""
    if names:
        text = _TOKEN.sub(lambda m: names.get(m.group(1), m.group(0)), text)
    if expected and "pci" in text:
        def by_bus(m: re.Match[str]) -> str:
            want = norm_bus(m.group(1) + ".0")
            hit = next((g for g in expected if want and (norm_bus(g.get("pci_bus_id")) or "")[:-2] == want[:-2]), None)
            return label(hit) if hit else m.group(0)
        text = _PCI_TOKEN.sub(by_bus, text)
    return text


def identity(dev: dict[str, Any]) -> dict[str, Any]:
    """The record's row for one GPU: what to put on an RMA form."""
    out = {"index": dev.get("index"), "label": label(dev)}
    for k in ("minor", "pci_bus_id", "uuid", "serial", "name"):
        v = dev.get(k)
        out[k] = v if not isinstance(v, dict) else None
    if dev.get("lost") or dev.get("error"):
        out["lost"] = True
    return out


def table(init: dict[str, Any]) -> list[dict[str, Any]]:
    return [identity(d) for d in init.get("devices", []) if isinstance(d, dict)]


def recall(lost: list[dict[str, Any]], init: dict[str, Any],
           expected: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The identity rows of lost GPUs (NVML lists them, but GpuIsLost answers every call: no minor, bus id, UUID or
    serial), filled from the expected boards no usable GPU claims: paired in PCI bus order with the lost devices in
    NVML index order (NVML enumerates by bus id), and only when the counts agree (otherwise which is which is a
    guess). A lost GPU so keeps the name and labels it had while it worked."""
    def index(d: dict[str, Any]) -> int:
        i = d.get("index")
        return i if isinstance(i, int) else -1

    rows = [identity(d) for d in sorted(lost, key=index)]
    lost_ids = {id(d) for d in lost}
    seen = {norm_bus(d.get("pci_bus_id")) for d in init.get("devices", [])
            if isinstance(d, dict) and id(d) not in lost_ids}
    free = sorted((g for g in expected or () if isinstance(g, dict) and norm_bus(g.get("pci_bus_id")) not in seen),
                  key=lambda g: norm_bus(g.get("pci_bus_id")) or "")
    if len(free) != len(rows):
        return rows
    for row, g in zip(rows, free, strict=True):
        if row.get("pci_bus_id") not in (None, "") and norm_bus(row["pci_bus_id"]) != norm_bus(g.get("pci_bus_id")):
            continue  # NVML still read this one's bus id, and it is another board's
        for k in ("minor", "pci_bus_id", "uuid", "serial"):
            if row.get(k) in (None, "") and g.get(k) is not None:
                row[k] = g[k]
        row["label"] = label(row)
    return rows


def baseline_path(ndir: str) -> str:
    return os.path.join(ndir, "gpus.json")


def load_baseline(ndir: str | None) -> list[dict[str, Any]] | None:
    if not ndir:
        return None
    try:
        with open(baseline_path(ndir)) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    gpus = d.get("gpus") if isinstance(d, dict) else None
    return gpus if isinstance(gpus, list) and all(isinstance(g, dict) for g in gpus) else None


def baseline_of(init: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: g[k] for k in ("minor", "pci_bus_id", "uuid", "serial")} for g in table(init)]


def missing(expected: list[dict[str, Any]], init: dict[str, Any]) -> list[dict[str, Any]]:
    """The expected GPUs whose bus id NVML no longer lists at all (a lost GPU NVML still lists is not missing: the
    gpu_count check reports it as lost)."""
    seen = {norm_bus(d.get("pci_bus_id")) for d in init.get("devices", []) if isinstance(d, dict)}
    seen.discard(None)
    return [g for g in expected if norm_bus(g.get("pci_bus_id")) not in seen]
