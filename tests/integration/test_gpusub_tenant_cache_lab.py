"""gpusub on an accounting cluster asks slurmdbd once a minute, not on every submit (issue 34 item 7).

Real slurmctld + slurmdbd + MariaDB (`lab up --accounting`, the lab's tenants: team-a, team-b). A `sacctmgr` on PATH
in front of the real one counts the calls. What the cache must never do: refuse a job on an old answer, or miss
an association the user just got.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkit.lab import Lab
from tests.conftest import ROOT

pytestmark = [pytest.mark.lab, pytest.mark.releases]


@pytest.fixture(scope="module")
def alab(make_lab) -> Lab:  # type: ignore[no-untyped-def]
    return make_lab(nodes=2, gpus_per_node=4, nodes_per_leaf=2, accounting=True)


def _sh(lab: Lab, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env={**os.environ, **lab.env}, capture_output=True, text=True, timeout=60, check=True)


def _assoc_mgr_has(lab: Lab, account: str) -> bool:
    out = _sh(lab, "scontrol", "-o", "show", "assoc_mgr", "flags=assoc").stdout
    return any(f"Account={account} UserName=root(" in line for line in out.splitlines())


def test_slurmdbd_is_asked_once_and_a_cached_answer_never_refuses(alab: Lab, tmp_path: Path) -> None:
    log = tmp_path / "sacctmgr.calls"
    shim = tmp_path / "bin"
    shim.mkdir()
    real = shutil.which("sacctmgr", path=alab.env.get("PATH") or os.environ["PATH"])
    assert real
    (shim / "sacctmgr").write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nexec {real} \"$@\"\n")
    (shim / "sacctmgr").chmod(0o755)
    env = {**os.environ, **alab.env, "PATH": f"{shim}:{alab.env.get('PATH') or os.environ['PATH']}",
           "SLURMKIT_INVENTORY": str(alab.etc / "slurmkit.yaml"), "SLURMKIT_STATE_DIR": str(tmp_path / "state"),
           "GPUSUB_RUN_ROOT": str(tmp_path / "runs"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": str(ROOT)}
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")

    def gpusub(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "slurmkit.cli.gpusub", str(script), "--nodes", "1",
                               "--gpus-per-node", "1", "--launcher", "srun", "--dry-run", "--explain", *args],
                              env=env, capture_output=True, text=True, timeout=60)

    def calls() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    _sh(alab, "sacctmgr", "-i", "add", "user", "root", "account=team-a", "cluster=lab")
    deadline = time.monotonic() + 30
    while not _assoc_mgr_has(alab, "team-a") and time.monotonic() < deadline:
        time.sleep(0.5)
    first = gpusub("--account", "team-a")
    assert first.returncode == 0, first.stderr
    assert "account: team-a (--account)" in first.stdout and \
        "qos: normal (the default QOS of your association with team-a" in first.stdout, first.stdout
    assert calls() == 2  # the user's associations and the QOS limits
    again = gpusub("--account", "team-a")
    assert again.returncode == 0, again.stderr
    assert calls() == 2, log.read_text()  # answered from the cache: no slurmdbd round trip
    assert [x for x in again.stdout.splitlines() if x.startswith("# account") or "qos:" in x] == \
        [x for x in first.stdout.splitlines() if x.startswith("# account") or "qos:" in x]
    cache = tmp_path / "cache" / "slurmkit" / "gpusub-tenant.json"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600 and stat.S_IMODE(cache.parent.stat().st_mode) == 0o700

    # a new association (slurmctld shows it at once): the cached answer is not the one for it
    _sh(alab, "sacctmgr", "-i", "add", "user", "root", "account=team-b", "cluster=lab")
    deadline = time.monotonic() + 30
    while not _assoc_mgr_has(alab, "team-b") and time.monotonic() < deadline:
        time.sleep(0.5)
    b = gpusub("--account", "team-b")
    assert b.returncode == 0, b.stderr
    assert "qos: normal (the default QOS of your association with team-b" in b.stdout, b.stdout
    assert calls() == 4
    # team-b allows normal and scavenger: --qos high is refused (on a fresh answer)
    refused = gpusub("--account", "team-b", "--qos", "high")
    assert refused.returncode != 0 and "--qos high: not allowed for your association with team-b" in refused.stderr
    n = calls()
    # the admin allows high: the cached answer (a few seconds old) would refuse; gpusub asks slurmdbd again first
    _sh(alab, "sacctmgr", "-i", "modify", "user", "root", "where", "account=team-b", "set", "qos+=high")
    ok = gpusub("--account", "team-b", "--qos", "high")
    assert ok.returncode == 0, ok.stderr
    assert calls() == n + 2
