/* af_sdpa_f32.c — f32 scaled dot-product attention for microcontrollers:
 * streaming over key tiles of AF_KEY_TILE with an online softmax, masks,
 * ALiBi and sliding windows (af_sdpa_opts), a per-row stage probe for golden
 * checks, and a decode step over a ring-buffer KV cache
 * (include/attnflow/micro.h).
 *
 * Invariants: no heap; the arena holds one tile of AF_KEY_TILE scores per
 * query row in flight (two rows are processed together), nothing
 * proportional to Lq*Lk or to a whole score row; each row accumulates
 * directly in its `out` row (which must not overlap the inputs). Keys outside
 * a row's visible range [first, last] (causal, padding, window) are never
 * read; keys a mask hides inside it get weight exactly 0 and a tile with no
 * visible key changes nothing, so no -inf arithmetic reaches the running
 * max; a row with no visible key writes zeros and lse = -inf. The plain path
 * (no mask, no ALiBi) does no per-key work beyond q.k, exp and p.v. fp32
 * accumulation, in key order (deterministic). af_sdpa_f32_probe uses the
 * same dot product, scaling, bias and exp as the kernel. */
#include <math.h>
#include <string.h>

#include "af_internal.h"

typedef struct {
  float m;   /* running max of scaled scores (valid when n > 0) */
  float l;   /* running sum of exp(s - m) */
  int32_t n; /* keys seen */
  float* acc;
} af_row_state;

/* a*b + c: a fused multiply-add where the core has one in hardware (e.g.
 * Cortex-M4F/M33 VFMA: one rounding instead of two, never less accurate),
 * else multiply then add. Never a library call. */
#if defined(__ARM_FEATURE_FMA) && defined(__ARM_FP) && (__ARM_FP & 4)
#define AF_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define AF_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) for x <= 0 (softmax arguments s - max), about 2 ulp: Cody-Waite
 * reduction x = n*ln2 + r, |r| <= ln2/2 + eps, degree-7 Taylor polynomial
 * (truncation < 6e-8 relative), scaled by 2^n through the exponent bits.
 * Returns 0 below -87.3 (and for -inf); deterministic and a few dozen
 * instructions on an FPU core, instead of a general expf. */
static float af_exp_neg(float x) {
  float r, p, scale;
  int32_t n;
  uint32_t bits;
  if (!(x > -87.3f)) return 0.f;
  n = (int32_t)(x * 1.44269504f - 0.5f); /* x <= 0: rounds to nearest */
  r = AF_FMA((float)n, -0.693359375f, x);  /* ln2 high part: n*hi is exact */
  r = AF_FMA((float)n, 2.12194440e-4f, r);  /* ln2 = hi - 2.12194440e-4 */
  p = 1.f / 5040.f;
  p = AF_FMA(p, r, 1.f / 720.f);
  p = AF_FMA(p, r, 1.f / 120.f);
  p = AF_FMA(p, r, 1.f / 24.f);
  p = AF_FMA(p, r, 1.f / 6.f);
  p = AF_FMA(p, r, 0.5f);
  p = AF_FMA(p, r, 1.f);
  p = AF_FMA(p, r, 1.f);
  bits = (uint32_t)(n + 127) << 23; /* n >= -126 here */
  AF_COPY(&scale, &bits, sizeof scale);
  return p * scale;
}

/* The f32 kernels' loop over d = 0..n-1 (d declared by the caller): STEP(o)
 * for o = 0..3 per group of four, then STEP(0) for each of the n % 4 last
 * elements, the two pointers a and b advancing with d (in order, so every
 * kernel keeps the d order of its rounding sequence). */
#define AF_UNROLL4(n, a, b, STEP)                       \
  for (d = 0; d + 4 <= (n); d += 4, a += 4, b += 4) {   \
    STEP(0) STEP(1) STEP(2) STEP(3)                     \
  }                                                     \
  for (; d < (n); ++d, ++a, ++b) {                      \
    STEP(0)                                             \
  }

/* q.k in d order with one accumulator (the same rounding sequence as the
 * blocked kernels, so a key's score does not depend on its block). */
static float af_dot_f32(const float* a, const float* b, int32_t n) {
  float s = 0.f;
  int32_t d;
#define AF_DOT_STEP(o) s = AF_FMA(a[o], b[o], s);
  AF_UNROLL4(n, a, b, AF_DOT_STEP)
#undef AF_DOT_STEP
  return s;
}

static void af_axpy_f32(float* acc, float p, const float* v, int32_t n) {
  int32_t d;
#define AF_AXPY_STEP(o) acc[o] = AF_FMA(p, v[o], acc[o]);
  AF_UNROLL4(n, acc, v, AF_AXPY_STEP)
#undef AF_AXPY_STEP
}

/* Scores of q against 4 consecutive keys: each q element loaded once for 4
 * MACs (fp32, one accumulator per key, in d order). */
AF_INLINE void af_qk4_f32(float* s, const float* q, const float* k, int32_t D) {
  float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f, x;
  int32_t d;
#define AF_QK_STEP(o)                     \
  x = q[o];                               \
  a0 = AF_FMA(x, k[o], a0);               \
  a1 = AF_FMA(x, k[D + (o)], a1);         \
  a2 = AF_FMA(x, k[2 * D + (o)], a2);     \
  a3 = AF_FMA(x, k[3 * D + (o)], a3);
  AF_UNROLL4(D, q, k, AF_QK_STEP)
#undef AF_QK_STEP
  s[0] = a0;
  s[1] = a1;
  s[2] = a2;
  s[3] = a3;
}

