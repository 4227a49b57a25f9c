"""Drain / resume decisions: pure functions of (node state, what the checks ask, our pass counter).

The rules (NHC's node-mark-offline/online, fixed where NHC surprised people):
- Only a reason that starts with ``slurmkit:`` is ours. A foreign reason on a draining/drained node is never
  overwritten and never resumed.
- A reason on a node that is neither draining nor drained (nor DOWN/FAIL, which are hands-off) is stale: it outlived
  the drain it explained. Slurm frees a node's reason on resume only in ``clusteracct_storage_g_node_up``, and only
  when the node is IDLE (slurm-22-05-8-1 and slurm-24-11-5-1 src/slurmctld/node_mgr.c update_node, NODE_RESUME); at
  slurm-24-11-5-1 src/interfaces/accounting_storage.c returns on PLUGIN_NOOP *before* freeing it, so a cluster
  without AccountingStorageType keeps every resumed node's reason. Deferring to such a reason would leave the
  health check blind on that node for good, so a failure drains over it (the record keeps what it replaced).
- DOWN, not responding, rebooting, powering, future nodes are left alone: Slurm (or an admin) owns them.
- Resume only after ``resume_after`` consecutive passing runs while drained by us (flap damping); any failure
  resets the counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from slurmkit.health.result import MAX_REASON_LEN, REASON_PREFIX, Action

if TYPE_CHECKING:
    from slurmkit.health.slurmctl import NodeState

# Flags/states during which Slurm (or an admin) is in charge of the node's life cycle.
HANDS_OFF_STATES = frozenset({"down", "future", "unknown"})
HANDS_OFF_FLAGS = frozenset({"NOT_RESPONDING", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERING_UP", "POWERING_DOWN",
                             "POWERED_DOWN", "POWER_DOWN", "INVALID_REG", "MAINTENANCE", "FAIL"})


class Verb(Enum):
    NONE = "none"
    DRAIN = "drain"
    DRAIN_REBOOT = "drain+reboot"
    UPDATE_REASON = "update-reason"  # drained by us for something else: keep the reason current
    RESUME = "resume"


@dataclass(frozen=True)
class Decision:
    verb: Verb
    reason: str  # the reason to set: the drain's, or on resume the note that replaces ours (resume_reason)
    passes: int  # the counter to persist
    why: str  # one line for the record


def ours(reason: str) -> bool:
    return reason.startswith(REASON_PREFIX)


def resume_reason(old: str, passes: int) -> str:
    """The reason a resume call sets. Slurm frees it right after setting it where it frees reasons on resume at all
    (update_node sets the reason before NODE_RESUME calls clusteracct_storage_g_node_up, node_mgr.c at
    slurm-22-05-8-1 and slurm-24-11-5-1); where it does not (24.11 without accounting storage, a resumed node that
    still runs a job) this replaces the fault reason, so nothing (placement, an admin reading ``sinfo -R``) takes
    the node for faulty. Without the ``slurmkit:`` prefix on purpose: it is no drain of ours."""
    was = old[len(REASON_PREFIX):].strip() if ours(old) else old
    text = f"resumed by slurmkit after {passes} passing health checks (was: {was})"
    return text if len(text) <= MAX_REASON_LEN else text[:MAX_REASON_LEN - 4] + "...)"


def hands_off(node: NodeState) -> str | None:
    if node.base in HANDS_OFF_STATES:
        return f"node is {node.base}"
    bad = sorted(node.flags & HANDS_OFF_FLAGS)
    return f"node is {'+'.join(bad).lower()}" if bad else None


def decide_fail(node: NodeState, action: Action, reason: str, claimed: bool = False) -> Decision:
    """A run that asks for a drain (prolog, epilog or health). ``claimed``: the node's foreign-looking reason is
    Slurm's drain after our own failed hook (``hooks.slurm_drain_was_ours``), so it is treated as ours."""
    off = hands_off(node)
    if off:
        return Decision(Verb.NONE, reason, 0, f"{off}: left alone")
    verb = Verb.DRAIN_REBOOT if action >= Action.DRAIN_REBOOT else Verb.DRAIN
    if claimed and node.drained:
        return Decision(Verb.UPDATE_REASON if verb == Verb.DRAIN else verb, reason, 0,
                        f"Slurm's {node.reason!r} followed our failed hook; reason updated")
    if node.reason and not ours(node.reason) and not node.drained:
        return Decision(verb, reason, 0, f"drain (stale reason on a node that is not drained replaced: "
                                         f"{node.reason!r})")
    if node.reason and not ours(node.reason):
        # An admin's (or Slurm's) reason stays. If they already drained the node nothing is lost; if they did not,
        # the prolog's non-zero exit still makes Slurm drain it (its _drain_node keeps the existing reason).
        return Decision(Verb.NONE, reason, 0, f"foreign reason kept: {node.reason!r}")
    if node.drained and ours(node.reason):
        if node.reason == reason and verb == Verb.DRAIN:
            return Decision(Verb.NONE, reason, 0, "already drained by us for this")
        return Decision(Verb.UPDATE_REASON if verb == Verb.DRAIN else verb, reason, 0, "drained by us; reason updated")
    return Decision(verb, reason, 0, "drain")


def decide_health(node: NodeState, action: Action, reason: str, passes: int, resume_after: int,
                  claimed: bool = False) -> Decision:
    """HealthCheckProgram: drain on failure, resume our own drains after ``resume_after`` passes in a row."""
    if action >= Action.DRAIN:
        return decide_fail(node, action, reason, claimed)
    off = hands_off(node)
    if off:
        return Decision(Verb.NONE, "", 0, f"{off}: left alone")
    if not (node.drained and (ours(node.reason) or claimed)):
        return Decision(Verb.NONE, "", 0, "healthy" if not node.drained else f"drained by someone else: {node.reason!r}")
    passes += 1
    if passes >= resume_after:
        return Decision(Verb.RESUME, resume_reason(node.reason, passes), 0, f"{passes} consecutive passes: resume")
    return Decision(Verb.NONE, node.reason, passes, f"pass {passes}/{resume_after} before resume")
