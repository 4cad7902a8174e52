# Shared by the comparison scripts (sourced, not run): busy competitors, the MPI benchmark's
# builds (Open MPI, MPICH) and oneCCL's (its virtualenv, its harness).

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

# handoff_floor BUILD-DIR: this VM's state now, as handoff_bench's floor in us (best of 3: about
# 0.05 in its fast state, 0.2-0.26 in the slow one); empty where the tool fails.
handoff_floor() {
  "$1/handoff_bench" --iters 20000 --reps 3 2>/dev/null | awk '/^floor/ {print $(NF-2)}'
}

# build_mpi_perf BUILD-DIR [openmpi|mpich]: builds tools/mpi/mpi_coll_perf.c into
# BUILD-DIR/mpi_coll_perf (Open MPI: mpicc.openmpi, or mpicc where Debian's name is missing) or
# BUILD-DIR/mpi_coll_perf_mpich (MPICH: mpicc.mpich) when it is missing or older than the
# source; prints its path. Both MPIs can be installed at once, so each is named explicitly: the
# plain mpicc is whichever the alternatives system picked. Fails without that MPI's compiler.
build_mpi_perf() {
  local src=tools/mpi/mpi_coll_perf.c bin=$1/mpi_coll_perf cc=mpicc.openmpi
  if [ "${2:-openmpi}" = mpich ]; then
    bin=$1/mpi_coll_perf_mpich cc=mpicc.mpich
  else
    command -v "$cc" >/dev/null || cc=mpicc
  fi
  command -v "$cc" >/dev/null || return 1
  if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ]; then
    mkdir -p "$1" && "$cc" -O2 -Wall -Wextra -o "$bin" "$src" >&2 || return 1
  fi
  echo "$bin"
}

# oneCCL from PyPI, pinned. 2021.17.2 is the newest release that installs here: oneccl-cpu
# 2022.2.0 and impi-rt 2021.19.0 require a `libfabric>=2.6` wheel that is not on PyPI (older
# impi-rt wheels carry their own libfabric). libccl.so.1 of these wheels names libccl.so.2 as a
# dependency, a file no wheel holds; the only symbols it needs from there are the Intel
# compiler's runtime (_intel_fast_memcpy, _intel_fast_memset, __intel_cpu_features_init_x,
# __intel_cpu_feature_indicator_x), which intel-cmplr-lib-rt's libintlc.so.5 exports, so
# libccl.so.2 is made a link to it.
ccl_packages=(oneccl-cpu==2021.17.2 oneccl-cpu-devel==2021.17.2 impi-rt==2021.17.2
              intel-cmplr-lib-rt==2025.3.2)

# setup_ccl_venv DIR: a virtualenv at DIR with ccl_packages (created where missing; needs
# python3-venv and PyPI); prints DIR.
setup_ccl_venv() {
  local v=$1
  if [ ! -e "$v/include/oneapi/ccl.hpp" ] || [ ! -x "$v/bin/mpiexec.hydra" ]; then
    { python3 -m venv "$v" && "$v/bin/pip" install -q "${ccl_packages[@]}"; } >&2 || return 1
  fi
  [ -e "$v/lib/libccl.so.2" ] || ln -s libintlc.so.5 "$v/lib/libccl.so.2" || return 1
  echo "$v"
}

# build_ccl_perf BUILD-DIR VENV: builds tools/ccl/ccl_coll_perf.cc against VENV's oneCCL into
# BUILD-DIR/ccl_coll_perf when it is missing or older than the source; prints its path. RPATH
# (not RUNPATH) so that libccl.so.1's own dependency, libccl.so.2, is found in VENV/lib too.
build_ccl_perf() {
  local src=tools/ccl/ccl_coll_perf.cc bin=$1/ccl_coll_perf v=$2
  if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ]; then
    mkdir -p "$1" && g++ -O2 -std=c++17 -Wall -Wextra -I"$v/include" -o "$bin" "$src" \
      -L"$v/lib" -Wl,--disable-new-dtags,-rpath,"$v/lib" -lccl 2>&1 |
      grep -v 'libccl.so.2, needed by .* may conflict with libccl.so.1' >&2
    [ -x "$bin" ] && [ ! "$src" -nt "$bin" ] || return 1
  fi
  echo "$bin"
}
