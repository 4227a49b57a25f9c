"""The exporter against an ordinary user (issue 32 item 5): a user's 1,100 idle connections must not stop root's
exporter (run under systemd's 1,024-fd limit) from answering Prometheus, and per-user series are not published
where the cluster's PrivateData hides other users' jobs.

Before the fix: one thread and one fd per idle connection until accept failed with EMFILE, so the scrape timed
out; and ``slurmkit_jobs{user="bin"}`` was there for anyone who could reach the port under PrivateData=jobs."""

from __future__ import annotations

import os
import re
import resource
import select
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, lab_run
from tests.security.conftest import ATTACKER, USER_PYTHON, VICTIM, as_user

pytestmark = pytest.mark.lab

FD_LIMIT = 1024  # systemd's default soft LimitNOFILE for a service
IDLE = 1100

# the attacker's script (Debian's python3, as `games`): N connections one after another, as the review's did
# (a thread-per-connection server takes them in until its fds run out; a connect not taken within 0.5 s is tried
# again, for 120 s at most), never a byte sent; it holds them until its stdin closes
HOLD = r"""
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
port, n = int(sys.argv[1]), int(sys.argv[2])
held, deadline = [], time.monotonic() + 120
while len(held) < n and time.monotonic() < deadline:
    s = socket.socket()
    s.settimeout(0.5)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    held.append(s)
print(len(held), flush=True)
sys.stdin.read()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _env(lab) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {**os.environ, **lab.env, "PYTHONPATH": str(ROOT)}


def _exporter(lab, port: int, log: Path) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "slurmkit.cli.main", "exporter", str(lab.etc / "slurmkit.yaml"),
                                 "--listen", f"127.0.0.1:{port}", "--cache", "1"], stdout=out, stderr=out,
                                stdin=subprocess.DEVNULL, env=_env(lab), cwd=ROOT, preexec_fn=_limit_fds)


def _wait_listening(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"exporter not listening: {log.read_text()}")


def _settle(pid: int, timeout: float = 90) -> None:
    """Until the process's fd count has not moved for 2 s: it has accepted what it will of the flood."""
    last, still, deadline = -1, 0, time.monotonic() + timeout
    while still < 4 and time.monotonic() < deadline:
        n = len(os.listdir(f"/proc/{pid}/fd"))
        still = still + 1 if n == last else 0
        last = n
        time.sleep(0.5)


def _scrape(port: int, timeout: float) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:  # noqa: S310
        return r.read().decode()


def test_a_users_idle_connections_do_not_stop_the_scrape(sec_lab, tmp_path):
    port = _free_port()
    log = tmp_path / "exporter.log"
    exp = _exporter(sec_lab, port, log)
    attacker = None
    try:
        _wait_listening(port, exp, log)
        assert "slurmkit_exporter_up 1" in _scrape(port, 30)  # the lab answers; the first batch is done
        attacker = subprocess.Popen(["runuser", "-u", ATTACKER, "--", USER_PYTHON, "-c", HOLD, str(port), str(IDLE)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([attacker.stdout], [], [], 150)
        assert ready, "the attacker's script did not report"
        held = int(attacker.stdout.readline() or 0)  # type: ignore[union-attr]
        _settle(exp.pid)  # the exporter has taken in all it will (and past its 1 s cache: a fresh batch)
        text = _scrape(port, timeout=2)  # Prometheus' budget, with room: the scrape must not wait on the flood
        assert "slurmkit_exporter_up 1" in text and "slurmkit_cluster_gpus{" in text
        # every connect of the attacker succeeded (the server kept accepting): 1,100 held from its side
        assert held == IDLE, held
        fds = len(os.listdir(f"/proc/{exp.pid}/fd"))
        threads = int(re.search(r"^Threads:\s+(\d+)", Path(f"/proc/{exp.pid}/status").read_text(), re.M)[1])  # type: ignore[index]
        print(f"exporter under the attacker's {held} idle connections: {fds} fds, {threads} threads")
        assert fds < FD_LIMIT - 64 and threads < 32, (fds, threads)
    finally:
        if attacker is not None:
            attacker.kill()
            attacker.wait(10)
        exp.terminate()
        try:
            exp.wait(10)
        except subprocess.TimeoutExpired:
            exp.kill()
            exp.wait()


def _once(lab) -> str:  # type: ignore[no-untyped-def]
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "exporter", str(lab.etc / "slurmkit.yaml"),
                        "--once"], capture_output=True, text=True, env=_env(lab), cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _reconfigure(lab, want: str) -> None:  # type: ignore[no-untyped-def]
    lab_run(lab, ["scontrol", "reconfigure"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        shown = lab_run(lab, ["scontrol", "show", "config"]).stdout
        if re.search(rf"^PrivateData\s*=\s*{want}\s*$", shown, re.M):
            return
        time.sleep(0.5)
    raise AssertionError(f"PrivateData did not become {want}")


def test_private_data_jobs_hides_user_labels(sec_lab):
    """The victim's running job is counted either way; its user name is published only while slurmctld's
    PrivateData lets other users see it (slurm.conf(5) 22.05 PrivateData=jobs: users cannot view other users'
    jobs -- the attacker's squeue shows so)."""
    conf = sec_lab.conf.read_text()
    jid = as_user(VICTIM, ["sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "sleep 300"],
                  env=sec_lab.env).stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while "RUNNING" not in lab_run(sec_lab, ["squeue", "-h", "-j", jid, "-o", "%T"]).stdout:
            assert time.monotonic() < deadline, "the victim's job did not start"
            time.sleep(0.5)
        assert re.search(r'slurmkit_jobs\{[^}]*user="bin"[^}]*state="running"\} 1', _once(sec_lab))
        assert jid in as_user(ATTACKER, ["squeue", "-h", "-o", "%i"], env=sec_lab.env).stdout
        sec_lab.conf.write_text(conf.rstrip("\n") + "\nPrivateData=jobs\n")
        _reconfigure(sec_lab, "jobs")
        assert jid not in as_user(ATTACKER, ["squeue", "-h", "-o", "%i"], env=sec_lab.env).stdout
        text = _once(sec_lab)
        assert 'user="bin"' not in text, text
        assert re.search(r'slurmkit_jobs\{[^}]*user=""[^}]*state="running"\} 1', text), text
    finally:
        lab_run(sec_lab, ["scancel", jid], check=False)
        if sec_lab.conf.read_text() != conf:
            sec_lab.conf.write_text(conf)
            _reconfigure(sec_lab, "none")
