// golden.cc — load/validate golden cases, run implementations on them, compare
// stage by stage, and write new cases from the float64 reference.
// See attnflow/golden.h for the invariants and docs/golden-format.md.
#include "attnflow/reference.h"
#include "attnflow/golden.h"
#include "attnflow/device_dump.h"
#include "attnflow/file_util.h"
#include "attnflow/npy.h"
#include "attnflow/rng.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>

namespace attnflow {
namespace {

std::string Where(const std::string& path, const std::string& what) {
  return "golden: " + path + ": " + what;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE) return false;
  *out = v;
  return true;
}

bool ParseInt(const std::string& s, int64_t* out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  auto [p, ec] = std::from_chars(b, e, *out);
  return ec == std::errc() && p == e && !s.empty();
}

struct Loader {
  const SafetensorsFile& f;
  const std::string& path;

  Status Get(const std::string& name, bool required, TensorView* out,
             std::initializer_list<DType> dtypes, int rank) const {
    if (!f.Has(name)) {
      if (!required) return Status::Ok();
      return Corrupt(Where(path, "tensor '" + name + "': missing (required input)"));
    }
    Result<TensorView> r = f.Get(name);
    if (!r.ok()) return Corrupt(Where(path, "tensor '" + name + "': " + r.status().message()));
    const TensorView& t = r.value();
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end()) {
      std::string allowed;
      for (DType d : dtypes) allowed += std::string(allowed.empty() ? "" : " or ") + DTypeName(d);
      return Corrupt(Where(path, "tensor '" + name + "': dtype " + DTypeName(t.dtype) +
                                     ", expected " + allowed));
    }
    if (rank >= 0 && t.rank != rank) {
      return Corrupt(Where(path, "tensor '" + name + "': shape " + t.shape_string() +
                                     " has rank " + std::to_string(t.rank) + ", expected " +
                                     std::to_string(rank)));
    }
    *out = t;
    return Status::Ok();
  }
};

const std::map<std::string, std::string>* g_empty_meta = nullptr;

}  // namespace

std::vector<float> GoldenFloats(const TensorView& t) {
  std::vector<float> r(size_t(t.numel()));
  int64_t n = 0;
  const int64_t d1 = t.rank > 1 ? t.shape[1] : 1, d2 = t.rank > 2 ? t.shape[2] : 1,
                d3 = t.rank > 3 ? t.shape[3] : 1;
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < d1; ++b)
      for (int64_t c = 0; c < d2; ++c)
        for (int64_t d = 0; d < d3; ++d) r[n++] = float(t.load(t.offset(a, b, c, d)));
  return r;
}

const std::vector<std::string>& GoldenStageOrder(const std::string& kind) {
  static const std::vector<std::string> kSdpa = {"scores", "scaled", "masked",
                                                 "weights", "lse", "out"};
  static const std::vector<std::string> kMha = {
      "q", "k", "v", "scores", "scaled", "masked", "weights", "lse",
      "heads_out", "concat", "out"};
  return kind == "mha" ? kMha : kSdpa;
}

Result<std::string> JoinStageList(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (n.empty() || n.find(',') != std::string::npos) {
      return InvalidArgument("golden: stage name " + QuoteBounded(n) +
                             " cannot be listed in 'stages' (empty or holds ',')");
    }
    out += (out.empty() ? "" : ",") + n;
  }
  return out;
}

Result<std::vector<std::string>> SplitStageList(const std::string& value,
                                                const std::string& what) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    std::string name = value.substr(start, comma - start);
    if (name.empty()) return Corrupt(what + ": empty name in the list");
    if (!seen.insert(name).second) {
      return Corrupt(what + ": " + QuoteBounded(name) + " is listed twice");
    }
    out.push_back(std::move(name));
    start = comma + 1;
  }
  return out;
}

Result<StageOrder> CaseStageOrder(const SafetensorsFile& f) {
  const auto& meta = f.metadata();
  StageOrder o;
  auto it = meta.find("stages");
  auto kind = meta.find("kind");
  if (it != meta.end()) {
    Result<std::vector<std::string>> l =
        SplitStageList(it->second, Where(f.path(), "metadata 'stages'"));
    if (!l.ok()) return l.status();
    o.stages = std::move(l).value();
    o.source = "the file's 'stages' list";
  } else if (kind != meta.end() && (kind->second == "sdpa" || kind->second == "mha") &&
             meta.count("trace_format") == 0) {
    o.stages = GoldenStageOrder(kind->second);
    o.source = "kind " + kind->second;
  } else {
    o.stages = f.names();
    o.source = "the file's tensor order";
  }
  const std::set<std::string> staged(o.stages.begin(), o.stages.end());
  if (auto in = meta.find("inputs"); in != meta.end()) {
    Result<std::vector<std::string>> l = SplitStageList(in->second, Where(f.path(), "metadata 'inputs'"));
    if (!l.ok()) return l.status();
    for (const std::string& n : l.value()) {
      if (staged.count(n)) {
        return Corrupt(Where(f.path(), "metadata 'inputs': " + QuoteBounded(n) +
                                           " is also listed in 'stages'"));
      }
    }
    o.inputs = std::move(l).value();
  } else {
    for (const std::string& n : f.names())
      if (!staged.count(n)) o.inputs.push_back(n);
  }
  return o;
}

