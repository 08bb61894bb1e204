// fault_files_test.cc — fault matrix, file rows (docs/errors.md, "Hostile
// files"): truncated, oversized and inconsistent safetensors / golden /
// GGUF / vocabulary files. Each row feeds a crafted file to the reader and
// checks the Status code and that the message names the file and the field.
// Nothing here is compared with numbers from the code under test: the
// expected outcome of every row is the rule in docs/safetensors.md,
// docs/golden-format.md, attnflow/gguf.h or wordpiece.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "attnflow/reference.h"
#include "attnflow/gguf.h"
#include "attnflow/golden.h"
#include "attnflow/safetensors.h"
#include "model/bert/wordpiece.h"
#include "model/llama/chat_template.h"
#include "util/scratch_util.h"
#include "util/test_util.h"

namespace attnflow {
namespace {

namespace fs = std::filesystem;

// ------------------------------------------------------------- helpers --

std::vector<uint8_t> St(const std::string& header, size_t data_bytes, uint64_t len_override = 0,
                        bool override_len = false) {
  std::vector<uint8_t> out(8);
  const uint64_t n = override_len ? len_override : header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0x5a);
  return out;
}

::testing::AssertionResult Rejected(const Result<SafetensorsFile>& r, StatusCode code,
                                    const std::string& needle) {
  if (r.ok()) return ::testing::AssertionFailure() << "accepted";
  const Status& s = r.status();
  if (s.code() != code) return ::testing::AssertionFailure() << "code " << s.ToString();
  if (s.message().rfind("safetensors: label: ", 0) != 0) {
    return ::testing::AssertionFailure() << "message does not name the file: " << s.message();
  }
  if (s.message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << s.message();
  }
  return ::testing::AssertionSuccess();
}

Result<SafetensorsFile> Parse(const std::vector<uint8_t>& b) {
  return SafetensorsFile::FromBuffer(b, "label");
}

std::vector<uint8_t> ValidFile() {
  Tensor a = testing::Random({2, 3}, 1);
  Tensor b = testing::Random({4}, 2, 1.0, DType::kF16);
  Result<std::vector<uint8_t>> enc =
      EncodeSafetensors({{"a", a.view()}, {"b", b.view()}}, {{"k", "v"}});
  if (!enc.ok()) std::abort();
  return enc.value();
}

class TempDir : public testing::ScratchDir {
 public:
  TempDir() : ScratchDir("attnflow_fault_files") {}
};

// ------------------------------------------------------ safetensors rows --

TEST(FaultSafetensors, EveryTruncationIsCorrupt) {
  const std::vector<uint8_t> f = ValidFile();
  ASSERT_TRUE(Parse(f).ok());
  for (size_t n = 0; n < f.size(); ++n) {
    const std::vector<uint8_t> cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
    const Result<SafetensorsFile> r = Parse(cut);
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
    ASSERT_EQ(r.status().code(), StatusCode::kCorrupt) << n << ": " << r.status().ToString();
  }
}

TEST(FaultSafetensors, HeaderLengthBeyondFileOrOverflowing) {
  EXPECT_TRUE(Rejected(Parse(St("{}", 0, 1000, true)), StatusCode::kCorrupt, "1000"));
  EXPECT_TRUE(Rejected(Parse(St("{}", 0, ~uint64_t{0}, true)), StatusCode::kCorrupt, "header"));
  EXPECT_TRUE(Rejected(Parse(St("{}", 0, uint64_t{1} << 63, true)), StatusCode::kCorrupt, "header"));
  // Over the 100 MB header limit, even if the file were that long.
  EXPECT_TRUE(Rejected(Parse(St("{}", 0, kSafetensorsMaxHeaderBytes + 1, true)),
                       StatusCode::kCorrupt, "header"));
  EXPECT_FALSE(Parse({}).ok());
  EXPECT_FALSE(Parse({1, 0, 0, 0, 0, 0, 0}).ok());
}

TEST(FaultSafetensors, OffsetsPastTheEnd) {
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12)),
                       StatusCode::kCorrupt, "past the end"));
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[40,40]}})", 12)),
                       StatusCode::kCorrupt, "past the end"));
}

TEST(FaultSafetensors, OverlappingTensors) {
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
                       StatusCode::kCorrupt, "overlap"));
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                R"("y":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})", 8)),
                       StatusCode::kCorrupt, "overlap"));
}

TEST(FaultSafetensors, ShapeAndByteSizeDisagree) {
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
                       StatusCode::kCorrupt, "needs 12"));
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
                       StatusCode::kCorrupt, "begin > end"));
}

TEST(FaultSafetensors, WrongDtypeString) {
  for (const char* dt : {"F33", "f32", "", "float32", "F32 "}) {
    const std::string h = std::string(R"({"x":{"dtype":")") + dt + R"(","shape":[1],"data_offsets":[0,4]}})";
    EXPECT_TRUE(Rejected(Parse(St(h, 4)), StatusCode::kCorrupt, "dtype")) << dt;
  }
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4)),
                       StatusCode::kCorrupt, "dtype"));
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", 4)),
                       StatusCode::kUnimplemented, "F8_E5M2"));
}

TEST(FaultSafetensors, DuplicateNames) {
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                R"("x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2)),
                       StatusCode::kCorrupt, "duplicate"));
  EXPECT_TRUE(Rejected(Parse(St(R"({"__metadata__":{"a":"1","a":"2"}})", 0)),
                       StatusCode::kCorrupt, "duplicate"));
}

TEST(FaultSafetensors, NonUtf8NamesAndMetadata) {
  for (const std::string bad : {std::string("\xff"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
                                std::string("a\xe2\x82")}) {
    EXPECT_TRUE(Rejected(Parse(St(R"({"__metadata__":{"k":")" + bad + R"("}})", 0)),
                         StatusCode::kCorrupt, "UTF-8"));
    EXPECT_TRUE(Rejected(Parse(St(R"({"__metadata__":{")" + bad + R"(":"v"}})", 0)),
                         StatusCode::kCorrupt, "UTF-8"));
    EXPECT_TRUE(Rejected(Parse(St(R"({")" + bad + R"(":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1)),
                         StatusCode::kCorrupt, "UTF-8"));
  }
}

TEST(FaultSafetensors, SizesThatOverflow64Bits) {
  // Product of the shape overflows int64.
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0)),
                       StatusCode::kCorrupt, "overflow"));
  // Element count fits, byte count (x8) does not.
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", 0)),
                       StatusCode::kCorrupt, "overflow"));
  // Offsets beyond int64 / beyond uint64.
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[0,18446744073709551615]}})", 0)),
                       StatusCode::kCorrupt, "int64"));
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[0,18446744073709551616]}})", 0)),
                       StatusCode::kCorrupt, "data_offsets"));
  EXPECT_TRUE(Rejected(Parse(St(R"({"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0)),
                       StatusCode::kCorrupt, "shape"));
}

