/* af_internal.h — helpers shared by the micro library's source files (not a
 * public header). Invariants: callers pass shapes already validated by
 * af_sdpa_check_shape and options validated by af_sdpa_check_opts; a row's
 * visible keys are one index range [first, last] (causal, padding, window)
 * further thinned only by a bool/additive mask, so keys outside the range are
 * never read. */
#ifndef ATTNFLOW_MICRO_INTERNAL_H_
#define ATTNFLOW_MICRO_INTERNAL_H_

#include "attnflow/micro.h"

/* The key length that places row i's bottom-right diagonal: kv_len, or
 * `valid` (the batch's kv_lens[b]) with AF_KV_ALIGN_PER_SEQUENCE. */
#define AF_DIAG_LEN(s, o, valid) \
  ((o) != NULL && (o)->kv_align == AF_KV_ALIGN_PER_SEQUENCE ? (valid) : (s)->kv_len)
/* Visible key range of row i: causal, padding `valid` and the window of `o`
 * (NULL: none), on the diagonal AF_DIAG_LEN. *first > *last means an empty
 * row. */
void af_row_keys(const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t i, int32_t valid,
                 int32_t* first, int32_t* last);
/* AF_ERR_PARAM if any kv_lens[b] is outside [0, kv_len]. */
af_status af_check_kv_lens(const int32_t* kv_lens, const af_sdpa_shape* s);
/* af_sdpa_check_opts of each path, apart so that an application links only
 * its path's checks: af_s8_check_opts refuses softcap_s8 unless
 * with_softcap (the caller then checks the constants with
 * af_softcap_s8_check). */
af_status af_f32_check_opts(const af_sdpa_opts* o, const af_sdpa_shape* s);
af_status af_s8_check_opts(const af_sdpa_opts* o, const af_sdpa_shape* s, int with_softcap);
/* mha (af_mha_f32 / af_mha_s8): validates the shape and fills the attention
 * of one sequence (batch 1, H heads of embed / H). */
af_status af_mha_check_shape(const af_mha_shape* s, af_sdpa_shape* per_seq);
/* kv_lens in [0, kv_len] and the options against the whole batch. */
af_status af_mha_check_call(const af_mha_shape* s, const af_sdpa_shape* per_seq,
                            const int32_t* kv_lens, const af_sdpa_opts* o, int int8);
/* Options of sequence b: its slice of the mask (batch extent 1) and of
 * [B, H] ALiBi slopes. */
void af_mha_seq_opts(af_sdpa_opts* ob, const af_sdpa_opts* o, int32_t b, int32_t num_heads);
/* KV cache rings (af_kv_cache, af_kv_cache_s8): AF_ERR_SHAPE unless every
 * extent is in [1, AF_MAX_DIM], capacity <= max_capacity and
 * Hkv * capacity * max(D, Dv) < 2^31; AF_ERR_PARAM unless window is in
 * [0, capacity], length >= 0 and (window 0) length <= capacity. */
af_status af_kv_check(int32_t num_kv_heads, int32_t head_dim, int32_t v_dim, int32_t capacity,
                      int32_t max_capacity, int32_t window, int32_t length);
/* Fills a checked cache of either element type (af_kv_cache_init / _s8). */
#define AF_KV_CACHE_FILL(c, k_storage, v_storage, hkv, d, dv, cap, win) \
  do {                                                                 \
    (c)->k = (k_storage);                                              \
    (c)->v = (v_storage);                                              \
    (c)->num_kv_heads = (hkv);                                         \
    (c)->head_dim = (d);                                               \
    (c)->v_dim = (dv);                                                 \
    (c)->capacity = (cap);                                             \
    (c)->window = (win);                                               \
    (c)->length = 0;                                                   \
  } while (0)
/* Positions a decode step sees: [*first, *first + *n), the last `window`
 * of `length` (all with window 0). */
