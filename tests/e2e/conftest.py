"""Fixtures for end-to-end tests: a real `xinfer serve` subprocess on 127.0.0.1 and a free port.

The model is stories260K (../shared/models/stories260K), converted at test time with tools/convert_llama2c.py.
Its tokenizer_config.json has no chat template, so the fixture adds a simple one (CHAT_TEMPLATE) to the
converted copy; reference renderings come from jinja2 in the tests themselves.
"""
import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, shared_dir):
    out = tmp_path_factory.mktemp("e2e") / "stories260K"
    src = shared_dir / "models/stories260K"
    subprocess.run([sys.executable, str(ROOT / "tools/convert_llama2c.py"), "--checkpoint", str(src / "stories260K.bin"),
                    "--tokenizer", str(src / "tok512.bin"), "--out", str(out)], check=True, capture_output=True)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=1))
    return out


class Server:
    """A running `xinfer serve`; stderr goes to a log file that start() watches for the ready line."""

    def __init__(self, xinfer_bin, model_dir, log_path, *extra):
        self.log_path = log_path
        self.log = open(log_path, "w")
        model_args = ["--model", str(model_dir)] if model_dir else []  # None: the bundled default model
        self.proc = subprocess.Popen([str(xinfer_bin), "serve", *model_args, "--port", "0",
                                      "--threads", "2", "--kv-cache-mb", "32", *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            text = pathlib.Path(log_path).read_text()
            if "ready in" in text:
                for line in text.splitlines():
                    if "listening on http://" in line:
                        self.port = int(line.split("listening on http://")[1].split()[0].rsplit(":", 1)[1])
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"xinfer serve exited early:\n{text}")
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise RuntimeError("xinfer serve did not become ready:\n" + pathlib.Path(log_path).read_text())
        self.base_url = f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=60):
        """Raw HTTP (for malformed bodies): returns (status, headers dict, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def json(self, method, path, body=None, headers=None):
        status, _, data = self.request(method, path, body, headers)
        return status, (json.loads(data) if data else None)

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        values = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                if "{" in name:  # drop the engine's model_name label: one model per server
                    base, labels = name[:-1].split("{", 1)
                    rest = [lbl for lbl in labels.split(",") if lbl and not lbl.startswith("model_name=")]
                    name = base + ("{" + ",".join(rest) + "}" if rest else "")
                values[name] = float(value)
        return values

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


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
