"""gpusub's tenant preflight, pure: which account and QOS a job gets and which GPU limit will hold it back.

Inputs are what slurmctld enforces right now: ``scontrol -o show assoc_mgr flags=assoc,qos`` (every association's and
QOS's GrpTRES as ``limit(in use)``, ``N`` for no limit; the same numbers the scheduler compares, 22.05 and 24.11) and
the user's associations from ``sacctmgr -P -n show assoc where users=U`` (their QOS lists and default QOS).
A job pends with ``AssocGrpGRES`` when an association on its path (the user's, its account, each parent) would go
over its GrpTRES gres/gpu, with ``QOSGrpGRES`` for its QOS's (squeue(1) JOB REASON CODES, 22.05 and 24.11), and
with ``QOSMaxGRESPerUser`` when the user's running jobs in its QOS would go over the QOS's MaxTRESPerUser gres/gpu
(src/common/slurm_protocol_defs.c job_state_reason_string WAIT_QOS_MAX_GRES_PER_USER, 22.05 and 24.11). That limit
counts per user per QOS, whatever the account: slurmctld keeps it in the QOS's ``usage->user_limit_list`` keyed by
uid (src/slurmctld/acct_policy.c acct_policy_get_user_used_limits, 22.05 and 24.11). Its value comes from
``sacctmgr show qos format=Name,MaxTRESPerUser`` (parse_qos_per_user); the user's use from the ``User Limits=``
entries of the QOS line in ``scontrol -o show assoc_mgr`` (src/scontrol/info_assoc_mgr.c _print_used_user_limit:
``UID={... MaxTRESPU=...}`` in 22.05, ``NAME(UID)={...}`` in 24.11; no entry until the user's first job there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Assoc:
    account: str
    user: str  # '' for an account's own association
    parent: str  # the parent account of an account association ('' for a user's)
    default: bool  # the user's default association (DefAssoc=Yes)
    gpu_limit: int | None
    gpu_used: int


@dataclass(frozen=True)
class QosUse:
    name: str
    gpu_limit: int | None
    gpu_used: int
    user_gpus: tuple[tuple[int, int], ...] = ()  # (uid, GPUs its running jobs in this QOS hold), from User Limits=
    # (uid, the QOS's MaxTRESPerUser gres/gpu, None: none) where a User Limits= entry shows it: slurmctld's own value,
    # newer than any sacctmgr answer gpusub may have cached
    user_limits: tuple[tuple[int, int | None], ...] = ()

    def used_by(self, uid: int | None) -> int:
        return next((n for u, n in self.user_gpus if u == uid), 0)

    def limit_for(self, uid: int | None) -> tuple[bool, int | None]:
        """(shown, limit): the per-user GPU limit slurmctld shows in this user's entry, if it has one."""
        for u, lim in self.user_limits:
            if u == uid:
                return True, lim
        return False, None


_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=([^,()]+)\((\d+)\)")
# one user's entry after "User Limits=": 22.05 " 0={...}", 24.11 " root(0)={...}"
_USER_LIMIT = re.compile(r" (?:\S+\()?(\d+)\)?=\{([^}]*)\}")
_MAXTRESPU = re.compile(r"(?:^| )MaxTRESPU=(\S*)")


def _gpu(value: str) -> tuple[int | None, int]:
    m = _TRES_GPU.search(value)
    if not m:
        return None, 0
    limit = None if m.group(1) == "N" else int(m.group(1))
    return limit, int(m.group(2))


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in line.split(" "):
        if "=" in tok:
            k, v = tok.split("=", 1)
            out.setdefault(k, v)
    return out


def parse_assoc_mgr(text: str) -> tuple[list[Assoc], dict[str, QosUse]]:
    assocs: list[Assoc] = []
    qos: dict[str, QosUse] = {}
    for line in text.splitlines():
        if line.startswith("ClusterName="):
            f = _fields(line)
            lim, used = _gpu(f.get("GrpTRES", ""))
            assocs.append(Assoc(
                account=f.get("Account", ""), user=re.sub(r"\(\d+\)$", "", f.get("UserName", "")),
                parent=re.sub(r"\(\d+\)$", "", f.get("ParentAccount", "")), default=f.get("DefAssoc") == "Yes",
                gpu_limit=lim, gpu_used=used))
        elif line.startswith("QOS="):
            f = _fields(line)
            name = re.sub(r"\(\d+\)$", "", f["QOS"])
            lim, used = _gpu(f.get("GrpTRES", ""))
            per_user = []
            user_limits = []
            _before, sep, users = line.partition(" User Limits=")
            for m in _USER_LIMIT.finditer(" " + users if sep else ""):
                tres = _MAXTRESPU.search(m.group(2))
                ulim, uused = _gpu(tres.group(1)) if tres else (None, 0)
                per_user.append((int(m.group(1)), uused))
                if tres and _TRES_GPU.search(tres.group(1)):  # "gres/gpu=LIMIT(USED)", N for none
                    user_limits.append((int(m.group(1)), ulim))
            qos[name] = QosUse(name, lim, used, tuple(per_user), tuple(user_limits))
    return assocs, qos


