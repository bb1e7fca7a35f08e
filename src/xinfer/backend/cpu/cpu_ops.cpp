// Element-wise, normalization, GEMM and RoPE ops of the CPU backend (f32).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/quant/quantized_linear.h"

namespace xinfer::cpu {
namespace {

void check_f32(const TensorView& t, const char* what) {
  XI_CHECK(t.dtype == DType::kF32) << what << " must be f32 on cpu, got " << dtype_name(t.dtype);
}

int64_t last_dim(const TensorView& t) { return t.shape[t.shape.rank() - 1]; }

// The table row of token `id` (checked against the whole vocabulary), or -1 when a vocabulary shard does not
// hold it.
int64_t table_row(int32_t id, const backend::VocabRows& rows, int64_t table_rows) {
  const int64_t vocab = rows.vocab > 0 ? rows.vocab : table_rows;
  XI_CHECK(id >= 0 && id < vocab) << "token id " << id << " outside vocab of " << vocab;
  XI_CHECK(rows.begin >= 0 && rows.begin + table_rows <= vocab)
      << "embedding shard [" << rows.begin << ", " << rows.begin + table_rows << ") outside vocab of " << vocab;
  const int64_t row = id - rows.begin;
  return row >= 0 && row < table_rows ? row : -1;
}

// y = x / sqrt(mean(x^2) + eps) * w, accumulated in double so the CPU stays a precise oracle.
inline void rms_norm_row(const float* x, const float* w, float eps, int64_t n, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

}  // namespace

void CpuBackend::embedding(const backend::StepMeta& step, const TensorView& table, const TensorView& out,
                           const backend::VocabRows& rows) {
  check_f32(table, "embedding table");
  const int64_t hidden = table.shape[1];
  XI_CHECK_EQ(out.shape[0], step.num_tokens);
  XI_CHECK_EQ(last_dim(out), hidden);
  for (int t = 0; t < step.num_tokens; ++t) {
    float* dst = out.as<float>() + t * hidden;
    const int64_t row = table_row(step.token_ids[t], rows, table.shape[0]);
    if (row < 0)
      std::fill(dst, dst + hidden, -0.0f);
    else
      std::memcpy(dst, table.as<float>() + row * hidden, static_cast<size_t>(hidden) * sizeof(float));
  }
}

void CpuBackend::rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) {
  const int64_t width = last_dim(x);
  const int64_t rows = x.numel() / width;
  XI_CHECK_EQ(weight.numel(), width);
  pool_->parallel_for(0, rows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      rms_norm_row(x.as<float>() + r * width, weight.as<float>(), eps, width, out.as<float>() + r * width);
  }, grain_for(width));
}

void CpuBackend::add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& weight,
                              float eps, const TensorView& out) {
  const int64_t width = last_dim(residual);
  const int64_t rows = residual.numel() / width;
  XI_CHECK_EQ(delta.numel(), residual.numel());
  pool_->parallel_for(0, rows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* res = residual.as<float>() + r * width;
      const float* d = delta.as<float>() + r * width;
      for (int64_t i = 0; i < width; ++i) res[i] += d[i];
      rms_norm_row(res, weight.as<float>(), eps, width, out.as<float>() + r * width);
    }
  }, grain_for(2 * width));
}

bool CpuBackend::supports(const quant::WeightFormat& f) const {
  return quant::cpu_supports(f);
}

bool CpuBackend::prefers_repacked_gguf(quant::GgufType type) const {
  return type == quant::GgufType::kQ4_K || type == quant::GgufType::kQ5_0 || type == quant::GgufType::kQ6_K ||
         Backend::prefers_repacked_gguf(type);
}

void CpuBackend::embedding_weights(const backend::StepMeta& step, const backend::LinearWeights& table,
                                   const TensorView& out, const backend::VocabRows& rows) {
  if (table.dense()) return embedding(step, table.weight, out, rows);
  const auto* gguf = std::get_if<quant::GgufFormat>(&table.format);
  XI_CHECK(gguf != nullptr) << "cpu embedding: table in " << quant::format_name(table.format)
                            << " not supported";
  const int64_t hidden = table.in_features();
  const int64_t row_bytes = table.weight.shape[1];
  XI_CHECK_EQ(out.shape[0], step.num_tokens);
  XI_CHECK_EQ(last_dim(out), hidden);
  for (int t = 0; t < step.num_tokens; ++t) {
    float* dst = out.as<float>() + t * hidden;
    const int64_t row = table_row(step.token_ids[t], rows, table.out_features());
    if (row < 0) {
      std::fill(dst, dst + hidden, -0.0f);
      continue;
    }
    const Status s = quant::dequantize_gguf(gguf->type, static_cast<const uint8_t*>(table.weight.data) + row * row_bytes,
                                            hidden, dst);
    XI_CHECK(s.ok()) << s.to_string();
  }
}

