#!/usr/bin/env python3
"""Merges runs of `chorus-tune --reference FILE` size by size: each row's time at each size the
least of the files' (the fast state wherever one run saw it, as --runs K keeps within a run); an
in-place row's ratio (algorithm "inplace") the median of the files' (as --runs K keeps its passes').
The files must hold the same rows at the same sizes; the first file's comment lines are kept,
then NOTE as one more.

    scripts/fits_least.py --note "least of the 3 + 1 sweeps of two runs" A.inc B.inc > OUT.inc
"""
import argparse
import re
import statistics
import sys

ROW = re.compile(r'(\{"[^"]+", "[^"]+", "[^"]+", \d+, \d+, \d+, \d+,)\n \{([^}]*)\},\n \{([^}]*)\}\},')


def rows(path):
    text = open(path).read()
    comments = [l for l in text.splitlines() if l.startswith("//")]
    out = {}
    for m in ROW.finditer(text):
        out[m.group(1)] = (m.group(2), [[float(x)] for x in m.group(3).split(",")])
    return comments, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--note", default="")
    ap.add_argument("files", nargs="+")
    o = ap.parse_args()
    comments, merged = rows(o.files[0])
    order = list(merged)
    for path in o.files[1:]:
        _, other = rows(path)
        if set(other) != set(merged):
            sys.exit(f"fits_least: {path} holds other rows than {o.files[0]}")
        for key, (sizes, us) in other.items():
            us = [t[0] for t in us]
            if sizes != merged[key][0]:
                sys.exit(f"fits_least: {path}: other sizes in {key}")
            merged[key] = (sizes, [a + [b] for a, b in zip(merged[key][1], us)])
    print("\n".join(comments + ([f"// {o.note}"] if o.note else [])))
    for key in order:
        sizes, us = merged[key]
        if '"inplace"' in key:
            text = ", ".join(f"{statistics.median(t):.3f}" for t in us)
        else:
            text = ", ".join(f"{min(t):.4g}" for t in us)
        print(f"{key}\n {{{sizes}}},\n {{{text}}}}},")


if __name__ == "__main__":
    main()
