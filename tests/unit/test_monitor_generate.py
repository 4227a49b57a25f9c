"""`slurmkit monitor generate`: promtool accepts the config and the rules, every alert has a promtool unit test that
fires it and one where it stays quiet, and every rule and panel names only metrics of the table."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from slurmkit.model.load import load_cluster_dict
from slurmkit.monitor.generate import EXTERNAL_METRICS, alerts, dashboard_panels, generate
from slurmkit.monitor.metrics import BY_NAME
from tests.conftest import DATA, ROOT, needs

TESTS = DATA / "monitor" / "alerts_test.yml"
_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                 "offset", "sum", "max", "min", "topk", "avg", "count", "increase", "rate", "label_replace", "humanizeDuration",
                 "max_over_time", "min_over_time", "bottomk", "quantile", "count_values", "vector"}


def cluster(**mon):
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv.setdefault("hooks", {})["healthcheck_interval"] = 60
    inv["monitoring"] = {"exporter": ["ctl:9799"], "dcgm_exporter": "node[1-2]", **mon}
    return load_cluster_dict(inv)


def metrics_named(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values
    expr = re.sub(r"\{[^}]*\}", "", expr)  # matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\((?:[a-z_, ]*)\)(?=\s*\()", "()", expr)  # by (a, b) label lists before an aggregation body
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", expr))
    return {n for n in names if n not in _PROMQL_WORDS and not re.fullmatch(r"\d+[smh]?", n)}


def test_rules_and_panels_name_only_table_metrics():
    c = cluster()
    exprs = [a.expr for a in alerts(c)] + [p.expr for ps in dashboard_panels(c).values() for p in ps]
    for e in exprs:
        unknown = metrics_named(e) - set(BY_NAME) - EXTERNAL_METRICS
        assert not unknown, (e, unknown)


def test_prometheus_yml_scrapes_every_node_dcgm_where_said_and_the_exporter():
    conf = yaml.safe_load(generate(cluster())["prometheus.yml"])
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    nodes = [sc["labels"]["node"] for sc in jobs["node"]["static_configs"]]
    assert nodes == [f"node{i}" for i in range(1, 9)]
    assert [sc["targets"] for sc in jobs["dcgm-exporter"]["static_configs"]] == [["node1:9400"], ["node2:9400"]]
    assert jobs["slurmkit"]["static_configs"] == [{"targets": ["ctl:9799"]}]
    assert "dcgm-exporter" not in {j["job_name"] for j in yaml.safe_load(
        generate(cluster(dcgm_exporter=""))["prometheus.yml"])["scrape_configs"]}


def test_dashboards_are_grafana_json_with_every_panel_query():
    files = generate(cluster())
    c = cluster()
    for uid, panels in dashboard_panels(c).items():
        d = json.loads(files[f"dashboard-{uid}.json"])
        assert d["uid"] == uid and [p["targets"][0]["expr"] for p in d["panels"]] == [p.expr for p in panels]
        assert all(p["datasource"]["uid"] == "${datasource}" for p in d["panels"])


def test_every_alert_has_a_firing_and_a_quiet_unit_test():
    names = {a.name for a in alerts(cluster())}
    fires: set[str] = set()
    quiet: set[str] = set()
    for t in yaml.safe_load(TESTS.read_text())["tests"]:
        for case in t["alert_rule_test"]:
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert names - fires == set() and names - quiet == set()
    assert fires <= names and quiet <= names  # no test of an alert that no longer exists


def _write(tmp_path: Path) -> Path:
    files = generate(cluster())
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_promtool_checks_config_and_rules(tmp_path):
    d = _write(tmp_path)
    for argv in (["promtool", "check", "config", "prometheus.yml"], ["promtool", "check", "rules",
                                                                       "slurmkit-alerts.yml"]):
        r = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_promtool_unit_tests_of_every_alert(tmp_path):
    d = _write(tmp_path)
    rules = yaml.safe_load((d / "slurmkit-alerts.yml").read_text())
    for g in rules["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)  # the cases check labels and timing; check rules parses the templates
    (d / "slurmkit-alerts.yml").write_text(yaml.safe_dump(rules))
    shutil.copy(TESTS, d / "alerts_test.yml")
    r = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=d, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def _with_bmc(provider: str = "redfish"):
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    bmc = "https://{host}-bmc" if provider == "redfish" else "{host}-bmc"
    inv["node_groups"][0]["power"] = {"provider": provider, "bmc": bmc}
    inv["monitoring"] = {"exporter": ["ctl:9799"]}
    return load_cluster_dict(inv)


def test_the_bmc_dashboard_only_where_the_inventory_names_bmcs():
    """No BMC, no slurmkit_bmc_* series (the lab's power provider is `lab`): no dashboard of empty panels."""
    assert "slurmkit-bmc" not in dashboard_panels(cluster())
    assert "dashboard-slurmkit-bmc.json" not in generate(cluster())
    for provider in ("redfish", "ipmi"):
        c = _with_bmc(provider)
        panels = dashboard_panels(c)["slurmkit-bmc"]
        d = json.loads(generate(c)["dashboard-slurmkit-bmc.json"])
        assert d["uid"] == "slurmkit-bmc" and [p["targets"][0]["expr"] for p in d["panels"]] == [p.expr for p in panels]
        for p in panels:
            assert metrics_named(p.expr) and metrics_named(p.expr) <= set(BY_NAME), p.expr


def _bmc_series() -> list[dict[str, str]]:
    """promtool input series: what `slurmkit bmc --textfile` writes for a Redfish node (DMTF's public-rackmount1
    mockup, walked from the recorded files) and an IPMI node (ipmi_sim's recorded faults), plus a BMC that did not
    answer and a GPU sensor (PhysicalContext GPU, as an HGX baseboard's BMC reports it)."""
    from slurmkit.monitor import bmc
    from slurmkit.monitor.metrics import Exposition
    from tests.unit.test_monitor_textfile import samples

    mock = DATA / "bmc" / "dmtf-public-rackmount1"

    def get(path: str) -> dict:
        return json.loads((mock / path.removeprefix("/redfish/v1").strip("/") / "index.json").read_text())

    chassis = get("/redfish/v1/Chassis/1U")
    gpu = bmc.Reading("temperature", "GPU0 Temp", 61.0, context="gpu")
    ex = Exposition()
    bmc.add_metrics(ex, bmc.BmcReport("node1", "redfish", [*bmc.walk_chassis(get, chassis), gpu]))
    ipmi = bmc.parse_ipmitool_sdr((DATA / "bmc" / "ipmitool_sdr_elist_faults.txt").read_text())
    bmc.add_metrics(ex, bmc.BmcReport("node2", "ipmi", ipmi))
    bmc.add_metrics(ex, bmc.BmcReport("node3", "redfish", error="redfish https://node3-bmc: refused"))
    out = []
    for (name, labels), v in samples(ex.text()).items():
        sel = ",".join(f'{k}="{val}"' for k, val in sorted(labels))
        out.append({"series": f"{name}{{{sel}}}", "values": f"{v:g}x5"})
    return out


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_every_bmc_panel_query_returns_series_in_prometheus(tmp_path):
    """The lab has no BMC, so its every-panel-has-data check never sees this dashboard: here Prometheus's own
    engine (promtool test rules) evaluates each panel's query over the series `slurmkit bmc` writes for recorded
    BMCs; one alert per panel fires iff its query returns a series."""
    panels = dashboard_panels(_with_bmc())["slurmkit-bmc"]
    rules = [{"alert": f"Panel{i}", "expr": f"count({p.all()}) > 0"} for i, p in enumerate(panels)]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "bmc", "rules": rules}]}))
    case = {"interval": "1m", "input_series": _bmc_series(),
            "alert_rule_test": [{"eval_time": "2m", "alertname": f"Panel{i}", "exp_alerts": [{"exp_labels": {}}]}
                                for i in range(len(panels))]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["panels.yml"], "evaluation_interval": "1m",
                                                    "tests": [case]}))
    r = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def _xid_codes_in(expr: str, op: str) -> set[int]:
    return {int(c) for m in re.findall(rf'xid{op}"([0-9|]+)"', expr) for c in m.split("|")}


