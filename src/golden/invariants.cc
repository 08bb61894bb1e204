// invariants.cc — a port's dump checked alone, without a reference
// (attnflow/golden.h CheckInvariants, `attnflow verify --invariants`): the
// properties the chapter says every attention must have, each within the
// rounding bound of the dump's own dtype (docs/golden-format.md
// "Invariants").
//
// Invariants:
//  * Stages are grouped by prefix ("", "decode.0.", "layer.3.", ...); a group
//    is checked when it has `weights`. Groups run in the dump's dataflow
//    order (its `stages` list, else its tensor order); within a group the
//    checks run in the order of the stages they judge (masked, weights,
//    lse, out), so the first failing check names the first broken stage.
//  * Checks: a hidden key (masked = -inf, or a future key under the stated
//    causal rule) has weight exactly 0; each row of weights sums to one (or
//    is all zero when every key is hidden); lse equals log Σ exp(masked)
//    (-inf exactly for a dead row); out (heads_out) equals weights·v
//    recomputed from the dump's own v. A check whose inputs the dump lacks
//    is skipped with the reason.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "attnflow/golden.h"

namespace attnflow {
namespace {

constexpr double kTiny = 1.1754943508222875e-38;  // FLT_MIN: underflow, flush-to-zero

struct Group {
  std::string prefix;
  std::map<std::string, const NamedTensor*> t;  // by base name
  const NamedTensor* get(const std::string& n) const {
    auto it = t.find(n);
    return it == t.end() ? nullptr : it->second;
  }
};

// A 4-d view's element (b, h, i, j) as double.
double At(const TensorView& v, int64_t b, int64_t h, int64_t i, int64_t j) {
  return v.load(v.offset(b, h, i, j));
}

std::string Idx(std::initializer_list<int64_t> i) {
  std::string s = "[";
  for (int64_t x : i) s += (s.size() > 1 ? "," : "") + std::to_string(x);
  return s + "]";
}

// One check's report: the first element that fails, and how many do.
struct Check {
  StageReport r;
  void Fail(const std::string& idx, double got, double want, double tol) {
    if (r.mismatches++ == 0) {
      r.first_bad = 0;
      r.first_bad_index = idx;
      r.got_at_bad = got;
      r.expected_at_bad = want;
      r.bound_at_bad = tol;
    }
    r.match = false;
  }
  void Ratio(double diff, double tol) {
    if (tol > 0) r.max_ratio = std::max(r.max_ratio, diff / tol);
    else if (diff > 0) r.max_ratio = INFINITY;
    r.max_abs = std::max(r.max_abs, diff);
  }
};

Check Start(const std::string& stage, const std::string& what, const std::string& dtype) {
  Check c;
  c.r.stage = stage;
  c.r.compared = true;
  c.r.match = true;
  c.r.note = what;
  c.r.bound = dtype;
  return c;
}

StageReport Skipped(const std::string& stage, const std::string& why) {
  StageReport r;
  r.stage = stage;
  r.note = why;
  return r;
}

// Whether key j of row i is a future key under `causal` (Lq rows, Lk keys).
bool Future(Causal causal, int64_t i, int64_t j, int64_t Lq, int64_t Lk) {
  if (causal == Causal::kTopLeft) return j > i;
  if (causal == Causal::kBottomRight) return j > i + (Lk - Lq);
  return false;
}

void CheckGroup(const Group& g, const InvariantOptions& opt, CaseReport* rep) {
  // A decode step's query is the newest position: its causal rule is
  // bottom-right whatever the prefill's (trace dumps: "decode.<s>.").
  InvariantOptions o = opt;
  if (g.prefix.rfind("decode.", 0) == 0 && o.causal != Causal::kNone) o.causal = Causal::kBottomRight;
  const NamedTensor* w = g.get("weights");
  const NamedTensor* m = g.get("masked");
  const NamedTensor* l = g.get("lse");
  const NamedTensor* v = g.get("v");
  const NamedTensor* out = g.get("heads_out") ? g.get("heads_out") : g.get("out");
  const std::string P = g.prefix;
  const TensorView& W = w->view;
  if (W.rank != 4) {
    rep->stages.push_back(Skipped(P + "weights", "not [B,H,Lq,Lk]: " + W.shape_string()));
    return;
  }
  const int64_t B = W.shape[0], H = W.shape[1], Lq = W.shape[2], Lk = W.shape[3];
  const double u = UnitRoundoff(o.unit_dtype.value_or(W.dtype));
  const std::string dt = DTypeName(o.unit_dtype.value_or(W.dtype));
  const bool have_m = m != nullptr && m->view.rank == 4 && m->view.shape == W.shape;
  // The row's largest masked value (the rounding of exp(m - M) grows with
  // |m - M|), or 0 without masked.
  auto row_max = [&](int64_t b, int64_t h, int64_t i) {
    double M = -INFINITY;
    if (have_m)
      for (int64_t j = 0; j < Lk; ++j) M = std::max(M, At(m->view, b, h, i, j));
    return M;
  };
  auto hidden = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return (have_m && At(m->view, b, h, i, j) == -INFINITY) || Future(o.causal, i, j, Lq, Lk);
  };
  // 1. hidden keys have weight exactly 0.
  {
    Check c = Start(P + "weights", "masked and future keys have weight exactly 0", dt);
    if (!have_m && o.causal == Causal::kNone) {
      rep->stages.push_back(Skipped(P + "weights",
                                    "hidden keys: no masked stage in the dump and no causal rule "
                                    "(--causal)"));
    } else {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < Lq; ++i)
            for (int64_t j = 0; j < Lk; ++j)
              if (hidden(b, h, i, j)) {
                const double x = At(W, b, h, i, j);
                c.Ratio(std::fabs(x), 0);
                if (x != 0.0) c.Fail(Idx({b, h, i, j}), x, 0.0, 0.0);
              }
      rep->stages.push_back(c.r);
    }
  }
  // 2. rows sum to one (dead rows: all zero).
  {
    Check c = Start(P + "weights", "each row sums to one (a row with every key hidden: zero)", dt);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lq; ++i) {
          double sum = 0;
          int64_t visible = 0;
          for (int64_t j = 0; j < Lk; ++j) {
            sum += At(W, b, h, i, j);
            visible += !hidden(b, h, i, j);
          }
          const double M = row_max(b, h, i);
          double spread = 0;  // max |m - M| over visible keys
          if (have_m && std::isfinite(M))
            for (int64_t j = 0; j < Lk; ++j)
              if (!hidden(b, h, i, j)) spread = std::max(spread, M - At(m->view, b, h, i, j));
          const bool dead = (have_m || o.causal != Causal::kNone) && visible == 0;
          const double want = dead ? 0.0 : 1.0;
          const double tol = dead ? 0.0 : 2.0 * (double(Lk) + 12.0 + 2.0 * spread) * u + Lk * kTiny;
          const double diff = std::fabs(sum - want);
          c.Ratio(diff, tol);
          if (!(diff <= tol)) c.Fail(Idx({b, h, i}), sum, want, tol);
        }
    rep->stages.push_back(c.r);
  }
  // 3. lse = log Σ exp(masked).
  if (l == nullptr) {
    rep->stages.push_back(Skipped(P + "lse", "no lse in the dump"));
  } else if (!have_m) {
    rep->stages.push_back(Skipped(P + "lse", "lse = log sum exp(masked): no masked stage in the dump"));
  } else if (l->view.rank != 3 && l->view.rank != 4) {
    rep->stages.push_back(Skipped(P + "lse", "not [B,H,Lq]: " + l->view.shape_string()));
  } else {
    Check c = Start(P + "lse", "lse = log sum exp(masked) (-inf for a row with every key hidden)", dt);
    const TensorView& L = l->view;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lq; ++i) {
          const double M = row_max(b, h, i);
          double s = 0, spread = 0;
          for (int64_t j = 0; j < Lk; ++j) {
            const double x = At(m->view, b, h, i, j);
            if (x == -INFINITY) continue;
            s += std::exp(x - M);
            spread = std::max(spread, M - x);
          }
          const double want = std::isfinite(M) ? M + std::log(s) : -INFINITY;
          const double got = L.rank == 3 ? L.load(L.offset(b, h, i)) : At(L, b, h, i, 0);
          const double tol = std::isfinite(want)
                                 ? 2.0 * (double(Lk) + 12.0 + 2.0 * spread) * u + 4.0 * u * std::fabs(want)
                                 : 0.0;
          const double diff = got == want ? 0.0 : std::fabs(got - want);
          c.Ratio(std::isnan(diff) ? INFINITY : diff, tol);
          if (!(diff <= tol)) c.Fail(Idx({b, h, i}), got, want, tol);
        }
    rep->stages.push_back(c.r);
  }
  // 4. out = weights · v.
  const std::string oname = P + (g.get("heads_out") ? "heads_out" : "out");
  if (out == nullptr) {
    rep->stages.push_back(Skipped(P + "out", "no out or heads_out in the dump"));
  } else if (v == nullptr || v->view.rank != 4) {
    rep->stages.push_back(Skipped(oname, "out = weights . v: no v [B,Hkv,Lk,Dv] in the dump"));
  } else if (out->view.rank != 4 || v->view.shape[0] != B || v->view.shape[2] != Lk ||
             v->view.shape[1] == 0 || H % v->view.shape[1] != 0 || out->view.shape[0] != B ||
             out->view.shape[1] != H || out->view.shape[2] != Lq ||
             out->view.shape[3] != v->view.shape[3]) {
    rep->stages.push_back(Skipped(oname, "out = weights . v: shapes do not fit: weights " +
                                             W.shape_string() + ", v " + v->view.shape_string() +
                                             ", out " + out->view.shape_string()));
  } else {
    Check c = Start(oname, "out = weights . v (the dump's own weights and v)", dt);
    const TensorView &V = v->view, &O = out->view;
    const int64_t G = H / V.shape[1], Dv = V.shape[3];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lq; ++i) {
          const double M = row_max(b, h, i);
          double spread = 0;
          if (have_m && std::isfinite(M))
            for (int64_t j = 0; j < Lk; ++j)
              if (!hidden(b, h, i, j)) spread = std::max(spread, M - At(m->view, b, h, i, j));
          for (int64_t d = 0; d < Dv; ++d) {
            double want = 0, mag = 0, vmag = 0;
            for (int64_t j = 0; j < Lk; ++j) {
              const double wj = At(W, b, h, i, j), vj = At(V, b, h / G, j, d);
              want += wj * vj;
              mag += std::fabs(wj * vj);
              vmag += std::fabs(vj);
            }
            const double tol = (3.0 * double(Lk) + 24.0 + 4.0 * spread) * u * mag + vmag * kTiny +
                               u * std::fabs(want);
            const double got = At(O, b, h, i, d), diff = std::fabs(got - want);
            c.Ratio(std::isnan(diff) ? INFINITY : diff, tol);
            if (!(diff <= tol)) c.Fail(Idx({b, h, i, d}), got, want, tol);
          }
        }
    rep->stages.push_back(c.r);
  }
}

}  // namespace

