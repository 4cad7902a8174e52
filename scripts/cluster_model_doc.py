#!/usr/bin/env python3
"""Markdown tables of the tuner's predictions for a described cluster at several link speeds.

Runs `chorus-tune --cluster SHAPE --link-gbps G --json ...` once per speed and prints, per
collective, one row per size: the algorithm chosen and the predicted bus bandwidth at each speed,
with the ideal (seed 001) in the header. docs/model.md's tables come from

    python3 scripts/cluster_model_doc.py --tune build/chorus-tune --cluster 16x8 --gbps 25,100

Extra arguments after `--` go to chorus-tune (e.g. `-- --link-us 10 --mem-gbs 20`).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from nccl_table import size_name


def run(tune, shape, gbps, extra):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.json")
        cmd = [tune, "--cluster", shape, "--link-gbps", str(gbps), "--json", path] + extra
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tune", default="build/chorus-tune")
    ap.add_argument("--cluster", default="16x8")
    ap.add_argument("--gbps", default="25,100")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    speeds = [float(s) for s in args.gbps.split(",")]
    runs = [run(args.tune, args.cluster, g, args.extra) for g in speeds]
    first = runs[0]
    print(
        f"{first['nodes']} nodes x {first['ranks_per_node']} ranks; per rank memory "
        f"{first['mem_gbs']:.2f} GB/s, node hand-off {first['node_hop_us']:.2f} us, network hop "
        f"{first['link_hop_us']:.2f} us; link "
        + ", ".join(f"{g:g} Gbit/s (ideal busbw {r['rows'][0]['ideal_busbw']:.2f} GB/s)"
                    for g, r in zip(speeds, runs))
        + "."
    )
    colls = []
    for row in first["rows"]:
        if row["collective"] not in colls:
            colls.append(row["collective"])
    # A collective whose table is the same as an earlier one's (Reduce as Broadcast, ReduceScatter
    # as AllGather) is named with it instead of printed again.
    tables = {}
    for coll in colls:
        rows = [[r for r in run_["rows"] if r["collective"] == coll] for run_ in runs]
        lines = []
        for i, base in enumerate(rows[0]):
            cells = [size_name(base["bytes"])]
            for per in rows:
                r = per[i]
                cells += [f"{r['algorithm']}/{r['protocol']}", f"{r['predicted_us']:.1f}",
                          f"{r['busbw']:.3f}"]
            lines.append("| " + " | ".join(cells) + " |")
        tables.setdefault("\n".join(lines), []).append(coll)
    head = "| size |" + "".join(f" {g:g} Gbit/s: choice | time (us) | busbw (GB/s) |"
                                for g in speeds)
    for body, same in tables.items():
        print(f"\n{', '.join(same)}" + (" (the same predictions):" if len(same) > 1 else ":") + "\n")
        print(head)
        print("|" + "---|" * (1 + 3 * len(speeds)))
        print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
