#!/usr/bin/env bash
# Fails if any C/C++/CUDA source differs from what clang-format (Debian's, .clang-format) makes
# of it; `scripts/format_check.sh --fix` rewrites them instead. CI runs the check.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang-format
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.c' '*.hpp')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run -Werror "${files[@]}"; then
  echo "format_check: the files above are not clang-formatted; run scripts/format_check.sh --fix" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
