"""Generator behaviour per feature: node shapes, MIG, shards, release gates, overrides."""

from __future__ import annotations

import copy

import pytest

from slurmkit.errors import InventoryError
from slurmkit.generate import Overrides, generate
from slurmkit.generate.slurmconf import block_levels, mig_cap_minors
from slurmkit.model.cluster import MigInstance
from slurmkit.model.load import load_cluster_dict

BASE = {
    "cluster": "t",
    "slurm_version": "24.11",
    "controller": {"hosts": ["head"]},
    "node_groups": [
        {"name": "a", "hosts": "n[1-4]", "cpu": {"sockets": 2, "cores_per_socket": 8}, "memory_mb": 64000,
         "reserve": {"memory_mb": 2000, "cores": 1},
         "gpus": {"type": "h100", "count": 2, "files": "/dev/nvidia[0-1]", "cores": ["0-7", "8-15"], "links": "nvlink"}},
    ],
    "partitions": [{"name": "p", "groups": ["a"], "default": True}],
}


def inv(**changes: object) -> dict:
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def test_one_nodename_line_per_shape() -> None:
    d = inv()
    twin = copy.deepcopy(d["node_groups"][0])
    twin.update(name="b", hosts="n[5-8]")
    d["node_groups"].append(twin)
    conf = generate(load_cluster_dict(d))["slurm.conf"]
    lines = [ln for ln in conf.splitlines() if ln.startswith("NodeName=")]
    assert lines == [lines[0]] and lines[0].startswith("NodeName=n[1-8] ")
    assert "MemSpecLimit=2000" in lines[0] and "CoreSpecCount=1" in lines[0] and "RealMemory=64000" in lines[0]


def test_mig_lines_use_multiplefiles_and_caps_minors() -> None:
    assert mig_cap_minors(0, MigInstance("1g.5gb", 2, 0)) == (21, 22)  # gres.conf(5) example
    assert mig_cap_minors(1, MigInstance("3g.40gb", 1, 0)) == (147, 148)
    d = inv()
    d["node_groups"][0]["gpus"]["mig"] = [["3g.40gb@1", "3g.40gb@2"], []]
    f = generate(load_cluster_dict(d))
    assert "Gres=gpu:h100_3g.40gb:2,gpu:h100:1" in f["slurm.conf"]
    mig = [ln for ln in f["gres.conf"].splitlines() if "MultipleFiles" in ln]
    assert len(mig) == 2 and "MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13" in mig[0]
    assert not any("Links=" in ln for ln in f["gres.conf"].splitlines())


def test_shards_spread_over_gpus_with_files() -> None:
    d = inv()
    d["node_groups"][0]["gpus"]["shards"] = 5
    f = generate(load_cluster_dict(d))
    assert "GresTypes=gpu,shard" in f["slurm.conf"] and "Gres=gpu:h100:2,shard:5" in f["slurm.conf"]
    shard = [ln for ln in f["gres.conf"].splitlines() if "Name=shard" in ln]
    assert shard == ["NodeName=n[1-4] Name=shard Count=3 File=/dev/nvidia0", "NodeName=n[1-4] Name=shard Count=2 File=/dev/nvidia1"]


def test_typed_tres_with_accounting() -> None:
    f = generate(load_cluster_dict(inv(accounting={"host": "db"})))
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:h100" in f["slurm.conf"]


@pytest.mark.parametrize("version", ["22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11"])
def test_cgroup_plugin_is_slurms_default_unless_the_inventory_says(version: str) -> None:
    """Issue 9 item 9: cgroup/v2 was forced from 23.02, fatal on hybrid-cgroup hosts; autodetect is Slurm's default."""
    f = generate(load_cluster_dict(inv()), version=version)
    assert "CgroupPlugin=autodetect\n" in f["cgroup.conf"] and "CgroupAutomount" not in f["cgroup.conf"]
    f = generate(load_cluster_dict(inv(cgroup_conf={"CgroupPlugin": "cgroup/v2"})), version=version)
    assert "CgroupPlugin=cgroup/v2\n" in f["cgroup.conf"] and "autodetect" not in f["cgroup.conf"]


def test_release_gates_name_the_key() -> None:
    blocks = {"blocks": [{"name": "b1", "nodes": "n[1-2]"}, {"name": "b2", "nodes": "n[3-4]"}], "block_sizes": [2, 4]}
    c = load_cluster_dict(inv(topology=blocks))
    with pytest.raises(InventoryError, match=r"^topology\.blocks: block topology needs Slurm >= 23\.11"):
        generate(c, version="22.05")
    assert "BlockLevels=0,1" in generate(c, version="23.11")["topology.conf"]
    d = inv()
    d["node_groups"][0]["gpus"]["autodetect"] = "nvidia"
    d["node_groups"][0]["gpus"]["links"] = "none"  # nvidia detection sees no NVLinks (tested in test_generate_second_pass)
    with pytest.raises(InventoryError, match=r"node_groups\[0\]\.gpus\.autodetect"):
        generate(load_cluster_dict(d), version="24.05")
    assert "AutoDetect=nvidia Name=gpu" in generate(load_cluster_dict(d), version="24.11")["gres.conf"]
    with pytest.raises(InventoryError, match=r"cgroup_conf\.CgroupAutomount"):
        generate(load_cluster_dict(inv(cgroup_conf={"CgroupAutomount": True})), version="23.11")
    with pytest.raises(InventoryError, match="power-of-two"):
        block_levels([18, 54])


def test_overrides_replace_keys_and_prefix_devices() -> None:
    ov = Overrides(slurm_conf=(("ProctrackType", "proctrack/linuxproc"), ("SlurmdParameters", "config_overrides")),
                   node_params={"a": (("NodeAddr", "127.0.0.1"), ("Port", "[17001-17004]"))}, gres_file_prefix="/tmp/lab/dev")
    f = generate(load_cluster_dict(inv()), conf_dir="/tmp/lab/etc", overrides=ov)
    assert "ProctrackType=proctrack/linuxproc" in f["slurm.conf"] and "ProctrackType=proctrack/cgroup" not in f["slurm.conf"]
    assert "NodeAddr=127.0.0.1 Port=[17001-17004] State=UNKNOWN" in f["slurm.conf"]
    assert "File=/tmp/lab/dev/nvidia0" in f["gres.conf"]


def test_hook_wrappers_point_at_the_inventory_copy() -> None:
    f = generate(load_cluster_dict(inv(hooks={"prolog": True, "healthcheck_interval": 60})), conf_dir="/etc/slurm")
    assert "Prolog=/etc/slurm/slurmkit-prolog" in f["slurm.conf"] and "HealthCheckInterval=60" in f["slurm.conf"]
    assert "hook prolog --inventory /etc/slurm/slurmkit.yaml" in f["slurmkit-prolog"]


@pytest.mark.parametrize(
    ("mig", "match"),
    [
        (["3g.40gb"], r"mig\[0\]: '3g\.40gb': write PROFILE@GI"),
        (["3g.40gb@1", "3g.40gb@1"], r"the same GPU/compute instance id is listed twice"),
        ([["3g.40gb@1"]], r"mig: has 1 per-GPU layouts but count is 2"),
        (["big@1"], r"mig\[0\]\.profile: 'big' is not a MIG profile"),
    ],
)
def test_bad_mig_input(mig: list, match: str) -> None:
    d = inv()
    d["node_groups"][0]["gpus"]["mig"] = mig
    with pytest.raises(InventoryError, match=match):
        load_cluster_dict(d)
