"""Which slurmctld judges a config (backend/realparse.py find_judge): the host's for its own release, a cached
root's for the releases it can judge (release.judges), and a skip that names what is here otherwise. No Slurm
runs here: the host's slurmctld and the cached roots are stand-ins; test_conf_realparse.py runs the real ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkit.backend import realparse as v
from slurmkit.backend import roots
from slurmkit.release import judge_floor, judges, slurmctld_reads_gres_conf


def _roots(tmp_path: Path, *releases: str) -> list[roots.Image]:
    out = []
    for rel, ver in (r.split("=") for r in releases):
        root = tmp_path / rel
        (root / "usr/sbin").mkdir(parents=True)
        (root / "usr/sbin/slurmctld").write_text("")
        out.append(roots.Image(rel, "trixie", ver, "2026-11-30T00:00:00Z", 1.0, str(root)))
    return out


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    def setup(host_version: str | None, *releases: str) -> None:
        monkeypatch.setattr(v, "_installed_version",
                            lambda: ("/usr/sbin/slurmctld", host_version) if host_version else (None, "slurmctld is not installed"))
        imgs = _roots(tmp_path, *releases)
        monkeypatch.setattr(roots, "list_images", lambda: imgs)

    return setup


def test_debian12_host_with_a_2411_root(host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host("22.05.8", "24.11=24.11.5")
    j, _ = v.find_judge("22.05")
    assert j is not None and j.root is None and j.describe() == "slurmctld 22.05.8 (/usr/sbin/slurmctld)"
    for target in ("23.11", "24.05", "24.11"):
        j, _ = v.find_judge(target)
        assert j is not None and j.release == "24.11" and j.root == str(tmp_path / "24.11"), target
        assert j.describe() == f"slurmctld 24.11.5 ({tmp_path}/24.11/usr/sbin/slurmctld)"
        assert j.describe("slurmd") == f"slurmd 24.11.5 ({tmp_path}/24.11/usr/sbin/slurmd)"
    # 23.02 is older than what a 24.11 slurmctld judges (it refuses select/cons_res, CgroupAutomount) and newer
    # than 22.05's; 25.05 is newer than both
    for target in ("23.02", "25.05"):
        j, why = v.find_judge(target)
        assert j is None and f"config targets Slurm {target}" in why, why
        assert "installed slurmctld is 22.05 (/usr/sbin/slurmctld, judges 22.05)" in why
        assert "root slurmctld is 24.11" in why and "judges 23.11-24.11" in why


def test_debian12_host_without_a_root_says_how_to_get_one(host) -> None:  # type: ignore[no-untyped-def]
    host("22.05.8")
    j, why = v.find_judge("24.11")
    assert j is None and "installed slurmctld is 22.05" in why and "`slurmkit lab image build 24.11`" in why, why


def test_debian13_host_judges_its_own_and_a_bookworm_root_judges_2205(host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host("24.11.5", "22.05=22.05.8")
    j, _ = v.find_judge("24.11")
    assert j is not None and j.root is None and j.release == "24.11"
    j, _ = v.find_judge("22.05")
    assert j is not None and j.root == str(tmp_path / "22.05") and j.version == "22.05.8"


def test_no_slurm_at_all(host) -> None:  # type: ignore[no-untyped-def]
    host(None)
    j, why = v.find_judge("22.05")
    assert j is None and why == "slurmctld is not installed"


def test_release_rules() -> None:
    assert judge_floor("22.05") == "22.05" and judge_floor("24.11") == "23.11"
    assert judges("24.11", "23.11") and judges("24.11", "24.11") and not judges("24.11", "23.02")
    assert not judges("22.05", "23.02") and judges("22.05", "22.05")
    # read_config.c: gres_parse_config_dummy() until 23.02, removed in slurm-23-11-0-1
    assert slurmctld_reads_gres_conf("23.02") and not slurmctld_reads_gres_conf("23.11")
