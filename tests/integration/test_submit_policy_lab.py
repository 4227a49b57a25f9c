"""The generated job_submit.lua judged by a real slurmctld (`lab up --submit-policy`), with raw sbatch: the refusal
reaches sbatch's stderr, the defaults it fills in show in `scontrol show job`, and a 2-node GPU job that fits a leaf
waits for one instead of spanning two. Runs on 22.05 and, in tests/run.sh's second pass, on 24.11 (where the TRES
strings are spelled gres/gpu)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from slurmkit.backend.cli import CLIBackend
from slurmkit.generate.jobsubmit import tres_gpu_prefix
from slurmkit.lab import Lab
from tests.conftest import lab_run
from tests.integration.test_placement_lab import _states, _wait

pytestmark = [pytest.mark.lab, pytest.mark.releases]  # tests/run.sh: run on every release


@pytest.fixture(scope="module")
def plab(make_lab) -> Lab:  # type: ignore[no-untyped-def]
    # leaves node[1-2] and node[3-4]; 2 sockets x 4 cores, 2 GPUs a node: 4 CPUs and 15500 MB per GPU
    return make_lab(submit_policy=True, nodes=4, nodes_per_leaf=2, gpus_per_node=2)


@pytest.fixture
def jobs(plab: Lab) -> Iterator[list[str]]:
    ids: list[str] = []
    yield ids
    if ids:
        lab_run(plab, ["scancel", *ids], check=False)
    b = CLIBackend(env=plab.env)
    _wait(lambda: all(s == "idle" for s in _states(b).values()), 60, "every node idle again")


def _sbatch(lab: Lab, jobs: list[str], *argv: str) -> str:
    r = lab_run(lab, ["sbatch", "--parsable", "-o", "/dev/null", *argv])
    jobs.append(r.stdout.strip().split(";")[0])
    return jobs[-1]


def _show(lab: Lab, job: str) -> str:
    return lab_run(lab, ["scontrol", "show", "job", job]).stdout


def _show_if(lab: Lab, job: str, pred) -> str | None:  # type: ignore[no-untyped-def]
    s = _show(lab, job)
    return s if pred(s) else None


def _field(text: str, key: str) -> str:
    m = re.search(rf"\b{key}=(\S*)", text)
    return m.group(1) if m else ""


def test_the_lab_runs_the_generated_plugin(plab: Lab):
    assert "JobSubmitPlugins=lua" in plab.conf.read_text().splitlines()
    assert (plab.etc / "job_submit.lua").is_file()
    shown = lab_run(plab, ["scontrol", "show", "config"]).stdout
    assert re.search(r"^JobSubmitPlugins\s*=\s*lua\s*$", shown, re.M), shown


def test_a_gpu_job_without_time_is_refused_on_sbatch_stderr(plab: Lab):
    r = lab_run(plab, ["sbatch", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true"], check=False)
    assert r.returncode != 0
    assert "sbatch: error: slurmkit submit_policy require_time_for_gpus:" in r.stderr, r.stderr
    assert "--time" in r.stderr and "Time limit specification required" in r.stderr
    assert lab_run(plab, ["squeue", "-h"]).stdout.strip() == ""


def test_defaults_filled_in_show_in_scontrol(plab: Lab, jobs: list[str]):
    pre = tres_gpu_prefix(plab.release)
    job = _sbatch(plab, jobs, "--gres=gpu:1", "-t", "5", "--wrap", "true")
    shown = _show(plab, job)
    assert _field(shown, "CpusPerTres") == f"{pre}:4", shown
    assert _field(shown, "MemPerTres") == f"{pre}:15500", shown
    asked = _sbatch(plab, jobs, "--gres=gpu:1", "-t", "5", "-c", "2", "--mem=1000", "--wrap", "true")
    shown = _show(plab, asked)
    # what the job asked is kept: the plugin adds no CPUs per GPU next to --cpus-per-task and no memory per GPU next
    # to --mem (a MemPerTres line may still show: slurmctld prints the partition's DefMemPerGPU there, spelled
    # "gpu:N" without the gres prefix the plugin writes)
    assert _field(shown, "CpusPerTres") == "" and not _field(shown, "MemPerTres").startswith(pre), shown


def test_typed_quotas_get_the_type_and_slurmctld_runs_it(plab: Lab, jobs: list[str]):
    """With per-type tenant quotas the script names the GPU type of an untyped request (Slurm charges an untyped one
    to gres/gpu only). slurmctld takes the rewritten tres_per_node (gres:gpu:h100:1 in 22.05's spelling, gres/gpu:...
    in 24.11's), merges the untyped CpusPerTres the script adds into it, and runs the job. This lab has no slurmdbd:
    the script is generated from its inventory plus tenants and swapped in (the plugin reloads a script whose mtime
    moved, src/lua/slurm_lua.c slurm_lua_loadscript, 22.05 and 24.11), then put back."""
    import os

    import yaml

    from slurmkit.generate.jobsubmit import job_submit_lua
    from slurmkit.model.load import load_cluster_dict

    inv = yaml.safe_load((plab.etc / "slurmkit.yaml").read_text())
    inv["accounting"] = {"host": "localhost"}
    inv["tenants"] = {"qos": [{"name": "normal"}], "accounts": [{"name": "t", "gpus": {"h100": 2}, "users": ["u"]}]}
    script = plab.etc / "job_submit.lua"
    original = script.read_text()
    typed = job_submit_lua(load_cluster_dict(inv), plab.release)
    assert "local TYPED_QUOTAS = true" in typed and "TYPED_QUOTAS = false" in original
    stamp = script.stat().st_mtime
    try:
        script.write_text(typed)
        os.utime(script, (stamp + 5, stamp + 5))
        pre = tres_gpu_prefix(plab.release)
        job = _sbatch(plab, jobs, "--gres=gpu:1", "-t", "5", "--wrap", "true")
        shown = _show(plab, job)
        assert _field(shown, "TresPerNode") == f"{pre}:h100:1", shown
        assert _field(shown, "CpusPerTres") == f"{pre}:4", shown
        shown = _wait(lambda: _show_if(plab, job, lambda s: _field(s, "JobState") == "COMPLETED"), 90,
                      "the typed job to run")
        assert _field(shown, "ExitCode") == "0:0", shown
    finally:
        script.write_text(original)
        os.utime(script, (stamp + 10, stamp + 10))
    # the site's own script is back: an untyped request stays untyped
    job = _sbatch(plab, jobs, "--gres=gpu:1", "-t", "5", "--wrap", "true")
    assert _field(_show(plab, job), "TresPerNode") == f"{pre}:1"


def test_cpu_jobs_still_run_where_the_lab_allows_them(plab: Lab):
    r = lab_run(plab, ["srun", "-N1", "-t", "1", "hostname"], timeout=60)
    assert r.stdout.strip() in plab.spec.node_names


def test_a_two_node_gpu_job_waits_for_one_leaf(plab: Lab, jobs: list[str]):
    """node2 and node3 busy: the free nodes node1 and node4 sit in different leaves. Without the plugin Slurm starts
    a plain `sbatch -N2 --gres=gpu:2` there at once; with it the job asks one leaf (Switches=1@2 min), pends, and
    starts on node[1-2] when node2 frees."""
    b = CLIBackend(env=plab.env)
    blockers = {n: _sbatch(plab, jobs, "--exclusive", "-w", n, "-t", "10", "--gres=gpu:1", "--wrap", "sleep 600")
                for n in ("node2", "node3")}
    _wait(lambda: all(_field(_show(plab, j), "JobState") == "RUNNING" for j in blockers.values()), 60,
          "the blockers to run")
    job = _sbatch(plab, jobs, "-N2", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 1")
    shown = _show(plab, job)
    assert _field(shown, "Switches") == "1@00:02:00", shown
    # the scheduler has looked at it (batch_sched_delay=0: at submit) and left it pending for its leaf
    shown = _wait(lambda: _show_if(plab, job, lambda s: _field(s, "Reason") not in ("", "None")), 60,
                  "the scheduler to consider the job")
    assert _field(shown, "JobState") == "PENDING", shown
    lab_run(plab, ["scancel", blockers["node2"]])
    shown = _wait(lambda: _show_if(plab, job, lambda s: _field(s, "JobState") in ("RUNNING", "COMPLETED")), 90,
                  "the job to start in one leaf")
    assert _field(shown, "NodeList") == "node[1-2]", shown
    assert _states(b)  # the lab still answers


@pytest.mark.parametrize("limit", ["0", "UNLIMITED", "INFINITE"])
def test_a_gpu_job_asking_no_time_limit_is_refused(plab: Lab, limit: str):
    """sbatch(1): a time limit of zero means none; the client sends it as INFINITE, like UNLIMITED/INFINITE
    (slurm_opt.c arg_set_time_limit, parse_time.c time_str2mins). Before: accepted, pending on PartitionTimeLimit."""
    r = lab_run(plab, ["sbatch", "--gres=gpu:1", f"--time={limit}", "-o", "/dev/null", "--wrap", "true"], check=False)
    assert r.returncode != 0, r.stdout
    assert "sbatch: error: slurmkit submit_policy require_time_for_gpus: GPU jobs need a finite time limit" \
        in r.stderr, r.stderr
    assert "Requested time limit is invalid" in r.stderr, r.stderr
    # the DefaultTime of gpu-short does not stand in for a limit the job asked
    r = lab_run(plab, ["sbatch", "-p", "gpu-short", "--gres=gpu:1", f"-t{limit}", "-o", "/dev/null", "--wrap", "true"],
                check=False)
    assert r.returncode != 0 and "finite time limit" in r.stderr, r.stderr


def test_a_partition_default_time_stands_in_for_time(plab: Lab, jobs: list[str]):
    """gpu-short has DefaultTime=00:30:00: a GPU job there without --time runs with that limit; a job that may also
    land in gpu (no DefaultTime) still needs --time."""
    assert _field(lab_run(plab, ["scontrol", "-o", "show", "partition", "gpu-short"]).stdout, "DefaultTime") == \
        "00:30:00"
    job = _sbatch(plab, jobs, "-p", "gpu-short", "--gres=gpu:1", "--wrap", "true")
    shown = _show(plab, job)
    assert _field(shown, "TimeLimit") == "00:30:00", shown
    assert _field(shown, "CpusPerTres") == f"{tres_gpu_prefix(plab.release)}:4", shown
    r = lab_run(plab, ["sbatch", "-p", "gpu-short,gpu", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true"],
                check=False)
    assert r.returncode != 0 and "require_time_for_gpus" in r.stderr and "DefaultTime" in r.stderr, r.stderr


def _update(lab: Lab, job: str, *kv: str):  # type: ignore[no-untyped-def]
    return lab_run(lab, ["scontrol", "update", f"jobid={job}", *kv], check=False)


def test_update_adding_gpus_to_a_job_without_time_limit_is_refused(plab: Lab, jobs: list[str]):
    """scontrol update calls slurm_job_modify (job_mgr.c _update_job). A held CPU job submitted without --time to gpu
    (no DefaultTime: its record keeps time_limit NO_VAL) may not become a GPU job; with a TimeLimit in the same
    update it may, and gets the per-GPU defaults. 22.05 drops the plugin's message on modify (the client sees the
    return code's text), 24.11 passes it on."""
    pre = tres_gpu_prefix(plab.release)
    job = _sbatch(plab, jobs, "-H", "--wrap", "true")
    assert _field(_show(plab, job), "TresPerNode") == ""
    r = _update(plab, job, "Gres=gpu:2")
    assert r.returncode != 0
    assert "Time limit specification required" in r.stderr, r.stderr
    if plab.release != "22.05":
        assert "slurmkit submit_policy require_time_for_gpus" in r.stderr and "TimeLimit=" in r.stderr, r.stderr
    else:  # the admin finds it in slurmctld's log (slurm.log_info)
        log = (plab.dir / "log" / "slurmctld.log").read_text()
        assert "lua: slurmkit submit_policy require_time_for_gpus" in log and "add TimeLimit= to the update" in log
    assert _field(_show(plab, job), "TresPerNode") == ""  # unchanged
    r = _update(plab, job, "Gres=gpu:2", "TimeLimit=10")
    assert r.returncode == 0, r.stderr
    shown = _show(plab, job)
    assert _field(shown, "TresPerNode") == f"{pre}:2" and _field(shown, "TimeLimit") == "00:10:00", shown
    assert _field(shown, "CpusPerTres") == f"{pre}:4", shown
    assert _field(shown, "MemPerTres") == f"{pre}:15500", shown
    # the GPU job may not drop its time limit afterwards
    r = _update(plab, job, "TimeLimit=UNLIMITED")
    assert r.returncode != 0 and "Requested time limit is invalid" in r.stderr, r.stderr
    assert _field(_show(plab, job), "TimeLimit") == "00:10:00"
    # and what the update made runs
    lab_run(plab, ["scontrol", "release", job])
    shown = _wait(lambda: _show_if(plab, job, lambda s: _field(s, "JobState") == "COMPLETED"), 90,
                  "the updated GPU job to run")
    assert _field(shown, "ExitCode") == "0:0", shown


def test_updating_a_cpu_jobs_other_fields_still_works(plab: Lab, jobs: list[str]):
    job = _sbatch(plab, jobs, "-H", "--wrap", "true")
    r = _update(plab, job, "Comment=still-fine", "Name=renamed")
    assert r.returncode == 0, r.stderr
    shown = _show(plab, job)
    assert _field(shown, "Comment") == "still-fine" and _field(shown, "JobName") == "renamed", shown
    r = _update(plab, job, "TimeLimit=UNLIMITED")  # a CPU job's limit is not the policy's business
    assert r.returncode == 0, r.stderr
