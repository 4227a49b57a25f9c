"""Run outputs: one JSON record, a Prometheus textfile for node_exporter, one log line (stderr + syslog)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from slurmkit.health.result import Action, CheckResult, Status

# One series per state (the Prometheus enum pattern): an alert on state="fail" never fires on SKIP, which the old
# single gauge (3 = skip, above 2 = fail) did for `>= 2`.
STATES = (Status.OK, Status.WARN, Status.FAIL, Status.SKIP)


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


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(report: Report) -> str:
    """Metrics named ``slurmkit_health_*``; labels node, hook (and check). One file per hook so runs do not clobber."""
    node, hook = _esc(report.node), _esc(report.hook)
    base = f'node="{node}",hook="{hook}"'
    lines = [
        "# HELP slurmkit_health_check_status 1 for the state one check is in (ok, warn, fail, skip), 0 for the others.",
        "# TYPE slurmkit_health_check_status gauge",
    ]
    lines += [f'slurmkit_health_check_status{{{base},check="{_esc(r.name)}",state="{s.label.lower()}"}} '
              f'{1 if r.status == s else 0}' for r in report.results for s in STATES]
    lines += [
        "# HELP slurmkit_health_check_duration_seconds Wall time of one check's gather and evaluation.",
        "# TYPE slurmkit_health_check_duration_seconds gauge",
    ]
    lines += [f'slurmkit_health_check_duration_seconds{{{base},check="{_esc(r.name)}"}} {r.duration_s:.6f}'
              for r in report.results]
    lines += [
        "# HELP slurmkit_health_action What the run asked for: 0 none, 1 warn, 2 drain, 3 drain+reboot.",
        "# TYPE slurmkit_health_action gauge",
        f"slurmkit_health_action{{{base}}} {int(report.action)}",
        "# HELP slurmkit_health_run_duration_seconds Wall time of the whole hook run.",
        "# TYPE slurmkit_health_run_duration_seconds gauge",
        f"slurmkit_health_run_duration_seconds{{{base}}} {report.duration_s:.6f}",
        "# HELP slurmkit_health_last_run_timestamp_seconds When the hook last ran (epoch).",
        "# TYPE slurmkit_health_last_run_timestamp_seconds gauge",
        f"slurmkit_health_last_run_timestamp_seconds{{{base}}} {report.started:.3f}",
        "# HELP slurmkit_health_nvml_init_seconds nvmlInit and the device scan, timed inside the NVML worker.",
        "# TYPE slurmkit_health_nvml_init_seconds gauge",
        *([f"slurmkit_health_nvml_init_seconds{{{base}}} {report.nvml_init_s:.6f}"]
          if report.nvml_init_s is not None else []),
        "# HELP slurmkit_health_bookkeeping_errors State slurmkit could not write this run (records, history, cursor).",
        "# TYPE slurmkit_health_bookkeeping_errors gauge",
        f"slurmkit_health_bookkeeping_errors{{{base}}} {len(report.bookkeeping)}",
        "# HELP slurmkit_health_exit_code The hook's exit status.",
        "# TYPE slurmkit_health_exit_code gauge",
        f"slurmkit_health_exit_code{{{base}}} {report.exit_code}",
    ]
    return "\n".join(lines) + "\n"


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
