#include "xinfer/compress/model_quantizer.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "xinfer/compress/host_forward.h"
#include "xinfer/core/check.h"
#include "xinfer/core/logging.h"
#include "xinfer/core/progress_bar.h"

namespace xinfer::compress {

ModelQuantizer::ModelQuantizer(model::LlamaModel& model, backend::Backend& backend, QuantizeOptions options)
    : model_(model), backend_(backend), options_(std::move(options)) {}

Status ModelQuantizer::calibrate(const std::vector<std::vector<int32_t>>& windows, const QuantizeHooks& hooks) {
  CalibrationOptions co;
  co.hessian = options_.gptq && !options_.gptq_sequential;
  co.max_sample_rows = options_.max_sample_rows;
  for (const auto& w : windows) co.expected_tokens += static_cast<int64_t>(w.size());
  size_t need = CalibrationCollector::planned_bytes(model_.config(), co);
  if (options_.gptq && options_.gptq_sequential) {  // host_layer_forward's activations of every window at once
    const model::ModelConfig& c = model_.config();
    const int64_t per_token = 3 * c.hidden_size + (static_cast<int64_t>(c.num_heads) + 2 * c.num_kv_heads) * c.head_dim +
                              static_cast<int64_t>(c.num_heads) * c.head_dim + 3 * static_cast<int64_t>(c.intermediate_size);
    need += static_cast<size_t>(co.expected_tokens * per_token) * sizeof(float);
  }
  const size_t free_bytes = backend_.info().free_memory;
  if (free_bytes > 0 && need > free_bytes)
    return resource_exhausted("calibration statistics need " + std::to_string(need >> 20) + " MiB but only " +
                              std::to_string(free_bytes >> 20) + " MiB are free (fewer --calib-samples rows kept, or "
                              "--method rtn without the Hessians)");
  calib_ = std::make_shared<CalibrationCollector>(model_.config(), co);
  calib_->set_windows(windows);
  if (options_.kv_cache) {
    if (!hooks.window_kv) return invalid_argument("FP8 KV-cache scales need the calibration windows' KV cache");
    const model::ModelConfig& c = model_.config();
    kv_.emplace(c.num_layers, c.num_kv_heads, c.head_dim);
  }
  model_.set_observer(calib_.get());
  ProgressBar bar("Calibrating", static_cast<int64_t>(windows.size()), "windows", options_.progress);
  for (const auto& w : windows) {
    hooks.forward(w);
    if (kv_) kv_->observe(hooks.window_kv(), static_cast<int>(w.size()));
    bar.advance(1);
  }
  bar.finish();
  model_.set_observer(nullptr);
  return Status();
}

namespace {

// Relative output error of a site with its final (dequantized) weights on the calibration samples.
double final_site_error(const model::ModelConfig& c, const HostLinear& original, const HostLinear& smoothed,
                        model::LinearSite site, const SiteStats& st, const std::vector<QuantizedWeight>& modules,
                        const std::vector<float>& s, ActQuant act) {
  const int64_t m = st.sample_rows(), k = original.k, n = original.n;
  if (m == 0) return 0;
  std::vector<float> w(static_cast<size_t>(n * k));
  for (int mod = 0; mod < kNumModules; ++mod) {
    const ModuleRows mr = module_rows(c, mod);
    if (mr.site != site) continue;
    modules[static_cast<size_t>(mod)].dequantize(&w[static_cast<size_t>(mr.row_begin * k)]);
  }
  (void)original;
  // Reference: the smoothed float linear on the smoothed float inputs (its rows may be rescaled by the
  // o / down smoothing of the same layer, which the next linear undoes: compare like with like).
  std::vector<float> x = st.samples;
  if (!s.empty())
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j) x[static_cast<size_t>(r * k + j)] /= s[static_cast<size_t>(j)];
  std::vector<float> y0(static_cast<size_t>(m * n)), y(static_cast<size_t>(m * n));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f,
              x.data(), static_cast<int>(k), smoothed.w.data(), static_cast<int>(k), 0.0f, y0.data(), static_cast<int>(n));
  fake_quantize_rows(x.data(), m, k, act);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f,
              x.data(), static_cast<int>(k), w.data(), static_cast<int>(k), 0.0f, y.data(), static_cast<int>(n));
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = static_cast<double>(y[i]) - y0[i];
    num += d * d;
    den += static_cast<double>(y0[i]) * y0[i];
  }
  return den > 0 ? num / den : 0.0;
}

}  // namespace

