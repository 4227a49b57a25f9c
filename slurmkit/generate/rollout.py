"""Writing config safely, the semantic diff between two config sets, the rollout plan, and drift.

Pure except ``write_files`` (the one writer: temp file, fsync, rename, backup of what it replaces).
What each kind of change needs comes from slurm.conf(5)/gres.conf(5)/scontrol(1) (anchors §5 "Rollout"):
most keys take ``scontrol reconfigure``; ports, hosts, auth and plugin types need daemon restarts; changing
the number of GRES device records or a node's CPU/memory geometry needs the nodes drained first; SelectType
changes can lose running jobs. From 23.11 a reconfigure restarts the daemons itself (keeping the old config
if the new one fails) and from 24.11 new nodes need only a reconfigure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slurmkit import hostlist
from slurmkit.generate import confparse as cp
from slurmkit.generate.versions import features_for
from slurmkit.model.cluster import Cluster

RECONFIGURE, RESTART, DRAIN, PUSH = "reconfigure", "restart", "drain", "push"
_RANK = {PUSH: 0, RECONFIGURE: 1, RESTART: 2, DRAIN: 3}
BACKUP_DIR = ".slurmkit-backup"


# --------------------------------------------------------------------------------------------------------------
# writing


def write_files(files: Mapping[str, str], directory: str | Path, executable: Iterable[str] = (),
                backup: bool = True) -> Path | None:
    """Write ``files`` into ``directory``: every temp file is written and fsynced before the first rename,
    so an error (disk full, permissions) leaves every old file in place. Replaced files are copied to
    ``DIR/.slurmkit-backup/<UTC time>/`` first. Returns that backup dir (None if nothing was replaced)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    execs = set(executable)
    temps: dict[str, str] = {}
    try:
        for name, body in files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"refusing to write {name!r} outside {d}")
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=d)
            temps[name] = tmp
            with os.fdopen(fd, "w") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
            mode = 0o755 if name in execs else 0o644
            old = d / name
            if old.exists():
                mode = (old.stat().st_mode & 0o777) | (0o111 if name in execs else 0)
            os.chmod(tmp, mode)
        bdir = None
        replaced = [n for n in files if (d / n).exists() and (d / n).read_text() != files[n]]
        if backup and replaced:
            bdir = d / BACKUP_DIR / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            n = 1
            while bdir.exists():
                bdir = bdir.with_name(f"{bdir.name.split('.')[0]}.{n}")
                n += 1
            bdir.mkdir(parents=True)
            for name in replaced:
                shutil.copy2(d / name, bdir / name)
        for name, tmp in temps.items():
            os.replace(tmp, d / name)
        temps.clear()
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return bdir
    finally:
        for tmp in temps.values():
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def read_dir(directory: str | Path, names: Iterable[str] | None = None) -> dict[str, str]:
    """The Slurm config files (and slurmkit's hook wrappers) present in ``directory``."""
    d = Path(directory)
    wanted = names or ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf", "topology.yaml",
                       "slurmkit-prolog", "slurmkit-epilog", "slurmkit-health", "slurmkit.yaml")
    return {n: (d / n).read_text() for n in wanted if (d / n).is_file()}


# --------------------------------------------------------------------------------------------------------------
# semantic diff


@dataclass(frozen=True)
class Change:
    file: str
    subject: str  # "SelectType", "NodeName=gpu[001-004]", "PartitionName=train" ...
    old: str
    new: str
    action: str  # push | reconfigure | restart | drain
    reason: str
    nodes: str = ""  # hostlist of nodes to drain/restart, when the change is node-local
    scope: str = ""  # which daemons (Rule.scope); "" = as the action implies

    def line(self) -> str:
        what = f"{self.old or '(absent)'} -> {self.new or '(absent)'}"
        return f"[{self.action}] {self.file}: {self.subject}: {what}  ({self.reason})"


