"""Pure parts of `slurmkit nodes add|remove`: the inventory edits, the path per release, the lab's port lists,
and bad input refused with exit 2 before anything changes."""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.elastic import edit, path
from slurmkit.errors import UsageError
from slurmkit.lab.inventory import lab_inventory
from slurmkit.lab.ports import port_list
from slurmkit.model.load import load_cluster_dict

ROOT = Path(__file__).resolve().parents[2]


def _inv(nodes: int = 4) -> dict:
    return lab_inventory(nodes, 8, "h100", 4)


def test_add_to_existing_group_grows_it_and_adds_a_leaf_under_a_new_spine() -> None:
    inv = _inv()
    e = edit.add_hosts(inv, ["node5", "node6", "node7", "node8"], "h100")
    assert e.data["node_groups"][0]["hosts"] == "node[1-8]"
    assert e.data["topology"]["switches"] == [
        {"name": "leaf1", "nodes": "node[1-4]"}, {"name": "leaf2", "nodes": "node[5-8]"},
        {"name": "spine", "switches": "leaf[1-2]"}]
    assert inv == _inv()  # the input is not changed
    load_cluster_dict(e.data)  # and the loader accepts the result


def test_add_new_group_copies_the_shape_and_joins_its_partitions() -> None:
    inv = _inv(8)
    inv["node_groups"][0]["hosts"] = "node[1-8]"
    e = edit.add_hosts(inv, ["node9", "node10"], "h100b")
    g = e.data["node_groups"][1]
    assert g["name"] == "h100b" and g["hosts"] == "node[9-10]" and g["gpus"] == inv["node_groups"][0]["gpus"]
    assert e.data["partitions"][0]["groups"] == ["h100", "h100b"]
    assert {"name": "leaf3", "nodes": "node[9-10]"} in e.data["topology"]["switches"]
    assert {"name": "spine", "switches": "leaf[1-3]"} in e.data["topology"]["switches"]
    c = load_cluster_dict(e.data)
    assert [x.name for x in c.node_groups] == ["h100", "h100b"]


def test_add_into_a_named_existing_leaf() -> None:
    e = edit.add_hosts(_inv(), ["node5"], "h100", switch="leaf1")
    assert e.data["topology"]["switches"] == [{"name": "leaf1", "nodes": "node[1-5]"}]


@pytest.mark.parametrize(("hosts", "group", "kw", "msg"), [
    (["node3"], "h100", {}, "HOSTS: node3 already in node group 'h100'"),
    (["node9"], "x", {"like": "nope"}, "--like: no node group 'nope'"),
    (["node9"], "h100", {"like": "h100"}, "--like: node group 'h100' exists already"),
    (["node9"], "h100", {"switch": "spine"}, None),
])
def test_add_refuses_bad_input(hosts: list[str], group: str, kw: dict, msg: str | None) -> None:
    inv = _inv(8)
    if msg is None:  # an upper switch cannot take nodes
        msg = "--switch: 'spine' is an upper-level switch"
    with pytest.raises(UsageError, match=msg.replace("[", r"\[")):
        edit.add_hosts(inv, hosts, group, **kw)


def test_add_new_group_needs_like_when_several() -> None:
    inv = _inv()
    inv = edit.add_hosts(inv, ["node5"], "b").data
    with pytest.raises(UsageError, match="--like: 'c' is a new node group; name the group it copies"):
        edit.add_hosts(inv, ["node6"], "c")


def test_block_topology_is_refused_with_the_reason() -> None:
    inv = lab_inventory(4, 8, "h100", 4, topology="block")
    with pytest.raises(UsageError, match="topology.blocks"):
        edit.add_hosts(inv, ["node5"], "h100")


def test_remove_drops_empty_group_leaf_and_partition_references() -> None:
    inv = edit.add_hosts(_inv(), ["node5", "node6"], "b").data
    inv["partitions"].append({"name": "bonly", "groups": ["b"]})
    e = edit.remove_hosts(inv, ["node5", "node6"])
    assert [g["name"] for g in e.data["node_groups"]] == ["h100"]
    assert [p["name"] for p in e.data["partitions"]] == ["gpu"] and e.data["partitions"][0]["groups"] == ["h100"]
    assert e.data["topology"]["switches"] == [{"name": "leaf1", "nodes": "node[1-4]"},
                                              {"name": "spine", "switches": "leaf1"}]
    load_cluster_dict(e.data)
    partial = edit.remove_hosts(inv, ["node6"])
    assert partial.data["node_groups"][1]["hosts"] == "node5"