def test_one_xid_table_for_hooks_rules_and_docs():
    """The codes the hooks drain on are exactly the critical alert's, and every other code (63 included) is the
    warning alert's: no code is drained without paging, none is silent (issue 35: XID 63 never alerted)."""
    from slurmkit.health import xidcodes
    from slurmkit.health.policy import CHECK_DEFAULTS, DEFAULT_FAIL_XIDS

    assert DEFAULT_FAIL_XIDS is xidcodes.DRAIN and CHECK_DEFAULTS["xid"].settings["codes"] is xidcodes.DRAIN
    by = {a.name: a for a in alerts(cluster())}
    crit, warn = by["SlurmkitGpuXidCritical"].expr, by["SlurmkitGpuXid"].expr
    assert _xid_codes_in(crit, "=~") == set(xidcodes.DRAIN) == _xid_codes_in(warn, "!~")
    assert 63 not in xidcodes.DRAIN and xidcodes.xid_class(63) == "reset" and xidcodes.xid_class(13) == "other"
    for code in range(1, 200):
        assert xidcodes.xid_class(code) in xidcodes.CLASSES
        assert xidcodes.SEVERITY[xidcodes.xid_class(code)] == ("critical" if code in xidcodes.DRAIN else "warning")
    # a site that drains on its own list pages on that list
    inv = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())
    inv.setdefault("hooks", {})["checks"] = {"xid": {"codes": [79, 48, 63]}}
    inv["monitoring"] = {"exporter": ["ctl:9799"]}
    site = {a.name: a for a in alerts(load_cluster_dict(inv))}
    assert _xid_codes_in(site["SlurmkitGpuXidCritical"].expr, "=~") == {48, 63, 79}
    assert _xid_codes_in(site["SlurmkitGpuXid"].expr, "!~") == {48, 63, 79}
    md = (ROOT / "docs" / "metrics.md").read_text()
    assert xidcodes.markdown() in md


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_xid_panel_counts_a_gpus_first_event_of_a_code(tmp_path):
    """The "XIDs (last hour)" panel over a counter series born at 1 (the first XID 63 of a GPU) and one that grew
    from 2 to 5: it returns both, non-zero (increase() alone gave 0 for the first, issue 35)."""
    panel = next(p for p in dashboard_panels(cluster())["slurmkit-node-health"] if p.title == "XIDs (last hour)")
    rules = [{"alert": "Panel", "expr": f"({panel.all()}) > 0"}]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "xid", "rules": rules}]}))
    case = {"interval": "1m", "input_series": [
        {"series": 'slurmkit_gpu_xid_errors_total{node="n1",gpu="3",xid="63"}', "values": "_x10 1x20"},
        {"series": 'slurmkit_gpu_xid_errors_total{node="n2",gpu="0",xid="79"}', "values": "2x10 5x20"}],
        "alert_rule_test": [{"eval_time": "15m", "alertname": "Panel", "exp_alerts": [
            {"exp_labels": {"node": "n1", "xid": "63"}}, {"exp_labels": {"node": "n2", "xid": "79"}}]}]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["panels.yml"], "evaluation_interval": "1m",
                                                    "tests": [case]}))
    r = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_failing_checks_panel_clears_when_a_later_run_is_healthy(tmp_path):
    """A failed epilog's textfile stands until the next epilog; the "Failing checks" panel shows the node's latest
    run only, so the health check's passing run clears it (issue 35), and a later failing run shows again."""
    panel = next(p for p in dashboard_panels(cluster())["slurmkit-node-health"] if p.title == "Failing checks")
    rules = [{"alert": "Panel", "expr": f"({panel.all()}) > 0"}]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "fc", "rules": rules}]}))
    st = "slurmkit_health_check_status"
    series = [
        {"series": f'{st}{{node="n1",hook="epilog",check="gpu_procs",state="fail"}}', "values": "1x30"},
        {"series": 'slurmkit_health_last_run_timestamp_seconds{node="n1",hook="epilog"}', "values": "60x30"},
        {"series": f'{st}{{node="n1",hook="health",check="gpu_procs",state="fail"}}', "values": "_x5 0x10 1x15"},
        {"series": 'slurmkit_health_last_run_timestamp_seconds{node="n1",hook="health"}',
         "values": "_x5 400x10 1300x15"},
        # another node's stale check file with a failure, and its health run after it failing too
        {"series": f'{st}{{node="n2",hook="check",check="ecc",state="fail"}}', "values": "1x30"},
        {"series": 'slurmkit_health_last_run_timestamp_seconds{node="n2",hook="check"}', "values": "10x30"},
        {"series": f'{st}{{node="n2",hook="health",check="ecc",state="fail"}}', "values": "1x30"},
        {"series": 'slurmkit_health_last_run_timestamp_seconds{node="n2",hook="health"}', "values": "500x30"}]
    n1 = {"exp_labels": {"node": "n1", "check": "gpu_procs"}}
    n2 = {"exp_labels": {"node": "n2", "check": "ecc"}}
    case = {"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": "3m", "alertname": "Panel", "exp_alerts": [n1, n2]},
        {"eval_time": "10m", "alertname": "Panel", "exp_alerts": [n2]},
        {"eval_time": "20m", "alertname": "Panel", "exp_alerts": [n1, n2]}]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["panels.yml"], "evaluation_interval": "1m",
                                                    "tests": [case]}))
    r = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_annotations_say_why_and_link_the_runbook(tmp_path):
    """Prometheus' own template engine (promtool test rules, annotations kept): the drained alert and a GPU alert
    carry Slurm's drain reason from the textfile (else the exporter's node reason, else "none") and the alert's
    section of docs/runbooks.md."""
    _write(tmp_path)
    reason, ib = "slurmkit: xid 79 nvidia1@0000:28:00.0", "slurmkit: ib mlx5_0/1 Down"
    t = {"rule_files": ["slurmkit-alerts.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": 'slurmkit_gpu_xid_sticky{node="n5",gpu="g1",xid="79"}', "values": "1x5"},
            {"series": 'slurmkit_node_drained{node="n5"}', "values": "1x8"},
            {"series": f'slurmkit_node_drain_info{{node="n5",check="xid",reason="{reason}"}}', "values": "1x8"},
            {"series": 'slurmkit_node_drained{node="n7"}', "values": "1x8"},
            {"series": f'slurmkit_node_drain_info{{node="n7",check="ib",reason="{ib}"}}', "values": "1x8"},
            {"series": 'slurmkit_gpu_xid_sticky{node="n6",gpu="g0",xid="48"}', "values": "1x5"},
            {"series": 'slurmkit_node_state{node="n6",state="idle",flags="DRAIN",reason="admin: RMA"}',
             "values": "1x5"},
        ],
        "alert_rule_test": [
            # n5's drain is its XID page's doing: only n7's drain alerts
            {"eval_time": "1m", "alertname": "SlurmkitNodeDrainedByHealth", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "node": "n7", "check": "ib"},
                "exp_annotations": {
                    "summary": f"n7 is drained by slurmkit's health check ib: {ib}",
                    "drain_reason": ib,
                    "runbook_url": "docs/runbooks.md#slurmkitnodedrainedbyhealth"}}]},
            {"eval_time": "1m", "alertname": "SlurmkitGpuXidCritical", "exp_alerts": [
                {"exp_labels": {"severity": "critical", "node": "n5", "gpu": "g1", "xid": "79"},
                 "exp_annotations": {"summary": "GPU g1 on n5: XID 79 (reset or reboot needed)",
                                     "drain_reason": reason,
                                     "runbook_url": "docs/runbooks.md#slurmkitgpuxidcritical"}},
                {"exp_labels": {"severity": "critical", "node": "n6", "gpu": "g0", "xid": "48"},
                 "exp_annotations": {"summary": "GPU g0 on n6: XID 48 (reset or reboot needed)",
                                     "drain_reason": "admin: RMA",
                                     "runbook_url": "docs/runbooks.md#slurmkitgpuxidcritical"}}]},
        ]}]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump(t))
    r = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_alertmanager_yml_routes_by_severity_and_inhibits_per_node_noise():
    c = cluster(alert_webhooks={"critical": "https://pager.example/hook", "warning": "https://tickets.example/h"})
    am = yaml.safe_load(generate(c)["alertmanager.yml"])
    assert am["route"]["group_by"] == ["cluster", "node", "alertname"]
    assert {r["matchers"][0]: r["receiver"] for r in am["route"]["routes"]} == {
        'severity="critical"': "slurmkit-critical", 'severity="warning"': "slurmkit-warning",
        'severity="info"': "slurmkit-info"}
    hooks = {r["name"]: [w["url"] for w in r.get("webhook_configs", [])] for r in am["receivers"]}
    assert hooks == {"slurmkit-critical": ["https://pager.example/hook"],
                     "slurmkit-warning": ["https://tickets.example/h"], "slurmkit-info": []}
    sources = [r["source_matchers"][0] for r in am["inhibit_rules"]]
    assert 'alertname="SlurmkitSlurmctldUnreachable"' in sources and 'alertname="SlurmkitNodeDown"' in sources
    prom = yaml.safe_load(generate(c)["prometheus.yml"])
    assert prom["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": ["localhost:9093"]}]}]
    node_job = next(j for j in prom["scrape_configs"] if j["job_name"] == "node")
    assert node_job["metric_relabel_configs"] == [{"action": "labeldrop", "regex": "exported_node"}]


