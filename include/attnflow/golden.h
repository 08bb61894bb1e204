// attnflow/golden.h — golden cases (docs/golden-format.md): load and validate
// a case, run an implementation on its inputs, compare stage by stage, and
// write new cases from the float64 reference.
//
// Invariants:
//  * LoadGoldenCase fully validates metadata and inputs before anything runs;
//    every error names the file, the tensor and the field.
//  * Stages are compared in dataflow order (CaseStageOrder: the file's own
//    `stages` list, else the kind's canonical order), inputs before stages;
//    a report names the first stage that does not match, or the input that
//    differs.
//  * Comparison rule: |got - expected| <= atol + rtol*|expected|; an infinity
//    matches only the same infinity; NaN never matches.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/compare.h"
#include "attnflow/reference.h"
#include "attnflow/kernels.h"
#include "attnflow/safetensors.h"

namespace attnflow {

// Largest B*H*Lq*Lk a case may have (each captured [B,H,Lq,Lk] stage is held
// in float64): 2^27 elements = 1 GiB per stage.
constexpr int64_t kGoldenMaxScoreElements = int64_t{1} << 27;

// Canonical stage order for a kind ("sdpa", "mha").
const std::vector<std::string>& GoldenStageOrder(const std::string& kind);

// ---- the dataflow order of a case or a dump (docs/golden-format.md) --------
// Which tensors of a file are inputs and which are stages, and the order in
// which the stages are computed: the first stage that differs is the bug's
// address only when stages are compared in this order.
struct StageOrder {
  std::vector<std::string> inputs;  // compared first, reported as inputs
  std::vector<std::string> stages;  // dataflow order (decode steps after the prefill)
  std::string source;               // where the order came from, for reports
};
// The order of a file:
//  1. its metadata `stages` (a comma-separated list, each name once): the nn
//     kinds, trace dumps, and every case or dump attnflow writes;
//  2. else the kind's canonical order (GoldenStageOrder) for sdpa and mha
//     cases (those without `trace_format`);
//  3. else every tensor in the file's header order (the writer's order:
//     trace dumps of earlier versions wrote their stages in dataflow order).
// Inputs: the metadata `inputs` list if present, else every tensor of the
// file that is not a stage. A malformed list is kCorrupt naming the file.
Result<StageOrder> CaseStageOrder(const SafetensorsFile& f);
// The metadata value of a list: names joined by ','. A name holding ',' or
// an empty name cannot be listed (kInvalidArgument naming it).
Result<std::string> JoinStageList(const std::vector<std::string>& names);
// Splits a `stages` / `inputs` value (kCorrupt: an empty or repeated name).
Result<std::vector<std::string>> SplitStageList(const std::string& value,
                                                const std::string& what);

struct GoldenCase {
  std::string path;
  std::string kind;  // "sdpa" or "mha"
  SdpaOptions opt;   // causal, scale, mask, kv_lens, window, alibi (views into file)
  double atol = kGoldenDefaultTol, rtol = kGoldenDefaultTol;
  std::string description;
  // sdpa inputs
  TensorView q, k, v;
  // mha inputs
  TensorView x_q, x_k, x_v;
  reference::MhaWeights weights;
  std::shared_ptr<const SafetensorsFile> file;  // owns the mapping the views point into
};

Result<GoldenCase> LoadGoldenCase(const std::string& path);
// Same validation on an already-open file (fuzzing, tests).
Result<GoldenCase> ValidateGoldenCase(SafetensorsFile file);
// The same without taking the file: the case's views (and c.file, which
// does not own it) point into `file`, which must outlive the case.
Result<GoldenCase> ViewGoldenCase(const SafetensorsFile& file);

// A case tensor (rank 1 to 4, any dtype and strides) as the float array the
// micro library takes: row-major, each element rounded to float once
// (`attnflow export-c`, micro/tests).
std::vector<float> GoldenFloats(const TensorView& t);

// ---- the registry of golden kinds ---------------------------------------------
// Every kind a golden file may name, with what verifies it. The attention
// kinds (sdpa, mha) are verified by golden itself (reference or kernels);
// the nn kinds by their float64 module (nn::VerifyNnCase). Golden code knows
// kinds only through this table (src/golden/registry.cc).
struct GoldenKind {
  const char* name;    // metadata "kind"
  const char* family;  // "attention" or "nn"
  // nullptr for the attention kinds; else runs the reference on the case and
  // compares every listed stage (atol/rtol >= 0 override the case's).
  Result<CaseReport> (*verify)(const SafetensorsFile& file, double atol, double rtol);
};
const std::vector<GoldenKind>& GoldenKinds();
const GoldenKind* FindGoldenKind(std::string_view name);  // nullptr if unknown

// ---- rounding bounds (docs/golden-format.md "Tolerances") --------------------
// The unit roundoff of a float type: f32 2^-24, f16 2^-11, bf16 2^-8, f64
// 2^-53 (other dtypes: f32's).
double UnitRoundoff(DType t);
// Whether a case's stages have derived rounding bounds: sdpa and mha cases
// with their masked, weights and lse stages (mha also q, k, v, concat).
bool HasRoundingBounds(const GoldenCase& c, std::string* why = nullptr);
// Per-element bounds (F32, shaped like each stage) on |computed − stored|
// for a correct implementation computing in a type of unit roundoff u:
// sdpa scores scaled masked weights lse out; mha also q k v heads_out
// concat (its out is the projection). The arithmetic is micro's
// af_bound_row / af_bound_linear, which the device harness calls too.
Result<std::map<std::string, Tensor>> CaseRoundingBounds(const GoldenCase& c,
                                                          double unit_roundoff);

// How stages are compared (verify, verify --compare, the device harness):
//  * "auto": rounding bounds where the expected file has them (an sdpa/mha
//    case, HasRoundingBounds), each stage against the bound of the type GOT
//    computed it in (its dtype; float64 stages are held to the float32
//    storage of the case), else atol/rtol;
//  * "bound": bounds, or an error when the case has none;
//  * "fixed": |got − expected| <= atol + rtol·|expected| only.
// atol/rtol >= 0 override the case's own (else its metadata, else 1e-4) and
// make "auto" fixed. bound_dtype (when set) is the type the bounds allow
// instead of each GOT stage's dtype (a port that computes in f16 but dumps
// f32).
struct CompareOptions {
  double atol = -1, rtol = -1;
  std::string tolerance = "auto";
  std::optional<DType> bound_dtype;
  // >= 0: a stage passes when its relative error ||got - expected|| /
  // ||expected|| (StageReport::rel_l2) is at most `budget` (inputs are still
  // compared exactly): a model against its optimised self (another
  // quantisation, KV cache dtype or attention path), where no rounding
  // bound applies.
  double budget = -1;
};

enum class VerifyImpl { kReference, kKernels };

// Runs the implementation on the case inputs and compares every stage present
// in the file that the implementation produces (kernels produce out and lse
// only).
Result<CaseReport> VerifyGoldenCase(const GoldenCase& c, VerifyImpl impl,
                                    const KernelOptions& kopt = {},
                                    const CompareOptions& copt = {});

// ---- `verify --compare`: a port's stages against a golden case -------------
// One stage tensor a port produced, compared by name.
struct NamedTensor {
  std::string name;
  TensorView view;  // any dtype; absent (rank -1) when shape has > 4 dims
  Shape shape;      // the full shape (a device dump allows rank 8)
};

// The stages of GOT, from any source (LoadGotStages).
struct GotStages {
  std::string path;
  std::string source;          // "safetensors", "device-dump", "npy", "npy-dir"
  std::string implementation;  // a dump block's impl, else "file"
  std::string kind;            // a dump block's kind, else "" (not stated)
  std::string block_case;      // a dump block's case name
  int64_t block_line = 0;      // a dump block's header line
  std::vector<NamedTensor> stages;
  std::map<std::string, std::string> metadata;  // a safetensors GOT's, else empty
  std::shared_ptr<const void> owner;  // keeps the views' storage alive
};

// Reads GOT: a directory (every regular `*.npy` file in it is one stage,
// named by its file stem; at least one), a `.npy` file (by its magic: one
// stage named by the file stem), a safetensors file (every tensor), or a
// device dump (docs/device-dump.md; recognised by a line starting
// "AFDUMP attnflow-dump/"), whose block is chosen by `dump_case` and
// `dump_impl` ("" = any; SelectDumpBlock). Asking for a block of anything
// but a dump is kInvalidArgument. Errors name the path.
Result<GotStages> LoadGotStages(const std::string& path, const std::string& dump_case = "",
                                const std::string& dump_impl = "");

// Compares the stages of `got` with the same-named tensors of `expected`
// in expected's CaseStageOrder (its inputs first, then its stages in
// dataflow order; GOT's names that expected lacks are listed last as not
// compared), any dtypes
// through TensorView::load; a stage whose integer dtype differs from the
// expected tensor's is a mismatch (an int8 dump belongs with int8
// expectations), as is a shape that differs. A dump block whose kind
// differs from expected's is kInvalidArgument.
// Tolerances: CompareOptions (bounds for an sdpa/mha EXPECTED, else the
// explicit atol/rtol, expected's metadata, 1e-4).
Result<CaseReport> CompareStages(const GotStages& got, const SafetensorsFile& expected,
                                 const CompareOptions& opt);
// The same as CompareOptions{atol, rtol} ("auto").
Result<CaseReport> CompareStages(const GotStages& got, const SafetensorsFile& expected,
                                 double atol, double rtol);
// The same for a safetensors GOT already open.
Result<CaseReport> CompareFiles(const SafetensorsFile& got,
                                const SafetensorsFile& expected, double atol,
                                double rtol);

// ---- `verify --invariants`: a port's dump checked alone ---------------------
// What the chapter says every attention must satisfy, checked on GOT with
// no reference, within the rounding of GOT's dtype (docs/golden-format.md
// "Invariants"): hidden keys (masked -inf, or future keys under `causal`)
// have weight exactly 0; each weights row sums to one (zero when every key
// is hidden); lse = log Σ exp(masked) (-inf for such a row); out or
// heads_out = weights·v recomputed from GOT's own v. Every group of stages
// with `weights` ("", "decode.0.", "layer.3.", ...) is checked, groups in
// `order` (GOT's dataflow order; empty = GOT's own order), each check in
// the order of its stage; a check whose stages GOT lacks is skipped with
// the reason. A decode step's group ("decode.<s>.") is bottom-right causal
// whenever `causal` is not none. kInvalidArgument when GOT has no weights.
struct InvariantOptions {
  Causal causal = Causal::kNone;
  std::optional<DType> unit_dtype;  // the rounding allowed (default: weights' dtype)
  std::vector<std::string> order;
};
Result<CaseReport> CheckInvariants(const GotStages& got, const InvariantOptions& opt);

// Parameters for writing a new case from the reference.
struct GoldenSpec {
  std::string kind = "sdpa";
  int64_t batch = 1, num_heads = 2, num_kv_heads = 0, q_len = 4, kv_len = 4;
  int64_t head_dim = 8, v_dim = 0;  // v_dim 0 = head_dim; mha: embed = H*head_dim
  Causal causal = Causal::kNone;
  double scale = std::numeric_limits<double>::quiet_NaN();
  std::string mask = "none";  // none | bool | float
  std::vector<int64_t> mask_shape;  // empty = [Lq, Lk]
  std::vector<int64_t> kv_lens;     // empty = none
  int64_t window_left = -1, window_right = -1;
  bool alibi = false;
  uint64_t seed = 0;
  std::string description;
};
Status WriteGoldenCase(const GoldenSpec& spec, const std::string& path);

}  // namespace attnflow
