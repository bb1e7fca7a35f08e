"""`xinfer serve` with no --model serves the bundled model (models/xinfer-tiny-shakespeare) and its chat
template. Skipped until the bundled model is committed."""
import pytest

from xinfer_server import ROOT, Server

BUNDLED = ROOT / "models/xinfer-tiny-shakespeare"


@pytest.fixture(scope="module")
def bundled(xinfer_bin, tmp_path_factory):
    if not (BUNDLED / "config.json").exists():
        pytest.skip("bundled model not present")
    s = Server(xinfer_bin, None, tmp_path_factory.mktemp("bundled") / "serve.log")
    yield s
    assert s.stop() == 0


def test_default_model_chat_and_completion(bundled):
    import openai
    c = openai.OpenAI(base_url=bundled.base_url + "/v1", api_key="x", max_retries=0)
    assert c.models.list().data[0].id == "xinfer-tiny-shakespeare"
    messages = [{"role": "user", "content": "Who art thou?"}]
    r = c.chat.completions.create(model="xinfer-tiny-shakespeare", messages=messages, max_tokens=30, temperature=0.8,
                                  seed=11)
    assert r.choices[0].message.content and r.choices[0].finish_reason in ("stop", "length")
    parts = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="xinfer-tiny-shakespeare", messages=messages, max_tokens=30, temperature=0.8, seed=11, stream=True)
        if ch.choices]
    assert "".join(parts) == r.choices[0].message.content
    r = c.completions.create(model="xinfer-tiny-shakespeare", prompt="ROMEO:", max_tokens=20, temperature=0)
    assert r.usage.completion_tokens <= 20 and r.choices[0].text