void af_kv_visible(int32_t length, int32_t window, int32_t* first, int32_t* n);
/* Element-wise ops over n elements: AF_ERR_NULL if a, b or c is NULL,
 * AF_ERR_ALIGN unless each is aligned to `align`, AF_ERR_SHAPE if n < 0
 * (an op of fewer arrays passes one again). */
af_status af_vec_check(int32_t n, uintptr_t align, const void* a, const void* b, const void* c);
/* af_rope_f32 / af_rope_s8: heads x head_dim (even) within the limits, a
 * known layout. */
af_status af_rope_check(int32_t num_heads, int32_t head_dim, af_rope_layout layout);
/* The one writer of the RoPE tables of af_rope_table_f32 (cos_t/sin_t
 * non-NULL: f32) and af_rope_table_s8 (cos_t/sin_t NULL: Q15 into
 * cos_q15/sin_q15), in af_nn_f32.c: AF_ERR_NULL unless both tables of the
 * kind are given, AF_ERR_SHAPE unless head_dim is even within the limits
 * and pos >= 0, AF_ERR_PARAM unless theta is in (1, 1e300). */
af_status af_rope_table(float* cos_t, float* sin_t, int16_t* cos_q15, int16_t* sin_q15,
                        int32_t pos, int32_t head_dim, double theta);
/* af_s8_softcap_prepare's constants of num_heads heads: AF_ERR_ALIGN
 * unless 4-byte aligned, AF_ERR_PARAM unless every multiplier is positive
 * with a shift in [-31, 30]. */
af_status af_softcap_s8_check(const int32_t* c, int32_t num_heads);
/* 1 if p is aligned to `align` bytes (NULL counts as aligned). */
int af_aligned(const void* p, uintptr_t align);

/* ------------------------------------------------------- misuse checks --- */
/* A byte range [p, p + n) of one argument (p NULL or n 0: none). */
typedef struct {
  const void* p;
  size_t n;
} af_span;
/* 1 if the two ranges share a byte (address arithmetic on uintptr_t, so
 * unrelated arrays compare without undefined behaviour). */
int af_overlap(af_span a, af_span b);
/* AF_ERR_ALIAS if an output range overlaps another output or an input. */
af_status af_alias_check(const af_span* outs, int32_t n_out, const af_span* ins, int32_t n_in);
/* In-place element-wise ops: AF_ERR_ALIAS if y and x overlap without being
 * the same array (a shifted view would read what it already wrote). */
af_status af_same_or_apart(const void* y, const void* x, size_t bytes);
/* The input ranges of options o for shape s (mask, ALiBi slopes of either
 * path, softcap constants): writes up to 4 spans, returns how many. */
int32_t af_opts_spans(const af_sdpa_opts* o, const af_sdpa_shape* s, af_span* spans);
/* Scans n floats read as bits (integer only): *max_abs raised to the
 * largest |x| bit pattern (non-negative floats order as their bits); returns
 * 0 if that maximum is a NaN or inf (this or an earlier scan), else 1. */
int af_scan_f32(const float* x, size_t n, uint32_t* max_abs);

/* What the per-key work of one query row needs: the row's mask (already
 * offset to its (b, h, i) row; key stride msj 0 or 1), its ALiBi slope and
 * its diagonal d. `kind` is a bit set of AF_BIAS_*; 0 means "no per-key
 * work" and the kernels then take their plain path. */
enum {
  AF_BIAS_BOOL = 1,
  AF_BIAS_F32 = 2,
  AF_BIAS_S32 = 4,
  AF_BIAS_ALIBI = 8,
  AF_BIAS_SOFTCAP = 16
};
typedef struct {
  int32_t kind;
  const void* mrow;
  int32_t msj;
  int32_t diag;
  float slope;      /* f32 paths */
  int32_t slope_s8; /* int8 path, Q8 raw-score units */
  int32_t alibi32;  /* int8: slope_s8 * (Lq + Lk) + 128 < 2^31, 32-bit ALiBi */
  float cap;        /* f32 softcap (AF_BIAS_SOFTCAP) */
  const int32_t* cap_s8; /* int8 softcap: {in.mult, in.shift, out.mult, out.shift} */
  /* int8 softcap of a tile of raw scores (set with cap_s8 by the entry
   * points that link the softcap; never called through NULL: without it
   * af_s8_check_opts refuses softcap_s8). */
  void (*cap_tile)(int32_t* x, int32_t t_n, const int32_t* c);
} af_row_bias;

