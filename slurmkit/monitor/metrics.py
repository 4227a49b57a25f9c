"""Every metric slurmkit exposes, in one pure table: name, type, help, labels, and who writes it.

The hooks' textfile writer, the cluster exporter, the alert rules and the dashboards all take their names from here
(``M.<attr>.name``), so a renamed metric cannot leave a rule or a panel behind; tests check every expression of
every rule and panel names only metrics of this table.

Conventions (https://prometheus.io/docs/practices/naming/): base units in the name (``_celsius``, ``_watts``,
``_seconds``), counters end in ``_total``, an ``_info`` series is a constant 1 carrying labels. Where NVIDIA's
dcgm-exporter exports the same field, ``dcgm`` names it (its default counters file, etc/default-counters.csv) so a
site running both can join them: dcgm-exporter labels a GPU with ``gpu`` (index), ``UUID``, ``pci_bus_id`` and
``Hostname``; ours are ``gpu``, ``uuid``, ``pci_bus_id`` and ``node`` (``label_replace`` maps one onto the other).
"""

from __future__ import annotations

from dataclasses import dataclass

# A GPU's identity on every per-GPU series: ``gpu`` is the name drain reasons use, ``nvidia<minor>@<bus>`` (gpuid.py:
# the /dev/nvidiaN minor that gres.conf and the job see, and the slot), never NVML's index, which shifts down when a
# GPU before it drops out (index 6 becomes 5: every later GPU's series would be new ones, their alerts resolve and
# fire again, and name the wrong board); ``minor``, ``pci_bus_id``, ``uuid`` and ``serial`` (the RMA form's) where
# NVML reads them ("" where not). A lost or missing GPU keeps them on slurmkit_gpu_lost.
GPU_LABELS = ("node", "gpu", "minor", "uuid", "pci_bus_id", "serial", "model")


@dataclass(frozen=True)
class Metric:
    name: str
    type: str  # "gauge" | "counter" (an ``_info`` series is a gauge of value 1)
    help: str
    labels: tuple[str, ...]
    source: str  # "hook" (node textfile, written by the health hooks), "exporter" (slurmkit exporter), "bmc"
    dcgm: str = ""  # dcgm-exporter's field for the same value, where there is one


def _m(name: str, type_: str, help_: str, labels: tuple[str, ...], source: str, dcgm: str = "") -> Metric:
    if type_ == "counter" and not name.endswith("_total"):
        raise ValueError(f"counter {name} must end in _total")
    return Metric(name, type_, help_, labels, source, dcgm)


