"""Validation judges a config by what its target release does (issue 19, item 5): removed keys with the release
that removed them, defunct keys as warnings, keys still in the table but fatal when set, plugin names against what
the release ships (with did-you-mean). Each case cites src/common/read_config.c / src/plugins at the release tag."""

from __future__ import annotations

import pytest

from slurmkit.generate.validate import static_check

BASE = "SlurmctldHost=h\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n"


def check(extra: str, version: str, cgroup: str | None = None) -> tuple[list[str], list[str]]:
    files = {"slurm.conf": BASE + extra + "\n"}
    if cgroup is not None:
        files["cgroup.conf"] = cgroup
    rep = static_check(files, version)
    return rep.errors, rep.warnings


@pytest.mark.parametrize("extra, version, error, warning", [
    # read_config.c _validate_and_set_defaults, 22.05 and 24.11: fatal("The AccountingStorageLoc option has been
    # removed. ...") although the key is still in slurm_conf_options[] (removed from the table in 25.11)
    ("AccountingStorageLoc=/var/log/acct", "22.05", "The AccountingStorageLoc option has been removed", None),
    ("AccountingStorageLoc=/var/log/acct", "24.11", "The AccountingStorageLoc option has been removed", None),
    # same function: FastSchedule=1 is an error line and ignored; other values are fatal
    ("FastSchedule=1", "24.11", None, "Ignoring obsolete FastSchedule=1"),
    ("FastSchedule=2", "22.05", "SlurmdParameters=config_overrides", None),
    # _defunct_option entries: 22.05 SchedulerAuth; 24.11 PowerPlugin (and others)
    ("SchedulerAuth=x", "22.05", None, "SchedulerAuth is defunct in Slurm 22.05"),
    ("PowerPlugin=power/none", "24.11", None, "PowerPlugin is defunct in Slurm 24.11"),
    # not in the 24.11 table: removed in 24.05 (slurmkeys deltas)
    ("SchedulerAuth=x", "24.11", "no slurm.conf key SchedulerAuth (removed in Slurm 24.05)", None),
    ("TLSType=tls/none", "22.05", "no slurm.conf key TLSType (added in Slurm 24.05)", None),
    ("SelectTyp=select/cons_tres", "24.11", "did you mean SelectType?", None),
    # plugins: src/plugins/task at slurm-24-11-5-1 has affinity, cgroup
    ("TaskPlugin=task/affinity,task/cgroupx", "24.11", "no task plugin 'cgroupx'; did you mean task/cgroup?", None),
    ("MpiDefault=pmixx", "24.11", "no mpi plugin 'pmixx'; did you mean pmix?", None),
    ("MpiDefault=pmix_v4", "22.05", None, None),
    ("SwitchType=switch/none", "24.11", None, None),  # 23.11+: "none" read as no plugin (read_config.c)
    ("TopologyPlugin=topology/default", "22.05", "no topology plugin 'default'", None),  # 23.11 renamed none -> default
    ("TopologyPlugin=topology/default", "24.11", None, None),
    ("JobSubmitPlugins=lua,require_timelimit", "24.11", None, None),
])
def test_release_facts(extra: str, version: str, error: str | None, warning: str | None) -> None:
    errors, warnings = check(extra, version)
    if error is None:
        assert errors == [], errors
    else:
        assert len(errors) == 1 and error in errors[0], errors
    if warning is None:
        assert warnings == [], warnings
    else:
        assert len(warnings) == 1 and warning in warnings[0], warnings


def test_cgroup_plugin_typo() -> None:
    # src/plugins/cgroup at slurm-22-05-8-1 and slurm-24-11-5-1: v1, v2 (and cgroup.conf(5) CgroupPlugin=autodetect)
    errors, _w = check("", "24.11", "CgroupPlugin=cgroup/v3\n")
    assert len(errors) == 1 and "no cgroup plugin 'v3'" in errors[0]
    assert check("", "24.11", "CgroupPlugin=autodetect\n") == ([], [])


def test_cgroup_plugin_disabled_from_2405() -> None:
    # src/interfaces/cgroup.c cgroup_g_init(): "disabled" loads no plugin from slurm-24-05-0-1 (absent at 23.11's
    # tags); the 24.11 lab's cgroup.conf has it, so refusing it broke every `conf apply` on that lab
    assert check("", "24.05", "CgroupPlugin=disabled\n") == ([], [])
    assert check("", "24.11", "CgroupPlugin=disabled\n") == ([], [])
    errors, _w = check("", "23.11", "CgroupPlugin=disabled\n")
    assert len(errors) == 1 and "no cgroup plugin 'disabled'" in errors[0]
