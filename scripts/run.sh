#!/usr/bin/env bash
# Installs dependencies, builds xinfer and serves the default model on http://127.0.0.1:8000 with an
# OpenAI-compatible API: SmolLM2-135M-Instruct (Apache-2.0; a real chat model, ChatML template) from its GGUF
# file (Q4_1 linears, Q8_0 embedding), which setup fetches into ~/.cache/xinfer/models (sha256-checked). The
# CPU backend runs the quantized weights as they are (~100 tok/s decode on 2 cores).
# Extra arguments go to `xinfer serve` (see `xinfer serve --help`), e.g. scripts/run.sh --port 9000; with
# --model the given model is served instead (e.g. --model models/xinfer-tiny-shakespeare, the bundled one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target xinfer
default=(--model "$(bash scripts/fetch_smollm2.sh)" --served-model-name smollm2-135m-instruct)
for a in "$@"; do
  case "$a" in --model | --model=*) default=() ;; esac
done
exec build/cpu-release/src/xinfer/cli/xinfer serve "${default[@]}" "$@"