Result<GoldenCase> LoadGoldenCase(const std::string& path) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(path, kGoldenMaxHeaderBytes);
  if (!f.ok()) return f.status();
  return ValidateGoldenCase(std::move(f).value());
}

namespace {

// Every check of ValidateGoldenCase; the case's views point into `file`,
// c.file is left for the caller to set (owning or not).
Result<GoldenCase> ValidateCaseOf(const SafetensorsFile& file) {
  (void)g_empty_meta;
  GoldenCase c;
  c.path = file.path();
  const std::string& path = c.path;
  const auto& meta = file.metadata();
  auto get_meta = [&](const char* key, std::string* out) {
    auto it = meta.find(key);
    if (it == meta.end()) return false;
    *out = it->second;
    return true;
  };
  std::string format, causal, scale;
  if (!get_meta("format", &format)) {
    return Corrupt(Where(path, "metadata 'format': missing (expected \"" +
                                   std::string(kGoldenFormatV1) + "\")"));
  }
  if (format != kGoldenFormatV1) {
    return Corrupt(Where(path, "metadata 'format': \"" + format + "\" is not supported (expected \"" +
                                   std::string(kGoldenFormatV1) + "\")"));
  }
  if (!get_meta("kind", &c.kind)) return Corrupt(Where(path, "metadata 'kind': missing"));
  const GoldenKind* gk = FindGoldenKind(c.kind);
  // Tolerances and description: the same for every kind.
  for (auto [key, dst] : {std::pair<const char*, double*>{"atol", &c.atol}, {"rtol", &c.rtol}}) {
    std::string s;
    if (get_meta(key, &s) && (!ParseDouble(s, dst) || !(*dst >= 0) || !std::isfinite(*dst))) {
      return Corrupt(Where(path, std::string("metadata '") + key + "': \"" + s +
                                     "\" is not a non-negative decimal"));
    }
  }
  get_meta("description", &c.description);
  if (gk != nullptr && gk->verify != nullptr) {  // a module's kind: it validates its own case
    return c;
  }
  if (gk == nullptr) {
    std::string known;
    for (const GoldenKind& k : GoldenKinds()) known += std::string(known.empty() ? "" : ", ") + k.name;
    return Corrupt(Where(path, "metadata 'kind': \"" + c.kind + "\" is not a known kind (" + known + ")"));
  }
  if (!get_meta("causal", &causal)) return Corrupt(Where(path, "metadata 'causal': missing"));
  if (!ParseCausal(causal, &c.opt.causal)) {
    return Corrupt(Where(path, "metadata 'causal': \"" + causal +
                                   "\" is not none, top_left or bottom_right"));
  }
  if (!get_meta("scale", &scale)) return Corrupt(Where(path, "metadata 'scale': missing"));
  if (!ParseDouble(scale, &c.opt.scale) || !std::isfinite(c.opt.scale)) {
    return Corrupt(Where(path, "metadata 'scale': \"" + scale + "\" is not a finite decimal"));
  }
  for (auto [key, dst] : {std::pair<const char*, int64_t*>{"window_left", &c.opt.window_left},
                          {"window_right", &c.opt.window_right}}) {
    std::string s;
    if (get_meta(key, &s) && (!ParseInt(s, dst) || *dst < -1)) {
      return Corrupt(Where(path, std::string("metadata '") + key + "': \"" + s +
                                     "\" is not an integer >= -1"));
    }
  }

  {  // FlashAttention's extensions (docs/golden-format.md): softcap, kv_align.
    std::string s;
    if (get_meta("softcap", &s) &&
        (!ParseDouble(s, &c.opt.softcap) || !(c.opt.softcap > 0) || !std::isfinite(c.opt.softcap))) {
      return Corrupt(Where(path, "metadata 'softcap': \"" + s + "\" is not a positive decimal"));
    }
    if (get_meta("kv_align", &s) && !ParseKvAlign(s, &c.opt.kv_align)) {
      return Corrupt(Where(path, "metadata 'kv_align': \"" + s +
                                     "\" is not padded or per_sequence"));
    }
  }

  Loader ld{file, path};
  ATTNFLOW_RETURN_IF_ERROR(ld.Get("attn_mask", false, &c.opt.attn_mask,
                                  {DType::kBool, DType::kF32}, -1));
  ATTNFLOW_RETURN_IF_ERROR(ld.Get("kv_lens", false, &c.opt.kv_lens, {DType::kI64}, 1));
  // [H], or [B,H] per batch (ValidateSdpa checks the shape).
  ATTNFLOW_RETURN_IF_ERROR(ld.Get("alibi_slopes", false, &c.opt.alibi_slopes, {DType::kF32}, -1));
  if (c.kind == "sdpa") {
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("q", true, &c.q, {DType::kF32, DType::kF64}, 4));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("k", true, &c.k, {DType::kF32, DType::kF64}, 4));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("v", true, &c.v, {DType::kF32, DType::kF64}, 4));
    Status st = ValidateSdpa("sdpa", TensorView(), TensorView(), c.q, c.k, c.v, c.opt, nullptr);
    if (!st.ok()) return Corrupt(Where(path, "inputs are inconsistent: " + st.message()));
  } else {
    std::string nh, nkv;
    if (!get_meta("num_heads", &nh)) return Corrupt(Where(path, "metadata 'num_heads': missing (required for mha)"));
    if (!ParseInt(nh, &c.weights.num_heads) || c.weights.num_heads <= 0) {
      return Corrupt(Where(path, "metadata 'num_heads': \"" + nh + "\" is not a positive integer"));
    }
    c.weights.num_kv_heads = c.weights.num_heads;
    if (get_meta("num_kv_heads", &nkv) &&
        (!ParseInt(nkv, &c.weights.num_kv_heads) || c.weights.num_kv_heads <= 0)) {
      return Corrupt(Where(path, "metadata 'num_kv_heads': \"" + nkv + "\" is not a positive integer"));
    }
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("x_q", true, &c.x_q, {DType::kF32, DType::kF64}, 3));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("x_k", true, &c.x_k, {DType::kF32, DType::kF64}, 3));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("x_v", true, &c.x_v, {DType::kF32, DType::kF64}, 3));
    auto& w = c.weights;
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("w_q", true, &w.w_q, {DType::kF32, DType::kF64}, 2));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("w_k", true, &w.w_k, {DType::kF32, DType::kF64}, 2));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("w_v", true, &w.w_v, {DType::kF32, DType::kF64}, 2));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("w_o", true, &w.w_o, {DType::kF32, DType::kF64}, 2));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("b_q", false, &w.b_q, {DType::kF32, DType::kF64}, 1));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("b_k", false, &w.b_k, {DType::kF32, DType::kF64}, 1));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("b_v", false, &w.b_v, {DType::kF32, DType::kF64}, 1));
    ATTNFLOW_RETURN_IF_ERROR(ld.Get("b_o", false, &w.b_o, {DType::kF32, DType::kF64}, 1));
    // Every shape rule of the reference (weights, biases, inputs, masks),
    // checked now so that an accepted case never fails at verify time.
    Status st = reference::ValidateMha(TensorView(), c.x_q, c.x_k, c.x_v, w, c.opt);
    if (!st.ok()) return Corrupt(Where(path, "inputs are inconsistent: " + st.message()));
  }
  // A tiny file may claim a huge problem (e.g. D = 0 makes q/k/v empty while
  // Lq x Lk is 2^40): refuse before any stage is allocated.
  {
    const bool sdpa = c.kind == "sdpa";
    const int64_t dims[4] = {sdpa ? c.q.shape[0] : c.x_q.shape[0],
                             sdpa ? c.q.shape[1] : c.weights.num_heads,
                             sdpa ? c.q.shape[2] : c.x_q.shape[1],
                             sdpa ? c.k.shape[2] : c.x_k.shape[1]};
    int64_t n = 0;
    if (!CheckedNumel(dims, 4, &n) || n > kGoldenMaxScoreElements) {
      return ResourceExhausted(Where(path, "problem B*H*Lq*Lk = " + ShapeString(dims, 4) +
                                               " has more score elements than the limit " +
                                               std::to_string(kGoldenMaxScoreElements) +
                                               " for stage capture"));
    }
  }
  // Stage tensors present must be float; shapes are checked at comparison.
  for (const auto& s : GoldenStageOrder(c.kind)) {
    if (!file.Has(s)) continue;
    const SafetensorsTensorInfo* info = file.Find(s);
    if (info->dtype != DType::kF32 && info->dtype != DType::kF64) {
      return Corrupt(Where(path, "stage '" + s + "': dtype " + DTypeName(info->dtype) +
                                     ", expected F32"));
    }
  }
  return c;
}

}  // namespace

