// cmd_demo.cc — `attnflow demo`: the four-token walkthrough, in numbered steps.
//
// Frozen inputs (the trace toy, src/trace/toy.cc): four tokens, d_model 8, two
// heads of d_k 4. Every number is float64 and comes from the reference
// attention (reference::Mha) plus the plain float64 arithmetic written here.
// Steps, in order:
//   1-8   X, Q/K/V per head, scores, scaling, softmax, weighted V, concat, W_o
//   9     the causal mask
//   10    a padding key and the causal mask together (left padding)
//   11    why divide by sqrt(d_k): statistics over many seeded draws
//   12    order-blindness: without positions, shuffling tokens permutes rows
//   13    sinusoidal against learned (seeded stand-in) positions
//   14    the block around attention: residual, LayerNorm, FFN (post-norm)
// Invariants: no randomness except attnflow::Rng with fixed seeds, so every
// number is reproducible bit for bit; `--json` prints the same numbers as one
// JSON object, which tests/cli/cli_demo_test.cc compares with an independent
// NumPy float64 recomputation (tools/demo/demo_numpy.py). Exit 1 if a built-in
// check fails (weights rows sum to 1, future/padded weights are exactly 0,
// padding changes nothing for real tokens, order-blindness holds).
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/rng.h"
#include "attnflow/trace.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

constexpr int kT = 4, kE = 8, kH = 2, kDh = kE / kH;
static_assert(kE == trace::kToyEmbed && kH == trace::kToyHeads,
              "the demo is the trace toy's first four tokens");
constexpr int kF = static_cast<int>(trace::kToyFfn);

// Step 11: draws per d_k, keys per draw, seeds (documented in docs/lab.md and
// mirrored by tools/demo/demo_numpy.py).
constexpr int kDraws = 2000;
constexpr int kStatKeys = kT;
constexpr uint64_t kStatSeedBase = 20260000;  // seed = base + d_k
// Step 12: the shuffle. Step 13: learned stand-in table.
constexpr int kPerm[kT] = {2, 0, 3, 1};
constexpr int kLearnedRows = 8;
constexpr uint64_t kLearnedSeed = 7;
constexpr double kLearnedSd = 0.5;

bool g_text = true;  // false under --json: nothing but the JSON is printed

void P(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void P(const char* fmt, ...) {
  if (!g_text) return;
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
}

void PrintMatrix(const char* title, const double* m, int rows, int cols, int stride,
                 const std::vector<std::string>& row_names,
                 const std::vector<std::string>& col_names) {
  if (!g_text) return;
  std::printf("  %s\n", title);
  if (!col_names.empty()) {
    std::printf("  %8s", "");
    for (int c = 0; c < cols; ++c) std::printf(" %9s", col_names[c].c_str());
    std::printf("\n");
  }
  for (int r = 0; r < rows; ++r) {
    std::printf("  %8s", row_names.empty() ? "" : row_names[r].c_str());
    for (int c = 0; c < cols; ++c) {
      const double v = m[r * stride + c];
      if (std::isinf(v)) std::printf(" %9s", v < 0 ? "-inf" : "inf");
      else std::printf(" %9.4f", v);
    }
    std::printf("\n");
  }
}

// A per-head stage [kH, rows, cols]: each head's matrix under " head h".
void PrintPerHead(const char* title, const double* m, int rows, int cols,
                  const std::vector<std::string>& row_names,
                  const std::vector<std::string>& col_names) {
  for (int h = 0; h < kH; ++h) {
    P(" head %d\n", h);
    PrintMatrix(title, m + h * rows * cols, rows, cols, cols, row_names, col_names);
  }
}

nlohmann::json Mat(const double* m, int rows, int cols) {
  nlohmann::json j = nlohmann::json::array();
  for (int r = 0; r < rows; ++r) {
    nlohmann::json row = nlohmann::json::array();
    for (int c = 0; c < cols; ++c) {
      const double v = m[r * cols + c];
      if (std::isinf(v)) row.push_back(v < 0 ? "-inf" : "inf");
      else row.push_back(v);
    }
    j.push_back(row);
  }
  return j;
}

double Entropy(const std::vector<double>& p) {
  double e = 0;
  for (double x : p)
    if (x > 0) e -= x * std::log(x);
  return e;
}

std::vector<double> Softmax(const std::vector<double>& s) {
  double mx = -INFINITY;
  for (double x : s) mx = std::max(mx, x);
  std::vector<double> p(s.size());
  double sum = 0;
  for (size_t i = 0; i < s.size(); ++i) sum += (p[i] = std::exp(s[i] - mx));
  for (double& x : p) x /= sum;
  return p;
}

struct MeanSd {
  double mean = 0, sd = 0;
};
// Mean and sample standard deviation (n - 1).
MeanSd Stats(const std::vector<double>& v) {
  MeanSd r;
  for (double x : v) r.mean += x;
  r.mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - r.mean) * (x - r.mean);
  r.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  return r;
}

