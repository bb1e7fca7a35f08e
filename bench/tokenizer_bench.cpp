// Single-thread encode throughput of xinfer's tokenizer (bench/tokenizer_bench.py runs this next to the
// Hugging Face `tokenizers` package on the same text and prints the ratio).
//
//   tokenizer_bench --tokenizer DIR --text FILE [--chunk 4096] [--passes 3]
// The text is cut into chunks of about --chunk bytes (at line ends); each pass encodes every chunk
// with add_special_tokens=false. Prints one JSON line: bytes, ids, seconds of the best pass, MB/s of
// the first (cold cache) and best pass.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "xinfer/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string dir, file;
  size_t chunk = 4096;
  int passes = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer")) dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--text")) file = argv[i + 1];
    else if (!std::strcmp(argv[i], "--chunk")) chunk = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--passes")) passes = std::atoi(argv[i + 1]);
  }
  if (dir.empty() || file.empty()) {
    std::fprintf(stderr, "usage: %s --tokenizer DIR --text FILE [--chunk N] [--passes N]\n", argv[0]);
    return 2;
  }
  auto tok = xinfer::tok::Tokenizer::load(dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::ifstream f(file, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> chunks;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = std::min(text.size(), pos + chunk);
    const size_t nl = text.find('\n', end);
    end = nl == std::string::npos ? text.size() : nl + 1;
    chunks.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  double best = 1e30, first = 0;
  size_t ids = 0;
  for (int p = 0; p < passes; ++p) {
    ids = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& c : chunks) ids += (*tok)->encode(c, false).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (p == 0) first = s;
    best = std::min(best, s);
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("{\"bytes\": %zu, \"ids\": %zu, \"best_s\": %.4f, \"cold_mb_per_s\": %.2f, \"mb_per_s\": %.2f}\n",
              text.size(), ids, best, mb / first, mb / best);
  return 0;
}
