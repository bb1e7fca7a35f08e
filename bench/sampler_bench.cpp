// Host sampler cost per sequence at a Qwen-sized vocabulary (152064), one thread, in thread CPU time (a busy
// machine distorts it little). Prints one line per sampling case; the figures are in docs/sampling.md.
// Moved out of the unit tests (it asserted nothing; issue 19).
//
//   build/cpu-release/bench/sampler_bench
#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include "xinfer/engine/sampler.h"

namespace {

using xinfer::engine::SampleInput;
using xinfer::engine::Sampler;
using xinfer::engine::SamplingParams;
using xinfer::engine::SequenceRng;

std::vector<float> random_logits(int vocab, uint32_t seed, float stddev) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (float& x : v) x = dist(gen);
  return v;
}

SamplingParams make(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

double thread_cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

}  // namespace

int main() {
  const int V = 152064, B = 8;
  Sampler s(V);
  std::vector<std::vector<float>> logits;
  for (int b = 0; b < B; ++b) logits.push_back(random_logits(V, 100 + static_cast<uint32_t>(b), 3.0f));
  const std::vector<int32_t> prompt(4096, 5), output(256, 9);
  SamplingParams penal = make(0.8f, 0, 0.95f);
  penal.repetition_penalty = 1.1f;
  penal.frequency_penalty = 0.2f;
  SamplingParams logprobs = make(0.0f);
  logprobs.logprobs = 5;
  struct Case {
    const char* name;
    SamplingParams p;
  };
  const std::vector<Case> cases = {{"greedy", make(0.0f)},
                                   {"T=1", make(1.0f)},
                                   {"top_k=50", make(1.0f, 50)},
                                   {"top_k=50 top_p=0.9", make(0.8f, 50, 0.9f)},
                                   {"top_p=0.95", make(1.0f, 0, 0.95f)},
                                   {"min_p=0.05", make(1.0f, 0, 1.0f, 0.05f)},
                                   {"top_p+rep+freq pen.", penal},
                                   {"greedy+logprobs=5", logprobs}};
  const SequenceRng rng = SequenceRng::from_seed(1);
  for (const Case& c : cases) {
    std::vector<SampleInput> batch;
    for (int b = 0; b < B; ++b)
      batch.push_back({logits[static_cast<size_t>(b)].data(), &c.p, &rng, prompt, output});
    s.sample(batch);  // warm
    const int reps = 3;
    const double t0 = thread_cpu_ms();
    for (int r = 0; r < reps; ++r) s.sample(batch);
    const double ms = (thread_cpu_ms() - t0) / (reps * B);
    std::printf("vocab %d %-22s %.3f ms CPU per sequence\n", V, c.name, ms);
  }
  return 0;
}
