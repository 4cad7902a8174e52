#!/usr/bin/env bash
# Builds Chorus every standard way with warnings as errors: Debug, Release, RelWithDebInfo and
# MinSizeRel, with g++ and with clang, without CUDA and (where nvcc is found) with it. Each build
# is a fresh build directory of the library, the tools and (with --tests) the test suite; the
# script prints one line per build with its time and stops at the first failure.
# Usage: scripts/build_matrix.sh [--tests] [--cuda off|on|both] [--types "Debug Release ..."]
#                                [--compilers "gcc clang"] [work-dir]
# Needs clang for the clang builds (CI installs it); `--cuda on|both` needs nvcc.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
tests=OFF
cuda=off
types="Debug Release RelWithDebInfo MinSizeRel"
compilers="gcc clang"
work=""
while [ $# -gt 0 ]; do
  case $1 in
    --tests) tests=ON; shift ;;
    --cuda) cuda=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --compilers) compilers=$2; shift 2 ;;
    -h | --help) sed -n '2,8p' "$0"; exit 0 ;;
    *) work=$1; shift ;;
  esac
done
work=${work:-$(mktemp -d /tmp/chorus-matrix.XXXXXX)}
mkdir -p "$work"
case $cuda in
  off) cudas="OFF" ;;
  on) cudas="ON" ;;
  both) cudas="OFF ON" ;;
  *) echo "build_matrix: --cuda takes off, on or both" >&2; exit 2 ;;
esac
if [[ " $cudas " == *" ON "* ]] && ! command -v nvcc >/dev/null 2>&1; then
  echo "build_matrix: --cuda $cuda needs nvcc on PATH" >&2
  exit 2
fi
for cc in $compilers; do
  case $cc in
    gcc) env=(CC=gcc CXX=g++) ;;
    clang) env=(CC=clang CXX=clang++) ;;
    *) echo "build_matrix: unknown compiler $cc" >&2; exit 2 ;;
  esac
  for type in $types; do
    for cu in $cudas; do
      dir=$work/$cc-$type-cuda$cu
      t0=$(date +%s)
      if ! env "${env[@]}" cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DCHORUS_WERROR=ON \
        -DCHORUS_BUILD_TESTS=$tests -DCHORUS_CUDA=$cu -DCHORUS_PYTHON=OFF >"$dir.log" 2>&1 ||
        ! cmake --build "$dir" -j"$(nproc)" >>"$dir.log" 2>&1; then
        echo "build_matrix: $cc $type CUDA=$cu FAILED (log: $dir.log)"
        grep -E 'error|warning' "$dir.log" | head -n 20
        exit 1
      fi
      echo "build_matrix: $cc $type CUDA=$cu tests=$tests ok ($(($(date +%s) - t0)) s)"
      rm -rf "$dir"
    done
  done
done
