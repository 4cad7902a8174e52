"""Sharded data parallelism (ZeRO-3 / FSDP style) by hand on CPU: every rank keeps 1/world of the
flattened parameters; each step all-gathers them (all_gather_into_tensor), computes the
gradient of its own batch and reduce-scatters the gradients into its shard
(reduce_scatter_tensor with AVG), so no rank ever holds the whole optimizer state. This
torch's gloo backend has neither collective; "chorus" has both.

    torchrun --nproc-per-node 2 examples/python/sharded_train.py
    python examples/python/sharded_train.py -np 2        # no torchrun: starts 2 ranks itself
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import chorus
import chorus.torch  # noqa: F401


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("-np", type=int, default=2)
    a = p.parse_args()
    if "RANK" not in os.environ:  # no launcher: start the ranks ourselves, torchrun-style
        sys.exit(chorus.spawn_local(a.np))

    dist.init_process_group("chorus")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 1))
    flat = nn.utils.parameters_to_vector(model.parameters()).detach()
    numel = flat.numel()
    flat = torch.cat([flat, torch.zeros((-numel) % world)])
    shard = flat.chunk(world)[rank].clone()  # this rank's parameters
    full = torch.empty_like(flat)
    g = torch.Generator().manual_seed(rank)
    for step in range(a.steps):
        dist.all_gather_into_tensor(full, shard)
        nn.utils.vector_to_parameters(full[:numel], model.parameters())
        x = torch.randn(32, 32, generator=g)
        y = (x[:, :8].sum(1, keepdim=True) / 3).tanh()
        model.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        grads = nn.utils.parameters_to_vector(p.grad for p in model.parameters())
        grads = torch.cat([grads, torch.zeros(flat.numel() - numel)])
        gshard = torch.empty_like(shard)
        dist.reduce_scatter_tensor(gshard, grads, op=dist.ReduceOp.AVG)
        shard -= 0.3 * gshard
        loss_avg = loss.detach().clone()
        dist.all_reduce(loss_avg, op=dist.ReduceOp.AVG)
        if rank == 0 and step % 10 == 0:
            print(f"step {step:3d} mean loss {loss_avg.item():.4f} (shard of {shard.numel()} "
                  f"of {numel} parameters)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
