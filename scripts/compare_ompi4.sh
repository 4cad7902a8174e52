#!/usr/bin/env bash
# Chorus against Open MPI for AllReduce, AllGather, ReduceScatter, Broadcast and Reduce on one node:
# separate launches interleaved round by round (per round and collective: Open MPI under
# `mpirun --bind-to core` (`--bind-to none --oversubscribe` when there are more ranks than
# cores), then Chorus under chorusrun with its default placement), both printing the nccl-tests
# table (tools/mpi/mpi_coll_perf.c -C <coll>, build/<coll>_perf), float32 sum. Per collective and
# size: the best and the median time of each over the rounds, and Open MPI's best / Chorus's
# best (> 1: Chorus faster).
#
# Usage: scripts/compare_ompi4.sh [options] [-- extra flags for both benchmarks]
#   --build DIR       Chorus build directory (build)
#   --rounds N        rounds (5)
#   --np N            ranks (2)
#   --load N          busy competitor processes during both libraries' runs (0)
#   --colls LIST      comma-separated subset of allreduce,allgather,reducescatter,broadcast,reduce
#                     (default: the first four)
#   --placement P     oop (out of place, default) or ip (in place) times
#   --sizes "-b 8 -e 128M -f 4"  the sweep (default 8 B .. 128 MiB, x4)
#   --iters "-n 20 -w 5"         iterations and warm-ups per size
#   --chorus-only     run Chorus alone (no Open MPI on this machine); the table then has no ratio
#   --netns QxP       across Q emulated nodes of P ranks (chorusrun --netns, root): Open MPI over
#                     TCP through scripts/netns_mpirun.sh, Chorus under chorusrun --netns; --np
#                     is then Q*P and Open MPI is not bound
#   --rate R          with --netns: the links' rate (1gbit; chorusrun --link-rate)
#   --chorus-flags "-R 1"  flags for Chorus's benchmark only (e.g. -R 1: registered buffers); the
#                     Chorus benchmark then also runs without them in every round, interleaved,
#                     and the table gains its columns ("Chorus plain") and the ratio to it
# Needs openmpi-bin and libopenmpi-dev (mpicc) unless --chorus-only.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/compare_common.sh
build=build rounds=5 np=2 load=0 colls=allreduce,allgather,reducescatter,broadcast
placement=oop sizes="-b 8 -e 128M -f 4" iters="-n 20 -w 5" chorusOnly=0 extra=() chorusFlags=
netns= rate=1gbit
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --colls) colls=$2; shift 2 ;;
    --placement) placement=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --chorus-only) chorusOnly=1; shift ;;
    --chorus-flags) chorusFlags=$2; shift 2 ;;
    --netns) netns=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "compare_ompi4: unknown option $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
[ -x "$build/chorusrun" ] && [ -x "$build/all_reduce_perf" ] || scripts/setup.sh "$build" || exit 1
mpibin=
if [ "$chorusOnly" = 0 ]; then
  command -v mpirun >/dev/null && mpibin=$(build_mpi_perf "$build") || {
    echo "compare_ompi4: needs Open MPI (openmpi-bin, libopenmpi-dev), or --chorus-only" >&2
    exit 1
  }
