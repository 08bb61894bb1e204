/* af_sdpa_s8.c — int8 scaled dot-product attention with integer arithmetic
 * only (no float type, no float instruction: tools/edge/run_edge.sh
 * disassembles the rv32imc object and fails on any soft-float call).
 *
 * Scheme (docs/edge.md "int8 scheme"): symmetric int8 q, k, v; int32 scores
 * s = q.k; for a row with running max m, key weight
 *   w = exp2neg_q15(u) >> wshift,  u = round((m - s) * exp_mult)  (Q8 base-2)
 * from a 256-entry table of round(2^15 * 2^(-f/256)); the int32 accumulators
 * acc = sum w*v and the weight sum l are rescaled by exp2neg_q15 when a later
 * key tile raises the max (online softmax, one tile of AF_KEY_TILE int32
 * scores in the arena, no full score row); out = round((acc/l) * sv/so)
 * saturated to int8. wshift keeps |acc| < 2^31: n_keys * 2^(22-wshift) < 2^31.
 * Every rounding is "add half, arithmetic shift" (round half up), so a NumPy
 * model of the same integer steps reproduces every bit. */
#include "af_internal.h"

static const uint16_t kExp2NegQ15[256] = {
    32768, 32679, 32591, 32503, 32415, 32327, 32240, 32153, 32066, 31979, 31893, 31806,
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
  return af_sat32(af_round_shift64((int64_t)x * m.mult, 31 - m.shift));
}

int32_t af_s8_exp2_neg_q15(int32_t u) {
  int32_t e;
  if (u <= 0) return 32768;
  e = u >> 8;
  if (e >= 16) return 0;
  return ((int32_t)kExp2NegQ15[u & 255] + ((1 << e) >> 1)) >> e;
}

size_t af_sdpa_s8_workspace_bytes(const af_sdpa_shape* s) {
  if (af_sdpa_check_shape(s) != AF_OK) return 0;
  return (size_t)(AF_KEY_TILE + s->v_dim) * sizeof(int32_t);
}

#if defined(__GNUC__)
#define AF_INLINE static inline __attribute__((always_inline))
#else
#define AF_INLINE static inline
#endif

/* Scores of one query row against 4 consecutive keys (rows k, k+D, ...):
 * each q element is loaded once for 4 MACs. With D a compile-time constant
 * (see the dispatch in af_sdpa_s8) the 4 key offsets are immediates. */
/* 8-key versions of the two kernels below (more work per q / acc load). */
AF_INLINE void af_qk8_s8(int32_t* s, const int8_t* q, const int8_t* k, int32_t D) {
  int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0, x, d;
  for (d = 0; d < D; ++d, ++q, ++k) {
    x = q[0];
    a0 += x * k[0];
    a1 += x * k[D];
    a2 += x * k[2 * D];
    a3 += x * k[3 * D];
    a4 += x * k[4 * D];
    a5 += x * k[5 * D];
    a6 += x * k[6 * D];
    a7 += x * k[7 * D];
  }
  s[0] = a0;
  s[1] = a1;
  s[2] = a2;
  s[3] = a3;
  s[4] = a4;
  s[5] = a5;
  s[6] = a6;
  s[7] = a7;
}

AF_INLINE void af_pv8_s8(int32_t* acc, const int32_t* w, const int8_t* v, int32_t Dv) {
  const int32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6],
                w7 = w[7];
  int32_t d;
  for (d = 0; d < Dv; ++d, ++acc, ++v)
    acc[0] += w0 * v[0] + w1 * v[Dv] + w2 * v[2 * Dv] + w3 * v[3 * Dv] + w4 * v[4 * Dv] +
              w5 * v[5 * Dv] + w6 * v[6 * Dv] + w7 * v[7 * Dv];
}

