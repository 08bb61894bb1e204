// kernels/decode_int8.h — the resolved problem and plan of the int8 KV cache
// decode (attnflow/kv_int8.h), shared by its driver (decode_int8.cc, plain
// C++) and its per-target split kernel (kernels_decode_int8.cc,
// decode_int8-inl.h, compiled once per Highway target).
//
// Invariants (established by decode_int8.cc before any kernel runs):
//  * 1 <= D, Dv <= kDecodeS8MaxHeadDim; G = H / Hkv >= 1;
//  * for every b: 0 <= n[b] <= capacity visible positions, the oldest at
//    position first[b] (slot first[b] % capacity), and the sequence's
//    pointers are non-null when n[b] > 0;
//  * qs holds, per (b, h), the query row pre-scaled by scale * log2(e) *
//    k_scale[g] in fp32 and zero padded to dp: scores are in the log2
//    domain and every one is finite (rows that could overflow are flagged
//    in `recompute` and their qs are zero; the driver recomputes them);
//  * a task is (b, kv head g, split s); its rows are the G query heads of g.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnflow/kv_int8.h"

namespace attnflow {
namespace kernels {

struct ProblemS8 {
  int64_t B = 0, H = 0, Hkv = 0, G = 1, D = 0, Dv = 0, cap = 0;
  const KvCacheS8Seq* seqs = nullptr;  // [B]
  const int64_t* first = nullptr;      // [B] oldest visible position
  const int64_t* n = nullptr;          // [B] visible positions
  const float* qs = nullptr;           // [B*H][dp] pre-scaled query rows
};

struct PlanS8 {
  int64_t lanes = 1;
  int64_t dp = 0;         // D rounded up to the lanes
  int64_t tkv = 0;        // keys per tile (a multiple of the lanes, <= split_len)
  int64_t split_len = 0;  // keys per split (a multiple of the lanes)
  int64_t n_splits = 0, num_tasks = 0;
  bool pack_k = false;        // D % lanes != 0: K tiles are copied zero padded
  size_t worker_bytes = 0;    // scratch bytes per worker (64-byte multiple)
  size_t partial_floats = 0;  // per task: O [G][Dv], m [G], l [G] (16-float multiple)
};

// Per-target facts (through dynamic dispatch).
void GetS8TargetInfo(int64_t* target, int64_t* lanes);

// Task `task` = (b * Hkv + g) * n_splits + s: writes the unnormalised
// partial (O [G][Dv] = sum_j p_j v_j in int8 units, m [G] in the log2
// domain, l [G]) of its keys. Empty splits give m = -inf, l = 0, O = 0.
void RunDecodeS8Split(const ProblemS8& p, const PlanS8& plan, int64_t task, void* scratch,
                      float* partial);

}  // namespace kernels
}  // namespace attnflow
