#!/usr/bin/python3
"""chorus-plot: bandwidth (or time) against message size from the -J documents of the Chorus
benchmark tools (tools/bench), drawn with matplotlib (Debian's python3-matplotlib, Agg backend: no
display needed). PNG, SVG or PDF, chosen by the output's extension.

One line per argument (a run, a library, an algorithm: several on one chart, the legend from
--label or the document), the ideal busbw (when the document has one: --intra-bw / --inter-bw /
--calibrate) as a dashed line, a log-2 size axis (8B, 1K, 1M, ...), a linear (or, with --logy,
logarithmic) y axis. An argument "r1.json,r2.json,r3.json" (repeated runs) draws one line through
the per-size medians; so do rows of one size within a file (-N cycles).

  chorus-plot a.json [b.json ...] -o busbw.svg [--title T] [--placement out|in] [--label L]...
              [--metric busbw|algbw|time] [--logy] [--no-ideal]
"""

import argparse
import json
import math
import os
import statistics
import sys

PROG = "chorus-plot"

# What --metric plots: the placement object's key, the y axis title, the legend's unit.
METRICS = {
    "busbw": ("bus_bw", "Bus bandwidth (GB/s", "GB/s"),
    "algbw": ("alg_bw", "Algorithm bandwidth (GB/s", "GB/s"),
    "time": ("time", "Time (us", "us"),
}
FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf"}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


class PlotError(Exception):
    """A problem with an input: reported as 'chorus-plot: <message>', exit status 1."""


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def size_label(nbytes):
    """8B, 512B, 1K, 32K, 1M, 1G: binary units, as the tools' -b / -e take them."""
    units = ["B", "K", "M", "G", "T", "P"]
    u = 0
    while nbytes >= 1024.0 and u < 5:
        nbytes /= 1024.0
        u += 1
    if abs(nbytes - round(nbytes)) < 1e-9:
        return "%.0f%s" % (nbytes, units[u])
    return "%.3g%s" % (nbytes, units[u])


def describe_key(row):
    key = "%s %s" % (row.get("type", ""), row.get("redop", ""))
    root = row.get("root")
    if is_number(root) and root >= 0:
        key += " root %d" % int(root)
    return key


def split_runs(arg):
    """'a.json,b.json,c.json' -> its files (a name that exists as it is stays whole)."""
    if os.path.exists(arg) or "," not in arg:
        return [arg]
    parts = [p for p in arg.split(",") if p]
    return parts or [arg]


class Series:
    def __init__(self):
        self.file = ""
        self.collective = None
        self.nranks = None
        self.choice = None      # "algorithm/protocol" when every plotted row shares one
        self.same_choice = True
        self.runs = 0
        self.label = ""
        self.sizes = []
        self.values = []
        self.ideal = None       # per size, when every size has one


