"""The files beside slurm.conf a GPU site needs (issue 20 item 6): slurmdbd.conf, plugstack.conf, job_container.conf,
acct_gather.conf, and the slurm.conf keys of ``runtime:`` -- loading, rendering per release, writing (mode/owner),
and what a change to each needs in the rollout plan."""

from __future__ import annotations

import copy
import os
import pwd
from pathlib import Path

import pytest
import yaml

from slurmkit.errors import InventoryError
from slurmkit.generate import Overrides, generate
from slurmkit.generate import rollout as r
from slurmkit.generate.confparse import parse_settings, parse_slurm_conf
from slurmkit.model.load import load_cluster_dict

ROOT = Path(__file__).resolve().parents[2]
LAB = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
DBD = {"host": "dbd1", "backup_host": "dbd2", "storage": {"host": "db1", "user": "slurm"},
       "purge": {"jobs": "12month", "steps": "30days"}}
RUNTIME = {"pyxis": {"plugin": "/usr/local/lib/slurm/spank_pyxis.so", "args": ["runtime_path=/run/pyxis"]},
           "tmpfs": {"base_path": "/var/spool/slurmd/job_tmpfs"}, "energy": "ipmi",
           "reboot_program": "/usr/sbin/reboot", "mpi_default": "pmix"}


def inv(**top: object) -> dict:
    d = copy.deepcopy(LAB)
    d.update(copy.deepcopy(top))
    return d


def gen(d: dict, version: str = "22.05", ov: Overrides | None = None) -> dict[str, str]:
    return generate(load_cluster_dict(d), version=version, overrides=ov)


def refused(d: dict, path: str, words: str) -> None:
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(d)
    assert ei.value.path == path, ei.value
    assert words in str(ei.value), ei.value


def settings(text: str, name: str) -> dict[str, str]:
    return {k: v[1] for k, v in parse_settings(text, name).items()}


# ---------------------------------------------------------------------------------------------- loading


def test_loader_errors_name_the_key() -> None:
    refused(inv(accounting={**DBD, "storage": {"password": "x"}}), "accounting.storage.password", "site overlay")
    refused(inv(accounting={**DBD, "purge": {"jobs": "1 year"}}), "accounting.purge.jobs", "months, days or hours")
    refused(inv(accounting={**DBD, "purge": {"job": "1"}}), "accounting.purge.job", "did you mean 'jobs'")
    refused(inv(accounting={**DBD, "backup_host": "dbd1"}), "accounting.backup_host", "another host")
    refused(inv(accounting={**DBD, "storage": {"database": "acct-db"}}), "accounting.storage.database", "invalid value")
    # gpu/nvml's energy read is empty (gpu_nvml.c): Slurm would record 0 J for every NVIDIA job
    refused(inv(runtime={"energy": "gpu"}), "runtime.energy", "rsmi")
    refused(inv(runtime={"tmpfs": {"base_path": "/x", "dirs": []}}), "runtime.tmpfs.dirs", "at least one")
    refused(inv(runtime={"pyxis": {"plugin": "/usr/lib/pyxis"}}), "runtime.pyxis.plugin", "spank_pyxis.so")
    refused(inv(runtime={"pyxis": {"plugin": "/p.so", "args": ["a;b"]}}), "runtime.pyxis.args[0]", "invalid value")
    refused(inv(runtime={"mpi_default": "openmpi"}), "runtime.mpi_default", "none, pmi2, pmix")
    refused(inv(runtime={"reboot": "/sbin/reboot"}), "runtime.reboot", "did you mean 'reboot_program'")
    refused(inv(rollout={"restart_slurmdbd": "ssh dbd1 'systemctl restart"}), "rollout.restart_slurmdbd", "quotation")


# ---------------------------------------------------------------------------------------------- rendering


def test_slurmdbd_conf_only_with_storage_and_ha_pairs_both_files() -> None:
    assert "slurmdbd.conf" not in gen(inv(accounting={"host": "dbd1"}))  # a site's own file is left alone
    files = gen(inv(accounting=DBD))
    dbd = settings(files["slurmdbd.conf"], "slurmdbd.conf")
    assert dbd["DbdHost".lower()] == "dbd1" and dbd["dbdbackuphost"] == "dbd2"
    assert dbd["storagehost"] == "db1" and dbd["storageuser"] == "slurm" and dbd["storageloc"] == "slurm_acct_db"
    assert dbd["purgejobafter"] == "12month" and dbd["purgestepafter"] == "30days"
    assert "storagepass" not in dbd and "StoragePass: none given" in files["slurmdbd.conf"]
    conf = parse_slurm_conf(files["slurm.conf"])
    assert conf.value("AccountingStorageHost") == "dbd1" and conf.value("AccountingStorageBackupHost") == "dbd2"
    # the password from the site overlay, the lab's ports: merged key by key
    files = gen(inv(accounting=DBD), ov=Overrides(slurmdbd_conf=(("StoragePass", "s3cret"), ("DbdPort", "7000"))))
    dbd = settings(files["slurmdbd.conf"], "slurmdbd.conf")
    assert dbd["storagepass"] == "s3cret" and dbd["dbdport"] == "7000" and "none given" not in files["slurmdbd.conf"]


