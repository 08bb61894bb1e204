// gguf_quants.cc — the ggml tensor-type table attnflow supports (block sizes
// and bytes) and scalar (de)quantisation of those types, in ggml's block
// layouts (ggml-common.h):
//
//   Q4_0  32 el, 18 B: f16 d, u8 qs[16]           x = d*(q-8)
//   Q4_1  32 el, 20 B: f16 d, f16 m, u8 qs[16]    x = d*q + m
//   Q5_0  32 el, 22 B: f16 d, u32 qh, u8 qs[16]   x = d*(q-16)
//   Q5_1  32 el, 24 B: f16 d, f16 m, u32 qh, qs   x = d*q + m
//   Q8_0  32 el, 34 B: f16 d, i8 qs[32]           x = d*q
//   Q4_K 256 el,144 B: f16 d, f16 dmin, u8 scales[12] (8 x 6-bit scale and
//        6-bit min), u8 qs[128]                   x = (d*sc)*q - dmin*m
//   Q5_K 256 el,176 B: as Q4_K plus u8 qh[32] before qs (the 5th bit)
//   Q6_K 256 el,210 B: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
//                                                 x = (d*sc)*(q-32)
// In the 32-element types quant j < 16 is the low nibble of qs[j], j >= 16
// the high nibble of qs[j-16]; 5-bit types keep bit 4 of quant j in bit j of
// qh. In Q4_K/Q5_K each 64-element chunk c uses qs[32c..32c+32): low nibbles
// are sub-block 2c, high nibbles sub-block 2c+1; the Q5_K high bit of
// element 64c + 32h + l is bit 2c+h of qh[l]. Q6_K: see Q6Index below.
//
// Invariants: dequantisation equals gguf-py's dequantize() bit for bit (every
// product d*q is exact in fp32 or the single rounding of the formula above,
// so fused and unfused evaluation agree); quantisation equals gguf-py's
// quantize() for the 32-element types and follows ggml's reference
// quantizers (no importance matrix) for the K types. Floating-point
// contraction is off in this file so the quantised bytes are the same on
// every target (x86-64 and aarch64 builds alike).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "attnflow/gguf.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace attnflow {
namespace {

constexpr int kQK = 256;  // QK_K

uint16_t Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
void PutHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q6_K element e (0..255) -> (ql byte, nibble shift, qh byte, qh shift,
// scale index).
struct Q6Index {
  int ql, ql_shift, qh, qh_shift, scale;
};
Q6Index Q6At(int e) {
  const int half = e / 128, r = e % 128, k = r / 32, l = r % 32;
  return {64 * half + l + 32 * (k & 1), 4 * (k >> 1), 32 * half + l, 2 * k, 8 * half + l / 16 + 2 * k};
}

void DequantQ4K(const uint8_t* b, float* y, bool five) {
  const float d = F16ToF32(Half(b)), dmin = F16ToF32(Half(b + 2));
  const uint8_t* sc = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = five ? b + 48 : b + 16;
  for (int s = 0; s < 8; ++s) {
    uint8_t scv, mv;
    ScaleMinK4(s, sc, &scv, &mv);
    const float ds = d * static_cast<float>(scv);
    const float ms = dmin * static_cast<float>(mv);
    const int c = s / 2, hi = s % 2;
    for (int l = 0; l < 32; ++l) {
      int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
      if (five) q |= ((qh[l] >> s) & 1) << 4;
      y[32 * s + l] = ds * static_cast<float>(q) - ms;
    }
  }
}

void DequantQ6K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = F16ToF32(Half(b + 208));
  for (int e = 0; e < kQK; ++e) {
    const Q6Index ix = Q6At(e);
    const int q = (((ql[ix.ql] >> ix.ql_shift) & 0xF) | (((qh[ix.qh] >> ix.qh_shift) & 3) << 4)) - 32;
    y[e] = (d * static_cast<float>(sc[ix.scale])) * static_cast<float>(q);
  }
}

// ---- quantisers ----------------------------------------------------------------

// ggml's nearest_int: round half to even through the float adder.
int NearestInt(float v) {
  const float t = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// gguf-py Q4_0 / Q5_0: d = max / -2^(bits-1) where max is the first element of
// largest magnitude; q = trunc(x/d + 2^(bits-1) + 0.5) clipped.
void QuantSymmetric(const float* x, uint8_t* q, float* d_out, int bits) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float half = static_cast<float>(1 << (bits - 1));
  const float d = max / -half;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  const int qmax = (1 << bits) - 1;
  for (int j = 0; j < 32; ++j) {
    const float t = std::trunc(x[j] * id + (half + 0.5f));
    q[j] = static_cast<uint8_t>(std::clamp(static_cast<int>(t), 0, qmax));
  }
  *d_out = d;
}

// gguf-py Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), q = trunc((x-min)/d + .5).
void QuantAffine(const float* x, uint8_t* q, float* d_out, float* m_out, int bits) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < 32; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
  const int qmax = (1 << bits) - 1;
  const float d = (mx - mn) / static_cast<float>(qmax);
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  for (int j = 0; j < 32; ++j) {
    const float t = std::trunc((x[j] - mn) * id + 0.5f);
    q[j] = static_cast<uint8_t>(std::clamp(static_cast<int>(t), 0, qmax));
  }
  *d_out = d;
  *m_out = mn;
}

void PackNibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}
void PackHighBits(const uint8_t* q, uint8_t* qh4) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh4, &qh, 4);
}

// One block of 32 of the legacy formats Q4_0, Q5_0 (symmetric) and Q4_1,
// Q5_1 (affine), in ggml's layout: d (f16), the minimum m (f16, affine
// only), the fifth bits qh (u32, 5-bit only), then the low nibbles qs.
void PutLegacyBlock(const float* x, uint8_t* y, int bits, bool affine) {
  uint8_t q[32];
  float d = 0, m = 0;
  if (affine) {
    QuantAffine(x, q, &d, &m, bits);
  } else {
    QuantSymmetric(x, q, &d, bits);
  }
  PutHalf(y, d);
  uint8_t* p = y + 2;
  if (affine) {
    PutHalf(p, m);
    p += 2;
  }
  if (bits == 5) {
    PackHighBits(q, p);
    p += 4;
  }
  PackNibbles(q, p);
}

// ggml make_qkx2_quants: affine fit x ~ scale*L - the_min (L in [0, nmax])
// by a weighted least-squares search over nstep+1 candidate scales.
float MakeQkx2(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min, float rmin,
               float rdelta, int nstep) {
  uint8_t Laux[32];
  float mn = x[0], mx = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < mn) mn = x[i];
    if (x[i] > mx) mx = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (mn > 0) mn = 0;
  if (mx == mn) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -mn;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (mx - mn);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - mn));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + mn - x[i];
    diff = diff * diff;
    best_error += w[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (mx - mn);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - mn));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = diff * diff;
        cur_error += w[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        mn = this_min;
      }
    }
  }
  *the_min = -mn;
  return scale;
}

// Q4_K (bits 4) / Q5_K (bits 5): ggml quantize_row_q{4,5}_K_ref.
void QuantQ45K(const float* x, uint8_t* b, int bits) {
  const int nmax = (1 << bits) - 1;
  uint8_t L[kQK];
  float mins[8], scales[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xj[l]);
    scales[j] = bits == 4 ? MakeQkx2(32, nmax, xj, weights, L + 32 * j, &mins[j], -1.f, 0.1f, 20)
                          : MakeQkx2(32, nmax, xj, weights, L + 32 * j, &mins[j], -0.5f, 0.1f, 15);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  std::memset(b, 0, bits == 4 ? 144 : 176);
  uint8_t* sc = b + 4;
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      sc[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  PutHalf(b, max_scale / 63.f);
  PutHalf(b + 2, max_min / 63.f);
  const float d = F16ToF32(Half(b)), dmin = F16ToF32(Half(b + 2));
  for (int j = 0; j < 8; ++j) {
    uint8_t scv, mv;
    ScaleMinK4(j, sc, &scv, &mv);
    const float dj = d * static_cast<float>(scv);
    if (dj == 0.0f) continue;  // keeps the first pass's L
    const float dm = dmin * static_cast<float>(mv);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / dj);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = bits == 4 ? b + 16 : b + 48;
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
      if (bits == 5) {
        if (l1 > 15) { l1 -= 16; qh[l] |= static_cast<uint8_t>(1 << (2 * c)); }
        if (l2 > 15) { l2 -= 16; qh[l] |= static_cast<uint8_t>(2 << (2 * c)); }
      }
      qs[32 * c + l] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
  }
}

