"""BMC sensors: temperatures, fans, power supplies and power from a node's BMC, as readings, health findings and
metrics.

Two sources, one shape (``Reading``):
- Redfish, through sushy's connector with the node group's ``power`` BMC settings, per Chassis:
  - where the Chassis links them (Chassis v1_15_0, DSP8010 2020.4, which deprecated ``Power``/``Thermal``), the
    ``ThermalSubsystem`` (ThermalSubsystem.v1_0_0: the ``Fans`` collection, each Fan.v1_0_0 with Status,
    PhysicalContext, SpeedPercent.SpeedRPM; ``ThermalMetrics`` (ThermalMetrics.v1_0_0: TemperatureReadingsCelsius[]
    and TemperatureSummaryCelsius, excerpts whose DataSourceUri names the ``Sensors`` member, Sensor.v1_0_0: Name,
    Reading, PhysicalContext, Status, Thresholds.UpperCritical.Reading -- read for each temperature, so bounded by
    the temperatures the BMC lists, not by every sensor it has)), the ``PowerSubsystem`` (PowerSubsystem.v1_0_0:
    the ``PowerSupplies`` collection, each PowerSupply.v1_0_0 with Status (and Status.Conditions[].Message,
    Resource.v1_14_0) and its ``Metrics`` (PowerSupplyMetrics.v1_0_0 InputPowerWatts.Reading);
    PowerSupplyRedundancy[] (RedundantGroup: Status)) and ``EnvironmentMetrics`` (EnvironmentMetrics.v1_0_0
    PowerWatts.Reading: the chassis' power);
  - else the deprecated ``Thermal`` (Temperatures[], Fans[]) and ``Power`` (PowerSupplies[], PowerControl[],
    Redundancy[]) resources (Thermal.v1 / Power.v1: ReadingCelsius, UpperThresholdCritical, PhysicalContext,
    Reading + ReadingUnits, Status.State/Health, PowerConsumedWatts, LastPowerOutputWatts). A BMC serving both
    (DMTF's public-rackmount1 mockup does) is read once, from the newer resources.
- IPMI: ``ipmitool sdr elist`` (one line per sensor: name | number | status | entity | reading or asserted states;
  ipmitool lib/ipmi_sdr.c ipmi_sdr_print_sensor_fc, "elist" format): threshold sensors by unit (degrees C, RPM,
  Watts), discrete ones by their states (sensor type 08h Power Supply: "Failure detected", "Power Supply AC lost";
  a redundancy sensor (event type 0Bh): "Redundancy Lost"; IPMI 2.0 Table 42-3).

The parsers and ``findings`` are pure; ``read_redfish`` / ``read_ipmi`` are the edges that talk to a BMC.
Findings: ``fan_failed`` (FAIL: a fan critical or stopped), ``psu_redundancy_lost`` (WARN: a supply failed or the
redundancy set is degraded; the node still runs), ``inlet_over_limit`` (WARN: an intake temperature over the
site's limit or the BMC's own critical threshold; usually the room, not the node).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from typing import Any

from slurmkit.monitor.metrics import Exposition, M

_IPMI_HEALTH = {"ok": "ok", "nc": "warning", "lnc": "warning", "unc": "warning", "cr": "critical",
                "lcr": "critical", "ucr": "critical", "nr": "critical", "lnr": "critical", "unr": "critical",
                "ns": "absent"}
# discrete IPMI states that mean a failed supply / lost redundancy (IPMI 2.0 Table 42-3, as ipmitool prints them,
# lib/ipmi_sel.c sensor_specific_event_types / generic_event_types)
_PSU_BAD = ("Failure detected", "Power Supply AC lost", "AC lost or out-of-range", "Predictive failure")
_REDUNDANCY_BAD = ("Redundancy Lost", "Redundancy Degraded", "Non-Redundant")
# entity IDs (ipmitool prints them in decimal, "3.1") that say where a temperature is: IPMI 2.0 Table 43-13 03h
# processor, 37h air inlet; DCMI 1.5 entity IDs 40h air inlet, 41h processor
_IPMI_ENTITY_CONTEXT = {"3": "cpu", "65": "cpu", "55": "intake", "64": "intake"}
_INLET = re.compile(r"inlet|intake|ambient", re.IGNORECASE)


@dataclass(frozen=True)
class Reading:
    kind: str  # temperature | fan | psu | power | redundancy
    name: str
    value: float | None = None  # celsius, RPM, watts; None where there is none (discrete, absent)
    health: str = "ok"  # ok | warning | critical | absent
    context: str = ""  # "intake" for an inlet sensor, else Redfish's PhysicalContext (lower case) or ""
    limit: float | None = None  # the BMC's upper critical threshold (temperatures)
    states: tuple[str, ...] = ()  # asserted discrete states (IPMI)


@dataclass(frozen=True)
class Finding:
    check: str  # fan_failed | psu_redundancy_lost | inlet_over_limit
    state: str  # fail | warn
    summary: str


@dataclass
class BmcReport:
    node: str
    source: str  # redfish | ipmi
    readings: list[Reading] = field(default_factory=list)
    error: str = ""  # the BMC did not answer: one line

    def findings(self, inlet_max_c: float | None = None) -> list[Finding]:
        return findings(self.readings, inlet_max_c)


# --- IPMI -------------------------------------------------------------------------------------------------------

def parse_ipmitool_sdr(text: str) -> list[Reading]:
    out: list[Reading] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 5:
            continue
        name, _num, status, entity, reading = parts
        health = _IPMI_HEALTH.get(status, "warning")
        m = re.fullmatch(r"(-?[0-9.]+) (degrees C|RPM|Watts)", reading)
        if m:
            kind = {"degrees C": "temperature", "RPM": "fan", "Watts": "power"}[m.group(2)]
            ctx = ""
            if kind == "temperature":
                ctx = "intake" if _INLET.search(name) else _IPMI_ENTITY_CONTEXT.get(entity.split(".")[0], "")
            out.append(Reading(kind, name, float(m.group(1)), health, ctx))
            continue
        if reading in ("No Reading", "Disabled") or status == "ns":
            kind = "fan" if re.search(r"fan", name, re.I) else "temperature" if re.search(r"temp", name, re.I) else ""
            if kind:
                out.append(Reading(kind, name, None, "absent"))
            continue
        states = tuple(s.strip() for s in reading.split(",") if s.strip())
        # entity 10 = power supply, 19 = power unit (IPMI 2.0 Table 43-13)
        ent = entity.split(".")[0]
        if any(s in _REDUNDANCY_BAD or s == "Fully Redundant" for s in states):
            bad = any(s in _REDUNDANCY_BAD for s in states)
            out.append(Reading("redundancy", name, None, "critical" if bad else "ok", states=states))
        elif ent == "10" or "Presence detected" in states:
            bad = any(s in _PSU_BAD for s in states)
            absent = "Presence detected" not in states and not bad
            out.append(Reading("psu", name, None, "critical" if bad else "absent" if absent else "ok",
                               states=states))
    return out


def read_ipmi(node: str, power: Any, ipmitool: str = "ipmitool", timeout: float = 30.0) -> BmcReport:
    """``ipmitool sdr elist`` from the node's BMC (the ``ipmi`` power settings: bmc, credentials, cipher_suite)."""
    from slurmkit.power.providers import IpmiProvider, PowerError

    rep = BmcReport(node, "ipmi")
    try:
        argv, env = IpmiProvider(power, ipmitool)._base(node)
        r = subprocess.run([*argv, "sdr", "elist"], capture_output=True, text=True, env=env, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except PowerError as exc:
        rep.error = str(exc)
        return rep
    except (OSError, subprocess.TimeoutExpired) as exc:
        rep.error = f"ipmi {node}: sdr elist: {exc}"
        return rep
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["no output"]
        rep.error = f"ipmi {node}: sdr elist exited {r.returncode}: {last[0][:200]}"
        return rep
    rep.readings = parse_ipmitool_sdr(r.stdout)
    return rep


# --- Redfish ----------------------------------------------------------------------------------------------------

def _rf_health(item: dict[str, Any]) -> str:
    st = item.get("Status") or {}
    if st.get("State") in ("Absent", "Disabled", "UnavailableOffline"):
        return "absent"
    return {"OK": "ok", "Warning": "warning", "Critical": "critical"}.get(str(st.get("Health") or "OK"), "warning")


def _rf_redundancy_health(item: dict[str, Any]) -> str:
    """A redundancy set's health: ``absent`` where it is not configured (State Absent/Disabled), ``critical`` where
    it is present but unusable (State UnavailableOffline, Resource.v1 State: "present but cannot be used": the
    node runs without redundancy), else by Health."""
    st = item.get("Status") or {}
    if st.get("State") in ("Absent", "Disabled"):
        return "absent"
    if st.get("State") == "UnavailableOffline":
        return "critical"
    return _rf_health(item)


def _conditions(item: dict[str, Any]) -> tuple[str, ...]:
    """Status.Conditions[].Message (Resource.v1_14_0): what the BMC says is wrong, in its words."""
    conds = (item.get("Status") or {}).get("Conditions") or []
    return tuple(" ".join(str(c["Message"]).split()) for c in conds if isinstance(c, dict) and c.get("Message"))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _context(physical: Any, name: str) -> str:
    """``intake`` for an inlet sensor (PhysicalContext Intake, or a name saying inlet/intake/ambient), else the
    PhysicalContext in lower case (``cpu``, ``gpu``, ``exhaust``, ...) or ""."""
    ctx = str(physical or "")
    return "intake" if ctx == "Intake" or _INLET.search(name) else ctx.lower()


def parse_redfish_thermal(doc: dict[str, Any]) -> list[Reading]:
    out: list[Reading] = []
    for t in doc.get("Temperatures") or []:
        name = str(t.get("Name") or t.get("MemberId") or "temperature")
        out.append(Reading("temperature", name, _num(t.get("ReadingCelsius")), _rf_health(t),
                           _context(t.get("PhysicalContext"), name), _num(t.get("UpperThresholdCritical"))))
    for f in doc.get("Fans") or []:
        name = str(f.get("Name") or f.get("FanName") or f.get("MemberId") or "fan")
        value = _num(f.get("Reading"))
        # Thermal.v1 Fan.ReadingUnits: RPM or Percent; a percentage is no speed to export as RPM
        rpm = value if str(f.get("ReadingUnits") or "RPM") == "RPM" else None
        out.append(Reading("fan", name, rpm, _rf_health(f), str(f.get("PhysicalContext") or "").lower()))
    return out


def parse_redfish_power(doc: dict[str, Any]) -> list[Reading]:
    out: list[Reading] = []
    for p in doc.get("PowerSupplies") or []:
        name = str(p.get("Name") or p.get("MemberId") or "psu")
        out.append(Reading("psu", name, _num(p.get("PowerInputWatts")) or _num(p.get("LastPowerOutputWatts")),
                           _rf_health(p)))
    for c in doc.get("PowerControl") or []:
        if _num(c.get("PowerConsumedWatts")) is not None:
            out.append(Reading("power", str(c.get("Name") or "chassis"), _num(c.get("PowerConsumedWatts"))))
    for r in doc.get("Redundancy") or []:
        out.append(Reading("redundancy", str(r.get("Name") or r.get("MemberId") or "redundancy"), None,
                           _rf_redundancy_health(r)))
    return out


# the newer resources (Chassis v1_15_0, 2020.4): one parser per resource, ``walk_chassis`` follows the links

def parse_redfish_sensor(doc: dict[str, Any], excerpt: dict[str, Any] | None = None, hint: str = "") -> Reading:
    """A temperature from its Sensor resource (Sensor.v1_0_0), falling back to the excerpt that linked it
    (SensorArrayExcerpt: DeviceName, PhysicalContext, Reading) where the Sensor lacks a property; ``hint`` is the
    TemperatureSummaryCelsius key (Intake, Internal, Exhaust, Ambient) for a summary entry."""
    ex = excerpt or {}
    name = str(doc.get("Name") or ex.get("DeviceName") or doc.get("Id") or hint or "temperature")
    value = _num(doc.get("Reading"))
    value = value if value is not None else _num(ex.get("Reading"))
    physical = doc.get("PhysicalContext") or ex.get("PhysicalContext") or ("Intake" if hint == "Intake" else "")
    limit = _num(((doc.get("Thresholds") or {}).get("UpperCritical") or {}).get("Reading"))
    return Reading("temperature", name, value, _rf_health(doc) if doc else "ok", _context(physical, name), limit)


def parse_redfish_fan(doc: dict[str, Any]) -> Reading:
    """A Fan (Fan.v1_0_0): SpeedPercent.SpeedRPM where the BMC gives it (a percentage is no speed in RPM)."""
    name = str(doc.get("Name") or doc.get("Id") or "fan")
    rpm = _num((doc.get("SpeedPercent") or {}).get("SpeedRPM"))
    return Reading("fan", name, rpm, _rf_health(doc), str(doc.get("PhysicalContext") or "").lower())


def parse_redfish_power_supply(doc: dict[str, Any], metrics: dict[str, Any] | None = None) -> Reading:
    """A PowerSupply (PowerSupply.v1_0_0) and its PowerSupplyMetrics (InputPowerWatts.Reading)."""
    name = str(doc.get("Name") or doc.get("Id") or "psu")
    watts = _num(((metrics or {}).get("InputPowerWatts") or {}).get("Reading"))
    return Reading("psu", name, watts, _rf_health(doc), states=_conditions(doc))


def parse_redfish_power_subsystem(doc: dict[str, Any]) -> list[Reading]:
    """PowerSubsystem.PowerSupplyRedundancy[] (RedundantGroup: no Name; named by its index and type)."""
    out = []
    for i, r in enumerate(doc.get("PowerSupplyRedundancy") or []):
        st = (r.get("Status") or {}).get("State")
        out.append(Reading("redundancy", f"PowerSupplyRedundancy {i} ({r.get('RedundancyType') or 'redundancy'})",
                           None, _rf_redundancy_health(r), states=(str(st),) if st == "UnavailableOffline" else ()))
    return out


def parse_redfish_environment(doc: dict[str, Any]) -> list[Reading]:
    """EnvironmentMetrics.PowerWatts (SensorPowerExcerpt): the chassis' power, named by the sensor it comes from."""
    pw = doc.get("PowerWatts") or {}
    if _num(pw.get("Reading")) is None:
        return []
    src = str(pw.get("DataSourceUri") or "").rstrip("/").rsplit("/", 1)[-1]
    return [Reading("power", src or "chassis", _num(pw.get("Reading")))]


def _members(get: Any, coll: dict[str, Any] | None) -> list[dict[str, Any]]:
    link = (coll or {}).get("@odata.id")
    return [get(m["@odata.id"]) for m in (get(link).get("Members") or []) if m.get("@odata.id")] if link else []


def walk_chassis(get: Any, chassis: dict[str, Any]) -> list[Reading]:
    """One Chassis' readings; ``get(path) -> dict`` is the HTTP GET (sushy's connector in ``read_redfish``). The
    newer resources where the Chassis links them, else the deprecated Thermal/Power (module docstring)."""
    out: list[Reading] = []

    def link(key: str) -> Any:
        return (chassis.get(key) or {}).get("@odata.id")

    if link("ThermalSubsystem"):
        ts = get(link("ThermalSubsystem"))
        out += [parse_redfish_fan(f) for f in _members(get, ts.get("Fans"))]
        tm_link = (ts.get("ThermalMetrics") or {}).get("@odata.id")
        tm = get(tm_link) if tm_link else {}
        entries = [(e, "") for e in tm.get("TemperatureReadingsCelsius") or []]
        entries += [(e, k) for k, e in (tm.get("TemperatureSummaryCelsius") or {}).items() if isinstance(e, dict)]
        seen: set[str] = set()
        for e, hint in entries:
            uri = str(e.get("DataSourceUri") or "")
            if uri and uri in seen:
                continue  # a summary entry naming a sensor already read
            seen.add(uri)
            # a DataSourceUri on this service is read for the sensor's name, health and threshold
            out.append(parse_redfish_sensor(get(uri) if uri.startswith("/redfish/") else {}, e, hint))
    elif link("Thermal"):
        out += parse_redfish_thermal(get(link("Thermal")))
    if link("PowerSubsystem"):
        ps = get(link("PowerSubsystem"))
        for p in _members(get, ps.get("PowerSupplies")):
            m = (p.get("Metrics") or {}).get("@odata.id")
            out.append(parse_redfish_power_supply(p, get(m) if m else None))
        out += parse_redfish_power_subsystem(ps)
        if link("EnvironmentMetrics"):
            out += parse_redfish_environment(get(link("EnvironmentMetrics")))
    elif link("Power"):
        out += parse_redfish_power(get(link("Power")))
    return out


def read_redfish(node: str, power: Any) -> BmcReport:
    """Every Chassis' thermal and power resources of the node's BMC (``walk_chassis``) (the ``redfish`` power settings: bmc URL with
    {host}, credentials, verify_tls), through sushy's connector; the session is closed after the read."""
    rep = BmcReport(node, "redfish")
    try:
        from sushy import auth as sushy_auth  # type: ignore[import-untyped]
        from sushy import connector as sushy_connector
        from sushy import main as sushy_main
    except ImportError:
        rep.error = "redfish: needs the sushy package: pip install 'slurmkit[redfish]'"
        return rep
    url = power.bmc.replace("{host}", node)
    user = password = None
    if power.credentials:
        try:
            with open(power.credentials) as f:
                user, _, password = f.read().strip().partition(":")
        except OSError as exc:
            rep.error = f"{power.credentials}: {exc.strerror}"
            return rep
    auth = sushy_auth.SessionOrBasicAuth(username=user or None, password=password or None)
    conn = sushy_connector.Connector(url, verify=power.verify_tls)
    try:
        sushy_main.Sushy(url, auth=auth, connector=conn)  # authenticates (a session where the BMC offers one)
        members = conn.get("/redfish/v1/Chassis").json().get("Members") or []
        for m in members:
            rep.readings += walk_chassis(lambda path: conn.get(path).json(), conn.get(m["@odata.id"]).json())
    except Exception as exc:  # noqa: BLE001 - sushy's and requests' exception trees: one line for the report
        rep.error = f"redfish {url}: {' '.join(str(exc).split())[:300] or type(exc).__name__}"
    finally:
        for c in (auth, conn):
            try:
                c.close()
            except Exception:  # noqa: BLE001,S110
                pass
    return rep


def read(node: str, power: Any) -> BmcReport:
    if power.provider == "ipmi":
        return read_ipmi(node, power)
    return read_redfish(node, power)


# --- findings and metrics ---------------------------------------------------------------------------------------

def findings(readings: list[Reading], inlet_max_c: float | None = None) -> list[Finding]:
    out: list[Finding] = []
    fans = [r for r in readings if r.kind == "fan" and r.health != "absent"]
    dead = [r for r in fans if r.health == "critical" or r.value == 0]
    if dead:
        out.append(Finding("fan_failed", "fail", "; ".join(
            f"{r.name}: {'stopped' if r.value == 0 else f'{r.value:g} RPM'} ({r.health})" for r in dead)))
    psus = [r for r in readings if r.kind == "psu"]
    red = [r for r in readings if r.kind == "redundancy"]
    bad_psu = [r for r in psus if r.health in ("critical", "warning")]
    bad_red = [r for r in red if r.health in ("critical", "warning")]  # absent: no redundancy configured
    if bad_psu or bad_red:
        why = [f"{r.name}: {', '.join(r.states) or r.health}" for r in bad_psu + bad_red]
        out.append(Finding("psu_redundancy_lost", "warn", "; ".join(why)))
    hot = []
    for r in readings:
        if r.kind != "temperature" or r.context != "intake" or r.health == "absent":
            continue
        over_site = r.value is not None and inlet_max_c is not None and r.value > inlet_max_c
        over_bmc = r.health == "critical" or (r.value is not None and r.limit is not None and r.value >= r.limit)
        if over_site or over_bmc:
            lim = [f"limit {inlet_max_c:g}C"] if inlet_max_c is not None else []
            lim += [f"BMC critical {r.limit:g}C"] if r.limit is not None else []
            hot.append(f"{r.name}: {r.value:g}C" + (f" ({', '.join(lim)})" if lim else f" ({r.health})"))
    if hot:
        out.append(Finding("inlet_over_limit", "warn", "; ".join(hot)))
    return out


CHECKS = ("fan_failed", "psu_redundancy_lost", "inlet_over_limit")


def add_metrics(ex: Exposition, rep: BmcReport, inlet_max_c: float | None = None) -> None:
    """One node's BMC series (labels node=, as the hooks' series): values, each sensor's health, the findings."""
    n = rep.node
    ex.add(M.bmc_up, {"node": n, "source": rep.source}, 0 if rep.error else 1)
    if rep.error:
        return
    for r in rep.readings:
        if r.kind == "temperature" and r.value is not None:
            ex.add(M.bmc_temperature, {"node": n, "sensor": r.name, "context": r.context}, r.value)
        elif r.kind == "fan" and r.value is not None:
            ex.add(M.bmc_fan_rpm, {"node": n, "fan": r.name}, r.value)
        elif r.kind in ("power", "psu") and r.value is not None:
            ex.add(M.bmc_power_watts, {"node": n, "sensor": r.name, "kind": r.kind}, r.value)
        ex.add(M.bmc_sensor_ok, {"node": n, "kind": r.kind, "sensor": r.name}, int(r.health in ("ok", "absent")))
    found = {f.check for f in findings(rep.readings, inlet_max_c)}
    for c in CHECKS:
        ex.add(M.bmc_finding, {"node": n, "check": c}, int(c in found))


VERDICT_FILE = "bmc.json"


def write_verdict(state_dir: str, rep: BmcReport, inlet_max_c: float | None = None, now: float | None = None) -> str:
    """``STATE_DIR/<node>/bmc.json``: the node's findings for its health check (health/checks.py ``eval_bmc``),
    where STATE_DIR is the hooks' state dir shared with the nodes. Atomic: the check reads the old or the new one."""
    import json
    import time

    from slurmkit.health.state import atomic_write, node_dir

    doc = {"node": rep.node, "time": time.time() if now is None else now, "source": rep.source, "error": rep.error,
           "findings": [] if rep.error else [{"check": f.check, "state": f.state, "summary": f.summary}
                                             for f in findings(rep.readings, inlet_max_c)]}
    path = f"{node_dir(state_dir, rep.node)}/{VERDICT_FILE}"
    atomic_write(path, json.dumps(doc) + "\n", durable=False)
    return path
