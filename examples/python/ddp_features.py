"""DistributedDataParallel features on CPU over the "chorus" backend (or --backend gloo to
compare), each checked against a reference computed in one process; prints the time per step.

    torchrun --nproc-per-node 2 examples/python/ddp_features.py
    python examples/python/ddp_features.py -np 3     # no torchrun
    python examples/python/ddp_features.py -np 2 --modes powersgd,join

Modes (--modes, comma separated; default all), each a fresh model trained for --steps steps:

  static_graph    DDP(static_graph=True) on a model with a parameter that forward never uses
  no_sync         gradient accumulation: --accum micro-batches, all but the last in no_sync()
  allreduce_hook  register_comm_hook(None, default_hooks.allreduce_hook)
  bf16_hook       default_hooks.bf16_compress_hook: gradients travel as bfloat16 (so the
                  check is looser); called from a wrapper, since torch refuses to register a
                  hook of that name on a build without CUDA/NCCL
  powersgd        powerSGD_hook with PowerSGDState(matrix_approximation_rank=1,
                  start_powerSGD_iter=2), all gradients in one bucket (see run_mode): lossy,
                  so the check is that every rank holds the same parameters, the hook did
                  compress, and the loss went down
  join            uneven inputs: rank r trains on --steps + r batches under model.join()

Every rank trains on its own share of each global batch; the reference trains the same model in
one process on the whole global batch (for join: the shares of the ranks still training that
step, divided by the initial world size, which is what DDP's join does). Exact modes must match
within 1e-5, bf16_hook within 2e-3. In every mode all ranks must end with identical parameters
and the evaluation loss must go down. Exit status 1 if any mode fails (named in the output).
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

DIM, HIDDEN, OUT, SHARE = 32, 96, 8, 8  # SHARE: rows per rank per (micro-)batch
MODES = ["static_graph", "no_sync", "allreduce_hook", "bf16_hook", "powersgd", "join"]
TOL = {"bf16_hook": 2e-3}  # the others 1e-5; powersgd is not compared with the reference


class Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN),
                                  nn.Tanh(), nn.Linear(HIDDEN, OUT))
        # A parameter forward never touches: without static_graph (or find_unused_parameters)
        # DDP would wait for its gradient forever and raise on the next iteration.
        self.unused = nn.Linear(HIDDEN, 4) if unused else None

    def forward(self, x):
        return self.body(x)


def make_model(mode):
    torch.manual_seed(0)
    return Net(unused=(mode == "static_graph"))


W_TRUE = torch.randn(DIM, OUT, generator=torch.Generator().manual_seed(7))


def share(step, rank, micro=0):
    """Rank `rank`'s rows of global batch `step` (micro-batch `micro`)."""
    g = torch.Generator().manual_seed(100000 * micro + 1000 * step + rank)
    x = torch.randn(SHARE, DIM, generator=g)
    y = torch.tanh(x @ W_TRUE) + 0.05 * torch.randn(SHARE, OUT, generator=g)
    return x, y


def eval_loss(model):
    g = torch.Generator().manual_seed(424242)
    x = torch.randn(256, DIM, generator=g)
    with torch.no_grad():
        return nn.functional.mse_loss(model(x), torch.tanh(x @ W_TRUE)).item()


def batches(mode, steps, rank):
    """The number of steps rank `rank` trains in this mode."""
    return steps + rank if mode == "join" else steps


def train_reference(mode, steps, world, lr, accum):
    """One process, the whole global batch (the active ranks' shares) each step."""
    model = make_model(mode)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    last = max(batches(mode, steps, r) for r in range(world))
    for step in range(last):
        opt.zero_grad()
        active = [r for r in range(world) if step < batches(mode, steps, r)]
        for micro in range(accum if mode == "no_sync" else 1):
            # DDP averages over the initial world size: the mean of each rank's mean loss.
            total = sum(nn.functional.mse_loss(model(x), y)
                        for x, y in (share(step, r, micro) for r in active)) / world
            total.backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


