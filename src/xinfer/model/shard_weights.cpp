#include "xinfer/model/shard_weights.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <type_traits>
#include <variant>

#include "xinfer/core/logging.h"

namespace xinfer::model {
namespace {

HostTensor copy_of(const TensorView& t) {
  if (t.empty()) return {};
  HostTensor out(t.dtype, t.shape);
  std::memcpy(out.data<uint8_t>(), t.data, t.bytes());
  return out;
}

// Rows [r0, r1) of a tensor whose outermost dimension is n (1-D or 2-D, any dtype).
HostTensor rows_of(const TensorView& t, int64_t r0, int64_t r1) {
  if (t.empty()) return {};
  const size_t row_bytes = t.bytes() / static_cast<size_t>(t.shape[0]);
  const Shape s = t.shape.rank() == 1 ? Shape{r1 - r0} : Shape{r1 - r0, t.shape[1]};
  HostTensor out(t.dtype, s);
  std::memcpy(out.data<uint8_t>(), static_cast<const uint8_t*>(t.data) + static_cast<size_t>(r0) * row_bytes,
              static_cast<size_t>(r1 - r0) * row_bytes);
  return out;
}

// Bytes [b0, b1) of every row of a 2-D tensor; the result has shape [rows, cols] in `dtype`.
HostTensor byte_cols_of(const TensorView& t, size_t b0, size_t b1, DType dtype, int64_t cols) {
  const int64_t rows = t.shape[0];
  const size_t row_bytes = t.bytes() / static_cast<size_t>(rows);
  HostTensor out(dtype, Shape{rows, cols});
  XI_CHECK_EQ(out.view().bytes(), static_cast<size_t>(rows) * (b1 - b0));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data<uint8_t>() + static_cast<size_t>(r) * (b1 - b0),
                static_cast<const uint8_t*>(t.data) + static_cast<size_t>(r) * row_bytes + b0, b1 - b0);
  return out;
}

// Element columns [c0, c1) of a 2-D tensor of a whole-byte dtype.
HostTensor cols_of(const TensorView& t, int64_t c0, int64_t c1) {
  const size_t e = dtype_bytes(t.dtype, 1);
  return byte_cols_of(t, static_cast<size_t>(c0) * e, static_cast<size_t>(c1) * e, t.dtype, c1 - c0);
}

HostTensor stack_rows(const std::vector<TensorView>& parts) {
  if (parts.empty() || parts[0].empty()) return {};
  int64_t rows = 0;
  size_t bytes = 0;
  for (const TensorView& p : parts) {
    rows += p.shape[0];
    bytes += p.bytes();
  }
  const Shape s = parts[0].shape.rank() == 1 ? Shape{rows} : Shape{rows, parts[0].shape[1]};
  HostTensor out(parts[0].dtype, s);
  XI_CHECK_EQ(out.view().bytes(), bytes);
  uint8_t* dst = out.data<uint8_t>();
  for (const TensorView& p : parts) {
    std::memcpy(dst, p.data, p.bytes());
    dst += p.bytes();
  }
  return out;
}

// Scales of a format that are per tensor ([1]) rather than per row.
bool same_bytes(const HostTensor& a, const HostTensor& b) {
  if (a.shape().rank() == 0 || b.shape().rank() == 0) return a.shape().rank() == b.shape().rank();
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data<uint8_t>(), b.data<uint8_t>(), a.view().bytes()) == 0;
}

bool per_tensor_scales(const HostLinearView& w) {
  return !w.scales.empty() && w.scales.numel() == 1 && w.n != 1;
}

ShardedLinear dequantized_cols(const HostLinearView& w, int64_t c0, int64_t c1, const std::string& name,
                            const std::string& why) {
  XI_LOG(INFO) << "tensor parallel: " << name << " (" << quant::format_name(w.format) << ") split at input column "
               << c0 << ".." << c1 << " " << why << ": this shard is dequantized to f32";
  ShardedLinear full = dequantize_shard(w);
  ShardedLinear out;
  out.format = quant::DenseFormat{DType::kF32};
  out.n = w.n;
  out.k = c1 - c0;
  out.weight = cols_of(full.weight.view(), c0, c1);
  out.bias = copy_of(w.bias);
  return out;
}

}  // namespace

