#!/usr/bin/env bash
# chorus's numpy API against mpi4py on Open MPI and on MPICH: float32 sum all_reduce, out of place
# and in place, 8 B to 64 MiB, 2 local ranks pinned to cores by every launcher (more ranks than
# cores: chorusrun's placement, the MPI launchers unbound) (tools/py_bench/np_allreduce.py). Launches alternate library by library for `rounds` rounds
# (this machine's speed changes for seconds at a time: one launch proves nothing); prints the best
# and the median over the launches per size (each launch reports its best of 3 timed loops).
# Usage: scripts/compare_numpy.sh [build-dir (build)] [rounds (5)] [max bytes (64M)] [nranks (2)]
# PEERS=ompi,mpich (the default) picks the mpi4py builds to run beside chorus:
#  - ompi: mpi4py on Open MPI (apt-get install -y openmpi-bin libopenmpi-dev), launched with
#    mpirun.openmpi --bind-to core; installs mpi4py==4.1.2 into the interpreter's environment when
#    it is missing (PyPI's wheel, which loads Debian's default libmpi.so, Open MPI's);
#  - mpich: mpi4py on MPICH (apt-get install -y mpich libmpich-dev), launched with mpiexec.mpich
#    -bind-to core; mpi4py==4.1.2 compiled from its source with mpicc.mpich into a directory of its
#    own, created where missing ($MPICH_MPI4PY, or BUILD/mpi4py-mpich), which only its launches
#    put first on PYTHONPATH: the same interpreter and numpy as the other two.
# OMPI_MPI4PY=<dir>: mpi4py for Open MPI installed into that directory (pip --target, PyPI's
# wheel) and put first on PYTHONPATH for its launches only, instead of into the interpreter's
# environment (scripts/perf_page.sh uses BUILD/mpi4py-ompi).
# PYTHON picks the interpreter (.venv/bin/python). NUMPY_OUT=<dir> keeps the launches' output
# there (default: a new /tmp/compare_numpy.XXXXXX).
# BEFORE_PYTHONPATH=<dir holding an older chorus package> adds a launch per round, labelled
# "before" (chorusrun from build-dir), for before/after tables.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
maxb=${3:-64M}
np=${4:-2}
py=${PYTHON:-$PWD/.venv/bin/python}
peers=${PEERS:-ompi,mpich}
mpi4py_version=4.1.2
[ -x "$build/chorusrun" ] && [ -d "$build/python/chorus" ] ||
  { echo "$build has no chorusrun or python/chorus: build the chorus_python target" >&2; exit 1; }
mpirun= mpich= ompiPath=${OMPI_MPI4PY:+$(realpath -m "$OMPI_MPI4PY")}
case ",$peers," in *,ompi,*)
  mpirun=$(command -v mpirun.openmpi || command -v mpirun) ||
    { echo "no mpirun: apt-get install -y openmpi-bin libopenmpi-dev" >&2; exit 1; }
  if [ -n "$ompiPath" ]; then
    PYTHONPATH="$ompiPath" "$py" -c "import mpi4py, sys; sys.exit(not mpi4py.__file__.startswith(
      '$ompiPath/'))" 2>/dev/null || "$py" -m pip install -q --target "$ompiPath" \
      "mpi4py==$mpi4py_version" || exit 1
  else
    "$py" -c "import mpi4py" 2>/dev/null || "$py" -m pip install -q "mpi4py==$mpi4py_version" ||
      exit 1
  fi ;;
esac
case ",$peers," in *,mpich,*)
  command -v mpiexec.mpich >/dev/null && command -v mpicc.mpich >/dev/null ||
    { echo "no MPICH: apt-get install -y mpich libmpich-dev" >&2; exit 1; }
  mpich=$(realpath -m "${MPICH_MPI4PY:-$build/mpi4py-mpich}")
  # Its own build, never a cached wheel (which may be the Open MPI one): --no-binary compiles the
  # source release against mpicc.mpich's headers and libmpich.so.12.
  PYTHONPATH="$mpich" "$py" -c "import mpi4py, sys; sys.exit(not (mpi4py.__file__.startswith(
    '$mpich/') and mpi4py.__version__ == '$mpi4py_version'))" 2>/dev/null ||
    MPICC=mpicc.mpich "$py" -m pip install -q --no-cache-dir --no-binary mpi4py --upgrade \
      --target "$mpich" "mpi4py==$mpi4py_version" || exit 1
  # Debian's libmpich.so.12, or the libmpi.so.12 of PyPI's mpich wheel (a path with "mpich").
  # (not `ldd | grep -q`: grep's early exit fails the pipeline under pipefail)
  [[ $(ldd "$mpich"/mpi4py/MPI.*.so) == *mpich* ]] ||
    { echo "$mpich/mpi4py is not linked with MPICH: remove it and rerun" >&2; exit 1; } ;;
