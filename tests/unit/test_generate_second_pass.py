"""Issue 9 (config generation, second pass): every file slurmkit writes must load on the release it targets.

Each test here failed before its fix. Real-parse proof (Slurm itself as the judge) lives in test_conf_realparse.py
and tests/integration; these are the rendered lines and the inventory errors.
"""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.errors import InventoryError
from slurmkit.generate import Overrides, generate
from slurmkit.generate.confparse import parse_records, parse_slurm_conf
from slurmkit.generate.validate import static_check
from slurmkit.model.load import load_cluster_dict, load_cluster_text

ROOT = Path(__file__).resolve().parents[2]

BASE = {
    "cluster": "t",
    "slurm_version": "24.11",
    "controller": {"hosts": ["head01"]},
    "node_groups": [
        {"name": "a", "hosts": "n[1-4]", "cpu": {"sockets": 2, "cores_per_socket": 8, "threads_per_core": 2},
         "memory_mb": 64000, "reserve": {"memory_mb": 2000, "cores": 2},
         "gpus": {"type": "h100", "count": 4, "files": "/dev/nvidia[0-3]", "links": "nvlink"}},
    ],
    "partitions": [{"name": "p", "groups": ["a"], "default": True}],
}


HA = {"hosts": ["head01", "head02"], "state_dir": "/shared/slurm/statesave"}


def inv(**changes: object) -> dict:
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def gen(d: dict, version: str | None = None, **kw: object) -> dict[str, str]:
    return generate(load_cluster_dict(d), version=version, **kw)  # type: ignore[arg-type]


def refused(d: dict, path: str, words: str, version: str | None = None) -> str:
    with pytest.raises(InventoryError) as ei:
        gen(d, version)
    assert ei.value.path == path, str(ei.value)
    assert words in str(ei.value), str(ei.value)
    assert "\n" not in str(ei.value)
    return str(ei.value)


def controllers(text: str) -> list[str]:
    return [v for rec in parse_records(text) for k, v in rec.pairs if k == "SlurmctldHost"]


# --- 1. HA controllers ---------------------------------------------------------------------------------------


def test_two_controllers_stay_two_lines_in_order() -> None:
    f = gen(inv(controller=HA))
    assert controllers(f["slurm.conf"]) == ["head01", "head02"]
    assert parse_slurm_conf(f["slurm.conf"]).controllers == ["head01", "head02"]
    assert static_check(f).errors == []


def test_repeated_keys_survive_every_merge() -> None:
    d = inv(controller=HA,
            slurm_conf={"SchedulerParameters": "bf_continue", "SlurmctldPort": "7000"})
    # an overlay that touches other keys keeps both controller lines
    f = gen(d, overrides=Overrides(slurm_conf=(("SlurmdPort", "7001"),)))
    assert controllers(f["slurm.conf"]) == ["head01", "head02"]
    # a site list replaces them all, in its order, at the same place
    d["slurm_conf"]["SlurmctldHost"] = ["ctl-b", "ctl-a", "ctl-c"]
    f = gen(d)
    assert controllers(f["slurm.conf"]) == ["ctl-b", "ctl-a", "ctl-c"]
    lines = f["slurm.conf"].splitlines()
    assert lines.index("SlurmctldHost=ctl-b") == lines.index("ClusterName=t") + 1
    # an overlay with one controller (the lab) replaces both
    f = gen(inv(controller=HA), overrides=Overrides(slurm_conf=(("SlurmctldHost", "me"),)))
    assert controllers(f["slurm.conf"]) == ["me"]


def test_ha_presets_render_both_controllers() -> None:
    for preset, want in (("dgx-h100-superpod-su", ["head01", "head02"]), ("fat-tree-4096", ["ctl1", "ctl2"])):
        from slurmkit.model import load_cluster

        f = generate(load_cluster(ROOT / "examples" / f"{preset}.yaml"))
        assert controllers(f["slurm.conf"]) == want
        assert static_check(f).errors == []


def test_two_controllers_need_a_shared_state_dir() -> None:
    # the default /var/spool/slurmctld is local to each controller: the backup would take over without the state
    refused(inv(controller={"hosts": ["head01", "head02"]}), "controller.state_dir", "both controllers share")
    f = gen(inv(controller=HA))
    assert "StateSaveLocation=/shared/slurm/statesave" in f["slurm.conf"].splitlines()
    # one controller keeps the default
    assert "StateSaveLocation=/var/spool/slurmctld" in gen(inv())["slurm.conf"].splitlines()
    for preset in ("dgx-h100-superpod-su", "fat-tree-4096"):
        from slurmkit.model import load_cluster

        f = generate(load_cluster(ROOT / "examples" / f"{preset}.yaml"))
        assert "StateSaveLocation=/shared/slurm/statesave" in f["slurm.conf"].splitlines()


def test_duplicate_controllers_refused_and_caught_in_files() -> None:
    refused(inv(controller={"hosts": ["head01", "head01"]}), "controller.hosts[1]", "Duplicate SlurmctldHost")
    f = gen(inv(controller=HA))
    bad = {**f, "slurm.conf": f["slurm.conf"].replace("SlurmctldHost=head02", "SlurmctldHost=head01")}
    assert any("Duplicate SlurmctldHost records" in e for e in static_check(bad).errors)


