"""The ``tenants:`` section of the inventory: QOS, the account tree, users and their limits (frozen dataclasses).

Parsed by ``model/load_tenants.py``; turned into slurmdbd records by ``slurmkit/accounts/`` (``sacctmgr``) and into
slurm.conf settings by ``generate/slurmconf.py``. A GPU count here is the TRES ``gres/gpu`` (``gres/gpu:<type>``
for a per-type quota), which is what ``GrpTRES``/``MaxTRESPerUser`` take (sacctmgr(1), every release 22.05-25.11).
"""

from __future__ import annotations

from dataclasses import dataclass

# sacctmgr(1) PreemptMode on a QOS (22.05 and 24.11): "cluster" (the slurm.conf PreemptMode), cancel, requeue,
# suspend (gang only, not per QOS), off. slurmkit writes what the cluster's preempt/qos can honour per QOS.
QOS_PREEMPT_MODES = ("cluster", "cancel", "requeue", "off")
# sacctmgr(1) QOS "Flags" (22.05 and 24.11 share these; 24.11 adds Relative, 23.02 added UsageFactorSafe)
QOS_FLAGS = (
    "DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS", "PartitionMaxNodes",
    "PartitionMinNodes", "PartitionTimeLimit", "RequiresReservation", "UsageFactorSafe",
)


@dataclass(frozen=True)
class GpuQuota:
    """A GPU count as TRES: ``total`` is gres/gpu, ``by_type`` gres/gpu:<type> (both optional)."""

    total: int | None = None
    by_type: tuple[tuple[str, int], ...] = ()

    @property
    def empty(self) -> bool:
        return self.total is None and not self.by_type

    def tres(self) -> dict[str, str]:
        out = {}
        if self.total is not None:
            out["gres/gpu"] = str(self.total)
        for t, n in self.by_type:
            out[f"gres/gpu:{t}"] = str(n)
        return out

    @property
    def untyped_escapes(self) -> bool:
        """True when an untyped request (``--gres=gpu:N``) could take more of a type than its typed count allows:
        Slurm charges such a request to gres/gpu only, never to gres/gpu:<type> (resource_limits.shtml "Specific
        limits over GRES", 22.05 and 24.11), so only a total no larger than the typed count holds it."""
        return any(self.total is None or self.total > n for _t, n in self.by_type)

    @property
    def typed(self) -> bool:
        return bool(self.by_type)

    def describe(self) -> str:
        parts = [f"{self.total} GPUs"] if self.total is not None else []
        parts += [f"{n} {t}" for t, n in self.by_type]
        return ", ".join(parts)


@dataclass(frozen=True)
class QOS:
    name: str
    priority: int = 0
    preempt: tuple[str, ...] = ()
    preempt_mode: str = "cluster"
    preempt_exempt_time: str | None = None  # Slurm time; None = unset
    max_wall: str | None = None
    gpus: GpuQuota = GpuQuota()  # GrpTRES: all jobs in this QOS together
    gpus_per_user: GpuQuota = GpuQuota()  # MaxTRESPerUser
    max_jobs_per_user: int | None = None  # MaxJobsPerUser
    usage_factor: float = 1.0
    flags: tuple[str, ...] = ()
    grace_time: int = 0  # seconds a preempted job of this QOS keeps running after its signal (sacctmgr GraceTime)


@dataclass(frozen=True)
class Account:
    name: str
    parent: str  # "root" for a top-level account (slurmdbd's root account)
    # slurmdbd's raw Fairshare of the association: competes with its siblings (accounts and user associations under
    # the same parent). A parent account without one in the inventory gets the sum of its children's, so that leaf
    # shares read as shares of the cluster (50/30/20 across depths); ``fairshare_from_children`` says it was summed
    fairshare: int = 1
    gpus: GpuQuota = GpuQuota()  # GrpTRES on the account's association: the tenant's GPU quota
    max_jobs: int | None = None  # GrpJobs
    qos: tuple[str, ...] = ()  # empty: not managed (inherits what slurmdbd gives)
    default_qos: str | None = None
    description: str = ""
    fairshare_from_children: bool = False


@dataclass(frozen=True)
class User:
    name: str
    default_account: str
    accounts: tuple[str, ...]


@dataclass(frozen=True)
class UserLimits:
    """Applied to every user association (one per user and account): GrpTRES gres/gpu and MaxJobs. Per association,
    not per user: slurmctld counts each association's jobs apart, so a user in two accounts may hold the limit in
    each (``conf validate`` warns, naming them); Slurm's per-user limit across accounts is a QOS's MaxTRESPerUser."""

    gpus: GpuQuota = GpuQuota()
    max_jobs: int | None = None


@dataclass(frozen=True)
class PartitionQOS:
    partition: str
    allow_qos: tuple[str, ...]


@dataclass(frozen=True)
class Tenants:
    qos: tuple[QOS, ...] = ()
    accounts: tuple[Account, ...] = ()  # parents before children
    users: tuple[User, ...] = ()
    user_limits: UserLimits = UserLimits()
    partitions: tuple[PartitionQOS, ...] = ()
    preempt_exempt_time: str = "00:05:00"  # slurm.conf PreemptExemptTime: a job runs this long before preemption
    decay_half_life: str = "7-0"  # slurm.conf PriorityDecayHalfLife: how long past usage counts in fair-share

    def quotas(self) -> list[GpuQuota]:
        """Every GPU quota the tenants set (QOS GrpTRES and MaxTRESPerUser, accounts, user associations)."""
        return ([q.gpus for q in self.qos] + [q.gpus_per_user for q in self.qos] + [a.gpus for a in self.accounts]
                + [self.user_limits.gpus])

    @property
    def typed_quotas(self) -> bool:
        """Some quota is per GPU type: the generated job_submit.lua then adds the type to untyped GPU requests."""
        return any(q.typed for q in self.quotas())

    def qos_named(self, name: str) -> QOS | None:
        return next((q for q in self.qos if q.name == name), None)

    def account(self, name: str) -> Account | None:
        return next((a for a in self.accounts if a.name == name), None)

    def user(self, name: str) -> User | None:
        return next((u for u in self.users if u.name == name), None)

    def allow_qos(self, partition: str) -> tuple[str, ...]:
        return next((p.allow_qos for p in self.partitions if p.partition == partition), ())

    @property
    def preempts(self) -> bool:
        """True when some QOS may preempt another (what PreemptType=preempt/qos acts on)."""
        return any(q.preempt for q in self.qos)

    def account_qos(self, name: str) -> tuple[tuple[str, ...], str | None]:
        """The QOS list and default QOS in force for ``name``: its own, else the nearest ancestor's that sets one
        (slurmdbd copies the parent's QOS to a new association)."""
        a = self.account(name)
        while a is not None:
            if a.qos:
                return a.qos, a.default_qos
            a = self.account(a.parent)
        return (), None
