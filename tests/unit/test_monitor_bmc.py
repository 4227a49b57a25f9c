"""BMC sensors, pure: recorded `ipmitool sdr elist` of OpenIPMI's ipmi_sim (tests/data/bmc, recorded by hand from the
simulator tests/integration/test_power_ipmi.py starts: healthy, then fan 1 stopped, PSU2 failed, redundancy lost,
inlet 45 C), the Thermal resource sushy-tools' Redfish emulator serves (recorded), and the DMTF-style Power sample
sushy ships for its own tests (read from the installed package); findings and metrics."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from slurmkit.monitor import bmc
from slurmkit.monitor.metrics import BY_NAME, Exposition
from tests.conftest import DATA, needs
from tests.unit.test_monitor_textfile import find, samples

D = DATA / "bmc"


def _sushy_power() -> Path | None:
    try:
        import sushy  # type: ignore[import-untyped]
    except ImportError:
        return None
    p = Path(sushy.__file__).parent / "tests" / "unit" / "json_samples" / "power.json"
    return p if p.exists() else None


def test_ipmitool_sdr_elist_healthy_is_read_by_unit_and_state():
    r = {x.name: x for x in bmc.parse_ipmitool_sdr((D / "ipmitool_sdr_elist.txt").read_text())}
    assert (r["Inlet Temp"].kind, r["Inlet Temp"].value, r["Inlet Temp"].context) == ("temperature", 25.0, "intake")
    assert (r["Fan 1"].kind, r["Fan 1"].value, r["Fan 2"].value) == ("fan", 9000.0, 8800.0)
    assert (r["Power"].kind, r["Power"].value) == ("power", 650.0)
    assert (r["PSU1 Status"].kind, r["PSU1 Status"].health) == ("psu", "ok")
    assert (r["PS Redundancy"].kind, r["PS Redundancy"].health) == ("redundancy", "ok")
    assert bmc.findings(list(r.values())) == []


def test_ipmitool_faults_give_the_three_findings():
    rs = bmc.parse_ipmitool_sdr((D / "ipmitool_sdr_elist_faults.txt").read_text())
    got = {f.check: (f.state, f.summary) for f in bmc.findings(rs)}
    assert got == {
        "fan_failed": ("fail", "Fan 1: stopped (critical)"),
        "psu_redundancy_lost": ("warn", "PSU2 Status: Presence detected, Failure detected; PS Redundancy: "
                                        "Redundancy Lost"),
        "inlet_over_limit": ("warn", "Inlet Temp: 45C (critical)"),
    }


@pytest.mark.parametrize(("line", "kind", "health"), [
    ("Fan 3            | 30h | ns  | 29.3 | No Reading", "fan", "absent"),
    ("PSU3 Status      | 31h | ok  | 10.3 | Power Supply AC lost", "psu", "critical"),
    ("CPU Temp         | 32h | unc |  3.1 | 88 degrees C", "temperature", "warning"),
])
def test_other_ipmi_sensor_lines(line, kind, health):
    (r,) = bmc.parse_ipmitool_sdr(line)
    assert (r.kind, r.health) == (kind, health)


@pytest.mark.parametrize(("line", "context"), [
    ("CPU1 Temp        | 30h | ok  |  3.1 | 45 degrees C", "cpu"),  # entity 03h processor
    ("Temp             | 31h | ok  | 65.1 | 45 degrees C", "cpu"),  # DCMI 41h processor
    ("Temp             | 32h | ok  | 64.1 | 22 degrees C", "intake"),  # DCMI 40h air inlet
    ("Front Temp       | 33h | ok  | 55.1 | 22 degrees C", "intake"),  # 37h air inlet
    ("Ambient Temp     | 34h | ok  |  7.1 | 22 degrees C", "intake"),  # by its name
    ("Board Temp       | 35h | ok  |  7.1 | 30 degrees C", ""),
])
def test_ipmi_temperature_context_from_entity_or_name(line, context):
    (r,) = bmc.parse_ipmitool_sdr(line)
    assert (r.kind, r.context) == ("temperature", context)


def test_redfish_thermal_of_the_emulator_and_its_faults():
    doc = json.loads((D / "redfish_thermal_sushy_tools.json").read_text())
    rs = bmc.parse_redfish_thermal(doc)
    intake = [r for r in rs if r.context == "intake"]
    assert [(r.name, r.value, r.limit) for r in intake] == [("Chassis Intake Temp", 25.0, 40.0)]
    assert bmc.findings(rs) == []
    bad = copy.deepcopy(doc)
    bad["Fans"][0].update(Reading=0, Status={"State": "Enabled", "Health": "Critical"})
    bad["Temperatures"][-1]["ReadingCelsius"] = 41
    got = {f.check: f.summary for f in bmc.findings(bmc.parse_redfish_thermal(bad))}
    assert got == {"fan_failed": f"{doc['Fans'][0]['Name']}: stopped (critical)",
                   "inlet_over_limit": "Chassis Intake Temp: 41C (BMC critical 40C)"}
    absent = copy.deepcopy(doc)
    absent["Fans"][0].update(Reading=0, Status={"State": "Absent"})  # an empty fan bay is no failed fan
    assert bmc.findings(bmc.parse_redfish_thermal(absent)) == []


@needs(_sushy_power() is not None, "sushy is not installed (pip install -e '.[dev]')")
def test_redfish_power_supplies_redundancy_and_a_lost_supply():
    doc = json.loads(_sushy_power().read_text())  # type: ignore[union-attr]
    rs = bmc.parse_redfish_power(doc)
    assert [r.kind for r in rs].count("psu") == len(doc["PowerSupplies"]) and any(r.kind == "redundancy" for r in rs)
    assert bmc.findings(rs) == []
    bad = copy.deepcopy(doc)
    bad["PowerSupplies"][1]["Status"] = {"State": "Enabled", "Health": "Critical"}
    bad["Redundancy"][0]["Status"] = {"State": "Enabled", "Health": "Warning"}
    (f,) = bmc.findings(bmc.parse_redfish_power(bad))
    assert (f.check, f.state) == ("psu_redundancy_lost", "warn")
    assert f.summary == f"{doc['PowerSupplies'][1]['Name']}: critical; {doc['Redundancy'][0]['Name']}: warning"


def test_metrics_of_a_report_and_of_a_bmc_that_did_not_answer():
    rep = bmc.BmcReport("n1", "ipmi", bmc.parse_ipmitool_sdr((D / "ipmitool_sdr_elist_faults.txt").read_text()))
    ex = Exposition()
    bmc.add_metrics(ex, rep)
    bmc.add_metrics(ex, bmc.BmcReport("n2", "redfish", error="redfish http://x: refused"))
    assert ex.names() <= set(BY_NAME)
    s = samples(ex.text())
    assert find(s, "slurmkit_bmc_finding", node="n1", check="fan_failed") == [1]
    assert find(s, "slurmkit_bmc_sensor_ok", node="n1", kind="fan", sensor="Fan 1") == [0]
    assert find(s, "slurmkit_bmc_up", node="n2", source="redfish") == [0]
    assert find(s, "slurmkit_bmc_finding", node="n2") == []  # nothing known, nothing claimed


@pytest.mark.parametrize(("state", "found"), [("Disabled", False), ("Absent", False), ("UnavailableOffline", True),
                                              ("Enabled", False)])
def test_a_redundancy_set_not_configured_is_no_lost_redundancy(state, found):
    """Resource.v1 State: Disabled/Absent = no redundancy set configured (a one-PSU node: nothing lost);
    UnavailableOffline = present but unusable (the node runs without redundancy)."""
    doc = {"Redundancy": [{"Name": "PSU set", "Status": {"State": state, "Health": "OK"}}]}
    got = [f.summary for f in bmc.findings(bmc.parse_redfish_power(doc))]
    assert got == (["PSU set: critical"] if found else [])
