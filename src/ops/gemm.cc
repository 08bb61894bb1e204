// ops/gemm.cc — the dense GEMM of every model (ops::Linear, PackedMatrix).
//
// y[m, n] = act(x[m, k] · w[n, k]ᵀ + bias[n]) + residual[m, n]
//
// Packing (once, at load): w is cut into panels of kPanelCols (16) output
// columns; panel j holds w[16j + c, p] at [p][c], k-major, zero-padded past
// n. The micro-kernel keeps a register tile of kMr rows x (kTilePanels x 16)
// columns of accumulators; per p it loads the panel row(s) and broadcasts
// x[r, p] into one FMA per accumulator vector (BLIS-style outer product).
//
//   target     kMr  panels/tile  accumulators
//   AVX3        8       2        16 zmm (of 32)
//   AVX2        6       1        12 ymm (of 16)
//   NEON        4       1        16 q   (of 32)
//   SSE4/EMU    2       1         8 xmm (of 16)
//
// Invariants:
//  1. Every output element is the fma chain acc = fma(x[r,p], w[c,p], acc)
//     over p = 0..k-1 starting from +0, then + bias, then the activation,
//     then + residual — the same order for every tile shape, task split and
//     thread count (results are bit-identical for any thread count, and
//     equal to a scalar std::fma loop on every target with native FMA).
//  2. Tasks are (row block of kBlockRows) x (column block of kBlockPanels
//     panels), derived from m and n only. For m <= 64 (one sentence's
//     tokens) there is one row block, so the threads split the columns. On
//     AVX-512 every task with a full 64-column block runs the chunked kernel
//     (LinearSmallMT: 6 x 64 register tiles, k in chunks of 64 with parked
//     accumulators, the next chunk prefetched), which computes the same fma
//     chains; ragged blocks and other targets take the general tiles.
//  3. Linear allocates nothing; the partial last panel is stored through a
//     stack tile.
//  4. Norm epilogue (LinearEpilogue::norm_gamma): each row block has an
//     atomic count of its finished column tasks (a stack array, so at most
//     kMaxFusedNormRows rows); the task that finishes a block last (acq_rel:
//     it sees every other task's stores) runs ops::LayerNormRows over the
//     block's stored rows. Which task that is varies from run to run; the
//     result cannot, because LayerNormRows is a pure function of each stored
//     row — so fused == Linear then ops::LayerNorm, bit for bit. Above
//     kMaxFusedNormRows rows Linear runs exactly that composed pair.
#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "attnflow/ops.h"
#include "ops/math-inl.h"

ATTNFLOW_HWY_NAMESPACE_BEGIN(ops)

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kMr = 8;
constexpr int kTilePanels = 2;
#elif HWY_TARGET == HWY_AVX2
constexpr int kMr = 6;
constexpr int kTilePanels = 1;
#elif HWY_ARCH_ARM
constexpr int kMr = 4;
constexpr int kTilePanels = 1;
#else
constexpr int kMr = 2;
constexpr int kTilePanels = 1;
#endif

// Vectors per panel row (16 floats).
constexpr int VecsPerPanel() {
  return static_cast<int>(kPanelCols / static_cast<int64_t>(hn::MaxLanes(DF())));
}

// Applies the epilogue to one finished vector of outputs (columns c0..).
HWY_INLINE VF Finish(DF df, VF acc, const float* bias_c, Activation act) {
  if (bias_c != nullptr) acc = hn::Add(acc, hn::LoadU(df, bias_c));
  switch (act) {
    case Activation::kNone:
      return acc;
    case Activation::kGeluErf:
      return GeluErfV(df, acc);
    case Activation::kGeluTanh:
      return GeluTanhV(df, acc);
    case Activation::kRelu:
      return hn::Max(acc, hn::Zero(df));
    case Activation::kSilu:
      return SiluV(df, acc);
  }
  return acc;
}

// The register tile's accumulators, kC = P panels x VecsPerPanel() vectors
// per row: +0 (from == nullptr) or the exact fp32 values parked at from
// ([R][kC][lanes], vector-aligned) by a previous chunk.
template <int R, int kC>
HWY_INLINE void LoadAcc(DF df, VF (&acc)[R][kC], const float* HWY_RESTRICT from) {
  const size_t nl = hn::Lanes(df);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < kC; ++c)
      acc[r][c] = from == nullptr ? hn::Zero(df) : hn::Load(df, from + (r * kC + c) * nl);
}

