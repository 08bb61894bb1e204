/* af_mha_s8.c — int8 multi-head attention with projections for the micro
 * library (include/attnflow/micro.h, af_mha_s8): integer only, one batch
 * element at a time. Per element: the int8 projections (af_linear_s8's
 * arithmetic: int32 dot product plus bias, saturated, one fixed-point
 * multiplier per output row) into head-major q [H, Lq, Dh] and k, v
 * [Hkv, Lk, Dh], af_sdpa_s8_softcap_ex over them (GQA, the options: masks, windows,
 * ALiBi), the concat of one query row at a time and the output projection.
 * Invariants: no heap, no float; the arena holds the projected activations
 * of one sequence, the SDPA arena and one concat row
 * (af_mha_s8_workspace_bytes, computed in 64 bits); shapes and options are
 * validated before anything is written. */
#include <string.h>

#include "af_internal.h"

size_t af_mha_s8_workspace_bytes(const af_mha_shape* s) {
  af_sdpa_shape sd;
  uint64_t n;
  if (af_mha_check_shape(s, &sd) != AF_OK) return 0;
  /* q + heads_out [Lq*E each], k + v [Lk*Hkv*Dh each] int8, one concat row,
   * then the SDPA arena at a 4-byte boundary. */
  n = (uint64_t)2 * s->q_len * s->embed + (uint64_t)2 * s->kv_len * s->num_kv_heads * sd.head_dim +
      (uint64_t)s->embed;
  n = AF_ALIGN4(n) + AF_ALIGN4(af_sdpa_s8_workspace_bytes(&sd));
  if (n > (uint64_t)(size_t)-1 || n >= ((uint64_t)1 << 32)) return 0;
  return (size_t)n;
}

static int8_t af_sat8_32(int32_t v) { return (int8_t)(v > 127 ? 127 : (v < -128 ? -128 : v)); }

/* y[f / dh][i][f % dh] = sat8(mulq(x[i] . w[f] + b[f], m[f])), head-major. */
static void af_project_heads_s8(int8_t* y, const int8_t* x, const int8_t* w, const int32_t* b,
                                const af_qmult* m, int32_t L, int32_t E, int32_t out_features,
                                int32_t dh) {
  int32_t i, f, e;
  for (i = 0; i < L; ++i) {
    const int8_t* xr = x + (size_t)i * E;
    for (f = 0; f < out_features; ++f) {
      const int8_t* wr = w + (size_t)f * E;
      int32_t part = 0;
      int64_t acc;
      for (e = 0; e < E; ++e) part += (int32_t)wr[e] * xr[e];
      acc = (int64_t)part + (b ? b[f] : 0);
      acc = acc > 2147483647 ? 2147483647 : (acc < -2147483647 - 1 ? -2147483647 - 1 : acc);
      y[((size_t)(f / dh) * L + i) * dh + (f % dh)] =
          af_sat8_32(af_s8_mul_by_qmult((int32_t)acc, m[f]));
    }
  }
}

/* Every row multiplier in range (mult >= 0, shift in [-31, 30]) and the
 * outputs (out, the stages, the arena's ws bytes) apart from the inputs and
 * from each other. */
