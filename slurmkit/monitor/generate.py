"""`slurmkit monitor generate`: prometheus.yml, alert rules and Grafana dashboards from the inventory. Pure: returns
{file name: text}; the CLI writes them. Every metric a rule or panel names comes from the metric table
(slurmkit/monitor/metrics.py) or is one of the few external metrics listed in EXTERNAL_METRICS."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from slurmkit.health import xidcodes
from slurmkit.model.cluster import Cluster
from slurmkit.monitor.metrics import DCGM, DCGM_METRICS, SLURM, SLURM_METRICS, M

RULES_FILE = "slurmkit-alerts.yml"
# Metrics of other exporters the rules use: Prometheus's own ``up``, node_exporter's infiniband collector
# (collector/infiniband_linux.go, node_exporter 1.5: state_id 4 = ACTIVE, link_downed_total).
# Prometheus' ALERTS series (one per pending or firing alert: alertname, alertstate and the alert's labels).
# dcgm-exporter's series (metrics.DCGM) where monitoring.dcgm_exporter names nodes.
EXTERNAL_METRICS = {"up", "node_infiniband_state_id", "node_infiniband_link_downed_total", "time", "ALERTS",
                    *DCGM_METRICS, *SLURM_METRICS}
JOB_NODE, JOB_DCGM, JOB_EXPORTER, JOB_SLURM = "node", "dcgm-exporter", "slurmkit", "slurmctld"
# slurmctld's metric categories prometheus.yml scrapes (doc/html/metrics.shtml "HTTP Endpoints"; src/slurmctld/
# http.c binds them at slurm-25-11-0-1 and slurm-26-05-3-1). Not /metrics/jobs-users-accts: one series per user and
# account, which the guide says not to store ("Do not use unbounded metric endpoints")
SLURM_ENDPOINTS = ("jobs", "nodes", "partitions", "scheduler")


def slurm_metrics_on(cluster: Cluster) -> bool:
    """monitoring.slurm_metrics on a release that has the endpoint (25.11+); an older one is an inventory error."""
    if not cluster.monitoring.slurm_metrics:
        return False
    from slurmkit.errors import InventoryError
    from slurmkit.release import features_for

    if not features_for(cluster.slurm_version).openmetrics:
        raise InventoryError("monitoring.slurm_metrics", f"slurmctld serves metrics from Slurm 25.11, the inventory's "
                             f"release is {cluster.slurm_version}")
    return True


def drain_xids(cluster: Cluster) -> tuple[int, ...]:
    """The XID codes the hooks drain on (the one table's drain class, or the site's ``hooks.checks.xid.codes``):
    the critical alert's codes, so a code that drains a node always pages (slurmkit/health/xidcodes.py)."""
    xid = (cluster.hooks.checks or {}).get("xid")
    codes = xid.get("codes") if isinstance(xid, dict) else None
    if isinstance(codes, (list, tuple)) and all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
        return tuple(sorted(set(codes)))
    return xidcodes.DRAIN


def _codes_re(codes: tuple[int, ...]) -> str:
    return "|".join(map(str, codes)) or "none"


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    severity: str  # critical | warning | info
    summary: str
    for_: str = "0m"
    per_node: bool = True  # its series carry node=: the drain_reason annotation and alertmanager's per-node grouping


# Slurm's reason for the alert's node, in the drain_reason annotation of every per-node alert (Prometheus' template
# functions query, first, label; %q quotes the node name as PromQL reads a string): slurmkit's drain reason from the
# health check's textfile, else the reason slurmctld shows (the exporter's slurmkit_node_state), else "none"
DRAIN_REASON = ('{{ with printf `slurmkit_node_drain_info{node=%q}` $labels.node | query }}'
                '{{ . | first | label "reason" }}{{ else }}'
                '{{ with printf `slurmkit_node_state{node=%q,reason!=""}` $labels.node | query }}'
                '{{ . | first | label "reason" }}{{ else }}none{{ end }}{{ end }}')


# the GPU's identity labels every GPU alert carries (metrics.GPU_LABELS but node and gpu, which every per-GPU series
# has): what an on-call engineer reads off the page to find the board (minor, slot, UUID, serial for the RMA form)
GPU_ID = ("minor", "uuid", "pci_bus_id", "serial", "model")


# the critical alerts of one GPU's fault: each drains the node in the hooks, and each names the board
GPU_CRITICAL = ("SlurmkitGpuXidCritical|SlurmkitGpuEccUncorrectable|SlurmkitGpuRowRemapFailure|SlurmkitGpuNvlinkDown|"
                "SlurmkitGpuMissing")


def _with_gpu_id(expr: str) -> str:
    """``expr`` (series labelled node and gpu only: the XID counter and sticky series) with the GPU's identity from
    slurmkit_gpu_info, or slurmkit_gpu_lost for a GPU that fell off the bus (XID 79: no longer in gpu_info). One
    identity per (node, gpu) (topk: a many-to-many join would fail the rule); an XID on a bus no GPU of the node has
    (pci<bus>, nvswitch<bus>) keeps its own labels (the ``unless`` arm), so it still alerts."""
    ids = f"topk by (node, gpu) (1, {_n(M.gpu_info)} or {_n(M.gpu_lost)})"
    return (f"(({expr}) * on (node, gpu) group_left ({', '.join(GPU_ID)}) {ids}) "
            f"or (({expr}) unless on (node, gpu) {ids})")


def _n(metric: Any) -> str:
    return str(metric.name)


def _dcgm(field: str) -> str:
    """dcgm-exporter's ``field`` per GPU, labelled node and uuid (its UUID label, renamed to ours): one series per
    GPU (max: dcgm-exporter repeats a GPU's series once per job, hpc_job=, where the job mapping files name jobs)."""
    return f'max by (node, uuid) (label_replace({field}{{job="{JOB_DCGM}"}}, "uuid", "$1", "UUID", "(.+)"))'


def _gpu_ids() -> str:
    """Each GPU's identity (slurmkit_gpu_info from the hooks) keyed by node and UUID, one per key (topk: a
    many-to-many join would fail the rule)."""
    return f'topk by (node, uuid) (1, max without (job, instance) ({_n(M.gpu_info)}{{uuid!=""}}))'