/* acc += p0*v0 + p1*v1 + p2*v2 + p3*v3 (one load/store of acc per 4 keys,
 * keys added in order). */
AF_INLINE void af_pv4_f32(float* acc, const float* p, const float* v, int32_t Dv) {
  const float p0 = p[0], p1 = p[1], p2 = p[2], p3 = p[3];
  int32_t d;
#define AF_PV_STEP(o)                                                          \
  acc[o] = AF_FMA(p3, v[3 * Dv + (o)],                                         \
                  AF_FMA(p2, v[2 * Dv + (o)],                                  \
                         AF_FMA(p1, v[Dv + (o)], AF_FMA(p0, v[o], acc[o]))));
  AF_UNROLL4(Dv, acc, v, AF_PV_STEP)
#undef AF_PV_STEP
}

/* Test-only mutation hooks (tools/edge/run_edge.sh builds the library with
 * one of them to prove the device harness names the stage a planted bug
 * breaks first: 'scaled' for a wrong scale, 'masked' for an inverted bool
 * mask). Never defined in a real build. */
#ifdef AF_TEST_PLANT_SCALE_BUG
#define AF_SCALE(s) ((s) * 1.03125f)
#else
#define AF_SCALE(s) (s)
#endif
#ifdef AF_TEST_PLANT_MASK_BUG
#define AF_BOOL_HIDES(m) ((m) != 0)
#else
#define AF_BOOL_HIDES(m) ((m) == 0)
#endif

/* Per-key work of a masked / ALiBi / softcap row on scaled scores
 * x[0..t_n) of keys j0 ..: a hidden key becomes -INFINITY, else the softcap
 * cap * tanhf(x / cap), then the additive mask and then the ALiBi bias (the
 * reference's order: softcap(scaled) + mask + ALiBi). */
#if defined(__GNUC__)
#define AF_NOINLINE __attribute__((noinline))
#else
#define AF_NOINLINE
#endif
/* cap * tanhf(x / cap) over a tile, out of line so that the mask and ALiBi
 * loop of af_bias_f32 keeps its registers. */
static AF_NOINLINE void af_softcap_tile_f32(float* x, int32_t t_n, float cap) {
  int32_t t;
  for (t = 0; t < t_n; ++t) x[t] = cap * tanhf(x[t] / cap);
}

static void af_bias_f32(float* x, int32_t t_n, const af_row_bias* rb, int32_t j0) {
  int32_t t;
  if (rb->kind & AF_BIAS_SOFTCAP) { /* first, on the scaled scores */
    af_softcap_tile_f32(x, t_n, rb->cap);
    if ((rb->kind & ~AF_BIAS_SOFTCAP) == 0) return;
  }
  for (t = 0; t < t_n; ++t) {
    const int32_t j = j0 + t;
    float y = x[t];
    if (rb->kind & AF_BIAS_BOOL) {
      if (AF_BOOL_HIDES(((const uint8_t*)rb->mrow)[(size_t)j * rb->msj])) {
        x[t] = -INFINITY;
        continue;
      }
    } else if (rb->kind & AF_BIAS_F32) {
      y += ((const float*)rb->mrow)[(size_t)j * rb->msj];
    }
    if (rb->kind & AF_BIAS_ALIBI) y += -rb->slope * (float)AF_ABS_DIST(rb->diag, j);
    x[t] = y;
  }
}

/* One tile of raw scores (t_n >= 1) of one row, keys j0 ..: scale, bias (rb
 * NULL: none), raise the max (rescaling acc and l), scores -> exp weights in
 * place, l += sum. A tile whose keys are all hidden leaves the row as it was
 * (weights 0). */
static void af_softmax_tile_f32(af_row_state* st, float* sbuf, int32_t t_n, float scale,
                                int32_t Dv, const af_row_bias* rb, int32_t j0) {
  float tmax, m_new;
  int32_t t;
  for (t = 0; t < t_n; ++t) sbuf[t] *= AF_SCALE(scale);
  if (rb != NULL) af_bias_f32(sbuf, t_n, rb, j0);
  tmax = sbuf[0];
  for (t = 1; t < t_n; ++t)
    if (sbuf[t] > tmax) tmax = sbuf[t];
  if (!(tmax > -INFINITY)) { /* every key of the tile hidden */
    for (t = 0; t < t_n; ++t) sbuf[t] = 0.f;
    return;
  }
  if (st->n == 0) {
    m_new = tmax;
  } else {
    m_new = st->m > tmax ? st->m : tmax;
    if (m_new > st->m) {
      const float alpha = af_exp_neg(st->m - m_new);
      int32_t d;
      st->l *= alpha;
      for (d = 0; d < Dv; ++d) st->acc[d] *= alpha;
    }
  }
  st->m = m_new;
  for (t = 0; t < t_n; ++t) {
    sbuf[t] = af_exp_neg(sbuf[t] - m_new);
    st->l += sbuf[t];
  }
  st->n += t_n;
}

/* Two consecutive query rows (q, q + D) x 4 keys: per d, 2 q + 4 k loads
 * serve 8 MACs (fp32, one accumulator per score, d order; AF_QK2X4_BODY). */
