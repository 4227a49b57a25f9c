"""Issue 13: the inventory's tenants (loader, error contract), `slurmkit accounts`' pure plan on sacctmgr output
recorded from the lab (22.05 in tests/data/slurm/accounts, 24.11 in tests/data/slurm/24.11/accounts; re-record with
tests/data/accounts/record.sh), the slurm.conf the tenants need and `conf validate`'s cross-checks. The same logic
against real slurmdbd: tests/integration/test_tenants_lab.py."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.accounts.plan import (
    Change,
    State,
    after,
    describe_drift,
    desired,
    diff,
    mark_blocked,
    parse_jobs,
    parse_state,
    shares,
    steps,
    time_seconds,
)
from slurmkit.accounts.sacct import ApplyError, Target, apply_steps, target_from_conf
from slurmkit.errors import InventoryError, UsageError
from slurmkit.generate import generate
from slurmkit.generate.tenantcheck import cross_check
from slurmkit.model.load import load_cluster, load_cluster_dict

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
INVENTORY = DATA / "accounts" / "inventory.yaml"
RECORDED = {"22.05": DATA / "slurm" / "accounts", "24.11": DATA / "slurm" / "24.11" / "accounts"}

BASE = {
    "cluster": "c",
    "accounting": {"host": "head01"},
    "node_groups": [
        {"name": "a", "hosts": "n[1-3]", "cpu": {"sockets": 2, "cores_per_socket": 8}, "memory_mb": 64000,
         "gpus": {"type": "h100", "count": 8, "files": "/dev/nvidia[0-7]"}},
    ],
    "partitions": [{"name": "gpu", "groups": ["a"], "default": True}],
}
# the issue's example, on a 24-GPU cluster
ISSUE = {
    "qos": [
        {"name": "high", "priority": 1000, "preempt": ["scavenger"]},
        {"name": "normal", "priority": 100},
        {"name": "scavenger", "priority": 0, "usage_factor": 0.1, "preempt_mode": "requeue"},
    ],
    "accounts": [{"name": "research", "children": [
        {"name": "team-a", "fairshare": 60, "gpus": 16, "qos": ["normal", "high"], "default_qos": "normal",
         "users": ["alice", "bob"]},
        {"name": "team-b", "fairshare": 40, "gpus": 8, "qos": ["normal", "scavenger"], "users": ["carol"]},
    ]}],
    "user_limits": {"gpus": 8},
}


def inv(tenants: dict | None = None, **top: object) -> dict:
    d = copy.deepcopy(BASE)
    d["tenants"] = copy.deepcopy(ISSUE if tenants is None else tenants)
    d.update(top)
    return d


def tenants_with(**changes: object) -> dict:
    t = copy.deepcopy(ISSUE)
    t.update(changes)
    return t


def refused(d: dict, path: str, words: str) -> str:
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(d)
    assert ei.value.path == path, str(ei.value)
    assert words in str(ei.value), str(ei.value)
    assert "\n" not in str(ei.value)
    return str(ei.value)


def recorded(release: str, scene: str) -> State:
    d = RECORDED[release]
    return parse_state(*((d / f"{scene}_{k}.txt").read_text() for k in ("qos", "assoc", "user")))


# --- 1. the inventory -------------------------------------------------------------------------------------------

def test_issue_example_loads_with_its_meaning():
    t = load_cluster_dict(inv()).tenants
    assert t is not None
    assert [q.name for q in t.qos] == ["high", "normal", "scavenger"]
    assert t.qos_named("high").preempt == ("scavenger",) and t.qos_named("scavenger").preempt_mode == "requeue"
    assert [(a.name, a.parent) for a in t.accounts] == [("research", "root"), ("team-a", "research"),
                                                        ("team-b", "research")]
    a = t.account("team-a")
    assert a.gpus.tres() == {"gres/gpu": "16"} and a.fairshare == 60 and a.default_qos == "normal"
    assert t.account("team-b").default_qos == "normal"  # the first of its qos list when not given
    assert [(u.name, u.default_account) for u in t.users] == [("alice", "team-a"), ("bob", "team-a"),
                                                               ("carol", "team-b")]
    assert t.user_limits.gpus.total == 8 and t.preempts


# issue 24 item 4: a top-level team beside a parent of two teams, shares meant as 50/30/20 of the cluster
DEPTHS = [{"name": "research", "children": [{"name": "team-a", "fairshare": 50, "users": ["alice"]},
                                            {"name": "team-b", "fairshare": 30, "users": ["bob"]}]},
          {"name": "team-c", "fairshare": 20, "users": ["carol"]}]
FRESH = parse_state("normal|0||cluster||||||1.000000|\n", "root||||1||||normal|\nroot|root|||1||||normal|\n",
                    "root|root\n")


def test_a_parent_without_fairshare_gets_its_childrens_sum():
    t = load_cluster_dict(inv(tenants_with(accounts=DEPTHS, user_limits={}))).tenants
    r = t.account("research")
    assert (r.fairshare, r.fairshare_from_children) == (80, True)  # not slurmdbd's 1 (20:1 against team-c)
    assert t.account("team-c").fairshare == 20 and not t.account("team-c").fairshare_from_children
    nested = [{"name": "org", "children": [dict(DEPTHS[0], children=[*DEPTHS[0]["children"],
                                                                     {"name": "lab", "children": [
                                                                         {"name": "x", "fairshare": 5},
                                                                         {"name": "y", "fairshare": 7}]}])]}]
    t = load_cluster_dict(inv(tenants_with(accounts=nested, user_limits={}))).tenants
    assert [(a.name, a.fairshare) for a in t.accounts if a.fairshare_from_children] == [("org", 92),
                                                                                         ("research", 92), ("lab", 12)]
    # a parent given a share keeps it; its children divide it
    given = [dict(DEPTHS[0], fairshare=3), DEPTHS[1]]
    t = load_cluster_dict(inv(tenants_with(accounts=given, user_limits={}))).tenants
    assert (t.account("research").fairshare, t.account("research").fairshare_from_children) == (3, False)


def test_shares_are_sshare_normshares_with_roots_user_beside_the_top_level():
    t = load_cluster_dict(inv(tenants_with(accounts=DEPTHS, user_limits={}))).tenants
    got = {s.account: s for s in shares(after(FRESH, desired(t)))}
    assert list(got) == ["research", "team-a", "team-b", "team-c"]
    # root's children: research 80, team-c 20 and root's own user association 1
    assert (got["research"].raw, got["research"].level) == (80, 101)
    assert got["research"].norm == pytest.approx(80 / 101) and got["team-c"].norm == pytest.approx(20 / 101)
    assert got["team-a"].norm == pytest.approx(50 / 80) and got["team-a"].level == 80
    assert [round(got[a].cluster * 101) for a in ("team-a", "team-b", "team-c")] == [50, 30, 20]
    assert got["team-a"].describe() == ("share team-a: RawShares=50 NormShares=0.625000 (50 of 80 under research); "
                                        "49.5% of the cluster")
    # a live extra account is a sibling too (kept without --prune, gone with it)
    live = parse_state("", "root||||1||||normal|\nroot|root|||1||||normal|\nold|||root|99||||normal|\n", "")
    assert {s.account: s.level for s in shares(after(live, desired(t)))}["team-c"] == 200
    assert {s.account: s.level for s in shares(after(live, desired(t), prune=True))}["team-c"] == 101
    # Fairshare=parent (sacctmgr prints "parent") counts with its children's shares
    assert parse_state("", "a|u|||parent||||n|\n", "").users[("u", "a")]["Fairshare"] == "parent"


@pytest.mark.parametrize(("tenants", "path", "words"), [
    (tenants_with(qos=[{"name": "high", "preempt": ["scavanger"]}]), "tenants.qos[0].preempt[0]",
     "unknown QOS 'scavanger'"),
    (tenants_with(qos=[{"name": "high", "preempt": ["high"]}]), "tenants.qos[0].preempt[0]", "cannot preempt itself"),
    (tenants_with(accounts=[{"name": "t", "gpus": 25}]), "tenants.accounts[0].gpus", "more than the cluster's 24"),
    (tenants_with(accounts=[{"name": "t", "gpus": {"a100": 2}}]), "tenants.accounts[0].gpus.a100",
     "unknown GPU type"),
    (tenants_with(accounts=[{"name": "t", "gpus": {"h100": 30}}]), "tenants.accounts[0].gpus.h100",
     "more than the cluster's 24"),
    (tenants_with(user_limits={"gpus": 100}), "tenants.user_limits.gpus", "more than the cluster's"),
    (tenants_with(accounts=[{"name": "t", "qos": ["normal"], "default_qos": "high"}]),
     "tenants.accounts[0].default_qos", "not in this account's qos list"),
    (tenants_with(accounts=[{"name": "t", "qos": ["gold"]}]), "tenants.accounts[0].qos[0]", "unknown QOS 'gold'"),
    (tenants_with(accounts=[{"name": "Team-A"}]), "tenants.accounts[0].name", "lowercases"),
    (tenants_with(accounts=[{"name": "root"}]), "tenants.accounts[0].name", "slurmdbd's own top account"),
    (tenants_with(accounts=[{"name": "o", "users": ["x"], "children": [{"name": "t"}]}]),
     "tenants.accounts[0].users[0]", "has child accounts"),
    (tenants_with(accounts=[{"name": "t", "users": ["x"]}, {"name": "u", "users": [{"name": "x", "default": True}]},
                            {"name": "v", "users": [{"name": "x", "default": True}]}]),
     "tenants.accounts[2].users[0]", "already has default account 'u'"),
    (tenants_with(accounts=[{"name": "t"}, {"name": "t"}]), "tenants.accounts[1].name", "duplicate account"),
    (tenants_with(qos=[{"name": "q", "flags": ["NoSuchFlag"]}]), "tenants.qos[0].flags[0]", "unknown QOS flag"),
    (tenants_with(qos=[{"name": "q", "max_wall": "2 days"}]), "tenants.qos[0].max_wall", "not a Slurm time"),
    (tenants_with(partitions={"cpu": {"allow_qos": ["normal"]}}), "tenants.partitions.cpu", "unknown partition"),
    (tenants_with(partitions={"gpu": {"allow_qos": ["gold"]}}), "tenants.partitions.gpu.allow_qos[0]", "unknown QOS"),
    (tenants_with(qoss=[]), "tenants.qoss", "did you mean 'qos'"),
])
def test_inventory_errors_name_the_key(tenants, path, words):
    refused(inv(tenants), path, words)


def test_tenants_need_accounting_and_partition_qos_must_exist():
    d = inv()
    del d["accounting"]
    refused(d, "tenants", "need accounting")
    d = inv()
    d["partitions"][0]["qos"] = "gold"
    refused(d, "partitions[0].qos", "not in tenants.qos")
    refused(inv(policy={"preemption": "partition"}), "policy.preemption", "need preempt/qos")


def tree(org_gpus: object, team_a_gpus: object, mid: bool = False) -> dict:
    team_a = {"name": "team-a", "gpus": team_a_gpus, "qos": ["normal"], "users": ["alice"]}
    if team_a_gpus is None:
        del team_a["gpus"]
    leafs = [{"name": "mid", "children": [team_a]}] if mid else [team_a]
    org = {"name": "research", "gpus": org_gpus, "children": [*leafs, {"name": "team-b", "gpus": 8}]}
    return tenants_with(accounts=[org])


@pytest.mark.parametrize(("tenants", "path", "words"), [
    (tree(8, 16), "tenants.accounts[0].children[0].gpus", "16 GPUs is more than ancestor account 'research' "
                                                           "allows (8 GPUs in all, GrpTRES)"),
    (tree(4, 6, mid=True), "tenants.accounts[0].children[0].children[0].gpus", "ancestor account 'research'"),
    (tree({"total": 16, "h100": 4}, {"total": 8, "h100": 6}), "tenants.accounts[0].children[0].gpus.h100",
     "6 h100 GPUs is more than ancestor account 'research' allows (4 h100 GPUs, GrpTRES)"),
    (tree(8, {"total": 8, "h100": 12}), "tenants.accounts[0].children[0].gpus.h100", "(8 GPUs in all"),
])
def test_a_child_quota_above_an_ancestors_is_refused(tenants, path, words):
    """sacctmgr takes it, but slurmctld checks GrpTRES at every association up to root: the parent's caps it."""
    refused(inv(tenants), path, words)


