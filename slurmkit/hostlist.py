"""Hostlists are sets: expand, fold, intersect with ClusterShell's NodeSet, never by string hacking.

The one exception is measured and bounded: a plain name, one prefix with one ascending bracket range, and a run of
numbered names are answered without NodeSet (a 100,000-node tree repeats them thousands of times), exactly as NodeSet
answers them -- tests/unit/test_hostlist_fast.py compares the two over generated lists -- and everything else goes to
NodeSet."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from slurmkit.errors import UsageError
from slurmkit.indexlist import expand_ints  # noqa: F401 - Slurm index lists, dependency-free

# Slurm's hostlist parser refuses a bracket range of more than MAX_RANGE hosts: src/common/hostlist.c at
# slurm-22-05-8-1, `#define MAX_RANGE (64*1024)` and _parse_single_range(): `if (range->hi - range->lo + 1 >
# MAX_RANGE) { error("%s: Too many hosts in range `%s'", ...); return 0; }` (every release 22.05-25.11; 24.11+ spell
# it MAX_SLURM_NODES, slurm/slurm.h). The loader refuses such a range as written (model/load.py ranges_problem);
# fold and canonical never write one: a longer run is split into ranges of at most MAX_RANGE hosts.
MAX_RANGE = 64 * 1024


def split_top(text: str) -> list[str]:
    """Split on commas outside brackets: ``a[1-2,5],b`` -> ``['a[1-2,5]', 'b']`` (empty items kept). Written by hand:
    ClusterShell parses whole node sets, not a comma list whose items may be device paths or nodeset names."""
    if "[" not in text or "," not in text:
        return text.split(",")  # no bracket: every comma is at the top; no comma: one item
    out: list[str] = []
    buf: list[str] = []
    depth = 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    out.append("".join(buf))
    return out


# The two shapes a 100,000-node inventory repeats thousands of times (one leaf switch per 32 nodes): a plain name, and
# a prefix with one bracket holding one ascending range. NodeSet costs ~0.1 ms to parse one and ~4 us per name to
# iterate; these two are answered without it, as NodeSet would (tests/unit/test_hostlist_fast.py compares them over
# generated lists). Anything else -- several items, ranges, brackets, padding that changes width, a name NodeSet
# could read as a group or operator -- goes to NodeSet.
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_ONE_RANGE = re.compile(r"([A-Za-z_][A-Za-z0-9._-]*(?<![0-9]))\[(\d+)-(\d+)\]")  # NodeSet folds a prefix's digits in


def _nodeset() -> tuple[Any, type[Exception]]:
    """ClusterShell's NodeSet and its parse error, imported on first use: the fast shapes above answer a gpusub
    submit's hostlists, and ClusterShell's import (configparser, logging; ~10 ms of CPU) is left to what needs it."""
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError  # type: ignore[import-untyped]

    return NodeSet, NodeSetParseError


def _one_range(text: str) -> tuple[str, int, int, int] | None:
    """``gpu[0001-0032]`` -> ("gpu", 1, 32, 4); None unless ``text`` is exactly that shape with lo < hi and every
    number of the range the same width (equal-width bounds, or no leading zero)."""
    m = _ONE_RANGE.fullmatch(text)
    if not m:
        return None
    prefix, a, b = m.groups()
    lo, hi = int(a), int(b)
    if lo >= hi:
        return None
    if len(a) == len(b):
        return prefix, lo, hi, len(a)
    if (a[0] != "0" or a == "0") and b[0] != "0":
        return prefix, lo, hi, 0
    return None


_BRACKET_BODY = re.compile(r"\[([^\[\]]*)\]")
_RANGE_NUMS = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", re.ASCII)


def size_bound(text: str) -> int:
    """How many names ``text`` can expand to at most, counted on its brackets without making one (each comma item:
    the product of its brackets' range sizes); a bracket that is not plain ranges counts 1 and is left to the
    parser. What keeps ``a[0-999999999]`` from output a command printed from being expanded into memory
    (ClusterShell's RangeSet is a set of every index)."""
    total = 0
    for item in split_top(text):
        n = 1
        for body in _BRACKET_BODY.findall(item):
            size = 0
            for r in body.split(","):
                m = _RANGE_NUMS.fullmatch(r)
                if m:
                    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
                    size += max(0, hi - lo + 1)
                else:
                    size += 1
            n *= max(size, 1)
        total += n
    return total


def expand(hostlist: str, where: str = "hostlist", limit: int | None = None) -> list[str]:
    """``gpu[01-03]`` -> ``['gpu01', 'gpu02', 'gpu03']`` in NodeSet order (sorted, numerically). ``limit``: a
    UsageError, before anything is expanded, for a list of more hosts than that."""
    if not hostlist or not hostlist.strip():
        return []
    text = hostlist.strip()
    if limit is not None and "[" in text and size_bound(text) > limit:
        raise UsageError(f"{where}: hostlist {text[:60]!r} names more than {limit:,} hosts")
    if _PLAIN.fullmatch(text):
        return [text]
    one = _one_range(text)
    if one is not None:
        prefix, lo, hi, width = one
        return [f"{prefix}{i:0{width}d}" for i in range(lo, hi + 1)]
    NodeSet, NodeSetParseError = _nodeset()
    try:
        return list(NodeSet(hostlist.strip()))
    except NodeSetParseError as exc:
        raise UsageError(f"{where}: invalid hostlist {hostlist!r}: {exc}") from exc


_NUMBERED = re.compile(r"([A-Za-z_][A-Za-z0-9._-]*(?<![0-9]))([0-9]+)")


def _fold_run(hosts: list[str]) -> str | None:
    """Names of one prefix whose numbers, all of one width, are one run without gaps (a spine's 8 leaf switches,
    a node group) -> ``prefix[first-last]`` as NodeSet prints it; None for anything else (NodeSet decides)."""
    first = _NUMBERED.fullmatch(hosts[0])
    if first is None or len(hosts) < 2:
        return None
    prefix, digits = first.groups()
    width = len(digits)
    nums = []
    for h in hosts:
        m = _NUMBERED.fullmatch(h)
        if m is None or m.group(1) != prefix or len(m.group(2)) != width:
            return None
        nums.append(int(m.group(2)))
    nums.sort()
    lo, hi = nums[0], nums[-1]
    if hi - lo + 1 != len(nums) or len(set(nums)) != len(nums):
        return None
    # a run of more than MAX_RANGE hosts: ranges of MAX_RANGE each (a last one of a single host is its name, as
    # NodeSet prints one)
    return ",".join(f"{prefix}[{a:0{width}d}-{min(a + MAX_RANGE - 1, hi):0{width}d}]" if a < hi else f"{prefix}{a:0{width}d}"
                    for a in range(lo, hi + 1, MAX_RANGE))


def exact_cover(parts: Iterable[str], whole: Iterable[str]) -> int | None:
    """The number of hosts when the hostlists ``parts`` are pairwise disjoint and together name exactly the hosts of
    the pairwise disjoint ``whole`` (every leaf switch's nodes known, none in two leaves, none in no leaf), decided on
    the ranges without making a name; None when that is not shown -- a finding, or a list not of the one-range shape,
    or one prefix written with two widths -- and the caller expands and looks host by host."""
    sides = []
    for specs in (parts, whole):
        by_prefix: dict[str, tuple[int, list[tuple[int, int]]]] = {}
        for spec in specs:
            one = _one_range(spec.strip())
            if one is None:
                return None
            prefix, lo, hi, width = one
            w, ivs = by_prefix.setdefault(prefix, (width, []))
            if w != width:
                return None
            ivs.append((lo, hi))
        runs: dict[str, tuple[int, list[list[int]]]] = {}
        for prefix, (width, ivs) in by_prefix.items():
            ivs.sort()
            merged: list[list[int]] = []
            for lo, hi in ivs:
                if merged and lo <= merged[-1][1]:
                    return None  # two lists share hosts
                if merged and lo == merged[-1][1] + 1:
                    merged[-1][1] = hi
                else:
                    merged.append([lo, hi])
            runs[prefix] = (width, merged)
        sides.append(runs)
    if sides[0] != sides[1]:
        return None
    return sum(hi - lo + 1 for _w, merged in sides[0].values() for lo, hi in merged)


def fold(hosts: Iterable[str]) -> str:
    """``['gpu01', 'gpu02', 'gpu03']`` -> ``gpu[01-03]``; deterministic for any input order."""
    hosts = list(hosts)
    if not hosts:
        return ""
    if _PLAIN.fullmatch(hosts[0]) and all(h == hosts[0] for h in hosts):
        return hosts[0]  # one name (a job's one leaf switch, on every submit): NodeSet prints a plain name as it is
    run = _fold_run(hosts)
    if run is not None:
        return run
    return _within_max_range(_nodeset()[0].fromlist(hosts))


_RANGE_SPAN = re.compile(r"(\d+)-(\d+)", re.ASCII)


def _longest_range(text: str) -> int:
    """The most hosts one bracket range of a NodeSet-printed list spans (``a[1-70000,70002]`` -> 70,000)."""
    return max((int(b) - int(a) + 1 for body in _BRACKET_BODY.findall(text) for a, b in _RANGE_SPAN.findall(body)),
               default=1)


def _within_max_range(ns: Any) -> str:
    """A NodeSet as Slurm can read it: NodeSet's own fold where no range in it passes MAX_RANGE; else its hosts, in
    NodeSet's order, folded MAX_RANGE at a time and joined by commas (no range of a fold of n hosts spans more than
    n). Only a list of more than 65,536 hosts pays for the expansion."""
    text = str(ns)
    if len(ns) <= MAX_RANGE or _longest_range(text) <= MAX_RANGE:
        return text
    out = []
    for piece in ns.contiguous():  # each contiguous run of one pattern, in NodeSet's order
        if len(piece) <= MAX_RANGE or _longest_range(str(piece)) <= MAX_RANGE:
            out.append(str(piece))
        else:
            names = list(piece)
            out += [str(type(ns).fromlist(names[i:i + MAX_RANGE])) for i in range(0, len(names), MAX_RANGE)]
    return ",".join(out)


def canonical(hostlist: str, where: str = "hostlist") -> str:
    """Any hostlist -> its folded, sorted form (``node3,node[1-2]`` -> ``node[1-3]``), parsed once as a set:
    much faster than expand + fold on 100k-node inventories."""
    text = hostlist.strip()
    if _PLAIN.fullmatch(text):
        return text
    one = _one_range(text)
    if one is not None and one[2] - one[1] < MAX_RANGE:
        return text  # NodeSet prints these two shapes as they are written
    NodeSet, NodeSetParseError = _nodeset()
    try:
        return _within_max_range(NodeSet(hostlist.strip()))
    except NodeSetParseError as exc:
        raise UsageError(f"{where}: invalid hostlist {hostlist!r}: {exc}") from exc


def count(hostlist: str) -> int:
    return len(_nodeset()[0](hostlist)) if hostlist else 0

