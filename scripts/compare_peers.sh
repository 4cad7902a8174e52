#!/usr/bin/env bash
# Chorus against Open MPI, MPICH and Intel's oneCCL for AllReduce, AllGather, ReduceScatter and
# Broadcast on one node: separate launches interleaved launch by launch (per round and
# collective: Open MPI, MPICH, oneCCL, then Chorus), every one printing the nccl-tests table,
# float32 sum:
#   Open MPI  mpirun.openmpi --bind-to core         tools/mpi/mpi_coll_perf.c (mpicc.openmpi)
#   MPICH     mpiexec.mpich -bind-to core           the same source (mpicc.mpich)
#   oneCCL    Intel MPI's mpiexec (impi-rt wheel)   tools/ccl/ccl_coll_perf.cc on oneCCL's C++ API
#   Chorus    build/chorusrun (its own placement)   build/<coll>_perf
# Per collective and size: the best and the median time of each over the rounds, the best
# peer's best / Chorus's best (> 1: Chorus faster), and the median over the rounds of the same
# ratio within each round, and the same median over the rounds where the fastest peer's launch and
# Chorus's began in the same state of this VM. That state flips within seconds (handoff_bench's
# floor: about 0.05 us fast, 0.25-0.46 slow, measured before every launch into
# floor_LIB_COLL_ROUND.txt; a floor under 0.1 us counts as fast), so a fast peer launch beside a
# slow Chorus one, seconds apart, says nothing of either library. A library whose launcher or
# build is missing is left out (its columns say "-").
#
# oneCCL's placement: Intel MPI's launcher pins rank r to core r (I_MPI_PIN's default); oneCCL
# then finds one core per process and disables its worker thread (CCL_WORKER_OFFLOAD=0), so each
# rank's own thread drives the collective, as the other three libraries do. --ccl-env passes
# other settings (e.g. "CCL_WORKER_OFFLOAD=1 CCL_WORKER_AFFINITY=0,1": a worker on its rank's
# core; see docs/performance.md for what that costs).
#
# Usage: scripts/compare_peers.sh [options] [-- extra flags for every benchmark]
#   --build DIR       Chorus build directory, also where the peers' binaries go (build)
#   --rounds N        rounds (5)
#   --np N            ranks (2)
#   --load N          busy competitor processes (a pure-Python spin each, unpinned) during every
#                     library's runs (0): communication beside computation
#   --colls LIST      comma-separated subset of allreduce,allgather,reducescatter,broadcast
#   --placement P     oop (out of place, default) or ip (in place) times; Broadcast is always
#                     compared in place (MPI's and oneCCL's Broadcast have one buffer)
#   --sizes "-b 8 -e 128M -f 4"  the sweep (default 8 B .. 128 MiB, x4)
#   --iters "-n 20 -w 5"         iterations and warm-ups per size
#   --libs LIST       comma-separated subset of ompi,mpich,ccl (default all three)
#   --ccl-venv DIR    oneCCL's virtualenv, created where missing ($CHORUS_CCL_VENV or
#                     BUILD/venv-ccl; scripts/compare_common.sh pins the versions)
#   --ccl-env "V=X .." environment for oneCCL's runs only
#   --out DIR         where the tables go (a new /tmp/compare_peers.XXXXXX): every launch's
#                     printed table, LIB_COLL_ROUND.txt, and Chorus's -J document beside its table
#                     (chorus_COLL_ROUND.json; scripts/perf_page.py converts the peers' tables)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/compare_common.sh
build=build rounds=5 np=2 load=0 colls=allreduce,allgather,reducescatter,broadcast placement=oop
sizes="-b 8 -e 128M -f 4" iters="-n 20 -w 5" libs=ompi,mpich,ccl cclVenv= cclEnv= out= extra=()
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
    --libs) libs=$2; shift 2 ;;
    --ccl-venv) cclVenv=$2; shift 2 ;;
    --ccl-env) cclEnv=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "compare_peers: unknown option $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
[ -x "$build/chorusrun" ] && [ -x "$build/all_reduce_perf" ] || scripts/setup.sh "$build" || exit 1
cclVenv=${cclVenv:-${CHORUS_CCL_VENV:-$build/venv-ccl}}
ompiBin= mpichBin= cclBin=
case ",$libs," in *,ompi,*)
  command -v mpirun.openmpi >/dev/null && ompiBin=$(build_mpi_perf "$build" openmpi) ||
    echo "compare_peers: no Open MPI (openmpi-bin, libopenmpi-dev): left out" >&2 ;;