// acc[r][c] = fma(x[r*ldx + p], w_p[c], acc[r][c]) for steps p in [p0, p1),
// in step order (invariant 1); w_p is step p's row of each of the P panels
// from `panel` (panel stride panel_floats). kAligned: the panels are
// vector-aligned. prefetch_ahead > 0: each step also fetches (to L2) the
// panel rows that many steps ahead.
template <int R, int P, bool kAligned, int kC>
HWY_INLINE void PanelSteps(DF df, VF (&acc)[R][kC], const float* HWY_RESTRICT x, int64_t ldx,
                           const float* HWY_RESTRICT panel, int64_t panel_floats, int64_t p0,
                           int64_t p1, int64_t prefetch_ahead) {
  constexpr int kV = VecsPerPanel();
  static_assert(kC == P * kV, "PanelSteps: kC accumulators per row are P panels of vectors");
  const size_t nl = hn::Lanes(df);
  for (int64_t p = p0; p < p1; ++p) {
    VF w[kC];
#pragma GCC unroll 16
    for (int pp = 0; pp < P; ++pp) {
      const float* row = panel + pp * panel_floats + p * kPanelCols;
#pragma GCC unroll 16
      for (int v = 0; v < kV; ++v)
        w[pp * kV + v] = kAligned ? hn::Load(df, row + v * nl) : hn::LoadU(df, row + v * nl);
      if (prefetch_ahead > 0) __builtin_prefetch(row + prefetch_ahead * kPanelCols, 0, 2);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const VF xr = hn::Set(df, x[r * ldx + p]);
#pragma GCC unroll 16
      for (int c = 0; c < kC; ++c) acc[r][c] = hn::MulAdd(xr, w[c], acc[r][c]);
    }
  }
}

// One register tile: rows [0, R) of x (row stride ldx) times panels
// [0, P) starting at `panel`, written to y columns [0, ncols).
template <int R, int P>
HWY_INLINE void Tile(float* HWY_RESTRICT y, int64_t ldy, const float* HWY_RESTRICT x, int64_t ldx,
                     const float* HWY_RESTRICT panel, int64_t k, int64_t ncols,
                     const LinearEpilogue& ep, int64_t row0, int64_t col0) {
  const DF df;
  constexpr int kV = VecsPerPanel();
  constexpr int kC = P * kV;  // accumulator vectors per row
  const size_t nl = hn::Lanes(df);
  VF acc[R][kC];
  LoadAcc(df, acc, nullptr);
  PanelSteps<R, P, /*kAligned=*/false>(df, acc, x, ldx, panel, k * kPanelCols, 0, k, 0);
  const float* bias = ep.bias != nullptr ? ep.bias + col0 : nullptr;
  HWY_ALIGN float row_buf[kTilePanels * kPanelCols];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* yr = y + r * ldy;
    const float* res = ep.residual != nullptr ? ep.residual + (row0 + r) * ep.ld_residual + col0
                                              : nullptr;
    if (ncols == P * kPanelCols && bias == nullptr) {
#pragma GCC unroll 16
      for (int c = 0; c < kC; ++c) {
        VF v = Finish(df, acc[r][c], nullptr, ep.act);
        if (res != nullptr) v = hn::Add(v, hn::LoadU(df, res + c * nl));
        hn::StoreU(v, df, yr + c * nl);
      }
    } else if (ncols == P * kPanelCols) {
#pragma GCC unroll 16
      for (int c = 0; c < kC; ++c) {
        VF v = Finish(df, acc[r][c], bias + c * nl, ep.act);
        if (res != nullptr) v = hn::Add(v, hn::LoadU(df, res + c * nl));
        hn::StoreU(v, df, yr + c * nl);
      }
    } else {
      // Partial last panel: finish in a stack row, copy the valid columns.
      HWY_ALIGN float bias_buf[kTilePanels * kPanelCols] = {};
      if (bias != nullptr)
        for (int64_t c = 0; c < ncols; ++c) bias_buf[c] = bias[c];
#pragma GCC unroll 16
      for (int c = 0; c < kC; ++c) {
        hn::Store(Finish(df, acc[r][c], bias != nullptr ? bias_buf + c * nl : nullptr, ep.act), df,
                  row_buf + c * nl);
      }
      for (int64_t c = 0; c < ncols; ++c) yr[c] = row_buf[c] + (res != nullptr ? res[c] : 0.0f);
    }
  }
}