#define AF_MAC_F32(x, k, a) a = AF_FMA(x, k, a);
AF_INLINE void af_qk2x4_f32(float* s0, float* s1, const float* q, const float* k, int32_t D) {
  AF_QK2X4_BODY(float, AF_MAC_F32)
}
#undef AF_MAC_F32

/* Two rows' accumulators (acc, acc + Dv) += weights p, r x 4 value rows,
 * keys in order. */
#define AF_PV2_STEP(o)                                                                \
  {                                                                                   \
    const float v0 = v[o], v1 = v[Dv + (o)], v2 = v[2 * Dv + (o)], v3 = v[3 * Dv + (o)]; \
    acc[o] = AF_FMA(p3, v3, AF_FMA(p2, v2, AF_FMA(p1, v1, AF_FMA(p0, v0, acc[o]))));     \
    acc[Dv + (o)] =                                                                   \
        AF_FMA(r3, v3, AF_FMA(r2, v2, AF_FMA(r1, v1, AF_FMA(r0, v0, acc[Dv + (o)])))); \
  }
AF_INLINE void af_pv2x4_f32(float* acc, const float* p, const float* r, const float* v,
                            int32_t Dv) {
  AF_PV2X4_BODY(float, AF_PV2_STEP)
}
#undef AF_PV2_STEP

/* Folds keys k[0..n) / v[0..n) (row strides D / Dv; absolute index of k[0]
 * is j_base) into one row's state. */
AF_INLINE void af_row_update_impl(af_row_state* st, const float* q, const float* k,
                                  const float* v, int32_t j_base, int32_t n, int32_t D,
                                  int32_t Dv, float scale, float* sbuf, const af_row_bias* rb) {
  int32_t j0, t;
  for (j0 = 0; j0 < n; j0 += AF_KEY_TILE) {
    const int32_t t_n = (n - j0) < AF_KEY_TILE ? (n - j0) : AF_KEY_TILE;
    const float* kt = k + (size_t)j0 * D;
    const float* vt = v + (size_t)j0 * Dv;
    for (t = 0; t + 4 <= t_n; t += 4) af_qk4_f32(sbuf + t, q, kt + (size_t)t * D, D);
    for (; t < t_n; ++t) sbuf[t] = af_dot_f32(q, kt + (size_t)t * D, D);
    af_softmax_tile_f32(st, sbuf, t_n, scale, Dv, rb, j_base + j0);
    for (t = 0; t + 4 <= t_n; t += 4) af_pv4_f32(st->acc, sbuf + t, vt + (size_t)t * Dv, Dv);
    for (; t < t_n; ++t) af_axpy_f32(st->acc, sbuf[t], vt + (size_t)t * Dv, Dv);
  }
}

/* Two consecutive rows (q0, q0 + D; accumulators s0->acc, s0->acc + Dv) over
 * the same keys k[0..n) (absolute index of k[0]: j_base). */
AF_INLINE void af_rows2_update_impl(af_row_state* s0, af_row_state* s1, const float* q,
                                    const float* k, const float* v, int32_t j_base, int32_t n,
                                    int32_t D, int32_t Dv, float scale, float* sb0, float* sb1,
                                    const af_row_bias* rb0, const af_row_bias* rb1) {
  int32_t j0, t;
  for (j0 = 0; j0 < n; j0 += AF_KEY_TILE) {
    const int32_t t_n = (n - j0) < AF_KEY_TILE ? (n - j0) : AF_KEY_TILE;
    const float* kt = k + (size_t)j0 * D;
    const float* vt = v + (size_t)j0 * Dv;
    for (t = 0; t + 4 <= t_n; t += 4) af_qk2x4_f32(sb0 + t, sb1 + t, q, kt + (size_t)t * D, D);
    for (; t < t_n; ++t) {
      sb0[t] = af_dot_f32(q, kt + (size_t)t * D, D);
      sb1[t] = af_dot_f32(q + D, kt + (size_t)t * D, D);
    }
    af_softmax_tile_f32(s0, sb0, t_n, scale, Dv, rb0, j_base + j0);
    af_softmax_tile_f32(s1, sb1, t_n, scale, Dv, rb1, j_base + j0);
    for (t = 0; t + 4 <= t_n; t += 4)
      af_pv2x4_f32(s0->acc, sb0 + t, sb1 + t, vt + (size_t)t * Dv, Dv);
    for (; t < t_n; ++t) {
      af_axpy_f32(s0->acc, sb0[t], vt + (size_t)t * Dv, Dv);
      af_axpy_f32(s1->acc, sb1[t], vt + (size_t)t * Dv, Dv);
    }
  }
}

/* Rows i (keys [f0, l0]) and, when `two`, i+1 (keys [f1, l1]): the keys both
 * see jointly (every K/V element loaded once serves two rows), then each
 * row's other keys alone (at most two segments per row, visited by one loop
 * so the single-row code exists once). rb0/rb1: the rows' per-key work or
 * NULL. */
