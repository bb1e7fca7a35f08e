// quantized_matmul GB/s per weight format on SmolLM2-135M's linear shapes, against the measured read
// bandwidth (the roofline of a GEMV: weight bytes / bandwidth), plus the whole model's linears per token.
//
//   quant_kernel_bench [--quick | --model-only | --act-order | --gguf-repack]
//
// --act-order: GPTQ act-order weights, the g_idx path against the columns sorted at load (input_perm), CPU
// time.
// --gguf-repack: each GGUF type that model/gguf_repack.h repacks, its GGUF kernel against the int kernel on
// the repacked rows (what a backend without that GGUF kernel runs), streamed from DRAM, 1 thread, CPU time.
//
// Each figure is "hot" (one matrix, called repeatedly: L2/L3-resident when it fits) and "cold" (as many
// copies of the matrix as fill 160 MB, called in turn, so the bytes stream from DRAM as in a real decode:
// the whole model is ~96 MB and L3 is 32 MB). GB/s = weight bytes (format_weight_bytes) / time.
// "model": 30 layers x (q 576x576, k 192x576, v 192x576, o 576x576, gate/up 1536x576, down 576x1536) in
// Q4_1 plus the lm_head 49152x576 in Q8_0, all distinct memory: SmolLM2's linears for one token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "roofline.h"
#include "xinfer/model/gguf_repack.h"
#include "xinfer/quant/quantized_linear.h"

namespace xq = xinfer::quant;
using xinfer::DType;
using xinfer::ThreadPool;

