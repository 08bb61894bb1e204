// smollm2_stage_dump.cc — every layer's forward stages of a decoder GGUF, for
// the per-stage error table of docs/quantize.md ("Logits vs transformers").
// Runs the prompts stored in a logits.safetensors (p<n>.ids, int32) through
// LoadDecoderModel + Forward with a StageCapture on each layer in turn (one
// prefill per layer, cache reset in between; capture does not change the
// computation) and writes OUT.safetensors with, for prompt n and layer l,
// "p<n>.l<l>.<stage>" (norm q k v concat out residual ffn_norm ffn block_out,
// float32, the shapes of docs/models-smollm2.md "Stage capture"), plus
// "p<n>.embed" and "p<n>.logits" [T, V]. Read by
// tools/quant/smollm2_stage_errors.py. Not part of the build or of CI:
// tools/quant/smollm2_stage_errors.sh compiles it against build/.
// Usage: smollm2_stage_dump MODEL.gguf REFS.safetensors OUT.safetensors [THREADS]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnflow/model.h"
#include "attnflow/safetensors.h"
#include "attnflow/stages.h"

using namespace attnflow;  // NOLINT: a small standalone tool

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf REFS.safetensors OUT.safetensors [THREADS]\n", argv[0]);
    return 2;
  }
  DecoderOptions o;
  o.num_threads = argc > 4 ? std::atoi(argv[4]) : 2;
  Result<std::unique_ptr<DecoderModel>> m = LoadDecoderModel(argv[1], o);
  if (!m.ok()) {
    std::fprintf(stderr, "stage_dump: %s\n", m.status().ToString().c_str());
    return 1;
  }
  Result<SafetensorsFile> refs = SafetensorsFile::Open(argv[2]);
  if (!refs.ok()) {
    std::fprintf(stderr, "stage_dump: %s\n", refs.status().ToString().c_str());
    return 1;
  }
  const int64_t layers = (*m)->info().num_layers;
  std::vector<std::pair<std::string, Tensor>> keep;
  static const std::vector<std::string> kStages = {"embed", "norm", "q", "k", "v", "concat", "out",
                                                   "residual", "ffn_norm", "ffn", "block_out"};
  for (int n = 0;; ++n) {
    const std::string p = "p" + std::to_string(n) + ".";
    Result<Tensor> ids_t = refs->Copy(p + "ids");
    if (!ids_t.ok()) break;
    const std::vector<int32_t> ids(ids_t->data<int32_t>(), ids_t->data<int32_t>() + ids_t->numel());
    for (int64_t l = 0; l < layers; ++l) {
      StageRecorder rec(kStages);
      (*m)->Reset();
      Tensor logits;
      Status st = (*m)->Forward(ids, true, &logits, {&rec, l});
      if (!st.ok() || !rec.status().ok()) {
        std::fprintf(stderr, "stage_dump: %s %s\n", st.ToString().c_str(), rec.status().ToString().c_str());
        return 1;
      }
      for (const auto& [name, t] : rec.stages()) {
        if (name == "embed") {
          if (l == 0) keep.emplace_back(p + "embed", Tensor::FromView(t.view()).value());
          continue;
        }
        keep.emplace_back(p + "l" + std::to_string(l) + "." + name, Tensor::FromView(t.view()).value());
      }
      if (l == 0) keep.emplace_back(p + "logits", std::move(logits));
    }
    std::fprintf(stderr, "stage_dump: prompt %d (%zu tokens) done\n", n, ids.size());
  }
  std::vector<std::pair<std::string, TensorView>> views;
  for (const auto& [name, t] : keep) views.emplace_back(name, t.view());
  Status st = WriteSafetensors(argv[3], views);
  if (!st.ok()) {
    std::fprintf(stderr, "stage_dump: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