def _gpu_value(cluster: Cluster, own: Any, field: str, sel: str = "", drop: str = "",
               extra: tuple[tuple[str, str], ...] = ()) -> str:
    """A per-GPU value from dcgm-exporter where it exports ``field`` for that GPU, else the hooks' own series
    (``own``{``sel``}, ``drop`` labels aggregated away). Without monitoring.dcgm_exporter: the hooks' series as they
    are. With it, both arms carry exactly metrics.GPU_LABELS (and ``extra``, constant labels the DCGM arm adds to
    match the hooks' series), so a GPU whose source changes (dcgm-exporter stopped: its series go stale after 5
    minutes and the hooks' take over) keeps its alert rather than resolving and firing again. The DCGM arm takes
    the GPU's names (nvidia<minor>@<bus>, minor, serial) from slurmkit_gpu_info by UUID: the page names the board
    whichever source measured it. Per GPU, not per node: a site counters file without ``field`` (ECC and the
    pending remap are commented out of dcgm-exporter's default-counters.csv) leaves the hooks' series in use."""
    sel_ = f"{{{sel}}}" if sel else ""
    if not cluster.monitoring.dcgm_exporter:
        return f"max without ({drop}) ({_n(own)}{sel_})" if drop else f"{_n(own)}{sel_}"
    keys = ", ".join(k for k in ("job", "instance", drop) if k)
    mine = f"max without ({keys}) ({_n(own)}{sel_})"
    theirs = (f"{_dcgm(field)} * on (node, uuid) group_left (gpu, minor, pci_bus_id, serial, model) {_gpu_ids()}")
    for k, v in extra:
        theirs = f'label_replace({theirs}, "{k}", "{v}", "", "")'
    return f"(({theirs}) or ({mine} unless on (node, uuid) {_dcgm(field)}))"


def _xid_new(sel: str, window: str = "15m") -> str:
    """XID events in the last ``window`` (a counter per node, GPU and code). The per-code counter series is born at
    its first event with the value 1, and increase() needs two samples of one series (a series first seen at 1
    gives 0: the first XID of each code on a GPU would never alert, and a panel would count 0); the second term
    catches a series that had no sample in the day before the window (a node back after more than a day away
    alerts once on its old counts)."""
    x = f"{_n(M.xid_errors)}{{{sel}}}"
    return f"increase({x}[{window}]) > 0 or ({x} > 0 unless max_over_time({x}[1d] offset {window}))"


def _latest_run() -> str:
    """Each node's most recent hook run (prolog, epilog, health or check): every hook writes its own textfile, kept
    until that hook runs again, so a failed epilog's verdicts would stand after the health check found the node
    healthy; a panel of the node's current state reads only its latest run."""
    t = _n(M.last_run)
    return f"({t} == on (node) group_left max by (node) ({t}))"


def _resume_window(cluster: Cluster) -> str:
    """How long the health check takes to resume a node after its fault is fixed: hooks.checks.resume_after_passes
    health runs, HealthCheckInterval apart, and two runs of slack; 15 minutes where the inventory sets no
    HealthCheckInterval (3 passes of a 5-minute interval)."""
    interval = cluster.hooks.healthcheck_interval
    passes = (cluster.hooks.checks or {}).get("resume_after_passes", 3)
    passes = passes if isinstance(passes, int) and not isinstance(passes, bool) and passes > 0 else 3
    return f"{(passes + 2) * interval}s" if interval else "15m"


def _unless_ctld(cluster: Cluster) -> str:
    """Not while the exporter sees slurmctld fail, nor for three health intervals after (at least a minute): a hung
    or stopped slurmctld stops every node's health check (slurmd waits on it, the hook's scontrol times out) within
    seconds, long before SlurmkitSlurmctldUnreachable's 2 minutes let alertmanager.yml inhibit them, and the
    hooks need a run to catch up once it is back: measured on the lab (SIGSTOP), HealthHookStale fired once per
    node (tests/integration/test_monitor_alerts_lab.py). Where no exporter runs, nothing is suppressed."""
    interval = cluster.hooks.healthcheck_interval
    window = f"{max(60, 3 * interval)}s" if interval else "15m"
    return f" unless on () (min_over_time({_n(M.up)}[{window}]) == 0)"


