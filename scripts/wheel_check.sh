#!/usr/bin/env bash
# Checks a wheel from scripts/build_wheel.sh the way a user meets it, in fresh venvs, installing
# with `--only-binary :all:` (pip may not build anything: no compiler, no CMake needed) and
# running with a PATH that holds no compiler and no cmake:
#  1. the wheel + the torch it was built for (its version's local part, +torch2.13 -> 2.13.*):
#     `python -m chorus`, then torchrun at 2 ranks of the DDP and the FSDP2 examples on chorus
#     (FSDP2's parameters checked against one process; plain and --registered). A torch whose
#     FSDP2 cannot run on CPU (none before 2.6; 2.6's lacks torch.cpu.Stream.record_event) or
#     has no custom comms (set_custom_all_gather, for --registered) skips those runs, printing
#     why ("### wheel_check: ... SKIPPED: <reason>");
#  2. the wheel without torch: `import chorus`, `python -m chorus` (numpy API only), and a 2-rank
#     numpy all_reduce started by the wheel's chorusrun, its result checked on each rank;
#  3. with --other-torch VER (slow: a second torch; off by default, CI skips it): torch VER
#     installed into the venv of step 2: `import chorus.torch` refuses with an ImportError naming
#     both releases.
# Usage: scripts/wheel_check.sh WHEEL [--other-torch VER] [--work DIR (kept; default: a temporary
#        one, removed)]
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
wheel=
other=
work=
while [ $# -gt 0 ]; do
  case "$1" in
    --other-torch) other=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -*) echo "usage: $0 WHEEL [--other-torch VER] [--work DIR]" >&2; exit 2 ;;
    *) wheel=$(realpath "$1"); shift ;;
  esac
done
[ -f "$wheel" ] || { echo "usage: $0 WHEEL [--other-torch VER] [--work DIR]" >&2; exit 2; }
keep=${work:+1}
work=${work:-$(mktemp -d /tmp/chorus-wheel.XXXXXX)}
mkdir -p "$work"
py=${CHORUS_WHEEL_PYTHON:-python3}
t0=$(date +%s)
step() { echo "### wheel_check: $* ($(($(date +%s) - t0)) s)"; }
fail() { echo "wheel_check: FAILED: $*" >&2; exit 1; }

# The torch release the wheel was built for: chorus-0.1.0+torch2.13-cp311-... -> 2.13
built=$(basename "$wheel" | sed -n 's/^chorus-[^-+]*+torch\([0-9]*\.[0-9]*\)-.*/\1/p')
[ -n "$built" ] || fail "$wheel: no +torchX.Y in its version"
# A PATH without compilers or cmake: the venv's bin and a folder of the few tools used here.
tools=$work/tools
mkdir -p "$tools"
for t in sh bash env cat grep sed head tail ls mkdir rm dirname basename uname readlink date \
         python3 sleep expr id nproc timeout; do
  p=$(command -v "$t" || true)
  [ -n "$p" ] && ln -sf "$p" "$tools/$t"
done
# Runs a command of venv $1 with that PATH, bounded (${limit} s: a hung rank fails the check).
limit=600
nobuild() { env -u CC -u CXX PATH="$1/bin:$tools" timeout "$limit" "${@:2}"; }
for t in cc gcc g++ c++ clang cmake ninja make; do
  ! PATH=$tools command -v "$t" >/dev/null || fail "$t is on the stripped PATH"
done
pipi() { limit=1800 nobuild "$1" "$1/bin/python" -m pip install -q --disable-pip-version-check \
           --only-binary :all: "${@:2}"; }

step "venv with torch $built.*: pip install torch==$built.* $(basename "$wheel")"
"$py" -m venv "$work/venv-torch"
pipi "$work/venv-torch" "torch==$built.*" "$wheel"
(cd "$work" && nobuild "$work/venv-torch" python -m chorus) | tee "$work/info-torch"
grep -q '^chorus.torch: *loads$' "$work/info-torch" || fail "chorus.torch does not load"
step "torchrun DDP, 2 ranks"
(cd "$work" && nobuild "$work/venv-torch" torchrun --nproc-per-node 2 "$src/examples/python/ddp_train.py" \
  --backend chorus --steps 12) | tee "$work/ddp"
