"""Issue 13: tenants on a real Slurm with accounting (MariaDB + slurmdbd), judged by slurmctld and slurmdbd.

One lab for the module: 2 nodes x 4 GPUs, `lab up --accounting`, whose inventory carries the lab's tenants
(slurmkit/lab/inventory.py lab_tenants: team-a = Unix users daemon and bin, team-b = games, 4 GPUs each; QOS high
preempts scavenger) and which `lab up` applied with `slurmkit accounts apply`. Jobs run as those users
(`runuser -u USER -- sbatch`). node1 serves the quota and preemption tests; node2 runs team-a's usage job from the
start of the module, so that by the last test slurmctld has charged team-a's fair-share (PriorityCalcPeriod=1 in
the lab) without a test waiting for it on its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from slurmkit.lab import Lab

pytestmark = [pytest.mark.lab, pytest.mark.releases]  # tests/run.sh: run on every release

RUN = ["--chdir=/tmp", "-o", "/dev/null", "-e", "/dev/null"]
WHOLE_CPU = ["-n8", "--mem=1000"]  # every CPU of a lab node (2 sockets x 4 cores), none of its GPUs


@pytest.fixture(scope="module")
def tlab(make_lab):
    lab = make_lab(nodes=2, gpus_per_node=4, nodes_per_leaf=2, accounting=True)
    conf = (Path(lab.dir) / "etc" / "slurm.conf").read_text()
    assert "AccountingStorageEnforce=associations,limits,qos,safe" in conf and "PreemptType=preempt/qos" in conf
    # team-a's usage for the fair-share test: node2's 8 CPUs, no GPU (--exclusive would take node2's GPUs too, and
    # with them team-a's GPU quota)
    job = as_user(lab, "daemon", ["sbatch", "--parsable", "-w", "node2", *WHOLE_CPU, *RUN, "--wrap", "sleep 900"])
    lab.usage_job = job.stdout.strip()  # type: ignore[attr-defined]
    yield lab
    sh(lab, ["scancel", "-u", "daemon"], check=False)


def sh(lab: Lab, argv: list[str], check: bool = True, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env={**os.environ, **lab.env, **(extra_env or {})}, capture_output=True, text=True,
                          timeout=60, check=check, cwd="/tmp")


def as_user(lab: Lab, user: str, argv: list[str]) -> subprocess.CompletedProcess:
    return sh(lab, ["runuser", "-u", user, "--", *argv])


def accounts(lab: Lab, *args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    return sh(lab, [sys.executable, "-m", "slurmkit.cli.main", "accounts", *args], check=False, extra_env=extra_env)


def inventory(lab: Lab) -> Path:
    return Path(lab.dir) / "etc" / "slurmkit.yaml"


def job(lab: Lab, jid: str) -> dict[str, str]:
    r = sh(lab, ["scontrol", "-o", "show", "job", jid])
    return dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)


def sacct_state(lab: Lab, jid: str) -> str:
    """The job's state in slurmdbd's job table ('' until slurmctld has sent it there)."""
    r = sh(lab, ["sacct", "-n", "-X", "-P", "-j", jid, "-o", "State"], check=False)
    return (r.stdout.split() or [""])[0]


def wait_for(pred, timeout: float, what: str, show=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} {show()}")


def submit(lab: Lab, user: str, *args: str, script: str = "sleep 600") -> str:
    return as_user(lab, user, ["sbatch", "--parsable", *RUN, *args, "--wrap", script]).stdout.strip()


def test_lab_applied_tenants_second_apply_changes_nothing(tlab):
    r = accounts(tlab, "apply", str(inventory(tlab)))
    assert r.returncode == 0, r.stderr
    assert "cluster lab: no change" in r.stdout and "applied:" not in r.stdout
    d = accounts(tlab, "drift", str(inventory(tlab)))
    assert d.returncode == 0 and "no drift" in d.stdout, d.stdout + d.stderr


def test_apply_half_way_failure_reports_then_rerun_converges(tlab, tmp_path):
    full = yaml.safe_load(inventory(tlab).read_text())
    small = yaml.safe_load(inventory(tlab).read_text())
    small["tenants"]["accounts"][0]["children"] = [a for a in small["tenants"]["accounts"][0]["children"]
                                                   if a["name"] != "team-b"]
    small_p = tmp_path / "small.yaml"
    small_p.write_text(yaml.safe_dump(small))
    # without --prune nothing is deleted: team-b and games are only reported; research, which gives no fairshare,
    # holds its one child's 60 now
    r = accounts(tlab, "apply", str(small_p))
    assert r.returncode == 0, r.stderr
    assert "extra account team-b" in r.stdout and "extra user games@team-b" in r.stdout
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("applied:")] == [
        "applied: sacctmgr -i modify account where name=research cluster=lab set Fairshare=60"], r.stdout
    # --prune under an active job of team-b: slurmdbd itself refuses the delete (what the plan foresees) ...
    busy = submit(tlab, "games", "-w", "node1", "-n1")
    wait_for(lambda: sacct_state(tlab, busy) in ("PENDING", "RUNNING"), 60, "slurmdbd to record team-b's job")
    r = sh(tlab, ["sacctmgr", "-i", "delete", "user", "where", "name=games", "account=team-b", "cluster=lab"],
           check=False)
    assert r.returncode == 1 and "Job(s) active, cancel job(s) before remove" in r.stderr, r.stdout + r.stderr
    assert f"JobID = {busy} " in r.stderr
    blocked = f"blocked: 1 running/pending job(s) ({busy})"
    r = accounts(tlab, "plan", "--prune", str(small_p))
    assert r.returncode == 0, r.stderr
    assert f"delete user games@team-b: {blocked}" in r.stdout and f"delete account team-b: {blocked}" in r.stdout
    assert "sacctmgr -i delete" not in r.stdout
    # ... so apply holds both back (exit 1, nothing deleted), and deletes them once the job has ended
    r = accounts(tlab, "apply", "--prune", str(small_p))
    assert r.returncode == 1 and f"held back: delete account team-b: {blocked}" in r.stderr, r.stdout + r.stderr
    assert "games" in sh(tlab, ["sacctmgr", "-P", "-n", "show", "assoc", "where", "cluster=lab",
                                 "account=team-b", "format=User"]).stdout.split()
    sh(tlab, ["scancel", busy])
    wait_for(lambda: sacct_state(tlab, busy).startswith("CANCELLED"), 60, "slurmdbd to record the cancel")
    r = accounts(tlab, "apply", "--prune", str(small_p))
    assert r.returncode == 0, r.stderr
    assert "delete user games@team-b" in r.stdout and "delete account team-b" in r.stdout
    # the cluster's associations go (the account record stays for other clusters sharing this slurmdbd)
    assocs = sh(tlab, ["sacctmgr", "-P", "-n", "show", "assoc", "where", "cluster=lab", "format=Account"]).stdout
    assert "team-b" not in assocs.split() and "team-a" in assocs.split()
    # the full inventory again, through a sacctmgr that refuses to add users: the account lands, the user does not
    wrap = tmp_path / "bin"
    wrap.mkdir()
    (wrap / "sacctmgr").write_text(
        "#!/bin/bash\n"
        'for a in "$@"; do [ "$a" = user ] && [ "$2" = add ] && { echo "sacctmgr: error: injected failure" >&2; exit 1; }; done\n'
        f'exec {tlab.exe("sacctmgr")} "$@"\n')
    (wrap / "sacctmgr").chmod(0o755)
    full_p = tmp_path / "full.yaml"
    full_p.write_text(yaml.safe_dump(full))
    r = accounts(tlab, "apply", str(full_p), extra_env={"PATH": f"{wrap}:{tlab.env.get('PATH', os.environ['PATH'])}"})
    assert r.returncode == 1
    assert "applied: sacctmgr -i add account team-b" in r.stdout
    assert "failed:  sacctmgr -i add user games Account=team-b" in r.stderr
    # research gets its two children's 100 back first (modify before add), then team-b lands, its user does not
    assert "applied: sacctmgr -i modify account where name=research cluster=lab set Fairshare=100" in r.stdout
    assert "injected failure" in r.stderr and "2 step(s) applied, 1 not" in r.stderr
    # a re-run converges: only what did not land is left
    r = accounts(tlab, "plan", str(full_p))
    assert "add user games@team-b" in r.stdout and "add account" not in r.stdout, r.stdout
    r = accounts(tlab, "apply", str(full_p))
    assert r.returncode == 0 and "verified:" in r.stdout, r.stdout + r.stderr
    r = accounts(tlab, "apply", str(full_p))
    assert r.returncode == 0 and "no change" in r.stdout


def test_gpusub_says_which_quota_will_hold_the_job_and_slurm_agrees(tlab, tmp_path):
    """Section 6: root joins team-a by hand (the drift test below prunes it again); daemon's job holds 3 of team-a's
    4 GPUs; gpusub --account team-a asking 2 says it will pend with AssocGrpGRES, and slurmctld then says the same."""
    sh(tlab, ["sacctmgr", "-i", "add", "user", "root", "account=team-a", "cluster=lab"])
    holder = submit(tlab, "daemon", "-w", "node1", "-n1", "--gres=gpu:3")
    wait_for(lambda: job(tlab, holder)["JobState"] == "RUNNING", 60, "the 3-GPU job to run")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    gpusub = [sys.executable, "-m", "slurmkit.cli.gpusub", str(script), "--nodes", "1", "--gpus-per-node", "2",
              "--launcher", "srun", "--run-dir", str(tmp_path / "run")]
    r = sh(tlab, [*gpusub, "--account", "team-a", "--explain"], check=False)
    assert r.returncode == 0, r.stderr
    assert ("warning: account team-a allows 4 GPUs; running jobs hold 3; this job asks 2: it will pend with "
            "AssocGrpGRES until 1 are free") in r.stderr
    assert "account: team-a (--account)" in r.stdout and "qos: normal (the default QOS of your association" in r.stdout
    jid = next(ln.split()[-1] for ln in r.stdout.splitlines() if ln.startswith("submitted job"))
    wait_for(lambda: job(tlab, jid)["Reason"] == "AssocGrpGRES", 60, "slurmctld's reason", lambda: job(tlab, jid))
    # asking more than the quota itself: refused before queueing (exit 2), nothing submitted
    r = sh(tlab, [*gpusub[:-2], "--run-dir", str(tmp_path / "run2"), "--gpus-per-node", "4", "--nodes", "2",
                  "--account", "team-a"], check=False)
    assert r.returncode == 2 and "would never start" in r.stderr, r.stderr
    sh(tlab, ["scancel", holder, jid])
    for j in (holder, jid):
        wait_for(lambda j=j: job(tlab, j)["JobState"] == "CANCELLED", 60, "the cancel")
    # QOS high gets MaxTRESPerUser=gres/gpu=2 by hand (reset below): root's own 1-GPU job in high holds 1 of it, so
    # gpusub --qos high asking 2 says QOSMaxGRESPerUser (team-a's quota has room: 1 + 2 of 4), and slurmctld agrees
    sh(tlab, ["sacctmgr", "-i", "modify", "qos", "where", "name=high", "set", "MaxTRESPerUser=gres/gpu=2"])
    mine = ""
    try:
        mine = sh(tlab, ["sbatch", "--parsable", *RUN, "-A", "team-a", "--qos=high", "-n1", "--gres=gpu:1", "--wrap",
                         "sleep 600"]).stdout.strip()
        wait_for(lambda: job(tlab, mine)["JobState"] == "RUNNING", 60, "root's 1-GPU job in QOS high to run")
        r = sh(tlab, [*gpusub[:-2], "--run-dir", str(tmp_path / "run3"), "--account", "team-a", "--qos", "high",
                      "--explain"], check=False)
        assert r.returncode == 0, r.stderr
        assert ("warning: QOS high per user allows 2 GPUs; your running jobs in it hold 1; this job asks 2: it will "
                "pend with QOSMaxGRESPerUser until 1 are free") in r.stderr, r.stderr
        jid = next(ln.split()[-1] for ln in r.stdout.splitlines() if ln.startswith("submitted job"))
        wait_for(lambda: job(tlab, jid)["Reason"] == "QOSMaxGRESPerUser", 60, "slurmctld's reason",
                 lambda: job(tlab, jid))
    finally:
        sh(tlab, ["scancel", "-u", "root"], check=False)
        sh(tlab, ["sacctmgr", "-i", "modify", "qos", "where", "name=high", "set", "MaxTRESPerUser=gres/gpu=-1"])


def test_drift_lists_manual_sacctmgr_edits(tlab):
    sh(tlab, ["sacctmgr", "-i", "modify", "qos", "where", "name=high", "set", "GrpTRES=gres/gpu=3"])
    sh(tlab, ["sacctmgr", "-i", "add", "user", "eve", "account=team-a", "cluster=lab"])
    d = accounts(tlab, "drift", str(inventory(tlab)))
    assert d.returncode == 1
    assert "changed QOS high: GrpTRES is gres/gpu=3, inventory says (none)" in d.stdout
    assert "extra user eve@team-a" in d.stdout
    r = accounts(tlab, "apply", "--prune", str(inventory(tlab)))
    assert r.returncode == 0 and "verified:" in r.stdout, r.stdout + r.stderr
    assert accounts(tlab, "drift", str(inventory(tlab))).returncode == 0


def test_a_typed_quota_holds_an_untyped_request(tlab, tmp_path):
    """team-b's quota as `gpus: {h100: 2}`: slurmkit renders gres/gpu=2 beside gres/gpu:h100=2 (the lab has only
    H100s), so `--gres=gpu:3`, which Slurm charges to gres/gpu alone, pends with AssocGrpGRES; with the typed limit
    alone (before) it ran. The lab's own quota is applied back at the end."""
    d = yaml.safe_load(inventory(tlab).read_text())
    team_b = next(a for a in d["tenants"]["accounts"][0]["children"] if a["name"] == "team-b")
    team_b["gpus"] = {"h100": 2}
    p = tmp_path / "typed.yaml"
    p.write_text(yaml.safe_dump(d))
    r = accounts(tlab, "apply", str(p))
    assert r.returncode == 0 and "verified:" in r.stdout, r.stdout + r.stderr
    grp = sh(tlab, ["sacctmgr", "-P", "-n", "show", "assoc", "where", "cluster=lab", "account=team-b", "user=",
                    "format=GrpTRES"]).stdout.strip()
    assert sorted(grp.split(",")) == ["gres/gpu:h100=2", "gres/gpu=2"], grp
    try:
        over = submit(tlab, "games", "-w", "node1", "-n1", "--gres=gpu:3")
        wait_for(lambda: job(tlab, over)["Reason"] == "AssocGrpGRES", 60, "AssocGrpGRES", lambda: job(tlab, over))
        assert job(tlab, over)["JobState"] == "PENDING"
    finally:
        sh(tlab, ["scancel", "-u", "games"], check=False)
        r = accounts(tlab, "apply", str(inventory(tlab)))
        assert r.returncode == 0 and "verified:" in r.stdout, r.stdout + r.stderr
    wait_for(lambda: job(tlab, over)["JobState"] == "CANCELLED", 60, "cancel")


