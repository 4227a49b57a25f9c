"""`slurmkit accounts`'s I/O next to the pure plan: read the live records with ``sacctmgr -P -n show``, apply steps with
``sacctmgr -i``, read back. Every call goes through ``backend.run.run``.

The cluster is the one ``$SLURM_CONF`` points at: its ClusterName names the associations (sacctmgr's ``cluster=``);
accounting must be slurmdbd there, or there is nothing to act on (a one-line refusal, exit 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmkit.accounts.plan import (
    ASSOC_FORMAT,
    JOBS_FORMAT,
    QOS_FORMAT,
    USER_FORMAT,
    Job,
    State,
    Step,
    parse_jobs,
    parse_state,
)
from slurmkit.backend.run import run
from slurmkit.errors import SlurmCommandError, SlurmkitError, UsageError

TIMEOUT = 60.0


@dataclass(frozen=True)
class Target:
    """The live cluster: its name and how to reach sacctmgr (extra environment)."""

    cluster: str
    env: Mapping[str, str] = field(default_factory=dict)
    sacctmgr: str = "sacctmgr"
    squeue: str = "squeue"


def target_from_conf(slurm_conf: str | None, env: Mapping[str, str] | None = None) -> Target:
    """Read ClusterName and AccountingStorageType from the slurm.conf in use; refuse without slurmdbd."""
    from slurmkit.generate.confparse import parse_slurm_conf

    path = Path(slurm_conf or "/etc/slurm/slurm.conf")
    try:
        conf = parse_slurm_conf(path.read_text(), str(path))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read slurm.conf ({exc.strerror}); set SLURM_CONF") from exc
    storage = conf.value("AccountingStorageType", "accounting_storage/none")
    if storage != "accounting_storage/slurmdbd":
        raise UsageError(f"{path}: AccountingStorageType={storage}: no slurmdbd, so no accounts, users or QOS to "
                         "manage (add 'accounting:' to the inventory, or `slurmkit lab up --accounting`)")
    name = conf.value("ClusterName")
    if not name:
        raise UsageError(f"{path}: no ClusterName")
    return Target(name.lower(), dict(env or {}))


def _sacctmgr(t: Target, args: list[str] | tuple[str, ...], timeout: float = TIMEOUT) -> str:
    return run([t.sacctmgr, *args], timeout=timeout, env=t.env).stdout


def read_state(t: Target) -> State:
    q = _sacctmgr(t, ["-P", "-n", "show", "qos", f"format={QOS_FORMAT}"])
    a = _sacctmgr(t, ["-P", "-n", "show", "assoc", "where", f"cluster={t.cluster}", f"format={ASSOC_FORMAT}"])
    u = _sacctmgr(t, ["-P", "-n", "show", "user", f"format={USER_FORMAT}"])
    return parse_state(q, a, u)


def read_jobs(t: Target) -> list[Job]:
    """Every job slurmctld holds that has not ended (one ``squeue`` call; as root or SlurmUser it sees every user's)."""
    return parse_jobs(run([t.squeue, "-h", "--all", "-o", JOBS_FORMAT], timeout=TIMEOUT, env=t.env).stdout)


class HeldBack(SlurmkitError):
    """Deletes that active jobs hold back (everything else was applied and verified)."""

    exit_code = 1


class ApplyError(SlurmkitError):
    """A sacctmgr step failed: ``done`` were applied, ``failed`` was not, ``pending`` were not tried."""

    exit_code = 1

    def __init__(self, done: list[Step], failed: Step, error: SlurmCommandError, pending: list[Step]):
        self.done, self.failed, self.error, self.pending = done, failed, error, pending
        super().__init__(f"sacctmgr {' '.join(failed.args)} failed: {error.one_line()}; {len(done)} step(s) applied, "
                         f"{len(pending) + 1} not; re-run `slurmkit accounts apply` once fixed (it converges)")


def apply_steps(t: Target, steps: list[Step], progress: Callable[[Step], None] = lambda s: None) -> None:
    """Run each step with ``sacctmgr -i`` (commit without asking), in order; stop at the first failure."""
    done: list[Step] = []
    for i, st in enumerate(steps):
        try:
            _sacctmgr(t, ["-i", *st.args])
        except SlurmCommandError as exc:
            raise ApplyError(done, st, exc, steps[i + 1:]) from exc
        done.append(st)
        progress(st)
