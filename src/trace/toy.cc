// toy.cc — the frozen toy: tokens, embeddings, positions and block weights.
//
// The first four tokens, their embeddings, the sinusoidal positions and the
// attention weights W(which, r, c) are exactly those of `attnflow demo`
// (tools/cli/cmd_demo.cc); the FFN, LayerNorm parameters and the extra
// vocabulary (for longer inputs and decode steps) are frozen here.
// Invariant: everything is a pure function of its indices — no randomness,
// no state — so a trace of the toy is reproducible bit for bit.
#include <cmath>

#include "attnflow/trace.h"

namespace attnflow::trace {
namespace {

constexpr int kE = static_cast<int>(kToyEmbed);
constexpr int kF = static_cast<int>(kToyFfn);

// The demo's vocabulary first, then words for longer sentences / decode.
constexpr const char* kWords[] = {"the", "cat",  "sat",    "down",   "on",  "a",
                                  "mat", ".",    "and",    "then",   "it",  "purred",
                                  "softly", "all", "day", "long"};
constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);

// Token embeddings of the demo (frozen, hand-picked).
constexpr double kDemoEmbed[4][8] = {
    {0.2, -0.1, 0.4, 0.0, 0.3, -0.2, 0.1, 0.5},
    {0.9, 0.3, -0.5, 0.2, -0.1, 0.6, 0.4, -0.3},
    {-0.4, 0.8, 0.1, -0.6, 0.5, 0.2, -0.7, 0.3},
    {0.1, -0.5, 0.7, 0.4, -0.3, -0.4, 0.6, 0.2}};

double WordEmbedding(int id, int i) {
  if (id < 4) return kDemoEmbed[id][i];
  return 0.6 * std::sin(1.9 * id + 0.8 * i) * std::cos(0.37 * id * i + 0.5);
}

int WordAt(int64_t pos) {
  if (pos < 4) return static_cast<int>(pos);
  return 4 + static_cast<int>((pos - 4) % (kNumWords - 4));
}

// The original Transformer's sinusoid (as the demo computes it).
double Sinusoid(int64_t pos, int i) {
  const double rate = std::pow(10000.0, -2.0 * (i / 2) / kE);
  return (i % 2 == 0) ? std::sin(pos * rate) : std::cos(pos * rate);
}

// The demo's frozen weight pattern (which: 0 q, 1 k, 2 v, 3 o; 4, 5 FFN).
double W(int which, int r, int c) {
  return 0.5 * std::sin(0.7 * r + 1.3 * c + 0.9 * which) +
         0.25 * std::cos(1.1 * r - 0.4 * c * (which + 1));
}

Status Fill(Tensor* t, const Shape& shape, double (*f)(int, int)) {
  Result<Tensor> r = Tensor::Zeros(DType::kF64, shape);
  if (!r.ok()) return r.status();
  *t = std::move(r).value();
  const int rows = static_cast<int>(shape[0]);
  const int cols = shape.size() > 1 ? static_cast<int>(shape[1]) : 1;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) t->data<double>()[i * cols + j] = f(i, j);
  return Status::Ok();
}

}  // namespace

TraceToken ToyToken(int64_t pos) {
  const int id = WordAt(pos);
  return TraceToken{id, kWords[id]};
}

void ToyInput(int64_t pos, double* tok_embed, double* position) {
  const int id = WordAt(pos);
  for (int i = 0; i < kE; ++i) {
    tok_embed[i] = WordEmbedding(id, i);
    position[i] = Sinusoid(pos, i);
  }
}

void ToyPadInput(int64_t pos, double* tok_embed, double* position) {
  for (int i = 0; i < kE; ++i) {
    tok_embed[i] = 0.4 * std::cos(0.9 * i + 0.3);
    position[i] = Sinusoid(pos, i);
  }
}

Result<ToyBlock> MakeToyBlock() {
  ToyBlock b;
  ATTNFLOW_RETURN_IF_ERROR(Fill(&b.w_q, {kE, kE}, [](int r, int c) { return W(0, r, c); }));
  ATTNFLOW_RETURN_IF_ERROR(Fill(&b.w_k, {kE, kE}, [](int r, int c) { return W(1, r, c); }));
  ATTNFLOW_RETURN_IF_ERROR(Fill(&b.w_v, {kE, kE}, [](int r, int c) { return W(2, r, c); }));
  ATTNFLOW_RETURN_IF_ERROR(Fill(&b.w_o, {kE, kE}, [](int r, int c) { return W(3, r, c); }));
  // FFN: fan-in scaled so activations stay O(1).
  ATTNFLOW_RETURN_IF_ERROR(
      Fill(&b.w_1, {kF, kE}, [](int r, int c) { return 0.7 * W(4, r, c); }));
  ATTNFLOW_RETURN_IF_ERROR(
      Fill(&b.b_1, {kF}, [](int r, int) { return 0.1 * std::sin(0.5 * r + 0.3); }));
  ATTNFLOW_RETURN_IF_ERROR(
      Fill(&b.w_2, {kE, kF}, [](int r, int c) { return 0.5 * W(5, r, c); }));
  ATTNFLOW_RETURN_IF_ERROR(
      Fill(&b.b_2, {kE}, [](int r, int) { return 0.05 * std::cos(0.9 * r); }));
  ATTNFLOW_RETURN_IF_ERROR(
      Fill(&b.ln1_g, {kE}, [](int i, int) { return 1.0 + 0.1 * std::sin(1.0 * i); }));
  ATTNFLOW_RETURN_IF_ERROR(
      Fill(&b.ln1_b, {kE}, [](int i, int) { return 0.05 * std::cos(2.0 * i); }));
  ATTNFLOW_RETURN_IF_ERROR(
      Fill(&b.ln2_g, {kE}, [](int i, int) { return 1.0 + 0.1 * std::cos(1.0 * i); }));
  ATTNFLOW_RETURN_IF_ERROR(
      Fill(&b.ln2_b, {kE}, [](int i, int) { return 0.05 * std::sin(2.0 * i); }));
  return b;
}

}  // namespace attnflow::trace
