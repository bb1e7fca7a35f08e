// gpu_kernel_bench --w8a8: the W8A8 linears at the Llama-3.1-8B shapes (qkv 6144 x 4096, o 4096 x 4096,
// gate_up 28672 x 4096, down 4096 x 14336), INT8 against FP8 in the same run:
//   - GEMMs, m = 128, 512, 2048, 8192, on quantized x (random codes; the quantization pre-pass not included),
//     TFLOP/s against the measured bf16 ceiling (FP8 / INT8 dense peaks are twice bf16's):
//       fp8   cuBLASLt e4m3 with outer-vector scales (cublaslt_fp8_gemm.h, the heuristic's first algorithm);
//       int8  cuBLASLt int8 -> int32 + our scale epilogue (cublaslt_int8_gemm.h kInt32Epilogue), with the
//             heuristic's first algorithm and the best of its (up to 8) algorithms by measurement, in chunks
//             of 1024 / 2048 (the default) / 4096 rows and unchunked; the epilogue alone, and kOuterVec where
//             cuBLASLt offers it (int8-1: it does not, cuBLASLt 13.1);
//     then both whole linears through CudaBackend::linear (quantize x + GEMM) at m = 2048;
//   - decode GEMVs, m = 1 and 8: our FP8 GEMV and our int8 GEMV alone on quantized x in each pipelined
//     schedule (the backend's default marked *), GB/s of weight + scales + x + y against the copy ceiling,
//     timed as CUDA-graph replays of 20 calls with the weights rotated past L2; then linear() at m = 1.
// Checked first per shape: int8 GEMM modes agree with each other and the int8 GEMV with the GEMM at m = 8
// (relative L2 < 1e-5; the kernel tests hold them to the oracle's bits).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_bench_util.h"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_fp8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_int8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"
#include "xinfer/backend/cuda/kernels/gemm/w8a8_int8_wgmma.h"

namespace xinfer::bench {
namespace {

void row(const std::string& what, double us, double amount, bool flops, double ceiling) {
  print_row(what, us, amount, flops, ceiling, 66);
}

// fp8: e4m3 codes 0..125 with a random sign (finite); int8: -127..127.
__global__ void fill_codes(uint8_t* p, size_t n, uint32_t seed, bool fp8) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = hash32(static_cast<uint32_t>(i) * 2654435761u ^ seed);
    p[i] = fp8 ? static_cast<uint8_t>((h % 126) | (h & 0x80000000u ? 0x80 : 0)) : static_cast<uint8_t>(static_cast<int>(h % 255) - 127);
  }
}
__global__ void fill_pos(float* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = scale * (0.5f + static_cast<float>(hash32(static_cast<uint32_t>(i) ^ seed) & 0xffff) / 65536.0f);
}
__global__ void fill_bf16_pm1(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(static_cast<float>(hash32(static_cast<uint32_t>(i) ^ seed) & 0xffff) / 32768.0f - 1.0f);
}

// Quantized activations [m, k] in both formats (random e4m3 / int8 codes) and their [m] scales.
struct QuantX {
  backend::DeviceTensor fp8, int8, scales;
};
QuantX make_quant_x(cuda::CudaBackend& be, int m, int k) {
  cudaStream_t s = be.stream();
  QuantX x{be.allocate(DType::kFP8E4M3, Shape{m, k}), be.allocate(DType::kI8, Shape{m, k}), be.allocate(DType::kF32, Shape{m})};
  fill_codes<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(x.fp8.view.data), static_cast<size_t>(m) * k, 7, true);
  fill_codes<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(x.int8.view.data), static_cast<size_t>(m) * k, 7, false);
  fill_pos<<<64, 256, 0, s>>>(static_cast<float*>(x.scales.view.data), static_cast<size_t>(m), 8, 0.01f);
  XI_CUDA_CHECK_LAUNCH();
  return x;
}

struct W8 {  // one weight in both formats: e4m3 and int8 codes, [n] scales
  backend::DeviceTensor fp8, int8, scales;
  backend::LinearWeights lw_fp8, lw_int8;
};
W8 make_w8(cuda::CudaBackend& be, int n, int k, uint32_t seed) {
  W8 w;
  cudaStream_t s = be.stream();
  w.fp8 = be.allocate(DType::kFP8E4M3, Shape{n, k});
  w.int8 = be.allocate(DType::kI8, Shape{n, k});
  w.scales = be.allocate(DType::kF32, Shape{n});
  fill_codes<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(w.fp8.view.data), static_cast<size_t>(n) * k, seed, true);
  fill_codes<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(w.int8.view.data), static_cast<size_t>(n) * k, seed, false);
  fill_pos<<<64, 256, 0, s>>>(static_cast<float*>(w.scales.view.data), static_cast<size_t>(n), seed + 1,
                              0.01f / std::sqrt(static_cast<float>(k)));
  XI_CUDA_CHECK_LAUNCH();
  w.lw_fp8.format = quant::W8A8Fp8Format{};
  w.lw_fp8.weight = w.fp8.view;
  w.lw_fp8.scales = w.scales.view;
  w.lw_fp8.k = k;
  w.lw_int8.format = quant::W8A8Int8Format{};
  w.lw_int8.weight = w.int8.view;
  w.lw_int8.scales = w.scales.view;
  w.lw_int8.k = k;
  return w;
}

}  // namespace

