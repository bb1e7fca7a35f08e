// gpu_kernel_bench: measures the card's ceilings (device-to-device copy bandwidth, cuBLASLt bf16 GEMM
// rate on random data), then times the CUDA backend's decode attention (Llama-3.1-8B shape: 32 q heads,
// 8 KV heads, D 128, block 16; batch 1 at context 512..32768, batch 8 at 8192/32768, batch 16/64 at 2048,
// batch 256 at 256; CUDA-graph replays), prefill attention (2048 tokens, 8 x 512, 64 x 128, a 512-token
// chunk on 3584 cached; both prefill kernels), RoPE + KV write fused into decode attention against the two
// launches (batch 1 / 32 at context 256 / 2048, batch 128 at 256; fused only up to 128 decodes) and the 8B
// GEMMs (cuBLASLt's heuristic first algorithm vs the tuner's choice, which is tuned first, m = 1..2048;
// bytes = weights + x + y), printing achieved GB/s or TFLOP/s and the ratio to the measured ceiling,
// and an estimate of the GEMM time of one batch-1 decoded token.
//
// The weight-only quantized linears at the 8B shapes: gpu_quant_linear_bench.cu (also alone: --quant).
//
// Timing: CUDA events around `reps` launches after warm-up, median of 5 such runs. Inputs are random
// (never zeros); small working sets rotate among several copies so L2 does not serve them.
//   usage: gpu_kernel_bench [--quick] [--quant] [--quant-dot] [--w8a8] [--kv-fp8] [--prefill-layer]
//   [--fp8-rows]
//          [--fp8-wide] [--decode-steps] [--b1-layers] [--int8-wgmma] [--act-quant] [--rope-kv]
//          [--prefill-attn]
//          [--kv-swap]
//          (--quant: the ceilings and the
//          quantized linears only; --quant-dot: the ceilings and the int4 GEMVs at m 1..4 only, mma vs
//          CUDA-core;
//          --w8a8: the ceilings and W8A8 INT8 vs FP8 GEMMs / GEMVs only, gpu_w8a8_gemm_bench.cu;
//          --kv-fp8: the ceilings and decode attention with a bf16 vs an FP8 KV cache only (FP8: each
//          prefetch mode of the decode kernel too, and on an engine-sized pool of consecutive vs scattered
//          blocks);
//          --prefill-layer: the ceilings and one 8B layer over a 2048-token prompt op by op, bf16 / FP8 /
//          INT8, gpu_prefill_layer_bench.cu (XINFER_BENCH_PREFILL=SEQSxTOKENS: that prefill step alone, FP8);
//          --decode-steps: the same for the throughput rows' decode steps (XINFER_BENCH_DECODE_STEP=ROWSxCTX:
//          that step alone); both with XINFER_BENCH_SUSTAIN_MS=N also time each op and the chain back to back
//          for N ms at a time (the power-capped regime of long engine steps);
//          --fp8-rows: the ceilings and the FP8 GEMM's candidate algorithms at 128-1024 rows,
//          gpu_w8a8_gemm_bench.cu; --fp8-wide: the ceilings and the FP8 GEMM at 256-1024 rows against every
//          algorithm cuBLASLt has for the shape (XINFER_BENCH_FP8_WIDE_ROWS=m1,m2,.. picks the rows);
//          --b1-layers: the ceilings and the batch-1 decode layer in bf16, FP8, W8A16
//          and W4A16 weights, op by op, chained, and the model's chain without each op in turn, then the bf16
//          lm_head at m = 1; --layer-stream: the ceilings, the FP8 and W8A16 batch-1 layers as --b1-layers
//          runs them, then a persistent one-kernel-per-token probe of the same layer,
//          gpu_layer_stream_bench.cu;
//          --wq-gemm: the ceilings and the weight-only int4 / int8 linears at m 16..2048, dequantize + bf16
//          GEMM vs the tiled GEMM (wq_gemm.h), gpu_quant_linear_bench.cu (XINFER_BENCH_WQ=TEXT: only the
//          "format shape" pairs containing TEXT, e.g. "int4-g128 gate_up");
//          --int8-wgmma: the ceilings and the W8A8-INT8 GEMM, cuBLASLt + epilogue vs our wgmma kernel with
//          fused scales vs FP8, at the engine's row counts, gpu_w8a8_gemm_bench.cu;
//          --act-quant: the ceilings and the W8A8 activation quantization kernels at 1-12288 rows,
//          gpu_prefill_layer_bench.cu; --rope-kv: the ceilings and rope_kv_write at 1024-12288 prompt tokens;
//          --prefill-attn: the ceilings and the prefill attention kernels over bf16 and FP8 caches;
//          --kv-swap: the ceilings and the KV swap space: pinning, the block copy kernel, the DMA ceiling)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_bench_util.h"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"
#include "xinfer/backend/cuda/kernels/attention/paged_decode_attention.h"
#include "xinfer/backend/cuda/kernels/attention/paged_prefill_attention.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuner.h"
#include "xinfer/backend/cuda/swap_space_buffer.h"

namespace xinfer::bench {
std::vector<std::string> bench_quant_linears(cuda::CudaBackend& be, double bw, double peak, bool quick,
                                             bool dot_only = false);
void bench_w8a8(cuda::CudaBackend& be, double bw, double peak, bool quick);  // gpu_w8a8_gemm_bench.cu
void bench_prefill_layer(cuda::CudaBackend& be, double peak, double bw);       // gpu_prefill_layer_bench.cu
void bench_decode_steps(cuda::CudaBackend& be, double peak, double bw);        // gpu_prefill_layer_bench.cu
void bench_act_quant(cuda::CudaBackend& be, double bw);                        // gpu_prefill_layer_bench.cu
void bench_rope_kv(cuda::CudaBackend& be, double bw);                          // gpu_prefill_layer_bench.cu
void bench_fp8_rows(cuda::CudaBackend& be, double peak);                       // gpu_w8a8_gemm_bench.cu
void bench_fp8_wide(cuda::CudaBackend& be, double peak);                       // gpu_w8a8_gemm_bench.cu
void bench_int8_wgmma(cuda::CudaBackend& be, double peak);                     // gpu_w8a8_gemm_bench.cu
void bench_layer_stream(cuda::CudaBackend& be, double bw);                     // gpu_layer_stream_bench.cu
void bench_consumer_rate(cuda::CudaBackend& be, double bw);                    // gpu_consumer_rate_bench.cu
void bench_wq_gemm(cuda::CudaBackend& be, double bw, double peak);             // gpu_quant_linear_bench.cu
namespace {

__global__ void fill_random_bf16(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16((static_cast<float>(x & 0xffffff) / 16777216.0f - 0.5f) * 2.0f * scale);
  }
}

cudaStream_t g_stream = nullptr;  // the backend's stream: fills are ordered with its work
void fill(const TensorView& t, uint32_t seed, float scale = 1.0f) {
  fill_random_bf16<<<1024, 256, 0, g_stream>>>(static_cast<__nv_bfloat16*>(t.data), static_cast<size_t>(t.numel()), seed, scale);
  XI_CUDA_CHECK_LAUNCH();
}

double time_op(cudaStream_t stream, int reps, const std::function<void(int)>& op) {
  return cuda::time_on_stream(stream, reps, op);
}

struct Row {
  std::string what;
  double us;
  double achieved;  // GB/s or TFLOP/s
  const char* unit;
  double ceiling;
};
std::vector<Row> rows;
void report(const std::string& what, double seconds, double amount, bool flops, double ceiling) {
  const double achieved = amount / seconds / (flops ? 1e12 : 1e9);
  rows.push_back({what, seconds * 1e6, achieved, flops ? "TFLOP/s" : "GB/s", ceiling});
  std::printf("%-44s %10.1f us %9.1f %-7s %5.1f%%\n", what.c_str(), seconds * 1e6, achieved, flops ? "TFLOP/s" : "GB/s",
              100.0 * achieved / ceiling);
  std::fflush(stdout);
}

// Seconds per call of fn(i), `ops` calls recorded in one CUDA graph on `stream` (decode steps run as graph
// replays in serving): gpu_bench_util.h's graph_us.
double time_graph(cudaStream_t stream, int ops, const std::function<void(int)>& fn) {
  return graph_us(stream, ops, fn) * 1e-6;
}

// A decode-only step of `batch` sequences of `ctx` tokens each, the newest one decoded: sequence b holds
// blocks 1 + b * (ctx / bs) onward (block 0 stays free), ctx a multiple of bs. `place` (optional, [batch *
// ctx / bs]): the physical block of each (sequence, block) instead.
backend::StepPlan uniform_decode_plan(int batch, int ctx, int bs,
                                      const std::vector<int32_t>* place = nullptr) {
  const int blocks_per_seq = ctx / bs;
  auto block = [&](int b, int i) {
    return place ? (*place)[static_cast<size_t>(b * blocks_per_seq + i)] : 1 + b * blocks_per_seq + i;
  };
  backend::StepPlan plan;
  plan.max_blocks_per_seq = blocks_per_seq;
  plan.query_start_loc.push_back(0);
  for (int b = 0; b < batch; ++b) {
    plan.token_ids.push_back(1);
    plan.positions.push_back(ctx - 1);
    plan.slot_mapping.push_back(block(b, blocks_per_seq - 1) * bs + (ctx - 1) % bs);
    plan.query_start_loc.push_back(b + 1);
    plan.seq_lens.push_back(ctx);
    for (int i = 0; i < blocks_per_seq; ++i) plan.block_tables.push_back(block(b, i));
  }
  plan.max_seq_len = ctx;
  return plan;
}

// Decode attention, Llama-3.1-8B shape (32 q heads, 8 KV heads, D 128, block 16), every sequence at
// context `ctx`: K + V of the whole batch are read once per call (plus q and out). Each call reads another
// copy of the cache (up to 512 MiB of copies) so L2 does not serve it; timed as CUDA-graph replays (as
// decode steps run) and, for batch 1 at 2048, also as eager launches. Full mode adds a sweep of the
// split-KV partition size around the planner's choice (marked *) for the lead's tuning.
void bench_decode_attention(cuda::CudaBackend& be, double bw, bool quick) {
  const int Hq = 32, Hkv = 8, D = 128, bs = 16, kOps = 20;
  const int width = (Hq + 2 * Hkv) * D;
  cudaStream_t s = be.stream();
  struct Case {
    int batch, ctx;
  };
  const std::vector<Case> cases =
      quick ? std::vector<Case>{{1, 256}, {1, 2048}, {64, 2048}, {256, 256}}
            : std::vector<Case>{{1, 512},   {1, 2048},  {1, 8192},  {1, 32768}, {8, 8192},
                                {8, 32768}, {16, 2048}, {64, 2048}, {256, 256}};
  for (const Case& c : cases) {
    const int batch = c.batch, ctx = c.ctx, blocks_per_seq = ctx / bs;
    const size_t layer_bytes = static_cast<size_t>(batch) * ctx * Hkv * D * 2 * 2;
    const double bytes = static_cast<double>(layer_bytes) + 2.0 * batch * Hq * D * 2;  // + q and out
    const int layers = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / layer_bytes, 1, 16));
    backend::KvCache kv = be.allocate_kv_cache({layers, batch * blocks_per_seq + 1, bs, Hkv, D, DType::kBF16});
    for (auto& l : kv.layers) {
      fill(l.k, 3);
      fill(l.v, 4);
    }
    const backend::StepMeta meta = be.upload_step(uniform_decode_plan(batch, ctx, bs));
    auto qkv = be.allocate(DType::kBF16, Shape{batch, width});
    auto out = be.allocate(DType::kBF16, Shape{batch, Hq * D});
    fill(qkv.view, 5);
    auto op = [&](int i) {
      be.paged_attention(meta, qkv.view, Hq, Hkv, D, 0.088f, kv.layers[static_cast<size_t>(i % layers)], out.view);
    };
    op(0);  // sizes the split-KV workspace before any recording
    const int psize = cuda::decode_partition_size(batch, ctx, Hkv, Hq / Hkv, be.num_sms());
    const int parts = (ctx + psize - 1) / psize;
    char what[96];
    std::snprintf(what, sizeof(what), "decode attn b%d ctx%d P=%d x%d (roof %.1fus)", batch, ctx, psize, parts,
                  bytes / (bw * 1e9) * 1e6);
    report(what, time_graph(s, kOps, op), bytes, false, bw);
    if (batch == 1 && ctx == 2048) report(std::string(what) + " eager", time_op(s, kOps, op), bytes, false, bw);

