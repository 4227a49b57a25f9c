"""The real slurmctld parse (Debian's 22.05 here): every preset renders files it accepts with zero error
lines, and the failures slurmctld does not treat as fatal are still caught.

Presets targeting a newer release are rendered for 22.05 where their features allow (tree topologies);
the GB200 preset needs topology/block (23.11+) and cannot be parsed by a 22.05 slurmctld: for it the
test asserts that the parse is skipped with the version reason and the static checks pass.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurmkit.generate import generate
from slurmkit.generate.validate import real_parse, static_check, validate
from slurmkit.model.load import load_cluster
from tests.conftest import needs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = needs(bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()), "needs Debian's slurmctld")

PARSEABLE_ON_22_05 = ["lab", "dgx-h100-superpod-su", "mixed-pcie", "fat-tree-4096"]


@pytest.mark.parametrize("preset", PARSEABLE_ON_22_05)
def test_preset_passes_real_slurmctld(preset: str) -> None:
    files = generate(load_cluster(ROOT / "examples" / f"{preset}.yaml"), version="22.05")
    rep = validate(files, "22.05")
    assert rep.real_ok is True, (rep.real, rep.errors)
    assert rep.errors == []


def test_block_preset_is_skipped_with_reason() -> None:
    files = generate(load_cluster(ROOT / "examples" / "gb200-nvl72.yaml"))
    assert static_check(files).errors == []
    rp = real_parse(files)
    assert rp.ok is None and "targets Slurm 25.05, installed slurmctld is 22.05" in rp.message


@pytest.fixture(scope="module")
def lab_files() -> dict[str, str]:
    return generate(load_cluster(ROOT / "examples" / "lab.yaml"))


@pytest.mark.parametrize(
    ("name", "old", "new", "expect"),
    [
        # not fatal to slurmctld: only the error line tells
        ("slurm.conf", "Gres=gpu:h100:8", "Gres=gpu:h100:8,nic:2", "Invalid GRES configured"),
        ("topology.conf", "SwitchName=spine", "SwitchName=leaf3 Nodes=ghost[1-2]\nSwitchName=spine", "Invalid hostnames in switch configuration"),
        ("gres.conf", "AutoDetect=off", "AutoDetect=off\nTypo=x", "unrecognized key: Typo"),
        # fatal
        ("slurm.conf", "SelectType=select/cons_tres", "SelectType=select/nonexistent", "Can't find plugin"),
        ("cgroup.conf", "ConstrainCores=yes", "ConstrainCores=yes\nBogus=yes", "cgroup.conf"),
    ],
)
def test_real_parse_catches_what_slurmctld_logs(lab_files: dict[str, str], name: str, old: str, new: str, expect: str) -> None:
    files = dict(lab_files)
    files[name] = files[name].replace(old, new)
    rp = real_parse(files, "22.05")
    assert rp.ok is False and any(expect in e for e in rp.errors), rp
