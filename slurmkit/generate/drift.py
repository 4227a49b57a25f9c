"""Three-way drift (issue 20 item 3): the inventory, the files on disk and the running cluster, each reduced to the
same table of what an admin changes by hand -- node geometry, memory, Gres, Features, Weight; partitions and their
MaxTime, DefaultTime, State, Default, PriorityTier, nodes -- so a finding can say *which* of the three differs.

Pure: ``view_of_conf`` reads a slurm.conf text (the inventory's rendering or the file in use) with the parser the
semantic diff uses (``confparse``); ``view_of_cluster`` takes what ``scontrol show node`` (JSON from 23.02) and
``scontrol -o show partition`` report; ``compare`` does the rest. Values are compared as slurmctld means them, not
as written: a MaxTime of ``7-0`` is ``7-00:00:00``; unset keys take slurm.conf(5)'s defaults (Weight 1, State UP,
Default NO, PriorityTier 1, MaxTime UNLIMITED, DefaultTime NONE).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmkit import hostlist
from slurmkit.generate import confparse as cp

NODE_FIELDS = ("CPUs", "Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory", "Gres", "Features", "Weight")
PART_FIELDS = ("MaxTime", "DefaultTime", "State", "Default", "PriorityTier", "Nodes")
ABSENT = "-"


@dataclass
class View:
    """One source's table: node -> field -> value, partition -> field -> value (normalised)."""

    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)


def _minutes(value: str | None, none: str) -> str:
    from slurmkit.slurmtime import parse_time_minutes

    v = (value or "").strip()
    if not v or v.upper() in ("NONE", "(NULL)"):
        return none
    try:
        m = parse_time_minutes(v)
    except Exception:  # noqa: BLE001 -- a value Slurm would refuse is compared as written
        return v
    if m is None:
        return "UNLIMITED"
    days, rest = divmod(m, 1440)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else f"{rest // 60:02d}:{rest % 60:02d}:00"


def _gres(text: str) -> str:
    g = cp.parse_gres(text)
    return ",".join(f"{n}:{t}:{c}" if t else f"{n}:{c}" for (n, t), c in sorted(g.items()))


def _features(text: str | Iterable[str]) -> str:
    items = text.split(",") if isinstance(text, str) else list(text)
    return ",".join(sorted(x for x in (i.strip() for i in items) if x and x != "(null)"))


def _hosts(spec: str, nodesets: Mapping[str, str], all_hosts: list[str]) -> str:
    out: list[str] = []
    for part in hostlist.split_top(spec):
        if part.upper() == "ALL":
            out += all_hosts
        elif part in nodesets:
            out += hostlist.expand(nodesets[part])
        elif part:
            out += hostlist.expand(part)
    return hostlist.fold(dict.fromkeys(out)) if out else ""


def view_of_conf(text: str, file: str = "slurm.conf", files: Mapping[str, str] | None = None) -> View:
    """The drift table of a slurm.conf (includes read from ``files``)."""
    conf = cp.parse_slurm_conf(text, file, files)
    v = View()
    for rec in conf.nodes:
        if rec.head.upper() == "DEFAULT":
            continue
        d = rec.as_dict()
        try:
            geo = cp.node_geometry(d)
            shape = {"CPUs": str(geo.cpus), "Sockets": str(geo.sockets), "CoresPerSocket": str(geo.cores_per_socket),
                     "ThreadsPerCore": str(geo.threads_per_core), "RealMemory": str(geo.real_memory)}
        except ValueError:
            shape = {k: d.get(k.lower(), "") for k in ("CPUs", "Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory")}
        row = {**shape, "Gres": _gres(d.get("gres", "")), "Features": _features(d.get("feature", d.get("features", ""))),
               "Weight": d.get("weight", "1")}  # slurm.conf(5) Weight: "The default value is 1"
        for h in hostlist.expand(rec.head):
            v.nodes[h] = row
    nodesets = {r.head: r.get("Nodes", "") or "" for r in conf.nodesets}
    all_hosts = list(v.nodes)
    for rec in conf.partitions:
        if rec.head.upper() == "DEFAULT":
            continue
        d = rec.as_dict()
        v.partitions[rec.head] = {
            "MaxTime": _minutes(d.get("maxtime"), "UNLIMITED"),
            "DefaultTime": _minutes(d.get("defaulttime"), "NONE"),
            "State": d.get("state", "UP").upper(),
            "Default": d.get("default", "NO").upper(),
            "PriorityTier": d.get("prioritytier", "1"),
            "Nodes": _hosts(d.get("nodes", ""), nodesets, all_hosts),
        }
    return v


