"""slurmkit's recommendations for an adopted site (issue 19 item 3): never added silently, listed by `conf validate`
as advice with the exact inventory edit and the rollout class it would need (the per-release rollout table, through
the same semantic diff `conf diff` uses). A site written from scratch keeps today's generated defaults."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

from slurmkit.adopt.importer import import_site
from slurmkit.generate.advice import _set, advise, recommendations
from slurmkit.generate.slurmconf import generate
from slurmkit.model import yamlio
from slurmkit.model.load import load_cluster, load_cluster_dict

ROOT = Path(__file__).resolve().parents[2]

SITE = """\
ClusterName=gpuc
SlurmctldHost=head1
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
TaskPlugin=task/affinity
PreemptType=preempt/partition_prio
SchedulerParameters=bf_continue
NodeName=gpu[1-4] Sockets=2 CoresPerSocket=16 ThreadsPerCore=2 RealMemory=512000 Gres=gpu:h100:8
NodeName=cpu[1-2] Sockets=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=128000
PartitionName=gpu Nodes=gpu[1-4] Default=YES MaxTime=7-00:00:00
PartitionName=cpu Nodes=cpu[1-2] MaxTime=1-00:00:00 DefMemPerCPU=2000
"""
GRES = "NodeName=gpu[1-4] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"
CGROUP = "ConstrainCores=yes\nConstrainRAMSpace=yes\n"


def site() -> dict:
    res = import_site({"slurm.conf": SITE, "gres.conf": GRES, "cgroup.conf": CGROUP}, "22.05")
    assert res.lost == []
    return res.inventory


def test_import_adds_no_recommendation_and_validate_lists_each_with_its_edit_and_rollout_class() -> None:
    inv = site()
    files = generate(load_cluster_dict(inv), version="22.05")
    # nothing slurmkit would add for a new site is in the adopted site's files
    for key in ("DefCpuPerGPU", "DefMemPerGPU", "NodeSet", "PreemptMode", "PropagateResourceLimitsExcept",
                "bf_window", "Weight"):
        assert key not in files["slurm.conf"], key
    assert "ConstrainDevices" not in files["cgroup.conf"]
    got = {a.edit_text(): a.action for a in advise(inv, "22.05")}
    assert got == {
        # 64 CPUs and 512000 MB over 8 GPUs (slurmconf.per_gpu_defaults; no reserve)
        "partitions[0].extra.DefCpuPerGPU: '8'": "reconfigure",
        "partitions[0].extra.DefMemPerGPU: '64000'": "reconfigure",
        "partitions[0].extra.DefMemPerCPU: '8000'": "reconfigure",
        "nodesets.ns_gpu: {Nodes: 'gpu[1-4]'}; partitions[0].nodes: ns_gpu": "reconfigure",
        "nodesets.ns_cpu: {Nodes: 'cpu[1-2]'}; partitions[1].nodes: ns_cpu": "reconfigure",
        # the cpu partition keeps its own DefMemPerCPU and has no GPU: nothing per GPU there
        "slurm_conf.SchedulerParameters: bf_continue,bf_window=10080,bf_resolution=420": "reconfigure",
        "slurm_conf.PreemptMode: REQUEUE": "reconfigure",
        "slurm_conf.PropagateResourceLimitsExcept: MEMLOCK": "reconfigure",
        # TaskPlugin is not in the rollout table: its default entry (slurm.conf(5) 22.05 TaskPlugin names no restart)
        "slurm_conf.TaskPlugin: task/cgroup,task/affinity": "restart",  # slurmd loads it at start (22.05)
        # cgroup.conf is read by slurmd at start: a restart on 22.05 (rollout._slurmd_restart)
        "cgroup_conf.ConstrainSwapSpace: 'yes'": "restart",
        "cgroup_conf.ConstrainDevices: 'yes'": "restart",
    }, got
    # 24.11: a reconfigure restarts the daemons itself (23.11+), so the cgroup.conf edits need only that
    assert {a.edit_text(): a.action for a in advise(inv, "24.11")}["cgroup_conf.ConstrainDevices: 'yes'"] == "reconfigure"


def test_each_edit_applied_settles_its_advice() -> None:
    inv = site()
    for a in advise(inv, "22.05"):
        edited = copy.deepcopy(inv)
        for path, value in a.edits:
            _set(edited, path, value)
        left = {b.edit_text() for b in recommendations(load_cluster_dict(edited))}
        assert a.edit_text() not in left, a.line()


def test_a_site_written_from_scratch_keeps_todays_defaults_and_gets_no_advice() -> None:
    cluster = load_cluster(ROOT / "examples" / "lab.yaml")
    assert not cluster.adopted and recommendations(cluster) == []
    conf = generate(cluster)["slurm.conf"]
    assert "DefCpuPerGPU=" in conf and "NodeSet=" in conf and "PropagateResourceLimitsExcept=MEMLOCK" in conf


def test_cli_validate_prints_advice_and_keeps_the_verdict(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(yamlio.dump(site()))
    res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "validate", str(path), "--no-real-parse"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    advice = [ln for ln in res.stderr.splitlines() if ln.startswith("advice: ")]
    assert len(advice) == 11 and all("-- inventory edit: " in ln and "(rollout: " in ln for ln in advice), res.stderr
    assert any("slurm_conf.PreemptMode: REQUEUE (rollout: reconfigure)" in ln for ln in advice), advice


def test_a_dynamic_site_with_gpus_in_grestypes_is_advised_to_confine_devices() -> None:
    """No node line to read the GPUs from (nodes register with slurmd -Z): GresTypes=gpu says there are GPUs."""
    from tests.unit.test_adopt_dynamic import FILES

    inv = import_site(FILES, "24.11").inventory
    edits = {a.edit_text() for a in recommendations(load_cluster_dict(inv))}
    assert "cgroup_conf.ConstrainDevices: 'yes'" in edits, edits
    assert not any("DefCpuPerGPU" in e for e in edits)  # no node shape to share out


def test_advice_that_cannot_be_computed_leaves_the_verdict(tmp_path: Path) -> None:
    """A config directory whose slurmkit.yaml copy cannot render for the release validated (a key that release lacks)
    still gets its verdict; the advice says why it is missing instead of ending the command."""
    d = tmp_path / "etc"
    d.mkdir()
    (d / "slurm.conf").write_text("ClusterName=c\nSlurmctldHost=h\nNodeName=n1 CPUs=2 RealMemory=1000\n"
                                  "PartitionName=p Nodes=n1\n")
    data = import_site({"slurm.conf": (d / "slurm.conf").read_text()}, "24.11").inventory
    data["slurm_conf"] = {"PreemptParameters": "strict_order"}  # 23.02+
    (d / "slurmkit.yaml").write_text(yamlio.dump(data))
    res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "validate", str(d), "--slurm-version",
                          "22.05", "--no-real-parse"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0 and "ok: " in res.stdout, res.stdout + res.stderr
    assert "advice: not computed: slurm_conf.PreemptParameters" in res.stderr, res.stderr


def test_a_directory_slurmkit_did_not_write_gets_the_advice_for_its_import(tmp_path: Path) -> None:
    """`conf validate /etc/slurm` (the README's third command) on a site's own files: the advice is for the inventory
    `conf import` writes from them, and says so."""
    d = tmp_path / "etc"
    d.mkdir()
    (d / "slurm.conf").write_text(SITE)
    (d / "gres.conf").write_text(GRES)
    (d / "cgroup.conf").write_text(CGROUP)
    res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "validate", str(d), "--slurm-version",
                          "22.05", "--no-real-parse"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"note: the advice's edits are to the inventory `slurmkit conf import {d}` writes" in res.stderr
    advice = {ln.split(" -- inventory edit: ")[1] for ln in res.stderr.splitlines() if ln.startswith("advice: ")}
    assert advice == {f"{a.edit_text()} (rollout: {a.action})" for a in advise(site(), "22.05")}, advice


def test_task_plugins_are_read_without_their_prefix() -> None:
    """TaskPlugin=affinity,cgroup is task/affinity,task/cgroup to Slurm's plugin loader: no task/cgroup advice (it
    was given, and applying it changed nothing); a typo'd cgroupx is no task/cgroup."""
    from tests.unit.test_adopt_dynamic import FILES

    def edits(task: str) -> set[str]:
        conf = FILES["slurm.conf"] + f"TaskPlugin={task}\n"
        inv = import_site({**FILES, "slurm.conf": conf}, "24.11").inventory
        return {a.edit_text() for a in recommendations(load_cluster_dict(inv))}
    assert not any("TaskPlugin" in e for e in edits("affinity,cgroup"))
    assert not any("TaskPlugin" in e for e in edits("task/affinity,task/cgroup"))
    assert any("TaskPlugin" in e for e in edits("task/affinity,task/cgroupx"))
