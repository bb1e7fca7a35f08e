// `xinfer quantize`: a float model (Hugging Face directory, or a GGUF file dequantized at load) -> a
// compressed-tensors checkpoint (compress/compressed_tensors_writer.h) in one of the schemes w8a8-int8
// (SmoothQuant), w8a8-fp8, w8a16, w4a16, by round-to-nearest or GPTQ, on the CPU backend.
//
//   xinfer quantize --model M --scheme w8a8-int8 --calib FILE --out DIR [--alpha search|A|none]
//                   [--weight-scales channel|tensor] [--method rtn|gptq] [--act-order] [--group-size G]
//                   [--weight-clip minmax|mse]
//                   [--quantized-layers all|N|first:N|last:N|LIST | --max-ppl-increase P]
//                   [--eval-text FILE --eval-tokens N] [--report FILE] [--overwrite]
//
// Calibration: the calibration file is tokenized (no special tokens added) and cut into --calib-samples
// consecutive windows of --calib-len tokens from its start; the layer search measures perplexity on the
// next --heldout-tokens tokens (windows of --calib-len), which calibration never saw. --eval-text scores
// the in-memory result (exactly the weights written) against the unquantized model (PPL, KL, top-1) on the
// first --eval-tokens tokens of another text, windows of --eval-ctx. stdout: one JSON summary line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/cli/command.h"
#include "xinfer/cli/flags.h"
#include "xinfer/compress/compressed_tensors_writer.h"
#include "xinfer/compress/model_quantizer.h"
#include "xinfer/core/logging.h"
#include "xinfer/engine/backend_factory.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/perplexity.h"
#include "xinfer/model/gguf_config.h"
#include "xinfer/model/gguf_file.h"
#include "xinfer/model/gguf_tokenizer.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/model_config.h"

namespace xinfer::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

Result<std::string> read_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(std::string("cannot open ") + flag + " " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) return invalid_argument(std::string(flag) + " " + path + " is empty");
  return text;
}

// The model's config.json as written, or NOT a float model: INVALID_ARGUMENT for a quantized checkpoint.
Result<json> source_config(const std::string& model_path, const model::ModelConfig& mc) {
  if (model::is_gguf_path(model_path)) return compress::config_json_from(mc);
  const std::string p = model_path + "/config.json";
  XI_ASSIGN_OR_RETURN(std::string text, read_file(p, "--model"));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument(p + ": not valid JSON");
  if (j.contains("quantization_config")) {
    const json& q = j["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? q["quant_method"].get<std::string>()
                                   : "?";
    return invalid_argument("model " + model_path + " is already quantized (" + p +
                            ": quantization_config.quant_method \"" + method + "\"); quantize a float model");
  }
  return j;
}

Result<compress::ModelDirContents> tokenizer_files(const std::string& model_path) {
  compress::ModelDirContents c;
  if (model::is_gguf_path(model_path)) {
    XI_ASSIGN_OR_RETURN(model::GgufFile file, model::GgufFile::open(model_path));
    XI_ASSIGN_OR_RETURN(model::GgufTokenizerJson tj, model::gguf_tokenizer_json(file));
    c.text_files.push_back({"tokenizer.json", tj.tokenizer.dump()});
    c.text_files.push_back({"tokenizer_config.json", tj.config.dump(2)});
    return c;
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "chat_template.jinja", "tokenizer.model"}) {
    const fs::path p = fs::path(model_path) / name;
    if (fs::exists(p)) c.copy_files.push_back(p.string());
  }
  return c;
}

