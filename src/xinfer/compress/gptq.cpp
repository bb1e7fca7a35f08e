#include "xinfer/compress/gptq.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "xinfer/core/check.h"

extern "C" {  // LAPACK (OpenBLAS ships it): Cholesky factorization and inverse of a symmetric PD matrix
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info);
}

namespace xinfer::compress {
namespace {

// U (upper, row-major [k, k], f32) with H^-1 = U^T U, by LAPACK (OpenBLAS): H = L L^T (dpotrf), H^-1 from
// it (dpotri), then U = the upper Cholesky factor of H^-1 (dpotrf again), as GPTQ's torch code does
// (cholesky, cholesky_inverse, cholesky(upper=True)). LAPACK is column-major: a symmetric row-major array is
// the same matrix, and its column-major lower triangle is the row-major upper one, so "L" calls leave a
// row-major upper R with A = R^T R.
std::vector<float> inverse_cholesky_upper(std::vector<double> h, int64_t k) {
  const int n = static_cast<int>(k);
  int info = 0;
  dpotrf_("L", &n, h.data(), &n, &info);
  XI_CHECK(info == 0) << "GPTQ: the damped Hessian is not positive definite (LAPACK dpotrf info " << info << ")";
  dpotri_("L", &n, h.data(), &n, &info);
  XI_CHECK(info == 0) << "GPTQ: the damped Hessian is singular (LAPACK dpotri info " << info << ")";
  dpotrf_("L", &n, h.data(), &n, &info);
  XI_CHECK(info == 0) << "GPTQ: H^-1 is not positive definite (LAPACK dpotrf info " << info << ")";
  std::vector<float> u(static_cast<size_t>(k * k), 0.0f);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i; j < k; ++j) u[static_cast<size_t>(i * k + j)] = static_cast<float>(h[static_cast<size_t>(i * k + j)]);
  return u;
}

}  // namespace

QuantizedWeight quantize_gptq(const float* w_in, int64_t n, int64_t k, const double* hessian,
                              const WeightQuantArgs& args, const GptqOptions& opt) {
  XI_CHECK(opt.block_size > 0) << "GPTQ block size " << opt.block_size;
  std::vector<double> h(hessian, hessian + k * k);
  std::vector<float> w(w_in, w_in + n * k);
  for (int64_t j = 0; j < k; ++j)
    if (h[static_cast<size_t>(j * k + j)] == 0) {  // an input that is always zero: its weights do not matter
      h[static_cast<size_t>(j * k + j)] = 1;
      for (int64_t r = 0; r < n; ++r) w[static_cast<size_t>(r * k + j)] = 0;
    }
  // Parameters taken up front (channel, tensor, and groups under act-order) come from W after the dead
  // columns are zeroed, as GPTQ's quantizer.find_params does.
  const bool dynamic_groups = args.granularity == Granularity::kGroup && (!opt.act_order || !opt.static_groups);
  // MSE clip search (args.mse_clip) weighs each column by H_jj (undamped): its share of the output error.
  std::vector<double> diag(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) diag[static_cast<size_t>(j)] = h[static_cast<size_t>(j * k + j)];
  QuantizedWeight out = compute_qparams(w.data(), n, k, args, diag.data());
  out.q.assign(static_cast<size_t>(n * k), 0);

  std::vector<int64_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (opt.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return h[static_cast<size_t>(a * k + a)] > h[static_cast<size_t>(b * k + b)];
    });
  // Permuted copies: hp = P H P^T, wp[:, c] = w[:, perm[c]].
  std::vector<double> hp(static_cast<size_t>(k * k));
  double mean_diag = 0;
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) hp[static_cast<size_t>(i * k + j)] = h[static_cast<size_t>(perm[i] * k + perm[j])];
    mean_diag += hp[static_cast<size_t>(i * k + i)];
  }
  mean_diag /= static_cast<double>(k);
  for (int64_t i = 0; i < k; ++i) hp[static_cast<size_t>(i * k + i)] += opt.damp * mean_diag;
  const std::vector<float> u = inverse_cholesky_upper(std::move(hp), k);
  if (dynamic_groups && opt.act_order) {  // groups of consecutive permuted columns
    out.g_idx.resize(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) out.g_idx[static_cast<size_t>(perm[static_cast<size_t>(c)])] = static_cast<int32_t>(c / args.group_size);
  }
  std::vector<float> wp(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) wp[static_cast<size_t>(r * k + c)] = w[static_cast<size_t>(r * k + perm[c])];

  const int64_t bs = opt.block_size;
  std::vector<float> err(static_cast<size_t>(n * bs));
  for (int64_t i1 = 0; i1 < k; i1 += bs) {
    const int64_t i2 = std::min(k, i1 + bs), cnt = i2 - i1;
    for (int64_t i = 0; i < cnt; ++i) {
      const int64_t col = i1 + i, orig = perm[static_cast<size_t>(col)];
      if (dynamic_groups && col % args.group_size == 0) {
        // This group's parameters from the current weights of its columns (contiguous in the processing
        // order: columns col .. col + width - 1 of wp).
        const int64_t width = std::min<int64_t>(args.group_size, k - col), g = col / args.group_size;
        std::vector<float> block(static_cast<size_t>(n * width));
        std::vector<double> block_diag(static_cast<size_t>(width));
        for (int64_t c = 0; c < width; ++c) block_diag[static_cast<size_t>(c)] = diag[static_cast<size_t>(perm[static_cast<size_t>(col + c)])];
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < width; ++c) block[static_cast<size_t>(r * width + c)] = wp[static_cast<size_t>(r * k + col + c)];
        WeightQuantArgs ga = args;
        ga.granularity = Granularity::kChannel;
        const QuantizedWeight p = compute_qparams(block.data(), n, width, ga, block_diag.data());
        for (int64_t r = 0; r < n; ++r) {
          out.scales[static_cast<size_t>(r * out.groups() + g)] = p.scales[static_cast<size_t>(r)];
          if (!out.zeros.empty()) out.zeros[static_cast<size_t>(r * out.groups() + g)] = p.zeros[static_cast<size_t>(r)];
        }
      }
      const float d = u[static_cast<size_t>(col * k + col)];
      const float* urow = &u[static_cast<size_t>(col * k)];
      for (int64_t r = 0; r < n; ++r) {
        float* wr = &wp[static_cast<size_t>(r * k)];
        float deq;
        out.q[static_cast<size_t>(r * k + orig)] =
            quantize_value(wr[col], out.scale(r, orig), out.zero(r, orig), args, &deq);
        const float e = (wr[col] - deq) / d;
        err[static_cast<size_t>(r * bs + i)] = e;
        for (int64_t j = col + 1; j < i2; ++j) wr[j] -= e * urow[j];
      }
    }
    if (i2 < k)  // W[:, i2:] -= E[:, :cnt] U[i1:i2, i2:]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(k - i2),
                  static_cast<int>(cnt), -1.0f, err.data(), static_cast<int>(bs), &u[static_cast<size_t>(i1 * k + i2)],
                  static_cast<int>(k), 1.0f, &wp[static_cast<size_t>(i2)], static_cast<int>(k));
  }
  return out;
}

}  // namespace xinfer::compress
