"""Issue 22 on a real Slurm and a real Prometheus: `slurmkit lab up --monitoring` (Debian's prometheus 2.42 and
prometheus-node-exporter 1.5 as lab daemons, one node_exporter per node on its textfile dir, `slurmkit exporter`, the
generated rules loaded).

- A fault injected through the fake NVML on one node (XID 79; uncorrectable ECC; a GPU lost) fires exactly the
  matching alerts for exactly that node within three scrape intervals of the health hook's textfile showing it, and
  they resolve after the fix.
- A tenant over its GPU quota with a pending GPU job shows in the exporter's series and fires its alert.
- Every panel query of every shipped dashboard returns at least one series.

One lab for the module (2 nodes x 4 GPUs, hooks with HealthCheckInterval=5, accounting for the tenants); the tests
run in file order and each leaves the lab as it found it (no alert firing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest

from slurmkit.lab import Lab
from slurmkit.lab.monitoring import SCRAPE_S, query_api
from tests.conftest import _base, lab_run

pytestmark = pytest.mark.lab

INTERVAL = 5  # HealthCheckInterval
NODE = "node2"  # the node every fault goes to; node1 must stay quiet
GPU = 1


@pytest.fixture(scope="module")
def mlab(make_lab):
    # Prometheus on base+500 (the exporter +501, node_exporters +502..): clear of this run's slurmd ports
    return make_lab(nodes=2, gpus_per_node=4, nodes_per_leaf=2, hooks=True, healthcheck_interval=INTERVAL,
                    accounting=True, monitoring=True, monitoring_port=_base() + 500)


def firing(lab: Lab) -> dict[tuple[str, str], dict]:
    """(alertname, node or account) -> the alert, for every firing alert."""
    out = {}
    for a in query_api(lab, "/api/v1/alerts")["alerts"]:
        if a["state"] == "firing":
            lb = a["labels"]
            out[(lb["alertname"], lb.get("node") or lb.get("account") or lb.get("instance", ""))] = a
    return out


def wait_for(pred, timeout: float, what: str, dump=lambda: ""):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = pred()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; last={last!r}\n{dump()}")


def edit_nvml(lab: Lab, node: str, fn) -> None:
    p = Path(lab.dir) / "fake-nvml" / f"{node}.json"
    state = json.loads(p.read_text())
    fn(state)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, p)  # a hook reading mid-write sees the old or the new state


def textfile(lab: Lab, node: str) -> Path:
    return Path(lab.dir) / "textfile" / node / "slurmkit_health_health.prom"


def series_written(lab: Lab, node: str, lines: dict[str, str], timeout: float) -> dict[str, float]:
    """Poll the node's health textfile; for each name, the mtime of the first version holding its line."""
    seen: dict[str, float] = {}
    end = time.monotonic() + timeout
    while time.monotonic() < end and len(seen) < len(lines):
        p = textfile(lab, node)
        try:
            mtime, text = p.stat().st_mtime, p.read_text()
        except OSError:
            continue
        for name, line in lines.items():
            if name not in seen and line in text.splitlines():
                seen[name] = mtime
        time.sleep(0.05)
    missing = set(lines) - set(seen)
    assert not missing, f"{node}'s health textfile never showed {[lines[m] for m in missing]}"
    return seen


def active_at(alert: dict) -> float:
    t = alert["activeAt"].rstrip("Z")
    head, _, frac = t.partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))


def drained_nodes(lab: Lab) -> list[str]:
    r = query_api(lab, "/api/v1/query?" + urlencode({"query": "slurmkit_node_drained == 1"}))["result"]
    return sorted(x["metric"]["node"] for x in r)


def quiet(lab: Lab, timeout: float = 90) -> None:
    """Nothing firing and no node drained: the previous fault's drain is resumed after resume_after_passes health
    runs (SlurmkitNodeDrainedByHealth is silent for that window after a GPU fault: no alert alone says it is over)."""
    wait_for(lambda: not firing(lab) and not drained_nodes(lab), timeout, "no alert firing, no node drained",
             lambda: str(list(firing(lab))) + " drained: " + str(drained_nodes(lab)))


def check_fault(lab: Lab, inject, fix, signals: dict[str, str]) -> None:
    """Inject on NODE; the alerts named in ``signals`` (alertname -> the textfile line that should fire it) and only
    they fire, for NODE only, each within 3 scrape intervals of the textfile holding its line; after ``fix`` none
    fires. Every fault here drains NODE, and SlurmkitNodeDrainedByHealth stays quiet: the GPU's critical alert
    says why (generate.py)."""
    quiet(lab)
    inject()
    series_written(lab, NODE, {"drained": f'slurmkit_node_drained{{node="{NODE}"}} 1'}, timeout=6 * INTERVAL)
    written = series_written(lab, NODE, signals, timeout=6 * INTERVAL)
    want = {(a, NODE) for a in signals}
    def all_firing() -> dict | None:
        f = firing(lab)
        return f if want <= set(f) else None

    got = wait_for(all_firing, 6 * INTERVAL, f"{sorted(want)} firing", lambda: str(list(firing(lab))))
    for name, t in written.items():
        delay = active_at(got[(name, NODE)]) - t
        assert delay <= 3 * SCRAPE_S, f"{name} fired {delay:.1f}s after the textfile showed it (> 3 x {SCRAPE_S}s)"
    # exactly these: nothing else, on no other node, also a few evaluations later
    time.sleep(2 * SCRAPE_S)
    assert set(firing(lab)) == want, sorted(firing(lab))
    fix()
    quiet(lab)


