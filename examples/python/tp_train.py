"""Tensor parallelism with DTensor and DeviceMesh on CPU over the "chorus" backend (or
--backend gloo to compare): trains a small MLP and checks every step's loss and the final
parameters against the same MLP trained in one process on the same data; prints the time per step.

    torchrun --nproc-per-node 2 examples/python/tp_train.py
    python examples/python/tp_train.py -np 2            # no torchrun
    python examples/python/tp_train.py -np 4 --dp 2     # 2-D mesh 2x2
    python examples/python/tp_train.py -np 4 --dp 2 --dp-mode allreduce

init_process_group(backend) comes first; init_device_mesh("cpu", ...) then builds its (sub)groups
on that backend. The mesh is ("dp", "tp") = (--dp, world / --dp); with --dp 1 it is 1-D ("tp").

  tensor parallel (the "tp" dimension): parallelize_module with ColwiseParallel on the first
  Linear of each block and RowwiseParallel on the second (Megatron style): the hidden
  activations stay sharded, and the block output is all-reduced over "tp" (its gradient too).
  data parallel (the "dp" dimension, --dp > 1): each dp rank trains on its 1/dp share of every
  global batch; --dp-mode fsdp shards the TP model over "dp" with fully_shard (FSDP2 on a 2-D
  mesh: all_gather_into_tensor / reduce_scatter_tensor on the dp groups), --dp-mode allreduce
  averages the gradients' local shards by hand (all_reduce AVG on the dp sub-mesh's group).

Either way every step equals full-batch SGD in one process, up to float32 rounding: the check
(default on) compares the loss of each step and every parameter (DTensor.full_tensor()) with
that reference, tolerance 1e-5. Exit status 1 on a mismatch.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import chorus
import chorus.torch  # noqa: F401  (registers the "chorus" backend)

DIM, HIDDEN, OUT, BLOCKS, BATCH = 64, 128, 16, 2, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(DIM, OUT)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def make_model():
    torch.manual_seed(0)
    return MLP()


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, DIM, generator=g)
    y = torch.randn(BATCH, OUT, generator=g)
    return x, y


def train_reference(steps, lr):
    """The same model, one process, the whole batch each step: (losses, parameters)."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {name: p.detach() for name, p in model.named_parameters()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="chorus")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--dp", type=int, default=1,
                   help="size of the data-parallel mesh dimension (tp = world / dp)")
    p.add_argument("--dp-mode", choices=["fsdp", "allreduce"], default="fsdp",
                   help="data parallel over 'dp': fully_shard, or all_reduce of the gradients")
    p.add_argument("--no-check", dest="check", action="store_false")
    p.add_argument("-np", type=int, default=2, help="local ranks when not under torchrun")
    a = p.parse_args()
    if "RANK" not in os.environ:  # no launcher: start the ranks ourselves, torchrun-style
        sys.exit(chorus.spawn_local(a.np))

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    torch.set_num_threads(1)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % a.dp:
        sys.exit(f"--dp {a.dp} does not divide the {world} ranks")
    dp, tp = a.dp, world // a.dp
    if HIDDEN % tp or BATCH % dp:
        sys.exit(f"tp={tp} must divide the hidden width {HIDDEN}, dp={dp} the batch {BATCH}")
    if dp > 1:
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
    else:
        mesh = tp_mesh = init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
        dp_mesh = None

    model = make_model()
    plan = {}
    for i in range(BLOCKS):
        plan[f"blocks.{i}.up"] = ColwiseParallel()
        plan[f"blocks.{i}.down"] = RowwiseParallel()
    parallelize_module(model, tp_mesh, plan)  # the head stays replicated (plain tensors)
    if dp_mesh is not None and a.dp_mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for blk in model.blocks:
            fully_shard(blk, mesh=dp_mesh)
        fully_shard(model, mesh=dp_mesh)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    dp_rank = dp_mesh.get_local_rank() if dp_mesh is not None else 0
    share = BATCH // dp

    losses = []
    t0, timed = None, 0
    for step in range(a.steps):
        if step == min(3, a.steps - 1):
            dist.barrier()
            t0, timed = time.perf_counter(), a.steps - step
        x, y = batch(step)  # every tp rank of a dp group gets the same share
        x, y = x[dp_rank * share:(dp_rank + 1) * share], y[dp_rank * share:(dp_rank + 1) * share]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if dp_mesh is not None and a.dp_mode == "allreduce":
            group = dp_mesh.get_group()
            for prm in model.parameters():
                g = prm.grad.to_local() if hasattr(prm.grad, "to_local") else prm.grad
                dist.all_reduce(g, op=dist.ReduceOp.AVG, group=group)
        opt.step()
        loss = loss.detach().clone()
        if dp_mesh is not None:  # the full batch's loss: the mean of the dp shares' losses
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=dp_mesh.get_group())
        losses.append(loss.item())
        if rank == 0 and step % 5 == 0:
            print(f"step {step:3d} loss {losses[-1]:.6f}", flush=True)
    dist.barrier()
    per_step = (time.perf_counter() - t0) / timed

    # Every rank takes part in gathering the full parameters.
    full = {name: (prm.full_tensor() if hasattr(prm, "full_tensor") else prm).detach()
            for name, prm in model.named_parameters()}
    # The losses and parameters must agree on every rank too (cheap, and catches a rank that
    # diverged silently): compare rank 0's with everyone's.
    flat = torch.cat([torch.tensor(losses)] + [full[n].flatten() for n in sorted(full)])
    spread = flat.clone()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    lo = flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    ranks_differ = (spread - lo).abs().max().item()

    failed = False
    if rank == 0:
        layout = f"mesh dp={dp} x tp={tp}" + (f", dp via {a.dp_mode}" if dp > 1 else "")
        print(f"{a.backend}: {world} ranks, {layout}, {per_step * 1e3:.2f} ms per step",
              flush=True)
        if a.check:
            ref_losses, ref = train_reference(a.steps, a.lr)
            tol = 1e-5
            worst_loss = max(abs(u - v) for u, v in zip(losses, ref_losses))
            worst = max((full[n] - ref[n]).abs().max().item() for n in ref)
            for what, diff in (("losses vs one process", worst_loss),
                               ("parameters vs one process", worst),
                               ("losses and parameters across ranks", ranks_differ)):
                bad = not diff <= tol
                failed |= bad
                print(f"{what}: max |diff| {diff:.3g} ({'MISMATCH' if bad else 'OK'}, "
                      f"tolerance {tol:g})", flush=True)
            print(f"loss {ref_losses[0]:.4f} -> {ref_losses[-1]:.4f} (reference)", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
