#!/usr/bin/env python3
"""perf_page: writes docs/performance.md and its charts (docs/perf/*.png) from ONE run of
scripts/perf_page.sh, which measures every comparison once and keeps every launch's output in a
run directory. This file is the generator's two steps:

    python3 scripts/perf_page.py machine [--ccl-venv DIR]     # the machine, as JSON (stdout)
    python3 scripts/perf_page.py render RUN_DIR [--page docs/performance.md] [--plots docs/perf]
                                 [--plot build/chorus-plot] [--dpi 80] [--no-plots]

`render` reads RUN_DIR (layout below), converts the peers' printed nccl-tests tables into the -J
documents chorus-plot reads (beside them: LIB_COLL_ROUND.json), renders the tables (best and
median over the rounds per size, the ratios), draws one chart per comparison with chorus-plot
(bus bandwidth against size, one line per library through the per-size medians of its runs) and
writes the page from scripts/perf_page.template.md. Nothing in the page is typed by hand but
the template's text: every figure comes from RUN_DIR.

RUN_DIR (written by scripts/perf_page.sh):
    run.json                 {"command", "rounds", "quick", "sizes", "np"}
    machine.json             this file's `machine` output, taken at the start
    SECTION/stamp.start      "ISO-time load1 load5 load15", SECTION/stamp.end likewise
    SECTION/command          the exact command the section ran
    peers/                   scripts/compare_peers.sh --out: LIB_COLL_ROUND.txt (LIB: ompi,
                             mpich, ccl, chorus), chorus_COLL_ROUND.json
    torch/torch.json         chorus-torch-bench --json
    numpy/*.txt              tools/py_bench/np_allreduce.py's RESULT lines (compare_numpy.sh)
A section whose directory is missing is reported as not measured in this run.

tests/perf_page_fixture/ is a tiny RUN_DIR; ctest's Docs.perf_page renders it (no MPI needed).
"""

import argparse
import glob
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from nccl_table import (floor_is_fast, same_state_ratios, size_arg, size_label,  # noqa: E402
                        size_name)

COLLS = [("allreduce", "AllReduce"), ("allgather", "AllGather"),
         ("reducescatter", "ReduceScatter"), ("broadcast", "Broadcast")]
