"""`slurmkit conf ...` end to end through the real entry point: exit codes, one-line errors, nothing
written on bad input. The real slurmctld parse is switched off here (test_conf_realparse covers it)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import needs
from tests.unit.test_conf_apply_atomic import CHATTR

ROOT = Path(__file__).resolve().parents[2]
LAB = yaml.safe_load((ROOT / "examples" / "lab.yaml").read_text())


def sk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmkit.cli.main", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def write_inv(tmp_path: Path, inv: dict, name: str = "inv.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(inv, sort_keys=False))
    return p


def mutate(path: str, value: object) -> dict:
    d = copy.deepcopy(LAB)
    cur = d
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if k.isdigit() else cur[k]
    if value is KeyError:
        del cur[keys[-1]]
    else:
        cur[keys[-1]] = value
    return d


def two_groups() -> dict:
    d = copy.deepcopy(LAB)
    g = copy.deepcopy(d["node_groups"][0])
    g.update(name="other", hosts="node[8-9]")
    d["node_groups"].append(g)
    return d


def typo() -> dict:
    d = copy.deepcopy(LAB)
    d["node_groups"][0]["cpu"] = {"sockets": 2, "core_per_socket": 4}
    return d


BAD = [
    (typo(), r"node_groups[0].cpu.core_per_socket: unknown key; did you mean 'cores_per_socket'?"),
    (two_groups(), r"node_groups[1].hosts: host 'node8' is already in group 'h100'"),
    (mutate("node_groups.0.gpus.files", "/dev/nvidia[0-6]"), "node_groups[0].gpus.files: '/dev/nvidia[0-6]' names 7 device files but count is 8"),
    (mutate("node_groups.0.gpus.cores", ["0-3"] * 7 + ["8-9"]), "node_groups[0].gpus.cores[7]: '8-9' is not a core range inside the node's 8 cores"),
    (mutate("topology.switches.1.nodes", "node[5-9]"), "topology.switches[1].nodes: host 'node9' is not in any node group"),
    (mutate("topology.switches.1.nodes", "node[4-8]"), "topology.switches[1].nodes: host 'node4' is in both 'leaf1' and 'leaf2'"),
    (mutate("partitions.0.groups", ["h10"]), "partitions[0].groups[0]: unknown node group 'h10'; did you mean 'h100'?"),
    (mutate("topology", {"blocks": [{"name": "b1", "nodes": "node[1-8]"}]}), "topology.blocks: block topology needs Slurm >= 23.11, target is 22.05"),
]


@pytest.mark.parametrize(("inv", "message"), BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path: Path, inv: dict, message: str) -> None:
    out = tmp_path / "out"
    res = sk("conf", "generate", str(write_inv(tmp_path, inv)), "-o", str(out), "--no-real-parse")
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not out.exists()


def test_generate_writes_validated_files_and_inventory_copy(tmp_path: Path) -> None:
    inv = mutate("hooks", {"prolog": True, "epilog": True, "healthcheck_interval": 60})
    p = write_inv(tmp_path, inv)
    out = tmp_path / "etc"
    res = sk("conf", "generate", str(p), "-o", str(out), "--no-real-parse")
    assert res.returncode == 0, res.stderr
    names = sorted(x.name for x in out.iterdir())
    assert names == ["cgroup.conf", "gres.conf", "slurm.conf", "slurmkit-epilog", "slurmkit-health", "slurmkit-prolog",
                     "slurmkit.yaml", "topology.conf"]
    assert (out / "slurmkit.yaml").read_text() == p.read_text()
    assert sk("conf", "validate", str(out), "--no-real-parse").returncode == 0


def test_generate_hook_paths_are_those_of_the_install_dir_not_of_o(tmp_path: Path) -> None:
    """Issue 20 item 7: `-o out/` wrote out/'s absolute path into Prolog/Epilog/HealthCheckProgram; copied to
    /etc/slurm, every node ran a prolog path that does not exist."""
    import os

    p = write_inv(tmp_path, mutate("hooks", {"prolog": True, "epilog": True, "healthcheck_interval": 60}))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "generate", str(p), "-o", str(out),
                          "--no-real-parse"], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    conf = (out / "slurm.conf").read_text()
    assert "Prolog=/etc/slurm/slurmkit-prolog" in conf and "HealthCheckProgram=/etc/slurm/slurmkit-health" in conf
    assert str(out) not in conf and "--inventory /etc/slurm/slurmkit.yaml" in (out / "slurmkit-prolog").read_text()
    assert "note: hook paths assume the files are installed in /etc/slurm (--conf-dir to change)" in res.stderr
    env["SLURM_CONF"] = "/opt/slurm/etc/slurm.conf"
    res = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "conf", "generate", str(p), "-o", str(out),
                          "--no-real-parse"], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert "Epilog=/opt/slurm/etc/slurmkit-epilog" in (out / "slurm.conf").read_text()
    res = sk("conf", "generate", str(p), "-o", str(out), "--no-real-parse", "--conf-dir", "/srv/slurm")
    assert "Prolog=/srv/slurm/slurmkit-prolog" in (out / "slurm.conf").read_text()


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    res = sk("conf", "generate", str(ROOT / "examples" / "gb200-nvl72.yaml"), "--dry-run", "--no-real-parse",
             "--slurm-version", "25.05")
    assert res.returncode == 0 and "==> topology.yaml <==" in res.stdout and "block_sizes:" in res.stdout


def test_validate_dir_reports_problems_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "etc"
    assert sk("conf", "generate", str(ROOT / "examples" / "lab.yaml"), "-o", str(out), "--no-real-parse").returncode == 0
    (out / "gres.conf").write_text((out / "gres.conf").read_text().replace("File=/dev/nvidia7 ", ""))
    res = sk("conf", "validate", str(out), "--no-real-parse")
    assert res.returncode == 2 and "GPU line without File=" in res.stderr


def test_diff_and_apply_refuse_disruptive(tmp_path: Path) -> None:
    out = tmp_path / "etc"
    assert sk("conf", "generate", str(ROOT / "examples" / "lab.yaml"), "-o", str(out), "--no-real-parse").returncode == 0
    weight = write_inv(tmp_path, mutate("node_groups.0.weight", 50))
    res = sk("conf", "diff", str(weight), "--against", str(out))
    assert res.returncode == 0 and "[reconfigure] slurm.conf: NodeName=node[1-8] weight: 10 -> 50" in res.stdout
    fewer = write_inv(tmp_path, mutate("node_groups.0.memory_mb", 30000), "fewer.yaml")
    before = (out / "slurm.conf").read_text()
    res = sk("conf", "apply", str(fewer), "--to", str(out), "--no-real-parse")
    assert res.returncode == 3 and "[drain]" in res.stdout and "refusing to write" in res.stderr
    assert (out / "slurm.conf").read_text() == before
    res = sk("conf", "apply", str(weight), "--to", str(out), "--no-real-parse")
    assert res.returncode == 0, res.stderr
    assert "Weight=50" in (out / "slurm.conf").read_text()
    assert list((out / ".slurmkit-backup").iterdir())


def test_discover_runs_without_gpus() -> None:
    res = sk("discover", "--group", "x")
    assert res.returncode == 0
    frag = yaml.safe_load(res.stdout)[0]
    assert frag["name"] == "x" and frag["cpu"]["sockets"] >= 1


def test_apply_removes_stale_topology_yaml_and_diff_settles(tmp_path: Path) -> None:
    # issue 9 item 7: 25.05 loads topology.yaml whenever it exists; removing the topology must remove the file
    out = tmp_path / "etc"
    with_topo = write_inv(tmp_path, mutate("slurm_version", "25.05"), "with.yaml")
    assert sk("conf", "generate", str(with_topo), "-o", str(out), "--no-real-parse").returncode == 0
    assert (out / "topology.yaml").exists()
    (out / "slurmdbd.conf").write_text("StorageType=accounting_storage/mysql\n")  # a site file slurmkit never wrote
    inv = mutate("slurm_version", "25.05")
    del inv["topology"]
    flat = write_inv(tmp_path, inv, "flat.yaml")
    res = sk("conf", "diff", str(flat), "--against", str(out))
    assert res.returncode == 0 and "topology.yaml: topology:" in res.stdout and "-> (absent)" in res.stdout
    res = sk("conf", "apply", str(flat), "--to", str(out), "--no-real-parse", "--allow-disruptive")
    assert res.returncode == 0, res.stderr
    assert "removed topology.yaml" in res.stdout and not (out / "topology.yaml").exists()
    assert (out / "slurmdbd.conf").exists()
    backups = list((out / ".slurmkit-backup").iterdir())
    assert len(backups) == 1 and (backups[0] / "topology.yaml").exists()
    res = sk("conf", "diff", str(flat), "--against", str(out))
    assert res.returncode == 0 and "nothing to do" in res.stdout, res.stdout


def test_apply_leaves_a_hand_written_topology_file_and_stops_reporting_it(tmp_path: Path) -> None:
    out = tmp_path / "etc"
    inv = mutate("slurm_version", "25.05")
    del inv["topology"]
    flat = write_inv(tmp_path, inv, "flat.yaml")
    assert sk("conf", "generate", str(flat), "-o", str(out), "--no-real-parse").returncode == 0
    (out / "topology.yaml").write_text("- topology: site\n  cluster_default: true\n  flat: true\n")
    res = sk("conf", "diff", str(flat), "--against", str(out))
    assert "nothing to do" in res.stdout and "not written by slurmkit; left in place" in res.stderr


@needs(CHATTR, "chattr +i needs root and a filesystem that supports it")
def test_apply_with_an_immutable_file_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "etc"
    assert sk("conf", "generate", str(ROOT / "examples" / "lab.yaml"), "-o", str(out), "--no-real-parse").returncode == 0
    before = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
    weight = write_inv(tmp_path, mutate("node_groups.0.gpus.type", "h200"))
    subprocess.run(["chattr", "+i", str(out / "gres.conf")], check=True)
    try:
        res = sk("conf", "apply", str(weight), "--to", str(out), "--no-real-parse", "--allow-disruptive")
    finally:
        subprocess.run(["chattr", "-i", str(out / "gres.conf")], check=True)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("slurmkit: error: cannot write ")
    assert "gres.conf: Operation not permitted; no file in" in res.stderr
    assert {p.name: p.read_text() for p in out.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


KILLED_APPLY = """
import os, signal, sys
from slurmkit.generate import rollout
def step(what):
    if what == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)
