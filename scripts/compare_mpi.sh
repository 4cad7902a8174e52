#!/usr/bin/env bash
# Open MPI's MPI_Allreduce against chorusAllReduce on one node, in the same nccl-tests table:
# for N in 2 and 4, tools/mpi/mpi_coll_perf (-C allreduce, its default) under mpirun, then build/all_reduce_perf under
# chorusrun, float32 sum, 8 B .. 256 MiB (x4), 20 iterations after 5 warm-ups.
# Usage: scripts/compare_mpi.sh [build-dir] [extra flags for both benchmarks, e.g. -e 16M]
# Needs Open MPI (apt-get install -y openmpi-bin libopenmpi-dev); builds what is missing.
# scripts/compare_ompi4.sh compares all four copy/reduce collectives, interleaved over rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
args=(-b 8 -e 256M -f 4 -n 20 -w 5 "$@")

if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  echo "compare_mpi: mpicc/mpirun not found: apt-get install -y openmpi-bin libopenmpi-dev" >&2
  exit 1
fi
if [ ! -x "$build/chorusrun" ] || [ ! -x "$build/all_reduce_perf" ]; then
  scripts/setup.sh "$build" || exit 1
fi
source scripts/compare_common.sh
mpibin=$(build_mpi_perf "$build") || exit 1

mpirun_=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
echo "### $(mpirun --version | head -n 1)"
echo "### ompi_info | grep -i btl"
ompi_info | grep -i btl | grep -v "Configure command line"
echo "### transport chosen (pml/btl selection of a 2-rank run):"
"${mpirun_[@]}" -np 2 --mca pml_base_verbose 10 --mca btl_base_verbose 10 \
  "$mpibin" -b 8 -e 8 -n 1 -w 0 2>&1 | grep -E "selected|Using .* btl" | sed -e "s/^\[[^]]*\] /  /" -e "s/ for send to .*//" |
  sort -u

status=0
for n in 2 4; do
  echo
  echo "### Open MPI, $n ranks: mpirun -np $n --bind-to none $mpibin ${args[*]}"
  "${mpirun_[@]}" -np "$n" "$mpibin" "${args[@]}" || status=1
  echo
  echo "### Chorus, $n ranks: $build/chorusrun -np $n $build/all_reduce_perf ${args[*]}"
  "$build/chorusrun" --no-prefix -np "$n" "$build/all_reduce_perf" "${args[@]}" || status=1
done
exit $status
