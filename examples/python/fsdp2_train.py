"""Trains a small MLP with FSDP2 (torch.distributed.fsdp.fully_shard) on CPU over the "chorus"
backend (or --backend gloo to compare), then checks the parameters against the same model
trained on the whole batch in one process, and prints the time per step.

    pip install torch==2.13.0 && pip install --no-build-isolation .     # docs/python.md
    torchrun --nproc-per-node 2 examples/python/fsdp2_train.py --backend chorus
    torchrun --nproc-per-node 2 examples/python/fsdp2_train.py --backend gloo
    torchrun --nproc-per-node 2 examples/python/fsdp2_train.py --registered   # zero-copy comms
    python examples/python/fsdp2_train.py -np 2 --mp bf16 --reduce-dtype bf16   # no torchrun

Every rank trains on its 1/N share of each global batch; FSDP2 all-gathers the parameters
(all_gather_into_tensor) and reduce-scatters the gradients (reduce_scatter_tensor with AVG, or
PREMUL_SUM for a custom divide factor), so after each step the sharded model equals one trained
on the whole batch. --check (default on) compares every parameter with that single-process run:
exactly up to float32 rounding (fp32), within bf16 rounding (--mp bf16). Exit status 1 if not.
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

WIDTH, DEPTH, BATCH = 256, 4, 48


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    layers.append(nn.Linear(WIDTH, 8))
    return nn.Sequential(*layers)


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, WIDTH, generator=g)
    y = torch.randint(0, 8, (BATCH,), generator=g)
    return x, y


def train_reference(steps, lr):
    """The same model, one process, the whole batch each step."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return {name: p.detach() for name, p in model.named_parameters()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="chorus")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--mp", choices=["fp32", "bf16"], default="fp32",
                   help="parameter dtype of forward/backward (MixedPrecisionPolicy)")
    p.add_argument("--reduce-dtype", choices=["fp32", "bf16"], default="fp32",
                   help="dtype of the gradient reduce-scatter under --mp bf16")
    p.add_argument("--registered", action="store_true",
                   help="FSDP2's communication buffers in chorus registered memory "
                        "(chorus.torch.use_registered_buffers: zero-copy all-gathers and "
                        "reduce-scatters)")
    p.add_argument("--no-check", dest="check", action="store_false")
    p.add_argument("-np", type=int, default=2, help="local ranks when not under torchrun")
    a = p.parse_args()
    if "RANK" not in os.environ:  # no launcher: start the ranks ourselves, torchrun-style
        sys.exit(chorus.spawn_local(a.np))

    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.set_num_threads(1)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if BATCH % world:
        sys.exit(f"the global batch ({BATCH}) must divide among {world} ranks")
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    mp = MixedPrecisionPolicy(param_dtype=dtypes[a.mp], reduce_dtype=dtypes[a.reduce_dtype])
    model = make_model()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    if a.registered:
        chorus.torch.use_registered_buffers(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    share = BATCH // world
    t0, timed = None, 0
    for step in range(a.steps):
        if step == min(5, a.steps - 1):
            dist.barrier()
            t0, timed = time.perf_counter(), a.steps - step
        x, y = batch(step)
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}", flush=True)
    dist.barrier()
    per_step = (time.perf_counter() - t0) / timed
    # Every rank takes part in gathering the full parameters (DTensor.full_tensor).
    full = {name: p.full_tensor().detach().float() for name, p in model.named_parameters()}
    failed = False
    if rank == 0:
        print(f"{a.backend}: {world} ranks, FSDP2 {a.mp}/{a.reduce_dtype}, "
              f"{per_step * 1e3:.2f} ms per step", flush=True)
        if a.check:
            ref = train_reference(a.steps, a.lr)
            worst = max((full[n] - ref[n]).abs().max().item() for n in ref)
            tol = 1e-5 if a.mp == "fp32" else 5e-2
            failed = not worst <= tol
            print(f"parameters vs one process on the whole batch: max |diff| {worst:.3g} "
                  f"({'OK' if not failed else 'MISMATCH'}, tolerance {tol:g})", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
