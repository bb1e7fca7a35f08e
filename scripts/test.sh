#!/usr/bin/env bash
# Builds xinfer and runs every test that needs no GPU: C++ unit tests through CTest, then the Python
# tests (tests/python, tests/e2e) with pytest. Where nvcc exists the cuda-release preset is used, so the
# CUDA backend and the GPU checks are compiled too (they run on a GPU machine: ctest -L gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
preset=cpu-release
if command -v nvcc >/dev/null 2>&1; then preset=cuda-release; fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset" -LE gpu -j "$(nproc)"
export XINFER_BUILD_DIR="$PWD/build/$preset"
suites=(tests/python)
[ -d tests/e2e ] && suites+=(tests/e2e)
python3 -m pytest -q "${suites[@]}"