Result<CaseReport> CheckInvariants(const GotStages& got, const InvariantOptions& o) {
  CaseReport rep;
  rep.path = got.path;
  rep.kind = got.kind.empty() ? "dump" : got.kind;
  rep.implementation = got.implementation;
  rep.tolerance = "invariants";
  // Groups by prefix, in the order their weights appear in the dataflow.
  std::vector<std::string> order = o.order;
  if (order.empty())
    for (const NamedTensor& t : got.stages) order.push_back(t.name);
  std::map<std::string, Group> groups;
  std::vector<std::string> group_order;
  for (const NamedTensor& t : got.stages) {
    const size_t dot = t.name.rfind('.');
    const std::string prefix = dot == std::string::npos ? "" : t.name.substr(0, dot + 1);
    Group& g = groups[prefix];
    g.prefix = prefix;
    g.t[t.name.substr(prefix.size())] = &t;
  }
  for (const std::string& n : order) {
    const size_t dot = n.rfind('.');
    const std::string prefix = dot == std::string::npos ? "" : n.substr(0, dot + 1);
    if (n.substr(prefix.size()) == "weights" && groups.count(prefix) &&
        std::find(group_order.begin(), group_order.end(), prefix) == group_order.end())
      group_order.push_back(prefix);
  }
  if (group_order.empty()) {
    return InvalidArgument("verify --invariants: " + got.path +
                           " has no 'weights' stage (the invariants are about attention "
                           "weights: rows sum to one, hidden keys are zero)");
  }
  for (const std::string& p : group_order) {
    const NamedTensor* w = groups[p].get("weights");
    if (w->view.rank < 0 || !IsFloat(w->view.dtype)) {
      rep.stages.push_back(Skipped(p + "weights", "not a float tensor of rank <= 4"));
      continue;
    }
    CheckGroup(groups[p], o, &rep);
  }
  return rep;
}

}  // namespace attnflow
