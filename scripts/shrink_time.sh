#!/usr/bin/env bash
# Shrink-and-continue time after a kill (docs/reliability.md, "Shrink"): N ranks started by hand
# with launcher variables run a loop of 1000-element int64 AllReduces (tests/shrink_worker.cc);
# the last rank kills itself with SIGKILL at iteration 10; every survivor reports the failure,
# calls chorusCommShrink (no exclude list), aborts the old communicator and runs its first
# AllReduce on the new one. Printed per run: the time from the failure being reported (a
# survivor's FAILED line, the earliest) to the first successful collective on the new
# communicator (the last survivor's FIRSTOK), and to its SHRUNK line (shrink done); and the
# time from the last survivor's FAILED line to that first success (the agreement and the new
# init alone, without the spread of the survivors' detection).
#
#   scripts/shrink_time.sh [runs=5] [sizes="2 4 8"] [nodes=1]
#   BUILD=build (where chorus_shrink_worker is)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
sizes=${2:-"2 4 8"}
nodes=${3:-1}
worker=${BUILD:-build}/tests/chorus_shrink_worker
[ -x "$worker" ] || { echo "no $worker: build first (cmake --build build --target chorus_shrink_worker)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
printf "%-6s %-6s %-4s %14s %14s %16s\n" ranks nodes run "shrunk_ms" "continue_ms" "after_last_ms"
for n in $sizes; do
  for run in $(seq 1 "$runs"); do
    port=$(free_port)
    secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    pids=()
    for r in $(seq 0 $((n - 1))); do
      CHORUS_RANK=$r CHORUS_NRANKS=$n CHORUS_COMM_ID=127.0.0.1:$port CHORUS_SECRET=$secret \
        CHORUS_HOSTID=node$((r * nodes / n)) \
        "$worker" --iters 20 --count 1000 --kill $((n - 1))@10 --timeout 120 >"$tmp/$r.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do { wait "$p"; } 2>/dev/null || true; done
    cat "$tmp"/*.log | /usr/bin/python3 -c '
import sys, re
failed, shrunk, first, bad = [], [], [], 0
for line in sys.stdin:
    m = re.match(r"(FAILED|SHRUNK|FIRSTOK) it=\d+ t=([0-9.]+)", line)
    if m:
        {"FAILED": failed, "SHRUNK": shrunk, "FIRSTOK": first}[m.group(1)].append(float(m.group(2)))
    if line.startswith("MISMATCH") or line.startswith("SHRINKFAILED") or "ok=0" in line: bad += 1
n, nodes, run = sys.argv[1:4]
if not failed or len(first) != int(n) - 1 or bad:
    print(f"{n:<6} {nodes:<6} {run:<4}   FAILED RUN (logs kept in the directory below)"); sys.exit(1)
t0 = min(failed)
print(f"{n:<6} {nodes:<6} {run:<4} {1e3*(max(shrunk)-t0):14.1f} {1e3*(max(first)-t0):14.1f} {1e3*(max(first)-max(failed)):16.1f}")
' "$n" "$nodes" "$run" || { keep=$(mktemp -d /tmp/shrink_time.XXXX); cp "$tmp"/*.log "$keep"/; echo "  $keep"; }
    rm -f "$tmp"/*.log
  done
done