// The accuracy table of docs/PERF.md: one calibration (with Hessians), then per row a quantization of the
// same model scored on the evaluation tokens against the unquantized model; the model is restored between
// rows. Rows (base options from the command line: sample rows, damp, group size; P = --max-ppl-increase):
//   w8a8-naive         w8a8-int8, channel weights, no smoothing
//   sq-0.5-tensor      alpha 0.5, per-tensor weight scales
//   sq-0.5-channel     alpha 0.5, per-channel
//   sq-search          alpha searched per group (per-channel)
//   sq-search-partial  + layers searched under P; then sq-first-N / sq-last-N with the same N
//   sq-search-gptq     sq-search with GPTQ weights
//   fp8-naive, fp8-sq  w8a8-fp8 without / with the alpha search
//   w8a16              int8 per channel RTN
//   fp8-sq-gptq        fp8-sq with GPTQ (error-compensated) FP8 weights
//   fp8-sq-partial, fp8-sq-gptq-partial  fp8-sq / fp8-sq-gptq with the layers searched under P
//   fp8-sq-gptq-actorder, fp8-sq-gptq-actorder-partial  fp8-sq-gptq with act-order (+ layers under P)
//   fp8-sq-mse[-partial], fp8-sq-gptq-actorder-mse[-partial]  the same with the FP8 scale search
//                      (--weight-clip mse: the max's place in e4m3's top binade, weight_quantizer.h)
//   w4a16-rtn, w4a16-gptq  int4 per group (symmetric), RTN / GPTQ (Hessians as --gptq-hessians, default
//                      true-sequential); w4a16-gptq-float: Hessians of the float model; -actorder: act-order
//                      with static groups; -actorder-gidx: act-order groups with g_idx; w4a16-rtn-mse,
//                      w4a16-gptq-mse, w4a16-gptq-actorder-mse: the same with the MSE clip search of the
//                      group scales (weight_quantizer.h)
// GPTQ rows take --damp and --act-order from the command line (the -float / -actorder rows override theirs).
// Without evaluation tokens the rows are not scored; `write_row` (if set: --table-out) writes each row's
// checkpoint, exactly what --out would write for it.
int run_table(const std::string& spec, const compress::QuantizeOptions& base, double max_ppl_increase,
              model::LlamaModel& m, backend::Backend& backend, const std::vector<std::vector<int32_t>>& windows,
              const compress::QuantizeHooks& hooks, engine::WindowLogits& runner, engine::WindowLogits& ref_runner,
              const std::vector<int32_t>& eval_ids, int eval_ctx, const std::string& report_path,
              const std::string& model_path, const std::string& calib_path, bool progress, int threads,
              const std::function<Status(const compress::ModelQuantizer&, const std::string&)>& write_row) {
  using compress::Granularity;
  using compress::LayerSelection;
  using compress::Scheme;
  const int64_t widths[] = {m.config().hidden_size, static_cast<int64_t>(m.config().num_heads) * m.config().head_dim,
                            m.config().intermediate_size};
  bool w4_ok = true;
  for (int64_t w : widths) w4_ok = w4_ok && w % base.scheme.group_size == 0;
  const std::vector<std::string> all = {"w8a8-naive", "sq-0.5-tensor", "sq-0.5-channel", "sq-search",
                                        "sq-search-partial", "sq-first-N", "sq-last-N", "sq-search-gptq",
                                        "fp8-naive", "fp8-sq", "fp8-sq-gptq", "fp8-sq-partial",
                                        "fp8-sq-gptq-partial", "fp8-sq-gptq-actorder", "fp8-sq-gptq-actorder-partial",
                                        "fp8-sq-mse", "fp8-sq-mse-partial", "fp8-sq-gptq-actorder-mse",
                                        "fp8-sq-gptq-actorder-mse-partial",
                                        "w8a16", "w4a16-rtn", "w4a16-gptq",
                                        "w4a16-gptq-float", "w4a16-gptq-actorder", "w4a16-gptq-actorder-gidx",
                                        "w4a16-rtn-mse", "w4a16-gptq-mse", "w4a16-gptq-actorder-mse"};
  std::vector<std::string> rows;
  if (spec == "all") {
    rows = all;
  } else {
    std::stringstream ss(spec);
    std::string r;
    while (std::getline(ss, r, ','))
      if (std::find(all.begin(), all.end(), r) != all.end()) rows.push_back(r);
      else {
        std::fprintf(stderr, "xinfer quantize: unknown --table row '%s'\n", r.c_str());
        return 1;
      }
  }
  engine::PerplexityOptions po;
  po.ctx = eval_ctx;
  po.stride = eval_ctx;
  po.show_progress = progress;
  po.threads = threads;
  // The reference's scored logits rows are kept (up to 4 GiB: 21k tokens of a 49k vocabulary) so that
  // each row runs only its own model; the figures equal those with the reference run again.
  const bool keep_ref = static_cast<double>(eval_ids.size()) * ref_runner.vocab_size() * sizeof(float) <= 4.0 * (1ull << 30);
  engine::RecordedLogits ref_logits;
  const bool score = !eval_ids.empty();
  engine::PerplexityResult base_res;
  json table = json::array();
  if (score) {
    auto r = engine::evaluate_perplexity(ref_runner, nullptr, eval_ids, po, keep_ref ? &ref_logits : nullptr);
    if (!r.ok()) return 1;
    base_res = std::move(*r);
    table.push_back({{"row", "baseline"}, {"ppl", base_res.ppl()}, {"tokens_scored", base_res.tokens_scored}});
    std::printf("%s\n", table.back().dump().c_str());
    std::fflush(stdout);
  }
  const std::vector<double> base_nll = base_res.window_mean_nll();

  compress::QuantizeOptions calib_opts = base;
  calib_opts.gptq = true;  // the float model's Hessians for the *-float GPTQ rows
  calib_opts.gptq_sequential = false;
  compress::ModelQuantizer calibrator(m, backend, calib_opts);
  if (Status s = calibrator.calibrate(windows, hooks); !s.ok()) return 1;
  int searched_n = -1;
  std::unique_ptr<compress::ModelQuantizer> q;
  std::string prepared;  // what q holds: rows differing only in the layer selection share it
  for (const std::string& row : rows) {
    if (row.rfind("w4a16", 0) == 0 && !w4_ok) {
      std::fprintf(stderr, "xinfer quantize: --table row %s skipped: no group size divides every input width\n",
                   row.c_str());
      continue;
    }
    compress::QuantizeOptions o = base;
    o.gptq = false;
    o.smooth = true;
    o.smooth_options.alpha.reset();
    o.scheme.weight_granularity = Granularity::kChannel;
    o.selection = LayerSelection{};
    if (row == "w8a8-naive" || row == "fp8-naive") o.smooth = false;
    if (row == "sq-0.5-tensor" || row == "sq-0.5-channel") o.smooth_options.alpha = 0.5;
    if (row == "sq-0.5-tensor") o.scheme.weight_granularity = Granularity::kTensor;
    o.scheme.scheme = row.rfind("fp8", 0) == 0 ? Scheme::kW8A8Fp8
                      : row == "w8a16"         ? Scheme::kW8A16
                      : row.rfind("w4a16", 0) == 0 ? Scheme::kW4A16
                                                   : Scheme::kW8A8Int8;
    if (row == "sq-search-gptq" || row.rfind("fp8-sq-gptq", 0) == 0 || row.rfind("w4a16-gptq", 0) == 0) o.gptq = true;
    if (row == "w4a16-gptq-float") o.gptq_sequential = false;
    if (row.rfind("w4a16-gptq-actorder", 0) == 0 || row.rfind("fp8-sq-gptq-actorder", 0) == 0)
      o.gptq_options.act_order = true;
    if (row == "w4a16-gptq-actorder-gidx") o.gptq_options.static_groups = false;
    o.scheme.mse_clip = row.find("-mse") != std::string::npos;
    if (row == "sq-search-partial" || (row.rfind("fp8-sq", 0) == 0 && row.size() > 8 &&
                                       row.compare(row.size() - 8, 8, "-partial") == 0)) {
      o.selection.mode = LayerSelection::Mode::kSearch;
      o.selection.max_ppl_increase = max_ppl_increase;
    }
    if (row == "sq-first-N" || row == "sq-last-N") {
      if (searched_n < 0) {
        std::fprintf(stderr, "xinfer quantize: --table %s needs sq-search-partial before it\n", row.c_str());
        return 1;
      }
      o.selection.mode = row == "sq-first-N" ? LayerSelection::Mode::kFirst : LayerSelection::Mode::kLast;
      o.selection.count = searched_n;
    }
    const std::string key = std::string(compress::scheme_name(o.scheme.scheme)) + (o.smooth ? "s" : "n") +
                            (o.smooth_options.alpha ? std::to_string(*o.smooth_options.alpha) : "search") +
                            compress::granularity_name(o.scheme.weight_granularity) + (o.scheme.mse_clip ? "mse" : "") +
                            (o.gptq ? std::string("gptq") + (o.gptq_sequential ? "seq" : "float") +
                                          (o.gptq_options.act_order ? "act" : "") +
                                          (o.gptq_options.static_groups ? "" : "gidx")
                                    : std::string("rtn"));
    if (!q || key != prepared) {
      if (q) q->restore();
      q = std::make_unique<compress::ModelQuantizer>(m, backend, o);
      q->set_calibration(calibrator.calibration());
      if (Status s = q->prepare(); !s.ok()) return 1;
      prepared = key;
    } else {
      q->set_selection(o.selection);
    }
    if (Status s = q->select(hooks); !s.ok()) return 1;
    const json rep = q->report();
    if (row == "sq-search-partial") searched_n = rep["quantized_layers"].get<int>();
    json line = {{"row", row},
                 {"scheme", rep["scheme"]},
                 {"quantized_layers", rep["quantized_layers"]},
                 {"decoder_linear_flops_quantized", rep["decoder_linear_flops_quantized"]},
                 {"all_linear_flops_quantized", rep["all_linear_flops_quantized"]}};
    if (score) {
      auto r = keep_ref ? engine::evaluate_perplexity(runner, nullptr, eval_ids, po, nullptr, &ref_logits)
                        : engine::evaluate_perplexity(runner, &ref_runner, eval_ids, po);
      if (!r.ok()) return 1;
      line["ppl"] = r->ppl();
      line["ppl_increase_percent"] = 100.0 * (r->ppl() / base_res.ppl() - 1.0);
      line["kl"] = r->mean_kl();
      line["top1"] = r->top1();
      // Paired over windows (engine::paired_ppl_increase): the spread of the row's PPL increase.
      if (auto inc = engine::paired_ppl_increase(r->window_mean_nll(), base_nll); inc.ok()) {
        line["ppl_increase_se_percent"] = inc->se_percent;
        line["window_ppl_increase_percent"] = inc->window_percent;
      }
    }
    if (rep.contains("heldout_selected_ppl")) line["heldout_ppl_increase_percent"] =
        100.0 * (rep["heldout_selected_ppl"].get<double>() / rep["heldout_baseline_ppl"].get<double>() - 1.0);
    std::vector<int> kept;
    for (const auto& l : rep["layers"])
      if (!l["quantized"].get<bool>()) kept.push_back(l["layer"].get<int>());
    line["kept_layers"] = kept;
    if (write_row) {
      if (Status st = write_row(*q, row); !st.ok()) {
        std::fprintf(stderr, "xinfer quantize: --table-out row %s: %s\n", row.c_str(), st.to_string().c_str());
        return 1;
      }
    }
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    json full = line;
    full["report"] = rep;
    table.push_back(full);
  }
  if (q) q->restore();
  if (!report_path.empty()) {
    std::ofstream f(report_path);
    f << json{{"model", model_path}, {"calib", calib_path}, {"eval_tokens", eval_ids.size()}, {"eval_ctx", eval_ctx},
              {"rows", table}}.dump(1) << "\n";
  }
  return 0;
}

