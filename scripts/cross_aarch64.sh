#!/usr/bin/env bash
# Cross-builds the library for aarch64 with Debian's g++-aarch64-linux-gnu and runs its kernel
# tests (reduction kernels in every build this target has, SipHash vectors) under qemu-aarch64.
# No CUDA, Python or tools: only libchorus.a and one GoogleTest program, with GoogleTest built
# from Debian's sources (/usr/src/googletest of libgtest-dev) by the cross compiler.
#   scripts/cross_aarch64.sh [build-dir]     (default build-aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-aarch64}
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
need=()
for pkg in g++-aarch64-linux-gnu qemu-user libgtest-dev cmake nlohmann-json3-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
t0=$(date +%s)
CXX=aarch64-linux-gnu-g++
JOBS=$(nproc)

cmake -S . -B "$B" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DCHORUS_CUDA=OFF -DCHORUS_BUILD_TESTS=OFF -DCHORUS_PYTHON=OFF -DCHORUS_WERROR=ON \
  -Dnlohmann_json_DIR=/usr/share/cmake/nlohmann_json >/dev/null  # header-only: the host's serves
cmake --build "$B" -j"$JOBS" --target chorus_static

GT=/usr/src/googletest/googletest
mkdir -p "$B/gtest"
if [ ! -f "$B/gtest/libgtest.a" ]; then
  $CXX -std=c++20 -O1 -I"$GT/include" -I"$GT" -c "$GT/src/gtest-all.cc" -o "$B/gtest/gtest-all.o"
  $CXX -std=c++20 -O1 -I"$GT/include" -I"$GT" -c "$GT/src/gtest_main.cc" -o "$B/gtest/gtest_main.o"
  aarch64-linux-gnu-ar rcs "$B/gtest/libgtest.a" "$B/gtest/gtest-all.o" "$B/gtest/gtest_main.o"
fi
$CXX -std=c++20 -O2 -Wall -Wextra -Werror -I"$GT/include" -Iinclude -I"$B/include" -Isrc \
  tests/test_reduce.cc tests/test_siphash.cc "$B/gtest/libgtest.a" "$B/libchorus.a" \
  -lpthread -lrt -o "$B/chorus_kernel_tests"
echo "### cross_aarch64: built in $(($(date +%s) - t0)) s"
qemu-aarch64 -L /usr/aarch64-linux-gnu "$B/chorus_kernel_tests"
echo "### cross_aarch64: passed in $(($(date +%s) - t0)) s"
