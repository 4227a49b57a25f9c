"""Pure logic of `slurmkit accounts`: tenants (model) -> desired records; live records (parsed sacctmgr output) ->
the minimal change set -> sacctmgr steps. No subprocess, no printing.

Records are ``{field: canonical text}``, one per QOS, account association, user association (user, account) and
user (default account). Canonical: times in seconds, TRES as sorted ``k=v``, lists sorted, '' for "no limit", so a
live value read back from ``sacctmgr -P show`` compares equal to what the inventory asks for.

sacctmgr(1) (22.05 and 24.11, "SPECIFICATIONS FOR QOS/ACCOUNTS/USERS"): a limit of -1 clears it, a TRES inside
GrpTRES/MaxTRESPerUser is cleared with ``name=-1``; ``Preempt=''`` clears the preempt list; ``Flags=-1`` clears
the flags; adding a user to an account creates the association and, for a new user, makes it the default account.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from slurmkit.errors import SlurmkitError
from slurmkit.model.tenants import GpuQuota, Tenants

Record = dict[str, str]

QOS_FIELDS = ("Priority", "Preempt", "PreemptMode", "PreemptExemptTime", "MaxWall", "GrpTRES", "MaxTRESPerUser",
              "MaxJobsPerUser", "UsageFactor", "Flags", "GraceTime")
# what a fresh `sacctmgr add qos NAME` holds (read back from the lab, 22.05 and 24.11)
QOS_DEFAULTS: Record = {"Priority": "0", "Preempt": "", "PreemptMode": "cluster", "PreemptExemptTime": "",
                        "MaxWall": "", "GrpTRES": "", "MaxTRESPerUser": "", "MaxJobsPerUser": "",
                        "UsageFactor": "1.000000", "Flags": "", "GraceTime": ""}
ACCOUNT_FIELDS = ("Parent", "Fairshare", "GrpTRES", "GrpJobs", "QOS", "DefaultQOS")
USER_FIELDS = ("Fairshare", "GrpTRES", "MaxJobs", "QOS", "DefaultQOS")
TRES_FIELDS = frozenset({"GrpTRES", "MaxTRESPerUser"})
TIME_FIELDS = frozenset({"PreemptExemptTime", "MaxWall"})
# sacctmgr prints GraceTime as a time (00:01:30) but takes it as whole seconds (qos_functions.c get_uint, 22.05
# and 24.11); 0 is "no grace"
SECONDS_FIELDS = frozenset({"GraceTime"})
# never deleted, never reported as extra: slurmdbd makes them for every cluster
BUILTIN_QOS = frozenset({"normal"})
BUILTIN_ACCOUNTS = frozenset({"root"})
BUILTIN_USERS = frozenset({"root"})


# --- canonical values --------------------------------------------------------------------------------------------

def time_seconds(text: str) -> str:
    """A Slurm time as sacctmgr prints or takes it -> seconds as text; '' for none (empty, -1, UNLIMITED, 0)."""
    from slurmkit.slurmtime import parse_time_seconds

    t = (text or "").strip()
    if not t or t in ("-1", "UNLIMITED", "INFINITE", "Partition_Limit"):
        return ""
    secs = parse_time_seconds(t)
    return str(secs) if secs else ""


def time_text(seconds: str) -> str:
    """Seconds (canonical) -> D-HH:MM:SS for sacctmgr; '' -> -1 (clears the limit)."""
    if not seconds:
        return "-1"
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}"


def tres_dict(text: str) -> dict[str, str]:
    out = {}
    for item in (text or "").split(","):
        if "=" in item:
            k, v = item.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def tres_text(d: dict[str, str]) -> str:
    return ",".join(f"{k}={d[k]}" for k in sorted(d))


def _list(text: str | Iterable[str]) -> str:
    items = text.split(",") if isinstance(text, str) else list(text)
    return ",".join(sorted({i.strip() for i in items if i.strip()}))


def _flags(text: str | Iterable[str]) -> str:
    items = text.split(",") if isinstance(text, str) else list(text)
    return ",".join(sorted({i.strip() for i in items if i.strip()}, key=str.lower))


def _int(text: str | int | None) -> str:
    if text is None:
        return ""
    t = str(text).strip()
    return "" if t in ("", "-1") else str(int(t))


def _float(v: str | float) -> str:
    return f"{float(v):.6f}"


def canonical(fname: str, value: str) -> str:
    if fname in TRES_FIELDS:
        return tres_text(tres_dict(value))
    if fname in TIME_FIELDS or fname in SECONDS_FIELDS:
        return time_seconds(value)
    if fname in ("Preempt", "QOS"):
        return _list(value)
    if fname == "Flags":
        return _flags(value)
    if fname == "UsageFactor":
        return _float(value or 1)
    if fname == "PreemptMode":
        return (value or "cluster").lower()
    if fname in ("Priority",):
        return _int(value) or "0"
    if fname in ("MaxJobsPerUser", "GrpJobs", "MaxJobs"):
        return _int(value)
    if fname == "Fairshare":
        # sacctmgr prints "parent" for Fairshare=parent (SLURMDB_FS_USE_PARENT, sacctmgr(1) 22.05 and 24.11)
        v = (value or "").strip().lower()
        return "parent" if v == "parent" else (_int(value) or "1")
    return (value or "").strip()


def shown(fname: str, value: str) -> str:
    """A canonical value as a person reads it."""
    if not value:
        return "(none)"
    if fname in SECONDS_FIELDS:
        return f"{value}s"
    return time_text(value) if fname in TIME_FIELDS else value


# --- the desired state -------------------------------------------------------------------------------------------

@dataclass
class State:
    """Records keyed by name: ``qos[name]``, ``accounts[name]``, ``users[(user, account)]``, ``defaults[user]``
    (the user's default account)."""

    qos: dict[str, Record] = field(default_factory=dict)
    accounts: dict[str, Record] = field(default_factory=dict)
    users: dict[tuple[str, str], Record] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=dict)


