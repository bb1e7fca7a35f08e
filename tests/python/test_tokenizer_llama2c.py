"""The llama2.c tok512 tokenizer (stories260K): xinfer's native tok512.bin loader and the tokenizer.json
written by tools/convert_llama2c.py must both encode/decode exactly as Hugging Face `tokenizers` does
with that tokenizer.json."""
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tokenizer_corpus  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")
ROOT = pathlib.Path(__file__).resolve().parents[2]
TOK512 = ROOT.parent / "shared/models/stories260K/tok512.bin"


def run_jsonl(xinfer_bin, args, lines):
    proc = subprocess.run([str(xinfer_bin), *args], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          encoding="utf-8", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(x) for x in proc.stdout.split("\n")[:-1]]


@pytest.mark.skipif(not TOK512.exists(), reason="../shared/models/stories260K missing")
def test_tok512_native_and_converted(tmp_path, xinfer_bin, shared_dir):
    sys.path.insert(0, str(ROOT / "tools"))
    convert = pytest.importorskip("convert_llama2c")
    pieces, scores = convert.read_tokenizer(TOK512, 512)
    tok, tok_cfg = convert.hf_tokenizer(pieces, scores)
    json_dir, bin_dir = tmp_path / "json", tmp_path / "bin"
    json_dir.mkdir()
    bin_dir.mkdir()
    (json_dir / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    (json_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    shutil.copy(TOK512, bin_dir / "tok512.bin")
    ref = tokenizers.Tokenizer.from_file(str(json_dir / "tokenizer.json"))

    items = tokenizer_corpus.build_corpus(shared_dir, ["<s>", "</s>", "<unk>"])[::3]
    texts = [tokenizer_corpus.as_text(b) for b in items]
    want = [e.ids for e in ref.encode_batch(texts)]
    lines = [json.dumps(t) for t in texts]
    for d in (json_dir, bin_dir):
        got = run_jsonl(xinfer_bin, ["tokenize", "--tokenizer", str(d), "--jsonl"], lines)
        bad = [i for i in range(len(want)) if got[i] != want[i]]
        assert not bad, f"{d.name}: {len(bad)} differ, e.g. {texts[bad[0]]!r}: {got[bad[0]]} vs {want[bad[0]]}"
        dec = run_jsonl(xinfer_bin, ["detokenize", "--tokenizer", str(d), "--jsonl"], [json.dumps(x) for x in want])
        want_dec = ref.decode_batch(want)
        bad = [i for i in range(len(want)) if dec[i] != want_dec[i]]
        assert not bad, f"{d.name} decode: {dec[bad[0]]!r} vs {want_dec[bad[0]]!r}"