def parse_qos_per_user(text: str) -> dict[str, int]:
    """``sacctmgr -P -n show qos format=Name,MaxTRESPerUser`` -> QOS -> its MaxTRESPerUser gres/gpu (QOS without one
    are left out)."""
    out = {}
    for line in text.splitlines():
        f = line.split("|")
        if len(f) >= 2 and f[0]:
            m = re.search(r"(?:^|,)gres/gpu=(\d+)(?:,|$)", f[1])
            if m:
                out[f[0]] = int(m.group(1))
    return out


def parse_user_qos(text: str) -> dict[str, tuple[tuple[str, ...], str]]:
    """``sacctmgr -P -n show assoc where users=U format=Account,Partition,QOS,DefaultQOS`` -> account -> (QOS list,
    default QOS); partition-specific rows are left out."""
    out = {}
    for line in text.splitlines():
        f = line.split("|")
        if len(f) >= 4 and f[0] and not f[1]:
            out[f[0]] = (tuple(x for x in f[2].split(",") if x), f[3])
    return out


@dataclass
class TenantCheck:
    account: str | None = None
    qos: str | None = None
    errors: list[str] = field(default_factory=list)  # the job could never start (or sbatch would refuse it)
    warnings: list[str] = field(default_factory=list)  # it will wait for quota
    explain: list[str] = field(default_factory=list)  # --explain: account and QOS chosen and why, the limits


def check(user: str, cluster: str, want_account: str | None, want_qos: str | None, gpus: int, assocs: list[Assoc],
          qos_use: dict[str, QosUse], user_qos: dict[str, tuple[tuple[str, ...], str]],
          enforce_limits: bool = True, uid: int | None = None,
          qos_per_user: dict[str, int] | None = None) -> TenantCheck:
    """``qos_per_user`` (QOS -> MaxTRESPerUser gres/gpu) and ``uid`` (whose use in the QOS counts) add the per-user
    QOS limit to the limits checked."""
    r = TenantCheck()
    mine = [a for a in assocs if a.user == user]
    if not mine:
        r.errors.append(f"user {user} has no association on cluster {cluster}: sbatch would refuse the job (Invalid "
                        "account); an admin adds you to a tenant (slurmkit accounts apply)")
        return r
    if want_account:
        if want_account not in {a.account for a in mine}:
            r.errors.append(f"--account {want_account}: user {user} has no association with it on cluster {cluster} "
                            f"(yours: {', '.join(sorted({a.account for a in mine}))})")
            return r
        r.account = want_account
        r.explain.append(f"account: {want_account} (--account)")
    else:
        d = next((a for a in mine if a.default), mine[0])
        r.account = d.account
        r.explain.append(f"account: {d.account} (your default account; --account picks another: "
                         f"{', '.join(sorted({a.account for a in mine}))})")
    allowed, default_qos = user_qos.get(r.account, ((), ""))
    if want_qos:
        if allowed and want_qos not in allowed:
            r.errors.append(f"--qos {want_qos}: not allowed for your association with {r.account} (allowed: "
                            f"{', '.join(allowed)})")
            return r
        r.qos = want_qos
        r.explain.append(f"qos: {want_qos} (--qos)")
    else:
        r.qos = default_qos or "normal"
        why = f"the default QOS of your association with {r.account}" if default_qos else "Slurm's default"
        r.explain.append(f"qos: {r.qos} ({why}" + (f"; allowed: {', '.join(allowed)})" if allowed else ")"))
    if not enforce_limits:
        r.explain.append("limits: not enforced (AccountingStorageEnforce has no 'limits')")
        return r
    by_key = {(a.account, a.user): a for a in assocs}
    path: list[tuple[str, Assoc]] = []
    ua = by_key.get((r.account, user))
    if ua is not None:
        path.append((f"your association with account {r.account}", ua))
    acc = by_key.get((r.account, ""))
    seen = set()
    while acc is not None and acc.account not in seen:
        seen.add(acc.account)
        path.append((f"account {acc.account}", acc))
        acc = by_key.get((acc.parent, "")) if acc.parent else None
    limits: list[tuple[str, int | None, int, str]] = [(w, a.gpu_limit, a.gpu_used, "AssocGrpGRES") for w, a in path]
    q = qos_use.get(r.qos or "")
    if q is not None:
        limits.append((f"QOS {q.name}", q.gpu_limit, q.gpu_used, "QOSGrpGRES"))
    shown, fresh = q.limit_for(uid) if q is not None else (False, None)
    pu = fresh if shown else (qos_per_user or {}).get(r.qos or "")
    if pu is not None:
        used_pu = q.used_by(uid) if q is not None else 0
        limits.append((f"QOS {r.qos} per user", pu, used_pu, "QOSMaxGRESPerUser"))
    for what, limit, used, reason in limits:
        if limit is None:
            continue
        setting = "MaxTRESPerUser" if reason == "QOSMaxGRESPerUser" else "GrpTRES"
        holds = "your running jobs in it hold" if reason == "QOSMaxGRESPerUser" else "running jobs hold"
        r.explain.append(f"limit: {what} allows {limit} GPUs ({setting} gres/gpu={limit}); {holds} {used}")
        if gpus > limit:
            r.errors.append(f"{what} allows {limit} GPUs; this job asks {gpus}: it would never start "
                            f"(pending with {reason} forever)")
        elif used + gpus > limit:
            r.warnings.append(f"{what} allows {limit} GPUs; {holds} {used}; this job asks {gpus}: it will "
                              f"pend with {reason} until {used + gpus - limit} are free")
    return r