// Rows [i0, i1) in tiles of kMr (then 4, 2, 1 for the tail) against panels
// [p, p + P) covering ncols output columns.
template <int P>
HWY_INLINE void RowsAgainstPanels(float* y, int64_t ldy, const float* x, int64_t ldx,
                                  const float* panel, int64_t k, int64_t ncols,
                                  const LinearEpilogue& ep, int64_t i0, int64_t i1,
                                  int64_t col0) {
  int64_t i = i0;
  for (; i + kMr <= i1; i += kMr)
    Tile<kMr, P>(y + i * ldy + col0, ldy, x + i * ldx, ldx, panel, k, ncols, ep, i, col0);
  if constexpr (kMr > 4) {
    for (; i + 4 <= i1; i += 4)
      Tile<4, P>(y + i * ldy + col0, ldy, x + i * ldx, ldx, panel, k, ncols, ep, i, col0);
  }
  if constexpr (kMr > 2) {
    for (; i + 2 <= i1; i += 2)
      Tile<2, P>(y + i * ldy + col0, ldy, x + i * ldx, ldx, panel, k, ncols, ep, i, col0);
  }
  for (; i < i1; ++i)
    Tile<1, P>(y + i * ldy + col0, ldy, x + i * ldx, ldx, panel, k, ncols, ep, i, col0);
}

// Rows [i0, i1) x panels [j0, j1).
void LinearBlockT(float* y, int64_t ldy, const float* x, int64_t ldx, const float* panels,
                  int64_t n, int64_t k, const LinearEpilogue& ep, int64_t i0, int64_t i1,
                  int64_t j0, int64_t j1) {
  const int64_t panel_floats = k * kPanelCols;
  int64_t j = j0;
  for (; j + kTilePanels <= j1; j += kTilePanels) {
    const int64_t col0 = j * kPanelCols;
    const int64_t ncols = std::min<int64_t>(kTilePanels * kPanelCols, n - col0);
    RowsAgainstPanels<kTilePanels>(y, ldy, x, ldx, panels + j * panel_floats, k, ncols, ep, i0,
                                   i1, col0);
  }
  for (; j < j1; ++j) {
    const int64_t col0 = j * kPanelCols;
    const int64_t ncols = std::min<int64_t>(kPanelCols, n - col0);
    RowsAgainstPanels<1>(y, ldy, x, ldx, panels + j * panel_floats, k, ncols, ep, i0, i1, col0);
  }
}

// ---- small-M path (m <= kSmallM rows: one sentence's tokens) ---------------
//
// A task is a full block of kSmallPanels panels (64 columns) against all m
// rows. k is walked in chunks of kChunk steps; per chunk every row tile
// (kSmallMr rows x 4 panels: 24 zmm accumulators) runs over the chunk, then
// parks its accumulators in a stack buffer (exact fp32 copies: the fma chain
// per output is unchanged, invariant 1). So the weight block streams from
// memory once, a chunk at a time, evenly across the row tiles, and the next
// chunk is prefetched (to L2) while the current one is computed from L1.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kHasSmallM = true;
#else
constexpr bool kHasSmallM = false;
#endif
constexpr int kSmallPanels = 4;
constexpr int kSmallMr = 6;
constexpr int64_t kChunk = 64;
constexpr int64_t kSmallMaxRows = 64;

// Rows [0, R) x 4 panels over steps [p0, p1); acc_buf [R][4 panels][16]
// holds the accumulators between chunks. first: start from +0; last: apply
// the epilogue and store to y. pf: the next chunk's first weight byte (or
// null), prefetched by row tile 0.
template <int R>
HWY_INLINE void SmallTile(float* HWY_RESTRICT y, int64_t ldy, const float* HWY_RESTRICT x,
                          int64_t ldx, const float* HWY_RESTRICT panel, int64_t k, int64_t p0,
                          int64_t p1, bool first, bool last, bool prefetch, float* acc_buf,
                          const LinearEpilogue& ep, int64_t row0, int64_t col0) {
  const DF df;
  constexpr int kV = VecsPerPanel();
  constexpr int kC = kSmallPanels * kV;
  const size_t nl = hn::Lanes(df);
  VF acc[R][kC];
  LoadAcc(df, acc, first ? nullptr : acc_buf);
  PanelSteps<R, kSmallPanels, /*kAligned=*/true>(df, acc, x, ldx, panel, k * kPanelCols, p0, p1,
                                                 prefetch ? kChunk : 0);
  if (!last) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int c = 0; c < kC; ++c) hn::Store(acc[r][c], df, acc_buf + (r * kC + c) * nl);
    return;
  }
  const float* bias = ep.bias != nullptr ? ep.bias + col0 : nullptr;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* yr = y + r * ldy;
    const float* res = ep.residual != nullptr ? ep.residual + (row0 + r) * ep.ld_residual + col0
                                              : nullptr;
