// device_dump_test.cc — the AFDUMP parser (attnflow/device_dump.h) against
// dumps written by SpecWriter below, a writer made from docs/device-dump.md
// alone (its own FNV-1a, its own number formatting; it shares no code with
// the parser), and against the worked example of the spec verbatim. One test
// per error class of the spec, each checking the line number; console noise,
// CRLF and parts out of order; the bound on declared elements (a tiny file
// declaring a huge tensor is rejected before any large allocation, measured
// with a counting operator new); block selection; the .npy reader's int8.
#include "attnflow/device_dump.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "attnflow/npy.h"
#include "util/afdump_writer.h"

// ---- counting operator new (largest single request while armed) ----------
// Test-only and this binary's alone; compiled out under AddressSanitizer,
// which owns operator new (the size check is then skipped, the rest runs).
#if defined(__SANITIZE_ADDRESS__)
#define ATTNFLOW_COUNT_NEW 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNFLOW_COUNT_NEW 0
#endif
#endif
#ifndef ATTNFLOW_COUNT_NEW
#define ATTNFLOW_COUNT_NEW 1
#endif

namespace {
std::atomic<bool> g_track{false};
std::atomic<size_t> g_largest{0};
void Note(size_t n) {
  if (!g_track.load(std::memory_order_relaxed)) return;
  size_t cur = g_largest.load();
  while (n > cur && !g_largest.compare_exchange_weak(cur, n)) {
  }
}
}  // namespace

