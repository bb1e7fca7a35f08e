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

  // Parses argv[1..]; INVALID_ARGUMENT for unknown flags, missing or malformed values.
  Status parse(int argc, char** argv);
  // parse(), printing help (returns 0) or the error plus a hint (returns 2); -1 means continue.
  int parse_or_exit_code(int argc, char** argv);
  std::string help() const;
  bool was_set(const std::string& name) const;

 private:
  using Target = std::variant<std::string*, int*, int64_t*, float*, double*, bool*, std::optional<int64_t>*>;
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
