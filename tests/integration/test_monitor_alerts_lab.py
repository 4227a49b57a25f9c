"""Issue 35 item 2 on a real Slurm, a real Prometheus and a real Alertmanager (Debian's prometheus 2.42 and
prometheus-alertmanager 0.25 as lab daemons, on the prometheus.yml, rules and alertmanager.yml `slurmkit monitor
generate` writes, with the lab's short route timings): a fault injected through the fake NVML reaches the webhook
(a tiny HTTP server of this test, on the lab's webhook port) as exactly one notification, with the GPU's node,
minor, bus id, UUID and serial, Slurm's drain reason and the alert's runbook URL; after the fix exactly one
resolved notification follows. The drained alert the same fault raises is inhibited by the GPU's page. And the
generated inhibition rules, fed alerts through Alertmanager's own API: a controller outage pages once, not once per
node; a down node pages once, not once per GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from slurmkit.lab import Lab
from slurmkit.lab.monitoring import SCRAPE_S, alertmanager_url, mon_dir, query_api, webhook_port
from tests.conftest import _base, needs
from tests.integration.test_monitor_lab import edit_nvml, quiet, wait_for

pytestmark = [pytest.mark.lab, needs(shutil.which("prometheus-alertmanager") is not None,
                                     "prometheus-alertmanager (Debian package) not installed")]

INTERVAL = 5  # HealthCheckInterval
NODE = "node2"
GPU = 1
SETTLE = 4 * 2 + 3 * SCRAPE_S  # group_interval 2s four times over, and three evaluations: anything late shows


class Hook:
    """The webhook receiver: every notification Alertmanager posts, in order."""

    def __init__(self, port: int) -> None:
        self.got: list[dict] = []
        hook = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.got.append({"path": self.path, **json.loads(body)})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a: object) -> None:
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", port), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def alerts(self, since: int, status: str | None = None) -> list[tuple[str, dict]]:
        """(receiver, alert) for each alert of each notification from index ``since``."""
        return [(n["receiver"], a) for n in self.got[since:] for a in n["alerts"]
                if status is None or a["status"] == status]


@pytest.fixture(scope="module")
def alab(make_lab):
    lab = make_lab(nodes=2, gpus_per_node=4, nodes_per_leaf=2, hooks=True, healthcheck_interval=INTERVAL,
                   monitoring=True, monitoring_port=_base() + 600)
    hook = Hook(webhook_port(lab))
    am = lab.running_pids().get("alertmanager")
    assert am, lab.running_pids()
    yield lab, hook
    hook.srv.shutdown()
    hook.srv.server_close()
    lab.down()  # `lab down` stops the Alertmanager too (its pid file names prometheus-alertmanager's process)
    from slurmkit.lab.procs import alive, is_program

    assert not (alive(am) and is_program(am, "alertmanager")), f"alertmanager pid {am} outlived lab down"


def am_api(lab: Lab, path: str, data: object = None) -> object:
    req = urllib.request.Request(alertmanager_url(lab) + path, method="POST" if data is not None else "GET",
                                 data=json.dumps(data).encode() if data is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - the lab's own localhost
        body = r.read()
    return json.loads(body) if body else None


def dev(lab: Lab) -> dict:
    return json.loads((Path(lab.dir) / "fake-nvml" / f"{NODE}.json").read_text())["devices"][GPU]


def cluster_name(lab: Lab) -> str:
    from slurmkit.model.load import load_cluster

    return load_cluster(str(Path(lab.dir) / "etc" / "slurmkit.yaml")).name


def test_generated_alertmanager_yml_passes_amtool_and_prometheus_sends_to_it(alab):
    lab, _hook = alab
    r = subprocess.run(["amtool", "check-config", str(mon_dir(lab) / "alertmanager.yml")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "4 inhibit rules" in r.stdout, r.stdout + r.stderr
    active = wait_for(lambda: query_api(lab, "/api/v1/alertmanagers")["activeAlertmanagers"], 30,
                      "Prometheus to discover the Alertmanager")
    assert [a["url"] for a in active] == [f"{alertmanager_url(lab)}/api/v2/alerts"]
    status = am_api(lab, "/api/v2/status")
    assert status["cluster"]["status"] == "disabled"  # one lab instance, no gossip port  # type: ignore[index]


def _one_fault(lab: Lab, hook: Hook, alertname: str, inject, fix) -> None:
    quiet(lab)
    mark = len(hook.got)
    inject()
    wait_for(lambda: hook.alerts(mark, "firing"), 90, f"a notification of {alertname}",
             lambda: json.dumps(hook.got[mark:])[:3000])
    time.sleep(SETTLE)
    firing = hook.alerts(mark, "firing")
    assert [(r, a["labels"]["alertname"]) for r, a in hook.alerts(mark)] == [("slurmkit-critical", alertname)] \
        and len(hook.got) == mark + 1, json.dumps(hook.got[mark:], indent=1)[:4000]
    a = firing[0][1]
    d, lb, ann = dev(lab), a["labels"], a["annotations"]
    assert (lb["node"], lb["minor"], lb["pci_bus_id"], lb["uuid"], lb["serial"]) == \
           (NODE, str(d["minor"]), d["pci_bus_id"], d["uuid"], d.get("serial", "")), lb
    assert lb["gpu"] == f"nvidia{d['minor']}@{d['pci_bus_id'].lower().split(':', 1)[1]}"
    assert lb["cluster"] == cluster_name(lab) and lb["severity"] == "critical"
    assert ann["runbook_url"] == f"docs/runbooks.md#{alertname.lower()}"
    # Slurm's reason for the drain the fault caused, as `scontrol show node` has it
    reason = subprocess.run(["scontrol", "show", "node", NODE], capture_output=True, text=True,
                            env={**os.environ, **lab.env}).stdout
    assert ann["drain_reason"].startswith("slurmkit:") and ann["drain_reason"] in reason, (ann, reason)
    mark2 = len(hook.got)
    fix()
    wait_for(lambda: hook.alerts(mark2, "resolved"), 120, f"{alertname} resolved",
             lambda: json.dumps(hook.got[mark2:])[:3000])
    quiet(lab)  # the node resumed after its passes: nothing fires
    time.sleep(SETTLE)
    after = hook.alerts(mark2)
    assert [(a["status"], a["labels"]["alertname"]) for _r, a in after] == [("resolved", alertname)] \
        and len(hook.got) == mark2 + 1, json.dumps(hook.got[mark2:], indent=1)[:4000]


def test_xid79_pages_once_naming_the_board_and_resolves_once(alab):
    lab, hook = alab
    bus = dev(lab)["pci_bus_id"].split(":", 1)[1][:2]

    def inject(state):
        state["kmsg"] = [*state.get("kmsg", []), [1000 + len(state.get("kmsg", [])),
                                                  f"NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', "
                                                  "name=<unknown>, GPU has fallen off the bus."]]

    def fix():
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "check", "--clear-xid", "--node", NODE,
                            "--state-dir", str(Path(lab.dir) / "hookstate")], capture_output=True, text=True)
        assert r.returncode == 0 and "cleared 1" in r.stdout, r.stdout + r.stderr

    _one_fault(lab, hook, "SlurmkitGpuXidCritical", lambda: edit_nvml(lab, NODE, inject), fix)


def test_uncorrectable_ecc_pages_once_and_resolves_once(alab):
    lab, hook = alab

    def set_ecc(n):
        return lambda: edit_nvml(lab, NODE, lambda s: s["devices"][GPU].update(ecc_volatile_uncorrected=n))

    _one_fault(lab, hook, "SlurmkitGpuEccUncorrectable", set_ecc(2), set_ecc(0))


def test_lost_gpu_pages_once_naming_the_missing_board_and_resolves_once(alab):
    lab, hook = alab

    def lost(on):
        def fn(s):
            if on:
                s["devices"][GPU]["lost"] = True
            else:
                s["devices"][GPU].pop("lost", None)
        return lambda: edit_nvml(lab, NODE, fn)

    _one_fault(lab, hook, "SlurmkitGpuMissing", lost(True), lost(False))


def _post(lab: Lab, alerts: list[dict[str, str]], resolve: bool = False) -> None:
    now = datetime.now(timezone.utc)
    ends = now - timedelta(seconds=1) if resolve else now + timedelta(minutes=10)
    am_api(lab, "/api/v2/alerts", [{"labels": a, "annotations": {"summary": "test"},
                                    "startsAt": (now - timedelta(minutes=1)).isoformat(),
                                    "endsAt": ends.isoformat()} for a in alerts])


@pytest.mark.parametrize("source, noise", [
    # slurmctld gone: the exporter's per-node view and every node's health hook (Slurm state) would page per node
    ({"alertname": "SlurmkitSlurmctldUnreachable", "severity": "critical", "instance": "ctl"},
     [{"alertname": n, "severity": s, "node": f"node{i}"} for i in (1, 2)
      for n, s in (("SlurmkitNodeDownInSlurm", "critical"), ("SlurmkitHealthHookFailing", "warning"),
                   ("SlurmkitNodeDrainedByHealth", "warning"))]),
    # a node gone: Slurm's view of it and its GPUs
    ({"alertname": "SlurmkitNodeDown", "severity": "critical", "node": "node1"},
     [{"alertname": "SlurmkitNodeDownInSlurm", "severity": "critical", "node": "node1"},
      *({"alertname": "SlurmkitGpuXidCritical", "severity": "critical", "node": "node1", "gpu": f"nvidia{g}",
         "xid": "79"} for g in range(4))]),
    # Slurm marks the node DOWN (slurmd dead, node_exporter answers): its hooks go stale, its GPUs' alerts stand
    ({"alertname": "SlurmkitNodeDownInSlurm", "severity": "critical", "node": "node1"},
     [{"alertname": "SlurmkitHealthHookStale", "severity": "warning", "node": "node1", "hook": "health"},
      *({"alertname": "SlurmkitGpuNvlinkDown", "severity": "critical", "node": "node1", "gpu": f"nvidia{g}"}
        for g in range(4))]),
], ids=["controller-outage", "node-down", "node-down-in-slurm"])
def test_one_outage_pages_once(alab, source, noise, request):
    lab, hook = alab
    quiet(lab)
    c = cluster_name(lab)
    case = request.node.callspec.id
    every = [{**a, "cluster": c, "test": case} for a in [source, *noise]]
    mark = len(hook.got)

    def ours(status: str | None = None) -> list[tuple[str, str]]:
        """This case's alerts in the notifications since ``mark`` (a previous case's late ones are not its)."""
        return [(a["status"], a["labels"]["alertname"]) for _r, a in hook.alerts(mark, status)
                if a["labels"].get("test") == case]

    _post(lab, every[:1])
    wait_for(lambda: ours("firing"), 30, "the source's notification")
    _post(lab, every)  # the noise arrives while the outage stands
    time.sleep(SETTLE)
    try:
        assert ours() == [("firing", source["alertname"])], json.dumps(hook.got[mark:], indent=1)[:4000]
        # the inhibited alerts are in Alertmanager, marked so (not lost)
        held = am_api(lab, "/api/v2/alerts?filter=" + urllib.request.quote(f'test="{case}"'))
        assert sorted(a["status"]["state"] for a in held) == ["active"] + ["suppressed"] * len(noise)  # type: ignore[union-attr]
    finally:
        _post(lab, every[1:], resolve=True)  # the noise ends first: never uninhibited while it still fires
        _post(lab, every[:1], resolve=True)
    wait_for(lambda: ours("resolved"), 30, "the source's resolution")
    time.sleep(SETTLE)
    assert ours() == [("firing", source["alertname"]), ("resolved", source["alertname"])], \
        json.dumps(hook.got[mark:], indent=1)[:4000]


def test_hook_series_carry_node_once(alab):
    """prometheus.yml drops the exported_node copy Prometheus makes of the textfiles' node label (issue 35 item 6)."""
    lab, _hook = alab
    r = query_api(lab, "/api/v1/query?query=" + urllib.request.quote('count({exported_node!=""})'))["result"]
    assert r == []
    r = query_api(lab, "/api/v1/query?query=" + urllib.request.quote("count by (node) (slurmkit_gpu_info)"))["result"]
    assert sorted((x["metric"]["node"], x["value"][1]) for x in r) == [("node1", "4"), ("node2", "4")]


