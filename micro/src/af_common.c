/* af_common.c — shape and option validation, the visible-key rule and the
 * per-row mask/ALiBi setup, and status names of the micro library
 * (include/attnflow/micro.h). C99, no heap, no I/O. Invariants: a shape that
 * passes af_sdpa_check_shape has every element count of q/k/v/out below 2^31,
 * so 32-bit index arithmetic in the kernels cannot overflow; options that
 * pass af_sdpa_check_opts have a mask whose element count is below 2^31 and
 * whose extents are 1 or the full dimension, so every mask offset computed
 * here is in bounds. */
#include "af_internal.h"

const char* af_status_name(af_status s) {
  switch (s) {
    case AF_OK: return "ok";
    case AF_ERR_NULL: return "null pointer";
    case AF_ERR_SHAPE: return "invalid shape";
    case AF_ERR_ARENA: return "arena too small";
    case AF_ERR_PARAM: return "invalid parameter";
    case AF_ERR_FULL: return "kv cache full";
    case AF_ERR_ALIGN: return "misaligned pointer";
    case AF_ERR_ALIAS: return "overlapping buffers";
  }
  return "unknown status";
}

/* a * b * c * d < 2^31 for factors in [0, AF_MAX_DIM] (each pair's
 * product < 2^32), in 32-bit arithmetic: one division, no 64-bit
 * multiply. */
static int af_fits(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  const uint32_t ab = a * b, cd = c * d;
  return ab == 0 || cd <= 0x7fffffffu / ab;
}

af_status af_sdpa_check_shape(const af_sdpa_shape* s) {
  if (s == NULL) return AF_ERR_NULL;
  if (s->batch < 0 || s->q_len < 0 || s->kv_len < 0 || s->num_heads < 1 ||
      s->num_kv_heads < 1 || s->head_dim < 1 || s->v_dim < 1)
    return AF_ERR_SHAPE;
  if (s->batch > AF_MAX_DIM || s->q_len > AF_MAX_DIM || s->kv_len > AF_MAX_DIM ||
      s->num_heads > AF_MAX_DIM || s->head_dim > AF_MAX_DIM || s->v_dim > AF_MAX_DIM)
    return AF_ERR_SHAPE;
  if (s->num_kv_heads > s->num_heads || s->num_heads % s->num_kv_heads != 0)
    return AF_ERR_SHAPE;
  if (s->causal != AF_CAUSAL_NONE && s->causal != AF_CAUSAL_TOP_LEFT &&
      s->causal != AF_CAUSAL_BOTTOM_RIGHT)
    return AF_ERR_PARAM;
  if (!af_fits((uint32_t)s->batch, (uint32_t)s->num_heads, (uint32_t)s->q_len,
               (uint32_t)(s->head_dim > s->v_dim ? s->head_dim : s->v_dim)) ||
      !af_fits((uint32_t)s->batch, (uint32_t)s->num_kv_heads, (uint32_t)s->kv_len,
               (uint32_t)(s->head_dim > s->v_dim ? s->head_dim : s->v_dim)))
    return AF_ERR_SHAPE;
  return AF_OK;
}

/* Largest key index row i may see (causal rule with the diagonal of key
 * length dlen, then key padding `valid`); negative: the row sees nothing. */
static int32_t af_last_key(const af_sdpa_shape* s, int32_t i, int32_t dlen, int32_t valid) {
  int32_t last = s->kv_len - 1;
  if (s->causal == AF_CAUSAL_TOP_LEFT) {
    if (i < last) last = i;
  } else if (s->causal == AF_CAUSAL_BOTTOM_RIGHT) {
    const int32_t d = i + (dlen - s->q_len);
    if (d < last) last = d;
  }
  if (valid - 1 < last) last = valid - 1;
  return last;
}

af_status af_check_kv_lens(const int32_t* kv_lens, const af_sdpa_shape* s) {
  int32_t b;
  if (kv_lens == NULL) return AF_OK;
  for (b = 0; b < s->batch; ++b)
    if (kv_lens[b] < 0 || kv_lens[b] > s->kv_len) return AF_ERR_PARAM;
  return AF_OK;
}

