"""Render a :class:`~slurmkit.placement.Fragmentation`: a text table and a picture of the switch tree.

Pure except :func:`write_png`, which writes one file (atomically: a temp file in the target directory, then
rename, so a failure leaves nothing half-written). matplotlib is an optional extra and is imported only by
:func:`write_png`; :func:`require_matplotlib` lets an edge fail before doing any work.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurmkit.errors import UsageError
from slurmkit.placement.engine import NodeState
from slurmkit.placement.fragmentation import Fragmentation
from slurmkit.placement.topology import PlacementTopology

PLOT_HINT = "pip install 'slurmkit[plot]'"

# node cell colours by what a job could get there now
_NODE_COLOURS = {
    "free": "#2ca02c",  # idle, healthy, every GPU free
    "partly": "#ffbf00",  # usable with some GPUs free (stranded for exclusive jobs)
    "full": "#d62728",  # usable but no GPU free, or allocated
    "out": "#7f7f7f",  # draining, drained, down or unhealthy: no new work
    "unknown": "#ffffff",  # in the topology, but Slurm did not report it
}


def format_table(frag: Fragmentation, title: str = "") -> str:
    """The summary and a per-leaf table as fixed-width text (ends with a newline)."""
    unit, units = frag.unit, ("leaves" if frag.unit == "leaf" else frag.unit + "s")
    stranded = f"  ({frag.stranded_gpus} stranded on partly busy nodes)" if frag.stranded_gpus else ""
    rows = [
        ("free GPUs", f"{frag.free_gpus} / {frag.gpus}{stranded}"),
        ("free whole nodes", f"{frag.free_nodes} / {frag.nodes}"),
        (f"free whole {units}", f"{frag.free_leaves} / {frag.leaves}"),
        (f"largest job now, one {unit}", _nodes(frag.largest_job_one_leaf)),
        ("largest job now, anywhere", _nodes(frag.largest_job_anywhere)),
        ("largest one-node job now", f"{frag.largest_single_node_gpus} GPUs"),
        ("fragmentation index", f"{frag.index:.2f}  (0 = free nodes in whole {units}, ~1 = scattered)"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [title] if title else []
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    if frag.per_leaf:
        head = (unit, "nodes", "free nodes", "free GPUs", "")
        body = [
            (
                leaf.name,
                str(leaf.nodes),
                str(leaf.free_nodes),
                f"{leaf.free_gpus}/{leaf.total_gpus}",
                "whole" if leaf.whole else ("full" if leaf.free_gpus == 0 else ""),
            )
            for leaf in frag.per_leaf
        ]
        widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
        lines.append("")
        for r in (head, *body):
            cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:4], widths[1:4], strict=True)), r[4]]
            lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _nodes(n: int) -> str:
    return f"{n} node{'' if n == 1 else 's'}"


def require_matplotlib() -> None:
    """Raise :class:`UsageError` (exit 2) naming the extra when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"--png needs matplotlib, which is not installed: {PLOT_HINT}") from exc


def node_category(state: NodeState | None) -> str:
    """Which colour a node cell gets (keys of the legend)."""
    if state is None:
        return "unknown"
    if not state.usable:
        return "out" if state.state != "allocated" else "full"
    if state.whole_free:
        return "free"
    return "partly" if state.free_gpus > 0 else "full"


def tree_layout(topo: PlacementTopology) -> dict[str, Any]:
    """Positions for the picture: leaves on a row at y=0 (x = index), each switch above the mean of its leaves.

    Returns ``{"leaves": [(name, x)], "switches": [(name, level, x)], "edges": [((x0, y0), (x1, y1))]}``;
    a switch's y is its level. Pure, so the geometry is testable without matplotlib.
    """
    leaves = [(name, float(i)) for i, name in enumerate(topo.leaf_names)]
    sw_x = [
        sum(topo.switch_leaves[j]) / len(topo.switch_leaves[j]) if topo.switch_leaves[j] else 0.0
        for j in range(len(topo.switch_names))
    ]
    switches = [(topo.switch_names[j], topo.switch_levels[j], sw_x[j]) for j in range(len(topo.switch_names))]
    edges: list[tuple[tuple[float, float], tuple[float, float]]] = []
    for i, parent in enumerate(topo.leaf_parent):
        if parent >= 0:
            edges.append(((float(i), 0.0), (sw_x[parent], float(topo.switch_levels[parent]))))
    for j, parent in enumerate(topo.switch_parent):
        if parent >= 0:
            edges.append(((sw_x[j], float(topo.switch_levels[j])), (sw_x[parent], float(topo.switch_levels[parent]))))
    return {"leaves": leaves, "switches": switches, "edges": edges}


