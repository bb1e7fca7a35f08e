#include "xinfer/compress/compressed_tensors_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "xinfer/core/check.h"

namespace xinfer::compress {

namespace fs = std::filesystem;

const char* compression_format(Scheme s) {
  switch (s) {
    case Scheme::kW8A8Int8: return "int-quantized";
    case Scheme::kW8A8Fp8: return "float-quantized";
    case Scheme::kW8A16:
    case Scheme::kW4A16: return "pack-quantized";
    case Scheme::kNone: return "dense";
  }
  return "?";
}

nlohmann::ordered_json quantization_config(const SchemeOptions& scheme, const char* actorder,
                                           const std::vector<std::string>& ignore, nlohmann::ordered_json kv_cache_scheme) {
  if (scheme.scheme == Scheme::kNone)  // dense weights; the KV cache's scales alone
    return {{"quant_method", "compressed-tensors"},
            {"format", "dense"},
            {"quantization_status", "compressed"},
            {"config_groups", nlohmann::ordered_json::object()},
            {"ignore", {"lm_head"}},
            {"kv_cache_scheme", kv_cache_scheme},
            {"global_compression_ratio", nullptr}};
  const WeightQuantArgs a = weight_args(scheme);
  nlohmann::ordered_json w = {{"num_bits", a.bits},
                              {"type", a.is_float ? "float" : "int"},
                              {"symmetric", a.is_float || a.symmetric},
                              {"strategy", granularity_name(a.granularity)},
                              {"group_size", nullptr},
                              {"dynamic", false},
                              {"observer", a.mse_clip ? "mse" : "minmax"},
                              {"observer_kwargs", nlohmann::ordered_json::object()},
                              {"actorder", nullptr},
                              {"block_structure", nullptr}};
  if (a.granularity == Granularity::kGroup) w["group_size"] = a.group_size;
  if (actorder != nullptr) w["actorder"] = actorder;
  nlohmann::ordered_json in = nullptr;
  if (quantizes_activations(scheme.scheme))
    in = {{"num_bits", 8},
          {"type", scheme.scheme == Scheme::kW8A8Fp8 ? "float" : "int"},
          {"symmetric", true},
          {"strategy", "token"},
          {"group_size", nullptr},
          {"dynamic", true},
          {"observer", nullptr},
          {"observer_kwargs", nlohmann::ordered_json::object()},
          {"actorder", nullptr},
          {"block_structure", nullptr}};
  nlohmann::ordered_json group = {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", in},
                                  {"output_activations", nullptr}};
  return {{"quant_method", "compressed-tensors"},
          {"format", compression_format(scheme.scheme)},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", group}}},
          {"ignore", ignore},
          {"kv_cache_scheme", kv_cache_scheme},
          {"global_compression_ratio", nullptr}};
}

void add_quantized_module(SafetensorsWriter& st, const std::string& prefix, const QuantizedWeight& q,
                          const SchemeOptions& scheme) {
  const int64_t n = q.n, k = q.k, g = q.groups();
  const Shape scale_shape = q.args.granularity == Granularity::kTensor ? Shape{1} : Shape{n, g};
  if (scheme.scheme == Scheme::kW8A8Int8 || scheme.scheme == Scheme::kW8A8Fp8) {
    st.add(prefix + ".weight", scheme.scheme == Scheme::kW8A8Fp8 ? DType::kFP8E4M3 : DType::kI8, Shape{n, k},
           q.q.data());
    st.add(prefix + ".weight_scale", DType::kF32, scale_shape, q.scales.data());
    return;
  }
  const int bits = q.args.bits, per = 32 / bits, offset = 1 << (bits - 1);
  const uint32_t mask = (1u << bits) - 1;
  const int64_t words = (k + per - 1) / per;
  std::vector<uint32_t> packed(static_cast<size_t>(n * words), 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const auto v = static_cast<uint32_t>(q.q[static_cast<size_t>(r * k + c)] + offset) & mask;
      packed[static_cast<size_t>(r * words + c / per)] |= v << (bits * (c % per));
    }
  st.add(prefix + ".weight_packed", DType::kI32, Shape{n, words}, packed.data());
  const int64_t shape[2] = {n, k};
  st.add(prefix + ".weight_shape", DType::kI64, Shape{2}, shape);
  st.add(prefix + ".weight_scale", DType::kF32, scale_shape, q.scales.data());
  if (!q.g_idx.empty()) st.add(prefix + ".weight_g_idx", DType::kI32, Shape{k}, q.g_idx.data());
  if (!q.zeros.empty()) {
    const int64_t zrows = (n + per - 1) / per;
    std::vector<uint32_t> zp(static_cast<size_t>(zrows * g), 0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < g; ++j) {
        const auto v = static_cast<uint32_t>(q.zeros[static_cast<size_t>(r * g + j)] + offset) & mask;
        zp[static_cast<size_t>((r / per) * g + j)] |= v << (bits * (r % per));
      }
    st.add(prefix + ".weight_zero_point", DType::kI32, Shape{zrows, g}, zp.data());
  }
}

nlohmann::ordered_json config_json_from(const model::ModelConfig& c) {
  nlohmann::ordered_json j = {{"architectures", {c.architecture}},
                              {"model_type", c.model_type},
                              {"hidden_size", c.hidden_size},
                              {"intermediate_size", c.intermediate_size},
                              {"num_hidden_layers", c.num_layers},
                              {"num_attention_heads", c.num_heads},
                              {"num_key_value_heads", c.num_kv_heads},
                              {"head_dim", c.head_dim},
                              {"hidden_act", "silu"},
                              {"vocab_size", c.vocab_size},
                              {"max_position_embeddings", c.max_position_embeddings},
                              {"rms_norm_eps", c.rms_norm_eps},
                              {"rope_theta", c.rope_theta},
                              {"tie_word_embeddings", c.tie_word_embeddings},
                              {"attention_bias", c.attention_bias},
                              {"mlp_bias", c.mlp_bias},
                              {"torch_dtype", "float32"}};
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  if (c.rope_scaling.type != model::RopeScalingType::kNone) {
    const model::RopeScaling& r = c.rope_scaling;
    nlohmann::ordered_json rs = {{"rope_type", model::rope_scaling_type_name(r.type)}, {"factor", r.factor}};
    if (r.type == model::RopeScalingType::kLlama3) {
      rs["low_freq_factor"] = r.low_freq_factor;
      rs["high_freq_factor"] = r.high_freq_factor;
      rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
    }
    j["rope_scaling"] = rs;
  }
  return j;
}

Status check_output_dir(const std::string& out, bool overwrite) {
  if (out.empty()) return invalid_argument("--out is required");
  std::error_code ec;
  if (fs::exists(out, ec) && !overwrite)
    return invalid_argument("--out " + out + " already exists (use --overwrite to replace it)");
  const fs::path parent = fs::absolute(out, ec).parent_path();
  if (!fs::is_directory(parent, ec)) return not_found("--out: parent directory " + parent.string() + " does not exist");
  return Status();
}

Status write_model_dir(const std::string& out, bool overwrite, const SafetensorsWriter& weights,
                       const ModelDirContents& contents) {
  XI_RETURN_IF_ERROR(check_output_dir(out, overwrite));
  const fs::path target = fs::absolute(out);
  auto sibling = [&](const char* tag) {  // ".<name>.<tag>-<pid>" next to the target
    std::string name = ".";
    name += target.filename().string();
    name += tag;
    name += std::to_string(getpid());
    return target.parent_path() / name;
  };
  const fs::path tmp = sibling(".tmp-");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec)) return data_loss("cannot create " + tmp.string() + ": " + ec.message());
  auto fail = [&](Status s) {
    std::error_code e2;
    fs::remove_all(tmp, e2);
    return s;
  };
  auto write_text = [&](const std::string& name, const std::string& text) -> Status {
    std::ofstream f(tmp / name, std::ios::binary);
    f << text;
    f.close();
    if (!f) return data_loss("error writing " + (tmp / name).string());
    return Status();
  };
  if (Status s = write_text("config.json", contents.config.dump(2) + "\n"); !s.ok()) return fail(s);
  for (const auto& [name, text] : contents.text_files)
    if (Status s = write_text(name, text); !s.ok()) return fail(s);
  for (const std::string& p : contents.copy_files) {
    fs::copy_file(p, tmp / fs::path(p).filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) return fail(data_loss("cannot copy " + p + ": " + ec.message()));
  }
  if (Status s = weights.write((tmp / "model.safetensors").string()); !s.ok()) return fail(s);
  fs::path old;
  if (fs::exists(target, ec)) {
    old = sibling(".old-");
    fs::rename(target, old, ec);
    if (ec) return fail(data_loss("cannot move the old " + target.string() + " aside: " + ec.message()));
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, target, ec);
    return fail(data_loss("cannot rename " + tmp.string() + " to " + target.string()));
  }
  if (!old.empty()) fs::remove_all(old, ec);
  return Status();
}

}  // namespace xinfer::compress
