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

void af_mha_seq_opts(af_sdpa_opts* ob, const af_sdpa_opts* o, int32_t b) {
  *ob = *o;
  if (o->mask_type != AF_MASK_NONE && o->mask_shape[0] != 1) {
    const size_t per_b = (size_t)o->mask_shape[1] * o->mask_shape[2] * o->mask_shape[3];
    ob->mask = (const uint8_t*)o->mask + (size_t)b * per_b * (o->mask_type == AF_MASK_BOOL ? 1 : 4);
  }
  ob->mask_shape[0] = 1;
}

int af_aligned(const void* p, uintptr_t align) { return ((uintptr_t)p & (align - 1u)) == 0; }

void af_sdpa_opts_init(af_sdpa_opts* o) {
  if (o == NULL) return;
  o->mask_type = AF_MASK_NONE;
  o->mask = NULL;
  o->mask_shape[0] = o->mask_shape[1] = o->mask_shape[2] = o->mask_shape[3] = 1;
  o->window_left = o->window_right = -1;
  o->alibi_slopes = NULL;
  o->alibi_s8 = NULL;
  o->v_layout = AF_V_ROWS;
}

af_status af_sdpa_check_opts(const af_sdpa_opts* o, const af_sdpa_shape* s, int int8) {
  int32_t d, h;
  if (s == NULL) return AF_ERR_NULL;
  if (o == NULL) return AF_OK;
  if (o->window_left < -1 || o->window_right < -1) return AF_ERR_PARAM;
  if (o->v_layout != AF_V_ROWS && (!int8 || o->v_layout != AF_V_COLS)) return AF_ERR_PARAM;
  if (o->mask_type != AF_MASK_NONE) {
    const int32_t target[4] = {s->batch, s->num_heads, s->q_len, s->kv_len};
    uint64_t n = 1;
    if (o->mask_type != AF_MASK_BOOL &&
        (int8 ? o->mask_type != AF_MASK_S32 : o->mask_type != AF_MASK_F32))
      return AF_ERR_PARAM;
    if (o->mask == NULL) return AF_ERR_NULL;
    if (o->mask_type != AF_MASK_BOOL && !af_aligned(o->mask, 4)) return AF_ERR_ALIGN;
    for (d = 0; d < 4; ++d) {
      if (o->mask_shape[d] != 1 && o->mask_shape[d] != target[d]) return AF_ERR_SHAPE;
      n *= (uint64_t)(o->mask_shape[d] > 0 ? o->mask_shape[d] : 1);
    }
    if (n >= ((uint64_t)1 << 31)) return AF_ERR_SHAPE;
  } else if (o->mask != NULL) {
    return AF_ERR_PARAM; /* a mask without a type is a caller bug */
  }
  if (int8) {
    if (o->alibi_slopes != NULL) return AF_ERR_PARAM; /* int8 takes alibi_s8 */
    if (o->alibi_s8 != NULL && !af_aligned(o->alibi_s8, 4)) return AF_ERR_ALIGN;
  } else {
    if (o->alibi_s8 != NULL) return AF_ERR_PARAM; /* f32 takes alibi_slopes */
    if (o->alibi_slopes != NULL) {
      if (!af_aligned(o->alibi_slopes, 4)) return AF_ERR_ALIGN;
      for (h = 0; h < s->num_heads; ++h) {
        const float a = o->alibi_slopes[h];
        if (!(a >= -3.0e38f && a <= 3.0e38f)) return AF_ERR_PARAM; /* NaN, inf */
      }
    }
  }
  return AF_OK;
}

void af_row_keys(const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t i, int32_t valid,
                 int32_t* first, int32_t* last) {
  int32_t f = 0, l = af_last_key(s, i, valid);
  if (o != NULL && (o->window_left >= 0 || o->window_right >= 0)) {
    const int64_t d = (int64_t)i + s->kv_len - s->q_len;
    if (o->window_left >= 0 && d - o->window_left > f)
      f = (int32_t)(d - o->window_left > s->kv_len ? s->kv_len : d - o->window_left);
    if (o->window_right >= 0 && d + o->window_right < l)
      l = (int32_t)(d + o->window_right < -1 ? -1 : d + o->window_right);
  }
  *first = f;
  *last = l;
}

void af_row_bias_init(af_row_bias* rb, const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t b,
                      int32_t h, int32_t i) {
  rb->kind = 0;
  rb->mrow = NULL;
  rb->msj = 0;
  rb->diag = i + s->kv_len - s->q_len;
  rb->slope = 0.f;
  rb->slope_s8 = 0;
  rb->alibi32 = 0;
  if (o == NULL) return;
  if (o->mask_type != AF_MASK_NONE) {
    const int32_t* ms = o->mask_shape;
    const size_t s3 = ms[3] == 1 ? 0 : 1;
    const size_t s2 = ms[2] == 1 ? 0 : (size_t)ms[3];
    const size_t s1 = ms[1] == 1 ? 0 : (size_t)ms[2] * ms[3];
    const size_t s0 = ms[0] == 1 ? 0 : (size_t)ms[1] * ms[2] * ms[3];
    const size_t off = (size_t)b * s0 + (size_t)h * s1 + (size_t)i * s2;
    rb->msj = (int32_t)s3;
    switch (o->mask_type) {
      case AF_MASK_BOOL:
        rb->kind |= AF_BIAS_BOOL;
        rb->mrow = (const uint8_t*)o->mask + off;
        break;
      case AF_MASK_F32:
        rb->kind |= AF_BIAS_F32;
        rb->mrow = (const float*)o->mask + off;
        break;
      default:
        rb->kind |= AF_BIAS_S32;
        rb->mrow = (const int32_t*)o->mask + off;
        break;
    }
  }
  if (o->alibi_slopes != NULL) {
    rb->kind |= AF_BIAS_ALIBI;
    rb->slope = o->alibi_slopes[h];
  } else if (o->alibi_s8 != NULL) {
    rb->kind |= AF_BIAS_ALIBI;
    rb->slope_s8 = o->alibi_s8[h];
    rb->alibi32 = rb->slope_s8 >= 0 &&
                  (int64_t)rb->slope_s8 * ((int64_t)s->q_len + s->kv_len) + 128 < 2147483647;
  }
}
