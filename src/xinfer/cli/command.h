// Sub-commands of the `xinfer` binary. Each lives in its own `<name>_command.cpp`, which registers itself:
//
//   static const xinfer::cli::CommandRegistration kReg{
//       "tokenize", "text on stdin -> token ids as JSON", &run_tokenize};
//
// main() dispatches `xinfer <name> args...` to the command with argv[0] = "xinfer <name>".
#pragma once

#include <string>
#include <vector>

namespace xinfer::cli {

using CommandFn = int (*)(int argc, char** argv);

struct Command {
  std::string name;
  std::string summary;  // one line for `xinfer --help`
  CommandFn run;
};

std::vector<Command>& command_registry();

struct CommandRegistration {
  CommandRegistration(std::string name, std::string summary, CommandFn run) {
    command_registry().push_back(Command{std::move(name), std::move(summary), run});
  }
};

}  // namespace xinfer::cli
