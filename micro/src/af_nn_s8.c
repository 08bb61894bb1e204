/* af_nn_s8.c — integer-only building blocks of an int8 transformer block for
 * the micro library (include/attnflow/micro.h): linear layer with per-row
 * fixed-point requantisation (to int8, or added to an int32 residual
 * stream), integer LayerNorm and RMSNorm, RoPE with Q15 tables, table-based
 * activations (SiLU, GELU, ReLU) and SwiGLU, ReLU. No float type anywhere (checked by
 * tools/edge/run_edge.sh on the rv32imc object); every rounding is "add half,
 * arithmetic shift", so tools/edge/tiny/int8_model.py reproduces every bit. */
#include "af_internal.h"

static int8_t af_sat8(int64_t v) { return (int8_t)(v > 127 ? 127 : (v < -128 ? -128 : v)); }
static int32_t af_sat32_64(int64_t v) {
  return (int32_t)(v > 2147483647 ? 2147483647 : (v < -2147483647 - 1 ? -2147483647 - 1 : v));
}

/* W8[o] . x8 + b32, saturated to int32: the product sum fits int32
 * (|sum| <= 2^14 * 65535 < 2^30), only adding the bias can overflow, so it is
 * added in 64 bits. Equal to the plain int32 sum whenever that does not
 * overflow. */
#if defined(__ARM_FEATURE_DSP)
/* Cortex-M DSP: 4 MACs per LDR pair, SXTB16 x 4, SMLAD x 2 (integer sums:
 * the same bits as the C loop). Unaligned LDR is legal on M4/M33. */
#include <arm_acle.h>
#include <string.h>
static uint32_t af_sxtb16_odd(uint32_t x) { /* SXTB16 with its ROR #8: bytes 1 and 3 */
  uint32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
  return r;
}
static int32_t af_dot_s8(const int8_t* w, const int8_t* x, int32_t n) {
  int32_t i, acc = 0;
  for (i = 0; i + 4 <= n; i += 4) {
    uint32_t a, b;
    AF_COPY(&a, w + i, 4);
    AF_COPY(&b, x + i, 4);
    acc = __smlad((int32_t)__sxtb16(a), (int32_t)__sxtb16(b), acc);
    acc = __smlad((int32_t)af_sxtb16_odd(a), (int32_t)af_sxtb16_odd(b), acc);
  }
  for (; i < n; ++i) acc += (int32_t)w[i] * x[i];
  return acc;
}
#else
static int32_t af_dot_s8(const int8_t* w, const int8_t* x, int32_t n) {
  int32_t i, a0 = 0, a1 = 0;
  for (i = 0; i + 2 <= n; i += 2) {
    a0 += (int32_t)w[i] * x[i];
    a1 += (int32_t)w[i + 1] * x[i + 1];
  }
  if (i < n) a0 += (int32_t)w[i] * x[i];
  return a0 + a1;
}
#endif

static int32_t af_dot_s8_bias(const int8_t* wr, const int8_t* x, int32_t b, int32_t in) {
  return af_sat32_64((int64_t)b + af_dot_s8(wr, x, in));
}

/* 1 if m is a multiplier af_s8_mul_by_qmult takes: mult >= 0, shift in
 * [-31, 30]. */
static int af_qmult_ok(af_qmult m) { return m.mult >= 0 && m.shift >= -31 && m.shift <= 30; }

/* AF_ERR_ALIAS if the output [y, y + ny bytes) overlaps one of the (up to
 * four, NULL = none) input ranges. */
static af_status af_apart_s8(const void* y, size_t ny, const void* a, size_t na, const void* b,
                             size_t nb, const void* c, size_t nc, const void* d, size_t nd) {
  af_span out, ins[4];
  out.p = y, out.n = ny;
  ins[0].p = a, ins[0].n = na;
  ins[1].p = b, ins[1].n = nb;
  ins[2].p = c, ins[2].n = nc;
  ins[3].p = d, ins[3].n = nd;
  return af_alias_check(&out, 1, ins, 4);
}

/* Shape, alignment, every row's multiplier and the output (y int8 [out] or
 * r int32 [out], `y_bytes` per element) apart from x, w, b and m. */
static af_status af_linear_s8_check(const void* y, size_t y_bytes, const int8_t* x,
                                    const int8_t* w, const int32_t* b, const af_qmult* m,
                                    int32_t in, int32_t out) {
  int32_t o;
  if (y == NULL || x == NULL || w == NULL || m == NULL) return AF_ERR_NULL;
  if (!af_aligned(m, 4) || !af_aligned(b, 4)) return AF_ERR_ALIGN;
  if (in < 1 || out < 1 || in > AF_MAX_DIM || out > AF_MAX_DIM)
    return AF_ERR_SHAPE;
  if ((uint64_t)in * (uint64_t)out >= ((uint64_t)1 << 31)) return AF_ERR_SHAPE;
  if (af_apart_s8(y, (size_t)out * y_bytes, x, (size_t)in, w, (size_t)in * out, b,
                  (size_t)out * 4, m, (size_t)out * sizeof(af_qmult)) != AF_OK)
    return AF_ERR_ALIAS; /* checked before any array is read */
  for (o = 0; o < out; ++o)
    if (!af_qmult_ok(m[o])) return AF_ERR_PARAM;
  return AF_OK;
}

