#include "xinfer/model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "xinfer/core/logging.h"
#include "xinfer/core/progress_bar.h"
#include "xinfer/model/checkpoint_linear.h"
#include "xinfer/model/dummy_quantized.h"
#include "xinfer/model/gguf_config.h"
#include "xinfer/model/gguf_file.h"
#include "xinfer/model/preset_configs.h"
#include "xinfer/model/rope.h"
#include "xinfer/model/safetensors.h"
#include "xinfer/model/shard_weights.h"

namespace xinfer::model {
namespace {

// Concatenates the rows of several host tensors (any float dtype) into one f32 host tensor.
HostTensor concat_rows_f32(const std::vector<TensorView>& parts) {
  int64_t rows = 0;
  const int64_t cols = parts[0].shape.rank() == 1 ? 1 : parts[0].shape[1];
  for (const auto& p : parts) rows += p.shape[0];
  HostTensor out(DType::kF32, parts[0].shape.rank() == 1 ? Shape{rows} : Shape{rows, cols});
  float* dst = out.data<float>();
  for (const auto& p : parts) {
    convert_to_f32(p.dtype, p.data, dst, static_cast<size_t>(p.numel()));
    dst += p.numel();
  }
  return out;
}

}  // namespace

const char* linear_site_name(LinearSite s) {
  switch (s) {
    case LinearSite::kQkv: return "qkv";
    case LinearSite::kO: return "o";
    case LinearSite::kGateUp: return "gate_up";
    case LinearSite::kDown: return "down";
  }
  return "?";
}

const char* load_format_name(LoadFormat f) { return f == LoadFormat::kDummy ? "dummy" : "auto"; }

Result<LoadFormat> parse_load_format(const std::string& s) {
  if (s == "auto") return LoadFormat::kAuto;
  if (s == "dummy") return LoadFormat::kDummy;
  return invalid_argument("load format must be 'auto' or 'dummy', got '" + s + "'");
}

int64_t LlamaModel::parameter_count(const ModelConfig& c) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q = static_cast<int64_t>(c.num_heads) * D, kv = static_cast<int64_t>(c.num_kv_heads) * D;
  int64_t layer = 2 * H + (q + 2 * kv) * H + H * q + 3 * I * H;
  if (c.attention_bias) layer += q + 2 * kv;
  if (c.o_bias) layer += H;
  if (c.qk_norm) layer += 2 * D;
  if (c.mlp_bias) layer += 2 * I + H;
  return V * H * (c.tie_word_embeddings ? 1 : 2) + layer * c.num_layers + H;
}

LlamaModel::LlamaModel(ModelConfig config, backend::Backend& backend, LoadOptions options)
    : config_(std::move(config)), backend_(backend), options_(options), shard_(ModelShard::whole(config_)) {
  max_model_len_ = options_.max_model_len > 0 ? options_.max_model_len : config_.max_position_embeddings;
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(const std::string& dir, backend::Backend& backend,
                                                     const LoadOptions& options) {
  if (options.load_format == LoadFormat::kAuto && is_gguf_path(dir)) {
    XI_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(dir));
    XI_ASSIGN_OR_RETURN(ModelConfig config, gguf_model_config(file));
    XI_ASSIGN_OR_RETURN(ModelShard shard, ModelShard::make(config, options.tp_size, options.tp_rank));
    if (options.max_model_len > config.max_position_embeddings)
      return invalid_argument("max_model_len " + std::to_string(options.max_model_len) +
                              " exceeds the model's context length " +
                              std::to_string(config.max_position_embeddings));
    std::unique_ptr<LlamaModel> model(new LlamaModel(std::move(config), backend, options));
    model->shard_ = shard;
    XI_RETURN_IF_ERROR(model->load_gguf_weights(file));
    model->make_rope_table();
    model->allocate_workspace();
    return model;
  }
  if (options.load_format == LoadFormat::kAuto && is_preset(dir))
    return invalid_argument("model " + dir + " is a built-in config without weights: use --load-format dummy, "
                            "or give a model directory");
  XI_ASSIGN_OR_RETURN(ModelConfig config, options.load_format == LoadFormat::kDummy ? resolve_model_config(dir)
                                                                                    : load_model_config(dir));
  if (options.max_model_len > config.max_position_embeddings)
    return invalid_argument("max_model_len " + std::to_string(options.max_model_len) +
                            " exceeds the model's max_position_embeddings " +
                            std::to_string(config.max_position_embeddings));
  // Tensor parallelism: every size checked before any weight is read.
  XI_ASSIGN_OR_RETURN(ModelShard shard, ModelShard::make(config, options.tp_size, options.tp_rank));
  if (shard.sharded()) {
    XI_CHECK(options.comm != nullptr && options.comm->size() == options.tp_size && options.comm->rank() == options.tp_rank)
        << "tensor parallel rank " << options.tp_rank << " of " << options.tp_size << " needs its communicator";
    std::vector<int> groups;
    if (config.quantization.group_size > 0) groups.push_back(config.quantization.group_size);
    for (const auto& scheme : config.quantization.schemes)
      if (scheme.weights.group_size > 0) groups.push_back(scheme.weights.group_size);
    for (int g : groups)
      XI_RETURN_IF_ERROR(validate_group_size(shard, g, dir + " (quantization_config group_size " +
                                                           std::to_string(g) + ")"));
  }
  std::unique_ptr<LlamaModel> model(new LlamaModel(std::move(config), backend, options));
  model->shard_ = shard;
  XI_RETURN_IF_ERROR(model->load_weights(dir));
  model->allocate_workspace();
  return model;
}

