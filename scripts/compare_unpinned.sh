#!/usr/bin/env bash
# AllReduce of ranks that nothing placed, as torchrun, mpirun --bind-to none, srun or a job script
# start them: 2 ranks started by hand with the launcher variables (CHORUS_RANK, CHORUS_NRANKS,
# CHORUS_COMM_ID, CHORUS_SECRET), with Chorus's default placement (each binds to its share of the
# CPUs at init) and with CHORUS_BIND=none (left where the scheduler puts them), against the same
# benchmark under chorusrun (which pins), beside N busy processes. Separate launches interleaved
# round by round; per size the best and the median in-place time of each over the rounds.
# Usage: scripts/compare_unpinned.sh [build-dir (build)] [rounds (5)] [busy processes (1)]
#        [benchmark flags (-b 8 -e 4M -f 8 -n 100 -w 10)]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
load=${3:-1}
read -r -a args <<<"${4:--b 8 -e 4M -f 8 -n 100 -w 10}"
[ -x "$build/all_reduce_perf" ] && [ -x "$build/chorusrun" ] ||
  CHORUS_SETUP_TARGETS="chorusrun all_reduce_perf" scripts/setup.sh "$build" || exit 1
out=$(mktemp -d /tmp/compare_unpinned.XXXXXX)
pids=()
for ((i = 0; i < load; i++)); do
  /usr/bin/python3 -c "while True: pass" &
  pids+=($!)
done
trap '[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null' EXIT

by_hand() {  # by_hand OUTFILE [VAR=value...]: 2 ranks of all_reduce_perf started by hand
  local file=$1 port=$((20000 + RANDOM % 20000)) r rpids=()
  shift
  for r in 0 1; do
    env "$@" CHORUS_RANK=$r CHORUS_NRANKS=2 CHORUS_COMM_ID=127.0.0.1:$port \
      CHORUS_SECRET=0123456789abcdef0123456789abcdef timeout 300 "$build/all_reduce_perf" \
      "${args[@]}" >"$file.$r" 2>&1 &
    rpids+=($!)
  done
  for r in "${rpids[@]}"; do wait "$r" || echo "by hand ($*): a rank failed (see $file.*)"; done
  mv "$file.0" "$file"
}

echo "### $(date -u +%FT%TZ) $(nproc) cores, 2 ranks, $load busy processes, $rounds rounds; files in $out"
echo "### by hand:  CHORUS_RANK=r CHORUS_NRANKS=2 CHORUS_COMM_ID=... $build/all_reduce_perf ${args[*]}"
echo "### chorusrun: $build/chorusrun -np 2 $build/all_reduce_perf ${args[*]}"
for ((r = 0; r < rounds; r++)); do
  by_hand "$out/bound_$r.txt"
  by_hand "$out/none_$r.txt" CHORUS_BIND=none
  timeout 300 "$build/chorusrun" --no-prefix -np 2 "$build/all_reduce_perf" "${args[@]}" \
    >"$out/chorusrun_$r.txt" 2>&1 || echo "round $r: chorusrun failed"
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import sys
sys.path.insert(0, "scripts")
from nccl_table import IN_PLACE, best_median, times
out, rounds = sys.argv[1], int(sys.argv[2])
kinds = ("bound", "none", "chorusrun")
runs = {k: [times(f"{out}/{k}_{r}.txt", IN_PLACE) for r in range(rounds)] for k in kinds}
sizes = sorted({s for k in kinds for t in runs[k] for s in t})
print("in-place time per call, us: best / median over the rounds")
print(f"{'bytes':>9} | {'by hand (bound)':>17} | {'by hand, CHORUS_BIND=none':>25} | {'chorusrun':>17}")
for s in sizes:
    cells = [best_median([t[s] for t in runs[k] if s in t]) for k in kinds]
    print(f"{s:>9} | {cells[0]:>17} | {cells[1]:>25} | {cells[2]:>17}")
PY
