#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (a separate build, build-fuzz/) and runs each
# for a fixed budget, one per core at a time (FUZZ_JOBS). Exits 0 with "skipped: ..." when clang
# (with its libFuzzer runtime) is not available and cannot be installed; exits 1 when a target
# finds a crash or a broken invariant.
#
#   fuzz/run.sh                 every target, FUZZ_SECONDS (default 20) seconds each
#   FUZZ_SECONDS=300 fuzz/run.sh fuzz_hello fuzz_root
#
# Corpora grow in build-fuzz/corpus/<target>/, crashes land in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${FUZZ_SECONDS:-20}
build=${FUZZ_BUILD_DIR:-build-fuzz}

if ! scripts/clang_setup.sh; then
  echo "fuzz/run.sh: skipped: clang not available (install clang and libclang-rt-<version>-dev)"
  exit 0
fi

mkdir -p "$build"
log0="$build/fuzz-build.log"
CC=clang CXX=clang++ cmake -S fuzz -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$log0" 2>&1 ||
  { cat "$log0"; echo "fuzz/run.sh: configure failed"; exit 1; }
if ! grep -q 'CHORUS_HAVE_LIBFUZZER:INTERNAL=1' "$build/CMakeCache.txt"; then
  echo "fuzz/run.sh: skipped: clang cannot link -fsanitize=fuzzer (install $(scripts/clang_setup.sh --rt-package || echo libclang-rt-dev))"
  exit 0
fi
cmake --build "$build" -j"$(nproc)" >>"$log0" 2>&1 ||
  { tail -50 "$log0"; echo "fuzz/run.sh: build failed"; exit 1; }

targets=("$@")
[ ${#targets[@]} -gt 0 ] ||
  targets=(fuzz_hello fuzz_round fuzz_challenge fuzz_id fuzz_root fuzz_data_hello fuzz_frames fuzz_notice fuzz_shrink)
mkdir -p "$build/artifacts"
# One target per core at a time (FUZZ_JOBS overrides): each is one single-threaded process.
jobs=${FUZZ_JOBS:-$(nproc)}
run_one() {
  local t=$1 log="$build/$1.log"
  mkdir -p "$build/corpus/$t"
  if "$build/$t" "$build/corpus/$t" -max_total_time="$budget" -timeout=20 -rss_limit_mb=4096 \
      -max_len=4096 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" >"$log" 2>&1; then
    echo 0 >"$build/$t.status"
  else
    echo 1 >"$build/$t.status"
  fi
}
echo "fuzz/run.sh: ${#targets[@]} targets, ${budget}s each, $jobs at a time"
running=0
for t in "${targets[@]}"; do
  rm -f "$build/$t.status"
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
status=0
for t in "${targets[@]}"; do
  log="$build/$t.log"
  if [ "$(cat "$build/$t.status" 2>/dev/null)" = 0 ]; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz/run.sh: $t ok (${runs:-?} inputs, ${cov:-cov: ?})"
  else
    status=1
    echo "fuzz/run.sh: $t FAILED; last lines of $log:"
    tail -40 "$log"
  fi
done
exit $status
