// gpu_kernel_bench --prefill-layer: one Llama-3.1-8B decoder layer over a 2048-token prompt (one sequence,
// nothing cached), in bf16, W8A8-FP8 and W8A8-INT8 weights (random codes), timed op by op (eager launches, as
// prefill steps run) and as the model's forward chains them (add_rms_norm_linear, rope_paged_attention),
// against the GEMM FLOPs at the measured ceilings (the FP8 / INT8 dense peaks are twice bf16's). x32 is the
// layers' share of a 2048-token TTFT (plus the embedding, the final norm and one lm_head row): where the
// prefill's time goes, and what a fusion saves.
// gpu_kernel_bench --act-quant: the W8A8 activation quantization kernels alone (the SwiGLU with its codes,
// add_rms_norm with its codes, the bf16 rows' quantization) at the row counts of decode and prefill steps,
// their bytes against the copy ceiling.
// gpu_kernel_bench --rope-kv: rope_kv_write alone over prompts of 128 tokens, bf16 / FP8 / FP8 rotated KV.
// gpu_kernel_bench --decode-steps: the same for the large-batch decode steps of the throughput rows (eager,
// as steps past 256 rows run), the decode attention's KV reads against the copy ceiling; INT8 next to FP8 at
// 480 x 192.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gpu_bench_util.h"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"
#include "xinfer/backend/cuda/kernels/elementwise/silu_mul.h"
#include "xinfer/backend/cuda/kernels/norm/rms_norm.h"
#include "xinfer/backend/cuda/kernels/quant/quantize_activations.h"
#include "xinfer/backend/decode_graph_buckets.h"

namespace xinfer::bench {
namespace {

__global__ void fill_prefill(uint8_t* p, size_t n, uint32_t seed, int kind) {  // kind 0 bf16, 1 e4m3, 2 int8
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = hash32(static_cast<uint32_t>(i) * 2654435761u ^ seed);
    if (kind == 0) {
      reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 32768.0f - 1.0f) * 0.05f);
    } else if (kind == 1) {
      p[i] = static_cast<uint8_t>((h % 120) | (h & 0x80000000u ? 0x80 : 0));
    } else {
      p[i] = static_cast<uint8_t>(static_cast<int>(h % 255) - 127);
    }
  }
}

void fill_tensor(const TensorView& t, uint32_t seed, cudaStream_t s) {
  const int kind = t.dtype == DType::kBF16 ? 0 : t.dtype == DType::kFP8E4M3 ? 1 : 2;
  fill_prefill<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(t.data), static_cast<size_t>(t.numel()), seed, kind);
  XI_CUDA_CHECK_LAUNCH();
}

struct Weight {
  backend::DeviceTensor w, scales;
  backend::LinearWeights lw;
};

