// Tensor parallelism on CUDA (docs/tensor_parallel.md), on the GPU machine:
//  - NcclCommunicator with one rank: all_reduce_sum (bf16, f32) leaves the tensor as it is, all_gather_columns
//    copies, barrier returns; NCCL_NVLS_ENABLE is 0 unless the environment set it;
//  - the tensor-parallel code path with one NCCL rank (LlamaModel::forward_sharded: unfused o / down, all-reduce,
//    all-gathered lm_head) equals the plain path on the golden models: greedy tokens identical over a prefill and
//    16 decode steps, logits within bf16 tolerance (the plain path fuses the o / down GEMVs into the norm chain);
//  - CUDA graphs under the tensor-parallel code path (one NCCL rank: its all-reduces and the logits all-gather are
//    real NCCL calls, recorded into the decode graphs): replaying equals the padded eager steps bit for bit and
//    the plain path's greedy tokens;
//  - with two or more GPUs, an Engine at TP 2 gives TP 1's greedy tokens, with graphs and asynchronous scheduling
//    (the default) and eagerly (skipped on one GPU);
//  - the vocabulary-parallel embedding's masked lookup (TpEmbedding; no NCCL needed): every rank's shard of an odd
//    vocabulary gives the CPU oracle's rows bit for bit (its ids' rows, -0.0 elsewhere), and the shards' sum is
//    the whole table's lookup bit for bit. The one-rank TP path above runs the embedding all-reduce (a real NCCL
//    call, recorded into the decode graphs);
//  - NcclStartup: a rank that never joins makes the start-up fail within the timeout, naming it (one GPU).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/llama.h"
#if defined(XINFER_HAVE_NCCL)
#include "xinfer/backend/cuda/nccl_communicator.h"
#endif

namespace xinfer::gpu_test {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Backend::embedding with a vocabulary shard (backend.h VocabRows; ModelShard's split of V = 301 over 2, 3, 4
// ranks), hidden 72 (16-byte copies) and 13 (the scalar path).
TEST(TpEmbedding, VocabularyShardLookupsSumToTheWholeLookup) {
  const int64_t vocab = 301;
  model::ModelConfig c;
  c.intermediate_size = 12;
  c.num_layers = 1;
  c.num_heads = 12;
  c.num_kv_heads = 12;
  c.head_dim = 8;
  c.vocab_size = vocab;
  for (const int64_t hidden : {int64_t{72}, int64_t{13}}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    c.hidden_size = hidden;
    std::mt19937 rng(static_cast<uint32_t>(hidden));
    auto table = upload_both(random_bf16(static_cast<size_t>(vocab * hidden), rng), Shape{vocab, hidden});
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < vocab; ++i) ids.push_back((i * 37) % static_cast<int32_t>(vocab));  // every id
    backend::StepPlan plan;
    plan.token_ids = ids;
    plan.positions.assign(ids.size(), 0);
    plan.slot_mapping.assign(ids.size(), 0);
    plan.query_start_loc = {0, static_cast<int32_t>(ids.size())};
    plan.seq_lens = {1};
    plan.max_blocks_per_seq = 1;
    plan.block_tables = {0};
    plan.max_seq_len = 1;
    const backend::StepMeta cstep = cpu().upload_step(plan), gstep = gpu().upload_step(plan);
    const int64_t T = static_cast<int64_t>(ids.size());
    backend::DeviceTensor whole = gpu().allocate(DType::kBF16, Shape{T, hidden});
    gpu().embedding(gstep, table.g.view, whole.view);
    const std::vector<float> want = download(gpu(), whole.view);
    for (int n : {2, 3, 4}) {
      SCOPED_TRACE("tp " + std::to_string(n));
      std::vector<float> sum(want.size(), -0.0f);
      for (int r = 0; r < n; ++r) {
        const model::ModelShard s = *model::ModelShard::make(c, n, r);
        const backend::VocabRows rows{s.vocab_begin, vocab};
        auto out = allocate_both(Shape{T, hidden});
        poison(out.g.view);
        cpu().embedding(cstep, table.c.view.rows(s.vocab_begin, s.vocab_end), out.c.view, rows);
        gpu().embedding(gstep, table.g.view.rows(s.vocab_begin, s.vocab_end), out.g.view, rows);
        const std::vector<float> g = download(gpu(), out.g.view), cref = download(cpu(), out.c.view);
        ASSERT_EQ(g.size(), cref.size());
        for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(bits_of(g[i]), bits_of(cref[i])) << "rank " << r << " element " << i;
        for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
      }
      for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(bits_of(sum[i]), bits_of(want[i])) << "element " << i;
    }
  }
}

#if defined(XINFER_HAVE_NCCL)

std::unique_ptr<cuda::NcclCommunicator> one_rank() {
  auto id = cuda::NcclCommunicator::new_id();
  XI_CHECK(id.ok()) << id.status().to_string();
  auto c = cuda::NcclCommunicator::create(*id, 1, 0, 0, gpu().stream(), std::chrono::seconds(60));
  XI_CHECK(c.ok()) << c.status().to_string();
  return std::move(*c);
}

TEST(NcclCommunicator, OneRankCollectivesAreIdentities) {
  auto comm = one_rank();
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  ASSERT_NE(nvls, nullptr);
  std::mt19937 rng(1);
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const std::vector<float> v = random_bf16(97 * 3, rng);
    backend::DeviceTensor t = gpu().upload(host_view(v, Shape{97, 3}), dt);
    comm->all_reduce_sum(t.view);
    EXPECT_EQ(download(gpu(), t.view), v);
    backend::DeviceTensor out = gpu().allocate(dt, Shape{97, 3});
    poison(out.view);
    const std::vector<int64_t> offsets{0, 3};
    comm->reserve_all_gather(97, offsets, dt);
    comm->all_gather_columns(t.view, out.view, offsets);
    EXPECT_EQ(download(gpu(), out.view), v);
  }
  std::vector<int32_t> ids(37);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 7 + 1);
  backend::DeviceTensor d = gpu().allocate(DType::kI32, Shape{37});
  XI_CUDA_CHECK(cudaMemcpy(d.view.data, ids.data(), d.view.bytes(), cudaMemcpyHostToDevice));
  comm->broadcast(d.view, 0);
  std::vector<int32_t> back(37);
  gpu().to_host_raw(d.view, back.data());
  EXPECT_EQ(back, ids);
  comm->barrier();
}

