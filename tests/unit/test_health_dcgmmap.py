"""dcgm-exporter's HPC job mapping files (slurmkit/health/dcgmmap.py): the format dcgm-exporter reads (a file per
DCGM GPU id, one job id per line), written by the prolog of a starting job and removed by its epilog, created with
their final mode, renamed into place, never through a planted symlink."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml

from slurmkit.health import dcgmmap
from slurmkit.health.hooks import HookEnv, run_hook
from tests.unit.test_health_hooks import ROOT, FakeSlurm, fixture, host


def test_prolog_lines_and_epilog_removal(tmp_path):
    d = tmp_path / "map"
    assert dcgmmap.add_job(str(d), "41", [0, 1], exclusive=False) == ["0", "1"]
    assert dcgmmap.add_job(str(d), "42", [1], exclusive=False) == ["1"]  # a shared GPU (gres/shard) lists both jobs
    assert dcgmmap.add_job(str(d), "42", [1], exclusive=False) == ["1"]  # again: no duplicate line
    assert (d / "0").read_text() == "41\n" and (d / "1").read_text() == "41\n42\n"
    for name in ("0", "1"):
        assert stat.S_IMODE((d / name).stat().st_mode) == dcgmmap.FILE_MODE
    assert stat.S_IMODE(d.stat().st_mode) == dcgmmap.DIR_MODE
    assert dcgmmap.remove_job(str(d), "41") == ["0", "1"]
    assert not (d / "0").exists() and (d / "1").read_text() == "42\n"
    assert dcgmmap.remove_job(str(d), "42") == ["1"]
    assert os.listdir(d) == []  # nothing left for dcgm-exporter to read, no temp file
    assert dcgmmap.remove_job(str(tmp_path / "never-made"), "42") == []
    assert not (tmp_path / "never-made").exists()


def test_a_whole_gpu_names_one_job_a_stale_id_is_replaced(tmp_path):
    d = tmp_path / "map"
    dcgmmap.add_job(str(d), "41", [0])  # 41's epilog never ran (its node rebooted)
    dcgmmap.add_job(str(d), "50", [0])
    assert (d / "0").read_text() == "50\n"


def test_a_planted_symlink_is_replaced_never_followed(tmp_path):
    d = tmp_path / "map"
    d.mkdir(mode=0o755)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (d / "3").symlink_to(victim)
    dcgmmap.add_job(str(d), "7", [3])
    assert victim.read_text() == "precious\n"
    assert not (d / "3").is_symlink() and (d / "3").read_text() == "7\n"


def test_a_symlinked_or_foreign_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OSError, match="symlink"):
        dcgmmap.add_job(str(tmp_path / "link"), "7", [0])
    assert list(real.iterdir()) == []
    wide = tmp_path / "wide"
    wide.mkdir()
    wide.chmod(0o777)
    with pytest.raises(OSError, match="writable by group or others"):
        dcgmmap.add_job(str(wide), "7", [0])
    assert list(wide.iterdir()) == []
    site = tmp_path / "site"
    site.mkdir()
    site.chmod(0o750)  # a site's narrower mode is kept
    dcgmmap.add_job(str(site), "7", [0])
    assert stat.S_IMODE(site.stat().st_mode) == 0o750 and (site / "0").read_text() == "7\n"
    with pytest.raises(ValueError, match="not a number"):
        dcgmmap.add_job(str(real), "7\n8", [0])


def test_dcgm_ids_are_nvml_indexes_of_the_jobs_minors():
    devs = [{"index": 0, "minor": 4}, {"index": 1, "minor": 5}, {"index": 2, "minor": 7, "lost": True},
            {"index": 3, "error": "Unknown"}]
    assert dcgmmap.dcgm_ids(devs, frozenset({5, 7})) == [1]
    assert dcgmmap.dcgm_ids(devs, frozenset({4})) == [0]


def _inventory(tmp_path, mapdir, dcgm="node1"):
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["hooks"] = {"prolog": True, "epilog": True, "checks": {"ib": False, "slurmd_oom": False}}
    inv["monitoring"] = {"dcgm_exporter": dcgm, "dcgm_job_mapping_dir": str(mapdir)}
    p = tmp_path / "etc" / "slurmkit.yaml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(yaml.safe_dump(inv))
    return p


def _env(tmp_path, inv, hook, nvml="healthy-h100x8.json", **kw):
    return HookEnv(hook=hook, node="node1", state_dir=str(tmp_path / "state"), inventory=str(inv),
                   fake_nvml=str(fixture(tmp_path, nvml)), paths=host(tmp_path), runner=FakeSlurm("ALLOCATED"), **kw)


def test_the_prolog_maps_the_jobs_gpus_and_the_epilog_clears_them(tmp_path):
    mapdir = tmp_path / "run" / "%n" / "jobmap"
    inv = _inventory(tmp_path, mapdir)
    d = tmp_path / "run" / "node1" / "jobmap"
    rep = run_hook(_env(tmp_path, inv, "prolog", job_id="42", job_gpus=[2, 3]))
    assert rep.exit_code == 0
    assert sorted(n for n in os.listdir(d) if n.isdigit()) == ["2", "3"] and (d / "2").read_text() == "42\n"
    assert any("dcgm job map: job 42 on GPU 2,3" in n for n in rep.notes)
    rec = json.loads((tmp_path / "state" / "node1" / "last-prolog.json").read_text())
    assert not rec.get("bookkeeping")
    rep = run_hook(_env(tmp_path, inv, "epilog", job_id="42", job_gpus=[2, 3]))
    assert [n for n in os.listdir(d) if n.isdigit()] == []


def test_a_failing_prolog_maps_nothing_and_an_uncovered_node_writes_none(tmp_path):
    inv = _inventory(tmp_path, tmp_path / "jobmap")
    rep = run_hook(_env(tmp_path, inv, "prolog", nvml="ecc-uncorrected-gpu1.json", job_id="42", job_gpus=[0, 1]))
    assert rep.exit_code == 1 and not (tmp_path / "jobmap").exists()
    inv = _inventory(tmp_path, tmp_path / "jobmap2", dcgm="node2")  # dcgm-exporter does not run on node1
    rep = run_hook(_env(tmp_path, inv, "prolog", job_id="43", job_gpus=[0]))
    assert rep.exit_code == 0 and not (tmp_path / "jobmap2").exists()


def test_an_unusable_directory_is_bookkeeping_never_the_jobs_failure(tmp_path):
    (tmp_path / "file").write_text("x")
    inv = _inventory(tmp_path, tmp_path / "file")
    rep = run_hook(_env(tmp_path, inv, "prolog", job_id="42", job_gpus=[0]))
    assert rep.exit_code == 0
    assert any("dcgm job map" in b for b in rep.bookkeeping)


def test_bad_directory_key_is_a_one_line_error():
    from slurmkit.errors import SlurmkitError
    from slurmkit.model.load import load_cluster_dict

    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["monitoring"] = {"dcgm_exporter": "all", "dcgm_job_mapping_dir": "relative/dir"}
    with pytest.raises(SlurmkitError, match="monitoring.dcgm_job_mapping_dir"):
        load_cluster_dict(inv)
    inv["monitoring"] = {"dcgm_exporter": "all"}
    assert load_cluster_dict(inv).monitoring.dcgm_job_mapping_dir == dcgmmap.DEFAULT_DIR


@pytest.mark.parametrize(("line", "mode"), [("", 0o644), ("PrivateData=jobs\n", 0o600)])
def test_files_are_private_where_slurm_hides_jobs(tmp_path, monkeypatch, line, mode):
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=lab\n{line}")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    inv = _inventory(tmp_path, tmp_path / "jobmap")
    rep = run_hook(_env(tmp_path, inv, "prolog", job_id="42", job_gpus=[0]))
    assert rep.exit_code == 0
    assert stat.S_IMODE((tmp_path / "jobmap" / "0").stat().st_mode) == mode


def test_a_node_with_shards_lists_every_job_of_a_gpu(tmp_path):
    from slurmkit.health.expect import expectations_from_cluster
    from slurmkit.model.load import load_cluster_dict

    inv = yaml.safe_load(_inventory(tmp_path, tmp_path / "jobmap").read_text())
    inv["node_groups"][0]["gpus"]["shards"] = 16
    (tmp_path / "etc" / "slurmkit.yaml").write_text(yaml.safe_dump(inv))
    assert expectations_from_cluster(load_cluster_dict(inv), "node1").gpu_shared
    for job in ("42", "43"):  # two jobs' shards of GPU 0
        assert run_hook(_env(tmp_path, tmp_path / "etc" / "slurmkit.yaml", "prolog", job_id=job,
                             job_gpus=[0])).exit_code == 0
    assert (tmp_path / "jobmap" / "0").read_text().split() == ["42", "43"]
