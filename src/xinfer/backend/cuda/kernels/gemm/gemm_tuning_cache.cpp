#include "xinfer/backend/cuda/kernels/gemm/gemm_tuning_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "xinfer/core/logging.h"

namespace xinfer::cuda {
namespace {

using nlohmann::json;
constexpr int kFormat = 1;
constexpr size_t kAlgoBytes = sizeof(cublasLtMatmulAlgo_t::data);

std::string to_hex(const cublasLtMatmulAlgo_t& algo) {
  static const char* digits = "0123456789abcdef";
  const auto* p = reinterpret_cast<const unsigned char*>(algo.data);
  std::string s;
  for (size_t i = 0; i < kAlgoBytes; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

bool from_hex(const std::string& s, cublasLtMatmulAlgo_t* algo) {
  if (s.size() != 2 * kAlgoBytes) return false;
  auto* p = reinterpret_cast<unsigned char*>(algo->data);
  for (size_t i = 0; i < kAlgoBytes; ++i) {
    int v = 0;
    for (int j = 0; j < 2; ++j) {
      const char c = s[2 * i + static_cast<size_t>(j)];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    p[i] = static_cast<unsigned char>(v);
  }
  return true;
}

json entry_to_json(const GemmTuningEntry& e) {
  json j = {{"n", e.key.n},   {"k", e.key.k},       {"y_f32", e.key.y_f32},           {"bias", e.key.bias},
            {"m", e.key.m},   {"kind", gemm_kind_name(e.choice.kind)},                {"us", e.choice.us},
            {"heuristic_us", e.choice.heuristic_us ? json(*e.choice.heuristic_us) : json(nullptr)}};
  if (e.choice.kind == GemmKind::kCublasLt) j["algo"] = to_hex(e.choice.algo);
  if (e.choice.kind == GemmKind::kGemv) {
    j["rows_per_warp"] = e.choice.gemv.rows_per_warp;
    j["k_split"] = e.choice.gemv.k_split;
    j["pdl"] = e.choice.gemv.pdl;
  }
  return j;
}

// Throws (nlohmann type errors) or returns false on anything malformed.
bool entry_from_json(const json& j, GemmTuningEntry* e) {
  if (!j.is_object()) return false;
  e->key.n = j.at("n").get<int>();
  e->key.k = j.at("k").get<int>();
  e->key.y_f32 = j.at("y_f32").get<bool>();
  e->key.bias = j.at("bias").get<bool>();
  e->key.m = j.at("m").get<int>();
  if (e->key.n <= 0 || e->key.k <= 0 || e->key.m <= 0) return false;
  e->choice.us = j.at("us").get<float>();
  const json& h = j.at("heuristic_us");
  e->choice.heuristic_us = h.is_null() ? std::nullopt : std::optional<float>(h.get<float>());
  const std::string kind = j.at("kind").get<std::string>();
  if (kind == "heuristic") {
    e->choice.kind = GemmKind::kHeuristic;
  } else if (kind == "cublaslt") {
    e->choice.kind = GemmKind::kCublasLt;
    if (!from_hex(j.at("algo").get<std::string>(), &e->choice.algo)) return false;
  } else if (kind == "none") {
    e->choice.kind = GemmKind::kNone;
  } else if (kind == "gemv") {
    e->choice.kind = GemmKind::kGemv;
    e->choice.gemv.rows_per_warp = j.at("rows_per_warp").get<int>();
    e->choice.gemv.k_split = j.at("k_split").get<int>();
    e->choice.gemv.pdl = j.at("pdl").get<bool>();
  } else {
    return false;
  }
  return true;
}

// The whole file as JSON; NOT_FOUND if it does not exist, DATA_LOSS if it is not our format.
Result<json> read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found("no GEMM tuning cache at " + path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return data_loss("cannot open " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  json doc = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return data_loss(path + " is not valid JSON");
  if (!doc.is_object() || !doc.contains("format") || !doc["format"].is_number_integer() ||
      doc["format"].get<int>() != kFormat || !doc.contains("devices") || !doc["devices"].is_object())
    return data_loss(path + " is not a format-" + std::to_string(kFormat) + " GEMM tuning cache");
  return doc;
}

}  // namespace

Result<std::vector<GemmTuningEntry>> load_gemm_tuning_cache(const std::string& path, const std::string& device_key) {
  XI_ASSIGN_OR_RETURN(json doc, read_file(path));
  const json& devices = doc["devices"];
  if (!devices.contains(device_key)) return not_found(path + " has no entries for " + device_key);
  const json& list = devices[device_key];
  if (!list.is_array()) return data_loss(path + ": entries of " + device_key + " are not a list");
  std::vector<GemmTuningEntry> out;
  try {
    for (const json& j : list) {
      GemmTuningEntry e;
      if (!entry_from_json(j, &e)) return data_loss(path + ": malformed entry " + j.dump());
      out.push_back(e);
    }
  } catch (const json::exception& ex) {
    return data_loss(path + ": malformed entry (" + ex.what() + ")");
  }
  return out;
}

CachedGemmChoices read_gemm_tuning_cache(const std::string& path, const std::string& device_key,
                                         const std::string& what) {
  Result<std::vector<GemmTuningEntry>> loaded = load_gemm_tuning_cache(path, device_key);
  if (loaded.ok()) return {CachedGemmChoices::State::kLoaded, std::move(loaded).value()};
  if (loaded.status().code() == StatusCode::kNotFound) return {CachedGemmChoices::State::kNew, {}};
  XI_LOG(WARN) << "GEMM tuning cache unusable for " << what
               << ", measuring again: " << loaded.status().to_string();
  return {CachedGemmChoices::State::kUnreadable, {}};
}

Status save_gemm_tuning_cache(const std::string& path, const std::string& device_key,
                              const std::vector<GemmTuningEntry>& entries) {
  std::map<GemmTuningKey, GemmTuningEntry> merged;
  Result<json> old = read_file(path);
  json doc = old.ok() ? std::move(old).value() : json{{"format", kFormat}, {"devices", json::object()}};
  if (auto prev = load_gemm_tuning_cache(path, device_key); prev.ok())
    for (const GemmTuningEntry& e : *prev) merged[e.key] = e;
  for (const GemmTuningEntry& e : entries) merged[e.key] = e;
  json list = json::array();
  for (const auto& [key, e] : merged) list.push_back(entry_to_json(e));
  doc["devices"][device_key] = std::move(list);

  const std::filesystem::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  if (ec) return unavailable("cannot create " + target.parent_path().string() + ": " + ec.message());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return unavailable("cannot write " + tmp + ": " + std::strerror(errno));
    out << doc.dump(1) << '\n';
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return unavailable("cannot write " + tmp);
    }
  }
  std::filesystem::rename(tmp, target, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return unavailable("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return Status();
}

std::string default_gemm_tuning_cache_path() {
  if (const char* p = std::getenv("XINFER_GEMM_TUNING_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/xinfer/gemm_tuning.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/xinfer/gemm_tuning.json";
  return "";
}

}  // namespace xinfer::cuda
