"""`conf apply` and `conf drift` on the running lab (real slurmctld + 8 slurmd).

The lab renders its files from its inventory plus a host overlay (ports, paths, NodeAddr, linuxproc).
``lab_overlay`` recovers that overlay from the lab's own files, so `conf apply` regenerates exactly what the
lab runs except for the inventory change under test. Every test restores the lab's config afterwards:
the lab is shared by the whole session.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurmkit.lab.config import OVERRIDES_FILE

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[2]


def sk(lab, *args: str) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **lab.env}, timeout=120)


def scontrol(lab, *args: str) -> str:  # type: ignore[no-untyped-def]
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, env={**os.environ, **lab.env},
                          timeout=30, check=True).stdout


@pytest.fixture()
def lab_inv(lab, tmp_path: Path) -> Iterator[tuple[dict, Path, Path]]:  # type: ignore[no-untyped-def]
    """(inventory dict, overlay file, original inventory file); restores the original config afterwards."""
    text = (lab.etc / "slurmkit.yaml").read_text()
    original = tmp_path / "original.yaml"
    original.write_text(text)
    overlay = lab.etc / OVERRIDES_FILE  # the lab's single-host overlay, written by `lab up`
    res = sk(lab, "conf", "diff", str(original), "--against", str(lab.etc), "--overrides", str(overlay))
    assert res.returncode == 0 and "nothing to do" in res.stdout, res.stdout + res.stderr  # the overlay is exact
    try:
        yield yaml.safe_load(text), overlay, original
    finally:
        if "slurmctld" not in lab.running_pids():
            lab.start_slurmctld()
        res = sk(lab, "conf", "apply", str(original), "--to", str(lab.etc), "--overrides", str(overlay), "--execute",
                 "--allow-disruptive", "--timeout", "60")
        assert res.returncode == 0, res.stdout + res.stderr


def test_apply_weight_and_partition_take_effect_after_reconfigure(lab, lab_inv, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv, overlay, _orig = lab_inv
    new = copy.deepcopy(inv)
    new["node_groups"][0]["weight"] = 77
    new["partitions"].append({"name": "extra", "groups": [new["node_groups"][0]["name"]], "max_time": "00:30:00"})
    p = tmp_path / "new.yaml"
    p.write_text(yaml.safe_dump(new, sort_keys=False))
    res = sk(lab, "conf", "apply", str(p), "--to", str(lab.etc), "--overrides", str(overlay), "--reconfigure")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[reconfigure] slurm.conf: PartitionName=extra" in res.stdout
    assert "real parse: slurmctld accepted the config" in res.stderr
    assert "scontrol reconfigure: done" in res.stdout
    deadline = time.monotonic() + 20
    while True:
        node = scontrol(lab, "-o", "show", "node", "node1")
        parts = scontrol(lab, "-o", "show", "partition")
        if ("Weight=77" in node and "PartitionName=extra" in parts) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "Weight=77" in node
    assert re.search(r"PartitionName=extra .*MaxTime=00:30:00", parts)
    assert list((lab.etc / ".slurmkit-backup").iterdir()), "the replaced files were backed up"


def test_a_week_long_partition_widens_the_running_backfill_window(lab, lab_inv, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 20 item 5, judged by slurmctld: a partition MaxTime of 7 days brings bf_window=10080 (slurm.conf(5): "at
    least as long as the highest allowed time limit") and bf_resolution=420 with it; the running controller takes
    both on a reconfigure (before: the default 1-day window, so week-long jobs starved the backfill plan)."""
    inv, overlay, _orig = lab_inv
    new = copy.deepcopy(inv)
    new["partitions"].append({"name": "week", "groups": [new["node_groups"][0]["name"]], "max_time": "7-00:00:00"})
    p = tmp_path / "new.yaml"
    p.write_text(yaml.safe_dump(new, sort_keys=False))
    res = sk(lab, "conf", "apply", str(p), "--to", str(lab.etc), "--overrides", str(overlay), "--reconfigure")
    assert res.returncode == 0, res.stdout + res.stderr
    deadline = time.monotonic() + 20
    while True:
        conf = scontrol(lab, "show", "config")
        if "bf_window=10080" in conf or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    line = next(ln for ln in conf.splitlines() if ln.startswith("SchedulerParameters"))
    assert "bf_window=10080" in line and "bf_resolution=420" in line, line