def test_tenant_over_gpu_quota_pends_until_quota_frees(tlab):
    """team-a may hold 4 GPUs (GrpTRES gres/gpu=4): bin's 2 wait for daemon's 4 with AssocGrpGRES, not Resources
    (node1 has 4 GPUs but node2's are free too)."""
    first = submit(tlab, "daemon", "-w", "node1", "-n1", "--gres=gpu:4")
    wait_for(lambda: job(tlab, first)["JobState"] == "RUNNING", 60, "team-a's first job to run",
             lambda: (job(tlab, first), sh(tlab, ["squeue"]).stdout))
    second = submit(tlab, "bin", "-n1", "--gres=gpu:2")
    wait_for(lambda: job(tlab, second)["Reason"] == "AssocGrpGRES", 60, "AssocGrpGRES")
    assert job(tlab, second)["JobState"] == "PENDING"
    sh(tlab, ["scancel", first])
    wait_for(lambda: job(tlab, second)["JobState"] == "RUNNING", 90, "the pending job to start once quota freed")
    sh(tlab, ["scancel", second])
    wait_for(lambda: job(tlab, second)["JobState"] == "CANCELLED", 60, "cancel")


def test_high_qos_preempts_scavenger_which_requeues_and_completes(tlab):
    scav = submit(tlab, "games", "-w", "node1", "-n1", "--gres=gpu:4", "--qos=scavenger",
                  script='if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 600; fi')
    wait_for(lambda: job(tlab, scav)["JobState"] == "RUNNING", 60, "the scavenger job to run")
    high = submit(tlab, "daemon", "-w", "node1", "-n1", "--gres=gpu:4", "--qos=high", script="sleep 3")
    wait_for(lambda: job(tlab, high)["JobState"] in ("RUNNING", "COMPLETED"), 90, "the high-QOS job to start")
    j = wait_for(lambda: (lambda x: x if x["Restarts"] == "1" else None)(job(tlab, scav)), 60, "the requeue")
    assert j["JobState"] in ("PENDING", "REQUEUED", "RUNNING", "COMPLETED", "CONFIGURING")
    done = wait_for(lambda: (lambda x: x if x["JobState"] == "COMPLETED" else None)(job(tlab, scav)), 180,
                    "the requeued scavenger job to complete")
    assert done["Restarts"] == "1"
    assert job(tlab, high)["JobState"] == "COMPLETED"


