// `xinfer <command> [flags]`: the single entry point; see command.h for how commands register.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "xinfer/cli/command.h"

namespace xinfer::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}

namespace {

void print_usage(FILE* out) {
  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::fprintf(out,
               "xinfer: an LLM inference engine and OpenAI-compatible server.\n\n"
               "Usage: xinfer <command> [flags]     (xinfer <command> --help for its flags)\n\nCommands:\n");
  for (const auto& c : commands) std::fprintf(out, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
}

}  // namespace
}  // namespace xinfer::cli

int main(int argc, char** argv) {
  using namespace xinfer::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage(stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("xinfer 0.1.0\n");
    return 0;
  }
  for (const auto& c : command_registry()) {
    if (c.name == argv[1]) {
      std::string prog = std::string("xinfer ") + argv[1];
      argv[1] = prog.data();
      return c.run(argc - 1, argv + 1);
    }
  }
  std::fprintf(stderr, "xinfer: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
