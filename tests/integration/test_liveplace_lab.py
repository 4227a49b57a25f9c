"""Live placement against the real lab (8 nodes x 8 GPUs, leaf1=node[1-4], leaf2=node[5-8]), both releases.

Issue 25: back-to-back (and simultaneous) gpusub jobs run at once on different nodes, every time; reservations
(active, starting soon, the job's own, through SBATCH_RESERVATION) never make gpusub refuse or pin a job that plain
sbatch would run; sbatch's node-selection options reach slurmctld as written. gpusub is run as a researcher runs it
(the CLI, the lab's inventory), and slurmctld's records are the judge.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit import hostlist
from slurmkit.backend.cli import CLIBackend
from slurmkit.lab import Lab
from tests.conftest import ROOT, lab_run
from tests.integration.test_placement_lab import _wait

pytestmark = [pytest.mark.lab, pytest.mark.releases]  # squeue/scontrol formats, reservations, test-only: per release

HOLD = "#!/bin/bash\nwhile [ ! -e \"$GATE\" ]; do sleep 0.2; done\n"


@pytest.fixture()
def env(lab: Lab, tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}
    return {**e, **lab.env, "SLURMKIT_INVENTORY": str(lab.etc / "slurmkit.yaml"),
            "SLURMKIT_STATE_DIR": str(tmp_path / "state"), "GPUSUB_RUN_ROOT": str(tmp_path / "runs"),
            "PYTHONPATH": str(ROOT), "GATE": str(tmp_path / "gate")}


@pytest.fixture()
def hold(tmp_path: Path) -> str:
    p = tmp_path / "hold.sh"
    p.write_text(HOLD)
    p.chmod(0o755)
    return str(p)


@pytest.fixture()
def cleanup(lab: Lab, env: dict[str, str]) -> Iterator[list[str]]:
    """Jobs and reservations to remove at the end; then every node idle again for the next test."""
    made: list[str] = []
    b = CLIBackend(env=lab.env)
    # other tests' jobs may still be completing: placement is judged on an idle lab
    _wait(lambda: all(n.state == "idle" and not n.flags for n in b.nodes()), 90, "every lab node idle first")
    yield made
    Path(env["GATE"]).touch()
    jobs = [x for x in made if x.isdigit()]
    if jobs:
        lab_run(lab, ["scancel", *jobs], check=False)
    for r in (x for x in made if not x.isdigit()):
        lab_run(lab, ["scontrol", "delete", f"reservation={r}"], check=False)
    _wait(lambda: all(n.state == "idle" for n in b.nodes()), 60, "every lab node idle again")



def _gpusub_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "slurmkit.cli.gpusub", *args]


def _gpusub(env: dict[str, str], *args: str) -> tuple[str, str]:
    r = subprocess.run(_gpusub_argv(*args), env=env, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        dry = subprocess.run(_gpusub_argv(*args, "--dry-run"), env=env, capture_output=True, text=True, timeout=60)
        plan = [x for x in dry.stdout.splitlines() if x.startswith(("#SBATCH --node", "# plan", "# warning"))]
        raise AssertionError(f"{r.stdout}{r.stderr}; the dry run says: {plan}; squeue: "
                             f"{subprocess.run(['squeue', '-o', '%i %T %r %N %n'], env=env, capture_output=True, text=True).stdout}")
    return r.stdout.split("submitted job ", 1)[1].split()[0], r.stdout + r.stderr


def _job(lab: Lab, jid: str) -> dict[str, str]:
    from slurmkit.backend.parse import parse_scontrol_records

    return parse_scontrol_records(lab_run(lab, ["scontrol", "-o", "show", "job", jid]).stdout)[0]


def _running_nodes(lab: Lab, jid: str) -> set[str] | None:
    rec = _job(lab, jid)
    return set(hostlist.expand(rec["NodeList"])) if rec["JobState"] == "RUNNING" else None


def test_back_to_back_jobs_run_at_once_on_different_nodes_every_time(lab: Lab, env: dict[str, str], hold: str,
                                                                     cleanup: list[str]) -> None:
    """`for i in 1 2; do gpusub train.py -N 4; done` on the idle lab: the second job used to be pinned to the first
    one's nodes (still IDLE while it was pending) and pended with Resources beside four idle nodes."""
    b = CLIBackend(env=lab.env)
    for round_ in range(3):
        Path(env["GATE"]).unlink(missing_ok=True)
        ids = []
        for _ in range(2):
            jid, out = _gpusub(env, hold, "-N", "4", "--launcher", "srun", "--time", "5")
            ids.append(jid)
            cleanup.append(jid)
        nodes = [_wait(lambda j=j: _running_nodes(lab, j), 30, f"round {round_}: job {j} running") for j in ids]
        assert not nodes[0] & nodes[1], (round_, nodes)
        Path(env["GATE"]).touch()
        _wait(lambda: all(n.state == "idle" for n in b.nodes()), 60, "the lab idle again")