def test_fair_share_across_depths_is_what_plan_says_and_sshare_reports(tlab, tmp_path):
    """Issue 24 item 4: research (team-a 50, team-b 30, no fairshare of its own) beside a top-level team-c 20. The
    plan prints each account's RawShares/NormShares as sshare will; slurmctld's sshare then reports exactly those,
    and team-a/b/c hold 50/30/20 of the cluster but for root's own user association (1 of 101 at the top). Before,
    research kept slurmdbd's raw share 1: 1 against team-c's 20."""
    d = yaml.safe_load(inventory(tlab).read_text())
    research = d["tenants"]["accounts"][0]
    assert "fairshare" not in research
    shares = {"team-a": 50, "team-b": 30}
    for a in research["children"]:
        a["fairshare"] = shares[a["name"]]
    d["tenants"]["accounts"].append({"name": "team-c", "fairshare": 20})
    p = tmp_path / "depths.yaml"
    p.write_text(yaml.safe_dump(d))
    r = accounts(tlab, "plan", str(p))
    assert r.returncode == 0, r.stderr
    planned = {}
    for ln in r.stdout.splitlines():
        if ln.strip().startswith("share "):
            name = ln.split()[1].rstrip(":")
            kv = dict(w.split("=") for w in ln.split() if w.startswith(("RawShares=", "NormShares=")))
            planned[name] = (int(kv["RawShares"]), float(kv["NormShares"]))
    assert set(planned) == {"research", "team-a", "team-b", "team-c"}, r.stdout
    assert "share research: RawShares=80 NormShares=0.792079 (80 of 101 under root; no fairshare given: the sum of " \
           "its children's; beside root's user association)" in r.stdout, r.stdout
    try:
        r = accounts(tlab, "apply", str(p))
        assert r.returncode == 0 and "verified:" in r.stdout, r.stdout + r.stderr

        def reported() -> dict[str, tuple[int, float]]:
            out = sh(tlab, ["sshare", "-a", "-P", "-n", "-o", "Account,User,RawShares,NormShares"]).stdout
            rows = [ln.split("|") for ln in out.splitlines()]
            return {f[0].strip(): (int(f[2]), float(f[3])) for f in rows
                    if len(f) >= 4 and not f[1] and f[0].strip() != "root" and f[2]}

        # slurmctld takes association changes from slurmdbd at once (assoc_mgr update), sshare asks slurmctld
        got = wait_for(lambda: (lambda g: g if all(g.get(a, (0, 0))[0] == planned[a][0] for a in planned) else None)(
            reported()), 30, "sshare to show the applied raw shares", reported)
        for a, (raw, norm) in planned.items():
            assert got[a][0] == raw and abs(got[a][1] - norm) < 1e-6, (a, got[a], planned[a])
        cluster = {a: got["research"][1] * got[a][1] for a in ("team-a", "team-b")} | {"team-c": got["team-c"][1]}
        assert {a: round(v * 101) for a, v in cluster.items()} == {"team-a": 50, "team-b": 30, "team-c": 20}
    finally:
        r = accounts(tlab, "apply", "--prune", str(inventory(tlab)))
        assert r.returncode == 0 and "verified:" in r.stdout, r.stdout + r.stderr


