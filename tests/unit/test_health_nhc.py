"""The checks NHC / AzNHC sites run that slurmkit lacked (issue 35 item 5): inodes, swap, required interfaces, DMI
fields, NVMe count, load average, processes of users without a job here, the site's file tests and commands. Each
runs through run_checks as the health hook runs it, on temporary /proc and /sys trees (real files, real
subprocesses for the commands)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from slurmkit.errors import InventoryError
from slurmkit.health.expect import Expectations
from slurmkit.health.host import HostPaths
from slurmkit.health.policy import CHECK_DEFAULTS, parse_policy
from slurmkit.health.result import Action, Status
from slurmkit.health.runner import RunSpec, run_checks
from tests.unit.test_health_hooks import fake_proc

NVML = Path(__file__).resolve().parents[1] / "data" / "nvml"
NEW = ("inodes", "swap", "interfaces", "dmi", "nvme", "load", "unauth_procs", "files", "commands")
NODE = Expectations(node="node1", group="h100", cpus=8, memory_mb=1000)


def tree(tmp: Path, *, swap_kb: tuple[int, int] = (0, 0), load: str = "0.50 0.40 0.30 1/200 999",
         cpus: str = "0-7", nics: dict[str, tuple[str, str, str | None]] | None = None,
         dmi: dict[str, str] | None = None, nvme: dict[str, str] | None = None) -> HostPaths:
    """``nics``: name -> (flags, operstate, carrier or None for EINVAL); ``nvme``: controller -> state."""
    sys_root, proc = tmp / "sys", tmp / "proc"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text(f"MemTotal: 1048576 kB\nMemAvailable: 524288 kB\nSwapTotal: {swap_kb[0]} kB\n"
                                  f"SwapFree: {swap_kb[1]} kB\n")
    (proc / "loadavg").write_text(load + "\n")
    (sys_root / "devices/system/cpu").mkdir(parents=True, exist_ok=True)
    (sys_root / "devices/system/cpu/online").write_text(cpus + "\n")
    for name, (flags, oper, carrier) in (nics or {}).items():
        d = sys_root / "class/net" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "flags").write_text(flags + "\n")
        (d / "operstate").write_text(oper + "\n")
        (d / "type").write_text("32\n" if name.startswith("ib") else "1\n")
        if carrier is not None:
            (d / "carrier").write_text(carrier + "\n")
    if dmi is not None:
        d = sys_root / "class/dmi/id"
        d.mkdir(parents=True, exist_ok=True)
        for k, v in dmi.items():
            (d / k).write_text(v + "\n")
    (sys_root / "class/block").mkdir(parents=True, exist_ok=True)
    for ctrl, state in (nvme or {}).items():
        c = sys_root / "class/nvme" / ctrl
        c.mkdir(parents=True, exist_ok=True)
        (c / "state").write_text(state + "\n")
        (c / "model").write_text("Dell Ent NVMe\n")
        (sys_root / "class/block" / f"{ctrl}n1").mkdir()
        (sys_root / "class/block" / f"{ctrl}n1p1").mkdir()  # a partition: not counted
    (tmp / "dev").mkdir(exist_ok=True)
    return HostPaths(sys_root=str(sys_root), proc_root=str(proc), kmsg=str(tmp / "kmsg"), dev_root=str(tmp / "dev"))


def run(tmp: Path, paths: HostPaths, policy: dict | None = None, *, only: tuple[str, ...] = NEW,
        expect: Expectations = NODE, source: str | None = None, hook: str = "health"):
    raw = {n: False for n in CHECK_DEFAULTS if n not in only and n != "nvml"}
    raw.update(policy or {})
    pol = parse_policy(raw)
    sdir = tmp / "state"
    sdir.mkdir(exist_ok=True)
    spec = RunSpec(hook=hook, node="node1", policy=pol, expect=expect, node_state_dir=str(sdir),
                   fake_nvml=str(NVML / "healthy-h100x8.json"), paths=paths, deadline=time.monotonic() + pol.budget_s,
                   policy_source=source)
    return {r.name: r for r in run_checks(spec).results}


def test_defaults_pass_or_skip_and_never_run_in_the_prolog(tmp_path):
    res = run(tmp_path, tree(tmp_path))
    assert {n for n in NEW if n in res} == set(NEW) - {"unauth_procs"}  # off until a site turns it on
    for n in NEW:
        if n in res:
            assert res[n].status in (Status.OK, Status.SKIP), (n, res[n].summary)
    assert res["files"].status == Status.SKIP and res["commands"].status == Status.SKIP
    assert res["interfaces"].status == Status.SKIP  # nothing required, no eth NIC in the inventory
    pro = run(tmp_path, tree(tmp_path), hook="prolog")
    assert not any(n in pro for n in NEW)  # the prolog's hot path reads none of them
    assert all(CHECK_DEFAULTS[n].hooks == ("health", "check") for n in NEW)


def test_inodes_free_against_the_floor(tmp_path, monkeypatch):
    p = tree(tmp_path)
    res = run(tmp_path, p, {"inodes": {"paths": [str(tmp_path)]}}, only=("inodes",))
    assert res["inodes"].status == Status.OK and "inodes free" in res["inodes"].summary  # the real statvfs

    real = os.statvfs

    class Vfs:
        def __init__(self, files: int, favail: int):
            self.f_files, self.f_favail = files, favail

    def statvfs(path):
        if str(path) == str(tmp_path):
            return Vfs(1_000_000, 20_000)  # 2% free: a job that made millions of small files
        if str(path) == "/btrfs":
            return Vfs(0, 0)
        return real(path)
    monkeypatch.setattr(os, "statvfs", statvfs)
    res = run(tmp_path, p, {"inodes": {"paths": [str(tmp_path)]}}, only=("inodes",))
    assert res["inodes"].status == Status.FAIL and res["inodes"].action == Action.DRAIN
    assert res["inodes"].findings == [f"{tmp_path} 2% inodes free"]
    res = run(tmp_path, p, {"inodes": {"paths": ["/btrfs"]}}, only=("inodes",))
    assert res["inodes"].status == Status.SKIP  # no inode count: NHC's "bogus check", never a failure
    res = run(tmp_path, p, {"inodes": {"paths": [str(tmp_path / "gone")]}}, only=("inodes",))
    assert res["inodes"].findings == [f"{tmp_path / 'gone'} no such file or directory"]


def test_swap_size_and_free(tmp_path):
    none = tree(tmp_path)
    assert run(tmp_path, none, {"swap": {"max_mb": 0}}, only=("swap",))["swap"].status == Status.OK
    some = tree(tmp_path, swap_kb=(8 * 1024 * 1024, 1024 * 1024))
    res = run(tmp_path, some, {"swap": {"max_mb": 0}}, only=("swap",))
    assert res["swap"].findings == ["swap 8192>0MB"]  # AzNHC's GPU confs: check_hw_swap 0kB 0kB
    assert res["swap"].status == Status.WARN and res["swap"].action == Action.WARN  # configuration: warns
    res = run(tmp_path, some, {"swap": {"min_mb": 4096, "min_free_pct": 50, "action": "drain"}}, only=("swap",))
    assert res["swap"].findings == ["swap 12% free<50%"] and res["swap"].action == Action.DRAIN
    assert run(tmp_path, some, {"swap": {"min_mb": 16384}}, only=("swap",))["swap"].findings == ["swap 8192<16384MB"]


def test_required_interfaces_present_and_up(tmp_path):
    nics = {"eth0": ("0x1003", "up", "1"), "ib0": ("0x1003", "up", "1"), "ib1": ("0x1002", "down", None),
            "ib2": ("0x1003", "down", "0"), "lo": ("0x9", "unknown", "1")}
    p = tree(tmp_path, nics=nics)
    res = run(tmp_path, p, {"interfaces": {"required": ["lo", "eth0", "ib0"]}}, only=("interfaces",))
    assert res["interfaces"].status == Status.OK, res["interfaces"].summary  # lo's operstate is "unknown"
    res = run(tmp_path, p, {"interfaces": {"required": ["eth0", "ib1", "ib2", "ib7"]}}, only=("interfaces",))
    assert res["interfaces"].findings == ["if ib1 admin down", "if ib2 down", "if ib7 missing"]
    assert res["interfaces"].action == Action.DRAIN
    # the inventory's kind: eth NICs are required too, and a node group's own list replaces the global one
    exp = Expectations(node="node1", group="h100", interfaces=("eth1",))
    res = run(tmp_path, p, {"interfaces": {"required": ["eth0"], "by_group": {"h100": ["ib0"], "cpu": ["ib7"]}}},
              only=("interfaces",), expect=exp)
    assert res["interfaces"].findings == ["if eth1 missing"] and res["interfaces"].evidence["required"] == ["ib0",
                                                                                                             "eth1"]


def test_dmi_fields_against_the_expected_values(tmp_path):
    p = tree(tmp_path, dmi={"bios_version": "2.19.1", "bios_vendor": "Dell Inc.", "board_name": "0K4JGT"})
    res = run(tmp_path, p, only=("dmi",))
    assert res["dmi"].status == Status.OK and "bios_version 2.19.1" in res["dmi"].summary  # recorded, no judgement
    ok = {"dmi": {"expected": {"bios_version": ["2.19.1", "2.20.0"], "bios_vendor": "Dell Inc."}}}
    assert run(tmp_path, p, ok, only=("dmi",))["dmi"].status == Status.OK
    bad = {"dmi": {"expected": {"bios_version": "2.20.0"}, "by_group": {"a100": {"bios_version": "1.0"}}}}
    res = run(tmp_path, p, bad, only=("dmi",))
    assert res["dmi"].findings == ["dmi bios_version '2.19.1' not 2.20.0"] and res["dmi"].action == Action.WARN
    grp = {"dmi": {"expected": {"bios_version": "2.20.0"}, "by_group": {"h100": {"bios_version": "2.19.1"}}}}
    assert run(tmp_path, p, grp, only=("dmi",))["dmi"].status == Status.OK  # the node's group's own expectation
    res = run(tmp_path, p, {"dmi": {"expected": {"product_name": "R760xa"}, "action": "drain"}}, only=("dmi",))
    assert res["dmi"].findings == ["dmi product_name unreadable"] and res["dmi"].action == Action.DRAIN
    nodmi = tmp_path / "nodmi"
    nodmi.mkdir()
    assert run(nodmi, tree(nodmi), only=("dmi",))["dmi"].status == Status.SKIP


def test_nvme_count_and_dead_controller(tmp_path):
    p = tree(tmp_path, nvme={f"nvme{i}": "live" for i in range(8)})
    res = run(tmp_path, p, {"nvme": {"expected": 8}}, only=("nvme",))
    assert res["nvme"].status == Status.OK and res["nvme"].summary == "8 NVMe namespace(s) of 8 expected"
    other = tmp_path / "b"
    other.mkdir()
    q = tree(other, nvme={"nvme0": "live", "nvme1": "dead", **{f"nvme{i}": "live" for i in range(2, 7)}})
    res = run(other, q, {"nvme": {"by_group": {"h100": 8}}}, only=("nvme",))
    assert res["nvme"].findings == ["nvme count 7/8", "nvme nvme1 dead"] and res["nvme"].action == Action.DRAIN


def test_load_average_limits(tmp_path):
    p = tree(tmp_path, load="12.00 9.50 3.00 4/300 1234")
    assert run(tmp_path, p, only=("load",))["load"].status == Status.OK  # no limits: recorded
    res = run(tmp_path, p, {"load": {"max_1m": 12, "max_15m": 8}}, only=("load",))
    assert res["load"].findings == ["load 1m 12>=12"] and res["load"].status == Status.WARN
    res = run(tmp_path, p, {"load": {"max_5m": 1.0, "per_cpu": True, "action": "drain"}}, only=("load",))
    assert res["load"].findings == ["load 5m 9.5>=8"] and res["load"].action == Action.DRAIN  # 1.0 x 8 CPUs
    assert run(tmp_path, p, {"load": {"max_5m": 1.5, "per_cpu": True}}, only=("load",))["load"].status == Status.OK


def test_processes_of_users_without_a_job_here(tmp_path):
    p = tree(tmp_path)
    proc = Path(p.proc_root)
    fake_proc(proc, 900, uid=0, comm="slurmstepd", cmdline="slurmstepd: [55.batch]")  # job 55 runs here
    fake_proc(proc, 10, uid=1001, ppid=900)  # alice's job step (proctrack/linuxproc: under the slurmstepd)
    fake_proc(proc, 11, uid=1001, comm="tmux")  # alice's too, outside the job: she has a job here
    fake_proc(proc, 12, uid=1002, comm="miner", job="55")  # bob claims job 55 in his environment: not believed
    fake_proc(proc, 13, uid=1002, comm="miner")
    fake_proc(proc, 14, uid=1003, cgroup="0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n")  # ended
    fake_proc(proc, 20, uid=999, comm="chronyd")  # a system user
    fake_proc(proc, 21, uid=1500, comm="backup")  # the site's exempt service account
    pol = {"unauth_procs": {"enabled": True, "exempt_users": ["1500"]}}
    res = run(tmp_path, p, pol, only=("unauth_procs",))
    r = res["unauth_procs"]
    assert r.status == Status.FAIL and r.action == Action.DRAIN
    assert r.findings == ["user uid1002 pid 12 +1 without a job", "user uid1003 pid 14 without a job"], r.findings
    assert r.evidence["users_with_jobs"] == [1001] and r.evidence["jobs"] == ["55"]
    # the job ends (its slurmstepd gone): alice's leftovers are unauthorised too; min_uid moves the system range
    import shutil

    shutil.rmtree(proc / "900")
    res = run(tmp_path, p, {"unauth_procs": {"enabled": True, "min_uid": 1002, "exempt_users": ["1500"]}},
              only=("unauth_procs",))
    assert res["unauth_procs"].findings == ["user uid1002 pid 12 +1 without a job", "user uid1003 pid 14 without a job"]
    res = run(tmp_path, p, pol, only=("unauth_procs",))
    assert res["unauth_procs"].findings[0] == "user uid1001 pid 10 +1 without a job", res["unauth_procs"].findings


def test_site_file_tests(tmp_path):
    ok, node_file = tmp_path / "ok", tmp_path / "node1.flag"
    ok.write_text("mode=production\nGPU=ready\n")
    node_file.write_text("")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    p = tree(tmp_path)
    tests = [{"path": str(ok), "test": ["file", "readable", "nonempty"], "match": "^GPU=ready$",
              "no_match": "maintenance"},
             {"path": str(tmp_path / "%n.flag"), "test": "exists"},
             {"path": str(tmp_path / "drain-me"), "test": "exists", "not": True},
             {"path": str(tmp_path), "test": "dir"}]
    res = run(tmp_path, p, {"files": {"tests": tests}}, only=("files",))
    assert res["files"].status == Status.OK, res["files"].summary
    (tmp_path / "drain-me").write_text("")
    ok.write_text("mode=maintenance\n")
    tests += [{"path": str(tmp_path / "missing"), "test": ["exists", "file"]},
              {"path": str(node_file), "test": "nonempty"},
              {"path": str(fifo), "test": "pipe", "match": "x"}]  # a FIFO is never opened for reading
    res = run(tmp_path, p, {"files": {"tests": tests}}, only=("files",))
    assert res["files"].findings == [f"file {ok} lacks the expected line", f"file {tmp_path}/drain-me is exists",
                                     f"file {tmp_path}/missing missing", f"file {node_file} empty",
                                     f"file {fifo} unreadable (not a regular file)"], res["files"].findings
    assert res["files"].action == Action.DRAIN
    assert "maintenance" not in str(res["files"].evidence)  # no file content in the record


def _policy_file(tmp: Path, mode: int = 0o644) -> str:
    f = tmp / "site-policy.yaml"
    f.write_text("# the site's policy file\n")
    f.chmod(mode)
    return str(f)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def test_site_commands_pass_fail_and_never_see_the_callers_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    src = _policy_file(tmp_path)
    cmds = [{"name": "true", "argv": ["/bin/true"]},
            {"name": "env", "argv": ["/usr/bin/env"], "match": "^LANG=C$", "no_match": "SLURM_JOB_ID"},
            {"name": "sh", "shell": "echo GPFS HEALTHY; exit 3", "exit": 3, "match": "HEALTHY"}]
    res = run(tmp_path, tree(tmp_path), {"commands": {"run": cmds}}, only=("commands",), source=src)
    assert res["commands"].status == Status.OK, res["commands"].summary
    assert res["commands"].evidence["commands"][1]["argv"] == ["/usr/bin/env"]
    bad = [{"name": "false", "argv": ["/bin/false"]},
           {"name": "lacks", "argv": ["/bin/echo", "DEGRADED"], "match": "HEALTHY"},
           {"name": "has", "argv": ["/bin/echo", "ERROR: fan"], "no_match": "^ERROR"},
           {"name": "nosuch", "argv": ["/nonexistent/check"]},
           {"name": "argv-is-no-shell", "argv": ["/bin/echo", "$(touch " + str(tmp_path / "pwned") + ")"],
            "match": "touch"}]
    res = run(tmp_path, tree(tmp_path), {"commands": {"run": bad}}, only=("commands",), source=src)
    assert res["commands"].findings == ["cmd false exit 1", "cmd lacks output lacks /HEALTHY/",
                                        "cmd has output has /^ERROR/",
                                        "cmd nosuch not run (cannot run /nonexistent/check: No such file or directory)"]
    assert not (tmp_path / "pwned").exists()  # argv is never handed to a shell
    assert res["commands"].action == Action.DRAIN


def test_site_command_timeout_kills_its_whole_group_and_output_is_bounded(tmp_path):
    src = _policy_file(tmp_path)
    marker = tmp_path / "child-alive"
    # the shell's child would touch the marker after 3 s: killed with the group at the timeout, it never does
    cmds = [{"name": "hang", "shell": f"(sleep 3; touch {marker}) & sleep 30", "timeout_s": 0.5},
            {"name": "chatty", "argv": ["/usr/bin/yes"], "max_output_bytes": 1000, "timeout_s": 0.3}]
    res = run(tmp_path, tree(tmp_path), {"commands": {"run": cmds, "timeout_s": 2.0}}, only=("commands",),
              source=src)
    assert res["commands"].findings == ["cmd hang timed out after 0.5s", "cmd chatty timed out after 0.3s"]
    chatty = res["commands"].evidence["commands"][1]
    assert chatty["truncated"] and len(chatty["output_tail"]) <= 240
    time.sleep(3.2)
    assert not marker.exists()


@needs_root
def test_site_commands_run_only_from_a_policy_file_no_one_else_can_change(tmp_path):
    cmds = {"commands": {"run": [{"name": "t", "argv": ["/bin/true"]}]}}
    p = tree(tmp_path)
    res = run(tmp_path, p, cmds, only=("commands",), source=None)
    assert res["commands"].status == Status.WARN and "no file of its own" in res["commands"].summary
    res = run(tmp_path, p, cmds, only=("commands",), source=_policy_file(tmp_path, 0o646))
    assert res["commands"].status == Status.WARN and "writable by others" in res["commands"].summary
    assert res["commands"].action == Action.WARN  # the node is not at fault: never a drain
    src = _policy_file(tmp_path)
    os.chown(src, 65534, 65534)
    res = run(tmp_path, p, cmds, only=("commands",), source=src)
    assert "owned by uid 65534" in res["commands"].summary and res["commands"].evidence["commands"] == []
    os.chown(src, 0, 0)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o757)  # anyone may replace the file in it
    moved = shared / "policy.yaml"
    os.rename(src, moved)
    res = run(tmp_path, p, cmds, only=("commands",), source=str(moved))
    assert f"{shared} is writable by others" in res["commands"].summary
    link = tmp_path / "link.yaml"
    os.symlink(moved, link)  # the file a link leads to is the one judged
    assert "writable by others" in run(tmp_path, p, cmds, only=("commands",), source=str(link))["commands"].summary
    shared.chmod(0o1757)  # sticky (as /tmp): only the entry's owner can replace it
    assert run(tmp_path, p, cmds, only=("commands",), source=str(moved))["commands"].status == Status.OK


@pytest.mark.parametrize("raw,path,msg", [
    ({"files": {"tests": [{"path": "/x", "test": "exsts"}]}}, "hooks.checks.files.tests[0].test[0]",
     "did you mean 'exists'"),
    ({"files": {"tests": [{"path": "rel", "test": "file"}]}}, "hooks.checks.files.tests[0].path", "absolute path"),
    ({"files": {"tests": [{"path": "/x", "match": "("}]}}, "hooks.checks.files.tests[0].match", "not a valid"),
    ({"commands": {"run": [{"name": "a", "argv": ["true"]}]}}, "hooks.checks.commands.run[0].argv[0]",
     "absolute path"),
    ({"commands": {"run": [{"name": "a", "argv": ["/bin/true"], "shell": "true"}]}}, "hooks.checks.commands.run[0]",
     "exactly one of argv"),
    ({"commands": {"run": [{"name": "a", "argv": ["/bin/true"]}, {"name": "a", "shell": "x"}]}},
     "hooks.checks.commands.run[1].name", "used twice"),
    ({"commands": {"run": [{"name": "a", "argv": ["/bin/true"], "timeout_s": 3}]}},
     "hooks.checks.commands.run[0].timeout_s", "must not exceed the check's timeout_s (1)"),
    ({"commands": {"run": [{"name": "a", "argv": ["/bin/true"], "max_output_bytes": 1 << 21}]}},
     "hooks.checks.commands.run[0].max_output_bytes", "at most 1048576"),
    ({"dmi": {"expected": {"bios_versoin": "1"}}}, "hooks.checks.dmi.expected.bios_versoin",
     "did you mean 'bios_version'"),
    ({"nvme": {"by_group": {"h100": -1}}}, "hooks.checks.nvme.by_group.h100", "must be >= 0"),
    ({"interfaces": {"required": ["eth0", "ib0:1"]}}, "hooks.checks.interfaces.required[1]", "interface name"),
    ({"load": {"max_1m": 0}}, "hooks.checks.load.max_1m", "must be > 0"),
    ({"unauth_procs": {"exempt_users": "backup"}}, "hooks.checks.unauth_procs.exempt_users", "list of user"),
])
def test_policy_errors_name_the_key(raw, path, msg):
    with pytest.raises(InventoryError) as ei:
        parse_policy(raw)
    text = ei.value.one_line()
    assert path in text and msg in text, text