Result<GoldenCase> ValidateGoldenCase(SafetensorsFile file) {
  Result<GoldenCase> c = ValidateCaseOf(file);
  if (!c.ok()) return c;
  // Moving the file keeps its mapping: the case's views stay valid.
  c->file = std::make_shared<const SafetensorsFile>(std::move(file));
  return c;
}

Result<GoldenCase> ViewGoldenCase(const SafetensorsFile& file) {
  Result<GoldenCase> c = ValidateCaseOf(file);
  if (!c.ok()) return c;
  c->file = std::shared_ptr<const SafetensorsFile>(std::shared_ptr<void>(), &file);
  return c;
}

namespace {

// The rounding bounds of a case, computed once per unit roundoff.
class BoundCache {
 public:
  explicit BoundCache(const GoldenCase* c) : c_(c) {}
  bool active() const { return c_ != nullptr; }
  // The bound of `stage` for type `t` (nullptr: none for that stage).
  Result<const Tensor*> Get(const std::string& stage, DType t) {
    const double u = UnitRoundoff(t);
    auto it = by_u_.find(u);
    if (it == by_u_.end()) {
      Result<std::map<std::string, Tensor>> b = CaseRoundingBounds(*c_, u);
      if (!b.ok()) return b.status();
      it = by_u_.emplace(u, std::move(b).value()).first;
    }
    auto s = it->second.find(stage);
    return s == it->second.end() ? nullptr : &s->second;
  }

 private:
  const GoldenCase* c_;
  std::map<double, std::map<std::string, Tensor>> by_u_;
};

// One stage against expected: by its rounding bound when the cache has one
// for it (float GOT), else by atol/rtol.
Result<StageReport> CompareOne(const std::string& s, const TensorView& g, const TensorView& e,
                               double a, double r, BoundCache& bounds,
                               const std::optional<DType>& bound_dtype) {
  if (bounds.active() && IsFloat(g.dtype)) {
    const DType t = bound_dtype.value_or(g.dtype);
    Result<const Tensor*> b = bounds.Get(s, t);
    if (!b.ok()) return b.status();
    if (b.value() != nullptr) return CompareStageWithin(s, g, e, b.value()->view(), DTypeName(t));
  }
  return CompareStage(s, g, e, a, r);
}

}  // namespace

