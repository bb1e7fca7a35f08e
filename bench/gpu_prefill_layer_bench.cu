// gpu_kernel_bench --prefill-layer: one Llama-3.1-8B decoder layer over a 2048-token prompt (one sequence,
// nothing cached), in bf16, W8A8-FP8 and W8A8-INT8 weights (random codes), timed op by op (eager launches, as
// prefill steps run) and as the model's forward chains them (add_rms_norm_linear, rope_paged_attention),
// against the GEMM FLOPs at the measured ceilings (the FP8 / INT8 dense peaks are twice bf16's). x32 is the
// layers' share of a 2048-token TTFT (plus the embedding, the final norm and one lm_head row): where the
// prefill's time goes, and what a fusion saves.
// gpu_kernel_bench --decode-steps: the same for the large-batch decode steps of the throughput rows (eager, as
// steps past 256 rows run), the decode attention's KV reads against the copy ceiling; INT8 next to FP8 at 480 x 192.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "gpu_bench_util.h"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"
#include "xinfer/backend/cuda/kernels/elementwise/silu_mul.h"

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
};

void bench_layer(cuda::CudaBackend& be, double peak, double bw, const LayerCase& c) {
  const int H = 4096, Hq = 32, Hkv = 8, D = 128, I = 14336, bs = 16, layers = 2;
  const int width = (Hq + 2 * Hkv) * D;
  const int T = c.seqs * c.q_len;
  cudaStream_t s = be.stream();
  const int per_seq = (c.ctx + bs - 1) / bs;
  const int blocks = c.seqs * per_seq;
  backend::KvCache kv = be.allocate_kv_cache({layers, blocks + 1, bs, Hkv, D, c.kv_dtype});
  backend::StepPlan plan;
  plan.max_blocks_per_seq = per_seq;
  plan.query_start_loc = {0};
  double attended = 0;
  for (int q = 0; q < c.seqs; ++q) {
    for (int i = 0; i < per_seq; ++i) plan.block_tables.push_back(1 + q * per_seq + i);
    for (int t = c.ctx - c.q_len; t < c.ctx; ++t) {
      plan.token_ids.push_back(1);
      plan.positions.push_back(t);
      plan.slot_mapping.push_back((1 + q * per_seq + t / bs) * bs + t % bs);
      attended += t + 1;
    }
    plan.query_start_loc.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.seq_lens.push_back(c.ctx);
  }
  plan.max_seq_len = c.ctx;
  const backend::StepMeta meta = be.upload_step(plan);
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
    const double roof = 1e6 * (gemm_flops / (gemm_peak * 1e12) + attn_flops / (peak * 1e12));
    std::printf("%s %s: sum of the ops %.1f us, the forward's chain %.1f us (x32 = %.2f ms); FLOP roofline "
                "%.1f us at %.0f / %.0f TFLOP/s (%.1f%%)\n",
                c.name.c_str(), kinds[kind], sum, chained, 32 * chained / 1e3, roof, gemm_peak, peak, 100 * roof / chained);
    std::fflush(stdout);
  }
}

}  // namespace

void bench_prefill_layer(cuda::CudaBackend& be, double peak, double bw) {
  bench_layer(be, peak, bw, {"prefill layer", 1, 2048, 2048, DType::kBF16, {0, 1, 2}});
}

