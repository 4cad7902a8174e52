#!/usr/bin/env bash
# The main job: set up, build, then run the AllReduce benchmark across 4 local ranks (processes
# started by chorusrun), sizes 8 B .. 32 MiB (x4), in the nccl-tests table format.
set -euo pipefail
cd "$(dirname "$0")/.."
# Builds only what the demo runs (the library, chorusrun, all_reduce_perf), not the test suite.
CHORUS_SETUP_TARGETS="chorusrun all_reduce_perf" scripts/setup.sh build
exec build/chorusrun -np 4 build/all_reduce_perf -b 8 -e 32M -f 4 "$@"
