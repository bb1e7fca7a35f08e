// read_checkpoint_linear: checkpoint tensors of one (possibly concatenated) linear -> quant/ formats.
//
// Each part is first decoded into a Part (one of: float rows; unsigned int codes with per-group scales and
// optional zeros / g_idx; W8A8 int8; FP8), then the parts are joined (checkpoint_linear.h says how).
//
// Packings read here (N = out_features, K = in_features, G = groups, per = 32 / bits):
//   compressed-tensors pack-quantized: weight_packed i32 [N, K/per], code k at bits (k % per) * bits of word
//     k / per, stored with the 2^(bits-1) offset (unsigned); weight_scale [N, G] (group) or [N, 1] (channel);
//     weight_zero_point i32 [ceil(N/per), G] packed along N the same way (asymmetric); weight_shape [2] = N, K;
//     weight_g_idx i32 [K] (optional, older versions' act order).
//   compressed-tensors int-/naive-quantized: weight i8 [N, K] signed codes; weight_scale [N, 1] / [N] /
//     [1] / [N, G]; weight_zero_point i8 (asymmetric weight-only); input_scale [1] (static activations).
//   compressed-tensors float-quantized: weight F8_E4M3 [N, K]; weight_scale [1] or [N, 1]; input_scale [1].
//   GPTQ: qweight i32 [K / per, N] (packed along K), qzeros i32 [G, N / per] (packed along N; v1 stores
//     zero - 1), scales [G, N], g_idx i32 [K].
//   AWQ (GEMM): qweight i32 [K, N / 8], word bits 4i hold column 8c + [0, 2, 4, 6, 1, 3, 5, 7][i]; qzeros
//     i32 [G, N / 8] likewise; scales [G, N].
#include "xinfer/model/checkpoint_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <type_traits>

#include "xinfer/core/logging.h"
#include "xinfer/model/gguf_config.h"
#include "xinfer/model/gguf_file.h"
#include "xinfer/model/gguf_repack.h"