TEST(FaultSafetensors, DirectoryMissingAndFifoPaths) {
  TempDir d;
  Result<SafetensorsFile> r = SafetensorsFile::Open(d.path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  r = SafetensorsFile::Open((d.path() / "missing").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  // A path below a regular file.
  const std::string f = d.File("plain", ValidFile());
  r = SafetensorsFile::Open(f + "/x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
}

// ------------------------------------------------------------ golden rows --

std::vector<uint8_t> GoldenBytes(const std::vector<std::pair<std::string, TensorView>>& ts,
                                 std::map<std::string, std::string> meta) {
  Result<std::vector<uint8_t>> enc = EncodeSafetensors(ts, meta);
  if (!enc.ok()) std::abort();
  return enc.value();
}

std::map<std::string, std::string> SdpaMeta() {
  return {{"format", "attnflow-golden/1"}, {"kind", "sdpa"}, {"causal", "none"}, {"scale", "0.5"}};
}

Result<GoldenCase> Golden(const std::vector<uint8_t>& b) {
  Result<SafetensorsFile> f = SafetensorsFile::FromBuffer(b, "case.st");
  if (!f.ok()) return f.status();
  return ValidateGoldenCase(std::move(f).value());
}

::testing::AssertionResult GoldenRejected(const Result<GoldenCase>& r, const std::string& needle) {
  if (r.ok()) return ::testing::AssertionFailure() << "accepted";
  if (r.status().code() != StatusCode::kCorrupt) return ::testing::AssertionFailure() << r.status().ToString();
  if (r.status().message().find("case.st") == std::string::npos ||
      r.status().message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks the file or '" << needle << "': "
                                         << r.status().message();
  }
  return ::testing::AssertionSuccess();
}

TEST(FaultGolden, NotAGoldenCaseOrInconsistentInputs) {
  Tensor q = testing::Random({1, 2, 3, 4}, 1), k = testing::Random({1, 2, 5, 4}, 2),
         v = testing::Random({1, 2, 5, 4}, 3), k7 = testing::Random({1, 2, 5, 7}, 4);
  EXPECT_TRUE(Golden(GoldenBytes({{"q", q.view()}, {"k", k.view()}, {"v", v.view()}}, SdpaMeta())).ok());
  EXPECT_TRUE(GoldenRejected(Golden(GoldenBytes({{"q", q.view()}}, {})), "metadata 'format'"));
  EXPECT_TRUE(GoldenRejected(Golden(GoldenBytes({{"q", q.view()}, {"k", k.view()}}, SdpaMeta())),
                             "tensor 'v'"));
  EXPECT_TRUE(GoldenRejected(Golden(GoldenBytes({{"q", q.view()}, {"k", k7.view()}, {"v", v.view()}},
                                                SdpaMeta())),
                             "inconsistent"));
  Tensor q16 = testing::Random({1, 2, 3, 4}, 1, 1.0, DType::kF16);
  EXPECT_TRUE(GoldenRejected(Golden(GoldenBytes({{"q", q16.view()}, {"k", k.view()}, {"v", v.view()}},
                                                SdpaMeta())),
                             "tensor 'q'"));
  Tensor kvl = testing::Zeros(DType::kI64, {1});
  kvl.data<int64_t>()[0] = 6;  // > Lk = 5
  EXPECT_TRUE(GoldenRejected(
      Golden(GoldenBytes({{"q", q.view()}, {"k", k.view()}, {"v", v.view()}, {"kv_lens", kvl.view()}},
                         SdpaMeta())),
      "kv_lens"));
}

TEST(FaultGolden, BadMetadataValues) {
  Tensor q = testing::Random({1, 1, 2, 2}, 1), k = testing::Random({1, 1, 2, 2}, 2);
  for (auto [key, val] : std::vector<std::pair<std::string, std::string>>{
           {"scale", "nan"}, {"scale", "inf"}, {"scale", "1e999"}, {"scale", ""}, {"causal", "left"},
           {"atol", "-1"}, {"atol", "nan"}, {"rtol", "inf"}, {"window_left", "-2"},
           {"window_left", "9223372036854775808"}, {"kind", "conv"}, {"format", "attnflow-golden/2"}}) {
    std::map<std::string, std::string> meta = SdpaMeta();
    meta[key] = val;
    EXPECT_TRUE(GoldenRejected(Golden(GoldenBytes({{"q", q.view()}, {"k", k.view()}, {"v", k.view()}}, meta)),
                               "metadata '" + key + "'"))
        << key << "=" << val;
  }
}

// `verify --compare GOT EXPECTED` takes its tolerances from EXPECTED's
// metadata. A non-finite or negative tolerance there must not make any
// port "match" (atol=inf) or silently fail everything (atol=nan): like
// LoadGoldenCase, CompareFiles must reject it as kCorrupt.
TEST(FaultGolden, CompareFilesRejectsInvalidToleranceMetadata) {
  Tensor good = testing::Random({2, 3}, 1);
  Tensor bad = testing::Random({2, 3}, 99, 1000.0);
  for (const char* tol : {"inf", "1e999", "nan", "-1", "abc"}) {
    Result<SafetensorsFile> expected = SafetensorsFile::FromBuffer(
        GoldenBytes({{"weights", good.view()}}, {{"atol", tol}, {"rtol", "0"}}), "expected.st");
    Result<SafetensorsFile> got = SafetensorsFile::FromBuffer(GoldenBytes({{"weights", bad.view()}}, {}), "got.st");
    ASSERT_TRUE(expected.ok() && got.ok());
    Result<CaseReport> r = CompareFiles(got.value(), expected.value(), -1, -1);
    EXPECT_FALSE(r.ok() && r->ok()) << "atol=" << tol << ": a port 1000x off was reported as matching";
    EXPECT_FALSE(r.ok()) << "atol=" << tol << ": invalid tolerance metadata accepted";
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
  }
}

// A golden file is tiny but its zero-sized head dims can claim an enormous
// problem (q [1,1,2^20,0], k/v [1,1,2^20,0]: 2^40 scores, no data bytes).
// Verifying it must end with an error, without trying to allocate the
// stages (terabytes) or loop over 2^40 scores. The allocation hook refuses
// anything above 1 GiB and records the largest request.
size_t g_largest_request = 0;
bool RefuseHuge(size_t bytes) {
  if (bytes > g_largest_request) g_largest_request = bytes;
  return bytes <= (size_t{1} << 30);
}

TEST(FaultGolden, TinyFileClaimingAHugeProblemIsRejectedWithoutHugeAllocations) {
  const std::string h =
      R"({"__metadata__":{"format":"attnflow-golden/1","kind":"sdpa","causal":"none","scale":"1"},)"
      R"("q":{"dtype":"F32","shape":[1,1,1048576,0],"data_offsets":[0,0]},)"
      R"("k":{"dtype":"F32","shape":[1,1,1048576,0],"data_offsets":[0,0]},)"
      R"("v":{"dtype":"F32","shape":[1,1,1048576,0],"data_offsets":[0,0]}})";
  g_largest_request = 0;
  SetAllocHook(&RefuseHuge);
  Result<GoldenCase> c = Golden(St(h, 0));
  Status st = c.status();
  if (c.ok()) {
    Result<CaseReport> rep = VerifyGoldenCase(c.value(), VerifyImpl::kReference);
    st = rep.status();
    EXPECT_FALSE(rep.ok()) << "a 2^40-score case verified";
  }
  SetAllocHook(nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_LE(g_largest_request, size_t{1} << 30)
      << "verifying a " << St(h, 0).size() << "-byte file requested " << g_largest_request
      << " bytes; the case should be rejected by size before any stage is allocated";
}

// The same hostile shapes through the public API (no file): a huge key
// count with zero-sized data must give an error, never an exception or an
// endless loop. Here: Lk = 2^40 keys of head_dim 1 viewed with stride 0.
TEST(FaultGolden, HugeBroadcastProblemIsAnErrorNotAnException) {
  // In a child process: an escaping std::bad_alloc terminates it (and under
  // ASan the huge request may abort it) without taking the other tests down.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto body = [] {
    float one[4] = {1, 1, 1, 1};
    float o[4] = {0, 0, 0, 0};
    const TensorView q = MakeStridedView(one, DType::kF32, {1, 1, 1, 1}, {0, 0, 0, 0});
    const TensorView k = MakeStridedView(one, DType::kF32, {1, 1, int64_t{1} << 40, 1}, {0, 0, 0, 0});
    const TensorView out = MakeStridedView(o, DType::kF32, {1, 1, 1, 1}, {0, 0, 0, 0});
    Status st;
    try {
      st = reference::Sdpa(out, TensorView(), q, k, k, SdpaOptions());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "reference::Sdpa threw %s\n", e.what());
      std::exit(3);
    }
    if (st.code() != StatusCode::kResourceExhausted) std::exit(4);
    try {
      st = Attention(out, TensorView(), q, k, k, SdpaOptions());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "Attention threw %s\n", e.what());
      std::exit(5);
    }
    std::exit(st.ok() ? 6 : 0);
  };
  EXPECT_EXIT(body(), ::testing::ExitedWithCode(0), "")
      << "Lk = 2^40 (stride 0): must be kResourceExhausted from both, no exception";
}

// An mha golden case whose weights do not fit the embedding (w_k [2,4] for
// E = 4, H = Hkv = 2) must be rejected by LoadGoldenCase / ValidateGoldenCase
// as kCorrupt naming the file and the tensor — not accepted and then failed
// by the reference with invalid_argument at verify time. (Found by the golden
// fuzzer.)
TEST(FaultGolden, MhaWeightShapesAreValidatedAtLoad) {
  Tensor x = testing::Random({1, 3, 4}, 1), w = testing::Random({4, 4}, 2), wk = testing::Random({2, 4}, 3),
         b = testing::Random({3}, 4);
  std::map<std::string, std::string> meta = {{"format", "attnflow-golden/1"}, {"kind", "mha"}, {"causal", "none"},
                                             {"scale", "0.7071"}, {"num_heads", "2"}};
  auto with = [&](const char* name, const TensorView& bad) {
    std::vector<std::pair<std::string, TensorView>> ts = {
        {"x_q", x.view()}, {"x_k", x.view()}, {"x_v", x.view()}, {"w_q", w.view()},
        {"w_k", w.view()}, {"w_v", w.view()}, {"w_o", w.view()}};
    for (auto& [n, v] : ts)
      if (n == name) v = bad;
    if (std::string(name) == "b_q") ts.emplace_back("b_q", bad);
    return Golden(GoldenBytes(ts, meta));
  };
  EXPECT_TRUE(with("none", w.view()).ok());
  EXPECT_TRUE(GoldenRejected(with("w_k", wk.view()), "w_k"));
  EXPECT_TRUE(GoldenRejected(with("w_o", wk.view()), "w_o"));
  EXPECT_TRUE(GoldenRejected(with("b_q", b.view()), "b_q"));
  Tensor xk = testing::Random({1, 3, 5}, 5);
  EXPECT_TRUE(GoldenRejected(with("x_k", xk.view()), "x_k"));
}

// safetensors does not align tensor data; Get() documents that views may be
// unaligned. Reading them (TensorView::load) must be well-defined: the
// ASan/UBSan build flags a misaligned float load as undefined behaviour.
// (Found by the nn fuzzer through VerifyNnCase.) Child process, so a UBSan
// abort fails only this test.
TEST(FaultSafetensors, UnalignedTensorViewsLoadWithoutUndefinedBehaviour) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Header of odd length: the data buffer starts at an odd file offset.
  std::string h = R"({"f":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("d":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})";
  if ((8 + h.size()) % 2 == 0) h += " ";
  std::vector<uint8_t> bytes = St(h, 16);
  const float f[2] = {1.5f, -2.25f};
  const double d = 3.125;
  std::memcpy(bytes.data() + 8 + h.size(), f, 8);
  std::memcpy(bytes.data() + 8 + h.size() + 8, &d, 8);
  auto body = [&] {
    Result<SafetensorsFile> file = Parse(bytes);
    if (!file.ok()) std::exit(3);
    Result<TensorView> fv = file->Get("f"), dv = file->Get("d");
    if (!fv.ok() || !dv.ok()) std::exit(4);
    if (reinterpret_cast<uintptr_t>(fv->data) % 4 == 0) std::exit(5);  // test precondition
    std::exit(fv->load(0) == 1.5 && fv->load(1) == -2.25 && dv->load(0) == 3.125 ? 0 : 6);
  };
  EXPECT_EXIT(body(), ::testing::ExitedWithCode(0), "");
}

