"""`pip install .` into a fresh venv ships the templates inside the wheel and renders from there."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_templates_and_renders(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    code = (
        "import slurmkit.templates as t, pathlib;"
        "from slurmkit.generate import generate;"
        "from slurmkit.lab.inventory import lab_inventory;"
        "from slurmkit.model import load_cluster_dict;"
        "d = t.template_dir('conf_templates'); j = t.template_dir('job_templates');"
        "assert 'site-packages' in str(d) and 'site-packages' in str(j), (d, j);"
        "files = generate(load_cluster_dict(lab_inventory()));"
        "print(sorted(files)); print(files['gres.conf'])"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "'slurm.conf'" in out.stdout and "File=/dev/nvidia" in out.stdout
    cli = subprocess.run([str(venv / "bin" / "slurmkit"), "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert cli.returncode == 0 and "0.1.0" in cli.stdout
    assert (venv / "bin" / "gpusub").exists()
