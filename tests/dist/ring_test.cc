// ring_test.cc — MPI tests of ring prefill and sharded decode (attnflow/dist.h).
// Run by ctest as `mpirun --oversubscribe -np P ring_test` for P = 2, 3, 4
// (cmake/dist.cmake). Every TEST is collective: all ranks run it, local errors
// are reduced with MPI_MAX so every rank reports the same verdict.
//
// Expected values: the float64 oracle reference::Sdpa (independent of the
// kernels), and the single-process kernel Attention() on the same inputs; the
// ring result for this rank's rows must match both (fp32 merge rounding only).
// Global inputs are generated from a fixed seed on every rank, then this
// rank's rows are cut out with ShardRows.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnflow/rng.h"
#include "attnflow/attention.h"
#include "attnflow/compare.h"
#include "attnflow/reference.h"
#include "attnflow/dist.h"
#include "attnflow/kernels.h"
#include "attnflow/threading.h"

namespace attnflow::dist {
namespace {

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int Size() {
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}
// One kernel thread per rank: up to 4 ranks share 2 cores in CI.
ThreadPool& Pool1() {
  static ThreadPool pool(1);
  return pool;
}
double GlobalMax(double x) {
  double y = 0;
  MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return y;
}

Tensor RandomTensor(DType dt, const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::Zeros(dt, shape).value();
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.view().store(i, rng.Uniform(-1.0, 1.0));
  return t;
}

struct Case {
  int64_t B = 1, H = 4, Hkv = 2, Lq = 37, Lk = 37, D = 16, Dv = 16;
  Causal causal = Causal::kNone;
  DType kv = DType::kF32;
  Layout layout = Layout::kZigzag;
  bool mask = false, kv_lens = false;
  bool float_mask = false;  // F32 additive mask (with -inf entries) instead of BOOL
  int64_t row_tile = 0;  // RingOptions::row_tile
  uint64_t seed = 1;
};

struct Checked {
  double err_kernel_out, err_kernel_lse, err_ref_out, err_ref_lse;
  Tensor out, lse;
};

Checked RunPrefill(const Case& c) {
  const int rank = Rank(), p = Size();
  Tensor q = RandomTensor(DType::kF32, {c.B, c.H, c.Lq, c.D}, c.seed * 11 + 1);
  Tensor k = RandomTensor(c.kv, {c.B, c.Hkv, c.Lk, c.D}, c.seed * 11 + 2);
  Tensor v = RandomTensor(c.kv, {c.B, c.Hkv, c.Lk, c.Dv}, c.seed * 11 + 3);
  Tensor mask, kvl;
  SdpaOptions opt;
  opt.causal = c.causal;
  if (c.mask && c.float_mask) {
    mask = Tensor::Zeros(DType::kF32, {c.B, 1, c.Lq, c.Lk}).value();
    std::mt19937_64 gen(c.seed * 11 + 4);
    for (int64_t i = 0; i < mask.numel(); ++i) {
      const uint64_t r = gen();
      mask.data<float>()[i] = r % 5 == 0 ? -INFINITY : static_cast<float>(r % 1000) / 500.0f - 1.0f;
    }
    opt.attn_mask = mask.view();
  } else if (c.mask) {
    mask = Tensor::Zeros(DType::kBool, {c.B, 1, c.Lq, c.Lk}).value();
    std::mt19937_64 gen(c.seed * 11 + 4);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<uint8_t>()[i] = (gen() % 4) != 0;
    opt.attn_mask = mask.view();
  }
  if (c.kv_lens) {
    kvl = Tensor::Zeros(DType::kI64, {c.B}).value();
    for (int64_t b = 0; b < c.B; ++b) kvl.data<int64_t>()[b] = (c.Lk * (b + 1)) / (c.B + 1) + b;
    opt.kv_lens = kvl.view();
  }
  // Single process: the kernel and the float64 oracle.
  Tensor out_k = Tensor::Zeros(DType::kF32, {c.B, c.H, c.Lq, c.Dv}).value();
  Tensor lse_k = Tensor::Zeros(DType::kF32, {c.B, c.H, c.Lq}).value();
  Tensor out_r = Tensor::Zeros(DType::kF64, {c.B, c.H, c.Lq, c.Dv}).value();
  Tensor lse_r = Tensor::Zeros(DType::kF64, {c.B, c.H, c.Lq}).value();
  EXPECT_TRUE(Attention(out_k.view(), lse_k.view(), q.view(), k.view(), v.view(), opt).ok());
  EXPECT_TRUE(reference::Sdpa(out_r.view(), lse_r.view(), q.view(), k.view(), v.view(), opt).ok());
  // This rank's shards.
  Tensor ql = ShardRows(q.view(), c.layout, rank, p).value();
  Tensor kl = ShardRows(k.view(), c.layout, rank, p).value();
  Tensor vl = ShardRows(v.view(), c.layout, rank, p).value();
  SdpaOptions lopt = opt;
  Tensor ml;
  if (c.mask) {
    ml = ShardRows(mask.view(), c.layout, rank, p).value();
    lopt.attn_mask = ml.view();
  }
  Checked r{};
  r.out = Tensor::Zeros(DType::kF32, {c.B, c.H, ql.shape()[2], c.Dv}).value();
  r.lse = Tensor::Zeros(DType::kF32, {c.B, c.H, ql.shape()[2]}).value();
  RingOptions ro;
  ro.layout = c.layout;
  ro.timeout_s = 120;
  ro.kopt.pool = &Pool1();
  ro.row_tile = c.row_tile;
  const Status st = RingAttention(MPI_COMM_WORLD, r.out.view(), r.lse.view(), ql.view(),
                                  kl.view(), vl.view(), lopt, c.Lq, c.Lk, ro);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) {
    r.err_kernel_out = r.err_kernel_lse = r.err_ref_out = r.err_ref_lse = INFINITY;
    return r;
  }
  Tensor ok_l = ShardRows(out_k.view(), c.layout, rank, p).value();
  Tensor lk_l = ShardRows(lse_k.view(), c.layout, rank, p).value();
  Tensor or_l = ShardRows(out_r.view(), c.layout, rank, p).value();
  Tensor lr_l = ShardRows(lse_r.view(), c.layout, rank, p).value();
  r.err_kernel_out = GlobalMax(MaxScaledError(r.out.view(), ok_l.view()));
  r.err_kernel_lse = GlobalMax(MaxScaledError(r.lse.view(), lk_l.view()));
  r.err_ref_out = GlobalMax(MaxScaledError(r.out.view(), or_l.view()));
  r.err_ref_lse = GlobalMax(MaxScaledError(r.lse.view(), lr_l.view()));
  return r;
}

// Tight: fp32 results that differ only in the order of the LSE merges.
constexpr double kTolKernel = 2e-6;
constexpr double kTolRef = 5e-6;

void ExpectExact(const Case& c, const char* what) {
  const Checked r = RunPrefill(c);
  EXPECT_LE(r.err_kernel_out, kTolKernel) << what;
  EXPECT_LE(r.err_kernel_lse, kTolKernel) << what;
  EXPECT_LE(r.err_ref_out, kTolRef) << what;
  EXPECT_LE(r.err_ref_lse, kTolRef) << what;
}

TEST(Ring, NonCausalUnevenLengths) {
  for (int64_t L : {1, 5, 37, 130}) {
    Case c;
    c.Lq = c.Lk = L;
    c.seed = L;
    ExpectExact(c, "zigzag");
    c.layout = Layout::kContiguous;
    ExpectExact(c, "contiguous");
  }
}

TEST(Ring, CausalBothAlignments) {
  for (Causal cz : {Causal::kTopLeft, Causal::kBottomRight})
    for (Layout lay : {Layout::kZigzag, Layout::kContiguous}) {
      Case c;
      c.causal = cz;
      c.layout = lay;
      c.Lq = 53;
      c.Lk = 53;
      ExpectExact(c, "square");
      c.Lq = 29;  // fewer queries than keys (chunked prefill shape)
      c.Lk = 71;
      ExpectExact(c, "Lq < Lk");
      c.Lq = 71;  // more queries than keys: top_left rows past Lk see all, bottom_right rows die
      c.Lk = 29;
      ExpectExact(c, "Lq > Lk");
    }
}

TEST(Ring, MaskKvLensGqaHalfKv) {
  Case c;
  c.B = 2;
  c.H = 6;
  c.Hkv = 2;
  c.Lq = c.Lk = 45;
  c.causal = Causal::kBottomRight;
  c.mask = true;
  c.kv_lens = true;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    c.kv = dt;
    ExpectExact(c, DTypeName(dt));
  }
  c.float_mask = true;
  c.kv = DType::kBF16;
  ExpectExact(c, "float mask with -inf, BF16");
  c.float_mask = false;
  c.H = 4;
  c.Hkv = 1;  // MQA
  c.Dv = 24;  // v_dim != head_dim
  c.causal = Causal::kNone;
  c.kv = DType::kF16;
  ExpectExact(c, "MQA F16, Dv 24");
}

