// fault_cli_test.cc — fault matrix, CLI rows (docs/errors.md, "Command
// line"): wrong flags, missing files, unreadable files, a directory where a
// file is expected, output to an unwritable location. Each must give a
// clear message ("attnflow ...: error: ..." naming the path) and exit code
// 2, within a deadline (no hang), and leave no output or temporary file
// behind. Tests run as root, so "unwritable" uses paths whose parent is a
// regular file or lies in /proc, and "unreadable" uses a FIFO without a
// writer and /proc/self/mem.
//
// Subcommands are discovered from `attnflow --help`; rows for a subcommand
// that this build does not have are skipped.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include "util/cli_util.h"
#include "util/scratch_util.h"
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Runs the CLI under `timeout` so a hang fails the row (exit 124).
using Out = attnflow::testing::CliResult;
Out Cli(const std::string& args, int deadline_s = 60) {
  return attnflow::testing::RunCli(args, {.deadline_s = deadline_s, .stdin_null = true});
}

std::string Q(const std::string& s) { return "'" + s + "'"; }

std::set<std::string> Commands() {
  static const std::set<std::string> cmds = [] {
    std::set<std::string> s;
    std::istringstream in(Cli("--help").text);
    std::string line;
    bool in_subs = false;
    while (std::getline(in, line)) {
      if (line.rfind("Subcommands:", 0) == 0) {
        in_subs = true;
        continue;
      }
      if (!in_subs) continue;
      std::istringstream ls(line);
      std::string name;
      if (ls >> name) s.insert(name);
    }
    return s;
  }();
  return cmds;
}

bool Has(const std::string& cmd) { return Commands().count(cmd) != 0; }

// A scratch directory holding a regular file and a junk .safetensors file.
class Scratch : public attnflow::testing::ScratchDir {
 public:
  Scratch() : ScratchDir("attnflow_fault_cli") {
    std::ofstream(path() / "plain.txt") << "a regular file, not a directory\n";
    std::ofstream(path() / "junk.safetensors") << "definitely not a safetensors file";
  }
  // Every entry of the directory (to prove nothing was left behind).
  std::set<std::string> Listing() const {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(path())) s.insert(e.path().filename().string());
    return s;
  }
};

void ExpectUsageError(const Out& o, const std::string& what, const std::string& must_mention = "") {
  EXPECT_EQ(o.code, 2) << what << "\n" << o.text;
  EXPECT_NE(o.text.find("error"), std::string::npos) << what << ": no error message\n" << o.text;
  if (!must_mention.empty()) {
    EXPECT_NE(o.text.find(must_mention), std::string::npos)
        << what << ": message does not name " << must_mention << "\n" << o.text;
  }
}

TEST(FaultCli, SubcommandsAreDiscovered) {
  EXPECT_TRUE(Has("verify")) << "attnflow --help lists no 'verify'";
  EXPECT_TRUE(Has("golden"));
}

TEST(FaultCli, UnknownFlagsAndBadValuesOnEverySubcommand) {
  for (const std::string& c : Commands()) {
    ExpectUsageError(Cli(c + " --no-such-flag-xyz"), c + " --no-such-flag-xyz");
  }
  ExpectUsageError(Cli("--no-such-flag-xyz"), "top-level unknown flag");
  ExpectUsageError(Cli("no-such-command"), "unknown subcommand");
  ExpectUsageError(Cli("verify --atol -1 x.safetensors"), "verify --atol -1");
  ExpectUsageError(Cli("verify --impl fastest x.safetensors"), "verify --impl fastest");
  ExpectUsageError(Cli("golden --heads 0 --out /tmp/x"), "golden --heads 0");
  ExpectUsageError(Cli("golden --q-len abc --out /tmp/x"), "golden --q-len abc");
  ExpectUsageError(Cli("golden --causal diagonal --out /tmp/never.safetensors"), "golden --causal diagonal");
  EXPECT_FALSE(fs::exists("/tmp/never.safetensors"));
  if (Has("bench")) ExpectUsageError(Cli("bench --no-such-mode"), "bench bad flag");
}

TEST(FaultCli, MissingArgumentsAndMissingFiles) {
  Scratch s;
  ExpectUsageError(Cli("verify"), "verify without files");
  ExpectUsageError(Cli("verify " + s.P("missing.safetensors")), "verify missing file", "missing.safetensors");
  ExpectUsageError(Cli("verify --compare " + s.P("junk.safetensors")), "verify --compare one file");
  ExpectUsageError(Cli("verify --compare " + s.P("missing1.st") + " " + s.P("missing2.st")),
                   "verify --compare missing", "missing1.st");
  ExpectUsageError(Cli("verify " + s.P("junk.safetensors")), "verify junk", "junk.safetensors");
  if (Has("trace")) {
    ExpectUsageError(Cli("trace --from " + s.P("missing.json")), "trace --from missing", "missing.json");
    ExpectUsageError(Cli("trace --from " + s.P("junk.safetensors")), "trace --from junk", "junk.safetensors");
  }
  if (Has("budget")) {
    ExpectUsageError(Cli("budget --config " + s.P("missing.json")), "budget --config missing", "missing.json");
  }
  if (Has("embed")) {
    ExpectUsageError(Cli("embed --model " + s.P("no_model_dir") + " hello"), "embed --model missing",
                     "no_model_dir");
  }
  if (Has("generate")) {
    ExpectUsageError(Cli("generate --model " + s.P("missing.gguf") + " --prompt hi"),
                     "generate --model missing", "missing.gguf");
  }
}

