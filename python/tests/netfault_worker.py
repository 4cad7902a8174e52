"""One rank of the network-fault trials (scripts/netfault_table.sh with WORKER=torch) as a torch
program: tests/netfault_worker.cc's AllReduce loop and its lines, through
torch.distributed's "chorus" backend. Every result is checked against the sum computed here.

  python netfault_worker.py [--count N] [--seconds S] [--linger-ms MS] [--watchdog SEC]
                            [--hang-rank R --hang-file PATH]

Ranks from the launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; under chorusrun
chorus.torch fills them from chorusrun's); the group's timeout is CHORUS_TIMEOUT. After a failed
call the rank prints its FAILED line, waits --linger-ms and re-raises the error, so that it ends
as a torch program ends on an uncaught error. Lines (t: CLOCK_MONOTONIC seconds):
  READY rank=R nranks=N pid=P t=T
  PROGRESS rank=R iter=I t=T          after call I (every call for the first 10, then every 10)
  HUNG rank=R iter=I t=T              --hang-rank: it stopped calling before call I
  FAILED rank=R code=0 name=E t=T iter=I culprit=C msg=M   (C: chorus.torch.failed_rank, or -1)
  WRONG rank=R iter=I index=K got=G want=W
  DONE rank=R iters=I t=T seconds=S
"""
import argparse
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  (registers the backend)


def say(line):
    """One line in one write(2): the ranks of a node share its output, and print(..., flush=True)
    writes a line in more than one (two processes printing 400-character lines to one pipe: 312
    of 40000 ran into each other), where another rank's line would run into this one."""
    os.write(1, (line + "\n").encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=65536)
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--linger-ms", type=int, default=3000)
    ap.add_argument("--watchdog", type=float, default=120)
    ap.add_argument("--hang-rank", type=int, default=-1)
    ap.add_argument("--hang-file", default="")
    o = ap.parse_args()
    signal.signal(signal.SIGALRM,
                  lambda *_: (say("chorus netfault_worker.py: not finished"), os._exit(99)))
    signal.alarm(int(o.watchdog))
    timeout = datetime.timedelta(seconds=float(os.environ.get("CHORUS_TIMEOUT", "60")))
    dist.init_process_group("chorus", timeout=timeout)
    rank, n = dist.get_rank(), dist.get_world_size()
    k = torch.arange(o.count, dtype=torch.int64)

    def inputs(r, it):  # rank r's input of call it: small integers, sums exact in any order
        return ((r * 7919 + it * 104729 + k * 31) % 1000 - 500).to(torch.int32)

    say(f"READY rank={rank} nranks={n} pid={os.getpid()} t={time.monotonic():.6f}")
    start = time.monotonic()
    it = 0
    while True:
        if rank == o.hang_rank and os.path.exists(o.hang_file):
            say(f"HUNG rank={rank} iter={it} t={time.monotonic():.6f}")
            while True:
                signal.pause()  # until the trial's kill or the watchdog
        try:
            if o.seconds > 0 and it % 10 == 0:
                # Time's up when any rank's clock says so: all make the same number of calls.
                stop = torch.tensor([int(time.monotonic() - start >= o.seconds)], dtype=torch.int32)
                dist.all_reduce(stop, op=dist.ReduceOp.MAX)
                if stop.item():
                    break
            t = inputs(rank, it)
            dist.all_reduce(t)
        except RuntimeError as e:
            culprit = chorus.torch.failed_rank(e)
            msg = " ".join(str(e).split())
            say(f"FAILED rank={rank} code=0 name={type(e).__name__} t={time.monotonic():.6f} "
                f"iter={it} culprit={-1 if culprit is None else culprit} msg={msg}")
            time.sleep(o.linger_ms / 1000)
            raise
        want = sum(inputs(r, it) for r in range(n))
        bad = (t != want).nonzero()
        if len(bad):
            i = int(bad[0])
            say(f"WRONG rank={rank} iter={it} index={i} got={int(t[i])} want={int(want[i])}")
            sys.exit(2)
        if it < 10 or (it + 1) % 10 == 0:
            say(f"PROGRESS rank={rank} iter={it} t={time.monotonic():.6f}")
        it += 1
    seconds = time.monotonic() - start
    dist.destroy_process_group()
    say(f"DONE rank={rank} iters={it} t={time.monotonic():.6f} seconds={seconds:.3f}")


if __name__ == "__main__":
    main()
