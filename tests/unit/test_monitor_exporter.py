"""`slurmkit exporter`: the cluster view from nodes and jobs, cached per scrape, served over HTTP."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request

import pytest
import yaml

from slurmkit.backend.parse import (
    JobInfo,
    NodeInfo,
    ParseError,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_squeue_jobs,
)
from slurmkit.model.load import load_cluster_dict
from slurmkit.monitor.exporter import Scraper, _num, job_gpus, parse_sacct_usage, render, serve
from tests.conftest import DATA, ROOT, needs
from tests.unit.test_monitor_textfile import find, samples


def lab_cluster():
    from slurmkit.lab.inventory import lab_inventory

    return load_cluster_dict(lab_inventory(8, 8, nodes_per_leaf=4, accounting=True))


def node(name, state="idle", flags=(), used=0, part="gpu"):
    return NodeInfo(name, state, frozenset(flags), gres="gpu:h100:8(S:0-1)",
                    gres_used=f"gpu:h100:{used}(IDX:{'0-' + str(used - 1) if used else 'N/A'})", partitions=(part,))


def job(jid, state, account, user="daemon", reason="None", nodes="1", per_node="gres:gpu:h100:8",
        submit="2026-12-01T10:00:00", qos="normal"):
    raw = {"JobId": jid, "JobState": state, "Account": account, "QOS": qos, "UserId": f"{user}(1)",
           "NumNodes": nodes, "TresPerNode": per_node, "SubmitTime": submit, "Reason": reason}
    return JobInfo(jid, state, reason=reason, raw=raw)


def test_gpus_by_state_jobs_per_tenant_pending_by_reason_and_fragmentation():
    c = lab_cluster()
    nodes = [node("node1", "allocated", used=8), node("node2", "mixed", used=2), node("node3"),
             node("node4", "idle", {"DRAIN"}), node("node5"), node("node6"), node("node7", "down", {"NOT_RESPONDING"}),
             node("node8")]
    jobs = [job("1", "RUNNING", "team-a"), job("2", "RUNNING", "team-a", per_node="gres:gpu:2"),
            job("3", "PENDING", "team-a", reason="AssocGrpGRES", nodes="2"),
            job("4", "PENDING", "team-b", reason="Resources", nodes="4", per_node="(null)"),
            job("5", "COMPLETED", "team-b")]
    from datetime import datetime

    now = datetime(2026, 12, 1, 11, 0, 0).timestamp()
    s = samples(render(c, nodes, jobs, now))
    gpus = {dict(lbl)["state"]: v for (n, lbl), v in s.items() if n == "slurmkit_cluster_gpus"}
    assert gpus == {"allocated": 10, "idle": 38, "drained": 8, "down": 8}
    assert find(s, "slurmkit_job_gpus", account="team-a", state="running") == [10]
    assert find(s, "slurmkit_job_gpus", account="team-a", state="pending") == [16]
    assert find(s, "slurmkit_jobs", account="team-b", state="pending") == [1]  # a CPU job counts as a job
    assert find(s, "slurmkit_pending_gpu_jobs", account="team-a", reason="AssocGrpGRES") == [1]
    assert not find(s, "slurmkit_pending_gpu_jobs", account="team-b")  # no GPUs asked: not a pending GPU job
    assert find(s, "slurmkit_pending_gpu_job_oldest_seconds", account="team-a") == [3600]
    # leaves node[1-4] (free: node3) and node[5-8] (free: node5, node6, node8)
    assert sorted(v for (n, _l), v in s.items() if n == "slurmkit_leaf_free_nodes") == [1, 3]
    assert find(s, "slurmkit_largest_one_leaf_job_nodes") == [3] and find(s, "slurmkit_largest_job_nodes") == [4]
    assert find(s, "slurmkit_pending_largest_job_nodes") == [2]
    assert find(s, "slurmkit_account_gpu_quota", account="team-a") == [32]


def test_reserve_per_group_counts_healthy_idle_nodes_powered_up_or_down():
    """The reserve series are `slurmkit report reserve`'s counts: of 8 nodes (one group, 15 % plan: 2 nodes), spare
    are the idle ones and the powered-down idle~ one; a drained idle node, a health-drained one, a powering-up one
    and a node no group names are not (the last is group "(other)")."""
    from slurmkit.placement.state import HEALTH_REASON_PREFIX

    c = lab_cluster()
    group = c.node_groups[0].name
    nodes = [node("node1", "allocated", used=8), node("node2", "idle", {"POWERED_DOWN"}), node("node3"),
             node("node4", "idle", {"DRAIN"}), node("node5", "idle", {"POWERING_UP"}),
             NodeInfo("node6", "idle", reason=HEALTH_REASON_PREFIX + "xid79", partitions=("gpu",)),
             node("node7", "mixed", used=2), node("node8"), node("other1")]
    s = samples(render(c, nodes, [], 0.0))
    assert find(s, "slurmkit_reserve_spare_nodes", group=group) == [3]  # node2 (idle~), node3, node8
    assert find(s, "slurmkit_reserve_planned_nodes", group=group) == [2]  # ceil(0.15 x 8)
    assert find(s, "slurmkit_reserve_spare_nodes", group="(other)") == [1]
    assert find(s, "slurmkit_reserve_planned_nodes", group="(other)") == [1]
    mostly_busy = [node(f"node{i}", "allocated", used=8) for i in range(1, 8)] + [node("node8")]
    s = samples(render(c, mostly_busy, [], 0.0))
    assert find(s, "slurmkit_reserve_spare_nodes", group=group) == [1]  # below the plan of 2: the alert's input


def test_job_gpus_reads_every_request_form():
    def j(**raw):
        return JobInfo("1", "PENDING", raw={"NumNodes": "2", "NumTasks": "4", **raw})
    assert job_gpus(j(TresPerJob="gres:gpu:6")) == 6
    assert job_gpus(j(TresPerJob="gres/gpu=3")) == 3
    assert job_gpus(j(TresPerNode="gres:gpu:h100:8")) == 16
    assert job_gpus(j(TresPerTask="gres:gpu:1")) == 4
    assert job_gpus(j(TresPerNode="gres:shard:2")) == 0


def test_recorded_lab_output_renders_and_promtool_accepts_it():
    nodes = parse_scontrol_nodes((DATA / "slurm" / "scontrol_show_node.txt").read_text())
    jobs = parse_scontrol_jobs((DATA / "slurm" / "scontrol_show_job.txt").read_text())
    text = render(lab_cluster(), nodes, jobs, 1.8e9)
    s = samples(text)
    assert sum(v for (n, _l), v in s.items() if n == "slurmkit_cluster_gpus") == 8 * len(nodes)
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


@pytest.mark.parametrize("release", ["", "24.11"])
def test_compact_squeue_query_reads_what_scontrol_says(release):
    """The same live jobs recorded both ways (tests/data/slurm/record_live_jobs.py: --gres, --gpus, --gpus-per-node,
    --gpus-per-task, a held typed request, a CPU job) on 22.05 and 24.11: the squeue -O records give the exporter
    the same GPUs, nodes, states and reasons as scontrol's full records, and the same metrics."""
    d = DATA / "slurm" / release if release else DATA / "slurm"
    fast = {j.job_id: j for j in parse_squeue_jobs((d / "squeue_live_jobs.txt").read_text())}
    full = {j.job_id: j for j in parse_scontrol_jobs((d / "scontrol_show_job_live.txt").read_text())}
    assert fast.keys() == full.keys() and len(fast) == 6
    for jid, j in fast.items():
        f = full[jid]
        assert (j.state, j.reason, job_gpus(j), _num(j.raw["NumNodes"])) == (f.state, f.reason, job_gpus(f),
                                                                             _num(f.raw["NumNodes"])), jid
    assert sorted(job_gpus(j) for j in fast.values()) == [0, 1, 2, 2, 4, 8]
    nodes = parse_scontrol_nodes((DATA / "slurm" / "scontrol_show_node.txt").read_text())
    cl = lab_cluster()
    assert render(cl, nodes, fast.values(), 1e9) == render(cl, nodes, full.values(), 1e9)