def _gpu_tres(q: GpuQuota) -> str:
    return tres_text(q.tres())


def desired(t: Tenants) -> State:
    s = State()
    for q in t.qos:
        s.qos[q.name] = {
            "Priority": str(q.priority), "Preempt": _list(q.preempt), "PreemptMode": q.preempt_mode,
            "PreemptExemptTime": time_seconds(q.preempt_exempt_time or ""), "MaxWall": time_seconds(q.max_wall or ""),
            "GrpTRES": _gpu_tres(q.gpus), "MaxTRESPerUser": _gpu_tres(q.gpus_per_user),
            "MaxJobsPerUser": _int(q.max_jobs_per_user), "UsageFactor": _float(q.usage_factor),
            "Flags": _flags(q.flags), "GraceTime": str(q.grace_time) if q.grace_time else "",
        }
    for a in t.accounts:
        rec = {"Parent": a.parent, "Fairshare": str(a.fairshare), "GrpTRES": _gpu_tres(a.gpus),
               "GrpJobs": _int(a.max_jobs)}
        if a.qos:  # QOS managed only where the inventory names them
            rec["QOS"] = _list(a.qos)
            rec["DefaultQOS"] = a.default_qos or ""
        s.accounts[a.name] = rec
    for u in t.users:
        s.defaults[u.name] = u.default_account
        for acc in u.accounts:
            rec = {"Fairshare": "1", "GrpTRES": _gpu_tres(t.user_limits.gpus), "MaxJobs": _int(t.user_limits.max_jobs)}
            qos, dq = t.account_qos(acc)
            if qos:
                rec["QOS"] = _list(qos)
                rec["DefaultQOS"] = dq or ""
            s.users[(u.name, acc)] = rec
    return s


# --- fair share as sshare reports it ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Share:
    """One account's fair share once the plan is applied: ``raw`` its Fairshare (sshare RawShares), ``norm`` that
    over the raw shares of every association under the same parent (sshare NormShares), ``level`` that sum,
    ``cluster`` the product of ``norm`` from root down to it (its part of the whole cluster)."""

    account: str
    parent: str
    raw: int
    level: int
    norm: float
    cluster: float
    depth: int

    def describe(self, note: str = "") -> str:
        return (f"share {self.account}: RawShares={self.raw} NormShares={self.norm:.6f} ({self.raw} of {self.level} "
                f"under {self.parent}{'; ' + note if note else ''}); {100 * self.cluster:.1f}% of the cluster")


