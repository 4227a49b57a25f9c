"""Parsers against output recorded from the real lab: tests/data/slurm/ (Slurm 22.05.8) and tests/data/slurm/24.11/
(Slurm 24.11.5, recorded by tests/data/slurm/record.py from the same scene). Every test that takes ``rel`` runs on
both recordings: one parser per output kind, whatever the release."""

import dataclasses
from pathlib import Path

import pytest

from slurmkit.backend import parse

D = Path(__file__).resolve().parents[1] / "data" / "slurm"
RELEASES = ("22.05", "24.11")


def read(name: str, rel: str = "22.05") -> str:
    return (D / name if rel == "22.05" else D / rel / name).read_text()


@pytest.fixture(params=RELEASES)
def rel(request: pytest.FixtureRequest) -> str:
    return request.param


def test_sbatch_parsable(rel: str):
    assert parse.parse_sbatch_parsable(read("sbatch_parsable.txt", rel)) == "1"
    assert parse.parse_sbatch_parsable("42;lab\n") == "42"
    assert parse.parse_sbatch_parsable("7_3\n") == "7_3"
    with pytest.raises(parse.ParseError):
        parse.parse_sbatch_parsable("sbatch: error: Batch job submission failed\n")


def test_sbatch_test_only(rel: str):
    assert parse.parse_sbatch_test_only(read("sbatch_test_only.txt", rel)).startswith("20")
    assert parse.parse_sbatch_test_only("nothing") is None


def test_scontrol_nodes_states_reasons_gres(rel: str):
    nodes = {n.name: n for n in parse.parse_scontrol_nodes(read("scontrol_show_node.txt", rel))}
    assert len(nodes) == 8
    assert nodes["node1"].state == "mixed" and nodes["node1"].used_gpus == 2 and nodes["node1"].free_gpus == 6
    assert nodes["node5"].state == "allocated" and nodes["node5"].free_gpus == 0
    assert nodes["node2"].state == "idle" and nodes["node2"].available and nodes["node2"].total_gpus == 8
    n8 = nodes["node8"]
    assert n8.drained and not n8.available
    # the reason keeps its spaces; scontrol's [user@time] stamp can be stripped for comparison
    assert parse.strip_reason_stamp(n8.reason) == "slurmkit: gpu3 xid79 fell off the bus"
    assert parse.strip_reason_stamp(nodes["node7"].reason) == "admin maintenance"
    assert (n8.sockets, n8.cores_per_socket, n8.threads_per_core, n8.real_memory) == (2, 4, 1, 32000)
    assert n8.features == ("h100", "nvlink") and n8.partitions == ("gpu",)


def test_scontrol_jobs(rel: str):
    jobs = {j.job_id: j for j in parse.parse_scontrol_jobs(read("scontrol_show_job.txt", rel))}
    j1 = jobs["1"]
    assert j1.state == "RUNNING" and j1.nodes == ("node5", "node6") and j1.name == "two node"
    assert j1.batch_host == "node5" and not j1.finished and j1.restarts == 0
    assert jobs["2"].nodes == ("node1",)


def test_sinfo_nodes(rel: str):
    nodes = {n.name: n for n in parse.parse_sinfo_nodes(read("sinfo_nodes.txt", rel))}
    assert nodes["node7"].state == "idle" and nodes["node7"].drained and nodes["node7"].reason == "admin maintenance"
    assert nodes["node5"].state == "allocated"
    assert nodes["node1"].partitions == ("gpu",)


def test_squeue_text_and_json_filter_client_side():
    jobs = parse.parse_squeue(read("squeue.txt"))
    assert [(j.job_id, j.state, j.nodes) for j in jobs] == [("1", "RUNNING", ("node5", "node6")), ("2", "RUNNING", ("node1",))]
    # 22.05's --json ignores -j/-t: the parser filters
    allj = parse.parse_squeue_json(read("squeue.json"))
    assert {j.job_id for j in allj} == {"1", "2"}
    only = parse.parse_squeue_json(read("squeue.json"), job_ids=["2"])
    assert [j.job_id for j in only] == ["2"] and only[0].nodes == ("node1",)
    assert parse.parse_squeue_json(read("squeue.json"), states=["PENDING"]) == []


def test_sinfo_json_filter():
    nodes = parse.parse_sinfo_json(read("sinfo.json"), names=["node8", "node5"])
    assert sorted(n.name for n in nodes) == ["node5", "node8"]
    n8 = next(n for n in nodes if n.name == "node8")
    assert n8.drained and n8.reason.startswith("slurmkit:")


