"""The generated job_submit.lua: loaded with `submit_policy:`, rendered per release, syntax-checked by Lua 5.1's own
`luac -p` (Debian's job_submit_lua.so links liblua5.1 in 22.05 and in the 24.11 root), and run in-process through
lupa's Lua 5.1 against a stub `slurm` table and job_desc tables shaped like the plugin's (unset numbers NO_VAL,
unset strings nil). The lab tests (tests/integration/test_submit_policy_lab.py) run the same file in slurmctld.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmkit.errors import InventoryError
from slurmkit.generate import generate
from slurmkit.generate.jobsubmit import job_submit_lua, tres_gpu_prefix
from slurmkit.model import load_cluster_dict
from tests.conftest import needs
from tests.unit.test_conf_cli import sk, write_inv

ROOT = Path(__file__).resolve().parents[2]
LUAC = shutil.which("luac5.1")

# slurm.NO_VAL / NO_VAL16 / INFINITE (slurm/slurm.h) and the error codes the script returns (slurm/slurm_errno.h),
# 22.05 and 24.11
NO_VAL = 0xFFFFFFFE
NO_VAL16 = 0xFFFE
INFINITE = 0xFFFFFFFF
SLURM = {"SUCCESS": 0, "ERROR": -1, "FAILURE": -1, "NO_VAL": NO_VAL, "NO_VAL16": NO_VAL16, "INFINITE": INFINITE,
         "ESLURM_ACCESS_DENIED": 2002, "ESLURM_INVALID_TIME_LIMIT": 2051, "ESLURM_MISSING_TIME_LIMIT": 8000}

# the job_desc fields _set_job_req_field writes (src/plugins/job_submit/lua/job_submit_lua.c), per release tag
WRITABLE = {
    "22.05": set("""account acctg_freq admin_comment array_inx batch_features begin_time bitflags burst_buffer clusters
        comment container contiguous cores_per_socket cpu_freq_min cpu_freq_max cpu_freq_gov cpus_per_task
        cpus_per_tres dependency delay_boot end_time extra exc_nodes features gres immediate licenses mail_type
        mail_user max_cpus max_nodes mem_per_tres min_cpus min_mem_per_cpu min_mem_per_node min_nodes name nice
        ntasks_per_gpu ntasks_per_node ntasks_per_socket ntasks_per_tres num_tasks partition prefer power_flags
        pn_min_cpus pn_min_memory pn_min_tmp_disk priority qos reboot req_nodes req_switch requeue reservation
        script selinux_context shared oversubscribe site_factor sockets_per_node std_err std_in std_out
        threads_per_core time_limit time_min tres_bind tres_freq tres_per_job tres_per_node tres_per_socket
        tres_per_task wait4switch wckey work_dir""".split()),
}
WRITABLE["24.11"] = (WRITABLE["22.05"] - {"power_flags"}) | {"mcs_label"}

INV: dict[str, Any] = {
    "cluster": "t",
    "node_groups": [
        {"name": "g", "hosts": "gpu[1-8]", "cpu": {"sockets": 2, "cores_per_socket": 8}, "memory_mb": 256000,
         "gpus": {"type": "h100", "count": 4, "files": "/dev/nvidia[0-3]"}},
        {"name": "c", "hosts": "cpu[1-2]", "cpu": {"sockets": 2, "cores_per_socket": 8}, "memory_mb": 64000},
    ],
    "partitions": [{"name": "gpu", "groups": ["g"], "default": True}, {"name": "cpu", "groups": ["c"]},
                   {"name": "all", "groups": ["g", "c"]}],
    "topology": {"switches": [{"name": "leaf1", "nodes": "gpu[1-4],cpu1"}, {"name": "leaf2", "nodes": "gpu[5-8],cpu2"},
                              {"name": "spine", "switches": "leaf[1-2]"}]},
    "submit_policy": {"require_time_for_gpus": True, "cpus_per_gpu": "auto", "mem_per_gpu": "auto",
                      "one_leaf_if_fits": True},
}


def cluster(**policy: object):  # type: ignore[no-untyped-def]
    inv = copy.deepcopy(INV)
    inv["submit_policy"].update(policy)
    return load_cluster_dict(inv)


class Plugin:
    """One job_submit.lua in a Lua 5.1 state, with slurm.user_msg collecting the messages."""

    def __init__(self, text: str):
        from lupa.lua51 import LuaRuntime

        self.lua = LuaRuntime(unpack_returned_tuples=True)
        self.messages: list[str] = []
        slurm = self.lua.table_from(SLURM)
        self.logged: list[str] = []
        slurm["user_msg"] = self.messages.append
        slurm["log_info"] = lambda fmt, *args: self.logged.append(fmt % args)
        self.lua.globals()["slurm"] = slurm
        assert self.lua.execute(text) == 0  # the script's last statement: return slurm.SUCCESS
        self.submit = self.lua.globals()["slurm_job_submit"]
        self.modify_fn = self.lua.globals()["slurm_job_modify"]
        assert self.modify_fn is not None  # the plugin refuses a script without it

    def parts(self, default_time: dict[str, int] | None = None):  # type: ignore[no-untyped-def]
        """part_list as the plugin pushes it: name -> record with default_time (NO_VAL when unset)."""
        names = ("gpu", "cpu", "all")
        dt = default_time or {}
        return self.lua.table_from({n: self.lua.table_from({"name": n, "default_time": dt.get(n, NO_VAL)})
                                    for n in names})

    def run(self, default_time: dict[str, int] | None = None, **fields: object) -> tuple[int, dict[str, object]]:
        base: dict[str, object] = {"time_limit": NO_VAL, "min_nodes": NO_VAL, "req_switch": NO_VAL,
                                   "wait4switch": NO_VAL, "cpus_per_task": NO_VAL16}
        base.update(fields)
        desc = self.lua.table_from({k: v for k, v in base.items() if v is not None})
        rc = self.submit(desc, self.parts(default_time), 1000)
        return int(rc), dict(desc.items())

    def modify(self, rec: dict[str, object], **fields: object) -> tuple[int, dict[str, object]]:
        """slurm_job_modify with a job_desc holding only `fields` (the rest unset, as scontrol sends it) and a
        job_rec of `rec` over a pending job's record defaults (slurm_lua_job_record_field)."""
        base: dict[str, object] = {"time_limit": NO_VAL, "min_nodes": NO_VAL, "req_switch": NO_VAL,
                                   "wait4switch": NO_VAL, "cpus_per_task": NO_VAL16}
        base.update(fields)
        desc = self.lua.table_from({k: v for k, v in base.items() if v is not None})
        record: dict[str, object] = {"time_limit": NO_VAL, "partition": "gpu", "pn_min_cpus": 1, "min_nodes": 1,
                                     "min_mem_per_node": 0,
                                     "req_switch": 0}
        record.update(rec)
        rc = self.modify_fn(desc, self.lua.table_from({k: v for k, v in record.items() if v is not None}),
                            self.parts(), 1000)
        return int(rc), dict(desc.items())


