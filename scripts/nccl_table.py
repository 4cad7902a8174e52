"""The nccl-tests table that every benchmark of the comparison scripts prints (build/<coll>_perf,
tools/mpi/mpi_coll_perf.c, tools/ccl/ccl_coll_perf.cc), read once for all of them.
The scripts' embedded Python imports it: sys.path.insert(0, "scripts") from the repository root.
"""
import os
import statistics

OUT_OF_PLACE, IN_PLACE = 5, 9  # the columns of a row's time (us)


def times(path, col=OUT_OF_PLACE):
    """{bytes: time in us} of the float rows of the table in `path` ({} if there is none)."""
    t = {}
    if not os.path.exists(path):
        return t
    for line in open(path):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit() and f[2] == "float":
            try:
                t[int(f[0])] = float(f[col])
            except ValueError:
                pass
    return t


def size_label(b):
    """8, 512, 2 K, 32 M: bytes as the docs' tables write them."""
    for unit, shift in (("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return str(b)


def size_arg(s):
    """'64M' -> 67108864: a size as the tools' -b / -e take it (K, M, G; a trailing B ignored)."""
    s = s.strip().upper().rstrip("B")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1]]) if s and s[-1] in units else int(s)


def size_name(b):
    """8 B, 2 KiB, 16 MiB, 1 GiB: bytes as the scale and model tables write them."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def best_median(v):
    """'best / median' of a list of times, '-' when empty."""
    return f"{min(v):.2f} / {statistics.median(v):.2f}" if v else "-"
