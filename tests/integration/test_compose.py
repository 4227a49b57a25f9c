"""docker-compose.yml: validated with Debian's docker-compose (no Docker engine in CI) and consistent with its inventory."""

import shutil
import subprocess
from pathlib import Path

import yaml

from slurmkit.generate import generate
from slurmkit.model import load_cluster

ROOT = Path(__file__).resolve().parents[2]


def compose_config(path: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is installed by tests/setup-env.sh (Debian package docker-compose)"
    return subprocess.run([exe, "-f", str(path), "config", "-q"], capture_output=True, text=True, cwd=path.parent, timeout=60)


def test_compose_file_is_valid():
    r = compose_config(ROOT / "docker-compose.yml")
    assert r.returncode == 0, r.stderr


def test_broken_compose_file_is_rejected(tmp_path):
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    data["services"]["slurmctld"]["comand"] = ["oops"]
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(yaml.safe_dump(data))
    (tmp_path / "examples").mkdir()
    r = compose_config(bad)
    assert r.returncode != 0 and "comand" in r.stderr


def test_compose_services_match_the_inventory():
    cluster = load_cluster(ROOT / "examples" / "compose.yaml")
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    slurmd_hosts = sorted(s["hostname"] for s in services.values() if s.get("command") == ["slurmd"])
    assert slurmd_hosts == sorted(cluster.all_hosts)
    assert services["slurmctld"]["hostname"] == cluster.controller.hosts[0]
    assert services["slurmdbd"]["hostname"] == cluster.accounting.host
    assert ["CMD", "scontrol", "ping"] == services["slurmctld"]["healthcheck"]["test"]
    files = generate(cluster)
    assert "NodeName=c[1-4] " in files["slurm.conf"] and "AccountingStorageHost=slurmdbd" in files["slurm.conf"]