// -------------------------------------------------------------- GGUF rows --

// A raw GGUF writer (independent of GgufBuilder) so fields can be wrong.
struct RawGguf {
  std::vector<uint8_t> b;
  template <typename T>
  RawGguf& Put(T v) {
    const size_t o = b.size();
    b.resize(o + sizeof(T));
    std::memcpy(b.data() + o, &v, sizeof(T));
    return *this;
  }
  RawGguf& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b = {'G', 'G', 'U', 'F'};
    return Put(version).Put(n_tensors).Put(n_kv);
  }
  RawGguf& TensorInfo(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t off) {
    Str(name).Put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) Put(n);
    return Put(type).Put(off);
  }
  RawGguf& Align(size_t a = 32) {
    b.resize((b.size() + a - 1) / a * a, 0);
    return *this;
  }
  RawGguf& Data(size_t n) {
    b.resize(b.size() + n, 0x11);
    return *this;
  }
};

::testing::AssertionResult GgufRejected(const std::vector<uint8_t>& bytes, StatusCode code,
                                        const std::string& needle) {
  Result<GgufFile> r = GgufFile::FromBuffer(bytes, "model.gguf");
  if (r.ok()) return ::testing::AssertionFailure() << "accepted";
  if (r.status().code() != code) return ::testing::AssertionFailure() << r.status().ToString();
  if (r.status().message().rfind("gguf: model.gguf: ", 0) != 0 ||
      r.status().message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks the file or '" << needle << "': "
                                         << r.status().message();
  }
  return ::testing::AssertionSuccess();
}

