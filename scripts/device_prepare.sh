#!/usr/bin/env bash
# Prepares, here (with Debian's packages and PyPI), everything the GPU machine's check
# (scripts/device_check.sh, docs/cuda.md "The device check") needs and that machine lacks, into
# the ignored folder .device/ (its only carry path; at most 64 MiB with the tree):
#   .device/googletest/      Debian's googletest sources (/usr/src/googletest; -DCHORUS_GTEST_SRC)
#   .device/json/            nlohmann-json's headers and CMake package (nlohmann-json3-dev;
#                            -Dnlohmann_json_DIR=.device/json/share/cmake/nlohmann_json)
#   .device/wheels/          the MPICH wheel (PyPI `mpich`, pinned), installed offline there
#   .device/ccl.tar.xz       oneCCL's runtime trimmed to what tools/ccl/ccl_coll_perf.cc needs
#                            (headers, libccl, Intel MPI's libmpi + libfabric + launcher, the
#                            compiler runtime libccl.so.2 stands for), laid out as the virtualenv
#                            scripts/compare_peers.sh --ccl-venv expects. The wheels themselves
#                            (impi-rt 98 MiB, oneccl-cpu-devel 45 MiB, intel-cmplr-lib-rt 46 MiB)
#                            do not fit the 64 MiB carry.
#   .device/MANIFEST         what is there, sizes, versions.
# Usage: scripts/device_prepare.sh [--no-ccl] [--no-mpich]
# Then: the device tool's command (docs/cuda.md) with carry [".device"].
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/compare_common.sh  # ccl_packages: the pinned oneCCL versions
mpich_pin=mpich==4.3.2
ccl=1 mpich=1
for a in "$@"; do
  case $a in
    --no-ccl) ccl=0 ;;
    --no-mpich) mpich=0 ;;
    *) echo "device_prepare: unknown option $a" >&2; exit 2 ;;
  esac
