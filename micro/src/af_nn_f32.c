/* af_nn_f32.c — the f32 building blocks of a transformer block for the micro
 * library (include/attnflow/micro.h): LayerNorm, RMSNorm, linear layer,
 * ReLU, residual add, RoPE (both layouts) and its tables (af_rope_table
 * writes the f32 and the int8 path's Q15 table), SiLU, GELU, SwiGLU. No
 * heap; fp32 accumulation in index order. Every op refuses a NaN or inf in
 * its activations (AF_ERR_PARAM) and an output that overlaps an input
 * (AF_ERR_ALIAS), except the element-wise ones in place on the very same
 * array, before it writes. */
#include <math.h>

#include "af_internal.h"

/* 1 if x[0 .. n) are finite (the activations every op checks). */
static int af_finite_n(const float* x, int32_t n) {
  uint32_t m = 0;
  return af_scan_f32(x, (size_t)n, &m);
}

/* An in-place activation over x[0 .. n): af_vec_check, then finite. */
static af_status af_act_f32_check(const float* x, int32_t n) {
  const af_status st = af_vec_check(n, 4, x, x, x);
  if (st != AF_OK) return st;
  return af_finite_n(x, n) ? AF_OK : AF_ERR_PARAM;
}

/* AF_ERR_ALIAS if the output range [y, y + ny floats) overlaps one of the
 * (up to three, NULL = none) other ranges. */
static af_status af_apart(const float* y, size_t ny, const void* a, size_t na, const void* b,
                          size_t nb, const void* c, size_t nc) {
  af_span out, ins[3];
  out.p = y, out.n = ny * 4;
  ins[0].p = a, ins[0].n = na * 4;
  ins[1].p = b, ins[1].n = nb * 4;
  ins[2].p = c, ins[2].n = nc * 4;
  return af_alias_check(&out, 1, ins, 3);
}

