"""docker-compose.yml: validated with Debian's docker-compose (no Docker engine in CI) and consistent with its inventory."""

import shutil
import subprocess
import sys
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


def config_service_command() -> tuple[list[str], dict[str, str]]:
    """The exact `slurmkit conf generate ...` the compose `config` service runs (entrypoint.sh, role config), and
    the bind mounts that give its container paths their files here."""
    import shlex

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    cfg = services["config"]
    assert cfg["command"] == ["config"]
    mounts = {}
    for v in cfg["volumes"]:
        src, dst = v.split(":")[:2]
        if src.startswith("./"):
            mounts[dst] = str(ROOT / src[2:])
    entry = (ROOT / "examples" / "docker" / "entrypoint.sh").read_text()
    role_config = entry.split('if [ "$role" = config ]; then', 1)[1].split("fi\n", 1)[0]
    lines = [ln.strip() for ln in role_config.splitlines() if ln.strip().startswith("slurmkit conf generate")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0]), mounts


def test_compose_config_service_command_succeeds(tmp_path):
    """Issue 9 item 8: the config service's own generate (real slurmctld parse included) must pass, or
    `docker compose up` never starts. Run the very command, with the container paths mapped to the repo."""
    argv, mounts = config_service_command()
    assert argv[:3] == ["slurmkit", "conf", "generate"]
    argv = [mounts.get(a, a) for a in argv]
    out = tmp_path / "etc-slurm"
    argv[argv.index("-o") + 1] = str(out)
    assert argv[3] == str(ROOT / "examples" / "compose.yaml")
    exe = Path(sys.executable).with_name("slurmkit")
    r = subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "real parse: slurmctld accepted the config" in r.stderr or "real parse skipped" in r.stderr, r.stderr
    assert (out / "slurm.conf").is_file() and (out / "topology.conf").is_file()
