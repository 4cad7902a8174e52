"""DDP training that survives a lost rank: one rank is killed (SIGKILL) at a chosen step; the
survivors catch the error, shrink the default group to themselves (torch 2.13's shrink_group on
chorusCommShrink), rebuild the DDP wrapper from the model they hold in memory, redo the failed
step and finish the run. Only the failed step's gradients are lost; nothing restarts.

    python examples/python/elastic_ddp.py -np 4 --kill-rank 2 --kill-step 7

Start the ranks by hand (torchrun-style variables) or with -np as here: torchrun's agent and
chorusrun stop every other rank as soon as one dies, which is what a job that restarts from a
checkpoint wants and exactly what this one does not. The job's store must outlive the lost rank:
started this way, rank 0's process hosts torch's TCPStore, so rank 0 is not a rank the job can
lose (--kill-rank 0 is refused); host the store elsewhere (a TCPStore server process) to lose
any rank.

What the loop needs (two lines in the except clause):

    except RuntimeError as e:
        chorus.torch.shrink_after_failure(e)     # the survivors agree, a smaller default group
        model = DDP(model.module)                # the wrapper again, on that group

The survivors' final parameters are checked against the same model trained in one process on
the whole batch of every step (the global batch, 48 samples, splits evenly over 4 and 3 ranks,
so DDP's average of per-rank mean gradients is the whole batch's mean gradient either way).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus
import chorus.torch

BATCH = 48


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


def batch(step):
    g = torch.Generator().manual_seed(500 + step)
    return torch.randn(BATCH, 32, generator=g), torch.randint(0, 4, (BATCH,), generator=g)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--kill-rank", type=int, default=2)
    p.add_argument("--kill-step", type=int, default=7)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("-np", type=int, default=4, help="local ranks when not under torchrun")
    a = p.parse_args()
    if a.kill_rank == 0:
        sys.exit("elastic_ddp: rank 0 hosts the job's store here; lose another rank (--kill-rank)")
    if "RANK" not in os.environ:
        status = chorus.spawn_local(a.np)
        sys.exit(0 if status in (0, -9) else status)  # the victim's SIGKILL is the plan

    torch.set_num_threads(1)
    dist.init_process_group("chorus")
    start_rank = dist.get_rank()
    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    step, recovered = 0, False
    while step < a.steps:
        rank, world = dist.get_rank(), dist.get_world_size()
        share = BATCH // world
        x, y = batch(step)
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        try:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            if start_rank == a.kill_rank and step == a.kill_step and not recovered:
                os.kill(os.getpid(), 9)
            loss.backward()
        except RuntimeError as e:
            print(f"rank {start_rank}: step {step} failed: {e}", flush=True)
            chorus.torch.shrink_after_failure(e)
            model = DDP(model.module)
            opt = torch.optim.SGD(model.parameters(), lr=a.lr)  # plain SGD: no state to carry
            recovered = True
            print(f"rank {start_rank}: now rank {dist.get_rank()} of {dist.get_world_size()}, "
                  f"redoing step {step}", flush=True)
            continue
        opt.step()
        step += 1

    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=a.lr)
    for s in range(a.steps):
        x, y = batch(s)
        ref_opt.zero_grad()
        nn.functional.cross_entropy(ref(x), y).backward()
        ref_opt.step()
    worst = max((p - q).abs().max().item()
                for p, q in zip(model.module.parameters(), ref.parameters()))
    ok = worst <= 1e-5 and dist.get_world_size() == (a.np if not recovered else a.np - 1)
    print(f"rank {start_rank}: finished {a.steps} steps on {dist.get_world_size()} ranks; "
          f"parameters vs one process: max |diff| {worst:.3g} ({'OK' if ok else 'MISMATCH'})",
          flush=True)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
