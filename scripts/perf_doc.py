#!/usr/bin/env python3
"""Checks the reference pages' shape: every figure in README.md's Performance section appears in
docs/performance.md (so the README cannot quote a run the reference page does not hold), and
README.md and the reference pages (performance, reliability, scaling, model) stay within their
length limits.

    python3 scripts/perf_doc.py          # exit 0, or 1 listing each problem

Run by ctest (Docs.performance). A figure is a number or range followed by x, %, µs or ms
("1.15-5.2x", "3.00 µs", "98.6%"); it must occur verbatim in docs/performance.md.
"""

import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LIMITS = {"README.md": 250, "docs/performance.md": 400, "docs/reliability.md": 400,
          "docs/scaling.md": 400, "docs/model.md": 400}
FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?:x\b|%| µs\b| ms\b)")


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def readme_performance(text):
    """The README's "## Performance" section (up to the next "## ")."""
    m = re.search(r"^## Performance\n(.*?)(?=^## )", text, re.S | re.M)
    return m.group(1) if m else ""


def problems():
    out = []
    for rel, limit in LIMITS.items():
        n = read(rel).count("\n")
        if n > limit:
            out.append(f"{rel}: {n} lines, the limit is {limit}")
    section = readme_performance(read("README.md"))
    if not section:
        out.append("README.md: no '## Performance' section")
    perf = read("docs/performance.md")
    for fig in sorted(set(FIGURE.findall(section))):
        if fig not in perf:
            out.append(f"README.md, Performance: figure {fig!r} is not in docs/performance.md")
    return out


def main():
    p = problems()
    for line in p:
        print(line)
    if not p:
        print("perf_doc: README's figures are in docs/performance.md; page lengths within limits")
    return 1 if p else 0


if __name__ == "__main__":
    sys.exit(main())
