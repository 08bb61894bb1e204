/* af_common.c — shape validation and status names of the micro library
 * (include/attnflow/micro.h). C99, no heap, no I/O. Invariant: a shape that
 * passes af_sdpa_check_shape has every element count of q/k/v/out below 2^31,
 * so 32-bit index arithmetic in the kernels cannot overflow. */
#include "af_internal.h"

const char* af_status_name(af_status s) {
  switch (s) {
    case AF_OK: return "ok";
    case AF_ERR_NULL: return "null pointer";
    case AF_ERR_SHAPE: return "invalid shape";
    case AF_ERR_ARENA: return "arena too small";
    case AF_ERR_PARAM: return "invalid parameter";
    case AF_ERR_FULL: return "kv cache full";
  }
  return "unknown status";
}

static int af_fits(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return a * b * c * d < ((uint64_t)1 << 31);
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
  if (!af_fits((uint64_t)s->batch, (uint64_t)s->num_heads, (uint64_t)s->q_len,
               (uint64_t)(s->head_dim > s->v_dim ? s->head_dim : s->v_dim)) ||
      !af_fits((uint64_t)s->batch, (uint64_t)s->num_kv_heads, (uint64_t)s->kv_len,
               (uint64_t)(s->head_dim > s->v_dim ? s->head_dim : s->v_dim)))
    return AF_ERR_SHAPE;
  return AF_OK;
}

int32_t af_last_key(const af_sdpa_shape* s, int32_t i, int32_t valid) {
  int32_t last = s->kv_len - 1;
  if (s->causal == AF_CAUSAL_TOP_LEFT) {
    if (i < last) last = i;
  } else if (s->causal == AF_CAUSAL_BOTTOM_RIGHT) {
    const int32_t d = i + (s->kv_len - s->q_len);
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
