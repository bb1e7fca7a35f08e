#include "xinfer/compress/host_forward.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "xinfer/core/check.h"
#include "xinfer/model/rope.h"

namespace xinfer::compress {
namespace {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. x, out: [rows, h] (may alias)
void rms_norm(const float* x, int64_t rows, int64_t h, const float* w, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    double ss = 0;
    for (int64_t j = 0; j < h; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(h)) + eps);
    float* o = out + r * h;
    for (int64_t j = 0; j < h; ++j) o[j] = xr[j] * inv * w[j];
  }
}

// y [m, n] = x [m, k] w^T (w [n, k]) + bias [n] (or none)
void linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, const std::vector<float>& bias, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, x, static_cast<int>(k), w, static_cast<int>(k), 0.0f, y, static_cast<int>(n));
  if (!bias.empty())
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) y[r * n + j] += bias[static_cast<size_t>(j)];
}

// Runs one site: hook sees x [m, k]; y [m, n] from the returned (or the layer's) weights on the rounded x.
void run_site(model::LinearSite site, const HostLinear& lin, const float* x, int64_t m, const SiteInputHook& hook,
              ActQuant act, std::vector<float>& scratch, float* y) {
  const float* w = hook ? hook(site, x, m, lin.k) : nullptr;
  if (w == nullptr) w = lin.w.data();
  if (act != ActQuant::kNone) {
    scratch.assign(x, x + m * lin.k);
    fake_quantize_rows(scratch.data(), m, lin.k, act);
    x = scratch.data();
  }
  linear(x, m, lin.k, w, lin.n, lin.bias, y);
}

}  // namespace

void add_outer_products(const float* x, int64_t rows, int64_t k, std::vector<double>& h) {
  XI_CHECK_EQ(static_cast<int64_t>(h.size()), k * k);
  std::vector<float> part(static_cast<size_t>(k * k));
  for (int64_t r0 = 0; r0 < rows; r0 += 512) {
    const int64_t n = std::min<int64_t>(512, rows - r0);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(k), static_cast<int>(n), 1.0f, x + r0 * k,
                static_cast<int>(k), 0.0f, part.data(), static_cast<int>(k));
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = i; j < k; ++j) {
        const double v = part[static_cast<size_t>(i * k + j)];
        h[static_cast<size_t>(i * k + j)] += v;
        if (j != i) h[static_cast<size_t>(j * k + i)] += v;
      }
  }
}

