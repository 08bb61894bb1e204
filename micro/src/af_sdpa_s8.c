/* af_sdpa_s8.c — int8 scaled dot-product attention with integer arithmetic
 * only (no float type, no float instruction: tools/edge/run_edge.sh
 * disassembles the rv32imc object and fails on any soft-float call), with
 * masks, ALiBi and sliding windows (af_sdpa_opts) and a per-row stage probe.
 *
 * Scheme (docs/edge.md "int8 scheme"): symmetric int8 q, k, v; int32 scores
 * s = q.k (|s| <= 127*128*D < 2^30 for D <= 65535); a mask (int32, in raw
 * score units) and ALiBi (Q8 slope in raw score units) are added and the
 * sum clamped to [-2^30, 2^30 - 1], so m - s never overflows; a hidden key
 * is AF_S8_MASKED and gets weight 0. For a row with running max m, key weight
 *   w = exp2neg_q15(u) >> wshift,  u = round((m - s) * exp_mult)  (Q8 base-2)
 * from a 256-entry table of round(2^15 * 2^(-f/256)) (entry 0 is 32767, not
 * 32768, so every weight fits int16 for the SMLAD path); the int32 accumulators
 * acc = sum w*v and the weight sum l are rescaled by exp2neg_q15 when a later
 * key tile raises the max (online softmax, one tile of AF_S8_KEY_TILE int32
 * scores in the arena, no full score row); out = round((acc/l) * sv/so)
 * saturated to int8. wshift keeps |acc| < 2^31: n_keys * 2^(22-wshift) < 2^31.
 * Every rounding is "add half, arithmetic shift" (round half up), so a NumPy
 * model of the same integer steps reproduces every bit. Keys outside a row's
 * visible range [first, last] are never read. */
#include "af_internal.h"

static const uint16_t kExp2NegQ15[256] = {
    32767, 32679, 32591, 32503, 32415, 32327, 32240, 32153, 32066, 31979, 31893, 31806,
    31720, 31635, 31549, 31464, 31379, 31294, 31209, 31125, 31041, 30957, 30873, 30790,
    30706, 30623, 30541, 30458, 30376, 30293, 30212, 30130, 30048, 29967, 29886, 29805,
    29725, 29644, 29564, 29484, 29405, 29325, 29246, 29167, 29088, 29009, 28931, 28852,
    28774, 28697, 28619, 28542, 28464, 28388, 28311, 28234, 28158, 28082, 28006, 27930,
    27855, 27779, 27704, 27629, 27554, 27480, 27406, 27332, 27258, 27184, 27110, 27037,
    26964, 26891, 26818, 26746, 26674, 26601, 26530, 26458, 26386, 26315, 26244, 26173,
    26102, 26031, 25961, 25891, 25821, 25751, 25681, 25612, 25543, 25474, 25405, 25336,
    25268, 25199, 25131, 25063, 24995, 24928, 24860, 24793, 24726, 24659, 24593, 24526,
    24460, 24394, 24328, 24262, 24196, 24131, 24066, 24001, 23936, 23871, 23806, 23742,
    23678, 23614, 23550, 23486, 23423, 23359, 23296, 23233, 23170, 23108, 23045, 22983,
    22921, 22859, 22797, 22735, 22674, 22613, 22552, 22491, 22430, 22369, 22309, 22248,
    22188, 22128, 22068, 22009, 21949, 21890, 21831, 21772, 21713, 21654, 21595, 21537,
    21479, 21421, 21363, 21305, 21247, 21190, 21133, 21076, 21019, 20962, 20905, 20849,
    20792, 20736, 20680, 20624, 20568, 20513, 20457, 20402, 20347, 20292, 20237, 20182,
    20127, 20073, 20019, 19965, 19911, 19857, 19803, 19750, 19696, 19643, 19590, 19537,
    19484, 19431, 19379, 19326, 19274, 19222, 19170, 19118, 19066, 19015, 18963, 18912,
    18861, 18810, 18759, 18708, 18658, 18607, 18557, 18507, 18457, 18407, 18357, 18308,
    18258, 18209, 18160, 18110, 18061, 18013, 17964, 17915, 17867, 17819, 17770, 17722,
    17674, 17627, 17579, 17531, 17484, 17437, 17390, 17343, 17296, 17249, 17202, 17156,
    17109, 17063, 17017, 16971, 16925, 16879, 16834, 16788, 16743, 16697, 16652, 16607,
    16562, 16518, 16473, 16428,
};

/* tanh(i / 32) in Q16 for i = 0..208 (x in [0, 6.5]), round-to-nearest,
 * capped at 65535; beyond 6.5 tanh is 1 within 4.5e-6 (docs/edge.md "int8
 * softcap"). */
#define AF_TANH_STEPS 208
static const uint16_t kTanhQ16[AF_TANH_STEPS + 1] = {
    0, 2047, 4091, 6126, 8150, 10157, 12146, 14112, 16051, 17961, 19838, 21681,
    23485, 25250, 26973, 28652, 30285, 31873, 33412, 34904, 36346, 37740, 39084, 40379,
    41625, 42823, 43972, 45075, 46131, 47142, 48108, 49031, 49912, 50752, 51552, 52314,
    53038, 53727, 54382, 55003, 55593, 56152, 56683, 57185, 57660, 58110, 58536, 58939,
    59320, 59680, 60019, 60340, 60643, 60929, 61199, 61454, 61694, 61920, 62134, 62335,
    62524, 62703, 62871, 63029, 63179, 63319, 63451, 63576, 63693, 63803, 63907, 64004,
    64096, 64182, 64263, 64340, 64412, 64479, 64543, 64603, 64659, 64712, 64761, 64808,
    64852, 64893, 64932, 64968, 65003, 65035, 65065, 65093, 65120, 65145, 65169, 65191,
    65212, 65231, 65250, 65267, 65283, 65299, 65313, 65327, 65339, 65351, 65362, 65373,
    65383, 65392, 65401, 65409, 65417, 65424, 65431, 65437, 65443, 65449, 65454, 65459,
    65464, 65468, 65472, 65476, 65480, 65483, 65486, 65489, 65492, 65495, 65497, 65500,
    65502, 65504, 65506, 65508, 65509, 65511, 65512, 65514, 65515, 65516, 65518, 65519,
    65520, 65521, 65522, 65523, 65523, 65524, 65525, 65526, 65526, 65527, 65527, 65528,
    65528, 65529, 65529, 65530, 65530, 65530, 65531, 65531, 65531, 65532, 65532, 65532,
    65532, 65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534,
    65534, 65534, 65534, 65535, 65535, 65535, 65535, 65535, 65535, 65535, 65535, 65535,
    65535, 65535, 65535, 65535, 65535, 65535, 65535, 65535, 65535, 65535, 65535, 65535,
    65535, 65535, 65535, 65535, 65535,
};

/* round(p / 2^sh) for sh in [0, 63], half up; 0..-1 for larger shifts. */
static int64_t af_round_shift64(int64_t p, int32_t sh) {
  if (sh <= 0) return p;
  if (sh >= 63) return p < 0 ? -1 : 0;
  return (p + ((int64_t)1 << (sh - 1))) >> sh;
}

static int32_t af_sat32(int64_t x) {
  return x > 2147483647 ? 2147483647 : (x < -2147483647 - 1 ? -2147483647 - 1 : (int32_t)x);
}

int32_t af_s8_mul_by_qmult(int32_t x, af_qmult m) {
  /* 31 - shift in 64 bits: defined for any shift (callers check the range;
   * an out-of-range one gives a saturated result, never undefined behaviour) */
  const int64_t sh = 31 - (int64_t)m.shift;
  return af_sat32(af_round_shift64((int64_t)x * m.mult, sh < 0 ? 0 : (sh > 63 ? 63 : (int32_t)sh)));
}

int32_t af_s8_exp2_neg_q15(int32_t u) {
  int32_t e;
  if (u <= 0) return 32767;
  e = u >> 8;
  if (e >= 16) return 0;
  return ((int32_t)kExp2NegQ15[u & 255] + ((1 << e) >> 1)) >> e;
}

/* Arena: two rows' score tiles and accumulators (rows are processed in
 * pairs so every K/V byte loaded serves two query rows). */
size_t af_sdpa_s8_workspace_bytes(const af_sdpa_shape* s) {
  if (af_sdpa_check_shape(s) != AF_OK) return 0;
  return (size_t)2 * (AF_S8_KEY_TILE + s->v_dim) * sizeof(int32_t);
}

/* Online-softmax state of one query row. */
typedef struct {
  int32_t m;       /* running max score (valid when started) */
  int32_t l;       /* sum of weights */
  int32_t started; /* a tile has been seen */
  int32_t* acc;    /* [Dv] sum of w * v */
} af_s8_row;

/* ------------------------------------------------------------ kernels --- */
/* Two consecutive query rows (q, q + D) x 4 keys: per d, 2 q + 4 k loads
 * serve 8 MACs; two d per iteration (AF_QK2X4_BODY). With D a compile-time
 * constant every offset is an immediate and only two pointers move. */
#define AF_MAC_S8(x, k, a) a += x * k;
AF_INLINE void af_qk2x4_s8_c(int32_t* s0, int32_t* s1, const int8_t* q, const int8_t* k,
                           int32_t D) {
  AF_QK2X4_BODY(int32_t, AF_MAC_S8)
}
#undef AF_MAC_S8

AF_INLINE int32_t af_qk1_s8(const int8_t* q, const int8_t* k, int32_t D) {
  int32_t a = 0, d;
  for (d = 0; d < D; ++d) a += (int32_t)q[d] * k[d];
  return a;
}

/* Two rows' accumulators (acc, acc + Dv) += their weights p, r x 4 value
 * rows: per d, 4 v loads serve 8 MACs; two d per iteration. */
#define AF_PV_STEP(o)                                                            \
  {                                                                             \
    const int32_t v0 = v[o], v1 = v[Dv + (o)], v2 = v[2 * Dv + (o)], v3 = v[3 * Dv + (o)]; \
    acc[o] += p0 * v0 + p1 * v1 + p2 * v2 + p3 * v3;                            \
    acc[Dv + (o)] += r0 * v0 + r1 * v1 + r2 * v2 + r3 * v3;                     \
  }
AF_INLINE void af_pv2x4_s8_c(int32_t* acc, const int32_t* p, const int32_t* r, const int8_t* v,
                           int32_t Dv) {
  AF_PV2X4_BODY(int32_t, AF_PV_STEP)
}
#undef AF_PV_STEP

AF_INLINE void af_pv1_s8(int32_t* acc, int32_t w, const int8_t* v, int32_t Dv) {
  int32_t d;
  for (d = 0; d < Dv; ++d) acc[d] += w * v[d];
}

/* AF_V_COLS: value dimension d of keys t = 0..n-1 is vt[d * ldv + t]; P.V is
 * a dot product over the keys. One row / two rows (acc, acc + Dv). */
AF_INLINE void af_pvt1_s8_c(int32_t* acc, const int32_t* w, const int8_t* vt, int32_t ldv,
                            int32_t n, int32_t Dv) {
  int32_t d, t;
  for (d = 0; d < Dv; ++d, vt += ldv) {
    int32_t a = acc[d];
    for (t = 0; t < n; ++t) a += w[t] * vt[t];
    acc[d] = a;
  }
}
AF_INLINE void af_pvt2_s8_c(int32_t* acc, const int32_t* w, const int32_t* u, const int8_t* vt,
                            int32_t ldv, int32_t n, int32_t Dv) {
  int32_t d, t;
  for (d = 0; d < Dv; ++d, vt += ldv) {
    int32_t a = acc[d], b = acc[Dv + d];
    for (t = 0; t < n; ++t) {
      const int32_t x = vt[t];
      a += w[t] * x;
      b += u[t] * x;
    }
    acc[d] = a;
    acc[Dv + d] = b;
  }
}

#if defined(__ARM_FEATURE_DSP)
/* Cortex-M DSP extension (M4, M33, M7): SXTB16 unpacks int8 pairs, SMLAD
 * does two 16x16 MACs into an int32. Integer sums are exact, so results are
 * bit-identical to the C kernels above (which other cores use); the
 * Thumb-2 assembly below (AF_S8_ASM) likewise. */
#include <arm_acle.h>

/* PKHBT lo(a) | lo(b) << 16 and PKHTB hi(b) << 16 | hi(a), one each. */
AF_INLINE uint32_t af_pkhbt(uint32_t a, uint32_t b) {
  uint32_t r;
  __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
AF_INLINE uint32_t af_pkhtb(uint32_t b, uint32_t a) {
  uint32_t r;
  __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(b), "r"(a));
  return r;
}
/* SXTB16 with its built-in ROR #8 (bytes 1 and 3), one instruction. */
AF_INLINE uint32_t af_sxtb16_ror8(uint32_t x) {
  uint32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
  return r;
}

AF_INLINE uint32_t af_ld32(const int8_t* p) {
  uint32_t w;
  AF_COPY(&w, p, 4); /* one LDR; unaligned access is legal on M4/M33 */
  return w;
}

/* One query row x 4 keys; q unpacked per 4 d, each key word unpacked once:
 * 23 instructions per 16 MACs, few enough registers for no spills. */
AF_INLINE void af_qk1x4_s8_dsp(int32_t* s, const int8_t* q, const int8_t* k, int32_t D) {
  int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, d;
  for (d = 0; d + 4 <= D; d += 4, q += 4, k += 4) {
    const uint32_t xw = af_ld32(q);
    const int32_t x02 = (int32_t)__sxtb16(xw), x13 = (int32_t)af_sxtb16_ror8(xw);
    uint32_t kw;
#define AF_DSP_KEY(j, a)                                      \
    kw = af_ld32(k + (j) * D);                                \
    a = __smlad(x02, (int32_t)__sxtb16(kw), a);               \
    a = __smlad(x13, (int32_t)af_sxtb16_ror8(kw), a);
    AF_DSP_KEY(0, a0)
    AF_DSP_KEY(1, a1)
    AF_DSP_KEY(2, a2)
    AF_DSP_KEY(3, a3)
#undef AF_DSP_KEY
  }
  for (; d < D; ++d, ++q, ++k) {
    const int32_t x = q[0];
    a0 += x * k[0];
    a1 += x * k[D];
    a2 += x * k[2 * D];
    a3 += x * k[3 * D];
  }
  s[0] = a0;
  s[1] = a1;
  s[2] = a2;
  s[3] = a3;
}

