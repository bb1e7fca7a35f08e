// The weight-only quantized linears of gpu_kernel_bench (kernels/gemm/quant_linear.h) at the Llama-3.1-8B
// shapes (qkv 6144 x 4096, o 4096 x 4096, gate_up 28672 x 4096, down 4096 x 14336):
//   - decode (m = 1, 4, 8): the quantized GEMV (each compiled schedule, quant_linear.h QuantGemvConfig; the
//     backend's default marked *),
//     timed as CUDA-graph replays of 20 calls (as decode steps run), bytes = the quantized weight
//     (values + f32 scales + zero points) + x + y, against the copy bandwidth: the roofline of the quantized
//     bytes (one pass over them per launch of 8 rows) against the copy bandwidth;
//   - int4 / int8 at m = 1..4: also the CUDA-core GEMV (quant_dot_gemv.h), each compiled schedule (its
//     default marked "dot*"); int4 at m <= 16: the tensor-core int4 decode GEMV (int4_decode_gemv.h), each
//     schedule; --quant-dot: only these rows (int4 g128 / g128-zp / g32 / g32-zp and int8 per channel,
//     m 1..4, 8, 16, the mma GEMV's default beside them);
//   - m = 16, 32: the GEMV in launches of 8 rows against dequantize + bf16 GEMM (where the crossover is; GB/s
//     of both on the same basis, one pass over the quantized bytes, so they compare by time);
//   - prefill (m = 2048): dequantize + bf16 GEMM in TFLOP/s against the bf16 GEMM alone;
//   - W8A8-FP8: our FP8 GEMV alone (m <= 16, each pipelined schedule, on e4m3 x), the CUDA-core FP8 GEMV on
//   e4m3 x
//     and with the activation quantization fused (m 1..4, "fp8 quantizing": bf16 x in, the default marked *),
//     then per-token activation
//     quantization + FP8 GEMV (m <= 16) / cuBLASLt FP8 GEMM through CudaBackend::linear at the same m: bytes
//     = e4m3 weight + f32 scales + x + y; TFLOP/s at m = 2048 against the bf16 ceiling (FP8 dense peak is
//     twice bf16's).
// bench_wq_gemm (--wq-gemm): the rows past the GEMV (m 17..2048), the dequantize path vs the tiled GEMM
// (below). Checked first on every shape and format: the GEMV and the dequantize path agree (relative L2 <
// 1e-2 at m = 1 and 8). Weights rotate among copies totalling >= 512 MiB so L2 (50 MB) does not serve them.
// XINFER_BENCH_WQ=<text>: only the (format, shape) pairs whose "format shape" name contains it (e.g.
// "int4-g128 gate_up"; a profiler's first wq_gemm launch is then that shape's check at m = 64).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gpu_bench_util.h"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuner.h"
#include "xinfer/backend/cuda/kernels/gemm/int4_decode_gemv.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_dot_gemv.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"
#include "xinfer/backend/cuda/kernels/gemm/wq_gemm.h"

namespace xinfer::bench {
namespace {

void line(const std::string& what, double us, double amount, bool flops, double ceiling) {
  print_row(what, us, amount, flops, ceiling, 58);
}

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, uint32_t mod) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint8_t>(hash32(static_cast<uint32_t>(i) * 2654435761u ^ seed) % mod);
}
__global__ void fill_scales(float* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = scale * (0.5f + static_cast<float>(hash32(static_cast<uint32_t>(i) ^ seed) & 0xffff) / 65536.0f);
}
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(static_cast<float>(hash32(static_cast<uint32_t>(i) ^ seed) & 0xffff) / 32768.0f - 1.0f);
}

struct QuantFormat {
  const char* name;
  quant::WeightFormat format;
};

