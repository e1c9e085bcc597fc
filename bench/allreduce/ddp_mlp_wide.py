#!/usr/bin/python3
"""The communication-heavy peer: PyTorch DDP (gloo backend, default 25 MB buckets reduced while
backward runs) training Strata's `mlp_wide` (784-2048-2048-10, ReLU; 5,824,522 parameters, 23.3 MB
of gradients) on 1x28x28 random inputs, global batch 128 split over the processes, SGD with
momentum 0.9, max(1, 2 / WORLD) threads per process, 3 untimed warm-up steps.

Usage: ddp_mlp_wide.py WORLD STEPS [PORT]
Prints one line ending in samples_per_s=N (rank 0's wall clock over the timed steps)."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

WARMUP_STEPS = 3
GLOBAL_BATCH = 128


def wide_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                         nn.ReLU(), nn.Linear(2048, 10))


def timed_steps(model, rank, world, steps):
    """SGD lr 0.1 momentum 0.9 on this rank's share of the global batch of random inputs: 3
    untimed warm-up steps, then `steps` timed ones; returns their seconds."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    per_rank = GLOBAL_BATCH // world
    generator = torch.Generator().manual_seed(1 + rank)
    inputs = torch.randn(per_rank, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (per_rank,), generator=generator)
    for step in range(WARMUP_STEPS + steps):
        if step == WARMUP_STEPS:
            began = time.time()
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    return time.time() - began


def train(rank, world, steps, port):
    torch.set_num_threads(max(1, 2 // world))
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)  # the same initial model on every rank, as DDP also broadcasts it
    model = wide_mlp()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    seconds = timed_steps(model, rank, world, steps)
    if rank == 0:
        print(f"ddp arch=mlp_wide world={world} global_batch={GLOBAL_BATCH} steps={steps} "
              f"samples_per_s={GLOBAL_BATCH * steps / seconds:.0f}")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    world, steps = int(sys.argv[1]), int(sys.argv[2])
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 29517
    if world == 1:
        train(0, 1, steps, port)
    else:
        mp.spawn(train, args=(world, steps, port), nprocs=world)
