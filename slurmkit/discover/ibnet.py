"""The InfiniBand fabric from ``ibnetdiscover`` output, as the inventory's ``topology:``.

Pure: text in (the topology file ibnetdiscover(8) prints, and optionally its ``--node-name-map``), records out.

The file is a list of node records, each a header line and one line per connected port::

    Switch  65 "S-2c5eab0300b87b40"   # "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1" enhanced port 0 lid 73 lmc 0
    [1]     "H-e09d7303007a4bd8"[1](e09d7303007a4bd8)   # "a08-p1-dgx-04-c01 mlx5_5" lid 647 4xNDR
    Ca      1 "H-e09d7303007a4bd8"   # "a08-p1-dgx-04-c01 mlx5_5"
    [1](e09d7303007a4bd8)   "S-2c5eab0300b87b40"[1]   # lid 647 lmc 0 "MF0;A09-...:MQM9701/U1" lid 73 4xNDR

(``S-``/``H-``/``R-`` + node GUID; the quoted comment is the NodeDescription, which the HCA driver sets to
"<hostname> <device>", e.g. "node018 HCA-1" or "dgx01 mlx5_0"; an HCA whose host never set it reads like
"MT4129 ConnectX7   Mellanox Technologies" and names no host.) Lines between records (vendid=, devid=,
sysimgguid=, switchguid=, caguid=, comments) carry nothing the topology needs.

Inference: a *leaf* is a switch with a host's HCA on it; leaves that share hosts form one unit (union-find over
host-leaf links). A unit of several leaves is a rail-optimized scalable unit (each node's HCA i on rail leaf i,
NVIDIA DGX SuperPOD reference architecture "Network Fabrics"), which Slurm must see as one switch because a node
is in one leaf only. Switches without hosts are spines; units that share a spine form one pod; pods joined
through further switches get one core switch on top.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurmkit import hostlist
from slurmkit.errors import UsageError

_HEADER = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]+)"\s*(?:#\s*"(.*?)")?')
# "[1]" or "[1](portguid)" or "[1][ext 2]", then the peer: "S-guid"[port] with an optional (portguid)
_PORT = re.compile(r'^\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]+)\))?\s+"([SHR])-([0-9a-fA-F]+)"\[(\d+)\]')
_QUOTED = re.compile(r'"([^"]*)"')
_KIND = {"S": "switch", "H": "ca", "R": "router"}
# "<host> <device>": a device name ends in a digit (mlx5_0, HCA-1, hfi1_0, qib0, ibp24s0)
_DEVICE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\d")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_NAME_OK = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class IBNode:
    guid: str  # node GUID, 16 lower-case hex digits
    kind: str  # switch | ca | router
    desc: str = ""  # NodeDescription
    links: dict[int, tuple[str, int]] = field(default_factory=dict)  # local port -> (peer GUID, peer port)


@dataclass(frozen=True)
class Fabric:
    nodes: dict[str, IBNode]

    def switches(self) -> list[IBNode]:
        return [n for n in self.nodes.values() if n.kind == "switch"]


def _guid(text: str) -> str:
    """A node GUID as ibnetdiscover writes it after "S-"/"H-": 16 lower-case hex digits (a node name map may
    write "0x2c9..." without the leading zeros)."""
    return text.lower().lstrip("0").zfill(16)


def parse(text: str, where: str = "ibnetdiscover output") -> Fabric:
    """The nodes and port links of an ibnetdiscover topology file; UsageError naming the line for a port line
    that is not one, or one outside any node record."""
    nodes: dict[str, IBNode] = {}
    cur: IBNode | None = None

    def node(guid: str, kind: str) -> IBNode:
        n = nodes.get(guid)
        if n is None:
            n = nodes[guid] = IBNode(guid, kind)
        return n

    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _HEADER.match(line)
        if m:
            cur = node(_guid(m.group(4)), _KIND[m.group(3)])
            if m.group(5) is not None:
                cur.desc = m.group(5).strip()
            continue
        if not line.startswith("["):
            continue
        p = _PORT.match(line)
        if p is None:
            raise UsageError(f"{where}: line {no}: not a port link: {line[:80]!r}")
        if cur is None:
            raise UsageError(f"{where}: line {no}: a port link outside any Switch/Ca record")
        peer = node(_guid(p.group(4)), _KIND[p.group(3)])
        if not peer.desc:
            # the peer's description rides in the comment: a switch's port line has it first, an HCA's port
            # line after "lid N lmc M" (its own lid); either way the last quoted string is the peer's
            q = _QUOTED.findall(line[line.find("#"):]) if "#" in line else []
            if q:
                peer.desc = q[-1].strip()
        cur.links[int(p.group(1))] = (peer.guid, int(p.group(5)))
        peer.links.setdefault(int(p.group(5)), (cur.guid, int(p.group(1))))
    if not nodes:
        raise UsageError(f"{where}: no Switch or Ca records (is this ibnetdiscover output?)")
    return Fabric(nodes)


def parse_name_map(text: str, where: str = "node name map") -> dict[str, str]:
    """GUID -> name from an ibnetdiscover ``--node-name-map`` file (``0x<guid> "name"``) or a plain
    ``H-<guid> name`` list; '#' starts a comment."""
    out: dict[str, str] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r'(?:0x|[SHR]-)?([0-9a-fA-F]+)\s+"?([^"]+?)"?', line)
        if m is None:
            raise UsageError(f"{where}: line {no}: expected '<guid> <name>', got {line[:80]!r}")
        out[_guid(m.group(1))] = m.group(2).strip()
    return out


def host_of(desc: str) -> str | None:
    """The host an HCA's NodeDescription names ("node018 HCA-1" -> node018, "dgx01.example mlx5_0" -> dgx01),
    or None for a description that names no host (the adapter's default, "MT4129 ConnectX7 ...")."""
    parts = desc.split()
    # "<host> <device>", or the bare host name a node-name-map entry may give
    if not 1 <= len(parts) <= 2 or len(parts) == 2 and not _DEVICE.fullmatch(parts[1]):
        return None
    host = parts[0].split(".", 1)[0]
    # "localhost": a NodeDescription set before the host had its name
    return host if _HOST.fullmatch(host) and not host.isdigit() and host != "localhost" else None


@dataclass(frozen=True)
class Unit:
    name: str
    hosts: tuple[str, ...]
    leaves: tuple[str, ...]  # leaf switch descriptions (or S-<guid>)
    complete: bool  # every host is on every leaf of the unit


@dataclass(frozen=True)
class FabricTopology:
    units: tuple[Unit, ...]
    uppers: tuple[tuple[str, tuple[str, ...]], ...]  # (switch name, child names), lowest level first
    switches: int
    spines: int
    hcas: int
    notes: tuple[str, ...]

    @property
    def rail_optimized(self) -> bool:
        return any(len(u.leaves) > 1 for u in self.units)

    def inventory(self) -> dict[str, object]:
        """The inventory's ``topology:`` mapping (model/load.py reads it)."""
        if self.rail_optimized:
            units = [{"name": u.name, "nodes": hostlist.fold(u.hosts), "rails": len(u.leaves)} for u in self.units]
            ro: dict[str, object] = {"units": units}
            if self.uppers:
                # rail_optimized takes one spine over all units; a deeper fabric is written out as switches
                if len(self.uppers) == 1:
                    ro["spine"] = self.uppers[0][0]
                    return {"rail_optimized": ro}
                return {"switches": self._switches()}
            return {"rail_optimized": ro}
        return {"switches": self._switches()}

    def _switches(self) -> list[dict[str, str]]:
        out = [{"name": u.name, "nodes": hostlist.fold(u.hosts)} for u in self.units]
        out += [{"name": n, "switches": hostlist.fold(c)} for n, c in self.uppers]
        return out


def _switch_name(n: IBNode) -> str:
    d = n.desc
    if d.startswith("MF0;") and ":" in d:  # NVIDIA/Mellanox managed switch: "MF0;<hostname>:<model>/U1"
        d = d[4:].split(":", 1)[0]
    first = d.split()[0] if d.split() else ""
    name = _NAME_OK.sub("-", first).strip("-")
    generic = not name or name.lower() in {"mellanox", "switchib", "quantum", "voltaire", "infiniscale-iv"} or \
        name.upper().startswith("MT") and name[2:].isdigit()
    return f"S-{n.guid}" if generic else name


def infer(fabric: Fabric, names: dict[str, str] | None = None, match: str | None = None) -> FabricTopology:
    """Leaves, units and uppers of ``fabric``. ``names``: GUID -> name (a node name map, which wins over the
    NodeDescription); ``match``: a regular expression a host name must match in full to count (others, such as
    storage or UFM hosts, are left out and named in the notes)."""
    names = names or {}
    pat = re.compile(match) if match else None
    host_leaves: dict[str, set[str]] = {}
    unnamed = 0
    left_out: set[str] = set()
    hcas = 0
    for n in fabric.nodes.values():
        if n.kind != "ca":
            continue
        sw = {peer for peer, _ in n.links.values() if fabric.nodes[peer].kind == "switch"}
        if not sw:
            continue  # back-to-back HCAs, or a node record without links
        hcas += 1
        host = host_of(names[n.guid]) if n.guid in names else host_of(n.desc)
        if host is None:
            unnamed += 1
            continue
        if pat is not None and not pat.fullmatch(host):
            left_out.add(host)
            continue
        host_leaves.setdefault(host, set()).update(sw)
    if not host_leaves:
        raise UsageError("ibnetdiscover output: no HCA names a host (NodeDescription '<host> <device>'); give a "
                         "--node-name-map" + (f" or a --match that fits ({match!r} matched none)" if match else ""))
    # union-find over leaves joined by a host on both
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for leaves in host_leaves.values():
        first, *rest = sorted(leaves)
        for other in rest:
            parent[find(other)] = find(first)
    groups: dict[str, tuple[set[str], set[str]]] = {}
    for host, leaves in host_leaves.items():
        root = find(next(iter(leaves)))
        hs, ls = groups.setdefault(root, (set(), set()))
        hs.add(host)
        ls.update(leaves)
    ordered = sorted(groups.values(), key=lambda g: hostlist.expand(hostlist.fold(g[0]))[0])
    leaf_set = set().union(*(g[1] for g in ordered))
    units: list[Unit] = []
    notes: list[str] = []
    used: set[str] = set()
    su = 0
    unit_of_leaf: dict[str, str] = {}
    for hosts, leaves in ordered:
        if len(leaves) > 1:
            su += 1
            name = f"su{su:02d}"
        else:
            name = _switch_name(fabric.nodes[next(iter(leaves))])
        while name in used:
            name += "x"
        used.add(name)
        complete = all(host_leaves[h] == leaves for h in hosts)
        leaf_names = tuple(sorted(_switch_name(fabric.nodes[g]) for g in leaves))
        units.append(Unit(name, tuple(sorted(hosts)), leaf_names, complete))
        for g in leaves:
            unit_of_leaf[g] = name
        if len(leaves) > 1 and not complete:
            short = sorted(h for h in hosts if host_leaves[h] != leaves)
            notes.append(f"{name}: {hostlist.fold(short)} not on all {len(leaves)} rail leaves (a cable down, or an "
                         "HCA without a NodeDescription)")
    # spines: switches linked to leaves but with no host; units sharing a spine are one pod
    spine_units: dict[str, set[str]] = {}
    for g in leaf_set:
        for peer, _ in fabric.nodes[g].links.values():
            if fabric.nodes[peer].kind == "switch" and peer not in leaf_set:
                spine_units.setdefault(peer, set()).add(unit_of_leaf[g])
    uparent: dict[str, str] = {u.name: u.name for u in units}

    def ufind(x: str) -> str:
        while uparent[x] != x:
            uparent[x] = uparent[uparent[x]]
            x = uparent[x]
        return x

    for us in spine_units.values():
        first, *rest = sorted(us)
        for other in rest:
            uparent[ufind(other)] = ufind(first)
    pods: dict[str, list[str]] = {}
    for u in units:
        pods.setdefault(ufind(u.name), []).append(u.name)
    uppers: list[tuple[str, tuple[str, ...]]] = []
    if len(units) > 1:
        if len(pods) == 1:
            uppers.append((_free("spine", used), tuple(u.name for u in units)))
        else:
            tops = []
            for i, members in enumerate(sorted(pods.values()), 1):
                if len(members) == 1:
                    tops.append(members[0])
                else:
                    name = _free(f"pod{i:02d}", used)
                    uppers.append((name, tuple(members)))
                    tops.append(name)
            if _connected(fabric):
                uppers.append((_free("core", used), tuple(tops)))
            else:
                notes.append(f"the fabric is in {len(pods)} disconnected parts: no switch above them")
    if unnamed:
        notes.append(f"{unnamed} HCA(s) name no host (NodeDescription unset): not placed; a --node-name-map names them")
    if left_out:
        notes.append(f"left out (no --match): {hostlist.fold(left_out)}")
    n_sw = len(fabric.switches())
    return FabricTopology(tuple(units), tuple(uppers), n_sw, len(spine_units), hcas, tuple(notes))


def _free(name: str, used: set[str]) -> str:
    while name in used:
        name += "x"
    used.add(name)
    return name


def _connected(fabric: Fabric) -> bool:
    sw = [n.guid for n in fabric.switches()]
    if not sw:
        return True
    seen = {sw[0]}
    todo = [sw[0]]
    while todo:
        for peer, _ in fabric.nodes[todo.pop()].links.values():
            if peer not in seen and fabric.nodes[peer].kind == "switch":
                seen.add(peer)
                todo.append(peer)
    return len(seen) == len(sw)


def render(topo: FabricTopology, source: str) -> str:
    """The inventory fragment (YAML) with comments saying what was found and what was left out."""
    import yaml

    lines = [f"# from ibnetdiscover output {source}: {topo.switches} switches, {topo.hcas} HCAs on switches; "
             f"{sum(len(u.hosts) for u in topo.units)} hosts"]
    for u in topo.units:
        if len(u.leaves) > 1:
            lines.append(f"# {u.name}: rail-optimized, {len(u.hosts)} hosts on {len(u.leaves)} rail leaves "
                         f"({', '.join(u.leaves)})")
    lines += [f"# note: {n}" for n in topo.notes]
    body = yaml.safe_dump({"topology": topo.inventory()}, sort_keys=False, default_flow_style=False, width=1 << 20)
    return "\n".join(lines) + "\n" + body
