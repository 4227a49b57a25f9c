"""A gres.conf File= range that is none (issue 32 item 7): `conf import` of ``File=/dev/nvidia[0-`` exited 0 and
carried it into the inventory, and `conf validate` then failed with "File: invalid hostlist" naming no gres.conf
line. Now both stop at the line: one error naming gres.conf and its line number, non-zero, nothing written.

Slurm's own reading (why it must stop here): gres.c _validate_file() of slurm-22-05-8-1 is fatal only where
hostlist_create() fails, and 22.05's hostlist parser reads an unclosed bracket as a literal path -- ``scontrol show
hostnames '/dev/nvidia[0-'`` prints ``/dev/nvidia]`` (checked below with the host's Slurm) -- which slurmd stats for
20 s and then dies on (gres.c _my_stat(): fatal "can't stat gres.conf file"). slurmctld 22.05 does not stat it
(_my_stat returns outside slurmd), so the real parse cannot judge it; a backwards range is refused by the parser
("Invalid range"), then fatal "can't parse File=" in slurmd."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.errors import UsageError
from slurmkit.generate import confparse as cp
from slurmkit.generate import generate
from slurmkit.generate.validate import static_check
from slurmkit.model.load import load_cluster
from tests.conftest import needs

ROOT = Path(__file__).resolve().parents[2]
BAD = ["/dev/nvidia[0-", "/dev/nvidia[0-7", "/dev/nvidia[3-1]", "/dev/nvidia[a-b]"]


def _site(tmp_path: Path, file_spec: str, extra: str = "") -> tuple[Path, int]:
    site = tmp_path / "site"
    site.mkdir()
    files = generate(load_cluster(ROOT / "examples" / "lab.yaml"))
    for name in ("slurm.conf", "cgroup.conf", "topology.conf"):
        (site / name).write_text(files[name])
    gres = f"AutoDetect=off\nNodeName=node[1-8] Name=gpu Type=h100 File={file_spec}{extra}\n"
    (site / "gres.conf").write_text(gres)
    return site, 2


def _slurmkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmkit", *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("spec", BAD)
def test_expand_files_names_the_line(spec: str) -> None:
    with pytest.raises(UsageError) as exc:
        cp.expand_files(spec, "gres.conf:2")
    assert str(exc.value).startswith(f"gres.conf:2: File={spec}: not a list of device files (")
    assert cp.expand_files("/dev/nvidia[0-1],/dev/nvidia7", "gres.conf:2") == ["/dev/nvidia0", "/dev/nvidia1",
                                                                               "/dev/nvidia7"]


@pytest.mark.parametrize("extra", ["", " Flags=nvidia_gpu_env"])
def test_conf_import_refuses_at_the_line(tmp_path: Path, extra: str) -> None:
    site, line = _site(tmp_path, "/dev/nvidia[0-", extra)
    out = tmp_path / "inv.yaml"
    res = _slurmkit("conf", "import", str(site), "--output", str(out), "--slurm-version", "22.05")
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines()[-1].startswith(
        f"slurmkit: error: gres.conf:{line}: File=/dev/nvidia[0-: not a list of device files (an unclosed bracket"), \
        res.stderr
    assert not out.exists()


@pytest.mark.parametrize("spec", BAD)
def test_static_check_names_the_gres_line(tmp_path: Path, spec: str) -> None:
    site, line = _site(tmp_path, spec)
    files = {p.name: p.read_text() for p in site.iterdir()}
    rep = static_check(files, "22.05")
    assert any(e.startswith(f"gres.conf:{line}: File={spec}: not a list of device files") for e in rep.errors), \
        rep.errors


def test_conf_validate_names_the_gres_line(tmp_path: Path) -> None:
    site, line = _site(tmp_path, "/dev/nvidia[0-")
    res = _slurmkit("conf", "validate", str(site), "--no-real-parse")
    assert res.returncode != 0
    assert f"error: gres.conf:{line}: File=/dev/nvidia[0-: not a list of device files" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr


@needs(bool(shutil.which("scontrol")), "needs Slurm's scontrol")
def test_slurm_reads_an_unclosed_bracket_as_another_path(tmp_path: Path) -> None:
    """The rule's ground: Slurm's hostlist parser does not refuse the unclosed bracket, it makes another path."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\n")
    res = subprocess.run(["scontrol", "show", "hostnames", "/dev/nvidia[0-"], capture_output=True, text=True,
                         timeout=60, env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    assert res.stdout.split() != [f"/dev/nvidia{i}" for i in range(8)]
    assert len(res.stdout.split()) <= 1 and "/dev/nvidia0" not in res.stdout
