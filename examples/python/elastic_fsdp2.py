"""FSDP2 training that survives a lost rank: 4 ranks train with HSDP (fully_shard on a 2 x 2
mesh: every parameter is sharded over 2 ranks and each shard is held by 2 ranks), one rank is
killed (SIGKILL) at a chosen step; the survivors catch the error, shrink the default group to
themselves (torch 2.13's shrink_group on chorusCommShrink), put the full parameters back
together from the shards they hold (every shard has a surviving copy), shard the model again
over the 3 of them, redo the failed step and finish the run. Only the failed step's gradients
are lost; nothing restarts.

    python examples/python/elastic_fsdp2.py -np 4 --kill-rank 3 --kill-step 5

Plain FSDP (one copy of each shard) cannot do this: the lost rank's shard is gone with it, and a
job must go back to a checkpoint. HSDP's replicas are what makes the in-memory recovery
possible, at the memory cost of two copies of each shard.

What the loop needs (in the except clause):

    except RuntimeError as e:
        chorus.torch.shrink_after_failure(e)           # a smaller default group
        model = reshard(full_parameters(model))        # this file's two functions

As in elastic_ddp.py, rank 0's process hosts torch's TCPStore when started by hand, so rank 0 is
not a rank the job can lose (--kill-rank 0 is refused). The survivors' final parameters are
checked against the same model trained in one process on the whole batch of every step (the
global batch, 48 samples, splits evenly over 4 and 3 ranks).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import chorus
import chorus.torch

BATCH = 48


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 4))


def batch(step):
    g = torch.Generator().manual_seed(700 + step)
    return torch.randn(BATCH, 32, generator=g), torch.randint(0, 4, (BATCH,), generator=g)


def shard(model, mesh):
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def full_parameters(model):
    """Every survivor's local shards, exchanged over the new (shrunk) default group, put back
    together: for each parameter, the shards in order along dim 0 (Shard(0) of the mesh's
    "shard" dimension), each taken from whichever survivor holds a copy."""
    mine = {}
    for name, p in model.named_parameters():
        coord = p.device_mesh.get_coordinate()  # (replica, shard) on the old mesh
        mine[name] = (coord[1], p.to_local().detach().clone())
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    full = {}
    for name, p in model.named_parameters():
        nshards = p.device_mesh.size(1)
        pieces = {}
        for held in everyone:
            idx, t = held[name]
            pieces.setdefault(idx, t)
        missing = [i for i in range(nshards) if i not in pieces]
        if missing:
            raise RuntimeError(f"shards {missing} of {name} have no surviving copy")
        full[name] = torch.cat([pieces[i] for i in range(nshards)], dim=0)
    return full


def reshard(full):
    """A new model with these parameters, sharded (plain FSDP) over every rank of the default
    group."""
    model = make_model()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(full[name])
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    return shard(model, mesh)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--kill-rank", type=int, default=3)
    p.add_argument("--kill-step", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("-np", type=int, default=4, help="local ranks when not under torchrun")
    a = p.parse_args()
    if a.kill_rank == 0:
        sys.exit("elastic_fsdp2: rank 0 hosts the job's store here; lose another rank")
    if "RANK" not in os.environ:
        status = chorus.spawn_local(a.np)
        sys.exit(0 if status in (0, -9) else status)  # the victim's SIGKILL is the plan

    torch.set_num_threads(1)
    dist.init_process_group("chorus")
    start_rank, start_world = dist.get_rank(), dist.get_world_size()
    if start_world % 2:
        sys.exit("elastic_fsdp2: an even number of ranks (2 replicas of each shard)")
    mesh = init_device_mesh("cpu", (2, start_world // 2), mesh_dim_names=("replicate", "shard"))
    model = shard(make_model(), mesh)
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
            model = reshard(full_parameters(model))
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
    worst = 0.0
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        worst = max(worst, (p.full_tensor() - q).abs().max().item())
    ok = worst <= 1e-5 and dist.get_world_size() == (start_world - 1 if recovered else start_world)
    print(f"rank {start_rank}: finished {a.steps} steps on {dist.get_world_size()} ranks; "
          f"parameters vs one process: max |diff| {worst:.3g} ({'OK' if ok else 'MISMATCH'})",
          flush=True)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