/* The one int8 linear layer: v[o] = mulq(x . w[o] + b[o], m[o]) stored as
 * y[o] = sat8(v[o]) (y non-NULL; y must not alias x), or added as
 * r[o] = sat32(r[o] + v[o]) (y NULL: the residual stream r, 4-byte aligned). */
static af_status af_linear_s8_any(int8_t* y, int32_t* r, const int8_t* x, const int8_t* w,
                                  const int32_t* b, const af_qmult* m, int32_t in, int32_t out) {
  af_status st;
  int32_t o;
  if (y == NULL && !af_aligned(r, 4)) return AF_ERR_ALIGN;
  st = af_linear_s8_check(y ? (const void*)y : (const void*)r, y ? 1 : 4, x, w, b, m, in, out);
  if (st != AF_OK) return st;
  for (o = 0; o < out; ++o) {
    const int32_t v =
        af_s8_mul_by_qmult(af_dot_s8_bias(w + (size_t)o * in, x, b ? b[o] : 0, in), m[o]);
    if (y != NULL)
      y[o] = af_sat8(v);
    else
      r[o] = af_sat32_64((int64_t)r[o] + v);
  }
  return AF_OK;
}

af_status af_linear_s8(int8_t* y, const int8_t* x, const int8_t* w, const int32_t* b,
                       const af_qmult* m, int32_t in, int32_t out) {
  if (y == NULL) return AF_ERR_NULL;
  return af_linear_s8_any(y, NULL, x, w, b, m, in, out);
}

af_status af_linear_s8_residual(int32_t* r, const int8_t* x, const int8_t* w, const int32_t* b,
                                const af_qmult* m, int32_t in, int32_t out) {
  if (r == NULL) return AF_ERR_NULL;
  return af_linear_s8_any(NULL, r, x, w, b, m, in, out);
}

static uint32_t af_isqrt64(uint64_t x) { /* floor(sqrt(x)), x < 2^64 */
  uint64_t res = 0, bit = (uint64_t)1 << 62;
  while (bit > x) bit >>= 2;
  while (bit) {
    if (x >= res + bit) {
      x -= res + bit;
      res = (res >> 1) + bit;
    } else {
      res >>= 1;
    }
    bit >>= 2;
  }
  return (uint32_t)res;
}

static int64_t af_floor_div(int64_t a, int64_t n) { /* n > 0 */
  return a >= 0 ? a / n : -((-a + n - 1) / n);
}

af_status af_layernorm_s8(int8_t* y, const int32_t* x, const int32_t* g, const int32_t* b,
                          int32_t n, int32_t eps) {
  int64_t sum = 0, mean, inv;
  uint64_t var = 0;
  uint32_t sd;
  int32_t i;
  if (y == NULL || x == NULL || g == NULL || b == NULL) return AF_ERR_NULL;
  if (!af_aligned(x, 4) || !af_aligned(g, 4) || !af_aligned(b, 4)) return AF_ERR_ALIGN;
  if (n < 1 || n > 65536) return AF_ERR_SHAPE;
  if (eps < 1) return AF_ERR_PARAM;
  if (af_apart_s8(y, (size_t)n, x, (size_t)n * 4, g, (size_t)n * 4, b, (size_t)n * 4, NULL, 0) !=
      AF_OK)
    return AF_ERR_ALIAS;
  for (i = 0; i < n; ++i) sum += x[i];
  mean = af_floor_div(sum, n);
  /* Sum of squares in unsigned 64 bits, saturated (|x - mean| < 2^32, so a
   * square fits; only an extreme vector can saturate the sum, which then
   * only flattens the output). */
  for (i = 0; i < n; ++i) {
    const int64_t d = x[i] - mean;
    const uint64_t dd = (uint64_t)(d < 0 ? -d : d) * (uint64_t)(d < 0 ? -d : d);
    var = var > ~(uint64_t)0 - dd ? ~(uint64_t)0 : var + dd;
  }
  var = var / (uint64_t)n;
  sd = af_isqrt64(var > ~(uint64_t)0 - (uint64_t)eps ? ~(uint64_t)0 : var + (uint64_t)eps);
  inv = ((int64_t)1 << 32) / (int64_t)sd; /* sd >= 1 since eps >= 1 */
  for (i = 0; i < n; ++i) {
    /* |x - mean| <= sqrt(n * var) < 256 * (sd + 1), so |d * inv| < 2^41. */
    const int64_t t = ((int64_t)(x[i] - mean) * inv) >> 16;
    y[i] = af_sat8((t * g[i] + b[i] + ((int64_t)1 << 23)) >> 24);
  }
  return AF_OK;
}

af_status af_relu_s8(int8_t* x, int32_t n) {
  int32_t i;
  const af_status st = af_vec_check(n, 1, x, x, x);
  if (st != AF_OK) return st;
  for (i = 0; i < n; ++i)
    if (x[i] < 0) x[i] = 0;
  return AF_OK;
}

