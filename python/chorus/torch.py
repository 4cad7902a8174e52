"""torch.distributed backend "chorus".

    import torch.distributed as dist
    import chorus.torch                      # registers the backend
    dist.init_process_group("chorus")        # env:// (torchrun), tcp://, file:// or a store

Every CPU collective of torch.distributed, with float32/64, float16, bfloat16 and int8/uint8/
int32/int64 reductions (SUM, PRODUCT, MIN, MAX, AVG). The unique id travels through the store
torch gives the backend; the group's timeout bounds every wait. See docs/python.md.
"""

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _chorus_torch

__all__ = ["BACKEND", "is_async"]

BACKEND = "chorus"


def _create(store, rank, size, timeout):
    return _chorus_torch.create_process_group(store, rank, size, timeout)


if not hasattr(dist.Backend, BACKEND.upper()):  # registering twice asserts in torch
    dist.Backend.register_backend(BACKEND, _create)


def is_async(group=None):
    """Whether the group runs its collectives on a worker thread (CHORUS_TORCH_ASYNC=1)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _chorus_torch.is_async(pg)
