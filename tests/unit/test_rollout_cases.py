"""Every entry of every release's rollout table has a lab case (tests/integration/test_rollout_lab.py) or a
reason the lab cannot make that change (issue 20 item 2)."""

from __future__ import annotations

from slurmkit.generate import rollout as r
from tests.integration.test_rollout_lab import CASES, NOT_IN_LAB


def test_every_table_entry_has_a_lab_case_or_a_reason() -> None:
    covered = {c.key for c in CASES} | {c.entry for c in CASES if c.entry}
    for ver, table in r.RULES.items():
        missing = [k for k in table if k not in covered and k not in NOT_IN_LAB]
        assert not missing, f"{ver}: rollout table entries with neither a lab case nor a reason: {missing}"
    assert not set(NOT_IN_LAB) & {c.key for c in CASES}
