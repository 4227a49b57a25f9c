"""A tiny but real torch.distributed job: every rank all-reduces a tensor over gloo and reports what it saw.

Used by the demo (`bash examples/demo.sh`) and the lab's end-to-end test. On a GPU cluster the same
rendezvous runs NCCL; the lab has no GPUs, so this uses gloo on the CPU.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main() -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    hosts: list[str | None] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    expected = world * (world + 1) / 2
    record = {
        "rank": rank,
        "local_rank": int(os.environ.get("LOCAL_RANK", -1)),
        "world_size": world,
        "host": socket.gethostname(),
        "sum": t.item(),
        "expected": expected,
        "args": sys.argv[1:],
    }
    print(json.dumps(record), flush=True)
    out = os.environ.get("DDP_RESULT_DIR")
    if out:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(record, f)
    if rank == 0:
        print(f"all_reduce over {world} ranks on {len(set(hosts))} nodes {sorted(set(hosts))}: "
              f"sum={t.item():g} expected={expected:g} {'OK' if t.item() == expected else 'MISMATCH'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if t.item() == expected else 1


if __name__ == "__main__":
    sys.exit(main())