def test_fair_share_after_team_a_used_the_cluster_team_b_starts_first(tlab):
    usage = tlab.usage_job

    def team_a_charged() -> bool:
        r = sh(tlab, ["sshare", "-P", "-n", "-A", "team-a", "-o", "Account,User,RawUsage"])
        return any(ln.split("|")[:2] == ["team-a", ""] and int(ln.split("|")[2] or 0) > 0 for ln in r.stdout.splitlines())

    wait_for(team_a_charged, 240, "slurmctld to charge team-a's usage (PriorityCalcPeriod=1)")
    a = submit(tlab, "bin", "-w", "node2", *WHOLE_CPU)
    b = submit(tlab, "games", "-w", "node2", *WHOLE_CPU)
    # 22.05 computes the fair-share factor at submit; 24.11 only at the next PriorityCalcPeriod pass (both jobs
    # start at the same priority there), so wait for it
    def prio() -> dict[str, int]:
        return {j: int(job(tlab, j)["Priority"]) for j in (a, b)}

    wait_for(lambda: prio()[b] > prio()[a], 150, "team-b's job to outrank team-a's", prio)
    sh(tlab, ["scancel", usage])
    wait_for(lambda: job(tlab, b)["JobState"] == "RUNNING", 90, "team-b's job to start")
    assert job(tlab, a)["JobState"] == "PENDING"
    sh(tlab, ["scancel", a, b])