Result<CaseReport> VerifyGoldenCase(const GoldenCase& c, VerifyImpl impl,
                                    const KernelOptions& kopt, const CompareOptions& copt) {
  if (const GoldenKind* gk = FindGoldenKind(c.kind); gk != nullptr && gk->verify != nullptr) {
    if (impl != VerifyImpl::kReference) {
      return Unimplemented("verify: --impl kernels supports kind sdpa only (got " + c.kind + ")");
    }
    if (copt.tolerance == "bound") {
      return InvalidArgument("verify: " + c.path + ": kind " + c.kind +
                             " has no rounding bounds; compare with --tolerance fixed");
    }
    return gk->verify(*c.file, c.atol, c.rtol);
  }
  CaseReport rep;
  rep.path = c.path;
  rep.kind = c.kind;
  rep.atol = c.atol;
  rep.rtol = c.rtol;
  std::string why;
  const bool use_bounds =
      copt.tolerance == "bound" ||
      (copt.tolerance == "auto" && copt.atol < 0 && copt.rtol < 0 && HasRoundingBounds(c, &why));
  if (copt.tolerance == "bound" && !HasRoundingBounds(c, &why)) {
    return InvalidArgument("verify: " + c.path + ": no rounding bounds (" + why +
                           "); compare with --tolerance fixed");
  }
  BoundCache bounds(use_bounds ? &c : nullptr);
  if (use_bounds) rep.tolerance = "bound";
  StageRecorder rec;
  if (impl == VerifyImpl::kReference) {
    rep.implementation = "reference";
    if (c.kind == "sdpa") {
      Status st = reference::Sdpa(TensorView(), TensorView(), c.q, c.k, c.v, c.opt, &rec);
      if (!st.ok()) return st;
    } else {
      Status st = reference::Mha(TensorView(), c.x_q, c.x_k, c.x_v, c.weights, c.opt, &rec);
      if (!st.ok()) return st;
    }
    if (!rec.status().ok()) return rec.status();
  } else {
    if (c.kind != "sdpa") {
      return Unimplemented("verify: --impl kernels supports kind sdpa only (got " + c.kind + ")");
    }
    Result<Tensor> out = Tensor::Zeros(DType::kF32, {c.q.shape[0], c.q.shape[1], c.q.shape[2], c.v.shape[3]});
    Result<Tensor> lse = Tensor::Zeros(DType::kF32, {c.q.shape[0], c.q.shape[1], c.q.shape[2]});
    if (!out.ok()) return out.status();
    if (!lse.ok()) return lse.status();
    // The kernels take float32 (a float64 case is rounded to it once).
    auto f32 = [](const TensorView& t) -> Result<Tensor> {
      if (t.dtype != DType::kF64) return Tensor::FromView(t);
      Result<Tensor> r = Tensor::Zeros(DType::kF32, Shape(t.shape.begin(), t.shape.begin() + t.rank));
      if (!r.ok()) return r;
      const std::vector<float> v = GoldenFloats(t);
      std::copy(v.begin(), v.end(), r->data<float>());
      return r;
    };
    Result<Tensor> q = f32(c.q), k = f32(c.k), v = f32(c.v);
    for (const auto* t : {&q, &k, &v})
      if (!t->ok()) return t->status();
    KernelChoice choice;
    Status st = Attention(out->view(), lse->view(), q->view(), k->view(), v->view(), c.opt, kopt,
                          &choice);
    if (!st.ok()) return st;
    rep.implementation = KernelKindName(choice.kernel);
    rec.Put("out", out->view());
    rec.Put("lse", lse->view());
    if (!rec.status().ok()) return rec.status();
  }
  for (const auto& s : GoldenStageOrder(c.kind)) {
    const Tensor* got = rec.Find(s);
    if (!c.file->Has(s)) {
      StageReport r;
      r.stage = s;
      r.note = "not in the case file";
      rep.stages.push_back(r);
      continue;
    }
    if (got == nullptr) {
      StageReport r;
      r.stage = s;
      r.note = "not produced by " + rep.implementation;
      rep.stages.push_back(r);
      continue;
    }
    Result<TensorView> exp = c.file->Get(s);
    if (!exp.ok()) return exp.status();
    Result<StageReport> r =
        CompareOne(s, got->view(), exp.value(), c.atol, c.rtol, bounds, copt.bound_dtype);
    if (!r.ok()) return r.status();
    rep.stages.push_back(std::move(r).value());
  }
  return rep;
}

