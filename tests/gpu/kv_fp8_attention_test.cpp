// The FP8 (e4m3) KV cache on CudaBackend against CpuBackend (the oracle: to_fp8_e4m3(x / scale) stores,
// to_float(code) * scale reads, attention in f32/f64 on the dequantized rows):
//  - rope_kv_write: the codes written for k (rotated) and v, and the rotated q, on mixed steps;
//  - paged attention over caches of identical codes (random N(0, 1) values quantized with the layer's
//    scales, subnormal codes and saturated ones included), through each GPU path: the split-KV decode
//    kernel (16-byte loads of 16 codes, dequantized in registers), the prefill kernels (through the backend's
//    choice, and on prefill-only steps kWgmmaSimple, kWgmmaWs (head dim 128) and mma.sync launched directly,
//    each with bf16 and with f16 MMAs) and the generic
//    kernel (other head dims); shapes as the bf16 attention tests (GQA 1, 4, 7, 8, 16, MQA; head dim 64 and
//    128; block sizes 1, 8, 16, 32; kv lengths 1, 54, 97, 2048, 2049, 5000; batches 1, 3, 17, 64, 300; a
//    graph bucket) with K and V scales != 1; every case with both decode variants (bf16 MMAs on codes
//    converted by integer ops, and the default f16 one: CudaBackend::set_fp8_kv_f16_mma), and grids of many
//    one-partition CTAs also at 8, 4 and 2 warps per CTA (CudaBackend::set_decode_many_warps);
//  - per-head scales (each kernel reads each KV head's own) and the keys' Hadamard rotation in rope_kv_write;
//  - a whole model (dummy weights, head dim 128 and 64) with an FP8 cache (one layer with per-head scales,
//    rotated keys) on both backends: greedy decode with
//    CUDA graphs recorded and replayed (bit-identical to the padded eager step), tokens equal to the CPU's
//    except at near-ties (gpu_test_util.h's top-2 gap rule), logits close to the CPU's and to the bf16
//    cache's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_test_util.h"
#include "gpu_test_util.h"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"
#include "xinfer/backend/cuda/kernels/attention/paged_prefill_attention.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/llama.h"

