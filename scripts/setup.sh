#!/usr/bin/env bash
# Installs what the build needs (Debian 12, as root or with sudo) and configures + builds Chorus.
# Usage: scripts/setup.sh [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

need=()
# The Python package (python/) needs Debian's python3-dev, pybind11-dev, numpy and pytest; its
# torch.distributed backend python3-torch and libtorch-dev. The benchmarks' JSON uses
# nlohmann-json3-dev (header-only, build time only); chorus-plot needs python3-matplotlib.
for pkg in cmake g++ make libgtest-dev python3-dev pybind11-dev python3-numpy python3-pytest \
           python3-torch libtorch-dev nlohmann-json3-dev python3-matplotlib; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "setup: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# The Python package and its torch backend are required here (AUTO elsewhere): the suite must
# not skip them silently.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_WERROR=ON -DCHORUS_PYTHON=ON -DCHORUS_TORCH=ON \
  "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
