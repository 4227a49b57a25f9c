"""The `ipmi` power provider against a real IPMI v2.0 LAN BMC: OpenIPMI's ipmi_sim (Debian package openipmi), driven
by the real ipmitool. ipmi_sim runs the chassis_control program of its lan.conf for every chassis command
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
from tests.conftest import _base, needs

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
  chassis_control "{d / 'chassis.sh'} 0x20"
  user 2 true "admin" "s3cret" admin 10 md5
""")
    # ipmi_sim_cmd(5): the BMC is the MC at 0x20 (mc_setbmc before mc_add, else ipmi_sim 1.0.13 segfaults on the
    # chassis_control line's MC), enabled last
    (d / "cmds.emu").write_text("mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\n"
                                "mc_enable 0x20\n")
    (d / "state").mkdir()
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
