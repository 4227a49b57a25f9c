"""Malformed Slurm JSON (issue 32 item 7): every JSON parser of backend/parse.py ends in one JSONReadError line that
names the command and the field, never a traceback; hostile and fuzzed documents over the recorded answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.backend import jsonread, parse
from slurmkit.backend.jsonread import JSONReadError
from slurmkit.errors import ParseError, SlurmkitError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RECORDED = {
    "sinfo.json": DATA / "sinfo.json",
    "24.11/sinfo.json": DATA / "24.11" / "sinfo.json",
    "24.11/scontrol_show_node.json": DATA / "24.11" / "scontrol_show_node.json",
    "squeue.json": DATA / "squeue.json",
    "24.11/squeue.json": DATA / "24.11" / "squeue.json",
}
WHAT = "scontrol --json show node"


def _nodes(text: str) -> object:
    return parse.parse_nodes_json(text, what=WHAT)


def _jobs(text: str) -> object:
    return parse.parse_squeue_json(text, what="squeue --json")


PARSERS = (_nodes, _jobs)


@pytest.mark.parametrize("text, message", [
    ('{"nodes": [1,2,3]}', f"{WHAT}: nodes[0]: expected an object, got 1"),
    ('{"nodes": [{"name": "a"}, {"name": "b"}, {"name": "c", "cpus": 1e400}]}',
     f"{WHAT}: nodes[2].cpus: expected an integer, got 1e400"),
    ('{"nodes": [{"name": "a", "cpus": NaN}]}', f"{WHAT}: nodes[0].cpus: expected an integer, got NaN"),
    ('{"nodes": [{"name": "a", "cpus": -Infinity}]}', f"{WHAT}: nodes[0].cpus: expected an integer, got -Infinity"),
    ('{"nodes": [{"name": "a", "cpus": 2.5}]}', f"{WHAT}: nodes[0].cpus: expected an integer, got 2.5"),
    ('{"nodes": [{"name": "a", "cpus": "8"}]}', f'{WHAT}: nodes[0].cpus: expected an integer, got "8"'),
    ('{"nodes": [{"name": "a", "cpus": true}]}', f"{WHAT}: nodes[0].cpus: expected an integer, got true"),
    ('{"nodes": [{"name": "a", "cpus": -1}]}', f"{WHAT}: nodes[0].cpus: expected an integer >= 0, got -1"),
    ('{"nodes": [{"name": "a", "real_memory": ' + "9" * 5000 + "}]}",
     f"{WHAT}: nodes[0].real_memory: expected an integer, got " + "9" * 37 + "..."),
    ('{"nodes": [{"name": "a", "cpus": 18446744073709551616}]}',
     f"{WHAT}: nodes[0].cpus: expected an integer >= 0, got 18446744073709551616"),
    ('{"nodes": [{"cpus": 4}]}', f"{WHAT}: nodes[0].name: missing"),
    ('{"nodes": [{"name": 7}]}', f"{WHAT}: nodes[0].name: expected a string, got 7"),
    ('{"nodes": 5}', f"{WHAT}: nodes: expected a list, got 5"),
    ('{"nodes": [{"name": "a", "state": [["IDLE"]]}]}', f"{WHAT}: nodes[0].state[0]: expected a string, got a list"),
    ('{"nodes": [{"name": "a", "features": {"x": 1}}]}',
     f"{WHAT}: nodes[0].features: expected a list of strings, got an object"),
    ('{"sinfo": [1]}', f"{WHAT}: sinfo[0]: expected an object, got 1"),
    ('{"sinfo": [{"node": 5}]}', f"{WHAT}: sinfo[0].node: expected an object, got 5"),
    ('{"sinfo": [{"nodes": {"nodes": "abc"}, "cpus": {"maximum": 1e999}}]}',
     f"{WHAT}: sinfo[0].cpus.maximum: expected an integer, got 1e999"),
    ('{"nodes": [{"name": "a", "cpus": {"set": true, "infinite": false, "number": 1e400}}]}',
     f"{WHAT}: nodes[0].cpus.number: expected an integer, got 1e400"),
    ('{"meta": [], "nodes": []}', f"{WHAT}: meta: expected an object, got a list"),
    ("[1, 2]", f"{WHAT}: expected a JSON object at the top, got a list"),
    ('"nodes"', f'{WHAT}: expected a JSON object at the top, got "nodes"'),
    ("", f"{WHAT}: not JSON (Expecting value at line 1 column 1)"),
    ("[" * 100_000 + "]" * 100_000, f"{WHAT}: not JSON slurmkit reads (nested deeper than Python's recursion limit)"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000,
     f"{WHAT}: not JSON slurmkit reads (nested deeper than Python's recursion limit)"),
])
def test_node_json_one_line_naming_the_command_and_the_field(text: str, message: str) -> None:
    with pytest.raises(JSONReadError) as exc:
        _nodes(text)
    assert str(exc.value) == message
    assert "\n" not in str(exc.value)
    assert isinstance(exc.value, ParseError) and isinstance(exc.value, SlurmkitError)


@pytest.mark.parametrize("text, message", [
    ('{"jobs": [1]}', "squeue --json: jobs[0]: expected an object, got 1"),
    ('{"jobs": [{"job_id": 1, "nodes": 5}]}', "squeue --json: jobs[0].nodes: expected a string, got 5"),
    ('{"jobs": [{"job_id": 1, "nodes": "a[1-"}]}', "squeue --json: jobs[0].nodes: not a hostlist: "),
    ('{"jobs": [{"job_id": 1, "nodes": "a[0-999999999]"}]}', "squeue --json: jobs[0].nodes: not a hostlist: "),
    ('{"jobs": [{"nodes": "a1"}]}', "squeue --json: jobs[0].job_id: missing"),
    ('{"jobs": [{"job_id": 1e400}]}', "squeue --json: jobs[0].job_id: expected an integer, got 1e400"),
    ('{"jobs": [{"job_id": 3, "restart_cnt": "x"}]}', 'squeue --json: jobs[0].restart_cnt: expected an integer, got "x"'),
])
def test_squeue_json_one_line(text: str, message: str) -> None:
    with pytest.raises(JSONReadError) as exc:
        _jobs(text)
    assert str(exc.value).startswith(message)
    assert "\n" not in str(exc.value)


def test_the_backend_names_the_command() -> None:
    """The CLI backend's nodes() hands the command it ran to the parser: the line names it."""
    from slurmkit.backend.cli import CLIBackend
    from slurmkit.backend.run import Result

    b = CLIBackend()
    b._version = "24.11.5"
    b._run = lambda argv, **kw: Result(tuple(argv), 0, '{"nodes": [{"name": "a", "cpus": 1e400}]}', "")  # type: ignore[method-assign]
    with pytest.raises(JSONReadError, match=r"^scontrol --json show node: nodes\[0\]\.cpus: expected an integer, got 1e400$"):
        b.nodes()


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_answers_still_read(name: str) -> None:
    text = RECORDED[name].read_text()
    got = _jobs(text) if "squeue" in name else _nodes(text)
    assert got, name