// One weight copy in `format` with random contents.
struct QuantTensors {
  backend::DeviceTensor w, scales, zeros;
  backend::LinearWeights lw;
};
QuantTensors make_weight(cuda::CudaBackend& be, const quant::WeightFormat& f, int n, int k, uint32_t seed) {
  QuantTensors t;
  cudaStream_t s = be.stream();
  int groups = 1, bits = 8;
  bool zp = false;
  if (const auto* g = std::get_if<quant::IntGroupFormat>(&f)) {
    groups = (k + g->group_size - 1) / g->group_size;
    bits = g->bits;
    zp = g->zero_point;
  }
  const bool channel = std::holds_alternative<quant::Int8ChannelFormat>(f);
  if (std::holds_alternative<quant::W8A8Fp8Format>(f)) {  // e4m3 codes 0..125: finite, positive
    t.w = be.allocate(DType::kFP8E4M3, Shape{n, k});
    fill_bytes<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(t.w.view.data), static_cast<size_t>(t.w.view.numel()), seed, 126);
    t.scales = be.allocate(DType::kF32, Shape{n});
    fill_scales<<<256, 256, 0, s>>>(static_cast<float*>(t.scales.view.data), static_cast<size_t>(n), seed + 1,
                                    0.001f / std::sqrt(static_cast<float>(k)));
    XI_CUDA_CHECK_LAUNCH();
    t.lw.weight = t.w.view;
    t.lw.scales = t.scales.view;
    t.lw.format = f;
    t.lw.k = k;
    return t;
  }
  const int64_t row_bytes = bits == 4 ? k / 2 : k;
  t.w = be.allocate(channel ? DType::kI8 : DType::kU8, Shape{n, row_bytes});
  fill_bytes<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(t.w.view.data), static_cast<size_t>(t.w.view.numel()), seed, 256);
  t.scales = be.allocate(DType::kF32, channel ? Shape{n} : Shape{n, groups});
  fill_scales<<<256, 256, 0, s>>>(static_cast<float*>(t.scales.view.data), static_cast<size_t>(t.scales.view.numel()),
                                  seed + 1, (bits == 4 ? 0.15f : 0.01f) / std::sqrt(static_cast<float>(k)));
  if (zp) {
    t.zeros = be.allocate(DType::kU8, Shape{n, groups});
    fill_bytes<<<256, 256, 0, s>>>(static_cast<uint8_t*>(t.zeros.view.data), static_cast<size_t>(t.zeros.view.numel()),
                                   seed + 2, bits == 4 ? 16 : 256);
  }
  XI_CUDA_CHECK_LAUNCH();
  t.lw.weight = t.w.view;
  t.lw.scales = t.scales.view;
  if (zp) t.lw.zeros = t.zeros.view;
  t.lw.format = f;
  t.lw.k = k;
  return t;
}

// The GEMV schedules compared (quant_linear.h QuantGemvConfig), all with PDL as the backend launches them
// (cudaq-3: PDL was faster in 14 of 16 int rows). Int: the batch schedule at 2 / 3 CTAs per SM and wide, the
// same with f16_x (int8), one pipelined reference (cudaq-1: the pipelined ones were slower on every int
// shape; cudaq-3: sum_x 1.4-1.9x slower, no longer timed); FP8 (pipelined only).
std::vector<cuda::QuantGemvConfig> gemv_configs(int m) {
  std::vector<cuda::QuantGemvConfig> out;
  if (m < 16) out.push_back({3, true, 0, false, false, false});
  out.push_back({2, true, 0, false, false, false});
  out.push_back({2, true, 0, false, true, false});
  if (m < 16) out.push_back({3, true, 0, false, false, false, true});
  out.push_back({2, true, 0, false, false, false, true});
  out.push_back({2, true, 0, false, true, false, true});
  out.push_back({2, true, 8, false, false, false});
  return out;
}
// configs plus a copy with QuantGemvConfig::tokens16 of each one `compiled` says has it (m > 8 only: at most
// 8 rows the 16-row kernels are not launched).
template <typename Compiled>
std::vector<cuda::QuantGemvConfig> with_tokens16(std::vector<cuda::QuantGemvConfig> configs, int m,
                                                 Compiled compiled) {
  if (m <= 8) return configs;
  for (size_t i = 0, e = configs.size(); i < e; ++i)
    if (compiled(configs[i])) {
      configs.push_back(configs[i]);
      configs.back().tokens16 = true;
    }
  return configs;
}
std::vector<cuda::QuantGemvConfig> fp8_gemv_configs() {
  return {{2, true, 4, false, false}, {3, true, 4, false, false}, {2, true, 8, false, false}, {2, true, 8, true, false}};
}

}  // namespace

