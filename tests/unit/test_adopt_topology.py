"""Defects of the first hidden set (issue 33 item 6), on Google's slurm-gcp (tests/data/realconf/slurm-gcp-5-topology,
rendered from slurm-gcp's templates and conf.py: PROVENANCE there): a topology.conf the site's Slurm never reads
(no TopologyPlugin) is skipped as Slurm skips it, a typo inside it no loss; LinkSpeed= (topology.conf(5) 22.05-26.05,
on every slurm-gcp placement nodeset) is carried; a topology.conf identical by meaning to the regenerated one is no
change; `conf validate` and `conf import` take the release by one rule."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurmkit.adopt.importer import import_site
from slurmkit.adopt.read import read_site
from slurmkit.generate.rollout import semantic_diff
from slurmkit.generate.slurmconf import generate
from slurmkit.generate.validate import static_check
from slurmkit.model import yamlio
from slurmkit.model.load import load_cluster_text

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "realconf"
GCP = CORPUS / "slurm-gcp-5-topology"


def sk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def with_tree(dest: Path) -> Path:
    """The same site as slurm-gcp 6 writes it: conf.py conflines() adds "TopologyPlugin": "topology/tree" (commit
    34704fc61e6f5ef86d42a0f1b7bed471a3e60889), after SuspendTimeout."""
    shutil.copytree(GCP, dest)
    cloud = dest / "cloud.conf"
    cloud.write_text(cloud.read_text().replace("SuspendTimeout=300\n", "SuspendTimeout=300\nTopologyPlugin=topology/tree\n"))
    return dest


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_a_topology_conf_slurm_never_reads_is_skipped_typo_and_all(tmp_path: Path, release: str) -> None:
    site = tmp_path / "etc"
    shutil.copytree(GCP, site)
    (site / "topology.conf").write_text((site / "topology.conf").read_text() + "SwichName=typo Nodes=m22-blue-0\n")
    files, _n, _d = read_site(site)
    res = import_site(files, release)
    assert res.lost == [] and "topology" not in res.inventory
    assert any("topology.conf: not imported: the site's Slurm never reads it (no TopologyPlugin" in n for n in res.notes)
    rep = static_check(files, release)
    assert rep.errors == [] and any("topology.conf: not read by Slurm" in w for w in rep.warnings), rep
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(site), "-o", str(inv), "--slurm-version", release)
    assert imp.returncode == 0, imp.stderr
    diff = sk("conf", "diff", str(inv), "--against", str(site), "--exit-code")
    assert diff.returncode == 0 and "nothing to do" in diff.stdout, diff.stdout + diff.stderr
    assert "cannot edit in place" not in diff.stderr


def test_link_speed_is_carried_and_a_topology_equal_by_meaning_is_no_change(tmp_path: Path) -> None:
    site = with_tree(tmp_path / "etc")
    files, _n, _d = read_site(site)
    res = import_site(files, "24.11")
    assert res.lost == [], res.lost
    sws = {s["name"]: s for s in res.inventory["topology"]["switches"]}
    assert sws["pink"] == {"name": "pink", "nodes": "m22-pink-[0-3]", "link_speed": 150}
    assert sws["nodeset-root"] == {"name": "nodeset-root", "switches": "blue,green,pink"}
    gen = generate(load_cluster_text(yamlio.dump(res.inventory)), version="24.11")
    assert "SwitchName=pink Nodes=m22-pink-[0-3] LinkSpeed=150" in gen["topology.conf"]
    assert "SwitchName=green Nodes=m22-green-[0-4]" in gen["topology.conf"]  # the two ranges, folded
    # before: "[reconfigure] topology: 4 lines -> 4 lines" for the same switches
    assert [c for c in semantic_diff(files, gen, "24.11") if c.file == "topology.conf"] == []
    # slurm-gcp 6's own order (the root first, test_nodeset_switch_lines) is the same topology
    six = "\n".join(["SwitchName=nodeset-root Switches=blue,green,pink", "SwitchName=blue Nodes=m22-blue-[0-6]",
                     "SwitchName=green Nodes=m22-green-[0-1],m22-green-[2-4]",
                     "SwitchName=pink Nodes=m22-pink-[0-3] LinkSpeed=150"]) + "\n"
    assert semantic_diff(files, {**files, "topology.conf": six}, "24.11") == []
    moved = six.replace("m22-green-[0-1],m22-green-[2-4]", "m22-green-[0-3]").replace("m22-pink-[0-3]",
                                                                                        "m22-pink-[0-3],m22-green-4")
    assert [c.subject for c in semantic_diff(files, {**files, "topology.conf": moved}, "24.11")] == ["topology"]
    inv = tmp_path / "site.yaml"
    assert sk("conf", "import", str(site), "-o", str(inv), "--slurm-version", "24.11").returncode == 0
    diff = sk("conf", "diff", str(inv), "--against", str(site), "--exit-code")
    assert diff.returncode == 0 and "nothing to do" in diff.stdout, diff.stdout + diff.stderr
    # read now (TopologyPlugin=topology/tree): a typo there is Slurm's parse error, named, exit 1
    (site / "topology.conf").write_text((site / "topology.conf").read_text() + "SwichName=typo Nodes=m22-blue-0\n")
    files, _n, _d = read_site(site)
    assert any("SwichName" in x for x in import_site(files, "24.11").lost)
    bad = yaml.safe_load(inv.read_text())
    bad["topology"]["switches"][2]["link_speed"] = -1
    inv.write_text(yaml.safe_dump(bad, sort_keys=False))
    r = sk("conf", "generate", str(inv), "-o", str(tmp_path / "out"))
    assert r.returncode != 0 and "topology.switches[2].link_speed: expected an integer" in r.stderr, r.stderr


def test_validate_and_import_take_the_release_by_one_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `conf validate DIR` judged with no release (no per-release rule) where `conf import DIR` took the
    host's slurmctld. dask-jobqueue-ci's select/cons_res is gone from 23.11 (tests/unit/test_realconf.py)."""
    from slurmkit.backend import roots
    from slurmkit.cli.main import cli

    site = tmp_path / "etc"
    shutil.copytree(CORPUS / "dask-jobqueue-ci", site)
    monkeypatch.setattr(roots, "host_release", lambda: "24.11")
    res = CliRunner().invoke(cli, ["conf", "validate", str(site), "--no-real-parse"])
    assert "judged for Slurm 24.11, this host's slurmctld" in res.output, res.output
    # (CliRunner sees no exit code: the edge, cli/main.py run_cli, turns the command's return value into it)
    assert "SelectType=select/cons_res is not available in Slurm 24.11" in res.output and "invalid:" in res.output
    res = CliRunner().invoke(cli, ["conf", "import", str(site), "-o", str(tmp_path / "a.yaml")])
    assert "judged for Slurm 24.11, this host's slurmctld" in res.output and "not carried:" in res.output, res.output
    monkeypatch.setattr(roots, "host_release", lambda: "22.05")
    res = CliRunner().invoke(cli, ["conf", "validate", str(site), "--no-real-parse"])
    assert "judged for Slurm 22.05, this host's slurmctld" in res.output and "ok: " in res.output, res.output
    monkeypatch.setattr(roots, "host_release", lambda: None)
    res = CliRunner().invoke(cli, ["conf", "validate", str(site), "--no-real-parse"])
    assert "judged without a target release" in res.output and "ok: " in res.output, res.output


