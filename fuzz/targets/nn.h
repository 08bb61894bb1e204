// nn.h (fuzz harness) — the nn inputs that come from files: nn golden cases
// (`attnflow verify` of kind nn_*, VerifyNnCase on FromBuffer) and model
// shape JSON (`attnflow budget --config FILE`: ParseModelShapeJson, then
// ComputeBudget and FormatBudget).
//
// Input byte 0: even = golden case (the rest is a safetensors image), odd =
// model-shape JSON (the rest; seq_len and context come from two more bytes).
// Properties: nothing crashes, hangs or leaks; errors are Status values with
// the file named (golden) — kCorrupt / kUnimplemented / kResourceExhausted /
// kInvalidArgument; an accepted budget has non-negative counts.
#pragma once

#include <string>

#include "../common/fuzz_common.h"
#include "attnflow/nn_budget.h"
#include "attnflow/nn_golden.h"
#include "attnflow/safetensors.h"

namespace attnflow_fuzz {

inline void FuzzNn(const uint8_t* data, size_t size) {
  using namespace attnflow;
  ByteReader in(data, size);
  const uint8_t mode = in.U8();
  if ((mode & 1) == 0) {
    const std::string rest = in.Rest();
    Result<SafetensorsFile> f = SafetensorsFile::FromBuffer(
        reinterpret_cast<const uint8_t*>(rest.data()), rest.size(), "fuzz.nn");
    if (!f.ok()) return;
    // Bound the work: the float64 reference of a block is O(L^2 E + L E F);
    // skip files that carry more than 64k elements in total.
    int64_t elems = 0;
    for (const auto& t : f->tensors()) elems += t.nbytes();
    if (elems > (int64_t{256} << 10)) return;
    // (Bug 13, fixed: unaligned views load through memcpy; regression test
    // FaultSafetensors.UnalignedTensorViewsLoadWithoutUndefinedBehaviour.)
    Result<CaseReport> r = nn::VerifyNnCase(f.value());
    if (!r.ok()) {
      const StatusCode c = r.status().code();
      FUZZ_CHECK(c == StatusCode::kCorrupt || c == StatusCode::kUnimplemented ||
                     c == StatusCode::kResourceExhausted || c == StatusCode::kInvalidArgument,
                 "unexpected status " + r.status().ToString());
      FUZZ_CHECK(r.status().message().find("fuzz.nn") != std::string::npos,
                 "error does not name the file: " + r.status().ToString());
    }
    return;
  }
  const int64_t seq = static_cast<int64_t>(in.U16());
  const int64_t ctx = static_cast<int64_t>(in.U16());
  Result<nn::ModelShape> shape = nn::ParseModelShapeJson(in.Rest());
  if (!shape.ok()) {
    FUZZ_CHECK(shape.status().code() != StatusCode::kOk, "error without a code");
    return;
  }
  Result<nn::Budget> b = nn::ComputeBudget(shape.value(), seq, ctx);
  if (!b.ok()) return;
  FUZZ_CHECK(b->total_params >= 0 && b->total_flops >= 0 && b->kv_bytes_per_token >= 0,
             "negative budget: overflow not detected");
  (void)nn::FormatBudget(b.value());
}

ATTNFLOW_FUZZ_REGISTER(nn, FuzzNn);

}  // namespace attnflow_fuzz
