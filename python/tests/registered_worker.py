"""One rank of the registered-memory tests (test_torch_registered.py), started with torchrun-style
variables by launch.py. Modes:

  basic       registered_empty: shapes and dtypes, an all_reduce and a reduce_scatter_tensor on
              registered tensors (zero-copy) equal to the same calls on ordinary ones, the pool
              reused, nothing left after destroy_process_group
  bad         a gloo group: registered_empty, FSDPAllGather, use_registered_buffers raise
              ValueError naming the backend
  fsdp MODE   FSDP2 training, MODE default | registered (use_registered_buffers) | pg_alloc
              (set_allocate_memory_from_process_group_for_comm); rank 0 saves the parameters
              to $OUT_FILE and the pool's figures to $OUT_FILE.json

With CHORUS_DEBUG=INFO the library logs each collective's choice to stderr; the worker prints
"== TRAINED ==" to stderr after the training steps, so that the test reads the training's calls
only.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import chorus.torch as ct
from chorus import _chorus_torch

WIDTH, DEPTH, BATCH = 256, 3, 32


def check(cond, what):
    if not cond:
        print(f"rank {dist.get_rank()}: FAILED: {what}", flush=True)
        sys.exit(1)


def basic():
    dist.init_process_group("chorus")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = ct.registered_empty((4, 8), torch.float64)
    check(x.shape == (4, 8) and x.dtype == torch.float64 and x.is_contiguous(), "shape/dtype")
    y = ct.registered_empty(5, torch.int32)
    check(y.shape == (5,) and y.dtype == torch.int32, "int size")
    del x, y
    n = 1 << 16  # 256 KiB of float32: above the zero-copy thresholds
    for it in range(3):
        a = ct.registered_empty(n)
        a.copy_(torch.arange(n, dtype=torch.float32) * (rank + 1) + it)
        ref = a.clone()
        dist.all_reduce(a)
        dist.all_reduce(ref)
        check(torch.equal(a, ref), "all_reduce on registered memory")
        rs_in = ct.registered_empty(n)
        rs_in.copy_(torch.arange(n, dtype=torch.float32) - rank)
        rs_out = ct.registered_empty(n // world)
        ref_out = torch.empty(n // world)
        dist.reduce_scatter_tensor(rs_out, rs_in)
        dist.reduce_scatter_tensor(ref_out, rs_in.clone())
        check(torch.equal(rs_out, ref_out), "reduce_scatter_tensor on registered memory")
        del a, rs_in, rs_out
        if it == 0:
            first = ct.registered_pool_stats()
    last = ct.registered_pool_stats()
    check(last["blocks"] == first["blocks"], f"pool grew: {first} -> {last}")
    check(last["reuses"] > first["reuses"], f"pool not reused: {first} -> {last}")
    print(f"rank {rank} pool {json.dumps(last)}", flush=True)
    held = ct.registered_empty(10)  # alive across the destroy
    held.fill_(7)
    dist.destroy_process_group()
    check(_chorus_torch.registered_live_blocks() == 1, "only the held block outlives destroy")
    check(bool((held == 7).all()), "a held tensor keeps its memory after destroy")
    del held
    check(_chorus_torch.registered_live_blocks() == 0, "every block freed")
    print(f"rank {rank} OK", flush=True)


def bad():
    dist.init_process_group("chorus")
    gloo = dist.new_group(backend="gloo")
    for what, call in [("registered_empty", lambda: ct.registered_empty(4, group=gloo)),
                       ("FSDPAllGather", lambda: ct.FSDPAllGather(gloo)),
                       ("FSDPReduceScatter", lambda: ct.FSDPReduceScatter(gloo))]:
        try:
            call()
        except ValueError as e:
            check("not a chorus process group" in str(e) and "gloo" in str(e), f"message: {e}")
            print(f"{what}: {e}", flush=True)
        else:
            check(False, f"{what} on a gloo group did not raise")
    if _has_fsdp2():
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.fsdp import FSDPModule
        model = fully_shard(nn.Linear(8, 8), mesh=DeviceMesh.from_group(gloo, "cpu"))
        # Without FSDP2's custom comms (torch 2.6) a RuntimeError saying so comes first.
        custom = hasattr(FSDPModule, "set_custom_all_gather")
        try:
            ct.use_registered_buffers(model)
        except (ValueError, RuntimeError) as e:
            if custom:
                check(isinstance(e, ValueError) and "gloo" in str(e), f"{type(e).__name__}: {e}")
            else:
                check(isinstance(e, RuntimeError) and "set_custom_all_gather" in str(e)
                      and torch.__version__ in str(e), f"{type(e).__name__}: {e}")
        else:
            check(False, "use_registered_buffers on a gloo FSDP2 module did not raise")
    dist.destroy_process_group()
    print("OK", flush=True)


def _has_fsdp2():
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        return True
    except Exception:  # ImportError; a ValueError inside Debian's torch 1.13 on Python 3.11
        return False


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    layers.append(nn.Linear(WIDTH, 8))
    return nn.Sequential(*layers)


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, WIDTH, generator=g), torch.randint(0, 8, (BATCH,), generator=g)


def fsdp(mode, steps=6, lr=0.05):
    from torch.distributed.fsdp import FSDPModule, fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("chorus")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    if mode == "registered":
        set_ = ct.use_registered_buffers(model)
        check(set_ == DEPTH + 1, f"use_registered_buffers set {set_} modules")
    elif mode == "pg_alloc":
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_allocate_memory_from_process_group_for_comm(True)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    share = BATCH // world
    stats = []
    for step in range(steps):
        x, y = batch(step)
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        stats.append(ct.registered_pool_stats())
    print("== TRAINED ==", file=sys.stderr, flush=True)
    full = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
    if rank == 0:
        torch.save(full, os.environ["OUT_FILE"])
    dist.barrier()
    dist.destroy_process_group()
    after_destroy = _chorus_torch.registered_live_blocks()
    opt.zero_grad()  # the sharded gradients are views of the last reduce-scatter outputs
    del model, opt, full
    import gc
    gc.collect()
    info = {"stats": stats, "after_destroy_open": after_destroy,
            "live_after_release": _chorus_torch.registered_live_blocks()}
    if rank == 0:
        with open(os.environ["OUT_FILE"] + ".json", "w") as f:
            json.dump(info, f)
    print(f"rank {rank} OK {json.dumps(info['stats'][-1])}", flush=True)


def main():
    mode = sys.argv[1]
    if mode == "basic":
        basic()
    elif mode == "bad":
        bad()
    elif mode == "fsdp":
        fsdp(sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
