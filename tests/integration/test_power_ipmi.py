"""The `ipmi` power provider and `slurmkit bmc` sensors against a real IPMI v2.0 LAN BMC: OpenIPMI's ipmi_sim (Debian
package openipmi), driven by the real ipmitool. Sensors: the SDRs of tests/data/bmc/ipmi_sim.sdrs (compiled with
OpenIPMI's sdrcomp), their values set through ipmi_sim's console (ipmi_sim_cmd(5) sensor_set_value / sensor_set_bit). ipmi_sim runs the chassis_control program of its lan.conf for every chassis command
(ipmi_lan(5); `get power` answers "power:<0|1>", ipmi_sim_cmd(5)); here that program is the "hardware": a power
file, and a soft-off (IPMI Chassis Control 05h, ipmi_sim's `set shutdown 1`) that the "OS" honours unless the test
says it ignores ACPI."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit.errors import InventoryError
from slurmkit.model.cluster import Power
from slurmkit.model.load import load_cluster_dict
from slurmkit.power.providers import IpmiProvider, PowerError, provider_for
from tests.conftest import DATA, _base, free_tcp_port, needs

pytestmark = needs(bool(shutil.which("ipmi_sim") and shutil.which("ipmitool")),
                   "ipmi_sim and ipmitool are not installed (apt-get install openipmi ipmitool)")

CHASSIS = """#!/bin/sh
# chassis_control for ipmi_sim: DEVICE get PARM... | set PARM VALUE...
d=$(dirname "$0"); shift; op=$1; shift
echo "$op $*" >> "$d/chassis.log"
case $op in
  get) for p in "$@"; do
         case $p in power) echo "power:$(cat "$d/power")";; boot) echo "boot:default";; *) exit 1;; esac
       done;;
  set) while [ $# -ge 2 ]; do
         case $1 in
           power) echo "$2" > "$d/power";;
           shutdown) [ -e "$d/ignore-soft" ] || echo 0 > "$d/power";;
         esac
         shift 2
       done;;
  *) exit 1;;
esac
"""


SENSORS = """mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
sensor_add 0x20 0 1 0x01 0x01
sensor_set_threshold 0x20 0 1 settable 011000 00 40 35 00 00 00
sensor_set_value 0x20 0 1 25 0
sensor_add 0x20 0 2 0x04 0x01
sensor_set_threshold 0x20 0 2 settable 000010 00 00 00 00 5 00
sensor_set_value 0x20 0 2 90 0
sensor_add 0x20 0 6 0x04 0x01
sensor_set_threshold 0x20 0 6 settable 000010 00 00 00 00 5 00
sensor_set_value 0x20 0 6 88 0
sensor_add 0x20 0 3 0x08 0x6f
sensor_set_bit_clr_rest 0x20 0 3 0 1 0
sensor_add 0x20 0 7 0x08 0x6f
sensor_set_bit_clr_rest 0x20 0 7 0 1 0
sensor_add 0x20 0 4 0x09 0x0b
sensor_set_bit_clr_rest 0x20 0 4 0 1 0
sensor_add 0x20 0 5 0x0b 0x01
sensor_set_value 0x20 0 5 65 0
mc_enable 0x20
"""



def sim(bmc: tuple[str, Path], *commands: str) -> None:
    """Run ipmi_sim_cmd(5) commands on the simulator's console (the "hardware" changes)."""
    with socket.create_connection(("127.0.0.1", int((bmc[1] / "console").read_text())), timeout=5) as s:
        s.recv(4096)
        for c in commands:
            s.sendall((c + "\n").encode())
            buf = b""
            while not buf.endswith(b"> "):
                buf += s.recv(4096)


