#!/usr/bin/env bash
# The torch backend against gloo, and against the C library's own time, measured the way
# docs/performance.md asks: separate launches interleaved round by round (chorus-torch-bench,
# which itself alternates chorus and gloo rounds inside each job, then all_reduce_perf of the
# same sizes), for 2 and 4 local ranks; prints best and median per size over every round of
# every launch.
# Usage: scripts/compare_torch.sh [build-dir] [launches (5)] [max bytes (256M)] [--load N]
# --load N runs N busy competitor processes (a spinning loop each) during every launch.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/compare_common.sh
build=${1:-build}
launches=${2:-5}
maxb=${3:-256M}
load=0
[ "${4:-}" = "--load" ] && load=${5:-1}
out=$(mktemp -d /tmp/compare_torch.XXXXXX)
[ -x "$build/chorus-torch-bench" ] || scripts/setup.sh "$build" || exit 1
start_busy "$load"
echo "### $(date -u +%FT%TZ) $(nproc) cores, load $load, $launches launches, results in $out"
for np in 2 4; do
  for ((l = 0; l < launches; l++)); do
    "$build/chorus-torch-bench" -np "$np" -e "$maxb" -r 3 --json "$out/torch_np${np}_$l.json" \
      >"$out/torch_np${np}_$l.txt" 2>&1 || echo "launch torch np=$np #$l failed (see $out)"
    "$build/chorusrun" -np "$np" --bind-to none "$build/all_reduce_perf" -b 8 -e "$maxb" -f 4 \
      -n 20 -w 5 -J "$out/c_np${np}_$l.json" >/dev/null 2>&1 ||
      echo "launch all_reduce_perf np=$np #$l failed"
  done
done
/usr/bin/python3 tools/torch_bench/summarize.py "$out"