# slurm.conf keys and node changes -> what a change needs, one table per release. Each entry carries the sentence
# of that release's slurm.conf(5) (tag slurm-YY-MM-*-1, doc/man/man5/slurm.conf.5), faq.shtml or source that
# decides it. Keys not in a table take the release's default entry ("*").
#   scope: which daemons: "slurmctld", "slurmd", "all"; "stop-all" is the FAQ's procedure (stop slurmctld, write
#   every node's files, restart every slurmd, start slurmctld); "jobs" means running jobs are affected too.


@dataclass(frozen=True)
class Rule:
    action: str  # reconfigure | restart | drain
    scope: str
    doc: str  # the sentence beside the entry, with where it is


_DEFAULT_OLD = ('slurm.conf(5): "Changes to the configuration file take effect upon restart of Slurm daemons, daemon '
                'receipt of the SIGHUP signal, or execution of the command "scontrol reconfigure" unless otherwise noted."')
_CTLD_22 = 'slurm.conf(5) 22.05: "A restart of slurmctld is required for changes to this parameter to take effect."'
_BOTH_22 = ('slurm.conf(5) 22.05: "A restart of slurmctld and the slurmd daemons is required for changes to this '
            'parameter to take effect."')
_NODE_ADD_OLD = ('faq.shtml (24.11) #add_nodes: "The following procedure is recommended on Slurm 24.05 and older: Stop '
                 'the slurmctld daemon; Update the slurm.conf file on all nodes in the cluster; Restart the slurmd '
                 'daemons on all nodes; Restart the slurmctld daemon"')
_NODE_DEL_OLD = ('faq.shtml (24.11) #rem_nodes: "recommended on Slurm 24.05 and older: Drain node of all jobs; Stop the '
                 'slurmctld daemon; Update the slurm.conf file on all nodes in the cluster; Restart the slurmd daemons '
                 'on all nodes; Restart the slurmctld daemon" (24.05\'s FAQ said 23.11; 24.11 corrected it)')
_SELECT = ('slurm.conf(5) SelectType: "When changed, all job information (running and pending) will be lost, since the '
           'job state save format used by each plugin is different."')
_SWITCH_OLD = ('slurm.conf(5) 22.05: "All Slurm daemons, commands and running jobs must be restarted for a change in '
               'SwitchType to take effect."')
_AUTH = ('slurm.conf(5): "All Slurm daemons and commands must be terminated prior to changing the value of AuthType '
         'and later restarted."')