quant::QuantizedMatrix HostLinearView::matrix() const {
  quant::QuantizedMatrix m;
  m.format = format;
  m.n = n;
  m.k = k;
  m.weight = weight.data;
  m.scales = scales.empty() ? nullptr : scales.as<const float>();
  m.zeros = zeros.empty() ? nullptr : zeros.as<const uint8_t>();
  m.g_idx = g_idx.empty() ? nullptr : g_idx.as<const int32_t>();
  m.input_scale = input_scale.empty() ? nullptr : input_scale.as<const float>();
  return m;
}

HostLinearView ShardedLinear::view() const {
  HostLinearView v;
  v.format = format;
  v.n = n;
  v.k = k;
  v.weight = weight.view();
  if (scales.numel() > 0 && scales.shape().rank() > 0) v.scales = scales.view();
  if (zeros.shape().rank() > 0) v.zeros = zeros.view();
  if (g_idx.shape().rank() > 0) v.g_idx = g_idx.view();
  if (input_scale.shape().rank() > 0) v.input_scale = input_scale.view();
  if (bias.shape().rank() > 0) v.bias = bias.view();
  return v;
}

ShardedLinear copy_shard(const HostLinearView& w) {
  ShardedLinear out;
  out.format = w.format;
  out.n = w.n;
  out.k = w.k;
  out.weight = copy_of(w.weight);
  out.scales = copy_of(w.scales);
  out.zeros = copy_of(w.zeros);
  out.g_idx = copy_of(w.g_idx);
  out.input_scale = copy_of(w.input_scale);
  out.bias = copy_of(w.bias);
  return out;
}

ShardedLinear dequantize_shard(const HostLinearView& w) {
  ShardedLinear out;
  out.format = quant::DenseFormat{DType::kF32};
  out.n = w.n;
  out.k = w.k;
  out.weight = HostTensor(DType::kF32, Shape{w.n, w.k});
  if (const auto* d = std::get_if<quant::DenseFormat>(&w.format)) {
    convert_to_f32(d->dtype, w.weight.data, out.weight.data<float>(), static_cast<size_t>(w.n * w.k));
  } else {
    quant::dequantize_matrix(w.matrix(), out.weight.data<float>());
  }
  out.bias = copy_of(w.bias);
  return out;
}

Result<ShardedLinear> shard_rows(const HostLinearView& w, int64_t r0, int64_t r1, const std::string& name) {
  if (r0 < 0 || r1 > w.n || r0 > r1)
    return invalid_argument(name + ": rows [" + std::to_string(r0) + ", " + std::to_string(r1) + ") outside [0, " +
                            std::to_string(w.n) + ")");
  ShardedLinear out;
  out.format = w.format;
  out.n = r1 - r0;
  out.k = w.k;
  out.weight = rows_of(w.weight, r0, r1);
  out.scales = per_tensor_scales(w) ? copy_of(w.scales) : rows_of(w.scales, r0, r1);
  out.zeros = rows_of(w.zeros, r0, r1);
  out.g_idx = copy_of(w.g_idx);
  out.input_scale = copy_of(w.input_scale);
  out.bias = rows_of(w.bias, r0, r1);
  return out;
}