AF_INLINE void af_pair_impl(af_row_state* s0, af_row_state* s1, const float* q, const float* k,
                            const float* v, int32_t f0, int32_t l0, int32_t f1, int32_t l1,
                            int32_t two, int32_t D, int32_t Dv, float scale, float* sb0,
                            float* sb1, const af_row_bias* rb0, const af_row_bias* rb1) {
  int32_t from[4], to[4], rowsel[4], cf, cl, x;
  const int32_t n = af_pair_segments(f0, l0, f1, l1, two, &cf, &cl, from, to, rowsel);
  if (cf <= cl)
    af_rows2_update_impl(s0, s1, q, k + (size_t)cf * D, v + (size_t)cf * Dv, cf, cl - cf + 1, D,
                         Dv, scale, sb0, sb1, rb0, rb1);
  for (x = 0; x < n; ++x) {
    if (from[x] > to[x]) continue;
    af_row_update_impl(rowsel[x] ? s1 : s0, rowsel[x] ? q + D : q, k + (size_t)from[x] * D,
                       v + (size_t)from[x] * Dv, from[x], to[x] - from[x] + 1, D, Dv, scale,
                       rowsel[x] ? sb1 : sb0, rowsel[x] ? rb1 : rb0);
  }
}

static void af_pair_d64(af_row_state* s0, af_row_state* s1, const float* q, const float* k,
                        const float* v, int32_t f0, int32_t l0, int32_t f1, int32_t l1,
                        int32_t two, float scale, float* sb0, float* sb1,
                        const af_row_bias* rb0, const af_row_bias* rb1) {
  af_pair_impl(s0, s1, q, k, v, f0, l0, f1, l1, two, 64, 64, scale, sb0, sb1, rb0, rb1);
}
static void af_pair_any(af_row_state* s0, af_row_state* s1, const float* q, const float* k,
                        const float* v, int32_t f0, int32_t l0, int32_t f1, int32_t l1,
                        int32_t two, int32_t D, int32_t Dv, float scale, float* sb0, float* sb1,
                        const af_row_bias* rb0, const af_row_bias* rb1) {
  af_pair_impl(s0, s1, q, k, v, f0, l0, f1, l1, two, D, Dv, scale, sb0, sb1, rb0, rb1);
}
/* Single row (decode): generic copy. */
static void af_row_update(af_row_state* st, const float* q, const float* k, const float* v,
                          int32_t j_base, int32_t n, int32_t D, int32_t Dv, float scale,
                          float* sbuf, const af_row_bias* rb) {
  af_row_update_impl(st, q, k, v, j_base, n, D, Dv, scale, sbuf, rb);
}

static void af_row_finish(float* out, float* lse, const af_row_state* st,
                          int32_t Dv) {
  int32_t d;
  if (st->n == 0) {
    for (d = 0; d < Dv; ++d) out[d] = 0.f;
    if (lse) *lse = -INFINITY;
    return;
  }
  {
    const float inv = 1.f / st->l;
    for (d = 0; d < Dv; ++d) out[d] = st->acc[d] * inv;
    if (lse) *lse = st->m + logf(st->l);
  }
}

static int af_scale_ok(float scale) {
  return scale > 0.f && scale <= 3.0e38f; /* excludes NaN, 0, negative, inf */
}

size_t af_sdpa_f32_workspace_bytes(const af_sdpa_shape* s) {
  if (af_sdpa_check_shape(s) != AF_OK) return 0;
  return (size_t)2 * AF_KEY_TILE * sizeof(float); /* accumulators live in `out` */
}

/* x = *m * 2^*e with *m in [1, 2) for a finite x >= 0 (x = 0: *m = 0), read
 * from the bits (a subnormal is first scaled by 2^64, exactly). */
static void af_f32_split(float x, float* m, int32_t* e) {
  uint32_t u;
  int32_t ex = 0;
  if (x == 0.f) {
    *m = 0.f;
    *e = 0;
    return;
  }
  if (x < 1.17549435e-38f) { /* FLT_MIN */
    x *= 18446744073709551616.f; /* 2^64 */
    ex = -64;
  }
  AF_COPY(&u, &x, 4);
  *e = ex + (int32_t)((u >> 23) & 0xffu) - 127;
  u = (u & 0x007fffffu) | 0x3f800000u;
  AF_COPY(m, &u, 4);
}

/* 1 if the product of n (<= 4) finite factors >= 0 is at most AF_F32_LIMIT
 * = 2^125, without forming it: exponents add as integers, mantissas
 * multiply in [1, 2^n) (no overflow, no double: a single-precision FPU or
 * the soft-float routines the f32 path links anyway). */
static int af_f32_product_ok(const float* x, int32_t n) {
  float m = 1.f;
  int32_t e = 0, i;
  for (i = 0; i < n; ++i) {
    float mi;
    int32_t ei;
    af_f32_split(x[i], &mi, &ei);
    if (mi == 0.f) return 1;
    m *= mi;
    e += ei;
  }
  if (e <= 125 - n) return 1; /* m < 2^n */
  if (e > 125) return 0;      /* m >= 1 */
  return m <= (float)(1u << (125 - e)); /* 125 - e in [0, n) */
}

/* af_f32_product_ok of two scan maxima (bit patterns) and two factors. */
static int af_f32_bound_ok(uint32_t a_bits, uint32_t b_bits, float c, float d) {
  float x[4];
  AF_COPY(&x[0], &a_bits, 4);
  AF_COPY(&x[1], &b_bits, 4);
  x[2] = c;
  x[3] = d;
  return af_f32_product_ok(x, 4);
}

