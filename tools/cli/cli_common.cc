// cli_common.cc — command registry, the top-level parse with exit codes, and
// the one error style of every command.
//
// Invariants:
//  * Every error (parse or run time) is one line "attnflow <cmd>: error: ..."
//    (or "attnflow: error: ..." before a command is known) on stderr, exit 2.
//  * Usage lines say "attnflow", never the path of the binary.
//  * An unknown command is named and the commands are listed.
//  * Every option's default is in its help; every command's help ends with an
//    example (kExamples, unless the command set its own footer).
//  * Text the CLI did not write itself is printed through EscapeText /
//    EscapeLine (control characters as \xNN).
#include "cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "attnflow/model.h"
#include "attnflow/threading.h"

namespace attnflow::cli {
namespace {
struct Entry {
  std::string name, description;
  CommandSetup setup;
};
std::vector<Entry>& Registry() {
  static std::vector<Entry> r;
  return r;
}

// One example per command, printed at the end of its help.
const std::map<std::string, std::string>& Examples() {
  static const std::map<std::string, std::string> m = {
      {"bench", "attnflow bench prefill --heads 8 --q-len 1024 --head-dim 64 --causal top_left"},
      {"budget", "attnflow budget --config llama-3-8b --seq-len 2048 --json"},
      {"chat", "attnflow chat --model smollm2 --system \"You are terse.\""},
      {"demo", "attnflow demo"},
      {"embed", "attnflow embed \"The cat sat.\" \"A dog ran.\""},
      {"export-c", "attnflow export-c tests/data/golden/sdpa_basic.safetensors --out case.h"},
      {"generate", "attnflow generate --model smollm2 --prompt \"The capital of France is\" "
                   "--max-tokens 16"},
      {"golden", "attnflow golden --kind sdpa --q-len 4 --kv-len 4 --head-dim 8 --out case.safetensors"},
      {"models", "attnflow models"},
      {"quantize", "attnflow quantize model-f16.gguf model-q4_k_m.gguf --type q4_k_m"},
      {"ring", "mpirun -n 3 attnflow ring verify tests/data/golden/sdpa_basic.safetensors"},
      {"trace", "attnflow trace --model minilm --text \"The cat sat.\" --html page.html"},
      {"verify", "attnflow verify tests/data/golden/*.safetensors"},
  };
  return m;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string FormatBound(double v) {
  if (v >= 1e300) return "inf";
  if (v <= -1e300) return "-inf";
  char b[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// The first argument naming a registered command, or "".
std::string CommandInArgs(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    for (const Entry& e : Registry())
      if (e.name == s) return s;
  }
  return "";
}
}  // namespace

bool RegisterCommand(const char* name, const char* description,
                     CommandSetup setup) {
  Registry().push_back({name, description, std::move(setup)});
  return true;
}

namespace {
std::string Escape(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  auto hex = [&](unsigned char c) {
    char b[8];
    std::snprintf(b, sizeof b, "\\x%02x", c);
    out += b;
  };
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      const bool kept = keep_newlines && (c == '\n' || c == '\t');
      if ((c < 0x20 && !kept) || c == 0x7f) hex(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Strict UTF-8 (no overlongs, surrogates, > U+10FFFF).
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    const bool control = ok && ((cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
                                (cp >= 0x2066 && cp <= 0x2069));
    if (ok && !control) {
      out.append(s.substr(i, n));
      i += n;
    } else if (control) {
      for (size_t k = 0; k < n; ++k) hex(static_cast<unsigned char>(s[i + k]));
      i += n;
    } else {
      hex(c);
      ++i;
    }
  }
  return out;
}

// The command being run, for warnings raised below it (thread start-up).
std::string g_current_command;

void ThreadWarning(const std::string& message) { PrintWarning(g_current_command, message); }
}  // namespace

std::string EscapeText(std::string_view s) { return Escape(s, true); }
std::string EscapeLine(std::string_view s) { return Escape(s, false); }

std::string DumpJson(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', true, nlohmann::json::error_handler_t::replace);
}

void PrintError(const std::string& cmd, const std::string& msg) {
  std::fprintf(stderr, "attnflow%s%s: error: %s\n", cmd.empty() ? "" : " ", cmd.c_str(),
               EscapeText(msg).c_str());
}

void PrintWarning(const std::string& cmd, const std::string& msg) {
  std::fprintf(stderr, "attnflow%s%s: warning: %s\n", cmd.empty() ? "" : " ", cmd.c_str(),
               EscapeText(msg).c_str());
}

CLI::Validator InRange(double lo, double hi) {
  const std::string desc = "[" + FormatBound(lo) + " - " + FormatBound(hi) + "]";
  return CLI::Validator(
      [lo, hi](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not a number";
        if (std::isnan(v) || v < lo || v > hi)
          return "value " + in + " is out of range: must be in [" + FormatBound(lo) + ", " +
                 FormatBound(hi) + "]";
        return "";
      },
      desc);
}

CLI::Validator NonNegative() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not a number";
        if (std::isnan(v) || v < 0) return "value " + in + " must be >= 0";
        return "";
      },
      ">= 0");
}

CLI::Validator Finite() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not a number";
        if (!std::isfinite(v)) return "value " + in + " must be a finite number";
        return "";
      },
      "FINITE");
}

