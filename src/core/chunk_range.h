// core/chunk_range.h — one worker's share of a parallel loop's chunks, for
// work stealing without locks (the decode matvec of ops/qmatmul.cc and the
// phases of core/phased_region.h).
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

// Chunks [0, chunks) as W contiguous ranges, range w = [chunks*w/W,
// chunks*(w+1)/W) (relaxed stores: the pool hand-off publishes them).
inline void SplitEvenly(ChunkRange* ranges, int64_t chunks, int64_t W) {
  for (int64_t w = 0; w < W; ++w) {
    ranges[w].fb.store(ChunkRange::Pack(static_cast<uint32_t>(chunks * w / W),
                                        static_cast<uint32_t>(chunks * (w + 1) / W)),
                       std::memory_order_relaxed);
  }
}

// Task w of W: runs its own chunks (ranges[w], from the front), then steals
// the other tasks' chunks (from the back, tasks w+1, w+2, ... in turn), one
// chunk(c) call per claimed chunk; returns how many chunks it ran.
template <typename Fn>
int64_t RunOwnThenSteal(ChunkRange* ranges, int64_t w, int64_t W, Fn&& chunk) {
  uint32_t c;
  int64_t n = 0;
  for (int64_t k = 0; k < W; ++k) {
    ChunkRange& range = ranges[(w + k) % W];
    while (range.Take(k == 0, &c)) {
      chunk(c);
      ++n;
    }
  }
  return n;
}

}  // namespace attnflow::core
