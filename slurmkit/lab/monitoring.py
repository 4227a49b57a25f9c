"""`slurmkit lab up --monitoring`: the monitoring stack a site runs, on the lab's ports.

Debian's ``prometheus`` and ``prometheus-node-exporter`` binaries run as lab daemons (their packaged services are
never used): one node_exporter per lab node, on that node's textfile directory (DIR/textfile/<node>, where the
lab's hooks write through $SLURMKIT_TEXTFILE_DIR), the slurmkit exporter on the lab's Slurm, and one Prometheus
loading the prometheus.yml and alert rules `slurmkit monitor generate` makes from the lab's inventory (with the
lab's node_exporter ports as targets). Scrape and evaluation intervals are short (``SCRAPE_S``) so a test sees an
alert within seconds.

Debian's ``prometheus-alertmanager`` (where installed) runs on the alertmanager.yml `monitor generate` writes, with
the lab's short route timings, and sends each severity's notifications to ``webhook_port`` (nothing listens there
unless a test does: tests/integration/test_monitor_alerts_lab.py).

Ports: Prometheus on ``port``, the exporter on ``port + 1``, nodeI's node_exporter on ``port + 1 + I``, Alertmanager
on ``port + 2 + N`` (N nodes the lab has room for, spares included), the webhook on ``port + 3 + N``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmkit.errors import LabError

if TYPE_CHECKING:
    from slurmkit.lab.base import LabBase

PROMETHEUS = "prometheus"
NODE_EXPORTER = "prometheus-node-exporter"  # Debian's name for node_exporter
ALERTMANAGER = "prometheus-alertmanager"  # Debian's name for alertmanager
APT = "prometheus prometheus-node-exporter prometheus-alertmanager"
SCRAPE_S = 2
# the lab's thresholds where the site defaults would make a test wait half an hour (quota_pending_for_s 1800) or
# fire on a busy 2-core host (a health run of 4 nodes' hooks takes seconds there)
LAB_THRESHOLDS = {"hook_slow_s": 60, "quota_pending_for_s": 5}
PIDFILE_EXPORTER = "slurmkit_exporter"


def binaries_missing() -> list[str]:
    return [b for b in (PROMETHEUS, NODE_EXPORTER) if shutil.which(b) is None]


def alertmanager_port(lab: LabBase) -> int:
    return lab.spec.monitoring_port_resolved + 2 + len(lab.spec.all_node_names)


def webhook_port(lab: LabBase) -> int:
    """Where the lab's Alertmanager posts notifications (a test's receiver listens here)."""
    return alertmanager_port(lab) + 1


def alertmanager_url(lab: LabBase) -> str:
    return f"http://127.0.0.1:{alertmanager_port(lab)}"


def ports(lab: LabBase) -> list[int]:
    p = lab.spec.monitoring_port_resolved
    am = [alertmanager_port(lab)] if shutil.which(ALERTMANAGER) else []
    return [p, p + 1, *(p + 1 + lab.spec.node_index(n) for n in lab.spec.node_names), *am]


def url(lab: LabBase) -> str:
    return f"http://127.0.0.1:{lab.spec.monitoring_port_resolved}"


def inventory_section(lab: LabBase) -> dict[str, Any]:
    """The lab inventory's ``monitoring:``: the lab's exporter and intervals (node_exporter ports are per node here,
    so they go to ``monitor generate`` as targets, not as one port)."""
    hook = f"http://127.0.0.1:{webhook_port(lab)}"
    return {"exporter": [f"127.0.0.1:{lab.spec.monitoring_port_resolved + 1}"], "scrape_interval_s": SCRAPE_S,
            "alertmanager": [f"127.0.0.1:{alertmanager_port(lab)}"],
            "alert_webhooks": {sev: f"{hook}/{sev}" for sev in ("critical", "warning", "info")}, **LAB_THRESHOLDS}


# a notification within seconds of an alert and of its resolution (Alertmanager's group_wait 30s and group_interval
# 5m would hold the lab's tests for minutes)
LAB_TIMING = {"group_wait": "1s", "group_interval": "2s", "repeat_interval": "1h", "resolve_timeout": "1m"}


def mon_dir(lab: LabBase) -> Path:
    return lab.dir / "monitoring"


def write_config(lab: LabBase) -> dict[str, str]:
    """prometheus.yml and the alert rules from the lab's inventory, as `slurmkit monitor generate` writes them."""
    from slurmkit.model.load import load_cluster
    from slurmkit.monitor.generate import RULES_FILE, Timing, alertmanager_yaml, prometheus_yaml, rules_yaml

    cluster = load_cluster(str(lab.etc / "slurmkit.yaml"))
    base = lab.spec.monitoring_port_resolved
    targets = {n: f"127.0.0.1:{base + 1 + lab.spec.node_index(n)}" for n in lab.spec.node_names}
    files = {"prometheus.yml": prometheus_yaml(cluster, RULES_FILE, targets), RULES_FILE: rules_yaml(cluster),
             "alertmanager.yml": alertmanager_yaml(cluster, Timing(**LAB_TIMING))}
    d = mon_dir(lab)
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return files


