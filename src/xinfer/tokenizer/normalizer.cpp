#include "xinfer/tokenizer/normalizer.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf16.h>
#include <unicode/ustring.h>

#include <nlohmann/json.hpp>

#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

const UNormalizer2* icu_normalizer(UnicodeNormalize::Form form) {
  UErrorCode err = U_ZERO_ERROR;
  switch (form) {
    case UnicodeNormalize::Form::kNfc: return unorm2_getNFCInstance(&err);
    case UnicodeNormalize::Form::kNfd: return unorm2_getNFDInstance(&err);
    case UnicodeNormalize::Form::kNfkc: return unorm2_getNFKCInstance(&err);
    case UnicodeNormalize::Form::kNfkd: return unorm2_getNFKDInstance(&err);
  }
  return nullptr;
}

Result<Regex> pattern_from_json(const nlohmann::json& p) {
  if (p.contains("String")) return Regex::compile(p["String"].get<std::string>(), /*literal=*/true);
  if (p.contains("Regex")) return Regex::compile(p["Regex"].get<std::string>());
  return invalid_argument("pattern is neither String nor Regex: " + p.dump());
}

}  // namespace

bool is_unicode_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool unicode_normalize(UnicodeNormalize::Form form, std::string_view text, std::string& out) {
  size_t i = 0;
  while (i < text.size() && static_cast<uint8_t>(text[i]) < 0x80) ++i;
  if (i == text.size()) return false;  // ASCII is invariant under every form
  const UNormalizer2* norm = icu_normalizer(form);
  UErrorCode err = U_ZERO_ERROR;
  std::u16string u16(text.size(), u'\0');
  int32_t len16 = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(u16.data()), static_cast<int32_t>(u16.size()), &len16, text.data(),
                static_cast<int32_t>(text.size()), &err);
  if (U_FAILURE(err)) return false;
  const auto* src = reinterpret_cast<const UChar*>(u16.data());
  if (unorm2_spanQuickCheckYes(norm, src, len16, &err) == len16 && U_SUCCESS(err)) return false;
  // Hugging Face normalizes with Unicode 9.0 data: characters assigned later are opaque starters
  // (no decomposition, combining class 0), so the text is normalized in stretches between them.
  std::u16string dst;
  int32_t seg = 0, i16 = 0;
  auto flush = [&](int32_t end) {
    if (end <= seg) return;
    UErrorCode e = U_ZERO_ERROR;
    const size_t at = dst.size();
    dst.resize(at + static_cast<size_t>(end - seg) * 4 + 16);
    const int32_t n = unorm2_normalize(norm, src + seg, end - seg, reinterpret_cast<UChar*>(dst.data() + at),
                                       static_cast<int32_t>(dst.size() - at), &e);
    dst.resize(U_SUCCESS(e) ? at + static_cast<size_t>(n) : at);
  };
  while (i16 < len16) {
    const int32_t start = i16;
    UChar32 c;
    U16_NEXT(src, i16, len16, c);
    UVersionInfo age;
    u_charAge(c, age);
    if (age[0] > 9) {
      flush(start);
      dst.append(u16, static_cast<size_t>(start), static_cast<size_t>(i16 - start));
      seg = i16;
    }
  }
  flush(len16);
  const auto n = static_cast<int32_t>(dst.size());
  err = U_ZERO_ERROR;
  out.assign(static_cast<size_t>(n) * 3, '\0');
  int32_t len8 = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &len8, reinterpret_cast<const UChar*>(dst.data()), n,
              &err);
  out.resize(static_cast<size_t>(len8));
  return U_SUCCESS(err);
}

Status Normalizer::add(const nlohmann::json& j) {
  if (j.is_null()) return {};
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& n : j["normalizers"]) XI_RETURN_IF_ERROR(add(n));
  } else if (type == "NFC") {
    steps_.emplace_back(UnicodeNormalize{UnicodeNormalize::Form::kNfc});
  } else if (type == "NFD") {
    steps_.emplace_back(UnicodeNormalize{UnicodeNormalize::Form::kNfd});
  } else if (type == "NFKC") {
    steps_.emplace_back(UnicodeNormalize{UnicodeNormalize::Form::kNfkc});
  } else if (type == "NFKD") {
    steps_.emplace_back(UnicodeNormalize{UnicodeNormalize::Form::kNfkd});
  } else if (type == "Prepend") {
    steps_.emplace_back(PrependNormalize{j["prepend"].get<std::string>()});
  } else if (type == "Replace") {
    XI_ASSIGN_OR_RETURN(Regex re, pattern_from_json(j["pattern"]));
    steps_.emplace_back(ReplaceNormalize{std::move(re), j["content"].get<std::string>()});
  } else if (type == "Strip") {
    steps_.emplace_back(StripNormalize{j.value("strip_left", false), j.value("strip_right", false)});
  } else {
    return unimplemented("normalizer type '" + type + "' is not supported");
  }
  return {};
}

Result<Normalizer> Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  XI_RETURN_IF_ERROR(n.add(j));
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  std::string tmp;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const auto& step : steps_) {
    if (const auto* u = std::get_if<UnicodeNormalize>(&step)) {
      if (unicode_normalize(u->form, s, tmp)) s.swap(tmp);
    } else if (const auto* p = std::get_if<PrependNormalize>(&step)) {
      if (!s.empty()) s.insert(0, p->prefix);
    } else if (const auto* r = std::get_if<ReplaceNormalize>(&step)) {
      matches.clear();
      r->pattern.find_all(s, matches);
      if (matches.empty()) continue;
      tmp.clear();
      size_t prev = 0;
      for (auto [b, e] : matches) {
        tmp.append(s, prev, b - prev);
        tmp += r->content;
        prev = e;
      }
      tmp.append(s, prev);
      s.swap(tmp);
    } else if (const auto* st = std::get_if<StripNormalize>(&step)) {
      size_t b = 0, e = s.size();
      if (st->left) {
        while (b < e) {
          size_t k = b;
          if (!is_unicode_whitespace(next_codepoint(s, k))) break;
          b = k;
        }
      }
      if (st->right) {
        while (e > b) {
          size_t k = e - 1;
          while (k > b && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
          size_t k2 = k;
          if (!is_unicode_whitespace(next_codepoint(s, k2))) break;
          e = k;
        }
      }
      s = s.substr(b, e - b);
    }
  }
  return s;
}

}  // namespace xinfer::tok
