"""gpusub status/wait/cancel --remote https://... through slurmrestd with auth/jwt (issue 34 item 3), on a lab of
its own: its slurm.conf gains AuthAltTypes=auth/jwt with a key created 0600 from the open on, slurmctld restarts,
and Debian's slurmrestd (rest_auth/jwt, openapi/v0.0.38) runs as nobody on a loopback port. The laptop side has no
Slurm (its Slurm commands are stand-ins that record any call and fail) and only the token file.

Host release only: the cached 24.11/26.05 roots carry no slurmrestd (slurmkit/lab/image.py's package list).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit.safefs import write_new
from tests.conftest import ROOT, free_tcp_port, lab_run

pytestmark = pytest.mark.lab

USER = "games"
SLURM_CMDS = ("sbatch", "srun", "salloc", "squeue", "scontrol", "scancel", "sinfo", "sacct", "sacctmgr")


@pytest.fixture(scope="module")
def rest(make_lab, tmp_path_factory) -> Iterator[dict]:  # type: ignore[no-untyped-def]
    lab = make_lab(nodes=1, gpus_per_node=1, nodes_per_leaf=1)
    key = Path(lab.dir) / "jwt.key"
    write_new(key, os.urandom(32), 0o600)  # the HS256 key: slurmctld's (SlurmUser root here) alone, from the open on
    # slurm.conf(5) of slurm-22-05-8-1: AuthAltTypes=auth/jwt, AuthAltParameters=jwt_key=<path>
    with open(lab.conf, "a") as f:
        f.write(f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={key}\n")
    lab.restart_slurmctld()
    tmp = tmp_path_factory.mktemp("laptop-rest")
    tok = lab_run(lab, ["scontrol", "token", f"username={USER}", "lifespan=1800"]).stdout.strip()
    assert tok.startswith("SLURM_JWT="), tok
    token_file = tmp / "token"
    write_new(token_file, tok.split("=", 1)[1] + "\n", 0o600)
    port = free_tcp_port(720)
    log = tmp / "slurmrestd.log"
    # slurmrestd(8) of 22.05: rest_auth/jwt needs SLURM_JWT=daemon; it refuses to run as root or SlurmUser (-u/-g)
    with open(log, "w") as logf:
        proc = subprocess.Popen(["slurmrestd", "-f", str(lab.conf), "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38",
                                 "-u", "nobody", "-g", "nogroup", f"127.0.0.1:{port}"],
                                env={**os.environ, **lab.env, "SLURM_JWT": "daemon"}, stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 20
        while True:
            assert proc.poll() is None, log.read_text()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < end, log.read_text()
            time.sleep(0.1)
        fake = tmp / "no-slurm"
        fake.mkdir()
        marker = tmp / "slurm-called"
        for cmd in SLURM_CMDS:
            (fake / cmd).write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\nexit 99\n')
            os.chmod(fake / cmd, 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "GPUSUB"))}
        env.update(PATH=f"{fake}:/usr/bin:/bin", PYTHONPATH=str(ROOT))
        yield {"lab": lab, "url": f"http://{USER}@127.0.0.1:{port}", "token": token_file, "env": env,
               "marker": marker, "tmp": tmp}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _gpusub(rest: dict, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.gpusub", *args], env=env or rest["env"],
                          capture_output=True, text=True, timeout=timeout)


def _sbatch(lab, *args: str, user: str = USER) -> str:  # type: ignore[no-untyped-def]
    out = lab_run(lab, ["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null",
                        "-N1", "-t", "5", *args]).stdout.strip()
    assert re.fullmatch(r"[0-9]+", out), out
    return out


def test_status_wait_cancel_through_slurmrestd_with_a_jwt(rest: dict) -> None:
    lab, url, jwt = rest["lab"], rest["url"], ("--jwt-file", str(rest["token"]))
    sleeper = _sbatch(lab, "--wrap", "sleep 300")
    failing = _sbatch(lab, "--wrap", "sleep 1; exit 3")
    wait = _gpusub(rest, "wait", "--remote", url, *jwt, failing)
    assert wait.returncode == 3, wait.stdout + wait.stderr
    assert re.search(rf"^{failing} FAILED .*exit=3:0 \[slurmrestd\]", wait.stdout, re.M), wait.stdout
    st = _gpusub(rest, "status", "--remote", url, *jwt, sleeper, "99999")
    assert st.returncode == 1, st.stdout + st.stderr  # the unknown id
    assert re.search(rf"^{sleeper} (RUNNING|PENDING) .*\[slurmrestd\]", st.stdout, re.M), st.stdout
    assert re.search(r"^99999 UNKNOWN", st.stdout, re.M), st.stdout
    # the token in SLURM_JWT works as the file does
    js = _gpusub(rest, "status", "--json", "--remote", url, sleeper,
                 env={**rest["env"], "SLURM_JWT": rest["token"].read_text().strip()})
    assert js.returncode == 0 and '"source": "slurmrestd"' in js.stdout, js.stdout + js.stderr
    cancel = _gpusub(rest, "cancel", "--remote", url, *jwt, sleeper)
    assert cancel.returncode == 0 and f"cancelled job {sleeper}" in cancel.stdout, cancel.stdout + cancel.stderr
    end = time.monotonic() + 30
    while "CANCELLED" not in lab_run(lab, ["scontrol", "show", "job", sleeper]).stdout:
        assert time.monotonic() < end, "the job was not cancelled"
        time.sleep(0.3)
    assert not rest["marker"].exists(), rest["marker"].read_text()


def test_the_token_is_the_users_own_and_guarded(rest: dict) -> None:
    lab, url = rest["lab"], rest["url"]
    root_job = _sbatch(lab, "--wrap", "sleep 300", user="root")
    try:
        # games' token cannot cancel root's job: slurmctld refuses it (the token is its user, no more)
        other = _gpusub(rest, "cancel", "--remote", url, "--jwt-file", str(rest["token"]), root_job)
        assert other.returncode != 0 and "ermission denied" in other.stderr, other.stdout + other.stderr
        assert "RUNNING" in lab_run(lab, ["scontrol", "show", "job", root_job]).stdout or "PENDING" in lab_run(
            lab, ["scontrol", "show", "job", root_job]).stdout
    finally:
        lab_run(lab, ["scancel", root_job], check=False)
    loose = rest["tmp"] / "loose-token"
    loose.write_text(rest["token"].read_text())
    os.chmod(loose, 0o644)
    r = _gpusub(rest, "status", "--remote", url, "--jwt-file", str(loose), "1")
    assert r.returncode == 2 and "mode 0600" in r.stderr, r.stderr
    r = _gpusub(rest, "status", "--remote", "http://games@10.1.2.3:6820", "--jwt-file", str(rest["token"]), "1")
    assert r.returncode == 2 and "in the clear" in r.stderr, r.stderr
    r = _gpusub(rest, "logs", "--remote", url, "1")
    assert r.returncode == 2 and "slurmrestd cannot read" in r.stderr, r.stderr
    r = _gpusub(rest, "status", "--remote", url, "1")  # no SLURM_JWT, no --jwt-file
    assert r.returncode == 2 and "no token" in r.stderr, r.stderr
