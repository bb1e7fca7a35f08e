// Reading one linear layer from a Hugging Face checkpoint (dense, compressed-tensors, GPTQ or AWQ) into one of
// quant/'s weight formats on the host, once at load (read -> repack; the loader then uploads or dequantizes).
//
// A linear may be the row concatenation of several checkpoint modules (q/k/v -> qkv, gate/up -> gate_up): each
// part is decoded to a common form, then the parts are joined. Joining rules (why: weight_format.h has one
// format per matrix):
//   - per-tensor weight scales (W8A8 int8 / FP8 tensor strategy) that differ between parts are expanded to
//     per-channel scales [N] (exact: the stored codes are kept, nothing is requantized). FP8 stays per-tensor
//     when all parts share one scale (what per-tensor kernels want).
//   - static activation scales (input_scale) of parts that read the same input: the largest is used (no
//     clipping for any part, as vLLM does); a log line says so when they differ.
//   - int codes: symmetric parts get explicit zero points (2^(bits-1)) when another part has zero points.
//   - parts whose formats cannot be joined (mixed methods, different bits / group sizes / g_idx, one part
//     ignored) are all dequantized to f32 (HostLinear::note says why).
// Every tensor is checked against the shape and dtype its format implies; errors name the tensor and file.
//
// Formats produced (layouts: quant/weight_format.h): DenseFormat{kF32}; IntGroupFormat (GPTQ, AWQ,
// pack-quantized, naive/int-quantized weight-only; channel strategy = one group of K); Int8ChannelFormat
// (symmetric 8-bit per channel, weight-only); W8A8Int8Format; W8A8Fp8Format.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/core/status.h"
#include "xinfer/core/tensor.h"
#include "xinfer/model/model_config.h"
#include "xinfer/model/quantization_config.h"
#include "xinfer/model/safetensors.h"
#include "xinfer/quant/quantized_linear.h"
#include "xinfer/quant/weight_format.h"

namespace xinfer::model {

// A linear's weights on the host, in `format`. Tensors not used by the format are empty (no data).
// The result of one part list, before any tensor-parallel slicing: rows are output features (N), so a
// column-parallel slice is a row range of weight / scales / zeros; a row-parallel slice cuts K (and groups).
struct HostLinear {
  quant::WeightFormat format = quant::DenseFormat{DType::kF32};
  int64_t n = 0, k = 0;
  HostTensor weight;       // the format's layout, [N, K] dense f32 / [N, K] i8 / [N, K/2] u8 (int4) ...
  HostTensor scales;       // f32 [N, G] (groups), [N] (channel), [1] (FP8 per-tensor)
  HostTensor zeros;        // u8 [N, G] or empty
  HostTensor mins;         // f32 [N, G] (IntGroupFormat::min_offset) or empty
  HostTensor g_idx;        // i32 [K] or empty
  HostTensor input_perm;  // i32 [K] or empty: column j multiplies input column input_perm[j] (sort_act_order)
  HostTensor input_scale;  // f32 [1] (static activations) or empty
  std::string note;        // how it was repacked, for the log ("" when nothing to say)

  quant::QuantizedMatrix matrix() const;  // views over the tensors above
};

// One checkpoint module of a (possibly concatenated) linear: HF module name and its out_features.
struct LinearPart {
  std::string module;  // "model.layers.0.self_attn.q_proj"
  int64_t rows = 0;
};

// Reads the parts (each [rows, k]) as the checkpoint's quantization_config says and joins their rows.
Result<HostLinear> read_checkpoint_linear(const WeightFiles& files, const QuantizationConfig& qc,
                                          const std::vector<LinearPart>& parts, int64_t k);

// The float weights of `w`: DenseFormat{kF32}, weight f32 [N, K] (quant::dequantize_matrix).
HostLinear dequantize_linear(const HostLinear& w);

// GPTQ act order (a g_idx) sorted out at load: the packed weight's columns reordered so that group g is the
// columns [g * group, (g + 1) * group), `input_perm` recording which input column each stored column
// multiplies, the g_idx dropped. The scales and zero points are per group and do not move. Every kernel for
// groups of consecutive columns then takes the weight (with a g_idx the CPU dequantizes a row at a time and
// CUDA the whole weight at every batch size); the backend gathers x's columns by input_perm instead. Exact:
// the same codes, scales and zero points per (row, input column). Returns false and leaves `w` as it is when
// it has no g_idx or its groups are not all `group` columns (the last one the remainder of k).
bool sort_act_order(HostLinear& w);

// Puts `w` on the backend as it is (its format must be supports()ed; dense f32 is uploaded in `dense_dtype`).
struct UploadedLinear {
  backend::LinearWeights weights;
  std::vector<std::shared_ptr<backend::DeviceBuffer>> buffers;  // own the tensors in `weights`
  size_t bytes = 0;                                             // device bytes of all of them
};
UploadedLinear upload_linear(backend::Backend& backend, const HostLinear& w, DType dense_dtype);

// Whether a backend keeps an [n, k] linear in a format as it is (Backend::supports_linear).
using LinearSupported = std::function<bool(const quant::WeightFormat& f, int64_t n, int64_t k)>;

// Weight bytes the loader will put on a backend for this model: linears in the format their checkpoint
// implies (quant::format_weight_bytes) where `supported` says yes, else in `dense_dtype`; embedding, norms
// and an unquantized lm_head in `dense_dtype`. For the memory plan before loading. `linear_format`: every
// decoder linear in that format instead, the lm_head dense (dummy weights, `--quantization`).
size_t checkpoint_weight_bytes(const ModelConfig& c, DType dense_dtype, const LinearSupported& supported,
                               const std::optional<quant::WeightFormat>& linear_format = std::nullopt);
// Whether a backend prefers GGUF linears of a type repacked into int formats
// (Backend::prefers_repacked_gguf).
using RepackPreferred = std::function<bool(quant::GgufType type)>;

// The same for whatever `model_path` is: a `.gguf` file (every tensor as load_gguf_weights puts it: linears
// whose type gguf_repack.h repacks at their int size where `repack` says so, the model is not `sharded` and
// the backend runs the int format; other block formats kept where supported; the parts of a concatenated
// weight that differ in type (segments) each so unless `sharded`; the rest in `dense_dtype`),
// else checkpoint_weight_bytes(c, ...). `repack` empty: where the blocks are not supported. A GGUF that
// cannot be opened falls back to checkpoint_weight_bytes (the load reports the error).
size_t planned_weight_bytes(const std::string& model_path, const ModelConfig& c, DType dense_dtype,
                            const LinearSupported& supported,
                            const std::optional<quant::WeightFormat>& linear_format = std::nullopt,
                            bool sharded = false, const RepackPreferred& repack = {});

}  // namespace xinfer::model
