#!/usr/bin/env bash
# The device check (docs/cuda.md, "The device check"; issue 30): one command for the GPU machine
# (one H100, 16 cores, no network: run scripts/device_prepare.sh here first and carry .device),
# and a CPU mode that runs anywhere (CI: after scripts/test.sh) so that the script never rots.
#
# Stages, each with its own budget (timeout -k5), its log, and a one-line summary (rc, seconds);
# no set -e: a failing stage does not lose the others. After the global deadline no stage starts.
#   probe         nvidia-smi (name, driver, compute mode, MIG), /dev/shm, compute-sanitizer, nsys
#   build         CUDA (sm_90) + the direct IPC path, tests, tools; CHORUS_PYTHON=OFF; carried
#                 googletest / nlohmann-json; ninja -j$(nproc)        (CPU mode: --build DIR)
#   gpu_*         the GPU tests, each group its own process, skips turned into failures
#                 (CHORUS_TEST_REQUIRE_GPU=1): kernels, threads, processes, then the IPC path
#                 on (direct AllReduce, matrix with counters) and with its cache off
#   sanitizer     compute-sanitizer memcheck on 2 worker processes (IPC AllReduce), if installed
#                 (GPU mode order: tests, sanitizer, bandwidth, device_perf, torch, cpu_peers,
#                 then the IPC tests with the cache off)
#   bandwidth     the device's copy bandwidth (torch, 1 GiB, CUDA events) and the PCIe limit
#                 (pinned host <-> device), the ideals of the device tools' busbw
#   device_perf   the *_perf tools on device buffers (--device, checks on) at 1, 2, 4 ranks,
#                 staged and (AllReduce) with CHORUS_CUDA_IPC=1, busbw beside the ideals
#   cpu_peers     CPU collectives (AllReduce, AllGather, ReduceScatter, Broadcast; 8 B-64 MiB
#                 x32, 2 rounds) at 16, 4, 8, 2 ranks interleaved against MPICH and oneCCL
#                 (carried) through scripts/compare_peers.sh (CPU mode: 2 ranks, to 64 KiB),
#                 then the tuner's predicted time against Chorus's there (model_check.py)
#   torch         the torch backend built against this machine's torch; chorus-torch-bench
#                 (chorus against gloo: the four collectives to 64 MiB, a DDP and an FSDP2
#                 step) at 8 and 16 ranks (CPU mode: 2 ranks, small sizes)
# In $OUT (at most 8 files): summary.txt (what is printed at the end), results.md (tables),
# results.json (stages, bandwidths, busbw), logs.tar.gz (every stage's log and raw tables).
#
# Usage: scripts/device_check.sh [--gpu | --cpu] [--build DIR] [--out DIR] [--deadline S]
#                                [--only a,b,..] [--skip a,b,..]
#   --gpu / --cpu   mode (default: --gpu when nvidia-smi lists a GPU, else --cpu)
#   --build DIR     the build directory (GPU mode: build-device, configured here; CPU mode: an
#                   existing build, e.g. build from scripts/test.sh, else one is configured)
#   --out DIR       results ($OUT, else a new /tmp/device_check.XXXXXX)
#   --deadline S    no stage starts S seconds after the start, and each stage's budget is cut
#                   to what is left (GPU 480, CPU 170)
#   --only/--skip   stage names (prefixes: gpu_ selects every GPU test stage)
# Every run: CHORUS_TIMEOUT=60 CHORUS_CUDA_TIMEOUT=30, chorusrun --timeout 90.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)
mode= build= out=${OUT:-} deadline= only= skip=
while [ $# -gt 0 ]; do
  case $1 in
    --gpu) mode=gpu; shift ;;
    --cpu) mode=cpu; shift ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    *) echo "device_check: unknown option $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$mode" ]; then
  mode=cpu
  nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && mode=gpu
