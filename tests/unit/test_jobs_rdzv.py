"""gpusub's own torchrun rendezvous backend (torchcompat.RDZV, issue 25 speed): the group rank is Slurm's
SLURM_NODEID, the world is --nnodes, the store a TCPStore at --rdzv-endpoint; nothing polls (c10d's SYNC polling
slept a second per round). Run in-process against real TCPStores of the dev venv's torch on free localhost ports,
and once end to end: two torchrun agents of the rendered AGENT code and two gloo workers (about 10 s of CPU)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from slurmkit.jobs.render import render
from slurmkit.jobs.spec import JobSpec
from slurmkit.jobs.torchcompat import AGENT, MAIN, RDZV, RDZV_BACKEND, SIGNALS
from tests.unit.test_jobs_render import facts

pytest.importorskip("torch.distributed")
from torch.distributed import TCPStore  # noqa: E402
from torch.distributed.elastic import rendezvous as rdzv  # noqa: E402


@pytest.fixture(scope="module")
def registered() -> type:
    ns: dict[str, Any] = {}
    exec(RDZV, ns)  # once per process: torch's registry refuses a second, different creator for the same name
    return ns["GpusubRendezvous"]  # type: ignore[no-any-return]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _handler(port: int, nodes: int = 2, **conf: Any) -> Any:
    params = rdzv.RendezvousParameters(backend=RDZV_BACKEND, endpoint=f"127.0.0.1:{port}", run_id="4711",
                                       min_nodes=nodes, max_nodes=nodes, timeout=20, **conf)
    return rdzv.rendezvous_handler_registry.create_handler(params)  # checks get_backend() == the name, too


def test_torchrun_is_rendered_with_gpusubs_backend_registered_in_the_agent() -> None:
    job = render(JobSpec(script="/t.py", nodes=2, gpus_per_node=2, python="/venv/bin/python"), facts(), "/r")
    text = job.request.script
    assert '--rdzv-backend=gpusub --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in text and "c10d" not in text
    assert AGENT == SIGNALS + RDZV + MAIN and MAIN.rstrip().endswith("os._exit(rc)")
    assert 'rdzv.rendezvous_handler_registry.register("gpusub", GpusubRendezvous)' in RDZV


def test_rank_is_slurm_nodeid_world_is_nnodes_and_the_store_is_the_endpoints(
        registered: type, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # the batch shell's store
    handlers = []
    for node in ("1", "0"):
        monkeypatch.setenv("SLURM_NODEID", node)
        handlers.append(_handler(batch.port, is_host="0"))
    infos = [h.next_rendezvous() for h in handlers]
    assert [(i.rank, i.world_size) for i in infos] == [(1, 2), (0, 2)]
    for h, i in zip(handlers, infos, strict=True):
        assert isinstance(h, registered) and h.use_agent_store and h.num_nodes_waiting() == 0
        assert h.get_run_id() == "4711" and not h.is_closed()
        # the workers' store is the same server, reached as clients (use_agent_store): MASTER_ADDR/PORT = endpoint
        assert (i.bootstrap_store_info.master_addr, i.bootstrap_store_info.master_port) == ("127.0.0.1", batch.port)
    infos[0].store.set("k", b"from node 1")
    assert infos[1].store.get("k") == b"from node 1"
    assert batch.get("4711/k") == b"from node 1"  # under the run id's prefix, as torch's static backend
    class Untouchable:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"shutdown used the store: {name}")

    for h in handlers:
        h.tcp = Untouchable()  # c10d's shutdown ran a close round on the store through its polling executor
        assert h.shutdown() is True
    assert batch.get("4711/k") == b"from node 1"  # the store stays with its host


def test_a_client_waits_for_the_store_to_listen_and_names_it_when_it_never_does(
        registered: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_NODEID", "1")
    port = _free_port()
    late: list[Any] = []
    timer = threading.Timer(0.5, lambda: late.append(TCPStore("127.0.0.1", port, is_master=True,
                                                                   wait_for_workers=False)))
    timer.start()  # the batch shell's store comes up after the agent started (both import torch)
    info = _handler(port).next_rendezvous()
    timer.join()
    info.store.set("k", b"v")
    assert late[0].get("4711/k") == b"v"
    nobody = _free_port()
    params = rdzv.RendezvousParameters(backend=RDZV_BACKEND, endpoint=f"127.0.0.1:{nobody}", run_id="1",
                                       min_nodes=2, max_nodes=2, timeout=1)
    with pytest.raises(SystemExit, match=rf"^gpusub rendezvous: nothing listens on 127.0.0.1:{nobody} after 1 s "
                                         r"\(the store on the first node\): .*refused"):
        rdzv.rendezvous_handler_registry.create_handler(params).next_rendezvous()


def test_is_host_makes_the_agent_the_store_server(registered: type, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _free_port()
    monkeypatch.setenv("SLURM_NODEID", "0")
    info = _handler(port, nodes=1, is_host="1").next_rendezvous()
    assert (info.rank, info.world_size) == (0, 1)
    info.store.set("k", b"v")
    client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
    assert client.get("4711/k") == b"v"


def test_releases_without_rendezvous_info_get_the_tuple(registered: type, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("SLURM_NODEID", "1")
    handler = _handler(batch.port)
    monkeypatch.delattr(rdzv, "RendezvousInfo")
    store, rank, world = handler.next_rendezvous()
    store.set("k", b"v")
    assert (rank, world, batch.get("4711/k")) == (1, 2, b"v")


@pytest.mark.parametrize("node", [None, "", "x", "-1", "2", "\u00b2", "1 "])
def test_a_missing_or_invalid_slurm_nodeid_is_a_one_line_error(
        registered: type, monkeypatch: pytest.MonkeyPatch, node: str | None) -> None:
    if node is None:
        monkeypatch.delenv("SLURM_NODEID", raising=False)
    else:
        monkeypatch.setenv("SLURM_NODEID", node)
    with pytest.raises(SystemExit) as e:
        _handler(_free_port())
    msg = str(e.value.code)
    assert msg.startswith("gpusub rendezvous: SLURM_NODEID=") and "--nnodes=2" in msg and "\n" not in msg


def test_an_endpoint_without_a_port_is_a_one_line_error(registered: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_NODEID", "0")
    params = rdzv.RendezvousParameters(backend=RDZV_BACKEND, endpoint="node1", run_id="1", min_nodes=1, max_nodes=1)
    with pytest.raises(SystemExit, match=r"^gpusub rendezvous: --rdzv-endpoint='node1' is not HOST:PORT$"):
        rdzv.rendezvous_handler_registry.create_handler(params)


WORKER = """import json, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")
out = {k: os.environ.get(k) for k in keys}
out["sum"] = t.item()
open(os.path.join(sys.argv[1], "rank%s.json" % dist.get_rank()), "w").write(json.dumps(out))
dist.destroy_process_group()
"""


def test_two_agents_rendezvous_run_gloo_workers_and_pass_the_exit_barrier(tmp_path: Path) -> None:
    """Two torchrun agents (the rendered AGENT code, SLURM_NODEID 0 and 1) against a store hosted here, as the
    batch shell hosts it: the workers get torch's usual environment and reach the same store."""
    batch = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, multi_tenant=True)
    (tmp_path / "w.py").write_text(WORKER)
    agents = [subprocess.Popen(
        [sys.executable, "-c", AGENT, "--nnodes=2", "--nproc-per-node=1", f"--rdzv-backend={RDZV_BACKEND}",
         f"--rdzv-endpoint=127.0.0.1:{batch.port}", "--rdzv-id=77", "--rdzv-conf=is_host=0", "--max-restarts=0",
         "--monitor-interval=0.1", str(tmp_path / "w.py"), str(tmp_path)],
        env={**os.environ, "SLURM_NODEID": str(n), "LOGLEVEL": "INFO"}, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in (1, 0)]
    outs = [a.communicate(timeout=240)[0] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert all("Done waiting for other agents" in o for o in outs)  # the exit barrier ran on the shared store
    ranks = {r["RANK"]: r for r in (json.loads(p.read_text()) for p in tmp_path.glob("rank*.json"))}
    assert sorted(ranks) == ["0", "1"]
    for rank, r in ranks.items():
        assert r == {"RANK": rank, "LOCAL_RANK": "0", "WORLD_SIZE": "2", "GROUP_RANK": rank,
                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(batch.port), "TORCHELASTIC_RUN_ID": "77",
                     "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
                     "TORCHELASTIC_MAX_RESTARTS": "0", "sum": 3.0}


@pytest.mark.parametrize("worker,rc,said", [
    ("import sys; sys.exit(0)", 0, ""),
    ("import sys; sys.exit(3)", 1, "ChildFailedError"),  # torchrun: a failed worker is the agent's exit 1
    ("raise SystemExit('no')", 1, "ChildFailedError"),
])
def test_the_agent_exits_with_torchruns_status_without_the_teardown(tmp_path: Path, worker: str, rc: int,
                                                                    said: str) -> None:
    """The agent ends with os._exit after torchrun's main(): its exit status and its failure report are those of
    ``sys.exit(main())``, and its output is flushed (one node, the agent hosting the store)."""
    (tmp_path / "w.py").write_text(worker + "\n")
    port = _free_port()
    res = subprocess.run(
        [sys.executable, "-c", AGENT, "--nnodes=1", "--nproc-per-node=1", f"--rdzv-backend={RDZV_BACKEND}",
         f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=5", "--rdzv-conf=is_host=1", "--max-restarts=0",
         "--monitor-interval=0.1", str(tmp_path / "w.py")],
        env={**os.environ, "SLURM_NODEID": "0", "LOGLEVEL": "INFO"}, cwd=tmp_path, capture_output=True, text=True,
        timeout=120)
    assert res.returncode == rc, res.stderr[-2000:]
    assert said in res.stderr
    assert "Done waiting for other agents" in res.stderr or rc  # the log handlers were flushed before os._exit
