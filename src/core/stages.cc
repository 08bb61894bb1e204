// stages.cc — StageRecorder keeps deep copies of captured stages.
#include "attnflow/stages.h"

#include <algorithm>

namespace attnflow {

bool StageRecorder::Wants(std::string_view stage) const {
  if (only_.empty()) return true;
  return std::find(only_.begin(), only_.end(), stage) != only_.end();
}

void StageRecorder::Put(std::string_view stage, const TensorView& value) {
  Result<Tensor> copy = Tensor::FromView(value);
  if (!copy.ok()) {
    if (status_.ok()) status_ = copy.status();
    return;
  }
  stages_.insert_or_assign(std::string(stage), std::move(copy).value());
}

const Tensor* StageRecorder::Find(std::string_view name) const {
  auto it = stages_.find(name);
  return it == stages_.end() ? nullptr : &it->second;
}

}  // namespace attnflow