def test_repeated_prolog_needs_2405() -> None:
    d = inv(slurm_conf={"Prolog": ["/etc/slurm/a", "/etc/slurm/b"]})
    assert [v for rec in parse_records(gen(d, "24.05")["slurm.conf"]) for k, v in rec.pairs if k == "Prolog"] == [
        "/etc/slurm/a", "/etc/slurm/b"]
    refused(d, "slurm_conf.Prolog", "from one line only", "23.11")
    with pytest.raises(InventoryError, match=r"slurm_conf\.ClusterName: expected a single value"):
        load_cluster_dict(inv(slurm_conf={"ClusterName": ["a", "b"]}))


# --- 3. policy without accounting ----------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "path"), [({"fairshare": True}, "policy.fairshare"),
                                              ({"preemption": "qos"}, "policy.preemption")])
def test_policy_needs_accounting(policy: dict, path: str) -> None:
    msg = refused(inv(policy=policy), path, "accounting")
    assert "accounting" in msg
    f = gen(inv(policy=policy, accounting={"host": "dbd"}))
    assert "AccountingStorageType=accounting_storage/slurmdbd" in f["slurm.conf"]
    assert "PriorityType=priority/multifactor" in f["slurm.conf"]


def test_partition_preemption_needs_no_accounting() -> None:
    assert "PreemptType=preempt/partition_prio" in gen(inv(policy={"preemption": "partition"}))["slurm.conf"]


# --- 4. names ------------------------------------------------------------------------------------------------


def group(**kw: object) -> list[dict]:
    g = copy.deepcopy(BASE["node_groups"])
    g[0].update(kw)
    return g


@pytest.mark.parametrize(
    ("d", "path"),
    [
        (inv(node_groups=group(hosts="n1 NodeAddr=10.6.6.6 #")), "node_groups[0].hosts"),
        (inv(node_groups=group(hosts=["n1", "n2 #"])), "node_groups[0].hosts[1]"),
        (inv(node_groups=group(hosts="-n[1-2]")), "node_groups[0].hosts"),
        (inv(node_groups=group(hosts="n_[1-2]")), "node_groups[0].hosts"),
        (inv(node_groups=group(hosts="nöde[1-2]")), "node_groups[0].hosts"),
        (inv(node_groups=group(features=["gpu", "x=y"])), "node_groups[0].features[1]"),
        (inv(node_groups=group(name="a b")), "node_groups[0].name"),
        (inv(controller={"hosts": ["head01 #"]}), "controller.hosts[0]"),
        (inv(controller={"hosts": ["h"], "state_dir": "/var/spool/x y"}), "controller.state_dir"),
        (inv(accounting={"host": "db\nAuthType=auth/none"}), "accounting.host"),
        (inv(partitions=[{"name": "p#", "groups": ["a"]}]), "partitions[0].name"),
        (inv(partitions=[{"name": "p", "groups": ["a"], "qos": "normal PreemptMode=OFF"}]), "partitions[0].qos"),
        (inv(partitions=[{"name": "p", "groups": ["a"], "extra": {"OverSubscribe": 'NO "x'}}]), "partitions[0].extra.OverSubscribe"),
        (inv(cluster="t x"), "cluster"),
        (inv(slurm_conf={"SchedulerParameters": "bf_continue\nNodeName=evil"}), "slurm_conf.SchedulerParameters"),
        (inv(cgroup_conf={"AllowedRAMSpace": "100\x01"}), "cgroup_conf.AllowedRAMSpace"),
        (inv(topology={"switches": [{"name": "leaf one", "nodes": "n[1-4]"}]}), "topology.switches[0].name"),
        (inv(topology={"blocks": [{"name": "b$(id)", "nodes": "n[1-4]"}]}), "topology.blocks[0].name"),
    ],
)
def test_names_written_into_config_are_validated(d: dict, path: str) -> None:
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(d)
    assert ei.value.path == path, str(ei.value)


def test_gpu_type_and_files_are_validated() -> None:
    g = group()
    g[0]["gpus"] = {**g[0]["gpus"], "type": "h100 Links=0"}
    with pytest.raises(InventoryError, match=r"node_groups\[0\]\.gpus\.type"):
        load_cluster_dict(inv(node_groups=g))
    g[0]["gpus"] = {**BASE["node_groups"][0]["gpus"], "files": "/dev/nvidia[0-3] Cores=0"}  # type: ignore[dict-item]
    with pytest.raises(InventoryError, match=r"node_groups\[0\]\.gpus\.files"):
        load_cluster_dict(inv(node_groups=g))


@pytest.mark.parametrize("cmd", ["/usr/bin/slurmkit $(touch /tmp/x)", "/usr/bin/slurmkit; reboot", "/usr/bin/slurmkit `id`",
                                 "/usr/bin/slurmkit > /etc/passwd", "slurmkit", "/usr/bin/slurm kit|x", "/a\nb"])
