// device_export.cc — a golden case as the on-device harness's data
// (attnflow/device_export.h, `attnflow export-c`, docs/edge.md).
//
// The header defines one `static const af_golden_case NAME` (struct in
// micro/harness/af_golden.h): shape, causal rule, scale, tolerances, mask
// (bool or float, with its broadcast extents), window, ALiBi ([H] or [B,H]),
// the diagonal alignment, softcap, and af_gref
// offsets into one little-endian data blob holding the f32 inputs, the
// expected stages (float64 reference rounded to f32), and for sdpa the int8
// inputs quantised per tensor (scale = max|x| / 127, so = sv) with their own
// expectations: the float64 reference run on the DEQUANTISED int8 inputs
// (stages in real units, out8 rounded to output units).
//
// Invariants: see the header. The pool sizes below mirror the allocations of
// golden_main.c's run_sdpa/run_mha; the harness checks its own high-water
// mark against pool_bytes on every case, so an underestimate fails CI.
#include "attnflow/device_export.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/micro.h"
#include "attnflow/reference.h"
#include "attnflow/stages.h"

namespace attnflow {
namespace {

constexpr uint64_t kMaxDataBytes = uint64_t{1} << 30;  // hard cap, even with --data


// A tensor in the blob: byte offset (4-aligned) and element count.
struct Ref {
  bool present = false;
  uint64_t off = 0, count = 0;
};

class Blob {
 public:
  Ref Add(const void* data, uint64_t bytes, uint64_t count) {
    Ref r{true, bytes_.size(), count};
    bytes_.append(static_cast<const char*>(data), bytes);
    while (bytes_.size() % 4) bytes_.push_back('\0');
    return r;
  }
  Ref F32(const std::vector<float>& v) { return Add(v.data(), v.size() * 4, v.size()); }
  Ref I32(const std::vector<int32_t>& v) { return Add(v.data(), v.size() * 4, v.size()); }
  Ref I8(const std::vector<int8_t>& v) { return Add(v.data(), v.size(), v.size()); }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

std::string FloatLit(float x) {
  if (std::isinf(x)) return x < 0 ? "-INFINITY" : "INFINITY";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%af", double(x));
  return buf;
}

std::string RefLit(const Ref& r) {
  if (!r.present) return "{AF_G_ABSENT, 0}";
  return "{" + std::to_string(r.off) + "u, " + std::to_string(r.count) + "u}";
}

// Why `s` cannot name a case in the generated C header ("" = it can): the
// header declares `s` and `s_blob` at file scope next to <stdint.h>,
// <stddef.h> and attnflow/micro.h, compiled as C99 to C23 or C++.
std::string CIdentifierProblem(const std::string& s) {
  static const std::set<std::string> kReserved = {
      // C keywords (C89 to C23) and the C++ ones a mixed build would see
      "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
      "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
      "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
      "union", "unsigned", "void", "volatile", "while", "alignas", "alignof", "bool", "constexpr",
      "false", "nullptr", "static_assert", "thread_local", "true", "typeof", "typeof_unqual",
      "asm", "class", "delete", "new", "namespace", "operator", "private", "protected", "public",
      "template", "this", "throw", "try", "catch", "virtual", "friend", "mutable", "using",
      "typename", "explicit", "export", "noexcept", "decltype", "concept", "requires",
      // names the header's includes define, and the program's entry point
      "NULL", "size_t", "ptrdiff_t", "wchar_t", "max_align_t", "offsetof", "main"};
  if (s.empty()) return "is empty";
  if (s.size() > 63) return "is longer than 63 characters (C99's significant length)";
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return "does not start with a letter or '_'";
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return "holds a character other than a letter, a digit or '_'";
  if (kReserved.count(s)) return "is a C/C++ keyword or a name the header's includes define";
  // <math.h> (the header includes it): the functions with their f and l
  // twins, POSIX's Bessel functions, the classification macros
  static const std::set<std::string> kMath = [] {
    const char* base[] = {
        "acos", "asin", "atan", "atan2", "cos", "sin", "tan", "acosh", "asinh", "atanh", "cosh",
        "sinh", "tanh", "exp", "exp2", "expm1", "frexp", "ilogb", "ldexp", "log", "log10",
        "log1p", "log2", "logb", "modf", "scalbn", "scalbln", "cbrt", "fabs", "hypot", "pow",
        "sqrt", "erf", "erfc", "lgamma", "tgamma", "ceil", "floor", "nearbyint", "rint", "lrint",
        "llrint", "round", "lround", "llround", "trunc", "fmod", "remainder", "remquo",
        "copysign", "nan", "nextafter", "nexttoward", "fdim", "fmax", "fmin", "fma", "j0", "j1",
        "jn", "y0", "y1", "yn", "gamma", "signgam"};
    std::set<std::string> m = {"fpclassify", "isfinite", "isinf", "isnan", "isnormal",
                               "signbit", "isgreater", "isgreaterequal", "isless",
                               "islessequal", "islessgreater", "isunordered", "NAN", "INFINITY",
                               "HUGE_VAL", "HUGE_VALF", "HUGE_VALL", "MATH_ERRNO",
                               "MATH_ERREXCEPT", "math_errhandling", "errno"};
    for (const char* b : base) {
      m.insert(b);
      m.insert(std::string(b) + "f");
      m.insert(std::string(b) + "l");
    }
    return m;
  }();
  if (kMath.count(s)) return "is a <math.h> name (the header includes <math.h>)";
  if (s.rfind("FP_", 0) == 0) return "may clash with a <math.h> macro (FP_*)";
  if (s[0] == '_' && (s.size() == 1 || s[1] == '_' || std::isupper(static_cast<unsigned char>(s[1]))))
    return "is reserved to the implementation ('_' then '_' or a capital)";
  if (s.size() > 2 && s.compare(s.size() - 2, 2, "_t") == 0)
    return "ends in '_t' (reserved for types: stdint.h, POSIX)";
  const std::string lower = [&] {
    std::string l = s;
    for (char& c : l) c = char(std::tolower(static_cast<unsigned char>(c)));
    return l;
  }();
  if (lower.rfind("af_", 0) == 0) return "starts with af_/AF_, the micro library's prefix";
  if (lower.rfind("int", 0) == 0 || lower.rfind("uint", 0) == 0) {
    // INT8_MAX, UINT32_C, intptr_t ...: stdint.h's macros and types
    if (s.find('_') != std::string::npos || s.rfind("intptr", 0) == 0)
      return "may clash with a <stdint.h> name (INTn_MAX, UINTn_C, ...)";
  }
  return "";
}

// The file stem as a case name: every other character becomes '_', and a
// name CIdentifierProblem refuses gets the prefix "case_".
std::string Ident(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  if (s.size() > 58) s.resize(58);
  if (!CIdentifierProblem(s).empty()) s = "case_" + s;
  return s;
}

const char* CausalMacro(Causal c) {
  return c == Causal::kTopLeft       ? "AF_CAUSAL_TOP_LEFT"
         : c == Causal::kBottomRight ? "AF_CAUSAL_BOTTOM_RIGHT"
                                     : "AF_CAUSAL_NONE";
}

float QuantScale(const std::vector<float>& x) {
  float mx = 0;
  for (float a : x) mx = std::max(mx, std::fabs(a));
  return mx > 0 ? mx / 127.f : 1.f;
}

std::vector<int8_t> Quantise(const std::vector<float>& x, float s) {
  std::vector<int8_t> q(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    q[i] = int8_t(std::lrint(std::clamp(x[i] / s, -127.f, 127.f)));
  return q;
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<int64_t> ViewShape(const TensorView& t) {
  return std::vector<int64_t>(t.shape.begin(), t.shape.begin() + std::max(t.rank, 0));
}

// Flat index -> "[i,j,...]".
std::string IndexStr(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return ShapeStr(idx);
}

uint64_t Take(uint64_t bytes) { return (bytes + 7) & ~uint64_t{7}; }

// Everything about one export, filled by the checks and then written.
struct Export {
  std::string name;
  bool mha = false;
  Blob blob;
  uint64_t pool_bytes = 0;
  float scale = 0, atol = 0, rtol = 0;
  int mask_type = AF_MASK_NONE;
  int32_t mask_shape[4] = {1, 1, 1, 1};
  int64_t window_left = -1, window_right = -1;
  Ref mask, alibi, kv_lens;
  int kv_align = AF_KV_ALIGN_PADDED;
  int alibi_per_batch = 0;
  float softcap = 0;
  af_sdpa_shape shape{};
  Ref q, k, v;
  std::map<std::string, Ref> f32;  // expected f32 stages by name
  std::map<std::string, Ref> f32_tol;  // their rounding bounds (f32), by name
  bool has_s8 = false;
  std::string s8_note;  // why there is no int8 path, if none
  float sq = 1, sk = 1, sv = 1, so = 1;
  Ref q8, k8, v8, out8;
  std::map<std::string, Ref> s8;
  af_mha_shape mshape{};
  Ref x_q, x_k, x_v, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o;
  Ref mq, mk, mv, heads_out, concat;
  Ref mq_tol, mk_tol, mv_tol, heads_out_tol, concat_tol;
  // mha int8
  Ref x_q8, x_k8, x_v8, w_q8, w_k8, w_v8, w_o8, b_q32, b_k32, b_v32, b_o32, m_q, m_k, m_v, m_o;
  Ref mq8, mk8, mv8, heads_out8, out8m;
  float s_out = 1;
  // int8 expectations for --s8-expected
  std::vector<int8_t> out8_values;
  std::vector<std::pair<std::string, Tensor>> s8_case;
  std::map<std::string, std::string> s8_meta;
};

class Exporter {
 public:
  Exporter(const DeviceExportOptions& o, const GoldenCase& c)
      : o_(o), c_(c), flash_(o.flash_bytes), ram_(o.ram_bytes) {}

  Result<DeviceExport> Run();

 private:
  // A refusal: kInvalidArgument naming the case; returns non-zero so the
  // checks can `return Refuse(...)`.
  int Refuse(const std::string& why) {
    if (err_.ok()) err_ = InvalidArgument(c_.path + ": " + why);
    return 2;
  }
  int Limit(const std::string& why) {
    return Refuse("exceeds a device limit: " + why);
  }
  // Checks a stage of the file against its implied shape and its values;
  // returns "" when fine (or absent and optional), else the reason.
  std::string CheckStage(const std::string& st, const std::vector<int64_t>& shape,
                         bool allow_neg_inf, bool required, bool* present);
  // One stage a kind of case may carry: its name, implied shape, whether -inf
  // is a legal value (masked scores, the LSE of a dead row), whether the file
  // must hold it.
  struct StageSpec {
    const char* name;
    std::vector<int64_t> shape;
    bool neg_inf, required;
  };
  // CheckStage over the stages of a case in order: `before`, the stages every
  // attention case shares (scores, scaled, masked, weights [B,H,Lq,Lk],
  // optional; lse [B,H,Lq], required), then `after`. "" when all are fine,
  // else the first reason; *present lists the stages the file holds, in that
  // order (the order of their data in the blob).
  std::string CheckStages(std::initializer_list<StageSpec> before, int64_t B, int64_t H,
                          int64_t Lq, int64_t Lk, std::initializer_list<StageSpec> after,
                          std::vector<std::string>* present);
  // Whether the per-row stages (scores .. weights, ns floats each) are
  // exported: --stages all, or auto and at most 8192 scores; never with none.
  void ChooseRowStages(uint64_t ns) {
    want_row_stages_ = o_.stages == "all" || (o_.stages == "auto" && ns <= 8192);
  }
  std::string CheckValues(const std::string& what, const TensorView& t, bool allow_neg_inf);
  int Options(int64_t B, int64_t H, int64_t Lq, int64_t Lk);
  int Sdpa();
  int Mha();
  int MhaS8(int64_t B, int64_t Lq, int64_t Lk, int64_t E, int64_t H, int64_t Hkv);
  std::string Header() const;
  // The int8 path as a case of its own (DeviceExport::s8_case).
  Status S8Case(const std::vector<int8_t>& q8, const std::vector<int8_t>& k8,
                const std::vector<int8_t>& v8, const StageRecorder& rec, const Shape& qs,
                const Shape& ks, const Shape& vs);
  // The case's rounding bounds at f32 when they are exported (tolerance
  // auto with a case that has them, or bound); "" or the refusal.
  std::string ChooseBounds();
  // The bound of stage n as blob data (the stage must have one).
  Ref BoundRef(const std::string& n) {
    return e_.blob.F32(GoldenFloats(bounds_.at(n).view()));
  }

  const DeviceExportOptions& o_;
  const GoldenCase& c_;
  Export e_;
  bool want_row_stages_ = false;
  bool want_bounds_ = false;
  std::map<std::string, Tensor> bounds_;
  int64_t flash_ = 0, ram_ = 0;
  Status err_;
};

std::string Exporter::CheckValues(const std::string& what, const TensorView& t,
                                  bool allow_neg_inf) {
  const std::vector<float> v = GoldenFloats(t);
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = v[i];
    if (std::isnan(x) || x == INFINITY || (x == -INFINITY && !allow_neg_inf))
      return what + " holds " + (std::isnan(x) ? "NaN" : (x > 0 ? "+inf" : "-inf")) + " at " +
             IndexStr(int64_t(i), ViewShape(t)) + ": not a finite value the device can check";
  }
  return "";
}

std::string Exporter::CheckStage(const std::string& st, const std::vector<int64_t>& shape,
                                 bool allow_neg_inf, bool required, bool* present) {
  *present = c_.file->Has(st);
  if (!*present) return required ? "the '" + st + "' stage is missing" : "";
  Result<TensorView> t = c_.file->Get(st);
  if (!t.ok()) return t.status().message();
  if (!IsFloat(t->dtype)) return "stage '" + st + "' is " + t->describe() + ", expected F32";
  if (ViewShape(t.value()) != shape)
    return "stage '" + st + "' has shape " + ShapeStr(ViewShape(t.value())) + ", expected " +
           ShapeStr(shape) + " for this case";
  return CheckValues("stage '" + st + "'", t.value(), allow_neg_inf);
}

std::string Exporter::CheckStages(std::initializer_list<StageSpec> before, int64_t B, int64_t H,
                                  int64_t Lq, int64_t Lk, std::initializer_list<StageSpec> after,
                                  std::vector<std::string>* present) {
  const std::vector<int64_t> srow = {B, H, Lq, Lk};
  const StageSpec shared[] = {{"scores", srow, false, false}, {"scaled", srow, false, false},
                              {"masked", srow, true, false},  {"weights", srow, false, false},
                              {"lse", {B, H, Lq}, true, true}};
  auto check = [&](const StageSpec* first, const StageSpec* last) -> std::string {
    for (const StageSpec* s = first; s != last; ++s) {
      bool p = false;
      std::string bad = CheckStage(s->name, s->shape, s->neg_inf, s->required, &p);
      if (!bad.empty()) return bad;
      if (p) present->push_back(s->name);
    }
    return "";
  };
  std::string bad = check(before.begin(), before.end());
  if (bad.empty()) bad = check(std::begin(shared), std::end(shared));
  if (bad.empty()) bad = check(after.begin(), after.end());
  return bad;
}

Status Exporter::S8Case(const std::vector<int8_t>& q8, const std::vector<int8_t>& k8,
                        const std::vector<int8_t>& v8, const StageRecorder& rec, const Shape& qs,
                        const Shape& ks, const Shape& vs) {
  auto i8 = [&](const std::string& n, const std::vector<int8_t>& v, const Shape& sh) -> Status {
    Result<Tensor> t = Tensor::Zeros(DType::kI8, sh);
    if (!t.ok()) return t.status();
    std::copy(v.begin(), v.end(), t->data<int8_t>());
    e_.s8_case.emplace_back(n, std::move(t).value());
    return Status::Ok();
  };
  ATTNFLOW_RETURN_IF_ERROR(i8("q8", q8, qs));
  ATTNFLOW_RETURN_IF_ERROR(i8("k8", k8, ks));
  ATTNFLOW_RETURN_IF_ERROR(i8("v8", v8, vs));
  std::vector<std::string> stages;
  af_s8_tolerances t;
  af_s8_stage_tolerances(&t, e_.sq, e_.sk, e_.scale, e_.softcap);
  auto tol = [](const char* n, const af_tol& x) {
    char b[96];
    std::snprintf(b, sizeof b, "%s=%.17g:%.17g", n, x.atol, x.rtol);
    return std::string(b);
  };
  std::string tols;
  if (want_row_stages_) {
    for (const char* n : {"scores", "masked", "weights"}) {
      const Tensor* st = rec.Find(n);
      Result<Tensor> f = Tensor::Zeros(DType::kF32, st->shape());
      if (!f.ok()) return f.status();
      const std::vector<float> v = GoldenFloats(st->view());
      std::copy(v.begin(), v.end(), f->data<float>());
      e_.s8_case.emplace_back(n, std::move(f).value());
      stages.push_back(n);
    }
    tols = tol("scores", t.scores) + "," + tol("masked", t.masked) + "," + tol("weights", t.weights) + ",";
  }
  ATTNFLOW_RETURN_IF_ERROR(i8("out", e_.out8_values, {qs[0], qs[1], qs[2], vs[3]}));
  stages.push_back("out");
  tols += tol("out", t.out);
  char so[48];
  std::snprintf(so, sizeof so, "%.9g", double(e_.so));
  Result<std::string> sl = JoinStageList(stages);
  if (!sl.ok()) return sl.status();
  e_.s8_meta = {
      {"kind", "sdpa"},
      {"stages", sl.value()},
      {"inputs", "q8,k8,v8"},
      {"stage_tolerances", tols},
      {"atol", std::to_string(AF_S8_BOUND_LSB)},
      {"rtol", "0"},
      {"description", "int8 expectations of " + std::filesystem::path(c_.path).filename().string() +
                          " (attnflow export-c): q8 k8 v8 quantised per tensor; scores, masked "
                          "(real units) and weights from the float64 reference on the dequantised "
                          "inputs; out in output units (so = sv = " + so + ")"}};
  return Status::Ok();
}

std::string Exporter::ChooseBounds() {
  std::string why;
  if (o_.tolerance == "fixed" || (o_.tolerance == "auto" && !HasRoundingBounds(c_, &why)))
    return "";
  if (!HasRoundingBounds(c_, &why)) return "no rounding bounds (" + why + ")";
  Result<std::map<std::string, Tensor>> b = CaseRoundingBounds(c_, UnitRoundoff(DType::kF32));
  if (!b.ok()) return b.status().message();
  bounds_ = std::move(b).value();
  want_bounds_ = true;
  return "";
}

// Mask, window, ALiBi, kv_lens of the case into e_, checked by the micro
// library on the per-head attention shape [B, H, Lq, Lk].
int Exporter::Options(int64_t B, int64_t H, int64_t Lq, int64_t Lk) {
  const SdpaOptions& o = c_.opt;
  af_sdpa_opts mo = AF_SDPA_OPTS_INIT;
  std::vector<uint8_t> mask_u8;
  std::vector<float> mask_f;
  if (o.window_left > AF_MAX_DIM || o.window_right > AF_MAX_DIM)
    return Limit("a window wider than " + std::to_string(AF_MAX_DIM) + " keys");
  e_.window_left = o.window_left;
  e_.window_right = o.window_right;
  mo.window_left = int32_t(o.window_left);
  mo.window_right = int32_t(o.window_right);
  if (!o.attn_mask.empty_view()) {
    const TensorView& m = o.attn_mask;
    for (int d = 0; d < 4; ++d) e_.mask_shape[d] = 1;
    for (int d = 0; d < m.rank; ++d) e_.mask_shape[4 - m.rank + d] = int32_t(m.shape[d]);
    if (m.dtype == DType::kBool) {
      e_.mask_type = AF_MASK_BOOL;
      for (float x : GoldenFloats(m)) mask_u8.push_back(x != 0.f);
      mo.mask = mask_u8.data();
    } else {
      std::string bad = CheckValues("attn_mask", m, /*allow_neg_inf=*/true);
      if (!bad.empty()) return Refuse(bad);
      e_.mask_type = AF_MASK_F32;
      mask_f = GoldenFloats(m);
      mo.mask = mask_f.data();
    }
    mo.mask_type = af_mask_type(e_.mask_type);
    std::copy(e_.mask_shape, e_.mask_shape + 4, mo.mask_shape);
  }
  std::vector<float> slopes;
  if (!o.alibi_slopes.empty_view()) {
    std::string bad = CheckValues("alibi_slopes", o.alibi_slopes, false);
    if (!bad.empty()) return Refuse(bad);
    slopes = GoldenFloats(o.alibi_slopes);
    mo.alibi_slopes = slopes.data();
    e_.alibi_per_batch = o.alibi_slopes.rank == 2;  // [B,H]: slope of (b, h) at b * H + h
    mo.alibi_per_batch = e_.alibi_per_batch;
  }
  e_.kv_align = o.kv_align == KvAlign::kPerSequence ? AF_KV_ALIGN_PER_SEQUENCE : AF_KV_ALIGN_PADDED;
  mo.kv_align = af_kv_align(e_.kv_align);
  e_.softcap = float(o.softcap);
  if (double(e_.softcap) != o.softcap)
    return Refuse("softcap " + std::to_string(o.softcap) + " is not exactly an f32 value");
  mo.softcap = e_.softcap;
  af_sdpa_shape full{int32_t(B), int32_t(H), int32_t(H), int32_t(Lq), int32_t(Lk), 1, 1,
                     AF_CAUSAL_NONE};
  const af_status st = af_sdpa_check_opts(&mo, &full, 0);
  if (st != AF_OK) return Limit(std::string("the micro library refuses its options (") +
                                af_status_name(st) + ")");
  if (e_.mask_type == AF_MASK_BOOL) {
    e_.mask = e_.blob.Add(mask_u8.data(), mask_u8.size(), mask_u8.size());
  } else if (e_.mask_type == AF_MASK_F32) {
    e_.mask = e_.blob.F32(mask_f);
  }
  if (!slopes.empty()) e_.alibi = e_.blob.F32(slopes);
  if (!o.kv_lens.empty_view()) {
    std::vector<int32_t> kl;
    for (int64_t b = 0; b < B; ++b) kl.push_back(int32_t(o.kv_lens.load(b * o.kv_lens.strides[0])));
    e_.kv_lens = e_.blob.I32(kl);
  }
  return 0;
}

int Exporter::Sdpa() {
  const TensorView &q = c_.q, &k = c_.k, &v = c_.v;
  const int64_t B = q.shape[0], H = q.shape[1], Hkv = k.shape[1], Lq = q.shape[2],
                Lk = k.shape[2], D = q.shape[3], Dv = v.shape[3];
  for (int64_t d : {B, H, Hkv, Lq, Lk, D, Dv})
    if (d > AF_MAX_DIM)
      return Limit("a dimension above " + std::to_string(AF_MAX_DIM) + " (shape q " +
                   q.shape_string() + ", k " + k.shape_string() + ")");
  e_.shape = af_sdpa_shape{int32_t(B), int32_t(H), int32_t(Hkv), int32_t(Lq), int32_t(Lk),
                           int32_t(D), int32_t(Dv), AF_CAUSAL_NONE};
  e_.shape.causal = c_.opt.causal == Causal::kTopLeft       ? AF_CAUSAL_TOP_LEFT
                    : c_.opt.causal == Causal::kBottomRight ? AF_CAUSAL_BOTTOM_RIGHT
                                                            : AF_CAUSAL_NONE;
  if (af_status st = af_sdpa_check_shape(&e_.shape); st != AF_OK)
    return Limit(std::string("the micro library refuses the shape q ") + q.shape_string() +
                 ", k " + k.shape_string() + ", v " + v.shape_string() + " (" +
                 af_status_name(st) + ": every element count must stay below 2^31)");
  // Stages: shapes and values, before any data is produced.
  std::vector<std::string> present;
  const std::string bad_stage =
      CheckStages({}, B, H, Lq, Lk, {{"out", {B, H, Lq, Dv}, false, true}}, &present);
  if (!bad_stage.empty()) return Refuse(bad_stage);
  for (const auto* t : {&q, &k, &v}) {
    const std::string bad =
        CheckValues(t == &q ? "input q" : (t == &k ? "input k" : "input v"), *t, false);
    if (!bad.empty()) return Refuse(bad);
  }
  // Sizes before any allocation: the blob (f32 and int8 inputs, stages) and
  // one harness chunk (batch element x kv head), file or flash data.
  const uint64_t nq = uint64_t(B) * H * Lq * D, nk = uint64_t(B) * Hkv * Lk * D,
                 nv = uint64_t(B) * Hkv * Lk * Dv, no = uint64_t(B) * H * Lq * Dv,
                 nl = uint64_t(B) * H * Lq, ns = uint64_t(B) * H * Lq * Lk;
  ChooseRowStages(ns);
  if (std::string bad = ChooseBounds(); !bad.empty()) return Refuse(bad);
  // Rounding bounds double the f32 expectations (four row stages, lse, out).
  const uint64_t row_bytes = want_row_stages_ ? ns * 4 * (want_bounds_ ? 11 : 7) : 0;
  const uint64_t mask_bytes =
      c_.opt.attn_mask.empty_view() ? 0 : uint64_t(c_.opt.attn_mask.numel()) * 4;
  const uint64_t tol_bytes = want_bounds_ ? (no + nl) * 4 : 0;
  const uint64_t data_bytes =
      (nq + nk + nv) * 5 + no * 5 + nl * 4 + row_bytes + mask_bytes + tol_bytes + 4096;
  if (data_bytes > kMaxDataBytes)
    return Limit("its data would be " + std::to_string(data_bytes) + " bytes (more than " +
                 std::to_string(kMaxDataBytes) + ")");
  if (o_.data_file.empty() && int64_t(data_bytes) > flash_)
    return Limit("its data is about " + std::to_string(data_bytes) + " bytes, more than --flash-bytes " +
                 std::to_string(flash_) +
                 "; pass --data FILE.bin to read it over semihosting at run time (the header "
                 "then holds only offsets), or a larger --flash-bytes");

  if (int r = Options(B, H, Lq, Lk)) return r;
  e_.scale = float(std::isnan(c_.opt.scale) ? DefaultScale(D) : c_.opt.scale);
  // Pool of the harness's largest chunk (mirrors run_sdpa in golden_main.c;
  // the harness checks its own high-water mark against this number).
  const bool file = !o_.data_file.empty();
  const uint64_t G = uint64_t(H / Hkv);
  auto chunk_pool = [&](bool s8) {
    uint64_t u = 0;
    auto fetch = [&](uint64_t bytes) {
      if (file) u += Take(bytes + 4);
    };
    const uint64_t es = s8 ? 1 : 4, cq = G * Lq * D, cout = G * Lq * Dv, cl = G * Lq;
    if (e_.kv_lens.present) fetch(4);
    fetch(cq * es);
    fetch(uint64_t(Lk) * D * es);
    fetch(uint64_t(Lk) * Dv * es);
    if (e_.mask.present) {
      const uint64_t cm = (e_.mask_shape[1] == 1 ? 1 : G) * uint64_t(e_.mask_shape[2]) *
                          uint64_t(e_.mask_shape[3]);
      if (e_.mask_type == AF_MASK_BOOL) {
        fetch(cm);
      } else {
        fetch(cm * 4);
        if (s8) u += Take(cm * 4);
      }
    }
    if (e_.alibi.present) {
      fetch(G * 4);
      if (s8) u += Take(G * 4);
    }
    if (s8 && e_.softcap > 0) u += Take(G * 16);  // af_s8_softcap_prepare's constants
    af_sdpa_shape cs = e_.shape;
    cs.batch = 1;
    cs.num_heads = int32_t(G);
    cs.num_kv_heads = 1;
    u += Take(s8 ? af_sdpa_s8_workspace_bytes(&cs) : af_sdpa_f32_workspace_bytes(&cs));
    if (s8) {
      u += Take(uint64_t(Lk) * Dv + 4);  // the AF_V_COLS copy (-DAF_HARNESS_V_COLS)
      u += Take(cout + 4) + Take(cout * 4) + Take(cout * 4);
      fetch(cout);
    } else {
      u += Take(cout * 4) + Take(cl * 4);
      fetch(cout * 4);
      fetch(cl * 4);
      if (want_bounds_) {  // out's and lse's bounds
        fetch(cout * 4);
        fetch(cl * 4);
      }
    }
    if (want_row_stages_) {
      u += Take(uint64_t(4) * Lk * 4);
      if (s8) u += Take(uint64_t(3) * Lk * 4);
      fetch(uint64_t(Lk) * 4);
      if (want_bounds_ && !s8) fetch(uint64_t(Lk) * 4);  // the row's bound
    }
    return u;
  };
  e_.pool_bytes = chunk_pool(false);

  // f32 inputs and expectations.
  e_.q = e_.blob.F32(GoldenFloats(q));
  e_.k = e_.blob.F32(GoldenFloats(k));
  e_.v = e_.blob.F32(GoldenFloats(v));
  for (const std::string& n : present) {
    const bool row = n != "lse" && n != "out";
    if (row && !want_row_stages_) continue;
    e_.f32[n] = e_.blob.F32(GoldenFloats(c_.file->Get(n).value()));
    if (want_bounds_) e_.f32_tol[n] = BoundRef(n);
  }

  // int8: per-tensor quantisation, the micro library's own parameter checks.
  const std::vector<float> fq = GoldenFloats(q), fk = GoldenFloats(k), fv = GoldenFloats(v);
  e_.sq = QuantScale(fq);
  e_.sk = QuantScale(fk);
  e_.sv = QuantScale(fv);
  e_.so = e_.sv;
  af_s8_params p;
  af_status ps = af_s8_prepare(&p, &e_.sq, &e_.sk, &e_.sv, &e_.so, 1, e_.scale);
  if (Lk > 32768) {
    e_.s8_note = "kv_len " + std::to_string(Lk) + " > 32768 (the int8 kernel's weight budget)";
  } else if (ps != AF_OK) {
    e_.s8_note = std::string("af_s8_prepare refuses the scales (") + af_status_name(ps) +
                 "): sq*sk*scale*log2(e)*256 must stay below 128";
  } else if (e_.alibi.present) {
    const std::vector<float> sl = GoldenFloats(c_.opt.alibi_slopes);  // [H] or [B,H]
    std::vector<int32_t> a8(sl.size());
    if (af_s8_alibi_prepare(a8.data(), sl.data(), int32_t(sl.size()), &e_.sq, &e_.sk, 1,
                            e_.scale) != AF_OK)
      e_.s8_note = "af_s8_alibi_prepare refuses the ALiBi slopes (negative, or too large for "
                   "raw-score units)";
  }
  if (e_.s8_note.empty() && e_.softcap > 0) {
    std::vector<int32_t> c8(size_t(4) * H);
    if (af_s8_softcap_prepare(c8.data(), e_.softcap, int32_t(H), &e_.sq, &e_.sk, 1, e_.scale) !=
        AF_OK)
      e_.s8_note = "af_s8_softcap_prepare refuses the softcap (below 2^-14 raw-score units, or "
                   "above 2^46)";
  }
  if (e_.s8_note.empty() && e_.mask_type == AF_MASK_F32) {
    const std::vector<float> mf = GoldenFloats(c_.opt.attn_mask);
    std::vector<int32_t> m32(mf.size());
    if (af_s8_mask_prepare(m32.data(), mf.data(), int32_t(mf.size()), e_.sq, e_.sk, e_.scale) !=
        AF_OK)
      e_.s8_note = "af_s8_mask_prepare refuses the float mask";
  }
  if (e_.s8_note.empty()) {
    e_.has_s8 = true;
    const std::vector<int8_t> q8 = Quantise(fq, e_.sq), k8 = Quantise(fk, e_.sk),
                              v8 = Quantise(fv, e_.sv);
    std::vector<double> dq(q8.size()), dk(k8.size()), dv(v8.size());
    for (size_t i = 0; i < q8.size(); ++i) dq[i] = double(q8[i]) * e_.sq;
    for (size_t i = 0; i < k8.size(); ++i) dk[i] = double(k8[i]) * e_.sk;
    for (size_t i = 0; i < v8.size(); ++i) dv[i] = double(v8[i]) * e_.sv;
    std::vector<double> ref(no);
    SdpaOptions opt = c_.opt;
    opt.scale = e_.scale;
    std::vector<std::string> want = {"out"};
    if (want_row_stages_) want = {"scores", "masked", "weights", "out"};
    StageRecorder rec(want);
    Status st = reference::Sdpa(MakeView(ref.data(), DType::kF64, {B, H, Lq, Dv}), TensorView{},
                                MakeView(dq.data(), DType::kF64, {B, H, Lq, D}),
                                MakeView(dk.data(), DType::kF64, {B, Hkv, Lk, D}),
                                MakeView(dv.data(), DType::kF64, {B, Hkv, Lk, Dv}), opt, &rec);
    if (!st.ok()) return Refuse(st.message());
    if (!rec.status().ok()) return Refuse(rec.status().message());
    e_.out8_values.resize(no);
    for (uint64_t i = 0; i < no; ++i) {
      if (!std::isfinite(ref[i])) return Refuse("the int8 reference output is not finite");
      e_.out8_values[i] = int8_t(std::clamp(std::nearbyint(ref[i] / e_.so), -128.0, 127.0));
    }
    e_.q8 = e_.blob.I8(q8);
    e_.k8 = e_.blob.I8(k8);
    e_.v8 = e_.blob.I8(v8);
    e_.out8 = e_.blob.I8(e_.out8_values);
    if (want_row_stages_)
      for (const char* s : {"scores", "masked", "weights"})
        e_.s8[s] = e_.blob.F32(GoldenFloats(rec.Find(s)->view()));
    e_.pool_bytes = std::max(e_.pool_bytes, chunk_pool(true));
    if (Status st8 = S8Case(q8, k8, v8, rec, {B, H, Lq, D}, {B, Hkv, Lk, D}, {B, Hkv, Lk, Dv});
        !st8.ok())
      return Refuse(st8.message());
  }
  if (e_.pool_bytes > uint64_t(ram_))
    return Limit("one harness chunk (a batch element and a kv head) needs " +
                 std::to_string(e_.pool_bytes) + " bytes of RAM" +
                 (file ? " (its K and V are read into RAM from the data file)" : "") +
                 ", more than --ram-bytes " + std::to_string(ram_));
  return 0;
}

int Exporter::Mha() {
  const reference::MhaWeights& w = c_.weights;
  const int64_t B = c_.x_q.shape[0], Lq = c_.x_q.shape[1], Lk = c_.x_k.shape[1],
                E = c_.x_q.shape[2];
  const int64_t H = w.num_heads, Hkv = w.num_kv_heads ? w.num_kv_heads : H, dh = E / H;
  for (int64_t d : {B, Lq, Lk, E, H})
    if (d > AF_MAX_DIM)
      return Limit("a dimension above " + std::to_string(AF_MAX_DIM) + " (x_q " +
                   c_.x_q.shape_string() + ", x_k " + c_.x_k.shape_string() + ")");
  e_.mha = true;
  e_.mshape = af_mha_shape{int32_t(B), int32_t(Lq), int32_t(Lk), int32_t(E), int32_t(H),
                           int32_t(Hkv), AF_CAUSAL_NONE};
  e_.mshape.causal = c_.opt.causal == Causal::kTopLeft       ? AF_CAUSAL_TOP_LEFT
                     : c_.opt.causal == Causal::kBottomRight ? AF_CAUSAL_BOTTOM_RIGHT
                                                             : AF_CAUSAL_NONE;
  const uint64_t ws = af_mha_f32_workspace_bytes(&e_.mshape);
  if (ws == 0)
    return Limit("the micro library refuses the mha shape x_q " + c_.x_q.shape_string() +
                 ", x_k " + c_.x_k.shape_string() + " with " + std::to_string(H) + "/" +
                 std::to_string(Hkv) + " heads (element counts must stay below 2^31)");
  std::vector<std::string> present;
  const std::string bad_stage = CheckStages(
      {{"q", {B, H, Lq, dh}, false, true},
       {"k", {B, Hkv, Lk, dh}, false, true},
       {"v", {B, Hkv, Lk, dh}, false, true}},
      B, H, Lq, Lk,
      {{"heads_out", {B, H, Lq, dh}, false, true},
       {"concat", {B, Lq, E}, false, true},
       {"out", {B, Lq, E}, false, true}},
      &present);
  if (!bad_stage.empty()) return Refuse(bad_stage);
  const std::pair<const char*, const TensorView*> inputs[] = {
      {"x_q", &c_.x_q}, {"x_k", &c_.x_k}, {"x_v", &c_.x_v}, {"w_q", &w.w_q}, {"w_k", &w.w_k},
      {"w_v", &w.w_v},  {"w_o", &w.w_o},  {"b_q", &w.b_q},  {"b_k", &w.b_k}, {"b_v", &w.b_v},
      {"b_o", &w.b_o}};
  uint64_t data_bytes = 4096, in_bytes = 0, max_in = 0;
  for (const auto& [n, t] : inputs) {
    if (t->empty_view()) continue;
    const std::string bad = CheckValues(std::string("input ") + n, *t, false);
    if (!bad.empty()) return Refuse(bad);
    in_bytes += uint64_t(t->numel()) * 4 + 8;
    max_in = std::max<uint64_t>(max_in, uint64_t(t->numel()) * 4);
  }
  const uint64_t ns = uint64_t(B) * H * Lq * Lk, nq = uint64_t(B) * H * Lq * dh,
                 nk = uint64_t(B) * Hkv * Lk * dh, nl = uint64_t(B) * H * Lq,
                 no = uint64_t(B) * Lq * E;
  ChooseRowStages(ns);
  if (std::string bad = ChooseBounds(); !bad.empty()) return Refuse(bad);
  data_bytes += in_bytes + ((2 * nq + 2 * nk + nl + 2 * no) * 4 + (want_row_stages_ ? ns * 16 : 0)) *
                               (want_bounds_ ? 2 : 1);
  if (data_bytes > kMaxDataBytes)
    return Limit("its data would be " + std::to_string(data_bytes) + " bytes");
  if (o_.data_file.empty() && int64_t(data_bytes) > flash_)
    return Limit("its data is about " + std::to_string(data_bytes) +
                 " bytes, more than --flash-bytes " + std::to_string(flash_) +
                 "; pass --data FILE.bin or a larger --flash-bytes");
  if (int r = Options(B, H, Lq, Lk)) return r;
  e_.scale = float(std::isnan(c_.opt.scale) ? DefaultScale(dh) : c_.opt.scale);
  for (const auto& [n, t] : inputs) {
    Ref r;
    if (!t->empty_view()) r = e_.blob.F32(GoldenFloats(*t));
    const std::string s = n;
    if (s == "x_q") e_.x_q = r;
    if (s == "x_k") e_.x_k = r;
    if (s == "x_v") e_.x_v = r;
    if (s == "w_q") e_.w_q = r;
    if (s == "w_k") e_.w_k = r;
    if (s == "w_v") e_.w_v = r;
    if (s == "w_o") e_.w_o = r;
    if (s == "b_q") e_.b_q = r;
    if (s == "b_k") e_.b_k = r;
    if (s == "b_v") e_.b_v = r;
    if (s == "b_o") e_.b_o = r;
  }
  for (const std::string& n : present) {
    const bool row = n == "scores" || n == "scaled" || n == "masked" || n == "weights";
    if (row && !want_row_stages_) continue;
    const Ref r = e_.blob.F32(GoldenFloats(c_.file->Get(n).value()));
    const Ref t = want_bounds_ ? BoundRef(n) : Ref{};
    if (n == "q") e_.mq = r, e_.mq_tol = t;
    else if (n == "k") e_.mk = r, e_.mk_tol = t;
    else if (n == "v") e_.mv = r, e_.mv_tol = t;
    else if (n == "heads_out") e_.heads_out = r, e_.heads_out_tol = t;
    else if (n == "concat") e_.concat = r, e_.concat_tol = t;
    else e_.f32[n] = r, e_.f32_tol[n] = t;
  }
  // Pool (mirrors run_mha in golden_main.c): outputs, stages, arena, and in
  // file mode every input plus the largest expected stage read at once.
  const bool file = !o_.data_file.empty();
  uint64_t u = Take(no * 4 + 4) + Take(nq * 4 + 4) * 2 + Take(nk * 4 + 4) * 2 +
               Take(nl * 4 + 4) + Take(no * 4 + 4) + Take(ws);
  if (file) {
    for (const auto& [n, t] : inputs)
      if (!t->empty_view()) u += Take(uint64_t(t->numel()) * 4 + 4);
    if (e_.kv_lens.present) u += Take(uint64_t(B) * 4 + 4);
    if (e_.mask.present) u += Take(e_.mask.count * (e_.mask_type == AF_MASK_BOOL ? 1 : 4) + 4);
    if (e_.alibi.present) u += Take(e_.alibi.count * 4 + 4);
  }
  // Comparing reads one expected stage (and its bound) at a time.
  const uint64_t per = want_bounds_ ? 2 : 1;
  uint64_t cmp = file ? per * Take(std::max({nq, nk, nl, no}) * 4 + 4) : 0;
  if (want_row_stages_)
    cmp = std::max(cmp, Take(uint64_t(4) * Lk * 4 + 4) + (file ? per * Take(uint64_t(Lk) * 4 + 4) : 0));
  e_.pool_bytes = u + cmp;
  if (int r = MhaS8(B, Lq, Lk, E, H, Hkv)) return r;
  if (e_.pool_bytes > uint64_t(ram_))
    return Limit("the harness needs " + std::to_string(e_.pool_bytes) +
                 " bytes of RAM for this mha case (projections, stages and arena of the whole "
                 "batch), more than --ram-bytes " + std::to_string(ram_));
  return 0;
}

// The int8 path of an mha case (af_mha_s8). Quantisation: inputs per
// tensor, weights per output row (scale max|row| / 127), biases in
// accumulator units, the projected q/k/v and out scales from the golden
// stages (max|x| / 127), heads_out at v's scale (a convex combination of v
// rows). Expectations, teacher-forced in float64, each stage from the
// previous stage's *expected* int8 values (so every stage is judged on its
// own arithmetic, and the first that breaks is named):
//   q8e = round((x8 . w8[row] + b32[row]) * s_x * s_w[row] / s_q)  (k8e, v8e)
//   ho8e = round(sdpa64(q8e*s_q, k8e*s_k, v8e*s_v, options) / s_o)
//   out8e = round((concat(ho8e) . w8_o[row] + b32_o[row]) * s_o * s_w[row] / s_out)
// The harness (golden_main.c run_mha_s8) holds q, k and v to 1 LSB (one
// rounding each side), heads_out to AF_S8_BOUND_LSB, out to 1 LSB plus what
// the device's concat deviation moves it through w_o; a case without an
// int8 path says why (s8_note).
int Exporter::MhaS8(int64_t B, int64_t Lq, int64_t Lk, int64_t E, int64_t H, int64_t Hkv) {
  const reference::MhaWeights& w = c_.weights;
  const int64_t dh = E / H;
  af_mha_shape ms = e_.mshape;
  const uint64_t ws8 = af_mha_s8_workspace_bytes(&ms);
  if (ws8 == 0) {
    e_.s8_note = "af_mha_s8 refuses the shape";
    return 0;
  }
  const std::vector<float> xq = GoldenFloats(c_.x_q), xk = GoldenFloats(c_.x_k),
                           xv = GoldenFloats(c_.x_v);
  const float sxq = QuantScale(xq), sxk = QuantScale(xk), sxv = QuantScale(xv);
  auto stage = [&](const char* n) { return GoldenFloats(c_.file->Get(n).value()); };
  const float sq = QuantScale(stage("q")), sk = QuantScale(stage("k")), sv = QuantScale(stage("v")),
              so = sv, sout = QuantScale(stage("out"));
  af_s8_params p;
  if (af_s8_prepare(&p, &sq, &sk, &sv, &so, 1, e_.scale) != AF_OK) {
    e_.s8_note = "af_s8_prepare refuses the attention's scales (sq*sk*scale*log2(e)*256 must "
                 "stay below 128)";
    return 0;
  }
  if (Lk > 32768) {
    e_.s8_note = "kv_len " + std::to_string(Lk) + " > 32768 (the int8 kernel's weight budget)";
    return 0;
  }
  // Weights per output row, biases in accumulator units, multipliers.
  struct Proj {
    std::vector<int8_t> w8;
    std::vector<int32_t> b32, m;  // m: {mult, shift} pairs
    std::vector<double> real;     // s_in * s_w[row] / s_out, exact
  };
  std::string bad;
  auto proj = [&](const TensorView& wt, const TensorView& bias, float s_in, float s_o, Proj* pr) {
    const std::vector<float> wf = GoldenFloats(wt);
    const int64_t rows = wt.shape[0], cols = wt.shape[1];
    const std::vector<float> bf = bias.empty_view() ? std::vector<float>() : GoldenFloats(bias);
    for (int64_t r = 0; r < rows; ++r) {
      float mx = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, std::fabs(wf[r * cols + c]));
      const float sw = mx > 0 ? mx / 127.f : 1.f;
      for (int64_t c = 0; c < cols; ++c)
        pr->w8.push_back(int8_t(std::lrint(std::clamp(wf[r * cols + c] / sw, -127.f, 127.f))));
      if (!bf.empty()) {
        const double b = std::nearbyint(double(bf[r]) / (double(s_in) * sw));
        const bool fits = std::fabs(b) < 1073741824.0;  // false for NaN too
        if (!fits) bad = "a bias too large for int32 accumulator units";
        pr->b32.push_back(fits ? int32_t(b) : 0);
      }
      const double real = double(s_in) * sw / s_o;
      af_qmult m;
      if (af_quantize_multiplier(&m, real) != AF_OK) bad = "a projection multiplier out of range";
      pr->m.push_back(m.mult);
      pr->m.push_back(m.shift);
      pr->real.push_back(real);
    }
  };
  Proj pq, pk, pv, po;
  proj(w.w_q, w.b_q, sxq, sq, &pq);
  proj(w.w_k, w.b_k, sxk, sk, &pk);
  proj(w.w_v, w.b_v, sxv, sv, &pv);
  proj(w.w_o, w.b_o, so, sout, &po);
  if (!bad.empty()) {
    e_.s8_note = bad;
    return 0;
  }
  if (e_.mask_type == AF_MASK_F32) {
    const std::vector<float> mf = GoldenFloats(c_.opt.attn_mask);
    std::vector<int32_t> m32(mf.size());
    if (af_s8_mask_prepare(m32.data(), mf.data(), int32_t(mf.size()), sq, sk, e_.scale) != AF_OK) {
      e_.s8_note = "af_s8_mask_prepare refuses the float mask";
      return 0;
    }
  }
  if (e_.alibi.present) {
    const std::vector<float> sl = GoldenFloats(c_.opt.alibi_slopes);  // [H] or [B,H]
    std::vector<int32_t> a8(sl.size());
    if (af_s8_alibi_prepare(a8.data(), sl.data(), int32_t(sl.size()), &sq, &sk, 1, e_.scale) !=
        AF_OK) {
      e_.s8_note = "af_s8_alibi_prepare refuses the ALiBi slopes";
      return 0;
    }
  }
  if (e_.softcap > 0) {
    std::vector<int32_t> c8(size_t(4) * H);
    if (af_s8_softcap_prepare(c8.data(), e_.softcap, int32_t(H), &sq, &sk, 1, e_.scale) != AF_OK) {
      e_.s8_note = "af_s8_softcap_prepare refuses the softcap";
      return 0;
    }
  }
  auto round8 = [](double v) { return int8_t(std::clamp(std::nearbyint(v), -128.0, 127.0)); };
  // x8 [B, L, E] through one projection into head-major [B, heads, L, dh].
  auto project = [&](const std::vector<int8_t>& x8, int64_t L, const Proj& pr, int64_t heads) {
    std::vector<int8_t> y(size_t(B * heads * L * dh));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t f = 0; f < heads * dh; ++f) {
          int64_t acc = pr.b32.empty() ? 0 : pr.b32[f];
          for (int64_t e = 0; e < E; ++e)
            acc += int64_t(x8[(b * L + i) * E + e]) * pr.w8[f * E + e];
          y[((b * heads + f / dh) * L + i) * dh + f % dh] = round8(double(acc) * pr.real[f]);
        }
    return y;
  };
  const std::vector<int8_t> xq8 = Quantise(xq, sxq), xk8 = Quantise(xk, sxk),
                            xv8 = Quantise(xv, sxv);
  const std::vector<int8_t> q8e = project(xq8, Lq, pq, H), k8e = project(xk8, Lk, pk, Hkv),
                            v8e = project(xv8, Lk, pv, Hkv);
  std::vector<double> dq(q8e.size()), dk(k8e.size()), dv(v8e.size()), ref(q8e.size());
  for (size_t i = 0; i < q8e.size(); ++i) dq[i] = double(q8e[i]) * sq;
  for (size_t i = 0; i < k8e.size(); ++i) dk[i] = double(k8e[i]) * sk;
  for (size_t i = 0; i < v8e.size(); ++i) dv[i] = double(v8e[i]) * sv;
  SdpaOptions opt = c_.opt;
  opt.scale = e_.scale;
  Status st = reference::Sdpa(MakeView(ref.data(), DType::kF64, {B, H, Lq, dh}), TensorView{},
                              MakeView(dq.data(), DType::kF64, {B, H, Lq, dh}),
                              MakeView(dk.data(), DType::kF64, {B, Hkv, Lk, dh}),
                              MakeView(dv.data(), DType::kF64, {B, Hkv, Lk, dh}), opt);
  if (!st.ok()) return Refuse(st.message());
  std::vector<int8_t> ho8e(ref.size()), cat8e(size_t(B * Lq * E));
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) return Refuse("the int8 reference heads_out is not finite");
    ho8e[i] = round8(ref[i] / so);
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t f = 0; f < E; ++f)
        cat8e[(b * Lq + i) * E + f] = ho8e[((b * H + f / dh) * Lq + i) * dh + f % dh];
  std::vector<int8_t> out8e(cat8e.size());
  for (int64_t r = 0; r < B * Lq; ++r)
    for (int64_t f = 0; f < E; ++f) {
      int64_t acc = po.b32.empty() ? 0 : po.b32[f];
      for (int64_t e = 0; e < E; ++e) acc += int64_t(cat8e[r * E + e]) * po.w8[f * E + e];
      out8e[r * E + f] = round8(double(acc) * po.real[f]);
    }
  e_.sq = sq;
  e_.sk = sk;
  e_.sv = sv;
  e_.so = so;
  e_.s_out = sout;
  // The blob holds the int8 inputs, then per projection q, k, v, o: the
  // int8 weights, the int32 biases (those present), the requantisation
  // multipliers.
  e_.x_q8 = e_.blob.I8(xq8);
  e_.x_k8 = e_.blob.I8(xk8);
  e_.x_v8 = e_.blob.I8(xv8);
  struct ProjRefs {
    const Proj* p;
    Ref *w8, *b32, *m;
  };
  const ProjRefs projs[] = {{&pq, &e_.w_q8, &e_.b_q32, &e_.m_q},
                            {&pk, &e_.w_k8, &e_.b_k32, &e_.m_k},
                            {&pv, &e_.w_v8, &e_.b_v32, &e_.m_v},
                            {&po, &e_.w_o8, &e_.b_o32, &e_.m_o}};
  for (const ProjRefs& r : projs) *r.w8 = e_.blob.I8(r.p->w8);
  for (const ProjRefs& r : projs)
    if (!r.p->b32.empty()) *r.b32 = e_.blob.I32(r.p->b32);
  for (const ProjRefs& r : projs) *r.m = e_.blob.I32(r.p->m);
  e_.has_s8 = true;
  e_.mq8 = e_.blob.I8(q8e);
  e_.mk8 = e_.blob.I8(k8e);
  e_.mv8 = e_.blob.I8(v8e);
  e_.heads_out8 = e_.blob.I8(ho8e);
  e_.out8m = e_.blob.I8(out8e);
  // Pool of run_mha_s8 in golden_main.c (an upper bound, checked there):
  // in file mode every input it fetches; the int8 mask/ALiBi; out and the
  // five int8 stages; the af_mha_s8 arena; then two float buffers for the
  // comparisons and the larger of: the expected heads_out, the wanted
  // concat, its deviation and the expected out; or the teacher-forced
  // heads_out (expected q8e, k8e, v8e, its output, the SDPA arena, the
  // expected heads_out).
  const bool file = !o_.data_file.empty();
  const uint64_t nq = uint64_t(B) * H * Lq * dh, nk = uint64_t(B) * Hkv * Lk * dh,
                 no = uint64_t(B) * Lq * E;
  uint64_t u = 0;
  if (file) {
    for (const Ref* r : {&e_.x_q8, &e_.x_k8, &e_.x_v8, &e_.w_q8, &e_.w_k8, &e_.w_v8, &e_.w_o8})
      u += Take(r->count + 4);
    for (const Ref* r :
         {&e_.b_q32, &e_.b_k32, &e_.b_v32, &e_.b_o32, &e_.m_q, &e_.m_k, &e_.m_v, &e_.m_o})
      if (r->present) u += Take(r->count * 4 + 4);
    if (e_.kv_lens.present) u += Take(uint64_t(B) * 4 + 4);
    if (e_.mask.present) u += Take(e_.mask.count * (e_.mask_type == AF_MASK_BOOL ? 1 : 4) + 4);
    if (e_.alibi.present) u += Take(e_.alibi.count * 4 + 4);
  }
  if (e_.mask_type == AF_MASK_F32) u += Take(e_.mask.count * 4);
  if (e_.alibi.present) u += Take(e_.alibi.count * 4);
  if (e_.softcap > 0) u += Take(uint64_t(H) * 16);
  u += Take(no + 4) + Take(nq + 4) * 2 + Take(nk + 4) * 2 + Take(no + 4) + Take(ws8);
  const uint64_t mx = std::max({nq, nk, no});
  af_sdpa_shape sd{int32_t(B), int32_t(H), int32_t(Hkv), int32_t(Lq), int32_t(Lk),
                   int32_t(dh), int32_t(dh), ms.causal};
  const uint64_t forced =
      Take(nq + 4) * 3 + Take(nk + 4) * 2 + Take(af_sdpa_s8_workspace_bytes(&sd));
  const uint64_t cmp = Take(mx * 4 + 4) * 2 + std::max(Take(mx + 4) * 4, forced);
  e_.pool_bytes = std::max(e_.pool_bytes, u + cmp);
  return 0;
}