namespace xinfer::gpu_test {
namespace {

constexpr double kTol = 1e-2;  // relative L2 of bf16 results vs the f32 CPU backend (the bf16 tests' bound)

// The same e4m3 codes in an FP8 cache on each backend, with the layer's scales or, where head_scales_*
// are set, scales of each KV head.
struct Fp8Cache {
  backend::DeviceTensor kc, vc, kg, vg;
  float k_scale, v_scale;
  backend::DeviceTensor head_k_c{}, head_v_c{}, head_k_g{}, head_v_g{};
  backend::LayerKvCache cpu_cache() const {
    return {kc.view, vc.view, k_scale, v_scale, head_k_c.view, head_v_c.view};
  }
  backend::LayerKvCache gpu_cache() const {
    return {kg.view, vg.view, k_scale, v_scale, head_k_g.view, head_v_g.view};
  }
};

// Per-head scales of a case: head h gets the layer's scale times 1, 2, 3, 1, 2, ... (K) and 2, 1, 2, ... (V).
float head_k_scale(float k_scale, int h) { return k_scale * static_cast<float>(1 + h % 3); }
float head_v_scale(float v_scale, int h) { return v_scale * static_cast<float>(2 - h % 2); }

std::vector<uint8_t> random_codes(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint8_t> c(n);
  for (auto& x : c) x = to_fp8_e4m3(d(rng) / scale).bits;
  return c;
}

void upload_codes(backend::Backend& b, const TensorView& dst, const std::vector<uint8_t>& codes) {
  ASSERT_EQ(dst.bytes(), codes.size());
  if (&b == static_cast<backend::Backend*>(&gpu())) {
    XI_CUDA_CHECK(cudaMemcpy(dst.data, codes.data(), codes.size(), cudaMemcpyHostToDevice));
  } else {
    std::memcpy(dst.data, codes.data(), codes.size());
  }
}

// shape: [blocks, hkv, block_size, d]. per_head: each head's codes from N(0, 1) / its own scale.
Fp8Cache make_cache(const Shape& shape, float k_scale, float v_scale, std::mt19937& rng, bool per_head = false) {
  Fp8Cache c{cpu().allocate(DType::kFP8E4M3, shape), cpu().allocate(DType::kFP8E4M3, shape),
             gpu().allocate(DType::kFP8E4M3, shape), gpu().allocate(DType::kFP8E4M3, shape), k_scale, v_scale};
  const auto n = static_cast<size_t>(shape.numel());
  auto k = random_codes(n, k_scale, rng), v = random_codes(n, v_scale, rng);
  if (per_head) {
    const int hkv = static_cast<int>(shape[1]);
    const size_t row = static_cast<size_t>(shape[2] * shape[3]);
    std::vector<float> ks, vs;
    for (int h = 0; h < hkv; ++h) {
      ks.push_back(head_k_scale(k_scale, h));
      vs.push_back(head_v_scale(v_scale, h));
    }
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) {
      const auto h = static_cast<size_t>((i / row) % static_cast<size_t>(hkv));
      k[i] = to_fp8_e4m3(d(rng) / ks[h]).bits;
      v[i] = to_fp8_e4m3(d(rng) / vs[h]).bits;
    }
    const Shape hs{hkv};
    c.head_k_c = cpu().upload(host_view(ks, hs), DType::kF32);
    c.head_v_c = cpu().upload(host_view(vs, hs), DType::kF32);
    c.head_k_g = gpu().upload(host_view(ks, hs), DType::kF32);
    c.head_v_g = gpu().upload(host_view(vs, hs), DType::kF32);
  }
  upload_codes(cpu(), c.kc.view, k);
  upload_codes(cpu(), c.vc.view, v);
  upload_codes(gpu(), c.kg.view, k);
  upload_codes(gpu(), c.vg.view, v);
  return c;
}

std::vector<uint8_t> codes_of(backend::Backend& b, const TensorView& t) {
  std::vector<uint8_t> out(t.bytes());
  b.to_host_raw(t, out.data());
  return out;
}

struct Fp8Case {
  std::string name;
  int hq, hkv, d, block_size;
  std::vector<Seq> seqs;
  int width = 0;  // > 0: a graph bucket (tables padded, attention sized for width * block_size tokens)
  float k_scale = 0.05f, v_scale = 0.02f;
  bool per_head = false;  // each KV head its own scales (head_k_scale / head_v_scale)
};
void PrintTo(const Fp8Case& c, std::ostream* os) { *os << c.name; }

class Fp8AttentionTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8AttentionTest, MatchesCpu) {
  const Fp8Case& ac = GetParam();
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>()(ac.name)));
  const int total_blocks = 1 + blocks_needed(ac.seqs, ac.block_size);
  const backend::StepPlan plan = make_plan(ac.seqs, ac.block_size, shuffled_blocks(total_blocks, rng), ac.width);
  const int T = plan.num_tokens();
  const int width = (ac.hq + 2 * ac.hkv) * ac.d;
  const Fp8Cache cache =
      make_cache(Shape{total_blocks, ac.hkv, ac.block_size, ac.d}, ac.k_scale, ac.v_scale, rng, ac.per_head);
  auto qkv = upload_both(random_bf16(static_cast<size_t>(T) * width, rng), Shape{T, width});
  auto out = allocate_both(Shape{T, ac.hq * ac.d});
  poison(out.g.view);
  const float scale = 1.0f / std::sqrt(static_cast<float>(ac.d));
  cpu().paged_attention(cpu().upload_step(plan), qkv.c.view, ac.hq, ac.hkv, ac.d, scale, cache.cpu_cache(), out.c.view);
  const backend::StepMeta meta = gpu().upload_step(plan);
  // The decode kernel's prefetch modes (CudaBackend::set_fp8_kv_decode_prefetch: an L2 prefetch, a
  // shared-memory ring) fetch the same rows by another path into the same arithmetic: the output just made,
  // bit for bit.
  auto same_bits_each_prefetch = [&](const std::string& what) {
    const std::vector<float> want = download(gpu(), out.g.view);
    for (const int mode : {1, 2}) {
      gpu().set_fp8_kv_decode_prefetch(mode);
      poison(out.g.view);
      gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, cache.gpu_cache(), out.g.view);
      const std::vector<float> got = download(gpu(), out.g.view);
      size_t n = 0;
      for (size_t i = 0; i < got.size(); ++i) n += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
      EXPECT_EQ(n, 0u) << ac.name << " (" << what << "): prefetch mode " << mode << " differs from mode 0";
    }
    gpu().set_fp8_kv_decode_prefetch(0);
  };
  gpu().set_fp8_kv_f16_mma(false);  // the bf16-MMA decode variant first
  gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, cache.gpu_cache(), out.g.view);
  const Compare c = expect_close(out.g.view, out.c.view, kTol, ac.name);
  std::printf("[ fp8 attention ] %-34s T=%-5d rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(), T, c.rel_l2, c.max_abs);
  // Again (a graph replay runs the same launches): the split-KV merge counters must have reset themselves.
  const std::vector<float> first = download(gpu(), out.g.view);
  poison(out.g.view);
  gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, cache.gpu_cache(), out.g.view);
  const std::vector<float> second = download(gpu(), out.g.view);
  size_t differ = 0;
  for (size_t i = 0; i < first.size(); ++i) differ += std::memcmp(&first[i], &second[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << ac.name << ": second launch differs from the first";
  same_bits_each_prefetch("bf16-MMA variant");
  // The default f16 variant of the decode kernel (codes -> f16 by cvt, f16 MMAs) against the same oracle.
  gpu().set_fp8_kv_f16_mma(true);
  poison(out.g.view);
  gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, cache.gpu_cache(), out.g.view);
  const Compare c16 = expect_close(out.g.view, out.c.view, kTol, ac.name + " (f16 decode variant)");
  std::printf("[ fp8 attention ] %-34s f16 variant rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(), c16.rel_l2,
              c16.max_abs);
  same_bits_each_prefetch("f16 variant");
  // Many one-partition CTAs: the f16 variant at 8, 4 and 2 warps per CTA too.
  at_each_decode_warps(plan.num_seqs(), ac.hkv, ac.hq / ac.hkv, [&](int w) {
    poison(out.g.view);
    gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, cache.gpu_cache(), out.g.view);
    const Compare cw = expect_close(out.g.view, out.c.view, kTol, ac.name + " (" + std::to_string(w) + " warps)");
    std::printf("[ fp8 attention ] %-34s %d warps rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(), w, cw.rel_l2,
                cw.max_abs);
    same_bits_each_prefetch(std::to_string(w) + " warps");
  });
  // Prefill-only steps: both prefill kernels that read FP8 caches, launched directly whatever the backend's
  // choice (the mma.sync kernel's register loads; kWgmmaSimple's codes staged by cp.async and converted in
  // shared memory), against the same oracle.
  const bool prefill_only =
      std::all_of(ac.seqs.begin(), ac.seqs.end(), [](const Seq& q) { return q.q_len >= 2; });
  if (prefill_only && (ac.d == 64 || ac.d == 128)) {
    const cuda::AttentionPlanHost host = cuda::build_attention_plan(plan);
    const DeviceInts items(host.prefill_items);
    cuda::AttentionPlanView view{};
    view.num_prefill_items = host.num_prefill_items();
    view.prefill_items = items.ptr;
    cuda::PagedAttentionParams p = cuda::paged_attention_params(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale,
                                                                cache.gpu_cache(), out.g.view);
    const std::pair<cuda::PrefillKernel, const char*> kernels[] = {
        {cuda::PrefillKernel::kWgmmaSimple, "wgmma-s"},
        {cuda::PrefillKernel::kWgmmaWs, "wgmma-ws"},
        {cuda::PrefillKernel::kMmaSync, "mma.sync"}};
    // Codes -> bf16 for bf16 MMAs; codes -> f16 for f16 MMAs (the default).
    for (const bool f16 : {false, true})
      for (const auto& [kernel, label] : kernels) {
        if (kernel == cuda::PrefillKernel::kWgmmaWs && !cuda::prefill_ws_supports(ac.d)) continue;
        p.kv_fp8_f16 = f16;
        poison(out.g.view);
        cuda::launch_paged_prefill_attention(p, view, gpu().stream(), kernel);
        const std::string what = std::string(label) + (f16 ? " f16" : " bf16");
        const Compare ck = expect_close(out.g.view, out.c.view, kTol, ac.name + " (" + what + ")");
        std::printf("[ fp8 attention ] %-34s prefill %-13s rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(),
                    what.c_str(), ck.rel_l2, ck.max_abs);
      }
  }
}

