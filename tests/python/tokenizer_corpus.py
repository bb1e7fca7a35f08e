"""The conformance corpus for the tokenizer tests: >= 10,000 lines per tokenizer.

Real text (Shakespeare, WikiText-2) plus generated lines that stress the tokenizer's edges: source code,
CJK, Arabic, emoji and ZWJ sequences, combining marks, long whitespace runs, digits, special-token
strings inside text, U+FFFD, and invalid UTF-8 (as raw bytes). Deterministic (fixed seed).

Each item is `bytes`; most are valid UTF-8. Reference tokenizers (Python str API) get
`b.decode("utf-8", errors="replace")`; xinfer gets the raw bytes.
"""
import pathlib
import random

CODE = [
    "def main(argv):\n    for i in range(10):\n        print(f\"{i:>4} -> {i**2}\")\n    return 0\n",
    "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() == 3 ? 0 : 1;\n}\n",
    "if (x != NULL && *x >= 0x7fffffff) { y += x[i] << 3; } // overflow?",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name DESC;",
    "const f = async (a, b) => { await fetch(`/api/${a}?q=${b}`); };",
    "    \t  \n\t\tindented\tcode\r\n\r\n",
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "fn foo<'a>(x: &'a str) -> Result<Vec<u8>, Box<dyn Error>> { Ok(vec![]) }",
    "x = [1,2,3]; y = {'a': 1, \"b\": [True, None]}  # comment",
    "$ ls -la | grep '^d' | awk '{print $9}' > /dev/null 2>&1",
]
WORDS = ["I'll", "DON'T", "you're", "we've", "she's", "I'M", "they'd", "it's", "ſ", "K", "Straße",
         "naïve", "café", "résumé", "ﬁne", "Ⅻ", "①②③", "½", "x²", "İstanbul", "ǅ", "ΣΑΣ", "Ω", "ℌ"]
EMOJI = ["🤖", "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏿‍💻", "❤️", "🇫🇷", "🇯🇵", "👩‍❤️‍💋‍👨", "🫠", "☃", "✅", "🔥🔥🔥"]
WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2003", "\u0085", "\u2028", "\x0b", "\x0c"]


def _rand_chars(rng, lo, hi, n):
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def _generated(rng, specials):
    out = []
    for _ in range(400):  # code
        s = rng.choice(CODE)
        if rng.random() < 0.5:
            s = s.replace("    ", "\t")
        out.append(s)
    for _ in range(500):  # CJK, kana, hangul
        parts = []
        for _ in range(rng.randint(1, 6)):
            lo, hi = rng.choice([(0x4E00, 0x9FA5), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3),
                                 (0x3400, 0x4DBF), (0x20000, 0x2A6DF)])
            parts.append(_rand_chars(rng, lo, hi, rng.randint(1, 12)))
        out.append(rng.choice(["", " ", "，"]).join(parts) + rng.choice(["", "。", "！", "?"]))
    for _ in range(400):  # Arabic, Hebrew, Devanagari, Thai, Cyrillic, Greek
        lo, hi = rng.choice([(0x0621, 0x064A), (0x05D0, 0x05EA), (0x0905, 0x0939), (0x0E01, 0x0E2E),
                             (0x0410, 0x044F), (0x0391, 0x03C9)])
        words = [_rand_chars(rng, lo, hi, rng.randint(1, 9)) for _ in range(rng.randint(1, 8))]
        if lo == 0x0621 and rng.random() < 0.5:
            words = [w + "\u064e\u0651" for w in words]
        out.append(" ".join(words) + rng.choice(["", ".", "؟", " 123"]))
    for _ in range(500):  # emoji and ZWJ
        out.append(" ".join(rng.choice(EMOJI) * rng.randint(1, 3) for _ in range(rng.randint(1, 6)))
                   + rng.choice(["", " ok", "!", "\n"]))
    for _ in range(400):  # combining marks
        base = "".join(rng.choice("aeiouAEIOUnc ") for _ in range(rng.randint(1, 12)))
        s = "".join(c + "".join(chr(rng.randint(0x0300, 0x036F)) for _ in range(rng.randint(0, 3))) for c in base)
        out.append(s + rng.choice(["", " é", " e\u0301", " \u1100\u1161\u11a8", " Å"]))
    new_marks = [0x7FD, 0x8D1, 0x8D3, 0x9FE, 0xD3B, 0x1ABF, 0x1DF6, 0x10D24]  # combining, Unicode >= 10
    for _ in range(100):  # Hugging Face normalizes with Unicode 9.0 data: newer marks must not reorder
        out.append("".join(rng.choice(["x", "a", "e", " ", "\u0301", "\u0334", "\u2d7f", "\u0316"]
                                      + [chr(c) for c in new_marks]) for _ in range(rng.randint(2, 12))))
    for _ in range(500):  # whitespace runs
        s = ""
        for _ in range(rng.randint(1, 8)):
            s += rng.choice(["word", "x", "Hello", "123", ".", "", "日本"])
            s += "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 40)))
        out.append(s)
    out.append(" " * 5000)
    out.append("\n" * 3000 + "end")
    out.append("\t \t" * 1000)
    for _ in range(400):  # digits
        out.append(rng.choice(["", "$", "€", "#", " "]) + str(rng.randint(0, 10 ** rng.randint(1, 30)))
                   + rng.choice(["", ".5", ",000", "%", " km", "th", "٣٤٥", "１２３", "²"]))
    for _ in range(600):  # special-token strings inside text
        toks = [rng.choice(specials) for _ in range(rng.randint(1, 4))]
        filler = lambda: rng.choice(["", " ", "Hello", " world", "\n", "x", "日本", "<", ">", "|"])  # noqa: E731
        out.append("".join(filler() + t + filler() for t in toks))
    for _ in range(300):  # replacement characters
        out.append(rng.choice(["", "a", " "]) + "\ufffd" * rng.randint(1, 4) + rng.choice(["", "b", " c\ufffd"]))
    for _ in range(400):  # words with case-folding and compatibility characters
        out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))))
    for _ in range(500):  # random code points from many blocks (no surrogates)
        chars = []
        for _ in range(rng.randint(1, 30)):
            cp = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF), rng.randint(0x3000, 0xD7FF),
                             rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x1FAFF)])
            chars.append(chr(cp))
        out.append("".join(chars))
    items = [s.encode("utf-8") for s in out]
    for _ in range(300):  # invalid UTF-8
        b = bytearray(rng.choice(["abc ", "日本", "", " x"]).encode())
        for _ in range(rng.randint(1, 5)):
            b += rng.choice([bytes([rng.randint(0x80, 0xFF)]), b"\xe6\x97", b"\xf0\x9f\x98", b"\xc0\xaf",
                             b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff\xfe", "ok".encode()])
        items.append(bytes(b))
    return items


def build_corpus(shared_dir: pathlib.Path, specials, seed: int = 1234):
    rng = random.Random(seed)
    shakespeare = (shared_dir / "corpora/tinyshakespeare/input.txt").read_text(encoding="utf-8").split("\n")
    wiki = (shared_dir / "corpora/wikitext-2/test.txt").read_text(encoding="utf-8").split("\n")
    items = []
    for _ in range(3000):  # 1-4 consecutive lines, newlines kept
        i = rng.randrange(len(shakespeare) - 4)
        items.append("\n".join(shakespeare[i:i + rng.randint(1, 4)]).encode())
    wiki = [w for w in wiki if w.strip()]
    for _ in range(2500):
        items.append(rng.choice(wiki).encode())
    items += _generated(rng, specials)
    return items


def as_text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")