def after(live: State, want: State, prune: bool = False) -> State:
    """The records once ``diff(live, want, prune)`` is applied: the inventory's, plus the live extras it keeps
    (all of them without --prune; slurmdbd's own root account and root user always)."""
    s = State(dict(want.qos), dict(want.accounts), dict(want.users), dict(want.defaults))
    for name, rec in live.accounts.items():
        if name not in s.accounts and (not prune or name in BUILTIN_ACCOUNTS):
            s.accounts[name] = rec
    for key, rec in live.users.items():
        if key not in s.users and (not prune or (key[0] in BUILTIN_USERS and key[1] in BUILTIN_ACCOUNTS)):
            s.users[key] = rec
    return s


def shares(s: State) -> list[Share]:
    """Every account's share in ``s`` (parents before children), as sshare prints it with Fair Tree.

    slurm.conf(5) PriorityFlags (22.05 and 24.11): Fair Tree is on unless NO_FAIR_TREE (src/common/read_config.c sets
    PRIORITY_FLAGS_FAIR_TREE by default; slurmkit sets no PriorityFlags). sshare's NormShares is the association's
    shares_norm (src/sshare/process.c PRINT_NORMS), which Fair Tree sets to shares_raw / level_shares
    (src/common/assoc_mgr.c _normalize_assoc_shares_fair_tree), level_shares being the sum of the raw shares of
    every child of the parent, accounts and user associations alike, a Fairshare=parent child counting with its
    own children's (_get_children_level_shares, _set_children_level_shares); the same code at slurm-22-05-8-1 and
    slurm-24-11-5-1. So root's user association (raw share 1, made by slurmdbd) is a sibling of the top-level
    accounts."""
    kids: dict[str, list[str]] = {}
    for name, rec in s.accounts.items():
        if name not in BUILTIN_ACCOUNTS:
            kids.setdefault(rec.get("Parent") or "root", []).append(name)
    users_of: dict[str, list[str]] = {}
    for (_u, acc), rec in s.users.items():
        users_of.setdefault(acc, []).append(rec.get("Fairshare", "1"))

    def raw(name: str) -> str:
        return s.accounts[name].get("Fairshare", "1")

    def level(parent: str) -> int:
        total = 0
        for fs in [raw(a) for a in kids.get(parent, [])] + users_of.get(parent, []):
            total += int(fs) if fs != "parent" else 0
        for a in kids.get(parent, []):
            if raw(a) == "parent":
                total += level(a)
        return total

    out: list[Share] = []

    def walk(parent: str, above: float, depth: int, fs_parent: Share | None) -> None:
        lvl = level(parent)
        for a in sorted(kids.get(parent, [])):
            if raw(a) == "parent" and fs_parent is not None:  # shares_norm is the fs parent's
                sh = Share(a, parent, fs_parent.raw, fs_parent.level, fs_parent.norm, above, depth)
            else:
                r = int(raw(a)) if raw(a) != "parent" else 0
                norm = r / lvl if lvl else 0.0
                sh = Share(a, parent, r, lvl, norm, above * norm, depth)
            out.append(sh)
            walk(a, sh.cluster, depth + 1, sh)

    walk("root", 1.0, 0, None)
    return out


# --- parsing the live state (sacctmgr -P -n show ...) ------------------------------------------------------------

QOS_FORMAT = "Name,Priority,Preempt,PreemptMode,PreemptExemptTime,MaxWall,GrpTRES,MaxTRESPerUser,MaxJobsPerUser," \
             "UsageFactor,Flags,GraceTime"
ASSOC_FORMAT = "Account,User,Partition,ParentName,Share,GrpTRES,GrpJobs,MaxJobs,QOS,DefaultQOS"
USER_FORMAT = "User,DefaultAccount"