    if (!(batch == 1 || batch == 16) || (quick && ctx > 256)) continue;
    // Partition-size sweep: the kernel launched directly with the step's device arrays.
    std::vector<int32_t> ids(static_cast<size_t>(batch)), lens(static_cast<size_t>(batch), ctx);
    for (int b = 0; b < batch; ++b) ids[static_cast<size_t>(b)] = b;
    auto dev_ids = be.allocate(DType::kI32, Shape{batch});
    auto dev_lens = be.allocate(DType::kI32, Shape{batch});
    XI_CUDA_CHECK(cudaMemcpyAsync(dev_ids.view.data, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice, s));
    XI_CUDA_CHECK(cudaMemcpyAsync(dev_lens.view.data, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice, s));
    cuda::AttentionPlanView view;
    view.num_decode = batch;
    view.max_decode_len = ctx;
    view.decode_seqs = dev_ids.view.as<int32_t>();
    view.decode_lens = dev_lens.view.as<int32_t>();
    cuda::PagedAttentionParams p =
        cuda::paged_attention_params(meta, qkv.view, Hq, Hkv, D, 0.088f, kv.layers[0], out.view);
    for (int sweep = std::max(cuda::kDecodePartitionQuantum, psize / 4); sweep <= std::min(ctx, psize * 4); sweep *= 2) {
      const size_t ws_floats = cuda::decode_attention_workspace_floats(batch, Hq, Hkv, D, ctx, sweep);
      auto ws = be.allocate(DType::kF32, Shape{static_cast<int64_t>(std::max<size_t>(ws_floats, 1))});  // zeroed
      const double t = time_graph(s, kOps, [&](int i) {
        const backend::LayerKvCache& l = kv.layers[static_cast<size_t>(i % layers)];
        p.k_cache = static_cast<const __nv_bfloat16*>(l.k.data);
        p.v_cache = static_cast<const __nv_bfloat16*>(l.v.data);
        cuda::launch_paged_decode_attention(p, view, sweep, cuda::kDecodeWarps, ws_floats > 0 ? ws.view.as<float>() : nullptr,
                                            s);
      });
      std::snprintf(what, sizeof(what), "  sweep b%d ctx%d P=%d x%d%s", batch, ctx, sweep, (ctx + sweep - 1) / sweep,
                    sweep == psize ? " *" : "");
      report(what, t, bytes, false, bw);
    }
  }
}

// A one-layer paged KV cache of `blocks` blocks (8B heads: 8 KV heads x 128, blocks of 16) for the prefill
// attention rows: bf16 random values, or FP8 random codes (the NaN codes 0x7f / 0xff left out) with K / V
// scales 0.02 / 0.03.
backend::KvCache make_prefill_kv_cache(cuda::CudaBackend& be, int blocks, bool fp8) {
  const int Hkv = 8, D = 128, bs = 16;
  backend::KvCacheSpec spec{1, blocks, bs, Hkv, D, fp8 ? DType::kFP8E4M3 : DType::kBF16};
  if (fp8) {
    spec.k_scales.assign(Hkv, 0.02f);
    spec.v_scales.assign(Hkv, 0.03f);
  }
  backend::KvCache kv = be.allocate_kv_cache(spec);
  if (!fp8) {
    fill(kv.layers[0].k, 6);
    fill(kv.layers[0].v, 7);
    return kv;
  }
  std::vector<uint8_t> codes(kv.layers[0].k.bytes());
  for (size_t i = 0; i < codes.size(); ++i) {
    const auto code = static_cast<uint8_t>(i * 2654435761u >> 13);
    codes[i] = (code & 0x7f) == 0x7f ? static_cast<uint8_t>(code - 0x40) : code;
  }
  cudaStream_t s = be.stream();
  XI_CUDA_CHECK(cudaMemcpyAsync(kv.layers[0].k.data, codes.data(), codes.size(), cudaMemcpyHostToDevice, s));
  XI_CUDA_CHECK(cudaMemcpyAsync(kv.layers[0].v.data, codes.data(), codes.size(), cudaMemcpyHostToDevice, s));
  XI_CUDA_CHECK(cudaStreamSynchronize(s));
  return kv;
}