std::vector<Seq> decode_batch(int batch, int max_len) {
  std::vector<int> lens;
  for (int i = 0; i < batch; ++i) lens.push_back(1 + static_cast<int>((static_cast<uint32_t>(i) * 2654435761u >> 7) % max_len));
  return decodes(lens);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Fp8AttentionTest,
    ::testing::Values(
        Fp8Case{"decode_gqa1_d128_bs16", 8, 8, 128, 16, decodes({1, 54, 97, 2048, 2100})},
        Fp8Case{"decode_gqa4_d128_bs16", 32, 8, 128, 16, decodes({1, 17, 54, 97, 300, 2048, 4097})},
        Fp8Case{"decode_gqa8_d128_bs1", 64, 8, 128, 1, decodes({1, 54, 97, 2049})},
        Fp8Case{"decode_mqa_d64_bs16", 8, 1, 64, 16, decodes({1, 54, 97, 2048, 33})},
        Fp8Case{"decode_gqa7_d128_bs16", 28, 4, 128, 16, decodes({54, 1000, 3})},
        Fp8Case{"decode_b1_gqa4_d128_5000", 32, 8, 128, 16, decodes({5000})},
        Fp8Case{"decode_b1_gqa4_d64_1", 32, 8, 64, 16, decodes({1})},
        Fp8Case{"decode_b3_gqa8_d128_bs32", 64, 8, 128, 32, decodes({1, 5000, 97})},
        Fp8Case{"decode_b3_gqa1_d64_bs8", 4, 4, 64, 8, decodes({54, 2048, 5000})},
        Fp8Case{"decode_b17_gqa8_d64_bs8", 16, 2, 64, 8, decode_batch(17, 2048)},
        Fp8Case{"decode_b64_gqa4_d128_bs16", 32, 8, 128, 16, decode_batch(64, 700)},
        Fp8Case{"decode_b300_gqa4_d128_bs16", 32, 8, 128, 16, decode_batch(300, 256)},
        Fp8Case{"decode_gqa16_d128_bs16", 16, 1, 128, 16, decodes({54, 2048, 1})},
        Fp8Case{"decode_b5_gqa4_d128_bucket4096", 32, 8, 128, 16, decodes({1, 54, 97, 700, 2048}), 4096 / 16},
        Fp8Case{"decode_scale1_gqa4_d128", 32, 8, 128, 16, decodes({97, 2049}), 0, 1.0f, 1.0f},
        Fp8Case{"prefill_gqa4_d128_bs16", 32, 8, 128, 16, {{0, 97}, {0, 54}, {0, 200}}},
        Fp8Case{"prefill_prefix_gqa4_d64", 8, 2, 64, 16, {{97, 33}, {2048, 70}, {5, 130}}},
        Fp8Case{"prefill_long_gqa4_d128", 32, 8, 128, 16, {{0, 1500}, {3584, 129}}},
        Fp8Case{"prefill_mqa_d64_bs1", 4, 1, 64, 1, {{10, 64}, {0, 129}}},
        Fp8Case{"prefill_long_gqa8_d64_bs32", 64, 8, 64, 32, {{0, 2048}, {1000, 300}}},
        Fp8Case{"mixed_gqa4_d128_bs16", 32, 8, 128, 16, {{53, 1}, {0, 97}, {2047, 1}, {100, 65}, {0, 1}, {0, 2}}},
        Fp8Case{"mixed_gqa8_d64_bs16_long_decode", 16, 2, 64, 16, {{4999, 1}, {0, 97}, {30, 1}, {200, 54}}},
        Fp8Case{"generic_d16_mixed", 4, 2, 16, 16, {{0, 7}, {32, 1}, {5, 33}, {2100, 1}}},
        Fp8Case{"generic_d32_bs1", 4, 2, 32, 1, {{0, 33}, {53, 1}}},
        Fp8Case{"generic_d80_mqa", 5, 1, 80, 16, {{0, 54}, {200, 1}}},
        // Per-head scales (compressed-tensors attn_head): every kernel reads each KV head's own.
        Fp8Case{"perhead_decode_gqa4_d128", 32, 8, 128, 16, decodes({1, 54, 97, 2048, 4097}), 0, 0.05f, 0.02f, true},
        Fp8Case{"perhead_decode_b300_gqa4_d128", 32, 8, 128, 16, decode_batch(300, 256), 0, 0.05f, 0.02f, true},
        Fp8Case{"perhead_prefill_gqa4_d128", 32, 8, 128, 16, {{0, 97}, {0, 1500}, {3584, 129}}, 0, 0.05f, 0.02f, true},
        Fp8Case{"perhead_mixed_gqa8_d64", 16, 2, 64, 16, {{4999, 1}, {0, 97}, {30, 1}, {200, 54}}, 0, 0.05f, 0.02f, true},
        Fp8Case{"perhead_generic_d16", 4, 2, 16, 16, {{0, 7}, {32, 1}, {5, 33}, {2100, 1}}, 0, 0.05f, 0.02f, true}),
    [](const auto& param_info) { return param_info.param.name; });