def write_png(
    path: str | os.PathLike[str],
    topo: PlacementTopology,
    states: Mapping[str, NodeState],
    frag: Fragmentation,
    title: str = "",
) -> Path:
    """Draw the switch tree coloured by free capacity and write it to ``path`` (PNG). Returns the path.

    ``topo`` is the topology ``frag`` was computed on (already restricted to a partition, if any).

    Switches and leaves are boxes whose colour is the share of their nodes that are whole and free (red 0 to
    green 1); under each leaf its nodes are cells coloured by state (legend). Raises :class:`UsageError` when
    matplotlib is missing or the file cannot be written.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    layout = tree_layout(topo)
    cmap = plt.get_cmap("RdYlGn")
    nleaves = len(topo.leaf_names)
    max_nodes = max((len(m) for m in topo.leaf_nodes), default=1)
    cols = min(max_nodes, 8)  # node cells per row under a leaf
    rows = -(-max_nodes // cols)
    top = max(topo.switch_levels, default=0)
    fig_w = min(max(6.0, 1.2 * nleaves + 2), 60.0)
    fig_h = 3.0 + 0.8 * top + 0.25 * rows
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    try:
        for (x0, y0), (x1, y1) in layout["edges"]:
            ax.plot([x0, x1], [y0, y1], color="#555555", linewidth=1, zorder=1)
        # per switch: share of its nodes that are whole and free
        free_by_leaf = {u.name: u for u in frag.per_leaf}
        for name, level, x in layout["switches"]:
            j = topo.switch_names.index(name)
            size = sum(len(topo.leaf_nodes[i]) for i in topo.switch_leaves[j])
            free = sum(free_by_leaf[topo.leaf_names[i]].free_nodes for i in topo.switch_leaves[j]
                       if topo.leaf_names[i] in free_by_leaf)
            _box(ax, x, float(level), f"{name}\n{free}/{size} free", cmap(free / size if size else 0.0))
        cell = 0.8 / cols
        for i, (name, x) in enumerate(layout["leaves"]):
            usage = free_by_leaf.get(name)
            free = usage.free_nodes if usage else 0
            size = len(topo.leaf_nodes[i])
            gpus = f"{usage.free_gpus}/{usage.total_gpus} GPUs" if usage else ""
            _box(ax, x, 0.0, f"{name}\n{free}/{size} free\n{gpus}", cmap(free / size if size else 0.0))
            for k, node in enumerate(topo.leaf_nodes[i]):
                r, c = divmod(k, cols)
                colour = _NODE_COLOURS[node_category(states.get(node))]
                ax.add_patch(Rectangle((x - 0.4 + c * cell, -0.32 - (r + 1) * cell), cell * 0.9, cell * 0.9,
                                       facecolor=colour, edgecolor="#333333", linewidth=0.5, zorder=2))
                if nleaves <= 16 and max_nodes <= 8:
                    ax.text(x - 0.4 + (c + 0.45) * cell, -0.32 - (r + 0.55) * cell, node.removeprefix("node"),
                            ha="center", va="center", fontsize=6, zorder=3)
        ax.set_xlim(-0.8, nleaves - 0.2)
        ax.set_ylim(-0.45 - (rows + 0.5) * cell, top + 0.6)
        ax.axis("off")
        legend = [
            Patch(facecolor=_NODE_COLOURS["free"], label="node free"),
            Patch(facecolor=_NODE_COLOURS["partly"], label="some GPUs free"),
            Patch(facecolor=_NODE_COLOURS["full"], label="busy"),
            Patch(facecolor=_NODE_COLOURS["out"], label="drain/down/unhealthy"),
        ]
        ax.legend(handles=legend, loc="upper left", fontsize=7, frameon=False)
        summary = (
            f"free GPUs {frag.free_gpus}/{frag.gpus} · free nodes {frag.free_nodes}/{frag.nodes} · "
            f"whole {frag.unit if frag.leaves == 1 else ('leaves' if frag.unit == 'leaf' else frag.unit + 's')} "
            f"{frag.free_leaves}/{frag.leaves} · largest job now: {frag.largest_job_one_leaf} in one {frag.unit}, "
            f"{frag.largest_job_anywhere} anywhere · fragmentation {frag.index:.2f}"
        )
        ax.set_title(f"{title}\n{summary}" if title else summary, fontsize=9)
        return _save(fig, Path(path))
    finally:
        plt.close(fig)


def _box(ax: Any, x: float, y: float, text: str, colour: Any) -> None:
    ax.text(x, y, text, ha="center", va="center", fontsize=7, zorder=4,
            bbox={"boxstyle": "round,pad=0.3", "facecolor": colour, "edgecolor": "#333333"})


def _save(fig: Any, path: Path) -> Path:
    target = path.resolve()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise UsageError(f"--png {path}: cannot write there ({exc.strerror})") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format="png", dpi=120, bbox_inches="tight")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
