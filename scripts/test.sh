#!/usr/bin/env bash
# Builds Chorus with its tests and runs the whole suite under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
# Chorus's own segments only: other programs' /dev/shm entries come and go on their own.
shm_before=$(ls /dev/shm | grep '^chorus' | sort || true)
ctest --test-dir build --output-on-failure -j1 --timeout 900 "$@"
shm_after=$(ls /dev/shm | grep '^chorus' | sort || true)
if [ "$shm_before" != "$shm_after" ]; then
  echo "test.sh: /dev/shm changed during the tests:"
  diff <(echo "$shm_before") <(echo "$shm_after") || true
  exit 1
fi
