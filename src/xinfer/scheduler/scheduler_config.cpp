#include "xinfer/scheduler/scheduler_config.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

namespace xinfer::sched {

Status SchedulerConfig::validate() const {
  auto bad = [](const std::string& what) { return invalid_argument("scheduler config: " + what); };
  if (block_size < 1) return bad("block_size must be >= 1");
  if (num_blocks < 2) return bad("num_blocks must be >= 2 (the null block and one usable block); got " + std::to_string(num_blocks));
  if (num_swap_blocks < 0) return bad("num_swap_blocks must be >= 0");
  if (max_num_seqs < 1) return bad("max_num_seqs must be >= 1");
  if (max_num_batched_tokens < 1) return bad("max_num_batched_tokens must be >= 1");
  if (max_model_len < 0) return bad("max_model_len must be >= 0");
  if (min_decode_interval < 1) return bad("min_decode_interval must be >= 1");
  if (max_decode_interval < min_decode_interval) return bad("max_decode_interval must be >= min_decode_interval");
  if (decode_interval < min_decode_interval || decode_interval > max_decode_interval)
    return bad("decode_interval must be within [min_decode_interval, max_decode_interval]");
  if (target_queue_time_s <= 0 || target_step_time_s <= 0) return bad("latency targets must be > 0");
  if (kv_watermark < 0 || kv_watermark >= 1) return bad("kv_watermark must be in [0, 1)");
  if (max_bypass < 0) return bad("max_bypass must be >= 0");
  if (!(prefill_tokens_per_decode >= 0)) return bad("prefill_tokens_per_decode must be >= 0");
  if (min_prefill_budget < 1) return bad("min_prefill_budget must be >= 1");
  return Status::ok_status();
}

int SchedulerConfig::prefill_budget(int num_decodes) const {
  if (num_decodes <= 0 || prefill_tokens_per_decode <= 0) return max_num_batched_tokens;
  const double shrunk = static_cast<double>(max_num_batched_tokens) - prefill_tokens_per_decode * num_decodes;
  const double floored = std::max(shrunk, static_cast<double>(min_prefill_budget));
  return static_cast<int>(std::min(floored, static_cast<double>(max_num_batched_tokens)));
}

int SchedulerConfig::effective_decode_interval(int interval, int num_decodes) const {
  const int64_t budget = prefill_budget(num_decodes);
  const int64_t scaled =
      (static_cast<int64_t>(interval) * budget + max_num_batched_tokens - 1) / max_num_batched_tokens;
  return static_cast<int>(std::max<int64_t>(1, scaled));
}

std::string SchedulerConfig::to_string() const {
  std::ostringstream os;
  os << "block_size=" << block_size << " num_blocks=" << num_blocks
     << " enable_prefix_caching=" << (enable_prefix_caching ? "true" : "false")
     << " num_swap_blocks=" << num_swap_blocks << " max_num_seqs=" << max_num_seqs
     << " max_num_batched_tokens=" << max_num_batched_tokens << " max_model_len=" << max_model_len
     << " decode_interval=" << decode_interval << " min_decode_interval=" << min_decode_interval
     << " max_decode_interval=" << max_decode_interval << " target_queue_time_s=" << target_queue_time_s
     << " target_step_time_s=" << target_step_time_s << " kv_watermark=" << kv_watermark
     << " reorder_window=" << reorder_window << " max_bypass=" << max_bypass
     << " prefill_tokens_per_decode=" << prefill_tokens_per_decode
     << " min_prefill_budget=" << min_prefill_budget;
  return os.str();
}

}  // namespace xinfer::sched