af_status af_mha_check_shape(const af_mha_shape* s, af_sdpa_shape* sd) {
  if (s == NULL) return AF_ERR_NULL;
  if (s->batch < 0 || s->q_len < 0 || s->kv_len < 0 || s->embed < 1 || s->num_heads < 1 ||
      s->num_kv_heads < 1 || s->embed > AF_MAX_DIM || s->num_heads > s->embed)
    return AF_ERR_SHAPE;
  if (s->embed % s->num_heads != 0 || s->num_heads % s->num_kv_heads != 0) return AF_ERR_SHAPE;
  sd->batch = 1;
  sd->num_heads = s->num_heads;
  sd->num_kv_heads = s->num_kv_heads;
  sd->q_len = s->q_len;
  sd->kv_len = s->kv_len;
  sd->head_dim = s->embed / s->num_heads;
  sd->v_dim = sd->head_dim;
  sd->causal = s->causal;
  if ((uint64_t)(s->q_len > s->kv_len ? s->q_len : s->kv_len) * (uint64_t)s->embed *
          (uint64_t)(s->batch > 0 ? s->batch : 1) >= ((uint64_t)1 << 31))
    return AF_ERR_SHAPE;
  return af_sdpa_check_shape(sd);
}

af_status af_mha_check_call(const af_mha_shape* s, const af_sdpa_shape* sd, const int32_t* kv_lens,
                            const af_sdpa_opts* o, int int8) {
  af_sdpa_shape full = *sd;
  af_status st;
  full.batch = s->batch;
  if ((st = af_check_kv_lens(kv_lens, &full)) != AF_OK) return st;
  return af_sdpa_check_opts(o, &full, int8);
}

void af_mha_seq_opts(af_sdpa_opts* ob, const af_sdpa_opts* o, int32_t b, int32_t num_heads) {
  *ob = *o;
  if (o->mask_type != AF_MASK_NONE && o->mask_shape[0] != 1) {
    const size_t per_b = (size_t)o->mask_shape[1] * o->mask_shape[2] * o->mask_shape[3];
    ob->mask = (const uint8_t*)o->mask + (size_t)b * per_b * (o->mask_type == AF_MASK_BOOL ? 1 : 4);
  }
  ob->mask_shape[0] = 1;
  if (o->alibi_per_batch) { /* [B, H] slopes: this sequence's [H] row */
    if (o->alibi_slopes != NULL) ob->alibi_slopes = o->alibi_slopes + (size_t)b * num_heads;
    if (o->alibi_s8 != NULL) ob->alibi_s8 = o->alibi_s8 + (size_t)b * num_heads;
    ob->alibi_per_batch = 0;
  }
}

int af_aligned(const void* p, uintptr_t align) { return ((uintptr_t)p & (align - 1u)) == 0; }

int af_overlap(af_span a, af_span b) {
  const uintptr_t a0 = (uintptr_t)a.p, b0 = (uintptr_t)b.p;
  if (a.p == NULL || b.p == NULL || a.n == 0 || b.n == 0) return 0;
  return a0 < b0 ? b0 - a0 < a.n : a0 - b0 < b.n;
}

af_status af_alias_check(const af_span* outs, int32_t n_out, const af_span* ins, int32_t n_in) {
  int32_t i, j;
  for (i = 0; i < n_out; ++i) {
    for (j = i + 1; j < n_out; ++j)
      if (af_overlap(outs[i], outs[j])) return AF_ERR_ALIAS;
    for (j = 0; j < n_in; ++j)
      if (af_overlap(outs[i], ins[j])) return AF_ERR_ALIAS;
  }
  return AF_OK;
}

af_status af_same_or_apart(const void* y, const void* x, size_t bytes) {
  af_span a, b;
  a.p = y;
  a.n = bytes;
  b.p = x;
  b.n = bytes;
  return y == x || !af_overlap(a, b) ? AF_OK : AF_ERR_ALIAS;
}

