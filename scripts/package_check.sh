#!/usr/bin/env bash
# Checks that Chorus builds the standard ways and can be installed and consumed (CI runs it):
#  1. a g++ Release build (warnings as errors) installed into a temporary prefix; the consumer
#     project (examples/consumer) built against it with CMake (find_package) and with
#     pkg-config, and run on 2 ranks with the installed chorusrun; the installed Python
#     package imported;
#  2. the .deb built by CPack, installed with apt (dependencies resolved), and
#     `chorusrun -np 2 all_reduce_perf` and `import chorus.torch` run from it; then removed;
#  3. Debian's own torch (python3-torch: 1.13 on Debian 12, 2.6 on Debian 13): the torch backend
#     of the Release build (built against it, for /usr/bin/python3) runs the torch tests;
#  4. the binary wheel for torch 2.13 (scripts/build_wheel.sh: pip wheel + auditwheel repair),
#     installed into fresh venvs without compiler or CMake (scripts/wheel_check.sh): torchrun of
#     the DDP and FSDP2 examples at 2 ranks, the numpy API without torch;
#     CHORUS_WHEEL_OTHER_TORCH=VER also checks that chorus.torch refuses torch VER (slow);
# (The clang build with warnings as errors is the sanitizer build: scripts/sanitize.sh.)
# Usage: scripts/package_check.sh [work-dir (default: a temporary one)]
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
work=${1:-$(mktemp -d /tmp/chorus-package.XXXXXX)}
mkdir -p "$work"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
need=()
for pkg in pkgconf dpkg-dev ccache; do dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg"); done
if [ ${#need[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
t0=$(date +%s)
step() { echo "### package_check: $* ($(($(date +%s) - t0)) s)"; }

# The Release build and the wheel's (step 4) compile the library and chorusrun with the same
# compiler and flags: ccache (Debian's) compiles them once. Its base directory "/" makes every
# path relative to the compiling directory, the two build trees lie at the same depth ($work/rel/
# build, $work/wheel/pip-build), and both name the compiler alike (ccache hashes its name: CMake
# finds c++, scikit-build-core g++), so their command lines match; its cache is this run's own.
export CCACHE_DIR=$work/ccache CCACHE_BASEDIR=/ CCACHE_NOHASHDIR=true
launcher=(-DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER_LAUNCHER=ccache
          -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
step "g++ Release build"
cmake -S "$src" -B "$work/rel/build" -DCMAKE_BUILD_TYPE=Release -DCHORUS_WERROR=ON \
  -DCHORUS_BUILD_TESTS=OFF -DCHORUS_CUDA=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" \
  "${launcher[@]}" >/dev/null
cmake --build "$work/rel/build" -j"$(nproc)" >/dev/null
step "install into $work/prefix"
cmake --install "$work/rel/build" >/dev/null
prefix=$work/prefix
libdir=$(ls -d "$prefix"/lib* | head -n 1)
ls "$libdir"/libchorus.so.* >/dev/null
readelf -d "$libdir"/libchorus.so | grep -q 'SONAME.*libchorus.so.0'
# Only the API is exported: no chorus:: internals in the dynamic symbol table.
if nm -D --defined-only "$libdir"/libchorus.so | grep -q '_ZN6chorus'; then
  echo "package_check: internal symbols exported"; exit 1
fi

step "consumer with CMake find_package(Chorus)"
cmake -S "$src/examples/consumer" -B "$work/consumer-cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer-cmake" >/dev/null
LD_LIBRARY_PATH=$libdir "$prefix/bin/chorusrun" -np 2 "$work/consumer-cmake/consumer" | tee "$work/out1"
[ "$(grep -c OK "$work/out1")" -eq 2 ]

step "consumer with pkg-config"
PKG_CONFIG_PATH=$libdir/pkgconfig cc "$src/examples/consumer/consumer.c" \
  $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs chorus) -o "$work/consumer-pc"
LD_LIBRARY_PATH=$libdir "$prefix/bin/chorusrun" -np 3 "$work/consumer-pc" | tee "$work/out2"
[ "$(grep -c OK "$work/out2")" -eq 3 ]

step "installed chorus-plot (matplotlib): a PNG of an installed all_reduce_perf run"
LD_LIBRARY_PATH=$libdir "$prefix/bin/chorusrun" -np 2 "$prefix/bin/all_reduce_perf" -b 8 -e 64K -f 8 \
  -n 2 -J "$work/plot.json" >/dev/null
"$prefix/bin/chorus-plot" "$work/plot.json" -o "$work/plot.png"
[ "$(head -c 4 "$work/plot.png" | tail -c 3)" = PNG ]

step "installed Python package"
PYTHONPATH=$(ls -d "$prefix"/lib/python3*/dist-packages) /usr/bin/python3 -c \
  "import chorus, numpy as np; c = chorus.Comm.from_env(); print('chorus', chorus.version(), c.all_reduce(np.ones(2)))"
# python -m chorus as a Debian user runs it (its torch is Debian's 1.13, which the package's
# backend was built for).
PYTHONPATH=$(ls -d "$prefix"/lib/python3*/dist-packages) /usr/bin/python3 -m chorus |
  tee "$work/collect_env.txt"
grep -q '^chorus.torch: *loads$' "$work/collect_env.txt"

step "Debian's torch ($(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)): torch tests on this build"
(cd python/tests && PYTHONPATH=$work/rel/build/python CHORUS_BUILD_DIR=$work/rel/build PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider test_torch.py \
    -k "matrix or errors or ddp or torch2 or share_of_the_cpus or killed_peer"
  # registered_empty and its errors run on torch 1.13 too; the FSDP2 tests skip there.
  PYTHONPATH=$work/rel/build/python CHORUS_BUILD_DIR=$work/rel/build PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider test_torch_registered.py)

step "binary wheel for torch 2.13 (scripts/build_wheel.sh), checked in fresh venvs (wheel_check.sh)"
# scikit-build-core adds CMAKE_ARGS to its CMake command line: the Release build's flags.
# It builds in the project's venv (scripts/setup.sh's, torch 2.13.0 and the build tools inside).
CMAKE_ARGS="-DCHORUS_WERROR=ON ${launcher[*]}" scripts/build_wheel.sh --venv "$(scripts/venv.sh)" \
  --torch 2.13.0 --work "$work/wheel" --out "$work/dist" | tee "$work/build_wheel.log"
wheel=$(tail -n 1 "$work/build_wheel.log")
scripts/wheel_check.sh "$wheel" --work "$work/wheel-check" ${CHORUS_WHEEL_OTHER_TORCH:+--other-torch \
  "$CHORUS_WHEEL_OTHER_TORCH"}

step ".deb (cpack) installed with apt"
echo "package_check: ccache: $(ccache --print-stats | awk -F'\t' '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" {h += $2} $1 == "cache_miss" {m = $2} END {print h + 0 " compiles reused, " m + 0 " made"}')"
(cd "$work/rel/build" && cpack -G DEB >/dev/null)
deb=$(ls "$work"/rel/build/chorus_*.deb)
dpkg-deb -f "$deb" Package Version Depends Recommends
# The licence: BSD-3-Clause in the description and Debian's machine-readable copyright file.
# (Captured first: `producer | grep -q` fails under pipefail when grep exits before the producer.)
description=$(dpkg-deb -f "$deb" Description)
contents=$(dpkg-deb -c "$deb")
copyright=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/chorus/copyright)
grep -q 'License: BSD-3-Clause' <<<"$description"
grep -q '\./usr/share/doc/chorus/copyright$' <<<"$contents"
grep -q '^License: BSD-3-Clause$' <<<"$copyright"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$deb" >/dev/null
/usr/bin/chorusrun -np 2 /usr/bin/all_reduce_perf -b 8 -e 1M -f 16 -J "$work/deb.json" | tail -n 4
/usr/bin/chorus-plot "$work/deb.json" -o "$work/deb.svg" && grep -q 'id="series-0"' "$work/deb.svg"
(cd / && /usr/bin/python3 -c "import chorus.torch, chorus; print('installed:', chorus.__file__)")
DEBIAN_FRONTEND=noninteractive $sudo apt-get remove -y -qq chorus >/dev/null

step "done"
[ -n "${1:-}" ] || rm -rf "$work"
