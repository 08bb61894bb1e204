// decode_int8_test.cc — the host decode over the int8 KV cache
// (attnflow/kv_int8.h, DecodeKvS8) against its float64 oracle:
// reference::Sdpa on the cache dequantised HERE (real = scale * int8, the
// slot of position p is p % capacity, V read as columns), with the
// FlashAttention tolerance method of util/kernel_test_util.h (at most 2x the
// error of a plain fp32 implementation on the same dequantised values).
// Shapes (odd D/Dv, GQA 1/2/4/8, windows and ring wrap, lengths 0/1/odd/
// large), every compiled Highway target, 1/2/7 threads bit-identical,
// non-finite and huge queries, bad input, and a cache written by the micro
// library (af_kv_cache_s8_append): the device's bytes decoded on the host.
#include <initializer_list>

#include "attnflow/kv_int8.h"
#include "attnflow/micro.h"
#include "util/kernel_test_util.h"   // Spec, Inputs, NaiveF32, Reference, CheckOutputs, ...
#include "util/simd_targets_util.h"  // ForEachTargetBit

namespace attnflow {
namespace {

// A batch of int8 caches with their scales (the test's own storage).
struct S8Case {
  int64_t B = 1, H = 1, Hkv = 1, D = 8, Dv = 8, cap = 16, window = 0;
  std::vector<int64_t> lengths{16};
  double scale = std::numeric_limits<double>::quiet_NaN();
  uint64_t seed = 1;

  std::string Name() const {
    std::string s = "B" + std::to_string(B) + " H" + std::to_string(H) + "/" +
                    std::to_string(Hkv) + " D" + std::to_string(D) + " Dv" + std::to_string(Dv) +
                    " cap" + std::to_string(cap) + " win" + std::to_string(window) + " len=";
    for (int64_t l : lengths) s += std::to_string(l) + ",";
    return s + " seed=" + std::to_string(seed);
  }
};

struct S8Cache {
  S8Case c;
  KvCacheS8Layout layout;
  std::vector<std::vector<int8_t>> k, v;        // per sequence
  std::vector<std::vector<float>> ks, vs;       // per sequence [Hkv]
  std::vector<KvCacheS8Seq> seqs;
  Tensor q;                                     // [B, H, 1, D] F32
};

// Random int8 over the whole storage (every slot, so a wrong slot is read
// as a wrong value) and random positive scales.
S8Cache MakeCache(const S8Case& c) {
  S8Cache m;
  m.c = c;
  m.layout = {c.Hkv, c.D, c.Dv, c.cap, c.window};
  Rng rng(c.seed * 11 + 3);
  for (int64_t b = 0; b < c.B; ++b) {
    std::vector<int8_t> k(static_cast<size_t>(c.Hkv * c.cap * c.D)),
        v(static_cast<size_t>(c.Hkv * c.Dv * c.cap));
    for (auto& x : k) x = static_cast<int8_t>(static_cast<int64_t>(rng.Below(255)) - 127);
    for (auto& x : v) x = static_cast<int8_t>(static_cast<int64_t>(rng.Below(255)) - 127);
    std::vector<float> ks(static_cast<size_t>(c.Hkv)), vs(static_cast<size_t>(c.Hkv));
    for (auto& x : ks) x = static_cast<float>(rng.Uniform(0.004, 0.03));
    for (auto& x : vs) x = static_cast<float>(rng.Uniform(0.004, 0.03));
    m.k.push_back(std::move(k));
    m.v.push_back(std::move(v));
    m.ks.push_back(std::move(ks));
    m.vs.push_back(std::move(vs));
  }
  for (int64_t b = 0; b < c.B; ++b) {
    KvCacheS8Seq s;
    s.k = m.k[b].data();
    s.v = m.v[b].data();
    s.k_scale = m.ks[b].data();
    s.v_scale = m.vs[b].data();
    s.length = c.lengths[static_cast<size_t>(b)];
    m.seqs.push_back(s);
  }
  m.q = testing::Random({c.B, c.H, 1, c.D}, c.seed * 11 + 5);
  return m;
}

// The visible positions of a sequence, written here from the cache's
// definition (not from the code under test): window 0 = all, else the last
// `window`.
int64_t Visible(int64_t length, int64_t window) {
  return window > 0 && length > window ? window : length;
}

// The oracle's inputs: K/V dequantised in float64 (exact: scale * int8),
// positions oldest first (slot = position % capacity; V element (c, slot) at
// [g][c][slot]), kv_lens = the visible counts, the same q.
Inputs Dequantised(const S8Cache& m) {
  const S8Case& c = m.c;
  int64_t max_n = 0;
  for (int64_t b = 0; b < c.B; ++b) max_n = std::max(max_n, Visible(c.lengths[b], c.window));
  Inputs in;
  in.s = {.B = c.B, .H = c.H, .Hkv = c.Hkv, .Lq = 1, .Lk = max_n, .D = c.D, .Dv = c.Dv,
          .kv = DType::kF64, .scale = c.scale};
  in.q_store = Tensor::FromView(m.q.view()).value();
  in.k_store = testing::Zeros(DType::kF64, {c.B, c.Hkv, max_n, c.D});
  in.v_store = testing::Zeros(DType::kF64, {c.B, c.Hkv, max_n, c.Dv});
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t n = Visible(c.lengths[b], c.window), first = c.lengths[b] - n;
    in.s.kv_lens.push_back(n);
    for (int64_t g = 0; g < c.Hkv; ++g) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t slot = (first + j) % c.cap;
        for (int64_t d = 0; d < c.D; ++d) {
          in.k_store.data<double>()[((b * c.Hkv + g) * max_n + j) * c.D + d] =
              static_cast<double>(m.ks[b][g]) * m.k[b][(g * c.cap + slot) * c.D + d];
        }
        for (int64_t e = 0; e < c.Dv; ++e) {
          in.v_store.data<double>()[((b * c.Hkv + g) * max_n + j) * c.Dv + e] =
              static_cast<double>(m.vs[b][g]) * m.v[b][(g * c.Dv + e) * c.cap + slot];
        }
      }
    }
  }
  in.q = in.q_store.view();
  in.k = in.k_store.view();
  in.v = in.v_store.view();
  in.opt.scale = c.scale;
  in.kv_lens = testing::Zeros(DType::kI64, {c.B});
  for (int64_t b = 0; b < c.B; ++b) in.kv_lens.data<int64_t>()[b] = in.s.kv_lens[b];
  in.opt.kv_lens = in.kv_lens.view();
  return in;
}