def test_hooks_command_refuses_shell_metacharacters(cmd: str) -> None:
    with pytest.raises(InventoryError, match=r"^hooks\.command: "):
        load_cluster_dict(inv(hooks={"prolog": True, "command": cmd}))


def test_hooks_command_is_quoted_and_runs_as_words(tmp_path: Path) -> None:
    """The wrapper execs exactly the command's words (the lab's form: env VAR=... python -m ...)."""
    cmd = f"/usr/bin/env MARK=x {shlex.quote(sys.executable)} -c 'import sys; print(sys.argv[1:])'"
    with pytest.raises(InventoryError):  # quotes inside a word: refused (';' ' ' '(' are metacharacters)
        load_cluster_dict(inv(hooks={"prolog": True, "command": cmd}))
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint(os.environ.get('MARK'), sys.argv[1:])\n")
    cmd = f"/usr/bin/env MARK=x {sys.executable} {script}"
    f = gen(inv(hooks={"prolog": True, "command": cmd}), conf_dir="/etc/slurm")
    wrapper = tmp_path / "slurmkit-prolog"
    wrapper.write_text(f["slurmkit-prolog"])
    out = subprocess.run(["/bin/sh", str(wrapper)], capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.strip() == "x ['hook', 'prolog', '--inventory', '/etc/slurm/slurmkit.yaml']"


# --- 5. block topology per release ---------------------------------------------------------------------------


def blocks_inv(blocks: list[tuple[str, str]], sizes: list[int], hosts: str, version: str) -> dict:
    return inv(slurm_version=version, node_groups=group(hosts=hosts),
               topology={"blocks": [{"name": n, "nodes": h} for n, h in blocks], "block_sizes": sizes})


MAN_2405 = [("block1", "node[1-32]"), ("block2", "node[33-64]"), ("block3", "node[65-96]"), ("block4", "node[97-128]")]


@pytest.mark.parametrize("version", ["24.05", "24.11", "25.05", "25.11"])
def test_topology_conf_5_example_of_2405_passes(version: str) -> None:
    """topology.conf(5) of slurm-24-05-8-1: four 32-node blocks, BlockSizes=30,120 (it used to be refused)."""
    f = gen(blocks_inv(MAN_2405, [30, 120], "node[1-128]", version))
    assert static_check(f).errors == []
    if version < "25.05":
        assert "BlockSizes=30,120" in f["topology.conf"]


def test_block_smaller_than_base_is_fatal_before_2505_only() -> None:
    d = blocks_inv([("b1", "n[01-18]"), ("b2", "n[19-36]"), ("b3", "n[37-46]")], [18, 36], "n[01-46]", "24.05")
    refused(d, "topology.blocks[2].nodes", "has 10 nodes, fewer than the base block size 18", "24.05")
    refused(d, "topology.blocks[2].nodes", "fewer than the base block size 18", "24.11")
    for v in ("25.05", "25.11"):
        assert static_check(gen(d, v)).errors == []
    # the static check of a hand-made 24.05 topology.conf says the same
    f = gen(blocks_inv([("b1", "n[01-18]"), ("b2", "n[19-36]")], [18, 36], "n[01-36]", "24.05"))
    small = {**f, "topology.conf": f["topology.conf"].replace("BlockSizes=18,36", "BlockSizes=36")}
    assert any("fewer nodes than the base block size 36" in e for e in static_check(small).errors)


def test_2311_blocks_must_be_equal() -> None:
    d = blocks_inv([("b1", "n[01-18]"), ("b2", "n[19-40]")], [18], "n[01-40]", "23.11")
    refused(d, "topology.blocks[1].nodes", "the same size", "23.11")
    assert static_check(gen(d, "24.05")).errors == []  # larger than the base: fine from 24.05


def test_duplicate_block_names_refused() -> None:
    d = blocks_inv([("b1", "n[1-2]"), ("b1", "n[3-4]")], [2], "n[1-4]", "25.05")
    for v in ("23.11", "24.05", "25.05"):
        refused(d, "topology.blocks[1].name", "already defined", v)
    f = gen(blocks_inv([("b1", "n[1-2]"), ("b2", "n[3-4]")], [2], "n[1-4]", "24.05"))
    dup = {**f, "topology.conf": f["topology.conf"].replace("BlockName=b2", "BlockName=b1")}
    assert any("has already been defined" in e for e in static_check(dup).errors)


# --- 6. host ranges Slurm cannot parse -----------------------------------------------------------------------


@pytest.mark.parametrize("hosts", ["gpu[000001-200000]", "gpu[1-50000000]", "gpu[1-60000]-[1-60000]", "g[5-1]",
                                   "g[1-2", "g[a-b]"])
def test_huge_or_bad_ranges_refused_before_expanding(hosts: str) -> None:
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(inv(node_groups=group(hosts=hosts)))
    assert ei.value.path == "node_groups[0].hosts"
    if "200000" in hosts or "50000000" in hosts:
        assert "more than 65,536 in one range" in str(ei.value)


def test_largest_slurm_range_loads() -> None:
    c = load_cluster_dict(inv(node_groups=group(hosts="n[00001-65536]"), partitions=[{"name": "p", "groups": ["a"]}]))
    assert len(c.all_hosts) == 65536
    g = group()
    g[0]["gpus"] = {**g[0]["gpus"], "files": "/dev/nvidia[0-50000000]"}
    with pytest.raises(InventoryError, match=r"gpus\.files: .*65,536"):
        load_cluster_dict(inv(node_groups=g))


# --- 8. the compose example ----------------------------------------------------------------------------------


def test_compose_example_generates_without_contain() -> None:
    from slurmkit.model import load_cluster

    f = generate(load_cluster(ROOT / "examples" / "compose.yaml"))
    conf = parse_slurm_conf(f["slurm.conf"])
    assert conf.value("ProctrackType") == "proctrack/linuxproc"
    assert "contain" not in conf.value("PrologFlags").lower()
    assert static_check(f).errors == []


# --- 10. AutoDetect combinations -----------------------------------------------------------------------------


def gpus(**kw: object) -> list[dict]:
    g = group()
    g[0]["gpus"] = {**g[0]["gpus"], **kw}
    return g


def test_autodetect_nvml_with_mig_refused() -> None:
    d = inv(node_groups=gpus(links="none", mig=["3g.40gb@1"], autodetect="nvml"))
    for v in ("22.05", "24.11", "25.11"):
        refused(d, "node_groups[0].gpus.autodetect", "refused: AutoDetect=nvml cannot sanity-check MIG", v)


def test_autodetect_nvidia_detects_neither_mig_nor_nvlink() -> None:
    refused(inv(node_groups=gpus(links="none", mig=["3g.40gb@1"], autodetect="nvidia")),
            "node_groups[0].gpus.autodetect", "does not detect MIG", "24.11")
    refused(inv(node_groups=gpus(autodetect="nvidia")), "node_groups[0].gpus.autodetect", "does not detect NVLinks", "25.05")
    assert "AutoDetect=nvidia" in gen(inv(node_groups=gpus(links="none", autodetect="nvidia")), "24.11")["gres.conf"]


def test_autodetect_nvml_on_nvswitch_drops_links_but_keeps_a_bridge_matrix() -> None:
    f = gen(inv(node_groups=gpus(autodetect="nvml")))
    lines = [ln for ln in f["gres.conf"].splitlines() if not ln.startswith("#")]
    assert all("AutoDetect=nvml" in ln and "Links=" not in ln for ln in lines if ln.startswith("NodeName="))
    assert "# a: AutoDetect=nvml behind NVSwitch (links: nvlink): no Links=" in f["gres.conf"]  # says it adapted
    assert "Links=-1,1,1,1" in gen(inv(node_groups=gpus()))["gres.conf"]  # without detection the matrix stays
    matrix = [[-1, 4, 0, 0], [4, -1, 0, 0], [0, 0, -1, 4], [0, 0, 4, -1]]
    assert "Links=-1,4,0,0" in gen(inv(node_groups=gpus(autodetect="nvml", links=matrix)))["gres.conf"]


# --- 11. unknown slurm_conf keys; no partitions --------------------------------------------------------------


def test_unknown_slurm_conf_key_refused_with_did_you_mean() -> None:
    msg = refused(inv(slurm_conf={"SelectTypeParameter": "CR_Core"}), "slurm_conf.SelectTypeParameter",
                  "did you mean 'SelectTypeParameters'?")
    assert "24.11" in msg
    # per release: PrologTimeout is 25.05+, SchedulerAuth ended with 23.11
    refused(inv(slurm_conf={"PrologTimeout": "30"}), "slurm_conf.PrologTimeout", "Slurm 25.05-26.05 only", "24.11")
    assert "PrologTimeout=30" in gen(inv(slurm_conf={"PrologTimeout": "30"}), "25.05")["slurm.conf"]
    refused(inv(slurm_conf={"SchedulerAuth": "x"}), "slurm_conf.SchedulerAuth", "22.05-23.11 only", "24.05")
    # keys are case-insensitive, as Slurm reads them, and replace ours in place
    f = gen(inv(slurm_conf={"selecttypeparameters": "CR_Core"}))
    assert "SelectTypeParameters=CR_Core\n" in f["slurm.conf"] and "CR_Core_Memory" not in f["slurm.conf"]


def test_static_check_refuses_unknown_keys_in_files() -> None:
    f = gen(inv())
    bad = {**f, "slurm.conf": f["slurm.conf"] + "SelectTypeParameter=CR_Core\n"}
    assert any("no slurm.conf key SelectTypeParameter" in e for e in static_check(bad).errors)


def test_no_partitions_refused_where_fatal() -> None:
    d = inv()
    d.pop("partitions")
    for v in ("22.05", "23.02"):
        refused(d, "partitions", "No PartitionName information available", v)
    assert "PartitionName" not in gen(d, "23.11")["slurm.conf"]
    f = gen(inv(), "23.02")
    bare = {**f, "slurm.conf": "\n".join(ln for ln in f["slurm.conf"].splitlines() if not ln.startswith(("Partition", "NodeSet")))}
    assert any("No PartitionName information available" in e for e in static_check(bare).errors)
    assert static_check({**bare, "slurm.conf": bare["slurm.conf"].replace("Slurm 23.02", "Slurm 23.11")}).errors == []


# --- 14. per-GPU CPU and memory defaults ---------------------------------------------------------------------


def test_per_gpu_defaults_follow_the_node_shape() -> None:
    c = load_cluster_dict(inv())
    g = c.node_groups[0]
    f = gen(inv())
    line = next(x for x in f["slurm.conf"].splitlines() if x.startswith("PartitionName=p "))
    # (16 cores - 2 reserved) / 4 GPUs = 3 whole cores x 2 threads = 6 (7, the thread share, is 4 cores per GPU
    # under CR_Core: 16 > 14); (64000 - 2000) / 4 = 15500
    assert g.cpus_per_gpu == 6 and g.mem_per_gpu_mb == 15500
    assert "DefCpuPerGPU=6 DefMemPerGPU=15500" in line


def test_per_gpu_defaults_per_partition_where_shapes_differ() -> None:
    small = {"name": "s", "hosts": "s[1-2]", "cpu": {"sockets": 1, "cores_per_socket": 8}, "memory_mb": 32000,
             "gpus": {"type": "l4", "count": 2, "files": "/dev/nvidia[0-1]"}}
    cpu = {"name": "c", "hosts": "c[1-2]", "cpu": {"sockets": 1, "cores_per_socket": 8}, "memory_mb": 32000}
    d = inv(node_groups=[*group(), small, cpu], partitions=[
        {"name": "big", "groups": ["a"]}, {"name": "small", "groups": ["s"]}, {"name": "both", "groups": ["a", "s"]},
        {"name": "cpu", "groups": ["c"]},
        {"name": "mine", "groups": ["a"], "extra": {"DefMemPerGPU": 1000, "DefCpuPerGPU": 2}}])
    lines = {x.split()[0]: x for x in gen(d)["slurm.conf"].splitlines() if x.startswith("PartitionName=")}
    assert "DefCpuPerGPU=6 DefMemPerGPU=15500" in lines["PartitionName=big"]
    assert "DefCpuPerGPU=4 DefMemPerGPU=16000" in lines["PartitionName=small"]
    assert "DefCpuPerGPU=4 DefMemPerGPU=15500" in lines["PartitionName=both"]  # the smaller share fits anywhere
    assert "PerGPU" not in lines["PartitionName=cpu"]
    assert "DefCpuPerGPU=2 DefMemPerGPU=1000" in lines["PartitionName=mine"]
    # a site-wide memory default wins (a partition value would override it)
    lines = gen(inv(slurm_conf={"DefMemPerCPU": 2000}))["slurm.conf"]
    assert "DefMemPerGPU" not in lines and "DefCpuPerGPU=6" in lines
    assert "DefMemPerCPU=2000\n" in lines and "DefMemPerCPU=2000 " not in lines


def test_cpu_only_jobs_in_gpu_partitions_get_memory_per_cpu() -> None:
    """Issue 20 item 4: a GPU partition's DefMemPerCPU is its leanest shape's usable memory per usable CPU, so a job
    naming neither memory nor GPUs leaves the GPUs their memory; a CPU partition keeps Slurm's default."""
    small = {"name": "s", "hosts": "s[1-2]", "cpu": {"sockets": 1, "cores_per_socket": 8}, "memory_mb": 32000,
             "gpus": {"type": "l4", "count": 2, "files": "/dev/nvidia[0-1]"}}
    cpu = {"name": "c", "hosts": "c[1-2]", "cpu": {"sockets": 1, "cores_per_socket": 8}, "memory_mb": 32000}
    d = inv(node_groups=[*group(), small, cpu], partitions=[
        {"name": "big", "groups": ["a"]}, {"name": "both", "groups": ["a", "s"]}, {"name": "cpu", "groups": ["c"]},
        {"name": "node", "groups": ["a"], "extra": {"DefMemPerNode": 1000}},
        {"name": "mine", "groups": ["a"], "extra": {"DefMemPerCPU": 100}}])
    lines = {x.split()[0]: x for x in gen(d)["slurm.conf"].splitlines() if x.startswith("PartitionName=")}
    # (64000 - 2000) MB / ((16 - 2) cores x 2 threads) = 2214; 32000 / 8 = 4000
    assert "DefMemPerGPU=15500 DefMemPerCPU=2214 " in lines["PartitionName=big"]
    assert "DefMemPerCPU=2214 " in lines["PartitionName=both"]
    assert "DefMem" not in lines["PartitionName=cpu"]
    # DefMemPerNode beside it would win and Slurm would log "DefMemPerCPU ignored": not written
    assert "DefMemPerCPU" not in lines["PartitionName=node"] and "DefMemPerNode=1000" in lines["PartitionName=node"]
    assert "DefMemPerCPU=100 " in lines["PartitionName=mine"] and "DefMemPerCPU=2214" not in lines["PartitionName=mine"]


# --- 15. MEMLOCK, IMEX ---------------------------------------------------------------------------------------


def test_memlock_not_propagated_and_imex_for_gb200_from_2405() -> None:
    for v in ("22.05", "25.11"):
        assert "PropagateResourceLimitsExcept=MEMLOCK\n" in gen(inv(), v)["slurm.conf"]
    gb = inv(node_groups=gpus(type="gb200"))
    assert "SwitchType" not in gen(gb, "23.11")["slurm.conf"]
    for v in ("24.05", "24.11", "25.05", "25.11"):
        assert "SwitchType=switch/nvidia_imex\n" in gen(gb, v)["slurm.conf"]
    assert "SwitchType" not in gen(inv(), "25.11")["slurm.conf"]


# --- 16. clear errors ----------------------------------------------------------------------------------------


def slurmkit(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *argv], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_non_utf8_inventory_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "inv.yaml"
    p.write_bytes(b"cluster: t\n# caf\xe9\nnode_groups: []\n")
    r = slurmkit("conf", "generate", str(p), "-o", str(tmp_path / "out"), "--no-real-parse")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "line 2: not UTF-8" in r.stderr
    assert not (tmp_path / "out").exists()


def test_node_in_no_leaf_named_against_the_inventory_once(tmp_path: Path) -> None:
    import yaml

    d = inv(topology={"switches": [{"name": "leaf1", "nodes": "n[1-3]"}, {"name": "spine", "switches": "leaf1"}]})
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(d))
    r = slurmkit("conf", "generate", str(p), "-o", str(tmp_path / "out"), "--no-real-parse")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("n4") == 1 and "topology.switches: nodes n4 are in no leaf switch" in r.stderr
    assert "topology.conf" not in r.stderr


