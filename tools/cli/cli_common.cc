// cli_common.cc — command registry and the top-level parse with exit codes.
#include "cli_common.h"

#include <cstdio>
#include <map>
#include <memory>
#include <algorithm>
#include <vector>

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
}  // namespace

bool RegisterCommand(const char* name, const char* description,
                     CommandSetup setup) {
  Registry().push_back({name, description, std::move(setup)});
  return true;
}

void PrintError(const std::string& cmd, const std::string& msg) {
  std::fprintf(stderr, "attnflow %s: error: %s\n", cmd.c_str(), msg.c_str());
}

int Main(int argc, char** argv) {
  CLI::App app{
      "attnflow — attention as an explicit, verifiable, fast dataflow.\n"
      "Exit codes: 0 ok, 1 a check failed, 2 usage error or invalid input."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnflow 0.1.0");
  std::map<std::string, std::function<int()>> actions;
  std::vector<std::pair<CLI::App*, std::string>> subs;
  auto& reg = Registry();
  std::sort(reg.begin(), reg.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (auto& e : reg) {
    CLI::App* sub = app.add_subcommand(e.name, e.description);
    actions[e.name] = e.setup(*sub);
    subs.emplace_back(sub, e.name);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e) == 0 ? kExitOk : kExitOk;
  } catch (const CLI::CallForAllHelp& e) {
    app.exit(e);
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    app.exit(e);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "attnflow: error: %s\n", e.what());
    std::fprintf(stderr, "run 'attnflow --help' or 'attnflow COMMAND --help'\n");
    return kExitUsage;
  }
  for (auto& [sub, name] : subs) {
    if (sub->parsed()) {
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