static af_status af_mha_s8_misuse(const int8_t* out, const int8_t* x_q, const int8_t* x_k,
                                  const int8_t* x_v, const int32_t* kv_lens,
                                  const af_mha_weights_s8* w, const af_s8_params* p,
                                  const af_mha_shape* s, int32_t dh, const af_sdpa_opts* o,
                                  const void* arena, size_t ws, const af_mha_stages_s8* st) {
  const size_t B = (size_t)s->batch, E = (size_t)s->embed, Ekv = (size_t)s->num_kv_heads * dh;
  const size_t nq = B * s->q_len * E, nk = B * s->kv_len * E, nkv = B * s->kv_len * Ekv;
  const af_qmult* ms[4];
  size_t rows[4], i, r;
  af_sdpa_shape full;
  af_span outs[7], ins[21];
  int32_t n_in = 0;
  ms[0] = w->m_q, rows[0] = E;
  ms[1] = w->m_k, rows[1] = Ekv;
  ms[2] = w->m_v, rows[2] = Ekv;
  ms[3] = w->m_o, rows[3] = E;
  for (i = 0; i < 4; ++i) {
    for (r = 0; r < rows[i]; ++r)
      if (ms[i][r].mult < 0 || ms[i][r].shift < -31 || ms[i][r].shift > 30) return AF_ERR_PARAM;
    ins[n_in].p = ms[i], ins[n_in++].n = rows[i] * sizeof(af_qmult);
  }
  ins[n_in].p = x_q, ins[n_in++].n = nq;
  ins[n_in].p = x_k, ins[n_in++].n = nk;
  ins[n_in].p = x_v, ins[n_in++].n = nk;
  ins[n_in].p = w->w_q, ins[n_in++].n = E * E;
  ins[n_in].p = w->w_k, ins[n_in++].n = Ekv * E;
  ins[n_in].p = w->w_v, ins[n_in++].n = Ekv * E;
  ins[n_in].p = w->w_o, ins[n_in++].n = E * E;
  ins[n_in].p = w->b_q, ins[n_in++].n = E * 4;
  ins[n_in].p = w->b_k, ins[n_in++].n = Ekv * 4;
  ins[n_in].p = w->b_v, ins[n_in++].n = Ekv * 4;
  ins[n_in].p = w->b_o, ins[n_in++].n = E * 4;
  ins[n_in].p = kv_lens, ins[n_in++].n = B * 4;
  ins[n_in].p = p, ins[n_in++].n = sizeof *p;
  full.batch = s->batch, full.num_heads = s->num_heads, full.num_kv_heads = s->num_kv_heads;
  full.q_len = s->q_len, full.kv_len = s->kv_len, full.head_dim = full.v_dim = dh;
  full.causal = s->causal;
  n_in += af_opts_spans(o, &full, ins + n_in);
  outs[0].p = out, outs[0].n = nq;
  outs[1].p = arena, outs[1].n = ws;
  for (i = 2; i < 7; ++i) outs[i].p = NULL, outs[i].n = 0;
  if (st != NULL) {
    outs[2].p = st->q, outs[2].n = nq;
    outs[3].p = st->k, outs[3].n = nkv;
    outs[4].p = st->v, outs[4].n = nkv;
    outs[5].p = st->heads_out, outs[5].n = nq;
    outs[6].p = st->concat, outs[6].n = nq;
  }
  return af_alias_check(outs, 7, ins, n_in);
}

