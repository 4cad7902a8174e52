#!/usr/bin/env python3
"""The tuner's predicted time against the measured one over several rounds (scripts/model_check.sh
writes the JSON: np<N>_<collective>_r<R>.json, each from build/<collective>_perf -J).

Usage: scripts/model_check.py FILE.json [FILE.json ...]
(or compare_peers.sh's DIR/chorus_<collective>_<R>.json where DIR's name ends in np<N>)
The model predicts an out-of-place call from chorus-tune's fits, and an in-place one from the same
scaled by its in-place ratio (predicted_time_in_place; a document without it: the out-of-place
prediction). Prints per rank count a markdown table: collective, size, the tuner's choice (every
one seen over the rounds), the predicted time, the out-of-place time median and best over the
rounds, predicted / measured (median), whether that is within 25%, and the in-place prediction
over the in-place time (median);
then a summary per rank count and collective (with how many sizes are within 25% of the best
time instead of the median, and of the median of the rounds this VM ran in its fast state), and
the totals. The state of each round: state_r<R>.txt beside the JSON (model_check.sh writes the
hand-off floor of handoff_bench there before the round; below FAST_FLOOR_US the fast state, where
the built-in fits were timed).
"""
import collections
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nccl_table import FAST_FLOOR_US, size_label  # noqa: E402

NAME = re.compile(r"np(\d+)_(\w+?)_r(\d+)\.json$")
# scripts/compare_peers.sh's Chorus documents: <out>/chorus_<collective>_<round>.json, the rank
# count in its out directory's name (device_check.sh: peers_np<N>).
PEERS = re.compile(r"np(\d+)/chorus_(\w+?)_(\d+)\.json$")


def round_states(paths):
    """{round: floor us} from the state_r<R>.txt files beside the JSON (none: {})."""
    states = {}
    for d in {os.path.dirname(os.path.abspath(p)) for p in paths}:
        for f in os.listdir(d):
            m = re.match(r"state_r(\d+)\.txt$", f)
            if m:
                try:
                    states[int(m.group(1))] = float(open(os.path.join(d, f)).read().split()[0])
                except (ValueError, IndexError):
                    pass
    return states


def main(paths):
    runs = collections.defaultdict(
        lambda: {"meas": [], "fast": [], "inpl": [], "pred": [], "ipred": [], "algo": set()})
    states = round_states(paths)
    if states:
        print("Rounds (hand-off floor, us; fast below %.2f): %s\n" % (FAST_FLOOR_US, ", ".join(
            "%d: %.3f %s" % (r, f, "fast" if f < FAST_FLOOR_US else "slow")
            for r, f in sorted(states.items()))))
    for path in paths:
        m = NAME.search(os.path.basename(path)) or PEERS.search(os.path.abspath(path))
        if not m:
            sys.exit(f"model_check: {path} is not named np<N>_<collective>_r<R>.json "
                     "or ..np<N>/chorus_<collective>_<R>.json")
        np_, coll = int(m.group(1)), m.group(2)
        fast = states.get(int(m.group(3)), 1.0) < FAST_FLOOR_US
        for r in json.load(open(path))["results"]:
            if r["size"] == 0:  # a rank's count of 0 (-b 8 on 3 or more ranks): no call to model
                continue
            row = runs[(np_, coll, r["size"])]
            row["meas"].append(r["out_of_place"]["time"])
            if fast:
                row["fast"].append(r["out_of_place"]["time"])
            row["inpl"].append(r["in_place"]["time"])
            if r.get("predicted_time"):
                row["pred"].append(r["predicted_time"])
                row["ipred"].append(r.get("predicted_time_in_place", r["predicted_time"]))
            row["algo"].add(f'{r["algorithm"]}/{r["protocol"]}/{r["nchannels"]}')
    summary = collections.defaultdict(lambda: [0, 0, [], 0, [], 0, 0])
    for np_ in sorted({k[0] for k in runs}):
        print(f"{np_} ranks\n")
        print("| collective | size | choice | predicted us | out of place us, median (best) "
              "| predicted / measured | within 25% | in place: predicted us | predicted / in place |")
        print("| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |")
        for (n, coll, size) in sorted(runs, key=lambda k: (k[1], k[2])):
            if n != np_:
                continue
            row = runs[(n, coll, size)]
            med, best = statistics.median(row["meas"]), min(row["meas"])
            algo = ", ".join(sorted(row["algo"]))
            if not row["pred"] or med <= 0:
                print(f"| {coll} | {size_label(size)} | {algo} | - | {med:.2f} ({best:.2f}) | - | - | - | - |")
                continue
            pred = statistics.median(row["pred"])
            ratio = pred / med
            ok = 0.75 <= ratio <= 1.25
            s = summary[(n, coll)]
            s[0] += ok
            s[1] += 1
            s[2].append(ratio)
            s[5] += 0.75 <= pred / best <= 1.25
            if row["fast"]:
                s[6] += 0.75 <= pred / statistics.median(row["fast"]) <= 1.25
            ipred = statistics.median(row["ipred"])
            inpl = ipred / statistics.median(row["inpl"])
            s[3] += 0.75 <= inpl <= 1.25
            s[4].append(inpl)
            print(f"| {coll} | {size_label(size)} | {algo} | {pred:.2f} | {med:.2f} ({best:.2f}) "
                  f"| {ratio:.2f} | {'yes' if ok else 'no'} | {ipred:.2f} | {inpl:.2f} |")
        print()
    anyFast = any(f < FAST_FLOOR_US for f in states.values())
    fastHead = "; of the fast rounds' median" if anyFast else ""
    print(f"| ranks | collective | out of place: sizes within 25% (of the best{fastHead}) "
          "| predicted / measured | in place: within 25% | predicted / measured |")
    print("| ---: | --- | ---: | --- | ---: | --- |")
    for (n, coll), (ok, total, ratios, iok, iratios, bok, fok) in sorted(summary.items()):
        extra = f"; {fok}" if anyFast else ""
        print(f"| {n} | {coll} | {ok} of {total} ({bok}{extra}) "
              f"| {min(ratios):.2f}-{max(ratios):.2f} "
              f"| {iok} of {total} | {min(iratios):.2f}-{max(iratios):.2f} |")
    total = [sum(v[i] for v in summary.values()) for i in (0, 5, 1, 6, 3)]
    print(f"\nOut of place within 25% of the median at {total[0]} of {total[2]} sizes, "
          f"of the best at {total[1]}" +
          (f", of the fast rounds' median at {total[3]}" if anyFast else "") +
          f"; in place within 25% of the median at {total[4]}.")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