// rope_kv_write into FP8 caches: the codes of every written row equal the CPU's (both quantize the f32
// rotation of the same bf16 inputs; a code may differ only where the two f32 rotations differ in the last
// bit across a rounding boundary: at most one step, in at most 1 of 10^4 elements), the other rows untouched,
// q rotated as in the bf16 tests. Also with the keys' Hadamard rotation (backend/kv_rotation.h: the kernel's
// butterflies in the host's order, so the same f32 bits from the same RoPE results) and per-head scales.
TEST(Fp8RopeKvWrite, CodesMatchCpu) {
  for (const auto& [d, rotated] : std::vector<std::pair<int, bool>>{{64, false}, {128, false}, {16, false},
                                                                    {128, true}, {64, true}, {16, true}, {256, true}}) {
    SCOPED_TRACE("head_dim " + std::to_string(d) + (rotated ? ", rotated keys, per-head scales" : ""));
    std::mt19937 rng(11 + d);
    const int hq = 8, hkv = 2, bs = 16;
    const std::vector<Seq> seqs = {{0, 37}, {54, 1}, {2047, 1}, {16, 33}};
    const int total_blocks = 1 + blocks_needed(seqs, bs);
    const backend::StepPlan plan = make_plan(seqs, bs, shuffled_blocks(total_blocks, rng), 0);
    const int T = plan.num_tokens(), width = (hq + 2 * hkv) * d;
    const int max_pos = *std::max_element(plan.positions.begin(), plan.positions.end()) + 1;
    std::vector<float> cs(static_cast<size_t>(max_pos) * d);
    std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
    for (int p = 0; p < max_pos; ++p)
      for (int i = 0; i < d / 2; ++i) {
        const float a = angle(rng);
        cs[static_cast<size_t>(p) * d + i] = std::cos(a);
        cs[static_cast<size_t>(p) * d + d / 2 + i] = std::sin(a);
      }
    auto cos_sin = Both{cpu().upload(host_view(cs, Shape{max_pos, d}), DType::kF32),
                        gpu().upload(host_view(cs, Shape{max_pos, d}), DType::kF32)};
    const Fp8Cache cache = make_cache(Shape{total_blocks, hkv, bs, d}, 0.03f, 0.07f, rng, rotated);
    auto qkv = upload_both(random_bf16(static_cast<size_t>(T) * width, rng), Shape{T, width});
    backend::LayerKvCache cc = cache.cpu_cache(), cg = cache.gpu_cache();
    if (rotated) cc.k_rotation = cg.k_rotation = backend::KvRotation::kHadamard;
    cpu().rope_kv_write(cpu().upload_step(plan), qkv.c.view, hq, hkv, d, cos_sin.c.view, cc);
    gpu().rope_kv_write(gpu().upload_step(plan), qkv.g.view, hq, hkv, d, cos_sin.g.view, cg);
    const Compare q = expect_close(qkv.g.view, qkv.c.view, kTol, "rotated qkv");
    (void)q;
    for (const bool is_k : {true, false}) {
      const auto g = codes_of(gpu(), (is_k ? cache.kg : cache.vg).view);
      const auto c = codes_of(cpu(), (is_k ? cache.kc : cache.vc).view);
      ASSERT_EQ(g.size(), c.size());
      size_t differ = 0, far = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        if (g[i] == c[i]) continue;
        ++differ;
        const float a = to_float(fp8_e4m3{g[i]}), b = to_float(fp8_e4m3{c[i]});
        // neighbours: the same sign and adjacent codes (or +-0 vs the smallest subnormal)
        if (std::abs(static_cast<int>(g[i] & 0x7f) - static_cast<int>(c[i] & 0x7f)) > 1 ||
            ((g[i] ^ c[i]) & 0x80 && a != 0 && b != 0))
          ++far;
      }
      std::printf("[ fp8 rope_kv_write ] d=%d %s: %zu of %zu codes differ from the cpu's\n", d, is_k ? "k" : "v",
                  differ, g.size());
      EXPECT_EQ(far, 0u) << (is_k ? "k" : "v") << ": codes more than one step apart";
      if (is_k)  // rotated: each value a sum of d RoPE results, each of which may differ in its last bit
        EXPECT_LE(differ, g.size() / (rotated ? 1000 : 10000) + 1) << "k codes";
      else
        EXPECT_EQ(differ, 0u) << "v codes (the same f32 / scale on both)";
    }
  }
}

