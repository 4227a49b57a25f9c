"""``slurmkit defrag watch``: the policy (inventory keys, quiet hours, rate limits, protection of moved jobs), one
pass against a recording backend (the same carry_out as ``defrag run``), the state file, the metrics textfile and
the systemd unit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurmkit.backend.parse import JobInfo
from slurmkit.defrag.gather import Policy, policy_from
from slurmkit.defrag.plan import RunningJob, Target, Verdict, plan_defrag
from slurmkit.defrag.watch import (
    METRICS_FILE,
    Pending,
    Snapshot,
    WatchState,
    candidates,
    decide,
    metrics_text,
    movable_again,
    natural_start,
    protect,
    quiet_now,
    run_pass,
)
from slurmkit.errors import InventoryError, SlurmkitError
from slurmkit.lab.inventory import lab_inventory
from slurmkit.model.load import load_cluster_dict
from slurmkit.placement.engine import NodeState
from slurmkit.placement.topology import PlacementTopology

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------ inventory keys


def inv(defrag: dict[str, Any]) -> dict[str, Any]:
    d = json.loads(json.dumps(lab_inventory()))
    d["defrag"] = defrag
    return d


def test_the_watch_policy_keys_load_and_parse() -> None:
    d = {"movable_qos": ["scav"], "partitions": ["gpu"], "qos": ["normal"], "min_wait_s": 300,
         "max_moves_per_hour": 2, "max_moves_per_job": 1, "protect_h": 12, "quiet_hours": ["22:00-06:30", "12:00-13:00"],
         "max_holds": 0, "hold_grace_s": 120}
    load_cluster_dict(inv(d))
    p = policy_from({"defrag": d})
    assert (p.max_holds, p.hold_grace_s) == (0, 120.0)
    assert p.partitions == {"gpu"} and p.qos == {"normal"} and p.min_wait_s == 300
    assert (p.max_moves_per_hour, p.max_moves_per_job, p.protect_h) == (2, 1, 12.0)
    assert p.quiet_hours == ((22 * 60, 6 * 60 + 30), (12 * 60, 13 * 60))
    assert policy_from({}) == Policy()


@pytest.mark.parametrize(("defrag", "where", "what"), [
    ({"max_moves_per_houre": 1}, "defrag.max_moves_per_houre", "did you mean 'max_moves_per_hour'"),
    ({"quiet_hours": ["22-06"]}, "defrag.quiet_hours[0]", "expected HH:MM-HH:MM"),
    ({"quiet_hours": "22:00-06:00"}, "defrag.quiet_hours", "a list"),
    ({"max_moves_per_job": 0}, "defrag.max_moves_per_job", "a whole number >= 1"),
    ({"max_moves_per_hour": 1.5}, "defrag.max_moves_per_hour", "a whole number >= 0"),
    ({"min_wait_s": -1}, "defrag.min_wait_s", "seconds >= 0"),
    ({"partitions": "gpu"}, "defrag.partitions", "a list of names"),
    ({"max_holds": -1}, "defrag.max_holds", "a whole number >= 0"),
    ({"hold_grace_s": "15m"}, "defrag.hold_grace_s", "seconds >= 0"),
    # NaN and inf passed `r < least` and crashed watch's time arithmetic (OverflowError, ValueError)
    ({"hold_grace_s": float("nan")}, "defrag.hold_grace_s", "seconds >= 0 (finite)"),
    ({"protect_h": float("inf")}, "defrag.protect_h", "hours >= 0 (finite)"),
])
def test_a_bad_policy_key_is_a_key_path_error(defrag: dict[str, Any], where: str, what: str) -> None:
    with pytest.raises(InventoryError) as e:
        load_cluster_dict(inv(defrag))
    assert where in str(e.value) and what in str(e.value)


# ------------------------------------------------------------------------------------------ pure policy


def test_quiet_hours_wrap_midnight_and_end_is_not_quiet() -> None:
    p = Policy(quiet_hours=((22 * 60, 6 * 60),))
    assert quiet_now(p, 23 * 60) == "22:00-06:00" and quiet_now(p, 0) == "22:00-06:00"
    assert quiet_now(p, 5 * 60 + 59) == "22:00-06:00"
    assert quiet_now(p, 6 * 60) is None and quiet_now(p, 12 * 60) is None
    p2 = Policy(quiet_hours=((9 * 60, 17 * 60),))
    assert quiet_now(p2, 9 * 60) and not quiet_now(p2, 17 * 60) and not quiet_now(p2, 8 * 60)


def test_moved_jobs_are_protected_for_protect_h() -> None:
    st = WatchState(moves=[{"t": 1000.0, "job": "7", "for": "9"}])
    jobs = [RunningJob("7", {"n1": 8}, True, 1.0), RunningJob("8", {"n2": 8}, True, 1.0)]
    out = {j.job_id: j for j in protect(jobs, st, Policy(protect_h=2), now=1000.0 + 7199)}
    assert not out["7"].movable and "protected until" in out["7"].why_not and out["8"].movable
    out = {j.job_id: j for j in protect(jobs, st, Policy(protect_h=2), now=1000.0 + 7200)}
    assert out["7"].movable


def pend(jid: str, **kw: Any) -> Pending:
    base = {"partition": "gpu", "qos": "normal", "user": "u", "waited_s": 900.0, "priority": 100,
            "reason": "Resources"}
    base.update(kw)
    return Pending(jid, **base)


def test_candidates_follow_the_policy_and_say_what_they_left_out() -> None:
    pol = Policy(partitions=frozenset({"gpu"}), qos=frozenset({"normal"}), min_wait_s=600)
    got, note = candidates([pend("1"), pend("2", partition="cpu"), pend("3", qos="low"),
                            pend("4", reason="Dependency"), pend("5", waited_s=10), pend("6", priority=200),
                            pend("7", partition="cpu,gpu")], pol)
    assert [p.job_id for p in got] == ["6", "1", "7"]
    assert note == "1 other partition, 1 other QOS, 1 not waiting for resources, 1 waited < 600 s"


def two_leaves() -> tuple[PlacementTopology, dict[str, NodeState], list[RunningJob]]:
    t = PlacementTopology(kind="tree", leaf_names=("leaf1", "leaf2"), leaf_nodes=(("n1", "n2"), ("n3", "n4")))
    a = RunningJob("10", {"n1": 8}, movable=True, cost=100.0)
    b = RunningJob("11", {"n3": 8}, movable=True, cost=50.0)
    states = {n: NodeState(n, "allocated" if n in ("n1", "n3") else "idle", 0 if n in ("n1", "n3") else 8, 8)
              for n in ("n1", "n2", "n3", "n4")}
    return t, states, [a, b]


def decide_with(policy: Policy, state: WatchState, minute: int = 12 * 60,
                pending: list[Pending] | None = None) -> tuple[Any, list[str]]:
    calls: list[str] = []
    t, states, jobs = two_leaves()

    def pend_fn() -> list[Pending]:
        calls.append("pending")
        return pending if pending is not None else [pend("20")]

    def plan_for(p: Pending) -> tuple[Target, Verdict]:
        calls.append(f"plan {p.job_id}")
        target = Target(2, 8)
        return target, plan_defrag(t, states, protect(jobs, state, policy, 10_000.0), target)

    return decide(policy, state, 10_000.0, minute, pend_fn, plan_for), calls


def test_decide_acts_for_a_blocked_job_with_the_cheapest_plan() -> None:
    d, calls = decide_with(Policy(min_wait_s=0), WatchState())
    assert d.act_for is not None and d.act_for.job_id == "20" and d.verdict.plan.job_ids == ("11",)
    assert "job 20 (gpu, QOS normal) waited 900 s: blocked by fragmentation" in d.said


def test_quiet_hours_read_nothing_and_say_so() -> None:
    d, calls = decide_with(Policy(quiet_hours=((11 * 60, 13 * 60),)), WatchState())
    assert d.act_for is None and calls == []
    assert d.said == "quiet hours 11:00-13:00 (local time 12:00): nothing done"


def test_rate_limit_per_hour_reads_nothing_and_says_so() -> None:
    st = WatchState(moves=[{"t": 10_000.0 - 3599, "job": "5", "for": "6"}])
    d, calls = decide_with(Policy(max_moves_per_hour=1), st)
    assert d.act_for is None and calls == []
    assert "rate limit: 1 job(s) moved in the last hour (defrag.max_moves_per_hour 1): nothing done" == d.said
    st.moves[0]["t"] = 10_000.0 - 3600  # an hour ago: out of the window
    d, _ = decide_with(Policy(max_moves_per_hour=1), st)
    assert d.act_for is not None


def test_a_plan_larger_than_the_hour_budget_or_the_per_job_cap_is_not_carried_out() -> None:
    # protecting job 11 makes the only plan move job 10 ... then both caps at work
    st = WatchState(moves=[{"t": 10_000.0 - 3000, "job": "11", "for": "x"}])
    d, _ = decide_with(Policy(max_moves_per_hour=2), st)
    assert d.verdict.plan.job_ids == ("10",)  # 11 was moved 50 min ago: protected
    st = WatchState(moves=[{"t": 10_000.0 - 3000, "job": "11", "for": "x"},
                           {"t": 10_000.0 - 3000, "job": "10", "for": "x"}])
    d, _ = decide_with(Policy(max_moves_per_hour=5), st)
    assert d.act_for is None and "no set of movable jobs frees a whole leaf" in d.said


def test_a_two_move_plan_against_one_move_left_and_the_per_job_cap() -> None:
    t = PlacementTopology(kind="tree", leaf_names=("l1", "l2", "l3", "l4"),
                          leaf_nodes=(("n1", "n2"), ("n3", "n4"), ("n5",), ("n6",)))
    jobs = [RunningJob(str(i), {f"n{i}": 8}, True, float(i)) for i in (1, 2, 3, 4)]
    states = {f"n{i}": NodeState(f"n{i}", "allocated" if i <= 4 else "idle", 0 if i <= 4 else 8, 8) for i in range(1, 7)}

    def plan_for(p: Pending) -> tuple[Target, Verdict]:
        return Target(2, 8), plan_defrag(t, states, jobs, Target(2, 8))

    one_used = WatchState(moves=[{"t": 9000.0, "job": "99", "for": "x"}])
    d = decide(Policy(max_moves_per_hour=2), one_used, 10_000.0, 0, lambda: [pend("20")], plan_for)
    assert d.act_for is None
    assert d.said == ("job 20: rate limit: the plan moves 2 job(s), 1 moved in the last hour "
                      "(defrag.max_moves_per_hour 2): nothing done")
    d = decide(Policy(max_moves_per_job=1), WatchState(), 10_000.0, 0, lambda: [pend("20")], plan_for)
    assert d.said == "job 20: the plan moves 2 job(s) (defrag.max_moves_per_job 1): nothing done"
    d = decide(Policy(max_moves_per_job=2), WatchState(), 10_000.0, 0, lambda: [pend("20")], plan_for)
    assert d.verdict is not None and d.verdict.plan is not None and d.verdict.plan.job_ids == ("1", "2")


def test_no_candidate_says_why() -> None:
    d, calls = decide_with(Policy(min_wait_s=3600), WatchState())
    assert d.said == "no pending job to act for (1 waited < 3600 s): nothing done" and "plan 20" not in calls


def test_natural_start_is_the_earliest_leaf_by_time_limits() -> None:
    t, states, jobs = two_leaves()
    ends = {"10": 5000.0, "11": 3000.0}
    assert natural_start(t, states, jobs, ends, Target(2, 8), now=1000.0) == 3000.0
    assert natural_start(t, states, jobs, {"10": 5000.0}, Target(2, 8), now=1000.0) == 5000.0
    assert natural_start(t, states, jobs, {}, Target(2, 8), now=1000.0) is None


# ------------------------------------------------------------------------------------------ state and metrics


def test_state_round_trip_prunes_old_moves_and_refuses_a_foreign_file(tmp_path: Path) -> None:
    p = str(tmp_path / "s" / "w.json")
    st = WatchState.load(p)
    st.moves = [{"t": 100.0, "job": "1", "for": "2"}, {"t": 5000.0, "job": "3", "for": "4"}]
    st.counters["slurmkit_defrag_moves_total"] = 2
    st.save(p, now=5000.0, keep_s=3600)
    back = WatchState.load(p)
    assert [m["job"] for m in back.moves] == ["3"] and back.counters["slurmkit_defrag_moves_total"] == 2
    Path(p).write_text("[1, 2]")
    with pytest.raises(SlurmkitError, match="not a defrag watch state"):
        WatchState.load(p)


def test_metrics_textfile_is_prometheus_exposition() -> None:
    text = metrics_text({"slurmkit_defrag_moves_total": 3, "slurmkit_defrag_gpu_seconds_lost_total": 1234.5}, 1e9)
    assert "# TYPE slurmkit_defrag_moves_total counter\nslurmkit_defrag_moves_total 3\n" in text
    assert "slurmkit_defrag_gpu_seconds_lost_total 1234.5\n" in text
    assert "slurmkit_defrag_wait_saved_seconds_total 0\n" in text
    names = [ln.split()[0] for ln in text.splitlines() if not ln.startswith("#")]
    assert len(names) == len(set(names)) == 8 and text.endswith("\n")


# ------------------------------------------------------------------------------------------ one pass


class FakeBackend:
    """Records carry_out's calls; the blocked job runs once its reservation exists and the moves are sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def create_reservation(self, **kw: str) -> None:
        self.calls.append(("create", kw["Nodes"]))

    def update_job(self, job_id: str, **kw: str) -> None:
        self.calls.append(("update", job_id, kw))

    def cancel(self, job_id: str, signal: str | None = None, batch: bool = False) -> None:
        self.calls.append(("cancel", job_id, signal, batch))

    def requeue(self, job_id: str) -> None:
        self.calls.append(("requeue", job_id))

    def job(self, job_id: str) -> JobInfo:
        return JobInfo(job_id, "RUNNING", nodes=("n3", "n4"))

    def delete_reservation(self, name: str) -> None:
        self.calls.append(("delete", name))