esac
case ",$libs," in *,mpich,*)
  command -v mpiexec.mpich >/dev/null && mpichBin=$(build_mpi_perf "$build" mpich) ||
    echo "compare_peers: no MPICH (mpich, libmpich-dev): left out" >&2 ;;
esac
case ",$libs," in *,ccl,*)
  { cclVenv=$(setup_ccl_venv "$cclVenv") && cclBin=$(build_ccl_perf "$build" "$cclVenv"); } ||
    { cclBin=; echo "compare_peers: oneCCL's virtualenv or harness failed: left out" >&2; } ;;
esac
# shellcheck disable=SC2206
args=($sizes $iters -c 1 "${extra[@]}")
ompiBind=(--bind-to core) mpichBind=(-bind-to core) cclPin=()
if [ "$np" -gt "$(nproc)" ]; then
  ompiBind=(--bind-to none --oversubscribe) mpichBind=(-bind-to none) cclPin=(-genv I_MPI_PIN 0)
fi
# shellcheck disable=SC2206
cclEnvList=($cclEnv)
declare -A chorusBin=([allreduce]=all_reduce_perf [allgather]=all_gather_perf
                      [reducescatter]=reduce_scatter_perf [broadcast]=broadcast_perf)
[ -n "$out" ] && mkdir -p "$out" || out=$(mktemp -d /tmp/compare_peers.XXXXXX)
start_busy "$load"
echo "### $(date -u +%FT%TZ) $(nproc) cores, $np ranks, $load busy processes, $rounds rounds," \
     "$placement times;" \
     "files in $out; $(uptime | sed 's/.*load/load/')"
[ -n "$ompiBin" ] && echo "### Open MPI: $(mpirun.openmpi --version | head -n 1):" \
  "mpirun.openmpi --allow-run-as-root ${ompiBind[*]} -np $np $ompiBin -C <coll> ${args[*]}"
[ -n "$mpichBin" ] && echo "### MPICH: $(mpichversion 2>/dev/null | head -n 1 | tr -s ' \t' ' '):" \
  "mpiexec.mpich ${mpichBind[*]} -n $np $mpichBin -C <coll> ${args[*]}"
[ -n "$cclBin" ] && echo "### oneCCL: $({ "$cclVenv/bin/pip" list 2>/dev/null ||
  sed -n 's/^#define CCL_\(MAJOR\|MINOR\|UPDATE\)_VERSION *\([0-9]*\)/oneccl \2/p' \
    "$cclVenv/include/oneapi/ccl/config.h"; } |
  awk '/^(oneccl-cpu|impi-rt) /{printf "%s %s ", $1, $2} /^oneccl /{v = v (v ? "." : "") $2}
       END {if (v) printf "oneCCL %s", v}'):" \
  "${cclEnvList[*]} $cclVenv/bin/mpiexec ${cclPin[*]} -n $np $cclBin -C <coll> ${args[*]}"
echo "### Chorus: $build/chorusrun --no-prefix -np $np $build/<coll>_perf ${args[*]}"
IFS=, read -r -a collList <<<"$colls"
for ((r = 0; r < rounds; r++)); do
  # This VM's state for the round: the hand-off floor in us (0.05 fast, 0.2-0.26 slow).
  floor=$(handoff_floor "$build")
  echo "round $r: $(date -u +%T) hand-off floor ${floor:-?} us" | tee "$out/state_$r.txt"
  for c in "${collList[@]}"; do
    [ -n "${chorusBin[$c]:-}" ] || { echo "compare_peers: unknown collective $c" >&2; exit 2; }
    if [ -n "$ompiBin" ]; then
      handoff_floor "$build" >"$out/floor_ompi_${c}_$r.txt"
      timeout 600 mpirun.openmpi --allow-run-as-root "${ompiBind[@]}" -np "$np" "$ompiBin" \
        -C "$c" "${args[@]}" >"$out/ompi_${c}_$r.txt" 2>&1 || echo "round $r: Open MPI $c failed"
    fi
    if [ -n "$mpichBin" ]; then
      handoff_floor "$build" >"$out/floor_mpich_${c}_$r.txt"
      timeout 600 mpiexec.mpich "${mpichBind[@]}" -n "$np" "$mpichBin" -C "$c" "${args[@]}" \
        >"$out/mpich_${c}_$r.txt" 2>&1 || echo "round $r: MPICH $c failed"
    fi
    if [ -n "$cclBin" ]; then
      handoff_floor "$build" >"$out/floor_ccl_${c}_$r.txt"
      env "${cclEnvList[@]}" timeout 600 "$cclVenv/bin/mpiexec" "${cclPin[@]}" -n "$np" \
        "$cclBin" -C "$c" "${args[@]}" >"$out/ccl_${c}_$r.txt" 2>&1 ||
        echo "round $r: oneCCL $c failed"
    fi
    handoff_floor "$build" >"$out/floor_chorus_${c}_$r.txt"
    timeout 600 "$build/chorusrun" --no-prefix -np "$np" "$build/${chorusBin[$c]}" "${args[@]}" \
      -J "$out/chorus_${c}_$r.json" >"$out/chorus_${c}_$r.txt" 2>&1 ||
      echo "round $r: Chorus $c failed"
  done