struct S8Run {
  Outputs o;
  DecodeS8Choice choice;
  Status status;
};

S8Run RunS8(const S8Cache& m, ThreadPool* pool = nullptr, int64_t split_kv = 0) {
  const S8Case& c = m.c;
  S8Run r;
  r.o.out = testing::Zeros(DType::kF32, {c.B, c.H, 1, c.Dv});
  r.o.lse = testing::Zeros(DType::kF32, {c.B, c.H, 1});
  // Poison: the kernel must write every element.
  for (int64_t e = 0; e < r.o.out.numel(); ++e) r.o.out.data<float>()[e] = 12345.0f;
  for (int64_t e = 0; e < r.o.lse.numel(); ++e) r.o.lse.data<float>()[e] = 12345.0f;
  DecodeS8Options opt;
  opt.scale = c.scale;
  opt.pool = pool;
  opt.split_kv = split_kv;
  r.status = DecodeKvS8(r.o.out.view(), r.o.lse.view(), m.q.view(), m.seqs, m.layout, opt,
                        &r.choice);
  return r;
}

// Runs c and checks it against the float64 reference; the SIMD target it ran
// on goes to `*target` when given.
void CheckS8(const S8Case& c, ThreadPool* pool = nullptr, int64_t split_kv = 0,
             std::string* target = nullptr) {
  const S8Cache m = MakeCache(c);
  const S8Run r = RunS8(m, pool, split_kv);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString() << " " << c.Name();
  if (target != nullptr) *target = r.choice.simd_target;
  const Inputs in = Dequantised(m);
  CheckOutputs(r.o, NaiveF32(in), Reference(in), c.Name() + " " + r.choice.ToString());
}

