"""Data-parallel training across nodes on the "chorus" backend, one process per rank, started by
torchrun on every node or by Slurm's srun. It first checks the wiring (each rank's place as the
launcher gave it against torch.distributed's, and an all_reduce against the sum computed here),
trains a small model with DistributedDataParallel, and checks that every rank ends with the same
parameters; it exits 1 when a check fails.

Two nodes with torchrun (static rendezvous; run on each node, node 0 at 10.0.0.1):
    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr 10.0.0.1 \\
        --master-port 29500 examples/python/multinode_ddp.py       # --node-rank 1 on node 1
Slurm: srun starts the ranks; chorus.torch takes rank, size, local rank and the rendezvous
address from srun's variables (the step's first node; a port derived from the job and step ids):
    srun -N 2 --ntasks-per-node 4 python examples/python/multinode_ddp.py
    sbatch -N 2 --ntasks-per-node 4 --wrap "srun python examples/python/multinode_ddp.py"
"""

import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch  # noqa: F401  (registers "chorus"; under srun fills RANK, MASTER_ADDR, ...)


def launcher_place():
    """(launcher, rank, world size, local rank) as the launcher set them, or None."""
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun (also torchrun started by srun)
        return ("torchrun", int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                int(os.environ["LOCAL_RANK"]))
    if "SLURM_PROCID" in os.environ and "SLURM_NTASKS" in os.environ:  # srun
        return ("srun", int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]),
                int(os.environ["SLURM_LOCALID"]))
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("chorus")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    host = socket.gethostname()
    errors = []

    place = launcher_place()
    if place is not None and place[1:] != (rank, world, local_rank):
        errors.append(f"{place[0]} gives rank {place[1]} of {place[2]}, local rank {place[3]}; "
                      f"torch.distributed has rank {rank} of {world}, local rank {local_rank}")

    # The wiring: element i of rank r holds i + r, so the sum is world * i + world(world-1)/2,
    # exact in float64. 2^18 elements take the large-message path as well.
    x = torch.arange(1 << 18, dtype=torch.float64) + rank
    dist.all_reduce(x)
    want = torch.arange(1 << 18, dtype=torch.float64) * world + world * (world - 1) / 2
    if not torch.equal(x, want):
        errors.append(f"all_reduce: {(x != want).sum().item()} wrong elements")

    # Where every rank runs (node = a distinct (hostname, CHORUS_HOSTID) pair: emulated nodes on
    # one machine share the hostname).
    places = [None] * world
    dist.all_gather_object(places, (host, os.environ.get("CHORUS_HOSTID", ""), local_rank))
    nodes = len({(h, n) for h, n, _ in places})

    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)  # each rank its own data
    w_true = torch.randn(32, 4, generator=torch.Generator().manual_seed(123))
    for _ in range(a.steps):
        xb = torch.randn(64, 32, generator=g)
        loss = nn.functional.cross_entropy(model(xb), (xb @ w_true).argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    # After DDP's steps every replica must hold rank 0's parameters, bit for bit.
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    if not torch.equal(flat, ref):
        errors.append("parameters differ from rank 0's after training")

    # One write per line: the ranks of a node share their launcher's output pipe.
    sys.stdout.write(f"rank {rank} of {world} local_rank {local_rank} host {host} "
                     f"{'ok' if not errors else 'FAILED: ' + '; '.join(errors)}\n")
    sys.stdout.flush()
    failed = torch.tensor([1 if errors else 0])
    dist.all_reduce(failed)
    if rank == 0:
        sys.stdout.write(f"multinode_ddp: {world} ranks on {nodes} nodes, final loss "
                         f"{loss.item():.4f}, "
                         f"{'OK' if failed.item() == 0 else f'{failed.item()} ranks FAILED'}\n")
        sys.stdout.flush()
    dist.destroy_process_group()
    return 1 if failed.item() else 0


if __name__ == "__main__":
    sys.exit(main())
