// internal.h — helpers shared by the src/trace/ files (not installed).
//
// Invariants: nothing here allocates outside Tensor::Zeros (so allocation
// failures are Status values) and nothing throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/stages.h"
#include "attnflow/trace.h"

namespace attnflow::trace::internal {

// Keeps a deep copy of every stage, in arrival order; stages can be moved
// out (unlike StageRecorder). Optionally renames one stage on the way in.
class Collector : public StageSink {
 public:
  // Which stages it keeps; the default keeps the page's stages and every
  // other name a layer reports, but not a model's final_norm and logits
  // (whole-vocabulary rows the page has no step for).
  using Filter = bool (*)(std::string_view stage);
  static bool PageStages(std::string_view s) { return s != "final_norm" && s != "logits"; }
  static bool Everything(std::string_view) { return true; }
  Collector() = default;
  explicit Collector(Filter f) : filter_(f) {}
  Collector(std::string from, std::string to)
      : rename_from_(std::move(from)), rename_to_(std::move(to)) {}
  bool Wants(std::string_view s) const override { return filter_(s); }
  void Put(std::string_view stage, const TensorView& value) override;
  const Status& status() const { return status_; }
  // Moves every collected stage into `out` in TraceStageOrder(), then any
  // other names in arrival order.
  void MoveOrdered(std::vector<NamedTensor>* out);
  std::vector<NamedTensor>& items() { return items_; }

 private:
  Filter filter_ = PageStages;
  std::string rename_from_, rename_to_;
  std::vector<NamedTensor> items_;
  Status status_;
};

const Tensor* FindIn(const std::vector<NamedTensor>& v, std::string_view name);

// Runs attnflow::Attention (the dispatching fast path) on F32 copies of
// q/k/v and compares with the reference stages. kv_lens (optional, I64 [B]):
// the key-padding mask the reference ran with (semantics.h), passed as is.
KernelCheck RunKernelCheck(const Tensor* q, const Tensor* k, const Tensor* v,
                           Causal causal, double scale,
                           const Tensor* heads_out, const Tensor* lse,
                           const Tensor* masked, const Tensor* weights,
                           const Tensor* kv_lens = nullptr);

// Element i (row-major) of a contiguous float tensor, as double.
inline double Elem(const Tensor& t, int64_t i) { return t.view().load(i); }
// A contiguous F32 copy (rounding once).
Result<Tensor> ToF32(const Tensor& t);
// The same from a view (any dtype and strides).
Result<Tensor> ViewToF32(const TensorView& v);

// Appends the "layers" view (views.cc): weights [1,H,L,L] of every layer.
Status AddLayersView(const std::vector<const Tensor*>& per_layer,
                     const std::vector<TraceToken>& tokens, Causal causal, Trace* t);

}  // namespace attnflow::trace::internal