def alerts(cluster: Cluster) -> list[Alert]:
    mon = cluster.monitoring
    drain = _codes_re(drain_xids(cluster))
    a = [
        # a drain-class XID stays sticky in the hooks until the GPU reset (`check --clear-xid`) or a reboot (the
        # same codes: drain_xids), so the sticky series carries the first one and the alert resolves with the
        # clear; increase() adds repeats. Every other code has no sticky series: _xid_new catches its first event
        Alert("SlurmkitGpuXidCritical",
              _with_gpu_id(f'increase({_n(M.xid_errors)}{{xid=~"{drain}"}}[15m]) > 0 or {_n(M.xid_sticky)} == 1'),
              "critical", "GPU {{ $labels.gpu }} on {{ $labels.node }}: XID {{ $labels.xid }} (reset or reboot "
              "needed)"),
        Alert("SlurmkitGpuXid", _with_gpu_id(_xid_new(f'xid!~"{drain}"')), "warning",
              "GPU {{ $labels.gpu }} on {{ $labels.node }}: XID {{ $labels.xid }}"),
        # the value from dcgm-exporter where it exports it (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: double-bit, volatile),
        # else the hooks' (_gpu_value); the same labels either way
        Alert("SlurmkitGpuEccUncorrectable",
              _gpu_value(cluster, M.ecc_errors, DCGM.ecc_dbe_volatile, 'type="uncorrected",counter="volatile"',
                         "location", (("type", "uncorrected"), ("counter", "volatile"))) + " > 0",
              "critical", "GPU {{ $labels.gpu }} on {{ $labels.node }}: {{ $value }} uncorrectable ECC errors since "
              "the driver loaded"),
        Alert("SlurmkitGpuRowRemapFailure", _gpu_value(cluster, M.remap_failure, DCGM.remap_failure) + " == 1",
              "critical",
              "GPU {{ $labels.gpu }} on {{ $labels.node }}: row remap failed (no spare rows: RMA)"),
        Alert("SlurmkitGpuRowRemapPending", _gpu_value(cluster, M.remap_pending, DCGM.remap_pending) + " == 1",
              "warning",
              "GPU {{ $labels.gpu }} on {{ $labels.node }}: row remap pending (reset the GPU when idle)", "1h"),
        Alert("SlurmkitGpuNvlinkErrors", f"sum without (kind) (increase({_n(M.nvlink_errors)}[15m])) > 0",
              "warning", "GPU {{ $labels.gpu }} on {{ $labels.node }}: NVLink error counters growing"),
        Alert("SlurmkitGpuNvlinkDown", f'{_n(M.nvlink_links)}{{state="down"}} > 0', "critical",
              "GPU {{ $labels.gpu }} on {{ $labels.node }}: {{ $value }} NVLink link(s) down"),
        # the board by name where the hooks know it (slurmkit_gpu_lost: lost, or missing against the baseline), the
        # node's count only where they do not: one alert per missing board
        Alert("SlurmkitGpuMissing",
              f"{_n(M.gpu_lost)} == 1 or ({_n(M.gpus_present)} < on (node) group_left {_n(M.gpus_expected)} "
              f"unless on (node) {_n(M.gpu_lost)} == 1)",
              "critical", "{{ $labels.node }}: {{ if $labels.gpu }}GPU {{ $labels.gpu }} (serial {{ $labels.serial }}, "
              "{{ $labels.uuid }}){{ else }}a GPU{{ end }} is missing or lost"),
        Alert("SlurmkitGpuTooHot", _gpu_value(cluster, M.temperature, DCGM.temperature) + f" >= {mon.gpu_temp_max_c}",
              "warning",
              f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.node }}}}: {{{{ $value }}}}C (limit {mon.gpu_temp_max_c}C)",
              "5m"),
        Alert("SlurmkitGpuPcieDegraded",
              f'{_n(M.pcie_width)}{{which="current"}} < ignoring (which) {_n(M.pcie_width)}{{which="max"}}',
              "warning", "GPU {{ $labels.gpu }} on {{ $labels.node }}: PCIe link narrower than its maximum", "10m"),
        Alert("SlurmkitIbPortDown", f'node_infiniband_state_id{{job="{JOB_NODE}"}} != 4', "critical",
              "{{ $labels.instance }} {{ $labels.device }} port {{ $labels.port }} is not ACTIVE", "2m"),
        Alert("SlurmkitIbPortFlapping", "increase(node_infiniband_link_downed_total[1h]) > 2", "warning",
              "{{ $labels.instance }} {{ $labels.device }} port {{ $labels.port }}: link went down "
              "{{ $value }} times in an hour"),
        Alert("SlurmkitIbCheckFailing", f'{_n(M.check_status)}{{hook="health",check="ib",state="fail"}} == 1',
              "warning", "{{ $labels.node }}: the health check's IB check fails (state, rate or MTU)"),
        # why, in the labels: the check that asked for the drain (slurmkit_node_drain_info, present while drained);
        # Slurm's reason text is the drain_reason annotation (a label would start a new alert when Slurm rewords it).
        # Not while a critical GPU alert of the node fires, nor for the resume window after it (Prometheus' own
        # ALERTS series): that page already says why the node is drained, and after its fix the node stays drained
        # for resume_after_passes health runs -- a drained alert then would be a second notification of a fault
        # already fixed (alertmanager.yml inhibits it too, while the GPU alert stands)
        Alert("SlurmkitNodeDrainedByHealth",
              f"(max by (node, check) ({_n(M.drain_info)} and on (node) {_n(M.drained)} == 1) "
              f"or on (node) ({_n(M.drained)} == 1)) unless on (node) max by (node) (max_over_time("
              f'ALERTS{{alertstate="firing",severity="critical",alertname=~"{GPU_CRITICAL}"}}'
              f"[{_resume_window(cluster)}]))", "warning",
              "{{ $labels.node }} is drained by slurmkit's health check {{ $labels.check }}: " + DRAIN_REASON),
        Alert("SlurmkitNodeDown", f'up{{job="{JOB_NODE}"}} == 0', "critical",
              "{{ $labels.node }}: node_exporter does not answer", "2m"),
        # Slurm's own view (the exporter's per-node state): slurmd killed or its host gone, slurmctld marks the node
        # NOT_RESPONDING ('*' in sinfo) and DOWN after SlurmdTimeout (slurm.conf(5)), while node_exporter may answer;
        # a node Slurm keeps powered down (power saving) is not responding by design and only alerts once DOWN
        # (a failed resume: "ResumeTimeout reached"). One series per node (max by node): IDLE* turning DOWN* after
        # SlurmdTimeout changes its state and reason labels, and must not resolve and fire again
        Alert("SlurmkitNodeDownInSlurm",
              f'max by (node) ({_n(M.node_state)}{{state="down"}} or {_n(M.node_state)}'
              '{flags=~"(.+[+])?NOT_RESPONDING([+].+)?",flags!~".*POWER.*"}) == 1', "critical",
              "{{ $labels.node }}: Slurm marks it DOWN or not responding (see `scontrol show node {{ $labels.node }}`)",
              "2m"),
        Alert("SlurmkitHealthHookSlow", f"{_n(M.run_duration)} > {mon.hook_slow_s:g}" + _unless_ctld(cluster), "warning",
              "{{ $labels.node }}: the {{ $labels.hook }} hook took {{ $value }}s"),
        Alert("SlurmkitHealthHookFailing", f"({_n(M.bookkeeping)} > 0 or {_n(M.check_status)}"
              '{hook="health",check="state",state!="ok"} == 1)' + _unless_ctld(cluster), "warning",
              "{{ $labels.node }}: the {{ $labels.hook }} hook cannot write its state"),
        Alert("SlurmkitTenantAtQuotaPending",
              f'max by (account) ({_n(M.pending_oldest)}{{reason=~"(Assoc|QOS)Grp.*"}}) > {mon.quota_pending_for_s}',
              "warning", "account {{ $labels.account }} is at its GPU quota with GPU jobs pending for "
              "{{ $value | humanizeDuration }}", per_node=False),
        Alert("SlurmkitFragmentationBlocksJob",
              f"{_n(M.pending_largest)} > {_n(M.largest_leaf)} and {_n(M.pending_largest)} <= {_n(M.largest_any)}",
              "warning", "a {{ $value }}-node GPU job pends: enough nodes are free, but on no single leaf", "30m",
              per_node=False),
        # fewer spare nodes than capacity.reserve_pct plans, for 30 minutes: a peak or the next maintenance swap has
        # no room (issue 39 item 2); a burst of jobs that takes the spares for minutes is not one. One alert per
        # group, not per exporter: an HA pair's two exporters (monitoring.exporter, one instance each) count the same
        # slurmctld's nodes, so max by (group) -- the group is below plan when even the higher count is
        Alert("SlurmkitReserveBelowPlan",
              f"max by (group) ({_n(M.reserve_spare)}) < max by (group) ({_n(M.reserve_planned)})", "warning",
              "node group {{ $labels.group }}: {{ $value }} spare node(s), below its planned reserve of "
              f"{{{{ with printf `max({_n(M.reserve_planned)}{{group=%q}})` $labels.group | query }}}}"
              "{{ . | first | value }}{{ end }} (capacity.reserve_pct)", "30m", per_node=False),
        Alert("SlurmkitBmcFanFailed", f'{_n(M.bmc_finding)}{{check="fan_failed"}} == 1', "critical",
              "{{ $labels.node }}: a fan failed or stopped (BMC)"),
        Alert("SlurmkitBmcPsuRedundancyLost", f'{_n(M.bmc_finding)}{{check="psu_redundancy_lost"}} == 1', "warning",
              "{{ $labels.node }}: a power supply failed or PSU redundancy is lost (BMC)"),
        Alert("SlurmkitBmcInletHot", f'{_n(M.bmc_finding)}{{check="inlet_over_limit"}} == 1', "warning",
              "{{ $labels.node }}: inlet temperature over the limit (BMC)", "5m"),
        Alert("SlurmkitBmcDown", f"{_n(M.bmc_up)} == 0", "warning",
              "{{ $labels.node }}: its BMC does not answer ({{ $labels.source }})", "10m"),
        Alert("SlurmkitExporterDown", f'up{{job="{JOB_EXPORTER}"}} == 0', "critical",
              "slurmkit exporter {{ $labels.instance }} does not answer", "2m", per_node=False),
        # the exporter answers but slurmctld does not (down, or hung: the exporter then serves its last answer,
        # slurmkit_exporter_last_success_age_seconds old): the controller outage alertmanager.yml inhibits every
        # per-node alert that reads slurmctld with, so it pages once, not once per node
        Alert("SlurmkitSlurmctldUnreachable", f"{_n(M.up)} == 0", "critical",
              "slurmctld does not answer the exporter {{ $labels.instance }} (last answer "
              f"{{{{ with query `max({_n(M.last_success_age)})` }}}}{{{{ . | first | value | humanizeDuration }}}}"
              "{{ end }} ago)", "2m", per_node=False),
    ]
    if mon.dcgm_exporter:
        # the GPU rules fall back to the hooks' series while a node's dcgm-exporter is away (_gpu_value), but its
        # dashboards' power, utilisation, memory and clocks (and the hpc_job labels) have no other source
        a.append(Alert("SlurmkitDcgmExporterDown", f'up{{job="{JOB_DCGM}"}} == 0', "warning",
                       "{{ $labels.node }}: dcgm-exporter does not answer (GPU rules use the hooks' readings)", "10m"))
    if cluster.hooks.healthcheck_interval:
        stale = 3 * cluster.hooks.healthcheck_interval
        a.append(Alert("SlurmkitHealthHookStale",
                       f'time() - {_n(M.last_run)}{{hook="health"}} > {stale}' + _unless_ctld(cluster), "warning",
                       f"{{{{ $labels.node }}}}: no health check run for more than {stale}s "
                       f"(HealthCheckInterval={cluster.hooks.healthcheck_interval})"))
    return a