done
echo "### $(date -u +%FT%TZ) done; $(uptime | sed 's/.*load/load/')"
/usr/bin/python3 - "$out" "$rounds" "$placement" "$colls" <<'PY'
import statistics
import sys
sys.path.insert(0, "scripts")
from nccl_table import (IN_PLACE, OUT_OF_PLACE, best_median as cell, floor_is_fast,
                        same_state_ratios, size_label as size, times)
out, rounds, placement, colls = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
col = OUT_OF_PLACE if placement == "oop" else IN_PLACE
# MPI_Bcast and ccl::broadcast have one buffer: both columns of their harnesses broadcast in
# place, where Chorus's out-of-place Broadcast also copies the root's input to its output (a
# second copy of the data). So Broadcast compares in-place times whatever the placement.
cols = {c: IN_PLACE if c == "broadcast" else col for c in colls}
libs = (("ompi", "Open MPI"), ("mpich", "MPICH"), ("ccl", "oneCCL"))
print("Times in us, best / median over the rounds; then the best peer's best time / Chorus's"
      " best (> 1: Chorus faster), and which peer that is; last, per round the fastest peer's"
      " time / Chorus's in that round, the median over the rounds (and the least); then the"
      " same median over only the rounds whose two launches began in the same state of this VM"
      " (hand-off floor both under or both over 0.1 us), and how many rounds that was.")
for c in colls:
    res = {lib: [times(f"{out}/{lib}_{c}_{r}.txt", cols[c]) for r in range(rounds)]
           for lib in [l for l, _ in libs] + ["chorus"]}
    print(f"\n{c}" + (" (in place: the peers' Broadcast has one buffer)" if cols[c] != col else "")
          + "\n")
    print("| bytes | " + " | ".join(n for _, n in libs) +
          " | Chorus | best peer / Chorus | same round: median (least) |"
          " same state: median (rounds) |")
    print("|---:|" + "---:|" * (len(libs) + 4))
    for s in sorted(set().union(*[t.keys() for t in res["chorus"]])):
        ch = [t[s] for t in res["chorus"] if s in t]
        peers = {l: [t[s] for t in res[l] if s in t] for l, _ in libs}
        best = min(((min(v), n) for (l, n) in libs for v in [peers[l]] if v), default=None)
        ratio = f"{best[0] / min(ch):.2f} ({best[1]})" if best and min(ch) > 0 else "-"
        rounds_ratio = [min(res[l][r][s] for l, _ in libs if s in res[l][r]) / res["chorus"][r][s]
                        for r in range(rounds)
                        if s in res["chorus"][r] and res["chorus"][r][s] > 0 and
                        any(s in res[l][r] for l, _ in libs)]
        same = (f"{statistics.median(rounds_ratio):.2f} ({min(rounds_ratio):.2f})"
                if rounds_ratio else "-")
        state_ratio = same_state_ratios(
            {l: dict(enumerate(res[l])) for l in res}, [l for l, _ in libs], s,
            lambda lib, r: floor_is_fast(f"{out}/floor_{lib}_{c}_{r}.txt"))
        in_state = (f"{statistics.median(state_ratio):.2f} ({len(state_ratio)})"
                    if state_ratio else "-")
        print(f"| {size(s)} | " + " | ".join(cell(peers[l]) for l, _ in libs) +
              f" | {cell(ch)} | {ratio} | {same} | {in_state} |")
PY