TEST(DecodeS8, ShapesAgainstFloat64Reference) {
  struct Shape1 {
    int64_t H, Hkv, D, Dv;
  };
  const Shape1 shapes[] = {{1, 1, 1, 1},   {2, 1, 7, 5},    {4, 2, 16, 16},  {4, 1, 33, 17},
                           {8, 2, 64, 64}, {8, 8, 128, 128}, {8, 1, 80, 96},  {16, 2, 256, 256},
                           {3, 3, 20, 3},  {8, 4, 65, 127}};
  uint64_t seed = 100;
  for (const Shape1& sh : shapes) {
    for (int64_t len : {0, 1, 5, 37, 700}) {
      CheckS8({.H = sh.H, .Hkv = sh.Hkv, .D = sh.D, .Dv = sh.Dv, .cap = 700, .lengths = {len},
               .seed = ++seed});
    }
  }
}

// GQA 1/2/4/8 with several sequences of different lengths (one empty), a
// custom scale, and splits of every kind (automatic and short ones).
TEST(DecodeS8, GqaBatchAndSplits) {
  uint64_t seed = 200;
  for (int64_t G : {1, 2, 4, 8}) {
    for (int64_t split : {0, 16, 100}) {
      CheckS8({.B = 3, .H = 2 * G, .Hkv = 2, .D = 64, .Dv = 32, .cap = 1500,
               .lengths = {1500, 0, 613},
               .scale = G == 4 ? 0.3 : std::numeric_limits<double>::quiet_NaN(), .seed = ++seed},
              nullptr, split);
    }
  }
}

// Windows over a ring: the visible positions wrap from the end of the
// storage to slot 0, inside a tile and inside a split, or not at all; the
// window is shorter than the capacity, equal to it, or longer than the
// length.
TEST(DecodeS8, WindowsAndRingWrap) {
  struct W {
    int64_t cap, window, length;
  };
  const W cases[] = {{100, 100, 250}, {100, 40, 250},  {100, 40, 130}, {100, 40, 30},
                     {64, 64, 64},    {64, 64, 65},    {1000, 1000, 2500}, {1000, 600, 1999},
                     {37, 11, 1000},  {512, 512, 1023}, {5, 1, 9},        {5, 5, 0}};
  uint64_t seed = 300;
  for (const W& w : cases) {
    for (int64_t split : {0, 32}) {
      CheckS8({.H = 4, .Hkv = 2, .D = 24, .Dv = 20, .cap = w.cap, .window = w.window,
               .lengths = {w.length}, .seed = ++seed},
              nullptr, split);
    }
  }
  // Sequences of one batch at different points of their rings.
  CheckS8({.B = 4, .H = 8, .Hkv = 4, .D = 48, .Dv = 48, .cap = 300, .window = 200,
           .lengths = {0, 150, 299, 1234}, .seed = 399});
}

// A long cache: several automatic splits, every tile full.
TEST(DecodeS8, LongCache) {
  CheckS8({.H = 8, .Hkv = 2, .D = 128, .Dv = 128, .cap = 9000, .lengths = {9000}, .seed = 401});
}

TEST(DecodeS8, EverySupportedTarget) {
  std::set<std::string> ran;
  testing::ForEachTargetBit([&](int bit, int64_t t) {
    SCOPED_TRACE(hwy::TargetName(t));
    g_error_factor = ErrorFactorFor(t);
    uint64_t seed = 500 + static_cast<uint64_t>(bit) * 10;
    for (auto [D, Dv, G] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {64, 64, 1}, {128, 128, 4}, {9, 13, 2}, {32, 3, 8}}) {
      std::string target;
      ASSERT_NO_FATAL_FAILURE(CheckS8({.B = 2, .H = 2 * G, .Hkv = 2, .D = D, .Dv = Dv, .cap = 300,
                                       .window = 250, .lengths = {777, 41}, .seed = ++seed},
                                      nullptr, 64, &target));
      ran.insert(target);
    }
  });
  g_error_factor = 2.0;
  // The fallback and at least the real target of this CPU ran.
  EXPECT_GE(ran.size(), 2u);
}