rollout._step = step
from slurmkit.cli.main import main
main(sys.argv[2:])
"""


def test_apply_killed_mid_swap_is_finished_by_the_next_apply(tmp_path: Path) -> None:
    out = tmp_path / "etc"
    assert sk("conf", "generate", str(ROOT / "examples" / "lab.yaml"), "-o", str(out), "--no-real-parse").returncode == 0
    new = write_inv(tmp_path, mutate("node_groups.0.gpus.type", "h200"))
    argv = ["conf", "apply", str(new), "--to", str(out), "--no-real-parse", "--allow-disruptive"]
    killed = subprocess.run([sys.executable, "-c", KILLED_APPLY, "rename gres.conf", *argv], capture_output=True,
                            text=True, cwd=ROOT, timeout=120)
    assert killed.returncode == -9 and "Traceback" not in killed.stderr
    assert "h200" in (out / "slurm.conf").read_text() and "h200" not in (out / "gres.conf").read_text()  # mid-swap
    res = sk("conf", "diff", str(new), "--against", str(out))
    assert "an interrupted write is pending" in res.stderr
    # validate says it too, once and before the findings about the mixed files
    res = sk("conf", "validate", str(out), "--no-real-parse")
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert sum("an interrupted write is pending" in ln for ln in lines) == 1, res.stderr
    assert "an interrupted write is pending" in lines[0] and any(ln.startswith("error: ") for ln in lines[1:]), res.stderr
    res = sk(*argv)
    assert res.returncode == 0, res.stderr
    assert "finished an interrupted write (the new files are in place)" in res.stdout
    # rolled forward: the set is the new one, whole; the cluster has not taken it, so the rollout is still pending
    # (issue 20 item 3: a kill between write and reconfigure must not read as "in sync")
    assert "resuming the pending rollout at step 1 of 4" in res.stdout, res.stdout
    res = sk("conf", "diff", str(new), "--against", str(out))
    assert "nothing to do" in res.stdout and "a rollout is pending" in res.stderr and "steps 2-4 of 4 remain" in res.stderr
    assert "h200" in (out / "gres.conf").read_text()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp") or p.name == ".slurmkit-txn"]


def test_hooks_switched_off_removes_the_wrappers(tmp_path: Path) -> None:
    out = tmp_path / "etc"
    hooks = write_inv(tmp_path, mutate("hooks", {"prolog": True, "epilog": True, "healthcheck_interval": 60}), "h.yaml")
    assert sk("conf", "generate", str(hooks), "-o", str(out), "--no-real-parse").returncode == 0
    assert (out / "slurmkit-prolog").exists()
    plain = write_inv(tmp_path, LAB, "plain.yaml")
    res = sk("conf", "apply", str(plain), "--to", str(out), "--no-real-parse", "--allow-disruptive")
    assert res.returncode == 0, res.stderr
    assert "[push] slurmkit-prolog: file: present -> (absent)" in res.stdout
    assert not any((out / f"slurmkit-{k}").exists() for k in ("prolog", "epilog", "health"))
    assert (out / "slurmkit.yaml").read_text() == plain.read_text()


def test_a_moved_state_save_location_is_stop_copy_start_and_execute_refuses_it(tmp_path: Path) -> None:
    """StateSaveLocation holds every job: a new slurmctld (22.05 restart, 23.11+ even a reconfigure) reads the new,
    empty directory and starts with no jobs. The plan stops slurmctld, writes, has the admin copy the state (slurm.conf(5)
    RELOCATING CONTROLLERS), starts it; --execute, which cannot copy between hosts, refuses with nothing written."""
    from slurmkit.generate.rollout import COPY_STATE, START_CTLD, STOP_CTLD, WRITE, plan_steps, semantic_diff

    for ver in ("22.05", "24.11", "26.05"):
        old = {"slurm.conf": "ClusterName=c\nSlurmctldHost=h\nStateSaveLocation=/var/spool/slurmctld\n"}
        new = {"slurm.conf": "ClusterName=c\nSlurmctldHost=h\nStateSaveLocation=/srv/slurm/state\n"}
        steps = plan_steps(semantic_diff(old, new, ver), ver)
        assert [s.kind for s in steps][:4] == [STOP_CTLD, WRITE, COPY_STATE, START_CTLD], (ver, steps)
        assert "/var/spool/slurmctld into /srv/slurm/state" in steps[2].text
    out = tmp_path / "etc"
    assert sk("conf", "generate", str(ROOT / "examples" / "lab.yaml"), "-o", str(out), "--no-real-parse").returncode == 0
    moved = write_inv(tmp_path, mutate("controller.state_dir", "/srv/slurm/state"))
    before = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
    res = sk("conf", "diff", str(moved), "--against", str(out))
    assert res.returncode == 0 and "copy the state by hand on the controller: the files of StateSaveLocation" in res.stdout
    res = sk("conf", "apply", str(moved), "--to", str(out), "--no-real-parse", "--execute", "--allow-disruptive")
    assert res.returncode == 3 and ("refusing: --execute cannot carry this plan: step 3 is by hand (copy the files of "
                                    "StateSaveLocation /var/spool/slurmctld into /srv/slurm/state)") in res.stderr
    assert {p.name: p.read_text() for p in out.iterdir() if p.is_file()} == before


def test_a_state_save_location_spelled_differently_is_no_move_and_the_default_is_named() -> None:
    """slurmctld joins StateSaveLocation and a file name with "%s/job_state" (job_mgr.c, 22.05 24.11 26.05): a trailing
    or doubled slash is the same directory, so no by-hand copy (which --execute refuses) is planned for it. An unset
    StateSaveLocation is read_config.h DEFAULT_SAVE_STATE_LOC "/var/spool": the copy step names it."""
    from slurmkit.generate.rollout import COPY_STATE, plan_steps, semantic_diff

    head = "ClusterName=c\nSlurmctldHost=h\n"
    for ver in ("22.05", "24.11", "26.05"):
        for spelled in ("/var/spool/slurmctld/", "/var/spool//slurmctld", "/var/spool/./slurmctld"):
            old = {"slurm.conf": head + f"StateSaveLocation={spelled}\n"}
            new = {"slurm.conf": head + "StateSaveLocation=/var/spool/slurmctld\n"}
            assert semantic_diff(old, new, ver) == [], (ver, spelled)
        assert semantic_diff({"slurm.conf": head}, {"slurm.conf": head + "StateSaveLocation=/var/spool/\n"}, ver) == []
        steps = plan_steps(semantic_diff({"slurm.conf": head}, {"slurm.conf": head + "StateSaveLocation=/srv/s\n"},
                                         ver), ver)
        copy = next(s for s in steps if s.kind == COPY_STATE)
        assert "StateSaveLocation /var/spool (the default) into /srv/s" in copy.text, copy.text


def test_writing_a_state_move_leaves_the_steps_to_the_admin_not_to_an_execute_that_refuses(tmp_path: Path) -> None:
    """`conf apply --allow-disruptive` (no --execute) writes a StateSaveLocation move: the steps after the write
    include the by-hand copy, which --execute refuses. It said "`slurmkit conf apply --execute` does them" and kept a
    pending rollout that every later --execute refused and every diff reported, with no way to finish it."""
    out = tmp_path / "etc"
    assert sk("conf", "generate", str(ROOT / "examples" / "lab.yaml"), "-o", str(out), "--no-real-parse").returncode == 0
    moved = write_inv(tmp_path, mutate("controller.state_dir", "/srv/slurm/state"))
    res = sk("conf", "apply", str(moved), "--to", str(out), "--no-real-parse", "--allow-disruptive")
    assert res.returncode == 0, res.stderr
    assert "StateSaveLocation=/srv/slurm/state" in (out / "slurm.conf").read_text()
    assert "--execute` does them" not in res.stdout, res.stdout
    assert "steps 3-5 are yours" in res.stdout and "step 3 is by hand" in res.stdout, res.stdout
    res = sk("conf", "diff", str(moved), "--against", str(out))
    assert "a rollout is pending" not in res.stderr, res.stderr
    res = sk("conf", "apply", str(moved), "--to", str(out), "--no-real-parse", "--execute", "--allow-disruptive")
    assert res.returncode == 0 and "refusing" not in res.stderr, res.stderr


def test_a_state_move_beside_a_node_change_of_a_reconfigure_release_still_reconfigures() -> None:
    """24.11+ node changes are drain + reconfigure (slurm.conf(5) 24.11 NODE CONFIGURATION: "require restarting or
    reconfiguring all slurmctld and slurmd daemons"). Beside a StateSaveLocation move the plan started slurmctld only:
    the slurmds never read the new node definitions (a removed node's slurmd kept the old file)."""
    from slurmkit.generate.rollout import (
        COPY_STATE,
        RECONF,
        RESTART_SLURMD,
        START_CTLD,
        plan_steps,
        semantic_diff,
    )

    h = "ClusterName=c\nSlurmctldHost=h\n"
    n2 = "NodeName=n[1-2] CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n"
    n3 = "NodeName=n[1-3] CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n"
    less = "NodeName=n[1-3] CPUs=4 RealMemory=900\nPartitionName=p Nodes=ALL Default=YES\n"
    for ver in ("24.11", "26.05"):
        for after in (n2, less):
            old = {"slurm.conf": h + "StateSaveLocation=/a\n" + n3}
            new = {"slurm.conf": h + "StateSaveLocation=/b\n" + after}
            kinds = [s.kind for s in plan_steps(semantic_diff(old, new, ver), ver)]
            assert COPY_STATE in kinds and kinds.index(START_CTLD) > kinds.index(COPY_STATE), kinds
            assert RECONF in kinds[kinds.index(START_CTLD):] or RESTART_SLURMD in kinds, (ver, after, kinds)


def test_a_state_save_location_lost_with_a_broken_include_is_unknown_not_the_default() -> None:
    """A site keeps StateSaveLocation in an Include'd file that is gone: Slurm's parse of the running files fails
    (parse_config.c "Include" failed, fatal), so which directory slurmctld runs with is unknown from them -- it read
    the include before it went. The plan told the admin to copy /var/spool (the default) into the inventory's
    directory: the whole of /var/spool, into a directory under it, when slurmctld may already run on that directory."""
    from slurmkit.generate.rollout import COPY_STATE, plan_steps, semantic_diff

    head = "ClusterName=c\nSlurmctldHost=h\n"
    old = {"slurm.conf": head + "Include state.conf\n"}
    new = {"slurm.conf": head + "StateSaveLocation=/var/spool/slurmctld\n"}
    for ver in ("22.05", "24.11", "26.05"):
        changes = semantic_diff(old, new, ver)
        state = next(c for c in changes if c.subject == "StateSaveLocation")
        assert "unknown" in state.line() and "/var/spool (the default)" not in state.line(), state.line()
        copy = next(s for s in plan_steps(changes, ver) if s.kind == COPY_STATE)
        assert "/var/spool (the default)" not in copy.text, copy.text
        assert "scontrol show config" in copy.text and "/var/spool/slurmctld" in copy.text, copy.text


def test_a_state_move_stops_every_controller_not_only_the_primary() -> None:
    """With a backup controller (controller.hosts > 1, a shared state_dir) a stopped primary is taken over by the
    backup once it stops answering (backup.c run_backup: "assuming control when the primary controller stops
    responding", slurm-24-11-5-1): the backup, on the old files, keeps writing the old directory while the admin copies
    it. The plan's stop and start steps name every controller."""
    from slurmkit.generate.rollout import START_CTLD, STOP_CTLD, plan_steps, semantic_diff

    head = "ClusterName=c\nSlurmctldHost=h1\nSlurmctldHost=h2\n"
    for ver in ("22.05", "24.11", "26.05"):
        steps = plan_steps(semantic_diff({"slurm.conf": head + "StateSaveLocation=/a\n"},
                                         {"slurm.conf": head + "StateSaveLocation=/b\n"}, ver), ver)
        stop = next(s for s in steps if s.kind == STOP_CTLD)
        start = next(s for s in steps if s.kind == START_CTLD)
        assert "every controller" in stop.text and "backup" in stop.text, stop.text
        assert "backup" in start.text, start.text


def test_a_pending_rollout_of_a_site_with_include_files_keeps_them_in_its_base(tmp_path: Path) -> None:
    """A hand-split site (slurm.conf `Include nodes.conf`): `conf apply` keeps a pending rollout whose base (the
    files the cluster runs) is what the next apply plans against. The base held slurm.conf without nodes.conf, so the
    next apply read "Include nodes.conf: file not found (fatal)" and every node as added: a restart, and on 22.05 the
    stop-everything procedure, for a MinJobAge change. --execute's drain and registration checks read the base's
    nodes too (a drain of nodes defined in an Include drained none)."""
    from slurmkit.elastic.execute import _hosts_of, load_journal

    out = tmp_path / "etc"
    assert sk("conf", "generate", str(ROOT / "examples" / "lab.yaml"), "-o", str(out), "--no-real-parse").returncode == 0
    conf = (out / "slurm.conf").read_text().splitlines()
    (out / "nodes.conf").write_text("".join(ln + "\n" for ln in conf if ln.startswith("NodeName=")))
    (out / "slurm.conf").write_text("".join(("Include nodes.conf\n" if ln.startswith("NodeName=") else ln + "\n")
                                            for ln in conf))
    assert "nothing to do" in sk("conf", "diff", str(ROOT / "examples" / "lab.yaml"), "--against", str(out)).stdout
    inv = write_inv(tmp_path, mutate("slurm_conf", {"MinJobAge": 100}))
    res = sk("conf", "apply", str(inv), "--to", str(out), "--no-real-parse")
    assert res.returncode == 0 and "scontrol reconfigure" in res.stdout, res.stdout + res.stderr
    journal = load_journal(out)
    assert journal is not None and _hosts_of(journal["base"]) == [f"node{i}" for i in range(1, 9)]
    again = write_inv(tmp_path, mutate("slurm_conf", {"MinJobAge": 200}), "again.yaml")
    res = sk("conf", "apply", str(again), "--to", str(out), "--no-real-parse")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Include nodes.conf" not in res.stdout and "NodeName" not in res.stdout, res.stdout
    assert "MinJobAge: (absent) -> 200" in res.stdout and "stop slurmctld" not in res.stdout, res.stdout
