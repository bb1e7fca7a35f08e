#include "xinfer/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "xinfer/tokenizer/hf_tokenizer.h"
#include "xinfer/tokenizer/sentencepiece_model.h"

namespace xinfer::tok {
namespace {

Result<nlohmann::json> read_json(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(path.string() + ": cannot open");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    return data_loss(path.string() + ": invalid JSON: " + e.what());
  }
}

}  // namespace

Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  nlohmann::json config;
  if (fs::exists(d / "tokenizer_config.json")) {
    XI_ASSIGN_OR_RETURN(config, read_json(d / "tokenizer_config.json"));
  }
  nlohmann::json tj;
  if (fs::exists(d / "tokenizer.json")) {
    XI_ASSIGN_OR_RETURN(tj, read_json(d / "tokenizer.json"));
  } else if (fs::exists(d / "tokenizer.model")) {
    XI_ASSIGN_OR_RETURN(tj, sentencepiece_model_to_json((d / "tokenizer.model").string()));
  } else if (fs::exists(d / "tokenizer.bin") || fs::exists(d / "tok512.bin")) {
    const fs::path p = fs::exists(d / "tokenizer.bin") ? d / "tokenizer.bin" : d / "tok512.bin";
    XI_ASSIGN_OR_RETURN(tj, llama2c_tokenizer_to_json(p.string()));
    if (config.is_null()) config = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  } else {
    return not_found(dir + ": no tokenizer.json, tokenizer.model or tokenizer.bin");
  }
  try {
    XI_ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> t, HfTokenizer::from_json(tj, config));
    return std::unique_ptr<Tokenizer>(std::move(t));
  } catch (const nlohmann::json::exception& e) {
    return data_loss(dir + ": malformed tokenizer: " + e.what());
  }
}

}  // namespace xinfer::tok
