"""What a Slurm release does with a key left unset: the semantic diff (``rollout.semantic_diff``) calls an unset key
equal to the value it defaults to, so a site's file without ``MinJobAge=300`` is not "changed" by one with it.

Global keys: the ``DEFAULT_*`` macros of src/common/read_config.h that read_config.c _validate_and_set_defaults()
applies when the key is unset, at slurm-22-05-8-1 (22.05) and slurm-24-11-5-1 (24.11); releases between take the
older table, later ones the newer (the values listed are the same in both unless a release is named). Build-time
defaults (ProctrackType: proctrack/cgroup only WITH_CGROUP) are left out: the site's build decides them.
NodeName and PartitionName keys: slurm.conf(5) of both releases ("The default value is ...").
"""

from __future__ import annotations

from slurmkit.release import version_key

_COMMON = {
    "authtype": "auth/munge", "credtype": "cred/munge", "batchstarttimeout": "10", "completewait": "0",
    "firstjobid": "1", "getenvtimeout": "2", "inactivelimit": "0", "jobacctgatherfrequency": "30",
    "killonbadexit": "0", "killwait": "30", "maxarraysize": "1001", "maxjobcount": "10000", "maxstepcount": "40000",
    "minjobage": "300", "messagetimeout": "10", "returntoservice": "0", "resumetimeout": "60", "resumerate": "300",
    "suspendrate": "60", "suspendtimeout": "30", "schedulertimeslice": "30", "schedulertype": "sched/backfill",
    "slurmctldpidfile": "/var/run/slurmctld.pid", "slurmctldtimeout": "120", "slurmdpidfile": "/var/run/slurmd.pid",
    "slurmdtimeout": "300", "slurmdspooldir": "/var/spool/slurmd", "statesavelocation": "/var/spool",
    "tcptimeout": "2", "tmpfs": "/tmp", "unkillablesteptimeout": "60", "waittime": "0", "defmempercpu": "0",
    "maxmempercpu": "0", "topologyplugin": "topology/none", "mailprog": "/bin/mail",
    # slurm.conf(5) SlurmctldPort/SlurmdPort: "If none is explicitly specified, it will be set to 6817" / 6818;
    # SlurmUser/SlurmdUser: 'The default value is "root"'; SlurmctldDebug/SlurmdDebug: "info"
    "slurmctldport": "6817", "slurmdport": "6818", "slurmuser": "root", "slurmduser": "root",
    "slurmctlddebug": "info", "slurmddebug": "info",
    # read_config.h DEFAULT_ENFORCE_PART_LIMITS 0 = "NO" (slurm.conf(5) EnforcePartLimits 22.05: 'default "NO"')
    "enforcepartlimits": "NO",
    # the "none" plugins: real plugins in 22.05 (DEFAULT_*_TYPE "<type>/none"), from 23.11 any value holding
    # "none" reads as no plugin (slurmplugins.py) -- unset either way
    "switchtype": "switch/none", "preempttype": "preempt/none", "taskplugin": "task/none", "mpidefault": "none",
    "jobacctgathertype": "jobacct_gather/none", "accountingstoragetype": "accounting_storage/none",
    "jobcomptype": "jobcomp/none",
}
_PER_RELEASE = {
    "22.05": {"prioritytype": "priority/basic", "selecttype": "select/linear", "treewidth": "50"},
    "24.11": {"prioritytype": "priority/multifactor", "selecttype": "select/cons_tres", "treewidth": "16"},
}

NODE_DEFAULTS = {"weight": "1", "tmpdisk": "0", "feature": "", "state": "UNKNOWN"}
PARTITION_DEFAULTS = {
    "default": "NO", "state": "UP", "maxtime": "UNLIMITED", "rootonly": "NO", "reqresv": "NO", "maxnodes": "UNLIMITED",
    "minnodes": "0", "allowaccounts": "ALL", "allowqos": "ALL", "allowgroups": "ALL", "oversubscribe": "NO",
    "gracetime": "0", "hidden": "NO", "exclusiveuser": "NO", "lln": "NO",
}
# Values Slurm reads as the same word (slurm.conf(5): MaxTime "UNLIMITED" or "INFINITE")
SYNONYMS = {"INFINITE": "UNLIMITED"}


def default(key: str, version: str) -> str | None:
    """The value release ``version`` uses for global key ``key`` (any case) when slurm.conf does not set it."""
    k = key.lower()
    table = _PER_RELEASE["22.05" if version_key(version) < (23, 11) else "24.11"]
    return table.get(k, _COMMON.get(k))


def partition_exclusivity(pairs: dict[str, str]) -> dict[str, str]:
    """A PartitionName line's exclusivity keys (lower-case keys) as one spelling, so OverSubscribe=EXCLUSIVE and
    Exclusive=NODE, ExclusiveUser=YES and Exclusive=USER, OverSubscribe=EXCLUSIVE ExclusiveTopo=YES and
    Exclusive=TOPO compare equal. Read as src/common/read_config.c _parse_partitionname() at slurm-26-05-3-1 does:
    ExclusiveUser and ExclusiveTopo first (both YES: "Exclusive=USER ignored"), then OverSubscribe (or its old name
    Shared; EXCLUSIVE is max_share 0, "Exclusive=NODE"), then Exclusive= last, which wins: NO/NONE clears user, topo
    and a max_share 0, NODE sets max_share 0, USER sets exclusive_user only, TOPO sets exclusive_topo and max_share 0.
    The result is the pre-26.05 spelling with defaults left out; other keys pass through unchanged."""
    if not pairs.keys() & {"oversubscribe", "shared", "exclusiveuser", "exclusivetopo", "exclusive"}:
        return dict(pairs)
    out = dict(pairs)
    user = out.pop("exclusiveuser", "NO").upper() == "YES"
    topo = out.pop("exclusivetopo", "NO").upper() == "YES"
    user = user and not topo
    over = out.pop("oversubscribe", None)
    shared = out.pop("shared", None)
    over = (over if over is not None else shared or "NO").upper()
    node = over == "EXCLUSIVE"
    ex = out.pop("exclusive", None)
    if ex is not None:
        e = ex.upper()
        if e in ("NO", "NONE", "NODE", "USER", "TOPO"):
            user, topo = e == "USER", e == "TOPO"
            node = e in ("NODE", "TOPO") or (node and e == "USER")
        else:
            out["exclusive"] = ex  # a bad value stays visible (validate refuses it)
    if node:
        out["oversubscribe"] = "EXCLUSIVE"
    elif over not in ("NO", "EXCLUSIVE"):
        out["oversubscribe"] = over
    if user:
        out["exclusiveuser"] = "YES"
    if topo:
        out["exclusivetopo"] = "YES"
    return out
