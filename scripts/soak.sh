#!/usr/bin/env bash
# The soak (tools/soak/README.md): random collectives, splits, aborts and SIGKILLed kill jobs on
# 4..8 ranks, as processes then as threads, for MINUTES (default 30) minutes; every result
# checked, no hang, no growth of descriptors, /dev/shm names, threads or RSS.
#   scripts/soak.sh [BUILD=build] [MINUTES=30] [chorus-soak options, e.g. --seed N]
# Exits non-zero on any failure; the last line is the summary (SOAK SUMMARY ... -> PASS|FAIL).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
minutes=${2:-30}
shift $(($# > 2 ? 2 : $#))
if [ ! -x "$build/chorus-soak" ]; then
  cmake --build "$build" --target chorus-soak
fi
seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
exec "$build/chorus-soak" --seconds "$seconds" "$@"
