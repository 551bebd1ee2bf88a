#!/usr/bin/env bash
# Sets up a fresh machine for tilewise: a C++ compiler for the cpu-twin, Chromium and
# docker-compose for the tests (through apt when missing and we are root), and .venv with the
# package and its test tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

have_clang() {
  for c in clang++-21 clang++-20 clang++-19 clang++-18 clang++-17 clang++-16 clang++-15; do
    command -v "$c" >/dev/null 2>&1 && return 0
  done
  return 1
}

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing $* with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "setup: please install $* (not root, or no apt-get)" >&2
    return 1
  fi
}

# One apt run for everything missing. The tests need Chromium (the dashboard is checked in a
# headless browser) and docker-compose (it validates docker/compose.yaml); the tune needs neither.
need=()
have_clang || need+=(clang-19)
command -v chromium >/dev/null 2>&1 || need+=(chromium chromium-driver)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
if [ ${#need[@]} -gt 0 ] && ! apt_install "${need[@]}"; then
  have_clang || echo "setup: continuing without clang: g++ builds work, spill checks are off" >&2
  echo "setup: without chromium and docker-compose the dashboard and compose tests fail" >&2
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[dev,ascend-ir]"
echo "setup: ready (.venv/bin/tilewise)"
