"""torch.distributed backend "chorus".

    import torch.distributed as dist
    import chorus.torch                      # registers the backend
    dist.init_process_group("chorus")        # env:// (torchrun), tcp://, file:// or a store

Every CPU collective of torch.distributed, with float32/64, float16, bfloat16 and int8/uint8/
int32/int64 reductions (SUM, PRODUCT, MIN, MAX, AVG). The unique id travels through the store
torch gives the backend; the group's timeout bounds every wait. See docs/python.md.
"""

import os

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _chorus_torch

__all__ = ["BACKEND", "abort", "is_async", "env_from_launcher"]

BACKEND = "chorus"


_LAUNCHERS = (("CHORUS_RANK", "CHORUS_NRANKS", "CHORUS_LOCAL_RANK"),
              ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
              ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
              ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


def env_from_launcher(env=None):
    """torch's env:// reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. Under chorusrun,
    mpirun (Open MPI, MPICH) or srun, fills the missing ones from that launcher's variables:
    rank, size and local rank always; the address only under chorusrun (its CHORUS_COMM_ID
    host, port + 1). Variables already set are kept. Called when chorus.torch is imported."""
    env = os.environ if env is None else env
    if "RANK" not in env or "WORLD_SIZE" not in env:
        for rank, size, local in _LAUNCHERS:
            if rank in env and size in env:
                env.setdefault("RANK", env[rank])
                env.setdefault("WORLD_SIZE", env[size])
                if local in env:
                    env.setdefault("LOCAL_RANK", env[local])
                break
    if "MASTER_ADDR" not in env and "CHORUS_COMM_ID" in env:
        host, _, port = env["CHORUS_COMM_ID"].rpartition(":")
        env["MASTER_ADDR"] = host.strip("[]")
        env.setdefault("MASTER_PORT", str(int(port) + 1))
    return env


env_from_launcher()


def _create(store, rank, size, timeout):
    return _chorus_torch.create_process_group(store, rank, size, timeout)


if not hasattr(dist.Backend, BACKEND.upper()):  # registering twice asserts in torch
    dist.Backend.register_backend(BACKEND, _create)


def is_async(group=None):
    """Whether the group runs its collectives on a worker thread (CHORUS_TORCH_ASYNC=1)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _chorus_torch.is_async(pg)


def abort(group=None):
    """Aborts the group's communicator now (also from another thread while a call waits): that
    call and every later one raise, and the peers see this rank's failure."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    _chorus_torch.abort(pg)
