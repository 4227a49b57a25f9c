"""slurmkit.acceptance: bandwidth math, the outlier rule, the plan and bisection (on the bandwidth model), the job
rendering, the resumable report and drain (fake backend; the real Slurm runs in tests/integration/test_acceptance_lab.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmkit.acceptance import busbw as bb
from slurmkit.acceptance.plan import Topo, plan
from slurmkit.acceptance.runner import (
    Measurement,
    Settings,
    SlurmExecutor,
    Store,
    choose_transport,
    drain,
    drive,
    select_nodes,
)
from slurmkit.acceptance.simulate import Model, ModelExecutor, cluster
from slurmkit.backend.parse import NodeInfo
from slurmkit.errors import LabError, UsageError
from slurmkit.jobs.spec import ClusterFacts

DATA = Path(__file__).resolve().parents[1] / "data" / "acceptance"


# --- bandwidth math -----------------------------------------------------------------------------------------------

def test_busbw_is_nccl_tests_definition_on_recorded_output() -> None:
    pts = bb.parse_all_reduce_perf((DATA / "all_reduce_perf_h100x8.txt").read_text())
    assert [p.size for p in pts] == [268435456, 536870912, 1073741824, 2147483648]
    for p in pts:  # 8 GPUs: busbw = algbw x 2*7/8, as nccl-tests printed it (2 decimals)
        assert bb.busbw_allreduce(p.algbw, 8) == pytest.approx(p.busbw, abs=0.01)
        assert bb.algbw(p.size, p.time_us / 1e6) == pytest.approx(p.algbw, rel=2e-3)
    assert bb.peak(pts) == 470.73


def test_mpi_tagged_output_two_ranks_busbw_equals_algbw() -> None:
    pts = bb.parse_all_reduce_perf((DATA / "all_reduce_perf_mpi_2node.txt").read_text())
    assert len(pts) == 5
    assert all(p.busbw == p.algbw for p in pts)  # 2(n-1)/n = 1 for n = 2
    assert bb.busbw_allreduce(3.0, 2) == 3.0 and bb.busbw_allreduce(3.0, 1) == 0.0


def test_point_and_sizes() -> None:
    p = bb.point(1 << 30, 0.01, 4)
    assert p.algbw == pytest.approx((1 << 30) / 0.01 / 1e9) and p.busbw == pytest.approx(p.algbw * 1.5)
    assert bb.parse_sizes("1M,256K,1M,1G") == [256 << 10, 1 << 20, 1 << 30]
    with pytest.raises(ValueError, match="'2X'"):
        bb.parse_sizes("1M,2X")


def test_rule_median_mad_and_floor() -> None:
    rule = bb.Rule(k=3, tol=0.25)
    vals = {"a": 100.0, "b": 101.0, "c": 99.0, "d": 100.5, "e": 40.0}
    slow, ref, d, thr = rule.slow(vals)
    assert slow == ["e"] and ref == 100.0 and d == pytest.approx(0.00995, abs=1e-4)  # MAD of the log values
    # a tight distribution: 3 % below the median is beyond 3 MAD but not below the 25 % floor
    assert rule.slow({"a": 100.0, "b": 100.1, "c": 99.9, "d": 97.0})[0] == []
    # a wide one: below the floor but within 3 MAD is not an outlier
    assert rule.slow({"a": 1.0, "b": 0.4, "c": 1.6, "d": 0.7, "e": 1.3})[0] == []
    # two values: no distribution, the best one is the reference
    assert rule.slow({"x": 10.0, "y": 5.0})[0] == ["y"]
    assert rule.slow({"x": None, "y": 5.0})[0] == []
    # CI's loaded lab (22.05 pass): healthy nodes 0.55-1.15 GB/s, the 0.1-CPU node3 at 0.078. A linear MAD (0.27 on a
    # median of 0.80) put the threshold at 0.0005 and node3 passed; over log values it is named
    ci = {"node1": 0.859, "node2": 1.09, "node3": 0.078, "node4": 1.152, "node5": 0.554, "node6": 0.75,
          "node7": 0.665, "node8": 1.102}
    assert bb.Rule(k=3, tol=0.5).slow(ci)[0] == ["node3"]
    # the healthy spread alone names nobody, and a median of 0 (one rank per sweep) judges nothing
    assert bb.Rule(k=3, tol=0.5).slow({k: v for k, v in ci.items() if k != "node3"})[0] == []
    assert rule.slow({"a": 0.0, "b": 0.0, "c": 0.0})[0] == []


def test_expected_from_inventory() -> None:
    e = bb.expected_from("h100", "nvlink", [400] * 8)
    assert e.intra == 450.0 and "NVLink 4" in e.intra_why
    assert e.inter == 400.0 and "8 compute NIC(s) x 400 Gb/s" in e.inter_why
    assert bb.expected_from("a100", "none", []).intra is None
    assert bb.expected_from("b200", "nvlink", []).intra == 900.0
    assert bb.expected_from("l40s", "nvlink", [200]).intra is None


# --- the plan on the bandwidth model --------------------------------------------------------------------------------

def run_model(n: int, leaf: int, slow: dict[str, float] | None = None, levels=("node", "pair", "leaf", "all"),
              tmp: Path | None = None, uplink: float = 1.0, all_pairs: bool = False, expected: float | None = None):
    nodes, leaf_of, bw = cluster(n, leaf, slow=slow)
    ex = ModelExecutor(Model(bw, leaf_of, uplink=uplink))
    store = Store(str(tmp or "/nonexistent"))
    store.doc = {"measurements": {}, "pending": {}}
    findings = drive(plan(Topo(tuple(nodes), leaf_of), levels, bb.Rule(), {"all": expected}, all_pairs=all_pairs),
                     ex, store, lambda m: None)
    return findings, ex, store


def test_healthy_cluster_has_no_finding() -> None:
    findings, ex, _ = run_model(8, 4)
    assert findings == []
    assert ex.jobs_submitted == 8 + 8 + 2 + 1  # nodes, two matchings, leaves, all


def test_slow_node_named_alone_and_confirmed_in_fewer_jobs_than_all_pairs() -> None:
    findings, ex, store = run_model(8, 4, slow={"n03": 10.0})
    assert [(f.kind, f.nodes, f.confirmed) for f in findings] == [("node", ("n03",), True)]
    assert ex.jobs_submitted < 8 * 7 // 2
    # named by the node level, confirmed beside a control in two rounds, then left out of the later levels
    assert findings[0].evidence == ["node:measure:n03", "node:confirm:n03", "node:reconfirm:n03"]
    assert not any("n03" in k for k in store.measurements if not k.startswith("node:"))


@pytest.mark.parametrize("n", [64, 512, 4096])
def test_leaf_bisection_is_logarithmic(n: int) -> None:
    slow = cluster(n, 32)[0][37]
    findings, ex, _ = run_model(n, 32, slow={slow: 5.0}, levels=("leaf",))
    assert [f.nodes for f in findings if f.confirmed] == [(slow,)]
    leaves = n // 32
    # leaves, the bisection, resolve + control, then (one level's evidence only) two re-measurements beside controls
    assert ex.jobs_submitted == leaves + 2 * int(math.log2(32 // 2)) + 2 + 1 + 2 + 2


def test_all_level_bisects_only_against_an_expected_value() -> None:
    slow = "n0011"
    nodes = cluster(4096, 32)[0]
    assert slow in nodes
    findings, ex, _ = run_model(4096, 32, slow={slow: 5.0}, levels=("all",), expected=50.0)
    assert [f.nodes for f in findings if f.confirmed] == [(slow,)]
    assert ex.jobs_submitted <= 1 + 2 * 12 + 3 + 2
    findings, ex, _ = run_model(64, 32, slow={"n11": 5.0}, levels=("all",), expected=None)
    assert findings == [] and ex.jobs_submitted == 1  # one number, no reference: nothing to judge


def test_slow_link_is_a_pair_finding_not_a_node() -> None:
    # a node slow only towards one partner: model it as an uplink factor on cross-leaf pairs of 2 leaves of 1
    nodes, leaf_of, bw = cluster(8, 4)
    model = Model(bw, leaf_of)
    orig = model.busbw
    model.busbw = lambda ns, key: orig(ns, key) * (0.3 if set(ns) == {"n01", "n05"} else 1.0)  # type: ignore[method-assign]
    store = Store("/nonexistent")
    store.doc = {"measurements": {}, "pending": {}}
    findings = drive(plan(Topo(tuple(nodes), leaf_of), ("pair",), bb.Rule()), ModelExecutor(model), store,
                     lambda m: None)
    assert [(f.kind, f.nodes, f.confirmed) for f in findings] == [("pair", ("n01", "n05"), True)]


def test_a_one_off_slow_measurement_stays_a_suspect() -> None:
    nodes, leaf_of, bw = cluster(8, 4)
    model = Model(bw, leaf_of)
    orig = model.busbw
    model.busbw = lambda ns, key: orig(ns, key) * (0.3 if key == "node:measure:n02" else 1.0)  # type: ignore[method-assign]
    store = Store("/nonexistent")
    store.doc = {"measurements": {}, "pending": {}}
    findings = drive(plan(Topo(tuple(nodes), leaf_of), ("node",), bb.Rule()), ModelExecutor(model), store,
                     lambda m: None)
    assert [(f.nodes, f.confirmed) for f in findings] == [(("n02",), False)]
    assert "not confirmed" in findings[0].detail


def test_all_pairs_baseline() -> None:
    findings, ex, _ = run_model(8, 4, slow={"n06": 10.0}, levels=("pair",), all_pairs=True)
    assert ex.jobs_submitted == 28 + 4  # every pair, then n06 re-measured twice beside a control (one level's evidence)
    assert [f.nodes for f in findings if f.confirmed] == [("n06",)]


def test_replay_serves_stored_measurements_without_jobs(tmp_path: Path) -> None:
    findings, ex, store = run_model(8, 4, slow={"n03": 10.0}, tmp=tmp_path)
    again = ModelExecutor(Model({}, {}))  # would fail on any node: nothing may be asked of it
    nodes, leaf_of, _ = cluster(8, 4)
    f2 = drive(plan(Topo(tuple(nodes), leaf_of), ("node", "pair", "leaf", "all"), bb.Rule()), again, store,
               lambda m: None)
    assert again.jobs_submitted == 0
    assert [f.nodes for f in f2] == [f.nodes for f in findings]


# --- the report store ---------------------------------------------------------------------------------------------

def test_store_resumes_only_the_same_unfinished_plan(tmp_path: Path) -> None:
    s = Store(str(tmp_path))
    key = {"nodes": ["a", "b"]}
    assert s.load_or_start(key, fresh=False, progress=lambda m: None) is False
    s.measurements["x"] = {"busbw": 1.0}
    s.pending["y"] = {"job_id": "7", "run_dir": "/r"}
    s.save()
    s2 = Store(str(tmp_path))
    msgs: list[str] = []
    assert s2.load_or_start(key, fresh=False, progress=msgs.append) is True
    assert s2.measurements == {"x": {"busbw": 1.0}} and "1 measurement(s) done, 1 job(s) in flight" in msgs[0]
    s3 = Store(str(tmp_path))
    assert s3.load_or_start({"nodes": ["a"]}, fresh=False, progress=lambda m: None) is False  # another plan
    assert s3.measurements == {} and list(tmp_path.glob("report-*.json"))


# --- jobs through gpusub's renderer -------------------------------------------------------------------------------

def facts() -> ClusterFacts:
    return ClusterFacts(partition="gpu", gpus_per_node=8, node_gpus=tuple((f"node{i}", 8) for i in range(1, 5)),
                        cpus_per_gpu=1, mem_per_gpu_mb=3875, resources_source="inventory",
                        live_nodes=(("node1", "idle", frozenset(), 8, 8), ("node2", "idle", frozenset({"DRAIN"}), 8, 8),
                                    ("node3", "idle", frozenset(), 8, 8), ("node4", "down", frozenset(), 8, 8)))


def test_job_is_gpusubs_srun_job_pinned_to_its_nodes(tmp_path: Path) -> None:
    from slurmkit.acceptance.plan import task

    s = Settings(partition="gpu", levels=("pair",), transport="nccl", sizes="16M,1G", iters=20, gpus_per_node=8)
    ex = SlurmExecutor(None, facts(), s, Topo(("node1", "node3")), bb.Expected())  # type: ignore[arg-type]
    job = ex.render(task("pair", "measure", ("node1", "node3"), "x"), str(tmp_path / "j"))
    sc = job.request.script
    flat = sc.replace(" \\\n  ", " ")  # the template puts each program word on its own continued line
    assert job.request.command() == ["sbatch", "--parsable"]
    for line in ("#SBATCH --nodelist=node1,node3", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --gres=gpu:8", "#SBATCH --exclusive",
                 "#SBATCH --partition=gpu", "#SBATCH --time=15:00", "export NCCL_DEBUG=WARN"):
        assert line in sc
    assert "acceptance/measure.py --sizes 16M,1G --iters 20 --transport nccl --op all_reduce --out" in flat
    assert f"{tmp_path}/j/result.json" in flat
    gl = Settings(partition="gpu", levels=("node",), transport="gloo", sizes="1M", iters=5, gpus_per_node=8)
    ex2 = SlurmExecutor(None, facts(), gl, Topo(("node1",)), bb.Expected())  # type: ignore[arg-type]
    one = ex2.render(task("node", "measure", ("node1",), "x"), str(tmp_path / "k")).request.script
    assert "#SBATCH --ntasks-per-node=2" in one and "#SBATCH --nodes=1" in one  # gloo: two CPU ranks on one node


def test_select_nodes_skips_what_cannot_run_and_refuses_strangers() -> None:
    keep, skipped = select_nodes(facts(), None)
    assert keep == ["node1", "node3"] and skipped == ["node2 (idle+DRAIN)", "node4 (down)"]
    with pytest.raises(UsageError, match=r"--nodes: node9 not in partition gpu"):
        select_nodes(facts(), "node[1,9]")
    # only nodes that cannot run: the flag and why each one is out, not a bare 'no node of partition gpu'
    with pytest.raises(UsageError, match=r"^--nodes node\[2,4\]: no node can run a job now \(node2 \(idle\+DRAIN\), "
                                         r"node4 \(down\)\)$"):
        select_nodes(facts(), "node[2,4]")


def resv_facts(flags: frozenset[str] = frozenset({"MAINT"})) -> ClusterFacts:
    from dataclasses import replace

    from slurmkit.backend.parse import Reservation

    r = Reservation("maint", start=1000.0, end=9000.0, nodes=("node1", "node3"), flags=flags, users=("root",),
                    accounts=(), partition="", active=True)
    other = Reservation("later", start=8000.0, end=9500.0, nodes=("node4",), flags=frozenset(), users=("root",),
                        accounts=(), partition="", active=False)
    live = (("node1", "idle", frozenset({"MAINTENANCE", "RESERVED"}), 8, 8), ("node2", "idle", frozenset(), 8, 8),
            ("node3", "idle", frozenset({"MAINTENANCE", "RESERVED"}), 8, 8), ("node4", "idle", frozenset(), 8, 8))
    return replace(facts(), reservations=(r, other), live_at=2000.0, live_nodes=live)


def test_select_nodes_in_a_maintenance_window() -> None:
    # the window's nodes by default, MAINT flag and all; outside it they are skipped with the flag that tests them
    assert select_nodes(resv_facts(), None, "maint") == (["node1", "node3"], [])
    keep, skipped = select_nodes(resv_facts(), None)
    assert keep == ["node2", "node4"]  # 'later' has not started: its node is free now
    assert skipped == ["node1 (in reservation maint: --reservation maint tests it)",
                       "node3 (in reservation maint: --reservation maint tests it)"]
    with pytest.raises(UsageError, match=r"^--nodes: node2 not in reservation maint \(node\[1,3\]\)$"):
        select_nodes(resv_facts(), "node[1-2]", "maint")
    with pytest.raises(UsageError, match=r"^--reservation: 'nope' does not exist \(reservations: later, maint\)$"):
        select_nodes(resv_facts(), None, "nope")
    assert select_nodes(resv_facts(), "node3", "maint") == (["node3"], [])
    # a window that has not begun: refused (its jobs would sit queued until it opens), naming the start
    with pytest.raises(UsageError, match=r"^--reservation later: the window starts at .*nothing submitted\)$"):
        select_nodes(resv_facts(), None, "later")


def test_job_runs_in_the_reservation_with_account_and_qos_through_gpusubs_prepare(tmp_path: Path) -> None:
    from slurmkit.acceptance.plan import task

    s = Settings(partition="gpu", levels=("pair",), transport="nccl", sizes="16M", iters=5, gpus_per_node=8,
                 reservation="maint", account="ops", qos="high")
    ex = SlurmExecutor(None, resv_facts(), s, Topo(("node1", "node3")), bb.Expected())  # type: ignore[arg-type]
    sc = ex.render(task("pair", "measure", ("node1", "node3"), "x"), str(tmp_path / "j")).request.script
    for line in ("#SBATCH --reservation=maint", "#SBATCH --account=ops", "#SBATCH --qos=high", "#SBATCH --exclusive",
                 "#SBATCH --nodelist=node1,node3"):
        assert line in sc


def test_mpi_plugins_from_recorded_srun_mpi_list_and_the_choice() -> None:
    from slurmkit.acceptance.runner import choose_mpi
    from slurmkit.backend.parse import parse_mpi_list

    got = parse_mpi_list((DATA.parent / "slurm" / "srun_mpi_list_22.05.txt").read_text())
    assert got == ["pmix", "none", "cray_shasta", "pmi2", "pmix_v4"]
    assert choose_mpi("auto", got, {}) == "pmix"
    assert choose_mpi("auto", ["none", "pmi2"], {}) == "pmi2"
    assert choose_mpi("auto", ["none", "cray_shasta"], {}) is None  # no PMI: torch measures between nodes
    assert choose_mpi("auto", got, {"SLURM_MPI_TYPE": "pmix_v4"}) == "pmix_v4"  # the site's own choice
    assert choose_mpi("none", got, {}) is None
    with pytest.raises(UsageError, match=r"^--mpi: 'pmix_v5' is not among srun --mpi=list: pmix, none"):
        choose_mpi("pmix_v5", got, {})


def nccl_tests_settings(mpi: str | None, op: str = "all_reduce") -> Settings:
    return Settings(partition="gpu", levels=("node", "pair"), transport="nccl-tests", sizes="16M,1G", iters=20,
                    gpus_per_node=8, op=op, mpi=mpi)


def test_nccl_tests_between_nodes_run_one_task_per_gpu_under_sruns_pmi(tmp_path: Path) -> None:
    from slurmkit.acceptance.plan import task

    ex = SlurmExecutor(None, facts(), nccl_tests_settings("pmix", "alltoall"), Topo(("node1", "node3")),  # type: ignore[arg-type]
                       bb.Expected())
    pair = task("pair", "measure", ("node1", "node3"), "x")
    sc = ex.render(pair, str(tmp_path / "p")).request.script
    flat = sc.replace(" \\\n  ", " ")
    assert "#SBATCH --ntasks-per-node=8" in sc and "export SLURM_MPI_TYPE=pmix" in sc
    assert "--transport nccl-tests --op alltoall --out" in flat and "--gpus" not in flat
    one = ex.render(task("node", "measure", ("node1",), "x"), str(tmp_path / "n")).request.script
    assert "#SBATCH --ntasks-per-node=1" in one and "SLURM_MPI_TYPE" not in one and "--gpus 8" in one.replace(
        " \\\n  ", " ")
    assert ex.settings.tool("pair") == "nccl-tests alltoall_perf over srun --mpi=pmix (one task per GPU)"
    assert ex.settings.tool("node") == "nccl-tests alltoall_perf (one process, every GPU of the node)"
    # no PMI plugin: torch over NCCL measures between nodes, and the report says why
    no = nccl_tests_settings(None)
    assert no.transport_for(pair) == "nccl" and no.transport_for(task("node", "measure", ("node1",), "x")) == "nccl-tests"
    assert "needs a PMI plugin in srun --mpi=list" in no.tool("pair")


def test_measure_runs_nccl_tests_per_rank_and_rank0_reports_it(tmp_path: Path) -> None:
    """measure.py as srun starts it between nodes (SLURM_PROCID/SLURM_NTASKS, SLURM_MPI_TYPE), with a fake
    all_reduce_perf on PATH that prints the recorded 2-node MPI output: rank 0 parses it and says what measured."""
    import os
    import subprocess
    import sys

    from slurmkit.acceptance.runner import MEASURE

    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "all_reduce_perf"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/argv.$SLURM_PROCID\ncat {DATA / 'all_reduce_perf_mpi_2node.txt'}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_NTASKS": "2", "SLURM_MPI_TYPE": "pmix",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for rank in ("1", "0"):
        out = tmp_path / "result.json"
        p = subprocess.run([sys.executable, MEASURE, "--transport", "nccl-tests", "--sizes", "64M,1G", "--out",
                            str(out)], env={**env, "SLURM_PROCID": rank}, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert (tmp_path / f"argv.{rank}").read_text().split() == [
            "-b", str(64 << 20), "-e", str(1 << 30), "-f", "2", "-g", "1", "-n", "10", "-w", "2"]
        assert out.exists() == (rank == "0")
    res = json.loads(out.read_text())
    assert res["transport"] == "nccl-tests all_reduce_perf" and res["world"] == 2
    assert res["launch"] == "srun --mpi=pmix, 2 tasks x -g 1"
    assert res["peak_busbw"] == 3.15


def test_alltoall_busbw_is_nccl_tests_factor() -> None:
    assert bb.busbw_alltoall(8.0, 8) == 7.0 and bb.busbw_alltoall(8.0, 1) == 0.0
    assert bb.point(1 << 30, 0.5, 4, bb.busbw_alltoall).busbw == pytest.approx((1 << 30) / 0.5 / 1e9 * 3 / 4)


def test_transport_choice() -> None:
    assert choose_transport("gloo", {}, lambda x: "/x") == "gloo"
    assert choose_transport("auto", {}, lambda x: "/usr/bin/all_reduce_perf") == "nccl-tests"
    # --op alltoall needs alltoall_perf: all_reduce_perf alone does not make nccl-tests the tool
    assert choose_transport("auto", {}, lambda x: "/b/all_reduce_perf" if x == "all_reduce_perf" else None,
                            "alltoall") != "nccl-tests"
    assert choose_transport("auto", {}, lambda x: f"/b/{x}", "alltoall") == "nccl-tests"


def test_report_says_which_tool_measured_each_level(tmp_path: Path) -> None:
    from slurmkit.acceptance.report import table
    from slurmkit.acceptance.runner import measured_by

    st = Store(str(tmp_path))
    st.doc = {"measurements": {
        "node:measure:a": {"level": "node", "busbw": 400.0, "transport": "nccl-tests all_reduce_perf"},
        "pair:measure:a+b": {"level": "pair", "busbw": 40.0, "transport": "nccl-tests all_reduce_perf"},
        "pair:measure:c+d": {"level": "pair", "busbw": 39.0, "transport": "torch-nccl"},
        "leaf:measure:a+b+c": {"level": "leaf", "busbw": None, "transport": "torch-nccl"}}}
    got = measured_by(st, ("node", "pair", "leaf", "all"))
    assert got == [{"level": "node", "tool": "nccl-tests all_reduce_perf", "measurements": {"nccl-tests all_reduce_perf": 1}},
                   {"level": "pair", "tool": "nccl-tests all_reduce_perf, torch-nccl",
                    "measurements": {"nccl-tests all_reduce_perf": 1, "torch-nccl": 1}},
                   {"level": "leaf", "tool": "none (every measurement failed)", "measurements": {}}]
    text = table({"measurements": [], "outliers": [], "suspects": [], "measured_by": got})
    assert "measured by, pair level: nccl-tests all_reduce_perf, torch-nccl" in text


# --- drain ----------------------------------------------------------------------------------------------------------

class FakeBackend:
    def __init__(self, nodes: dict[str, NodeInfo]):
        self._nodes = nodes
        self.drained: list[tuple[str, str]] = []

    def node(self, name: str) -> NodeInfo:
        return self._nodes[name]

    def drain(self, nodes: str, reason: str) -> None:
        self.drained.append((nodes, reason))


def test_drain_only_confirmed_nodes_never_over_a_foreign_reason(tmp_path: Path) -> None:
    from slurmkit.acceptance.plan import Finding

    store = Store(str(tmp_path))
    store.doc = {"measurements": {"pair:resolve:n3+n1": Measurement("pair:resolve:n3+n1", "pair", "resolve",
                                                                     ["n3", "n1"], ["l1", "l1"], busbw=0.1).__dict__}}
    fs = [Finding("node", ("n3",), "pair", ["pair:measure:n3+n4", "pair:resolve:n3+n1"], "d", confirmed=True),
          Finding("node", ("n5",), "node", ["node:measure:n5"], "d", confirmed=False),
          Finding("pair", ("n6", "n7"), "pair", ["pair:measure:n6+n7"], "d", confirmed=True),
          Finding("node", ("n8",), "node", ["a", "b"], "d", confirmed=True)]
    be = FakeBackend({"n3": NodeInfo("n3", "idle"),
                      "n8": NodeInfo("n8", "idle", frozenset({"DRAIN"}), reason="bad dimm [root@2026-01-01T10:00:00]")})
    out = drain(be, fs, store, lambda m: None)  # type: ignore[arg-type]
    assert [n for n, _ in be.drained] == ["n3"]
    assert be.drained[0][1].startswith("slurmkit: acceptance pair:resolve:n3+n1 busbw 0.1 GB/s")
    assert out[1] == {"node": "n8", "action": "kept", "why": "already drained: bad dimm"}


# --- the edge and the lab helper -------------------------------------------------------------------------------------

def test_cli_bad_levels_is_one_line_exit_2(monkeypatch) -> None:
    from slurmkit.cli.main import cli, run_cli

    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    with pytest.raises(SystemExit) as exc:
        run_cli(cli, ["acceptance", "run", "--levels", "node,rack"], "slurmkit")
    assert exc.value.code == 2
    r = CliRunner().invoke(cli, ["acceptance", "run", "--job-time", "1 h"])
    assert r.exit_code != 0


def test_cpu_mount_found_on_v1_and_refused_on_v2_only() -> None:
    from slurmkit.lab.slow import cpu_mount

    v1 = "cgroup /sys/fs/cgroup/cpuacct cgroup rw,cpuacct 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
    assert str(cpu_mount(v1)) == "/sys/fs/cgroup/cpu"
    assert str(cpu_mount("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n")) == "/sys/fs/cgroup/cpu,cpuacct"
    with pytest.raises(LabError, match="cgroup v1 cpu controller"):
        cpu_mount("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n")


def test_report_document_and_table() -> None:
    from slurmkit.acceptance.plan import Finding
    from slurmkit.acceptance.report import document, table

    doc = {"measurements": {"node:measure:a": Measurement("node:measure:a", "node", "measure", ["a"], ["l1"], 2,
                                                          "torch-gloo", 0.5, verdict="slow", job_id="3").__dict__},
           "pending": {}, "jobs": 1, "wall_s": 2.0, "report": "/r/report.json", "rule": {"k": 3.0, "tol": 0.5}}
    judged: list[dict] = []
    gen = plan(Topo(("a", "b", "c", "d")), ("node",), bb.Rule(tol=0.5), judged=judged)
    batch = next(gen)
    with pytest.raises(StopIteration):
        gen.send({t.key: v for t, v in zip(batch, (0.5, 1.0, 1.2, 0.9), strict=True)})
    doc["judged"] = judged
    out = document(doc, [Finding("node", ("a",), "node", ["node:measure:a"], "slow", confirmed=True)])
    assert out["outliers"][0]["nodes"] == ("a",) and "pending" not in out
    json.dumps(out)
    t = table(out)
    assert "node   measure  a      l1    2      0.5" in t and "OUTLIER node a: slow" in t
    # a passing verdict is explained too: the threshold of the level and how close its lowest value came
    assert ("rule, node level, each node (n=4): median 0.95 GB/s, log-MAD 0.14, slow below 0.475 = min(median/e^(3 x "
            "log-MAD), 50% of median); lowest a 0.5 (1.05x the threshold)") in t


def test_pair_level_finds_the_slow_node_in_noisy_lab_numbers() -> None:
    """Recorded in the lab (node3 capped, a busy 2-core host): the pairs' spread is so wide that median - 3 MAD
    over the pairs is below zero; each node's best pair is not (node3's best is its only good-looking number)."""
    nodes = tuple(f"node{i}" for i in range(1, 9))
    topo = Topo(nodes, {n: ("leaf1" if i < 4 else "leaf2") for i, n in enumerate(nodes)})
    recorded = {"node1+node2": 0.664, "node5+node6": 0.526, "node7+node8": 0.658, "node1+node5": 0.362,
                "node2+node6": 0.396, "node3+node4": 0.142, "node4+node8": 0.636, "node3+node7": 0.163}
    gen = plan(topo, ("pair",), bb.Rule())
    batch = next(gen)
    assert {t.key.split(":")[2] for t in batch} == set(recorded)
    batch = gen.send({t.key: recorded[t.key.split(":")[2]] for t in batch})
    assert [(t.step, t.nodes[0]) for t in batch] == [("resolve", "node3"), ("control", "node7")]
    batch = gen.send({batch[0].key: 0.10, batch[1].key: 0.61})
    # the pair and its resolve ran back to back: a later re-measurement beside a control confirms
    assert [(t.step, t.nodes) for t in batch] == [("confirm", ("node3",)), ("control", ("node1",))]
    batch = gen.send({batch[0].key: 0.05, batch[1].key: 0.70})
    # and a second round, beside another healthy node
    assert [(t.step, t.nodes) for t in batch] == [("reconfirm", ("node3",)), ("recontrol", ("node2",))]
    with pytest.raises(StopIteration) as stop:
        gen.send({batch[0].key: 0.06, batch[1].key: 0.65})
    assert [(f.kind, f.nodes, f.confirmed) for f in stop.value.value] == [("node", ("node3",), True)]


def test_a_pair_and_its_resolve_alone_never_confirm_a_node() -> None:
    """Seen on a loaded 24.11 lab: a noisy pair and its resolve, run back to back, both named a healthy node8; a
    later re-measurement beside a control does not, so node8 stays a suspect."""
    nodes = tuple(f"node{i}" for i in range(1, 9))
    topo = Topo(nodes, {n: ("leaf1" if i < 4 else "leaf2") for i, n in enumerate(nodes)})
    recorded = {"node1+node2": 0.664, "node5+node6": 0.526, "node7+node8": 0.158, "node1+node5": 0.362,
                "node2+node6": 0.396, "node3+node4": 0.642, "node4+node8": 0.136, "node3+node7": 0.663}
    gen = plan(topo, ("pair",), bb.Rule())
    batch = next(gen)
    batch = gen.send({t.key: recorded[t.key.split(":")[2]] for t in batch})
    assert [(t.step, t.nodes[0]) for t in batch][0] == ("resolve", "node8")
    batch = gen.send({t.key: (0.10 if t.step == "resolve" else 0.61) for t in batch})
    assert [t.step for t in batch] == ["confirm", "control"] and batch[0].nodes == ("node8",)
    with pytest.raises(StopIteration) as stop:
        gen.send({batch[0].key: 0.66, batch[1].key: 0.65})
    assert [(f.nodes, f.confirmed) for f in stop.value.value] == [(("node8",), False)]


def test_a_healthy_pair_slow_in_one_confirmation_round_is_not_a_link() -> None:
    """Recorded on a loaded 2-core lab (load 38, node3 capped and left out after the node level): the healthy pair
    node2+node6 measured 0.242 GB/s (threshold 0.28) and again 0.147 beside a control node1+node4 at 0.859; one
    round confirmed it as a slow link. The second round, beside other healthy nodes, did not find it slower."""
    nodes = ("node1", "node2", "node4", "node5", "node6", "node7", "node8")
    topo = Topo(nodes, {n: ("leaf1" if n in ("node1", "node2", "node4") else "leaf2") for n in nodes})
    recorded = {"node1+node2": 0.5123, "node5+node6": 0.7406, "node7+node8": 0.5016, "node1+node5": 0.6061,
                "node2+node6": 0.2423, "node4+node7": 0.7444}
    gen = plan(topo, ("pair",), bb.Rule(tol=0.5))
    batch = next(gen)
    assert {t.key.split(":")[2] for t in batch} == set(recorded)
    batch = gen.send({t.key: recorded[t.key.split(":")[2]] for t in batch})
    assert [(t.step, t.nodes) for t in batch] == [("confirm", ("node2", "node6")), ("control", ("node1", "node4"))]
    batch = gen.send({batch[0].key: 0.1471, batch[1].key: 0.8594})  # round 1: slower than its control
    assert [(t.step, t.nodes) for t in batch] == [("reconfirm", ("node2", "node6")),
                                                  ("recontrol", ("node5", "node7"))]
    with pytest.raises(StopIteration) as stop:
        gen.send({batch[0].key: 0.61, batch[1].key: 0.66})  # round 2: like its control
    assert [(f.kind, f.nodes, f.confirmed) for f in stop.value.value] == [("pair", ("node2", "node6"), False)]
    assert "not confirmed: re-measured 0.61 GB/s vs control node5+node7 0.66" in stop.value.value[0].detail


def test_nothing_to_measure_is_an_empty_run() -> None:
    findings, ex, _ = run_model(1, 4, levels=("pair", "leaf", "all"))
    assert findings == [] and ex.jobs_submitted == 0


def test_lab_up_refuses_an_unknown_slow_node_before_starting_anything(tmp_path: Path) -> None:
    from slurmkit.cli.main import cli

    r = CliRunner().invoke(cli, ["lab", "up", "--dir", str(tmp_path / "lab"), "--nodes", "4", "--slow-node", "node9"])
    assert r.exit_code == 2 and "'node9' is not a lab node (node1..node4)" in r.output
    assert not (tmp_path / "lab").exists()


class SubmitOnceFails:
    """sbatch that 'runs' the job at once: the first attempt leaves no result (its rendezvous failed), later ones do."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, request) -> str:  # type: ignore[no-untyped-def]
        import re

        self.submitted.append(request.script)
        out = re.search(r"--out \\\n  (\S+)", request.script) or re.search(r"--out (\S+)", request.script)
        assert out
        if len(self.submitted) > 1:
            Path(out.group(1)).write_text(json.dumps({"peak_busbw": 1.5, "points": [], "world": 2}))
        return str(len(self.submitted))

    def jobs(self, ids):  # type: ignore[no-untyped-def]
        return []  # finished and gone


