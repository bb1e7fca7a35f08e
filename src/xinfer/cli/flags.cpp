#include "xinfer/cli/flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "xinfer/core/check.h"

namespace xinfer::cli {
namespace {

template <typename T>
std::string text_of(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Result<uint64_t> parse_byte_size(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || errno == ERANGE || value < 0)
    return invalid_argument("'" + text + "' is not a size (examples: 1073741824, 512MiB, 1.5GiB, 2GB)");
  std::string unit(end);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1.0},          {"B", 1.0},          {"K", 0x1p10},    {"KiB", 0x1p10}, {"KB", 1e3},
      {"M", 0x1p20},      {"MiB", 0x1p20},     {"MB", 1e6},      {"G", 0x1p30},   {"GiB", 0x1p30},
      {"GB", 1e9},        {"T", 0x1p40},       {"TiB", 0x1p40},  {"TB", 1e12}};
  for (const auto& [name, scale] : kUnits)
    if (unit == name) return static_cast<uint64_t>(value * scale);
  return invalid_argument("'" + text + "': unknown size unit '" + unit + "' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
}

std::string format_byte_size(uint64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  std::ostringstream os;
  os << v << ' ' << kNames[unit];
  return os.str();
}

FlagSet::FlagSet(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void FlagSet::add(std::string name, std::string* t, std::string help) {
  flags_.push_back({std::move(name), t, std::move(help), t->empty() ? "" : "\"" + *t + "\""});
}
void FlagSet::add(std::string name, int* t, std::string help) {
  flags_.push_back({std::move(name), t, std::move(help), text_of(*t)});
}
void FlagSet::add(std::string name, int64_t* t, std::string help) {
  flags_.push_back({std::move(name), t, std::move(help), text_of(*t)});
}
void FlagSet::add(std::string name, float* t, std::string help) {
  flags_.push_back({std::move(name), t, std::move(help), text_of(*t)});
}
void FlagSet::add(std::string name, double* t, std::string help) {
  flags_.push_back({std::move(name), t, std::move(help), text_of(*t)});
}
void FlagSet::add(std::string name, bool* t, std::string help) {
  flags_.push_back({std::move(name), t, std::move(help), *t ? "true" : "false"});
}
void FlagSet::add(std::string name, ByteSize* t, std::string help) {
  flags_.push_back({std::move(name), t, std::move(help), format_byte_size(t->bytes)});
}
void FlagSet::add(std::string name, std::optional<int64_t>* t, std::string help) {
  flags_.push_back({std::move(name), t, std::move(help), t->has_value() ? text_of(**t) : "unset"});
}

Status FlagSet::assign(Flag& flag, const std::string& value) {
  auto bad = [&](const char* what) {
    return invalid_argument(flag.name + " expects " + what + ", got '" + value + "'");
  };
  auto parse_int = [&](int64_t* out) -> bool {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != 0 || errno == ERANGE) return false;
    *out = v;
    return true;
  };
  auto parse_double = [&](double* out) -> bool {
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != 0 || errno == ERANGE) return false;
    *out = v;
    return true;
  };
  flag.set = true;
  return std::visit(
      [&](auto* target) -> Status {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::string>) {
          *target = value;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (value == "true" || value == "1") *target = true;
          else if (value == "false" || value == "0") *target = false;
          else return bad("true or false");
        } else if constexpr (std::is_same_v<T, int>) {
          int64_t v;
          if (!parse_int(&v) || v < INT32_MIN || v > INT32_MAX) return bad("an integer");
          *target = static_cast<int>(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          if (!parse_int(target)) return bad("an integer");
        } else if constexpr (std::is_same_v<T, ByteSize>) {
          auto bytes = parse_byte_size(value);
          if (!bytes.ok()) return invalid_argument(flag.name + ": " + bytes.status().message());
          target->bytes = *bytes;
        } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
          int64_t v;
          if (!parse_int(&v)) return bad("an integer");
          *target = v;
        } else {
          double v;
          if (!parse_double(&v)) return bad("a number");
          *target = static_cast<T>(v);
        }
        return Status();
      },
      flag.target);
}

Status FlagSet::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) return invalid_argument("unexpected argument '" + arg + "'");
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    Flag* flag = nullptr;
    bool negated = false;
    for (auto& f : flags_) {
      if (f.name == name) flag = &f;
      else if (std::holds_alternative<bool*>(f.target) && name == "--no-" + f.name.substr(2)) {
        flag = &f;
        negated = true;
      }
    }
    if (!flag) return invalid_argument("unknown flag '" + name + "'");
    if (std::holds_alternative<bool*>(flag->target) && !has_value) {
      value = negated ? "false" : "true";
    } else if (!has_value) {
      if (i + 1 >= argc) return invalid_argument(name + " needs a value");
      value = argv[++i];
    }
    XI_RETURN_IF_ERROR(assign(*flag, value));
  }
  return Status();
}

int FlagSet::parse_or_exit_code(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(help().c_str(), stdout);
      return 0;
    }
  }
  Status s = parse(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the list of flags.\n", program_.c_str(),
                 s.message().c_str(), program_.c_str());
    return 2;
  }
  return -1;
}

std::string FlagSet::help() const {
  std::ostringstream os;
  os << "Usage: " << program_ << " [flags]\n\n" << description_ << "\n\nFlags:\n";
  for (const auto& f : flags_) {
    const char* type = std::visit(
        [](auto* t) -> const char* {
          using T = std::remove_pointer_t<decltype(t)>;
          if constexpr (std::is_same_v<T, std::string>) return "STR";
          else if constexpr (std::is_same_v<T, bool>) return "";
          else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return "NUM";
          else if constexpr (std::is_same_v<T, ByteSize>) return "SIZE";
          else return "INT";
        },
        f.target);
    std::string head = f.name + (*type ? std::string(" ") + type : "");
    os << "  " << head;
    if (head.size() < 26) os << std::string(26 - head.size(), ' ');
    else os << "\n" << std::string(28, ' ');
    os << f.help;
    if (!f.default_text.empty()) os << " (default: " << f.default_text << ")";
    os << '\n';
  }
  os << "  --help                    show this help\n";
  return os.str();
}

void FlagSet::set_default_text(const std::string& name, std::string text) {
  for (auto& f : flags_)
    if (f.name == name) {
      f.default_text = std::move(text);
      return;
    }
  XI_CHECK(false) << "set_default_text: no flag " << name;
}

bool FlagSet::was_set(const std::string& name) const {
  for (const auto& f : flags_)
    if (f.name == name) return f.set;
  return false;
}

}  // namespace xinfer::cli
