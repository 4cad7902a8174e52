#!/usr/bin/env bash
# Installs what the build needs and configures + builds Chorus (Debian 12 or 13, as root or with
# sudo), from a fresh machine:
#  - Debian's packages: the compiler, CMake, GoogleTest, pybind11, nlohmann-json, matplotlib, and
#    Debian's own torch (python3-torch + libtorch-dev), which scripts/package_check.sh builds
#    against too;
#  - a virtual environment, .venv, with the torch users install (torch==2.13.0 from pip) and the
#    pinned test tools (python/requirements-dev.txt). The build's Python package and its torch
#    backend are for that interpreter; the Python tests run with it.
# Usage: scripts/setup.sh [build-dir] [extra cmake args...]
# CHORUS_SETUP_TARGETS="t1 t2 ...": build only these CMake targets (scripts/demo.sh: chorusrun and
# all_reduce_perf); unset, build everything, the test suite included (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
need=()
# The benchmarks' JSON uses nlohmann-json3-dev (header-only, build time only); chorus-plot needs
# python3-matplotlib; the emulated-cluster and network-fault tests need iproute2 (ip, tc) and
# nftables (packet loss and drops inside a node's namespace).
for pkg in cmake g++ make libgtest-dev python3-dev pybind11-dev python3-numpy \
           python3-pytest python3-torch libtorch-dev nlohmann-json3-dev python3-matplotlib \
           iproute2 nftables; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

venv=$(scripts/venv.sh)

# The Python package and its torch backend are required here (AUTO elsewhere): the suite must
# not skip them silently.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_WERROR=ON -DCHORUS_PYTHON=ON \
  -DCHORUS_TORCH=ON -DPython3_EXECUTABLE="$venv/bin/python" "$@" >/dev/null
if [ -n "${CHORUS_SETUP_TARGETS:-}" ]; then
  # shellcheck disable=SC2086  # a space-separated list of target names
  cmake --build "$build" -j"$(nproc)" --target $CHORUS_SETUP_TARGETS
else
  cmake --build "$build" -j"$(nproc)"
fi
