"""Drain / resume decisions: pure functions of (node state, what the checks ask, our pass counter).

The rules (NHC's node-mark-offline/online, fixed where NHC surprised people):
- Only a reason that starts with ``slurmkit:`` is ours. A foreign reason is never overwritten and never resumed.
- DOWN, not responding, rebooting, powering, future nodes are left alone: Slurm (or an admin) owns them.
- Resume only after ``resume_after`` consecutive passing runs while drained by us (flap damping); any failure
  resets the counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from slurmkit.health.result import REASON_PREFIX, Action

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
    reason: str  # the reason to set (drain) or the one we resume from
    passes: int  # the counter to persist
    why: str  # one line for the record


def ours(reason: str) -> bool:
    return reason.startswith(REASON_PREFIX)


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
        return Decision(Verb.RESUME, node.reason, 0, f"{passes} consecutive passes: resume")
    return Decision(Verb.NONE, node.reason, passes, f"pass {passes}/{resume_after} before resume")
