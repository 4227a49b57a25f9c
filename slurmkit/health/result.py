"""Check results and the actions they lead to. Pure data, no I/O: imported by every hook on the hot path."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

REASON_PREFIX = "slurmkit:"
# Slurm keeps the whole reason, but `sinfo -R` shows ~20 columns and admins read it in scontrol output;
# keep it to one screen line and point at the JSON record for the rest.
MAX_REASON_LEN = 120


class Status(IntEnum):
    """Ordered by badness so ``max()`` picks the worst; SKIP sorts below OK on purpose (it never acts)."""

    SKIP = -1
    OK = 0
    WARN = 1
    FAIL = 2

    @property
    def label(self) -> str:
        return self.name


class Action(IntEnum):
    """What a failed check asks the hook to do, ordered so the worst wins."""

    NONE = 0
    WARN = 1  # report only; the node keeps taking jobs
    DRAIN = 2  # no new jobs until we (or an admin) resume it
    DRAIN_REBOOT = 3  # drain and ask Slurm to reboot the node when it is idle

    @property
    def label(self) -> str:
        return {0: "none", 1: "warn", 2: "drain", 3: "drain+reboot"}[int(self)]

    @classmethod
    def parse(cls, text: str) -> Action:
        for a in cls:
            if a.label == text:
                return a
        raise ValueError(text)


@dataclass
class CheckResult:
    name: str
    status: Status
    summary: str  # one line for humans
    findings: list[str] = field(default_factory=list)  # short tokens for the drain reason: "gpu3 xid79"
    evidence: dict[str, Any] = field(default_factory=dict)  # raw values behind the verdict, for the JSON record
    action: Action = Action.NONE  # filled from the policy: what this result asks for
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.name,
            "status": self.status.label,
            "summary": self.summary,
            "findings": self.findings,
            "action": self.action.label,
            "duration_s": round(self.duration_s, 6),
            "evidence": self.evidence,
        }


def worst_action(results: list[CheckResult]) -> Action:
    return max((r.action for r in results), default=Action.NONE)


def with_hint(reason: str, hint: str, limit: int = MAX_REASON_LEN) -> str:
    """``reason`` plus ``; hint`` when both fit in ``limit`` (the reason's own tokens always win the space)."""
    text = f"{reason}; {hint}"
    return text if len(text) <= limit else reason


def drain_reason(results: list[CheckResult], limit: int = MAX_REASON_LEN) -> str:
    """``slurmkit: gpu3 xid79; gpu3 lost; gpu_count 7/8`` from the results that ask for at least a drain.

    Worst action first, then registry order; cut at ``limit`` with a ``+N more`` tail so the reason stays readable.
    """
    acting = [r for r in results if r.action >= Action.DRAIN]
    acting.sort(key=lambda r: -int(r.action))  # stable: registry order inside one action level
    tokens: list[str] = []
    for r in acting:
        tokens.extend(r.findings or [f"{r.name} failed"])
    # de-duplicate while keeping order: a lost GPU shows up in several checks
    uniq = list(dict.fromkeys(tokens))
    text = f"{REASON_PREFIX} " + "; ".join(uniq)
    if len(text) <= limit:
        return text
    out = f"{REASON_PREFIX} "
    for i, tok in enumerate(uniq):
        tail = f" +{len(uniq) - i} more"
        candidate = out + ("; " if i else "") + tok
        if len(candidate) + len(f" +{len(uniq) - i - 1} more") > limit:
            return out.rstrip("; ") + tail
        out = candidate
    return out
