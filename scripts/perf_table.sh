#!/usr/bin/env bash
# AllReduce float32 sum on N local ranks: Chorus's automatic choice, every forced (algorithm,
# protocol, channels), and Open MPI (if mpirun and build/mpi_coll_perf exist), side by
# side in one session. Prints a markdown table of out-of-place times (us, median of R runs)
# with the best forced choice and auto/best.
#   scripts/perf_table.sh [N=2] [MAXBYTES=256M] [RUNS=3] [BUILD=build]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2}
MAX=${2:-256M}
RUNS=${3:-3}
B=${4:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

configs=("auto" "ring simple 1" "ring simple 2" "ring ll 1" "ring ll 2" "tree simple 1" "tree ll 1")
run_chorus() {  # name algo proto ch -> file with "size time" lines (median over runs)
  local name=$1 algo=$2 proto=$3 ch=$4
  for r in $(seq "$RUNS"); do
    if [ "$algo" = auto ]; then
      "$B/chorusrun" --no-prefix -np "$N" "$B/all_reduce_perf" -b 8 -e "$MAX" -f 4 -n 20 -w 5 -c 0
    else
      CHORUS_ALGO=$algo CHORUS_PROTO=$proto CHORUS_MIN_NCHANNELS=$ch CHORUS_MAX_NCHANNELS=$ch \
        "$B/chorusrun" --no-prefix -np "$N" "$B/all_reduce_perf" -b 8 -e "$MAX" -f 4 -n 20 -w 5 -c 0
    fi | awk '/^ *[0-9]/ {print $1, $6}' >"$tmp/$name.$r"
  done
  paste -d' ' "$tmp/$name".* | awk '{n=0; for (i=2;i<=NF;i+=2) v[++n]=$i+0; for (i=2;i<=n;i++) {x=v[i]; j=i-1; while (j>0 && v[j]>x) {v[j+1]=v[j]; j--} v[j+1]=x} print $1, v[int((n+1)/2)]}' >"$tmp/$name"
}
names=()
for c in "${configs[@]}"; do
  set -- $c
  name=$(echo "$c" | tr ' ' '_')
  if [ "$1" = auto ]; then run_chorus auto auto x 1; else run_chorus "$name" "$1" "$2" "$3"; fi
  names+=("$name")
done
if command -v mpirun >/dev/null && [ -x "$B/mpi_coll_perf" ]; then
  for r in $(seq "$RUNS"); do
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$N" "$B/mpi_coll_perf" \
      -b 8 -e "$MAX" -f 4 -n 20 -w 5 -c 0 2>/dev/null | awk '/^ *[0-9]/ {print $1, $6}' >"$tmp/ompi.$r"
  done
  paste -d' ' "$tmp"/ompi.* | awk '{n=0; for (i=2;i<=NF;i+=2) v[++n]=$i+0; for (i=2;i<=n;i++) {x=v[i]; j=i-1; while (j>0 && v[j]>x) {v[j+1]=v[j]; j--} v[j+1]=x} print $1, v[int((n+1)/2)]}' >"$tmp/ompi"
  names+=("ompi")
fi
printf '| bytes |'; for n in "${names[@]}"; do printf ' %s |' "$n"; done; printf ' best forced | auto / best |\n'
printf '|---|'; for n in "${names[@]}"; do printf -- '---|'; done; printf -- '---|---|\n'
awk -v names="${names[*]}" -v dir="$tmp" 'BEGIN {
  n = split(names, nm, " ");
  for (i = 1; i <= n; i++) { f = dir "/" nm[i]; while ((getline line < f) > 0) { split(line, a, " "); t[i, a[1]] = a[2]; if (i == 1) sizes[++ns] = a[1] } }
  for (s = 1; s <= ns; s++) {
    sz = sizes[s]; printf "| %s |", sz; best = 1e30; bn = "";
    for (i = 1; i <= n; i++) { printf " %s |", t[i, sz]; if (i > 1 && nm[i] != "ompi" && t[i, sz] + 0 < best) { best = t[i, sz] + 0; bn = nm[i] } }
    printf " %s |", bn; printf " %.2f |\n", (t[1, sz] + 0) / best;
  }
}'