void host_layer_forward(const model::ModelConfig& c, const HostLayer& layer, const std::vector<int64_t>& window_lens,
                        std::vector<float>& hidden, const SiteInputHook& hook, ActQuant act) {
  const int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_heads, Hkv = c.num_kv_heads, I = c.intermediate_size;
  const int64_t qkv_w = (Hq + 2 * Hkv) * D, half = D / 2, group = Hq / Hkv;
  int64_t T = 0, longest = 0;
  for (int64_t n : window_lens) {
    T += n;
    longest = std::max(longest, n);
  }
  XI_CHECK_EQ(static_cast<int64_t>(hidden.size()), T * H);
  const float eps = c.rms_norm_eps;
  std::vector<float> h(static_cast<size_t>(T * H)), qkv(static_cast<size_t>(T * qkv_w)),
      attn(static_cast<size_t>(T * Hq * D)), proj(static_cast<size_t>(T * H)), scratch;

  rms_norm(hidden.data(), T, H, layer.input_norm.data(), eps, h.data());
  run_site(model::LinearSite::kQkv, layer.qkv, h.data(), T, hook, act, scratch, qkv.data());
  if (c.qk_norm)
    for (int64_t t = 0; t < T; ++t) {
      float* row = &qkv[static_cast<size_t>(t * qkv_w)];
      rms_norm(row, Hq, D, layer.q_norm.data(), eps, row);
      rms_norm(row + Hq * D, Hkv, D, layer.k_norm.data(), eps, row + Hq * D);
    }
  // RoPE (rotate half) on q and k: angle = pos * inv_freq in f32, cos / sin in double, as make_rope_table.
  const std::vector<float> inv_freq = model::rope_inv_freq(c);
  const float attn_scale = model::rope_attention_scaling(c);
  std::vector<float> cs(static_cast<size_t>(longest * D));
  for (int64_t p = 0; p < longest; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      cs[static_cast<size_t>(p * D + i)] = static_cast<float>(std::cos(static_cast<double>(angle))) * attn_scale;
      cs[static_cast<size_t>(p * D + half + i)] = static_cast<float>(std::sin(static_cast<double>(angle))) * attn_scale;
    }
  {
    int64_t t = 0;
    for (int64_t n : window_lens)
      for (int64_t p = 0; p < n; ++p, ++t) {
        const float* cosv = &cs[static_cast<size_t>(p * D)];
        const float* sinv = cosv + half;
        float* row = &qkv[static_cast<size_t>(t * qkv_w)];
        for (int64_t head = 0; head < Hq + Hkv; ++head) {
          float* v = row + head * D;
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = v[i], x2 = v[half + i];
            v[i] = x1 * cosv[i] - x2 * sinv[i];
            v[half + i] = x2 * cosv[i] + x1 * sinv[i];
          }
        }
      }
  }
  // Causal attention per window and head: S = q k^T * scale, row softmax over keys <= query, out = P v.
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> s(static_cast<size_t>(longest * longest));
  {
    int64_t t0 = 0;
    for (int64_t n : window_lens) {
      for (int64_t hq = 0; hq < Hq; ++hq) {
        const int64_t kvh = hq / group;
        const float* q = &qkv[static_cast<size_t>(t0 * qkv_w + hq * D)];
        const float* k = &qkv[static_cast<size_t>(t0 * qkv_w + (Hq + kvh) * D)];
        const float* v = &qkv[static_cast<size_t>(t0 * qkv_w + (Hq + Hkv + kvh) * D)];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(n),
                    static_cast<int>(D), scale, q, static_cast<int>(qkv_w), k, static_cast<int>(qkv_w), 0.0f, s.data(),
                    static_cast<int>(n));
        for (int64_t i = 0; i < n; ++i) {
          float* si = &s[static_cast<size_t>(i * n)];
          float mx = si[0];
          for (int64_t j = 1; j <= i; ++j) mx = std::max(mx, si[j]);
          float sum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            si[j] = std::exp(si[j] - mx);
            sum += si[j];
          }
          const float inv = 1.0f / sum;
          for (int64_t j = 0; j <= i; ++j) si[j] *= inv;
          for (int64_t j = i + 1; j < n; ++j) si[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(D),
                    static_cast<int>(n), 1.0f, s.data(), static_cast<int>(n), v, static_cast<int>(qkv_w), 0.0f,
                    &attn[static_cast<size_t>(t0 * Hq * D + hq * D)], static_cast<int>(Hq * D));
      }
      t0 += n;
    }
  }
  qkv = {};
  run_site(model::LinearSite::kO, layer.o, attn.data(), T, hook, act, scratch, proj.data());
  attn = {};
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] += proj[i];
  rms_norm(hidden.data(), T, H, layer.post_attention_norm.data(), eps, h.data());
  std::vector<float> gate_up(static_cast<size_t>(T * 2 * I));
  run_site(model::LinearSite::kGateUp, layer.gate_up, h.data(), T, hook, act, scratch, gate_up.data());
  std::vector<float> mlp(static_cast<size_t>(T * I));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < I; ++j) {
      const float g = gate_up[static_cast<size_t>(t * 2 * I + j)], u = gate_up[static_cast<size_t>(t * 2 * I + I + j)];
      mlp[static_cast<size_t>(t * I + j)] = g / (1.0f + std::exp(-g)) * u;
    }
  gate_up = {};
  run_site(model::LinearSite::kDown, layer.down, mlp.data(), T, hook, act, scratch, proj.data());
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] += proj[i];
}

}  // namespace xinfer::compress
