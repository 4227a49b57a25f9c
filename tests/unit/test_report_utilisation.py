"""`slurmkit report utilisation`'s arithmetic (slurmkit/accounts/utilisation.py) on sacct and sacctmgr lines of the
shape those commands print (the lab test, tests/integration/test_utilisation_lab.py, reads the real ones): windows
cut jobs and events, running jobs count to now, typed and untyped gres/gpu are one count, array tasks and het
components each count once, down and drained time come off the available side, days split at local midnight."""

from __future__ import annotations

from datetime import datetime

import pytest

from slurmkit.accounts import utilisation as ut
from slurmkit.errors import UsageError


def t(s: str) -> float:
    return datetime.fromisoformat(s).timestamp()


W0, W1 = t("2026-11-30T00:00:00"), t("2026-12-02T00:00:00")  # two days
NODES = [ut.NodeGPUs("gpu01", {"h100": 8}, ("gpu", "long")), ut.NodeGPUs("gpu02", {"h100": 8}, ("gpu",)),
         ut.NodeGPUs("a01", {"a100": 4}, ("gpu",)), ut.NodeGPUs("login1", {}, ())]


def fold(by: str = "partition", lines: list[str] = (), events=(), now: float = W1):  # type: ignore[no-untyped-def]
    f = ut.Fold(W0, W1, by, 0.92)
    for n in NODES:
        f.node(n)
    for e in events:
        f.event(*e)
    rd = ut.Lines(now)
    for line in lines:
        a = rd.allocation(line)
        if a is not None:
            f.allocation(a)
    return f.finish(rd.skipped)


def test_alloc_tres_counts_each_gpu_once() -> None:
    assert ut.alloc_gpus("billing=16,cpu=16,gres/gpu:h100=8,gres/gpu=8,mem=512000M,node=1") == 8
    assert ut.alloc_gpus("cpu=2,gres/gpu:a100=1,gres/gpu:h100=2") == 3  # typed only: their sum
    assert ut.alloc_gpus("cpu=4,mem=100M,node=1") == 0
    assert ut.gpu_types("gpu:h100:8(S:0-1),shard:16") == {"h100": 8}
    assert ut.gpu_types("gpu:4,gpu:a100:2") == {"gpu": 4, "a100": 2}
    assert ut.gpu_types("(null)") == {}


