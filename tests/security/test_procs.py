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

from slurmkit.health.expect import Expectations
from slurmkit.health.host import HostPaths
from slurmkit.health.policy import CHECK_DEFAULTS, parse_policy
from slurmkit.health.result import Status
from slurmkit.health.runner import RunSpec, run_checks
from tests.security.conftest import ATTACKER, USER_PYTHON

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