std::string Exporter::Header() const {
  std::ostringstream os;
  const bool embed = o_.data_file.empty();
  const std::string& n = e_.name;
  os << "/* " << n << " — golden case (kind " << (e_.mha ? "mha" : "sdpa")
     << ") exported by `attnflow export-c` from\n * "
     << std::filesystem::path(c_.path).filename().string()
     << "; do not edit. Layout: micro/harness/af_golden.h, docs/edge.md. */\n"
     << "#include <math.h>\n#include \"af_golden.h\"\n\n";
  const std::string& b = e_.blob.bytes();
  if (embed) {
    os << "static const uint32_t " << n << "_blob[" << std::max<size_t>(b.size() / 4, 1)
       << "] = {";
    char w[16];
    for (size_t i = 0; i < b.size(); i += 4) {
      uint32_t x;
      std::memcpy(&x, b.data() + i, 4);  // the data is little-endian; so is the host
      std::snprintf(w, sizeof w, "0x%08xu,", x);
      os << (i % 32 == 0 ? "\n  " : " ") << w;
    }
    if (b.empty()) os << "0";
    os << "\n};\n";
  }
  auto stages = [&](const std::map<std::string, Ref>& m) {
    auto get = [&](const char* s) {
      auto it = m.find(s);
      return RefLit(it == m.end() ? Ref{} : it->second);
    };
    return "{.scores = " + get("scores") + ", .scaled = " + get("scaled") + ", .masked = " +
           get("masked") + ", .weights = " + get("weights") + ", .lse = " + get("lse") +
           ", .out = " + get("out") + "}";
  };
  const char* mt = e_.mask_type == AF_MASK_BOOL  ? "AF_MASK_BOOL"
                   : e_.mask_type == AF_MASK_F32 ? "AF_MASK_F32"
                                                 : "AF_MASK_NONE";
  os << "static const af_golden_case " << n << " = {\n"
     << "  .name = \"" << n << "\",\n"
     << "  .kind = " << (e_.mha ? "AF_G_MHA" : "AF_G_SDPA") << ",\n"
     << "  .blob = " << (embed ? n + "_blob" : "0") << ",\n"
     << "  .data_file = "
     << (embed ? "0" : "\"" + std::filesystem::path(o_.data_file).filename().string() + "\"") << ",\n"
     << "  .data_bytes = " << b.size() << "u,\n"
     << "  .pool_bytes = " << e_.pool_bytes << "u,\n"
     << "  .scale = " << FloatLit(e_.scale) << ", .atol = " << FloatLit(e_.atol)
     << ", .rtol = " << FloatLit(e_.rtol) << ",\n"
     << "  .mask_type = " << mt << ",\n"
     << "  .mask_shape = {" << e_.mask_shape[0] << ", " << e_.mask_shape[1] << ", "
     << e_.mask_shape[2] << ", " << e_.mask_shape[3] << "},\n"
     << "  .window_left = " << e_.window_left << ", .window_right = " << e_.window_right << ",\n"
     << "  .mask = " << RefLit(e_.mask) << ", .alibi = " << RefLit(e_.alibi)
     << ", .kv_lens = " << RefLit(e_.kv_lens) << ",\n"
     << "  .kv_align = "
     << (e_.kv_align == AF_KV_ALIGN_PER_SEQUENCE ? "AF_KV_ALIGN_PER_SEQUENCE" : "AF_KV_ALIGN_PADDED")
     << ", .alibi_per_batch = " << e_.alibi_per_batch << ", .softcap = " << FloatLit(e_.softcap)
     << ",\n";
  const af_sdpa_shape& s = e_.shape;
  os << "  .shape = {" << s.batch << ", " << s.num_heads << ", " << s.num_kv_heads << ", "
     << s.q_len << ", " << s.kv_len << ", " << s.head_dim << ", " << s.v_dim << ", "
     << CausalMacro(c_.opt.causal) << "},\n"
     << "  .q = " << RefLit(e_.q) << ", .k = " << RefLit(e_.k) << ", .v = " << RefLit(e_.v)
     << ",\n"
     << "  .f32 = " << stages(e_.f32) << ",\n"
     << "  .f32_tol = " << stages(e_.f32_tol) << ",\n"
     << "  .has_s8 = " << (e_.has_s8 ? 1 : 0) << ",\n"
     << "  .sq = " << FloatLit(e_.sq) << ", .sk = " << FloatLit(e_.sk) << ", .sv = "
     << FloatLit(e_.sv) << ", .so = " << FloatLit(e_.so) << ",\n"
     << "  .bound_lsb = AF_S8_BOUND_LSB,\n"
     << "  .q8 = " << RefLit(e_.q8) << ", .k8 = " << RefLit(e_.k8) << ", .v8 = " << RefLit(e_.v8)
     << ", .out8 = " << RefLit(e_.out8) << ",\n"
     << "  .s8 = " << stages(e_.s8) << ",\n";
  const af_mha_shape& m = e_.mshape;
  os << "  .mshape = {" << m.batch << ", " << m.q_len << ", " << m.kv_len << ", " << m.embed
     << ", " << m.num_heads << ", " << m.num_kv_heads << ", " << CausalMacro(c_.opt.causal)
     << "},\n";
  // One line of Ref fields of the initializer: "  .a = {...}, .b = {...},\n".
  auto ref_line = [&os](std::initializer_list<std::pair<const char*, const Ref&>> fields) {
    const char* sep = "  ";
    for (const auto& [name, ref] : fields) {
      os << sep << "." << name << " = " << RefLit(ref);
      sep = ", ";
    }
    os << ",\n";
  };
  ref_line({{"x_q", e_.x_q}, {"x_k", e_.x_k}, {"x_v", e_.x_v}});
  ref_line({{"w_q", e_.w_q}, {"w_k", e_.w_k}, {"w_v", e_.w_v}, {"w_o", e_.w_o}});
  ref_line({{"b_q", e_.b_q}, {"b_k", e_.b_k}, {"b_v", e_.b_v}, {"b_o", e_.b_o}});
  ref_line({{"mq", e_.mq}, {"mk", e_.mk}, {"mv", e_.mv}, {"heads_out", e_.heads_out},
            {"concat", e_.concat}});
  ref_line({{"mq_tol", e_.mq_tol}, {"mk_tol", e_.mk_tol}, {"mv_tol", e_.mv_tol},
            {"heads_out_tol", e_.heads_out_tol}, {"concat_tol", e_.concat_tol}});
  ref_line({{"x_q8", e_.x_q8}, {"x_k8", e_.x_k8}, {"x_v8", e_.x_v8}});
  ref_line({{"w_q8", e_.w_q8}, {"w_k8", e_.w_k8}, {"w_v8", e_.w_v8}, {"w_o8", e_.w_o8}});
  ref_line({{"b_q32", e_.b_q32}, {"b_k32", e_.b_k32}, {"b_v32", e_.b_v32}, {"b_o32", e_.b_o32}});
  ref_line({{"m_q", e_.m_q}, {"m_k", e_.m_k}, {"m_v", e_.m_v}, {"m_o", e_.m_o}});
  ref_line({{"mq8", e_.mq8}, {"mk8", e_.mk8}, {"mv8", e_.mv8}, {"heads_out8", e_.heads_out8},
            {"out8m", e_.out8m}});
  os << "  .s_out = " << FloatLit(e_.s_out) << "\n};\n";
  return os.str();
}