def test_drift_finds_an_injected_mismatch(lab, lab_inv) -> None:  # type: ignore[no-untyped-def]
    _inv, _overlay, original = lab_inv
    res = sk(lab, "conf", "drift", str(original))
    assert res.returncode == 0, res.stdout + res.stderr
    scontrol(lab, "update", "NodeName=node3", "AvailableFeatures=h100", "ActiveFeatures=h100")
    try:
        res = sk(lab, "conf", "drift", str(original))
        assert res.returncode == 1
        assert res.stdout.strip().splitlines() == [
            "node3: Features: inventory h100,nvlink, files h100,nvlink, cluster h100 (the cluster differs from its "
            "files: changed by hand (scontrol update/create) or the files were not loaded (scontrol reconfigure))"]
    finally:
        scontrol(lab, "update", "NodeName=node3", "AvailableFeatures=h100,nvlink", "ActiveFeatures=h100,nvlink")


def test_drift_sees_hand_changes_to_weight_and_partitions(lab, lab_inv) -> None:  # type: ignore[no-untyped-def]
    """Issue 20 item 3: a hand change of Weight, of a partition's MaxTime, a partition set DOWN and a partition made
    with `scontrol create` are each found, and each is said to be the cluster's (files and inventory agree)."""
    _inv, _overlay, original = lab_inv
    scontrol(lab, "update", "NodeName=node2", "Weight=77")
    scontrol(lab, "update", "PartitionName=gpu", "MaxTime=02:00:00", "State=DOWN")
    scontrol(lab, "create", "PartitionName=handmade", "Nodes=node1", "MaxTime=01:00:00")
    try:
        res = sk(lab, "conf", "drift", str(original))
        assert res.returncode == 1, res.stdout + res.stderr
        lines = res.stdout.strip().splitlines()
        hand = "(the cluster differs from its files: changed by hand"
        assert any(ln.startswith("node2: Weight: inventory 10, files 10, cluster 77 " + hand) for ln in lines), lines
        assert any(ln.startswith("partition gpu: MaxTime: inventory 1-00:00:00, files 1-00:00:00, cluster 02:00:00 "
                                 + hand) for ln in lines), lines
        assert any(ln.startswith("partition gpu: State: inventory UP, files UP, cluster DOWN " + hand) for ln in lines)
        assert any(ln.startswith("partition handmade: defined: inventory -, files -, cluster yes " + hand)
                   for ln in lines), lines
        assert len(lines) == 4, lines
    finally:
        subprocess.run(["scontrol", "delete", "PartitionName=handmade"], env={**os.environ, **lab.env}, timeout=30,
                       check=False)
        scontrol(lab, "update", "PartitionName=gpu", "MaxTime=1-00:00:00", "State=UP")
        scontrol(lab, "update", "NodeName=node2", "Weight=10")