/* Fills rb for row i of head h, batch b of valid keys `valid` (diag =
 * i + AF_DIAG_LEN - Lq). */
void af_row_bias_init(af_row_bias* rb, const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t b,
                      int32_t h, int32_t i, int32_t valid);
/* The ALiBi-only bias of a decode step over `length` positions (diag
 * length - 1, no mask, slopes 0, no softcap: the caller sets its path's
 * slope, or its kind and cap). */
void af_row_bias_decode(af_row_bias* rb, int32_t length);
/* |d - j| for the ALiBi distance. */
#define AF_ABS_DIST(d, j) ((d) >= (j) ? (d) - (j) : (j) - (d))

#define AF_ALIGN4(n) (((n) + 3u) & ~(size_t)3u)

/* A small fixed-size copy (a 4-byte load or a float's bits) that stays one
 * instruction: GCC/clang's builtin, which -ffreestanding / -fno-builtin do
 * not turn into a call to the C library's memcpy. */
#if defined(__GNUC__)
#define AF_COPY(d, s, n) __builtin_memcpy((d), (s), (n))
#else
#include <string.h>
#define AF_COPY(d, s, n) memcpy((d), (s), (n))
#endif

/* The kernels' small helpers: inlined always (GCC), so a compile-time head
 * dimension reaches them as an immediate. */
#if defined(__GNUC__)
#define AF_INLINE static inline __attribute__((always_inline))
#else
#define AF_INLINE static inline
#endif

/* The body of the two-row x four-key score kernels (af_qk2x4_f32,
 * af_qk2x4_s8_c), written once so both keep one order: s0[j] / s1[j] =
 * q . k_j / (q + D) . k_j for the keys k_j = k + j * D, j = 0..3, with
 * accumulators of type T (the q and k values are read as T too) from 0;
 * MAC(x, kj, acc) adds x * kj to acc. Per d the 8 MACs go a0..a3, b0..b3,
 * the d in order, two per iteration and an odd last one alone. */
#define AF_QK2X4_STEP(T, MAC, o)                                                   \
  {                                                                               \
    const T x = q[o], y = q[D + (o)];                                             \
    const T k0 = k[o], k1 = k[D + (o)], k2 = k[2 * D + (o)], k3 = k[3 * D + (o)]; \
    MAC(x, k0, a0) MAC(x, k1, a1) MAC(x, k2, a2) MAC(x, k3, a3)                   \
    MAC(y, k0, b0) MAC(y, k1, b1) MAC(y, k2, b2) MAC(y, k3, b3)                   \
  }
#define AF_QK2X4_BODY(T, MAC)                                         \
  T a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0; \
  int32_t d;                                                         \
  for (d = 0; d + 2 <= D; d += 2, q += 2, k += 2) {                  \
    AF_QK2X4_STEP(T, MAC, 0)                                         \
    AF_QK2X4_STEP(T, MAC, 1)                                         \
  }                                                                  \
  if (d < D) AF_QK2X4_STEP(T, MAC, 0)                                \
  s0[0] = a0;                                                        \
  s0[1] = a1;                                                        \
  s0[2] = a2;                                                        \
  s0[3] = a3;                                                        \
  s1[0] = b0;                                                        \
  s1[1] = b1;                                                        \
  s1[2] = b2;                                                        \
  s1[3] = b3;

/* The body of the two-row x four-value-row kernels (af_pv2x4_f32,
 * af_pv2x4_s8_c): the weights p[0..3] (row acc) and r[0..3] (row acc + Dv)
 * held as T, STEP(o) the update of value dimension d + o; two d per
 * iteration and an odd last one alone. */
