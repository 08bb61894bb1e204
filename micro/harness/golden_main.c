/* golden_main.c — on-device golden harness (docs/edge.md "Golden vectors on a
 * device"): runs every case in "cases.h" (headers written by
 * `attnflow export-c`) through the micro library — sdpa cases through
 * af_sdpa_f32_ex and af_sdpa_s8_ex, mha cases through af_mha_f32_ex — and
 * checks EVERY stage the case carries, in the order and the words of
 * `attnflow verify`: scores, scaled, masked, weights (recomputed per query
 * row by the stage probes, with the kernels' own arithmetic), lse and out
 * (from the kernels). It names the first failing stage and returns the
 * number of failing case x path runs (0 = all match), which QEMU
 * semihosting turns into its exit status.
 *
 * Invariants: no heap; buffers come from one static pool of
 * AF_HARNESS_POOL_BYTES, reset per chunk (one batch element and one kv head
 * with its query heads at a time), so a case needs RAM for one chunk only;
 * the case's pool_bytes (computed by export-c) is checked before the run and
 * the pool's high-water mark after it. Case data comes from flash
 * (pointers) or, for cases exported with --data, from a file read over
 * semihosting into the pool. Output goes through printf (semihosting under
 * QEMU, a UART retarget on a real board). Build flags:
 *   -DAF_HARNESS_POOL_BYTES=N   pool size (cases.h from run_edge.sh sets it)
 *   -DAF_HARNESS_DUMP           also print every computed stage as AFDUMP
 *                               lines (docs/device-dump.md)
 *   -DAF_HARNESS_TAMPER         perturb one output per case (CI proves a
 *                               mismatch is caught and named)
 *   -DAF_HARNESS_V_COLS         run the int8 path with V in the column
 *                               layout (AF_V_COLS; same bits expected)
 *   -DAF_HARNESS_DATA_DIR="d"   directory of --data files (default ".") */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "af_golden.h"
#include "cases.h" /* kCases[], kNumCases (and AF_HARNESS_POOL_BYTES) */

#ifndef AF_HARNESS_POOL_BYTES
#define AF_HARNESS_POOL_BYTES (32 * 1024)
#endif
#ifndef AF_HARNESS_DATA_DIR
#define AF_HARNESS_DATA_DIR "."
#endif

static uint32_t pool[AF_HARNESS_POOL_BYTES / 4];
static size_t pool_used, pool_peak, case_peak;
static const char* g_err; /* first pool / data error of the current run */

static void* take(size_t bytes) {
  void* p;
  bytes = (bytes + 7u) & ~(size_t)7u;
  if (bytes > sizeof pool - pool_used) {
    if (g_err == NULL) g_err = "harness pool too small";
    return NULL;
  }
  p = (char*)pool + pool_used;
  pool_used += bytes;
  if (pool_used > pool_peak) pool_peak = pool_used;
  if (pool_used > case_peak) case_peak = pool_used;
  return p;
}

/* ----------------------------------------------------------- case data --- */

static FILE* g_file;

static int open_data(const af_golden_case* c) {
  char path[256];
  if (c->blob != NULL) return 0;
  if (strlen(AF_HARNESS_DATA_DIR) + strlen(c->data_file) + 2 > sizeof path) return -1;
  strcpy(path, AF_HARNESS_DATA_DIR);
  strcat(path, "/");
  strcat(path, c->data_file);
  g_file = fopen(path, "rb");
  return g_file ? 0 : -1;
}

static void close_data(void) {
  if (g_file) fclose(g_file);
  g_file = NULL;
}

/* Elements [first, first + n) of tensor r (esize bytes each): a pointer into
 * flash, or the bytes read from the data file into the pool. NULL for an
 * absent tensor (and g_err set on a pool or read failure). */
static const void* fetch(const af_golden_case* c, af_gref r, uint32_t first, uint32_t n,
                         uint32_t esize) {
  void* buf;
  if (r.off == AF_G_ABSENT) return NULL;
  if (first > r.count || n > r.count - first) {
    if (g_err == NULL) g_err = "tensor range outside its array (corrupt case header)";
    return NULL;
  }
  if (c->blob != NULL) return (const char*)c->blob + r.off + (size_t)first * esize;
  buf = take((size_t)n * esize + 4);
  if (buf == NULL) return NULL;
  if (g_file == NULL || fseek(g_file, (long)(r.off + (size_t)first * esize), SEEK_SET) != 0 ||
      fread(buf, esize, n, g_file) != n) {
    if (g_err == NULL) g_err = "cannot read the case data file";
    return NULL;
  }
  return buf;
}

/* ---------------------------------------------------------- comparison --- */

typedef struct {
  const char* name;
  const char* skip; /* non-NULL: not compared, with this reason */
  double atol, rtol;
  double max_abs, max_rel, got_bad, exp_bad, tol_bad;
  double max_ratio; /* max |got - exp| / tolerance */
  int bounded;      /* compared against per-element rounding bounds */
  long bad, first_bad;
  int32_t dims[4];
  int rank;
} stage_acc;

static void acc_init(stage_acc* a, const char* name, double atol, double rtol, int rank,
                     int32_t d0, int32_t d1, int32_t d2, int32_t d3) {
  memset(a, 0, sizeof *a);
  a->name = name;
  a->atol = atol;
  a->rtol = rtol;
  a->first_bad = -1;
  a->rank = rank;
  a->dims[0] = d0;
  a->dims[1] = d1;
  a->dims[2] = d2;
  a->dims[3] = d3;
}

/* |got - exp| <= tol[i] (the case's rounding bounds, docs/golden-format.md
 * "Tolerances") or, with tol NULL, <= atol + rtol*|exp|; an infinity
 * matches only itself; NaN never. Elements are flat indices base .. base +
 * n - 1 of the stage. */
static void acc_compare(stage_acc* a, const float* got, const float* exp, const float* tol,
                        long n, long base) {
  long i;
  if (a->skip != NULL || got == NULL || exp == NULL) return;
  if (tol != NULL) a->bounded = 1;
  for (i = 0; i < n; ++i) {
    const double g = got[i], e = exp[i];
    const double t = tol != NULL ? (double)tol[i] : a->atol + a->rtol * fabs(e);
    int ok;
    double diff;
    if (isinf(e) || isinf(g)) {
      ok = (g == e);
      diff = ok ? 0.0 : INFINITY;
    } else if (isnan(g) || isnan(e)) {
      ok = 0;
      diff = INFINITY;
    } else {
      diff = fabs(g - e);
      ok = diff <= t;
      if (e != 0.0 && diff / fabs(e) > a->max_rel) a->max_rel = diff / fabs(e);
      if (t > 0.0 && diff / t > a->max_ratio) a->max_ratio = diff / t;
    }
    if (diff > a->max_abs) a->max_abs = diff;
    if (!ok) {
      if (a->first_bad < 0) {
        a->first_bad = base + i;
        a->got_bad = g;
        a->exp_bad = e;
        a->tol_bad = t;
      }
      a->bad++;
    }
  }
}

