/* af_quant.c — preparation of the int8 parameters (include/attnflow/micro.h):
 * real scales -> fixed-point multipliers (exp and output multipliers), ALiBi
 * slopes and additive float masks -> raw-score units, the Q15 RoPE table
 * (written by af_rope_table in af_nn_f32.c, the one writer of both RoPE
 * tables). With that table writer it is the only floating point of the
 * int8 path; run it on the host or once at start-up. The kernels in
 * af_sdpa_s8.c and af_nn_s8.c consume the integer results only.
 * Every preparing function validates all its inputs and overlaps before it
 * writes its first output (two passes where the values decide), so a refusal
 * leaves the outputs as they were. */
#include <math.h>

#include "af_internal.h"

af_status af_quantize_multiplier(af_qmult* out, double real) {
  int e = 0;
  double f;
  int64_t m;
  if (out == NULL) return AF_ERR_NULL;
  if (!(real >= 0.0) || real >= 1073741824.0) return AF_ERR_PARAM; /* NaN too */
  if (real == 0.0) {
    out->mult = 0;
    out->shift = 0;
    return AF_OK;
  }
  f = frexp(real, &e); /* real = f * 2^e, f in [0.5, 1) */
  m = (int64_t)llround(f * 2147483648.0);
  if (m == ((int64_t)1 << 31)) {
    m >>= 1;
    ++e;
  }
  if (e < -31) { /* below 2^-32: treat as zero */
    out->mult = 0;
    out->shift = 0;
    return AF_OK;
  }
  out->mult = (int32_t)m;
  out->shift = e;
  return AF_OK;
}

af_status af_s8_prepare(af_s8_params* p, const float* sq, const float* sk,
                        const float* sv, const float* so, int32_t n,
                        float scale) {
  int32_t h;
  af_status st;
  af_s8_params t; /* built whole, copied to *p on success only */
  if (p == NULL || sq == NULL || sk == NULL || sv == NULL || so == NULL) return AF_ERR_NULL;
  if (n < 1 || n > AF_S8_MAX_HEADS) return AF_ERR_PARAM;
  if (!(scale > 0.f) || !isfinite(scale)) return AF_ERR_PARAM;
  {
    af_span out, ins[4];
    out.p = p, out.n = sizeof *p;
    ins[0].p = sq, ins[1].p = sk, ins[2].p = sv, ins[3].p = so;
    ins[0].n = ins[1].n = ins[2].n = ins[3].n = (size_t)n * 4;
    if (af_alias_check(&out, 1, ins, 4) != AF_OK) return AF_ERR_ALIAS;
  }
  t.num_scale_heads = n;
  for (h = 0; h < AF_S8_MAX_HEADS; ++h) {
    t.exp_mult[h].mult = t.exp_mult[h].shift = 0;
    t.out_mult[h].mult = t.out_mult[h].shift = 0;
  }
  for (h = 0; h < n; ++h) {
    const double log2e = 1.4426950408889634;
    if (!(sq[h] > 0.f) || !(sk[h] > 0.f) || !(sv[h] > 0.f) || !(so[h] > 0.f) ||
        !isfinite(sq[h]) || !isfinite(sk[h]) || !isfinite(sv[h]) || !isfinite(so[h]))
      return AF_ERR_PARAM;
    {
      /* exp_mult = {M, p}: u = ((diff * M) >> 32) << p with
       * M = round(real * 2^(32 - p)) < 2^31, p the smallest in [0, 8]. */
      const double real = (double)sq[h] * sk[h] * scale * log2e * 256.0;
      int32_t sh = 0;
      double m = real * 4294967296.0;
      while (m >= 2147483647.0 && sh < 9) {
        m *= 0.5;
        ++sh;
      }
      if (sh > 8 || !(real > 0.0)) return AF_ERR_PARAM;
      t.exp_mult[h].mult = (int32_t)llround(m);
      t.exp_mult[h].shift = sh;
    }
    st = af_quantize_multiplier(&t.out_mult[h], (double)sv[h] / so[h]);
    if (st != AF_OK) return st;
  }
  *p = t;
  return AF_OK;
}

/* ALiBi slope of head h in Q8 raw-score units, or -1 when it is refused. */
static int64_t af_alibi_s8_value(const float* slopes, const float* sq, const float* sk, int32_t n,
                                 float scale, int32_t h) {
  const int32_t sh = n == 1 ? 0 : h;
  double unit, v;
  if (!(sq[sh] > 0.f) || !(sk[sh] > 0.f) || !isfinite(sq[sh]) || !isfinite(sk[sh])) return -1;
  if (!(slopes[h] >= 0.f) || !isfinite(slopes[h])) return -1;
  unit = (double)sq[sh] * sk[sh] * scale; /* one raw-score unit, in scaled-score units */
  v = (double)slopes[h] / unit * 256.0;
  if (!(v < 2147483647.0)) return -1;
  return llround(v);
}

