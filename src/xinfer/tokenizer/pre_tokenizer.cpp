#include "xinfer/tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "xinfer/tokenizer/byte_level.h"
#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<SplitBehavior> parse_behavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("unknown split behavior '" + s + "'");
}

// Splits `s` by the matches of `re` (Hugging Face's NormalizedString::split); appends non-empty pieces.
void split_by(std::string_view s, const Regex& re, SplitBehavior behavior, bool invert,
              std::vector<std::string>& out) {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  matches.clear();
  re.find_all(s, matches);
  // (begin, end, is_match) covering s.
  struct Span {
    size_t b, e;
    bool match;
  };
  thread_local std::vector<Span> spans;
  spans.clear();
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < s.size()) spans.push_back({prev, s.size(), invert});

  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.emplace_back(s.substr(b, e - b));
  };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& sp : spans) if (!sp.match) emit(sp.b, sp.e);
      break;
    case SplitBehavior::kIsolated:
      for (const auto& sp : spans) emit(sp.b, sp.e);
      break;
    case SplitBehavior::kContiguous: {
      size_t i = 0;
      while (i < spans.size()) {
        size_t j = i + 1;
        if (spans[i].match) while (j < spans.size() && spans[j].match) ++j;
        emit(spans[i].b, spans[j - 1].e);
        i = j;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      size_t start = 0;
      bool open = false;
      for (const auto& sp : spans) {
        if (sp.match && open) {
          emit(start, sp.e);
          open = false;
        } else if (sp.match) {
          emit(sp.b, sp.e);
        } else {
          if (open) emit(start, sp.b);
          start = sp.b;
          open = true;
        }
      }
      if (open) emit(start, s.size());
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      size_t start = 0;
      bool open = false;
      for (const auto& sp : spans) {
        if (sp.match) {
          if (open) emit(start, sp.b);
          start = sp.b;
          open = true;
        } else {
          emit(open ? start : sp.b, sp.e);
          open = false;
        }
      }
      if (open) emit(start, s.size());
      break;
    }
  }
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

}  // namespace

Status PreTokenizer::add(const nlohmann::json& j) {
  if (j.is_null()) return {};
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& p : j["pretokenizers"]) XI_RETURN_IF_ERROR(add(p));
  } else if (type == "Split") {
    SplitPreTokenize s;
    const auto& p = j["pattern"];
    if (p.contains("String")) {
      XI_ASSIGN_OR_RETURN(s.pattern, Regex::compile(p["String"].get<std::string>(), /*literal=*/true));
    } else {
      XI_ASSIGN_OR_RETURN(s.pattern, Regex::compile(p["Regex"].get<std::string>()));
    }
    XI_ASSIGN_OR_RETURN(s.behavior, parse_behavior(j.value("behavior", "Isolated")));
    s.invert = j.value("invert", false);
    steps_.emplace_back(std::move(s));
  } else if (type == "ByteLevel") {
    ByteLevelPreTokenize b;
    b.add_prefix_space = j.value("add_prefix_space", false);
    b.use_regex = j.value("use_regex", true);
    if (b.use_regex) {
      XI_ASSIGN_OR_RETURN(b.gpt2, Regex::compile(kGpt2Pattern));
    }
    steps_.emplace_back(std::move(b));
  } else if (type == "Metaspace") {
    MetaspacePreTokenize m;
    m.replacement = j.value("replacement", m.replacement);
    const std::string scheme = j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
    m.prepend = scheme == "first"   ? MetaspacePreTokenize::Prepend::kFirst
                : scheme == "never" ? MetaspacePreTokenize::Prepend::kNever
                                    : MetaspacePreTokenize::Prepend::kAlways;
    m.split = j.value("split", true);
    steps_.emplace_back(std::move(m));
  } else if (type == "Digits") {
    const bool individual = j.value("individual_digits", false);
    XI_ASSIGN_OR_RETURN(Regex re, Regex::compile(individual ? "\\p{N}" : "\\p{N}+"));
    steps_.emplace_back(SplitPreTokenize{std::move(re), SplitBehavior::kIsolated, false});
  } else if (type == "Whitespace") {
    XI_ASSIGN_OR_RETURN(Regex re, Regex::compile("\\w+|[^\\w\\s]+"));
    steps_.emplace_back(SplitPreTokenize{std::move(re), SplitBehavior::kRemoved, true});
  } else if (type == "WhitespaceSplit") {
    XI_ASSIGN_OR_RETURN(Regex re, Regex::compile("\\s+"));
    steps_.emplace_back(SplitPreTokenize{std::move(re), SplitBehavior::kRemoved, false});
  } else {
    return unimplemented("pre_tokenizer type '" + type + "' is not supported");
  }
  return {};
}

Result<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& j) {
  PreTokenizer p;
  XI_RETURN_IF_ERROR(p.add(j));
  p.raw_bytes_output_ = !p.steps_.empty() && std::holds_alternative<ByteLevelPreTokenize>(p.steps_.back());
  return p;
}

void PreTokenizer::apply(std::string_view text, bool first_segment, std::vector<std::string>& pieces) const {
  const size_t base = pieces.size();
  pieces.emplace_back(text);
  std::vector<std::string> next;
  for (size_t k = 0; k < steps_.size(); ++k) {
    const auto& step = steps_[k];
    next.clear();
    if (const auto* s = std::get_if<SplitPreTokenize>(&step)) {
      for (size_t i = base; i < pieces.size(); ++i) split_by(pieces[i], s->pattern, s->behavior, s->invert, next);
    } else if (const auto* b = std::get_if<ByteLevelPreTokenize>(&step)) {
      const bool map_now = !(raw_bytes_output_ && k + 1 == steps_.size());
      for (size_t i = base; i < pieces.size(); ++i) {
        std::string piece = std::move(pieces[i]);
        if (b->add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
        const size_t from = next.size();
        if (b->use_regex) {
          split_by(piece, b->gpt2, SplitBehavior::kIsolated, false, next);
        } else if (!piece.empty()) {
          next.push_back(std::move(piece));
        }
        if (map_now) {
          for (size_t n = from; n < next.size(); ++n) {
            std::string mapped;
            ByteLevelMap::get().encode(next[n], mapped);
            next[n] = std::move(mapped);
          }
        }
      }
    } else if (const auto* m = std::get_if<MetaspacePreTokenize>(&step)) {
      for (size_t i = base; i < pieces.size(); ++i) {
        std::string piece = std::move(pieces[i]);
        replace_all(piece, " ", m->replacement);
        const bool prepend = m->prepend == MetaspacePreTokenize::Prepend::kAlways ||
                             (m->prepend == MetaspacePreTokenize::Prepend::kFirst && first_segment && i == base);
        if (prepend && piece.compare(0, m->replacement.size(), m->replacement) != 0) piece = m->replacement + piece;
        if (m->split) {
          // Split before each replacement character (MergedWithNext).
          size_t start = 0, pos = 0;
          while ((pos = piece.find(m->replacement, pos)) != std::string::npos) {
            if (pos > start) next.emplace_back(piece.substr(start, pos - start));
            start = pos;
            pos += m->replacement.size();
          }
          if (piece.size() > start) next.emplace_back(piece.substr(start));
        } else if (!piece.empty()) {
          next.push_back(std::move(piece));
        }
      }
    }
    pieces.resize(base);
    for (auto& p : next) pieces.push_back(std::move(p));
  }
  if (steps_.empty() && pieces.back().empty()) pieces.pop_back();
}

}  // namespace xinfer::tok