class M:
    """The table. Attribute names are short handles; ``.name`` is the exposed metric name."""

    # --- per node, from the health hooks (one textfile per node and hook) ------------------------------------------
    info = _m("slurmkit_info", "gauge", "slurmkit and the NVIDIA driver on this node (constant 1).",
              ("node", "version", "driver"), "hook")
    check_status = _m("slurmkit_health_check_status", "gauge",
                      "1 for the state one check is in (ok, warn, fail, skip), 0 for the others.",
                      ("node", "hook", "check", "state"), "hook")
    check_duration = _m("slurmkit_health_check_duration_seconds", "gauge",
                        "Wall time of one check's gather and evaluation.", ("node", "hook", "check"), "hook")
    action = _m("slurmkit_health_action", "gauge",
                "What the run asked for: 0 none, 1 warn, 2 drain, 3 drain+reboot (not what Slurm did: see "
                "slurmkit_node_drained).", ("node", "hook"), "hook")
    run_duration = _m("slurmkit_health_run_duration_seconds", "gauge", "Wall time of the whole hook run.",
                      ("node", "hook"), "hook")
    last_run = _m("slurmkit_health_last_run_timestamp_seconds", "gauge", "When the hook last ran (epoch).",
                  ("node", "hook"), "hook")
    nvml_init = _m("slurmkit_health_nvml_init_seconds", "gauge",
                   "nvmlInit and the device scan, timed inside the NVML worker.", ("node", "hook"), "hook")
    bookkeeping = _m("slurmkit_health_bookkeeping_errors", "gauge",
                     "State slurmkit could not write this run (records, history, cursor).", ("node", "hook"), "hook")
    exit_code = _m("slurmkit_health_exit_code", "gauge", "The hook's exit status.", ("node", "hook"), "hook")
    drained = _m("slurmkit_node_drained", "gauge",
                 "1 while the node is drained by slurmkit (our reason, or Slurm's hook-error drain after our failed "
                 "hook), as the health check read it from slurmctld; 0 otherwise (a refused drain is 0).",
                 ("node",), "hook")
    drain_info = _m("slurmkit_node_drain_info", "gauge",
                    "Present (1) while slurmkit_node_drained is 1: the check that asked for it and Slurm's reason.",
                    ("node", "check", "reason"), "hook")
    gpus_present = _m("slurmkit_node_gpus", "gauge", "GPUs NVML answers for (usable, lost ones excluded).",
                      ("node",), "hook")
    gpus_expected = _m("slurmkit_node_gpus_expected", "gauge", "GPUs the inventory says this node has.",
                       ("node",), "hook")
    gpu_lost = _m("slurmkit_gpu_lost", "gauge",
                  "1 for a GPU NVML lists but cannot use (GpuIsLost, handle error) or no longer lists (missing "
                  "against the node's baseline or hooks.checks.gpu_count.bus_ids), with the labels it had.",
                  GPU_LABELS, "hook")
    # --- per GPU (raw values the health checks gather; written by the health hook, which sees every GPU) -----------
    gpu_info = _m("slurmkit_gpu_info", "gauge",
                  "One series per GPU: its name (nvidia<minor>@<bus>), minor, UUID, PCI bus id, serial and model.",
                  GPU_LABELS, "hook")
    temperature = _m("slurmkit_gpu_temperature_celsius", "gauge", "GPU core temperature.", GPU_LABELS, "hook",
                     "DCGM_FI_DEV_GPU_TEMP")
    power_limit = _m("slurmkit_gpu_power_limit_watts", "gauge", "Enforced power limit.", GPU_LABELS, "hook",
                     "DCGM_FI_DEV_ENFORCED_POWER_LIMIT")
    power_default = _m("slurmkit_gpu_power_default_limit_watts", "gauge", "Default power limit of the board.",
                       GPU_LABELS, "hook", "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF")
    ecc_mode = _m("slurmkit_gpu_ecc_enabled", "gauge", "1 when ECC is on (current mode).", GPU_LABELS, "hook")
    ecc_errors = _m("slurmkit_gpu_ecc_errors_total", "counter",
                    "ECC errors by type (corrected, uncorrected), location (sram, dram, all) and counter (volatile: "
                    "since the driver loaded; aggregate: lifetime).",
                    (*GPU_LABELS, "type", "location", "counter"), "hook",
                    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL (uncorrected,all,volatile), DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, "
                    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, DCGM_FI_DEV_ECC_SBE_AGG_TOTAL")
    remapped_rows = _m("slurmkit_gpu_remapped_rows_total", "counter",
                       "Rows remapped, by the error that caused it (correctable, uncorrectable).",
                       (*GPU_LABELS, "cause"), "hook",
                       "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")
    remap_pending = _m("slurmkit_gpu_row_remap_pending", "gauge",
                       "1 while a row remap waits for a GPU reset.", GPU_LABELS, "hook", "DCGM_FI_DEV_ROW_REMAP_PENDING")
    remap_failure = _m("slurmkit_gpu_row_remap_failure", "gauge", "1 when a remap failed (no spare row left: RMA).",
                       GPU_LABELS, "hook", "DCGM_FI_DEV_ROW_REMAP_FAILURE")
    retired_pending = _m("slurmkit_gpu_retired_pages_pending", "gauge", "1 while a page retirement waits for a reset.",
                         GPU_LABELS, "hook", "DCGM_FI_DEV_RETIRED_PENDING")
    xid_errors = _m("slurmkit_gpu_xid_errors_total", "counter",
                    "XID events by code seen in the kernel log by this node's hooks (gpu: the GPU's "
                    "nvidia<minor>@<bus>, or pci<bus> / nvswitch<bus> when no GPU of this node has that bus id).",
                    ("node", "gpu", "xid"), "hook", "DCGM_FI_DEV_XID_ERRORS (the last code, a gauge)")
    xid_sticky = _m("slurmkit_gpu_xid_sticky", "gauge",
                    "1 for a critical XID that keeps the node drained until a reboot or `slurmkit check --clear-xid`.",
                    ("node", "gpu", "xid"), "hook")
    nvlink_errors = _m("slurmkit_gpu_nvlink_errors_total", "counter",
                       "NVLink error counters summed over the GPU's links, by kind (crc_flit, crc_data, replay, "
                       "recovery).", (*GPU_LABELS, "kind"), "hook",
                       "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, "
                       "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")
    nvlink_links = _m("slurmkit_gpu_nvlink_links", "gauge", "NVLink links by state (up, down).",
                      (*GPU_LABELS, "state"), "hook")
    pcie_width = _m("slurmkit_gpu_pcie_link_width", "gauge", "PCIe link width (which: current, max).",
                    (*GPU_LABELS, "which"), "hook", "DCGM_FI_DEV_PCIE_LINK_WIDTH (current)")
    pcie_gen = _m("slurmkit_gpu_pcie_link_generation", "gauge",
                  "PCIe link generation (which: current, max in this slot, gpu_max of the GPU itself).",
                  (*GPU_LABELS, "which"), "hook", "DCGM_FI_DEV_PCIE_LINK_GEN (current)")
    pcie_replays = _m("slurmkit_gpu_pcie_replays_total", "counter", "PCIe replay counter.", GPU_LABELS, "hook",
                      "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")
    fabric_state = _m("slurmkit_gpu_fabric_state", "gauge",
                      "GPU fabric registration state (NVML nvmlGpuFabricState: 0 not supported, 1 not started, "
                      "2 in progress, 3 completed); fabric_ok 1 when its status is Success.",
                      (*GPU_LABELS, "fabric_ok"), "hook")
    persistence = _m("slurmkit_gpu_persistence_mode", "gauge", "1 when persistence mode is on.", GPU_LABELS, "hook")
    clock_reasons = _m("slurmkit_gpu_clock_event_reasons", "gauge",
                       "The clocks event (throttle) reasons bit mask.", GPU_LABELS, "hook",
                       "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
    recovery = _m("slurmkit_gpu_recovery_action", "gauge",
                  "NVML's GPU recovery action (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset).",
                  GPU_LABELS, "hook")

    # --- per node, from its BMC (`slurmkit bmc`: Redfish thermal/power resources or IPMI sdr) ----------------------
    bmc_up = _m("slurmkit_bmc_up", "gauge", "1 when the node's BMC answered the last read (source: redfish, ipmi).",
                ("node", "source"), "bmc")
    bmc_temperature = _m("slurmkit_bmc_temperature_celsius", "gauge",
                         "A BMC temperature sensor (context: intake for inlet sensors, else Redfish's PhysicalContext "
                         "in lower case (cpu, gpu, exhaust, ...), cpu for an IPMI processor entity).",
                         ("node", "sensor", "context"), "bmc")
    bmc_fan_rpm = _m("slurmkit_bmc_fan_speed_rpm", "gauge", "A BMC fan's speed.", ("node", "fan"), "bmc")
    bmc_power_watts = _m("slurmkit_bmc_power_watts", "gauge",
                         "Power by the BMC: the chassis' consumption (kind power) or a supply's (kind psu).",
                         ("node", "sensor", "kind"), "bmc")
    bmc_sensor_ok = _m("slurmkit_bmc_sensor_ok", "gauge",
                       "1 while a BMC sensor (temperature, fan, psu, power, redundancy) reports OK (or is absent).",
                       ("node", "kind", "sensor"), "bmc")
    bmc_finding = _m("slurmkit_bmc_finding", "gauge",
                     "1 while a BMC health finding stands (fan_failed, psu_redundancy_lost, inlet_over_limit).",
                     ("node", "check"), "bmc")

    # --- the cluster, from `slurmkit exporter` -----------------------------------------------------------------------
    up = _m("slurmkit_exporter_up", "gauge", "1 when the last scrape's Slurm queries all answered.", (), "exporter")
    scrape_s = _m("slurmkit_exporter_query_seconds", "gauge", "Wall time of the Slurm queries behind this scrape.",
                  (), "exporter")
    last_success_age = _m("slurmkit_exporter_last_success_age_seconds", "gauge",
                          "Seconds since the last batch whose Slurm queries all answered (0 when this one did): while "
                          "slurmctld hangs or fails the exporter serves that batch's series, this old.", (), "exporter")
    scrape_errors = _m("slurmkit_exporter_query_errors_total", "counter", "Slurm queries that failed, by command.",
                       ("command",), "exporter")
    cluster_gpus = _m("slurmkit_cluster_gpus", "gauge",
                      "GPUs by state (allocated, idle, drained, down) per partition, node group and GPU type.",
                      ("partition", "group", "gpu_type", "state"), "exporter")
    cluster_nodes = _m("slurmkit_cluster_nodes", "gauge", "Nodes by Slurm base state per partition.",
                       ("partition", "state"), "exporter")
    node_state = _m("slurmkit_node_state", "gauge",
                    "1 per node: Slurm's view of it from slurmctld (state: the base state in lower case, idle, mixed, "
                    "allocated, down, ...; flags: its flags '+'-joined, DRAIN, NOT_RESPONDING, POWERED_DOWN, ...; "
                    "reason: Slurm's Reason).", ("node", "state", "flags", "reason"), "exporter")
    node_partition = _m("slurmkit_node_partition_info", "gauge",
                        "1 per node and partition it is in (slurmctld's view): what the dashboards' $partition "
                        "variable selects nodes by.", ("node", "partition"), "exporter")
    jobs = _m("slurmkit_jobs", "gauge", "Jobs by state (running, pending) per account, QOS and user (user=\"\" "
              "where PrivateData or monitoring.per_user_labels hides users).",
              ("account", "qos", "user", "state"), "exporter")
    job_gpus = _m("slurmkit_job_gpus", "gauge", "GPUs of jobs by state (running: allocated; pending: requested) per "
                  "account, QOS and user (user=\"\" where PrivateData or monitoring.per_user_labels hides users).",
                  ("account", "qos", "user", "state"), "exporter")
    pending_reason = _m("slurmkit_pending_gpu_jobs", "gauge", "Pending jobs that ask for GPUs, by Slurm's reason.",
                        ("account", "reason"), "exporter")
    pending_oldest = _m("slurmkit_pending_gpu_job_oldest_seconds", "gauge",
                        "Age of the oldest pending GPU job per account and reason.", ("account", "reason"), "exporter")
    leaf_free_nodes = _m("slurmkit_leaf_free_nodes", "gauge", "Whole nodes free (idle, no GPU allocated) per leaf "
                         "switch.", ("switch",), "exporter")
    leaf_nodes = _m("slurmkit_leaf_nodes", "gauge", "Nodes under each leaf switch.", ("switch",), "exporter")
    largest_leaf = _m("slurmkit_largest_one_leaf_job_nodes", "gauge",
                      "The most whole nodes a job can get now on a single leaf switch.", (), "exporter")
    largest_any = _m("slurmkit_largest_job_nodes", "gauge", "The most whole nodes a job can get now anywhere.",
                     (), "exporter")
    pending_largest = _m("slurmkit_pending_largest_job_nodes", "gauge",
                         "Nodes of the largest pending whole-node GPU job.", (), "exporter")
    reserve_spare = _m("slurmkit_reserve_spare_nodes", "gauge",
                       "Spare capacity now per node group: healthy idle nodes, powered up or down (idle~), as "
                       "`slurmkit report reserve` counts them.", ("group",), "exporter")
    reserve_planned = _m("slurmkit_reserve_planned_nodes", "gauge",
                         "The planned reserve per node group: capacity.reserve_pct of its nodes, rounded up.",
                         ("group",), "exporter")
    account_quota = _m("slurmkit_account_gpu_quota", "gauge", "GPUs an account may use at once (GrpTRES gres/gpu).",
                       ("account",), "exporter")
    account_gpu_hours = _m("slurmkit_account_gpu_hours", "gauge",
                           "GPU-hours used per account over the last day (sacct, where accounting runs).",
                           ("account",), "exporter")
    cluster_gpu_total = _m("slurmkit_cluster_gpus_total_capacity", "gauge", "GPUs the cluster has (configured).", (),
                           "exporter")


class DCGM:
    """dcgm-exporter's series the rules and dashboards read where ``monitoring.dcgm_exporter`` names the node: its
    default counters file (NVIDIA/dcgm-exporter etc/default-counters.csv) has every one but ROW_REMAP_PENDING (not
    listed) and ECC_DBE_VOL_TOTAL (commented out: a site enables them in its counters file), and a rule falls back to the hooks' own series per
    GPU wherever dcgm-exporter exports no such series (generate._gpu_value). Each carries ``gpu`` (DCGM's GPU id, the
    NVML index), ``UUID``, ``pci_bus_id``, ``device`` (nvidia<minor>), ``modelName``, ``Hostname``, and ``hpc_job``
    once per job where the hooks write the job mapping files (slurmkit/health/dcgmmap.py)."""

    temperature = "DCGM_FI_DEV_GPU_TEMP"  # gauge, C
    remap_failure = "DCGM_FI_DEV_ROW_REMAP_FAILURE"  # gauge, 1 when remapping failed
    remap_pending = "DCGM_FI_DEV_ROW_REMAP_PENDING"  # gauge (not in the default counters)
    ecc_dbe_volatile = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"  # counter (not in the default counters)
    power = "DCGM_FI_DEV_POWER_USAGE"  # gauge, W
    utilisation = "DCGM_FI_DEV_GPU_UTIL"  # gauge, %
    fb_used = "DCGM_FI_DEV_FB_USED"  # gauge, MiB
    fb_free = "DCGM_FI_DEV_FB_FREE"  # gauge, MiB
    sm_clock = "DCGM_FI_DEV_SM_CLOCK"  # gauge, MHz


class SLURM:
    """slurmctld's own OpenMetrics series (MetricsType=metrics/openmetrics, 25.11+; monitoring.slurm_metrics) the
    dashboards read, each a gauge named in src/plugins/metrics/openmetrics/openmetrics.c (ADD_METRIC: "slurm_" +
    name; line numbers at slurm-25-11-0-1 / slurm-26-05-3-1). Neither release publishes a per-node state (only
    cluster counts per state): SlurmkitNodeDownInSlurm stays on the exporter's slurmkit_node_state."""

    nodes_down = "slurm_nodes_down"  # /metrics/nodes, 412/414
    nodes_drain = "slurm_nodes_drain"  # 413/415 (the Drain flag)
    nodes_noresp = "slurm_nodes_noresp"  # 425/427 (Not Responding)
    nodes_idle = "slurm_nodes_idle"  # 421/423
    nodes_alloc = "slurm_nodes_alloc"  # 408/410
    nodes_mixed = "slurm_nodes_mixed"  # 424/426
    node_cpus = "slurm_node_cpus"  # {node}, 394/394
    node_cpus_idle = "slurm_node_cpus_idle"  # {node}, 397/397
    node_gpus = "slurm_node_gpus"  # {node}, 26.05 only: 398
    node_gpus_alloc = "slurm_node_gpus_alloc"  # {node}, 26.05 only: 399
    jobs_running = "slurm_jobs_running"  # /metrics/jobs, 468/471
    jobs_pending = "slurm_jobs_pending"  # 462/465
    partition_jobs_pending = "slurm_partition_jobs_pending"  # {partition}, /metrics/partitions, 505/509
    schedule_cycle_last = "slurm_schedule_cycle_last"  # /metrics/scheduler, microseconds (sdiag's), 673/679
    bf_cycle_last = "slurm_bf_cycle_last"  # microseconds, 649/655
    schedule_queue_len = "slurm_schedule_queue_len"  # 676/682
    server_thread_cnt = "slurm_server_thread_cnt"  # 691/697
    agent_queue_size = "slurm_agent_queue_size"  # 638/644
    slurmdbd_queue_size = "slurm_slurmdbd_queue_size"  # 692/698


SLURM_METRICS: frozenset[str] = frozenset(v for k, v in vars(SLURM).items() if not k.startswith("_") and
                                          isinstance(v, str))


DCGM_METRICS: frozenset[str] = frozenset(v for k, v in vars(DCGM).items() if not k.startswith("_") and
                                         isinstance(v, str))


METRICS: tuple[Metric, ...] = tuple(v for v in vars(M).values() if isinstance(v, Metric))
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Exposition:
    """Samples grouped by metric, rendered in the text exposition format 0.0.4 (HELP/TYPE once per family)."""

    def __init__(self) -> None:
        self._samples: dict[str, list[str]] = {}

    def add(self, metric: Metric, labels: dict[str, object], value: float | int | bool) -> None:
        if tuple(labels) != metric.labels:
            raise ValueError(f"{metric.name}: labels {tuple(labels)} != {metric.labels}")
        lbl = ",".join(f'{k}="{_esc(str(v))}"' for k, v in labels.items())
        v = int(value) if isinstance(value, bool) else value
        text = f"{v:.6f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)
        self._samples.setdefault(metric.name, []).append(f"{metric.name}{{{lbl}}} {text}" if lbl
                                                         else f"{metric.name} {text}")

    def names(self) -> set[str]:
        return set(self._samples)

    def text(self) -> str:
        out: list[str] = []
        for name, lines in self._samples.items():
            m = BY_NAME[name]
            out.append(f"# HELP {name} {m.help}")
            out.append(f"# TYPE {name} {m.type}")
            out.extend(lines)
        return "\n".join(out) + "\n" if out else ""


def table_markdown() -> str:
    """The metric table for docs/metrics.md (a test keeps that file equal to this)."""
    rows = ["| metric | type | labels | source | dcgm-exporter |", "|---|---|---|---|---|"]
    for m in METRICS:
        rows.append(f"| `{m.name}` | {m.type} | {', '.join(m.labels)} | {m.source} | {m.dcgm} |")
    from slurmkit.health import xidcodes

    xids = ("\n## XID classes\n\nThe one XID table (`slurmkit/health/xidcodes.py`, from NVIDIA's Xid catalogue): the "
            "hooks drain on the drain class (or the site's `hooks.checks.xid.codes`, which the rules then use too), "
            "`SlurmkitGpuXidCritical` fires on it, `SlurmkitGpuXid` on every other code, and the \"XIDs (last hour)\" "
            "panel counts every code, a GPU's first event of a code included.\n\n")
    return "\n".join(rows) + "\n" + xids + xidcodes.markdown()
