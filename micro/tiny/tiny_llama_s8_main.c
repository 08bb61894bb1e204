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
 * mismatching steps and tokens (0 = identical). No heap, no float.
 * -DTL_DUMP also prints every layer's stages of every step (AFDUMP). */
#include <stdio.h>

#include "attnflow/micro.h"
#include "tiny_harness.h"

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

#ifdef TL_DUMP
/* -DTL_DUMP: every layer's stages of every step as AFDUMP lines
 * (docs/device-dump.md), "decode.<pos>.layer.<l>.<stage>" under the golden
 * names, checked on the host against the NumPy model's
 * (tests/data/edge/tiny_llama_s8_stages.safetensors) by `attnflow verify
 * --compare`. */
static void uart(void* ctx, const char* s, size_t n) {
  (void)ctx;
  fwrite(s, 1, n, stdout);
}
static void dump(int pos, int l, const char* name, af_dump_dtype dt, const void* data, int32_t n) {
  char st[64];
  if (l >= 0) snprintf(st, sizeof st, "decode.%d.layer.%d.%s", pos, l, name);
  else snprintf(st, sizeof st, "decode.%d.%s", pos, name);
  af_dump_tensor(uart, NULL, st, dt, 1, &n);
  af_dump_part(uart, NULL, st, dt, 0, data, (uint32_t)n);
}
#define DUMP(l, name, dt, data, n) dump(pos, (l), (name), (dt), (data), (n))
#else
#define DUMP(l, name, dt, data, n) ((void)0)
#endif

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
    if (af_rmsnorm_s8(h8, r, L->norm1, TL_D, TL_EPS)) return 1;
    DUMP(l, "norm", AF_DUMP_I8, h8, TL_D);
    if (af_linear_s8(q8, h8, L->w[WQ], NULL, L->m[WQ], TL_D, TL_D) ||
        af_linear_s8(k8, h8, L->w[WK], NULL, L->m[WK], TL_D, KVD) ||
        af_linear_s8(v8, h8, L->w[WV], NULL, L->m[WV], TL_D, KVD) ||
        af_rope_s8(q8, TL_H, DH, cs, sn, AF_ROPE_HALF) ||
        af_rope_s8(k8, TL_HKV, DH, cs, sn, AF_ROPE_HALF))
      return 1;
    DUMP(l, "q", AF_DUMP_I8, q8, TL_D);
    DUMP(l, "k", AF_DUMP_I8, k8, KVD);
    DUMP(l, "v", AF_DUMP_I8, v8, KVD);
    if (af_kv_cache_s8_append(&cache[l], k8, v8) ||
        af_decode_s8(a8, q8, &cache[l], TL_H, &p, NULL, arena, sizeof arena))
      return 1;
    DUMP(l, "heads_out", AF_DUMP_I8, a8, TL_D);
    if (af_linear_s8_residual(r, a8, L->w[WO], NULL, L->m[WO], TL_D, TL_D)) return 1;
    DUMP(l, "residual", AF_DUMP_I32, r, TL_D);
    if (af_rmsnorm_s8(h8, r, L->norm2, TL_D, TL_EPS)) return 1;
    DUMP(l, "ffn_norm", AF_DUMP_I8, h8, TL_D);
    if (af_linear_s8(g8, h8, L->w[WG], NULL, L->m[WG], TL_D, TL_FF) ||
        af_linear_s8(u8, h8, L->w[WU], NULL, L->m[WU], TL_D, TL_FF) ||
        af_swiglu_s8(g8, g8, u8, TL_FF, L->silu, L->m_swiglu))
      return 1;
    DUMP(l, "swiglu", AF_DUMP_I8, g8, TL_FF);
    if (af_linear_s8_residual(r, g8, L->w[WD], NULL, L->m[WD], TL_FF, TL_D)) return 1;
    DUMP(l, "block_out", AF_DUMP_I32, r, TL_D);
  }
  if (af_rmsnorm_s8(h8, r, s8_normf, TL_D, TL_EPS)) return 1;
  DUMP(-1, "final_norm", AF_DUMP_I8, h8, TL_D);
  tiny_tied_head_s8(logits, s8_tok, h8, TL_V, TL_D);
  DUMP(-1, "logits", AF_DUMP_I32, logits, TL_V);
  return 0;
}

int main(void) {
  static const tiny_check ref = {"TINY LLAMA int8", tiny_pick_s32, TL_V, NULL, logits,
                                  s8_expected_ids, s8_expected_logits, NULL, NULL};
  int l, rc;
  for (l = 0; l < TL_LAYERS; ++l)
    if (af_kv_cache_s8_init(&cache[l], kstore[l], vstore[l], TL_HKV, DH, DH, TL_T, 0) != AF_OK)
      return 100;
#ifdef TL_DUMP
  af_dump_begin(uart, NULL, "tiny_llama_s8", "decoder", "micro-s8");
#endif
  rc = tiny_generate(step, tl_prompt, TL_PROMPT_LEN, TL_GEN, &ref);
#ifdef TL_DUMP
  af_dump_done(uart, NULL, "tiny_llama_s8");
#endif
  return rc;
}