def test_files_written_but_not_loaded_are_not_in_sync(lab, lab_inv, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 20 item 3: after `conf apply` without --reconfigure the files match the inventory but slurmctld runs the
    old ones: `conf diff` must not say "nothing to do" and `conf drift` names the cluster and the unloaded file
    (scontrol show config's HASH_VAL)."""
    inv, overlay, _orig = lab_inv
    new = copy.deepcopy(inv)
    new["node_groups"][0]["weight"] = 55
    p = tmp_path / "new.yaml"
    p.write_text(yaml.safe_dump(new, sort_keys=False))
    res = sk(lab, "conf", "apply", str(p), "--to", str(lab.etc), "--overrides", str(overlay), "--no-real-parse")
    assert res.returncode == 0, res.stdout + res.stderr
    res = sk(lab, "conf", "diff", str(p), "--against", str(lab.etc), "--overrides", str(overlay))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "nothing to do" not in res.stdout and "HASH_VAL = Different" in res.stdout, res.stdout
    assert "scontrol reconfigure" in res.stdout
    res = sk(lab, "conf", "drift", str(p))
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("node[1-8]: Weight: inventory 55, files 55, cluster 10 (the cluster differs from its files")
    assert "written but not loaded" in lines[-1] and len(lines) == 2, lines


def test_a_gpu_job_without_mem_gets_its_per_gpu_share_not_the_node(lab) -> None:  # type: ignore[no-untyped-def]
    """Issue 9 item 14, judged by slurmctld: the generated partition's DefCpuPerGPU/DefMemPerGPU apply to a job
    that asks for GPUs only (before: mem=<the whole node>, so single-GPU jobs could not share a node)."""
    from slurmkit.model import load_cluster

    g = load_cluster(lab.etc / "slurmkit.yaml").node_groups[0]
    part = scontrol(lab, "-o", "show", "partition")
    assert f"DefMemPerGPU={g.mem_per_gpu_mb}" in part and f"DefCpuPerGPU={g.cpus_per_gpu}" in part
    out = subprocess.run(["sbatch", "--parsable", "-N1", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 30"],
                         capture_output=True, text=True, env={**os.environ, **lab.env}, timeout=30, check=True)
    job = out.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 30
        while True:
            rec = scontrol(lab, "-o", "show", "job", job)
            if "JobState=RUNNING" in rec or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert "JobState=RUNNING" in rec, rec
        assert f"mem={2 * g.mem_per_gpu_mb}M" in rec, rec
        assert f"cpu={2 * g.cpus_per_gpu}," in rec, rec
    finally:
        subprocess.run(["scancel", job], env={**os.environ, **lab.env}, timeout=30, check=False)


def _submit(lab, *args: str) -> str:  # type: ignore[no-untyped-def]
    out = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args], capture_output=True, text=True,
                         env={**os.environ, **lab.env}, timeout=30, check=True)
    return out.stdout.strip().split(";")[0]


def _wait_state(lab, job: str, timeout: float = 30) -> str:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        rec = scontrol(lab, "-o", "show", "job", job)
        if "JobState=RUNNING" in rec or time.monotonic() > deadline:
            return rec
        time.sleep(0.5)


def test_a_cpu_only_job_leaves_the_other_gpus_schedulable(lab) -> None:  # type: ignore[no-untyped-def]
    """Issue 20 item 4, judged by slurmctld: a 1-CPU job with no --mem on a GPU node takes DefMemPerCPU (the node's
    memory per CPU), not the whole node ("0 (unlimited)" before), so a 7-GPU job still starts beside it; and the
    DefMemPerCPU on the same partition line does not replace DefMemPerGPU for GPU jobs (cons_tres's per-GRES
    memory wins where the job names no memory)."""
    from slurmkit.generate.slurmconf import cpu_job_mem_default
    from slurmkit.model import load_cluster

    g = load_cluster(lab.etc / "slurmkit.yaml").node_groups[0]
    mpc = cpu_job_mem_default([g])
    assert mpc == g.usable_memory_mb // g.usable_cpus
    part = scontrol(lab, "-o", "show", "partition")
    assert f"DefMemPerCPU={mpc}" in part and f"DefMemPerGPU={g.mem_per_gpu_mb}" in part, part
    idle = subprocess.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], capture_output=True, text=True,
                          env={**os.environ, **lab.env}, timeout=30, check=True).stdout.split()
    assert idle, "no idle node in the lab"
    node = sorted(idle)[-1]
    jobs = []
    try:
        jobs.append(_submit(lab, "-w", node, "-n1", "--wrap", "sleep 60"))
        rec = _wait_state(lab, jobs[0])
        assert "JobState=RUNNING" in rec, rec
        assert f"mem={mpc}M" in rec, rec
        jobs.append(_submit(lab, "-w", node, "-N1", f"--gres=gpu:{g.gpu_count - 1}", "--wrap", "sleep 30"))
        rec = _wait_state(lab, jobs[1])
        assert "JobState=RUNNING" in rec, rec  # before: PENDING Reason=Resources, the 1-CPU job held all memory
        assert f"mem={(g.gpu_count - 1) * g.mem_per_gpu_mb}M" in rec, rec
    finally:
        for j in jobs:
            subprocess.run(["scancel", j], env={**os.environ, **lab.env}, timeout=30, check=False)


def test_ha_preset_real_parse_on_the_labs_release(lab) -> None:  # type: ignore[no-untyped-def]
    """The HA preset's real parse by the slurmctld of the lab's release (24.11 from its cached root in the second
    pass of tests/run.sh: real_parse picks it by the target release, and says so).
    24.11 opens its RPC ports before it asks the backup to relinquish control: with the backup on loopback
    the copy asked itself and waited CONTROL_TIMEOUT (30 s), past the parse deadline (validate.BACKUP_NET)."""
    from slurmkit.backend import realparse as v
    from slurmkit.generate import generate
    from slurmkit.model.load import load_cluster

    files = generate(load_cluster(ROOT / "examples" / "dgx-h100-superpod-su.yaml"), version=lab.release)
    rp = v.real_parse(files, lab.release)
    assert rp.ok is True, rp
    assert rp.judge.startswith(f"slurmctld {lab.release}."), rp
    assert any("_shutdown_bu_thread" in e and "head02" in e and "Network is unreachable" in e for e in rp.expected), rp