esac
[ -n "$mpirun$mpich" ] || { echo "PEERS=$peers names neither ompi nor mpich" >&2; exit 2; }
# Both launchers refuse to bind more ranks than cores to cores: unbound then.
ompiBind=(--bind-to core) mpichBind=(-bind-to core)
[ "$np" -gt "$(nproc)" ] && ompiBind=(--bind-to none) mpichBind=(-bind-to none)
bench=tools/py_bench/np_allreduce.py
out=${NUMPY_OUT:-}
[ -n "$out" ] && mkdir -p "$out" || out=$(mktemp -d /tmp/compare_numpy.XXXXXX)
echo "### $(date -u +%FT%TZ) $(nproc) cores, $np ranks, $rounds rounds, results in $out;" \
  "$(uptime | sed 's/.*load/load/')"
echo "# chorus: PYTHONPATH=$build/python $build/chorusrun -np $np $py $bench chorus --max $maxb"
# The MPI library each mpi4py loads, e.g. "Open MPI v4.1.4", "MPICH 4.0.2 ch4:ucx" (MPI not
# initialized: MPI_Get_library_version needs no MPI_Init).
libver() {
  PYTHONPATH=${1:-} "$py" - <<'EOF'
import mpi4py
mpi4py.rc.initialize = False
from mpi4py import MPI
lines = MPI.Get_library_version().replace("\0", "").splitlines()
d = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
if "MPICH Version" in d:
    print("MPICH", d["MPICH Version"], d.get("MPICH Device", ""))
else:
    print(lines[0].split(",")[0].strip())
EOF
}
[ -n "$mpirun" ] && echo "# mpi4py $mpi4py_version on $(libver "$ompiPath"):" \
  "${ompiPath:+PYTHONPATH=$ompiPath }$mpirun -np $np ${ompiBind[*]}" \
  "--allow-run-as-root $py $bench mpi --max $maxb"
[ -n "$mpich" ] && echo "# mpi4py $mpi4py_version on $(libver "$mpich"): PYTHONPATH=$mpich" \
  "mpiexec.mpich ${mpichBind[*]} -n $np $py $bench mpi --label mpich --max $maxb"
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
  if [ -n "$mpirun" ]; then
    PYTHONPATH="$ompiPath" OMPI_MCA_rmaps_base_oversubscribe=1 timeout 600 "$mpirun" -np "$np" \
      "${ompiBind[@]}" \
      --allow-run-as-root "$py" "$bench" mpi --max "$maxb" >"$out/mpi_$r.txt" 2>&1 ||
      echo "mpi4py (Open MPI) launch $r failed (see $out)"
  fi
  if [ -n "$mpich" ]; then
    PYTHONPATH="$mpich" timeout 600 mpiexec.mpich "${mpichBind[@]}" -n "$np" "$py" "$bench" mpi \
      --label mpich --max "$maxb" >"$out/mpich_$r.txt" 2>&1 ||
      echo "mpi4py (MPICH) launch $r failed (see $out)"
  fi
done
echo "### $(date -u +%FT%TZ) done; $(uptime | sed 's/.*load/load/')"
"$py" - "$out" <<'EOF'
import collections, glob, statistics, sys
t = collections.defaultdict(list)  # (label, bytes, mode) -> [us per launch]
for f in glob.glob(sys.argv[1] + "/*.txt"):
    for line in open(f):
        w = line.split()
        if len(w) == 5 and w[0] == "RESULT":
            t[(w[1], int(w[2]), w[3])].append(float(w[4]))
labels = [x for x in ("before", "chorus", "mpi", "mpich") if any(k[0] == x for k in t)]
peers = [x for x in ("mpi", "mpich") if x in labels]
name = {"before": "chorus before", "chorus": "chorus", "mpi": "mpi4py Open MPI",
        "mpich": "mpi4py MPICH"}
short = {"mpi": "Open MPI", "mpich": "MPICH"}
def size(b):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s} {unit}"
    return f"{b} B"
# Per peer: its time / chorus's (> 1: chorus faster), of the bests and of the medians; then whether
# chorus's best and median are both at least as fast as every peer's ("no:" names where not).
head = ["size", "mode"] + [f"{name[x]} {w}" for x in labels for w in ("best", "median")]
head += [f"{short[x]}/chorus {w}" for x in peers for w in ("best", "median")]
head += ["chorus fastest", "launches"]
print("| " + " | ".join(head) + " |")
print("| ---: | --- |" + " ---: |" * (len(head) - 4) + " --- | --- |")
for b, mode in sorted({(k[1], k[2]) for k in t}, key=lambda k: (k[0], k[1] != "oop")):
    v = {x: t.get((x, b, mode), []) for x in labels}
    row = [size(b), "out of place" if mode == "oop" else "in place"]
    for x in labels:
        row += [f"{min(v[x]):.2f} us", f"{statistics.median(v[x]):.2f} us"] if v[x] else ["-", "-"]
    c, behind, compared = v.get("chorus"), [], False
    for x in peers:
        m = v[x]
        if c and m:
            ratios = (min(m) / min(c), statistics.median(m) / statistics.median(c))
            row += [f"{r:.2f}x" for r in ratios]
            lost = [w for w, r in zip(("best", "median"), ratios) if r < 1]
            behind += [f"{short[x]} {' and '.join(lost)}"] if lost else []
            compared = True
        else:
            row += ["-", "-"]
    row.append("-" if not compared else "no: " + "; ".join(behind) if behind else "yes")
    row.append("+".join(str(len(v[x])) for x in labels))
    print("| " + " | ".join(row) + " |")
EOF
