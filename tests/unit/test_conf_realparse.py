"""The real slurmctld parse (Debian's 22.05 here): every preset renders files it accepts with zero error
lines, and the failures slurmctld does not treat as fatal are still caught.

Presets targeting a newer release are rendered for 22.05 where their features allow (tree topologies);
the GB200 preset needs topology/block (23.11+) and cannot be parsed by a 22.05 slurmctld: for it the
test asserts that the parse is skipped with the version reason and the static checks pass.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurmkit.generate import confparse as cp
from slurmkit.generate import generate
from slurmkit.generate.validate import controller_host, real_parse, rewrite_for_copy, static_check, validate
from slurmkit.model.load import load_cluster
from tests.conftest import needs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = needs(bool(shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()), "needs Debian's slurmctld")

PARSEABLE_ON_22_05 = ["lab", "dgx-h100-superpod-su", "mixed-pcie", "fat-tree-4096"]


@pytest.mark.parametrize("preset", PARSEABLE_ON_22_05)
def test_preset_passes_real_slurmctld(preset: str) -> None:
    files = generate(load_cluster(ROOT / "examples" / f"{preset}.yaml"), version="22.05")
    rep = validate(files, "22.05")
    assert rep.real_ok is True, (rep.real, rep.errors)
    assert rep.errors == []
    # the copy ran under the first controller's own name, with every SlurmctldHost line kept
    first = controller_host(cp.parse_slurm_conf(files["slurm.conf"]).controllers[0])[0]
    assert f" as {first}" in rep.real


def test_block_preset_is_skipped_with_reason() -> None:
    files = generate(load_cluster(ROOT / "examples" / "gb200-nvl72.yaml"))
    assert static_check(files).errors == []
    rp = real_parse(files)
    assert rp.ok is None and "targets Slurm 25.05, installed slurmctld is 22.05" in rp.message


@pytest.fixture(scope="module")
def lab_files() -> dict[str, str]:
    return generate(load_cluster(ROOT / "examples" / "lab.yaml"))


@pytest.mark.parametrize(
    ("name", "old", "new", "expect"),
    [
        # not fatal to slurmctld: only the error line tells
        ("slurm.conf", "Gres=gpu:h100:8", "Gres=gpu:h100:8,nic:2", "Invalid GRES configured"),
        ("topology.conf", "SwitchName=spine", "SwitchName=leaf3 Nodes=ghost[1-2]\nSwitchName=spine", "Invalid hostnames in switch configuration"),
        ("gres.conf", "AutoDetect=off", "AutoDetect=off\nTypo=x", "unrecognized key: Typo"),
        # fatal
        ("slurm.conf", "SelectType=select/cons_tres", "SelectType=select/nonexistent", "Can't find plugin"),
        ("cgroup.conf", "ConstrainCores=yes", "ConstrainCores=yes\nBogus=yes", "cgroup.conf"),
    ],
)
def test_real_parse_catches_what_slurmctld_logs(lab_files: dict[str, str], name: str, old: str, new: str, expect: str) -> None:
    files = dict(lab_files)
    files[name] = files[name].replace(old, new)
    rp = real_parse(files, "22.05")
    assert rp.ok is False and any(expect in e for e in rp.errors), rp


@pytest.fixture(scope="module")
def ha_files() -> dict[str, str]:
    files = generate(load_cluster(ROOT / "examples" / "dgx-h100-superpod-su.yaml"), version="22.05")
    assert [ln for ln in files["slurm.conf"].splitlines() if ln.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=head01", "SlurmctldHost=head02"]
    return files


def test_copy_keeps_controller_and_node_lines(ha_files: dict[str, str], tmp_path: Path) -> None:
    copy = rewrite_for_copy(ha_files["slurm.conf"], tmp_path)
    kept = [ln for ln in copy.text.splitlines() if ln.startswith(("SlurmctldHost=", "NodeName=", "SlurmctldPort="))]
    wrote = [ln for ln in ha_files["slurm.conf"].splitlines() if ln.startswith(("SlurmctldHost=", "NodeName=", "SlurmctldPort="))]
    assert kept == wrote
    assert copy.primary == "head01" and copy.dbd
    assert {"head01", "head02", "dgx001", "dgx032"} <= set(copy.names)


def test_copy_puts_backup_controllers_on_an_unreachable_address(ha_files: dict[str, str], tmp_path: Path) -> None:
    copy = rewrite_for_copy(ha_files["slurm.conf"], tmp_path)
    hosts = dict(reversed(ln.split()) for ln in copy.hosts().splitlines())
    assert copy.backups == ["head02"]
    assert hosts["head01"] == "127.0.0.1" and hosts["dgx001"] == "127.0.0.1"
    assert hosts["head02"] == "192.0.2.1"  # TEST-NET-1: no route in the private network namespace


def test_duplicate_controllers_are_refused_by_the_real_parse(ha_files: dict[str, str]) -> None:
    # what issue 9 item 1 produced: the old check rewrote SlurmctldHost to this host and passed it
    files = dict(ha_files, **{"slurm.conf": ha_files["slurm.conf"].replace("SlurmctldHost=head01", "SlurmctldHost=head02")})
    rp = real_parse(files, "22.05")
    assert rp.ok is False and any("Duplicate SlurmctldHost records: head02" in e for e in rp.errors), rp


def test_two_controllers_parse_as_the_primary(ha_files: dict[str, str]) -> None:
    rp = real_parse(ha_files, "22.05")
    assert rp.ok is True, rp
    assert " as head01" in rp.message
    # the backup is asked to relinquish control at an address that fails at once in the private namespace
    # (loopback made 24.11 wait 30 s on the copy itself, see validate.BACKUP_NET)
    assert any("_shutdown_bu_thread" in e and "head02" in e and "Network is unreachable" in e for e in rp.expected), rp
    # the site uses slurmdbd, the copy has none: the priority plugin's complaints are expected, not findings
    assert any("PriorityWeightAge can only be used with SlurmDBD" in e for e in rp.expected)


def test_controller_names_in_node_addr_resolve_in_the_copy(lab_files: dict[str, str]) -> None:
    # NodeAddr/NodeHostname names as a site writes them: resolvable only inside the copy's private /etc/hosts
    conf = lab_files["slurm.conf"].replace("NodeName=node[1-8] ", "NodeName=node[1-8] NodeAddr=ib-node[1-8] NodeHostname=host-node[1-8] ")
    assert conf != lab_files["slurm.conf"]
    rp = real_parse(dict(lab_files, **{"slurm.conf": conf}), "22.05")
    assert rp.ok is True, rp


def test_priority_errors_after_primary_are_findings_without_slurmdbd(lab_files: dict[str, str]) -> None:
    # slurmctld logs these right after "Running as primary controller"; the old check stopped reading there
    conf = lab_files["slurm.conf"] + "PriorityType=priority/multifactor\nPriorityWeightAge=1000\n"
    rp = real_parse(dict(lab_files, **{"slurm.conf": conf}), "22.05")
    assert rp.ok is False and any("PriorityWeightAge can only be used with SlurmDBD" in e for e in rp.errors), rp


def test_controller_host_splits_the_address() -> None:
    assert controller_host("head01(10.0.0.1)") == ("head01", "10.0.0.1")
    assert controller_host("head01") == ("head01", "")