/* The finite-input and range rule of micro.h (AF_F32_LIMIT): q whole, and
 * per batch element the keys and values in the union of its rows' visible
 * ranges (the only ones the kernel reads; v NULL: the probe, no values). */
static af_status af_sdpa_f32_inputs(const float* q, const float* k, const float* v,
                                    const int32_t* kv_lens, float scale, const af_sdpa_shape* s,
                                    const af_sdpa_opts* o) {
  const int32_t D = s->head_dim, Dv = s->v_dim, Lk = s->kv_len;
  uint32_t mq = 0, mk = 0, mv = 0;
  int32_t b, g, i;
  if (!af_scan_f32(q, (size_t)s->batch * s->num_heads * s->q_len * D, &mq)) return AF_ERR_PARAM;
  for (b = 0; b < s->batch; ++b) {
    const int32_t valid = kv_lens ? kv_lens[b] : Lk;
    int32_t lo = Lk, hi = -1;
    for (i = 0; i < s->q_len; ++i) {
      int32_t f, l;
      af_row_keys(s, o, i, valid, &f, &l);
      if (f <= l && f < lo) lo = f;
      if (f <= l && l > hi) hi = l;
    }
    for (g = 0; lo <= hi && g < s->num_kv_heads; ++g) {
      const size_t row0 = ((size_t)b * s->num_kv_heads + g) * Lk + lo, n = (size_t)(hi - lo + 1);
      if (!af_scan_f32(k + row0 * D, n * D, &mk)) return AF_ERR_PARAM;
      if (v != NULL && !af_scan_f32(v + row0 * Dv, n * Dv, &mv)) return AF_ERR_PARAM;
    }
  }
  {
    const uint32_t one = 0x3f800000u; /* 1.f */
    if (!af_f32_bound_ok(mq, mk, (float)D, 1.f) || !af_f32_bound_ok(mq, mk, (float)D, scale) ||
        !af_f32_bound_ok(mv, one, (float)(Lk > 0 ? Lk : 1), 1.f))
      return AF_ERR_PARAM;
  }
  return AF_OK;
}

/* Everything af_sdpa_f32_ex and the probe check before touching memory
 * (v NULL: the probe). */
static af_status af_sdpa_f32_check(const float* q, const float* k, const float* v,
                                   const int32_t* kv_lens, float scale, const af_sdpa_shape* s,
                                   const af_sdpa_opts* o) {
  af_status st = af_sdpa_check_shape(s);
  if (st != AF_OK) return st;
  if (q == NULL || k == NULL) return AF_ERR_NULL;
  if (!af_aligned(q, 4) || !af_aligned(k, 4) || !af_aligned(kv_lens, 4)) return AF_ERR_ALIGN;
  if (!af_scale_ok(scale)) return AF_ERR_PARAM;
  if ((st = af_check_kv_lens(kv_lens, s)) != AF_OK) return st;
  if ((st = af_f32_check_opts(o, s)) != AF_OK) return st;
  return af_sdpa_f32_inputs(q, k, v, kv_lens, scale, s, o);
}

/* The input ranges of an f32 attention call (q, k, v, kv_lens, options):
 * fills ins (at least 8) and returns their count. */
static int32_t af_sdpa_f32_spans(af_span* ins, const float* q, const float* k, const float* v,
                                 const int32_t* kv_lens, const af_sdpa_shape* s,
                                 const af_sdpa_opts* o) {
  const size_t kv = (size_t)s->batch * s->num_kv_heads * s->kv_len;
  ins[0].p = q;
  ins[0].n = (size_t)s->batch * s->num_heads * s->q_len * s->head_dim * 4;
  ins[1].p = k;
  ins[1].n = kv * s->head_dim * 4;
  ins[2].p = v;
  ins[2].n = kv * s->v_dim * 4;
  ins[3].p = kv_lens;
  ins[3].n = (size_t)s->batch * 4;
  return 4 + af_opts_spans(o, s, ins + 4);
}