done
dst=.device
rm -rf "$dst" && mkdir -p "$dst"
fail() { echo "device_prepare: $*" >&2; exit 1; }
pyplat=(--only-binary=:all: --no-deps --python-version 3.12 --platform manylinux_2_28_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
pip=$(command -v pip3 || command -v pip || true)
[ -x /work/main/.venv/bin/pip ] && pip=/work/main/.venv/bin/pip
[ -x .venv/bin/pip ] && pip=.venv/bin/pip

# GoogleTest's sources (Debian's googletest package) and nlohmann-json (nlohmann-json3-dev).
[ -f /usr/src/googletest/CMakeLists.txt ] || fail "no /usr/src/googletest (apt-get install googletest)"
[ -f /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake ] ||
  fail "no nlohmann-json CMake package (apt-get install nlohmann-json3-dev)"
cp -a /usr/src/googletest "$dst/googletest"
rm -rf "$dst/googletest/googlemock/test" "$dst/googletest/googletest/test" \
  "$dst/googletest/googletest/samples" "$dst/googletest/googlemock/docs" "$dst/googletest/docs"
mkdir -p "$dst/json/include" "$dst/json/share/cmake"
cp -a /usr/include/nlohmann "$dst/json/include/"
cp -a /usr/share/cmake/nlohmann_json "$dst/json/share/cmake/"

tmp=$(mktemp -d /tmp/device_prepare.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ "$mpich" = 1 ]; then
  mkdir -p "$dst/wheels"
  "$pip" download -q "${pyplat[@]}" -d "$dst/wheels" "$mpich_pin" >"$tmp/pip.log" 2>&1 ||
    { cat "$tmp/pip.log" >&2; fail "pip download $mpich_pin failed"; }
fi

if [ "$ccl" = 1 ]; then
  # oneCCL: the pinned wheels unpacked here, then only the files ccl_coll_perf needs.
  "$pip" download -q "${pyplat[@]}" -d "$tmp/ccl-wheels" "${ccl_packages[@]}" >"$tmp/pip.log" 2>&1 ||
    { cat "$tmp/pip.log" >&2; fail "pip download ${ccl_packages[*]} failed"; }
  mkdir -p "$tmp/unz" "$tmp/ccl/bin" "$tmp/ccl/lib" "$tmp/ccl/include"
  for w in "$tmp"/ccl-wheels/*.whl; do
    python3 -m zipfile -e "$w" "$tmp/unz" || fail "unpacking $w failed"
  done
  d=("$tmp"/unz/*.data/data)
  for x in "${d[@]}"; do
    [ -d "$x/include" ] && cp -a "$x/include/." "$tmp/ccl/include/"
    if [ -d "$x/lib" ]; then
      # Shared objects (no static archives, no Fortran, no the ABI-variant libmpi, no debug).
      find "$x/lib" -maxdepth 1 \( -name 'libccl.so*' -o -name 'libmpi.so*' \
        -o -name 'libintlc.so*' \) \
        -exec cp -a {} "$tmp/ccl/lib/" \;
      # libfabric and only the providers one node uses (shared memory, TCP): the others (EFA,
      # verbs, PSM, mlx) are most of the size.
      find "$x/lib" -maxdepth 1 \( -name 'libfabric.so*' -o -name 'libshm-fi.so' \
        -o -name 'libtcp-fi.so' -o -name 'librxm-fi.so' \) -exec cp -a {} "$tmp/ccl/lib/" \;
    fi
    if [ -d "$x/bin" ]; then
      for b in mpiexec mpiexec.hydra hydra_pmi_proxy hydra_bstrap_proxy mpirun; do
        [ -e "$x/bin/$b" ] && cp -a "$x/bin/$b" "$tmp/ccl/bin/" && chmod +x "$tmp/ccl/bin/$b"
      done
    fi
  done
  # libccl.so.1 names libccl.so.2: the Intel compiler runtime (scripts/compare_common.sh).
  [ -e "$tmp/ccl/lib/libccl.so.2" ] || ln -sf libintlc.so.5 "$tmp/ccl/lib/libccl.so.2"
  # Deduplicate versioned copies (zip has no links): keep one file, links for the other names.
  (cd "$tmp/ccl/lib" && for f in libccl.so libccl.so.1 libmpi.so libmpi.so.12 libmpi.so.12.0; do
     [ -f "$f" ] && [ ! -L "$f" ] || continue
     for real in "$f".*; do [ -f "$real" ] && [ ! -L "$real" ] && cmp -s "$f" "$real" &&
       { rm "$f"; ln -s "$(basename "$real")" "$f"; break; }; done
   done)
  [ -e "$tmp/ccl/include/oneapi/ccl.hpp" ] || fail "oneCCL's headers missing from the wheels"
  [ -x "$tmp/ccl/bin/mpiexec.hydra" ] || fail "Intel MPI's mpiexec.hydra missing from the wheels"
  tar -C "$tmp/ccl" -cJf "$dst/ccl.tar.xz" . || fail "packing oneCCL failed"
  du -sh "$tmp/ccl" | sed 's/^/device_prepare: oneCCL unpacked: /'
fi

{
  echo "# .device/: prepared $(date -u +%FT%TZ) by scripts/device_prepare.sh"
  echo "googletest $(dpkg-query -W -f '${Version}' googletest 2>/dev/null)"
  echo "nlohmann-json $(dpkg-query -W -f '${Version}' nlohmann-json3-dev 2>/dev/null)"
  [ "$mpich" = 1 ] && echo "mpich wheel: $(ls "$dst/wheels")"
  [ "$ccl" = 1 ] && echo "oneCCL (trimmed): ${ccl_packages[*]}"
  du -sk "$dst"/* | awk '{printf "%6d KiB %s\n", $1, $2}'
} >"$dst/MANIFEST"
cat "$dst/MANIFEST"
total=$(du -sk "$dst" | cut -f1)
tree=$(git ls-files -z | du -ck --files0-from=- 2>/dev/null | tail -n1 | cut -f1)
echo "device_prepare: .device = $((total / 1024)) MiB, tracked tree = $((tree / 1024)) MiB" \
     "(the carry limit is 64 MiB in all)"
[ $((total + tree)) -lt $((64 * 1024)) ] || fail "over 64 MiB: run with --no-ccl"