DETAILS = (
    "JobId=10 JobState=RUNNING Requeue=1 QOS=scav Account=a StartTime=2030-01-01T00:00:00 "
    "EndTime=2030-01-01T10:00:00 StdOut=/dev/null NodeList=n1 Nodes=n1 CPU_IDs=0-7 Mem=1 GRES=gpu:h100:8(IDX:0-7)\n"
    "JobId=11 JobState=RUNNING Requeue=1 QOS=scav Account=a StartTime=2030-01-01T00:50:00 "
    "EndTime=2030-01-01T02:00:00 StdOut=/dev/null NodeList=n3 Nodes=n3 CPU_IDs=0-7 Mem=1 GRES=gpu:h100:8(IDX:0-7)\n"
    "JobId=20 JobState=PENDING Reason=Resources Priority=50 Partition=gpu QOS=normal UserId=alice(1000) "
    "SubmitTime=2030-01-01T00:30:00 EligibleTime=2030-01-01T00:30:00 NumNodes=2 OverSubscribe=NO "
    "TresPerNode=gres/gpu:8\n"
)


def snap() -> Snapshot:
    t, states, _ = two_leaves()
    return Snapshot(DETAILS, states, t, [{"PartitionName": "gpu", "Nodes": "n[1-4]"}])


def test_one_pass_moves_records_and_writes_metrics(tmp_path: Path) -> None:
    from datetime import datetime

    now = datetime.fromisoformat("2030-01-01T01:00:00").timestamp()
    b, lines = FakeBackend(), []
    pol = Policy(movable_qos=frozenset({"scav"}), restart_s=60, min_wait_s=600)
    state = str(tmp_path / "w.json")
    ok = run_pass(snap, b, pol, state, str(tmp_path), lines.append, now=lambda: now, minute_of_day=60)
    assert ok, lines
    # job 11 costs 8 x (600 s since its start + 60): cheaper than 10's 8 x (3600 + 60)
    assert ("requeue", "11") in b.calls and ("create", "n[3-4]") in b.calls and b.calls[-1][0] == "delete"
    assert lines[0].startswith("job 20 (gpu, QOS normal) waited 1800 s: blocked by fragmentation: 2 node(s) "
                            "free in all, but not 2 on one leaf; moving 11 (5280 GPU-s) to free leaf2 (n[3-4])")
    assert lines[-1].startswith("job 20 started on n[3-4]; 3600 s before the time limits would have freed a leaf")
    st = WatchState.load(state)
    assert [m["job"] for m in st.moves] == ["11"] and st.moves[0]["for"] == "20"
    c = st.counters
    assert (c["slurmkit_defrag_moves_total"], c["slurmkit_defrag_gpu_seconds_lost_total"]) == (1, 8 * 660)
    assert c["slurmkit_defrag_wait_saved_seconds_total"] == 3600 and c["slurmkit_defrag_unblocked_total"] == 1
    prom = (tmp_path / METRICS_FILE).read_text()
    assert "slurmkit_defrag_moves_total 1\n" in prom and "slurmkit_defrag_gpu_seconds_lost_total 5280\n" in prom
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]
    # the next pass: 11 is protected, 10 is the only plan, and the hour's budget of 1 is spent
    b2, lines2 = FakeBackend(), []
    run_pass(snap, b2, Policy(movable_qos=frozenset({"scav"}), max_moves_per_hour=1), state, None, lines2.append,
             now=lambda: now + 60, minute_of_day=61)
    assert b2.calls == [] and lines2 == ["rate limit: 1 job(s) moved in the last hour "
                                         "(defrag.max_moves_per_hour 1): nothing done"]