@pytest.fixture(params=["22.05", "24.11"])
def plugin(request) -> Plugin:  # type: ignore[no-untyped-def]
    p = Plugin(job_submit_lua(cluster(), request.param))
    p.version = request.param  # type: ignore[attr-defined]
    return p


def test_gpu_job_without_time_is_refused_with_the_policy_and_the_fix(plugin: Plugin):
    rc, _ = plugin.run(tres_per_node=f"{tres_gpu_prefix(plugin.version)}:2")  # type: ignore[attr-defined]
    assert rc == SLURM["ESLURM_MISSING_TIME_LIMIT"]
    assert len(plugin.messages) == 1
    assert "require_time_for_gpus" in plugin.messages[0] and "--time" in plugin.messages[0]


@pytest.mark.parametrize("tres", ["gres:gpu:2", "gres/gpu:2", "gres:gpu:h100:1", "gres/gpu=2", "gpu:1", "gres:gpu",
                                  "gres:shard:1,gres:gpu:1"])
def test_every_spelling_of_a_gpu_request_is_a_gpu_job(plugin: Plugin, tres: str):
    rc, _ = plugin.run(tres_per_job=tres)
    assert rc == SLURM["ESLURM_MISSING_TIME_LIMIT"], tres


@pytest.mark.parametrize("tres", ["gres:shard:1", "gres/gpu:0", "gres:gpuish:1", "license/x:1"])
def test_a_request_without_gpus_is_not_a_gpu_job(tres: str):
    p = Plugin(job_submit_lua(cluster(cpu_jobs_in_gpu_partitions="allow"), "24.11"))
    rc, desc = p.run(tres_per_node=tres)
    assert rc == 0 and not p.messages and "cpus_per_tres" not in desc


