#!/usr/bin/env bash
# The GPU machine's second check (docs/scaling.md, docs/cuda.md): what the full device check
# (scripts/device_check.sh) left open, in one short command. Builds the perf tools alone (CUDA,
# no tests, no Python), then:
#   cuda        device AllReduces (8 B-16 MiB) at 2 and 4 ranks, staged and through the IPC
#               path: as processes (each its own CUDA context), as threads of one process (one
#               context: -t N), and as processes under MPS where the image has
#               nvidia-cuda-mps-control. Is the 0.16-0.55 ms a call cost on 2026-11-28 the GPU
#               time-slicing between the processes' contexts? (That run's probe also ruled out
#               the host's poll phase: CHORUS_POLL_US=50 and 2000 gave the same times.)
#   algo16      CPU AllReduce and Broadcast at 16 (and 8) ranks on 16 cores, every algorithm the
#               tuner may pick forced in turn (CHORUS_ALGO), rounds interleaved: which one is
#               fastest per size, against what the tuner picks.
# Results: $OUT/probe.md (tables: time per size, us, best over the rounds) and $OUT/probe.tar.gz.
#   tune        (--tune) chorus-tune on 2 thread ranks first, its fit saved on that machine,
#               so that the forced runs' predicted times come from that machine's model
# Usage: scripts/device_probe.sh [--out DIR] [--rounds N] [--build DIR] [--cpu] [--deadline S]
#                                [--tune] [--skip-cuda]
#   --deadline S: no launch starts S seconds after the start (default 230)
#   --cpu: no CUDA stage and no CUDA build (runs anywhere; 4 ranks instead of 16 and 8)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD out=${OUT:-} rounds=2 build= cpu=0 deadline=230 tune=0 skipcuda=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --cpu) cpu=1; shift ;;
    --tune) tune=1; shift ;;
    --skip-cuda) skipcuda=1; shift ;;
    --deadline) deadline=$2; shift 2 ;;
    *) echo "device_probe: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out=$(mktemp -d /tmp/device_probe.XXXXXX)
mkdir -p "$out" && out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/device_probe_work.XXXXXX)
start=$(date +%s)
export CHORUS_TIMEOUT=60 CHORUS_CUDA_TIMEOUT=30
say() { echo "$*" | tee -a "$out/probe.md"; }
: >"$out/probe.md"
say "# device_probe $(date -u +%FT%TZ), $(nproc) cores, $(git log -1 --format='%h' 2>/dev/null)"
if [ -z "$build" ]; then
  build=$root/build-probe
  cuda=(-DCHORUS_CUDA=ON -DCHORUS_CUDA_IPC=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  [ "$cpu" = 1 ] && cuda=(-DCHORUS_CUDA=OFF)
  deps=()
  [ -d "$root/.device/json" ] &&
    deps+=(-Dnlohmann_json_DIR="$root/.device/json/share/cmake/nlohmann_json")
  gen=()
  command -v ninja >/dev/null && [ ! -f "$build/CMakeCache.txt" ] && gen=(-G Ninja)
  t0=$(date +%s)
  { cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda[@]}" \
      -DCHORUS_BUILD_TESTS=OFF -DCHORUS_PYTHON=OFF "${deps[@]}" &&
    cmake --build "$build" -j"$(nproc)" --target chorusrun all_reduce_perf broadcast_perf chorus-tune; } \
    >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; say "build FAILED"; exit 1; }
  say "build: $(($(date +%s) - t0)) s"
fi
run() {  # run NAME NP COLL ARGS... (environment from the caller): one launch, its table kept
  local name=$1 np=$2 coll=$3
  shift 3
  if [ $(($(date +%s) - start)) -ge "$deadline" ]; then echo "$name" >>"$work/skipped"; return; fi
  timeout -k5 90 "$build/chorusrun" --timeout 80 --no-prefix -np "$np" "$build/${coll}_perf" \
    "$@" -J "$work/$name.json" >"$work/$name.txt" 2>&1 || echo "FAILED $name (rc $?)" >>"$work/failed"
}
if [ "$cpu" = 0 ] && [ "$skipcuda" = 0 ]; then
  mps=0
  command -v nvidia-cuda-mps-control >/dev/null && mps=1
  sizes=(-b 8 -e 16M -f 8 -n 50 -w 10 -c 1)
  for r in $(seq 1 "$rounds"); do
    for np in 2 4; do
      for ipc in 0 1; do
        CHORUS_CUDA_IPC=$ipc run "cuda_np${np}_ipc${ipc}_procs_r$r" "$np" all_reduce --device "${sizes[@]}"
        CHORUS_CUDA_IPC=$ipc run "cuda_np${np}_ipc${ipc}_threads_r$r" 1 all_reduce --device \
          -t "$np" "${sizes[@]}"
      done
    done
  done
  if [ "$mps" = 1 ]; then
    # Its own pipe and log folders; stopped (bounded) whatever happens.
    export CUDA_MPS_PIPE_DIRECTORY=$work/mps CUDA_MPS_LOG_DIRECTORY=$work/mps
    mkdir -p "$work/mps"
    if timeout 20 nvidia-cuda-mps-control -d; then
      for np in 2 4; do
        for ipc in 0 1; do
          CHORUS_CUDA_IPC=$ipc run "cuda_np${np}_ipc${ipc}_mps_r1" "$np" all_reduce --device "${sizes[@]}"
        done
      done
      echo quit | timeout 20 nvidia-cuda-mps-control
    else
      say "MPS: nvidia-cuda-mps-control -d failed"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  else
    say "MPS: no nvidia-cuda-mps-control"
  fi
  say "cuda: done at $(($(date +%s) - start)) s"
