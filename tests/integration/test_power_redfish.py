"""The `redfish` power provider against a real Redfish service: sushy-tools' emulator (its fake systems driver),
started on loopback for the module. Power transitions there take 1-11 s, as a BMC's do."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit.model.cluster import Power
from slurmkit.model.load import load_cluster_dict
from slurmkit.power import program
from slurmkit.power.providers import PowerError, RedfishProvider
from tests.conftest import free_tcp_port, needs

EMULATOR = shutil.which("sushy-emulator") or str(Path(sys.executable).parent / "sushy-emulator")
pytestmark = needs(Path(EMULATOR).exists(), "sushy-tools is not installed (pip install -e '.[dev]')")
UUIDS = {"node5": "5e0a5e0a-0000-4000-8000-000000000005", "node6": "5e0a5e0a-0000-4000-8000-000000000006"}



@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("redfish")
    port = free_tcp_port(3400)
    systems = [{"uuid": u, "name": n, "power_state": "Off", "nics": []} for n, u in UUIDS.items()]
    (d / "emulator.conf").write_text(
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(d / 'state')!r}\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n")
    log = open(d / "emulator.log", "w")  # noqa: SIM115 - the emulator's output, closed at the end
    proc = subprocess.Popen([EMULATOR, "--config", str(d / "emulator.conf"), "--fake"], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/redfish/v1/", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(f"sushy-emulator did not start: {(d / 'emulator.log').read_text()[-500:]}") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def power_state(url: str, node: str) -> str:
    with urllib.request.urlopen(f"{url}/redfish/v1/Systems/{UUIDS[node]}", timeout=5) as r:
        return str(json.load(r)["PowerState"])


def test_on_and_off_through_the_bmc(bmc: str) -> None:
    p = RedfishProvider(Power(provider="redfish", bmc=bmc, system="{host}", timeout=40))
    assert power_state(bmc, "node5") == "Off"
    p.on("node5")  # returns once the BMC reports On
    assert power_state(bmc, "node5") == "On"
    p.off("node5")
    assert power_state(bmc, "node5") == "Off"


def test_an_unknown_system_is_one_line_naming_it(bmc: str) -> None:
    p = RedfishProvider(Power(provider="redfish", bmc=bmc, system="{host}", timeout=40))
    with pytest.raises(PowerError, match=r"redfish http://127\.0\.0\.1:\d+: .*Systems/node9 not found"):
        p.on("node9")


def test_resume_program_powers_on_and_marks_a_failure_down(bmc: str, tmp_path: Path) -> None:
    inv = {
        "cluster": "rf", "node_groups": [{
            "name": "gpu", "hosts": "node[5-6,9]", "cpu": {"sockets": 1, "cores_per_socket": 4},
            "memory_mb": 8000, "power": {"provider": "redfish", "bmc": bmc, "timeout": 40, "resume_timeout": 120}}],
        "partitions": [{"name": "p", "groups": ["gpu"]}],
    }
    cluster = load_cluster_dict(inv)
    lines: list[str] = []
    marked: list[tuple[str, str]] = []
    failed = program.act(cluster, tmp_path, "resume", ["node6", "node9"], lines.append,
                         mark=lambda n, r: marked.append((n, r)))
    assert failed == 1
    assert power_state(bmc, "node6") == "On"
    assert any(ln.startswith("resume node6 provider=redfish: ok in ") for ln in lines), lines
    assert [n for n, _ in marked] == ["node9"]
    assert marked[0][1].startswith("slurmkit: resume failed: redfish http://127.0.0.1:")
    assert len(lines) == 2  # one line per action
    assert program.act(cluster, tmp_path, "suspend", ["node6"], lines.append, mark=lambda n, r: None) == 0
    assert power_state(bmc, "node6") == "Off"


def test_the_entry_point_answers_at_once_and_logs(bmc: str, tmp_path: Path) -> None:
    import yaml

    inv = {"cluster": "rf", "node_groups": [{"name": "gpu", "hosts": "node5", "cpu": {"sockets": 1, "cores_per_socket": 4},
                                             "memory_mb": 8000, "power": {"provider": "redfish", "bmc": bmc,
                                                                          "timeout": 40, "resume_timeout": 120}}],
           "partitions": [{"name": "p", "groups": ["gpu"]}]}
    (tmp_path / "slurmkit.yaml").write_text(yaml.safe_dump(inv))
    log = tmp_path / "power.log"
    env = {"SLURMKIT_POWER_LOG": str(log), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # what slurmctld does: SLURM_CONF alone in the environment (plus where this checkout's slurmkit is)
    res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "power", "resume", "node5", "--inventory",
                          str(tmp_path / "slurmkit.yaml")], env={**env, "SLURM_CONF": "/nonexistent"},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    deadline = time.monotonic() + 60
    while "resume node5 provider=redfish: ok" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.2)
    assert power_state(bmc, "node5") == "On"
    first, *rest = log.read_text().splitlines()
    assert first.endswith("resume node5: requested by slurmctld") and len(rest) == 1


def _spy_resets(monkeypatch: pytest.MonkeyPatch, drop: tuple[str, ...] = ()) -> list[str]:
    """Record every ComputerSystem.Reset type sent (the emulator still gets them, except the ``drop``ped ones: a BMC
    whose OS ignores the ACPI shutdown request)."""
    from sushy.resources.system.system import System

    sent: list[str] = []
    real = System.reset_system

    def spy(self, value):  # type: ignore[no-untyped-def]
        sent.append(str(value.value if hasattr(value, "value") else value))
        if sent[-1] not in drop:
            real(self, value)

    monkeypatch.setattr(System, "reset_system", spy)
    return sent


def _spy_closes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import gc

    from sushy import auth, connector

    gc.collect()  # sessions earlier tests dropped close when collected: not during this test's count
    closed: list[str] = []
    for cls in (auth.SessionOrBasicAuth, connector.Connector):
        real = cls.close

        def spy(self, real=real, name=cls.__name__):  # type: ignore[no-untyped-def]
            closed.append(name)
            real(self)

        monkeypatch.setattr(cls, "close", spy)
    return closed


def test_off_asks_for_a_graceful_shutdown_first_and_closes_the_session(bmc: str, monkeypatch) -> None:
    p = RedfishProvider(Power(provider="redfish", bmc=bmc, system="{host}", timeout=40))
    p.on("node5")
    sent = _spy_resets(monkeypatch)
    closed = _spy_closes(monkeypatch)
    p.off("node5")
    assert power_state(bmc, "node5") == "Off"
    assert sent == ["GracefulShutdown"]  # the emulator's OS "shuts down" within the half timeout
    assert sorted(closed) == ["Connector", "SessionOrBasicAuth"]  # one action, one session, closed


def test_off_forces_when_the_graceful_shutdown_is_ignored(bmc: str, monkeypatch) -> None:
    p = RedfishProvider(Power(provider="redfish", bmc=bmc, system="{host}", timeout=30))
    p.on("node6")
    sent = _spy_resets(monkeypatch, drop=("GracefulShutdown",))
    t0 = time.monotonic()
    p.off("node6")
    assert sent == ["GracefulShutdown", "ForceOff"]
    assert time.monotonic() - t0 >= 15  # ForceOff only after half the timeout
    assert power_state(bmc, "node6") == "Off"


def test_bmc_sensors_from_the_emulators_thermal_resource(bmc: str, tmp_path: Path) -> None:
    """`slurmkit bmc` reads every Chassis' Thermal (and Power, where the BMC has it: sushy-tools serves none) through
    sushy: the emulator's CPU temperatures, its intake sensor (25 C, critical 40) and its fans, nothing wrong."""
    from slurmkit.monitor.bmc import findings, read_redfish

    rep = read_redfish("node5", Power(provider="redfish", bmc=bmc, system="{host}", timeout=40))
    assert rep.error == ""
    temps = {r.name: (r.value, r.context, r.limit) for r in rep.readings if r.kind == "temperature"}
    assert temps["Chassis Intake Temp"] == (25.0, "intake", 40.0)
    assert "CPU Temp" in temps
    fans = [r for r in rep.readings if r.kind == "fan"]
    assert fans and all(r.value and r.health == "ok" for r in fans)
    assert findings(rep.readings) == []
    assert findings(rep.readings, inlet_max_c=20)[0].summary == "Chassis Intake Temp: 25C (limit 20C, BMC critical 40C)"


def test_bmc_that_refuses_is_one_line(tmp_path: Path) -> None:
    from slurmkit.monitor.bmc import read_redfish

    rep = read_redfish("node5", Power(provider="redfish", bmc=f"http://127.0.0.1:{free_tcp_port(3400)}", timeout=5))
    assert rep.error.startswith("redfish http://127.0.0.1:") and "\n" not in rep.error
