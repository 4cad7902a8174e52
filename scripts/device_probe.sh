#!/usr/bin/env bash
# The GPU machine's second check (docs/scaling.md, docs/cuda.md): what the full device check
# (scripts/device_check.sh) left open, in one short command. Builds the perf tools alone (CUDA,
# no tests, no Python), then:
#   cuda_poll   small device AllReduces at 2 and 4 ranks, staged and through the IPC path, with
#               the host waits' poll phase at its default (CHORUS_POLL_US=50) and long (2000):
#               is the 160-440 us of a small staged call the cost of waking a sleeping rank?
#   algo16      CPU AllReduce and Broadcast at 16 (and 8) ranks on 16 cores, every algorithm the
#               tuner may pick forced in turn (CHORUS_ALGO), rounds interleaved: which one is
#               fastest per size, against what the tuner picks.
# Results: $OUT/probe.md (tables: time per size, us, best over the rounds) and $OUT/probe.tar.gz.
# Usage: scripts/device_probe.sh [--out DIR] [--rounds N] [--build DIR] [--cpu] [--deadline S]
#   --deadline S: no launch starts S seconds after the start (default 230)
#   --cpu: no CUDA stage and no CUDA build (runs anywhere; 4 ranks instead of 16 and 8)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD out=${OUT:-} rounds=2 build= cpu=0 deadline=230
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --cpu) cpu=1; shift ;;
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
    cmake --build "$build" -j"$(nproc)" --target chorusrun all_reduce_perf broadcast_perf; } \
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
if [ "$cpu" = 0 ]; then
  for r in $(seq 1 "$rounds"); do
    for np in 2 4; do
      for ipc in 0 1; do
        for poll in 50 2000; do
          CHORUS_CUDA_IPC=$ipc CHORUS_POLL_US=$poll run "cuda_np${np}_ipc${ipc}_poll${poll}_r$r" \
            "$np" all_reduce --device -b 8 -e 16M -f 8 -n 50 -w 10 -c 1
        done
      done
    done
  done
  say "cuda_poll: done at $(($(date +%s) - start)) s"
fi
nps="16 8"
[ "$cpu" = 1 ] && nps=4
for r in $(seq 1 "$rounds"); do
  for np in $nps; do
    for a in default ring tree oneshot twoshot hd direct; do
      if [ $a = default ]; then
        run "ar_np${np}_${a}_r$r" "$np" all_reduce -b 8 -e 64M -f 8 -n 20 -w 10 -c 1
      else
        CHORUS_ALGO=$a run "ar_np${np}_${a}_r$r" "$np" all_reduce -b 8 -e 64M -f 8 -n 20 -w 10 -c 1
      fi
    done
    for a in default chain oneshot tree ring direct cma; do
      if [ $a = default ]; then
        run "bc_np${np}_${a}_r$r" "$np" broadcast -b 8 -e 64M -f 8 -n 20 -w 10 -c 1
      else
        CHORUS_ALGO=$a run "bc_np${np}_${a}_r$r" "$np" broadcast -b 8 -e 64M -f 8 -n 20 -w 10 -c 1
      fi
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
