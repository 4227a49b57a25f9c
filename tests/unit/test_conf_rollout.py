"""Atomic writes with backups, the semantic diff's classification, the rollout plan, drift."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from slurmkit.generate import generate
from slurmkit.generate import rollout as r
from slurmkit.model.load import load_cluster_dict

ROOT = Path(__file__).resolve().parents[2]
LAB = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())


def files_for(inv: dict, version: str = "22.05") -> dict[str, str]:
    return generate(load_cluster_dict(inv), version=version)


def changed(**patch: object) -> dict:
    d = copy.deepcopy(LAB)
    for path, value in patch.items():
        cur = d
        keys = path.split("__")
        for k in keys[:-1]:
            cur = cur[int(k)] if k.isdigit() else cur[k]
        cur[keys[-1]] = value
    return d


def test_write_is_atomic_and_backs_up(tmp_path: Path) -> None:
    r.write_files({"slurm.conf": "A\n", "gres.conf": "B\n"}, tmp_path)
    assert r.write_files({"slurm.conf": "A\n"}, tmp_path) is None  # unchanged: no backup
    b = r.write_files({"slurm.conf": "A2\n", "slurmkit-prolog": "#!/bin/sh\n"}, tmp_path, executable={"slurmkit-prolog"})
    assert b is not None and (b / "slurm.conf").read_text() == "A\n"
    assert (tmp_path / "slurm.conf").read_text() == "A2\n" and (tmp_path / "slurmkit-prolog").stat().st_mode & 0o111
    with pytest.raises(ValueError):
        r.write_files({"slurm.conf": "A3\n", "../evil": "x"}, tmp_path)
    assert (tmp_path / "slurm.conf").read_text() == "A2\n", "nothing replaced when any file fails"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_no_change_means_empty_plan() -> None:
    f = files_for(LAB)
    assert r.semantic_diff(f, f) == []
    assert r.plan([], "22.05") == ["nothing to do: the running files already match the inventory"]


def test_weight_and_partition_need_only_reconfigure() -> None:
    new = changed(node_groups__0__weight=20)
    new["partitions"].append({"name": "extra", "groups": ["h100"]})
    ch = r.semantic_diff(files_for(LAB), files_for(new))
    assert {c.action for c in ch} == {r.RECONFIGURE}
    subjects = {c.subject for c in ch}
    assert "NodeName=node[1-8] weight" in subjects and "PartitionName=extra" in subjects
    assert r.plan(ch, "22.05")[1].endswith("scontrol reconfigure")


def test_gpu_count_change_needs_drain_and_plan_orders_it() -> None:
    new = changed(node_groups__0__gpus__count=4, node_groups__0__gpus__files="/dev/nvidia[0-3]",
                  node_groups__0__gpus__cores=["0-3"] * 4)
    ch = r.semantic_diff(files_for(LAB), files_for(new))
    assert r.worst(ch) == r.DRAIN and ch[0].action == r.DRAIN
    steps = r.plan(ch, "22.05")
    assert steps[0].startswith("1. drain node[1-8]") and "resume" in steps[-1]


def test_cores_change_needs_restart_and_ports_too() -> None:
    new = changed(node_groups__0__gpus__cores=["0-7"] * 8)
    ch = r.semantic_diff(files_for(LAB), files_for(new))
    assert [c.action for c in ch] == [r.RESTART] and "Cores=" in ch[0].reason
    ch = r.semantic_diff(files_for(LAB), files_for(changed(controller={"hosts": ["localhost"], "port": 7000})))
    assert [c.action for c in ch] == [r.RESTART]


def test_select_type_change_is_job_losing() -> None:
    new = changed(slurm_conf={"SelectTypeParameters": "CR_CPU_Memory"})
    ch = r.semantic_diff(files_for(LAB), files_for(new))
    assert ch[0].action == r.DRAIN and ch[0].nodes == "ALL"


def test_adding_nodes_depends_on_release() -> None:
    new = changed(node_groups__0__hosts="node[1-9]")
    new["topology"]["switches"][1]["nodes"] = "node[5-9]"
    old22, new22 = files_for(LAB, "22.05"), files_for(new, "22.05")
    add = [c for c in r.semantic_diff(old22, new22, "22.05") if c.subject == "NodeName"]
    assert add[0].action == r.RESTART
    add = [c for c in r.semantic_diff(files_for(LAB, "24.11"), files_for(new, "24.11"), "24.11") if c.subject == "NodeName"]
    assert add[0].action == r.RECONFIGURE


def test_cgroup_change_restarts_slurmd_before_23_11_only() -> None:
    new = changed(cgroup_conf={"ConstrainSwapSpace": False})
    assert [c.action for c in r.semantic_diff(files_for(LAB, "22.05"), files_for(new, "22.05"))] == [r.RESTART]
    assert [c.action for c in r.semantic_diff(files_for(LAB, "24.05"), files_for(new, "24.05"))] == [r.RECONFIGURE]


def _removed_node8() -> dict:
    new = changed(node_groups__0__hosts="node[1-7]")
    new["topology"]["switches"][1]["nodes"] = "node[5-7]"
    return new


def test_removing_nodes_before_24_11_stops_slurmctld_first() -> None:
    # faq.shtml #rem_nodes (24.11): drain; stop slurmctld; update slurm.conf everywhere; restart every slurmd; start
    ch = r.semantic_diff(files_for(LAB, "22.05"), files_for(_removed_node8(), "22.05"), "22.05")
    rem = [c for c in ch if c.subject == "NodeName"]
    assert rem[0].action == r.DRAIN and rem[0].nodes == "node8" and "faq.shtml" in rem[0].reason
    steps = [s.split(". ", 1)[1] for s in r.plan(ch, "22.05")]
    i = steps.index(next(s for s in steps if s.startswith("stop slurmctld")))
    assert steps[0].startswith("drain node8")
    assert steps[i + 1].startswith("back up and write the new files")
    assert steps[i + 2] == "restart slurmd on every node" and steps[i + 3] == "start slurmctld (the primary, then any backup)"
    # 23.11 and 24.05 follow the same (24.11's FAQ corrected 24.05's "23.11 and newer")
    steps24 = r.plan(r.semantic_diff(files_for(LAB, "24.05"), files_for(_removed_node8(), "24.05"), "24.05"), "24.05")
    assert any("stop slurmctld" in s for s in steps24)


def test_removing_nodes_from_24_11_is_drain_and_reconfigure() -> None:
    ch = r.semantic_diff(files_for(LAB, "24.11"), files_for(_removed_node8(), "24.11"), "24.11")
    steps = r.plan(ch, "24.11")
    assert steps[0].startswith("1. drain node8")
    assert not any(s.split(". ", 1)[1].startswith(("stop", "restart", "resume")) for s in steps), steps
    assert steps[2].startswith("3. scontrol reconfigure")


def test_adding_nodes_before_24_11_follows_the_faq_order() -> None:
    new = changed(node_groups__0__hosts="node[1-9]")
    new["topology"]["switches"][1]["nodes"] = "node[5-9]"
    steps = [s.split(". ", 1)[1] for s in r.plan(r.semantic_diff(files_for(LAB), files_for(new), "22.05"), "22.05")]
    assert steps[:4] == ["stop slurmctld on every controller host, backup ones included (node list changes before "
                         "24.11: faq.shtml #add_nodes / #rem_nodes)", steps[1], "restart slurmd on every node",
                         "start slurmctld (the primary, then any backup)"]
    assert steps[1].startswith("back up and write")


def test_adding_nodes_from_24_11_starts_their_slurmd_after_the_reconfigure() -> None:
    """The 24.11 add is a reconfigure (faq.shtml #add_nodes), but the new node's slurmd runs nowhere yet: the plan
    starts it after the reconfigure (before: write, reconfigure, verify -- and --execute timed out at verify)."""
    new = changed(node_groups__0__hosts="node[1-10]")
    new["topology"]["switches"][1]["nodes"] = "node[5-10]"
    steps = r.plan_steps(r.semantic_diff(files_for(LAB, "24.11"), files_for(new, "24.11"), "24.11"), "24.11")
    kinds = [s.kind for s in steps]
    assert kinds == [r.WRITE, r.RECONF, r.RESTART_SLURMD, r.VERIFY], steps
    assert steps[2].nodes == "node[9-10]" and steps[2].text.startswith("start slurmd on the new nodes node[9-10]")


@pytest.mark.parametrize(("version", "action"), [("22.05", r.RESTART), ("23.02", r.RESTART), ("23.11", r.RECONFIGURE),
                                                 ("25.11", r.RECONFIGURE)])
def test_scheduler_type_change_restarts_slurmctld_before_23_11(version: str, action: str) -> None:
    new = changed(slurm_conf={"SchedulerType": "sched/builtin"})
    ch = r.semantic_diff(files_for(LAB, version), files_for(new, version), version)
    sched = [c for c in ch if c.subject == "SchedulerType"]
    assert sched[0].action == action, sched
    steps = r.plan(ch, version)
    if action == r.RESTART:
        assert steps[1] == "2. restart slurmctld" and "A restart of slurmctld is required" in sched[0].reason
    else:
        assert "scontrol reconfigure" in steps[1]


def test_every_release_has_a_table_and_every_entry_its_sentence() -> None:
    from slurmkit.model.cluster import SUPPORTED_SLURM_VERSIONS

    assert set(r.RULES) == set(SUPPORTED_SLURM_VERSIONS)
    for ver, table in r.RULES.items():
        assert {"*", "node+", "node-", "node~"} <= set(table), ver
        for key, rule in table.items():
            assert rule.action in (r.RECONFIGURE, r.RESTART, r.DRAIN) and len(rule.doc) > 30, (ver, key)
    assert r.rule("26.05", "node+").action == r.RECONFIGURE  # newer than the tables: the newest table
    assert r.rule("22.05", "schedulertype") is r.RULES_22_05["SchedulerType"]


@dataclass
class Node:
    name: str
    cpus: int = 8
    sockets: int = 2
    cores_per_socket: int = 4
    threads_per_core: int = 1
    real_memory: int = 32000
    gres: str = "gpu:h100:8(S:0-1)"
    features: tuple[str, ...] = ("h100", "nvlink")


def test_drift_lists_each_mismatch_folded() -> None:
    cluster = load_cluster_dict(LAB)
    nodes = [Node(f"node{i}") for i in range(1, 9)]
    assert r.drift(cluster, nodes) == []
    nodes[2] = Node("node3", features=("h100",))
    nodes[3] = Node("node4", real_memory=16000, gres="gpu:h100:7")
    nodes.append(Node("node99"))
    lines = sorted(d.line() for d in r.drift(cluster, nodes[:4] + nodes[5:]))
    assert "node3: Features: inventory h100,nvlink, cluster h100" in lines
    assert "node4: RealMemory: inventory 32000, cluster 16000" in lines
    assert "node4: Gres: inventory gpu:h100:8, cluster gpu:h100:7" in lines
    assert "node5: node: inventory defined, cluster missing" in lines
    assert "node99: node: inventory not in inventory, cluster present" in lines


def _memory_changed() -> dict:
    new = copy.deepcopy(LAB)
    new["node_groups"][0]["memory_mb"] = new["node_groups"][0].get("memory_mb", 16000) - 1024
    return new


def test_a_24_11_memory_change_is_drain_and_reconfigure_not_restarts() -> None:
    """Issue 20 item 2: slurm.conf(5) 24.11 NODE CONFIGURATION "require restarting or reconfiguring"; the geometry
    Change had no scope, so the plan restarted slurmctld and every slurmd."""
    ch = r.semantic_diff(files_for(LAB, "24.11"), files_for(_memory_changed(), "24.11"), "24.11")
    geo = [c for c in ch if "geometry" in c.subject]
    assert geo and geo[0].action == r.DRAIN and geo[0].scope == "reconfigure", ch
    kinds = [s.kind for s in r.plan_steps(ch, "24.11")]
    assert kinds == [r.DRAIN_STEP, r.WRITE, r.RECONF, r.VERIFY, r.RESUME], kinds


def test_a_22_05_memory_change_still_restarts_both_daemons() -> None:
    # slurm.conf(5) 22.05: "require restarting both the slurmctld daemon and the slurmd daemons"
    ch = r.semantic_diff(files_for(LAB, "22.05"), files_for(_memory_changed(), "22.05"), "22.05")
    steps = r.plan_steps(ch, "22.05")
    assert [s.kind for s in steps] == [r.DRAIN_STEP, r.WRITE, r.RESTART_CTLD, r.RESTART_SLURMD, r.VERIFY, r.RESUME]
    assert steps[3].nodes == "node[1-8]"


def _gres_type_changed() -> dict:
    new = copy.deepcopy(LAB)
    new["node_groups"][0]["gpus"]["type"] = "a100"
    new["node_groups"][0]["features"] = [f for f in new["node_groups"][0].get("features", []) if f != "h100"]
    return new


@pytest.mark.parametrize(("version", "kinds"), [
    ("22.05", [r.WRITE, r.RESTART_CTLD, r.RESTART_SLURMD, r.VERIFY]),  # gres.conf(5) 22.05 Type: "A restart of ..."
    ("24.11", [r.WRITE, r.RECONF, r.VERIFY]),  # 23.11+: "with a scontrol reconfig all affected slurmd ... responding"
])
def test_a_gres_type_change_follows_the_releases_gres_conf_page(version: str, kinds: list[str]) -> None:
    ch = r.semantic_diff(files_for(LAB, version), files_for(_gres_type_changed(), version), version)
    assert [s.kind for s in r.plan_steps(ch, version)] == kinds, ch
    # the NodeName Gres= change on its own (was a reconfigure on 22.05 too; only gres.conf's record forced restarts)
    node_gres = [c for c in ch if c.file == "slurm.conf" and c.subject.endswith(" gres")]
    assert node_gres and node_gres[0].action == (r.RESTART if version == "22.05" else r.RECONFIGURE), ch


def test_auth_type_drains_everything_from_23_11() -> None:
    # slurm.conf(5) 23.11+ AuthType: "Changes to this value will interrupt outstanding job steps"
    assert r.rule("24.11", "AuthType").action == r.DRAIN and r.rule("24.11", "AuthType").scope == "jobs"
    assert r.rule("22.05", "AuthType").action == r.RESTART


def test_a_22_05_proctrack_change_restarts_slurmd_too() -> None:
    # slurmd.c (slurm-22-05-8-1) _slurmd_init loads proctrack; _reconfigure does not: slurmd keeps the old plugin
    new = changed(slurm_conf={"ProctrackType": "proctrack/pgid"})
    kinds = [s.kind for s in r.plan_steps(r.semantic_diff(files_for(LAB), files_for(new), "22.05"), "22.05")]
    assert kinds == [r.WRITE, r.RESTART_CTLD, r.RESTART_SLURMD, r.VERIFY], kinds


def test_a_22_05_task_plugin_change_restarts_slurmd() -> None:
    # slurmd.c (slurm-22-05-8-1) calls slurmd_task_init() in _slurmd_init only: a reconfigured slurmd keeps its task
    # plugin (found by review: the plan said "reconfigure"); from 23.11 a reconfigure restarts the daemons
    new = changed(slurm_conf={"TaskPlugin": "task/affinity"})
    kinds = [s.kind for s in r.plan_steps(r.semantic_diff(files_for(LAB), files_for(new), "22.05"), "22.05")]
    assert r.RESTART_SLURMD in kinds, kinds
    kinds = [s.kind for s in r.plan_steps(r.semantic_diff(files_for(LAB, "24.11"), files_for(new, "24.11"), "24.11"),
                                          "24.11")]
    assert r.RESTART_SLURMD not in kinds, kinds