def parse_state(qos_out: str, assoc_out: str, user_out: str) -> State:
    """The three ``sacctmgr -P -n show`` outputs (formats above, one cluster's associations) -> State. Rows of a
    partition-specific association are not slurmkit's and are left out."""
    s = State()
    for line in qos_out.splitlines():
        f = line.split("|")
        if len(f) < 11 or not f[0]:
            continue
        # GraceTime came last into QOS_FORMAT: recordings made before it have one column less (no grace)
        f += [""] * (1 + len(QOS_FIELDS) - len(f))
        s.qos[f[0]] = {k: canonical(k, v) for k, v in zip(QOS_FIELDS, f[1:1 + len(QOS_FIELDS)], strict=True)}
    for line in assoc_out.splitlines():
        f = line.split("|")
        if len(f) < 10 or not f[0]:
            continue
        account, user, partition, parent, share, grp, grpjobs, maxjobs, qos, dqos = f[:10]
        if partition:
            continue
        if not user:
            s.accounts[account] = {"Parent": parent, "Fairshare": canonical("Fairshare", share),
                                   "GrpTRES": canonical("GrpTRES", grp), "GrpJobs": canonical("GrpJobs", grpjobs),
                                   "QOS": canonical("QOS", qos), "DefaultQOS": dqos}
        else:
            s.users[(user, account)] = {"Fairshare": canonical("Fairshare", share), "GrpTRES": canonical("GrpTRES", grp),
                                        "MaxJobs": canonical("MaxJobs", maxjobs), "QOS": canonical("QOS", qos),
                                        "DefaultQOS": dqos}
    for line in user_out.splitlines():
        f = line.split("|")
        if len(f) >= 2 and f[0]:
            s.defaults[f[0]] = f[1]
    return s


# --- the change set ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """One entity's difference: ``action`` add | modify | delete | extra (live only, kept without --prune);
    ``kind`` qos | account | user | default; ``key`` the name (``user@account`` for a user association);
    ``fields`` (field, live, wanted) for modify, (field, '', wanted) for add."""

    action: str
    kind: str
    key: str
    fields: tuple[tuple[str, str, str], ...] = ()
    blocked: str = ""  # a delete that active jobs hold back (``mark_blocked``): why; apply skips it

    def describe(self) -> str:
        what = {"qos": "QOS", "account": "account", "user": "user", "default": "default account of"}[self.kind]
        if self.blocked:
            return f"delete {what} {self.key}: {self.blocked}"
        if self.action == "modify":
            diffs = "; ".join(f"{f} {shown(f, old)} -> {shown(f, new)}" for f, old, new in self.fields)
            return f"modify {what} {self.key}: {diffs}"
        if self.action == "add":
            sets = ", ".join(f"{f}={shown(f, new)}" for f, _o, new in self.fields if new)
            return f"add {what} {self.key}" + (f" ({sets})" if sets else "")
        if self.action == "extra":
            return f"extra {what} {self.key}: not in the inventory (kept; --prune deletes it)"
        return f"delete {what} {self.key}"


def _fields_diff(live: Record, want: Record) -> tuple[tuple[str, str, str], ...]:
    return tuple((k, live.get(k, ""), v) for k, v in want.items() if live.get(k, "") != v)


def diff(live: State, want: State, prune: bool = False) -> list[Change]:
    """Changes that turn ``live`` into ``want``, in the order they can be applied: QOS, accounts (parents first),
    user associations, default accounts, then deletions (users, accounts children first, QOS)."""
    out: list[Change] = []
    # new QOS first: an existing QOS's preempt list may name one
    for name, rec in want.qos.items():
        if name not in live.qos:
            out.append(Change("add", "qos", name, _fields_diff(QOS_DEFAULTS, rec)))
    for name, rec in want.qos.items():
        if name in live.qos:
            d = _fields_diff(live.qos[name], rec)
            if d:
                out.append(Change("modify", "qos", name, d))
    for name, rec in want.accounts.items():
        if name not in live.accounts:
            out.append(Change("add", "account", name, tuple((k, "", v) for k, v in rec.items())))
        else:
            d = _fields_diff(live.accounts[name], rec)
            if d:
                out.append(Change("modify", "account", name, d))
    new_users = {u for u, _a in want.users if u not in live.defaults}
    adds_default: list[Change] = []
    adds_other: list[Change] = []
    for (user, acc), rec in want.users.items():
        key = f"{user}@{acc}"
        if (user, acc) not in live.users:
            c = Change("add", "user", key, tuple((k, "", v) for k, v in rec.items()))
            (adds_default if user in new_users and want.defaults.get(user) == acc else adds_other).append(c)
        else:
            d = _fields_diff(live.users[(user, acc)], rec)
            if d:
                out.append(Change("modify", "user", key, d))
    # a new user's first association becomes its default account: add those first
    out += adds_default + adds_other
    for user, acc in want.defaults.items():
        if user not in new_users and live.defaults.get(user) != acc:
            out.append(Change("modify", "default", user, (("DefaultAccount", live.defaults.get(user, ""), acc),)))
    act = "delete" if prune else "extra"
    for (user, acc) in sorted(live.users):
        if (user, acc) not in want.users and not (user in BUILTIN_USERS and acc in BUILTIN_ACCOUNTS):
            out.append(Change(act, "user", f"{user}@{acc}"))
    depth = {a: _depth(live, a) for a in live.accounts}
    for name in sorted(live.accounts, key=lambda a: (-depth[a], a)):
        if name not in want.accounts and name not in BUILTIN_ACCOUNTS:
            out.append(Change(act, "account", name))
    for name in sorted(live.qos):
        if name not in want.qos and name not in BUILTIN_QOS:
            out.append(Change(act, "qos", name))
    return out


def _depth(s: State, name: str) -> int:
    n = 0
    while name in s.accounts and s.accounts[name].get("Parent") and n < 64:
        name = s.accounts[name]["Parent"]
        n += 1
    return n


# --- deletes that active jobs hold back ---------------------------------------------------------------------------

# `squeue -h --all -o JOBS_FORMAT`: every job slurmctld still holds, one line each (a pending array is one line)
JOBS_FORMAT = "%i|%a|%u|%T"
# squeue(1) JOB STATE CODES of a job that has ended or is ending: no longer in the way of a delete
_ENDED = frozenset({"COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                    "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"})


@dataclass(frozen=True)
class Job:
    id: str
    account: str
    user: str
    state: str


# %a is the one field here a user writes (any --account where associations are not enforced, "|" and newlines too:
# tests/data/slurm/jobs_hostile_*.squeue_O.txt), and slurmctld lower-cases it (job_mgr.c
# xstrtolower(job_desc->account) at slurm-22-05-8-1, slurm-24-11-5-1, slurm-26-05-3-1). So the id is read from the
# left, user and state from the right, the account is what lies between; and since a line broken inside an account
# ends in lower-case account text, a line whose last field is not an upper-case state name is refused.
_JOB_ID = re.compile(r"\d+(?:_(?:\d+|\[[0-9,%\-]+\]))?(?:\+\d+)?")
_JOB_STATE = re.compile(r"[A-Z][A-Z_]*")


class JobListError(SlurmkitError):
    pass


def parse_jobs(text: str) -> list[Job]:
    """``squeue -h --all -o JOBS_FORMAT`` -> the jobs not yet ended; JobListError, one line, for a line no job
    prints (an account holding a newline)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        f = line.strip().split("|")
        if len(f) < 4 or not _JOB_ID.fullmatch(f[0]) or not _JOB_STATE.fullmatch(f[-1]):
            raise JobListError(f"squeue -o {JOBS_FORMAT}: line {n} is no job's line ({line.strip()[:60]!r}): an "
                               "account holding a newline? (squeue -o %a prints it as given)")
        if f[-1] not in _ENDED:
            out.append(Job(f[0], "|".join(f[1:-2]).lower(), f[-2], f[-1]))
    return out


