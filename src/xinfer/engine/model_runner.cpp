#include "xinfer/engine/model_runner.h"

#include <algorithm>

#include "xinfer/core/check.h"

namespace xinfer::engine {

ModelRunner::ModelRunner(model::LlamaModel& model, backend::Backend& backend, const backend::KvCacheSpec& kv_spec)
    : model_(model), backend_(backend), kv_spec_(kv_spec), kv_(backend.allocate_kv_cache(kv_spec)) {}

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
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      const int32_t pos = c.start_pos + static_cast<int32_t>(i);
      p.token_ids.push_back(c.tokens[i]);
      p.positions.push_back(pos);
      p.slot_mapping.push_back(c.block_table[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size);
    }
    if (c.want_logits) p.logit_rows.push_back(static_cast<int32_t>(p.token_ids.size()) - 1);
    p.query_start_loc.push_back(static_cast<int32_t>(p.token_ids.size()));
    p.seq_lens.push_back(end);
    p.max_seq_len = std::max(p.max_seq_len, end);
    p.block_tables.insert(p.block_tables.end(), c.block_table.begin(), c.block_table.end());
    p.block_tables.resize(p.block_tables.size() + max_blocks - c.block_table.size(), 0);
  }
  return p;
}

const std::vector<float>& ModelRunner::run(std::span<const SequenceChunk> chunks) {
  const backend::StepPlan p = plan(chunks, kv_spec_.block_size);
  const backend::StepMeta meta = backend_.upload_step(p);
  const TensorView logits = model_.forward(meta, kv_);
  logits_.resize(static_cast<size_t>(logits.numel()));
  if (logits.numel() > 0) backend_.to_host_f32(logits, logits_.data());
  return logits_;
}

}  // namespace xinfer::engine
