"""Completions logprobs.text_offset: where each token starts in the returned text (code points), against the
offsets Hugging Face `tokenizers` gives for the same string (Encoding.offsets), on a SentencePiece-style
tokenizer with byte fallback (stories260K: "▁" words, "<0xC3>" bytes) and a byte-level BPE one (the bundled
model). Characters split over tokens ("ë" as two byte tokens, an emoji as four) used to drift the offsets by
one per extra byte, and SentencePiece words decoded alone lost their leading space (one more per word)."""
import pytest
import tokenizers

from xinfer_server import ROOT, Server

PROMPTS = ["Once upon a time, Zoë saw 🙂 the end", "日本 — naïve café 🙂🙃!", "plain ascii words only"]


@pytest.fixture(scope="module", params=["stories260K", "bundled"])
def served(request, xinfer_bin, model_dir, tmp_path_factory):
    model = model_dir if request.param == "stories260K" else ROOT / "models/xinfer-tiny-shakespeare"
    s = Server(xinfer_bin, model if request.param == "stories260K" else None,
               tmp_path_factory.mktemp("offsets") / "serve.log")
    yield s, tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
    s.stop()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_echo_offsets_equal_the_tokenizers_offsets(served, prompt):
    s, hf = served
    status, body = s.json("POST", "/v1/completions", {"prompt": prompt, "echo": True, "logprobs": 0,
                                                      "max_tokens": 0})
    assert status == 200, body
    c = body["choices"][0]
    enc = hf.encode(prompt)
    assert c["text"] == prompt
    assert len(c["logprobs"]["tokens"]) == len(enc.ids)
    assert c["logprobs"]["text_offset"] == [start for start, _ in enc.offsets], list(zip(enc.tokens, enc.offsets))


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_generated_offsets_follow_the_text(served, prompt):
    """Generated tokens (here after an echoed prompt, and without echo): offsets non-decreasing, inside the
    text, and every token whose text alone is complete sits at its offset (a SentencePiece word may start
    one earlier, at its space)."""
    s, _ = served
    for echo in (True, False):
        status, body = s.json("POST", "/v1/completions", {"prompt": prompt, "echo": echo, "logprobs": 1,
                                                          "max_tokens": 12, "temperature": 0, "ignore_eos": True})
        assert status == 200, body
        c = body["choices"][0]
        text, lp = c["text"], c["logprobs"]
        offsets = lp["text_offset"]
        assert offsets == sorted(offsets) and offsets[-1] <= len(text), (text, offsets)
        generated = list(zip(lp["tokens"], offsets))[-12:]
        for tok, off in generated:
            if "\ufffd" in tok or not tok:
                continue
            assert text[off:off + len(tok)] == tok or text[off:off + len(tok) + 1] == " " + tok, (tok, off, text)
