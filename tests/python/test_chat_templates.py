"""Chat templates: `xinfer chat-template` must render byte-identically to Python jinja2 set up the way
transformers' apply_chat_template(tokenize=False) sets it up (reimplemented here; transformers itself is
not required): ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols), a tojson filter
= json.dumps(ensure_ascii=False, ...), raise_exception and strftime_now globals, and render(messages=,
tools=, documents=None, add_generation_prompt=, **special_tokens_map, **kwargs).

Every template of ../shared/tokenizers (plus the public Llama-2-chat template, since the shared llama2
config has none) renders >= 20 conversations; cases where jinja2 raises must fail in xinfer too, with
the template's message and a non-zero exit.
"""
import copy
import json
import pathlib
import subprocess
from datetime import datetime

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATED = ["llama3", "qwen2_5", "qwen3", "mistral_nemo", "deepseek_v3"]

# The chat template of meta-llama/Llama-2-7b-chat-hf (the shared llama2 config is the base model's).
LLAMA2_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

SPECIAL_TOKEN_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def make_env() -> ImmutableSandboxedEnvironment:
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens_map(config: dict) -> dict:
    out = {}
    for key in SPECIAL_TOKEN_KEYS:
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if v:
            out[key] = v
    extra = [t["content"] if isinstance(t, dict) else t for t in config.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def reference_render(template: str, config: dict, request: dict):
    """Returns ("ok", text) or ("error", message), as transformers would."""
    req = copy.deepcopy(request)
    kwargs = {**special_tokens_map(config)}
    messages = req.pop("messages")
    tools = req.pop("tools", None)
    documents = req.pop("documents", None)
    add_generation_prompt = req.pop("add_generation_prompt", False)
    kwargs.update(req)
    try:
        text = make_env().from_string(template).render(
            messages=messages, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **kwargs)
        return "ok", text
    except Exception as e:  # noqa: BLE001 - any failure must be a failure in xinfer too
        return "error", str(e)


# ---------------------------------------------------------------- conversations

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city — returns °C",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. 'Paris' or \"東京\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "threshold": {"type": "number", "default": 0.5},
                "verbose": {"type": "boolean", "default": False, "nullable": None},
            },
            "required": ["city"],
        },
    },
}
CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression.\nSupports + - * / and parentheses.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
        "return": {"type": "number"},
    },
}


def call(cid, name, args, as_string):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def tool_conversation(as_string, content_none):
    return [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris and 2+3*4?"},
        {"role": "assistant", "content": None if content_none else "",
         "tool_calls": [call("call00001", "get_weather", {"city": "Paris", "days": 2}, as_string),
                        call("call00002", "calculate", {"expression": "2+3*4"}, as_string)]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": '{"temp": 21.5, "sky": "clear"}'},
        {"role": "tool", "tool_call_id": "call00002", "name": "calculate", "content": "14"},
        {"role": "assistant", "content": "It is 21.5 °C and clear in Paris; 2+3*4 = 14."},
        {"role": "user", "content": "Thanks!"},
    ]


BASE_CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "system_multi_turn": [{"role": "system", "content": "Answer briefly."},
                          {"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."},
                          {"role": "user", "content": "And Italy?"}, {"role": "assistant", "content": "Rome."},
                          {"role": "user", "content": "And Japan?"}],
    "ends_with_assistant": [{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": "Yes."}],
    "unicode": [{"role": "system", "content": "Réponds en français. 日本語も OK. مرحبا"},
                {"role": "user", "content": "Emoji: 👩‍👩‍👧‍👦 🇫🇷 e\u0301 ñ — “quotes” «guillemets» \u2028 ok"},
                {"role": "assistant", "content": "D’accord ! 👍"}, {"role": "user", "content": "你好，世界"}],
    "jinja_looking": [{"role": "user", "content": "{{ messages }} {% if true %}x{% endif %} {# c #} {{- raise_exception('no') -}}"},
                      {"role": "assistant", "content": "{% for m in messages %}{{ m }}{% endfor %}"},
                      {"role": "user", "content": "{%- set x = 1 -%} }} {{ '{{' }}"}],
    "whitespace": [{"role": "system", "content": "  padded system  \n"},
                   {"role": "user", "content": "\n\n  leading and trailing  \n\t"},
                   {"role": "assistant", "content": "   answer with spaces   "},
                   {"role": "user", "content": "line1\nline2\r\nline3\n"}],
    "empty_content": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""},
                      {"role": "user", "content": "now non-empty"}],
    "quotes_backslashes": [{"role": "user", "content": 'He said "hi" and \'bye\' \\n not a newline \\\\ {"json": [1, 2]}'}],
    "long": [{"role": "user", "content": ("The quick brown fox jumps over the lazy dog. " * 200).strip()},
             {"role": "assistant", "content": "Noted. " * 50}, {"role": "user", "content": "Summarize."}],
    "extra_fields": [{"role": "user", "content": "Hi", "name": "alice"},
                     {"role": "assistant", "content": "Hello alice", "name": "bot"}, {"role": "user", "content": "Bye"}],
    "not_alternating": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "starts_with_assistant": [{"role": "assistant", "content": "I speak first."}, {"role": "user", "content": "ok"}],
    "two_systems": [{"role": "system", "content": "First system."}, {"role": "user", "content": "Q"},
                    {"role": "system", "content": "Second system."}, {"role": "user", "content": "Q2"}],
    "think_in_history": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nSimple addition.\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "Also simple."},
        {"role": "user", "content": "<tool_response>\nnot really a tool\n</tool_response>"}],
}


