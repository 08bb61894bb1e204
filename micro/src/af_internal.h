/* af_internal.h — helpers shared by the micro library's source files (not a
 * public header). Invariants: callers pass shapes already validated by
 * af_sdpa_check_shape and options validated by af_sdpa_check_opts; a row's
 * visible keys are one index range [first, last] (causal, padding, window)
 * further thinned only by a bool/additive mask, so keys outside the range are
 * never read. */
#ifndef ATTNFLOW_MICRO_INTERNAL_H_
#define ATTNFLOW_MICRO_INTERNAL_H_

#include "attnflow/micro.h"

/* Largest key index row i may see (causal rule on the tensor lengths, then
 * key padding `valid`); negative: the row sees nothing. */
int32_t af_last_key(const af_sdpa_shape* s, int32_t i, int32_t valid);
/* Visible key range of row i: causal, padding `valid` and the window of `o`
 * (NULL: none). *first > *last means an empty row. */
void af_row_keys(const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t i, int32_t valid,
                 int32_t* first, int32_t* last);
/* AF_ERR_PARAM if any kv_lens[b] is outside [0, kv_len]. */
af_status af_check_kv_lens(const int32_t* kv_lens, const af_sdpa_shape* s);
/* mha (af_mha_f32 / af_mha_s8): validates the shape and fills the attention
 * of one sequence (batch 1, H heads of embed / H). */
af_status af_mha_check_shape(const af_mha_shape* s, af_sdpa_shape* per_seq);
/* kv_lens in [0, kv_len] and the options against the whole batch. */
af_status af_mha_check_call(const af_mha_shape* s, const af_sdpa_shape* per_seq,
                            const int32_t* kv_lens, const af_sdpa_opts* o, int int8);
/* Options of sequence b: its slice of the mask (batch extent 1). */
void af_mha_seq_opts(af_sdpa_opts* ob, const af_sdpa_opts* o, int32_t b);
/* 1 if p is aligned to `align` bytes (NULL counts as aligned). */
int af_aligned(const void* p, uintptr_t align);

/* What the per-key work of one query row needs: the row's mask (already
 * offset to its (b, h, i) row; key stride msj 0 or 1), its ALiBi slope and
 * its diagonal d. `kind` is a bit set of AF_BIAS_*; 0 means "no per-key
 * work" and the kernels then take their plain path. */
enum { AF_BIAS_BOOL = 1, AF_BIAS_F32 = 2, AF_BIAS_S32 = 4, AF_BIAS_ALIBI = 8 };
typedef struct {
  int32_t kind;
  const void* mrow;
  int32_t msj;
  int32_t diag;
  float slope;      /* f32 paths */
  int32_t slope_s8; /* int8 path, Q8 raw-score units */
  int32_t alibi32;  /* int8: slope_s8 * (Lq + Lk) + 128 < 2^31, 32-bit ALiBi */
} af_row_bias;

/* Fills rb for row i of head h, batch b (diag = i + Lk - Lq). */
void af_row_bias_init(af_row_bias* rb, const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t b,
                      int32_t h, int32_t i);
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

#endif
