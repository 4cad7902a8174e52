"""Workers of torch.multiprocessing.start_processes (start method: argv[1]) on 2 emulated nodes
(CHORUS_HOSTID by rank), a Broadcast loop whose root runs ahead while rank world-2 is late for
its last call, and no destroy_process_group(): every worker must end with every value right
(python/tests/test_torch.py test_multiprocessing_workers_that_never_destroy_fail_nobody).
Prints "rank R: DONE" per worker and "all workers exited 0"."""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import chorus.torch  # noqa: F401  (registers the "chorus" backend)

WORLD, CALLS, COUNT = 4, 12, 3000


def work(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      CHORUS_HOSTID=f"mp-leave-node{rank * 2 // WORLD}")
    dist.init_process_group("chorus", rank=rank, world_size=WORLD)
    for it in range(CALLS):
        if rank == WORLD - 2 and it == CALLS - 1:
            time.sleep(0.7)
        want = float(it * 7 + 1)
        t = torch.full((COUNT,), want) if rank == 0 else torch.zeros(COUNT)
        dist.broadcast(t, 0)  # raises on failure: the worker's exit status says so
        if not bool(torch.all(t == want)):
            raise SystemExit(f"rank {rank} call {it}: wrong values")
    print(f"rank {rank}: DONE", flush=True)


if __name__ == "__main__":
    mp.start_processes(work, args=(int(sys.argv[2]),), nprocs=WORLD, start_method=sys.argv[1])
    print("all workers exited 0", flush=True)
