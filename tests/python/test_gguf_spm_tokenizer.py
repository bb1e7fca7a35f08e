"""The `llama` (SentencePiece) tokenizer of a GGUF file, against the tokenizer of that vocabulary written by
others: Google's `sentencepiece` on the tokenizer.model the file was made from (Hugging Face's slow
LlamaTokenizer is that library), over the corpus of tokenizer_corpus.py. llama.cpp (llama-cpp-python 0.3.36,
`Llama(path, vocab_only=True).tokenize(text, add_bos=False, special=False)`) gives sentencepiece's ids on all
8,867 items too (checked by hand on 2026-12-01; llama-cpp-python is a benchmark peer, not a test dependency).

The GGUF is written at test time by the `gguf` package's GGUFWriter (tools/make_gguf_fixtures.py), with the
vocabulary, scores and token types stored the way llama.cpp's converter stores them, and tiny random weights;
so the whole path `--model file.gguf` -> metadata -> SentencePiece vocabulary -> ids is exercised, and the
model itself loads and generates with a 32,000-token vocabulary.
"""
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "python"))
import make_gguf_fixtures  # noqa: E402
import tokenizer_corpus  # noqa: E402

sentencepiece = pytest.importorskip("sentencepiece")
tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def spm_gguf(tmp_path_factory, shared_dir):
    model = shared_dir / "tokenizers" / "llama2-sentencepiece" / "tokenizer.model"
    path = tmp_path_factory.mktemp("spm") / "tiny_llama_spm.gguf"
    make_gguf_fixtures.write_tiny_llama(path, spm_model=model)
    return path, sentencepiece.SentencePieceProcessor(model_file=str(model))


def corpus(shared_dir, sp):
    # sentencepiece does not parse control tokens written as text (Hugging Face's conversion and llama.cpp with
    # special parsing do): items spelling one are left out, as in test_tokenizer_conformance.py.
    # The generated hard cases mix in the given "specials": here strings that are plain text to every tokenizer.
    controls = ["<s>", "</s>", "<unk>"]
    items = tokenizer_corpus.build_corpus(shared_dir, ["<|x|>", "[INST]", "<0x0A>"])
    return [tokenizer_corpus.as_text(b) for b in items if not any(c.encode() in b for c in controls)]


def tokenize(xinfer_bin, path, texts, *extra):
    r = subprocess.run([str(xinfer_bin), "tokenize", "--tokenizer", str(path), "--jsonl", *extra],
                       input="\n".join(json.dumps(t) for t in texts) + "\n", capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.split("\n")[:-1]]
    assert len(out) == len(texts)
    return out


def first_differences(texts, got, want, n=3):
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    return bad, "; ".join(f"{texts[i][:60]!r}: {got[i][:12]} vs {want[i][:12]}" for i in bad[:n])


def test_gguf_spm_ids_equal_sentencepiece_and_hugging_face(xinfer_bin, spm_gguf, shared_dir):
    path, sp = spm_gguf
    texts = corpus(shared_dir, sp)
    assert len(texts) >= 8000  # of 10,803: WikiText-2 spells "<unk>" in many lines
    got = tokenize(xinfer_bin, path, texts, "--no-special")
    bad, msg = first_differences(texts, got, [sp.encode(t) for t in texts])
    assert not bad, f"{len(bad)}/{len(texts)} differ from sentencepiece: {msg}"

    # add_bos_token is true in the file: <s> first, as sentencepiece-based Llama 2 tokenizers do.
    got = tokenize(xinfer_bin, path, texts[:500])
    assert got == [[sp.bos_id()] + sp.encode(t) for t in texts[:500]]


def test_gguf_spm_model_generates(xinfer_bin, spm_gguf):
    path, sp = spm_gguf
    r = subprocess.run([str(xinfer_bin), "generate", "--model", str(path), "--prompt", "Hello world",
                        "--max-tokens", "4", "--print-ids"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "vocab 32000" in r.stderr and "bos 1, eos [2]" in r.stderr, r.stderr
    # "Hello world" is 3 ids with the BOS (sentencepiece: [15043, 3186] after <s>).
    assert "prompt 3 tokens" in r.stderr and sp.encode("Hello world") == [15043, 3186]
    assert len(r.stdout.split()) == 4
