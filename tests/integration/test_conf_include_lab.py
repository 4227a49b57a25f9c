"""How the release under test resolves ``Include`` (issue 33 item 2), asked of its own scontrol, against what
slurmkit reads (adopt/read.py read_site, confparse.expand_includes, generate/validate.py static_check).

scontrol parses slurm.conf, Include chain and all, before it does anything (``scontrol show hostnames`` needs no
controller): "fatal: Unable to process configuration file" where the parse fails, the host names where it reads
it. The release under test is SLURMKIT_TEST_SLURM (a cached root's scontrol, chrooted, with the test's directory
bound over the root's /mnt in a private mount namespace) or the host's. No daemon starts, no port is opened.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurmkit.adopt.read import read_site
from slurmkit.generate import confparse as cp
from slurmkit.generate.validate import static_check
from tests.conftest import lab_release, needs, release_under_test

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[2]
PCLUSTER = ROOT / "tests" / "data" / "realconf" / "aws-parallelcluster-gpu"
INSTALL = "/opt/slurm/etc"


def _root() -> Path | None:
    from slurmkit.backend import roots

    rel = lab_release()
    if not rel:
        return None
    img = roots.find(rel)
    if img is None:
        pytest.skip(f"no cached root of Slurm {rel} (`slurmkit lab image build {rel}`)")
    return img.root


def where_scontrol_reads(etc: Path) -> str:
    """The directory ``etc`` as the release's scontrol sees it."""
    return str(etc) if _root() is None else "/mnt"


def scontrol_reads(etc: Path, timeout: float = 20) -> tuple[bool | None, str]:
    """(True: scontrol of the release under test reads etc/slurm.conf; False: its parse fails; None: still
    waiting when stopped -- a missing file, which s_p_parse_file stat()s for 60 s before the Include fails), its
    output."""
    root = _root()
    argv = ["scontrol", "show", "hostnames", "n[1-2]"]
    if root is None:
        cmd, env = argv, {"SLURM_CONF": f"{etc}/slurm.conf", "PATH": "/usr/bin:/bin"}
    else:
        script = 'mount --bind "$1" "$2/mnt" && SLURM_CONF=/mnt/slurm.conf exec chroot "$2" /usr/bin/scontrol show ' \
                 'hostnames "n[1-2]"'
        cmd, env = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(etc), str(root)], {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return None, out
    out = r.stdout + r.stderr
    if "Unable to process configuration file" in out:
        return False, out
    assert r.returncode == 0 and r.stdout.split() == ["n1", "n2"], out
    return True, out


def slurmkit_reads(etc: Path) -> bool:
    """slurmkit's verdict on the same directory for the release under test: no fatal parse problem."""
    files, _notes, _d = read_site(etc)
    return not [e for e in static_check(files, release_under_test()).errors if "Include" in e or "key" in e]


needs_scontrol = needs(bool(shutil.which("scontrol")) and bool(shutil.which("unshare")),
                       "needs Debian's slurm-client and util-linux")
BASE = "ClusterName=t\nSlurmctldHost=h\nAuthType=auth/none\nCredType=cred/none\n"
TAIL = "NodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n"


@needs_scontrol
def test_a_relative_include_inside_an_included_file_resolves_as_the_release_does(tmp_path: Path) -> None:
    """pcluster/a.conf says `Include b.conf`: 22.05 reads pcluster/b.conf (beside a.conf: parse_config.c
    _add_full_path), 23.02+ b.conf (beside slurm.conf: read_config.c get_extra_conf_path). Only pcluster/b.conf
    is broken, so the release's scontrol fails exactly where slurmkit says that release reads it."""
    (tmp_path / "pcluster").mkdir()
    (tmp_path / "slurm.conf").write_text(BASE + "Include pcluster/a.conf\n" + TAIL)
    (tmp_path / "pcluster" / "a.conf").write_text("Include b.conf\n")
    (tmp_path / "b.conf").write_text("MinJobAge=300\n")
    (tmp_path / "pcluster" / "b.conf").write_text("NoSuchKey=1\n")
    real, out = scontrol_reads(tmp_path)
    beside = cp.include_beside_including_file(release_under_test())
    assert real is (not beside), out
    assert ("NoSuchKey" in out) is beside, out
    assert slurmkit_reads(tmp_path) is real


@needs_scontrol
def test_an_include_of_a_directory_is_read_as_empty_and_a_glob_is_refused(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "x.conf").write_text("NoSuchKey=1\n")  # never read: the directory reads as empty
    (tmp_path / "slurm.conf").write_text(BASE + "Include conf.d\n" + TAIL)
    real, out = scontrol_reads(tmp_path)
    assert real is True and slurmkit_reads(tmp_path) is True, out
    (tmp_path / "slurm.conf").write_text(BASE + "Include conf.d/*.conf\n" + TAIL)
    real, out = scontrol_reads(tmp_path, timeout=5)
    if real is None:
        # no glob code through 23.02: the name is stat()ed as written, for 60 s, then the Include fails
        assert "retrying in 1sec up to 60sec" in out, out
    else:
        assert real is False and "Slurm does not support glob parsing" in out, out
    assert slurmkit_reads(tmp_path) is False


@needs_scontrol
def test_the_parallelcluster_head_node_chain_is_read_at_its_real_path(tmp_path: Path) -> None:
    """The head node's files with their output directory where scontrol sees them (as the cookbook's own test
    renders "<DIR>"): slurm.conf -> slurm_parallelcluster.conf -> three partition files by absolute path, and
    pcluster/custom_slurm_settings_include_file_slurm.conf by a relative one. The release's scontrol reads the
    chain; so does slurmkit, every node and partition found. With one queue's file gone, both refuse it."""
    etc = tmp_path / "etc"
    shutil.copytree(PCLUSTER, etc)
    seen = where_scontrol_reads(etc)
    for p in etc.rglob("*.conf"):
        p.write_text(p.read_text().replace(INSTALL, seen))
    real, out = scontrol_reads(etc)
    assert real is True, out
    if seen == str(etc):  # slurmkit reads the absolute paths as they are here
        files, notes, _d = read_site(etc)
        assert not any("absent here" in n for n in notes)
        conf = cp.parse_slurm_conf(files["slurm.conf"], "slurm.conf", files, release=release_under_test())
        assert conf.problems == [] and len(cp.node_names(conf)) == 35
    assert slurmkit_reads(etc) is True
    (etc / "pcluster" / "slurm_parallelcluster_efa_partition.conf").unlink()
    real, out = scontrol_reads(etc, timeout=4)
    assert real is None and "slurm_parallelcluster_efa_partition.conf" in out and "cannot stat" in out, out
    assert slurmkit_reads(etc) is False