def test_bad_alerting_keys_are_one_line_errors():
    from slurmkit.errors import UsageError

    for bad, where in (({"alert_webhooks": {"page": "https://x"}}, "monitoring.alert_webhooks.page"),
                       ({"alert_webhooks": {"critical": "ftp://x"}}, "monitoring.alert_webhooks.critical"),
                       ({"alertmanager": ["no-port"]}, "monitoring.alertmanager[0]"),
                       ({"runbook_base_url": "a b"}, "monitoring.runbook_base_url")):
        with pytest.raises(UsageError, match=re.escape(where)):
            cluster(**bad)


@needs(shutil.which("amtool") is not None, "amtool (Debian package prometheus-alertmanager) not installed")
def test_amtool_checks_the_generated_alertmanager_yml(tmp_path):
    c = cluster(alert_webhooks={"critical": "http://127.0.0.1:9/page"})
    (tmp_path / "alertmanager.yml").write_text(generate(c)["alertmanager.yml"])
    r = subprocess.run(["amtool", "check-config", "alertmanager.yml"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "4 inhibit rules" in r.stdout, r.stdout + r.stderr


def test_gpu_critical_names_every_critical_gpu_alert():
    from slurmkit.monitor.generate import GPU_CRITICAL

    assert set(GPU_CRITICAL.split("|")) == {a.name for a in alerts(cluster())
                                            if a.severity == "critical" and a.name.startswith("SlurmkitGpu")}


def test_runbooks_have_one_section_per_alert_and_the_urls_point_at_them():
    from slurmkit.monitor.generate import rules_yaml

    c = cluster()
    headings = re.findall(r"^## (\S+)$", (ROOT / "docs" / "runbooks.md").read_text(), re.M)
    assert sorted(headings) == sorted(a.name for a in alerts(c)) and len(set(headings)) == len(headings)
    urls = {r["alert"]: r["annotations"]["runbook_url"]
            for r in yaml.safe_load(rules_yaml(c))["groups"][0]["rules"]}
    assert all(u == f"docs/runbooks.md#{name.lower()}" for name, u in urls.items())
    site = cluster(runbook_base_url="https://wiki.example/slurmkit/runbooks")
    assert yaml.safe_load(rules_yaml(site))["groups"][0]["rules"][0]["annotations"]["runbook_url"] == \
        f"https://wiki.example/slurmkit/runbooks#{alerts(site)[0].name.lower()}"


@pytest.mark.parametrize("preset", sorted(p.stem for p in (ROOT / "examples").glob("*.yaml")
                                          if p.stem not in ("compose", "lab")))
def test_every_preset_scrapes_what_its_rules_and_panels_read(preset):
    """Every GPU preset sets monitoring.exporter: without it the exporter's series (Slurm's node state, GPUs by
    state, tenants, fragmentation) have no scrape job and their rules and panels never see data."""
    from slurmkit.model.load import load_cluster
    from slurmkit.monitor.generate import prometheus_yaml

    c = load_cluster(str(ROOT / "examples" / f"{preset}.yaml"))
    jobs = {j["job_name"] for j in yaml.safe_load(prometheus_yaml(c))["scrape_configs"]}
    sources = {BY_NAME[m].source for a in alerts(c) for m in metrics_named(a.expr) if m in BY_NAME}
    sources |= {BY_NAME[m].source for ps in dashboard_panels(c).values() for p in ps for m in metrics_named(p.expr)
                if m in BY_NAME}
    need = {"hook": "node", "exporter": "slurmkit", "bmc": "node"}
    assert {need[s] for s in sources} <= jobs, (preset, sources, jobs)


def _fleet_series(nodes: int = 20, gpus: int = 8) -> list[dict[str, str]]:
    """promtool input: ``nodes`` x ``gpus`` GPUs as the hooks and dcgm-exporter write them (dcgm-exporter repeating
    each GPU's series per job: hpc_job), every GPU hot and faulty enough that each faults-only panel has more
    candidates than TOPK."""
    out: list[dict[str, str]] = []

    def add(name: str, labels: dict[str, str], values: str) -> None:
        sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
        out.append({"series": f"{name}{{{sel}}}", "values": values})

    for n in range(1, nodes + 1):
        node = f"n{n:02d}"
        hook = {"job": "node", "instance": f"{node}:9100", "node": node}
        dc = {"job": "dcgm-exporter", "instance": f"{node}:9400", "node": node, "Hostname": node}
        add("slurmkit_node_partition_info", {"job": "slurmkit", "node": node, "partition": "gpu"}, "1x10")
        add("slurmkit_health_last_run_timestamp_seconds", {**hook, "hook": "health"}, "100x10")
        add("slurmkit_health_run_duration_seconds", {**hook, "hook": "health"}, f"{n}x10")
        add("slurmkit_health_check_status", {**hook, "hook": "health", "check": "ecc", "state": "fail"}, "1x10")
        add("slurmkit_gpu_xid_errors_total", {**hook, "gpu": "nvidia0@18:00.0", "xid": "13"}, "_ 1x9")
        for g in range(gpus):
            ident = {"gpu": f"nvidia{g}@{0x18 + g:02x}:00.0", "minor": str(g), "uuid": f"GPU-{node}-{g}",
                     "pci_bus_id": f"00000000:{0x18 + g:02X}:00.0", "serial": f"S{n}{g}", "model": "H100"}
            add("slurmkit_gpu_info", {**hook, **ident}, "1x10")
            add("slurmkit_gpu_temperature_celsius", {**hook, **ident}, f"{40 + g}x10")
            add("slurmkit_gpu_ecc_errors_total", {**hook, **ident, "type": "uncorrected", "location": "all",
                                                  "counter": "volatile"}, "1x10")
            add("slurmkit_gpu_row_remap_pending", {**hook, **ident}, "1x10")
            add("slurmkit_gpu_row_remap_failure", {**hook, **ident}, "0x10")
            add("slurmkit_gpu_nvlink_links", {**hook, **ident, "state": "down"}, "1x10")
            add("slurmkit_gpu_pcie_link_width", {**hook, **ident, "which": "current"}, "8x10")
            add("slurmkit_gpu_pcie_link_width", {**hook, **ident, "which": "max"}, "16x10")
            add("slurmkit_gpu_power_limit_watts", {**hook, **ident}, "700x10")
            for job in ("41", "42"):
                d = {**dc, "gpu": str(g), "UUID": f"GPU-{node}-{g}", "hpc_job": job}
                add("DCGM_FI_DEV_GPU_TEMP", d, f"{50 + n}x10")
                add("DCGM_FI_DEV_POWER_USAGE", d, f"{300 + n}x10")
                add("DCGM_FI_DEV_GPU_UTIL", d, f"{n * 4}x10")
                add("DCGM_FI_DEV_FB_USED", d, f"{1000 * n}x10")
                add("DCGM_FI_DEV_FB_FREE", d, "80000x10")
                add("DCGM_FI_DEV_SM_CLOCK", d, f"{1000 + n}x10")
    return out


@needs(shutil.which("promtool") is not None, "promtool (Debian package prometheus) not installed")
def test_every_node_and_gpu_panel_has_data_and_topk_panels_stay_small_at_160_gpus(tmp_path):
    """Prometheus' own engine over 20 nodes x 8 GPUs (hooks and dcgm-exporter): every panel of the node-health and
    GPU usage dashboards returns series, none of the top-k ones more than TOPK (one line per GPU would be 160 here,
    4,000 at 500 nodes), and $node=n07 shows only n07."""
    from slurmkit.monitor.generate import TOPK

    boards = dashboard_panels(cluster())
    panels = boards["slurmkit-node-health"] + boards["slurmkit-gpu-usage"]
    rules, cases = [], []
    for i, p in enumerate(panels):
        rules.append({"alert": f"Data{i}", "expr": f"count({p.all()}) > 0"})
        cases.append({"eval_time": "5m", "alertname": f"Data{i}", "exp_alerts": [{"exp_labels": {}}]})
        if p.expr.startswith(("topk(", "bottomk(", "(topk(")):
            rules.append({"alert": f"Big{i}", "expr": f"count({p.all()}) > {TOPK}"})
            cases.append({"eval_time": "5m", "alertname": f"Big{i}", "exp_alerts": []})
    hot = next(p for p in panels if p.title.startswith("GPU temperature (") and "hottest)" in p.title)
    one = hot.expr.replace("$node", "n07").replace("$gpu", ".*")
    rules.append({"alert": "OneNode", "expr": f"count by (node) ({one}) > 0"})
    cases.append({"eval_time": "5m", "alertname": "OneNode", "exp_alerts": [{"exp_labels": {"node": "n07"}}]})
    # dcgm-exporter's reading (50 + n) wins over the hooks' (40 + g): the 10 hottest are the n20 and n19 GPUs
    rules.append({"alert": "Hottest", "expr": f"count by (node) ({hot.all()}) > 0"})
    cases.append({"eval_time": "5m", "alertname": "Hottest", "exp_alerts": [{"exp_labels": {"node": "n19"}},
                                                                           {"exp_labels": {"node": "n20"}}]})
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "p", "rules": rules}]}))
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["panels.yml"], "evaluation_interval": "1m",
                                                    "tests": [{"interval": "1m", "input_series": _fleet_series(),
                                                               "alert_rule_test": cases}]}))
    r = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_dashboards_carry_partition_node_and_gpu_variables():
    pytest.importorskip("grafana_foundation_sdk")
    files = generate(cluster())
    for name in ("dashboard-slurmkit-node-health.json", "dashboard-slurmkit-gpu-usage.json"):
        d = json.loads(files[name])
        tv = {v["name"]: v for v in d["templating"]["list"]}
        assert {"datasource", "partition", "node", "gpu"} <= set(tv)
        assert 'partition=~"$partition"' in tv["node"]["query"]["query"] if isinstance(tv["node"]["query"], dict) \
            else 'partition=~"$partition"' in tv["node"]["query"]
        assert tv["gpu"].get("allValue") == ".*" and "allValue" not in tv["node"]
    assert "dashboard-slurmkit-gpu-usage.json" not in generate(cluster(dcgm_exporter=""))
