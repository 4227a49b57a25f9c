"""A tiny but real torch.distributed job: every rank all-reduces a tensor over gloo and reports what it saw.

Used by the demo (`bash examples/demo.sh`) and the lab's end-to-end test. On a GPU cluster the same
rendezvous runs NCCL; the lab has no GPUs, so this uses gloo on the CPU. It needs torch alone (no numpy).
"""

from __future__ import annotations

import json
import os
import socket
import sys

HOST_BYTES = 256  # a hostname is at most 253 bytes (RFC 1035 names; Linux HOST_NAME_MAX is 64)


def gather_hostnames(dist, torch, world: int) -> list[str]:  # type: ignore[no-untyped-def]
    """Every rank's hostname, as fixed-size byte tensors: ``dist.all_gather_object`` would need numpy (torch
    unpickles the gathered objects through ``Tensor.numpy()``: "Numpy is not available" without it), and the
    README installs torch alone."""
    name = socket.gethostname().encode()[:HOST_BYTES]
    mine = torch.zeros(HOST_BYTES, dtype=torch.uint8)
    mine[: len(name)] = torch.tensor(list(name), dtype=torch.uint8)
    every = [torch.zeros(HOST_BYTES, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(every, mine)
    return [bytes(t.tolist()).rstrip(b"\0").decode(errors="replace") for t in every]


def main() -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    hosts = gather_hostnames(dist, torch, world)
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