def tool_requests():
    return {
        "tools_user": {"messages": [{"role": "user", "content": "What's the weather in Tōkyō?"}],
                       "tools": [WEATHER_TOOL, CALC_TOOL]},
        "tools_system_user": {"messages": [{"role": "system", "content": "Use tools wisely."},
                                           {"role": "user", "content": "Compute 6*7"}],
                              "tools": [CALC_TOOL]},
        "tool_calls_string_args": {"messages": tool_conversation(True, True), "tools": [WEATHER_TOOL, CALC_TOOL]},
        "tool_calls_dict_args": {"messages": tool_conversation(False, False), "tools": [WEATHER_TOOL, CALC_TOOL]},
        "tool_calls_no_tools_given": {"messages": tool_conversation(True, False)},
        "empty_tools_list": {"messages": [{"role": "user", "content": "hi"}], "tools": []},
        "bad_tool_call_id": {"messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [call("short", "calculate", {"expression": "1"}, False)]},
            {"role": "tool", "tool_call_id": "short", "content": "1"}], "tools": [CALC_TOOL]},
    }


def requests_for(name):
    reqs = {}
    for key, msgs in BASE_CONVERSATIONS.items():
        for gen in (True, False):
            reqs[f"{key}/gen={gen}"] = {"messages": msgs, "add_generation_prompt": gen}
    for key, req in tool_requests().items():
        for gen in (True, False):
            reqs[f"{key}/gen={gen}"] = {**req, "add_generation_prompt": gen}
    reqs["enable_thinking_false"] = {"messages": BASE_CONVERSATIONS["multi_turn"], "add_generation_prompt": True,
                                     "enable_thinking": False}
    reqs["enable_thinking_true"] = {"messages": BASE_CONVERSATIONS["multi_turn"], "add_generation_prompt": True,
                                    "enable_thinking": True}
    reqs["bos_override"] = {"messages": BASE_CONVERSATIONS["system_user"], "bos_token": "<BOS>", "eos_token": "<EOS>"}
    return reqs


# ---------------------------------------------------------------- harness


