/* af_bound.c — the tolerances of the golden checks, in one place for the
 * host and the device. Rounding bounds of the f32 attention stages: how far from the
 * exact (float64) value a CORRECT implementation may land when it computes
 * in a float type of unit roundoff u (f32: 2^-24), whatever order it sums
 * in. A golden check that allows exactly this much tells rounding from a
 * bug: a correct f32 or f16 port passes, a break larger than rounding is
 * named. The derivation is docs/golden-format.md "Tolerances"; the host
 * (`attnflow verify`, src/golden/bounds.cc) and the device harness
 * (micro/harness/golden_main.c) both call these functions, so the two
 * sides use one bound.
 *
 * Invariants:
 *  - No heap, no state; every output is a bound >= 0 (float, rounded up by
 *    a 2^-10 margin that covers the bound's own float evaluation); a
 *    weight's bound is at most 1 (weights lie in [0, 1]); a bound may be
 *    +inf when the type is too short to say anything (never NaN).
 *  - A hidden key (expected masked = -inf) gets bound 0: only -inf matches
 *    it. A row with no visible key gets 0 everywhere (out 0, lse -inf,
 *    weights 0 are exact).
 *  - Every bound also covers the expected value's own rounding to float32
 *    when it was stored (AF_BOUND_U32 * |x|).
 *  - gamma(n) = n*u / (1 - n*u) needs n*u < 1/2: AF_ERR_PARAM otherwise
 *    (the type is too short for that sum; no bound exists). Each sum's n
 *    counts two more roundings than its terms: the inputs' own rounding
 *    into the type (a float64 case computed in f32).
 */
#include <math.h>
#include <stddef.h>

#include "attnflow/micro.h"

#define AF_BOUND_U32 5.9604644775390625e-8f /* 2^-24: the stored float32 */
#define AF_BOUND_EXP_ULPS 8.0f              /* exp/log within 8u (two exps) */
#define AF_BOUND_MARGIN 1.0009765625f       /* 1 + 2^-10 */
#define AF_BOUND_TINY 1.1754944e-38f        /* FLT_MIN: underflow, flush-to-zero */

static float af_gamma(float n, float u) { return n * u / (1.0f - n * u); }

static float af_absf(float x) { return x < 0.0f ? -x : x; }

/* Input propagation and accumulation of one score: P (inputs' own error
 * through the dot product), A = sum |q k|, s = sum q k. */
static void af_dot_terms(const af_bound_row_in* in, int32_t j, float* P, float* A, float* s) {
  const int32_t D = in->head_dim;
  const float* kj = in->k + (size_t)j * D;
  float p = 0.0f, a = 0.0f, acc = 0.0f;
  int32_t d;
  for (d = 0; d < D; ++d) {
    const float qa = af_absf(in->q[d]), ka = af_absf(kj[d]);
    a += qa * ka;
    acc += in->q[d] * kj[d];
    if (in->q_err != NULL || in->k_err != NULL) {
      const float qe = in->q_err != NULL ? in->q_err[d] : 0.0f;
      const float ke = in->k_err != NULL ? in->k_err[(size_t)j * D + d] : 0.0f;
      p += qa * ke + qe * ka + qe * ke;
    }
  }
  *P = p;
  *A = a;
  *s = acc;
}

/* The bound of masked[j] (0 for a hidden key); scores/scaled on request. */
static float af_masked_bound(const af_bound_row_in* in, int32_t j, float* b_scores,
                             float* b_scaled) {
  const float u = in->u, sc_abs = af_absf(in->scale);
  const float m = in->masked[j];
  float P, A, s, prop;
  af_dot_terms(in, j, &P, &A, &s);
  prop = sc_abs * (P + af_gamma((float)in->head_dim + 4.0f, u) * A);
  if (b_scores != NULL)
    b_scores[j] = AF_BOUND_MARGIN * (P + af_gamma((float)in->head_dim + 2.0f, u) * A +
                                     AF_BOUND_U32 * af_absf(s));
  if (b_scaled != NULL) b_scaled[j] = AF_BOUND_MARGIN * (prop + AF_BOUND_U32 * sc_abs * af_absf(s));
  if (m == -INFINITY) return 0.0f;
  {
    const float sc = in->scale * s;
    return AF_BOUND_MARGIN * (prop + 8.0f * u * (af_absf(sc) + af_absf(m) + af_absf(m - sc)) +
                              AF_BOUND_U32 * af_absf(m));
  }
}