def test_a_pass_without_a_move_set_says_which_leaf_comes_free_first(tmp_path: Path) -> None:
    from datetime import datetime

    now = datetime.fromisoformat("2030-01-01T01:00:00").timestamp()
    # nothing may move (no movable QOS, not gpusub jobs): job 11 ends first (02:00), so leaf2 is the one: held
    b, lines = HoldBackend(), []
    run_pass(snap, b, Policy(), str(tmp_path / "w.json"), None, lines.append, now=lambda: now, minute_of_day=60)
    assert b.calls == [("create", {"ReservationName": "slurmkit-hold-20", "StartTime": "2030-01-01T02:00:00",
                                   "Duration": "25", "Nodes": "n[3-4]", "Users": "alice", "Flags": "IGNORE_JOBS"})]
    assert lines == [
        "job 20: blocked, and no set of movable jobs frees a whole leaf for it (not movable: 10, 11); leaf2 (n[3-4]) "
        "is the first leaf it can have: at 2030-01-01T02:00:00, in 1.0 h (job(s) 11 end by their time limits or may "
        "move by then), with nothing to move; a reservation of those nodes from then "
        "(StartTime=2030-01-01T02:00:00 Flags=IGNORE_JOBS) keeps jobs that would run past it off them: nothing done",
        "reserved n[3-4] (leaf2) as slurmkit-hold-20 from 2030-01-01T02:00:00 for 25 min for job 20 (user alice), "
        "after job(s) 11: jobs that would run past 2030-01-01T02:00:00 stay off those nodes"]
    # both movable but moved 5 minutes ago and protected for 15: either may move at 01:10; 11 costs less
    state = WatchState(moves=[{"t": now - 300, "job": "10", "for": "x"}, {"t": now - 300, "job": "11", "for": "x"}])
    state.save(str(tmp_path / "p.json"), now, 3600)
    pol = Policy(movable_qos=frozenset({"scav"}), protect_h=0.25)
    b, lines = HoldBackend(), []
    run_pass(snap, b, pol, str(tmp_path / "p.json"), None, lines.append, now=lambda: now, minute_of_day=60)
    assert "leaf2 (n[3-4]) is the first leaf it can have: at 2030-01-01T01:10:00, in 0.2 h (job(s) " \
        "11 end by their time limits or may move by then), then moving 11 (" in lines[0], lines
    assert [c[0] for c in b.calls] == ["create"] and b.calls[0][1]["StartTime"] == "2030-01-01T01:10:00"
    # max_holds 0: says when, holds nothing
    b, lines = HoldBackend(), []
    run_pass(snap, b, Policy(max_holds=0), str(tmp_path / "z.json"), None, lines.append, now=lambda: now,
             minute_of_day=60)
    assert b.calls == [] and len(lines) == 1 and WatchState.load(str(tmp_path / "z.json")).holds == []