void bench_w8a8(cuda::CudaBackend& be, double bw, double peak, bool quick) {
  cudaStream_t s = be.stream();
  cuda::CublasLtFp8Gemm fp8;
  cuda::CublasLtInt8Gemm int8;
  std::vector<std::string> summary;
  for (const Linear8b& sh : kLinears8b) {
    const std::string base = std::string(sh.name) + " n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k);
    W8 w = make_w8(be, sh.n, sh.k, 100);
    // ---- GEMMs ----
    for (int m : quick ? std::vector<int>{128, 2048, 8192} : std::vector<int>{128, 512, 2048, 8192}) {
      const double flop = 2.0 * m * sh.n * sh.k;
      const QuantX qx = make_quant_x(be, m, sh.k);
      const backend::DeviceTensor &xq8 = qx.fp8, &xi8 = qx.int8, &xs = qx.scales;
      auto y = be.allocate(DType::kBF16, Shape{m, sh.n});
      auto y2 = be.allocate(DType::kBF16, Shape{m, sh.n});
      auto acc = be.allocate(DType::kI32, Shape{m, sh.n});  // unchunked size (the chunked calls use its front)
      const std::string what = base + " m=" + std::to_string(m);
      const int reps = m >= 2048 ? 5 : 20;
      const cuda::Fp8GemmArgs fa{static_cast<const uint8_t*>(xq8.view.data), static_cast<const float*>(xs.view.data),
                                 static_cast<const uint8_t*>(w.fp8.view.data), static_cast<const float*>(w.scales.view.data),
                                 nullptr, y.view.data, false, m, sh.n, sh.k};
      double t_fp8 = 0;
      if (fp8.supported(fa)) {
        t_fp8 = 1e6 * cuda::time_on_stream(s, reps, [&](int) { fp8.run(fa, s); });
        row(what + " fp8 cuBLASLt (ceiling for int8)", t_fp8, flop, true, peak);
      }
      cuda::Int8GemmArgs ia{static_cast<const int8_t*>(xi8.view.data), static_cast<const float*>(xs.view.data),
                            static_cast<const int8_t*>(w.int8.view.data), static_cast<const float*>(w.scales.view.data),
                            nullptr, y2.view.data, false, m, sh.n, sh.k, static_cast<int32_t*>(acc.view.data)};
      double best_int8 = 1e30;
      for (const int rows : {1024, 2048, 4096, 1 << 30}) {
        if (rows < (1 << 30) && rows >= m) continue;  // the same call as unchunked
        int8.set_chunk_rows(rows);
        const std::string cap = rows == (1 << 30) ? "unchunked" : std::to_string(rows) + "-row chunks";
        if (!int8.supported(ia, cuda::Int8GemmMode::kInt32Epilogue)) {
          std::printf("%s int8 (%s): cuBLASLt has no algorithm\n", what.c_str(), cap.c_str());
          continue;
        }
        const int algos = int8.algo_count(ia, cuda::Int8GemmMode::kInt32Epilogue);
        double best = 1e30;
        int best_i = 0;
        for (int a = 0; a < algos; ++a) {
          int8.set_algo(ia, cuda::Int8GemmMode::kInt32Epilogue, a);
          const double t = 1e6 * cuda::time_on_stream(s, reps, [&](int) { int8.run(ia, s); });
          if (a == 0) row(what + " int8+epilogue " + cap + " heuristic #0", t, flop, true, peak);
          if (t < best) {
            best = t;
            best_i = a;
          }
        }
        row(what + " int8+epilogue " + cap + " best of " + std::to_string(algos) + " (#" + std::to_string(best_i) + ")",
            best, flop, true, peak);
        best_int8 = std::min(best_int8, best);
        int8.set_algo(ia, cuda::Int8GemmMode::kInt32Epilogue, 0);
      }
      int8.set_chunk_rows(2048);  // the default
      {  // the epilogue alone on the unchunked int32 sums: its bytes (int32 read + bf16 write)
        const double t = 1e6 * cuda::time_on_stream(s, reps, [&](int) {
          cuda::launch_int8_scale_epilogue(static_cast<const int32_t*>(acc.view.data), ia.x_scales, ia.w_scales, nullptr,
                                           y2.view.data, false, m, sh.n, s);
        });
        row(what + " int8 epilogue alone (int32 -> bf16)", t, 6.0 * m * sh.n, false, bw);
      }
      if (int8.supported(ia, cuda::Int8GemmMode::kOuterVec)) {
        const double t = 1e6 * cuda::time_on_stream(s, reps, [&](int) { int8.run(ia, s, cuda::Int8GemmMode::kOuterVec); });
        row(what + " int8 cuBLASLt outer-vec scales (one call)", t, flop, true, peak);
        best_int8 = std::min(best_int8, t);
        if (t_fp8 > 0) {
          fp8.run(fa, s);
          auto y3 = be.allocate(DType::kBF16, Shape{m, sh.n});
          int8.run(ia, s);
          const cuda::Int8GemmArgs io{ia.xq, ia.x_scales, ia.wq, ia.w_scales, nullptr, y3.view.data, false, m, sh.n, sh.k, nullptr};
          int8.run(io, s, cuda::Int8GemmMode::kOuterVec);
          const double e = rel_l2(be, y3.view, y2.view);
          if (!(e < 1e-2)) std::printf("CHECK FAILED: %s int8 outer-vec vs int32+epilogue rel L2 %.3g\n", what.c_str(), e);
        }
      } else {
        std::printf("%s int8 outer-vec scales: cuBLASLt offers no algorithm\n", what.c_str());
      }
      if (t_fp8 > 0 && best_int8 < 1e30) {
        char buf[256];
        std::snprintf(buf, sizeof(buf), "%-8s m=%-5d fp8 %8.1f us  int8 best %8.1f us  int8/fp8 time %.3f", sh.name, m,
                      t_fp8, best_int8, best_int8 / t_fp8);
        summary.push_back(buf);
      }
      if (m == 2048) {  // the whole linears (quantize x + GEMM) through the backend
        auto x = be.allocate(DType::kBF16, Shape{m, sh.k});
        fill_bf16_pm1<<<256, 256, 0, s>>>(static_cast<__nv_bfloat16*>(x.view.data), static_cast<size_t>(x.view.numel()), 9);
        be.linear(x.view, w.lw_fp8, y.view);
        be.linear(x.view, w.lw_int8, y2.view);
        const double tf = 1e6 * cuda::time_on_stream(s, reps, [&](int) { be.linear(x.view, w.lw_fp8, y.view); });
        const double ti = 1e6 * cuda::time_on_stream(s, reps, [&](int) { be.linear(x.view, w.lw_int8, y2.view); });
        row(what + " fp8 linear() (quantize + GEMM)", tf, flop, true, peak);
        row(what + " int8 linear() (quantize + the default GEMM)", ti, flop, true, peak);
      }
    }
    // ---- decode GEMVs ----
    const size_t wbytes = static_cast<size_t>(sh.n) * sh.k + static_cast<size_t>(sh.n) * 4;
    const int copies = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / wbytes, 1, 24));
    std::vector<W8> ws;
    for (int c = 0; c < copies; ++c) ws.push_back(make_w8(be, sh.n, sh.k, 200 + 7 * c));
    for (int m : {1, 8}) {
      auto xq8 = be.allocate(DType::kFP8E4M3, Shape{m, sh.k});
      auto xi8 = be.allocate(DType::kI8, Shape{m, sh.k});
      auto xs = be.allocate(DType::kF32, Shape{m});
      fill_codes<<<64, 256, 0, s>>>(static_cast<uint8_t*>(xq8.view.data), static_cast<size_t>(m) * sh.k, 3, true);
      fill_codes<<<64, 256, 0, s>>>(static_cast<uint8_t*>(xi8.view.data), static_cast<size_t>(m) * sh.k, 3, false);
      fill_pos<<<1, 256, 0, s>>>(static_cast<float*>(xs.view.data), static_cast<size_t>(m), 4, 0.01f);
      XI_CUDA_CHECK_LAUNCH();
      auto y = be.allocate(DType::kBF16, Shape{m, sh.n});
      const double bytes = static_cast<double>(wbytes) + m * sh.k + 2.0 * m * sh.n;
      const std::string what = base + " m=" + std::to_string(m);
      const cuda::QuantGemvConfig chosen = cuda::fp8_gemv_default_config(sh.n, sh.k, true);
      const cuda::QuantGemvConfig chosen_int8 = cuda::w8a8_int8_gemv_default_config(sh.n, sh.k, m, true);
      const std::vector<cuda::QuantGemvConfig> configs = {
          {2, true, 4, false, false}, {3, true, 4, false, false}, {2, true, 8, false, false}, {2, true, 8, true, false}};
      if (m == 8) {  // check: the int8 GEMV against the int8 GEMM (both exact int32 sums)
        auto yg = be.allocate(DType::kF32, Shape{m, sh.n});
        auto ye = be.allocate(DType::kF32, Shape{m, sh.n});
        auto acc = be.allocate(DType::kI32, Shape{m, sh.n});
        cuda::launch_w8a8_int8_gemv({static_cast<const uint8_t*>(xi8.view.data), static_cast<const float*>(xs.view.data),
                                     static_cast<const uint8_t*>(ws[0].int8.view.data),
                                     static_cast<const float*>(ws[0].scales.view.data), true, nullptr, yg.view.data, true, m,
                                     sh.n, sh.k},
                                    s, chosen);
        int8.run({static_cast<const int8_t*>(xi8.view.data), static_cast<const float*>(xs.view.data),
                  static_cast<const int8_t*>(ws[0].int8.view.data), static_cast<const float*>(ws[0].scales.view.data),
                  nullptr, ye.view.data, true, m, sh.n, sh.k, static_cast<int32_t*>(acc.view.data)},
                 s);
        const double e = rel_l2(be, yg.view, ye.view);
        if (!(e < 1e-5)) std::printf("CHECK FAILED: %s int8 GEMV vs int8 GEMM rel L2 %.3g\n", what.c_str(), e);
      }
      double best_f = 1e30, best_i = 1e30;
      for (const cuda::QuantGemvConfig& c : configs) {
        const bool is_default = c.stages == chosen.stages && c.ctas_per_sm == chosen.ctas_per_sm && c.persistent == chosen.persistent;
        const bool is_default_int8 = c.stages == chosen_int8.stages && c.ctas_per_sm == chosen_int8.ctas_per_sm &&
                                     c.persistent == chosen_int8.persistent;
        const double tf = graph_us(s, 20, [&](int i) {
          const W8& wi = ws[static_cast<size_t>(i % copies)];
          cuda::launch_fp8_gemv({static_cast<const uint8_t*>(xq8.view.data), static_cast<const float*>(xs.view.data),
                                 static_cast<const uint8_t*>(wi.fp8.view.data), static_cast<const float*>(wi.scales.view.data),
                                 true, nullptr, y.view.data, false, m, sh.n, sh.k},
                                s, c);
        });
        const double ti = graph_us(s, 20, [&](int i) {
          const W8& wi = ws[static_cast<size_t>(i % copies)];
          cuda::launch_w8a8_int8_gemv({static_cast<const uint8_t*>(xi8.view.data), static_cast<const float*>(xs.view.data),
                                       static_cast<const uint8_t*>(wi.int8.view.data),
                                       static_cast<const float*>(wi.scales.view.data), true, nullptr, y.view.data, false, m,
                                       sh.n, sh.k},
                                      s, c);
        });
        row(what + " fp8 gemv " + cuda::to_string(c) + (is_default ? " *" : ""), tf, bytes, false, bw);
        row(what + " int8 gemv " + cuda::to_string(c) + (is_default_int8 ? " *" : ""), ti, bytes, false, bw);
        best_f = std::min(best_f, tf);
        best_i = std::min(best_i, ti);
      }
      const double roof = bytes / (bw * 1e9) * 1e6;
      char buf[256];
      std::snprintf(buf, sizeof(buf), "%-8s m=%d gemv roofline %6.1f us: fp8 best %6.1f us (%5.1f%%), int8 best %6.1f us (%5.1f%%)",
                    sh.name, m, roof, best_f, 100 * roof / best_f, best_i, 100 * roof / best_i);
      summary.push_back(buf);
      if (m == 1) {  // quantize x + GEMV through the backend
        auto x = be.allocate(DType::kBF16, Shape{m, sh.k});
        fill_bf16_pm1<<<16, 256, 0, s>>>(static_cast<__nv_bfloat16*>(x.view.data), static_cast<size_t>(x.view.numel()), 9);
        be.linear(x.view, ws[0].lw_fp8, y.view);
        be.linear(x.view, ws[0].lw_int8, y.view);
        const double tf = graph_us(s, 20, [&](int i) { be.linear(x.view, ws[static_cast<size_t>(i % copies)].lw_fp8, y.view); });
        const double ti = graph_us(s, 20, [&](int i) { be.linear(x.view, ws[static_cast<size_t>(i % copies)].lw_int8, y.view); });
        row(what + " fp8 linear() (quantize + gemv)", tf, bytes, false, bw);
        row(what + " int8 linear() (quantize + gemv)", ti, bytes, false, bw);
      }
    }
  }
  std::printf("\n==== W8A8 summary (ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s) ====\n", bw, peak);
  for (const std::string& l : summary) std::printf("%s\n", l.c_str());
}