#if ATTNFLOW_COUNT_NEW
void* operator new(size_t n) {
  Note(n);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  Note(n);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#endif

namespace attnflow {
namespace {

using testing::SpecFnv;
using testing::SpecWriter;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The spec's example, verbatim.
constexpr char kSpecExample[] =
    "boot: attnflow golden harness\n"
    "AFDUMP attnflow-dump/1 case=sdpa_tiny kind=sdpa impl=micro-f32\n"
    "AFDUMP tensor lse f32 3 1 1 2\n"
    "AFDUMP part lse 0 2\n"
    "AFDUMP d 3f800000 ff800000\n"
    "AFDUMP end lse 0 2 686df4d5\n"
    "AFDUMP done sdpa_tiny\n";

TEST(DeviceDump, SpecExample) {
  Result<DeviceDump> d = ParseDeviceDump(kSpecExample, "example.log");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->blocks.size(), 1u);
  const DumpBlock& b = d->blocks[0];
  EXPECT_EQ(b.case_name, "sdpa_tiny");
  EXPECT_EQ(b.kind, "sdpa");
  EXPECT_EQ(b.impl, "micro-f32");
  EXPECT_EQ(b.line, 2);
  EXPECT_EQ(b.done_line, 7);
  ASSERT_EQ(b.stages.size(), 1u);
  const DumpStage& s = b.stages[0];
  EXPECT_EQ(s.name, "lse");
  EXPECT_EQ(s.dtype, DType::kF32);
  EXPECT_EQ(s.shape, (Shape{1, 1, 2}));
  ASSERT_EQ(s.f32.size(), 2u);
  EXPECT_EQ(s.f32[0], 1.0f);
  EXPECT_TRUE(std::isinf(s.f32[1]) && s.f32[1] < 0);
  const TensorView v = s.view();
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.load(0), 1.0);
}

// A dump with every dtype, rank 0 and a zero-sized stage, parts out of
// order, several values per line, noise lines everywhere, CRLF, leading
// and trailing spaces.
TEST(DeviceDump, WriterRoundTripWithNoiseCrlfAndPartsOutOfOrder) {
  std::vector<float> f(2 * 3 * 4 * 5);
  for (size_t i = 0; i < f.size(); ++i)
    f[i] = std::ldexp(float(int(i * 37 % 101) - 50), -int(i % 7));
  f[7] = -INFINITY;
  f[8] = -0.0f;
  std::vector<int64_t> i8(37), i32(11);
  for (size_t i = 0; i < i8.size(); ++i) i8[i] = int64_t(i * 29 % 256) - 128;
  for (size_t i = 0; i < i32.size(); ++i) i32[i] = (int64_t(i) - 5) * 400000000;
  i32[0] = INT32_MIN;
  i32[10] = INT32_MAX;
  SpecWriter w;
  w.eol = "\r\n";
  w.per_line = 7;
  w.out += "I (312) boot: ESP-IDF v5.2\r\n\r\n";
  w.Header("sdpa_all", "sdpa", "micro-f32");
  w.Raw("W (400) wifi: noise between lines, AFDUMP mentioned mid-line");
  w.Tensor("scores", "f32", {2, 3, 4, 5});
  w.Tensor("heads_out", "i8", {37});
  w.Tensor("lse", "i32", {11});
  w.Tensor("scalar", "f32", {});
  w.Tensor("empty", "f32", {3, 0, 2});
  w.PartF32("scores", f, 60, 60);  // second half first
  w.Raw("   noise with leading spaces");
  w.PartInt("heads_out", i8, 1, 20, 17);
  w.PartF32("scores", f, 0, 13);
  w.PartInt("lse", i32, 4, 0, 11);
  w.PartF32("scores", f, 13, 47);
  w.PartInt("heads_out", i8, 1, 0, 20);
  const std::vector<float> one = {3.5f};
  w.PartF32("scalar", one, 0, 1);
  w.Raw("  AFDUMP done sdpa_all   ");  // leading and trailing spaces
  w.Raw("trailing console output");
  Result<DeviceDump> d = ParseDeviceDump(w.out, "rt.log");
  ASSERT_TRUE(d.ok()) << d.status().ToString() << "\n" << w.out;
  ASSERT_EQ(d->blocks.size(), 1u);
  const DumpBlock& b = d->blocks[0];
  ASSERT_EQ(b.stages.size(), 5u);
  EXPECT_EQ(b.line, 3);
  ASSERT_EQ(b.stages[0].f32.size(), f.size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(Bits(b.stages[0].f32[i]), Bits(f[i])) << i;
  ASSERT_EQ(b.stages[1].dtype, DType::kI8);
  for (size_t i = 0; i < i8.size(); ++i) EXPECT_EQ(b.stages[1].i8[i], i8[i]) << i;
  ASSERT_EQ(b.stages[2].dtype, DType::kI32);
  for (size_t i = 0; i < i32.size(); ++i) EXPECT_EQ(b.stages[2].i32[i], i32[i]) << i;
  EXPECT_EQ(b.stages[3].shape, Shape{});
  EXPECT_EQ(b.stages[3].f32, one);
  EXPECT_EQ(b.stages[4].numel(), 0);
  EXPECT_EQ(b.stages[1].view().load(3), double(i8[3]));
}

// Mutations of a valid two-stage dump: each is one error class of the spec
// and must be reported at its line.
struct Bad {
  const char* what;
  std::string text;
  int line;
  const char* message;
};

std::string Valid(const std::string& between = "", const std::string& values2 = "AFDUMP d 1 -2") {
  // line 1 header, 2 tensor a, 3 tensor b, 4 part a, 5 d, 6 end, 7 part b,
  // 8 d, 9 end, 10 done (+ lines of `between` inserted after line 3)
  const std::string f = "AFDUMP d 3f800000 ff800000\n";  // FNV 686df4d5 (the spec's example)
  char fnv[16];
  std::snprintf(fnv, sizeof(fnv), "%08x", SpecFnv({1, 0xfe}));  // i8 1, -2
  return "AFDUMP attnflow-dump/1 case=c1 kind=sdpa impl=micro-s8\n"
         "AFDUMP tensor a f32 2 1 2\n"
         "AFDUMP tensor b i8 1 2\n" +
         between + "AFDUMP part a 0 2\n" + f + "AFDUMP end a 0 2 686df4d5\n" +
         "AFDUMP part b 0 2\n" + values2 + "\n" + "AFDUMP end b 0 2 " + fnv + "\n" +
         "AFDUMP done c1\n";
}

TEST(DeviceDump, ValidBaselineOfTheErrorTable) {
  Result<DeviceDump> d = ParseDeviceDump(Valid(), "x.log");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->blocks[0].stages[1].i8, (std::vector<int8_t>{1, -2}));
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

TEST(DeviceDump, EveryErrorClassNamesFileLineAndProblem) {
  const std::string v = Valid();
  const std::vector<Bad> cases = {
      {"unknown keyword", Valid("AFDUMP bogus 1\n"), 4, "unknown AFDUMP keyword 'bogus'"},
      {"d line outside a part", Valid("AFDUMP d 3f800000\n"), 4, "'d' line outside a part"},
      {"more values than COUNT", Valid("", "AFDUMP d 1 -2 3"), 8, "more values than the count"},
      {"fewer values than COUNT", Valid("", "AFDUMP d 1"), 9,
       "ends after 1 values, its count is 2"},
      {"i8 value out of range", Valid("", "AFDUMP d 1 128"), 8, "i8 value '128'"},
      {"i8 value with a plus", Valid("", "AFDUMP d +1 2"), 8, "i8 value '+1'"},
      {"i8 value not a number", Valid("", "AFDUMP d 1 x"), 8, "i8 value 'x'"},
      {"f32 value in upper case", Replace(v, "3f800000 ff800000", "3F800000 ff800000"), 5,
       "f32 value '3F800000'"},
      {"f32 value of 7 digits", Replace(v, "3f800000 ff800000", "3f80000 ff800000"), 5,
       "f32 value '3f80000'"},
      {"part outside its stage", Replace(v, "AFDUMP part a 0 2", "AFDUMP part a 1 2"), 4,
       "part 1 2 lies outside stage 'a' [1,2]"},
      {"checksum mismatch", Replace(v, "686df4d5", "686df4d6"), 6, "checksum mismatch"},
      {"one value changed on the wire", Replace(v, "3f800000 ff800000", "3f800001 ff800000"), 6,
       "the values hash to"},
      {"stage declared twice", Valid("AFDUMP tensor a f32 1 2\n"), 4, "stage 'a' declared twice"},
      {"part of an undeclared stage", Replace(v, "AFDUMP part b 0 2", "AFDUMP part zz 0 2"), 7,
       "part of stage 'zz', which block case=c1 has not declared"},
      {"block that never ends (end of text)",
       v.substr(0, v.size() - std::string("AFDUMP done c1\n").size()), 9,
       "block case=c1 impl=micro-s8 (line 1) never ends"},
      {"block that never ends (next block)",
       Replace(v, "AFDUMP done c1\n", "AFDUMP attnflow-dump/1 case=c2 kind=sdpa impl=x\n"), 10,
       "never ended"},
      {"overlapping parts",
       Valid("AFDUMP part a 1 1\nAFDUMP d 00000000\nAFDUMP end a 1 1 4b95f515\n"), 7,
       "overlaps the part of elements [1, 2) at line 4"},
      {"part inside an earlier part",
       Replace(v, "AFDUMP end a 0 2 686df4d5\n",
               "AFDUMP end a 0 2 686df4d5\nAFDUMP part a 1 1\nAFDUMP d 00000000\nAFDUMP end a 1 1 "
               "4b95f515\n"),
       7, "overlaps the part of elements [0, 2) at line 4"},
      {"unsupported version", "AFDUMP attnflow-dump/2 case=c kind=sdpa impl=x\n", 1,
       "unsupported dump version 'attnflow-dump/2'"},
      {"line outside a block", "noise\nAFDUMP tensor a f32 1 2\n", 2, "'tensor' outside a block"},
      {"double space", Replace(v, "AFDUMP tensor b i8 1 2", "AFDUMP tensor b i8  1 2"), 3,
       "empty field"},
      {"tensor inside a part", Replace(v, "AFDUMP end a 0 2 686df4d5\n", "AFDUMP tensor q f32 0\n"),
       6, "'tensor' inside part 'a' 0 2 (line 4)"},
      {"end does not repeat the part", Replace(v, "AFDUMP end a 0 2", "AFDUMP end a 0 3"), 6,
       "does not repeat the open part 'a' 0 2 (line 4)"},
      {"done names another block", Replace(v, "AFDUMP done c1", "AFDUMP done c2"), 10,
       "'done' must name the open block"},
      {"bad kind", Replace(v, "kind=sdpa", "kind=2conv"), 1, "kind '2conv' is not a C identifier"},
      {"case not an identifier", Replace(v, "case=c1", "case=1c"), 1,
       "case name '1c' is not a C identifier"},
      {"header field order", Replace(v, "case=c1 kind=sdpa", "kind=sdpa case=c1"), 1,
       "a block header is"},
      {"rank 9", Replace(v, "AFDUMP tensor b i8 1 2", "AFDUMP tensor b i8 9 1 1 1 1 1 1 1 1 2"), 3,
       "rank '9' is not 0 to 8"},
      {"rank and dims disagree", Replace(v, "AFDUMP tensor b i8 1 2", "AFDUMP tensor b i8 2 2"), 3,
       "rank 2 needs 2 dimensions, the line has 1"},
      {"negative dimension", Replace(v, "AFDUMP tensor b i8 1 2", "AFDUMP tensor b i8 1 -2"), 3,
       "dimension 0 '-2' is not a non-negative decimal integer"},
      {"unknown dtype", Replace(v, "AFDUMP tensor b i8", "AFDUMP tensor b f16"), 3,
       "dtype 'f16' is not f32, i8 or i32"},
      {"same block twice", v + v, 11, "appears twice (first at line 1)"},
      {"d line with 17 values", Valid("", "AFDUMP d 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17"), 8,
       "carries 1 to 16 values, this one 17"},
      {"end without a part", Valid("AFDUMP end a 0 2 686df4d5\n"), 4,
       "'end' line without an open part"},
      {"text ends inside a part", v.substr(0, v.find("AFDUMP end a")), 5,
       "ends inside part 'a' 0 2 (line 4)"},
  };
  std::vector<Bad> all = cases;
  {
    // Stage b [2] written by one part of 1 value: element 1 is never written.
    char fnv[16];
    std::snprintf(fnv, sizeof(fnv), "%08x", SpecFnv({1}));
    std::string t = Replace(v, "AFDUMP part b 0 2", "AFDUMP part b 0 1");
    t = Replace(t, "AFDUMP d 1 -2", "AFDUMP d 1");
    const size_t p = t.find("AFDUMP end b 0 2 ");
    t.replace(p, 17 + 8, std::string("AFDUMP end b 0 1 ") + fnv);
    all.push_back(
        {"stage with elements never written", t, 10,
         "stage 'b' (line 3) has 1 of 2 elements never written (the first: flat index 1)"});
  }
  for (const Bad& c : all) {
    Result<DeviceDump> d = ParseDeviceDump(c.text, "dir/port.log");
    ASSERT_FALSE(d.ok()) << c.what << "\n" << c.text;
    EXPECT_EQ(d.status().code(), StatusCode::kCorrupt) << c.what;
    const std::string& m = d.status().message();
    const std::string where = "device dump: dir/port.log:" + std::to_string(c.line) + ": ";
    EXPECT_EQ(m.rfind(where, 0), 0u) << c.what << ": " << m;
    EXPECT_NE(m.find(c.message), std::string::npos) << c.what << ": " << m;
  }
}

// The overlap case above uses the FNV of one f32 zero, computed here.
TEST(DeviceDump, OverlapFixtureChecksumIsRight) { EXPECT_EQ(SpecFnv({0, 0, 0, 0}), 0x4b95f515u); }

// A 70-byte file that declares 2^48 elements (and others near the limit):
// rejected at its tensor line, with no allocation of more than a few KiB.
TEST(DeviceDump, HugeDeclaredShapeIsRejectedBeforeAnyLargeAllocation) {
  const std::vector<std::string> heads = {
      "AFDUMP tensor x f32 3 65535 65535 65535",
      "AFDUMP tensor x i8 2 1048576 1048576",
      "AFDUMP tensor x i32 1 4611686018427387904",
      "AFDUMP tensor x i8 8 128 128 128 128 128 128 128 128",
  };
  for (const std::string& h : heads) {
    const std::string text = "AFDUMP attnflow-dump/1 case=c kind=sdpa impl=x\n" + h +
                             "\nAFDUMP part x 0 2\nAFDUMP d 0 0\n";
    g_largest = 0;
    g_track = true;
    Result<DeviceDump> d = ParseDeviceDump(text, "huge.log");
    g_track = false;
    ASSERT_FALSE(d.ok()) << h;
    EXPECT_NE(d.status().message().find("huge.log:2: "), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find("bytes of the dump can carry"), std::string::npos)
        << d.status().message();
    if (ATTNFLOW_COUNT_NEW) EXPECT_LT(g_largest.load(), size_t{64} << 10) << h;
  }
  // A shape whose element count overflows int64.
  Result<DeviceDump> d = ParseDeviceDump(
      "AFDUMP attnflow-dump/1 case=c kind=sdpa impl=x\nAFDUMP tensor x i8 2 4294967296 "
      "4294967296\n",
      "ovf.log");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("ovf.log:2: "), std::string::npos) << d.status().message();
  // Many stages that each fit but together exceed the text: the sum is bounded.
  std::string many = "AFDUMP attnflow-dump/1 case=c kind=sdpa impl=x\n";
  for (int i = 0; i < 40; ++i) many += "AFDUMP tensor s" + std::to_string(i) + " i32 1 20\n";
  d = ParseDeviceDump(many, "many.log");  // ~1,100 bytes; 40 x 20 values need 1,600
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message().find("many.log:2: "), std::string::npos) << "the first stages fit";
  EXPECT_NE(d.status().message().find("bytes of the dump can carry"), std::string::npos)
      << d.status().message();
}

