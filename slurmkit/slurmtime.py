"""Slurm's time strings (``--time``, partition MaxTime/DefaultTime, QOS limits): one parser for every layer.

Imports nothing of slurmkit but its errors, like release.py, so the model, the generator, accounts and jobs may all
use it (issue 21 item 8: accounts/plan.py imported jobs/spec.py for it).
"""

from __future__ import annotations

import re

from slurmkit.errors import UsageError

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def _unlimited(v: str) -> bool:
    """Slurm's spellings of "no time limit". sbatch(1) 22.05 --time: "A time limit of zero requests that no time
    limit be imposed"; src/common/parse_time.c time_str2secs() maps "-1"/"INFINITE"/"UNLIMITED" to INFINITE and
    slurm_opt.c arg_set_time_limit() turns a limit of 0 minutes (time_str2mins, so "0", "0:0", "0-0") into
    INFINITE as well. (A few seconds, e.g. "0:30", round up to one minute: a real limit.)"""
    if v.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return True
    m = _TIME.match(v)
    return m is not None and all(int(x or 0) == 0 for x in m.groups())


def _time_fields(value: str) -> tuple[str | None, list[int]] | None:
    """The days field and the numbers after it, as sbatch splits ``--time``; None for no limit."""
    v = value.strip()
    if _unlimited(v):
        return None
    m = _TIME.match(v)
    if not m:
        raise UsageError(f"--time: {value!r} is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)")
    days, a, b, c = m.groups()
    return days, [int(x) for x in (a, b, c) if x is not None]


def parse_time_minutes(value: str) -> int | None:
    """Slurm time syntax -> minutes (rounded up); ``UNLIMITED``/``INFINITE`` -> None.

    Accepted like sbatch: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``; a limit of zero (``0``,
    ``0:0``, ...) and ``-1`` mean no limit, as ``UNLIMITED`` does (see ``_unlimited``).
    """
    fields = _time_fields(value)
    if fields is None:
        return None
    days, nums = fields
    if days is not None:
        hours = nums[0]
        minutes = nums[1] if len(nums) > 1 else 0
        seconds = nums[2] if len(nums) > 2 else 0
        total = int(days) * 1440 + hours * 60 + minutes
    elif len(nums) == 1:
        total, seconds = nums[0], 0
    elif len(nums) == 2:
        total, seconds = nums[0], nums[1]
    else:
        total, seconds = nums[0] * 60 + nums[1], nums[2]
    return total + (1 if seconds else 0)


def parse_time_seconds(value: str) -> int | None:
    """Slurm time syntax -> seconds (exact); no limit (``UNLIMITED``, ``INFINITE``, ``-1``, zero) -> None."""
    fields = _time_fields(value)
    if fields is None:
        return None
    days, nums = fields
    if days is not None:  # D-H, D-H:M, D-H:M:S
        nums += [0] * (3 - len(nums))
        return int(days) * 86400 + nums[0] * 3600 + nums[1] * 60 + nums[2]
    if len(nums) == 1:  # M
        return nums[0] * 60
    if len(nums) == 2:  # M:S
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]  # H:M:S