TEST(DecodeS8, BitIdenticalAcrossThreadCounts) {
  ThreadPool p1(1), p2(2), p7(7);
  uint64_t seed = 600;
  for (auto [G, D, split] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 64, 0}, {4, 128, 0}, {4, 33, 64}, {8, 16, 16}}) {
    const S8Case c{.B = 3, .H = 2 * G, .Hkv = 2, .D = D, .Dv = D, .cap = 3000, .window = 2900,
                   .lengths = {3000, 517, 4100}, .seed = ++seed};
    const S8Cache m = MakeCache(c);
    std::vector<Outputs> runs;
    for (ThreadPool* p : {&p1, &p2, &p7}) {
      S8Run r = RunS8(m, p, split);
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      EXPECT_GT(r.choice.num_tasks, 7) << r.choice.ToString();
      runs.push_back(std::move(r.o));
    }
    ExpectBitIdentical(runs, c.Name());
  }
}

// Strided q and out (row pitch larger than D / Dv), absent lse.
TEST(DecodeS8, StridedViewsAndNoLse) {
  const S8Case c{.B = 2, .H = 4, .Hkv = 2, .D = 40, .Dv = 24, .cap = 200, .lengths = {200, 77},
                 .seed = 700};
  const S8Cache m = MakeCache(c);
  const S8Run ref = RunS8(m);
  ASSERT_TRUE(ref.status.ok());
  Tensor qbuf = testing::Zeros(DType::kF32, {c.B, c.H, 1, c.D + 5});
  for (int64_t bh = 0; bh < c.B * c.H; ++bh)
    for (int64_t d = 0; d < c.D; ++d)
      qbuf.data<float>()[bh * (c.D + 5) + d] = m.q.data<float>()[bh * c.D + d];
  const TensorView qv = MakeStridedView(qbuf.data<float>(), DType::kF32, {c.B, c.H, 1, c.D},
                                        {c.H * (c.D + 5), c.D + 5, c.D + 5, 1});
  Tensor obuf = testing::Zeros(DType::kF32, {c.B, c.H, 1, c.Dv * 2});
  const TensorView ov = MakeStridedView(obuf.data<float>(), DType::kF32, {c.B, c.H, 1, c.Dv},
                                        {c.H * c.Dv * 2, c.Dv * 2, c.Dv * 2, 2});
  ASSERT_TRUE(DecodeKvS8(ov, TensorView(), qv, m.seqs, m.layout).ok());
  for (int64_t bh = 0; bh < c.B * c.H; ++bh)
    for (int64_t e = 0; e < c.Dv; ++e)
      EXPECT_EQ(obuf.data<float>()[bh * c.Dv * 2 + 2 * e], ref.o.out.data<float>()[bh * c.Dv + e]);
}

// A NaN in q makes only its row NaN; an infinite or huge q goes through the
// double path and matches the reference's non-finite rules and values.
TEST(DecodeS8, NonFiniteAndHugeQueries) {
  for (float bad : {NAN, INFINITY, -INFINITY, 1e30f, 3e38f}) {
    const S8Case c{.B = 2, .H = 4, .Hkv = 2, .D = 16, .Dv = 16, .cap = 100, .lengths = {60, 100},
                   .seed = 800};
    S8Cache m = MakeCache(c);
    m.q.data<float>()[(1 * c.H + 2) * c.D + 3] = bad;  // (b=1, h=2, d=3)
    if (bad == 1e30f) {  // a whole huge row: finite in double, overflows fp32 scores
      for (int64_t d = 0; d < c.D; ++d) m.q.data<float>()[(0 * c.H + 1) * c.D + d] = 1e30f;
    }
    const S8Run r = RunS8(m);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    const Inputs in = Dequantised(m);
    CheckOutputs(r.o, NaiveF32(in), Reference(in), c.Name() + " bad=" + std::to_string(bad));
    // Rows of the other heads are finite.
    for (int64_t h = 0; h < c.H; ++h) {
      if (h == 2) continue;
      EXPECT_TRUE(std::isfinite(r.o.lse.data<float>()[1 * c.H + h])) << h;
    }
  }
}

