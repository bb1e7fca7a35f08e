// ModelShard: what one tensor-parallel rank of a model holds (docs/tensor_parallel.md), derived from the
// ModelConfig once and the single source of every per-rank size: linear shapes, weight bytes, workspaces,
// the KV-cache spec and the GEMM tuner's shapes.
//
// Split (N = tp_size, r = rank; Megatron-style):
//   attention heads   q heads [r * Hq/N, (r+1) * Hq/N)                       (N must divide Hq)
//   kv heads          Hkv >= N: [r * Hkv/N, (r+1) * Hkv/N)                   (N must divide Hkv)
//                     Hkv <  N: one head, r / (N/Hkv), replicated on N/Hkv ranks (Hkv must divide N), so
//                     each rank's q heads still read their own group's kv head
//   qkv (column)      rows of q, k, v by heads, fused per rank: [(q_local + 2 kv_local) * D, H]
//   o (row)           columns [r * Hq/N * D, ...): y partial, all-reduced at the residual (bias on rank 0)
//   gate_up (column)  rows [r * I/N, (r+1) * I/N) of gate and of up, fused per rank: [2 I/N, H]
//   down (row)        columns [r * I/N, ...): all-reduced at the residual (bias on rank 0)  (N must divide I)
//   embedding (vocab) rows [vocab_begin, vocab_end) of the table: the lookup writes the rows of ids in the
//                     range and -0.0 elsewhere, all-reduced (sum) into every rank's whole hidden states (exact:
//                     one term per element is not -0.0); tied: the same shard is the lm_head (one copy)
//   lm_head (vocab)   rows [vocab_begin, vocab_end): V split in N contiguous ranges, the first V % N of them one
//                     row longer (ceil / floor sizes, no padding); logits all-gathered along the vocabulary
// An INT4/INT8 per-group checkpoint also needs every row-parallel split at a group boundary (checked by
// validate_group_size at load, where the format is known). tp_size 1 is the unsharded model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xinfer/core/status.h"
#include "xinfer/model/model_config.h"

namespace xinfer::model {

// One linear of a rank's decoder layers (or its lm_head) as the GEMM tuner and the workspaces see it: the
// weight is [n, k] (y[m, n] = x[m, k] W^T).
struct LinearShape {
  const char* name = "";      // "qkv", "o", "gate_up", "down", "lm_head"
  int64_t n = 0, k = 0;
  bool bias = false;          // this rank adds a bias (row-parallel linears: rank 0 only)
  bool normed_input = false;  // reads the residual through an RMSNorm (qkv, gate_up)
  bool lm_head = false;       // f32 logits, on up to max_logit_rows rows (the others: up to a step's tokens)
};

struct ModelShard {
  int tp_size = 1;
  int rank = 0;
  int num_heads = 0;      // local q heads
  int num_kv_heads = 0;   // local kv heads
  int head_begin = 0;     // first global q head
  int kv_head_begin = 0;  // first global kv head
  int head_dim = 0;
  int total_heads = 0, total_kv_heads = 0;  // the model's Hq, Hkv
  int64_t hidden = 0;      // H (not split)
  int64_t ffn = 0;         // local intermediate size I/N
  int64_t ffn_begin = 0;
  int64_t vocab = 0;       // V
  int64_t vocab_begin = 0, vocab_end = 0;  // this rank's embedding / lm_head rows

  // The shard of rank `rank` of `tp_size`; INVALID_ARGUMENT naming the field and config.json when tp_size
  // does not divide the heads, the kv heads (or they it) or the FFN width, or rank is out of range.
  static Result<ModelShard> make(const ModelConfig& c, int tp_size, int rank);
  // The unsharded model (tp_size 1).
  static ModelShard whole(const ModelConfig& c);

  bool sharded() const { return tp_size > 1; }
  int64_t q_rows() const { return static_cast<int64_t>(num_heads) * head_dim; }
  int64_t kv_rows() const { return static_cast<int64_t>(num_kv_heads) * head_dim; }
  int64_t qkv_rows() const { return q_rows() + 2 * kv_rows(); }  // fused qkv: [qkv_rows, H]
  int64_t o_cols() const { return q_rows(); }                     // o: [H, o_cols]
  int64_t local_vocab() const { return vocab_end - vocab_begin; }  // embedding, lm_head: [local_vocab, H]
  // Start of rank r's lm_head rows (r in [0, tp_size]): the offsets of the all-gathered logits.
  int64_t vocab_offset(int r) const;
  // Parameters this rank holds (its embedding / lm_head rows, local_vocab x H each, once when tied; norms
  // replicated; biases of row-parallel linears counted on rank 0 only): the basis of the memory plan's weight
  // estimate.
  int64_t parameter_count(const ModelConfig& c) const;
  // This rank's linears, in forward order: qkv [qkv_rows, H], o [H, o_cols], gate_up [2 ffn, H],
  // down [H, ffn], lm_head [local_vocab, H] (the shapes LlamaModel loads; the tuner measures these).
  std::vector<LinearShape> linear_shapes(const ModelConfig& c) const;
  // "tp 3/rank 1: heads 3 [3, 6), kv heads 1 [1, 2), ffn 512 [512, 1024), vocab [16384, 32768)"
  std::string to_string() const;
};

// Row-parallel linears split K at multiples of the ffn / o shares: with a per-group format every share must
// be a whole number of groups. INVALID_ARGUMENT naming the linear, the share and the group size.
Status validate_group_size(const ModelShard& s, int group_size, const std::string& what);

}  // namespace xinfer::model