def _exporter_scrape(lab: Lab) -> tuple[float, str]:
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{lab.spec.monitoring_port_resolved + 1}/metrics",
                                timeout=30) as r:  # noqa: S310
        return time.monotonic() - t0, r.read().decode()


def test_slurmctld_hung_the_exporter_answers_with_its_last_answer_and_it_pages_once(alab):
    """slurmctld stopped (SIGSTOP: it hangs, connections wait): the exporter still answers each scrape within
    --scrape-wait with the last answer, exporter_up 0 and its age; Prometheus keeps the target up;
    SlurmkitSlurmctldUnreachable pages once after its 2 minutes and every per-node alert the hang causes is
    inhibited; SIGCONT: it resolves once."""
    import signal

    lab, hook = alab
    quiet(lab)
    pid = lab.running_pids()["slurmctld"]
    mark = len(hook.got)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(3)
        took, text = _exporter_scrape(lab)
        took2, text2 = _exporter_scrape(lab)
        assert max(took, took2) < 8, (took, took2)  # --scrape-wait 5 s, not the hung queries' 10 s timeouts
        assert "slurmkit_exporter_up 0" in text2 and 'slurmkit_node_state{node="node1"' in text2, text2[:2000]
        age = [float(x.split()[-1]) for x in text2.splitlines()
               if x.startswith("slurmkit_exporter_last_success_age_seconds ")]
        assert age and age[0] > 0, age
        wait_for(lambda: hook.alerts(mark, "firing"), 240, "the slurmctld page",
                 lambda: json.dumps(hook.got[mark:])[:3000] + str(query_api(lab, "/api/v1/alerts")))
        up = query_api(lab, "/api/v1/query?query=" + urllib.request.quote('up{job="slurmkit"}'))["result"]
        assert [x["value"][1] for x in up] == ["1"]  # never a failed scrape: no SlurmkitExporterDown
        time.sleep(SETTLE)
        got = [(a["status"], a["labels"]["alertname"]) for _r, a in hook.alerts(mark)]
        assert got == [("firing", "SlurmkitSlurmctldUnreachable")] and len(hook.got) == mark + 1, \
            json.dumps(hook.got[mark:], indent=1)[:4000]
    finally:
        os.kill(pid, signal.SIGCONT)
    mark2 = len(hook.got)
    wait_for(lambda: hook.alerts(mark2, "resolved"), 120, "the slurmctld page resolved",
             lambda: json.dumps(hook.got[mark2:])[:3000])
    quiet(lab, timeout=240)
    firing_after = [(a["labels"]["alertname"], a["labels"].get("node")) for _r, a in hook.alerts(mark2, "firing")]
    assert firing_after == [], json.dumps(hook.got[mark2:], indent=1)[:4000]