// ggml make_qx_quants with rmse_type 1 and no importance weights (w = x^2):
// symmetric fit x ~ scale*(L - nmax), L in [0, 2*nmax).
float MakeQx(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = -fnmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(fnmax + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q6_K: ggml quantize_row_q6_K_ref.
void QuantQ6K(const float* x, uint8_t* b) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float s = MakeQx(16, 32, x + 16 * ib, L + 16 * ib);
    scales[ib] = s;
    if (std::fabs(s) > max_abs_scale) {
      max_abs_scale = std::fabs(s);
      max_scale = s;
    }
  }
  std::memset(b, 0, 210);
  if (max_abs_scale < 1e-15f) return;  // all zero (d = +0)
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  const float iscale = -128.f / max_scale;
  PutHalf(b + 208, 1 / iscale);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  const float d = F16ToF32(Half(b + 208));
  for (int j = 0; j < 16; ++j) {
    const float dj = d * static_cast<float>(sc[j]);
    if (dj == 0.0f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = NearestInt(x[16 * j + ii] / dj);
      L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
    }
  }
  for (int e = 0; e < kQK; ++e) {
    const Q6Index ix = Q6At(e);
    const int v = L[e];
    b[ix.ql] |= static_cast<uint8_t>((v & 0xF) << ix.ql_shift);
    b[128 + ix.qh] |= static_cast<uint8_t>(((v >> 4) & 3) << ix.qh_shift);
  }
}

}  // namespace

bool GgmlTypeSupported(uint32_t t) {
  switch (t) {
    case 0: case 1: case 2: case 3: case 6: case 7: case 8: case 12: case 13: case 14: case 30:
      return true;
    default:
      return false;
  }
}

int64_t GgmlBlockSize(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
      return 32;
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return kQK;
    default:
      return 1;
  }
}

int64_t GgmlBlockBytes(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 4;
    case GgmlType::kF16: case GgmlType::kBF16: return 2;
    case GgmlType::kQ4_0: return 18;
    case GgmlType::kQ4_1: return 20;
    case GgmlType::kQ5_0: return 22;
    case GgmlType::kQ5_1: return 24;
    case GgmlType::kQ8_0: return 34;
    case GgmlType::kQ4_K: return 144;
    case GgmlType::kQ5_K: return 176;
    case GgmlType::kQ6_K: return 210;
  }
  return 0;
}

bool GgmlRowBytes(GgmlType t, int64_t n, int64_t* bytes) {
  const int64_t bs = GgmlBlockSize(t);
  if (n < 0 || n % bs != 0) return false;
  const int64_t blocks = n / bs;
  const int64_t bb = GgmlBlockBytes(t);
  if (bb == 0 || blocks > std::numeric_limits<int64_t>::max() / bb) return false;
  *bytes = blocks * bb;
  return true;
}

