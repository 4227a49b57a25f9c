"""A key written twice in a YAML file an admin writes (issue 32 item 7): PyYAML kept the last one silently
(``memory_mb`` twice in a node group loaded the second value, no word said). Now every YAML slurmkit loads through
model/yamlio.py -- the inventory (tenants, accounting, hooks inside it), the presets, ``--overrides`` site files and
health policies -- refuses it with the key path and both line numbers, one line, exit 2 at the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.errors import InventoryError, UsageError
from slurmkit.model import yamlio
from slurmkit.model.load import load_cluster

ROOT = Path(__file__).resolve().parents[2]
LAB = (ROOT / "examples" / "lab.yaml").read_text()


def _line_of(text: str, needle: str, nth: int = 1) -> int:
    hits = [i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln]
    return hits[nth - 1]


def test_memory_mb_twice_in_a_node_group(tmp_path: Path) -> None:
    text = LAB.replace("  memory_mb: 32000\n", "  memory_mb: 32000\n  weight: 10\n  memory_mb: 64000\n", 1)
    text = text.replace("  weight: 10\npartitions", "partitions")  # the group's own weight stays once
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    a, b = _line_of(text, "  memory_mb: 32000"), _line_of(text, "  memory_mb: 64000")
    with pytest.raises(InventoryError) as exc:
        load_cluster(inv)
    assert str(exc.value) == (f"{inv}: node_groups[0].memory_mb: duplicate key (line {a} and line {b}); YAML keeps "
                              "only one: remove one")


@pytest.mark.parametrize("doc, path, lines", [
    ("a: 1\na: 2\n", "a", (1, 2)),
    ("x:\n  - n: 1\n  - n: 2\n    m: 3\n    n: 4\n", "x[1].n", (3, 5)),
    ("t:\n  q:\n    deep: {k: 1, k: 2}\n", "t.q.deep.k", (3, 3)),
    ("'1': a\n1: b\n'1': c\n", "1", (1, 3)),  # the string '1' twice; the int 1 is another key
    ("s:\n  - [1, {z: 1, z: 1}]\n", "s[0][1].z", (2, 2)),
])
def test_duplicates_anywhere_name_the_path_and_both_lines(doc: str, path: str, lines: tuple[int, int]) -> None:
    with pytest.raises(yamlio.DuplicateKeyError) as exc:
        yamlio.load(doc)
    assert (exc.value.path, exc.value.first, exc.value.second) == (path, *lines)
    assert isinstance(exc.value, yamlio.YAMLError) and isinstance(exc.value, UsageError)


def test_merge_keys_and_aliases_are_no_duplicates() -> None:
    assert yamlio.load("base: &b {p: 1, q: 2}\nx:\n  <<: *b\n  p: 3\n") == {"base": {"p": 1, "q": 2},
                                                                          "x": {"p": 3, "q": 2}}
    # an alias bomb: each node is walked once, not once per path to it
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdef", "bcdefg", strict=True))
    assert len(yamlio.load(bomb)["g"]) == 9


@pytest.mark.parametrize("preset", sorted(p.name for p in (ROOT / "examples").glob("*.yaml") if p.name != "compose.yaml"))
def test_every_preset_still_loads(preset: str) -> None:
    load_cluster(ROOT / "examples" / preset)


def test_tenants_and_the_cli(tmp_path: Path) -> None:
    """Inside tenants too, and `conf generate` says it in one line with exit 2."""

    inv = tmp_path / "inv.yaml"
    inv.write_text(LAB + "tenants:\n  qos:\n    - name: high\n      priority: 10\n      priority: 20\n")
    n = len(LAB.splitlines())
    with pytest.raises(InventoryError, match=rf"tenants\.qos\[0\]\.priority: duplicate key \(line {n + 4} and line "
                                             rf"{n + 5}\)"):
        load_cluster(inv)
    text = LAB + "cluster: lab2\n"
    inv.write_text(text)
    res = subprocess.run([sys.executable, "-m", "slurmkit", "conf", "generate", str(inv), "--output",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [f"slurmkit: error: {inv}: cluster: duplicate key (line 5 and line "
                                       f"{len(LAB.splitlines()) + 1}); YAML keeps only one: remove one"], res.stderr
    assert not (tmp_path / "out").exists()


def test_overrides_and_policy_files(tmp_path: Path) -> None:
    from slurmkit.generate.slurmconf import load_overrides
    from slurmkit.health.policy import load_site_policy

    ov = tmp_path / "site.yaml"
    ov.write_text("slurm_conf:\n  SlurmctldPort: 6817\n  SlurmctldPort: 7000\n")
    with pytest.raises(UsageError, match=r"slurm_conf\.SlurmctldPort: duplicate key \(line 2 and line 3\)"):
        load_overrides(str(ov))
    pol = tmp_path / "policy.yaml"
    pol.write_text("gpu_count:\n  action: drain\n  action: warn\n")
    with pytest.raises(InventoryError) as exc:
        load_site_policy(str(pol))
    assert str(exc.value).startswith(f"{pol}: gpu_count.action: duplicate key (line 2 and line 3)")