namespace xinfer::model {
namespace {

struct Part {
  enum Kind { kFloat, kIntCodes, kW8A8Int8, kFp8 } kind = kFloat;
  int64_t n = 0;
  std::vector<float> dense;      // kFloat: [n, K]
  std::vector<uint8_t> codes;    // kIntCodes: unsigned [n, K]; kW8A8Int8: int8 bytes [n, K]; kFp8: e4m3 [n, K]
  int bits = 8;
  int64_t group = 0;             // kIntCodes: group size (K for per channel)
  std::vector<float> scales;     // kIntCodes [n, G]; kW8A8Int8 / kFp8: [n] or [1] (per tensor)
  std::vector<uint8_t> zeros;    // kIntCodes [n, G] or empty (symmetric: 2^(bits-1))
  std::vector<int32_t> g_idx;    // kIntCodes [K] or empty
  quant::ActScaleMode act = quant::ActScaleMode::kDynamicPerToken;
  float input_scale = 0;         // static activations
  std::string note;              // kFloat from a quantized part: why it was dequantized
};

std::string where(const WeightFiles& f, const std::string& name) { return name + " in " + f.file_of(name); }

// A tensor with one of the allowed shapes and dtypes.
Result<TensorView> get_tensor(const WeightFiles& files, const std::string& name, const std::vector<Shape>& shapes,
                              const std::vector<DType>& dtypes) {
  XI_ASSIGN_OR_RETURN(TensorView v, files.get(name));
  if (std::find(dtypes.begin(), dtypes.end(), v.dtype) == dtypes.end()) {
    std::string allowed;
    for (DType d : dtypes) allowed += (allowed.empty() ? "" : " or ") + std::string(dtype_to_safetensors(d));
    return invalid_argument(where(files, name) + ": dtype " + dtype_to_safetensors(v.dtype) + ", expected " +
                            allowed);
  }
  if (!shapes.empty() && std::find(shapes.begin(), shapes.end(), v.shape) == shapes.end()) {
    std::string allowed;
    for (const Shape& s : shapes) allowed += (allowed.empty() ? "" : " or ") + s.to_string();
    return invalid_argument(where(files, name) + ": expected shape " + allowed + ", found " + v.shape.to_string());
  }
  return v;
}

const std::vector<DType> kFloatTypes = {DType::kF32, DType::kBF16, DType::kF16};

std::vector<float> to_f32(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  convert_to_f32(v.dtype, v.data, out.data(), out.size());
  return out;
}

Status check_group(const std::string& module, int64_t group, int64_t k, const char* key) {
  if (group <= 0 || k % group != 0)
    return invalid_argument(module + ": " + key + " " + std::to_string(group) + " does not divide in_features " +
                            std::to_string(k));
  return Status();
}

// Unpacks `bits`-bit fields of little-endian int32 words: field i of a row is at bit (i % per) * bits of word
// i / per. words: [rows, words_per_row]; out: [rows, count] (count <= words_per_row * per).
void unpack_fields(const int32_t* words, int64_t rows, int64_t words_per_row, int bits, int64_t count, uint8_t* out) {
  const int per = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < count; ++i) {
      const auto w = static_cast<uint32_t>(words[r * words_per_row + i / per]);
      out[r * count + i] = static_cast<uint8_t>((w >> ((i % per) * bits)) & mask);
    }
}

// Transposes [rows, cols] -> [cols, rows].
template <typename T>
std::vector<T> transpose(const std::vector<T>& a, int64_t rows, int64_t cols) {
  std::vector<T> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = a[static_cast<size_t>(r * cols + c)];
  return t;
}

Status check_g_idx(const WeightFiles& files, const std::string& name, const std::vector<int32_t>& g_idx,
                   int64_t groups) {
  for (size_t i = 0; i < g_idx.size(); ++i)
    if (g_idx[i] < 0 || g_idx[i] >= groups)
      return invalid_argument(where(files, name) + ": g_idx[" + std::to_string(i) + "] = " + std::to_string(g_idx[i]) +
                              " is not a group (0.." + std::to_string(groups - 1) + ")");
  return Status();
}

// Drops a g_idx that says what the group size already says (k / group), so the fast kernels apply.
void drop_trivial_g_idx(Part& p) {
  for (size_t i = 0; i < p.g_idx.size(); ++i)
    if (p.g_idx[i] != static_cast<int32_t>(static_cast<int64_t>(i) / p.group)) return;
  p.g_idx.clear();
}

Result<std::vector<int32_t>> read_i32(const WeightFiles& files, const std::string& name, const Shape& shape) {
  XI_ASSIGN_OR_RETURN(TensorView v, get_tensor(files, name, {shape}, {DType::kI32}));
  const auto* p = v.as<const int32_t>();
  return std::vector<int32_t>(p, p + v.numel());
}

// ---- GPTQ / AWQ ----

Result<Part> read_gptq(const WeightFiles& files, const QuantizationConfig& qc, const std::string& m, int64_t n,
                       int64_t k) {
  Part p;
  p.kind = Part::kIntCodes;
  p.n = n;
  p.bits = qc.bits;
  p.group = qc.group_size < 0 ? k : qc.group_size;
  XI_RETURN_IF_ERROR(check_group(m, p.group, k, "group_size"));
  const int per = 32 / qc.bits;
  const int64_t groups = k / p.group;
  if (k % per != 0 || n % per != 0)
    return invalid_argument(m + ": GPTQ packs " + std::to_string(per) + " values per int32: in_features " +
                            std::to_string(k) + " and out_features " + std::to_string(n) + " must be multiples");
  XI_ASSIGN_OR_RETURN(std::vector<int32_t> qweight, read_i32(files, m + ".qweight", Shape{k / per, n}));
  XI_ASSIGN_OR_RETURN(std::vector<int32_t> qzeros, read_i32(files, m + ".qzeros", Shape{groups, n / per}));
  XI_ASSIGN_OR_RETURN(TensorView scales, get_tensor(files, m + ".scales", {Shape{groups, n}}, kFloatTypes));
  // qweight is packed along K: unpack each column n (a "row" of the transposed words).
  std::vector<int32_t> qw_t = transpose(qweight, k / per, n);  // [n, k / per]
  p.codes.resize(static_cast<size_t>(n * k));
  unpack_fields(qw_t.data(), n, k / per, qc.bits, k, p.codes.data());
  std::vector<uint8_t> z(static_cast<size_t>(groups * n));
  unpack_fields(qzeros.data(), groups, n / per, qc.bits, n, z.data());  // [G, n]
  if (!qc.gptq_v2) {  // v1: stored zero - 1 (AutoGPTQ, vLLM and transformers add 1 back without a mask)
    for (uint8_t& v : z) {
      if (v == 255)
        return unimplemented(where(files, m + ".qzeros") + ": a v1 zero point of 256 (stored 255) does not fit "
                             "8 bits");
      v = static_cast<uint8_t>(v + 1);
    }
  }
  p.zeros = transpose(z, groups, n);                       // [n, G]
  p.scales = transpose(to_f32(scales), groups, n);          // [n, G]
  if (files.contains(m + ".g_idx")) {
    XI_ASSIGN_OR_RETURN(p.g_idx, read_i32(files, m + ".g_idx", Shape{k}));
    XI_RETURN_IF_ERROR(check_g_idx(files, m + ".g_idx", p.g_idx, groups));
    drop_trivial_g_idx(p);
  } else if (qc.desc_act) {
    return not_found(m + ".g_idx: quantization_config has desc_act true but the tensor is not in " + files.dir());
  }
  return p;
}

Result<Part> read_awq(const WeightFiles& files, const QuantizationConfig& qc, const std::string& m, int64_t n,
                      int64_t k) {
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // word nibble i holds column 8c + kOrder[i]
  Part p;
  p.kind = Part::kIntCodes;
  p.n = n;
  p.bits = 4;
  p.group = qc.group_size;
  XI_RETURN_IF_ERROR(check_group(m, p.group, k, "group_size"));
  const int64_t groups = k / p.group;
  if (n % 8 != 0)
    return invalid_argument(m + ": AWQ packs 8 columns per int32: out_features " + std::to_string(n) +
                            " must be a multiple of 8");
  XI_ASSIGN_OR_RETURN(std::vector<int32_t> qweight, read_i32(files, m + ".qweight", Shape{k, n / 8}));
  XI_ASSIGN_OR_RETURN(std::vector<int32_t> qzeros, read_i32(files, m + ".qzeros", Shape{groups, n / 8}));
  XI_ASSIGN_OR_RETURN(TensorView scales, get_tensor(files, m + ".scales", {Shape{groups, n}}, kFloatTypes));
  auto unpack = [&](const std::vector<int32_t>& words, int64_t rows, std::vector<uint8_t>& out_nr) {
    out_nr.resize(static_cast<size_t>(n * rows));  // [n, rows]
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < n / 8; ++c) {
        const auto w = static_cast<uint32_t>(words[static_cast<size_t>(r * (n / 8) + c)]);
        for (int i = 0; i < 8; ++i)
          out_nr[static_cast<size_t>((c * 8 + kOrder[i]) * rows + r)] = static_cast<uint8_t>((w >> (4 * i)) & 15);
      }
  };
  unpack(qweight, k, p.codes);
  unpack(qzeros, groups, p.zeros);
  p.scales = transpose(to_f32(scales), groups, n);
  return p;
}