def test_squeue_line_of_another_shape_is_refused():
    with pytest.raises(ParseError, match="unexpected squeue -O line"):
        parse_squeue_jobs("1|RUNNING|acct\n")


def test_sacct_usage_is_gpu_hours_per_account():
    u = parse_sacct_usage("team-a|3600|billing=8,cpu=8,gres/gpu=8,mem=1G,node=1\nteam-a|1800|cpu=1,gres/gpu=2\n"
                          "team-b|7200|cpu=4,mem=1G,node=1\nbad line\n")
    assert u.gpu_hours == {"team-a": 9.0}


class Backend:
    def __init__(self, fail=False):
        self.calls, self.fail = 0, fail

    def nodes(self):
        self.calls += 1
        if self.fail:
            raise RuntimeError("slurmctld down")
        return [node("node1")]

    def jobs(self):
        return []


def test_one_batch_per_cache_period_and_a_failed_query_is_a_series():
    t = [100.0]
    b = Backend()
    sc = Scraper(lab_cluster(), b, cache_s=15, clock=lambda: t[0])
    first = sc.text()
    t[0] += 10
    assert sc.text() == first and b.calls == 1
    t[0] += 10
    sc.text()
    assert b.calls == 2
    bad = Scraper(lab_cluster(), Backend(fail=True), cache_s=15)
    s = samples(bad.text())
    assert find(s, "slurmkit_exporter_up") == [0] and find(s, "slurmkit_exporter_query_errors_total",
                                                             command="nodes") == [1]