int32_t af_opts_spans(const af_sdpa_opts* o, const af_sdpa_shape* s, af_span* spans) {
  int32_t n = 0;
  const size_t n_slopes = (size_t)(o != NULL && o->alibi_per_batch ? s->batch : 1) * s->num_heads;
  if (o == NULL) return 0;
  if (o->mask_type != AF_MASK_NONE) {
    spans[n].p = o->mask;
    spans[n++].n = (size_t)o->mask_shape[0] * o->mask_shape[1] * o->mask_shape[2] *
                   o->mask_shape[3] * (o->mask_type == AF_MASK_BOOL ? 1u : 4u);
  }
  spans[n].p = o->alibi_slopes;
  spans[n++].n = 4 * n_slopes;
  spans[n].p = o->alibi_s8;
  spans[n++].n = 4 * n_slopes;
  spans[n].p = o->softcap_s8;
  spans[n++].n = (size_t)16 * s->num_heads;
  return n;
}

int af_scan_f32(const float* x, size_t n, uint32_t* max_abs) {
  /* One max over |x| bit patterns, no early exit (a vectorisable
   * reduction): NaN and inf are exactly the patterns >= 0x7f800000. */
  uint32_t m = *max_abs, m1 = 0, m2 = 0, m3 = 0;
  size_t i;
  for (i = 0; i + 4 <= n; i += 4) { /* four chains: no loop-carried latency */
    uint32_t u[4];
    AF_COPY(u, x + i, 16);
    u[0] &= 0x7fffffffu, u[1] &= 0x7fffffffu, u[2] &= 0x7fffffffu, u[3] &= 0x7fffffffu;
    m = u[0] > m ? u[0] : m;
    m1 = u[1] > m1 ? u[1] : m1;
    m2 = u[2] > m2 ? u[2] : m2;
    m3 = u[3] > m3 ? u[3] : m3;
  }
  for (; i < n; ++i) {
    uint32_t u;
    AF_COPY(&u, x + i, 4);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  m1 = m1 > m3 ? m1 : m3;
  m2 = m2 > m1 ? m2 : m1;
  m = m > m2 ? m : m2;
  *max_abs = m;
  return m < 0x7f800000u;
}

af_status af_check_finite_f32(const float* x, size_t n) {
  uint32_t m = 0;
  if (n == 0) return AF_OK;
  if (x == NULL) return AF_ERR_NULL;
  if (!af_aligned(x, 4)) return AF_ERR_ALIGN;
  return af_scan_f32(x, n, &m) ? AF_OK : AF_ERR_PARAM;
}

af_status af_kv_check(int32_t num_kv_heads, int32_t head_dim, int32_t v_dim, int32_t capacity,
                      int32_t max_capacity, int32_t window, int32_t length) {
  if (num_kv_heads < 1 || head_dim < 1 || v_dim < 1 || capacity < 1 ||
      num_kv_heads > AF_MAX_DIM || head_dim > AF_MAX_DIM || v_dim > AF_MAX_DIM ||
      capacity > max_capacity ||
      !af_fits((uint32_t)num_kv_heads, (uint32_t)capacity,
               (uint32_t)(head_dim > v_dim ? head_dim : v_dim), 1))
    return AF_ERR_SHAPE;
  if (window < 0 || window > capacity || length < 0 || (window == 0 && length > capacity))
    return AF_ERR_PARAM;
  return AF_OK;
}

void af_kv_visible(int32_t length, int32_t window, int32_t* first, int32_t* n) {
  *n = window > 0 && length > window ? window : length;
  *first = length - *n;
}

af_status af_softcap_s8_check(const int32_t* c, int32_t num_heads) {
  int32_t h;
  if (!af_aligned(c, 4)) return AF_ERR_ALIGN;
  for (h = 0; h < num_heads; ++h, c += 4)
    if (c[0] <= 0 || c[1] < -31 || c[1] > 30 || c[2] <= 0 || c[3] < -31 || c[3] > 30)
      return AF_ERR_PARAM;
  return AF_OK;
}

/* A row bias of the given kind on diagonal `diag`: no mask, slopes 0, no
 * softcap (each caller then sets what its row has). */
static void af_row_bias_reset(af_row_bias* rb, int32_t kind, int32_t diag) {
  rb->kind = kind;
  rb->mrow = NULL;
  rb->msj = 0;
  rb->diag = diag;
  rb->slope = 0.f;
  rb->slope_s8 = 0;
  rb->alibi32 = 0;
  rb->cap = 0.f;
  rb->cap_s8 = NULL;
  rb->cap_tile = NULL;
}

void af_row_bias_decode(af_row_bias* rb, int32_t length) {
  af_row_bias_reset(rb, AF_BIAS_ALIBI, length - 1);
}

af_status af_vec_check(int32_t n, uintptr_t align, const void* a, const void* b,
                       const void* c) {
  if (a == NULL || b == NULL || c == NULL) return AF_ERR_NULL;
  if (!af_aligned(a, align) || !af_aligned(b, align) || !af_aligned(c, align)) return AF_ERR_ALIGN;
  return n < 0 ? AF_ERR_SHAPE : AF_OK;
}

af_status af_rope_check(int32_t num_heads, int32_t head_dim, af_rope_layout layout) {
  if (num_heads < 1 || head_dim < 2 || head_dim % 2 || num_heads > AF_MAX_DIM ||
      head_dim > AF_MAX_DIM || !af_fits((uint32_t)num_heads, (uint32_t)head_dim, 1, 1))
    return AF_ERR_SHAPE;
  if (layout != AF_ROPE_HALF && layout != AF_ROPE_INTERLEAVED) return AF_ERR_PARAM;
  return AF_OK;
}

void af_sdpa_opts_init(af_sdpa_opts* o) {
  if (o == NULL) return;
  o->mask_type = AF_MASK_NONE;
  o->mask = NULL;
  o->mask_shape[0] = o->mask_shape[1] = o->mask_shape[2] = o->mask_shape[3] = 1;
  o->window_left = o->window_right = -1;
  o->alibi_slopes = NULL;
  o->alibi_s8 = NULL;
  o->v_layout = AF_V_ROWS;
  o->kv_align = AF_KV_ALIGN_PADDED;
  o->alibi_per_batch = 0;
  o->softcap = 0.f;
  o->softcap_s8 = NULL;
}

/* The checks both paths share (windows, alignment of the diagonal, the
 * slope layout, the V layout, the mask and its broadcast shape), then each
 * path's own in its own function, so that an int8 application does not link
 * the f32 checks, nor one without softcap the softcap constants' check. */
static af_status af_opts_check_common(const af_sdpa_opts* o, const af_sdpa_shape* s, int int8) {
  int32_t d;
  if (o->window_left < -1 || o->window_right < -1) return AF_ERR_PARAM;
  if (o->kv_align != AF_KV_ALIGN_PADDED && o->kv_align != AF_KV_ALIGN_PER_SEQUENCE)
    return AF_ERR_PARAM;
  if (o->alibi_per_batch != 0 && o->alibi_per_batch != 1) return AF_ERR_PARAM;
  if (o->v_layout != AF_V_ROWS && (!int8 || o->v_layout != AF_V_COLS)) return AF_ERR_PARAM;
  if (o->mask_type != AF_MASK_NONE) {
    const int32_t target[4] = {s->batch, s->num_heads, s->q_len, s->kv_len};
    uint32_t n[4];
    if (o->mask_type != AF_MASK_BOOL &&
        (int8 ? o->mask_type != AF_MASK_S32 : o->mask_type != AF_MASK_F32))
      return AF_ERR_PARAM;
    if (o->mask == NULL) return AF_ERR_NULL;
    if (o->mask_type != AF_MASK_BOOL && !af_aligned(o->mask, 4)) return AF_ERR_ALIGN;
    for (d = 0; d < 4; ++d) {
      if (o->mask_shape[d] != 1 && o->mask_shape[d] != target[d]) return AF_ERR_SHAPE;
      /* af_fits needs factors <= AF_MAX_DIM; the shape may be unchecked here
       * (af_sdpa_check_opts is public) */
      if (o->mask_shape[d] > AF_MAX_DIM) return AF_ERR_SHAPE;
      n[d] = (uint32_t)(o->mask_shape[d] > 0 ? o->mask_shape[d] : 1);
    }
    if (!af_fits(n[0], n[1], n[2], n[3])) return AF_ERR_SHAPE;
  } else if (o->mask != NULL) {
    return AF_ERR_PARAM; /* a mask without a type is a caller bug */
  }
  return AF_OK;
}

/* The float softcap's bits (no float compare on the integer path): +-0 is
 * off (the host's `>= 0`), reported as 0. */
static uint32_t af_cap_bits(const af_sdpa_opts* o) {
  uint32_t cap_bits;
  AF_COPY(&cap_bits, &o->softcap, 4);
  return (cap_bits & 0x7fffffffu) == 0 ? 0 : cap_bits;
}

af_status af_s8_check_opts(const af_sdpa_opts* o, const af_sdpa_shape* s, int with_softcap) {
  af_status st;
  if (s == NULL) return AF_ERR_NULL;
  if (o == NULL) return AF_OK;
  if ((st = af_opts_check_common(o, s, 1)) != AF_OK) return st;
  if (o->alibi_slopes != NULL) return AF_ERR_PARAM; /* int8 takes alibi_s8 */
  if (o->alibi_s8 != NULL && !af_aligned(o->alibi_s8, 4)) return AF_ERR_ALIGN;
  if (af_cap_bits(o) != 0) return AF_ERR_PARAM; /* int8 takes softcap_s8 */
  if (o->softcap_s8 != NULL && !with_softcap) return AF_ERR_PARAM;
  return AF_OK;
}

af_status af_f32_check_opts(const af_sdpa_opts* o, const af_sdpa_shape* s) {
  int32_t n_slopes;
  uint32_t cap_bits;
  af_status st;
  if (s == NULL) return AF_ERR_NULL;
  if (o == NULL) return AF_OK;
  if ((st = af_opts_check_common(o, s, 0)) != AF_OK) return st;
  if (o->alibi_s8 != NULL || o->softcap_s8 != NULL)
    return AF_ERR_PARAM; /* f32 takes alibi_slopes and softcap */
  n_slopes = o->alibi_per_batch ? s->batch * s->num_heads : s->num_heads;
  if (o->alibi_slopes != NULL) {
    uint32_t m = 0;
    if (!af_aligned(o->alibi_slopes, 4)) return AF_ERR_ALIGN;
    /* finite, |slope| <= 2^108: |slope| * (Lq + Lk) < 2^125 = AF_F32_LIMIT */
    if (!af_scan_f32(o->alibi_slopes, (size_t)n_slopes, &m) || m > AF_F32_BITS_2P108)
      return AF_ERR_PARAM;
  }
  /* off (+0), or in (0, AF_F32_LIMIT]: sign bit clear, bits <= the limit's */
  cap_bits = af_cap_bits(o);
  if (cap_bits != 0 && ((cap_bits >> 31) || cap_bits > AF_F32_BITS_LIMIT)) return AF_ERR_PARAM;
  if (o->mask_type == AF_MASK_F32) { /* -inf or finite <= AF_F32_LIMIT; never NaN */
    const float* mf = (const float*)o->mask;
    const size_t n = (size_t)o->mask_shape[0] * o->mask_shape[1] * o->mask_shape[2] *
                     o->mask_shape[3];
    size_t i;
    for (i = 0; i < n; ++i) {
      uint32_t u;
      AF_COPY(&u, mf + i, 4);
      if (u == 0xff800000u) continue;                   /* -inf: hidden */
      if ((u & 0x7fffffffu) >= 0x7f800000u) return AF_ERR_PARAM; /* NaN, +inf */
      if (!(u >> 31) && u > AF_F32_BITS_LIMIT) return AF_ERR_PARAM;
    }
  }
  return AF_OK;
}

af_status af_sdpa_check_opts(const af_sdpa_opts* o, const af_sdpa_shape* s, int int8) {
  af_status st;
  if (!int8) return af_f32_check_opts(o, s);
  if ((st = af_s8_check_opts(o, s, 1)) != AF_OK) return st;
  return o != NULL && o->softcap_s8 != NULL ? af_softcap_s8_check(o->softcap_s8, s->num_heads)
                                            : AF_OK;
}

void af_row_keys(const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t i, int32_t valid,
                 int32_t* first, int32_t* last) {
  const int32_t dlen = AF_DIAG_LEN(s, o, valid);
  int32_t f = 0, l = af_last_key(s, i, dlen, valid);
  if (o != NULL) {
    /* |d| <= 2 * AF_MAX_DIM (a checked shape), so d, l - d and the bounds
     * below are int32 however large the window: wl < d and wr < l - d are
     * the comparisons d - wl > 0 and d + wr < l without their overflow. */
    const int32_t d = i + dlen - s->q_len, wl = o->window_left, wr = o->window_right;
    if (wl >= 0 && wl < d) f = d - wl > s->kv_len ? s->kv_len : d - wl;
    if (wr >= 0 && wr < l - d) l = d + wr < -1 ? -1 : d + wr;
  }
  *first = f;
  *last = l;
}

void af_row_bias_init(af_row_bias* rb, const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t b,
                      int32_t h, int32_t i, int32_t valid) {
  uint32_t cap_bits = 0;
  af_row_bias_reset(rb, 0, i + AF_DIAG_LEN(s, o, valid) - s->q_len);
  if (o == NULL) return;
  AF_COPY(&cap_bits, &o->softcap, 4);
  if ((cap_bits & 0x7fffffffu) != 0) { /* f32 (checked: finite, > 0) */
    rb->kind |= AF_BIAS_SOFTCAP;
    rb->cap = o->softcap;
  } else if (o->softcap_s8 != NULL) {
    rb->kind |= AF_BIAS_SOFTCAP;
    rb->cap_s8 = o->softcap_s8 + 4 * h;
  }
  if (o->mask_type != AF_MASK_NONE) {
    const int32_t* ms = o->mask_shape;
    const size_t s3 = ms[3] == 1 ? 0 : 1;
    const size_t s2 = ms[2] == 1 ? 0 : (size_t)ms[3];
    const size_t s1 = ms[1] == 1 ? 0 : (size_t)ms[2] * ms[3];
    const size_t s0 = ms[0] == 1 ? 0 : (size_t)ms[1] * ms[2] * ms[3];
    const size_t off = (size_t)b * s0 + (size_t)h * s1 + (size_t)i * s2;
    rb->msj = (int32_t)s3;
    /* bool: one byte per element; f32 and s32: four */
    rb->mrow = (const uint8_t*)o->mask + (o->mask_type == AF_MASK_BOOL ? off : 4 * off);
    rb->kind |= o->mask_type == AF_MASK_BOOL  ? AF_BIAS_BOOL
                : o->mask_type == AF_MASK_F32 ? AF_BIAS_F32
                                              : AF_BIAS_S32;
  }
  if (o->alibi_slopes != NULL) {
    rb->kind |= AF_BIAS_ALIBI;
    rb->slope = o->alibi_slopes[(o->alibi_per_batch ? (size_t)b * s->num_heads : 0) + h];
  } else if (o->alibi_s8 != NULL) {
    rb->kind |= AF_BIAS_ALIBI;
    rb->slope_s8 = o->alibi_s8[(o->alibi_per_batch ? (size_t)b * s->num_heads : 0) + h];
    /* slope * (Lq + Lk) + 128 < 2^31 - 1, in 32 bits (Lq + Lk < 2^17) */
    const uint32_t span = (uint32_t)s->q_len + (uint32_t)s->kv_len;
    rb->alibi32 = rb->slope_s8 >= 0 &&
                  (span == 0 || (uint32_t)rb->slope_s8 <= (0x7fffffffu - 129u) / span);
  }
}
