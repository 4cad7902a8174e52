#!/usr/bin/env python3
"""The tuner's predicted time against the measured one, per size, from the JSON of a Chorus
benchmark (build/<coll>_perf -J FILE: each row's algorithm, predicted_time and
predicted_time_in_place, asked of chorusTunerChoice / chorusTunerChoiceInPlace after the row's
calls, and its out-of-place and in-place times).

Usage: scripts/predicted_vs_measured.py FILE.json [FILE.json ...]
Prints one markdown table per file: size, algorithm, predicted us and measured us (each the mean
of the out-of-place and the in-place one), measured / predicted, and whether that is within 25%.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nccl_table import size_label  # noqa: E402


def rows(path):
    doc = json.load(open(path))
    for r in doc["results"]:
        pred = r.get("predicted_time")
        if pred:
            pred = (pred + r.get("predicted_time_in_place", pred)) / 2
        meas = (r["out_of_place"]["time"] + r["in_place"]["time"]) / 2
        yield r["size"], f'{r["algorithm"]}/{r["protocol"]}/{r["nchannels"]}', pred, meas


def main(paths):
    for path in paths:
        print(f"{os.path.basename(path)}\n")
        print("| size | algo/proto/channels | predicted us | measured us | measured / predicted | within 25% |")
        print("| --- | --- | --- | --- | --- | --- |")
        for size, algo, pred, meas in rows(path):
            if not pred:
                print(f"| {size_label(size)} | {algo} | - | {meas:.1f} | - | - |")
                continue
            ratio = meas / pred
            ok = "yes" if 0.75 <= ratio <= 1.25 else "no"
            print(f"| {size_label(size)} | {algo} | {pred:.1f} | {meas:.1f} | {ratio:.2f} | {ok} |")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