AF_INLINE void af_qk4_s8(int32_t* s, const int8_t* q, const int8_t* k, int32_t D) {
  int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, x, d;
#define AF_QK_STEP(o)        \
  x = q[o];                  \
  a0 += x * k[o];            \
  a1 += x * k[D + (o)];      \
  a2 += x * k[2 * D + (o)];  \
  a3 += x * k[3 * D + (o)];
  for (d = 0; d + 4 <= D; d += 4, q += 4, k += 4) {
    AF_QK_STEP(0)
    AF_QK_STEP(1)
    AF_QK_STEP(2)
    AF_QK_STEP(3)
  }
  for (; d < D; ++d, ++q, ++k) {
    AF_QK_STEP(0)
  }
#undef AF_QK_STEP
  s[0] = a0;
  s[1] = a1;
  s[2] = a2;
  s[3] = a3;
}

AF_INLINE int32_t af_qk1_s8(const int8_t* q, const int8_t* k, int32_t D) {
  int32_t a = 0, d;
  for (d = 0; d < D; ++d) a += (int32_t)q[d] * k[d];
  return a;
}

/* acc += w0*v0 + w1*v1 + w2*v2 + w3*v3 (4 consecutive value rows): each
 * accumulator is loaded and stored once per 4 keys. */
AF_INLINE void af_pv4_s8(int32_t* acc, const int32_t* w, const int8_t* v, int32_t Dv) {
  const int32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
  int32_t d;
#define AF_PV_STEP(o) \
  acc[o] += w0 * v[o] + w1 * v[Dv + (o)] + w2 * v[2 * Dv + (o)] + w3 * v[3 * Dv + (o)];
  for (d = 0; d + 4 <= Dv; d += 4, acc += 4, v += 4) {
    AF_PV_STEP(0)
    AF_PV_STEP(1)
    AF_PV_STEP(2)
    AF_PV_STEP(3)
  }
  for (; d < Dv; ++d, ++acc, ++v) {
    AF_PV_STEP(0)
  }
#undef AF_PV_STEP
}

AF_INLINE void af_pv1_s8(int32_t* acc, int32_t w, const int8_t* v, int32_t Dv) {
  int32_t d;
  for (d = 0; d < Dv; ++d) acc[d] += w * v[d];
}

/* Base-2 exponent in Q8 of a score difference diff >= 0:
 * u = ((diff * M) >> 32) << p  (exp_mult = {M, p}, see af_s8_prepare). */
AF_INLINE int32_t af_exp_u(int32_t diff, af_qmult em) {
  return (int32_t)(((int64_t)diff * em.mult) >> 32) << em.shift;
}

/* 2^(-u/256) in Q15, shifted right by `extra` more bits, one rounding:
 * round(LUT[u & 255] / 2^((u >> 8) + extra)); 0 once the shift reaches 16. */
AF_INLINE int32_t af_exp2_neg(int32_t u, int32_t extra) {
  const int32_t e = (u >> 8) + extra;
  if (e >= 16) return 0;
  return ((int32_t)kExp2NegQ15[u & 255] + ((1 << e) >> 1)) >> e;
}

/* Weight of a key with score s when the row max is m. hi_cut: any
 * (diff*M)>>32 at or above it gives u >= 16*256, weight 0 (also keeps the
 * shift by p from overflowing). */
AF_INLINE int32_t af_weight(int32_t m, int32_t s, af_qmult em, int32_t hi_cut, int32_t wshift) {
  const int32_t hi = (int32_t)(((int64_t)(m - s) * em.mult) >> 32);
  if (hi >= hi_cut) return 0;
  return af_exp2_neg(hi << em.shift, wshift);
}

/* One query row over keys [0, n): online softmax over tiles of AF_KEY_TILE.
 * acc [Dv] and sbuf [AF_KEY_TILE] come from the arena. Returns l (sum of
 * weights; 0 when n == 0). */