grep -q '^chorus: 2 ranks' "$work/ddp" || fail "DDP did not finish"
# What this torch's FSDP2 can do on CPU: prints "fsdp2: <why not>" when it cannot run at all
# (no fully_shard; torch 2.6's torch.cpu.Stream has no record_event, a no-op from torch 2.7, so
# its FSDP2 fails on CPU whatever the backend), "registered: <why not>" when it has no custom
# comms (FSDPModule.set_custom_all_gather, which use_registered_buffers sets).
cat >"$work/fsdp2_probe.py" <<'PY'
import torch
try:
    from torch.distributed.fsdp import FSDPModule, fully_shard  # noqa: F401
except Exception as e:  # ImportError; a ValueError inside Debian's torch 1.13 on Python 3.11
    print(f"fsdp2: torch {torch.__version__} has no FSDP2 (torch.distributed.fsdp.fully_shard: "
          f"{type(e).__name__})")
else:
    if not hasattr(torch.cpu.Stream, "record_event"):
        print(f"fsdp2: torch {torch.__version__}'s FSDP2 does not run on CPU (torch.cpu.Stream has "
              f"no record_event before torch 2.7; gloo fails the same)")
    elif not hasattr(FSDPModule, "set_custom_all_gather"):
        print(f"registered: torch {torch.__version__}'s FSDP2 has no set_custom_all_gather")
PY
probe=$(cd "$work" && nobuild "$work/venv-torch" python "$work/fsdp2_probe.py")
no_fsdp2=$(echo "$probe" | sed -n 's/^fsdp2: //p')
no_registered=$(echo "$probe" | sed -n 's/^registered: //p')
if [ -n "$no_fsdp2" ]; then
  step "torchrun FSDP2, 2 ranks: SKIPPED: $no_fsdp2"
else
  step "torchrun FSDP2, 2 ranks"
  (cd "$work" && nobuild "$work/venv-torch" torchrun --nproc-per-node 2 \
    "$src/examples/python/fsdp2_train.py" --backend chorus --steps 5) | tee "$work/fsdp2"
  grep -q 'max |diff|.*(OK' "$work/fsdp2" || fail "FSDP2's parameters do not match"
  if [ -n "$no_registered" ]; then
    step "torchrun FSDP2 --registered: SKIPPED: $no_registered"
  else
    # The same with FSDP2's buffers in registered memory (chorus.torch.use_registered_buffers).
    (cd "$work" && nobuild "$work/venv-torch" torchrun --nproc-per-node 2 \
      "$src/examples/python/fsdp2_train.py" --backend chorus --steps 5 --registered) |
      tee "$work/fsdp2r"
    grep -q 'max |diff|.*(OK' "$work/fsdp2r" || fail "FSDP2 (registered): parameters do not match"
  fi
fi

step "venv without torch: the numpy API"
"$py" -m venv "$work/venv-numpy"
pipi "$work/venv-numpy" "$wheel"
if nobuild "$work/venv-numpy" python -c "import torch" 2>/dev/null; then fail "torch in the numpy venv"; fi
(cd "$work" && nobuild "$work/venv-numpy" python -m chorus) | tee "$work/info-numpy"
grep -q '^chorus.torch: *no torch installed' "$work/info-numpy" || fail "python -m chorus: torch?"
cat >"$work/np_allreduce.py" <<'PY'
# Each rank contributes rank + 1; every element of the sum is 1 + ... + n.
import numpy as np, chorus
with chorus.Comm.from_env() as comm:
    x = np.full(1000, comm.rank + 1, dtype=np.float64)
    comm.all_reduce(x)
    want = comm.size * (comm.size + 1) / 2
    assert (x == want).all(), (comm.rank, x[:4], want)
    print(f"rank {comm.rank} of {comm.size}: all_reduce OK ({x[0]:g})", flush=True)
PY
(cd "$work" && nobuild "$work/venv-numpy" chorusrun -np 2 python "$work/np_allreduce.py") | tee "$work/np"
[ "$(grep -c 'all_reduce OK (3)' "$work/np")" -eq 2 ] || fail "numpy all_reduce"

if [ -n "$other" ]; then
  step "another torch ($other) in the numpy venv: import chorus.torch must refuse"
  pipi "$work/venv-numpy" "torch==$other"
  if (cd "$work" && nobuild "$work/venv-numpy" python -c "import chorus.torch") 2>"$work/refuse"; then
    fail "chorus.torch loaded beside torch $other"
  fi
  tail -n 1 "$work/refuse"
  grep -q "ImportError: chorus.torch: the chorus torch backend was built for torch $built" \
    "$work/refuse" || fail "not the expected ImportError"
  grep -q "but torch $other" "$work/refuse" || fail "the ImportError does not name torch $other"
fi
step "done"
[ -n "$keep" ] || rm -rf "$work"
