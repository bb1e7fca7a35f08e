// ModelRunner: turns one scheduled step (a list of sequence chunks: prefill chunks and single decode
// tokens, mixed) into a StepPlan, runs the model once on the backend and returns the logits of the
// chunks that asked for them, on the host - or, with run_greedy(), only their argmax token ids (computed on
// the backend by argmax_rows: 4 bytes per row come back instead of vocab * 4), or, with run_sampled(), the
// tokens of the host Sampler's inputs, drawn on the backend (Backend::sample_rows) where it can.
//
// Each chunk feeds `tokens` at positions [start_pos, start_pos + tokens.size()) of its sequence; the
// sequence's KV cache lives in the blocks of `block_table` (block_table[p / block_size] holds position
// p), which must already cover every position up to start_pos + tokens.size() - 1.
//
// Graphs (GraphMode::kOn, on backends that supports_graphs()): a decode-only step (every chunk feeds one
// token) of n <= kMaxGraphBatch (1024) sequences is padded to a graph key (bucket, width):
//   bucket = backend::decode_graph_bucket(n): n rounded up to 1, 2, 4, .., 128, then to a multiple of 64 up
//   to
//            1024 (and within the model's max_tokens and max_logit_rows); padded rows feed token 0 at
//            position 0 with slot -1 (no KV write), seq_len 1 and an all-zero block-table row; their logits
//            are computed and ignored;
//   width  = block-table width: the longest table rounded up to a power of two >= 16 blocks (at most
//            the model's max_model_len in blocks); attention is sized for width * block_size tokens.
// The first step of a key records the forward (Backend::begin_capture/end_capture); later steps of the
// key upload their metadata and replay it. Keys carry a per-runner id (recordings bake in this runner's
// KV cache and the model's buffers). Graphs are recorded lazily: the engine reserves a memory
// margin for them before sizing the KV cache. Mixed and prefill steps always run eagerly.
// GraphMode::kPaddedEager pads the same way but runs eagerly: the bit-exact reference for graph replay.
//
// Asynchronous scheduling: up to two steps (start_greedy / start_sampled) may be started before the first
// is finished. A chunk of the second may feed a token the first samples (SequenceChunk::token_source): the
// plan carries a placeholder and Backend::feed_tokens() copies the first step's device-side id into the
// step's token ids after the metadata upload and before the forward (or the graph replay). The sampled ids
// and their host copies are double-buffered, and finish_greedy() waits only for the oldest step's copy (a
// fence).
//
// Tensor parallelism (set_followers): every step's plan goes to the other ranks first, with the graph key of
// a recorded step (each rank records and replays its own graph of it) and, for a step that feeds device
// tokens, the ids buffer to receive: rank 0 broadcasts the in-flight step's sampled ids
// (Communicator::broadcast of LoadOptions::comm) before its upload, so every rank feeds the same tokens
// (step_followers.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/backend/decode_graph_buckets.h"
#include "xinfer/engine/device_sampling.h"
#include "xinfer/engine/sampler.h"
#include "xinfer/engine/step_followers.h"
#include "xinfer/model/llama.h"

namespace xinfer::engine {

struct SequenceChunk {
  std::span<const int32_t> tokens;       // tokens to feed this step
  int32_t start_pos = 0;                 // position of tokens[0] (= tokens already in the KV cache)
  std::span<const int32_t> block_table;  // block ids of the sequence, in order
  bool want_logits = false;              // return logits of the chunk's last token
  // Return logits of every token of the chunk, in order (prompt log-probabilities); the last of them is the
  // want_logits row when want_logits is set. Steps with such a chunk never run padded (graphs).
  bool all_logits = false;
  // >= 0: tokens is one placeholder; feed the id sampled for row token_source (in want_logits order) by the
  // step started just before this one (start_greedy or start_sampled), which must still be in flight.
  int32_t token_source = -1;
};

enum class GraphMode { kOff, kOn, kPaddedEager };

class ModelRunner {
 public:
  static constexpr int kMaxGraphBatch = backend::kMaxDecodeGraphRows;
  static constexpr int kMinGraphBlocks = 16;

