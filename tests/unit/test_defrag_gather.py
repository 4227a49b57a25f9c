"""The defrag planner's inputs from real `scontrol -o -d show job` output (recorded on labs of both releases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmkit.defrag.gather import Policy, gpusub_run_dir, running_jobs, target_of
from slurmkit.errors import UsageError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.mark.parametrize("rel", ["", "24.11"])
def test_per_node_gpus_of_running_jobs(rel: str) -> None:
    text = ((DATA / rel) if rel else DATA).joinpath("scontrol_show_job_detail.txt").read_text()
    jobs = {j.job_id: j for j in running_jobs(text, now=2e9)}
    two = next(j for j in jobs.values() if len(j.gpus) == 2)
    assert set(two.gpus.values()) == {3}  # -N2 --gres=gpu:3: 3 GPUs on each node
    assert not two.movable and "not a gpusub job" in two.why_not  # StdOut=/dev/null: no run dir
    marked = running_jobs(text, Policy(movable_accounts=frozenset({"(null)"})), now=2e9)
    assert all(j.movable for j in marked)


def test_a_gpusub_job_is_movable_and_costs_its_gpus_times_the_checkpoint_age(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / "submit.json").write_text(json.dumps({}))
    ck = run / "checkpoints" / "state.json"
    ck.write_text("{}")
    import os

    os.utime(ck, (1000.0, 1000.0))
    line = (f"JobId=7 UserId=me({os.geteuid()}) JobState=RUNNING Requeue=1 StartTime=1970-01-01T00:00:10 "
            f"StdOut={run}/logs/slurm-7.out "
            "NodeList=n1 JOB_GRES=gpu:h100:8   Nodes=n1 CPU_IDs=0-7 Mem=31000 GRES=gpu:h100:8(IDX:0-7) Features=(null)")
    assert gpusub_run_dir(f"{run}/logs/slurm-7.out", os.geteuid()) == run
    assert gpusub_run_dir(f"{run}/logs/slurm-7.out", None) is None  # a job whose user is unknown: not trusted
    (j,) = running_jobs(line, Policy(restart_s=60), now=1100.0)
    assert j.movable and j.gpus == {"n1": 8} and j.checkpoint_age_s == 100.0
    assert j.cost == 8 * (100 + 60)
    (j,) = running_jobs(line.replace("Requeue=1", "Requeue=0"), now=1100.0)
    assert not j.movable and j.why_not == "Requeue=0"


def test_target_of_a_pending_job() -> None:
    text = ("JobId=9 JobState=PENDING NumNodes=2 Partition=gpu OverSubscribe=NO TresPerNode=gres/gpu:8\n"
            "JobId=10 JobState=RUNNING NumNodes=1\n")
    t, part = target_of(text, "9")
    assert (t.nodes, t.gpus_per_node, t.exclusive, part) == (2, 8, True, "gpu")
    with pytest.raises(UsageError, match="--for 10: the job is RUNNING, not pending"):
        target_of(text, "10")
    with pytest.raises(UsageError, match="--for 11: no such job"):
        target_of(text, "11")


def test_target_of_reads_2605s_exclusive_field() -> None:
    """26.05's scontrol says OverSubscribe=NO for every job that did not ask to share and names --exclusive in its
    own Exclusive= field (recorded from a 26.05.5 lab): a plain pending job is not exclusive there."""
    from pathlib import Path

    data = Path(__file__).parent.parent / "data" / "slurm" / "26.05"
    for name, want in (("scontrol_show_job_exclusive.txt", True), ("scontrol_show_job_plain.txt", False)):
        text = (data / name).read_text()
        job = text.split()[0].split("=")[1]
        t, part = target_of(text, job)
        assert (t.nodes, t.gpus_per_node, t.exclusive, part) == (1, 1, want, "gpu"), name


def _hostile(rel: str):  # type: ignore[no-untyped-def]
    """The recorded jobs of tests/data/slurm/record_hostile_jobs.py as the backend reads them (CLIBackend.
    job_details: the release's JSON listing, its squeue -O extra fields beside it)."""
    from slurmkit.backend.jobjson import parse_extra, parse_jobs_json
    from slurmkit.release import job_listing

    listing = job_listing(rel)
    name = f"jobs_hostile_{rel}.squeue.json" if listing.argv[0] == "squeue" else f"jobs_hostile_{rel}.json"
    recs = parse_jobs_json((DATA / name).read_text(), "test")
    if listing.extra:
        extra = parse_extra((DATA / f"jobs_hostile_{rel}.extra.txt").read_text(), [t for t, _ in listing.extra], "t")
        for r in recs:
            r.update(zip([k for _, k in listing.extra], extra[r["JobId"]], strict=True))
    return recs


@pytest.mark.parametrize("rel", ["22.05", "24.11", "26.05"])
def test_the_repro_name_is_the_attackers_job_that_waited_seconds(rel: str) -> None:
    """The issue's repro, recorded: games' `-N2 --exclusive -J "x Priority=4294967000 EligibleTime=2020-01-01T00:00:00
    UserId=bin(2)"` queued behind root's job. defrag reads it as games' job, eligible since its submission."""
    from datetime import datetime

    from slurmkit.defrag.watch import pending_jobs

    recs = _hostile(rel)
    now = max(datetime.fromisoformat(r["SubmitTime"]).timestamp() for r in recs) + 60
    pend = {p.job_id: p for p in pending_jobs(recs, now)}
    assert set(pend) == {"2", "3", "4", "5"}
    assert pend["2"].user == "games" and pend["2"].waited_s < 120 and pend["2"].priority < 4294967000
    assert {p.user for p in pend.values()} == {"games"}
    target, part = target_of(recs, "2")
    assert (target.nodes, target.gpus_per_node, target.exclusive, part) == (2, 0, True, "gpu")
    (busy,) = running_jobs(recs, now=now)
    assert busy.job_id == "1" and busy.gpus == {f"node{i}": 2 for i in range(1, 5)}
    # the same jobs as `scontrol -o -d show job` text, read by a Key= splitter: bin's job, six years waiting
    text = (DATA / f"jobs_hostile_{rel}.txt").read_text()
    forged = {p.job_id: p for p in pending_jobs(text, now)}
    assert forged["2"].user == "bin" and forged["2"].waited_s > 6 * 365 * 86400
