"""The latency of a small dist.all_reduce as torchrun users see it: each rank runs 5 timed loops
of N calls (N from the environment, 5000 by default) of an 8-byte all_reduce over backend BK
("chorus", the default, or "gloo"), and rank 0 prints the best and the median loop's time per call.
  torchrun --nproc_per_node 2 tools/torch_bench/small_allreduce.py        (PYTHONPATH: build/python)
"""
import os
import statistics
import time

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  (registers the backend)

backend = os.environ.get("BK", "chorus")
dist.init_process_group(backend)
t = torch.ones(2)
n = int(os.environ.get("N", "5000"))
per_call = []
for _ in range(5):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(t)
    per_call.append((time.perf_counter() - start) / n * 1e6)
if dist.get_rank() == 0:
    print(f"{backend} 8 B all_reduce, us per call: best {min(per_call):.2f} "
          f"median {statistics.median(per_call):.2f}")
dist.destroy_process_group()
