"""Include chains as Slurm reads them, everywhere (issue 33 item 2), on AWS ParallelCluster's head node
(tests/data/realconf/aws-parallelcluster-gpu, rendered from aws-parallelcluster-cookbook as its own tests render it:
PROVENANCE there). slurm.conf includes slurm_parallelcluster.conf, which includes each queue's file by its absolute
path /opt/slurm/etc/pcluster/...; gres.conf and cgroup.conf have their own chains. Away from /opt/slurm/etc each
suffix of an absolute path is tried under DIR; at the real path (the files rendered with the output directory as
the project's test renders "<DIR>") `conf diff` follows gres.conf's and cgroup.conf's Includes on the running side:
an import of the site diffs as nothing to do, where it planned to drain the 15 GPU nodes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.adopt.importer import import_site
from slurmkit.adopt.read import read_site
from slurmkit.generate import confparse as cp
from slurmkit.generate.rollout import semantic_diff
from slurmkit.generate.validate import static_check

ROOT = Path(__file__).resolve().parents[2]
PCLUSTER = ROOT / "tests" / "data" / "realconf" / "aws-parallelcluster-gpu"
INSTALL = "/opt/slurm/etc"  # where the cookbook writes them (config_head_node.rb, PROVENANCE)


def sk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def at_real_path(dest: Path) -> Path:
    """The head node's files with their output directory where they are, as the cookbook's own test renders them
    (test_slurm_config_generator.py _assert_files_are_equal: "<DIR>" -> the output directory)."""
    shutil.copytree(PCLUSTER, dest)
    for p in dest.rglob("*.conf"):
        p.write_text(p.read_text().replace(INSTALL, str(dest)))
    return dest


def gpu_nodes(inv: dict) -> dict[str, tuple[str, int]]:
    from slurmkit import hostlist

    return {h: (g["gpus"]["type"], g["gpus"]["count"]) for g in inv["node_groups"] if "gpus" in g
            for h in hostlist.expand(g["hosts"])}


def test_a_copy_of_the_head_node_is_read_through_every_include_chain() -> None:
    files, notes, _d = read_site(PCLUSTER)
    # the absolute paths are absent here: DIR/pcluster/<name> is read (not DIR/<name>), with a note for each
    for q in ("efa", "gpu", "multiple_spot"):
        for kind in ("partition", "gres"):
            name = f"{INSTALL}/pcluster/slurm_parallelcluster_{q}_{kind}.conf"
            assert files[name] == (PCLUSTER / "pcluster" / Path(name).name).read_text()
            assert any(f"Include {name}: read {PCLUSTER / 'pcluster' / Path(name).name} (the path is absent here)"
                       in n for n in notes), notes
    assert "pcluster/custom_slurm_settings_include_file_slurm.conf" in files  # relative, beside slurm.conf
    conf = cp.parse_slurm_conf(files["slurm.conf"], "slurm.conf", files)
    assert conf.problems == []
    assert len(cp.node_names(conf)) == 5 + 15 + 15
    assert {r.head for r in conf.partitions} == {"efa", "gpu", "multiple_spot"}
    res = import_site(files, "24.11")
    assert res.lost == []
    # the 15 GPU nodes of the gpu queue, modelled from the gres.conf two Includes down
    gpus = gpu_nodes(res.inventory)
    assert len(gpus) == 15
    assert gpus["gpu-dy-gpu-p3dn24xlarge-10"] == ("v100", 8) and gpus["gpu-st-gpu-g38xlarge-1"] == ("m60", 2)
    assert res.inventory["cgroup_conf"] == {"ConstrainCores": "yes"}


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_at_its_real_path_the_import_diffs_as_nothing_to_do(tmp_path: Path, release: str) -> None:
    """Before: the running side's gres.conf was read without its Includes, so `conf diff` planned to drain the 15
    GPU nodes (restarting every daemon on 22.05) for a no-op; and the Include files by absolute path were missing
    from the files apply leaves, so every node was planned away."""
    etc = at_real_path(tmp_path / "etc")
    files, notes, _d = read_site(etc)
    assert not any("absent here" in n for n in notes), notes  # the absolute paths are real here
    assert f"{etc}/pcluster/slurm_parallelcluster_gpu_gres.conf" in files
    site = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(site), "--slurm-version", release)
    assert imp.returncode == 0, imp.stderr
    assert len(gpu_nodes(yaml.safe_load(site.read_text()))) == 15
    diff = sk("conf", "diff", str(site), "--against", str(etc), "--exit-code")
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert "nothing to do" in diff.stdout and "drain" not in diff.stdout
    assert "cannot edit in place" not in diff.stderr
    # a real change is still seen, and only it: the gpu partition's MaxTime, in a file by absolute path (which
    # apply cannot edit in place: said so, one line)
    inv = yaml.safe_load(site.read_text())
    part = next(p for p in inv["partitions"] if p["name"] == "gpu")
    part["max_time"] = "2-00:00:00"
    site.write_text(yaml.safe_dump(inv, sort_keys=False))
    diff = sk("conf", "diff", str(site), "--against", str(etc), "--exit-code")
    assert diff.returncode == 1, diff.stdout + diff.stderr
    changes = [ln for ln in diff.stdout.splitlines() if ln.startswith("[")]
    assert len(changes) == 1 and "PartitionName=gpu" in changes[0] and "MaxTime=2-00:00:00" in changes[0], changes
    assert "the change lands in an Include file outside the config directory" in diff.stderr


def test_the_running_sides_gres_and_cgroup_includes_are_followed(tmp_path: Path) -> None:
    etc = at_real_path(tmp_path / "etc")
    files, _n, _d = read_site(etc)
    # the same files, gres.conf's GPU lines moved out of its Include chain into gres.conf itself: no change
    flat = dict(files)
    flat["gres.conf"] = "".join(files[f"{etc}/pcluster/slurm_parallelcluster_{q}_gres.conf"]
                                for q in ("multiple_spot", "efa", "gpu"))
    assert semantic_diff(files, flat, "22.05") == []
    # one GPU fewer on the p3dn nodes, two Includes down: a drain of those 10 nodes, nothing else
    fewer = dict(files)
    name = f"{etc}/pcluster/slurm_parallelcluster_gpu_gres.conf"
    fewer[name] = files[name].replace("File=/dev/nvidia[0-7]", "File=/dev/nvidia[0-6]")
    changes = semantic_diff(files, fewer, "24.11")
    assert [(c.file, c.subject, c.action) for c in changes] == [("gres.conf", "NodeName=gpu-dy-gpu-p3dn24xlarge-[1-10]",
                                                                   "drain")], changes
    # cgroup.conf's Include: ConstrainRAMSpace set in slurm_parallelcluster_cgroup.conf (memory-based scheduling)
    mem = dict(files)
    mem["slurm_parallelcluster_cgroup.conf"] = files["slurm_parallelcluster_cgroup.conf"] + "ConstrainRAMSpace=yes\n"
    changes = semantic_diff(files, mem, "24.11")
    assert [(c.file, c.subject, c.new) for c in changes] == [("cgroup.conf", "ConstrainRAMSpace", "yes")], changes
    assert semantic_diff(mem, {**mem, "cgroup.conf": files["cgroup.conf"] + "\nConstrainRAMSpace=yes\n"}, "24.11") == []


def test_each_suffix_of_an_absolute_include_is_tried_longest_first(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "slurm.conf").write_text("ClusterName=c\nInclude /site/etc/a/b/nodes.conf\n")
    (tmp_path / "a" / "b" / "nodes.conf").write_text("NodeName=n1 CPUs=1\n")
    (tmp_path / "nodes.conf").write_text("NodeName=wrong CPUs=1\n")  # the basename alone: not the site's file
    files, notes, _d = read_site(tmp_path)
    assert files["/site/etc/a/b/nodes.conf"] == "NodeName=n1 CPUs=1\n"
    assert notes == [f"slurm.conf:2: Include /site/etc/a/b/nodes.conf: read {tmp_path}/a/b/nodes.conf (the path is "
                     "absent here)"]


def test_an_include_of_a_directory_reads_as_an_empty_file_and_a_glob_is_fatal(tmp_path: Path) -> None:
    """s_p_parse_file() of every release opens a directory and reads no line from it: the Include succeeds and
    nothing in it is read (scontrol 22.05.8, 24.11.5, 26.05.5 accept it: tests/integration/test_conf_include_lab.py).
    No release reads a glob (parse_config.c, "Slurm does not support glob parsing" from 23.11)."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "nodes.conf").write_text("NodeName=n2 CPUs=1\n")
    (tmp_path / "slurm.conf").write_text("ClusterName=c\nSlurmctldHost=h\nInclude conf.d\nNodeName=n1 CPUs=1\n"
                                         "PartitionName=p Nodes=n1\n")
    files, notes, _d = read_site(tmp_path)
    assert files["conf.d"] == ""
    assert any("conf.d is a directory: Slurm reads it as an empty file" in n for n in notes), notes
    for release in ("22.05", "24.11", "26.05"):
        rep = static_check(files, release)
        assert rep.errors == [], rep.errors
    assert list(cp.node_names(cp.parse_slurm_conf(files["slurm.conf"], "slurm.conf", files))) == ["n1"]
    (tmp_path / "slurm.conf").write_text("ClusterName=c\nSlurmctldHost=h\nInclude conf.d/*.conf\nNodeName=n1 CPUs=1\n"
                                         "PartitionName=p Nodes=n1\n")
    files, _notes, _d = read_site(tmp_path)
    for release in ("22.05", "24.11", "26.05"):
        rep = static_check(files, release)
        assert any("Include conf.d/*.conf: Slurm does not support glob parsing" in e for e in rep.errors), rep.errors