def _subtree(s: State, name: str) -> set[str]:
    """``name`` and every live account below it."""
    out = {name}
    grew = True
    while grew:
        below = {a for a, rec in s.accounts.items() if rec.get("Parent") in out} - out
        out |= below
        grew = bool(below)
    return out


def mark_blocked(changes: list[Change], live: State, jobs: list[Job]) -> list[Change]:
    """Mark each delete of a user association or an account that a job not yet ended still uses.

    slurmdbd refuses to remove an association with jobs active on it: sacctmgr prints " Error with request: Job(s)
    active, cancel job(s) before remove" and the job ids, and exits 1 (src/common/slurm_errno.c
    ESLURM_JOBS_RUNNING_ON_ASSOC; the check is accounting_storage/mysql's _check_jobs_before_remove[_assoc]: the
    job table's rows with time_end=0 and state < JOB_COMPLETE, i.e. pending, running, suspended; an account's whole
    subtree is checked; 22.05 and 24.11 alike). The refusal rolls back the whole call, so one blocked user in
    ``delete user where name=a,b`` would keep b too: blocked deletes are taken out of the steps.
    slurmkit holds back at least what slurmdbd refuses: slurmdbd judges by the jobs in its job table, and the 22.05 lab
    let ``delete user`` through under a held pending job (``sbatch -H``: slurmctld had not sent it to slurmdbd yet; 24.11
    refused the same delete), which leaves a job whose association is gone. So every job squeue lists counts, for the
    user association it runs in and for every account being deleted whose subtree holds it. QOS deletes are not marked:
    slurmdbd does not refuse them (remove_common only checks the job table to choose soft delete)."""
    out = []
    for c in changes:
        if c.action != "delete" or c.kind not in ("user", "account"):
            out.append(c)
            continue
        if c.kind == "user":
            user, acc = c.key.split("@", 1)
            hit = [j for j in jobs if j.user == user and j.account == acc]
        else:
            tree = _subtree(live, c.key)
            hit = [j for j in jobs if j.account in tree]
        if hit:
            ids = ", ".join(j.id for j in hit[:10]) + (", ..." if len(hit) > 10 else "")
            c = Change(c.action, c.kind, c.key, c.fields,
                       blocked=f"blocked: {len(hit)} running/pending job(s) ({ids})")
        out.append(c)
    return out


