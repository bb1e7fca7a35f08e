#include "xinfer/tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "xinfer/tokenizer/byte_level.h"
#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[static_cast<size_t>(k)];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return v;
}

std::vector<std::string> replace_each(const ReplaceDecode& r, std::vector<std::string> tokens) {
  std::vector<std::pair<size_t, size_t>> m;
  for (auto& t : tokens) {
    m.clear();
    r.pattern.find_all(t, m);
    if (m.empty()) continue;
    std::string s;
    size_t prev = 0;
    for (auto [b, e] : m) {
      s.append(t, prev, b - prev);
      s += r.content;
      prev = e;
    }
    s.append(t, prev);
    t.swap(s);
  }
  return tokens;
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (is_valid_utf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back(kReplacementChar);
    }
    bytes.clear();
  };
  for (auto& t : tokens) {
    const int b = parse_byte_token(t);
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

std::string strip(const StripDecode& s, const std::string& t) {
  std::vector<std::pair<size_t, uint32_t>> chars;  // (byte offset, code point)
  for (size_t i = 0; i < t.size();) {
    const size_t at = i;
    chars.emplace_back(at, next_codepoint(t, i));
  }
  size_t start_cut = 0;
  for (size_t i = 0; i < chars.size() && i < s.start; ++i) {
    if (chars[i].second != s.content) break;
    start_cut = i + 1;
  }
  size_t stop_cut = chars.size();
  for (size_t i = 0; i < s.stop && i < chars.size(); ++i) {
    const size_t idx = chars.size() - i - 1;
    if (chars[idx].second != s.content) break;
    stop_cut = idx;
  }
  if (stop_cut <= start_cut) return {};
  const size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
  const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
  return t.substr(b, e - b);
}

}  // namespace

Status Decoder::add(const nlohmann::json& j) {
  if (j.is_null()) return {};
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& d : j["decoders"]) XI_RETURN_IF_ERROR(add(d));
  } else if (type == "ByteLevel") {
    steps_.emplace_back(ByteLevelDecode{});
  } else if (type == "Replace") {
    const auto& p = j["pattern"];
    Result<Regex> re = p.contains("String") ? Regex::compile(p["String"].get<std::string>(), true)
                                            : Regex::compile(p.at("Regex").get<std::string>());
    if (!re.ok()) return re.status();
    steps_.emplace_back(ReplaceDecode{std::move(re).value(), j["content"].get<std::string>()});
  } else if (type == "ByteFallback") {
    steps_.emplace_back(ByteFallbackDecode{});
  } else if (type == "Fuse") {
    steps_.emplace_back(FuseDecode{});
  } else if (type == "Strip") {
    StripDecode s;
    const std::string c = j.value("content", " ");
    size_t i = 0;
    s.content = c.empty() ? ' ' : next_codepoint(c, i);
    s.start = j.value("start", 0);
    s.stop = j.value("stop", 0);
    steps_.emplace_back(s);
  } else if (type == "Metaspace") {
    MetaspaceDecode m;
    m.replacement = j.value("replacement", m.replacement);
    const std::string scheme = j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
    m.prepend = scheme != "never";
    steps_.emplace_back(m);
  } else {
    return unimplemented("decoder type '" + type + "' is not supported");
  }
  return {};
}

Result<Decoder> Decoder::from_json(const nlohmann::json& j) {
  Decoder d;
  d.present_ = !j.is_null();
  XI_RETURN_IF_ERROR(d.add(j));
  return d;
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (!present_) {
    std::string s;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) s += ' ';
      s += tokens[i];
    }
    return s;
  }
  for (const auto& step : steps_) {
    if (std::holds_alternative<ByteLevelDecode>(step)) {
      const auto& map = ByteLevelMap::get();
      std::string bytes;
      for (const auto& t : tokens) {
        if (!map.decode(t, bytes)) bytes += t;
      }
      tokens.assign(1, utf8_lossy(bytes));
    } else if (const auto* r = std::get_if<ReplaceDecode>(&step)) {
      tokens = replace_each(*r, std::move(tokens));
    } else if (std::holds_alternative<ByteFallbackDecode>(step)) {
      tokens = byte_fallback(std::move(tokens));
    } else if (std::holds_alternative<FuseDecode>(step)) {
      std::string s;
      for (const auto& t : tokens) s += t;
      tokens.assign(1, std::move(s));
    } else if (const auto* s = std::get_if<StripDecode>(&step)) {
      for (auto& t : tokens) t = strip(*s, t);
    } else if (const auto* m = std::get_if<MetaspaceDecode>(&step)) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string out;
        const std::string& t = tokens[i];
        size_t pos = 0, prev = 0;
        while ((pos = t.find(m->replacement, prev)) != std::string::npos) {
          out.append(t, prev, pos - prev);
          if (!(i == 0 && m->prepend)) out += ' ';
          prev = pos + m->replacement.size();
        }
        out.append(t, prev);
        tokens[i] = std::move(out);
      }
    }
  }
  std::string s;
  for (const auto& t : tokens) s += t;
  return s;
}

}  // namespace xinfer::tok
