#!/usr/bin/env bash
# Efficiency across emulated clusters: each shape (NODESxRANKS) in network namespaces with links
# shaped to RATE (chorusrun --netns --link-rate), each collective from 16 MiB, busbw against seed
# 001's ideal with the link's nominal rate as I (the tools' eff% column), one JSON per run under
# OUT, and a markdown table of eff% (best of the sizes' rows, worst size) on stdout.
#
#   scripts/cluster_eff.sh [--build build] [--shapes "4x1 4x2 8x1 8x2"] [--rate 1gbit]
#                          [--colls "all_reduce all_gather reduce_scatter broadcast"]
#                          [--sizes "-b 16M -e 64M -f 2"] [--iters 3] [--mtu 1500] [--out DIR]
# Needs root and iproute2 (chorusrun --netns). The ideal's B (intra) is --intra-bw (default 3.67
# GB/s, chorus-tune's Simple bandwidth here); with one rank per node only I counts. --mtu sets
# the links' MTU (chorusrun --link-mtu; veth's default 1500 caps TCP's payload at 1448 of every
# 1514 bytes on the wire, 95.6% of the rate; 9000, jumbo frames, at 99.3%).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build shapes="4x1 4x2 8x1 8x2" rate=1gbit iters=3 out=build/cluster_eff
colls="all_reduce all_gather reduce_scatter broadcast" sizes="-b 16M -e 64M -f 2" intra=3.67
mtu=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --colls) colls=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --intra-bw) intra=$2; shift 2 ;;
    --mtu) mtu=(--link-mtu "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "cluster_eff: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$rate" in
  *gbit) inter=$(python3 -c "print(${rate%gbit} / 8)") ;;
  *mbit) inter=$(python3 -c "print(${rate%mbit} / 8000)") ;;
  *) echo "cluster_eff: --rate wants Ngbit or Nmbit" >&2; exit 2 ;;
esac
mkdir -p "$out"
echo "| shape | collective | eff% per size (out of place) | worst | model: predicted / measured time | run at |"
echo "| --- | --- | --- | --- | --- | --- |"
for shape in $shapes; do
  q=${shape%x*} p=${shape#*x}
  np=$((q * p))
  for coll in $colls; do
    json="$out/${coll}_${shape}_${rate}.json"
    log="$out/${coll}_${shape}_${rate}.log"
    # shellcheck disable=SC2086  # $sizes is a list of flags
    if ! timeout -k 10 900 "$build/chorusrun" --timeout 880 --netns --link-rate "$rate" "${mtu[@]}" \
        --nodes "$q" -np "$np" "$build/${coll}_perf" $sizes -n "$iters" -w 1 \
        --intra-bw "$intra" --inter-bw "$inter" -J "$json" >"$log" 2>&1; then
      echo "| $shape | $coll | failed: see $log | | | |"
      continue
    fi
    python3 - "$json" "$shape" "$coll" <<'EOF'
import json, sys, time
path, shape, coll = sys.argv[1:4]
with open(path) as f:
    doc = json.load(f)
rows = doc["results"]
effs, ratios = [], []
for r in rows:
    oop = r["out_of_place"]
    if r.get("ideal", 0) > 0:
        effs.append((int(r["size"]), 100.0 * oop["bus_bw"] / r["ideal"]))
    if r.get("predicted_time", 0) > 0 and oop["time"] > 0:
        ratios.append(r["predicted_time"] / oop["time"])
    if oop.get("nwrong", 0):
        print(f"| {shape} | {coll} | WRONG RESULTS at {r['size']} | | | |")
cells = ", ".join(f"{s >> 20} MiB {e:.1f}" for s, e in effs)
worst = min((e for _, e in effs), default=float("nan"))
model = ", ".join(f"{x:.2f}" for x in ratios)
print(f"| {shape} | {coll} | {cells} | {worst:.1f} | {model} | {time.strftime('%H:%M', time.gmtime())} UTC |")
EOF
  done
done