def test_available_less_down_and_drained_and_allocated_cut_by_the_window() -> None:
    lines = [
        # 8 GPUs for 10 h, inside the window
        "100|alice|ml|gpu|cpu=16,gres/gpu:h100=8,gres/gpu=8,node=1|2026-11-30T02:00:00|2026-11-30T12:00:00|COMPLETED|gpu01",
        # started a day before the window: only its 6 h inside count
        "101|bob|phys|long|cpu=4,gres/gpu=2,node=1|2026-11-29T00:00:00|2026-11-30T06:00:00|TIMEOUT|gpu01",
        # array task and het component: each its own line, its own GPUs
        "102_3|alice|ml|gpu|gres/gpu=1|2026-11-30T00:00:00|2026-11-30T01:00:00|COMPLETED|gpu02",
        "103+1|carol|ml|gpu|gres/gpu=4|2026-11-30T00:00:00|2026-11-30T00:30:00|COMPLETED|a01",
        # still running: up to now (the window's end here)
        "104|bob|phys|gpu|gres/gpu=4|2026-12-01T20:00:00|Unknown|RUNNING|gpu[02-03]",
        # pending: never started
        "105|bob|phys|gpu|gres/gpu=8|Unknown|Unknown|PENDING|None assigned",
        # no GPUs
        "106|dave|cpu|gpu|cpu=64|2026-11-30T00:00:00|2026-11-30T05:00:00|COMPLETED|gpu02",
        "sacct: error: a line that is no record",
    ]
    # gpu02 down 4 h, a01 drained 2 h of which 1 h is before the window
    events = [("gpu02", t("2026-11-30T08:00:00"), t("2026-11-30T12:00:00"), "DOWN"),
              ("a01", t("2026-11-29T23:00:00"), t("2026-11-30T01:00:00"), "IDLE+DRAIN"),
              ("gpu01", t("2026-11-30T00:00:00"), t("2026-11-30T01:00:00"), "IDLE"),  # no loss
              ("ghost", t("2026-11-30T00:00:00"), t("2026-11-30T01:00:00"), "DOWN")]  # a node gone since
    rep = fold(lines=lines, events=events)
    c = rep.cluster
    assert c.down_h == pytest.approx(8 * 4) and c.drained_h == pytest.approx(4 * 1)
    assert c.available_h == pytest.approx(20 * 48 - 32 - 4)
    assert c.allocated_h == pytest.approx(80 + 12 + 1 + 2 + 16)
    assert c.jobs == 5 and rep.skipped == 1
    # by partition: gpu01 is in two (they overlap), each partition's own jobs
    assert rep.groups["long"].available_h == pytest.approx(8 * 48)
    assert rep.groups["long"].allocated_h == pytest.approx(12)
    assert rep.groups["gpu"].allocated_h == pytest.approx(80 + 1 + 2 + 16)
    assert rep.groups["gpu"].available_h == pytest.approx(20 * 48 - 32 - 4)
    # the days: the second only has the running job
    assert rep.days["2026-11-30"].allocated_h == pytest.approx(80 + 12 + 1 + 2)
    assert rep.days["2026-12-01"].allocated_h == pytest.approx(16)
    assert rep.days["2026-11-30"].down_h == pytest.approx(32)
    j = rep.to_json()
    assert j["cluster"]["utilisation"] == pytest.approx(111 / 924, abs=1e-4) and j["cluster"]["below_target"]
    assert j["used_gpu_hours"] is None  # not measured: never a made-up figure


def test_by_account_user_and_gpu_type() -> None:
    lines = ["1|alice|ml|gpu|gres/gpu=8|2026-11-30T00:00:00|2026-11-30T10:00:00|COMPLETED|gpu01",
             "2|bob|ml|gpu|gres/gpu=4|2026-11-30T00:00:00|2026-11-30T10:00:00|COMPLETED|a01"]
    acc = fold("account", lines)
    assert acc.groups["ml"].allocated_h == pytest.approx(120)
    assert acc.groups["ml"].available_h == pytest.approx(acc.cluster.available_h)  # a share of the cluster
    users = fold("user", lines)
    assert set(users.groups) == {"alice", "bob"}
    types = fold("gpu-type", lines)
    assert types.groups["h100"].available_h == pytest.approx(16 * 48)
    assert types.groups["a100"].allocated_h == pytest.approx(40)
    assert types.groups["h100"].allocated_h == pytest.approx(80)


def test_a_job_over_midnight_splits_into_its_days() -> None:
    rep = fold(lines=["7|a|b|gpu|gres/gpu=2|2026-11-30T23:00:00|2026-12-01T02:00:00|COMPLETED|gpu01"])
    assert rep.days["2026-11-30"].allocated_h == pytest.approx(2)
    assert rep.days["2026-12-01"].allocated_h == pytest.approx(4)
    assert rep.cluster.allocated_h == pytest.approx(6)


def test_a_bad_group_is_a_usage_error_and_the_table_says_what_is_not_measured() -> None:
    with pytest.raises(UsageError, match="--by"):
        ut.Fold(W0, W1, "qos", 0.92)
    text = "\n".join(ut.table(fold(lines=["1|a|b|gpu|gres/gpu=8|2026-11-30T00:00:00|2026-12-02T00:00:00|RUNNING|gpu01"])))
    assert "not measured" in text and "below target" in text
    assert ut.sacct_argv(W0, W1)[:6] == ["sacct", "-a", "-X", "-n", "-P", "--noconvert"]