def _job(lab, *args: str) -> str:  # type: ignore[no-untyped-def]
    out = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args], capture_output=True, text=True,
                         env={**os.environ, **lab.env}, timeout=30, check=True)
    return out.stdout.strip().split(";")[0]


def _state(lab, job: str) -> str:  # type: ignore[no-untyped-def]
    rec = scontrol(lab, "-o", "show", "job", job)
    return re.search(r"JobState=(\S+)", rec).group(1)  # type: ignore[union-attr]


def test_execute_carries_a_restart_plan_through_with_a_job_running(lab, lab_inv, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 20 item 1: SlurmdPort needs every daemon restarted on both releases (slurm.conf(5) 22.05 "A restart
    of slurmctld is required"; 23.11+ "Changes to TCP listening settings will require a daemon restart"); the lab's
    nodes listen on their own Port= so the value itself changes nothing. --execute restarts slurmctld (state kept)
    and every slurmd, never reconfigures, and the running job goes on."""
    inv, overlay, _orig = lab_inv
    new = copy.deepcopy(inv)
    new.setdefault("slurm_conf", {})["SlurmdPort"] = 6999
    p = tmp_path / "new.yaml"
    p.write_text(yaml.safe_dump(new, sort_keys=False))
    job = _job(lab, "-N1", "-w", "node1", "--wrap", "sleep 300")
    try:
        deadline = time.monotonic() + 30
        while _state(lab, job) != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _state(lab, job) == "RUNNING"
        ctld = lab.running_pids()["slurmctld"]
        res = sk(lab, "conf", "apply", str(p), "--to", str(lab.etc), "--overrides", str(overlay), "--reconfigure",
                 "--allow-disruptive")
        assert res.returncode == 3 and "refusing: --reconfigure cannot carry this plan (step 2: restart slurmctld" in res.stderr
        res = sk(lab, "conf", "apply", str(p), "--to", str(lab.etc), "--overrides", str(overlay), "--execute",
                 "--allow-disruptive", "--timeout", "60")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "[restart] slurm.conf: SlurmdPort" in res.stdout
        assert "2/4: restart slurmctld" in res.stdout and "3/4: restart slurmd on every node" in res.stdout
        assert "done: all 4 steps carried out" in res.stdout
        assert lab.running_pids()["slurmctld"] != ctld  # restarted, not reconfigured
        assert "SlurmdPort              = 6999" in scontrol(lab, "show", "config")
        assert _state(lab, job) == "RUNNING"  # survived both restarts
        assert not (lab.etc / ".slurmkit-rollout").exists()
    finally:
        subprocess.run(["scancel", job], env={**os.environ, **lab.env}, timeout=30, check=False)


def test_a_dead_controller_is_named_by_status_and_by_execute(lab, lab_inv, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 20 item 1: `lab status` said "lab: up" with slurmctld gone, and apply said only "Zero Bytes were
    transmitted or received"."""
    import signal

    inv, overlay, _orig = lab_inv
    new = copy.deepcopy(inv)
    new["node_groups"][0]["weight"] = 42
    p = tmp_path / "new.yaml"
    p.write_text(yaml.safe_dump(new, sort_keys=False))
    os.kill(lab.running_pids()["slurmctld"], signal.SIGKILL)
    time.sleep(0.5)
    try:
        res = sk(lab, "lab", "status", "--dir", str(lab.dir))
        assert res.returncode == 1 and "lab: DEGRADED" in res.stdout, res.stdout + res.stderr
        assert "problem: slurmctld is not running; its log ends: " in res.stdout
        res = sk(lab, "conf", "apply", str(p), "--to", str(lab.etc), "--overrides", str(overlay), "--execute",
                 "--no-real-parse", "--timeout", "10")
        assert res.returncode == 4, res.stdout + res.stderr
        err = res.stderr.strip().splitlines()[-1]
        assert "slurmctld is not answering before step 1 of 3 (back up and write the new files on the controller and every node)" in err
        assert f"its log ({lab.dir / 'log' / 'slurmctld.log'}) ends: " in err
        assert "Weight=42" not in (lab.etc / "slurm.conf").read_text()  # nothing written
    finally:
        lab.start_slurmctld()


def test_execute_adds_a_node_and_starts_its_slurmd(make_lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 20 (the 24.11 add): `conf apply --execute` of an inventory with one more node ends with that node
    registered. 22.05 follows faq.shtml's stop-all order (every slurmd restarted, the new one with them); 24.11
    adds by reconfigure, and its plan must start the new node's slurmd (before: write, reconfigure, verify -- the
    verify step waited for node3 until --timeout)."""
    from slurmkit.model.load import load_cluster

    lab = make_lab(nodes=2, spare=1, gpus_per_node=1)
    inv = yaml.safe_load((lab.etc / "slurmkit.yaml").read_text())
    inv["node_groups"][0]["hosts"] = "node[1-3]"
    inv["topology"]["switches"][0]["nodes"] = "node[1-3]"
    p = tmp_path / "three.yaml"
    p.write_text(yaml.safe_dump(inv, sort_keys=False))
    overlay = yaml.safe_load((lab.etc / OVERRIDES_FILE).read_text())
    overlay["node_params"] = {g: dict(kv) for g, kv in lab.node_params(load_cluster(p)).items()}
    ov = tmp_path / "overlay.yaml"
    ov.write_text(yaml.safe_dump(overlay, sort_keys=False))
    res = sk(lab, "conf", "apply", str(p), "--to", str(lab.etc), "--overrides", str(ov), "--execute",
             "--allow-disruptive", "--timeout", "45")
    assert res.returncode == 0, res.stdout + res.stderr
    if lab.release >= "24.11":
        assert "start slurmd on the new nodes node3" in res.stdout, res.stdout
    node = scontrol(lab, "-o", "show", "node", "node3")
    assert re.search(r"State=IDLE\b", node), node


def test_adopting_the_lab_keeps_its_comments_and_adds_one_partition_line(lab, lab_inv, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """issue 33 item 1 end to end: the running lab's config, laid out as an admin's is (a comment, the partitions in
    an Include file), imported (`conf import`), one partition added, `conf apply --reconfigure`: slurmctld runs the
    new partition, which lands in the Include file as its one new line; slurm.conf is byte for byte the same (the
    admin's comment stays), and `conf diff --exit-code` is 0 after."""
    conf = lab.etc / "slurm.conf"
    text = conf.read_text()
    cut = text.index("\nNodeName=") + 1
    lines = (text[:cut] + "# admin: RealMemory measured with `slurmd -C`, 2026-11\n" + text[cut:]).splitlines(True)
    parts_text = "# partitions (site policy: one per queue)\n" + "".join(ln for ln in lines if ln.startswith("PartitionName="))
    annotated = "".join(ln for ln in lines if not ln.startswith("PartitionName=")) + "Include partitions.conf\n"
    (lab.etc / "partitions.conf").write_text(parts_text)
    conf.write_text(annotated)  # the same config to Slurm
    site = tmp_path / "site.yaml"
    res = sk(lab, "conf", "import", str(lab.etc), "--slurm-version", lab.release, "-o", str(site))
    assert site.is_file(), res.stderr
    data = yaml.safe_load(site.read_text())
    assert data.get("adopted") is True
    first = data["partitions"][0]
    data["partitions"].append({"name": "adopted", "nodes": first.get("nodes") or "ALL", "max_time": "00:20:00"})
    site.write_text(yaml.safe_dump(data, sort_keys=False))
    res = sk(lab, "conf", "apply", str(site), "--to", str(lab.etc), "--reconfigure")
    assert res.returncode == 0, res.stdout + res.stderr
    assert conf.read_text() == annotated
    after = (lab.etc / "partitions.conf").read_text()
    assert after.startswith(parts_text) and after[len(parts_text):].startswith("PartitionName=adopted "), after
    assert after[len(parts_text):].count("\n") == 1
    deadline = time.monotonic() + 20
    while "PartitionName=adopted" not in (parts := scontrol(lab, "-o", "show", "partition")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert re.search(r"PartitionName=adopted .*MaxTime=00:20:00", parts)
    res = sk(lab, "conf", "diff", str(site), "--against", str(lab.etc), "--exit-code")
    assert res.returncode == 0, res.stdout + res.stderr
