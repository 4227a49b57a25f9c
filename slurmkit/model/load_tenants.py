"""Inventory ``tenants:`` -> ``Tenants``. Called by ``load.py`` once the node groups and partitions are known (quota and
partition references are checked against them); same error contract: every error names its key path.

```yaml
tenants:
  qos:
    - {name: high, priority: 1000, preempt: [scavenger]}
    - {name: normal, priority: 100}
    - {name: scavenger, priority: 0, usage_factor: 0.1, preempt_mode: requeue}
  accounts:
    - name: research
      children:
        - {name: team-a, fairshare: 60, gpus: 16, qos: [normal, high], default_qos: normal, users: [alice, bob]}
        - {name: team-b, fairshare: 40, gpus: {total: 8, h100: 4}, qos: [normal, scavenger], users: [carol]}
  user_limits: {gpus: 8, max_jobs: 20}
  partitions: {gpu: {allow_qos: [normal, high, scavenger]}}
```
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from slurmkit.model.cluster import NodeGroup, Partition
from slurmkit.model.load import _NAME_RE, _TIME_RE, _bool, _Ctx, _int, _join, _list, _mapping, _str
from slurmkit.model.tenants import (
    QOS,
    QOS_FLAGS,
    QOS_PREEMPT_MODES,
    Account,
    GpuQuota,
    PartitionQOS,
    Tenants,
    User,
    UserLimits,
)

# sacctmgr lowercases account and QOS names (and user names) before storing them (sacctmgr(1): "names are case
# insensitive"; src/sacctmgr/*_functions.c xstrtolower, 22.05 and 24.11): an inventory 'Team-A' would never match the
# live 'team-a'. Only lowercase letters, digits and _ . - are taken (',' '=' and spaces are sacctmgr syntax).
_DB_NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]*$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]*\$?$")
# slurmdbd creates account 'root' (and user root in it) for every cluster; the inventory's tree hangs below it
_RESERVED_ACCOUNTS = frozenset({"root"})


# sacctmgr reads GraceTime with get_uint (src/sacctmgr/common.c: strtol cast to uint32_t, 22.05 and 24.11), but
# slurmdbd 22.05 stores nothing above INT32_MAX: measured on the lab, GraceTime=2147483647 is stored and 2147483648
# answers "Nothing modified" (a plan it would accept must not fail at apply)
GRACE_TIME_MAX = 2**31 - 1


def _dbname(ctx: _Ctx, v: Any, path: str, what: str) -> str:
    text = _str(ctx, v, path)
    if not _DB_NAME_RE.fullmatch(text):
        raise ctx.err(path, f"{text!r} is not a {what} name sacctmgr keeps as written (lowercase letters, digits, "
                            "_ . -; sacctmgr lowercases names)")
    return text


def _time(ctx: _Ctx, v: Any, path: str) -> str | None:
    if v is None:
        return None
    text = _str(ctx, v, path)
    if not _TIME_RE.fullmatch(text):
        raise ctx.err(path, f"{text!r} is not a Slurm time (minutes, H:M:S, D-H:M:S or UNLIMITED)")
    return text


def _gpus(ctx: _Ctx, v: Any, path: str, types: dict[str, int], total_gpus: int,
          has_submit_policy: bool = False) -> GpuQuota:
    """``N`` or ``{total: N, <gpu type>: M, ...}`` -> GrpTRES gres/gpu[=N],gres/gpu:<type>=M; never more than the
    cluster has (a quota above it limits nothing and hides a typo).

    Typed quotas and untyped requests: slurmctld charges a job's GPUs to gres/gpu always and to gres/gpu:<type> only
    when the request names the type (src/slurmctld/gres_ctld.c _set_type_tres_cnt at slurm-22-05-8-1,
    src/stepmgr/gres_stepmgr.c _set_type_tres_cnt at slurm-24-11-5-1: the typeless TRES is the sum of the typed
    ones; a typed one is set only from a typed job record), so ``--gres=gpu:3`` is not held by ``gres/gpu:h100=2``
    (doc/html/resource_limits.shtml "Specific limits over GRES", both releases: "the type's limit will not be
    enforced"). Hence: when the typed counts cover every GPU type of the cluster, the total is rendered too (their
    sum, or the given total if smaller), which holds an untyped request wherever there is one type; where an untyped
    request could still take more of a type than its count (several types), the generated job_submit.lua adds the
    type to untyped requests (``submit_policy:``), and without it the quota is refused."""
    if v is None:
        return GpuQuota()
    if isinstance(v, dict):
        total = None
        by_type = []
        for k, n in v.items():
            kp = _join(path, str(k))
            if k == "total":
                total = _int(ctx, n, kp)
                if total > total_gpus:
                    raise ctx.err(kp, f"{total} GPUs is more than the cluster's {total_gpus} (node_groups)")
                continue
            if k not in types:
                known = ", ".join(sorted(types)) or "none"
                mig = [t for t in sorted(types) if t.startswith(f"{k}_")]
                hint = (f"; its MIG devices count as their profiles' types, e.g. {mig[0]}" if mig else "")
                raise ctx.err(kp, f"unknown GPU type {k!r} (node_groups have: {known}; or 'total'{hint})")
            cnt = _int(ctx, n, kp)
            if cnt > types[k]:
                raise ctx.err(kp, f"{cnt} {k} GPUs is more than the cluster's {types[k]}")
            by_type.append((str(k), cnt))
        if total is None and not by_type:
            raise ctx.err(path, "expected a GPU count or {total: N, <gpu type>: N}")
        if by_type and {t for t, _n in by_type} == set(types):
            covered = sum(n for _t, n in by_type)
            total = covered if total is None else min(total, covered)
        q = GpuQuota(total, tuple(by_type))
        if q.untyped_escapes and not has_submit_policy:
            t, n = next((t, n) for t, n in by_type if total is None or total > n)
            raise ctx.err(_join(path, t), f"{n} {t} GPUs is not enforced on an untyped request (--gres=gpu:N counts "
                                          "only against gres/gpu, and the cluster has several GPU types); add a "
                                          "'submit_policy:' section (its job_submit.lua adds the type to untyped GPU "
                                          f"requests) or a total no larger than {n}")
        return q
    n = _int(ctx, v, path)
    if n > total_gpus:
        raise ctx.err(path, f"{n} GPUs is more than the cluster's {total_gpus} (node_groups)")
    return GpuQuota(n)


def _within_ancestors(ctx: _Ctx, quota: GpuQuota, parent: str, accounts: list[Account], path: str,
                      keyed: bool) -> None:
    """Refuse a GPU quota above an ancestor account's. GrpTRES holds "in aggregate for this association and all
    associations which are children of this association" (sacctmgr(1), 22.05 and 24.11), and slurmctld checks the
    Grp limits of every association on a job's path up to root (src/slurmctld/acct_policy.c
    acct_policy_job_runnable_post_select, 22.05 and 24.11): the ancestor's limit caps the child, so a larger child
    quota is a number the cluster never grants. A typed request counts against gres/gpu and gres/gpu:<type> both, so
    a child's per-type quota is capped by the ancestor's total too. (Children whose quotas *sum* above the parent's
    is the usual oversubscription and stays allowed.)"""
    by_name = {a.name: a for a in accounts}
    # the typed counts first: a total may be derived from them (_gpus), the key the inventory wrote is the one to name
    mine: dict[str, int] = dict(quota.by_type)
    if quota.total is not None:
        mine["total"] = quota.total
    for key, n in mine.items():
        a = by_name.get(parent)
        while a is not None:
            anc = dict(a.gpus.by_type)
            caps = [(c, f"{c} {key} GPUs") for c in ([anc[key]] if key != "total" and key in anc else [])]
            if a.gpus.total is not None:
                caps.append((a.gpus.total, f"{a.gpus.total} GPU{'' if a.gpus.total == 1 else 's'} in all"))
            for cap, what in caps:
                if n > cap:
                    sub = _join(path, key) if keyed else path
                    unit = "GPUs" if key == "total" else f"{key} GPUs"
                    raise ctx.err(sub, f"{n} {unit} is more than ancestor account {a.name!r} allows ({what}, "
                                       "GrpTRES): the parent's limit caps every job below it")
            a = by_name.get(a.parent)


def _parent_shares(accounts: list[Account], given: set[str]) -> list[Account]:
    """A parent account the inventory gives no ``fairshare`` gets the sum of its children's (theirs resolved first).

    Fair share is judged level by level: with Fair Tree (slurm.conf(5) PriorityFlags, the default unless
    NO_FAIR_TREE; src/common/read_config.c sets PRIORITY_FLAGS_FAIR_TREE, slurm-22-05-8-1 and slurm-24-11-5-1) an
    association's normalised share is its raw Fairshare over the sum of its siblings' (src/common/assoc_mgr.c
    _normalize_assoc_shares_fair_tree and _get_children_level_shares, both releases), and a parent's part of the
    cluster is what its children divide. slurmdbd's default raw share is 1, so a parent left at it would hold 1 share
    against a top-level sibling's 20 (a 20:1 tree instead of the 50/30/20 its leaves say). Summed, leaf shares mean
    shares of the whole cluster wherever the leaf sits; a parent given one keeps it (its children then divide it)."""
    by_name = {a.name: a for a in accounts}
    for a in reversed(accounts):  # children come after their parent: reversed, every child is resolved first
        kids = [by_name[c.name] for c in accounts if c.parent == a.name]
        if kids and a.name not in given:
            by_name[a.name] = replace(a, fairshare=sum(k.fairshare for k in kids), fairshare_from_children=True)
    return [by_name[a.name] for a in accounts]


def load_tenants(ctx: _Ctx, raw: Any, groups: dict[str, NodeGroup], partitions: tuple[Partition, ...],
                 has_accounting: bool, has_submit_policy: bool = False) -> Tenants:
    path = "tenants"
    top = _mapping(ctx, raw, path, {"qos", "accounts", "user_limits", "partitions", "preempt_exempt_time",
                                    "decay_half_life"})
    if not has_accounting:
        # QOS, accounts and users are slurmdbd records (sacctmgr(1): "sacctmgr ... view and modify Slurm account
        # information ... stored in a database"); without slurmdbd nothing can hold them
        raise ctx.err(path, "tenants need accounting (slurmdbd holds accounts, users and QOS): add "
                            "'accounting: {host: ...}'")
    # GPU types as Slurm counts them: a MIG device is a gres/gpu of its profile's Type (gres.conf Type=h100_3g.40gb,
    # model GPUs.gres_types), and a partitioned GPU is no gres/gpu:h100 at all; so a typed quota on a MIG group names
    # the profile, and the cluster's gres/gpu total counts MIG devices (gres.conf(5) MultipleFiles, 22.05 and 24.11:
    # a MIG device's files are "managed as a single generic resource", one gres/gpu each)
    types: dict[str, int] = {}
    for g in groups.values():
        if g.gpus:
            for t, n in g.gpus.gres_types():
                types[t] = types.get(t, 0) + n * len(g.hostnames)
    total_gpus = sum(types.values())

    qos: list[QOS] = []
    raw_qos = _list(ctx, top.get("qos") or [], _join(path, "qos"))
    names = []
    for i, q in enumerate(raw_qos):
        qp = _join(_join(path, "qos"), i)
        m = _mapping(ctx, q, qp, {"name", "priority", "preempt", "preempt_mode", "preempt_exempt_time", "max_wall",
                                  "gpus", "gpus_per_user", "max_jobs_per_user", "usage_factor", "flags",
                                  "grace_time"}, {"name"})
        name = _dbname(ctx, m["name"], _join(qp, "name"), "QOS")
        if name in names:
            raise ctx.err(_join(qp, "name"), f"duplicate QOS {name!r}")
        names.append(name)
    for i, q in enumerate(raw_qos):
        qp = _join(_join(path, "qos"), i)
        m = q
        name = names[i]
        preempt = []
        for j, p in enumerate(_list(ctx, m.get("preempt") or [], _join(qp, "preempt"))):
            pp = _join(_join(qp, "preempt"), j)
            pn = _str(ctx, p, pp)
            if pn not in names:
                raise ctx.err(pp, f"unknown QOS {pn!r} (tenants.qos has: {', '.join(names)})")
            if pn == name:
                raise ctx.err(pp, "a QOS cannot preempt itself")
            preempt.append(pn)
        flags = []
        for j, f in enumerate(_list(ctx, m.get("flags") or [], _join(qp, "flags"))):
            fp = _join(_join(qp, "flags"), j)
            fl = {x.lower(): x for x in QOS_FLAGS}.get(str(f).lower())
            if fl is None:
                raise ctx.err(fp, f"unknown QOS flag {f!r} (sacctmgr(1): {', '.join(QOS_FLAGS)})")
            flags.append(fl)
        uf = m.get("usage_factor", 1.0)
        if isinstance(uf, bool) or not isinstance(uf, (int, float)) or uf < 0:
            raise ctx.err(_join(qp, "usage_factor"), f"expected a number >= 0, got {uf!r}")
        grace = m.get("grace_time", 0)
        if isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace <= GRACE_TIME_MAX:
            raise ctx.err(_join(qp, "grace_time"), f"expected whole seconds between 0 and {GRACE_TIME_MAX}, "
                                                   f"got {grace!r}")
        mode = str(m.get("preempt_mode", "cluster")).lower()
        if mode not in QOS_PREEMPT_MODES:
            raise ctx.err(_join(qp, "preempt_mode"), f"expected one of {', '.join(QOS_PREEMPT_MODES)}, got "
                                                     f"{m.get('preempt_mode')!r}")
        qos.append(QOS(
            name=name,
            priority=_int(ctx, m.get("priority", 0), _join(qp, "priority")),
            preempt=tuple(preempt),
            preempt_mode=mode,
            preempt_exempt_time=_time(ctx, m.get("preempt_exempt_time"), _join(qp, "preempt_exempt_time")),
            max_wall=_time(ctx, m.get("max_wall"), _join(qp, "max_wall")),
            gpus=_gpus(ctx, m.get("gpus"), _join(qp, "gpus"), types, total_gpus, has_submit_policy),
            gpus_per_user=_gpus(ctx, m.get("gpus_per_user"), _join(qp, "gpus_per_user"), types, total_gpus, has_submit_policy),
            max_jobs_per_user=(_int(ctx, m["max_jobs_per_user"], _join(qp, "max_jobs_per_user"))
                               if m.get("max_jobs_per_user") is not None else None),
            usage_factor=float(uf),
            flags=tuple(flags),
            grace_time=grace,
        ))

    accounts: list[Account] = []
    given: set[str] = set()  # accounts whose fairshare the inventory states
    memberships: dict[str, list[tuple[str, bool, str]]] = {}  # user -> [(account, default?, key path)]

    def walk(items: Any, p: str, parent: str) -> None:
        for i, a in enumerate(_list(ctx, items, p)):
            ap = _join(p, i)
            m = _mapping(ctx, a, ap, {"name", "fairshare", "gpus", "max_jobs", "qos", "default_qos", "description",
                                      "users", "children"}, {"name"})
            name = _dbname(ctx, m["name"], _join(ap, "name"), "account")
            if name in _RESERVED_ACCOUNTS:
                raise ctx.err(_join(ap, "name"), "'root' is slurmdbd's own top account; tenants hang below it")
            if any(x.name == name for x in accounts):
                raise ctx.err(_join(ap, "name"), f"duplicate account {name!r}")
            aq = []
            for j, q in enumerate(_list(ctx, m.get("qos") or [], _join(ap, "qos"))):
                qn = _str(ctx, q, _join(_join(ap, "qos"), j))
                if qn not in names:
                    raise ctx.err(_join(_join(ap, "qos"), j), f"unknown QOS {qn!r} (tenants.qos has: "
                                                             f"{', '.join(names) or 'none'})")
                aq.append(qn)
            dq = m.get("default_qos")
            if dq is not None:
                dq = _str(ctx, dq, _join(ap, "default_qos"))
                if not aq:
                    raise ctx.err(_join(ap, "default_qos"), "needs the account's 'qos' list too")
                if dq not in aq:
                    # sacctmgr refuses a DefaultQOS outside the association's QOS list
                    raise ctx.err(_join(ap, "default_qos"), f"{dq!r} is not in this account's qos list {aq}")
            elif aq:
                dq = aq[0]
            quota = _gpus(ctx, m.get("gpus"), _join(ap, "gpus"), types, total_gpus, has_submit_policy)
            _within_ancestors(ctx, quota, parent, accounts, _join(ap, "gpus"), isinstance(m.get("gpus"), dict))
            if m.get("fairshare") is not None:
                given.add(name)
            accounts.append(Account(
                name=name, parent=parent,
                fairshare=_int(ctx, m.get("fairshare", 1), _join(ap, "fairshare"), 1),
                gpus=quota,
                max_jobs=_int(ctx, m["max_jobs"], _join(ap, "max_jobs")) if m.get("max_jobs") is not None else None,
                qos=tuple(sorted(aq)), default_qos=dq,
                description=str(m.get("description") or name),
            ))
            for j, u in enumerate(_list(ctx, m.get("users") or [], _join(ap, "users"))):
                up = _join(_join(ap, "users"), j)
                default = False
                if isinstance(u, dict):
                    um = _mapping(ctx, u, up, {"name", "default"}, {"name"})
                    default = _bool(ctx, um.get("default", False), _join(up, "default"))
                    u = um["name"]
                uname = _str(ctx, u, up)
                if not _USER_RE.fullmatch(uname):
                    raise ctx.err(up, f"{uname!r} is not a user name (lowercase letters, digits, _ . -)")
                if any(acc == name for acc, _d, _p in memberships.get(uname, [])):
                    raise ctx.err(up, f"user {uname!r} is listed twice in account {name!r}")
                memberships.setdefault(uname, []).append((name, default, up))
            if m.get("children") is not None:
                walk(m["children"], _join(ap, "children"), name)

    walk(top.get("accounts") or [], _join(path, "accounts"), "root")
    accounts = _parent_shares(accounts, given)
    parents = {a.parent for a in accounts}
    users = []
    for uname, mem in memberships.items():
        defaults = [(acc, p) for acc, d, p in mem if d]
        if len(defaults) > 1:
            raise ctx.err(defaults[1][1], f"user {uname!r} already has default account {defaults[0][0]!r}")
        for acc, _d, p in mem:
            if acc in parents:
                # a user under an account with sub-accounts competes with them for its shares; slurmkit keeps users on
                # the leaves (team accounts) so that fair-share is between tenants
                raise ctx.err(p, f"user {uname!r} is in {acc!r}, which has child accounts; put users in leaf accounts")
        users.append(User(uname, defaults[0][0] if defaults else mem[0][0], tuple(acc for acc, _d, _p in mem)))

    ul = UserLimits()
    if top.get("user_limits") is not None:
        lp = _join(path, "user_limits")
        lm = _mapping(ctx, top["user_limits"], lp, {"gpus", "max_jobs"})
        ul = UserLimits(
            gpus=_gpus(ctx, lm.get("gpus"), _join(lp, "gpus"), types, total_gpus, has_submit_policy),
            max_jobs=_int(ctx, lm["max_jobs"], _join(lp, "max_jobs")) if lm.get("max_jobs") is not None else None,
        )

    pq: list[PartitionQOS] = []
    known_parts = {p.name for p in partitions}
    raw_parts = top.get("partitions") or {}
    pp = _join(path, "partitions")
    if not isinstance(raw_parts, dict):
        raise ctx.err(pp, "expected a mapping of partition name -> {allow_qos: [...]}")
    for pname, spec in raw_parts.items():
        ppp = _join(pp, str(pname))
        if pname not in known_parts:
            raise ctx.err(ppp, f"unknown partition {pname!r} (partitions: {', '.join(sorted(known_parts)) or 'none'})")
        sm = _mapping(ctx, spec, ppp, {"allow_qos"}, {"allow_qos"})
        allow = []
        for j, q in enumerate(_list(ctx, sm["allow_qos"], _join(ppp, "allow_qos"))):
            qn = _str(ctx, q, _join(_join(ppp, "allow_qos"), j), _NAME_RE)
            if qn not in names:
                raise ctx.err(_join(_join(ppp, "allow_qos"), j), f"unknown QOS {qn!r}")
            allow.append(qn)
        if not allow:
            raise ctx.err(_join(ppp, "allow_qos"), "expected at least one QOS")
        pq.append(PartitionQOS(str(pname), tuple(allow)))
    for i, p in enumerate(partitions):
        # a partition QOS (slurm.conf(5) PartitionName QOS=, 22.05 and 24.11: "Used to extend the limits available
        # to a QOS on a partition") is a slurmdbd QOS record; with tenants slurmkit creates the QOS: it must be one
        if p.qos and p.qos not in names:
            raise ctx.err(f"partitions[{i}].qos", f"QOS {p.qos!r} is not in tenants.qos ({', '.join(names) or 'none'})")
    return Tenants(tuple(qos), tuple(accounts), tuple(users), ul, tuple(pq),
                   preempt_exempt_time=_time(ctx, top.get("preempt_exempt_time", "00:05:00"),
                                             _join(path, "preempt_exempt_time")) or "00:05:00",
                   decay_half_life=_time(ctx, top.get("decay_half_life", "7-0"), _join(path, "decay_half_life"))
                   or "7-0")