fi
[ -n "$deadline" ] || { [ "$mode" = gpu ] && deadline=480 || deadline=170; }
[ -n "$out" ] || out=$(mktemp -d /tmp/device_check.XXXXXX)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/device_check_work.XXXXXX)  # logs and raw tables, packed at the end
logs=$work/logs
mkdir -p "$logs"
if [ -z "$build" ]; then
  if [ "$mode" = cpu ] && [ -x build/tests/chorus_tests ]; then build=build; else build=build-device; fi
fi
case $build in /*) ;; *) build=$root/$build ;; esac
export CHORUS_TIMEOUT=60 CHORUS_CUDA_TIMEOUT=30 CHORUS_TEST_CHORUSRUN_TIMEOUT=90
export root build work logs mode out
ncores=$(nproc)
# Written as the stages end, so that it comes back even if the command itself is killed.
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
say "### device_check $(date -u +%FT%TZ) mode $mode, $ncores cores, build $build, out $out," \
    "deadline ${deadline}s; $(git log -1 --format='%h %s' 2>/dev/null | cut -c1-80)"

# --- the stages (each runs in its own bash under timeout; stdout/stderr go to its log) ---
run_tests() {  # run_tests FILTER: chorus_tests on a gtest filter, GPU skips are failures
  local t=$work/gtest.$$ rc failed
  CHORUS_TEST_REQUIRE_GPU=1 "$build/tests/chorus_tests" --gtest_filter="$1" 2>&1 | tee "$t"
  rc=${PIPESTATUS[0]}
  # A failure is run again at once, with the debug log and synchronous launches (a device fault
  # then names its kernel); the stage's result stays the first run's.
  failed=$(sed -n -E 's/^\[  FAILED  \] ([^ ]+\.[^ ]+).*/\1/p' "$t" | grep -v '^[0-9]' | sort -u |
           head -n 8 | paste -sd: -)
  if [ "$rc" -ne 0 ] && [ -n "$failed" ]; then
    echo "### rerun of the failures with CHORUS_DEBUG=INFO CUDA_LAUNCH_BLOCKING=1: $failed"
    CHORUS_TEST_REQUIRE_GPU=1 CHORUS_DEBUG=INFO CUDA_LAUNCH_BLOCKING=1 \
      "$build/tests/chorus_tests" --gtest_filter="$failed" 2>&1 | tail -n 300
  fi
  rm -f "$t"
  return "$rc"
}
st_probe() {
  echo "## nvidia-smi"
  nvidia-smi --query-gpu=name,driver_version,compute_mode,mig.mode.current,memory.total,pcie.link.gen.max,pcie.link.width.max \
    --format=csv 2>&1 || echo "(no nvidia-smi)"
  nvidia-smi topo -m 2>&1 | head -5
  echo "## /dev/shm"; df -h /dev/shm
  echo "## tools"
  for t in compute-sanitizer nsys nvcc cmake ninja python3 g++; do
    printf '%-18s %s\n' "$t" "$(command -v "$t" || echo missing)"
  done
  nvcc --version 2>/dev/null | tail -n 2
  cmake --version | head -n 1
  python3 -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available(), "gloo", torch.distributed.is_gloo_available(),
"numpy", numpy.__version__)' 2>&1
  echo "## machine"; nproc; free -g | head -n 2; uname -r; ldd --version | head -n 1
  [ -d .device ] && cat .device/MANIFEST || echo "(no .device: scripts/device_prepare.sh not run)"
  true
}
st_build() {
  if [ "$mode" = cpu ] && [ -x "$build/tests/chorus_tests" ] && [ -x "$build/chorusrun" ]; then
    echo "CPU mode: reusing $build"; return 0
  fi
  local gen=() deps=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  # What this machine lacks travels in .device (scripts/device_prepare.sh).
  if ! dpkg -s libgtest-dev >/dev/null 2>&1 || [ "$mode" = gpu ]; then
    [ -d "$root/.device/googletest" ] && deps+=(-DCHORUS_GTEST_SRC="$root/.device/googletest")
    [ -d "$root/.device/json" ] &&
      deps+=(-Dnlohmann_json_DIR="$root/.device/json/share/cmake/nlohmann_json")
  fi
  local cuda=(-DCHORUS_CUDA=AUTO)
  [ "$mode" = gpu ] && cuda=(-DCHORUS_CUDA=ON -DCHORUS_CUDA_IPC=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  # The Python package is off at first (the torch stage turns it on, in the same directory).
  local py=()
  [ -f "$build/CMakeCache.txt" ] || py=(-DCHORUS_PYTHON=OFF)
  [ -f "$build/CMakeCache.txt" ] && gen=()
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda[@]}" \
    "${py[@]}" "${deps[@]}" || return 1
  cmake --build "$build" -j"$ncores" --target chorus_tests chorus_cuda_worker chorusrun \
    all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf
}
st_gpu_kernels() { run_tests 'CudaGpu.*'; }
st_gpu_threads() { run_tests 'SharedGpu/CudaGpuThreads.*'; }
st_gpu_procs() { run_tests 'SharedGpu/CudaGpuProcesses.*'; }
# CHORUS_DEVICE_IPC_FILTER narrows the IPC groups for a short rerun (e.g. '*CudaGpuIpcDirect*').
# Without the cache only the direct tests run: the matrix with the cache off takes 80 s of the
# GPU machine's minutes (first run, 2026-11-28) and adds little to the one with it on.
export ipc_filter=${CHORUS_DEVICE_IPC_FILTER:-*CudaGpuIpc*}  # read by the stage's own bash
st_gpu_ipc() { CHORUS_DEBUG=WARN run_tests "$ipc_filter"; }
st_gpu_ipc_nocache() {
  CHORUS_CUDA_IPC_CACHE=0 CHORUS_DEBUG=WARN run_tests "${CHORUS_DEVICE_IPC_FILTER:-*CudaGpuIpcDirect*}"
}
st_sanitizer() {
  command -v compute-sanitizer >/dev/null || { echo "skipped: no compute-sanitizer"; return 0; }
  CHORUS_CUDA_IPC=1 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
    "$build/chorusrun" --timeout 90 -np 2 "$build/tests/chorus_cuda_worker" --ipc-allreduce
}
st_bandwidth() {
  python3 - "$work/bandwidth.json" <<'PY'
import json, sys, torch
# Copy bandwidth of the device (1 GiB, device to device) and the PCIe limit of host staging
# (pinned host memory to the device and back), CUDA events, best of 5 after a warm-up.
n = 1 << 30
d0 = torch.empty(n, dtype=torch.uint8, device="cuda")
d1 = torch.empty_like(d0)
h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
def best(fn, reps=5):
    fn(); torch.cuda.synchronize()
    b = float("inf")
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record(); torch.cuda.synchronize()
        b = min(b, e0.elapsed_time(e1) / 1e3)
    return n / b / 1e9
r = {"device": torch.cuda.get_device_name(0),
     "d2d_copy_GBps": best(lambda: d1.copy_(d0)),  # bytes copied / s (read + write = 2x traffic)
     "h2d_GBps": best(lambda: d0.copy_(h, non_blocking=True)),
     "d2h_GBps": best(lambda: h.copy_(d0, non_blocking=True))}
print(json.dumps(r, indent=1))
json.dump(r, open(sys.argv[1], "w"))
PY
}
st_device_perf() {
  local np c flags="-b 8 -e 64M -f 8 -n 20 -w 5 -c 1" bad=0
  # The latency of one small call after a long warm-up (staged, then the IPC path), 2 ranks.
  for c in 0 1; do
    echo "## latency 8 B all_reduce np=2 CHORUS_CUDA_IPC=$c"
    CHORUS_CUDA_IPC=$c "$build/chorusrun" --timeout 90 --no-prefix -np 2 "$build/all_reduce_perf" \
      --device -b 8 -e 8 -n 500 -w 100 -c 1 >"$work/dev_latency_ipc$c.txt" 2>&1 ||
      { echo "FAILED: latency CHORUS_CUDA_IPC=$c (rc $?)"; bad=1; }
    grep -v '^#' "$work/dev_latency_ipc$c.txt" | head -n 3
  done
  for np in 1 2 4; do
    for c in all_reduce all_gather reduce_scatter broadcast; do
      echo "## staged $c np=$np"
      # shellcheck disable=SC2086
      "$build/chorusrun" --timeout 90 --no-prefix -np $np "$build/${c}_perf" --device $flags \
        >"$work/dev_${c}_np${np}.txt" 2>&1 || { echo "FAILED: staged $c np=$np (rc $?)"; bad=1; }
      tail -n 4 "$work/dev_${c}_np${np}.txt"
    done
    echo "## IPC all_reduce np=$np"
    # shellcheck disable=SC2086
    CHORUS_CUDA_IPC=1 "$build/chorusrun" --timeout 90 --no-prefix -np $np \
      "$build/all_reduce_perf" --device $flags >"$work/dev_ipc_all_reduce_np${np}.txt" 2>&1 ||
      { echo "FAILED: IPC all_reduce np=$np (rc $?)"; bad=1; }
    tail -n 4 "$work/dev_ipc_all_reduce_np${np}.txt"
  done
  return $bad
}
st_cpu_peers() {
  # Most ranks first (the 2-rank table exists from the first GPU run; 256 MiB took most of its
  # 157 s there), 8 B-64 MiB.
  local nps=${CHORUS_DEVICE_PEER_RANKS:-16 4 8 2} sizes="-b 8 -e 64M -f 32"
  local iters="-n 5 -w 2 --small_iters 100"  # 100 timed calls to 64 KiB: 5 told little there
  local rounds=2 libs= np rc=0
  if [ "$mode" = cpu ]; then nps=2 sizes="-b 8 -e 64K -f 16" iters="-n 5 -w 1" rounds=1; fi
  # MPICH: the carried wheel unpacked (its mpicc finds its prefix from its own path), under
  # the names compare_peers.sh asks for; else Debian's mpich where installed. Unpacked into the
  # build directory (kept between runs), since the harnesses built there keep its path (rpath).
  local w dep=$build/device_deps
  w=$(ls "$root"/.device/wheels/mpich-*.whl 2>/dev/null | head -n 1)
  if [ -n "$w" ] && ! command -v mpiexec.mpich >/dev/null; then
    if [ ! -d "$dep/mpich" ] || [ "$w" -nt "$dep/mpich" ]; then
      rm -rf "$dep/mpich" "$build/mpi_coll_perf_mpich"
      python3 -m zipfile -e "$w" "$dep/mpich" || return 1
    fi
    local d=("$dep"/mpich/mpich-*.data/data)
    chmod +x "${d[0]}"/bin/*
    mkdir -p "$dep/bin"
    for t in mpicc mpiexec mpichversion; do
      printf '#!/bin/sh\nexec %s "$@"\n' "${d[0]}/bin/$t" >"$dep/bin/$t.mpich"
      chmod +x "$dep/bin/$t.mpich"
    done
    ln -sf mpichversion.mpich "$dep/bin/mpichversion"
    export PATH=$dep/bin:$PATH
  fi
  command -v mpiexec.mpich >/dev/null && libs=mpich
  local ccl=() c=$root/.device/ccl.tar.xz
  if [ -f "$c" ]; then
    if [ ! -d "$dep/ccl" ] || [ "$c" -nt "$dep/ccl" ]; then
      rm -rf "$dep/ccl" "$build/ccl_coll_perf"
      mkdir -p "$dep/ccl" && tar -C "$dep/ccl" -xJf "$c" || return 1
    fi
    ccl=(--ccl-venv "$dep/ccl") && libs=${libs:+$libs,}ccl
  fi
  [ -n "$libs" ] || { echo "no MPICH or oneCCL here: Chorus alone"; libs=none; }
  for np in $nps; do
    echo "## $np ranks"
    "$root/scripts/compare_peers.sh" --build "$build" --np "$np" --rounds "$rounds" \
      --libs "$libs" "${ccl[@]}" --sizes "$sizes" --iters "$iters" \
      --out "$work/peers_np$np" >"$work/peers_np$np.md" 2>&1 || rc=1
    cat "$work/peers_np$np.md"
    # The tuner's model against those Chorus launches (each row's predicted_time in its -J
    # document): on many cores the model has only this VM's fits, scaled by hand-offs and bytes
    # (docs/model.md), so this is how far they carry to another node.
    echo "## The model against Chorus's times, $np ranks (predicted / measured median)"
    if python3 "$root/scripts/model_check.py" "$work/peers_np$np"/chorus_*.json \
      >"$work/model_np$np.md"; then
      sed -n '/^| ranks | collective/,$p' "$work/model_np$np.md"
    else
      rc=1
    fi
  done
  return $rc
}

st_torch() {
  local py=${CHORUS_DEVICE_PYTHON:-python3} nps=${CHORUS_DEVICE_TORCH_NPS:-16 8} e=64M r=3 per=110
  [ "$mode" = cpu ] && nps=2 e=64K r=1 per=90
  # CPU mode uses the build's own torch backend (nothing to build); GPU mode builds it against
  # this machine's torch, in the same build directory (an up-to-date build is a no-op).
  if [ "$mode" = cpu ]; then
    [ -x "$build/chorus-torch-bench" ] ||
      { echo "skipped: no torch backend in $build (chorus-torch-bench)"; return 0; }
  else
    if [ ! -x "$build/chorus-torch-bench" ]; then
      local pyb
      pyb=$("$py" -m pybind11 --cmakedir 2>/dev/null)
      cmake "$build" -DCHORUS_PYTHON=ON -DCHORUS_TORCH=ON \
        -DPython3_EXECUTABLE="$(command -v "$py")" ${pyb:+-Dpybind11_DIR="$pyb"} || return 1
    fi
    cmake --build "$build" -j"$ncores" --target chorus_python || return 1
  fi
  local np rc=0
  for np in $nps; do
    local ops=all_reduce,broadcast,all_gather,reduce_scatter,ddp,fsdp2
    echo "## chorus-torch-bench -np $np -e $e -r $r --ops $ops"
    timeout -k5 "$per" "$build/chorus-torch-bench" -np "$np" -e "$e" -r "$r" --ops "$ops" \
      --json "$work/torch_np$np.json" >"$work/torch_np$np.txt" 2>&1 || rc=1
    cat "$work/torch_np$np.txt"
  done
  return $rc
}
export -f run_tests st_probe st_build st_gpu_kernels st_gpu_threads st_gpu_procs st_gpu_ipc \
  st_gpu_ipc_nocache st_sanitizer st_bandwidth st_device_perf st_cpu_peers st_torch
export ncores

# --- the runner ---
results=()
selected() {  # selected NAME: --only / --skip (comma lists of names or prefixes)
  local n=$1 x
  if [ -n "$only" ]; then
    local hit=0
    for x in ${only//,/ }; do [[ $n == "$x"* ]] && hit=1; done
    [ $hit = 1 ] || return 1
  fi
  for x in ${skip//,/ }; do [[ $n == "$x"* ]] && return 1; done
  return 0
}
stage() {  # stage NAME BUDGET-SECONDS NEEDS (gpu|any)
  local name=$1 budget=$2 needs=$3 now left t0 rc line
  selected "$name" || { results+=("$name skipped (not selected)"); return; }
  if [ "$needs" = gpu ] && [ "$mode" != gpu ]; then
    line=$(printf '%-16s skipped: no GPU' "$name"); say "$line"; results+=("$line"); return
  fi
  now=$(date +%s)
  left=$((start + deadline - now))
  if [ "$left" -lt 10 ]; then
    line=$(printf '%-16s not started: past the deadline (%ss)' "$name" "$deadline")
    say "$line"; results+=("$line"); return
  fi
  [ "$budget" -gt "$left" ] && budget=$left
  t0=$(date +%s)
  timeout -k5 "$budget" bash -c "st_$name" >"$logs/$name.log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - t0)) verdict=ok
  [ $rc -ne 0 ] && verdict=FAILED
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict="TIMED OUT (budget ${budget}s)"
  grep -q '^skipped: ' "$logs/$name.log" && verdict=$(grep -m1 '^skipped: ' "$logs/$name.log")
  line=$(printf '%-16s rc %3d %4ds  %s' "$name" "$rc" "$secs" "$verdict")
  # gtest's counts, where the stage ran tests
  local g
  g=$(sed '/^### rerun/q' "$logs/$name.log" | grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]' |
      sed -E 's/^\[ +([A-Z]+) +\] ([0-9]+) tests?.*/\1 \2/' | tr '\n' ' ')
  [ -n "$g" ] && line="$line  ($g)"
  say "$line"
  results+=("$line")
}