def test_topology(rel: str):
    sw = parse.parse_topology(read("scontrol_show_topology.txt", rel))
    assert [(s.name, s.level) for s in sw] == [("leaf1", 0), ("leaf2", 0), ("spine", 1)]
    assert sw[0].nodes == ["node1", "node2", "node3", "node4"]
    assert sw[2].switches == ["leaf1", "leaf2"]
    assert parse.parse_topology("No topology information available\n") == []


def test_partition_records(rel: str):
    recs = parse.parse_scontrol_records(read("scontrol_show_partition.txt", rel))
    assert recs[0]["PartitionName"] == "gpu" and recs[0]["MaxTime"] == "1-00:00:00"


def test_version():
    assert parse.parse_version(read("sinfo_version.txt")) == "22.05.8"
    assert parse.parse_version(read("sinfo_version.txt", "24.11")) == "24.11.5"
    with pytest.raises(parse.ParseError):
        parse.parse_version("garbage")


@pytest.mark.parametrize(
    "state,base,flags",
    [
        ("IDLE+DRAIN", "idle", {"DRAIN"}),
        ("idle*", "idle", {"NOT_RESPONDING"}),
        ("drained", "idle", {"DRAIN"}),
        ("draining", "allocated", {"DRAIN"}),
        ("MIXED+COMPLETING", "mixed", {"COMPLETING"}),
        ("DOWN+NOT_RESPONDING", "down", {"NOT_RESPONDING"}),
        ("alloc", "allocated", set()),
        ("DOWN*+DRAIN", "down", {"NOT_RESPONDING", "DRAIN"}),
        ("IDLE*+DRAIN", "idle", {"NOT_RESPONDING", "DRAIN"}),
        ("mix-", "mixed", {"PLANNED"}),
        ("drng", "allocated", {"DRAIN"}),
        ("idle~", "idle", {"POWERED_DOWN"}),
    ],
)
def test_split_state(state, base, flags):
    assert parse.split_state(state) == (base, frozenset(flags))


def test_gres_counts():
    assert parse.gres_gpu_count("gpu:h100:8(S:0-1),shard:16") == 8
    assert parse.gres_gpu_count("gpu:h100:2(IDX:0,3)") == 2
    assert parse.gres_gpu_count("gpu:a100:4,gpu:l40s:2") == 6
    assert parse.gres_gpu_count("(null)") == 0
    assert parse.gres_gpu_count("") == 0


def test_reason_with_equals_signs_and_field_lookalikes():
    line = ("NodeName=gpu7 Arch=x86_64 CoresPerSocket=56 State=IDLE+DRAIN ThreadsPerCore=2 Partitions=train "
            "Reason=slurmkit: gpu0 recovery=reboot; admin said State=IDLE+DRAIN x=1 [root@2026-11-30T01:37:00]")
    rec = parse.parse_scontrol_oneline(line)
    assert rec["State"] == "IDLE+DRAIN" and rec["Partitions"] == "train"
    assert parse.strip_reason_stamp(rec["Reason"]) == "slurmkit: gpu0 recovery=reboot; admin said State=IDLE+DRAIN x=1"
    node = parse.node_from_scontrol(rec)
    assert node.flags == frozenset({"DRAIN"}) and node.partitions == ("train",)
    # without a stamp, a node's Reason still runs to the end of the record
    rec2 = parse.parse_scontrol_oneline("NodeName=n1 State=DOWN* Reason=bad a=b c")
    assert rec2["Reason"] == "bad a=b c" and rec2["State"] == "DOWN*"


def test_recorded_reasons_with_pipe_and_equals(rel: str):
    """Recorded from the lab: `scontrol update nodename=node6 state=drain reason="rack 4 | PDU swap a=b"`."""
    (n6,) = parse.parse_sinfo_nodes(read("sinfo_node_pipe_reason.txt", rel))
    assert (n6.name, n6.state, n6.cpus, n6.partitions, n6.features) == ("node6", "allocated", 8, ("gpu",), ("h100", "nvlink"))
    assert n6.drained and n6.reason == "rack 4 | PDU swap a=b"
    (rec,) = parse.parse_scontrol_nodes(read("scontrol_show_node_equals_reason.txt", rel))
    assert rec.state == "allocated" and rec.flags == frozenset({"DRAIN"})
    assert parse.strip_reason_stamp(rec.reason) == "rack 4 | PDU swap a=b"