def needs_jobs(changes: list[Change]) -> bool:
    """Whether ``mark_blocked`` has anything to judge (so that a plan without deletes never calls squeue)."""
    return any(c.action == "delete" and c.kind in ("user", "account") for c in changes)


# --- sacctmgr steps ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One ``sacctmgr -i`` call (``args`` after ``-i``) and the changes it carries."""

    args: tuple[str, ...]
    changes: tuple[Change, ...]


def _set_arg(fname: str, live: str, want: str) -> str:
    key = {"Fairshare": "Fairshare", "DefaultQOS": "DefaultQOS"}.get(fname, fname)
    if fname in TRES_FIELDS:
        old, new = tres_dict(live), tres_dict(want)
        items = {k: v for k, v in new.items() if old.get(k) != v}
        items.update({k: "-1" for k in old if k not in new})
        return f"{key}={tres_text(items)}"
    if fname in TIME_FIELDS:
        return f"{key}={time_text(want)}"
    if fname in SECONDS_FIELDS:
        return f"{key}={want or '0'}"
    if fname in ("MaxJobsPerUser", "GrpJobs", "MaxJobs"):
        return f"{key}={want or '-1'}"
    if fname == "Flags":
        return f"{key}={want or '-1'}"
    return f"{key}={want}"


def qos_changes(changes: list[Change]) -> list[Change]:
    """The QOS additions and settings among ``changes``: what must be in slurmdbd before a slurmctld reads a
    partition's AllowQOS/DenyQOS naming them (unknown names are fatal from 25.11, ``release.allow_qos_fatal``).
    QOS records belong to no cluster, so these can run before the cluster is registered; the site order is
    `accounts apply` first, then the slurm.conf that names them (README, "Tenants")."""
    return [c for c in changes if c.kind == "qos" and c.action in ("add", "modify")]


def steps(changes: list[Change], cluster: str) -> list[Step]:
    """Group changes into as few sacctmgr calls as keep the order: consecutive changes of one action and kind whose
    settings are the same share a call (``add user a,b,c account=X ...``, ``modify qos where name=a,b set ...``)."""
    out: list[Step] = []
    groups: dict[tuple, list[Change]] = {}
    order: list[tuple] = []

    def flush() -> None:
        for g in order:
            out.append(_step(g, groups[g], cluster))
        groups.clear()
        order.clear()

    phase = None
    for c in changes:
        if c.action == "extra" or c.blocked:
            continue
        if c.action == "add" and c.kind == "user":
            user, acc = c.key.split("@", 1)
            sig: tuple = ("add", "user", acc, tuple((f, n) for f, _o, n in c.fields))
        elif c.action == "add" and c.kind == "qos":
            sig = ("add", "qos")
        elif c.action == "modify" and c.kind == "user":
            user, acc = c.key.split("@", 1)
            sig = ("modify", "user", acc, tuple(_set_arg(*f) for f in c.fields))
        elif c.action == "modify" and c.kind in ("qos", "account"):
            sig = ("modify", c.kind, tuple(_set_arg(*f) for f in c.fields))
        elif c.action == "modify" and c.kind == "default":
            sig = ("modify", "default", c.fields[0][2])
        elif c.action == "delete" and c.kind == "user":
            user, acc = c.key.split("@", 1)
            sig = ("delete", "user", acc)
        elif c.action == "delete":
            sig = ("delete", c.kind)
        else:  # add account: one call each, parents before children
            sig = ("add", "account", c.key)
        this_phase = (c.action, c.kind)
        if this_phase != phase:
            flush()
            phase = this_phase
        if sig not in groups:
            groups[sig] = []
            order.append(sig)
        groups[sig].append(c)
    flush()
    # a new QOS is added bare, then set like a modified one (its preempt list may name QOS added in the same call)
    final: list[Step] = []
    for st in out:
        final.append(st)
        if st.args[:2] == ("add", "qos"):
            for c in st.changes:
                if c.fields:
                    final.append(Step(("modify", "qos", "where", f"name={c.key}", "set",
                                       *(_set_arg(*f) for f in c.fields)), ()))
    return final