Status ModelQuantizer::prepare() {
  XI_CHECK(calib_ != nullptr) << "prepare() before calibrate()";
  if (options_.gptq && !options_.gptq_sequential && calib_->stats(0, model::LinearSite::kQkv).hessian.empty())
    return invalid_argument("GPTQ needs a calibration with Hessians");
  const model::ModelConfig& c = model_.config();
  const int L = c.num_layers;
  const bool smooth = options_.smooth && quantizes_activations(options_.scheme.scheme);
  const WeightQuantArgs args = weight_args(options_.scheme);
  original_.resize(static_cast<size_t>(L));
  smoothed_.resize(static_cast<size_t>(L));
  modules_.assign(static_cast<size_t>(L), {});
  smooth_results_.assign(static_cast<size_t>(L), {});
  site_errors_.assign(static_cast<size_t>(L), {});
  const bool sequential = options_.gptq && options_.gptq_sequential;
  std::vector<int64_t> window_lens;
  std::vector<float> hidden;  // [T, H]: the calibration windows' residual stream at layer l's input
  if (sequential) {
    if (calib_->windows().empty()) return invalid_argument("true-sequential GPTQ needs the calibration windows");
    for (const auto& w : calib_->windows()) window_lens.push_back(static_cast<int64_t>(w.size()));
    const int64_t longest = *std::max_element(window_lens.begin(), window_lens.end());
    if (c.sliding_window && *c.sliding_window < longest)
      return invalid_argument("true-sequential GPTQ runs full attention; the model's sliding_window " +
                              std::to_string(*c.sliding_window) + " is shorter than a calibration window (" +
                              std::to_string(longest) + " tokens): use shorter --calib-len");
    hidden = embed_calibration();
  }
  ProgressBar bar(smooth ? (options_.smooth_options.alpha ? "Smoothing + quantizing" : "Alpha search + quantizing")
                         : (sequential ? "GPTQ (true-sequential)" : "Quantizing"),
                  L, "layers", options_.progress);
  for (int l = 0; l < L; ++l) {
    XI_ASSIGN_OR_RETURN(original_[static_cast<size_t>(l)], copy_layer(backend_, model_, l));
    if (options_.scheme.scheme == Scheme::kNone) {  // nothing to quantize: the layer is written as it is
      bar.advance(1);
      continue;
    }
    HostLayer work = original_[static_cast<size_t>(l)];
    std::array<std::vector<float>, kNumSites> factors;
    if (smooth)
      smooth_results_[static_cast<size_t>(l)] =
          smooth_layer(c, work, *calib_, l, options_.scheme, options_.smooth_options, &factors);
    std::vector<QuantizedWeight>& mods = modules_[static_cast<size_t>(l)];
    if (sequential) {
      // True-sequential GPTQ: the (smoothed) layer runs on the host over the calibration hidden states;
      // each site's modules are quantized from the Hessian of the input it actually gets, and the site
      // then runs with those weights (dequantized), so the next site and the next layer see them.
      mods.assign(static_cast<size_t>(kNumModules), QuantizedWeight{});
      std::array<std::vector<float>, kNumSites> deq;
      auto hook = [&](model::LinearSite site, const float* x, int64_t rows, int64_t k) -> const float* {
        std::vector<double> h(static_cast<size_t>(k * k), 0.0);
        add_outer_products(x, rows, k, h);
        const HostLinear& lin = linear_of(work, site);
        std::vector<float>& d = deq[static_cast<size_t>(site)];
        d.assign(static_cast<size_t>(lin.n * k), 0.0f);
        for (int m = 0; m < kNumModules; ++m) {
          const ModuleRows mr = module_rows(c, m);
          if (mr.site != site) continue;
          const std::vector<float> w = module_weight(c, work, m);
          mods[static_cast<size_t>(m)] = quantize_gptq(w.data(), mr.rows, k, h.data(), args, options_.gptq_options);
          mods[static_cast<size_t>(m)].dequantize(&d[static_cast<size_t>(mr.row_begin * k)]);
        }
        return d.data();
      };
      host_layer_forward(c, work, window_lens, hidden, hook, activation_quant(options_.scheme.scheme));
    }
    for (int m = 0; m < kNumModules && !sequential; ++m) {
      const ModuleRows mr = module_rows(c, m);
      const std::vector<float> w = module_weight(c, work, m);
      const int64_t k = linear_of(work, mr.site).k;
      if (options_.gptq) {
        const SiteStats& st = calib_->stats(l, mr.site);
        std::vector<double> h = st.hessian;
        const std::vector<float>& s = factors[static_cast<size_t>(mr.site)];
        if (!s.empty())
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) h[static_cast<size_t>(i * k + j)] /= static_cast<double>(s[static_cast<size_t>(i)]) * s[static_cast<size_t>(j)];
        mods.push_back(quantize_gptq(w.data(), mr.rows, k, h.data(), args, options_.gptq_options));
      } else {
        // MSE clip weights: sum_t x_tj^2 of the input this linear gets (x / s when smoothed).
        std::vector<double> cw = calib_->stats(l, mr.site).channel_sq;
        const std::vector<float>& s = factors[static_cast<size_t>(mr.site)];
        if (!s.empty())
          for (int64_t j = 0; j < k; ++j) cw[static_cast<size_t>(j)] /= static_cast<double>(s[static_cast<size_t>(j)]) * s[static_cast<size_t>(j)];
        mods.push_back(quantize_rtn(w.data(), mr.rows, k, args, cw.data()));
      }
    }
    for (int s = 0; s < kNumSites; ++s) {
      const auto site = static_cast<model::LinearSite>(s);
      site_errors_[static_cast<size_t>(l)][static_cast<size_t>(s)] =
          final_site_error(c, linear_of(original_[static_cast<size_t>(l)], site), linear_of(work, site), site,
                           calib_->stats(l, site), mods, factors[static_cast<size_t>(s)],
                           activation_quant(options_.scheme.scheme));
    }
    smoothed_[static_cast<size_t>(l)] = std::move(work);
    bar.advance(1);
  }
  bar.finish();
  applied_.assign(static_cast<size_t>(L), false);
  return Status();
}