def test_child_quotas_may_oversubscribe_their_parent_together():
    t = load_cluster_dict(inv(tree(16, 16))).tenants  # 16 + 8 > 16: each may use the parent's 16, not together
    assert t.account("team-a").gpus.total == 16 and t.account("research").gpus.total == 16
    t = load_cluster_dict(inv(tree(None, 16, mid=True))).tenants  # no ancestor quota: nothing to exceed
    assert t.account("team-a").gpus.total == 16


def test_cli_inventory_error_exit_2_one_line(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv(tenants_with(accounts=[{"name": "t", "gpus": 99}]))))
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "accounts", "plan", str(p)], capture_output=True,
                       text=True, env={"SLURM_CONF": str(tmp_path / "none.conf"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "tenants.accounts[0].gpus" in r.stderr and not r.stdout


# --- 2. the plan on recorded sacctmgr output --------------------------------------------------------------------

@pytest.mark.parametrize("release", sorted(RECORDED))
def test_recorded_clean_state_needs_no_change(release):
    want = desired(load_cluster(INVENTORY).tenants)
    assert diff(recorded(release, "clean"), want, prune=True) == []


@pytest.mark.parametrize("release", sorted(RECORDED))
def test_recorded_drift_is_exactly_the_three_manual_edits(release):
    want = desired(load_cluster(INVENTORY).tenants)
    changes = diff(recorded(release, "drifted"), want)
    assert [describe_drift(c) for c in changes] == [
        "changed QOS high: GrpTRES is gres/gpu=6, inventory says (none)",
        "changed account team-b: Fairshare is 5, inventory says 40",
        "extra user eve@team-a: in slurmdbd, not in the inventory (added by hand?)",
    ]
    # apply without --prune keeps eve; with --prune the minimal set of calls, in an order sacctmgr takes
    assert [s.args for s in steps(changes, "lab")] == [
        ("modify", "qos", "where", "name=high", "set", "GrpTRES=gres/gpu=-1"),
        ("modify", "account", "where", "name=team-b", "cluster=lab", "set", "Fairshare=40"),
    ]
    pruned = steps(diff(recorded(release, "drifted"), want, prune=True), "lab")
    assert pruned[-1].args == ("delete", "user", "where", "name=eve", "account=team-a", "cluster=lab")


def test_from_empty_order_and_grouping():
    """A fresh slurmdbd (root, root's user, QOS normal): new QOS before the QOS that preempt them are set, parents
    before children, the users of one account with the same settings in one call."""
    empty = parse_state("normal|0||cluster||||||1.000000|\n", "root||||1||||normal|\nroot|root|||1||||normal|\n",
                        "root|root\n")
    t = load_cluster_dict(inv()).tenants
    args = [s.args for s in steps(diff(empty, desired(t)), "c")]
    assert args[0] == ("add", "qos", "high,scavenger")
    assert args[1] == ("modify", "qos", "where", "name=high", "set", "Priority=1000", "Preempt=scavenger")
    assert args[2] == ("modify", "qos", "where", "name=scavenger", "set", "PreemptMode=requeue", "UsageFactor=0.100000")
    assert args[3] == ("modify", "qos", "where", "name=normal", "set", "Priority=100")
    assert [a[2] for a in args if a[:2] == ("add", "account")] == ["research", "team-a", "team-b"]
    assert ("add", "user", "alice,bob", "Account=team-a", "cluster=c", "Fairshare=1", "GrpTRES=gres/gpu=8",
            "QOS=high,normal", "DefaultQOS=normal") in args
    assert len(args) == 9
    # the builtins are never deleted, even with --prune
    assert not [c for c in diff(empty, State(), prune=True) if c.action == "delete"]


def test_tres_and_time_changes_are_minimal():
    live = parse_state("q|0||cluster|00:01:00|1-00:00:00|cpu=10,gres/gpu:h100=4,gres/gpu=4||5|1.000000|DenyOnLimit\n",
                       "", "")
    t = load_cluster_dict(inv(tenants_with(qos=[{"name": "q", "gpus": 4, "max_wall": "24:00:00",
                                                  "preempt_exempt_time": "1", "flags": ["denyonlimit"]}],
                                            accounts=[]))).tenants
    (c,) = diff(live, desired(t))
    assert [f for f, _o, _n in c.fields] == ["GrpTRES", "MaxJobsPerUser"]
    (st,) = steps([c], "x")
    assert st.args == ("modify", "qos", "where", "name=q", "set", "GrpTRES=cpu=-1,gres/gpu:h100=-1",
                       "MaxJobsPerUser=-1")
    assert time_seconds("1-00:00:00") == time_seconds("24:00:00") == "86400" and time_seconds("UNLIMITED") == ""


def test_a_new_users_default_account_is_added_first_and_an_old_users_is_modified():
    t = load_cluster_dict(inv(tenants_with(accounts=[
        {"name": "x", "users": ["u", "w"]}, {"name": "y", "users": [{"name": "u", "default": True}, "w"]}]))).tenants
    live = parse_state("", "root||||1||||normal|\nx|||root|1||||normal|\ny|||root|1||||normal|\n"
                           "x|w|||1|gres/gpu=8||||\n", "w|x\n")
    order = [c.key for c in diff(live, desired(t)) if c.kind == "user"]
    assert order.index("u@y") < order.index("u@x")  # u is new: its default account's association comes first
    assert not [c for c in diff(live, desired(t)) if c.kind == "default"]  # w's default x stays x
    t2 = load_cluster_dict(inv(tenants_with(accounts=[
        {"name": "x", "users": ["w"]}, {"name": "y", "users": [{"name": "w", "default": True}]}]))).tenants
    (d,) = [c for c in diff(live, desired(t2)) if c.kind == "default"]
    assert d == Change("modify", "default", "w", (("DefaultAccount", "x", "y"),))


# --- 2a. --prune deletes that active jobs hold back (squeue recorded with the clean state, record.sh) ---------------

def with_jobs(release: str) -> tuple[State, list]:
    return recorded(release, "clean"), parse_jobs((RECORDED[release] / "squeue_jobs.txt").read_text())


def without(raw: dict, team_b: bool = False, bin_user: bool = False, everything: bool = False) -> object:
    t = copy.deepcopy(raw["tenants"])
    kids = t["accounts"][0]["children"]
    if team_b:
        kids[:] = [a for a in kids if a["name"] != "team-b"]
    if bin_user:
        kids[0]["users"] = [u for u in kids[0]["users"] if u != "bin"]
    if everything:
        t["accounts"] = []
    return load_cluster_dict({**raw, "tenants": t}).tenants


@pytest.mark.parametrize("release", sorted(RECORDED))
def test_prune_marks_each_delete_active_jobs_block(release):
    live, jobs = with_jobs(release)
    assert sorted((j.user, j.account) for j in jobs) == [("bin", "team-a"), ("daemon", "team-a"),
                                                         ("nobody", "team-b"), ("nobody", "team-b")]
    raw = yaml.safe_load(INVENTORY.read_text())
    changes = mark_blocked(diff(live, desired(without(raw, team_b=True, bin_user=True)), prune=True), live, jobs)
    ids = {j.user: [x.id for x in jobs if x.user == j.user] for j in jobs}
    lines = [c.describe() for c in changes]
    assert lines == [f"delete user bin@team-a: blocked: 1 running/pending job(s) ({ids['bin'][0]})",
                     f"delete user nobody@team-b: blocked: 2 running/pending job(s) ({', '.join(ids['nobody'])})",
                     f"delete account team-b: blocked: 2 running/pending job(s) ({', '.join(ids['nobody'])})"]
    # nothing blocked reaches sacctmgr: slurmdbd would refuse ("Job(s) active, cancel job(s) before remove")
    assert steps(changes, "lab") == []
    # the jobs gone: the same deletes are plain, and run
    free = mark_blocked(diff(live, desired(without(raw, team_b=True, bin_user=True)), prune=True), live, [])
    assert [c.describe() for c in free] == ["delete user bin@team-a", "delete user nobody@team-b",
                                            "delete account team-b"]
    assert [st.args[:2] for st in steps(free, "lab")] == [("delete", "user"), ("delete", "user"), ("delete", "account")]


@pytest.mark.parametrize("release", sorted(RECORDED))
def test_a_blocked_user_does_not_hold_back_the_others_in_its_call_and_ancestors_are_blocked(release):
    live, jobs = with_jobs(release)
    raw = yaml.safe_load(INVENTORY.read_text())
    daemon_gone = [j for j in jobs if j.user != "daemon"]
    changes = mark_blocked(diff(live, desired(without(raw, everything=True)), prune=True), live, daemon_gone)
    blocked = {c.key for c in changes if c.blocked}
    # research holds team-a and team-b's jobs in its subtree; daemon@team-a has none, so its delete runs alone
    assert blocked == {"bin@team-a", "nobody@team-b", "team-a", "team-b", "research"}
    assert [st.args for st in steps(changes, "lab")] == [
        ("delete", "user", "where", "name=daemon", "account=team-a", "cluster=lab")]


def test_parse_jobs_keeps_only_jobs_not_ended():
    out = "7|Team-A|u|COMPLETING\n8|team-a|u|SUSPENDED\n9|team-a|u|CANCELLED\n10|team-a|u|REQUEUED\n"
    assert [(j.id, j.account) for j in parse_jobs(out)] == [("8", "team-a"), ("10", "team-a")]


def fake_slurm(tmp_path: Path, release: str, after_assoc: str | None = None) -> dict:
    """sacctmgr and squeue stand-ins that serve the recorded clean state and jobs (``after_assoc``: what show assoc
    says once a ``sacctmgr -i`` ran), logging every call; the same commands against slurmdbd: test_tenants_lab.py."""
    d = RECORDED[release]
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls"
    after = tmp_path / "after_assoc.txt"
    after.write_text(after_assoc if after_assoc is not None else (d / "clean_assoc.txt").read_text())
    (bin_ / "sacctmgr").write_text(
        f'#!/bin/sh\necho "sacctmgr $*" >> {log}\n'
        f'case "$*" in -i*) touch {tmp_path}/applied;; '
        f'*"show qos"*) cat {d}/clean_qos.txt;; *"show user"*) cat {d}/clean_user.txt;; '
        f'*"show assoc"*) if [ -e {tmp_path}/applied ]; then cat {after}; else cat {d}/clean_assoc.txt; fi;; esac\n')
    (bin_ / "squeue").write_text(f'#!/bin/sh\necho "squeue $*" >> {log}\ncat {d}/squeue_jobs.txt\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\nAccountingStorageType=accounting_storage/slurmdbd\n")
    return {"SLURM_CONF": str(conf), "PATH": f"{bin_}:/usr/bin:/bin"}


def accounts_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "accounts", *args], capture_output=True, text=True,
                          env=env)


@pytest.mark.parametrize("release", sorted(RECORDED))
def test_cli_plan_prune_reads_jobs_once_and_apply_skips_blocked_deletes(tmp_path, release):
    raw = yaml.safe_load(INVENTORY.read_text())
    raw["cluster"] = "lab"
    t = raw["tenants"]
    t["accounts"][0]["children"] = [a for a in t["accounts"][0]["children"] if a["name"] != "team-b"]
    t["accounts"][0]["children"][0]["users"] = ["bin"]  # daemon@team-a goes too; daemon's job keeps it
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(raw))
    env = fake_slurm(tmp_path, release)
    r = accounts_cli(env, "plan", str(p))
    assert r.returncode == 0 and "squeue" not in (tmp_path / "calls").read_text()  # no delete, no squeue call
    r = accounts_cli(env, "plan", "--prune", str(p))
    assert r.returncode == 0, r.stderr
    assert "delete user daemon@team-a: blocked: 1 running/pending job(s)" in r.stdout
    assert "delete account team-b: blocked: 2 running/pending job(s)" in r.stdout
    assert "cluster lab: no change, 3 delete(s) blocked by active jobs (apply skips them)" in r.stdout
    assert "sacctmgr -i" not in r.stdout
    assert [ln for ln in (tmp_path / "calls").read_text().splitlines() if ln.startswith("squeue")] == [
        "squeue -h --all -o %i|%a|%u|%T"]
    r = accounts_cli(env, "apply", "--prune", str(p))
    assert r.returncode == 1
    assert "held back: delete user nobody@team-b: blocked: 2 running/pending job(s)" in r.stderr
    assert "3 delete(s) held back by active jobs" in r.stderr and "Job(s) active, cancel job(s) before remove" in r.stderr
    assert "sacctmgr -i" not in (tmp_path / "calls").read_text()