def test_simultaneous_submissions_sort_out_a_shared_pin(lab: Lab, env: dict[str, str], hold: str,
                                                        cleanup: list[str]) -> None:
    """Two gpusub runs that read the queue at the same moment may pick the same idle nodes; the later job clears
    its pin after its submission (check_pin) and both run at once."""
    Path(env["GATE"]).unlink(missing_ok=True)
    procs = [subprocess.Popen(_gpusub_argv(hold, "-N", "4", "--launcher", "srun", "--time", "5"), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    ids = [o.split("submitted job ", 1)[1].split()[0] for o in outs]
    cleanup.extend(ids)
    nodes = [_wait(lambda j=j: _running_nodes(lab, j), 40, f"job {j} running") for j in ids]
    assert not nodes[0] & nodes[1], outs


def _reserve(lab: Lab, cleanup: list[str], name: str, nodes: str, start: str, users: str) -> None:
    lab_run(lab, ["scontrol", "create", "reservation", f"ReservationName={name}", f"StartTime={start}",
                  "Duration=120", f"Nodes={nodes}", f"Users={users}"])
    cleanup.append(name)


def test_reservations_now_and_soon_are_placed_around(lab: Lab, env: dict[str, str], hold: str,
                                                     cleanup: list[str]) -> None:
    """Reservations of others on node[1-2] (active) and node[5-6] (in 30 minutes): plain sbatch runs a 4-node job on
    the other nodes; so must gpusub (it used to pin reserved nodes and be refused by sbatch --test-only)."""
    _reserve(lab, cleanup, "others-now", "node[1-2]", "now", "games")
    _reserve(lab, cleanup, "others-soon", "node[5-6]", "now+30minutes", "games")
    jid, out = _gpusub(env, hold, "-N", "4", "--launcher", "srun", "--time", "60")
    cleanup.append(jid)
    nodes = _wait(lambda: _running_nodes(lab, jid), 30, f"job {jid} running")
    assert nodes == {"node3", "node4", "node7", "node8"}, out
    Path(env["GATE"]).touch()
    b = CLIBackend(env=lab.env)
    _wait(lambda: all(n.state == "idle" for n in b.nodes() if n.name not in ("node1", "node2")), 60, "nodes idle")
    Path(env["GATE"]).unlink()
    # a 10-minute job ends before the later reservation starts: node[5-8] are usable, a whole leaf
    jid2, out2 = _gpusub(env, hold, "-N", "4", "--launcher", "srun", "--time", "10")
    cleanup.append(jid2)
    assert _wait(lambda: _running_nodes(lab, jid2), 30, f"job {jid2} running") == {f"node{i}" for i in range(5, 9)}


def test_the_jobs_own_reservation_through_sbatch_reservation(lab: Lab, env: dict[str, str], hold: str,
                                                             cleanup: list[str]) -> None:
    _reserve(lab, cleanup, "team", "node[5-8]", "now", "root")
    _reserve(lab, cleanup, "team-later", "node[1-4]", "now+30minutes", "root")
    jid, out = _gpusub({**env, "SBATCH_RESERVATION": "team"}, hold, "-N", "2", "--launcher", "srun", "--time", "5")
    cleanup.append(jid)
    nodes = _wait(lambda: _running_nodes(lab, jid), 30, f"job {jid} running")
    assert nodes <= {"node5", "node6", "node7", "node8"} and _job(lab, jid)["Reservation"] == "team", out
    # a reservation that starts later: accepted as plain sbatch accepts it, nothing pinned, pending for it
    jid2, out2 = _gpusub(env, hold, "-N", "2", "--launcher", "srun", "--time", "5", "--reservation", "team-later")
    cleanup.append(jid2)
    rec = _job(lab, jid2)
    assert rec["JobState"] == "PENDING" and rec.get("ReqNodeList") in (None, "(null)", ""), out2
    assert "reservation team-later starts at" in out2


def test_sbatch_options_reach_slurmctld_as_written(lab: Lab, env: dict[str, str], hold: str,
                                                   cleanup: list[str]) -> None:
    jid, out = _gpusub(env, hold, "-N", "2", "--launcher", "srun", "--time", "5", "--hold", "--exclude", "node1",
                       "--constraint", "h100&nvlink", "--comment", "ablation run 3", "--mail-type", "END,FAIL",
                       "--mail-user", "researcher@example.org", "--sbatch-arg=--nice=5")
    cleanup.append(jid)
    rec = _job(lab, jid)
    assert rec["JobState"] == "PENDING" and rec["Reason"] == "JobHeldUser", out
    assert rec["ExcNodeList"] == "node1" and rec["Features"] == "h100&nvlink"
    assert rec["Comment"] == "ablation run 3" and rec["Nice"] == "5"
    assert re.search(r"MailType=(END,FAIL|FAIL,END)", lab_run(lab, ["scontrol", "show", "job", jid]).stdout)
    assert rec.get("ReqNodeList") in (None, "(null)", "")  # held: nothing pinned
