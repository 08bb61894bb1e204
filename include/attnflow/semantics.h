// attnflow/semantics.h — THE single definition of attention semantics.
//
// Every implementation (the float64 reference, the tiled fast kernels, the
// decode kernels, the golden generator documented in docs/semantics.md) uses
// these functions; nothing else re-derives them. See docs/semantics.md.
//
//  * Layout: q [B,H,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv].
//  * GQA/MQA: query head h reads kv head h / (H / Hkv) (contiguous groups,
//    like torch.repeat_interleave). H % Hkv must be 0.
//  * Mask polarity: BOOL true = may attend. A float mask is ADDED to the
//    scaled scores (-inf behaves like false).
//  * kv_lens[b]: keys j >= kv_lens[b] are padding (masked).
//  * Causal alignment (Lq queries, Lk keys):
//      top_left:     j <= i                (torch is_causal=True)
//      bottom_right: j <= i + (Lk - Lq)    (queries are the last Lq positions)
//  * Sliding window (FlashAttention convention, relative to the bottom-right
//    diagonal d = i + (Lk - Lq)): allowed iff
//      (left  < 0 || j >= d - left) && (right < 0 || j <= d + right).
//    -1 means unbounded on that side.
//  * ALiBi: bias = -slope[b][h] * |d - j| added to the scaled score, with
//    the same diagonal d (so bottom-right-causal ALiBi is -slope*(d-j)).
//    Slopes are [H] (every batch) or [B,H] (per batch, FlashAttention).
//  * Scale: default 1/sqrt(D); a custom scale multiplies q.kT.
//  * Softcap (Gemma 2 / FlashAttention): with cap > 0 the scaled score x
//    becomes cap * tanh(x / cap) BEFORE the float mask and ALiBi are added.
//  * Diagonal alignment (KvAlign): d uses the padded key length Lk
//    (kPadded, the default) or each batch's own kv_lens[b] (kPerSequence,
//    FlashAttention's cache_seqlens): d = i + (kv_lens[b] - Lq). It moves
//    bottom-right causal, the window and ALiBi; top-left causal is j <= i
//    either way. Every function below takes that length as `kv_len`
//    (DiagonalKvLen).
//  * Fully masked row (no allowed key): weights 0, out 0, LSE -inf. Never NaN.
//  * Every constraint above is ANDed; a key is visible only if all allow it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

namespace attnflow {

enum class Causal : uint8_t { kNone, kTopLeft, kBottomRight };

const char* CausalName(Causal c);  // "none", "top_left", "bottom_right"
bool ParseCausal(std::string_view s, Causal* out);

// Which key length positions the bottom-right diagonal of batch b.
enum class KvAlign : uint8_t { kPadded, kPerSequence };
const char* KvAlignName(KvAlign a);  // "padded", "per_sequence"
bool ParseKvAlign(std::string_view s, KvAlign* out);

// The `kv_len` argument of the functions below for batch b: the padded key
// length Lk, or (kPerSequence) the batch's own valid length kv_lens[b].
constexpr int64_t DiagonalKvLen(KvAlign a, int64_t kv_len, int64_t valid_kv) {
  return a == KvAlign::kPerSequence ? valid_kv : kv_len;
}

// Logit soft-capping: cap * tanh(x / cap) for cap > 0, x unchanged for 0.
inline double Softcap(double x, double cap) {
  return cap > 0.0 ? cap * std::tanh(x / cap) : x;
}

// Query head -> kv head (GQA grouping). Requires num_heads % num_kv_heads == 0.
constexpr int64_t KvHeadFor(int64_t h, int64_t num_heads, int64_t num_kv_heads) {
  return h / (num_heads / num_kv_heads);
}

// Bottom-right diagonal offset of query row i.
constexpr int64_t Diagonal(int64_t i, int64_t q_len, int64_t kv_len) {
  return i + (kv_len - q_len);
}

// Largest key index (inclusive) the causal rule lets row i see; kv_len-1 for
// kNone. May be negative (row sees nothing).
constexpr int64_t CausalLastKey(Causal c, int64_t i, int64_t q_len,
                                int64_t kv_len) {
  switch (c) {
    case Causal::kTopLeft:
      return i < kv_len - 1 ? i : kv_len - 1;
    case Causal::kBottomRight: {
      const int64_t d = Diagonal(i, q_len, kv_len);
      return d < kv_len - 1 ? d : kv_len - 1;
    }
    case Causal::kNone:
    default:
      return kv_len - 1;
  }
}

constexpr bool CausalAllows(Causal c, int64_t i, int64_t j, int64_t q_len,
                            int64_t kv_len) {
  return j <= CausalLastKey(c, i, q_len, kv_len);
}

// Visible key range [first, last] (inclusive) of row i from the index-computed
// constraints (causal, window, kv_len). first > last means an empty row.
struct KeyRange {
  int64_t first;
  int64_t last;
};
constexpr KeyRange VisibleKeys(Causal c, int64_t window_left,
                               int64_t window_right, int64_t i, int64_t q_len,
                               int64_t kv_len, int64_t valid_kv) {
  int64_t last = CausalLastKey(c, i, q_len, kv_len);
  if (valid_kv - 1 < last) last = valid_kv - 1;
  int64_t first = 0;
  const int64_t d = Diagonal(i, q_len, kv_len);
  if (window_left >= 0 && d - window_left > first) first = d - window_left;
  if (window_right >= 0 && d + window_right < last) last = d + window_right;
  return {first, last};
}

constexpr double AlibiBias(double slope, int64_t i, int64_t j, int64_t q_len,
                           int64_t kv_len) {
  const int64_t dist = Diagonal(i, q_len, kv_len) - j;
  return -slope * static_cast<double>(dist < 0 ? -dist : dist);
}

// Standard ALiBi slopes (Press et al.), including non-power-of-two head
// counts: closest power of two n, slopes 2^(-8k/n) for k=1..n, then the odd
// entries of the 2n sequence for the remainder.
void AlibiSlopes(int64_t num_heads, double* out);

inline double DefaultScale(int64_t head_dim) {
  return head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
}

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace attnflow