af_status af_sdpa_f32_ex(float* out, float* lse, const float* q, const float* k,
                         const float* v, const int32_t* kv_lens, float scale,
                         const af_sdpa_shape* s, const af_sdpa_opts* o, void* arena,
                         size_t arena_bytes) {
  af_status st;
  int32_t b, h, i;
  float* sbuf;
  if ((st = af_sdpa_f32_check(q, k, v, kv_lens, scale, s, o)) != AF_OK) return st;
  if (out == NULL || v == NULL || arena == NULL) return AF_ERR_NULL;
  if (!af_aligned(out, 4) || !af_aligned(lse, 4) || !af_aligned(v, 4)) return AF_ERR_ALIGN;
  if (arena_bytes < af_sdpa_f32_workspace_bytes(s) || ((uintptr_t)arena & 3u))
    return AF_ERR_ARENA;
  {
    const size_t rows = (size_t)s->batch * s->num_heads * s->q_len;
    af_span outs[3], ins[8];
    const int32_t n_in = af_sdpa_f32_spans(ins, q, k, v, kv_lens, s, o);
    outs[0].p = out;
    outs[0].n = rows * s->v_dim * 4;
    outs[1].p = lse;
    outs[1].n = rows * 4;
    outs[2].p = arena;
    outs[2].n = af_sdpa_f32_workspace_bytes(s);
    if ((st = af_alias_check(outs, 3, ins, n_in)) != AF_OK) return st;
  }
  sbuf = (float*)arena; /* two score tiles; the rows accumulate in `out` */
  {
    const int32_t H = s->num_heads, G = s->num_heads / s->num_kv_heads;
    const int32_t Lq = s->q_len, Lk = s->kv_len, D = s->head_dim, Dv = s->v_dim;
    for (b = 0; b < s->batch; ++b) {
      const int32_t valid = kv_lens ? kv_lens[b] : Lk;
      for (h = 0; h < H; ++h) {
        const int32_t g = h / G;
        const float* kh = k + ((size_t)b * s->num_kv_heads + g) * Lk * D;
        const float* vh = v + ((size_t)b * s->num_kv_heads + g) * Lk * Dv;
        for (i = 0; i < Lq; i += 2) {
          const size_t row = ((size_t)b * H + h) * Lq + i;
          const int32_t two = i + 1 < Lq;
          int32_t f0, l0, f1, l1, d;
          af_row_state r0, r1;
          af_row_bias rb[2];
          const af_row_bias *rb0, *rb1;
          af_pair_rows(s, o, b, h, i, two, valid, &f0, &l0, &f1, &l1, rb, &rb0, &rb1);
          r0.m = r1.m = 0.f;
          r0.l = r1.l = 0.f;
          r0.n = r1.n = 0;
          r0.acc = out + row * Dv;
          r1.acc = r0.acc + Dv; /* only touched when `two` */
          for (d = 0; d < (two ? 2 : 1) * Dv; ++d) r0.acc[d] = 0.f;
          if (D == 64 && Dv == 64)
            af_pair_d64(&r0, &r1, q + row * D, kh, vh, f0, l0, f1, l1, two, scale, sbuf,
                        sbuf + AF_KEY_TILE, rb0, rb1);
          else
            af_pair_any(&r0, &r1, q + row * D, kh, vh, f0, l0, f1, l1, two, D, Dv, scale, sbuf,
                        sbuf + AF_KEY_TILE, rb0, rb1);
          af_row_finish(out + row * Dv, lse ? lse + row : NULL, &r0, Dv);
          if (two) af_row_finish(out + (row + 1) * Dv, lse ? lse + row + 1 : NULL, &r1, Dv);
        }
      }
    }
  }
  return AF_OK;
}

af_status af_sdpa_f32(float* out, float* lse, const float* q, const float* k,
                      const float* v, const int32_t* kv_lens, float scale,
                      const af_sdpa_shape* s, void* arena, size_t arena_bytes) {
  return af_sdpa_f32_ex(out, lse, q, k, v, kv_lens, scale, s, NULL, arena, arena_bytes);
}

/* ------------------------------------------------------------- probe --- */

/* Score of key j for the probe: the kernel's dot product, scale and bias
 * (-INFINITY outside [f, l]). */
static float af_probe_key(float* raw, float* scaled, const float* qr, const float* kh, int32_t j,
                          int32_t D, float scale, int32_t f, int32_t l, const af_row_bias* rb) {
  float x = af_dot_f32(qr, kh + (size_t)j * D, D);
  if (raw) *raw = x;
  x *= AF_SCALE(scale);
  if (scaled) *scaled = x;
  if (j < f || j > l) return -INFINITY;
  if (rb->kind) af_bias_f32(&x, 1, rb, j);
  return x;
}

af_status af_sdpa_f32_probe(float* scores, float* scaled, float* masked, float* weights,
                            float* lse, const float* q, const float* k, const int32_t* kv_lens,
                            float scale, const af_sdpa_shape* s, const af_sdpa_opts* o,
                            int32_t b, int32_t h, int32_t i) {
  af_status st = af_sdpa_f32_check(q, k, NULL, kv_lens, scale, s, o);
  int32_t f, l, j;
  float m = -INFINITY, sum = 0.f;
  af_row_bias rb;
  const float *qr, *kh;
  if (st != AF_OK) return st;
  if (b < 0 || b >= s->batch || h < 0 || h >= s->num_heads || i < 0 || i >= s->q_len)
    return AF_ERR_PARAM;
  if (!af_aligned(scores, 4) || !af_aligned(scaled, 4) || !af_aligned(masked, 4) ||
      !af_aligned(weights, 4) || !af_aligned(lse, 4))
    return AF_ERR_ALIGN;
  {
    const size_t row = (size_t)s->kv_len * 4;
    af_span outs[5], ins[8];
    const int32_t n_in = af_sdpa_f32_spans(ins, q, k, NULL, kv_lens, s, o);
    outs[0].p = scores, outs[0].n = row;
    outs[1].p = scaled, outs[1].n = row;
    outs[2].p = masked, outs[2].n = row;
    outs[3].p = weights, outs[3].n = row;
    outs[4].p = lse, outs[4].n = 4;
    if ((st = af_alias_check(outs, 5, ins, n_in)) != AF_OK) return st;
  }
  qr = q + (((size_t)b * s->num_heads + h) * s->q_len + i) * s->head_dim;
  kh = k + ((size_t)b * s->num_kv_heads + h / (s->num_heads / s->num_kv_heads)) * s->kv_len *
               s->head_dim;
  af_row_keys(s, o, i, kv_lens ? kv_lens[b] : s->kv_len, &f, &l);
  af_row_bias_init(&rb, s, o, b, h, i, kv_lens ? kv_lens[b] : s->kv_len);
  for (j = 0; j < s->kv_len; ++j) {
    const float x = af_probe_key(scores ? scores + j : NULL, scaled ? scaled + j : NULL, qr, kh,
                                 j, s->head_dim, scale, f, l, &rb);
    if (masked) masked[j] = x;
    if (x > m) m = x;
  }
  if (m > -INFINITY)
    for (j = 0; j < s->kv_len; ++j)
      sum += af_exp_neg(af_probe_key(NULL, NULL, qr, kh, j, s->head_dim, scale, f, l, &rb) - m);
  if (weights)
    for (j = 0; j < s->kv_len; ++j)
      weights[j] = m > -INFINITY ? af_exp_neg(af_probe_key(NULL, NULL, qr, kh, j, s->head_dim,
                                                           scale, f, l, &rb) - m) / sum
                                 : 0.f;
  if (lse) *lse = m > -INFINITY ? m + logf(sum) : -INFINITY;
  return AF_OK;
}

