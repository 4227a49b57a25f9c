"""Review of issue 9's fixes (config generation): inputs an admin can write that Slurm reads differently from what
the inventory says. Each test failed before its fix."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkit.errors import InventoryError
from slurmkit.generate import generate
from slurmkit.model.load import load_cluster_dict

BASE = {
    "cluster": "t",
    "slurm_version": "24.11",
    "controller": {"hosts": ["head01"]},
    "accounting": {"host": "head01"},
    "node_groups": [
        {"name": "a", "hosts": "n[1-4]", "cpu": {"sockets": 2, "cores_per_socket": 8, "threads_per_core": 2},
         "memory_mb": 64000, "reserve": {"memory_mb": 2000, "cores": 2},
         "gpus": {"type": "h100", "count": 4, "files": "/dev/nvidia[0-3]"}},
    ],
    "partitions": [{"name": "p", "groups": ["a"], "default": True}],
}


def inv() -> dict:
    return copy.deepcopy(BASE)


def refused(d: dict, path: str, words: str) -> None:
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(d)
    assert ei.value.path == path, str(ei.value)
    assert words in str(ei.value) and "\n" not in str(ei.value), str(ei.value)


# read_config.c (22.05-25.11): NodeName=DEFAULT / PartitionName=DEFAULT (xstrcasecmp) only set defaults, so the
# node or partition silently does not exist (slurmctld accepts the file); NodeName=ALL is fatal.
@pytest.mark.parametrize("host", ["default", "DEFAULT", "Default", "all", "ALL"])
def test_reserved_node_names_refused(host: str) -> None:
    d = inv()
    d["node_groups"][0]["hosts"] = host
    refused(d, "node_groups[0].hosts", "reserves")
    d["node_groups"][0]["hosts"] = ["n1", host]
    refused(d, "node_groups[0].hosts[1]", "reserves")


def test_names_that_merely_contain_a_reserved_word_load() -> None:
    d = inv()
    d["node_groups"][0]["hosts"] = "default[1-2],alltoall1"
    assert load_cluster_dict(d).all_hosts


@pytest.mark.parametrize("name", ["DEFAULT", "default"])
def test_partition_named_default_refused(name: str) -> None:
    d = inv()
    d["partitions"].append({"name": name, "groups": ["a"]})
    refused(d, "partitions[1].name", "reserved")


# Python's \d matches every script's digits and int() reads them; Slurm's parsers do not.
@pytest.mark.parametrize(
    ("where", "value", "path"),
    [
        ("max_time", "\u0661\u0662", "partitions[0].max_time"),
        ("default_time", "\u0661:00", "partitions[0].default_time"),
        ("mig", ["\u0663g.40gb@1"], "node_groups[0].gpus.mig[0].profile"),
        ("hosts", "n[\u0661-\u0664]", "node_groups[0].hosts"),
    ],
)
def test_non_ascii_digits_refused(where: str, value: object, path: str) -> None:
    d = inv()
    if where in ("max_time", "default_time"):
        d["partitions"][0][where] = value
    elif where == "mig":
        d["node_groups"][0]["gpus"]["mig"] = value
    else:
        d["node_groups"][0]["hosts"] = value
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(d)
    assert ei.value.path == path, str(ei.value)


DIGITS = st.sampled_from(list("0123456789") + ["\u0661", "\u0663", "\uff11", "\u09e8", "\u2460"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.text(DIGITS, min_size=1, max_size=2), b=st.text(DIGITS, min_size=1, max_size=2),
       field=st.sampled_from(["max_time", "mig", "hosts"]))
def test_generated_files_are_ascii_whatever_digits_the_inventory_uses(a: str, b: str, field: str) -> None:
    d = inv()
    if field == "max_time":
        d["partitions"][0]["max_time"] = f"{a}:{b}0"[:6]
    elif field == "mig":
        d["node_groups"][0]["gpus"]["mig"] = [f"{a}g.{b}gb@1"]
    else:
        d["node_groups"][0]["hosts"] = f"n[{a}-{b}]"
        d["node_groups"][0]["gpus"].pop("mig", None)
    try:
        files = generate(load_cluster_dict(d))
    except InventoryError as exc:
        assert "\n" not in str(exc) and exc.path
        return
    for name, text in files.items():
        assert text.isascii(), (name, [line for line in text.splitlines() if not line.isascii()][:1])


def test_cluster_name_at_most_40_characters() -> None:
    d = inv()
    d["cluster"] = "c" * 40
    assert load_cluster_dict(d).name == "c" * 40
    d["cluster"] = "c" * 41
    refused(d, "cluster", "40")


@pytest.mark.parametrize(("key", "path"), [("controller", "controller.port"), ("accounting", "accounting.port")])
def test_ports_are_tcp_ports(key: str, path: str) -> None:
    d = inv()
    d[key]["port"] = 65535
    load_cluster_dict(d)
    d[key]["port"] = 68170  # a typo of 6817: Slurm keeps it in 16 bits and listens somewhere else
    refused(d, path, "not a TCP port")


def test_real_parse_ignores_slurmctlds_clock_latency_warning() -> None:
    """controller.c main() logs 'error: High latency for 1000 calls to gettimeofday()' on a busy host whatever
    the config says; the preset real-parse tests failed on it under load. A real config error still counts."""
    from slurmkit.backend.realparse import _run_until_primary

    def run(lines: list[str]) -> object:
        script = "; ".join(f"echo {line!r}" for line in lines) + "; sleep 30"
        return _run_until_primary(["sh", "-c", script], timeout=20, settle=0.2)

    latency = "slurmctld: error: High latency for 1000 calls to gettimeofday(): 4168 microseconds"
    primary = "slurmctld: Running as primary controller"
    ok = run([latency, primary])
    assert ok.ok is True, ok.message  # type: ignore[attr-defined]
    bad = run([latency, "slurmctld: error: Parse error in file x line 3", primary])
    assert bad.ok is False and bad.errors == ["error: Parse error in file x line 3"], bad  # type: ignore[attr-defined]


def test_overlay_node_params_for_an_unknown_group_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A typo in the overlay's group name dropped the NodeAddr it carried without a word (exit 0)."""
    from slurmkit.generate.slurmconf import load_overrides

    ov = tmp_path / "site.yaml"
    ov.write_text("node_params:\n  aa: {NodeAddr: 10.0.0.1}\n")
    with pytest.raises(InventoryError) as ei:
        generate(load_cluster_dict(inv()), overrides=load_overrides(str(ov)))
    assert ei.value.path == "node_params.aa" and "did you mean 'a'" in str(ei.value)
    assert str(ei.value).startswith(f"{ov}: ")


