"""Pure edits of an inventory (the YAML mapping, as loaded): add hosts to a node group, take hosts out.

The result is loaded again by the one loader (``model.load``) before anything is written, so every rule the
inventory has (hosts in exactly one leaf switch, partitions naming known groups, ...) still holds after an edit.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from slurmkit import hostlist
from slurmkit.errors import UsageError

_LEAF_RE = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class Edit:
    data: dict[str, Any]  # the new inventory mapping
    summary: str  # one line: what changed in the inventory
    dropped_partitions: tuple[str, ...] = ()  # partitions that go with their last node group


def _groups(data: dict[str, Any]) -> list[dict[str, Any]]:
    groups = data.get("node_groups")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise UsageError("inventory: node_groups must be a list of mappings")
    return groups


def _owner(data: dict[str, Any]) -> dict[str, str]:
    """host -> the node group it is in."""
    out: dict[str, str] = {}
    for g in _groups(data):
        for h in hostlist.expand(str(g.get("hosts", "")), f"node_groups.{g.get('name')}.hosts"):
            out[h] = str(g.get("name"))
    return out


def add_hosts(data: dict[str, Any], hosts: list[str], group: str, like: str | None = None,
              switch: str | None = None, new_switch: bool = False) -> Edit:
    """``hosts`` join ``group``: an existing group grows; a new group is a copy of ``like`` (default: the only
    group) under the new name and joins every partition ``like`` is in. With leaf switches, the hosts go to
    ``switch``, an existing leaf; a ``switch`` the inventory does not have is refused (a typo would otherwise
    wire the nodes to a switch that does not exist) unless ``new_switch`` says to make it, under the top switch.
    Default: a new leaf named after the last one, ``leafN`` -> ``leafN+1``, else ``<group>-leaf``. Block
    topologies are refused (see ``nodes add --help``)."""
    if not hosts:
        raise UsageError("HOSTS: no hosts to add")
    new = copy.deepcopy(data)
    groups = _groups(new)
    owner = _owner(new)
    taken = sorted(h for h in hosts if h in owner)
    if taken:
        raise UsageError(f"HOSTS: {hostlist.fold(taken)} already in node group {owner[taken[0]]!r}")
    names = [str(g.get("name")) for g in groups]
    if group in names:
        g = groups[names.index(group)]
        g["hosts"] = hostlist.fold([*hostlist.expand(str(g["hosts"])), *hosts])
        what = f"node group {group!r} grows to {g['hosts']}"
        if like is not None:
            raise UsageError(f"--like: node group {group!r} exists already; --like only shapes a new group")
    else:
        if like is None:
            if len(groups) != 1:
                raise UsageError(f"--like: {group!r} is a new node group; name the group it copies "
                                 f"(one of {', '.join(names)})")
            like = names[0]
        if like not in names:
            raise UsageError(f"--like: no node group {like!r} (node groups: {', '.join(names)})")
        g = copy.deepcopy(groups[names.index(like)])
        g["name"] = group
        g["hosts"] = hostlist.fold(hosts)
        groups.append(g)
        for p in new.get("partitions") or []:
            if isinstance(p, dict) and like in (p.get("groups") or []):
                p["groups"] = [*p["groups"], group]
        what = f"new node group {group!r} ({g['hosts']}, shaped like {like!r})"
    topo = new.get("topology") or {}
    if isinstance(topo, dict) and topo.get("blocks"):
        raise UsageError("inventory: topology.blocks: nodes add does not yet grow a block topology (a reconfigure "
                         "that adds blocks makes every 24.11 slurmd re-read topology.conf and can stop it); edit the "
                         "inventory and use `slurmkit conf apply`")
    if isinstance(topo, dict) and topo.get("switches"):
        what += "; " + _place_in_leaf(topo["switches"], hosts, switch, group, new_switch)
    elif switch is not None:
        raise UsageError("--switch: the inventory has no switch topology")
    elif new_switch:
        raise UsageError("--new-switch: the inventory has no switch topology")
    return Edit(new, what)


def _place_in_leaf(switches: list[dict[str, Any]], hosts: list[str], switch: str | None, group: str,
                   new_switch: bool) -> str:
    import difflib

    by_name = {str(s.get("name")): s for s in switches}
    if new_switch and switch is None:
        raise UsageError("--new-switch: name the new leaf with --switch")
    if new_switch and switch in by_name:
        raise UsageError(f"--new-switch: switch {switch!r} exists already (drop --new-switch to add to it)")
    if switch is not None and switch not in by_name and not new_switch:
        leaves = [str(s.get("name")) for s in switches if s.get("nodes")]
        close = difflib.get_close_matches(switch, list(by_name), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"--switch: no switch {switch!r} in topology.switches (leaf switches: "
                         f"{', '.join(leaves) or 'none'}){hint} (--new-switch makes a new leaf of that name)")
    if switch is not None and switch in by_name:
        s = by_name[switch]
        if not s.get("nodes"):
            raise UsageError(f"--switch: {switch!r} is an upper-level switch (it holds switches, not nodes)")
        s["nodes"] = hostlist.fold([*hostlist.expand(str(s["nodes"])), *hosts])
        return f"leaf switch {switch!r} grows to {s['nodes']}"
    why = ""
    if switch is None:
        home = _gap_leaves(switches, hosts)
        if len(home) > 1:
            said = "; ".join(f"{hostlist.fold(hs)}: {'a gap in ' + repr(leaf) if leaf else 'no gap'}"
                             for leaf, hs in home.items())
            raise UsageError(f"HOSTS: they belong to different leaves ({said}); add them one leaf at a time, or "
                             "name the leaf with --switch")
        leaf = next(iter(home))
        if leaf is not None:
            s = by_name[leaf]
            s["nodes"] = hostlist.fold([*hostlist.expand(str(s["nodes"])), *hosts])
            return (f"leaf switch {leaf!r} grows to {s['nodes']}: {hostlist.fold(hosts)} fill"
                    f"{'s' if len(hosts) == 1 else ''} the gap in its node list, where a node leaves from")
        why = (f"; no leaf's node list has a gap that {hostlist.fold(hosts)} fill"
               f"{'s' if len(hosts) == 1 else ''}, so where a node was is not in the inventory (--switch LEAF "
               "puts it in an existing leaf)")
        leaves = [str(s["name"]) for s in switches if s.get("nodes")]
        m = _LEAF_RE.match(leaves[-1]) if leaves else None
        switch = f"{m.group(1)}{int(m.group(2)) + 1}" if m else f"{group}-leaf"
        while switch in by_name:
            switch += "x"
    children: set[str] = set()
    for s in switches:
        if s.get("switches"):
            children |= set(hostlist.expand(str(s["switches"])))
    tops = [s for s in switches if str(s.get("name")) not in children and s.get("switches")]
    switches.append({"name": switch, "nodes": hostlist.fold(hosts)})
    if len(tops) == 1:
        top = tops[0]
        top["switches"] = hostlist.fold([*hostlist.expand(str(top["switches"])), switch])
        return f"new leaf switch {switch!r} under {top['name']!r}{why}"
    if len(tops) == 0 and len(switches) == 2:
        # one leaf and no spine: a spine joins the old leaf and the new one, so every node stays reachable
        old = str(switches[0]["name"])
        spine = "spine" if "spine" not in by_name else f"{old}-spine"
        switches.append({"name": spine, "switches": hostlist.fold([old, switch])})
        return f"new leaf switch {switch!r} and spine {spine!r} above {old!r} and it{why}"
    return f"new leaf switch {switch!r} (no single top switch to hang it under){why}"


def _gap_leaves(switches: list[dict[str, Any]], hosts: list[str]) -> dict[str | None, list[str]]:
    """Each host's leaf by the leaves' own node lists: the leaf whose names span it (same prefix, its number
    between the leaf's first and last, e.g. node3 in node[1-2,4]), None where no leaf does (or several do).
    `nodes remove` leaves exactly such a gap when it takes a node from the middle of a leaf; a node taken from
    a leaf's end (or a leaf's last node) leaves no trace in the inventory."""
    spans: list[tuple[str, str, int, int]] = []
    for s in switches:
        if not s.get("nodes"):
            continue
        by_prefix: dict[str, list[int]] = {}
        for h in hostlist.expand(str(s["nodes"])):
            m = _LEAF_RE.match(h)
            if m:
                by_prefix.setdefault(m.group(1), []).append(int(m.group(2)))
        spans += [(str(s["name"]), pre, min(ns), max(ns)) for pre, ns in by_prefix.items()]
    out: dict[str | None, list[str]] = {}
    for h in hosts:
        m = _LEAF_RE.match(h)
        hits = {name for name, pre, lo, hi in spans if m and pre == m.group(1) and lo < int(m.group(2)) < hi}
        out.setdefault(hits.pop() if len(hits) == 1 else None, []).append(h)
    return out


def remove_hosts(data: dict[str, Any], hosts: list[str]) -> Edit:
    """``hosts`` leave their node groups and leaf switches; a group (or leaf) left empty goes with its
    references (partitions' ``groups``, upper switches' ``switches``); a partition left without groups goes too."""
    if not hosts:
        raise UsageError("HOSTS: no hosts to remove")
    new = copy.deepcopy(data)
    owner = _owner(new)
    unknown = sorted(h for h in hosts if h not in owner)
    if unknown:
        raise UsageError(f"HOSTS: {hostlist.fold(unknown)} not in any node group")
    gone = set(hosts)
    groups = _groups(new)
    dropped_groups = []
    for g in list(groups):
        left = [h for h in hostlist.expand(str(g["hosts"])) if h not in gone]
        if left:
            g["hosts"] = hostlist.fold(left)
        else:
            groups.remove(g)
            dropped_groups.append(str(g["name"]))
    if not groups:
        raise UsageError("HOSTS: that would remove every node of the cluster")
    parts = new.get("partitions") or []
    for p in list(parts):
        if isinstance(p, dict):
            p["groups"] = [x for x in p.get("groups") or [] if x not in dropped_groups]
            if not p["groups"]:
                parts.remove(p)
    if parts and not any(isinstance(p, dict) and p.get("default") for p in parts) and \
            any(isinstance(p, dict) and p.get("default") for p in data.get("partitions") or []):
        parts[0]["default"] = True  # the default partition went with its last group: the first one left takes over
    topo = new.get("topology") or {}
    if isinstance(topo, dict) and topo.get("blocks"):
        raise UsageError("inventory: topology.blocks: nodes remove does not yet shrink a block topology; edit the "
                         "inventory and use `slurmkit conf apply`")
    dropped_switches: list[str] = []
    kept_leaves: list[str] = []  # "node6 left leaf2": how to put it back (a node at a leaf's end leaves no gap)
    if isinstance(topo, dict) and topo.get("switches"):
        sw = topo["switches"]
        for s in list(sw):
            if s.get("nodes"):
                all_there = hostlist.expand(str(s["nodes"]))
                left = [h for h in all_there if h not in gone]
                if left and len(left) < len(all_there):
                    went = [h for h in all_there if h in gone]
                    kept_leaves.append(f"{hostlist.fold(went)} left leaf {s['name']!r} (`nodes add "
                                       f"{hostlist.fold(went)} --group {owner[went[0]]} --switch {s['name']}` "
                                       "puts it back)")
                if left:
                    s["nodes"] = hostlist.fold(left)
                else:
                    sw.remove(s)
                    dropped_switches.append(str(s["name"]))
        changed = True
        while changed:  # an upper switch left with no children goes too
            changed = False
            for s in list(sw):
                if s.get("switches"):
                    kids = [c for c in hostlist.expand(str(s["switches"])) if c not in dropped_switches]
                    if kids:
                        s["switches"] = hostlist.fold(kids)
                    else:
                        sw.remove(s)
                        dropped_switches.append(str(s["name"]))
                        changed = True
    dropped_parts = [str(p.get("name")) for p in data.get("partitions") or []
                     if isinstance(p, dict) and p.get("name") not in {x.get("name") for x in parts if isinstance(x, dict)}]
    what = f"{hostlist.fold(hosts)} leave the inventory"
    if dropped_parts:
        what += f"; partition(s) {', '.join(dropped_parts)} removed"
    if dropped_groups:
        what += f"; node group(s) {', '.join(dropped_groups)} removed"
    if dropped_switches:
        what += f"; switch(es) {', '.join(dropped_switches)} removed"
    if kept_leaves:
        what += "; " + "; ".join(kept_leaves)
    return Edit(new, what, tuple(dropped_parts))