@pytest.mark.parametrize("release", sorted(RECORDED))
def test_cli_apply_prune_runs_the_free_deletes_verifies_then_exits_1_for_the_held(tmp_path, release):
    raw = yaml.safe_load(INVENTORY.read_text())
    raw["cluster"] = "lab"
    t = raw["tenants"]
    t["accounts"][0]["children"] = [a for a in t["accounts"][0]["children"] if a["name"] != "team-b"]
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(raw))
    # bin leaves team-a and has no job (left out of squeue's output): that delete runs; nobody's jobs hold team-b
    clean = (RECORDED[release] / "clean_assoc.txt").read_text()
    env = fake_slurm(tmp_path, release)
    t["accounts"][0]["children"][0]["users"] = ["daemon"]
    p.write_text(yaml.safe_dump(raw))
    jobs = (RECORDED[release] / "squeue_jobs.txt").read_text()
    (tmp_path / "bin" / "squeue").write_text(
        "#!/bin/sh\ncat <<'EOF'\n" + "".join(ln + "\n" for ln in jobs.splitlines() if "|bin|" not in ln) + "EOF\n")
    (tmp_path / "after_assoc.txt").write_text("".join(ln + "\n" for ln in clean.splitlines()
                                                      if not ln.startswith("team-a|bin|")))
    r = accounts_cli(env, "apply", "--prune", str(p))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "applied: sacctmgr -i delete user where name=bin account=team-a cluster=lab" in r.stdout
    assert "verified: slurmdbd of cluster lab matches the inventory but for the deletes held back below" in r.stdout
    assert "held back: delete user nobody@team-b: blocked" in r.stderr
    assert "held back: delete account team-b: blocked" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("slurmkit: error: 2 delete(s) held back by active jobs")