def test_http_serves_metrics():
    import threading

    port = int(os.environ.get("SLURMKIT_TEST_EXPORTER_PORT", "0"))  # 0: any free port
    srv = serve(Scraper(lab_cluster(), Backend(), cache_s=15), "127.0.0.1", port)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.server_address[1]}/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert b"slurmkit_exporter_up 1" in r.read()
    finally:
        srv.shutdown()
        srv.server_close()


@needs(shutil.which("promtool") is not None, "promtool not installed")
def test_cli_once_prints_a_scrape(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    nodes, jobs = DATA / "slurm" / "scontrol_show_node.txt", DATA / "slurm" / "scontrol_show_job.txt"
    (bindir / "scontrol").write_text(f"#!/bin/sh\ncase \"$*\" in *node*) cat {nodes};; *job*) cat {jobs};; "
                                     "*) echo 'slurm 22.05.8';; esac\n")
    (bindir / "sinfo").write_text("#!/bin/sh\necho 'slurm 22.05.8'\n")
    # the exporter's job query is squeue -O (CliBackend.live_jobs), recorded from the lab
    (bindir / "squeue").write_text(f"#!/bin/sh\ncat {DATA / 'slurm' / 'squeue_live_jobs.txt'}\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "exporter", str(inv), "--once"], capture_output=True,
                       text=True, env=env, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "slurmkit_exporter_up 1" in r.stdout and "slurmkit_cluster_gpus{" in r.stdout
    # the recorded scene (record_live_jobs.py on a 22.05 lab): the held typed request is the one pending GPU job
    assert 'slurmkit_pending_gpu_jobs{account="",reason="JobHeldUser"} 1' in r.stdout


def test_each_nodes_slurm_state_is_a_series():
    """Slurm's view per node (state, flags, reason): the rule that pages on a node Slurm marks DOWN or not responding
    reads it (the node-down rule watched node_exporter only: slurmd killed, no alert, issue 35)."""
    c = lab_cluster()
    nodes = [node("node1", "allocated", used=8), NodeInfo("node7", "down", frozenset({"NOT_RESPONDING", "DRAIN"}),
                                                          reason="Not responding", partitions=("gpu",))]
    s = samples(render(c, iter(nodes), [], 1e9))
    got = sorted((dict(lbl) | {"v": v} for (n, lbl), v in s.items() if n == "slurmkit_node_state"),
                 key=lambda d: d["node"])
    assert got == [{"node": "node1", "state": "allocated", "flags": "", "reason": "", "v": 1},
                   {"node": "node7", "state": "down", "flags": "DRAIN+NOT_RESPONDING", "reason": "Not responding",
                    "v": 1}]
    assert find(s, "slurmkit_cluster_nodes", state="down") == [1]  # the iterable was read for both


def test_each_nodes_partitions_are_a_series_for_the_dashboards_partition_variable():
    c = lab_cluster()
    nodes = [NodeInfo("node1", "idle", frozenset(), partitions=("gpu", "debug")), NodeInfo("node2", "idle", frozenset())]
    s = samples(render(c, iter(nodes), [], 1e9))
    got = sorted(tuple(sorted(dict(lbl).items())) for (n, lbl), _v in s.items() if n == "slurmkit_node_partition_info")
    assert got == [(("node", "node1"), ("partition", "debug")), (("node", "node1"), ("partition", "gpu"))]