std::vector<float> ModelQuantizer::embed_calibration() const {
  const backend::LinearWeights& embed = model_.embedding();
  XI_CHECK(embed.dense()) << "true-sequential GPTQ needs a dense embedding table (load the model dequantized)";
  const int64_t H = model_.config().hidden_size;
  std::vector<float> hidden;
  for (const auto& w : calib_->windows())
    for (int32_t t : w) {
      hidden.resize(hidden.size() + static_cast<size_t>(H));
      backend_.to_host_f32(embed.weight.rows(t, t + 1), &hidden[hidden.size() - static_cast<size_t>(H)]);
    }
  return hidden;
}

void ModelQuantizer::apply_layer(int l, bool quantized) {
  if (applied_[static_cast<size_t>(l)] == quantized) return;
  const model::ModelConfig& c = model_.config();
  UploadedLayer up = quantized ? upload_layer(backend_, c, smoothed_[static_cast<size_t>(l)],
                                              &modules_[static_cast<size_t>(l)], options_.scheme)
                               : upload_layer(backend_, c, original_[static_cast<size_t>(l)], nullptr, options_.scheme);
  model_.replace_layer(l, up.weights, std::move(up.buffers));
  applied_[static_cast<size_t>(l)] = quantized;
}

void ModelQuantizer::apply(const std::vector<bool>& quantized) {
  for (int l = 0; l < static_cast<int>(quantized.size()); ++l) apply_layer(l, quantized[static_cast<size_t>(l)]);
}

