// The W8A8 activation quantization fused into the norm and the SwiGLU (rms_norm.h / silu_mul.h RowQuant,
// CudaBackend::add_rms_norm_linear -> w8a8_norm_linear and swiglu): the o -> norm -> gate_up -> SwiGLU ->
// down chain as the model runs it equals, bit for bit, the composition the backend's base class runs
// (Backend::add_rms_norm_linear: add_rms_norm, then each linear quantizing its own x with
// launch_quantize_*_rows), in FP8 and INT8, dynamic per-token and static per-tensor scales, m = 1 (a
// decode row), 3 (the GEMV), 40 and 300 (cuBLASLt); the counter says the fused path ran. A long down row
// (k >= 8192) keeps m = 1 FP8 on the same split-K GEMV as the composition, so it is bit-exact too; a short
// one swaps the composition's fused-quantization GEMV for the plain one on the same codes (within bf16
// rounding). Without the act_linear hint, or with a bf16 consumer, nothing is left quantized. With act_out_unread
// the SwiGLU writes the codes alone (silu_mul.h) and down's result is unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"

namespace xinfer::gpu_test {
namespace {

template <typename T>
TensorView raw_view(const std::vector<T>& v, DType dt, const Shape& s) {
  return TensorView{const_cast<T*>(v.data()), dt, s, Device::kCpu};
}

struct W8Weight {
  std::vector<backend::DeviceTensor> owned;
  backend::LinearWeights lw;
};

// fp8: e4m3 codes without NaN; int8: -127..127; per-channel scales ~1 / sqrt(k); a static input scale that
// saturates the largest values (|x| past 2.5 for N(0, 1) inputs).
W8Weight make_w8(bool fp8, bool static_scale, int64_t n, int64_t k, std::mt19937& rng) {
  W8Weight q;
  auto keep = [&](backend::DeviceTensor t) {
    q.owned.push_back(t);
    return t.view;
  };
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> w(static_cast<size_t>(n * k));
  for (auto& b : w) {
    b = static_cast<uint8_t>(byte(rng));
    if (fp8 && (b & 0x7f) == 0x7f) b ^= 1;
    if (!fp8 && b == 0x80) b = 0x81;  // -128 is not a SmoothQuant code
  }
  std::vector<float> scales(static_cast<size_t>(n));
  for (auto& v : scales)
    v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / (fp8 ? 100.0f : 127.0f) / std::sqrt(float(k));
  const quant::ActScaleMode act =
      static_scale ? quant::ActScaleMode::kStaticPerTensor : quant::ActScaleMode::kDynamicPerToken;
  if (fp8)
    q.lw.format = quant::W8A8Fp8Format{true, act};
  else
    q.lw.format = quant::W8A8Int8Format{act};
  const DType dt = fp8 ? DType::kFP8E4M3 : DType::kI8;
  q.lw.weight = keep(gpu().upload(raw_view(w, dt, Shape{n, k}), dt));
  q.lw.scales = keep(gpu().upload(raw_view(scales, DType::kF32, Shape{n}), DType::kF32));
  q.lw.k = k;
  if (static_scale) {
    const std::vector<float> input_scale = {2.5f / (fp8 ? 448.0f : 127.0f)};
    q.lw.input_scale = keep(gpu().upload(raw_view(input_scale, DType::kF32, Shape{1}), DType::kF32));
  }
  return q;
}

TEST(W8a8FusedQuant, NormAndSwigluQuantizationEqualTheComposition) {
  std::mt19937 rng(73);
  struct Case {
    int64_t hidden, inter;
  };
  // 16400: past the SwiGLU rows in registers (below 128 rows); 24576: past the rows in shared memory (from 128 rows
  // on; a row of 48 KB beside the static reduction buffer would not launch), so the two-pass kernel.
  const Case shapes[] = {{1024, 1408}, {512, 8448}, {256, 16400}, {256, 24576}};
  for (const Case& sh : shapes)
    for (const bool fp8 : {true, false})
      for (const bool static_scale : {false, true})
        for (const int m : {1, 3, 40, 300}) {
          const std::string what = std::string(fp8 ? "fp8" : "int8") + (static_scale ? " static" : " dynamic") +
                                   " H=" + std::to_string(sh.hidden) + " I=" + std::to_string(sh.inter) +
                                   " m=" + std::to_string(m);
          const int64_t H = sh.hidden, I = sh.inter, K = 768;  // K: the o projection's input width
          W8Weight o = make_w8(fp8, static_scale, H, K, rng), gate_up = make_w8(fp8, static_scale, 2 * I, H, rng),
                   down = make_w8(fp8, static_scale, H, I, rng);
          const std::vector<float> residual0 = random_bf16(static_cast<size_t>(m * H), rng, 1.0f);
          auto residual = gpu().upload(host_view(residual0, Shape{m, H}), DType::kBF16);
          auto attn = gpu().upload(host_view(random_bf16(static_cast<size_t>(m * K), rng, 1.0f), Shape{m, K}), DType::kBF16);
          std::vector<float> g = random_bf16(static_cast<size_t>(H), rng, 0.2f);
          for (auto& v : g) v += 1.0f;
          auto norm = gpu().upload(host_view(g, Shape{H}), DType::kBF16);
          auto delta = gpu().allocate(DType::kBF16, Shape{m, H}), normed = gpu().allocate(DType::kBF16, Shape{m, H});
          struct Out {
            backend::DeviceTensor gate_up, act, y;
          };
          auto run = [&](bool fused, const backend::LinearWeights* hint, bool act_unread = false) {
            Out r{gpu().allocate(DType::kBF16, Shape{m, 2 * I}), gpu().allocate(DType::kBF16, Shape{m, I}),
                  gpu().allocate(DType::kBF16, Shape{m, H})};
            const backend::DeviceTensor fresh = gpu().upload(host_view(residual0, Shape{m, H}), DType::kBF16);
            XI_CUDA_CHECK(cudaMemcpy(residual.view.data, fresh.view.data, residual.view.bytes(), cudaMemcpyDeviceToDevice));
            const backend::NormLinearArgs a{residual.view, delta.view, norm.view, 1e-5f, gate_up.lw, normed.view,
                                            r.gate_up.view, r.act.view, attn.view, o.lw, hint, act_unread};
            if (fused)
              gpu().add_rms_norm_linear(a);
            else
              gpu().backend::Backend::add_rms_norm_linear(a);
            gpu().linear(r.act.view, down.lw, r.y.view);
            return r;
          };
          const Out want = run(false, nullptr);
          const std::vector<uint16_t> want_residual = raw_bf16(residual.view);
          const int64_t before = gpu().w8a8_quantized_inputs();
          const Out got = run(true, &down.lw);
          // m = 1 FP8: the norm stays unfused where the GEMV quantizes x itself (the dot GEMV's qkv / gate_up
          // shapes: the backend's rule).
          const bool norm_fused = !(fp8 && cuda::CudaBackend::fp8_gemv_quantizes_x(m, 2 * I, H));
          EXPECT_EQ(gpu().w8a8_quantized_inputs() - before, norm_fused ? 2 : 1) << what;
          EXPECT_EQ(raw_bf16(residual.view), want_residual) << what << ": residual";
          expect_same_bits(got.gate_up.view, want.gate_up.view, what + ": gate_up");
          expect_same_bits(got.act.view, want.act.view, what + ": act");
          if (fp8 && m == 1 && I < 8192) {
            const Compare c = compare(download(gpu(), got.y.view), download(gpu(), want.y.view));
            EXPECT_EQ(c.nans, 0) << what;
            EXPECT_LT(c.rel_l2, 4e-3) << what << ": down (plain vs fused-quantization GEMV)";
          } else {
            expect_same_bits(got.y.view, want.y.view, what + ": down");
          }
          // act_out_unread (as the model runs it): the SwiGLU may write the codes alone; down's result is the same.
          const int64_t unread_before = gpu().w8a8_quantized_inputs();
          const Out unread = run(true, &down.lw, true);
          EXPECT_EQ(gpu().w8a8_quantized_inputs() - unread_before, norm_fused ? 2 : 1) << what << ": act_out_unread";
          expect_same_bits(unread.y.view, got.y.view, what + ": down with act_out_unread");
          // No hint, or a hint the next linear does not take: nothing is left quantized.
          const int64_t mid = gpu().w8a8_quantized_inputs();
          const Out plain = run(true, nullptr);
          EXPECT_EQ(gpu().w8a8_quantized_inputs() - mid, norm_fused ? 1 : 0) << what;
          expect_same_bits(plain.y.view, want.y.view, what + ": down without the hint");
          const W8Weight other = make_w8(fp8, static_scale, H, I, rng);
          const int64_t mid2 = gpu().w8a8_quantized_inputs();
          run(true, &other.lw);  // codes left for `other`, then down reads act: it must quantize itself
          EXPECT_EQ(gpu().w8a8_quantized_inputs() - mid2, norm_fused ? 1 : 0) << what << ": a hint for another weight";
          gpu().synchronize();
        }
}

}  // namespace
}  // namespace xinfer::gpu_test