// ---- compressed-tensors ----

// weight_scale of a strategy: group [N, G]; channel [N, 1] or [N]; tensor [1] or [] (a scalar).
Result<std::vector<float>> read_ct_scale(const WeightFiles& files, const std::string& name, const CtQuantArgs& a,
                                         int64_t n, int64_t k) {
  std::vector<Shape> shapes;
  switch (a.strategy) {
    case CtStrategy::kGroup: shapes = {Shape{n, k / a.group_size}}; break;
    case CtStrategy::kChannel: shapes = {Shape{n, 1}, Shape{n}}; break;
    default: shapes = {Shape{1}, Shape{}}; break;
  }
  XI_ASSIGN_OR_RETURN(TensorView v, get_tensor(files, name, shapes, kFloatTypes));
  return to_f32(v);
}

Result<float> read_input_scale(const WeightFiles& files, const std::string& m) {
  XI_ASSIGN_OR_RETURN(TensorView v, get_tensor(files, m + ".input_scale", {Shape{1}, Shape{}}, kFloatTypes));
  const float s = to_f32(v)[0];
  if (!(s > 0) || !std::isfinite(s))
    return invalid_argument(where(files, m + ".input_scale") + ": " + std::to_string(s) + " is not a positive scale");
  if (files.contains(m + ".input_zero_point")) {
    XI_ASSIGN_OR_RETURN(TensorView z, files.get(m + ".input_zero_point"));
    std::vector<float> zf(static_cast<size_t>(z.numel()));
    if (z.dtype != DType::kI8 && z.dtype != DType::kF32 && z.dtype != DType::kBF16 && z.dtype != DType::kF16)
      return unimplemented(where(files, m + ".input_zero_point") + ": dtype " + dtype_name(z.dtype) +
                           " (supported: I8, F32, BF16, F16)");
    convert_to_f32(z.dtype, z.data, zf.data(), zf.size());
    for (float v2 : zf)
      if (v2 != 0)
        return unimplemented(where(files, m + ".input_zero_point") + ": asymmetric activations are not supported");
  }
  return s;
}

