// ModelQuantizer: the whole of `xinfer quantize` between loading and writing, on a model loaded with dense
// f32 weights on a (CPU) backend:
//
//   1. calibrate(): forward over the calibration windows with a CalibrationCollector observing every linear
//   2. prepare():   per layer, a host copy of the original weights; for W8A8 with smoothing, SmoothQuant
//                   factors (fixed alpha or searched per group) folded into a second copy; every module
//                   quantized: RTN, or GPTQ on the smoothed weights, true-sequential by default (the layer
//                   run on the host from the calibration windows' hidden states, each linear quantized from
//                   its input's Hessian before the next linear runs; the next layer's input is this
//                   layer's quantized output), or from the float pass's Hessians, H' = diag(1/s) H diag(1/s)
//   3. select():    the layers to quantize (layer_selection.h); sensitivity and the search measure the
//                   held-out PPL through `Hooks::heldout_ppl` with candidate layers swapped in place
//                   (LlamaModel::replace_layer)
//   4. the model is left with the selection applied (quantized layers in xinfer's formats, others dense),
//      so the caller can evaluate exactly what is written; write() writes the compressed-tensors directory.
// With QuantizeOptions::kv_cache, calibrate() also records the KV cache's largest values (kv_scales.h) and write()
// adds the FP8 KV-cache scales. Scheme none quantizes no weight (a checkpoint for the KV scales alone).
// The per-layer report (report()) holds, per smoothing group: alpha, s range, relative quantized-output
// error (chosen and unsmoothed), activation outlier ratio; per layer: sensitivity, quantized or kept; per
// module: scale range.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/backend/backend.h"
#include "xinfer/compress/calibration.h"
#include "xinfer/compress/compressed_tensors_writer.h"
#include "xinfer/compress/gptq.h"
#include "xinfer/compress/host_layer.h"
#include "xinfer/compress/kv_scales.h"
#include "xinfer/compress/layer_selection.h"
#include "xinfer/compress/scheme.h"
#include "xinfer/compress/smooth_quant.h"
#include "xinfer/model/llama.h"

namespace xinfer::compress {

struct QuantizeOptions {
  SchemeOptions scheme;
  bool gptq = false;
  GptqOptions gptq_options;
  // GPTQ's true-sequential order: each linear's Hessian from the inputs produced by the already-quantized
  // earlier linears (host_forward.h); false: every Hessian from the float model's calibration pass.
  bool gptq_sequential = true;
  bool smooth = true;  // W8A8 only
  SmoothOptions smooth_options;
  LayerSelection selection;
  int64_t max_sample_rows = 256;
  bool progress = true;
  // --kv-cache-scheme fp8: FP8 KV-cache scales calibrated on the calibration windows (kv_scales.h), written with
  // the weights (QuantizeHooks::window_kv must be set).
  std::optional<KvScaleStrategy> kv_cache;
};

struct QuantizeHooks {
  // Runs one calibration window (tokens at positions 0..n-1) through the model; logits unused.
  std::function<void(std::span<const int32_t>)> forward;
  // The KV cache the last forward() wrote (host f32; positions as engine::WindowLogits lays them out), for the
  // FP8 KV-cache scales; needed with QuantizeOptions::kv_cache only.
  std::function<const backend::KvCache&()> window_kv;
  // Held-out perplexity of the model as it is now (needed for sensitivity and search only).
  std::function<double()> heldout_ppl;
};

class ModelQuantizer {
 public:
  ModelQuantizer(model::LlamaModel& model, backend::Backend& backend, QuantizeOptions options);

  Status calibrate(const std::vector<std::vector<int32_t>>& windows, const QuantizeHooks& hooks);
  // Several quantizations of one model (the accuracy table) share one calibration: take another
  // quantizer's (its Hessians are there if that one was made with gptq).
  std::shared_ptr<CalibrationCollector> calibration() const { return calib_; }
  void set_calibration(std::shared_ptr<CalibrationCollector> c) { calib_ = std::move(c); }
  // Puts the original dense layers back into the model (after prepare()).
  void restore() { apply(std::vector<bool>(applied_.size(), false)); }
  Status prepare();
  Status select(const QuantizeHooks& hooks);
  // Another layer selection for the same prepared quantization (then select() again).
  void set_selection(const LayerSelection& s) { options_.selection = s; }
  // Applies a mask (true: quantized) to the in-memory model.
  void apply(const std::vector<bool>& quantized);

  const std::vector<bool>& quantized_layers() const { return mask_; }
  // Share of the decoder layers' linear multiply-adds that run quantized, and of all linears (with lm_head).
  double decoder_flops_share() const;
  double all_linear_flops_share() const;
  nlohmann::ordered_json report() const;
  // Writes the compressed-tensors directory: `config` is config.json without quantization_config.
  Status write(const std::string& out, bool overwrite, nlohmann::ordered_json config,
               const ModelDirContents& extra) const;

 private:
  void apply_layer(int l, bool quantized);
  // Hidden states [T, H] of the calibration windows after the embedding (true-sequential GPTQ's input).
  std::vector<float> embed_calibration() const;

  model::LlamaModel& model_;
  backend::Backend& backend_;
  QuantizeOptions options_;
  std::shared_ptr<CalibrationCollector> calib_;
  std::optional<KvScaleCollector> kv_;  // QuantizeOptions::kv_cache
  std::vector<HostLayer> original_, smoothed_;            // [layer]
  std::vector<std::vector<QuantizedWeight>> modules_;     // [layer][module]
  std::vector<std::array<SmoothGroupResult, kNumSites>> smooth_results_;
  std::vector<std::array<double, kNumSites>> site_errors_;  // final quantized-output error per site
  std::vector<double> sensitivity_;  // held-out PPL increase (%) with only that layer quantized
  double baseline_ppl_ = 0, selected_ppl_ = 0;
  std::vector<bool> mask_;
  std::vector<bool> applied_;  // what the in-memory model holds now
};

}  // namespace xinfer::compress
