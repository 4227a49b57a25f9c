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

    def line(self) -> str:
        what = f"{self.old or '(absent)'} -> {self.new or '(absent)'}"
        return f"[{self.action}] {self.file}: {self.subject}: {what}  ({self.reason})"


# slurm.conf keys whose change needs more than `scontrol reconfigure` (slurm.conf(5) "restart" notes)
_RESTART_KEYS = {
    k.lower()
    for k in (
        "SlurmctldHost SlurmctldPort SlurmdPort SlurmctldAddr AuthType AuthInfo AuthAltTypes CredType PluginDir "
        "StateSaveLocation SlurmUser SlurmdUser SlurmdSpoolDir ProctrackType TaskPlugin SwitchType "
        "TopologyPlugin PriorityType PreemptType AccountingStorageType JobAcctGatherType GresTypes "
        "JobCredentialPrivateKey JobCredentialPublicCertificate MpiDefault ClusterName TreeWidth"
    ).split()
}
_JOB_LOSING = {"selecttype", "selecttypeparameters"}
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
        if key in _JOB_LOSING:
            changes.append(Change("slurm.conf", name, a, b, DRAIN, "changing the select plugin can lose running jobs: empty the cluster, restart all daemons", "ALL"))
        elif key in _RESTART_KEYS:
            changes.append(Change("slurm.conf", name, a, b, RESTART, "read only at daemon start: restart slurmctld and every slurmd"))
        else:
            changes.append(Change("slurm.conf", name, a, b, RECONFIGURE, "scontrol reconfigure re-reads it"))

    on, nn = _node_table(oc), _node_table(nc)
    added = [h for h in nn if h not in on]
    removed = [h for h in on if h not in nn]
    if added:
        if feats.add_nodes_by_reconfigure:
            changes.append(Change("slurm.conf", "NodeName", "", hostlist.fold(added), RECONFIGURE, f"Slurm {feats.version}: new nodes join on reconfigure"))
        else:
            changes.append(Change("slurm.conf", "NodeName", "", hostlist.fold(added), RESTART,
                                  f"Slurm {feats.version} (<24.11): stop slurmctld, update every host, restart all slurmd, start slurmctld"))
    if removed:
        changes.append(Change("slurm.conf", "NodeName", hostlist.fold(removed), "", DRAIN,
                              "drain and empty the nodes before removing them; then restart slurmctld", hostlist.fold(removed)))
    grouped: dict[tuple[str, str, str, str, str], list[str]] = {}
    for h in nn:
        if h not in on:
            continue
        na, nb = on[h], nn[h]
        for k in sorted(set(na) | set(nb)):
            if na.get(k, "") == nb.get(k, ""):
                continue
            if k in _GEOMETRY:
                act, why = DRAIN, "CPU/memory geometry of busy nodes: drain, update, restart their slurmd, resume"
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
    steps.append("back up and write the new files on the controller and every node (or configless: the controller only)")
    restart = [c for c in changes if c.action in (RESTART, DRAIN)]
    adds = [c for c in changes if c.subject == "NodeName" and c.new and c.action == RESTART]
    if adds:
        steps.append("stop slurmctld; restart slurmd on every node; start slurmctld (adding nodes before 24.11)")
    elif restart:
        steps.append("restart slurmctld, then slurmd on " + (",".join(sorted({c.nodes for c in restart if c.nodes})) or "every node"))
    else:
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