TEST(Ring, SmallRowTiles) {
  // Query chunks split into row tiles of 7 (and 1): tiles cross the causal
  // diagonal, mask rows and kv_lens at different offsets.
  for (int64_t tile : {7, 1}) {
    Case c;
    c.row_tile = tile;
    c.Lq = 40;
    c.Lk = 61;
    c.causal = Causal::kBottomRight;
    c.mask = true;
    c.kv_lens = true;
    c.B = 2;
    ExpectExact(c, "bottom_right, mask, kv_lens");
    c.causal = Causal::kTopLeft;
    c.Lq = 61;
    c.Lk = 40;
    ExpectExact(c, "top_left, Lq > Lk");
  }
}

TEST(Ring, DeterministicRunToRun) {
  Case c;
  c.causal = Causal::kTopLeft;
  c.Lq = c.Lk = 97;
  c.kv = DType::kF16;
  const Checked a = RunPrefill(c), b = RunPrefill(c);
  int same = std::memcmp(a.out.data<float>(), b.out.data<float>(), a.out.nbytes()) == 0 &&
             std::memcmp(a.lse.data<float>(), b.lse.data<float>(), a.lse.nbytes()) == 0;
  int all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(all, 1) << "two identical runs differ in some bit";
}

TEST(Ring, ShardsPartitionTheSequence) {
  // Property: for any length, the chunks of all ranks are disjoint, cover
  // [0, len) exactly, and their sizes differ by at most one.
  for (int p = 1; p <= 9; ++p)
    for (Layout lay : {Layout::kZigzag, Layout::kContiguous})
      for (int64_t len : {0, 1, 2, 7, 17, 100, 1001}) {
        std::vector<int> owner(len, -1);
        int64_t mn = INT64_MAX, mx = 0;
        for (int r = 0; r < p; ++r) {
          int64_t total = 0;
          for (const Range& c : SequenceShard(lay, len, r, p)) {
            mn = std::min(mn, c.size());
            mx = std::max(mx, c.size());
            for (int64_t i = c.begin; i < c.end; ++i) {
              ASSERT_GE(i, 0);
              ASSERT_LT(i, len);
              EXPECT_EQ(owner[i], -1) << "index " << i << " owned twice";
              owner[i] = r;
            }
            total += c.size();
          }
          EXPECT_EQ(total, ShardLength(lay, len, r, p));
        }
        for (int64_t i = 0; i < len; ++i) EXPECT_NE(owner[i], -1) << "index " << i;
        EXPECT_LE(mx - mn, 1) << LayoutName(lay) << " len " << len << " P " << p;
      }
}