void CpuBackend::linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out) {
  check_f32(x, "linear input");
  if (w.segmented()) return segmented_linear(x, w, out);
  if (!w.dense()) return quantized_linear(x, w, out);
  check_f32(w.weight, "linear weight");
  const int64_t k = w.in_features();
  const int64_t n = w.out_features();
  const int64_t m = x.numel() / k;
  XI_CHECK_EQ(last_dim(x), k) << "linear: input width vs weight [" << n << ", " << k << "]";
  XI_CHECK_EQ(out.numel(), m * n);
  if (m == 0) return;
  float* y = out.as<float>();
  if (!w.bias.empty()) {
    XI_CHECK_EQ(w.bias.numel(), n);
    for (int64_t r = 0; r < m; ++r) std::memcpy(y + r * n, w.bias.data, static_cast<size_t>(n) * sizeof(float));
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, x.as<float>(), static_cast<int>(k), w.weight.as<float>(),
              static_cast<int>(k), w.bias.empty() ? 0.0f : 1.0f, y, static_cast<int>(n));
}

void CpuBackend::segmented_linear(const TensorView& x, const backend::LinearWeights& w,
                                  const TensorView& out) {
  const int64_t k = w.in_features(), n = w.out_features(), m = x.numel() / k;
  XI_CHECK_EQ(last_dim(x), k) << "linear: input width vs segmented weight [" << n << ", " << k << "]";
  XI_CHECK_EQ(out.numel(), m * n);
  std::vector<float> part;  // a segment's [m, ns] when m > 1; one row is a contiguous run of out
  int64_t col = 0;
  for (const backend::LinearWeights& s : w.segments) {
    const int64_t ns = s.out_features();
    XI_CHECK_EQ(s.in_features(), k) << "segmented linear: segments differ in input width";
    float* dst = out.as<float>() + col;
    if (m == 1) {
      linear(x, s, TensorView{dst, DType::kF32, Shape{1, ns}, Device::kCpu});
    } else {
      part.resize(static_cast<size_t>(m * ns));
      linear(x, s, TensorView{part.data(), DType::kF32, Shape{m, ns}, Device::kCpu});
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(dst + r * n, part.data() + r * ns, static_cast<size_t>(ns) * sizeof(float));
    }
    col += ns;
  }
}

void CpuBackend::quantized_linear(const TensorView& x, const backend::LinearWeights& w,
                                  const TensorView& out) {
  const int64_t k = w.in_features(), n = w.out_features();
  const int64_t m = x.numel() / k;
  XI_CHECK_EQ(last_dim(x), k) << "linear: input width vs " << quant::format_name(w.format) << " weight [" << n
                              << ", " << k << "]";
  XI_CHECK_EQ(out.numel(), m * n);
  if (m == 0) return;
  quant::QuantizedMatrix q;
  q.format = w.format;
  q.n = n;
  q.k = k;
  q.weight = w.weight.data;
  q.scales = w.scales.empty() ? nullptr : w.scales.as<float>();
  q.zeros = w.zeros.empty() ? nullptr : static_cast<const uint8_t*>(w.zeros.data);
  q.mins = w.mins.empty() ? nullptr : w.mins.as<float>();
  q.g_idx = w.g_idx.empty() ? nullptr : w.g_idx.as<int32_t>();
  q.input_perm = w.input_perm.empty() ? nullptr : w.input_perm.as<int32_t>();
  q.input_scale = w.input_scale.empty() ? nullptr : w.input_scale.as<float>();
  float* y = out.as<float>();
  quant::quantized_matmul(q, x.as<float>(), m, y, pool_.get());
  if (!w.bias.empty()) {
    XI_CHECK_EQ(w.bias.numel(), n);
    const float* b = w.bias.as<float>();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) y[r * n + j] += b[j];
  }
}

