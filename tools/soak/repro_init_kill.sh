#!/usr/bin/env bash
# Finding 1 of tools/soak/README.md: a rank SIGKILLed while a two-node communicator sets up its
# TCP connections leaves a survivor on the other node in chorusCommInitRank until
# CHORUS_BOOTSTRAP_TIMEOUT. Three chorus-soak job processes x 2 threads (ranks 0..3 on emulated
# node 0, 4 and 5 on node 1); process 1 (ranks 2, 3) is SIGKILLed DELAY s after the start, for
# delays 0.020..0.065 s in turn, until the survivors take more than 2 s to end.
#   tools/soak/repro_init_kill.sh [BUILD=build] [TRIES=30] [BOOTSTRAP_TIMEOUT=20]
set -uo pipefail
bin=${1:-build}/chorus-soak
tries=${2:-30}
bt=${3:-20}
dir=$(mktemp -d /tmp/chorus-repro-init-kill.XXXXXX)
for i in $(seq 1 "$tries"); do
  delay=$(awk -v i="$i" 'BEGIN { printf "%.3f", 0.02 + (i % 10) * 0.005 }')
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  pids=()
  for p in 0 1 2; do
    env CHORUS_RANK=$p CHORUS_NRANKS=3 CHORUS_COMM_ID=127.0.0.1:$port \
      CHORUS_SECRET=0123456789abcdef0123456789abcdef CHORUS_HOSTID=repro$$-node$((p * 2 / 3)) \
      CHORUS_TIMEOUT=30 CHORUS_BOOTSTRAP_TIMEOUT=$bt \
      "$bin" --role job --procs 3 --threads 2 --seed 42 --seconds 60 --max-bytes 65536 \
      > "$dir/p$p.log" 2>&1 &
    pids+=($!)
  done
  sleep "$delay"
  kill -9 "${pids[1]}"
  t0=$(date +%s.%N)
  wait "${pids[0]}" "${pids[2]}" 2>/dev/null
  wait "${pids[1]}" 2>/dev/null
  t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  echo "try $i: kill after $delay s, survivors ended $t s after it"
  if awk -v t="$t" 'BEGIN { exit !(t > 2) }'; then
    grep -h SOAKERR "$dir/p0.log" "$dir/p2.log"
    rm -rf "$dir"
    exit 1
  fi
done
rm -rf "$dir"
echo "not reproduced in $tries tries"