# ------------------------------------------------------------------------------------------ holds


class HoldBackend(FakeBackend):
    """FakeBackend with the reservation calls' fields and a job that runs where ``runs_on`` says."""

    def __init__(self, runs_on: tuple[str, ...] = ("n3", "n4"), delete_error: str | None = None) -> None:
        super().__init__()
        self.runs_on, self.delete_error = runs_on, delete_error

    def create_reservation(self, **kw: str) -> None:
        self.calls.append(("create", kw))

    def update_reservation(self, name: str, **kw: str) -> None:
        self.calls.append(("update_resv", name, kw))

    def job(self, job_id: str) -> JobInfo:
        return JobInfo(job_id, "RUNNING", nodes=self.runs_on)

    def delete_reservation(self, name: str) -> None:
        self.calls.append(("delete", name))
        if self.delete_error:
            raise SlurmkitError(self.delete_error)


JOB10, JOB11, JOB20 = DETAILS.splitlines()


def snap_of(*records: str, busy: tuple[str, ...] = ("n1",)) -> Any:
    t, _states, _ = two_leaves()
    states = {n: NodeState(n, "allocated" if n in busy else "idle", 0 if n in busy else 8, 8)
              for n in ("n1", "n2", "n3", "n4")}
    return lambda: Snapshot("\n".join(records) + "\n", states, t, [{"PartitionName": "gpu", "Nodes": "n[1-4]"}])