def test_a_failed_job_is_run_once_more(tmp_path: Path) -> None:
    from slurmkit.acceptance.plan import task

    s = Settings(partition="gpu", levels=("node",), transport="gloo", sizes="1M", iters=5, gpus_per_node=8)
    be = SubmitOnceFails()
    ex = SlurmExecutor(be, facts(), s, Topo(("node1",)), bb.Expected(), poll=0.01)  # type: ignore[arg-type]
    store = Store(str(tmp_path))
    store.load_or_start({"k": 1}, fresh=True, progress=lambda m: None)
    msgs: list[str] = []
    ex.run([task("node", "measure", ("node1",), "x")], store, msgs.append)
    m = store.measurements["node:measure:node1"]
    assert len(be.submitted) == 2 and ex.jobs_submitted == 2
    assert m["busbw"] == 1.5 and m["job_id"] == "2" and "job 1 gone from the queue, no result" in m["first_attempt_error"]
    assert any("running them once more" in x for x in msgs)
    assert json.loads((tmp_path / "report.json").read_text())["measurements"]["node:measure:node1"]["busbw"] == 1.5


def test_default_tolerance_follows_the_transport(monkeypatch) -> None:
    """gloo (the lab, CPU hosts) only names gross faults; NCCL keeps the tight floor; --tolerance wins."""
    from click.testing import CliRunner

    import slurmkit.acceptance.runner as runner
    from slurmkit.acceptance.busbw import default_tolerance
    from slurmkit.cli.main import cli

    assert default_tolerance("gloo") == 0.5 and default_tolerance("nccl") == default_tolerance("nccl-tests") == 0.25
    seen: list[tuple[str, float]] = []

    def fake(req, backend, progress):  # type: ignore[no-untyped-def]
        seen.append((req.transport, req.rule.tol))
        return {"outliers": [], "suspects": [], "measurements": []}

    monkeypatch.setattr(runner, "acceptance", fake)
    monkeypatch.setattr("slurmkit.backend.cli.default_backend", lambda: None)
    for args in (["--transport", "gloo"], ["--transport", "nccl"], ["--transport", "gloo", "--tolerance", "0.3"]):
        r = CliRunner().invoke(cli, ["acceptance", "run", "--json", *args])
        assert r.exit_code == 0, r.output
    assert seen == [("gloo", 0.5), ("nccl", 0.25), ("gloo", 0.3)]


