"""Trains a small classifier with DistributedDataParallel on CPU over torch.distributed, with the
"chorus" backend (or --backend gloo to compare), and prints the time per step.

    build/chorus-torch-bench ...                                   # the benchmark
    torchrun --nproc-per-node 2 examples/python/ddp_train.py
    # or without torchrun (starts 2 local ranks itself):
    python examples/python/ddp_train.py -np 2
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus
import chorus.torch  # noqa: F401  (registers the "chorus" backend)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="chorus")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("-np", type=int, default=2, help="local ranks when not under torchrun")
    a = p.parse_args()
    if "RANK" not in os.environ:  # no launcher: start the ranks ourselves, torchrun-style
        sys.exit(chorus.spawn_local(a.np))

    torch.set_num_threads(1)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts it)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                              nn.Linear(256, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    w_true = torch.randn(64, 4, generator=torch.Generator().manual_seed(123))
    t0 = None
    for step in range(a.steps):
        if step == 10:
            dist.barrier()
            t0 = time.perf_counter()
        x = torch.randn(64, 64, generator=g)
        y = (x @ w_true).argmax(1)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}", flush=True)
    dist.barrier()
    per_step = (time.perf_counter() - t0) / (a.steps - 10)
    if rank == 0:
        print(f"{a.backend}: {world} ranks, {per_step * 1e3:.2f} ms per step, final loss "
              f"{loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
