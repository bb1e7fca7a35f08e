// FlagSet: `--name value` / `--name=value` / `--flag` command-line parsing with generated --help.
// Every flag has a type, a default (the target's value when registered) and a one-line help text:
//
//   FlagSet flags("xinfer generate", "Generate text from a prompt.");
//   flags.add("--max-tokens", &max_tokens, "tokens to generate");
//   if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::cli {

// A memory size flag: "1073741824", "512MiB", "1.5GiB", "2G" (binary), "2GB" (decimal).
struct ByteSize {
  uint64_t bytes = 0;
};
Result<uint64_t> parse_byte_size(const std::string& text);
std::string format_byte_size(uint64_t bytes);  // "1 GiB", "512 MiB", "123 B"

class FlagSet {
 public:
  FlagSet(std::string program, std::string description);

  void add(std::string name, std::string* target, std::string help);
  void add(std::string name, int* target, std::string help);
  void add(std::string name, int64_t* target, std::string help);
  void add(std::string name, float* target, std::string help);
  void add(std::string name, double* target, std::string help);
  void add(std::string name, bool* target, std::string help);  // --name / --name=true|false / --no-name
  void add(std::string name, std::optional<int64_t>* target, std::string help);
  void add(std::string name, ByteSize* target, std::string help);

  // Parses argv[1..]; INVALID_ARGUMENT for unknown flags, missing or malformed values.
  Status parse(int argc, char** argv);
  // parse(), printing help (returns 0) or the error plus a hint (returns 2); -1 means continue.
  int parse_or_exit_code(int argc, char** argv);
  std::string help() const;
  bool was_set(const std::string& name) const;
  // Replaces the "(default: ...)" text --help shows for a registered flag, for defaults resolved after
  // parsing (e.g. by device); XI_CHECKs that the flag exists.
  void set_default_text(const std::string& name, std::string text);

 private:
  using Target = std::variant<std::string*, int*, int64_t*, float*, double*, bool*, std::optional<int64_t>*,
                              ByteSize*>;
  struct Flag {
    std::string name;
    Target target;
    std::string help;
    std::string default_text;
    bool set = false;
  };
  Status assign(Flag& flag, const std::string& value);

  std::string program_;
  std::string description_;
  std::vector<Flag> flags_;
};

}  // namespace xinfer::cli