#pragma GCC unroll 16
    for (int c = 0; c < kC; ++c) {
      VF v = Finish(df, acc[r][c], bias != nullptr ? bias + c * nl : nullptr, ep.act);
      if (res != nullptr) v = hn::Add(v, hn::LoadU(df, res + c * nl));
      hn::StoreU(v, df, yr + c * nl);
    }
  }
}

template <int R>
HWY_INLINE void SmallRows(float* y, int64_t ldy, const float* x, int64_t ldx, const float* panel,
                          int64_t k, int64_t p0, int64_t p1, bool first, bool last, bool prefetch,
                          float* acc_buf, const LinearEpilogue& ep, int64_t row0, int64_t col0) {
  SmallTile<R>(y + row0 * ldy + col0, ldy, x + row0 * ldx, ldx, panel, k, p0, p1, first, last,
               prefetch, acc_buf, ep, row0, col0);
}

// All m rows (m <= kSmallMaxRows) x the kSmallPanels panels from `j0` (all
// full: 64 valid columns). Returns false where this target has no such path.
bool LinearSmallMT(float* y, int64_t ldy, const float* x, int64_t ldx, const float* panels,
                   int64_t k, const LinearEpilogue& ep, int64_t m, int64_t j0) {
  if constexpr (!kHasSmallM) {
    (void)y, (void)ldy, (void)x, (void)ldx, (void)panels, (void)k, (void)ep, (void)m, (void)j0;
    return false;
  } else {
    constexpr int64_t kBlock = kSmallPanels * kPanelCols;  // 64 floats per row
    HWY_ALIGN float acc_buf[kSmallMaxRows * kBlock];
    const float* panel = panels + j0 * k * kPanelCols;
    const int64_t col0 = j0 * kPanelCols;
    for (int64_t p0 = 0; p0 < k; p0 += kChunk) {
      const int64_t p1 = std::min(k, p0 + kChunk);
      const bool first = p0 == 0, last = p1 == k;
      int64_t i = 0;
      for (; i + kSmallMr <= m; i += kSmallMr) {
        SmallRows<kSmallMr>(y, ldy, x, ldx, panel, k, p0, p1, first, last, i == 0 && !last,
                            acc_buf + i * kBlock, ep, i, col0);
      }
      const bool pf = i == 0 && !last;
      float* ab = acc_buf + i * kBlock;
      switch (m - i) {
        case 5: SmallRows<5>(y, ldy, x, ldx, panel, k, p0, p1, first, last, pf, ab, ep, i, col0); break;
        case 4: SmallRows<4>(y, ldy, x, ldx, panel, k, p0, p1, first, last, pf, ab, ep, i, col0); break;
        case 3: SmallRows<3>(y, ldy, x, ldx, panel, k, p0, p1, first, last, pf, ab, ep, i, col0); break;
        case 2: SmallRows<2>(y, ldy, x, ldx, panel, k, p0, p1, first, last, pf, ab, ep, i, col0); break;
        case 1: SmallRows<1>(y, ldy, x, ldx, panel, k, p0, p1, first, last, pf, ab, ep, i, col0); break;
        default: break;
      }
    }
    return true;
  }
}

ATTNFLOW_HWY_NAMESPACE_END()

