#!/usr/bin/env bash
# How tc's token bucket on the emulated links (chorusrun --link-burst) moves AllReduce's
# efficiency and the algorithm that wins at small sizes: per round, per burst, the tuner's choice
# and each algorithm that crosses nodes forced (CHORUS_ALGO), one launch of all_reduce_perf each,
# interleaved; then per burst, algorithm and size the best and median eff% and time (us) over the
# rounds, the algorithm the default ran, and the model's prediction over the measured time
# (median); then per algorithm how many sizes the model predicts within 25%.
#
#   scripts/cluster_burst.sh [--build build] [--rounds 5] [--shape 8x2] [--rate 1gbit]
#                            [--bursts "131072 262144 1048576"] [--algos "default ring tree hier"]
#                            [--sizes "-b 1M -e 4M -f 2"] [--iters "-n 3 -w 1"]
#                            [--coll all_reduce] [--np N] [--out build/cluster_burst]
# (--coll: the benchmark, build/<coll>_perf, all_reduce by default. --np: the ranks in all, which
# chorusrun spreads over the Q nodes of --shape QxP as evenly as it can, Q x P by default: --shape
# 3x2 --np 5 runs nodes of 2, 2 and 1 ranks. An --algos entry of the form
# NAME=VALUE[+NAME=VALUE] runs the tuner's choice with that environment instead, e.g.
# "default CHORUS_SOCKET_CC=system".)
# Root and iproute2 (chorusrun --netns).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build rounds=5 shape=8x2 rate=1gbit bursts="131072 262144 1048576"
algos="default ring tree hier" sizes="-b 1M -e 4M -f 2" iters="-n 3 -w 1" coll=all_reduce out=build/cluster_burst
np=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --bursts) bursts=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --coll) coll=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "cluster_burst: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$rate" in
  *gbit) inter=$(python3 -c "print(${rate%gbit} / 8)") ;;
  *mbit) inter=$(python3 -c "print(${rate%mbit} / 8000)") ;;
  *) echo "cluster_burst: --rate wants Ngbit or Nmbit" >&2; exit 2 ;;
esac
q=${shape%x*} p=${shape#*x}
np=${np:-$((q * p))}
read -r -a size_args <<<"$sizes"
read -r -a iter_args <<<"$iters"
mkdir -p "$out"
status=0
for ((r = 1; r <= rounds; r++)); do
  for burst in $bursts; do
    for algo in $algos; do
      algo_env=()
      if [[ "$algo" == *=* ]]; then
        IFS=+ read -r -a algo_env <<<"$algo"  # NAME=VALUE[+NAME=VALUE]: an environment instead
      elif [ "$algo" != default ]; then
        algo_env=(CHORUS_ALGO="$algo")
      fi
      f=$out/${shape}_${burst}_${algo}_r$r
      rc=0
      env "${algo_env[@]}" timeout -k 10 300 "$build/chorusrun" --timeout 280 --netns \
        --link-rate "$rate" --link-burst "$burst" --nodes "$q" -np "$np" \
        "$build/${coll}_perf" "${size_args[@]}" "${iter_args[@]}" --intra-bw 3.67 --inter-bw "$inter" \
        -J "$f.json" >"$f.log" 2>&1 || rc=$?
      echo "round $r, burst $burst, $algo: exit $rc ($(date -u +%H:%M:%S) UTC)"
      [ "$rc" -eq 0 ] || status=1
    done
  done
done
python3 - "$out" "$shape" "$rounds" "$bursts" "$algos" <<'EOF'
import json, os, statistics, sys
out, shape, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
bursts, algos = sys.argv[4].split(), sys.argv[5].split()
print(f"\n{shape}, {rounds} rounds: eff% and time best and median per size, the algorithms each "
      "ran, the model's predicted over the measured time (median)\n")
print("| burst | algorithm | " + " | ".join(["size", "eff% best", "eff% median", "us best",
                                              "us median", "ran", "predicted / measured"]) + " |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |")
summary, counts, medians = {}, {}, {}


def label(size):
    return (f"{size >> 20} MiB" if size >= 1 << 20 else
            f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B")


for burst in bursts:
    for algo in algos:
        rows = {}
        for r in range(1, rounds + 1):
            f = os.path.join(out, f"{shape}_{burst}_{algo}_r{r}.json")
            try:
                results = json.load(open(f))["results"]
            except (OSError, ValueError, KeyError):
                continue
            for x in results:
                counts[x["size"]] = x.get("count", 1)
                t = x["out_of_place"]["time"]
                rows.setdefault(x["size"], []).append(
                    (x.get("efficiency", float("nan")), x["algorithm"], x["predicted_time"] / t,
                     t))  # no efficiency where the nodes' ranks are uneven (no ideal)
        for size in sorted(rows):
            v = rows[size]
            effs = [e for e, _, _, _ in v]
            times = [t for _, _, _, t in v]
            ran = ", ".join(sorted({a for _, a, _, _ in v}))
            ratio = statistics.median(p for _, _, p, _ in v)
            eff = ("-", "-") if any(e != e for e in effs) else (
                f"{max(effs):.1f}", f"{statistics.median(effs):.1f}")
            print(f"| {int(burst) >> 10} KiB | {algo} | {label(size)} | {eff[0]} | "
                  f"{eff[1]} | {min(times):.1f} | "
                  f"{statistics.median(times):.1f} | {ran} | {ratio:.2f} |")
            medians.setdefault((burst, algo), {})[size] = (statistics.median(times), ran)
            if counts.get(size, 1) > 0:  # a call that moves nothing is left out of the summary
                summary.setdefault((burst, algo), []).append(ratio)
# The tuner's choice against the fastest algorithm forced, per burst and size (medians).
forced = [a for a in algos if a != "default"]
if "default" in algos and forced:
    print("\nThe tuner's choice against the fastest forced algorithm (median time, us)\n")
    print("| burst | size | default ran | default | fastest forced | its time | default / fastest |")
    print("| --- | ---: | --- | ---: | --- | ---: | ---: |")
    for burst in bursts:
        for size in sorted(medians.get((burst, "default"), {})):
            t, ran = medians[(burst, "default")][size]
            best = min(((medians.get((burst, a), {}).get(size, (float("inf"), ""))[0], a)
                        for a in forced))
            if best[0] == float("inf"):
                continue
            print(f"| {int(burst) >> 10} KiB | {label(size)} | {ran} | {t:.1f} | {best[1]} | "
                  f"{best[0]:.1f} | {t / best[0]:.2f} |")
print("\nPer algorithm: sizes whose predicted / measured (median) is within 25%, and its range "
      "(sizes whose calls move nothing left out)\n")
print("| burst | algorithm | sizes within 25% | predicted / measured |")
print("| --- | --- | ---: | --- |")
for (burst, algo), ratios in summary.items():
    within = sum(abs(x - 1) <= 0.25 for x in ratios)
    print(f"| {int(burst) >> 10} KiB | {algo} | {within} of {len(ratios)} | "
          f"{min(ratios):.2f}-{max(ratios):.2f} |")
EOF
exit $status