// gpu_kernel_bench --fp8-rows: the FP8 GEMM at the decode batch sizes between 128 and 1024 rows (where cuBLASLt's
// tiles are quantised in m), per shape and m: the heuristic's first algorithm, the best of the candidates
// (cublaslt_fp8_gemm.h: at the decode graph buckets also the tile / split-K variants, cublaslt_algo_choice.h), what
// run() picks (the measured, process-shared choice there, else the heuristic's), and the GEMM computed on the rows
// rounded up to 128 (padding the activations).
// The rows of all candidates and their cuBLASLt configurations come first; the summary at the end.
void bench_fp8_rows(cuda::CudaBackend& be, double peak) {
  cudaStream_t s = be.stream();
  const int ms[] = {128, 136, 192, 256, 264, 288, 320, 352, 384, 392, 416, 448, 480, 504, 512, 520, 576, 640, 768, 1024};
  constexpr int kMaxM = 1024;
  cuda::CublasLtFp8Gemm fp8;
  std::vector<std::string> summary;
  double sum_heur = 0, sum_chosen = 0;
  for (const Linear8b& sh : kLinears8b) {
    W8 w = make_w8(be, sh.n, sh.k, 100);
    auto xq8 = be.allocate(DType::kFP8E4M3, Shape{kMaxM, sh.k});
    auto xs = be.allocate(DType::kF32, Shape{kMaxM});
    fill_codes<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(xq8.view.data), static_cast<size_t>(kMaxM) * sh.k, 7, true);
    fill_pos<<<64, 256, 0, s>>>(static_cast<float*>(xs.view.data), static_cast<size_t>(kMaxM), 8, 0.01f);
    XI_CUDA_CHECK_LAUNCH();
    auto y = be.allocate(DType::kBF16, Shape{kMaxM, sh.n});
    for (const int m : ms) {
      auto args = [&](int rows) {
        return cuda::Fp8GemmArgs{static_cast<const uint8_t*>(xq8.view.data), static_cast<const float*>(xs.view.data),
                                 static_cast<const uint8_t*>(w.fp8.view.data), static_cast<const float*>(w.scales.view.data),
                                 nullptr, y.view.data, false, rows, sh.n, sh.k};
      };
      const cuda::Fp8GemmArgs fa = args(m);
      if (!fp8.supported(fa)) continue;
      const double flop = 2.0 * m * sh.n * sh.k;
      const std::string what = std::string(sh.name) + " m=" + std::to_string(m);
      fp8.run(fa, s);  // decides the measured choice
      const int chosen = fp8.chosen_algo(fa), count = fp8.algo_count(fa);
      const double t_chosen = 1e6 * cuda::time_on_stream(s, 20, [&](int) { fp8.run(fa, s); });
      double heur = 0, best = 1e30;
      int best_i = 0;
      for (int a = 0; a < count; ++a) {
        fp8.set_algo(fa, a);
        const double t = 1e6 * cuda::time_on_stream(s, 20, [&](int) { fp8.run(fa, s); });
        row(what + " fp8 #" + std::to_string(a) + (a == 0 ? " (heuristic's first) " : " ") + fp8.describe(fa, a), t, flop,
            true, peak);
        if (a == 0) heur = t;
        if (t < best) {
          best = t;
          best_i = a;
        }
      }
      fp8.set_algo(fa, chosen);
      const int mp = (m + 127) / 128 * 128;
      double padded = heur;
      if (mp != m) {
        const cuda::Fp8GemmArgs fp = args(mp);
        fp8.run(fp, s);
        padded = 1e6 * cuda::time_on_stream(s, 20, [&](int) { fp8.run(fp, s); });
      }
      char buf[512];
      std::snprintf(buf, sizeof(buf),
                    "%-8s m=%-5d heuristic %7.1f us  best %7.1f (#%d of %d)  chosen %7.1f (#%d)  padded to %d: %7.1f us  "
                    "[best: %s]",
                    sh.name, m, heur, best, best_i, count, t_chosen, chosen, mp, padded, fp8.describe(fa, best_i).c_str());
      summary.push_back(buf);
      sum_heur += heur;
      sum_chosen += t_chosen;
    }
  }
  std::printf("\n==== FP8 GEMM vs rows (bf16 GEMM ceiling %.0f TFLOP/s; FP8 dense peak 2x) ====\n", peak);
  for (const std::string& l : summary) std::printf("%s\n", l.c_str());
  std::printf("sum over the rows above: heuristic %.1f us, chosen %.1f us (%.3fx)\n", sum_heur, sum_chosen,
              sum_heur / sum_chosen);
}