def held(tmp_path: Path) -> tuple[str, float]:
    """A state file with job 20's hold of n[3-4] from 02:00 (waiting for job 11), made by a real pass."""
    from datetime import datetime

    now = datetime.fromisoformat("2030-01-01T01:00:00").timestamp()
    path = str(tmp_path / "w.json")
    run_pass(snap, HoldBackend(), Policy(), path, None, lambda m: None, now=lambda: now, minute_of_day=60)
    (h,) = WatchState.load(path).holds
    assert (h["job"], h["nodes"], h["waits_for"], h["user"]) == ("20", ["n3", "n4"], ["11"], "alice")
    return path, now


def test_a_hold_is_kept_across_passes_and_restarts_and_blocks_a_second_one(tmp_path: Path) -> None:
    path, now = held(tmp_path)  # the state file is all a new watch process has
    b, lines = HoldBackend(), []
    ok = run_pass(snap, b, Policy(), path, str(tmp_path), lines.append, now=lambda: now + 60, minute_of_day=61)
    assert ok and b.calls == []
    assert lines == ["hold slurmkit-hold-20 (n[3-4] from 2030-01-01T02:00:00) for job 20: waits for job(s) 11",
                     "job 20: waits for its hold slurmkit-hold-20 (n[3-4] from 2030-01-01T02:00:00): nothing done"]
    assert len(WatchState.load(path).holds) == 1
    assert "slurmkit_defrag_holds_total 1\n" in (tmp_path / METRICS_FILE).read_text()
    # another blocked job (21) while 20's hold is kept: the policy's one hold is taken, so 21 gets none
    job21 = JOB20.replace("JobId=20", "JobId=21").replace("UserId=alice(1000)", "UserId=bob(1001)")
    b, lines = HoldBackend(), []
    run_pass(snap_of(JOB10, JOB11, JOB20, job21, busy=("n1", "n3")), b, Policy(), path, None, lines.append,
             now=lambda: now + 60, minute_of_day=61)
    assert b.calls == [] and len(WatchState.load(path).holds) == 1
    b, lines = HoldBackend(), []  # two allowed: 21's goes on the other leaf (n[1-2], after job 10)
    run_pass(snap_of(JOB10, JOB11, JOB20, job21, busy=("n1", "n3")), b, Policy(max_holds=2), path, None,
             lines.append, now=lambda: now + 60, minute_of_day=61)
    assert [(c[0], c[1]["Nodes"], c[1]["Users"]) for c in b.calls] == [("create", "n[1-2]", "bob")], lines