Status DequantizeRow(float* dst, const void* src_v, GgmlType t, int64_t n) {
  const uint8_t* src = static_cast<const uint8_t*>(src_v);
  const int64_t bs = GgmlBlockSize(t);
  if (n < 0 || n % bs != 0 || GgmlBlockBytes(t) == 0) {
    return InvalidArgument(std::string("dequantize: n = ") + std::to_string(n) + " is not a multiple of the " +
                           GgmlTypeName(static_cast<uint32_t>(t)) + " block size " + std::to_string(bs));
  }
  const int64_t nb = n / bs;
  const int64_t bb = GgmlBlockBytes(t);
  switch (t) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return Status::Ok();
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(Half(src + 2 * i));
      return Status::Ok();
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(Half(src + 2 * i));
      return Status::Ok();
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < nb; ++b, src += bb) {
        const float d = F16ToF32(Half(src));
        for (int j = 0; j < 32; ++j) dst[b * 32 + j] = d * static_cast<float>(static_cast<int8_t>(src[2 + j]));
      }
      return Status::Ok();
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const bool affine = t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1;
      const bool five = t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1;
      const int qs_at = (affine ? 4 : 2) + (five ? 4 : 0);
      const float offset = five ? 16.0f : 8.0f;
      for (int64_t b = 0; b < nb; ++b, src += bb) {
        const float d = F16ToF32(Half(src));
        const float m = affine ? F16ToF32(Half(src + 2)) : 0.0f;
        uint32_t qh = 0;
        if (five) std::memcpy(&qh, src + (affine ? 4 : 2), 4);
        for (int j = 0; j < 32; ++j) {
          const uint8_t byte = src[qs_at + (j & 15)];
          int q = j < 16 ? byte & 0x0F : byte >> 4;
          if (five) q |= static_cast<int>((qh >> j) & 1) << 4;
          // d*q is exact in fp32 (11 x 5 significant bits): one rounding for
          // the affine types, as gguf-py's (d * q) + m; d*(q-off) is exact.
          dst[b * 32 + j] = affine ? d * static_cast<float>(q) + m : d * (static_cast<float>(q) - offset);
        }
      }
      return Status::Ok();
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      for (int64_t b = 0; b < nb; ++b, src += bb) DequantQ4K(src, dst + b * kQK, t == GgmlType::kQ5_K);
      return Status::Ok();
    case GgmlType::kQ6_K:
      for (int64_t b = 0; b < nb; ++b, src += bb) DequantQ6K(src, dst + b * kQK);
      return Status::Ok();
  }
  return InvalidArgument("dequantize: unsupported type " + std::to_string(static_cast<uint32_t>(t)));
}

Status QuantizeRow(void* dst_v, const float* src, GgmlType t, int64_t n) {
  uint8_t* dst = static_cast<uint8_t*>(dst_v);
  const int64_t bs = GgmlBlockSize(t);
  const std::string tn = GgmlTypeName(static_cast<uint32_t>(t));
  if (n < 0 || n % bs != 0 || GgmlBlockBytes(t) == 0) {
    return InvalidArgument("quantize: n = " + std::to_string(n) + " is not a multiple of the " + tn +
                           " block size " + std::to_string(bs));
  }
  if (t != GgmlType::kF32 && t != GgmlType::kF16 && t != GgmlType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(src[i])) {
        return InvalidArgument("quantize to " + tn + ": element " + std::to_string(i) + " of " +
                               std::to_string(n) + " is not finite");
      }
    }
  }
  const int64_t nb = n / bs;
  const int64_t bb = GgmlBlockBytes(t);
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * bs;
    uint8_t* y = dst + b * bb;
    switch (t) {
      case GgmlType::kF32:
        std::memcpy(y, x, 4);
        break;
      case GgmlType::kF16: {
        const uint16_t h = F32ToF16(x[0]);
        std::memcpy(y, &h, 2);
        break;
      }
      case GgmlType::kBF16: {
        const uint16_t h = F32ToBF16(x[0]);
        std::memcpy(y, &h, 2);
        break;
      }
      case GgmlType::kQ8_0: {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d == 0.0f ? 0.0f : 1.0f / d;
        PutHalf(y, d);
        for (int j = 0; j < 32; ++j) y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
        break;
      }
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1: {
        const bool five = t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1;
        PutLegacyBlock(x, y, five ? 5 : 4, t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1);
        break;
      }
      case GgmlType::kQ4_K:
        QuantQ45K(x, y, 4);
        break;
      case GgmlType::kQ5_K:
        QuantQ45K(x, y, 5);
        break;
      case GgmlType::kQ6_K:
        QuantQ6K(x, y);
        break;
    }
  }
  return Status::Ok();
}

}  // namespace attnflow
