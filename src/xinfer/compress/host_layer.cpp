#include "xinfer/compress/host_layer.h"

#include <cstring>

#include "xinfer/core/check.h"

namespace xinfer::compress {

const char* module_name(int m) {
  static const char* kNames[kNumModules] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                            "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                            "mlp.down_proj"};
  return kNames[m];
}

ModuleRows module_rows(const model::ModelConfig& c, int m) {
  const int64_t q = static_cast<int64_t>(c.num_heads) * c.head_dim, kv = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  const int64_t I = c.intermediate_size;
  switch (static_cast<Module>(m)) {
    case Module::kQ: return {model::LinearSite::kQkv, 0, q};
    case Module::kK: return {model::LinearSite::kQkv, q, kv};
    case Module::kV: return {model::LinearSite::kQkv, q + kv, kv};
    case Module::kO: return {model::LinearSite::kO, 0, c.hidden_size};
    case Module::kGate: return {model::LinearSite::kGateUp, 0, I};
    case Module::kUp: return {model::LinearSite::kGateUp, I, I};
    case Module::kDown: return {model::LinearSite::kDown, 0, c.hidden_size};
  }
  return {model::LinearSite::kQkv, 0, 0};
}

namespace {

std::vector<float> to_host(backend::Backend& b, const TensorView& t) {
  std::vector<float> v;
  if (t.empty()) return v;
  v.resize(static_cast<size_t>(t.numel()));
  b.to_host_f32(t, v.data());
  return v;
}

Result<HostLinear> copy_linear(backend::Backend& b, const backend::LinearWeights& w, int l, const char* what) {
  if (!w.dense())
    return invalid_argument(
        "layer " + std::to_string(l) + " " + what + " is stored as " +
        (w.segmented() ? std::string("segments of different formats") : quant::format_name(w.format)) +
        "; quantize needs float weights");
  HostLinear h;
  h.n = w.out_features();
  h.k = w.in_features();
  h.w = to_host(b, w.weight);
  h.bias = to_host(b, w.bias);
  return h;
}

}  // namespace

Result<HostLayer> copy_layer(backend::Backend& backend, const model::LlamaModel& model, int l) {
  const model::LayerWeights& w = model.layer(l);
  HostLayer h;
  h.input_norm = to_host(backend, w.input_norm);
  h.post_attention_norm = to_host(backend, w.post_attention_norm);
  h.q_norm = to_host(backend, w.q_norm);
  h.k_norm = to_host(backend, w.k_norm);
  XI_ASSIGN_OR_RETURN(h.qkv, copy_linear(backend, w.qkv, l, "qkv"));
  XI_ASSIGN_OR_RETURN(h.o, copy_linear(backend, w.o, l, "o_proj"));
  XI_ASSIGN_OR_RETURN(h.gate_up, copy_linear(backend, w.gate_up, l, "gate_up"));
  XI_ASSIGN_OR_RETURN(h.down, copy_linear(backend, w.down, l, "down_proj"));
  return h;
}

HostLinear& linear_of(HostLayer& layer, model::LinearSite site) {
  switch (site) {
    case model::LinearSite::kQkv: return layer.qkv;
    case model::LinearSite::kO: return layer.o;
    case model::LinearSite::kGateUp: return layer.gate_up;
    case model::LinearSite::kDown: return layer.down;
  }
  return layer.qkv;
}
const HostLinear& linear_of(const HostLayer& layer, model::LinearSite site) {
  return linear_of(const_cast<HostLayer&>(layer), site);
}

std::vector<float> module_weight(const model::ModelConfig& c, const HostLayer& layer, int m) {
  const ModuleRows mr = module_rows(c, m);
  const HostLinear& lin = linear_of(layer, mr.site);
  return std::vector<float>(lin.w.begin() + mr.row_begin * lin.k, lin.w.begin() + (mr.row_begin + mr.rows) * lin.k);
}

namespace {

struct Uploader {
  backend::Backend& backend;
  std::vector<std::shared_ptr<backend::DeviceBuffer>>& buffers;
  TensorView put(const void* data, DType dtype, Shape shape) {
    const DType device_dtype = dtype == DType::kF32 ? backend.info().activation_dtype : dtype;
    TensorView host{const_cast<void*>(data), dtype, shape, Device::kCpu};
    backend::DeviceTensor t = backend.upload(host, device_dtype);
    buffers.push_back(t.buffer);
    return t.view;
  }
  TensorView vec(const std::vector<float>& v) {
    if (v.empty()) return {};
    return put(v.data(), DType::kF32, Shape{static_cast<int64_t>(v.size())});
  }
};

// The quantized modules of one fused linear, in xinfer's layout for `scheme`.
backend::LinearWeights pack_linear(Uploader& up, const HostLinear& lin, const std::vector<const QuantizedWeight*>& parts,
                                   const SchemeOptions& scheme) {
  backend::LinearWeights w;
  w.format = xinfer_format(scheme);
  w.bias = up.vec(lin.bias);
  w.k = lin.k;
  const int64_t n = lin.n, k = lin.k;
  if (scheme.scheme == Scheme::kW4A16) {
    const int64_t g = parts[0]->groups();
    std::vector<uint8_t> packed(static_cast<size_t>(n * ((k + 1) / 2)), 0);
    std::vector<float> scales(static_cast<size_t>(n * g));
    std::vector<uint8_t> zeros(scheme.symmetric ? 0 : static_cast<size_t>(n * g));
    int64_t row = 0;
    for (const QuantizedWeight* p : parts) {
      for (int64_t r = 0; r < p->n; ++r, ++row) {
        uint8_t* dst = &packed[static_cast<size_t>(row * ((k + 1) / 2))];
        for (int64_t c = 0; c < k; ++c) {
          const auto v = static_cast<uint8_t>(p->q[static_cast<size_t>(r * k + c)] + 8);
          dst[c / 2] = static_cast<uint8_t>(dst[c / 2] | (v << ((c % 2) * 4)));
        }
        for (int64_t j = 0; j < g; ++j) {
          scales[static_cast<size_t>(row * g + j)] = p->scales[static_cast<size_t>(r * g + j)];
          if (!zeros.empty()) zeros[static_cast<size_t>(row * g + j)] = static_cast<uint8_t>(p->zeros[static_cast<size_t>(r * g + j)] + 8);
        }
      }
    }
    w.weight = up.put(packed.data(), DType::kU8, Shape{n, (k + 1) / 2});
    w.scales = up.put(scales.data(), DType::kF32, Shape{n, g});
    if (!parts[0]->g_idx.empty()) {  // act-order groups: one g_idx for the fused matrix (its parts share H)
      for (const QuantizedWeight* p : parts) XI_CHECK(p->g_idx == parts[0]->g_idx) << "fused modules with different g_idx";
      w.g_idx = up.put(parts[0]->g_idx.data(), DType::kI32, Shape{k});
    }
    if (!zeros.empty()) w.zeros = up.put(zeros.data(), DType::kU8, Shape{n, g});
    return w;
  }
  // int8 / fp8 bytes [n, k] and one scale per row (per-tensor scales repeated over the module's rows).
  std::vector<int8_t> q(static_cast<size_t>(n * k));
  std::vector<float> scales(static_cast<size_t>(n));
  int64_t row = 0;
  for (const QuantizedWeight* p : parts) {
    std::memcpy(&q[static_cast<size_t>(row * k)], p->q.data(), p->q.size());
    for (int64_t r = 0; r < p->n; ++r) scales[static_cast<size_t>(row + r)] = p->scale(r, 0);
    row += p->n;
  }
  w.weight = up.put(q.data(), scheme.scheme == Scheme::kW8A8Fp8 ? DType::kFP8E4M3 : DType::kI8, Shape{n, k});
  w.scales = up.put(scales.data(), DType::kF32, Shape{n});
  return w;
}

}  // namespace

UploadedLayer upload_layer(backend::Backend& backend, const model::ModelConfig& c, const HostLayer& layer,
                           const std::vector<QuantizedWeight>* modules, const SchemeOptions& scheme) {
  UploadedLayer out;
  Uploader up{backend, out.buffers};
  model::LayerWeights& w = out.weights;
  w.input_norm = up.vec(layer.input_norm);
  w.post_attention_norm = up.vec(layer.post_attention_norm);
  w.q_norm = up.vec(layer.q_norm);
  w.k_norm = up.vec(layer.k_norm);
  auto dense = [&](const HostLinear& lin) {
    backend::LinearWeights lw;
    lw.weight = up.put(lin.w.data(), DType::kF32, Shape{lin.n, lin.k});
    lw.bias = up.vec(lin.bias);
    return lw;
  };
  if (modules == nullptr) {
    w.qkv = dense(layer.qkv);
    w.o = dense(layer.o);
    w.gate_up = dense(layer.gate_up);
    w.down = dense(layer.down);
    return out;
  }
  XI_CHECK_EQ(static_cast<int>(modules->size()), kNumModules);
  auto m = [&](Module x) { return &(*modules)[static_cast<size_t>(x)]; };
  w.qkv = pack_linear(up, layer.qkv, {m(Module::kQ), m(Module::kK), m(Module::kV)}, scheme);
  w.o = pack_linear(up, layer.o, {m(Module::kO)}, scheme);
  w.gate_up = pack_linear(up, layer.gate_up, {m(Module::kGate), m(Module::kUp)}, scheme);
  w.down = pack_linear(up, layer.down, {m(Module::kDown)}, scheme);
  return out;
}

}  // namespace xinfer::compress
