// cmd_quantize.cc — `attnflow quantize IN.gguf OUT.gguf --type
// q4_k_m|q5_k_m|q6_k|q8_0|q4_0`: rewrites a GGUF model with llama.cpp's
// tensor-type mixture for that file type (docs/quantize.md). Tensors already
// of their target type are copied; the others are dequantised to F32 and
// quantised (a requantisation when the input is already quantised, which
// llama.cpp only does with --allow-requantize: this command says so on
// stderr). OUT is written atomically; OUT naming IN (also through a link),
// weights the target type cannot hold (float16 scales overflow) and NaN or
// infinite weights are refused before anything is written. Exit 0 ok, 2
// usage or bad input.
#include <cstdio>
#include <string>

#include "attnflow/gguf.h"
#include "attnflow/threading.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type;
  int threads = 0;
};

int RunQuantize(const QuantizeArgs& a) {
  QuantMix mix;
  if (!ParseQuantMix(a.type, &mix)) {
    PrintError("quantize", "--type " + a.type + " is not one of q4_k_m q5_k_m q6_k q8_0 q4_0");
    return kExitUsage;
  }
  QuantizeStats st;
  Status s = QuantizeGguf(a.in, a.out, mix, a.threads, &st);
  if (!s.ok()) {
    PrintError("quantize", s.message());
    return kExitUsage;
  }
  std::string types;
  for (const auto& [name, n] : st.type_counts) types += " " + name + "=" + std::to_string(n);
  std::printf("quantize: %s -> %s (%s): %lld tensors (%lld copied, %lld converted), %.2f MB -> %.2f MB; types:%s\n",
              EscapeLine(a.in).c_str(), EscapeLine(a.out).c_str(), EscapeLine(a.type).c_str(), static_cast<long long>(st.tensors),
              static_cast<long long>(st.copied), static_cast<long long>(st.requantized), st.bytes_in / 1e6,
              st.bytes_out / 1e6, types.c_str());
  return kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(quantize, "quantize", "Write a GGUF model quantised with llama.cpp's mixture rules",
                          [](CLI::App& sub) -> std::function<int()> {
                            auto a = std::make_shared<QuantizeArgs>();
                            sub.add_option("in", a->in, "input GGUF")->required();
                            sub.add_option("out", a->out, "output GGUF (written atomically)")->required();
                            sub.add_option("--type", a->type, "q4_k_m | q5_k_m | q6_k | q8_0 | q4_0")->required();
                            sub.add_option("--threads", a->threads,
                                           "worker threads (0: all cores; at most " +
                                               std::to_string(kMaxPoolThreads) +
                                               " run; output does not depend on it)")
                                ->check(InRange(0, 1 << 20));
                            return [a] { return RunQuantize(*a); };
                          });

}  // namespace attnflow::cli