// Prints the rows described at the top; returns the m = 1 summary lines (roofline ratio per shape and format).
std::vector<std::string> bench_quant_linears(cuda::CudaBackend& be, double bw, double peak, bool quick, bool dot_only) {
  cudaStream_t s = be.stream();
  std::vector<QuantFormat> formats =
      quick ? std::vector<QuantFormat>{{"int4-g128", quant::IntGroupFormat{4, 128, false}},
                                       {"int8-channel", quant::Int8ChannelFormat{}},
                                       {"fp8", quant::W8A8Fp8Format{}}}
            : std::vector<QuantFormat>{{"int4-g128", quant::IntGroupFormat{4, 128, false}},
                                       {"int4-g128-zp", quant::IntGroupFormat{4, 128, true}},
                                       {"int4-g32-zp", quant::IntGroupFormat{4, 32, true}},
                                       {"int8-channel", quant::Int8ChannelFormat{}},
                                       {"int8-g128", quant::IntGroupFormat{8, 128, false}},
                                       {"fp8", quant::W8A8Fp8Format{}}};
  if (dot_only)
    formats = {{"int4-g128", quant::IntGroupFormat{4, 128, false}},
               {"int4-g128-zp", quant::IntGroupFormat{4, 128, true}},
               {"int4-g32", quant::IntGroupFormat{4, 32, false}},
               {"int4-g32-zp", quant::IntGroupFormat{4, 32, true}},
               {"int8-channel", quant::Int8ChannelFormat{}},
               {"int8-g32", quant::IntGroupFormat{8, 32, false}},  // GGUF Q8_0 / Q5_0 repacked
               {"int8-g16", quant::IntGroupFormat{8, 16, false}},  // GGUF Q6_K repacked
               {"fp8", quant::W8A8Fp8Format{}}};
  if (!quick && !dot_only) {  // the bf16 GEMM after dequantization runs the tuned choice (quick: cuBLASLt's heuristic)
    std::vector<cuda::GemmShape> gs;
    for (const Linear8b& sh : kLinears8b) gs.push_back({sh.n, sh.k, false, false, 2048, false});
    cuda::GemmTunerOptions to;
    to.show_progress = false;
    std::printf("%s\n", be.gemm().tune(gs, to, s).to_string().c_str());
  }
  std::vector<std::string> summary;
  double token_us[8] = {0}, token_roof[8] = {0};
  // XINFER_BENCH_QUANT_ONLY=FORMAT[:SHAPE[:M]] (e.g. int4-g128:gate_up:1) runs that row alone (for ncu).
  std::string only_format, only_shape;
  int only_m = 0;
  if (const char* v = std::getenv("XINFER_BENCH_QUANT_ONLY")) {
    const std::string o = v;
    const size_t a = o.find(':'), b = a == std::string::npos ? a : o.find(':', a + 1);
    only_format = o.substr(0, a);
    if (a != std::string::npos) only_shape = o.substr(a + 1, b == std::string::npos ? b : b - a - 1);
    if (b != std::string::npos) only_m = std::atoi(o.c_str() + b + 1);
  }
  for (size_t fi = 0; fi < formats.size(); ++fi) {
    const QuantFormat& qf = formats[fi];
    if (!only_format.empty() && only_format != qf.name) continue;
    for (const Linear8b& sh : kLinears8b) {
      if (!only_shape.empty() && only_shape != sh.name) continue;
      QuantTensors first = make_weight(be, qf.format, sh.n, sh.k, 100);
      const bool fp8 = std::holds_alternative<quant::W8A8Fp8Format>(qf.format);
      const cuda::QuantWeight q0 = fp8 ? cuda::QuantWeight{} : be.quant_weight(first.lw);
      const size_t qbytes = fp8 ? static_cast<size_t>(sh.n) * sh.k + static_cast<size_t>(sh.n) * 4 : q0.bytes();
      const int copies = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / qbytes, 1, 32));
      std::vector<QuantTensors> ws;
      ws.push_back(std::move(first));
      for (int c = 1; c < copies; ++c) ws.push_back(make_weight(be, qf.format, sh.n, sh.k, 100 + 7 * c));
      auto wi = [&](int i) -> const backend::LinearWeights& { return ws[static_cast<size_t>(i % copies)].lw; };
      const std::string base = std::string("quant ") + qf.name + " " + sh.name + " n=" + std::to_string(sh.n) +
                               " k=" + std::to_string(sh.k);
      // Correctness: the GEMV against the dequantize path (bf16 weight, tuned GEMM) at m = 1, 8 and 16.
      for (int m : {1, 8, 16}) {
        if (fp8 || only_m > 0) break;  // fp8: checked against the CPU oracle in quant_linear_test only
        auto x = be.allocate(DType::kBF16, Shape{m, sh.k});
        fill_bf16<<<256, 256, 0, s>>>(static_cast<__nv_bfloat16*>(x.view.data), static_cast<size_t>(x.view.numel()), 5);
        auto y1 = be.allocate(DType::kF32, Shape{m, sh.n});
        auto y2 = be.allocate(DType::kF32, Shape{m, sh.n});
        be.linear(x.view, wi(0), y1.view);
        auto wd = be.allocate(DType::kBF16, Shape{sh.n, sh.k});
        cuda::launch_dequantize_weight(q0, static_cast<__nv_bfloat16*>(wd.view.data), s);
        be.linear(x.view, {wd.view, {}}, y2.view);
        const double e = rel_l2(be, y1.view, y2.view);
        if (!(e < 1e-2)) std::printf("CHECK FAILED: %s m=%d GEMV vs dequantize path rel L2 %.3g\n", base.c_str(), m, e);
        const int dm = m == 8 ? 4 : m;
        if (cuda::dot_gemv_supports(q0, dm)) {  // the CUDA-core GEMV (first dm rows) vs the dequantize path
          int nc = 0;
          const cuda::DotGemvConfig* dcs = cuda::dot_gemv_configs(&nc);
          for (int ci = 0; ci < nc; ++ci) {
            if (!cuda::dot_gemv_config_fits(q0, dm, dcs[ci])) continue;
            auto y3 = be.allocate(DType::kF32, Shape{dm, sh.n});
            cuda::launch_dot_gemv({static_cast<const __nv_bfloat16*>(x.view.data), q0, nullptr, y3.view.data, true, dm}, s,
                                  dcs[ci]);
            const TensorView y2v{y2.view.data, DType::kF32, Shape{dm, sh.n}, Device::kCuda};
            const double ed = rel_l2(be, y3.view, y2v);
            if (!(ed < 1e-2))
              std::printf("CHECK FAILED: %s m=%d %s vs dequantize path rel L2 %.3g\n", base.c_str(), dm,
                          cuda::to_string(dcs[ci]).c_str(), ed);
          }
        }
      }
      backend::DeviceTensor dense = be.allocate(DType::kBF16, Shape{sh.n, sh.k});  // bf16 comparison (one copy
      // would sit in L2 for o/qkv: rotate the dequantized copies of the quantized weights instead)
      std::vector<int> ms = dot_only ? std::vector<int>{1, 2, 3, 4, 8, 16}
                            : quick  ? std::vector<int>{1, 8, 16, 2048}
                                     : std::vector<int>{1, 2, 4, 8, 16, 32, 2048};
      for (int m : ms) {
        if (only_m > 0 && m != only_m) continue;
        auto x = be.allocate(DType::kBF16, Shape{m, sh.k});
        fill_bf16<<<256, 256, 0, s>>>(static_cast<__nv_bfloat16*>(x.view.data), static_cast<size_t>(x.view.numel()), 9);
        auto y = be.allocate(DType::kBF16, Shape{m, sh.n});
        const double io = static_cast<double>(x.view.bytes() + y.view.bytes());
        const std::string what = base + " m=" + std::to_string(m);
        if (fp8 && m <= 16) {  // our FP8 GEMV alone on e4m3 x (the quantization pre-pass not included)
          auto xq = be.allocate(DType::kFP8E4M3, Shape{m, sh.k});
          fill_bytes<<<256, 256, 0, s>>>(static_cast<uint8_t*>(xq.view.data), static_cast<size_t>(xq.view.numel()), 3, 126);
          auto xs = be.allocate(DType::kF32, Shape{m});
          fill_scales<<<1, 256, 0, s>>>(static_cast<float*>(xs.view.data), static_cast<size_t>(m), 4, 0.01f);
          XI_CUDA_CHECK_LAUNCH();
          const double fio = static_cast<double>(xq.view.bytes() + y.view.bytes());
          // also 16 rows per launch where compiled (2 CTAs per SM)
          const std::vector<cuda::QuantGemvConfig> fconfigs = with_tokens16(
              fp8_gemv_configs(), m, [](const cuda::QuantGemvConfig& c) { return c.ctas_per_sm == 2; });
          for (const cuda::QuantGemvConfig& c : fconfigs) {
            const double tc = graph_us(s, 20, [&](int i) {
              const backend::LinearWeights& lw = wi(i);
              cuda::launch_fp8_gemv({static_cast<const uint8_t*>(xq.view.data), static_cast<const float*>(xs.view.data),
                                     static_cast<const uint8_t*>(lw.weight.data), static_cast<const float*>(lw.scales.data),
                                     true, nullptr, y.view.data, false, m, sh.n, sh.k},
                                    s, c);
            });
            line(what + " fp8 gemv " + cuda::to_string(c), tc, static_cast<double>(qbytes) + fio, false, bw);
          }
          if (cuda::fp8_dot_gemv_supports(sh.n, sh.k, m)) {  // the CUDA-core FP8 GEMV, each compiled schedule
            int nc = 0;
            const cuda::DotGemvConfig* dcs = cuda::dot_gemv_configs(&nc);
            for (int ci = 0; ci < nc; ++ci) {
              cuda::DotGemvConfig dc = dcs[ci];
              dc.pdl = true;
              if (dc.smem_x && static_cast<size_t>(m) * sh.k * 2 > 48 * 1024) continue;
              const double tc = graph_us(s, 20, [&](int i) {
                const backend::LinearWeights& lw = wi(i);
                cuda::launch_fp8_dot_gemv({static_cast<const uint8_t*>(xq.view.data), static_cast<const float*>(xs.view.data),
                                           static_cast<const uint8_t*>(lw.weight.data),
                                           static_cast<const float*>(lw.scales.data), true, nullptr, y.view.data, false, m,
                                           sh.n, sh.k},
                                          s, dc);
              });
              line(what + " fp8 " + cuda::to_string(dc), tc, static_cast<double>(qbytes) + fio, false, bw);
            }
            // The same with the activation quantization fused (bf16 x in: the bytes of the unfused linear below).
            const cuda::DotGemvConfig fchosen = cuda::fp8_quant_dot_gemv_default_config(sh.n, sh.k, true);
            for (int ci = 0; ci < nc; ++ci) {
              cuda::DotGemvConfig dc = dcs[ci];
              dc.pdl = true;
              if (!cuda::fp8_quant_dot_gemv_supports(sh.n, sh.k, m, dc)) continue;
              const double tc = graph_us(s, 20, [&](int i) {
                const backend::LinearWeights& lw = wi(i);
                cuda::launch_fp8_quant_dot_gemv({static_cast<const __nv_bfloat16*>(x.view.data), nullptr,
                                                 static_cast<const uint8_t*>(lw.weight.data),
                                                 static_cast<const float*>(lw.scales.data), true, nullptr, y.view.data,
                                                 false, m, sh.n, sh.k},
                                                s, dc);
              });
              const bool is_default = dc.rows == fchosen.rows && dc.unroll == fchosen.unroll && dc.split == fchosen.split;
              line(what + " fp8 quantizing " + cuda::to_string(dc) + (is_default ? " *" : ""), tc,
                   static_cast<double>(qbytes) + io, false, bw);
            }
          }
        }
        if (fp8) {  // activation quantization + our FP8 GEMV (m <= 16) / cuBLASLt FP8 GEMM, through CudaBackend::linear
          be.linear(x.view, wi(0), y.view);  // grows the workspace before a recording
          const double t = m >= 2048 ? 1e6 * cuda::time_on_stream(s, 5, [&](int i) { be.linear(x.view, wi(i), y.view); })
                                     : graph_us(s, 20, [&](int i) { be.linear(x.view, wi(i), y.view); });
          if (m >= 2048) {
            line(what + " fp8 (vs the bf16 ceiling)", t, 2.0 * m * sh.n * sh.k, true, peak);
          } else {
            line(what + " fp8 linear (quantize x + gemv/gemm)", t, static_cast<double>(qbytes) + io, false, bw);
            if (m == 1) {
              const double roof = (static_cast<double>(qbytes) + io) / (bw * 1e9) * 1e6;
              char buf[256];
              std::snprintf(buf, sizeof(buf), "m=1 %-13s %-8s roofline %6.1f us (%6.1f MB): fp8 %6.1f us (%5.1f%%)",
                            qf.name, sh.name, roof, (static_cast<double>(qbytes) + io) / 1e6, t, 100 * roof / t);
              summary.push_back(buf);
              token_us[fi] += 32 * t;
              token_roof[fi] += 32 * roof;
            }
          }
          continue;
        }
        if (m <= 32) {
          double t = 1e30;
          const cuda::QuantGemvConfig chosen = cuda::quant_gemv_default_config(q0, true);
          // int8: also 16 rows per launch where compiled (the batch schedule at 2 CTAs per SM, plain)
          const std::vector<cuda::QuantGemvConfig> configs =
              q0.bits != 8 ? gemv_configs(m)
                           : with_tokens16(gemv_configs(m), m, [](const cuda::QuantGemvConfig& c) {
                               return c.stages == 0 && c.ctas_per_sm == 2 && !c.sum_x && !c.f16_x;
                             });
          for (const cuda::QuantGemvConfig& c : configs) {
            if (dot_only && !(c.stages == chosen.stages && c.ctas_per_sm == chosen.ctas_per_sm && c.wide == chosen.wide &&
                              c.f16_x == chosen.f16_x))
              continue;  // --quant-dot: the mma GEMV's default only (16 rows per launch or not)
            if (c.sum_x && q0.group_size % (q0.bits == 4 ? 128 : 64) != 0) continue;  // sum_x: unfolded scales
            if (c.f16_x && (q0.bits != 8 || q0.group_size % 64 != 0)) continue;    // f16_x: unfolded int8
            const double tc = graph_us(s, 20, [&](int i) {
              const cuda::QuantWeight q = be.quant_weight(wi(i));
              cuda::launch_quant_gemv({static_cast<const __nv_bfloat16*>(x.view.data), q, nullptr, y.view.data, false, m},
                                      s, c);
            });
            const bool is_default = c.stages == chosen.stages && c.ctas_per_sm == chosen.ctas_per_sm &&
                                    c.persistent == chosen.persistent && c.wide == chosen.wide &&
                                    c.sum_x == chosen.sum_x && c.f16_x == chosen.f16_x &&
                                    (c.tokens16 == chosen.tokens16 || m <= 8);
            line(what + " gemv " + cuda::to_string(c) + (is_default ? " *" : ""), tc, static_cast<double>(qbytes) + io,
                 false, bw);
            t = std::min(t, tc);
          }
          if (m <= cuda::kInt4DecodeGemvMaxRows &&
              cuda::int4_decode_gemv_supports(q0)) {  // the tensor-core int4 decode GEMV (linear()'s default)
            const cuda::Int4GemvSchedule chosen = cuda::int4_decode_gemv_default_schedule(q0, m);
            for (const int warps : {4, 8})
              for (const int form : {0, 1, 2}) {   // staged x, staged x + prefetch, direct x
                if (m > 1 && form != 2) continue;  // past m = 1 x is read directly, without prefetch
                const cuda::Int4GemvSchedule sched{warps, form == 1, form == 2 || m > 1};
                const double tc = graph_us(s, 20, [&](int i) {
                  const cuda::QuantWeight q = be.quant_weight(wi(i));
                  cuda::launch_int4_decode_gemv(
                      {static_cast<const __nv_bfloat16*>(x.view.data), q, nullptr, y.view.data, false, m}, s,
                      true, sched);
                });
                const bool is_default = sched.warps == chosen.warps && sched.prefetch == chosen.prefetch &&
                                        sched.direct_x == chosen.direct_x;
                line(what + " int4 tc " + cuda::to_string(sched) + " pdl" + (is_default ? " *" : ""), tc,
                     static_cast<double>(qbytes) + io, false, bw);
                t = std::min(t, tc);
              }
          }
          if (cuda::dot_gemv_supports(q0, m)) {  // the CUDA-core GEMV, each compiled schedule
            const cuda::DotGemvConfig dchosen = cuda::dot_gemv_default_config(q0, m, true);
            int nc = 0;
            const cuda::DotGemvConfig* dcs = cuda::dot_gemv_configs(&nc);
            for (int ci = 0; ci < nc; ++ci) {
              cuda::DotGemvConfig dc = dcs[ci];
              dc.pdl = true;
              if (!cuda::dot_gemv_config_fits(q0, m, dc)) continue;
              const double tc = graph_us(s, 20, [&](int i) {
                const cuda::QuantWeight q = be.quant_weight(wi(i));
                cuda::launch_dot_gemv({static_cast<const __nv_bfloat16*>(x.view.data), q, nullptr, y.view.data, false, m},
                                      s, dc);
              });
              const bool is_default = dc.rows == dchosen.rows && dc.unroll == dchosen.unroll &&
                                      dc.split == dchosen.split && dc.smem_x == dchosen.smem_x;
              line(what + " " + cuda::to_string(dc) + (is_default ? " dot*" : ""), tc,
                   static_cast<double>(qbytes) + io, false, bw);
              t = std::min(t, tc);
            }
          }
          if (m == 1) {
            const double roof = (static_cast<double>(qbytes) + io) / (bw * 1e9) * 1e6;
            char buf[256];
            std::snprintf(buf, sizeof(buf), "m=1 %-13s %-8s roofline %6.1f us (%6.1f MB): gemv %6.1f us (%5.1f%%)",
                          qf.name, sh.name, roof, (static_cast<double>(qbytes) + io) / 1e6, t, 100 * roof / t);
            summary.push_back(buf);
            const int per_token = 32;
            token_us[fi] += per_token * t;
            token_roof[fi] += per_token * roof;
          }
        }
        if (m >= 16) {
          const double t = 1e6 * cuda::time_on_stream(s, m >= 2048 ? 5 : 20, [&](int i) {
            const cuda::QuantWeight q = be.quant_weight(wi(i));
            cuda::launch_dequantize_weight(q, static_cast<__nv_bfloat16*>(dense.view.data), s);
            be.linear(x.view, {dense.view, {}}, y.view);
          });
          const double tg = 1e6 * cuda::time_on_stream(s, m >= 2048 ? 5 : 20, [&](int) {
            be.linear(x.view, {dense.view, {}}, y.view);
          });
          if (m >= 2048) {
            line(what + " dequant+gemm", t, 2.0 * m * sh.n * sh.k, true, peak);
            line(what + " bf16 gemm alone", tg, 2.0 * m * sh.n * sh.k, true, peak);
          } else {
            line(what + " dequant+gemm", t, static_cast<double>(qbytes) + io, false, bw);
          }
        }
      }
    }
  }
  for (size_t fi = 0; fi < formats.size(); ++fi)
    if (token_us[fi] > 0) {
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "%s batch-1 decode linears per token (32 layers, no lm_head): roofline %.2f ms, gemv %.2f ms (%.1f%%)",
                    formats[fi].name, token_roof[fi] * 1e-3, token_us[fi] * 1e-3, 100 * token_roof[fi] / token_us[fi]);
      summary.push_back(buf);
    }
  for (const std::string& l : summary) std::printf("%s\n", l.c_str());
  return summary;
}

