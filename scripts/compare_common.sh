# Shared by the comparison scripts (sourced, not run): busy competitors and the Open MPI
# benchmark's build.

# start_busy N [CPU]: starts N busy processes (a pure-Python spin: the data loader / compute
# thread of a training job), pinned to core CPU when given, and kills them when the calling
# script exits. Their pids are in busy_pids.
busy_pids=()
start_busy() {
  local i pin=()
  [ -n "${2:-}" ] && pin=(taskset -c "$2")
  for ((i = 0; i < $1; i++)); do
    "${pin[@]}" /usr/bin/python3 -c "while True: pass" &
    busy_pids+=($!)
  done
  trap '[ ${#busy_pids[@]} -gt 0 ] && kill "${busy_pids[@]}" 2>/dev/null' EXIT
}

# build_mpi_perf BUILD-DIR: builds tools/mpi/mpi_coll_perf.c into BUILD-DIR/mpi_coll_perf when
# it is missing or older than the source; prints its path. Fails without mpicc.
build_mpi_perf() {
  local src=tools/mpi/mpi_coll_perf.c bin=$1/mpi_coll_perf
  command -v mpicc >/dev/null || return 1
  if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ]; then
    mkdir -p "$1" && mpicc -O2 -Wall -Wextra -o "$bin" "$src" >&2 || return 1
  fi
  echo "$bin"
}