def test_a_due_hold_lets_its_job_in_then_releases_it(tmp_path: Path) -> None:
    path, now = held(tmp_path)
    # 02:00:30: job 11 reached its time limit and is gone; n[3-4] idle; nothing to move
    b, lines = HoldBackend(), []
    ok = run_pass(snap_of(JOB10, JOB20), b, Policy(), path, str(tmp_path), lines.append, now=lambda: now + 3630,
                  minute_of_day=120)
    assert ok, lines
    assert b.calls == [("update", "20", {"ReservationName": "slurmkit-hold-20"}),
                       ("update", "20", {"ReservationName": ""}), ("delete", "slurmkit-hold-20")]
    assert lines[0] == ("hold slurmkit-hold-20 for job 20 is due (the hold's start has come): nothing to move, then "
                        "job 20 runs in it on n[3-4]")
    assert lines[-1] == "job 20 started on n[3-4] (held since " + lines[-1].split("held since ", 1)[1]
    st = WatchState.load(path)
    assert st.holds == [] and st.counters["slurmkit_defrag_unblocked_total"] == 1


def test_a_hold_whose_blockers_end_early_starts_now_and_moves_what_runs_there(tmp_path: Path) -> None:
    path, now = held(tmp_path)
    # 01:30: job 11 ended early; a movable job 12 (QOS scav) now runs on n4: it is moved, the hold starts now
    job12 = JOB11.replace("JobId=11", "JobId=12").replace("n3", "n4")
    b, lines = HoldBackend(), []
    pol = Policy(movable_qos=frozenset({"scav"}))
    ok = run_pass(snap_of(JOB20, job12, busy=("n4",)), b, pol, path, None, lines.append, now=lambda: now + 1800,
                  minute_of_day=90)
    assert ok, lines
    assert b.calls[:3] == [("update_resv", "slurmkit-hold-20", {"StartTime": "now"}),
                           ("update", "20", {"ReservationName": "slurmkit-hold-20"}), ("requeue", "12")]
    assert b.calls[-1] == ("delete", "slurmkit-hold-20")
    assert "slurmkit-hold-20 starts now (the job(s) it waited for have ended)" in lines
    st = WatchState.load(path)
    assert st.holds == [] and [m["job"] for m in st.moves] == ["12"] and st.moves[0]["for"] == "20"
    # ... but not in quiet hours: kept
    path2, _ = held(tmp_path / "q")
    b, lines = HoldBackend(), []
    run_pass(snap_of(JOB20, job12, busy=("n4",)), b, replace_policy(pol, quiet_hours=((60, 120),)), path2, None,
             lines.append, now=lambda: now + 1800, minute_of_day=90)
    assert b.calls == [] and "due (the job(s) it waited for have ended), quiet hours 01:00-02:00; kept" in lines[0]