Status LlamaModel::load_weights(const std::string& dir) {
  const bool dummy = options_.load_format == LoadFormat::kDummy;
  std::optional<WeightFiles> files;
  if (!dummy) {
    XI_ASSIGN_OR_RETURN(WeightFiles opened, WeightFiles::open(dir));
    files.emplace(std::move(opened));
  }
  const ModelConfig& c = config_;
  const DType dtype = backend_.info().activation_dtype;
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q_rows = static_cast<int64_t>(c.num_heads) * D, kv_rows = static_cast<int64_t>(c.num_kv_heads) * D;

  const int64_t per_layer = 9 + (c.attention_bias ? 3 : 0) + (c.o_bias ? 1 : 0) + (c.qk_norm ? 2 : 0) +
                            (c.mlp_bias ? 3 : 0);
  ProgressBar progress("Loading weights", per_layer * c.num_layers + (c.tie_word_embeddings ? 2 : 3), "tensors",
                       options_.show_progress);

  auto upload = [&](const std::vector<TensorView>& parts, const std::string& name) -> Result<TensorView> {
    HostTensor host = concat_rows_f32(parts);
    if (shard_.sharded()) {  // this rank's rows / columns of the whole (fused) tensor
      XI_ASSIGN_OR_RETURN(host, shard_dense_for_rank(host.view(), shard_role(name), shard_, name));
    }
    backend::DeviceTensor t = backend_.upload(host.view(), dtype);
    owned_.push_back(t.buffer);
    weight_bytes_ += t.view.bytes();
    for (const auto& p : parts) progress.advance(1, static_cast<int64_t>(p.bytes()));
    return t.view;
  };
  // Dummy weights: one random stream per tensor (seeded by its index), norm weights 1 as in a fresh model.
  uint64_t dummy_index = 0;
  auto make_dummy = [&](const std::vector<std::pair<std::string, Shape>>& specs) -> TensorView {
    int64_t rows = 0;
    for (const auto& sp : specs) rows += sp.second[0];
    const Shape shape = specs[0].second.rank() == 1 ? Shape{rows} : Shape{rows, specs[0].second[1]};
    const std::string& name = specs[0].first;
    const bool is_norm = name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
    backend::DeviceTensor t;
    if (is_norm) {
      HostTensor ones(DType::kF32, shape);
      std::fill(ones.data<float>(), ones.data<float>() + shape.numel(), 1.0f);
      t = backend_.upload(ones.view(), dtype);
    } else if (shard_.sharded()) {  // the whole tensor's values, then this rank's share of them
      HostTensor whole(DType::kF32, shape);
      const uint64_t seed = options_.seed * 1000003u + dummy_index;
      for (int64_t i = 0; i < shape.numel(); ++i)
        whole.data<float>()[i] = backend::counter_normal(seed, static_cast<uint64_t>(i), 0.02f);
      Result<HostTensor> mine = shard_dense_for_rank(whole.view(), shard_role(name), shard_, name);
      XI_CHECK(mine.ok()) << mine.status().to_string();
      t = backend_.upload(mine->view(), dtype);
    } else {
      t = backend_.random_normal(dtype, shape, options_.seed * 1000003u + dummy_index, 0.02f);
    }
    ++dummy_index;
    owned_.push_back(t.buffer);
    weight_bytes_ += t.view.bytes();
    progress.advance(static_cast<int64_t>(specs.size()), static_cast<int64_t>(t.view.bytes()));
    return t.view;
  };
  // Fetches named tensors with expected shapes and uploads them as one (row-concatenated) tensor.
  auto load = [&](std::vector<std::pair<std::string, Shape>> specs) -> Result<TensorView> {
    if (dummy) return make_dummy(specs);
    std::vector<TensorView> parts;
    for (auto& [name, shape] : specs) {
      XI_ASSIGN_OR_RETURN(TensorView v, files->get(name, shape));
      if (v.dtype != DType::kF32 && v.dtype != DType::kBF16 && v.dtype != DType::kF16)
        return unimplemented(name + " in " + files->file_of(name) + ": unsupported dtype " + dtype_name(v.dtype) +
                             " (supported: F32, BF16, F16)");
      parts.push_back(v);
    }
    return upload(parts, specs[0].first);
  };
  // Linears: dense checkpoints (and dummy weights) through load(); quantized checkpoints through
  // read_checkpoint_linear (repacked once into quant/ formats), kept as they are where the backend
  // supports the format and dequantized to the activation dtype otherwise (logged once per format).
  std::set<std::string> logged;
  if (c.quantization.quantized())
    XI_LOG(INFO) << "checkpoint: quantization_config " << c.quantization.to_string()
                 << (dummy ? " ignored (dummy weights are dense)" : "");
  auto linear = [&](const std::vector<std::pair<std::string, Shape>>& specs) -> Result<backend::LinearWeights> {
    backend::LinearWeights w;
    if (dummy ? !options_.dummy_quantization : !c.quantization.quantized()) {
      XI_ASSIGN_OR_RETURN(w.weight, load(specs));
      return w;
    }
    std::vector<LinearPart> parts;
    for (const auto& [name, shape] : specs) parts.push_back({name.substr(0, name.size() - 7), shape[0]});
    HostLinear host;
    if (dummy) {  // --quantization: random weights in that format
      int64_t rows = 0;
      for (const LinearPart& part : parts) rows += part.rows;
      XI_ASSIGN_OR_RETURN(host, make_dummy_quantized_linear(*options_.dummy_quantization, rows, specs[0].second[1],
                                                            options_.seed * 1000003u + dummy_index++));
    } else {
      XI_ASSIGN_OR_RETURN(host, read_checkpoint_linear(*files, c.quantization, parts, specs[0].second[1]));
    }
    if (!host.note.empty() && logged.insert(host.note).second)
      XI_LOG(INFO) << "checkpoint: " << parts[0].module << " (and others like it): " << host.note;
    if (shard_.sharded()) {  // this rank's share, in the same format (shard_weights.h)
      HostLinearView whole{host.format, host.n, host.k, host.weight.view(), host.scales.view(),
                           host.zeros.view(), host.g_idx.view(), host.input_scale.view(), {}};
      XI_ASSIGN_OR_RETURN(ShardedLinear mine, shard_for_rank(whole, shard_role(specs[0].first), shard_, parts[0].module));
      host.format = mine.format;
      host.n = mine.n;
      host.k = mine.k;
      host.weight = std::move(mine.weight);
      host.scales = std::move(mine.scales);
      host.zeros = std::move(mine.zeros);
      host.g_idx = std::move(mine.g_idx);
      host.input_scale = std::move(mine.input_scale);
    }
    if (sort_act_order(host) && logged.insert("act order").second)  // per rank, after its shard is cut
      XI_LOG(INFO) << "checkpoint: " << parts[0].module
                   << " (and others like it): GPTQ act order sorted at load "
                   << "(groups made contiguous, the input's columns gathered by a permutation)";
    if (!backend_.supports(host.format)) {
      if (logged.insert(quant::format_name(host.format)).second)
        XI_LOG(INFO) << "checkpoint: " << quant::format_name(host.format) << " weights dequantized to "
                     << dtype_name(dtype) << " at load (" << backend_.info().name << " has no kernel for it)";
      host = dequantize_linear(host);
    } else if (!backend_.supports_linear(host.format, host.n, host.k)) {
      XI_LOG(INFO) << "checkpoint: " << parts[0].module << " " << quant::format_name(host.format) << " [" << host.n
                   << ", " << host.k << "]: dequantized to " << dtype_name(dtype) << " at load ("
                   << backend_.info().name << "'s kernels for the format do not take this shape)";
      host = dequantize_linear(host);
    }
    UploadedLinear up = upload_linear(backend_, host, dtype);
    owned_.insert(owned_.end(), up.buffers.begin(), up.buffers.end());
    weight_bytes_ += up.bytes;
    progress.advance(static_cast<int64_t>(specs.size()), static_cast<int64_t>(up.bytes));
    return up.weights;
  };

  XI_ASSIGN_OR_RETURN(embed_.weight, load({{"model.embed_tokens.weight", Shape{V, H}}}));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights w;
    XI_ASSIGN_OR_RETURN(w.input_norm, load({{p + "input_layernorm.weight", Shape{H}}}));
    XI_ASSIGN_OR_RETURN(w.post_attention_norm, load({{p + "post_attention_layernorm.weight", Shape{H}}}));
    XI_ASSIGN_OR_RETURN(w.qkv, linear({{p + "self_attn.q_proj.weight", Shape{q_rows, H}},
                                            {p + "self_attn.k_proj.weight", Shape{kv_rows, H}},
                                            {p + "self_attn.v_proj.weight", Shape{kv_rows, H}}}));
    if (c.attention_bias) {
      XI_ASSIGN_OR_RETURN(w.qkv.bias, load({{p + "self_attn.q_proj.bias", Shape{q_rows}},
                                            {p + "self_attn.k_proj.bias", Shape{kv_rows}},
                                            {p + "self_attn.v_proj.bias", Shape{kv_rows}}}));
    }
    XI_ASSIGN_OR_RETURN(w.o, linear({{p + "self_attn.o_proj.weight", Shape{H, q_rows}}}));
    if (c.o_bias) {
      XI_ASSIGN_OR_RETURN(w.o.bias, load({{p + "self_attn.o_proj.bias", Shape{H}}}));
    }
    if (c.qk_norm) {
      XI_ASSIGN_OR_RETURN(w.q_norm, load({{p + "self_attn.q_norm.weight", Shape{D}}}));
      XI_ASSIGN_OR_RETURN(w.k_norm, load({{p + "self_attn.k_norm.weight", Shape{D}}}));
    }
    XI_ASSIGN_OR_RETURN(w.gate_up, linear({{p + "mlp.gate_proj.weight", Shape{I, H}},
                                                {p + "mlp.up_proj.weight", Shape{I, H}}}));
    XI_ASSIGN_OR_RETURN(w.down, linear({{p + "mlp.down_proj.weight", Shape{H, I}}}));
    if (c.mlp_bias) {
      XI_ASSIGN_OR_RETURN(w.gate_up.bias, load({{p + "mlp.gate_proj.bias", Shape{I}}, {p + "mlp.up_proj.bias", Shape{I}}}));
      XI_ASSIGN_OR_RETURN(w.down.bias, load({{p + "mlp.down_proj.bias", Shape{H}}}));
    }
    layers_.push_back(w);
  }
  XI_ASSIGN_OR_RETURN(final_norm_, load({{"model.norm.weight", Shape{H}}}));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;  // vocabulary-parallel: the rank's embedding rows are its lm_head rows (one copy)
  } else {
    XI_ASSIGN_OR_RETURN(lm_head_.weight, load({{"lm_head.weight", Shape{V, H}}}));
  }
  progress.finish();
  make_rope_table();
  return Status();
}