// gpu_kernel_bench --fp8-wide: the FP8 GEMMs at the row counts of the large decode steps (256 .. 1024: the
// throughput rows' decode-only steps; XINFER_BENCH_FP8_WIDE_ROWS=m1,m2,.. picks others) against every algorithm cuBLASLt has for the
// shape (CublasLtFp8Gemm::set_every_algo_limit: each algorithm id in each tile, stage count, cluster shape and
// split-K count it accepts), not only the variants the engine measures (its choice here: measured as the engine
// does at --max-num-seqs 1024). Each candidate is timed briefly (best of two runs of 3 launches), the five
// fastest again as the other rows (median of 5 runs of 20), all with the weight in copies rotated past L2; the
// winner's output is compared with the engine's choice's (relative L2).
void bench_fp8_wide(cuda::CudaBackend& be, double peak) {
  cudaStream_t s = be.stream();
  const char* env_ms = std::getenv("XINFER_BENCH_FP8_WIDE_ROWS");
  std::vector<int> ms = {256, 384, 448, 512, 640, 864, 1024};
  if (env_ms != nullptr && *env_ms != 0) {
    ms.clear();
    std::stringstream list(env_ms);
    for (std::string item; std::getline(list, item, ',');) ms.push_back(std::stoi(item));
  }
  const int max_m = *std::max_element(ms.begin(), ms.end());
  cuda::CublasLtFp8Gemm usual, wide;
  usual.set_max_measured_rows(1024);  // as the engine at --max-num-seqs 1024
  wide.set_every_algo_limit(20000);
  std::vector<std::string> summary;
  double sum_usual = 0, sum_wide = 0;
  cudaEvent_t a, b;
  XI_CUDA_CHECK(cudaEventCreate(&a));
  XI_CUDA_CHECK(cudaEventCreate(&b));
  for (const Linear8b& sh : kLinears8b) {
    W8 w = make_w8(be, sh.n, sh.k, 100);
    // Weight copies rotated past L2 (as the engine's measurement and its steps see the weights).
    const size_t w_bytes = static_cast<size_t>(sh.n) * sh.k;
    const int copies = cuda::rotated_copies(w_bytes);
    auto w_rot = be.allocate(DType::kFP8E4M3, Shape{static_cast<int64_t>(copies) * sh.n, sh.k});
    for (int c = 0; c < copies; ++c)
      XI_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(w_rot.view.data) + c * w_bytes, w.fp8.view.data,
                                    w_bytes, cudaMemcpyDeviceToDevice, s));
    auto rot = [&](cuda::Fp8GemmArgs g, int i) {
      g.wq = static_cast<const uint8_t*>(w_rot.view.data) + static_cast<size_t>(i % copies) * w_bytes;
      return g;
    };
    const QuantX qx = make_quant_x(be, max_m, sh.k);
    auto y = be.allocate(DType::kBF16, Shape{max_m, sh.n});
    auto y_ref = be.allocate(DType::kBF16, Shape{max_m, sh.n});
    for (const int m : ms) {
      auto args = [&](void* out) {
        return cuda::Fp8GemmArgs{static_cast<const uint8_t*>(qx.fp8.view.data),
                                 static_cast<const float*>(qx.scales.view.data),
                                 static_cast<const uint8_t*>(w.fp8.view.data),
                                 static_cast<const float*>(w.scales.view.data),
                                 nullptr,
                                 out,
                                 false,
                                 m,
                                 sh.n,
                                 sh.k};
      };
      const cuda::Fp8GemmArgs ua = args(y_ref.view.data), wa = args(y.view.data);
      if (!usual.supported(ua)) continue;
      const std::string what = std::string(sh.name) + " m=" + std::to_string(m);
      const double flop = 2.0 * m * sh.n * sh.k;
      usual.run(ua, s);  // decides as the engine does (measured at the decode graph buckets up to 256)
      const double t_usual = 1e6 * cuda::time_on_stream(s, 20, [&](int i) { usual.run(rot(ua, i), s); });
      const int count = wide.algo_count(wa);
      std::vector<std::pair<double, int>> quick;
      for (int i = 0; i < count; ++i) {
        wide.set_algo(wa, i);
        wide.run(wa, s);
        if (cudaStreamSynchronize(s) != cudaSuccess) continue;
        float best = 1e30f;
        for (int rep = 0; rep < 2; ++rep) {
          XI_CUDA_CHECK(cudaEventRecord(a, s));
          for (int it = 0; it < 3; ++it) wide.run(rot(wa, it), s);
          XI_CUDA_CHECK(cudaEventRecord(b, s));
          XI_CUDA_CHECK(cudaEventSynchronize(b));
          float ms_ = 0;
          XI_CUDA_CHECK(cudaEventElapsedTime(&ms_, a, b));
          best = std::min(best, ms_);
        }
        quick.emplace_back(1e3 * best / 3, i);
      }
      std::sort(quick.begin(), quick.end());
      double t_best = 1e30;
      int best_i = -1;
      for (size_t j = 0; j < quick.size() && j < 5; ++j) {
        wide.set_algo(wa, quick[j].second);
        const double t = 1e6 * cuda::time_on_stream(s, 20, [&](int i) { wide.run(rot(wa, i), s); });
        row(what + " wide #" + std::to_string(quick[j].second) + " " + wide.describe(wa, quick[j].second), t,
            flop, true, peak);
        if (t < t_best) {
          t_best = t;
          best_i = quick[j].second;
        }
      }
      if (best_i < 0) continue;
      wide.set_algo(wa, best_i);
      wide.run(wa, s);
      usual.run(ua, s);
      const size_t elems = static_cast<size_t>(m) * sh.n;
      std::vector<__nv_bfloat16> hy(elems), hr(elems);
      XI_CUDA_CHECK(cudaMemcpyAsync(hy.data(), y.view.data, elems * 2, cudaMemcpyDeviceToHost, s));
      XI_CUDA_CHECK(cudaMemcpyAsync(hr.data(), y_ref.view.data, elems * 2, cudaMemcpyDeviceToHost, s));
      XI_CUDA_CHECK(cudaStreamSynchronize(s));
      double e = 0, nn = 0;
      for (size_t i = 0; i < elems; ++i) {
        const double d = static_cast<double>(__bfloat162float(hy[i])) - __bfloat162float(hr[i]);
        e += d * d;
        nn += static_cast<double>(__bfloat162float(hr[i])) * __bfloat162float(hr[i]);
      }
      char buf[640];
      std::snprintf(buf, sizeof(buf),
                    "%-8s m=%-5d engine's choice %7.1f us (%4.0f TFLOP/s)  wide best %7.1f us (%4.0f "
                    "TFLOP/s, %.2fx; #%d of %d; "
                    "rel L2 vs engine's %.1e) [%s]",
                    sh.name, m, t_usual, flop / t_usual * 1e-6, t_best, flop / t_best * 1e-6,
                    t_usual / t_best, best_i, count, std::sqrt(e / std::max(nn, 1e-30)),
                    wide.describe(wa, best_i).c_str());
      std::printf("%s\n", buf);
      std::fflush(stdout);
      summary.push_back(buf);
      sum_usual += t_usual;
      sum_wide += t_best;
    }
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::printf(
      "\n==== FP8 GEMM: the engine's choice vs every cuBLASLt algorithm (FP8 dense peak 2 x %.0f TFLOP/s) "
      "====\n",
      peak);
  for (const std::string& l : summary) std::printf("%s\n", l.c_str());
  std::printf("sum: engine's choice %.1f us, wide best %.1f us (%.3fx)\n", sum_usual, sum_wide,
              sum_usual / sum_wide);
}