def test_a_25_05_plus_site_keeps_its_topology_conf() -> None:
    """topology.file: a 26.05 site that keeps topology.conf is imported with file: topology.conf and generated back
    into topology.conf (26.05 reads it while no topology.yaml exists: interfaces/topology.c topology_g_init); without
    the key 26.05 gets topology.yaml, 24.11 topology.conf; a wrong value or topology.yaml for 24.11 is refused."""
    from slurmkit.errors import InventoryError as _IE
    from slurmkit.generate import generate as _generate
    from slurmkit.model.load import load_cluster_dict as _load

    inv = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "lab.yaml").read_text())
    assert inv.get("topology", {}).get("switches"), "examples/lab.yaml has a tree topology"
    assert "topology.yaml" in _generate(_load({**inv, "slurm_version": "26.05"}))
    assert "topology.conf" in _generate(_load({**inv, "slurm_version": "24.11"}))
    kept = _generate(_load({**inv, "slurm_version": "26.05", "topology": {**inv["topology"], "file": "topology.conf"}}))
    assert "topology.conf" in kept and "topology.yaml" not in kept and "SwitchName=" in kept["topology.conf"]
    with pytest.raises(_IE) as ei:
        _load({**inv, "topology": {**inv["topology"], "file": "topology.txt"}})
    assert ei.value.path == "topology.file"
    with pytest.raises(_IE) as ei:
        _generate(_load({**inv, "slurm_version": "24.11", "topology": {**inv["topology"], "file": "topology.yaml"}}))
    assert ei.value.path == "topology.file" and "needs Slurm >= 25.05" in str(ei.value)
