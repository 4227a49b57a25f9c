"""The Python API's edges without Slurm: bad options, unpicklable calls, array task ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkit import launch
from slurmkit.errors import UsageError
from slurmkit.jobs.api import _task_ids


def test_unknown_options_are_named_with_the_known_ones(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    with pytest.raises(UsageError, match=r"unknown option\(s\) gpus \(JobSpec fields: .*gpus_per_node"):
        launch.submit(str(script), gpus=8, backend=object())  # type: ignore[arg-type]


def test_a_lambda_is_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot be pickled.*importable"):
        launch.submit(lambda: 1, run_dir=str(tmp_path / "run"), backend=object())  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()


def test_array_task_ids() -> None:
    assert _task_ids("0-2") == {0, 1, 2}
    assert _task_ids("1,3,5-6%2") == {1, 3, 5, 6}
    assert _task_ids("") == set()


def test_empty_array_is_refused() -> None:
    with pytest.raises(UsageError, match="params is empty"):
        launch.map_array(print, [])
