"""The nccl-tests table that every benchmark of the comparison scripts prints (build/<coll>_perf,
tools/mpi/mpi_coll_perf.c, tools/ccl/ccl_coll_perf.cc), read once for all of them; and this VM's
state before a launch (the hand-off floor), which the comparisons pair launches by.
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


# This VM's hand-off floor (handoff_bench) before a launch: about 0.05 us in its fast state (the
# two vCPUs sharing a cache), 0.23-0.46 in the slow one; below this, the fast state.
FAST_FLOOR_US = 0.1


def floor_is_fast(path):
    """Whether the floor written to `path` (handoff_bench's, in us) is the fast state's; None
    where the file is missing or unreadable."""
    try:
        with open(path) as f:
            return float(f.read().split()[0]) < FAST_FLOOR_US
    except (OSError, ValueError, IndexError):
        return None


def same_state_ratios(rounds, peers, size, fast):
    """Per round, the fastest peer's time / Chorus's at `size`, where both launches began in the
    same state of this VM. rounds: {lib: {round: {size: us}}} with "chorus" among the libs;
    peers: the peer libs; fast(lib, round): floor_is_fast of that launch."""
    out = []
    for r, ct in rounds.get("chorus", {}).items():
        got = [(rounds[l][r][size], l) for l in peers
               if r in rounds.get(l, {}) and size in rounds[l][r]]
        if size not in ct or ct[size] <= 0 or not got:
            continue
        t, fastest = min(got)
        a = fast(fastest, r)
        if a is not None and a == fast("chorus", r):
            out.append(t / ct[size])
    return out