def test_defaults_come_from_the_partition_shape_in_the_release_spelling(plugin: Plugin):
    pre = tres_gpu_prefix(plugin.version)  # type: ignore[attr-defined]
    rc, desc = plugin.run(tres_per_node=f"{pre}:1", time_limit=60)
    # 16 cores / 4 GPUs; 256000 MB / 4 GPUs: the same rule as DefCpuPerGPU / DefMemPerGPU
    assert rc == 0 and desc["cpus_per_tres"] == f"{pre}:4" and desc["mem_per_tres"] == f"{pre}:64000"
    assert pre == ("gres:gpu" if plugin.version == "22.05" else "gres/gpu")  # type: ignore[attr-defined]


def test_what_the_job_asked_is_kept(plugin: Plugin):
    rc, desc = plugin.run(tres_per_node="gres:gpu:1", time_limit=60, cpus_per_task=2, min_mem_per_cpu=1000,
                          cpus_per_tres=None)
    assert rc == 0 and "cpus_per_tres" not in desc and "mem_per_tres" not in desc
    rc, desc = plugin.run(tres_per_node="gres:gpu:1", time_limit=60, cpus_per_tres="gres:gpu:7",
                          mem_per_tres="gres:gpu:5", min_mem_per_node=None)
    assert (desc["cpus_per_tres"], desc["mem_per_tres"]) == ("gres:gpu:7", "gres:gpu:5")
    _, desc = plugin.run(tres_per_node="gres:gpu:1", time_limit=60, min_mem_per_node=4000)
    assert "mem_per_tres" not in desc


def test_fixed_defaults_and_off():
    p = Plugin(job_submit_lua(cluster(cpus_per_gpu=2, mem_per_gpu="off"), "22.05"))
    _, desc = p.run(tres_per_node="gres:gpu:1", time_limit=5)
    assert desc["cpus_per_tres"] == "gres:gpu:2" and "mem_per_tres" not in desc


def test_gpu_jobs_in_cpu_partitions_and_the_reverse_are_refused(plugin: Plugin):
    rc, _ = plugin.run(tres_per_node="gres:gpu:1", time_limit=5, partition="cpu")
    assert rc == SLURM["ESLURM_ACCESS_DENIED"]
    assert "gpu_jobs_in_cpu_partitions" in plugin.messages[-1] and "partition cpu has no GPUs" in plugin.messages[-1]
    rc, _ = plugin.run()  # the default partition is gpu
    assert rc == SLURM["ESLURM_ACCESS_DENIED"] and "cpu_jobs_in_gpu_partitions" in plugin.messages[-1]
    assert "--gres=gpu:N" in plugin.messages[-1]
    assert plugin.run(partition="cpu")[0] == 0
    assert plugin.run(partition="all")[0] == 0  # mixed: GPU and CPU nodes, either job
    assert plugin.run(tres_per_node="gres:gpu:1", time_limit=5, partition="all")[0] == 0
    assert plugin.run(tres_per_node="gres:gpu:1", time_limit=5, partition="gpu,cpu")[0] == SLURM["ESLURM_ACCESS_DENIED"]
    assert plugin.run(partition="nosuch")[0] == 0  # slurmctld refuses an unknown partition itself


def test_allow_lets_cpu_jobs_into_gpu_partitions():
    p = Plugin(job_submit_lua(cluster(cpu_jobs_in_gpu_partitions="allow", gpu_jobs_in_cpu_partitions="allow"), "24.11"))
    assert p.run()[0] == 0
    assert p.run(tres_per_node="gres/gpu:1", time_limit=5, partition="cpu")[0] == 0


def test_multi_node_jobs_that_fit_one_leaf_wait_for_one(plugin: Plugin):
    _, desc = plugin.run(tres_per_node="gres:gpu:2", time_limit=5, min_nodes=2)
    assert (desc["req_switch"], desc["wait4switch"]) == (1, 300)
    _, desc = plugin.run(tres_per_node="gres:gpu:2", time_limit=5, min_nodes=4)
    assert desc["req_switch"] == 1
    _, desc = plugin.run(tres_per_node="gres:gpu:2", time_limit=5, min_nodes=5)  # leaves hold 4 GPU nodes
    assert desc["req_switch"] == NO_VAL
    _, desc = plugin.run(tres_per_node="gres:gpu:2", time_limit=5, min_nodes=1)
    assert desc["req_switch"] == NO_VAL
    _, desc = plugin.run(tres_per_node="gres:gpu:2", time_limit=5)  # no -N
    assert desc["req_switch"] == NO_VAL
    _, desc = plugin.run(tres_per_node="gres:gpu:2", time_limit=5, min_nodes=2, req_switch=2, wait4switch=60)
    assert (desc["req_switch"], desc["wait4switch"]) == (2, 60)  # the user's own --switches stays