namespace {

// The stages of a safetensors file (views into it; rank > 4 tensors absent
// with their full shape).
std::vector<NamedTensor> SafetensorsStages(const SafetensorsFile& f) {
  std::vector<NamedTensor> out;
  for (const auto& n : f.names()) {
    NamedTensor t;
    t.name = n;
    const SafetensorsTensorInfo* info = f.Find(n);
    t.shape = info->shape;
    if (Result<TensorView> v = f.Get(n); v.ok()) t.view = v.value();
    out.push_back(std::move(t));
  }
  return out;
}

std::string FileStem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

NamedTensor FromTensor(const std::string& name, const Tensor& t) {
  return NamedTensor{name, t.view(), t.shape()};
}

Result<GotStages> LoadNpyDirectory(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  fs::directory_iterator it(path, ec), end;
  if (ec) return IoError("verify: cannot read directory '" + path + "': " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return IoError("verify: cannot read directory '" + path + "': " + ec.message());
    const fs::path p = it->path();
    std::error_code e2;
    if (p.extension() == ".npy" && fs::is_regular_file(p, e2)) files.push_back(p.string());
  }
  if (files.empty()) {
    return InvalidArgument("verify: directory '" + path +
                           "' holds no .npy file (each STAGE.npy in it is one stage)");
  }
  std::sort(files.begin(), files.end());
  auto tensors = std::make_shared<std::vector<Tensor>>();
  GotStages g;
  g.path = path;
  g.source = "npy-dir";
  g.implementation = "file";
  for (const std::string& f : files) {
    Result<Tensor> t = ReadNpy(f);
    if (!t.ok()) return t.status();
    tensors->push_back(std::move(t).value());
  }
  for (size_t i = 0; i < files.size(); ++i) g.stages.push_back(FromTensor(FileStem(files[i]), (*tensors)[i]));
  g.owner = tensors;
  return g;
}

}  // namespace

Result<GotStages> LoadGotStages(const std::string& path, const std::string& dump_case,
                                const std::string& dump_impl) {
  const bool select = !dump_case.empty() || !dump_impl.empty();
  auto not_a_dump = [&](const std::string& what) {
    return InvalidArgument("verify: --case and --device-impl choose a block of a device dump; '" +
                           path + "' is " + what);
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (select) return not_a_dump("a directory of .npy files");
    return LoadNpyDirectory(path);
  }
  Result<FileBytes> bytes = FileBytes::Map(path, "verify: '" + path + "': ", "stage");
  if (!bytes.ok()) return bytes.status();
  const std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  GotStages g;
  g.path = path;
  g.implementation = "file";
  if (text.size() >= 6 && text.substr(0, 6) == std::string_view("\x93NUMPY", 6)) {
    if (select) return not_a_dump("a .npy file");
    Result<Tensor> t = ReadNpy(path);
    if (!t.ok()) return t.status();
    auto owned = std::make_shared<Tensor>(std::move(t).value());
    g.source = "npy";
    g.stages.push_back(FromTensor(FileStem(path), *owned));
    g.owner = owned;
    return g;
  }
  Result<SafetensorsFile> st = SafetensorsFile::Open(path);
  if (st.ok()) {
    if (select) return not_a_dump("a safetensors file");
    auto owned = std::make_shared<const SafetensorsFile>(std::move(st).value());
    g.source = "safetensors";
    g.stages = SafetensorsStages(*owned);
    g.metadata = owned->metadata();
    g.owner = owned;
    return g;
  }
  if (!LooksLikeDeviceDump(text)) {
    return Corrupt("verify: '" + path + "' is not a safetensors file (" + st.status().message() +
                   "), nor a .npy file, a directory of .npy files or a device dump (no line "
                   "starts with 'AFDUMP attnflow-dump/', docs/device-dump.md)");
  }
  Result<DeviceDump> dump = ParseDeviceDump(text, path);
  if (!dump.ok()) return dump.status();
  Result<const DumpBlock*> b = SelectDumpBlock(dump.value(), dump_case, dump_impl);
  if (!b.ok()) return b.status();
  auto owned = std::make_shared<DumpBlock>(*b.value());
  g.source = "device-dump";
  g.implementation = owned->impl;
  g.kind = owned->kind;
  g.block_case = owned->case_name;
  g.block_line = owned->line;
  for (const DumpStage& s : owned->stages) g.stages.push_back(NamedTensor{s.name, s.view(), s.shape});
  g.owner = owned;
  return g;
}

Result<CaseReport> CompareStages(const GotStages& got, const SafetensorsFile& expected,
                                 double atol, double rtol) {
  CompareOptions o;
  o.atol = atol;
  o.rtol = rtol;
  return CompareStages(got, expected, o);
}