#if HWY_ONCE
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace attnflow::ops {

HWY_EXPORT(LinearBlockT);
HWY_EXPORT(LinearSmallMT);

namespace {
// Task = 64 rows x 4 panels (64 columns): a 64 x k block of x and 4 panels
// stay in L2 while the tile loop runs; small m still yields n/64 tasks.
constexpr int64_t kBlockRows = 64;  // <= kSmallMaxRows (LinearSmallMT's buffer)
constexpr int64_t kBlockPanels = 4;
// Completion counters of the norm epilogue (invariant 4): one per row block.
constexpr int64_t kMaxNormRowBlocks = kMaxFusedNormRows / kBlockRows;
static_assert(kMaxFusedNormRows % kBlockRows == 0);
}  // namespace

bool LinearFusesNorm(int64_t m) { return m <= kMaxFusedNormRows; }

PackArena::~PackArena() { AlignedFree(base_); }
PackArena::PackArena(PackArena&& o) noexcept
    : base_(o.base_), begin_(o.begin_), cap_(o.cap_), used_(o.used_) {
  o.base_ = nullptr;
  o.begin_ = nullptr;
  o.cap_ = o.used_ = 0;
}
PackArena& PackArena::operator=(PackArena&& o) noexcept {
  if (this != &o) {
    AlignedFree(base_);
    base_ = o.base_;
    begin_ = o.begin_;
    cap_ = o.cap_;
    used_ = o.used_;
    o.base_ = nullptr;
    o.begin_ = nullptr;
    o.cap_ = o.used_ = 0;
  }
  return *this;
}

Status PackArena::Reserve(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  AlignedFree(base_);
  base_ = nullptr;
  begin_ = nullptr;
  cap_ = used_ = 0;
  if (bytes > (size_t{1} << 44)) {
    return ResourceExhausted("ops::PackArena::Reserve: " + std::to_string(bytes) +
                             " bytes is too large");
  }
  // Slack to align the start to 2 MiB (AlignedAlloc gives 64-byte
  // alignment; a request this large is a fresh mapping, so no page has
  // been touched before the madvise below).
  base_ = AlignedAlloc(bytes + kHuge);
  if (base_ == nullptr) {
    return ResourceExhausted("ops::PackArena::Reserve: cannot allocate " +
                             std::to_string(bytes + kHuge) + " bytes");
  }
  const uintptr_t b = reinterpret_cast<uintptr_t>(base_);
  begin_ = reinterpret_cast<char*>((b + kHuge - 1) / kHuge * kHuge);
  cap_ = bytes;
#ifdef MADV_HUGEPAGE
  // Whole 2 MiB pages inside [begin_, begin_ + bytes) only; a failure (no
  // THP in this kernel) just leaves 4 KiB pages.
  const size_t whole = bytes / kHuge * kHuge;
  if (whole > 0) (void)madvise(begin_, whole, MADV_HUGEPAGE);
#endif
  return Status::Ok();
}

float* PackArena::Take(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (begin_ == nullptr || rounded < bytes || rounded > cap_ - used_) return nullptr;
  float* p = reinterpret_cast<float*>(begin_ + used_);
  used_ += rounded;
  return p;
}

PackedMatrix::~PackedMatrix() {
  if (owned_) AlignedFree(data_);
}
PackedMatrix::PackedMatrix(PackedMatrix&& o) noexcept
    : data_(o.data_), bytes_(o.bytes_), n_(o.n_), k_(o.k_), owned_(o.owned_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}
PackedMatrix& PackedMatrix::operator=(PackedMatrix&& o) noexcept {
  if (this != &o) {
    if (owned_) AlignedFree(data_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    n_ = o.n_;
    k_ = o.k_;
    owned_ = o.owned_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

size_t PackedMatrix::PackedBytes(int64_t n, int64_t k) {
  if (n <= 0 || k <= 0) return 0;
  const int64_t dims[3] = {(n + kPanelCols - 1) / kPanelCols, k, kPanelCols};
  int64_t floats = 0;
  if (!CheckedNumel(dims, 3, &floats) || floats > (int64_t{1} << 40)) return 0;
  return static_cast<size_t>(floats) * sizeof(float);
}

Result<PackedMatrix> PackedMatrix::Pack(const float* w, int64_t ldw, int64_t n, int64_t k,
                                        PackArena* arena) {
  if (w == nullptr || n <= 0 || k <= 0 || ldw < k) {
    return InvalidArgument("ops::PackedMatrix::Pack: weight [" + std::to_string(n) + ", " +
                           std::to_string(k) + "] with row stride " + std::to_string(ldw) +
                           " is not a non-empty row-major matrix");
  }
  const int64_t panels = (n + kPanelCols - 1) / kPanelCols;
  const size_t bytes = PackedBytes(n, k);
  if (bytes == 0) {
    return ResourceExhausted("ops::PackedMatrix::Pack: weight [" + std::to_string(n) + ", " +
                             std::to_string(k) + "] is too large to pack");
  }
  PackedMatrix m;
  m.bytes_ = bytes;
  if (arena != nullptr) {
    m.owned_ = false;
    m.data_ = arena->Take(m.bytes_);
    if (m.data_ == nullptr) {
      return ResourceExhausted("ops::PackedMatrix::Pack: weight [" + std::to_string(n) + ", " +
                               std::to_string(k) + "] (" + std::to_string(m.bytes_) +
                               " bytes) does not fit the arena (" +
                               std::to_string(arena->capacity() - arena->used()) + " left)");
    }
  } else {
    m.data_ = static_cast<float*>(AlignedAlloc(m.bytes_));
  }
  if (m.data_ == nullptr) {
    return ResourceExhausted("ops::PackedMatrix::Pack: cannot allocate " +
                             std::to_string(m.bytes_) + " bytes for weight [" +
                             std::to_string(n) + ", " + std::to_string(k) + "]");
  }
  m.n_ = n;
  m.k_ = k;
  for (int64_t j = 0; j < panels; ++j) {
    float* dst = m.data_ + j * k * kPanelCols;
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t c = 0; c < kPanelCols; ++c) {
        const int64_t row = j * kPanelCols + c;
        dst[p * kPanelCols + c] = row < n ? w[row * ldw + p] : 0.0f;
      }
    }
  }
  return m;
}

void Linear(float* y, int64_t ldy, const float* x, int64_t ldx, const PackedMatrix& w,
            const LinearEpilogue& epilogue, int64_t m, ThreadPool& pool) {
  const int64_t n = w.rows(), k = w.cols();
  if (m <= 0 || n <= 0) return;
  const bool norm = epilogue.norm_gamma != nullptr;
  if (norm && !LinearFusesNorm(m)) {
    // Composed fallback: more row blocks than the stack counters (Linear
    // allocates nothing); the same two computations, in two regions.
    LinearEpilogue ep = epilogue;
    ep.norm_gamma = nullptr;
    Linear(y, ldy, x, ldx, w, ep, m, pool);
    LayerNorm(epilogue.norm_out, epilogue.ld_norm_out, y, ldy, epilogue.norm_gamma,
              epilogue.norm_beta, epilogue.norm_eps, m, n, pool);
    return;
  }
  const int64_t panels = (n + kPanelCols - 1) / kPanelCols;
  const int64_t row_blocks = (m + kBlockRows - 1) / kBlockRows;
  const int64_t col_blocks = (panels + kBlockPanels - 1) / kBlockPanels;
  std::atomic<int64_t> finished[kMaxNormRowBlocks];
  if (norm) {
    for (int64_t rb = 0; rb < row_blocks; ++rb) finished[rb].store(0, std::memory_order_relaxed);
  }
  auto gemm = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (j1 - j0 == kBlockPanels && j1 * kPanelCols <= n) {
      // A full 64-column block: the chunked kernel on this row block (same
      // fma chains; false where the target has none).
      LinearEpilogue ep = epilogue;
      if (ep.residual != nullptr) ep.residual += i0 * ep.ld_residual;
      if (HWY_DYNAMIC_DISPATCH(LinearSmallMT)(y + i0 * ldy, ldy, x + i0 * ldx, ldx, w.panels(),
                                              k, ep, i1 - i0, j0)) {
        return;
      }
    }
    HWY_DYNAMIC_DISPATCH(LinearBlockT)(y, ldy, x, ldx, w.panels(), n, k, epilogue, i0, i1, j0,
                                       j1);
  };
  auto run = [&](int64_t task, int /*worker*/) {
    const int64_t rb = task / col_blocks, cb = task % col_blocks;
    const int64_t i0 = rb * kBlockRows, i1 = std::min(m, i0 + kBlockRows);
    const int64_t j0 = cb * kBlockPanels, j1 = std::min(panels, j0 + kBlockPanels);
    gemm(i0, i1, j0, j1);
    if (norm && finished[rb].fetch_add(1, std::memory_order_acq_rel) == col_blocks - 1) {
      LayerNormRows(epilogue.norm_out, epilogue.ld_norm_out, y, ldy, epilogue.norm_gamma,
                    epilogue.norm_beta, epilogue.norm_eps, i0, i1, n);
    }
  };
  const int64_t tasks = row_blocks * col_blocks;
  if (tasks == 1) {
    run(0, 0);
  } else {
    pool.ParallelFor(tasks, run);
  }
}

}  // namespace attnflow::ops
#endif  // HWY_ONCE