/* Two query rows x 2 keys: each row's q word unpacked once per 4 d serves
 * both keys, each key word unpacked once serves both rows: 20 instructions
 * per 16 MACs with 13 live registers (no spills). */
AF_INLINE void af_qk2x2_s8_dsp(int32_t* s0, int32_t* s1, const int8_t* q, const int8_t* k,
                               int32_t D) {
  int32_t a0 = 0, a1 = 0, b0 = 0, b1 = 0, d;
  const int8_t* q1 = q + D;
  /* 4 d: 2 q words + 2 k words, 6 SXTB16, 8 SMLAD; two steps per iteration
   * so the loop's own compare and branch count once per 32 MACs. */
#define AF_QK22_STEP(o)                                                       \
  {                                                                           \
    const uint32_t xw = af_ld32(q + d + (o)), yw = af_ld32(q1 + d + (o));     \
    const int32_t x02 = (int32_t)__sxtb16(xw), x13 = (int32_t)af_sxtb16_ror8(xw); \
    const int32_t y02 = (int32_t)__sxtb16(yw), y13 = (int32_t)af_sxtb16_ror8(yw); \
    uint32_t kw = af_ld32(k + d + (o));                                       \
    int32_t e = (int32_t)__sxtb16(kw), od = (int32_t)af_sxtb16_ror8(kw);      \
    a0 = __smlad(x02, e, a0);                                                 \
    a0 = __smlad(x13, od, a0);                                                \
    b0 = __smlad(y02, e, b0);                                                 \
    b0 = __smlad(y13, od, b0);                                                \
    kw = af_ld32(k + D + d + (o));                                            \
    e = (int32_t)__sxtb16(kw);                                                \
    od = (int32_t)af_sxtb16_ror8(kw);                                         \
    a1 = __smlad(x02, e, a1);                                                 \
    a1 = __smlad(x13, od, a1);                                                \
    b1 = __smlad(y02, e, b1);                                                 \
    b1 = __smlad(y13, od, b1);                                                \
  }
  for (d = 0; d + 8 <= D; d += 8) {
    AF_QK22_STEP(0)
    AF_QK22_STEP(4)
  }
  if (d + 4 <= D) {
    AF_QK22_STEP(0)
    d += 4;
  }
#undef AF_QK22_STEP
  for (; d < D; ++d) {
    const int32_t x = q[d], y = q1[d], k0 = k[d], k1 = k[D + d];
    a0 += x * k0;
    a1 += x * k1;
    b0 += y * k0;
    b1 += y * k1;
  }
  s0[0] = a0;
  s0[1] = a1;
  s1[0] = b0;
  s1[1] = b1;
}

AF_INLINE void af_qk2x4_s8_dsp(int32_t* s0, int32_t* s1, const int8_t* q, const int8_t* k,
                               int32_t D) {
  af_qk2x2_s8_dsp(s0, s1, q, k, D);
  af_qk2x2_s8_dsp(s0 + 2, s1 + 2, q, k + 2 * D, D);
}

/* Two query rows x 1 key (a tile's odd last key). */
AF_INLINE void af_qk2x1_s8_dsp(int32_t* s0, int32_t* s1, const int8_t* q, const int8_t* k,
                               int32_t D) {
  int32_t a = 0, b = 0, d;
  for (d = 0; d + 4 <= D; d += 4) {
    const uint32_t kw = af_ld32(k + d), xw = af_ld32(q + d), yw = af_ld32(q + D + d);
    const int32_t e = (int32_t)__sxtb16(kw), o = (int32_t)af_sxtb16_ror8(kw);
    a = __smlad((int32_t)__sxtb16(xw), e, a);
    a = __smlad((int32_t)af_sxtb16_ror8(xw), o, a);
    b = __smlad((int32_t)__sxtb16(yw), e, b);
    b = __smlad((int32_t)af_sxtb16_ror8(yw), o, b);
  }
  for (; d < D; ++d) {
    a += (int32_t)q[d] * k[d];
    b += (int32_t)q[D + d] * k[d];
  }
  *s0 = a;
  *s1 = b;
}

/* AF_V_COLS with SMLAD. The weights of n4 groups of 4 keys are first packed
 * in place as int16 pairs in SXTB16 lane order, P[2g] = w[4g] | w[4g+2] << 16,
 * P[2g+1] = w[4g+1] | w[4g+3] << 16 (weights are <= 32767); a word of 4 value
 * bytes then gives two SMLADs per row. Two value dimensions per pass keep
 * both rows' accumulators in registers: 18 instructions per 16 MACs. */
AF_INLINE void af_pack_w16(int32_t* w, int32_t n4) {
  int32_t g;
  for (g = 0; g < n4; ++g) {
    const uint32_t w0 = (uint32_t)w[4 * g], w1 = (uint32_t)w[4 * g + 1],
                   w2 = (uint32_t)w[4 * g + 2], w3 = (uint32_t)w[4 * g + 3];
    w[2 * g] = (int32_t)((w0 & 0xFFFFu) | (w2 << 16));
    w[2 * g + 1] = (int32_t)((w1 & 0xFFFFu) | (w3 << 16));
  }
}
AF_INLINE void af_pvt2_s8_dsp(int32_t* acc, const int32_t* P0, const int32_t* P1,
                              const int8_t* vt, int32_t ldv, int32_t n4, int32_t Dv) {
  int32_t d, g;
  for (d = 0; d + 2 <= Dv; d += 2) {
    const int8_t* v0 = vt + (size_t)d * ldv;
    const int8_t* v1 = v0 + ldv;
    int32_t a0 = acc[d], a1 = acc[d + 1], b0 = acc[Dv + d], b1 = acc[Dv + d + 1];
#define AF_PVT2_GROUP(gg)                                                            \
  {                                                                                  \
    const int32_t pe = P0[2 * (gg)], po = P0[2 * (gg) + 1], qe = P1[2 * (gg)],       \
                  qo = P1[2 * (gg) + 1];                                             \
    uint32_t x = af_ld32(v0 + 4 * (gg));                                             \
    int32_t e = (int32_t)__sxtb16(x), o = (int32_t)af_sxtb16_ror8(x);                \
    a0 = __smlad(pe, e, a0);                                                         \
    a0 = __smlad(po, o, a0);                                                         \
    b0 = __smlad(qe, e, b0);                                                         \
    b0 = __smlad(qo, o, b0);                                                         \
    x = af_ld32(v1 + 4 * (gg));                                                      \
    e = (int32_t)__sxtb16(x);                                                        \
    o = (int32_t)af_sxtb16_ror8(x);                                                  \
    a1 = __smlad(pe, e, a1);                                                         \
    a1 = __smlad(po, o, a1);                                                         \
    b1 = __smlad(qe, e, b1);                                                         \
    b1 = __smlad(qo, o, b1);                                                         \
  }
    for (g = 0; g + 2 <= n4; g += 2) {
      AF_PVT2_GROUP(g)
      AF_PVT2_GROUP(g + 1)
    }
    if (g < n4) AF_PVT2_GROUP(g)
#undef AF_PVT2_GROUP
    acc[d] = a0;
    acc[d + 1] = a1;
    acc[Dv + d] = b0;
    acc[Dv + d + 1] = b1;
  }
  if (d < Dv) {
    const int8_t* v0 = vt + (size_t)d * ldv;
    int32_t a0 = acc[d], b0 = acc[Dv + d];
    for (g = 0; g < n4; ++g) {
      const uint32_t x = af_ld32(v0 + 4 * g);
      const int32_t e = (int32_t)__sxtb16(x), o = (int32_t)af_sxtb16_ror8(x);
      a0 = __smlad(P0[2 * g + 1], o, __smlad(P0[2 * g], e, a0));
      b0 = __smlad(P1[2 * g + 1], o, __smlad(P1[2 * g], e, b0));
    }
    acc[d] = a0;
    acc[Dv + d] = b0;
  }
}
/* One row: four value dimensions per pass (12 instructions per 8 MACs per
 * group, the weights loaded once per group and pass). */
AF_INLINE void af_pvt1_s8_dsp(int32_t* acc, const int32_t* P, const int8_t* vt, int32_t ldv,
                              int32_t n4, int32_t Dv) {
  int32_t d, g;
  for (d = 0; d + 2 <= Dv; d += 2) {
    const int8_t* v0 = vt + (size_t)d * ldv;
    const int8_t* v1 = v0 + ldv;
    int32_t a0 = acc[d], a1 = acc[d + 1];
    for (g = 0; g < n4; ++g) {
      const int32_t pe = P[2 * g], po = P[2 * g + 1];
      uint32_t x = af_ld32(v0 + 4 * g);
      a0 = __smlad(pe, (int32_t)__sxtb16(x), a0);
      a0 = __smlad(po, (int32_t)af_sxtb16_ror8(x), a0);
      x = af_ld32(v1 + 4 * g);
      a1 = __smlad(pe, (int32_t)__sxtb16(x), a1);
      a1 = __smlad(po, (int32_t)af_sxtb16_ror8(x), a1);
    }
    acc[d] = a0;
    acc[d + 1] = a1;
  }
  if (d < Dv) {
    const int8_t* v0 = vt + (size_t)d * ldv;
    int32_t a0 = acc[d];
    for (g = 0; g < n4; ++g) {
      const uint32_t x = af_ld32(v0 + 4 * g);
      a0 = __smlad(P[2 * g + 1], (int32_t)af_sxtb16_ror8(x), __smlad(P[2 * g], (int32_t)__sxtb16(x), a0));
    }
    acc[d] = a0;
  }
}

/* Weights are <= 32767 (the table's entry 0), so they pack as int16 pairs
 * (w0,w1), (w2,w3); value bytes of key pairs are regrouped with PKHBT/PKHTB
 * into (v0[d], v1[d]) lanes. */
AF_INLINE void af_pv2x4_s8_dsp(int32_t* acc, const int32_t* w, const int32_t* u, const int8_t* v,
                               int32_t Dv) {
  const int32_t w01 = (int32_t)(((uint32_t)w[0] & 0xFFFFu) | ((uint32_t)w[1] << 16));
  const int32_t w23 = (int32_t)(((uint32_t)w[2] & 0xFFFFu) | ((uint32_t)w[3] << 16));
  const int32_t u01 = (int32_t)(((uint32_t)u[0] & 0xFFFFu) | ((uint32_t)u[1] << 16));
  const int32_t u23 = (int32_t)(((uint32_t)u[2] & 0xFFFFu) | ((uint32_t)u[3] << 16));
  int32_t d;
  for (d = 0; d + 4 <= Dv; d += 4, v += 4, acc += 4) {
    const uint32_t v0 = af_ld32(v), v1 = af_ld32(v + Dv), v2 = af_ld32(v + 2 * Dv),
                   v3 = af_ld32(v + 3 * Dv);
    const uint32_t e0 = __sxtb16(v0), o0 = af_sxtb16_ror8(v0);
    const uint32_t e1 = __sxtb16(v1), o1 = af_sxtb16_ror8(v1);
    const uint32_t e2 = __sxtb16(v2), o2 = af_sxtb16_ror8(v2);
    const uint32_t e3 = __sxtb16(v3), o3 = af_sxtb16_ror8(v3);
    /* (key0, key1) and (key2, key3) lanes for d, d+1, d+2, d+3 */
    const int32_t p01_0 = (int32_t)af_pkhbt(e0, e1);
    const int32_t p01_2 = (int32_t)af_pkhtb(e1, e0);
    const int32_t p01_1 = (int32_t)af_pkhbt(o0, o1);
    const int32_t p01_3 = (int32_t)af_pkhtb(o1, o0);
    const int32_t p23_0 = (int32_t)af_pkhbt(e2, e3);
    const int32_t p23_2 = (int32_t)af_pkhtb(e3, e2);
    const int32_t p23_1 = (int32_t)af_pkhbt(o2, o3);
    const int32_t p23_3 = (int32_t)af_pkhtb(o3, o2);
    acc[0] = __smlad(w23, p23_0, __smlad(w01, p01_0, acc[0]));
    acc[1] = __smlad(w23, p23_1, __smlad(w01, p01_1, acc[1]));
    acc[2] = __smlad(w23, p23_2, __smlad(w01, p01_2, acc[2]));
    acc[3] = __smlad(w23, p23_3, __smlad(w01, p01_3, acc[3]));
    acc[Dv] = __smlad(u23, p23_0, __smlad(u01, p01_0, acc[Dv]));
    acc[Dv + 1] = __smlad(u23, p23_1, __smlad(u01, p01_1, acc[Dv + 1]));
    acc[Dv + 2] = __smlad(u23, p23_2, __smlad(u01, p01_2, acc[Dv + 2]));
    acc[Dv + 3] = __smlad(u23, p23_3, __smlad(u01, p01_3, acc[Dv + 3]));
  }
  for (; d < Dv; ++d, ++v, ++acc) {
    const int32_t a = v[0], b = v[Dv], c = v[2 * Dv], e = v[3 * Dv];
    acc[0] += w[0] * a + w[1] * b + w[2] * c + w[3] * e;
    acc[Dv] += u[0] * a + u[1] * b + u[2] * c + u[3] * e;
  }
}
#if defined(__thumb2__) && !defined(AF_S8_NO_ASM)
/* Thumb-2 assembly (AF_S8_ASM; -DAF_S8_NO_ASM keeps the intrinsics above):
 * the Q.K and P.V loops of the D = Dv = 64 specialisation, the per-key
 * weights, rescales and the output requantisation (further down), every
 * register placed by hand where GCC spills. Naked functions called with
 * the AAPCS arguments; they compute the same integers as the C kernels
 * (exact int32 sums; the rounding steps are derived where they stand).
 * The D = 64 kernels rely on the arena's layout (af_sdpa_s8_ex): the
 * second row's scores and weights at +AF_S8_KEY_TILE words, its
 * accumulators at +64 words; LDRD/STRD touch only 4-byte aligned arena or
 * stack words (the arena is checked 4-aligned), LDR/LDRH of q, k and v may
 * be unaligned (legal on ARMv7-M/ARMv8-M). */