af_status af_s8_alibi_prepare(int32_t* alibi_s8, const float* slopes, int32_t num_heads,
                              const float* sq, const float* sk, int32_t n, float scale) {
  int32_t h;
  if (alibi_s8 == NULL || slopes == NULL || sq == NULL || sk == NULL) return AF_ERR_NULL;
  if (num_heads < 1 || num_heads > AF_MAX_DIM || !(n == 1 || n == num_heads)) return AF_ERR_PARAM;
  if (!(scale > 0.f) || !isfinite(scale)) return AF_ERR_PARAM;
  if (!af_aligned(alibi_s8, 4)) return AF_ERR_ALIGN;
  {
    af_span out, ins[3];
    out.p = alibi_s8, out.n = (size_t)num_heads * 4;
    ins[0].p = slopes, ins[0].n = (size_t)num_heads * 4;
    ins[1].p = sq, ins[2].p = sk;
    ins[1].n = ins[2].n = (size_t)n * 4;
    if (af_alias_check(&out, 1, ins, 3) != AF_OK) return AF_ERR_ALIAS;
  }
  for (h = 0; h < num_heads; ++h) /* every head first: a refusal writes nothing */
    if (af_alibi_s8_value(slopes, sq, sk, n, scale, h) < 0) return AF_ERR_PARAM;
  for (h = 0; h < num_heads; ++h)
    alibi_s8[h] = (int32_t)af_alibi_s8_value(slopes, sq, sk, n, scale, h);
  return AF_OK;
}

/* The softcap constants of head h ({in.mult, in.shift, out.mult,
 * out.shift} into c4), or AF_ERR_PARAM. */
static af_status af_softcap_s8_value(int32_t* c4, float cap, const float* sq, const float* sk,
                                     int32_t n, float scale, int32_t h) {
  const int32_t sh = n == 1 ? 0 : h;
  af_qmult in, out;
  af_status st;
  double unit, K;
  if (!(sq[sh] > 0.f) || !(sk[sh] > 0.f) || !isfinite(sq[sh]) || !isfinite(sk[sh]))
    return AF_ERR_PARAM;
  unit = (double)sq[sh] * sk[sh] * scale; /* one raw-score unit, in scaled-score units */
  K = (double)cap / unit;                 /* the cap in raw-score units */
  if ((st = af_quantize_multiplier(&in, 65536.0 / K)) != AF_OK) return st;
  if ((st = af_quantize_multiplier(&out, K / 65536.0)) != AF_OK) return st;
  if (in.mult == 0 || out.mult == 0) return AF_ERR_PARAM; /* below 2^-32 */
  c4[0] = in.mult;
  c4[1] = in.shift;
  c4[2] = out.mult;
  c4[3] = out.shift;
  return AF_OK;
}

af_status af_s8_softcap_prepare(int32_t* softcap_s8, float cap, int32_t num_heads, const float* sq,
                                const float* sk, int32_t n, float scale) {
  int32_t h, c4[4];
  af_status st;
  if (softcap_s8 == NULL || sq == NULL || sk == NULL) return AF_ERR_NULL;
  if (num_heads < 1 || num_heads > AF_MAX_DIM || !(n == 1 || n == num_heads)) return AF_ERR_PARAM;
  if (!(scale > 0.f) || !isfinite(scale) || !(cap > 0.f) || !isfinite(cap)) return AF_ERR_PARAM;
  if (!af_aligned(softcap_s8, 4)) return AF_ERR_ALIGN;
  {
    af_span out, ins[2];
    out.p = softcap_s8, out.n = (size_t)num_heads * 16;
    ins[0].p = sq, ins[1].p = sk;
    ins[0].n = ins[1].n = (size_t)n * 4;
    if (af_alias_check(&out, 1, ins, 2) != AF_OK) return AF_ERR_ALIAS;
  }
  for (h = 0; h < num_heads; ++h) /* every head first: a refusal writes nothing */
    if ((st = af_softcap_s8_value(c4, cap, sq, sk, n, scale, h)) != AF_OK) return st;
  for (h = 0; h < num_heads; ++h) af_softcap_s8_value(softcap_s8 + 4 * h, cap, sq, sk, n, scale, h);
  return AF_OK;
}

