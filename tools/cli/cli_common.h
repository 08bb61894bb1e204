// cli_common.h — shared plumbing of the `attnflow` command.
//
// Every subcommand registers itself with ATTNFLOW_REGISTER_COMMAND from its
// own cmd_*.cc file. Usage errors (unknown flag, missing argument) exit 2;
// --help on any command prints help and exits 0.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace attnflow::cli {

constexpr int kExitOk = 0;
constexpr int kExitCheckFailed = 1;
constexpr int kExitUsage = 2;  // also: unreadable or invalid input

// Configures `sub` (options, positionals) and returns the action to run after
// a successful parse; the action returns the exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App& sub)>;

bool RegisterCommand(const char* name, const char* description,
                     CommandSetup setup);
int Main(int argc, char** argv);

// "attnflow <cmd>: error: <msg>" on stderr.
void PrintError(const std::string& cmd, const std::string& msg);

}  // namespace attnflow::cli

#define ATTNFLOW_REGISTER_COMMAND(ident, name, description, ...)   \
  static const bool attnflow_cli_registered_##ident =              \
      ::attnflow::cli::RegisterCommand(name, description, __VA_ARGS__)
