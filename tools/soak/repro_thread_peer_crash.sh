#!/usr/bin/env bash
# Finding 2 of tools/soak/README.md: a survivor process crashes (SIGSEGV in the single-copy
# AllReduce, src/algo/copy.cc cmaAllReduce) when a rank on another thread of the same process
# fails its call first and frees its buffers. Two chorus-soak job processes x 2 threads on one
# node, the kill job of the 30-minute soak (job seed 1296801689994468716); process 1 (ranks 2,
# 3) is SIGKILLed 0.3..2.5 s after the start, until process 0 does not exit 0. Core files are
# enabled (ulimit -c unlimited) in the working directory.
#   tools/soak/repro_thread_peer_crash.sh [BUILD=build] [TRIES=40]
set -uo pipefail
. "$(dirname "$0")/repro_lib.sh"
bin=$(realpath "${1:-build}/chorus-soak")
tries=${2:-40}
ulimit -c unlimited
dir=$(mktemp -d /tmp/chorus-repro-peer-crash.XXXXXX)
cd "$dir" || exit 2
for i in $(seq 1 "$tries"); do
  delay=$(awk -v i="$i" 'BEGIN { printf "%.2f", 0.3 + (i % 12) * 0.2 }')
  repro_pair "$bin" 1296801689994468716 4194304 "$delay"
  st=$?
  echo "try $i: kill after $delay s, survivor process exit status $st"
  if [ "$st" -ne 0 ]; then
    cat p0.log
    echo "(core and logs in $dir)"
    exit 1
  fi
done
rm -rf "$dir"
echo "not reproduced in $tries tries"
