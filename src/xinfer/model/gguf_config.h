// ModelConfig and tensor names of a GGUF file (llama.cpp's metadata keys), for general.architecture ==
// "llama" (Llama 2/3, Mistral-style and SmolLM files converted by llama.cpp's convert_hf_to_gguf.py).
//
// Metadata -> ModelConfig (ARCH = general.architecture):
//   ARCH.embedding_length -> hidden_size          ARCH.block_count -> num_layers
//   ARCH.feed_forward_length -> intermediate_size  ARCH.attention.head_count(_kv) -> num_heads, num_kv_heads
//   ARCH.attention.key_length (else hidden / heads) -> head_dim; ARCH.rope.dimension_count must equal it
//   ARCH.vocab_size (else the length of tokenizer.ggml.tokens) -> vocab_size
//   ARCH.context_length -> max_position_embeddings   ARCH.rope.freq_base (10000) -> rope_theta
//   ARCH.rope.scaling.type none|linear|yarn, .factor, .original_context_length -> rope_scaling
//   ARCH.attention.layer_norm_rms_epsilon -> rms_norm_eps
//   tie_word_embeddings when output.weight is absent; tokenizer.ggml.bos/eos_token_id -> bos / eos ids
// Llama 3 rope scaling is stored by the converter as a `rope_freqs.weight` tensor: UNIMPLEMENTED for now.
//
// Tensor names (GGUF -> the Hugging Face parameter): token_embd (embed_tokens), output_norm (norm), output
// (lm_head), blk.N.attn_norm / attn_q / attn_k / attn_v / attn_output / ffn_norm / ffn_gate / ffn_up /
// ffn_down (input_layernorm, q/k/v/o_proj, post_attention_layernorm, gate/up/down_proj), all ".weight".
// The converter permutes the rows of attn_q and attn_k (per head: rows [2, D/2] interleaved as [D/2, 2]);
// gguf_row_of_hf_row() undoes it at load.
#pragma once

#include <cstdint>
#include <string>

#include "xinfer/core/status.h"
#include "xinfer/model/gguf_file.h"
#include "xinfer/model/model_config.h"

namespace xinfer::model {

// True when `path` names a regular file ending in ".gguf" (what --model accepts besides directories).
bool is_gguf_path(const std::string& path);

// Errors name the file and the key: "m.gguf: unsupported general.architecture 'qwen2' (supported: llama)".
Result<ModelConfig> gguf_model_config(const GgufFile& file);
Result<ModelConfig> load_gguf_model_config(const std::string& path);

// "blk.3.attn_q.weight" for (3, "attn_q"); "token_embd.weight" for (-1, "token_embd").
std::string gguf_tensor_name(int layer, const char* name);

// Row r of the Hugging Face q/k projection is row gguf_row_of_hf_row(r) of the GGUF attn_q/attn_k tensor:
// within each head of head_dim rows, HF row i * head_dim / 2 + j is GGUF row 2 * j + i (i in {0, 1}).
int64_t gguf_row_of_hf_row(int64_t r, int64_t head_dim);

}  // namespace xinfer::model
