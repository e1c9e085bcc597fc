#!/usr/bin/python3
"""One rank of PyTorch's gloo all-reduce, for ranks that run in different network namespaces.

Usage: gloo_rank.py RANK WORLD FLOATS ITERS   (environment: MASTER_ADDR, MASTER_PORT, and
GLOO_SOCKET_IFNAME naming the interface of the rank's host)

Measures what strata-bench-allreduce measures, the usual way for gloo: torch.set_num_threads(1),
3 warm-up all_reduce calls, a barrier, ITERS timed all_reduce calls, a barrier; time per operation,
algbw = bytes / time, busbw = algbw * 2(n-1)/n. Rank 0 prints one line, busbw last. The usual
gloo benchmark script spawns its ranks itself on 127.0.0.1; here each rank is started on its own
emulated host (bench/network/compare_gloo_emulated.sh), so it meets the others through env://
at rank 0's address. Imports nothing but torch.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank, world, n, iters = (int(a) for a in sys.argv[1:5])
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        if key not in os.environ:
            sys.exit(f"gloo_rank.py: {key} is not set")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    t = torch.ones(n)
    for _ in range(3):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.time()
    for _ in range(iters):
        dist.all_reduce(t)
    dist.barrier()
    dt = (time.time() - t0) / iters
    if rank == 0:
        algbw = n * 4 / dt / 1e6
        print(f"gloo world={world} bytes={n * 4} ms_per_op={dt * 1e3:.2f} "
              f"algbw_MBps={algbw:.0f} busbw_MBps={algbw * 2 * (world - 1) / world:.0f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
