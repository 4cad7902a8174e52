#!/usr/bin/env bash
# How much a torch all_reduce's time moves from one torchrun launch to the next: N launches per
# backend, alternating "chorus" and "gloo", each one torchrun job of NP ranks on this node (no
# pinning by the launcher; Chorus binds its ranks at init unless CHORUS_BIND=none), timing
# all_reduce of SIZE (float32) with chorus-torch-bench: per launch the best and the median of
# 10 rounds, then per backend the range of the launches' medians.
#
#   scripts/torch_launch_spread.sh [--build build] [--launches 10] [--np 4] [--size 25M]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build launches=10 np=4 size=25M
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --launches) launches=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    *) echo "torch_launch_spread: unknown argument $1" >&2; exit 2 ;;
  esac
done
py=$(sed -n 's/.* exec \([^ ]*\) .*/\1/p' "$build/chorus-torch-bench")  # the build's Python
export PYTHONPATH="$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}"
out=$(mktemp)
echo "# $(date -u +%FT%TZ), $(nproc) cores, $np ranks by torchrun, all_reduce $size," \
     "$launches launches"
for i in $(seq 1 "$launches"); do
  for b in chorus gloo; do
    "$py" -m torch.distributed.run --standalone --nproc-per-node "$np" \
      tools/torch_bench/chorus_torch_bench.py --ops all_reduce -b "$size" -e "$size" -r 10 \
      --budget 0.01 --backends "$b" 2>&1 | awk -v i="$i" -v b="$b" -v s="$size" \
      '$1 == s { printf "%s %s %s %s\n", i, b, $2, $3 }' | tee -a "$out"
  done
done
echo "| backend | launch medians, min-max (ms) | median of the launches' medians (ms) |"
echo "| --- | --- | --- |"
python3 - "$out" <<'PY'
import statistics, sys
med = {}
for line in open(sys.argv[1]):
    _, b, _, m = line.split()
    med.setdefault(b, []).append(float(m) / 1000)
for b, v in med.items():
    print(f"| {b} | {min(v):.1f}-{max(v):.1f} | {statistics.median(v):.1f} |")
PY
rm -f "$out"
