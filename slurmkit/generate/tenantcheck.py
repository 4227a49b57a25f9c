"""`conf validate` cross-checks between the inventory's ``tenants:`` and a slurm.conf (pure).

The slurm.conf may be the generated one or one on disk that a site edited: what matters is whether Slurm will
enforce what the tenants say (quotas, QOS priorities, preemption) and whether every QOS it names exists.
"""

from __future__ import annotations

from slurmkit.generate import confparse as cp
from slurmkit.model.cluster import Cluster


def cross_check(cluster: Cluster, slurm_conf: str) -> tuple[list[str], list[str]]:
    """-> (errors, warnings)."""
    conf = cp.parse_slurm_conf(slurm_conf)
    errors: list[str] = []
    warnings: list[str] = []
    t = cluster.tenants
    ptype = conf.value("PreemptType", "preempt/none").lower()
    qos_names = {q.name for q in t.qos} if t else set()
    preempts = t.preempts if t else False
    if t is None:
        return errors, warnings
    if ptype == "preempt/qos" and not preempts:
        # slurm.conf(5) PreemptType=preempt/qos (22.05 and 24.11): preemption follows each QOS's Preempt list; with no
        # list anywhere nothing is ever preempted
        warnings.append("slurm.conf: PreemptType=preempt/qos but no QOS in tenants.qos preempts another "
                        "(set 'preempt: [...]' on a QOS, or drop preemption)")
    for rec in conf.partitions:
        name = rec.head
        for key in ("QOS", "AllowQos", "DenyQos"):
            v = next((v for k, v in rec.pairs if k.lower() == key.lower()), "")
            for q in [x for x in v.split(",") if x and x.upper() != "ALL"]:
                if q not in qos_names:
                    errors.append(f"slurm.conf:{rec.lineno}: partition {name} {key}={v}: QOS {q!r} is not in "
                                  "tenants.qos (slurmdbd will not have it)")
    storage = conf.value("AccountingStorageType", "accounting_storage/none")
    if storage != "accounting_storage/slurmdbd":
        errors.append(f"slurm.conf: AccountingStorageType={storage}: tenants need slurmdbd")
    enforce = {x.strip().lower() for x in conf.value("AccountingStorageEnforce").split(",") if x.strip()}
    # slurm.conf(5) AccountingStorageEnforce: 'limits' (implies associations) enforces GrpTRES and the other limits,
    # 'qos' requires a valid QOS; 'safe' implies limits; 'all' implies everything (22.05 and 24.11)
    if "all" not in enforce:
        if not enforce & {"limits", "safe"}:
            errors.append("slurm.conf: AccountingStorageEnforce lacks 'limits': the tenants' GPU quotas and user "
                          f"limits would not be enforced (want {_want()})")
        if "qos" not in enforce:
            errors.append(f"slurm.conf: AccountingStorageEnforce lacks 'qos': any QOS could be asked for (want {_want()})")
    if preempts and ptype != "preempt/qos":
        errors.append(f"slurm.conf: PreemptType={ptype}: the preempt lists in tenants.qos need preempt/qos")
    if preempts and conf.value("PreemptMode", "OFF").upper() in ("OFF", ""):
        errors.append("slurm.conf: PreemptMode=OFF: tenants.qos preempt lists would never act (want REQUEUE)")
    prios = {q.priority for q in t.qos}
    if len(prios) > 1:
        if conf.value("PriorityType", "priority/basic") != "priority/multifactor":
            warnings.append("slurm.conf: QOS priorities differ but PriorityType is not priority/multifactor "
                            "(they would not order jobs)")
        elif conf.value("PriorityWeightQOS", "0") in ("0", ""):
            warnings.append("slurm.conf: QOS priorities differ but PriorityWeightQOS is 0 (they would not order jobs)")
    return errors, warnings


def _want() -> str:
    from slurmkit.generate.slurmconf import TENANT_ENFORCE

    return TENANT_ENFORCE
