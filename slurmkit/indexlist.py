"""Slurm's integer index lists (core and GPU indices: ``0-3,8``), below every layer: the model, hostlist, the
generator and the hooks' record parser read them here. No imports: the prolog's hot path loads it.
"""

from __future__ import annotations


def expand_ints(spec: str) -> list[int]:
    """``0-3,8,10-11`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (Slurm's core and GPU index lists). Raises ValueError.

    Hand-written: NodeSet folds names, not bare integer ranges, and the prolog must not import ClusterShell.
    """
    out: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            raise ValueError(spec)
        if "-" in part:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if hi < lo:
                raise ValueError(spec)
            out.extend(range(lo, hi + 1))
        else:
            out.append(int(part))
    return out


def fold_ints(values: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``0-3,8`` (the inverse of :func:`expand_ints`, sorted, duplicates dropped)."""
    out: list[str] = []
    vals = sorted(set(values))
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out)
