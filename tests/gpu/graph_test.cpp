// CUDA graphs for decode steps (ModelRunner GraphMode::kOn on the CudaBackend): a recorded and replayed
// decode step must produce bit-identical logits to the same padded step run op by op
// (GraphMode::kPaddedEager), for batch sizes 1, 3, 5 and 17 (padded to buckets 1, 4, 8 and 32), and
// stay within bf16 noise of the unpadded eager step (GraphMode::kOff: padded rows are harmless).
//
// Model: dummy weights in a head_dim 128 / GQA 4 shape (the fast decode kernel; split-KV always runs,
// since attention is sized for the padded block-table width of >= 256 tokens). Sequences of different
// lengths, one past 1000 tokens (block-table width 64), decode 6 steps each; KV written by the reference
// and the replay of the same step are the same values in the same slots.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>

#include <nlohmann/json.hpp>

#include "../unit/engine/pipelined_greedy_check.h"
#include "gpu_test_util.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/llama.h"

namespace xinfer::gpu_test {
namespace {

std::string graph_model_dir() {
  static const std::string dir = [] {
    std::string templ = (std::filesystem::temp_directory_path() / "xinfer_graph_model_XXXXXX").string();
    XI_CHECK(::mkdtemp(templ.data()) != nullptr);
    nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 512},
                          {"intermediate_size", 1024}, {"num_hidden_layers", 2}, {"num_attention_heads", 8},
                          {"num_key_value_heads", 2}, {"head_dim", 128}, {"vocab_size", 1000},
                          {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-5}, {"hidden_act", "silu"},
                          {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}},
                          {"tie_word_embeddings", false}, {"dtype", "bfloat16"}, {"bos_token_id", 1},
                          {"eos_token_id", 2}};
    std::ofstream(templ + "/config.json") << cfg.dump(2);
    return templ;
  }();
  return dir;
}

// The model of graph_model_dir() on the GPU with dummy weights drawn from `seed`.
Result<std::unique_ptr<model::LlamaModel>> load_graph_model(int max_tokens, int max_logit_rows, uint64_t seed) {
  model::LoadOptions opt;
  opt.max_tokens = max_tokens;
  opt.max_logit_rows = max_logit_rows;
  opt.show_progress = false;
  opt.load_format = model::LoadFormat::kDummy;
  opt.seed = seed;
  return model::LlamaModel::load(graph_model_dir(), gpu(), opt);
}

int argmax(const float* row, int vocab) { return static_cast<int>(std::max_element(row, row + vocab) - row); }

