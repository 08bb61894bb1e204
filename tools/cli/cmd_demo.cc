// cmd_demo.cc — `attnflow demo`: the four-token walkthrough.
//
// Frozen inputs (no randomness): four tokens, d_model 8, two heads of d_k 4.
// Prints every stage of the float64 reference for each head and demonstrates
// (1) 1/sqrt(d_k) scaling vs softmax saturation, (2) multi-head split and
// concat, (3) the causal mask zeroing future weights. Ends with checks: every
// row sums to one and every future weight is exactly zero (exit 1 if not).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/trace.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

constexpr int kT = 4, kE = 8, kH = 2, kDh = kE / kH;
const char* kTokens[kT] = {"the", "cat", "sat", "down"};
static_assert(kE == trace::kToyEmbed && kH == trace::kToyHeads,
              "the demo is the trace toy's first four tokens");

// The frozen inputs and weights are the trace toy's (src/trace/toy.cc), so
// `attnflow demo` and `attnflow trace` show the same numbers.

void PrintMatrix(const char* title, const double* m, int rows, int cols,
                 int stride, bool row_labels, bool col_labels) {
  std::printf("  %s\n", title);
  if (col_labels) {
    std::printf("  %8s", "");
    for (int c = 0; c < cols; ++c) std::printf(" %9s", kTokens[c]);
    std::printf("\n");
  }
  for (int r = 0; r < rows; ++r) {
    std::printf("  %8s", row_labels ? kTokens[r] : "");
    for (int c = 0; c < cols; ++c) {
      const double v = m[r * stride + c];
      if (std::isinf(v)) std::printf(" %9s", v < 0 ? "-inf" : "inf");
      else std::printf(" %9.4f", v);
    }
    std::printf("\n");
  }
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

int RunDemo() {
  std::printf("attnflow demo — how four tokens read each other (float64 reference)\n");
  std::printf("==================================================================\n\n");
  // 1. Embedding + position.
  std::vector<double> x(kT * kE);
  for (int t = 0; t < kT; ++t) {
    double tok[kE], pos[kE];
    trace::ToyInput(t, tok, pos);
    for (int i = 0; i < kE; ++i) x[t * kE + i] = tok[i] + pos[i];
  }
  std::printf("Step 1. X = token embedding + sinusoidal position  [4 tokens x d_model 8]\n");
  PrintMatrix("X", x.data(), kT, kE, kE, true, false);

  // Weights.
  Result<trace::ToyBlock> toy = trace::MakeToyBlock();
  if (!toy.ok()) {
    PrintError("demo", toy.status().ToString());
    return kExitUsage;
  }
  auto copy = [](const Tensor& t) {
    return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
  };
  std::vector<double> wq = copy(toy->w_q), wk = copy(toy->w_k), wv = copy(toy->w_v),
                      wo = copy(toy->w_o);
  auto view = [](std::vector<double>& d, Shape s) {
    return MakeView(d.data(), DType::kF64, s);
  };
  reference::MhaWeights w;
  w.w_q = view(wq, {kE, kE});
  w.w_k = view(wk, {kE, kE});
  w.w_v = view(wv, {kE, kE});
  w.w_o = view(wo, {kE, kE});
  w.num_heads = kH;
  TensorView xv = view(x, {1, kT, kE});

  int failures = 0;
  for (Causal causal : {Causal::kNone, Causal::kTopLeft}) {
    SdpaOptions opt;
    opt.causal = causal;
    StageRecorder rec;
    std::vector<double> out(kT * kE);
    Status st = reference::Mha(view(out, {1, kT, kE}), xv, xv, xv, w, opt, &rec);
    if (!st.ok()) {
      PrintError("demo", st.ToString());
      return kExitUsage;
    }
    const double* q = rec.Find("q")->data<double>();
    const double* k = rec.Find("k")->data<double>();
    const double* v = rec.Find("v")->data<double>();
    const double* scores = rec.Find("scores")->data<double>();
    const double* scaled = rec.Find("scaled")->data<double>();
    const double* masked = rec.Find("masked")->data<double>();
    const double* weights = rec.Find("weights")->data<double>();
    const double* heads = rec.Find("heads_out")->data<double>();
    const double* concat = rec.Find("concat")->data<double>();
    if (causal == Causal::kNone) {
      std::printf("\nStep 2. Q = X·W_qᵀ, K = X·W_kᵀ, V = X·W_vᵀ, split into %d heads of d_k=%d\n",
                  kH, kDh);
      for (int h = 0; h < kH; ++h) {
        std::printf(" head %d\n", h);
        PrintMatrix("Q", q + h * kT * kDh, kT, kDh, kDh, true, false);
        PrintMatrix("K", k + h * kT * kDh, kT, kDh, kDh, true, false);
        PrintMatrix("V", v + h * kT * kDh, kT, kDh, kDh, true, false);
      }
    }
    std::printf("\n%s attention (mask: %s)\n",
                causal == Causal::kNone ? "Step 3-6. Bidirectional" : "Step 7. Causal",
                causal == Causal::kNone ? "none" : "causal top_left: row i sees keys j <= i");
    for (int h = 0; h < kH; ++h) {
      const int so = h * kT * kT;
      std::printf(" head %d\n", h);
      if (causal == Causal::kNone) {
        PrintMatrix("scores = Q·Kᵀ", scores + so, kT, kT, kT, true, true);
        PrintMatrix("scaled = scores / sqrt(d_k)  (sqrt(4) = 2)", scaled + so, kT, kT, kT, true, true);
      }
      PrintMatrix("masked", masked + so, kT, kT, kT, true, true);
      PrintMatrix("weights = softmax(masked)", weights + so, kT, kT, kT, true, true);
      PrintMatrix("head output = weights·V", heads + h * kT * kDh, kT, kDh, kDh, true, false);
      // Checks.
      for (int i = 0; i < kT; ++i) {
        double sum = 0;
        for (int j = 0; j < kT; ++j) {
          sum += weights[so + i * kT + j];
          if (causal == Causal::kTopLeft && j > i && weights[so + i * kT + j] != 0.0) {
            std::printf("  CHECK FAILED: head %d row %d future key %d has weight %g\n", h, i, j,
                        weights[so + i * kT + j]);
            ++failures;
          }
        }
        if (std::fabs(sum - 1.0) > 1e-12) {
          std::printf("  CHECK FAILED: head %d row %d sums to %.17g\n", h, i, sum);
          ++failures;
        }
      }
    }
    if (causal == Causal::kNone) {
      std::printf("\nStep 8. concat heads: row t = [head0(t) | head1(t)]\n");
      PrintMatrix("concat", concat, kT, kE, kE, true, false);
      std::printf("\nStep 9. output = concat·W_oᵀ\n");
      PrintMatrix("out", out.data(), kT, kE, kE, true, false);
    }
  }

  // Scaling and saturation: d_k = 64 with unit-variance entries.
  std::printf("\nWhy divide by sqrt(d_k)? Dot products of d_k unit-variance entries have\n"
              "variance d_k, so raw logits grow like sqrt(d_k) and softmax saturates.\n");
  for (int dk : {4, 64, 512}) {
    // Deterministic pseudo-normal entries (sum of 12 uniforms - 6).
    uint64_t state = 12345;
    auto uni = [&state] {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<double>(state >> 11) / 9007199254740992.0;
    };
    auto normal = [&] {
      double s = 0;
      for (int i = 0; i < 12; ++i) s += uni();
      return s - 6.0;
    };
    std::vector<double> qv(dk), raw(kT), scl(kT);
    for (double& e : qv) e = normal();
    for (int j = 0; j < kT; ++j) {
      double acc = 0;
      for (int c = 0; c < dk; ++c) acc += qv[c] * normal();
      raw[j] = acc;
      scl[j] = acc / std::sqrt(static_cast<double>(dk));
    }
    const auto pr = Softmax(raw), ps = Softmax(scl);
    const double mr = *std::max_element(pr.begin(), pr.end());
    const double ms = *std::max_element(ps.begin(), ps.end());
    std::printf("  d_k=%-4d unscaled: max weight %.4f entropy %.3f nats | scaled: max weight %.4f entropy %.3f nats (uniform = %.3f)\n",
                dk, mr, Entropy(pr), ms, Entropy(ps), std::log(static_cast<double>(kT)));
  }

  std::printf("\nChecks: every weight row sums to 1; causal future weights are exactly 0: %s\n",
              failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? kExitOk : kExitCheckFailed;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(demo, "demo",
                          "The four-token walkthrough: every attention stage, printed",
                          [](CLI::App& sub) -> std::function<int()> {
                            return [] { return RunDemo(); };
                          });

}  // namespace attnflow::cli
