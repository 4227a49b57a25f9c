"""A training loop shaped like Megatron-LM's pretrain() around Megatron-LM's own signal handler (gloo, CPU).

The handler is megatron/training/dist_signal_handler.py as the megatron-core wheel (0.17+) ships it, loaded from
its file: the megatron.training package's __init__ imports the whole trainer (transformer engine, triton). What the
loop does is Megatron-LM's (NVIDIA/Megatron-LM d98e8a64dd), re-told, not copied:
  * arguments.py / argument_utils.py: --exit-signal-handler (store_true), --exit-signal NAME (signal.Signals[NAME],
    default SIGTERM), --save, --save-interval, --train-iters; unknown arguments (the parallel sizes) are ignored here;
  * global_vars.py set_global_variables: with --exit-signal-handler, DistributedSignalHandler(sig).__enter__() after
    the process group exists;
  * training.py train(): one train step per iteration, then checkpoint_and_decide_exit: if any rank's handler saw
    the signal (signals_received: an all_gather of the flag), save (with --save) and exit; else the --save-interval
    save; after the loop a barrier and sys.exit(0).
Resumes from --save (Megatron's --load). Writes ``ranks/<rank>.running`` once it trains, ``ranks/<rank>.json`` at
the end, under --save.
"""

import argparse
import importlib.util
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def megatron_signal_handler_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("megatron-core is not installed (tests/setup-env.sh installs it)")
    for base in spec.submodule_search_locations:
        path = os.path.join(base, "training", "dist_signal_handler.py")
        if os.path.exists(path):
            mod_spec = importlib.util.spec_from_file_location("megatron_training_dist_signal_handler", path)
            assert mod_spec is not None and mod_spec.loader is not None
            mod = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(mod)
            return mod
    raise SystemExit("this megatron-core has no megatron/training/dist_signal_handler.py (0.17+ ships it)")


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--exit-signal-handler", action="store_true")
    ap.add_argument("--exit-signal", type=lambda s: signal.Signals[s], default=signal.SIGTERM)
    ap.add_argument("--save", required=True)
    ap.add_argument("--save-interval", type=int, default=None)
    ap.add_argument("--train-iters", type=int, required=True)
    ap.add_argument("--iter-seconds", type=float, default=0.05)
    args, _ = ap.parse_known_args()
    dsh = megatron_signal_handler_module()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    handler = dsh.DistributedSignalHandler(args.exit_signal).__enter__() if args.exit_signal_handler else None

    ck = os.path.join(args.save, "latest.json")
    iteration = json.load(open(ck))["iteration"] if os.path.exists(ck) else 0
    start = iteration
    os.makedirs(os.path.join(args.save, "ranks"), exist_ok=True)
    print(f"rank {rank}/{world}: start at iteration {iteration}, handler "
          f"{args.exit_signal.name if handler else 'off'}, SIGUSR2 {signal.getsignal(signal.SIGUSR2)}", flush=True)

    def save(it: int) -> None:
        dist.barrier()
        if rank == 0:
            with open(ck + ".tmp", "w") as f:
                json.dump({"iteration": it, "world": world}, f)
            os.replace(ck + ".tmp", ck)
            # the tracker Megatron-LM's save_checkpoint writes after a save (checkpointing.py
            # get_checkpoint_tracker_filename), the iteration as text: gpusub's record of the checkpoint
            with open(os.path.join(args.save, "latest_checkpointed_iteration.txt"), "w") as f:
                f.write(str(it))
        dist.barrier()
        print(f"rank {rank}: saved checkpoint at iteration {it}", flush=True)

    exited_on_signal = False
    while iteration < args.train_iters:
        t = torch.ones(1)
        dist.all_reduce(t)  # the train step's gradient all-reduce
        assert t.item() == world
        iteration += 1
        if iteration == start + 1:
            open(os.path.join(args.save, "ranks", f"{rank}.running"), "w").close()
        time.sleep(args.iter_seconds)
        if handler is not None and any(handler.signals_received()):
            save(iteration)
            print(f"rank {rank}: exiting program after receiving {args.exit_signal.name} at iteration {iteration}",
                  flush=True)
            exited_on_signal = True
            break
        if args.save_interval and iteration % args.save_interval == 0:
            save(iteration)
    with open(os.path.join(args.save, "ranks", f"{rank}.json"), "w") as f:
        json.dump({"start": start, "end": iteration, "signal": exited_on_signal,
                   "restart": int(os.environ.get("GPUSUB_RESTART_COUNT", "0"))}, f)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
