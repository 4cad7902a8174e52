#!/usr/bin/env bash
# FSDP2's step with its buffers in registered memory against the default comms and gloo:
# `launches` separate 2-rank launches of chorus-torch-bench --ops fsdp2 --registered, each
# alternating, round by round, the step on the default chorus group (default comms), on a chorus
# group of its own with chorus.torch.use_registered_buffers ("chorus-reg"), on a gloo group, and
# the same step without communication ("compute"). Prints, per column, the best of every launch's
# best round and the median of the launches' medians (times per step in us).
# Usage: scripts/compare_fsdp_registered.sh [build-dir] [launches (5)] [rounds (5)] [--load N]
# --load N runs N busy competitor processes (a spinning loop each) during every launch.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/compare_common.sh
build=${1:-build}
launches=${2:-5}
rounds=${3:-5}
load=0
[ "${4:-}" = "--load" ] && load=${5:-1}
out=$(mktemp -d /tmp/compare_fsdp_registered.XXXXXX)
[ -x "$build/chorus-torch-bench" ] || { echo "no $build/chorus-torch-bench (scripts/setup.sh)"; exit 1; }
start_busy "$load"
echo "### $(date -u +%FT%TZ) $(nproc) cores, load $load, $launches launches x $rounds rounds, results in $out"
for ((l = 0; l < launches; l++)); do
  "$build/chorus-torch-bench" -np 2 --ops fsdp2 --registered -r "$rounds" \
    --json "$out/fsdp_$l.json" >"$out/fsdp_$l.txt" 2>&1 || echo "launch #$l failed (see $out)"
done
/usr/bin/python3 - "$out" <<'EOF'
import glob, json, os, statistics, sys
runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(sys.argv[1], "fsdp_*.json")))]
cols = ("chorus", "chorus-reg", "gloo", "compute")
got = {c: [] for c in cols}
for run in runs:
    for r in run["results"]:
        if r["op"] == "fsdp2_step":
            for c in cols:
                if r.get(c):
                    got[c].append((r[c]["best_us"], r[c]["median_us"]))
print(f"{len(runs)} launches; FSDP2 step of the benchmark MLP, 2 ranks, us per step")
print("| | " + " | ".join(cols) + " |")
print("|---|" + "---:|" * len(cols))
best = {c: min(b for b, _ in v) for c, v in got.items() if v}
med = {c: statistics.median(m for _, m in v) for c, v in got.items() if v}
print("| best | " + " | ".join(f"{best[c]:.0f}" if c in best else "n/a" for c in cols) + " |")
print("| median | " + " | ".join(f"{med[c]:.0f}" if c in med else "n/a" for c in cols) + " |")
if {"chorus", "chorus-reg", "compute"} <= best.keys():
    for what, d in (("best", best), ("median", med)):
        comm = {c: d[c] - d["compute"] for c in ("chorus", "chorus-reg", "gloo") if c in d}
        print(f"communication ({what}): " + ", ".join(f"{c} +{v:.0f}" for c, v in comm.items())
              + f"; chorus-reg/chorus step {d['chorus-reg'] / d['chorus']:.2f}")
EOF