# --- Done when: hostile names never reach a generated file ---------------------------------------------------

HOSTILE = st.text(alphabet=st.sampled_from(list("ab1-._ #=$()`;,[]\n\té\u00a0\"'\\|&<>*") + ["€"]), min_size=1, max_size=12)
FIELDS = ["hosts", "feature", "partition", "switch", "block", "gpu_type", "cluster", "controller", "accounting", "qos",
          "command", "slurm_conf", "group"]
DANGER = set(" #=$()`;\n\t\"'\\|&<>*") | {"é", "\u00a0", "€"}


def place(field: str, name: str) -> dict:
    d = inv()
    g = d["node_groups"][0]
    if field == "hosts":
        g["hosts"] = name
    elif field == "feature":
        g["features"] = [name]
    elif field == "partition":
        d["partitions"][0]["name"] = name
    elif field == "switch":
        d["topology"] = {"switches": [{"name": name, "nodes": "n[1-4]"}]}
    elif field == "block":
        d["topology"] = {"blocks": [{"name": name, "nodes": "n[1-4]"}]}
    elif field == "gpu_type":
        g["gpus"]["type"] = name
    elif field == "cluster":
        d["cluster"] = name
    elif field == "controller":
        d["controller"] = {"hosts": [name]}
    elif field == "accounting":
        d["accounting"] = {"host": name}
    elif field == "qos":
        d["partitions"][0]["qos"] = name
    elif field == "command":
        d["hooks"] = {"prolog": True, "command": "/usr/bin/" + name}
    elif field == "slurm_conf":
        d["slurm_conf"] = {"SchedulerParameters": name}
    elif field == "group":
        g["name"] = name
        d["partitions"][0]["groups"] = [name]
    return d


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), name=HOSTILE)
def test_hostile_names_never_reach_a_generated_file(field: str, name: str) -> None:
    d = place(field, name)
    try:
        files = gen(d)
    except InventoryError as exc:
        assert "\n" not in str(exc) and exc.path  # one line, naming the key
        return
    # accepted: then the name had nothing a config or shell could misread, and every file parses back cleanly
    # words of hooks.command are space-separated; a slurm_conf value is Slurm syntax, not a name or a shell word
    # ('=' ',' '*' '(' ... are legitimate in SchedulerParameters or a Prolog glob): what must never pass there is
    # whatever ends the value or the line (whitespace, '#', quotes, backslash, non-ASCII)
    # (issue 19: a slurm_conf value may hold spaces, tabs, '#', quotes' and backslashes -- it is written quoted and
    # escaped, and read back as one value: the parse below finds no other key)
    allowed_here = ({" ", "="} if field == "command" else set("=$()`;|&<>* \t#'\\") if field == "slurm_conf"
                    else set())
    assert not (DANGER - allowed_here) & set(name), (field, name)
    for fname, text in files.items():
        if fname.startswith("slurmkit-"):
            words = shlex.split(text.splitlines()[-1])
            cmd = "/usr/bin/" + (name if field == "command" else "slurmkit")
            assert words[0] == "exec" and words[1:-4] == cmd.split(" "), (cmd, words)
            continue
        for line in text.splitlines():
            if line.startswith("#") or fname == "topology.yaml":
                continue
            assert all(k.isalnum() for rec in parse_records(line) for k, _ in rec.pairs), (fname, line)
    assert static_check(files).errors == []
    load_cluster_text(__import__("yaml").safe_dump(d))  # the same inventory loads the same way from text


