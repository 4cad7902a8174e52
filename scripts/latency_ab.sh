#!/usr/bin/env bash
# Interleaved A/B latency comparison of all_reduce_perf builds (or environments), round by round:
#   scripts/latency_ab.sh ROUNDS "label=ENV... DIR" "label=ENV... DIR" ... -- all_reduce_perf args
# BENCH=broadcast_perf (or any <coll>_perf) and NP=4 change the benchmark and the rank count.
# Each variant is "label=VAR=value,VAR=value:BUILD_DIR" (the env part may be empty: "new=:build").
# Prints, per size, the best and the median out-of-place and in-place time (us) of each variant.
# BUSY=N runs N busy competitor processes during every run (BUSY_CPU=c pins them to core c).
# STATE=slow (or fast) starts each round only once handoff_bench (from the first variant's build)
# finds this VM in that state (its floor over 0.1 us, or under, as compare_peers.sh counts it;
# docs/performance.md, "Why the medians spread"), waiting up to STATE_WAIT seconds (120), and says
# each round's floors.
set -euo pipefail
source "$(dirname "$0")/compare_common.sh"
rounds=$1
shift
variants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done
shift
args=("$@")
out=$(mktemp -d)
start_busy "${BUSY:-0}" "${BUSY_CPU:-}"
inState() { awk -v f="$1" -v s="$STATE" 'BEGIN { exit !(f != "" && (s == "slow") == (f > 0.1)) }'; }
for ((r = 0; r < rounds; ++r)); do
  if [ -n "${STATE:-}" ]; then
    hb=${variants[0]#*=}; hb=${hb#*:}
    until=$((SECONDS + ${STATE_WAIT:-120}))
    f=$(handoff_floor "$hb")
    while ! inState "$f" && [ $SECONDS -lt $until ]; do sleep 0.5; f=$(handoff_floor "$hb"); done
    echo "round $r: floor $f us before, $( (inState "$f" && echo "$STATE") || echo "not $STATE: ran anyway")" >&2
  fi
  for v in "${variants[@]}"; do
    label=${v%%=*}; rest=${v#*=}; envs=${rest%%:*}; dir=${rest#*:}
    env ${envs//,/ } "$dir/chorusrun" -np "${NP:-2}" "$dir/${BENCH:-all_reduce_perf}" "${args[@]}" 2>&1 |
      awk -v l="$label" '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print l, $2, $7, $11 }' >>"$out/all"
  done
  if [ -n "${STATE:-}" ]; then echo "round $r: floor $(handoff_floor "$hb") us after" >&2; fi
done
/usr/bin/python3 - "$out/all" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(lambda: ([], []))
labels, sizes = [], []
for line in open(sys.argv[1]):
    l, s, a, b = line.split()
    s = int(s)
    if l not in labels: labels.append(l)
    if s not in sizes: sizes.append(s)
    d[(l, s)][0].append(float(a)); d[(l, s)][1].append(float(b))
print("%8s" % "bytes" + "".join(" | %-28s" % (l + " oop best/med, ip best/med") for l in labels))
for s in sizes:
    row = "%8d" % s
    for l in labels:
        o, i = d[(l, s)]
        row += " | %6.2f %6.2f  %6.2f %6.2f   " % (min(o), statistics.median(o), min(i), statistics.median(i))
    print(row)
print("(%d rounds; times in us)" % min(len(v[0]) for v in d.values()))
PY
rm -rf "$out"