# --- 2b. the I/O around it --------------------------------------------------------------------------------------

def test_refuses_without_slurmdbd(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\nAccountingStorageType=accounting_storage/none\n")
    with pytest.raises(UsageError, match="no slurmdbd"):
        target_from_conf(str(conf))
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv()))
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "accounts", "apply", str(p)], capture_output=True,
                       text=True, env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "AccountingStorageType=accounting_storage/none" in r.stderr


def test_refuses_another_clusters_inventory(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=other\nAccountingStorageType=accounting_storage/slurmdbd\n")
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv()))
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "accounts", "drift", str(p)], capture_output=True,
                       text=True, env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and "ClusterName is 'other'" in r.stderr


def test_apply_stops_at_the_first_failure_and_says_what_ran(tmp_path):
    """A stand-in sacctmgr that fails its second call (the real one's failures: tests/integration/test_tenants_lab.py)."""
    log = tmp_path / "calls"
    fake = tmp_path / "sacctmgr"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n[ $(wc -l < {log}) -eq 2 ] && {{ echo 'no way' >&2; exit 1; }}\n"
                    "exit 0\n")
    fake.chmod(0o755)
    empty = parse_state("normal|0||cluster||||||1.000000|\n", "root||||1||||normal|\n", "")
    sts = steps(diff(empty, desired(load_cluster_dict(inv()).tenants)), "c")
    with pytest.raises(ApplyError) as ei:
        apply_steps(Target("c", {}, str(fake)), sts)
    e = ei.value
    assert len(e.done) == 1 and e.failed == sts[1] and e.pending == sts[2:]
    assert "no way" in e.one_line() and f"1 step(s) applied, {len(sts) - 1} not" in e.one_line()
    assert len(log.read_text().splitlines()) == 2