RULES_22_05: dict[str, Rule] = {
    "*": Rule(RECONFIGURE, "all", _DEFAULT_OLD),
    "AccountingStorageEnforce": Rule(RESTART, "slurmctld", _CTLD_22),
    "AuthType": Rule(RESTART, "all", _AUTH),
    "CoreSpecPlugin": Rule(RESTART, "slurmd", 'slurm.conf(5) 22.05: "A restart of the slurmd daemons is required for changes to this parameter to take effect."'),
    "CredType": Rule(RESTART, "slurmctld", _CTLD_22),
    "GresTypes": Rule(RESTART, "all", 'slurm.conf(5) 22.05: "A restart of slurmctld and the slurmd daemons is required for this to take effect."'),
    "JobContainerType": Rule(RESTART, "slurmctld", _CTLD_22),
    "MaxJobCount": Rule(RESTART, "slurmctld", _CTLD_22),
    "MaxNodeCount": Rule(RESTART, "slurmctld", 'slurm.conf(5) 22.05: "The slurmctld daemon must be restarted for changes to this parameter to take effect."'),
    "PluginDir": Rule(RESTART, "all", _BOTH_22),
    "PowerPlugin": Rule(RESTART, "slurmctld", _CTLD_22),
    "ProctrackType": Rule(RESTART, "slurmctld", _CTLD_22),
    "SchedulerType": Rule(RESTART, "slurmctld", _CTLD_22 + "; read_config.c keeps the old SchedulerType on reconfigure (ESLURM_INVALID_SCHEDTYPE_CHANGE)"),
    "SelectType": Rule(DRAIN, "jobs", 'slurm.conf(5) 22.05: "A restart of slurmctld and slurmd is required for changes to this parameter to take effect. When changed, all job information (running and pending) will be lost"'),
    "SelectTypeParameters": Rule(DRAIN, "jobs", _CTLD_22 + "; read_config.c _preserve_select_type_param: SelectTypeParameters cannot change on reconfigure"),
    "SlurmctldHost": Rule(RESTART, "slurmctld", _CTLD_22),
    "SlurmctldParameters": Rule(RESTART, "slurmctld", _CTLD_22),
    "SlurmctldPort": Rule(RESTART, "slurmctld", _CTLD_22),
    "SlurmdPort": Rule(RESTART, "all", _CTLD_22 + " (slurmd listens on it: restart slurmd too)"),
    "StateSaveLocation": Rule(RESTART, "slurmctld", _CTLD_22),
    "SwitchType": Rule(DRAIN, "jobs", _SWITCH_OLD),
    "ClusterName": Rule(RESTART, "all", "slurmctld compares ClusterName with StateSaveLocation/clustername at start (controller.c _verify_clustername); a new name needs a fresh state or the old one back"),
    # not in slurm.conf(5), but the plugin is loaded once: its init returns at once when a context exists
    # (22.05 src/common/slurm_topology.c slurm_topo_init "if (g_context) goto done"), and controller.c main
    # calls priority_g_init / slurm_acct_storage_init / jobacct_gather_init / mpi_g_daemon_init at start only
    **{k: Rule(RESTART, "all", "22.05 source: the plugin is loaded once at daemon start; a reconfigure keeps the old one")
       for k in ("TopologyPlugin", "PriorityType", "AccountingStorageType", "JobAcctGatherType", "MpiDefault")},
    "node+": Rule(RESTART, "stop-all", _NODE_ADD_OLD),
    "node-": Rule(DRAIN, "stop-all", _NODE_DEL_OLD),
    "node~": Rule(DRAIN, "all", 'slurm.conf(5) NODE CONFIGURATION: "Changes in node configuration (e.g. adding nodes, changing their processor count, etc.) require restarting both the slurmctld daemon and the slurmd daemons."'),
}
# 23.02's slurm.conf(5) and FAQ carry the same sentences for every entry above.
RULES_23_02 = RULES_22_05

# 23.11: scontrol(1) reconfigure "operates by creating new processes for the daemons ... This will not be able to
# change the daemons' listening TCP port settings or authentication mechanism", and slurm.conf(5) dropped the
# per-key "A restart of slurmctld is required" sentences.
_DEFAULT_NEW = (_DEFAULT_OLD[:-1] + ' Changes to TCP listening settings will require a daemon restart." (23.11+); '
                'scontrol(1): "Starting in 23.11, this command operates by creating new processes for the daemons"')
_TCP = 'slurm.conf(5) 23.11+: "Changes to TCP listening settings will require a daemon restart."'
RULES_23_11: dict[str, Rule] = {
    "*": Rule(RECONFIGURE, "all", _DEFAULT_NEW),
    "AuthType": Rule(RESTART, "all", _AUTH),
    "SelectType": Rule(DRAIN, "jobs", _SELECT),
    "SwitchType": Rule(DRAIN, "jobs", 'slurm.conf(5) 23.11+: "All Slurm daemons, commands and running jobs must be restarted or reconfigured for a change in SwitchType to take effect. If running jobs exist at the time slurmctld is restarted with a new value of SwitchType, records of all jobs in any state may be lost."'),
    "SlurmctldPort": Rule(RESTART, "slurmctld", _TCP),
    "SlurmdPort": Rule(RESTART, "all", _TCP),
    "ClusterName": RULES_22_05["ClusterName"],
    "node+": Rule(RESTART, "stop-all", _NODE_ADD_OLD),
    "node-": Rule(DRAIN, "stop-all", _NODE_DEL_OLD),
    "node~": Rule(DRAIN, "all", RULES_22_05["node~"].doc + " (23.11+: a reconfigure restarts them)"),
}
# 24.05's slurm.conf(5) has the same sentences as 23.11's; its FAQ's "23.11 and newer" node removal by reconfigure
# was corrected to 24.11 in the 24.11 FAQ, which is what RULES_23_11 follows.
RULES_24_05 = RULES_23_11