// Prefill of `prompt`, then `steps` greedy decodes; every step's logits row and the chosen tokens.
struct Path {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};
Path run_path(model::LlamaModel& m, const std::vector<int32_t>& prompt, int steps,
              engine::GraphMode graphs = engine::GraphMode::kOff, int64_t* replays = nullptr) {
  const model::ModelConfig& c = m.config();
  backend::KvCacheSpec spec{c.num_layers, 17, 16, m.shard().num_kv_heads, c.head_dim, DType::kBF16};
  engine::ModelRunner runner(m, gpu(), spec, graphs);
  std::vector<int32_t> blocks;
  for (int b = 1; b <= 16; ++b) blocks.push_back(b);
  Path p;
  std::vector<int32_t> feed = prompt;
  int32_t pos = 0;
  for (int s = 0; s <= steps; ++s) {
    engine::SequenceChunk chunk{feed, pos, blocks, true};
    const std::vector<float>& logits = runner.run(std::span(&chunk, 1));
    p.logits.push_back(logits);
    pos += static_cast<int32_t>(feed.size());
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    p.tokens.push_back(next);
    feed = {next};
  }
  if (replays != nullptr) *replays = runner.graph_replays();
  return p;
}

TEST(NcclCommunicator, OneRankTensorParallelPathEqualsThePlainPath) {
  for (const std::string name : {"llama_gqa", "qwen2", "llama_tied"}) {
    SCOPED_TRACE(name);
    const std::string dir = "tests/golden/" + name;
    model::LoadOptions opt;
    opt.max_tokens = 64;
    opt.max_logit_rows = 8;
    opt.max_model_len = 256;
    opt.show_progress = false;
    auto plain = model::LlamaModel::load(dir, gpu(), opt);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    auto comm = one_rank();
    model::LoadOptions tp_opt = opt;
    tp_opt.comm = comm.get();  // tp_size 1: the sharded code path alone
    auto tp = model::LlamaModel::load(dir, gpu(), tp_opt);
    ASSERT_TRUE(tp.ok()) << tp.status().to_string();
    // One rank's vocabulary shard is the whole table (tied: also its lm_head, one copy).
    EXPECT_EQ((*tp)->embedding().out_features(), (*tp)->config().vocab_size);
    if ((*tp)->config().tie_word_embeddings) {
      EXPECT_EQ((*tp)->lm_head().weight.data, (*tp)->embedding().weight.data);
    }
    EXPECT_EQ((*tp)->weight_bytes(), (*plain)->weight_bytes());
    const std::vector<int32_t> prompt{1, 17, 42, 99, 7, 3, 250, 11};
    const Path a = run_path(**plain, prompt, 16), b = run_path(**tp, prompt, 16);
    EXPECT_EQ(b.tokens, a.tokens);
    double max_diff = 0, max_abs = 0;
    for (size_t s = 0; s < a.logits.size(); ++s)
      for (size_t i = 0; i < a.logits[s].size(); ++i) {
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a.logits[s][i] - b.logits[s][i])));
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(a.logits[s][i])));
      }
    std::printf("%s: one-rank TP path vs plain: max |dlogit| %.3g (max |logit| %.3g)\n", name.c_str(), max_diff,
                max_abs);
    EXPECT_LT(max_diff, 0.05 * std::max(1.0, max_abs));
  }
}

