#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan; CMake option XINFER_FUZZ) in build/fuzz and
# runs each for SECONDS (default 25) from a copy of its committed corpus (fuzz/corpus/<name>), so the
# committed corpora stay small. Exit status non-zero on any crash, leak, sanitizer report or timeout; the
# input that caused it is left in build/fuzz/artifacts/. Installs clang-14 and its runtime if missing.
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
if [ ! -f "$build/build.ninja" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXINFER_FUZZ=ON \
    -DXINFER_CUDA=OFF -DXINFER_BUILD_TESTS=OFF -DXINFER_BUILD_BENCH=OFF >/dev/null
fi
ninja -C "$build" "${targets[@]/#/fuzz_}" >/dev/null

mkdir -p "$build/artifacts"
status=0
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  cp fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  echo "fuzz_$t: ${seconds} s"
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/${t}-" "$work" 2>"$build/fuzz_$t.log"; then
    status=1
    echo "fuzz_$t FAILED (log: $build/fuzz_$t.log)"
    tail -40 "$build/fuzz_$t.log"
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$build/fuzz_$t.log" | tail -3 || true
  rm -rf "$work"
done
exit $status