fi
# shellcheck disable=SC2206
args=($sizes $iters -c 1 "${extra[@]}")
bind=(--bind-to core)
[ "$np" -gt "$(nproc)" ] && bind=(--bind-to none)
# How each library is launched: mpirun / chorusrun on this node, or across emulated nodes.
ompiRun=(mpirun --allow-run-as-root --oversubscribe "${bind[@]}" -np "$np")
chorusRun=("$build/chorusrun" --no-prefix -np "$np")
if [ -n "$netns" ]; then
  q=${netns%x*} p=${netns#*x}
  np=$((q * p))
  net=(--netns --link-rate "$rate" --nodes "$q")
  ompiRun=("$build/chorusrun" --no-prefix "${net[@]}" -np "$q" scripts/netns_mpirun.sh "$p")
  chorusRun=("$build/chorusrun" --no-prefix "${net[@]}" -np "$np")
fi
declare -A chorusBin=([allreduce]=all_reduce_perf [allgather]=all_gather_perf
                      [reducescatter]=reduce_scatter_perf [broadcast]=broadcast_perf
                      [reduce]=reduce_perf)
out=$(mktemp -d /tmp/compare_ompi4.XXXXXX)
start_busy "$load"
where=${netns:+ on emulated nodes $netns ($rate)}
echo "### $(date -u +%FT%TZ) $(nproc) cores, $np ranks$where, $load busy processes," \
     "$rounds rounds, $placement times; files in $out"
[ -n "$mpibin" ] && echo "### Open MPI: $(mpirun --version | head -n 1):" \
  "${ompiRun[*]} $mpibin -C <coll> ${args[*]}"
# shellcheck disable=SC2206
cflags=($chorusFlags)
echo "### Chorus:   ${chorusRun[*]} $build/<coll>_perf ${args[*]} ${cflags[*]}"
[ -n "$chorusFlags" ] && echo "### Chorus plain: the same without $chorusFlags"

IFS=, read -r -a collList <<<"$colls"
for ((r = 0; r < rounds; r++)); do
  for c in "${collList[@]}"; do
    [ -n "${chorusBin[$c]:-}" ] || { echo "compare_ompi4: unknown collective $c" >&2; exit 2; }
    if [ -n "$mpibin" ]; then
      timeout 600 "${ompiRun[@]}" "$mpibin" -C "$c" "${args[@]}" >"$out/ompi_${c}_$r.txt" 2>&1 ||
        echo "round $r: Open MPI $c failed"
    fi
    if [ -n "$chorusFlags" ]; then
      timeout 600 "${chorusRun[@]}" "$build/${chorusBin[$c]}" "${args[@]}" \
        >"$out/plain_${c}_$r.txt" 2>&1 || echo "round $r: Chorus plain $c failed"
    fi
    timeout 600 "${chorusRun[@]}" "$build/${chorusBin[$c]}" "${args[@]}" \
      "${cflags[@]}" >"$out/chorus_${c}_$r.txt" 2>&1 || echo "round $r: Chorus $c failed"
  done
done
/usr/bin/python3 - "$out" "$rounds" "$placement" "$colls" <<'PY'
import os, statistics, sys
sys.path.insert(0, "scripts")
from nccl_table import IN_PLACE, OUT_OF_PLACE, size_label as size, times
out, rounds, placement, colls = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
col = OUT_OF_PLACE if placement == "oop" else IN_PLACE
table = lambda path: times(path, col)  # noqa: E731
plain = os.path.exists(f"{out}/plain_{colls[0]}_0.txt")
print("| collective | bytes | Open MPI best | Open MPI median | Chorus best | Chorus median |"
      " Open MPI / Chorus (best) |" + (" Chorus plain best | plain median | plain / Chorus (best) |"
                                       if plain else ""))
print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if plain else ""))
for c in colls:
    res = {lib: [table(f"{out}/{lib}_{c}_{r}.txt") for r in range(rounds)]
           for lib in ("ompi", "chorus", "plain")}
    sizes = sorted(set().union(*[t.keys() for t in res["chorus"]]))
    for s in sizes:
        o = [t[s] for t in res["ompi"] if s in t]
        ch = [t[s] for t in res["chorus"] if s in t]
        if not ch:
            continue
        ob = f"{min(o):.2f}" if o else "-"
        om = f"{statistics.median(o):.2f}" if o else "-"
        ratio = f"{min(o) / min(ch):.2f}" if o and min(ch) > 0 else "-"
        row = (f"| {c} | {size(s)} | {ob} | {om} | {min(ch):.2f} | {statistics.median(ch):.2f} |"
               f" {ratio} |")
        if plain:
            p = [t[s] for t in res["plain"] if s in t]
            row += (f" {min(p):.2f} | {statistics.median(p):.2f} | {min(p) / min(ch):.2f} |"
                    if p and min(ch) > 0 else " - | - | - |")
        print(row)
PY
