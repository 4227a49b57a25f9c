"""Golden files for every preset (and the lab) at the releases each one targets.

Regenerate after an intended change with ``SLURMKIT_REGEN_GOLDEN=1 pytest tests/unit/test_generate_golden.py``:
the test then rewrites tests/golden/<preset>/<version>/ and prints the unified diff of what changed.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from slurmkit.generate import generate
from slurmkit.model.load import load_cluster

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

# preset -> releases rendered: the inventory's own target plus the ones whose output differs
PRESETS: dict[str, tuple[str, ...]] = {
    "lab": ("22.05",),
    "dgx-h100-superpod-su": ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11"),
    "gb200-nvl72": ("23.11", "24.05", "24.11", "25.05", "25.11"),
    "mixed-pcie": ("22.05", "23.02", "24.11", "25.05"),
    "fat-tree-4096": ("22.05", "23.11", "25.11"),
}
CASES = [(p, v) for p, vs in PRESETS.items() for v in vs]


def render(preset: str, version: str) -> dict[str, str]:
    return generate(load_cluster(ROOT / "examples" / f"{preset}.yaml"), version=version, conf_dir="/etc/slurm")


def test_every_example_has_goldens() -> None:
    examples = {p.stem for p in (ROOT / "examples").glob("*.yaml") if p.stem != "compose"}
    assert examples <= set(PRESETS), f"examples without golden files: {sorted(examples - set(PRESETS))}"


@pytest.mark.parametrize(("preset", "version"), CASES, ids=[f"{p}-{v}" for p, v in CASES])
def test_golden(preset: str, version: str) -> None:
    files = render(preset, version)
    d = GOLDEN / preset / version
    if os.environ.get("SLURMKIT_REGEN_GOLDEN"):
        d.mkdir(parents=True, exist_ok=True)
        for stale in set(p.name for p in d.iterdir()) - set(files):
            print(f"--- removed {preset}/{version}/{stale}")
            (d / stale).unlink()
        for name, text in files.items():
            old = (d / name).read_text() if (d / name).exists() else ""
            if old != text:
                print("".join(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                   f"a/{preset}/{version}/{name}", f"b/{preset}/{version}/{name}")))
                (d / name).write_text(text)
        return
    assert d.is_dir(), f"no golden files in {d}; run with SLURMKIT_REGEN_GOLDEN=1"
    assert sorted(p.name for p in d.iterdir()) == sorted(files)
    for name, text in files.items():
        want = (d / name).read_text()
        if want != text:
            diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "golden", "now"))
            pytest.fail(f"{preset}/{version}/{name} differs from its golden file "
                        f"(SLURMKIT_REGEN_GOLDEN=1 to accept):\n{diff}")


def test_output_is_deterministic() -> None:
    assert render("mixed-pcie", "23.02") == render("mixed-pcie", "23.02")


def test_version_specific_topology_files() -> None:
    """Block topology: BlockLevels on 23.11, BlockSizes on 24.05-24.11, topology.yaml from 25.05."""
    assert "BlockLevels=0,1,2" in render("gb200-nvl72", "23.11")["topology.conf"]
    assert "BlockSizes=18,36,72" in render("gb200-nvl72", "24.11")["topology.conf"]
    f = render("gb200-nvl72", "25.05")
    assert "topology.conf" not in f and "block_sizes:" in f["topology.yaml"]
    assert "topology.yaml" in render("dgx-h100-superpod-su", "25.11")
    assert "topology.conf" in render("dgx-h100-superpod-su", "24.11")