Status ModelQuantizer::select(const QuantizeHooks& hooks) {
  const int L = model_.config().num_layers;
  if (options_.scheme.scheme == Scheme::kNone) {  // no layer has a quantized form
    mask_.assign(static_cast<size_t>(L), false);
    return Status();
  }
  const LayerSelection& sel = options_.selection;
  std::vector<int> order;
  if (sel.needs_sensitivity()) {
    if (!hooks.heldout_ppl) return invalid_argument("layer sensitivity needs held-out text");
    apply(std::vector<bool>(static_cast<size_t>(L), false));
    baseline_ppl_ = hooks.heldout_ppl();
    sensitivity_.assign(static_cast<size_t>(L), 0.0);
    ProgressBar bar("Layer sensitivity", L, "layers", options_.progress);
    for (int l = 0; l < L; ++l) {
      apply_layer(l, true);
      sensitivity_[static_cast<size_t>(l)] = 100.0 * (hooks.heldout_ppl() / baseline_ppl_ - 1.0);
      apply_layer(l, false);
      bar.advance(1);
    }
    bar.finish();
    order = order_by_sensitivity(sensitivity_);
  }
  LayerSelection chosen = sel;
  if (sel.mode == LayerSelection::Mode::kSearch) {
    // Largest n whose n least sensitive layers stay within the budget (binary search; n = 0 always fits).
    auto increase_with = [&](int n) {
      LayerSelection s = sel;
      s.count = n;
      apply(selection_mask(s, L, order));
      const double inc = 100.0 * (hooks.heldout_ppl() / baseline_ppl_ - 1.0);
      XI_LOG(INFO) << "quantize search: " << n << " least sensitive layers -> held-out PPL +" << inc << "%";
      return inc;
    };
    int lo = 0, hi = L;
    if (increase_with(L) <= sel.max_ppl_increase) {
      lo = L;
    } else {
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (increase_with(mid) <= sel.max_ppl_increase) lo = mid;
        else hi = mid;
      }
    }
    chosen.count = lo;
  }
  mask_ = selection_mask(chosen, L, order);
  apply(mask_);
  if (hooks.heldout_ppl && sel.needs_sensitivity()) selected_ppl_ = hooks.heldout_ppl();
  return Status();
}

namespace {

int64_t layer_linear_macs(const model::ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, q = static_cast<int64_t>(c.num_heads) * c.head_dim,
                kv = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  return (q + 2 * kv) * H + H * q + 2 * I * H + H * I;
}

}  // namespace

double ModelQuantizer::decoder_flops_share() const {
  if (mask_.empty()) return 0;
  return static_cast<double>(std::count(mask_.begin(), mask_.end(), true)) / static_cast<double>(mask_.size());
}

double ModelQuantizer::all_linear_flops_share() const {
  const model::ModelConfig& c = model_.config();
  const double layer = static_cast<double>(layer_linear_macs(c));
  const double lm_head = static_cast<double>(c.vocab_size) * c.hidden_size;
  return decoder_flops_share() * layer * c.num_layers / (layer * c.num_layers + lm_head);
}