#define AF_S8_ASM 1
typedef char af_s8_asm_tile_is_24[AF_S8_KEY_TILE == 24 ? 1 : -1];

/* acc += a * b, two 16-bit lanes (the first step of a sum starts it). */
#define AF_SMUAD(c, a, b) "smuad " #c ", " #a ", " #b "\n\t"
#define AF_SMLAD(c, a, b) "smlad " #c ", " #a ", " #b ", " #c "\n\t"

/* Q.K of two query rows x npairs >= 1 key pairs (k, k + 64; then k + 128,
 * ...), the rows given unpacked by af_unpack_q2 (qx): sb[2p], sb[2p+1] get
 * row 0's scores of pair p, sb[24+2p], sb[24+2p+1] row 1's. Per 4 d (16
 * MACs): 2 LDR and 4 SXTB16 for the key words, 2 LDRD for the two rows'
 * lanes, 8 SMLAD; the 16 steps over d unrolled with immediate offsets.
 * Registers: r0-r3 the four sums, r4/r5 and r6/r7 the two key words
 * unpacked, r8/r9 a row's lanes, r10 qx, r11 the key pair, r12 sb, lr the
 * pairs left. */
#define AF_QK_STEP(MAC, o, p, x, y)      \
  "ldr.w r5, [r11, #" #o "]\n\t"         \
  "ldr.w r7, [r11, #" #p "]\n\t"         \
  "ldrd r8, r9, [r10, #" #x "]\n\t"      \
  "sxtb16 r4, r5\n\t"                    \
  "sxtb16 r5, r5, ror #8\n\t"            \
  "sxtb16 r6, r7\n\t"                    \
  "sxtb16 r7, r7, ror #8\n\t"            \
  MAC(r0, r8, r4) AF_SMLAD(r0, r9, r5)    \
  MAC(r1, r8, r6) AF_SMLAD(r1, r9, r7)    \
  "ldrd r8, r9, [r10, #" #y "]\n\t"      \
  MAC(r2, r8, r4) AF_SMLAD(r2, r9, r5)    \
  MAC(r3, r8, r6) AF_SMLAD(r3, r9, r7)
#define AF_ARG __attribute__((unused)) /* naked: the asm reads r0-r3 and the stack */
__attribute__((naked, noinline)) static void af_qk2_d64_asm(AF_ARG int32_t* sb,
                                                           AF_ARG const int32_t* qx,
                                                           AF_ARG const int8_t* k,
                                                           AF_ARG int32_t npairs) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "mov r12, r0\n\t"
      "mov r10, r1\n\t"
      "mov r11, r2\n\t"
      "mov lr, r3\n"
      "1:\n\t"
      AF_QK_STEP(AF_SMUAD, 0, 64, 0, 8) AF_QK_STEP(AF_SMLAD, 4, 68, 16, 24)
      AF_QK_STEP(AF_SMLAD, 8, 72, 32, 40) AF_QK_STEP(AF_SMLAD, 12, 76, 48, 56)
      AF_QK_STEP(AF_SMLAD, 16, 80, 64, 72) AF_QK_STEP(AF_SMLAD, 20, 84, 80, 88)
      AF_QK_STEP(AF_SMLAD, 24, 88, 96, 104) AF_QK_STEP(AF_SMLAD, 28, 92, 112, 120)
      AF_QK_STEP(AF_SMLAD, 32, 96, 128, 136) AF_QK_STEP(AF_SMLAD, 36, 100, 144, 152)
      AF_QK_STEP(AF_SMLAD, 40, 104, 160, 168) AF_QK_STEP(AF_SMLAD, 44, 108, 176, 184)
      AF_QK_STEP(AF_SMLAD, 48, 112, 192, 200) AF_QK_STEP(AF_SMLAD, 52, 116, 208, 216)
      AF_QK_STEP(AF_SMLAD, 56, 120, 224, 232) AF_QK_STEP(AF_SMLAD, 60, 124, 240, 248)
      "strd r2, r3, [r12, #96]\n\t"
      "strd r0, r1, [r12], #8\n\t"
      "add r11, r11, #128\n\t"
      "subs lr, lr, #1\n\t"
      "bne 1b\n\t"
      "pop {r4-r11, pc}\n\t");
}
#undef AF_QK_STEP
/* Two consecutive query rows of 64 int8 (q, q + 64) as SXTB16 lanes, per
 * 4 d: x02, x13 of row 0, then y02, y13 of row 1 (64 words). */
AF_INLINE void af_unpack_q2(int32_t* qx, const int8_t* q) {
  int32_t s;
  for (s = 0; s < 16; ++s) {
    const uint32_t x = af_ld32(q + 4 * s), y = af_ld32(q + 64 + 4 * s);
    qx[4 * s] = (int32_t)__sxtb16(x);
    qx[4 * s + 1] = (int32_t)af_sxtb16_ror8(x);
    qx[4 * s + 2] = (int32_t)__sxtb16(y);
    qx[4 * s + 3] = (int32_t)af_sxtb16_ror8(y);
  }
}

/* Column-layout P.V of two rows over one tile of n (1..24) keys, D = 64:
 * acc[d] += sum_t w[t] vt[d*ldv + t], acc[64 + d] += sum_t u[t] ...,
 * u = w + 24, with the weights packed by af_pack_tile16. Per pass: two
 * value dimensions d, d+1 (the four sums in r0-r3), n/4 groups of 4 keys
 * (one value word per dimension, two SMLAD per word and row: 16 MACs in
 * 16 instructions), then the n % 4 last keys. The 6 group bodies are
 * unrolled with immediate offsets and entered at group 6 - n/4 (each
 * body is 64 bytes of 32-bit instructions; the pointers start 6 - n/4
 * groups early), the tail through a table: no loop over keys. Registers:
 * r4-r7 the weight pairs of a group (row 0, row 1), r8/r9 a value word
 * unpacked, r10 w, r11/r12 the two dimensions' value pointers, lr acc.
 * Stack: [0] entry address, [4] tail address, [8] 2 ldv, [12] acc end. */
#define AF_PV_GROUP(w, w2, v)              \
  "ldrd r4, r5, [r10, #" #w "]\n\t"        \
  "ldrd r6, r7, [r10, #" #w2 "]\n\t"       \
  "ldr.w r8, [r11, #" #v "]\n\t"           \
  "sxtb16 r9, r8\n\t"                      \
  "sxtb16 r8, r8, ror #8\n\t"              \
  AF_SMLAD(r0, r4, r9) AF_SMLAD(r0, r5, r8) \
  AF_SMLAD(r2, r6, r9) AF_SMLAD(r2, r7, r8) \
  "ldr.w r8, [r12, #" #v "]\n\t"           \
  "sxtb16 r9, r8\n\t"                      \
  "sxtb16 r8, r8, ror #8\n\t"              \
  AF_SMLAD(r1, r4, r9) AF_SMLAD(r1, r5, r8) \
  AF_SMLAD(r3, r6, r9) AF_SMLAD(r3, r7, r8)
/* One tail key at value offset v, weights at w (row 0) and w + 96. */
#define AF_PV_ONE(v, w, w2)                \
  "ldrsb.w r8, [r11, #" #v "]\n\t"         \
  "ldrsb.w r9, [r12, #" #v "]\n\t"         \
  "ldr.w r4, [r10, #" #w "]\n\t"           \
  "ldr.w r6, [r10, #" #w2 "]\n\t"          \
  "mla r0, r4, r8, r0\n\t"                 \
  "mla r1, r4, r9, r1\n\t"                 \
  "mla r2, r6, r8, r2\n\t"                 \
  "mla r3, r6, r9, r3\n\t"
__attribute__((naked, noinline)) static void af_pvt2_d64_asm(AF_ARG int32_t* acc,
                                                            AF_ARG const int32_t* w,
                                                            AF_ARG const int8_t* vt,
                                                            AF_ARG int32_t ldv, AF_ARG int32_t n) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "ldr r4, [sp, #36]\n\t"      /* n */
      "sub sp, sp, #16\n\t"
      "add r5, r0, #256\n\t"
      "str r5, [sp, #12]\n\t"      /* acc end */
      "lsl r5, r3, #1\n\t"
      "str r5, [sp, #8]\n\t"       /* 2 ldv */
      "lsr r5, r4, #2\n\t"
      "rsb r6, r5, #6\n\t"         /* groups skipped: 6 - n/4 */
      "sub r10, r1, r6, lsl #3\n\t"
      "sub r11, r2, r6, lsl #2\n\t"
      "add r12, r11, r3\n\t"
      "adr r7, 2f\n\t"
      "add r7, r7, r6, lsl #6\n\t"
      "orr r7, r7, #1\n\t"
      "str r7, [sp, #0]\n\t"       /* entry: group 6 - n/4 */
      "and r4, r4, #3\n\t"
      "adr r7, 9f\n\t"
      "ldrb r8, [r7, r4]\n\t"
      "adr r7, 3f\n\t"
      "add r7, r7, r8\n\t"
      "orr r7, r7, #1\n\t"
      "str r7, [sp, #4]\n\t"       /* tail: n % 4 keys */
      "mov lr, r0\n"
      "1:\n\t"
      "ldrd r0, r1, [lr]\n\t"
      "ldrd r2, r3, [lr, #256]\n\t"
      "ldr.w pc, [sp, #0]\n"
      "2:\n\t"
      AF_PV_GROUP(0, 96, 0) AF_PV_GROUP(8, 104, 4) AF_PV_GROUP(16, 112, 8)
      AF_PV_GROUP(24, 120, 12) AF_PV_GROUP(32, 128, 16) AF_PV_GROUP(40, 136, 20)
      "ldr.w pc, [sp, #4]\n"
      "3:\n\t"                     /* 1 key */
      AF_PV_ONE(24, 48, 144)
      "b 6f\n"
      "4:\n\t"                     /* 3 keys: the third, then the pair */
      AF_PV_ONE(26, 52, 148)
      "5:\n\t"                     /* 2 keys: bytes b0 | b1 << 16, one SMLAD */
      "ldrh.w r8, [r11, #24]\n\t"
      "ldrh.w r9, [r12, #24]\n\t"
      "orr r8, r8, r8, lsl #8\n\t"
      "orr r9, r9, r9, lsl #8\n\t"
      "sxtb16 r8, r8\n\t"
      "sxtb16 r9, r9\n\t"
      "ldr.w r4, [r10, #48]\n\t"
      "ldr.w r6, [r10, #144]\n\t"
      AF_SMLAD(r0, r4, r8) AF_SMLAD(r1, r4, r9)
      AF_SMLAD(r2, r6, r8) AF_SMLAD(r3, r6, r9)
      "6:\n\t"
      "strd r2, r3, [lr, #256]\n\t"
      "strd r0, r1, [lr], #8\n\t"
      "ldr r8, [sp, #8]\n\t"
      "add r11, r11, r8\n\t"
      "add r12, r12, r8\n\t"
      "ldr r9, [sp, #12]\n\t"
      "cmp lr, r9\n\t"
      "bne 1b\n\t"
      "add sp, sp, #16\n\t"
      "pop {r4-r11, pc}\n\t"
      "9:\n\t" /* tail entry by n % 4, as offsets from label 3 (no relocation) */
      ".byte 6b - 3b, 0, 5b - 3b, 4b - 3b\n\t"
      ".p2align 1\n\t");
}
#undef AF_PV_GROUP
#undef AF_PV_ONE

/* Packs a tile's n weights (each <= 32767) in place for af_pvt2_d64_asm:
 * the n/4 groups as af_pack_w16 does, then the n % 4 last ones from word
 * 2(n/4): one key w; two keys w0 | w1 << 16; three keys that pair and w2. */
AF_INLINE void af_pack_tile16(int32_t* w, int32_t n) {
  const int32_t n4 = n >> 2, r = n & 3;
  int32_t* t = w + 4 * n4;
  af_pack_w16(w, n4);
  if (r == 1) {
    w[2 * n4] = t[0];
  } else if (r > 1) {
    const int32_t w2 = t[2];
    w[2 * n4] = (int32_t)(((uint32_t)t[0] & 0xFFFFu) | ((uint32_t)t[1] << 16));
    if (r == 3) w[2 * n4 + 1] = w2;
  }
}

/* Row-layout P.V of two rows over one tile of n (1..24) keys, Dv = 64:
 * acc[d] += sum_t w[t] v[t*64 + d], acc[64 + d] += sum_t u[t] v[...],
 * with the weights of key pair p interleaved by af_pack_pairs16 (w[2p] =
 * w_2p | w_2p+1 << 16, w[2p+1] = the same of u). Per pass: two value
 * dimensions d, d+1 (the four sums in r0-r3); per key pair, the two keys'
 * halfwords (v[2p][d..d+1], v[2p+1][d..d+1]) joined by PKHBT give, after
 * SXTB16, the (key 2p, key 2p+1) lanes of d and of d+1: 10 instructions per
 * 8 MACs. The 12 pair bodies (40 bytes each) are entered at pair
 * 12 - n/2 as in af_pvt2_d64_asm; an odd last key is one halfword and
 * SMLABB/SMLATB. Registers: r4/r5 the pair's weights (row 0, row 1),
 * r8/r9 value lanes, r10 w, r11 v, r12 acc end, lr acc. Stack: [0] entry,
 * [4] tail (odd key or end of pass). */
#define AF_PVR_PAIR(v, v2, w)              \
  "ldrh.w r8, [r11, #" #v "]\n\t"          \
  "ldrh.w r9, [r11, #" #v2 "]\n\t"         \
  "pkhbt r8, r8, r9, lsl #16\n\t"          \
  "ldrd r4, r5, [r10, #" #w "]\n\t"        \
  "sxtb16 r9, r8\n\t"                      \
  "sxtb16 r8, r8, ror #8\n\t"              \
  AF_SMLAD(r0, r4, r9) AF_SMLAD(r1, r4, r8) \
  AF_SMLAD(r2, r5, r9) AF_SMLAD(r3, r5, r8)
