"""One rank, N calls of dist.all_reduce on an 8-byte tensor over backend "chorus" (or BK=gloo):
the program scripts/torch_call_profile.sh counts instructions of, to split a call's cost
between torch's Python wrapper, torch's C++ dispatch, the chorus backend and the library."""
import os
import sys

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401

os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29611")
torch.set_num_threads(1)
dist.init_process_group(os.environ.get("BK", "chorus"))
t = torch.ones(2)
for _ in range(200):
    dist.all_reduce(t)
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2000):
    dist.all_reduce(t)
dist.destroy_process_group()
