// cli_lab_test.cc — runs every command of docs/lab.md, in order, with the
// INSTALLED CLI from a scratch directory, and checks what the doc says each
// one does and every number it tells the student to compare.
//
// Rules (stated in docs/lab.md): every line of a ```sh block is a command run
// in one bash session (so `export LAB=...` and `cd $LAB` carry over). The
// session is what a learner away from the repository has: the CLI installed
// by `cmake --install` into a temporary prefix (PREFIX/bin first on PATH,
// LAB_PORT = PREFIX/share/attnflow/lab_port.py), the system's python3 (no
// project venv, no NumPy), and a working directory that is not the
// repository. A trailing `# exit N` is the expected exit status (0 when
// absent); `# shows: TEXT` is text the command's output (stdout + stderr)
// contains; items are separated by "; ". Numbers the doc quotes are `shows:`
// items of the commands that print them (both sides of a comparison), so a
// doc that drifts from the program fails here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "util/cli_util.h"

namespace attnflow {
namespace {

struct LabCommand {
  std::string line;  // the command as written (comment stripped)
  int exit = 0;
  std::vector<std::string> shows;
};

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<LabCommand> ParseLab(const std::string& path) {
  std::ifstream in(path);
  std::vector<LabCommand> cmds;
  bool in_sh = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      in_sh = !in_sh && line == "```sh";
      continue;
    }
    if (!in_sh || Trim(line).empty() || Trim(line)[0] == '#') continue;
    LabCommand c;
    const size_t hash = line.find("  # ");
    c.line = Trim(line.substr(0, hash));
    if (hash != std::string::npos) {
      std::stringstream ann(line.substr(hash + 4));
      std::string item;
      while (std::getline(ann, item, ';')) {
        item = Trim(item);
        if (item.rfind("exit ", 0) == 0) c.exit = std::stoi(item.substr(5));
        else if (item.rfind("shows: ", 0) == 0) c.shows.push_back(item.substr(7));
      }
    }
    cmds.push_back(c);
  }
  return cmds;
}

TEST(CliLab, EveryCommandInTheLabDoesWhatTheDocSays) {
  const std::string src = ATTNFLOW_SOURCE_DIR;
  const std::vector<LabCommand> cmds = ParseLab(src + "/docs/lab.md");
  ASSERT_GE(cmds.size(), 30u) << "docs/lab.md lost its commands";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("attnflow_lab_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "work");
  // Install the CLI and the lab's port as a user would.
  const std::string build = std::filesystem::path(ATTNFLOW_CLI).parent_path().string();
  const testing::CliResult inst = testing::RunShell(
      "cmake --install '" + build + "' --prefix '" + (dir / "prefix").string() + "' 2>&1");
  ASSERT_EQ(inst.code, 0) << inst.text;
  ASSERT_TRUE(std::filesystem::exists(dir / "prefix/bin/attnflow")) << inst.text;
  ASSERT_TRUE(std::filesystem::exists(dir / "prefix/share/attnflow/lab_port.py")) << inst.text;
  // One bash session: each command's output and status go to files.
  std::ofstream sh(dir / "lab.sh");
  sh << "cd '" << (dir / "work").string() << "' || exit 99\n"
     << "export PATH='" << (dir / "prefix/bin").string() << ":/usr/local/bin:/usr/bin:/bin'\n"
     << "export LAB_PORT='" << (dir / "prefix/share/attnflow/lab_port.py").string() << "'\n"
     << "unset ATTNFLOW_VENV VIRTUAL_ENV PYTHONPATH\n";
  for (size_t i = 0; i < cmds.size(); ++i)
    sh << "{ " << cmds[i].line << " ; } > '" << (dir / (std::to_string(i) + ".out")).string()
       << "' 2>&1 </dev/null; echo $? > '" << (dir / (std::to_string(i) + ".rc")).string()
       << "'\n";
  sh << "[ -n \"$LAB\" ] && case \"$LAB\" in /tmp/*) rm -rf \"$LAB\";; esac\n";
  sh.close();
  const testing::CliResult r = testing::RunShell("bash '" + (dir / "lab.sh").string() + "'");
  ASSERT_EQ(r.code, 0) << r.text;
  for (size_t i = 0; i < cmds.size(); ++i) {
    std::ifstream rc_in(dir / (std::to_string(i) + ".rc"));
    int rc = -1;
    rc_in >> rc;
    std::ifstream out_in(dir / (std::to_string(i) + ".out"));
    const std::string out((std::istreambuf_iterator<char>(out_in)),
                          std::istreambuf_iterator<char>());
    EXPECT_EQ(rc, cmds[i].exit) << "docs/lab.md: `" << cmds[i].line << "`\n" << out;
    for (const std::string& s : cmds[i].shows)
      EXPECT_NE(out.find(s), std::string::npos)
          << "docs/lab.md: `" << cmds[i].line << "` does not show \"" << s << "\"\n" << out;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnflow
