/* af_nn_f32.c — the f32 building blocks of a transformer block for the micro
 * library (include/attnflow/micro.h): LayerNorm, RMSNorm, linear layer,
 * ReLU, residual add. No heap; fp32 accumulation in index order; outputs may
 * alias inputs only where stated. */
#include <math.h>

#include "af_internal.h"

af_status af_layernorm_f32(float* y, const float* x, const float* w, const float* b, int32_t n,
                           float eps) {
  float mean = 0.f, var = 0.f, inv;
  int32_t i;
  if (y == NULL || x == NULL) return AF_ERR_NULL;
  if (!af_aligned(y, 4) || !af_aligned(x, 4) || !af_aligned(w, 4) || !af_aligned(b, 4))
    return AF_ERR_ALIGN;
  if (n < 1) return AF_ERR_SHAPE;
  if (!(eps > 0.f)) return AF_ERR_PARAM;
  for (i = 0; i < n; ++i) mean += x[i];
  mean /= (float)n;
  for (i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= (float)n;
  inv = 1.f / sqrtf(var + eps);
  for (i = 0; i < n; ++i) {
    const float t = (x[i] - mean) * inv;
    y[i] = t * (w ? w[i] : 1.f) + (b ? b[i] : 0.f);
  }
  return AF_OK;
}

af_status af_rmsnorm_f32(float* y, const float* x, const float* w, int32_t n, float eps) {
  float ss = 0.f, inv;
  int32_t i;
  if (y == NULL || x == NULL) return AF_ERR_NULL;
  if (!af_aligned(y, 4) || !af_aligned(x, 4) || !af_aligned(w, 4)) return AF_ERR_ALIGN;
  if (n < 1) return AF_ERR_SHAPE;
  if (!(eps > 0.f)) return AF_ERR_PARAM;
  for (i = 0; i < n; ++i) ss += x[i] * x[i];
  inv = 1.f / sqrtf(ss / (float)n + eps);
  for (i = 0; i < n; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.f);
  return AF_OK;
}

af_status af_linear_f32(float* y, const float* x, const float* w, const float* b, int32_t in,
                        int32_t out) {
  int32_t o, i;
  if (y == NULL || x == NULL || w == NULL) return AF_ERR_NULL;
  if (!af_aligned(y, 4) || !af_aligned(x, 4) || !af_aligned(w, 4) || !af_aligned(b, 4))
    return AF_ERR_ALIGN;
  if (in < 1 || out < 1 || (uint64_t)in * (uint64_t)out >= ((uint64_t)1 << 31)) return AF_ERR_SHAPE;
  if (y == x) return AF_ERR_PARAM; /* y must not alias x */
  for (o = 0; o < out; ++o) {
    const float* wr = w + (size_t)o * in;
    float acc = 0.f;
    for (i = 0; i < in; ++i) acc += wr[i] * x[i];
    y[o] = acc + (b ? b[o] : 0.f);
  }
  return AF_OK;
}

af_status af_relu_f32(float* x, int32_t n) {
  int32_t i;
  if (x == NULL) return AF_ERR_NULL;
  if (!af_aligned(x, 4)) return AF_ERR_ALIGN;
  if (n < 0) return AF_ERR_SHAPE;
  for (i = 0; i < n; ++i)
    if (x[i] < 0.f) x[i] = 0.f;
  return AF_OK;
}

af_status af_add_f32(float* y, const float* x, int32_t n) {
  int32_t i;
  if (y == NULL || x == NULL) return AF_ERR_NULL;
  if (!af_aligned(y, 4) || !af_aligned(x, 4)) return AF_ERR_ALIGN;
  if (n < 0) return AF_ERR_SHAPE;
  for (i = 0; i < n; ++i) y[i] += x[i];
  return AF_OK;
}
