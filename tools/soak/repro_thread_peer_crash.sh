#!/usr/bin/env bash
# Finding 2 of tools/soak/README.md: a survivor process crashes (SIGSEGV in the single-copy
# AllReduce, src/algo/copy.cc cmaAllReduce) when a rank on another thread of the same process
# fails its call first and frees its buffers. Two chorus-soak job processes x 2 threads on one
# node, the kill job of the 30-minute soak (job seed 1296801689994468716); process 1 (ranks 2,
# 3) is SIGKILLed 0.3..2.5 s after the start, until process 0 does not exit 0. Core files are
# enabled (ulimit -c unlimited) in the working directory.
#   tools/soak/repro_thread_peer_crash.sh [BUILD=build] [TRIES=40]
set -uo pipefail
bin=$(realpath "${1:-build}/chorus-soak")
tries=${2:-40}
ulimit -c unlimited
dir=$(mktemp -d /tmp/chorus-repro-peer-crash.XXXXXX)
cd "$dir" || exit 2
for i in $(seq 1 "$tries"); do
  delay=$(awk -v i="$i" 'BEGIN { printf "%.2f", 0.3 + (i % 12) * 0.2 }')
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  pids=()
  for p in 0 1; do
    env CHORUS_RANK=$p CHORUS_NRANKS=2 CHORUS_COMM_ID=127.0.0.1:$port \
      CHORUS_SECRET=0123456789abcdef0123456789abcdef CHORUS_HOSTID=repro$$-node0 \
      CHORUS_TIMEOUT=30 CHORUS_BOOTSTRAP_TIMEOUT=20 \
      "$bin" --role job --procs 2 --threads 2 --seed 1296801689994468716 --seconds 60 \
      --max-bytes 4194304 > "p$p.log" 2>&1 &
    pids+=($!)
  done
  sleep "$delay"
  kill -9 "${pids[1]}"
  wait "${pids[0]}" 2>/dev/null
  st=$?
  wait "${pids[1]}" 2>/dev/null
  echo "try $i: kill after $delay s, survivor process exit status $st"
  if [ "$st" -ne 0 ]; then
    cat p0.log
    echo "(core and logs in $dir)"
    exit 1
  fi
done
rm -rf "$dir"
echo "not reproduced in $tries tries"
