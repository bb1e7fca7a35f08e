#!/usr/bin/env bash
# Installs dependencies, builds xinfer and serves the bundled default model
# (models/xinfer-tiny-shakespeare) on http://127.0.0.1:8000 with an OpenAI-compatible API.
# Extra arguments go to `xinfer serve` (see `xinfer serve --help`), e.g. scripts/run.sh --port 9000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target xinfer
exec build/cpu-release/src/xinfer/cli/xinfer serve "$@"