nlohmann::ordered_json ModelQuantizer::report() const {
  const model::ModelConfig& c = model_.config();
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (int l = 0; l < c.num_layers; ++l) {
    nlohmann::ordered_json j;
    j["layer"] = l;
    j["quantized"] = mask_.empty() ? false : static_cast<bool>(mask_[static_cast<size_t>(l)]);
    if (!sensitivity_.empty()) j["sensitivity_ppl_increase_percent"] = sensitivity_[static_cast<size_t>(l)];
    nlohmann::ordered_json groups;
    for (int s = 0; s < kNumSites; ++s) {
      const auto site = static_cast<model::LinearSite>(s);
      nlohmann::ordered_json g;
      const SiteStats& st = calib_->stats(l, site);
      g["act_outlier_ratio"] = st.outlier_ratio();
      g["act_max"] = st.channel_max.empty() ? 0.0f : *std::max_element(st.channel_max.begin(), st.channel_max.end());
      g["error"] = site_errors_[static_cast<size_t>(l)][static_cast<size_t>(s)];
      if (!smooth_results_.empty() && options_.smooth && quantizes_activations(options_.scheme.scheme)) {
        const SmoothGroupResult& r = smooth_results_[static_cast<size_t>(l)][static_cast<size_t>(s)];
        g["alpha"] = r.alpha < 0 ? nlohmann::ordered_json("none") : nlohmann::ordered_json(r.alpha);
        g["smooth_error"] = r.error;
        g["unsmoothed_error"] = r.error_unsmoothed;
        g["s_min"] = r.s_min;
        g["s_max"] = r.s_max;
      }
      groups[model::linear_site_name(site)] = g;
    }
    j["groups"] = groups;
    nlohmann::ordered_json mods = nlohmann::ordered_json::object();
    for (int m = 0; m < static_cast<int>(modules_[static_cast<size_t>(l)].size()); ++m) {
      const QuantizedWeight& q = modules_[static_cast<size_t>(l)][static_cast<size_t>(m)];
      mods[module_name(m)] = {{"scale_min", *std::min_element(q.scales.begin(), q.scales.end())},
                              {"scale_max", *std::max_element(q.scales.begin(), q.scales.end())}};
    }
    j["modules"] = mods;
    layers.push_back(j);
  }
  nlohmann::ordered_json r;
  r["scheme"] = scheme_name(options_.scheme.scheme);
  if (options_.scheme.scheme != Scheme::kNone) {  // how the weights were quantized
    r["method"] = options_.gptq ? "gptq" : "rtn";
    if (options_.gptq) {
      r["gptq_hessians"] = options_.gptq_sequential ? "true-sequential" : "float-model";
      r["gptq_damp"] = options_.gptq_options.damp;
      r["gptq_act_order"] = options_.gptq_options.act_order;
      if (options_.gptq_options.act_order) r["gptq_static_groups"] = options_.gptq_options.static_groups;
    }
    r["weight_strategy"] = granularity_name(weight_args(options_.scheme).granularity);
    r["weight_clip"] = weight_args(options_.scheme).mse_clip ? "mse" : "minmax";
  }
  if (options_.scheme.scheme == Scheme::kW4A16) {
    r["group_size"] = options_.scheme.group_size;
    r["symmetric"] = options_.scheme.symmetric;
  }
  r["smoothing"] = options_.smooth && quantizes_activations(options_.scheme.scheme)
                       ? (options_.smooth_options.alpha ? nlohmann::ordered_json(*options_.smooth_options.alpha)
                                                        : nlohmann::ordered_json("search"))
                       : nlohmann::ordered_json(nullptr);
  r["quantized_layers"] = static_cast<int>(std::count(mask_.begin(), mask_.end(), true));
  r["decoder_linear_flops_quantized"] = decoder_flops_share();
  r["all_linear_flops_quantized"] = all_linear_flops_share();
  if (!sensitivity_.empty()) {
    r["heldout_baseline_ppl"] = baseline_ppl_;
    r["heldout_selected_ppl"] = selected_ppl_;
  }
  if (kv_) r["kv_cache"] = kv_->report(*options_.kv_cache);
  r["layers"] = layers;
  return r;
}

