#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"

#include <algorithm>

#include "xinfer/core/check.h"

namespace xinfer::cuda {

AttentionPlanHost build_attention_plan(const backend::StepPlan& plan) {
  AttentionPlanHost out;
  out.token_seq.resize(plan.token_ids.size());
  for (int s = 0; s < plan.num_seqs(); ++s) {
    const int32_t begin = plan.query_start_loc[static_cast<size_t>(s)];
    const int32_t end = plan.query_start_loc[static_cast<size_t>(s) + 1];
    XI_CHECK(begin <= end && end <= plan.num_tokens()) << "query_start_loc of seq " << s << ": " << begin << ".." << end;
    for (int32_t t = begin; t < end; ++t) out.token_seq[static_cast<size_t>(t)] = s;
    const int32_t qlen = end - begin;
    if (qlen == 1) {
      const int32_t kv_len = plan.positions[static_cast<size_t>(begin)] + 1;
      out.decode_seqs.push_back(s);
      out.decode_lens.push_back(kv_len);
      out.max_decode_len = std::max(out.max_decode_len, kv_len);
    } else {
      for (int32_t m0 = 0; m0 < qlen; m0 += kPrefillTileRows) {
        out.prefill_items.push_back(s);
        out.prefill_items.push_back(m0);
        out.prefill_tile_context += plan.seq_lens[static_cast<size_t>(s)];
      }
    }
  }
  if (!out.decode_seqs.empty()) out.max_decode_len = std::max(out.max_decode_len, plan.padded_context_len);
  return out;
}

bool prefer_wgmma_prefill(const AttentionPlanHost& plan) {
  const int items = plan.num_prefill_items();
  return items > 0 && plan.prefill_tile_context >= kWgmmaPrefillMinContext * items;
}

int decode_partition_size(int num_decode, int max_decode_len, int num_kv_heads, int group, int num_sms) {
  const int64_t pairs = static_cast<int64_t>(num_decode) * num_kv_heads * decode_head_tiles(group);
  const int64_t wave = static_cast<int64_t>(kDecodeCtasPerSm) * num_sms;
  int64_t size = kDecodePartitionQuantum;
  while (size < max_decode_len && pairs * ((max_decode_len + size - 1) / size) > wave) size *= 2;
  // Two one-tile-per-warp partitions lose to one: the merge costs more than a second tile per warp (H200,
  // batch 1, context 256: 6.8 -> 5.3 us; docs/PERF.md). Larger partitions keep the split (unmeasured).
  if (size == kDecodePartitionQuantum && (max_decode_len + size - 1) / size == 2) size *= 2;
  return static_cast<int>(std::min<int64_t>(size, INT32_MAX / 2));
}

int decode_warps(int num_decode, int max_decode_len, int num_kv_heads, int group, int num_sms, int many_warps) {
  XI_CHECK(many_warps == 0 || many_warps == 8 || many_warps == 4 || many_warps == 2)
      << "decode attention: no " << many_warps << "-warp kernel (8, 4, 2; 0: the measured rule)";
  const int64_t ctas = static_cast<int64_t>(num_decode) * num_kv_heads * decode_head_tiles(group);
  if (ctas <= static_cast<int64_t>(kDecodeCtasPerSm) * num_sms) return kDecodeWarps;
  if (many_warps != 0) return many_warps;
  return max_decode_len <= kDecodeShortContext && ctas >= static_cast<int64_t>(decode_ctas_per_sm(2)) * num_sms ? 2 : 4;
}

}  // namespace xinfer::cuda