static void index_string(char* buf, size_t n, long flat, const int32_t* dims, int rank) {
  long idx[4] = {0, 0, 0, 0};
  int d;
  for (d = rank - 1; d >= 0; --d) {
    idx[d] = dims[d] > 0 ? flat % dims[d] : 0;
    flat = dims[d] > 0 ? flat / dims[d] : 0;
  }
  if (rank == 3)
    snprintf(buf, n, "[%ld,%ld,%ld]", idx[0], idx[1], idx[2]);
  else
    snprintf(buf, n, "[%ld,%ld,%ld,%ld]", idx[0], idx[1], idx[2], idx[3]);
}

/* Prints the table and the verdict line exactly as `attnflow verify` does;
 * returns 1 on a mismatch. */
static int report(const char* case_name, const char* kind, const char* impl, double atol,
                  double rtol, const stage_acc* a, int n) {
  int i, compared = 0, bounded = 0;
  for (i = 0; i < n; ++i) bounded |= a[i].skip == NULL && a[i].bounded;
  if (bounded)
    printf("case %s  kind=%s  impl=%s  tolerance=rounding bounds\n", case_name, kind, impl);
  else
    printf("case %s  kind=%s  impl=%s  atol=%g rtol=%g\n", case_name, kind, impl, atol, rtol);
  printf("  %-10s %12s %12s %10s  %-18s %-13s %s\n", "stage", "max_abs", "max_rel", "bad",
         "first_bad", "err/tol", "result");
  for (i = 0; i < n; ++i) {
    char idx[48] = "-", ratio[32];
    if (a[i].skip != NULL) {
      printf("  %-10s %12s %12s %10s  %-18s %-13s skipped (%s)\n", a[i].name, "-", "-", "-", "-",
             "-", a[i].skip);
      continue;
    }
    ++compared;
    if (a[i].first_bad >= 0) index_string(idx, sizeof idx, a[i].first_bad, a[i].dims, a[i].rank);
    snprintf(ratio, sizeof ratio, "%.2g %s", a[i].max_ratio, a[i].bounded ? "F32" : "fixed");
    printf("  %-10s %12.3e %12.3e %10ld  %-18s %-13s %s\n", a[i].name, a[i].max_abs, a[i].max_rel,
           a[i].bad, idx, ratio, a[i].bad ? "MISMATCH" : "ok");
  }
  for (i = 0; i < n; ++i) {
    if (a[i].skip == NULL && a[i].bad) {
      char idx[48];
      index_string(idx, sizeof idx, a[i].first_bad, a[i].dims, a[i].rank);
      printf("  => FIRST MISMATCH: stage '%s' at %s: got %.9g, expected %.9g (%s %.3g; %ld bad "
             "elements)\n",
             a[i].name, idx, a[i].got_bad, a[i].exp_bad,
             a[i].bounded ? "F32 rounding bound" : "tolerance", a[i].tol_bad, a[i].bad);
      return 1;
    }
  }
  printf("  => match (%d stages compared)\n", compared);
  return 0;
}

static int fail_run(const char* case_name, const char* kind, const char* impl, const char* stage,
                    const char* what) {
  printf("case %s  kind=%s  impl=%s\n", case_name, kind, impl);
  printf("  => FIRST MISMATCH: stage '%s': %s\n", stage, what);
  return 1;
}

/* ---------------------------------------------------------------- dump --- */
#ifdef AF_HARNESS_DUMP
static void uart_write(void* ctx, const char* text, size_t n) {
  (void)ctx;
  fwrite(text, 1, n, stdout);
}
#define DUMP(x) x
#else
#define DUMP(x)
#endif

/* ---------------------------------------------------------------- sdpa --- */

enum { ST_SCORES, ST_SCALED, ST_MASKED, ST_WEIGHTS, ST_LSE, ST_OUT, ST_N };
static const char* const kStageNames[ST_N] = {"scores", "scaled", "masked",
                                              "weights", "lse", "out"};


