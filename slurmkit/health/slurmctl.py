"""The few Slurm calls hooks make, each through ``backend.run.run`` with a tight timeout (a hook must never hang).

Kept apart from the full CLIBackend on purpose: hooks need four verbs, must import little, and must work with no
PATH and no SLURM_CONF in their environment (HealthCheckProgram gets only SLURMD_NODENAME).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from slurmkit.backend.records import parse_oneline, split_state, strip_reason_stamp

# (argv, timeout=...) -> backend.run.Result; tests pass a fake. Imported lazily: subprocess is not free and most
# hook runs make no Slurm call at all.
Runner = Callable[..., Any]


def _runner(runner: Runner | None) -> Runner:
    if runner is not None:
        return runner
    from slurmkit.backend.run import run

    return run

# Where slurmd-run hooks find Slurm's clients when PATH is missing (Debian/RHEL packages, /usr/local builds, OpenHPC).
HOOK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/slurm/bin"

@dataclass(frozen=True)
class NodeState:
    name: str
    base: str  # idle, allocated, mixed, down, ...
    flags: frozenset[str]
    reason: str  # without scontrol's " [user@time]" stamp

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags


def parse_node(text: str) -> NodeState:
    """``scontrol -o show node X``: the fields a hook needs (State=, Reason=). Values may contain spaces."""
    line = next((ln for ln in text.splitlines() if ln.startswith("NodeName=")), "")
    if not line:
        raise ValueError(f"no NodeName= record in scontrol output: {text.strip()[:80]!r}")
    fields = parse_oneline(line)
    base, flags = split_state(fields.get("State", "UNKNOWN"))
    reason = fields.get("Reason", "")
    if reason in ("(null)", "None"):
        reason = ""
    reason = strip_reason_stamp(reason)
    return NodeState(name=fields.get("NodeName", ""), base=base, flags=flags, reason=reason)


def show_node(node: str, timeout: float, runner: Runner | None = None) -> NodeState:
    r = _runner(runner)(["scontrol", "-o", "show", "node", node], timeout=timeout)
    return parse_node(r.stdout)


def drain(node: str, reason: str, timeout: float, runner: Runner | None = None) -> None:
    _runner(runner)(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"], timeout=timeout)


def resume(node: str, timeout: float, runner: Runner | None = None, reason: str = "") -> None:
    """``reason`` replaces the drain's reason where Slurm keeps it after the resume (see decide.resume_reason);
    scontrol accepts Reason= with any state (slurm-24-11-5-1 src/scontrol/update_node.c requires one only for
    DOWN/DRAIN/FAIL)."""
    argv = ["scontrol", "update", f"nodename={node}", "state=resume"]
    if reason:
        argv.append(f"reason={reason}")
    _runner(runner)(argv, timeout=timeout)


def request_reboot(node: str, reason: str, timeout: float, runner: Runner | None = None) -> None:
    # ASAP: drain now, reboot once idle; nextstate=resume hands the node back to the health check's verdict.
    _runner(runner)(["scontrol", "reboot", "ASAP", "nextstate=resume", f"reason={reason}", node], timeout=timeout)


def other_jobs_of_user(node: str, user: str, exclude_job: str | None, timeout: float,
                       runner: Runner | None = None) -> list[str]:
    r = _runner(runner)(["squeue", "-h", "-w", node, "-u", user, "-o", "%A"], timeout=timeout)
    return [j for j in (ln.strip() for ln in r.stdout.splitlines()) if j and j != exclude_job]


def argv_of(calls: Sequence[Sequence[str]]) -> list[str]:
    """For records: the scontrol calls a run made, as one string each."""
    return [" ".join(c) for c in calls]
