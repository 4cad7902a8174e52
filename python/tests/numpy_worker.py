"""One rank of a numpy job (chorus.Comm.from_env under chorusrun or torchrun-style variables):
every collective x dtype, in place and out of place, against references computed here from
every rank's (seeded) inputs. Exit 0 when every check passed."""

import os
import sys

import numpy as np

import chorus

FAIL = []
DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32,
          np.float64]


def data(rank, n, dtype, salt, lo=0, hi=8):
    return np.random.default_rng(1000003 * rank + 7919 * salt).integers(lo, hi, n).astype(dtype)


def check(got, want, what):
    if got is None or got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        FAIL.append(what)
        print(f"FAIL {what}: got {None if got is None else got.ravel()[:6]} want {want.ravel()[:6]}",
              flush=True)


def run(comm, tag=""):
    r, n = comm.rank, comm.size
    salt = 0
    for dt in DTYPES:
        for opname, ref in (("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)):
            for count in (0, 1, 7, 4099):
                salt += 1
                lo, hi = (1, 3) if opname == "prod" else (0, 8)
                allx = [data(q, count, dt, salt, lo, hi) for q in range(n)]
                want = ref(np.stack(allx).astype(np.float64), axis=0).astype(dt)
                x = allx[r].copy()
                check(comm.all_reduce(x, op=opname), want, f"{tag}all_reduce {opname} {dt.__name__} {count} in place")
                check(comm.all_reduce(allx[r], out=np.empty_like(x), op=opname), want,
                      f"{tag}all_reduce {opname} {dt.__name__} {count} out of place")
        salt += 1
        allx = [data(q, 10, dt, salt) for q in range(n)]
        want = np.sum(np.stack(allx).astype(np.float64), axis=0).astype(dt)
        x = allx[r].copy()
        root = salt % n
        comm.reduce(x, root=root)
        if r == root:
            check(x, want, f"{tag}reduce {dt.__name__}")
        check(comm.all_gather(allx[r]), np.stack(allx), f"{tag}all_gather {dt.__name__}")
        big = [data(q, 3 * n, dt, salt) for q in range(n)]
        rs = np.sum(np.stack(big).astype(np.float64), axis=0).astype(dt)
        check(comm.reduce_scatter(big[r]), rs[3 * r:3 * r + 3], f"{tag}reduce_scatter {dt.__name__}")
        x = allx[r].copy()
        check(comm.broadcast(x, root=root), allx[root], f"{tag}broadcast {dt.__name__}")
    a2a = np.array([[100 * r + p] * 3 for p in range(n)], dtype=np.int64)
    check(comm.all_to_all(a2a), np.array([[100 * p + r] * 3 for p in range(n)], dtype=np.int64),
          f"{tag}all_to_all")
    g = comm.gather(np.full(4, r, dtype=np.float32), root=n - 1)
    if r == n - 1:
        check(g, np.repeat(np.arange(n, dtype=np.float32)[:, None], 4, axis=1), f"{tag}gather")
    src = np.arange(n * 2, dtype=np.float64).reshape(n, 2) if r == 0 else None
    out = comm.scatter(src, out=None if r == 0 else np.empty(2), root=0)
    check(out, np.arange(2 * r, 2 * r + 2, dtype=np.float64), f"{tag}scatter")
    if n > 1:
        s = np.full(1000, r, dtype=np.int32)
        got = np.empty(1000, dtype=np.int32)
        with chorus.group():
            comm.send(s, (r + 1) % n)
            comm.recv(got, (r - 1) % n)
        check(got, np.full(1000, (r - 1) % n, dtype=np.int32), f"{tag}send/recv ring")
    comm.barrier()
    # split: even and odd ranks
    sub = comm.split(r % 2)
    x = np.ones(3, dtype=np.int64)
    check(sub.all_reduce(x), np.full(3, len(range(r % 2, n, 2)), dtype=np.int64), f"{tag}split")
    sub.close()
    try:
        comm.all_reduce(np.zeros(3, dtype=np.complex64))
        FAIL.append("complex all_reduce raised nothing")
    except chorus.InvalidArgumentError as e:
        assert e.code == 4
    try:
        comm.broadcast(np.zeros(3), root=n + 5)
        FAIL.append("broadcast root out of range raised nothing")
    except chorus.InvalidArgumentError as e:
        if f"rank {r}" not in e.message:
            FAIL.append(f"root error does not name the rank: {e.message}")


if __name__ == "__main__":
    with chorus.Comm.from_env() as comm:
        run(comm)
    sys.stdout.flush()
    os._exit(1 if FAIL else 0)
