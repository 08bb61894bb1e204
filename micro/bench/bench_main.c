/* bench_main.c — instruction counts of the micro kernels on an emulated
 * target (tools/edge/bench.sh, docs/edge.md "Numbers"). Counts come from the
 * emulator under -icount shift=0: rv32 reads minstret (rdinstret, exact);
 * Cortex-M reads SysTick while QEMU runs 1 instruction per ns; the
 * ticks-per-instruction factor is calibrated with a loop of known length
 * (docs/edge.md). Each kernel runs once on L=128, D=64, 4 heads, causal
 * top_left (B=1, Hkv=4); a naive three-pass C version with a full score row
 * runs on the same data; then the option paths on the same problem: an
 * all-true bool mask [L, L] (the per-key mask work, no key hidden), a
 * sliding window of 64 keys (window_left = 63) and ALiBi. Prints one
 * "BENCH name instr N macs M instr_per_mac X arena A" line per kernel; M
 * counts the useful MACs (Q.K and P.V over the visible keys only). Inputs are
 * deterministic pseudo-random. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attnflow/micro.h"

#define L 128
#define D 64
#define H 4

static float qf[H * L * D], kf[H * L * D], vf[H * L * D], of[H * L * D];
static uint8_t mask_all[L * L];
static float slopes[H] = {0.25f, 0.0625f, 0.015625f, 0.00390625f};
static int32_t slopes8[H];
static int8_t q8[H * L * D], k8[H * L * D], v8[H * L * D], o8[H * L * D], v8t[H * L * D];
static uint32_t arena[4096];

#if defined(__riscv)
static inline uint32_t counter(void) {
  uint32_t r;
  __asm__ volatile("rdinstret %0" : "=r"(r));
  return r;
}
#define INSTR(c0, c1) ((c1) - (c0))
static void counter_init(void) {}
#else
#define SYST_CSR (*(volatile uint32_t*)0xE000E010)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018)
static void counter_init(void) {
  SYST_RVR = 0xFFFFFF;
  SYST_CVR = 0;
  SYST_CSR = 5;
}
static inline uint32_t counter(void) { return SYST_CVR; }
/* Down-counter, 24 bits. mps2-an386 ticks every 40 instructions, mps2-an505
 * every 50: the tick->instruction factor is measured by the calibration loop
 * in main (cal_ticks for 800000 instructions), not assumed. */
static uint32_t cal_ticks = 20000;
#define TICKS(c0, c1) (((c0) - (c1)) & 0xFFFFFFu)
#define INSTR(c0, c1) ((uint32_t)((uint64_t)TICKS(c0, c1) * 800000u / cal_ticks))
#endif

static uint32_t rng = 12345u;
static int32_t rnd(void) {
  rng = rng * 1664525u + 1013904223u;
  return (int32_t)(rng >> 24) - 128;
}

/* ---- naive three-pass baselines (full score row), compiled the same way */
static float row_f[L];
static int32_t row_i[L];
static void naive_f32(float* out, const float* q, const float* k, const float* v, float scale) {
  int h, i, j, d;
  for (h = 0; h < H; ++h)
    for (i = 0; i < L; ++i) {
      const float* qr = q + (h * L + i) * D;
      float mx = -INFINITY, sum = 0.f;
      float* o = out + (h * L + i) * D;
      for (j = 0; j <= i; ++j) {
        float s = 0.f;
        for (d = 0; d < D; ++d) s += qr[d] * k[(h * L + j) * D + d];
        row_f[j] = s * scale;
        if (row_f[j] > mx) mx = row_f[j];
      }
      for (j = 0; j <= i; ++j) {
        row_f[j] = expf(row_f[j] - mx);
        sum += row_f[j];
      }
      for (d = 0; d < D; ++d) o[d] = 0.f;
      for (j = 0; j <= i; ++j)
        for (d = 0; d < D; ++d) o[d] += row_f[j] * v[(h * L + j) * D + d];
      for (d = 0; d < D; ++d) o[d] /= sum;
    }
}
static void naive_s8(int8_t* out, const int8_t* q, const int8_t* k, const int8_t* v,
                     const af_s8_params* p) {
  int h, i, j, d;
  static int32_t acc[D];
  for (h = 0; h < H; ++h)
    for (i = 0; i < L; ++i) {
      const int8_t* qr = q + (h * L + i) * D;
      int32_t mx = -2147483647, sum = 0;
      for (j = 0; j <= i; ++j) {
        int32_t s = 0;
        for (d = 0; d < D; ++d) s += qr[d] * k[(h * L + j) * D + d];
        row_i[j] = s;
        if (s > mx) mx = s;
      }
      for (j = 0; j <= i; ++j) {
        row_i[j] = af_s8_exp2_neg_q15(af_s8_mul_by_qmult(mx - row_i[j], p->exp_mult[0]));
        sum += row_i[j];
      }
      for (d = 0; d < D; ++d) acc[d] = 0;
      for (j = 0; j <= i; ++j)
        for (d = 0; d < D; ++d) acc[d] += row_i[j] * v[(h * L + j) * D + d];
      for (d = 0; d < D; ++d) {
        int32_t y = af_s8_mul_by_qmult((acc[d] / sum), p->out_mult[0]);
        out[(h * L + i) * D + d] = (int8_t)(y > 127 ? 127 : (y < -128 ? -128 : y));
      }
    }
}