// The decode steps of the throughput rows (docs/PERF.md session 12): 128/128 x 1000 prompts (~480 rows at a mean
// context of ~192), 2048/2048 x 256 (~250 rows at ~3,072) and 128/2048 x 1000 (~857 rows at ~1,100), FP8 weights.
void bench_decode_steps(cuda::CudaBackend& be, double peak, double bw) {
  // The step's tail: the bf16 lm_head into f32 logits, then the greedy argmax, at each row count below.
  for (const int rows : {245, 411, 480, 954}) {
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
  bench_layer(be, peak, bw, {"decode 954x192 fp8kv", 954, 1, 192, DType::kFP8E4M3, {1}});
  bench_layer(be, peak, bw, {"decode 480x192", 480, 1, 192, DType::kBF16, {0, 1}});
  bench_layer(be, peak, bw, {"decode 480x192 fp8kv", 480, 1, 192, DType::kFP8E4M3, {1, 2}});
  bench_layer(be, peak, bw, {"decode 256x3072 fp8kv", 256, 1, 3072, DType::kFP8E4M3, {1}});
  bench_layer(be, peak, bw, {"decode 857x1100 fp8kv", 857, 1, 1100, DType::kFP8E4M3, {1}});
  // The decode-only steps of 2048/128 (~245 rows, contexts 2048..2176), 2048/2048 (~411 rows, 2048..4096).
  bench_layer(be, peak, bw, {"decode 245x2112 fp8kv", 245, 1, 2112, DType::kFP8E4M3, {1}});
  bench_layer(be, peak, bw, {"decode 411x3072 fp8kv", 411, 1, 3072, DType::kFP8E4M3, {1}});
}

namespace {

// gpu_kernel_bench --decode-overlap: the decode step's attention (KV-bandwidth bound) run beside the other half
// of the batch's GEMMs (FLOP bound) on a second stream, as NanoFlow's nano-batches do. Two lanes, each a
// backend of its own (stream, step metadata, workspaces) with half the sequences; the weights and the KV
// cache are shared. A lane's layer is A (rope_paged_attention) then G (o, norm, gate_up, SwiGLU, down, norm,
// the next layer's qkv: the forward's two add_rms_norm_linear calls). Variants, us per layer: all rows on one
// stream (the engine today); the two halves in turn on one stream (what halving the GEMMs costs); the two lanes
// free-running on two streams; the two lanes alternating (lane 1's A(l) starts when lane 0's A(l) ends, lane
// 0's A(l + 1) when lane 1's A(l) ends, so each attention runs beside the other lane's G); and the last with
// the FP8 GEMMs planned for fewer SMs (CudaBackendOptions::fp8_gemm_sm_count) so the attention keeps some.
struct OverlapLane {
  std::unique_ptr<cuda::CudaBackend> be;
  backend::StepMeta meta;
  backend::DeviceTensor residual, delta, x, qkv, attn, gu, mlp, cos_sin, norm;
  int rows = 0;
};

void bench_overlap_case(const std::string& name, int seqs, int ctx, double bw) {
  const int H = 4096, Hq = 32, Hkv = 8, D = 128, I = 14336, bs = 16, layers = 2, steps = 8;
  const int width = (Hq + 2 * Hkv) * D;
  const float eps = 1e-5f, scale = 0.088f;
  const int per_seq = (ctx + bs - 1) / bs;
  cuda::CudaBackend owner;  // the weights and the KV cache
  backend::KvCache kv = owner.allocate_kv_cache({layers, seqs * per_seq + 1, bs, Hkv, D, DType::kFP8E4M3});
  struct LayerW {
    Weight qkv, o, gate_up, down;
  };
  std::vector<LayerW> lw;
  for (int l = 0; l < layers; ++l)
    lw.push_back({make_weight(owner, 1, width, H, 10 + l), make_weight(owner, 1, H, Hq * D, 20 + l),
                  make_weight(owner, 1, 2 * I, H, 30 + l), make_weight(owner, 1, H, I, 40 + l)});
  owner.synchronize();
  auto W = [&](int l) -> LayerW& { return lw[static_cast<size_t>(l % layers)]; };
  auto cache = [&](int l) -> const backend::LayerKvCache& { return kv.layers[static_cast<size_t>(l % layers)]; };

  auto make_lane = [&](int first, int count, int sm_count) {
    OverlapLane lane;
    cuda::CudaBackendOptions o;
    o.gemm_tuning = false;
    o.fp8_gemm_sm_count = sm_count;
    lane.be = std::make_unique<cuda::CudaBackend>(o);
    cuda::CudaBackend& be = *lane.be;
    backend::StepPlan plan;
    plan.max_blocks_per_seq = per_seq;
    plan.query_start_loc = {0};
    for (int q = first; q < first + count; ++q) {
      for (int i = 0; i < per_seq; ++i) plan.block_tables.push_back(1 + q * per_seq + i);
      const int t = ctx - 1;
      plan.token_ids.push_back(1);
      plan.positions.push_back(t);
      plan.slot_mapping.push_back((1 + q * per_seq + t / bs) * bs + t % bs);
      plan.query_start_loc.push_back(static_cast<int32_t>(plan.token_ids.size()));
      plan.seq_lens.push_back(ctx);
    }
    plan.max_seq_len = ctx;
    lane.meta = be.upload_step(plan);
    lane.rows = count;
    auto act = [&](int64_t cols) { return be.allocate(DType::kBF16, Shape{count, cols}); };
    lane.residual = act(H), lane.delta = act(H), lane.x = act(H), lane.qkv = act(width), lane.attn = act(Hq * D),
    lane.gu = act(2 * I), lane.mlp = act(I);
    for (auto* t : {&lane.residual, &lane.delta, &lane.x, &lane.qkv, &lane.attn, &lane.gu, &lane.mlp})
      fill_tensor(t->view, 5, be.stream());
    lane.cos_sin = be.allocate(DType::kF32, Shape{ctx, D});
    XI_CUDA_CHECK(cudaMemset(lane.cos_sin.view.data, 0, static_cast<size_t>(ctx) * D * 4));
    lane.norm = be.allocate(DType::kBF16, Shape{H});
    std::vector<uint16_t> ones(H, 0x3f80);  // bf16 1.0
    XI_CUDA_CHECK(cudaMemcpy(lane.norm.view.data, ones.data(), ones.size() * 2, cudaMemcpyHostToDevice));
    return lane;
  };
  auto attention = [&](OverlapLane& n, int l) {
    n.be->rope_paged_attention(n.meta, n.qkv.view, Hq, Hkv, D, n.cos_sin.view, scale, cache(l), n.attn.view);
  };
  auto gemms = [&](OverlapLane& n, int l) {
    n.be->add_rms_norm_linear({n.residual.view, n.delta.view, n.norm.view, eps, W(l).gate_up.lw, n.x.view, n.gu.view,
                               n.mlp.view, n.attn.view, W(l).o.lw, &W(l).down.lw, /*act_out_unread=*/true});
    n.be->add_rms_norm_linear({n.residual.view, n.delta.view, n.norm.view, eps, W(l + 1).qkv.lw, n.x.view, n.qkv.view,
                               {}, n.mlp.view, W(l).down.lw});
  };
  // us per layer of `body` (which issues `steps` layers on the lanes' streams, forked from and joined to lane 0's),
  // the median of 5 timed runs after 2 warm-up runs.
  cudaEvent_t start, stop, fork, join;
  for (cudaEvent_t* e : {&start, &stop, &fork, &join}) XI_CUDA_CHECK(cudaEventCreate(e));
  auto time_layers = [&](std::vector<OverlapLane*> lanes, const std::function<void()>& body) {
    cudaStream_t s0 = lanes[0]->be->stream();
    std::vector<double> runs;
    for (int r = 0; r < 7; ++r) {
      XI_CUDA_CHECK(cudaEventRecord(start, s0));
      for (size_t i = 1; i < lanes.size(); ++i) XI_CUDA_CHECK(cudaStreamWaitEvent(lanes[i]->be->stream(), start));
      body();
      for (size_t i = 1; i < lanes.size(); ++i) {
        XI_CUDA_CHECK(cudaEventRecord(join, lanes[i]->be->stream()));
        XI_CUDA_CHECK(cudaStreamWaitEvent(s0, join));
      }
      XI_CUDA_CHECK(cudaEventRecord(stop, s0));
      XI_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      XI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (r >= 2) runs.push_back(1e3 * ms / steps);
    }
    std::sort(runs.begin(), runs.end());
    return runs[runs.size() / 2];
  };
  const double kv_bytes = 2.0 * seqs * static_cast<double>(ctx) * Hkv * D;
  const double gemm_flops = 2.0 * seqs * H * (static_cast<double>(width) + H + 2.0 * I + I);
  std::printf("%s (Llama-3.1-8B FP8 layer, FP8 KV, %d decodes at context %d): KV %.1f MB, GEMM %.1f GFLOP per layer\n",
              name.c_str(), seqs, ctx, kv_bytes / 1e6, gemm_flops / 1e9);

  OverlapLane all = make_lane(0, seqs, 0);
  const double a_all = time_layers({&all}, [&] { for (int l = 0; l < steps; ++l) attention(all, l); });
  const double g_all = time_layers({&all}, [&] { for (int l = 0; l < steps; ++l) gemms(all, l); });
  const double one = time_layers({&all}, [&] {
    for (int l = 0; l < steps; ++l) {
      attention(all, l);
      gemms(all, l);
    }
  });
  std::printf("%s: one stream, all rows: A %.1f us (%.1f%% of the copy ceiling) + G %.1f us; the layer %.1f us\n",
              name.c_str(), a_all, 100 * kv_bytes / (a_all * 1e-6) / 1e9 / bw, g_all, one);
  for (const int sm : {0, 120, 112, 100, 88}) {
    const int half = seqs / 2;
    OverlapLane l0 = make_lane(0, half, sm), l1 = make_lane(half, seqs - half, sm);
    const double a_half = time_layers({&l0}, [&] { for (int l = 0; l < steps; ++l) attention(l0, l); });
    const double g_half = time_layers({&l0}, [&] { for (int l = 0; l < steps; ++l) gemms(l0, l); });
    const double turns = time_layers({&l0, &l1}, [&] {
      for (int l = 0; l < steps; ++l) {
        attention(l0, l);
        gemms(l0, l);
        XI_CUDA_CHECK(cudaEventRecord(fork, l0.be->stream()));  // lane 1 after lane 0: one stream's order
        XI_CUDA_CHECK(cudaStreamWaitEvent(l1.be->stream(), fork));
        attention(l1, l);
        gemms(l1, l);
        XI_CUDA_CHECK(cudaEventRecord(fork, l1.be->stream()));
        XI_CUDA_CHECK(cudaStreamWaitEvent(l0.be->stream(), fork));
      }
    });
    const double free_run = time_layers({&l0, &l1}, [&] {
      for (int l = 0; l < steps; ++l) {
        attention(l0, l);
        gemms(l0, l);
        attention(l1, l);
        gemms(l1, l);
      }
    });
    cudaEvent_t a0, a1;
    XI_CUDA_CHECK(cudaEventCreateWithFlags(&a0, cudaEventDisableTiming));
    XI_CUDA_CHECK(cudaEventCreateWithFlags(&a1, cudaEventDisableTiming));
    const double alternating = time_layers({&l0, &l1}, [&] {
      for (int l = 0; l < steps; ++l) {
        if (l > 0) XI_CUDA_CHECK(cudaStreamWaitEvent(l0.be->stream(), a1));
        attention(l0, l);
        XI_CUDA_CHECK(cudaEventRecord(a0, l0.be->stream()));
        XI_CUDA_CHECK(cudaStreamWaitEvent(l1.be->stream(), a0));
        attention(l1, l);
        XI_CUDA_CHECK(cudaEventRecord(a1, l1.be->stream()));
        gemms(l0, l);
        gemms(l1, l);
      }
    });
    cudaEventDestroy(a0);
    cudaEventDestroy(a1);
    std::printf("%s, halves of %d rows, FP8 GEMMs on %s SMs: A %.1f + G %.1f us per half; the layer: halves in turn "
                "%.1f, two streams free %.1f, alternating %.1f us (%.3fx the one-stream layer; ideal max(2A, 2G) %.1f)\n",
                name.c_str(), half, sm == 0 ? "all" : std::to_string(sm).c_str(), a_half, g_half, turns, free_run,
                alternating, one / alternating, 2 * std::max(a_half, g_half));
  }
  for (cudaEvent_t e : {start, stop, fork, join}) cudaEventDestroy(e);
}

}  // namespace

void bench_decode_overlap(double bw) {
  bench_overlap_case("overlap 857x1100", 857, 1100, bw);  // 128/2048's decode steps
  bench_overlap_case("overlap 411x3072", 411, 3072, bw);  // 2048/2048's
  bench_overlap_case("overlap 954x192", 954, 192, bw);    // 128/128's
}

}  // namespace xinfer::bench