// ---- whole model ----

std::string fp8_model_dir(int head_dim) {
  std::string templ = (std::filesystem::temp_directory_path() / "xinfer_fp8kv_model_XXXXXX").string();
  XI_CHECK(::mkdtemp(templ.data()) != nullptr);
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 512},
                        {"intermediate_size", 1024}, {"num_hidden_layers", 2}, {"num_attention_heads", 512 / head_dim},
                        {"num_key_value_heads", 2}, {"head_dim", head_dim}, {"vocab_size", 1000},
                        {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5}, {"hidden_act", "silu"},
                        {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}},
                        {"tie_word_embeddings", false}, {"dtype", "bfloat16"}, {"bos_token_id", 1},
                        {"eos_token_id", 2}};
  std::ofstream(templ + "/config.json") << cfg.dump(2);
  return templ;
}

std::unique_ptr<model::LlamaModel> load_dummy(const std::string& dir, backend::Backend& be) {
  model::LoadOptions opt;
  opt.max_tokens = 2048;
  opt.max_logit_rows = 64;
  opt.show_progress = false;
  opt.load_format = model::LoadFormat::kDummy;
  opt.seed = 7;
  auto m = model::LlamaModel::load(dir, be, opt);
  XI_CHECK(m.ok()) << m.status().to_string();
  return std::move(*m);
}

