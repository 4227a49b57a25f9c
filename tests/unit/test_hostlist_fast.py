"""hostlist.expand/canonical answer a plain name and a one-range bracket without NodeSet (issue 20 item 8: 100,000
nodes); for every list they must say what NodeSet says."""

from __future__ import annotations

from ClusterShell.NodeSet import NodeSet  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkit import hostlist

_names = st.text(alphabet="abz09_.-", min_size=1, max_size=6)


def _nodeset(text: str) -> tuple[list[str], str] | None:
    try:
        ns = NodeSet(text)
        return list(ns), str(ns)
    except Exception:
        return None


@st.composite
def one_range(draw: st.DrawFn) -> str:
    prefix = draw(_names)
    lo = draw(st.integers(0, 120))
    hi = draw(st.integers(0, 130))
    wa = draw(st.integers(0, 4))
    wb = draw(st.integers(0, 4))
    return f"{prefix}[{lo:0{wa}d}-{hi:0{wb}d}]"


@settings(max_examples=600, deadline=None)
@given(st.one_of(one_range(), _names))
def test_the_fast_shapes_say_what_nodeset_says(text: str) -> None:
    want = _nodeset(text)
    if want is None:  # NodeSet refuses it: the fast path must not have answered (it raises like NodeSet)
        try:
            got = hostlist.expand(text)
        except Exception:
            return
        raise AssertionError(f"{text!r}: NodeSet refuses it, expand gave {got[:3]}")
    assert hostlist.expand(text) == want[0], text
    if hostlist._longest_range(want[1]) <= hostlist.MAX_RANGE:
        assert hostlist.canonical(text) == want[1], text
    else:  # NodeSet folds into a range Slurm refuses (issue 32 item 7b): the same hosts, split at MAX_RANGE
        got = hostlist.canonical(text)  # (NodeSet reads "90[0-100]" as the 89,201 names 900..90100)
        assert hostlist._longest_range(got) <= hostlist.MAX_RANGE and hostlist.expand(got) == want[0], (text, got)


def test_the_bench_leaf_shape_takes_the_fast_path() -> None:
    assert hostlist._one_range("gpu[000033-000064]") == ("gpu", 33, 64, 6)
    assert hostlist._one_range("a1[1-2]") is None  # NodeSet prints it a[11-12]
    assert hostlist._one_range("gpu[01-100]") is None  # NodeSet refuses the width change


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(_names, one_range()), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_fold_says_what_nodeset_says(specs: list[str], rnd) -> None:  # type: ignore[no-untyped-def]
    names: list[str] = []
    for spec in specs:
        got = _nodeset(spec)
        if got is not None:
            names += got[0]
    if not names:
        return
    rnd.shuffle(names)
    assert hostlist.fold(names) == str(NodeSet.fromlist(names)), names[:5]


def test_a_run_of_names_takes_the_fast_fold() -> None:
    assert hostlist._fold_run([f"leaf{i:05d}" for i in (7, 0, 1, 2, 3, 4, 5, 6)]) == "leaf[00000-00007]"
    assert hostlist._fold_run(["n8", "n9", "n10"]) is None  # widths differ: NodeSet decides


def test_one_name_folds_without_nodeset() -> None:
    """A job on one leaf switch folds ["leaf1"] on every submit: answered without importing ClusterShell (~20 ms of
    CPU here, measured), as NodeSet prints it."""
    import subprocess
    import sys

    code = ("import sys; from slurmkit import hostlist; "
            "print(hostlist.fold(['leaf1']), hostlist.fold(['gpu007', 'gpu007']), 'ClusterShell' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["leaf1", "gpu007", "False"]
    for name in ("leaf1", "gpu007", "a.b-0", "0", "n_1"):
        assert hostlist.fold([name]) == str(NodeSet.fromlist([name])) == name


@settings(max_examples=500, deadline=None)
@given(st.lists(one_range(), min_size=1, max_size=5), st.lists(one_range(), min_size=1, max_size=3))
def test_exact_cover_is_only_claimed_when_the_hosts_say_so(parts: list[str], whole: list[str]) -> None:
    """exact_cover may decline (None) any time; when it answers, expanding must agree (parts against themselves
    too, so that the answer is not always None)."""
    _agrees(parts, whole)
    _agrees(parts, parts)


def _agrees(parts: list[str], whole: list[str]) -> None:
    got = hostlist.exact_cover(parts, whole)
    if got is None:
        return
    ps = [hostlist.expand(p) for p in parts]
    ws = [hostlist.expand(w) for w in whole]
    flat_p = [h for p in ps for h in p]
    flat_w = [h for w in ws for h in w]
    assert len(set(flat_p)) == len(flat_p) and len(set(flat_w)) == len(flat_w)
    assert set(flat_p) == set(flat_w) and got == len(flat_p)


def test_exact_cover_of_a_fat_tree() -> None:
    leaves = [f"gpu[{k * 32 + 1:06d}-{k * 32 + 32:06d}]" for k in range(3125)]
    assert hostlist.exact_cover(leaves, ["gpu[050001-100000]", "gpu[000001-050000]"]) == 100_000
    assert hostlist.exact_cover(leaves[1:], ["gpu[000001-100000]"]) is None  # 32 nodes in no leaf
    assert hostlist.exact_cover([*leaves, "gpu[000001-000002]"], ["gpu[000001-100000]"]) is None  # in two leaves
    assert hostlist.exact_cover(["gpu[1-9]", "gpu[10-20]"], ["gpu[1-20]"]) is None  # two widths: expand instead
