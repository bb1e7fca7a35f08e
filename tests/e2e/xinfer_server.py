"""Helpers shared by the e2e tests: a running `xinfer serve` subprocess and the chat template the fixture adds."""
import http.client
import json
import pathlib
import signal
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


class Server:
    """A running `xinfer serve`; stderr goes to a log file that start() watches for the ready line."""

    def __init__(self, xinfer_bin, model_dir, log_path, *extra):
        self.log_path = log_path
        self.log = open(log_path, "w")
        model_args = ["--model", str(model_dir)] if model_dir else []  # None: the bundled default model
        self.proc = subprocess.Popen([str(xinfer_bin), "serve", *model_args, "--port", "0",
                                      "--threads", "2", "--kv-cache-memory", "32MiB", *extra],
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
