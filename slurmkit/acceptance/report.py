"""The report: the JSON document, the table, the picture (matplotlib, the ``plot`` extra)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from slurmkit.acceptance.plan import Finding


def document(doc: dict[str, Any], findings: list[Finding]) -> dict[str, Any]:
    """The report as printed by ``--json``: measurements as a list, outliers = confirmed findings."""
    out = {k: v for k, v in doc.items() if k not in ("measurements", "pending")}
    out["measurements"] = list(doc.get("measurements", {}).values())
    out["outliers"] = [asdict(f) for f in findings if f.confirmed]
    out["suspects"] = [asdict(f) for f in findings if not f.confirmed]
    return out


def table(doc: dict[str, Any]) -> str:
    rows = [("LEVEL", "STEP", "NODES", "LEAF", "RANKS", "BUSBW GB/s", "EXPECTED", "VERDICT", "JOB")]
    for m in doc["measurements"]:
        nodes = ",".join(m["nodes"])
        if m.get("hca"):
            nodes = f"{nodes} {m['hca']}"
        rows.append((m["level"], m["step"], nodes if len(nodes) <= 40 else nodes[:37] + "...",
                     ",".join(sorted({x for x in m["leaves"] if x})) or "-", str(m["ranks"]),
                     f"{m['busbw']:.4g}" if m["busbw"] is not None else "-",
                     f"{m['expected']:.4g}" if m.get("expected") else "-", m.get("verdict", ""), m.get("job_id", "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append("")
    rule = doc.get("rule") or {}
    for j in doc.get("judged", []):
        # every verdict of the rule explained, a passing one too: the threshold and how close the lowest value came
        low = (f"; lowest {j['lowest']} {j['lowest_busbw']:.3g} ({j['margin']:.2f}x the threshold)"
               if j.get("lowest") and j.get("margin") is not None else "")
        lines.append(f"rule, {j['level']} level, {j['over']} (n={j['n']}): median {j['median']:.3g} GB/s, log-MAD "
                     f"{j['log_mad']:.2g}, slow below {j['threshold']:.3g} = min(median/e^({rule.get('k', 3):g} x "
                     f"log-MAD), {1 - rule.get('tol', 0.25):.0%} of median){low}")
    for lv in doc.get("measured_by", []):
        lines.append(f"measured by, {lv['level']} level: {lv['tool']}")
    if doc.get("expected_note"):
        lines.append(f"expected: none ({doc['expected_note']})")
    if doc["outliers"]:
        for o in doc["outliers"]:
            where = f" (switch {o['switch']})" if o.get("switch") else ""
            port = f" port {o['port']}" if o.get("port") else ""  # the hca level names the port, not only the node
            lines.append(f"OUTLIER {o['kind']} {','.join(o['nodes'])}{port}{where}: {o['detail']}")
    else:
        lines.append("no outlier")
    for s in doc["suspects"]:
        port = f" port {s['port']}" if s.get("port") else ""
        lines.append(f"not confirmed: {','.join(s['nodes'])}{port}: {s['detail']}")
    for e in (m for m in doc["measurements"] if m.get("error")):
        lines.append(f"error: {e['key']}: {e['error']}")
    lines.append(f"{doc.get('jobs', 0)} job(s), {doc.get('wall_s', 0):.0f}s; report: {doc.get('report', '')}")
    return "\n".join(lines)


def bar_labels(ms: list[dict[str, Any]]) -> list[str]:
    """One distinct label per bar: matplotlib stacks bars of equal labels on one spot (a node's confirm and reconfirm
    re-measurements would hide each other), so a re-measurement is labelled with its step."""
    return [",".join(m["nodes"]) + ("" if m["step"] == "measure" else f" ({m['step']})") for m in ms]


def picture(doc: dict[str, Any], path: Path) -> str | None:
    """Node x node heatmap of the pair measurements and per-leaf bars; None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ms = [m for m in doc["measurements"] if m["busbw"] is not None]
    nodes = list(doc.get("nodes") or sorted({n for m in ms for n in m["nodes"]}))
    idx = {n: i for i, n in enumerate(nodes)}
    pairs = [m for m in ms if len(m["nodes"]) == 2 and m["level"] != "hca"]  # ib_write_bw is Gb/s of one rail
    leaves = [m for m in ms if m["level"] == "leaf" and m["step"] == "measure"]
    singles = [m for m in ms if len(m["nodes"]) == 1]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    ax = axes[0]
    grid = [[float("nan")] * len(nodes) for _ in nodes]
    for m in pairs:
        a, b = (idx.get(x) for x in m["nodes"])
        if a is not None and b is not None:
            grid[a][b] = grid[b][a] = m["busbw"]
    im = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(len(nodes)), nodes, rotation=90, fontsize=7)
    ax.set_yticks(range(len(nodes)), nodes, fontsize=7)
    ax.set_title("pairs: bus bandwidth (GB/s)")
    fig.colorbar(im, ax=ax)
    ax = axes[1]
    ax.bar([m["key"].split(":")[-1] if m["step"] == "measure" else m["key"] for m in leaves] or ["-"],
           [m["busbw"] for m in leaves] or [0], color=["tab:red" if m.get("verdict") == "slow" else "tab:blue"
                                                       for m in leaves] or ["grey"])
    ax.set_title("leaves: bus bandwidth (GB/s)")
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    ax = axes[2]
    ax.bar(bar_labels(singles) or ["-"], [m["busbw"] for m in singles] or [0],
           color=["tab:red" if m.get("verdict") == "slow" else "tab:blue" for m in singles] or ["grey"])
    ax.set_title("nodes: intra-node bus bandwidth (GB/s)")
    ax.tick_params(axis="x", labelrotation=90, labelsize=7)
    names = ", ".join(",".join(o["nodes"]) for o in doc["outliers"]) or "none"
    fig.suptitle(f"slurmkit acceptance: outliers {names}")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    tmp.replace(path)
    return str(path)
