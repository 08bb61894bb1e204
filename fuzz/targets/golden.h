// golden.h (fuzz harness) — `attnflow verify`'s input path on arbitrary bytes:
// SafetensorsFile::FromBuffer -> ValidateGoldenCase -> VerifyGoldenCase
// (reference and, for sdpa, the fast kernels), plus CompareFiles of the file
// against itself (`verify --compare`).
//
// Properties beyond "no crash, no sanitizer report, no escaping exception":
//  * a rejected case gives kCorrupt / kUnimplemented / kResourceExhausted and
//    a message that names the file ("golden: fuzz.golden: ...");
//  * an accepted case verifies without error (or kResourceExhausted) with the
//    reference, and with the kernels for kind sdpa; the report lists the
//    canonical stages in order;
//  * comparing a file with itself matches every stage that holds no NaN
//    (when its atol/rtol metadata are valid).
// Verification is skipped when the problem is large (the fuzzer would spend
// its time in the scalar float64 reference); the size limits of hostile cases
// are covered by tests/fault_golden_test.cc instead.
#pragma once

#include <cmath>
#include <string>

#include "../common/fuzz_common.h"
#include "attnflow/golden.h"
#include "attnflow/safetensors.h"

namespace attnflow_fuzz {

namespace golden_detail {

inline bool HasNaN(const attnflow::TensorView& v) {
  int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  if (!attnflow::IsFloat(v.dtype)) return false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(v.load(i))) return true;
  }
  return false;
}

inline bool ValidTol(const std::map<std::string, std::string>& meta, const char* key) {
  auto it = meta.find(key);
  if (it == meta.end()) return true;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  return !it->second.empty() && end == it->second.c_str() + it->second.size() &&
         std::isfinite(v) && v >= 0;
}

inline double Work(const attnflow::GoldenCase& c) {
  if (c.kind == "sdpa") {
    return static_cast<double>(c.q.shape[0]) * static_cast<double>(c.q.shape[1]) *
           static_cast<double>(c.q.shape[2]) * static_cast<double>(c.k.shape[2]) *
           static_cast<double>(c.q.shape[3] + c.v.shape[3] + 4);
  }
  const double B = static_cast<double>(c.x_q.shape[0]);
  const double Lq = static_cast<double>(c.x_q.shape[1]), E = static_cast<double>(c.x_q.shape[2]);
  const double Lk = static_cast<double>(c.x_k.shape[1]);
  const double H = static_cast<double>(c.weights.num_heads);
  return B * (Lq + 2 * Lk + Lq) * (E + 1) * (E + 1) + B * H * (Lq + 1) * (Lk + 1) * (E + 4);
}

}  // namespace golden_detail

inline void FuzzGolden(const uint8_t* data, size_t size) {
  using namespace attnflow;
  const std::string label = "fuzz.golden";
  Result<SafetensorsFile> f = SafetensorsFile::FromBuffer(data, size, label);
  if (!f.ok()) return;  // the safetensors target checks this part

  // verify --compare FILE FILE
  {
    Result<SafetensorsFile> g = SafetensorsFile::FromBuffer(data, size, label);
    FUZZ_CHECK(g.ok(), "second parse of the same bytes failed");
    Result<CaseReport> rep = CompareFiles(g.value(), f.value(), -1, -1);
    if (rep.ok()) {
      const bool tol_ok = golden_detail::ValidTol(f->metadata(), "atol") &&
                          golden_detail::ValidTol(f->metadata(), "rtol");
      for (const auto& s : rep->stages) {
        if (!s.compared || s.match || !tol_ok) continue;
        Result<TensorView> v = f->Get(s.stage);
        FUZZ_CHECK(v.ok() && golden_detail::HasNaN(v.value()),
                   "stage '" + s.stage + "' does not match itself: " + s.note);
      }
    } else {
      // Only tensors Get() cannot hand out (rank > 4) and invalid atol/rtol
      // metadata in EXPECTED (bug 4: a port 1000x off must not "match")
      // make CompareFiles fail.
      FUZZ_CHECK(rep.status().code() == StatusCode::kUnimplemented ||
                     rep.status().code() == StatusCode::kResourceExhausted ||
                     (rep.status().code() == StatusCode::kCorrupt &&
                      (rep.status().message().find("metadata 'atol'") != std::string::npos ||
                       rep.status().message().find("metadata 'rtol'") != std::string::npos)),
                 "CompareFiles failed: " + rep.status().ToString());
    }
  }

  Result<GoldenCase> c = ValidateGoldenCase(std::move(f).value());
  if (!c.ok()) {
    const Status& st = c.status();
    FUZZ_CHECK(st.code() == StatusCode::kCorrupt || st.code() == StatusCode::kUnimplemented ||
                   st.code() == StatusCode::kResourceExhausted,
               "unexpected status " + st.ToString());
    FUZZ_CHECK(st.message().find(label) != std::string::npos,
               "message does not name the file: " + st.ToString());
    return;
  }
  if (golden_detail::Work(c.value()) > 2e6) return;
  for (VerifyImpl impl : {VerifyImpl::kReference, VerifyImpl::kKernels}) {
    if (impl == VerifyImpl::kKernels && c->kind != "sdpa") continue;
    Result<CaseReport> rep = VerifyGoldenCase(c.value(), impl);
    if (!rep.ok()) {
      // (Bug 12, fixed: mha weight shapes are validated at load; regression
      // test FaultGolden.MhaWeightShapesAreValidatedAtLoad.)
      FUZZ_CHECK(rep.status().code() == StatusCode::kResourceExhausted,
                 "verifying an accepted case failed: " + rep.status().ToString());
      continue;
    }
    const auto& order = GoldenStageOrder(c->kind);
    FUZZ_CHECK(rep->stages.size() == order.size(), "report does not list every stage");
    for (size_t i = 0; i < order.size() && i < rep->stages.size(); ++i) {
      FUZZ_CHECK(rep->stages[i].stage == order[i], "stages out of canonical order");
    }
  }
}

ATTNFLOW_FUZZ_REGISTER(golden, FuzzGolden);

}  // namespace attnflow_fuzz
