#!/usr/bin/env bash
# Fails if any C/C++/CUDA source differs from what clang-format (14.0.6, .clang-format) makes
# of it; `scripts/format_check.sh --fix` rewrites them instead. CI runs the check.
set -euo pipefail
cd "$(dirname "$0")/.."
# clang-format 14.0.6 from PyPI, pinned in python/requirements-dev.txt (Debian 13's own is 19,
# which formats differently).
clang_format=$(scripts/venv.sh)/bin/clang-format
# Tracked files and new ones not yet added (not the ignored): a new file is checked and fixed too.
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h' '*.cu' '*.c' '*.hpp')
if [ "${1:-}" = "--fix" ]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
if ! "$clang_format" --dry-run -Werror "${files[@]}"; then
  echo "format_check: the files above are not clang-formatted; run scripts/format_check.sh --fix" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