// Decode attention with a bf16 vs an FP8 (e4m3) KV cache, Llama-3.1-8B shape, batch 1 and 64 at contexts 1k,
// 4k and 8k and the throughput rows' decode steps, whose many-CTA grids also run at each warp count per CTA
// (CUDA-graph replays, the cache rotated among copies as above). bytes = K + V of the batch (2 bytes
// an element for bf16, 1 for fp8) + q and out; the roofline is bytes / the copy ceiling. The FP8 cache's
// codes come from the bf16 fill quantized on the host, with scales 0.02 / 0.03. Then prefill attention
// through CudaBackend::paged_attention (the kernel the backend picks: the warp-specialized wgmma kernel for
// these contexts, FP8 codes converted in shared memory; FP8 also on mma.sync) for a 2048-token prompt and 512
// tokens on 3584 cached (make_prefill_kv_cache), TFLOP/s of the causal attention FLOPs vs the GEMM peak.
void bench_decode_attention_kv_fp8(cuda::CudaBackend& be, double bw, double peak) {
  const int Hq = 32, Hkv = 8, D = 128, bs = 16, kOps = 20;
  const int width = (Hq + 2 * Hkv) * D;
  cudaStream_t s = be.stream();
  struct Case {
    int batch, ctx;
  };
  // b1 / b64 at 1k-8k; then the decode steps of the throughput rows (128/128: 480 x 192 at the default
  // budget, 954 x 192 at --max-num-seqs 1024; 2048/2048: 256 x 3072; 128/2048: 857 x 1104) and 256 x 256, 512
  // x 512 (either side of the 2-warp rule's bound), whose grids of many one-partition CTAs run the decode
  // kernel at each warp count (CudaBackend::set_decode_many_warps: 8, 4, 2). 857, 870 and 1000 decodes
  // put 12.98, 13.18 and 15.15 waves of 4-warp CTAs on an H200 (8 KV heads, 528 CTAs a wave): the cost of a
  // last wave that is mostly idle (bench/decode_wave_sim, docs/PERF.md session 28).
  const Case cases[] = {{1, 1024},   {1, 4096},   {1, 8192},   {64, 1024},  {64, 4096},
                        {64, 8192},  {480, 192},  {954, 192},  {256, 256},  {512, 512},
                        {256, 3072}, {857, 1104}, {870, 1104}, {1000, 1104}};
  const int default_warps = be.decode_many_warps();
  // XINFER_BENCH_KV_CASE=BxCTX (e.g. 954x192) runs that case alone (a profiler's run of one kernel).
  const char* only = std::getenv("XINFER_BENCH_KV_CASE");
  for (const Case& cs : cases)
    for (const bool fp8 : {false, true}) {
      if (only != nullptr && std::to_string(cs.batch) + "x" + std::to_string(cs.ctx) != only) continue;
        const int batch = cs.batch, ctx = cs.ctx;
        const int blocks_per_seq = ctx / bs;
        const size_t elem = fp8 ? 1 : 2;
        const size_t layer_bytes = static_cast<size_t>(batch) * ctx * Hkv * D * 2 * elem;
        const double bytes = static_cast<double>(layer_bytes) + 2.0 * batch * Hq * D * 2;
        const int layers = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / layer_bytes, 1, 16));
        backend::KvCacheSpec spec{layers, batch * blocks_per_seq + 1, bs, Hkv, D, fp8 ? DType::kFP8E4M3 : DType::kBF16};
        if (fp8) {
          spec.k_scales.assign(static_cast<size_t>(layers) * Hkv, 0.02f);  // [layer, KV head]
          spec.v_scales.assign(static_cast<size_t>(layers) * Hkv, 0.03f);
        }
        backend::KvCache kv = be.allocate_kv_cache(spec);
        for (auto& l : kv.layers) {
          if (!fp8) {
            fill(l.k, 3);
            fill(l.v, 4);
            continue;
          }
          std::vector<uint8_t> codes(l.k.bytes());
          for (size_t i = 0; i < codes.size(); ++i)
            codes[i] = static_cast<uint8_t>((i * 2654435761u >> 13) % 256 == 0x7f ? 0x3f : (i * 2654435761u >> 13) % 256);
          XI_CUDA_CHECK(cudaMemcpyAsync(l.k.data, codes.data(), codes.size(), cudaMemcpyHostToDevice, s));
          XI_CUDA_CHECK(cudaMemcpyAsync(l.v.data, codes.data(), codes.size(), cudaMemcpyHostToDevice, s));
          XI_CUDA_CHECK(cudaStreamSynchronize(s));
        }
        const backend::StepMeta meta = be.upload_step(uniform_decode_plan(batch, ctx, bs));
        auto qkv = be.allocate(DType::kBF16, Shape{batch, width});
        auto out = be.allocate(DType::kBF16, Shape{batch, Hq * D});
        fill(qkv.view, 5);
        auto op = [&](int i) {
          be.paged_attention(meta, qkv.view, Hq, Hkv, D, 0.088f, kv.layers[static_cast<size_t>(i % layers)], out.view);
        };
        be.set_fp8_kv_f16_mma(false);  // fp8: the bf16-MMA variant first, then the f16 one (the default)
        op(0);  // sizes the split-KV workspace before any recording
        char what[96];
        std::snprintf(what, sizeof(what), "decode attn %s b%d ctx%d (roof %.1fus)", fp8 ? "fp8 bf16-mma" : "bf16", batch,
                      ctx, bytes / (bw * 1e9) * 1e6);
        report(what, time_graph(s, kOps, op), bytes, false, bw);
        be.set_fp8_kv_f16_mma(true);
        if (fp8) {  // the default f16 variant (codes -> f16 by cvt, f16 MMAs), then its prefetch modes
          for (const int mode : {0, 1, 2}) {
            be.set_fp8_kv_decode_prefetch(mode);
            op(0);
            std::snprintf(what, sizeof(what), "decode attn fp8 f16-mma b%d ctx%d%s", batch, ctx,
                          mode == 0   ? ""
                          : mode == 1 ? ", L2 prefetch"
                                      : ", smem ring");
            report(what, time_graph(s, kOps, op), bytes, false, bw);
          }
          be.set_fp8_kv_decode_prefetch(0);
        }
        const int warps_now = cuda::decode_warps(batch, ctx, Hkv, Hq / Hkv, be.num_sms(), default_warps);
        if (cuda::decode_warps(batch, ctx, Hkv, Hq / Hkv, be.num_sms(), 2) == cuda::kDecodeWarps) continue;  // one geometry
        for (const int w :
             {8, 4, 2})  // the many-CTA grid at each warp count (f16 variant for fp8, each prefetch mode)
          for (const int mode : {0, 1, 2}) {
            if (!fp8 && mode != 0) continue;
            be.set_decode_many_warps(w);
            be.set_fp8_kv_decode_prefetch(mode);
            op(0);
            std::snprintf(what, sizeof(what), "  %s b%d ctx%d, %d warps x %d CTAs/SM%s%s",
                          fp8 ? "fp8" : "bf16", batch, ctx, w, cuda::decode_ctas_per_sm(w),
                          w == warps_now ? " *" : "",
                          mode == 0   ? ""
                          : mode == 1 ? ", L2 prefetch"
                                      : ", smem ring");
            report(what, time_graph(s, kOps, op), bytes, false, bw);
          }
        be.set_fp8_kv_decode_prefetch(0);
        be.set_decode_many_warps(default_warps);
    }
  // Where the blocks lie: the throughput rows' decode steps on a pool the size of the engine's (Llama-3.1-8B,
  // FP8 cache, one H200: 116,537 blocks a layer, K and V 1.9 GB each), each sequence's blocks consecutive (as
  // above) or a random draw from the whole pool (the block manager's free list after a long run of
  // admissions, preemptions and releases). One layer, the pool far larger than L2.
  if (only == nullptr)
    for (const Case cs : {Case{857, 1104}, Case{1000, 1104}, Case{256, 3072}}) {
      const int pool = 116537, per_seq = cs.ctx / bs;
      backend::KvCacheSpec spec{1, pool, bs, Hkv, D, DType::kFP8E4M3};
      spec.k_scales.assign(Hkv, 0.02f);
      spec.v_scales.assign(Hkv, 0.03f);
      backend::KvCache kv = be.allocate_kv_cache(spec);
      XI_CUDA_CHECK(cudaMemsetAsync(kv.layers[0].k.data, 0x2b, kv.layers[0].k.bytes(), s));
      XI_CUDA_CHECK(cudaMemsetAsync(kv.layers[0].v.data, 0x35, kv.layers[0].v.bytes(), s));
      std::vector<int32_t> drawn(static_cast<size_t>(pool - 1));
      std::iota(drawn.begin(), drawn.end(), 1);
      std::shuffle(drawn.begin(), drawn.end(), std::mt19937(7));
      drawn.resize(static_cast<size_t>(cs.batch) * per_seq);
      auto qkv = be.allocate(DType::kBF16, Shape{cs.batch, width});
      auto out = be.allocate(DType::kBF16, Shape{cs.batch, Hq * D});
      fill(qkv.view, 5);
      const double bytes = static_cast<double>(cs.batch) * cs.ctx * Hkv * D * 2 + 2.0 * cs.batch * Hq * D * 2;
      for (const bool scattered : {false, true})
        for (const int mode : {0, 1, 2}) {
          const backend::StepMeta meta =
              be.upload_step(uniform_decode_plan(cs.batch, cs.ctx, bs, scattered ? &drawn : nullptr));
          be.set_fp8_kv_decode_prefetch(mode);
          auto op = [&](int) {
            be.paged_attention(meta, qkv.view, Hq, Hkv, D, 0.088f, kv.layers[0], out.view);
          };
          op(0);
          char what[112];
          std::snprintf(what, sizeof(what), "decode attn fp8 b%d ctx%d, pool of %d blocks, %s%s", cs.batch,
                        cs.ctx, pool, scattered ? "scattered" : "consecutive",
                        mode == 0   ? ""
                        : mode == 1 ? ", L2 prefetch"
                                    : ", smem ring");
          report(what, time_graph(s, kOps, op), bytes, false, bw);
        }
      be.set_fp8_kv_decode_prefetch(0);
    }
  for (const int cached : {0, 3584})
    for (const bool fp8 : {false, true}) {
      const int q_len = cached == 0 ? 2048 : 512, len = cached + q_len, blocks = (len + bs - 1) / bs;
      backend::KvCache kv = make_prefill_kv_cache(be, blocks + 1, fp8);
      backend::StepPlan plan;
      plan.max_blocks_per_seq = blocks;
      plan.query_start_loc = {0};
      double attended = 0;
      for (int i = 0; i < blocks; ++i) plan.block_tables.push_back(1 + i);
      for (int t = 0; t < q_len; ++t) {
        const int pos = cached + t;
        plan.token_ids.push_back(1);
        plan.positions.push_back(pos);
        plan.slot_mapping.push_back((1 + pos / bs) * bs + pos % bs);
        attended += pos + 1;
      }
      plan.query_start_loc.push_back(q_len);
      plan.seq_lens.push_back(len);
      plan.max_seq_len = len;
      const backend::StepMeta meta = be.upload_step(plan);
      auto qkv = be.allocate(DType::kBF16, Shape{q_len, width});
      auto out = be.allocate(DType::kBF16, Shape{q_len, Hq * D});
      fill(qkv.view, 8);
      const double flops = 4.0 * D * Hq * attended;
      auto op = [&](int) { be.paged_attention(meta, qkv.view, Hq, Hkv, D, 0.088f, kv.layers[0], out.view); };
      op(0);
      char what[96];
      std::snprintf(what, sizeof(what), "prefill attn %s %d on %d cached", fp8 ? "fp8 " : "bf16", q_len, cached);
      report(what, time_op(s, 10, op), flops, true, peak);
      if (fp8) {  // the same on the mma.sync kernel (the FP8 path before the wgmma kernel read codes)
        be.set_fp8_kv_wgmma_prefill(false);
        std::snprintf(what, sizeof(what), "prefill attn fp8  %d on %d cached, mma.sync", q_len, cached);
        report(what, time_op(s, 10, op), flops, true, peak);
        be.set_fp8_kv_wgmma_prefill(true);
      }
    }
  // rope_kv_write into an FP8 cache: plain, with the keys' Hadamard rotation (backend/kv_rotation.h; q and k
  // rotated by 16-value butterflies and 3 shuffle stages per head), and with per-head scales. bytes = qkv read,
  // q / k written back, the K / V codes written.
  for (const int tokens : {480, 2048}) {
    const int blocks = tokens / bs + 1;
    backend::KvCacheSpec spec{1, blocks + 1, bs, Hkv, D, DType::kFP8E4M3};
    spec.k_scales.assign(Hkv, 0.02f);
    spec.v_scales.assign(Hkv, 0.03f);
    backend::KvCache plain = be.allocate_kv_cache(spec);
    spec.k_rotation = backend::KvRotation::kHadamard;
    backend::KvCache rotated = be.allocate_kv_cache(spec);
    for (int h = 0; h < Hkv; ++h) spec.k_scales[static_cast<size_t>(h)] = 0.02f * static_cast<float>(1 + h % 3);
    backend::KvCache per_head = be.allocate_kv_cache(spec);
    backend::StepPlan plan;
    plan.max_blocks_per_seq = blocks;
    plan.query_start_loc = {0, tokens};
    for (int i = 0; i < blocks; ++i) plan.block_tables.push_back(1 + i);
    for (int t = 0; t < tokens; ++t) {
      plan.token_ids.push_back(1);
      plan.positions.push_back(t);
      plan.slot_mapping.push_back(bs + t);
    }
    plan.seq_lens = {tokens};
    plan.max_seq_len = tokens;
    const backend::StepMeta meta = be.upload_step(plan);
    auto qkv = be.allocate(DType::kBF16, Shape{tokens, width});
    std::vector<float> cs(static_cast<size_t>(tokens) * D);
    for (int t = 0; t < tokens; ++t)
      for (int i = 0; i < D / 2; ++i) {
        const double a = t * std::pow(500000.0, -2.0 * i / D);
        cs[static_cast<size_t>(t) * D + i] = static_cast<float>(std::cos(a));
        cs[static_cast<size_t>(t) * D + D / 2 + i] = static_cast<float>(std::sin(a));
      }
    auto cos_sin = be.upload(TensorView{cs.data(), DType::kF32, Shape{tokens, D}}, DType::kF32);
    fill(qkv.view, 9);
    const double bytes = static_cast<double>(tokens) * ((Hq + 2 * Hkv) * D * 2.0 + (Hq + Hkv) * D * 2.0 + 2.0 * Hkv * D);
    const std::pair<const backend::KvCache*, const char*> caches[] = {
        {&plain, "plain"}, {&rotated, "hadamard"}, {&per_head, "hadamard, per-head scales"}};
    for (const auto& [kv, label] : caches) {
      auto op = [&](int) { be.rope_kv_write(meta, qkv.view, Hq, Hkv, D, cos_sin.view, kv->layers[0]); };
      op(0);
      char what[96];
      std::snprintf(what, sizeof(what), "rope_kv_write fp8 %d tokens, %s", tokens, label);
      report(what, time_graph(s, kOps, op), bytes, false, bw);
    }
  }
}