def rules_yaml(cluster: Cluster) -> str:
    rules = []
    for al in alerts(cluster):
        r: dict[str, Any] = {"alert": al.name, "expr": al.expr}
        if al.for_ != "0m":
            r["for"] = al.for_
        r["labels"] = {"severity": al.severity}
        r["annotations"] = {"summary": al.summary, "runbook_url": runbook_url(cluster, al.name)}
        if al.per_node:
            r["annotations"]["drain_reason"] = DRAIN_REASON
        rules.append(r)
    return _header(cluster) + yaml.safe_dump({"groups": [{"name": "slurmkit", "rules": rules}]}, sort_keys=False,
                                             width=200)


def runbook_url(cluster: Cluster, alert: str) -> str:
    """The alert's section of docs/runbooks.md (one section per alert, its heading the alert's name: the anchor
    GitHub and mkdocs make of it is the name in lower case), under ``monitoring.runbook_base_url``."""
    return f"{cluster.monitoring.runbook_base_url}#{alert.lower()}"


def _header(cluster: Cluster) -> str:
    from slurmkit import __version__

    return (f"# generated by slurmkit {__version__} from {cluster.source_sha256 or 'an inventory'}; do not edit\n")


def prometheus_yaml(cluster: Cluster, rules_path: str = RULES_FILE,
                    node_targets: dict[str, str] | None = None, alertmanagers: list[str] | None = None) -> str:
    """``node_targets``: node -> host:port of its node_exporter (the lab's ports); default host:node_exporter_port.
    ``alertmanagers``: host:port of each Alertmanager (the lab's); default monitoring.alertmanager."""
    mon = cluster.monitoring
    hosts = [h for g in cluster.node_groups for h in g.hostnames]
    targets = node_targets or {h: f"{h}:{mon.node_exporter_port}" for h in hosts}
    # one static group per node so every series carries node="<name>" (the label the hooks' textfiles use too)
    # the hooks' textfile series carry node= too: Prometheus keeps the target's and renames the scraped one to
    # exported_node (scrape_config honor_labels: false, "renaming conflicting labels in the scraped data to
    # exported_<original-label>"), a duplicate of node on every hook series. The target's node is the host scraped,
    # the truth about where a series came from: the copy is dropped (RE2 has no back-reference to drop it only
    # where it equals node)
    scrape: list[dict[str, Any]] = [{
        "job_name": JOB_NODE,
        "static_configs": [{"targets": [targets[h]], "labels": {"node": h}} for h in hosts if h in targets],
        "metric_relabel_configs": [{"action": "labeldrop", "regex": "exported_node"}],
    }]
    if mon.dcgm_exporter:
        from slurmkit.hostlist import expand

        dcgm = hosts if mon.dcgm_exporter == "all" else expand(mon.dcgm_exporter)
        # NVIDIA dcgm-exporter's default listen address is :9400 (README "Quickstart"); its own labels say
        # Hostname, ours node
        scrape.append({"job_name": JOB_DCGM,
                       "static_configs": [{"targets": [f"{h}:{mon.dcgm_exporter_port}"], "labels": {"node": h}}
                                          for h in dcgm]})
    if slurm_metrics_on(cluster):
        # slurmctld's own endpoint, on its port (SlurmctldPort), one target per category (__metrics_path__ per static
        # group); every 60 s at least: the Metrics Guide asks for 60-120 s ("Performance Impact": each scrape takes
        # slurmctld's locks). Only the first SlurmctldHost: a standby answers 303 to the primary (metrics.shtml
        # "Standby Controllers"), which Prometheus follows
        ctl = cluster.controller
        scrape.append({"job_name": JOB_SLURM, "scrape_interval": f"{max(60, mon.scrape_interval_s)}s",
                       "static_configs": [{"targets": [f"{ctl.hosts[0]}:{ctl.port}"],
                                           "labels": {"__metrics_path__": f"/metrics/{e}", "endpoint": e}}
                                          for e in SLURM_ENDPOINTS]})
    if mon.exporter:
        scrape.append({"job_name": JOB_EXPORTER, "honor_labels": True,
                       "static_configs": [{"targets": list(mon.exporter)}]})
    conf = {
        "global": {"scrape_interval": f"{mon.scrape_interval_s}s", "evaluation_interval": f"{mon.scrape_interval_s}s",
                   "external_labels": {"cluster": cluster.name}},
        "rule_files": [rules_path],
        # the Alertmanager(s) the alertmanager.yml beside this file configures (Prometheus' alerting section,
        # alertmanager_config static_configs)
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers or mon.alertmanager)}]}]},
        "scrape_configs": scrape,
    }
    return _header(cluster) + yaml.safe_dump(conf, sort_keys=False, width=200)


