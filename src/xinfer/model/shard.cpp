#include "xinfer/model/shard.h"

#include <algorithm>
#include <sstream>

#include "xinfer/core/check.h"

namespace xinfer::model {

Result<ModelShard> ModelShard::make(const ModelConfig& c, int tp_size, int rank) {
  const std::string n = std::to_string(tp_size);
  if (tp_size < 1) return invalid_argument("tensor_parallel_size must be >= 1, got " + n);
  if (rank < 0 || rank >= tp_size)
    return invalid_argument("tensor parallel rank " + std::to_string(rank) + " is outside [0, " + n + ")");
  if (c.num_heads % tp_size != 0)
    return invalid_argument("tensor_parallel_size " + n + " does not divide the model's " +
                            std::to_string(c.num_heads) + " attention heads (config.json num_attention_heads)");
  if (c.num_kv_heads >= tp_size ? c.num_kv_heads % tp_size != 0 : tp_size % c.num_kv_heads != 0)
    return invalid_argument("tensor_parallel_size " + n + " and the model's " + std::to_string(c.num_kv_heads) +
                            " kv heads (config.json num_key_value_heads): one must divide the other");
  if (c.intermediate_size % tp_size != 0)
    return invalid_argument("tensor_parallel_size " + n + " does not divide the model's FFN width " +
                            std::to_string(c.intermediate_size) + " (config.json intermediate_size)");
  ModelShard s;
  s.tp_size = tp_size;
  s.rank = rank;
  s.head_dim = c.head_dim;
  s.total_heads = c.num_heads;
  s.total_kv_heads = c.num_kv_heads;
  s.hidden = c.hidden_size;
  s.num_heads = c.num_heads / tp_size;
  s.head_begin = rank * s.num_heads;
  if (c.num_kv_heads >= tp_size) {
    s.num_kv_heads = c.num_kv_heads / tp_size;
    s.kv_head_begin = rank * s.num_kv_heads;
  } else {
    s.num_kv_heads = 1;
    s.kv_head_begin = rank / (tp_size / c.num_kv_heads);
  }
  s.ffn = c.intermediate_size / tp_size;
  s.ffn_begin = rank * s.ffn;
  s.vocab = c.vocab_size;
  s.vocab_begin = s.vocab_offset(rank);
  s.vocab_end = s.vocab_offset(rank + 1);
  return s;
}

ModelShard ModelShard::whole(const ModelConfig& c) {
  Result<ModelShard> s = make(c, 1, 0);
  XI_CHECK(s.ok()) << s.status().to_string();
  return *s;
}

int64_t ModelShard::vocab_offset(int r) const {
  // The first vocab % N ranges are one longer.
  const int64_t base = vocab / tp_size, extra = vocab % tp_size;
  return base * r + std::min<int64_t>(r, extra);
}

int64_t ModelShard::parameter_count(const ModelConfig& c) const {
  const int64_t H = hidden, D = head_dim;
  int64_t layer = 2 * H + qkv_rows() * H + H * o_cols() + 3 * ffn * H;
  if (c.attention_bias) layer += qkv_rows();
  if (c.o_bias && rank == 0) layer += H;
  if (c.qk_norm) layer += 2 * D;
  if (c.mlp_bias) layer += 2 * ffn + (rank == 0 ? H : 0);
  const int64_t vocab_rows = local_vocab() * H;  // embedding shard; the lm_head another one unless tied
  return vocab_rows * (c.tie_word_embeddings ? 1 : 2) + layer * c.num_layers + H;
}

std::vector<LinearShape> ModelShard::linear_shapes(const ModelConfig& c) const {
  const bool first = rank == 0;  // row-parallel biases are added once, on rank 0
  return {{"qkv", qkv_rows(), hidden, c.attention_bias, true, false},
          {"o", hidden, o_cols(), c.o_bias && first, false, false},
          {"gate_up", 2 * ffn, hidden, c.mlp_bias, true, false},
          {"down", hidden, ffn, c.mlp_bias && first, false, false},
          {"lm_head", local_vocab(), hidden, false, false, true}};
}

std::string ModelShard::to_string() const {
  std::ostringstream os;
  os << "tp " << tp_size << "/rank " << rank << ": heads " << num_heads << " [" << head_begin << ", "
     << head_begin + num_heads << "), kv heads " << num_kv_heads << " [" << kv_head_begin << ", "
     << kv_head_begin + num_kv_heads << "), ffn " << ffn << " [" << ffn_begin << ", " << ffn_begin + ffn
     << "), vocab [" << vocab_begin << ", " << vocab_end << ")";
  return os.str();
}

Status validate_group_size(const ModelShard& s, int group_size, const std::string& what) {
  if (!s.sharded() || group_size <= 0) return Status();
  if (s.ffn % group_size != 0)
    return invalid_argument(what + ": tensor_parallel_size " + std::to_string(s.tp_size) + " splits down_proj's " +
                            std::to_string(s.ffn * s.tp_size) + " input columns into shares of " +
                            std::to_string(s.ffn) + ", not a multiple of the quantization group size " +
                            std::to_string(group_size));
  if (s.o_cols() % group_size != 0)
    return invalid_argument(what + ": tensor_parallel_size " + std::to_string(s.tp_size) + " splits o_proj's " +
                            std::to_string(s.o_cols() * s.tp_size) + " input columns into shares of " +
                            std::to_string(s.o_cols()) + ", not a multiple of the quantization group size " +
                            std::to_string(group_size));
  return Status();
}

}  // namespace xinfer::model