// Device sampling (CudaBackend::sample_rows): 256 rows x the Llama-3 vocabulary of N(0, 2) f32 logits (a flat
// distribution: the top-p nucleus holds thousands of tokens), and of N(0, 5) logits ("peaked": a nucleus of a
// few tokens, as language models mostly have). bytes = one read of the logits (the kernel makes 2-5 passes
// over each row, from L2 where it can). Checked first: top-k rows draw only among their row's 50 largest.
void bench_sampling(cuda::CudaBackend& be, double bw) {
  const int rows = 256, vocab = 128256;
  backend::DeviceTensor flat = be.random_normal(DType::kF32, Shape{rows, vocab}, 7, 2.0f);
  backend::DeviceTensor peaked = be.random_normal(DType::kF32, Shape{rows, vocab}, 8, 5.0f);
  backend::DeviceTensor ids = be.allocate(DType::kI32, Shape{rows});
  struct Mode {
    const char* name;
    int top_k;
    float top_p, min_p;
    bool peaked = false;
  };
  const Mode modes[] = {{"top-k 50 + top-p 0.9", 50, 0.9f, 0.0f},
                        {"top-p 0.9", 0, 0.9f, 0.0f},
                        {"top-p 0.9, peaked N(0, 5)", 0, 0.9f, 0.0f, true},
                        {"min-p 0.1", 0, 1.0f, 0.1f},
                        {"temperature 1", 0, 1.0f, 0.0f}};
  for (const Mode& m : modes) {
    const backend::DeviceTensor& logits = m.peaked ? peaked : flat;
    backend::SamplingBatch batch;
    for (int r = 0; r < rows; ++r) {
      backend::SamplingRow row;
      row.logit_row = r;
      row.greedy = false;
      row.top_k = m.top_k;
      row.top_p = m.top_p;
      row.min_p = m.min_p;
      row.random_bits = backend::splitmix64(static_cast<uint64_t>(r));
      batch.rows.push_back(row);
    }
    auto sample = [&](int) { XI_CHECK(be.sample_rows(logits.view, batch, ids.view).ok()); };
    if (m.top_k > 0) {
      sample(0);
      std::vector<int32_t> got(rows);
      be.to_host_raw(ids.view, got.data());
      std::vector<float> row(vocab);
      for (int r = 0; r < 4; ++r) {
        be.to_host_f32(logits.view.rows(r, r + 1), row.data());
        const float drawn = row[static_cast<size_t>(got[static_cast<size_t>(r)])];
        const auto above = std::count_if(row.begin(), row.end(), [&](float x) { return x > drawn; });
        XI_CHECK_LT(above, m.top_k) << "sampling bench: row " << r << " drew a token outside its top-k";
      }
    }
    report(std::string("sample 256x128256 ") + m.name, time_op(be.stream(), 20, sample),
           static_cast<double>(rows) * vocab * sizeof(float), false, bw);
  }
}

// Number of 16-bit words in which two device tensors of equal size differ (bit comparison on the device).
__global__ void count_differences(const uint16_t* a, const uint16_t* b, size_t n, unsigned int* count) {
  unsigned int local = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    local += a[i] != b[i];
  if (local > 0) atomicAdd(count, local);
}
unsigned int differences(cuda::CudaBackend& be, const TensorView& a, const TensorView& b) {
  XI_CHECK_EQ(a.bytes(), b.bytes());
  backend::DeviceTensor count = be.allocate(DType::kI32, Shape{1});  // zeroed
  count_differences<<<1024, 256, 0, g_stream>>>(static_cast<const uint16_t*>(a.data),
                                                static_cast<const uint16_t*>(b.data), a.bytes() / 2,
                                                static_cast<unsigned int*>(count.view.data));
  XI_CUDA_CHECK_LAUNCH();
  unsigned int n = 0;
  be.to_host_raw(count.view, &n);
  return n;
}

// RoPE + KV write + decode attention, Llama-3.1-8B heads (32 q, 8 KV, D 128, block 16): rope_kv_write ->
// paged_attention chained (two launches, the unfused path) against rope_paged_attention (one fused kernel on
// decode-only steps), batch 1 and 32 at context 256 and 2048, each timed as CUDA-graph replays of 32 calls
// over 32 layers' caches (as a decode step runs them; the caches do not fit L2). Checked first: the fused op
// gives the chained pair's bits (out, and the whole K and V cache of a layer). bytes = the context's K and V
// + qkv read + out written + the new k and v written (both paths do that work; the chained pair also writes
// the rotated q, k back to qkv and reads them again).
void bench_rope_attention(cuda::CudaBackend& be, double bw) {
  const int Hq = 32, Hkv = 8, D = 128, bs = 16, L = 32;
  const int width = (Hq + 2 * Hkv) * D;
  const float scale = 0.088f;
  cudaStream_t s = be.stream();
  const bool saved_fusion = be.rope_attention_fusion();
  be.set_rope_attention_fusion(true);
  struct Case {
    int batch, ctx;
  };
  for (const Case c : {Case{1, 256}, Case{1, 2048}, Case{32, 256}, Case{32, 2048}, Case{128, 256}}) {
    const int batch = c.batch, ctx = c.ctx, blocks_per_seq = ctx / bs;
    backend::KvCache kv = be.allocate_kv_cache({L, batch * blocks_per_seq + 1, bs, Hkv, D, DType::kBF16});
    for (auto& l : kv.layers) {  // every layer the same values: layers 0 and 1 serve the check below
      fill(l.k, 3);
      fill(l.v, 4);
    }
    const backend::StepMeta meta = be.upload_step(uniform_decode_plan(batch, ctx, bs));
    HostTensor cs_host(DType::kF32, Shape{ctx, D});  // Llama-3 angles p * 500000^(-2i/D)
    for (int p = 0; p < ctx; ++p)
      for (int i = 0; i < D / 2; ++i) {
        const double a = p * std::pow(500000.0, -2.0 * i / D);
        cs_host.data<float>()[static_cast<size_t>(p) * D + i] = static_cast<float>(std::cos(a));
        cs_host.data<float>()[static_cast<size_t>(p) * D + D / 2 + i] = static_cast<float>(std::sin(a));
      }
    const backend::DeviceTensor cos_sin = be.upload(cs_host.view(), DType::kF32);
    auto qkv = be.allocate(DType::kBF16, Shape{batch, width});
    auto qkv0 = be.allocate(DType::kBF16, Shape{batch, width});
    auto out = be.allocate(DType::kBF16, Shape{batch, Hq * D});
    auto out_ref = be.allocate(DType::kBF16, Shape{batch, Hq * D});
    fill(qkv0.view, 5);
    auto restore_qkv = [&] {
      XI_CUDA_CHECK(
          cudaMemcpyAsync(qkv.view.data, qkv0.view.data, qkv0.view.bytes(), cudaMemcpyDeviceToDevice, s));
    };
    auto layer = [&](int l) -> const backend::LayerKvCache& { return kv.layers[static_cast<size_t>(l % L)]; };
    auto chained = [&](int l) {
      be.rope_kv_write(meta, qkv.view, Hq, Hkv, D, cos_sin.view, layer(l));
      be.paged_attention(meta, qkv.view, Hq, Hkv, D, scale, layer(l), out.view);
    };
    auto fused = [&](int l) {
      be.rope_paged_attention(meta, qkv.view, Hq, Hkv, D, cos_sin.view, scale, layer(l), out.view);
    };

    // Check (also sizes the decode workspace before any recording): chained on layer 0, fused on layer 1.
    restore_qkv();
    be.rope_kv_write(meta, qkv.view, Hq, Hkv, D, cos_sin.view, layer(0));
    be.paged_attention(meta, qkv.view, Hq, Hkv, D, scale, layer(0), out_ref.view);
    restore_qkv();
    const int64_t fused_before = be.fused_rope_attentions();
    fused(1);
    const bool ran_fused = be.fused_rope_attentions() == fused_before + 1;
    const unsigned d_out = differences(be, out.view, out_ref.view);
    const unsigned d_k = differences(be, layer(0).k, layer(1).k),
                   d_v = differences(be, layer(0).v, layer(1).v);
    std::printf(
        "rope+attn b%d ctx%d check: fused kernel %s; fused vs chained: %u out, %u k-cache, %u v-cache "
        "elements differ%s\n",
        batch, ctx, ran_fused ? "ran" : "DID NOT RUN", d_out, d_k, d_v,
        d_out + d_k + d_v == 0 ? "" : "  <-- MISMATCH");

    const double bytes = 2.0 * batch * ctx * Hkv * D * 2 + 2.0 * batch * width + 2.0 * batch * Hq * D +
                         2.0 * batch * 2 * Hkv * D;
    const double roof = bytes / (bw * 1e9);
    const double tc = time_graph(s, L, chained), tf = time_graph(s, L, fused);
    char what[128];
    std::snprintf(what, sizeof(what), "rope+attn b%d ctx%d chained (roof %.1fus)", batch, ctx, roof * 1e6);
    report(what, tc, bytes, false, bw);
    std::snprintf(what, sizeof(what), "rope+attn b%d ctx%d fused (%.2fx)", batch, ctx, tc / tf);
    report(what, tf, bytes, false, bw);
    std::printf(
        "rope+attn b%d ctx%d: chained %.2f us, fused %.2f us per layer (%.2fx; %.2f us saved per layer, "
        "%.1f us per 32-layer token), roofline %.2f us\n",
        batch, ctx, tc * 1e6, tf * 1e6, tc / tf, (tc - tf) * 1e6, 32 * (tc - tf) * 1e6, roof * 1e6);
    be.synchronize();
  }
  be.set_rope_attention_fusion(saved_fusion);
}