TEST(NcclCommunicator, OneRankGraphsUnderTheTensorParallelPathReplayTheEagerSteps) {
  for (const std::string name : {"llama_gqa", "qwen2"}) {
    SCOPED_TRACE(name);
    const std::string dir = "tests/golden/" + name;
    model::LoadOptions opt;
    opt.max_tokens = 64;
    opt.max_logit_rows = 8;
    opt.max_model_len = 256;
    opt.show_progress = false;
    auto plain = model::LlamaModel::load(dir, gpu(), opt);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    auto comm = one_rank();
    model::LoadOptions tp_opt = opt;
    tp_opt.comm = comm.get();
    auto tp = model::LlamaModel::load(dir, gpu(), tp_opt);
    ASSERT_TRUE(tp.ok()) << tp.status().to_string();
    const std::vector<int32_t> prompt{1, 17, 42, 99, 7, 3, 250, 11};
    int64_t replays = 0;
    const Path eager = run_path(**tp, prompt, 16, engine::GraphMode::kPaddedEager);
    const Path graphs = run_path(**tp, prompt, 16, engine::GraphMode::kOn, &replays);
    const Path ref = run_path(**plain, prompt, 16);
    EXPECT_EQ(replays, 16) << "every decode step replays a recording";
    EXPECT_EQ(graphs.tokens, eager.tokens);
    EXPECT_EQ(graphs.logits, eager.logits) << "a replay must equal the padded eager step bit for bit";
    EXPECT_EQ(graphs.tokens, ref.tokens) << "greedy tokens of the plain path";
  }
}

// More ranks than GPUs: refused from config.json alone (a directory without weights), naming the count.
TEST(NcclCommunicator, MoreRanksThanGpusFailBeforeAnyWeightIsRead) {
  int devices = 0;
  XI_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "tp_config_only";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file("tests/golden/llama_gqa/config.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  engine::EngineConfig c;
  c.model_dir = dir.string();
  c.backend = engine::BackendKind::kCuda;
  c.tensor_parallel_size = devices < 2 ? 2 : 4;  // llama_gqa: 4 heads
  if (c.tensor_parallel_size <= devices) GTEST_SKIP() << devices << " GPUs: no size of llama_gqa exceeds them";
  auto e = engine::Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().to_string().find("tensor_parallel_size " + std::to_string(c.tensor_parallel_size) + " needs " +
                                        std::to_string(c.tensor_parallel_size) + " GPUs (one rank per GPU); this "
                                        "machine has " + std::to_string(devices) + " visible"),
            std::string::npos)
      << e.status().to_string();
}

TEST(NcclCommunicator, TwoGpusTp2EqualsTp1) {
  int devices = 0;
  XI_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "one GPU: TP 2 needs two";
  auto tokens = [](int tp, bool eager = false) {
    engine::EngineConfig c;
    c.model_dir = "tests/golden/llama_gqa";
    c.backend = engine::BackendKind::kCuda;
    c.tensor_parallel_size = tp;
    c.enable_cuda_graphs = !eager;
    c.async_scheduling = !eager;
    c.gpu_memory_utilization = 0.3;
    c.max_model_len = 128;
    auto e = engine::Engine::create(c);
    XI_CHECK(e.ok()) << e.status().to_string();
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> out;
    bool done = false;
    engine::GenerationRequest r;
    r.request_id = "a";
    r.prompt_ids = {1, 17, 42, 99, 7};
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 24;
    r.sampling.ignore_eos = true;
    XI_CHECK((*e)->submit(r, [&](engine::RequestOutput o) {
                 std::lock_guard<std::mutex> lock(mu);
                 out.insert(out.end(), o.new_token_ids.begin(), o.new_token_ids.end());
                 done = done || o.finished;
                 cv.notify_all();
               }).ok());
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return out;
  };
  const std::vector<int32_t> one = tokens(1);
  EXPECT_EQ(tokens(2), one) << "graphs + async scheduling";
  EXPECT_EQ(tokens(2, /*eager=*/true), one) << "eager";
}

// A start-up that cannot reach every rank fails within its timeout with a message naming the rank, its device
// and the group size, instead of hanging (vLLM #6370, #6201, #8058): rank 0 of a group of 2 whose rank 1 never
// joins (one GPU suffices). Its own suite: run it in a process of its own (it aborts a half-made communicator).
TEST(NcclStartup, AMissingRankFailsWithinTheTimeout) {
  auto id = cuda::NcclCommunicator::new_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  const auto t0 = std::chrono::steady_clock::now();
  auto c = cuda::NcclCommunicator::create(*id, 2, 0, 0, gpu().stream(), std::chrono::milliseconds(3000));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(c.ok()) << "a group of 2 with one rank must not form";
  const std::string msg = c.status().to_string();
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << msg;
  EXPECT_NE(msg.find("rank 0 (cuda:0) could not reach all 2 ranks within 3000 ms"), std::string::npos) << msg;
  EXPECT_LT(seconds, 10.0);
  std::printf("missing rank: failed after %.2f s: %s\n", seconds, msg.c_str());
}

#endif  // XINFER_HAVE_NCCL

}  // namespace
}  // namespace xinfer::gpu_test