def test_overlay_file_takes_slurmdbd_conf(tmp_path: Path) -> None:
    from slurmkit.generate.slurmconf import load_overrides

    p = tmp_path / "site.yaml"
    p.write_text("slurmdbd_conf: {StoragePass: s3cret}\n")
    assert load_overrides(str(p)).slurmdbd_conf == (("StoragePass", "s3cret"),)


@pytest.mark.parametrize(("version", "key", "dirs"), [
    ("22.05", "JobContainerType=job_container/tmpfs", False),  # no Dirs= before 23.02 (read_jcconf.c)
    ("24.11", "JobContainerType=job_container/tmpfs", True),
    ("25.11", "NamespaceType=namespace/tmpfs", True),
    ("26.05", "NamespaceType=namespace/tmpfs", True),
])
def test_runtime_per_release(version: str, key: str, dirs: bool) -> None:
    files = gen(inv(runtime=RUNTIME, slurm_version=version), version)
    conf = parse_slurm_conf(files["slurm.conf"])
    k, v = key.split("=")
    assert conf.value(k) == v
    assert not conf.value("NamespaceType" if k == "JobContainerType" else "JobContainerType")
    assert "Contain" in conf.value("PrologFlags").split(",")  # job_container.conf(5): required by the plugin
    jc = settings(files["job_container.conf"], "job_container.conf")
    assert jc["basepath"] == "/var/spool/slurmd/job_tmpfs" and jc["autobasepath"] == "true"
    assert (jc.get("dirs") == "/tmp,/dev/shm") if dirs else ("dirs" not in jc)
    assert conf.value("LaunchParameters") == "use_interactive_step"
    assert conf.value("RebootProgram") == "/usr/sbin/reboot" and conf.value("MpiDefault") == "pmix"
    assert conf.value("AcctGatherEnergyType") == "acct_gather_energy/ipmi" and conf.value("AcctGatherNodeFreq") == "30"
    assert settings(files["acct_gather.conf"], "acct_gather.conf")["energyipmifrequency"] == "30"
    spank = [ln for ln in files["plugstack.conf"].splitlines() if not ln.startswith("#")]
    assert spank == ["required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis"]


def test_runtime_defaults_and_22_05_fixed_dirs() -> None:
    files = gen(inv())
    conf = parse_slurm_conf(files["slurm.conf"])
    assert conf.value("MpiDefault") == "none" and conf.value("LaunchParameters") == "use_interactive_step"
    assert not {"plugstack.conf", "job_container.conf", "acct_gather.conf", "slurmdbd.conf"} & set(files)
    off = parse_slurm_conf(gen(inv(runtime={"interactive_step": False}))["slurm.conf"])
    assert not off.value("LaunchParameters")
    odd = inv(runtime={"tmpfs": {"base_path": "/local/jobs", "dirs": ["/tmp", "/scratch"]}})
    with pytest.raises(InventoryError) as ei:
        gen(odd, "22.05")
    assert ei.value.path == "runtime.tmpfs.dirs" and "fixed" in str(ei.value)
    jc = settings(gen(odd, "24.11")["job_container.conf"], "job_container.conf")
    assert jc["dirs"] == "/tmp,/scratch"


@pytest.mark.parametrize(("version", "base", "words"), [
    # 22.05 read_jcconf.c: fatal "Cannot use /tmp or /dev/shm as BasePath" (what the lab's slurmd 22.05 said)
    ("22.05", "/tmp/jobs", "in /tmp or /dev/shm"),
    ("22.05", "/dev/shm", "in /tmp or /dev/shm"),
    # 24.11+ read_jcconf.c: fatal when a Dirs entry begins with BasePath (string prefix)
    ("24.11", "/t", "begins runtime.tmpfs.dirs[0]"),
    ("26.05", "/dev/shm", "begins runtime.tmpfs.dirs[1]"),
])
def test_base_path_slurmd_refuses(version: str, base: str, words: str) -> None:
    with pytest.raises(InventoryError) as ei:
        gen(inv(runtime={"tmpfs": {"base_path": base}}), version)
    assert ei.value.path == "runtime.tmpfs.base_path" and words in str(ei.value), ei.value
    if version != "22.05":
        assert "job_container.conf" in gen(inv(runtime={"tmpfs": {"base_path": "/tmp/jobs"}}), version)


# ---------------------------------------------------------------------------------------------- writing