# --- alertmanager.yml -------------------------------------------------------------------------------------------

# alerts the controller's outage explains: each reads slurmctld (the exporter's series, the health hook's Slurm state
# and drain; a hook waiting out its scontrol timeout is slow) and would fire once per node while
# SlurmkitSlurmctldUnreachable stands
_NEEDS_SLURMCTLD = ("SlurmkitNodeDownInSlurm", "SlurmkitNodeDrainedByHealth", "SlurmkitHealthHookFailing",
                    "SlurmkitHealthHookStale", "SlurmkitHealthHookSlow", "SlurmkitTenantAtQuotaPending",
                    "SlurmkitFragmentationBlocksJob")


@dataclass(frozen=True)
class Timing:
    """Alertmanager's route timings (its defaults: group_wait 30s, group_interval 5m, repeat_interval 4h); the lab
    shortens them so a test sees a notification and its resolution in seconds."""

    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"
    resolve_timeout: str = "5m"


def alertmanager_yaml(cluster: Cluster, timing: Timing = Timing()) -> str:
    """Routes by severity (critical pages, warning and info ticket: monitoring.alert_webhooks), one notification
    per node and alert (group_by cluster, node, alertname: the GPUs of a node with one fault arrive together; an alert
    without node groups per cluster; alertname too, because Prometheus re-sends a resolved alert every minute for 15
    minutes, and a resolved alert that re-joins a group of the node's other, current fault made Alertmanager notify
    that fault a second time -- measured on the lab: tests/integration/test_monitor_alerts_lab.py),
    and inhibition so that one outage pages once:

    - a node whose node_exporter does not answer (SlurmkitNodeDown) silences every other alert of that node;
    - a node Slurm marks DOWN or not responding (SlurmkitNodeDownInSlurm) silences the rest of that node's alerts
      (its GPUs', its hooks' staleness) but SlurmkitNodeDown (alertmanager's own rule: an alert matching both sides
      of a rule is not inhibited by one that does too, so the two rules are split);
    - slurmctld unreachable (SlurmkitSlurmctldUnreachable) silences every alert that reads slurmctld, per node or
      not (_NEEDS_SLURMCTLD);
    - a critical GPU alert on a node silences SlurmkitNodeDrainedByHealth of that node (the drain is its doing: the
      page names the GPU and carries the drain_reason annotation).

    Matchers are Alertmanager's (configuration.md, "Matcher": ``label=~"regex"``; inhibit_rules source_matchers,
    target_matchers, equal), checked by `amtool check-config`."""
    mon = cluster.monitoring
    names = [a.name for a in alerts(cluster)]

    def receiver(sev: str) -> dict[str, Any]:
        r: dict[str, Any] = {"name": f"slurmkit-{sev}"}
        if url := dict(mon.alert_webhooks).get(sev):
            r["webhook_configs"] = [{"url": url, "send_resolved": True}]
        return r

    conf = {
        "global": {"resolve_timeout": timing.resolve_timeout},
        "route": {
            "receiver": "slurmkit-warning",
            "group_by": ["cluster", "node", "alertname"],
            "group_wait": timing.group_wait, "group_interval": timing.group_interval,
            "repeat_interval": timing.repeat_interval,
            "routes": [{"receiver": f"slurmkit-{sev}", "matchers": [f'severity="{sev}"']}
                       for sev in ("critical", "warning", "info")],
        },
        "inhibit_rules": [
            {"source_matchers": ['alertname="SlurmkitNodeDown"'], "target_matchers": ['alertname!="SlurmkitNodeDown"'],
             "equal": ["cluster", "node"]},
            {"source_matchers": ['alertname="SlurmkitNodeDownInSlurm"'],
             "target_matchers": ['alertname!~"SlurmkitNodeDown|SlurmkitNodeDownInSlurm"'], "equal": ["cluster", "node"]},
            {"source_matchers": ['alertname="SlurmkitSlurmctldUnreachable"'],
             "target_matchers": [f'alertname=~"{"|".join(n for n in _NEEDS_SLURMCTLD if n in names)}"'],
             "equal": ["cluster"]},
            {"source_matchers": [f'alertname=~"{GPU_CRITICAL}"'],
             "target_matchers": ['alertname="SlurmkitNodeDrainedByHealth"'], "equal": ["cluster", "node"]},
        ],
        "receivers": [receiver(sev) for sev in ("critical", "warning", "info")],
    }
    return _header(cluster) + yaml.safe_dump(conf, sort_keys=False, width=200)