static int run_sdpa(const af_golden_case* c, int s8) {
  const af_sdpa_shape* s = &c->shape;
  const int32_t B = s->batch, H = s->num_heads, Hkv = s->num_kv_heads, G = H / Hkv;
  const int32_t Lq = s->q_len, Lk = s->kv_len, D = s->head_dim, Dv = s->v_dim;
  const af_g_stages* ex = s8 ? &c->s8 : &c->f32;
  const char* impl = s8 ? "micro-s8" : "micro-f32";
  const double unit = (double)c->sq * c->sk; /* one raw int8 score, real */
  const double unit_scaled = unit * c->scale;
  const int any_row_stage = ex->scores.off != AF_G_ABSENT || ex->scaled.off != AF_G_ABSENT ||
                            ex->masked.off != AF_G_ABSENT || ex->weights.off != AF_G_ABSENT;
  stage_acc a[ST_N];
  af_s8_params p;
  uint32_t hsh = 2166136261u; /* FNV-1a of the int8 output, every chunk in order */
  int32_t b, g, i, st_i;
  const af_gref* refs[ST_N];
  const af_gref* trefs[ST_N]; /* the f32 stages' rounding bounds */
  trefs[ST_SCORES] = &c->f32_tol.scores;
  trefs[ST_SCALED] = &c->f32_tol.scaled;
  trefs[ST_MASKED] = &c->f32_tol.masked;
  trefs[ST_WEIGHTS] = &c->f32_tol.weights;
  trefs[ST_LSE] = &c->f32_tol.lse;
  trefs[ST_OUT] = &c->f32_tol.out;
  refs[ST_SCORES] = &ex->scores;
  refs[ST_SCALED] = &ex->scaled;
  refs[ST_MASKED] = &ex->masked;
  refs[ST_WEIGHTS] = &ex->weights;
  refs[ST_LSE] = &ex->lse;
  refs[ST_OUT] = &ex->out;
  af_s8_tolerances s8t; /* the int8 path's stage tolerances (af_bound.c) */
  af_s8_stage_tolerances(&s8t, c->sq, c->sk, c->scale, c->softcap);
  for (st_i = 0; st_i < ST_N; ++st_i) {
    double at = c->atol, rt = c->rtol;
    if (s8) {
      const af_tol* t = st_i == ST_SCORES    ? &s8t.scores
                        : st_i == ST_MASKED  ? &s8t.masked
                        : st_i == ST_WEIGHTS ? &s8t.weights
                        : st_i == ST_OUT     ? &s8t.out
                                             : NULL;
      at = t != NULL ? t->atol : 0.0;
      rt = t != NULL ? t->rtol : 1e-5;
      if (st_i == ST_OUT) at = c->bound_lsb;
    }
    if (st_i == ST_LSE)
      acc_init(&a[st_i], kStageNames[st_i], at, rt, 3, B, H, Lq, 0);
    else if (st_i == ST_OUT)
      acc_init(&a[st_i], kStageNames[st_i], at, rt, 4, B, H, Lq, Dv);
    else
      acc_init(&a[st_i], kStageNames[st_i], at, rt, 4, B, H, Lq, Lk);
    if (refs[st_i]->off == AF_G_ABSENT) a[st_i].skip = "not in the exported case";
  }
  if (s8) {
    a[ST_SCALED].skip = "folded into the int8 exponent multiplier";
    a[ST_LSE].skip = "not formed by the int8 path";
    a[ST_OUT].skip = c->out8.off == AF_G_ABSENT ? "not in the exported case" : NULL;
    if (af_s8_prepare(&p, &c->sq, &c->sk, &c->sv, &c->so, 1, c->scale) != AF_OK)
      return fail_run(c->name, "sdpa", impl, "scores", "af_s8_prepare refused the scales");
  }
  if (c->pool_bytes > sizeof pool) {
    printf("case %s: needs a harness pool of %lu bytes, this build has %lu "
           "(-DAF_HARNESS_POOL_BYTES)\n",
           c->name, (unsigned long)c->pool_bytes, (unsigned long)sizeof pool);
    return 1;
  }
  DUMP(af_dump_begin(uart_write, NULL, c->name, "sdpa", impl));
  DUMP(for (st_i = 0; st_i < ST_N; ++st_i) if (a[st_i].skip == NULL)
           af_dump_tensor(uart_write, NULL, kStageNames[st_i],
                          s8 && st_i == ST_OUT ? AF_DUMP_I8 : AF_DUMP_F32, a[st_i].rank,
                          a[st_i].dims));
  for (b = 0; b < B; ++b) {
    for (g = 0; g < Hkv; ++g) {
      /* One chunk: batch b, kv head g and its G query heads, as a problem of
       * its own (B = 1, H = G, Hkv = 1). */
      af_sdpa_shape cs = *s;
      af_sdpa_opts o = AF_SDPA_OPTS_INIT;
      const uint32_t h0 = (uint32_t)g * G, bh0 = (uint32_t)b * H + h0;
      const uint32_t nq = (uint32_t)G * Lq * D, nout = (uint32_t)G * Lq * Dv, nl = (uint32_t)G * Lq;
      const int32_t* kvl;
      const void *q, *k, *v;
      void* arena;
      size_t ws;
      af_status rc;
      float *out_f = NULL, *lse_f = NULL, *got_out;
      int8_t* out8 = NULL;
      const float* exp_out;
      const float* tol_out = NULL; /* f32: out's rounding bounds (NULL: atol/rtol) */
      pool_used = 0;
      g_err = NULL;
      cs.batch = 1;
      cs.num_heads = G;
      cs.num_kv_heads = 1;
      kvl = (const int32_t*)fetch(c, c->kv_lens, (uint32_t)b, 1, 4);
      if (s8) {
        q = fetch(c, c->q8, bh0 * Lq * D, nq, 1);
        k = fetch(c, c->k8, ((uint32_t)b * Hkv + g) * Lk * D, (uint32_t)Lk * D, 1);
        v = fetch(c, c->v8, ((uint32_t)b * Hkv + g) * Lk * Dv, (uint32_t)Lk * Dv, 1);
      } else {
        q = fetch(c, c->q, bh0 * Lq * D, nq, 4);
        k = fetch(c, c->k, ((uint32_t)b * Hkv + g) * Lk * D, (uint32_t)Lk * D, 4);
        v = fetch(c, c->v, ((uint32_t)b * Hkv + g) * Lk * Dv, (uint32_t)Lk * Dv, 4);
      }
      /* Options of the chunk: its slice of the mask and of the ALiBi slopes. */
      o.window_left = c->window_left;
      o.window_right = c->window_right;
      o.kv_align = c->kv_align;
      if (c->mask_type != AF_MASK_NONE) {
        const int32_t* ms = c->mask_shape;
        const uint32_t per = (uint32_t)ms[2] * ms[3];
        const uint32_t first = (ms[0] == 1 ? 0 : (uint32_t)b * ms[1] * per) +
                               (ms[1] == 1 ? 0 : h0 * per);
        const uint32_t count = (ms[1] == 1 ? 1 : (uint32_t)G) * per;
        o.mask_shape[0] = 1;
        o.mask_shape[1] = ms[1] == 1 ? 1 : G;
        o.mask_shape[2] = ms[2];
        o.mask_shape[3] = ms[3];
        if (c->mask_type == AF_MASK_BOOL) {
          o.mask_type = AF_MASK_BOOL;
          o.mask = fetch(c, c->mask, first, count, 1);
        } else {
          const float* mf = (const float*)fetch(c, c->mask, first, count, 4);
          o.mask_type = s8 ? AF_MASK_S32 : AF_MASK_F32;
          o.mask = mf;
          if (s8 && mf != NULL) { /* start-up conversion to raw-score units */
            int32_t* m32 = (int32_t*)take((size_t)count * 4);
            if (m32 == NULL ||
                af_s8_mask_prepare(m32, mf, (int32_t)count, c->sq, c->sk, c->scale) != AF_OK) {
              close_data();
              return fail_run(c->name, "sdpa", impl, "masked",
                              g_err ? g_err : "af_s8_mask_prepare refused the mask");
            }
            o.mask = m32;
          }
        }
      }
      if (c->alibi.off != AF_G_ABSENT) { /* [H] or [B,H]: the chunk's G slopes */
        const float* sl = (const float*)fetch(c, c->alibi, c->alibi_per_batch ? bh0 : h0,
                                              (uint32_t)G, 4);
        if (s8) {
          int32_t* a8 = (int32_t*)take((size_t)G * 4);
          if (a8 == NULL || sl == NULL ||
              af_s8_alibi_prepare(a8, sl, G, &c->sq, &c->sk, 1, c->scale) != AF_OK) {
            close_data();
            return fail_run(c->name, "sdpa", impl, "masked",
                            g_err ? g_err : "af_s8_alibi_prepare refused the slopes");
          }
          o.alibi_s8 = a8;
        } else {
          o.alibi_slopes = sl;
        }
      }
      if (c->softcap > 0.f) {
        if (s8) { /* start-up conversion to raw-score units */
          int32_t* c8 = (int32_t*)take((size_t)G * 16);
          if (c8 == NULL ||
              af_s8_softcap_prepare(c8, c->softcap, G, &c->sq, &c->sk, 1, c->scale) != AF_OK) {
            close_data();
            return fail_run(c->name, "sdpa", impl, "masked",
                            g_err ? g_err : "af_s8_softcap_prepare refused the softcap");
          }
          o.softcap_s8 = c8;
        } else {
          o.softcap = c->softcap;
        }
      }
#ifdef AF_HARNESS_V_COLS
      /* int8 with V in the column layout (AF_V_COLS, the int8 cache's): the
       * same integer sums, so the same bits as the row layout. */
      if (s8 && v != NULL) {
        int8_t* vt = (int8_t*)take((size_t)Lk * Dv + 4);
        int32_t jj, dd;
        if (vt != NULL) {
          for (jj = 0; jj < Lk; ++jj)
            for (dd = 0; dd < Dv; ++dd) vt[(size_t)dd * Lk + jj] = ((const int8_t*)v)[(size_t)jj * Dv + dd];
          v = vt;
          o.v_layout = AF_V_COLS;
        }
      }
#endif
      ws = s8 ? af_sdpa_s8_workspace_bytes(&cs) : af_sdpa_f32_workspace_bytes(&cs);
      arena = take(ws);
      if (s8) {
        out8 = (int8_t*)take(nout + 4);
        out_f = (float*)take((size_t)nout * 4);
      } else {
        out_f = (float*)take((size_t)nout * 4);
        lse_f = (float*)take((size_t)nl * 4);
      }
      if (g_err != NULL || q == NULL || k == NULL || v == NULL || arena == NULL ||
          out_f == NULL) {
        const char* why = g_err ? g_err : "missing input";
        close_data();
        if (why[0] == 'h')
          printf("case %s: harness pool too small: this chunk needs more than %lu bytes "
                 "(AF_HARNESS_POOL_BYTES; export-c said %lu)\n",
                 c->name, (unsigned long)sizeof pool, (unsigned long)c->pool_bytes);
        return fail_run(c->name, "sdpa", impl, "scores", why);
      }
      /* int8: the lean entry point, or the one that links the softcap */
      if (s8 && o.softcap_s8 != NULL)
        rc = af_sdpa_s8_softcap_ex(out8, (const int8_t*)q, (const int8_t*)k, (const int8_t*)v,
                                   kvl, &p, &cs, &o, arena, ws);
      else if (s8)
        rc = af_sdpa_s8_ex(out8, (const int8_t*)q, (const int8_t*)k, (const int8_t*)v, kvl, &p,
                           &cs, &o, arena, ws);
      else
        rc = af_sdpa_f32_ex(out_f, lse_f, (const float*)q, (const float*)k, (const float*)v, kvl,
                            c->scale, &cs, &o, arena, ws);
      if (rc != AF_OK) {
        char what[80];
        snprintf(what, sizeof what, "%s returned %s",
                 !s8 ? "af_sdpa_f32_ex"
                     : (o.softcap_s8 != NULL ? "af_sdpa_s8_softcap_ex" : "af_sdpa_s8_ex"),
                 af_status_name(rc));
        close_data();
        return fail_run(c->name, "sdpa", impl, "scores", what);
      }
      got_out = out_f;
      if (s8) {
        uint32_t e;
        float* exp8 = (float*)take((size_t)nout * 4);
        const int8_t* o8 = (const int8_t*)fetch(c, c->out8, bh0 * Lq * Dv, nout, 1);
        for (e = 0; e < nout; ++e) hsh = (hsh ^ (uint8_t)out8[e]) * 16777619u;
        if (exp8 == NULL || o8 == NULL) {
          close_data();
          return fail_run(c->name, "sdpa", impl, "out", g_err ? g_err : "no out8");
        }
        /* int8 outputs compared in output LSB (atol = the derived bound). */
        for (e = 0; e < nout; ++e) {
          out_f[e] = (float)out8[e];
          exp8[e] = (float)o8[e];
        }
        exp_out = exp8;
      } else {
        exp_out = (const float*)fetch(c, ex->out, bh0 * Lq * Dv, nout, 4);
        tol_out = (const float*)fetch(c, c->f32_tol.out, bh0 * Lq * Dv, nout, 4);
        acc_compare(&a[ST_LSE], lse_f, (const float*)fetch(c, ex->lse, bh0 * Lq, nl, 4),
                    (const float*)fetch(c, c->f32_tol.lse, bh0 * Lq, nl, 4), nl, (long)bh0 * Lq);
      }
#ifdef AF_HARNESS_TAMPER
      if (b == B - 1 && g == Hkv - 1 && nout > 0) got_out[nout - 1] += s8 ? 9.0f : 0.5f;
#endif
      acc_compare(&a[ST_OUT], got_out, exp_out, tol_out, nout, (long)bh0 * Lq * Dv);
      DUMP(if (!s8) af_dump_part(uart_write, NULL, "lse", AF_DUMP_F32, bh0 * Lq, lse_f, nl));
      DUMP(af_dump_part(uart_write, NULL, "out", s8 ? AF_DUMP_I8 : AF_DUMP_F32, bh0 * Lq * Dv,
                        s8 ? (const void*)out8 : (const void*)out_f, nout));
      if (any_row_stage) {
        /* Probe every query row of the chunk, compare its four score-row
         * stages with the case's. */
        float* rows = (float*)take((size_t)4 * Lk * 4);
        int32_t* irow = s8 ? (int32_t*)take((size_t)3 * Lk * 4) : NULL;
        int32_t hh;
        if (rows == NULL || (s8 && irow == NULL)) {
          close_data();
          printf("case %s: harness pool too small for the stage rows\n", c->name);
          return fail_run(c->name, "sdpa", impl, "scores", "harness pool too small");
        }
        for (hh = 0; hh < G; ++hh) {
          for (i = 0; i < Lq; ++i) {
            const uint32_t ro = ((bh0 + (uint32_t)hh) * Lq + (uint32_t)i) * (uint32_t)Lk;
            const size_t mark = pool_used;
            int32_t j;
            if (s8) {
              int32_t wsum = 0;
              rc = af_sdpa_s8_probe(irow, irow + Lk, irow + 2 * Lk, &wsum, (const int8_t*)q,
                                    (const int8_t*)k, kvl, &p, &cs, &o, 0, hh, i);
              for (j = 0; j < Lk && rc == AF_OK; ++j) {
                const int32_t mj = irow[Lk + j];
                rows[j] = (float)(irow[j] * unit);
                rows[Lk + j] = 0.f; /* scaled: skipped */
                rows[2 * Lk + j] = mj == AF_S8_MASKED ? -INFINITY : (float)(mj * unit_scaled);
                rows[3 * Lk + j] = wsum > 0 ? (float)((double)irow[2 * Lk + j] / wsum) : 0.f;
              }
            } else {
              rc = af_sdpa_f32_probe(rows, rows + Lk, rows + 2 * Lk, rows + 3 * Lk, NULL,
                                     (const float*)q, (const float*)k, kvl, c->scale, &cs, &o, 0,
                                     hh, i);
            }
            if (rc != AF_OK) {
              close_data();
              return fail_run(c->name, "sdpa", impl, "scores", "the stage probe refused the row");
            }
            for (st_i = ST_SCORES; st_i <= ST_WEIGHTS; ++st_i) {
              const float* e = (const float*)fetch(c, *refs[st_i], ro, (uint32_t)Lk, 4);
              if (e == NULL) continue;
              if (s8 && st_i == ST_MASKED) {
                /* A value at the kernel's clamp (-2^30 raw units) matches any
                 * expected value at or below it. */
                const float floor_v = (float)(-1073741824.0 * unit_scaled);
                for (j = 0; j < Lk; ++j)
                  if (rows[2 * Lk + j] == floor_v && e[j] <= floor_v) rows[2 * Lk + j] = e[j];
              }
              acc_compare(&a[st_i], rows + (size_t)(st_i - ST_SCORES) * Lk, e,
                          s8 ? NULL : (const float*)fetch(c, *trefs[st_i], ro, (uint32_t)Lk, 4),
                          Lk, (long)ro);
              DUMP(if (a[st_i].skip == NULL) af_dump_part(uart_write, NULL, kStageNames[st_i],
                                                          AF_DUMP_F32, ro,
                                                          rows + (size_t)(st_i - ST_SCORES) * Lk,
                                                          (uint32_t)Lk));
              pool_used = mark; /* file mode: drop the expected row */
            }
          }
        }
      }
      if (g_err != NULL) {
        close_data();
        return fail_run(c->name, "sdpa", impl, "out", g_err);
      }
    }
  }
  DUMP(af_dump_done(uart_write, NULL, c->name));
  if (s8) printf("  int8 checksum %s 0x%08lx\n", c->name, (unsigned long)hsh);
  /* The header's tolerance is that of `out` (int8: the LSB bound). */
  return report(c->name, "sdpa", impl, s8 ? (double)c->bound_lsb : c->atol, s8 ? 0.0 : c->rtol,
                a, ST_N);
}