std::vector<uint8_t> ValidGguf() {
  RawGguf g;
  g.Header(3, 2, 1).Str("general.name").Put<uint32_t>(8).Str("m");
  g.TensorInfo("a", {4}, 0, 0).TensorInfo("b", {32}, 8, 32).Align().Data(32 + 34);
  return g.b;
}

TEST(FaultGguf, ValidBaselineAndEveryTruncation) {
  const std::vector<uint8_t> f = ValidGguf();
  ASSERT_TRUE(GgufFile::FromBuffer(f, "model.gguf").ok());
  for (size_t n = 0; n < f.size(); ++n) {
    Result<GgufFile> r = GgufFile::FromBuffer(std::vector<uint8_t>(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n)), "model.gguf");
    ASSERT_FALSE(r.ok()) << "prefix " << n;
    ASSERT_EQ(r.status().code(), StatusCode::kCorrupt) << n << ": " << r.status().ToString();
  }
}

TEST(FaultGguf, CountsAndLengthsThatDoNotFit) {
  RawGguf g;
  EXPECT_TRUE(GgufRejected(g.Header(3, ~uint64_t{0}, 0).b, StatusCode::kCorrupt, "tensor_count"));
  EXPECT_TRUE(GgufRejected(g.Header(3, 0, uint64_t{1} << 62).b, StatusCode::kCorrupt, "kv_count"));
  g.Header(3, 0, 1).Put<uint64_t>(~uint64_t{0}).Data(16);  // key length 2^64-1
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "string length"));
  g.Header(3, 0, 1).Str("arr").Put<uint32_t>(9).Put<uint32_t>(6).Put<uint64_t>(uint64_t{1} << 61);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "array"));
  g.Header(3, 0, 1).Str("arr").Put<uint32_t>(9).Put<uint32_t>(8).Put<uint64_t>(3).Str("x");
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "arr"));
}

