// cmd_models.cc — `attnflow models`: the models known by name (--model NAME),
// whether and where each is installed, with architecture, size on disk and
// weight dtype (quantisation), and every place that was searched.
// Exit: 0 (also when nothing is installed: the listing says how to install).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "attnflow/model.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

uint64_t DiskBytes(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    const auto n = std::filesystem::file_size(path, ec);
    return ec ? 0 : n;
  }
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(path, ec))
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  return total;
}

int RunModels(bool paths_only) {
  int installed = 0;
  for (const KnownModel& m : KnownModels()) {
    Result<std::string> p = LocateModel(m.key);
    if (paths_only) {
      if (p.ok()) std::printf("%s\t%s\n", m.key.c_str(), EscapeLine(*p).c_str());
      continue;
    }
    std::printf("%-8s %s\n", m.key.c_str(), m.display_name.c_str());
    if (!p.ok()) {
      std::printf("         not installed; install: %s\n", ModelInstallCommand(m).c_str());
      continue;
    }
    ++installed;
    std::printf("         path: %s\n", EscapeLine(*p).c_str());
    Result<std::unique_ptr<Model>> model = LoadModel(*p);
    if (!model.ok()) {
      std::printf("         cannot be opened: %s\n", EscapeText(model.status().message()).c_str());
      continue;
    }
    const ModelInfo& i = (*model)->info();
    std::printf("         architecture %s · %s · %s (%lld kv) · d_model %lld · "
                "%.1f M parameters · weights %s · %.1f MiB on disk · context %lld\n",
                EscapeLine(i.architecture).c_str(), Count(i.num_layers, "layer").c_str(),
                Count(i.num_heads, "head").c_str(), (long long)i.num_kv_heads, (long long)i.hidden,
                i.num_params / 1e6,
                EscapeLine(i.weight_dtype).c_str(), DiskBytes(*p) / 1048576.0,
                (long long)i.max_positions);
  }
  if (!paths_only) {
    std::printf("searched (in order):\n");
    for (const ModelSearchPlace& s : ModelSearchPlaces())
      std::printf("  %s (%s)\n", EscapeLine(s.dir).c_str(), EscapeLine(s.origin).c_str());
    std::printf("%d of %zu known models installed\n", installed, KnownModels().size());
  }
  return kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    models, "models",
    "List the models known by name (--model minilm|smollm2): installed path, architecture, "
    "size, weight dtype",
    [](CLI::App& sub) -> std::function<int()> {
      auto paths = std::make_shared<bool>(false);
      sub.add_flag("--paths", *paths, "Only 'NAME<TAB>PATH' lines of the installed models");
      return [paths] { return RunModels(*paths); };
    });

}  // namespace attnflow::cli