PEERS = [("ompi", "Open MPI"), ("mpich", "MPICH"), ("ccl", "oneCCL")]
# busbw = algbw * factor(n), as the nccl-tests tables compute it.
BUS = {"allreduce": lambda n: 2.0 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
       "reducescatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


# ------------------------------------------------------------------------------------ machine
def run_out(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(ccl_venv=None):
    """What the method paragraph says about the machine and the peers' versions."""
    m = {"cpu": "", "cores": os.cpu_count(), "mem_gib": 0, "os": "", "kernel": platform.release(),
         "compiler": "", "loadavg": open("/proc/loadavg").read().split()[:3]}
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            m["cpu"] = line.split(":", 1)[1].strip()
            break
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            m["mem_gib"] = round(int(line.split()[1]) / (1 << 20))
    try:
        osr = dict(line.rstrip().split("=", 1) for line in open("/etc/os-release") if "=" in line)
        m["os"] = osr.get("PRETTY_NAME", "").strip('"')
    except OSError:
        pass
    # lscpu's caches ("L1d cache: 96 KiB (2 instances)"): getconf's L3 is wrong on some VMs.
    m["caches"] = re.findall(r"^(L1d|L2|L3) cache:\s*(.+?)\s*$", run_out(["lscpu"]), re.M)
    m["compiler"] = (run_out(["g++", "--version"]).splitlines() or [""])[0]
    m["commit"] = run_out(["git", "-C", ROOT, "log", "-1", "--format=%h (%cs)"])
    if run_out(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "include", "tools",
                "python", "CMakeLists.txt"]):
        m["commit"] += " with uncommitted changes"
    v = {}
    o = run_out(["mpirun.openmpi", "--version"])
    if o:
        v["Open MPI"] = o.splitlines()[0].split()[-1]
    o = run_out(["mpichversion"])
    g = re.search(r"MPICH Version:\s*(\S+)", o)
    if g:
        v["MPICH"] = g.group(1)
    if ccl_venv:
        cfg = os.path.join(ccl_venv, "include", "oneapi", "ccl", "config.h")
        if os.path.exists(cfg):
            d = dict(re.findall(r"#define\s+CCL_(MAJOR|MINOR|UPDATE)_VERSION\s+(\d+)",
                                open(cfg).read()))
            if len(d) == 3:
                v["oneCCL"] = "%s.%s.%s" % (d["MAJOR"], d["MINOR"], d["UPDATE"])
    m["versions"] = v
    return m


# ------------------------------------------------------------------------------- reading a run
def read_table(path):
    """The float rows of a printed nccl-tests table: [{size, count, ..., out_of_place, in_place}]
    in the -J documents' shape; also the library line ('# prog: Open MPI v4.1.4 ...')."""
    rows, lib = [], ""
    if not os.path.exists(path):
        return rows, lib
    for line in open(path, errors="replace"):
        f = line.split()
        if line.startswith("# ") and not lib and ": " in line and "perf" in f[1]:
            lib = line.split(": ", 1)[1].strip()
        if len(f) >= 13 and f[0].isdigit() and f[2] == "float":
            try:
                def place(i):
                    return {"time": float(f[i]), "alg_bw": float(f[i + 1]),
                            "bus_bw": float(f[i + 2]),
                            "nwrong": 0 if f[i + 3] == "N/A" else int(float(f[i + 3]))}
                rows.append({"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3],
                             "root": int(f[4]), "out_of_place": place(5), "in_place": place(9)})
            except ValueError:
                pass
    return rows, lib


def table_to_json(txt, coll, libname, nranks):
    """Writes TXT's table as a -J document beside it (same name, .json); returns its path, or
    None when the table has no rows (a failed launch)."""
    rows, lib = read_table(txt)
    if not rows:
        return None
    doc = {"collective": coll, "library": {"name": libname, "version": lib},
           "converted_from": os.path.basename(txt), "config": {"nranks": nranks},
           "results": rows}
    out = txt[:-4] + ".json"
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    return out


def json_times(path, placement):
    """{size: time in us} of a -J document."""
    try:
        doc = json.load(open(path))
    except (OSError, ValueError):
        return {}
    return {r["size"]: r[placement]["time"] for r in doc.get("results", [])
            if isinstance(r.get(placement), dict) and r["size"] > 0}


def stamp(run, section, which):
    try:
        f = open(os.path.join(run, section, "stamp." + which)).read().split()
        return f[0], f[1:4]
    except (OSError, IndexError):
        return "", []


def hhmm(iso):
    return iso[11:16] if len(iso) >= 16 else "?"


def section_when(run, section):
    """'2026-11-28 04:01-04:22 UTC, load average 3.1 / 2.8 / 2.5 at the start, 4.0 / ... at the
    end' for a section's stamps."""
    s, ls = stamp(run, section, "start")
    e, le = stamp(run, section, "end")
    if not s:
        return "time not recorded"
    text = "%s %s-%s UTC" % (s[:10], hhmm(s), hhmm(e))
    if ls:
        text += "; load average (1, 5, 15 min) %s at the start" % ", ".join(ls)
        if le:
            text += ", %s at the end" % ", ".join(le)
    return text


def command(run, section):
    try:
        return open(os.path.join(run, section, "command")).read().strip()
    except OSError:
        return ""


# ------------------------------------------------------------------------------------ formats
def t_fmt(us):
    if us < 10:
        return "%.2f" % us
    if us < 100:
        return "%.1f" % us
    return "%.0f" % us


def cell(v):
    return "%s / %s" % (t_fmt(min(v)), t_fmt(statistics.median(v))) if v else "-"


def r_fmt(r):
    return "%.2f" % r if r < 10 else "%.1f" % r if r < 100 else "%.0f" % r


def span(rs):
    """'1.15-5.17x' (or '2.00x' when all equal) of a list of ratios."""
    if not rs:
        return "-"
    lo, hi = r_fmt(min(rs)), r_fmt(max(rs))
    return (lo if lo == hi else "%s-%s" % (lo, hi)) + "x"


def plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def para(text):
    """A generated paragraph wrapped as the hand-written ones are (98 columns)."""
    return textwrap.fill(text, width=98, break_long_words=False, break_on_hyphens=False)


# -------------------------------------------------------------------------------------- plots
def plot(plot_prog, series, out, title, placement, dpi):
    """series: [(label, [json paths])]; one chorus-plot call; returns True when drawn."""
    if not plot_prog or not series:
        return False
    cmd = [sys.executable, plot_prog] if plot_prog.endswith(".py") else [plot_prog]
    for label, paths in series:
        cmd += [",".join(paths), "--label", label]
    cmd += ["-o", out, "--title", title, "--placement", placement, "--dpi", str(dpi),
            "--no-ideal"]
    env = dict(os.environ, MPLCONFIGDIR=os.environ.get("MPLCONFIGDIR", "/tmp/perf_page.mpl"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print("perf_page: chorus-plot failed for %s: %s" % (out, r.stderr.strip()),
              file=sys.stderr)
        return False
    return True


# ------------------------------------------------------------------------------------ sections
class Page:
    def __init__(self, args):
        self.args = args
        self.run = args.run
        self.meta = json.load(open(os.path.join(self.run, "run.json")))
        self.machine = json.load(open(os.path.join(self.run, "machine.json")))
        self.np = int(self.meta.get("np", 2))
        self.rounds = int(self.meta.get("rounds", 1))
        self.summary = []      # rows of the summary table
        self.plots_rel = args.plots_url or os.path.relpath(
            args.plots, os.path.dirname(os.path.abspath(args.page)))

    def chart(self, name, series, title, placement):
        """Draws the chart (unless --no-plots) and links it where the PNG exists."""
        out = os.path.join(self.args.plots, name + ".png")
        if not self.args.no_plots:
            os.makedirs(self.args.plots, exist_ok=True)
            plot(self.args.plot, series, out, title, placement, self.args.dpi)
        if os.path.exists(out):
            return "![%s](%s/%s.png)\n\n" % (title, self.plots_rel, name)
        return ""

    def peers(self):
        d = os.path.join(self.run, "peers")
        if not os.path.isdir(d):
            return "Not measured in this run (`--no-peers`).\n"
        libs = PEERS + [("chorus", "Chorus")]
        present = [(l, n) for l, n in PEERS if glob.glob(os.path.join(d, l + "_*.txt"))]
        missing = [n for l, n in PEERS if (l, n) not in present]
        versions = self.machine.get("versions", {})
        text = ("%s; %s interleaved (per round and collective: %s, then Chorus), %d ranks."
                % (section_when(self.run, "peers"), plural(self.rounds, "round"),
                   ", ".join(n for _, n in present) or "no peer", self.np))
        if missing:
            text += " Left out (not installed here): %s." % ", ".join(missing)
        text += " Versions: %s; Chorus at %s." % (
            ", ".join("%s %s" % (n, versions.get(n, "?")) for _, n in present) or "-",
            self.machine.get("commit", "this tree"))
        text += (" Times in µs, best / median over the rounds, float32 sum, out of place but "
                 "Broadcast in place (the peers' Broadcast has one buffer). Ratio columns: the "
                 "best peer's best / Chorus's best, and the lowest peer median / Chorus's median "
                 "(> 1: Chorus faster). Charts: bus bandwidth, one line per library through the "
                 "per-size medians of its rounds.")
        out = [para(text) + "\n"]
        out.append("```sh\n%s\n```\n" % command(self.run, "peers"))
        for coll, title in COLLS:
            placement = "in_place" if coll == "broadcast" else "out_of_place"
            series, res, rounds = [], {}, {}
            for lib, name in libs:
                paths = []
                for r in range(self.rounds):
                    txt = os.path.join(d, "%s_%s_%d.txt" % (lib, coll, r))
                    js = txt[:-4] + ".json"
                    if lib != "chorus" or not os.path.exists(js):
                        js = table_to_json(txt, coll, name, self.np) if os.path.exists(txt) \
                            else None
                    if js:
                        paths.append(js)
                        rounds.setdefault(lib, {})[r] = json_times(js, placement)
                if paths:
                    series.append((name, paths))
                    res[lib] = [json_times(p, placement) for p in paths]
            if "chorus" not in res:
                continue
            sizes = sorted(set().union(*[t.keys() for t in res["chorus"]]))
            cols = [(l, n) for l, n in PEERS if l in res]
            def fast(lib, r, coll=coll):
                return floor_is_fast(os.path.join(d, "floor_%s_%s_%d.txt" % (lib, coll, r)))

            states = any(fast("chorus", r) is not None for r in range(self.rounds))
            head = "| bytes | " + " | ".join(n for _, n in cols) + \
                " | Chorus | best peer / Chorus, best | median |" + \
                (" same state: median (rounds) |" if states else "")
            rows = [head, "|---:|" + "---:|" * (len(cols) + 3 + states)]
            best_r, med_r, behind, state_r = [], [], [], []
            for s in sizes:
                ch = [t[s] for t in res["chorus"] if s in t]
                pv = {l: [t[s] for t in res[l] if s in t] for l, _ in cols}
                b = min(((min(v), n) for (l, n) in cols for v in [pv[l]] if v), default=None)
                m = min(((statistics.median(v), n) for (l, n) in cols for v in [pv[l]] if v),
                        default=None)
                rb = rm = "-"
                if b and ch and min(ch) > 0:
                    x = b[0] / min(ch)
                    best_r.append(x)
                    if x < 0.995:   # below 1.00 as printed
                        behind.append((s, x, b[1]))
                    rb = "%s (%s)" % (r_fmt(x), b[1])
                if m and ch and statistics.median(ch) > 0:
                    y = m[0] / statistics.median(ch)
                    med_r.append(y)
                    rm = "%s (%s)" % (r_fmt(y), m[1])
                # Per round, the fastest peer's time / Chorus's, where both launches began in the
                # same state of this VM (a fast peer launch beside a slow Chorus one, or the
                # reverse, says nothing of either library).
                same = same_state_ratios(rounds, [l for l, _ in cols], s, fast)
                rs = ""
                if states:
                    rs = " %s |" % ("%s (%d)" % (r_fmt(statistics.median(same)), len(same))
                                     if same else "-")
                    if same:
                        state_r.append(statistics.median(same))
                rows.append("| %s | " % size_label(s) + " | ".join(cell(pv[l]) for l, _ in cols)
                            + " | %s | %s | %s |" % (cell(ch), rb, rm) + rs)
            label = title + (" (in place)" if coll == "broadcast" else "")
            out.append("### %s\n" % label)
            out.append(self.chart(coll, series, "%s, %d ranks: bus bandwidth, median of %s"
                                  % (label, self.np, plural(self.rounds, "round")),
                                  "in" if coll == "broadcast" else "out"))
            out.append("\n".join(rows) + "\n")
            beh = "; ".join("%s %sx (%s)" % (size_name(s), r_fmt(x), n) for s, x, n in behind)
            if behind:
                out.append(para("Chorus behind (best against best): %s." % beh) + "\n")
            self.summary.append(
                ("%s against the best of %s" % (label, ", ".join(n for _, n in cols))
                 if cols else label,
                 span(best_r), span(med_r), span(state_r) if state_r else "-",
                 "%s-%s" % (size_name(sizes[0]), size_name(sizes[-1])),
                 beh or "none", "#" + re.sub(r"[^a-z0-9 -]", "", label.lower()).replace(" ", "-")))
        return "\n".join(out)

    def torch(self):
        path = os.path.join(self.run, "torch", "torch.json")
        if not os.path.exists(path):
            return "Not measured in this run.\n"
        doc = json.load(open(path))
        world = int(doc.get("world", self.np))
        out = [para("%s; torch %s, %d ranks, %s alternating chorus and gloo inside one job "
                    "(a gloo group beside the default chorus group), each round timing as many "
                    "calls as fill 50 ms (the slowest rank's mean); µs per call, best / median "
                    "over the rounds." % (section_when(self.run, "torch"), doc.get("torch", "?"),
                                          world, plural(int(doc.get("rounds", 1)), "round"))),
               "\n```sh\n%s\n```\n" % command(self.run, "torch")]
        ar = [r for r in doc.get("results", []) if r.get("op") == "all_reduce"
              and r.get("chorus") and r.get("gloo")]
        rows = ["| bytes | chorus | gloo | gloo / chorus, best | median |",
                "|---:|---:|---:|---:|---:|"]
        best_r, med_r, series = [], [], []
        for r in ar:
            c, g = r["chorus"], r["gloo"]
            x, y = g["best_us"] / c["best_us"], g["median_us"] / c["median_us"]
            best_r.append(x)
            med_r.append(y)
            rows.append("| %s | %s / %s | %s / %s | %s | %s |" % (
                size_label(r["bytes"]), t_fmt(c["best_us"]), t_fmt(c["median_us"]),
                t_fmt(g["best_us"]), t_fmt(g["median_us"]), r_fmt(x), r_fmt(y)))
        if ar:
            for b, name in (("chorus", "chorus"), ("gloo", "gloo")):
                js = os.path.join(self.run, "torch", "all_reduce_%s.json" % b)
                res = []
                for r in ar:
                    t = r[b]["median_us"]
                    alg = r["bytes"] / (t * 1e3)
                    res.append({"size": r["bytes"], "count": r["bytes"] // 4, "type": "float",
                                "redop": "sum", "root": -1, "out_of_place": {
                                    "time": t, "alg_bw": alg,
                                    "bus_bw": alg * BUS["allreduce"](world), "nwrong": 0}})
                json.dump({"collective": "torch all_reduce", "config": {"nranks": world},
                           "converted_from": "torch.json (medians)", "results": res},
                          open(js, "w"), indent=1)
                series.append((name, [js]))
            out.append("### `all_reduce`\n")
            out.append(self.chart("torch_all_reduce", series, "torch all_reduce, %d ranks: bus "
                                  "bandwidth (medians)" % world, "out"))
            out.append("\n".join(rows) + "\n")
            self.summary.append(("torch `all_reduce` against gloo (torch %s)"
                                 % doc.get("torch", "?"),
                                 span(best_r), span(med_r), "one job",
                                 "%s-%s" % (size_name(ar[0]["bytes"]), size_name(ar[-1]["bytes"])),
                                 "; ".join("%s %sx" % (size_name(r["bytes"]), r_fmt(x))
                                           for r, x in zip(ar, best_r) if x < 0.995) or "none",
                                 "#pytorch-against-gloo"))
            small = ar[0]
            out.append(para("The smallest `all_reduce` (%s) takes %s µs best with chorus, %s µs "
                            "with gloo." % (size_name(small["bytes"]),
                                            t_fmt(small["chorus"]["best_us"]),
                                            t_fmt(small["gloo"]["best_us"]))))
        steps = [r for r in doc.get("results", []) if r.get("op", "").endswith("_step")]
        if steps:
            out.append("\n" + para("**Training steps** (`ddp_step`: DDP of an MLP "
                                   "256-1024-1024-10, batch 32; `fsdp2_step`: the same MLP, each "
                                   "Linear and the root `fully_shard`-ed; `compute`: the step "
                                   "without communication), µs per step, best / median:") + "\n")
            out.append("| step | chorus | gloo | compute | gloo / chorus, best | median |")
            out.append("| --- | ---: | ---: | ---: | ---: | ---: |")
            for r in steps:
                c, g, k = r.get("chorus"), r.get("gloo"), r.get("compute")
                ratio = (r_fmt(g["best_us"] / c["best_us"]), r_fmt(g["median_us"] / c["median_us"])
                         ) if c and g else ("-", "-")
                out.append("| %s | %s | %s | %s | %s | %s |" % (
                    r["op"], *[("%s / %s" % (t_fmt(v["best_us"]), t_fmt(v["median_us"])))
                               if v else "-" for v in (c, g, k)], *ratio))
                if c and g:
                    x = g["best_us"] / c["best_us"]
                    self.summary.append(("torch `%s` against gloo" % r["op"],
                                         ratio[0] + "x", ratio[1] + "x", "one job", "one step",
                                         "yes, %sx" % r_fmt(x) if x < 0.995 else "no",
                                         "#pytorch-against-gloo"))
        return "\n".join(out) + "\n"

    def numpy(self):
        d = os.path.join(self.run, "numpy")
        files = glob.glob(os.path.join(d, "*.txt"))
        if not files:
            return None
        t = {}
        for f in files:
            for line in open(f, errors="replace"):
                w = line.split()
                if len(w) == 5 and w[0] == "RESULT":
                    t.setdefault((w[1], int(w[2]), w[3]), []).append(float(w[4]))
        name = {"mpi": "mpi4py on Open MPI", "mpich": "mpi4py on MPICH"}
        peers = [p for p in ("mpi", "mpich") if any(k[0] == p for k in t)]
        if "chorus" not in {k[0] for k in t} or not peers:
            return None
        vers = self.machine.get("versions", {})
        out = [para("%s; Chorus's numpy API (`Comm.all_reduce`) against mpi4py %s on %s, the same "
                    "interpreter and numpy, `tools/py_bench/np_allreduce.py`, float32 sum; %s of "
                    "each, interleaved; per size the best / median over the launches of each "
                    "launch's best of 3 timed loops (the slowest rank's mean per call), µs; "
                    "ratios: the peer's time / Chorus's, of the bests and of the medians."
                    % (section_when(self.run, "numpy"), vers.get("mpi4py", "4.1.2"),
                       " and ".join("%s %s" % (n, vers.get(n, "?")) for p, n in
                                    (("mpi", "Open MPI"), ("mpich", "MPICH")) if p in peers),
                       plural(self.rounds, "launch").replace("launchs", "launches"))),
               "\n```sh\n%s\n```\n" % command(self.run, "numpy")]
        head = "| bytes | mode | Chorus | " + " | ".join(name[p] for p in peers) + " | " + \
            " | ".join("%s / Chorus, best, median" % name[p].split(" on ")[1] for p in peers) + " |"
        out += [head, "|---:|---|" + "---:|" * (1 + 2 * len(peers))]
        rs, med, behind = [], [], []
        for b, mode in sorted({(k[1], k[2]) for k in t}, key=lambda k: (k[0], k[1] != "oop")):
            c = t.get(("chorus", b, mode), [])
            row = [size_label(b), "out of place" if mode == "oop" else "in place", cell(c)]
            ratios = []
            for p in peers:
                v = t.get((p, b, mode), [])
                row.append(cell(v))
                if v and c:
                    x, y = min(v) / min(c), statistics.median(v) / statistics.median(c)
                    rs.append(x)
                    med.append(y)
                    if x < 0.995:
                        behind.append("%s %s %sx (%s)" % (size_name(b), row[1], r_fmt(x),
                                                          name[p].split(" on ")[1]))
                    ratios.append("%s, %s" % (r_fmt(x), r_fmt(y)))
                else:
                    ratios.append("-")
            out.append("| " + " | ".join(row + ratios) + " |")
        allb = sorted({k[1] for k in t})
        self.summary.append(("numpy `all_reduce` against mpi4py on %s" % " and on ".join(
                                 name[p].split(" on ")[1] for p in peers),
                             span(rs), span(med), "-", "%s-%s, in and out of place"
                             % (size_name(allb[0]), size_name(allb[-1])),
                             "; ".join(behind) or "none", "#numpy-against-mpi4py"))
        return "\n".join(out) + "\n"

    @staticmethod
    def load_note(ls, le, cores):
        """What the load says about the run (the 1-minute averages at its start and end; the
        longer ones still count what ran before it): quiet, or shared with other work."""
        loads = []
        for x in list(ls)[:1] + list(le)[:1]:
            try:
                loads.append(float(x))
            except (TypeError, ValueError):
                pass
        if loads and cores and max(loads) <= cores + 0.5:
            return ("The machine was quiet (no other work ran: a load average up to %d, the "
                    "number of cores, is the benchmarks' own ranks), but this VM's speed still "
                    "changes for seconds at a time: read the ratios of libraries measured in the "
                    "same rounds, and the medians beside the bests." % cores)
        return ("**Other work ran before or during this run** (a 1-minute load average above "
                "%d, the number of cores, which the benchmarks' own ranks reach: work that ran "
                "just before still counts in it at the start, work beside the run made the "
                "benchmarks wait), so absolute times may be noisy and some sizes catch a bad "
                "moment: read the ratios of libraries measured in the same rounds, and the "
                "medians beside the bests." % cores)

    def method(self):
        m, q = self.machine, self.meta
        cache = ["%s %s" % (n, v) for n, v in m.get("caches", [])]
        s, ls = stamp(self.run, "all", "start")
        e, le = stamp(self.run, "all", "end")
        f = dict(zip(q.get("sizes", "").split()[::2], q.get("sizes", "").split()[1::2]))
        sweep = ""
        if {"-b", "-e", "-f"} <= f.keys():
            sweep = " Sizes: `%s` (from %s, x%s per step, up to %s)." % (
                q["sizes"], size_name(size_arg(f["-b"])), f["-f"], size_name(size_arg(f["-e"])))
        vers = ", ".join("%s %s" % kv for kv in m.get("versions", {}).items())
        machine = (
            "The machine: %s, %d cores visible (%s), %d GiB, %s, kernel %s, %s; Chorus at commit "
            "%s, built RelWithDebInfo by `scripts/setup.sh`; the peers: %s. The run: %s %s-%s "
            "UTC, %s%s; load average (1, 5, 15 min) %s at the start and %s at the end. %s"
            % (m.get("cpu", "?"), m.get("cores", 0), ", ".join(cache) or "caches unknown",
               m.get("mem_gib", 0), m.get("os", "?"), m.get("kernel", "?"),
               m.get("compiler", "?"), m.get("commit", "?"), vers or "none installed",
               s[:10], hhmm(s), hhmm(e), plural(int(q.get("rounds", 1)), "round"),
               " (**--quick**: a development run, not a measurement to quote)"
               if q.get("quick") else "", ", ".join(ls) or "?", ", ".join(le) or "?",
               self.load_note(ls, le, m.get("cores", 0))))
        method = (
            "Method: each comparison runs the libraries as **separate launches interleaved "
            "round by round** (per round: each peer, then Chorus), and reports per size the "
            "**best** and the **median** over the rounds; ratios are the peer's time / Chorus's "
            "(> 1: Chorus faster). The C benchmarks print nccl-tests' table (time per call in "
            "µs, float32 sum, %s, every result checked: `-c 1`); Chorus's also writes its -J "
            "document (full precision), and the peers' tables, whose times have 3 decimals "
            "below 10 µs, are converted to that document for chorus-plot. "
            "2 ranks, pinned one per core by each launcher (chorusrun's default; `mpirun "
            "--bind-to core`; `mpiexec -bind-to core`; Intel MPI's default).%s"
            % (q.get("iters", "20 timed calls after 5 warm-ups"), sweep))
        return para(machine) + "\n\n" + para(method)

    def summary_table(self):
        rows = ["| comparison | ratio of the bests | ratio of the medians | same state | sizes | "
                "Chorus behind (best against best) |", "| --- | --- | --- | --- | --- | --- |"]
        for what, b, m, st, sizes, behind, anchor in self.summary:
            rows.append("| [%s](%s) | %s | %s | %s | %s | %s |"
                        % (what, anchor, b, m, st, sizes, behind))
        return "\n".join(rows) + "\n"


def render(args):
    if args.run.endswith(".tar.xz"):   # a run kept as docs/perf/run.tar.xz
        tmp = tempfile.mkdtemp(prefix="perf_page.")
        try:
            with tarfile.open(args.run) as t:
                t.extractall(tmp, filter="data") if hasattr(tarfile, "data_filter") \
                    else t.extractall(tmp)
            args.run = tmp
            return render(args)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    page = Page(args)
    if os.path.isdir(args.plots) and not args.no_plots:
        for f in glob.glob(os.path.join(args.plots, "*.png")):
            os.remove(f)   # only this run's charts stay
    parts = {"PEERS": page.peers(), "TORCH": page.torch()}
    np_text = page.numpy()
    parts["NUMPY"] = np_text or (
        para("Not measured in this run (`scripts/perf_page.sh --numpy` adds it where mpi4py can "
             "be installed). By hand, the same interleaving:") +
        "\n\n```sh\nscripts/compare_numpy.sh build 5 64M\n```\n")
    parts["METHOD"] = page.method()
    parts["SUMMARY"] = page.summary_table()
    parts["COMMAND"] = page.meta.get("command", "scripts/perf_page.sh")
    parts["DATE"] = stamp(args.run, "all", "start")[0][:10]
    text = open(args.template, encoding="utf-8").read()
    text = re.sub(r"<!--.*?-->\n?", "", text, flags=re.S)  # the template's own notes
    for k, v in parts.items():
        text = text.replace("@%s@" % k, v.rstrip("\n"))
    left = re.findall(r"@[A-Z]+@", text)
    if left:
        sys.exit("perf_page: the template has unknown placeholders %s" % left)
    text = re.sub(r"\n{3,}", "\n\n", text)
    with open(args.page, "w", encoding="utf-8") as f:
        f.write(text)
    print("perf_page: wrote %s (%d lines)%s" % (args.page, text.count("\n"), "" if args.no_plots
          else " and %d charts in %s" % (len(glob.glob(os.path.join(args.plots, "*.png"))),
                                         args.plots)))


def main():
    ap = argparse.ArgumentParser(description="docs/performance.md from one perf_page.sh run")
    sub = ap.add_subparsers(dest="cmd", required=True)
    mp = sub.add_parser("machine", help="the machine and the peers' versions, as JSON")
    mp.add_argument("--ccl-venv")
    rp = sub.add_parser("render", help="write the page and its charts from a run directory")
    rp.add_argument("run", help="the run directory, or its archive (RUN.tar.xz)")
    rp.add_argument("--page", default=os.path.join(ROOT, "docs", "performance.md"))
    rp.add_argument("--plots", default=os.path.join(ROOT, "docs", "perf"))
    rp.add_argument("--template", default=os.path.join(ROOT, "scripts", "perf_page.template.md"))
    rp.add_argument("--plot", default=os.path.join(ROOT, "tools", "plot", "chorus_plot.py"),
                    help="chorus-plot (build/chorus-plot or tools/plot/chorus_plot.py)")
    rp.add_argument("--plots-url", help="how the page links the charts (default: the path from "
                    "the page to --plots)")
    rp.add_argument("--dpi", type=int, default=80)
    rp.add_argument("--no-plots", action="store_true",
                    help="draw no chart; link those already in --plots")
    ar = sub.add_parser("archive", help="keep a run's measurements (not what render derives) "
                        "as a .tar.xz beside the charts")
    ar.add_argument("run")
    ar.add_argument("out")
    a = ap.parse_args()
    if a.cmd == "archive":
        derived = re.compile(r"^peers/(ompi|mpich|ccl)_.*\.json$|^torch/all_reduce_.*\.json$")
        with tarfile.open(a.out, "w:xz") as t:
            for d, _, files in sorted(os.walk(a.run)):
                for f in sorted(files):
                    rel = os.path.relpath(os.path.join(d, f), a.run)
                    if derived.match(rel):
                        continue
                    if rel.startswith("peers/chorus_") and rel.endswith(".json"):
                        # the job's environment: its one-time CHORUS_SECRET stays out
                        doc = json.load(open(os.path.join(d, f)))
                        doc["env"] = {k: v for k, v in doc.get("env", {}).items()
                                      if "SECRET" not in k}
                        data = json.dumps(doc, indent=1).encode()
                        info = tarfile.TarInfo(rel)
                        info.size, info.mtime = len(data), int(os.path.getmtime(
                            os.path.join(d, f)))
                        t.addfile(info, io.BytesIO(data))
                    else:
                        t.add(os.path.join(d, f), rel)
        print("perf_page: kept %s (%d KiB)" % (a.out, os.path.getsize(a.out) // 1024))
        return 0
    if a.cmd == "machine":
        json.dump(machine(a.ccl_venv), sys.stdout, indent=1)
        print()
        return 0
    render(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
