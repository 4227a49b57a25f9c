"""What the lab offers `slurmkit nodes add` and what it refuses, before anything starts or changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.lab import Lab, LabSpec
from slurmkit.lab.config import OVERRIDES_FILE
from slurmkit.lab.elastic import LabSite, lab_for_conf

ROOT = Path(__file__).resolve().parents[2]


def test_lab_up_refuses_spare_room_in_a_block_topology(tmp_path: Path) -> None:
    # `nodes add` refuses block topologies, so `lab up` offers no room there: exit 2, one line, nothing made
    d = tmp_path / "lab"
    r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "lab", "up", "--topology", "block", "--spare", "4",
                        "--slurm", "24.11", "--dir", str(d), "--port-base", "39100"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--spare: `slurmkit nodes add` does not grow a block topology" in r.stderr
    assert not d.exists()


def _lab_dir(tmp_path: Path, **kw: object) -> Lab:
    spec = LabSpec(dir=str(tmp_path / "lab"), nodes=2, spare=2, **kw)  # type: ignore[arg-type]
    lab = Lab(spec)
    lab.etc.mkdir(parents=True)
    (lab.dir / "lab.json").write_text(json.dumps(asdict(spec)))
    (lab.etc / "slurm.conf").write_text("")
    (lab.etc / OVERRIDES_FILE).write_text("slurm_conf: {}\n")
    return lab


@pytest.mark.parametrize(("configless", "release", "refused"), [
    (True, "24.11", True), (True, "25.05", True), (True, "22.05", False), (False, "24.11", False),
])
def test_nodes_add_on_a_configless_24_11_lab_is_refused_up_front(tmp_path: Path, configless: bool, release: str,
                                                                  refused: bool) -> None:
    lab = _lab_dir(tmp_path, configless=configless)
    found = lab_for_conf(lab.conf)
    assert found is not None
    site = LabSite(found)
    if refused:
        with pytest.raises(UsageError, match="not on a --configless lab on Slurm 24.11: .*fetch_config.c"):
            site.check_add(release)
    else:
        site.check_add(release)


@pytest.mark.parametrize(("release", "refused"), [("24.11", True), ("22.05", False)])
def test_nodes_add_on_a_cgroups_24_11_lab_is_refused_up_front(tmp_path: Path, release: str, refused: bool) -> None:
    found = lab_for_conf(_lab_dir(tmp_path, cgroups=True).conf)
    assert found is not None
    if refused:
        with pytest.raises(UsageError, match="not on a --cgroups lab on Slurm 24.11: .*outside the lab's group"):
            LabSite(found).check_add(release)
    else:
        LabSite(found).check_add(release)


def test_the_refusal_comes_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the edge: `nodes add` on such a lab exits 2 with one line, the config dir untouched
    from click.testing import CliRunner

    from slurmkit.backend.cli import CLIBackend
    from slurmkit.cli.nodes import nodes

    lab = _lab_dir(tmp_path, configless=True)
    (lab.etc / "slurmkit.yaml").write_text("name: lab\n")
    before = {p.name: p.read_bytes() for p in lab.etc.iterdir()}
    monkeypatch.setattr(CLIBackend, "version", lambda self: "24.11.5")
    monkeypatch.setenv("SLURM_CONF", str(lab.conf))
    r = CliRunner().invoke(nodes, ["add", "node3", "--group", "more"], env={**os.environ})
    assert isinstance(r.exception, UsageError) and r.exception.exit_code == 2
    assert "not on a --configless lab" in str(r.exception)
    assert {p.name: p.read_bytes() for p in lab.etc.iterdir()} == before