def view_of_cluster(nodes: Iterable[Any], partitions: Iterable[Mapping[str, str]]) -> View:
    """The drift table of the running cluster: ``NodeInfo`` records and ``scontrol -o show partition`` records."""
    v = View()
    for n in nodes:
        v.nodes[n.name] = {
            "CPUs": str(n.cpus), "Sockets": str(n.sockets), "CoresPerSocket": str(n.cores_per_socket),
            "ThreadsPerCore": str(n.threads_per_core), "RealMemory": str(n.real_memory), "Gres": _gres(n.gres),
            "Features": _features(n.features), "Weight": str(n.weight),
        }
    for p in partitions:
        nodes_ = p.get("Nodes", "")
        v.partitions[p["PartitionName"]] = {
            "MaxTime": _minutes(p.get("MaxTime"), "UNLIMITED"),
            "DefaultTime": _minutes(p.get("DefaultTime"), "NONE"),
            "State": p.get("State", "UP").upper(),
            "Default": p.get("Default", "NO").upper(),
            "PriorityTier": p.get("PriorityTier", "1"),
            "Nodes": hostlist.fold(hostlist.expand(nodes_)) if nodes_ and nodes_ != "(null)" else "",
        }
    return v


@dataclass(frozen=True)
class Finding:
    what: str  # "node[1-2]" or "partition gpu"
    field: str
    inventory: str
    files: str | None  # None: the files were not read
    cluster: str

    @property
    def verdict(self) -> str:
        i, f, c = self.inventory, self.files, self.cluster
        if f is None:
            return "the cluster differs from the inventory"
        if i == f != c:
            return ("the cluster differs from its files: changed by hand (scontrol update/create) or the files were "
                    "not loaded (scontrol reconfigure)")
        if f == c != i:
            return "the inventory differs: not applied yet (slurmkit conf apply)"
        if i == c != f:
            return "the files differ: edited by hand (the cluster still runs the inventory's values)"
        return "all three differ"

    def line(self) -> str:
        files = "" if self.files is None else f", files {self.files}"
        return f"{self.what}: {self.field}: inventory {self.inventory}{files}, cluster {self.cluster} ({self.verdict})"


def compare(inventory: View, files: View | None, cluster: View) -> list[Finding]:
    """Every (object, field) where the sources disagree; nodes with the same finding are folded into one hostlist.
    An object one source lacks shows as ``-`` there (field ``defined``)."""
    found: dict[tuple[str, str, str, str | None, str], list[str]] = {}
    sources = [inventory, cluster] + ([files] if files is not None else [])

    def add(kind: str, name: str, fld: str, get: Any) -> None:
        i, c = get(inventory), get(cluster)
        f = get(files) if files is not None else None
        if i != c or (f is not None and f != i):
            found.setdefault((kind, fld, i, f, c), []).append(name)

    for kind, fields in (("node", NODE_FIELDS), ("partition", PART_FIELDS)):
        names: dict[str, None] = {}
        for s in sources:
            names.update(dict.fromkeys(s.nodes if kind == "node" else s.partitions))
        for name in names:
            def table(s: View, _k: str = kind) -> dict[str, dict[str, str]]:
                return s.nodes if _k == "node" else s.partitions

            present = [name in table(s) for s in sources]
            if not all(present):
                add(kind, name, "defined", lambda s, n=name, t=table: "yes" if n in t(s) else ABSENT)
                continue
            for fld in fields:
                add(kind, name, fld, lambda s, n=name, fl=fld, t=table: t(s)[n].get(fl, ""))
    out = []
    for (kind, fld, i, f, c), names_ in found.items():
        what = hostlist.fold(names_) if kind == "node" else "partition " + ",".join(names_)
        out.append(Finding(what, fld, i, f, c))
    return out


def hash_mismatch(show_config: str) -> str | None:
    """The ``HASH_VAL`` line of ``scontrol show config`` when it says the slurm.conf scontrol read (SLURM_CONF, the
    file on disk) is not the one slurmctld loaded, else None. src/api/config_info.c (22.05 and 24.11): "Match" when
    slurmctld's hash_val equals the client's, else "Different Ours=0x%x Slurmctld=0x%x" (the hash of the file's
    lines, parse_config.c _compute_hash_val). "Configuration data as of" is no help: proc_req.c _fill_ctld_conf sets
    it to the time of the request."""
    for line in show_config.splitlines():
        k, _, v = line.partition("=")
        if k.strip() == "HASH_VAL":
            v = v.strip()
            return v if v.startswith("Different") else None
    return None