void ExpectError(const Status& st, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("decode_kv_s8: "), std::string::npos) << st.message();
  for (const char* p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << st.message();
}

TEST(DecodeS8, BadInputNamesTheOpAndTheShapes) {
  S8Cache m =
      MakeCache({.B = 2, .H = 4, .Hkv = 2, .D = 16, .Dv = 8, .cap = 32, .lengths = {10, 32}});
  Tensor out = testing::Zeros(DType::kF32, {2, 4, 1, 8});
  Tensor lse = testing::Zeros(DType::kF32, {2, 4, 1});
  auto run = [&](const TensorView& o, const TensorView& l, const TensorView& q,
                 std::span<const KvCacheS8Seq> s, const KvCacheS8Layout& L,
                 DecodeS8Options opt = {}) { return DecodeKvS8(o, l, q, s, L, opt); };
  ASSERT_TRUE(run(out.view(), lse.view(), m.q.view(), m.seqs, m.layout).ok());
  const char* shapes = "q F32[2,4,1,16]";
  // Shapes and dtypes.
  Tensor q3 = testing::Zeros(DType::kF32, {2, 4, 2, 16});
  ExpectError(run(out.view(), lse.view(), q3.view(), m.seqs, m.layout), {"q_len must be 1", "F32[2,4,2,16]"});
  Tensor q64 = testing::Zeros(DType::kF64, {2, 4, 1, 16});
  ExpectError(run(out.view(), lse.view(), q64.view(), m.seqs, m.layout), {"q must be F32", "F64[2,4,1,16]"});
  Tensor qd = testing::Zeros(DType::kF32, {2, 4, 1, 15});
  ExpectError(run(out.view(), lse.view(), qd.view(), m.seqs, m.layout), {"head_dim", "F32[2,4,1,15]"});
  Tensor q5 = testing::Zeros(DType::kF32, {2, 5, 1, 16});
  Tensor o5 = testing::Zeros(DType::kF32, {2, 5, 1, 8});
  ExpectError(run(o5.view(), TensorView(), q5.view(), m.seqs, m.layout), {"multiple of num_kv_heads", "num_kv_heads=2"});
  ExpectError(run(out.view(), lse.view(), m.q.view(), std::span<const KvCacheS8Seq>(m.seqs).first(1), m.layout),
              {"batch must equal the number of sequences", "1 sequence(s)"});
  Tensor obad = testing::Zeros(DType::kF32, {2, 4, 1, 9});
  ExpectError(run(obad.view(), lse.view(), m.q.view(), m.seqs, m.layout), {"out must be F32", "F32[2,4,1,9]"});
  Tensor lbad = testing::Zeros(DType::kF32, {2, 4});
  ExpectError(run(out.view(), lbad.view(), m.q.view(), m.seqs, m.layout), {"lse must be", "F32[2,4]"});
  // Layout.
  KvCacheS8Layout L = m.layout;
  L.head_dim = 300;
  ExpectError(run(out.view(), lse.view(), m.q.view(), m.seqs, L), {"head_dim and v_dim", "head_dim=300"});
  L = m.layout;
  L.window = 33;
  ExpectError(run(out.view(), lse.view(), m.q.view(), m.seqs, L), {"window must be", "window=33"});
  L = m.layout;
  L.capacity = 0;
  ExpectError(run(out.view(), lse.view(), m.q.view(), m.seqs, L), {"capacity", "capacity=0"});
  L = m.layout;
  L.num_kv_heads = 0;
  ExpectError(run(out.view(), lse.view(), m.q.view(), m.seqs, L), {"num_kv_heads must be >= 1"});
  // Sequences.
  std::vector<KvCacheS8Seq> s = m.seqs;
  s[1].length = 33;  // no window: at most capacity
  ExpectError(run(out.view(), lse.view(), m.q.view(), s, m.layout), {"sequence 1 (length 33)", "capacity", shapes});
  s = m.seqs;
  s[0].length = -1;
  ExpectError(run(out.view(), lse.view(), m.q.view(), s, m.layout), {"sequence 0 (length -1)"});
  s = m.seqs;
  s[1].v = nullptr;
  ExpectError(run(out.view(), lse.view(), m.q.view(), s, m.layout), {"sequence 1", "must not be null"});
  s = m.seqs;
  s[0].length = 0;
  s[0].k = nullptr;  // an empty sequence needs no storage
  EXPECT_TRUE(run(out.view(), lse.view(), m.q.view(), s, m.layout).ok());
  std::vector<float> neg = {0.01f, -0.5f};
  s = m.seqs;
  s[1].v_scale = neg.data();
  ExpectError(run(out.view(), lse.view(), m.q.view(), s, m.layout), {"kv head 1", "finite and >= 0"});
  std::vector<float> inf = {INFINITY, 0.01f};
  s = m.seqs;
  s[0].k_scale = inf.data();
  ExpectError(run(out.view(), lse.view(), m.q.view(), s, m.layout), {"sequence 0", "kv head 0"});
  DecodeS8Options opt;
  opt.scale = INFINITY;
  ExpectError(run(out.view(), lse.view(), m.q.view(), m.seqs, m.layout, opt), {"scale must be finite"});
  // Nothing was written by a failed call.
  for (int64_t e = 0; e < out.numel(); ++e) out.data<float>()[e] = 7.0f;
  s = m.seqs;
  s[1].length = 33;
  EXPECT_FALSE(run(out.view(), lse.view(), m.q.view(), s, m.layout).ok());
  for (int64_t e = 0; e < out.numel(); ++e) ASSERT_EQ(out.data<float>()[e], 7.0f);
}

