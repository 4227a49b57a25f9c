"""The epilog's active stage (issue 23 item 7, ``hooks.checks.epilog_active``): after a job that failed on its own,
the GEMM/bandwidth test runs on that job's GPUs only, before the node takes another job; a slow board among them
drains the node through the epilog's exit 1 and the claim the health check reads. Fake NVML, torch on the CPU (the
real GPU path is bench/active_check_gpu.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from slurmkit.errors import InventoryError
from slurmkit.health.hooks import HookEnv, claim_path, run_hook
from slurmkit.health.policy import job_failed_on_its_own, parse_policy
from slurmkit.health.result import Status
from slurmkit.model.load import load_cluster
from tests.unit.fakeproc import fake_daemon

ROOT = Path(__file__).resolve().parents[2]
NVML = ROOT / "tests" / "data" / "nvml"


def test_which_job_ends_count_as_failed_on_its_own():
    # SLURM_JOB_EXIT_CODE2 "<exit>:<signal>" (prep_script_slurmd.c, 22.05 and 24.11)
    assert job_failed_on_its_own("1:0") is True  # a Python traceback
    assert job_failed_on_its_own("0:11") is True  # SIGSEGV
    assert job_failed_on_its_own("0:6") is True  # SIGABRT: CUDA's usual end
    assert job_failed_on_its_own("134:0") is True  # a shell reporting its child's SIGABRT
    assert job_failed_on_its_own("0:0") is False
    assert job_failed_on_its_own("0:15") is False and job_failed_on_its_own("0:9") is False  # scancel, time limit
    assert job_failed_on_its_own("143:0") is False  # the shell's child killed by SIGTERM
    assert job_failed_on_its_own("75:0") is False  # gpusub stopped the run for a requeue
    assert job_failed_on_its_own(None) is None and job_failed_on_its_own("junk") is None


def test_policy_key_paths():
    assert parse_policy({}).epilog_active is None
    assert parse_policy({"epilog_active": True}).epilog_active.budget_s == 30.0
    assert parse_policy({"epilog_active": {"enabled": False}}).epilog_active is None
    for bad, path in (({"budget": 3}, "hooks.checks.epilog_active.budget"),
                      ({"level": 3}, "hooks.checks.epilog_active.level"),
                      ({"method": "gemm"}, "hooks.checks.epilog_active.method"),
                      ({"peer_pct": 120}, "hooks.checks.epilog_active.peer_pct")):
        with pytest.raises(InventoryError) as e:
            parse_policy({"epilog_active": bad})
        assert e.value.one_line().startswith(f"slurmkit: error: {path}") or path in e.value.one_line(), e.value


def _inventory(tmp_path: Path, epilog_active: object, timeout: int = 60, epilog: bool = True) -> Path:
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["hooks"] = {"prolog": True, "epilog": epilog, "prolog_epilog_timeout": timeout,
                    "checks": {"ib": False, "slurmd_oom": False, "epilog_active": epilog_active}}
    p = tmp_path / "etc" / "slurmkit.yaml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(inv))
    return p


def test_the_stage_must_fit_in_prolog_epilog_timeout(tmp_path):
    with pytest.raises(InventoryError) as e:
        load_cluster(str(_inventory(tmp_path, {"budget_s": 58}, timeout=60)))
    assert "hooks.checks.epilog_active.budget_s" in e.value.one_line()
    assert "prolog_epilog_timeout (60s)" in e.value.one_line()
    load_cluster(str(_inventory(tmp_path, {"budget_s": 50}, timeout=60)))
    with pytest.raises(InventoryError) as e:  # hooks.checks is judged at load, not first on a node
        load_cluster(str(_inventory(tmp_path, {"budgett": 5})))
    assert "hooks.checks.epilog_active.budgett" in e.value.one_line()


def test_the_stage_without_slurmkits_epilog_is_refused_not_inert(tmp_path):
    with pytest.raises(InventoryError) as e:
        load_cluster(str(_inventory(tmp_path, True, epilog=False)))
    assert "hooks.checks.epilog_active" in e.value.one_line() and "hooks.epilog is false" in e.value.one_line()
    load_cluster(str(_inventory(tmp_path, False, epilog=False)))


def _fake(tmp_path: Path, slow: dict[int, float]) -> str:
    d = json.loads((NVML / "healthy-h100x8.json").read_text())
    for i, f in slow.items():
        d["devices"][i]["active_slowdown"] = f
    p = tmp_path / "nvml" / "node1.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(d))
    return str(p.parent)


def _env(tmp_path: Path, inv: Path, fake: str, job_exit: str | None, gpus: list[int]) -> HookEnv:
    proc = tmp_path / "proc"
    (proc / "333").mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text("MemTotal: 32000000 kB\nMemAvailable: 30000000 kB\n")
    fake_daemon(proc, 333, "munged")
    from slurmkit.health.host import HostPaths

    def no_slurm(argv, **kw):  # an epilog calls no Slurm command
        raise AssertionError(f"epilog ran {argv}")

    return HookEnv(hook="epilog", node="node1", state_dir=str(tmp_path / "state"), inventory=str(inv), fake_nvml=fake,
                   paths=HostPaths(sys_root=str(tmp_path / "sys"), proc_root=str(proc), kmsg=str(tmp_path / "kmsg"),
                                   dev_root=str(tmp_path / "dev")),
                   runner=no_slurm, job_id="41", job_uid=1000, job_user="alice", job_gpus=gpus, job_exit=job_exit)


pytest.importorskip("torch", reason="the active stage's torch path needs torch (in the dev venv)")


def test_failed_job_s_slow_gpu_drains_through_the_epilog(tmp_path):
    inv = _inventory(tmp_path, {"budget_s": 20})
    rep = run_hook(_env(tmp_path, inv, _fake(tmp_path, {3: 0.5}), "1:0", [2, 3]))
    res = {r.name: r for r in rep.results}
    assert rep.exit_code == 1, [r.summary for r in rep.results]
    assert res["active_gemm"].status == Status.FAIL and res["active_gemm"].findings[0].startswith("nvidia3@")
    labels = sorted(res["active_gemm"].evidence["values"])  # the job's two GPUs, not the node's eight
    assert len(labels) == 2 and labels[0].startswith("nvidia2@") and labels[1].startswith("nvidia3@"), labels
    assert rep.reason.startswith("slurmkit: nvidia3@")
    claim = json.loads(Path(claim_path(str(tmp_path / "state" / "node1"), "epilog")).read_text())
    assert claim["reason"] == rep.reason and claim["job_id"] == "41"
    assert any("active stage: job 41 ended 1:0" in n for n in rep.notes)


def test_stage_skips_success_outside_stops_and_recent_runs(tmp_path):
    inv = _inventory(tmp_path, {"budget_s": 20, "min_interval_s": 600})
    fake = _fake(tmp_path, {3: 0.5})
    for exit2 in ("0:0", "0:15", "75:0"):
        rep = run_hook(_env(tmp_path, inv, fake, exit2, [2, 3]))
        assert rep.exit_code == 0 and not any(r.name.startswith("active") for r in rep.results), exit2
    rep = run_hook(_env(tmp_path, inv, fake, None, [2, 3]))
    assert rep.exit_code == 0 and any("exit status is unknown" in n for n in rep.notes)
    # the slow GPU is not the job's: the job's own boards pass, the others are not loaded
    rep = run_hook(_env(tmp_path, inv, fake, "1:0", [0, 1]))
    res = {r.name: r for r in rep.results}
    assert rep.exit_code == 0 and res["active_gemm"].status == Status.OK
    assert sorted(x.split("@")[0] for x in res["active_gemm"].evidence["values"]) == ["nvidia0", "nvidia1"]
    rep = run_hook(_env(tmp_path, inv, fake, "1:0", [2, 3]))  # within min_interval_s of the last stage
    assert rep.exit_code == 0 and any("skipped, ran" in n for n in rep.notes)


def test_the_failure_is_kept_until_an_active_check_passes(tmp_path):
    """The health check's passive checks cannot see a slow board: without the kept finding it would resume the node
    after resume_after_passes. `check --active` passing on the node is the way out."""
    from slurmkit.health.hooks import run_active

    inv = _inventory(tmp_path, {"budget_s": 20})
    fake = _fake(tmp_path, {3: 0.5})
    assert run_hook(_env(tmp_path, inv, fake, "0:6", [2, 3])).exit_code == 1

    def check() -> object:
        e = _env(tmp_path, inv, fake, None, [])
        e.hook, e.job_id, e.job_gpus = "check", None, None
        return run_hook(e)
    rep = check()
    kept = [r for r in rep.results if r.name == "active_kept"]
    assert rep.exit_code == 1 and kept and kept[0].findings[0].startswith("nvidia3@"), [r.summary for r in rep.results]
    assert rep.reason == "slurmkit: nvidia3@5d:00.0 active gemm,membw; clears when slurmkit check --active passes"
    e = _env(tmp_path, inv, fake, None, [])
    e.hook = "check"
    assert run_active(e, budget_s=5).exit_code == 1  # still slow: nothing cleared
    assert any(r.name == "active_kept" for r in check().results)
    _fake(tmp_path, {})  # the board replaced
    rep = run_active(e, budget_s=5)
    assert rep.exit_code == 0 and "cleared" in " ".join(rep.notes)
    assert check().exit_code == 0