_NODE_ADD_NEW = ('faq.shtml (24.11) #add_nodes: "The following procedure is sufficient on Slurm 24.11 and newer: Update '
                 'the slurm.conf file on all nodes in the cluster; Run scontrol reconfigure"')
_NODE_DEL_NEW = ('faq.shtml (24.11) #rem_nodes: "sufficient on Slurm 24.11 and newer: Drain node of all jobs; Update the '
                 'slurm.conf file on all nodes in the cluster; Run scontrol reconfigure"')
RULES_24_11: dict[str, Rule] = {
    **RULES_23_11,
    "node+": Rule(RECONFIGURE, "all", _NODE_ADD_NEW),
    "node-": Rule(DRAIN, "all", _NODE_DEL_NEW),
    "node~": Rule(DRAIN, "all", 'slurm.conf(5) 24.11+ NODE CONFIGURATION: "Changes in node configuration (e.g. adding nodes, changing their processor count, etc.) require restarting or reconfiguring all slurmctld and slurmd daemons."'),
}
# 25.05 and 25.11: slurm.conf(5) and the FAQ keep 24.11's sentences for every entry.
RULES_25_05 = RULES_24_11
RULES_25_11 = RULES_24_11

RULES: dict[str, dict[str, Rule]] = {
    "22.05": RULES_22_05, "23.02": RULES_23_02, "23.11": RULES_23_11, "24.05": RULES_24_05,
    "24.11": RULES_24_11, "25.05": RULES_25_05, "25.11": RULES_25_11,
}


def rules_for(version: str) -> dict[str, Rule]:
    """The table of ``version``'s release (a newer release than the tables gets the newest)."""
    from slurmkit.generate.versions import version_key

    known = sorted(RULES, key=version_key)
    best = known[0]
    for v in known:
        if version_key(v) <= version_key(version):
            best = v
    return RULES[best]


def rule(version: str, key: str) -> Rule:
    table = rules_for(version)
    for k, r in table.items():
        if k.lower() == key.lower():
            return r
    return table["*"]


_GEOMETRY = ("cpus", "sockets", "corespersocket", "threadspercore", "boards", "socketsperboard", "realmemory")
_SLURMD_LOCAL = ("memspeclimit", "corespeccount", "cpuspeclist", "nodeaddr", "port", "nodehostname")


def _node_table(conf: cp.SlurmConf) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for rec in conf.nodes:
        d = rec.as_dict()
        d.pop("state", None)
        for h in hostlist.expand(rec.head):
            out[h] = d
    return out


def _gres_table(text: str, nodes: Iterable[str]) -> dict[str, tuple[tuple[str, ...], ...]]:
    """node -> its gres.conf records, each as a sorted tuple of ``key=value`` (without NodeName)."""
    all_nodes = list(nodes)
    out: dict[str, list[tuple[str, ...]]] = {}
    cache: dict[str, list[str]] = {}
    for rec in cp.parse_records(text, "gres.conf"):
        d = {k.lower(): v for k, v in rec.pairs}
        if "name" not in d:
            continue
        spec = d.pop("nodename", None)
        if spec is None:
            members = all_nodes
        else:
            if spec not in cache:
                cache[spec] = hostlist.expand(spec)
            members = cache[spec]
        item = tuple(f"{k}={v}" for k, v in sorted(d.items()))
        for h in members:
            out.setdefault(h, []).append(item)
    return {h: tuple(v) for h, v in out.items()}


def _devices(records: tuple[tuple[str, ...], ...]) -> int:
    n = 0
    for r in records:
        d = dict(x.split("=", 1) for x in r)
        if "multiplefiles" in d:
            n += 1
        elif "file" in d:
            n += len(cp.expand_files(d["file"]))
    return n