Status ModelQuantizer::write(const std::string& out, bool overwrite, nlohmann::ordered_json config,
                             const ModelDirContents& extra) const {
  const model::ModelConfig& c = model_.config();
  SafetensorsWriter st;
  auto host = [&](const TensorView& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    backend_.to_host_f32(t, v.data());
    return v;
  };
  const backend::LinearWeights& embed = model_.embedding();
  if (!embed.dense()) return invalid_argument("the embedding table is not dense (load the model dequantized)");
  st.add_f32("model.embed_tokens.weight", embed.weight.shape, host(embed.weight));
  std::vector<std::string> ignore{"lm_head"};
  ProgressBar bar("Writing", c.num_layers, "layers", options_.progress);
  for (int l = 0; l < c.num_layers; ++l) {
    const bool q = mask_[static_cast<size_t>(l)];
    const HostLayer& layer = q ? smoothed_[static_cast<size_t>(l)] : original_[static_cast<size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t H = c.hidden_size;
    st.add_f32(p + "input_layernorm.weight", Shape{H}, layer.input_norm);
    st.add_f32(p + "post_attention_layernorm.weight", Shape{H}, layer.post_attention_norm);
    if (!layer.q_norm.empty()) {
      st.add_f32(p + "self_attn.q_norm.weight", Shape{c.head_dim}, layer.q_norm);
      st.add_f32(p + "self_attn.k_norm.weight", Shape{c.head_dim}, layer.k_norm);
    }
    for (int m = 0; m < kNumModules; ++m) {
      const ModuleRows mr = module_rows(c, m);
      const HostLinear& lin = linear_of(layer, mr.site);
      const std::string name = p + module_name(m);
      if (!lin.bias.empty())
        st.add_f32(name + ".bias", Shape{mr.rows},
                   std::vector<float>(lin.bias.begin() + mr.row_begin, lin.bias.begin() + mr.row_begin + mr.rows));
      if (q) {
        add_quantized_module(st, name, modules_[static_cast<size_t>(l)][static_cast<size_t>(m)], options_.scheme);
      } else {
        st.add_f32(name + ".weight", Shape{mr.rows, lin.k}, module_weight(c, layer, m));
        ignore.push_back(name);
      }
    }
    bar.advance(1);
  }
  bar.finish();
  nlohmann::ordered_json kv_scheme = nullptr;
  if (kv_) {  // compressed-tensors' shapes: [] per tensor, [Hkv, 1, 1] per head (attn_head)
    const KvScaleStrategy s = *options_.kv_cache;
    const std::vector<float> ks = kv_->k_scales(s), vs = kv_->v_scales(s);
    const int per = s == KvScaleStrategy::kTensor ? 1 : c.num_kv_heads;
    const Shape shape = s == KvScaleStrategy::kTensor ? Shape{} : Shape{c.num_kv_heads, 1, 1};
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      const auto first = static_cast<std::ptrdiff_t>(l) * per;
      st.add_f32(p + "k_scale", shape, std::vector<float>(ks.begin() + first, ks.begin() + first + per));
      st.add_f32(p + "v_scale", shape, std::vector<float>(vs.begin() + first, vs.begin() + first + per));
    }
    kv_scheme = KvScaleCollector::scheme_json(s);
  }
  st.add_f32("model.norm.weight", Shape{c.hidden_size}, host(model_.final_norm()));
  if (!c.tie_word_embeddings) {
    const backend::LinearWeights& lm = model_.lm_head();
    if (!lm.dense()) return invalid_argument("lm_head is not dense (load the model dequantized)");
    st.add_f32("lm_head.weight", lm.weight.shape, host(lm.weight));
  }
  config["torch_dtype"] = "float32";
  if (config.contains("dtype")) config["dtype"] = "float32";
  // actorder only with group scales: compressed-tensors' QuantizationArgs refuses it for any other strategy
  // ("Must use group ... strategy in order to apply activation ordering"), and a per-channel / per-tensor GPTQ
  // with act-order needs nothing at load time (its values are in the original column order).
  const char* actorder = !options_.gptq || !options_.gptq_options.act_order || options_.scheme.scheme != Scheme::kW4A16
                             ? nullptr
                         : options_.gptq_options.static_groups ? "weight"
                                                               : "group";
  config["quantization_config"] = quantization_config(options_.scheme, actorder, ignore, kv_scheme);
  ModelDirContents contents = extra;
  contents.config = config;
  return write_model_dir(out, overwrite, st, contents);
}

}  // namespace xinfer::compress
