"""Live placement (issue 25 items 1-3): a pin only where the job can have the nodes now.

The queue and reservation parsers read real output recorded from labs of both releases
(tests/data/slurm/record_queue.py); the placement decisions are pure functions of ClusterFacts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from slurmkit.backend.base import SubmitRequest
from slurmkit.backend.parse import (
    NodeInfo,
    PendingJob,
    Reservation,
    SwitchRecord,
    parse_pending,
    parse_reservations,
)
from slurmkit.errors import UsageError
from slurmkit.jobs.liveplace import live_view
from slurmkit.jobs.render import render
from slurmkit.jobs.spec import ClusterFacts, JobSpec, apply_sbatch_env
from slurmkit.jobs.submit import check_pin
from slurmkit.jobs.topology import plan_topology

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
NODES = [f"node{i}" for i in range(1, 5)]
NOW = time.time()


def facts(idle: Sequence[str] = NODES, pending: Sequence[PendingJob] = (), resvs: Sequence[Reservation] = (),
          features: dict[str, tuple[str, ...]] | None = None, **kw: object) -> ClusterFacts:
    live = tuple((n, "idle" if n in idle else "allocated", frozenset(), 8 if n in idle else 0, 8) for n in NODES)
    queue = tuple((j, frozenset(j.req_nodes or NODES)) for j in pending)
    base = ClusterFacts(
        partition="gpu", gpus_per_node=8, node_gpus=tuple((n, 8) for n in NODES), max_time="1-00:00:00",
        topo_records=(SwitchRecord("leaf1", 0, ["node1", "node2"], []), SwitchRecord("leaf2", 0, ["node3", "node4"], []),
                      SwitchRecord("spine", 1, NODES, ["leaf1", "leaf2"])),
        live_nodes=live, pending=queue, reservations=tuple(resvs), live_at=NOW,
        node_features=tuple((n, (features or {}).get(n, ("h100",))) for n in NODES),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def job(jid: str, reason: str = "None", req: Sequence[str] = ()) -> PendingJob:
    return PendingJob(job_id=jid, nodes=2, partitions=("gpu",), req_nodes=tuple(req), exc_nodes=(), reservation="",
                      reason=reason)


def resv(name: str, nodes: Sequence[str], start: float, end: float, flags: Sequence[str] = ()) -> Reservation:
    return Reservation(name=name, start=start, end=end, nodes=tuple(nodes), flags=frozenset(flags), users=("root",),
                       accounts=(), partition="", active=start <= NOW)


def spec(**kw: object) -> JobSpec:
    return JobSpec(script="/abs/train.py", nodes=2, **kw)  # type: ignore[arg-type]


def plan(s: JobSpec, f: ClusterFacts) -> tuple[str, ...]:
    return plan_topology(s, f, 8).directives


# --- recorded output, both releases -----------------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["", "24.11"])
def test_pending_queue_and_reservations_parse_as_recorded(rel: str) -> None:
    d = DATA / rel if rel else DATA
    q = {j.reason: j for j in parse_pending((d / "squeue_pending.txt").read_text())}
    assert q["Resources"].req_nodes == ("node1", "node2") and q["Resources"].nodes == 2
    assert q["Dependency"].req_nodes == () and q["Dependency"].partitions == ("gpu",)
    arr = [j for j in parse_pending((d / "squeue_pending.txt").read_text()) if "_" in j.job_id]
    assert arr and arr[0].number == int(arr[0].job_id.split("_")[0])
    r = {x.name: x for x in parse_reservations((d / "scontrol_show_reservation.txt").read_text())}
    assert r["now4"].active and r["now4"].nodes == ("node4",) and r["now4"].users == ("root",)
    assert not r["later3"].active and "FLEX" in r["later3"].flags
    assert r["later3"].start - r["now4"].start == pytest.approx(1800, abs=2)
    assert r["now4"].end - r["now4"].start == pytest.approx(3600, abs=1)


def test_no_reservations_message_parses_empty() -> None:
    assert parse_reservations("No reservations in the system\n") == []


# --- item 1: back-to-back jobs never pin the same nodes ----------------------------------------------------------

def test_a_pending_pinned_job_keeps_its_nodes_the_next_job_pins_others() -> None:
    assert plan(spec(), facts()) == ("--nodelist=node[1-2]",)
    # the first job is queued (reason None, not scheduled yet): its nodes still read idle
    assert plan(spec(), facts(pending=[job("7", req=["node1", "node2"])])) == ("--nodelist=node[3-4]",)


def test_a_pending_unpinned_job_may_take_any_node_so_nothing_is_pinned() -> None:
    p = plan_topology(spec(), facts(pending=[job("7")]), 8)
    assert p.directives == ("--switches=1@05:00",)
    assert "pending job(s) 7 may take any free node first" in p.summary


@pytest.mark.parametrize("reason", ["Dependency", "JobHeldUser", "BeginTime", "AssocGrpGRES", "QOSMaxGRESPerUser"])
def test_jobs_waiting_for_something_else_do_not_block_a_pin(reason: str) -> None:
    assert plan(spec(), facts(pending=[job("7", reason=reason)])) == ("--nodelist=node[1-2]",)


def test_a_pending_job_of_another_partition_does_not_count() -> None:
    other = PendingJob("7", 1, ("cpu",), (), (), "", "None")
    f = replace(facts(), pending=((other, frozenset({"cpu1"})),))
    assert plan(spec(), f) == ("--nodelist=node[1-2]",)


def test_only_earlier_jobs_count_once_submitted() -> None:
    f = facts(pending=[job("7", req=["node1", "node2"]), job("9", req=["node1", "node2"])])
    assert set(live_view(spec(), f, own_job="9").promised) == {"node1", "node2"}
    assert live_view(spec(), f, own_job="7").promised == {}


# --- item 2: reservations ----------------------------------------------------------------------------------------

def test_an_active_reservation_is_never_pinned() -> None:
    f = facts(resvs=[resv("maint", ["node1"], NOW - 60, NOW + 3600)])
    assert plan(spec(), f) == ("--nodelist=node[3-4]",)


def test_a_reservation_that_starts_before_the_job_would_end_blocks_its_nodes() -> None:
    later = [resv("maint", ["node1", "node3"], NOW + 1800, NOW + 7200)]
    assert plan(spec(time="10"), facts(resvs=later)) == ("--nodelist=node[1-2]",)  # ends before it starts
    p = plan_topology(spec(time="60"), facts(resvs=later), 8)
    assert p.directives == ("--nodelist=node[2,4]",)  # node2 + node4 are all that is left, across the spine
    # no --time: the partition's DefaultTime, else MaxTime (1 day) reaches into it
    assert "node1" in live_view(spec(), facts(resvs=later)).unusable
    assert "node1" not in live_view(spec(), facts(resvs=later, default_time="00:20:00")).unusable


def test_a_job_in_a_reservation_is_placed_inside_it_and_only_once_it_is_active() -> None:
    mine = resv("team", ["node3", "node4"], NOW - 60, NOW + 3600)
    assert plan(spec(reservation="team"), facts(resvs=[mine])) == ("--nodelist=node[3-4]",)
    soon = resv("team", ["node3", "node4"], NOW + 1800, NOW + 3600)
    p = plan_topology(spec(reservation="team"), facts(resvs=[soon]), 8)
    assert not p.pinned and "reservation team starts at" in p.summary
    flex = resv("team", ["node3"], NOW - 60, NOW + 3600, flags=["FLEX"])
    assert live_view(spec(reservation="team"), facts(resvs=[flex])).allowed is None
    with pytest.raises(UsageError, match=r"--reservation: 'nope' does not exist \(reservations: team\)"):
        plan(spec(reservation="nope"), facts(resvs=[mine]))


# --- item 3: sbatch's own node selection --------------------------------------------------------------------------

def test_exclude_and_constraint_remove_nodes_and_nodelist_is_the_users() -> None:
    assert plan(spec(exclude="node[1-2]"), facts()) == ("--nodelist=node[3-4]",)
    f = facts(features={"node1": ("a100",), "node2": ("a100",)})
    assert plan(spec(constraint="h100"), f) == ("--nodelist=node[3-4]",)
    assert plan(spec(constraint="a100|h100"), f) == ("--nodelist=node[1-2]",)
    p = plan_topology(spec(constraint="[h100*2]"), f, 8)
    assert not p.pinned and "beyond what placement reads" in p.summary
    p = plan_topology(spec(nodelist="node[2-3]"), facts(), 8)
    assert p.directives == () and "--nodelist node[2-3]" in p.summary


@pytest.mark.parametrize("kw", [{"begin": "now+1hour"}, {"hold": True}, {"sbatch_args": ("--mincpus=4",)}])
def test_later_starts_and_unknown_pass_through_do_not_pin(kw: dict[str, object]) -> None:
    assert not plan_topology(spec(**kw), facts(), 8).pinned


def test_neutral_pass_through_still_pins_and_renders() -> None:
    s = spec(sbatch_args=("--nice=10",), mail_type="END,FAIL", mail_user="a@b.org", comment="ablation run 3",
             exclude="node4", constraint="h100&nvlink", begin=None)
    f = facts(features={n: ("h100", "nvlink") for n in NODES})
    job = render(s, f, "/runs/x")
    lines = [x for x in job.request.script.splitlines() if x.startswith("#SBATCH")]
    for want in ("--nice=10", "--mail-type=END,FAIL", "--mail-user=a@b.org", '--comment="ablation run 3"',
                 "--exclude=node4", "--constraint=h100&nvlink", "--nodelist=node[1-2]"):
        assert f"#SBATCH {want}" in lines


@pytest.mark.parametrize(("arg", "msg"), [
    ("--gres=gpu:1", "gpusub sets --gres itself; use --gpus-per-node"),
    ("--exclude=node1", "use --exclude"),
    ("-x node1", "is not a long sbatch option"),
    ("--nice=1 2", "may contain only"),
    ("--wckey=a\nb", "--sbatch-arg"),
])
def test_pass_through_refuses_what_gpusub_owns_and_unsafe_values(arg: str, msg: str) -> None:
    with pytest.raises(UsageError, match=msg):
        spec(sbatch_args=(arg,))


def test_comment_refuses_quotes_and_line_breaks() -> None:
    for bad in ('say "hi"', "a\nb", "back\\slash"):
        with pytest.raises(UsageError, match="--comment"):
            spec(comment=bad)


def test_sbatch_environment_is_read_flags_win_and_conflicts_are_dropped() -> None:
    env = {"SBATCH_PARTITION": "gpu", "SBATCH_TIMELIMIT": "30", "SBATCH_RESERVATION": "team",
           "SBATCH_NO_REQUEUE": "1", "SBATCH_EXCLUSIVE": "", "SBATCH_WCKEY": "kept"}
    s, unset, warnings = apply_sbatch_env(spec(time="20"), env)
    assert (s.partition, s.time, s.reservation, s.exclusive) == ("gpu", "20", "team", True)
    assert set(unset) == {"SBATCH_PARTITION", "SBATCH_TIMELIMIT", "SBATCH_RESERVATION", "SBATCH_NO_REQUEUE",
                          "SBATCH_EXCLUSIVE"}
    assert warnings == ["SBATCH_NO_REQUEUE=1 ignored: gpusub sets that itself (use --max-restarts 0)"]
    with pytest.raises(UsageError, match="SBATCH_CLUSTERS=other: gpusub plans for the local cluster only"):
        apply_sbatch_env(spec(), {"SBATCH_CLUSTERS": "other"})
    with pytest.raises(UsageError, match="SBATCH_TIMELIMIT"):
        apply_sbatch_env(spec(signal_grace=120), {"SBATCH_TIMELIMIT": "1"})


# --- the pin checked once more after the submission ---------------------------------------------------------------

class RaceBackend:
    """Two gpusub runs read the queue at once and both pinned node[1-2]: job 5 was queued first. ``update_job``
    changes the queue as slurmctld would (the check reads it again after a move)."""

    def __init__(self, queue: list[PendingJob], states: dict[str, str]):
        self.queue = queue
        self.states = states
        self.updates: list[tuple[str, dict[str, str]]] = []

    def pending(self) -> list[PendingJob]:
        return self.queue

    def nodes(self, names: Sequence[str] | None = None) -> list[NodeInfo]:
        return [NodeInfo(name=n, state=self.states.get(n, "idle"), gres="gpu:h100:8",
                         gres_used="gpu:h100:8" if self.states.get(n, "idle") != "idle" else "gpu:h100:0")
                for n in names or NODES]

    def partitions(self) -> list[dict[str, str]]:
        return [{"PartitionName": "gpu", "Nodes": "node[1-4]", "MaxTime": "1-00:00:00", "Default": "YES"}]

    def update_job(self, job_id: str, **fields: str) -> None:
        from slurmkit import hostlist

        self.updates.append((job_id, fields))
        if "ReqNodeList" in fields:
            req = tuple(hostlist.expand(fields["ReqNodeList"])) if fields["ReqNodeList"] else ()
            self.queue = [replace(j, req_nodes=req) if j.job_id == job_id else j for j in self.queue]

    def submit(self, request: SubmitRequest) -> str:  # pragma: no cover - not used here
        raise AssertionError


def test_the_later_of_two_racing_pins_moves_its_own_to_free_nodes() -> None:
    rendered = render(spec(), facts(), "/runs/x")
    assert rendered.topology.pinned
    be = RaceBackend([job("5", req=["node1", "node2"]), job("6", req=["node1", "node2"])], {})
    said = check_pin(rendered, "6", be)  # type: ignore[arg-type]
    # moved, not cleared: a cleared job waits unpinned and Slurm may give it a later job's pinned nodes
    assert be.updates == [("6", {"ReqNodeList": "node[3-4]"})]
    assert said is not None and "pinned by job 5" in said and "pinned to node[3-4] instead" in said
    be = RaceBackend([job("5", req=["node1", "node2"]), job("6", req=["node1", "node2"])], {})
    assert check_pin(rendered, "5", be) is None and be.updates == []  # type: ignore[arg-type]


def test_a_race_loser_with_no_free_nodes_left_clears_its_pin() -> None:
    rendered = render(spec(), facts(), "/runs/x")
    be = RaceBackend([job("5", req=["node1", "node2"]), job("6", req=["node1", "node2"])], {"node3": "allocated"})
    said = check_pin(rendered, "6", be)  # type: ignore[arg-type]
    assert be.updates == [("6", {"ReqNodeList": "", "Switches": "1@05:00"})]
    assert said is not None and "pinned by job 5" in said and "--switches=1@05:00" in said


def test_a_job_queued_earlier_without_a_pin_makes_a_later_pin_unsafe() -> None:
    """Job 4 waits for any two nodes and was queued first: Slurm starts it first, wherever it fits; job 6's pin
    may be exactly where. The pin goes (a move would be as unsafe); a job queued after 6 without a pin does not
    count (Slurm's order puts it after 6)."""
    rendered = render(spec(), facts(), "/runs/x")
    be = RaceBackend([job("4"), job("6", req=["node1", "node2"])], {})
    said = check_pin(rendered, "6", be)  # type: ignore[arg-type]
    assert be.updates == [("6", {"ReqNodeList": "", "Switches": "1@05:00"})]
    assert said is not None and "job 4, queued earlier without a pin" in said
    be = RaceBackend([job("6", req=["node1", "node2"]), job("7")], {})
    assert check_pin(rendered, "6", be) is None and be.updates == []  # type: ignore[arg-type]


def test_a_moved_pin_yields_to_later_pins_too() -> None:
    """After a move the job yields to every other pin: a job queued meanwhile checked against the old one."""
    from slurmkit.jobs.liveplace import pin_conflicts

    f = facts(pending=[job("5", req=["node3", "node4"]), job("7", req=["node3"])])
    pin = frozenset({"node3", "node4"})
    assert pin_conflicts(spec(), f, "5", pin, 8) == []
    assert pin_conflicts(spec(), f, "5", pin, 8, any_order=True) == ["node3 (pinned by job 7)"]


def test_a_pin_whose_node_got_busy_meanwhile_is_moved_and_a_started_job_is_left_alone() -> None:
    rendered = render(spec(), facts(), "/runs/x")
    be = RaceBackend([job("6", req=["node1", "node2"])], {"node2": "allocated"})
    said = check_pin(rendered, "6", be)  # type: ignore[arg-type]
    assert "node2 (busy)" in (said or "") and be.updates == [("6", {"ReqNodeList": "node[3-4]"})]
    be = RaceBackend([], {"node1": "allocated", "node2": "allocated"})  # job 6 already runs there
    assert check_pin(rendered, "6", be) is None and be.updates == []  # type: ignore[arg-type]
