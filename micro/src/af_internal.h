/* af_internal.h — helpers shared by the micro library's source files (not a
 * public header). Invariant: callers pass shapes already validated by
 * af_sdpa_check_shape. */
#ifndef ATTNFLOW_MICRO_INTERNAL_H_
#define ATTNFLOW_MICRO_INTERNAL_H_

#include "attnflow/micro.h"

/* Largest key index row i may see (causal rule on the tensor lengths, then
 * key padding `valid`); negative: the row sees nothing. */
int32_t af_last_key(const af_sdpa_shape* s, int32_t i, int32_t valid);
/* AF_ERR_PARAM if any kv_lens[b] is outside [0, kv_len]. */
af_status af_check_kv_lens(const int32_t* kv_lens, const af_sdpa_shape* s);

#define AF_ALIGN4(n) (((n) + 3u) & ~(size_t)3u)

/* The kernels' small helpers: inlined always (GCC), so a compile-time head
 * dimension reaches them as an immediate. */
#if defined(__GNUC__)
#define AF_INLINE static inline __attribute__((always_inline))
#else
#define AF_INLINE static inline
#endif

#endif
