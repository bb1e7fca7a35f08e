"""`xinfer serve --swap-space` (swap-to-host preemption, docs/scheduler.md) on the CPU backend, through the official
openai client: with a KV cache far too small for 8 concurrent stories260K requests, preempted sequences' KV goes to
the swap space and back, and every greedy completion equals the one a roomy server gives (also at tensor-parallel
size 2, where every rank copies its own heads); the start-up log states the swap space, /metrics counts the swaps,
the log warns about the preemptions, and a negative size is refused at start-up with the field named."""
import concurrent.futures
import pathlib
import re
import subprocess
import time

import openai
import pytest

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park. They", "One day, a big",
           "Tom had a red ball", "The sun was", "Mom said", "A little bird"]
# stories260K: 5 layers x 4 KV heads x 8 dims, K and V in f32: 20 KiB per 16-token block. 130 KiB hold 5 usable
# blocks (80 tokens) for 8 requests of up to ~60 tokens: preemption; the TP 2 ranks share the same budget.
# No prefix cache: a victim's blocks could otherwise still be cached when it resumes (then nothing is copied back).
SMALL_KV = ["--kv-cache-memory", "130KiB", "--max-num-batched-tokens", "16", "--no-enable-prefix-caching"]


def client_for(server):
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    c.model_name = c.models.list().data[0].id
    return c


def completions(client):
    def one(p):
        r = client.completions.create(model=client.model_name, prompt=p, max_tokens=48, temperature=0)
        return r.choices[0].text
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
        return list(ex.map(one, PROMPTS))


def metric(server, name):
    status, _, body = server.request("GET", "/metrics")
    assert status == 200
    m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$", body.decode(), re.MULTILINE)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


@pytest.fixture(scope="module")
def roomy(start_server):
    return completions(client_for(start_server("--max-num-batched-tokens", "16")))


@pytest.mark.parametrize("tp", [1, 2])
def test_preempted_sequences_swap_and_answer_as_a_roomy_server(start_server, roomy, tp):
    server = start_server(*SMALL_KV, "--swap-space", "0.001", "--tensor-parallel-size", str(tp))
    log = pathlib.Path(server.log_path).read_text()
    # 0.001 GiB over blocks of 20 KiB (TP 1) or, per rank, 10 KiB (TP 2: two of the four KV heads)
    assert re.search(rf"KV swap space [0-9.]+ GiB of host memory = {52 * tp} blocks", log), log
    assert completions(client_for(server)) == roomy
    assert metric(server, "xinfer:num_preemptions_total") > 0
    assert metric(server, "xinfer:kv_swap_outs_total") > 0
    assert metric(server, "xinfer:kv_swap_ins_total") > 0
    deadline = time.time() + 5  # everything back once the last requests' steps are published
    while metric(server, "xinfer:kv_swap_space_usage_perc") != 0 and time.time() < deadline:
        time.sleep(0.05)
    assert metric(server, "xinfer:kv_swap_space_usage_perc") == 0
    # The first warning: the first step that preempted may have preempted several, some of which (having computed
    # nothing yet) recompute.
    assert re.search(r"preemption: \d+ so far \(\d+ with their KV swapped to host memory",
                     pathlib.Path(server.log_path).read_text())


def test_without_a_swap_space_preempted_sequences_recompute(start_server, roomy):
    server = start_server(*SMALL_KV)
    assert "KV swap space none (preempted sequences recompute)" in pathlib.Path(server.log_path).read_text()
    assert completions(client_for(server)) == roomy
    assert metric(server, "xinfer:num_preemptions_total") > 0
    assert metric(server, "xinfer:num_preempted_tokens_total") > 0
    assert metric(server, "xinfer:kv_swap_outs_total") == 0
    assert "give --swap-space" in pathlib.Path(server.log_path).read_text()


def test_negative_swap_space_is_refused(xinfer_bin, model_dir):
    r = subprocess.run([str(xinfer_bin), "serve", "--model", str(model_dir), "--port", "0", "--threads", "2",
                        "--swap-space", "-1"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "swap_space_gib must be >= 0 GiB" in r.stdout + r.stderr