  ModelRunner(model::LlamaModel& model, backend::Backend& backend, const backend::KvCacheSpec& kv_spec,
              GraphMode graphs = GraphMode::kOff);
  ~ModelRunner();  // drops the backend's recordings if it made any (they point at this runner's buffers)
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Runs one forward. Returns logits [rows, vocab], row-major, valid until the next call: per chunk in
  // order, tokens.size() rows when all_logits, else one row when want_logits.
  const std::vector<float>& run(std::span<const SequenceChunk> chunks);
  // Runs one forward like run() but returns, per chunk with want_logits (in order), the argmax of its logits
  // row (ties -> lowest id): the host Sampler's greedy choice for a row with no logit adjustments. Valid
  // until the next call.
  const std::vector<int32_t>& run_greedy(std::span<const SequenceChunk> chunks);
  // run_greedy() in two halves: start_greedy() queues the forward, the argmax and the copy of the ids and
  // returns while the device works; finish_greedy() waits for the oldest started step and returns what
  // run_greedy() would for it (valid until the next call). At most kMaxGreedyInFlight started steps; chunks
  // with a token_source read the ids of the step started last. No other call on this runner in between,
  // except start_greedy() / finish_greedy() and Backend-free host work.
  static constexpr int kMaxGreedyInFlight = 2;
  void start_greedy(std::span<const SequenceChunk> chunks);
  // start_greedy() with run_sampled()'s device draw: inputs[i] (logits unset) belongs to the i-th chunk with
  // want_logits; every input must be device_samplable() and free of penalties (output tokens may hold a
  // placeholder; only their count is read), and the backend must supports_sampling(). finish_greedy() returns
  // its ids like a greedy step's. Same draws as run_sampled() (random bits per (seed, output index)).
  void start_sampled(std::span<const SequenceChunk> chunks, std::span<const SampleInput> inputs,
                     std::span<const int32_t> eos_token_ids);
  // Waits for the oldest started step (start_greedy or start_sampled) and returns its ids.
  const std::vector<int32_t>& finish_greedy();
  // The device time of the step finish_greedy() returned last (Backend::step_device_time: busy from its KV
  // copies and upload to its ids, the copies' share, the device's idle time before it); valid = false where
  // the backend does not measure it, and from each step's upload until finish_greedy() returns that step (a
  // step that never comes back through it leaves it invalid).
  const backend::Backend::StepDeviceTime& last_step_device_time() const { return last_step_time_; }
  // last_step_device_time(), then invalid until the next step's finish_greedy(): each step's time is taken
  // once (a step that computed nothing must not count the previous one's again).
  backend::Backend::StepDeviceTime take_step_device_time() { return std::exchange(last_step_time_, {}); }
  // Whether sample_rows() has drawn rows for this runner and never refused a batch (the engine pipelines
  // device-sampled steps only then: a refusal is handled only by run_sampled()'s host fallback).
  bool device_sampling_verified() const { return device_sampled_rows_ > 0 && !warned_device_sampling_; }
  int num_greedy_in_flight() const { return static_cast<int>(greedy_flights_.size()); }
  // Runs one forward like run() and samples each chunk with want_logits; inputs[i] (logits unset) belongs to
  // the i-th such chunk. Rows that device_samplable() allows are sampled by the backend's sample_rows() when
  // it supports_sampling() - only their ids come back; the others' raw logits come back for `host`. Without
  // backend support: run() + host.sample(). One output per input, in order (logprobs only for host rows,
  // which are the rows that asked for them).
  std::vector<SampleOutput> run_sampled(std::span<const SequenceChunk> chunks, std::span<const SampleInput> inputs,
                                        Sampler& host);
  int64_t device_sampled_rows() const { return device_sampled_rows_; }  // rows drawn by sample_rows() so far

  // Swap-to-host preemption: the scheduler's block copies of one step (ScheduledStep::swap_out, then
  // swap_in), run on this runner's cache (and every follower's) before the next forward, after the copies
  // queued before them. A step whose rows all dropped out runs no forward: its copies wait for the next one.
  void queue_kv_copies(std::span<const kv::BlockCopy> swap_out, std::span<const kv::BlockCopy> swap_in);
  int num_swap_blocks() const { return kv_.num_swap_blocks(); }
  const backend::KvCache& kv_cache() const { return kv_; }

  const backend::KvCacheSpec& kv_spec() const { return kv_spec_; }
  int vocab_size() const { return model_.config().vocab_size; }
  model::LlamaModel& model() { return model_; }
  void set_graph_mode(GraphMode mode) { graph_mode_ = mode; }
  // Tensor parallelism: the other ranks, handed every step's plan before this rank's forward (nullptr: none);
  // the model must have been loaded with its communicator (LoadOptions::comm).
  void set_followers(StepFollowers* followers) { followers_ = followers; }
  GraphMode graph_mode() const { return graph_mode_; }
  // Records now, as vLLM captures its batch sizes at start-up, the decode graph of every key a decode step
  // can meet (decode_graph_keys: row buckets <= max_rows x the widths of tables up to max_context tokens),
  // each by one forward of padding rows (no KV written), widest and largest first, a failed recording (a
  // workspace that had to grow) tried once more. First it reserves the backend's step buffer for every later
  // plan (step_upload_bound: a mixed step of max_tokens tokens over max_seqs_per_step sequences included), so
  // no upload drops the recordings (tensor-parallel followers size theirs by use: they may record again). A
  // run then replays from its first decode step instead of recording lazily in its own steps. progress(done,
  // total) after each key. Returns the graphs recorded (0 without graphs). Call before any step, from the
  // thread that runs them, with the workspaces reserved (as the engine's start-up does).
  int record_decode_graphs(int max_rows, int max_seqs_per_step, int max_context,
                           const std::function<void(int, int)>& progress = {});
  struct DecodeGraphKeys {
    std::vector<int> buckets;  // descending
    std::vector<int> widths;   // ascending
  };
  // The keys graph_shape() can produce for steps of <= max_rows rows and tables of <= context_blocks blocks,
  // the model's context being model_blocks blocks (widths are capped there), within the model's max_tokens
  // and max_logit_rows.
  static DecodeGraphKeys decode_graph_keys(int max_rows, int max_tokens, int max_logit_rows, int model_blocks,
                                           int context_blocks);
  // Bytes of the largest step plan upload_step() packs: a step of max_tokens tokens over max_seqs_per_step
  // sequences, or a padded decode plan of decode_rows rows, with tables of `widest` blocks.
  static size_t step_upload_bound(int max_tokens, int max_logit_rows, int max_seqs_per_step, int decode_rows,
                                  int widest);
  int64_t graph_captures() const { return graph_captures_; }  // recordings made
  int64_t graph_replays() const { return graph_replays_; }    // steps run from a recording
  // Host seconds spent recording and instantiating graphs (each new (bucket, width) key, and every recording
  // a backend dropped, e.g. after its step buffer or a workspace moved): while the device has nothing queued
  // behind the step in flight, this is device idle time.
  double graph_capture_s() const { return graph_capture_s_; }

