/* af_mha_f32.c — multi-head attention with projections (f32) for the micro
 * library (include/attnflow/micro.h): projections, head split, the streaming
 * SDPA of af_sdpa_f32_ex (masks, ALiBi, windows: the batch element's slice of
 * the mask), concat and output projection, one batch element at a time so
 * the arena holds O(L*E) activations of one sequence only.
 * Invariants: no heap; fp32 accumulation in input-feature order; shapes
 * validated before anything is written; optional stage outputs for golden
 * checks. */
#include <string.h>

#include "af_internal.h"

size_t af_mha_f32_workspace_bytes(const af_mha_shape* s) {
  af_sdpa_shape sd;
  uint64_t n;
  if (af_mha_check_shape(s, &sd) != AF_OK) return 0;
  /* q + heads_out [H*Lq*Dh each], k + v [Hkv*Lk*Dh each], one concat row,
   * the lse of one sequence; in 64 bits so it cannot wrap on a 32-bit
   * size_t (0 = does not fit the address space). */
  n = (uint64_t)2 * s->q_len * s->embed +
      (uint64_t)2 * s->kv_len * s->num_kv_heads * sd.head_dim + (uint64_t)s->embed +
      (uint64_t)s->num_heads * s->q_len;
  n = n * sizeof(float) + AF_ALIGN4(af_sdpa_f32_workspace_bytes(&sd));
  if (n > (uint64_t)(size_t)-1 || n >= ((uint64_t)1 << 32)) return 0;
  return (size_t)n;
}

/* y[rows, H_, L, Dh] (head-major) = x [L, E] . w^T + b for `rows` output
 * features split into heads of Dh. */
static void af_project_heads(float* y, const float* x, const float* w, const float* b, int32_t L,
                             int32_t E, int32_t out_features, int32_t dh) {
  int32_t i, f, e;
  for (i = 0; i < L; ++i) {
    const float* xr = x + (size_t)i * E;
    for (f = 0; f < out_features; ++f) {
      const float* wr = w + (size_t)f * E;
      float acc = b ? b[f] : 0.f;
      for (e = 0; e < E; ++e) acc += xr[e] * wr[e];
      y[((size_t)(f / dh) * L + i) * dh + (f % dh)] = acc;
    }
  }
}

/* Finite inputs and weights, and outputs (out, the stages, the arena's ws
 * bytes) apart from the inputs and from each other. */
static af_status af_mha_f32_misuse(const float* out, const float* x_q, const float* x_k,
                                   const float* x_v, const int32_t* kv_lens,
                                   const af_mha_weights_f32* w, const af_mha_shape* s, int32_t dh,
                                   const af_sdpa_opts* o, const void* arena, size_t ws,
                                   const af_mha_stages_f32* st) {
  const size_t B = (size_t)s->batch, E = (size_t)s->embed, Ekv = (size_t)s->num_kv_heads * dh;
  const size_t nq = B * s->q_len * E, nk = B * s->kv_len * E, nkv = B * s->kv_len * Ekv;
  af_sdpa_shape full;
  af_span outs[8], ins[16];
  int32_t n_in = 0, i;
  uint32_t m = 0;
  const float* arrays[11];
  size_t counts[11];
  arrays[0] = x_q, counts[0] = nq;
  arrays[1] = x_k, counts[1] = nk;
  arrays[2] = x_v, counts[2] = nk;
  arrays[3] = w->w_q, counts[3] = E * E;
  arrays[4] = w->w_k, counts[4] = Ekv * E;
  arrays[5] = w->w_v, counts[5] = Ekv * E;
  arrays[6] = w->w_o, counts[6] = E * E;
  arrays[7] = w->b_q, counts[7] = E;
  arrays[8] = w->b_k, counts[8] = Ekv;
  arrays[9] = w->b_v, counts[9] = Ekv;
  arrays[10] = w->b_o, counts[10] = E;
  for (i = 0; i < 11; ++i) {
    if (arrays[i] != NULL && !af_scan_f32(arrays[i], counts[i], &m)) return AF_ERR_PARAM;
    ins[n_in].p = arrays[i];
    ins[n_in++].n = arrays[i] != NULL ? counts[i] * 4 : 0;
  }
  ins[n_in].p = kv_lens, ins[n_in++].n = B * 4;
  full.batch = s->batch, full.num_heads = s->num_heads, full.num_kv_heads = s->num_kv_heads;
  full.q_len = s->q_len, full.kv_len = s->kv_len, full.head_dim = full.v_dim = dh;
  full.causal = s->causal;
  n_in += af_opts_spans(o, &full, ins + n_in);
  outs[0].p = out, outs[0].n = nq * 4;
  outs[1].p = arena, outs[1].n = ws;
  for (i = 2; i < 8; ++i) outs[i].p = NULL, outs[i].n = 0;
  if (st != NULL) {
    outs[2].p = st->q, outs[2].n = nq * 4;
    outs[3].p = st->k, outs[3].n = nkv * 4;
    outs[4].p = st->v, outs[4].n = nkv * 4;
    outs[5].p = st->heads_out, outs[5].n = nq * 4;
    outs[6].p = st->concat, outs[6].n = nq * 4;
    outs[7].p = st->lse, outs[7].n = B * s->num_heads * s->q_len * 4;
  }
  return af_alias_check(outs, 8, ins, n_in);
}