TEST(CudaGraphs, DecodeReplayIsBitIdenticalToPaddedEager) {
  auto loaded = load_graph_model(2048, 64, 7);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  model::LlamaModel& m = **loaded;
  const model::ModelConfig& c = m.config();
  const int vocab = c.vocab_size, bs = 16;
  size_t free_before = 0, total = 0;
  XI_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  int64_t total_captures = 0;

  for (const int batch : {1, 3, 5, 17}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    engine::ModelRunner runner(m, gpu(), backend::KvCacheSpec{c.num_layers, 1600, bs, c.num_kv_heads, c.head_dim,
                                                              DType::kBF16},
                               engine::GraphMode::kOff);
    // Prompts of 9..300 tokens (one of 1030 for batch 17); blocks handed out in order, room for 8 more tokens.
    std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(batch)), tables(static_cast<size_t>(batch));
    int next_block = 1;
    for (int s = 0; s < batch; ++s) {
      const int len = (batch == 17 && s == 11) ? 1030 : 9 + (s * 67 + batch * 13) % 292;
      for (int i = 0; i < len; ++i) seqs[static_cast<size_t>(s)].push_back((s * 131 + i * 17 + 5) % vocab);
      for (int b = 0; b < (len + 8 + bs - 1) / bs; ++b) tables[static_cast<size_t>(s)].push_back(next_block++);
    }
    ASSERT_LT(next_block, 1600);
    // Prefill each prompt (eager); its greedy token starts the decode.
    std::vector<int32_t> last(static_cast<size_t>(batch));
    for (int s = 0; s < batch; ++s) {
      engine::SequenceChunk chunk{seqs[static_cast<size_t>(s)], 0, tables[static_cast<size_t>(s)], true};
      const auto& lg = runner.run(std::span(&chunk, 1));
      last[static_cast<size_t>(s)] = argmax(lg.data(), vocab);
    }
    const int kSteps = 6;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<engine::SequenceChunk> chunks;
      for (int s = 0; s < batch; ++s)
        chunks.push_back({std::span(&last[static_cast<size_t>(s)], 1),
                          static_cast<int32_t>(seqs[static_cast<size_t>(s)].size()), tables[static_cast<size_t>(s)],
                          true});
      runner.set_graph_mode(engine::GraphMode::kPaddedEager);
      const std::vector<float> ref = runner.run(chunks);
      runner.set_graph_mode(engine::GraphMode::kOn);
      const std::vector<float> replayed = runner.run(chunks);
      runner.set_graph_mode(engine::GraphMode::kOff);
      const std::vector<float> eager = runner.run(chunks);
      ASSERT_EQ(ref.size(), static_cast<size_t>(batch) * vocab);
      ASSERT_EQ(replayed.size(), ref.size());
      size_t differ = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        if (std::memcmp(&ref[i], &replayed[i], sizeof(float)) != 0) ++differ;
      EXPECT_EQ(differ, 0u) << "step " << step << ": graph replay differs from the padded eager step";
      const Compare cmp = compare(replayed, eager);
      EXPECT_EQ(cmp.nans, 0);
      EXPECT_LT(cmp.rel_l2, 1e-2) << "step " << step << ": padded step vs unpadded eager";
      for (int s = 0; s < batch; ++s) {
        seqs[static_cast<size_t>(s)].push_back(last[static_cast<size_t>(s)]);
        last[static_cast<size_t>(s)] = argmax(&replayed[static_cast<size_t>(s) * vocab], vocab);
      }
    }
    // One recording per (bucket, width); every step after the first replays it (the first may have run
    // eagerly if the decode workspace had to grow, then recorded on the next step).
    std::printf("[ graphs ] batch %d: %lld recordings, %lld replays of %d steps\n", batch,
                static_cast<long long>(runner.graph_captures()), static_cast<long long>(runner.graph_replays()),
                kSteps);
    EXPECT_GE(runner.graph_captures(), 1);
    EXPECT_LE(runner.graph_captures(), 2);
    EXPECT_GE(runner.graph_replays(), kSteps - 1);
    total_captures += runner.graph_captures();
  }
  size_t free_after = 0;
  XI_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  std::printf("[ graphs ] %lld recordings; device memory free before %.1f MiB, after runners gone %.1f MiB\n",
              static_cast<long long>(total_captures), free_before / 1048576.0, free_after / 1048576.0);
}

// Graph memory: free device memory before and after recording every bucket of the 8B-like layer count
// would be too slow here; this records all 9 buckets of the small model and reports the cost per graph.
TEST(CudaGraphs, MemoryPerRecording) {
  auto loaded = load_graph_model(256, 256, model::LoadOptions{}.seed);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  model::LlamaModel& m = **loaded;
  const model::ModelConfig& c = m.config();
  engine::ModelRunner runner(m, gpu(), backend::KvCacheSpec{c.num_layers, 300, 16, c.num_kv_heads, c.head_dim,
                                                            DType::kBF16},
                             engine::GraphMode::kOn);
  std::vector<int32_t> table = {1};
  const int32_t tok = 5;
  // Warm run at 256 (workspace and cuBLASLt choices) before measuring.
  std::vector<engine::SequenceChunk> chunks(256, engine::SequenceChunk{std::span(&tok, 1), 0, table, true});
  runner.run(chunks);
  gpu().synchronize();
  size_t free0 = 0, free1 = 0, total = 0;
  XI_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  const int before = gpu().num_graphs();
  for (int n = 1; n <= 128; n *= 2) runner.run(std::span(chunks.data(), static_cast<size_t>(n)));
  gpu().synchronize();
  XI_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  const int made = gpu().num_graphs() - before;
  EXPECT_EQ(made, 8);
  std::printf("[ graphs ] %d recordings of a %d-layer model: %.2f MiB device memory (%.3f MiB per layer-graph)\n",
              made, c.num_layers, (static_cast<double>(free0) - static_cast<double>(free1)) / 1048576.0,
              (static_cast<double>(free0) - static_cast<double>(free1)) / 1048576.0 / std::max(1, made * c.num_layers));
}

