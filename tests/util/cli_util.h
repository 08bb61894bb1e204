// cli_util.h — the one way tests run the built `attnflow` binary (or any
// shell command) and collect its exit code and output.
//
// RunCli("verify x.safetensors", {...}) runs `<env> ATTNFLOW_CLI args` through
// the shell (so args may quote), optionally under `timeout` (a hang becomes
// exit 124 instead of a stuck test), optionally with stdin from /dev/null,
// with stderr merged into the captured text unless asked otherwise.
// RunCliJsonLines runs it for JSON output: exit 0 and one JSON document per
// line. ForkOnPty starts a binary on a pseudo-terminal instead (for what the CLI
// does only on a terminal: line editing, the progress line).
// Nothing here computes expected values.
#pragma once

#include <gtest/gtest.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace attnflow::testing {

struct CliResult {
  int code = -1;     // exit code; -1 if the process did not exit normally
  std::string text;  // stdout (+ stderr when merged)
};

struct CliOptions {
  std::string env;          // prefix, e.g. "ATTNFLOW_NUM_THREADS=2" or "env -u X"
  int deadline_s = 0;       // > 0: run under `timeout -k 5 deadline_s`
  bool stdin_null = false;  // stdin from /dev/null
  bool merge_stderr = true; // false: stderr is discarded
};

// Runs an arbitrary shell command line.
inline CliResult RunShell(const std::string& cmd_line, const CliOptions& o = {}) {
  std::string cmd = o.env + " ";
  if (o.deadline_s > 0) cmd += "timeout -k 5 " + std::to_string(o.deadline_s) + " ";
  cmd += cmd_line + (o.merge_stderr ? " 2>&1" : " 2>/dev/null");
  if (o.stdin_null) cmd += " </dev/null";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.text.append(buf.data(), n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Runs the attnflow CLI built with the tests (ATTNFLOW_CLI) with `args`.
inline CliResult RunCli(const std::string& args, const CliOptions& o = {}) {
  return RunShell(std::string(ATTNFLOW_CLI) + " " + args, o);
}

// Runs the CLI with `args` (stderr discarded), asserts exit 0 and parses
// each non-empty line of stdout as one JSON document into *rows (a line that
// does not parse fails the test). Callers wrap it in ASSERT_NO_FATAL_FAILURE.
inline void RunCliJsonLines(const std::string& args, std::vector<nlohmann::json>* rows) {
  const CliResult r = RunCli(args, {.merge_stderr = false});
  ASSERT_EQ(r.code, 0) << args << "\n" << r.text;
  std::istringstream in(r.text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    rows->push_back(nlohmann::json::parse(line, nullptr, false));
    ASSERT_FALSE(rows->back().is_discarded()) << line;
  }
}

// Starts `args` (args[0] the binary's path) on a new pseudo-terminal
// (forkpty) with ATTNFLOW_NUM_THREADS=2 and, when not empty, the "NAME=value"
// `env_kv`; returns the child's pid (-1 on failure) and the terminal's
// master side in *fd. The caller reads *fd, then waits for the child.
inline pid_t ForkOnPty(const std::vector<std::string>& args, const std::string& env_kv, int* fd) {
  const pid_t pid = forkpty(fd, nullptr, nullptr, nullptr);
  if (pid == 0) {
    if (!env_kv.empty()) putenv(const_cast<char*>(env_kv.c_str()));
    setenv("ATTNFLOW_NUM_THREADS", "2", 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace attnflow::testing
