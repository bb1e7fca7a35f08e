#include "xinfer/engine/model_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>

#include "xinfer/backend/decode_graph_buckets.h"
#include "xinfer/core/check.h"
#include "xinfer/core/logging.h"

namespace xinfer::engine {
namespace {
std::atomic<uint64_t> next_graph_owner{1};
}  // namespace

ModelRunner::ModelRunner(model::LlamaModel& model, backend::Backend& backend,
                         const backend::KvCacheSpec& kv_spec, GraphMode graphs)
    : model_(model),
      backend_(backend),
      kv_spec_(kv_spec),
      kv_(backend.allocate_kv_cache(kv_spec)),
      graph_mode_(graphs),
      graph_owner_(next_graph_owner.fetch_add(1)),
      ids_device_{
          backend.allocate(DType::kI32, Shape{std::max(model.options().max_logit_rows, kMaxGraphBatch)}),
          backend.allocate(DType::kI32, Shape{std::max(model.options().max_logit_rows, kMaxGraphBatch)})} {}

ModelRunner::~ModelRunner() {
  if (!greedy_flights_.empty()) backend_.wait_host_copies();  // copies must not land in freed vectors
  if (graph_captures_ > 0) backend_.clear_graphs();
}

backend::StepPlan ModelRunner::plan(std::span<const SequenceChunk> chunks, int block_size) {
  backend::StepPlan p;
  p.query_start_loc.push_back(0);
  size_t max_blocks = 0;
  for (const auto& c : chunks) max_blocks = std::max(max_blocks, c.block_table.size());
  p.max_blocks_per_seq = static_cast<int>(max_blocks);
  for (const auto& c : chunks) {
    XI_CHECK(!c.tokens.empty()) << "a chunk must feed at least one token";
    const int32_t end = c.start_pos + static_cast<int32_t>(c.tokens.size());
    XI_CHECK_LE(static_cast<size_t>((end + block_size - 1) / block_size), c.block_table.size())
        << "block table too short for position " << end - 1;
    if (c.token_source >= 0) {
      XI_CHECK_EQ(c.tokens.size(), 1u) << "a fed token is a chunk of its own";
      p.token_sources.resize(p.token_ids.size(), -1);
      p.token_sources.push_back(c.token_source);
    }
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      const int32_t pos = c.start_pos + static_cast<int32_t>(i);
      p.token_ids.push_back(c.tokens[i]);
      p.positions.push_back(pos);
      p.slot_mapping.push_back(c.block_table[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size);
    }
    if (c.all_logits) {
      for (size_t i = 0; i < c.tokens.size(); ++i)
        p.logit_rows.push_back(static_cast<int32_t>(p.token_ids.size() - c.tokens.size() + i));
    } else if (c.want_logits) {
      p.logit_rows.push_back(static_cast<int32_t>(p.token_ids.size()) - 1);
    }
    p.query_start_loc.push_back(static_cast<int32_t>(p.token_ids.size()));
    p.seq_lens.push_back(end);
    p.max_seq_len = std::max(p.max_seq_len, end);
    p.block_tables.insert(p.block_tables.end(), c.block_table.begin(), c.block_table.end());
    p.block_tables.resize(p.block_tables.size() + max_blocks - c.block_table.size(), 0);
  }
  if (!p.token_sources.empty()) p.token_sources.resize(p.token_ids.size(), -1);
  return p;
}

backend::StepPlan ModelRunner::padded_decode_plan(std::span<const SequenceChunk> chunks, int block_size, int bucket,
                                                  int width) {
  XI_CHECK_LE(chunks.size(), static_cast<size_t>(bucket));
  backend::StepPlan p;
  p.max_blocks_per_seq = width;
  p.max_seq_len = width * block_size;
  p.padded_context_len = width * block_size;
  p.query_start_loc.push_back(0);
  for (const auto& c : chunks) {
    XI_CHECK_EQ(c.tokens.size(), 1u) << "padded plans are for decode-only steps";
    XI_CHECK_LE(c.block_table.size(), static_cast<size_t>(width));
    const int32_t pos = c.start_pos;
    XI_CHECK_LT(static_cast<size_t>(pos / block_size), c.block_table.size()) << "block table too short for position " << pos;
    if (c.token_source >= 0) {
      p.token_sources.resize(p.token_ids.size(), -1);
      p.token_sources.push_back(c.token_source);
    }
    p.token_ids.push_back(c.tokens[0]);
    p.positions.push_back(pos);
    p.slot_mapping.push_back(c.block_table[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size);
    p.seq_lens.push_back(pos + 1);
    p.block_tables.insert(p.block_tables.end(), c.block_table.begin(), c.block_table.end());
    p.block_tables.resize(p.block_tables.size() + static_cast<size_t>(width) - c.block_table.size(), 0);
  }
  for (size_t i = chunks.size(); i < static_cast<size_t>(bucket); ++i) {  // harmless rows: no KV write
    p.token_ids.push_back(0);
    p.positions.push_back(0);
    p.slot_mapping.push_back(-1);
    p.seq_lens.push_back(1);
    p.block_tables.resize(p.block_tables.size() + static_cast<size_t>(width), 0);
  }
  for (int i = 0; i < bucket; ++i) {
    p.query_start_loc.push_back(i + 1);
    p.logit_rows.push_back(i);
  }
  if (!p.token_sources.empty()) p.token_sources.resize(p.token_ids.size(), -1);
  return p;
}

bool ModelRunner::graph_shape(std::span<const SequenceChunk> chunks, int* bucket, int* width) const {
  if (graph_mode_ == GraphMode::kOff || chunks.empty()) return false;
  if (graph_mode_ == GraphMode::kOn && !backend_.supports_graphs()) return false;
  if (chunks.size() > static_cast<size_t>(kMaxGraphBatch)) return false;
  size_t max_blocks = 1;
  for (const auto& c : chunks) {
    if (c.tokens.size() != 1 || c.all_logits) return false;
    max_blocks = std::max(max_blocks, c.block_table.size());
  }
  const int b = backend::decode_graph_bucket(static_cast<int>(chunks.size()));
  const model::LoadOptions& lo = model_.options();
  if (b > lo.max_tokens || b > lo.max_logit_rows) return false;
  const int bs = kv_spec_.block_size;
  const int cap = std::max<int>((model_.max_model_len() + bs - 1) / bs, static_cast<int>(max_blocks));
  int w = kMinGraphBlocks;
  while (static_cast<size_t>(w) < max_blocks) w *= 2;
  *bucket = b;
  *width = std::min(w, cap);
  return true;
}

backend::StepMeta ModelRunner::upload(backend::StepPlan& p, uint64_t graph_key) {
  const GreedyFlight* prev = nullptr;
  if (!p.token_sources.empty()) {
    XI_CHECK(!greedy_flights_.empty()) << "a chunk feeds a token but no greedy step is in flight";
    prev = &greedy_flights_.back();
    for (int32_t& r : p.token_sources) {
      if (r < 0) continue;
      XI_CHECK_LT(static_cast<size_t>(r), prev->sample_rows.size())
          << "token source beyond the previous step's samples";
      r = prev->sample_rows[static_cast<size_t>(r)];
    }
  }
  backend_.mark_step_begin();  // the step's device time starts with its KV copies (step_device_time)
  last_step_time_ = {};        // until finish_greedy() reads this step's (other paths leave it invalid)
  p.kv_copies = std::move(queued_copies_);
  queued_copies_.clear();
  if (followers_ != nullptr) {  // tensor parallel: the other ranks run the same step (step_followers.h)
    FollowerStep step;
    step.graph_key = graph_key;
    if (prev != nullptr) {
      step.feed_buffer = prev->buffer;
      step.feed_rows = prev->rows;
    }
    followers_->launch(p, step);
    if (prev != nullptr) {  // the in-flight step's ids, sampled here only: to every rank's same buffer
      backend::Communicator* comm = model_.options().comm;
      XI_CHECK(comm != nullptr) << "tensor parallel followers need the model's communicator";
      comm->broadcast(ids_device_[prev->buffer].view.rows(0, prev->rows), 0);
    }
  }
  for (const backend::KvCopyBatch& b : p.kv_copies) backend_.copy_kv_blocks(kv_, b);
  const backend::StepMeta meta = backend_.upload_step(p);
  if (prev != nullptr) backend_.feed_tokens(meta, ids_device_[prev->buffer].view);
  return meta;
}

void ModelRunner::queue_kv_copies(std::span<const kv::BlockCopy> swap_out,
                                  std::span<const kv::BlockCopy> swap_in) {
  if (swap_out.empty() && swap_in.empty()) return;
  XI_CHECK(kv_.swap != nullptr) << "KV block copies, but this runner's cache has no swap space";
  for (const auto& [copies, to_host] : {std::pair{swap_out, true}, std::pair{swap_in, false}})
    if (!copies.empty())
      queued_copies_.push_back({to_host, std::vector<kv::BlockCopy>(copies.begin(), copies.end())});
}

uint64_t ModelRunner::graph_key(int bucket, int width) const {
  return graph_mode_ == GraphMode::kOn
             ? (graph_owner_ << 40) | (static_cast<uint64_t>(bucket) << 24) | static_cast<uint32_t>(width)
             : 0;
}

ModelRunner::DecodeGraphKeys ModelRunner::decode_graph_keys(int max_rows, int max_tokens, int max_logit_rows,
                                                            int model_blocks, int context_blocks) {
  DecodeGraphKeys k;
  // graph_shape()'s widths: powers of two from kMinGraphBlocks capped at the model's blocks; a step's table
  // never exceeds context_blocks, so the first power of two reaching it is the widest met.
  for (int w = kMinGraphBlocks;; w *= 2) {
    k.widths.push_back(std::min(w, model_blocks));
    if (w >= model_blocks || w >= context_blocks) break;
  }
  for (int rows = std::min(max_rows, kMaxGraphBatch); rows >= 1; --rows) {  // descending: largest plans first
    const int b = backend::decode_graph_bucket(rows);
    if (b > 0 && b <= max_tokens && b <= max_logit_rows && (k.buckets.empty() || k.buckets.back() != b))
      k.buckets.push_back(b);
  }
  return k;
}

size_t ModelRunner::step_upload_bound(int max_tokens, int max_logit_rows, int max_seqs_per_step,
                                      int decode_rows, int widest) {
  // upload_step()'s arrays, each padded to 16 bytes: five per token, five per sequence (+1), the logit rows,
  // the prefill tiles (<= tokens / 128 + sequences, two ints each) and the block tables; a decode plan of
  // decode_rows padded rows is smaller in every term but its block tables.
  const auto padded = [](size_t ints) { return (ints * sizeof(int32_t) + 15) / 16 * 16; };
  const size_t tokens = static_cast<size_t>(std::max(max_tokens, decode_rows));
  const size_t seqs = static_cast<size_t>(std::max({max_seqs_per_step, decode_rows, 1}));
  return 5 * padded(tokens) + 5 * padded(seqs + 1) +
         padded(static_cast<size_t>(std::max(max_logit_rows, decode_rows))) +
         padded(2 * (tokens / 128 + seqs)) + padded(seqs * static_cast<size_t>(widest));
}

int ModelRunner::record_decode_graphs(int max_rows, int max_seqs_per_step, int max_context,
                                      const std::function<void(int, int)>& progress) {
  if (graph_mode_ != GraphMode::kOn || !backend_.supports_graphs()) return 0;
  const model::LoadOptions& lo = model_.options();
  const int bs = kv_spec_.block_size;
  const DecodeGraphKeys keys =
      decode_graph_keys(max_rows, lo.max_tokens, lo.max_logit_rows, (model_.max_model_len() + bs - 1) / bs,
                        (max_context + bs - 1) / bs);
  if (keys.buckets.empty()) return 0;
  // Every later plan fits the step buffer, so no upload moves it (which would drop every recording).
  backend_.reserve_step_upload(step_upload_bound(lo.max_tokens, lo.max_logit_rows, max_seqs_per_step,
                                                 keys.buckets.front(), keys.widths.back()));
  const int total = static_cast<int>(keys.widths.size() * keys.buckets.size());
  int done = 0, made = 0;
  for (auto w = keys.widths.rbegin(); w != keys.widths.rend(); ++w)  // widest first, buckets descending
    for (const int b : keys.buckets) {
      const uint64_t key = graph_key(b, *w);
      // A recording fails where an op had to grow a workspace (end_capture grows it): the second try records.
      for (int attempt = 0; attempt < 2 && graph_logits_.count(key) == 0; ++attempt) {
        backend::StepPlan p = padded_decode_plan({}, bs, b, *w);  // padding rows only: no KV written
        const int64_t before = graph_captures_;
        run_graph(upload(p, key), key);
        made += static_cast<int>(graph_captures_ - before);
      }
      if (progress) progress(++done, total);
    }
  backend_.synchronize();
  return made;
}

TensorView ModelRunner::forward_padded(std::span<const SequenceChunk> chunks, int bucket, int width) {
  backend::StepPlan p = padded_decode_plan(chunks, kv_spec_.block_size, bucket, width);
  const uint64_t key = graph_key(bucket, width);
  return run_graph(upload(p, key), key);
}

TensorView ModelRunner::run_graph(const backend::StepMeta& meta, uint64_t key) {
  TensorView logits;
  if (graph_mode_ == GraphMode::kOn) {
    auto it = graph_logits_.find(key);
    if (it != graph_logits_.end() && backend_.replay(key)) {
      logits = it->second;
      ++graph_replays_;
    } else {
      const auto capture_begin = std::chrono::steady_clock::now();
      backend_.begin_capture();
      const TensorView recorded = model_.forward(meta, kv_);
      const bool made = backend_.end_capture(key);
      graph_capture_s_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - capture_begin).count();
      if (made) {
        ++graph_captures_;
        graph_logits_[key] = recorded;
        XI_CHECK(backend_.replay(key)) << "a fresh recording must replay";
        ++graph_replays_;
        logits = recorded;
      } else {
        graph_logits_.erase(key);
        logits = model_.forward(meta, kv_);  // recording failed (e.g. a workspace had to grow): run eagerly
      }
    }
  } else {
    logits = model_.forward(meta, kv_);
  }
  return logits;
}

TensorView ModelRunner::forward(std::span<const SequenceChunk> chunks, bool* padded) {
  int bucket = 0, width = 0;
  *padded = graph_shape(chunks, &bucket, &width);
  if (*padded) return forward_padded(chunks, bucket, width);
  backend::StepMeta meta;
  {
    DebugTimer timer("eager step: plan + upload");
    backend::StepPlan p = plan(chunks, kv_spec_.block_size);
    meta = upload(p, 0);
  }
  DebugTimer timer("eager step: forward launch");
  if (timer.enabled()) timer.detail() << meta.num_tokens << " tokens";
  return model_.forward(meta, kv_);
}

const std::vector<float>& ModelRunner::run(std::span<const SequenceChunk> chunks) {
  XI_CHECK(greedy_flights_.empty()) << "run() while greedy steps are in flight";
  bool padded = false;
  const TensorView logits = forward(chunks, &padded);
  if (!padded) {
    logits_.resize(static_cast<size_t>(logits.numel()));
    if (logits.numel() > 0) backend_.to_host_f32(logits, logits_.data());
    return logits_;
  }
  // Only the live rows come back; padded rows are ignored.
  const int64_t vocab = logits.shape[1];
  const size_t n = chunks.size();
  const bool all_want = std::all_of(chunks.begin(), chunks.end(), [](const SequenceChunk& c) { return c.want_logits; });
  if (all_want) {  // the usual decode step: straight into the result
    logits_.resize(n * static_cast<size_t>(vocab));
    backend_.to_host_f32(logits.rows(0, static_cast<int64_t>(n)), logits_.data());
    return logits_;
  }
  padded_logits_.resize(n * static_cast<size_t>(vocab));
  backend_.to_host_f32(logits.rows(0, static_cast<int64_t>(n)), padded_logits_.data());
  logits_.clear();
  for (size_t i = 0; i < n; ++i)
    if (chunks[i].want_logits)
      logits_.insert(logits_.end(), padded_logits_.begin() + static_cast<ptrdiff_t>(i * vocab),
                     padded_logits_.begin() + static_cast<ptrdiff_t>((i + 1) * vocab));
  return logits_;
}

const std::vector<int32_t>& ModelRunner::run_greedy(std::span<const SequenceChunk> chunks) {
  start_greedy(chunks);
  return finish_greedy();
}

void ModelRunner::start_greedy(std::span<const SequenceChunk> chunks) {
  XI_CHECK_LT(static_cast<int>(greedy_flights_.size()), kMaxGreedyInFlight)
      << "start_greedy() with two steps in flight";
  bool padded = false;
  const TensorView logits = forward(chunks, &padded);  // feeds token sources from greedy_flights_.back()
  GreedyFlight f;
  f.buffer = next_ids_buffer_;
  next_ids_buffer_ ^= 1;
  // Padded steps: the live rows are the first chunks.size() rows, one per chunk.
  f.rows = padded ? static_cast<int64_t>(chunks.size()) : (logits.numel() > 0 ? logits.shape[0] : 0);
  const bool all_want =
      std::all_of(chunks.begin(), chunks.end(), [](const SequenceChunk& c) { return c.want_logits; });
  if (padded && !all_want)
    for (const SequenceChunk& c : chunks) f.wanted.push_back(c.want_logits);
  for (size_t i = 0; i < chunks.size(); ++i)
    if (chunks[i].want_logits)
      f.sample_rows.push_back(padded ? static_cast<int32_t>(i) : static_cast<int32_t>(f.sample_rows.size()));
  std::vector<int32_t>& host = host_ids_[f.buffer];
  host.resize(static_cast<size_t>(f.rows));
  if (f.rows > 0) {
    XI_CHECK_LE(f.rows, ids_device_[f.buffer].view.numel());
    const TensorView ids = ids_device_[f.buffer].view.rows(0, f.rows);
    backend_.argmax_rows(logits.rows(0, f.rows), ids);
    backend_.to_host_raw_async(ids, host.data());
  }
  f.fence = backend_.fence_host_copies();
  greedy_flights_.push_back(std::move(f));
}

void ModelRunner::start_sampled(std::span<const SequenceChunk> chunks, std::span<const SampleInput> inputs,
                                std::span<const int32_t> eos_token_ids) {
  XI_CHECK_LT(static_cast<int>(greedy_flights_.size()), kMaxGreedyInFlight)
      << "start_sampled() with two steps in flight";
  XI_CHECK(backend_.supports_sampling()) << "start_sampled() needs Backend::sample_rows";
  bool padded = false;
  const TensorView logits = forward(chunks, &padded);  // feeds token sources from greedy_flights_.back()
  sample_logit_rows_.clear();
  for (size_t i = 0; i < chunks.size(); ++i)
    if (chunks[i].want_logits)
      sample_logit_rows_.push_back(padded ? static_cast<int32_t>(i)
                                          : static_cast<int32_t>(sample_logit_rows_.size()));
  XI_CHECK_EQ(sample_logit_rows_.size(), inputs.size()) << "one sampler input per chunk with want_logits";
  if (!planner_) planner_ = std::make_unique<DeviceSamplingPlanner>(vocab_size());
  planner_->clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    XI_CHECK(!inputs[i].params->has_penalties()) << "start_sampled(): penalties read the output tokens";
    planner_->add(inputs[i], sample_logit_rows_[i], eos_token_ids);
  }
  GreedyFlight f;
  f.buffer = next_ids_buffer_;
  next_ids_buffer_ ^= 1;
  f.rows = static_cast<int64_t>(inputs.size());
  for (int32_t r = 0; r < static_cast<int32_t>(inputs.size()); ++r)
    f.sample_rows.push_back(r);  // batch order
  std::vector<int32_t>& host = host_ids_[f.buffer];
  host.resize(static_cast<size_t>(f.rows));
  if (f.rows > 0) {
    XI_CHECK_LE(f.rows, ids_device_[f.buffer].view.numel());
    const TensorView ids = ids_device_[f.buffer].view.rows(0, f.rows);
    const Status st = backend_.sample_rows(logits, planner_->batch(), ids);
    XI_CHECK(st.ok()) << "sample_rows refused a pipelined batch: " << st.to_string();
    backend_.to_host_raw_async(ids, host.data());
    device_sampled_rows_ += f.rows;
  }
  f.fence = backend_.fence_host_copies();
  greedy_flights_.push_back(std::move(f));
}