AF_INLINE int32_t af_row_s8(int32_t* acc, int32_t* sbuf, const int8_t* qr, const int8_t* kh,
                            const int8_t* vh, int32_t n, af_qmult em, int32_t hi_cut,
                            int32_t wshift, int32_t D, int32_t Dv) {
  int32_t m = 0, l = 0, j0, d;
  for (d = 0; d < Dv; ++d) acc[d] = 0;
  for (j0 = 0; j0 < n; j0 += AF_KEY_TILE) {
    const int32_t t_n = (n - j0) < AF_KEY_TILE ? (n - j0) : AF_KEY_TILE;
    const int8_t* kt = kh + (size_t)j0 * D;
    const int8_t* vt = vh + (size_t)j0 * Dv;
    int32_t t, tmax;
    for (t = 0; t + 8 <= t_n; t += 8) af_qk8_s8(sbuf + t, qr, kt + (size_t)t * D, D);
    for (; t + 4 <= t_n; t += 4) af_qk4_s8(sbuf + t, qr, kt + (size_t)t * D, D);
    for (; t < t_n; ++t) sbuf[t] = af_qk1_s8(qr, kt + (size_t)t * D, D);
    tmax = sbuf[0];
    for (t = 1; t < t_n; ++t)
      if (sbuf[t] > tmax) tmax = sbuf[t];
    if (j0 == 0) {
      m = tmax;
    } else if (tmax > m) {
      const int32_t f = af_weight(tmax, m, em, hi_cut, 0);
      for (d = 0; d < Dv; ++d) acc[d] = (int32_t)af_round_shift64((int64_t)acc[d] * f, 15);
      l = (int32_t)af_round_shift64((int64_t)l * f, 15);
      m = tmax;
    }
    /* Scores -> weights in place. */
    for (t = 0; t < t_n; ++t) {
      sbuf[t] = af_weight(m, sbuf[t], em, hi_cut, wshift);
      l += sbuf[t];
    }
    for (t = 0; t + 8 <= t_n; t += 8) af_pv8_s8(acc, sbuf + t, vt + (size_t)t * Dv, Dv);
    for (; t + 4 <= t_n; t += 4) af_pv4_s8(acc, sbuf + t, vt + (size_t)t * Dv, Dv);
    for (; t < t_n; ++t)
      if (sbuf[t] != 0) af_pv1_s8(acc, sbuf[t], vt + (size_t)t * Dv, Dv);
  }
  return l;
}

static int32_t af_bitlen(uint32_t x) {
  int32_t n = 0;
  while (x) {
    ++n;
    x >>= 1;
  }
  return n;
}

/* Specialisation: head size 64 gets constant D/Dv (immediate
 * offsets, unrolled loops); anything else runs the generic copy. */
static int32_t af_row_s8_d64(int32_t* acc, int32_t* sbuf, const int8_t* qr, const int8_t* kh,
                             const int8_t* vh, int32_t n, af_qmult em, int32_t hi_cut,
                             int32_t wshift) {
  return af_row_s8(acc, sbuf, qr, kh, vh, n, em, hi_cut, wshift, 64, 64);
}
static int32_t af_row_s8_any(int32_t* acc, int32_t* sbuf, const int8_t* qr, const int8_t* kh,
                             const int8_t* vh, int32_t n, af_qmult em, int32_t hi_cut,
                             int32_t wshift, int32_t D, int32_t Dv) {
  return af_row_s8(acc, sbuf, qr, kh, vh, n, em, hi_cut, wshift, D, Dv);
}

