// attnflow/compare.h — the stage comparison every check in attnflow uses
// (golden cases, nn golden kinds, `verify --compare`, ports).
//
// Rule: an element matches when |got − expected| <= atol + rtol·|expected|;
// a NaN on either side is a bad element; an infinity matches only the same
// infinity. max_abs / max_rel cover the finite pairs (NaN if any element is NaN, +inf if an infinity differs). Shapes must agree (a
// mismatch is one bad stage, explained in `note`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnflow/tensor.h"

namespace attnflow {

// The golden-format identifier (metadata "format") and the default
// tolerance of a case that states none (../shared/golden-format.md).
constexpr const char* kGoldenFormatV1 = "attnflow-golden/1";
constexpr double kGoldenDefaultTol = 1e-4;
// Largest safetensors header of a golden case. The committed cases have at
// most 18 KB (about 200 tensors); a larger header (e.g. a million empty
// tensors) is refused before it is parsed.
constexpr uint64_t kGoldenMaxHeaderBytes = uint64_t{4} << 20;

struct StageReport {
  std::string stage;
  // An input of the case (q/k/v of sdpa, x and the weights of mha, a
  // block's weights, token ids): compared before every stage; a difference
  // means GOT was computed from other inputs, not that a stage broke.
  bool input = false;
  bool compared = false;  // false: absent on one side (see note)
  bool match = false;
  double max_abs = 0, max_rel = 0;
  int64_t mismatches = 0;
  int64_t first_bad = -1;      // flat index of the first bad element
  std::string first_bad_index; // "[0,1,5,3]"
  double got_at_bad = 0, expected_at_bad = 0;
  // Compared against per-element rounding bounds (CompareStageWithin):
  // the type whose rounding they allow ("f32", ...), empty for atol/rtol;
  // max_ratio = max over elements of |got - expected| / bound (> 1 fails).
  std::string bound;
  double max_ratio = 0;
  // ||got - expected||_2 / ||expected||_2 over the finite pairs (+inf when an
  // infinity differs, NaN with a NaN): the relative error a budget judges.
  double rel_l2 = 0;
  // Compared against a budget on rel_l2 (verify --budget).
  bool budget = false;
  double bound_at_bad = 0;
  std::string note;
};

struct CaseReport {
  std::string path;
  std::string kind;
  std::string implementation;  // "reference" or a kernel name
  // How the stages were compared: "bound" (per-element rounding bounds,
  // each StageReport names its type; stages without a bound use atol/rtol)
  // or "fixed" (atol/rtol), and the atol/rtol that applied.
  std::string tolerance = "fixed";
  double atol = kGoldenDefaultTol, rtol = kGoldenDefaultTol;
  std::vector<StageReport> stages;
  // Where the first break lies when the stages alone do not say it (a
  // device dump whose probes agree but whose fused kernel does not).
  std::string note;
  bool ok() const;                          // every compared stage matches
  // The first compared entry that does not match, in report order (inputs
  // first, then the stages in dataflow order); nullptr if ok.
  const StageReport* FirstMismatch() const;
};

// Compares one tensor pair (shapes must agree; any float dtypes).
StageReport CompareStage(const std::string& name, const TensorView& got,
                         const TensorView& expected, double atol, double rtol);

// The same with a per-element tolerance: an element matches when
// |got − expected| <= bound (same shape as expected; infinities and NaN as
// above). `bound_type` names the type whose rounding the bound allows.
StageReport CompareStageWithin(const std::string& name, const TensorView& got,
                               const TensorView& expected, const TensorView& bound,
                               const std::string& bound_type);

// Max over elements of |got - expected| / (1 + |expected|), the one number
// the ring checks report (`attnflow ring`, tests/dist). Both views are
// contiguous with got.numel() elements; an infinity matches only the same
// infinity, and a NaN or a differing infinity gives +inf.
double MaxScaledError(const TensorView& got, const TensorView& expected);

}  // namespace attnflow
