/* tiny_llama_s8_main.c — the tiny Llama-style decoder in int8 on the device
 * (docs/edge.md "The tiny Llama on the device"): integer arithmetic only,
 * weights, multipliers, the RoPE table (Q15) and the SiLU tables in flash
 * from tiny_llama_s8_weights.h (tools/edge/tiny_llama/int8_model.py, which
 * runs a NumPy model of exactly this arithmetic). Per token: int32 residual
 * stream at 2^-12; per layer af_rmsnorm_s8, af_linear_s8 for q/k/v,
 * af_rope_s8, the int8 KV cache (af_kv_cache_s8_append) and af_decode_s8
 * over it (GQA), af_linear_s8_residual for W_o, af_rmsnorm_s8, af_linear_s8
 * for gate and up, af_swiglu_s8, af_linear_s8_residual for W_down; the
 * final RMSNorm and int32 logits of the tied head. Requires every step's
 * logits to equal the NumPy model's bit for bit; returns the number of
 * mismatching steps and tokens (0 = identical). No heap, no float. */
#include <stdio.h>

#include "attnflow/micro.h"
#include "counter.h"

typedef struct {
  const int32_t *norm1, *norm2;
  const int8_t* w[7];
  const af_qmult* m[7];
  const int8_t* silu;
  af_qmult m_swiglu, em, om;
} tl_layer_s8;
enum { WQ, WK, WV, WO, WG, WU, WD };

#include "tiny_llama_s8_weights.h"

#define DH (TL_D / TL_H)
#define KVD (TL_HKV * DH)
static int8_t kstore[TL_LAYERS][TL_HKV * TL_T * DH], vstore[TL_LAYERS][TL_HKV * DH * TL_T];
static af_kv_cache_s8 cache[TL_LAYERS];
static int32_t r[TL_D], logits[TL_V];
static int8_t h8[TL_D], q8[TL_D], k8[KVD], v8[KVD], a8[TL_D], g8[TL_FF], u8[TL_FF];
static uint32_t arena[128];

static int step(int tok, int pos) {
  int l, i;
  const int16_t* cs = s8_rope_cos + pos * (DH / 2);
  const int16_t* sn = s8_rope_sin + pos * (DH / 2);
  for (i = 0; i < TL_D; ++i) r[i] = af_s8_mul_by_qmult(s8_tok[tok * TL_D + i], s8_m_tok);
  for (l = 0; l < TL_LAYERS; ++l) {
    const tl_layer_s8* L = &s8_layers[l];
    af_s8_params p;
    p.num_scale_heads = 1;
    p.exp_mult[0] = L->em;
    p.out_mult[0] = L->om;
    if (af_rmsnorm_s8(h8, r, L->norm1, TL_D, TL_EPS) ||
        af_linear_s8(q8, h8, L->w[WQ], NULL, L->m[WQ], TL_D, TL_D) ||
        af_linear_s8(k8, h8, L->w[WK], NULL, L->m[WK], TL_D, KVD) ||
        af_linear_s8(v8, h8, L->w[WV], NULL, L->m[WV], TL_D, KVD) ||
        af_rope_s8(q8, TL_H, DH, cs, sn, AF_ROPE_HALF) ||
        af_rope_s8(k8, TL_HKV, DH, cs, sn, AF_ROPE_HALF) ||
        af_kv_cache_s8_append(&cache[l], k8, v8) ||
        af_decode_s8(a8, q8, &cache[l], TL_H, &p, NULL, arena, sizeof arena) ||
        af_linear_s8_residual(r, a8, L->w[WO], NULL, L->m[WO], TL_D, TL_D) ||
        af_rmsnorm_s8(h8, r, L->norm2, TL_D, TL_EPS) ||
        af_linear_s8(g8, h8, L->w[WG], NULL, L->m[WG], TL_D, TL_FF) ||
        af_linear_s8(u8, h8, L->w[WU], NULL, L->m[WU], TL_D, TL_FF) ||
        af_swiglu_s8(g8, g8, u8, TL_FF, L->silu, L->m_swiglu) ||
        af_linear_s8_residual(r, g8, L->w[WD], NULL, L->m[WD], TL_FF, TL_D))
      return 1;
  }
  if (af_rmsnorm_s8(h8, r, s8_normf, TL_D, TL_EPS)) return 1;
  for (i = 0; i < TL_V; ++i) {
    int32_t acc = 0;
    int j;
    for (j = 0; j < TL_D; ++j) acc += (int32_t)s8_tok[i * TL_D + j] * h8[j];
    logits[i] = acc;
  }
  return 0;
}

int main(void) {
  int i, j, l, pos = 0, tok, bad = 0, bad_tok = 0;
  uint32_t c0;
  uint64_t total = 0;
  for (l = 0; l < TL_LAYERS; ++l)
    if (af_kv_cache_s8_init(&cache[l], kstore[l], vstore[l], TL_HKV, DH, DH, TL_T, 0) != AF_OK)
      return 100;
  counter_init();
  for (i = 0; i < TL_PROMPT_LEN; ++i)
    if (step(tl_prompt[i], pos++)) return 101;
  for (i = 0; i < TL_GEN; ++i) {
    int best = 0;
    for (j = 0; j < TL_V; ++j)
      if (logits[j] != s8_expected_logits[i * TL_V + j]) {
        if (!bad)
          printf("TINY LLAMA int8: first logit mismatch at step %d, token %d: got %ld, NumPy %ld\n",
                 i, j, (long)logits[j], (long)s8_expected_logits[i * TL_V + j]);
        ++bad;
        break;
      }
    for (j = 1; j < TL_V; ++j)
      if (logits[j] > logits[best]) best = j;
    tok = best;
    if (tok != s8_expected_ids[i]) ++bad_tok;
    if (i + 1 < TL_GEN) {
      c0 = counter();
      if (step(tok, pos++)) return 102;
      total += instr(c0, counter());
    }
  }
  printf("TINY LLAMA int8: %d/%d steps with logits bit-identical to the NumPy model, %d/%d tokens equal\n",
         TL_GEN - bad, TL_GEN, TL_GEN - bad_tok, TL_GEN);
  printf("TINY LLAMA int8: %lu instructions per generated token (mean of %d decode steps)\n",
         (unsigned long)(total / (TL_GEN - 1)), TL_GEN - 1);
  return bad + bad_tok > 99 ? 99 : bad + bad_tok;
}