Result<Part> read_ct(const WeightFiles& files, const CtScheme& s, const std::string& m, int64_t n, int64_t k) {
  const CtQuantArgs& a = s.weights;
  Part p;
  p.n = n;
  if (a.strategy == CtStrategy::kGroup) XI_RETURN_IF_ERROR(check_group(m, a.group_size, k, "group_size"));
  XI_ASSIGN_OR_RETURN(std::vector<float> scale, read_ct_scale(files, m + ".weight_scale", a, n, k));
  const int64_t groups = a.strategy == CtStrategy::kGroup ? k / a.group_size : 1;
  const int off = 1 << (a.num_bits - 1);

  if (s.format == CtFormat::kFloatQuantized) {
    XI_ASSIGN_OR_RETURN(TensorView w, get_tensor(files, m + ".weight", {Shape{n, k}}, {DType::kFP8E4M3}));
    const auto* b = static_cast<const uint8_t*>(w.data);
    p.codes.assign(b, b + n * k);
    p.scales = std::move(scale);
    if (!s.input_activations) {  // FP8 weight-only: no W8A16-FP8 format; dequantize
      p.kind = Part::kFloat;
      p.dense.resize(static_cast<size_t>(n * k));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c)
          p.dense[static_cast<size_t>(r * k + c)] =
              p.scales[p.scales.size() == 1 ? 0 : static_cast<size_t>(r)] * to_float(fp8_e4m3{b[r * k + c]});
      p.note = "FP8 weight-only (no W8A16-FP8 format): dequantized";
      return p;
    }
    p.kind = Part::kFp8;
  } else if (s.format == CtFormat::kPackQuantized) {
    const int per = 32 / a.num_bits;
    const int64_t words = (k + per - 1) / per;
    XI_ASSIGN_OR_RETURN(TensorView ws, get_tensor(files, m + ".weight_shape", {Shape{2}}, {DType::kI64, DType::kI32}));
    const int64_t sn = ws.dtype == DType::kI64 ? ws.as<const int64_t>()[0] : ws.as<const int32_t>()[0];
    const int64_t sk = ws.dtype == DType::kI64 ? ws.as<const int64_t>()[1] : ws.as<const int32_t>()[1];
    if (sn != n || sk != k)
      return invalid_argument(where(files, m + ".weight_shape") + ": [" + std::to_string(sn) + ", " +
                              std::to_string(sk) + "], expected [" + std::to_string(n) + ", " + std::to_string(k) +
                              "]");
    XI_ASSIGN_OR_RETURN(std::vector<int32_t> packed, read_i32(files, m + ".weight_packed", Shape{n, words}));
    p.kind = Part::kIntCodes;
    p.bits = a.num_bits;
    p.group = a.strategy == CtStrategy::kGroup ? a.group_size : k;
    p.codes.resize(static_cast<size_t>(n * k));
    unpack_fields(packed.data(), n, words, a.num_bits, k, p.codes.data());
    p.scales = std::move(scale);
    if (!a.symmetric) {
      const std::string zn = m + ".weight_zero_point";
      XI_ASSIGN_OR_RETURN(TensorView zt, files.get(zn));
      if (zt.dtype == DType::kI8) {  // unpacked signed zero points (older writers)
        // [N] only means one zero point per row: for groups the loop below reads N x G values.
        XI_ASSIGN_OR_RETURN(zt, get_tensor(files, zn, groups == 1 ? std::vector<Shape>{Shape{n, 1}, Shape{n}}
                                                                  : std::vector<Shape>{Shape{n, groups}},
                                           {DType::kI8}));
        p.zeros.resize(static_cast<size_t>(n * groups));
        for (size_t i = 0; i < p.zeros.size(); ++i) p.zeros[i] = static_cast<uint8_t>(zt.as<const int8_t>()[i] + off);
      } else {  // packed along N: [ceil(N / per), G]
        const int64_t zrows = (n + per - 1) / per;
        XI_ASSIGN_OR_RETURN(std::vector<int32_t> zp, read_i32(files, zn, Shape{zrows, groups}));
        std::vector<int32_t> zp_t = transpose(zp, zrows, groups);  // [G, ceil(N / per)]
        std::vector<uint8_t> z(static_cast<size_t>(groups * n));
        unpack_fields(zp_t.data(), groups, zrows, a.num_bits, n, z.data());  // [G, N], unsigned (offset)
        p.zeros = transpose(z, groups, n);
      }
    }
    if (files.contains(m + ".weight_g_idx")) {
      XI_ASSIGN_OR_RETURN(p.g_idx, read_i32(files, m + ".weight_g_idx", Shape{k}));
      XI_RETURN_IF_ERROR(check_g_idx(files, m + ".weight_g_idx", p.g_idx, groups));
      drop_trivial_g_idx(p);
    }
  } else {  // int-quantized / naive-quantized: signed int8 codes
    XI_ASSIGN_OR_RETURN(TensorView w, get_tensor(files, m + ".weight", {Shape{n, k}}, {DType::kI8}));
    const auto* q = w.as<const int8_t>();
    const int lo = -off, hi = off - 1;
    for (int64_t i = 0; i < n * k; ++i)
      if (q[i] < lo || q[i] > hi)
        return invalid_argument(where(files, m + ".weight") + ": value " + std::to_string(q[i]) + " at " +
                                std::to_string(i) + " is outside the " + std::to_string(a.num_bits) + "-bit range");
    if (s.input_activations) {  // W8A8 int8 (parse_quantization_config checked: symmetric 8-bit channel/tensor)
      p.kind = Part::kW8A8Int8;
      p.codes.assign(reinterpret_cast<const uint8_t*>(q), reinterpret_cast<const uint8_t*>(q) + n * k);
      p.scales = std::move(scale);
    } else {
      p.kind = Part::kIntCodes;
      p.bits = a.num_bits;
      p.group = a.strategy == CtStrategy::kGroup ? a.group_size : k;
      p.codes.resize(static_cast<size_t>(n * k));
      for (int64_t i = 0; i < n * k; ++i) p.codes[static_cast<size_t>(i)] = static_cast<uint8_t>(q[i] + off);
      p.scales = std::move(scale);
      if (a.strategy == CtStrategy::kTensor) p.scales.assign(static_cast<size_t>(n), p.scales[0]);
      if (!a.symmetric) {
        // [N] and [1] only where they cover every (row, group): the loop below reads N x G values.
        std::vector<Shape> zshapes = {Shape{n, groups}};
        if (groups == 1) zshapes.push_back(Shape{n});
        if (a.strategy == CtStrategy::kTensor) zshapes.push_back(Shape{1});
        XI_ASSIGN_OR_RETURN(TensorView zt, get_tensor(files, m + ".weight_zero_point", zshapes, {DType::kI8}));
        p.zeros.resize(static_cast<size_t>(n * groups));
        for (size_t i = 0; i < p.zeros.size(); ++i)
          p.zeros[i] = static_cast<uint8_t>(zt.as<const int8_t>()[zt.numel() == 1 ? 0 : i] + off);
      }
    }
  }
  if (p.kind == Part::kW8A8Int8 || p.kind == Part::kFp8) {
    const CtQuantArgs& ia = *s.input_activations;
    if (ia.strategy == CtStrategy::kTensor) {
      p.act = quant::ActScaleMode::kStaticPerTensor;
      XI_ASSIGN_OR_RETURN(p.input_scale, read_input_scale(files, m));
    } else {
      p.act = quant::ActScaleMode::kDynamicPerToken;
    }
  }
  return p;
}