# --- dashboards -------------------------------------------------------------------------------------------------

# The dashboards' template variables (Grafana's $name in a query): what each selects and how "All" reads. $partition
# and $gpu send the regex .* for All (one short matcher, not 4,000 alternatives); $node's All is its current options
# (Grafana's default), the nodes of the partitions chosen.
VARIABLES = ("partition", "node", "gpu")
TOPK = 10  # per-GPU and per-node panels show this many of the worst, not one line per GPU (500 nodes x 8 GPUs)


@dataclass(frozen=True)
class Panel:
    title: str
    expr: str
    legend: str
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat

    def all(self) -> str:
        """The query as Grafana sends it with every variable at All (.*): what a test runs against Prometheus."""
        out = self.expr
        for v in VARIABLES:
            out = out.replace(f"${v}", ".*")
        return out


def _faults(expr: str) -> str:
    """A panel of only the GPUs with a fault, or one 0 where none has (``or on () vector(0)``: Grafana shows 0 for a
    healthy cluster rather than "No data", which reads as broken)."""
    return f"({expr}) or on () vector(0)"


def _on_gpus(expr: str) -> str:
    """``expr`` (per-GPU series labelled node and gpu) on the GPUs $node and $gpu select."""
    return f'(({expr}) and on (node, gpu) {_n(M.gpu_info)}{{node=~"$node",gpu=~"$gpu"}})'


def _dcgm_named(field: str) -> str:
    """dcgm-exporter's ``field`` per GPU with the hooks' names for it (nvidia<minor>@<bus>, serial ...)."""
    return f"{_dcgm(field)} * on (node, uuid) group_left (gpu, minor, pci_bus_id, serial, model) {_gpu_ids()}"


def bmc_sources(cluster: Cluster) -> bool:
    """Whether any node group names a BMC that `slurmkit bmc` reads (power provider redfish or ipmi)."""
    return any(g.power is not None and g.power.provider in ("redfish", "ipmi") for g in cluster.node_groups)


def bmc_panels() -> list[Panel]:
    """The BMC dashboard: the ``slurmkit_bmc_*`` series `slurmkit bmc --textfile` writes on the management host."""
    t = _n(M.bmc_temperature)
    return [
        Panel("Inlet temperature", f'{t}{{context="intake"}}', "{{node}} {{sensor}}", "celsius"),
        # Redfish PhysicalContext CPU, GPU, Accelerator (PhysicalContext.v1); IPMI processor entities (bmc.py)
        Panel("CPU and GPU temperature (hottest sensor)",
              f'max by (node, context) ({t}{{context=~"cpu|gpu|accelerator"}})', "{{node}} {{context}}", "celsius"),
        Panel("Fan speed", _n(M.bmc_fan_rpm), "{{node}} {{fan}}", "rotrpm"),
        Panel("Power supplies and redundancy sets not OK",
              f'sum by (node) (1 - {_n(M.bmc_sensor_ok)}{{kind=~"psu|redundancy"}})', "{{node}}"),
        Panel("Power (chassis)", f'{_n(M.bmc_power_watts)}{{kind="power"}}', "{{node}} {{sensor}}", "watt"),
        Panel("BMC findings", f"sum by (check) ({_n(M.bmc_finding)})", "{{check}}", kind="stat"),
        Panel("BMCs not answering", f"sum(1 - {_n(M.bmc_up)})", "not answering", kind="stat"),
    ]


