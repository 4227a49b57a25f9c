"""`conf validate` cross-checks between the inventory's ``tenants:`` and a slurm.conf (pure).

The slurm.conf may be the generated one or one on disk that a site edited: what matters is whether Slurm will
enforce what the tenants say (quotas, QOS priorities, preemption) and whether every QOS it names exists.
"""

from __future__ import annotations

from slurmkit.generate import confparse as cp
from slurmkit.model.cluster import Cluster
from slurmkit.model.tenants import Tenants


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
        if ptype == "preempt/qos":
            # slurm.conf(5) PreemptType=preempt/qos (22.05 and 24.11): "Job preemption rules are specified by Quality
            # Of Service (QOS)" -- a QOS's Preempt list in slurmdbd; slurmkit creates QOS only from tenants.qos, so
            # without tenants nothing it writes can ever be preempted (issue 20 item 8: it said nothing)
            src = ("policy.preemption: qos" if cluster.policy.preemption == "qos" else "slurm_conf.PreemptType")
            warnings.append(f"slurm.conf: PreemptType=preempt/qos (from {src}) without tenants: slurmkit creates no "
                            "QOS, so nothing is preempted unless QOS made by hand (sacctmgr ... set Preempt=) say so; "
                            "add a tenants: section with a QOS 'preempt: [...]', or use policy.preemption: "
                            "partition")
        return errors, warnings
    if ptype == "preempt/qos" and not preempts:
        # slurm.conf(5) PreemptType=preempt/qos (22.05 and 24.11): preemption follows each QOS's Preempt list; with no
        # list anywhere nothing is ever preempted
        src = ("slurm_conf.PreemptType" if any(k.lower() == "preempttype" for k, _v in cluster.slurm_conf)
               else "policy.preemption: qos" if cluster.policy.preemption == "qos" else "slurm.conf")
        warnings.append(f"slurm.conf: PreemptType=preempt/qos (from {src}) but no QOS in tenants.qos preempts another: "
                        "nothing will ever be preempted (set 'preempt: [...]' on a QOS, or drop preemption)")
    for rec in conf.partitions:
        name = rec.head
        for key in ("QOS", "AllowQos", "DenyQos"):
            v = next((v for k, v in rec.pairs if k.lower() == key.lower()), "")
            for q in [x for x in v.split(",") if x and x.upper() != "ALL"]:
                if q not in qos_names:
                    errors.append(f"slurm.conf:{rec.lineno}: partition {name} {key}={v}: QOS {q!r} is not in "
                                  "tenants.qos (slurmdbd will not have it)")
    _unusable_qos(t, conf, errors, warnings)
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
    multi = [u for u in t.users if len(u.accounts) > 1]
    ul = t.user_limits
    if multi and (not ul.gpus.empty or ul.max_jobs is not None):
        # user_limits go on every user association (GrpTRES/MaxJobs of the (user, account) association, sacctmgr(1),
        # 22.05 and 24.11); slurmctld counts an association's jobs only (acct_policy.c _acct_policy_validate walks
        # the job's association and its parents), so a user in two accounts may hold the limit in each. The only
        # per-user limit across accounts is a QOS's MaxTRESPerUser (tenants.qos[].gpus_per_user), counted per user
        # per QOS (acct_policy.c acct_policy_get_user_used_limits: the QOS's user_limit_list keyed by uid)
        names = ", ".join(f"{u.name} ({', '.join(u.accounts)})" for u in multi[:5])
        more = f" and {len(multi) - 5} more" if len(multi) > 5 else ""
        warnings.append(f"tenants.user_limits apply per user association: {names}{more} can hold them once in each "
                        "account (a per-user GPU cap across accounts is a QOS's gpus_per_user)")
    prios = {q.priority for q in t.qos}
    if len(prios) > 1:
        if conf.value("PriorityType", "priority/basic") != "priority/multifactor":
            warnings.append("slurm.conf: QOS priorities differ but PriorityType is not priority/multifactor "
                            "(they would not order jobs)")
        elif conf.value("PriorityWeightQOS", "0") in ("0", ""):
            warnings.append("slurm.conf: QOS priorities differ but PriorityWeightQOS is 0 (they would not order jobs)")
    return errors, warnings


def _unusable_qos(t: Tenants, conf: cp.SlurmConf, errors: list[str], warnings: list[str]) -> None:
    """A QOS no job can run in. slurmctld lets a job's QOS use a partition when the partition's AllowQos lists it, or
    when it has no AllowQos (default ALL) and its DenyQos does not list it ("If AllowQos is used then DenyQos will
    not be enforced"; src/slurmctld/partition_mgr.c part_policy_valid_qos: otherwise "Job's QOS not permitted to use
    this partition", reason WAIT_QOS, at submit and again at scheduling, node_scheduler.c; 22.05 and 24.11). A QOS
    that is a partition's QOS= is a partition's limits, not something a job asks for: not judged here.
    - allowed in no partition and some account's default QOS: an error (that tenant's jobs without --qos never run);
    - allowed in no partition otherwise, or granted to no account while every account's QOS list is managed
      (AccountingStorageEnforce=qos refuses a QOS outside the job's association; the accounts judged are those
      with users): a warning naming it."""
    if not conf.partitions:
        return
    part_qos = set()
    allowed: dict[str, list[str]] = {q.name: [] for q in t.qos}
    for rec in conf.partitions:
        pairs = {k.lower(): v for k, v in rec.pairs}
        if pairs.get("qos"):
            part_qos.add(pairs["qos"])
        allow = [x for x in pairs.get("allowqos", "").split(",") if x]
        deny = [x for x in pairs.get("denyqos", "").split(",") if x]
        for name in allowed:
            ok = name in allow if allow and "ALL" not in [x.upper() for x in allow] else name not in deny
            if ok:
                allowed[name].append(rec.head)
    defaults: dict[str, list[str]] = {}
    granted: set[str] = set()
    # jobs run on user associations, and slurmkit keeps users in leaf accounts: those accounts' QOS lists are what
    # jobs may ask for
    used = sorted({acc for u in t.users for acc in u.accounts})
    managed = bool(used)
    for name in used:
        qos, dq = t.account_qos(name)
        if not qos:
            managed = False  # an account without a QOS list keeps what slurmdbd gives it: cannot tell
        granted.update(qos)
        if dq:
            defaults.setdefault(dq, []).append(name)
    for q in t.qos:
        if q.name in part_qos:
            continue
        if not allowed[q.name]:
            if q.name in defaults:
                errors.append(f"slurm.conf: QOS {q.name!r} is the default QOS of account(s) "
                              f"{', '.join(sorted(set(defaults[q.name])))} but no partition allows it (AllowQos/"
                              "DenyQos): their jobs without --qos would never run")
            else:
                warnings.append(f"slurm.conf: QOS {q.name!r} is allowed in no partition (AllowQos/DenyQos): no job "
                                "can run in it (add it to a partition's allow_qos, or remove it)")
        elif managed and q.name not in granted:
            warnings.append(f"tenants.qos: QOS {q.name!r} is in no account's qos list: no association may use it "
                            "(AccountingStorageEnforce=qos), so no job can run in it")


def _want() -> str:
    from slurmkit.generate.slurmconf import TENANT_ENFORCE

    return TENANT_ENFORCE
