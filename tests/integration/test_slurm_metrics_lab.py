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

pytestmark = [pytest.mark.lab, pytest.mark.skipif(not features_for(release_under_test()).openmetrics,
                                                  reason="slurmctld serves metrics from 25.11")]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def test_slurmctld_serves_the_series_the_dashboards_read(make_lab):
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
    # with PrivateData the endpoint wants an authenticated user (read_config.c at slurm-26-05-3-1: PrivateData sets
    # metrics_auth; http.c _check_metrics_authorized): an anonymous scrape, as prometheus.yml's, is refused, which
    # is why docs/metrics.md says to set MetricsParameters=ignore_private_data or give Prometheus a token
    conf.write_text(conf.read_text() + "PrivateData=jobs\n")
    lab.restart_slurmctld()
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(f"{base}/metrics/nodes")
    assert refused.value.code in (401, 403), refused.value.code
    lab_run(lab, ["scancel", "-u", os.environ.get("USER") or str(os.getuid())], check=False)