// Prefill attention, Llama-3.1-8B shape (32 q heads, 8 KV heads, D 128, block 16), causal with cached
// prefixes: one 2048-token prompt, 7 x 2048 (the 2048/128 row's mixed step), 8 x 512, 96 x 128 (the 128/128
// row's mixed step), 64 x 128, and a 512-token chunk on a 3584-token cached prefix; over a bf16 cache and
// over an FP8 one (random codes, scales 0.02 / 0.03). flops = 4 * D * Hq * sum over query rows of attended
// keys (QK^T and PV). The prefill kernels are launched directly on the same step (bf16: wgmma, wgmma-simple,
// mma.sync; FP8: wgmma-simple and mma.sync with bf16 MMAs and with f16 MMAs,
// PagedAttentionParams::kv_fp8_f16), checked against the mma.sync kernel (bf16 MMAs) first; the 2048-token
// prompt is also timed through CudaBackend::paged_attention (the backend's choice).
// XINFER_BENCH_PREFILL_CASE=NAME runs one case.
void bench_prefill_attention(cuda::CudaBackend& be, double peak, bool quick) {
  const int Hq = 32, Hkv = 8, D = 128, bs = 16;
  const int width = (Hq + 2 * Hkv) * D;
  cudaStream_t s = be.stream();
  struct Case {
    const char* name;
    int seqs, cached, q_len;
  };
  const Case cases[] = {{"2048 tokens", 1, 0, 2048}, {"7 x 2048", 7, 0, 2048},
                        {"8 x 512", 8, 0, 512},      {"96 x 128", 96, 0, 128},
                        {"64 x 128", 64, 0, 128},    {"512 on 3584 cached", 1, 3584, 512}};
  const char* only = std::getenv("XINFER_BENCH_PREFILL_CASE");
  for (const Case& c : cases)
    for (const bool fp8 : {false, true}) {
      if (only != nullptr && std::string(only) != c.name) continue;
      const int len = c.cached + c.q_len, blocks_per_seq = (len + bs - 1) / bs, T = c.seqs * c.q_len;
      backend::KvCache kv = make_prefill_kv_cache(be, c.seqs * blocks_per_seq + 1, fp8);
      backend::StepPlan plan;
      plan.max_blocks_per_seq = blocks_per_seq;
      plan.query_start_loc.push_back(0);
      double attended = 0;  // sum over query rows of the keys they attend to
      for (int q = 0; q < c.seqs; ++q) {
        const int first_block = 1 + q * blocks_per_seq;
        for (int i = 0; i < blocks_per_seq; ++i) plan.block_tables.push_back(first_block + i);
        for (int t = 0; t < c.q_len; ++t) {
          const int pos = c.cached + t;
          plan.token_ids.push_back(1);
          plan.positions.push_back(pos);
          plan.slot_mapping.push_back((first_block + pos / bs) * bs + pos % bs);
          attended += pos + 1;
        }
        plan.query_start_loc.push_back(plan.num_tokens());
        plan.seq_lens.push_back(len);
      }
      plan.max_seq_len = len;
      const backend::StepMeta meta = be.upload_step(plan);
      auto qkv = be.allocate(DType::kBF16, Shape{T, width});
      fill(qkv.view, 8);
      const double flops = 4.0 * D * Hq * attended;

      const cuda::AttentionPlanHost host = cuda::build_attention_plan(plan);
      int32_t* items = nullptr;
      XI_CUDA_CHECK(cudaMalloc(&items, host.prefill_items.size() * sizeof(int32_t)));
      XI_CUDA_CHECK(cudaMemcpyAsync(items, host.prefill_items.data(),
                                    host.prefill_items.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
      cuda::AttentionPlanView view{};
      view.num_prefill_items = host.num_prefill_items();
      view.prefill_items = items;
      struct Variant {
        cuda::PrefillKernel kernel;
        bool f16;
        const char* name;
      };
      // The reference (mma.sync, bf16 MMAs) last.
      const std::vector<Variant> variants =
          fp8 ? std::vector<Variant>{{cuda::PrefillKernel::kWgmmaWs, true, "wgmma-ws f16"},
                                     {cuda::PrefillKernel::kWgmmaSimple, true, "wgmma-simple f16"},
                                     {cuda::PrefillKernel::kMmaSync, true, "mma.sync f16"},
                                     {cuda::PrefillKernel::kWgmmaWs, false, "wgmma-ws bf16"},
                                     {cuda::PrefillKernel::kWgmmaSimple, false, "wgmma-simple bf16"},
                                     {cuda::PrefillKernel::kMmaSync, false, "mma.sync bf16"}}
              : std::vector<Variant>{{cuda::PrefillKernel::kWgmmaWs, false, "wgmma-ws"},
                                     {cuda::PrefillKernel::kWgmma, false, "wgmma"},
                                     {cuda::PrefillKernel::kWgmmaSimple, false, "wgmma-simple"},
                                     {cuda::PrefillKernel::kMmaSync, false, "mma.sync"}};
      std::vector<backend::DeviceTensor> outs;
      std::vector<std::function<void()>> launches;
      for (const Variant& v : variants) {
        outs.push_back(be.allocate(DType::kBF16, Shape{T, Hq * D}));
        cuda::PagedAttentionParams p =
            cuda::paged_attention_params(meta, qkv.view, Hq, Hkv, D, 0.088f, kv.layers[0], outs.back().view);
        p.kv_fp8_f16 = v.f16;
        const cuda::PrefillKernel kernel = v.kernel;
        launches.push_back(
            [p, view, s, kernel] { cuda::launch_paged_prefill_attention(p, view, s, kernel); });
      }
      // Correctness first: the variants agree with the reference (each is checked against the CPU in
      // gpu_tests).
      for (auto& launch : launches) launch();
      std::vector<std::vector<float>> res(launches.size(),
                                          std::vector<float>(static_cast<size_t>(T) * Hq * D));
      for (size_t i = 0; i < launches.size(); ++i) be.to_host_f32(outs[i].view, res[i].data());
      const char* cache = fp8 ? "fp8 " : "bf16";
      std::printf("prefill attn %s %s: %.2f GFLOP, roofline %.1f us at %.0f TFLOP/s; rel_l2 vs %s:", cache,
                  c.name, flops / 1e9, flops / (peak * 1e12) * 1e6, peak, variants.back().name);
      for (size_t i = 0; i + 1 < launches.size(); ++i) {
        const std::vector<float>& a = res[i];
        const std::vector<float>& b = res.back();
        double err = 0, norm = 0;
        for (size_t j = 0; j < a.size(); ++j) {
          err += (static_cast<double>(a[j]) - b[j]) * (static_cast<double>(a[j]) - b[j]);
          norm += static_cast<double>(b[j]) * b[j];
        }
        const double rel = std::sqrt(err / std::max(norm, 1e-30));  // NaN (unwritten / broken) fails too
        std::printf(" %s %.1e%s", variants[i].name, rel, rel < 1e-2 ? "" : " <-- MISMATCH");
      }
      std::printf("\n");
      const int reps = quick ? 5 : 20;
      for (size_t i = 0; i < launches.size(); ++i) {
        const double t = time_op(s, reps, [&](int) { launches[i](); });
        report(std::string("prefill attn 32/8x128 ") + cache + " " + c.name + " " + variants[i].name, t,
               flops, true, peak);
      }
      if (c.cached == 0 && c.seqs == 1) {
        const double t = time_op(s, reps, [&](int) {
          be.paged_attention(meta, qkv.view, Hq, Hkv, D, 0.088f, kv.layers[0], outs[0].view);
        });
        report(std::string("prefill attn 32/8x128 ") + cache + " 2048 tokens (backend's choice)", t, flops,
               true, peak);
      }
      be.synchronize();
      XI_CUDA_CHECK(cudaFree(items));
    }
}

// Random e4m3 / int8 / packed-int4 codes for the quantized weights: bytes in 0..119 with a random sign bit, so
// no e4m3 NaN (0x7f / 0xff) appears; as int8 / int4 they are arbitrary codes.
__global__ void fill_random_codes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = static_cast<uint8_t>((x % 120) | (x & 0x80000000u ? 0x80 : 0));
  }
}