// gpu_kernel_bench --wq-gemm: weight-only int4 / int8 linears past the GEMV's rows (m 17..2048) at the 8B
// shapes, the dequantize + bf16 GEMM path against the tiled GEMM that reads the quantized weight (wq_gemm.h),
// both through CudaBackend::linear (set_wq_gemm_max_rows), as CUDA-graph replays of 20 calls over rotating
// weight copies; the 16-row GEMV beside them. GB/s on the quantized bytes + x + y against the copy ceiling,
// and TFLOP/s against the bf16 GEMM ceiling. Checked first: the tiled GEMM against the dequantize path at m =
// 64 (relative L2 < 1e-2: the tiled GEMM scales exact integer sums where a step lies in one group, the
// dequantize path rounds each weight to bf16). Up to 256 rows, the tiled GEMM also
// launched directly with k in one range and in ranges of 1024 / 512 / 256 columns (linear()'s choice marked
// *), and the same linear with bf16 weights on cuBLASLt (what the quantized model competes with).
void bench_wq_gemm(cuda::CudaBackend& be, double bw, double peak) {
  cudaStream_t s = be.stream();
  be.wq_gemm_workspace();  // allocated before any recording
  const std::vector<QuantFormat> formats = {{"int4-g128", quant::IntGroupFormat{4, 128, false}},
                                            {"int4-g128-zp", quant::IntGroupFormat{4, 128, true}},
                                            {"int8-channel", quant::Int8ChannelFormat{}}};
  {
    std::vector<cuda::GemmShape> gs;
    for (const Linear8b& sh : kLinears8b) gs.push_back({sh.n, sh.k, false, false, 2048, false});
    cuda::GemmTunerOptions to;
    to.show_progress = false;
    std::printf("%s\n", be.gemm().tune(gs, to, s).to_string().c_str());
  }
  const int saved = be.wq_gemm_max_rows();
  const char* only = std::getenv("XINFER_BENCH_WQ");
  for (const QuantFormat& qf : formats)
    for (const Linear8b& sh : kLinears8b) {
      if (only != nullptr && (std::string(qf.name) + " " + sh.name).find(only) == std::string::npos) continue;
      QuantTensors first = make_weight(be, qf.format, sh.n, sh.k, 300);
      const size_t qbytes = be.quant_weight(first.lw).bytes();
      const int copies = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / qbytes, 1, 32));
      std::vector<QuantTensors> ws;
      ws.push_back(std::move(first));
      for (int c = 1; c < copies; ++c) ws.push_back(make_weight(be, qf.format, sh.n, sh.k, 300 + 7 * c));
      auto wi = [&](int i) -> const backend::LinearWeights& {
        return ws[static_cast<size_t>(i % copies)].lw;
      };
      const std::string base = std::string("wq ") + qf.name + " " + sh.name + " n=" + std::to_string(sh.n) +
                               " k=" + std::to_string(sh.k);
      {
        const int m = 64;
        auto x = be.allocate(DType::kBF16, Shape{m, sh.k});
        fill_bf16<<<256, 256, 0, s>>>(static_cast<__nv_bfloat16*>(x.view.data),
                                      static_cast<size_t>(x.view.numel()), 5);
        auto y1 = be.allocate(DType::kF32, Shape{m, sh.n});
        auto y2 = be.allocate(DType::kF32, Shape{m, sh.n});
        be.set_wq_gemm_max_rows(0);
        be.linear(x.view, wi(0), y1.view);
        be.set_wq_gemm_max_rows(4096);
        const int64_t before = be.quant_tiled_gemms();
        be.linear(x.view, wi(0), y2.view);
        const double e = rel_l2(be, y2.view, y1.view);
        std::printf("%s m=64: tiled GEMM vs dequantize path rel L2 %.3g%s\n", base.c_str(), e,
                    e < 1e-2 && be.quant_tiled_gemms() == before + 1 ? "" : "  CHECK FAILED");
      }
      // The same linear in bf16 (what the quantized model competes with): cuBLASLt's GEMM on bf16 weights,
      // rotated past L2 as the quantized ones are.
      const size_t bf16_bytes = static_cast<size_t>(sh.n) * sh.k * 2;
      const int bf16_copies = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / bf16_bytes, 2, 8));
      std::vector<backend::DeviceTensor> wb;
      for (int c = 0; c < bf16_copies; ++c) {
        wb.push_back(be.allocate(DType::kBF16, Shape{sh.n, sh.k}));
        fill_bf16<<<256, 256, 0, s>>>(static_cast<__nv_bfloat16*>(wb.back().view.data),
                                      static_cast<size_t>(sh.n) * sh.k, 11 + c);
      }
      for (int m : {16, 17, 32, 64, 128, 256, 512, 2048}) {
        auto x = be.allocate(DType::kBF16, Shape{m, sh.k});
        fill_bf16<<<256, 256, 0, s>>>(static_cast<__nv_bfloat16*>(x.view.data),
                                      static_cast<size_t>(x.view.numel()), 9);
        auto y = be.allocate(DType::kBF16, Shape{m, sh.n});
        const double bytes = static_cast<double>(qbytes + x.view.bytes() + y.view.bytes());
        const double flops = 2.0 * m * sh.n * sh.k;
        const std::string what = base + " m=" + std::to_string(m);
        const cuda::WqGemmKernel kernel = cuda::wq_gemm_kernel_for(be.quant_weight(wi(0)));
        for (const int rows : {0, 4096}) {
          if (m <= cuda::kQuantGemvMaxRows && rows > 0) continue;  // m <= 16: the GEMV either way
          be.set_wq_gemm_max_rows(rows);
          be.linear(x.view, wi(0), y.view);  // grows the dequantize workspace before a recording
          const double us = graph_us(s, 20, [&](int i) { be.linear(x.view, wi(i), y.view); });
          const std::string path =
              m <= cuda::kQuantGemvMaxRows ? " gemv"
              : rows > 0 ? (kernel == cuda::WqGemmKernel::kWgmma ? " tiled, wgmma kernel" : " tiled")
                         : " dequantize+gemm";
          if (m >= 256)
            line(what + path, us, flops, true, peak);
          else
            line(what + path, us, bytes, false, bw);
        }
        if (m > cuda::kQuantGemvMaxRows) {
          const double us = graph_us(s, 20, [&](int i) {
            be.gemm().run(
                {static_cast<const __nv_bfloat16*>(x.view.data),
                 static_cast<const __nv_bfloat16*>(wb[static_cast<size_t>(i % bf16_copies)].view.data),
                 nullptr, y.view.data, false, m, sh.n, sh.k},
                s);
          });
          if (m >= 256)
            line(what + " bf16 weights (cuBLASLt)", us, flops, true, peak);
          else
            line(what + " bf16 weights (cuBLASLt)", us,
                 static_cast<double>(bf16_bytes + x.view.bytes() + y.view.bytes()), false, bw);
        }
        if (m > cuda::kQuantGemvMaxRows &&
            kernel == cuda::WqGemmKernel::kWgmma) {  // the other kernel beside it
          const double us = graph_us(s, 20, [&](int i) {
            cuda::launch_wq_gemm({static_cast<const __nv_bfloat16*>(x.view.data), be.quant_weight(wi(i)),
                                  nullptr, y.view.data, false, m},
                                 be.wq_gemm_workspace(), s, 0, cuda::WqGemmKernel::kMma);
          });
          if (m >= 256)
            line(what + " tiled, mma.sync kernel", us, flops, true, peak);
          else
            line(what + " tiled, mma.sync kernel", us, bytes, false, bw);
        }
        if (m > cuda::kQuantGemvMaxRows && m <= 256) {  // each way of cutting k pinned (* linear()'s)
          const int chosen = cuda::wq_gemm_split_cols(m, sh.n, sh.k, be.num_sms(), kernel);
          const int64_t tiles = static_cast<int64_t>((m + cuda::kWqGemmTileM - 1) / cuda::kWqGemmTileM) *
                                ((sh.n + cuda::kWqGemmTileN - 1) / cuda::kWqGemmTileN);
          for (const int cols : {sh.k, 1024, 512, 256}) {
            if (tiles * ((sh.k + cols - 1) / cols) > cuda::kWqGemmMaxSplitSlices) continue;
            const double us = graph_us(s, 20, [&](int i) {
              cuda::launch_wq_gemm({static_cast<const __nv_bfloat16*>(x.view.data), be.quant_weight(wi(i)),
                                    nullptr, y.view.data, false, m},
                                   be.wq_gemm_workspace(), s, cols);
            });
            line(what + " tiled, k ranges of " + std::to_string(cols) + (cols == chosen ? " *" : ""), us,
                 bytes, false, bw);
          }
        }
      }
    }
  be.set_wq_gemm_max_rows(saved);
}

}  // namespace xinfer::bench
