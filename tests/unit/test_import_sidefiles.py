"""`conf import` reads back what `conf generate` writes beside slurm.conf (issue 33 item 8): slurmdbd.conf,
plugstack.conf, job_container.conf, acct_gather.conf go into the inventory keys they are generated from (plus each
file's pass-through key), so generate -> import -> generate gives the same files, byte for byte below slurmkit's
header line (which carries the inventory's hash), for 22.05, 24.11 and 26.05. A site's edits are carried or named;
a password never enters the inventory; what the release's reader refuses is one line naming file:line."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmkit.adopt.importer import import_site
from slurmkit.adopt.sidefiles import SIDE_FILES
from slurmkit.errors import InventoryError
from slurmkit.generate import Overrides, generate
from slurmkit.generate.rollout import semantic_diff
from slurmkit.model import yamlio
from slurmkit.model.load import load_cluster_dict, load_cluster_text
from tests.conftest import release_under_test

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ("22.05", "24.11", "26.05")
PRESETS = sorted(p.stem for p in (ROOT / "examples").glob("*.yaml"))
DGX = yaml.safe_load((ROOT / "examples" / "dgx-h100-superpod-su.yaml").read_text())


def shape(**top: object) -> dict:
    d = copy.deepcopy(DGX)
    for k, v in top.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = copy.deepcopy(v)
    return d


# inventory shapes beyond the presets that make these files: every accounting field set (no backup, other ports,
# every purge kind), pyxis with arguments, private Dirs other than the default, energy from the BMC, and the energy
# file alone (no slurmdbd, no pyxis, no tmpfs)
SHAPES = {
    "accounting-every-field": lambda r: shape(accounting={
        "host": "dbd01", "port": 7031, "storage": {"host": "db.example.org", "port": 3307, "user": "acct",
                                                   "database": "acct_db"},
        "purge": {"events": "1month", "jobs": "12months", "reservations": "2", "steps": "30days", "suspend": "3",
                  "txn": "48hours", "usage": "24"}}),
    "runtime-everything": lambda r: shape(runtime={
        "pyxis": {"plugin": "/usr/lib/slurm/spank_pyxis.so", "args": ["runtime_path=/run/pyxis", "execute_entrypoint=0"]},
        "tmpfs": {"base_path": "/local/jobs", **({} if r == "22.05" else {"dirs": ["/tmp", "/var/tmp", "/dev/shm"]})},
        "energy": "ipmi", "mpi_default": "pmix"}),
    "energy-only": lambda r: shape(accounting={"host": "head01"}, runtime={"energy": "ipmi"}),
}


def side(files: dict[str, str]) -> dict[str, list[str]]:
    """Each side file below its first line (slurmkit's header: the inventory's hash)."""
    return {n: files[n].splitlines()[1:] for n in SIDE_FILES if n in files}


def reimport(files: dict[str, str], release: str) -> tuple[dict[str, str], list[str], list[str]]:
    res = import_site(files, release)
    again = generate(load_cluster_text(yamlio.dump(res.inventory)), version=release)
    return again, res.lost, res.notes


def sk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", [*PRESETS, *SHAPES])
def test_generate_import_generate_gives_the_same_side_files(name: str, release: str) -> None:
    if name in SHAPES:
        data = SHAPES[name](release)
    else:
        data = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    try:
        files = generate(load_cluster_dict(data), version=release)
    except InventoryError as exc:
        assert "needs Slurm >= 23.11" in str(exc) and release == "22.05", exc  # gb200's block topology
        return
    again, lost, _notes = reimport(files, release)
    assert [x for x in lost if any(n in x for n in SIDE_FILES)] == []
    assert side(again) == side(files)
    assert [c for c in semantic_diff(files, again, release) if c.file in SIDE_FILES] == []
    if name in SHAPES or name == "dgx-h100-superpod-su":
        assert side(files), "the shape makes at least one of the four files"


def test_every_shape_makes_all_four_files_somewhere() -> None:
    made = set()
    for release in RELEASES:
        for make in SHAPES.values():
            made |= set(side(generate(load_cluster_dict(make(release)), version=release)))
    assert made == set(SIDE_FILES)


def _site(tmp_path: Path, release: str, data: dict | None = None) -> Path:
    """A directory as `conf generate` writes it (its slurmkit.yaml copy among the files)."""
    out = tmp_path / "etc"
    src = tmp_path / "generated-from.yaml"
    src.write_text(yaml.safe_dump(data or SHAPES["runtime-everything"](release), sort_keys=False))
    gen = sk("conf", "generate", str(src), "-o", str(out), "--conf-dir", str(out), "--slurm-version", release,
             "--no-real-parse")
    assert gen.returncode == 0, gen.stderr
    return out


@pytest.mark.parametrize("release", ("22.05", "26.05"))
def test_the_cli_round_trip_is_an_empty_plan(tmp_path: Path, release: str) -> None:
    etc = _site(tmp_path, release)
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", release)
    assert imp.returncode == 0, imp.stderr
    data = yaml.safe_load(inv.read_text())
    assert data["runtime"]["energy"] == "ipmi" and data["runtime"]["pyxis"]["args"][1] == "execute_entrypoint=0"
    diff = sk("conf", "diff", str(inv), "--against", str(etc), "--exit-code")
    assert diff.returncode == 0 and "nothing to do" in diff.stdout, diff.stdout + diff.stderr


def test_a_hand_edited_site_is_carried_and_its_comments_survive_an_apply(tmp_path: Path) -> None:
    """A site's added comment and a key slurmkit does not write, in each file: import carries the keys in the
    pass-through keys and names them and the comments; the next apply edits only the changed line."""
    etc = _site(tmp_path, "24.11", shape(runtime=SHAPES["runtime-everything"]("24.11")["runtime"]))
    (etc / "slurmdbd.conf").write_text((etc / "slurmdbd.conf").read_text() +
                                       "# archive before purging: the auditors want 7 years\nArchiveJobs=yes\n"
                                       "ArchiveDir=/srv/slurm-archive\n")
    (etc / "job_container.conf").write_text((etc / "job_container.conf").read_text().replace(
        "AutoBasePath=true\n", "") + "# mounts visible to the job's container runtime\nShared=true\n")
    (etc / "plugstack.conf").write_text((etc / "plugstack.conf").read_text() +
                                        "# X11 forwarding for the visualisation users\n"
                                        "optional /usr/lib/slurm/spank_x11.so  # trailing comment\n"
                                        "include /etc/slurm/plugstack.conf.d/*.conf\n")
    (etc / "acct_gather.conf").write_text((etc / "acct_gather.conf").read_text().replace(
        "EnergyIPMIFrequency=30", "EnergyIPMIFrequency=60") + "EnergyIPMITimeout=20\n")
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", "24.11")
    assert imp.returncode == 0, imp.stderr
    data = yaml.safe_load(inv.read_text())
    assert data["slurmdbd_conf"] == {"ArchiveJobs": "yes", "ArchiveDir": "/srv/slurm-archive"}
    assert data["job_container_conf"] == {"Shared": "true", "AutoBasePath": ""}
    assert data["plugstack_conf"] == ["optional /usr/lib/slurm/spank_x11.so", "include /etc/slurm/plugstack.conf.d/*.conf"]
    assert data["acct_gather_conf"] == {"EnergyIPMIFrequency": "60", "EnergyIPMITimeout": "20"}
    for line in ("note: slurmdbd.conf:20: ArchiveJobs=yes: carried in the inventory's slurmdbd_conf",
                 "note: slurmdbd.conf:19: the site's comment stays in its file",
                 "note: job_container.conf: AutoBasePath absent (slurmkit writes one): carried",
                 "note: plugstack.conf:6: optional /usr/lib/slurm/spank_x11.so: carried",
                 "note: plugstack.conf:5: the site's comment stays in its file",
                 "note: acct_gather.conf:4: EnergyIPMIFrequency=60: carried"):
        assert line in imp.stderr, imp.stderr
    assert sk("conf", "diff", str(inv), "--against", str(etc), "--exit-code").returncode == 0
    # one change (a purge period): apply edits that line of the site's slurmdbd.conf and nothing else
    before = {n: (etc / n).read_text() for n in SIDE_FILES}
    data["accounting"]["purge"]["jobs"] = "24month"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    ap = sk("conf", "apply", str(inv), "--to", str(etc), "--no-real-parse", "--allow-disruptive")
    assert ap.returncode == 0, ap.stdout + ap.stderr
    after = {n: (etc / n).read_text() for n in SIDE_FILES}
    assert {n for n in SIDE_FILES if after[n] != before[n]} == {"slurmdbd.conf"}
    changed = [(a, b) for a, b in zip(before["slurmdbd.conf"].splitlines(), after["slurmdbd.conf"].splitlines(),
                                                       strict=True)
               if a != b]
    assert changed == [("PurgeJobAfter=12month", "PurgeJobAfter=24month")]
    assert "# archive before purging" in after["slurmdbd.conf"] and "ArchiveJobs=yes" in after["slurmdbd.conf"]
    assert (etc / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600


def test_storage_pass_never_enters_the_inventory_or_the_report(tmp_path: Path) -> None:
    etc = _site(tmp_path, "24.11", shape())
    secret = "Zq8-not-in-any-output"
    (etc / "slurmdbd.conf").write_text((etc / "slurmdbd.conf").read_text() + f"StoragePass={secret}\n")
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", "24.11")
    assert imp.returncode == 1
    assert ("not carried: slurmdbd.conf:19: StoragePass: a password, never carried into the inventory: give it in "
            "the site overlay ('slurmdbd_conf: {StoragePass: ...}', --overrides)") in imp.stderr, imp.stderr
    assert secret not in imp.stderr + imp.stdout + inv.read_text()
    # with the overlay the site holds anyway, the plan is empty
    ov = tmp_path / "overlay.yaml"
    ov.write_text(f"slurmdbd_conf: {{StoragePass: {secret}}}\n")
    diff = sk("conf", "diff", str(inv), "--against", str(etc), "--overrides", str(ov), "--exit-code")
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert secret not in diff.stdout + diff.stderr
    # without it, the plan names the change and never the value
    diff = sk("conf", "diff", str(inv), "--against", str(etc), "--exit-code")
    assert diff.returncode == 1 and "StoragePass" in diff.stdout and secret not in diff.stdout + diff.stderr
    # and apply refuses to write a slurmdbd.conf without the password the site's file has: nothing written
    before = {p.name: p.read_bytes() for p in etc.iterdir() if p.is_file()}
    ap = sk("conf", "apply", str(inv), "--to", str(etc), "--no-real-parse", "--allow-disruptive")
    assert ap.returncode == 2, ap.stdout + ap.stderr
    assert ap.stderr.strip().splitlines()[-1] == (
        f"slurmkit: error: {etc}/slurmdbd.conf:19: StoragePass would be removed (the inventory carries no password); "
        "give it in the --overrides file ('slurmdbd_conf: {StoragePass: ...}'); nothing written"), ap.stderr
    assert {p.name: p.read_bytes() for p in etc.iterdir() if p.is_file()} == before and secret not in ap.stderr
    # with the overlay, a change is written and the password stays
    data = yaml.safe_load(inv.read_text())
    data["accounting"]["purge"]["jobs"] = "24month"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    ap = sk("conf", "apply", str(inv), "--to", str(etc), "--no-real-parse", "--allow-disruptive", "--overrides", str(ov))
    assert ap.returncode == 0, ap.stdout + ap.stderr
    assert f"StoragePass={secret}" in (etc / "slurmdbd.conf").read_text() and secret not in ap.stdout + ap.stderr


@pytest.mark.parametrize(("release", "file", "text", "error"), [
    ("24.11", "job_container.conf", "BasePath=/local/jobs\nAutoBasePath=true\nDirz=/tmp\n",
     "not carried: job_container.conf:3: Dirz: Slurm 24.11's job_container.conf has no such key"),
    # Dirs arrived in 23.02 (read_jcconf.c at slurm-22-05-8-1: AutoBasePath, BasePath, InitScript, NodeName)
    ("22.05", "job_container.conf", "BasePath=/local/jobs\nDirs=/tmp,/dev/shm\n",
     "not carried: job_container.conf:2: Dirs: Slurm 22.05's job_container.conf has no such key"),
    ("24.11", "job_container.conf", "BasePath=/local/jobs\nNodeName=gpu[1-2] BasePath=/nvme/jobs\n",
     "not carried: job_container.conf:2: NodeName=gpu[1-2]: a per-node job_container.conf line: not carried"),
    ("26.05", "slurmdbd.conf", "DbdHost=head01\nDbdPort=70000\nStorageHost=db1\n",
     "not carried: slurmdbd.conf:2: DbdPort=70000: not a port (1-65535)"),
    ("24.11", "slurmdbd.conf", "DbdHost=head01\nStoragePort=0\n",
     "not carried: slurmdbd.conf:2: StoragePort=0: not a port (1-65535)"),
    ("24.11", "slurmdbd.conf", "DbdHost=head01\nDbdPort=6819 StorageHost=db1\n",
     "not carried: slurmdbd.conf:2: Parse error: \"StorageHost=db1\" after DbdPort= (one key per line; fatal)"),
    # StoragePassScript arrived in 26.05 (src/slurmdbd/read_config.c options at slurm-26-05-3-1)
    ("24.11", "slurmdbd.conf", "DbdHost=head01\nStoragePassScript=/etc/slurm/pass.sh\n",
     "not carried: slurmdbd.conf:2: StoragePassScript: Slurm 24.11's slurmdbd.conf has no such key"),
    ("24.11", "plugstack.conf", "required /usr/lib/slurm/spank_pyxis.so\nrequred /usr/lib/x.so\n",
     "not carried: plugstack.conf:2: requred /usr/lib/x.so: not a plugstack.conf line"),
    ("24.11", "slurmdbd.conf", "DbdHost=head01\nInclude /etc/slurm/slurmdbd-secrets.conf\n",
     "not carried: slurmdbd.conf:2: Include /etc/slurm/slurmdbd-secrets.conf: not carried (the inventory holds "
     "slurmdbd.conf as one file)"),
    ("24.11", "acct_gather.conf", "EnergyIPMIFrequency=30\nEnergyIPMIPassword=hunter2\n",
     "not carried: acct_gather.conf:2: EnergyIPMIPassword: a password, never carried into the inventory"),
    ("24.11", "acct_gather.conf", "EnergyIPMIFrequncy=30\n",
     "not carried: acct_gather.conf:1: EnergyIPMIFrequncy: Slurm 24.11's acct_gather.conf has no such key"),
    # a key of a plugin slurm.conf does not load: slurmctld 24.11 refuses the file (seen from the judge: "Could not
    # open/read/parse acct_gather.conf ... options for plugins that are not loaded")
    ("24.11", "acct_gather.conf", "EnergyIPMIFrequency=30\nProfileInfluxDBHost=influx:8086\n",
     "not carried: acct_gather.conf:2: ProfileInfluxDBHost: read by acct_gather_profile/influxdb, which slurm.conf "
     "does not load"),
])
def test_malformed_side_files_are_one_line_naming_file_and_line(tmp_path: Path, release: str, file: str, text: str,
                                                                  error: str) -> None:
    etc = _site(tmp_path, release, SHAPES["energy-only"](release) if file == "acct_gather.conf" else shape())
    for n in SIDE_FILES:
        (etc / n).unlink(missing_ok=True)
    (etc / file).write_text(text)
    imp = sk("conf", "import", str(etc), "-o", str(tmp_path / "site.yaml"), "--slurm-version", release)
    assert imp.returncode == 1, imp.stderr
    lines = [ln for ln in imp.stderr.splitlines() if ln.startswith("not carried:")]
    assert lines == [error] or (len(lines) == 1 and lines[0].startswith(error)), imp.stderr
    assert "hunter2" not in imp.stderr
    assert "Traceback" not in imp.stderr


def test_an_unreadable_slurmdbd_conf_is_named_and_the_rest_imported(tmp_path: Path) -> None:
    etc = _site(tmp_path, "24.11", shape())
    (etc / "slurmdbd.conf").chmod(0)
    argv = [sys.executable, "-m", "slurmkit.cli.main", "conf", "import", str(etc), "-o", str(tmp_path / "site.yaml"),
            "--slurm-version", "24.11"]
    if os.geteuid() == 0:
        # root reads a mode-000 file through CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH: run the import without them
        # (setpriv from util-linux; the bounding set drops them from the exec'd python), as an admin's root shell
        # in a container without those capabilities would
        argv = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--", *argv]
    imp = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert imp.returncode == 1 and "slurmdbd.conf: cannot read it" in imp.stderr, imp.stderr
    assert "accounting" not in yaml.safe_load((tmp_path / "site.yaml").read_text())


def test_the_pass_through_keys_are_checked_when_loaded_and_generated() -> None:
    def refused(data: dict, path: str, words: str, release: str = "24.11") -> None:
        with pytest.raises(InventoryError) as ei:
            generate(load_cluster_dict(data), version=release)
        assert ei.value.path == path and words in str(ei.value), ei.value

    refused(shape(slurmdbd_conf={"StoragePass": "x"}), "slurmdbd_conf.StoragePass", "does not belong in the inventory")
    refused(shape(acct_gather_conf={"ProfileInfluxDBPass": "x"}), "acct_gather_conf.ProfileInfluxDBPass", "overlay")
    refused(shape(plugstack_conf=['required "/a b.so"']), "plugstack_conf[0]", "not a plugstack.conf line")
    refused(shape(job_container_conf={"BasePath": "/x"}), "job_container_conf.BasePath", "runtime.tmpfs")
    refused(shape(slurmdbd_conf={"ArchiveJob": "yes"}), "slurmdbd_conf.ArchiveJob", "did you mean 'ArchiveJobs'")
    refused(shape(job_container_conf={"Shared": "true"}), "job_container_conf.Shared", "Slurm 22.05's", "22.05")
    refused(shape(runtime={"energy": "ipmi"}, acct_gather_conf={"ProfileHDF5Dir": "/p"}), "acct_gather_conf.ProfileHDF5Dir",
            "read by acct_gather_profile/hdf5, which slurm.conf does not load")
    # the overlay's acct_gather_conf holds the BMC password the inventory may not
    files = generate(load_cluster_dict(SHAPES["energy-only"]("24.11")), version="24.11",
                     overrides=Overrides(acct_gather_conf=(("EnergyIPMIPassword", "s"),)))
    assert "EnergyIPMIPassword=s" in files["acct_gather.conf"].splitlines()


def test_an_adopted_inventory_without_the_keys_writes_none_of_the_files(tmp_path: Path) -> None:
    """An inventory imported before (no accounting.storage, no runtime) leaves the site's side files alone."""
    etc = _site(tmp_path, "24.11", shape())
    files = {n: (etc / n).read_text() for n in ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")}
    res = import_site(files, "24.11")
    assert not set(generate(load_cluster_text(yamlio.dump(res.inventory)), version="24.11")) & set(SIDE_FILES)


def test_a_real_sites_slurmdbd_conf_is_carried_but_its_password(tmp_path: Path) -> None:
    """slurm-docker-cluster's own slurmdbd.conf (tests/data/sidefiles/slurm-docker-cluster/PROVENANCE) beside its
    24.11 slurm.conf: DbdHost, StorageHost and StorageLoc land in ``accounting``, its DbdAddr, DebugLevel, PidFile,
    AuthAltTypes/AuthAltParameters and the ${MYSQL_USER} placeholder in ``slurmdbd_conf``, its comments stay in the
    file; StoragePass alone is not carried (exit 1). With it in the overlay the plan is empty."""
    etc = tmp_path / "etc"
    shutil.copytree(ROOT / "tests" / "data" / "realconf" / "docker-cluster-2411", etc)
    shutil.copy(ROOT / "tests" / "data" / "sidefiles" / "slurm-docker-cluster" / "slurmdbd.conf", etc)
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", "24.11")
    assert imp.returncode == 1, imp.stderr
    assert [ln for ln in imp.stderr.splitlines() if ln.startswith("not carried:")] == [
        "not carried: slurmdbd.conf:36: StoragePass: a password, never carried into the inventory: give it in the site "
        "overlay ('slurmdbd_conf: {StoragePass: ...}', --overrides), or the next apply drops it"]
    data = yaml.safe_load(inv.read_text())
    assert data["accounting"] == {"host": "slurmdbd", "storage": {"host": "mysql", "database": "slurm_acct_db"}}
    assert data["slurmdbd_conf"] == {"DbdAddr": "slurmdbd", "DebugLevel": "4", "PidFile": "/var/run/slurm/slurmdbd.pid",
                                     "StorageUser": "${MYSQL_USER}", "AuthAltTypes": "auth/jwt",
                                     "AuthAltParameters": "jwt_key=/var/spool/slurm/statesave/jwt_hs256.key",
                                     # the file has no DbdPort or StoragePort: the regenerated one has none either
                                     "DbdPort": "", "StoragePort": ""}
    assert "MYSQL_PASSWORD" not in inv.read_text() + imp.stderr
    assert "note: slurmdbd.conf:6: the site's comment stays in its file" in imp.stderr
    ov = tmp_path / "overlay.yaml"
    ov.write_text('slurmdbd_conf: {StoragePass: "${MYSQL_PASSWORD}"}\n')
    diff = sk("conf", "diff", str(inv), "--against", str(etc), "--overrides", str(ov), "--exit-code")
    assert diff.returncode == 0 and "nothing to do" in diff.stdout, diff.stdout + diff.stderr


@pytest.mark.lab
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_imported_files_still_pass_the_release_s_real_parse(tmp_path: Path, name: str) -> None:
    """The files an imported inventory generates are judged by the release's own slurmctld (it reads acct_gather.conf;
    an energy plugin the judge lacks has its EnergyIPMI* keys left out, backend/realparse.py _PACKAGED) as the
    originals are: accepted, with no error line of theirs. Run per release with SLURMKIT_TEST_SLURM."""
    from slurmkit.backend.realparse import validate

    release = release_under_test()
    original = generate(load_cluster_dict(SHAPES[name](release)), version=release)
    again, lost, _notes = reimport(original, release)
    assert lost == []
    for files in (original, again):
        rep = validate({k: v for k, v in files.items() if k != "slurmkit.yaml"}, release)
        if rep.real_ok is None:
            pytest.skip(rep.real)
        assert rep.errors == [] and rep.real_ok is True, (rep.real, rep.errors)


def test_a_file_slurm_does_not_read_is_imported_with_a_note() -> None:
    files = generate(load_cluster_dict(SHAPES["runtime-everything"]("24.11")), version="24.11")
    files["slurm.conf"] = "\n".join(ln for ln in files["slurm.conf"].splitlines()
                                    if not ln.startswith("JobContainerType=")) + "\nPlugStackConfig=/etc/spank/stack.conf\n"
    res = import_site(files, "24.11")
    assert res.lost == []
    assert any(n.startswith("plugstack.conf: Slurm reads PlugStackConfig=/etc/spank/stack.conf") for n in res.notes)
    assert any(n.startswith("job_container.conf: slurm.conf loads no tmpfs plugin") for n in res.notes)
    assert res.inventory["runtime"]["tmpfs"]["base_path"] == "/local/jobs"


@pytest.mark.lab
def test_validate_of_a_directory_judges_its_acct_gather_conf_with_the_real_slurmctld(tmp_path: Path) -> None:
    """slurmctld reads acct_gather.conf at start: `conf validate DIR` hands it to the real parse, so a key of a
    plugin slurm.conf does not load is the fatal line it is ("Could not open/read/parse acct_gather.conf",
    src/common/slurm_acct_gather.c at slurm-22-05-8-1, src/interfaces/acct_gather.c at slurm-24-11-5-1 and
    slurm-26-05-3-1), and the generated file passes."""
    release = release_under_test()
    etc = _site(tmp_path, release, SHAPES["energy-only"](release))
    ok = sk("conf", "validate", str(etc), "--slurm-version", release)
    if "real parse skipped" in ok.stderr:
        pytest.skip(ok.stderr.strip().splitlines()[-1])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (etc / "acct_gather.conf").write_text((etc / "acct_gather.conf").read_text() + "ProfileInfluxDBHost=influx:8086\n")
    bad = sk("conf", "validate", str(etc), "--slurm-version", release)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "Could not open/read/parse acct_gather.conf" in bad.stderr, bad.stderr


def test_no_password_in_any_diff_output_nor_its_file_diffs(tmp_path: Path) -> None:
    """acct_gather.conf's EnergyIPMIPassword (acct_gather.conf(5) "Password for BMC access") and StoragePass: `conf
    diff` names the change, and `--files` (diff -u of the files) shows the line, never the value -- before, the plan
    printed the BMC password and --files every password in clear."""
    etc = _site(tmp_path, "24.11", shape(runtime={"energy": "ipmi"}))
    bmc, db = "Bmc-pw-9x1-not-shown", "Db-pw-7k2-not-shown"
    (etc / "acct_gather.conf").write_text((etc / "acct_gather.conf").read_text() + f"EnergyIPMIPassword = {bmc}\r\n")
    (etc / "slurmdbd.conf").write_text((etc / "slurmdbd.conf").read_text() + f'StoragePass="{db}"  # the db\n')
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", "24.11")
    assert imp.returncode == 1 and bmc not in imp.stderr + inv.read_text() and db not in imp.stderr + inv.read_text()
    diff = sk("conf", "diff", str(inv), "--against", str(etc), "--files")
    out = diff.stdout + diff.stderr
    assert diff.returncode == 0, out
    assert "[restart] acct_gather.conf: EnergyIPMIPassword: (set) -> (absent)" in out, out
    assert "-EnergyIPMIPassword=(password, not shown)" in out and "-StoragePass=(password, not shown)" in out, out
    assert bmc not in out and db not in out and "the db" not in out


def test_a_crlf_site_file_keeps_its_line_ends_through_a_one_line_apply(tmp_path: Path) -> None:
    """A site's slurmdbd.conf with CRLF line ends (Slurm reads it: parse_config.c _strip_cr_nl) and `Key = Value`
    spacing: a one-line change rewrites that line only, CRLF kept -- before, apply wrote every line back as LF."""
    etc = _site(tmp_path, "24.11", shape())
    text = (etc / "slurmdbd.conf").read_text().replace("DbdPort=6819", "DbdPort = 6819")
    (etc / "slurmdbd.conf").write_bytes(text.replace("\n", "\r\n").encode())
    before = (etc / "slurmdbd.conf").read_bytes().split(b"\r\n")
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", "24.11")
    assert imp.returncode == 0, imp.stderr
    data = yaml.safe_load(inv.read_text())
    data["accounting"]["purge"]["jobs"] = "24month"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    ap = sk("conf", "apply", str(inv), "--to", str(etc), "--no-real-parse", "--allow-disruptive")
    assert ap.returncode == 0, ap.stdout + ap.stderr
    after = (etc / "slurmdbd.conf").read_bytes().split(b"\r\n")
    assert len(after) == len(before) and b"\n" not in b"".join(after)
    assert [(a, b) for a, b in zip(before, after, strict=True) if a != b] == [(b"PurgeJobAfter=12month",
                                                                               b"PurgeJobAfter=24month")]
    again = sk("conf", "diff", str(inv), "--against", str(etc), "--exit-code")
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.parametrize("release", ("22.05", "24.11"))
def test_a_changed_accounting_port_or_host_moves_slurm_conf_with_slurmdbd_conf(release: str) -> None:
    """slurm.conf's AccountingStorageHost/Port and slurmdbd.conf's DbdHost/DbdPort come from one accounting: after an
    import, changing accounting.port/host changes both files -- before, slurm.conf's were pinned in slurm_conf as
    written, so slurmdbd moved to the new port and slurmctld kept calling the old one."""
    files = generate(load_cluster_dict(SHAPES["accounting-every-field"](release)), version=release)
    res = import_site(files, release)
    assert not {k.lower() for k in res.inventory.get("slurm_conf", {})} & {
        "accountingstoragehost", "accountingstorageport", "accountingstoragebackuphost"}, res.inventory["slurm_conf"]
    inv = copy.deepcopy(res.inventory)
    inv["accounting"]["port"] = 7040
    inv["accounting"]["host"] = "dbd02"
    out = generate(load_cluster_text(yamlio.dump(inv)), version=release)
    assert "AccountingStoragePort=7040" in out["slurm.conf"].splitlines(), out["slurm.conf"]
    assert "AccountingStorageHost=dbd02" in out["slurm.conf"].splitlines()
    assert {"DbdPort=7040", "DbdHost=dbd02"} <= set(out["slurmdbd.conf"].splitlines())
    # the round trip is still empty, and a slurm.conf that points elsewhere than DbdHost stays as written
    again = generate(load_cluster_text(yamlio.dump(res.inventory)), version=release)
    assert side(again) == side(files)
    assert [c for c in semantic_diff(files, again, release) if c.file == "slurm.conf"] == []
    odd = dict(files, **{"slurm.conf": files["slurm.conf"].replace("AccountingStorageHost=dbd01",
                                                                    "AccountingStorageHost=dbd01.example.org")})
    assert import_site(odd, release).inventory["slurm_conf"]["AccountingStorageHost"] == "dbd01.example.org"


def test_an_acct_gather_conf_with_a_password_is_never_written_readable_by_others(tmp_path: Path) -> None:
    """The BMC password the overlay gives (acct_gather.conf(5) EnergyIPMIPassword) lands in a file of mode 600
    (owner SlurmUser where root writes it: slurmctld reads it as that user) -- before, 644, readable by anyone on
    the host; one already there at 644 is re-moded, a site's 640 is kept, a file without a password stays 644."""
    src = tmp_path / "inv.yaml"
    src.write_text(yaml.safe_dump(shape(runtime={"energy": "ipmi"}), sort_keys=False))
    ov = tmp_path / "ov.yaml"
    ov.write_text("acct_gather_conf: {EnergyIPMIPassword: Bmc-pw-3q}\n")

    def gen(out: Path, *extra: str) -> Path:
        r = sk("conf", "generate", str(src), "-o", str(out), "--slurm-version", "24.11", "--no-real-parse", *extra)
        assert r.returncode == 0, r.stderr
        return out / "acct_gather.conf"

    def mode(p: Path) -> int:
        return p.stat().st_mode & 0o777

    with_pw = gen(tmp_path / "a", "--overrides", str(ov))
    assert "EnergyIPMIPassword=Bmc-pw-3q" in with_pw.read_text() and mode(with_pw) == 0o600
    plain = gen(tmp_path / "b")
    assert mode(plain) == 0o644
    plain.write_text(with_pw.read_text())  # the same text, left 644 by hand
    assert mode(gen(tmp_path / "b", "--overrides", str(ov))) == 0o600
    plain.chmod(0o640)
    assert mode(gen(tmp_path / "b", "--overrides", str(ov))) == 0o640
    if os.geteuid() == 0 and shutil.which("id") and subprocess.run(["id", "slurm"], capture_output=True).returncode == 0:
        import pwd

        assert with_pw.stat().st_uid == pwd.getpwnam("slurm").pw_uid  # slurm.conf's SlurmUser=slurm


def test_a_changed_spank_line_is_the_only_line_of_plugstack_conf_apply_changes(tmp_path: Path) -> None:
    """A site's plugstack.conf with its comments, a blank line and an include glob: changing runtime.pyxis.args
    rewrites the pyxis line only (its trailing comment kept) -- before, apply wrote slurmkit's whole file over it."""
    etc = _site(tmp_path, "24.11", shape())
    site = ("# site spank stack: keep this comment\nrequired /usr/local/lib/slurm/spank_pyxis.so   # containers\n\n"
            "# site plugins\ninclude /etc/slurm/plugstack.conf.d/*.conf\n")
    (etc / "plugstack.conf").write_text(site)
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", "24.11")
    assert imp.returncode == 0, imp.stderr
    data = yaml.safe_load(inv.read_text())
    assert data["plugstack_conf"] == ["include /etc/slurm/plugstack.conf.d/*.conf"]
    data["runtime"]["pyxis"]["args"] = ["container_scope=global"]
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    ap = sk("conf", "apply", str(inv), "--to", str(etc), "--no-real-parse", "--allow-disruptive")
    assert ap.returncode == 0, ap.stdout + ap.stderr
    assert (etc / "plugstack.conf").read_text() == site.replace(
        "spank_pyxis.so   # containers", "spank_pyxis.so container_scope=global  # containers")
    # and a plugin the inventory drops loses its line alone
    data["plugstack_conf"] = []
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    ap = sk("conf", "apply", str(inv), "--to", str(etc), "--no-real-parse", "--allow-disruptive")
    assert ap.returncode == 0, ap.stdout + ap.stderr
    assert "include" not in (etc / "plugstack.conf").read_text()
    assert (etc / "plugstack.conf").read_text().startswith("# site spank stack: keep this comment\n")


def test_apply_refuses_to_edit_a_side_file_slurm_cannot_read_and_writes_nothing(tmp_path: Path) -> None:
    """A site's job_container.conf with a line slurmd refuses (parse_config.c: fatal): a change to it is one line
    naming that file:line, exit 2, nothing written -- before, apply edited the other line, left the junk, exit 0.
    NERSC's shape, BasePath with Dirs and Shared on its line (read_jcconf.c 23.02+ reads the rest of a BasePath
    line), is readable, and a change on another line goes through."""
    etc = _site(tmp_path, "24.11", shape())
    (etc / "job_container.conf").write_text("AutoBasePath=true\nBasePath=/local/x\nthis is junk\n")
    inv = tmp_path / "site.yaml"
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", "24.11")
    assert imp.returncode == 1 and 'job_container.conf:3: Parse error: cannot read "this is junk"' in imp.stderr
    data = yaml.safe_load(inv.read_text())
    data["runtime"]["tmpfs"]["base_path"] = "/local/y"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    before = {p.name: p.read_bytes() for p in etc.iterdir() if p.is_file()}
    ap = sk("conf", "apply", str(inv), "--to", str(etc), "--no-real-parse", "--allow-disruptive")
    assert ap.returncode == 2, ap.stdout + ap.stderr
    assert ap.stderr.strip().splitlines()[-1].startswith(
        'slurmkit: error: job_container.conf:3: cannot edit in place: Parse error: cannot read "this is junk"'), ap.stderr
    assert {p.name: p.read_bytes() for p in etc.iterdir() if p.is_file()} == before
    nersc = "AutoBasePath=true\nBasePath=/scratch Dirs=/tmp,/var/tmp,/dev/shm Shared=true\n"
    (etc / "job_container.conf").write_text(nersc)
    imp = sk("conf", "import", str(etc), "-o", str(inv), "--slurm-version", "24.11")
    assert imp.returncode == 0, imp.stderr
    data = yaml.safe_load(inv.read_text())
    data.setdefault("job_container_conf", {})["AutoBasePath"] = "false"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    ap = sk("conf", "apply", str(inv), "--to", str(etc), "--no-real-parse", "--allow-disruptive")
    assert ap.returncode == 0, ap.stdout + ap.stderr
    assert (etc / "job_container.conf").read_text() == nersc.replace("AutoBasePath=true", "AutoBasePath=false")
