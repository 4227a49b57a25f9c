"""Slurm node records -> placement :class:`NodeState` (pure; duck-typed so it never imports the backend).

Slurm reports a node as a base state plus flags (``IDLE+DRAIN``, ``MIXED*``, ``ALLOCATED+COMPLETING``...).
The placement engine knows six states. The mapping, first match wins:

===========================================================  ============  ====================================
Slurm                                                        engine        why
===========================================================  ============  ====================================
base down/unknown/future/fail/failing/error/inval, or flag   ``down``      not schedulable (or not known to
NOT_RESPONDING (``*``), FAIL, INVALID_REG, MAINTENANCE,                    work): never placed on
REBOOT_REQUESTED/ISSUED, POWERING_DOWN, POWER_DOWN, or an
unrecognised base state
DRAIN flag on an idle node                                   ``drained``   takes no new work, nothing running
DRAIN flag on an allocated/mixed/completing node             ``draining``  takes no new work, still busy
base completing, flag COMPLETING, POWERING_UP, PLANNED       ``allocated`` busy now (epilog still running, node
                                                                           booting for a job, or held by the
                                                                           backfill scheduler for a pending job)
base idle / mixed / allocated                                same          -
===========================================================  ============  ====================================

sinfo's suffixes (``idle*``, ``mix-``, ``alloc#``) and short names (``drng``, ``mix``, ``unk``) are read too, so
records from ``sinfo`` or a base state that kept its suffix (``down*``) map the same way.

``POWERED_DOWN`` alone (cloud ``idle~``) stays idle: Slurm allocates such a node and resumes it, so it is
capacity a job can have now (after a boot). Free GPUs are Slurm's ``Gres`` minus ``GresUsed`` on idle and
mixed nodes and 0 on every other state: an allocated node's GPUs are not free to anyone even when the job on
it asked for none (an ``--exclusive`` job without ``--gres`` shows ``GresUsed=gpu:h100:0``).

``healthy`` is slurmkit's own verdict: a draining, drained or down node whose Slurm reason carries the ``slurmkit:``
prefix (the health hooks' drains, see ``slurmkit.health``) is unhealthy. On a node that is none of these the reason is
stale: Slurm keeps a resumed node's reason where it has no accounting storage (slurm-24-11-5-1
src/interfaces/accounting_storage.c clusteracct_storage_g_node_up) or the node still ran a job (node_mgr.c
update_node frees it only for an IDLE node), see ``slurmkit.health.decide``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from slurmkit import hostlist
from slurmkit.errors import UsageError
from slurmkit.placement.engine import NodeState

# Slurm's base states that can never take new work
_DOWN_BASES = frozenset({"down", "unknown", "future", "failing", "error", "inval", "invalid", "no_respond"})
# flags that make any node unschedulable for new work (they win over DRAIN: a down node is "down", not "drained")
_DOWN_FLAGS = frozenset({
    "NOT_RESPONDING", "FAIL", "INVALID_REG", "INVALID", "MAINTENANCE", "MAINT",
    "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERING_DOWN", "POWER_DOWN",
})
# flags meaning "busy now" on an otherwise idle node
_BUSY_FLAGS = frozenset({"COMPLETING", "POWERING_UP", "PLANNED"})
_BUSY_BASES = frozenset({"allocated", "completing", "mixed"})
# sinfo's state suffixes, in case a record still carries one on its base state (``down*`` from ``DOWN*+DRAIN``)
_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN", "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED", "!": "POWER_DOWN", "-": "PLANNED",
}
# sinfo's short and compound base names -> (base, extra flag)
_SHORT = {
    "mix": ("mixed", None), "alloc": ("allocated", None), "comp": ("completing", None), "unk": ("unknown", None),
    "drain": ("idle", "DRAIN"), "drained": ("idle", "DRAIN"), "drng": ("allocated", "DRAIN"),
    "draining": ("allocated", "DRAIN"), "maint": ("idle", "MAINTENANCE"), "resv": ("idle", None),
    "reserved": ("idle", None), "fail": ("down", "FAIL"), "failg": ("allocated", "FAIL"),
}
HEALTH_REASON_PREFIX = "slurmkit:"


class NodeRecordLike(Protocol):
    """What ``slurmkit.backend.parse.NodeInfo`` provides (``reason`` is optional)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def flags(self) -> frozenset[str]: ...
    @property
    def free_gpus(self) -> int: ...
    @property
    def total_gpus(self) -> int: ...


def engine_state(state: str, flags: Iterable[str] = ()) -> str:
    """A Slurm base state + flags -> one of the engine's :data:`~slurmkit.placement.STATES` (table above)."""
    base = state.strip().lower()
    f = {x.upper() for x in flags}
    while base and base[-1] in _SUFFIX_FLAGS:
        f.add(_SUFFIX_FLAGS[base[-1]])
        base = base[:-1]
    if base in _SHORT:
        base, extra = _SHORT[base]
        if extra:
            f.add(extra)
    if base in _DOWN_BASES or f & _DOWN_FLAGS:
        return "down"
    if base not in ("idle", *_BUSY_BASES):
        return "down"  # a state this code does not know: never place work on it
    if "DRAIN" in f:
        return "drained" if base == "idle" and not f & _BUSY_FLAGS else "draining"
    if base == "completing" or f & _BUSY_FLAGS:
        return "allocated"
    return base


def node_state(rec: NodeRecordLike) -> NodeState:
    """One node record -> :class:`NodeState` (see the module docstring for the mapping)."""
    state = engine_state(rec.state, rec.flags)
    total = max(0, int(rec.total_gpus))
    free = min(max(0, int(rec.free_gpus)), total) if state in ("idle", "mixed") else 0
    reason = str(getattr(rec, "reason", "") or "")
    return NodeState(
        name=rec.name,
        state=state,
        free_gpus=free,
        total_gpus=total,
        healthy=not (reason.startswith(HEALTH_REASON_PREFIX) and state in ("draining", "drained", "down")),
    )


def node_states(records: Iterable[NodeRecordLike]) -> dict[str, NodeState]:
    """Records -> ``{name: NodeState}`` in input order (what :func:`~slurmkit.placement.place` takes)."""
    return {s.name: s for s in map(node_state, records)}


def partition_nodes(partitions: Iterable[Mapping[str, str]], name: str) -> list[str]:
    """The nodes of partition ``name`` from ``scontrol -o show partition`` records (``Nodes=`` expanded).

    Raises :class:`UsageError` naming the known partitions when ``name`` is not one of them, and when the
    partition has no nodes.
    """
    records = list(partitions)
    for rec in records:
        if rec.get("PartitionName") == name:
            expr = rec.get("Nodes", "")
            if not expr or expr == "(null)":
                raise UsageError(f"partition {name!r} has no nodes")
            return hostlist.expand(expr, f"partition {name} Nodes=")
    known = ", ".join(sorted(r.get("PartitionName", "?") for r in records)) or "none"
    raise UsageError(f"partition {name!r} does not exist (partitions: {known})")