void LlamaModel::make_rope_table() {
  const ModelConfig& c = config_;
  const int64_t D = c.head_dim;
  // cos/sin table: angle = position * inv_freq in float32 (as transformers), cos/sin evaluated in double.
  const std::vector<float> inv_freq = rope_inv_freq(c);
  const float attn_scale = rope_attention_scaling(c);
  const int64_t half = D / 2;
  HostTensor table(DType::kF32, Shape{max_model_len_, D});
  for (int64_t pos = 0; pos < max_model_len_; ++pos) {
    float* row = table.data<float>() + pos * D;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq[static_cast<size_t>(i)];
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attn_scale;
      row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attn_scale;
    }
  }
  backend::DeviceTensor cs = backend_.upload(table.view(), DType::kF32);
  owned_.push_back(cs.buffer);
  cos_sin_ = cs.view;
}

void LlamaModel::allocate_workspace() {
  const ModelConfig& c = config_;
  const DType dt = backend_.info().activation_dtype;
  const int64_t T = options_.max_tokens, R = options_.max_logit_rows;
  const int64_t qkv_width = shard_.qkv_rows();  // this rank's heads (all of them without tensor parallelism)
  auto alloc = [&](Shape s, DType d) {
    backend::DeviceTensor t = backend_.allocate(d, s);
    owned_.push_back(t.buffer);
    return t.view;
  };
  residual_ = alloc(Shape{T, c.hidden_size}, dt);
  normed_ = alloc(Shape{T, c.hidden_size}, dt);
  qkv_ = alloc(Shape{T, qkv_width}, dt);
  attn_ = alloc(Shape{T, shard_.q_rows()}, dt);
  proj_ = alloc(Shape{T, c.hidden_size}, dt);
  gate_up_ = alloc(Shape{T, 2 * shard_.ffn}, dt);
  mlp_ = alloc(Shape{T, shard_.ffn}, dt);
  last_hidden_ = alloc(Shape{R, c.hidden_size}, dt);
  logits_ = alloc(Shape{R, c.vocab_size}, DType::kF32);
  if (options_.comm != nullptr) {
    local_logits_ = alloc(Shape{R, shard_.local_vocab()}, DType::kF32);
    // The logits all-gather's buffers, sized once for every step (graph recordings keep their addresses).
    std::vector<int64_t> offsets;
    for (int r = 0; r <= shard_.tp_size; ++r) offsets.push_back(shard_.vocab_offset(r));
    options_.comm->reserve_all_gather(R, offsets, DType::kF32);
  }
}

