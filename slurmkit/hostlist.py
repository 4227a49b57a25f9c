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
    return f"{prefix}[{lo:0{width}d}-{hi:0{width}d}]"


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
    return str(_nodeset()[0].fromlist(hosts))


def canonical(hostlist: str, where: str = "hostlist") -> str:
    """Any hostlist -> its folded, sorted form (``node3,node[1-2]`` -> ``node[1-3]``), parsed once as a set:
    much faster than expand + fold on 100k-node inventories."""
    text = hostlist.strip()
    if _PLAIN.fullmatch(text) or _one_range(text) is not None:
        return text  # NodeSet prints these two shapes as they are written
    NodeSet, NodeSetParseError = _nodeset()
    try:
        return str(NodeSet(hostlist.strip()))
    except NodeSetParseError as exc:
        raise UsageError(f"{where}: invalid hostlist {hostlist!r}: {exc}") from exc


def count(hostlist: str) -> int:
    return len(_nodeset()[0](hostlist)) if hostlist else 0