Result<Part> read_dense(const WeightFiles& files, const std::string& m, int64_t n, int64_t k) {
  XI_ASSIGN_OR_RETURN(TensorView w, get_tensor(files, m + ".weight", {Shape{n, k}}, kFloatTypes));
  Part p;
  p.kind = Part::kFloat;
  p.n = n;
  p.dense = to_f32(w);
  return p;
}

// Float rows of any part (the join fallback).
std::vector<float> part_to_f32(const Part& p, int64_t k) {
  if (p.kind == Part::kFloat) return p.dense;
  std::vector<float> out(static_cast<size_t>(p.n * k));
  for (int64_t r = 0; r < p.n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = static_cast<size_t>(r * k + c);
      float v = 0;
      if (p.kind == Part::kIntCodes) {
        const int64_t groups = k / p.group;
        const int64_t g = p.g_idx.empty() ? c / p.group : p.g_idx[static_cast<size_t>(c)];
        const size_t gi = static_cast<size_t>(r * groups + g);
        const int z = p.zeros.empty() ? (1 << (p.bits - 1)) : p.zeros[gi];
        v = p.scales[gi] * static_cast<float>(static_cast<int>(p.codes[i]) - z);
      } else {
        const float s = p.scales[p.scales.size() == 1 ? 0 : static_cast<size_t>(r)];
        v = p.kind == Part::kW8A8Int8 ? s * static_cast<float>(static_cast<int8_t>(p.codes[i]))
                                      : s * to_float(fp8_e4m3{p.codes[i]});
      }
      out[i] = v;
    }
  return out;
}

HostTensor tensor_of(DType dt, Shape shape, const void* src, size_t bytes) {
  HostTensor t(dt, shape);
  if (bytes > 0) std::memcpy(t.data<void>(), src, bytes);
  return t;
}

HostLinear join_float(const std::vector<Part>& parts, int64_t k, std::string note) {
  HostLinear h;
  for (const Part& p : parts) h.n += p.n;
  h.k = k;
  h.format = quant::DenseFormat{DType::kF32};
  h.weight = HostTensor(DType::kF32, Shape{h.n, k});
  float* dst = h.weight.data<float>();
  for (const Part& p : parts) {
    std::vector<float> f = part_to_f32(p, k);
    std::copy(f.begin(), f.end(), dst);
    dst += f.size();
  }
  h.note = std::move(note);
  return h;
}

