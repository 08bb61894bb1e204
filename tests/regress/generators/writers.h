// writers.h — generator of the interrupted-writer cases (issue 34, class
// "writers"): every command that writes a file, run so that the write fails
// part-way: past a file-size limit (ulimit -f: SIGXFSZ / EFBIG), or with its
// mapped input truncated under it (SIGBUS, caught by FileBytes' guard).
//
// Rule (attnflow/file_util.h, docs/errors.md): the command ends with exit 2
// and a message, the output path is untouched (absent here) and no
// temporary ".<name>.tmp-<pid>-<n>" is left in the directory.
//
// Used by tests/fault/fault_hostile3_test.cc. Deterministic.
#pragma once

#include <string>
#include <vector>

namespace attnflow::regress {

struct WriterCase {
  std::string name;
  std::string args;    // attnflow arguments writing `out`
  std::string out;     // the output path (file or directory)
};

// Writers whose output is larger than 512 bytes (one `ulimit -f 1` block),
// each writing into `dir`. `trace_json`: a trace page JSON (trace --from);
// `quant_gguf`: a GGUF that quantize converts.
inline std::vector<WriterCase> WriterCases(const std::string& dir, const std::string& trace_json,
                                           const std::string& quant_gguf) {
  return {
      {"golden", "golden --kind sdpa --q-len 16 --kv-len 16 --head-dim 16 --out " + dir + "/g.safetensors",
       dir + "/g.safetensors"},
      {"trace --json", "trace --json " + dir + "/t.json", dir + "/t.json"},
      {"trace --html", "trace --html " + dir + "/t.html", dir + "/t.html"},
      {"trace --safetensors", "trace --safetensors " + dir + "/t.safetensors",
       dir + "/t.safetensors"},
      {"trace --npy", "trace --npy " + dir + "/npy", dir + "/npy"},
      {"quantize", "quantize " + quant_gguf + " " + dir + "/q.gguf --type q8_0", dir + "/q.gguf"},
      {"trace --from --html", "trace --from " + trace_json + " --html " + dir + "/f.html",
       dir + "/f.html"},
  };
}

}  // namespace attnflow::regress