// gpu_kernel_bench --int8-wgmma: the W8A8-INT8 GEMM at the Llama-3.1-8B shapes and the row counts of the
// engine's steps (decode 128 / 256 / 481 / 954, prefill chunks 2048 / 8192), on quantized x (random codes):
// cuBLASLt FP8 with outer-vector scales (the FP8 path: the ceiling INT8 is held to), cuBLASLt int8 -> int32 +
// our epilogue (the backend's measured algorithm) and our wgmma GEMM with fused scales in each configuration
// (w8a8_int8_wgmma.h), TFLOP/s against the FP8 / INT8 dense peak (2x the measured bf16 GEMM). Each wgmma
// output is checked against the cuBLASLt path's bits first ("CHECK FAILED" otherwise). Then the per-shape
// sums at each m, and the sum of the configurations the backend's rule (int8_wgmma_auto_config) runs at each
// shape. The same kernels on the FP8 codes (launch_w8a8_fp8_wgmma) beside cuBLASLt's FP8 (its measured
// algorithm at the decode buckets 128 / 256 / 448 / 896, the heuristic's at 2048 / 8192 / 16384), each
// output's relative L2 distance to cuBLASLt's printed once per shape and m, and per m the best of the two per
// shape (what the engine's measurement picks).
void bench_int8_wgmma(cuda::CudaBackend& be, double peak) {
  cudaStream_t s = be.stream();
  cuda::CublasLtFp8Gemm fp8;
  fp8.set_max_measured_rows(
      1024);  // its measured algorithm at every decode graph bucket, as the engine runs it
  cuda::CublasLtInt8Gemm int8;
  const std::vector<int> ms = {128, 256, 448, 896, 2048, 8192, 16384};
  // Each configuration in the launch's band by shape (band 0) and with m tiles fastest (band 1: the order before
  // session 20).
  std::vector<cuda::Int8WgmmaConfig> configs;
  for (const cuda::Int8WgmmaConfig& c : cuda::kInt8WgmmaConfigs)
    for (const int band : {0, 1}) {
      configs.push_back(c);
      configs.back().band = band;
    }
  const size_t nc = configs.size();
  std::vector<double> sum_fp8(ms.size()), sum_int8(ms.size()), sum_rule(ms.size());
  std::vector<std::vector<double>> sum_wg(ms.size(), std::vector<double>(nc)),
      sum_wg8(ms.size(), std::vector<double>(nc));
  std::vector<double> sum_best8(ms.size());
  for (const Linear8b& sh : kLinears8b) {
    W8 w = make_w8(be, sh.n, sh.k, 300);
    for (size_t mi = 0; mi < ms.size(); ++mi) {
      const int m = ms[mi];
      const double flop = 2.0 * m * sh.n * sh.k;
      const QuantX qx = make_quant_x(be, m, sh.k);
      const backend::DeviceTensor &xq8 = qx.fp8, &xi8 = qx.int8, &xs = qx.scales;
      auto y = be.allocate(DType::kBF16, Shape{m, sh.n});
      auto y2 = be.allocate(DType::kBF16, Shape{m, sh.n});
      auto acc = be.allocate(DType::kI32, Shape{std::min(m, 2048), sh.n});
      const std::string what = std::string(sh.name) + " m=" + std::to_string(m);
      const int reps = m >= 2048 ? 5 : 20;
      const cuda::Fp8GemmArgs fa{static_cast<const uint8_t*>(xq8.view.data), static_cast<const float*>(xs.view.data),
                                 static_cast<const uint8_t*>(w.fp8.view.data), static_cast<const float*>(w.scales.view.data),
                                 nullptr, y.view.data, false, m, sh.n, sh.k};
      fp8.run(fa, s);
      const double t_fp8 = 1e6 * cuda::time_on_stream(s, reps, [&](int) { fp8.run(fa, s); });
      row(what + " fp8 cuBLASLt", t_fp8, flop, true, 2 * peak);
      const cuda::Int8GemmArgs ia{static_cast<const int8_t*>(xi8.view.data), static_cast<const float*>(xs.view.data),
                                  static_cast<const int8_t*>(w.int8.view.data), static_cast<const float*>(w.scales.view.data),
                                  nullptr, y2.view.data, false, m, sh.n, sh.k, static_cast<int32_t*>(acc.view.data)};
      int8.run(ia, s);  // measures its algorithm choice (as the backend does) before the timing
      const double t_int8 = 1e6 * cuda::time_on_stream(s, reps, [&](int) { int8.run(ia, s); });
      row(what + " int8 cuBLASLt + epilogue", t_int8, flop, true, 2 * peak);
      const std::vector<uint16_t> want = raw_bf16_of(be, y2.view);
      auto y_fp8 = be.allocate(DType::kBF16, Shape{m, sh.n});
      XI_CUDA_CHECK(
          cudaMemcpyAsync(y_fp8.view.data, y.view.data, y.view.bytes(), cudaMemcpyDeviceToDevice, s));
      double best8 = t_fp8;
      for (size_t c = 0; c < nc;
           ++c) {  // the FP8 wgmma kernels against cuBLASLt's FP8 (summation order differs)
        const cuda::Int8WgmmaConfig config = configs[c];
        cuda::Fp8GemmArgs wa = fa;
        wa.y = y2.view.data;
        XI_CUDA_CHECK(cudaMemsetAsync(y2.view.data, 0xff, y2.view.bytes(), s));
        cuda::launch_w8a8_fp8_wgmma(wa, s, config);
        if (c == 0)
          std::printf("%s fp8 wgmma vs cuBLASLt FP8: rel L2 %.3g\n", what.c_str(),
                      rel_l2(be, y2.view, y_fp8.view));
        const double t =
            1e6 * cuda::time_on_stream(s, reps, [&](int) { cuda::launch_w8a8_fp8_wgmma(wa, s, config); });
        row(what + " fp8 " + cuda::to_string(config), t, flop, true, 2 * peak);
        sum_wg8[mi][c] += t;
        best8 = std::min(best8, t);
      }
      sum_best8[mi] += best8;
      int8.run(ia, s);  // y2 back to the int8 path's output
      sum_fp8[mi] += t_fp8;
      sum_int8[mi] += t_int8;
      for (size_t c = 0; c < nc; ++c) {
        const cuda::Int8WgmmaConfig config = configs[c];
        cuda::Int8GemmArgs wa = ia;
        wa.y = y.view.data;
        XI_CUDA_CHECK(cudaMemsetAsync(y.view.data, 0xff, y.view.bytes(), s));
        cuda::launch_w8a8_int8_wgmma(wa, s, config);
        if (raw_bf16_of(be, y.view) != want)
          std::printf("CHECK FAILED: %s %s differs from the cuBLASLt path\n", what.c_str(), cuda::to_string(config).c_str());
        const double t = 1e6 * cuda::time_on_stream(s, reps, [&](int) { cuda::launch_w8a8_int8_wgmma(wa, s, config); });
        row(what + " int8 " + cuda::to_string(config), t, flop, true, 2 * peak);
        sum_wg[mi][c] += t;
        // The backend's rule at this shape (int8_wgmma_auto_config, band by shape: band 0 here).
        if (config.band == 0 && cuda::config_name(config) == cuda::config_name(cuda::int8_wgmma_auto_config(m, sh.k)))
          sum_rule[mi] += t;
      }
    }
  }
  for (size_t mi = 0; mi < ms.size(); ++mi) {
    std::printf("sum of the 4 linears, m=%-5d fp8 %8.1f us  int8 cuBLASLt+epilogue %8.1f us (%.3f of fp8's time)"
                "  the rule %.1f (%.3f)",
                ms[mi], sum_fp8[mi], sum_int8[mi], sum_int8[mi] / sum_fp8[mi], sum_rule[mi], sum_rule[mi] / sum_fp8[mi]);
    for (size_t c = 0; c < nc; ++c)
      std::printf("  %s %.1f (%.3f)", cuda::config_name(configs[c]).c_str(), sum_wg[mi][c],
                  sum_wg[mi][c] / sum_fp8[mi]);
    std::printf("\n");
  }
  for (size_t mi = 0; mi < ms.size(); ++mi) {
    std::printf(
        "fp8 sum of the 4 linears, m=%-5d cuBLASLt %8.1f us  best of cuBLASLt / wgmma per shape %8.1f (%.3f)",
        ms[mi], sum_fp8[mi], sum_best8[mi], sum_best8[mi] / sum_fp8[mi]);
    for (size_t c = 0; c < nc; ++c)
      std::printf("  %s %.1f (%.3f)", cuda::config_name(configs[c]).c_str(), sum_wg8[mi][c],
                  sum_wg8[mi][c] / sum_fp8[mi]);
    std::printf("\n");
  }
}

}  // namespace xinfer::bench