std::string Count(int64_t n, std::string_view one, std::string_view many) {
  return CountOf(n, one, many);
}

bool ResolveModel(const std::string& cmd, const std::string& value,
                  const std::string& default_key, std::string* path,
                  std::string* display) {
  const std::string key = value.empty() ? default_key : value;
  if (FindKnownModel(key) != nullptr) {
    Result<std::string> p = LocateModel(key);
    if (!p.ok()) {
      PrintError(cmd, p.status().message());
      return false;
    }
    *path = *p;
  } else if (value.empty()) {
    PrintError(cmd, "no --model given");
    return false;
  } else {
    // A bare word that is neither a known name nor an existing path: say which
    // names exist.
    if (value.find('/') == std::string::npos && ::access(value.c_str(), F_OK) != 0) {
      PrintError(cmd, LocateModel(value).status().message());
      return false;
    }
    *path = value;
  }
  *display = ModelDisplayName(*path);
  return true;
}

bool StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

int Main(int argc, char** argv) {
  // A pool that cannot start all its threads says so once, as a warning of
  // the command being run.
  SetThreadWarningHandler(&ThreadWarning);
  // Past `ulimit -f` a write fails with EFBIG (a clear error, the temporary
  // output removed) instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "attnflow — attention as an explicit, verifiable, fast dataflow.\n"
      "Exit codes: 0 ok, 1 a check failed, 2 usage error or invalid input.",
      "attnflow"};
  app.name("attnflow");
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnflow 0.1.0");
  std::map<std::string, std::function<int()>> actions;
  std::vector<std::pair<CLI::App*, std::string>> subs;
  auto& reg = Registry();
  std::sort(reg.begin(), reg.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  std::string names;
  for (const Entry& e : reg) names += (names.empty() ? "" : ", ") + e.name;
  for (auto& e : reg) {
    CLI::App* sub = app.add_subcommand(e.name, e.description);
    sub->option_defaults()->always_capture_default();
    actions[e.name] = e.setup(*sub);
    if (sub->get_footer().empty()) {
      auto it = Examples().find(e.name);
      if (it != Examples().end()) sub->footer("Example:\n  " + it->second);
    }
    subs.emplace_back(sub, e.name);
  }
  // After the subcommands: they would inherit it.
  app.footer("Commands: " + names + "\nRun 'attnflow COMMAND --help' for a command's options and an example.");
  // An unknown command: say so and list the commands (CLI11 would report it
  // as an extra positional).
  if (argc >= 2 && argv[1][0] != '-') {
    bool known = false;
    for (const Entry& e : reg) known = known || e.name == argv[1];
    if (!known) {
      PrintError("", "unknown command '" + std::string(argv[1]) + "'; commands: " + names);
      std::fprintf(stderr, "run 'attnflow --help' for an overview\n");
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return kExitOk;
  } catch (const CLI::CallForAllHelp& e) {
    app.exit(e);
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    app.exit(e);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    const std::string cmd = CommandInArgs(argc, argv);
    std::string msg = Trim(e.what());
    if (cmd.empty() && argc < 2) msg = "no command given; commands: " + names;
    PrintError(cmd, msg);
    std::fprintf(stderr, "run 'attnflow %s--help' for usage\n",
                 cmd.empty() ? "" : (cmd + " ").c_str());
    return kExitUsage;
  }
  for (auto& [sub, name] : subs) {
    if (sub->parsed()) {
      g_current_command = name;
      try {
        return actions[name]();
      } catch (const std::exception& e) {  // last-resort guard: never crash
        PrintError(name, std::string("unexpected failure: ") + e.what());
        return kExitUsage;
      }
    }
  }
  return kExitUsage;
}

}  // namespace attnflow::cli

namespace attnflow::cli {

Result<int64_t> ParseByteSize(const std::string& option, const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    pos = 0;
  }
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::pair<const char*, double> units[] = {
      {"", 1},           {"b", 1},           {"k", 1024.0},     {"kib", 1024.0},
      {"kb", 1e3},       {"m", 1048576.0},   {"mib", 1048576.0}, {"mb", 1e6},
      {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},  {"t", 1099511627776.0},
      {"tib", 1099511627776.0}, {"tb", 1e12}};
  for (const auto& [u, mult] : units) {
    if (pos > 0 && unit == u && std::isfinite(v) && v > 0 && v * mult < 9.2e18) {
      return static_cast<int64_t>(v * mult);
    }
  }
  return InvalidArgument(option + " '" + text +
                         "' is not a positive size (e.g. 512KiB, 24GiB, 1.5GB or bytes)");
}

}  // namespace attnflow::cli