__attribute__((naked, noinline)) static void af_pv2_rows_d64_asm(AF_ARG int32_t* acc,
                                                                AF_ARG const int32_t* w,
                                                                AF_ARG const int8_t* v,
                                                                AF_ARG int32_t n) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "sub sp, sp, #8\n\t"
      "lsr r4, r3, #1\n\t"
      "rsb r5, r4, #12\n\t"        /* pairs skipped: 12 - n/2 */
      "sub r10, r1, r5, lsl #3\n\t"
      "sub r11, r2, r5, lsl #7\n\t"
      "adr r6, 2f\n\t"
      "add r6, r6, r5, lsl #5\n\t"
      "add r6, r6, r5, lsl #3\n\t"
      "orr r6, r6, #1\n\t"
      "str r6, [sp, #0]\n\t"       /* entry: pair 12 - n/2 */
      "adr r6, 4f\n\t"
      "adr r7, 3f\n\t"
      "tst r3, #1\n\t"
      "it ne\n\t"
      "movne r6, r7\n\t"
      "orr r6, r6, #1\n\t"
      "str r6, [sp, #4]\n\t"       /* tail: the odd key, or none */
      "mov lr, r0\n\t"
      "add r12, r0, #256\n"
      "1:\n\t"
      "ldrd r0, r1, [lr]\n\t"
      "ldrd r2, r3, [lr, #256]\n\t"
      "ldr.w pc, [sp, #0]\n"
      "2:\n\t"
      AF_PVR_PAIR(0, 64, 0) AF_PVR_PAIR(128, 192, 8) AF_PVR_PAIR(256, 320, 16)
      AF_PVR_PAIR(384, 448, 24) AF_PVR_PAIR(512, 576, 32) AF_PVR_PAIR(640, 704, 40)
      AF_PVR_PAIR(768, 832, 48) AF_PVR_PAIR(896, 960, 56) AF_PVR_PAIR(1024, 1088, 64)
      AF_PVR_PAIR(1152, 1216, 72) AF_PVR_PAIR(1280, 1344, 80) AF_PVR_PAIR(1408, 1472, 88)
      "ldr.w pc, [sp, #4]\n"
      "3:\n\t"                     /* odd key: v[d] | v[d+1] << 16, w and u raw */
      "ldrh.w r8, [r11, #1536]\n\t"
      "orr r8, r8, r8, lsl #8\n\t"
      "sxtb16 r8, r8\n\t"
      "ldr.w r4, [r10, #96]\n\t"
      "ldr.w r5, [r10, #192]\n\t"
      "smlabb r0, r8, r4, r0\n\t"
      "smlatb r1, r8, r4, r1\n\t"
      "smlabb r2, r8, r5, r2\n\t"
      "smlatb r3, r8, r5, r3\n"
      "4:\n\t"
      "strd r2, r3, [lr, #256]\n\t"
      "strd r0, r1, [lr], #8\n\t"
      "add r11, r11, #2\n\t"
      "cmp lr, r12\n\t"
      "bne 1b\n\t"
      "add sp, sp, #8\n\t"
      "pop {r4-r11, pc}\n\t");
}
#undef AF_PVR_PAIR

/* Interleaves the weights of two rows' tiles (u = w + 24) for
 * af_pv2_rows_d64_asm: for each of the np key pairs, w[2p] = w_2p |
 * w_2p+1 << 16 and w[2p+1] = u_2p | u_2p+1 << 16 (an odd last key's w and
 * u stay where they are, raw). */
AF_INLINE void af_pack_pairs16(int32_t* w, int32_t np) {
  int32_t p;
  const int32_t* u = w + AF_S8_KEY_TILE;
  for (p = 0; p < np; ++p) {
    const uint32_t a = (uint32_t)w[2 * p], b = (uint32_t)w[2 * p + 1];
    const uint32_t c = (uint32_t)u[2 * p], e = (uint32_t)u[2 * p + 1];
    w[2 * p] = (int32_t)((a & 0xFFFFu) | (b << 16));
    w[2 * p + 1] = (int32_t)((c & 0xFFFFu) | (e << 16));
  }
}
#undef AF_ARG
#endif /* __thumb2__ */
#undef AF_SMUAD
#undef AF_SMLAD
#define af_qk2x4_s8 af_qk2x4_s8_dsp
#define af_pv2x4_s8 af_pv2x4_s8_dsp
/* Column-layout P.V of a tile of n keys (weights w/u int32; clobbered:
 * the first 4*(n/4) are packed in place); the n % 4 last keys by the C
 * loop. */
AF_INLINE void af_pvt2_s8(int32_t* acc, int32_t* w, int32_t* u, const int8_t* vt, int32_t ldv,
                          int32_t n, int32_t Dv) {
  const int32_t n4 = n / 4;
  if (n4 > 0) {
    af_pack_w16(w, n4);
    af_pack_w16(u, n4);
    af_pvt2_s8_dsp(acc, w, u, vt, ldv, n4, Dv);
  }
  if (n > 4 * n4) af_pvt2_s8_c(acc, w + 4 * n4, u + 4 * n4, vt + 4 * n4, ldv, n - 4 * n4, Dv);
}
/* One row, the r = 1..3 keys after the groups (weights w[0..r)): a key
 * pair is one unaligned halfword b0 | b1 << 8, spread to b0 | b1 << 16 for
 * SXTB16, against the weights packed w0 | w1 << 16: one SMLAD. */
AF_INLINE int32_t af_ld16_pair(const int8_t* p) {
  uint16_t h;
  AF_COPY(&h, p, 2); /* one LDRH */
  return (int32_t)__sxtb16((uint32_t)h | ((uint32_t)h << 8));
}
AF_INLINE void af_pvt1_tail_dsp(int32_t* acc, const int32_t* w, const int8_t* vt, int32_t ldv,
                                int32_t r, int32_t Dv) {
  int32_t d;
  if (r == 1) { /* two dimensions per iteration: one LDRD/STRD of acc */
    const int32_t w0 = w[0];
    for (d = 0; d + 2 <= Dv; d += 2, vt += 2 * ldv) {
      const int32_t a0 = acc[d] + w0 * vt[0], a1 = acc[d + 1] + w0 * vt[ldv];
      acc[d] = a0;
      acc[d + 1] = a1;
    }
    if (d < Dv) acc[d] += w0 * vt[0];
  } else {
    const int32_t W = (int32_t)(((uint32_t)w[0] & 0xFFFFu) | ((uint32_t)w[1] << 16));
    if (r == 2) {
      for (d = 0; d < Dv; ++d, vt += ldv) acc[d] = __smlad(W, af_ld16_pair(vt), acc[d]);
    } else {
      const int32_t w2 = w[2];
      for (d = 0; d < Dv; ++d, vt += ldv)
        acc[d] = __smlad(W, af_ld16_pair(vt), acc[d] + w2 * vt[2]);
    }
  }
}
/* (Out of line: one copy serves the row-pair loops and af_decode_s8.) */
static __attribute__((noinline)) void af_pvt1_s8(int32_t* acc, int32_t* w, const int8_t* vt,
                                                 int32_t ldv, int32_t n, int32_t Dv) {
  const int32_t n4 = n / 4;
  if (n4 > 0) {
    af_pack_w16(w, n4);
    af_pvt1_s8_dsp(acc, w, vt, ldv, n4, Dv);
  }
  if (n > 4 * n4) af_pvt1_tail_dsp(acc, w + 4 * n4, vt + 4 * n4, ldv, n - 4 * n4, Dv);
}
/* One row x one key of the row layout: acc[d] += w v[d] with SMLABB/SMLATB
 * on the unpacked value word (w <= 32767 is its own low half). */
static __attribute__((noinline)) void af_pv1_s8_dsp(int32_t* acc, int32_t w, const int8_t* v,
                                                    int32_t Dv) {
  int32_t d;
  for (d = 0; d + 4 <= Dv; d += 4) {
    const uint32_t x = af_ld32(v + d);
    const int32_t e = (int32_t)__sxtb16(x), o = (int32_t)af_sxtb16_ror8(x);
    const int32_t a0 = __smlabb(e, w, acc[d]), a1 = __smlabb(o, w, acc[d + 1]);
    const int32_t a2 = __smlatb(e, w, acc[d + 2]), a3 = __smlatb(o, w, acc[d + 3]);
    acc[d] = a0;
    acc[d + 1] = a1;
    acc[d + 2] = a2;
    acc[d + 3] = a3;
  }
  for (; d < Dv; ++d) acc[d] += w * v[d];
}
#define af_pv1_s8 af_pv1_s8_dsp
/* One row's scores of n keys: four at a time, then one at a time. */
AF_INLINE int32_t af_qk1_s8_dsp(const int8_t* q, const int8_t* k, int32_t D) {
  int32_t a = 0, d;
  for (d = 0; d + 4 <= D; d += 4) {
    const uint32_t xw = af_ld32(q + d), kw = af_ld32(k + d);
    a = __smlad((int32_t)__sxtb16(xw), (int32_t)__sxtb16(kw), a);
    a = __smlad((int32_t)af_sxtb16_ror8(xw), (int32_t)af_sxtb16_ror8(kw), a);
  }
  for (; d < D; ++d) a += (int32_t)q[d] * k[d];
  return a;
}
static __attribute__((noinline)) void af_qk1_tile_s8(int32_t* s, const int8_t* q,
                                                     const int8_t* k, int32_t n, int32_t D) {
  int32_t t;
  for (t = 0; t + 4 <= n; t += 4) af_qk1x4_s8_dsp(s + t, q, k + (size_t)t * D, D);
  for (; t < n; ++t) s[t] = af_qk1_s8_dsp(q, k + (size_t)t * D, D);
}
#else
#define af_qk2x4_s8 af_qk2x4_s8_c
#define af_pv2x4_s8 af_pv2x4_s8_c
#define af_pvt2_s8 af_pvt2_s8_c
#define af_pvt1_s8 af_pvt1_s8_c
#endif

/* ------------------------------------------------------------ softmax --- */
/* 2^(-u/256) in Q15, shifted right by `extra` more bits, one rounding:
 * round(LUT[u & 255] / 2^((u >> 8) + extra)); 0 once the shift reaches 16. */
AF_INLINE int32_t af_exp2_neg(int32_t u, int32_t extra) {
  const int32_t e = (u >> 8) + extra;
  if (e >= 16) return 0;
  return ((int32_t)kExp2NegQ15[u & 255] + ((1 << e) >> 1)) >> e;
}

/* Weight of a key with score s when the row max is m: the Q8 base-2
 * exponent u = floor((m-s) * M / 2^(32-p)) (exp_mult = {M, p}), truncated
 * once whatever p is: the high word of the product shifted left by p, with
 * the top p bits of the low word below it (p = 0: the high word alone, one
 * high multiply). hi_cut: a high word at or above it gives u >= 16*256,
 * weight 0 (and keeps the shift by p from overflowing). */
AF_INLINE int32_t af_weight(int32_t m, int32_t s, af_qmult em, int32_t hi_cut, int32_t wshift) {
  const int64_t prod = (int64_t)(m - s) * em.mult;
  const int32_t hi = (int32_t)(prod >> 32);
  int32_t u;
  if (hi >= hi_cut) return 0;
  u = hi << em.shift;
  if (em.shift > 0) u |= (int32_t)((uint32_t)prod >> (32 - em.shift));
  return af_exp2_neg(u, wshift);
}

static int64_t af_round_shift64(int64_t p, int32_t sh);

#if defined(AF_S8_ASM)
/* af_exp2_neg(hi, wshift) for 0 <= hi < 4096 and 0 for hi >= 4096 (the
 * weight of a key when exp_mult.shift == 0, hi_cut = 4096), hi = the high
 * word of (m - s) * M, without a branch: e = min(hi >> 8, 31) + wshift; LSRS
 * by e leaves in C the last bit shifted out, so t >> e plus C is
 * (t + 2^(e-1)) >> e (e = 0: the ADDS cleared C); e >= 16 gives 0 since
 * t < 2^15. */
AF_INLINE int32_t af_weight_sh0_dsp(int32_t m_minus_s, int32_t mult, int32_t wshift) {
  int32_t hi, t, e;
  __asm__(
      "smmul %[hi], %[d], %[m]\n\t"
      "uxtb %[t], %[hi]\n\t"
      "usat %[e], #5, %[hi], asr #8\n\t"
      "adds %[e], %[e], %[w]\n\t"
      "ldrh %[t], [%[tab], %[t], lsl #1]\n\t"
      "lsrs %[t], %[t], %[e]\n\t"
      "adc %[t], %[t], #0"
      : [hi] "=&r"(hi), [t] "=&r"(t), [e] "=&r"(e)
      : [d] "r"(m_minus_s), [m] "r"(mult), [w] "r"(wshift), [tab] "r"(kExp2NegQ15)
      : "cc");
  return t;
}
/* round(x * f / 2^15), half up, for 0 <= f <= 32767, in one SMMLAR/SMMULR:
 * F = f << 17 as int32 is f * 2^17 - 2^32 when f >= 2^14, so
 * (x << 32) + x * F + 2^31 = x * f * 2^17 + 2^31 there (and x * F + 2^31
 * below), whose high word is the rounded product. */
AF_INLINE int32_t af_mul_q15_dsp(int32_t x, int32_t f) {
  const int32_t F = (int32_t)((uint32_t)f << 17);
  int32_t r;
  if (f >= 16384) {
    __asm__("smmlar %0, %1, %2, %1" : "=r"(r) : "r"(x), "r"(F));
  } else {
    __asm__("smmulr %0, %1, %2" : "=r"(r) : "r"(x), "r"(F));
  }
  return r;
}
#endif

/* Softcap of a raw score s (|s| < 2^30), integer only: x = |s| / K in Q16
 * (c = {in.mult, in.shift, out.mult, out.shift} of af_s8_softcap_prepare),
 * t = tanh(x) in Q16 by linear interpolation of kTanhQ16 (1 beyond 6.5),
 * s' = sign(s) * min(round(t * K), |s|) (|K tanh(s/K)| <= |s| exactly, so
 * the clamp only removes rounding excess). */