// The bound never rejects a valid dump: the densest possible text (i8 zeros,
// 16 per line) is accepted.
TEST(DeviceDump, DensestValidDumpIsAccepted) {
  SpecWriter w;
  w.Header("dense", "sdpa", "x");
  const size_t n = 4096;
  w.Tensor("out", "i8", {int64_t(n)});
  w.PartInt("out", std::vector<int64_t>(n, 0), 1, 0, n);
  w.Done("dense");
  Result<DeviceDump> d = ParseDeviceDump(w.out, "dense.log");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->blocks[0].stages[0].numel(), int64_t(n));
}

TEST(DeviceDump, RankAboveFourHasNoViewButKeepsItsShape) {
  SpecWriter w;
  w.Header("r5", "sdpa", "x");
  w.Tensor("out", "f32", {1, 1, 1, 2, 1});
  w.PartF32("out", {1.0f, 2.0f}, 0, 2);
  w.Done("r5");
  Result<DeviceDump> d = ParseDeviceDump(w.out, "r5.log");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->blocks[0].stages[0].view().rank, -1);
  EXPECT_EQ(d->blocks[0].stages[0].shape, (Shape{1, 1, 1, 2, 1}));
}

TEST(DeviceDump, SelectBlocksByCaseAndImplementation) {
  SpecWriter w;
  for (auto [c, impl] : {std::pair<const char*, const char*>{"a", "micro-f32"},
                         {"a", "micro-s8"},
                         {"b", "micro-f32"}}) {
    w.Header(c, "sdpa", impl);
    w.Done(c);
  }
  Result<DeviceDump> d = ParseDeviceDump(w.out, "two.log");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->blocks.size(), 3u);
  Result<const DumpBlock*> b = SelectDumpBlock(d.value(), "b", "");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value()->line, 5);
  b = SelectDumpBlock(d.value(), "", "micro-s8");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value()->case_name, "a");
  b = SelectDumpBlock(d.value(), "a", "micro-f32");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value()->line, 1);
  b = SelectDumpBlock(d.value(), "a", "");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("2 blocks match case=a"), std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find("case=b impl=micro-f32 (line 5)"), std::string::npos);
  b = SelectDumpBlock(d.value(), "", "");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("3 blocks match"), std::string::npos) << b.status().message();
  b = SelectDumpBlock(d.value(), "zz", "");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("no block with case=zz"), std::string::npos)
      << b.status().message();
}

