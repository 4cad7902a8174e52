#!/usr/bin/env bash
# Finding 3 of tools/soak/README.md: a survivor process crashes (SIGSEGV in Segment::attach,
# src/transport/segment.cc) when, during init, a rank on another thread of the same process
# fails first and releases its shared-memory segment just as this rank attaches to it. Two
# chorus-soak job processes x 2 threads on one node (the CI soak's job seed 2205547219735847);
# process 1 (ranks 2, 3) is SIGKILLed 5..200 ms after the start, beside BUSY busy loops that
# slow the init into the kill's window, until process 0 ends on a signal. Core files are enabled
# (ulimit -c unlimited) in the working directory.
#   tools/soak/repro_inprocess_attach.sh [BUILD=build] [TRIES=300] [BUSY=2]
set -uo pipefail
. "$(dirname "$0")/repro_lib.sh"
bin=$(realpath "${1:-build}/chorus-soak")
tries=${2:-300}
busy=${3:-2}
ulimit -c unlimited
dir=$(mktemp -d /tmp/chorus-repro-attach.XXXXXX)
cd "$dir" || exit 2
loads=()
for _ in $(seq 1 "$busy"); do
  sh -c 'while :; do :; done' &
  loads+=($!)
done
trap 'kill "${loads[@]}" 2>/dev/null' EXIT
for i in $(seq 1 "$tries"); do
  delay=$(awk -v i="$i" 'BEGIN { printf "%.3f", 0.005 + (i % 50) * 0.004 }')
  repro_pair "$bin" 2205547219735847 65536 "$delay"
  st=$?
  if [ "$st" -gt 128 ]; then
    echo "try $i: kill after $delay s, survivor process ended on signal $((st - 128))"
    cat p0.log
    echo "(core and logs in $dir)"
    exit 1
  fi
done
rm -rf "$dir"
echo "not reproduced in $tries tries"
