"""What a rank's threads cost while the program computes and calls no collective: the CPU time
of each thread over an idle gap (GAP seconds, default 10) between two AllReduces, by thread name
(chorus-proxy: the TCP proxy of a rank with peers on other nodes). Prints one line per rank:

    IDLE rank=R gap=S cpu=C threads=name:seconds,...

    PYTHONPATH=build/python build/chorusrun -np 4 --nodes 2 --netns python3 python/tests/idle_worker.py
"""
import glob
import os
import time

import numpy as np

import chorus


def thread_cpu():
    """{tid: (name, user + system ticks)} of this process's threads."""
    out = {}
    for d in glob.glob("/proc/self/task/*"):
        try:
            with open(d + "/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        out[d.rsplit("/", 1)[1]] = (s[s.index("(") + 1:s.rindex(")")], int(fields[11]) + int(fields[12]))
    return out


def main():
    c = chorus.Comm.from_env()
    x = np.ones(1 << 20, dtype=np.float32)
    for _ in range(5):
        c.all_reduce(x)
    gap = float(os.environ.get("GAP", "10"))
    before, p0 = thread_cpu(), time.process_time()
    time.sleep(gap)
    after, p1 = thread_cpu(), time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    names = {}
    for tid, (name, ticks) in after.items():
        names[name] = names.get(name, 0.0) + (ticks - before.get(tid, (name, 0))[1]) / tick
    y = c.all_reduce(np.ones(1 << 20, dtype=np.float32))
    ok = bool(np.all(y == c.size))
    listed = ",".join(f"{n}:{s:.2f}" for n, s in sorted(names.items()))
    print(f"IDLE rank={c.rank} gap={gap:g} cpu={p1 - p0:.3f} threads={listed} ok={int(ok)}", flush=True)
    c.close()


if __name__ == "__main__":
    main()