// The weight formats of the batch-1 layer bench: what a decode step of each `--quantization` streams.
enum class B1Format { kBf16, kFp8, kW8a16, kW4a16 };
const char* b1_format_name(B1Format f) {
  return f == B1Format::kBf16 ? "bf16" : f == B1Format::kFp8 ? "fp8" : f == B1Format::kW8a16 ? "w8a16" : "w4a16 g128";
}

// One linear's weights in format f at [n, k] (random codes, scales 1e-3) and the bytes a GEMV streams for it.
struct B1Weight {
  backend::DeviceTensor w, scales;
  backend::LinearWeights lw;
  double bytes = 0;
};
B1Weight make_b1_weight(cuda::CudaBackend& be, B1Format f, int n, int k, uint32_t seed) {
  B1Weight w;
  const auto nk = static_cast<size_t>(n) * static_cast<size_t>(k);
  if (f == B1Format::kBf16) {
    w.w = be.allocate(DType::kBF16, Shape{n, k});
    fill(w.w.view, seed, 0.02f);
    w.lw = {w.w.view, {}};
    w.bytes = 2.0 * static_cast<double>(nk);
    return w;
  }
  const int groups = f == B1Format::kW4a16 ? k / 128 : 1;
  w.w = f == B1Format::kFp8    ? be.allocate(DType::kFP8E4M3, Shape{n, k})
        : f == B1Format::kW8a16 ? be.allocate(DType::kI8, Shape{n, k})
                                : be.allocate(DType::kU8, Shape{n, k / 2});
  fill_random_codes<<<1024, 256, 0, g_stream>>>(static_cast<uint8_t*>(w.w.view.data), w.w.view.bytes(), seed);
  XI_CUDA_CHECK_LAUNCH();
  w.scales = be.allocate(DType::kF32, Shape{n, groups});
  std::vector<float> host(static_cast<size_t>(n) * groups, 1e-3f);
  XI_CUDA_CHECK(cudaMemcpy(w.scales.view.data, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  w.lw.weight = w.w.view;
  w.lw.scales = w.scales.view;
  w.lw.k = k;
  if (f == B1Format::kFp8) {
    w.scales.view.shape = Shape{n};
    w.lw.scales = w.scales.view;
    w.lw.format = quant::W8A8Fp8Format{};
  } else if (f == B1Format::kW8a16) {
    w.scales.view.shape = Shape{n};
    w.lw.scales = w.scales.view;
    w.lw.format = quant::Int8ChannelFormat{};
  } else {
    quant::IntGroupFormat g;
    g.bits = 4;
    g.group_size = 128;
    g.zero_point = false;
    w.lw.format = g;
  }
  w.bytes = static_cast<double>(w.w.view.bytes() + w.scales.view.bytes());
  return w;
}

// Batch-1 decode layer, Llama-3.1-8B shape, context 256, weights in format f: each op of one layer alone (graph
// replays of 32 calls over 32 layers' weights, as in a decode step: each figure includes the op's launch gap)
// and the whole layer chain recorded for 32 layers (one token's worth). Shows where a batch-1 token's time goes
// against the roofline (bytes / copy bandwidth). Weights are not L2-resident (32 copies: 7 GB in bf16). Then the
// layer as the model runs it (add_rms_norm_linear, rope_paged_attention), and that chain without each of its
// ops in turn: what each op costs inside the chain, where PDL overlaps a kernel's start with its predecessor.
void bench_decode_layer(cuda::CudaBackend& be, double bw, B1Format f) {
  const int H = 4096, Hq = 32, Hkv = 8, D = 128, I = 14336, bs = 16, ctx = 256, L = 32;
  const int width = (Hq + 2 * Hkv) * D;
  const char* fname = b1_format_name(f);
  cudaStream_t s = be.stream();
  backend::KvCache kv = be.allocate_kv_cache({L, ctx / bs + 1, bs, Hkv, D, DType::kBF16});
  for (auto& l : kv.layers) {
    fill(l.k, 3);
    fill(l.v, 4);
  }
  backend::StepPlan plan = uniform_decode_plan(1, ctx, bs);
  plan.logit_rows = {0};
  const backend::StepMeta meta = be.upload_step(plan);
  struct LayerW {
    backend::DeviceTensor norm1, norm2;
    B1Weight qkv, o, gate_up, down;
  };
  std::vector<LayerW> lw(L);
  for (int l = 0; l < L; ++l) {
    LayerW& w = lw[static_cast<size_t>(l)];
    w.norm1 = be.allocate(DType::kBF16, Shape{H});
    w.norm2 = be.allocate(DType::kBF16, Shape{H});
    for (auto* t : {&w.norm1, &w.norm2}) fill(t->view, 30 + l, 1.0f);
    w.qkv = make_b1_weight(be, f, width, H, 40 + l);
    w.o = make_b1_weight(be, f, H, Hq * D, 80 + l);
    w.gate_up = make_b1_weight(be, f, 2 * I, H, 120 + l);
    w.down = make_b1_weight(be, f, H, I, 160 + l);
  }
  auto cos_sin = be.allocate(DType::kF32, Shape{ctx, D});  // zeros are fine for timing
  auto residual = be.allocate(DType::kBF16, Shape{1, H});
  auto x = be.allocate(DType::kBF16, Shape{1, H});
  auto delta = be.allocate(DType::kBF16, Shape{1, H});
  auto qkv = be.allocate(DType::kBF16, Shape{1, width});
  auto attn = be.allocate(DType::kBF16, Shape{1, Hq * D});
  auto gu = be.allocate(DType::kBF16, Shape{1, 2 * I});
  auto act = be.allocate(DType::kBF16, Shape{1, I});
  for (auto* t : {&residual, &delta, &qkv, &attn, &gu}) fill(t->view, 7, 0.5f);
  const float eps = 1e-5f, scale = 0.088f;
  auto W = [&](int l) -> LayerW& { return lw[static_cast<size_t>(l % L)]; };
  auto cache = [&](int l) -> const backend::LayerKvCache& { return kv.layers[static_cast<size_t>(l % L)]; };
  struct Op {
    const char* name;
    double bytes;
    std::function<void(int)> fn;
  };
  const LayerW& w0 = lw[0];
  const double kvb = 2.0 * ctx * Hkv * D * 2;
  auto tag = [&](const char* what) { return std::string("b1 layer ") + fname + ": " + what; };
  const std::vector<Op> ops = {
      {"add_rms_norm", 3.0 * 2 * H, [&](int l) { be.add_rms_norm(residual.view, delta.view, W(l).norm1.view, eps, x.view); }},
      {"linear qkv", w0.qkv.bytes, [&](int l) { be.linear(x.view, W(l).qkv.lw, qkv.view); }},
      {"rope_kv_write", 2.0 * 2 * width, [&](int l) { be.rope_kv_write(meta, qkv.view, Hq, Hkv, D, cos_sin.view, cache(l)); }},
      {"paged_attention ctx256", kvb, [&](int l) { be.paged_attention(meta, qkv.view, Hq, Hkv, D, scale, cache(l), attn.view); }},
      {"linear o", w0.o.bytes, [&](int l) { be.linear(attn.view, W(l).o.lw, delta.view); }},
      {"add_rms_norm (2)", 3.0 * 2 * H, [&](int l) { be.add_rms_norm(residual.view, delta.view, W(l).norm2.view, eps, x.view); }},
      {"linear gate_up", w0.gate_up.bytes, [&](int l) { be.linear(x.view, W(l).gate_up.lw, gu.view); }},
      {"silu_mul", 2.0 * 3 * I, [&](int l) { be.silu_mul(gu.view, act.view); }},
      {"linear down", w0.down.bytes, [&](int l) { be.linear(act.view, W(l).down.lw, delta.view); }},
  };
  for (const Op& op : ops) op.fn(0);  // sizes workspaces before any recording
  be.synchronize();
  double sum = 0, bytes = 0;
  for (const Op& op : ops) {
    const double t = time_graph(s, L, op.fn);
    sum += t;
    bytes += op.bytes;
    report(tag(op.name), t, op.bytes, false, bw);
  }
  const double chained = time_graph(s, L, [&](int l) {
    for (const Op& op : ops) op.fn(l);
  });
  report(tag("sum of the ops above"), sum, bytes, false, bw);
  report(tag("chained (one layer of a token)"), chained, bytes, false, bw);
  std::printf("b1 layer %s: chained %.1f us (x32 = %.2f ms per token before the lm_head), sum of the ops %.1f us, "
              "roofline %.1f us (%.1f%%)\n",
              fname, chained * 1e6, 32 * chained * 1e3, sum * 1e6, bytes / (bw * 1e9) * 1e6,
              100 * bytes / (bw * 1e9) / chained);

  // The same layer with the fused decode ops as the model runs them (backend.h add_rms_norm_linear: for bf16 the
  // o and down projections add themselves into the residual, qkv and gate_up apply the RMSNorm on their way in,
  // the SwiGLU in the gate_up GEMV where its configuration pairs rows; for W8A8 the activation quantization in
  // the norm / SwiGLU kernels or the GEMV; RoPE and the KV write inside the attention kernel). bf16 fuses only
  // where the tuner chose the GEMV for both linears (else the composition); this section sets kWhenGemv itself
  // (the backend's default) and restores the policy after.
  const cuda::LinearFusion saved_fusion = be.linear_fusion();
  be.set_linear_fusion(cuda::LinearFusion::kWhenGemv);
  auto o_gate_up = [&](int l) {
    return backend::NormLinearArgs{residual.view, delta.view, W(l).norm2.view, eps, W(l).gate_up.lw, x.view,
                                   gu.view, act.view, attn.view, W(l).o.lw, &W(l).down.lw, /*act_out_unread=*/true};
  };
  auto down_qkv = [&](int l) {
    return backend::NormLinearArgs{residual.view, delta.view, W(l + 1).norm1.view, eps, W(l + 1).qkv.lw,
                                   x.view, qkv.view, {}, act.view, W(l).down.lw};
  };
  auto path = [&](const backend::NormLinearArgs& a) {
    const auto plan = be.fused_linear_plan(a);
    if (!plan) return std::string("composed");
    return "fused " + cuda::to_string(*plan->producer) + " -> " + cuda::to_string(plan->consumer) +
           (plan->swiglu ? " + SwiGLU epilogue" : "");
  };
  const std::vector<Op> fused_ops = {
      {"rope+attention ctx256", kvb + 2.0 * 2 * Hkv * D,
       [&](int l) { be.rope_paged_attention(meta, qkv.view, Hq, Hkv, D, cos_sin.view, scale, cache(l), attn.view); }},
      {"o+add_rms_norm+gate_up (+silu_mul)", w0.o.bytes + w0.gate_up.bytes + 2.0 * 3 * I,
       [&](int l) { be.add_rms_norm_linear(o_gate_up(l)); }},
      {"down+add_rms_norm+qkv", w0.down.bytes + w0.qkv.bytes, [&](int l) { be.add_rms_norm_linear(down_qkv(l)); }},
  };
  for (const Op& op : fused_ops) op.fn(0);
  be.synchronize();
  std::printf("b1 layer %s, model chain: o -> gate_up %s, down -> qkv %s\n", fname, path(o_gate_up(0)).c_str(),
              path(down_qkv(0)).c_str());
  double fsum = 0, fbytes = 0;
  for (const Op& op : fused_ops) {
    const double t = time_graph(s, L, op.fn);
    fsum += t;
    fbytes += op.bytes;
    report(tag((std::string("model: ") + op.name).c_str()), t, op.bytes, false, bw);
  }
  const double fchained = time_graph(s, L, [&](int l) {
    for (const Op& op : fused_ops) op.fn(l);
  });
  report(tag("model: sum of its ops"), fsum, fbytes, false, bw);
  report(tag("model: chained"), fchained, fbytes, false, bw);
  for (size_t skip = 0; skip < fused_ops.size(); ++skip) {
    const double t = time_graph(s, L, [&](int l) {
      for (size_t i = 0; i < fused_ops.size(); ++i)
        if (i != skip) fused_ops[i].fn(l);
    });
    std::printf("b1 layer %s: model chain without %-36s %7.1f us (the op costs %.1f us in the chain)\n", fname,
                fused_ops[skip].name, t * 1e6, (fchained - t) * 1e6);
  }
  std::printf("b1 layer %s: model chain %.1f us (x32 = %.2f ms per token before the lm_head; op by op %.1f us: %.1f us "
              "saved per layer), roofline %.1f us (%.1f%%)\n",
              fname, fchained * 1e6, 32 * fchained * 1e3, chained * 1e6, (chained - fchained) * 1e6,
              fbytes / (bw * 1e9) * 1e6, 100 * fbytes / (bw * 1e9) / fchained);
  be.set_linear_fusion(saved_fusion);
}

// The batch-1 layer in every weight format, then the bf16 lm_head row (128256 x 4096) at m = 1.
void bench_b1_layers(cuda::CudaBackend& be, double bw) {
  for (const B1Format f : {B1Format::kBf16, B1Format::kFp8, B1Format::kW8a16, B1Format::kW4a16}) {
    bench_decode_layer(be, bw, f);
    be.synchronize();
  }
  const int V = 128256, H = 4096;
  auto head = be.allocate(DType::kBF16, Shape{V, H});
  fill(head.view, 9, 0.02f);
  auto x = be.allocate(DType::kBF16, Shape{1, H});
  auto logits = be.allocate(DType::kF32, Shape{1, V});
  fill(x.view, 8, 0.5f);
  be.linear(x.view, {head.view, {}}, logits.view);
  be.synchronize();
  report("b1 lm_head 128256x4096 bf16 -> f32", time_graph(g_stream, 4, [&](int) { be.linear(x.view, {head.view, {}}, logits.view); }),
         2.0 * V * H, false, bw);
}

// ---- KV swap space (swap-to-host preemption): pinning, and block copies against the DMA ceiling ----
// The 8B FP8 cache layout (32 layers, 8 KV heads, 16 tokens x 128 dims: 1 MiB per block). A victim of 4,096
// tokens is 256 blocks; the copy kernel moves them scattered, the DMA rows move 256 MiB contiguous.
void bench_kv_swap(cuda::CudaBackend& be) {
  std::printf("\n==== KV swap space: 8B FP8 blocks of 1 MiB (32 layers x K, V x 8 heads x 16 x 128) ====\n");
  cudaStream_t s = be.stream();
  backend::KvCacheSpec spec{32, 1025, 16, 8, 128, DType::kFP8E4M3};
  spec.num_swap_blocks = 4096;
  const size_t bpb = spec.bytes_per_block();
  auto t0 = std::chrono::steady_clock::now();
  backend::KvCache kv = be.allocate_kv_cache(spec);  // pins the swap space
  const double pin_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto* swap = dynamic_cast<cuda::SwapSpaceBuffer*>(kv.swap.get());
  XI_CHECK(swap != nullptr);
  std::printf(
      "allocate the cache and pin its 4 GiB swap space (mmap + MADV_HUGEPAGE, cudaHostRegister per GiB): "
      "%.3f s = %.2f GB/s\n",
      pin_s, static_cast<double>(swap->bytes()) / pin_s / 1e9);
  t0 = std::chrono::steady_clock::now();
  void* h = nullptr;
  XI_CUDA_CHECK(cudaHostAlloc(&h, size_t{1} << 30, cudaHostAllocMapped | cudaHostAllocPortable));
  const double alloc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  XI_CUDA_CHECK(cudaFreeHost(h));
  std::printf("cudaHostAlloc of 1 GiB (for comparison): %.3f s = %.2f GB/s\n", alloc_s,
              (1 << 30) / alloc_s / 1e9);
  std::vector<int32_t> blocks(1024), slots(4096);
  for (int i = 0; i < 1024; ++i) blocks[static_cast<size_t>(i)] = 1 + (i * 389) % 1024;
  for (int i = 0; i < 4096; ++i) slots[static_cast<size_t>(i)] = (i * 1237) % 4096;
  for (int n : {16, 256}) {
    backend::KvCopyBatch out{true, {}}, in{false, {}};
    const double bytes = static_cast<double>(n) * static_cast<double>(bpb);
    const double out_s = time_op(s, 3, [&](int r) {
      out.copies.clear();
      for (int i = 0; i < n; ++i)
        out.copies.push_back(
            {blocks[static_cast<size_t>(i + r * n) % 1024], slots[static_cast<size_t>(i + r * n)]});
      be.copy_kv_blocks(kv, out);
    });
    const double in_s = time_op(s, 3, [&](int r) {
      in.copies.clear();
      for (int i = 0; i < n; ++i)
        in.copies.push_back(
            {slots[static_cast<size_t>(i + r * n)], blocks[static_cast<size_t>(i + r * n) % 1024]});
      be.copy_kv_blocks(kv, in);
    });
    std::printf(
        "copy kernel, %4d scattered blocks (%6.1f MiB): swap-out %8.1f us = %5.1f GB/s, swap-in %8.1f us = "
        "%5.1f GB/s\n",
        n, bytes / (1 << 20), out_s * 1e6, bytes / out_s / 1e9, in_s * 1e6, bytes / in_s / 1e9);
  }
  // DMA ceiling: one contiguous 256 MiB copy between device memory and the pinned swap space, each way.
  const size_t n = 256 * bpb;
  backend::DeviceTensor dev = be.allocate(DType::kU8, Shape{static_cast<int64_t>(n)});
  const double d2h = time_op(s, 3, [&](int) {
    XI_CUDA_CHECK(cudaMemcpyAsync(swap->data(), dev.view.data, n, cudaMemcpyDeviceToHost, s));
  });
  const double h2d = time_op(s, 3, [&](int) {
    XI_CUDA_CHECK(cudaMemcpyAsync(dev.view.data, swap->data(), n, cudaMemcpyHostToDevice, s));
  });
  std::printf(
      "DMA ceiling, 256 MiB contiguous (cudaMemcpyAsync): device -> host %.1f GB/s, host -> device %.1f "
      "GB/s\n",
      static_cast<double>(n) / d2h / 1e9, static_cast<double>(n) / h2d / 1e9);
}

// What one run measures: everything (kAll), or the ceilings and one section (the flags of main()).
enum class Mode {
  kAll,
  kQuant,
  kQuantDot,
  kW8a8,
  kKvFp8,
  kPrefillLayer,
  kFp8Rows,
  kFp8Wide,
  kDecodeSteps,
  kB1Layers,
  kLayerStream,
  kWqGemm,
  kInt8Wgmma,
  kActQuant,
  kRopeKv,
  kPrefillAttn,
  kKvSwap
};

int run(bool quick, Mode mode) {
  cuda::CudaBackend be;
  const auto info = be.info();
  std::printf("device: %s, %d SMs, %.1f / %.1f GiB free\n", info.name.c_str(), be.num_sms(),
              static_cast<double>(info.free_memory) / (1 << 30), static_cast<double>(info.total_memory) / (1 << 30));
  cudaStream_t s = be.stream();
  g_stream = s;

  // ---- ceilings (shared with `xinfer bench`: backend/cuda/device_ceilings.h) ----
  const backend::DeviceCeilings ceil = cuda::measure_device_ceilings(be);
  const double bw = ceil.copy_gbs, peak = ceil.bf16_gemm_tflops;
  std::printf("ceiling: d2d copy %.0f GB/s (read + write)\n", bw);
  std::printf("ceiling: cuBLASLt bf16 GEMM 8192^3 %.0f TFLOP/s (random data)\n", peak);
  switch (mode) {
    case Mode::kAll:
      break;
    case Mode::kW8a8:
      bench_w8a8(be, bw, peak, quick);
      return 0;
    case Mode::kPrefillLayer:
      bench_prefill_layer(be, peak, bw);
      return 0;
    case Mode::kDecodeSteps:
      bench_decode_steps(be, peak, bw);
      return 0;
    case Mode::kActQuant:
      bench_act_quant(be, bw);
      return 0;
    case Mode::kRopeKv:
      bench_rope_kv(be, bw);
      return 0;
    case Mode::kPrefillAttn:
      bench_prefill_attention(be, peak, quick);
      return 0;
    case Mode::kKvSwap:
      bench_kv_swap(be);
      return 0;
    case Mode::kFp8Rows:
      bench_fp8_rows(be, peak);
      return 0;
    case Mode::kFp8Wide:
      bench_fp8_wide(be, peak);
      return 0;
    case Mode::kInt8Wgmma:
      bench_int8_wgmma(be, peak);
      return 0;
    case Mode::kKvFp8:
      bench_decode_attention_kv_fp8(be, bw, peak);
      return 0;
    case Mode::kQuant:
    case Mode::kQuantDot:
      bench_quant_linears(be, bw, peak, quick, mode == Mode::kQuantDot);
      return 0;
    case Mode::kB1Layers:
      bench_b1_layers(be, bw);
      return 0;
    case Mode::kWqGemm:
      bench_wq_gemm(be, bw, peak);
      return 0;
    case Mode::kLayerStream:  // the FP8 / W8A16 layers as the engine runs them, then the persistent probe
      for (const B1Format f : {B1Format::kFp8, B1Format::kW8a16}) {
        bench_decode_layer(be, bw, f);
        be.synchronize();
      }
      bench_layer_stream(be, bw);
      bench_consumer_rate(be, bw);
      return 0;
  }

  // ---- decode attention, Llama-3.1-8B shape ----
  bench_decode_attention(be, bw, quick);
  bench_decode_attention_kv_fp8(be, bw, peak);

  // ---- prefill attention ----
  bench_prefill_attention(be, peak, quick);

  // ---- RoPE + KV write fused into decode attention vs the two launches ----
  bench_rope_attention(be, bw);

  // ---- Llama-3.1-8B GEMMs: cuBLASLt's heuristic first algorithm vs the tuned choice (gemm_tuner.h) ----
  struct Shape8b {
    const char* name;
    int n, k;
    bool f32_out;
    int max_m;      // token budget; the lm_head runs on logit rows only
    int per_token;      // launches per decoded token: one per layer, the lm_head once
    bool normed_input;  // after an RMSNorm (gemm_args.h): the tuner also times the norm folded into the GEMV
  };
  const Shape8b shapes[] = {{"qkv", 6144, 4096, false, 2048, 32, true},
                            {"o", 4096, 4096, false, 2048, 32, false},
                            {"gate_up", 28672, 4096, false, 2048, 32, true},
                            {"down", 4096, 14336, false, 2048, 32, false},
                            {"lm_head", 128256, 4096, true, 256, 1, false}};
  {
    std::vector<cuda::GemmShape> gs;
    for (const Shape8b& sh : shapes) gs.push_back({sh.n, sh.k, sh.f32_out, false, sh.max_m, sh.normed_input});
    cuda::GemmTunerOptions to;  // fresh measurements: no cache file
    to.show_progress = false;
    std::printf("%s\n", be.gemm().tune(gs, to, s).to_string().c_str());
    for (const auto& [key, nc] : be.gemm().normed_table())
      std::printf("normed GEMV n=%d k=%d m=%d: %s %.1f us vs add_rms_norm + plain choice %.1f us (%s)\n", key.n, key.k,
                  key.m, cuda::to_string(nc.gemv).c_str(), nc.us, nc.composed_us, nc.faster() ? "fused" : "composed");
  }
  auto choice_text = [](const cuda::GemmChoice& c) {
    return c.kind == cuda::GemmKind::kGemv ? cuda::to_string(c.gemv) : std::string(cuda::gemm_kind_name(c.kind));
  };
  std::vector<std::string> m1_lines;
  double token_heuristic = 0, token_tuned = 0, token_roofline = 0;
  std::vector<int> ms = quick ? std::vector<int>{1, 8, 2048} : std::vector<int>{1, 8, 64, 256, 2048};
  for (const Shape8b& sh : shapes) {
    const size_t wbytes = static_cast<size_t>(sh.n) * sh.k * 2;
    const int copies = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / wbytes, 1, 8));
    std::vector<backend::DeviceTensor> ws;
    for (int c = 0; c < copies; ++c) {
      ws.push_back(be.allocate(DType::kBF16, Shape{sh.n, sh.k}));
      fill(ws.back().view, 10 + c, 0.05f);
    }
    for (int m : ms) {
      if (m > sh.max_m) continue;
      auto x = be.allocate(DType::kBF16, Shape{m, sh.k});
      fill(x.view, 20);
      auto y = be.allocate(sh.f32_out ? DType::kF32 : DType::kBF16, Shape{m, sh.n});
      auto args = [&](int i) {
        return cuda::GemmArgs{static_cast<const __nv_bfloat16*>(x.view.data),
                              static_cast<const __nv_bfloat16*>(ws[static_cast<size_t>(i % copies)].view.data), nullptr,
                              y.view.data, sh.f32_out, m, sh.n, sh.k};
      };
      const double th = time_op(s, 10, [&](int i) { be.gemm().cublaslt().run(args(i), s); });
      const double tt = time_op(s, 10, [&](int i) { be.linear(x.view, {ws[static_cast<size_t>(i % copies)].view, {}}, y.view); });
      const std::string what = std::string("gemm ") + sh.name + " m=" + std::to_string(m) + " n=" + std::to_string(sh.n) +
                               " k=" + std::to_string(sh.k);
      const std::string chosen = choice_text(be.gemm().choice_for(args(0)));
      const double bytes = static_cast<double>(wbytes) + static_cast<double>(x.view.bytes() + y.view.bytes());
      if (m <= 256) {
        report(what + " heuristic", th, bytes, false, bw);
        report(what + " tuned: " + chosen, tt, bytes, false, bw);
      } else {
        report(what + " heuristic", th, 2.0 * m * sh.n * sh.k, true, peak);
        report(what + " tuned: " + chosen, tt, 2.0 * m * sh.n * sh.k, true, peak);
      }
      if (m == 1) {
        const double roof = bytes / (bw * 1e9);
        char line[256];
        std::snprintf(line, sizeof(line),
                      "m=1 %-8s roofline %6.1f us (%5.1f MB): heuristic %6.1f us (%5.1f%%), tuned %6.1f us (%5.1f%%) "
                      "%.2fx  [%s]",
                      sh.name, roof * 1e6, bytes / 1e6, th * 1e6, 100 * roof / th, tt * 1e6, 100 * roof / tt, th / tt,
                      chosen.c_str());
        m1_lines.push_back(line);
        std::printf("%s\n", line);
        token_heuristic += sh.per_token * th;
        token_tuned += sh.per_token * tt;
        token_roofline += sh.per_token * roof;
      }
    }
  }
  bench_sampling(be, bw);
  bench_decode_layer(be, bw, B1Format::kBf16);
  const std::vector<std::string> quant_lines = bench_quant_linears(be, bw, peak, quick);
  be.synchronize();

  std::printf("\n==== gpu_kernel_bench summary (ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s) ====\n", bw, peak);
  for (const Row& r : rows)
    std::printf("%-44s %9.1f us %8.1f %-7s %5.1f%% of ceiling\n", r.what.c_str(), r.us, r.achieved, r.unit,
                100.0 * r.achieved / r.ceiling);
  for (const std::string& l : m1_lines) std::printf("%s\n", l.c_str());
  for (const std::string& l : quant_lines) std::printf("%s\n", l.c_str());
  if (token_tuned > 0)
    std::printf("8B batch-1 decode GEMMs per token (32 layers + lm_head): roofline %.2f ms, heuristic %.2f ms (%.1f%%), "
                "tuned %.2f ms (%.1f%%)\n",
                token_roofline * 1e3, token_heuristic * 1e3, 100 * token_roofline / token_heuristic, token_tuned * 1e3,
                100 * token_roofline / token_tuned);
  return 0;
}

}  // namespace
}  // namespace xinfer::bench