TEST(FaultGguf, TensorsOutsideOverlappingOrMisaligned) {
  RawGguf g;
  g.Header(3, 1, 0).TensorInfo("t", {8}, 0, 0).Align().Data(16);  // needs 32 bytes
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "past the end"));
  g.Header(3, 1, 0).TensorInfo("t", {8}, 0, uint64_t{1} << 63).Align().Data(32);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "'t'"));
  g.Header(3, 2, 0).TensorInfo("a", {16}, 0, 0).TensorInfo("b", {8}, 0, 32).Align().Data(64);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "overlap"));
  g.Header(3, 1, 0).TensorInfo("t", {1}, 0, 4).Align().Data(64);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "alignment"));
  g.Header(3, 1, 1).Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(48);
  g.TensorInfo("t", {1}, 0, 0).Align(64).Data(64);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "power of two"));
}

TEST(FaultGguf, DimsTypesNamesAndStrings) {
  RawGguf g;
  g.Header(3, 1, 0).TensorInfo("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0).Align();
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "overflow"));
  g.Header(3, 1, 0).TensorInfo("t", {~uint64_t{0}}, 0, 0).Align();
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "ne[0]"));
  g.Header(3, 1, 0).TensorInfo("t", {1, 1, 1, 1, 1}, 0, 0).Align();
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "n_dims"));
  g.Header(3, 1, 0).TensorInfo("t", {32}, 11, 0).Align().Data(256);  // Q3_K: known, unsupported
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kUnimplemented, "not supported"));
  g.Header(3, 1, 0).TensorInfo("t", {32}, 999, 0).Align().Data(256);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "unknown tensor type"));
  g.Header(3, 1, 0).TensorInfo("t", {31}, 8, 0).Align().Data(64);  // Q8_0 needs multiples of 32
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "block size"));
  g.Header(3, 2, 0).TensorInfo("t", {1}, 0, 0).TensorInfo("t", {1}, 0, 32).Align().Data(64);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "duplicate tensor name"));
  g.Header(3, 0, 2).Str("k").Put<uint32_t>(4).Put<uint32_t>(1).Str("k").Put<uint32_t>(4).Put<uint32_t>(2);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "duplicate key"));
  g.Header(3, 0, 1).Str("k\xff").Put<uint32_t>(4).Put<uint32_t>(1);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "UTF-8"));
  g.Header(3, 0, 1).Str("k").Put<uint32_t>(8).Str("\xc0\xaf");
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "UTF-8"));
  g.Header(3, 0, 1).Str("k").Put<uint32_t>(77).Put<uint32_t>(1);
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "type"));
  g.Header(3, 0, 1).Str("k").Put<uint32_t>(7).Put<uint8_t>(2);  // bool 2
  EXPECT_TRUE(GgufRejected(g.b, StatusCode::kCorrupt, "bool"));
}