# --- 3. slurm.conf with tenants -----------------------------------------------------------------------------------

def conf_lines(d: dict, version: str = "22.05") -> list[str]:
    return generate(load_cluster_dict(d), version=version)["slurm.conf"].splitlines()


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_slurm_conf_enforces_and_preempts_with_tenants(version):
    d = inv(tenants_with(partitions={"gpu": {"allow_qos": ["normal", "scavenger"]}}))
    lines = conf_lines(d, version)
    for want in ("AccountingStorageEnforce=associations,limits,qos,safe", "PriorityType=priority/multifactor",
                 "PriorityWeightQOS=100000", "PriorityWeightFairshare=10000", "PreemptType=preempt/qos",
                 "PreemptMode=REQUEUE", "PreemptExemptTime=00:05:00"):
        assert want in lines
    (part,) = [ln for ln in lines if ln.startswith("PartitionName=gpu")]
    assert "AllowQos=normal,scavenger" in part.split()
    # no preempt list anywhere: no preemption settings
    no_pre = conf_lines(inv(tenants_with(qos=[{"name": "normal"}], accounts=[])))
    assert not [ln for ln in no_pre if ln.startswith("Preempt")]
    assert "AccountingStorageEnforce=associations,limits,qos,safe" in no_pre


def test_weights_keep_qos_above_fairshare_above_age_above_size():
    from slurmkit.generate.slurmconf import TENANT_WEIGHTS

    w = [int(v) for _k, v in TENANT_WEIGHTS]
    assert all(w[i] >= 10 * sum(w[i + 1:]) * 0.9 for i in range(len(w) - 1))


def test_validate_cross_checks_tenants_against_slurm_conf():
    c = load_cluster_dict(inv())
    good = generate(c)["slurm.conf"]
    assert cross_check(c, good) == ([], [])
    bad = (good.replace("AccountingStorageEnforce=associations,limits,qos,safe", "AccountingStorageEnforce=associations")
           .replace("PreemptType=preempt/qos", "PreemptType=preempt/none")
           + "PartitionName=extra Nodes=n1 AllowQos=gold\n")
    errors, _w = cross_check(c, bad)
    assert any("lacks 'limits'" in e for e in errors) and any("lacks 'qos'" in e for e in errors)
    assert any("PreemptType=preempt/none" in e for e in errors)
    assert any("partition extra AllowQos=gold: QOS 'gold' is not in tenants.qos" in e for e in errors)
    # preemption configured but no QOS preempts another: said, as a warning
    c2 = load_cluster_dict(inv(tenants_with(qos=[{"name": "normal"}], accounts=[])))
    _e, warns = cross_check(c2, generate(c2)["slurm.conf"] + "PreemptType=preempt/qos\n")
    assert any("no QOS in tenants.qos preempts another" in w for w in warns)


def test_validate_names_a_qos_no_partition_allows():
    # scavenger: team-b's second QOS, allowed nowhere -> a warning naming it
    c = load_cluster_dict(inv(tenants_with(partitions={"gpu": {"allow_qos": ["normal", "high"]}})))
    errors, warns = cross_check(c, generate(c)["slurm.conf"])
    assert errors == []
    assert warns == ["slurm.conf: QOS 'scavenger' is allowed in no partition (AllowQos/DenyQos): no job can run in it "
                     "(add it to a partition's allow_qos, or remove it)"]
    # the same QOS as team-b's default: its jobs without --qos never run -> an error naming the account
    t = tenants_with(partitions={"gpu": {"allow_qos": ["normal", "high"]}})
    t["accounts"][0]["children"][1]["default_qos"] = "scavenger"
    c = load_cluster_dict(inv(t))
    errors, _w = cross_check(c, generate(c)["slurm.conf"])
    assert errors == ["slurm.conf: QOS 'scavenger' is the default QOS of account(s) team-b but no partition allows "
                      "it (AllowQos/DenyQos): their jobs without --qos would never run"]
    # an edited slurm.conf: DenyQos counts where AllowQos is absent (partition_mgr.c part_policy_valid_qos)
    c = load_cluster_dict(inv())
    conf = generate(c)["slurm.conf"].replace("State=UP", "DenyQos=high State=UP")
    assert "DenyQos=high" in conf
    _e, warns = cross_check(c, conf)
    assert any("QOS 'high' is allowed in no partition" in w for w in warns)
    # a partition's own QOS= is limits, not a QOS jobs ask for: not flagged
    d = inv(tenants_with(partitions={"gpu": {"allow_qos": ["normal", "high"]}}))
    d["partitions"][0]["qos"] = "scavenger"
    c = load_cluster_dict(d)
    assert cross_check(c, generate(c)["slurm.conf"]) == ([], [])


def test_validate_names_a_qos_no_account_grants():
    t = tenants_with(qos=[*ISSUE["qos"], {"name": "gold", "priority": 5000}])
    c = load_cluster_dict(inv(t))
    _e, warns = cross_check(c, generate(c)["slurm.conf"])
    assert warns == ["tenants.qos: QOS 'gold' is in no account's qos list: no association may use it "
                     "(AccountingStorageEnforce=qos), so no job can run in it"]
    # an account with users but no QOS list keeps what slurmdbd gives it: no judgement
    t["accounts"][0]["children"].append({"name": "team-c", "users": ["dave"]})
    c = load_cluster_dict(inv(t))
    assert cross_check(c, generate(c)["slurm.conf"])[1] == []