af_status af_layernorm_f32(float* y, const float* x, const float* w, const float* b, int32_t n,
                           float eps) {
  float mean = 0.f, var = 0.f, inv;
  int32_t i;
  if (y == NULL || x == NULL) return AF_ERR_NULL;
  if (!af_aligned(y, 4) || !af_aligned(x, 4) || !af_aligned(w, 4) || !af_aligned(b, 4))
    return AF_ERR_ALIGN;
  if (n < 1) return AF_ERR_SHAPE;
  if (!(eps > 0.f) || !af_finite_n(x, n)) return AF_ERR_PARAM;
  if (af_same_or_apart(y, x, (size_t)n * 4) != AF_OK ||
      af_apart(y, (size_t)n, w, (size_t)n, b, (size_t)n, NULL, 0) != AF_OK)
    return AF_ERR_ALIAS; /* in place (y == x) works: x[i] is read before y[i] is written */
  for (i = 0; i < n; ++i) mean += x[i];
  mean /= (float)n;
  for (i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= (float)n;
  inv = 1.f / sqrtf(var + eps);
  for (i = 0; i < n; ++i) {
    const float t = (x[i] - mean) * inv;
    y[i] = t * (w ? w[i] : 1.f) + (b ? b[i] : 0.f);
  }
  return AF_OK;
}

af_status af_rmsnorm_f32(float* y, const float* x, const float* w, int32_t n, float eps) {
  float ss = 0.f, inv;
  int32_t i;
  if (y == NULL || x == NULL) return AF_ERR_NULL;
  if (!af_aligned(y, 4) || !af_aligned(x, 4) || !af_aligned(w, 4)) return AF_ERR_ALIGN;
  if (n < 1) return AF_ERR_SHAPE;
  if (!(eps > 0.f) || !af_finite_n(x, n)) return AF_ERR_PARAM;
  if (af_same_or_apart(y, x, (size_t)n * 4) != AF_OK ||
      af_apart(y, (size_t)n, w, (size_t)n, NULL, 0, NULL, 0) != AF_OK)
    return AF_ERR_ALIAS; /* in place (y == x) works */
  for (i = 0; i < n; ++i) ss += x[i] * x[i];
  inv = 1.f / sqrtf(ss / (float)n + eps);
  for (i = 0; i < n; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.f);
  return AF_OK;
}

af_status af_linear_f32(float* y, const float* x, const float* w, const float* b, int32_t in,
                        int32_t out) {
  int32_t o, i;
  if (y == NULL || x == NULL || w == NULL) return AF_ERR_NULL;
  if (!af_aligned(y, 4) || !af_aligned(x, 4) || !af_aligned(w, 4) || !af_aligned(b, 4))
    return AF_ERR_ALIGN;
  if (in < 1 || out < 1 || (uint64_t)in * (uint64_t)out >= ((uint64_t)1 << 31)) return AF_ERR_SHAPE;
  if (af_apart(y, (size_t)out, x, (size_t)in, w, (size_t)in * out, b, (size_t)out) != AF_OK)
    return AF_ERR_ALIAS; /* every y[o] reads all of x */
  if (!af_finite_n(x, in)) return AF_ERR_PARAM;
  for (o = 0; o < out; ++o) {
    const float* wr = w + (size_t)o * in;
    float acc = 0.f;
    for (i = 0; i < in; ++i) acc += wr[i] * x[i];
    y[o] = acc + (b ? b[o] : 0.f);
  }
  return AF_OK;
}

af_status af_relu_f32(float* x, int32_t n) {
  int32_t i;
  const af_status st = af_act_f32_check(x, n);
  if (st != AF_OK) return st;
  for (i = 0; i < n; ++i)
    if (x[i] < 0.f) x[i] = 0.f;
  return AF_OK;
}

af_status af_add_f32(float* y, const float* x, int32_t n) {
  int32_t i;
  const af_status st = af_vec_check(n, 4, y, x, x);
  if (st != AF_OK) return st;
  if (af_same_or_apart(y, x, (size_t)n * 4) != AF_OK) return AF_ERR_ALIAS;
  if (!af_finite_n(y, n) || !af_finite_n(x, n)) return AF_ERR_PARAM;
  for (i = 0; i < n; ++i) y[i] += x[i];
  return AF_OK;
}

/* ------------------------------------------------ RoPE and activations --- */

af_status af_rope_f32(float* x, int32_t num_heads, int32_t head_dim, const float* cos_t,
                      const float* sin_t, af_rope_layout layout) {
  int32_t h, i;
  af_status st = af_vec_check(0, 4, x, cos_t, sin_t);
  if (st == AF_OK) st = af_rope_check(num_heads, head_dim, layout);
  if (st != AF_OK) return st;
  if (af_apart(x, (size_t)num_heads * head_dim, cos_t, (size_t)head_dim / 2, sin_t,
               (size_t)head_dim / 2, NULL, 0) != AF_OK)
    return AF_ERR_ALIAS;
  if (!af_finite_n(x, num_heads * head_dim)) return AF_ERR_PARAM;
  for (h = 0; h < num_heads; ++h) {
    float* xh = x + (size_t)h * head_dim;
    for (i = 0; i < head_dim / 2; ++i) {
      float* a = layout == AF_ROPE_HALF ? xh + i : xh + 2 * i;
      float* b = layout == AF_ROPE_HALF ? xh + i + head_dim / 2 : xh + 2 * i + 1;
      const float u = *a, v = *b;
      *a = u * cos_t[i] - v * sin_t[i];
      *b = u * sin_t[i] + v * cos_t[i];
    }
  }
  return AF_OK;
}

af_status af_rope_table(float* cos_t, float* sin_t, int16_t* cos_q15, int16_t* sin_q15,
                        int32_t pos, int32_t head_dim, double theta) {
  const int f32 = cos_t != NULL || sin_t != NULL;
  int32_t i;
  if (f32 ? cos_t == NULL || sin_t == NULL : cos_q15 == NULL || sin_q15 == NULL)
    return AF_ERR_NULL;
  if (head_dim < 2 || head_dim % 2 || head_dim > AF_MAX_DIM || pos < 0) return AF_ERR_SHAPE;
  if (!(theta > 1.0) || !(theta < 1e300)) return AF_ERR_PARAM;
  {
    af_span a, b;
    a.p = f32 ? (const void*)cos_t : (const void*)cos_q15;
    b.p = f32 ? (const void*)sin_t : (const void*)sin_q15;
    a.n = b.n = (size_t)head_dim / 2 * (f32 ? 4 : 2);
    if (af_overlap(a, b)) return AF_ERR_ALIAS;
  }
  for (i = 0; i < head_dim / 2; ++i) {
    /* theta_i = pos * theta^(-2i/D), as HF transformers' inv_freq */
    const double ang = (double)pos * pow(theta, -2.0 * i / head_dim);
    if (f32) {
      cos_t[i] = (float)cos(ang);
      sin_t[i] = (float)sin(ang);
    } else { /* Q15, 1.0 saturated to 32767 */
      const double c = cos(ang) * 32768.0, s = sin(ang) * 32768.0;
      cos_q15[i] = (int16_t)(c >= 32767.0 ? 32767 : (c <= -32768.0 ? -32768 : llround(c)));
      sin_q15[i] = (int16_t)(s >= 32767.0 ? 32767 : (s <= -32768.0 ? -32768 : llround(s)));
    }
  }
  return AF_OK;
}

af_status af_rope_table_f32(float* cos_t, float* sin_t, int32_t pos, int32_t head_dim,
                            double theta) {
  return af_rope_table(cos_t, sin_t, NULL, NULL, pos, head_dim, theta);
}

/* sigmoid(x) without overflow: e = exp(-|x|) <= 1. */
static float af_sigmoid(float x) {
  const float e = expf(x < 0.f ? x : -x);
  return x < 0.f ? e / (1.f + e) : 1.f / (1.f + e);
}

af_status af_silu_f32(float* x, int32_t n) {
  int32_t i;
  const af_status st = af_act_f32_check(x, n);
  if (st != AF_OK) return st;
  for (i = 0; i < n; ++i) x[i] = x[i] * af_sigmoid(x[i]);
  return AF_OK;
}

af_status af_gelu_f32(float* x, int32_t n) {
  int32_t i;
  const af_status st = af_act_f32_check(x, n);
  if (st != AF_OK) return st;
  for (i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.f + erff(x[i] * 0.70710678118654752f));
  return AF_OK;
}

af_status af_swiglu_f32(float* out, const float* gate, const float* up, int32_t n) {
  int32_t i;
  const af_status st = af_vec_check(n, 4, out, gate, up);
  if (st != AF_OK) return st;
  if (af_same_or_apart(out, gate, (size_t)n * 4) != AF_OK ||
      af_same_or_apart(out, up, (size_t)n * 4) != AF_OK)
    return AF_ERR_ALIAS; /* out == gate or out == up works */
  if (!af_finite_n(gate, n) || !af_finite_n(up, n)) return AF_ERR_PARAM;
  for (i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * af_sigmoid(g) * up[i];
  }
  return AF_OK;
}