# --- issue 24.1: QOS preemption keeps a gpusub job's work -------------------------------------------------------------

# A trainer whose checkpoint takes SAVE_S (> 30 s) on the first attempt; it notes which signal asked for it and when.
SLOW_CKPT = """\
import json, os, signal, sys, time
run = os.environ["GPUSUB_RUN_DIR"]
ck = os.path.join(os.environ["GPUSUB_CHECKPOINT_DIR"], "state.json")
step = json.load(open(ck))["step"] if os.path.exists(ck) else 0
start = step
restart = int(os.environ["GPUSUB_RESTART_COUNT"])
got = []
for s in (signal.SIGUSR2, signal.SIGTERM):
    signal.signal(s, lambda n, f: got.append((signal.Signals(n).name, time.time())))
open(os.path.join(run, f"running.r{restart}"), "w").close()
while True:
    if got or os.path.exists(os.environ["GPUSUB_PREEMPT_FILE"]):
        t0 = time.time()
        time.sleep(float(sys.argv[1]) if restart == 0 else 0.5)  # a slow checkpoint
        with open(ck + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ck + ".tmp", ck)
        with open(os.path.join(run, f"sig.r{restart}.json"), "w") as f:
            json.dump({"signals": [n for n, _t in got], "asked": got[0][1] if got else t0, "saved": time.time(),
                       "step": step}, f)
        sys.exit(0)
    if restart > 0 and step >= start + 5:
        with open(os.path.join(run, "result.json"), "w") as f:
            json.dump({"resumed_from": start, "restart": restart, "final": step}, f)
        break
    step += 1
    time.sleep(0.1)
"""


