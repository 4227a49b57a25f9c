"""`slurmkit lab up --configless`: slurmd fetch their files from slurmctld (SlurmctldParameters=enable_configless,
`slurmd --conf-server`) and jobs run."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit.lab import Lab, LabSpec
from tests.conftest import _base, _root_dir, lab_release, start_lab

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clab() -> Iterator[Lab]:
    # its own ports: clear of the session lab, make_lab's (base + 200 k), the nodes (+3000) and power (+3200) labs
    spec = LabSpec(dir=f"{_root_dir()}-configless", port_base=_base() + 3600, nodes=2, configless=True,
                   slurm=lab_release())
    the_lab = start_lab(spec)
    try:
        yield the_lab
    finally:
        the_lab.down()


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def test_slurmd_run_from_the_controllers_config_and_jobs_run(clab: Lab) -> None:
    assert "SlurmctldParameters=enable_configless" in (clab.etc / "slurm.conf").read_text()
    for node in ("node1", "node2"):
        argv = _cmdline(clab.running_pids()[f"slurmd-{node}"])
        assert "--conf-server" in argv and "-f" not in argv, argv
        assert argv[argv.index("--conf-server") + 1] == f"127.0.0.1:{clab.spec.ctld_port}"
        cached = clab.dir / "spool" / node / "conf-cache" / "slurm.conf"
        assert cached.read_text() == (clab.etc / "slurm.conf").read_text()
    out = subprocess.run([clab.exe("srun"), "-N2", "hostname"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **clab.env}, check=True).stdout
    assert sorted(out.split()) == ["node1", "node2"]