def run_mode(mode, a, rank, world):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    model = make_model(mode)
    before = eval_loss(model)
    # A small bucket cap puts the gradients into several buckets (several hook calls a step).
    # Not for PowerSGD: its hook issues its second and third all_reduce from the callbacks of
    # the first, so with several buckets and a backend that completes collectives on another
    # thread (gloo; chorus with CHORUS_TORCH_ASYNC=1) the ranks can issue the next bucket's
    # all_reduce and a callback's in different orders: mismatched collectives (gloo raises
    # "Received data size doesn't match", chorus waits until the group's timeout).
    ddp = DDP(model, bucket_cap_mb=25 if mode == "powersgd" else 0.02,
              static_graph=(mode == "static_graph"))
    state = None
    if mode == "allreduce_hook":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif mode == "bf16_hook":
        # torch refuses a hook *named* bf16_compress_hook unless it was built with CUDA/NCCL
        # or XPU/XCCL (DistributedDataParallel._check_comm_hook), though the hook itself is
        # a plain all_reduce of a bfloat16 tensor. Calling it from a hook of another name
        # runs exactly the same code on CPU.
        def bf16_hook(state, bucket):
            return default_hooks.bf16_compress_hook(state, bucket)
        ddp.register_comm_hook(None, bf16_hook)
    elif mode == "powersgd":
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, min_compression_rate=1.5,
                                       use_error_feedback=True, warm_start=True, random_seed=0)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)

    def step_fn(step):
        opt.zero_grad()
        if mode == "no_sync":
            for micro in range(a.accum - 1):
                with ddp.no_sync():  # local accumulation, no communication
                    x, y = share(step, rank, micro)
                    nn.functional.mse_loss(ddp(x), y).backward()
            x, y = share(step, rank, a.accum - 1)
        else:
            x, y = share(step, rank)
        nn.functional.mse_loss(ddp(x), y).backward()  # the all-reduce of this step
        opt.step()

    n = batches(mode, a.steps, rank)
    warm = min(2, a.steps - 1)
    dist.barrier()
    if mode == "join":
        with ddp.join():  # ranks that run out of batches shadow the others' all-reduces
            t0 = time.perf_counter()
            for step in range(n):
                step_fn(step)
        per_step = (time.perf_counter() - t0) / n
    else:
        for step in range(warm):
            step_fn(step)
        t0 = time.perf_counter()
        for step in range(warm, n):
            step_fn(step)
        per_step = (time.perf_counter() - t0) / (n - warm)
    dist.barrier()
    times = torch.tensor([per_step])
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return model, before, eval_loss(model), times.item(), state


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="chorus")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--accum", type=int, default=3, help="micro-batches per step in no_sync")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("-np", type=int, default=2, help="local ranks when not under torchrun")
    a = p.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        p.error(f"unknown modes {sorted(unknown)}; known: {MODES}")
    if "RANK" not in os.environ:  # no launcher: start the ranks ourselves, torchrun-style
        sys.exit(chorus.spawn_local(a.np))

    torch.set_num_threads(1)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    failed = []
    for mode in modes:
        model, before, after, per_step, state = run_mode(mode, a, rank, world)
        params = {n: p.detach() for n, p in model.named_parameters()}
        flat = torch.cat([params[n].flatten() for n in sorted(params)])
        hi, lo = flat.clone(), flat.clone()
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        spread = (hi - lo).abs().max().item()
        if rank != 0:
            continue
        problems = []
        if not spread == 0:
            problems.append(f"ranks differ by {spread:.3g}")
        if not after < before:
            problems.append(f"evaluation loss did not go down ({before:.4f} -> {after:.4f})")
        ref = train_reference(mode, a.steps, world, a.lr, a.accum)
        diff = max((params[n] - ref[n]).abs().max().item() for n in ref)
        if mode == "powersgd":
            detail = f"vs one process {diff:.3g} (lossy, not checked)"
            # It compressed: past start_powerSGD_iter, with error feedback kept per bucket.
            if not (state.iter > state.start_powerSGD_iter and state.error_dict):
                problems.append(f"PowerSGD did not compress (iter {state.iter}, "
                                f"{len(state.error_dict)} error-feedback buckets)")
            if not diff > 0:
                problems.append("identical to exact SGD: the compression did nothing")
        else:
            tol = TOL.get(mode, 1e-5)
            detail = f"vs one process max |diff| {diff:.3g} (tolerance {tol:g})"
            if not diff <= tol:
                problems.append(f"parameters differ from the reference by {diff:.3g} > {tol:g}")
        status = "OK" if not problems else "FAILED: " + "; ".join(problems)
        print(f"{a.backend}: {world} ranks, mode {mode}: {per_step * 1e3:.2f} ms per step, "
              f"eval loss {before:.4f} -> {after:.4f}, {detail}: {status}", flush=True)
        if problems:
            failed.append(mode)
    if rank == 0:
        print(f"{a.backend}: {world} ranks: " +
              (f"FAILED modes: {', '.join(failed)}" if failed else "all modes OK"), flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
