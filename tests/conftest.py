"""Shared fixtures.

``lab``: ONE real Slurm lab for the whole test session (8 nodes x 8 fake H100, leaves node[1-4], node[5-8]),
brought up with slurmkit's own `Lab` and always taken down at the end, even on failure. Tests that need it are
marked ``@pytest.mark.lab``; they are never skipped: without root and Debian's Slurm they fail with the lab's
own one-line reason. Deselect them locally with ``-m 'not lab'``.

Environment (so several people can run suites on one machine without clashing):
  SLURMKIT_TEST_LAB_DIR        lab directory           (default /tmp/slurmkit-test-lab)
  SLURMKIT_TEST_LAB_PORT_BASE  slurmctld port; slurmd of nodeI on base+I (default 17817, so a demo lab on 16817 can stay up)
  SLURMKIT_TEST_LAB_PORT_LIMIT make_lab's labs stay below this port (tests/run.sh: the next pass's base; unset: none)
  SLURMKIT_TEST_SLURM          Slurm release the labs run ("24.11"; default: the host's own). tests/run.sh runs
                               the lab tests a second time with the release the host does not have.

A lab that fails to start keeps its directory (logs, config) under ``<dir>.failed-<n>``; the error says where.

``make_lab(**spec)``: a factory for a test module that needs a lab of its own shape (hooks, accounting, fewer
nodes); each one gets its own dir and port range and is taken down at the end of the session.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit.errors import LabError
from slurmkit.lab import Lab, LabSpec

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"

# os._exit() in the pytest process itself ends the run at once with that code -- 0 from a passing hook -- and no
# summary: CI would read "passed" with the rest of the suite never run (seen: the hook's exit_now() os._exits when
# any other thread is alive, and an earlier test had left one). Code under test that calls it in-process fails the
# test instead; forked children (another pid) exit as they should.
_PYTEST_PID = os.getpid()
_real_os_exit = os._exit


def _os_exit_outside_pytest(code: int) -> None:
    if os.getpid() == _PYTEST_PID:
        raise RuntimeError(f"os._exit({code}) called in the pytest process: it would end the whole test run")
    _real_os_exit(code)


os._exit = _os_exit_outside_pytest  # type: ignore[assignment]

# tests/run.sh starts the release passes as background jobs of a non-interactive shell, which start with SIGINT
# ignored (POSIX: asynchronous lists ignore SIGINT without job control), and Python leaves an ignored SIGINT
# ignored: run.sh's trap (kill -INT to every pass, so each takes its labs down) reached no pass -- seen: three passes
# ran on after it. Take SIGINT back as KeyboardInterrupt, which pytest turns into its teardown.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _no_host_textfile_dir(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A hook run in a test must never write the host's node_exporter directory (Debian's
    prometheus-node-exporter, installed for the monitoring tests, creates /var/lib/prometheus/node-exporter, the
    hooks' default): point the default at a path that does not exist, so metrics go where the test says."""
    import slurmkit.health.policy as policy

    monkeypatch.setattr(policy, "DEFAULT_TEXTFILE_DIR", str(tmp_path_factory.getbasetemp() / "no-node-exporter"))


def needs(condition: bool, reason: str) -> pytest.MarkDecorator:
    """Skip where ``condition`` is false -- but never in CI (``CI`` set): tests/run.sh installs everything these
    tests need and CI runs as root, so a missing prerequisite there must fail loudly, not hide behind a skip."""
    return pytest.mark.skipif(not condition and not os.environ.get("CI"), reason=reason)


def _base() -> int:
    return int(os.environ.get("SLURMKIT_TEST_LAB_PORT_BASE", "17817"))


def free_tcp_port(offset: int) -> int:
    """The first loopback TCP port from ``_base() + offset`` that binds (an emulator's or a test server's port)."""
    import socket

    port = _base() + offset
    while True:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                port += 1


def lab_release() -> str | None:
    """The release the labs of this run use (None: the host's)."""
    return os.environ.get("SLURMKIT_TEST_SLURM") or None


def release_under_test() -> str:
    """The release the labs of this run use, spelled out ("22.05", "24.11"): for marks that depend on it."""
    from slurmkit.lab.image import host_release

    return lab_release() or host_release() or "0.0"


def _root_dir() -> str:
    root = os.environ.get("SLURMKIT_TEST_LAB_DIR", "/tmp/slurmkit-test-lab")
    return f"{root}-{lab_release()}" if lab_release() else root


def start_lab(spec: LabSpec) -> Lab:
    """Bring up a lab for the tests; if it fails, keep its logs: move the dir aside and say where."""
    stale = Lab.load(spec.dir)
    if stale.is_up():
        stale.down()
    the_lab = Lab(spec)
    try:
        the_lab.up()
    except Exception as exc:
        kept = _keep_failed(Path(spec.dir))
        if isinstance(exc, LabError):
            raise LabError(f"{exc} (the lab dir, with its logs, is kept in {kept})") from exc
        exc.add_note(f"the lab dir, with its logs, is kept in {kept}")
        raise
    return the_lab