Result<CaseReport> CompareStages(const GotStages& got, const SafetensorsFile& expected,
                                 const CompareOptions& opt) {
  const double atol = opt.atol, rtol = opt.rtol;
  CaseReport rep;
  rep.path = got.path;
  rep.implementation = got.implementation;
  auto meta = expected.metadata();
  rep.kind = meta.count("kind") ? meta["kind"] : "sdpa";
  if (!got.kind.empty() && got.kind != rep.kind) {
    return InvalidArgument("verify: " + got.path + ": block case=" + got.block_case +
                           " (line " + std::to_string(got.block_line) + ") is kind " + got.kind +
                           ", but " + expected.path() + " is a " + rep.kind + " case");
  }
  // Two model dumps of different architectures are not two runs of one
  // model: an error, not a verdict.
  if (meta.count("trace_format") && got.metadata.count("trace_format")) {
    for (const char* key : {"num_heads", "num_kv_heads", "source"}) {
      auto e = meta.find(key);
      auto g = got.metadata.find(key);
      if (e != meta.end() && g != got.metadata.end() && e->second != g->second) {
        return InvalidArgument("verify: " + got.path + " and " + expected.path() +
                               " are traces of different models or sources (" + key + " " +
                               QuoteBounded(g->second) + " vs " + QuoteBounded(e->second) + ")");
      }
    }
  }
  double a = kGoldenDefaultTol, r = kGoldenDefaultTol;
  for (auto [key, dst] : {std::pair<const char*, double*>{"atol", &a}, {"rtol", &r}}) {
    auto it = meta.find(key);
    if (it != meta.end() &&
        (!ParseDouble(it->second, dst) || !(*dst >= 0) || !std::isfinite(*dst))) {
      return Corrupt(Where(expected.path(), std::string("metadata '") + key + "': \"" +
                                                it->second + "\" is not a non-negative decimal"));
    }
  }
  if (atol >= 0) a = atol;
  if (rtol >= 0) r = rtol;
  rep.atol = a;
  rep.rtol = r;
  // Bounds: "auto" uses them when EXPECTED has them and no atol/rtol was
  // given; "bound" insists; "fixed" never.
  if (opt.tolerance != "auto" && opt.tolerance != "bound" && opt.tolerance != "fixed") {
    return InvalidArgument("verify: tolerance must be auto, bound or fixed, got " +
                           QuoteBounded(opt.tolerance));
  }
  std::optional<GoldenCase> gc;
  if (opt.tolerance == "bound" || (opt.tolerance == "auto" && atol < 0 && rtol < 0 && opt.budget < 0)) {
    std::string why = "it is not a golden case";
    if (Result<GoldenCase> c = ViewGoldenCase(expected); c.ok() && HasRoundingBounds(*c, &why)) {
      gc = std::move(c).value();
    } else if (opt.tolerance == "bound") {
      return InvalidArgument("verify: " + expected.path() + " has no rounding bounds (" + why +
                             "); compare with --tolerance fixed");
    }
  }
  BoundCache bounds(gc ? &*gc : nullptr);
  if (gc) rep.tolerance = "bound";
  // Per-stage tolerances a writer derived (export-c --s8-expected: the int8
  // path's, from its scales): "stage=atol:rtol,..."; explicit flags win.
  std::map<std::string, std::pair<double, double>> stage_tol;
  if (auto it = meta.find("stage_tolerances");
      it != meta.end() && opt.tolerance != "fixed" && atol < 0 && rtol < 0) {
    Result<std::vector<std::string>> items =
        SplitStageList(it->second, Where(expected.path(), "metadata 'stage_tolerances'"));
    if (!items.ok()) return items.status();
    for (const std::string& item : items.value()) {
      const size_t eq = item.find('='), colon = item.find(':', eq == std::string::npos ? 0 : eq);
      double x = 0, y = 0;
      if (eq == std::string::npos || colon == std::string::npos ||
          !ParseDouble(item.substr(eq + 1, colon - eq - 1), &x) ||
          !ParseDouble(item.substr(colon + 1), &y) || !(x >= 0) || !(y >= 0) ||
          !std::isfinite(x) || !std::isfinite(y)) {
        return Corrupt(Where(expected.path(), "metadata 'stage_tolerances': " + QuoteBounded(item) +
                                                  " is not STAGE=ATOL:RTOL with non-negative "
                                                  "decimals"));
      }
      stage_tol[item.substr(0, eq)] = {x, y};
    }
  }
  Result<StageOrder> order = CaseStageOrder(expected);
  if (!order.ok()) return order.status();
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : got.stages) by_name.emplace(t.name, &t);
  // Inputs first, then the stages in dataflow order; GOT's other names last.
  std::vector<std::pair<const NamedTensor*, bool>> todo;  // (tensor, is input)
  for (const auto* list : {&order->inputs, &order->stages}) {
    for (const std::string& s : *list) {
      auto it = by_name.find(s);
      if (it == by_name.end()) continue;
      todo.emplace_back(it->second, list == &order->inputs);
      by_name.erase(it);
    }
  }
  for (const NamedTensor& t : got.stages)  // in GOT's own order
    if (by_name.count(t.name)) todo.emplace_back(&t, false);
  for (const auto& [t, is_input] : todo) {
    const std::string& s = t->name;
    StageReport sr;
    sr.stage = s;
    sr.input = is_input;
    if (!expected.Has(s)) {
      sr.note = "not in the expected file";
      rep.stages.push_back(sr);
      continue;
    }
    Result<TensorView> e = expected.Get(s);
    if (!e.ok()) return e.status();
    const TensorView& g = t->view;
    if (g.rank < 0) {  // more dims than any attnflow tensor: never the expected shape
      sr.compared = true;
      sr.note = "shape " + ShapeString(t->shape) + " differs from expected " + e->shape_string();
      rep.stages.push_back(sr);
      continue;
    }
    if (!IsFloat(g.dtype) && g.dtype != e->dtype) {
      sr.compared = true;
      sr.note = std::string("dtype ") + DTypeName(g.dtype) + " vs " + DTypeName(e->dtype) +
                " in the expected file";
      rep.stages.push_back(sr);
      continue;
    }
    // Inputs are given, not computed: atol/rtol (a port fed other inputs).
    auto st = stage_tol.find(s);
    Result<StageReport> c =
        is_input ? Result<StageReport>(CompareStage(s, g, e.value(), a, r))
        : st != stage_tol.end()
            ? Result<StageReport>(CompareStage(s, g, e.value(), st->second.first, st->second.second))
            : CompareOne(s, g, e.value(), a, r, bounds, opt.bound_dtype);
    if (c.ok() && st != stage_tol.end() && !is_input) c->bound = "per-stage";
    if (!c.ok()) return c.status();
    c->input = is_input;
    if (opt.budget >= 0 && !is_input && c->note.empty()) {  // not a shape or dtype mismatch
      // The budget judges the stage's relative error as a whole.
      c->budget = true;
      c->match = c->rel_l2 <= opt.budget;  // false for NaN
      c->max_ratio = opt.budget > 0 ? c->rel_l2 / opt.budget : (c->rel_l2 > 0 ? INFINITY : 0.0);
    }
    rep.stages.push_back(std::move(c).value());
  }
  if (opt.budget >= 0) rep.tolerance = "budget";
  // A device's row stages come from its stage probes, which recompute
  // scores .. weights outside the fused kernel; lse and out come from the
  // kernel. Probes that agree and a kernel stage that does not put the break
  // inside the kernel's fused loop.
  if (const StageReport* bad = rep.FirstMismatch();
      got.source == "device-dump" && bad != nullptr && !bad->input &&
      (bad->stage == "lse" || bad->stage == "out")) {
    std::string agree;
    for (const StageReport& sr : rep.stages)
      if (sr.compared && sr.match &&
          (sr.stage == "scores" || sr.stage == "scaled" || sr.stage == "masked" ||
           sr.stage == "weights"))
        agree += (agree.empty() ? "" : " ") + sr.stage;
    if (!agree.empty()) {
      rep.note = "the stage probes (" + agree + ") agree with the case and the fused kernel's '" +
                 bad->stage + "' does not: the break is inside the fused kernel loop (its " +
                 "online softmax, accumulation or requantisation), not in a stage before it";
    }
  }
  return rep;
}

