// Paged causal attention on the CPU: one task per (token, q head). Reads K/V for every position of the
// token's sequence up to and including its own position through the block table, so the same code
// serves prefill chunks (which also see cached prefix blocks) and decodes.
#include <algorithm>
#include <cmath>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"

namespace xinfer::cpu {

void CpuBackend::paged_attention(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                                 int num_kv_heads, int head_dim, float scale, const backend::LayerKvCache& cache,
                                 const TensorView& out) {
  XI_CHECK_EQ(num_heads % num_kv_heads, 0);
  const int group = num_heads / num_kv_heads;
  const int64_t row = static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim;
  const int64_t block_size = cache.k.shape[2];
  XI_CHECK_EQ(cache.k.shape[1], num_kv_heads);
  XI_CHECK_EQ(cache.k.shape[3], head_dim);

  // Which sequence each token belongs to.
  std::vector<int32_t> seq_of(static_cast<size_t>(step.num_tokens));
  for (int s = 0; s < step.num_seqs; ++s)
    for (int t = step.query_start_loc[s]; t < step.query_start_loc[s + 1]; ++t) seq_of[static_cast<size_t>(t)] = s;

  const int64_t tasks = static_cast<int64_t>(step.num_tokens) * num_heads;
  pool_->parallel_for(0, tasks, [&](int64_t b, int64_t e) {
    std::vector<float> scores;
    std::vector<double> acc(static_cast<size_t>(head_dim));
    for (int64_t task = b; task < e; ++task) {
      const int64_t t = task / num_heads;
      const int h = static_cast<int>(task % num_heads);
      const int kvh = h / group;
      const int s = seq_of[static_cast<size_t>(t)];
      const int32_t pos = step.positions[t];
      XI_CHECK_LT(pos, step.seq_lens[s]) << "token position past its sequence's length";
      const int32_t* table = step.block_tables + static_cast<int64_t>(s) * step.max_blocks_per_seq;
      const float* q = qkv.as<float>() + t * row + static_cast<int64_t>(h) * head_dim;

      const int n = pos + 1;
      scores.resize(static_cast<size_t>(n));
      float max_score = -INFINITY;
      for (int j = 0; j < n; ++j) {
        const int64_t block = table[j / block_size];
        const float* k = cache.k.as<float>() + ((block * num_kv_heads + kvh) * block_size + j % block_size) * head_dim;
        float dot = 0;
        for (int d = 0; d < head_dim; ++d) dot += q[d] * k[d];
        scores[static_cast<size_t>(j)] = dot * scale;
        max_score = std::max(max_score, dot * scale);
      }
      double denom = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < n; ++j) {
        const double p = std::exp(static_cast<double>(scores[static_cast<size_t>(j)] - max_score));
        denom += p;
        const int64_t block = table[j / block_size];
        const float* v = cache.v.as<float>() + ((block * num_kv_heads + kvh) * block_size + j % block_size) * head_dim;
        for (int d = 0; d < head_dim; ++d) acc[static_cast<size_t>(d)] += p * v[d];
      }
      float* o = out.as<float>() + t * static_cast<int64_t>(num_heads) * head_dim + static_cast<int64_t>(h) * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] = static_cast<float>(acc[static_cast<size_t>(d)] / denom);
    }
  }, grain_for(4 * static_cast<int64_t>(step.max_seq_len) * head_dim));
}

}  // namespace xinfer::cpu
