"""The first apply keeps an adopted site's own files (issue 33 item 1).

Real public configurations from tests/data/realconf (provenance and licence in each PROVENANCE): SchedMD's commented
slurm.conf.example (3 KB of comments around 40 settings) and CycleCloud's Include-split slurm.conf (partitions in
azure.conf). Each is imported, one thing is changed in the inventory, and `conf apply` writes to a tmp copy: the
unified diff of every file is exactly the plan's lines, nothing else changes byte for byte, Slurm's parse of the
result is the plan (`conf diff --exit-code` is 0 after; where this host has slurmctld, the real parse ran in apply).
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.adopt.inplace import CannotEdit, edit_pairs, edit_site
from slurmkit.generate.rollout import semantic_diff

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "realconf"
REAL = bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists())


def sk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=180)


def site(tmp: Path, name: str, ver: str = "22.05") -> tuple[Path, Path, dict[str, bytes]]:
    d = tmp / "etc"
    shutil.copytree(CORPUS / name, d)
    (d / "PROVENANCE").unlink()
    inv = tmp / "inv.yaml"
    r = sk("conf", "import", str(d), "--slurm-version", ver, "-o", str(inv))
    assert r.returncode == 0, r.stderr
    return d, inv, {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


def edit_inventory(inv: Path, fn) -> None:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(inv.read_text())
    fn(data)
    inv.write_text(yaml.safe_dump(data, sort_keys=False))


def apply(inv: Path, d: Path, *extra: str, ver: str = "22.05") -> subprocess.CompletedProcess:
    r = sk("conf", "apply", str(inv), "--to", str(d), "--slurm-version", ver, *extra,
           *(() if REAL else ("--no-real-parse",)))
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def changed_lines(before: bytes, after: bytes) -> list[str]:
    """The -/+ lines of the unified diff (no context)."""
    diff = difflib.unified_diff(before.decode().splitlines(), after.decode().splitlines(), lineterm="", n=0)
    return [ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


def others_unchanged(d: Path, before: dict[str, bytes], changed: set[str]) -> None:
    # no new file beside the site's (slurmkit.yaml is slurmkit's inventory copy, the journal and backup are hidden)
    assert sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) == sorted({*before, "slurmkit.yaml"})
    for name, body in before.items():
        if name not in changed:
            assert (d / name).read_bytes() == body, f"{name} changed"


def diff_clean(inv: Path, d: Path, ver: str = "22.05") -> None:
    r = sk("conf", "diff", str(inv), "--against", str(d), "--slurm-version", ver, "--exit-code")
    assert r.returncode == 0, r.stdout + r.stderr


def test_one_partition_on_a_commented_site_adds_its_line_only(tmp_path: Path) -> None:
    d, inv, before = site(tmp_path, "schedmd-example")
    edit_inventory(inv, lambda x: x["partitions"].append({"name": "short", "nodes": "linux[1-4]", "max_time": "1:00:00"}))
    # the dry run: `conf diff --files` shows the file diff apply writes, that one line
    r = sk("conf", "diff", str(inv), "--against", str(d), "--slurm-version", "22.05", "--files")
    assert r.returncode == 0, r.stderr
    shown = [ln for ln in r.stdout.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert shown == ["+PartitionName=short Nodes=linux[1-4] MaxTime=1:00:00"], r.stdout
    assert f"--- {d / 'slurm.conf'}" in r.stdout
    r = apply(inv, d)
    if REAL:  # the host's slurmctld (22.05 here) read the edited file before it was written
        assert "real parse: slurmctld accepted the config" in r.stderr, r.stderr
    assert changed_lines(before["slurm.conf"], (d / "slurm.conf").read_bytes()) == [
        "+PartitionName=short Nodes=linux[1-4] MaxTime=1:00:00"]
    text = (d / "slurm.conf").read_text()
    # beside its kind: right after the site's own PartitionName line; every comment still there
    assert "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\nPartitionName=short" in text
    assert text.count("\n#") == before["slurm.conf"].decode().count("\n#")
    others_unchanged(d, before, {"slurm.conf"})
    diff_clean(inv, d)


def test_a_changed_key_rewrites_its_value_on_its_own_line(tmp_path: Path) -> None:
    d, inv, before = site(tmp_path, "schedmd-example")

    def change(x: dict) -> None:
        x["slurm_conf"]["SlurmctldTimeout"] = "300"
        x["partitions"][0]["max_time"] = "2-00:00:00"
    edit_inventory(inv, change)
    apply(inv, d)
    assert changed_lines(before["slurm.conf"], (d / "slurm.conf").read_bytes()) == [
        "-SlurmctldTimeout=120", "+SlurmctldTimeout=300",
        "-PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "+PartitionName=debug Nodes=ALL Default=YES MaxTime=2-00:00:00 State=UP"]
    others_unchanged(d, before, {"slurm.conf"})
    diff_clean(inv, d)


def test_include_split_site_gets_the_partition_in_the_include_file(tmp_path: Path) -> None:
    # a 23.02+ site (ReconfigFlags=KeepPowerSaveSettings): judged as 24.11
    d, inv, before = site(tmp_path, "cyclecloud-slurm-include", "24.11")
    edit_inventory(inv, lambda x: x["partitions"].append({"name": "hpc", "nodes": "dynamicns", "max_time": "4:00:00"}))
    apply(inv, d, ver="24.11")
    # slurm.conf keeps its Include lines and comments byte for byte; the partition lands where partitions live
    assert (d / "slurm.conf").read_bytes() == before["slurm.conf"]
    assert changed_lines(before["azure.conf"], (d / "azure.conf").read_bytes()) == [
        "+PartitionName=hpc Nodes=dynamicns MaxTime=4:00:00"]
    others_unchanged(d, before, {"azure.conf"})
    diff_clean(inv, d, "24.11")


def test_rewrite_keeps_slurmkits_own_layout_by_choice(tmp_path: Path) -> None:
    d, inv, before = site(tmp_path, "schedmd-example")
    edit_inventory(inv, lambda x: x["partitions"].append({"name": "short", "nodes": "linux[1-4]"}))
    apply(inv, d, "--rewrite")
    text = (d / "slurm.conf").read_text()
    assert text.startswith("# generated by slurmkit") and len(text) < len(before["slurm.conf"]) / 2
    diff_clean(inv, d)


def test_edit_pairs_keeps_case_spacing_order_and_comment() -> None:
    line = "PartitionName=a  nodes = n[1-2]   MAXTIME=5 State=UP  # the short queue"
    out = edit_pairs(line, "slurm.conf:9", {"maxtime": "10", "default": "YES"}, frozenset({"state"}), {"default": "Default"})
    assert out == "PartitionName=a  nodes = n[1-2]   MAXTIME=10 Default=YES  # the short queue"
    assert edit_pairs('X="a b"', "f:1", {"x": "c d"}) == 'X="c d"'


def test_a_change_inside_a_continued_line_is_refused_with_file_line_and_rewrite() -> None:
    site_files = {"slurm.conf": "ClusterName=c\nSlurmctldHost=h\nNodeName=n1 CPUs=2 \\\n  RealMemory=100\n"
                                "PartitionName=p Nodes=n1\n"}
    plan = {"slurm.conf": "ClusterName=c\nSlurmctldHost=h\nNodeName=n1 CPUs=2 RealMemory=200\nPartitionName=p Nodes=n1\n"}
    with pytest.raises(CannotEdit) as e:
        edit_site(site_files, plan, "22.05")
    msg = str(e.value)
    assert msg.startswith("slurm.conf:3: cannot edit in place") and "--rewrite" in msg and "\n" not in msg


def test_new_node_and_removed_node_edit_only_their_lines() -> None:
    site_files = {"slurm.conf": "# site\nClusterName=c\nSlurmctldHost=h\n\n# nodes, measured 2024\n"
                                "NodeName=n[1-3] CPUs=2 RealMemory=100   # racks 1-3\nPartitionName=p Nodes=n[1-3]\n",
                  "gres.conf": "# none\n"}
    plan = {"slurm.conf": "ClusterName=c\nSlurmctldHost=h\nNodeName=n[1-2] CPUs=2 RealMemory=100\n"
                          "NodeName=g1 CPUs=8 RealMemory=900\nPartitionName=p Nodes=n[1-2],g1\n",
            "gres.conf": "# generated by slurmkit\n"}
    out = edit_site(site_files, plan, "22.05")
    assert changed_lines(site_files["slurm.conf"].encode(), out["slurm.conf"].encode()) == [
        "-NodeName=n[1-3] CPUs=2 RealMemory=100   # racks 1-3", "-PartitionName=p Nodes=n[1-3]",
        "+NodeName=n[1-2] CPUs=2 RealMemory=100   # racks 1-3", "+NodeName=g1 CPUs=8 RealMemory=900",
        "+PartitionName=p Nodes=n[1-2],g1"]
    assert out["gres.conf"] == "# none\n"
    assert semantic_diff(out, plan, "22.05") == []


def test_a_new_gpu_node_group_adds_its_node_and_gres_lines_beside_their_kind() -> None:
    """docker-cluster-2411 (a commented slurm.conf and gres.conf): two nodes shaped like the GPU node g1 join
    partition gpu: the plan puts them on g1's NodeName line, so that line's hostlist grows (its keys in the site's
    order) and partition gpu's Nodes= value changes on its own line; gres.conf gains their line after g1's (gres.conf
    records are compared per node: g1's stays as written); every comment stays."""
    from slurmkit.adopt.importer import import_site
    from slurmkit.adopt.read import read_site
    from slurmkit.generate import confparse as cp
    from slurmkit.generate.slurmconf import generate
    from slurmkit.model import yamlio
    from slurmkit.model.load import load_cluster_text

    files, _notes, _d = read_site(CORPUS / "docker-cluster-2411")
    inv = import_site(files, "24.11").inventory
    g1 = next(g for g in inv["node_groups"] if g["hosts"] == "g1")
    inv["node_groups"].append({**g1, "name": "g2", "hosts": "g[2-3]"})
    next(p for p in inv["partitions"] if p["name"] == "gpu")["nodes"] = "g[1-3]"
    plan = generate(load_cluster_text(yamlio.dump(inv), source="<test>"), version="24.11")
    out = edit_site(files, plan, "24.11")
    assert changed_lines(files["slurm.conf"].encode(), out["slurm.conf"].encode()) == [
        "-NodeName=g1 Gres=gpu:nvidia:1 CPUs=4 RealMemory=2000 State=UNKNOWN",
        "+NodeName=g[1-3] Gres=gpu:nvidia:1 CPUs=4 RealMemory=2000 State=UNKNOWN",
        "-PartitionName=gpu Nodes=g1 Default=NO MaxTime=INFINITE State=UP",
        "+PartitionName=gpu Nodes=g[1-3] Default=NO MaxTime=INFINITE State=UP"]
    assert changed_lines(files["gres.conf"].encode(), out["gres.conf"].encode()) == [
        "+NodeName=g[2-3] Name=gpu Type=nvidia File=/dev/nvidia[0-9] AutoDetect=nvml"]
    assert out["cgroup.conf"] == files["cgroup.conf"]
    # Slurm's parse of the result is the plan's, and differs from the site's only by the plan
    assert semantic_diff(out, plan, "24.11") == []
    assert [c.subject for c in semantic_diff(files, out, "24.11")] == [c.subject for c in semantic_diff(files, plan, "24.11")]
    assert "g3" in cp.node_names(cp.parse_slurm_conf(out["slurm.conf"]))


def test_nodes_add_on_an_adopted_site_renders_line_edits_too(tmp_path: Path) -> None:
    """`slurmkit nodes add` (elastic/change.py) writes the same files `conf apply` does: on an adopted site, the
    site's own text with the new node's line, not slurmkit's layout."""
    from slurmkit.elastic.change import Site, _render
    from slurmkit.elastic.edit import add_hosts

    d, inv, before = site(tmp_path, "schedmd-example")
    data = yaml.safe_load(inv.read_text())
    edit = add_hosts(data, ["linux33"], data["node_groups"][0]["name"])
    files, _ver, _own = _render(Site(d), edit.data, "22.05")
    assert changed_lines(before["slurm.conf"], files["slurm.conf"].encode()) == [
        "-NodeName=linux[1-32] CPUs=1 State=UNKNOWN", "+NodeName=linux[1-33] CPUs=1 State=UNKNOWN"]


def test_apply_refuses_what_it_cannot_edit_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "etc"
    d.mkdir()
    (d / "slurm.conf").write_text("# lab\nClusterName=c\nSlurmctldHost=localhost\nNodeName=n[1-2] CPUs=2 \\\n"
                                  "    RealMemory=1000   # continued\nPartitionName=p Nodes=n[1-2] Default=YES\n")
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    inv = tmp_path / "inv.yaml"
    assert sk("conf", "import", str(d), "--slurm-version", "22.05", "-o", str(inv)).returncode == 0
    edit_inventory(inv, lambda x: x["node_groups"][0].__setitem__("memory_mb", 2000))
    r = sk("conf", "apply", str(inv), "--to", str(d), "--slurm-version", "22.05", "--no-real-parse")
    assert r.returncode == 2, r.stdout + r.stderr
    err = [ln for ln in r.stderr.splitlines() if "cannot edit in place" in ln]
    assert len(err) == 1 and "slurm.conf:4:" in err[0] and "--rewrite" in err[0], r.stderr
    assert {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith(".")} == before
    # --rewrite does it, in slurmkit's layout
    r = sk("conf", "apply", str(inv), "--to", str(d), "--slurm-version", "22.05", "--no-real-parse", "--rewrite",
           "--allow-disruptive")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "RealMemory=2000" in (d / "slurm.conf").read_text()


def test_a_new_key_goes_after_the_last_setting_and_a_removed_key_loses_its_line(tmp_path: Path) -> None:
    d, inv, before = site(tmp_path, "schedmd-example")

    def change(x: dict) -> None:
        x["slurm_conf"]["MaxArraySize"] = "2001"
        x["slurm_conf"].pop("SlurmctldLogFile")
    edit_inventory(inv, change)
    apply(inv, d)
    old = before["slurm.conf"].decode()
    last_setting = [ln for ln in old.splitlines() if ln and not ln.startswith("#") and not ln.startswith(
        ("NodeName=", "PartitionName="))][-1]
    assert changed_lines(before["slurm.conf"], (d / "slurm.conf").read_bytes()) == [
        "-SlurmctldLogFile=/var/log/slurmctld.log", "+MaxArraySize=2001"]
    assert f"\n{last_setting}\nMaxArraySize=2001\n" in (d / "slurm.conf").read_text()
    others_unchanged(d, before, {"slurm.conf"})
    diff_clean(inv, d)