int argmax(const float* row, int vocab) { return static_cast<int>(std::max_element(row, row + vocab) - row); }

TEST(Fp8KvModel, GreedyWithGraphsMatchesCpu) {
  for (const int head_dim : {128, 64}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    const std::string dir = fp8_model_dir(head_dim);
    auto mg = load_dummy(dir, gpu());
    auto mc = load_dummy(dir, cpu());
    const model::ModelConfig& c = mg->config();
    const int vocab = c.vocab_size, bs = 16, batch = 5;
    backend::KvCacheSpec spec{c.num_layers, 400, bs, c.num_kv_heads, c.head_dim, DType::kFP8E4M3};
    spec.k_scales = {0.02f, 0.02f, 0.05f, 0.04f};  // [layer, KV head]: layer 1 per head
    spec.v_scales = {0.01f, 0.01f, 0.03f, 0.02f};
    spec.k_rotation = backend::KvRotation::kHadamard;
    backend::KvCacheSpec spec_bf16{c.num_layers, 400, bs, c.num_kv_heads, c.head_dim, DType::kBF16};
    backend::KvCacheSpec spec_cpu = spec;
    engine::ModelRunner rg(*mg, gpu(), spec, engine::GraphMode::kOff);
    engine::ModelRunner rb(*mg, gpu(), spec_bf16, engine::GraphMode::kOff);
    engine::ModelRunner rc(*mc, cpu(), spec_cpu, engine::GraphMode::kOff);
    std::vector<std::vector<int32_t>> seqs(batch), tables(batch);
    int next_block = 1;
    for (int s = 0; s < batch; ++s) {
      const int len = s == 3 ? 1030 : 9 + (s * 67) % 292;
      for (int i = 0; i < len; ++i) seqs[static_cast<size_t>(s)].push_back((s * 131 + i * 17 + 5) % vocab);
      for (int b = 0; b < (len + 16 + bs - 1) / bs; ++b) tables[static_cast<size_t>(s)].push_back(next_block++);
    }
    ASSERT_LT(next_block, 400);
    std::vector<int32_t> last(batch);
    double worst_prefill = 0;
    for (int s = 0; s < batch; ++s) {
      engine::SequenceChunk chunk{seqs[static_cast<size_t>(s)], 0, tables[static_cast<size_t>(s)], true};
      const std::vector<float> g = rg.run(std::span(&chunk, 1));
      const std::vector<float> cc = rc.run(std::span(&chunk, 1));
      rb.run(std::span(&chunk, 1));
      const Compare cmp = compare(g, cc);
      EXPECT_EQ(cmp.nans, 0);
      EXPECT_LT(cmp.rel_l2, 0.05) << "prefill logits of sequence " << s;
      worst_prefill = std::max(worst_prefill, cmp.rel_l2);
      last[static_cast<size_t>(s)] = argmax(g.data(), vocab);
    }
    int flips = 0, steps_checked = 0;
    double worst_decode = 0, worst_vs_bf16 = 0;
    for (int step = 0; step < 8; ++step) {
      std::vector<engine::SequenceChunk> chunks;
      for (int s = 0; s < batch; ++s)
        chunks.push_back({std::span(&last[static_cast<size_t>(s)], 1),
                          static_cast<int32_t>(seqs[static_cast<size_t>(s)].size()), tables[static_cast<size_t>(s)],
                          true});
      rg.set_graph_mode(engine::GraphMode::kPaddedEager);
      const std::vector<float> ref = rg.run(chunks);
      rg.set_graph_mode(engine::GraphMode::kOn);
      const std::vector<float> replayed = rg.run(chunks);
      size_t differ = 0;
      for (size_t i = 0; i < ref.size(); ++i) differ += std::memcmp(&ref[i], &replayed[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << "step " << step << ": graph replay differs from the padded eager step";
      const std::vector<float> cc = rc.run(chunks);
      const std::vector<float> bb = rb.run(chunks);
      const Compare cmp = compare(replayed, cc);
      EXPECT_EQ(cmp.nans, 0);
      EXPECT_LT(cmp.rel_l2, 0.05) << "step " << step;
      worst_decode = std::max(worst_decode, cmp.rel_l2);
      worst_vs_bf16 = std::max(worst_vs_bf16, compare(replayed, bb).rel_l2);
      for (int s = 0; s < batch; ++s) {
        const float* gr = &replayed[static_cast<size_t>(s) * vocab];
        const float* cr = &cc[static_cast<size_t>(s) * vocab];
        const int tg = argmax(gr, vocab), tc = argmax(cr, vocab);
        ++steps_checked;
        if (tg != tc) {
          ++flips;
          EXPECT_LT(cr[tc] - cr[tg], kDefaultGapMargin) << "step " << step << " seq " << s << ": cuda " << tg
                                                        << " vs cpu " << tc << " is not a near-tie";
        }
        seqs[static_cast<size_t>(s)].push_back(last[static_cast<size_t>(s)]);
        last[static_cast<size_t>(s)] = tg;  // both follow the CUDA tokens (teacher forcing)
      }
    }
    EXPECT_GE(rg.graph_replays(), 6);
    std::printf("[ fp8 model ] d=%d: prefill logits rel L2 vs cpu <= %.2e, decode <= %.2e, fp8 vs bf16 cache on "
                "cuda <= %.2e; %d of %d greedy tokens differ from the cpu's (near-ties); %lld graph replays\n",
                head_dim, worst_prefill, worst_decode, worst_vs_bf16, flips, steps_checked,
                static_cast<long long>(rg.graph_replays()));
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace xinfer::gpu_test