TensorView LlamaModel::forward(const backend::StepMeta& step, const backend::KvCache& kv) {
  const ModelConfig& c = config_;
  const int64_t T = step.num_tokens;
  XI_CHECK(T > 0 && T <= options_.max_tokens) << "step of " << T << " tokens; max " << options_.max_tokens;
  XI_CHECK(step.num_logit_rows <= options_.max_logit_rows) << step.num_logit_rows << " logit rows";
  XI_CHECK_EQ(static_cast<int>(kv.layers.size()), c.num_layers);
  const float eps = c.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  TensorView x = residual_.rows(0, T), h = normed_.rows(0, T), qkv = qkv_.rows(0, T), attn = attn_.rows(0, T),
             proj = proj_.rows(0, T), gate_up = gate_up_.rows(0, T), mlp = mlp_.rows(0, T);

  if (observer_ != nullptr && options_.comm == nullptr) {
    forward_observed(step, kv);
  } else if (options_.comm != nullptr) {  // tensor parallel (or its code path with one rank); observed there too
    forward_sharded(step, kv);
  } else {
    // Each norm runs with the projection after it and the one before it (add_rms_norm_linear: on CUDA decode
    // steps the first adds itself into the residual and the second applies the norm, no kernel between),
    // the post-attention one also with the SwiGLU; the final norm stands alone.
    backend_.embedding_weights(step, embed_, x);
    backend_.add_rms_norm_linear({x, {}, layers_[0].input_norm, eps, layers_[0].qkv, h, qkv, {}, {}, {}});
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& w = layers_[static_cast<size_t>(l)];
      if (c.qk_norm) backend_.qk_norm(qkv, c.num_heads, c.num_kv_heads, c.head_dim, w.q_norm, w.k_norm, eps);
      backend_.rope_paged_attention(step, qkv, c.num_heads, c.num_kv_heads, c.head_dim, cos_sin_, scale,
                                    kv.layers[static_cast<size_t>(l)], attn);
      backend_.add_rms_norm_linear({x, proj, w.post_attention_norm, eps, w.gate_up, h, gate_up, mlp, attn, w.o, &w.down,
                                    /*act_out_unread=*/true});
      if (l + 1 < c.num_layers) {
        const LayerWeights& next = layers_[static_cast<size_t>(l) + 1];
        backend_.add_rms_norm_linear({x, proj, next.input_norm, eps, next.qkv, h, qkv, {}, mlp, w.down});
      } else {
        backend_.linear(mlp, w.down, proj);
        backend_.add_rms_norm(x, proj, final_norm_, eps, h);
      }
    }
  }
  const int64_t R = step.num_logit_rows;
  TensorView last = last_hidden_.rows(0, R), logits = logits_.rows(0, R);
  if (R == 0) return logits;
  backend_.gather_rows(step, h, last);
  if (options_.comm != nullptr) {  // vocabulary-parallel: this rank's columns, then every rank's
    const TensorView local = local_logits_.rows(0, R);
    backend_.linear(last, lm_head_, local);
    std::vector<int64_t> offsets;
    for (int r = 0; r <= shard_.tp_size; ++r) offsets.push_back(shard_.vocab_offset(r));
    options_.comm->all_gather_columns(local, logits, offsets);
  } else {
    backend_.linear(last, lm_head_, logits);
  }
  return logits;
}