static int32_t af_softcap_s8(int32_t s, const int32_t* c) {
  const int32_t a = s < 0 ? -s : s;
  af_qmult in, out;
  int32_t x, t, r;
  in.mult = c[0];
  in.shift = c[1];
  out.mult = c[2];
  out.shift = c[3];
  x = af_s8_mul_by_qmult(a, in);
  if (x >= (AF_TANH_STEPS << 11)) {
    t = 65536;
  } else {
    const int32_t idx = x >> 11, fr = x & 2047;
    const int32_t t0 = kTanhQ16[idx];
    t = t0 + ((((int32_t)kTanhQ16[idx + 1] - t0) * fr + 1024) >> 11);
  }
  r = af_s8_mul_by_qmult(t, out);
  if (r > a) r = a;
  return s < 0 ? -r : r;
}

/* The softcap of a tile of raw scores, out of line so that the mask and
 * ALiBi loops of af_bias_s8 keep their registers. Reached only through
 * af_row_bias.cap_tile, which the softcap entry points set (af_sdpa_s8_softcap_ex,
 * af_decode_s8_softcap, the probe): an application that calls neither links
 * neither this loop nor kTanhQ16 (tools/edge/code_size.sh). */
static __attribute__((noinline)) void af_softcap_tile_s8(int32_t* x, int32_t t_n,
                                                          const int32_t* c) {
  int32_t t;
  for (t = 0; t < t_n; ++t) x[t] = af_softcap_s8(x[t], c);
}

/* The softcap as a pluggable stage of the int8 entry points: its
 * constants' check and its tile. NULL: no softcap linked (softcap_s8
 * refused). */
typedef struct {
  af_status (*check)(const int32_t* c, int32_t num_heads);
  void (*tile)(int32_t* x, int32_t t_n, const int32_t* c);
} af_s8_softcap_ops;
static const af_s8_softcap_ops kS8Softcap = {af_softcap_s8_check, af_softcap_tile_s8};

/* Test-only mutation hook (see af_sdpa_f32.c): inverts the bool mask. */
#ifdef AF_TEST_PLANT_MASK_BUG
#define AF_BOOL_HIDES(m) ((m) != 0)
#else
#define AF_BOOL_HIDES(m) ((m) == 0)
#endif

#define AF_S8_BIAS_MAX 1073741824 /* 2^30 */

/* Per-key work of a masked / ALiBi / softcap row on raw scores x[0..t_n) of
 * keys j0 ..: hidden -> AF_S8_MASKED, else softcap (af_softcap_s8) + mask
 * (clamped to +-2^30 first) + ALiBi, clamped to [-2^30, 2^30 - 1]. |x| < 2^30 on entry, so the int32 sum
 * of the score and a clamped mask cannot overflow; ALiBi is computed in 32
 * bits when slope * max distance fits (alibi32), else in 64. A bool mask
 * alone only hides keys (its own loop: the common case). */
static void af_bias_s8(int32_t* x, int32_t t_n, const af_row_bias* rb, int32_t j0) {
  const int32_t kind = rb->kind & ~AF_BIAS_SOFTCAP; /* the caller applied it */
  int32_t t;
  if (kind == AF_BIAS_BOOL) {
    const uint8_t* m = (const uint8_t*)rb->mrow + (size_t)j0 * rb->msj;
    for (t = 0; t < t_n; ++t, m += rb->msj)
      if (AF_BOOL_HIDES(*m)) x[t] = AF_S8_MASKED;
    return;
  }
  for (t = 0; t < t_n; ++t) {
    const int32_t j = j0 + t;
    int32_t y = x[t];
    if (kind & AF_BIAS_BOOL) {
      if (AF_BOOL_HIDES(((const uint8_t*)rb->mrow)[(size_t)j * rb->msj])) {
        x[t] = AF_S8_MASKED;
        continue;
      }
    } else if (kind & AF_BIAS_S32) {
      int32_t mv = ((const int32_t*)rb->mrow)[(size_t)j * rb->msj];
      if (mv == AF_S8_MASKED) {
        x[t] = AF_S8_MASKED;
        continue;
      }
      mv = mv < -AF_S8_BIAS_MAX ? -AF_S8_BIAS_MAX : (mv > AF_S8_BIAS_MAX ? AF_S8_BIAS_MAX : mv);
      y += mv;
    }
    if (kind & AF_BIAS_ALIBI) {
      const uint32_t dist = (uint32_t)AF_ABS_DIST(rb->diag, j);
      if (rb->alibi32) {
        y -= (int32_t)(((uint32_t)rb->slope_s8 * dist + 128u) >> 8);
      } else {
        const int64_t z = (int64_t)y - (((int64_t)rb->slope_s8 * dist + 128) >> 8);
        y = (int32_t)(z < -AF_S8_BIAS_MAX ? -AF_S8_BIAS_MAX
                                          : (z > AF_S8_BIAS_MAX ? AF_S8_BIAS_MAX : z));
      }
    }
    x[t] = y < -AF_S8_BIAS_MAX ? -AF_S8_BIAS_MAX : (y >= AF_S8_BIAS_MAX ? AF_S8_BIAS_MAX - 1 : y);
  }
}

/* One tile of scores (t_n >= 1) of one row, keys j0 ..: bias (rb NULL:
 * none), raise the max (rescaling acc and l by 2^-u in Q15, rounded), then
 * scores -> weights in place, l += sum. A tile whose keys are all hidden
 * leaves the row as it was (weights 0). */
static void af_s8_softmax_tile(af_s8_row* r, int32_t* sbuf, int32_t t_n, af_qmult em,
                               int32_t hi_cut, int32_t wshift, int32_t Dv,
                               const af_row_bias* rb, int32_t j0) {
  int32_t t, tmax, l = r->l, m;
  if (rb != NULL) {
    if (rb->kind & AF_BIAS_SOFTCAP) /* first, on the raw scores (never AF_S8_MASKED) */
      rb->cap_tile(sbuf, t_n, rb->cap_s8);
    af_bias_s8(sbuf, t_n, rb, j0);
  }
  tmax = sbuf[0];
  for (t = 1; t < t_n; ++t)
    if (sbuf[t] > tmax) tmax = sbuf[t];
  if (tmax == AF_S8_MASKED) { /* every key of the tile hidden */
    for (t = 0; t < t_n; ++t) sbuf[t] = 0;
    return;
  }
  if (!r->started) {
    r->m = tmax;
    r->started = 1;
  } else if (tmax > r->m) {
    const int32_t f = af_weight(tmax, r->m, em, hi_cut, 0);
    int32_t d;
#if defined(AF_S8_ASM)
    int32_t* acc = r->acc;
    for (d = 0; d + 2 <= Dv; d += 2) {
      const int32_t a0 = af_mul_q15_dsp(acc[d], f), a1 = af_mul_q15_dsp(acc[d + 1], f);
      acc[d] = a0;
      acc[d + 1] = a1;
    }
    if (d < Dv) acc[d] = af_mul_q15_dsp(acc[d], f);
    l = af_mul_q15_dsp(l, f);
#else
    for (d = 0; d < Dv; ++d) r->acc[d] = (int32_t)af_round_shift64((int64_t)r->acc[d] * f, 15);
    l = (int32_t)af_round_shift64((int64_t)l * f, 15);
#endif
    r->m = tmax;
  }
  m = r->m;
#if defined(AF_S8_ASM)
  if (em.shift == 0) { /* hi_cut = 4096: the branch-free weight */
    const int32_t M = em.mult;
    if (rb != NULL) {
      for (t = 0; t < t_n; ++t) {
        const int32_t x = sbuf[t];
        const int32_t w = x == AF_S8_MASKED ? 0 : af_weight_sh0_dsp(m - x, M, wshift);
        sbuf[t] = w;
        l += w;
      }
    } else {
      for (t = 0; t + 2 <= t_n; t += 2) {
        const int32_t w0 = af_weight_sh0_dsp(m - sbuf[t], M, wshift);
        const int32_t w1 = af_weight_sh0_dsp(m - sbuf[t + 1], M, wshift);
        sbuf[t] = w0;
        sbuf[t + 1] = w1;
        l += w0 + w1;
      }
      if (t < t_n) {
        sbuf[t] = af_weight_sh0_dsp(m - sbuf[t], M, wshift);
        l += sbuf[t];
      }
    }
    r->l = l;
    return;
  }
#endif
  if (rb != NULL) {
    for (t = 0; t < t_n; ++t) {
      sbuf[t] = sbuf[t] == AF_S8_MASKED ? 0 : af_weight(m, sbuf[t], em, hi_cut, wshift);
      l += sbuf[t];
    }
  } else if (em.shift == 0) { /* the usual case: u is the high word, one multiply */
    for (t = 0; t < t_n; ++t) {
      const int32_t hi = (int32_t)(((int64_t)(m - sbuf[t]) * em.mult) >> 32);
      sbuf[t] = hi >= hi_cut ? 0 : af_exp2_neg(hi, wshift);
      l += sbuf[t];
    }
  } else {
    for (t = 0; t < t_n; ++t) {
      sbuf[t] = af_weight(m, sbuf[t], em, hi_cut, wshift);
      l += sbuf[t];
    }
  }
  r->l = l;
}

#if defined(AF_S8_ASM)
/* The weights of full key groups of a tile (every score a real one,
 * exp_mult.shift == 0), af_weight_sh0_dsp's 9 instructions per key with
 * everything in registers: c = {m, M, wshift, l, table}; c->l += the sum.
 *  af_w_cols_asm:  n4 groups of 4 keys -> out[2g] = w0 | w2 << 16,
 *                  out[2g+1] = w1 | w3 << 16 (af_pack_w16's layout);
 *  af_w_pairs_asm: np key pairs -> out[2p] = w0 | w1 << 16 (every other
 *                  word: af_pack_pairs16's layout).
 * out may be sc: each store follows the loads of its scores. */
typedef struct {
  int32_t m, mult, wshift, l;
  const uint16_t* table;
} af_wctx;
#define AF_ARG __attribute__((unused))
/* key score in S -> weight in T (S is clobbered): r4 m, r5 M, r6 wshift,
 * r7 l, r8 the table */
#define AF_WKEY(S, T)                      \
  "sub " #S ", r4, " #S "\n\t"             \
  "smmul " #S ", " #S ", r5\n\t"           \
  "uxtb " #T ", " #S "\n\t"                \
  "usat " #S ", #5, " #S ", asr #8\n\t"    \
  "adds " #S ", " #S ", r6\n\t"            \
  "ldrh " #T ", [r8, " #T ", lsl #1]\n\t"  \
  "lsrs " #T ", " #T ", " #S "\n\t"        \
  "adc " #T ", " #T ", #0\n\t"             \
  "add r7, r7, " #T "\n\t"
__attribute__((naked, noinline)) static void af_w_cols_asm(AF_ARG const int32_t* sc,
                                                          AF_ARG int32_t* out,
                                                          AF_ARG int32_t n4,
                                                          AF_ARG af_wctx* c) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "ldm r3, {r4-r8}\n"
      "1:\n\t"
      "ldrd r9, r10, [r0], #8\n\t"
      "ldrd r11, r12, [r0], #8\n\t"
      AF_WKEY(r9, lr) AF_WKEY(r10, r9) AF_WKEY(r11, r10) AF_WKEY(r12, r11)
      "pkhbt lr, lr, r10, lsl #16\n\t"
      "pkhbt r9, r9, r11, lsl #16\n\t"
      "strd lr, r9, [r1], #8\n\t"
      "subs r2, r2, #1\n\t"
      "bne 1b\n\t"
      "str r7, [r3, #12]\n\t"
      "pop {r4-r11, pc}\n\t");
}
__attribute__((naked, noinline)) static void af_w_pairs_asm(AF_ARG const int32_t* sc,
                                                           AF_ARG int32_t* out,
                                                           AF_ARG int32_t np,
                                                           AF_ARG af_wctx* c) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "ldm r3, {r4-r8}\n"
      "1:\n\t"
      "ldrd r9, r10, [r0], #8\n\t"
      AF_WKEY(r9, lr) AF_WKEY(r10, r9)
      "pkhbt lr, lr, r9, lsl #16\n\t"
      "str lr, [r1], #8\n\t"
      "subs r2, r2, #1\n\t"
      "bne 1b\n\t"
      "str r7, [r3, #12]\n\t"
      "pop {r4-r11, pc}\n\t");
}
#undef AF_WKEY
/* acc[0 .. 2 np) = af_mul_q15_dsp(acc, f) with F = f << 17 and big =
 * (f >= 2^14): SMMLAR or SMMULR, two sums per LDRD/STRD, np >= 1. */
__attribute__((naked, noinline)) static void af_rescale_asm(AF_ARG int32_t* acc,
                                                           AF_ARG int32_t np, AF_ARG int32_t F,
                                                           AF_ARG int32_t big) {
  __asm__ volatile(
      "cbz r3, 2f\n"
      "1:\n\t"
      "ldrd r3, r12, [r0]\n\t"
      "smmlar r3, r3, r2, r3\n\t"
      "smmlar r12, r12, r2, r12\n\t"
      "strd r3, r12, [r0], #8\n\t"
      "subs r1, r1, #1\n\t"
      "bne 1b\n\t"
      "bx lr\n"
      "2:\n\t"
      "ldrd r3, r12, [r0]\n\t"
      "smmulr r3, r3, r2\n\t"
      "smmulr r12, r12, r2\n\t"
      "strd r3, r12, [r0], #8\n\t"
      "subs r1, r1, #1\n\t"
      "bne 2b\n\t"
      "bx lr\n\t");
}
#undef AF_ARG

/* The tile of a row without mask or ALiBi when exp_mult.shift == 0:
 * af_s8_softmax_tile's arithmetic, the weights written to `out` in the
 * layout the next P.V kernel reads:
 *  AF_W_COLS   af_pack_tile16's layout (af_pvt2_d64_asm), out = sc;
 *  AF_W_PAIRS  out[2p] = w_2p | w_2p+1 << 16 (row 0: out = sb0; row 1:
 *              out = sb0 + 1), an odd last key's raw weight in sc[t_n-1]
 *              (af_pack_pairs16's layout, af_pv2_rows_d64_asm). */