const std::vector<int32_t>& ModelRunner::finish_greedy() {
  XI_CHECK(!greedy_flights_.empty()) << "finish_greedy() without start_greedy()";
  const GreedyFlight f = std::move(greedy_flights_.front());
  greedy_flights_.pop_front();
  backend_.wait_host_copies(f.fence);
  last_step_time_ = backend_.step_device_time(f.fence);
  const std::vector<int32_t>& host = host_ids_[f.buffer];
  ids_.clear();
  for (size_t i = 0; i < host.size(); ++i)
    if (f.wanted.empty() || f.wanted[i]) ids_.push_back(host[i]);
  return ids_;
}

std::vector<SampleOutput> ModelRunner::run_sampled(std::span<const SequenceChunk> chunks,
                                                  std::span<const SampleInput> inputs, Sampler& host) {
  const size_t vocab = static_cast<size_t>(vocab_size());
  XI_CHECK_EQ(host.vocab_size(), vocab_size());
  XI_CHECK(greedy_flights_.empty()) << "run_sampled() while greedy steps are in flight";
  if (!backend_.supports_sampling()) {
    const std::vector<float>& logits = run(chunks);
    XI_CHECK_EQ(logits.size(), inputs.size() * vocab);
    host_batch_.assign(inputs.begin(), inputs.end());
    for (size_t i = 0; i < host_batch_.size(); ++i) host_batch_[i].logits = logits.data() + i * vocab;
    return host.sample(host_batch_);
  }
  bool padded = false;
  const TensorView logits = forward(chunks, &padded);
  // Padded steps have one logits row per chunk; others one per chunk with want_logits.
  sample_logit_rows_.clear();
  for (size_t i = 0; i < chunks.size(); ++i)
    if (chunks[i].want_logits) sample_logit_rows_.push_back(padded ? static_cast<int32_t>(i)
                                                                   : static_cast<int32_t>(sample_logit_rows_.size()));
  XI_CHECK_EQ(sample_logit_rows_.size(), inputs.size()) << "one sampler input per chunk with want_logits";
  if (!planner_) planner_ = std::make_unique<DeviceSamplingPlanner>(vocab_size());
  planner_->clear();
  device_inputs_.clear();
  host_inputs_.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (device_samplable(inputs[i])) {
      planner_->add(inputs[i], sample_logit_rows_[i], host.eos_token_ids());
      device_inputs_.push_back(i);
    } else {
      host_inputs_.push_back(i);
    }
  }
  std::vector<SampleOutput> out(inputs.size());
  // The device draws (queued first) while the host samples its rows; ids come back last. A batch the
  // backend refuses (e.g. a vocabulary past its kernel's limit) is sampled on the host instead.
  if (!device_inputs_.empty()) {
    XI_CHECK_LE(static_cast<int64_t>(device_inputs_.size()), ids_device_[0].view.numel());
    const Status st = backend_.sample_rows(
        logits, planner_->batch(), ids_device_[0].view.rows(0, static_cast<int64_t>(device_inputs_.size())));
    if (!st.ok()) {
      if (!warned_device_sampling_) XI_LOG(WARN) << "device sampling unavailable, sampling on the host: " << st.to_string();
      warned_device_sampling_ = true;
      host_inputs_.insert(host_inputs_.end(), device_inputs_.begin(), device_inputs_.end());
      device_inputs_.clear();
    }
  }
  const auto n = static_cast<int64_t>(device_inputs_.size());
  // Raw logits of the host rows (sample_rows restores the logits it adjusts, and runs before these copies).
  host_logits_.resize(host_inputs_.size() * vocab);
  for (size_t j = 0; j < host_inputs_.size(); ++j) {
    const int64_t row = sample_logit_rows_[host_inputs_[j]];
    backend_.to_host_f32(logits.rows(row, row + 1), host_logits_.data() + j * vocab);
  }
  if (!host_inputs_.empty()) {
    host_batch_.clear();
    for (size_t j = 0; j < host_inputs_.size(); ++j) {
      host_batch_.push_back(inputs[host_inputs_[j]]);
      host_batch_.back().logits = host_logits_.data() + j * vocab;
    }
    std::vector<SampleOutput> h = host.sample(host_batch_);
    for (size_t j = 0; j < host_inputs_.size(); ++j) out[host_inputs_[j]] = std::move(h[j]);
  }
  if (n > 0) {
    ids_.resize(static_cast<size_t>(n));
    backend_.to_host_raw(ids_device_[0].view.rows(0, n), ids_.data());
    for (size_t r = 0; r < device_inputs_.size(); ++r) out[device_inputs_[r]].token = ids_[r];
    device_sampled_rows_ += n;
  }
  return out;
}

}  // namespace xinfer::engine
