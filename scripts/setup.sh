#!/usr/bin/env bash
# Installs every build and test dependency of xinfer from Debian and PyPI. Idempotent; safe to re-run.
set -euo pipefail

apt_packages=(
  cmake ninja-build g++ pkg-config
  libopenblas-dev          # CPU GEMMs
  libpcre2-dev             # tokenizer pre-tokenizer regexes
  libicu-dev               # tokenizer Unicode normalization (NFC/NFKC...)
  nlohmann-json3-dev       # JSON: config.json, tokenizer.json, safetensors headers, HTTP bodies
  libboost-dev             # Boost.Asio/Beast (header-only) for the HTTP server
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev  # libFuzzer + ASan/UBSan for the bounded fuzz run (scripts/fuzz.sh, tests/e2e)
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

python3 -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/../requirements-dev.txt"
bash "$(dirname "$0")/fetch_smollm2.sh" >/dev/null   # the real test model (tests and the default serve)
