// attnflow/stages.h — explicit stage capture ("cheap when off").
//
// An implementation that supports capture takes a StageSink*. When the
// pointer is null nothing is copied or allocated. When non-null, the
// implementation asks Wants(name) before materialising a stage and calls
// Put(name, view) with a float64 (reference) or float32 (kernels) view that is
// only valid during the call. Stage names follow docs/golden-format.md:
// q k v scores scaled masked weights lse out heads_out concat.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnflow/tensor.h"

namespace attnflow {

class StageSink {
 public:
  virtual ~StageSink() = default;
  virtual bool Wants(std::string_view stage) const = 0;
  virtual void Put(std::string_view stage, const TensorView& value) = 0;
};

// Forwards the stages of an inner computation to `inner` under other names:
// map(stage) is the outer name, or an empty view to drop the stage. The one
// renaming sink of the project (a multi-head block reports its inner SDPA's
// "out" as "heads_out"; a model may drop stages it reports itself). A null
// inner sink wants nothing.
class RenamingSink : public StageSink {
 public:
  using Map = std::string_view (*)(std::string_view stage);
  RenamingSink(StageSink* inner, Map map) : inner_(inner), map_(map) {}
  bool Wants(std::string_view stage) const override {
    const std::string_view m = map_(stage);
    return inner_ != nullptr && !m.empty() && inner_->Wants(m);
  }
  void Put(std::string_view stage, const TensorView& value) override {
    const std::string_view m = map_(stage);
    if (inner_ != nullptr && !m.empty()) inner_->Put(m, value);
  }
  // The common map: everything unchanged except "out" -> "heads_out".
  static std::string_view OutAsHeadsOut(std::string_view s) {
    return s == "out" ? std::string_view("heads_out") : s;
  }

 private:
  StageSink* inner_;
  Map map_;
};

// Forwards every stage to `inner` under `prefix` + its name: a model that
// captures every layer reports layer l's "q" as "layer.<l>.q". A null inner
// sink wants nothing.
class PrefixSink : public StageSink {
 public:
  PrefixSink(StageSink* inner, std::string prefix) : inner_(inner), prefix_(std::move(prefix)) {}
  bool Wants(std::string_view stage) const override {
    return inner_ != nullptr && inner_->Wants(prefix_ + std::string(stage));
  }
  void Put(std::string_view stage, const TensorView& value) override {
    if (inner_ != nullptr) inner_->Put(prefix_ + std::string(stage), value);
  }

 private:
  StageSink* inner_;
  std::string prefix_;
};

// Keeps a deep copy of every stage it is given (all stages by default, or
// only those listed).
class StageRecorder : public StageSink {
 public:
  StageRecorder() = default;
  explicit StageRecorder(std::vector<std::string> only) : only_(std::move(only)) {}
  bool Wants(std::string_view stage) const override;
  void Put(std::string_view stage, const TensorView& value) override;
  const std::map<std::string, Tensor, std::less<>>& stages() const {
    return stages_;
  }
  const Tensor* Find(std::string_view name) const;
  // First error while copying (allocation failure), if any.
  const Status& status() const { return status_; }

 private:
  std::vector<std::string> only_;
  std::map<std::string, Tensor, std::less<>> stages_;
  Status status_;
};

}  // namespace attnflow
