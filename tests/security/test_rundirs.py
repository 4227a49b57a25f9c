"""Issue 32 item 4: root never walks or trusts a tree a user points at.

`defrag plan|run|watch` (root, on the controller) took a job for gpusub's when its StdOut dir held a submit.json,
then os.walk'ed its checkpoints/ and stat'ed every file: a user's `checkpoints -> /` made root walk the whole
filesystem and priced the job as "just checkpointed" (the newest file under / is seconds old), the cheapest to
move; a job pointed -o into another user's run dir was priced by that user's checkpoints. Now (defrag/gather.py
over slurmkit/safefs.py): the run dir and checkpoints/ must be directories of the job's user (UserId), opened with
O_NOFOLLOW; submit.json a regular file of theirs; the walk follows no symlink, counts only the user's files and
stops at gather.CKPT_ENTRIES entries for all of a user's jobs together, CKPT_DEPTH levels or CKPT_SECONDS; a walk
that stops prices the job from its start.

The trees are built by the attacker (``games``) on the real filesystem; root's reads are counted (directory entries
and stat calls), not timed. The epilog's /dev/shm cleanup (health/cleanup.py) is held to the same rule.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

from slurmkit.defrag import gather
from tests.conftest import needs
from tests.security.conftest import ATTACKER, USER_PYTHON, VICTIM, as_user
from tests.security.userfs import user_dir

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
NOW = time.time()
STARTED = NOW - 3600.0  # the jobs below started an hour ago

pytestmark = needs(os.geteuid() == 0, "plays root and an unprivileged user: needs root")  # never skipped in CI


def uid(user: str) -> int:
    return pwd.getpwnam(user).pw_uid


def record(job: int, user: str, stdout: str) -> str:
    """A recorded 22.05 `scontrol -o -d show job` line (a root job of the lab) as ``user``'s running, requeueable
    job with that StdOut, started an hour ago."""
    line = (DATA / "scontrol_show_job_detail.txt").read_text().splitlines()[0]
    start = datetime.fromtimestamp(STARTED).strftime("%Y-%m-%dT%H:%M:%S")
    line = re.sub(r"^JobId=\d+", f"JobId={job}", line)
    line = line.replace("UserId=root(0)", f"UserId={user}({uid(user)})")
    line = re.sub(r"StartTime=\S+", f"StartTime={start}", line)
    return line.replace("StdOut=/dev/null", f"StdOut={stdout}")


class Reads:
    """Counts what root reads of the filesystem: each directory entry scandir yields and each stat/lstat call
    (os.walk and os.fwalk and pathlib all go through these). Past ``limit`` the read raises, so the code as it was
    fails fast instead of walking / to the end."""

    def __init__(self, limit: int) -> None:
        self.n = 0
        self.limit = limit

    def tick(self) -> None:
        self.n += 1
        if self.n > self.limit:
            raise AssertionError(f"root read more than {self.limit} directory entries / stats")


@contextmanager
def counted(limit: int = 100_000) -> Iterator[Reads]:
    reads = Reads(limit)
    real_scandir, real_stat, real_lstat = os.scandir, os.stat, os.lstat

    class It:
        def __init__(self, it) -> None:  # type: ignore[no-untyped-def]
            self.it = it

        def __enter__(self) -> It:
            return self

        def __exit__(self, *exc: object) -> None:
            self.it.close()

        def __iter__(self) -> It:
            return self

        def __next__(self):  # type: ignore[no-untyped-def]
            e = next(self.it)
            reads.tick()
            return e

        def close(self) -> None:
            self.it.close()

    def scandir(*a, **k):  # type: ignore[no-untyped-def]
        return It(real_scandir(*a, **k))

    def stat(*a, **k):  # type: ignore[no-untyped-def]
        reads.tick()
        return real_stat(*a, **k)

    def lstat(*a, **k):  # type: ignore[no-untyped-def]
        reads.tick()
        return real_lstat(*a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "scandir", scandir)
        mp.setattr(os, "stat", stat)
        mp.setattr(os, "lstat", lstat)
        yield reads


def run_dir(parent: Path, user: str, name: str = "run") -> Path:
    """A gpusub-shaped run dir made by ``user`` themself: logs/, checkpoints/, submit.json."""
    run = parent / name
    as_user(user, ["mkdir", "-p", str(run / "logs"), str(run / "checkpoints")])
    as_user(user, [USER_PYTHON, "-c", "import sys; open(sys.argv[1], 'w').write('{}')", str(run / "submit.json")])
    return run


def jobs(*lines: str) -> dict[str, gather.RunningJob]:
    return {j.job_id: j for j in gather.running_jobs("\n".join(lines), gather.Policy(restart_s=60), now=NOW)}


@pytest.fixture
def home(open_tmp: Path) -> Path:
    return user_dir(open_tmp / "home", ATTACKER)


def test_the_control_a_real_checkpoint_counts(home: Path) -> None:
    """Not vacuous: the attacker's own well-formed run dir is a gpusub job priced by its checkpoint's age."""
    run = run_dir(home, ATTACKER)
    ck = run / "checkpoints" / "step_100"
    as_user(ATTACKER, ["mkdir", str(ck)])
    as_user(ATTACKER, ["touch", "-d", f"@{NOW - 100:.0f}", str(ck / "model.pt")])
    j = jobs(record(7, ATTACKER, f"{run}/logs/slurm-7.out"))["7"]
    assert j.movable and j.checkpoint_age_s == pytest.approx(100, abs=2)
    assert j.cost == pytest.approx(6 * (100 + 60), abs=20)


def test_checkpoints_linked_to_root_is_not_walked(home: Path) -> None:
    run = run_dir(home, ATTACKER)
    as_user(ATTACKER, ["rmdir", str(run / "checkpoints")])
    as_user(ATTACKER, ["ln", "-s", "/", str(run / "checkpoints")])
    with counted() as reads:
        j = jobs(record(7, ATTACKER, f"{run}/logs/slurm-7.out"))["7"]
    assert reads.n <= 50, reads.n  # before: every file under / (784k stats in the issue)
    assert j.checkpoint_age_s is None  # not "just checkpointed": priced from its start an hour ago
    assert j.cost == pytest.approx(6 * (3600 + 60), abs=20)
    # a link to a dir the user owns elsewhere is refused the same way: no symlink is followed at all
    real = user_dir(home / "elsewhere", ATTACKER)
    as_user(ATTACKER, ["touch", str(real / "fresh")])
    as_user(ATTACKER, ["ln", "-sfn", str(real), str(run / "checkpoints")])
    assert jobs(record(7, ATTACKER, f"{run}/logs/slurm-7.out"))["7"].checkpoint_age_s is None


def test_links_inside_checkpoints_are_not_followed(home: Path) -> None:
    run = run_dir(home, ATTACKER)
    as_user(ATTACKER, ["ln", "-s", "/", str(run / "checkpoints" / "root")])
    as_user(ATTACKER, ["ln", "-s", "/proc/self/status", str(run / "checkpoints" / "fresh-file")])
    as_user(ATTACKER, ["touch", "-d", f"@{NOW - 500:.0f}", str(run / "checkpoints" / "real")])
    with counted() as reads:
        j = jobs(record(7, ATTACKER, f"{run}/logs/slurm-7.out"))["7"]
    assert reads.n <= 50, reads.n
    assert j.checkpoint_age_s == pytest.approx(500, abs=2)  # the one real file of theirs, not /proc's


def test_a_run_dir_of_another_user_is_not_the_job_s(home: Path, open_tmp: Path) -> None:
    """The attacker's job writes its -o into the victim's run dir (or links its own to it): the victim's run dir
    and checkpoints do not make the attacker's job a gpusub job, nor price it."""
    victims = user_dir(open_tmp / "victim-home", VICTIM)
    theirs = run_dir(victims, VICTIM)
    as_user(VICTIM, ["chmod", "-R", "a+rwX", str(theirs)])  # even wide open to the attacker
    as_user(VICTIM, ["touch", str(theirs / "checkpoints" / "just-now")])
    j = jobs(record(8, ATTACKER, f"{theirs}/logs/slurm-8.out"))["8"]
    assert not j.movable and "not a gpusub job" in j.why_not and j.checkpoint_age_s is None
    as_user(ATTACKER, ["ln", "-s", str(theirs), str(home / "link")])
    j = jobs(record(8, ATTACKER, f"{home}/link/logs/slurm-8.out"))["8"]
    assert not j.movable and j.checkpoint_age_s is None
    # the victim's own job with the same StdOut stays theirs
    v = jobs(record(9, VICTIM, f"{theirs}/logs/slurm-9.out"))["9"]
    assert v.movable and v.checkpoint_age_s is not None and v.checkpoint_age_s < 60


