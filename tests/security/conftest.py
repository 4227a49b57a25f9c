"""The attacker suite (issue 32 item 8): each hole an ordinary user could turn against root-run slurmkit, played
by an unprivileged user on a real lab or on this machine's real kernel, so a regression fails CI.

Every test here is marked ``security`` (pyproject's markers); those that need a lab are marked ``lab`` too and run
in the host release's lab pass of tests/run.sh, the others in its unit pass. docs/security.md states the trust
model and lists each rule beside its test.

``attacker`` is an ordinary local user (Debian's ``games``, uid 5, no login shell): munge authenticates its uid
to the lab's Slurm, so its jobs are an ordinary user's jobs. ``victim`` (``bin``) is another one whose work the
attacker must not be able to touch. Jobs of either run Debian's /usr/bin/python3 (root's venv python is not
readable by them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ATTACKER = "games"
VICTIM = "bin"
USER_PYTHON = "/usr/bin/python3"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.security)


def as_user(user: str, argv: list[str], env: dict[str, str] | None = None, timeout: float = 60,
            check: bool = True, **kw: object) -> subprocess.CompletedProcess:
    """``argv`` as ``user`` (runuser: real uid and gid, supplementary groups dropped), text output captured."""
    return subprocess.run(["runuser", "-u", user, "--", *argv], env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=check, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="session")
def sec_lab(make_lab) -> Iterator:  # type: ignore[no-untyped-def]
    """One lab for the whole suite (so the suite adds one lab start to CI, not one per hole): 4 nodes x 2 GPUs,
    leaves node[1-2] and node[3-4], slurmkit's hooks wired (fake NVML per node, no periodic health check: a test
    that wants one runs `slurmkit hook health` itself). Tests leave every node as they found it."""
    yield make_lab(nodes=4, nodes_per_leaf=2, gpus_per_node=2, hooks=True)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A fresh 0755 directory other users can reach and list, removed at the end. Not under pytest's tmp_path:
    its /tmp/pytest-of-root is 0700 and every pytest session that starts (another suite on the machine) makes it
    0700 again, so search bits given to it do not last."""
    d = Path(tempfile.mkdtemp(prefix="slurmkit-sec-", dir="/tmp"))
    try:
        d.chmod(0o755)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