def test_lab_prometheus_scrapes_every_node_and_the_exporter(mlab):
    env = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "lab", "env", "--dir", mlab.dir],
                         capture_output=True, text=True, check=True).stdout
    assert f"export SLURMKIT_PROMETHEUS_URL=http://127.0.0.1:{_base() + 500}" in env
    targets = query_api(mlab, "/api/v1/targets")["activeTargets"]
    assert sorted((t["labels"]["job"], t["labels"].get("node", "")) for t in targets) == [
        ("node", "node1"), ("node", "node2"), ("slurmkit", "")]
    rules = query_api(mlab, "/api/v1/rules")["groups"][0]["rules"]
    assert any(r["name"] == "SlurmkitGpuXidCritical" for r in rules)
    r = query_api(mlab, "/api/v1/query?query=slurmkit_node_gpus_expected")["result"]
    assert sorted((x["metric"]["node"], x["value"][1]) for x in r) == [("node1", "4"), ("node2", "4")]


def test_xid79_fires_the_xid_alert_for_that_node_and_clear_xid_resolves_it(mlab):
    bus = f"{0x18 + 0x10 * GPU:02x}"

    def inject(state):
        state["kmsg"] = [*state.get("kmsg", []), [1000 + len(state.get("kmsg", [])),
                                                  f"NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', "
                                                  "name=<unknown>, GPU has fallen off the bus."]]

    def fix():
        # what an admin does after resetting the GPU: forget the sticky XID; the health check then resumes the node
        r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "check", "--clear-xid", "--node", NODE,
                            "--state-dir", str(Path(mlab.dir) / "hookstate")], capture_output=True, text=True)
        assert r.returncode == 0 and "cleared 1" in r.stdout, r.stdout + r.stderr

    check_fault(mlab, lambda: edit_nvml(mlab, NODE, inject), fix, {
        "SlurmkitGpuXidCritical": f'slurmkit_gpu_xid_sticky{{node="{NODE}",gpu="{_gpu_name(mlab)}",xid="79"}} 1',
    })


def _gpu_dev(lab: Lab) -> dict:
    return json.loads((Path(lab.dir) / "fake-nvml" / f"{NODE}.json").read_text())["devices"][GPU]


def _gpu_name(lab: Lab) -> str:
    """The GPU as drain reasons and every per-GPU series name it: nvidia<minor>@<bus> (never NVML's index)."""
    dev = _gpu_dev(lab)
    return f"nvidia{dev['minor']}@{dev['pci_bus_id'].lower().split(':', 1)[1]}"


def _gpu_prefix(lab: Lab) -> str:
    dev = _gpu_dev(lab)
    return (f'node="{NODE}",gpu="{_gpu_name(lab)}",minor="{dev["minor"]}",uuid="{dev["uuid"]}",'
            f'pci_bus_id="{dev["pci_bus_id"]}",serial="{dev.get("serial", "")}",model="{dev["name"]}"')


def test_uncorrectable_ecc_fires_the_ecc_alert_and_resolves_after_the_fix(mlab):
    def set_ecc(n):
        return lambda: edit_nvml(mlab, NODE, lambda s: s["devices"][GPU].update(ecc_volatile_uncorrected=n))

    check_fault(mlab, set_ecc(2), set_ecc(0), {
        "SlurmkitGpuEccUncorrectable": f'slurmkit_gpu_ecc_errors_total{{{_gpu_prefix(mlab)},type="uncorrected",'
                                       'location="all",counter="volatile"} 2',
    })


def test_lost_gpu_fires_the_missing_alert_and_resolves_when_it_is_back(mlab):
    def lost(on):
        def fn(s):
            if on:
                s["devices"][GPU]["lost"] = True
            else:
                s["devices"][GPU].pop("lost", None)
        return lambda: edit_nvml(mlab, NODE, fn)

    check_fault(mlab, lost(True), lost(False), {
        "SlurmkitGpuMissing": f'slurmkit_node_gpus{{node="{NODE}"}} 3',
    })


