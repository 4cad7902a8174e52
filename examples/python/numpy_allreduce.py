"""Collectives on numpy arrays with Chorus's numpy API (no torch needed): AllReduce in place and
out of place, AllGather and Broadcast, each result checked against the value every rank can
compute by itself; exit status 1 on a mismatch.

    torchrun --nproc-per-node 2 examples/python/numpy_allreduce.py
    chorusrun -np 4 python3 examples/python/numpy_allreduce.py          # chorusrun, mpirun, srun too

Comm.from_env() takes the rank, the size and the root's address from the launcher's variables
(chorusrun's, Open MPI's, MPICH's, Slurm's or torchrun's; docs/environment.md, "Launcher
form"); without any it runs as a single rank.
"""

import argparse
import sys

import numpy as np

import chorus


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=1 << 20, help="float32 elements per rank")
    args = p.parse_args()

    with chorus.Comm.from_env() as comm:
        r, n = comm.rank, comm.size
        ok = True

        # AllReduce, in place: every rank contributes (rank + 1) * i; the sum is i * n(n+1)/2
        # (i below 1024, so every partial sum is an exact float32 up to thousands of ranks).
        i = (np.arange(args.count) % 1024).astype(np.float32)
        x = i * (r + 1)
        comm.all_reduce(x)
        ok &= check("all_reduce sum, in place", x, i * (n * (n + 1) // 2), r)

        # AllReduce, out of place, max.
        out = np.empty_like(i)
        comm.all_reduce(np.full(args.count, r, dtype=np.float32), out=out, op="max")
        ok &= check("all_reduce max, out of place", out, np.full(args.count, n - 1, np.float32), r)

        # AllGather: rank k's block is k everywhere.
        g = comm.all_gather(np.full(4, r, dtype=np.int32))
        ok &= check("all_gather", g, np.repeat(np.arange(n, dtype=np.int32), 4).reshape(n, 4), r)

        # Broadcast from the last rank.
        b = np.full(8, r, dtype=np.float64)
        comm.broadcast(b, root=n - 1)
        ok &= check("broadcast", b, np.full(8, n - 1, np.float64), r)

        if r == 0:
            print(f"numpy_allreduce: {n} ranks, {args.count} floats: {'OK' if ok else 'FAILED'}",
                  flush=True)
    return 0 if ok else 1


def check(what, got, want, rank):
    if got.shape == want.shape and np.array_equal(got, want):
        return True
    print(f"rank {rank}: {what}: MISMATCH (got {got.ravel()[:4]}..., want {want.ravel()[:4]}...)",
          file=sys.stderr, flush=True)
    return False


if __name__ == "__main__":
    sys.exit(main())