def test_overlay_files_are_checked_like_the_inventory(tmp_path: Path) -> None:
    from slurmkit.generate.slurmconf import load_overrides

    p = tmp_path / "site.yaml"
    p.write_text("slurm_conf:\n  SlurmctldHost: [ctl-a, ctl-b]\n  SlurmdPort: 7000\n")
    f = gen(inv(controller={"hosts": ["head01"]}), overrides=load_overrides(str(p)))
    assert controllers(f["slurm.conf"]) == ["ctl-a", "ctl-b"]
    # (a value with spaces or '#' is written quoted and escaped, issue 19; a double quote cannot be)
    for body, where in (("slurm_conf:\n  MailProg: '/bin/true \"x'\n", "slurm_conf.MailProg"),
                        ("node_params:\n  a: {NodeAddr: '10.0.0.1 \"Weight=0'}\n", "node_params.a.NodeAddr"),
                        ("cgroup_conf:\n  ConstrainCores: [yes, no]\n", "cgroup_conf.ConstrainCores"),
                        ("gres_file_prefix: 'lab dev'\n", "gres_file_prefix")):
        p.write_text(body)
        with pytest.raises(InventoryError) as ei:
            load_overrides(str(p))
        assert ei.value.path == where and ei.value.source == str(p), str(ei.value)


