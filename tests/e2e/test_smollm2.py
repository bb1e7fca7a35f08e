"""`xinfer serve --model SmolLM2-135M-Instruct.Q4_1.gguf` (scripts/fetch_smollm2.sh): a real chat model from a
GGUF file, driven with the official openai client. The chat template is the file's tokenizer.chat_template
(ChatML) and generation stops at <|im_end|> (tokenizer.ggml.eos_token_id).

The question goes with a system message of its own: with the template's default system prompt ("You are a
helpful AI assistant named SmolLM, trained by Hugging Face") this Q4_1 file answers "L'Etoile, la ..." in
llama.cpp too (llama-cpp-python, greedy); the float32 dequantized weights answer Paris either way."""
import subprocess

import pytest

from xinfer_server import ROOT, Server


@pytest.fixture(scope="module")
def smollm2(xinfer_bin, tmp_path_factory):
    r = subprocess.run(["bash", str(ROOT / "scripts/fetch_smollm2.sh")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    s = Server(xinfer_bin, r.stdout.strip(), tmp_path_factory.mktemp("smollm2") / "serve.log")
    yield s
    assert s.stop() == 0


def test_capital_of_france(smollm2):
    import openai
    c = openai.OpenAI(base_url=smollm2.base_url + "/v1", api_key="x", max_retries=0)
    name = c.models.list().data[0].id
    assert name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    messages = [{"role": "system", "content": "You are a helpful AI assistant."},
                {"role": "user", "content": "What is the capital of France?"}]
    r = c.chat.completions.create(model=name, messages=messages, max_tokens=40, temperature=0)
    assert "Paris" in r.choices[0].message.content, r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"  # <|im_end|> ends the answer
    parts = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model=name, messages=messages, max_tokens=40, temperature=0, stream=True) if ch.choices]
    assert "".join(parts) == r.choices[0].message.content
