#!/usr/bin/env bash
# The tuner's model against the measured time on one node: per round, for each rank count and
# collective, one launch of its tool (chorusrun -np N <coll>_perf -J: every row's choice and the
# model's predicted time beside the measured one), rounds interleaved; then
# scripts/model_check.py prints, per rank count, collective and size, the tuner's choice, the
# predicted time, the median (and best) measured time over the rounds, and their ratio; before
# each round handoff_bench's floor tells the VM's state (state_r<R>.txt: fast or slow).
#
#   scripts/model_check.sh [--build build] [--np "2 4"] [--rounds 5]
#                          [--colls "all_reduce all_gather reduce_scatter broadcast reduce"]
#                          [--sizes "-b 8 -e 32M -f 4"] [--iters "-n 20 -w 5"] [--out DIR]
#                          [--launch "chorusrun"|"hand"]
# --launch hand starts the ranks as a user's own launcher would (the launcher variables,
# unpinned) instead of chorusrun, which pins.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/compare_common.sh
build=build nps="2 4" rounds=5 out=build/model_check launch=chorusrun
colls="all_reduce all_gather reduce_scatter broadcast reduce" sizes="-b 8 -e 32M -f 4"
iters="-n 20 -w 5"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --np) nps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --colls) colls=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --launch) launch=$2; shift 2 ;;
    *) echo "model_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
rm -f "$out"/*.json "$out"/state_r*.txt
# shellcheck disable=SC2086  # the size and iteration flags split on purpose
for r in $(seq 1 "$rounds"); do
  # The VM's state for this round (model_check.py: fast or slow): the hand-off floor, best of 3.
  handoff_floor "$build" >"$out/state_r$r.txt" || true
  for np in $nps; do
    for c in $colls; do
      json="$out/np${np}_${c}_r${r}.json"
      if [ "$launch" = hand ]; then
        for ((i = 0; i < np; i++)); do
          RANK=$i WORLD_SIZE=$np LOCAL_RANK=$i MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29600 + r)) \
            "$build/${c}_perf" $sizes $iters -J "$json" >/dev/null &
        done
        wait
      else
        "$build/chorusrun" -np "$np" "$build/${c}_perf" $sizes $iters -J "$json" >/dev/null
      fi
    done
  done
  echo "model_check: round $r of $rounds done ($(date -u +%H:%M:%S) UTC)" >&2
done
python3 scripts/model_check.py "$out"/*.json
