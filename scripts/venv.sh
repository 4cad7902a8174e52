#!/usr/bin/env bash
# Makes (once) and brings up to date the project's virtual environment, .venv (or $CHORUS_VENV),
# with the pinned Python tools of python/requirements-dev.txt: torch 2.13 from pip, numpy,
# pytest, expecttest, scikit-build-core, pybind11 and clang-format 14.0.6 (the same formatter on
# Debian 12 and 13). Prints the venv's path. The interpreter: the first python3 on PATH (this
# machine kind's CPython 3.11, for which the torch wheel lies on disk) or $CHORUS_VENV_PYTHON;
# where that python3 has no venv module, Debian's python3-venv is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${CHORUS_VENV:-$PWD/.venv}
py=${CHORUS_VENV_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv
    rm -rf "$venv"
    "$py" -m venv "$venv" >&2
  fi
fi
if ! cmp -s python/requirements-dev.txt "$venv/.chorus-requirements" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements-dev.txt >&2
  cp python/requirements-dev.txt "$venv/.chorus-requirements"
fi
echo "$venv"