def _free_udp(start: int) -> int:
    port = start
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                port += 1


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    d = tmp_path_factory.mktemp("ipmi")
    port = _free_udp(_base() + 510)
    console = free_tcp_port(530)
    (d / "chassis.sh").write_text(CHASSIS)
    (d / "chassis.sh").chmod(0o755)
    (d / "power").write_text("0\n")
    (d / "lan.conf").write_text(f"""name "node7"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
    guid a123456789abcdefa123456789abcdef
  endlan
  console 127.0.0.1 {console}
  chassis_control "{d / 'chassis.sh'} 0x20"
  user 2 true "admin" "s3cret" admin 10 md5
""")
    # ipmi_sim_cmd(5): the BMC is the MC at 0x20 (mc_setbmc before mc_add, else ipmi_sim 1.0.13 segfaults on the
    # chassis_control line's MC), enabled last
    # persist_sdr: the SDR repository is read from state/ipmi_sim/<name>/sdr.20.main (sdrcomp's output); each sensor's
    # value and thresholds are ipmi_sim's own (sensor_set_threshold mask unr,uc,unc,lnr,lc,lnc then the values)
    (d / "cmds.emu").write_text(SENSORS)
    (d / "state" / "ipmi_sim" / "node7").mkdir(parents=True)
    subprocess.run(["sdrcomp", "-o", str(d / "state" / "ipmi_sim" / "node7" / "sdr.20.main"),
                    str(DATA / "bmc" / "ipmi_sim.sdrs")], check=True, capture_output=True)
    log = open(d / "sim.log", "w")  # noqa: SIM115 - closed at the end
    proc = subprocess.Popen(["ipmi_sim", "-c", str(d / "lan.conf"), "-f", str(d / "cmds.emu"), "-s", str(d / "state"),
                             "-n"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    (d / "cred").write_text("admin:s3cret\n")
    try:
        deadline = time.monotonic() + 20
        # -C 3: ipmi_sim answers no Get Channel Cipher Suites (ipmitool's default then retries for 10 s)
        while subprocess.run(["ipmitool", "-C", "3", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(port), "-U", "admin", "-P",
                              "s3cret", "mc", "info"], capture_output=True, timeout=10).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, (d / "sim.log").read_text()[-500:]
            time.sleep(0.2)
        (d / "console").write_text(str(console))
        yield f"127.0.0.1:{port}", d
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def provider(bmc: tuple[str, Path], timeout: int = 20) -> IpmiProvider:
    return IpmiProvider(Power(provider="ipmi", bmc=bmc[0], credentials=str(bmc[1] / "cred"), timeout=timeout,
                                  cipher_suite=3))


def power(bmc: tuple[str, Path]) -> str:
    return (bmc[1] / "power").read_text().strip()


def sets(bmc: tuple[str, Path]) -> list[str]:
    return [ln for ln in (bmc[1] / "chassis.log").read_text().splitlines() if ln.startswith("set ")]


def test_on_and_soft_off_through_the_bmc(bmc) -> None:
    p = provider(bmc)
    assert p.status("node7") == "off"
    p.on("node7")
    assert power(bmc) == "1" and p.status("node7") == "on"
    (bmc[1] / "chassis.log").write_text("")
    p.off("node7")
    assert power(bmc) == "0"
    assert sets(bmc) == ["set shutdown 1"]  # the OS shut down on the soft request: no hard power-off
    p.off("node7")  # already off: nothing sent
    assert sets(bmc) == ["set shutdown 1"]


def test_off_is_forced_when_the_os_ignores_the_soft_request(bmc) -> None:
    p = provider(bmc, timeout=10)
    p.on("node7")
    (bmc[1] / "chassis.log").write_text("")
    (bmc[1] / "ignore-soft").write_text("")
    try:
        t0 = time.monotonic()
        p.off("node7")
        assert time.monotonic() - t0 >= 5  # half the timeout for the soft request
    finally:
        (bmc[1] / "ignore-soft").unlink()
    assert sets(bmc) == ["set shutdown 1", "set power 0"] and power(bmc) == "0"


def test_a_wrong_password_is_one_line_naming_the_bmc(bmc, tmp_path) -> None:
    (tmp_path / "cred").write_text("admin:wrong\n")
    p = IpmiProvider(Power(provider="ipmi", bmc=bmc[0], credentials=str(tmp_path / "cred"), timeout=10,
                                   cipher_suite=3))
    with pytest.raises(PowerError) as info:
        p.on("node7")
    msg = str(info.value)
    assert msg.startswith(f"ipmi node7 ({bmc[0]}): chassis power status exited 1: ") and "\n" not in msg


def test_inventory_power_ipmi_needs_the_bmc_address_and_picks_the_provider(bmc, tmp_path) -> None:
    group = {"name": "gpu", "hosts": "node7", "cpu": {"sockets": 1, "cores_per_socket": 4}, "memory_mb": 8000}
    inv = {"cluster": "ip", "node_groups": [{**group, "power": {"provider": "ipmi", "timeout": 20}}],
           "partitions": [{"name": "p", "groups": ["gpu"]}]}
    with pytest.raises(InventoryError, match=r"node_groups\[0\]\.power\.bmc: provider 'ipmi' needs the BMC's address"):
        load_cluster_dict(inv)
    inv["node_groups"][0]["power"].update(bmc=bmc[0], credentials=str(bmc[1] / "cred"), cipher_suite=3)
    pw = load_cluster_dict(inv).node_groups[0].power
    assert pw is not None and pw.cipher_suite == 3
    p = provider_for(pw, tmp_path)
    assert isinstance(p, IpmiProvider) and p.status("node7") in ("on", "off")


def bmc_cli(bmc, tmp_path, *args: str) -> subprocess.CompletedProcess:
    import sys

    import yaml

    inv = {"cluster": "ip", "node_groups": [{
        "name": "gpu", "hosts": "node7", "cpu": {"sockets": 1, "cores_per_socket": 4}, "memory_mb": 8000,
        "power": {"provider": "ipmi", "bmc": bmc[0], "credentials": str(bmc[1] / "cred"), "cipher_suite": 3,
                  "timeout": 20}}], "partitions": [{"name": "p", "groups": ["gpu"]}]}
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "bmc", "--inventory", str(tmp_path / "inv.yaml"),
                           *args], capture_output=True, text=True, timeout=60,
                          env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


def test_bmc_sensors_over_ipmi_findings_metrics_and_recovery(bmc, tmp_path) -> None:
    from tests.unit.test_monitor_textfile import find, samples

    ok = bmc_cli(bmc, tmp_path, "--textfile", str(tmp_path / "tf"))
    assert ok.returncode == 0 and ok.stdout == "node7 ipmi: ok (7 sensors)\n", ok.stdout + ok.stderr
    s = samples((tmp_path / "tf" / "slurmkit_bmc.prom").read_text())
    assert find(s, "slurmkit_bmc_temperature_celsius", node="node7", sensor="Inlet Temp", context="intake") == [25]
    assert find(s, "slurmkit_bmc_fan_speed_rpm", node="node7", fan="Fan 1") == [9000]
    assert find(s, "slurmkit_bmc_power_watts", node="node7", sensor="Power", kind="power") == [650]
    assert find(s, "slurmkit_bmc_up", node="node7", source="ipmi") == [1]
    assert sorted(find(s, "slurmkit_bmc_finding", node="node7")) == [0, 0, 0]
    # the hardware fails: fan 1 stops, PSU2 fails and redundancy is lost, the inlet reaches 45 C (critical 40)
    sim(bmc, "sensor_set_value 0x20 0 2 0 0", "sensor_set_bit 0x20 0 7 1 1 0",
        "sensor_set_bit_clr_rest 0x20 0 4 1 1 0", "sensor_set_value 0x20 0 1 45 0")
    try:
        bad = bmc_cli(bmc, tmp_path, "--textfile", str(tmp_path / "tf"))
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert bad.stdout.splitlines() == [
            "node7 ipmi: fan_failed FAIL: Fan 1: stopped (critical)",
            "node7 ipmi: psu_redundancy_lost WARN: PSU2 Status: Presence detected, Failure detected; "
            "PS Redundancy: Redundancy Lost",
            "node7 ipmi: inlet_over_limit WARN: Inlet Temp: 45C (critical)",
        ]
        s = samples((tmp_path / "tf" / "slurmkit_bmc.prom").read_text())
        assert {c: find(s, "slurmkit_bmc_finding", node="node7", check=c) for c in
                ("fan_failed", "psu_redundancy_lost", "inlet_over_limit")} == {
            "fan_failed": [1], "psu_redundancy_lost": [1], "inlet_over_limit": [1]}
        assert find(s, "slurmkit_bmc_sensor_ok", node="node7", kind="fan", sensor="Fan 2") == [1]
        # a site limit below the BMC's threshold also fires it, and says which limit
        js = bmc_cli(bmc, tmp_path, "--json", "--inlet-max", "30")
        import json

        found = {f["check"]: f["summary"] for f in json.loads(js.stdout)[0]["findings"]}
        assert found["inlet_over_limit"] == "Inlet Temp: 45C (limit 30C)"
    finally:
        sim(bmc, "sensor_set_value 0x20 0 2 90 0", "sensor_set_bit_clr_rest 0x20 0 7 0 1 0",
            "sensor_set_bit_clr_rest 0x20 0 4 0 1 0", "sensor_set_value 0x20 0 1 25 0")
    assert bmc_cli(bmc, tmp_path).stdout == "node7 ipmi: ok (7 sensors)\n"


def test_bmc_that_does_not_answer_is_one_line_and_exit_1(tmp_path) -> None:
    (tmp_path / "cred").write_text("admin:x\n")
    r = bmc_cli((f"127.0.0.1:{_free_udp(_base() + 560)}", tmp_path), tmp_path)
    assert r.returncode == 1
    assert r.stdout.startswith("node7 ipmi: BMC ERROR: ipmi node7: sdr elist exited 1: ") and r.stdout.count("\n") == 1
