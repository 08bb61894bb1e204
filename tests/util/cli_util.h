// cli_util.h — the one way tests run the built `attnflow` binary (or any
// shell command) and collect its exit code and output.
//
// RunCli("verify x.safetensors", {...}) runs `<env> ATTNFLOW_CLI args` through
// the shell (so args may quote), optionally under `timeout` (a hang becomes
// exit 124 instead of a stuck test), optionally with stdin from /dev/null,
// with stderr merged into the captured text unless asked otherwise.
// Nothing here computes expected values.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

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

}  // namespace attnflow::testing