Result<ShardedLinear> shard_cols(const HostLinearView& w, int64_t c0, int64_t c1, const std::string& name) {
  if (c0 < 0 || c1 > w.k || c0 > c1)
    return invalid_argument(name + ": input columns [" + std::to_string(c0) + ", " + std::to_string(c1) +
                            ") outside [0, " + std::to_string(w.k) + ")");
  ShardedLinear out;
  out.format = w.format;
  out.n = w.n;
  out.k = c1 - c0;
  out.bias = copy_of(w.bias);
  out.input_scale = copy_of(w.input_scale);
  return std::visit(
      [&](const auto& f) -> Result<ShardedLinear> {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<F, quant::IntGroupFormat>) {
          const int64_t g = f.group_size;
          const bool on_groups = c0 % g == 0 && (c1 % g == 0 || c1 == w.k);
          const bool on_bytes = f.bits == 8 || (c0 % 2 == 0 && (c1 % 2 == 0 || c1 == w.k));
          if (!on_groups || !on_bytes)
            return dequantized_cols(w, c0, c1, name, "(not at a boundary of its groups of " + std::to_string(g) + ")");
          const int64_t groups = w.scales.shape[1];
          int64_t g0 = c0 / g, g1 = (c1 + g - 1) / g;
          if (!w.g_idx.empty()) {
            // The slice's columns may reference any groups (GPTQ act-order): keep them if they are a run.
            const int32_t* gi = w.g_idx.as<const int32_t>();
            const auto [lo, hi] = std::minmax_element(gi + c0, gi + c1);
            const std::set<int32_t> used(gi + c0, gi + c1);
            if (c1 > c0 && (*hi - *lo + 1 != static_cast<int32_t>(used.size()) ||
                            *hi - *lo + 1 != static_cast<int32_t>(g1 - g0)))
              return dequantized_cols(w, c0, c1, name, "(its g_idx columns reference scattered groups)");
            if (c1 > c0) g0 = *lo, g1 = *hi + 1;
            HostTensor gidx(DType::kI32, Shape{c1 - c0});
            for (int64_t i = c0; i < c1; ++i) gidx.data<int32_t>()[i - c0] = gi[i] - static_cast<int32_t>(g0);
            out.g_idx = std::move(gidx);
          }
          XI_CHECK_LE(g1, groups) << name << ": scales of " << groups << " groups";
          if (f.bits == 8) {
            out.weight = byte_cols_of(w.weight, static_cast<size_t>(c0), static_cast<size_t>(c1), w.weight.dtype,
                                      c1 - c0);
          } else {
            const size_t b0 = static_cast<size_t>(c0 / 2), b1 = static_cast<size_t>((c1 + 1) / 2);
            out.weight = byte_cols_of(w.weight, b0, b1, w.weight.dtype, static_cast<int64_t>(b1 - b0));
          }
          out.scales = cols_of(w.scales, g0, g1);
          if (!w.zeros.empty()) out.zeros = cols_of(w.zeros, g0, g1);
          return std::move(out);
        } else if constexpr (std::is_same_v<F, quant::GgufFormat>) {
          const int64_t b = quant::gguf_block_elems(f.type);
          if (c0 % b != 0 || c1 % b != 0)
            return dequantized_cols(w, c0, c1, name, "(not at a boundary of its " + std::to_string(b) + "-element blocks)");
          const size_t bb = static_cast<size_t>(quant::gguf_block_bytes(f.type));
          const size_t b0 = static_cast<size_t>(c0 / b) * bb, b1 = static_cast<size_t>(c1 / b) * bb;
          out.weight = byte_cols_of(w.weight, b0, b1, w.weight.dtype, static_cast<int64_t>(b1 - b0));
          return std::move(out);
        } else {
          // Dense, int8-channel, W8A8: one element per column; scales per row (or per tensor) stay whole.
          out.weight = cols_of(w.weight, c0, c1);
          out.scales = copy_of(w.scales);
          return std::move(out);
        }
      },
      w.format);
}