def run_jsonl(xinfer_bin, args, requests):
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests)
    proc = subprocess.run([str(xinfer_bin), "chat-template", *args, "--jsonl"], input=lines.encode(),
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    out = [json.loads(line) for line in proc.stdout.decode().split("\n") if line]
    assert len(out) == len(requests)
    return out


def check_template(xinfer_bin, args, template, config):
    reqs = requests_for("x")
    names = list(reqs)
    got = run_jsonl(xinfer_bin, args, [reqs[n] for n in names])
    ok = errors = 0
    failures = []
    for name, res in zip(names, got):
        kind, expected = reference_render(template, config, reqs[name])
        if kind == "ok":
            ok += 1
            if not res["ok"]:
                failures.append(f"{name}: xinfer failed: {res['error']}")
            elif res["text"] != expected:
                failures.append(f"{name}: mismatch\n--- jinja2\n{expected!r}\n--- xinfer\n{res['text']!r}")
        else:
            errors += 1
            if res["ok"]:
                failures.append(f"{name}: jinja2 raised {expected!r} but xinfer rendered {res['text'][:200]!r}")
    assert not failures, "\n".join(failures[:5]) + f"\n({len(failures)} failures)"
    return ok, errors


@pytest.mark.parametrize("name", TEMPLATED)
def test_shared_chat_templates_match_jinja2(xinfer_bin, shared_dir, name):
    path = shared_dir / "tokenizers" / name / "tokenizer_config.json"
    config = json.loads(path.read_text())
    ok, _ = check_template(xinfer_bin, ["--tokenizer-config", str(path)], config["chat_template"], config)
    assert ok >= 20, f"only {ok} conversations rendered without error"


def test_bundled_model_chat_template_matches_jinja2(xinfer_bin):
    """The default model's own template (models/xinfer-tiny-shakespeare) renders like jinja2 too."""
    path = pathlib.Path(__file__).resolve().parents[2] / "models/xinfer-tiny-shakespeare/tokenizer_config.json"
    config = json.loads(path.read_text())
    ok, _ = check_template(xinfer_bin, ["--tokenizer-config", str(path)], config["chat_template"], config)
    assert ok >= 20, f"only {ok} conversations rendered without error"


def test_llama2_chat_template_matches_jinja2(xinfer_bin, shared_dir, tmp_path):
    path = shared_dir / "tokenizers" / "llama2" / "tokenizer_config.json"
    config = json.loads(path.read_text())
    tpl = tmp_path / "llama2_chat.jinja"
    tpl.write_text(LLAMA2_CHAT_TEMPLATE)
    ok, errors = check_template(xinfer_bin, ["--tokenizer-config", str(path), "--template", str(tpl)],
                                LLAMA2_CHAT_TEMPLATE, config)
    assert ok >= 20 and errors >= 2


@pytest.mark.parametrize("name,template,expect", [
    ("llama2", LLAMA2_CHAT_TEMPLATE, "Conversation roles must alternate user/assistant/user/assistant/..."),
    ("mistral_nemo", None, "After the optional system message, conversation roles must alternate"),
])
def test_raise_exception_is_a_clear_error(xinfer_bin, shared_dir, tmp_path, name, template, expect):
    path = shared_dir / "tokenizers" / name / "tokenizer_config.json"
    args = [str(xinfer_bin), "chat-template", "--tokenizer-config", str(path)]
    if template:
        (tmp_path / "t.jinja").write_text(template)
        args += ["--template", str(tmp_path / "t.jinja")]
    req = {"messages": BASE_CONVERSATIONS["not_alternating"], "add_generation_prompt": True}
    proc = subprocess.run(args, input=json.dumps(req).encode(), capture_output=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stdout == b""
    assert expect in proc.stderr.decode()
    assert "raised" in proc.stderr.decode()


def test_missing_chat_template_is_a_clear_error(xinfer_bin, shared_dir):
    path = shared_dir / "tokenizers" / "gpt2" / "tokenizer_config.json"
    proc = subprocess.run([str(xinfer_bin), "chat-template", "--tokenizer-config", str(path)],
                          input=b'{"messages": []}', capture_output=True, timeout=60)
    assert proc.returncode != 0
    assert "no chat_template" in proc.stderr.decode()


# ---------------------------------------------------------------- interpreter features vs jinja2

FEATURE_CONTEXT = {
    "messages": [{"role": "user", "content": "Hi there", "n": 3}, {"role": "assistant", "content": " Yo ", "n": -7}],
    "tools": None, "d": {"b": 1, "a": [1.5, True, None, "x"], "c": {"k": "v"}}, "s": "  Hello, World  ",
    "nums": [3, 1, 2], "f": 2.5, "nn": None, "big": 1e20, "small": 1e-7, "u": "ünïcödé 日本",
}

FEATURE_TEMPLATES = [
    "{{ s|trim }}|{{ s|upper }}|{{ s|lower }}|{{ s|title }}|{{ s|capitalize }}|{{ s|length }}|{{ u|length }}",
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' H') }}|{{ s.split(',') }}|{{ s.split() }}",
    "{{ s.startswith('  He') }} {{ s.endswith(('x', '  ')) }} {{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }}",
    "{{ 'a-b-c'.split('-', 1) }} {{ 'a b  c'.rsplit(None, 1) }} {{ 'x'.join(['1', '2']) }} {{ u.upper() }} {{ u.title() }}",
    "{{ '{} and {}'.format(1, 'two') }} {{ '{0}{0}{name}'.format('r', name='n') }} {{ '%s=%d'|format('a', 3) }}",
    "{{ d }} {{ d|tojson }} {{ d|tojson(indent=2) }} {{ d|tojson(sort_keys=true) }} {{ d.items()|list }}",
    "{{ d|tojson(indent=4, separators=(',', ':')) }} {{ u|tojson }} {{ u|tojson(ensure_ascii=true) }}",
    "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('zz', 'dflt') }} {{ d.get('b') }} {{ d['c']['k'] }} {{ d.c.k }}",
    "{{ nums|sort }} {{ nums|sort(reverse=true) }} {{ nums|max }} {{ nums|min }} {{ nums|sum }} {{ nums|first }} {{ nums|last }}",
    "{{ nums[::-1] }} {{ nums[1:] }} {{ nums[:-1] }} {{ nums[-1] }} {{ u[::-1] }} {{ u[2:5] }} {{ nums|reverse|list }}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ f * 2 }}",
    "{{ big }} {{ small }} {{ f }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 123456789012345678.0 }} {{ -0.0 }} {{ 3|float }}",
    "{{ none }} {{ true }} {{ false }} {{ [none, true, 'it\\'s', \"q\\\"\"] }} {{ (1,) }} {{ (1, 'a') }} {{ {'k': (1, 2)} }}",
    "{{ 1 ~ 'a' ~ none ~ undefined_var }} {{ 'abc' ~ 2.0 }} {{ 'x' * 3 }} {{ [1] + [2] }} {{ 'a' + 'b' }}",
    "{{ undefined_var }}|{{ undefined_var is defined }}|{{ undefined_var|default('dflt') }}|{{ ''|default('e', true) }}",
    "{{ undefined_var|length }}|{{ undefined_var|list }}|{% for x in undefined_var %}never{% else %}empty{% endfor %}",
    "{{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ 's' is string }} {{ d is mapping }} "
    "{{ nums is sequence }} {{ s is iterable }} {{ none is none }} {{ false is false }} {{ 3 is odd }} {{ 4 is even }} "
    "{{ 9 is divisibleby 3 }} {{ 'a' is in 'cat' }} {{ 2 is in nums }} {{ 'user' is equalto 'user' }} {{ 1 is eq 1.0 }}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/"
    "{{ loop.last }}/{{ loop.length }}/{{ loop.cycle('odd', 'even') }}/{{ loop.previtem is defined }};{% endfor %}",
    "{% for m in messages if m.role == 'assistant' %}{{ loop.index }}:{{ m.content|trim }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in 'ab' %}{{ c }}{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% set ns = namespace(total=0, names=[]) %}{% for m in messages %}{% set ns.total = ns.total + m.n %}{% endfor %}{{ ns.total }}",
    "{% set x = 5 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}({{ x }}){% endfor %}{{ x }}",
    "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c') }}",
    "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}",
    "{% set block %}  inside {{ 1 + 1 }}  {% endset %}[{{ block }}]{% set t | upper %}shout{% endset %}{{ t }}",
    "{% filter upper %}filtered {{ s|trim }}{% endfilter %}",
    "{% set y = 0 %}{% set b %}{% set y = 2 %}{{ y }}{% endset %}{{ b }}{{ y }}{% filter upper %}{% set y = 3 %}{% endfilter %}{{ y }}",
    "{% set y = 0 %}{% for i in [] %}{% else %}{% set y = 1 %}[{{ y }}]{% endfor %}[{{ y }}]{% if true %}{% set y = 4 %}{% endif %}{{ y }}",
    "{% macro o() %}{% set x = 3 %}{% macro i() %}[{{ x }}]{% endmacro %}{{ i() }}{{ x }}{% endmacro %}{{ o() }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='content')|list }}",
    "{{ messages|map(attribute='role')|join(', ') }} {{ nums|map('string')|join }} {{ messages|selectattr('missing', 'undefined')|list|length }}",
    "{{ nums|select('odd')|list }} {{ nums|reject('odd')|list }} {{ [1, 1, 2]|unique|list }} {{ d|dictsort }} {{ d|items|list }}",
    "{{ 'x' if nums else 'y' }} {{ 'x' if not nums }}|{{ nums and 'yes' }} {{ [] or 'empty' }} {{ not none }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }}",
    "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 'b' in d }} {{ 3 in nums }} {{ 'user' == messages[0].role }} {{ messages[0] == messages[0] }}",
    "{{ '  x\n y\n\n z'|indent(2) }}|{{ 'a\nb'|indent(4, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}",
    "{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'abc'|int }} {{ 'abc'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 5|string ~ 'x' }}",
    "{{ '<a href=\"x\">&</a>'|e }} {{ 'hello world foo'|wordcount }} {{ -3|abs }} {{ 2.567|round(1) }} {{ 2.5|round }} {{ [1, 2, 3, 4, 5]|batch(2)|list }}",
    "{{ 'Hello'[0] }} {{ 'Hello'[-1] }} {{ nums[10] }}|{{ d.missing }}|{{ d['missing'] }}|{{ none.x }}|{{ d.items is defined }}",
    "  {% if true %}\n    lstrip and trim\n  {% endif %}\n  {{ 'var' }}  \n{# comment #}\n  {%- if true -%}  tight  {%- endif -%}  \nend\n",
    "{%+ if true %}keep{% endif %}\n  {%+ if true +%}\nx{% endif %}\n{% raw %}{{ not rendered }}{% endraw %}\n",
    "a\r\nb\r{{ 'c' }}\n\n",
    "{{ \"esc\\ttab\\nnl\\u00e9\\x41\" }} {{ 'multi' 'part' }} {{ 1_000 }} {{ 0.5e1 }}",
    "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}{{ a is defined }}",
    "{% set a, b = 1, 2 %}{{ a + b }} {% set t = (1, 2) %}{{ t }} {{ t[0] }} {{ (t|list) }}",
    "{{ messages[0].content.split()[-1].upper().lower() }} {{ ('a,b'.split(','))|length }} {{ s.strip().startswith('Hello') }}",
    "{{ nums|length - 1 }} {{ -nums|length }} {{ (nums|first) + 1 }} {{ messages|length > 1 and messages[1].role }}",
    "{{ f is even }} {{ '%s' is odd }} {{ 9 is divisibleby 3 }} {{ 2.5|round }} {{ true|round }} {{ 7|round }} {{ -1 }} {{ 2 - 3 }}",
    "{{ messages|truncate(3) }} {{ nums|truncate(3)|length }} {{ 'a long sentence here'|truncate(9) }}",
    "{{ f[1:] }}",
    "{{ nn[::-1] }}",
    "{{ f|indent }}",
    "{{ undefined_var|dictsort }}",
    "{{ nn is none and nn is not defined }}",
    "{{ messages is lower }} {{ 'ABC 1' is upper }} {{ 'abC' is lower }} {{ '12' is lower }} {{ nums is upper }}",
    "{{ raise_exception('custom failure: ' ~ messages|length) }}",
    "{{ undefined_var.attr }}",
    "{{ 'a' + 1 }}",
    "{{ d|unknown_filter }}",
    "{% for x in 5 %}{% endfor %}",
    "{% if %}",
    "{% for x in nums %}",
    "{{ d.pop('b') }}",
    "{{ nums.append(4) }}",
    "{% set a, b = [1, 2, 3] %}",
    "{{ 1 // 0 }}",
    "{{ undefined_var|tojson }}",
    "{{ 1 < 'a' }}",
]