void CpuBackend::rope_kv_write(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                               int num_kv_heads, int head_dim, const TensorView& cos_sin,
                               const backend::LayerKvCache& cache) {
  const int64_t row = static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim;
  XI_CHECK_EQ(last_dim(qkv), row);
  XI_CHECK_EQ(cos_sin.shape[1], head_dim);
  const int half = head_dim / 2;
  const int64_t block_size = cache.k.shape[2];
  const int64_t max_pos = cos_sin.shape[0];
  const bool fp8 = cache.fp8();
  XI_CHECK(fp8 || cache.k.dtype == DType::kF32) << "cpu: KV cache in " << dtype_name(cache.k.dtype);
  for (int h = 0; fp8 && h < num_kv_heads; ++h)
    XI_CHECK(cache.host_k_scale(h) > 0 && cache.host_v_scale(h) > 0) << "fp8 KV cache scales must be positive";
  const bool rotate = cache.k_rotation == backend::KvRotation::kHadamard;
  XI_CHECK(!rotate || backend::kv_rotation_supported(head_dim)) << "no key rotation for head_dim " << head_dim;
  pool_->parallel_for(0, step.num_tokens, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int32_t pos = step.positions[t];
      XI_CHECK(pos >= 0 && pos < max_pos) << "position " << pos << " outside rope table of " << max_pos;
      const float* cs = cos_sin.as<float>() + static_cast<int64_t>(pos) * head_dim;
      float* base = qkv.as<float>() + t * row;
      for (int h = 0; h < num_heads + num_kv_heads; ++h) {  // q heads then k heads
        float* x = base + static_cast<int64_t>(h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float x1 = x[i], x2 = x[i + half];
          x[i] = x1 * cs[i] - x2 * cs[half + i];
          x[i + half] = x2 * cs[i] + x1 * cs[half + i];
        }
        if (rotate) backend::kv_rotate_head(x, head_dim, /*is_k=*/h >= num_heads);
      }
      const int32_t slot = step.slot_mapping[t];
      if (slot < 0) continue;  // padding row (graph buckets): no KV write
      const int64_t block = slot / block_size, offset = slot % block_size;
      const float* k = base + static_cast<int64_t>(num_heads) * head_dim;
      const float* v = k + static_cast<int64_t>(num_kv_heads) * head_dim;
      for (int h = 0; h < num_kv_heads; ++h) {
        const int64_t dst = ((block * num_kv_heads + h) * block_size + offset) * head_dim;
        if (fp8) {  // e4m3(x / scale): the division as the GPU kernels do it, then round to nearest even
          auto* kd = static_cast<fp8_e4m3*>(cache.k.data) + dst;
          auto* vd = static_cast<fp8_e4m3*>(cache.v.data) + dst;
          const float ks = cache.host_k_scale(h), vs = cache.host_v_scale(h);
          for (int d = 0; d < head_dim; ++d) {
            kd[d] = to_fp8_e4m3(k[h * head_dim + d] / ks);
            vd[d] = to_fp8_e4m3(v[h * head_dim + d] / vs);
          }
          continue;
        }
        std::memcpy(cache.k.as<float>() + dst, k + h * head_dim, sizeof(float) * static_cast<size_t>(head_dim));
        std::memcpy(cache.v.as<float>() + dst, v + h * head_dim, sizeof(float) * static_cast<size_t>(head_dim));
      }
    }
  }, grain_for(row));
}

void CpuBackend::qk_norm(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim,
                         const TensorView& q_weight, const TensorView& k_weight, float eps) {
  const int64_t row = static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim;
  const int64_t tokens = qkv.numel() / row;
  pool_->parallel_for(0, tokens, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* base = qkv.as<float>() + t * row;
      for (int h = 0; h < num_heads + num_kv_heads; ++h) {
        float* x = base + static_cast<int64_t>(h) * head_dim;
        rms_norm_row(x, (h < num_heads ? q_weight : k_weight).as<float>(), eps, head_dim, x);
      }
    }
  }, grain_for(row));
}

void CpuBackend::silu_mul(const TensorView& gate_up, const TensorView& out) {
  const int64_t inter = last_dim(out);
  const int64_t rows = out.numel() / inter;
  XI_CHECK_EQ(last_dim(gate_up), 2 * inter);
  pool_->parallel_for(0, rows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gate_up.as<float>() + r * 2 * inter;
      const float* u = g + inter;
      float* y = out.as<float>() + r * inter;
      for (int64_t i = 0; i < inter; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  }, grain_for(8 * inter));
}

void CpuBackend::gather_rows(const backend::StepMeta& step, const TensorView& x, const TensorView& out) {
  const int64_t width = last_dim(x);
  const int64_t rows = x.numel() / width;
  for (int r = 0; r < step.num_logit_rows; ++r) {
    const int32_t src = step.logit_rows[r];
    XI_CHECK(src >= 0 && src < rows) << "logit row " << src << " of " << rows;
    std::memcpy(out.as<float>() + r * width, x.as<float>() + src * width, sizeof(float) * static_cast<size_t>(width));
  }
}

}  // namespace xinfer::cpu

namespace xinfer::cpu {

void CpuBackend::argmax_rows(const TensorView& logits, const TensorView& out) {
  check_f32(logits, "argmax_rows logits");
  XI_CHECK(out.dtype == DType::kI32) << "argmax_rows out must be i32, got " << dtype_name(out.dtype);
  XI_CHECK_EQ(logits.shape.rank(), 2);
  const int64_t rows = logits.shape[0], vocab = logits.shape[1];
  XI_CHECK_EQ(out.numel(), rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.as<float>() + r * vocab;
    float best = -INFINITY;
    int32_t idx = -1;
    for (int64_t c = 0; c < vocab; ++c)
      if (x[c] > best || (idx < 0 && x[c] == best)) {  // strict: ties keep the lowest id; NaN never wins
        best = x[c];
        idx = static_cast<int32_t>(c);
      }
    out.as<int32_t>()[r] = idx < 0 ? 0 : idx;
  }
}

}  // namespace xinfer::cpu