// The bridge: a cache written by the micro library (af_kv_cache_s8_init /
// af_kv_cache_s8_append, as a device writes it) is read by the host decode;
// the result equals the float64 reference on the int8 values the test
// appended (positions in order, dequantised here), so the host and the
// device agree on the cache's bytes and layout. Then the device's own
// integer decode (af_decode_s8) on the same cache and the same int8 query is
// compared with the host's fp32 result, as a port compares its device with
// the host (docs/kernels.md): within the int8 path's bound of
// AF_S8_BOUND_LSB output LSB.
TEST(DecodeS8, CacheWrittenByTheMicroLibrary) {
  for (auto [cap, window, steps, G] : std::vector<std::tuple<int, int, int, int>>{
           {48, 0, 48, 2}, {48, 32, 100, 4}, {64, 64, 64 * 3 + 5, 1}}) {
    const int Hkv = 2, D = 16, Dv = 12, H = Hkv * G;
    std::vector<int8_t> kst(static_cast<size_t>(Hkv * cap * D)), vst(static_cast<size_t>(Hkv * Dv * cap));
    af_kv_cache_s8 cache;
    ASSERT_EQ(af_kv_cache_s8_init(&cache, kst.data(), vst.data(), Hkv, D, Dv, cap, window), AF_OK);
    Rng rng(900 + cap + window);
    std::vector<int8_t> all_k, all_v;  // [step][Hkv][D], [step][Hkv][Dv]
    for (int t = 0; t < steps; ++t) {
      std::vector<int8_t> kn(static_cast<size_t>(Hkv * D)), vn(static_cast<size_t>(Hkv * Dv));
      for (auto& x : kn) x = static_cast<int8_t>(static_cast<int64_t>(rng.Below(255)) - 127);
      for (auto& x : vn) x = static_cast<int8_t>(static_cast<int64_t>(rng.Below(255)) - 127);
      ASSERT_EQ(af_kv_cache_s8_append(&cache, kn.data(), vn.data()), AF_OK);
      all_k.insert(all_k.end(), kn.begin(), kn.end());
      all_v.insert(all_v.end(), vn.begin(), vn.end());
    }
    const std::vector<float> ks = {0.02f, 0.011f}, vs = {0.015f, 0.03f};
    KvCacheS8Seq seq;
    seq.k = cache.k;
    seq.v = cache.v;
    seq.k_scale = ks.data();
    seq.v_scale = vs.data();
    seq.length = cache.length;
    const KvCacheS8Layout layout{cache.num_kv_heads, cache.head_dim, cache.v_dim, cache.capacity,
                                 cache.window};
    // The query as a device holds it (int8, scale sq) and its real value.
    const float sq = 1.0f / 40;
    std::vector<int8_t> q8(static_cast<size_t>(H * D));
    for (auto& x : q8) x = static_cast<int8_t>(static_cast<int64_t>(rng.Below(255)) - 127);
    Tensor q = testing::Zeros(DType::kF32, {1, H, 1, D});
    for (int i = 0; i < H * D; ++i) q.data<float>()[i] = sq * q8[static_cast<size_t>(i)];
    Outputs got{testing::Zeros(DType::kF32, {1, H, 1, Dv}), testing::Zeros(DType::kF32, {1, H, 1})};
    ASSERT_TRUE(DecodeKvS8(got.out.view(), got.lse.view(), q.view(), std::span(&seq, 1), layout).ok());
    // The oracle from the appended values, positions in order.
    const int n = window > 0 ? std::min(steps, window) : steps, first = steps - n;
    Inputs in;
    in.s = {.H = H, .Hkv = Hkv, .Lk = n, .D = D, .Dv = Dv, .kv = DType::kF64};
    in.q_store = Tensor::FromView(q.view()).value();
    in.k_store = testing::Zeros(DType::kF64, {1, Hkv, n, D});
    in.v_store = testing::Zeros(DType::kF64, {1, Hkv, n, Dv});
    for (int g = 0; g < Hkv; ++g) {
      for (int j = 0; j < n; ++j) {
        const int t = first + j;
        for (int d = 0; d < D; ++d)
          in.k_store.data<double>()[(g * n + j) * D + d] = double{ks[g]} * all_k[(t * Hkv + g) * D + d];
        for (int e = 0; e < Dv; ++e)
          in.v_store.data<double>()[(g * n + j) * Dv + e] = double{vs[g]} * all_v[(t * Hkv + g) * Dv + e];
      }
    }
    in.q = in.q_store.view();
    in.k = in.k_store.view();
    in.v = in.v_store.view();
    const std::string name = "micro cache cap=" + std::to_string(cap) + " window=" +
                             std::to_string(window) + " steps=" + std::to_string(steps);
    CheckOutputs(got, NaiveF32(in), Reference(in), name);
    // The device's integer decode of the same bytes: per query head h the
    // scales of its kv head, the output scale so = sv.
    std::vector<float> sqh(static_cast<size_t>(H), sq), skh(static_cast<size_t>(H)),
        svh(static_cast<size_t>(H));
    for (int h = 0; h < H; ++h) {
      skh[static_cast<size_t>(h)] = ks[static_cast<size_t>(h / G)];
      svh[static_cast<size_t>(h)] = vs[static_cast<size_t>(h / G)];
    }
    af_s8_params p;
    ASSERT_EQ(af_s8_prepare(&p, sqh.data(), skh.data(), svh.data(), svh.data(), H,
                            static_cast<float>(1.0 / std::sqrt(double{D}))),
              AF_OK);
    std::vector<uint32_t> arena(af_decode_s8_workspace_bytes(&cache, H) / 4 + 1);
    std::vector<int8_t> dev(static_cast<size_t>(H * Dv));
    ASSERT_EQ(af_decode_s8(dev.data(), q8.data(), &cache, H, &p, nullptr, arena.data(),
                           arena.size() * 4),
              AF_OK);
    int worst = 0;
    for (int h = 0; h < H; ++h) {
      for (int e = 0; e < Dv; ++e) {
        const double host = got.out.data<float>()[h * Dv + e] / double{svh[static_cast<size_t>(h)]};
        const double want = std::clamp(std::nearbyint(host), -128.0, 127.0);
        worst = std::max(worst, static_cast<int>(std::fabs(dev[static_cast<size_t>(h * Dv + e)] - want)));
      }
    }
    EXPECT_LE(worst, AF_S8_BOUND_LSB) << name;
  }
}

}  // namespace
}  // namespace attnflow