af_status af_mha_s8(int8_t* out, const int8_t* x_q, const int8_t* x_k, const int8_t* x_v,
                    const int32_t* kv_lens, const af_mha_weights_s8* w, const af_s8_params* p,
                    const af_mha_shape* s, const af_sdpa_opts* o, void* arena, size_t arena_bytes,
                    const af_mha_stages_s8* stages) {
  af_sdpa_shape sd;
  af_status st = af_mha_check_shape(s, &sd);
  size_t ws;
  int32_t b;
  if (st != AF_OK) return st;
  if (out == NULL || x_q == NULL || x_k == NULL || x_v == NULL || w == NULL || p == NULL ||
      w->w_q == NULL || w->w_k == NULL || w->w_v == NULL || w->w_o == NULL || w->m_q == NULL ||
      w->m_k == NULL || w->m_v == NULL || w->m_o == NULL || arena == NULL)
    return AF_ERR_NULL;
  if (!af_aligned(kv_lens, 4) || !af_aligned(w->b_q, 4) || !af_aligned(w->b_k, 4) ||
      !af_aligned(w->b_v, 4) || !af_aligned(w->b_o, 4) || !af_aligned(w->m_q, 4) ||
      !af_aligned(w->m_k, 4) || !af_aligned(w->m_v, 4) || !af_aligned(w->m_o, 4))
    return AF_ERR_ALIGN;
  if ((st = af_mha_check_call(s, &sd, kv_lens, o, 1)) != AF_OK) return st;
  if (o != NULL && o->v_layout != AF_V_ROWS) return AF_ERR_PARAM; /* v is projected here */
  if ((st = af_mha_s8_misuse(out, x_q, x_k, x_v, kv_lens, w, p, s, sd.head_dim, o, arena,
                             af_mha_s8_workspace_bytes(s),
                             stages)) != AF_OK)
    return st;
  ws = af_mha_s8_workspace_bytes(s);
  if (ws == 0 || arena_bytes < ws || ((uintptr_t)arena & 3u)) return AF_ERR_ARENA;
  {
    const int32_t E = s->embed, H = s->num_heads, Hkv = s->num_kv_heads, dh = sd.head_dim;
    const int32_t Lq = s->q_len, Lk = s->kv_len, Ekv = Hkv * dh;
    const size_t nq = (size_t)Lq * E, nk = (size_t)Lk * Ekv;
    int8_t* qh = (int8_t*)arena;
    int8_t* kh = qh + nq;
    int8_t* vh = kh + nk;
    int8_t* oh = vh + nk;
    int8_t* row = oh + nq;
    void* sa = (char*)arena + AF_ALIGN4(2 * nq + 2 * nk + (size_t)E);
    const size_t sa_bytes = af_sdpa_s8_workspace_bytes(&sd);
    for (b = 0; b < s->batch; ++b) {
      int32_t i, f, h;
      af_sdpa_opts ob;
      if (o != NULL) af_mha_seq_opts(&ob, o, b, H); /* its slice of the mask, slopes */
      af_project_heads_s8(qh, x_q + (size_t)b * Lq * E, w->w_q, w->b_q, w->m_q, Lq, E, E, dh);
      af_project_heads_s8(kh, x_k + (size_t)b * Lk * E, w->w_k, w->b_k, w->m_k, Lk, E, Ekv, dh);
      af_project_heads_s8(vh, x_v + (size_t)b * Lk * E, w->w_v, w->b_v, w->m_v, Lk, E, Ekv, dh);
      st = af_sdpa_s8_softcap_ex(oh, qh, kh, vh, kv_lens ? kv_lens + b : NULL, p, &sd,
                                 o ? &ob : NULL, sa, sa_bytes);
      if (st != AF_OK) return st;
      if (stages) {
        if (stages->q) memcpy(stages->q + (size_t)b * nq, qh, nq);
        if (stages->k) memcpy(stages->k + (size_t)b * nk, kh, nk);
        if (stages->v) memcpy(stages->v + (size_t)b * nk, vh, nk);
        if (stages->heads_out) memcpy(stages->heads_out + (size_t)b * nq, oh, nq);
      }
      for (i = 0; i < Lq; ++i) {
        int8_t* o_row = out + ((size_t)b * Lq + i) * E;
        for (h = 0; h < H; ++h) memcpy(row + (size_t)h * dh, oh + ((size_t)h * Lq + i) * dh, (size_t)dh);
        if (stages && stages->concat) memcpy(stages->concat + ((size_t)b * Lq + i) * E, row, (size_t)E);
        for (f = 0; f < E; ++f) {
          const int8_t* wr = w->w_o + (size_t)f * E;
          int32_t part = 0, e;
          int64_t acc;
          for (e = 0; e < E; ++e) part += (int32_t)wr[e] * row[e];
          acc = (int64_t)part + (w->b_o ? w->b_o[f] : 0);
          acc = acc > 2147483647 ? 2147483647 : (acc < -2147483647 - 1 ? -2147483647 - 1 : acc);
          o_row[f] = af_sat8_32(af_s8_mul_by_qmult((int32_t)acc, w->m_o[f]));
        }
      }
    }
  }
  return AF_OK;
}