TEST(Ring, GatherRowsInvertsShardRows) {
  // Property: GatherRows(ShardRows(x)) == x on rank 0, bit for bit, for rank
  // 3 and 4 tensors, both layouts, lengths shorter than the rank count
  // (empty shards) included; an argument error is the same on every rank.
  const int rank = Rank(), p = Size();
  int bad = 0;
  for (Layout lay : {Layout::kZigzag, Layout::kContiguous})
    for (int64_t len : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{37}})
      for (int rk : {3, 4}) {
        const Shape shape = rk == 4 ? Shape{2, 3, len, 5} : Shape{2, 3, len};
        Tensor x = RandomTensor(DType::kF32, shape, 7 + len);
        Tensor mine = ShardRows(x.view(), lay, rank, p).value();
        Tensor g;
        const Status st = GatherRows(MPI_COMM_WORLD, &g, mine.view(), lay, len, 0, 30);
        if (!st.ok()) {
          ADD_FAILURE() << st.ToString();
          ++bad;
          continue;
        }
        if (rank != 0) {
          if (g.defined()) ++bad;
          continue;
        }
        if (g.shape() != x.shape() ||
            std::memcmp(g.data<float>(), x.data<float>(), x.nbytes()) != 0) {
          ++bad;
        }
      }
  int all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(all, 0) << "GatherRows did not invert ShardRows";
  // Rank 1 passes the wrong number of rows: every rank gets its message.
  Tensor x = RandomTensor(DType::kF32, {1, 1, 9, 2}, 3);
  Tensor mine = ShardRows(x.view(), Layout::kZigzag, rank, p).value();
  Tensor wrong = RandomTensor(DType::kF32, {1, 1, 12, 2}, 4);
  Tensor g;
  const Status st = GatherRows(MPI_COMM_WORLD, &g, rank == 1 ? wrong.view() : mine.view(),
                               Layout::kZigzag, 9, 0, 30);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 of"), std::string::npos) << st.message();
}

