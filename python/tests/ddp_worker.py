"""One rank of a DDP job: the same model trained with DistributedDataParallel over "chorus" and
over "gloo" (a gloo group of the same ranks) must reach the same parameters; and a sharded
data-parallel step (all_gather_into_tensor + reduce_scatter_tensor) must match plain SGD on the
whole batch computed locally. Tolerance: float32 sums of the same gradients in a different
order differ by rounding only, rtol 1e-5 / atol 1e-6 after 8 steps."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch  # noqa: F401

FAIL = []


def model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 4))


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)


def train(pg, rank, steps=8):
    m = DDP(model(), process_group=pg, bucket_cap_mb=0.01)  # several buckets
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for s in range(steps):
        x, y = batch(rank, s)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def sharded(rank, world, steps=4):
    """Parameters flattened and sharded: each rank keeps 1/world of them, gathers the whole
    vector for forward/backward and reduce-scatters the gradients into its shard."""
    ref = model()
    full = torch.nn.utils.parameters_to_vector(ref.parameters()).detach()
    pad = (-full.numel()) % world
    flat = torch.cat([full, torch.zeros(pad)])
    shard = flat.chunk(world)[rank].clone()
    work = model()
    for s in range(steps):
        gathered = torch.empty(flat.numel())
        dist.all_gather_into_tensor(gathered, shard)
        torch.nn.utils.vector_to_parameters(gathered[:full.numel()], work.parameters())
        work.zero_grad()
        x, y = batch(rank, s)
        nn.functional.mse_loss(work(x), y).backward()
        grad = torch.cat([torch.nn.utils.parameters_to_vector(p.grad for p in work.parameters()),
                          torch.zeros(pad)])
        gshard = torch.empty(shard.numel())
        dist.reduce_scatter_tensor(gshard, grad, op=dist.ReduceOp.AVG)
        shard -= 0.05 * gshard
        # Reference: plain SGD on every rank's batch, here in one process.
        ref.zero_grad()
        for r in range(world):
            xr, yr = batch(r, s)
            (nn.functional.mse_loss(ref(xr), yr) / world).backward()
        with torch.no_grad():
            for p in ref.parameters():
                p -= 0.05 * p.grad
    final = torch.empty(flat.numel())
    dist.all_gather_into_tensor(final, shard)
    want = torch.nn.utils.parameters_to_vector(ref.parameters()).detach()
    if not torch.allclose(final[:full.numel()], want, rtol=1e-5, atol=1e-6):
        FAIL.append(f"sharded step: max diff {(final[:full.numel()] - want).abs().max()}")


def main():
    dist.init_process_group("chorus")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    a = train(None, rank)
    b = train(gloo, rank)
    for i, (p, q) in enumerate(zip(a, b)):
        if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
            FAIL.append(f"parameter {i}: chorus and gloo differ by {(p - q).abs().max()}")
    sharded(rank, world)
    dist.barrier()
    for f in FAIL:
        print(f"FAIL rank {rank}: {f}", flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(1 if FAIL else 0)


if __name__ == "__main__":
    main()