/* ------------------------------------------------------------ decode --- */

af_status af_kv_cache_init(af_kv_cache* c, float* k_storage, float* v_storage,
                           int32_t num_kv_heads, int32_t head_dim,
                           int32_t v_dim, int32_t capacity, int32_t window) {
  af_status st;
  if (c == NULL || k_storage == NULL || v_storage == NULL) return AF_ERR_NULL;
  if (!af_aligned(k_storage, 4) || !af_aligned(v_storage, 4)) return AF_ERR_ALIGN;
  st = af_kv_check(num_kv_heads, head_dim, v_dim, capacity, AF_MAX_DIM, window, 0);
  if (st != AF_OK) return st;
  AF_KV_CACHE_FILL(c, k_storage, v_storage, num_kv_heads, head_dim, v_dim, capacity, window);
  return AF_OK;
}

/* The cache struct is the caller's: every field is checked again before it
 * is used to index (a changed window, capacity or length must not reach
 * memory beyond the storage). */
static af_status af_kv_cache_check(const af_kv_cache* c) {
  if (c == NULL || c->k == NULL || c->v == NULL) return AF_ERR_NULL;
  if (!af_aligned(c->k, 4) || !af_aligned(c->v, 4)) return AF_ERR_ALIGN;
  return af_kv_check(c->num_kv_heads, c->head_dim, c->v_dim, c->capacity, AF_MAX_DIM, c->window,
                     c->length);
}

af_status af_kv_cache_append(af_kv_cache* c, const float* k_new,
                             const float* v_new) {
  int32_t g, slot;
  af_status st = af_kv_cache_check(c);
  if (st != AF_OK) return st;
  if (k_new == NULL || v_new == NULL) return AF_ERR_NULL;
  if (!af_aligned(k_new, 4) || !af_aligned(v_new, 4)) return AF_ERR_ALIGN;
  {
    /* finite rows within the cache's bounds (micro.h AF_F32_CACHE_*), the
     * new rows apart from the storage they are copied into */
    const size_t nk = (size_t)c->num_kv_heads * c->head_dim, nv = (size_t)c->num_kv_heads * c->v_dim;
    uint32_t mk = 0, mv = 0;
    af_span outs[2], ins[2];
    if (!af_scan_f32(k_new, nk, &mk) || !af_scan_f32(v_new, nv, &mv) ||
        mk > AF_F32_BITS_CACHE_K || mv > AF_F32_BITS_CACHE_V)
      return AF_ERR_PARAM;
    outs[0].p = c->k, outs[0].n = nk * c->capacity * 4;
    outs[1].p = c->v, outs[1].n = nv * c->capacity * 4;
    ins[0].p = k_new, ins[0].n = nk * 4;
    ins[1].p = v_new, ins[1].n = nv * 4;
    if ((st = af_alias_check(outs, 2, ins, 2)) != AF_OK) return st;
  }
  if (c->window == 0 && c->length >= c->capacity) return AF_ERR_FULL;
  if (c->length == 0x7fffffff) return AF_ERR_FULL;
  slot = c->length % c->capacity;
  for (g = 0; g < c->num_kv_heads; ++g) {
    memcpy(c->k + ((size_t)g * c->capacity + slot) * c->head_dim,
           k_new + (size_t)g * c->head_dim, (size_t)c->head_dim * sizeof(float));
    memcpy(c->v + ((size_t)g * c->capacity + slot) * c->v_dim,
           v_new + (size_t)g * c->v_dim, (size_t)c->v_dim * sizeof(float));
  }
  c->length++;
  return AF_OK;
}

size_t af_decode_f32_workspace_bytes(const af_kv_cache* c, int32_t num_heads) {
  if (c == NULL || num_heads < 1) return 0;
  return (size_t)AF_KEY_TILE * sizeof(float); /* accumulators live in `out` */
}

af_status af_decode_f32_ex(float* out, float* lse, const float* q, const af_kv_cache* c,
                           int32_t num_heads, float scale, const float* alibi_slopes,
                           void* arena, size_t arena_bytes) {
  return af_decode_f32_softcap(out, lse, q, c, num_heads, scale, alibi_slopes, 0.f, arena,
                               arena_bytes);
}