// kind 0: bf16, 1: W8A8-FP8 (per channel, dynamic per token), 2: W8A8-INT8 (the same).
Weight make_weight(cuda::CudaBackend& be, int kind, int n, int k, uint32_t seed) {
  Weight w;
  const DType dt = kind == 0 ? DType::kBF16 : kind == 1 ? DType::kFP8E4M3 : DType::kI8;
  w.w = be.allocate(dt, Shape{n, k});
  fill_tensor(w.w.view, seed, be.stream());
  w.lw.weight = w.w.view;
  if (kind == 0) return w;
  w.scales = be.allocate(DType::kF32, Shape{n});
  std::vector<float> host(static_cast<size_t>(n), 1e-3f);
  XI_CUDA_CHECK(cudaMemcpy(w.scales.view.data, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  w.lw.scales = w.scales.view;
  w.lw.k = k;
  if (kind == 1)
    w.lw.format = quant::W8A8Fp8Format{};
  else
    w.lw.format = quant::W8A8Int8Format{};
  return w;
}

// One step of one decoder layer: `seqs` sequences of `q_len` new tokens each, every one attending to `ctx`
// positions (the new ones included), the KV cache in kv_dtype, for the weight kinds listed (0 bf16, 1 FP8,
// 2 INT8).
struct LayerCase {
  std::string name;
  int seqs, q_len, ctx;
  DType kv_dtype;
  std::vector<int> kinds;
  // Decode steps as the engine runs them: padded to this many rows (its graph bucket) with padding decodes
  // (ModelRunner::padded_decode_plan: context 1, no KV write), the W8A8 GEMMs' choices measured at the
  // buckets up to it (CudaBackend::measure_w8a8_gemms and measure_fp8_gemms, as the engine does at start-up);
  // 0: `seqs` rows, choices as they come.
  int pad_to = 0;
};

// The step of `seqs` sequences of `q_len` new tokens each at context `ctx` (blocks of bs from block 1 on, one
// table per sequence), then decode rows of padding up to `pad_to` rows; *attended: the (query, key) pairs a
// causal attention scores.
backend::StepPlan make_step_plan(int seqs, int q_len, int ctx, int bs, double* attended, int pad_to = 0) {
  const int per_seq = (ctx + bs - 1) / bs;
  backend::StepPlan plan;
  plan.max_blocks_per_seq = per_seq;
  plan.query_start_loc = {0};
  *attended = 0;
  for (int q = 0; q < seqs; ++q) {
    for (int i = 0; i < per_seq; ++i) plan.block_tables.push_back(1 + q * per_seq + i);
    for (int t = ctx - q_len; t < ctx; ++t) {
      plan.token_ids.push_back(1);
      plan.positions.push_back(t);
      plan.slot_mapping.push_back((1 + q * per_seq + t / bs) * bs + t % bs);
      *attended += t + 1;
    }
    plan.query_start_loc.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.seq_lens.push_back(ctx);
  }
  for (int q = seqs; q < pad_to; ++q) {  // padding decodes (block 0, never written)
    plan.block_tables.resize(plan.block_tables.size() + static_cast<size_t>(per_seq), 0);
    plan.token_ids.push_back(0);
    plan.positions.push_back(0);
    plan.slot_mapping.push_back(-1);
    plan.query_start_loc.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.seq_lens.push_back(1);
  }
  plan.max_seq_len = ctx;
  return plan;
}

// The KV cache of `layers` layers for `blocks` blocks of 16; FP8 with the keys rotated, as the engine's
// `--kv-cache-dtype fp8` runs it (kv_cache_rotation auto), unless `rotate` is false.
backend::KvCache make_kv_cache(cuda::CudaBackend& be, int layers, int blocks, DType kv_dtype,
                               bool rotate = true) {
  backend::KvCacheSpec spec{layers, blocks, 16, 8, 128, kv_dtype};
  if (kv_dtype == DType::kFP8E4M3 && rotate) spec.k_rotation = backend::KvRotation::kHadamard;
  return be.allocate_kv_cache(spec);
}

// XINFER_BENCH_SUSTAIN_MS=N: besides the burst timings (a few milliseconds after idle gaps, at the boost
// clock), time every op and the chain back to back for N ms at a time, after N ms of the same work: the
// regime of the engine's long steps, which run at the board's power cap (docs/PERF.md session 31: 2048/128's
// mixed steps at ~1,455 MHz against the 1,980 MHz boost). 0 (unset): burst timings only.
int sustain_ms_from_env() {
  const char* v = std::getenv("XINFER_BENCH_SUSTAIN_MS");
  return v == nullptr ? 0 : std::max(0, std::atoi(v));
}

// Microseconds per call of op over runs of about `ms` milliseconds each (time_on_stream's median of 5), after
// `ms` milliseconds of warm-up calls.
double sustained_us(cudaStream_t s, int ms, const std::function<void(int)>& op) {
  const double burst_us = 1e6 * cuda::time_on_stream(s, 3, op);
  const int reps = std::max(3, static_cast<int>(ms * 1e3 / std::max(burst_us, 1.0)));
  for (int i = 0; i < reps; ++i) op(i);
  return 1e6 * cuda::time_on_stream(s, reps, op);
}

void bench_layer(cuda::CudaBackend& be, double peak, double bw, const LayerCase& c) {
  const int sustain_ms = sustain_ms_from_env();
  const int H = 4096, Hq = 32, Hkv = 8, D = 128, I = 14336, bs = 16, layers = 2;
  const int width = (Hq + 2 * Hkv) * D;
  const int T = (c.q_len == 1 ? std::max(c.seqs, c.pad_to) : c.seqs) * c.q_len;  // rows the GEMMs run
  cudaStream_t s = be.stream();
  const int per_seq = (c.ctx + bs - 1) / bs;
  backend::KvCache kv = make_kv_cache(be, layers, c.seqs * per_seq + 1, c.kv_dtype);
  double attended = 0;
  const backend::StepMeta meta =
      be.upload_step(make_step_plan(c.seqs, c.q_len, c.ctx, bs, &attended, c.q_len == 1 ? c.pad_to : 0));
  const double gemm_flops = 2.0 * T * H * (static_cast<double>(width) + H + 2.0 * I + I);
  const double attn_flops = 4.0 * D * Hq * attended;
  const double kv_bytes = 2.0 * c.seqs * static_cast<double>(c.ctx) * Hkv * D * static_cast<double>(dtype_bytes(c.kv_dtype, 1));

  auto act = [&](int64_t cols) { return be.allocate(DType::kBF16, Shape{T, cols}); };
  backend::DeviceTensor residual = act(H), delta = act(H), x = act(H), qkv = act(width), attn = act(Hq * D),
                        gu = act(2 * I), mlp = act(I);
  for (auto* t : {&residual, &delta, &x, &qkv, &attn, &gu, &mlp}) fill_tensor(t->view, 5, s);
  auto cos_sin = be.allocate(DType::kF32, Shape{c.ctx, D});
  XI_CUDA_CHECK(cudaMemset(cos_sin.view.data, 0, static_cast<size_t>(c.ctx) * D * 4));
  auto norm = be.allocate(DType::kBF16, Shape{H});
  {
    std::vector<uint16_t> ones(H, 0x3f80);  // bf16 1.0
    XI_CUDA_CHECK(cudaMemcpy(norm.view.data, ones.data(), ones.size() * 2, cudaMemcpyHostToDevice));
  }
  const float eps = 1e-5f, scale = 0.088f;
  std::printf("%s (Llama-3.1-8B layer, %d sequences x %d new tokens, context %d, %s KV): GEMM %.1f GFLOP + attention "
              "%.1f GFLOP, KV %.1f MB per layer\n",
              c.name.c_str(), c.seqs, c.q_len, c.ctx, dtype_name(c.kv_dtype), gemm_flops / 1e9, attn_flops / 1e9,
              kv_bytes / 1e6);
  const bool decode = c.q_len == 1;

  const char* kinds[] = {"bf16", "fp8", "int8"};
  for (const int kind : c.kinds) {
    const double gemm_peak = kind == 0 ? peak : 2 * peak;
    struct LayerW {
      Weight qkv, o, gate_up, down;
    };
    std::vector<LayerW> lw;
    for (int l = 0; l < layers; ++l)
      lw.push_back({make_weight(be, kind, width, H, 10 + l), make_weight(be, kind, H, Hq * D, 20 + l),
                    make_weight(be, kind, 2 * I, H, 30 + l), make_weight(be, kind, H, I, 40 + l)});
    auto W = [&](int l) -> LayerW& { return lw[static_cast<size_t>(l % layers)]; };
    auto cache = [&](int l) -> const backend::LayerKvCache& { return kv.layers[static_cast<size_t>(l % layers)]; };
    struct Op {
      std::string name;
      double flops;  // 0: a memory-bound op (time only)
      std::function<void(int)> fn;
    };
    const double f = 2.0 * T * H;
    const std::vector<Op> ops = {
        {"add_rms_norm", 0, [&](int) { be.add_rms_norm(residual.view, delta.view, norm.view, eps, x.view); }},
        {"linear qkv", f * width, [&](int l) { be.linear(x.view, W(l).qkv.lw, qkv.view); }},
        {"rope_kv_write", 0, [&](int l) { be.rope_kv_write(meta, qkv.view, Hq, Hkv, D, cos_sin.view, cache(l)); }},
        {decode ? "paged_attention (decode)" : "paged_attention (prefill, causal)", decode ? 0 : attn_flops,
         [&](int l) { be.paged_attention(meta, qkv.view, Hq, Hkv, D, scale, cache(l), attn.view); }},
        {"linear o", f * Hq * D, [&](int l) { be.linear(attn.view, W(l).o.lw, delta.view); }},
        {"add_rms_norm (2)", 0, [&](int) { be.add_rms_norm(residual.view, delta.view, norm.view, eps, x.view); }},
        {"linear gate_up", f * 2 * I, [&](int l) { be.linear(x.view, W(l).gate_up.lw, gu.view); }},
        {"silu_mul", 0, [&](int) { be.silu_mul(gu.view, mlp.view); }},
        {"linear down", f * I, [&](int l) { be.linear(mlp.view, W(l).down.lw, delta.view); }},
    };
    if (decode && kind == 1) {
      // The SwiGLU + FP8 codes kernel as the chain runs it (silu_mul.h): two-pass (bf16 out, read back), the row
      // in registers with bf16 out, and codes alone (the model's chain: act_out_unread).
      backend::DeviceTensor codes = be.allocate(DType::kU8, Shape{T, I}), scales = be.allocate(DType::kF32, Shape{T});
      struct Variant {
        const char* name;
        bool regs, out;
      };
      for (const Variant v : {Variant{"two-pass, bf16 out", false, true}, Variant{"in registers, bf16 out", true, true},
                              Variant{"in registers, codes alone", true, false}}) {
        const cuda::SiluMulArgs a{static_cast<const __nv_bfloat16*>(gu.view.data),
                                  v.out ? static_cast<__nv_bfloat16*>(mlp.view.data) : nullptr, T, I,
                                  cuda::RowQuant::kFp8, static_cast<uint8_t*>(codes.view.data),
                                  static_cast<float*>(scales.view.data), nullptr, v.regs};
        cuda::launch_silu_mul(a, s);
        const double us = 1e6 * cuda::time_on_stream(s, 10, [&](int) { cuda::launch_silu_mul(a, s); });
        const double bytes = static_cast<double>(T) * I * (4.0 + 1.0 + (v.out ? 2.0 : 0.0));
        print_row(c.name + " fp8: silu_mul -> fp8 codes, " + v.name, us, bytes, false, bw, 56);
      }
    }
    // The engine's measured W8A8 choices at the buckets up to the step's rows, in engine.cpp's order:
    // cuBLASLt's algorithms, then our FP8 GEMM against them.
    if (c.pad_to > 0 && kind != 0) {
      const std::vector<const backend::LinearWeights*> linears = {&W(0).qkv.lw, &W(0).o.lw, &W(0).gate_up.lw,
                                                                  &W(0).down.lw};
      be.measure_w8a8_gemms(linears, c.pad_to);
      be.measure_fp8_gemms(linears, c.pad_to);
    }
    for (const Op& op : ops) op.fn(0);  // workspaces and the tuner's choices before timing
    be.synchronize();
    double sum = 0;
    for (const Op& op : ops) {
      const double us = 1e6 * cuda::time_on_stream(s, 10, [&](int i) { op.fn(i); });
      sum += us;
      const std::string what = c.name + " " + kinds[kind] + ": " + op.name;
      if (op.flops > 0)
        print_row(what, us, op.flops, true, op.name.rfind("linear", 0) == 0 ? gemm_peak : peak, 56);
      else if (decode && op.name.rfind("paged_attention", 0) == 0)
        print_row(what, us, kv_bytes, false, bw, 56);  // the KV reads against the copy ceiling
      else
        std::printf("%-56s %9.1f us\n", what.c_str(), us);
    }
    // The forward's chain (llama.cpp forward(): the norms inside add_rms_norm_linear, RoPE inside
    // rope_paged_attention), one layer per call, alternating the layers' weights.
    auto chain = [&](int l) {
      be.rope_paged_attention(meta, qkv.view, Hq, Hkv, D, cos_sin.view, scale, cache(l), attn.view);
      be.add_rms_norm_linear({residual.view, delta.view, norm.view, eps, W(l).gate_up.lw, x.view, gu.view, mlp.view,
                              attn.view, W(l).o.lw, &W(l).down.lw, /*act_out_unread=*/true});
      be.add_rms_norm_linear({residual.view, delta.view, norm.view, eps, W(l + 1).qkv.lw, x.view, qkv.view, {}, mlp.view,
                              W(l).down.lw});
    };
    chain(0);
    be.synchronize();
    const double chained = 1e6 * cuda::time_on_stream(s, 10, [&](int i) { chain(i); });
    if (sustain_ms > 0) {  // under the board's power cap (see sustained_us), each op and the chain
      for (const Op& op : ops)
        std::printf("%-56s %9.1f us sustained\n", (c.name + " " + kinds[kind] + ": " + op.name).c_str(),
                    sustained_us(s, sustain_ms, op.fn));
      const double held = sustained_us(s, sustain_ms, chain);
      std::printf(
          "%s %s: the forward's chain sustained for %d ms at a time: %.1f us (%.3f x its burst timing)\n",
          c.name.c_str(), kinds[kind], sustain_ms, held, held / chained);
    }
    const double roof = 1e6 * (gemm_flops / (gemm_peak * 1e12) + attn_flops / (peak * 1e12));
    std::printf("%s %s: sum of the ops %.1f us, the forward's chain %.1f us (x32 = %.2f ms); FLOP roofline "
                "%.1f us at %.0f / %.0f TFLOP/s (%.1f%%)\n",
                c.name.c_str(), kinds[kind], sum, chained, 32 * chained / 1e3, roof, gemm_peak, peak, 100 * roof / chained);
    std::fflush(stdout);
  }
}

}  // namespace

void bench_act_quant(cuda::CudaBackend& be, double bw) {
  const int H = 4096, I = 14336, max_rows = 12288;
  cudaStream_t s = be.stream();
  backend::DeviceTensor gu = be.allocate(DType::kBF16, Shape{max_rows, 2 * I}),
                        mlp = be.allocate(DType::kBF16, Shape{max_rows, I}),
                        residual = be.allocate(DType::kBF16, Shape{max_rows, H}),
                        delta = be.allocate(DType::kBF16, Shape{max_rows, H}),
                        norm = be.allocate(DType::kBF16, Shape{H}),
                        codes = be.allocate(DType::kU8, Shape{max_rows, I}),
                        scales = be.allocate(DType::kF32, Shape{max_rows});
  for (auto* t : {&gu, &mlp, &residual, &delta, &norm}) fill_tensor(t->view, 11, s);
  auto* q = static_cast<uint8_t*>(codes.view.data);
  auto* qs = static_cast<float*>(scales.view.data);
  auto bf = [](const backend::DeviceTensor& t) { return static_cast<__nv_bfloat16*>(t.view.data); };
  for (const int rows : {1, 64, 256, 954, 2048, 12288}) {
    const std::string r = "act quant " + std::to_string(rows) + " rows: ";
    const double n_i = static_cast<double>(rows) * I, n_h = static_cast<double>(rows) * H;
    for (const cuda::RowQuant kind : {cuda::RowQuant::kFp8, cuda::RowQuant::kInt8}) {
      const std::string k = kind == cuda::RowQuant::kFp8 ? "fp8" : "int8";
      const cuda::SiluMulArgs a{bf(gu), nullptr, rows, I, kind, q, qs, nullptr, true};
      print_row(r + "silu_mul -> " + k + " codes alone (I 14336)",
                graph_us(s, 10, [&](int) { cuda::launch_silu_mul(a, s); }), n_i * 5, false, bw, 64);
      const cuda::RmsNormArgs n{bf(residual), bf(delta), bf(norm), nullptr, rows,   H,
                                1e-5f,        kind,      q,        qs,      nullptr};
      print_row(r + "add_rms_norm -> " + k + " codes (H 4096, delta)",
                graph_us(s, 10, [&](int) { cuda::launch_add_rms_norm(n, s); }), n_h * 7, false, bw, 64);
      print_row(r + "quantize rows -> " + k + " (k 4096)",
                graph_us(s, 10,
                         [&](int) {
                           if (kind == cuda::RowQuant::kFp8)
                             cuda::launch_quantize_fp8_rows(bf(delta), rows, H, nullptr, q, qs, s);
                           else
                             cuda::launch_quantize_int8_rows(bf(delta), rows, H, nullptr,
                                                             reinterpret_cast<int8_t*>(q), qs, s);
                         }),
                n_h * 3, false, bw, 64);
    }
    const cuda::SiluMulArgs plain{bf(gu), bf(mlp), rows, I};
    print_row(r + "silu_mul -> bf16 (I 14336)",
              graph_us(s, 10, [&](int) { cuda::launch_silu_mul(plain, s); }), n_i * 6, false, bw, 64);
  }
}

void bench_rope_kv(cuda::CudaBackend& be, double bw) {
  const int Hq = 32, Hkv = 8, D = 128, width = (Hq + 2 * Hkv) * D, q_len = 128;
  cudaStream_t s = be.stream();
  // XINFER_BENCH_ROPE_TOKENS=N: that token count alone (one kernel for a profiler).
  const char* only = std::getenv("XINFER_BENCH_ROPE_TOKENS");
  for (const int tokens : {1024, 2048, 12288}) {
    if (only != nullptr && std::atoi(only) != tokens) continue;
    // Prompts of 128 tokens (a 128/128 mixed step's shape); qkv larger than L2 at 12288 tokens.
    const int seqs = tokens / q_len;
    double attended = 0;
    const backend::StepMeta meta = be.upload_step(make_step_plan(seqs, q_len, q_len, 16, &attended));
    backend::DeviceTensor qkv = be.allocate(DType::kBF16, Shape{tokens, width});
    fill_tensor(qkv.view, 3, s);
    auto cos_sin = be.allocate(DType::kF32, Shape{q_len, D});
    XI_CUDA_CHECK(cudaMemset(cos_sin.view.data, 0, static_cast<size_t>(q_len) * D * 4));
    struct Kind {
      const char* name;
      DType dtype;
      bool rotate;
    };
    for (const Kind k : {Kind{"bf16 KV", DType::kBF16, false}, Kind{"fp8 KV", DType::kFP8E4M3, false},
                         Kind{"fp8 KV, keys rotated", DType::kFP8E4M3, true}}) {
      backend::KvCache kv = make_kv_cache(be, 1, seqs * (q_len / 16) + 1, k.dtype, k.rotate);
      // qkv read, q and k written back, K and V into the cache.
      const double bytes = static_cast<double>(tokens) *
                           (2.0 * width + 2.0 * (Hq + Hkv) * D + 2.0 * Hkv * D * dtype_bytes(k.dtype, 1));
      print_row(
          "rope_kv_write " + std::to_string(tokens) + " tokens, " + k.name,
          graph_us(s, 10,
                   [&](int) { be.rope_kv_write(meta, qkv.view, Hq, Hkv, D, cos_sin.view, kv.layers[0]); }),
          bytes, false, bw, 56);
    }
  }
}

namespace {
// "AxB" (an environment setting such as 857x1100) as {A, B}; 0 for a missing or unparsable part.
std::pair<int, int> parse_a_x_b(const std::string& s) {
  const size_t x = s.find('x');
  return {std::atoi(s.c_str()), x == std::string::npos ? 0 : std::atoi(s.c_str() + x + 1)};
}
}  // namespace

void bench_prefill_layer(cuda::CudaBackend& be, double peak, double bw) {
  // XINFER_BENCH_PREFILL=SEQSxTOKENS (e.g. 7x2048, the prompts of a 2048/128 mixed step): that step alone,
  // FP8 weights over an FP8 KV cache.
  if (const char* only = std::getenv("XINFER_BENCH_PREFILL"); only != nullptr) {
    const std::string s = only;
    const auto [seqs, tokens] = parse_a_x_b(s);
    XI_CHECK(seqs > 0 && tokens > 0) << "XINFER_BENCH_PREFILL=" << s << ": SEQSxTOKENS, both positive";
    bench_layer(be, peak, bw, {"prefill " + s + " fp8kv", seqs, tokens, tokens, DType::kFP8E4M3, {1}});
    return;
  }
  bench_layer(be, peak, bw, {"prefill layer", 1, 2048, 2048, DType::kBF16, {0, 1, 2}});
  // The prompts of a 128/128 mixed step (~12k tokens of 128-token prompts; docs/PERF.md session 22), FP8.
  bench_layer(be, peak, bw, {"prefill 96x128 fp8kv", 96, 128, 128, DType::kFP8E4M3, {1}});
}

// The decode steps of the throughput rows (docs/PERF.md session 12): 128/128 x 1000 prompts (~480 rows at a mean
// context of ~192), 2048/2048 x 256 (~250 rows at ~3,072) and 128/2048 x 1000 (~857 rows at ~1,100), FP8 weights.
void bench_decode_steps(cuda::CudaBackend& be, double peak, double bw) {
  // XINFER_BENCH_DECODE_STEP=ROWSxCTX (e.g. 857x1100): that step alone as the engine runs it (rows padded to
  // the decode graph bucket, measured FP8 GEMM choices): its layer, and its lm_head + argmax at the bucket's
  // rows.
  const char* only_env = std::getenv("XINFER_BENCH_DECODE_STEP");
  const std::string only = only_env != nullptr ? only_env : "";
  const auto [only_rows, only_ctx] = parse_a_x_b(only);
  XI_CHECK(only.empty() || (only_rows > 0 && only.find('x') != std::string::npos &&
                            backend::decode_graph_bucket(only_rows) > 0))
      << "XINFER_BENCH_DECODE_STEP=" << only
      << ": ROWSxCTX with 1 <= ROWS <= " << backend::kMaxDecodeGraphRows;
  const int only_bucket = only.empty() ? 0 : backend::decode_graph_bucket(only_rows);
  // The step's tail: the bf16 lm_head into f32 logits, then the greedy argmax, at each row count below.
  for (const int rows : {245, 411, 480, 954, only_bucket}) {
    if (only.empty() ? rows == 0 : rows != only_bucket) continue;
    const int V = 128256, H = 4096;
    Weight head = make_weight(be, 0, V, H, 77);
    backend::DeviceTensor x = be.allocate(DType::kBF16, Shape{rows, H});
    backend::DeviceTensor logits = be.allocate(DType::kF32, Shape{rows, V});
    backend::DeviceTensor ids = be.allocate(DType::kI32, Shape{rows});
    fill_tensor(x.view, 3, be.stream());
    be.linear(x.view, head.lw, logits.view);
    be.synchronize();
    const double lm =
        1e6 * cuda::time_on_stream(be.stream(), 10, [&](int) { be.linear(x.view, head.lw, logits.view); });
    print_row("decode " + std::to_string(rows) + " rows: lm_head bf16 -> f32", lm, 2.0 * rows * V * H, true, peak, 56);
    const double am = 1e6 * cuda::time_on_stream(be.stream(), 10, [&](int) { be.argmax_rows(logits.view, ids.view); });
    print_row("decode " + std::to_string(rows) + " rows: argmax_rows (f32 logits)", am, 4.0 * rows * V, false, bw, 56);
  }
  if (!only.empty()) {  // as the engine runs it: padded to its graph bucket, measured FP8 GEMM choices
    const int bucket = backend::decode_graph_bucket(only_rows);
    bench_layer(be, peak, bw,
                {"decode " + only + " fp8kv (rows padded to " + std::to_string(bucket) + ")",
                 only_rows,
                 1,
                 only_ctx,
                 DType::kFP8E4M3,
                 {1},
                 bucket});
    return;
  }
  bench_layer(be, peak, bw, {"decode 954x192 fp8kv", 954, 1, 192, DType::kFP8E4M3, {1}});
  bench_layer(be, peak, bw, {"decode 480x192", 480, 1, 192, DType::kBF16, {0, 1}});
  bench_layer(be, peak, bw, {"decode 480x192 fp8kv", 480, 1, 192, DType::kFP8E4M3, {1, 2}});
  bench_layer(be, peak, bw, {"decode 256x3072 fp8kv", 256, 1, 3072, DType::kFP8E4M3, {1}});
  bench_layer(be, peak, bw, {"decode 857x1100 fp8kv", 857, 1, 1100, DType::kFP8E4M3, {1}});
  // The decode-only steps of 2048/128 (~245 rows, contexts 2048..2176), 2048/2048 (~411 rows, 2048..4096).
  bench_layer(be, peak, bw, {"decode 245x2112 fp8kv", 245, 1, 2112, DType::kFP8E4M3, {1}});
  bench_layer(be, peak, bw, {"decode 411x3072 fp8kv", 411, 1, 3072, DType::kFP8E4M3, {1}});
}

}  // namespace xinfer::bench