def replace_policy(p: Policy, **kw: Any) -> Policy:
    from dataclasses import replace

    return replace(p, **kw)


def test_a_due_hold_with_a_job_that_may_not_move_still_there_is_kept(tmp_path: Path) -> None:
    path, now = held(tmp_path)
    # 02:00:10: job 11 overran its end time for a moment (Slurm kills it shortly); not movable: wait
    b, lines = HoldBackend(), []
    run_pass(snap_of(JOB10, JOB11, JOB20, busy=("n1", "n3")), b, Policy(), path, None, lines.append,
             now=lambda: now + 3610, minute_of_day=120)
    assert b.calls == [] and lines[0].startswith("hold slurmkit-hold-20 for job 20: due (the hold's start has come), "
                                                 "but blocked, and no set of movable jobs frees a whole leaf")
    assert lines[0].endswith("kept until 2030-01-01T02:15:00") and len(WatchState.load(path).holds) == 1


@pytest.mark.parametrize(("records", "why", "failed"), [
    ((JOB10, JOB11), "job 20 left the queue", 0),
    ((JOB10, JOB11, JOB20.replace("JobState=PENDING", "JobState=CANCELLED")), "job 20 left the queue (CANCELLED)", 0),
    ((JOB10, JOB11.replace("n3", "n2"), JOB20.replace("JobState=PENDING", "JobState=RUNNING NodeList=n[3-4]")),
     "job 20 runs on the held nodes", 0),
    ((JOB11, JOB20.replace("JobState=PENDING", "JobState=RUNNING NodeList=n[1-2]")),
     "job 20 runs elsewhere (n[1-2])", 0),
])
def test_a_hold_is_released_when_its_job_leaves_or_starts(tmp_path: Path, records: tuple[str, ...], why: str,
                                                           failed: int) -> None:
    path, now = held(tmp_path)
    b, lines = HoldBackend(), []
    assert run_pass(snap_of(*records), b, Policy(), path, None, lines.append, now=lambda: now + 60, minute_of_day=61)
    if "held nodes" in why:  # a watch that died inside carry_out left the job in it: cleared first
        assert b.calls.pop(0) == ("update", "20", {"ReservationName": ""})
    assert b.calls[0] == ("delete", "slurmkit-hold-20") and lines[0] == f"released slurmkit-hold-20: {why}"
    st = WatchState.load(path)
    assert st.holds == [] and st.counters["slurmkit_defrag_failed_total"] == failed
    assert st.counters["slurmkit_defrag_holds_released_total"] == (0 if "held nodes" in why else 1)


def test_an_overrun_hold_is_released_and_counted_failed(tmp_path: Path) -> None:
    path, now = held(tmp_path)
    b, lines = HoldBackend(), []
    ok = run_pass(snap_of(JOB10, JOB11, JOB20, busy=("n1", "n3")), b, Policy(hold_grace_s=900), path, None,
                  lines.append, now=lambda: now + 3600 + 901, minute_of_day=135)
    assert not ok and b.calls[0] == ("delete", "slurmkit-hold-20")
    assert lines[0] == ("released slurmkit-hold-20: job 20 still pending 901 s after the hold's start "
                        "(defrag.hold_grace_s 900)")
    st = WatchState.load(path)
    assert st.counters["slurmkit_defrag_failed_total"] == 1 and st.counters["slurmkit_defrag_holds_released_total"] == 1