int run_quantize(int argc, char** argv) {
  std::string model_path, scheme_name = "w8a8-int8", calib_path, out, method = "rtn", alpha = "search",
                          weight_scales = "channel", weight_clip = "minmax", layers_spec = "all", report_path, eval_path;
  int64_t calib_samples = 32, calib_len = 256, heldout_tokens = 1024, eval_tokens = 2048, sample_rows = 256;
  int group_size = 128, eval_ctx = 512, threads = 0;
  double max_ppl_increase = -1, damp = 0.01;
  bool static_groups = true;
  bool overwrite = false, act_order = false, symmetric = true, progress = true;
  std::string table_rows, table_out, gptq_hessians = "sequential", kv_cache_scheme = "none",
                                     kv_cache_strategy = "tensor";
  FlagSet flags("xinfer quantize",
                "Quantize a float model into a compressed-tensors checkpoint, on the CPU.\n"
                "Schemes: w8a8-int8 (SmoothQuant: int8 per-channel weights, dynamic per-token int8 activations),\n"
                "w8a8-fp8 (e4m3 per-channel weights, dynamic per-token e4m3 activations), w8a16 (int8 per\n"
                "channel), w4a16 (int4 per group), none (weights as they are: with --kv-cache-scheme fp8, a\n"
                "checkpoint of FP8 KV-cache scales alone). A .gguf model is dequantized to float first.\n"
                "Example: xinfer quantize --model m.gguf --scheme w8a8-int8 --calib wiki.valid.txt --out q8");
  flags.add("--model", &model_path, "float model: Hugging Face directory or .gguf file");
  flags.add("--scheme", &scheme_name, "w8a8-int8 | w8a8-fp8 | w8a16 | w4a16 | none");
  flags.add("--kv-cache-scheme", &kv_cache_scheme,
            "none, or fp8: also calibrate FP8 (e4m3) KV-cache scales (max |k| and |v| over the calibration windows "
            "/ 448; k covering the plain and the Hadamard-rotated keys) and write them as compressed-tensors' "
            "kv_cache_scheme with self_attn.k_scale / v_scale, read by `serve --kv-cache-dtype fp8` (and vLLM)");
  flags.add("--kv-cache-strategy", &kv_cache_strategy,
            "fp8 KV-cache scales: tensor (one per layer for K and for V) or attn_head (one per KV head)");
  flags.add("--calib", &calib_path, "calibration text (UTF-8)");
  flags.add("--calib-samples", &calib_samples, "calibration windows");
  flags.add("--calib-len", &calib_len, "tokens per calibration window");
  flags.add("--out", &out, "output directory (written as a temporary directory, renamed at the end)");
  flags.add("--overwrite", &overwrite, "replace --out if it exists");
  flags.add("--method", &method, "rtn (round to nearest) or gptq");
  flags.add("--act-order", &act_order, "GPTQ: columns in decreasing Hessian diagonal order (static groups)");
  flags.add("--static-groups", &static_groups,
            "GPTQ --act-order with groups: parameters from the original weights in column order (actorder "
            "\"weight\"); --no-static-groups: groups in act order, written with g_idx (actorder \"group\")");
  flags.add("--damp", &damp, "GPTQ: dampening, fraction of the mean Hessian diagonal");
  flags.add("--gptq-hessians", &gptq_hessians,
            "GPTQ: sequential (each linear's Hessian from the outputs of the already-quantized earlier linears "
            "and layers, run on the host) or float (all from the float model's calibration pass)");
  flags.add("--group-size", &group_size,
            "w4a16 group size (32, 64, 128); halved until it divides every input width (else a shorter last group)");
  flags.add("--symmetric", &symmetric, "w4a16: symmetric (--no-symmetric: zero points)");
  flags.add("--alpha", &alpha, "W8A8 smoothing: search (per group, grid 0.05), a fixed alpha in [0, 1], or none");
  flags.add("--weight-scales", &weight_scales, "W8A8 weight scales: channel or tensor");
  flags.add("--weight-clip", &weight_clip,
            "weight scales: minmax (the block's max) or mse (integers: the clip ratio per block; fp8: where the "
            "max falls in e4m3's top binade, 16 steps; searched minimising the squared error weighted by the "
            "calibration inputs' sum x^2 per column)");
  flags.add("--quantized-layers", &layers_spec, "all | N (least sensitive) | first:N | last:N | LIST (0,3,5-9)");
  flags.add("--max-ppl-increase", &max_ppl_increase,
            "percent: quantize the most layers (least sensitive first) within this held-out PPL increase");
  flags.add("--heldout-tokens", &heldout_tokens, "held-out calibration tokens for sensitivity and search");
  flags.add("--sample-rows", &sample_rows, "calibration rows kept per linear for the alpha search / errors");
  flags.add("--report", &report_path, "per-layer JSON report (default: OUT/quantization_report.json)");
  flags.add("--eval-text", &eval_path, "score the result against the unquantized model on this text");
  flags.add("--eval-tokens", &eval_tokens, "tokens of --eval-text scored (its first N)");
  flags.add("--eval-ctx", &eval_ctx, "window length for --eval-text (stride = ctx)");
  flags.add("--table", &table_rows,
            "accuracy table: quantize the model once per listed row (comma-separated names, or 'all') from one "
            "calibration and score each with --eval-text; writes nothing but --report and --table-out "
            "(docs/quantize.md)");
  flags.add("--table-out", &table_out,
            "with --table: write each row's checkpoint to DIR/ROW (what --out writes for it), e.g. to score "
            "them with `xinfer eval ppl --backend cuda`; DIR must not exist unless --overwrite");
  flags.add("--threads", &threads, "CPU threads; 0 = all cores");
  flags.add("--progress", &progress, "progress bars (stderr)");
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "xinfer quantize: %s\n", s.to_string().c_str());
    return 1;
  };

  // Every argument is checked before the model loads.
  if (model_path.empty()) return fail(invalid_argument("--model is required"));
  if (calib_path.empty()) return fail(invalid_argument("--calib is required"));
  auto scheme = compress::parse_scheme(scheme_name);
  if (!scheme.ok()) return fail(scheme.status());
  if (out.empty() && eval_path.empty() && table_out.empty()) return fail(invalid_argument("--out is required"));
  if (!table_rows.empty() && eval_path.empty() && table_out.empty())
    return fail(invalid_argument("--table needs --eval-text or --table-out"));
  if (!table_out.empty() && table_rows.empty()) return fail(invalid_argument("--table-out needs --table"));
  if (!table_out.empty() && !out.empty()) return fail(invalid_argument("give --out or --table-out, not both"));
  if (std::error_code ec; !table_out.empty() && fs::exists(table_out, ec) && !overwrite)
    return fail(invalid_argument("--table-out " + table_out + " already exists (use --overwrite to replace its rows)"));
  if (!out.empty())
    if (Status s = compress::check_output_dir(out, overwrite); !s.ok()) return fail(s);
  if (method != "rtn" && method != "gptq")
    return fail(invalid_argument("--method must be rtn or gptq, got '" + method + "'"));
  if (gptq_hessians != "sequential" && gptq_hessians != "float")
    return fail(invalid_argument("--gptq-hessians must be sequential or float, got '" + gptq_hessians + "'"));
  if (weight_clip != "minmax" && weight_clip != "mse")
    return fail(invalid_argument("--weight-clip must be minmax or mse, got '" + weight_clip + "'"));
  if (weight_scales != "channel" && weight_scales != "tensor")
    return fail(invalid_argument("--weight-scales must be channel or tensor, got '" + weight_scales + "'"));
  if (calib_samples <= 0 || calib_len < 2) return fail(invalid_argument("--calib-samples must be > 0 and --calib-len >= 2"));
  if (kv_cache_scheme != "none" && kv_cache_scheme != "fp8")
    return fail(invalid_argument("--kv-cache-scheme must be none or fp8, got '" + kv_cache_scheme + "'"));
  auto kv_strategy = compress::parse_kv_scale_strategy(kv_cache_strategy);
  if (!kv_strategy.ok()) return fail(kv_strategy.status());
  if (*scheme == compress::Scheme::kNone && kv_cache_scheme == "none")
    return fail(invalid_argument("--scheme none quantizes no weight: give --kv-cache-scheme fp8 (KV-cache scales only)"));
  if (*scheme == compress::Scheme::kNone && (max_ppl_increase >= 0 || flags.was_set("--quantized-layers")))
    return fail(invalid_argument("--scheme none quantizes no layer: --max-ppl-increase / --quantized-layers do not apply"));
  if (kv_cache_scheme != "none" && !table_rows.empty())
    return fail(invalid_argument("--kv-cache-scheme applies to --out, not to --table rows"));
  if (group_size != 32 && group_size != 64 && group_size != 128)
    return fail(invalid_argument("--group-size must be 32, 64 or 128, got " + std::to_string(group_size)));
  compress::QuantizeOptions qo;
  qo.scheme.scheme = *scheme;
  qo.scheme.weight_granularity = weight_scales == "tensor" ? compress::Granularity::kTensor : compress::Granularity::kChannel;
  qo.scheme.symmetric = symmetric;
  qo.scheme.mse_clip = weight_clip == "mse";
  qo.gptq = method == "gptq";
  qo.gptq_options.act_order = act_order;
  qo.gptq_options.damp = damp;
  qo.gptq_options.static_groups = static_groups;
  qo.gptq_sequential = gptq_hessians == "sequential";
  qo.max_sample_rows = sample_rows;
  qo.progress = progress;
  if (kv_cache_scheme == "fp8") qo.kv_cache = *kv_strategy;
  if (alpha == "none") {
    qo.smooth = false;
  } else if (alpha != "search") {
    char* end = nullptr;
    const double a = std::strtod(alpha.c_str(), &end);
    if (end == alpha.c_str() || *end != '\0' || a < 0 || a > 1)
      return fail(invalid_argument("--alpha must be search, none or a number in [0, 1], got '" + alpha + "'"));
    qo.smooth_options.alpha = a;
  }
  if (!compress::quantizes_activations(*scheme) && flags.was_set("--alpha"))
    return fail(invalid_argument("--alpha applies to the W8A8 schemes only (" + scheme_name + " keeps activations in float)"));

  auto mc = model::load_model_config(model_path);
  if (!mc.ok()) return fail(mc.status());
  auto config = source_config(model_path, *mc);
  if (!config.ok()) return fail(config.status());
  {
    int g = group_size;
    const int64_t widths[] = {mc->hidden_size, static_cast<int64_t>(mc->num_heads) * mc->head_dim, mc->intermediate_size};
    auto fits = [&](int gs) {
      for (int64_t w : widths)
        if (w % gs != 0) return false;
      return true;
    };
    while (g > 32 && !fits(g)) g /= 2;
    // compressed-tensors (0.20) refuses a group size that does not divide in_features ("tensor column
    // shape must be divisible by the given group_size"), so a shorter last group would not load elsewhere.
    if (!fits(g) && *scheme == compress::Scheme::kW4A16)
      return fail(invalid_argument("--group-size: none of 128, 64, 32 (from " + std::to_string(group_size) +
                                   " down) divides every linear input width (" + std::to_string(widths[0]) + ", " +
                                   std::to_string(widths[1]) + ", " + std::to_string(widths[2]) +
                                   "); compressed-tensors requires group_size to divide in_features"));
    if (!fits(g)) g = group_size;  // the --table's w4a16 rows are then skipped
    if (*scheme == compress::Scheme::kW4A16 && g != group_size)
      XI_LOG(INFO) << "quantize: group size " << group_size << " does not divide every input width; using " << g;
    qo.scheme.group_size = g;
  }
  if (max_ppl_increase >= 0) {
    if (flags.was_set("--quantized-layers"))
      return fail(invalid_argument("give --max-ppl-increase or --quantized-layers, not both"));
    qo.selection.mode = compress::LayerSelection::Mode::kSearch;
    qo.selection.max_ppl_increase = max_ppl_increase;
  } else {
    auto sel = compress::parse_layer_selection(layers_spec, mc->num_layers);
    if (!sel.ok()) return fail(sel.status());
    qo.selection = *sel;
  }

  // Tokens: calibration windows, held-out windows, evaluation text.
  auto tokenizer = model::load_tokenizer(model_path);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  auto calib_text = read_file(calib_path, "--calib");
  if (!calib_text.ok()) return fail(calib_text.status());
  const std::vector<int32_t> calib_ids = (*tokenizer)->encode(*calib_text, false);
  const bool need_heldout = qo.selection.needs_sensitivity() || !table_rows.empty();
  const int64_t need = calib_samples * calib_len + (need_heldout ? heldout_tokens : 0);
  if (static_cast<int64_t>(calib_ids.size()) < need)
    return fail(invalid_argument("--calib " + calib_path + " has " + std::to_string(calib_ids.size()) +
                                 " tokens, fewer than asked: --calib-samples " + std::to_string(calib_samples) +
                                 " x --calib-len " + std::to_string(calib_len) +
                                 (need_heldout ? " + --heldout-tokens " + std::to_string(heldout_tokens) : std::string()) +
                                 " = " + std::to_string(need)));
  std::vector<std::vector<int32_t>> windows;
  for (int64_t i = 0; i < calib_samples; ++i)
    windows.emplace_back(calib_ids.begin() + i * calib_len, calib_ids.begin() + (i + 1) * calib_len);
  const std::vector<int32_t> heldout(calib_ids.begin() + calib_samples * calib_len,
                                     calib_ids.begin() + calib_samples * calib_len + (need_heldout ? heldout_tokens : 0));
  std::vector<int32_t> eval_ids;
  if (!eval_path.empty()) {
    auto t = read_file(eval_path, "--eval-text");
    if (!t.ok()) return fail(t.status());
    eval_ids = (*tokenizer)->encode(*t, true);
    if (eval_tokens > 0 && static_cast<int64_t>(eval_ids.size()) > eval_tokens) eval_ids.resize(static_cast<size_t>(eval_tokens));
  }

  auto backend_or = engine::create_backend(engine::BackendKind::kCpu, threads);
  if (!backend_or.ok()) return fail(backend_or.status());
  backend::Backend& backend = **backend_or;
  const int ctx = static_cast<int>(std::max<int64_t>(calib_len, eval_path.empty() ? 0 : eval_ctx));
  if (ctx > mc->context_limit())
    return fail(out_of_range("--calib-len / --eval-ctx " + std::to_string(ctx) + " exceeds the context limit " +
                             std::to_string(mc->context_limit())));
  const int chunk = std::min(512, ctx);
  model::LoadOptions lo;
  lo.max_tokens = chunk;
  lo.max_logit_rows = chunk;
  lo.max_model_len = ctx;
  lo.show_progress = progress;
  lo.dequantize_gguf = true;
  auto loaded = model::LlamaModel::load(model_path, backend, lo);
  if (!loaded.ok()) return fail(loaded.status());
  model::LlamaModel& m = **loaded;
  engine::prepare_backend_for_model(backend, m.config(), chunk, chunk, 1, ctx, progress);
  engine::WindowLogits runner(m, backend, ctx, chunk, 16);

  compress::QuantizeHooks hooks;
  hooks.forward = [&](std::span<const int32_t> w) {
    for (size_t b = 0; b < w.size(); b += static_cast<size_t>(chunk)) {
      const size_t e = std::min(w.size(), b + static_cast<size_t>(chunk));
      runner.run(w.subspan(b, e - b), static_cast<int>(b), static_cast<int>(e - b));
    }
  };
  hooks.window_kv = [&]() -> const backend::KvCache& { return runner.kv_cache(); };
  if (need_heldout)
    hooks.heldout_ppl = [&]() {
      engine::PerplexityOptions po;
      po.ctx = static_cast<int>(calib_len);
      po.stride = static_cast<int>(calib_len);
      po.show_progress = false;
      po.threads = threads;
      auto r = engine::evaluate_perplexity(runner, nullptr, heldout, po);
      XI_CHECK(r.ok()) << r.status().to_string();
      return r->ppl();
    };

  if (!table_rows.empty()) {
    auto ref = model::LlamaModel::load(model_path, backend, lo);
    if (!ref.ok()) return fail(ref.status());
    engine::WindowLogits ref_runner(**ref, backend, ctx, chunk, 16);
    std::function<Status(const compress::ModelQuantizer&, const std::string&)> write_row;
    std::optional<compress::ModelDirContents> extra;
    if (!table_out.empty()) {
      auto e = tokenizer_files(model_path);
      if (!e.ok()) return fail(e.status());
      extra = std::move(*e);
      std::error_code ec;
      fs::create_directories(table_out, ec);
      if (ec) return fail(unavailable("cannot create --table-out " + table_out + ": " + ec.message()));
      write_row = [&](const compress::ModelQuantizer& q, const std::string& row) {
        const std::string dir = (fs::path(table_out) / row).string();
        XI_RETURN_IF_ERROR(q.write(dir, overwrite, *config, *extra));
        XI_LOG(INFO) << "quantize: wrote " << dir;
        return Status::ok_status();
      };
    }
    return run_table(table_rows, qo, max_ppl_increase < 0 ? 1.0 : max_ppl_increase, m, backend, windows, hooks,
                     runner, ref_runner, eval_ids, eval_ctx, report_path, model_path, calib_path, progress, threads,
                     write_row);
  }
  compress::ModelQuantizer quantizer(m, backend, qo);
  if (Status s = quantizer.calibrate(windows, hooks); !s.ok()) return fail(s);
  if (Status s = quantizer.prepare(); !s.ok()) return fail(s);
  if (Status s = quantizer.select(hooks); !s.ok()) return fail(s);
  json report = quantizer.report();
  report["model"] = model_path;
  report["calib"] = {{"file", calib_path}, {"samples", calib_samples}, {"len", calib_len},
                     {"heldout_tokens", need_heldout ? heldout_tokens : 0}};

  if (!eval_ids.empty()) {
    auto ref = model::LlamaModel::load(model_path, backend, lo);
    if (!ref.ok()) return fail(ref.status());
    engine::WindowLogits ref_runner(**ref, backend, ctx, chunk, 16);
    engine::PerplexityOptions po;
    po.ctx = eval_ctx;
    po.stride = eval_ctx;
    po.show_progress = progress;
    po.threads = threads;
    auto q = engine::evaluate_perplexity(runner, &ref_runner, eval_ids, po);
    if (!q.ok()) return fail(q.status());
    auto base = engine::evaluate_perplexity(ref_runner, nullptr, eval_ids, po);
    if (!base.ok()) return fail(base.status());
    report["eval"] = {{"text", eval_path}, {"tokens", eval_ids.size()}, {"ctx", eval_ctx},
                      {"tokens_scored", q->tokens_scored}, {"baseline_ppl", base->ppl()}, {"ppl", q->ppl()},
                      {"ppl_increase_percent", 100.0 * (q->ppl() / base->ppl() - 1.0)},
                      {"kl", q->mean_kl()}, {"top1", q->top1()}};
  }
  if (!out.empty()) {
    auto extra = tokenizer_files(model_path);
    if (!extra.ok()) return fail(extra.status());
    if (Status s = quantizer.write(out, overwrite, *config, *extra); !s.ok()) return fail(s);
    XI_LOG(INFO) << "quantize: wrote " << out;
  }
  const std::string rp = !report_path.empty() ? report_path : out.empty() ? "" : out + "/quantization_report.json";
  if (!rp.empty()) {
    std::ofstream f(rp);
    f << report.dump(2) << "\n";
    if (!f) return fail(data_loss("cannot write --report " + rp));
  }
  json summary = report;
  summary.erase("layers");
  if (summary.contains("kv_cache")) summary["kv_cache"].erase("layers");
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}

const CommandRegistration kRegistration{
    "quantize", "float model -> compressed-tensors (SmoothQuant W8A8, FP8, W8A16, W4A16; RTN / GPTQ)", &run_quantize};

}  // namespace
}  // namespace xinfer::cli
