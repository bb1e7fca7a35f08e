// LlamaModel::load_gguf_weights: the weights of a GGUF file (gguf_config.h names and permutations) onto the
// backend. A linear (and the embedding table) stays in its GGUF block format where the backend supports()
// it: its rows are copied as they are (blocks run along K, so a row is whole blocks and permuting or
// concatenating rows never splits one). Otherwise, and for F32/F16/BF16 tensors, it is dequantized once to
// f32 on the host and uploaded in the activation dtype; one log line per format says so. Norms are f32.
// Where the backend prefers its int kernels, the blocks are repacked into their int format (gguf_repack.h).
// A concatenated weight (q / k / v, gate / up) whose parts differ in type runs as segments, one per type.
#include <cstring>
#include <set>

#include "xinfer/core/logging.h"
#include "xinfer/core/progress_bar.h"
#include "xinfer/model/gguf_config.h"
#include "xinfer/model/gguf_file.h"
#include "xinfer/model/gguf_repack.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/shard_weights.h"
#include "xinfer/quant/gguf_types.h"
#include "xinfer/quant/weight_format.h"

namespace xinfer::model {
namespace {

bool is_float_type(quant::GgufType t) {
  return t == quant::GgufType::kF32 || t == quant::GgufType::kF16 || t == quant::GgufType::kBF16;
}

// One GGUF tensor that becomes rows of a (possibly concatenated) weight; `permute_head_dim` > 0 undoes the
// converter's q/k row permutation with that head dim.
struct Part {
  std::string name;
  Shape shape;  // expected row-major [N, K] (or [N] for vectors)
  int64_t permute_head_dim = 0;
};

}  // namespace

Status LlamaModel::load_gguf_weights(const GgufFile& file) {
  const ModelConfig& c = config_;
  const DType dtype = backend_.info().activation_dtype;
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q_rows = static_cast<int64_t>(c.num_heads) * D,
                kv_rows = static_cast<int64_t>(c.num_kv_heads) * D;
  ProgressBar progress("Loading weights", 9 * c.num_layers + (c.tie_word_embeddings ? 2 : 3), "tensors",
                       options_.show_progress);
  std::set<std::string> logged;

  // How linears of `type` are kept on this backend: repacked exactly into int4 / int8 per group (gguf_repack.h:
  // Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K per 32, Q6_K per 16) where the backend prefers its int kernels (CUDA: no
  // GGUF kernels; the CPU: Q4_K, Q5_0, Q6_K; the embedding table is never repacked), else the GGUF blocks where
  // it runs them, else dequantized.
  enum class Kept { kRepacked, kBlocks, kDequantized };
  auto kept = [&](quant::GgufType type, const std::string& name) {
    if (is_float_type(type) || options_.dequantize_gguf) return Kept::kDequantized;
    const std::optional<quant::IntGroupFormat> repacked = gguf_repack_format(type, name, shard_.sharded());
    if (backend_.prefers_repacked_gguf(type) && repacked && backend_.supports(*repacked)) return Kept::kRepacked;
    return backend_.supports(quant::GgufFormat{type}) ? Kept::kBlocks : Kept::kDequantized;
  };
  // Fetches the parts, checks their shapes, and uploads them as one weight in the best format.
  auto load_joined = [&](const std::vector<Part>& parts) -> Result<backend::LinearWeights> {
    std::vector<const GgufTensorInfo*> infos;
    for (const Part& p : parts) {
      XI_ASSIGN_OR_RETURN(const GgufTensorInfo* t, file.tensor(p.name, p.shape));
      infos.push_back(t);
    }
    const quant::GgufType type = infos[0]->type;
    bool same = true;
    for (const GgufTensorInfo* t : infos) same = same && t->type == type;
    const int64_t k = infos[0]->ne[0];
    int64_t rows = 0;
    for (const GgufTensorInfo* t : infos) rows += t->numel() / k;
    const bool vector = parts[0].shape.rank() == 1;
    const quant::WeightFormat packed = quant::GgufFormat{type};
    backend::LinearWeights w;
    w.k = k;
    auto row_of = [](const Part& p, const GgufTensorInfo& t, int64_t hf_row, size_t row_bytes) {
      const int64_t src = p.permute_head_dim > 0 ? gguf_row_of_hf_row(hf_row, p.permute_head_dim) : hf_row;
      return t.data + static_cast<size_t>(src) * row_bytes;
    };
    const Kept how = vector || !same ? Kept::kDequantized : kept(type, parts[0].name);
    if (how == Kept::kRepacked) {
      XI_ASSIGN_OR_RETURN(size_t row_bytes, quant::gguf_row_bytes(type, k));
      std::vector<uint8_t> gathered(static_cast<size_t>(rows) * row_bytes);
      uint8_t* dst = gathered.data();
      for (size_t i = 0; i < parts.size(); ++i) {
        const int64_t n = infos[i]->numel() / k;
        for (int64_t r = 0; r < n; ++r, dst += row_bytes)
          std::memcpy(dst, row_of(parts[i], *infos[i], r, row_bytes), row_bytes);
      }
      XI_ASSIGN_OR_RETURN(HostLinear h, repack_gguf_rows(type, gathered.data(), rows, k));
      if (logged.insert(h.note).second)
        XI_LOG(INFO) << h.note << " at load (" << backend_.info().name
                     << (backend_.supports(packed) ? ": its int kernels run it faster than its gguf("
                                                   : " has no kernel for gguf(")
                     << gguf_type_name(type) << "))";
      UploadedLinear up = upload_linear(backend_, h, dtype);
      owned_.insert(owned_.end(), up.buffers.begin(), up.buffers.end());
      weight_bytes_ += up.bytes;
      for (const GgufTensorInfo* t : infos) progress.advance(1, static_cast<int64_t>(t->bytes));
      return up.weights;
    }
    if (how == Kept::kBlocks) {
      XI_ASSIGN_OR_RETURN(size_t row_bytes, quant::gguf_row_bytes(type, k));
      HostTensor host(DType::kU8, Shape{rows, static_cast<int64_t>(row_bytes)});
      uint8_t* dst = host.data<uint8_t>();
      for (size_t i = 0; i < parts.size(); ++i) {
        const int64_t n = infos[i]->numel() / k;
        for (int64_t r = 0; r < n; ++r, dst += row_bytes)
          std::memcpy(dst, row_of(parts[i], *infos[i], r, row_bytes), row_bytes);
      }
      if (shard_.sharded()) {  // this rank's rows / whole blocks of columns (shard_weights.h)
        HostLinearView whole;
        whole.format = packed;
        whole.n = rows;
        whole.k = k;
        whole.weight = host.view();
        XI_ASSIGN_OR_RETURN(ShardedLinear mine, shard_for_rank(whole, shard_role(parts[0].name), shard_, parts[0].name));
        if (!std::holds_alternative<quant::GgufFormat>(mine.format)) {  // split off block boundaries
          backend::DeviceTensor t = backend_.upload(mine.weight.view(), dtype);
          owned_.push_back(t.buffer);
          weight_bytes_ += t.view.bytes();
          w.weight = t.view;
          w.format = quant::DenseFormat{};
          w.k = 0;
          for (const GgufTensorInfo* info : infos) progress.advance(1, static_cast<int64_t>(info->bytes));
          return w;
        }
        host = std::move(mine.weight);
        w.k = mine.k;
      }
      backend::DeviceTensor t = backend_.upload(host.view(), DType::kU8);
      owned_.push_back(t.buffer);
      weight_bytes_ += t.view.bytes();
      w.weight = t.view;
      w.format = packed;
    } else {
      HostTensor host(DType::kF32, vector ? Shape{k} : Shape{rows, k});
      float* dst = host.data<float>();
      for (size_t i = 0; i < parts.size(); ++i) {
        const GgufTensorInfo& t = *infos[i];
        XI_ASSIGN_OR_RETURN(size_t row_bytes, quant::gguf_row_bytes(t.type, k));
        const int64_t n = t.numel() / k;
        for (int64_t r = 0; r < n; ++r, dst += k) {
          const Status s = quant::dequantize_gguf(t.type, row_of(parts[i], t, r, row_bytes), k, dst);
          if (!s.ok()) return Status(s.code(), file.path() + ": tensor '" + t.name + "': " + s.message());
        }
        if (!vector && !is_float_type(t.type) && logged.insert(gguf_type_name(t.type)).second)
          XI_LOG(INFO) << "gguf: " << gguf_type_name(t.type) << " weights dequantized to "
                       << dtype_name(dtype) << " at load (" << backend_.info().name
                       << (options_.dequantize_gguf ? ": dequantization asked for)"
                           : same ? " has no kernel for gguf(" + std::string(gguf_type_name(t.type)) + "))"
                                  : ": parts of one concatenated weight differ in type)");
      }
      if (shard_.sharded() && !vector) {
        XI_ASSIGN_OR_RETURN(host, shard_dense_for_rank(host.view(), shard_role(parts[0].name), shard_, parts[0].name));
      }
      backend::DeviceTensor t = backend_.upload(host.view(), dtype);
      owned_.push_back(t.buffer);
      weight_bytes_ += t.view.bytes();
      w.weight = t.view;
      w.k = vector ? 0 : host.shape()[1];
    }
    for (const GgufTensorInfo* t : infos) progress.advance(1, static_cast<int64_t>(t->bytes));
    return w;
  };
  // A concatenated weight whose parts differ in type (llama.cpp's Q4_K_M: v in Q6_K beside q / k in Q4_K) is
  // loaded as segments, one per run of parts of one type, each in its own format (backend.h
  // LinearWeights::segments), where every one of them stays packed and the model is not sharded; otherwise
  // joined, dequantized (a dense segment beside a packed one would lose the dense weight's fused and tuned
  // decode GEMV and add a copy for a few MB).
  auto load = [&](const std::vector<Part>& parts) -> Result<backend::LinearWeights> {
    std::vector<std::vector<Part>> runs;
    std::vector<quant::GgufType> types;
    for (const Part& p : parts) {
      XI_ASSIGN_OR_RETURN(const GgufTensorInfo* t, file.tensor(p.name, p.shape));
      if (types.empty() || types.back() != t->type) {
        runs.emplace_back();
        types.push_back(t->type);
      }
      runs.back().push_back(p);
    }
    bool packed = true;
    for (size_t i = 0; i < runs.size(); ++i) packed = packed && kept(types[i], runs[i][0].name) != Kept::kDequantized;
    if (runs.size() == 1 || !packed || shard_.sharded()) return load_joined(parts);
    backend::LinearWeights w;
    std::string kinds;
    for (size_t i = 0; i < runs.size(); ++i) {
      XI_ASSIGN_OR_RETURN(backend::LinearWeights s, load_joined(runs[i]));
      kinds += std::string(kinds.empty() ? "" : " + ") + gguf_type_name(types[i]) + " as " +
               quant::format_name(s.format);
      w.segments.push_back(std::move(s));
    }
    if (logged.insert(kinds).second)
      XI_LOG(INFO) << "gguf: parts of one concatenated weight differ in type: run as segments (" << kinds
                   << "), e.g. " << parts[0].name;
    return w;
  };
  auto vec = [&](const std::string& name, int64_t n) -> Result<TensorView> {
    XI_ASSIGN_OR_RETURN(backend::LinearWeights w, load_joined({{name, Shape{n}, 0}}));
    return w.weight;
  };

  XI_ASSIGN_OR_RETURN(embed_, load({{gguf_tensor_name(-1, "token_embd"), Shape{V, H}, 0}}));
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights w;
    XI_ASSIGN_OR_RETURN(w.input_norm, vec(gguf_tensor_name(l, "attn_norm"), H));
    XI_ASSIGN_OR_RETURN(w.post_attention_norm, vec(gguf_tensor_name(l, "ffn_norm"), H));
    XI_ASSIGN_OR_RETURN(w.qkv, load({{gguf_tensor_name(l, "attn_q"), Shape{q_rows, H}, D},
                                     {gguf_tensor_name(l, "attn_k"), Shape{kv_rows, H}, D},
                                     {gguf_tensor_name(l, "attn_v"), Shape{kv_rows, H}, 0}}));
    XI_ASSIGN_OR_RETURN(w.o, load({{gguf_tensor_name(l, "attn_output"), Shape{H, q_rows}, 0}}));
    XI_ASSIGN_OR_RETURN(w.gate_up, load({{gguf_tensor_name(l, "ffn_gate"), Shape{I, H}, 0},
                                         {gguf_tensor_name(l, "ffn_up"), Shape{I, H}, 0}}));
    XI_ASSIGN_OR_RETURN(w.down, load({{gguf_tensor_name(l, "ffn_down"), Shape{H, I}, 0}}));
    layers_.push_back(w);
  }
  XI_ASSIGN_OR_RETURN(final_norm_, vec(gguf_tensor_name(-1, "output_norm"), H));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;  // vocabulary-parallel: the rank's embedding rows (whole GGUF rows) are its lm_head rows
  } else {
    XI_ASSIGN_OR_RETURN(lm_head_, load({{gguf_tensor_name(-1, "output"), Shape{V, H}, 0}}));
  }
  progress.finish();
  return Status();
}

}  // namespace xinfer::model
