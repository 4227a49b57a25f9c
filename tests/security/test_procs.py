"""Issue 32 item 6: what root believes about processes. Each test plays the attacker (``games``) on this machine's
real /proc and kernel, beside a real process of the victim or of root where the rule must still hold."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurmkit.health.expect import Expectations
from slurmkit.health.host import HostPaths
from slurmkit.health.policy import CHECK_DEFAULTS, parse_policy
from slurmkit.health.result import Status
from slurmkit.health.runner import RunSpec, run_checks
from tests.security.conftest import ATTACKER, USER_PYTHON, as_user

NVML = Path(__file__).resolve().parents[1] / "data" / "nvml"


@pytest.fixture
def attacker_dir() -> Iterator[Path]:
    """A directory the attacker owns (pytest's tmp_path sits under root's 0700 dir, out of the attacker's reach)."""
    d = Path(tempfile.mkdtemp(prefix="slurmkit-sec-procs-"))
    pw = pwd.getpwnam(ATTACKER)
    os.chown(d, pw.pw_uid, pw.pw_gid)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _spawn_as(user: str, argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(["setpriv", f"--reuid={user}", f"--regid={pwd.getpwnam(user).pw_gid}", "--clear-groups",
                             "--", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _wait_comm(p: subprocess.Popen, comm: str) -> None:
    end = time.monotonic() + 10
    while _comm(p.pid) != comm:
        assert p.poll() is None and time.monotonic() < end, f"pid {p.pid} never became {comm!r}"
        time.sleep(0.02)


def daemons_check(tmp_path: Path, policy: dict) -> object:
    """The daemons check on this machine's real /proc, through run_checks as the health hook runs it."""
    raw: dict = {n: False for n in CHECK_DEFAULTS if n not in ("daemons", "nvml")}
    raw["daemons"] = policy
    pol = parse_policy(raw)
    spec = RunSpec(hook="health", node="node1", policy=pol, expect=Expectations(node="node1"),
                   node_state_dir=str(tmp_path), fake_nvml=str(NVML / "healthy-h100x8.json"), paths=HostPaths(),
                   deadline=time.monotonic() + pol.budget_s)
    return next(r for r in run_checks(spec).results if r.name == "daemons")


def test_a_process_named_like_a_daemon_does_not_pass_for_it(tmp_path, attacker_dir):
    """`cp /bin/sleep nvidia-imex; ./nvidia-imex 60 &` as any user, and a process renamed with prctl(PR_SET_NAME):
    before, either flipped the imex requirement from FAIL to OK (the check matched the name alone)."""
    policy = {"required": [], "imex": True}
    before = daemons_check(tmp_path, policy)
    assert before.status == Status.FAIL and before.findings == ["nvidia-imex down"], before.summary
    fake = attacker_dir / "nvidia-imex"
    shutil.copy("/bin/sleep", fake)
    os.chown(fake, pwd.getpwnam(ATTACKER).pw_uid, -1)
    copy = _spawn_as(ATTACKER, [str(fake), "60"])
    # the real python (a root-owned binary) renaming itself: the exe is root's, the name is not its file's
    renamed = _spawn_as(ATTACKER, [USER_PYTHON, "-c", "import ctypes, time; ctypes.CDLL(None).prctl(15, b'nvidia-imex');"
                                   " time.sleep(60)"])
    try:
        _wait_comm(copy, "nvidia-imex")
        _wait_comm(renamed, "nvidia-imex")
        res = daemons_check(tmp_path, policy)
        assert res.status == Status.FAIL and res.findings == ["nvidia-imex down"], res.summary
        seen = {i["pid"] for i in res.evidence["impostors"]["nvidia-imex"]}
        assert {copy.pid, renamed.pid} <= seen, res.evidence
    finally:
        for p in (copy, renamed):
            p.kill()
            p.wait()


def test_the_real_daemon_still_counts_and_the_wrong_user_does_not(tmp_path):
    """The rule still sees a daemon: root running a root-owned nvidia-imex from a root-owned directory passes; the
    attacker running that very binary (a real, root-owned file) does not: nvidia-imex is root's."""
    root_dir = Path(tempfile.mkdtemp(prefix="slurmkit-sec-sbin-"))  # root's, 0755: the attacker may run what is in it
    root_dir.chmod(0o755)
    real = root_dir / "nvidia-imex"
    shutil.copy("/bin/sleep", real)
    policy = {"required": [], "imex": True}
    by_attacker = _spawn_as(ATTACKER, [str(real), "60"])
    by_root = None
    try:
        _wait_comm(by_attacker, "nvidia-imex")
        res = daemons_check(tmp_path, policy)
        assert res.status == Status.FAIL, res.summary
        assert {"pid": by_attacker.pid, "uid": pwd.getpwnam(ATTACKER).pw_uid, "why": "not one of its users"} \
            in res.evidence["impostors"]["nvidia-imex"], res.evidence
        by_root = subprocess.Popen([str(real), "60"])
        _wait_comm(by_root, "nvidia-imex")
        res = daemons_check(tmp_path, policy)
        assert res.status == Status.OK and res.summary == "running: nvidia-imex", res.summary
    finally:
        for p in (by_attacker, by_root):
            if p is not None:
                p.kill()
                p.wait()
        shutil.rmtree(root_dir, ignore_errors=True)


# --- (b) whose job a process is in: never its own environment --------------------------------------------------

def _stepd(bindir: Path, title: str, owner: str | None = None) -> subprocess.Popen:
    """A process that looks like slurmstepd to /proc: a copy of sleep named slurmstepd under the step's title
    ("slurmstepd: [job.step]", what setproctitle leaves in cmdline). Root's in a root-owned dir is what a real one
    looks like; ``owner``'s is the attacker's imitation."""
    exe = bindir / "slurmstepd"
    if not exe.exists():
        shutil.copy("/bin/sleep", exe)
    argv = ["bash", "-c", f'exec -a "{title}" {exe} 120']
    return _spawn_as(owner, argv) if owner else subprocess.Popen(argv)


@pytest.fixture
def root_bin() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="slurmkit-sec-bin-"))  # root's, 0755
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_leftover_cannot_claim_another_users_running_job_by_its_environment(root_bin, attacker_dir):
    """proctrack/linuxproc: the victim's job 4242 runs here (a root slurmstepd [4242.batch]); the attacker's job 77
    ends leaving a process on its GPU that carries SLURM_JOB_ID=4242. Before: gpu_process_owners took the
    environment's word, the epilog filed the process under the victim's running job and left it alive ("held").
    Now only Slurm's cgroup or a real (root, root-owned binary) slurmstepd ancestor says whose it is: the leftover
    is job 77's user's, not another job's, and dies; an imitation slurmstepd of the attacker proves nothing."""
    from slurmkit.health.cleanup import kill_gpu_leftovers
    from slurmkit.health.host import gpu_process_owners, job_of_pid, running_jobs

    uid = pwd.getpwnam(ATTACKER).pw_uid
    stepd = _stepd(root_bin, "slurmstepd: [4242.batch]")
    fake_stepd = None
    leftover = subprocess.Popen(["setpriv", f"--reuid={ATTACKER}", f"--regid={pwd.getpwnam(ATTACKER).pw_gid}",
                                 "--clear-groups", "--", "sleep", "120"], env={"PATH": "/usr/bin:/bin",
                                                                                "SLURM_JOB_ID": "4242"},
                                stdin=subprocess.DEVNULL)
    try:
        _wait_comm(stepd, "slurmstepd")
        _wait_comm(leftover, "sleep")
        assert "4242" in running_jobs("/proc")  # the real one counts
        procs = {"0": [{"pid": leftover.pid}]}
        owners = gpu_process_owners("/proc", procs)
        assert owners[str(leftover.pid)]["job"] is None, owners
        res = kill_gpu_leftovers(procs, uid, "/proc", wait_s=2.0, owners=owners, job_id="77")
        assert [k["pid"] for k in res["killed"]] == [leftover.pid] and not res["held"], res
        assert leftover.wait(timeout=5) == -9
        # the attacker's own "slurmstepd [4243.batch]" adds no running job
        shutil.copy("/bin/sleep", attacker_dir / "slurmstepd")
        fake_stepd = _spawn_as(ATTACKER, ["bash", "-c", f'exec -a "slurmstepd: [4243.batch]" '
                                                        f'{attacker_dir / "slurmstepd"} 120'])
        _wait_comm(fake_stepd, "slurmstepd")
        assert "4243" not in running_jobs("/proc")
        # a task a real slurmstepd started is that job's (its parent chain), whatever its environment says: a root
        # slurmstepd [4242.0] (a root-owned copy of python named so) with the attacker's task as its child
        shutil.copy(os.path.realpath(USER_PYTHON), root_bin / "slurmstepd-py")
        os.rename(root_bin / "slurmstepd-py", root_bin / "slurmstepd")  # the sleep copy's running inode stays
        gid = pwd.getpwnam(ATTACKER).pw_gid
        step = subprocess.Popen(["bash", "-c", f'exec -a "slurmstepd: [4242.0]" {root_bin / "slurmstepd"} -c '
                                               f'"import subprocess, time; subprocess.Popen([\'setpriv\', '
                                               f'\'--reuid={uid}\', \'--regid={gid}\', \'--clear-groups\', '
                                               f'\'sleep\', \'120\'], env={{\'SLURM_JOB_ID\': \'9\'}}); '
                                               f'time.sleep(120)"'])
        try:
            end = time.monotonic() + 10
            kid = None
            while kid is None:
                assert time.monotonic() < end, "the step's task never started"
                kids = Path(f"/proc/{step.pid}/task/{step.pid}/children").read_text().split()
                kid = next((int(k) for k in kids if _comm(int(k)) == "sleep"), None)
                time.sleep(0.02)
            assert job_of_pid("/proc", kid) == "4242"
            procs = {"0": [{"pid": kid}]}
            owners = gpu_process_owners("/proc", procs)
            assert owners[str(kid)]["job"] == "4242" and owners[str(kid)]["running"], owners
            res = kill_gpu_leftovers(procs, uid, "/proc", wait_s=0.2, owners=owners, job_id="77")
            assert [h["pid"] for h in res["held"]] == [kid] and not res["killed"], res
            assert Path(f"/proc/{kid}").exists()
            os.kill(kid, 9)  # the child this test started, by its pid
        finally:
            step.kill()
            step.wait()
    finally:
        for p in (stepd, fake_stepd, leftover):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# --- (d) a kill reaches the process that was judged, not whoever has its pid now --------------------------------

def _take_pid(pid: int, spawn) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    """A new process at ``pid`` (free again): root sets the kernel's last pid (ns_last_pid, proc(5)) and forks, as
    a long-lived node's pid counter wraps into old numbers. Other forks on the machine may take it first: retried."""
    for _ in range(200):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = spawn()
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    raise AssertionError(f"pid {pid} could not be taken again (a busy machine forks too often?)")


def test_the_epilogs_kill_never_reaches_a_process_that_took_the_pid_over():
    """The epilog judges a GPU process (its owner, from /proc, at gather time) and kills it later by number. The
    process exits meanwhile and its pid goes to another process of the same user (here a fresh one at that very
    pid). Before: os.kill after a uid re-read killed the newcomer. Now the kill pins the pid (pidfd_open), checks
    the start time judged at gather time and signals through the pidfd: the newcomer lives."""
    from slurmkit.health.cleanup import kill_gpu_leftovers
    from slurmkit.health.host import gpu_process_owners, process_start_ticks

    uid = pwd.getpwnam(ATTACKER).pw_uid

    def sleeper() -> subprocess.Popen:
        return _spawn_as(ATTACKER, ["sleep", "120"])
    judged = sleeper()
    newcomer = None
    try:
        _wait_comm(judged, "sleep")
        pid = judged.pid
        procs = {"0": [{"pid": pid}]}
        owners = gpu_process_owners("/proc", procs)
        judged_start = process_start_ticks("/proc", pid)
        judged.kill()
        judged.wait()
        newcomer = _take_pid(pid, sleeper)
        _wait_comm(newcomer, "sleep")
        res = kill_gpu_leftovers(procs, uid, "/proc", wait_s=0.2, owners=owners, job_id="77")
        assert not res["killed"] and [c["pid"] for c in res["changed"]] == [pid], res
        assert newcomer.poll() is None and owners[str(pid)]["start"] == judged_start
        # the mechanism itself: the wrong uid or start time is refused, the right one is signalled through the pidfd
        from slurmkit.health.cleanup import signal_if_same

        start = process_start_ticks("/proc", pid)
        assert signal_if_same(pid, 9, uid + 1, start) == "changed"
        assert signal_if_same(pid, 9, uid, (start or 0) + 1) == "changed"
        assert newcomer.poll() is None
        assert signal_if_same(pid, 9, uid, start) == "sent"
        assert newcomer.wait(timeout=5) == -9
        assert signal_if_same(pid, 9, uid, start) == "gone"
    finally:
        for p in (judged, newcomer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# --- (c) the hooks' records are root's to read -----------------------------------------------------------------

@pytest.mark.parametrize("private", [False, True])
def test_hook_records_are_not_readable_by_other_users(tmp_path, monkeypatch, private):
    """An epilog's record names the job, its user's uid and the pids it killed. Before: last-epilog.json and
    history.jsonl were 0644 and any user on the node read them (cat works from a traversable state dir). Now 0640,
    0600 where slurm.conf says PrivateData=jobs; a history an older version left 0644 is narrowed on the next line."""
    from slurmkit.health.hooks import run_hook, write_claim
    from tests.unit.test_health_hooks import FakeSlurm, env

    inv = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "lab.yaml").read_text())
    inv["hooks"] = {"prolog": True, "epilog": True, "checks": {"ib": False, "slurmd_oom": False}}
    inventory = tmp_path / "etc" / "slurmkit.yaml"
    inventory.parent.mkdir()
    inventory.write_text(yaml.safe_dump(inv))
    conf = tmp_path / "etc" / "slurm.conf"
    conf.write_text("ClusterName=lab\nInclude private.conf\n")
    (tmp_path / "etc" / "private.conf").write_text("PrivateData=accounts,jobs\n" if private else "# none\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    # a state dir every user can walk into (the attacker's reach is then the files' own modes)
    sdir = Path(tempfile.mkdtemp(prefix="slurmkit-sec-state-"))
    try:
        sdir.chmod(0o755)
        ndir = sdir / "node1"
        ndir.mkdir(mode=0o755)
        ndir.chmod(0o755)
        (ndir / "history.jsonl").write_text('{"old": 1}\n')
        (ndir / "history.jsonl").chmod(0o644)  # what an older slurmkit left, its rotated half too
        (ndir / "history.jsonl.1").write_text('{"older": 1}\n')
        (ndir / "history.jsonl.1").chmod(0o644)
        e = env(tmp_path, inventory, FakeSlurm(), "epilog", job_id="4242", job_uid=pwd.getpwnam("bin").pw_uid,
                job_user="bin", job_gpus=[0], shm_dir=str(tmp_path / "noshm"))
        e.state_dir = str(sdir)
        rep = run_hook(e)
        assert rep.job_id == "4242"
        write_claim(str(ndir), "epilog", "4242", "x")
        want = 0o600 if private else 0o640
        files = [ndir / "last-epilog.json", ndir / "history.jsonl", ndir / "history.jsonl.1", ndir / "claim-epilog.json"]
        assert {f.name: oct(f.stat().st_mode & 0o777) for f in files} == {f.name: oct(want) for f in files}
        assert all(f.stat().st_uid == 0 and f.stat().st_gid == 0 for f in files)
        assert "4242" in (ndir / "last-epilog.json").read_text()
        for f in files:
            r = as_user(ATTACKER, ["cat", str(f)], check=False)
            assert r.returncode != 0 and "Permission denied" in r.stderr, (f, r.stdout[:200])
    finally:
        shutil.rmtree(sdir, ignore_errors=True)
