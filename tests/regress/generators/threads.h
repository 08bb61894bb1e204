// threads.h — generator of the hostile thread-start cases (issue 34, class
// "a worker thread that cannot start"): thread counts asked for by
// ATTNFLOW_NUM_THREADS or --threads, crossed with the commands that start a
// pool (trace, generate, bench, quantize) and an address-space limit that
// leaves room for only some of the threads' stacks. Rule (threading.h,
// docs/errors.md H6): every run ends (no hang, no abort, no signal) with
// exit 0 and the warning "asked for N threads, running with M", or a clear
// "attnflow <cmd>: error:" and exit 2.
//
// Used by tests/fault/fault_hostile3_test.cc. Deterministic: no randomness.
#pragma once

#include <string>
#include <vector>

namespace attnflow::regress {

struct ThreadCase {
  std::string name;     // for the test log
  std::string env;      // environment assignments, e.g. "ATTNFLOW_NUM_THREADS=1000"
  std::string args;     // attnflow arguments (paths already filled in)
  bool needs_limit;     // true: run under the address-space limit
};

// ATTNFLOW_NUM_THREADS values a user or a hostile environment may set: far
// more than the machine has, more than kMaxPoolThreads, INT_MAX, values
// that are not numbers or do not fit an int, negative.
inline std::vector<std::string> HostileThreadCounts() {
  return {"1000", "5000", "2147483647", "99999999999999999999", "-3", "abc", "12x", " 7"};
}

// `tiny_gguf`: a small llama GGUF (generate); `quant_gguf`: a GGUF that
// quantize converts (quantize.h WeightsGguf); `dir`: a scratch directory
// for outputs.
inline std::vector<ThreadCase> ThreadCases(const std::string& tiny_gguf,
                                           const std::string& quant_gguf, const std::string& dir) {
  std::vector<ThreadCase> out;
  const std::string trace = "trace --json " + dir + "/t.json";
  const std::string gen = "generate --model " + tiny_gguf + " --prompt ab --max-tokens 2 --quiet";
  const std::string bench = "bench prefill --q-len 8 --kv-len 8 --heads 1 --repeat 1 --no-peak";
  for (const std::string& n : HostileThreadCounts()) {
    out.push_back({"trace N=" + n, "ATTNFLOW_NUM_THREADS='" + n + "'", trace, false});
    out.push_back({"generate N=" + n, "ATTNFLOW_NUM_THREADS='" + n + "'", gen, false});
  }
  // The reported failures: 1000 threads whose stacks do not fit the limit.
  out.push_back({"trace N=1000 limited", "ATTNFLOW_NUM_THREADS=1000", trace, true});
  out.push_back({"generate N=1000 limited", "ATTNFLOW_NUM_THREADS=1000", gen, true});
  out.push_back({"bench --threads 1000 limited", "", bench + " --threads 1000", true});
  out.push_back({"quantize --threads 1000 limited", "",
                 "quantize " + quant_gguf + " " + dir + "/q.gguf --type q8_0 --threads 1000", true});
  return out;
}

}  // namespace attnflow::regress