def _spawn(lab: LabBase, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
    log = open(lab.dir / "log" / f"{name}.log", "ab")  # noqa: SIM115 - handed to the daemon
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            env=env, cwd=str(lab.dir))
    log.close()
    (lab.run_dir / f"{name}.pid").write_text(str(proc.pid))


def start(lab: LabBase, timeout: float = 60.0) -> None:
    """Write the config, start node_exporters, the exporter and Prometheus; wait until every target is up."""
    s = lab.spec
    base = s.monitoring_port_resolved
    write_config(lab)
    for n in s.node_names:
        tdir = lab.dir / "textfile" / n
        tdir.mkdir(parents=True, exist_ok=True)
        # node_exporter 1.5: --collector.disable-defaults then --collector.textfile: only the hooks' files (and
        # node_exporter's own process series), not the host's CPUs, disks and NICs once per virtual node
        _spawn(lab, f"node_exporter-{n}", [shutil.which(NODE_EXPORTER) or NODE_EXPORTER,
                                            f"--web.listen-address=127.0.0.1:{base + 1 + s.node_index(n)}",
                                            "--collector.disable-defaults", "--collector.textfile",
                                            f"--collector.textfile.directory={tdir}"])
    env = {**os.environ, **lab.env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # --scrape-wait below Prometheus' scrape_timeout, which is the lab's 2 s scrape interval (it may not exceed it)
    _spawn(lab, PIDFILE_EXPORTER, [sys.executable, "-m", "slurmkit.cli.main", "exporter",
                                   str(lab.etc / "slurmkit.yaml"), "--listen", f"127.0.0.1:{base + 1}",
                                   "--cache", "1", "--scrape-wait", "1"], env)
    d = mon_dir(lab)
    if shutil.which(ALERTMANAGER):
        # --cluster.listen-address "": no gossip port (its default 0.0.0.0:9094 on every interface); one instance
        _spawn(lab, "alertmanager", [shutil.which(ALERTMANAGER) or ALERTMANAGER,
                                     f"--config.file={d / 'alertmanager.yml'}", f"--storage.path={d / 'am-data'}",
                                     f"--web.listen-address=127.0.0.1:{alertmanager_port(lab)}",
                                     "--cluster.listen-address="])
    _spawn(lab, "prometheus", [shutil.which(PROMETHEUS) or PROMETHEUS, f"--config.file={d / 'prometheus.yml'}",
                               f"--storage.tsdb.path={d / 'data'}", f"--web.listen-address=127.0.0.1:{base}",
                               "--storage.tsdb.retention.time=1d"])
    want = 1 + len(s.node_names)
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            active = query_api(lab, "/api/v1/targets")["activeTargets"]
            last = {t["scrapeUrl"]: t["health"] + (f" ({t['lastError']})" if t.get("lastError") else "")
                    for t in active}
            if len(active) == want and all(t["health"] == "up" for t in active):
                return
        except (OSError, ValueError, KeyError) as exc:
            last = str(exc)
        time.sleep(0.2)
    raise LabError(f"--monitoring: Prometheus targets not all up after {timeout:g}s: {last}; see {lab.dir / 'log'}")


def query_api(lab: LabBase, path: str, timeout: float = 5.0) -> Any:
    """GET the lab Prometheus's HTTP API; the ``data`` of a success, LabError otherwise."""
    with urllib.request.urlopen(url(lab) + path, timeout=timeout) as r:  # noqa: S310 - our own localhost URL
        body = json.loads(r.read())
    if body.get("status") != "success":
        raise LabError(f"Prometheus {path}: {body.get('error', body)}")
    return body["data"]