#define AF_PV2X4_BODY(T, STEP)                                \
  const T p0 = p[0], p1 = p[1], p2 = p[2], p3 = p[3];         \
  const T r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];         \
  int32_t d;                                                  \
  for (d = 0; d + 2 <= Dv; d += 2, v += 2, acc += 2) {        \
    STEP(0)                                                   \
    STEP(1)                                                   \
  }                                                           \
  if (d < Dv) STEP(0)

/* Query rows i and, when `two`, i + 1 of head h, batch b in the two-row
 * kernels: their visible keys [*f0, *l0] and [*f1, *l1] (row i + 1's empty
 * unless two); with options, rb[0..1] their biases and *rb0 / *rb1
 * pointing at them when the rows have a bias, else NULL (the int8 caller
 * then links its softcap tile into rb). */
AF_INLINE void af_pair_rows(const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t b, int32_t h,
                            int32_t i, int32_t two, int32_t valid, int32_t* f0, int32_t* l0, int32_t* f1, int32_t* l1, af_row_bias* rb,
                            const af_row_bias** rb0, const af_row_bias** rb1) {
  *f1 = 0;
  *l1 = -1;
  *rb0 = *rb1 = NULL;
  af_row_keys(s, o, i, valid, f0, l0);
  if (two) af_row_keys(s, o, i + 1, valid, f1, l1);
  if (o != NULL) {
    af_row_bias_init(&rb[0], s, o, b, h, i, valid);
    af_row_bias_init(&rb[1], s, o, b, h, two ? i + 1 : i, valid);
    if (rb[0].kind) {
      *rb0 = &rb[0];
      *rb1 = &rb[1];
    }
  }
}

/* The key segments of query rows i (keys [f0, l0]) and, when `two`, i + 1
 * (keys [f1, l1]) in the two-row kernels: [*cf, *cl] the keys both rows see
 * (*cf > *cl: none), then the returned number of single-row segments
 * [from[x], to[x]] of row rowsel[x] (0: row i, 1: row i + 1; at most 4, a
 * segment may be empty), each row's segments in key order. */
AF_INLINE int32_t af_pair_segments(int32_t f0, int32_t l0, int32_t f1, int32_t l1, int32_t two,
                                   int32_t* cf, int32_t* cl, int32_t* from, int32_t* to,
                                   int32_t* rowsel) {
  const int32_t jf = f0 > f1 ? f0 : f1, jl = l0 < l1 ? l0 : l1;
  int32_t n = 0;
  *cf = 1;
  *cl = 0;
  if (two && jf <= jl) {
    *cf = jf;
    *cl = jl;
    from[n] = f0, to[n] = jf - 1, rowsel[n++] = 0;
    from[n] = jl + 1, to[n] = l0, rowsel[n++] = 0;
    from[n] = f1, to[n] = jf - 1, rowsel[n++] = 1;
    from[n] = jl + 1, to[n] = l1, rowsel[n++] = 1;
    return n;
  }
  from[n] = f0, to[n] = l0, rowsel[n++] = 0;
  if (two) from[n] = f1, to[n] = l1, rowsel[n++] = 1;
  return n;
}

/* Bit patterns of the f32 range bounds (positive floats order as their
 * bits): AF_F32_LIMIT = 2^125, the slope bound 2^108, the cache's K and V
 * bounds 2^40 and 2^100. */
#define AF_F32_BITS_LIMIT 0x7e000000u
#define AF_F32_BITS_2P108 0x75800000u
#define AF_F32_BITS_CACHE_K 0x53800000u
#define AF_F32_BITS_CACHE_V 0x71800000u

/* 1 unless x is NaN or +-inf, read from its bits: no float compare, so an
 * integer-only path that shares a check links no soft-float routine. */
AF_INLINE int af_finite_f32(float x) {
  uint32_t u;
  AF_COPY(&u, &x, 4);
  return (u & 0x7f800000u) != 0x7f800000u;
}

#endif