Result<HostLinear> join(const std::vector<Part>& parts, const std::vector<LinearPart>& specs, int64_t k) {
  const Part& first = parts[0];
  std::string differs;
  for (const Part& p : parts) {
    if (p.kind != first.kind) differs = "parts differ in format";
    else if (p.kind == Part::kIntCodes && (p.bits != first.bits || p.group != first.group))
      differs = "parts differ in bits or group size";
    else if (p.kind == Part::kIntCodes && p.g_idx != first.g_idx) differs = "parts have different g_idx";
    else if ((p.kind == Part::kW8A8Int8 || p.kind == Part::kFp8) && p.act != first.act)
      differs = "parts differ in activation scheme";
  }
  std::string notes;
  for (const Part& p : parts)
    if (!p.note.empty() && notes.find(p.note) == std::string::npos) notes += (notes.empty() ? "" : "; ") + p.note;
  if (first.kind == Part::kFloat && differs.empty()) return join_float(parts, k, notes);
  if (!differs.empty()) return join_float(parts, k, differs + ": dequantized to f32 at load");

  HostLinear h;
  for (const Part& p : parts) h.n += p.n;
  h.k = k;
  const int64_t N = h.n;
  if (first.kind == Part::kIntCodes) {
    const int64_t groups = k / first.group;
    bool any_zeros = false;
    for (const Part& p : parts) any_zeros = any_zeros || !p.zeros.empty();
    std::vector<uint8_t> codes, zeros;
    std::vector<float> scales;
    for (const Part& p : parts) {
      codes.insert(codes.end(), p.codes.begin(), p.codes.end());
      scales.insert(scales.end(), p.scales.begin(), p.scales.end());
      if (any_zeros) {
        if (p.zeros.empty()) zeros.insert(zeros.end(), static_cast<size_t>(p.n * groups), uint8_t(1 << (first.bits - 1)));
        else zeros.insert(zeros.end(), p.zeros.begin(), p.zeros.end());
      }
    }
    if (first.bits == 8 && first.group == k && !any_zeros && first.g_idx.empty()) {
      h.format = quant::Int8ChannelFormat{};
      h.weight = HostTensor(DType::kI8, Shape{N, k});
      for (size_t i = 0; i < codes.size(); ++i) h.weight.data<int8_t>()[i] = static_cast<int8_t>(codes[i] - 128);
      h.scales = tensor_of(DType::kF32, Shape{N}, scales.data(), scales.size() * 4);
    } else {
      h.format = quant::IntGroupFormat{first.bits, static_cast<int>(first.group), any_zeros};
      if (first.bits == 4) {
        h.weight = HostTensor(DType::kU8, Shape{N, k / 2});
        uint8_t* w = h.weight.data<uint8_t>();
        for (int64_t r = 0; r < N; ++r)
          for (int64_t c = 0; c < k; c += 2)
            w[r * (k / 2) + c / 2] = static_cast<uint8_t>(codes[static_cast<size_t>(r * k + c)] |
                                                          (codes[static_cast<size_t>(r * k + c + 1)] << 4));
      } else {
        h.weight = tensor_of(DType::kU8, Shape{N, k}, codes.data(), codes.size());
      }
      h.scales = tensor_of(DType::kF32, Shape{N, groups}, scales.data(), scales.size() * 4);
      if (any_zeros) h.zeros = tensor_of(DType::kU8, Shape{N, groups}, zeros.data(), zeros.size());
      if (!first.g_idx.empty())
        h.g_idx = tensor_of(DType::kI32, Shape{k}, first.g_idx.data(), first.g_idx.size() * 4);
    }
    h.note = notes;
    return h;
  }
  // W8A8 int8 / FP8: codes as they are; scales per channel unless every part has the same single scale.
  std::vector<uint8_t> codes;
  bool one_scale = true;
  for (const Part& p : parts) {
    codes.insert(codes.end(), p.codes.begin(), p.codes.end());
    one_scale = one_scale && p.scales.size() == 1 && p.scales[0] == first.scales[0];
  }
  std::vector<float> scales;
  const bool per_tensor = one_scale && first.kind == Part::kFp8;
  if (per_tensor) {
    scales = {first.scales[0]};
  } else {
    for (const Part& p : parts) {
      if (p.scales.size() == 1) scales.insert(scales.end(), static_cast<size_t>(p.n), p.scales[0]);
      else scales.insert(scales.end(), p.scales.begin(), p.scales.end());
    }
    bool had_tensor = false;
    for (const Part& p : parts) had_tensor = had_tensor || p.scales.size() == 1;
    if (had_tensor)
      notes += std::string(notes.empty() ? "" : "; ") +
               (parts.size() > 1 && first.kind == Part::kFp8 ? "per-tensor weight scales differ between parts: "
                                                                "expanded to per-channel"
                                                              : "per-tensor weight scale expanded to per-channel");
  }
  h.weight = tensor_of(first.kind == Part::kFp8 ? DType::kFP8E4M3 : DType::kI8, Shape{N, k}, codes.data(), codes.size());
  h.scales = tensor_of(DType::kF32, per_tensor ? Shape{1} : Shape{N}, scales.data(), scales.size() * 4);
  if (first.act == quant::ActScaleMode::kStaticPerTensor) {
    float s = 0;
    bool same = true;
    for (const Part& p : parts) {
      same = same && p.input_scale == first.input_scale;
      s = std::max(s, p.input_scale);
    }
    if (!same) {
      std::string names;
      for (const LinearPart& sp : specs) names += (names.empty() ? "" : ", ") + sp.module;
      notes += std::string(notes.empty() ? "" : "; ") + "input_scale differs between " + names +
               ": the largest (" + std::to_string(s) + ") is used";
    }
    h.input_scale = tensor_of(DType::kF32, Shape{1}, &s, 4);
  }
  if (first.kind == Part::kFp8) h.format = quant::W8A8Fp8Format{!per_tensor, first.act};
  else h.format = quant::W8A8Int8Format{first.act};
  h.note = notes;
  return h;
}

}  // namespace

quant::QuantizedMatrix HostLinear::matrix() const {
  quant::QuantizedMatrix m;
  m.format = format;
  m.n = n;
  m.k = k;
  m.weight = weight.view().data;
  m.scales = scales.view().empty() ? nullptr : scales.data<float>();
  m.zeros = zeros.view().empty() ? nullptr : zeros.data<uint8_t>();
  m.mins = mins.view().empty() ? nullptr : mins.data<float>();
  m.g_idx = g_idx.view().empty() ? nullptr : g_idx.data<int32_t>();
  m.input_scale = input_scale.view().empty() ? nullptr : input_scale.data<float>();
  m.input_perm = input_perm.view().empty() ? nullptr : input_perm.data<int32_t>();
  return m;
}