def test_health_hooks_read_a_node_like_the_backend(rel: str):
    from slurmkit.health.slurmctl import parse_node

    st = parse_node(read("scontrol_show_node_equals_reason.txt", rel))
    assert (st.base, st.flags, st.reason) == ("allocated", frozenset({"DRAIN"}), "rack 4 | PDU swap a=b")
    ours = parse_node("NodeName=n1 State=IDLE+DRAIN Reason=slurmkit: gpu0 recovery=reboot [root@2026-11-30T01:00:00]")
    assert ours.reason == "slurmkit: gpu0 recovery=reboot"  # read back exactly as set: no re-drain each run


def test_sinfo_json_state_list_of_newer_releases():
    doc = '{"nodes": [{"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "x"}]}'
    (n,) = parse.parse_sinfo_json(doc)
    assert n.state == "idle" and n.drained and not n.available


def _unstamped(nodes: list[parse.NodeInfo]) -> dict[str, parse.NodeInfo]:
    return {n.name: dataclasses.replace(n, reason=parse.strip_reason_stamp(n.reason)) for n in nodes}


def test_scontrol_json_nodes_equal_the_text_ones():
    """24.11: the backend reads `scontrol --json show node`; it must see exactly what the text form shows."""
    text = _unstamped(parse.parse_scontrol_nodes(read("scontrol_show_node.txt", "24.11")))
    js = _unstamped(parse.parse_nodes_json(read("scontrol_show_node.json", "24.11")))
    assert js == text and len(js) == 8
    assert js["node1"].used_gpus == 2 and js["node8"].reason == "slurmkit: gpu3 xid79 fell off the bus"
    assert js["node7"].state == "idle" and js["node7"].drained and js["node1"].alloc_cpus == 1
    assert js["node1"].mem_spec_mb == 1000  # MemSpecLimit / specialized_memory: the per-GPU share depends on it


def test_sinfo_json_per_node_and_grouped_forms(rel: str):
    nodes = {n.name: n for n in parse.parse_sinfo_json(read("sinfo.json", rel))}
    assert sorted(nodes) == [f"node{i}" for i in range(1, 9)]
    assert nodes["node5"].state == "allocated" and nodes["node1"].state == "mixed"
    assert nodes["node7"].drained and nodes["node8"].drained and nodes["node2"].available
    assert nodes["node1"].total_gpus == 8 and nodes["node1"].features == ("h100", "nvlink")
    assert nodes["node1"].partitions == ("gpu",) and nodes["node1"].cpus == 8
    if rel == "24.11":
        # grouped by state: node7 and node8 share one record and one reason, so neither gets it
        assert nodes["node7"].reason == nodes["node8"].reason == ""
    else:
        assert nodes["node8"].reason.startswith("slurmkit:")


def test_squeue_json_of_24_11():
    jobs = {j.job_id: j for j in parse.parse_squeue_json(read("squeue.json", "24.11"))}
    assert jobs["1"].state == "RUNNING" and jobs["1"].nodes == ("node5", "node6") and jobs["1"].name == "two node"
    assert jobs["2"].nodes == ("node1",) and jobs["2"].partition == "gpu"
    assert [j.job_id for j in parse.parse_squeue_json(read("squeue.json", "24.11"), job_ids=["2"])] == ["2"]


def test_block_topology_of_24_11():
    """Recorded from `slurmkit lab up --slurm 24.11 --topology block` (two blocks of 4, BlockSizes=4,8)."""
    from slurmkit.placement import PlacementTopology

    text = read("scontrol_show_topology_block.txt", "24.11")
    recs = parse.parse_blocks(text)
    assert [(r.name, r.index, r.size, r.aggregated) for r in recs] == [
        ("b1", 0, 4, False), ("b2", 1, 4, False), ("b[1-2]", 2, 8, True)]
    assert recs[1].nodes == ["node5", "node6", "node7", "node8"]
    assert parse.parse_topology(text) == []  # no switches in a block topology
    assert parse.parse_blocks(read("scontrol_show_topology.txt", "24.11")) == []
    topo = PlacementTopology.from_block_records(recs, known_nodes=[f"node{i}" for i in range(1, 9)])
    assert topo.kind == "block" and topo.leaf_names == ("b1", "b2") and topo.unit == "block"
    assert topo.leaf_nodes[0] == ("node1", "node2", "node3", "node4")