TEST(Ring, ZigzagBalancesCausalWork) {
  // Property of the layout (no timing): with zigzag every rank scores the
  // same number of causal (query, key) pairs within 2 rows' worth; the
  // contiguous layout's last rank does about 2P-1 times the first's work.
  const int p = Size();
  const int64_t L = 1000 * p + 7;
  for (Layout lay : {Layout::kZigzag, Layout::kContiguous}) {
    std::vector<Range> all;
    for (int r = 0; r < p; ++r)
      for (const Range& c : SequenceShard(lay, L, r, p)) all.push_back(c);
    int64_t mn = INT64_MAX, mx = 0, total = 0;
    for (int r = 0; r < p; ++r) {
      const int64_t w = VisiblePairs(Causal::kTopLeft, L, L, SequenceShard(lay, L, r, p), all);
      mn = std::min(mn, w);
      mx = std::max(mx, w);
      total += w;
    }
    EXPECT_EQ(total, L * (L + 1) / 2);
    if (lay == Layout::kZigzag) {
      EXPECT_LE(mx - mn, 2 * L) << "zigzag imbalance";
    } else {
      EXPECT_GT(static_cast<double>(mx) / mn, 2.0 * p - 1.5) << "contiguous imbalance";
    }
  }
}

TEST(Ring, BadShapesSameMessageOnEveryRank) {
  const int rank = Rank(), p = Size();
  const int64_t L = 23;
  const Layout lay = Layout::kZigzag;
  const int64_t ll = ShardLength(lay, L, rank, p);
  // Rank 1 passes one query row too many.
  const int64_t lq = rank == 1 ? ll + 1 : ll;
  Tensor q = Tensor::Zeros(DType::kF32, {1, 2, lq, 8}).value();
  Tensor k = Tensor::Zeros(DType::kF32, {1, 2, ll, 8}).value();
  Tensor out = Tensor::Zeros(DType::kF32, {1, 2, lq, 8}).value();
  RingOptions ro;
  ro.layout = lay;
  Status st = RingAttention(MPI_COMM_WORLD, out.view(), TensorView{}, q.view(), k.view(),
                            k.view(), SdpaOptions{}, L, L, ro);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ring_attention (rank 1 of"), std::string::npos) << st.message();
  // Every rank holds the same message: compare lengths and bytes with rank 0's.
  std::string m = st.message();
  int len = static_cast<int>(m.size()), len0 = len;
  MPI_Bcast(&len0, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string m0 = m;
  m0.resize(len0);
  MPI_Bcast(m0.data(), len0, MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_EQ(m, m0);
  // Ranks disagreeing on a global option (num_heads via q and out).
  const int64_t h = rank == p - 1 ? 4 : 2;
  Tensor q2 = Tensor::Zeros(DType::kF32, {1, h, ll, 8}).value();
  Tensor o2 = Tensor::Zeros(DType::kF32, {1, h, ll, 8}).value();
  st = RingAttention(MPI_COMM_WORLD, o2.view(), TensorView{}, q2.view(), k.view(), k.view(),
                     SdpaOptions{}, L, L, ro);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("disagrees with rank 0 on num_heads"), std::string::npos)
      << st.message();
}

// Decode: q replicated, the cache split contiguously; compare with the
// single-process decode kernel and the oracle on the whole cache.
void ExpectDecode(int64_t Lq, int64_t Lk, Causal cz, DType dt, bool kv_lens, uint64_t seed) {
  const int rank = Rank(), p = Size();
  const int64_t B = 2, H = 8, Hkv = 2, D = 32;
  Tensor q = RandomTensor(DType::kF32, {B, H, Lq, D}, seed * 5 + 1);
  Tensor k = RandomTensor(dt, {B, Hkv, Lk, D}, seed * 5 + 2);
  Tensor v = RandomTensor(dt, {B, Hkv, Lk, D}, seed * 5 + 3);
  Tensor kvl = Tensor::Zeros(DType::kI32, {B}).value();
  kvl.data<int32_t>()[0] = static_cast<int32_t>(Lk);
  kvl.data<int32_t>()[1] = static_cast<int32_t>(Lk / 3);
  SdpaOptions opt;
  opt.causal = cz;
  if (kv_lens) opt.kv_lens = kvl.view();
  Tensor out_k = Tensor::Zeros(DType::kF32, {B, H, Lq, D}).value();
  Tensor lse_k = Tensor::Zeros(DType::kF32, {B, H, Lq}).value();
  Tensor out_r = Tensor::Zeros(DType::kF64, {B, H, Lq, D}).value();
  Tensor lse_r = Tensor::Zeros(DType::kF64, {B, H, Lq}).value();
  ASSERT_TRUE(Attention(out_k.view(), lse_k.view(), q.view(), k.view(), v.view(), opt).ok());
  ASSERT_TRUE(reference::Sdpa(out_r.view(), lse_r.view(), q.view(), k.view(), v.view(), opt).ok());
  Tensor kl = ShardRows(k.view(), Layout::kContiguous, rank, p).value();
  Tensor vl = ShardRows(v.view(), Layout::kContiguous, rank, p).value();
  Tensor out = Tensor::Zeros(DType::kF32, {B, H, Lq, D}).value();
  Tensor lse = Tensor::Zeros(DType::kF32, {B, H, Lq}).value();
  RingOptions ro;
  ro.kopt.pool = &Pool1();
  const Status st = ShardedDecode(MPI_COMM_WORLD, out.view(), lse.view(), q.view(), kl.view(),
                                  vl.view(), opt, Lk, ro);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_LE(GlobalMax(MaxScaledError(out.view(), out_k.view())), kTolKernel);
  EXPECT_LE(GlobalMax(MaxScaledError(lse.view(), lse_k.view())), kTolKernel);
  EXPECT_LE(GlobalMax(MaxScaledError(out.view(), out_r.view())), kTolRef);
  EXPECT_LE(GlobalMax(MaxScaledError(lse.view(), lse_r.view())), kTolRef);
  // Every rank holds the same bits (the merge order is fixed by rank).
  std::vector<float> r0(out.numel());
  std::memcpy(r0.data(), out.data<float>(), out.nbytes());
  MPI_Bcast(r0.data(), static_cast<int>(r0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int same = std::memcmp(r0.data(), out.data<float>(), out.nbytes()) == 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(all, 1);
}

TEST(Decode, ShardedCacheMatchesSingleProcess) {
  ExpectDecode(1, 1003, Causal::kNone, DType::kF32, false, 1);
  ExpectDecode(1, 517, Causal::kBottomRight, DType::kF16, true, 2);
  ExpectDecode(3, 250, Causal::kBottomRight, DType::kBF16, true, 3);
  ExpectDecode(2, 3, Causal::kNone, DType::kF32, false, 4);  // some ranks hold 0 or 1 key
}

}  // namespace
}  // namespace attnflow::dist

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {  // one report: every check compares values reduced over all ranks
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != rc) std::fprintf(stderr, "ring_test: another rank failed\n");
  MPI_Finalize();
  return worst;
}