def test_hook_paths_need_a_conf_dir_slurm_can_read() -> None:
    from slurmkit.errors import UsageError

    with pytest.raises(UsageError, match=r"--conf-dir"):
        gen(inv(hooks={"prolog": True}), conf_dir="/etc/my slurm")
    assert "Prolog=/etc/slurm/slurmkit-prolog" in gen(inv(hooks={"prolog": True}), conf_dir="/etc/slurm")["slurm.conf"]


def test_validation_findings_are_listed_once(tmp_path: Path) -> None:
    """A file the static checks refuse: each finding once on stderr, then one closing line; nothing written."""
    import yaml

    d = inv(node_groups=gpus(files="/dev/nvidia[0-3]", links="none"), topology={"switches": [
        {"name": "leaf1", "nodes": "n[1-4]"}]})
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(d))
    tpl = tmp_path / "tpl"
    tpl.mkdir()
    # a site template that drops the gres.conf lines: slurm.conf says Gres=gpu:h100:4, gres.conf gives nothing
    (tpl / "gres.conf.j2").write_text("{{ header }}\n# target: Slurm {{ slurm_version }}\nAutoDetect=off\n")
    r = slurmkit("conf", "generate", str(p), "-o", str(tmp_path / "out"), "--templates", str(tpl), "--no-real-parse")
    assert r.returncode == 2 and not (tmp_path / "out").exists()
    finding = [ln for ln in r.stderr.splitlines() if "gres.conf vs slurm.conf" in ln]
    assert len(finding) == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("invalid configuration: 1 problem listed above; nothing written")