af_status af_rmsnorm_s8(int8_t* y, const int32_t* x, const int32_t* g, int32_t n, int32_t eps) {
  uint64_t ms = 0;
  uint32_t rms;
  int64_t inv;
  int32_t i;
  if (y == NULL || x == NULL || g == NULL) return AF_ERR_NULL;
  if (!af_aligned(x, 4) || !af_aligned(g, 4)) return AF_ERR_ALIGN;
  if (n < 1 || n > 65536) return AF_ERR_SHAPE;
  if (eps < 1) return AF_ERR_PARAM;
  if (af_apart_s8(y, (size_t)n, x, (size_t)n * 4, g, (size_t)n * 4, NULL, 0, NULL, 0) != AF_OK)
    return AF_ERR_ALIAS;
  /* Sum of squares in unsigned 64 bits, saturated (|x| <= 2^31: a square
   * fits; only an extreme vector saturates, which flattens the output). */
  for (i = 0; i < n; ++i) {
    const uint64_t a = (uint64_t)(x[i] < 0 ? -(int64_t)x[i] : (int64_t)x[i]);
    const uint64_t sq = a * a;
    ms = ms > ~(uint64_t)0 - sq ? ~(uint64_t)0 : ms + sq;
  }
  ms = ms / (uint64_t)n;
  rms = af_isqrt64(ms > ~(uint64_t)0 - (uint64_t)eps ? ~(uint64_t)0 : ms + (uint64_t)eps);
  inv = ((int64_t)1 << 32) / (int64_t)rms; /* rms >= 1 since eps >= 1 */
  for (i = 0; i < n; ++i) {
    /* |x| <= sqrt(n * ms) <= 256 * (rms + 1), so |x * inv| < 2^41. */
    const int64_t t = ((int64_t)x[i] * inv) >> 16;
    y[i] = af_sat8((t * g[i] + ((int64_t)1 << 23)) >> 24);
  }
  return AF_OK;
}

af_status af_rope_s8(int8_t* x, int32_t num_heads, int32_t head_dim, const int16_t* cos_q15,
                     const int16_t* sin_q15, af_rope_layout layout) {
  int32_t h, i;
  af_status st;
  if (x == NULL) return AF_ERR_NULL;
  st = af_vec_check(0, 2, cos_q15, sin_q15, sin_q15);
  if (st == AF_OK) st = af_rope_check(num_heads, head_dim, layout);
  if (st != AF_OK) return st;
  if (af_apart_s8(x, (size_t)num_heads * head_dim, cos_q15, (size_t)head_dim, sin_q15,
                  (size_t)head_dim, NULL, 0, NULL, 0) != AF_OK)
    return AF_ERR_ALIAS;
  for (h = 0; h < num_heads; ++h) {
    int8_t* xh = x + (size_t)h * head_dim;
    for (i = 0; i < head_dim / 2; ++i) {
      int8_t* a = layout == AF_ROPE_HALF ? xh + i : xh + 2 * i;
      int8_t* b = layout == AF_ROPE_HALF ? xh + i + head_dim / 2 : xh + 2 * i + 1;
      const int32_t u = *a, v = *b, c = cos_q15[i], s = sin_q15[i];
      *a = af_sat8((u * c - v * s + (1 << 14)) >> 15);
      *b = af_sat8((u * s + v * c + (1 << 14)) >> 15);
    }
  }
  return AF_OK;
}

af_status af_act_s8(int8_t* x, int32_t n, const int8_t* table) {
  int32_t i;
  const af_status st = af_vec_check(n, 1, x, table, table);
  if (st != AF_OK) return st;
  if (af_apart_s8(x, (size_t)n, table, 256, NULL, 0, NULL, 0, NULL, 0) != AF_OK)
    return AF_ERR_ALIAS;
  for (i = 0; i < n; ++i) x[i] = table[(int32_t)x[i] + 128];
  return AF_OK;
}

af_status af_swiglu_s8(int8_t* out, const int8_t* gate, const int8_t* up, int32_t n,
                       const int8_t* silu_table, af_qmult m) {
  int32_t i;
  if (out == NULL || gate == NULL || up == NULL || silu_table == NULL) return AF_ERR_NULL;
  if (n < 0) return AF_ERR_SHAPE;
  if (!af_qmult_ok(m)) return AF_ERR_PARAM;
  if (af_same_or_apart(out, gate, (size_t)n) != AF_OK ||
      af_same_or_apart(out, up, (size_t)n) != AF_OK ||
      af_apart_s8(out, (size_t)n, silu_table, 256, NULL, 0, NULL, 0, NULL, 0) != AF_OK)
    return AF_ERR_ALIAS; /* out == gate or out == up works */
  for (i = 0; i < n; ++i) {
    const int32_t a = silu_table[(int32_t)gate[i] + 128]; /* silu(gate) in s_act */
    out[i] = af_sat8(af_s8_mul_by_qmult(a * up[i], m));
  }
  return AF_OK;
}
