// ops/q4k_scales.h — the 12-byte scale field of a Q4_K / Q5_K block (bytes
// 4..15) unpacked for all 8 sub-blocks at once, for the SIMD dots that
// scale a whole block with one vector product (ops/qmatmul.cc,
// ops/qdot_int8.cc).
//
// Invariant: byte s of `scales` / `mins` is sub-block s's 6-bit scale / min,
// the values of ggml's get_scale_min_k4 (as io/gguf_quants.cc and the
// per-sub-block code): sub-blocks 0-3 are the low 6 bits of bytes 0-3
// (scales) and 4-7 (mins); sub-blocks 4-7 the low (scales) or high (mins)
// nibble of bytes 8-11 with the top 2 bits of bytes 0-3 (scales) or 4-7
// (mins) above it. Scalar code, so it can be included by every SIMD target.
#pragma once

#include <cstdint>
#include <cstring>

namespace attnflow::ops {

inline void Q4KScalesMins(const uint8_t* blk, uint64_t* scales, uint64_t* mins) {
  uint32_t u[3];
  std::memcpy(u, blk + 4, 12);
  constexpr uint32_t kM6 = 0x3F3F3F3Fu, kM4 = 0x0F0F0F0Fu, kM2 = 0x03030303u;
  *scales = (u[0] & kM6) | (uint64_t{(u[2] & kM4) | (((u[0] >> 6) & kM2) << 4)} << 32);
  *mins = (u[1] & kM6) | (uint64_t{((u[2] >> 4) & kM4) | (((u[1] >> 6) & kM2) << 4)} << 32);
}

}  // namespace attnflow::ops
