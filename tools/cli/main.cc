// main.cc — the `attnflow` command: a thin layer over the library.
// Each subcommand lives in its own cmd_*.cc and registers itself here.
// Exit codes: 0 ok, 1 a check failed (verify mismatch), 2 usage error or
// unreadable/invalid input.
#include <cstdio>
#include <string>

#include "cli_common.h"

int main(int argc, char** argv) {
  return attnflow::cli::Main(argc, argv);
}
