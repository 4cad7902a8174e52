# Sourced by the repro_*.sh scripts of tools/soak/README.md's findings with two job processes.
# repro_pair BIN SEED MAX_BYTES DELAY: two chorus-soak job processes of 2 thread ranks each on
# one emulated node (logs p0.log and p1.log in the working directory); process 1 (ranks 2, 3)
# SIGKILLed DELAY s after the start; returns process 0's exit status.
repro_pair() {
  local bin=$1 seed=$2 max_bytes=$3 delay=$4 port p st
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local pids=()
  for p in 0 1; do
    env CHORUS_RANK=$p CHORUS_NRANKS=2 CHORUS_COMM_ID=127.0.0.1:$port \
      CHORUS_SECRET=0123456789abcdef0123456789abcdef CHORUS_HOSTID=repro$$-node0 \
      CHORUS_TIMEOUT=30 CHORUS_BOOTSTRAP_TIMEOUT=20 \
      "$bin" --role job --procs 2 --threads 2 --seed "$seed" --seconds 60 \
      --max-bytes "$max_bytes" > "p$p.log" 2>&1 &
    pids+=($!)
  done
  sleep "$delay"
  kill -9 "${pids[1]}"
  wait "${pids[0]}" 2>/dev/null
  st=$?
  wait "${pids[1]}" 2>/dev/null
  return "$st"
}