Result<DeviceExport> Exporter::Run() {
  if (o_.stages != "auto" && o_.stages != "all" && o_.stages != "none")
    return InvalidArgument("export: stages must be auto, all or none, got '" + o_.stages + "'");
  if (o_.tolerance != "auto" && o_.tolerance != "bound" && o_.tolerance != "fixed")
    return InvalidArgument("export: tolerance must be auto, bound or fixed, got " +
                           QuoteBounded(o_.tolerance));
  if (o_.flash_bytes <= 0 || o_.ram_bytes <= 0)
    return InvalidArgument("export: flash and RAM budgets must be positive");
  if (c_.kind != "sdpa" && c_.kind != "mha") {
    Refuse("kind '" + c_.kind + "' is not attention the micro library runs (sdpa, mha)");
    return err_;
  }
  if (!o_.name.empty()) {
    const std::string why = CIdentifierProblem(o_.name);
    if (!why.empty())
      return InvalidArgument("export: --name " + QuoteBounded(o_.name) +
                             " cannot name the case in C: it " + why);
  }
  e_.name = o_.name.empty() ? Ident(std::filesystem::path(c_.path).stem().string()) : o_.name;
  e_.atol = float(c_.atol);
  e_.rtol = float(c_.rtol);
  if ((c_.kind == "mha" ? Mha() : Sdpa()) != 0) return err_;
  DeviceExport r;
  r.name = e_.name;
  r.header = Header();
  r.data = e_.blob.bytes();
  r.pool_bytes = e_.pool_bytes;
  r.mha = e_.mha;
  r.row_stages = want_row_stages_;
  r.bounds = want_bounds_;
  r.has_s8 = e_.has_s8;
  r.s8_note = e_.s8_note;
  if (e_.mha) {
    const af_mha_shape& m = e_.mshape;
    r.shape = "mha B=" + std::to_string(m.batch) + " Lq=" + std::to_string(m.q_len) +
              " Lk=" + std::to_string(m.kv_len) + " E=" + std::to_string(m.embed) +
              " H=" + std::to_string(m.num_heads) + " Hkv=" + std::to_string(m.num_kv_heads);
  } else {
    const af_sdpa_shape& s = e_.shape;
    r.shape = "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.num_heads) +
              " Hkv=" + std::to_string(s.num_kv_heads) + " Lq=" + std::to_string(s.q_len) +
              " Lk=" + std::to_string(s.kv_len) + " D=" + std::to_string(s.head_dim) +
              " Dv=" + std::to_string(s.v_dim);
    r.out8 = e_.out8_values;
    r.s8_case = std::move(e_.s8_case);
    r.s8_meta = std::move(e_.s8_meta);
    r.out8_shape = {s.batch, s.num_heads, s.q_len, s.v_dim};
    r.so = e_.so;
  }
  return r;
}

}  // namespace

Result<DeviceExport> ExportForDevice(const GoldenCase& c, const DeviceExportOptions& opt) {
  return Exporter(opt, c).Run();
}

}  // namespace attnflow