def semantic_diff(old: Mapping[str, str], new: Mapping[str, str], version: str | None = None) -> list[Change]:
    """Every difference between two config sets that matters to Slurm, each with what it needs."""
    ver = version or cp.header_version(new.get("slurm.conf", "")) or cp.header_version(old.get("slurm.conf", "")) or "22.05"
    feats = features_for(ver)
    changes: list[Change] = []
    oc = cp.parse_slurm_conf(old.get("slurm.conf", ""))
    nc = cp.parse_slurm_conf(new.get("slurm.conf", ""))

    for key in sorted(set(oc.settings) | set(nc.settings)):
        a = oc.value(key) if key != "slurmctldhost" else ",".join(oc.controllers)
        b = nc.value(key) if key != "slurmctldhost" else ",".join(nc.controllers)
        if a == b:
            continue
        name = (nc.settings.get(key) or oc.settings[key])[0]
        r = rule(ver, name)
        nodes = "ALL" if r.scope == "jobs" else ""
        changes.append(Change("slurm.conf", name, a, b, r.action, r.doc, nodes, r.scope))

    on, nn = _node_table(oc), _node_table(nc)
    added = [h for h in nn if h not in on]
    removed = [h for h in on if h not in nn]
    if added:
        r = rule(ver, "node+")
        changes.append(Change("slurm.conf", "NodeName", "", hostlist.fold(added), r.action, r.doc, "", r.scope))
    if removed:
        r = rule(ver, "node-")
        changes.append(Change("slurm.conf", "NodeName", hostlist.fold(removed), "", r.action, r.doc,
                              hostlist.fold(removed), r.scope))
    grouped: dict[tuple[str, str, str, str, str], list[str]] = {}
    for h in nn:
        if h not in on:
            continue
        na, nb = on[h], nn[h]
        for k in sorted(set(na) | set(nb)):
            if na.get(k, "") == nb.get(k, ""):
                continue
            if k in _GEOMETRY:
                act, why = DRAIN, rule(ver, "node~").doc
            elif k == "gres":
                oc_, nc_ = cp.gres_totals(cp.parse_gres(na.get(k, ""))), cp.gres_totals(cp.parse_gres(nb.get(k, "")))
                if oc_ != nc_:
                    act, why = DRAIN, "GRES counts change: drain the nodes first (gres.conf(5))"
                else:
                    act, why = RECONFIGURE, "GRES types change: reconfigure with every slurmd responding"
            elif k in _SLURMD_LOCAL:
                act, why = _slurmd_restart(feats)
            else:
                act, why = RECONFIGURE, "scontrol reconfigure re-reads node attributes"
            grouped.setdefault((k, na.get(k, ""), nb.get(k, ""), act, why), []).append(h)
    for (k, a_, b_, act, why), hs in grouped.items():
        fold = hostlist.fold(hs)
        changes.append(Change("slurm.conf", f"NodeName={fold} {k}", a_, b_, act, why, fold if act in (DRAIN, RESTART) else ""))

    for kind, orecs, nrecs in (("PartitionName", oc.partitions, nc.partitions), ("NodeSet", oc.nodesets, nc.nodesets)):
        od = {r.head: " ".join(f"{k}={v}" for k, v in r.pairs[1:]) for r in orecs}
        nd = {r.head: " ".join(f"{k}={v}" for k, v in r.pairs[1:]) for r in nrecs}
        for name in sorted(set(od) | set(nd)):
            if od.get(name) != nd.get(name):
                changes.append(Change("slurm.conf", f"{kind}={name}", od.get(name, ""), nd.get(name, ""), RECONFIGURE,
                                      "partitions and node sets change on reconfigure"))

    common = [h for h in nn if h in on]
    og, ng = _gres_table(old.get("gres.conf", ""), on), _gres_table(new.get("gres.conf", ""), nn)
    ggroup: dict[tuple[str, str, str, str], list[str]] = {}
    for h in common:
        ga, gb = og.get(h, ()), ng.get(h, ())
        if ga == gb:
            continue
        if _devices(ga) != _devices(gb):
            act, why = DRAIN, "number of GRES device files changes: drain first, restart slurmd"
        elif [_strip(r, "cores") for r in ga] != [_strip(r, "cores") for r in gb]:
            act, why = _slurmd_restart(feats)
        else:
            act, why = RESTART, "Cores= changes need slurmctld and slurmd restarts"
        ggroup.setdefault((_summ(ga), _summ(gb), act, why), []).append(h)
    for (a_, b_, act, why), hs in ggroup.items():
        fold = hostlist.fold(hs)
        changes.append(Change("gres.conf", f"NodeName={fold}", a_, b_, act, why, fold))

    oo, no = cp.parse_settings(old.get("cgroup.conf", ""), "cgroup.conf"), cp.parse_settings(new.get("cgroup.conf", ""), "cgroup.conf")
    for k in sorted(set(oo) | set(no)):
        a = oo[k][1] if k in oo else ""
        b = no[k][1] if k in no else ""
        if a != b:
            act, why = _slurmd_restart(feats)
            changes.append(Change("cgroup.conf", (no.get(k) or oo[k])[0], a, b, act, why))

    for name in ("topology.conf", "topology.yaml"):
        a, b = _body(old.get(name, "")), _body(new.get(name, ""))
        if a != b:
            changes.append(Change(name, "topology", _count_lines(a), _count_lines(b), RECONFIGURE, "topology is re-read on reconfigure"))
    # slurmkit's own files (hook wrappers, inventory copy): only those we would write; extra files stay
    for name in sorted(new):
        if name.startswith("slurmkit") and _body(old.get(name, "")) != _body(new[name]):
            changes.append(Change(name, "file", "present" if name in old else "", "new", PUSH, "copy to every node; no Slurm action"))
    changes.sort(key=lambda c: (-_RANK[c.action], c.file, c.subject))
    return changes


