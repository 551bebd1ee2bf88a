#!/usr/bin/env bash
# Sets up a fresh machine for tilewise: a C++ compiler for the cpu-twin, Chromium, docker-compose
# and cmake for the tests (through apt when missing and we are root), and .venv with the package,
# PyTorch (CPU) and the test tools. Idempotent.
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
# headless browser), docker-compose (it validates docker/compose.yaml) and cmake (the Ascend
# backend's generated CMake project is configured with a fake CANN); the tune needs none of them.
# Under CI=true a test skipped for want of one of these fails the run (tests/conftest.py).
need=()
have_clang || need+=(clang-19)
command -v chromium >/dev/null 2>&1 || need+=(chromium chromium-driver)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
if [ ${#need[@]} -gt 0 ] && ! apt_install "${need[@]}"; then
  have_clang || echo "setup: continuing without clang: g++ builds work, spill checks are off" >&2
  echo "setup: without chromium, docker-compose and cmake some tests skip (and fail CI)" >&2
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# PyTorch's CPU build, pinned: the torch extra's range would otherwise fetch a CUDA build of
# several GB (this version's CPU wheel is what the project's machines hold).
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev,ascend-ir,torch]"
echo "setup: ready (.venv/bin/tilewise)"
