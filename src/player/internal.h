// player/internal.h — helpers shared by the src/player/ files (not installed).
//
// Invariants: nothing here throws; allocation failures of the heatmap
// figures surface as Status values of the writers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow::player::internal {

// Element i (row-major) of a contiguous float tensor, as double.
inline double Elem(const Tensor& t, int64_t i) { return t.view().load(i); }

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Per-head heatmap source: rows × cols values, row-major, optional labels.
struct Heatmap {
  std::string title;
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // -inf = masked
  std::vector<std::string> row_labels, col_labels;
  bool probabilities = false;  // 0..1 sequential scale (else diverging)
  int64_t pool = 1;            // > 1: values are pooled (stated in the title)
};
Result<std::string> HeatmapPng(const Heatmap& h);
std::string HeatmapSvg(const Heatmap& h);

}  // namespace attnflow::player::internal