# --- fuzz: no document makes a parser raise anything but JSONReadError -------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["node[1-", "a[0-99999999]", "(null)", "IDLE", "node[1-4]", "", "gpu:h100:8(S:0-1)"]),
)
_values = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
    st.sampled_from(["nodes", "name", "cpus", "state", "jobs", "job_id", "sinfo", "node", "meta", "plugin",
                     "data_parser", "maximum", "set", "number", "infinite", "features", "reason", "gres"]),
    kids, max_size=4), max_leaves=20)


def _check(text: str) -> None:
    for f in PARSERS:
        try:
            f(text)
        except JSONReadError as exc:
            assert "\n" not in str(exc)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_fuzz_any_json_value(doc: object) -> None:
    _check(json.dumps(doc))


def _paths(v: object, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v[:3]):
            out += _paths(x, (*at, i))
    return out


_DOCS = {n: json.loads(p.read_text()) for n, p in RECORDED.items()}
_PATHS = {n: _paths(d) for n, d in _DOCS.items()}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(_DOCS)), st.data(), _values)
def test_fuzz_recorded_answers_with_one_field_replaced(name: str, data: st.DataObject, junk: object) -> None:
    doc = json.loads(json.dumps(_DOCS[name]))
    path = data.draw(st.sampled_from(_PATHS[name][1:]))
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = junk
    _check(json.dumps(doc))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]",:0123456789.eE-+ tnulrfasNIiy', max_size=60))
def test_fuzz_raw_text(text: str) -> None:
    _check(text)


def test_reader_api() -> None:
    doc = jsonread.loads('{"a": {"b": [{"c": 1}, {"c": {"set": true, "infinite": false, "number": 5}}]},'
                         '"s": "x,y", "l": ["p", "", "q"], "id": 12, "t": true}', "cmd")
    items = doc.obj("a").items("b")
    assert [i.int("c") for i in items] == [1, 5]
    assert items[1].path == "a.b[1]"
    assert doc.strs("s") == ("x", "y") and doc.strs("l") == ("p", "q")
    assert doc.ident("id") == "12" and doc.bool("t") is True
    assert doc.int("missing", 7) == 7 and doc.str("missing", "d") == "d"
    with pytest.raises(JSONReadError, match=r"^cmd: a\.b\[0\]\.c: expected a string, got 1$"):
        items[0].str("c")
    with pytest.raises(JSONReadError, match=r"^cmd: t: expected an integer, got true$"):
        doc.int("t")