def test_interpreter_features_match_jinja2(xinfer_bin, tmp_path):
    failures = []
    for i, template in enumerate(FEATURE_TEMPLATES):
        try:
            expected = ("ok", make_env().from_string(template).render(**FEATURE_CONTEXT))
        except Exception as e:  # noqa: BLE001
            expected = ("error", f"{type(e).__name__}: {e}")
        tpl = tmp_path / f"t{i}.jinja"
        tpl.write_bytes(template.encode())
        proc = subprocess.run([str(xinfer_bin), "chat-template", "--template", str(tpl)],
                              input=json.dumps(FEATURE_CONTEXT).encode(), capture_output=True, timeout=60)
        got_ok = proc.returncode == 0
        if expected[0] == "ok":
            if not got_ok:
                failures.append(f"#{i} {template!r}: xinfer failed: {proc.stderr.decode()}")
            elif proc.stdout.decode() != expected[1]:
                failures.append(f"#{i} {template!r}:\n  jinja2: {expected[1]!r}\n  xinfer: {proc.stdout.decode()!r}")
        else:
            if got_ok:
                failures.append(f"#{i} {template!r}: jinja2 raised {expected[1]!r}, xinfer gave {proc.stdout.decode()!r}")
            elif not proc.stderr.strip():
                failures.append(f"#{i} {template!r}: no error message")
    assert not failures, "\n".join(failures)