def test_a_linked_submit_json_is_not_a_run_dir(home: Path) -> None:
    run = run_dir(home, ATTACKER)
    as_user(ATTACKER, ["rm", str(run / "submit.json")])
    as_user(ATTACKER, ["ln", "-s", "/etc/passwd", str(run / "submit.json")])
    j = jobs(record(7, ATTACKER, f"{run}/logs/slurm-7.out"))["7"]
    assert not j.movable and j.checkpoint_age_s is None
    assert gather.gpusub_run_dir(f"{run}/logs/slurm-7.out", uid(ATTACKER)) is None


def test_a_deep_tree_is_cut_at_its_bound_and_proves_nothing(home: Path) -> None:
    run = run_dir(home, ATTACKER)
    deep = "/".join(["d"] * 40)
    as_user(ATTACKER, ["mkdir", "-p", str(run / "checkpoints" / deep)])
    as_user(ATTACKER, ["touch", str(run / "checkpoints" / deep / "fresh")])
    with counted() as reads:
        j = jobs(record(7, ATTACKER, f"{run}/logs/slurm-7.out"))["7"]
    assert reads.n <= 60, reads.n  # CKPT_DEPTH (6) levels of one dir each, not 40
    assert j.movable and j.checkpoint_age_s is None  # the fresh file 40 levels down is not believed


