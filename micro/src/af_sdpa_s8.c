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

static int32_t af_dot_s8(const int8_t* a, const int8_t* b, int32_t n) {
  int32_t s0 = 0, s1 = 0;
  int32_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += (int32_t)a[d] * b[d];
    s1 += (int32_t)a[d + 1] * b[d + 1];
    s0 += (int32_t)a[d + 2] * b[d + 2];
    s1 += (int32_t)a[d + 3] * b[d + 3];
  }
  for (; d < n; ++d) s0 += (int32_t)a[d] * b[d];
  return s0 + s1;
}

static void af_axpy_s8(int32_t* acc, int32_t w, const int8_t* v, int32_t n) {
  int32_t d = 0;
  for (; d + 4 <= n; d += 4) {
    acc[d] += w * v[d];
    acc[d + 1] += w * v[d + 1];
    acc[d + 2] += w * v[d + 2];
    acc[d + 3] += w * v[d + 3];
  }
  for (; d < n; ++d) acc[d] += w * v[d];
}

static int32_t af_bitlen(uint32_t x) {
  int32_t n = 0;
  while (x) {
    ++n;
    x >>= 1;
  }
  return n;
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
        const int8_t* kh = k + ((size_t)b * s->num_kv_heads + g) * Lk * D;
        const int8_t* vh = v + ((size_t)b * s->num_kv_heads + g) * Lk * Dv;
        for (i = 0; i < Lq; ++i) {
          const size_t row = ((size_t)b * H + h) * Lq + i;
          const int8_t* qr = q + row * D;
          int8_t* o = out + row * Dv;
          const int32_t n = af_last_key(s, i, valid) + 1;
          int32_t m = 0, l = 0, j0, d;
          for (d = 0; d < Dv; ++d) acc[d] = 0;
          for (j0 = 0; j0 < n; j0 += AF_KEY_TILE) {
            const int32_t t_n = (n - j0) < AF_KEY_TILE ? (n - j0) : AF_KEY_TILE;
            int32_t t, tmax;
            for (t = 0; t < t_n; ++t) sbuf[t] = af_dot_s8(qr, kh + (size_t)(j0 + t) * D, D);
            tmax = sbuf[0];
            for (t = 1; t < t_n; ++t)
              if (sbuf[t] > tmax) tmax = sbuf[t];
            if (j0 == 0) {
              m = tmax;
            } else if (tmax > m) {
              const int32_t f = af_s8_exp2_neg_q15(af_s8_mul_by_qmult(tmax - m, em));
              for (d = 0; d < Dv; ++d)
                acc[d] = (int32_t)af_round_shift64((int64_t)acc[d] * f, 15);
              l = (int32_t)af_round_shift64((int64_t)l * f, 15);
              m = tmax;
            }
            for (t = 0; t < t_n; ++t) {
              const int32_t u = af_s8_mul_by_qmult(m - sbuf[t], em);
              const int32_t w = (af_s8_exp2_neg_q15(u) + ((1 << wshift) >> 1)) >> wshift;
              if (w == 0) continue;
              l += w;
              af_axpy_s8(acc, w, vh + (size_t)(j0 + t) * Dv, Dv);
            }
          }
          if (n <= 0 || l <= 0) {
            for (d = 0; d < Dv; ++d) o[d] = 0;
            continue;
          }
          {
            /* inv = floor(2^(30+e) / l) with 2^(e-1) <= l < 2^e, so
             * acc/l = acc*inv / 2^(30+e); r = round(acc/l * 2^16). */
            const int32_t e = af_bitlen((uint32_t)l);
            const uint32_t inv = (uint32_t)(((uint64_t)1 << (30 + e)) / (uint32_t)l);
            const af_qmult om16 = {om.mult, om.shift - 16};
            for (d = 0; d < Dv; ++d) {
              const int32_t r = (int32_t)af_round_shift64((int64_t)acc[d] * inv, 14 + e);
              int32_t y = af_s8_mul_by_qmult(r, om16);
              o[d] = (int8_t)(y > 127 ? 127 : (y < -128 ? -128 : y));
            }
          }
        }
      }
    }
  }
  return AF_OK;
}