def dashboard_panels(cluster: Cluster) -> dict[str, list[Panel]]:
    """The dashboards' queries (kept as data so a test can run every one against a real Prometheus: Panel.all()).
    Sized for 500 nodes: every per-GPU or per-node panel shows the ``TOPK`` worst (topk/bottomk, or only the GPUs
    with a fault), filtered by the $partition, $node and $gpu variables. The BMC dashboard only where the inventory
    names BMCs (``bmc_sources``): without one no ``slurmkit_bmc_*`` series exists, and a dashboard of empty panels
    would say nothing (the lab has none: its power provider is ``lab``). Power draw, utilisation, memory and clocks
    where dcgm-exporter runs (monitoring.dcgm_exporter): the hooks do not measure them."""
    k = TOPK
    part = 'partition=~"$partition"'
    node = 'node=~"$node"'
    temp = _gpu_value(cluster, M.temperature, DCGM.temperature)
    ecc = _gpu_value(cluster, M.ecc_errors, DCGM.ecc_dbe_volatile, 'type="uncorrected",counter="volatile"',
                     "location", (("type", "uncorrected"), ("counter", "volatile")))
    remap = (f"{_gpu_value(cluster, M.remap_pending, DCGM.remap_pending)} + 2 * "
             f"{_gpu_value(cluster, M.remap_failure, DCGM.remap_failure)}")
    boards = {
        "slurmkit-cluster": [
            Panel("GPUs by state", f"sum by (state) ({_n(M.cluster_gpus)}{{{part}}})", "{{state}}", kind="stat"),
            Panel("GPUs by state per partition", f"sum by (partition, state) ({_n(M.cluster_gpus)}{{{part}}})",
                  "{{partition}} {{state}}"),
            Panel("GPUs by state per GPU type", f"sum by (gpu_type, state) ({_n(M.cluster_gpus)}{{{part}}})",
                  "{{gpu_type}} {{state}}"),
            Panel("Nodes by state per partition", f"sum by (partition, state) ({_n(M.cluster_nodes)}{{{part}}})",
                  "{{partition}} {{state}}"),
            Panel("Running GPUs per account", f'sum by (account) ({_n(M.job_gpus)}{{state="running"}})',
                  "{{account}}"),
            Panel("Pending GPU jobs by reason", f"sum by (reason) ({_n(M.pending_reason)})", "{{reason}}"),
            Panel("Free whole nodes per leaf", f"{_n(M.leaf_free_nodes)}", "{{switch}}"),
            Panel("Largest job that can start now (nodes)",
                  f'label_replace({_n(M.largest_leaf)}, "where", "one leaf", "", "") or '
                  f'label_replace({_n(M.largest_any)}, "where", "anywhere", "", "")', "{{where}}"),
            Panel("Nodes drained by slurmkit", f"sum({_n(M.drained)}{{{node}}})", "drained", kind="stat"),
        ],
        "slurmkit-node-health": [
            Panel(f"GPU temperature ({k} hottest)", f"topk({k}, {_on_gpus(temp)})", "{{node}} {{gpu}}", "celsius"),
            Panel("GPU temperature (hottest and median)",
                  f'label_replace(max({_on_gpus(temp)}), "of", "hottest", "", "") or '
                  f'label_replace(quantile(0.5, {_on_gpus(temp)}), "of", "median", "", "")', "{{of}}", "celsius"),
            Panel("Uncorrectable ECC (volatile), GPUs with any", _faults(f"topk({k}, {_on_gpus(ecc)} > 0)"),
                  "{{node}} {{gpu}}"),
            Panel("Row remap pending (1) / failed (2+), GPUs with one", _faults(f"topk({k}, {_on_gpus(remap)} > 0)"),
                  "{{node}} {{gpu}}"),
            Panel("XIDs (last hour)", f'topk({k}, sum by (node, xid) ({_xid_new(node, "1h")}))',
                  "{{node}} xid{{xid}}"),
            Panel("NVLink links down, GPUs with any",
                  _faults(f'topk({k}, {_n(M.nvlink_links)}{{state="down",{node},gpu=~"$gpu"}} > 0)'), "{{node}} {{gpu}}"),
            Panel("PCIe narrower than its maximum",
                  _faults(f'topk({k}, {_n(M.pcie_width)}{{which="current",{node},gpu=~"$gpu"}} < ignoring (which) '
                          f'{_n(M.pcie_width)}{{which="max"}})'), "{{node}} {{gpu}}"),
            Panel("GPUs by power limit", f'count_values("watts", {_n(M.power_limit)}{{{node},gpu=~"$gpu"}})',
                  "{{watts}} W"),
            Panel("Failing checks", f'sum by (node, check) ({_n(M.check_status)}{{state="fail",{node}}} '
                  f"and on (node, hook) {_latest_run()})", "{{node}} {{check}}"),
            Panel(f"Health hook run time ({k} slowest)", f"topk({k}, {_n(M.run_duration)}{{{node}}})",
                  "{{node}} {{hook}}", "s"),
        ],
        "slurmkit-tenants": [
            Panel("GPUs in use per account", f'sum by (account) ({_n(M.job_gpus)}{{state="running"}})',
                  "{{account}}"),
            Panel("Use against quota", f'sum by (account) ({_n(M.job_gpus)}{{state="running"}}) / on (account) '
                  f"{_n(M.account_quota)}", "{{account}}", "percentunit"),
            Panel("Pending GPUs per account", f'sum by (account) ({_n(M.job_gpus)}{{state="pending"}})',
                  "{{account}}"),
            Panel("Jobs per account and state", f"sum by (account, state) ({_n(M.jobs)})", "{{account}} {{state}}"),
        ],
    }
    if cluster.monitoring.dcgm_exporter:
        # dcgm-exporter's own measurements (its default counters, etc/default-counters.csv): power in W, GPU_UTIL
        # in %, framebuffer in MiB, SM clock in MHz; hpc_job where the hooks write the job mapping files
        util = f'{DCGM.utilisation}{{job="{JOB_DCGM}",{node}}}'
        boards["slurmkit-gpu-usage"] = [
            Panel("GPU power draw (cluster)", f"sum({_dcgm(DCGM.power)})", "watts", "watt", kind="stat"),
            Panel(f"GPU power draw ({k} highest)", f"topk({k}, {_on_gpus(_dcgm_named(DCGM.power))})",
                  "{{node}} {{gpu}}", "watt"),
            Panel("GPU utilisation (cluster average)", f"avg({_dcgm(DCGM.utilisation)})", "utilisation",
                  "percent", kind="stat"),
            Panel(f"GPU utilisation per node ({k} least busy)",
                  f"bottomk({k}, avg by (node) (max by (node, UUID) ({util})))", "{{node}}", "percent"),
            Panel(f"GPU utilisation per job ({k} least busy)",
                  f'bottomk({k}, avg by (hpc_job) ({util[:-1]},hpc_job!=""}}))', "job {{hpc_job}}", "percent"),
            Panel(f"GPU memory used ({k} fullest)",
                  f"topk({k}, {_on_gpus(_dcgm_named(DCGM.fb_used))} / on (node, gpu) "
                  f"({_dcgm_named(DCGM.fb_used)} + on (node, gpu) {_dcgm_named(DCGM.fb_free)}))",
                  "{{node}} {{gpu}}", "percentunit"),
            Panel(f"SM clock ({k} lowest)", f"bottomk({k}, {_on_gpus(_dcgm_named(DCGM.sm_clock))})",
                  "{{node}} {{gpu}}", "rotmhz"),
        ]
    if slurm_metrics_on(cluster):
        boards["slurmkit-slurmctld"] = slurm_panels(cluster)
    if bmc_sources(cluster):
        boards["slurmkit-bmc"] = bmc_panels()
    return boards