TEST(FaultGguf, MagicAndVersion) {
  std::vector<uint8_t> f = ValidGguf();
  f[0] = 'g';
  EXPECT_TRUE(GgufRejected(f, StatusCode::kCorrupt, "magic"));
  f = ValidGguf();
  f[4] = 1;
  EXPECT_TRUE(GgufRejected(f, StatusCode::kUnimplemented, "v1"));
  f = ValidGguf();
  f[4] = 0, f[7] = 3;  // big-endian 3
  EXPECT_TRUE(GgufRejected(f, StatusCode::kUnimplemented, "big-endian"));
}

// A tensor with a zero-sized inner dimension (ne = [0, 4]) is legal and holds
// no data; dequantising it must give an empty [4, 0] tensor. (Found by the
// gguf fuzzer: GgufTensorInfo::rows() divided by ne[0], SIGFPE.) Runs in a
// child process so the crash fails only this test.
TEST(FaultGguf, ZeroSizedInnerDimensionDequantizes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  RawGguf g;
  g.Header(3, 2, 0).TensorInfo("empty", {0, 4}, 0, 0).TensorInfo("q", {0, 3}, 8, 0).Align();
  Result<GgufFile> f = GgufFile::FromBuffer(g.b, "model.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto body = [&] {
    for (const char* name : {"empty", "q"}) {
      Result<Tensor> t = f->Dequantize(name);
      if (!t.ok() || t->numel() != 0) std::exit(3);
    }
    std::exit(0);
  };
  EXPECT_EXIT(body(), ::testing::ExitedWithCode(0), "");
}

// ------------------------------------------------------ chat template rows --

// tokenizer.chat_template comes from the GGUF file. Absurdly deep nesting
// (parentheses, not, subscripts, if blocks) must be an error, not a stack
// overflow: the interpreter recurses once per level. Each template runs in a
// child process so a crash fails only this test.
TEST(FaultChatTemplate, DeepNestingIsAnErrorNotAStackOverflow) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int n = 100000;
  std::string paren = "{{ ", nots = "{{ ", subs = "{{ x", ifs;
  for (int i = 0; i < n; ++i) paren += "(";
  paren += "1";
  for (int i = 0; i < n; ++i) paren += ")";
  paren += " }}";
  for (int i = 0; i < n; ++i) nots += "not ";
  nots += "true }}";
  for (int i = 0; i < n; ++i) subs += "[0]";
  subs += " }}";
  for (int i = 0; i < n / 4; ++i) ifs += "{% if true %}";
  ifs += "x";
  for (int i = 0; i < n / 4; ++i) ifs += "{% endif %}";
  for (const std::string* src : {&paren, &nots, &subs, &ifs}) {
    auto body = [&] {
      Result<llama::ChatTemplate> t = llama::ChatTemplate::Parse(*src);
      if (t.ok()) {
        Result<std::string> r = t->Render({{"user", "hi"}}, true);
        (void)r;
      }
      std::exit(0);
    };
    EXPECT_EXIT(body(), ::testing::ExitedWithCode(0), "") << src->substr(0, 40) << "...";
  }
}

// -------------------------------------------------------- vocabulary rows --

TEST(FaultVocab, NonUtf8EmptyAndIncompleteVocabularies) {
  TempDir d;
  auto bytes = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  Result<std::unique_ptr<WordPieceTokenizer>> r =
      WordPieceTokenizer::FromVocabFile(d.File("bad.txt", bytes("[UNK]\n[CLS]\n\xff\xfe\n[SEP]\n")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("bad.txt"), std::string::npos) << r.status().message();
  r = WordPieceTokenizer::FromVocabFile(d.File("empty.txt", {}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  r = WordPieceTokenizer::FromVocabFile(d.File("nounk.txt", bytes("[CLS]\n[SEP]\nhello\n")));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[UNK]"), std::string::npos) << r.status().message();
  r = WordPieceTokenizer::FromVocabFile(d.path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  r = WordPieceTokenizer::FromVocabFile((d.path() / "missing.txt").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace attnflow