def _slurmd_restart(feats: object) -> tuple[str, str]:
    if getattr(feats, "reconfigure_restarts", False):
        return RECONFIGURE, "read by slurmd at start; a 23.11+ reconfigure restarts slurmd"
    return RESTART, "read by slurmd at start: restart slurmd on the nodes"


def _strip(rec: tuple[str, ...], key: str) -> tuple[str, ...]:
    return tuple(x for x in rec if not x.startswith(key + "="))


def _summ(records: tuple[tuple[str, ...], ...]) -> str:
    if not records:
        return ""
    return f"{len(records)} records, {_devices(records)} devices"


def _body(text: str) -> str:
    """File text without slurmkit's header comments (the inventory hash changes on every edit)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("# generated by slurmkit") and not line.startswith("# target:"))


def _count_lines(text: str) -> str:
    return f"{len([ln for ln in text.splitlines() if ln.strip() and not ln.startswith('#')])} lines" if text else ""


def plan(changes: list[Change], version: str = "22.05") -> list[str]:
    """The ordered rollout: drain -> push files -> restart or reconfigure -> verify -> resume."""
    if not changes:
        return ["nothing to do: the running files already match the inventory"]
    feats = features_for(version)
    steps: list[str] = []
    drain = sorted({c.nodes for c in changes if c.action == DRAIN and c.nodes})
    if drain:
        targets = "ALL nodes" if "ALL" in drain else ",".join(drain)
        steps.append(f"drain {targets}: scontrol update NodeName=<nodes> State=DRAIN Reason='slurmkit: config change'; wait until no jobs run there")
    write = "back up and write the new files on the controller and every node (or configless: the controller only)"
    restart = [c for c in changes if c.action in (RESTART, DRAIN)]
    if any(c.scope == "stop-all" for c in changes):
        # the FAQ's order for node list changes before 24.11 (RULES_22_05 "node+" / "node-")
        steps += ["stop slurmctld (node list changes before 24.11: faq.shtml #add_nodes / #rem_nodes)", write,
                  "restart slurmd on every node", "start slurmctld"]
    elif restart:
        steps.append(write)
        ctld = any(c.scope != "slurmd" for c in restart)
        hosts = sorted({c.nodes for c in restart if c.scope != "slurmctld" and c.nodes and c.nodes != "ALL"})
        every = any(c.scope != "slurmctld" and (not c.nodes or c.nodes == "ALL") for c in restart)
        on = "every node" if every or not hosts else ",".join(hosts)
        if ctld and (every or hosts):
            steps.append(f"restart slurmctld, then slurmd on {on}")
        elif ctld:
            steps.append("restart slurmctld")
        else:
            steps.append(f"restart slurmd on {on}")
    else:
        steps.append(write)
        steps.append("scontrol reconfigure" + (" (23.11+: restarts the daemons, keeps the old config if the new one fails)" if feats.reconfigure_restarts else ""))
    steps.append("verify: slurmkit conf drift INVENTORY; sinfo -R shows no new slurmkit/INVAL reasons")
    if drain:
        steps.append("resume what was drained: scontrol update NodeName=<nodes> State=RESUME")
    return [f"{i}. {s}" for i, s in enumerate(steps, 1)]


def worst(changes: list[Change]) -> str:
    return max((c.action for c in changes), key=_RANK.__getitem__, default=PUSH)


# --------------------------------------------------------------------------------------------------------------
# drift


@dataclass(frozen=True)
class Drift:
    nodes: str
    field: str
    expected: str
    actual: str

    def line(self) -> str:
        return f"{self.nodes}: {self.field}: inventory {self.expected or '(none)'}, cluster {self.actual or '(none)'}"


class NodeFacts(Protocol):
    """What drift needs of a node as Slurm reports it (the backend's NodeInfo has these fields)."""

    @property
    def name(self) -> str: ...
    @property
    def cpus(self) -> int: ...
    @property
    def sockets(self) -> int: ...
    @property
    def cores_per_socket(self) -> int: ...
    @property
    def threads_per_core(self) -> int: ...
    @property
    def real_memory(self) -> int: ...
    @property
    def gres(self) -> str: ...
    @property
    def features(self) -> tuple[str, ...]: ...


def drift(cluster: Cluster, nodes: Iterable[NodeFacts]) -> list[Drift]:
    """Inventory vs ``scontrol show node`` records: CPUs, sockets, cores, threads, RealMemory, Gres,
    Features. Findings with the same values are folded into one hostlist."""
    from slurmkit.generate.slurmconf import _node_gres  # the same Gres string the generator writes

    seen = {n.name: n for n in nodes}
    found: dict[tuple[str, str, str], list[str]] = {}
    for g in cluster.node_groups:
        want_gres = cp.parse_gres(_node_gres(g))
        for h in g.hostnames:
            n = seen.get(h)
            if n is None:
                found.setdefault(("node", "defined", "missing"), []).append(h)
                continue
            pairs = [
                ("CPUs", str(g.cpu.cpus), str(n.cpus)),
                ("Sockets", str(g.cpu.sockets), str(n.sockets)),
                ("CoresPerSocket", str(g.cpu.cores_per_socket), str(n.cores_per_socket)),
                ("ThreadsPerCore", str(g.cpu.threads_per_core), str(n.threads_per_core)),
                ("RealMemory", str(g.real_memory_mb), str(n.real_memory)),
                ("Features", ",".join(sorted(g.features)), ",".join(sorted(n.features))),
            ]
            have_gres = cp.parse_gres(n.gres)
            if have_gres != want_gres:
                pairs.append(("Gres", _gres_str(want_gres), _gres_str(have_gres)))
            for fld, e, a in pairs:
                if e != a:
                    found.setdefault((fld, e, a), []).append(h)
    known = set(cluster.all_hosts)
    extra = [h for h in seen if h not in known]
    if extra:
        found.setdefault(("node", "not in inventory", "present"), []).extend(extra)
    return [Drift(hostlist.fold(hs), f, e, a) for (f, e, a), hs in found.items()]


def _gres_str(g: Mapping[tuple[str, str], int]) -> str:
    return ",".join(f"{n}:{t}:{c}" if t else f"{n}:{c}" for (n, t), c in sorted(g.items()))
