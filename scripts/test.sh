#!/usr/bin/env bash
# Builds xinfer (CPU release preset, plus the CUDA targets when nvcc exists) and runs every test that
# needs no GPU: C++ unit tests through CTest, then the Python tests (tests/python, tests/e2e) with pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
preset=cpu-release
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
if command -v nvcc >/dev/null 2>&1; then
  cmake --preset cuda-release >/dev/null
  cmake --build --preset cuda-release
fi
ctest --preset "$preset" -j "$(nproc)"
export XINFER_BUILD_DIR="$PWD/build/$preset"
python3 -m pytest -q tests/python tests/e2e
