"""`xinfer bench` on the CPU with the bundled tiny model: the sampling flags reach every request (top-k 1 and
min-p 1 reduce sampling to the greedy tokens), per-request seeds make sampled runs reproducible (same digest
of all output ids twice, another --seed changes it), and the result JSON names and records the settings."""
import json
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "xinfer-tiny-shakespeare"


def bench(xinfer_bin, out_dir, *args):
    r = subprocess.run([str(xinfer_bin), "bench", "--model", str(MODEL), "--backend", "cpu", "--threads", "2",
                        "--input-len", "32", "--output-len", "32", "--num-prompts", "16", "--no-progress",
                        "--output-dir", str(out_dir), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    files = list(pathlib.Path(out_dir).glob("*.json"))
    assert len(files) == 1, files
    doc = json.loads(files[0].read_text())
    files[0].unlink()
    return doc


@pytest.fixture(scope="module")
def greedy_doc(xinfer_bin, tmp_path_factory):
    """The greedy run both tests compare against, run once."""
    return bench(xinfer_bin, tmp_path_factory.mktemp("bench_greedy"))


def digest(doc):
    (row,) = doc["results"]
    assert row["output_tokens"] == 16 * 32  # ignore_eos: exactly --output-len each
    return row["output_digest"]


def test_sampled_runs_are_reproducible_and_named(xinfer_bin, tmp_path, greedy_doc):
    sampled = ["--temperature", "1", "--top-p", "0.9"]
    a = bench(xinfer_bin, tmp_path, *sampled)
    b = bench(xinfer_bin, tmp_path, *sampled)
    other_seed = bench(xinfer_bin, tmp_path, *sampled, "--seed", "1")
    greedy = greedy_doc

    assert a["name"] == "xinfer-tiny-shakespeare_cpu_throughput_sampled"
    assert greedy["name"] == "xinfer-tiny-shakespeare_cpu_throughput"
    assert a["sampling"]["greedy"] is False and greedy["sampling"]["greedy"] is True
    assert a["sampling"]["temperature"] == 1.0 and a["sampling"]["top_p"] == 0.9
    assert a["sampling"]["top_k"] == 0 and a["sampling"]["min_p"] == 0.0 and a["sampling"]["seed"] == 0
    assert greedy["sampling"]["temperature"] == 0.0

    assert digest(a) == digest(b), "same --seed: the same tokens"
    assert digest(a) != digest(other_seed), "another --seed: other tokens"
    assert digest(a) != digest(greedy), "temperature 1 samples"


def test_sampling_flags_reach_the_sampler(xinfer_bin, tmp_path, greedy_doc):
    greedy = digest(greedy_doc)
    assert digest(bench(xinfer_bin, tmp_path, "--temperature", "1", "--top-k", "1")) == greedy
    assert digest(bench(xinfer_bin, tmp_path, "--temperature", "1.5", "--min-p", "1")) == greedy
    named = bench(xinfer_bin, tmp_path, "--temperature", "0.8", "--name", "mine")
    assert named["name"] == "mine" and named["sampling"]["temperature"] == 0.8


def test_batch_limits_default_by_device(xinfer_bin, greedy_doc):
    """Throughput mode takes vLLM's offline batch limits by device: without a GPU (here: the CPU backend) 512
    sequences and 8192 batched tokens; --help says what a large GPU gets."""
    assert "max_num_seqs=512 max_num_batched_tokens=8192" in greedy_doc["engine_config"]
    r = subprocess.run([str(xinfer_bin), "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    help_text = " ".join(r.stdout.split())
    assert "(default: 1024 in throughput mode on a GPU of >= 70 GiB other than an A100, else 512)" in help_text
    assert "(default: 16384 in throughput mode on a GPU of >= 70 GiB other than an A100, else 8192)" in help_text


def test_preemptions_are_counted_and_change_no_token(xinfer_bin, tmp_path, greedy_doc):
    """A KV cache of 3 MiB (24 blocks of 16 tokens) for 16 requests of 64 tokens forces preemptions: the result
    counts them and the tokens whose KV they dropped, and the recomputed requests produce the greedy run's tokens."""
    doc = bench(xinfer_bin, tmp_path, "--kv-cache-memory", "3MiB")
    steps = doc["results"][0]["step_breakdown"]
    assert steps["preemptions"] > 0 and steps["preempted_tokens"] >= steps["preemptions"]
    assert greedy_doc["results"][0]["step_breakdown"]["preemptions"] == 0
    assert digest(doc) == digest(greedy_doc)


def test_invalid_sampling_flag_fails_before_loading(xinfer_bin, tmp_path):
    r = subprocess.run([str(xinfer_bin), "bench", "--model", str(MODEL), "--backend", "cpu", "--top-p", "1.5",
                        "--output-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "top_p must be in (0, 1], got 1.5" in r.stderr
    assert "engine:" not in r.stderr  # no engine was started