def test_preemption_with_tenants_is_explicit():
    no_lists = tenants_with(qos=[{"name": "normal"}], accounts=[])
    # policy.preemption: qos with no preempt list: written as asked, and validate says nothing will be preempted
    c = load_cluster_dict(inv(no_lists, policy={"preemption": "qos"}))
    conf = generate(c)["slurm.conf"]
    assert "PreemptType=preempt/qos" in conf.splitlines() and "PreemptMode=REQUEUE" in conf.splitlines()
    assert cross_check(c, conf) == ([], ["slurm.conf: PreemptType=preempt/qos (from policy.preemption: qos) but no "
                                         "QOS in tenants.qos preempts another: nothing will ever be preempted (set "
                                         "'preempt: [...]' on a QOS, or drop preemption)"])
    # set through slurm_conf: the warning names that key
    c = load_cluster_dict(inv(no_lists, slurm_conf={"PreemptType": "preempt/qos", "PreemptMode": "REQUEUE"}))
    _e, warns = cross_check(c, generate(c)["slurm.conf"])
    assert any("(from slurm_conf.PreemptType)" in w for w in warns)
    # policy.preemption: partition is not dropped because tenants exist
    c = load_cluster_dict(inv(no_lists, policy={"preemption": "partition"}))
    assert "PreemptType=preempt/partition_prio" in generate(c)["slurm.conf"].splitlines()
    # preempt lists without policy: preempt/qos; an explicit 'none' beside them is a contradiction
    assert "PreemptType=preempt/qos" in conf_lines(inv())
    refused(inv(policy={"preemption": "none"}), "policy.preemption", "tenants.qos[0] (high) has a preempt list")


def test_conf_validate_preempt_list_with_preempt_none_is_an_error(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv(slurm_conf={"PreemptType": "preempt/none"})))
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "validate", str(p), "--no-real-parse"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert ("error: slurm.conf: PreemptType=preempt/none: the preempt lists in tenants.qos need preempt/qos"
            in r.stderr), r.stderr


def test_conf_validate_dir_reads_the_inventory_copy(tmp_path):
    d = inv()
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(d))
    out = tmp_path / "etc"
    cli = [sys.executable, "-m", "slurmkit.cli.main", "conf"]
    subprocess.run([*cli, "generate", str(p), "-o", str(out), "--no-real-parse"], check=True, capture_output=True)
    conf = out / "slurm.conf"
    conf.write_text(conf.read_text().replace("AllowQos", "X").replace("State=UP", "AllowQos=gold State=UP"))
    r = subprocess.run([*cli, "validate", str(out), "--no-real-parse"], capture_output=True, text=True)
    assert r.returncode == 2 and "QOS 'gold' is not in tenants.qos" in r.stderr


# --- 6. gpusub's tenant preflight on recorded assoc_mgr output -------------------------------------------------------

@pytest.mark.parametrize("release", sorted(RECORDED))
def test_preflight_names_the_limit_that_will_hold_the_job(release):
    """Recorded: team-a allows 4 GPUs, daemon's job holds 3; root is in root (default) and team-a."""
    from slurmkit.accounts.quota import check, parse_assoc_mgr, parse_user_qos

    d = RECORDED[release]
    assocs, qos = parse_assoc_mgr((d / "assoc_mgr.txt").read_text())
    user_qos = parse_user_qos((d / "user_assoc_root.txt").read_text())
    team_a = next(a for a in assocs if a.account == "team-a" and not a.user)
    assert (team_a.gpu_limit, team_a.gpu_used, team_a.parent) == (4, 3, "research")
    assert qos["normal"].gpu_limit is None and qos["normal"].gpu_used == 3

    fits = check("root", "lab", "team-a", None, 1, assocs, qos, user_qos)
    assert fits.account == "team-a" and fits.qos == "normal" and not fits.errors and not fits.warnings
    assert fits.explain[:2] == ["account: team-a (--account)",
                                "qos: normal (the default QOS of your association with team-a; allowed: high, normal)"]
    assert "limit: account team-a allows 4 GPUs (GrpTRES gres/gpu=4); running jobs hold 3" in fits.explain

    waits = check("root", "lab", "team-a", "high", 2, assocs, qos, user_qos)
    assert waits.warnings == ["account team-a allows 4 GPUs; running jobs hold 3; this job asks 2: it will pend with "
                              "AssocGrpGRES until 1 are free"]
    never = check("root", "lab", "team-a", None, 8, assocs, qos, user_qos)
    assert never.errors == ["account team-a allows 4 GPUs; this job asks 8: it would never start (pending with "
                            "AssocGrpGRES forever)"]
    default = check("root", "lab", None, None, 8, assocs, qos, user_qos)
    assert default.account == "root" and not default.errors  # root's default account has no GPU quota
    assert check("root", "lab", "team-b", None, 1, assocs, qos, user_qos).errors[0].startswith(
        "--account team-b: user root has no association with it")
    assert "not allowed" in check("root", "lab", "team-a", "scavenger", 1, assocs, qos, user_qos).errors[0]
    assert "no association on cluster lab" in check("mallory", "lab", None, None, 1, assocs, qos, user_qos).errors[0]


def test_preflight_qos_quota_reason():
    from slurmkit.accounts.quota import Assoc, QosUse, check

    assocs = [Assoc("t", "", "root", False, None, 0), Assoc("t", "u", "", True, None, 0)]
    r = check("u", "c", None, "high", 4, assocs, {"high": QosUse("high", 6, 4)}, {"t": (("high",), "high")})
    assert r.warnings == ["QOS high allows 6 GPUs; running jobs hold 4; this job asks 4: it will pend with QOSGrpGRES "
                          "until 2 are free"]