Result<CaseReport> CompareFiles(const SafetensorsFile& got,
                                const SafetensorsFile& expected, double atol,
                                double rtol) {
  GotStages g;
  g.path = got.path();
  g.source = "safetensors";
  g.implementation = "file";
  g.stages = SafetensorsStages(got);
  return CompareStages(g, expected, atol, rtol);
}

// ---------------------------------------------------------------------------
// Writing cases from the reference.
namespace {

// Random inputs come from the project's own Rng (attnflow/rng.h): the same
// seed writes the same case with any standard library.
Result<Tensor> RandomF32(Rng& rng, const Shape& shape, float scale = 1.0f) {
  Result<Tensor> t = Tensor::Zeros(DType::kF32, shape);
  if (!t.ok()) return t;
  float* p = t->data<float>();
  for (int64_t i = 0; i < t->numel(); ++i) p[i] = scale * static_cast<float>(rng.Normal());
  return t;
}

std::string FormatDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

Status WriteGoldenCase(const GoldenSpec& s, const std::string& path) {
  const char* op = "golden";
  if (s.kind != "sdpa" && s.kind != "mha") {
    return InvalidArgument(std::string(op) + ": --kind must be sdpa or mha, got " + s.kind);
  }
  const int64_t H = s.num_heads, Hkv = s.num_kv_heads == 0 ? s.num_heads : s.num_kv_heads;
  const int64_t D = s.head_dim, Dv = s.v_dim == 0 ? s.head_dim : s.v_dim;
  for (auto [name, val] : {std::pair<const char*, int64_t>{"batch", s.batch}, {"heads", H},
                           {"kv-heads", Hkv}, {"q-len", s.q_len}, {"kv-len", s.kv_len},
                           {"head-dim", D}, {"v-dim", Dv}}) {
    if (val < 0 || val > (1 << 20)) {
      return InvalidArgument(std::string(op) + ": --" + name + " = " + std::to_string(val) +
                             " is out of range [0, 2^20]");
    }
  }
  if (s.kind == "mha" && Dv != D) {
    return InvalidArgument(std::string(op) + ": mha needs v-dim == head-dim");
  }
  Rng rng(s.seed);
  std::vector<std::pair<std::string, TensorView>> tensors;
  std::vector<Tensor> keep;
  auto add = [&](const std::string& name, Tensor t) {
    keep.push_back(std::move(t));
    tensors.emplace_back(name, keep.back().view());
  };
  keep.reserve(64);
  SdpaOptions opt;
  opt.causal = s.causal;
  opt.scale = s.scale;
  opt.window_left = s.window_left;
  opt.window_right = s.window_right;
  std::map<std::string, std::string> meta;
  meta["format"] = kGoldenFormatV1;
  meta["kind"] = s.kind;
  meta["causal"] = CausalName(s.causal);
  meta["scale"] = FormatDouble(std::isnan(s.scale) ? DefaultScale(D) : s.scale);
  meta["seed"] = std::to_string(s.seed);
  meta["generator"] = "attnflow golden (float64 reference)";
  if (!s.description.empty()) meta["description"] = s.description;
  if (s.window_left != -1) meta["window_left"] = std::to_string(s.window_left);
  if (s.window_right != -1) meta["window_right"] = std::to_string(s.window_right);
  opt.scale = std::stod(meta["scale"]);

  // Mask.
  if (s.mask != "none") {
    Shape ms = s.mask_shape.empty() ? Shape{s.q_len, s.kv_len} : s.mask_shape;
    if (ms.size() < 2 || ms.size() > 4) {
      return InvalidArgument(std::string(op) + ": --mask-shape " + ShapeString(ms) +
                             " must have rank 2 to 4");
    }
    if (s.mask == "bool") {
      Result<Tensor> m = Tensor::Zeros(DType::kBool, ms);
      if (!m.ok()) return m.status();
      for (int64_t i = 0; i < m->numel(); ++i) m->data<uint8_t>()[i] = rng.Uniform() < 0.75;
      add("attn_mask", std::move(m).value());
    } else if (s.mask == "float") {
      Result<Tensor> m = RandomF32(rng, ms);
      if (!m.ok()) return m.status();
      for (int64_t i = 0; i < m->numel(); ++i)
        if (rng.Uniform() < 0.15) m->data<float>()[i] = -INFINITY;
      add("attn_mask", std::move(m).value());
    } else {
      return InvalidArgument(std::string(op) + ": --mask must be none, bool or float, got " + s.mask);
    }
    opt.attn_mask = keep.back().view();
  }
  if (!s.kv_lens.empty()) {
    Result<Tensor> kl = Tensor::Zeros(DType::kI64, {static_cast<int64_t>(s.kv_lens.size())});
    if (!kl.ok()) return kl.status();
    for (size_t i = 0; i < s.kv_lens.size(); ++i) kl->data<int64_t>()[i] = s.kv_lens[i];
    add("kv_lens", std::move(kl).value());
    opt.kv_lens = keep.back().view();
  }
  if (s.alibi) {
    Result<Tensor> sl = Tensor::Zeros(DType::kF32, {H});
    if (!sl.ok()) return sl.status();
    std::vector<double> slopes(static_cast<size_t>(H));
    AlibiSlopes(H, slopes.data());
    for (int64_t h = 0; h < H; ++h) sl->data<float>()[h] = static_cast<float>(slopes[h]);
    add("alibi_slopes", std::move(sl).value());
    opt.alibi_slopes = keep.back().view();
  }
  StageRecorder rec;
  if (s.kind == "sdpa") {
    for (auto [name, shape] : {std::pair<const char*, Shape>{"q", {s.batch, H, s.q_len, D}},
                               {"k", {s.batch, Hkv, s.kv_len, D}},
                               {"v", {s.batch, Hkv, s.kv_len, Dv}}}) {
      Result<Tensor> t = RandomF32(rng, shape);
      if (!t.ok()) return t.status();
      add(name, std::move(t).value());
    }
    const TensorView& q = keep[keep.size() - 3].view();
    const TensorView& k = keep[keep.size() - 2].view();
    const TensorView& v = keep[keep.size() - 1].view();
    ATTNFLOW_RETURN_IF_ERROR(reference::Sdpa(TensorView(), TensorView(), q, k, v, opt, &rec));
  } else {
    meta["num_heads"] = std::to_string(H);
    meta["num_kv_heads"] = std::to_string(Hkv);
    const int64_t E = H * D, Ekv = Hkv * D;
    const float ws = 1.0f / std::sqrt(static_cast<float>(E));
    const size_t base = keep.size();
    for (auto [name, shape, sc] :
         {std::tuple<const char*, Shape, float>{"x_q", {s.batch, s.q_len, E}, 1.0f},
          {"x_k", {s.batch, s.kv_len, E}, 1.0f},
          {"x_v", {s.batch, s.kv_len, E}, 1.0f},
          {"w_q", {E, E}, ws}, {"w_k", {Ekv, E}, ws}, {"w_v", {Ekv, E}, ws},
          {"w_o", {E, E}, ws}, {"b_q", {E}, 0.1f}, {"b_k", {Ekv}, 0.1f},
          {"b_v", {Ekv}, 0.1f}, {"b_o", {E}, 0.1f}}) {
      Result<Tensor> t = RandomF32(rng, shape, sc);
      if (!t.ok()) return t.status();
      add(name, std::move(t).value());
    }
    reference::MhaWeights w;
    w.num_heads = H;
    w.num_kv_heads = Hkv;
    w.w_q = keep[base + 3].view();
    w.w_k = keep[base + 4].view();
    w.w_v = keep[base + 5].view();
    w.w_o = keep[base + 6].view();
    w.b_q = keep[base + 7].view();
    w.b_k = keep[base + 8].view();
    w.b_v = keep[base + 9].view();
    w.b_o = keep[base + 10].view();
    ATTNFLOW_RETURN_IF_ERROR(reference::Mha(TensorView(), keep[base].view(), keep[base + 1].view(),
                                            keep[base + 2].view(), w, opt, &rec));
  }
  if (!rec.status().ok()) return rec.status();
  std::vector<std::string> inputs, stages;  // the 'inputs' / 'stages' lists
  for (const auto& t : tensors) inputs.push_back(t.first);
  for (const auto& name : GoldenStageOrder(s.kind)) {
    const Tensor* st = rec.Find(name);
    if (st == nullptr) continue;
    Result<Tensor> f = Tensor::Zeros(DType::kF32, st->shape());
    if (!f.ok()) return f.status();
    for (int64_t i = 0; i < st->numel(); ++i)
      f->data<float>()[i] = static_cast<float>(st->data<double>()[i]);
    add(name, std::move(f).value());
    stages.push_back(name);
  }
  Result<std::string> stage_list = JoinStageList(stages), input_list = JoinStageList(inputs);
  if (!stage_list.ok()) return stage_list.status();
  if (!input_list.ok()) return input_list.status();
  meta["stages"] = stage_list.value();
  meta["inputs"] = input_list.value();
  return WriteSafetensors(path, tensors, meta);
}

}  // namespace attnflow
