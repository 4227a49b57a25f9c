"""The fleet's firmware: which driver, VBIOS and InfoROM versions the nodes run, and the odd nodes out.

Input: the nodes' latest health records (``<state-dir>/<node>/last-health.json``, the ``firmware`` check's evidence),
which the lab and sites with a shared state dir have side by side, and others collect (pdsh, a config-management
fact). Pure: ``firmware_report(records, expected)``; the CLI is ``slurmkit report firmware``.

The expected set is the inventory's ``hooks.checks.firmware`` where given, else the majority: the version most nodes
run (per field; a tie is reported as such and names no odd node, since no side is the fleet's).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

FIELDS = ("driver", "vbios", "inforom")


def node_versions(record: dict[str, Any]) -> dict[str, list[str]] | None:
    """One record -> {field: sorted distinct versions}; None when it has no firmware evidence."""
    fw = next((c for c in record.get("checks", []) if c.get("check") == "firmware"), None)
    ev = (fw or {}).get("evidence") or {}
    if not ev:
        return None
    out = {"driver": [ev["driver"]] if isinstance(ev.get("driver"), str) else []}
    for f in ("vbios", "inforom"):
        out[f] = sorted({g[f] for g in (ev.get("gpus") or {}).values() if isinstance(g, dict) and g.get(f)})
    return out


def load_records(state_dir: str) -> dict[str, dict[str, Any]]:
    """node -> its newest health (else check) record under ``state_dir``."""
    out: dict[str, dict[str, Any]] = {}
    try:
        nodes = sorted(os.listdir(state_dir))
    except OSError:
        return out
    for node in nodes:
        for name in ("last-health.json", "last-check.json"):
            try:
                with open(os.path.join(state_dir, node, name)) as f:
                    rec = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict):
                out[node] = rec
                break
    return out


def firmware_report(records: dict[str, dict[str, Any]],
                    expected: dict[str, tuple[str, ...] | None] | None = None) -> dict[str, Any]:
    """{"nodes": {node: versions}, "fields": {field: {"counts": {version: n}, "expected": [...], "source": ...}},
    "odd": {node: [why, ...]}, "unknown": [nodes without firmware evidence]}."""
    nodes: dict[str, dict[str, list[str]]] = {}
    unknown: list[str] = []
    for node, rec in sorted(records.items()):
        v = node_versions(rec)
        if v is None:
            unknown.append(node)
        else:
            nodes[node] = v
    fields: dict[str, Any] = {}
    odd: dict[str, list[str]] = {}
    for f in FIELDS:
        counts = Counter(x for v in nodes.values() for x in set(v[f]))
        want = (expected or {}).get(f)
        source = "inventory (hooks.checks.firmware)"
        if not want:
            top = counts.most_common(2)
            tie = len(top) == 2 and top[0][1] == top[1][1]
            want = (top[0][0],) if top and not tie else None
            source = "majority" if want else ("tie: no majority" if top else "no data")
        fields[f] = {"counts": dict(sorted(counts.items())), "expected": list(want or ()), "source": source}
        if not want:
            continue
        for node, v in nodes.items():
            other = [x for x in v[f] if x not in want]
            if other:
                odd.setdefault(node, []).append(f"{f} {'/'.join(other)} (fleet: {'/'.join(want)})")
    return {"nodes": nodes, "fields": fields, "odd": odd, "unknown": unknown}


def format_report(rep: dict[str, Any]) -> str:
    lines = [f"{'FIELD':<8} {'VERSION':<24} {'NODES':>5}  EXPECTED"]
    for f, d in rep["fields"].items():
        for ver, n in d["counts"].items():
            mark = "yes" if ver in d["expected"] else ("-" if not d["expected"] else "no")
            lines.append(f"{f:<8} {ver:<24} {n:>5}  {mark}")
        if not d["counts"]:
            lines.append(f"{f:<8} {'(no data)':<24} {0:>5}  -")
        elif not d["expected"]:
            lines.append(f"{f:<8} ({d['source']})")
    if rep["odd"]:
        lines.append("odd nodes out:")
        lines += [f"  {node}: {'; '.join(why)}" for node, why in sorted(rep["odd"].items())]
    else:
        lines.append(f"odd nodes out: none ({len(rep['nodes'])} node(s) with firmware records)")
    if rep["unknown"]:
        lines.append(f"no firmware record: {', '.join(rep['unknown'])}")
    return "\n".join(lines)