void LlamaModel::forward_observed(const backend::StepMeta& step, const backend::KvCache& kv) {
  const ModelConfig& c = config_;
  const int64_t T = step.num_tokens;
  const float eps = c.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  TensorView x = residual_.rows(0, T), h = normed_.rows(0, T), qkv = qkv_.rows(0, T), attn = attn_.rows(0, T),
             proj = proj_.rows(0, T), gate_up = gate_up_.rows(0, T), mlp = mlp_.rows(0, T);
  std::vector<float> host;
  auto observe = [&](int l, LinearSite site, const TensorView& in) {
    host.resize(static_cast<size_t>(in.numel()));
    backend_.to_host_f32(in, host.data());
    observer_->observe(l, site, host.data(), T, in.shape[1]);
  };
  backend_.embedding_weights(step, embed_, x);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
    if (l == 0)
      backend_.rms_norm(x, w.input_norm, eps, h);
    else
      backend_.add_rms_norm(x, proj, w.input_norm, eps, h);
    observe(l, LinearSite::kQkv, h);
    backend_.linear(h, w.qkv, qkv);
    if (c.qk_norm) backend_.qk_norm(qkv, c.num_heads, c.num_kv_heads, c.head_dim, w.q_norm, w.k_norm, eps);
    backend_.rope_paged_attention(step, qkv, c.num_heads, c.num_kv_heads, c.head_dim, cos_sin_, scale,
                                  kv.layers[static_cast<size_t>(l)], attn);
    observe(l, LinearSite::kO, attn);
    backend_.linear(attn, w.o, proj);
    backend_.add_rms_norm(x, proj, w.post_attention_norm, eps, h);
    observe(l, LinearSite::kGateUp, h);
    backend_.linear(h, w.gate_up, gate_up);
    backend_.silu_mul(gate_up, mlp);
    observe(l, LinearSite::kDown, mlp);
    backend_.linear(mlp, w.down, proj);
  }
  backend_.add_rms_norm(x, proj, final_norm_, eps, h);
}