def test_overlay_unknown_slurm_conf_key_named_in_the_overlay(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Was reported against the generated slurm.conf's line number, without a did-you-mean."""
    from slurmkit.generate.slurmconf import load_overrides

    ov = tmp_path / "site.yaml"
    ov.write_text("slurm_conf:\n  SelectTypeParameter: CR_Core\n")
    with pytest.raises(InventoryError) as ei:
        generate(load_cluster_dict(inv()), overrides=load_overrides(str(ov)))
    assert ei.value.path == "slurm_conf.SelectTypeParameter", str(ei.value)
    assert "did you mean 'SelectTypeParameters'" in str(ei.value) and str(ei.value).startswith(f"{ov}: ")


# DefCpuPerGPU in whole cores. Measured on the lab (Slurm 22.05, select/cons_tres CR_Core_Memory) with node1 set to
# 2 sockets x 4 cores x 2 threads, CoreSpecCount=1, 2 GPUs: DefCpuPerGPU=7 (the thread share, 14/2) ->
# `srun -n1 --gpus=2` "Requested node configuration is not available", `-n1 --gpus=1` gets 8 CPUs for 7;
# --cpus-per-gpu=6 (3 whole cores) runs.
@pytest.mark.parametrize(
    ("sockets", "cores", "threads", "reserve", "gpus", "want"),
    [
        (2, 4, 2, 1, 2, 6),  # the lab measurement above: 7 cores / 2 GPUs = 3 cores = 6 CPUs, not 7
        (2, 56, 2, 4, 8, 26),  # DGX H100 preset: 108 cores / 8 = 13 cores = 26 CPUs, not 27
        (2, 32, 2, 2, 4, 30),  # mixed-pcie a100: 62 cores / 4 = 15 cores = 30, not 31
        (2, 72, 1, 2, 4, 35),  # GB200 tray, no SMT: the thread share is already whole cores
        (1, 4, 2, 0, 8, 1),  # fewer cores than GPUs: the thread share (8 CPUs / 8)
    ],
)
def test_cpus_per_gpu_is_whole_cores(sockets: int, cores: int, threads: int, reserve: int, gpus: int,
                                     want: int) -> None:
    d = inv()
    g = d["node_groups"][0]
    g["cpu"] = {"sockets": sockets, "cores_per_socket": cores, "threads_per_core": threads}
    g["reserve"] = {"memory_mb": 2000, "cores": reserve}
    g["gpus"] = {"type": "h100", "count": gpus, "files": f"/dev/nvidia[0-{gpus - 1}]"}
    c = load_cluster_dict(d)
    grp = c.node_groups[0]
    assert grp.cpus_per_gpu == want
    assert want % threads == 0 or want < threads or sockets * cores - reserve < gpus
    assert want * gpus <= grp.usable_cpus
    part = next(x for x in generate(c)["slurm.conf"].splitlines() if x.startswith("PartitionName=p "))
    assert f"DefCpuPerGPU={want} " in part


def test_mig_partition_cpus_per_device_are_whole_cores() -> None:
    """mixed-pcie's interactive partition: a100-[09-10] is 62 usable cores shared by 8 MIG devices = 7 cores = 14
    CPUs (was 15, which is 8 cores per device: 64 > 62)."""
    from pathlib import Path

    from slurmkit.model.load import load_cluster

    c = load_cluster(Path(__file__).resolve().parents[2] / "examples" / "mixed-pcie.yaml")
    part = next(x for x in generate(c)["slurm.conf"].splitlines() if x.startswith("PartitionName=interactive "))
    assert "DefCpuPerGPU=14 " in part


def test_gpusub_share_from_node_records_is_whole_cores() -> None:
    """Without an inventory gpusub reads scontrol's node records: the same whole-core rule."""
    from types import SimpleNamespace

    from slurmkit.jobs.facts import per_gpu_from_records

    dgx = SimpleNamespace(total_gpus=8, cpus=224, spec_cores=4, threads_per_core=2, real_memory=2063521,
                          mem_spec_mb=32768)
    assert per_gpu_from_records([dgx])[0] == 26


def test_switch_names_longer_than_64_fatal_from_2411_only() -> None:
    """topology/tree switch_record.c (24.11+) refuses SwitchName > HOST_NAME_MAX (64): the topology parse fails,
    fatal to slurmctld. 24.05 has no such check, and 22.05's real parse accepts a 70-character name."""
    d = inv()
    long = "s" * 65
    d["topology"] = {"switches": [{"name": long, "nodes": "n[1-4]"}, {"name": "top", "switches": long}]}
    c = load_cluster_dict(d)
    for v in ("24.11", "25.05", "25.11"):
        with pytest.raises(InventoryError) as ei:
            generate(c, version=v)
        assert ei.value.path == "topology.switches[0].name" and "64" in str(ei.value), str(ei.value)
    for v in ("22.05", "24.05"):
        assert "SwitchName=" + long in generate(c, version=v)["topology.conf"]
    d["topology"]["switches"][0]["name"] = d["topology"]["switches"][1]["switches"] = "s" * 64
    assert "s" * 64 in generate(load_cluster_dict(d), version="24.11")["topology.conf"]