static uint32_t g_macs = 2u * D * H * (L * (L + 1) / 2);
static void report(const char* name, uint32_t instr, uint32_t arena_bytes) {
  const uint32_t macs = g_macs;
  printf("BENCH %-10s instr %10lu macs %8lu instr_per_mac %d.%02d arena %lu\n", name,
         (unsigned long)instr, (unsigned long)macs, (int)(instr / macs),
         (int)((instr % macs) * 100u / macs), (unsigned long)arena_bytes);
}

int main(void) {
  int i;
  uint32_t c0, c1;
#ifndef BENCH_CAUSAL
#define BENCH_CAUSAL AF_CAUSAL_TOP_LEFT
#endif
  af_sdpa_shape s = {1, H, H, L, L, D, D, BENCH_CAUSAL};
  af_s8_params p;
  const float sq = 1.f / 64, sk = 1.f / 64, sv = 1.f / 128, so = 1.f / 128;
  const float scale = 0.125f;
  for (i = 0; i < H * L * D; ++i) {
    q8[i] = (int8_t)rnd();
    k8[i] = (int8_t)rnd();
    v8[i] = (int8_t)rnd();
    qf[i] = q8[i] * sq;
    kf[i] = k8[i] * sk;
    vf[i] = v8[i] * sv;
  }
  af_s8_prepare(&p, &sq, &sk, &sv, &so, 1, scale);
  counter_init();
  {
    /* Calibration: a loop of exactly 8 instructions per iteration
     * (6 nops + decrement + branch), 100000 iterations = 800000. */
    uint32_t it = 100000;
    c0 = counter();
#if defined(__riscv)
    __asm__ volatile("1: nop; nop; nop; nop; nop; nop; addi %0, %0, -1; bnez %0, 1b" : "+r"(it));
#else
    __asm__ volatile("1: nop; nop; nop; nop; nop; nop; subs %0, %0, #1; bne 1b" : "+r"(it) : : "cc");
#endif
    c1 = counter();
#if !defined(__riscv)
    cal_ticks = TICKS(c0, c1);
    printf("CALIBRATION %lu SysTick ticks for 800000 instructions\n", (unsigned long)cal_ticks);
#endif
    printf("CALIBRATION 800000 instructions counted as %lu\n", (unsigned long)INSTR(c0, c1));
  }
#ifndef BENCH_SKIP_F32
  c0 = counter();
  if (af_sdpa_f32(of, 0, qf, kf, vf, 0, scale, &s, arena, sizeof arena) != AF_OK) return 2;
  c1 = counter();
  report("kit_f32", INSTR(c0, c1), (uint32_t)af_sdpa_f32_workspace_bytes(&s));
  c0 = counter();
  naive_f32(of, qf, kf, vf, scale);
  c1 = counter();
  report("naive_f32", INSTR(c0, c1), (uint32_t)(sizeof row_f));
#endif
  c0 = counter();
  if (af_sdpa_s8(o8, q8, k8, v8, 0, &p, &s, arena, sizeof arena) != AF_OK) return 3;
  c1 = counter();
  report("kit_s8", INSTR(c0, c1), (uint32_t)af_sdpa_s8_workspace_bytes(&s));
  c0 = counter();
  naive_s8(o8, q8, k8, v8, &p);
  c1 = counter();
  report("naive_s8", INSTR(c0, c1), (uint32_t)(sizeof row_i + D * 4));
  {
    /* The option paths on the same problem. */
    af_sdpa_opts mo = AF_SDPA_OPTS_INIT, wo = AF_SDPA_OPTS_INIT, ao = AF_SDPA_OPTS_INIT;
    uint32_t wm = 0;
    memset(mask_all, 1, sizeof mask_all);
    mo.mask_type = AF_MASK_BOOL;
    mo.mask = mask_all;
    mo.mask_shape[2] = L;
    mo.mask_shape[3] = L;
    wo.window_left = 63;
    for (i = 0; i < L; ++i) wm += (uint32_t)(i < 64 ? i + 1 : 64);
    if (af_s8_alibi_prepare(slopes8, slopes, H, &sq, &sk, 1, scale) != AF_OK) return 4;
#ifndef BENCH_SKIP_F32
    ao.alibi_slopes = slopes;
    c0 = counter();
    if (af_sdpa_f32_ex(of, 0, qf, kf, vf, 0, scale, &s, &mo, arena, sizeof arena) != AF_OK) return 5;
    c1 = counter();
    report("kit_f32_mask", INSTR(c0, c1), (uint32_t)af_sdpa_f32_workspace_bytes(&s));
    c0 = counter();
    if (af_sdpa_f32_ex(of, 0, qf, kf, vf, 0, scale, &s, &ao, arena, sizeof arena) != AF_OK) return 6;
    c1 = counter();
    report("kit_f32_alibi", INSTR(c0, c1), (uint32_t)af_sdpa_f32_workspace_bytes(&s));
    g_macs = 2u * D * H * wm;
    c0 = counter();
    if (af_sdpa_f32_ex(of, 0, qf, kf, vf, 0, scale, &s, &wo, arena, sizeof arena) != AF_OK) return 7;
    c1 = counter();
    report("kit_f32_win", INSTR(c0, c1), (uint32_t)af_sdpa_f32_workspace_bytes(&s));
    g_macs = 2u * D * H * (L * (L + 1) / 2);
#endif
    ao.alibi_slopes = 0;
    ao.alibi_s8 = slopes8;
    {
      /* V in the column layout (AF_V_COLS: [H, D, L]), the int8 cache's. */
      af_sdpa_opts co = AF_SDPA_OPTS_INIT;
      int hh, jj, dd;
      for (hh = 0; hh < H; ++hh)
        for (jj = 0; jj < L; ++jj)
          for (dd = 0; dd < D; ++dd) v8t[(hh * D + dd) * L + jj] = v8[(hh * L + jj) * D + dd];
      co.v_layout = AF_V_COLS;
      c0 = counter();
      if (af_sdpa_s8_ex(o8, q8, k8, v8t, 0, &p, &s, &co, arena, sizeof arena) != AF_OK) return 11;
      c1 = counter();
      report("kit_s8_cols", INSTR(c0, c1), (uint32_t)af_sdpa_s8_workspace_bytes(&s));
    }
    c0 = counter();
    if (af_sdpa_s8_ex(o8, q8, k8, v8, 0, &p, &s, &mo, arena, sizeof arena) != AF_OK) return 8;
    c1 = counter();
    report("kit_s8_mask", INSTR(c0, c1), (uint32_t)af_sdpa_s8_workspace_bytes(&s));
    c0 = counter();
    if (af_sdpa_s8_ex(o8, q8, k8, v8, 0, &p, &s, &ao, arena, sizeof arena) != AF_OK) return 9;
    c1 = counter();
    report("kit_s8_alibi", INSTR(c0, c1), (uint32_t)af_sdpa_s8_workspace_bytes(&s));
    g_macs = 2u * D * H * wm;
    c0 = counter();
    if (af_sdpa_s8_ex(o8, q8, k8, v8, 0, &p, &s, &wo, arena, sizeof arena) != AF_OK) return 10;
    c1 = counter();
    report("kit_s8_win", INSTR(c0, c1), (uint32_t)af_sdpa_s8_workspace_bytes(&s));
  }
  return 0;
}