def _step(sig: tuple, changes: list[Change], cluster: str) -> Step:
    names = ",".join(c.key.split("@", 1)[0] for c in changes)
    c0 = changes[0]
    cl = f"cluster={cluster}"
    if sig[0] == "add" and sig[1] == "qos":
        return Step(("add", "qos", names), tuple(changes))
    if sig[0] == "add" and sig[1] == "account":
        fields = dict((f, n) for f, _o, n in c0.fields)
        args = ["add", "account", c0.key, cl, f"Parent={fields['Parent']}", f"Fairshare={fields['Fairshare']}"]
        if fields.get("GrpTRES"):
            args.append(f"GrpTRES={fields['GrpTRES']}")
        if fields.get("GrpJobs"):
            args.append(f"GrpJobs={fields['GrpJobs']}")
        if fields.get("QOS"):
            args += [f"QOS={fields['QOS']}", f"DefaultQOS={fields['DefaultQOS']}"]
        return Step(tuple(args), tuple(changes))
    if sig[0] == "add" and sig[1] == "user":
        fields = dict(sig[3])
        args = ["add", "user", names, f"Account={sig[2]}", cl, f"Fairshare={fields['Fairshare']}"]
        if fields.get("GrpTRES"):
            args.append(f"GrpTRES={fields['GrpTRES']}")
        if fields.get("MaxJobs"):
            args.append(f"MaxJobs={fields['MaxJobs']}")
        if fields.get("QOS"):
            args += [f"QOS={fields['QOS']}", f"DefaultQOS={fields['DefaultQOS']}"]
        return Step(tuple(args), tuple(changes))
    if sig[0] == "modify" and sig[1] == "user":
        return Step(("modify", "user", "where", f"name={names}", f"account={sig[2]}", cl, "set", *sig[3]),
                    tuple(changes))
    if sig[0] == "modify" and sig[1] == "qos":
        return Step(("modify", "qos", "where", f"name={names}", "set", *sig[2]), tuple(changes))
    if sig[0] == "modify" and sig[1] == "account":
        return Step(("modify", "account", "where", f"name={names}", cl, "set", *sig[2]), tuple(changes))
    if sig[0] == "modify" and sig[1] == "default":
        return Step(("modify", "user", "where", f"name={names}", cl, "set", f"DefaultAccount={sig[2]}"),
                    tuple(changes))
    if sig[0] == "delete" and sig[1] == "user":
        return Step(("delete", "user", "where", f"name={names}", f"account={sig[2]}", cl), tuple(changes))
    if sig[0] == "delete" and sig[1] == "account":
        return Step(("delete", "account", "where", f"name={names}", cl), tuple(changes))
    return Step(("delete", "qos", "where", f"name={names}"), tuple(changes))


def describe_drift(c: Change) -> str:
    """A difference read as a manual change to the live records (``slurmkit accounts drift``)."""
    what = {"qos": "QOS", "account": "account", "user": "user", "default": "default account of"}[c.kind]
    if c.action == "modify":
        diffs = "; ".join(f"{f} is {shown(f, old)}, inventory says {shown(f, new)}" for f, old, new in c.fields)
        return f"changed {what} {c.key}: {diffs}"
    if c.action == "add":
        return f"missing {what} {c.key}: in the inventory, not in slurmdbd (deleted by hand, or never applied)"
    return f"extra {what} {c.key}: in slurmdbd, not in the inventory (added by hand?)"
