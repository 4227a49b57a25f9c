"""slurmctld's own OpenMetrics endpoint (monitoring.slurm_metrics, 25.11+): `conf generate` sets MetricsType, `monitor
generate` scrapes its four bounded categories, and every panel of the slurmctld dashboard returns series over what a
real 26.05 slurmctld served (tests/data/monitor/slurmctld-26.05/*.txt, recorded from the lab by
tests/integration/test_slurm_metrics_lab.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from slurmkit.errors import SlurmkitError
from slurmkit.generate.slurmconf import generate as conf_generate
from slurmkit.model.load import load_cluster_dict
from slurmkit.monitor.generate import SLURM_ENDPOINTS, dashboard_panels, generate
from slurmkit.monitor.metrics import SLURM_METRICS
from tests.conftest import DATA, ROOT, needs
from tests.unit.test_monitor_generate import metrics_named
from tests.unit.test_monitor_textfile import samples

RECORDED = DATA / "monitor" / "slurmctld-26.05"


def cluster(version: str = "26.05", on: bool = True, accounting: bool = False):
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv["slurm_version"] = version
    if accounting:
        inv["accounting"] = {"host": "ctl"}
    inv["monitoring"] = {"exporter": ["ctl:9799"], "slurm_metrics": on}
    return load_cluster_dict(inv)


def test_conf_generate_sets_metricstype_only_where_asked_and_the_release_has_it():
    assert "MetricsType=metrics/openmetrics" in conf_generate(cluster("26.05"))["slurm.conf"].splitlines()
    assert "MetricsType=metrics/openmetrics" in conf_generate(cluster("25.11"))["slurm.conf"].splitlines()
    assert "MetricsType" not in conf_generate(cluster("26.05", on=False))["slurm.conf"]
    with pytest.raises(SlurmkitError, match=r"monitoring.slurm_metrics.*25.11"):
        conf_generate(cluster("24.11"))
    with pytest.raises(SlurmkitError, match=r"monitoring.slurm_metrics.*25.11"):
        generate(cluster("24.11"))


def test_prometheus_scrapes_the_four_bounded_categories_at_most_once_a_minute():
    c = cluster()
    jobs = {j["job_name"]: j for j in yaml.safe_load(generate(c)["prometheus.yml"])["scrape_configs"]}
    j = jobs["slurmctld"]
    assert [sc["labels"]["__metrics_path__"] for sc in j["static_configs"]] == [f"/metrics/{e}" for e in
                                                                                SLURM_ENDPOINTS]
    assert SLURM_ENDPOINTS == ("jobs", "nodes", "partitions", "scheduler")  # not the unbounded jobs-users-accts
    assert all(sc["targets"] == [f"{c.controller.hosts[0]}:{c.controller.port}"] for sc in j["static_configs"])
    assert int(j["scrape_interval"].rstrip("s")) >= 60
    assert "slurmctld" not in {j["job_name"] for j in yaml.safe_load(generate(cluster(on=False))["prometheus.yml"])
                               ["scrape_configs"]}


def test_panels_name_only_series_slurmctld_serves():
    """Every slurm_* name a panel uses is in the table, and in what the real 26.05 slurmctld served."""
    served = set()
    for f in RECORDED.glob("*.txt"):
        served |= {name for name, _ in samples(f.read_text())}
    assert SLURM_METRICS <= served, sorted(SLURM_METRICS - served)
    for p in dashboard_panels(cluster())["slurmkit-slurmctld"]:
        assert {m for m in metrics_named(p.expr) if m.startswith("slurm_")} <= SLURM_METRICS, p.expr
    def titles(c):
        return [p.title for p in dashboard_panels(c)["slurmkit-slurmctld"]]

    gpu_panel = "Nodes with free GPUs but no idle CPU"
    assert gpu_panel in titles(cluster("26.05", accounting=True))
    assert gpu_panel not in titles(cluster("25.11", accounting=True))  # slurm_node_gpus* are 26.05's
    assert gpu_panel not in titles(cluster("26.05"))  # and count the gres/gpu TRES, which needs slurmdbd


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_every_slurmctld_panel_has_data_over_a_real_slurmctlds_answer(tmp_path):
    series = []
    for f in sorted(RECORDED.glob("*.txt")):
        for (name, labels), v in samples(f.read_text()).items():
            sel = ",".join(f'{k}="{val}"' for k, val in sorted(labels))
            series.append({"series": f"{name}{{{sel}}}", "values": f"{v:g}x5"})
    panels = dashboard_panels(cluster())["slurmkit-slurmctld"]
    rules = [{"alert": f"Panel{i}", "expr": f"count({p.all()}) > 0"} for i, p in enumerate(panels)]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "s", "rules": rules}]}))
    case = {"interval": "1m", "input_series": series,
            "alert_rule_test": [{"eval_time": "2m", "alertname": f"Panel{i}", "exp_alerts": [{"exp_labels": {}}]}
                                for i in range(len(panels))]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["panels.yml"], "evaluation_interval": "1m",
                                                    "tests": [case]}))
    r = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_promtool_accepts_the_config_with_slurmctlds_job(tmp_path):
    for name, text in generate(cluster(accounting=True)).items():
        (tmp_path / name).write_text(text)
    r = subprocess.run(["promtool", "check", "config", "prometheus.yml"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