def test_bad_job_time_and_empty_nodes_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """Found by hand: `--job-time abc` was refused as '--time' by the first job's render, after the report was
    started; `--nodes ''` tested the whole partition."""
    from slurmkit.acceptance.runner import Request, acceptance

    for req, msg in ((Request(job_time="abc", out=str(tmp_path / "a")), r"^--job-time: 'abc' is not a Slurm time"),
                     (Request(nodes=" ", out=str(tmp_path / "b")), r"^--nodes: empty host list")):
        with pytest.raises(UsageError, match=msg):
            acceptance(req, None, lambda m: None, environ={}, which=lambda x: None)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_one_run_per_report_dir(tmp_path: Path) -> None:
    """Two runs on one --out (found by hand: a second shell resumed the first's report and both submitted the
    confirmation jobs): the second is refused, naming --out and the holder; free again once the first is gone."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from slurmkit.acceptance.runner import Store\n"
                               f"Store({str(tmp_path)!r}).lock(); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(UsageError, match=rf"^--out {tmp_path}: another acceptance run \(pid {holder.pid}\)"):
            Store(str(tmp_path)).lock()
    finally:
        holder.kill()
        holder.wait()
    Store(str(tmp_path)).lock()  # the lock died with its process


def test_interrupted_run_says_what_is_in_flight_and_how_to_resume(monkeypatch, tmp_path: Path) -> None:
    import slurmkit.acceptance.runner as runner
    from slurmkit.cli.main import cli

    out = tmp_path / "acc"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"pending": {"node:measure:node1": {"job_id": "45", "run_dir": "x"},
                                                             "node:measure:node2": {"job_id": "46", "run_dir": "y"}}}))

    def interrupted(req, backend, progress):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "acceptance", interrupted)
    monkeypatch.setattr("slurmkit.backend.cli.default_backend", lambda: None)
    r = CliRunner().invoke(cli, ["acceptance", "run", "--transport", "gloo", "--out", str(out)])
    assert r.exit_code == 130
    assert (f"acceptance: interrupted; job(s) 45,46 still in the queue (scancel 45,46 to drop them); the same "
            f"command resumes from {out}/report.json") in r.output


def test_picture_bars_of_one_node_are_told_apart() -> None:
    """report.png stacked node3's confirm and reconfirm bars on one 'node3*' label (matplotlib bars of equal labels
    share one spot): each re-measurement is labelled with its step."""
    from slurmkit.acceptance.report import bar_labels

    ms = [{"nodes": ["node3"], "step": s} for s in ("measure", "confirm", "reconfirm")]
    ms.append({"nodes": ["node1"], "step": "control"})
    labels = bar_labels(ms)
    assert labels == ["node3", "node3 (confirm)", "node3 (reconfirm)", "node1 (control)"]
    assert len(set(labels)) == len(labels)


# --- the hca level: ib_write_bw per HCA port ------------------------------------------------------------------------

def test_ib_write_bw_parser_on_recorded_perftest_output() -> None:
    from slurmkit.acceptance.ib import parse_ib_write_bw

    a = parse_ib_write_bw((DATA / "ib_write_bw_spark_rocep1s0f0.txt").read_text())
    assert (a.device, a.link_type, a.unit, len(a.rows)) == ("rocep1s0f0", "Ethernet", "Gb/sec", 5)
    assert a.gbps == pytest.approx(92.57) and a.rows[3].avg_gbps == pytest.approx(92.56)
    assert a.rows[0].peak_gbps == 0.0  # --run_infinitely: "BW peak won't be measured"
    b = parse_ib_write_bw((DATA / "ib_write_bw_spark_roceP2p1s0f0.txt").read_text())
    assert (b.device, len(b.rows), b.gbps) == ("roceP2p1s0f0", 6, pytest.approx(97.29))
    # perftest's default unit is MB/sec = 2^20 B/s (print_report_bw's format_factor 0x100000): the same table in
    # MB/sec reads as the same Gb/s
    mb = (DATA / "ib_write_bw_spark_rocep1s0f0.txt").read_text().replace("[Gb/sec]", "[MB/sec]").replace(
        "92.57 ", f"{92.57e9 / 8 / (1 << 20):.2f} ")
    assert parse_ib_write_bw(mb).gbps == pytest.approx(92.57, rel=1e-4)
    with pytest.raises(ValueError, match="no '#bytes #iterations BW peak BW average' table"):
        parse_ib_write_bw(" Couldn't connect to 10.0.0.1:18515\nUnable to open file descriptor for socket connection")


def test_hca_ports_from_the_inventory_and_the_flag() -> None:
    from slurmkit.acceptance.ib import hcas_from, parse_hcas

    assert parse_hcas("mlx5_0, mlx5_1:2,mlx5_0") == ("mlx5_0:1", "mlx5_1:2")
    with pytest.raises(ValueError, match="'mlx5_0:x' is not an HCA port"):
        parse_hcas("mlx5_0:x")
    assert hcas_from([("mlx5_0", "ib", "compute"), ("mlx5_4", "ib", "storage"), ("eth0", "eth", "compute"),
                      ("mlx5_1", "roce", "compute")]) == ("mlx5_0:1", "mlx5_1:1")


def run_hca_plan(slow_port: tuple[str, str] | None = None, slow_rail: tuple[frozenset[str], str] | None = None):
    from slurmkit.acceptance.plan import Finding

    topo = Topo(tuple(f"node{i}" for i in range(1, 7)), {f"node{i}": "leaf1" if i <= 3 else "leaf2" for i in range(1, 7)})
    hcas = ("mlx5_0:1", "mlx5_1:1")
    gen = plan(topo, ("hca",), bb.Rule(), hcas=hcas)
    asked = []
    batch = next(gen)
    try:
        while True:
            asked += batch
            res = {}
            for t in batch:
                v = 400 / 8 * (0.97 + 0.01 * (hash(t.key) % 5))
                if slow_port and slow_port[0] in t.nodes and t.hca == slow_port[1]:
                    v /= 10
                if slow_rail and frozenset(t.nodes) == slow_rail[0] and t.hca == slow_rail[1]:
                    v /= 10
                res[t.key] = v
            batch = gen.send(res)
    except StopIteration as stop:
        found: list[Finding] = stop.value
    return asked, found


def test_hca_level_names_the_bad_port_of_its_node() -> None:
    asked, found = run_hca_plan(slow_port=("node5", "mlx5_1:1"))
    assert {t.hca for t in asked} == {"mlx5_0:1", "mlx5_1:1"} and all(len(t.nodes) == 2 for t in asked)
    # each port of each node with two partners (the pair level's two matchings), one job per pair and port
    partners = {n: {m for t in asked if t.hca == "mlx5_0:1" and n in t.nodes for m in t.nodes} - {n} for n in
                ("node1", "node5")}
    assert all(len(p) == 2 for p in partners.values()), partners
    assert [(f.kind, f.nodes, f.port, f.confirmed) for f in found] == [("port", ("node5",), "mlx5_1:1", True)]
    assert "node5 port mlx5_1:1 (bad port or cable)" in found[0].detail
    from slurmkit.acceptance.report import document, table

    doc = document({"measurements": {}}, found)
    assert "OUTLIER port node5 port mlx5_1:1: hca level: node5 port mlx5_1:1" in table(doc)
    assert run_hca_plan()[1] == []


def test_hca_level_a_slow_rail_between_good_ports_is_the_cable_between_them() -> None:
    _, found = run_hca_plan(slow_rail=(frozenset({"node1", "node2"}), "mlx5_0:1"))
    assert [(f.kind, set(f.nodes), f.port, f.confirmed) for f in found] == [
        ("rail", {"node1", "node2"}, "mlx5_0:1", False)]
    assert "the cable or switch path between them" in found[0].detail


def test_hca_level_runs_only_where_hcas_and_perftest_exist() -> None:
    from slurmkit.acceptance.runner import Request, _hca_levels

    f = facts()
    assert _hca_levels(Request(), f, lambda x: "/usr/bin/" + x) == (("node", "pair", "leaf", "all"), (), (
        "hca level left out: no HCA known (the inventory's compute NICs of kind ib/roce, or --hcas mlx5_0,mlx5_1)"))
    assert _hca_levels(Request(hcas="mlx5_0"), f, lambda x: None)[2] == (
        "hca level left out: ib_write_bw is not installed here (Debian package perftest)")
    assert _hca_levels(Request(hcas="mlx5_0,mlx5_1"), f, lambda x: "/b/" + x)[:2] == (
        ("node", "pair", "hca", "leaf", "all"), ("mlx5_0:1", "mlx5_1:1"))
    with pytest.raises(UsageError, match=r"^--levels hca: no HCA known"):
        _hca_levels(Request(levels=("hca",), levels_given=True), f, lambda x: "/b/" + x)


def test_measure_ib_write_bw_server_and_client_with_the_fake_perftest(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from slurmkit.acceptance.runner import MEASURE

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ib_write_bw").symlink_to(DATA / "fake_ib_write_bw")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_NTASKS": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29999", "SLURM_JOB_NODELIST": "node[3,5]", "FAKE_IB_SLOW": "node5:mlx5_1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = tmp_path / "result.json"
    for rank in ("0", "1"):
        p = subprocess.run([sys.executable, MEASURE, "--ib-write-bw", "mlx5_1:1", "--seconds", "1", "--out", str(out)],
                           env={**env, "SLURM_PROCID": rank}, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert out.exists() == (rank == "1")  # the client measures and writes
    res = json.loads(out.read_text())
    assert (res["transport"], res["hca"], res["device"]) == ("ib_write_bw", "mlx5_1:1", "mlx5_1")
    assert res["gbps"] == pytest.approx(9.26) and res["peak_busbw"] == pytest.approx(9.26 / 8)


def test_hca_job_is_two_nodes_one_task_each(tmp_path: Path) -> None:
    from slurmkit.acceptance.plan import task

    s = Settings(partition="gpu", levels=("hca",), transport="gloo", sizes="1M", iters=5, gpus_per_node=8,
                 hcas=("mlx5_0:1",))
    ex = SlurmExecutor(None, facts(), s, Topo(("node1", "node3")), bb.Expected())  # type: ignore[arg-type]
    t = task("hca", "measure", ("node1", "node3"), "x", hca="mlx5_0:1")
    assert t.key == "hca:measure:node1+node3:mlx5_0:1"
    sc = ex.render(t, str(tmp_path / "h")).request.script
    flat = sc.replace(" \\\n  ", " ")
    assert "#SBATCH --nodes=2" in sc and "#SBATCH --ntasks-per-node=1" in sc and "#SBATCH --nodelist=node1,node3" in sc
    assert "measure.py --ib-write-bw mlx5_0:1 --out" in flat
    assert s.tool("hca") == "perftest ib_write_bw per HCA port (mlx5_0:1)"


def test_every_node_of_an_odd_window_is_in_a_pair() -> None:
    from slurmkit.acceptance.plan import matchings

    # node[1-3] over two leaves: the two matchings alone leave node3 with no partner
    topo = Topo(("node1", "node2", "node3"), {"node1": "leaf1", "node2": "leaf1", "node3": "leaf2"})
    pairs = matchings(topo)
    assert {n for p in pairs for n in p} == {"node1", "node2", "node3"}
    assert ("node1", "node3") in pairs  # the odd one with a node of another leaf
    assert matchings(Topo(("node1",))) == []