TEST(FaultCli, DirectoryWhereAFileIsExpected) {
  Scratch s;
  const std::string dir = s.P("");
  ExpectUsageError(Cli("verify " + dir), "verify DIR");
  ExpectUsageError(Cli("verify --compare " + dir + " " + dir), "verify --compare DIR DIR");
  if (Has("trace")) ExpectUsageError(Cli("trace --from " + dir), "trace --from DIR");
  if (Has("budget")) ExpectUsageError(Cli("budget --config " + dir), "budget --config DIR");
  if (Has("generate")) ExpectUsageError(Cli("generate --model " + dir + " --prompt hi"), "generate --model DIR");
  // Output onto an existing directory: refused, the directory untouched.
  fs::create_directories(s.P("outdir"));
  const std::set<std::string> before = s.Listing();
  ExpectUsageError(Cli("golden --out " + s.P("outdir")), "golden --out DIR", "outdir");
  EXPECT_TRUE(fs::is_directory(s.P("outdir")));
  EXPECT_TRUE(fs::is_empty(s.P("outdir")));
  EXPECT_EQ(s.Listing(), before);
}

// Unreadable inputs for root: a FIFO with no writer (open(2) would block
// forever), /proc/self/mem (read fails), a path below a regular file.
TEST(FaultCli, UnreadableInputsFailFastWithExitTwo) {
  Scratch s;
  const std::string fifo = s.P("pipe.safetensors");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Out o = Cli("verify " + fifo, 10);
  EXPECT_NE(o.code, 124) << "verify on a FIFO without a writer hung (killed after 10 s)";
  ExpectUsageError(o, "verify FIFO", "pipe.safetensors");
  if (Has("trace")) {
    o = Cli("trace --from " + fifo, 10);
    EXPECT_NE(o.code, 124) << "trace --from FIFO hung";
    ExpectUsageError(o, "trace --from FIFO");
  }
  if (Has("budget")) {
    o = Cli("budget --config " + fifo, 10);
    EXPECT_NE(o.code, 124) << "budget --config FIFO hung";
    ExpectUsageError(o, "budget --config FIFO");
  }
  ExpectUsageError(Cli("verify /proc/self/mem"), "verify /proc/self/mem", "/proc/self/mem");
  ExpectUsageError(Cli("verify " + s.P("plain.txt") + "/x.safetensors"), "verify below a file", "plain.txt");
  if (Has("trace")) ExpectUsageError(Cli("trace --from /proc/self/mem"), "trace --from /proc/self/mem");
}

// Output to places that cannot be written (as root): below a regular file,
// below /proc/version, inside /proc, an empty path. Exit 2, the message names
// the path, and nothing (no file, no temporary) is left anywhere we can see.
TEST(FaultCli, UnwritableOutputsLeaveNothingBehind) {
  Scratch s;
  const std::set<std::string> before = s.Listing();
  const std::vector<std::string> bad = {s.P("plain.txt") + "/out.safetensors", "/proc/version/out.safetensors",
                                        "/proc/attnflow_out.safetensors", s.P("no/such/dir/out.safetensors")};
  for (const std::string& path : bad) {
    Out o = Cli("golden --out " + path);
    ExpectUsageError(o, "golden --out " + path, path);
    EXPECT_FALSE(fs::exists(path)) << path;
    if (Has("trace")) {
      o = Cli("trace --json " + path);
      ExpectUsageError(o, "trace --json " + path);
      o = Cli("trace --html " + path);
      ExpectUsageError(o, "trace --html " + path);
      o = Cli("trace --safetensors " + path);
      ExpectUsageError(o, "trace --safetensors " + path);
    }
  }
  ExpectUsageError(Cli("golden --out ''"), "golden --out ''");
  EXPECT_EQ(s.Listing(), before) << "files were left in the scratch directory";
  EXPECT_FALSE(fs::exists(s.P("no")));
  // No temporary files left in /proc or /tmp by the failed writes.
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
    const std::string n = e.path().filename().string();
    EXPECT_EQ(n.find(".out.safetensors.tmp-"), std::string::npos) << n;
    EXPECT_EQ(n.find(".attnflow_out.safetensors.tmp-"), std::string::npos) << n;
  }
}

// Writing "output" to a device node (e.g. --out /dev/null to discard it) must
// never replace the device with a regular file — as root the atomic
// temp-file + rename would do exactly that to /dev/null. Checked on a private
// device node (skipped where mknod is not permitted).
TEST(FaultCli, OutputToADeviceNeverReplacesIt) {
  Scratch s;
  const std::string dev = s.P("null_device");
  if (mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod not permitted here";
  }
  const Out o = Cli("golden --out " + dev);
  struct stat st;
  ASSERT_EQ(lstat(dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "golden --out on a character device replaced it with a "
                                   << (S_ISREG(st.st_mode) ? "regular file" : "non-device")
                                   << " (exit " << o.code << ")\n" << o.text;
  EXPECT_TRUE(o.code == 0 || o.code == 2) << o.text;
  // Same through a FIFO: writing must not replace it (nor hang on open).
  const std::string fifo = s.P("out_fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const Out f = Cli("golden --out " + fifo, 30);
  EXPECT_NE(f.code, 124) << "golden --out FIFO hung";
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "golden --out on a FIFO replaced it (exit " << f.code << ")";
}

}  // namespace