bool sort_act_order(HostLinear& w) {
  const auto* g = std::get_if<quant::IntGroupFormat>(&w.format);
  if (g == nullptr || w.g_idx.view().empty() || !w.input_perm.view().empty() ||
      (g->bits != 4 && g->bits != 8) || (g->bits == 4 && w.k % 2 != 0) || w.g_idx.numel() != w.k ||
      w.weight.numel() != w.n * (g->bits == 4 ? w.k / 2 : w.k))
    return false;
  const int64_t k = w.k, group = g->group_size, groups = (k + group - 1) / group;
  const int32_t* gi = w.g_idx.data<int32_t>();
  std::vector<int64_t> count(static_cast<size_t>(groups), 0);
  for (int64_t c = 0; c < k; ++c) {
    if (gi[c] < 0 || gi[c] >= groups) return false;
    ++count[static_cast<size_t>(gi[c])];
  }
  for (int64_t i = 0; i < groups; ++i)
    if (count[static_cast<size_t>(i)] != std::min(group, k - i * group)) return false;
  // Stable by group: stored column j of group gi[j] sits in that group's range, in input order within it.
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return gi[a] < gi[b]; });
  HostTensor packed(w.weight.dtype(), w.weight.shape());
  const uint8_t* src = w.weight.data<uint8_t>();
  uint8_t* dst = packed.data<uint8_t>();
  if (g->bits == 4) {  // element c in the low nibble of byte c / 2 for even c, the high nibble for odd c
    const int64_t row_bytes = k / 2;
    for (int64_t r = 0; r < w.n; ++r) {
      const uint8_t* s = src + r * row_bytes;
      uint8_t* d = dst + r * row_bytes;
      for (int64_t j = 0; j < k; j += 2) {
        const auto nib = [&](int64_t c) { return static_cast<uint8_t>((s[c / 2] >> (4 * (c % 2))) & 15); };
        d[j / 2] = static_cast<uint8_t>(nib(perm[static_cast<size_t>(j)]) |
                                        (nib(perm[static_cast<size_t>(j + 1)]) << 4));
      }
    }
  } else {
    for (int64_t r = 0; r < w.n; ++r)
      for (int64_t j = 0; j < k; ++j) dst[r * k + j] = src[r * k + perm[static_cast<size_t>(j)]];
  }
  w.weight = std::move(packed);
  w.input_perm = HostTensor(DType::kI32, Shape{k});
  std::copy(perm.begin(), perm.end(), w.input_perm.data<int32_t>());
  w.g_idx = HostTensor();
  return true;
}

Result<HostLinear> read_checkpoint_linear(const WeightFiles& files, const QuantizationConfig& qc,
                                          const std::vector<LinearPart>& parts, int64_t k) {
  XI_CHECK(!parts.empty());
  std::vector<Part> decoded;
  for (const LinearPart& sp : parts) {
    const std::string& m = sp.module;
    auto read = [&]() -> Result<Part> {
      if (!qc.quantizes(m)) return read_dense(files, m, sp.rows, k);
      if (qc.method == QuantMethod::kGptq) return read_gptq(files, qc, m, sp.rows, k);
      if (qc.method == QuantMethod::kAwq) return read_awq(files, qc, m, sp.rows, k);
      return read_ct(files, *qc.ct_scheme_for(m), m, sp.rows, k);
    };
    XI_ASSIGN_OR_RETURN(Part p, read());
    decoded.push_back(std::move(p));
  }
  return join(decoded, parts, k);
}

HostLinear dequantize_linear(const HostLinear& w) {
  HostLinear d;
  d.n = w.n;
  d.k = w.k;
  d.format = quant::DenseFormat{DType::kF32};
  d.weight = HostTensor(DType::kF32, Shape{w.n, w.k});
  quant::dequantize_matrix(w.matrix(), d.weight.data<float>());
  d.note = w.note;
  return d;
}

UploadedLinear upload_linear(backend::Backend& be, const HostLinear& w, DType dense_dtype) {
  UploadedLinear u;
  auto put = [&](const HostTensor& t, DType dt) -> TensorView {
    if (t.view().empty()) return TensorView{};
    backend::DeviceTensor d = be.upload(t.view(), dt);
    u.buffers.push_back(d.buffer);
    u.bytes += d.view.bytes();
    return d.view;
  };
  const bool dense = std::holds_alternative<quant::DenseFormat>(w.format);
  u.weights.weight = put(w.weight, dense ? dense_dtype : w.weight.dtype());
  u.weights.format = dense ? quant::WeightFormat{quant::DenseFormat{dense_dtype}} : w.format;
  u.weights.scales = put(w.scales, DType::kF32);
  u.weights.zeros = put(w.zeros, DType::kU8);
  u.weights.mins = put(w.mins, DType::kF32);
  u.weights.g_idx = put(w.g_idx, DType::kI32);
  u.weights.input_perm = put(w.input_perm, DType::kI32);
  u.weights.input_scale = put(w.input_scale, DType::kF32);
  u.weights.k = dense ? 0 : w.k;
  return u;
}