enum { AF_W_COLS = 1, AF_W_PAIRS = 2 };
#define AF_PACK16(lo, hi) ((int32_t)(((uint32_t)(lo) & 0xFFFFu) | ((uint32_t)(hi) << 16)))
static void af_s8_softmax_fast(af_s8_row* r, int32_t* sc, int32_t* out, int32_t t_n,
                               int32_t M, int32_t wshift, int32_t Dv, int32_t mode) {
  int32_t t, m, l = r->l, tmax = sc[0], tmax2 = sc[0];
  af_wctx c;
  for (t = 1; t + 2 <= t_n; t += 2) {
    if (sc[t] > tmax) tmax = sc[t];
    if (sc[t + 1] > tmax2) tmax2 = sc[t + 1];
  }
  if (t < t_n && sc[t] > tmax) tmax = sc[t];
  if (tmax2 > tmax) tmax = tmax2;
  if (!r->started) {
    r->m = tmax;
    r->started = 1;
  } else if (tmax > r->m) { /* f = af_weight(tmax, m, em, hi_cut, 0) */
    const int32_t f = af_weight_sh0_dsp(tmax - r->m, M, 0);
    const int32_t F = (int32_t)((uint32_t)f << 17);
    int32_t* acc = r->acc;
    af_rescale_asm(acc, Dv >> 1, F, f >= 16384);
    if (Dv & 1) acc[Dv - 1] = af_mul_q15_dsp(acc[Dv - 1], f);
    l = af_mul_q15_dsp(l, f);
    r->m = tmax;
  }
  m = r->m;
  c.m = m;
  c.mult = M;
  c.wshift = wshift;
  c.l = l;
  c.table = kExp2NegQ15;
#define AF_W(x) af_weight_sh0_dsp(m - (x), M, wshift)
  if (mode == AF_W_COLS) {
    t = t_n & ~3;
    if (t > 0) af_w_cols_asm(sc, out, t >> 2, &c);
    l = c.l;
    if (t < t_n) {
      const int32_t w0 = AF_W(sc[t]);
      l += w0;
      if (t + 1 == t_n) {
        out[t / 2] = w0;
      } else {
        const int32_t w1 = AF_W(sc[t + 1]);
        l += w1;
        if (t + 3 == t_n) {
          const int32_t w2 = AF_W(sc[t + 2]);
          l += w2;
          out[t / 2 + 1] = w2;
        }
        out[t / 2] = AF_PACK16(w0, w1);
      }
    }
  } else {
    t = t_n & ~1;
    if (t > 0) af_w_pairs_asm(sc, out, t >> 1, &c);
    l = c.l;
    if (t < t_n) {
      sc[t] = AF_W(sc[t]);
      l += sc[t];
    }
  }
#undef AF_W
  r->l = l;
}
#endif

/* ---------------------------------------------------------- row loops --- */
/* v is either row layout (ldv == 0: key t's values at v + t*Dv) or column
 * layout (ldv > 0, AF_V_COLS: value dimension d of key t at v + d*ldv + t);
 * AF_VAT moves a value pointer to key j. */
#define AF_VAT(v, j, ldv, Dv) ((ldv) ? (v) + (j) : (v) + (size_t)(j) * (Dv))

/* One row over keys k[0..n) (a sub-range of the head, tiles from its
 * start; absolute index of k[0]: j_base). */
AF_INLINE void af_s8_keys1(af_s8_row* r, int32_t* sbuf, const int8_t* qr, const int8_t* k,
                           const int8_t* v, int32_t ldv, int32_t j_base, int32_t n, af_qmult em,
                           int32_t hi_cut, int32_t wshift, int32_t D, int32_t Dv,
                           const af_row_bias* rb) {
  int32_t j0, t;
  for (j0 = 0; j0 < n; j0 += AF_S8_KEY_TILE) {
    const int32_t t_n = (n - j0) < AF_S8_KEY_TILE ? (n - j0) : AF_S8_KEY_TILE;
    const int8_t* kt = k + (size_t)j0 * D;
    const int8_t* vt = AF_VAT(v, j0, ldv, Dv);
#if defined(__ARM_FEATURE_DSP)
    af_qk1_tile_s8(sbuf, qr, kt, t_n, D);
#else
    for (t = 0; t < t_n; ++t) sbuf[t] = af_qk1_s8(qr, kt + (size_t)t * D, D);
#endif
    af_s8_softmax_tile(r, sbuf, t_n, em, hi_cut, wshift, Dv, rb, j_base + j0);
    if (ldv) {
      af_pvt1_s8(r->acc, sbuf, vt, ldv, t_n, Dv);
    } else {
      for (t = 0; t < t_n; ++t)
        if (sbuf[t] != 0) af_pv1_s8(r->acc, sbuf[t], vt + (size_t)t * Dv, Dv);
    }
  }
}

/* Q.K and P.V of two rows over one key tile, out of line. Where there is
 * no assembly (AF_S8_ASM), the head_dim 64 specialisation lives here, in
 * these two loops (constant trip counts: the only place a constant head
 * size pays), instead of in a second copy of the whole pair driver: the
 * same instructions per MAC in less flash (tools/edge/code_size.sh). */
#if !defined(AF_S8_ASM)
#if !defined(AF_S8_NO_D64)
#define AF_S8_TILE_D64 1
#else
#define AF_S8_TILE_D64 0
#endif
static __attribute__((noinline)) void af_qk2_tile_s8(int32_t* sb0, int32_t* sb1,
                                                     const int8_t* q0, const int8_t* q1,
                                                     const int8_t* kt, int32_t t_n, int32_t D) {
  int32_t t = 0;
  if (AF_S8_TILE_D64 && D == 64)
    for (; t + 4 <= t_n; t += 4) af_qk2x4_s8(sb0 + t, sb1 + t, q0, kt + (size_t)t * 64, 64);
  else
    for (; t + 4 <= t_n; t += 4) af_qk2x4_s8(sb0 + t, sb1 + t, q0, kt + (size_t)t * D, D);
  for (; t < t_n; ++t) {
    sb0[t] = af_qk1_s8(q0, kt + (size_t)t * D, D);
    sb1[t] = af_qk1_s8(q1, kt + (size_t)t * D, D);
  }
}
static __attribute__((noinline)) void af_pv2_tile_s8(int32_t* acc0, int32_t* acc1,
                                                     const int32_t* sb0, const int32_t* sb1,
                                                     const int8_t* vt, int32_t t_n, int32_t Dv) {
  int32_t t = 0;
  if (AF_S8_TILE_D64 && Dv == 64)
    for (; t + 4 <= t_n; t += 4) af_pv2x4_s8(acc0, sb0 + t, sb1 + t, vt + (size_t)t * 64, 64);
  else
    for (; t + 4 <= t_n; t += 4) af_pv2x4_s8(acc0, sb0 + t, sb1 + t, vt + (size_t)t * Dv, Dv);
  for (; t < t_n; ++t) {
    if (sb0[t] != 0) af_pv1_s8(acc0, sb0[t], vt + (size_t)t * Dv, Dv);
    if (sb1[t] != 0) af_pv1_s8(acc1, sb1[t], vt + (size_t)t * Dv, Dv);
  }
}
#endif

/* Two rows over the same keys k[0..n) (absolute index of k[0]: j_base).
 * Requires q1 == q0 + D and r1->acc == r0->acc + Dv (consecutive rows,
 * adjacent accumulators). */
AF_INLINE void af_s8_keys2(af_s8_row* r0, af_s8_row* r1, int32_t* sb0, int32_t* sb1,
                           const int8_t* q0, const int8_t* q1, const int8_t* k,
                           const int8_t* v, int32_t ldv, int32_t j_base, int32_t n, af_qmult em,
                           int32_t hi_cut, int32_t wshift, int32_t D, int32_t Dv,
                           const af_row_bias* rb0, const af_row_bias* rb1, int32_t d64,
                           const int32_t* qx) {
  int32_t j0;
#if defined(AF_S8_ASM)
  int32_t t;
#endif
  (void)d64;
  (void)qx;
  for (j0 = 0; j0 < n; j0 += AF_S8_KEY_TILE) {
    const int32_t t_n = (n - j0) < AF_S8_KEY_TILE ? (n - j0) : AF_S8_KEY_TILE;
    const int8_t* kt = k + (size_t)j0 * D;
    const int8_t* vt = AF_VAT(v, j0, ldv, Dv);
#if defined(AF_S8_ASM)
    if (d64) { /* D = Dv = 64: the assembly kernels (sb1 = sb0 + AF_S8_KEY_TILE) */
      if (t_n >= 2) af_qk2_d64_asm(sb0, qx, kt, t_n >> 1);
      if (t_n & 1)
        af_qk2x1_s8_dsp(sb0 + t_n - 1, sb1 + t_n - 1, q0, kt + (size_t)(t_n - 1) * D, D);
      if (rb0 == NULL && em.shift == 0) { /* weights written packed */
        const int32_t mode = ldv ? AF_W_COLS : AF_W_PAIRS;
        af_s8_softmax_fast(r0, sb0, sb0, t_n, em.mult, wshift, Dv, mode);
        af_s8_softmax_fast(r1, sb1, ldv ? sb1 : sb0 + 1, t_n, em.mult, wshift, Dv, mode);
      } else {
        af_s8_softmax_tile(r0, sb0, t_n, em, hi_cut, wshift, Dv, rb0, j_base + j0);
        af_s8_softmax_tile(r1, sb1, t_n, em, hi_cut, wshift, Dv, rb1, j_base + j0);
        if (ldv) {
          af_pack_tile16(sb0, t_n);
          af_pack_tile16(sb1, t_n);
        } else {
          af_pack_pairs16(sb0, t_n >> 1);
        }
      }
      if (ldv)
        af_pvt2_d64_asm(r0->acc, sb0, vt, ldv, t_n);
      else
        af_pv2_rows_d64_asm(r0->acc, sb0, vt, t_n);
      continue;
    }
#endif
#if defined(AF_S8_ASM)
    for (t = 0; t + 4 <= t_n; t += 4)
      af_qk2x4_s8(sb0 + t, sb1 + t, q0, kt + (size_t)t * D, D);
    for (; t < t_n; ++t) {
      sb0[t] = af_qk1_s8(q0, kt + (size_t)t * D, D);
      sb1[t] = af_qk1_s8(q1, kt + (size_t)t * D, D);
    }
#else
    af_qk2_tile_s8(sb0, sb1, q0, q1, kt, t_n, D);
#endif
    af_s8_softmax_tile(r0, sb0, t_n, em, hi_cut, wshift, Dv, rb0, j_base + j0);
    af_s8_softmax_tile(r1, sb1, t_n, em, hi_cut, wshift, Dv, rb1, j_base + j0);
    if (ldv) {
      af_pvt2_s8(r0->acc, sb0, sb1, vt, ldv, t_n, Dv);
      continue;
    }
#if defined(AF_S8_ASM)
    for (t = 0; t + 4 <= t_n; t += 4)
      af_pv2x4_s8(r0->acc, sb0 + t, sb1 + t, vt + (size_t)t * Dv, Dv);
    for (; t < t_n; ++t) {
      if (sb0[t] != 0) af_pv1_s8(r0->acc, sb0[t], vt + (size_t)t * Dv, Dv);
      if (sb1[t] != 0) af_pv1_s8(r1->acc, sb1[t], vt + (size_t)t * Dv, Dv);
    }
#else
    af_pv2_tile_s8(r0->acc, r1->acc, sb0, sb1, vt, t_n, Dv);
#endif
  }
}

/* Rows i (keys [f0, l0]) and, if q1 != NULL, i+1 (keys [f1, l1]): the keys
 * both see jointly, then each row's other keys alone (at most two segments
 * per row, visited by one loop so the single-row code exists once). */
AF_INLINE void af_s8_pair(af_s8_row* r0, af_s8_row* r1, int32_t* sb0, int32_t* sb1,
                          const int8_t* q0, const int8_t* q1, const int8_t* k, const int8_t* v,
                          int32_t ldv, int32_t f0, int32_t l0, int32_t f1, int32_t l1,
                          af_qmult em, int32_t hi_cut, int32_t wshift, int32_t D, int32_t Dv,
                          const af_row_bias* rb0, const af_row_bias* rb1, int32_t d64,
                          const int32_t* qx) {
  int32_t from[4], to[4], rowsel[4], cf, cl, x;
  const int32_t n = af_pair_segments(f0, l0, f1, l1, q1 != NULL, &cf, &cl, from, to, rowsel);
  if (cf <= cl)
    af_s8_keys2(r0, r1, sb0, sb1, q0, q1, k + (size_t)cf * D, AF_VAT(v, cf, ldv, Dv), ldv, cf,
                cl - cf + 1, em, hi_cut, wshift, D, Dv, rb0, rb1, d64, qx);
  for (x = 0; x < n; ++x) {
    if (from[x] > to[x]) continue;
    af_s8_keys1(rowsel[x] ? r1 : r0, rowsel[x] ? sb1 : sb0, rowsel[x] ? q1 : q0,
                k + (size_t)from[x] * D, AF_VAT(v, from[x], ldv, Dv), ldv, from[x],
                to[x] - from[x] + 1, em, hi_cut, wshift, D, Dv, rowsel[x] ? rb1 : rb0);
  }
}

/* Specialisation: head size 64 gets constant offsets (and, on Cortex-M,
 * the unrolled assembly); others the generic copy. -DAF_S8_NO_D64 drops it
 * for flash: on rv32imc the linked int8 attention is 1.8 KiB smaller and
 * takes 8% more instructions at D = 64 (docs/edge.md "Code size"). */
