// Sharding a linear's host tensors for a tensor-parallel rank, in every weight format of quant/
// (weight_format.h), at load time, before upload (docs/tensor_parallel.md):
//
//   shard_rows(w, r0, r1)   column-parallel (qkv, gate_up; lm_head, embedding: vocabulary rows): output rows [r0, r1) of W [N, K]. The
//                           weight's rows and every per-row side tensor go with them: scales [N] / [N, G],
//                           zeros [N, G], bias [N]; per-tensor scales ([1]), input_scale and g_idx ([K])
//                           are kept whole. Exact in every format (rows are independent).
//   shard_cols(w, c0, c1)   row-parallel (o, down): input columns [c0, c1) of W. Dense, int8-channel and
//                           W8A8: the weight's columns (per-row scales kept whole). Per-group: only at group
//                           boundaries (c0 and c1 multiples of group_size, or c1 == K; int4 also at an even
//                           column), the scales' / zeros' group columns with them; with a g_idx, its slice
//                           must reference a contiguous run of groups (then renumbered from 0). GGUF: only at
//                           block boundaries (whole blocks of each row). Where a split does not fall on a
//                           boundary the slice is dequantized to dense f32 (one log line naming the tensor):
//                           correct, larger, slower. The bias is not sliced: the caller keeps it on one rank.
//   concat_shards(parts)      fuses per-rank shards of the same format and K (q, k, v -> qkv; gate, up ->
//                           gate_up) into one linear: rows stacked, side tensors stacked the same way.
//                           Parts in different formats are dequantized to dense f32 first (logged).
//
// Invariant (tests/unit/tp/shard_weights_test.cpp): for every format, the dequantized shards concatenated
// along the split axis equal the dequantized unsharded weight, bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "xinfer/core/status.h"
#include "xinfer/core/tensor.h"
#include "xinfer/model/shard.h"
#include "xinfer/quant/quantized_linear.h"
#include "xinfer/quant/weight_format.h"

namespace xinfer::model {

// A linear's tensors on the host, borrowed (e.g. from an mmapped checkpoint). Shapes as in
// weight_format.h: weight [n, k] dense or packed; scales, zeros, g_idx, input_scale, bias optional (empty).
struct HostLinearView {
  quant::WeightFormat format = quant::DenseFormat{};
  int64_t n = 0, k = 0;
  TensorView weight, scales, zeros, g_idx, input_scale, bias;
  quant::QuantizedMatrix matrix() const;  // for quant::dequantize_matrix / quantized_matmul (needs f32 scales)
};

// The same, owning its tensors.
struct ShardedLinear {
  quant::WeightFormat format = quant::DenseFormat{};
  int64_t n = 0, k = 0;
  HostTensor weight, scales, zeros, g_idx, input_scale, bias;
  HostLinearView view() const;
};

// Copies of every tensor of `w` (the identity shard).
ShardedLinear copy_shard(const HostLinearView& w);
// `name` (the checkpoint tensor, for errors and log lines). INVALID_ARGUMENT for a range outside W.
Result<ShardedLinear> shard_rows(const HostLinearView& w, int64_t r0, int64_t r1, const std::string& name);
Result<ShardedLinear> shard_cols(const HostLinearView& w, int64_t c0, int64_t c1, const std::string& name);
Result<ShardedLinear> concat_shards(std::span<const ShardedLinear> parts, const std::string& name);
// W dequantized to dense f32 [n, k] (bias kept).
ShardedLinear dequantize_shard(const HostLinearView& w);

// How a checkpoint tensor of the whole model is split between ranks (ModelShard's table), from its Hugging
// Face name: q/k/v_proj (weight or bias; already fused [q | k | v] by the loader) -> kQkv; gate/up_proj ->
// kGateUp (fused [gate | up]); o/down_proj weight -> kRowParallel; o/down_proj bias -> kRank0Only (zeros on
// the other ranks, so the all-reduce adds it once); lm_head and the embedding (embed_tokens) -> kVocabRows;
// everything else (norms, q/k norms) -> kReplicated. GGUF names map the same way (attn_q/k/v, ffn_gate/up,
// attn_output/ffn_down, output, token_embd).
enum class ShardRole { kReplicated, kQkv, kGateUp, kRowParallel, kRank0Only, kVocabRows };
ShardRole shard_role(const std::string& name);
const char* shard_role_name(ShardRole r);
// This rank's part of the whole (fused) linear `w` of `role`: qkv takes its q heads' rows, its kv heads' k rows
// and v rows and fuses them [q | k | v]; gate_up its ffn rows of gate and of up; row-parallel its input
// columns; vocab rows its vocabulary rows [vocab_begin, vocab_end) (lm_head or embedding table). A 1-D w (a bias: n elements, k = 1) is split like the rows of its
// linear. w must have the whole model's shape for its role (INVALID_ARGUMENT naming `name` otherwise).
Result<ShardedLinear> shard_for_rank(const HostLinearView& w, ShardRole role, const ModelShard& s,
                                     const std::string& name);
// The same for a dense f32 host tensor (1-D or 2-D): the dense loader's path. Returns the rank's tensor.
Result<HostTensor> shard_dense_for_rank(const TensorView& full, ShardRole role, const ModelShard& s,
                                        const std::string& name);

}  // namespace xinfer::model
