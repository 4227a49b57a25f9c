"""perftest's ``ib_write_bw`` between two nodes, one HCA port at a time: the output parser and the port list. Pure.

A slow NCCL pair says which two nodes; with several rails per node it does not say which cable. The ``hca`` level
measures each HCA port of each node with ``ib_write_bw`` (perftest, Debian package ``perftest``) against the same
HCA (rail) of a partner node, so a bad port or cable is named as ``node mlx5_3:1``, not only ``node``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# perftest's units (print_report_bw() in linux-rdma/perftest src/perftest_parameters.c): MB/sec is 2^20 bytes per
# second (format_factor 0x100000), Gb/sec (--report_gbits) 10^9 bits per second (format_factor 125000000)
BYTES_PER_S = {"MB/sec": float(1 << 20), "Gb/sec": 125e6}

_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(MB/sec|Gb/sec)\]\s+BW average\[(MB/sec|Gb/sec)\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_DEVICE = re.compile(r"Device\s*:\s*(\S+)")
_LINK = re.compile(r"^\s*Link type\s*:\s*(\S+)")


@dataclass(frozen=True)
class IbRow:
    size: int
    iterations: int
    peak_gbps: float  # 0 when perftest did not measure it (--run_infinitely, -D)
    avg_gbps: float


@dataclass(frozen=True)
class IbRun:
    device: str
    link_type: str
    unit: str  # as printed: MB/sec | Gb/sec
    rows: tuple[IbRow, ...]

    @property
    def gbps(self) -> float:
        """The run's bandwidth in Gb/s: the best average row (a sweep's plateau; a --run_infinitely run's rows are
        one size measured again and again)."""
        return max((r.avg_gbps for r in self.rows), default=0.0)


def _gbps(value: float, unit: str) -> float:
    return value * BYTES_PER_S[unit] * 8 / 1e9


def parse_ib_write_bw(text: str) -> IbRun:
    """One ``ib_write_bw`` output (client or server side). ValueError naming what is missing when there is no
    result table (the run failed: its own error lines are the better message)."""
    device = link = unit = ""
    rows: list[IbRow] = []
    for line in text.splitlines():
        if not device and (m := _DEVICE.search(line)):
            device = m.group(1)
        if not link and (m := _LINK.match(line)):
            link = m.group(1)
        if m := _HEADER.match(line):
            unit = m.group(2)
            continue
        if unit and (m := _ROW.match(line)):
            rows.append(IbRow(int(m.group(1)), int(m.group(2)), _gbps(float(m.group(3)), unit),
                              _gbps(float(m.group(4)), unit)))
    if not unit:
        raise ValueError("no '#bytes #iterations BW peak BW average' table in the ib_write_bw output")
    if not rows:
        raise ValueError("ib_write_bw printed its table header but no result row")
    return IbRun(device, link, unit, tuple(rows))


def parse_hcas(text: str) -> tuple[str, ...]:
    """``mlx5_0,mlx5_1:2`` -> ``("mlx5_0:1", "mlx5_1:2")`` (port 1 when not given, as ib_write_bw's -i)."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?::(\d+))?", item)
        if not m or (m.group(2) is not None and int(m.group(2)) < 1):
            raise ValueError(f"{item!r} is not an HCA port like mlx5_0 or mlx5_0:1")
        out.append(f"{m.group(1)}:{m.group(2) or 1}")
    return tuple(dict.fromkeys(out))


def hcas_from(nics: Iterable[tuple[str, str, str]]) -> tuple[str, ...]:
    """The compute HCA ports of the inventory's NICs ((name, kind, role)): InfiniBand and RoCE, port 1 (the
    inventory names the device, e.g. mlx5_0; a dual-port card's second port is given with --hcas)."""
    return tuple(f"{name}:1" for name, kind, role in nics if kind in ("ib", "roce") and role == "compute")