def test_remove_refuses_unknown_or_everything() -> None:
    with pytest.raises(UsageError, match=r"HOSTS: node9 not in any node group"):
        edit.remove_hosts(_inv(), ["node9"])
    with pytest.raises(UsageError, match="every node"):
        edit.remove_hosts(_inv(), [f"node{i}" for i in range(1, 5)])


@pytest.mark.parametrize(("version", "adding", "kind"), [
    ("22.05", True, "restart-ctld"), ("23.11", True, "restart-ctld"), ("24.05", False, "restart-ctld"),
    ("24.11", True, "reconfigure"), ("24.11", False, "reconfigure"), ("25.05", True, "reconfigure"),
])
def test_path_per_release_cites_its_source(version: str, adding: bool, kind: str) -> None:
    p = path.choose(version, adding)
    assert p.kind == kind
    assert "faq.shtml (24.11)" in p.why
    assert ("sufficient on Slurm 24.11 and newer" in p.why) == (kind == "reconfigure")
    assert "dynamic_nodes.shtml" in p.statement("add")


@pytest.mark.parametrize("version", ["22.05", "24.11", "25.11", "26.05"])
def test_why_not_dynamic_nodes_follows_the_release(version: str) -> None:
    """From 25.11 dynamic nodes join a topology at run time (`scontrol update NodeName= Topology=`, scontrol(1)
    25.11 and 26.05), so "dynamic nodes must be in topology.conf" is said only before it."""
    said = path.choose(version, True).statement("add")
    late = version >= "25.11"
    assert ("must be in topology.conf" in said) is not late
    assert ("join the topology at run time" in said) is late


def test_port_list_is_a_slurm_hostlist_of_ports() -> None:
    assert port_list([29001]) == "29001"
    assert port_list([29001, 29002, 29003, 29004]) == "[29001-29004]"
    assert port_list([29001, 29002, 29005]) == "[29001-29002,29005]"


def test_cli_bad_input_exits_2_and_changes_nothing(tmp_path: Path) -> None:
    inv = _inv()
    (tmp_path / "slurmkit.yaml").write_text(yaml.safe_dump(inv, sort_keys=False))
    (tmp_path / "slurm.conf").write_text("ClusterName=lab\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")}
    for argv, msg in [
        (["add", "node3", "--group", "h100"], "HOSTS: node3 already in node group 'h100'"),
        (["add", "node[5-", "--group", "h100"], "HOSTS: invalid hostlist"),
        (["remove", "node9"], "HOSTS: node9 not in any node group"),
    ]:
        res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "nodes", *argv], capture_output=True,
                             text=True, env=env, cwd=ROOT, timeout=60)
        assert res.returncode == 2, res.stderr
        assert msg in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert copy.deepcopy(inv) == yaml.safe_load((tmp_path / "slurmkit.yaml").read_text())


@pytest.mark.parametrize(("kw", "msg"), [
    ({"switch": "lef2"}, "--switch: no switch 'lef2' in topology.switches (leaf switches: leaf1); "
                         "did you mean 'leaf1'? (--new-switch makes a new leaf of that name)"),
    ({"switch": "rack7"}, "--switch: no switch 'rack7' in topology.switches (leaf switches: leaf1) (--new-switch"),
    ({"new_switch": True}, "--new-switch: name the new leaf with --switch"),
    ({"switch": "leaf1", "new_switch": True}, "--new-switch: switch 'leaf1' exists already"),
])
def test_add_refuses_an_unknown_switch_unless_new_switch(kw: dict, msg: str) -> None:
    # a typo in --switch used to wire the nodes to a new leaf of that name, silently
    with pytest.raises(UsageError) as err:
        edit.add_hosts(_inv(), ["node5"], "h100", **kw)
    assert msg in str(err.value)


def test_add_with_new_switch_makes_that_leaf() -> None:
    e = edit.add_hosts(_inv(), ["node5", "node6"], "h100", switch="rack7", new_switch=True)
    assert {"name": "rack7", "nodes": "node[5-6]"} in e.data["topology"]["switches"]
    assert {"name": "spine", "switches": "leaf1,rack7"} in e.data["topology"]["switches"]
    load_cluster_dict(e.data)