def test_a_relative_include_in_an_included_file_resolves_per_release(tmp_path: Path) -> None:
    """22.05: beside the including file (parse_config.c _add_full_path); 23.02+: beside slurm.conf
    (get_extra_conf_path, SchedMD commit d890058691). Both files are read; the release picks one."""
    assert cp.resolve_include("b.conf", "", "pcluster/a.conf", "22.05") == "pcluster/b.conf"
    assert cp.resolve_include("b.conf", "", "pcluster/a.conf", "23.02") == "b.conf"
    assert cp.resolve_include("b.conf", "", "/opt/slurm/etc/pcluster/a.conf", "22.05") == "/opt/slurm/etc/pcluster/b.conf"
    assert cp.resolve_include("/x/b.conf", "", "pcluster/a.conf", "22.05") == "/x/b.conf"
    assert cp.resolve_include("b.conf", "", "slurm.conf", "22.05") == "b.conf"
    (tmp_path / "pcluster").mkdir()
    (tmp_path / "slurm.conf").write_text("ClusterName=c\nSlurmctldHost=h\nInclude pcluster/a.conf\nNodeName=n1 CPUs=1\n"
                                         "PartitionName=p Nodes=n1\n")
    (tmp_path / "pcluster" / "a.conf").write_text("Include b.conf\n")
    (tmp_path / "b.conf").write_text("MinJobAge=300\n")
    (tmp_path / "pcluster" / "b.conf").write_text("NoSuchKey=1\n")
    files, notes, _d = read_site(tmp_path)
    assert files["b.conf"] == "MinJobAge=300\n" and files["pcluster/b.conf"] == "NoSuchKey=1\n"
    assert any("Slurm 22.05 reads pcluster/b.conf, 23.02+ b.conf" in n for n in notes), notes
    assert any("NoSuchKey" in e for e in static_check(files, "22.05").errors)
    assert static_check(files, "24.11").errors == []
    assert cp.parse_slurm_conf(files["slurm.conf"], "slurm.conf", files, release="24.11").value("MinJobAge") == "300"