def test_slurmdbd_conf_is_written_600_and_rewritten_when_its_mode_drifts(tmp_path: Path) -> None:
    body = "# x\nSlurmUser=root\nStorageUser=slurm\n"
    r.write_files({"slurmdbd.conf": body, "slurm.conf": "A\n"}, tmp_path)
    assert (tmp_path / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "slurm.conf").stat().st_mode & 0o777 == 0o644
    (tmp_path / "slurmdbd.conf").chmod(0o644)  # slurmdbd would refuse it: fatal "should be 600"
    assert r.write_files({"slurmdbd.conf": body}, tmp_path) is not None
    assert (tmp_path / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_slurmdbd_conf_belongs_to_its_slurm_user(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    r.write_files({"slurmdbd.conf": "SlurmUser=nobody\n"}, tmp_path)
    assert (tmp_path / "slurmdbd.conf").stat().st_uid == nobody
    # a user this host does not know: the file stays the writer's (the slurmdbd host is elsewhere)
    r.write_files({"slurmdbd.conf": "SlurmUser=no-such-user-here\n"}, tmp_path)
    assert (tmp_path / "slurmdbd.conf").stat().st_uid == 0


# ---------------------------------------------------------------------------------------------- rollout


def kinds(old: dict[str, str], new: dict[str, str], version: str = "22.05") -> list[str]:
    return [s.kind for s in r.plan_steps(r.semantic_diff(old, new, version), version)]


def test_each_file_has_its_rollout_class() -> None:
    base = gen(inv(accounting=DBD, runtime=RUNTIME))
    # slurmdbd.conf: restart slurmdbd only, nothing drained, no slurmctld/slurmd action
    dbd = gen(inv(accounting={**DBD, "purge": {"jobs": "6month"}}, runtime=RUNTIME))
    ch = r.semantic_diff(base, dbd, "22.05")
    assert [(c.file, c.subject, c.old, c.new) for c in ch] == [("slurmdbd.conf", "PurgeJobAfter", "12month", "6month"),
                                                               ("slurmdbd.conf", "PurgeStepAfter", "30days", "")]
    assert kinds(base, dbd) == [r.WRITE, r.RESTART_DBD, r.VERIFY]
    # plugstack.conf: read afresh by every job launch: write, nothing else
    spank = gen(inv(accounting=DBD, runtime={**RUNTIME, "pyxis": {"plugin": "/opt/pyxis/spank_pyxis.so"}}))
    assert [c.action for c in r.semantic_diff(base, spank, "22.05")] == [r.PUSH]
    assert kinds(base, spank) == [r.WRITE, r.VERIFY]
    # job_container.conf: drain every node, restart slurmd (reconfigure is not sufficient), resume
    jc = gen(inv(accounting=DBD, runtime={**RUNTIME, "tmpfs": {"base_path": "/local/job_tmpfs"}}))
    assert kinds(base, jc) == [r.DRAIN_STEP, r.WRITE, r.RESTART_SLURMD, r.VERIFY, r.RESUME]
    # acct_gather.conf: restart of the daemons (slurmctld reads it too)
    files = dict(base, **{"acct_gather.conf": base["acct_gather.conf"].replace("=30", "=10")})
    assert kinds(base, files) == [r.WRITE, r.RESTART_CTLD, r.RESTART_SLURMD, r.VERIFY]


def test_storage_pass_is_never_shown() -> None:
    a = gen(inv(accounting=DBD), ov=Overrides(slurmdbd_conf=(("StoragePass", "old-secret"),)))
    b = gen(inv(accounting=DBD), ov=Overrides(slurmdbd_conf=(("StoragePass", "new-secret"),)))
    lines = [c.line() for c in r.semantic_diff(a, b, "22.05")]
    assert lines and not any("secret" in ln for ln in lines) and "(set) -> (changed)" in lines[0]


def test_job_container_type_to_namespace_type_is_one_rename() -> None:
    old = gen(inv(runtime=RUNTIME, slurm_version="24.11"), "24.11")
    new = gen(inv(runtime=RUNTIME, slurm_version="26.05"), "26.05")
    ch = [c for c in r.semantic_diff(old, new, "26.05") if c.subject in ("NamespaceType", "JobContainerType")]
    assert [(c.subject, c.old, c.new, c.action) for c in ch] == [
        ("NamespaceType", "JobContainerType=job_container/tmpfs", "namespace/tmpfs", r.RECONFIGURE)]
    assert "read_config.c" in ch[0].reason


def test_a_side_file_no_longer_generated_stays(tmp_path: Path) -> None:
    files = gen(inv(accounting=DBD, runtime=RUNTIME))
    r.write_files(files, tmp_path)
    plain = gen(inv(accounting={"host": "dbd1"}))
    ours, foreign = r.stale_files(tmp_path, plain)
    assert not {"slurmdbd.conf", "plugstack.conf", "job_container.conf", "acct_gather.conf"} & set(ours + foreign)
    diff = r.semantic_diff(r.read_dir(tmp_path), plain, "22.05")
    assert not [c for c in diff if c.file in r.SIDE_FILES]


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_adding_tmpfs_on_23_11_plus_also_reconfigures_slurmctld(version: str) -> None:
    """JobContainerType/NamespaceType is of the reconfigure class from 23.11, job_container.conf needs a slurmd
    restart: the plan used to restart slurmd only, and slurmctld kept the old config (NamespaceType=(null))."""
    old = gen(inv(slurm_version=version), version)
    new = gen(inv(slurm_version=version, runtime={"tmpfs": {"base_path": "/local/job_tmpfs"}}), version)
    assert kinds(old, new, version) == [r.DRAIN_STEP, r.WRITE, r.RESTART_SLURMD, r.RECONF, r.VERIFY, r.RESUME]