af_status af_s8_mask_prepare(int32_t* out, const float* mask, int32_t count, float sq, float sk,
                             float scale) {
  int32_t i;
  double unit;
  if (out == NULL || mask == NULL) return AF_ERR_NULL;
  if (count < 0) return AF_ERR_SHAPE;
  if (!(sq > 0.f) || !(sk > 0.f) || !(scale > 0.f) || !isfinite(sq) || !isfinite(sk) ||
      !isfinite(scale))
    return AF_ERR_PARAM;
  if (!af_aligned(out, 4) || !af_aligned(mask, 4)) return AF_ERR_ALIGN;
  /* in place (out == mask) works: element i is read before it is written */
  if (af_same_or_apart(out, mask, (size_t)count * 4) != AF_OK) return AF_ERR_ALIAS;
  for (i = 0; i < count; ++i) /* every value first: a refusal writes nothing */
    if (!(mask[i] < INFINITY) && mask[i] != -INFINITY) return AF_ERR_PARAM; /* NaN, +inf */
  unit = (double)sq * sk * scale;
  for (i = 0; i < count; ++i) {
    const float m = mask[i];
    double v;
    if (m == -INFINITY) {
      out[i] = AF_S8_MASKED;
      continue;
    }
    v = (double)m / unit;
    v = v < -1073741824.0 ? -1073741824.0 : (v > 1073741824.0 ? 1073741824.0 : v);
    out[i] = (int32_t)llround(v);
  }
  return AF_OK;
}

af_status af_rmsnorm_s8_fold(int32_t* g, int32_t* eps_int, const float* gamma, int32_t n,
                             float s_x, float s_out, float eps) {
  int32_t i;
  double e;
  if (g == NULL || eps_int == NULL || gamma == NULL) return AF_ERR_NULL;
  if (n < 1 || n > 65536) return AF_ERR_SHAPE;
  if (!(s_x > 0.f) || !(s_out > 0.f) || !isfinite(s_x) || !isfinite(s_out) || !(eps >= 0.f) ||
      !isfinite(eps))
    return AF_ERR_PARAM;
  if (!af_aligned(g, 4) || !af_aligned(eps_int, 4) || !af_aligned(gamma, 4)) return AF_ERR_ALIGN;
  {
    /* g in place over gamma works (element-wise); eps_int apart from both */
    af_span e1, ins[2];
    e1.p = eps_int, e1.n = 4;
    ins[0].p = g, ins[1].p = gamma;
    ins[0].n = ins[1].n = (size_t)n * 4;
    if (af_same_or_apart(g, gamma, (size_t)n * 4) != AF_OK || af_alias_check(&e1, 1, ins, 2))
      return AF_ERR_ALIAS;
  }
  e = (double)eps / ((double)s_x * s_x);
  if (!(e < 2147483647.0)) return AF_ERR_PARAM;
  for (i = 0; i < n; ++i) { /* every value first: a refusal writes nothing */
    const double v = (double)gamma[i] / s_out * 256.0;
    if (!(v > -2147483647.0 && v < 2147483647.0)) return AF_ERR_PARAM;
  }
  for (i = 0; i < n; ++i) g[i] = (int32_t)llround((double)gamma[i] / s_out * 256.0);
  *eps_int = e < 1.0 ? 1 : (int32_t)llround(e);
  return AF_OK;
}

af_status af_rope_table_s8(int16_t* cos_q15, int16_t* sin_q15, int32_t pos, int32_t head_dim,
                           double theta) {
  return af_rope_table(NULL, NULL, cos_q15, sin_q15, pos, head_dim, theta); /* af_nn_f32.c */
}

af_status af_act_table_s8(int8_t* table, af_act act, float s_in, float s_out) {
  int32_t i;
  if (table == NULL) return AF_ERR_NULL;
  if (!(s_in > 0.f) || !(s_out > 0.f) || !isfinite(s_in) || !isfinite(s_out)) return AF_ERR_PARAM;
  if (act != AF_ACT_SILU && act != AF_ACT_GELU && act != AF_ACT_RELU) return AF_ERR_PARAM;
  for (i = -128; i < 128; ++i) {
    const double x = (double)i * s_in;
    double y;
    if (act == AF_ACT_SILU)
      y = x / (1.0 + exp(-x));
    else if (act == AF_ACT_GELU)
      y = 0.5 * x * (1.0 + erf(x * 0.70710678118654752));
    else
      y = x > 0.0 ? x : 0.0;
    y = floor(y / s_out + 0.5); /* round half up, as the integer path */
    table[i + 128] = (int8_t)(y > 127.0 ? 127 : (y < -128.0 ? -128 : y));
  }
  return AF_OK;
}