def test_a_huge_tree_costs_one_bound_for_all_of_a_users_jobs(home: Path) -> None:
    """4,000 files in one run dir's checkpoints/, five jobs of the attacker pointing at it: root reads at most
    CKPT_ENTRIES entries for the five together (before: 20,000 stats), and a job the bound cut short is priced
    from its start."""
    run = run_dir(home, ATTACKER)
    as_user(ATTACKER, [USER_PYTHON, "-c", "import os, sys\nfor i in range(4000): open(os.path.join(sys.argv[1], "
                       "f'f{i}'), 'w').close()", str(run / "checkpoints")])
    lines = [record(10 + i, ATTACKER, f"{run}/logs/slurm-{10 + i}.out") for i in range(5)]
    with counted() as reads:
        got = jobs(*lines)
    assert reads.n <= 10_000 + 200, reads.n  # CKPT_ENTRIES (10,000) for the five, and a few stats a job
    ages = [got[str(10 + i)].checkpoint_age_s for i in range(5)]
    assert ages[:2] != [None, None] and ages[2:] == [None, None, None], ages
    assert all(got[str(10 + i)].movable for i in range(5))



def test_shm_cleanup_removes_only_what_the_user_could_and_follows_nothing(open_tmp: Path) -> None:
    """The epilog's /dev/shm cleanup (root) of a shm dir the attacker filled: links to a root dir at the top and deep
    inside their dir, and a directory the victim made inside the attacker's wide-open one. Root removes the
    attacker's entries, follows no link, and leaves the victim's directory (the attacker could not empty it)."""
    from slurmkit.health.cleanup import clean_shm

    shm = open_tmp / "shm"
    shm.mkdir()
    shm.chmod(0o1777)
    keep = open_tmp / "root-dir"
    keep.mkdir()
    (keep / "precious").write_text("root's")
    as_user(ATTACKER, ["mkdir", "-p", str(shm / "mine" / "sub")])
    as_user(ATTACKER, ["chmod", "777", str(shm / "mine")])
    as_user(ATTACKER, ["ln", "-s", str(keep), str(shm / "mine" / "sub" / "link")])
    as_user(ATTACKER, ["ln", "-s", str(keep), str(shm / "toplink")])
    as_user(VICTIM, ["mkdir", str(shm / "mine" / "victims")])
    as_user(VICTIM, [USER_PYTHON, "-c", "import sys; open(sys.argv[1], 'w').write('v')", str(shm / "mine" / "victims" / "v")])
    with counted() as reads:
        res = clean_shm(uid(ATTACKER), str(shm))
    assert (keep / "precious").read_text() == "root's"
    assert (shm / "mine" / "victims" / "v").read_text() == "v"  # before: root's rmtree removed it
    assert not os.path.lexists(shm / "toplink") and not os.path.lexists(shm / "mine" / "sub")
    assert "toplink" in res["removed"] and any(e.startswith("mine:") for e in res["errors"]), res
    assert reads.n < 50, reads.n