#if defined(AF_S8_ASM) && !defined(AF_S8_NO_D64)
#define AF_S8_HAVE_D64 1
#else
#define AF_S8_HAVE_D64 0
#endif
#if AF_S8_HAVE_D64
static void af_s8_pair_d64(af_s8_row* r0, af_s8_row* r1, int32_t* sb0, int32_t* sb1,
                           const int8_t* q0, const int8_t* q1, const int8_t* k, const int8_t* v,
                           int32_t ldv, int32_t f0, int32_t l0, int32_t f1, int32_t l1,
                           af_qmult em, int32_t hi_cut, int32_t wshift, const af_row_bias* rb0,
                           const af_row_bias* rb1) {
#if defined(AF_S8_ASM)
  int32_t qx[64]; /* the two rows unpacked once for af_qk2_d64_asm (256 B of stack) */
  if (q1 != NULL) af_unpack_q2(qx, q0);
  af_s8_pair(r0, r1, sb0, sb1, q0, q1, k, v, ldv, f0, l0, f1, l1, em, hi_cut, wshift, 64, 64,
             rb0, rb1, 1, qx);
#else
  af_s8_pair(r0, r1, sb0, sb1, q0, q1, k, v, ldv, f0, l0, f1, l1, em, hi_cut, wshift, 64, 64,
             rb0, rb1, 1, NULL);
#endif
}
#endif
static void af_s8_pair_any(af_s8_row* r0, af_s8_row* r1, int32_t* sb0, int32_t* sb1,
                           const int8_t* q0, const int8_t* q1, const int8_t* k, const int8_t* v,
                           int32_t ldv, int32_t f0, int32_t l0, int32_t f1, int32_t l1,
                           af_qmult em, int32_t hi_cut, int32_t wshift, int32_t D, int32_t Dv,
                           const af_row_bias* rb0, const af_row_bias* rb1) {
  af_s8_pair(r0, r1, sb0, sb1, q0, q1, k, v, ldv, f0, l0, f1, l1, em, hi_cut, wshift, D, Dv,
             rb0, rb1, 0, NULL);
}

/* ------------------------------------------------------------- finish --- */
static int32_t af_bitlen(uint32_t x) {
#if defined(AF_S8_ASM)
  return x ? 32 - __builtin_clz(x) : 0; /* CLZ */
#else
  int32_t n = 0;
  while (x) {
    ++n;
    x >>= 1;
  }
  return n;
#endif
}

#if defined(AF_S8_ASM)
/* af_s8_finish's loop for np >= 1 pairs of outputs: o[d] = ssat8((hi(acc[d]
 * * c2) + half) >> s2), acc[d] = 0; k = {c2, s2, half}. 7 instructions per
 * output (LDRD, SMMUL, ADD, ASR, SSAT, STRB, STRD of zeros). */
__attribute__((naked, noinline)) static void af_finish_asm(
    __attribute__((unused)) int8_t* o, __attribute__((unused)) int32_t* acc,
    __attribute__((unused)) int32_t np, __attribute__((unused)) const int32_t* k) {
  __asm__ volatile(
      "push {r4-r8, lr}\n\t"
      "ldm r3, {r4-r6}\n\t"
      "movs r7, #0\n\t"
      "movs r8, #0\n"
      "1:\n\t"
      "ldrd r3, r12, [r1]\n\t"
      "smmul r3, r3, r4\n\t"
      "smmul r12, r12, r4\n\t"
      "add r3, r3, r6\n\t"
      "add r12, r12, r6\n\t"
      "asr r3, r3, r5\n\t"
      "asr r12, r12, r5\n\t"
      "ssat r3, #8, r3\n\t"
      "ssat r12, #8, r12\n\t"
      "strb r3, [r0], #1\n\t"
      "strb r12, [r0], #1\n\t"
      "strd r7, r8, [r1], #8\n\t"
      "subs r2, r2, #1\n\t"
      "bne 1b\n\t"
      "pop {r4-r8, pc}\n\t");
}
#endif

/* out = round((acc / l) * sv/so), saturated; zeros for a dead row. */
/* Also resets the row's accumulators to 0 for the next row (the zeroing
 * rides on the loop that reads them: no memset per row). */
static void af_s8_finish(int8_t* o, const af_s8_row* r, af_qmult om, int32_t Dv) {
  int32_t d;
  const int32_t l = r->l;
  int32_t* acc = r->acc;
  if (!r->started || l <= 0) { /* dead row (the max key has weight > 0) */
    for (d = 0; d < Dv; ++d) {
      o[d] = 0;
      acc[d] = 0;
    }
    return;
  }
  {
    /* One fixed-point factor per row: c ~ (2^31 / l_top) * out_mult / 2^32
     * with l_top = the top 16 bits of l (one 32-bit division; relative error
     * < 2^-14, < 0.01 output LSB), so out = acc * c * 2^(shift - 30 - ex). */
    const int32_t e = af_bitlen((uint32_t)l);
    const int32_t ex = e > 16 ? e - 16 : 0;
    const uint32_t inv = 0x80000000u / ((uint32_t)l >> ex); /* < 2^23 */
    const uint64_t cm = (uint64_t)inv * (uint32_t)om.mult;
    const int32_t c = (int32_t)((cm + 0x80000000u) >> 32); /* < 2^22 */
    const int32_t sh = 30 + ex - om.shift;
    const int32_t z = c > 0 ? 31 - af_bitlen((uint32_t)c) : 0;
    if (c > 0 && sh + z >= 33 && sh + z <= 62) {
      /* c' = c << z in [2^30, 2^31): y = (hi(acc * c') + half) >> (sh+z-32),
       * one high multiply per element. */
      const int32_t c2 = c << z, s2 = sh + z - 32, half = 1 << (s2 - 1);
#if defined(AF_S8_ASM)
      const int32_t kk[3] = {c2, s2, half};
      d = Dv & ~1;
      if (d > 0) af_finish_asm(o, acc, d >> 1, kk);
      if (d < Dv) {
        int32_t y0;
        __asm__("smmul %0, %1, %2" : "=r"(y0) : "r"(acc[d]), "r"(c2));
        acc[d] = 0;
        o[d] = (int8_t)__ssat((y0 + half) >> s2, 8);
      }
#else
      for (d = 0; d < Dv; ++d) {
        const int32_t y = ((int32_t)(((int64_t)acc[d] * c2) >> 32) + half) >> s2;
        acc[d] = 0;
        o[d] = (int8_t)(y > 127 ? 127 : (y < -128 ? -128 : y));
      }
#endif
    } else {
      for (d = 0; d < Dv; ++d) {
        const int64_t y = af_round_shift64((int64_t)acc[d] * c, sh);
        acc[d] = 0;
        o[d] = (int8_t)(y > 127 ? 127 : (y < -128 ? -128 : y));
      }
    }
  }
}

/* Everything af_sdpa_s8_ex, af_sdpa_s8_softcap_ex and the probe check
 * before touching memory (cap NULL: softcap_s8 refused); *wshift gets the
 * weight shift of the shape. */
static af_status af_sdpa_s8_check(const int8_t* q, const int8_t* k, const int32_t* kv_lens,
                                  const af_s8_params* p, const af_sdpa_shape* s,
                                  const af_sdpa_opts* o, const af_s8_softcap_ops* cap,
                                  int32_t* wshift) {
  af_status st = af_sdpa_check_shape(s);
  int32_t h;
  if (st != AF_OK) return st;
  if (q == NULL || k == NULL || p == NULL) return AF_ERR_NULL;
  if (!af_aligned(kv_lens, 4) || !af_aligned(p, 4)) return AF_ERR_ALIGN;
  if (s->kv_len > 32768) return AF_ERR_SHAPE;
  if (!(p->num_scale_heads == 1 ||
        (p->num_scale_heads == s->num_heads && s->num_heads <= AF_S8_MAX_HEADS)))
    return AF_ERR_PARAM;
  for (h = 0; h < p->num_scale_heads; ++h)
    if (p->exp_mult[h].mult < 0 || p->exp_mult[h].shift < 0 || p->exp_mult[h].shift > 8 ||
        p->out_mult[h].mult < 0 || p->out_mult[h].shift < -31 || p->out_mult[h].shift > 30)
      return AF_ERR_PARAM;
  if ((st = af_check_kv_lens(kv_lens, s)) != AF_OK) return st;
  if ((st = af_s8_check_opts(o, s, cap != NULL)) != AF_OK) return st;
  if (cap != NULL && o != NULL && o->softcap_s8 != NULL &&
      (st = cap->check(o->softcap_s8, s->num_heads)) != AF_OK)
    return st;
  *wshift = 0;
  while ((s->kv_len >> (9 + *wshift)) != 0) ++*wshift; /* kv_len * 2^(22 - w) >= 2^31 */
  return AF_OK;
}

/* The input ranges of an int8 attention call (q, k, v, kv_lens, params,
 * options): fills ins (at least 9) and returns their count. */
static int32_t af_sdpa_s8_spans(af_span* ins, const int8_t* q, const int8_t* k, const int8_t* v,
                                const int32_t* kv_lens, const af_s8_params* p,
                                const af_sdpa_shape* s, const af_sdpa_opts* o) {
  const size_t kv = (size_t)s->batch * s->num_kv_heads * s->kv_len;
  ins[0].p = q, ins[0].n = (size_t)s->batch * s->num_heads * s->q_len * s->head_dim;
  ins[1].p = k, ins[1].n = kv * s->head_dim;
  ins[2].p = v, ins[2].n = kv * s->v_dim;
  ins[3].p = kv_lens, ins[3].n = (size_t)s->batch * 4;
  ins[4].p = p, ins[4].n = sizeof *p;
  return 5 + af_opts_spans(o, s, ins + 5);
}

/* af_sdpa_s8_ex with the softcap stage `cap` (NULL: none linked). */
static af_status af_sdpa_s8_run(int8_t* out, const int8_t* q, const int8_t* k, const int8_t* v,
                                const int32_t* kv_lens, const af_s8_params* p,
                                const af_sdpa_shape* s, const af_sdpa_opts* o,
                                const af_s8_softcap_ops* cap, void* arena, size_t arena_bytes) {
  int32_t b, h, i, wshift = 0;
  int32_t *sb0, *sb1, *acc0, *acc1;
  af_status st = af_sdpa_s8_check(q, k, kv_lens, p, s, o, cap, &wshift);
  if (st != AF_OK) return st;
  if (out == NULL || v == NULL || arena == NULL) return AF_ERR_NULL;
  if (arena_bytes < af_sdpa_s8_workspace_bytes(s) || ((uintptr_t)arena & 3u))
    return AF_ERR_ARENA;
  {
    af_span outs[2], ins[9];
    const int32_t n_in = af_sdpa_s8_spans(ins, q, k, v, kv_lens, p, s, o);
    outs[0].p = out, outs[0].n = (size_t)s->batch * s->num_heads * s->q_len * s->v_dim;
    outs[1].p = arena, outs[1].n = af_sdpa_s8_workspace_bytes(s);
    if ((st = af_alias_check(outs, 2, ins, n_in)) != AF_OK) return st;
  }
  sb0 = (int32_t*)arena;
  sb1 = sb0 + AF_S8_KEY_TILE;
  acc0 = sb1 + AF_S8_KEY_TILE;
  acc1 = acc0 + s->v_dim;
  for (i = 0; i < 2 * s->v_dim; ++i) acc0[i] = 0;
  {
    const int32_t H = s->num_heads, G = s->num_heads / s->num_kv_heads;
    /* AF_V_COLS: v [B, Hkv, Dv, Lk] (the head's stride is the same). */
    const int32_t ldv = o != NULL && o->v_layout == AF_V_COLS ? s->kv_len : 0;
    const int32_t Lq = s->q_len, Lk = s->kv_len, D = s->head_dim, Dv = s->v_dim;
    for (b = 0; b < s->batch; ++b) {
      const int32_t valid = kv_lens ? kv_lens[b] : Lk;
      for (h = 0; h < H; ++h) {
        const int32_t g = h / G, ph = p->num_scale_heads == 1 ? 0 : h;
        const af_qmult em = p->exp_mult[ph], om = p->out_mult[ph];
        const int32_t hi_cut = (16 * 256) >> em.shift;
        const int8_t* kh = k + ((size_t)b * s->num_kv_heads + g) * Lk * D;
        const int8_t* vh = v + ((size_t)b * s->num_kv_heads + g) * Lk * Dv;
        for (i = 0; i < Lq; i += 2) {
          const size_t row = ((size_t)b * H + h) * Lq + i;
          const int32_t two = i + 1 < Lq;
          const int8_t* q1 = two ? q + (row + 1) * D : NULL;
          int32_t f0, l0, f1, l1;
          af_s8_row r0, r1;
          af_row_bias rb[2];
          const af_row_bias *rb0, *rb1;
          af_pair_rows(s, o, b, h, i, two, valid, &f0, &l0, &f1, &l1, rb, &rb0, &rb1);
          if (cap != NULL && rb0 != NULL) rb[0].cap_tile = rb[1].cap_tile = cap->tile;
          r0.m = r1.m = 0;
          r0.l = r1.l = 0;
          r0.started = r1.started = 0;
          r0.acc = acc0; /* zero: before the first row, then af_s8_finish */
          r1.acc = acc1;
#if AF_S8_HAVE_D64
          if (D == 64 && Dv == 64)
            af_s8_pair_d64(&r0, &r1, sb0, sb1, q + row * D, q1, kh, vh, ldv, f0, l0, f1, l1, em,
                           hi_cut, wshift, rb0, rb1);
          else
#endif
            af_s8_pair_any(&r0, &r1, sb0, sb1, q + row * D, q1, kh, vh, ldv, f0, l0, f1, l1, em,
                           hi_cut, wshift, D, Dv, rb0, rb1);
          af_s8_finish(out + row * Dv, &r0, om, Dv);
          if (two) af_s8_finish(out + (row + 1) * Dv, &r1, om, Dv);
        }
      }
    }
  }
  return AF_OK;
}

af_status af_sdpa_s8_ex(int8_t* out, const int8_t* q, const int8_t* k, const int8_t* v,
                        const int32_t* kv_lens, const af_s8_params* p, const af_sdpa_shape* s,
                        const af_sdpa_opts* o, void* arena, size_t arena_bytes) {
  return af_sdpa_s8_run(out, q, k, v, kv_lens, p, s, o, NULL, arena, arena_bytes);
}

