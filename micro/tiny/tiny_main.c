/* tiny_main.c — the tiny char-level decoder of docs/edge.md run on the device
 * in f32 (weights compiled into flash from tiny_weights.h, written by
 * tools/edge/tiny/export_header.py): feeds the prompt, then greedily
 * generates TINY_GEN tokens one position at a time over per-layer
 * ring-buffer KV caches (af_kv_cache_append / af_decode_f32), and compares
 * every token with the PyTorch tokens committed in
 * tests/data/edge/tiny_expected.json. Returns the number of mismatching
 * tokens (0 = identical). No heap: all state is static. Also prints the
 * retired instructions of the generation loop (rv32: minstret; Cortex-M:
 * SysTick calibrated against a loop of known length, as micro/bench does)
 * so docs/edge.md can state tokens per second at a clock with CPI = 1. */
#include <stdio.h>

#include "attnflow/micro.h"

typedef struct {
  const float *ln1_w, *ln1_b, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *ln2_w, *ln2_b, *w1, *b1,
      *w2, *b2;
} tiny_layer;

#include "tiny_weights.h"

#include "tiny_harness.h"

#define TINY_DH (TINY_D / TINY_H)
static float kstore[TINY_LAYERS][TINY_T * TINY_D], vstore[TINY_LAYERS][TINY_T * TINY_D];
static af_kv_cache cache[TINY_LAYERS];
static uint32_t arena[512];
static float x[TINY_D], h[TINY_D], q[TINY_D], k[TINY_D], v[TINY_D], att[TINY_D], o[TINY_D],
    ff[TINY_FF], logits[TINY_V];

/* Logits of the token at position pos (its K/V appended to the caches). */
static int step(int token, int pos) {
  int l, i;
  for (i = 0; i < TINY_D; ++i) x[i] = tiny_tok[token * TINY_D + i] + tiny_pos[pos * TINY_D + i];
  for (l = 0; l < TINY_LAYERS; ++l) {
    const tiny_layer* L = &tiny_layers[l];
    if (af_layernorm_f32(h, x, L->ln1_w, L->ln1_b, TINY_D, 1e-5f) ||
        af_linear_f32(q, h, L->wq, L->bq, TINY_D, TINY_D) ||
        af_linear_f32(k, h, L->wk, L->bk, TINY_D, TINY_D) ||
        af_linear_f32(v, h, L->wv, L->bv, TINY_D, TINY_D))
      return 1;
    /* k, v are [D] = [H, Dh]: the cache's per-position layout. */
    if (af_kv_cache_append(&cache[l], k, v) != AF_OK) return 1;
    if (af_decode_f32(att, NULL, q, &cache[l], TINY_H, 0.25f, arena, sizeof arena) != AF_OK)
      return 1;
    if (af_linear_f32(o, att, L->wo, L->bo, TINY_D, TINY_D)) return 1;
    af_add_f32(x, o, TINY_D);
    if (af_layernorm_f32(h, x, L->ln2_w, L->ln2_b, TINY_D, 1e-5f) ||
        af_linear_f32(ff, h, L->w1, L->b1, TINY_D, TINY_FF))
      return 1;
    af_relu_f32(ff, TINY_FF);
    if (af_linear_f32(o, ff, L->w2, L->b2, TINY_FF, TINY_D)) return 1;
    af_add_f32(x, o, TINY_D);
  }
  if (af_layernorm_f32(h, x, tiny_lnf_weight, tiny_lnf_bias, TINY_D, 1e-5f)) return 1;
  /* Tied head: logits = LN_f(x) . tok_emb^T. */
  return af_linear_f32(logits, h, tiny_tok, NULL, TINY_D, TINY_V) != AF_OK;
}

int main(void) {
  static char text[TINY_GEN + 1];
  static const tiny_check ref = {"TINY f32", tiny_pick_f32, TINY_V, logits, NULL, tiny_expected,
                                  NULL, tiny_vocab, text};
  int l;
  for (l = 0; l < TINY_LAYERS; ++l)
    if (af_kv_cache_init(&cache[l], kstore[l], vstore[l], TINY_H, TINY_DH, TINY_DH, TINY_T, 0) !=
        AF_OK)
      return 100;
  return tiny_generate(step, tiny_prompt, TINY_PROMPT_LEN, TINY_GEN, &ref);
}