// Asynchronous scheduling on the device: greedy (and device-sampled) decode steps started behind the step in
// flight, their tokens fed from its device-side argmax (sample_rows) ids (Backend::feed_tokens after the
// metadata upload, before the forward or the graph replay; ids and host copies double-buffered, finish_greedy
// waiting on a fence only) give bit-identical ids to the same steps run one at a time with host-known tokens,
// graphs on and off.
TEST(CudaGraphs, PipelinedGreedyStepsFeedDeviceIds) {
  auto loaded = load_graph_model(2048, 64, 7);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  model::LlamaModel& m = **loaded;
  const model::ModelConfig& c = m.config();
  const backend::KvCacheSpec spec{c.num_layers, 800, 16, c.num_kv_heads, c.head_dim, DType::kBF16};
  for (const engine::GraphMode mode : {engine::GraphMode::kOn, engine::GraphMode::kOff}) {
    for (const int seqs : {3, 20}) {
      SCOPED_TRACE(std::string(mode == engine::GraphMode::kOn ? "graphs" : "eager") + ", " +
                   std::to_string(seqs) + " sequences");
      engine::ModelRunner sequential(m, gpu(), spec, mode);
      engine::ModelRunner pipelined(m, gpu(), spec, mode);
      const int64_t fed =
          engine::testing::check_pipelined_greedy(sequential, pipelined, c.vocab_size, 16, seqs, 12);
      EXPECT_GT(fed, 0);
      // Device sampling (start_sampled): seeded draws at temperature 0.9 / top-p 0.95.
      engine::SamplingParams sp;
      sp.temperature = 0.9f;
      sp.top_p = 0.95f;
      sp.seed = 77;
      engine::ModelRunner sequential_s(m, gpu(), spec, mode);
      engine::ModelRunner pipelined_s(m, gpu(), spec, mode);
      EXPECT_GT(
          engine::testing::check_pipelined_greedy(sequential_s, pipelined_s, c.vocab_size, 16, seqs, 12, &sp),
          0)
          << "sampled";
      EXPECT_GT(pipelined_s.device_sampled_rows(), 0);
      if (mode == engine::GraphMode::kOn) {
        EXPECT_GT(pipelined.graph_replays(), 0) << "decode-only steps were meant to replay graphs";
      }
      std::printf("[ graphs ] pipelined %s, %d sequences: %lld fed tokens, %lld replays\n",
                  mode == engine::GraphMode::kOn ? "graphs" : "eager", seqs, static_cast<long long>(fed),
                  static_cast<long long>(pipelined.graph_replays()));
    }
  }
}

}  // namespace
// Graphs recorded at start-up (ModelRunner::record_decode_graphs, EngineConfig::record_graphs_at_start): one
// per (row bucket, block-table width) key, each from a step of padding rows; pipelined greedy steps then
// replay them from the first decode step with no recording of their own (the mixed steps' uploads fit the
// reserved step buffer, so nothing is dropped), and give the ids of a runner that records lazily, bit for
// bit.
TEST(CudaGraphs, RecordedAtStartReplayFromTheFirstStep) {
  auto loaded = load_graph_model(2048, 64, 7);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  model::LlamaModel& m = **loaded;
  const model::ModelConfig& c = m.config();
  const backend::KvCacheSpec spec{c.num_layers, 800, 16, c.num_kv_heads, c.head_dim, DType::kBF16};
  engine::ModelRunner lazy(m, gpu(), spec, engine::GraphMode::kOn);
  engine::ModelRunner early(m, gpu(), spec, engine::GraphMode::kOn);
  // The engine reserves the decode workspace at start-up; here too, so no recording fails for its growth.
  gpu().reserve_decode_workspace(32, c.num_heads, c.num_kv_heads, c.head_dim, m.max_model_len());
  int calls = 0, last_total = 0;
  const int made = early.record_decode_graphs(32, 32, m.max_model_len(), [&](int done, int total) {
    ++calls;
    EXPECT_EQ(done, calls);
    last_total = total;
  });
  int widths = 0;  // 16, 32, .. up to the context's blocks
  for (int w = engine::ModelRunner::kMinGraphBlocks;; w *= 2) {
    ++widths;
    if (w >= (m.max_model_len() + 15) / 16) break;
  }
  EXPECT_EQ(made, 6 * widths) << "buckets 1, 2, 4, 8, 16, 32 at each width";
  EXPECT_EQ(last_total, made);
  EXPECT_EQ(early.record_decode_graphs(32, 32, m.max_model_len()), 0) << "a second call records nothing new";
  const int64_t fed = engine::testing::check_pipelined_greedy(lazy, early, c.vocab_size, 16, 20, 12);
  EXPECT_GT(fed, 0);
  EXPECT_EQ(early.graph_captures(), made)
      << "a step recorded a graph of its own (or the recordings were dropped)";
  EXPECT_GT(early.graph_replays(), made);
  EXPECT_GT(lazy.graph_captures(), 0);
  std::printf(
      "[ graphs ] recorded at start: %d graphs (%d widths); run: %lld replays, lazy runner %lld recordings\n",
      made, widths, static_cast<long long>(early.graph_replays()),
      static_cast<long long>(lazy.graph_captures()));
}

}  // namespace xinfer::gpu_test