if [ "$mode" = gpu ]; then
  stage probe 20 any
  stage build 180 any
  stage gpu_kernels 60 gpu
  stage gpu_threads 60 gpu
  stage gpu_procs 75 gpu
  stage gpu_ipc 90 gpu
  stage sanitizer 90 gpu
  stage bandwidth 30 gpu
  stage device_perf 90 gpu
  # The torch stage before the CPU peers (the first GPU run never reached it), 16 ranks first.
  stage torch 240 any
  stage cpu_peers 240 any
  stage gpu_ipc_nocache 60 gpu
else
  stage probe 20 any
  stage build 600 any
  for s in gpu_kernels gpu_threads gpu_procs gpu_ipc gpu_ipc_nocache bandwidth device_perf \
           sanitizer; do
    stage "$s" 0 gpu
  done
  # The switch that turns GPU-test skips into failures works: without a GPU this must fail.
  if selected require_switch; then
    t0=$(date +%s)
    CHORUS_TEST_REQUIRE_GPU=1 timeout -k5 60 "$build/tests/chorus_tests" \
      --gtest_filter='CudaGpu.RequireGpuSwitch' >"$logs/require_switch.log" 2>&1
    rc=$? v="ok (the test failed, as it must without a GPU)"
    [ $rc -eq 1 ] || v="FAILED: expected the test to fail (rc 1) under CHORUS_TEST_REQUIRE_GPU=1"
    line=$(printf '%-16s rc %3d %4ds  %s' require_switch "$rc" "$(($(date +%s) - t0))" "$v")
    say "$line"
    results+=("$line")
    timeout -k5 60 "$build/tests/chorus_tests" --gtest_filter='*CudaGpu*' >"$logs/gpu_tests_skip.log" 2>&1
    say "$(printf '%-16s rc %3d        %s' gpu_tests_skip "$?" \
      "$(grep -E '^\[  (PASSED|SKIPPED) +\] [0-9]+ test' "$logs/gpu_tests_skip.log" |
        sed -E 's/^\[ +([A-Z]+) +\] ([0-9]+) tests?.*/\1 \2/' | tr '\n' ' ')")"
  fi
  stage cpu_peers 60 any
  stage torch 90 any
