// compare.cc — CompareStage, MaxScaledError and CaseReport (see
// attnflow/compare.h).
// A NaN on either side is a bad element and makes max_abs / max_rel NaN, so
// a report never shows a small max_abs next to a NaN output; an infinity
// that differs makes them +inf.
#include "attnflow/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace attnflow {

bool CaseReport::ok() const {
  return std::all_of(stages.begin(), stages.end(),
                     [](const StageReport& s) { return !s.compared || s.match; });
}

const StageReport* CaseReport::FirstMismatch() const {
  for (const auto& s : stages)
    if (s.compared && !s.match) return &s;
  return nullptr;
}

StageReport CompareStage(const std::string& name, const TensorView& got,
                         const TensorView& expected, double atol, double rtol) {
  StageReport r;
  r.stage = name;
  bool same_shape = got.rank == expected.rank;
  for (int i = 0; same_shape && i < got.rank; ++i) same_shape = got.shape[i] == expected.shape[i];
  if (!same_shape) {
    r.compared = true;
    r.match = false;
    r.note = "shape " + got.shape_string() + " differs from expected " + expected.shape_string();
    return r;
  }
  r.compared = true;
  const int64_t n = expected.numel();
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    const double g = got.load(got.offset(idx[0], idx[1], idx[2], idx[3]));
    const double x = expected.load(expected.offset(idx[0], idx[1], idx[2], idx[3]));
    bool ok;
    if (std::isnan(g) || std::isnan(x)) {
      ok = false;
      r.max_abs = r.max_rel = std::numeric_limits<double>::quiet_NaN();
    } else if (std::isinf(x) || std::isinf(g)) {
      ok = g == x;
      if (!ok && !std::isnan(r.max_abs)) r.max_abs = r.max_rel = INFINITY;
    } else {
      const double diff = std::fabs(g - x);
      ok = diff <= atol + rtol * std::fabs(x);
      // std::max keeps a NaN already stored (NaN < v is false).
      r.max_abs = std::max(r.max_abs, diff);
      if (x != 0.0) r.max_rel = std::max(r.max_rel, diff / std::fabs(x));
    }
    if (!ok) {
      if (r.mismatches == 0) {
        r.first_bad = e;
        r.first_bad_index = ShapeString(idx, got.rank);
        r.got_at_bad = g;
        r.expected_at_bad = x;
      }
      ++r.mismatches;
    }
    for (int d = got.rank - 1; d >= 0; --d) {
      if (++idx[d] < got.shape[d]) break;
      idx[d] = 0;
    }
  }
  r.match = r.mismatches == 0;
  return r;
}

double MaxScaledError(const TensorView& got, const TensorView& expected) {
  double m = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double x = got.load(i), y = expected.load(i);
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return INFINITY;
      continue;
    }
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    m = std::max(m, std::fabs(x - y) / (1.0 + std::fabs(y)));
  }
  return m;
}

}  // namespace attnflow
