"""Broadcast one call at a time against back to back, through chorus's numpy API.

    chorusrun --netns --link-rate 1gbit --nodes 4 -np 8 \\
        python3 tools/py_bench/np_bcast_latency.py --sizes 8,8K,128K

A benchmark loop of Broadcasts (nccl-tests', broadcast_perf) times them back to back: the root
sends a call and goes on, so calls overlap along a chain and the loop measures the pipeline's
rate. A program that needs the data before its next step waits for the whole of one call. Per
size, after a warm-up, each of `--rounds` rounds times three loops of `--iters` calls on every
rank (rank 0 prints the median round of each):

    allreduce   an AllReduce of one float32 alone (what the next step costs by itself)
    single      a Broadcast from rank 0, then that AllReduce, which no rank can finish before
                every rank has the Broadcast's data: less `allreduce`, the Broadcast's time
                one call at a time
    b2b         Broadcasts back to back, then one AllReduce after the loop

one line per size on rank 0:

    RESULT <bytes> <allreduce us> <single us> <b2b us>

where `single` is already less the AllReduce. CHORUS_ALGO=broadcast:chain or broadcast:tree
forces the algorithm.
"""

import argparse
import statistics
import time

import numpy as np

import chorus
from np_allreduce import parse_size  # the sibling benchmark's size parser (this folder is on sys.path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="8,8K,128K", help="comma-separated bytes (K, M suffixes)")
    p.add_argument("--iters", type=int, default=30, help="calls per timed loop")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per size")
    args = p.parse_args()
    with chorus.Comm.from_env() as comm:
        one = np.zeros(1, np.float32)
        for size in (parse_size(s) for s in args.sizes.split(",")):
            x = np.ones(max(1, size // 4), np.float32)
            for _ in range(5):
                comm.broadcast(x, root=0)
                comm.all_reduce(one)
            times = {"allreduce": [], "single": [], "b2b": []}
            for _ in range(args.rounds):
                for mode in times:
                    comm.all_reduce(one)
                    t0 = time.perf_counter()
                    for _ in range(args.iters):
                        if mode != "allreduce":
                            comm.broadcast(x, root=0)
                        if mode != "b2b":
                            comm.all_reduce(one)
                    if mode == "b2b":
                        comm.all_reduce(one)
                    times[mode].append((time.perf_counter() - t0) / args.iters * 1e6)
            if comm.rank == 0:
                a, s, b = (statistics.median(times[m]) for m in ("allreduce", "single", "b2b"))
                print(f"RESULT {size} {a:.1f} {s - a:.1f} {b:.1f}", flush=True)


if __name__ == "__main__":
    main()