namespace {

struct Matrix {
  xq::QuantizedMatrix m;
  std::vector<uint8_t> weight, zeros;
  std::vector<float> scales, input_scale{0.02f};
};

void put_half(uint8_t* p, float v) {
  const uint16_t bits = xinfer::to_f16(v).bits;
  std::memcpy(p, &bits, 2);
}

// Random weights of the format, valid (finite scales) but otherwise arbitrary bytes.
std::unique_ptr<Matrix> make_matrix(const xq::WeightFormat& f, int64_t n, int64_t k, std::mt19937& rng) {
  auto w = std::make_unique<Matrix>();
  w->m.format = f;
  w->m.n = n;
  w->m.k = k;
  size_t weight_bytes = 0, groups = 0;
  if (const auto* g = std::get_if<xq::GgufFormat>(&f)) {
    weight_bytes = xq::format_weight_bytes(f, n, k);
    (void)g;
  } else if (const auto* d = std::get_if<xq::DenseFormat>(&f)) {
    weight_bytes = xinfer::dtype_bytes(d->dtype, static_cast<size_t>(n * k));
  } else if (const auto* ig = std::get_if<xq::IntGroupFormat>(&f)) {
    weight_bytes = static_cast<size_t>(n * k * ig->bits / 8);
    groups = static_cast<size_t>(n * ((k + ig->group_size - 1) / ig->group_size));
    if (ig->zero_point) w->zeros.assign(groups, 3);
  } else {
    weight_bytes = static_cast<size_t>(n * k);
    groups = static_cast<size_t>(n);
  }
  w->weight.resize(weight_bytes);
  for (size_t i = 0; i < weight_bytes; i += 4) {
    const uint32_t r = rng();
    std::memcpy(&w->weight[i], &r, std::min<size_t>(4, weight_bytes - i));
  }
  if (const auto* g = std::get_if<xq::GgufFormat>(&f)) {
    const size_t bb = static_cast<size_t>(xq::gguf_block_bytes(g->type));
    for (size_t off = 0; off < weight_bytes; off += bb) {
      put_half(&w->weight[off + (g->type == xq::GgufType::kQ6_K ? 208 : 0)], 0.01f);  // Q6_K's d is last
      if (g->type == xq::GgufType::kQ4_1 || g->type == xq::GgufType::kQ4_K)
        put_half(&w->weight[off + 2], -0.05f);
    }
  } else if (const auto* d = std::get_if<xq::DenseFormat>(&f)) {
    std::vector<float> v(static_cast<size_t>(n * k), 0.01f);
    xinfer::convert_from_f32(d->dtype, v.data(), w->weight.data(), v.size());
  } else if (std::holds_alternative<xq::W8A8Fp8Format>(f)) {
    for (uint8_t& b : w->weight) b &= 0x77;  // no NaNs
  }
  w->scales.assign(groups, 0.01f);
  w->m.weight = w->weight.data();
  w->m.scales = w->scales.empty() ? nullptr : w->scales.data();
  w->m.zeros = w->zeros.empty() ? nullptr : w->zeros.data();
  w->m.input_scale = w->input_scale.data();
  return w;
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Wall seconds per call; *cpu_s (if given) gets the process CPU seconds per call, which with one thread is
// the time the kernel would take on an otherwise idle core (the development machine is shared).
template <typename F>
double seconds_per_call(F&& f, double min_total_s, double* cpu_s = nullptr) {
  f();  // warm-up
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  double elapsed = 0;
  do {
    f();
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < min_total_s);
  if (cpu_s != nullptr) *cpu_s = (process_cpu_seconds() - c0) / calls;
  return elapsed / calls;
}

struct Shape {
  const char* name;
  int64_t n, k;
};

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const bool model_only = argc > 1 && std::string(argv[1]) == "--model-only";
  const double min_s = quick ? 0.05 : 0.25;
  std::printf("quant_kernel_bench: simd %s\n", xq::simd_enabled() ? "avx2+fma" : "portable");
  double read_bw[3] = {};
  for (int threads : {1, 2}) {
    const xinfer::bench::HostCeilings c = xinfer::bench::measure_host_ceilings(threads);
    read_bw[threads] = c.read_bandwidth_bytes_per_s;
    std::printf("measured: %d thread(s): DRAM read %.1f GB/s, copy (read+write) %.1f GB/s\n", threads,
                c.read_bandwidth_bytes_per_s / 1e9, c.bandwidth_bytes_per_s / 1e9);
  }
  if (argc > 1 && std::string(argv[1]) == "--gguf-repack") {
    // As many copies as fill 160 MB, called in turn (cold), 1 thread, process CPU time per call.
    std::mt19937 grng(13);
    const Shape sh{"2048x2048", 2048, 2048};
    std::printf("\n%-6s %-10s %4s %-14s %9s %9s %6s %-14s %9s %9s %6s %8s\n", "type", "NxK", "rows", "gguf",
                "us", "GB/s", "roof", "repacked", "us", "GB/s", "roof", "speed-up");
    for (xq::GgufType t : {xq::GgufType::kQ4_0, xq::GgufType::kQ4_1, xq::GgufType::kQ5_0, xq::GgufType::kQ8_0,
                           xq::GgufType::kQ4_K, xq::GgufType::kQ6_K}) {
      const xq::WeightFormat f = xq::GgufFormat{t};
      const size_t bytes = xq::format_weight_bytes(f, sh.n, sh.k);
      const size_t copies = std::max<size_t>(1, (160u << 20) / bytes);
      std::vector<std::unique_ptr<Matrix>> mats;
      std::vector<xinfer::model::HostLinear> repacked;
      for (size_t c = 0; c < copies; ++c) {
        mats.push_back(make_matrix(f, sh.n, sh.k, grng));
        auto h = xinfer::model::repack_gguf_rows(t, mats.back()->weight.data(), sh.n, sh.k);
        if (!h.ok()) {
          std::printf("%s: %s\n", xq::gguf_type_name(t), h.status().to_string().c_str());
          return 1;
        }
        repacked.push_back(std::move(*h));
      }
      const size_t int_bytes = xq::format_weight_bytes(repacked[0].format, sh.n, sh.k);
      ThreadPool pool(1);
      for (int64_t rows : {1, 8}) {
        std::vector<float> x(static_cast<size_t>(rows * sh.k), 0.3f), y(static_cast<size_t>(rows * sh.n));
        double a = 0, b = 0;
        size_t next = 0;
        seconds_per_call(
            [&] {
              xq::quantized_matmul(mats[next]->m, x.data(), rows, y.data(), &pool);
              next = (next + 1) % mats.size();
            },
            min_s, &a);
        seconds_per_call(
            [&] {
              xq::quantized_matmul(repacked[next].matrix(), x.data(), rows, y.data(), &pool);
              next = (next + 1) % repacked.size();
            },
            min_s, &b);
        const double gbs_a = static_cast<double>(bytes) / a / 1e9,
                     gbs_b = static_cast<double>(int_bytes) / b / 1e9;
        std::printf("%-6s %-10s %4lld %-14s %9.1f %9.1f %5.0f%% %-14s %9.1f %9.1f %5.0f%% %7.2fx\n",
                    xq::gguf_type_name(t), sh.name, static_cast<long long>(rows), xq::format_name(f).c_str(),
                    a * 1e6, gbs_a, 100.0 * gbs_a * 1e9 / read_bw[1],
                    xq::format_name(repacked[0].format).c_str(), b * 1e6, gbs_b,
                    100.0 * gbs_b * 1e9 / read_bw[1], a / b);
      }
    }
    std::printf(
        "roof: GB/s against the measured 1-thread DRAM read (%.1f GB/s), the roofline of a GEMV; us is\n"
        "process CPU time per call\n",
        read_bw[1] / 1e9);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--act-order") {
    // GPTQ act order: the g_idx path (a row dequantized at a time) against the columns sorted at load (the
    // contiguous-group kernel on x gathered by input_perm), hot matrix, 1 thread, process CPU time per call.
    std::mt19937 arng(11);
    std::printf("\n%-16s %-10s %4s %14s %14s %8s\n", "format", "NxK", "rows", "g_idx us", "sorted us",
                "speed-up");
    for (const xq::IntGroupFormat f : {xq::IntGroupFormat{4, 128, true}, xq::IntGroupFormat{4, 64, false}})
      for (const Shape& sh : {Shape{"576x1536", 576, 1536}, Shape{"1536x576", 1536, 576}}) {
        if (sh.k % f.group_size != 0) continue;
        auto w = make_matrix(f, sh.n, sh.k, arng);
        std::vector<int32_t> g_idx(static_cast<size_t>(sh.k)), perm(static_cast<size_t>(sh.k));
        for (int64_t c = 0; c < sh.k; ++c)
          g_idx[static_cast<size_t>(c)] = static_cast<int32_t>(c / f.group_size);
        std::shuffle(g_idx.begin(), g_idx.end(), arng);
        for (int64_t c = 0; c < sh.k; ++c) perm[static_cast<size_t>(c)] = static_cast<int32_t>(c);
        std::shuffle(perm.begin(), perm.end(), arng);
        xq::QuantizedMatrix with_g_idx = w->m, sorted = w->m;
        with_g_idx.g_idx = g_idx.data();
        sorted.input_perm = perm.data();
        ThreadPool pool(1);
        for (int64_t rows : {1, 8}) {
          std::vector<float> x(static_cast<size_t>(rows * sh.k), 0.3f), y(static_cast<size_t>(rows * sh.n));
          double a = 0, b = 0;
          seconds_per_call([&] { xq::quantized_matmul(with_g_idx, x.data(), rows, y.data(), &pool); }, min_s,
                           &a);
          seconds_per_call([&] { xq::quantized_matmul(sorted, x.data(), rows, y.data(), &pool); }, min_s, &b);
          std::printf("%-16s %-10s %4lld %14.1f %14.1f %7.2fx\n", xq::format_name(f).c_str(), sh.name,
                      static_cast<long long>(rows), a * 1e6, b * 1e6, a / b);
        }
      }
    return 0;
  }
  const std::vector<xq::WeightFormat> formats = {
      xq::GgufFormat{xq::GgufType::kQ4_1},
      xq::GgufFormat{xq::GgufType::kQ8_0},
      xq::GgufFormat{xq::GgufType::kQ4_0},
      xq::GgufFormat{xq::GgufType::kQ4_K},
      xq::IntGroupFormat{4, 128, false},
      xq::IntGroupFormat{4, 128, true},
      xq::IntGroupFormat{8, 128, false},
      xq::Int8ChannelFormat{},
      xq::W8A8Int8Format{},
      xq::W8A8Fp8Format{},
      xq::DenseFormat{DType::kBF16},
      xq::DenseFormat{DType::kF32},
  };
  const Shape shapes[] = {{"576x576", 576, 576},
                          {"192x576", 192, 576},
                          {"1536x576", 1536, 576},
                          {"576x1536", 576, 1536},
                          {"49152x576", 49152, 576}};
  std::mt19937 rng(7);
  std::printf("\n%-22s %-10s %3s %4s %10s %10s %10s %8s %9s\n", "format", "NxK", "thr", "rows", "hot GB/s",
              "cold GB/s", "cold us", "roofline", "cpu GB/s");
  for (const xq::WeightFormat& f : formats) {
    if (model_only) break;
    for (const Shape& s : shapes) {
      if (quick && s.n == 49152 && !std::holds_alternative<xq::GgufFormat>(f)) continue;
      if (const auto* g = std::get_if<xq::GgufFormat>(&f); g && s.k % xq::gguf_block_elems(g->type) != 0)
        continue;
      const size_t bytes = xq::format_weight_bytes(f, s.n, s.k);
      const size_t copies = std::max<size_t>(1, (160u << 20) / bytes);
      std::vector<std::unique_ptr<Matrix>> mats;
      for (size_t c = 0; c < copies; ++c) mats.push_back(make_matrix(f, s.n, s.k, rng));
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (int64_t rows : {1, 8}) {
          std::vector<float> x(static_cast<size_t>(rows * s.k), 0.3f), y(static_cast<size_t>(rows * s.n));
          const double hot = seconds_per_call(
              [&] { xq::quantized_matmul(mats[0]->m, x.data(), rows, y.data(), &pool); }, min_s);
          size_t next = 0;
          double cold_cpu = 0;
          const double cold = seconds_per_call(
              [&] {
                xq::quantized_matmul(mats[next]->m, x.data(), rows, y.data(), &pool);
                next = (next + 1) % mats.size();
              },
              min_s, &cold_cpu);
          const double cold_gbs = static_cast<double>(bytes) / cold / 1e9;
          std::printf("%-22s %-10s %3d %4lld %10.1f %10.1f %10.1f %7.0f%% %9.1f\n",
                      xq::format_name(f).c_str(), s.name, threads, static_cast<long long>(rows),
                      static_cast<double>(bytes) / hot / 1e9, cold_gbs, cold * 1e6,
                      100.0 * cold_gbs * 1e9 / read_bw[threads],
                      static_cast<double>(bytes) * threads / cold_cpu / 1e9);
        }
      }
    }
  }