void LlamaModel::forward_sharded(const backend::StepMeta& step, const backend::KvCache& kv) {
  // The fused chain of forward() adds the o / down projection into the residual inside one op; under tensor
  // parallelism each rank holds only a partial sum of it, so the chain is split there: project, all-reduce
  // the partials, then add + norm + the next column-parallel projection.
  const ModelConfig& c = config_;
  const ModelShard& s = shard_;
  backend::Communicator& comm = *options_.comm;
  const int64_t T = step.num_tokens;
  const float eps = c.rms_norm_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  TensorView x = residual_.rows(0, T), h = normed_.rows(0, T), qkv = qkv_.rows(0, T), attn = attn_.rows(0, T),
             proj = proj_.rows(0, T), gate_up = gate_up_.rows(0, T), mlp = mlp_.rows(0, T);
  // An observer here sees each linear's input after the fused op that made it (the same values): the whole
  // normed rows for qkv and gate_up (replicated on every rank), this rank's columns for o and down.
  std::vector<float> host;
  auto observe = [&](int l, LinearSite site, const TensorView& in) {
    if (observer_ == nullptr) return;
    host.resize(static_cast<size_t>(in.numel()));
    backend_.to_host_f32(in, host.data());
    observer_->observe(l, site, host.data(), T, in.shape[1]);
  };
  // Vocabulary-parallel embedding: this rank's rows of x (ids in its range; -0.0 elsewhere), then the sum over
  // ranks, exact (one term per element is not -0.0): every rank holds TP 1's x bit for bit.
  backend_.embedding_weights(step, embed_, x, backend::VocabRows{s.vocab_begin, s.vocab});
  comm.all_reduce_sum(x);
  backend_.add_rms_norm_linear({x, {}, layers_[0].input_norm, eps, layers_[0].qkv, h, qkv, {}, {}, {}});
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
    observe(l, LinearSite::kQkv, h);
    if (c.qk_norm) backend_.qk_norm(qkv, s.num_heads, s.num_kv_heads, s.head_dim, w.q_norm, w.k_norm, eps);
    backend_.rope_paged_attention(step, qkv, s.num_heads, s.num_kv_heads, s.head_dim, cos_sin_, scale,
                                  kv.layers[static_cast<size_t>(l)], attn);
    observe(l, LinearSite::kO, attn);
    backend_.linear(attn, w.o, proj);  // partial: this rank's heads
    comm.all_reduce_sum(proj);
    backend_.add_rms_norm_linear({x, proj, w.post_attention_norm, eps, w.gate_up, h, gate_up, mlp, {}, {}, &w.down,
                                  /*act_out_unread=*/observer_ == nullptr});  // the observer reads mlp
    observe(l, LinearSite::kGateUp, h);
    observe(l, LinearSite::kDown, mlp);
    backend_.linear(mlp, w.down, proj);  // partial: this rank's ffn columns
    comm.all_reduce_sum(proj);
    if (l + 1 < c.num_layers) {
      const LayerWeights& next = layers_[static_cast<size_t>(l) + 1];
      backend_.add_rms_norm_linear({x, proj, next.input_norm, eps, next.qkv, h, qkv, {}, {}, {}});
    } else {
      backend_.add_rms_norm(x, proj, final_norm_, eps, h);
    }
  }
}

void LlamaModel::replace_layer(int l, const LayerWeights& w,
                               std::vector<std::shared_ptr<backend::DeviceBuffer>> buffers) {
  XI_CHECK(l >= 0 && l < config_.num_layers) << "replace_layer " << l;
  const LayerWeights& old = layers_[static_cast<size_t>(l)];
  XI_CHECK_EQ(w.qkv.out_features(), old.qkv.out_features());
  XI_CHECK_EQ(w.qkv.in_features(), old.qkv.in_features());
  XI_CHECK_EQ(w.o.in_features(), old.o.in_features());
  XI_CHECK_EQ(w.gate_up.out_features(), old.gate_up.out_features());
  XI_CHECK_EQ(w.down.in_features(), old.down.in_features());
  if (replaced_.empty()) replaced_.resize(static_cast<size_t>(config_.num_layers));
  layers_[static_cast<size_t>(l)] = w;
  replaced_[static_cast<size_t>(l)] = std::move(buffers);
}

}  // namespace xinfer::model