fi

# --- results: tables and JSON ---
python3 - "$work" "$out" "$mode" "$summary" <<'PY' 2>>"$logs/results.log"
import glob, json, os, re, sys
sys.path.insert(0, "scripts")
from nccl_table import size_label
work, out, mode, summary = sys.argv[1:5]
res = {"mode": mode, "stages": [l.rstrip("\n") for l in open(summary) if not l.startswith("###")]}
md = [f"# Device check ({mode} mode)", "", "```"] + res["stages"] + ["```", ""]
bw = {}
if os.path.exists(f"{work}/bandwidth.json"):
    bw = json.load(open(f"{work}/bandwidth.json"))
    res["bandwidth"] = bw
    md += [f"Device {bw['device']}: device-to-device copy {bw['d2d_copy_GBps']:.0f} GB/s; PCIe "
           f"(pinned) host to device {bw['h2d_GBps']:.1f} GB/s, device to host "
           f"{bw['d2h_GBps']:.1f} GB/s.", ""]
def busbw(path):  # {bytes: (busbw out of place, #wrong)} of an nccl-tests table
    t = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit() and f[2] == "float":
            try:
                t[int(f[0])] = (float(f[7]), f[8])
            except ValueError:
                pass
    return t
dev = sorted(glob.glob(f"{work}/dev_*_np*.txt"))
if dev:
    # The ideal busbw of an AllReduce of S bytes on n ranks sharing the one GPU (docs/cuda.md,
    # "GPU checks"): the direct IPC path must read n*S and write n*S bytes of HBM, so with the
    # copy bandwidth Bc counted as bytes read plus written (2x the copy rate) busbw is at most
    # Bc*(n-1)/n^2; host staging moves n*S bytes down and n*S up through PCIe (both directions at
    # once), so busbw is at most P*2(n-1)/n^2 with P the slower direction.
    pcie = min(bw.get("h2d_GBps", 0), bw.get("d2h_GBps", 0)) or None
    d2d = bw.get("d2d_copy_GBps")
    md += ["## CUDA tools on device buffers (busbw GB/s, out of place, the 3 largest sizes; "
           "ideal: AllReduce only)", "",
           "| run | size | busbw | #wrong | ideal | % of ideal |", "|---|---:|---:|---:|---:|---:|"]
    res["device_perf"] = {}
    for p in dev:
        name = os.path.basename(p)[4:-4]
        n = int(re.findall(r"np(\d+)", name)[-1])
        t = busbw(p)
        res["device_perf"][name] = {str(k): v[0] for k, v in t.items()}
        ideal = None
        if "all_reduce" in name and n > 1:
            base = (2 * d2d if d2d else None) if "ipc" in name else (2 * pcie if pcie else None)
            ideal = base * (n - 1) / n**2 if base else None
        if not t:
            md.append(f"| {name} | - | no table (failed: see logs.tar.gz) | | | |")
        for s in sorted(t)[-3:]:
            b, wrong = t[s]
            pct = f"{100 * b / ideal:.0f}" if ideal else "-"
            md.append(f"| {name} | {size_label(s)} | {b:.2f} | {wrong} | "
                      f"{f'{ideal:.1f}' if ideal else '-'} | {pct} |")
    md.append("")
