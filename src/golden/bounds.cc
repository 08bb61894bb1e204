// bounds.cc — rounding bounds of a golden case's stages (attnflow/golden.h
// CaseRoundingBounds; docs/golden-format.md "Tolerances"): per element, how
// far a correct implementation computing in a float type of unit roundoff u
// may be from the stored float64 reference. The arithmetic is the micro
// library's af_bound_row / af_bound_linear (micro/src/af_bound.c), the same
// functions the device harness calls, so host and device use one bound.
//
// Invariants:
//  * Magnitudes come from the case itself: its inputs (q, k, v; or x and the
//    weights of mha) and its expected masked, weights, lse (and q, k, v,
//    concat for mha). A case without them has no bound (HasRoundingBounds
//    says why) and is compared with atol/rtol.
//  * Bounds are F32 tensors shaped like the stages they bound.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "attnflow/golden.h"
#include "attnflow/micro.h"

namespace attnflow {
namespace {

struct Floats {
  std::vector<float> v;
  Shape shape;
};

Result<Floats> StageFloats(const SafetensorsFile& f, const std::string& name) {
  Result<TensorView> t = f.Get(name);
  if (!t.ok()) return t.status();
  return Floats{GoldenFloats(t.value()), Shape(t->shape.begin(), t->shape.begin() + t->rank)};
}

Result<Tensor> Zeros(const Shape& s) { return Tensor::Zeros(DType::kF32, s); }

Status BoundError(const std::string& path, af_status st, const std::string& what) {
  return InvalidArgument("golden: " + path + ": no rounding bound for " + what + " (" +
                         af_status_name(st) +
                         "; the sum is too long for the type: compare with --atol/--rtol)");
}

// The attention rows of one case: q [B,H,Lq,D] (and its error bound, mha),
// k/v [B,Hkv,Lk,D|Dv] (and theirs), the expected masked/weights/lse.
struct Rows {
  const Floats *q, *k, *v;
  const std::vector<float>*q_err = nullptr, *k_err = nullptr, *v_err = nullptr;
  Floats masked, weights, lse;
  double scale = 1;
};

Status BoundRows(const Rows& r, float u, const std::string& path,
                 std::map<std::string, Tensor>* out) {
  const int64_t B = r.q->shape[0], H = r.q->shape[1], Lq = r.q->shape[2], D = r.q->shape[3];
  const int64_t Hkv = r.k->shape[1], Lk = r.k->shape[2], Dv = r.v->shape[3], G = H / Hkv;
  Result<Tensor> scores = Zeros({B, H, Lq, Lk}), scaled = Zeros({B, H, Lq, Lk}),
                 masked = Zeros({B, H, Lq, Lk}), weights = Zeros({B, H, Lq, Lk}),
                 lse = Zeros({B, H, Lq}), o = Zeros({B, H, Lq, Dv});
  for (const auto* t : {&scores, &scaled, &masked, &weights, &lse, &o})
    if (!t->ok()) return t->status();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = (b * Hkv + h / G) * Lk;
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t row = (b * H + h) * Lq + i;
        af_bound_row_in in{};
        in.q = r.q->v.data() + row * D;
        in.k = r.k->v.data() + kvh * D;
        in.v = r.v->v.data() + kvh * Dv;
        if (r.q_err) in.q_err = r.q_err->data() + row * D;
        if (r.k_err) in.k_err = r.k_err->data() + kvh * D;
        if (r.v_err) in.v_err = r.v_err->data() + kvh * Dv;
        in.masked = r.masked.v.data() + row * Lk;
        in.weights = r.weights.v.data() + row * Lk;
        in.lse = r.lse.v[static_cast<size_t>(row)];
        in.head_dim = static_cast<int32_t>(D);
        in.v_dim = static_cast<int32_t>(Dv);
        in.kv_len = static_cast<int32_t>(Lk);
        in.scale = static_cast<float>(r.scale);
        in.u = u;
        const af_status st = af_bound_row(
            scores->data<float>() + row * Lk, scaled->data<float>() + row * Lk,
            masked->data<float>() + row * Lk, weights->data<float>() + row * Lk,
            lse->data<float>() + row, o->data<float>() + row * Dv, &in);
        if (st != AF_OK) return BoundError(path, st, "an attention row");
      }
    }
  }
  (*out)["scores"] = std::move(scores).value();
  (*out)["scaled"] = std::move(scaled).value();
  (*out)["masked"] = std::move(masked).value();
  (*out)["weights"] = std::move(weights).value();
  (*out)["lse"] = std::move(lse).value();
  (*out)["out"] = std::move(o).value();
  return Status::Ok();
}

// y = x·wᵀ + b over every row of x [rows, in], with x's own bound (or
// none): the bound [rows, out].
Result<std::vector<float>> BoundLinear(const std::vector<float>& x, const std::vector<float>* x_err,
                                       const TensorView& w, const TensorView& bias, float u,
                                       const std::string& path) {
  const int64_t out_f = w.shape[0], in_f = w.shape[1], rows = static_cast<int64_t>(x.size()) / in_f;
  const std::vector<float> wf = GoldenFloats(w);
  const std::vector<float> bf = bias.empty_view() ? std::vector<float>() : GoldenFloats(bias);
  std::vector<float> b(static_cast<size_t>(rows * out_f));
  for (int64_t r = 0; r < rows; ++r) {
    const af_status st = af_bound_linear(b.data() + r * out_f, x.data() + r * in_f,
                                         x_err ? x_err->data() + r * in_f : nullptr, wf.data(),
                                         bf.empty() ? nullptr : bf.data(),
                                         static_cast<int32_t>(in_f), static_cast<int32_t>(out_f), u);
    if (st != AF_OK) return BoundError(path, st, "a projection");
  }
  return b;
}

