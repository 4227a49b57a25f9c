"""`slurmkit lab up --hooks` without --fake-nvml: a synthesized healthy state for the lab's shape, judged by the
real health checks; a recorded state that does not fit the lab is refused with what is wrong (issue 9 item 18)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from slurmkit.errors import LabError
from slurmkit.health.expect import Expectations
from slurmkit.health.result import Action, worst_action
from slurmkit.lab import Lab, LabSpec
from slurmkit.lab.nvmlstate import healthy_state, load_template
from tests.conftest import needs
from tests.unit.test_health_checks import bad, run

NVML = Path(__file__).resolve().parents[1] / "data" / "nvml"


@pytest.mark.parametrize(("gpus", "gpu_type"), [(2, "h100"), (4, "a100"), (1, "l40s"), (3, "mi300x")])
def test_synthesized_state_passes_every_check(tmp_path: Path, gpus: int, gpu_type: str) -> None:
    fx = tmp_path / "state.json"
    fx.write_text(json.dumps(healthy_state(gpus, gpu_type)))
    expect = Expectations(node="node1", gpu_count=gpus, gpu_type=gpu_type, nvlink=True, mig=(False,) * gpus,
                          minors=tuple(range(gpus)))
    for hook in ("health", "prolog", "epilog"):
        res, _ = run(tmp_path / hook, fx, hook=hook, expect=expect, gpus=list(range(gpus)))
        assert bad(res) == {}, (hook, bad(res))
        assert worst_action(list(res.values())) == Action.NONE
    assert res["gpu_count"].summary == f"{gpus} GPU(s) of {gpus} expected"


def test_synthesized_state_answers_every_field_a_recorded_one_has() -> None:
    """Every NVML value a real healthy H100 answered (the recorded fixture) is in the lab's synthesized state too:
    a missing one is a per-GPU metric the lab never exports (its Prometheus had no slurmkit_gpu_power_limit_watts,
    so a shipped dashboard panel stayed empty)."""
    rec = json.loads((NVML / "healthy-h100x8.json").read_text())
    syn = healthy_state(8, "h100")
    assert set(rec) <= set(syn)
    assert set(rec["devices"][0]) <= set(syn["devices"][0])
    assert syn["devices"][0]["power_limit_mw"] == rec["devices"][0]["power_limit_mw"]


def test_the_8_gpu_fixture_on_a_2_gpu_lab_says_what_is_wrong() -> None:
    with pytest.raises(LabError) as info:
        load_template(str(NVML / "healthy-h100x8.json"), 2, "h100")
    msg = str(info.value)
    assert "describes 8 GPUs but the lab has --gpus-per-node 2" in msg
    assert "leave out --fake-nvml for a healthy 2 x h100 state" in msg


def test_a_fixture_of_another_gpu_type_is_refused() -> None:
    with pytest.raises(LabError, match=r"has 'NVIDIA H100 80GB HBM3' GPUs but the lab has --gpu-type a100"):
        load_template(str(NVML / "healthy-h100x8.json"), 8, "a100")
    assert len(load_template(str(NVML / "healthy-h100x8.json"), 8, "h100")["devices"]) == 8


def test_count_and_devices_must_agree(tmp_path: Path) -> None:
    state = json.loads((NVML / "healthy-h100x8.json").read_text())
    state["devices"] = state["devices"][:2]  # what the old lab did: trimmed devices, count still 8
    p = tmp_path / "trimmed.json"
    p.write_text(json.dumps(state))
    with pytest.raises(LabError, match=r"'count' is 8 but 'devices' lists 2 GPUs"):
        load_template(str(p), 2, "h100")


@needs(bool(shutil.which("slurmctld")) and os.geteuid() == 0, "needs root and the lab binaries (preflight checks them first)")
def test_lab_up_refuses_a_mismatched_fixture_before_starting_anything(tmp_path: Path) -> None:
    d = tmp_path / "lab"
    spec = LabSpec(dir=str(d), nodes=2, gpus_per_node=2, nodes_per_leaf=2, hooks=True, port_base=24900,
                   fake_nvml_template=str(NVML / "healthy-h100x8.json"))
    with pytest.raises(LabError, match="describes 8 GPUs but the lab has --gpus-per-node 2"):
        Lab(spec).up()
    assert not d.exists()
