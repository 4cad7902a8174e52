#!/usr/bin/env bash
# Chorus against Gloo across emulated clusters, in separate launches interleaved round by round:
# per round and shape, scripts/cluster_eff.sh (the C tools, every collective, efficiency against
# seed 001's ideal and the model's predicted time), then chorus-torch-bench (all_reduce, or the
# --torch-ops, on the "chorus" and "gloo" torch backends, alternating, in one job). After R rounds,
# scripts/cluster_compare.py prints best and median per shape, collective and size from --from
# (16M: the goals count from 16 MiB; the default sweep starts at 4 MiB, which it leaves out).
#
#   scripts/cluster_compare.sh [--build build] [--rounds 5] [--shapes "4x1 4x2 8x1 8x2"]
#                              [--rate 1gbit] [--mtu 1500] [--out build/cluster_cmp]
#                              [--colls "all_reduce all_gather reduce_scatter broadcast"]
#                              [--sizes "-b 4M -e 64M -f 4"] [--from 16M]
#                              [--iters 3] [--torch-ops all_reduce] [--torch-budget 1]
# (--iters: the C tools' timed calls per size; --torch-budget: chorus-torch-bench's seconds per
# size and backend, which sets its calls.)
# Root and iproute2 (chorusrun --netns); the torch bench needs the build's torch backend.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build rounds=5 shapes="4x1 4x2 8x1 8x2" rate=1gbit out=build/cluster_cmp mtu=()
colls="all_reduce all_gather reduce_scatter broadcast" sizes="-b 4M -e 64M -f 4" from=16M
iters=3 torch_ops=all_reduce torch_budget=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --mtu) mtu=(--mtu "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --colls) colls=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --torch-ops) torch_ops=$2; shift 2 ;;
    --torch-budget) torch_budget=$2; shift 2 ;;
    *) echo "cluster_compare: unknown argument $1" >&2; exit 2 ;;
  esac
done
read -ra size_args <<<"$sizes"
rm -rf "$out"
for r in $(seq 1 "$rounds"); do
  for shape in $shapes; do
    q=${shape%x*} p=${shape#*x}
    echo "### round $r, $shape: chorus (C tools) $(date -u +%H:%M:%S)"
    scripts/cluster_eff.sh --build "$build" --shapes "$shape" --rate "$rate" "${mtu[@]}" \
      --colls "$colls" --sizes "$sizes" --iters "$iters" --out "$out/r$r" | tail -n +3
    echo "### round $r, $shape: chorus and gloo under torch $(date -u +%H:%M:%S)"
    timeout -k 10 600 "$build/chorusrun" --timeout 590 --netns --link-rate "$rate" \
      ${mtu[1]:+--link-mtu "${mtu[1]}"} --nodes "$q" \
      -np $((q * p)) scripts/netns_torch_rank.sh "$build/chorus-torch-bench" --ops "$torch_ops" \
      "${size_args[@]}" -r 1 --budget "$torch_budget" --json "$out/r$r/torch_$shape.json" \
      >"$out/r$r/torch_$shape.log" 2>&1 || echo "torch bench failed: $out/r$r/torch_$shape.log"
  done
done
[ -f scripts/cluster_compare.py ] && python3 scripts/cluster_compare.py "$out" "$from"