af_status af_decode_f32_softcap(float* out, float* lse, const float* q, const af_kv_cache* c,
                                int32_t num_heads, float scale, const float* alibi_slopes,
                                float softcap, void* arena, size_t arena_bytes) {
  int32_t h, first, n;
  float* sbuf;
  af_status st = af_kv_cache_check(c);
  if (st != AF_OK) return st;
  if (out == NULL || q == NULL || arena == NULL) return AF_ERR_NULL;
  if (!af_aligned(out, 4) || !af_aligned(lse, 4) || !af_aligned(q, 4) ||
      !af_aligned(alibi_slopes, 4))
    return AF_ERR_ALIGN;
  if (num_heads < 1 || num_heads > AF_MAX_DIM || num_heads % c->num_kv_heads != 0)
    return AF_ERR_SHAPE;
  if (!af_scale_ok(scale)) return AF_ERR_PARAM;
  /* finite, >= 0, <= AF_F32_LIMIT */
  if (!(softcap == 0.f || (af_scale_ok(softcap) && softcap <= AF_F32_LIMIT))) return AF_ERR_PARAM;
  {
    /* q finite and, against the cache's bound on |k|, in range; slopes
     * finite with |slope| <= 2^108 */
    uint32_t mq = 0, ms = 0;
    const uint32_t kmax = AF_F32_BITS_CACHE_K;
    if (!af_scan_f32(q, (size_t)num_heads * c->head_dim, &mq) ||
        !af_f32_bound_ok(mq, kmax, (float)c->head_dim, 1.f) ||
        !af_f32_bound_ok(mq, kmax, (float)c->head_dim, scale))
      return AF_ERR_PARAM;
    if (alibi_slopes && (!af_scan_f32(alibi_slopes, (size_t)num_heads, &ms) ||
                         ms > AF_F32_BITS_2P108))
      return AF_ERR_PARAM;
  }
  if (arena_bytes < af_decode_f32_workspace_bytes(c, num_heads) || ((uintptr_t)arena & 3u))
    return AF_ERR_ARENA;
  {
    const size_t kv = (size_t)c->num_kv_heads * c->capacity * 4;
    af_span outs[3], ins[4];
    outs[0].p = out, outs[0].n = (size_t)num_heads * c->v_dim * 4;
    outs[1].p = lse, outs[1].n = (size_t)num_heads * 4;
    outs[2].p = arena, outs[2].n = af_decode_f32_workspace_bytes(c, num_heads);
    ins[0].p = q, ins[0].n = (size_t)num_heads * c->head_dim * 4;
    ins[1].p = c->k, ins[1].n = kv * c->head_dim;
    ins[2].p = c->v, ins[2].n = kv * c->v_dim;
    ins[3].p = alibi_slopes, ins[3].n = (size_t)num_heads * 4;
    if ((st = af_alias_check(outs, 3, ins, 4)) != AF_OK) return st;
  }
  sbuf = (float*)arena;
  /* Visible positions [first, length): the last `window` ones, or all
   * (length <= capacity then). */
  af_kv_visible(c->length, c->window, &first, &n);
  for (h = 0; h < num_heads; ++h) {
    const int32_t g = h / (num_heads / c->num_kv_heads);
    const float* kh = c->k + (size_t)g * c->capacity * c->head_dim;
    const float* vh = c->v + (size_t)g * c->capacity * c->v_dim;
    af_row_state rs;
    af_row_bias rb;
    const af_row_bias* rbp = NULL;
    int32_t d, s0 = first % c->capacity, seg;
    rs.m = 0.f;
    rs.l = 0.f;
    rs.n = 0;
    rs.acc = out + (size_t)h * c->v_dim;
    for (d = 0; d < c->v_dim; ++d) rs.acc[d] = 0.f;
    if (alibi_slopes || softcap > 0.f) {
      af_row_bias_decode(&rb, c->length);
      rb.kind = 0;
      rbp = &rb;
    }
    if (alibi_slopes) { /* key at position p: -slope * (length - 1 - p) */
      rb.kind |= AF_BIAS_ALIBI;
      rb.slope = alibi_slopes[h];
    }
    if (softcap > 0.f) { /* cap * tanhf(x / cap) before ALiBi, as af_sdpa_f32_ex */
      rb.kind |= AF_BIAS_SOFTCAP;
      rb.cap = softcap;
    }
    /* The ring holds positions in slot order; visit them oldest first, as
     * at most two contiguous segments. */
    seg = c->capacity - s0 < n ? c->capacity - s0 : n;
    if (seg > 0)
      af_row_update(&rs, q + (size_t)h * c->head_dim, kh + (size_t)s0 * c->head_dim,
                    vh + (size_t)s0 * c->v_dim, first, seg, c->head_dim, c->v_dim, scale, sbuf,
                    rbp);
    if (n - seg > 0)
      af_row_update(&rs, q + (size_t)h * c->head_dim, kh, vh, first + seg, n - seg, c->head_dim,
                    c->v_dim, scale, sbuf, rbp);
    af_row_finish(out + (size_t)h * c->v_dim, lse ? lse + h : NULL, &rs, c->v_dim);
  }
  return AF_OK;
}

af_status af_decode_f32(float* out, float* lse, const float* q,
                        const af_kv_cache* c, int32_t num_heads, float scale,
                        void* arena, size_t arena_bytes) {
  return af_decode_f32_ex(out, lse, q, c, num_heads, scale, NULL, arena, arena_bytes);
}
