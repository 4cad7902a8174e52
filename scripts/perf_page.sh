#!/usr/bin/env bash
# Builds docs/performance.md and its charts (docs/perf/*.png) from ONE current run of every
# comparison, by one command: Chorus against Open MPI, MPICH and oneCCL (AllReduce, AllGather,
# ReduceScatter, Broadcast; scripts/compare_peers.sh, rounds interleaved), torch's chorus
# backend against gloo (chorus-torch-bench), optionally numpy against mpi4py
# (scripts/compare_numpy.sh). Every launch's output stays in the run directory; then
# scripts/perf_page.py renders the page from it (tables with best and median per size and the
# ratios, one chorus-plot chart per comparison, the machine and the method).
#
# Usage: scripts/perf_page.sh [options]
#   --build DIR        Chorus build directory (build); the peers' benchmarks are built there too
#   --rounds N         interleaved rounds (5)
#   --quick            a development run: 1 round, 8 B .. 1 MiB, fewer iterations
#   --sizes "-b 8 -e 128M -f 4"  the sweep (default 8 B .. 128 MiB, x4)
#   --iters "-n 20 -w 5 --small_iters 1000"   timed calls and warm-ups per size (--small_iters:
#                      the timed calls up to 64 KiB, where 20 calls of a microsecond or less
#                      time the ranks' skew after the barrier more than the calls)
#   --deps DIR         peer runtimes laid out as scripts/device_check.sh leaves them
#                      (DIR/bin: mpiexec.mpich & co. from PyPI's mpich wheel; DIR/ccl: oneCCL),
#                      used where the system has none (default BUILD/device_deps)
#   --ccl-venv DIR     oneCCL's virtualenv (compare_peers.sh --ccl-venv; default: DEPS/ccl where
#                      present, else what compare_peers.sh picks)
#   --no-peers, --no-torch, --no-numpy   leave a comparison out (the page says so)
#                      numpy against mpi4py: scripts/compare_numpy.sh with the build's Python,
#                      mpi4py installed into BUILD/mpi4py-ompi and BUILD/mpi4py-mpich (PyPI,
#                      pinned there) for whichever MPI is installed
#   --out DIR          the run directory (a new /tmp/perf_page.XXXXXX)
#   --render-only RUN  no measuring: render the page again from an earlier run directory or
#                      its archive (docs/perf/run.tar.xz keeps the page's run)
#   --page FILE, --plots DIR     where the page and charts go (docs/performance.md, docs/perf)
# A peer that is not installed is left out, as compare_peers.sh does.
set -uo pipefail
cd "$(dirname "$0")/.."
build=build rounds=5 quick=0 sizes="-b 8 -e 128M -f 4" iters="-n 20 -w 5 --small_iters 1000"
deps= cclVenv=
peers=1 torch=1 numpy=1 out= renderOnly= page=docs/performance.md plots=docs/perf
argv=("$@")
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --deps) deps=$2; shift 2 ;;
    --ccl-venv) cclVenv=$2; shift 2 ;;
    --no-peers) peers=0; shift ;;
    --no-torch) torch=0; shift ;;
    --no-numpy) numpy=0; shift ;;
    --out) out=$2; shift 2 ;;
    --render-only) renderOnly=$2; shift 2 ;;
    --page) page=$2; shift 2 ;;
    --plots) plots=$2; shift 2 ;;
    *) echo "perf_page: unknown option $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
plotProg=tools/plot/chorus_plot.py
[ -x "$build/chorus-plot" ] && plotProg=$build/chorus-plot
render() {
  /usr/bin/python3 scripts/perf_page.py render "$1" --page "$page" --plots "$plots" \
    --plot "$plotProg"
}
if [ -n "$renderOnly" ]; then
  render "$renderOnly"
  exit
fi
if [ "$quick" = 1 ]; then
  rounds=1 sizes="-b 8 -e 1M -f 4" iters="-n 10 -w 2"
fi
deps=${deps:-$build/device_deps}
# MPICH from PyPI's wheel (scripts/device_check.sh unpacks it there) where Debian's is missing.
if ! command -v mpiexec.mpich >/dev/null && [ -x "$deps/bin/mpiexec.mpich" ]; then
  PATH=$(realpath "$deps/bin"):$PATH
fi
if [ -z "$cclVenv" ] && [ -e "$deps/ccl/include/oneapi/ccl.hpp" ]; then
  cclVenv=$(realpath "$deps/ccl")
fi
# Else the virtualenv compare_peers.sh would pick, where it exists (the page names its version).
if [ -z "$cclVenv" ] && [ -e "${CHORUS_CCL_VENV:-$build/venv-ccl}/include/oneapi/ccl.hpp" ]; then
  cclVenv=$(realpath "${CHORUS_CCL_VENV:-$build/venv-ccl}")
