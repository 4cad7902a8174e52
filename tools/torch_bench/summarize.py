"""Summarises scripts/compare_torch.sh's launches: per world size, op and size, the best and the
median time per call of "chorus" and "gloo" over every round of every launch (chorus-torch-bench
JSON), their ratio, and the C library's own time for all_reduce (all_reduce_perf JSON, in-place,
best and median over launches) with the torch/Python overhead over it."""

import glob
import json
import os
import statistics
import sys


def human(n):
    if isinstance(n, str):
        return n
    for u, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f}{u}"
    return str(n)


def main(d):
    for np_ in (2, 4):
        torch_runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, f"torch_np{np_}_*.json")))]
        c_runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, f"c_np{np_}_*.json")))]
        if not torch_runs:
            continue
        c_best = {}
        for run in c_runs:
            for r in run["results"]:
                c_best.setdefault(r["size"], []).append(r["in_place"]["time"])
        # Every launch contributes its per-round best and median; the table takes the best of
        # the bests and the median of the medians.
        rows = {}
        for run in torch_runs:
            for r in run["results"]:
                key = (r["op"], r["bytes"])
                for b in ("chorus", "gloo", "compute"):
                    if r.get(b):
                        rows.setdefault(key, {}).setdefault(b, []).append((r[b]["best_us"], r[b]["median_us"]))
        print(f"\n## {np_} ranks: {len(torch_runs)} launches x 3 alternating rounds; times per call in us")
        print("| op | bytes | chorus best | chorus median | gloo best | gloo median | gloo/chorus (best) | gloo/chorus (median) | C library best / median | overhead (best) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for (op, nb), v in rows.items():
            ch = v.get("chorus", [])
            gl = v.get("gloo", [])
            cb = min(x[0] for x in ch) if ch else None
            cm = statistics.median(x[1] for x in ch) if ch else None
            gb = min(x[0] for x in gl) if gl else None
            gm = statistics.median(x[1] for x in gl) if gl else None
            cl = c_best.get(nb) if op == "all_reduce" else None
            step = op in ("ddp_step", "fsdp2_step")
            if step and v.get("compute"):
                cp = v["compute"]
                cpb = min(x[0] for x in cp)
                libcol = "compute only: %.0f / %.0f" % (cpb, statistics.median(x[1] for x in cp))
                if ch and gl:  # what communication adds to a step, best of each
                    over = "comm: chorus +%.0f, gloo +%.0f" % (cb - cpb, gb - cpb)
            f = lambda x: f"{x:.2f}" if x is not None else "n/a"  # noqa: E731
            ratio_b = f"{gb / cb:.1f}x" if cb and gb else "n/a"
            ratio_m = f"{gm / cm:.1f}x" if cm and gm else "n/a"
            if cl:
                lb, lm = min(cl), statistics.median(cl)
                libcol = f"{lb:.2f} / {lm:.2f}"
                over = f"+{cb - lb:.2f} us ({(cb - lb) / lb * 100:.0f}%)" if cb else "n/a"
            elif not step or not v.get("compute"):
                libcol, over = "", ""
            elif not (ch and gl):
                over = ""
            print(f"| {op} | {human(nb)} | {f(cb)} | {f(cm)} | {f(gb)} | {f(gm)} | {ratio_b} | {ratio_m} | {libcol} | {over} |")


if __name__ == "__main__":
    main(sys.argv[1])