def slurm_panels(cluster: Cluster) -> list[Panel]:
    """slurmctld's own series (metrics.SLURM): its view of the nodes, CPUs left beside free GPUs (26.05: per-node
    GPUs), the scheduler's cycles and queues, slurmctld's threads and the slurmdbd backlog."""
    from slurmkit.release import features_for

    k, node = TOPK, 'node=~"$node"'
    states = " or ".join(f'label_replace({m}, "state", "{st}", "", "")' for st, m in (
        ("down", SLURM.nodes_down), ("drain", SLURM.nodes_drain), ("not responding", SLURM.nodes_noresp),
        ("idle", SLURM.nodes_idle), ("allocated", SLURM.nodes_alloc), ("mixed", SLURM.nodes_mixed)))
    out = [
        Panel("Nodes by state (slurmctld)", f"max by (state) ({states})", "{{state}}"),
        Panel("Jobs running and pending (slurmctld)",
              f'label_replace({SLURM.jobs_running}, "state", "running", "", "") or '
              f'label_replace({SLURM.jobs_pending}, "state", "pending", "", "")', "{{state}}"),
        Panel("Pending jobs per partition", f'{SLURM.partition_jobs_pending}{{partition=~"$partition"}}',
              "{{partition}}"),
        Panel(f"Idle CPUs per node ({k} fewest)", f"bottomk({k}, {SLURM.node_cpus_idle}{{{node}}})", "{{node}}"),
        Panel("Scheduling cycle, last (main and backfill)",
              f'label_replace({SLURM.schedule_cycle_last}, "cycle", "main", "", "") or '
              f'label_replace({SLURM.bf_cycle_last}, "cycle", "backfill", "", "")', "{{cycle}}", "µs"),
        Panel("Queues: scheduler, RPC agent, slurmdbd",
              f'label_replace({SLURM.schedule_queue_len}, "queue", "schedule", "", "") or '
              f'label_replace({SLURM.agent_queue_size}, "queue", "agent", "", "") or '
              f'label_replace({SLURM.slurmdbd_queue_size}, "queue", "slurmdbd", "", "")', "{{queue}}"),
        Panel("slurmctld server threads", SLURM.server_thread_cnt, "threads"),
    ]
    if features_for(cluster.slurm_version).openmetrics_node_gpus and cluster.accounting is not None:
        # a node with free GPUs and no CPU left to give them: GPUs idle because CPUs are gone (26.05's per-node GPUs).
        # slurm_node_gpus counts the gres/gpu TRES (src/slurmctld/statistics.c at slurm-26-05-3-1:791-793), which
        # needs slurmdbd: AccountingStorageTRES=gres/gpu without it is fatal ("slurmdbd is required to run with TRES
        # gres/gpu", controller.c:2450), and without that TRES every node reads 0 GPUs (both measured on the lab,
        # tests/integration/test_slurm_metrics_lab.py): only with accounting
        out.append(Panel("Nodes with free GPUs but no idle CPU",
                         _faults(f"count(({SLURM.node_gpus}{{{node}}} - {SLURM.node_gpus_alloc}) > 0 "
                                 f"and on (node) {SLURM.node_cpus_idle} == 0)"), "nodes"))
        out.append(Panel(f"GPUs allocated per node ({k} least)",
                         f"bottomk({k}, {SLURM.node_gpus_alloc}{{{node}}} / on (node) ({SLURM.node_gpus} > 0))",
                         "{{node}}", "percentunit"))
    return out


def dashboards(cluster: Cluster) -> dict[str, str]:
    """Grafana dashboards built with Grafana Labs' grafana-foundation-sdk (optional dependency ``monitor``); none
    where it is not installed (it needs Python 3.11+: its metadata says Requires-Python >=3.11): the scrape config and
    the rules do not need it, and the CLI says how to get the dashboards."""
    try:
        from grafana_foundation_sdk.builders import prometheus, stat, timeseries
        from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh, VariableSort
    except ImportError:
        return {}

    ds = DataSourceRef(type_val="prometheus", uid="${datasource}")
    titles = {"slurmkit-cluster": "Cluster overview", "slurmkit-node-health": "Node health",
              "slurmkit-tenants": "Tenants", "slurmkit-bmc": "BMC sensors", "slurmkit-gpu-usage": "GPU usage",
              "slurmkit-slurmctld": "slurmctld"}
    # Grafana's Prometheus label_values(metric{matchers}, label) variable queries; refresh on time range change
    # so a node added since the dashboard loaded is offered
    queries = {"partition": f"label_values({_n(M.node_partition)}, partition)",
               "node": f'label_values({_n(M.node_partition)}{{partition=~"$partition"}}, node)',
               "gpu": f'label_values({_n(M.gpu_info)}{{node=~"$node"}}, gpu)'}
    variables = []
    for v in VARIABLES:
        var = (QueryVariable(v).label(v).datasource(ds).query(queries[v]).multi(True).include_all(True)
               .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC))
        variables.append(var if v == "node" else var.all_value(".*"))
    out: dict[str, str] = {}
    for uid, panels in dashboard_panels(cluster).items():
        d = (Dashboard(f"{cluster.name}: {titles[uid]}").uid(uid).tags(["slurmkit"]).refresh("1m")
             .time("now-6h", "now").with_variable(DatasourceVariable("datasource").type("prometheus")))
        for var in variables:
            d = d.with_variable(var)
        for p in panels:
            builder: Any = stat.Panel() if p.kind == "stat" else timeseries.Panel()
            q = prometheus.Dataquery().expr(p.expr).legend_format(p.legend).ref_id("A")
            d = d.with_panel(builder.title(p.title).unit(p.unit).datasource(ds).with_target(q))
        out[f"dashboard-{uid}.json"] = json.dumps(d.build(), cls=JSONEncoder, indent=1, sort_keys=True) + "\n"
    return out


def generate(cluster: Cluster, node_targets: dict[str, str] | None = None) -> dict[str, str]:
    files = {"prometheus.yml": prometheus_yaml(cluster, RULES_FILE, node_targets), RULES_FILE: rules_yaml(cluster),
             "alertmanager.yml": alertmanager_yaml(cluster)}
    files.update(dashboards(cluster))
    return files
