"""The one XID table: which codes drain (hooks), which alert critical or warning (rules), what the panels count and
what docs/metrics.md lists. Pure data, no imports: the prolog's hot path reads it through the health policy.

Source: NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/, "Analyzing Xid Errors with the Xid
Catalog": each code's "Resolution Bucket (Immediate Action)": RESTART_APP, RESET_GPU, RESTART_BM, CONTACT_SUPPORT;
and "Dynamic Page Retirement / Visibility": 48 a DBE, 63 a page retired (reload the driver to activate), 64 a page
failed retirement), with AzNHC's drain list (azure_gpu_xid.nhc) for the codes a GPU must not take a job after.

Classes (every code the kernel log reports belongs to exactly one; a code listed nowhere is ``other``):

- ``drain``: the GPU needs a reset or the node a reboot before another job (DBE 48, fallen off the bus 79, NVLink
  fatal 74, contained/uncontained ECC 94/95, row-remap failure 64, GSP 119/120, unrecovered ECC 140, "GPU requires
  reset" 154, GPU stopped processing 46, ...): the hooks drain and keep it sticky; the rule alerts critical.
- ``reset``: a repair recorded that takes effect at the next GPU reset (63: row-remapping / page-retirement recording
  event, A100+: "New row marked for remapping, reset gpu to activate"). NVIDIA's A100 memory error management says
  unaffected applications keep running and new work may start while it is pending: a WARN in the hooks (the same
  rule as remapped_rows pending), a warning alert, never silent.
- ``other``: application and driver events (13 graphics engine exception, 31 MMU fault, 43 GPU stopped by the
  application, 45 preemptive cleanup, ...): usually the job's own fault (RESTART_APP); a WARN and a warning alert.
"""

from __future__ import annotations

DRAIN = (46, 48, 56, 57, 58, 62, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120, 140, 154)
RESET = (63,)
CLASSES = ("drain", "reset", "other")
SEVERITY = {"drain": "critical", "reset": "warning", "other": "warning"}
ABOUT = {
    "drain": "the GPU needs a reset or the node a reboot: the hooks drain the node and keep the XID sticky until "
             "`slurmkit check --clear-xid` or a reboot",
    "reset": "a repair recorded for the next GPU reset (row remap / page retirement): a WARN, reset when idle",
    "other": "an application or driver event (NVIDIA's RESTART_APP bucket, e.g. 13, 31, 43, 45): a WARN",
}


def xid_class(code: int, drain: tuple[int, ...] | frozenset[int] = DRAIN) -> str:
    """``drain`` codes may be the site's own (``hooks.checks.xid.codes``)."""
    if code in drain:
        return "drain"
    return "reset" if code in RESET else "other"


def markdown(drain: tuple[int, ...] = DRAIN) -> str:
    """The XID classes for docs/metrics.md (generated with the metric table)."""
    rows = ["| XID class | codes | alert | what it means |", "|---|---|---|---|"]
    codes = {"drain": ", ".join(map(str, drain)), "reset": ", ".join(map(str, RESET)), "other": "every other code"}
    for c in CLASSES:
        rows.append(f"| {c} | {codes[c]} | {SEVERITY[c]} | {ABOUT[c]} |")
    return "\n".join(rows) + "\n"
