#!/usr/bin/env bash
# Installs Debian's clang and its sanitizer/libFuzzer runtime (libclang-rt-<major>-dev: Debian
# 12's clang 14 ships it apart) when missing, as root or with sudo. Used by scripts/sanitize.sh
# (the ASan+UBSan build is a clang build) and fuzz/run.sh. Exits 0 when clang and clang++ are
# there afterwards, 1 when not.
#   scripts/clang_setup.sh
#   scripts/clang_setup.sh --rt-package   (only prints the runtime's package name)
set -uo pipefail
say() { echo "clang_setup: $*"; }
have_clang() { command -v clang++ >/dev/null 2>&1 && command -v clang >/dev/null 2>&1; }
rt_package() {
  local major
  major=$(clang++ --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
  [ -n "$major" ] && echo "libclang-rt-$major-dev"
}
if [ "${1:-}" = --rt-package ]; then
  rt_package
  exit
fi
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
can_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  [ -z "$sudo" ] || command -v sudo >/dev/null 2>&1
}
install() {  # apt-get install, with one `apt-get update` first if the lists lack it
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" \
    >/dev/null 2>&1 ||
    { $sudo apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" \
        >/dev/null 2>&1; }
}
if ! have_clang && can_install; then
  say "installing clang"
  install clang || true
fi
have_clang || exit 1
rt=$(rt_package || true)
if [ -n "$rt" ] && ! dpkg -s "$rt" >/dev/null 2>&1 && can_install; then
  say "installing $rt"
  install "$rt" || true
fi
exit 0