@pytest.mark.parametrize("release", sorted(RECORDED))
def test_preflight_predicts_qos_max_gres_per_user(release):
    """A QOS MaxTRESPerUser gres/gpu counts the user's jobs in that QOS, across accounts (QOSMaxGRESPerUser). The
    recorded User Limits entry of QOS normal (22.05 "1={...}", 24.11 "daemon(1)={...}") says uid 1 holds 3 GPUs; as
    uid 1 with MaxTRESPerUser=gres/gpu=4 on normal, 2 more wait, 5 never start; another uid holds none there.
    slurmctld's own verdict: tests/integration/test_tenants_lab.py::test_gpusub_says_which_quota_will_hold_the_job_and_slurm_agrees."""
    from slurmkit.accounts.quota import check, parse_assoc_mgr, parse_qos_per_user, parse_user_qos

    d = RECORDED[release]
    text = (d / "assoc_mgr.txt").read_text()
    # the recording's QOS normal had no per-user limit ("gres/gpu=N(3)"); with MaxTRESPerUser=gres/gpu=4 slurmctld
    # prints the limit in the same entry (info_assoc_mgr.c _print_used_user_limit: max_tres_pu_ctld(used))
    import re

    text, n = re.subn(r"^(QOS=normal\b.*MaxTRESPU=\S*?gres/gpu=)N\(3\)", r"\g<1>4(3)", text, flags=re.M)
    assert n == 1
    assocs, qos = parse_assoc_mgr(text)
    user_qos = parse_user_qos((d / "user_assoc_root.txt").read_text())
    assert qos["normal"].used_by(1) == 3 and qos["normal"].used_by(0) == 0 and qos["scavenger"].user_gpus == ()
    assert qos["normal"].limit_for(1) == (True, 4) and qos["normal"].limit_for(0) == (False, None)
    per_user = parse_qos_per_user("high|\nnormal|cpu=8,gres/gpu=4\nscavenger|gres/gpu:h100=2\n")
    assert per_user == {"normal": 4}
    free = [a for a in assocs if a.account != "team-a"]  # no association quota in the way: only the QOS's
    r = check("root", "lab", "root", "normal", 2, free, qos, {"root": (("normal",), "normal")}, uid=1,
              qos_per_user=per_user)
    assert r.warnings == ["QOS normal per user allows 4 GPUs; your running jobs in it hold 3; this job asks 2: it will "
                          "pend with QOSMaxGRESPerUser until 1 are free"], (r.warnings, r.errors)
    assert "limit: QOS normal per user allows 4 GPUs (MaxTRESPerUser gres/gpu=4); your running jobs in it hold 3" \
        in r.explain
    never = check("root", "lab", "root", "normal", 5, free, qos, {"root": (("normal",), "normal")}, uid=1,
                  qos_per_user=per_user)
    assert never.errors == ["QOS normal per user allows 4 GPUs; this job asks 5: it would never start (pending with "
                            "QOSMaxGRESPerUser forever)"]
    other = check("root", "lab", "root", "normal", 4, free, qos, {"root": (("normal",), "normal")}, uid=0,
                  qos_per_user=per_user)
    assert not other.warnings and not other.errors
    # slurmctld's limit beside the user's use wins over sacctmgr's answer, which gpusub may have cached a minute ago
    stale = check("root", "lab", "root", "normal", 2, free, qos, {"root": (("normal",), "normal")}, uid=1,
                  qos_per_user={"normal": 8})
    assert stale.warnings == r.warnings
    # without the per-user limits (the old call) nothing is said about it
    assert not check("root", "lab", "team-a", None, 1, assocs, parse_assoc_mgr((d / "assoc_mgr.txt").read_text())[1],
                     user_qos).warnings


@pytest.mark.parametrize("fails", [True, False])
def test_drift_exit_code_tells_drift_from_a_sacctmgr_failure(tmp_path, fails):
    """Exit 1 means drift found; a sacctmgr that fails (slurmdbd down) is exit 3 and one line, never read as drift.
    The stand-in sacctmgr answers an empty slurmdbd (so the inventory's records are all missing: drift) or fails;
    the real sacctmgr's drift: tests/integration/test_tenants_lab.py::test_drift_lists_manual_sacctmgr_edits."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\nAccountingStorageType=accounting_storage/slurmdbd\n")
    fake = tmp_path / "bin" / "sacctmgr"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'sacctmgr: error: Problem talking to the database: Connection refused' >&2\n"
                    "exit 1\n" if fails else "#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv()))
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "accounts", "drift", str(p)], capture_output=True,
                       text=True, env={"SLURM_CONF": str(conf), "PATH": f"{fake.parent}:/usr/bin:/bin"})
    if fails:
        assert r.returncode == 3, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1 and "drift unknown" in r.stderr and "Connection refused" in r.stderr
        assert r.stdout == ""
    else:
        assert r.returncode == 1, r.stdout + r.stderr
        assert "missing account team-a" in r.stdout and "difference(s)" in r.stdout


# --- 7. typed GPU quotas and untyped requests -----------------------------------------------------------------------

def two_types(tenants: dict, policy: bool = False) -> dict:
    """BASE plus a group of 4 L40S nodes (2 GPUs each) in their own partition: h100 and l40s."""
    d = inv(tenants)
    d["node_groups"].append({"name": "l", "hosts": "l[1-4]", "cpu": {"sockets": 2, "cores_per_socket": 8},
                             "memory_mb": 64000, "gpus": {"type": "l40s", "count": 2, "files": "/dev/nvidia[0-1]"}})
    d["partitions"] += [{"name": "l40s", "groups": ["l"]}, {"name": "any", "groups": ["a", "l"]}]
    if policy:
        d["submit_policy"] = {"require_time_for_gpus": False}
    return d


def test_a_typed_quota_covering_every_type_also_renders_the_total():
    """`gpus: {h100: 2}` on an all-H100 cluster was GrpTRES=gres/gpu:h100=2 alone, which `--gres=gpu:3` escapes
    (Slurm charges it to gres/gpu only): now gres/gpu=2 holds it. A given total above the typed sum is lowered to it."""
    t = load_cluster_dict(inv(tenants_with(accounts=[{"name": "t", "gpus": {"h100": 2}, "users": ["u"]}],
                                           user_limits={"gpus": {"total": 6, "h100": 4}}))).tenants
    assert t.account("t").gpus.tres() == {"gres/gpu": "2", "gres/gpu:h100": "2"}
    assert t.user_limits.gpus.tres() == {"gres/gpu": "4", "gres/gpu:h100": "4"}
    assert desired(t).accounts["t"]["GrpTRES"] == "gres/gpu=2,gres/gpu:h100=2"
    assert not t.account("t").gpus.untyped_escapes


@pytest.mark.parametrize("gpus", [{"h100": 2}, {"h100": 2, "l40s": 4}, {"total": 5, "h100": 2, "l40s": 4}])
def test_a_typed_quota_an_untyped_request_escapes_needs_the_submit_plugin(gpus):
    """Two GPU types: a total (when every type has a count) cannot hold one type to its count, so an untyped
    request could take more H100s than the quota says. Refused (exit 2, the key, how to fix) without submit_policy;
    with it the generated job_submit.lua adds the type (test_jobsubmit.py::test_typed_quotas_add_the_gpu_type)."""
    d = two_types(tenants_with(accounts=[{"name": "t", "gpus": gpus, "users": ["u"]}], user_limits={}))
    msg = refused(d, "tenants.accounts[0].gpus.h100", "not enforced on an untyped request")
    assert "submit_policy" in msg
    t = load_cluster_dict(two_types(d["tenants"], policy=True)).tenants
    q = t.account("t").gpus
    assert q.untyped_escapes and t.typed_quotas
    assert q.total == (min(gpus.get("total", 6), 6) if "l40s" in gpus else None)


def test_typed_quota_refusal_is_one_line_exit_2_from_the_cli(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(two_types(tenants_with(accounts=[{"name": "t", "gpus": {"h100": 2}, "users": ["u"]}],
                                                       user_limits={}))))
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "validate", str(p)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "tenants.accounts[0].gpus.h100" in r.stderr, r.stderr


def test_validate_warns_user_limits_are_per_association_naming_users_in_two_accounts(tmp_path):
    """user_limits.gpus is GrpTRES on each (user, account) association and slurmctld counts each association's jobs
    apart, so bob in team-a and team-b may hold it twice: `conf validate` says so and names him (exit 0: Slurm has
    no per-user limit across accounts except a QOS's MaxTRESPerUser, which the warning points to)."""
    t = tenants_with()
    t["accounts"][0]["children"][1]["users"] = ["carol", "bob"]
    c = load_cluster_dict(inv(t))
    _e, warns = cross_check(c, generate(c)["slurm.conf"])
    assert warns == ["tenants.user_limits apply per user association: bob (team-a, team-b) can hold them once in each "
                     "account (a per-user GPU cap across accounts is a QOS's gpus_per_user)"]
    assert cross_check(load_cluster_dict(inv()), generate(load_cluster_dict(inv()))["slurm.conf"]) == ([], [])
    no_limits = copy.deepcopy(t)
    del no_limits["user_limits"]
    c2 = load_cluster_dict(inv(no_limits))
    assert cross_check(c2, generate(c2)["slurm.conf"]) == ([], [])
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(inv(t)))
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "validate", str(p)], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "warning: tenants.user_limits apply per user association: bob" in r.stderr, r.stderr


