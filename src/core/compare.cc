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

namespace {

// One walk over the elements; tol(e, x) is the tolerance of element e
// (flat row-major index) whose expected value is x.
template <typename Tol>
StageReport CompareWith(const std::string& name, const TensorView& got,
                        const TensorView& expected, Tol tol) {
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
  double d2 = 0, e2 = 0;  // sums of squares for rel_l2
  bool inf_differs = false, nan = false;
  const int64_t n = expected.numel();
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    const double g = got.load(got.offset(idx[0], idx[1], idx[2], idx[3]));
    const double x = expected.load(expected.offset(idx[0], idx[1], idx[2], idx[3]));
    bool ok;
    if (std::isnan(g) || std::isnan(x)) {
      ok = false;
      nan = true;
      r.max_abs = r.max_rel = std::numeric_limits<double>::quiet_NaN();
    } else if (std::isinf(x) || std::isinf(g)) {
      ok = g == x;
      inf_differs = inf_differs || !ok;
      if (!ok && !std::isnan(r.max_abs)) r.max_abs = r.max_rel = INFINITY;
    } else {
      d2 += (g - x) * (g - x);
      e2 += x * x;
      const double diff = std::fabs(g - x);
      const double t = tol(e, x);
      // Equal values always match: a bound derived from extreme inputs may be
      // NaN or inf, and a stage must still match itself.
      ok = diff == 0.0 || diff <= t;
      if (t > 0) r.max_ratio = std::max(r.max_ratio, diff / t);
      else if (diff > 0) r.max_ratio = INFINITY;
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
        r.bound_at_bad = std::isfinite(x) ? tol(e, x) : 0.0;
      }
      ++r.mismatches;
    }
    for (int d = got.rank - 1; d >= 0; --d) {
      if (++idx[d] < got.shape[d]) break;
      idx[d] = 0;
    }
  }
  r.match = r.mismatches == 0;
  r.rel_l2 = nan           ? std::numeric_limits<double>::quiet_NaN()
             : inf_differs ? INFINITY
             : e2 > 0      ? std::sqrt(d2 / e2)
             : d2 > 0      ? INFINITY
                           : 0.0;
  return r;
}

}  // namespace

StageReport CompareStage(const std::string& name, const TensorView& got,
                         const TensorView& expected, double atol, double rtol) {
  return CompareWith(name, got, expected,
                     [&](int64_t, double x) { return atol + rtol * std::fabs(x); });
}

StageReport CompareStageWithin(const std::string& name, const TensorView& got,
                               const TensorView& expected, const TensorView& bound,
                               const std::string& bound_type) {
  bool same = bound.rank == expected.rank;
  for (int i = 0; same && i < bound.rank; ++i) same = bound.shape[i] == expected.shape[i];
  if (!same) {
    StageReport r;
    r.stage = name;
    r.compared = true;
    r.note = "bound " + bound.shape_string() + " does not have the expected stage's shape " +
             expected.shape_string();
    return r;
  }
  const int64_t d1 = bound.rank > 1 ? bound.shape[1] : 1, d2 = bound.rank > 2 ? bound.shape[2] : 1,
                d3 = bound.rank > 3 ? bound.shape[3] : 1;
  StageReport r = CompareWith(name, got, expected, [&](int64_t e, double) {
    const int64_t i3 = e % d3, i2 = (e / d3) % d2, i1 = (e / d3 / d2) % d1, i0 = e / d3 / d2 / d1;
    return bound.load(bound.offset(i0, i1, i2, i3));
  });
  r.bound = bound_type;
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
