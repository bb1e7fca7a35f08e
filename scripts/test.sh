#!/usr/bin/env bash
# Builds xinfer and runs every test that needs no GPU: C++ unit tests through CTest, then the Python
# tests (tests/python, tests/e2e) with pytest. Where nvcc exists the cuda-release preset is used, so the
# CUDA backend and the GPU checks are compiled too (they run on a GPU machine: ctest -L gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
preset=cpu-release
if command -v nvcc >/dev/null 2>&1; then preset=cuda-release; fi
if command -v ccache >/dev/null 2>&1; then
  # Compiler launchers for a build directory configured here for the first time (CMake reads these only
  # then; an existing directory keeps its own): a fresh clone on a machine that built this tree before
  # compiles only what changed. Paths below the checkout hash relative, so another clone hits the same entries.
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD"
fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset" -LE gpu -j "$(nproc)"
export XINFER_BUILD_DIR="$PWD/build/$preset"
suites=(tests/python)
[ -d tests/e2e ] && suites+=(tests/e2e)
python3 -m pytest -q "${suites[@]}"
