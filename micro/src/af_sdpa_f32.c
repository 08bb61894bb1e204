/* af_sdpa_f32.c — f32 scaled dot-product attention for microcontrollers:
 * streaming over key tiles of AF_KEY_TILE with an online softmax, and a
 * decode step over a ring-buffer KV cache (include/attnflow/micro.h).
 *
 * Invariants: no heap; the arena holds one tile of scores and one Dv
 * accumulator row (AF_KEY_TILE + Dv floats), nothing proportional to Lq*Lk or
 * to a whole score row. Keys outside a row's visible range are never read,
 * so masked keys cost nothing and no -inf arithmetic happens; a row with no
 * visible key writes zeros and lse = -inf. fp32 accumulation, in key order
 * (deterministic). */
#include <math.h>
#include <string.h>

#include "af_internal.h"

typedef struct {
  float m;   /* running max of scaled scores (valid when n > 0) */
  float l;   /* running sum of exp(s - m) */
  int32_t n; /* keys seen */
  float* acc;
} af_row_state;

#if defined(__GNUC__)
#define AF_INLINE static inline __attribute__((always_inline))
#else
#define AF_INLINE static inline
#endif
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
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* q.k in d order with one accumulator (the same rounding sequence as the
 * blocked kernels, so a key's score does not depend on its block). */
static float af_dot_f32(const float* a, const float* b, int32_t n) {
  float s = 0.f;
  int32_t d;
  for (d = 0; d < n; ++d) s = AF_FMA(a[d], b[d], s);
  return s;
}

static void af_axpy_f32(float* acc, float p, const float* v, int32_t n) {
  int32_t d;
  for (d = 0; d < n; ++d) acc[d] = AF_FMA(p, v[d], acc[d]);
}

/* Scores of q against 8 consecutive keys (rows k, k+D, ...): each q element
 * is loaded once for 8 MACs; with D constant the key offsets are
 * immediates. */
AF_INLINE void af_qk8_f32(float* s, const float* q, const float* k, int32_t D) {
  float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f, a4 = 0.f, a5 = 0.f, a6 = 0.f, a7 = 0.f, x;
  int32_t d;
  for (d = 0; d < D; ++d) {
    x = q[d];
    a0 = AF_FMA(x, k[d], a0);
    a1 = AF_FMA(x, k[D + d], a1);
    a2 = AF_FMA(x, k[2 * D + d], a2);
    a3 = AF_FMA(x, k[3 * D + d], a3);
    a4 = AF_FMA(x, k[4 * D + d], a4);
    a5 = AF_FMA(x, k[5 * D + d], a5);
    a6 = AF_FMA(x, k[6 * D + d], a6);
    a7 = AF_FMA(x, k[7 * D + d], a7);
  }
  s[0] = a0;
  s[1] = a1;
  s[2] = a2;
  s[3] = a3;
  s[4] = a4;
  s[5] = a5;
  s[6] = a6;
  s[7] = a7;
}

/* acc += sum_j p_j * v_j over 8 consecutive value rows, keys in order (one
 * load/store of acc per 8 keys). */
AF_INLINE void af_pv8_f32(float* acc, const float* p, const float* v, int32_t Dv) {
  const float p0 = p[0], p1 = p[1], p2 = p[2], p3 = p[3], p4 = p[4], p5 = p[5], p6 = p[6],
              p7 = p[7];
  int32_t d;
  for (d = 0; d < Dv; ++d) {
    float a = acc[d];
    a = AF_FMA(p0, v[d], a);
    a = AF_FMA(p1, v[Dv + d], a);
    a = AF_FMA(p2, v[2 * Dv + d], a);
    a = AF_FMA(p3, v[3 * Dv + d], a);
    a = AF_FMA(p4, v[4 * Dv + d], a);
    a = AF_FMA(p5, v[5 * Dv + d], a);
    a = AF_FMA(p6, v[6 * Dv + d], a);
    a = AF_FMA(p7, v[7 * Dv + d], a);
    acc[d] = a;
  }
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
  for (d = 0; d + 4 <= D; d += 4, q += 4, k += 4) {
    AF_QK_STEP(0)
    AF_QK_STEP(1)
    AF_QK_STEP(2)
    AF_QK_STEP(3)
  }
  for (; d < D; ++d, ++q, ++k) {
    AF_QK_STEP(0)
  }
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
  for (d = 0; d + 4 <= Dv; d += 4, acc += 4, v += 4) {
    AF_PV_STEP(0)
    AF_PV_STEP(1)
    AF_PV_STEP(2)
    AF_PV_STEP(3)
  }
  for (; d < Dv; ++d, ++acc, ++v) {
    AF_PV_STEP(0)
  }
#undef AF_PV_STEP
}

/* Folds keys k[0..n) / v[0..n) (row strides D / Dv) into the row state. */
AF_INLINE void af_row_update_impl(af_row_state* st, const float* q, const float* k,
                                  const float* v, int32_t n, int32_t D, int32_t Dv,
                                  float scale, float* sbuf) {
  int32_t j0;
  for (j0 = 0; j0 < n; j0 += AF_KEY_TILE) {
    const int32_t t_n = (n - j0) < AF_KEY_TILE ? (n - j0) : AF_KEY_TILE;
    const float* kt = k + (size_t)j0 * D;
    const float* vt = v + (size_t)j0 * Dv;
    float tmax, m_new;
    int32_t t;
    for (t = 0; t + 8 <= t_n; t += 8) af_qk8_f32(sbuf + t, q, kt + (size_t)t * D, D);
    for (; t + 4 <= t_n; t += 4) af_qk4_f32(sbuf + t, q, kt + (size_t)t * D, D);
    for (; t < t_n; ++t) sbuf[t] = af_dot_f32(q, kt + (size_t)t * D, D);
    for (t = 0; t < t_n; ++t) sbuf[t] *= scale;
    tmax = sbuf[0];
    for (t = 1; t < t_n; ++t)
      if (sbuf[t] > tmax) tmax = sbuf[t];
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
    for (t = 0; t + 8 <= t_n; t += 8) af_pv8_f32(st->acc, sbuf + t, vt + (size_t)t * Dv, Dv);
    for (; t + 4 <= t_n; t += 4) af_pv4_f32(st->acc, sbuf + t, vt + (size_t)t * Dv, Dv);
    for (; t < t_n; ++t) af_axpy_f32(st->acc, sbuf[t], vt + (size_t)t * Dv, Dv);
    st->n += t_n;
  }
}

static void af_row_update_d64(af_row_state* st, const float* q, const float* k, const float* v,
                              int32_t n, float scale, float* sbuf) {
  af_row_update_impl(st, q, k, v, n, 64, 64, scale, sbuf);
}
static void af_row_update_any(af_row_state* st, const float* q, const float* k, const float* v,
                              int32_t n, int32_t D, int32_t Dv, float scale, float* sbuf) {
  af_row_update_impl(st, q, k, v, n, D, Dv, scale, sbuf);
}
static void af_row_update(af_row_state* st, const float* q, const float* k, const float* v,
                          int32_t n, int32_t D, int32_t Dv, float scale, float* sbuf) {
  if (D == 64 && Dv == 64)
    af_row_update_d64(st, q, k, v, n, scale, sbuf);
  else
    af_row_update_any(st, q, k, v, n, D, Dv, scale, sbuf);
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
  return (size_t)(AF_KEY_TILE + s->v_dim) * sizeof(float);
}

af_status af_sdpa_f32(float* out, float* lse, const float* q, const float* k,
                      const float* v, const int32_t* kv_lens, float scale,
                      const af_sdpa_shape* s, void* arena, size_t arena_bytes) {
  af_status st = af_sdpa_check_shape(s);
  int32_t b, h, i;
  float *sbuf, *acc;
  if (st != AF_OK) return st;
  if (out == NULL || q == NULL || k == NULL || v == NULL || arena == NULL)
    return AF_ERR_NULL;
  if (!af_scale_ok(scale)) return AF_ERR_PARAM;
  if ((st = af_check_kv_lens(kv_lens, s)) != AF_OK) return st;
  if (arena_bytes < af_sdpa_f32_workspace_bytes(s) || ((uintptr_t)arena & 3u))
    return AF_ERR_ARENA;
  sbuf = (float*)arena;
  acc = sbuf + AF_KEY_TILE;
  {
    const int32_t H = s->num_heads, G = s->num_heads / s->num_kv_heads;
    const int32_t Lq = s->q_len, Lk = s->kv_len, D = s->head_dim, Dv = s->v_dim;
    for (b = 0; b < s->batch; ++b) {
      const int32_t valid = kv_lens ? kv_lens[b] : Lk;
      for (h = 0; h < H; ++h) {
        const int32_t g = h / G;
        const float* kh = k + ((size_t)b * s->num_kv_heads + g) * Lk * D;
        const float* vh = v + ((size_t)b * s->num_kv_heads + g) * Lk * Dv;
        for (i = 0; i < Lq; ++i) {
          const size_t row = ((size_t)b * H + h) * Lq + i;
          const int32_t last = af_last_key(s, i, valid);
          af_row_state rs;
          int32_t d;
          rs.m = 0.f;
          rs.l = 0.f;
          rs.n = 0;
          rs.acc = acc;
          for (d = 0; d < Dv; ++d) acc[d] = 0.f;
          if (last >= 0)
            af_row_update(&rs, q + row * D, kh, vh, last + 1, D, Dv, scale, sbuf);
          af_row_finish(out + row * Dv, lse ? lse + row : NULL, &rs, Dv);
        }
      }
    }
  }
  return AF_OK;
}

/* ------------------------------------------------------------ decode --- */

af_status af_kv_cache_init(af_kv_cache* c, float* k_storage, float* v_storage,
                           int32_t num_kv_heads, int32_t head_dim,
                           int32_t v_dim, int32_t capacity, int32_t window) {
  if (c == NULL || k_storage == NULL || v_storage == NULL) return AF_ERR_NULL;
  if (num_kv_heads < 1 || head_dim < 1 || v_dim < 1 || capacity < 1 ||
      num_kv_heads > AF_MAX_DIM || head_dim > AF_MAX_DIM || v_dim > AF_MAX_DIM ||
      capacity > AF_MAX_DIM ||
      (uint64_t)num_kv_heads * (uint64_t)capacity *
              (uint64_t)(head_dim > v_dim ? head_dim : v_dim) >= ((uint64_t)1 << 31))
    return AF_ERR_SHAPE;
  if (window < 0 || window > capacity) return AF_ERR_PARAM;
  c->k = k_storage;
  c->v = v_storage;
  c->num_kv_heads = num_kv_heads;
  c->head_dim = head_dim;
  c->v_dim = v_dim;
  c->capacity = capacity;
  c->window = window;
  c->length = 0;
  return AF_OK;
}

af_status af_kv_cache_append(af_kv_cache* c, const float* k_new,
                             const float* v_new) {
  int32_t g, slot;
  if (c == NULL || k_new == NULL || v_new == NULL || c->k == NULL) return AF_ERR_NULL;
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
  return (size_t)(AF_KEY_TILE + c->v_dim) * sizeof(float);
}

af_status af_decode_f32(float* out, float* lse, const float* q,
                        const af_kv_cache* c, int32_t num_heads, float scale,
                        void* arena, size_t arena_bytes) {
  int32_t h, first, n;
  float *sbuf, *acc;
  if (out == NULL || q == NULL || c == NULL || arena == NULL || c->k == NULL)
    return AF_ERR_NULL;
  if (num_heads < 1 || num_heads > AF_MAX_DIM || num_heads % c->num_kv_heads != 0)
    return AF_ERR_SHAPE;
  if (!af_scale_ok(scale)) return AF_ERR_PARAM;
  if (arena_bytes < af_decode_f32_workspace_bytes(c, num_heads) || ((uintptr_t)arena & 3u))
    return AF_ERR_ARENA;
  sbuf = (float*)arena;
  acc = sbuf + AF_KEY_TILE;
  /* Visible positions [first, length). With a window they are the last
   * `window` positions; without, all (length <= capacity then). */
  n = c->length;
  if (c->window > 0 && n > c->window) n = c->window;
  first = c->length - n;
  for (h = 0; h < num_heads; ++h) {
    const int32_t g = h / (num_heads / c->num_kv_heads);
    const float* kh = c->k + (size_t)g * c->capacity * c->head_dim;
    const float* vh = c->v + (size_t)g * c->capacity * c->v_dim;
    af_row_state rs;
    int32_t d, s0 = first % c->capacity, seg;
    rs.m = 0.f;
    rs.l = 0.f;
    rs.n = 0;
    rs.acc = acc;
    for (d = 0; d < c->v_dim; ++d) acc[d] = 0.f;
    /* The ring holds positions in slot order; visit them oldest first, as
     * at most two contiguous segments. */
    seg = c->capacity - s0 < n ? c->capacity - s0 : n;
    if (seg > 0)
      af_row_update(&rs, q + (size_t)h * c->head_dim, kh + (size_t)s0 * c->head_dim,
                    vh + (size_t)s0 * c->v_dim, seg, c->head_dim, c->v_dim, scale, sbuf);
    if (n - seg > 0)
      af_row_update(&rs, q + (size_t)h * c->head_dim, kh, vh, n - seg, c->head_dim,
                    c->v_dim, scale, sbuf);
    af_row_finish(out + (size_t)h * c->v_dim, lse ? lse + h : NULL, &rs, c->v_dim);
  }
  return AF_OK;
}
