"""Providers: switch one node on or off. Each raises ``PowerError`` with one line saying what went wrong.

``lab``: the lab's slurmd for that node (start / stop), found from the inventory's directory (DIR/etc). A file
``DIR/power-fault/<node>`` makes power-on fail (fault injection, like the fake NVML files).
``command``: the site's script, ``SCRIPT on|off HOST``, exit 0 = done.
``redfish``: the node's BMC through ``sushy`` (OpenStack's Redfish client): ComputerSystem.Reset On, or
GracefulShutdown and then ForceOff if the system is still on after half the timeout; then wait until the system
reports that power state; the Redfish session is closed after every action.
``ipmi``: the node's BMC over IPMI v2.0 LAN with ipmitool: chassis power on, or soft and then off (see IpmiProvider).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

from slurmkit.errors import SlurmkitError
from slurmkit.model.cluster import Power

FAULT_DIR = "power-fault"


class PowerError(SlurmkitError):
    pass


class Provider(Protocol):
    def on(self, host: str) -> None: ...

    def off(self, host: str) -> None: ...


class CommandProvider:
    def __init__(self, power: Power) -> None:
        self.argv = [*_split(power.command)]
        self.timeout = power.timeout

    def _run(self, action: str, host: str) -> None:
        import signal

        try:
            # its own session: on a timeout the whole script (and what it started) is killed, not just its shell
            proc = subprocess.Popen([*self.argv, action, host], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        except OSError as exc:
            raise PowerError(f"{self.argv[0]}: {exc.strerror or exc}") from None
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            raise PowerError(f"{self.argv[0]} {action} {host}: no answer in {self.timeout}s") from None
        if proc.returncode != 0:
            last = (err.strip() or out.strip()).splitlines()[-1:] or ["no output"]
            raise PowerError(f"{self.argv[0]} {action} {host} exited {proc.returncode}: {last[0][:200]}")

    def on(self, host: str) -> None:
        self._run("on", host)

    def off(self, host: str) -> None:
        self._run("off", host)


def _split(command: str) -> list[str]:
    import shlex

    return shlex.split(command)


class LabProvider:
    """The lab's nodes: power = its slurmd. slurmctld of another release runs chrooted into the lab's view; the
    slurmd of a node is started from the host's root (as `lab up` does), so the action is run there."""

    def __init__(self, conf_dir: Path) -> None:
        self.conf_dir = conf_dir

    def _lab(self):  # type: ignore[no-untyped-def]
        from slurmkit.lab.elastic import lab_for_conf

        lab = lab_for_conf(self.conf_dir / "slurm.conf")
        if lab is None:
            raise PowerError(f"provider 'lab': {self.conf_dir} is not a lab's config dir")
        return lab

    def _act(self, action: str, host: str) -> None:
        if _in_chroot():
            # back to the host's root (pid 1's) with the same Python and slurmkit
            code = ("import sys; from pathlib import Path; from slurmkit.power.providers import LabProvider as P; "
                    "p = P(Path(sys.argv[1])); getattr(p, sys.argv[2])(sys.argv[3])")
            res = subprocess.run(["chroot", "/proc/1/root", sys.executable, "-c", code, str(self.conf_dir), action, host],
                                 capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            if res.returncode != 0:
                last = (res.stderr.strip().splitlines() or ["no output"])[-1]
                raise PowerError(last.split("PowerError: ", 1)[-1][:300])
            return
        lab = self._lab()
        if action == "on":
            fault = lab.dir / FAULT_DIR / host
            if fault.exists():
                raise PowerError(f"lab: power-on fault injected for {host} ({fault})")
            lab.start_slurmds([host], boot=True)
        else:
            lab.stop_slurmds([host])

    def on(self, host: str) -> None:
        self._act("on", host)

    def off(self, host: str) -> None:
        self._act("off", host)


def _in_chroot() -> bool:
    try:
        a, b = os.stat("/"), os.stat("/proc/1/root")
    except OSError:
        return False
    return (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino)


class RedfishProvider:
    """Power through the node's BMC (Redfish ComputerSystem.Reset), with sushy."""

    def __init__(self, power: Power) -> None:
        self.power = power

    def _system(self, host: str):  # type: ignore[no-untyped-def]
        """(sushy, the ComputerSystem, close): ``close()`` ends the Redfish session (DELETE of the session resource a
        SessionOrBasicAuth opened; BMCs allow few at once) and the HTTP connection."""
        try:
            import sushy  # type: ignore[import-untyped]
            from sushy import auth as sushy_auth
            from sushy import connector as sushy_connector
        except ImportError:
            raise PowerError("provider 'redfish' needs the sushy package: pip install 'slurmkit[redfish]'") from None
        url = self.power.bmc.replace("{host}", host)
        user = password = None
        if self.power.credentials:
            try:
                user, _, password = Path(self.power.credentials).read_text().strip().partition(":")
            except OSError as exc:
                raise PowerError(f"{self.power.credentials}: {exc.strerror}") from None
        auth = sushy_auth.SessionOrBasicAuth(username=user or None, password=password or None)
        conn = sushy_connector.Connector(url, verify=self.power.verify_tls)

        def close() -> None:
            for c in (auth, conn):
                try:
                    c.close()
                except Exception:  # noqa: BLE001,S110 - a session the BMC already dropped is closed too
                    pass

        try:
            root = sushy.Sushy(url, auth=auth, connector=conn)
            return sushy, root.get_system(f"/redfish/v1/Systems/{self.power.system.replace('{host}', host)}"), close
        except Exception as exc:  # sushy raises its own exception tree and requests' errors
            close()
            raise PowerError(f"redfish {url}: {_msg(exc)}") from None

    def _wait(self, system, want, until: float) -> bool:  # type: ignore[no-untyped-def]
        while system.power_state != want:
            if time.monotonic() > until:
                return False
            time.sleep(0.5)
            system.refresh()
        return True

    def _set(self, host: str, on: bool) -> None:
        sushy, system, close = self._system(host)
        want = sushy.PowerState.ON if on else sushy.PowerState.OFF
        start = time.monotonic()
        deadline = start + self.power.timeout
        try:
            if system.power_state == want:
                return
            if on:
                system.reset_system(sushy.ResetType.ON)
            else:
                # Redfish ComputerSystem.Reset (DSP0268 ResetType): GracefulShutdown asks the OS to shut down, ForceOff
                # cuts power. Soft first where the BMC offers it (ResetType@Redfish.AllowableValues), for half the
                # timeout; then ForceOff for the rest
                allowed = system.get_allowed_reset_system_values()
                if sushy.ResetType.GRACEFUL_SHUTDOWN in allowed:
                    system.reset_system(sushy.ResetType.GRACEFUL_SHUTDOWN)
                    if self._wait(system, want, start + self.power.timeout / 2):
                        return
                system.reset_system(sushy.ResetType.FORCE_OFF)
            if not self._wait(system, want, deadline):
                raise PowerError(f"redfish {host}: still {system.power_state} {self.power.timeout}s after the reset")
        except PowerError:
            raise
        except Exception as exc:
            raise PowerError(f"redfish {host}: {_msg(exc)}") from None
        finally:
            close()

    def on(self, host: str) -> None:
        self._set(host, True)

    def off(self, host: str) -> None:
        self._set(host, False)


class IpmiProvider:
    """Power through the node's BMC over IPMI v2.0 LAN (RMCP+) with ipmitool: ``chassis power on``; off is ``chassis
    power soft`` (IPMI 2.0 Chassis Control 05h "initiate a soft-shutdown of OS via ACPI") and, if the chassis still
    reports on after half the timeout, ``chassis power off`` (00h, power down); then ``chassis power status`` until
    it reports the wanted state. The password reaches ipmitool through IPMI_PASSWORD (``-E``), never its argv."""

    def __init__(self, power: Power, ipmitool: str = "ipmitool") -> None:
        self.power, self.ipmitool = power, ipmitool

    def _base(self, host: str) -> tuple[list[str], dict[str, str]]:
        addr = self.power.bmc.replace("{host}", host)
        name, _, port = addr.rpartition(":") if addr.count(":") == 1 else (addr, "", "")
        argv = [self.ipmitool, "-I", "lanplus", "-H", name or addr, *(["-p", port] if port else []),
                *(["-C", str(self.power.cipher_suite)] if self.power.cipher_suite else [])]
        env = dict(os.environ)
        if self.power.credentials:
            try:
                user, _, password = Path(self.power.credentials).read_text().strip().partition(":")
            except OSError as exc:
                raise PowerError(f"{self.power.credentials}: {exc.strerror}") from None
            argv += ["-U", user, "-E"]
            env["IPMI_PASSWORD"] = password
        return argv, env

    def _chassis(self, host: str, *args: str, timeout: float) -> str:
        argv, env = self._base(host)
        try:
            r = subprocess.run([*argv, "chassis", "power", *args], capture_output=True, text=True, env=env,
                               timeout=max(1.0, timeout), stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise PowerError(f"provider 'ipmi' needs {self.ipmitool} (apt-get install ipmitool)") from None
        except subprocess.TimeoutExpired:
            raise PowerError(f"ipmi {host}: chassis power {' '.join(args)}: no answer in {timeout:.0f}s") from None
        if r.returncode != 0:
            last = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise PowerError(f"ipmi {host} ({self.power.bmc.replace('{host}', host)}): chassis power "
                             f"{' '.join(args)} exited {r.returncode}: {last[0][:200]}")
        return r.stdout

    def status(self, host: str, timeout: float | None = None) -> str:
        """"on" or "off": ipmitool prints "Chassis Power is on|off" (ipmitool lib/ipmi_chassis.c
        ipmi_chassis_print_power_status)."""
        out = self._chassis(host, "status", timeout=timeout or self.power.timeout)
        for word in ("on", "off"):
            if f"Chassis Power is {word}" in out:
                return word
        raise PowerError(f"ipmi {host}: unexpected chassis power status {out.strip()[:100]!r}")

    def _wait(self, host: str, want: str, until: float) -> bool:
        while self.status(host, until - time.monotonic()) != want:
            if time.monotonic() > until:
                return False
            time.sleep(0.5)
        return True

    def on(self, host: str) -> None:
        deadline = time.monotonic() + self.power.timeout
        if self.status(host) == "on":
            return
        self._chassis(host, "on", timeout=deadline - time.monotonic())
        if not self._wait(host, "on", deadline):
            raise PowerError(f"ipmi {host}: still off {self.power.timeout}s after chassis power on")

    def off(self, host: str) -> None:
        start = time.monotonic()
        deadline = start + self.power.timeout
        if self.status(host) == "off":
            return
        self._chassis(host, "soft", timeout=deadline - time.monotonic())
        if self._wait(host, "off", start + self.power.timeout / 2):
            return
        self._chassis(host, "off", timeout=deadline - time.monotonic())
        if not self._wait(host, "off", deadline):
            raise PowerError(f"ipmi {host}: still on {self.power.timeout}s after chassis power off")


def _msg(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def provider_for(power: Power, conf_dir: Path) -> Provider:
    if power.provider == "lab":
        return LabProvider(conf_dir)
    if power.provider == "command":
        return CommandProvider(power)
    if power.provider == "ipmi":
        return IpmiProvider(power)
    return RedfishProvider(power)