for p in sorted(glob.glob(f"{work}/peers_np*.md"), key=lambda x: int(re.findall(r"\d+", x)[-1])):
    md += [f"## CPU collectives against MPICH / oneCCL: {os.path.basename(p)[8:-3]} ranks", ""]
    md += [l.rstrip("\n") for l in open(p)] + [""]
    m = p.replace("peers_np", "model_np")
    if os.path.exists(m):  # the tuner's predictions against those Chorus launches
        md += ["### The model against Chorus's times there (scripts/model_check.py)", ""]
        md += [l.rstrip("\n") for l in open(m)] + [""]
for p in sorted(glob.glob(f"{work}/torch_np*.txt"), key=lambda x: int(re.findall(r"\d+", x)[-1])):
    md += [f"## chorus-torch-bench (chorus against gloo): {os.path.basename(p)[8:-4]} ranks", "",
           "```"] + [l.rstrip("\n") for l in open(p)][-200:] + ["```", ""]
    j = p[:-4] + ".json"
    if os.path.exists(j):
        try:
            res.setdefault("torch", {})[os.path.basename(j)] = json.load(open(j))
        except ValueError:
            pass
open(f"{out}/results.md", "w").write("\n".join(md) + "\n")
json.dump(res, open(f"{out}/results.json", "w"), indent=1)
PY
cp "$work"/*.txt "$work"/*.md "$work"/*.json "$logs"/ 2>/dev/null
for d in "$work"/peers_np*; do [ -d "$d" ] && cp -r "$d" "$logs"/; done
tar -C "$work" -czf "$out/logs.tar.gz" logs 2>/dev/null
echo
say "### device_check done in $(($(date +%s) - start)) s; results in $out:" \
    "$(cd "$out" && ls | tr '\n' ' ')"
rm -rf "$work"
fail=0
for r in "${results[@]}"; do [[ $r == *FAILED* || $r == *"TIMED OUT"* ]] && fail=1; done
exit $fail
