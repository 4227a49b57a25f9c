"""What each torch release understands: torchrun flags and the NCCL/flight-recorder variable names (pure).

Every row below was read from that release's own files (the PyPI wheels' ``torch/distributed/run.py``,
``torch/distributed/launcher/api.py`` and ``torch/include/torch/csrc/distributed/c10d/*.hpp``):

* ``torchrun --signals-to-handle`` (and ``TORCHELASTIC_SIGNALS_TO_HANDLE``): absent in 2.9.1's run.py, present in
  2.10.0's. gpusub does not need it: the agent is kept out of the SIGUSR2 path entirely (see ``AGENT``).
* ``torchrun --shutdown-timeout`` / ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` (how long the agent waits after forwarding
  SIGTERM/SIGINT/... before SIGKILL; a fixed 30 s before): absent in 2.11.0's run.py and launcher/api.py (and
  ``torchrun --help`` of a real 2.11.0+cu130), present in 2.12.0's and 2.13.0's.
* Flight recorder: 2.8.0's FlightRecorder.hpp reads ``{"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}``
  and its libtorch_cpu carries ``TORCH_FR_DUMP_TEMP_FILE``; 2.7.1 and older know only
  ``TORCH_NCCL_TRACE_BUFFER_SIZE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (2.4.1's ProcessGroupNCCL.hpp). Newer
  releases warn on every rank for the old names, older ones ignore the new ones: set the names the release reads.
* ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` / ``TORCH_NCCL_DUMP_ON_TIMEOUT``: in 2.2.0's ProcessGroupNCCL.hpp; before
  2.2 the first one was ``NCCL_ASYNC_ERROR_HANDLING`` (pytorch PR #114880), and gpusub does not support torch < 2.2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_SUPPORTED = (2, 2)
_V = re.compile(r"^(\d+)\.(\d+)")

# The torchrun agent, started by the pinned interpreter. SIGUSR2 and SIGTERM are for the training processes only:
# Slurm's step daemon already delivers SIGUSR2 to every process of the step (proctrack/linuxproc signals the whole
# process tree; proctrack/cgroup only slurmstepd's children, i.e. this agent, and the workers then go by
# $GPUSUB_PREEMPT_FILE), so an agent that handled it would deliver it a second time and then shut the workers down
# after its own timeout (torch's ``_shutdown`` after ``SignalException``), cutting a checkpoint that the user was
# promised --signal-grace for. SIGTERM (Slurm's requeue, preemption, scancel) is the last checkpoint window (the
# batch shell asks the workers with SIGUSR2 and the file): an agent that took it would SIGTERM the workers and
# SIGKILL them after 30 s (--shutdown-timeout), inside KillWait. torch's PContext.start() installs its own handlers
# (TORCHELASTIC_SIGNALS_TO_HANDLE, default SIGTERM,SIGINT,SIGHUP,SIGQUIT; always SIGTERM before 2.10), after this
# code runs, so ``signal.signal`` is wrapped to keep these two no-op. exec() resets a caught signal to its default,
# so the workers start with the default dispositions and install their own handlers.
SIGNALS = ('import signal, sys\n'
           'keep = (signal.SIGUSR2, signal.SIGTERM); real = signal.signal; got = []\n'
           'for s in keep: real(s, lambda *_: got.append(1))\n'
           'signal.signal = lambda s, h: signal.getsignal(s) if s in keep else real(s, h)\n')

# torchrun's rendezvous backend of gpusub's own, registered (torch's public
# ``torch.distributed.elastic.rendezvous.rendezvous_handler_registry``, rendezvous/api.py) before ``main()`` and chosen
# with ``--rdzv-backend=gpusub``. gpusub runs torchrun with ``--nnodes=N --max-restarts=0`` (a restart is a Slurm
# requeue: a new step, a new store), so c10d's elastic membership (dynamic_rendezvous.py) is never used, and it costs
# about a second per job: torch 2.13's ``_DistributedRendezvousOpExecutor.run`` sleeps ``_delay(seconds=1)`` on every
# SYNC action (each poll of the shared state), ``next_rendezvous`` a random ``_delay(seconds=(0, 0.3))`` first, and
# ``shutdown()`` runs a close op through the same executor (store round trips after the exit barrier). Here nothing
# polls: the node's group rank is Slurm's ``SLURM_NODEID`` (set in every srun task), the world is ``--nnodes``
# (``params.max_nodes``), and the store is a TCPStore client of the one at ``--rdzv-endpoint`` (the batch shell's), or
# the server itself where ``--rdzv-conf is_host=1`` (one node, a container image: env.py). As torch's own static backend
# (static_tcp_rendezvous.py, 2.13) it returns the store under a PrefixStore of the run id, says ``use_agent_store``
# (workers reach the same store as clients, at MASTER_ADDR:MASTER_PORT = the endpoint: local_elastic_agent.py
# ``_start_workers`` sets TORCHELASTIC_USE_AGENT_STORE from it, and torch/distributed/rendezvous.py
# ``_create_c10d_store`` then opens a client, never a server), ``num_nodes_waiting`` 0 (agent/server/api.py
# ``_invoke_run`` restarts the workers when it is > 0) and a ``shutdown()`` that only returns. Releases whose rendezvous
# api.py has no ``RendezvousInfo`` (the older ones gpusub supports) take ``(store, rank, world_size)`` from
# ``next_rendezvous``, pick MASTER_ADDR/PORT on group rank 0 themselves and give the workers the agent store only for
# the backend named "static" (local_elastic_agent.py ``get_backend() == "static"`` in those releases, pytorch/pytorch
# history): there the workers' store stays torch's own choice, as with c10d. The timeout of the store's waits (the other
# agents' start, the rank exchange) is torch's rendezvous ``timeout`` (launcher/api.py: 900 s unless --rdzv-conf says).
# A client first waits for the store's port itself, 50 ms apart: the batch shell's store imports torch while the agents
# do, and TCPStore's own client retries a refused connect with growing, jittered delays (measured with torch 2.13.0: a
# server up 0.6 s after the client started was reached at 1.57 s; 0.14 s late when it was up at 1.2 s).
RDZV = ('import os, socket, time\n'
        'from datetime import timedelta\n'
        'from torch.distributed import PrefixStore, TCPStore\n'
        'from torch.distributed.elastic import rendezvous as rdzv\n'
        'class GpusubRendezvous(rdzv.RendezvousHandler):\n'
        '    def __init__(self, params):\n'
        '        node, world = os.environ.get("SLURM_NODEID", ""), params.max_nodes\n'
        '        if not (node.isascii() and node.isdigit() and int(node) < world):\n'
        '            raise SystemExit(f"gpusub rendezvous: SLURM_NODEID={node!r} is not a node index below '
        '--nnodes={world} (the agent runs as a task of the step gpusub started)")\n'
        '        addr, _, port = params.endpoint.rpartition(":")\n'
        '        if not (addr and port.isascii() and port.isdigit()):\n'
        '            raise SystemExit(f"gpusub rendezvous: --rdzv-endpoint={params.endpoint!r} is not HOST:PORT")\n'
        '        self.rank, self.world, self.run_id, self.addr, self.port = int(node), world, params.run_id, addr, '
        'int(port)\n'
        '        self.host = bool(params.get_as_bool("is_host", False))\n'
        '        self.timeout = timedelta(seconds=params.get_as_int("timeout", 900))\n'
        '        self.tcp = None\n'
        '    def get_backend(self): return "gpusub"\n'
        '    @property\n'
        '    def use_agent_store(self): return True\n'
        '    def listening(self):\n'
        '        end = time.monotonic() + self.timeout.total_seconds()\n'
        '        while True:\n'
        '            try: return socket.create_connection((self.addr, self.port), timeout=5).close()\n'
        '            except OSError as e:\n'
        '                if time.monotonic() > end: raise SystemExit(f"gpusub rendezvous: nothing listens on '
        '{self.addr}:{self.port} after {self.timeout.total_seconds():.0f} s (the store on the first node): {e}")\n'
        '            time.sleep(0.05)\n'
        '    def next_rendezvous(self):\n'
        '        if self.tcp is None:\n'
        '            if not self.host: self.listening()\n'
        '            self.tcp = TCPStore(self.addr, self.port, is_master=self.host, timeout=self.timeout, '
        'multi_tenant=True)\n'
        '        store = PrefixStore(self.run_id, self.tcp)\n'
        '        if not hasattr(rdzv, "RendezvousInfo"): return store, self.rank, self.world\n'
        '        return rdzv.RendezvousInfo(store, self.rank, self.world, rdzv.RendezvousStoreInfo(self.addr, '
        'self.port))\n'
        '    def is_closed(self): return False\n'
        '    def set_closed(self): pass\n'
        '    def num_nodes_waiting(self): return 0\n'
        '    def get_run_id(self): return self.run_id\n'
        '    def shutdown(self): return True\n'
        'rdzv.rendezvous_handler_registry.register("gpusub", GpusubRendezvous)\n')
RDZV_BACKEND = "gpusub"

# torchrun's main(), then the agent leaves without Python's interpreter teardown: with torch loaded that teardown
# took 0.6-2.5 s of CPU here (a bare ``python -c "import torch.distributed.run"`` exits as slowly; ``os._exit`` after
# it: 0.02-0.07 s), at the very end of every job, every node, while the step waits for its last agent. Nothing of
# the agent's needs it: torch's elastic agent, launcher and rendezvous register no atexit work (torch 2.13: the only
# atexit under distributed/elastic is etcd_server.py's, a server gpusub never starts), the workers are children it
# has already reaped, and the log handlers and standard streams are flushed here. The exit status is what
# ``sys.exit(main())`` gave: 0, main()'s SystemExit code (a message printed, status 1), or 1 with the traceback of
# any exception (torchrun's ChildFailedError when a worker failed, after its own summary).
#
# After a clean checkpoint the ranks often end unevenly: the one that saved exits, a peer still in a collective gets
# "Connection closed by peer" and exits 1 (its own traceback is in the log, behind its rank), and torchrun raises
# ChildFailedError, whose report (a traceback and a box of failures) was the last thing in the job's log. When this
# attempt was asked to stop (the agent saw SIGUSR2/SIGTERM, or $GPUSUB_PREEMPT_FILE exists) and the program recorded
# its checkpoint ($GPUSUB_CHECKPOINT_STEP_FILE exists), that report becomes one line naming the ranks and their
# exits; the exit status stays 1, and the batch shell says the checkpoint stands. Any other failure keeps torchrun's
# whole report. ChildFailedError.failures: {global rank: ProcessFailure} with .exitcode (negative: the signal), torch
# 2.2.0 to 2.13.0 (elastic/multiprocessing/errors/__init__.py).
MAIN = ('import logging, os, traceback\n'
        'from torch.distributed.run import main\n'
        'sys.argv[0] = "torchrun"\n'
        'def after_checkpoint(e):\n'
        '    ck, pf = os.environ.get("GPUSUB_CHECKPOINT_STEP_FILE", ""), os.environ.get("GPUSUB_PREEMPT_FILE", "")\n'
        '    if type(e).__name__ != "ChildFailedError" or not (ck and os.path.exists(ck)): return False\n'
        '    if not (got or (pf and os.path.exists(pf))): return False\n'
        '    try: step = open(ck).readline(40).strip()\n'
        '    except OSError: step = ""\n'
        '    ranks = ", ".join(f"rank {r} exit {f.exitcode}" for r, f in sorted(getattr(e, "failures", {}).items()))\n'
        '    at, node = f" at step {step}" if step.isdigit() else "", os.environ.get("SLURMD_NODENAME", "?")\n'
        '    ranks = ranks or "a rank failed"\n'
        '    print(f"gpusub: on {node}, {ranks} after the checkpoint{at} (a peer had gone: expected on the way out, '
        'no failure report)", file=sys.stderr)\n'
        '    return True\n'
        'try:\n'
        '    main(); rc = 0\n'
        'except SystemExit as e:\n'
        '    rc = e.code if isinstance(e.code, int) else 0 if e.code is None else 1\n'
        '    if e.code is not None and not isinstance(e.code, int): print(e.code, file=sys.stderr)\n'
        'except BaseException as e:\n'
        '    if not after_checkpoint(e): traceback.print_exc()\n'
        '    rc = 1\n'
        'logging.shutdown()\n'
        'for f in (sys.stdout, sys.stderr):\n'
        '    try: f.flush()\n'
        '    except Exception: pass\n'
        'os._exit(rc)\n')

AGENT = SIGNALS + RDZV + MAIN

# The megatron launcher's agent: the same, except that SIGUSR2 or SIGTERM to the agent (the batch shell's request
# through srun, Slurm's own SIGTERM at a requeue or preemption) is passed to each of its workers, once each, as the
# signal Megatron-LM's --exit-signal-handler waits for (megatron.py EXIT_SIGNALS: SIGTERM unless --exit-signal says
# otherwise). With proctrack/cgroup Slurm signals only slurmstepd's children (the agent), so without this the ranks
# never heard of the preemption; with proctrack/linuxproc they got SIGUSR2 itself, which Megatron does not handle
# (its default action killed them, nothing saved). The workers are the agent's children (torch's SubprocessHandler:
# Popen, start_new_session; bash/taskset in between exec), read from /proc. A worker that starts after the request
# is not asked (it is signalled by the next one); the agent still neither kills nor restarts anyone.
_FORWARD = ('import os, signal, sys\n'
            'keep = (signal.SIGUSR2, signal.SIGTERM); real = signal.signal; told = set(); got = []\n'
            'def ask(*_):\n'
            '    got.append(1); me = str(os.getpid())\n'
            '    for d in os.listdir("/proc"):\n'
            '        if not d.isdigit() or d in told: continue\n'
            '        try:\n'
            '            with open("/proc/" + d + "/stat") as f: ppid = f.read().rpartition(")")[2].split()[1]\n'
            '        except (OSError, IndexError): continue\n'
            '        if ppid != me: continue\n'
            '        told.add(d)\n'
            '        try: os.kill(int(d), signal.@SIG@)\n'
            '        except OSError: pass\n'
            'for s in keep: real(s, ask)\n'
            'signal.signal = lambda s, h: signal.getsignal(s) if s in keep else real(s, h)\n')
FORWARDED = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")


def forwarding_agent(sig: str) -> str:
    """The torchrun agent that passes a preemption to its workers as ``sig`` (one of FORWARDED)."""
    if sig not in FORWARDED:
        raise ValueError(f"forwarding_agent: {sig!r} is not one of {', '.join(FORWARDED)}")
    return _FORWARD.replace("@SIG@", sig) + RDZV + MAIN



# The c10d store for torchrun's rendezvous, hosted by the batch shell (one process on the first node) for the
# whole step: argv = MASTER_ADDR MASTER_PORT. multi_tenant as torch's own c10d backend creates it. SIGTERM and SIGUSR2
# are ignored: with proctrack/linuxproc Slurm's SIGTERM at a requeue or preemption reaches every process of the batch
# step (this one too) while the ranks still checkpoint, and every client of a store that went away prints c10d's C++
# stack trace ("recvValueWithTimeout failed ... Exception raised from recvBytes ... frame #0", measured with torch
# 2.13.0) and fails its next store call (torchrun's exit barrier). The batch shell SIGKILLs it once the step is over.
STORE = ('import signal, sys, time; from torch.distributed import TCPStore\n'
         'for s in (signal.SIGTERM, signal.SIGUSR2): signal.signal(s, signal.SIG_IGN)\n'
         'store = TCPStore(sys.argv[1], int(sys.argv[2]), is_master=True, multi_tenant=True, wait_for_workers=False)\n'
         'while True: time.sleep(3600)')


def parse_version(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m = _V.match(text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class TorchFeatures:
    version: str | None  # as reported ("2.13.0+cpu"); None when unknown (container image, probe failed)
    fr_names: bool  # TORCH_FR_BUFFER_SIZE / TORCH_FR_DUMP_TEMP_FILE (2.8+) instead of the TORCH_NCCL_* names
    shutdown_timeout_flag: bool  # torchrun --shutdown-timeout (2.12+)
    signals_to_handle: bool  # torchrun --signals-to-handle (2.10+); informational

    @property
    def known(self) -> bool:
        return self.version is not None

    @property
    def label(self) -> str:
        return f"torch {self.version}" if self.version else "torch version unknown"


def features_for(version: str | None) -> TorchFeatures:
    """Features of ``version``; an unknown version gets the names of the newest release (what gpusub is tested
    against) and no version-specific torchrun flag (an unknown flag would stop an older torchrun at start)."""
    v = parse_version(version)
    if v is None:
        return TorchFeatures(None, fr_names=True, shutdown_timeout_flag=False, signals_to_handle=False)
    return TorchFeatures(version, fr_names=v >= (2, 8), shutdown_timeout_flag=v >= (2, 12),
                         signals_to_handle=v >= (2, 10))
