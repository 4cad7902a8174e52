#!/usr/bin/env python3
"""Best and median over the rounds of scripts/cluster_compare.sh (its output folder).

Two markdown tables: per shape, collective and size, Chorus's efficiency against seed 001's ideal,
the model's predicted / measured time and the algorithms the tuner ran (the C tools' -J
documents); and per shape and size,
each torch op timed (all_reduce; --torch-ops) on "chorus" and "gloo" (chorus-torch-bench's
--json), gloo / chorus: all_reduce in ms, the others in us.

Usage: scripts/cluster_compare.py FOLDER [FROM: the smallest size shown, 16M]
"""
import glob
import json
import os
import re
import statistics
import sys

from nccl_table import size_arg, size_name


def main(folder, min_size):
    rounds = sorted(glob.glob(os.path.join(folder, "r*")))
    eff, model, torch, algos = {}, {}, {}, {}
    for r in rounds:
        for path in glob.glob(os.path.join(r, "*_*x*_*.json")):
            m = re.match(r"(.+)_(\d+x\d+)_[^_]+\.json$", os.path.basename(path))
            if not m or m.group(1) == "torch":
                continue
            coll, shape = m.group(1), m.group(2)
            with open(path) as f:
                for row in json.load(f)["results"]:
                    if int(row["size"]) < min_size:
                        continue
                    oop = row["out_of_place"]
                    key = (shape, coll, int(row["size"]))
                    algos.setdefault(key, set()).add(row.get("algorithm", "?"))
                    if row.get("ideal", 0) > 0:
                        eff.setdefault(key, []).append(100.0 * oop["bus_bw"] / row["ideal"])
                    if row.get("predicted_time", 0) > 0 and oop["time"] > 0:
                        model.setdefault(key, []).append(row["predicted_time"] / oop["time"])
        for path in glob.glob(os.path.join(r, "torch_*.json")):
            shape = os.path.basename(path)[len("torch_"):-len(".json")]
            with open(path) as f:
                for row in json.load(f)["results"]:
                    if int(row["bytes"]) < min_size:
                        continue
                    key = (shape, row.get("op", "all_reduce"), int(row["bytes"]))
                    for backend in ("chorus", "gloo"):
                        torch.setdefault(key + (backend,), []).append(row[backend]["best_us"])
    print(f"{len(rounds)} rounds\n")
    print("| shape | collective | size | eff% best | eff% median | predicted / measured (median) "
          "| algorithm |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for key in sorted(eff):
        shape, coll, size = key
        e = eff[key]
        p = statistics.median(model.get(key, [float("nan")]))
        print(f"| {shape} | {coll} | {size_name(size)} | {max(e):.1f} | {statistics.median(e):.1f} "
              f"| {p:.2f} | {', '.join(sorted(algos.get(key, [])))} |")
    for op in sorted({k[1] for k in torch}, key=lambda o: (o != "all_reduce", o)):
        unit, scale, fmt = ("ms", 1e3, ".1f") if op == "all_reduce" else ("us", 1.0, ".0f")
        print()
        print(f"| shape | {op} | chorus best / median ({unit}) | gloo best / median ({unit}) | "
              "gloo / chorus (best, median) |")
        print("| --- | --- | --- | --- | --- |")
        for shape, size in sorted({(k[0], k[2]) for k in torch if k[1] == op}):
            c = torch.get((shape, op, size, "chorus"), [])
            g = torch.get((shape, op, size, "gloo"), [])
            if not c or not g:
                continue
            cb, cm, gb, gm = min(c), statistics.median(c), min(g), statistics.median(g)
            print(f"| {shape} | {size_name(size)} | {cb / scale:{fmt}} / {cm / scale:{fmt}} | "
                  f"{gb / scale:{fmt}} / {gm / scale:{fmt}} | {gb / cb:.2f}x, {gm / cm:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/cluster_cmp",
                  size_arg(sys.argv[2]) if len(sys.argv) > 2 else 16 << 20))
