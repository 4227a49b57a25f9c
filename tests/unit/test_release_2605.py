"""Issue 21: Slurm 26.05 (and the 25.11 deltas) in the release tables, the generator, the real parse's copy, the
lab's root recipe and its tenants. Pure: no Slurm runs here (the lab tests let slurmctld 26.05 decide)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmkit.accounts.plan import Change, qos_changes
from slurmkit.backend.realparse import rewrite_for_copy
from slurmkit.generate import slurmkeys, slurmplugins
from slurmkit.generate.slurmconf import generate
from slurmkit.generate.validate import cgroup_keys
from slurmkit.lab import image
from slurmkit.lab.inventory import LAB_USERS, lab_inventory
from slurmkit.model.load import load_cluster_dict
from slurmkit.release import (
    DEBIAN_SUITES,
    SUPPORTED_SLURM_VERSIONS,
    allow_qos_fatal,
    features_for,
    judge_floor,
    judges,
)


def test_2605_is_a_release_with_a_root_recipe():
    assert "26.05" in SUPPORTED_SLURM_VERSIONS and DEBIAN_SUITES["26.05"] == "unstable"
    # the unstable suite's Release has a Valid-Until in the past on a snapshot mirror; stable suites have none
    assert image.apt_options("unstable") == "-o Acquire::Check-Valid-Until=false"
    assert image.apt_options("trixie") == "" and image.apt_options("bookworm") == ""


def test_debootstrap_runs_in_its_own_mount_namespace(tmp_path: Path):
    argv = image.debootstrap_argv("unstable", tmp_path, "http://m/debian")
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[4:] == ["debootstrap", "--variant=minbase", "unstable", str(tmp_path), "http://m/debian"]


def test_2605_keys_plugins_and_cgroup_keys():
    new = {"healthchecktimeout", "licenseparameters", "metricsauthusers", "metricsparameters", "poweraction",
           "slurmctldhttpauthparameters", "slurmdhttpauthparameters"}
    assert new <= slurmkeys.slurm_conf_keys("26.05") and not new & slurmkeys.slurm_conf_keys("25.11")
    assert slurmplugins._release("26.05") == "26.05" and "ring" in slurmplugins.PLUGINS["26.05"]["topology"]
    assert "ring" not in slurmplugins.PLUGINS["25.11"]["topology"]
    assert "cgroupjobidpaths" in cgroup_keys("26.05")[0] and "cgroupjobidpaths" not in cgroup_keys("25.11")[0]


def test_judges_of_2605():
    assert judge_floor("26.05") == "25.11" and judges("26.05", "25.11") and judges("26.05", "26.05")
    assert not judges("26.05", "25.05") and not judges("26.05", "24.11") and judges("24.11", "23.11")
    assert allow_qos_fatal("25.11") and allow_qos_fatal("26.05") and not allow_qos_fatal("25.05")


def _hooked(interval: int, version: str) -> str:
    inv = lab_inventory(4, hooks_command="/opt/sk/bin/slurmkit", healthcheck_interval=interval)
    inv["slurm_version"] = version
    return generate(load_cluster_dict(inv), version=version, conf_dir="/etc/slurm")["slurm.conf"]


def test_healthcheck_timeout_is_written_below_a_short_interval_from_2605():
    assert "HealthCheckTimeout=29" in _hooked(30, "26.05") and "HealthCheckInterval=30" in _hooked(30, "26.05")
    assert "HealthCheckTimeout" not in _hooked(300, "26.05")  # the default 60 is below it
    assert "HealthCheckTimeout" not in _hooked(30, "25.11")  # unknown key before 26.05 (fatal)
    assert features_for("26.05").healthcheck_timeout and not features_for("25.11").healthcheck_timeout


def test_conf_generate_refuses_a_release_newer_than_the_tables(tmp_path: Path):
    import yaml

    from slurmkit.cli.main import cli

    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(lab_inventory(2)))
    r = CliRunner().invoke(cli, ["conf", "generate", str(p), "--slurm-version", "99.99", "-o", str(tmp_path / "o"),
                                 "--no-real-parse"])
    assert r.exit_code == 2 and "unsupported Slurm version 99.99" in r.output, r.output


def test_lab_tenants_do_not_use_nobody():
    # from 25.11 Slurm maps the name "nobody" to a placeholder uid (src/common/uid.c)
    assert "nobody" not in [u for users in LAB_USERS.values() for u in users]


CONF = ("SlurmctldHost=head\nAccountingStorageType=accounting_storage/slurmdbd\nNodeName=n[1-2] CPUs=2\n"
        "PartitionName=gpu Nodes=ALL AllowQos=normal,high Default=YES\n")


@pytest.mark.parametrize("judge,dropped", [("26.05", True), ("25.11", True), ("24.11", False), ("22.05", False)])
def test_copy_leaves_allow_qos_out_where_unknown_qos_are_fatal(tmp_path: Path, judge: str, dropped: bool):
    copy = rewrite_for_copy(CONF, tmp_path, judge_release=judge)
    part = next(ln for ln in copy.text.splitlines() if ln.startswith("PartitionName"))
    assert ("AllowQos" not in part) == dropped and "Default=YES" in part
    assert any("AllowQos=normal,high" in n for n in copy.notes) == dropped
    # without slurmdbd on the site the fatal line is the site's own: the copy keeps it
    site = rewrite_for_copy(CONF.replace("slurmdbd", "none"), tmp_path, judge_release=judge)
    assert "AllowQos=normal,high" in site.text


def test_qos_changes_are_the_qos_additions_and_settings():
    ch = [Change("add", "qos", "high", ()), Change("modify", "qos", "normal", (("Priority", "0", "100"),)),
          Change("add", "account", "team-a", ()), Change("delete", "qos", "old", ()),
          Change("add", "user", "games@team-b", ())]
    assert [(c.action, c.key) for c in qos_changes(ch)] == [("add", "high"), ("modify", "normal")]


def test_cgroup_conf_keeps_job_id_paths_from_2605():
    def cg(version: str) -> str:
        inv = lab_inventory(2)
        inv["slurm_version"] = version
        return generate(load_cluster_dict(inv), version=version, conf_dir="/etc/slurm")["cgroup.conf"]

    assert "CgroupJobIdPaths=yes" in cg("26.05") and "CgroupJobIdPaths" not in cg("25.11")


def test_nodes_path_gives_the_topology_reason_only_before_2511():
    from slurmkit.elastic.path import choose

    assert "must be in topology.conf" in choose("24.11", True).statement("add")
    said = choose("26.05", True).statement("add")
    assert "must be in topology.conf" not in said and "join the topology at run time" in said


def test_cgroup_plugin_disabled_is_a_value_from_2405():
    # the lab's cgroup.conf without --cgroups (lab/config.py): `nodes add` validated it and refused (issue 21, seen on
    # 24.11 and 26.05 labs)
    assert slurmplugins.check("CgroupPlugin", "disabled", "24.11") == []
    assert slurmplugins.check("CgroupPlugin", "disabled", "26.05") == []
    assert slurmplugins.check("CgroupPlugin", "disabled", "23.11") != []