af_status af_mha_f32_ex(float* out, const float* x_q, const float* x_k, const float* x_v,
                        const int32_t* kv_lens, const af_mha_weights_f32* w, float scale,
                        const af_mha_shape* s, const af_sdpa_opts* o, void* arena,
                        size_t arena_bytes, const af_mha_stages_f32* stages) {
  af_sdpa_shape sd;
  af_status st = af_mha_check_shape(s, &sd);
  size_t ws;
  int32_t b;
  if (st != AF_OK) return st;
  if (out == NULL || x_q == NULL || x_k == NULL || x_v == NULL || w == NULL || w->w_q == NULL ||
      w->w_k == NULL || w->w_v == NULL || w->w_o == NULL || arena == NULL)
    return AF_ERR_NULL;
  if (!af_aligned(out, 4) || !af_aligned(x_q, 4) || !af_aligned(x_k, 4) ||
      !af_aligned(x_v, 4) || !af_aligned(kv_lens, 4) || !af_aligned(w->w_q, 4) ||
      !af_aligned(w->w_k, 4) || !af_aligned(w->w_v, 4) || !af_aligned(w->w_o, 4) ||
      !af_aligned(w->b_q, 4) || !af_aligned(w->b_k, 4) || !af_aligned(w->b_v, 4) ||
      !af_aligned(w->b_o, 4))
    return AF_ERR_ALIGN;
  if (stages && (!af_aligned(stages->q, 4) || !af_aligned(stages->k, 4) ||
                 !af_aligned(stages->v, 4) || !af_aligned(stages->lse, 4) ||
                 !af_aligned(stages->heads_out, 4) || !af_aligned(stages->concat, 4)))
    return AF_ERR_ALIGN;
  if (!(scale > 0.f && scale <= 3.0e38f)) return AF_ERR_PARAM;
  if ((st = af_mha_check_call(s, &sd, kv_lens, o, 0)) != AF_OK) return st;
  if ((st = af_mha_f32_misuse(out, x_q, x_k, x_v, kv_lens, w, s, sd.head_dim, o, arena,
                              af_mha_f32_workspace_bytes(s),
                              stages)) != AF_OK)
    return st;
  ws = af_mha_f32_workspace_bytes(s);
  if (ws == 0 || arena_bytes < ws || ((uintptr_t)arena & 3u)) return AF_ERR_ARENA;
  {
    const int32_t E = s->embed, H = s->num_heads, Hkv = s->num_kv_heads, dh = sd.head_dim;
    const int32_t Lq = s->q_len, Lk = s->kv_len, Ekv = Hkv * dh;
    const size_t nq = (size_t)Lq * E, nk = (size_t)Lk * Ekv;
    float* qh = (float*)arena;
    float* kh = qh + nq;
    float* vh = kh + nk;
    float* oh = vh + nk;
    float* lse = oh + nq;
    float* row = lse + (size_t)H * Lq;
    void* sa = row + E;
    const size_t sa_bytes = af_sdpa_f32_workspace_bytes(&sd);
    for (b = 0; b < s->batch; ++b) {
      int32_t i, f, h;
      af_sdpa_opts ob;
      if (o != NULL) af_mha_seq_opts(&ob, o, b, H); /* its slice of the mask, slopes */
      af_project_heads(qh, x_q + (size_t)b * Lq * E, w->w_q, w->b_q, Lq, E, E, dh);
      af_project_heads(kh, x_k + (size_t)b * Lk * E, w->w_k, w->b_k, Lk, E, Ekv, dh);
      af_project_heads(vh, x_v + (size_t)b * Lk * E, w->w_v, w->b_v, Lk, E, Ekv, dh);
      st = af_sdpa_f32_ex(oh, lse, qh, kh, vh, kv_lens ? kv_lens + b : NULL, scale, &sd,
                          o ? &ob : NULL, sa, sa_bytes);
      if (st != AF_OK) return st;
      if (stages) {
        if (stages->q) memcpy(stages->q + (size_t)b * nq, qh, nq * sizeof(float));
        if (stages->k) memcpy(stages->k + (size_t)b * nk, kh, nk * sizeof(float));
        if (stages->v) memcpy(stages->v + (size_t)b * nk, vh, nk * sizeof(float));
        if (stages->lse) memcpy(stages->lse + (size_t)b * H * Lq, lse, (size_t)H * Lq * sizeof(float));
        if (stages->heads_out) memcpy(stages->heads_out + (size_t)b * nq, oh, nq * sizeof(float));
      }
      for (i = 0; i < Lq; ++i) {
        float* o_row = out + ((size_t)b * Lq + i) * E;
        for (h = 0; h < H; ++h)
          memcpy(row + (size_t)h * dh, oh + ((size_t)h * Lq + i) * dh, (size_t)dh * sizeof(float));
        if (stages && stages->concat)
          memcpy(stages->concat + ((size_t)b * Lq + i) * E, row, (size_t)E * sizeof(float));
        for (f = 0; f < E; ++f) {
          const float* wr = w->w_o + (size_t)f * E;
          float acc = w->b_o ? w->b_o[f] : 0.f;
          int32_t e;
          for (e = 0; e < E; ++e) acc += row[e] * wr[e];
          o_row[f] = acc;
        }
      }
    }
  }
  return AF_OK;
}

af_status af_mha_f32(float* out, const float* x_q, const float* x_k, const float* x_v,
                     const int32_t* kv_lens, const af_mha_weights_f32* w, float scale,
                     const af_mha_shape* s, void* arena, size_t arena_bytes,
                     const af_mha_stages_f32* stages) {
  return af_mha_f32_ex(out, x_q, x_k, x_v, kv_lens, w, scale, s, NULL, arena, arena_bytes,
                       stages);
}
