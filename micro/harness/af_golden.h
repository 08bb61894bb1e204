/* af_golden.h — the on-device form of one golden case (written by
 * `attnflow export-c`, docs/edge.md) for the harness golden_main.c.
 *
 * Invariants:
 *  - Every tensor of a case lives in one little-endian data blob: either
 *    embedded in flash (`blob`, 4-byte aligned words) or in a file read at
 *    run time over semihosting (`data_file`, for cases larger than a flash
 *    map). A tensor is an af_gref: byte offset (4-byte aligned) and element
 *    count; AF_G_ABSENT marks a tensor the case does not have.
 *  - Arrays are row-major in the golden-format layout
 *    (docs/golden-format.md); export-c checked every count against the shape
 *    and every value for NaN before writing.
 *  - Expected stages are the float64 reference rounded once to f32; the
 *    int8 expectations (`s8`) are the float64 reference on the DEQUANTISED
 *    int8 inputs (out8 rounded to output units).
 *  - pool_bytes is what the harness needs for this case's largest chunk
 *    (one batch element and kv head at a time); the harness checks its own
 *    use against it. */
#ifndef ATTNFLOW_MICRO_GOLDEN_H_
#define ATTNFLOW_MICRO_GOLDEN_H_

#include <stdint.h>

#include "attnflow/micro.h"

#define AF_G_ABSENT 0xffffffffu
typedef struct {
  uint32_t off;   /* byte offset in the blob, or AF_G_ABSENT */
  uint32_t count; /* elements */
} af_gref;

enum { AF_G_SDPA = 0, AF_G_MHA = 1 };

/* Expected stages of one path (f32 values). */
typedef struct {
  af_gref scores, scaled, masked, weights, lse, out;
} af_g_stages;

typedef struct {
  const char* name;
  int32_t kind; /* AF_G_SDPA or AF_G_MHA */
  const uint32_t* blob; /* embedded data, or NULL */
  const char* data_file; /* data read over semihosting when blob is NULL */
  uint32_t data_bytes, pool_bytes;
  float scale, atol, rtol;
  /* Masking (both kinds): mask_type AF_MASK_NONE, AF_MASK_BOOL (uint8) or
   * AF_MASK_F32 (float), broadcast extents [B|1, H|1, Lq|1, Lk|1]; windows;
   * ALiBi slopes [H] or, alibi_per_batch, [B,H] (f32); the diagonal
   * alignment (af_kv_align); softcap (0 = off; the int8 path prepares its
   * constants with af_s8_softcap_prepare at start-up). */
  af_mask_type mask_type;
  int32_t mask_shape[4];
  int32_t window_left, window_right;
  af_gref mask, alibi, kv_lens;
  af_kv_align kv_align;
  int32_t alibi_per_batch;
  float softcap;
  /* kind sdpa */
  af_sdpa_shape shape;
  af_gref q, k, v;
  af_g_stages f32;
  /* Per-element rounding bounds of the f32 stages (`attnflow export-c`
   * computes them with af_bound_row / af_bound_linear at u = 2^-24,
   * docs/golden-format.md "Tolerances"): |got - expected| <= bound. An
   * absent bound means the stage is held to atol/rtol. */
  af_g_stages f32_tol;
  /* int8 path (sdpa): per-tensor scales, inputs, expected stages (f32 real
   * units for scores/masked/weights) and out8 (int8, output units). */
  int32_t has_s8;
  float sq, sk, sv, so;
  int32_t bound_lsb;
  af_gref q8, k8, v8, out8;
  af_g_stages s8;
  /* kind mha */
  af_mha_shape mshape;
  af_gref x_q, x_k, x_v, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o;
  af_gref mq, mk, mv, heads_out, concat; /* expected mha stages (f32) */
  af_gref mq_tol, mk_tol, mv_tol, heads_out_tol, concat_tol; /* their bounds */
  /* int8 path (mha, has_s8): inputs quantised per tensor, weights per output
   * row with one multiplier per row (int32 pairs {mult, shift}), biases int32
   * in accumulator units, the attention's scales (sq, sk, sv, so above: the
   * projected q, k, v and heads_out), and the expected int8 stages: the
   * golden float stages quantised once at the same scales (q, k, v,
   * heads_out, out), compared within bound_lsb (docs/edge.md). */
  af_gref x_q8, x_k8, x_v8, w_q8, w_k8, w_v8, w_o8, b_q32, b_k32, b_v32, b_o32;
  af_gref m_q, m_k, m_v, m_o;
  af_gref mq8, mk8, mv8, heads_out8, out8m;
  float s_out;
} af_golden_case;

#endif