  // SmolLM2-135M's linears for one token (rows 1) or 8 tokens (rows 8), all weights distinct.
  std::printf("\nSmolLM2-135M linears (30 layers Q4_1 + lm_head Q8_0), distinct weights:\n");
  std::vector<std::unique_ptr<Matrix>> model;
  const Shape layer[] = {{"q", 576, 576},     {"k", 192, 576},   {"v", 192, 576},    {"o", 576, 576},
                         {"gate", 1536, 576}, {"up", 1536, 576}, {"down", 576, 1536}};
  size_t model_bytes = 0;
  for (int l = 0; l < 30; ++l) {
    for (const Shape& s : layer) {
      model.push_back(make_matrix(xq::GgufFormat{xq::GgufType::kQ4_1}, s.n, s.k, rng));
      model_bytes += model.back()->weight.size();
    }
  }
  model.push_back(make_matrix(xq::GgufFormat{xq::GgufType::kQ8_0}, 49152, 576, rng));
  model_bytes += model.back()->weight.size();
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t rows : {1, 8}) {
      std::vector<float> x(static_cast<size_t>(rows * 1536), 0.3f), y(static_cast<size_t>(rows * 49152));
      double cpu = 0;
      const double t = seconds_per_call(
          [&] {
            for (const auto& m : model) xq::quantized_matmul(m->m, x.data(), rows, y.data(), &pool);
          },
          quick ? 0.3 : 1.0, &cpu);
      std::printf(
          "  %d thread(s) rows %lld: %.2f ms per forward (%.2f ms per token), %.1f GB/s, roofline %.2f ms "
          "(%.0f%%); CPU %.2f ms per forward\n",
          threads, static_cast<long long>(rows), t * 1e3, t * 1e3 / static_cast<double>(rows),
          static_cast<double>(model_bytes) / t / 1e9,
          static_cast<double>(model_bytes) / read_bw[threads] * 1e3,
          100.0 * static_cast<double>(model_bytes) / read_bw[threads] / t, cpu * 1e3);
    }
  }
  std::printf("  weight bytes per forward: %.1f MB\n", static_cast<double>(model_bytes) / 1e6);
  // Prefill: the decoder linears (no lm_head: a prefill computes logits for its last token only) at many
  // rows, the register-tiled GEMM against the GEMV kernel (rows in tiles of 4), 1 thread, by process CPU
  // time (what the kernel takes on an idle core; the machine is shared). GMAC/s counts the multiply-adds of
  // the integer products (rows x N x K per linear).
  {
    ThreadPool pool(1);
    int64_t macs_per_row = 0;
    for (const Shape& s : layer) macs_per_row += 30 * s.n * s.k;
    std::printf("\nSmolLM2-135M decoder linears at prefill rows, 1 thread, CPU time (GEMM from 8 rows by default):\n");
    for (int64_t rows : {4, 8, 16, 32, 128}) {
      std::vector<float> x(static_cast<size_t>(rows * 1536)), y(static_cast<size_t>(rows * 1536));
      std::mt19937 xr(3);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(xr);
      double ms[2];
      for (int gemm = 0; gemm < 2; ++gemm) {
        xq::set_gguf_gemm_min_rows(gemm ? 1 : int64_t{1} << 40);
        double cpu = 0;
        seconds_per_call(
            [&] {
              for (size_t i = 0; i + 1 < model.size(); ++i)
                xq::quantized_matmul(model[i]->m, x.data(), rows, y.data(), &pool);
            },
            quick ? 0.3 : 1.0, &cpu);
        ms[gemm] = 1e3 * cpu;
      }
      xq::set_gguf_gemm_min_rows(8);
      std::printf("  rows %3lld: GEMV %.2f ms (%.1f GMAC/s), GEMM %.2f ms (%.1f GMAC/s): %.2fx\n",
                  static_cast<long long>(rows), ms[0], static_cast<double>(macs_per_row * rows) / ms[0] / 1e6,
                  ms[1], static_cast<double>(macs_per_row * rows) / ms[1] / 1e6, ms[0] / ms[1]);
    }
  }
  // The decode calls quantized_matmul 211 times per token: the pool's wake-up cost counts 211 times.
  {
    ThreadPool pool(2);
    const double t = seconds_per_call([&] { pool.parallel_for(0, 2, [](int64_t, int64_t) {}); }, 0.3);
    std::printf(
        "  ThreadPool(2) parallel_for dispatch (empty tasks): %.1f us per call, %.2f ms per 211 calls\n",
        t * 1e6, t * 211 * 1e3);
  }
  return 0;
}
