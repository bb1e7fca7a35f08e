"""Fairness between clients in wall-clock time (issue 13): one client's request at the cost bounds must not hold
another client's small requests behind it (the issue's case: one ~100-byte `n: 128, logprobs: 20` request
held 2-token requests of other clients 9-12 s).

The bound the small requests are held to follows from the scheduler (docs/scheduler.md, "Policy"): a waiting
request is admitted when admission is due, which is at most `max_decode_interval` (32) steps after the last
admission and at once when the head of the queue has waited `target_queue_time_s` (0.5 s); its group is its
own (one HTTP request), so the big request's 128 choices take one place in the shortest-first window and
cannot all go first. Admitted, it needs one step for its prompt + first token and one for its second token.
So a small request's latency is at most 0.5 s + 3 steps of the busy engine + what it costs alone; steps are
measured from the big request itself (its duration / its tokens per choice, an average). A 2-core machine
shared by the test's own client, the server's I/O threads and the CPU forward adds scheduling noise: the
assertion allows 0.5 s more for 9 in 10 requests and twice the bound for every one, still far under the
seconds a queue-order or a cost problem produces.
"""
import json
import statistics
import threading
import time

import numpy as np
import pytest

TARGET_QUEUE_TIME_S = 0.5  # SchedulerConfig::target_queue_time_s (serve's default)
NOISE_S = 0.5


def small_request(s, model_name):
    """One non-streamed 2-token request; returns its latency in seconds."""
    t0 = time.perf_counter()
    status, _, data = s.request("POST", "/v1/completions", {
        "model": model_name, "prompt": "Once upon a time", "max_tokens": 2, "ignore_eos": True, "temperature": 0})
    took = time.perf_counter() - t0
    assert status == 200, data[:300]
    assert json.loads(data)["usage"]["completion_tokens"] == 2
    return took


BIG = {
    # At --max-request-logprobs: 128 x 24 tokens x (1 + 20) = 64,512 of 65,536 entries.
    "logprobs_bound": {"prompt": "Once upon a time", "n": 128, "max_tokens": 24, "logprobs": 20,
                       "ignore_eos": True, "temperature": 1.0, "seed": 7},
    # At --max-request-tokens: 128 x 256 = 32,768 tokens, streamed.
    "tokens_bound": {"prompt": "Once upon a time", "n": 128, "max_tokens": 256, "ignore_eos": True,
                     "temperature": 1.0, "seed": 7, "stream": True},
}


@pytest.mark.parametrize("kind", sorted(BIG))
def test_small_requests_stay_fast_beside_a_max_cost_request(start_server, model_name, kind):
    s = start_server("--kv-cache-memory", "256MiB")
    alone = [small_request(s, model_name) for _ in range(8)][2:]
    big = dict(BIG[kind], model=model_name)
    result = {}

    def run_big():
        t0 = time.perf_counter()
        result["status"], _, result["data"] = s.request("POST", "/v1/completions", big, timeout=300)
        result["took"] = time.perf_counter() - t0

    t = threading.Thread(target=run_big)
    t.start()
    time.sleep(0.05)
    beside = []
    while t.is_alive():
        beside.append(small_request(s, model_name))
    t.join()

    assert result["status"] == 200, result["data"][:300]
    if big.get("stream"):
        events = [line[6:] for line in result["data"].decode().split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        texts = {}
        for e in events[:-1]:
            for ch in json.loads(e)["choices"]:
                texts[ch["index"]] = texts.get(ch["index"], 0) + (1 if ch.get("text") else 0)
        assert sorted(texts) == list(range(128))
    else:
        body = json.loads(result["data"])
        assert len(body["choices"]) == 128
        assert body["usage"]["completion_tokens"] == 128 * big["max_tokens"]
        for ch in body["choices"]:
            lp = ch["logprobs"]
            assert len(lp["tokens"]) == big["max_tokens"]
            # Keyed by decoded text (OpenAI's shape): ids that decode alike share an entry, so some have < 21.
            assert all(1 <= len(top) <= 21 for top in lp["top_logprobs"])
            assert statistics.median(len(top) for top in lp["top_logprobs"]) >= 20
    step_s = result["took"] / big["max_tokens"]  # every step decodes all 128 choices: one token each
    bound = TARGET_QUEUE_TIME_S + 3 * step_s + statistics.median(alone) + NOISE_S
    print(f"{kind}: big request {result['took']:.2f} s (~{step_s * 1e3:.1f} ms a step); 2-token requests alone "
          f"median {statistics.median(alone) * 1e3:.1f} ms; beside it {len(beside)} requests, median "
          f"{statistics.median(beside) * 1e3:.1f} ms, max {max(beside) * 1e3:.1f} ms (bound {bound * 1e3:.0f} ms)")
    assert len(beside) >= 5, (beside, result["took"])  # the big request ran long enough to be a test
    # The bound holds for steps of average length; on a loaded 2-core machine a single step can take several
    # times that (the process descheduled), so 9 in 10 requests must meet it and every one twice it.
    assert float(np.percentile(beside, 90)) <= bound, (beside, bound)
    assert max(beside) <= 2 * bound, (beside, bound)