TEST(DeviceDump, DetectionByContent) {
  EXPECT_TRUE(LooksLikeDeviceDump(kSpecExample));
  EXPECT_TRUE(LooksLikeDeviceDump("x\n   AFDUMP attnflow-dump/1 case=a kind=sdpa impl=b\r\n"));
  EXPECT_TRUE(LooksLikeDeviceDump("AFDUMP attnflow-dump/2"));  // parsed, then refused by version
  EXPECT_FALSE(LooksLikeDeviceDump("log: AFDUMP attnflow-dump/1 case=a\n"));
  EXPECT_FALSE(LooksLikeDeviceDump("AFDUMP tensor a f32 0\n"));
  EXPECT_FALSE(LooksLikeDeviceDump(""));
}

TEST(DeviceDump, ReadsAFileAndNamesMissingOnes) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/afdump_example.log";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs(kSpecExample, f);
  std::fclose(f);
  Result<DeviceDump> d = ReadDeviceDump(path);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->label, path);
  d = ReadDeviceDump(dir + "/no_such.log");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kIoError);
  EXPECT_NE(d.status().message().find("no_such.log"), std::string::npos);
}

// numpy writes int8 arrays with descr '|i1'; the header is built by hand
// from the .npy format description.
TEST(Npy, ReadsInt8) {
  std::string h = "{'descr': '|i1', 'fortran_order': False, 'shape': (2, 3), }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string raw("\x93NUMPY\x01\x00", 8);
  raw += static_cast<char>(h.size());
  raw += '\0';
  raw += h;
  for (int x : {-128, -1, 0, 1, 2, 127}) raw += static_cast<char>(x);
  const std::vector<uint8_t> b(raw.begin(), raw.end());
  Result<Tensor> t = DecodeNpy(b, "i8.npy");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype(), DType::kI8);
  EXPECT_EQ(t->shape(), (Shape{2, 3}));
  EXPECT_EQ(t->view().load(0), -128.0);
  EXPECT_EQ(t->view().load(5), 127.0);
  Result<std::vector<uint8_t>> again = EncodeNpy(t->view());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value(), b);  // the writer produces numpy's own bytes
}

}  // namespace
}  // namespace attnflow