Result<ShardedLinear> concat_shards(std::span<const ShardedLinear> parts, const std::string& name) {
  if (parts.empty()) return invalid_argument(name + ": nothing to concatenate");
  const std::string format = quant::format_name(parts[0].format);
  bool same = true;
  for (const ShardedLinear& p : parts) {
    if (p.k != parts[0].k)
      return invalid_argument(name + ": parts with " + std::to_string(p.k) + " and " + std::to_string(parts[0].k) +
                              " input columns");
    // g_idx and input_scale belong to the input columns: one for the fused linear, so they must agree.
    same = same && quant::format_name(p.format) == format && same_bytes(p.g_idx, parts[0].g_idx) &&
           same_bytes(p.input_scale, parts[0].input_scale);
  }
  if (!same) {
    XI_LOG(INFO) << "tensor parallel: " << name << ": parts in " << format
                 << " that cannot be stacked as they are (different formats, g_idx or input scales) are "
                    "dequantized to f32";
    std::vector<ShardedLinear> dense;
    for (const ShardedLinear& p : parts) dense.push_back(dequantize_shard(p.view()));
    return concat_shards(dense, name);
  }
  // Per-tensor weight scales (W8A8-FP8 per tensor) differ between parts: stacked as per-channel scales.
  std::vector<ShardedLinear> expanded;
  if (const auto* fp8 = std::get_if<quant::W8A8Fp8Format>(&parts[0].format); fp8 && !fp8->per_channel &&
                                                                             parts.size() > 1) {
    for (const ShardedLinear& p : parts) {
      ShardedLinear e = copy_shard(p.view());
      e.scales = HostTensor(DType::kF32, Shape{p.n});
      std::fill(e.scales.data<float>(), e.scales.data<float>() + p.n, p.scales.data<float>()[0]);
      e.format = quant::W8A8Fp8Format{true, fp8->act};
      expanded.push_back(std::move(e));
    }
    return concat_shards(expanded, name);
  }
  auto views = [&](auto member) {
    std::vector<TensorView> v;
    for (const ShardedLinear& p : parts)
      if ((p.*member).shape().rank() > 0) v.push_back((p.*member).view());
    return v;
  };
  ShardedLinear out;
  out.format = parts[0].format;
  out.k = parts[0].k;
  for (const ShardedLinear& p : parts) out.n += p.n;
  out.weight = stack_rows(views(&ShardedLinear::weight));
  out.scales = stack_rows(views(&ShardedLinear::scales));
  out.zeros = stack_rows(views(&ShardedLinear::zeros));
  out.bias = stack_rows(views(&ShardedLinear::bias));
  out.g_idx = copy_of(parts[0].g_idx.shape().rank() > 0 ? parts[0].g_idx.view() : TensorView{});
  out.input_scale = copy_of(parts[0].input_scale.shape().rank() > 0 ? parts[0].input_scale.view() : TensorView{});
  return out;
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
}  // namespace

ShardRole shard_role(const std::string& name) {
  // GGUF names (gguf_config.h: blk.N.attn_q.weight, ..., output.weight)
  if (contains(name, "attn_q.") || contains(name, "attn_k.") || contains(name, "attn_v.")) return ShardRole::kQkv;
  if (contains(name, "ffn_gate.") || contains(name, "ffn_up.")) return ShardRole::kGateUp;
  if (contains(name, "attn_output.") || contains(name, "ffn_down."))
    return ends_with(name, ".bias") ? ShardRole::kRank0Only : ShardRole::kRowParallel;
  if (name == "output.weight" || contains(name, "token_embd.")) return ShardRole::kVocabRows;
  if (contains(name, "q_proj") || contains(name, "k_proj") || contains(name, "v_proj")) return ShardRole::kQkv;
  if (contains(name, "gate_proj") || contains(name, "up_proj")) return ShardRole::kGateUp;
  if (contains(name, "o_proj") || contains(name, "down_proj"))
    return ends_with(name, ".bias") ? ShardRole::kRank0Only : ShardRole::kRowParallel;
  if (contains(name, "lm_head") || contains(name, "embed_tokens")) return ShardRole::kVocabRows;
  return ShardRole::kReplicated;
}

const char* shard_role_name(ShardRole r) {
  switch (r) {
    case ShardRole::kReplicated: return "replicated";
    case ShardRole::kQkv: return "qkv (column-parallel by heads)";
    case ShardRole::kGateUp: return "gate_up (column-parallel)";
    case ShardRole::kRowParallel: return "row-parallel";
    case ShardRole::kRank0Only: return "row-parallel bias (rank 0)";
    case ShardRole::kVocabRows: return "vocabulary-parallel (embedding, lm_head)";
  }
  return "?";
}

