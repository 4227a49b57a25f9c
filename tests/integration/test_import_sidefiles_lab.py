"""A site whose slurmdbd.conf and job_container.conf slurmkit generated is re-adopted from its files alone (issue 33
item 8), judged by the lab release's own daemons: the lab's generated directory (its slurmdbd.conf carries the
lab's ports, paths, munge socket and SlurmUser from its overlay) is imported with no overlay and no inventory,
`conf diff` of the import is empty, and a one-line change of the imported inventory applied with `--execute`
restarts the real slurmdbd on the site's own file, edited in that one line (its comments, order and the lab's keys
kept), after which sacctmgr answers again.

Cost: one 1-node lab with --accounting --cgroups (MariaDB + slurmdbd), one apply that adds job_container.conf, one import and
one apply that restarts slurmdbd: about 40 s on 22.05, 25 s on 24.11 and 26.05."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurmkit.lab.config import OVERRIDES_FILE

pytestmark = [pytest.mark.lab, pytest.mark.releases]
ROOT = Path(__file__).resolve().parents[2]


def sk(lab, *args: str) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **lab.env}, timeout=300)


@pytest.fixture(scope="module")
def ilab(make_lab) -> Iterator:  # type: ignore[no-untyped-def]
    # --cgroups: job_container/tmpfs needs PrologFlags=Contain, which needs proctrack/cgroup
    lab = make_lab(nodes=1, gpus_per_node=1, nodes_per_leaf=1, accounting=True, cgroups=True)
    base = Path(tempfile.mkdtemp(prefix="slurmkit-jobtmp-", dir="/var/tmp"))  # slurmd 22.05 refuses one under /tmp
    base.chmod(0o755)
    lab.jobtmp = base
    yield lab
    shutil.rmtree(base, ignore_errors=True)


def test_a_generated_lab_is_readopted_from_its_files_and_slurmdbd_runs_the_edited_file(ilab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the generated site: the lab's inventory with a per-job tmpfs, written through the lab's overlay
    inv = yaml.safe_load((ilab.etc / "slurmkit.yaml").read_text())
    gen = copy.deepcopy(inv)
    gen["runtime"] = {"tmpfs": {"base_path": str(ilab.jobtmp)}}
    src = tmp_path / "generated.yaml"
    src.write_text(yaml.safe_dump(gen, sort_keys=False))
    first = sk(ilab, "conf", "apply", str(src), "--to", str(ilab.etc), "--overrides", str(ilab.etc / OVERRIDES_FILE),
               "--execute", "--allow-disruptive", "--timeout", "120")
    assert first.returncode == 0, first.stdout + first.stderr
    # re-adopted from the files alone: no overlay, no inventory
    imported = tmp_path / "site.yaml"
    imp = sk(ilab, "conf", "import", str(ilab.etc), "-o", str(imported), "--slurm-version", ilab.release)
    assert imp.returncode == 0, imp.stderr
    data = yaml.safe_load(imported.read_text())
    assert data["accounting"]["host"] == inv["accounting"]["host"]
    assert data["runtime"]["tmpfs"]["base_path"] == str(ilab.jobtmp)
    assert data["slurmdbd_conf"]["SlurmUser"] == "root"  # the lab's overlay, now the site's own key
    diff = sk(ilab, "conf", "diff", str(imported), "--against", str(ilab.etc), "--exit-code")
    assert diff.returncode == 0 and "nothing to do" in diff.stdout, diff.stdout + diff.stderr
    # one change: the real slurmdbd restarts on the site's file with that line edited and nothing else
    before = (ilab.etc / "slurmdbd.conf").read_text()
    pid = ilab.running_pids()["slurmdbd"]
    data["accounting"]["purge"] = {**data["accounting"].get("purge", {}), "jobs": "36month"}
    imported.write_text(yaml.safe_dump(data, sort_keys=False))
    ap = sk(ilab, "conf", "apply", str(imported), "--to", str(ilab.etc), "--execute", "--allow-disruptive",
            "--timeout", "120")
    assert ap.returncode == 0, ap.stdout + ap.stderr
    assert "[restart] slurmdbd.conf: PurgeJobAfter: (absent) -> 36month" in ap.stdout, ap.stdout
    assert "restart slurmdbd (rollout.restart_slurmdbd)" in ap.stdout
    after = (ilab.etc / "slurmdbd.conf").read_text()
    assert after.splitlines()[:len(before.splitlines())] == before.splitlines()  # every line kept, header included
    assert after.splitlines()[len(before.splitlines()):] == ["PurgeJobAfter=36month"]
    assert (ilab.etc / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600
    assert ilab.running_pids().get("slurmdbd") not in (None, pid)
    out = subprocess.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], env={**os.environ, **ilab.env},
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert inv["cluster"] in out, out