fi
if [ "$tune" = 1 ]; then
  timeout -k5 120 "$build/chorus-tune" --ranks 2 --print >"$work/tune.txt" 2>&1 ||
    echo "FAILED chorus-tune (rc $?)" >>"$work/failed"
  say "tune: done at $(($(date +%s) - start)) s:"
  sed 's/^/    /' "$work/tune.txt" | tee -a "$out/probe.md"
fi
nps="16 8"
[ "$cpu" = 1 ] && nps=4
for r in $(seq 1 "$rounds"); do
  for np in $nps; do
    # AllReduce (ar_) and Broadcast (bc_), each algorithm forced in turn (default: the tuner's).
    for spec in "ar all_reduce default ring tree oneshot twoshot hd direct" \
                "bc broadcast default chain oneshot tree ring direct cma"; do
      set -- $spec
      tag=$1 coll=$2
      shift 2
      for a in "$@"; do
        algo=$a
        [ "$a" = default ] && algo=
        CHORUS_ALGO=$algo run "${tag}_np${np}_${a}_r$r" "$np" "$coll" -b 8 -e 64M -f 8 \
          -n 20 -w 10 -c 1
      done
    done
  done
  say "algo round $r: done at $(($(date +%s) - start)) s"
done
[ -f "$work/skipped" ] && say "past the deadline (${deadline}s): $(wc -l <"$work/skipped") launches skipped"
[ -f "$work/failed" ] && { say "## failed launches"; sed 's/^/    /' "$work/failed" | tee -a "$out/probe.md"; }
python3 - "$work" >>"$out/probe.md" <<'PY'
import glob, json, os, re, sys
from collections import defaultdict
work = sys.argv[1]
best = defaultdict(dict)   # group -> variant -> {size: (best oop us, algo/proto)}
for p in sorted(glob.glob(f"{work}/*.json")):
    name = os.path.basename(p)[:-5]
    group, variant = re.match(r"(.*?_np\d+)_(.*)_r\d+$", name).groups()
    try:
        d = json.load(open(p))
    except Exception:
        continue
    cur = best[group].setdefault(variant, {})
    for r in d.get("results", []):
        t = r["out_of_place"]["time"]
        if r["out_of_place"].get("nwrong", 0):
            t = float("nan")
        a = f'{r.get("algorithm", "?")}/{r.get("protocol", "?")}'
        if r["size"] not in cur or t < cur[r["size"]][0]:
            cur[r["size"]] = (t, a)
for group in sorted(best):
    vs = sorted(best[group])
    sizes = sorted({s for v in vs for s in best[group][v]})
    print(f"\n## {group}: out-of-place time per call, us (best over the rounds); "
          "default: what the tuner picked\n")
    print("| bytes | " + " | ".join(vs) + " | fastest |")
    print("|---:|" + "---:|" * len(vs) + "---|")
    for s in sizes:
        row, fast = [], (float("inf"), "")
        for v in vs:
            x = best[group][v].get(s)
            if x is None:
                row.append("-")
                continue
            cell = f"{x[0]:.2f}"
            if v == "default" or not x[1].startswith(v + "/"):
                cell += f" ({x[1]})"
            row.append(cell)
            if x[0] < fast[0]:
                fast = (x[0], v)
        print(f"| {s} | " + " | ".join(row) + f" | {fast[1]} |")
PY
tar -C "$work" -czf "$out/probe.tar.gz" . 2>/dev/null
echo "device_probe: done in $(($(date +%s) - start)) s; $out/probe.md"