size_t checkpoint_weight_bytes(const ModelConfig& c, DType dense_dtype, const LinearSupported& supported,
                               const std::optional<quant::WeightFormat>& linear_format) {
  const QuantizationConfig& qc = c.quantization;
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q = static_cast<int64_t>(c.num_heads) * D, kv = static_cast<int64_t>(c.num_kv_heads) * D;
  // The format a module will most likely load as (per-channel expansion and joins do not change the bytes
  // by more than the scales).
  auto planned = [&](const std::string& module, int64_t k) -> quant::WeightFormat {
    if (linear_format) return module == "lm_head" ? quant::WeightFormat{quant::DenseFormat{dense_dtype}} : *linear_format;
    if (!qc.quantizes(module)) return quant::DenseFormat{dense_dtype};
    if (qc.method != QuantMethod::kCompressedTensors) {
      const int g = qc.group_size < 0 ? static_cast<int>(k) : qc.group_size;
      return quant::IntGroupFormat{qc.bits, g, true};
    }
    const CtScheme& s = *qc.ct_scheme_for(module);
    const CtQuantArgs& a = s.weights;
    if (s.format == CtFormat::kFloatQuantized)
      return s.input_activations ? quant::WeightFormat{quant::W8A8Fp8Format{}} : quant::DenseFormat{dense_dtype};
    if (s.input_activations) return quant::W8A8Int8Format{};
    const int g = a.strategy == CtStrategy::kGroup ? a.group_size : static_cast<int>(k);
    if (a.num_bits == 8 && a.symmetric && a.strategy != CtStrategy::kGroup) return quant::Int8ChannelFormat{};
    return quant::IntGroupFormat{a.num_bits, g, !a.symmetric};
  };
  auto bytes = [&](const std::string& module, int64_t n, int64_t k) -> size_t {
    quant::WeightFormat f = planned(module, k);
    if (!supported(f, n, k)) f = quant::DenseFormat{dense_dtype};
    return quant::format_weight_bytes(f, n, k);
  };
  size_t total = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    total += bytes(p + "self_attn.q_proj", q, H) + 2 * bytes(p + "self_attn.k_proj", kv, H) +
             bytes(p + "self_attn.o_proj", H, q) + 2 * bytes(p + "mlp.gate_proj", I, H) + bytes(p + "mlp.down_proj", H, I);
    // GPTQ act order keeps one g_idx i32 [K] per (fused) linear, which format_weight_bytes does not count.
    if (qc.method == QuantMethod::kGptq && qc.desc_act && supported(planned(p + "mlp.down_proj", I), H, I))
      total += 4 * static_cast<size_t>(H + q + H + I);
    int64_t vec = 2 * H;
    if (c.attention_bias) vec += q + 2 * kv;
    if (c.o_bias) vec += H;
    if (c.qk_norm) vec += 2 * D;
    if (c.mlp_bias) vec += 2 * I + H;
    total += dtype_bytes(dense_dtype, static_cast<size_t>(vec));
  }
  total += dtype_bytes(dense_dtype, static_cast<size_t>(V * H + H));
  if (!c.tie_word_embeddings) total += bytes("lm_head", V, H);
  return total;
}

size_t planned_weight_bytes(const std::string& model_path, const ModelConfig& c, DType dense_dtype,
                            const LinearSupported& supported,
                            const std::optional<quant::WeightFormat>& linear_format, bool sharded,
                            const RepackPreferred& repack) {
  if (linear_format || !is_gguf_path(model_path)) return checkpoint_weight_bytes(c, dense_dtype, supported, linear_format);
  Result<GgufFile> file = GgufFile::open(model_path);
  if (!file.ok()) return checkpoint_weight_bytes(c, dense_dtype, supported);
  // The loader concatenates q / k / v and gate / up into one weight. Where its parts differ in type (Q4_K_M's
  // v in Q6_K beside q / k in Q4_K) and every part stays packed, an unsharded model runs it as segments, each
  // part in the format of its own type; otherwise such parts load dense (load_gguf_weights).
  auto concat_group = [](const std::string& name) {
    for (const char* part : {".attn_q.", ".attn_k.", ".attn_v."})
      if (const size_t at = name.find(part); at != std::string::npos) return name.substr(0, at) + ".qkv";
    for (const char* part : {".ffn_gate.", ".ffn_up."})
      if (const size_t at = name.find(part); at != std::string::npos) return name.substr(0, at) + ".gate_up";
    return name;
  };
  // A matrix's bytes in the format it keeps on its own: repacked into an int format where the backend prefers
  // and runs that one, as the loader does (gguf_repack.h), else the blocks kept where supported; nullopt:
  // dense.
  auto packed_bytes = [&](const GgufTensorInfo& t) -> std::optional<size_t> {
    const bool is_float = t.type == quant::GgufType::kF32 || t.type == quant::GgufType::kF16 ||
                          t.type == quant::GgufType::kBF16;
    if (t.ne.size() != 2 || is_float) return std::nullopt;
    const int64_t n = t.ne[1], k = t.ne[0];
    const std::optional<quant::IntGroupFormat> repacked = gguf_repack_format(t.type, t.name, sharded);
    const bool prefers = repack ? repack(t.type) : !supported(quant::GgufFormat{t.type}, n, k);
    if (prefers && repacked && supported(*repacked, n, k)) return quant::format_weight_bytes(*repacked, n, k);
    if (supported(quant::GgufFormat{t.type}, n, k)) return t.bytes;
    return std::nullopt;
  };
  std::map<std::string, std::set<quant::GgufType>> group_types;
  std::map<std::string, bool> group_packed;  // every part of the group keeps a packed format
  for (const GgufTensorInfo& t : file->tensors()) {
    const std::string g = concat_group(t.name);
    group_types[g].insert(t.type);
    const bool packed = packed_bytes(t).has_value();
    group_packed[g] = group_packed.count(g) ? group_packed[g] && packed : packed;
  }
  size_t total = 0;
  for (const GgufTensorInfo& t : file->tensors()) {
    const std::string g = concat_group(t.name);
    const bool own_format = group_types[g].size() == 1 || (!sharded && group_packed[g]);
    const std::optional<size_t> packed = own_format ? packed_bytes(t) : std::nullopt;
    total += packed ? *packed : dtype_bytes(dense_dtype, static_cast<size_t>(t.numel()));
  }
  return total;
}

}  // namespace xinfer::model
