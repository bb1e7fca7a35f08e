"""Fixtures for end-to-end tests: a real `xinfer serve` subprocess on 127.0.0.1 and a free port.

The model is stories260K (the session fixture stories260k_dir in tests/conftest.py). Its
tokenizer_config.json has no chat template, so the fixture adds a simple one (CHAT_TEMPLATE) to a copy;
reference renderings come from jinja2 in the tests themselves.
"""
import json
import shutil

import pytest

from xinfer_server import CHAT_TEMPLATE, ROOT, Server  # noqa: F401


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, stories260k_dir):
    out = tmp_path_factory.mktemp("e2e") / "stories260K"
    shutil.copytree(stories260k_dir, out)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=1))
    return out


@pytest.fixture(scope="session")
def start_server(xinfer_bin, model_dir, tmp_path_factory):
    started = []

    def start(*extra):
        log = tmp_path_factory.mktemp("serve") / "serve.log"
        s = Server(xinfer_bin, model_dir, log, *extra)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def server(start_server):
    return start_server()


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def model_name():
    return "stories260K"
