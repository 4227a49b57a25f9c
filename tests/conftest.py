"""Shared fixtures.

``lab``: ONE real Slurm lab for the whole test session (8 nodes x 8 fake H100, leaves node[1-4], node[5-8]),
brought up with slurmkit's own `Lab` and always taken down at the end, even on failure. Tests that need it are
marked ``@pytest.mark.lab``; they are never skipped: without root and Debian's Slurm they fail with the lab's
own one-line reason. Deselect them locally with ``-m 'not lab'``.

Environment (so several people can run suites on one machine without clashing):
  SLURMKIT_TEST_LAB_DIR        lab directory           (default /tmp/slurmkit-test-lab)
  SLURMKIT_TEST_LAB_PORT_BASE  slurmctld port; slurmd of nodeI on base+I (default 17817, so a demo lab on 16817 can stay up)

``make_lab(**spec)``: a factory for a test module that needs a lab of its own shape (hooks, accounting, fewer
nodes); each one gets its own dir and port range and is taken down at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkit.lab import Lab, LabSpec

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def needs(condition: bool, reason: str) -> pytest.MarkDecorator:
    """Skip where ``condition`` is false -- but never in CI (``CI`` set): tests/run.sh installs everything these
    tests need and CI runs as root, so a missing prerequisite there must fail loudly, not hide behind a skip."""
    return pytest.mark.skipif(not condition and not os.environ.get("CI"), reason=reason)


def _base() -> int:
    return int(os.environ.get("SLURMKIT_TEST_LAB_PORT_BASE", "17817"))


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    spec = LabSpec(dir=os.environ.get("SLURMKIT_TEST_LAB_DIR", "/tmp/slurmkit-test-lab"), port_base=_base())
    stale = Lab.load(spec.dir)
    if stale.is_up():
        stale.down()
    the_lab = Lab(spec)
    the_lab.up()
    try:
        yield the_lab
    finally:
        the_lab.down()


@pytest.fixture(scope="session")
def make_lab() -> Iterator:
    made: list[Lab] = []
    root = os.environ.get("SLURMKIT_TEST_LAB_DIR", "/tmp/slurmkit-test-lab")

    def factory(**kw: object) -> Lab:
        n = len(made) + 1
        spec = LabSpec(dir=f"{root}-{n}", port_base=_base() + 200 * n, **kw)  # type: ignore[arg-type]
        stale = Lab.load(spec.dir)
        if stale.is_up():
            stale.down()
        lab_ = Lab(spec)
        lab_.up()
        made.append(lab_)
        return lab_

    try:
        yield factory
    finally:
        for lab_ in made:
            lab_.down()


def lab_run(lab: Lab, argv: list[str], timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command against the lab (its SLURM_CONF), capturing text output."""
    return subprocess.run(argv, env={**os.environ, **lab.env}, capture_output=True, text=True, timeout=timeout, check=check)
