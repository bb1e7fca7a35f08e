// sampler_probe: a test driver for tests/python/test_sampler_numpy.py. Reads one JSON job on stdin,
// samples `draws` times (draw i uses SequenceRng stream i of the seed, all at the same output position) and
// prints {"counts": [...], "token": first draw, "logprob": ..., "top_logprobs": [[id, lp], ...]}.
//   {"logits": [..], "prompt": [..], "output": [..], "draws": N, "seed": S, "eos": [..],
//    "params": {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
//               "frequency_penalty", "logit_bias": {"id": v}, "logprobs", "min_tokens", "stop_token_ids"}}
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "xinfer/core/thread_pool.h"
#include "xinfer/engine/sampler.h"

int main() {
  using namespace xinfer::engine;
  const nlohmann::json job = nlohmann::json::parse(std::cin);
  const auto logits = job.at("logits").get<std::vector<float>>();
  const auto prompt = job.value("prompt", std::vector<int32_t>{});
  const auto output = job.value("output", std::vector<int32_t>{});
  const int64_t draws = job.value("draws", int64_t{1});
  const int64_t seed = job.value("seed", int64_t{0});
  const nlohmann::json& jp = job.at("params");
  SamplingParams p;
  p.temperature = jp.value("temperature", p.temperature);
  p.top_k = jp.value("top_k", p.top_k);
  p.top_p = jp.value("top_p", p.top_p);
  p.min_p = jp.value("min_p", p.min_p);
  p.repetition_penalty = jp.value("repetition_penalty", p.repetition_penalty);
  p.presence_penalty = jp.value("presence_penalty", p.presence_penalty);
  p.frequency_penalty = jp.value("frequency_penalty", p.frequency_penalty);
  p.min_tokens = jp.value("min_tokens", p.min_tokens);
  p.stop_token_ids = jp.value("stop_token_ids", p.stop_token_ids);
  if (jp.contains("logprobs")) p.logprobs = jp.at("logprobs").get<int32_t>();
  if (jp.contains("logit_bias"))
    for (const auto& [k, v] : jp.at("logit_bias").items()) p.logit_bias[std::stoi(k)] = v.get<float>();
  const int vocab = static_cast<int>(logits.size());
  if (const xinfer::Status s = validate(p, vocab); !s.ok()) {
    std::cout << nlohmann::json{{"error", s.message()}}.dump() << "\n";
    return 0;
  }
  xinfer::ThreadPool pool(2);
  Sampler sampler(vocab, &pool, job.value("eos", std::vector<int32_t>{}));
  std::vector<SequenceRng> rngs;
  for (int64_t i = 0; i < draws; ++i) rngs.push_back(SequenceRng::from_seed(seed, static_cast<uint64_t>(i)));
  std::vector<SampleInput> batch;
  for (int64_t i = 0; i < draws; ++i) batch.push_back({logits.data(), &p, &rngs[static_cast<size_t>(i)], prompt, output});
  const auto out = sampler.sample(batch);
  std::vector<int64_t> counts(logits.size(), 0);
  for (const auto& o : out) counts[static_cast<size_t>(o.token)]++;
  nlohmann::json top = nlohmann::json::array();
  for (const auto& [id, lp] : out[0].top_logprobs) top.push_back({id, lp});
  std::cout << nlohmann::json{{"counts", counts}, {"token", out[0].token}, {"logprob", out[0].logprob},
                              {"top_logprobs", top}}
                   .dump()
            << "\n";
  return 0;
}