// [B, L, heads·Dh] -> [B, heads, L, Dh] (mha's split into heads).
std::vector<float> SplitHeads(const std::vector<float>& x, int64_t B, int64_t L, int64_t heads,
                              int64_t dh) {
  std::vector<float> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t c = 0; c < heads * dh; ++c)
        y[static_cast<size_t>(((b * heads + c / dh) * L + l) * dh + c % dh)] =
            x[static_cast<size_t>((b * L + l) * heads * dh + c)];
  return y;
}

Result<Tensor> FromFloats(const std::vector<float>& v, const Shape& s) {
  Result<Tensor> t = Zeros(s);
  if (!t.ok()) return t;
  std::copy(v.begin(), v.end(), t->data<float>());
  return t;
}

}  // namespace

double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kF64: return std::ldexp(1.0, -53);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kBF16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

bool HasRoundingBounds(const GoldenCase& c, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (c.kind != "sdpa" && c.kind != "mha") return no("kind " + c.kind + " has no derived bound");
  for (const char* s : {"masked", "weights", "lse"})
    if (!c.file->Has(s)) return no(std::string("the case has no '") + s + "' stage");
  if (c.kind == "mha")
    for (const char* s : {"q", "k", "v", "concat"})
      if (!c.file->Has(s)) return no(std::string("the case has no '") + s + "' stage");
  return true;
}

Result<std::map<std::string, Tensor>> CaseRoundingBounds(const GoldenCase& c, double unit_roundoff) {
  std::string why;
  if (!HasRoundingBounds(c, &why)) return InvalidArgument("golden: " + c.path + ": " + why);
  const float u = static_cast<float>(unit_roundoff);
  const SafetensorsFile& f = *c.file;
  std::map<std::string, Tensor> out;
  Rows r;
  r.scale = c.opt.scale;
  for (auto [name, dst] : {std::pair<const char*, Floats*>{"masked", &r.masked},
                           {"weights", &r.weights}, {"lse", &r.lse}}) {
    Result<Floats> t = StageFloats(f, name);
    if (!t.ok()) return t.status();
    *dst = std::move(t).value();
  }
  if (c.kind == "sdpa") {
    const Floats q{GoldenFloats(c.q), Shape(c.q.shape.begin(), c.q.shape.begin() + 4)};
    const Floats k{GoldenFloats(c.k), Shape(c.k.shape.begin(), c.k.shape.begin() + 4)};
    const Floats v{GoldenFloats(c.v), Shape(c.v.shape.begin(), c.v.shape.begin() + 4)};
    r.q = &q, r.k = &k, r.v = &v;
    ATTNFLOW_RETURN_IF_ERROR(BoundRows(r, u, c.path, &out));
    return out;
  }
  // mha: the projections' bounds feed the rows; heads_out's bound feeds
  // concat (a copy) and the output projection.
  const auto& w = c.weights;
  const int64_t B = c.x_q.shape[0], Lq = c.x_q.shape[1], Lk = c.x_k.shape[1], E = c.x_q.shape[2];
  const int64_t H = w.num_heads, Hkv = w.num_kv_heads, Dh = E / H;
  Result<std::vector<float>> bq = BoundLinear(GoldenFloats(c.x_q), nullptr, w.w_q, w.b_q, u, c.path);
  Result<std::vector<float>> bk = BoundLinear(GoldenFloats(c.x_k), nullptr, w.w_k, w.b_k, u, c.path);
  Result<std::vector<float>> bv = BoundLinear(GoldenFloats(c.x_v), nullptr, w.w_v, w.b_v, u, c.path);
  for (const auto* t : {&bq, &bk, &bv})
    if (!t->ok()) return t->status();
  const std::vector<float> q_err = SplitHeads(bq.value(), B, Lq, H, Dh);
  const std::vector<float> k_err = SplitHeads(bk.value(), B, Lk, Hkv, Dh);
  const std::vector<float> v_err = SplitHeads(bv.value(), B, Lk, Hkv, Dh);
  Result<Floats> q = StageFloats(f, "q"), k = StageFloats(f, "k"), v = StageFloats(f, "v"),
                 concat = StageFloats(f, "concat");
  for (const auto* t : {&q, &k, &v, &concat})
    if (!t->ok()) return t->status();
  r.q = &q.value(), r.k = &k.value(), r.v = &v.value();
  r.q_err = &q_err, r.k_err = &k_err, r.v_err = &v_err;
  ATTNFLOW_RETURN_IF_ERROR(BoundRows(r, u, c.path, &out));
  // heads_out [B,H,Lq,Dh] is the rows' out; concat [B,Lq,E] the same values.
  out["heads_out"] = std::move(out["out"]);
  const Tensor& ho = out["heads_out"];
  std::vector<float> cb(static_cast<size_t>(B * Lq * E));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t d = 0; d < Dh; ++d)
          cb[static_cast<size_t>((b * Lq + i) * E + h * Dh + d)] =
              ho.data<float>()[((b * H + h) * Lq + i) * Dh + d];
  Result<std::vector<float>> bo = BoundLinear(concat->v, &cb, w.w_o, w.b_o, u, c.path);
  if (!bo.ok()) return bo.status();
  for (auto [name, vals, shape] :
       {std::tuple<const char*, const std::vector<float>*, Shape>{"q", &q_err, {B, H, Lq, Dh}},
        {"k", &k_err, {B, Hkv, Lk, Dh}}, {"v", &v_err, {B, Hkv, Lk, Dh}},
        {"concat", &cb, {B, Lq, E}}, {"out", &bo.value(), {B, Lq, E}}}) {
    Result<Tensor> t = FromFloats(*vals, shape);
    if (!t.ok()) return t.status();
    out[name] = std::move(t).value();
  }
  return out;
}

}  // namespace attnflow