def test_slurmd_killed_fires_the_slurm_node_down_alert_and_resolves_when_it_is_back(mlab):
    """slurmd stopped on NODE while its node_exporter answers: slurmctld marks it NOT_RESPONDING, then DOWN after
    SlurmdTimeout (60 s in the lab); the exporter's slurmkit_node_state carries it and SlurmkitNodeDownInSlurm fires
    for NODE only (issue 35: the node-down rule watched node_exporter, and nothing fired). Back: it resolves."""
    quiet(mlab)
    mlab.stop_slurmds([NODE])
    try:
        got = wait_for(lambda: ("SlurmkitNodeDownInSlurm", NODE) in firing(mlab) and firing(mlab), 330,
                       "SlurmkitNodeDownInSlurm firing", lambda: str(list(firing(mlab))) + _exporter(mlab)[-2000:])
        assert ("SlurmkitNodeDown", NODE) not in got  # node_exporter still answers: only Slurm knows
        assert not {k for k in got if k[1] != NODE}, sorted(got)
        r = query_api(mlab, "/api/v1/query?" + urlencode({"query": f'slurmkit_node_state{{node="{NODE}"}}'}))["result"]
        assert r and "NOT_RESPONDING" in r[0]["metric"]["flags"], r
    finally:
        mlab.start_slurmds([NODE])  # ReturnToService (default 1): the DOWN node returns once its slurmd registers
    quiet(mlab, timeout=180)


def _as(lab: Lab, user: str, *args: str) -> str:
    r = lab_run(lab, ["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null",
                      "-e", "/dev/null", *args, "--wrap", "sleep 300"])
    return r.stdout.strip().split(";")[0]


def _exporter(lab: Lab) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{_base() + 501}/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_tenant_over_quota_shows_in_the_exporter_and_fires_its_alert_and_every_panel_has_data(mlab):
    """team-a may hold 4 GPUs: daemon's 4 run, bin's 2 pend with AssocGrpGRES. Every dashboard panel is queried in
    that state (a running and a pending GPU job, the XID counter of the first test)."""
    from slurmkit.model.load import load_cluster
    from slurmkit.monitor.generate import dashboard_panels

    quiet(mlab)
    held = _as(mlab, "daemon", "-n1", "--gres=gpu:4")
    over = _as(mlab, "bin", "-n1", "--gres=gpu:2")
    try:
        def reason() -> str:
            return lab_run(mlab, ["squeue", "-h", "-j", over, "-o", "%r"]).stdout.strip()

        wait_for(lambda: reason() == "AssocGrpGRES", 60, "AssocGrpGRES", reason)
        def pending_seen() -> str | None:
            t = _exporter(mlab)
            return t if 'slurmkit_pending_gpu_jobs{account="team-a",reason="AssocGrpGRES"} 1' in t else None

        text = wait_for(pending_seen, 30, "the exporter's pending series", lambda: _exporter(mlab))
        assert 'slurmkit_job_gpus{account="team-a",qos="normal",user="bin",state="pending"} 2' in text
        assert 'slurmkit_job_gpus{account="team-a",qos="normal",user="daemon",state="running"} 4' in text
        assert 'slurmkit_account_gpu_quota{account="team-a"} 4' in text
        # the reserve series against Slurm's own view (sinfo's compact state): per group, its idle or idle~ nodes
        # (a node held by daemon's job is not one), and the plan of 15 % rounded up
        inv = load_cluster(str(Path(mlab.dir) / "etc" / "slurmkit.yaml"))

        def reserve_matches() -> str | None:
            states = dict(line.split() for line in lab_run(mlab, ["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split("\n")
                          if line.strip())
            t = _exporter(mlab)
            for g in inv.node_groups:
                spare = sum(1 for h in g.hostnames if states.get(h) in ("idle", "idle~"))
                planned = -(-15 * len(g.hostnames) // 100)
                if (f'slurmkit_reserve_spare_nodes{{group="{g.name}"}} {spare}' not in t
                        or f'slurmkit_reserve_planned_nodes{{group="{g.name}"}} {planned}' not in t):
                    return None
            return t

        wait_for(reserve_matches, 30, "the reserve series equal to sinfo's idle nodes per group",
                 lambda: "\n".join(x for x in _exporter(mlab).splitlines() if "reserve" in x))
        want = {("SlurmkitTenantAtQuotaPending", "team-a")}
        wait_for(lambda: want <= set(firing(mlab)), 60, "the quota alert", lambda: str(list(firing(mlab))))
        assert set(firing(mlab)) == want, sorted(firing(mlab))

        cluster = load_cluster(str(Path(mlab.dir) / "etc" / "slurmkit.yaml"))
        empty = []
        for board, panels in dashboard_panels(cluster).items():
            for p in panels:
                res = query_api(mlab, "/api/v1/query?" + urlencode({"query": p.all()}))
                if not res["result"]:
                    empty.append(f"{board}: {p.title}: {p.expr}")
        assert not empty, "panels without data:\n" + "\n".join(empty)
    finally:
        lab_run(mlab, ["scancel", held, over], check=False)
    wait_for(lambda: not firing(mlab), 60, "the quota alert to resolve", lambda: str(list(firing(mlab))))