  // Builds the StepPlan for `chunks` (exposed for tests).
  static backend::StepPlan plan(std::span<const SequenceChunk> chunks, int block_size);
  // The padded plan of a decode-only step: `bucket` rows, block tables `width` wide (exposed for tests).
  static backend::StepPlan padded_decode_plan(std::span<const SequenceChunk> chunks, int block_size, int bucket,
                                              int width);

 private:
  // bucket and width of a decode-only step, or false when the step runs unpadded.
  bool graph_shape(std::span<const SequenceChunk> chunks, int* bucket, int* width) const;
  // Runs the forward; returns the device logits: one row per chunk with want_logits, or, when *padded is set,
  // one row per chunk (then padding rows) whatever want_logits says. Chunks with a token_source read the ids
  // of the last started greedy step.
  TensorView forward(std::span<const SequenceChunk> chunks, bool* padded);
  TensorView forward_padded(std::span<const SequenceChunk> chunks, int bucket, int width);
  // The recording key of a (row bucket, width) decode step (0 unless graphs are on), and the step run from
  // it: replayed, or recorded and replayed (eagerly where recording fails).
  uint64_t graph_key(int bucket, int width) const;
  TensorView run_graph(const backend::StepMeta& meta, uint64_t key);
  // Uploads plan `p` (token sources mapped to device rows of the last started greedy step) and feeds them;
  // followers get the plan first (graph_key: the recording the step replays, 0: eager).
  backend::StepMeta upload(backend::StepPlan& p, uint64_t graph_key);

  model::LlamaModel& model_;
  backend::Backend& backend_;
  backend::KvCacheSpec kv_spec_;
  backend::KvCache kv_;
  std::vector<backend::KvCopyBatch> queued_copies_;  // queue_kv_copies(), for the next upload()
  GraphMode graph_mode_;
  StepFollowers* followers_ = nullptr;
  uint64_t graph_owner_;  // unique per runner: keys of different runners on one backend never collide
  std::unordered_map<uint64_t, TensorView> graph_logits_;  // logits view each recording writes
  int64_t graph_captures_ = 0;
  int64_t graph_replays_ = 0;
  double graph_capture_s_ = 0;
  std::vector<float> logits_;
  std::vector<float> padded_logits_;
  // [max(max_logit_rows, kMaxGraphBatch)] i32: argmax_rows / sample_rows output, two of them: consecutive
  // greedy steps alternate, so a step in flight keeps its ids while the next one runs.
  backend::DeviceTensor ids_device_[2];
  std::vector<int32_t> ids_;
  // A started greedy step (start_greedy -> finish_greedy).
  struct GreedyFlight {
    int buffer = 0;                    // ids_device_ / host_ids_ index
    uint64_t fence = 0;                // Backend::fence_host_copies() after its id copy
    int64_t rows = 0;                  // device rows copied
    std::vector<bool> wanted;          // padded steps with some want_logits false: per device row
    std::vector<int32_t> sample_rows;  // device row of each want_logits chunk, in order
  };
  std::deque<GreedyFlight> greedy_flights_;
  backend::Backend::StepDeviceTime last_step_time_;
  std::vector<int32_t> host_ids_[2];
  int next_ids_buffer_ = 0;
  bool warned_device_sampling_ = false;  // run_sampled() fell back to the host once (logged once)
  // run_sampled() scratch
  std::unique_ptr<DeviceSamplingPlanner> planner_;  // created on first use
  std::vector<int32_t> sample_logit_rows_;          // logits row of each input
  std::vector<size_t> device_inputs_, host_inputs_;  // input index of each device / host row
  std::vector<SampleInput> host_batch_;
  std::vector<float> host_logits_;                   // [host rows, vocab]
  int64_t device_sampled_rows_ = 0;
};

}  // namespace xinfer::engine