af_status af_bound_row(float* b_scores, float* b_scaled, float* b_masked, float* b_weights,
                       float* b_lse, float* b_out, const af_bound_row_in* in) {
  int32_t j, d, Lk, Dv, visible = 0;
  float u, M = -INFINITY, S1 = 0.0f, eta_sum, g_out;
  if (in == NULL || in->q == NULL || in->k == NULL || in->masked == NULL ||
      in->weights == NULL || (b_out != NULL && in->v == NULL))
    return AF_ERR_NULL;
  Lk = in->kv_len;
  Dv = in->v_dim;
  u = in->u;
  if (Lk < 0 || in->head_dim < 1 || Dv < 0 || !(u > 0.0f) || !(u < 0.25f)) return AF_ERR_PARAM;
  if (((float)in->head_dim + 4.0f) * u >= 0.5f || (2.0f * Lk + 4.0f) * u >= 0.5f)
    return AF_ERR_PARAM;
  for (j = 0; j < Lk; ++j)
    if (in->masked[j] != -INFINITY) {
      ++visible;
      if (in->masked[j] > M) M = in->masked[j];
    }
  /* Pass 1: scores, scaled, masked; S1 = sum w (e^delta - 1) (the inputs'
   * perturbation of the softmax sum, relative; written without the
   * cancellation of e^delta - 1 so that float evaluates tiny bounds) and
   * the rounding of the softmax sum (eta_sum). */
  eta_sum = af_gamma((float)Lk, u);
  for (j = 0; j < Lk; ++j) {
    const float delta = af_masked_bound(in, j, b_scores, b_scaled);
    if (b_masked != NULL) b_masked[j] = delta;
    if (in->masked[j] == -INFINITY) continue;
    if (in->weights[j] > 0.0f) S1 += in->weights[j] * expm1f(delta); /* 0 * inf: no term */
    eta_sum += in->weights[j] * (2.0f * u * af_absf(in->masked[j] - M) + AF_BOUND_EXP_ULPS * u);
  }
  if (visible == 0) { /* out 0, lse -inf, weights 0: exact */
    if (b_weights != NULL)
      for (j = 0; j < Lk; ++j) b_weights[j] = 0.0f;
    if (b_lse != NULL) *b_lse = 0.0f;
    if (b_out != NULL)
      for (d = 0; d < Dv; ++d) b_out[d] = 0.0f;
    return AF_OK;
  }
  if (b_lse != NULL) {
    const float lse = in->lse;
    *b_lse = AF_BOUND_MARGIN * (log1pf(S1) + 2.0f * eta_sum +
                                AF_BOUND_EXP_ULPS * u * af_absf(lse - M) +
                                (2.0f * u + AF_BOUND_U32) * af_absf(lse));
  }
  /* Pass 2: weights, and out = sum_j w_j v_j. */
  g_out = af_gamma(2.0f * Lk + 4.0f, u);
  if (b_out != NULL)
    for (d = 0; d < Dv; ++d) b_out[d] = 0.0f;
  for (j = 0; j < Lk; ++j) {
    float bw = 0.0f;
    const float w = in->weights[j];
    if (in->masked[j] != -INFINITY) {
      const float delta = b_masked != NULL ? b_masked[j] : af_masked_bound(in, j, NULL, NULL);
      /* e^delta * (1 + S1) - 1: the inputs' perturbation of w_j */
      const float a = expm1f(delta) + expf(delta) * S1;
      const float eta = 2.0f * u * af_absf(in->masked[j] - M) + AF_BOUND_EXP_ULPS * u + eta_sum + u;
      bw = AF_BOUND_MARGIN * (w * (a + eta + a * eta + AF_BOUND_U32)) + AF_BOUND_TINY;
      /* Both weights lie in [0, 1]: a bound past 1 (or inf/NaN from a huge
       * delta in a short type) says no more than 1. */
      if (!(bw < 1.0f)) bw = 1.0f;
    }
    if (b_weights != NULL) b_weights[j] = bw;
    if (b_out != NULL && bw > 0.0f) {
      const float* vj = in->v + (size_t)j * Dv;
      const float* ej = in->v_err != NULL ? in->v_err + (size_t)j * Dv : NULL;
      for (d = 0; d < Dv; ++d) {
        const float va = af_absf(vj[d]);
        b_out[d] += bw * va + g_out * w * va + (ej != NULL ? (w + bw) * ej[d] : 0.0f);
      }
    }
  }
  if (b_out != NULL)
    for (d = 0; d < Dv; ++d) b_out[d] *= AF_BOUND_MARGIN;
  return AF_OK;
}

af_status af_bound_linear(float* b_y, const float* x, const float* x_err, const float* w,
                          const float* bias, int32_t in_features, int32_t out_features, float u) {
  int32_t r, c;
  float g;
  if (b_y == NULL || x == NULL || w == NULL) return AF_ERR_NULL;
  if (in_features < 0 || out_features < 0 || !(u > 0.0f) || !(u < 0.25f)) return AF_ERR_PARAM;
  if (((float)in_features + 3.0f) * u >= 0.5f) return AF_ERR_PARAM;
  g = af_gamma((float)in_features + 3.0f, u);
  for (r = 0; r < out_features; ++r) {
    const float* wr = w + (size_t)r * in_features;
    float a = bias != NULL ? af_absf(bias[r]) : 0.0f, p = 0.0f, y = bias != NULL ? bias[r] : 0.0f;
    for (c = 0; c < in_features; ++c) {
      a += af_absf(x[c] * wr[c]);
      y += x[c] * wr[c];
      if (x_err != NULL) p += x_err[c] * af_absf(wr[c]);
    }
    b_y[r] = AF_BOUND_MARGIN * (p + g * a + AF_BOUND_U32 * af_absf(y));
  }
  return AF_OK;
}

void af_s8_stage_tolerances(af_s8_tolerances* t, float sq, float sk, float scale, float softcap) {
  const double unit = (double)sq * sk; /* one raw int8 score, real */
  const double unit_scaled = unit * scale;
  if (t == NULL) return;
  t->scores.atol = 1e-6 * unit;
  t->scores.rtol = 1e-5;
  t->masked.atol = 1.01 * unit_scaled;
  if (softcap > 0.f) t->masked.atol += (double)softcap * AF_S8_SOFTCAP_ERR + 0.5 * unit_scaled;
  t->masked.rtol = 1e-5;
  t->weights.atol = 1.0 / 256;
  t->weights.rtol = 1.0 / 32;
  t->out.atol = AF_S8_BOUND_LSB;
  t->out.rtol = 0.0;
}
