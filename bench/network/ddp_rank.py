#!/usr/bin/python3
"""One rank of PyTorch DDP training, for ranks that run in different network namespaces.

Usage: ddp_rank.py ARCH RANK WORLD STEPS   (ARCH resnet20 or mlp_wide; environment: MASTER_ADDR,
MASTER_PORT, and GLOO_SOCKET_IFNAME naming the interface of the rank's host)

The same training as the loopback comparisons (bench/allreduce/compare_ddp.sh): resnet20 is the
ResNet-20 of ../shared/peers/ddp_train.py, mlp_wide the network of bench/allreduce/ddp_mlp_wide.py
(both imported from there, so the models are theirs); 28x28x1 random inputs, global batch 128
split over the ranks, SGD lr 0.1 momentum 0.9, DDP's default 25 MB buckets reduced while backward
runs, one thread per rank (each emulated host has a CPU quota of its own), 3 untimed warm-up
steps. Rank 0 prints one line ending in samples_per_s=N over the timed steps. Meets the other
ranks through env:// at rank 0's address, as gloo_rank.py does.
"""
import importlib.util
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    arch = sys.argv[1]
    rank, world, steps = (int(a) for a in sys.argv[2:5])
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        if key not in os.environ:
            sys.exit(f"ddp_rank.py: {key} is not set")
    # The loopback comparison's model and training loop (one rank of it).
    wide = load(os.path.join(HERE, "../allreduce/ddp_mlp_wide.py"), "ddp_mlp_wide")
    if arch == "resnet20":
        make = load(os.path.join(HERE, "../../../shared/peers/ddp_train.py"), "ddp_train").ResNet20
    elif arch == "mlp_wide":
        make = wide.wide_mlp
    else:
        sys.exit(f"ddp_rank.py: ARCH must be resnet20 or mlp_wide, not {arch}")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(1)
    seconds = wide.timed_steps(nn.parallel.DistributedDataParallel(make()), rank, world, steps)
    if rank == 0:
        print(f"ddp arch={arch} world={world} global_batch={wide.GLOBAL_BATCH} steps={steps} "
              f"samples_per_s={wide.GLOBAL_BATCH * steps / seconds:.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