def test_one_leaf_off_and_the_wait_bound():
    p = Plugin(job_submit_lua(cluster(one_leaf_if_fits=False), "22.05"))
    assert p.run(tres_per_node="gres:gpu:2", time_limit=5, min_nodes=2)[1]["req_switch"] == NO_VAL
    p = Plugin(job_submit_lua(cluster(one_leaf_max_wait_s=45), "22.05"))
    assert p.run(tres_per_node="gres:gpu:2", time_limit=5, min_nodes=2)[1]["wait4switch"] == 45


def test_no_time_rule_when_off():
    p = Plugin(job_submit_lua(cluster(require_time_for_gpus=False), "22.05"))
    rc, desc = p.run(tres_per_node="gres:gpu:1")
    assert rc == 0 and desc["cpus_per_tres"] == "gres:gpu:4"


@pytest.mark.parametrize("version", sorted(WRITABLE))
def test_the_script_writes_only_fields_the_release_lets_it(version: str):
    text = job_submit_lua(cluster(), version)
    # apply() writes through `out` (the job_desc on submit and on modify), never job_rec
    written = set(re.findall(r"(?:job_desc|out)\.([a-z_0-9]+)\s*=[^=]", text))
    assert not re.search(r"job_rec(\.\w+|\[\w+\])\s*=[^=]", text)
    assert written == {"cpus_per_tres", "mem_per_tres", "req_switch", "wait4switch"}
    assert written <= WRITABLE[version]


