#!/usr/bin/env bash
# AllReduce of Chorus against Open MPI with N busy competitor processes on the cores (the
# training case: communication beside computation), or none. Separate launches interleaved
# round by round (Open MPI under mpirun --bind-to core, then Chorus under chorusrun with its
# default placement); per size the best and the median in-place time of each, and the ratio.
# Usage: scripts/compare_load.sh [build-dir] [rounds (5)] [busy processes (1)] [ranks (2)]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
load=${3:-1}
np=${4:-2}
args=(-b 8 -e 2M -f 16 -n 200 -w 10)
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  { echo "compare_load: needs openmpi-bin and libopenmpi-dev" >&2; exit 1; }
[ -x "$build/all_reduce_perf" ] || scripts/setup.sh "$build" || exit 1
source scripts/compare_common.sh
mpibin=$(build_mpi_perf "$build") || exit 1
out=$(mktemp -d /tmp/compare_load.XXXXXX)
start_busy "$load"
bind=core
[ "$np" -gt "$(nproc)" ] && bind=none
ompi=(mpirun --allow-run-as-root --oversubscribe --bind-to "$bind" -np "$np" "$mpibin" "${args[@]}")
chorus=("$build/chorusrun" --no-prefix -np "$np" "$build/all_reduce_perf" "${args[@]}")
echo "### $(date -u +%FT%TZ) $np ranks, $load busy processes, $rounds rounds; files in $out"
echo "### Open MPI: ${ompi[*]}"
echo "### Chorus:   ${chorus[*]}"
for ((r = 0; r < rounds; r++)); do
  timeout 300 "${ompi[@]}" >"$out/ompi_$r.txt" 2>&1 || echo "round $r: Open MPI failed"
  timeout 300 "${chorus[@]}" >"$out/chorus_$r.txt" 2>&1 || echo "round $r: Chorus failed"
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import statistics, sys
sys.path.insert(0, "scripts")
from nccl_table import IN_PLACE, times
out, rounds = sys.argv[1], int(sys.argv[2])
table = lambda path: times(path, IN_PLACE)  # noqa: E731
res = {lib: [table(f"{out}/{lib}_{r}.txt") for r in range(rounds)] for lib in ("ompi", "chorus")}
sizes = sorted(set().union(*[t.keys() for t in res["chorus"]]))
print("| bytes | Open MPI best | Open MPI median | Chorus best | Chorus median | Open MPI / Chorus (best) | (median) |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for s in sizes:
    o = [t[s] for t in res["ompi"] if s in t]
    c = [t[s] for t in res["chorus"] if s in t]
    if not o or not c:
        continue
    print(f"| {s} | {min(o):.2f} | {statistics.median(o):.2f} | {min(c):.2f} | "
          f"{statistics.median(c):.2f} | {min(o) / min(c):.2f} | "
          f"{statistics.median(o) / statistics.median(c):.2f} |")
PY
