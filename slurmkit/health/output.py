"""Run outputs: one JSON record, a Prometheus textfile for node_exporter, one log line (stderr + syslog)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from slurmkit.health.result import Action, CheckResult, Status


@dataclass
class Report:
    hook: str
    node: str
    started: float  # epoch seconds
    duration_s: float
    results: list[CheckResult]
    action: Action
    reason: str  # the drain reason we would set ("" when nothing asks for a drain)
    exit_code: int
    job_id: str | None = None
    slurm: dict[str, Any] = field(default_factory=dict)  # what we asked Slurm and how it went
    notes: list[str] = field(default_factory=list)
    cleanup: dict[str, Any] = field(default_factory=dict)  # epilog: what was killed and removed (/dev/shm files)
    nvml_init_s: float | None = None  # nvmlInit + device scan as measured in the worker (the init budget's data)
    # slurmkit's own state that could not be written (records, history, cursor, textfile): reported, never a verdict
    bookkeeping: list[str] = field(default_factory=list)
    # what NVML answered ({"init": the device scan, "data": {probe: {gpu index: raw values}}}): the textfile's
    # per-GPU series; not part of the JSON record (the checks' evidence is)
    nvml: dict[str, Any] = field(default_factory=dict)
    expected_gpus: int | None = None  # the inventory's GPU count for this node
    # every GPU NVML listed: index, label (nvidia<minor>@<bus>, what reasons say), minor, pci_bus_id, uuid, serial
    gpus: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return max((r.status for r in self.results), default=Status.OK)

    def to_json(self) -> dict[str, Any]:
        return {
            "hook": self.hook,
            "node": self.node,
            "job_id": self.job_id,
            "started": round(self.started, 3),
            "duration_s": round(self.duration_s, 4),
            "status": self.status.label,
            "action": self.action.label,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "slurm": self.slurm,
            "notes": self.notes,
            "cleanup": self.cleanup,
            "nvml_init_s": self.nvml_init_s,
            "bookkeeping": self.bookkeeping,
            "gpus": self.gpus,
            "checks": [r.to_json() for r in self.results],
        }


def prometheus_text(report: Report, xid_counts: dict[str, int] | None = None) -> str:
    """The run's textfile; the metric table and the writer live in slurmkit.monitor (one table for the hooks, the
    exporter, the alert rules and the dashboards)."""
    from slurmkit.monitor.textfile import render

    return render(report, xid_counts, report.expected_gpus)


def log_line(report: Report) -> str:
    bad = [r for r in report.results if r.status in (Status.FAIL, Status.WARN)]
    detail = "; ".join(f"{r.name}: {r.summary}" for r in bad) or "all checks passed"
    job = f" job {report.job_id}" if report.job_id else ""
    slurm = f" slurm: {report.slurm['done']}" if report.slurm.get("done") else ""
    return (f"slurmkit {report.hook} {report.node}{job}: {report.status.label} action={report.action.label} "
            f"exit={report.exit_code} {report.duration_s * 1000:.0f}ms - {detail}{slurm}")


def to_syslog(line: str, failed: bool) -> None:
    if not os.path.exists("/dev/log"):
        return  # containers and the lab often have no syslog socket; stderr still carries the line
    import syslog

    syslog.openlog("slurmkit", syslog.LOG_PID, syslog.LOG_DAEMON)
    syslog.syslog(syslog.LOG_ERR if failed else syslog.LOG_INFO, line)
    syslog.closelog()
