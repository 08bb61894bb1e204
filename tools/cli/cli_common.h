// cli_common.h — shared plumbing of the `attnflow` command.
//
// Every subcommand registers itself with ATTNFLOW_REGISTER_COMMAND from its
// own cmd_*.cc file. Usage errors (unknown flag, missing argument, a bad
// value) exit 2; --help on any command prints help and exits 0.
//
// One error style for parse and run-time errors alike:
//   attnflow <command>: error: <message>
// (PrintError). Messages are escaped: invalid UTF-8 and control bytes print as
// \xNN (docs/errors.md). Every option's default is shown in its help
// (always_capture_default) and every command's help ends with an example
// (kExamples in cli_common.cc, or RegisterCommand's `example`).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "attnflow/status.h"
namespace attnflow {
struct CaseReport;
}

namespace attnflow::cli {

constexpr int kExitOk = 0;
constexpr int kExitCheckFailed = 1;
constexpr int kExitUsage = 2;  // also: unreadable or invalid input

// Configures `sub` (options, positionals) and returns the action to run after
// a successful parse; the action returns the exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App& sub)>;

bool RegisterCommand(const char* name, const char* description,
                     CommandSetup setup);
// The setup of a command whose options fill one Args struct: `add` binds
// them to `sub`; after a successful parse the action is run(args).
template <typename Args, typename Run>
CommandSetup ArgsCommand(void (*add)(CLI::App& sub, Args& a), Run run) {
  return [add, run](CLI::App& sub) -> std::function<int()> {
    auto a = std::make_shared<Args>();
    add(sub, *a);
    return [a, run] { return run(*a); };
  };
}
int Main(int argc, char** argv);

// "attnflow <cmd>: error: <msg>" on stderr (msg escaped, see EscapeText).
void PrintError(const std::string& cmd, const std::string& msg);
// "attnflow <cmd>: warning: <msg>" on stderr (msg escaped).
void PrintWarning(const std::string& cmd, const std::string& msg);

// The one escaping of text the CLI prints that it did not write itself
// (anything read from a file, a model's vocabulary, an argument or an
// environment variable), so that a file cannot drive the terminal: valid
// UTF-8 is kept except control characters, which become \xNN per byte:
// C0 controls (ESC included) other than \n and \t, DEL, the C1 controls
// U+0080..U+009F (CSI U+009B starts an escape sequence on some terminals) and
// the bidirectional overrides and isolates U+202A..U+202E, U+2066..U+2069
// (they reorder what is shown). Invalid UTF-8 bytes also become \xNN.
std::string EscapeText(std::string_view s);
// The same for a one-line field (a name, a token, a note): \n and \t are
// escaped too, so a field cannot start a line of its own.
std::string EscapeLine(std::string_view s);
// Every JSON document the CLI prints or writes: compact (indent < 0) or
// indented; non-ASCII characters as \uXXXX (so no C1 control or bidi
// override reaches a terminal raw; JSON readers see the same strings) and
// invalid UTF-8 replaced by U+FFFD instead of throwing.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

// Validators with readable bounds (CLI::Range prints doubles with six
// decimals and NonNegativeNumber prints DBL_MAX in full); NaN is rejected.
CLI::Validator InRange(double lo, double hi);
CLI::Validator NonNegative();
CLI::Validator Finite();

// The value of --model: "" -> the model `default_key`; a known name
// ("minilm", "smollm2") -> its installed path (attnflow::LocateModel); else a
// path, used as given. Sets *path and *display (the name to show). On error
// prints it (every place looked + the install command) and returns false.
bool ResolveModel(const std::string& cmd, const std::string& value,
                  const std::string& default_key, std::string* path,
                  std::string* display);

// "1 token", "2 tokens": a count with its noun in the right number
// (`many` defaults to `one` + "s").
std::string Count(int64_t n, std::string_view one, std::string_view many = {});

// A byte size: "320KiB", "4MiB", "1.5GB", "4096" (bytes); binary (KiB, MiB,
// GiB, TiB) and decimal (KB, MB, GB, TB) units, case-insensitive, optional
// "B". Errors name `option`.
Result<int64_t> ParseByteSize(const std::string& option, const std::string& text);
// The text report of one checked golden case (`verify`, `ring verify`): a
// header line, one line per stage (unless quiet) and the verdict, with
// every name from the file escaped (EscapeLine).
void PrintCaseReport(const CaseReport& r, double atol, double rtol, bool quiet);

// True when stderr is a terminal (progress lines are drawn only then).
bool StderrIsTerminal();

}  // namespace attnflow::cli

#define ATTNFLOW_REGISTER_COMMAND(ident, name, description, ...)   \
  static const bool attnflow_cli_registered_##ident =              \
      ::attnflow::cli::RegisterCommand(name, description, __VA_ARGS__)