def test_switch_names_are_names_not_hostnames() -> None:
    """Switch names follow the name rule ('_' allowed), also where a parent lists them; hosts stay RFC 1123."""
    d = inv(topology={"switches": [{"name": "leaf_1", "nodes": "n[1-2]"}, {"name": "leaf_2", "nodes": "n[3-4]"},
                                   {"name": "spine_0", "switches": "leaf_[1-2]"}]})
    assert "SwitchName=spine_0 Switches=leaf_[1-2]" in gen(d)["topology.conf"]
    d["topology"]["switches"][2]["switches"] = "leaf_[1-2] #"
    with pytest.raises(InventoryError, match=r"topology\.switches\[2\]\.switches"):
        load_cluster_dict(d)


# --- review of issue 9: keys slurmkit owns on a partition line ------------------------------------------------


@pytest.mark.parametrize("key,own", [("PartitionName", "name"), ("Nodes", "groups"), ("default", "default"),
                                     ("MaxTime", "max_time"), ("QOS", "qos"), ("PriorityTier", "priority_tier")])
def test_partition_extra_cannot_set_what_slurmkit_writes(key: str, own: str) -> None:
    parts = [{"name": "p", "groups": ["a"], "default": True, "extra": {key: "other"}}]
    refused(inv(partitions=parts), f"partitions[0].extra.{key}", f"set partitions[0].{own} instead")


def test_partition_extra_renaming_is_exit_2_nothing_written(tmp_path: Path) -> None:
    import yaml

    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv(partitions=[{"name": "p", "groups": ["a"], "extra": {"PartitionName": "other"}}])))
    r = slurmkit("conf", "generate", str(p), "-o", str(tmp_path / "out"), "--no-real-parse")
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "partitions[0].extra.PartitionName" in r.stderr and not (tmp_path / "out").exists()
    # keys slurmkit does not write stay the site's, and per-GPU defaults stay overridable
    f = gen(inv(partitions=[{"name": "p", "groups": ["a"], "extra": {"OverSubscribe": "NO", "DefCpuPerGPU": "2"}}]))
    line = next(ln for ln in f["slurm.conf"].splitlines() if ln.startswith("PartitionName=p "))
    assert "OverSubscribe=NO" in line and "DefCpuPerGPU=2" in line


