/* af_golden.h — the in-flash form of one golden case (written by
 * `attnflow export-c`, docs/edge.md) for the on-device harness
 * golden_main.c. Invariant: arrays are row-major in the golden-format layout
 * (docs/golden-format.md); kv_lens is NULL when the case has none; the int8
 * arrays are the f32 inputs quantised per tensor with the scales given, and
 * out8 is the float64 reference on the dequantised inputs, / so, rounded. */
#ifndef ATTNFLOW_MICRO_GOLDEN_H_
#define ATTNFLOW_MICRO_GOLDEN_H_

#include <stdint.h>

#include "attnflow/micro.h"

/* Largest |out8 - expected| allowed, in output LSB (derived in docs/edge.md). */
#define AF_S8_BOUND_LSB 2

typedef struct {
  const char* name;
  af_sdpa_shape shape;
  float scale, atol, rtol;
  const float *q, *k, *v;
  const int32_t* kv_lens;
  const float *out, *lse;
  const int8_t *q8, *k8, *v8;
  float sq, sk, sv, so;
  const int8_t* out8;
  int32_t bound_lsb;
} af_golden_sdpa;

/* kind = mha: inputs, weights (biases NULL when absent) and the stages the
 * micro MHA produces, all f32 (float64 reference rounded once). */
typedef struct {
  const char* name;
  af_mha_shape shape;
  float scale, atol, rtol;
  const float *x_q, *x_k, *x_v;
  af_mha_weights_f32 w;
  const int32_t* kv_lens;
  const float *q, *k, *v, *lse, *heads_out, *concat, *out;
} af_golden_mha;

#endif
