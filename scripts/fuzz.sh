#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan; CMake option XINFER_FUZZ) in build/fuzz and
# runs each for SECONDS (default 25) from a copy of its committed corpus (fuzz/corpus/<name>), so the
# committed corpora stay small. Exit status non-zero on any crash, leak, sanitizer report or timeout; the
# input that caused it is left in build/fuzz/artifacts/. Installs clang-14 and its runtime if missing.
# The targets run at the same time (one process each, so each gets its SECONDS of a core where there are
# two); the build goes through ccache when it is installed.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: request chat_template (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-25}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(request chat_template)

if ! command -v clang++-14 >/dev/null 2>&1 || ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
    >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-14 libclang-rt-14-dev
fi

build=build/fuzz
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  # Paths below the checkout hash relative and the build directory is not hashed (-g would add it), so a fresh
  # clone elsewhere (CI) hits the entries of this one; debug info then names the first build's directory.
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi
if [ ! -f "$build/build.ninja" ] || { ((${#launcher[@]})) && ! grep -q "^CMAKE_CXX_COMPILER_LAUNCHER:.*=ccache" \
    "$build/CMakeCache.txt"; }; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXINFER_FUZZ=ON \
    -DXINFER_CUDA=OFF -DXINFER_BUILD_TESTS=OFF -DXINFER_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
fi
ninja -C "$build" "${targets[@]/#/fuzz_}" >/dev/null

mkdir -p "$build/artifacts"
run_one() {  # target -> exit status of its run; its log in $build/fuzz_<target>.log
  local t=$1 work
  work=$(mktemp -d)
  cp fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  local rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/${t}-" "$work" 2>"$build/fuzz_$t.log" || rc=$?
  rm -rf "$work"
  return $rc
}
pids=()
for t in "${targets[@]}"; do
  echo "fuzz_$t: ${seconds} s"
  run_one "$t" &
  pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  if ! wait "${pids[$i]}"; then
    status=1
    echo "fuzz_$t FAILED (log: $build/fuzz_$t.log)"
    tail -40 "$build/fuzz_$t.log"
  fi
  echo "fuzz_$t:"
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$build/fuzz_$t.log" | tail -3 || true
done
exit $status