/* ----------------------------------------------------------------- mha --- */

/* The per-head attention of an mha shape: [B, H, Lq|Lk, E / H]. */
static af_sdpa_shape head_shape(const af_mha_shape* s) {
  af_sdpa_shape h;
  h.batch = s->batch;
  h.num_heads = s->num_heads;
  h.num_kv_heads = s->num_kv_heads;
  h.q_len = s->q_len;
  h.kv_len = s->kv_len;
  h.head_dim = h.v_dim = s->embed / s->num_heads;
  h.causal = s->causal;
  return h;
}

/* One whole tensor of case c (inside run_mha / run_mha_s8). */
#define WHOLE(r, esize) fetch(c, (r), 0, (r).count, (esize))
/* The inputs of an mha path, fetched whole and typed once for both paths:
 * x_q/x_k/x_v and the weights w_* as T (fields suffixed S: x_q##S, w_q##S),
 * the biases b_* as BT (suffixed BS), the kv lengths as int32. f32:
 * (float, float, , ); int8: (int8_t, int32_t, 8, 32). */
#define FETCH_MHA_INPUTS(T, BT, S, BS)                        \
  do {                                                        \
    xq = (const T*)WHOLE(c->x_q##S, sizeof(T));               \
    xk = (const T*)WHOLE(c->x_k##S, sizeof(T));               \
    xv = (const T*)WHOLE(c->x_v##S, sizeof(T));               \
    w.w_q = (const T*)WHOLE(c->w_q##S, sizeof(T));            \
    w.w_k = (const T*)WHOLE(c->w_k##S, sizeof(T));            \
    w.w_v = (const T*)WHOLE(c->w_v##S, sizeof(T));            \
    w.w_o = (const T*)WHOLE(c->w_o##S, sizeof(T));            \
    w.b_q = (const BT*)WHOLE(c->b_q##BS, sizeof(BT));         \
    w.b_k = (const BT*)WHOLE(c->b_k##BS, sizeof(BT));         \
    w.b_v = (const BT*)WHOLE(c->b_v##BS, sizeof(BT));         \
    w.b_o = (const BT*)WHOLE(c->b_o##BS, sizeof(BT));         \
    kvl = (const int32_t*)WHOLE(c->kv_lens, 4);               \
  } while (0)

enum { M_Q, M_K, M_V, M_SCORES, M_SCALED, M_MASKED, M_WEIGHTS, M_LSE, M_HEADS, M_CONCAT, M_OUT,
       M_N };

static int run_mha(const af_golden_case* c) {
  static const char* const kNames[M_N] = {"q",       "k",   "v",         "scores",
                                          "scaled",  "masked", "weights", "lse",
                                          "heads_out", "concat", "out"};
  const af_mha_shape* s = &c->mshape;
  const int32_t B = s->batch, H = s->num_heads, Hkv = s->num_kv_heads, E = s->embed;
  const int32_t dh = E / H, Lq = s->q_len, Lk = s->kv_len;
  const uint32_t nq = (uint32_t)B * H * Lq * dh, nk = (uint32_t)B * Hkv * Lk * dh;
  const uint32_t nl = (uint32_t)B * H * Lq, no = (uint32_t)B * Lq * E;
  stage_acc a[M_N];
  af_mha_stages_f32 st;
  af_mha_weights_f32 w;
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  const af_sdpa_shape ps = head_shape(s); /* for the probe */
  const af_gref* refs[M_N];
  const af_gref* trefs[M_N]; /* rounding bounds of the f32 stages */
  const float* got[M_N];
  long counts[M_N];
  float* out;
  void* arena;
  size_t ws = af_mha_f32_workspace_bytes(s);
  const float *xq, *xk, *xv;
  const int32_t* kvl;
  af_status rc;
  int m;
  refs[M_Q] = &c->mq;
  refs[M_K] = &c->mk;
  refs[M_V] = &c->mv;
  refs[M_SCORES] = &c->f32.scores;
  refs[M_SCALED] = &c->f32.scaled;
  refs[M_MASKED] = &c->f32.masked;
  refs[M_WEIGHTS] = &c->f32.weights;
  refs[M_LSE] = &c->f32.lse;
  refs[M_HEADS] = &c->heads_out;
  refs[M_CONCAT] = &c->concat;
  refs[M_OUT] = &c->f32.out;
  trefs[M_Q] = &c->mq_tol;
  trefs[M_K] = &c->mk_tol;
  trefs[M_V] = &c->mv_tol;
  trefs[M_SCORES] = &c->f32_tol.scores;
  trefs[M_SCALED] = &c->f32_tol.scaled;
  trefs[M_MASKED] = &c->f32_tol.masked;
  trefs[M_WEIGHTS] = &c->f32_tol.weights;
  trefs[M_LSE] = &c->f32_tol.lse;
  trefs[M_HEADS] = &c->heads_out_tol;
  trefs[M_CONCAT] = &c->concat_tol;
  trefs[M_OUT] = &c->f32_tol.out;
  if (c->pool_bytes > sizeof pool) {
    printf("case %s: needs a harness pool of %lu bytes, this build has %lu "
           "(-DAF_HARNESS_POOL_BYTES)\n",
           c->name, (unsigned long)c->pool_bytes, (unsigned long)sizeof pool);
    return 1;
  }
  pool_used = 0;
  g_err = NULL;
  acc_init(&a[M_Q], kNames[M_Q], c->atol, c->rtol, 4, B, H, Lq, dh);
  acc_init(&a[M_K], kNames[M_K], c->atol, c->rtol, 4, B, Hkv, Lk, dh);
  acc_init(&a[M_V], kNames[M_V], c->atol, c->rtol, 4, B, Hkv, Lk, dh);
  for (m = M_SCORES; m <= M_WEIGHTS; ++m)
    acc_init(&a[m], kNames[m], c->atol, c->rtol, 4, B, H, Lq, Lk);
  acc_init(&a[M_LSE], kNames[M_LSE], c->atol, c->rtol, 3, B, H, Lq, 0);
  acc_init(&a[M_HEADS], kNames[M_HEADS], c->atol, c->rtol, 4, B, H, Lq, dh);
  acc_init(&a[M_CONCAT], kNames[M_CONCAT], c->atol, c->rtol, 3, B, Lq, E, 0);
  acc_init(&a[M_OUT], kNames[M_OUT], c->atol, c->rtol, 3, B, Lq, E, 0);
  for (m = 0; m < M_N; ++m)
    if (refs[m]->off == AF_G_ABSENT) a[m].skip = "not in the exported case";
  FETCH_MHA_INPUTS(float, float, , );
  o.window_left = c->window_left;
  o.window_right = c->window_right;
  if (c->mask_type != AF_MASK_NONE) {
    o.mask_type = c->mask_type;
    memcpy(o.mask_shape, c->mask_shape, sizeof o.mask_shape);
    o.mask = WHOLE(c->mask, c->mask_type == AF_MASK_BOOL ? 1 : 4);
  }
  if (c->alibi.off != AF_G_ABSENT)
    o.alibi_slopes = (const float*)WHOLE(c->alibi, 4);
  o.alibi_per_batch = c->alibi_per_batch;
  o.kv_align = c->kv_align;
  o.softcap = c->softcap;
  out = (float*)take((size_t)no * 4 + 4);
  st.q = (float*)take((size_t)nq * 4 + 4);
  st.k = (float*)take((size_t)nk * 4 + 4);
  st.v = (float*)take((size_t)nk * 4 + 4);
  st.lse = (float*)take((size_t)nl * 4 + 4);
  st.heads_out = (float*)take((size_t)nq * 4 + 4);
  st.concat = (float*)take((size_t)no * 4 + 4);
  arena = take(ws);
  if (g_err != NULL || !xq || !xk || !xv || !w.w_q || !w.w_k || !w.w_v || !w.w_o || !out ||
      !arena) {
    close_data();
    printf("case %s: %s (pool %lu bytes, export-c said %lu)\n", c->name,
           g_err ? g_err : "missing input", (unsigned long)sizeof pool,
           (unsigned long)c->pool_bytes);
    return fail_run(c->name, "mha", "micro-f32", "q", g_err ? g_err : "missing input");
  }
  rc = af_mha_f32_ex(out, xq, xk, xv, kvl, &w, c->scale, s, &o, arena, ws, &st);
  if (rc != AF_OK) {
    char what[64];
    snprintf(what, sizeof what, "af_mha_f32_ex returned %s", af_status_name(rc));
    close_data();
    return fail_run(c->name, "mha", "micro-f32", "q", what);
  }
#ifdef AF_HARNESS_TAMPER
  if (no > 0) out[no - 1] += 0.5f;
#endif
  got[M_Q] = st.q;
  got[M_K] = st.k;
  got[M_V] = st.v;
  got[M_LSE] = st.lse;
  got[M_HEADS] = st.heads_out;
  got[M_CONCAT] = st.concat;
  got[M_OUT] = out;
  counts[M_Q] = counts[M_HEADS] = nq;
  counts[M_K] = counts[M_V] = nk;
  counts[M_LSE] = nl;
  counts[M_CONCAT] = counts[M_OUT] = no;
  for (m = 0; m < M_N; ++m) {
    const size_t mark = pool_used; /* file mode: one expected stage at a time */
    if (m >= M_SCORES && m <= M_WEIGHTS) continue;
    acc_compare(&a[m], got[m], (const float*)fetch(c, *refs[m], 0, (uint32_t)counts[m], 4),
                (const float*)fetch(c, *trefs[m], 0, (uint32_t)counts[m], 4), counts[m], 0);
    pool_used = mark;
  }
  /* The score-row stages through the probe, on the device's own projected
   * q and k (its per-head attention: [B, H, Lq, Lk]). */
  if (a[M_SCORES].skip == NULL || a[M_SCALED].skip == NULL || a[M_MASKED].skip == NULL ||
      a[M_WEIGHTS].skip == NULL) {
    float* rows = (float*)take((size_t)4 * Lk * 4 + 4);
    int32_t b, h, i;
    if (rows == NULL) {
      close_data();
      return fail_run(c->name, "mha", "micro-f32", "scores", "harness pool too small");
    }
    for (b = 0; b < B; ++b)
      for (h = 0; h < H; ++h)
        for (i = 0; i < Lq; ++i) {
          const uint32_t ro = (((uint32_t)b * H + h) * Lq + i) * (uint32_t)Lk;
          const size_t mark = pool_used;
          if (af_sdpa_f32_probe(rows, rows + Lk, rows + 2 * Lk, rows + 3 * Lk, NULL, st.q, st.k,
                                kvl, c->scale, &ps, &o, b, h, i) != AF_OK) {
            close_data();
            return fail_run(c->name, "mha", "micro-f32", "scores", "the probe refused the row");
          }
          for (m = M_SCORES; m <= M_WEIGHTS; ++m) {
            acc_compare(&a[m], rows + (size_t)(m - M_SCORES) * Lk,
                        (const float*)fetch(c, *refs[m], ro, (uint32_t)Lk, 4),
                        (const float*)fetch(c, *trefs[m], ro, (uint32_t)Lk, 4), Lk, (long)ro);
            pool_used = mark;
          }
        }
  }
  DUMP(af_dump_begin(uart_write, NULL, c->name, "mha", "micro-f32"));
  DUMP(for (m = 0; m < M_N; ++m) if (got[m] != NULL && !(m >= M_SCORES && m <= M_WEIGHTS)) {
    af_dump_tensor(uart_write, NULL, kNames[m], AF_DUMP_F32, a[m].rank, a[m].dims);
    af_dump_part(uart_write, NULL, kNames[m], AF_DUMP_F32, 0, got[m], (uint32_t)counts[m]);
  });
  DUMP(af_dump_done(uart_write, NULL, c->name));
  if (g_err != NULL) {
    close_data();
    return fail_run(c->name, "mha", "micro-f32", "q", g_err);
  }
  return report(c->name, "mha", "micro-f32", c->atol, c->rtol, a, M_N);
}

/* ------------------------------------------------------------ mha int8 --- */

/* The int8 path of an mha case (af_mha_s8; expectations teacher-forced in
 * float64 by export-c, src/golden/device_export.cc MhaS8): q, k and v within
 * 1 LSB of the float64 projection of the int8 inputs and weights;
 * heads_out within AF_S8_BOUND_LSB of the float64 SDPA on the expected q, k,
 * v (if the device's own q/k/v differ from those by a rounding, heads_out is
 * checked on a teacher-forced af_sdpa_s8_ex call instead, and the line says
 * so); concat exactly the heads_out rows side by side; out within 1 LSB plus
 * what the device's concat deviation can move it through w_o
 * (ceil(max|dconcat| * max_row sum|w_o| * m_o)). */
enum { MS_Q, MS_K, MS_V, MS_HEADS, MS_CONCAT, MS_OUT, MS_N };

static double qmult_real(const int32_t* m) { /* {mult, shift} -> real */
  return (double)m[0] * ldexp(1.0, (int)m[1] - 31);
}

/* int8 stage vs int8 expectation, in LSB, through the float accumulator. */
static void acc_compare_s8(stage_acc* a, const int8_t* got, const int8_t* exp, long n, float* gf,
                           float* ef) {
  long i;
  if (got == NULL || exp == NULL || gf == NULL || ef == NULL) return;
  for (i = 0; i < n; ++i) {
    gf[i] = (float)got[i];
    ef[i] = (float)exp[i];
  }
  acc_compare(a, gf, ef, NULL, n, 0);
}

static int run_mha_s8(const af_golden_case* c) {
  static const char* const kNames[MS_N] = {"q", "k", "v", "heads_out", "concat", "out"};
  const char* impl = "micro-s8";
  const af_mha_shape* s = &c->mshape;
  const int32_t B = s->batch, H = s->num_heads, Hkv = s->num_kv_heads, E = s->embed;
  const int32_t dh = E / H, Lq = s->q_len, Lk = s->kv_len;
  const uint32_t nq = (uint32_t)B * H * Lq * dh, nk = (uint32_t)B * Hkv * Lk * dh;
  const uint32_t no = (uint32_t)B * Lq * E;
  const uint32_t mx = nq > nk ? (nq > no ? nq : no) : (nk > no ? nk : no);
  stage_acc a[MS_N];
  af_mha_weights_s8 w;
  af_mha_stages_s8 st;
  af_s8_params p;
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  const int8_t *xq, *xk, *xv, *e;
  const int32_t *kvl, *mo;
  int8_t* out;
  float *gf, *ef;
  void* arena;
  size_t ws = af_mha_s8_workspace_bytes(s), mark;
  af_status rc;
  uint32_t hsh = 2166136261u, i;
  int m, forced = 0;
  double dcat = 0.0, wsum = 0.0; /* max concat deviation, largest out bound */
  pool_used = 0;
  g_err = NULL;
  acc_init(&a[MS_Q], kNames[MS_Q], 1, 0, 4, B, H, Lq, dh);
  acc_init(&a[MS_K], kNames[MS_K], 1, 0, 4, B, Hkv, Lk, dh);
  acc_init(&a[MS_V], kNames[MS_V], 1, 0, 4, B, Hkv, Lk, dh);
  acc_init(&a[MS_HEADS], kNames[MS_HEADS], AF_S8_BOUND_LSB, 0, 4, B, H, Lq, dh);
  acc_init(&a[MS_CONCAT], kNames[MS_CONCAT], 0, 0, 3, B, Lq, E, 0);
  acc_init(&a[MS_OUT], kNames[MS_OUT], 1, 0, 3, B, Lq, E, 0);
  if (af_s8_prepare(&p, &c->sq, &c->sk, &c->sv, &c->so, 1, c->scale) != AF_OK)
    return fail_run(c->name, "mha", impl, "q", "af_s8_prepare refused the scales");
  FETCH_MHA_INPUTS(int8_t, int32_t, 8, 32);
  w.m_q = (const af_qmult*)WHOLE(c->m_q, 4);
  w.m_k = (const af_qmult*)WHOLE(c->m_k, 4);
  w.m_v = (const af_qmult*)WHOLE(c->m_v, 4);
  mo = (const int32_t*)WHOLE(c->m_o, 4);
  w.m_o = (const af_qmult*)mo;
  o.window_left = c->window_left;
  o.window_right = c->window_right;
  if (c->mask_type != AF_MASK_NONE) {
    memcpy(o.mask_shape, c->mask_shape, sizeof o.mask_shape);
    o.mask_type = c->mask_type;
    o.mask = WHOLE(c->mask, c->mask_type == AF_MASK_BOOL ? 1 : 4);
    if (c->mask_type == AF_MASK_F32) { /* start-up conversion to raw-score units */
      int32_t* m32 = (int32_t*)take((size_t)c->mask.count * 4);
      if (o.mask == NULL || m32 == NULL ||
          af_s8_mask_prepare(m32, (const float*)o.mask, (int32_t)c->mask.count, c->sq, c->sk,
                             c->scale) != AF_OK) {
        close_data();
        return fail_run(c->name, "mha", impl, "heads_out",
                        g_err ? g_err : "af_s8_mask_prepare refused the mask");
      }
      o.mask_type = AF_MASK_S32;
      o.mask = m32;
    }
  }
  if (c->alibi.off != AF_G_ABSENT) {
    const float* sl = (const float*)WHOLE(c->alibi, 4);
    int32_t* a8 = (int32_t*)take((size_t)c->alibi.count * 4); /* [H] or [B,H] */
    if (sl == NULL || a8 == NULL ||
        af_s8_alibi_prepare(a8, sl, (int32_t)c->alibi.count, &c->sq, &c->sk, 1, c->scale) != AF_OK) {
      close_data();
      return fail_run(c->name, "mha", impl, "heads_out",
                      g_err ? g_err : "af_s8_alibi_prepare refused the slopes");
    }
    o.alibi_s8 = a8;
    o.alibi_per_batch = c->alibi_per_batch;
  }
  o.kv_align = c->kv_align;
  if (c->softcap > 0.f) {
    int32_t* c8 = (int32_t*)take((size_t)H * 16);
    if (c8 == NULL || af_s8_softcap_prepare(c8, c->softcap, H, &c->sq, &c->sk, 1, c->scale) != AF_OK) {
      close_data();
      return fail_run(c->name, "mha", impl, "heads_out",
                      g_err ? g_err : "af_s8_softcap_prepare refused the softcap");
    }
    o.softcap_s8 = c8;
  }
  out = (int8_t*)take((size_t)no + 4);
  st.q = (int8_t*)take((size_t)nq + 4);
  st.heads_out = (int8_t*)take((size_t)nq + 4);
  st.k = (int8_t*)take((size_t)nk + 4);
  st.v = (int8_t*)take((size_t)nk + 4);
  st.concat = (int8_t*)take((size_t)no + 4);
  arena = take(ws);
  if (g_err != NULL || !xq || !xk || !xv || !w.w_q || !w.w_k || !w.w_v || !w.w_o || !w.m_q ||
      !w.m_k || !w.m_v || !mo || !out || !st.q || !st.heads_out || !st.k || !st.v || !st.concat ||
      !arena) {
    close_data();
    return fail_run(c->name, "mha", impl, "q", g_err ? g_err : "missing input");
  }
  rc = af_mha_s8(out, xq, xk, xv, kvl, &w, &p, s, &o, arena, ws, &st);
  if (rc != AF_OK) {
    char what[64];
    snprintf(what, sizeof what, "af_mha_s8 returned %s", af_status_name(rc));
    close_data();
    return fail_run(c->name, "mha", impl, "q", what);
  }
#ifdef AF_HARNESS_TAMPER
  /* One output off by 9 LSB (must be named at 'out'), and one q element off
   * by a rounding (within q's 1 LSB: exercises the teacher-forced heads_out). */
  if (no > 0) out[no - 1] = (int8_t)(out[no - 1] > 0 ? out[no - 1] - 9 : out[no - 1] + 9);
  if (nq > 0) st.q[0] = (int8_t)(st.q[0] > 0 ? st.q[0] - 1 : st.q[0] + 1);
#endif
  for (i = 0; i < no; ++i) hsh = (hsh ^ (uint8_t)out[i]) * 16777619u;
  mark = pool_used;
  gf = (float*)take((size_t)mx * 4 + 4);
  ef = (float*)take((size_t)mx * 4 + 4);
  {
    const size_t cmp_mark = pool_used; /* file mode: one expected stage at a time */
    acc_compare_s8(&a[MS_Q], st.q, (const int8_t*)fetch(c, c->mq8, 0, nq, 1), nq, gf, ef);
    pool_used = cmp_mark;
    acc_compare_s8(&a[MS_K], st.k, (const int8_t*)fetch(c, c->mk8, 0, nk, 1), nk, gf, ef);
    pool_used = cmp_mark;
    acc_compare_s8(&a[MS_V], st.v, (const int8_t*)fetch(c, c->mv8, 0, nk, 1), nk, gf, ef);
    pool_used = cmp_mark;
  }
  if (a[MS_Q].max_abs > 0 || a[MS_K].max_abs > 0 || a[MS_V].max_abs > 0) {
    /* The device's q/k/v are off by a rounding: judge the attention on the
     * expected ones (teacher-forced), through the kernel af_mha_s8 calls. */
    const af_sdpa_shape sd = head_shape(s);
    const int8_t *q8e, *k8e, *v8e;
    int8_t* ho;
    void* sa;
    size_t sws;
    const size_t fmark = pool_used;
    sws = af_sdpa_s8_workspace_bytes(&sd);
    q8e = (const int8_t*)fetch(c, c->mq8, 0, nq, 1);
    k8e = (const int8_t*)fetch(c, c->mk8, 0, nk, 1);
    v8e = (const int8_t*)fetch(c, c->mv8, 0, nk, 1);
    ho = (int8_t*)take((size_t)nq + 4);
    sa = take(sws);
    if (q8e == NULL || k8e == NULL || v8e == NULL || ho == NULL || sa == NULL ||
        af_sdpa_s8_ex(ho, q8e, k8e, v8e, kvl, &p, &sd, &o, sa, sws) != AF_OK) {
      close_data();
      return fail_run(c->name, "mha", impl, "heads_out",
                      g_err ? g_err : "the teacher-forced af_sdpa_s8_ex failed");
    }
    forced = 1;
    e = (const int8_t*)fetch(c, c->heads_out8, 0, nq, 1);
    acc_compare_s8(&a[MS_HEADS], ho, e, nq, gf, ef);
    pool_used = fmark;
  } else {
    const size_t cmp_mark = pool_used;
    e = (const int8_t*)fetch(c, c->heads_out8, 0, nq, 1);
    acc_compare_s8(&a[MS_HEADS], st.heads_out, e, nq, gf, ef);
    pool_used = cmp_mark;
  }
  { /* concat: the device's own heads_out rows side by side, exactly. Its
     * deviation from the expected heads_out (dc) bounds each output:
     * |out - out8e| <= 1 + ceil(sum_e |dc[e]| |w_o[f][e]| m_o[f]). */
    int32_t b, t, f, k;
    const int8_t* hoe = (const int8_t*)fetch(c, c->heads_out8, 0, nq, 1);
    int8_t* want = (int8_t*)take((size_t)no + 4);
    int8_t* dc = (int8_t*)take((size_t)no + 4);
    const int8_t* oe;
    if (hoe == NULL || want == NULL || dc == NULL) {
      close_data();
      return fail_run(c->name, "mha", impl, "concat", g_err ? g_err : "missing heads_out");
    }
    for (b = 0; b < B; ++b)
      for (t = 0; t < Lq; ++t)
        for (f = 0; f < E; ++f) {
          const size_t src = (((size_t)b * H + f / dh) * Lq + t) * dh + f % dh;
          const size_t dst = ((size_t)b * Lq + t) * E + f;
          const int d = st.concat[dst] - hoe[src];
          want[dst] = st.heads_out[src];
          dc[dst] = (int8_t)(d < -127 ? -127 : (d > 127 ? 127 : d));
          if (fabs((double)d) > dcat) dcat = fabs((double)d);
        }
    acc_compare_s8(&a[MS_CONCAT], st.concat, want, no, gf, ef);
    oe = (const int8_t*)fetch(c, c->out8m, 0, no, 1);
    if (oe == NULL) {
      close_data();
      return fail_run(c->name, "mha", impl, "out", g_err ? g_err : "missing out");
    }
    for (k = 0; k < B * Lq; ++k)
      for (f = 0; f < E; ++f) {
        const size_t at = (size_t)k * E + f;
        const double diff = fabs((double)out[at] - oe[at]);
        double d = 0.0, tol;
        int32_t e2;
        for (e2 = 0; e2 < E; ++e2)
          d += fabs((double)dc[(size_t)k * E + e2]) * fabs((double)w.w_o[(size_t)f * E + e2]);
        tol = 1.0 + ceil(d * qmult_real(mo + 2 * f) - 1e-9);
        if (tol > wsum) wsum = tol;
        if (diff > a[MS_OUT].max_abs) a[MS_OUT].max_abs = diff;
        if (oe[at] != 0 && diff / fabs((double)oe[at]) > a[MS_OUT].max_rel)
          a[MS_OUT].max_rel = diff / fabs((double)oe[at]);
        if (diff > tol) {
          if (a[MS_OUT].first_bad < 0) {
            a[MS_OUT].first_bad = (long)at;
            a[MS_OUT].got_bad = out[at];
            a[MS_OUT].exp_bad = oe[at];
          }
          a[MS_OUT].bad++;
        }
      }
    a[MS_OUT].atol = wsum;
  }
  pool_used = mark;
  DUMP(af_dump_begin(uart_write, NULL, c->name, "mha", impl));
  DUMP(for (m = 0; m < MS_N; ++m) {
    const int8_t* g8 = m == MS_Q ? st.q : m == MS_K ? st.k : m == MS_V ? st.v
                     : m == MS_HEADS ? st.heads_out : m == MS_CONCAT ? st.concat : out;
    af_dump_tensor(uart_write, NULL, kNames[m], AF_DUMP_I8, a[m].rank, a[m].dims);
    af_dump_part(uart_write, NULL, kNames[m], AF_DUMP_I8, 0, g8, (uint32_t)(a[m].rank == 3 ? no
                 : m == MS_K || m == MS_V ? nk : nq));
  });
  DUMP(af_dump_done(uart_write, NULL, c->name));
  if (g_err != NULL) {
    close_data();
    return fail_run(c->name, "mha", impl, "q", g_err);
  }
  printf("  int8 checksum %s 0x%08lx\n", c->name, (unsigned long)hsh);
  m = report(c->name, "mha", impl, 1.0, 0.0, a, MS_N);
  if (forced)
    printf("  heads_out judged teacher-forced: the device's q/k/v are a rounding off the "
           "expected\n");
  printf("  out within 1 LSB + its concat deviation through w_o (%g LSB concat, %g LSB at most)\n",
         dcat, wsum);
  return m;
}

int main(void) {
  int i, failed = 0, sdpa = 0, mha = 0, s8 = 0, mha8 = 0;
  const uint32_t one = 1;
  if (*(const uint8_t*)&one != 1) {
    printf("SUMMARY: big-endian target: the exported case data is little-endian\n");
    return 125;
  }
  for (i = 0; i < kNumCases; ++i) {
    const af_golden_case* c = kCases[i];
    if (open_data(c) != 0) {
      printf("case %s: cannot open data file %s/%s\n", c->name, AF_HARNESS_DATA_DIR,
             c->data_file);
      ++failed;
      continue;
    }
    case_peak = 0;
    if (c->kind == AF_G_MHA) {
      ++mha;
      failed += run_mha(c);
      if (c->has_s8) {
        ++mha8;
        failed += run_mha_s8(c);
      }
    } else {
      ++sdpa;
      failed += run_sdpa(c, 0);
      if (c->has_s8) {
        ++s8;
        failed += run_sdpa(c, 1);
      }
    }
    close_data();
    if (case_peak > c->pool_bytes) { /* export-c's number must be an upper bound */
      printf("case %s: the harness used %lu pool bytes, export-c said %lu\n", c->name,
             (unsigned long)case_peak, (unsigned long)c->pool_bytes);
      ++failed;
    }
  }
  printf("SUMMARY: %d sdpa cases (%d int8), %d mha cases (%d int8), %d mismatching, pool %lu "
         "bytes (peak %lu)\n",
         sdpa, s8, mha, mha8, failed, (unsigned long)sizeof pool, (unsigned long)pool_peak);
  return failed > 125 ? 125 : failed;
}
