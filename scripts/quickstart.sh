#!/usr/bin/env bash
# Quick start: set up, then tune a real fused kernel (Matmul + bias + GELU, Ascend C) on the CPU
# twin and store the best tiling in the default SQLite database.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Migrations are a prestart step: a database left by an older checkout is brought to this
# code's schema (a new one is created on first use anyway).
.venv/bin/tilewise db upgrade
exec .venv/bin/tilewise tune linear_add_gelu --shape M=512,N=512,K=512 --budget 30 "$@"
