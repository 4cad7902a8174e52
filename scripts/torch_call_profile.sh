#!/usr/bin/env bash
# Where a torch.distributed all_reduce of 8 bytes spends its instructions (valgrind's callgrind,
# which counts instructions, so the figures do not depend on the VM's speed of the moment):
# the whole call (the difference between 12,000 and 2,000 calls), torch's C++ side
# (c10d::ProcessGroup::allreduce, inclusive), the chorus backend (ProcessGroupChorus::allreduce)
# and the library (chorusAllReduce). One rank; the build's package with .venv's torch.
# Usage: scripts/torch_call_profile.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
py=$(scripts/venv.sh)/bin/python
loop=$PWD/tools/torch_bench/allreduce_loop.py
pkg=$(cd "$build/python" && pwd)
count() {  # count CALLS [toggle]
  local out
  out=$(cd /tmp && MASTER_PORT=$((29600 + RANDOM % 300)) PYTHONPATH=$pkg \
    valgrind --tool=callgrind --callgrind-out-file=/dev/null ${2:+--toggle-collect="$2"} \
    "$py" -B "$loop" "$1" 2>&1) || { echo "torch_call_profile: the run failed:" >&2; echo "$out" >&2; exit 1; }
  echo "$out" | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
a=$(count 2000); b=$(count 12000)
whole=$(((b - a) / 10000))
cxx=$(($(count 2000 'c10d::ProcessGroup::allreduce*') / 2200))
backend=$(($(count 2000 'chorus_torch::ProcessGroupChorus::allreduce*') / 2200))
lib=$(($(count 2000 'chorusAllReduce*') / 2200))
echo "instructions per dist.all_reduce (8 bytes, 1 rank):"
echo "  whole call                     $whole"
echo "  torch Python wrapper           $((whole - cxx))"
echo "  torch C++ dispatch             $((cxx - backend))"
echo "  chorus backend (without lib)   $((backend - lib))"
echo "  chorus library                 $lib"