int main(int argc, char** argv) {
  using xinfer::bench::Mode;
  bool quick = false;
  Mode mode = Mode::kAll;
  const struct {
    const char* flag;
    Mode mode;
  } modes[] = {{"--quant", Mode::kQuant},
               {"--quant-dot", Mode::kQuantDot},
               {"--w8a8", Mode::kW8a8},
               {"--kv-fp8", Mode::kKvFp8},
               {"--prefill-layer", Mode::kPrefillLayer},
               {"--fp8-rows", Mode::kFp8Rows},
               {"--fp8-wide", Mode::kFp8Wide},
               {"--decode-steps", Mode::kDecodeSteps},
               {"--b1-layers", Mode::kB1Layers},
               {"--layer-stream", Mode::kLayerStream},
               {"--wq-gemm", Mode::kWqGemm},
               {"--int8-wgmma", Mode::kInt8Wgmma},
               {"--act-quant", Mode::kActQuant},
               {"--rope-kv", Mode::kRopeKv},
               {"--prefill-attn", Mode::kPrefillAttn},
               {"--kv-swap", Mode::kKvSwap}};
  for (int i = 1; i < argc; ++i) {
    bool known = std::strcmp(argv[i], "--quick") == 0;
    quick = quick || known;
    for (const auto& m : modes)
      if (std::strcmp(argv[i], m.flag) == 0) {
        mode = m.mode;
        known = true;
      }
    if (!known) {
      std::fprintf(
          stderr,
          "usage: gpu_kernel_bench [--quick] [--quant] [--quant-dot] [--w8a8] [--kv-fp8] [--prefill-layer] "
          "[--fp8-rows] [--fp8-wide] [--decode-steps] [--b1-layers] [--layer-stream] [--wq-gemm] "
          "[--int8-wgmma] "
          "[--act-quant] [--rope-kv] "
          "[--prefill-attn] [--kv-swap]\n");
      return 2;
    }
  }
  return xinfer::bench::run(quick, mode);
}