def load_document(path, placement, metric_key, series, by_size):
    """Reads one -J document into by_size {size: ([values], [ideals])}. Rows of another (type,
    redop, root) than the first row's are left out (with a warning); sizes 0 are skipped (no place
    on a log axis)."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise PlotError("%s: %s" % (path, e.strerror or e))
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise PlotError("%s: not valid JSON: %s" % (path, e))
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise PlotError('%s: no "results" array (is it a chorus benchmark -J document?)' % path)
    collective = doc.get("collective") if isinstance(doc.get("collective"), str) else ""
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    nranks = int(config["nranks"]) if is_number(config.get("nranks")) else 0
    if not series.file:
        series.file, series.collective, series.nranks = path, collective, nranks
    else:  # a further run of the same series: differences make the title generic
        if collective != series.collective:
            series.collective = ""
        if nranks != series.nranks:
            series.nranks = 0
    key = "in_place" if placement == "in" else "out_of_place"
    selected = None
    skipped = {}
    for row in results:
        if not isinstance(row, dict):
            raise PlotError("%s: a result that is not an object" % path)
        k = describe_key(row)
        if selected is None:
            selected = k
        if k != selected:
            skipped[k] = skipped.get(k, 0) + 1
            continue
        p = row.get(key)
        size = row.get("size")
        value = p.get(metric_key) if isinstance(p, dict) else None
        if not is_number(size) or not is_number(value):
            raise PlotError('%s: a result without "size" or "%s.%s"' % (path, key, metric_key))
        if not size > 0:
            continue
        choice = "%s/%s" % (row.get("algorithm", ""), row.get("protocol", ""))
        if series.choice is None:
            series.choice = choice
        elif choice != series.choice:
            series.same_choice = False
        values, ideals = by_size.setdefault(float(size), ([], []))
        values.append(float(value))
        ideal = row.get("ideal")
        if is_number(ideal) and ideal > 0:
            ideals.append(float(ideal))
    for k, n in sorted(skipped.items()):
        print("%s: %s: plotting %s only; %d rows of %s left out" % (PROG, path, selected, n, k),
              file=sys.stderr)


def load_series(paths, placement, metric_key):
    """One series from one or more documents (repeated runs): per size, the median of every value
    (and ideal) found, whether from several -N cycles or several files."""
    s = Series()
    by_size = {}
    for path in paths:
        load_document(path, placement, metric_key, s, by_size)
    s.runs = len(paths)
    if not by_size:
        raise PlotError("%s: no results with a size above 0 to plot" % paths[0])
    ideal = []
    for size in sorted(by_size):
        values, ideals = by_size[size]
        s.sizes.append(size)
        s.values.append(statistics.median(values))
        ideal.append(statistics.median(ideals) if ideals else None)
    s.ideal = ideal if all(v is not None for v in ideal) else None
    c = s.choice
    if not s.same_choice or not c or c.startswith("/") or c.endswith("/"):
        s.choice = ""
    return s


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Draws bus bandwidth (or algorithm bandwidth, or time) against message size "
        "from the -J documents of the Chorus benchmark tools: one line per argument, the ideal "
        "busbw dashed when known. An argument a1.json,a2.json,a3.json (repeated runs) is one line "
        "through the per-size medians; so are rows of one size within a file (-N cycles). The "
        "output's extension picks the format: .svg, .png or .pdf.")
    ap.add_argument("files", nargs="*", metavar="FILE.json")
    ap.add_argument("-o", "--output", default="-",
                    help="the chart to write: .svg, .png or .pdf (default: SVG on standard output)")
    ap.add_argument("-t", "--title", help="the chart's title (default: the collective)")
    ap.add_argument("-p", "--placement", default="out",
                    help="out (out-of-place, default) or in (in-place) results")
    ap.add_argument("-l", "--label", action="append", default=[],
                    help='the legend label of the next file (in order; default: '
                    '"algorithm/protocol" when all its rows share one, else the file name)')
    ap.add_argument("-m", "--metric", default="busbw", choices=sorted(METRICS),
                    help="what the y axis shows: busbw (default), algbw or time (us)")
    ap.add_argument("--logy", action="store_true", help="a logarithmic y axis")
    ap.add_argument("--no-ideal", action="store_true", help="leave out the ideal busbw line")
    ap.add_argument("--dpi", type=int, default=120, help="PNG resolution (default 120)")
    args = ap.parse_intermixed_args(argv)
    aliases = {"out-of-place": "out", "in-place": "in"}
    args.placement = aliases.get(args.placement, args.placement)
    if args.placement not in ("out", "in"):
        ap.error("--placement must be 'out' or 'in', not '%s'" % args.placement)
    if not args.files:
        ap.error("no input files")
    if len(args.label) > len(args.files):
        ap.error("%d --label for %d files" % (len(args.label), len(args.files)))
    if args.output != "-":
        ext = os.path.splitext(args.output)[1].lower()
        if ext not in FORMATS:
            ap.error("--output must end in .svg, .png or .pdf, not '%s'" % args.output)
    return args


def build_series(args):
    metric_key = METRICS[args.metric][0]
    series = []
    for i, arg in enumerate(args.files):
        s = load_series(split_runs(arg), args.placement, metric_key)
        if i < len(args.label):
            s.label = args.label[i]
        elif s.choice:
            s.label = s.choice
        else:
            s.label = os.path.basename(s.file)
        series.append(s)
    # Labels that came out the same (two files with one algorithm each) get their file names.
    uses = {}
    for s in series:
        uses[s.label] = uses.get(s.label, 0) + 1
    for s in series[len(args.label):]:
        base = os.path.basename(s.file)
        if uses[s.label] > 1 and s.label != base:
            s.label += " (%s)" % base
        if s.runs > 1:
            s.label += ", median of %d runs" % s.runs
    return series


def default_title(series, metric):
    coll = series[0].collective
    nranks = series[0].nranks
    for s in series:
        if s.collective != coll:
            coll = ""
        if s.nranks != nranks:
            nranks = 0
    what = {"busbw": "bus bandwidth", "algbw": "algorithm bandwidth", "time": "time"}[metric]
    title = "%s: %s" % (coll or "Chorus", what)
    if nranks > 0:
        title += ", %d ranks" % nranks
    return title


def render(args, series, out):
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"   # text stays text in the SVG
    matplotlib.rcParams["pdf.fonttype"] = 42       # TrueType in the PDF
    matplotlib.rcParams["svg.hashsalt"] = "chorus-plot"  # reproducible ids
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FixedLocator, LogFormatter, NullFormatter

    _, axis_title, unit = METRICS[args.metric]
    fig, ax = plt.subplots(figsize=(10.5, 5.6))
    ax.set_xscale("log", base=2)
    if args.logy:
        ax.set_yscale("log")
        # Plain numbers (1, 2, 10, 100), not mathtext powers; minor ticks labelled when the range
        # is narrow, as matplotlib's default does.
        ax.yaxis.set_major_formatter(LogFormatter())
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))

    # The ideal (busbw only): one dashed line per distinct curve, in the colour of the first
    # series that has it.
    ideals = []  # [pts, color index, labels]
    if args.metric == "busbw" and not args.no_ideal:
        for i, s in enumerate(series):
            if s.ideal is None:
                continue
            pts = list(zip(s.sizes, s.ideal))
            for line in ideals:
                if line[0] == pts:
                    line[2].append(s.label)
                    break
            else:
                ideals.append([pts, i % len(COLORS), [s.label]])

    for i, s in enumerate(series):
        ax.plot(s.sizes, s.values, color=COLORS[i % len(COLORS)], linewidth=2, marker="o",
                markersize=4, label=s.label, gid="series-%d" % i)
    for n, (pts, color, labels) in enumerate(ideals):
        text = "ideal"
        if len(series) > 1:
            text += ": " + ", ".join(labels)
        if all(v == pts[0][1] for _, v in pts):
            text += " (%.3g %s)" % (pts[0][1], unit)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=COLORS[color], linewidth=1.5,
                linestyle=(0, (7, 5)), alpha=0.8, label=text, gid="ideal-%d" % n)

    # x: a tick every octave, a label every 1, 2, 5, 10 or 20 octaves from the smallest size, so
    # that a sweep of -b 8 -f 4 gets a label at each of its sizes.
    xs = [x for s in series for x in s.sizes]
    lo, hi = math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs)))
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    step = next((st for st in (1, 2, 5, 10, 20) if (hi - lo) / st <= 12), 20)
    major = [2.0 ** k for k in range(lo, hi + 1) if (k - lo) % step == 0]
    ax.set_xlim(2.0 ** lo, 2.0 ** hi)
    ax.xaxis.set_major_locator(FixedLocator(major))
    ax.set_xticklabels([size_label(v) for v in major])
    ax.xaxis.set_minor_locator(FixedLocator([2.0 ** k for k in range(lo, hi + 1)]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    if not args.logy:
        ax.set_ylim(bottom=0)
    ax.grid(True, which="major", color="#e3e3e3")
    ax.set_axisbelow(True)

    placement = "in-place" if args.placement == "in" else "out-of-place"
    ax.set_xlabel("Message size (bytes, log scale)")
    ax.set_ylabel("%s, %s)" % (axis_title, placement))
    ax.set_title(args.title if args.title is not None else default_title(series, args.metric),
                 fontweight="bold")
    # The legend sits right of the plot, so that it never hides a line.
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small")
    fmt = "svg" if args.output == "-" else FORMATS[os.path.splitext(args.output)[1].lower()]
    fig.savefig(out, format=fmt, bbox_inches="tight", dpi=args.dpi,
                metadata={"Date": None} if fmt in ("svg", "pdf") else None)
    plt.close(fig)


def main(argv):
    args = parse_args(argv)
    try:
        series = build_series(args)
    except PlotError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 1
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("%s: needs matplotlib (Debian: apt install python3-matplotlib)" % PROG,
              file=sys.stderr)
        return 1
    try:
        if args.output == "-":
            render(args, series, sys.stdout.buffer)
            sys.stdout.flush()
        else:
            render(args, series, args.output)
    except OSError as e:
        print("%s: cannot write %s: %s" % (PROG, args.output, e.strerror or e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
