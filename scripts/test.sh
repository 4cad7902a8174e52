#!/usr/bin/env bash
# Builds Chorus with its tests and runs the whole suite under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
# Chorus's own segments only: other programs' /dev/shm entries come and go on their own.
shm_before=$(ls /dev/shm | grep '^chorus' | sort || true)
rc=0
# Two tests at a time (CTEST_PARALLEL_LEVEL overrides): most of a test's time its ranks wait on
# each other or on a timeout, and the suite's tests must stay exact with their cores shared. A
# test that measures the whole node is RUN_SERIAL (tests/CMakeLists.txt).
ctest --test-dir build --output-on-failure -j"${CTEST_PARALLEL_LEVEL:-2}" --timeout 900 "$@" ||
  rc=$?
if [ "$rc" -ne 0 ]; then
  # CI keeps only the end of the output: the failures' own lines last (a soak's SOAK-FAILURE
  # lines, gtest's failure lines), so that the reason survives the cut.
  t=build/Testing/Temporary
  echo "test.sh: ctest failed (status $rc): $(cut -d: -f2 "$t/LastTestsFailed.log" 2>/dev/null | tr '\n' ' ')"
  grep -hE '^\[  FAILED  \]|SOAK SUMMARY.*FAIL$|^E  ' "$t/LastTest.log" 2>/dev/null | cut -c1-300 |
    tail -n 8
  grep -ohE 'SOAK-FAILURE.*|result=FAIL:.*' "$t/LastTest.log" 2>/dev/null | cut -c1-600 | tail -n 6
  # Each gtest assertion that failed, on one line (its file and line, the values, the message).
  awk '/: Failure$/ {if (s != "") print s; s = $0; n = 0; next}
       s != "" && /^\[/ {print s; s = ""; next}
       s != "" && n < 40 {gsub(/^ +/, ""); s = s " " $0; n++}
       END {if (s != "") print s}' "$t/LastTest.log" 2>/dev/null | cut -c1-700 | tail -n 3
  exit "$rc"
fi
shm_after=$(ls /dev/shm | grep '^chorus' | sort || true)
if [ "$shm_before" != "$shm_after" ]; then
  echo "test.sh: /dev/shm changed during the tests:"
  diff <(echo "$shm_before") <(echo "$shm_after") || true
  exit 1
fi
