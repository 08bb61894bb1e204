// attnflow/kv_int8.h — the host decode over the micro library's int8 KV
// cache (the "host bridge": the same cache a device decodes with
// af_decode_s8, read by the host in fp32, so a port can be compared with the
// host on the same bytes; docs/kernels.md "int8 KV cache decode").
//
// Cache format (per sequence; exactly af_kv_cache_s8 of attnflow/micro.h):
//   k [Hkv, capacity, D]   int8, a position's key row adjacent;
//   v [Hkv, Dv, capacity]  int8, a value dimension's positions adjacent
//                          (AF_V_COLS);
//   position p lives in slot p % capacity (a ring); `length` positions have
//   been appended; real value = scale[g] * int8 (symmetric, one scale per kv
//   head for K and one for V, kept by the caller).
// Visible positions: window 0 -> all `length` positions (length <= capacity);
// window w > 0 (w <= capacity) -> the last min(length, w) positions. They are
// the keys of the one query of each sequence (its newest position; no
// causal mask is needed beyond that).
//
// DecodeKvS8 computes, per batch b and query head h (kv head g = h / (H/Hkv)):
//   out[b,h,0,:] = softmax(scale * q[b,h,0,:] . (sk[g] K_g)^T) (sv[g] V_g)
//   lse[b,h,0]   = log sum exp of the scaled scores
// in fp32 (accumulated in fp32, split merge in double), as reference::Sdpa
// on the dequantised cache: a sequence with no visible position gives out 0
// and lse -inf; a row whose fp32 result would not be finite (non-finite or
// huge q) is computed in double with the reference's rules. Results never
// depend on the thread count (the splits depend only on the shape and the
// lengths and are merged in a fixed order).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "attnflow/status.h"
#include "attnflow/tensor.h"
#include "attnflow/threading.h"

namespace attnflow {

// One sequence's int8 cache (the pointers of an af_kv_cache_s8 plus its
// scales). Pointers may be null only when length == 0.
struct KvCacheS8Seq {
  const int8_t* k = nullptr;        // [Hkv, capacity, D]
  const int8_t* v = nullptr;        // [Hkv, Dv, capacity]
  const float* k_scale = nullptr;   // [Hkv], finite, >= 0
  const float* v_scale = nullptr;   // [Hkv], finite, >= 0
  int64_t length = 0;               // positions appended so far (>= 0)
};

// The dimensions every sequence of a batch shares (af_kv_cache_s8's
// num_kv_heads, head_dim, v_dim, capacity, window).
struct KvCacheS8Layout {
  int64_t num_kv_heads = 0, head_dim = 0, v_dim = 0, capacity = 0;
  int64_t window = 0;  // 0: all positions; > 0: the last `window`
};

struct DecodeS8Options {
  double scale = std::numeric_limits<double>::quiet_NaN();  // NaN = 1/sqrt(head_dim); finite
  ThreadPool* pool = nullptr;  // nullptr = DefaultPool()
  // Keys per split (0 = automatic; rounded up to the tile). Changes the fp32
  // reduction order, never makes results depend on the thread count.
  int64_t split_kv = 0;
};

// What ran, for --explain: "int8_kv_decode [AVX3] tile_kv=512 splits=4 tasks=32: ...".
struct DecodeS8Choice {
  std::string simd_target;
  int64_t tile_kv = 0, num_splits = 0, num_tasks = 0;
  std::string reason;
  std::string ToString() const;
};

// Largest head_dim / v_dim of the int8 cache decode.
constexpr int64_t kDecodeS8MaxHeadDim = 256;

// q [B, H, 1, D] F32, out [B, H, 1, Dv] F32, lse [B, H, 1] F32 or an absent
// view; any strides; B = seqs.size(). Errors (InvalidArgument, naming
// "decode_kv_s8" and the shapes): dtypes, ranks, H not a multiple of Hkv,
// D or Dv outside 1..256, a length or window the cache cannot hold, a null
// pointer of a non-empty sequence, a non-finite or negative scale.
Status DecodeKvS8(const TensorView& out, const TensorView& lse, const TensorView& q,
                  std::span<const KvCacheS8Seq> seqs, const KvCacheS8Layout& layout,
                  const DecodeS8Options& opt = {}, DecodeS8Choice* choice = nullptr);

// The number of positions DecodeKvS8 reads for a sequence of this length.
int64_t VisibleS8(int64_t length, const KvCacheS8Layout& layout);

// Bytes one call reads from the caches: for each sequence Hkv*(D+Dv) int8
// per visible position, plus its 2*Hkv float scales when it has any.
double DecodeKvS8Bytes(std::span<const KvCacheS8Seq> seqs, const KvCacheS8Layout& layout);

}  // namespace attnflow
