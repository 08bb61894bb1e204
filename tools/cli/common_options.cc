// common_options.cc — the options several commands share (common_options.h).
#include "common_options.h"

namespace attnflow::cli {

CLI::Option* AddCausalOption(CLI::App& sub, std::string& causal) {
  return sub.add_option("--causal", causal, "none | top_left | bottom_right");
}

void AddWindowOptions(CLI::App& sub, int64_t& left, int64_t& right) {
  sub.add_option("--window-left", left, "Sliding window left (-1 unbounded)");
  sub.add_option("--window-right", right, "Sliding window right (-1 unbounded)");
}

}  // namespace attnflow::cli