def _recorded_jobs(release: str) -> list:
    from slurmkit.backend.parse import parse_scontrol_jobs

    d = ROOT / "tests" / "data" / "slurm" / release
    return parse_scontrol_jobs((d / "scontrol_show_job.txt").read_text())


def test_stranded_jobs_pinned_to_removed_hosts() -> None:
    """Recorded `scontrol -o show job` (24.11, tests/data/slurm/record.py; the 22.05 one has no -w): job 1 runs on
    node[5-6] pinned there (-w), job 2 on node1 (-w node1). The lab test judges it on both releases."""
    from slurmkit.elastic.change import stranded_jobs

    jobs = _recorded_jobs("24.11")
    assert [(j.job_id, j.state, j.raw["ReqNodeList"]) for j in jobs][:2] == [
        ("1", "RUNNING", "node[5-6]"), ("2", "RUNNING", "node1")]
    # waited for: a running job ends before the change lands
    assert stranded_jobs(jobs, ["node5"], (), requeue=False) == {}
    # requeued, it would be pending with ReqNodeList=node[5-6] when node5 is gone: Slurm fails it
    assert stranded_jobs(jobs, ["node5"], (), requeue=True) == {
        "1": "requeued by --requeue, requires node5 (-w, ReqNodeList=node[5-6])"}
    assert stranded_jobs(jobs, ["node7"], (), requeue=True) == {}  # neither is on node7 nor needs it
    # the same job queued (pending) is stranded with or without --requeue; so is one whose partition goes
    pending = [dataclasses.replace(j, state="PENDING", nodes=()) for j in jobs[:2]]
    assert stranded_jobs(pending, ["node6", "node8"], (), requeue=False) == {
        "1": "pending, requires node6 (-w, ReqNodeList=node[5-6])"}
    assert stranded_jobs(pending, ["node8"], ("gpu",), requeue=False) == {
        "1": "pending, in partition gpu, which goes with its last node group",
        "2": "pending, in partition gpu, which goes with its last node group"}


def test_remove_reports_the_partitions_that_go() -> None:
    inv = edit.add_hosts(_inv(), ["node5", "node6"], "b").data
    inv["partitions"].append({"name": "bonly", "groups": ["b"]})
    assert edit.remove_hosts(inv, ["node5", "node6"]).dropped_partitions == ("bonly",)
    assert edit.remove_hosts(inv, ["node6"]).dropped_partitions == ()


