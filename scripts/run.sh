#!/usr/bin/env bash
# Builds xinfer and generates a story with stories260K (converted from ../shared/models on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target xinfer
model=build/models/stories260K
if [ ! -f "$model/model.safetensors" ]; then
  src=../shared/models/stories260K
  [ -f "$src/stories260K.bin" ] || { echo "scripts/run.sh: $src/stories260K.bin not found" >&2; exit 1; }
  python3 tools/convert_llama2c.py --checkpoint "$src/stories260K.bin" --tokenizer "$src/tok512.bin" --out "$model"
fi
exec build/cpu-release/src/xinfer/cli/xinfer generate --model "$model" --prompt "${1:-Once upon a time}" \
  --max-tokens "${2:-200}" "${@:3}"
