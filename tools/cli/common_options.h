// common_options.h — options that several `attnflow` commands declare alike:
// one declaration (flag, help text, default, check) serves them all, so the
// commands cannot drift apart.
//
// Invariants: a helper adds exactly the options it names, with the same
// text and check in every command; defaults are the bound variables' values
// (shown in --help by always_capture_default, cli_common.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace attnflow::cli {

// --causal "none | top_left | bottom_right". The value is checked when the
// command runs (ParseCausal), so the error names the command.
CLI::Option* AddCausalOption(CLI::App& sub, std::string& causal);

// --window-left / --window-right: the sliding window around each query's
// bottom-right diagonal (docs/semantics.md); -1 is unbounded.
void AddWindowOptions(CLI::App& sub, int64_t& left, int64_t& right);

}  // namespace attnflow::cli