af_status af_sdpa_s8(int8_t* out, const int8_t* q, const int8_t* k,
                     const int8_t* v, const int32_t* kv_lens,
                     const af_s8_params* p, const af_sdpa_shape* s,
                     void* arena, size_t arena_bytes) {
  af_status st = af_sdpa_check_shape(s);
  int32_t b, h, i, wshift = 0;
  int32_t *sbuf, *acc;
  if (st != AF_OK) return st;
  if (out == NULL || q == NULL || k == NULL || v == NULL || p == NULL || arena == NULL)
    return AF_ERR_NULL;
  if (s->kv_len > 32768) return AF_ERR_SHAPE;
  for (h = 0; h < p->num_scale_heads && h < AF_S8_MAX_HEADS; ++h)
    if (p->exp_mult[h].mult < 0 || p->exp_mult[h].shift < 0 || p->exp_mult[h].shift > 8)
      return AF_ERR_PARAM;
  if (!(p->num_scale_heads == 1 ||
        (p->num_scale_heads == s->num_heads && s->num_heads <= AF_S8_MAX_HEADS)))
    return AF_ERR_PARAM;
  if ((st = af_check_kv_lens(kv_lens, s)) != AF_OK) return st;
  if (arena_bytes < af_sdpa_s8_workspace_bytes(s) || ((uintptr_t)arena & 3u))
    return AF_ERR_ARENA;
  while (((int64_t)s->kv_len << (22 - wshift)) >= ((int64_t)1 << 31)) ++wshift;
  sbuf = (int32_t*)arena;
  acc = sbuf + AF_KEY_TILE;
  {
    const int32_t H = s->num_heads, G = s->num_heads / s->num_kv_heads;
    const int32_t Lq = s->q_len, Lk = s->kv_len, D = s->head_dim, Dv = s->v_dim;
    for (b = 0; b < s->batch; ++b) {
      const int32_t valid = kv_lens ? kv_lens[b] : Lk;
      for (h = 0; h < H; ++h) {
        const int32_t g = h / G, ph = p->num_scale_heads == 1 ? 0 : h;
        const af_qmult em = p->exp_mult[ph], om = p->out_mult[ph];
        const int32_t hi_cut = (16 * 256) >> em.shift;
        const int8_t* kh = k + ((size_t)b * s->num_kv_heads + g) * Lk * D;
        const int8_t* vh = v + ((size_t)b * s->num_kv_heads + g) * Lk * Dv;
        for (i = 0; i < Lq; ++i) {
          const size_t row = ((size_t)b * H + h) * Lq + i;
          const int8_t* qr = q + row * D;
          int8_t* o = out + row * Dv;
          const int32_t n = af_last_key(s, i, valid) + 1;
          int32_t l, d;
          if (n <= 0) {
            for (d = 0; d < Dv; ++d) o[d] = 0;
            continue;
          }
          if (D == 64 && Dv == 64)
            l = af_row_s8_d64(acc, sbuf, qr, kh, vh, n, em, hi_cut, wshift);
          else
            l = af_row_s8_any(acc, sbuf, qr, kh, vh, n, em, hi_cut, wshift, D, Dv);
          if (l <= 0) { /* cannot happen: the max key has weight >= 2^(15-wshift) */
            for (d = 0; d < Dv; ++d) o[d] = 0;
            continue;
          }
          {
            /* Per row, one fixed-point factor c ~ (2^31 / l_top) * out_mult
             * / 2^32 with l_top = the top 16 bits of l (one 32-bit division;
             * relative error < 2^-14, < 0.01 output LSB), so that
             * out = acc/l * sv/so = acc * c * 2^(shift - 30 - ex). */
            const int32_t e = af_bitlen((uint32_t)l);
            const int32_t ex = e > 16 ? e - 16 : 0;
            const uint32_t inv = 0x80000000u / ((uint32_t)l >> ex); /* < 2^23 */
            const uint64_t cm = (uint64_t)inv * (uint32_t)om.mult;
            const int32_t c = (int32_t)((cm + 0x80000000u) >> 32); /* < 2^22 */
            const int32_t sh = 30 + ex - om.shift;
            const int32_t z = c > 0 ? 31 - af_bitlen((uint32_t)c) : 0;
            if (c > 0 && sh + z >= 33 && sh + z <= 62) {
              /* c' = c << z in [2^30, 2^31): y = (hi(acc * c') + half) >>
               * (sh + z - 32), one high multiply per element. */
              const int32_t c2 = c << z, s2 = sh + z - 32, half = 1 << (s2 - 1);
              for (d = 0; d < Dv; ++d) {
                const int32_t hi = (int32_t)(((int64_t)acc[d] * c2) >> 32);
                const int32_t y = (hi + half) >> s2;
                o[d] = (int8_t)(y > 127 ? 127 : (y < -128 ? -128 : y));
              }
            } else {
              for (d = 0; d < Dv; ++d) {
                const int64_t y = af_round_shift64((int64_t)acc[d] * c, sh);
                o[d] = (int8_t)(y > 127 ? 127 : (y < -128 ? -128 : y));
              }
            }
          }
        }
      }
    }
  }
  return AF_OK;
}