# --- issue 24.1: a QOS grace_time, and the preempted job's own signal at preemption ----------------------------------

def _scavenger(**kw: object) -> dict:
    q = copy.deepcopy(ISSUE["qos"])
    q[2].update(kw)
    return tenants_with(qos=q)


def test_qos_grace_time_is_seconds_and_reaches_sacctmgr_and_reads_back():
    from slurmkit.accounts.plan import desired, diff, parse_state, steps

    t = load_cluster_dict(inv(_scavenger(grace_time=90))).tenants
    assert next(q for q in t.qos if q.name == "scavenger").grace_time == 90
    want = desired(t)
    assert want.qos["scavenger"]["GraceTime"] == "90" and want.qos["high"]["GraceTime"] == ""
    # sacctmgr prints it as a time; a QOS without one prints 00:00:00
    live = parse_state("high|1000|scavenger|cluster||||||1.000000||00:00:00\n"
                       "normal|100||cluster||||||1.000000||00:00:00\n"
                       "scavenger|0||requeue||||||0.100000||00:00:00\n", "", "")
    changes = [c for c in diff(live, want) if c.kind == "qos"]
    assert [c.describe() for c in changes] == ["modify QOS scavenger: GraceTime (none) -> 90s"]
    (step,) = steps(changes, "c")
    assert "GraceTime=90" in step.args  # whole seconds: sacctmgr's get_uint
    live.qos["scavenger"] = parse_state("scavenger|0||requeue||||||0.100000||00:01:30\n", "", "").qos["scavenger"]
    assert not [c for c in diff(live, want) if c.kind == "qos"]
    for bad in (-1, "90s", 1.5, True, 4294967294):
        refused(inv(_scavenger(grace_time=bad)), "tenants.qos[2].grace_time", "whole seconds")
    refused(inv(_scavenger(grace_time=2**31)), "tenants.qos[2].grace_time", "between 0 and 2147483647")
    assert load_cluster_dict(inv(_scavenger(grace_time=2**31 - 1))).tenants is not None


@pytest.mark.parametrize("version,line", [("22.05", "SlurmctldParameters=preempt_send_user_signal"),
                                          ("23.02", "PreemptParameters=send_user_signal"),
                                          ("24.11", "PreemptParameters=send_user_signal")])
def test_preemption_sends_the_jobs_own_signal_spelled_per_release(version, line):
    assert line in conf_lines(inv(), version)
    no_pre = conf_lines(inv(tenants_with(qos=[{"name": "normal"}], accounts=[])), version)
    assert not [ln for ln in no_pre if "send_user_signal" in ln]
    # a site's own SlurmctldParameters items are merged with it, not replaced
    mixed = conf_lines(inv(slurm_conf={"SlurmctldParameters": "enable_configless"}), "22.05")
    assert "SlurmctldParameters=preempt_send_user_signal,enable_configless" in mixed


def test_typed_quotas_on_mig_groups_count_mig_profiles():
    """Issue 24 item 6: a MIG device is a gres/gpu of its profile's Type (gres.conf Type=h100_3g.40gb), a partitioned
    GPU is no gres/gpu:h100: a typed quota names the profile, and the cluster's GPU count is its MIG devices."""
    d = inv(tenants_with(accounts=[{"name": "t", "gpus": {"h100_1g.10gb": 10, "h100_3g.40gb": 2, "total": 12},
                                    "users": ["u"]}], user_limits={}))
    d["node_groups"][0]["gpus"]["mig"] = ["3g.40gb@1", "1g.10gb@9", "1g.10gb@10", "1g.10gb@11", "1g.10gb@12"]
    d["submit_policy"] = {"require_time_for_gpus": True}
    t = load_cluster_dict(d).tenants
    assert t.account("t").gpus.tres() == {"gres/gpu": "12", "gres/gpu:h100_1g.10gb": "10",
                                          "gres/gpu:h100_3g.40gb": "2"}
    conf = generate(load_cluster_dict(d), version="24.11")["gres.conf"]
    assert "Type=h100_1g.10gb" in conf and "Type=h100_3g.40gb" in conf  # the names the quota uses
    # 3 nodes x 8 GPUs x 5 devices: 120 GPUs to Slurm, of which 24 are 3g.40gb
    d["tenants"]["accounts"][0]["gpus"] = 100
    assert load_cluster_dict(d).tenants.account("t").gpus.total == 100
    d["tenants"]["accounts"][0]["gpus"] = {"h100_3g.40gb": 25}
    refused(d, "tenants.accounts[0].gpus.h100_3g.40gb", "25 h100_3g.40gb GPUs is more than the cluster's 24")
    d["tenants"]["accounts"][0]["gpus"] = {"h100": 1}
    refused(d, "tenants.accounts[0].gpus.h100", "its MIG devices count as their profiles' types, e.g. h100_1g.10gb")


def test_qos_preemption_without_tenants_warns(tmp_path):
    """Issue 20 item 8: policy.preemption: qos without tenants writes preempt/qos that slurmkit gives no QOS to act
    on; conf validate and generate say so (before: tenantcheck returned at once without tenants, silently)."""
    d = inv()
    d.pop("tenants")
    d["policy"] = {"preemption": "qos"}
    c = load_cluster_dict(d)
    conf = generate(c)["slurm.conf"]
    assert "PreemptType=preempt/qos" in conf.splitlines()
    _e, warns = cross_check(c, conf)
    assert len(warns) == 1 and "PreemptType=preempt/qos (from policy.preemption: qos) without tenants" in warns[0]
    d["policy"] = {"preemption": "partition"}
    c = load_cluster_dict(d)
    assert cross_check(c, generate(c)["slurm.conf"]) == ([], [])
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump({**d, "policy": {"preemption": "qos"}}))
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "validate", str(p), "--no-real-parse"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "warning: slurm.conf: PreemptType=preempt/qos" in r.stderr, r.stderr
