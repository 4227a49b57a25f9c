"""The lab's port check (issue 24 item 8): a port held only by TIME-WAIT sockets is waited for, not called "in use";
a busy port is named with its role and holder; a port in the host's ephemeral range is refused. Real sockets on
ports 31900-31999 (tests write only to their own ports)."""

from __future__ import annotations

import os
import socket
import time

import pytest

import slurmkit.lab.ports as portsmod
from slurmkit.errors import LabError
from slurmkit.lab import LabSpec
from slurmkit.lab.ports import check_ports, ephemeral_range


def _time_wait(port: int) -> None:
    """Leave a TIME-WAIT socket on ``port`` that a SO_REUSEADDR bind cannot pass: the closing side (which keeps
    the TIME-WAIT) is a client bound to ``port`` without SO_REUSEADDR."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    cli = socket.socket()
    cli.bind(("127.0.0.1", port))
    cli.connect(srv.getsockname())
    acc, _ = srv.accept()
    cli.close()  # the side that closes first keeps the TIME-WAIT
    time.sleep(0.1)
    acc.close()
    srv.close()


def _free_port(lo: int = 31900, hi: int = 31999) -> int:
    for p in range(lo, hi):
        if portsmod.port_free(p) and not portsmod.tcp_sockets(p):
            return p
    pytest.skip("no free port in 31900-31999")


def test_a_time_wait_port_is_waited_for_not_called_in_use():
    port = _free_port()
    _time_wait(port)
    assert not portsmod.port_free(port)  # what the old check judged by: "ports in use"
    assert [st for st, _i in portsmod.tcp_sockets(port)] == ["06"]
    said: list[str] = []
    with pytest.raises(LabError) as ei:
        check_ports({port: "slurmctld, --port-base"}, said.append, time_wait=0.5)
    assert "held only by TIME-WAIT sockets" in said[0] and str(port) in said[0]
    assert "in use" not in str(ei.value) and "still held after 0.5s of TIME-WAIT" in str(ei.value)


def test_a_busy_port_is_named_with_its_role_and_holder():
    port = _free_port()
    with socket.socket() as sk:
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sk.bind(("127.0.0.1", port))
        sk.listen()
        spec = LabSpec(port_base=port - 1000, nodes=1, accounting=True)
        with pytest.raises(LabError) as ei:
            check_ports({port: spec.ports()[port]})
    msg = str(ei.value)
    assert msg.startswith(f"ports in use: {port} (slurmdbd, --port-base+1000 with --accounting) by ")
    assert f"(pid {os.getpid()})" in msg and "\n" not in msg


def test_ports_in_the_ephemeral_range_are_refused(monkeypatch, tmp_path):
    (tmp_path / "ip_local_port_range").write_text("32768\t60999\n")
    (tmp_path / "ip_local_reserved_ports").write_text("40000-40009,45000\n")
    assert ephemeral_range(tmp_path) == (32768, 60999, {*range(40000, 40010), 45000})
    monkeypatch.setattr(portsmod, "ephemeral_range", lambda: ephemeral_range(tmp_path))
    spec = LabSpec(port_base=33000, nodes=2)
    with pytest.raises(LabError) as ei:
        check_ports(spec.ports())
    assert str(ei.value).startswith("ports 33000-33002 (slurmctld, --port-base) lie in this host's ephemeral range "
                                    "32768-60999 (net.ipv4.ip_local_port_range)")
    check_ports(LabSpec(port_base=40000, nodes=2).ports())  # reserved: the kernel never picks them
    spec = LabSpec(port_base=31900, nodes=2, accounting=True)
    with pytest.raises(LabError, match="ports 32900-32901 \\(slurmdbd, --port-base\\+1000 with --accounting\\)"):
        check_ports(spec.ports())


def test_make_labs_stay_below_the_port_limit_of_their_pass(monkeypatch):
    """tests/run.sh runs the releases' lab passes side by side, each from its own port base, the next pass's base its
    limit. make_lab's labs climb from the base (by conftest.LAB_STEP, past every earlier lab's ports), so without the
    limit they reached into the next pass's labs (its slurmctld at the next base): a lab that needs a port at or past
    SLURMKIT_TEST_LAB_PORT_LIMIT is an error naming the limit, never a port another pass holds."""
    from tests import conftest

    monkeypatch.setenv("SLURMKIT_TEST_LAB_PORT_BASE", "20000")
    monkeypatch.setattr(conftest, "_TAKEN", set())
    monkeypatch.setenv("SLURMKIT_TEST_LAB_PORT_LIMIT", "21010")
    assert conftest._free_lab_base({"nodes": 2, "slurm": None}) == 20020  # 20020..20022, past the session lab's window
    with pytest.raises(RuntimeError, match="SLURMKIT_TEST_LAB_PORT_LIMIT=21010"):
        conftest._free_lab_base({"nodes": 2, "accounting": True, "slurm": None})  # its slurmdbd would be on 21020


def test_make_labs_pack_by_the_ports_they_use(monkeypatch):
    """Labs pack LAB_STEP apart, never on an earlier lab's ports (its slurmdbd +1000 and its monitoring ports
    included) nor in a window a fixed-offset test owns (+500..+640, the remote tests' +700..+760)."""
    from slurmkit.lab.spec import LabSpec
    from tests import conftest

    monkeypatch.setenv("SLURMKIT_TEST_LAB_PORT_BASE", "20000")
    monkeypatch.delenv("SLURMKIT_TEST_LAB_PORT_LIMIT", raising=False)
    monkeypatch.setattr(conftest, "_TAKEN", set())
    bases = []
    for kw in ({"nodes": 12}, {"nodes": 2, "accounting": True}, {"nodes": 4, "monitoring": True}, {"nodes": 2}):
        kw = {**kw, "slurm": None}
        b = conftest._free_lab_base(kw)
        ports = conftest._lab_ports(LabSpec(dir="/nonexistent", port_base=b, **kw))  # type: ignore[arg-type]
        assert not ports & conftest._TAKEN, (kw, b)
        assert not {p - 20000 for p in ports} & {o for lo, hi in conftest._RESERVED_OFFSETS for o in range(lo, hi)}
        conftest._TAKEN.update(ports)
        bases.append(b)
    assert bases[0] == 20020 and bases[1] == 20040 and len(set(bases)) == 4, bases
    assert max(bases) < 20000 + 1000, bases  # four labs in the first thousand ports, where 200 apart took 800