fi
[ -x "$build/chorusrun" ] && [ -x "$build/all_reduce_perf" ] || scripts/setup.sh "$build" || exit 1
[ -n "$out" ] && mkdir -p "$out" || out=$(mktemp -d /tmp/perf_page.XXXXXX)
# q ARGS: the command line as one would type it (arguments with spaces in double quotes).
q() {
  local a s=
  for a in "$@"; do
    case $a in *[[:space:]]*) s+=" \"$a\"" ;; *) s+=" $a" ;; esac
  done
  echo "${s# }"
}
# stamp SECTION start|end: the time and the load average, for the page.
stamp() {
  mkdir -p "$out/$1"
  echo "$(date -u +%FT%TZ) $(cut -d' ' -f1-3 /proc/loadavg)" >"$out/$1/stamp.$2"
}
started=$(date +%s)
stamp all start
/usr/bin/python3 scripts/perf_page.py machine ${cclVenv:+--ccl-venv "$cclVenv"} \
  >"$out/machine.json"
max=$(sed -n 's/.*-e \([^ ]*\).*/\1/p' <<<"$sizes")
/usr/bin/python3 - "$out/run.json" "scripts/perf_page.sh $(q "${argv[@]}")" "$rounds" "$quick" \
  "$sizes" "$iters" <<'PY'
import json, sys
f, cmd, rounds, quick, sizes, iters = sys.argv[1:]
n = dict(zip(iters.split()[::2], iters.split()[1::2]))
small = ("%s timed calls up to 64 KiB, " % n["--small_iters"]) if "--small_iters" in n else ""
json.dump({"command": cmd.strip(), "rounds": int(rounds), "quick": quick == "1", "np": 2,
           "sizes": sizes,
           "iters": "%s%s timed calls%s after %s warm-ups"
                    % (small, n.get("-n", "20"), " above" if small else "", n.get("-w", "5"))},
          open(f, "w"), indent=1)
PY
echo "### perf_page: run directory $out; $(uptime | sed 's/.*load/load/')"
if [ "$peers" = 1 ]; then
  cmd=(scripts/compare_peers.sh --build "$build" --rounds "$rounds" --sizes "$sizes"
       --iters "$iters" --out "$out/peers")
  [ -n "$cclVenv" ] && cmd+=(--ccl-venv "$cclVenv")
  stamp peers start
  q "${cmd[@]}" >"$out/peers/command"
  "${cmd[@]}" 2>&1 | tee "$out/peers/summary.log"
  stamp peers end
fi
if [ "$torch" = 1 ] && [ -x "$build/chorus-torch-bench" ]; then
  ops=all_reduce,ddp,fsdp2
  [ "$quick" = 1 ] && ops=all_reduce
  # shellcheck disable=SC2206
  cmd=("$build/chorus-torch-bench" -np 2 $sizes -r "$rounds" --ops "$ops"
       --json "$out/torch/torch.json")
  stamp torch start
  q "${cmd[@]}" >"$out/torch/command"
  timeout 1200 "${cmd[@]}" 2>&1 | tee "$out/torch/log.txt"
  stamp torch end
elif [ "$torch" = 1 ]; then
  echo "perf_page: no $build/chorus-torch-bench (torch missing?): the torch section is left out" >&2
fi
if [ "$numpy" = 1 ]; then
  py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
  npPeers=
  command -v mpirun.openmpi >/dev/null && npPeers=ompi
  command -v mpiexec.mpich >/dev/null && npPeers=${npPeers:+$npPeers,}mpich
  if [ -n "$npPeers" ] && [ -x "$py" ] && [ -d "$build/python/chorus" ]; then
    cmd=(env PEERS="$npPeers" PYTHON="$py" OMPI_MPI4PY="$build/mpi4py-ompi"
         scripts/compare_numpy.sh "$build" "$rounds" "$max")
    stamp numpy start
    q "${cmd[@]}" | sed 's/^env //' >"$out/numpy/command"
    NUMPY_OUT=$out/numpy "${cmd[@]}" 2>&1 | grep -v '^WARNING: Location' |
      tee "$out/numpy/summary.log"
    stamp numpy end
  else
    echo "perf_page: numpy against mpi4py left out (no MPI, or no Python package in $build)" >&2
  fi
fi
stamp all end
# The measurements (not what render derives from them) beside the charts, so that the page can
# be rendered again, and checked (tests/test_perf_page.py), without measuring.
mkdir -p "$plots" && /usr/bin/python3 scripts/perf_page.py archive "$out" "$plots/run.tar.xz"
echo "### perf_page: measured in $(( ($(date +%s) - started) / 60 )) min;" \
  "$(uptime | sed 's/.*load/load/')"
render "$out"
echo "### perf_page: render again from this run: scripts/perf_page.sh --render-only" \
  "$plots/run.tar.xz (or $out)"
