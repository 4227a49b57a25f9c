"""Bandwidth arithmetic, the outlier rule and the expected values: pure, no I/O.

Bus bandwidth is defined as nccl-tests does (nccl-tests doc/PERFORMANCE.md, "AllReduce"): ``algbw = S / t``
(bytes per second of the buffer size S, in GB/s = 1e9 B/s) and ``busbw = algbw x 2(n-1)/n`` for all-reduce over
n ranks: the fraction of the buffer each rank must send and receive in the ideal algorithm, so that busbw is
comparable with the hardware's link bandwidth whatever n is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

GB = 1e9  # nccl-tests reports GB/s as 1e9 bytes per second


@dataclass(frozen=True)
class Point:
    """One size of a sweep: the buffer size in bytes, the mean time per all-reduce, and the two bandwidths."""

    size: int
    time_us: float
    algbw: float  # GB/s
    busbw: float  # GB/s

    def as_dict(self) -> dict[str, float]:
        return {"size": self.size, "time_us": round(self.time_us, 3), "algbw": round(self.algbw, 4),
                "busbw": round(self.busbw, 4)}


def algbw(nbytes: int, seconds: float) -> float:
    """GB/s of ``nbytes`` moved in ``seconds`` (nccl-tests' algbw)."""
    if seconds <= 0:
        raise ValueError(f"time must be > 0, got {seconds}")
    return nbytes / seconds / GB


def busbw_allreduce(alg: float, nranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw x 2(n-1)/n (0 for a single rank: nothing crosses a link)."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return alg * 2 * (nranks - 1) / nranks


def busbw_alltoall(alg: float, nranks: int) -> float:
    """nccl-tests' alltoall bus bandwidth (doc/PERFORMANCE.md, "AllToAll" shares AllGather's factor): algbw x
    (n-1)/n: each rank keeps 1/n of its buffer and sends the rest."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return alg * (nranks - 1) / nranks


OPS = ("all_reduce", "alltoall")  # nccl-tests binaries: <op>_perf


def point(size: int, seconds: float, nranks: int, bus: Callable[[float, int], float] = busbw_allreduce) -> Point:
    a = algbw(size, seconds)
    return Point(size, seconds * 1e6, a, bus(a, nranks))


def peak(points: Iterable[Point]) -> float:
    """The headline number of a sweep: its highest bus bandwidth (nccl-tests users read the large sizes)."""
    return max((p.busbw for p in points), default=0.0)


# --- the outlier rule -------------------------------------------------------------------------------------------

def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    if not s:
        raise ValueError("median of nothing")
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation (unscaled)."""
    m = median(xs)
    return median([abs(x - m) for x in xs])


@dataclass(frozen=True)
class Rule:
    """A value is slow when it is below ``median / exp(k x MAD)`` of the log values *and* below ``(1 - tol) x median``.

    The MAD term is the issue's median - k x MAD rule, taken over log(busbw): bandwidth noise is multiplicative (a
    node at half speed is as far from its peers as one at double speed), and on a noisy host the linear MAD of a
    healthy 2x spread reaches a third of the median, so median - 3 MAD falls to ~0 and hides a node 10x slower (seen
    in CI: healthy 0.55-1.15 GB/s, median 0.80, MAD 0.27, threshold 0.0005, the 0.1-CPU node at 0.078 passed). On a
    tight distribution (nccl-tests on identical nodes varies by ~1 %) log and linear agree. The relative floor keeps
    such a tight distribution from flagging a node 2 % below its peers. With fewer than three values there is no
    distribution: the reference is the best value and only the floor applies. A median of 0 (every sweep had one rank:
    nothing crossed a link) judges nothing.
    """

    k: float = 3.0
    tol: float = 0.25

    def threshold(self, values: Sequence[float]) -> tuple[float, float, float]:
        """(reference, MAD of the natural log values, threshold) of ``values``."""
        if len(values) >= 3:
            ref = median(values)
            if ref <= 0:
                return ref, 0.0, 0.0
            logs = [math.log(max(v, ref * 1e-9)) for v in values]
            d = mad(logs)
            return ref, d, min(math.exp(median(logs) - self.k * d), ref * (1 - self.tol))
        ref = max(values)
        return ref, 0.0, ref * (1 - self.tol)

    def slow(self, values: Mapping[str, float | None]) -> tuple[list[str], float, float, float]:
        """Keys of the slow values (failed measurements, None, are not judged) + (reference, MAD, threshold)."""
        good = {k: v for k, v in values.items() if v is not None}
        if not good:
            return [], 0.0, 0.0, 0.0
        ref, d, thr = self.threshold(list(good.values()))
        return [k for k, v in good.items() if v < thr], ref, d, thr

    def slower(self, value: float, reference: float) -> bool:
        """One value against one reference measured beside it (a sibling half, a control pair)."""
        return value < reference * (1 - self.tol)


def default_tolerance(transport: str) -> float:
    """The relative floor of the rule when the user gives none. gloo measures CPU copies over TCP on hosts that run
    other work: healthy lab nodes spread 0.5-1.4 GB/s (2.8x) and a re-measurement beside a control moved by 30 %
    under load, so only a gross fault counts (the lab's 0.1-CPU node is ~10x slower): 0.5. NCCL between identical
    GPUs and links varies by a few percent (nccl-tests): 0.25."""
    return 0.5 if transport == "gloo" else 0.25


# --- expected values from the inventory -------------------------------------------------------------------------

# Per-GPU NVLink bandwidth, one direction, GB/s, by generation (NVIDIA's data sheets give the bidirectional total:
# V100 300 GB/s = NVLink 2, A100 600 = NVLink 3, H100/H200 900 = NVLink 4, B200/GB200 1800 = NVLink 5). An
# all-reduce's bus bandwidth inside an NVSwitch node approaches the one-direction figure.
NVLINK_GBS = {2: 150.0, 3: 300.0, 4: 450.0, 5: 900.0}
_GEN = (
    (re.compile(r"^(g?b\d{3}|gb)", re.I), 5),
    (re.compile(r"^(h100|h200|h800|gh200|h20)", re.I), 4),
    (re.compile(r"^(a100|a800|a30)", re.I), 3),
    (re.compile(r"^v100", re.I), 2),
)


def nvlink_generation(gpu_type: str | None) -> int | None:
    for rx, gen in _GEN:
        if gpu_type and rx.match(gpu_type):
            return gen
    return None


@dataclass(frozen=True)
class Expected:
    """GB/s a level should reach per the inventory (None: the inventory does not say), and why."""

    intra: float | None = None
    intra_why: str = ""
    inter: float | None = None
    inter_why: str = ""

    def for_level(self, level: str) -> tuple[float | None, str]:
        return (self.intra, self.intra_why) if level == "node" else (self.inter, self.inter_why)


def expected_from(gpu_type: str | None, links: object, nic_rates_gbps: Sequence[int]) -> Expected:
    """Intra-node: the NVLink generation of the GPU type when the inventory says the GPUs are NVLink-connected.
    Inter-node: the sum of the compute NICs' rates (Gb/s / 8 = GB/s): in a ring or tree all-reduce every node
    sends and receives the bus volume through its NICs, so busbw cannot exceed them."""
    intra, intra_why = None, ""
    gen = nvlink_generation(gpu_type)
    if links not in (None, "none") and gen is not None:
        intra, intra_why = NVLINK_GBS[gen], f"{gpu_type}: NVLink {gen}, {NVLINK_GBS[gen]:g} GB/s per GPU per direction"
    inter, inter_why = None, ""
    rates = [r for r in nic_rates_gbps if r > 0]
    if rates:
        inter = sum(rates) / 8
        inter_why = f"{len(rates)} compute NIC(s) x {'/'.join(str(r) for r in sorted(set(rates)))} Gb/s = {inter:g} GB/s"
    return Expected(intra, intra_why, inter, inter_why)


# --- nccl-tests output -------------------------------------------------------------------------------------------

_MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")


def parse_all_reduce_perf(text: str) -> list[Point]:
    """The out-of-place columns of ``all_reduce_perf`` (size, count, type, redop, root, time us, algbw, busbw,
    #wrong, then the in-place ones). Rows whose #wrong is not 0 (or N/A) are dropped: a wrong result has no
    bandwidth worth reporting."""
    out = []
    for line in text.splitlines():
        line = _MPI_PREFIX.sub("", line)  # mpirun --tag-output: "[1,0]<stdout>:"
        if line.lstrip().startswith("#"):
            continue
        m = _ROW.match(line)
        if not m:
            continue
        wrong = m.group(9)
        if wrong not in ("0", "N/A"):
            continue
        out.append(Point(int(m.group(1)), float(m.group(6)), float(m.group(7)), float(m.group(8))))
    return out


def parse_sizes(text: str) -> list[int]:
    """``1M,4M,16M`` (K/M/G = 2^10/2^20/2^30, like nccl-tests' -b/-e) -> bytes."""
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", item, re.I)
        if not m or int(m.group(1)) == 0:
            raise ValueError(f"{item.strip()!r} is not a size like 1M, 64K, 1G")
        out.append(int(m.group(1)) * mult[m.group(2).upper()])
    return sorted(set(out))