_HOLDER = """
import sys
from pathlib import Path
from slurmkit.elastic import change
with change.locked(Path(sys.argv[1]), "slurmkit nodes add node5 --group h100", 0):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_nodes_command_refuses_naming_the_lock_holder(tmp_path: Path) -> None:
    """Two real processes: one holds the lock (as a running `nodes add` does from reading the inventory to its
    end); `nodes remove --lock-wait 0` refuses with one line naming its pid and command, changing nothing, and
    with a wait it says whom it waits for and goes on once the lock is free."""
    (tmp_path / "slurmkit.yaml").write_text(yaml.safe_dump(_inv(), sort_keys=False))
    (tmp_path / "slurm.conf").write_text("ClusterName=lab\n")
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        assert before[".slurmkit-nodes.lock"] == f"pid {holder.pid} (slurmkit nodes add node5 --group h100)\n".encode()
        argv = [sys.executable, "-m", "slurmkit.cli.main", "nodes", "remove", "node3"]
        res = subprocess.run([*argv, "--lock-wait", "0"], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=60)
        assert res.returncode == 1, res.stderr
        assert res.stderr.strip().splitlines() == [
            f"slurmkit: error: {tmp_path}/.slurmkit-nodes.lock: held by pid {holder.pid} (slurmkit nodes add node5 "
            "--group h100); gave up after 0s (--lock-wait); nothing changed"]
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
        waiter = subprocess.Popen([*argv, "--lock-wait", "120"], stderr=subprocess.PIPE, text=True, env=env,
                                  cwd=ROOT)
        assert waiter.stderr is not None
        line = waiter.stderr.readline()  # said before it waits
        assert line.startswith(f"nodes: waiting up to 120s for pid {holder.pid} (slurmkit nodes add"), line
        assert waiter.poll() is None
        holder.stdin.close()  # type: ignore[union-attr]
        assert holder.wait(timeout=60) == 0
        rest = waiter.stderr.read()
        waiter.wait(timeout=120)
        # it got the lock: it read the inventory then (and, with no slurmctld here, stopped at its first query)
        assert "nodes: node3 leave the inventory" in rest, rest
        assert "gave up" not in rest
        assert not (tmp_path / ".slurmkit-nodes.lock").exists()  # released and removed
    finally:
        holder.kill()
        holder.wait()


def test_a_site_is_told_to_start_slurmd_and_what_the_command_waits_for(tmp_path: Path) -> None:
    from slurmkit.elastic.change import Site

    said: list[str] = []
    (tmp_path / "slurm.conf").write_text("ClusterName=c\n")
    Site(tmp_path).start_nodes(["node5", "node6"], said.append)
    (tmp_path / "slurm.conf").write_text("ClusterName=c\nSlurmctldParameters=enable_configless\n")
    Site(tmp_path).start_nodes(["node5"], said.append)
    assert said == [
        f"start slurmd on node[5-6] now, e.g. `systemctl start slurmd` there (each needs the new files from "
        f"{tmp_path} first); they stay drained ('slurmkit: joining the cluster (nodes add)') until every one has "
        "registered",
        "start slurmd on node5 now, e.g. `systemctl start slurmd` there (they fetch the new files from slurmctld "
        "when slurmd --conf-server starts); they stay drained ('slurmkit: joining the cluster (nodes add)') until "
        "every one has registered"]


def test_conf_apply_takes_the_nodes_lock(tmp_path: Path) -> None:
    """Issue 24 item 8: `conf apply` writes the files and the inventory copy that `nodes add|remove` edit; while one
    of those holds the lock, apply waits --lock-wait and refuses naming it, nothing written (before, it wrote)."""
    from slurmkit.elastic import change

    def sk(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)

    out = tmp_path / "etc"
    assert sk("conf", "generate", str(ROOT / "examples" / "lab.yaml"), "-o", str(out), "--no-real-parse").returncode == 0
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["node_groups"][0]["weight"] = 50
    p = tmp_path / "weight.yaml"
    p.write_text(yaml.safe_dump(inv, sort_keys=False))
    before = (out / "slurm.conf").read_text()
    with change.locked(out, "slurmkit nodes add node9", 1):
        res = sk("conf", "apply", str(p), "--to", str(out), "--no-real-parse", "--lock-wait", "0.5")
        assert res.returncode == 1, res.stdout + res.stderr
        last = res.stderr.strip().splitlines()[-1]
        assert f"held by pid {os.getpid()} (slurmkit nodes add node9); gave up after 0.5s" in last, res.stderr
        assert "nothing changed" in last and (out / "slurm.conf").read_text() == before
    res = sk("conf", "apply", str(p), "--to", str(out), "--no-real-parse")
    assert res.returncode == 0 and "Weight=50" in (out / "slurm.conf").read_text(), res.stderr
    assert not (out / change.LOCK_NAME).exists()


def test_a_node_readded_goes_back_to_its_leaf_or_says_why_not() -> None:
    """Issue 24 item 8: node3 taken from leaf1 (node[1-4]) and added again went on a new one-node leaf3."""
    inv = lab_inventory(8, 8, "h100", 4)
    out = edit.remove_hosts(inv, ["node3"])
    assert "node3 left leaf 'leaf1' (`nodes add node3 --group h100 --switch leaf1` puts it back)" in out.summary
    back = edit.add_hosts(out.data, ["node3"], "h100")
    assert back.data["topology"] == inv["topology"]  # leaf1 node[1-4] again, no leaf3
    assert "leaf switch 'leaf1' grows to node[1-4]: node3 fills the gap in its node list" in back.summary
    load_cluster_dict(back.data)
    # a node from a leaf's end leaves no gap: a new leaf, and the summary says why (and how to choose)
    out = edit.remove_hosts(inv, ["node8"])
    back = edit.add_hosts(out.data, ["node8"], "h100")
    assert {"name": "leaf3", "nodes": "node8"} in back.data["topology"]["switches"]
    assert back.summary.endswith("no leaf's node list has a gap that node8 fills, so where a node was is not in the "
                                 "inventory (--switch LEAF puts it in an existing leaf)")
    assert edit.add_hosts(out.data, ["node8"], "h100", switch="leaf2").data["topology"] == inv["topology"]
    # hosts of two leaves at once: refused, naming each
    out = edit.remove_hosts(inv, ["node3", "node6"])
    with pytest.raises(UsageError, match="node3: a gap in 'leaf1'; node6: a gap in 'leaf2'"):
        edit.add_hosts(out.data, ["node3", "node6"], "h100")
