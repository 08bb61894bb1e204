// core/chunk_range.h — one worker's share of a parallel loop's chunks, for
// work stealing without locks (the decode matvec of ops/qmatmul.cc and the
// fused decode regions of model/llama).
//
// Invariants: [front, back) is packed in one 64-bit word, so the owner
// (taking chunks from the front) and thieves (taking them from the back)
// claim each chunk exactly once; which chunk a worker computes never changes
// a chunk's result, so results do not depend on who took it.
#pragma once

#include <atomic>
#include <cstdint>

namespace attnflow::core {

struct alignas(64) ChunkRange {
  std::atomic<uint64_t> fb{0};
  static uint64_t Pack(uint32_t front, uint32_t back) { return (uint64_t{back} << 32) | front; }
  // Claims the front (owner) or back (thief) chunk; false when empty.
  bool Take(bool from_front, uint32_t* chunk) {
    uint64_t cur = fb.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t f = static_cast<uint32_t>(cur), b = static_cast<uint32_t>(cur >> 32);
      if (f >= b) return false;
      const uint64_t next = from_front ? Pack(f + 1, b) : Pack(f, b - 1);
      if (fb.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
        *chunk = from_front ? f : b - 1;
        return true;
      }
    }
  }
};

}  // namespace attnflow::core
