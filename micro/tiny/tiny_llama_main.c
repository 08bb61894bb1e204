/* tiny_llama_main.c — the tiny Llama-style decoder of docs/edge.md ("The tiny
 * Llama on the device") in f32 on the device, weights in flash from
 * tiny_llama_weights.h (tools/edge/tiny_llama/export_header.py): per token,
 * per layer RMSNorm (af_rmsnorm_f32), q/k/v projections (af_linear_f32), RoPE
 * from a table in flash (af_rope_f32, rotate_half), a GQA KV cache
 * (af_kv_cache_append, af_decode_f32: 4 query heads over 2 kv heads), the
 * output projection and residual, RMSNorm and SwiGLU (af_swiglu_f32); then
 * the final RMSNorm and the tied head. Feeds the prompt, greedily generates
 * TL_GEN tokens and compares every one with PyTorch's (tiny_llama_expected.
 * json). Returns the number of mismatching tokens (0 = identical). No heap.
 * Prints the retired instructions per generated token (counter.h). */
#include <stdio.h>

#include "attnflow/micro.h"

typedef struct {
  const float *norm1, *wq, *wk, *wv, *wo, *norm2, *gate, *up, *down;
} tl_layer;

#include "tiny_llama_weights.h"

#include "counter.h"

#define TL_DH (TL_D / TL_H)
static float kstore[TL_LAYERS][TL_T * TL_HKV * TL_DH], vstore[TL_LAYERS][TL_T * TL_HKV * TL_DH];
static af_kv_cache cache[TL_LAYERS];
static uint32_t arena[512];
static float x[TL_D], h[TL_D], q[TL_D], k[TL_HKV * TL_DH], v[TL_HKV * TL_DH], att[TL_D], o[TL_D],
    g[TL_FF], u[TL_FF], logits[TL_V];

static int step(int token, int pos) {
  int l, i;
  const float* cs = tl_rope_cos + pos * (TL_DH / 2);
  const float* sn = tl_rope_sin + pos * (TL_DH / 2);
  for (i = 0; i < TL_D; ++i) x[i] = tl_tok[token * TL_D + i];
  for (l = 0; l < TL_LAYERS; ++l) {
    const tl_layer* L = &tl_layers[l];
    if (af_rmsnorm_f32(h, x, L->norm1, TL_D, TL_EPS) ||
        af_linear_f32(q, h, L->wq, NULL, TL_D, TL_D) ||
        af_linear_f32(k, h, L->wk, NULL, TL_D, TL_HKV * TL_DH) ||
        af_linear_f32(v, h, L->wv, NULL, TL_D, TL_HKV * TL_DH) ||
        af_rope_f32(q, TL_H, TL_DH, cs, sn, AF_ROPE_HALF) ||
        af_rope_f32(k, TL_HKV, TL_DH, cs, sn, AF_ROPE_HALF))
      return 1;
    if (af_kv_cache_append(&cache[l], k, v) != AF_OK) return 1;
    if (af_decode_f32(att, NULL, q, &cache[l], TL_H, 0.25f, arena, sizeof arena) != AF_OK) return 1;
    if (af_linear_f32(o, att, L->wo, NULL, TL_D, TL_D) || af_add_f32(x, o, TL_D)) return 1;
    if (af_rmsnorm_f32(h, x, L->norm2, TL_D, TL_EPS) ||
        af_linear_f32(g, h, L->gate, NULL, TL_D, TL_FF) ||
        af_linear_f32(u, h, L->up, NULL, TL_D, TL_FF) || af_swiglu_f32(g, g, u, TL_FF) ||
        af_linear_f32(o, g, L->down, NULL, TL_FF, TL_D) || af_add_f32(x, o, TL_D))
      return 1;
  }
  if (af_rmsnorm_f32(h, x, tl_normf, TL_D, TL_EPS)) return 1;
  return af_linear_f32(logits, h, tl_tok, NULL, TL_D, TL_V) != AF_OK; /* tied head */
}

static int argmax(void) {
  int i, best = 0;
  for (i = 1; i < TL_V; ++i)
    if (logits[i] > logits[best]) best = i; /* first max on ties, as torch.argmax */
  return best;
}

int main(void) {
  int l, pos = 0, i, tok, bad = 0;
  char text[TL_GEN + 1];
  uint32_t c0;
  uint64_t total = 0;
  for (l = 0; l < TL_LAYERS; ++l)
    if (af_kv_cache_init(&cache[l], kstore[l], vstore[l], TL_HKV, TL_DH, TL_DH, TL_T, 0) != AF_OK)
      return 100;
  counter_init();
  for (i = 0; i < TL_PROMPT_LEN; ++i)
    if (step(tl_prompt[i], pos++)) return 101;
  for (i = 0; i < TL_GEN; ++i) {
    tok = argmax();
    if (tok != tl_expected[i]) {
      if (!bad)
        printf("TINY LLAMA f32: first mismatch at generated token %d: got %d '%c', expected %d '%c'\n",
               i, tok, tl_vocab[tok], tl_expected[i], tl_vocab[tl_expected[i]]);
      ++bad;
    }
    text[i] = tl_vocab[tok];
    if (i + 1 < TL_GEN) {
      c0 = counter();
      if (step(tok, pos++)) return 102;
      total += instr(c0, counter());
    }
  }
  text[TL_GEN] = 0;
  printf("TINY LLAMA f32 generated: \"%s\"\n", text);
  printf("TINY LLAMA f32: %d/%d tokens identical to PyTorch\n", TL_GEN - bad, TL_GEN);
  printf("TINY LLAMA f32: %lu instructions per generated token (mean of %d decode steps)\n",
         (unsigned long)(total / (TL_GEN - 1)), TL_GEN - 1);
  return bad > 99 ? 99 : bad;
}
