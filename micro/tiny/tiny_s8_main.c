/* tiny_s8_main.c — the int8 tiny decoder on the device (docs/edge.md "tiny
 * model, int8"): integer arithmetic only (int8 weights and activations,
 * int32 residual stream at 2^-12, integer LayerNorm with a floor isqrt,
 * fixed-point multipliers, af_sdpa_s8 per head over an int8 KV cache),
 * weights and integer parameters from tiny_s8_weights.h (written by
 * tools/edge/tiny/int8_model.py, which also runs a NumPy model of exactly
 * this arithmetic) — built from the library's af_linear_s8,
 * af_linear_s8_residual, af_layernorm_s8, af_relu_s8 and af_sdpa_s8. Feeds the prompt, greedily generates the tokens, and
 * requires every step's int32 logits to equal the NumPy model's bit for bit.
 * Returns the number of mismatching steps (0 = identical). No heap, no float. */
#include <stdio.h>

#include "attnflow/micro.h"
#include "tiny_harness.h"

typedef struct {
  const int32_t *ln1_g, *ln1_b, *ln2_g, *ln2_b;
  const int8_t *w[6];
  const int32_t* b[6];
  const af_qmult* m[6];
  af_qmult em, om;
} s8_layer;
enum { WQ, WK, WV, WO, F1, F2 };

#include "tiny_s8_weights.h"

#define D TINY_D
#define DH (TINY_D / TINY_H)

static int8_t kc[TINY_LAYERS][TINY_H][TINY_T * DH], vc[TINY_LAYERS][TINY_H][TINY_T * DH];
static int32_t r[D], logits[TINY_V];
static int8_t h8[D], q8[D], k8[D], v8[D], a8[D], f8[TINY_FF];
static uint32_t arena[256];

static int step(int tok, int pos) {
  int l, i, hh;
  for (i = 0; i < D; ++i)
    r[i] = af_s8_mul_by_qmult(s8_tok[tok * D + i], s8_m_tok) +
           af_s8_mul_by_qmult(s8_pos[pos * D + i], s8_m_pos);
  for (l = 0; l < TINY_LAYERS; ++l) {
    const s8_layer* L = &s8_layers[l];
    af_s8_params p;
    if (af_layernorm_s8(h8, r, L->ln1_g, L->ln1_b, D, S8_EPS) ||
        af_linear_s8(q8, h8, L->w[WQ], L->b[WQ], L->m[WQ], D, D) ||
        af_linear_s8(k8, h8, L->w[WK], L->b[WK], L->m[WK], D, D) ||
        af_linear_s8(v8, h8, L->w[WV], L->b[WV], L->m[WV], D, D))
      return 1;
    p.num_scale_heads = 1;
    p.exp_mult[0] = L->em;
    p.out_mult[0] = L->om;
    for (hh = 0; hh < TINY_H; ++hh) {
      af_sdpa_shape s = {1, 1, 1, 1, pos + 1, DH, DH, AF_CAUSAL_NONE};
      for (i = 0; i < DH; ++i) {
        kc[l][hh][pos * DH + i] = k8[hh * DH + i];
        vc[l][hh][pos * DH + i] = v8[hh * DH + i];
      }
      if (af_sdpa_s8(a8 + hh * DH, q8 + hh * DH, kc[l][hh], vc[l][hh], 0, &p, &s, arena,
                     sizeof arena) != AF_OK)
        return 1;
    }
    if (af_linear_s8_residual(r, a8, L->w[WO], L->b[WO], L->m[WO], D, D) ||
        af_layernorm_s8(h8, r, L->ln2_g, L->ln2_b, D, S8_EPS) ||
        af_linear_s8(f8, h8, L->w[F1], L->b[F1], L->m[F1], D, TINY_FF))
      return 1;
    af_relu_s8(f8, TINY_FF);
    if (af_linear_s8_residual(r, f8, L->w[F2], L->b[F2], L->m[F2], TINY_FF, D)) return 1;
  }
  if (af_layernorm_s8(h8, r, s8_lnf_g, s8_lnf_b, D, S8_EPS)) return 1;
  tiny_tied_head_s8(logits, s8_tok, h8, TINY_V, D);
  return 0;
}

int main(void) {
  static const tiny_check ref = {"TINY int8", tiny_pick_s32, TINY_V, NULL, logits, s8_expected_ids,
                                  s8_expected_logits, NULL, NULL};
  return tiny_generate(step, tiny_prompt, TINY_PROMPT_LEN, TINY_GEN, &ref);
}
