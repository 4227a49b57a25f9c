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


# --------------------------------------------------------------------------------------------------------------
# the real parse's error lines, classified by where the judge's release logs them (issue 19)


@pytest.mark.parametrize(("line", "release", "kind", "where"), [
    ('error: The option "SchedulerAuth" is defunct, see man slurm.conf.', "22.05", v.DEFUNCT, "read_config.c:487"),
    ('error: The option "PowerPlugin" is defunct, please remove it from slurm.conf.', "24.11", v.DEFUNCT,
     "read_config.c:504"),
    ('error: The option "CgroupAutomount" is defunct, please remove it from cgroup.conf.', "24.11", v.DEFUNCT,
     "cgroup.c:138"),
    ("error: Ignoring obsolete FastSchedule=1 option. Please remove from your configuration.", "22.05", v.DEPRECATED,
     "read_config.c:4071"),
    ("error: Ignoring obsolete FastSchedule=1 option. Please remove from your configuration.", "24.11", v.DEPRECATED,
     "read_config.c:4266"),
    ("error: SbcastParameters has been renamed to BcastParameters. Please update your configuration.", "26.05",
     v.DEPRECATED, "read_config.c:3919"),
    ("error: Configured MailProg is invalid", "24.11", v.HOST, "controller.c:724"),
    ("error: _get_group_members: Could not find configured group ops", "22.05", v.HOST, "groups.c:240"),
    # the site's power-saving scripts are absent here (the corpus's cyclecloud-slurm-include): slurmctld disables
    # power saving on this host and goes on; a relative path is the config's own error
    ("error: power_save program /opt/azurehpc/slurm/suspend_program.sh not executable", "22.05", v.HOST,
     "power_save.c:1004 _valid_prog"),
    ("error: power_save program /opt/azurehpc/slurm/suspend_program.sh not found", "26.05", v.HOST,
     "power_action.c:122"),
    ("error: Invalid ResumeFailProgram PowerAction __resumefailprog__ (/opt/azurehpc/slurm/resume_fail_program.sh)",
     "26.05", v.HOST, "power_save.c:1427-1442"),
    ("error: Invalid SuspendProgram PowerAction __suspendprog__ (suspend.sh)", "26.05", v.REFUSED, ""),
    ("error: power_save module disabled, invalid SuspendProgram /opt/azurehpc/slurm/suspend_program.sh", "24.11",
     v.HOST, "power_save.c:1050"),
    ("error: power_save module disabled, invalid ResumeProgram /opt/resume.sh", "22.05", v.HOST, "power_save.c:985"),
    ("error: power_save program suspend.sh not absolute pathname", "24.11", v.REFUSED, ""),
    ("error: power_save module disabled, invalid SuspendProgram suspend.sh", "24.11", v.REFUSED, ""),
    # 24.11 no longer translates MpiDefault=openmpi (not in slurm-24-11-5-1 read_config.c): whatever it says is its own
    ("error: Translating obsolete 'MpiDefault=openmpi' option to 'MpiDefault=none'. Please update your "
     "configuration.", "24.11", v.REFUSED, ""),
    ("error: Invalid HealthCheckNodeState value BOGUS ignored", "22.05", v.REFUSED, ""),
    ("error: Node gpu1 has invalid GRES configured", "24.11", v.REFUSED, ""),
    ("fatal: The AccountingStorageLoc option has been removed", "22.05", v.FATAL, ""),
    # topology/tree with a node in no leaf switch (the corpus's slurm-test133.1-topology): 22.05 says so through
    # error("WARNING: ...") and runs; 24.11 logs it through warning(), which is no error line
    ("error: WARNING: switches lack access to 1 nodes: peta99999", "22.05", v.WARNING, "topology_tree.c:447"),
    # no Default=YES partition (the corpus's slurm-test7.17.4-gres has no partition at all): slurmctld goes on
    ("error: read_slurm_conf: default partition not set.", "24.11", v.WARNING, "read_config.c:1547"),
    # the same words from job_mgr.c are a job refused, not the config's parse
    ("error: _get_job_parts: default partition not set", "24.11", v.REFUSED, ""),
    # a release this table has no citation for: the conservative verdict
    ('error: The option "PowerPlugin" is defunct, please remove it from slurm.conf.', "25.05", v.REFUSED, ""),
])
def test_error_lines_are_classified_by_their_source_in_the_release(line: str, release: str, kind: str,
                                                                   where: str) -> None:
    got, src = v.classify(line, release)
    assert got == kind and where in src and bool(src) == bool(where), (got, src)


def test_notices_and_host_facts_never_make_a_parse_invalid_refused_lines_do() -> None:
    defunct = 'error: The option "CgroupAutomount" is defunct, please remove it from cgroup.conf.'
    obsolete = "error: Ignoring obsolete FastSchedule=1 option. Please remove from your configuration."
    mail = "error: Configured MailProg is invalid"
    rp = v.RealParse(False, "slurmctld logged 3 error line(s): x", [obsolete, mail, defunct], 0.2)
    v.sort_lines(rp, "24.11")
    assert rp.ok is True and rp.errors == [] and rp.host_facts == [mail], rp
    assert [(k, w.split(":")[0]) for k, w, _ in rp.notices] == [
        (v.DEPRECATED, "src/common/read_config.c"), (v.DEFUNCT, "src/interfaces/cgroup.c")]
    refused = "error: Invalid HealthCheckNodeState value BOGUS ignored"
    rp = v.RealParse(False, "slurmctld logged 2 error line(s): x", [obsolete, refused], 0.2)
    v.sort_lines(rp, "22.05")
    assert rp.ok is False and rp.errors == [refused] and len(rp.notices) == 1, rp
    # a slurmctld that never became the primary stays a failure whatever its lines were
    rp = v.RealParse(False, "slurmctld exited (rc=1) before running as primary controller: x", [obsolete], 0.2)
    v.sort_lines(rp, "22.05")
    assert rp.ok is False, rp


def test_validate_reports_each_real_parse_line_with_its_class(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ["error: Ignoring obsolete FastSchedule=1 option. Please remove from your configuration.",
             "error: Invalid HealthCheckNodeState value BOGUS ignored"]

    def fake(files, version=None, **_kw):  # type: ignore[no-untyped-def]
        rp = v.RealParse(False, "slurmctld logged 2 error line(s): x", list(lines), 0.1, release="22.05")
        v.sort_lines(rp, "22.05")
        return rp

    monkeypatch.setattr(v, "real_parse", fake)
    monkeypatch.setattr(v, "static_check", lambda files, version=None: v.Report())
    rep = v.validate({"slurm.conf": ""}, "22.05")
    assert rep.errors == ["slurmctld (refused): error: Invalid HealthCheckNodeState value BOGUS ignored"], rep
    assert rep.warnings == ["deprecated in Slurm 22.05 (src/common/read_config.c:4071), not a finding: slurmctld: "
                            "error: Ignoring obsolete FastSchedule=1 option. Please remove from your configuration."]