def _keep_failed(d: Path) -> Path | None:
    if not d.exists():
        return None
    n = 1
    while d.with_name(f"{d.name}.failed-{n}").exists():
        n += 1
    dest = d.with_name(f"{d.name}.failed-{n}")
    d.rename(dest)
    return dest


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    the_lab = start_lab(LabSpec(dir=_root_dir(), port_base=_base(), slurm=lab_release()))
    try:
        yield the_lab
    finally:
        the_lab.down()


# Ports other tests use at fixed offsets from the base (their own labs and emulators: test_lab +50, the monitoring
# default +140, test_cgroup_lab +150, test_nodes_lab +180, test_monitor_lab/test_power_ipmi +500..+600, the alerting
# lab +600 (its Prometheus, exporter, node exporters and Alertmanager), test_remote_lab's sshd +700 and
# test_remote_rest_lab's slurmrestd +720, test_power_lab +3200, test_power_redfish +3400, the Redfish mockup +3500,
# test_configless_lab +3600): make_lab's labs stay clear of them.
_RESERVED_OFFSETS = ((0, 20), (50, 60), (140, 200), (500, 640), (700, 760), (3200, 3700))
# make_lab tries bases LAB_STEP apart. Each lab's own ports are checked against every earlier lab's (_TAKEN), so the
# step only needs to be small: at 200 (one lab per 200 ports) a `releases` pass ran out of its 4000-port window at
# its 15th lab on CI; at 20 the labs pack by what they really use (base..base+nodes, +1000/+1001, monitoring).
LAB_STEP = 20
_TAKEN: set[int] = set()  # every port of the labs make_lab made in this session


def _lab_ports(spec: LabSpec) -> set[int]:
    ports = set(spec.ports())  # slurmctld, each slurmd, and with accounting slurmdbd (+1000) and MariaDB (+1001)
    if getattr(spec, "monitoring", False):
        # Prometheus, the exporter +1, nodeI's node_exporter +1+I, Alertmanager +2+N and its cluster port +3+N
        # (slurmkit/lab/monitoring.py)
        p = spec.monitoring_port_resolved
        ports |= set(range(p, p + spec.nodes + spec.spare + 4))
    return ports


def _free_lab_base(kw: dict[str, object]) -> int:
    """The first base of the form base + LAB_STEP*k whose lab (its accounting and monitoring ports included) meets
    neither an earlier make_lab lab of this session nor the fixed-offset ports of other tests."""
    base = _base()
    limit = int(os.environ.get("SLURMKIT_TEST_LAB_PORT_LIMIT") or 0)
    reserved = {base + o for lo, hi in _RESERVED_OFFSETS for o in range(lo, hi)}
    k = 1
    while True:
        cand = base + LAB_STEP * k
        spec = LabSpec(dir="/nonexistent", port_base=cand, **kw)  # type: ignore[arg-type]
        ports = _lab_ports(spec)
        # a monitoring port the test chose itself may sit in a reserved window (it is that window's owner)
        checked = set(spec.ports()) if kw.get("monitoring_port") else ports
        if not ports & _TAKEN and not checked & reserved:
            if limit and max(ports) >= limit:
                # tests/run.sh: the next release's lab pass, side by side with this one, starts at the limit
                raise RuntimeError(f"make_lab: lab {k} of this session would need ports up to {max(ports)}, past "
                                   f"SLURMKIT_TEST_LAB_PORT_LIMIT={limit} (another lab pass's ports); space the "
                                   "passes further apart in tests/run.sh")
            return cand
        if k > 100000:
            raise RuntimeError(f"make_lab: no free lab base for {kw} (its chosen monitoring port is taken?)")
        k += 1


@pytest.fixture(scope="session")
def make_lab() -> Iterator:
    made: list[Lab] = []
    root = _root_dir()
    tried = 0

    def factory(**kw: object) -> Lab:
        nonlocal tried
        tried += 1
        kw.setdefault("slurm", lab_release())
        spec = LabSpec(dir=f"{root}-{tried}", port_base=_free_lab_base(kw), **kw)  # type: ignore[arg-type]
        _TAKEN.update(_lab_ports(spec))
        lab_ = start_lab(spec)
        made.append(lab_)
        return lab_

    try:
        yield factory
    finally:
        for lab_ in made:
            lab_.down()


def lab_run(lab: Lab, argv: list[str], timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command against the lab (its SLURM_CONF), capturing text output."""
    return subprocess.run(argv, env={**os.environ, **lab.env}, capture_output=True, text=True, timeout=timeout, check=check)