@needs(LUAC is not None, "luac5.1 (Debian package lua5.1; tests/setup-env.sh installs it)")
@pytest.mark.parametrize("path", sorted((ROOT / "tests" / "golden").glob("*/*/job_submit.lua")), ids=str)
def test_luac_accepts_every_golden_script(path: Path):
    r = subprocess.run([str(LUAC), "-p", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@needs(LUAC is not None, "luac5.1 (Debian package lua5.1; tests/setup-env.sh installs it)")
def test_luac_rejects_a_broken_script(tmp_path: Path):
    bad = tmp_path / "job_submit.lua"
    bad.write_text(job_submit_lua(cluster(), "22.05").replace("return slurm.SUCCESS\nend", "return slurm.SUCCESS", 1))
    assert subprocess.run([str(LUAC), "-p", str(bad)], capture_output=True).returncode != 0


def test_goldens_exist_for_both_spellings():
    paths = {p.parent.name for p in (ROOT / "tests" / "golden").glob("*/*/job_submit.lua")}
    assert {"22.05", "24.11"} <= paths


def test_generate_wires_the_plugin():
    files = generate(cluster())
    assert "JobSubmitPlugins=lua" in files["slurm.conf"].splitlines()
    assert files["job_submit.lua"].startswith("-- generated by slurmkit")
    inv = copy.deepcopy(INV)
    del inv["submit_policy"]
    files = generate(load_cluster_dict(inv))
    assert "job_submit.lua" not in files and "JobSubmitPlugins" not in files["slurm.conf"]


def test_a_site_plugin_list_merges_with_ours():
    inv = copy.deepcopy(INV)
    inv["slurm_conf"] = {"JobSubmitPlugins": "require_timelimit"}
    conf = generate(load_cluster_dict(inv))["slurm.conf"]
    assert "JobSubmitPlugins=lua,require_timelimit" in conf.splitlines()


@pytest.mark.parametrize(("key", "value", "path", "words"), [
    ("cpus_per_gpu", "lots", "submit_policy.cpus_per_gpu", "auto, off or a positive integer"),
    ("mem_per_gpu", 0, "submit_policy.mem_per_gpu", "auto, off or a positive integer"),
    ("require_time_for_gpus", "yes", "submit_policy.require_time_for_gpus", "true or false"),
    ("one_leaf_max_wait_s", 0, "submit_policy.one_leaf_max_wait_s", ">= 1"),
    ("gpu_jobs_in_cpu_partitions", "deny", "submit_policy.gpu_jobs_in_cpu_partitions", "refuse, allow"),
    ("require_time_for_gpu", True, "submit_policy.require_time_for_gpu", "did you mean 'require_time_for_gpus'"),
])
def test_bad_policy_names_the_key(key: str, value: object, path: str, words: str):
    inv = copy.deepcopy(INV)
    inv["submit_policy"][key] = value
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(inv)
    assert ei.value.path == path and words in str(ei.value)


def test_one_leaf_needs_a_tree():
    inv = copy.deepcopy(INV)
    del inv["topology"]
    with pytest.raises(InventoryError) as ei:
        load_cluster_dict(inv)
    assert ei.value.path == "submit_policy.one_leaf_if_fits" and "topology.switches" in str(ei.value)
    inv["submit_policy"]["one_leaf_if_fits"] = False
    assert load_cluster_dict(inv).submit_policy is not None


def test_conf_generate_writes_the_script_beside_slurm_conf_and_exits_2_on_bad_policy(tmp_path: Path):
    out = tmp_path / "etc"
    inv = copy.deepcopy(INV)
    r = sk("conf", "generate", str(write_inv(tmp_path, inv)), "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "job_submit.lua").read_text().startswith("-- generated by slurmkit")
    assert "JobSubmitPlugins=lua" in (out / "slurm.conf").read_text()
    inv["submit_policy"]["cpus_per_gpu"] = -1
    out2 = tmp_path / "etc2"
    r = sk("conf", "generate", str(write_inv(tmp_path, inv, "bad.yaml")), "--output", str(out2))
    assert r.returncode == 2 and "submit_policy.cpus_per_gpu" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out2.exists() or not any(out2.iterdir())


def test_examples_policy_loads():
    inv = yaml.safe_load((ROOT / "examples" / "mixed-pcie.yaml").read_text())
    assert load_cluster_dict(inv).submit_policy is not None


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_auto_sets_no_cpu_default_where_a_node_has_fewer_cpus_than_gpus(version: str):
    """A 4-core node with 8 GPUs has no whole per-GPU CPU share: auto used to write 1 CPU per GPU (DefCpuPerGPU=1
    and cpus_per_tres gpu:1), so `--gres=gpu:8` asked 8 CPUs of a 4-CPU node and could never run. Now neither the
    partition line nor the script sets a CPU default there (and the script says why); memory still has its share."""
    inv = copy.deepcopy(INV)
    inv["node_groups"].append({"name": "thin", "hosts": "thin[1-2]", "cpu": {"sockets": 1, "cores_per_socket": 4},
                               "memory_mb": 128000, "gpus": {"type": "h100", "count": 8, "files": "/dev/nvidia[0-7]"}})
    inv["partitions"] += [{"name": "thin", "groups": ["thin"]}, {"name": "both", "groups": ["g", "thin"]}]
    inv["topology"]["switches"][0]["nodes"] += ",thin1"
    inv["topology"]["switches"][1]["nodes"] += ",thin2"
    c = load_cluster_dict(inv)
    files = generate(c, version=version)
    parts = {ln.split()[0]: ln.split() for ln in files["slurm.conf"].splitlines() if ln.startswith("PartitionName=")}
    for name in ("thin", "both"):
        assert not [kv for kv in parts[f"PartitionName={name}"] if kv.startswith("DefCpuPerGPU=")], parts
        assert [kv for kv in parts[f"PartitionName={name}"] if kv.startswith("DefMemPerGPU=")]
    assert "DefCpuPerGPU=4" in parts["PartitionName=gpu"]
    text = files["job_submit.lua"]
    assert re.search(r"-- thin: cpus_per_gpu auto sets no default here: a node has fewer usable CPUs than GPUs", text)
    assert "-- gpu: cpus_per_gpu" not in text
    p = Plugin(text)
    pre = tres_gpu_prefix(version)
    for part in ("thin", "both", "gpu,thin"):
        rc, desc = p.run(tres_per_node=f"{pre}:8", time_limit=60, partition=part)
        assert rc == 0 and "cpus_per_tres" not in desc and desc["mem_per_tres"].startswith(f"{pre}:"), desc
    rc, desc = p.run(tres_per_node=f"{pre}:4", time_limit=60, partition="gpu")
    assert desc["cpus_per_tres"] == f"{pre}:4"


def typed_cluster(typed: bool = True):  # type: ignore[no-untyped-def]
    """INV with a second GPU type (l40s) in its own partition and in "any", accounting and a per-type quota."""
    inv = copy.deepcopy(INV)
    inv["node_groups"].append({"name": "l", "hosts": "l[1-2]", "cpu": {"sockets": 2, "cores_per_socket": 8},
                               "memory_mb": 64000, "gpus": {"type": "l40s", "count": 2, "files": "/dev/nvidia[0-1]"}})
    inv["partitions"] += [{"name": "l40s", "groups": ["l"]}, {"name": "any", "groups": ["g", "l"]}]
    inv["topology"]["switches"][0]["nodes"] += ",l1"
    inv["topology"]["switches"][1]["nodes"] += ",l2"
    inv["accounting"] = {"host": "head"}
    inv["tenants"] = {"qos": [{"name": "normal"}],
                      "accounts": [{"name": "t", "gpus": {"h100": 8} if typed else 8, "users": ["u"]}]}
    return load_cluster_dict(inv)


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_typed_quotas_add_the_gpu_type(version: str):
    """A per-type quota (gres/gpu:h100=8) does not hold an untyped request (Slurm charges it to gres/gpu only), so
    the script names the type where the job's partitions have one, keeps a typed request, and refuses an untyped
    one where they have several. Without typed quotas nothing changes. slurmctld running a rewritten job:
    tests/integration/test_submit_policy_lab.py::test_typed_quotas_get_the_type_and_slurmctld_runs_it."""
    pre = tres_gpu_prefix(version)
    p = Plugin(job_submit_lua(typed_cluster(), version))
    for asked, want in ((f"{pre}:3", f"{pre}:h100:3"), (f"{pre}", f"{pre}:h100:1"), ("gres/gpu=2", "gres/gpu:h100:2"),
                        (f"gres:shard:1,{pre}:2", f"gres:shard:1,{pre}:h100:2"), (f"{pre}:h100:2", f"{pre}:h100:2")):
        rc, desc = p.run(tres_per_node=asked, time_limit=60, partition="gpu")
        assert rc == 0 and desc["tres_per_node"] == want, (asked, desc)
    rc, desc = p.run(tres_per_job=f"{pre}:4", tres_per_task=f"{pre}:1", time_limit=60, partition="l40s")
    assert (desc["tres_per_job"], desc["tres_per_task"]) == (f"{pre}:l40s:4", f"{pre}:l40s:1")
    for part in ("any", "gpu,l40s"):
        rc, desc = p.run(tres_per_node=f"{pre}:2", time_limit=60, partition=part)
        assert rc == SLURM["ESLURM_ACCESS_DENIED"] and desc["tres_per_node"] == f"{pre}:2"
        assert "typed_gpu_quotas" in p.messages[-1] and "--gres=gpu:h100:N" in p.messages[-1]
    rc, desc = p.run(tres_per_node=f"{pre}:l40s:2", time_limit=60, partition="any")
    assert rc == 0 and desc["tres_per_node"] == f"{pre}:l40s:2"
    plain = Plugin(job_submit_lua(typed_cluster(typed=False), version))
    rc, desc = plain.run(tres_per_node=f"{pre}:2", time_limit=60, partition="any")
    assert rc == 0 and desc["tres_per_node"] == f"{pre}:2"


@pytest.mark.parametrize("limit", [0, INFINITE], ids=["zero", "INFINITE"])
def test_a_gpu_job_asking_no_time_limit_is_refused(plugin: Plugin, limit: int):
    """-t 0 reaches slurmctld as INFINITE (slurm_opt.c arg_set_time_limit), -t UNLIMITED too (time_str2mins); an API
    client can send 0. Either is no limit: the job would pend forever with PartitionTimeLimit (issue 24)."""
    rc, _ = plugin.run(tres_per_node="gres:gpu:1", time_limit=limit)
    assert rc == SLURM["ESLURM_INVALID_TIME_LIMIT"]
    assert "require_time_for_gpus" in plugin.messages[-1] and "finite time limit" in plugin.messages[-1]
    assert "UNLIMITED" in plugin.messages[-1] and "--time" in plugin.messages[-1]
    rc, _ = plugin.run(tres_per_node="gres:gpu:1", time_limit=limit, default_time={"gpu": 30})
    assert rc == SLURM["ESLURM_INVALID_TIME_LIMIT"]  # a DefaultTime does not replace a limit the job asked
    assert plugin.run(partition="cpu", time_limit=limit)[0] == 0  # CPU jobs: no time rule


def test_a_partition_default_time_stands_in_for_time(plugin: Plugin):
    rc, desc = plugin.run(tres_per_node="gres:gpu:1", default_time={"gpu": 30})
    assert rc == 0 and not plugin.messages and desc["time_limit"] == NO_VAL  # slurmctld applies the DefaultTime
    assert desc["cpus_per_tres"].endswith(":4")  # the rest of the policy still applies
    # every partition the job may land in needs one; DefaultTime=UNLIMITED (INFINITE) and 0 are none
    assert plugin.run(tres_per_node="gres:gpu:1", partition="gpu,all", default_time={"gpu": 30})[0] == \
        SLURM["ESLURM_MISSING_TIME_LIMIT"]
    assert plugin.run(tres_per_node="gres:gpu:1", partition="gpu,all", default_time={"gpu": 30, "all": 60})[0] == 0
    for none in (INFINITE, 0):
        assert plugin.run(tres_per_node="gres:gpu:1", default_time={"gpu": none})[0] == \
            SLURM["ESLURM_MISSING_TIME_LIMIT"]
    assert "DefaultTime" in plugin.messages[-1]
    # a partition the user cannot use is not in part_list: no default known
    assert plugin.run(tres_per_node="gres:gpu:1", partition="hidden", default_time={"gpu": 30})[0] == \
        SLURM["ESLURM_MISSING_TIME_LIMIT"]


def test_modify_adding_gpus_to_a_job_without_time_limit_is_refused(plugin: Plugin):
    """scontrol update jobid=J Gres=gpu:2: job_desc carries tres_per_node only, job_rec the job as it stands."""
    ver = plugin.version  # type: ignore[attr-defined]
    pre = tres_gpu_prefix(ver)
    for limit in (NO_VAL, INFINITE):
        rc, _ = plugin.modify({"time_limit": limit, "partition": "all"}, tres_per_node=f"{pre}:2")
        assert rc in (SLURM["ESLURM_MISSING_TIME_LIMIT"], SLURM["ESLURM_INVALID_TIME_LIMIT"]), limit
    told = plugin.messages if ver != "22.05" else plugin.logged  # 22.05 discards user_msg on modify
    assert "require_time_for_gpus" in told[-1] and "TimeLimit=" in told[-1]
    assert not (plugin.logged if ver != "22.05" else plugin.messages)
    # the same update with a time limit passes and gets the per-GPU defaults in the release spelling
    rc, desc = plugin.modify({"time_limit": NO_VAL, "partition": "all"}, tres_per_node=f"{pre}:2", time_limit=60)
    assert rc == 0 and desc["cpus_per_tres"] == f"{pre}:4" and desc["mem_per_tres"] == f"{pre}:64000"
    # setting TimeLimit=UNLIMITED (or 0) on a GPU job is refused too
    rc, _ = plugin.modify({"time_limit": 60, "tres_per_node": f"{pre}:1", "cpus_per_tres": f"{pre}:4"},
                          time_limit=INFINITE)
    assert rc == SLURM["ESLURM_INVALID_TIME_LIMIT"]
    assert plugin.modify({"time_limit": 60, "tres_per_node": f"{pre}:1"}, time_limit=0)[0] == \
        SLURM["ESLURM_INVALID_TIME_LIMIT"]


def test_modify_keeps_what_the_job_asked_and_leaves_unrelated_updates_alone(plugin: Plugin):
    pre = tres_gpu_prefix(plugin.version)  # type: ignore[attr-defined]
    gpu_job = {"time_limit": 60, "tres_per_node": f"{pre}:1", "cpus_per_tres": f"{pre}:4", "mem_per_tres": f"{pre}:9"}
    rc, desc = plugin.modify(gpu_job, tres_per_node=f"{pre}:2")  # the record's own per-GPU values stay
    assert rc == 0 and "cpus_per_tres" not in desc and "mem_per_tres" not in desc
    # a job that asked CPUs (-c 2: pn_min_cpus 2) and memory keeps them: no per-GPU default beside them
    rc, desc = plugin.modify({"time_limit": 60, "partition": "all", "pn_min_cpus": 2, "min_mem_per_cpu": 100},
                             tres_per_node=f"{pre}:1")
    assert rc == 0 and "cpus_per_tres" not in desc and "mem_per_tres" not in desc
    # an update of another field is not judged: a CPU job with no limit, a GPU job from before the policy
    assert plugin.modify({"time_limit": INFINITE, "partition": "all"}, name="renamed")[0] == 0
    assert plugin.modify({"time_limit": INFINITE, "tres_per_node": f"{pre}:1"}, comment="x")[0] == 0
    # a CPU job's time limit may be anything
    assert plugin.modify({"time_limit": 60, "partition": "all"}, time_limit=INFINITE)[0] == 0


def test_modify_treats_the_partitions_def_mem_per_cpu_as_no_memory_asked(plugin: Plugin):
    """A CPU job on a GPU partition got DefMemPerCPU at submit (slurmconf.cpu_job_mem_default; its record's
    min_mem_per_cpu equals it): adding GPUs gives it the per-GPU memory default, as for a job that asked none. Found by
    the lab (test_update_adding_gpus_to_a_job_without_time_limit_is_refused) once DefMemPerCPU was generated."""
    pre = tres_gpu_prefix(plugin.version)  # type: ignore[attr-defined]
    rc, desc = plugin.modify({"time_limit": NO_VAL, "partition": "all", "min_mem_per_cpu": 4000},
                             tres_per_node=f"{pre}:2", time_limit=60)
    assert rc == 0 and desc["mem_per_tres"] == f"{pre}:64000"
    # memory the job asked itself (another value) is kept
    rc, desc = plugin.modify({"time_limit": NO_VAL, "partition": "all", "min_mem_per_cpu": 5000},
                             tres_per_node=f"{pre}:2", time_limit=60)
    assert rc == 0 and "mem_per_tres" not in desc


def test_modify_keeps_the_partition_rules(plugin: Plugin):
    pre = tres_gpu_prefix(plugin.version)  # type: ignore[attr-defined]
    rc, _ = plugin.modify({"time_limit": 60, "partition": "cpu"}, tres_per_node=f"{pre}:1")
    assert rc == SLURM["ESLURM_ACCESS_DENIED"]
    rc, _ = plugin.modify({"time_limit": 60, "tres_per_node": f"{pre}:1"}, partition="cpu")
    assert rc == SLURM["ESLURM_ACCESS_DENIED"]
    # dropping the GPUs of a job in a GPU partition makes it a CPU job there
    assert plugin.modify({"time_limit": 60, "tres_per_node": f"{pre}:1"}, tres_per_node="")[0] == \
        SLURM["ESLURM_ACCESS_DENIED"]
    assert plugin.modify({"time_limit": 60, "partition": "all", "tres_per_node": f"{pre}:1"}, tres_per_node="")[0] == 0


def test_modify_adds_the_gpu_type_with_typed_quotas():
    p = Plugin(job_submit_lua(typed_cluster(), "24.11"))
    rc, desc = p.modify({"time_limit": 60, "partition": "gpu"}, tres_per_node="gres/gpu:2")
    assert rc == 0 and desc["tres_per_node"] == "gres/gpu:h100:2"


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_typed_quotas_refuse_a_gpu_list_with_and_without_a_type(version: str):
    """Issue 24 item 6: `gpu:2,gpu:h100:1` in one list. sbatch/slurmctld refuse it at submit (with and without type
    identification), but a job update took it and the typing made gpu:h100:2,gpu:h100:1, counted as 1 GPU (measured
    on both releases; tests/integration/test_tenants_lab.py::test_two_gpu_types_typed_quotas_against_slurmctld)."""
    pre = tres_gpu_prefix(version)
    p = Plugin(job_submit_lua(typed_cluster(), version))
    mixed = f"{pre}:2,{pre}:h100:1"
    rc, desc = p.run(tres_per_node=mixed, time_limit=60, partition="gpu")
    assert rc == SLURM["ESLURM_ACCESS_DENIED"] and desc["tres_per_node"] == mixed
    assert "typed_gpu_quotas" in p.messages[-1] and "with and without a type" in p.messages[-1]
    rc, desc = p.modify({"time_limit": 60, "partition": "gpu", "tres_per_node": f"{pre}:h100:1"}, tres_per_node=mixed)
    assert rc == SLURM["ESLURM_ACCESS_DENIED"]
    # two typed items, or a shard beside an untyped GPU, are not mixed
    assert p.run(tres_per_node=f"{pre}:h100:1,{pre}:l40s:1", time_limit=60, partition="any")[0] == 0
    assert p.run(tres_per_node=f"gres:shard:1,{pre}:2", time_limit=60, partition="gpu")[0] == 0
