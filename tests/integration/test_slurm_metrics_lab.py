"""slurmctld's OpenMetrics endpoint on a real slurmctld (25.11+; the cached 26.05 root: SLURMKIT_TEST_SLURM=26.05):
the MetricsType line `conf generate` writes for monitoring.slurm_metrics makes slurmctld answer /metrics/<category>
on its port, and every slurm_* series the dashboards use (metrics.SLURM) is there under the name assumed.

    SLURMKIT_TEST_SLURM=26.05 SLURMKIT_TEST_LAB_DIR=/tmp/lab-x SLURMKIT_TEST_LAB_PORT_BASE=... \
        python -m pytest -m lab tests/integration/test_slurm_metrics_lab.py

SLURMKIT_RECORD_SLURM_METRICS=DIR writes each category's answer to DIR/<category>.txt (how
tests/data/monitor/slurmctld-26.05/ was recorded).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from slurmkit.generate.slurmconf import generate as conf_generate
from slurmkit.model.load import load_cluster_dict
from slurmkit.monitor.generate import SLURM_ENDPOINTS
from slurmkit.monitor.metrics import SLURM
from slurmkit.release import features_for
from tests.conftest import lab_run, release_under_test
from tests.integration.test_health_lab import wait_for
from tests.unit.test_monitor_textfile import samples

# `releases`: tests/run.sh's 26.05 pass runs it (the host's 22.05 and the 24.11 pass skip it: no metrics plugin)
pytestmark = [pytest.mark.lab, pytest.mark.releases,
              pytest.mark.skipif(not features_for(release_under_test()).openmetrics,
                                 reason="slurmctld serves metrics from 25.11; the 26.05 pass of tests/run.sh runs this")]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def _free_port() -> int:
    """A free port in this run's lab window (SLURMKIT_TEST_LAB_PORT_LIMIT's last 100), for Prometheus."""
    import socket

    top = int(os.environ.get("SLURMKIT_TEST_LAB_PORT_LIMIT", "32767"))
    for port in range(top - 1, top - 100, -1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port for Prometheus")


def _real_prometheus_scrapes_it(lab, inv: dict, tmp_path: Path) -> None:
    """Debian's Prometheus on the slurmctld job of the generated prometheus.yml (the lab's controller address; the
    interval shortened from 60 s for the test): every category's target is up and slurm_node_cpus_idle has a series
    per node, with the endpoint label the config sets."""
    import shutil
    import subprocess
    from urllib.parse import urlencode

    from slurmkit.monitor.generate import prometheus_yaml

    if shutil.which("prometheus") is None:
        pytest.skip("prometheus (Debian package) not installed")
    inv = {**inv, "controller": {**inv["controller"], "port": lab.spec.ctld_port},
           "monitoring": {**inv["monitoring"], "slurm_metrics": True}}
    cluster = load_cluster_dict(inv)
    conf = yaml.safe_load(prometheus_yaml(cluster))
    job = next(j for j in conf["scrape_configs"] if j["job_name"] == "slurmctld")
    job["scrape_interval"] = "2s"
    for sc in job["static_configs"]:
        sc["targets"] = [f"127.0.0.1:{lab.spec.ctld_port}"]
    conf["scrape_configs"], conf["rule_files"], conf["alerting"] = [job], [], {}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(conf))
    port = _free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))  # noqa: SIM115
    try:
        def query(q: str) -> list[dict]:
            try:
                body = _get(f"http://127.0.0.1:{port}/api/v1/query?" + urlencode({"query": q}))
            except OSError:
                return []
            import json

            return list(json.loads(body)["data"]["result"])

        up = wait_for(lambda: (r := query('up{job="slurmctld"} == 1')) and len(r) == len(SLURM_ENDPOINTS) and r,
                      60, "every slurmctld category scraped by Prometheus",
                      lambda: str(query('up{job="slurmctld"}')) + (tmp_path / "prometheus.log").read_text()[-2000:])
        assert {r["metric"]["endpoint"] for r in up} == set(SLURM_ENDPOINTS)
        got = wait_for(lambda: query(SLURM.node_cpus_idle), 30, "slurm_node_cpus_idle in Prometheus")
        assert {r["metric"]["node"] for r in got} == set(lab.spec.node_names)
        assert {r["metric"]["endpoint"] for r in got} == {"nodes"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_slurmctld_serves_the_series_the_dashboards_read(make_lab, tmp_path):
    lab = make_lab(nodes=2, nodes_per_leaf=2)
    inv = yaml.safe_load((Path(lab.dir) / "etc" / "slurmkit.yaml").read_text())
    inv.setdefault("monitoring", {})["slurm_metrics"] = True
    inv["slurm_version"] = release_under_test()
    on = conf_generate(load_cluster_dict(inv))["slurm.conf"].splitlines()
    inv["monitoring"]["slurm_metrics"] = False
    off = set(conf_generate(load_cluster_dict(inv))["slurm.conf"].splitlines())
    added = [ln for ln in on if ln not in off and not ln.startswith("#")]  # what the key adds, nothing else
    assert "MetricsType=metrics/openmetrics" in added, added
    conf = Path(lab.dir) / "etc" / "slurm.conf"
    conf.write_text(conf.read_text() + "\n" + "\n".join(added) + "\n")
    lab.restart_slurmctld()
    # a job running and one pending, so the job and partition series have something to count
    lab_run(lab, ["sbatch", "-N2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 60"])
    lab_run(lab, ["sbatch", "-N2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 60"])
    base = f"http://127.0.0.1:{lab.spec.ctld_port}"
    index = wait_for(lambda: _get(f"{base}/metrics"), 30, "slurmctld's /metrics")
    got: dict[str, str] = {}
    for e in SLURM_ENDPOINTS:
        assert f"/metrics/{e}" in index, index
        got[e] = _get(f"{base}/metrics/{e}")
    names = {name for text in got.values() for name, _ in samples(text)}
    want = {v for k, v in vars(SLURM).items() if not k.startswith("_") and isinstance(v, str)}
    if not features_for(release_under_test()).openmetrics_node_gpus:
        want -= {SLURM.node_gpus, SLURM.node_gpus_alloc}
    assert want <= names, sorted(want - names)
    per_node = {dict(labels).get("node") for (name, labels) in samples(got["nodes"]) if name == SLURM.node_cpus_idle}
    assert per_node == set(lab.spec.node_names)
    if features_for(release_under_test()).openmetrics_node_gpus:
        # without slurmdbd there is no gres/gpu TRES (AccountingStorageTRES=gres/gpu is fatal then): every node
        # reads 0 GPUs, which is why the GPU panels need accounting (generate.slurm_panels)
        gpus = {dict(lb)["node"]: v for (n, lb), v in samples(got["nodes"]).items() if n == SLURM.node_gpus}
        assert gpus == dict.fromkeys(lab.spec.node_names, 0.0), gpus
    if os.environ.get("SLURMKIT_RECORD_SLURM_METRICS"):
        out = Path(os.environ["SLURMKIT_RECORD_SLURM_METRICS"])
        out.mkdir(parents=True, exist_ok=True)
        for e, text in got.items():
            (out / f"{e}.txt").write_text(text)
    _real_prometheus_scrapes_it(lab, inv, tmp_path)
    # with PrivateData the endpoint wants an authenticated user (read_config.c at slurm-26-05-3-1: PrivateData sets
    # metrics_auth; http.c _check_metrics_authorized): an anonymous scrape, as prometheus.yml's, is refused, which
    # is why docs/metrics.md says to set MetricsParameters=ignore_private_data or give Prometheus a token
    conf.write_text(conf.read_text() + "PrivateData=jobs\n")
    lab.restart_slurmctld()
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(f"{base}/metrics/nodes")
    assert refused.value.code in (401, 403), refused.value.code
    lab_run(lab, ["scancel", "-u", os.environ.get("USER") or str(os.getuid())], check=False)