def test_shm_cleanup_of_a_huge_tree_is_bounded(open_tmp: Path) -> None:
    """5,000 files of the attacker's under /dev/shm, a cleanup allowed 1,000 entries: it stops there, says what is
    left, and the next cleanup goes on."""
    from slurmkit.health.cleanup import clean_shm

    shm = open_tmp / "shm"
    shm.mkdir()
    shm.chmod(0o1777)
    as_user(ATTACKER, [USER_PYTHON, "-c", "import os, sys\nos.mkdir(sys.argv[1])\nfor i in range(5000): "
                       "open(os.path.join(sys.argv[1], f'f{i}'), 'w').close()", str(shm / "big")])
    with counted() as reads:
        res = clean_shm(uid(ATTACKER), str(shm), max_entries=1000)
    assert reads.n <= 1100, reads.n
    assert res["removed"] == [] and any("stopped after 1000 entries" in e for e in res["errors"]), res
    left = len(os.listdir(shm / "big"))
    assert 4000 <= left < 5000
    passes = [clean_shm(uid(ATTACKER), str(shm), max_entries=1100)["removed"] for _ in range(4)]
    assert passes == [[], [], [], ["big"]] and os.listdir(shm) == []  # ~1,100 entries a pass


@pytest.mark.lab
def test_on_a_lab_root_prices_a_users_job_without_following_their_tree(sec_lab) -> None:  # type: ignore[no-untyped-def]
    """The real path: jobs of the attacker submitted on the suite's lab with -o into their own run dir (whose
    checkpoints/ links to /) and into the victim's; root's defrag gather reads the lab's job records (the backend's job_details)."""
    from slurmkit.backend.cli import CLIBackend

    work = user_dir(Path(sec_lab.dir) / "rundirs-item4", ATTACKER)
    backend = CLIBackend(env=sec_lab.env)
    jids: list[str] = []
    try:
        run = run_dir(work, ATTACKER)
        as_user(ATTACKER, ["rmdir", str(run / "checkpoints")])
        as_user(ATTACKER, ["ln", "-s", "/", str(run / "checkpoints")])
        victims = user_dir(Path(sec_lab.dir) / "rundirs-item4-victim", VICTIM)
        theirs = run_dir(victims, VICTIM)
        as_user(VICTIM, ["chmod", "-R", "a+rwX", str(theirs)])
        as_user(VICTIM, ["touch", str(theirs / "checkpoints" / "just-now")])
        for out in (f"{run}/logs/slurm-%j.out", f"{theirs}/logs/slurm-%j.out"):
            r = as_user(ATTACKER, ["sbatch", "--parsable", "--requeue", "-n1", "--mem=100M", f"--chdir={work}",
                                   "-o", out, "--wrap", "exec sleep 300"], env=sec_lab.env)
            jids.append(r.stdout.strip().split(";")[0])
        deadline = time.monotonic() + 90
        while not all(backend.job(j).state == "RUNNING" for j in jids):
            assert time.monotonic() < deadline, [backend.job(j) for j in jids]
            time.sleep(0.5)
        details = backend.job_details()  # records read from Slurm's JSON (item 2)
        mine = {r["JobId"]: r for r in details if r.get("JobId") in jids}
        assert mine[jids[0]]["UserId"] == f"{ATTACKER}({uid(ATTACKER)})", mine
        assert mine[jids[0]]["StdOut"] == f"{run}/logs/slurm-{jids[0]}.out", mine
        with counted() as reads:
            got = {j.job_id: j for j in gather.running_jobs(details, gather.Policy(), now=time.time())}
        assert reads.n <= 100, reads.n
        own, into_victims = got[jids[0]], got[jids[1]]
        assert own.movable and own.checkpoint_age_s is None  # their gpusub-shaped dir; the link to / not followed
        assert not into_victims.movable and into_victims.checkpoint_age_s is None  # the victim's dir is not theirs
        assert gather.job_run_dir({"StdOut": f"{theirs}/logs/slurm-1.out", "UserId": f"{VICTIM}({uid(VICTIM)})"})
    finally:
        for j in jids:
            subprocess.run(["scancel", j], env={**os.environ, **sec_lab.env}, capture_output=True, timeout=30)
        shutil.rmtree(Path(sec_lab.dir) / "rundirs-item4", ignore_errors=True)
        shutil.rmtree(Path(sec_lab.dir) / "rundirs-item4-victim", ignore_errors=True)
