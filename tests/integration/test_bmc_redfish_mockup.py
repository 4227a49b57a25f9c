"""`slurmkit bmc`'s Redfish reader against DMTF's public-rackmount1 mockup (tests/data/bmc/dmtf-public-rackmount1,
PROVENANCE.md there) served over HTTP on a test-owned loopback port, read with the real client (sushy's connector):
the newer PowerSubsystem / ThermalSubsystem / EnvironmentMetrics / Sensors resources (Chassis v1_15_0, 2020.4),
the deprecated Power / Thermal ones a BMC without the newer ones serves, and faults injected into a temporary copy
of the mockup. sushy-tools' emulator serves no Power resource (test_power_redfish.py), this one serves all of
them. Cost: an in-process HTTP server, about a second."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from slurmkit.model.cluster import Power
from slurmkit.monitor.bmc import BmcReport, add_metrics, read_redfish
from slurmkit.monitor.metrics import BY_NAME, Exposition
from tests.conftest import DATA, free_tcp_port, needs
from tests.unit.test_monitor_textfile import find, samples

try:
    import sushy  # type: ignore[import-untyped]  # noqa: F401
    HAVE_SUSHY = True
except ImportError:
    HAVE_SUSHY = False
pytestmark = needs(HAVE_SUSHY, "sushy is not installed (pip install -e '.[dev]')")
MOCKUP = DATA / "bmc" / "dmtf-public-rackmount1"


class _Mockup(BaseHTTPRequestHandler):
    """GET /redfish/v1/X -> MOCKUP/X/index.json, as DMTF's redfishMockupServer.py serves a mockup; 404 else."""

    root: Path

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
        rel = path.removeprefix("/redfish/v1").strip("/") if path.startswith("/redfish/v1") else None
        f = self.root / rel / "index.json" if rel is not None and ".." not in rel.split("/") else None
        if f is None or not f.is_file():
            body, code = json.dumps({"error": {"code": "Base.1.0.ResourceMissingAtURI",
                                               "message": f"{self.path} not found"}}).encode(), 404
        else:
            body, code = f.read_bytes(), 200
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("OData-Version", "4.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass



@pytest.fixture
def serve() -> Iterator[Callable[[Path], str]]:
    """serve(tree) -> the BMC URL of a server on a loopback port answering from that mockup tree."""
    servers: list[ThreadingHTTPServer] = []

    def start(tree: Path) -> str:
        handler = type("Handler", (_Mockup,), {"root": tree})
        srv = ThreadingHTTPServer(("127.0.0.1", free_tcp_port(3500)), handler)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "mockup"
    shutil.copytree(MOCKUP, tree)
    return tree


def _edit(tree: Path, rel: str, change: Callable[[dict[str, Any]], None]) -> None:
    f = tree / rel / "index.json"
    doc = json.loads(f.read_text())
    change(doc)
    f.write_text(json.dumps(doc))


def _read(url: str) -> BmcReport:
    rep = read_redfish("node1", Power(provider="redfish", bmc=url, system="{host}", timeout=20))
    assert rep.error == ""
    return rep


def _by(rep: BmcReport, kind: str) -> dict[str, tuple[Any, ...]]:
    return {r.name: (r.value, r.health, r.context, r.limit) for r in rep.readings if r.kind == kind}


def test_the_newer_resources_as_dmtf_ships_them(serve: Callable[[Path], str]) -> None:
    """Read once, from PowerSubsystem / ThermalSubsystem (the deprecated Power/Thermal the chassis also links are
    not read: no supply or fan twice). The mockup's own faults: a supply predicting failure, the other bay empty,
    the redundancy group offline -- one psu_redundancy_lost finding in the BMC's words; its CPU sensor over its
    caution threshold is no finding (a node's CPU runs hot; the GPU checks watch GPUs)."""
    rep = _read(serve(MOCKUP))
    assert _by(rep, "fan") == {"Fan Bay 1": (2200.0, "ok", "chassis", None), "Fan Bay 2": (2400.0, "ok", "chassis", None),
                               "Fan for CPU 1": (1490.0, "ok", "cpu", None), "Fan for CPU 2": (1490.0, "ok", "cpu", None)}
    temps = _by(rep, "temperature")
    assert temps["Front Panel Intake Temperature"] == (24.8, "ok", "intake", None)
    assert temps["CPU #1 Temperature"] == (44.0, "warning", "cpu", 45.0)  # TemperatureSummaryCelsius.Internal
    assert temps["Fan Bay #1 Exhaust Temperature"][2] == "exhaust"
    assert len(temps) == 4  # Intake, Exhaust (TemperatureReadingsCelsius) + Internal, Ambient (summary), no twice
    assert _by(rep, "psu") == {"Power Supply Bay 1": (937.4, "warning", "", None),
                               "Power Supply Bay 2": (None, "absent", "", None)}
    assert _by(rep, "power") == {"TotalPower": (374.0, "ok", "", None)}  # EnvironmentMetrics.PowerWatts
    assert _by(rep, "redundancy") == {"PowerSupplyRedundancy 0 (Failover)": (None, "critical", "", None)}
    got = {f.check: (f.state, f.summary) for f in rep.findings()}
    assert got == {"psu_redundancy_lost": ("warn", "Power Supply Bay 1: Power supply 'PSU 1' has a predicted failure "
                                                   "condition.; PowerSupplyRedundancy 0 (Failover): UnavailableOffline")}


def _heal(tree: Path) -> None:
    """The mockup as a healthy 2-PSU server: Bay1 OK, Bay2 present, the redundancy group enabled."""
    ps = "Chassis/1U/PowerSubsystem"
    _edit(tree, f"{ps}/PowerSupplies/Bay1", lambda d: d.update(Status={"State": "Enabled", "Health": "OK"}))
    _edit(tree, f"{ps}/PowerSupplies/Bay2", lambda d: d.update(Status={"State": "Enabled", "Health": "OK"}))
    _edit(tree, ps, lambda d: d["PowerSupplyRedundancy"][0].update(Status={"State": "Enabled", "Health": "OK"}))


def test_faults_injected_into_a_copy_give_the_three_findings_and_metrics(serve: Callable[[Path], str],
                                                                        tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _heal(tree)
    url = serve(tree)
    assert _read(url).findings() == []
    assert _read(url).findings(inlet_max_c=24)[0].summary == \
        "Front Panel Intake Temperature: 24.8C (limit 24C)"  # the site's limit; the mockup sets no threshold here
    fans = "Chassis/1U/ThermalSubsystem/Fans"
    _edit(tree, f"{fans}/Bay2", lambda d: (d.update(Status={"State": "Enabled", "Health": "Critical"}),
                                           d["SpeedPercent"].update(Reading=0, SpeedRPM=0)))
    _edit(tree, "Chassis/1U/Sensors/IntakeTemp", lambda d: d.update(
        Reading=41, Status={"State": "Enabled", "Health": "Critical"}, Thresholds={"UpperCritical": {"Reading": 40}}))
    _edit(tree, "Chassis/1U/PowerSubsystem/PowerSupplies/Bay2", lambda d: d.update(Status={
        "State": "Enabled", "Health": "Critical", "Conditions": [{
            "MessageId": "Power.1.0.PowerSupplyFailure", "Severity": "Critical",
            "Message": "Power supply 'PSU 2' has failed."}]}))
    _edit(tree, "Chassis/1U/PowerSubsystem", lambda d: d["PowerSupplyRedundancy"][0].update(
        Status={"State": "Enabled", "Health": "Critical"}))
    rep = _read(url)
    got = {f.check: (f.state, f.summary) for f in rep.findings()}
    assert got == {
        "fan_failed": ("fail", "Fan Bay 2: stopped (critical)"),
        "psu_redundancy_lost": ("warn", "Power Supply Bay 2: Power supply 'PSU 2' has failed.; "
                                        "PowerSupplyRedundancy 0 (Failover): critical"),
        "inlet_over_limit": ("warn", "Front Panel Intake Temperature: 41C (BMC critical 40C)"),
    }
    ex = Exposition()
    add_metrics(ex, rep)
    assert ex.names() <= set(BY_NAME)
    s = samples(ex.text())
    assert find(s, "slurmkit_bmc_up", node="node1", source="redfish") == [1]
    assert find(s, "slurmkit_bmc_finding", node="node1", check="fan_failed") == [1]
    assert find(s, "slurmkit_bmc_fan_speed_rpm", node="node1", fan="Fan Bay 2") == [0]
    assert find(s, "slurmkit_bmc_sensor_ok", node="node1", kind="psu", sensor="Power Supply Bay 2") == [0]
    assert find(s, "slurmkit_bmc_power_watts", node="node1", sensor="TotalPower", kind="power") == [374]
    assert find(s, "slurmkit_bmc_power_watts", node="node1", sensor="Power Supply Bay 1", kind="psu") == [937.4]
    assert find(s, "slurmkit_bmc_temperature_celsius", node="node1", sensor="CPU #1 Temperature",
                context="cpu") == [44]


def test_a_bmc_with_only_the_deprecated_power_and_thermal(serve: Callable[[Path], str], tmp_path: Path) -> None:
    """A BMC older than 2020.4 (the chassis links only Power and Thermal): PowerSupplies, PowerControl watts,
    Thermal temperatures and fans, read from the same mockup's Power/Thermal resources."""
    tree = _copy(tmp_path)
    for key in ("PowerSubsystem", "ThermalSubsystem", "EnvironmentMetrics", "Sensors"):
        _edit(tree, "Chassis/1U", lambda d, key=key: d.pop(key))
    shutil.rmtree(tree / "Chassis/1U/PowerSubsystem")  # nothing reads what is not linked
    url = serve(tree)
    rep = _read(url)
    assert _by(rep, "psu") == {"Power Supply Bay": (325.0, "warning", "", None)}  # LastPowerOutputWatts
    assert _by(rep, "power") == {"System Input Power": (344.0, "ok", "", None)}  # PowerConsumedWatts
    assert _by(rep, "temperature")["Chassis Intake Temp"] == (25.0, "ok", "intake", 40.0)
    assert sorted(_by(rep, "fan")) == ["BaseBoard System Fan", "BaseBoard System Fan Backup"]
    assert {f.check: f.summary for f in rep.findings()} == {"psu_redundancy_lost": "Power Supply Bay: warning"}
    _edit(tree, "Chassis/1U/Thermal", lambda d: d["Fans"][1].update(
        Reading=0, Status={"State": "Enabled", "Health": "Critical"}))
    _edit(tree, "Chassis/1U/Power", lambda d: d["PowerSupplies"][0].update(Status={"State": "Enabled", "Health": "OK"}))
    assert {f.check: f.summary for f in _read(url).findings()} == {
        "fan_failed": "BaseBoard System Fan Backup: stopped (critical)"}


def test_a_broken_link_is_one_line_naming_the_bmc(serve: Callable[[Path], str], tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    shutil.rmtree(tree / "Chassis/1U/ThermalSubsystem/Fans/Bay1")
    rep = read_redfish("node1", Power(provider="redfish", bmc=serve(tree), system="{host}", timeout=20))
    assert rep.error.startswith("redfish http://127.0.0.1:") and "Fans/Bay1" in rep.error and "\n" not in rep.error


def test_the_cli_writes_the_verdict_the_health_check_reads(serve: Callable[[Path], str], tmp_path: Path) -> None:
    """`slurmkit bmc node1 --state-dir DIR` against the mockup as DMTF ships it: WARN only (exit 0), DIR/node1/bmc.json
    holding the finding, the textfile beside."""
    import yaml
    from click.testing import CliRunner

    from slurmkit.cli.monitor import bmc as bmc_cmd
    from slurmkit.health.host import gather_bmc_verdict
    from tests.conftest import ROOT

    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["node_groups"][0]["power"] = {"provider": "redfish", "bmc": serve(MOCKUP), "timeout": 20}
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    r = CliRunner().invoke(bmc_cmd, ["node1", "--inventory", str(tmp_path / "inv.yaml"), "--state-dir",
                                     str(tmp_path / "state"), "--textfile", str(tmp_path / "tf")])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("node1 redfish: psu_redundancy_lost WARN: Power Supply Bay 1: ")
    v = gather_bmc_verdict(str(tmp_path / "state" / "node1"), time.time())
    assert v["node"] == "node1" and v["error"] == "" and v["age_s"] < 60
    assert [(f["check"], f["state"]) for f in v["findings"]] == [("psu_redundancy_lost", "warn")]
    assert "slurmkit_bmc_finding{" in (tmp_path / "tf" / "slurmkit_bmc.prom").read_text()
