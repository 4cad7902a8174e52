"""float32 sum all_reduce on numpy arrays, out of place and in place, through chorus's numpy API
or through mpi4py (buffer API: Allreduce), for the same sizes and iteration counts.

    chorusrun -np 2 python3 tools/py_bench/np_allreduce.py chorus
    mpirun.openmpi -np 2 --bind-to core --allow-run-as-root \
        python3 tools/py_bench/np_allreduce.py mpi

Each size runs `reps` timed loops after a warm-up; a loop's time is the slowest rank's mean per
call (ranks start together after a barrier), and the best loop of the launch is printed, one
line per size and mode on rank 0:

    RESULT <library> <bytes> <oop|inplace> <microseconds per call>

scripts/compare_numpy.sh runs launches of both libraries in turn and summarizes these lines.
Options: --min BYTES (8), --max BYTES (64M), --reps N (3), --label NAME (the library's name)
for the RESULT lines (scripts/compare_numpy.sh labels an older chorus package "before").
"""

import argparse
import sys
import time

import numpy as np


def parse_size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip().lower()
    return int(s[:-1]) * mult[s[-1]] if s and s[-1] in mult else int(s)


def sizes(lo, hi):
    out, b = [], lo
    while b <= hi:
        out.append(b)
        b *= 8
    if out and out[-1] != hi:
        out.append(hi)
    return out


def iterations(nbytes):
    # ~64 MiB moved per timed loop, between 5 and 2000 calls: the same on every rank
    return max(5, min(2000, (64 << 20) // max(nbytes, 1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("library", choices=["chorus", "mpi"])
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--label", default=None)
    a = ap.parse_args()
    label = a.label or a.library

    if a.library == "chorus":
        import chorus
        comm = chorus.Comm.from_env()
        rank, size = comm.rank, comm.size

        def oop(x, y):
            comm.all_reduce(x, out=y)

        def inplace(x, y):
            comm.all_reduce(x)

        def slowest(t):
            v = np.array([t], dtype=np.float64)
            comm.all_reduce(v, op="max")
            return float(v[0])

        barrier = comm.barrier
    else:
        from mpi4py import MPI
        mc = MPI.COMM_WORLD
        rank, size = mc.Get_rank(), mc.Get_size()
        in_place = MPI.IN_PLACE
        op_sum = MPI.SUM

        def oop(x, y):
            mc.Allreduce(x, y, op_sum)

        def inplace(x, y):
            mc.Allreduce(in_place, x, op_sum)

        def slowest(t):
            return mc.allreduce(t, op=MPI.MAX)

        barrier = mc.Barrier

    clock = time.perf_counter
    for nbytes in sizes(parse_size(a.min), parse_size(a.max)):
        n = max(1, nbytes // 4)
        x = np.zeros(n, dtype=np.float32)
        y = np.empty_like(x)
        iters = iterations(nbytes)
        for mode, fn in (("oop", oop), ("inplace", inplace)):
            for _ in range(min(iters, 20)):
                fn(x, y)
            best = float("inf")
            for _ in range(a.reps):
                barrier()
                t0 = clock()
                for _ in range(iters):
                    fn(x, y)
                best = min(best, slowest((clock() - t0) / iters))
            if rank == 0:
                print(f"RESULT {label} {n * 4} {mode} {best * 1e6:.3f}", flush=True)
    if a.library == "chorus":
        comm.finalize()
        comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