Result<ShardedLinear> shard_for_rank(const HostLinearView& w, ShardRole role, const ModelShard& s,
                                     const std::string& name) {
  // Views carry no mins: such weights (GGUF Q4_1 repacked) are made for unsharded linears only
  // (gguf_weights.cpp).
  if (const auto* g = std::get_if<quant::IntGroupFormat>(&w.format); g != nullptr && g->min_offset)
    return unimplemented(name + ": " + quant::format_name(w.format) + " weights cannot be sharded");
  const int64_t D = s.head_dim;
  const int64_t q_total = static_cast<int64_t>(s.total_heads) * D, kv_total = static_cast<int64_t>(s.total_kv_heads) * D;
  auto expect_rows = [&](int64_t rows) -> Status {
    if (w.n != rows)
      return invalid_argument(name + ": " + std::to_string(w.n) + " rows for a " + shard_role_name(role) +
                              " tensor of " + std::to_string(rows) + " rows");
    return Status();
  };
  auto fuse = [&](const std::vector<std::pair<int64_t, int64_t>>& ranges) -> Result<ShardedLinear> {
    std::vector<ShardedLinear> parts;
    for (const auto& [r0, r1] : ranges) {
      XI_ASSIGN_OR_RETURN(ShardedLinear p, shard_rows(w, r0, r1, name));
      parts.push_back(std::move(p));
    }
    return concat_shards(parts, name);
  };
  switch (role) {
    case ShardRole::kReplicated: return copy_shard(w);
    case ShardRole::kQkv: {
      XI_RETURN_IF_ERROR(expect_rows(q_total + 2 * kv_total));
      const int64_t q0 = s.head_begin * D, kv0 = s.kv_head_begin * D;
      return fuse({{q0, q0 + s.q_rows()},
                   {q_total + kv0, q_total + kv0 + s.kv_rows()},
                   {q_total + kv_total + kv0, q_total + kv_total + kv0 + s.kv_rows()}});
    }
    case ShardRole::kGateUp: {
      const int64_t I = s.ffn * s.tp_size;
      XI_RETURN_IF_ERROR(expect_rows(2 * I));
      return fuse({{s.ffn_begin, s.ffn_begin + s.ffn}, {I + s.ffn_begin, I + s.ffn_begin + s.ffn}});
    }
    case ShardRole::kRowParallel: {
      const bool o = contains(name, "o_proj") || contains(name, "attn_output");  // HF or GGUF name
      const int64_t k_total = o ? q_total : s.ffn * s.tp_size;
      if (w.k != k_total)
        return invalid_argument(name + ": " + std::to_string(w.k) + " input columns, expected " +
                                std::to_string(k_total));
      const int64_t c0 = o ? s.head_begin * D : s.ffn_begin, c1 = c0 + (o ? s.o_cols() : s.ffn);
      ShardedLinear out;
      XI_ASSIGN_OR_RETURN(out, shard_cols(w, c0, c1, name));
      if (s.rank != 0 && out.bias.shape().rank() > 0)  // the bias is added once, by rank 0
        std::memset(out.bias.data<uint8_t>(), 0, out.bias.view().bytes());
      return out;
    }
    case ShardRole::kRank0Only: {
      ShardedLinear out = copy_shard(w);
      if (s.rank != 0) std::memset(out.weight.data<uint8_t>(), 0, out.weight.view().bytes());
      return out;
    }
    case ShardRole::kVocabRows:
      XI_RETURN_IF_ERROR(expect_rows(s.vocab));
      return shard_rows(w, s.vocab_begin, s.vocab_end, name);
  }
  return invalid_argument(name + ": unknown shard role");
}

Result<HostTensor> shard_dense_for_rank(const TensorView& full, ShardRole role, const ModelShard& s,
                                        const std::string& name) {
  XI_CHECK(full.dtype == DType::kF32) << name << ": shard_dense_for_rank takes f32";
  HostLinearView w;
  w.format = quant::DenseFormat{DType::kF32};
  w.n = full.shape[0];
  w.k = full.shape.rank() == 1 ? 1 : full.shape[1];
  w.weight = full;
  XI_ASSIGN_OR_RETURN(ShardedLinear out, shard_for_rank(w, role, s, name));
  return std::move(out.weight);
}

}  // namespace xinfer::model