def test_controller_given_as_an_address_is_refused(tmp_path: Path) -> None:
    refused(inv(controller={"hosts": ["10.0.0.1"]}), "controller.hosts[0]", "hostname -s")
    refused(inv(controller={"hosts": ["head01", "10.0.0.2"], "state_dir": "/shared/s"}), "controller.hosts[1]",
            "is an address")
    # accounting.host may stay an address (AccountingStorageHost takes a name or an address)
    assert "AccountingStorageHost=10.0.0.9" in gen(inv(accounting={"host": "10.0.0.9"}))["slurm.conf"].splitlines()
    import yaml

    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv(controller={"hosts": ["10.0.0.1", "10.0.0.2"], "state_dir": "/shared/s"})))
    r = slurmkit("conf", "generate", str(p), "-o", str(tmp_path / "out"), "--no-real-parse")
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "controller.hosts[0]" in r.stderr and not (tmp_path / "out").exists()


# --- issue 20 item 5: backfill window and large-cluster settings ---------------------------------------------


def _sched(files: dict[str, str]) -> str:
    return next((ln.split("=", 1)[1] for ln in files["slurm.conf"].splitlines() if ln.startswith("SchedulerParameters=")), "")


def test_bf_window_covers_the_longest_partition_max_time() -> None:
    parts = [{"name": "p", "groups": ["a"], "default": True, "max_time": "14-00:00:00"},
             {"name": "q", "groups": ["a"], "max_time": "7-00:00:00"}, {"name": "u", "groups": ["a"]}]  # u: UNLIMITED
    # 14 days = 20160 min; 1440 slots of the default (1 day / 60 s) -> 840 s
    assert _sched(gen(inv(partitions=parts))).split(",")[-2:] == ["bf_window=20160", "bf_resolution=840"]
    # a day or less: Slurm's defaults are right, nothing written
    assert _sched(gen(inv(partitions=[{"name": "p", "groups": ["a"], "max_time": "1-00:00:00"}]))) in ("", "nohold_on_prolog_fail")
    # past Slurm's 30-day maximum: the maximum, resolution 1800 s (still under bf_resolution's 3600 cap)
    long = gen(inv(partitions=[{"name": "p", "groups": ["a"], "max_time": "60-00:00:00"}]))
    assert "bf_window=43200,bf_resolution=1800" in _sched(long)
    # a site's own value wins item by item (SchedulerParameters merges)
    site = gen(inv(partitions=parts, slurm_conf={"SchedulerParameters": "bf_window=30000"}))
    assert "bf_window=30000" in _sched(site) and "bf_resolution=840" in _sched(site)


def test_large_clusters_get_the_big_sys_settings_per_release() -> None:
    from slurmkit.generate.slurmconf import tree_width
    from slurmkit.generate.versions import features_for

    old, new = features_for("22.05"), features_for("24.11")
    assert tree_width(512, old) is None and tree_width(512, new) is None  # under 1,024 nodes: the default
    assert tree_width(2048, old) == 46  # square root up to 2,500 nodes (22.05's man page), 45.25 rounded up
    assert tree_width(4096, old) == 16 and tree_width(4096, new) is None  # cube root; 16 is 24.11's default
    assert tree_width(100_000, new) == 47
    big = inv(node_groups=group(hosts="n[0001-4096]"), partitions=[{"name": "p", "groups": ["a"], "max_time": "2-0"}])
    f22, f24 = gen(big, "22.05")["slurm.conf"], gen(big, "24.11")["slurm.conf"]
    for text in (f22, f24):
        assert "MessageTimeout=30\n" in text and "JobAcctGatherFrequency=task=300\n" in text
        assert "bf_continue" in text
    assert "TreeWidth=16\n" in f22 and "TreeWidth" not in f24
    small = gen(inv())["slurm.conf"]
    assert "MessageTimeout" not in small and "TreeWidth" not in small and "bf_continue" not in small


@pytest.mark.parametrize("hosts", ["gpu[000001-050000]", "n[1-3,5],m[01-02]x[1-2]", "a,b", "node1", "r[1-2]n[01-04]"])
def test_node_count_without_expanding_matches_the_hostlist_library(hosts: str) -> None:
    from slurmkit import hostlist
    from slurmkit.generate.slurmconf import _folded_count

    assert _folded_count(hostlist.canonical(hosts)) == hostlist.count(hosts)


def test_values_with_spaces_and_hashes_are_written_quoted_and_read_back_identically() -> None:
    # parse_config.c (22.05, 24.11): a value with whitespace only in double quotes; '#' starts a comment unless
    # escaped (issue 19: InteractiveStepOptions, RebootProgram with arguments)
    opts = "--interactive --pty --preserve-env --mpi=none $SHELL"
    d = inv(slurm_conf={"InteractiveStepOptions": opts, "RebootProgram": "/sbin/reboot #now"})
    files = gen(d)
    conf = parse_slurm_conf(files["slurm.conf"])
    assert conf.value("InteractiveStepOptions") == opts and conf.value("RebootProgram") == "/sbin/reboot #now"
    assert f'InteractiveStepOptions="{opts}"' in files["slurm.conf"]