def test_a_hold_whose_reservation_cannot_be_deleted_is_kept_and_one_already_gone_is_dropped(tmp_path: Path) -> None:
    path, now = held(tmp_path)
    b, lines = HoldBackend(delete_error="scontrol delete: Unable to contact slurm controller"), []
    run_pass(snap_of(JOB10, JOB11), b, Policy(), path, None, lines.append, now=lambda: now + 60, minute_of_day=61)
    assert lines[0].startswith("could not release slurmkit-hold-20 (job 20 left the queue): scontrol delete: Unable")
    assert len(WatchState.load(path).holds) == 1
    b, lines = HoldBackend(delete_error="Error deleting the reservation: Requested reservation is invalid"), []
    run_pass(snap_of(JOB10, JOB11), b, Policy(), path, None, lines.append, now=lambda: now + 60, minute_of_day=61)
    assert lines[0] == "released slurmkit-hold-20: job 20 left the queue" and WatchState.load(path).holds == []


def test_movable_again_is_the_end_of_each_protection() -> None:
    _t, _states, jobs = two_leaves()
    state = WatchState(moves=[{"t": 1000.0, "job": "11", "for": "x"}])
    pol = Policy(protect_h=1.0)
    assert movable_again(protect(jobs, state, pol, 2000.0), state, pol, 2000.0) == {"11": 4600.0}
    assert movable_again(protect(jobs, state, pol, 5000.0), state, pol, 5000.0) == {}  # protection over


def test_dry_run_pass_changes_nothing(tmp_path: Path) -> None:
    from datetime import datetime

    now = datetime.fromisoformat("2030-01-01T01:00:00").timestamp()
    b, lines = FakeBackend(), []
    run_pass(snap, b, Policy(movable_qos=frozenset({"scav"})), str(tmp_path / "w.json"), None, lines.append,
             dry_run=True, now=lambda: now, minute_of_day=60)
    assert b.calls == [] and lines[0].endswith("would move 11 to free leaf2 (5280 GPU-s): dry run, nothing done")
    assert WatchState.load(str(tmp_path / "w.json")).moves == []


# ------------------------------------------------------------------------------------------ the unit


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_print_unit_is_a_valid_systemd_unit(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "defrag", "watch", "--print-unit",
                        "--metrics-dir", str(tmp_path / "prom"), "--interval", "30"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert " defrag watch --interval 30 " in r.stdout and f"--metrics-dir {tmp_path / 'prom'}" in r.stdout
    assert "@EXEC@" not in r.stdout and "--once" not in r.stdout
    unit = tmp_path / "slurmkit-defrag-watch.service"
    unit.write_text(r.stdout)
    v = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0 and not v.stderr.strip(), v.stderr


def test_held_nodes_are_neither_a_target_nor_a_destination_for_other_jobs(tmp_path: Path) -> None:
    path, now = held(tmp_path)  # 20 holds n[3-4]
    # 21 blocked too; 10 (n1) and 11 (n3) movable now: freeing leaf2 by moving 11 is cheapest, but leaf2 is held;
    # freeing leaf1 would send 10 to the held nodes: no plan, nothing done
    job21 = JOB20.replace("JobId=20", "JobId=21")
    b, lines = HoldBackend(), []
    run_pass(snap_of(JOB10, JOB11, JOB20, job21, busy=("n1", "n3")), b, Policy(movable_qos=frozenset({"scav"})), path,
             None, lines.append, now=lambda: now + 60, minute_of_day=61)
    assert b.calls == [], lines
    assert lines[-1].startswith("job 20: waits for its hold slurmkit-hold-20 (n[3-4] from 2030-01-01T02:00:00); "
                                "job 21: blocked, and no set of movable jobs frees a whole leaf"), lines


def test_dry_run_neither_creates_nor_tends_a_hold(tmp_path: Path) -> None:
    from datetime import datetime

    now = datetime.fromisoformat("2030-01-01T01:00:00").timestamp()
    b, lines = HoldBackend(), []
    run_pass(snap, b, Policy(), str(tmp_path / "d.json"), None, lines.append, dry_run=True, now=lambda: now,
             minute_of_day=60)
    assert b.calls == [] and lines[-1] == ("would hold n[3-4] for job 20 from 2030-01-01T02:00:00: dry run, "
                                           "nothing done")
    assert WatchState.load(str(tmp_path / "d.json")).holds == []
    path, now = held(tmp_path)
    b, lines = HoldBackend(), []
    run_pass(snap_of(JOB10, JOB11), b, Policy(), path, None, lines.append, dry_run=True, now=lambda: now + 60,
             minute_of_day=61)
    assert b.calls == [] and lines[0] == ("hold slurmkit-hold-20 for job 20: gone (job 20 left the queue): dry run, "
                                          "nothing done")
    assert len(WatchState.load(path).holds) == 1
