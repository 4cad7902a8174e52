#!/usr/bin/env bash
# chorus's numpy API against mpi4py on Open MPI: float32 sum all_reduce, out of place and in
# place, 8 B to 64 MiB, 2 local ranks pinned to cores by both launchers
# (tools/py_bench/np_allreduce.py). Launches alternate library by library for `rounds` rounds
# (this machine's speed changes for seconds at a time: one launch proves nothing); prints the best
# and the median over the launches per size (each launch reports its best of 3 timed loops).
# Usage: scripts/compare_numpy.sh [build-dir (build)] [rounds (5)] [max bytes (64M)] [nranks (2)]
# Needs Open MPI (apt-get install -y openmpi-bin libopenmpi-dev); installs mpi4py==4.1.2 into
# the interpreter's environment when it is missing. PYTHON picks the interpreter (.venv/bin/python).
# BEFORE_PYTHONPATH=<dir holding an older chorus package> adds a third launch per round, labelled
# "before" (chorusrun from build-dir), for before/after tables.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
maxb=${3:-64M}
np=${4:-2}
py=${PYTHON:-$PWD/.venv/bin/python}
mpirun=$(command -v mpirun.openmpi || command -v mpirun) ||
  { echo "no mpirun: apt-get install -y openmpi-bin libopenmpi-dev" >&2; exit 1; }
[ -x "$build/chorusrun" ] && [ -d "$build/python/chorus" ] ||
  { echo "$build has no chorusrun or python/chorus: build the chorus_python target" >&2; exit 1; }
"$py" -c "import mpi4py" 2>/dev/null || "$py" -m pip install -q mpi4py==4.1.2 || exit 1
bench=tools/py_bench/np_allreduce.py
out=$(mktemp -d /tmp/compare_numpy.XXXXXX)
echo "### $(date -u +%FT%TZ) $(nproc) cores, $np ranks, $rounds rounds, results in $out"
echo "# chorus: PYTHONPATH=$build/python $build/chorusrun -np $np $py $bench chorus --max $maxb"
echo "# mpi4py: $mpirun -np $np --bind-to core --allow-run-as-root $py $bench mpi --max $maxb"
before=${BEFORE_PYTHONPATH:-}
[ -n "$before" ] && echo "# before: PYTHONPATH=$before, the same chorusrun, --label before"
for ((r = 0; r < rounds; r++)); do
  if [ -n "$before" ]; then
    PYTHONPATH="$before" timeout 600 "$build/chorusrun" -np "$np" --no-prefix "$py" "$bench" \
      chorus --label before --max "$maxb" >"$out/before_$r.txt" 2>&1 ||
      echo "before launch $r failed (see $out)"
  fi
  PYTHONPATH="$build/python" timeout 600 "$build/chorusrun" -np "$np" --no-prefix "$py" "$bench" \
    chorus --max "$maxb" >"$out/chorus_$r.txt" 2>&1 || echo "chorus launch $r failed (see $out)"
  OMPI_MCA_rmaps_base_oversubscribe=1 timeout 600 "$mpirun" -np "$np" --bind-to core \
    --allow-run-as-root "$py" "$bench" mpi --max "$maxb" >"$out/mpi_$r.txt" 2>&1 ||
    echo "mpi4py launch $r failed (see $out)"
done
"$py" - "$out" <<'EOF'
import collections, glob, statistics, sys
t = collections.defaultdict(list)  # (label, bytes, mode) -> [us per launch]
for f in glob.glob(sys.argv[1] + "/*.txt"):
    for line in open(f):
        w = line.split()
        if len(w) == 5 and w[0] == "RESULT":
            t[(w[1], int(w[2]), w[3])].append(float(w[4]))
labels = [x for x in ("before", "chorus", "mpi") if any(k[0] == x for k in t)]
name = {"before": "chorus before", "chorus": "chorus", "mpi": "mpi4py"}
def size(b):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s} {unit}"
    return f"{b} B"
head = ["size", "mode"] + [f"{name[x]} {w}" for x in labels for w in ("best", "median")]
head += ["mpi4py/chorus best", "median", "launches"]
print("| " + " | ".join(head) + " |")
print("| ---: | --- |" + " ---: |" * (len(head) - 3) + " --- |")
for b, mode in sorted({(k[1], k[2]) for k in t}, key=lambda k: (k[0], k[1] != "oop")):
    v = {x: t.get((x, b, mode), []) for x in labels}
    row = [size(b), "out of place" if mode == "oop" else "in place"]
    for x in labels:
        row += [f"{min(v[x]):.2f} us", f"{statistics.median(v[x]):.2f} us"] if v[x] else ["-", "-"]
    c, m = v.get("chorus"), v.get("mpi")
    if c and m:
        row += [f"{min(m) / min(c):.2f}x", f"{statistics.median(m) / statistics.median(c):.2f}x"]
    else:
        row += ["-", "-"]
    row.append("+".join(str(len(v[x])) for x in labels))
    print("| " + " | ".join(row) + " |")
EOF