def test_qos_preemption_with_grace_time_checkpoints_requeues_and_resumes(tlab, tmp_path):
    """scavenger gets grace_time 120 (sacctmgr GraceTime); the lab's slurm.conf sends a preempted job its own signal
    (22.05 SlurmctldParameters=preempt_send_user_signal, 24.11 PreemptParameters=send_user_signal). A gpusub job in
    scavenger holds node1's 4 GPUs; a high job asks for them: the gpusub job gets SIGUSR2 (its --signal=B:USR2) at
    once, saves for 35 s inside the grace, its batch shell requeues it, and the next attempt resumes from the save."""
    conf = (Path(tlab.dir) / "etc" / "slurm.conf").read_text()
    assert ("PreemptParameters=send_user_signal" in conf if tlab.release >= "23.02"
            else "preempt_send_user_signal" in conf), conf
    d = yaml.safe_load(inventory(tlab).read_text())
    for q in d["tenants"]["qos"]:
        if q["name"] == "scavenger":
            q["grace_time"] = 120
    team_b = next(a for a in d["tenants"]["accounts"][0]["children"] if a["name"] == "team-b")
    team_b["users"] = [*team_b["users"], "root"]
    p = tmp_path / "grace.yaml"
    p.write_text(yaml.safe_dump(d))
    r = accounts(tlab, "apply", str(p))
    assert r.returncode == 0 and "GraceTime=120" in r.stdout, r.stdout + r.stderr
    assert sh(tlab, ["sacctmgr", "-P", "-n", "show", "qos", "where", "name=scavenger",
                     "format=GraceTime"]).stdout.strip() == "00:02:00"
    script = tmp_path / "train.py"
    script.write_text(SLOW_CKPT)
    run_dir = tmp_path / "run"
    high = ""
    jid = ""
    try:
        r = sh(tlab, [sys.executable, "-m", "slurmkit.cli.gpusub", str(script), "--nodes", "1", "--gpus-per-node", "4",
                      "--launcher", "srun", "--account", "team-b", "--qos", "scavenger", "--time", "10:00",
                      "--max-restarts", "2", "--run-dir", str(run_dir), "--", "35"], check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        jid = next(ln.split()[-1] for ln in r.stdout.splitlines() if ln.startswith("submitted job"))
        wait_for(lambda: (run_dir / "running.r0").exists(), 90, "the first attempt", lambda: job(tlab, jid))
        assert job(tlab, jid)["NodeList"] == "node1"
        t_preempt = time.time()
        high = submit(tlab, "daemon", "-w", "node1", "-n1", "--gres=gpu:4", "--qos=high", script="sleep 3")
        wait_for(lambda: (run_dir / "sig.r0.json").exists(), 150, "the checkpoint inside the grace",
                 lambda: (job(tlab, jid), job(tlab, high)))
        wait_for(lambda: job(tlab, jid)["Restarts"] == "1", 60, "the requeue", lambda: job(tlab, jid))
        wait_for(lambda: job(tlab, jid)["JobState"] == "COMPLETED", 240, "the resumed attempt to finish",
                 lambda: (job(tlab, jid), job(tlab, high)))
    finally:
        for j in (jid, high):
            if j and job(tlab, j)["JobState"] in ("PENDING", "RUNNING"):
                sh(tlab, ["scancel", j], check=False)
        for j in (jid, high):
            if j:
                wait_for(lambda j=j: sacct_state(tlab, j) not in ("", "PENDING", "RUNNING", "REQUEUED"), 60,
                         "slurmdbd to record the job's end")
        # the lab's own tenants back (root out of team-b, scavenger without a grace); the job's end is recorded first
        # (slurmdbd refuses to delete an association with active jobs)
        accounts(tlab, "apply", "--prune", str(inventory(tlab)))
    sig = json.loads((run_dir / "sig.r0.json").read_text())
    r0 = (run_dir / "logs" / f"{jid}.r0.log").read_text()
    grace_used = sig["saved"] - sig["asked"]
    print(f"\n[{tlab.release}] preemption signal(s) {sig['signals']} {sig['asked'] - t_preempt:.1f} s after the high "
          f"job's submit; checkpoint saved {grace_used:.1f} s later at step {sig['step']}")
    assert sig["signals"][:1] == ["SIGUSR2"], (sig, r0[-2000:])  # its own --signal, not a bare SIGTERM
    # 22.05 ends a job that exits inside its grace like any other: the batch shell requeues it; 24.05+ requeues it
    # itself when the batch script ends (proc_req.c GRACE_PREEMPT), and a second requeue of ours made it run twice
    requeue = ("Slurm requeues the job as this script ends" if tlab.release >= "24.05"
               else "requeueing (restart 1 of at most 2)")
    assert "SIGUSR2 received" in r0 and requeue in r0, r0[-2000:]
    assert grace_used >= 35  # longer than 30 s, inside GraceTime
    result = json.loads((run_dir / "result.json").read_text())
    print(f"[{tlab.release}] resumed at step {result['resumed_from']} (saved {sig['step']}), finished at "
          f"{result['final']}; high job {job(tlab, high)['JobState']}")
    assert result == {"resumed_from": sig["step"], "restart": 1, "final": sig["step"] + 5}
    assert job(tlab, high)["JobState"] == "COMPLETED"


@pytest.fixture(scope="module")
def typed_lab(make_lab):
    """Issue 24 item 6: node1 with 2 A100s, node2 with 2 H100s (`--gpu-type a100:1,h100:1`), partitions gpu (both),
    a100, h100; the submit policy's job_submit.lua; team-b's quota per type: 1 A100 and 1 H100."""
    from slurmkit.lab.inventory import lab_tenants

    tenants = lab_tenants(4)
    team_b = next(a for a in tenants["accounts"][0]["children"] if a["name"] == "team-b")
    team_b["gpus"] = {"a100": 1, "h100": 1}
    return make_lab(nodes=2, gpus_per_node=2, gpu_type="a100:1,h100:1", nodes_per_leaf=2, accounting=True,
                    submit_policy=True, tenants=tenants)


def test_two_gpu_types_typed_quotas_against_slurmctld(typed_lab):
    lab = typed_lab
    gres = sh(lab, ["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %G"]).stdout.split("\n")
    assert [ln.split()[:2] for ln in gres if ln] == [["node1", "gpu:a100:2(S:0-1)"], ["node2", "gpu:h100:2(S:0-1)"]]
    grp = sh(lab, ["sacctmgr", "-P", "-n", "show", "assoc", "where", "cluster=lab", "account=team-b", "user=",
                   "format=GrpTRES"]).stdout.strip()
    assert sorted(grp.split(",")) == ["gres/gpu:a100=1", "gres/gpu:h100=1", "gres/gpu=2"], grp
    t = ["-t", "10"]
    try:
        # a typed request over the type's quota pends with AssocGrpGRES
        over = submit(lab, "games", "-p", "a100", "--gres=gpu:a100:2", *t)
        # an untyped one in a one-type partition gets the type (job_submit.lua), and the typed limit holds it
        for args in (["-p", "h100", "--gres=gpu:2"], ["-p", "h100", "--gpus=2"]):
            j = submit(lab, "games", *args, *t)
            rec = job(lab, j)
            assert "gpu:h100:2" in rec.get("TresPerNode", "") + rec.get("TresPerJob", ""), rec
            wait_for(lambda j=j: job(lab, j)["Reason"] == "AssocGrpGRES", 60, "AssocGrpGRES", lambda j=j: job(lab, j))
        wait_for(lambda: job(lab, over)["Reason"] == "AssocGrpGRES", 60, "AssocGrpGRES", lambda: job(lab, over))
        # within the quota: runs
        ok = submit(lab, "games", "-p", "a100", "--gres=gpu:1", *t)
        wait_for(lambda: job(lab, ok)["JobState"] == "RUNNING", 60, "the 1-A100 job to run", lambda: job(lab, ok))
        # untyped where the partition has both types: refused at submit, naming them
        r = sh(lab, ["runuser", "-u", "games", "--", "sbatch", *RUN, "-p", "gpu", "--gres=gpu:2", *t, "--wrap",
                     "true"], check=False)
        assert r.returncode == 1 and "typed_gpu_quotas" in r.stderr and "a100, h100" in r.stderr, r.stderr
        # a mixed request: Slurm refuses it at submit (both releases) ...
        r = sh(lab, ["runuser", "-u", "games", "--", "sbatch", *RUN, "-p", "h100", "--gres=gpu:2,gpu:h100:1", *t,
                     "--wrap", "true"], check=False)
        assert r.returncode == 1 and "with and without type identification" in r.stderr, r.stderr
        # ... but a job update reaches job_submit.lua, which refuses it too (before, it typed the untyped item:
        # gpu:h100:2,gpu:h100:1, which slurmctld then counted as one GPU)
        held = submit(lab, "games", "-H", "-p", "h100", "--gres=gpu:h100:1", *t)
        pre = "gres:gpu" if lab.release < "23" else "gres/gpu"
        r = sh(lab, ["scontrol", "update", f"jobid={held}", f"TresPerNode={pre}:2,{pre}:h100:1"], check=False)
        assert r.returncode != 0, r.stdout + r.stderr
        assert job(lab, held)["TresPerNode"] == f"{pre}:h100:1"
    finally:
        sh(lab, ["scancel", "-u", "games"], check=False)