double MaxAbsDiff(const double* a, const double* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Post-norm LayerNorm of each row (biased variance, eps 1e-5).
void LayerNormRows(double* out, const double* x, const double* g, const double* b, int rows,
                   int cols) {
  for (int r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    double mean = 0;
    for (int c = 0; c < cols; ++c) mean += xr[c];
    mean /= cols;
    double var = 0;
    for (int c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= cols;
    const double inv = 1.0 / std::sqrt(var + trace::kToyLayerNormEps);
    for (int c = 0; c < cols; ++c) out[r * cols + c] = (xr[c] - mean) * inv * g[c] + b[c];
  }
}

std::vector<double> Copy(const Tensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

// One reference MHA run of the toy: out [T, E] and every recorded stage.
struct Attended {
  std::vector<double> out;
  StageRecorder rec;
  const double* operator[](const char* stage) const { return rec.Find(stage)->data<double>(); }
};

class Demo {
 public:
  int Run(bool json);

 private:
  // r->out [T, E] = Mha(x [T, E]) with the toy weights, stages in r->rec;
  // false (the error printed) when it fails.
  bool Attend(Attended* r, std::vector<double>& x, int t, Causal causal,
              std::vector<uint8_t>* mask);
  // Weight-row and causal/padding checks on recorded weights [H, T, T].
  void CheckWeights(const double* w, int t, Causal causal, const std::vector<uint8_t>* mask,
                    const char* what);
  void Fail(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  std::vector<std::string> Names(int n, int offset = 0) const {
    std::vector<std::string> r;
    for (int i = 0; i < n; ++i) r.push_back(names_[offset + i]);
    return r;
  }

  trace::ToyBlock toy_;
  std::vector<double> wq_, wk_, wv_, wo_;
  std::vector<std::string> names_;
  nlohmann::json j_;
  int failures_ = 0;
};

void Demo::Fail(const char* fmt, ...) {
  ++failures_;
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (g_text) std::printf("  CHECK FAILED: %s\n", buf);
  j_["failed_checks"].push_back(buf);
}

bool Demo::Attend(Attended* r, std::vector<double>& x, int t, Causal causal,
                  std::vector<uint8_t>* mask) {
  auto view = [](std::vector<double>& d, Shape s) { return MakeView(d.data(), DType::kF64, s); };
  reference::MhaWeights w;
  w.w_q = view(wq_, {kE, kE});
  w.w_k = view(wk_, {kE, kE});
  w.w_v = view(wv_, {kE, kE});
  w.w_o = view(wo_, {kE, kE});
  w.num_heads = kH;
  SdpaOptions opt;
  opt.causal = causal;
  if (mask != nullptr) opt.attn_mask = MakeView(mask->data(), DType::kBool, {t, t});
  r->out.assign(static_cast<size_t>(t) * kE, 0.0);
  TensorView xv = view(x, {1, t, kE});
  Status st = reference::Mha(view(r->out, {1, t, kE}), xv, xv, xv, w, opt, &r->rec);
  if (!st.ok()) PrintError("demo", st.ToString());
  return st.ok();
}

void Demo::CheckWeights(const double* w, int t, Causal causal, const std::vector<uint8_t>* mask,
                        const char* what) {
  for (int h = 0; h < kH; ++h)
    for (int i = 0; i < t; ++i) {
      double sum = 0;
      bool any_allowed = false;
      for (int j = 0; j < t; ++j) {
        const double p = w[(h * t + i) * t + j];
        const bool allowed = (causal == Causal::kNone || j <= i) &&
                             (mask == nullptr || (*mask)[i * t + j] != 0);
        any_allowed |= allowed;
        if (!allowed && p != 0.0) Fail("%s: head %d row %d masked key %d has weight %g", what, h,
                                       i, j, p);
        sum += p;
      }
      const double want = any_allowed ? 1.0 : 0.0;  // fully masked row: weights 0
      if (std::fabs(sum - want) > 1e-12)
        Fail("%s: head %d row %d sums to %.17g, not %g", what, h, i, sum, want);
    }
}

int Demo::Run(bool json) {
  g_text = !json;
  Result<trace::ToyBlock> toy = trace::MakeToyBlock();
  if (!toy.ok()) {
    PrintError("demo", toy.status().ToString());
    return kExitUsage;
  }
  toy_ = std::move(toy).value();
  wq_ = Copy(toy_.w_q), wk_ = Copy(toy_.w_k), wv_ = Copy(toy_.w_v), wo_ = Copy(toy_.w_o);
  for (int t = 0; t < kT; ++t) names_.push_back(trace::ToyToken(t).text);
  const std::vector<std::string> tok = Names(kT);
  j_["failed_checks"] = nlohmann::json::array();

  P("attnflow demo — how four tokens read each other (float64 reference)\n");
  P("==================================================================\n\n");

  // ---- Step 1 ---------------------------------------------------------------
  std::vector<double> x(kT * kE), tok_embed(kT * kE), pos(kT * kE);
  for (int t = 0; t < kT; ++t) {
    trace::ToyInput(t, &tok_embed[t * kE], &pos[t * kE]);
    for (int i = 0; i < kE; ++i) x[t * kE + i] = tok_embed[t * kE + i] + pos[t * kE + i];
  }
  P("Step 1. X = token embedding + sinusoidal position  [4 tokens x d_model 8]\n");
  PrintMatrix("X", x.data(), kT, kE, kE, tok, {});
  j_["x"] = Mat(x.data(), kT, kE);

  // ---- Steps 2-8: bidirectional ----------------------------------------------
  Attended bi;
  if (!Attend(&bi, x, kT, Causal::kNone, nullptr)) return kExitUsage;
  const std::vector<double>& out = bi.out;
  {
    const double *q = bi["q"], *k = bi["k"], *v = bi["v"], *weights = bi["weights"];
    P("\nStep 2. Q = X·W_qᵀ, K = X·W_kᵀ, V = X·W_vᵀ, split into %d heads of d_k=%d\n", kH, kDh);
    for (int h = 0; h < kH; ++h) {
      P(" head %d\n", h);
      PrintMatrix("Q", q + h * kT * kDh, kT, kDh, kDh, tok, {});
      PrintMatrix("K", k + h * kT * kDh, kT, kDh, kDh, tok, {});
      PrintMatrix("V", v + h * kT * kDh, kT, kDh, kDh, tok, {});
    }
    P("\nStep 3. scores = Q·Kᵀ (row = query, column = key)\n");
    PrintPerHead("scores", bi["scores"], kT, kT, tok, tok);
    P("\nStep 4. scaled = scores / sqrt(d_k)  (sqrt(4) = 2; step 11 shows why)\n");
    PrintPerHead("scaled", bi["scaled"], kT, kT, tok, tok);
    P("\nStep 5. weights = softmax(scaled) along each row (no mask: every token sees all)\n");
    PrintPerHead("weights", weights, kT, kT, tok, tok);
    CheckWeights(weights, kT, Causal::kNone, nullptr, "step 5");
    P("\nStep 6. head output = weights·V (each row a weighted average of V rows)\n");
    PrintPerHead("head output", bi["heads_out"], kT, kDh, tok, {});
    P("\nStep 7. concat heads: row t = [head0(t) | head1(t)]\n");
    PrintMatrix("concat", bi["concat"], kT, kE, kE, tok, {});
    P("\nStep 8. attention output = concat·W_oᵀ\n");
    PrintMatrix("out", out.data(), kT, kE, kE, tok, {});
    j_["weights"] = Mat(weights, kH * kT, kT);
    j_["out"] = Mat(out.data(), kT, kE);
  }

  // ---- Step 9: causal ---------------------------------------------------------
  Attended causal;
  if (!Attend(&causal, x, kT, Causal::kTopLeft, nullptr)) return kExitUsage;
  const std::vector<double>& out_causal = causal.out;
  {
    const double *masked = causal["masked"], *weights = causal["weights"];
    P("\nStep 9. Causal mask (top_left: row i sees keys j <= i); future scores become -inf\n");
    for (int h = 0; h < kH; ++h) {
      P(" head %d\n", h);
      PrintMatrix("masked", masked + h * kT * kT, kT, kT, kT, tok, tok);
      PrintMatrix("weights = softmax(masked)", weights + h * kT * kT, kT, kT, kT, tok, tok);
    }
    CheckWeights(weights, kT, Causal::kTopLeft, nullptr, "step 9");
    P("  The first row can only read itself: its weight on \"%s\" is 1.\n", tok[0].c_str());
    j_["causal_weights"] = Mat(weights, kH * kT, kT);
    j_["causal_out"] = Mat(out_causal.data(), kT, kE);
  }

  // ---- Step 10: padding + causal ---------------------------------------------
  {
    // Left padding, as a batch of unequal lengths gets it for decoding:
    // [<pad>, the, cat, sat, down]. The pad embedding is zero and the real
    // tokens keep positions 0..3 (position ids count real tokens only).
    constexpr int kTp = kT + 1;
    std::vector<double> xp(kTp * kE, 0.0);
    for (int t = 0; t < kT; ++t)
      for (int i = 0; i < kE; ++i) xp[(t + 1) * kE + i] = x[t * kE + i];
    std::vector<uint8_t> mask(kTp * kTp, 1);
    for (int i = 0; i < kTp; ++i) mask[i * kTp + 0] = 0;  // nobody reads the pad key
    Attended padded, nomask;
    if (!Attend(&padded, xp, kTp, Causal::kTopLeft, &mask)) return kExitUsage;
    if (!Attend(&nomask, xp, kTp, Causal::kTopLeft, nullptr)) return kExitUsage;
    const std::vector<double>& out_p = padded.out;
    const std::vector<double>& out_nomask = nomask.out;
    const double* weights = padded["weights"];
    std::vector<std::string> ptok = {"<pad>"};
    for (const auto& s : tok) ptok.push_back(s);
    P("\nStep 10. A padding key and the causal mask together\n"
      "  Batch row [<pad> the cat sat down] (left padding). Allowed = causal AND not padding.\n");
    PrintMatrix("weights, head 0 (padding mask + causal)", weights, kTp, kTp, kTp, ptok, ptok);
    CheckWeights(weights, kTp, Causal::kTopLeft, &mask, "step 10");
    const double real_diff = MaxAbsDiff(out_p.data() + kE, out_causal.data(), kT * kE);
    double pad_row = 0;
    for (int i = 0; i < kE; ++i) pad_row = std::max(pad_row, std::fabs(out_p[i]));
    const double nomask_diff = MaxAbsDiff(out_nomask.data() + kE, out_causal.data(), kT * kE);
    P("  The <pad> query row: causal lets it see only key 0, padding removes key 0, so the row\n"
      "  is fully masked: weights 0, output 0 (max |out| = %g), never NaN.\n", pad_row);
    P("  Real tokens vs step 9 (unpadded): max |diff| = %.3g  -> padding done right changes nothing.\n",
      real_diff);
    P("  Without the padding mask (causal only) every real token also reads <pad>:\n"
      "  max |diff| vs step 9 = %.4f.\n", nomask_diff);
    if (real_diff > 1e-12) Fail("step 10: padded real rows differ from step 9 by %g", real_diff);
    if (pad_row != 0.0) Fail("step 10: fully masked pad row has output %g", pad_row);
    j_["padding"] = {{"weights", Mat(weights, kH * kTp, kTp)},
                     {"real_rows_max_abs_diff", real_diff},
                     {"pad_row_max_abs_out", pad_row},
                     {"no_padding_mask_max_abs_diff", nomask_diff}};
  }

  // ---- Step 11: why sqrt(d_k) -------------------------------------------------
  P("\nStep 11. Why divide by sqrt(d_k)? Statistics over %d seeded draws per d_k\n"
    "  Each draw: q and %d keys with N(0,1) entries (attnflow::Rng, seed %llu + d_k).\n"
    "  q·k then has variance d_k, so unscaled logits grow like sqrt(d_k) and softmax\n"
    "  saturates (max weight -> 1, entropy -> 0); dividing by sqrt(d_k) keeps var 1.\n"
    "  One draw can mislead either way: look at the means and the spread.\n",
    kDraws, kStatKeys, static_cast<unsigned long long>(kStatSeedBase));
  P("  %5s %8s | %9s | %17s | %17s\n", "d_k", "", "var(q·k)", "max weight", "entropy (nats)");
  j_["scaling"] = nlohmann::json::array();
  for (int dk : {4, 64, 512}) {
    Rng rng(kStatSeedBase + static_cast<uint64_t>(dk));
    std::vector<double> logit_raw, logit_scl, max_raw, max_scl, ent_raw, ent_scl;
    const double rs = 1.0 / std::sqrt(static_cast<double>(dk));
    std::vector<double> q(dk), key(dk);
    for (int d = 0; d < kDraws; ++d) {
      for (double& e : q) e = rng.Normal();
      std::vector<double> raw(kStatKeys), scl(kStatKeys);
      for (int j = 0; j < kStatKeys; ++j) {
        for (double& e : key) e = rng.Normal();
        double acc = 0;
        for (int c = 0; c < dk; ++c) acc += q[c] * key[c];
        raw[j] = acc;
        scl[j] = acc * rs;
        logit_raw.push_back(raw[j]);
        logit_scl.push_back(scl[j]);
      }
      const auto pr = Softmax(raw), ps = Softmax(scl);
      max_raw.push_back(*std::max_element(pr.begin(), pr.end()));
      max_scl.push_back(*std::max_element(ps.begin(), ps.end()));
      ent_raw.push_back(Entropy(pr));
      ent_scl.push_back(Entropy(ps));
    }
    const MeanSd vr = Stats(logit_raw), vs = Stats(logit_scl);
    const MeanSd mr = Stats(max_raw), ms = Stats(max_scl);
    const MeanSd er = Stats(ent_raw), es = Stats(ent_scl);
    P("  %5d %8s | %9.3f | %7.4f ± %7.4f | %7.4f ± %7.4f\n", dk, "unscaled", vr.sd * vr.sd,
      mr.mean, mr.sd, er.mean, er.sd);
    P("  %5s %8s | %9.3f | %7.4f ± %7.4f | %7.4f ± %7.4f\n", "", "scaled", vs.sd * vs.sd, ms.mean,
      ms.sd, es.mean, es.sd);
    auto pack = [](const MeanSd& v, const MeanSd& m, const MeanSd& e) {
      return nlohmann::json{{"var_qk", v.sd * v.sd},
                            {"max_weight_mean", m.mean},
                            {"max_weight_sd", m.sd},
                            {"entropy_mean", e.mean},
                            {"entropy_sd", e.sd}};
    };
    j_["scaling"].push_back({{"d_k", dk},
                             {"draws", kDraws},
                             {"keys", kStatKeys},
                             {"seed", kStatSeedBase + static_cast<uint64_t>(dk)},
                             {"unscaled", pack(vr, mr, er)},
                             {"scaled", pack(vs, ms, es)}});
  }
  P("  (uniform over %d keys: max weight %.4f, entropy %.4f nats; mean ± sample sd)\n",
    kStatKeys, 1.0 / kStatKeys, std::log(static_cast<double>(kStatKeys)));

  // ---- Step 12: order-blindness ---------------------------------------------
  {
    std::vector<double> x0 = tok_embed, x0p(kT * kE), xpp(kT * kE);
    for (int i = 0; i < kT; ++i)
      for (int c = 0; c < kE; ++c) {
        x0p[i * kE + c] = tok_embed[kPerm[i] * kE + c];
        xpp[i * kE + c] = tok_embed[kPerm[i] * kE + c] + pos[i * kE + c];
      }
    Attended r0, r0p, rpp;
    for (auto [r, in] : {std::pair{&r0, &x0}, std::pair{&r0p, &x0p}, std::pair{&rpp, &xpp}})
      if (!Attend(r, *in, kT, Causal::kNone, nullptr)) return kExitUsage;
    const std::vector<double>& o0 = r0.out;
    const std::vector<double>& o0p = r0p.out;
    const std::vector<double>& opp = rpp.out;
    const double *w0 = r0["weights"], *w0p = r0p["weights"];
    double out_diff = 0, w_diff = 0, pos_diff = 0;
    for (int i = 0; i < kT; ++i) {
      out_diff = std::max(out_diff, MaxAbsDiff(&o0p[i * kE], &o0[kPerm[i] * kE], kE));
      pos_diff = std::max(pos_diff, MaxAbsDiff(&opp[i * kE], &out[kPerm[i] * kE], kE));
      for (int h = 0; h < kH; ++h)
        for (int j = 0; j < kT; ++j)
          w_diff = std::max(w_diff, std::fabs(w0p[(h * kT + i) * kT + j] -
                                              w0[(h * kT + kPerm[i]) * kT + kPerm[j]]));
    }
    std::vector<std::string> shuffled;
    for (int i = 0; i < kT; ++i) shuffled.push_back(tok[kPerm[i]]);
    P("\nStep 12. Order-blindness: attention without positions is a set operation\n"
      "  Shuffle the tokens to [%s %s %s %s] and drop the positions (X = embedding only).\n",
      shuffled[0].c_str(), shuffled[1].c_str(), shuffled[2].c_str(), shuffled[3].c_str());
    P("  Output row i of the shuffle vs row perm[i] of the original: max |diff| = %.3g\n",
      out_diff);
    P("  Weights [i][j] vs original [perm i][perm j]:                max |diff| = %.3g\n",
      w_diff);
    P("  The rows are permuted and nothing else changes. With sinusoidal positions added\n"
      "  (steps 1-8), the same shuffle changes the outputs: max |diff| = %.4f.\n", pos_diff);
    if (out_diff > 1e-12 || w_diff > 1e-12)
      Fail("step 12: shuffle without positions changed more than the row order (%g, %g)",
           out_diff, w_diff);
    j_["order"] = {{"perm", std::vector<int>(kPerm, kPerm + kT)},
                   {"no_pos_out_max_abs_diff", out_diff},
                   {"no_pos_weights_max_abs_diff", w_diff},
                   {"with_pos_out_max_abs_diff", pos_diff}};
  }

  // ---- Step 13: sinusoidal vs learned positions ------------------------------
  {
    std::vector<double> sin_tab(kLearnedRows * kE), learned(kLearnedRows * kE), tmp(kE);
    for (int p = 0; p < kLearnedRows; ++p) trace::ToyInput(p, tmp.data(), &sin_tab[p * kE]);
    Rng rng(kLearnedSeed);
    for (double& e : learned) e = kLearnedSd * rng.Normal();
    auto toeplitz_dev = [](const std::vector<double>& tab) {
      // Max over offsets k of (max - min) of P[p]·P[p+k]: 0 iff dot products
      // depend on the offset only.
      double dev = 0;
      for (int k = 0; k < kLearnedRows; ++k) {
        double lo = INFINITY, hi = -INFINITY;
        for (int p = 0; p + k < kLearnedRows; ++p) {
          double d = 0;
          for (int c = 0; c < kE; ++c) d += tab[p * kE + c] * tab[(p + k) * kE + c];
          lo = std::min(lo, d), hi = std::max(hi, d);
        }
        dev = std::max(dev, hi - lo);
      }
      return dev;
    };
    std::vector<double> xl(kT * kE);
    for (int t = 0; t < kT; ++t)
      for (int c = 0; c < kE; ++c) xl[t * kE + c] = tok_embed[t * kE + c] + learned[t * kE + c];
    Attended learned_run;
    if (!Attend(&learned_run, xl, kT, Causal::kNone, nullptr)) return kExitUsage;
    const std::vector<double>& ol = learned_run.out;
    const double *wl = learned_run["weights"], *ws = bi["weights"];
    const double ds = toeplitz_dev(sin_tab), dl = toeplitz_dev(learned);
    P("\nStep 13. Sinusoidal against learned positions on the same toy\n"
      "  Learned positions are a trained table; here a seeded stand-in (Rng seed %llu,\n"
      "  N(0, %.1f²), %d rows) plays the trained table. Same tokens, same weights:\n",
      static_cast<unsigned long long>(kLearnedSeed), kLearnedSd, kLearnedRows);
    PrintMatrix("weights, head 0, sinusoidal (= step 5)", ws, kT, kT, kT, tok, tok);
    PrintMatrix("weights, head 0, learned", wl, kT, kT, kT, tok, tok);
    P("  Is P[p]·P[p+k] a function of the offset k only (positions 0..%d)?\n"
      "    sinusoidal: max spread over p = %.3g (yes: sin a sin b + cos a cos b = cos(a-b))\n"
      "    learned:    max spread over p = %.4f (no: nothing ties rows together)\n"
      "  The sinusoid is defined at every position; the learned table stops at row %d\n"
      "  (position %d has no vector unless the table is extended or interpolated).\n",
      kLearnedRows - 1, ds, dl, kLearnedRows - 1, kLearnedRows);
    if (ds > 1e-12) Fail("step 13: sinusoidal dot products depend on more than the offset (%g)",
                         ds);
    j_["positions"] = {{"learned_seed", kLearnedSeed},
                       {"learned_sd", kLearnedSd},
                       {"rows", kLearnedRows},
                       {"learned_weights", Mat(wl, kH * kT, kT)},
                       {"learned_out", Mat(ol.data(), kT, kE)},
                       {"sinusoidal_offset_spread", ds},
                       {"learned_offset_spread", dl}};
  }

  // ---- Step 14: the block around attention -----------------------------------
  {
    const std::vector<double> w1 = Copy(toy_.w_1), b1 = Copy(toy_.b_1), w2 = Copy(toy_.w_2),
                              b2 = Copy(toy_.b_2), g1 = Copy(toy_.ln1_g), be1 = Copy(toy_.ln1_b),
                              g2 = Copy(toy_.ln2_g), be2 = Copy(toy_.ln2_b);
    std::vector<double> res1(kT * kE), n1(kT * kE), hid(kT * kF), ffn(kT * kE), res2(kT * kE),
        y(kT * kE);
    for (int i = 0; i < kT * kE; ++i) res1[i] = x[i] + out[i];
    LayerNormRows(n1.data(), res1.data(), g1.data(), be1.data(), kT, kE);
    for (int t = 0; t < kT; ++t) {
      for (int f = 0; f < kF; ++f) {
        double a = b1[f];
        for (int c = 0; c < kE; ++c) a += n1[t * kE + c] * w1[f * kE + c];
        hid[t * kF + f] = std::max(a, 0.0);
      }
      for (int c = 0; c < kE; ++c) {
        double a = b2[c];
        for (int f = 0; f < kF; ++f) a += hid[t * kF + f] * w2[c * kF + f];
        ffn[t * kE + c] = a;
      }
    }
    for (int i = 0; i < kT * kE; ++i) res2[i] = n1[i] + ffn[i];
    LayerNormRows(y.data(), res2.data(), g2.data(), be2.data(), kT, kE);
    P("\nStep 14. The block around attention (post-norm, as in the original Transformer)\n"
      "  n1 = LayerNorm(X + attention(X));  FFN(n1) = relu(n1·W_1ᵀ + b_1)·W_2ᵀ + b_2 (8->16->8);\n"
      "  y = LayerNorm(n1 + FFN(n1)). The residual keeps X flowing past attention.\n");
    PrintMatrix("X + attention (residual 1)", res1.data(), kT, kE, kE, tok, {});
    PrintMatrix("n1 = LayerNorm(residual 1)", n1.data(), kT, kE, kE, tok, {});
    PrintMatrix("FFN(n1)", ffn.data(), kT, kE, kE, tok, {});
    PrintMatrix("y = LayerNorm(n1 + FFN(n1)), the block output", y.data(), kT, kE, kE, tok, {});
    j_["block"] = {{"residual1", Mat(res1.data(), kT, kE)},
                   {"norm1", Mat(n1.data(), kT, kE)},
                   {"ffn", Mat(ffn.data(), kT, kE)},
                   {"block_out", Mat(y.data(), kT, kE)}};
  }

  j_["checks_passed"] = failures_ == 0;
  if (json) {
    std::printf("%s\n", DumpJson(j_, 1).c_str());
  } else {
    P("\nChecks: weight rows sum to 1 (0 for a fully masked row); causal and padded weights are\n"
      "exactly 0; padding changes nothing for real tokens; a shuffle without positions only\n"
      "permutes rows; sinusoidal dot products depend on the offset only: %s\n",
      failures_ == 0 ? "PASS" : "FAIL");
    P("The numbers above are pinned by tests/cli/cli_demo_test.cc against an independent\n"
      "NumPy float64 recomputation (tools/demo/demo_numpy.py). `attnflow demo --json` prints them.\n");
  }
  return failures_ == 0 ? kExitOk : kExitCheckFailed;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(demo, "demo",
                          "The four-token walkthrough in numbered steps: every attention stage, "
                          "scaling statistics, padding, order, positions, the block",
                          [](CLI::App& sub) -> std::function<int()> {
                            auto json = std::make_shared<bool>(false);
                            sub.add_flag("--json", *json,
                                         "Print the demo's numbers as one JSON object");
                            return [json] { return Demo().Run(*json); };
                          });

}  // namespace attnflow::cli