af_status af_sdpa_s8_softcap_ex(int8_t* out, const int8_t* q, const int8_t* k, const int8_t* v,
                                const int32_t* kv_lens, const af_s8_params* p,
                                const af_sdpa_shape* s, const af_sdpa_opts* o, void* arena,
                                size_t arena_bytes) {
  return af_sdpa_s8_run(out, q, k, v, kv_lens, p, s, o, &kS8Softcap, arena, arena_bytes);
}

af_status af_sdpa_s8(int8_t* out, const int8_t* q, const int8_t* k,
                     const int8_t* v, const int32_t* kv_lens,
                     const af_s8_params* p, const af_sdpa_shape* s,
                     void* arena, size_t arena_bytes) {
  return af_sdpa_s8_ex(out, q, k, v, kv_lens, p, s, NULL, arena, arena_bytes);
}

/* ------------------------------------------------------ int8 KV cache --- */

af_status af_kv_cache_s8_init(af_kv_cache_s8* c, int8_t* k_storage, int8_t* v_storage,
                              int32_t num_kv_heads, int32_t head_dim, int32_t v_dim,
                              int32_t capacity, int32_t window) {
  af_status st;
  if (c == NULL || k_storage == NULL || v_storage == NULL) return AF_ERR_NULL;
  st = af_kv_check(num_kv_heads, head_dim, v_dim, capacity, 32768, window, 0);
  if (st != AF_OK) return st;
  AF_KV_CACHE_FILL(c, k_storage, v_storage, num_kv_heads, head_dim, v_dim, capacity, window);
  return AF_OK;
}

/* The struct is the caller's: re-checked before it indexes anything. */
static af_status af_kv_cache_s8_check(const af_kv_cache_s8* c) {
  if (c == NULL || c->k == NULL || c->v == NULL) return AF_ERR_NULL;
  return af_kv_check(c->num_kv_heads, c->head_dim, c->v_dim, c->capacity, 32768, c->window,
                     c->length);
}

af_status af_kv_cache_s8_append(af_kv_cache_s8* c, const int8_t* k_new, const int8_t* v_new) {
  int32_t g, d, slot;
  af_status st = af_kv_cache_s8_check(c);
  if (st != AF_OK) return st;
  if (k_new == NULL || v_new == NULL) return AF_ERR_NULL;
  {
    const size_t kv = (size_t)c->num_kv_heads * c->capacity;
    af_span outs[2], ins[2];
    outs[0].p = c->k, outs[0].n = kv * c->head_dim;
    outs[1].p = c->v, outs[1].n = kv * c->v_dim;
    ins[0].p = k_new, ins[0].n = (size_t)c->num_kv_heads * c->head_dim;
    ins[1].p = v_new, ins[1].n = (size_t)c->num_kv_heads * c->v_dim;
    if ((st = af_alias_check(outs, 2, ins, 2)) != AF_OK) return st;
  }
  if (c->window == 0 && c->length >= c->capacity) return AF_ERR_FULL;
  if (c->length == 0x7fffffff) return AF_ERR_FULL;
  slot = c->length % c->capacity;
  for (g = 0; g < c->num_kv_heads; ++g) {
    int8_t* kr = c->k + ((size_t)g * c->capacity + slot) * c->head_dim;
    int8_t* vc = c->v + (size_t)g * c->v_dim * c->capacity + slot;
    for (d = 0; d < c->head_dim; ++d) kr[d] = k_new[(size_t)g * c->head_dim + d];
    for (d = 0; d < c->v_dim; ++d) vc[(size_t)d * c->capacity] = v_new[(size_t)g * c->v_dim + d];
  }
  c->length++;
  return AF_OK;
}

size_t af_decode_s8_workspace_bytes(const af_kv_cache_s8* c, int32_t num_heads) {
  if (c == NULL || num_heads < 1 || c->v_dim < 1 || c->v_dim > AF_MAX_DIM) return 0;
  return (size_t)(AF_S8_KEY_TILE + c->v_dim) * sizeof(int32_t);
}

/* af_decode_s8_softcap with the softcap stage `cap` (NULL: none linked,
 * softcap_s8 is then NULL). */
static af_status af_decode_s8_run(int8_t* out, const int8_t* q, const af_kv_cache_s8* c,
                                  int32_t num_heads, const af_s8_params* p,
                                  const int32_t* alibi_s8, const int32_t* softcap_s8,
                                  const af_s8_softcap_ops* cap, void* arena,
                                  size_t arena_bytes) {
  int32_t h, n, first, wshift = 0;
  int32_t *sbuf, *acc;
  af_status st = af_kv_cache_s8_check(c);
  if (st != AF_OK) return st;
  if (out == NULL || q == NULL || p == NULL || arena == NULL) return AF_ERR_NULL;
  if (!af_aligned(p, 4) || !af_aligned(alibi_s8, 4)) return AF_ERR_ALIGN;
  if (num_heads < 1 || num_heads > AF_MAX_DIM || num_heads % c->num_kv_heads != 0)
    return AF_ERR_SHAPE;
  if (!(p->num_scale_heads == 1 ||
        (p->num_scale_heads == num_heads && num_heads <= AF_S8_MAX_HEADS)))
    return AF_ERR_PARAM;
  for (h = 0; h < p->num_scale_heads; ++h)
    if (p->exp_mult[h].mult < 0 || p->exp_mult[h].shift < 0 || p->exp_mult[h].shift > 8 ||
        p->out_mult[h].mult < 0 || p->out_mult[h].shift < -31 || p->out_mult[h].shift > 30)
      return AF_ERR_PARAM;
  if (softcap_s8 != NULL && (st = cap->check(softcap_s8, num_heads)) != AF_OK) return st;
  if (arena_bytes < af_decode_s8_workspace_bytes(c, num_heads) || ((uintptr_t)arena & 3u))
    return AF_ERR_ARENA;
  {
    const size_t kv = (size_t)c->num_kv_heads * c->capacity;
    af_span outs[2], ins[6];
    outs[0].p = out, outs[0].n = (size_t)num_heads * c->v_dim;
    outs[1].p = arena, outs[1].n = af_decode_s8_workspace_bytes(c, num_heads);
    ins[0].p = q, ins[0].n = (size_t)num_heads * c->head_dim;
    ins[1].p = c->k, ins[1].n = kv * c->head_dim;
    ins[2].p = c->v, ins[2].n = kv * c->v_dim;
    ins[3].p = p, ins[3].n = sizeof *p;
    ins[4].p = alibi_s8, ins[4].n = (size_t)num_heads * 4;
    ins[5].p = softcap_s8, ins[5].n = (size_t)num_heads * 16;
    if ((st = af_alias_check(outs, 2, ins, 6)) != AF_OK) return st;
  }
  sbuf = (int32_t*)arena;
  acc = sbuf + AF_S8_KEY_TILE;
  /* Visible positions [first, length): the last `window` ones, or all. */
  af_kv_visible(c->length, c->window, &first, &n);
  while ((n >> (9 + wshift)) != 0) ++wshift; /* n * 2^(22 - w) >= 2^31 */
  for (h = 0; h < c->v_dim; ++h) acc[h] = 0;
  for (h = 0; h < num_heads; ++h) {
    const int32_t g = h / (num_heads / c->num_kv_heads), ph = p->num_scale_heads == 1 ? 0 : h;
    const af_qmult em = p->exp_mult[ph], om = p->out_mult[ph];
    const int32_t hi_cut = (16 * 256) >> em.shift, D = c->head_dim, Dv = c->v_dim;
    const int8_t* kh = c->k + (size_t)g * c->capacity * D;
    const int8_t* vh = c->v + (size_t)g * Dv * c->capacity;
    const int32_t s0 = first % c->capacity;
    const int32_t seg = c->capacity - s0 < n ? c->capacity - s0 : n;
    af_s8_row r;
    af_row_bias rb;
    const af_row_bias* rbp = NULL;
    r.m = 0;
    r.l = 0;
    r.started = 0;
    r.acc = acc; /* zero: before the first head, then af_s8_finish */
    if (alibi_s8 != NULL || softcap_s8 != NULL) {
      af_row_bias_decode(&rb, c->length);
      rb.kind = 0;
      rbp = &rb;
    }
    if (alibi_s8 != NULL) { /* key at position pos: -((slope * (length-1-pos) + 128) >> 8) */
      rb.kind |= AF_BIAS_ALIBI;
      rb.slope_s8 = alibi_s8[h];
      rb.alibi32 = rb.slope_s8 >= 0 && (int64_t)rb.slope_s8 * c->capacity + 128 < 2147483647 &&
                   (int64_t)rb.slope_s8 * ((int64_t)c->length) + 128 < 2147483647;
    }
    if (softcap_s8 != NULL) { /* before ALiBi, as in af_sdpa_s8_ex */
      rb.kind |= AF_BIAS_SOFTCAP;
      rb.cap_s8 = softcap_s8 + 4 * h;
      rb.cap_tile = cap->tile;
    }
    /* The ring holds positions in slot order; oldest first, as at most two
     * contiguous segments, each tiled from its start. */
    if (seg > 0)
      af_s8_keys1(&r, sbuf, q + (size_t)h * D, kh + (size_t)s0 * D, vh + s0, c->capacity, first,
                  seg, em, hi_cut, wshift, D, Dv, rbp);
    if (n - seg > 0)
      af_s8_keys1(&r, sbuf, q + (size_t)h * D, kh, vh, c->capacity, first + seg, n - seg, em,
                  hi_cut, wshift, D, Dv, rbp);
    af_s8_finish(out + (size_t)h * Dv, &r, om, Dv);
  }
  return AF_OK;
}

af_status af_decode_s8(int8_t* out, const int8_t* q, const af_kv_cache_s8* c, int32_t num_heads,
                       const af_s8_params* p, const int32_t* alibi_s8, void* arena,
                       size_t arena_bytes) {
  return af_decode_s8_run(out, q, c, num_heads, p, alibi_s8, NULL, NULL, arena, arena_bytes);
}

af_status af_decode_s8_softcap(int8_t* out, const int8_t* q, const af_kv_cache_s8* c,
                               int32_t num_heads, const af_s8_params* p, const int32_t* alibi_s8,
                               const int32_t* softcap_s8, void* arena, size_t arena_bytes) {
  return af_decode_s8_run(out, q, c, num_heads, p, alibi_s8, softcap_s8, &kS8Softcap, arena,
                          arena_bytes);
}

/* ------------------------------------------------------------- probe --- */

/* Raw and masked score of key j (the kernel's dot product and bias;
 * AF_S8_MASKED outside [f, l]). */
static int32_t af_s8_probe_key(int32_t* raw, const int8_t* qr, const int8_t* kh, int32_t j,
                               int32_t D, int32_t f, int32_t l, const af_row_bias* rb) {
  int32_t x = af_qk1_s8(qr, kh + (size_t)j * D, D);
  if (raw) *raw = x;
  if (j < f || j > l) return AF_S8_MASKED;
  if (rb->kind & AF_BIAS_SOFTCAP) rb->cap_tile(&x, 1, rb->cap_s8);
  if (rb->kind) af_bias_s8(&x, 1, rb, j);
  return x;
}

af_status af_sdpa_s8_probe(int32_t* scores, int32_t* masked, int32_t* weights,
                           int32_t* weight_sum, const int8_t* q, const int8_t* k,
                           const int32_t* kv_lens, const af_s8_params* p,
                           const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t b,
                           int32_t h, int32_t i) {
  int32_t wshift = 0, f, l, j, m = AF_S8_MASKED, sum = 0;
  af_row_bias rb;
  af_qmult em;
  int32_t hi_cut;
  const int8_t *qr, *kh;
  af_status st = af_sdpa_s8_check(q, k, kv_lens, p, s, o, &kS8Softcap, &wshift);
  if (st != AF_OK) return st;
  if (b < 0 || b >= s->batch || h < 0 || h >= s->num_heads || i < 0 || i >= s->q_len)
    return AF_ERR_PARAM;
  if (!af_aligned(scores, 4) || !af_aligned(masked, 4) || !af_aligned(weights, 4) ||
      !af_aligned(weight_sum, 4))
    return AF_ERR_ALIGN;
  {
    const size_t row = (size_t)s->kv_len * 4;
    af_span outs[4], ins[9];
    const int32_t n_in = af_sdpa_s8_spans(ins, q, k, NULL, kv_lens, p, s, o);
    outs[0].p = scores, outs[0].n = row;
    outs[1].p = masked, outs[1].n = row;
    outs[2].p = weights, outs[2].n = row;
    outs[3].p = weight_sum, outs[3].n = 4;
    if ((st = af_alias_check(outs, 4, ins, n_in)) != AF_OK) return st;
  }
  em = p->exp_mult[p->num_scale_heads == 1 ? 0 : h];
  hi_cut = (16 * 256) >> em.shift;
  qr = q + (((size_t)b * s->num_heads + h) * s->q_len + i) * s->head_dim;
  kh = k + ((size_t)b * s->num_kv_heads + h / (s->num_heads / s->num_kv_heads)) * s->kv_len *
               s->head_dim;
  af_row_keys(s, o, i, kv_lens ? kv_lens[b] : s->kv_len, &f, &l);
  af_row_bias_init(&rb, s, o, b, h, i, kv_lens ? kv_lens[b] : s->kv_len);
  rb.cap_tile = kS8Softcap.tile;
  for (j = 0; j < s->kv_len; ++j) {
    const int32_t x = af_s8_probe_key(scores ? scores + j : NULL, qr, kh, j, s->head_dim, f, l, &rb);
    if (masked) masked[j] = x;
    if (x > m) m = x;
  }
  for (j = 0; j < s->kv_len; ++j) {
    const int32_t x = af_s8_probe_key(NULL, qr, kh, j, s->head_dim, f, l, &rb);
    const int32_t w = (m == AF_S8_MASKED || x == AF_S8_MASKED)
                          ? 0
                          : af_weight(m, x, em, hi_cut, wshift);
    if (weights) weights[j] = w;
    sum += w;
  }
  if (weight_sum) *weight_sum = sum;
  return AF_OK;
}
