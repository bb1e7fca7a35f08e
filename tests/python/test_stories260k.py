"""stories260K, a real trained Llama model, end to end through `xinfer generate`.

The checkpoint (../shared/models/stories260K, llama2.c format) is converted at test time with
tools/convert_llama2c.py; the reference is transformers' greedy decoding of the converted model
(tests/golden/stories260K/golden.json, made by tools/make_golden.py on the GPU machine, which also checked
transformers against the numpy llama2.c reference)."""
import json
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests/golden/stories260K/golden.json").read_text())


@pytest.fixture(scope="module")
def stories_dir(stories260k_dir):
    return stories260k_dir


def generate(xinfer_bin, *args):
    return subprocess.run([str(xinfer_bin), "generate", *args], capture_output=True, text=True, timeout=120)


def test_greedy_200_tokens_match_transformers(xinfer_bin, stories_dir):
    r = generate(xinfer_bin, "--model", str(stories_dir), "--prompt-ids", "1", "--max-tokens", "200",
                 "--ignore-eos", "--print-ids")
    assert r.returncode == 0, r.stderr
    ids = [int(t) for t in r.stdout.split()]
    assert ids == GOLDEN["greedy"]


def test_streamed_text_is_the_story(xinfer_bin, stories_dir):
    r = generate(xinfer_bin, "--model", str(stories_dir), "--prompt-ids", "1", "--max-tokens", "200", "--ignore-eos")
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip("\n") == GOLDEN["text"]
    assert r.stdout.startswith("Once upon a time, there was a little girl named Lily.")


def test_text_prompt_is_tokenized_with_bos(xinfer_bin, stories_dir):
    # "Once upon a time" encoded with BOS must continue exactly like the BOS-only greedy story does.
    r = generate(xinfer_bin, "--model", str(stories_dir), "--prompt", "Once upon a time", "--max-tokens", "12")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(", there was a little girl named Lily")


def test_seeded_sampling_is_reproducible(xinfer_bin, stories_dir):
    args = ["--model", str(stories_dir), "--prompt", "Once upon a time", "--max-tokens", "40",
            "--temperature", "0.9", "--top-p", "0.9", "--seed", "7"]
    a, b = generate(xinfer_bin, *args), generate(xinfer_bin, *args)
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    c = generate(xinfer_bin, *args[:-1], "8")
    assert c.stdout != a.stdout


@pytest.mark.parametrize("args, message", [
    (["--model", "/nonexistent/model"], "does not exist"),
    (["--prompt", "hi"], "--model is required"),
    (["--model", "{model}", "--prompt-ids", "1,x"], "'x' is not a token id"),
    (["--model", "{model}", "--prompt-ids", "1,99999"], "outside the vocabulary"),
    (["--model", "{model}", "--prompt-ids", "1", "--max-tokens", "600"], "exceeds the context length 512"),
    (["--model", "{model}", "--prompt-ids", "1", "--top-p", "1.5"], "top_p"),
    (["--model", "{model}", "--bogus"], "unknown flag '--bogus'"),
])
def test_bad_input_gives_clear_error(xinfer_bin, stories_dir, args, message):
    r = generate(xinfer_bin, *[a.replace("{model}", str(stories_dir)) for a in args])
    assert r.returncode != 0
    assert message in r.stderr
    assert "Check failed" not in r.stderr
