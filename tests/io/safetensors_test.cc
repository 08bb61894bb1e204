// safetensors_test.cc — reader/writer round trips, byte-exact checks against
// hand-built files, one test per validation rule (malformed files are built
// byte by byte here, independent of the writer), filesystem error handling
// and the atomic-write helper (file_util).
//
// All files live in a fresh temporary directory per test. Tests run as root in
// CI, so "unwritable" locations are forced with paths under /proc and paths
// whose parent is a regular file rather than with chmod.
#include "attnflow/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/tensor.h"

namespace attnflow {
namespace {

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------- helpers --

// u64 LE length + header + data, with an explicit (possibly lying) length.
Bytes RawFile(uint64_t n, const std::string& header, const Bytes& data = {}) {
  Bytes b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(n >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}
// A file whose length field is correct.
Bytes HandFile(const std::string& header, const Bytes& data = {}) {
  return RawFile(header.size(), header, data);
}
Bytes Zeros(size_t n) { return Bytes(n, 0); }
// Pads a header with spaces (allowed by the spec) so that the data buffer
// starts 8-aligned; typed loads through views then stay aligned (UBSan-clean).
std::string Pad8(std::string h) {
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

::testing::AssertionResult HasError(const Status& s, StatusCode code,
                                    const std::vector<std::string>& parts) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error, got ok";
  if (s.code() != code) {
    return ::testing::AssertionFailure()
           << "expected code " << StatusCodeName(code) << ", got "
           << s.ToString();
  }
  for (const std::string& p : parts) {
    if (s.message().find(p) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message lacks \"" << p << "\": " << s.message();
    }
  }
  return ::testing::AssertionSuccess();
}

Status ParseBytes(const Bytes& b) {
  return SafetensorsFile::FromBuffer(b, "mem.safetensors").status();
}

// Expects the image to be rejected as corrupt with all of `parts` in the text.
#define EXPECT_CORRUPT(bytes, ...)                                         \
  EXPECT_TRUE(HasError(ParseBytes(bytes), StatusCode::kCorrupt,            \
                       {"safetensors: mem.safetensors: ", __VA_ARGS__}))

Bytes F32Bytes(std::initializer_list<float> v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), std::data(v), b.size());
  return b;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/attnflow_st_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void WriteRaw(const std::string& path, const Bytes& b) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()),
            static_cast<std::streamsize>(b.size()));
    ASSERT_TRUE(f.good());
  }
  Bytes ReadRaw(const std::string& path) {
    Result<Bytes> r = ReadFileBytes(path);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : Bytes{};
  }
  // Names in the temp dir (to detect leftover temporary files).
  std::vector<std::string> DirEntries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

using SafetensorsReadTest = SafetensorsTest;
using SafetensorsValidationTest = SafetensorsTest;
using SafetensorsWriteTest = SafetensorsTest;
using SafetensorsFileUtilTest = SafetensorsTest;

// --------------------------------------------- hand-built files (reader) --

TEST_F(SafetensorsReadTest, HandBuiltFileReadsExactly) {
  // Header order is b, __metadata__, a; data: a = F32 {1.5, -2}, b = U8 {7,8,9}
  // stored after a (so data order differs from header order).
  const std::string text =
      R"({"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]},)"
      R"("__metadata__":{"format":"pt","note":"h\u00e9"},)"
      R"("a":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]}})";
  const std::string header = Pad8(text);
  Bytes data = F32Bytes({1.5f, -2.0f});
  data.insert(data.end(), {7, 8, 9});
  const std::string path = Path("hand.safetensors");
  WriteRaw(path, HandFile(header, data));

  Result<SafetensorsFile> r = SafetensorsFile::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SafetensorsFile& f = r.value();
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{
                              {"format", "pt"}, {"note", "h\xc3\xa9"}}));
  EXPECT_EQ(f.header_size(), header.size());
  EXPECT_EQ(f.data_size(), 11u);
  EXPECT_TRUE(f.Has("a"));
  EXPECT_FALSE(f.Has("c"));
  EXPECT_FALSE(f.Has("__metadata__"));

  Result<TensorView> a = f.Get("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->rank, 2);
  EXPECT_EQ(a->shape_string(), "[2,1]");
  EXPECT_EQ(a->strides[0], 1);
  EXPECT_EQ(a->strides[1], 1);
  EXPECT_EQ(a->load(0), 1.5);
  EXPECT_EQ(a->load(1), -2.0);

  Result<TensorView> b = f.Get("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dtype, DType::kU8);
  const uint8_t* bp = b->ptr<uint8_t>();
  EXPECT_EQ(bp[0], 7);
  EXPECT_EQ(bp[2], 9);
  const SafetensorsTensorInfo* info = f.Find("b");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->begin, 8);
  EXPECT_EQ(info->end, 11);
  EXPECT_EQ(f.Find("zz"), nullptr);

  Result<Tensor> c = f.Copy("a");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c->data<float>()) % 64, 0u);
  EXPECT_EQ(c->data<float>()[1], -2.0f);
}

TEST_F(SafetensorsReadTest, TrailingSpacePaddingAndEmptyHeaderAccepted) {
  EXPECT_TRUE(ParseBytes(HandFile("{}")).ok());
  EXPECT_TRUE(ParseBytes(HandFile("{}      ")).ok());
  const std::string h =
      R"({"t":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}    )";
  Result<SafetensorsFile> r = SafetensorsFile::FromBuffer(HandFile(h, Zeros(4)));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->names(), std::vector<std::string>{"t"});
  EXPECT_TRUE(r->metadata().empty());
  // Metadata-only file.
  EXPECT_TRUE(ParseBytes(HandFile(R"({"__metadata__":{}})")).ok());
}

TEST_F(SafetensorsReadTest, ZeroSizedAndScalarTensors) {
  const std::string h =
      R"({"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
      R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("z":{"dtype":"I64","shape":[0],"data_offsets":[0,0]}})";
  Result<SafetensorsFile> r =
      SafetensorsFile::FromBuffer(HandFile(Pad8(h), F32Bytes({3.25f})));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Result<TensorView> s = r->Get("s");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->rank, 0);
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->load(0), 3.25);
  Result<TensorView> e = r->Get("e");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->numel(), 0);
  Result<Tensor> ec = r->Copy("e");
  ASSERT_TRUE(ec.ok());
  EXPECT_EQ(ec->numel(), 0);
}

TEST_F(SafetensorsReadTest, UnalignedDataStillReadable) {
  // F32 at byte offset 3 of the data buffer (and an odd header length), so the
  // view is misaligned; Get() still works and Copy() realigns.
  const std::string h =
      R"({"u":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
      R"("f":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}} )";
  Bytes data = {1, 2, 3};
  Bytes fb = F32Bytes({0.5f, 6.0f});
  data.insert(data.end(), fb.begin(), fb.end());
  Result<SafetensorsFile> r = SafetensorsFile::FromBuffer(HandFile(h, data));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Result<TensorView> v = r->Get("f");
  ASSERT_TRUE(v.ok());
  float got[2];
  std::memcpy(got, v->data, 8);
  EXPECT_EQ(got[0], 0.5f);
  EXPECT_EQ(got[1], 6.0f);
  // (Typed loads through v would be misaligned: fine on x86 but flagged by
  // UBSan, hence memcpy above and Copy() below.)
  Result<Tensor> c = r->Copy("f");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data<float>()[0], 0.5f);
}

TEST_F(SafetensorsReadTest, GapsAndTrailingBytesInDataBufferAccepted) {
  // Documented leniency: unused bytes between/after tensors are allowed.
  const std::string h =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})";
  EXPECT_TRUE(ParseBytes(HandFile(h, Zeros(10))).ok());
}

TEST_F(SafetensorsReadTest, ZeroLengthTensorsMayShareOffsets) {
  const std::string h =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
      R"("c":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
      R"("d":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_TRUE(ParseBytes(HandFile(h, Zeros(12))).ok());
}

TEST_F(SafetensorsReadTest, RankAboveFourOpensButGetFails) {
  const std::string h =
      R"({"big":{"dtype":"F32","shape":[1,1,1,2,1],"data_offsets":[0,8]},)"
      R"("ok":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  Result<SafetensorsFile> r =
      SafetensorsFile::FromBuffer(HandFile(h, Zeros(12)), "r5.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Find("big")->shape.size(), 5u);
  EXPECT_TRUE(HasError(r->Get("big").status(), StatusCode::kUnimplemented,
                       {"r5.safetensors", "'big'", "rank 5", "F32[1,1,1,2,1]"}));
  EXPECT_TRUE(HasError(r->Copy("big").status(), StatusCode::kUnimplemented,
                       {"'big'"}));
  EXPECT_TRUE(r->Get("ok").ok());
}

TEST_F(SafetensorsReadTest, GetMissingNameIsInvalidArgument) {
  const std::string h =
      R"({"q":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  Result<SafetensorsFile> r =
      SafetensorsFile::FromBuffer(HandFile(h, Zeros(4)), "m.safetensors");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(HasError(r->Get("k").status(), StatusCode::kInvalidArgument,
                       {"m.safetensors", "no tensor named 'k'", "'q'"}));
  EXPECT_TRUE(HasError(r->Copy("k").status(), StatusCode::kInvalidArgument,
                       {"'k'"}));
}

TEST_F(SafetensorsReadTest, MoveKeepsViewsValidAndEmptiesSource) {
  const std::string h =
      R"({"__metadata__":{"k":"v"},"q":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string path = Path("mv.safetensors");
  WriteRaw(path, HandFile(Pad8(h), F32Bytes({42.0f})));
  Result<SafetensorsFile> r = SafetensorsFile::Open(path);
  ASSERT_TRUE(r.ok());
  TensorView v = r->Get("q").value();
  SafetensorsFile moved(std::move(r.value()));
  EXPECT_EQ(v.load(0), 42.0);
  EXPECT_TRUE(moved.Has("q"));
  EXPECT_EQ(moved.metadata().at("k"), "v");
  EXPECT_FALSE(r.value().Has("q"));  // NOLINT: moved-from is empty by contract
  EXPECT_TRUE(r.value().names().empty());
  SafetensorsFile assigned;
  EXPECT_TRUE(assigned.names().empty());
  assigned = std::move(moved);
  EXPECT_EQ(v.load(0), 42.0);
  EXPECT_EQ(assigned.Get("q")->load(0), 42.0);
  EXPECT_EQ(assigned.path(), path);
}

TEST_F(SafetensorsReadTest, FromBufferPointerOverloadCopies) {
  Bytes b = HandFile(R"({"q":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})",
                     {5, 6});
  Result<SafetensorsFile> r = SafetensorsFile::FromBuffer(b.data(), b.size());
  ASSERT_TRUE(r.ok());
  b.assign(b.size(), 0);  // the file owns its own copy
  EXPECT_EQ(r->Get("q")->ptr<int8_t>()[1], 6);
}

TEST_F(SafetensorsReadTest, ReadingDoesNotModifyTheFile) {
  const std::string h =
      R"({"q":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string path = Path("ro.safetensors");
  const Bytes original = HandFile(h, F32Bytes({1, 2}));
  WriteRaw(path, original);
  // Put the mtime clearly in the past so any write would be visible.
  struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  {
    Result<SafetensorsFile> r = SafetensorsFile::Open(path);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r->Get("q").ok());
    ASSERT_TRUE(r->Copy("q").ok());
    Result<SafetensorsFile> r2 = SafetensorsFile::Open(path);  // twice at once
    ASSERT_TRUE(r2.ok());
  }
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  EXPECT_EQ(before.st_size, after.st_size);
  EXPECT_EQ(ReadRaw(path), original);
}

// ------------------------------------------------ filesystem errors (read) --

TEST_F(SafetensorsReadTest, MissingFileIsIoError) {
  const std::string path = Path("nope.safetensors");
  EXPECT_TRUE(HasError(SafetensorsFile::Open(path).status(),
                       StatusCode::kIoError, {path, "cannot open"}));
}

TEST_F(SafetensorsReadTest, DirectoryIsIoError) {
  EXPECT_TRUE(HasError(SafetensorsFile::Open(dir_).status(),
                       StatusCode::kIoError, {dir_, "is a directory"}));
}

TEST_F(SafetensorsReadTest, NonRegularFileIsIoError) {
  EXPECT_TRUE(HasError(SafetensorsFile::Open("/dev/null").status(),
                       StatusCode::kIoError,
                       {"/dev/null", "not a regular file"}));
}

TEST_F(SafetensorsReadTest, OpenErrorsNameThePath) {
  const std::string path = Path("bad.safetensors");
  WriteRaw(path, HandFile(
      R"({"q":{"dtype":"F32","shape":[2,3,4],"data_offsets":[0,100]}})",
      Zeros(100)));
  EXPECT_TRUE(HasError(
      SafetensorsFile::Open(path).status(), StatusCode::kCorrupt,
      {"safetensors: " + path + ": tensor 'q': data_offsets [0,100] give 100 "
       "bytes but F32[2,3,4] needs 96"}));
  const std::string empty = Path("empty.safetensors");
  WriteRaw(empty, {});
  EXPECT_TRUE(HasError(SafetensorsFile::Open(empty).status(),
                       StatusCode::kCorrupt, {empty, "0 bytes"}));
}

// ------------------------------------------------ validation, rule by rule --

TEST_F(SafetensorsValidationTest, FileShorterThanEightBytes) {
  EXPECT_CORRUPT(Bytes{}, "file is 0 bytes", "too short");
  EXPECT_CORRUPT(Bytes(7, 0), "file is 7 bytes", "too short");
}

TEST_F(SafetensorsValidationTest, HeaderLengthZero) {
  EXPECT_CORRUPT(RawFile(0, ""), "header length is 0");
  EXPECT_CORRUPT(RawFile(0, "{}"), "header length is 0");
}

TEST_F(SafetensorsValidationTest, HeaderLengthBeyondFile) {
  EXPECT_CORRUPT(RawFile(100, "{}"), "header length 100 exceeds the 2 bytes",
                 "truncated");
  EXPECT_CORRUPT(RawFile(3, "{}"), "header length 3 exceeds the 2 bytes");
}

TEST_F(SafetensorsValidationTest, HeaderLengthOverLimit) {
  EXPECT_CORRUPT(RawFile(100'000'001, "{}"), "header length 100000001",
                 "100000000-byte limit");
  EXPECT_CORRUPT(RawFile(uint64_t{1} << 63, "{}"),
                 "header length 9223372036854775808", "limit");
  EXPECT_CORRUPT(RawFile(~uint64_t{0}, "{}"),
                 "header length 18446744073709551615", "limit");
}

TEST_F(SafetensorsValidationTest, MalformedJson) {
  EXPECT_CORRUPT(HandFile(R"({"a":)"), "header is not valid JSON");
  EXPECT_CORRUPT(HandFile(R"({"a" 1})"), "header is not valid JSON");
  EXPECT_CORRUPT(HandFile("{} x"), "header is not valid JSON");
  // Padding must be spaces (JSON whitespace), not NUL bytes.
  EXPECT_CORRUPT(HandFile(std::string("{}\0\0", 4)), "header is not valid JSON",
                 "NUL byte at byte 2");
  EXPECT_CORRUPT(HandFile(std::string("{}\0garbage", 10)), "NUL byte");
  EXPECT_CORRUPT(HandFile(std::string("{\"a\0\":1}", 8)), "NUL byte");
  // Comments are not JSON.
  EXPECT_CORRUPT(HandFile("{/*c*/}"), "header is not valid JSON");
}

TEST_F(SafetensorsValidationTest, HeaderMustBeObject) {
  EXPECT_CORRUPT(HandFile("[1,2]"), "header must be a JSON object",
                 "an array");
  EXPECT_CORRUPT(HandFile("\"s\""), "header must be a JSON object", "a string");
  EXPECT_CORRUPT(HandFile("3"), "header must be a JSON object");
  EXPECT_CORRUPT(HandFile("null"), "header must be a JSON object", "null");
}

TEST_F(SafetensorsValidationTest, DeepNestingRejected) {
  std::string h = R"({"a":)" + std::string(1000, '[') + std::string(1000, ']') + "}";
  EXPECT_CORRUPT(HandFile(h), "nests deeper than");
}

TEST_F(SafetensorsValidationTest, EntryMustBeObject) {
  EXPECT_CORRUPT(HandFile(R"({"q":5})"), "tensor 'q'",
                 "must be an object with dtype, shape and data_offsets",
                 "the integer 5");
  EXPECT_CORRUPT(HandFile(R"({"q":[]})"), "tensor 'q'", "an array");
}

TEST_F(SafetensorsValidationTest, MissingFields) {
  EXPECT_CORRUPT(HandFile(R"({"q":{"shape":[1],"data_offsets":[0,4]}})",
                          Zeros(4)),
                 "tensor 'q': missing field 'dtype'");
  EXPECT_CORRUPT(HandFile(R"({"q":{"dtype":"F32","data_offsets":[0,4]}})",
                          Zeros(4)),
                 "tensor 'q': missing field 'shape'");
  EXPECT_CORRUPT(HandFile(R"({"q":{"dtype":"F32","shape":[1]}})", Zeros(4)),
                 "tensor 'q': missing field 'data_offsets'");
}

TEST_F(SafetensorsValidationTest, UnexpectedField) {
  EXPECT_CORRUPT(
      HandFile(
          R"({"q":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})",
          Zeros(4)),
      "tensor 'q': unexpected field 'extra'");
}

TEST_F(SafetensorsValidationTest, DTypeMustBeStringAndKnown) {
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", Zeros(4)),
      "tensor 'q': field 'dtype' must be a string", "the integer 4");
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})",
               Zeros(4)),
      "tensor 'q': unknown dtype 'F33'", "F32, F16");
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})",
               Zeros(4)),
      "unknown dtype 'f32'");
}

TEST_F(SafetensorsValidationTest, KnownButUnsupportedDTypeIsUnimplemented) {
  for (const char* dt : {"F8_E4M3", "F8_E5M2", "U16", "I16", "U32", "U64"}) {
    const std::string h = std::string(R"({"q":{"dtype":")") + dt +
                          R"(","shape":[1],"data_offsets":[0,1]}})";
    EXPECT_TRUE(HasError(ParseBytes(HandFile(h, Zeros(8))),
                         StatusCode::kUnimplemented,
                         {"mem.safetensors", "tensor 'q'",
                          std::string("unsupported dtype '") + dt + "'"}))
        << dt;
  }
}

TEST_F(SafetensorsValidationTest, ShapeMustBeArrayOfNonNegativeIntegers) {
  auto file = [](const std::string& shape) {
    return HandFile(R"({"q":{"dtype":"U8","shape":)" + shape +
                        R"(,"data_offsets":[0,0]}})",
                    Zeros(8));
  };
  EXPECT_CORRUPT(file("3"), "tensor 'q': field 'shape' must be an array",
                 "the integer 3");
  EXPECT_CORRUPT(file(R"("[1]")"), "field 'shape' must be an array", "a string");
  EXPECT_CORRUPT(file("[1,-2]"),
                 "tensor 'q': shape[1] must be a non-negative integer",
                 "the negative integer -2");
  EXPECT_CORRUPT(file("[1.5]"), "shape[0] must be a non-negative integer",
                 "floating-point number 1.5");
  EXPECT_CORRUPT(file("[2.0]"), "shape[0] must be a non-negative integer");
  EXPECT_CORRUPT(file(R"(["2"])"), "shape[0]", "a string");
  EXPECT_CORRUPT(file("[null]"), "shape[0]", "null");
  EXPECT_CORRUPT(file("[9223372036854775808]"), "shape[0]", "exceeds int64");
  EXPECT_CORRUPT(file("[18446744073709551616]"), "shape[0]");
}

TEST_F(SafetensorsValidationTest, DataOffsetsMustBeTwoNonNegativeIntegers) {
  auto file = [](const std::string& off) {
    return HandFile(R"({"q":{"dtype":"U8","shape":[0],"data_offsets":)" + off +
                        "}}",
                    Zeros(8));
  };
  EXPECT_CORRUPT(file("5"), "tensor 'q': field 'data_offsets' must be an "
                            "array of 2 non-negative integers",
                 "the integer 5");
  EXPECT_CORRUPT(file("[0]"), "field 'data_offsets'", "array of 1 elements");
  EXPECT_CORRUPT(file("[0,0,0]"), "field 'data_offsets'",
                 "array of 3 elements");
  EXPECT_CORRUPT(file("[-1,0]"), "tensor 'q': data_offsets[0] must be a "
                                 "non-negative integer",
                 "negative integer -1");
  EXPECT_CORRUPT(file("[0,0.5]"), "data_offsets[1]", "floating-point");
  EXPECT_CORRUPT(file(R"([0,"0"])"), "data_offsets[1]", "a string");
  EXPECT_CORRUPT(file("[0,9223372036854775808]"), "data_offsets[1]",
                 "exceeds int64");
}

TEST_F(SafetensorsValidationTest, BeginAfterEnd) {
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})",
               Zeros(8)),
      "tensor 'q': data_offsets [4,2] have begin > end");
}

TEST_F(SafetensorsValidationTest, EndPastDataBuffer) {
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
               Zeros(7)),
      "tensor 'q': data_offsets [0,8] extend past the end of the data buffer "
      "(7 bytes)");
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"U8","shape":[0],"data_offsets":[9,9]}})",
               Zeros(8)),
      "data_offsets [9,9] extend past");
}

TEST_F(SafetensorsValidationTest, ByteSizeMismatch) {
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"F32","shape":[2,3,4],"data_offsets":[0,100]}})",
               Zeros(100)),
      "tensor 'q': data_offsets [0,100] give 100 bytes but F32[2,3,4] needs 96");
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})",
               Zeros(8)),
      "give 4 bytes but BF16[3] needs 6");
}

TEST_F(SafetensorsValidationTest, ShapeProductOverflow) {
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"F32","shape":[1099511627776,1099511627776],)"
               R"("data_offsets":[0,0]}})"),
      "tensor 'q': byte size of F32[1099511627776,1099511627776] overflows");
  // Element count fits but the byte size does not.
  EXPECT_CORRUPT(
      HandFile(R"({"q":{"dtype":"F64","shape":[4611686018427387904],)"
               R"("data_offsets":[0,0]}})"),
      "overflows");
  // A zero dimension makes a huge shape legal (0 bytes).
  EXPECT_TRUE(ParseBytes(HandFile(
      R"({"q":{"dtype":"F32","shape":[9223372036854775807,0],"data_offsets":[0,0]}})"))
                  .ok());
}

TEST_F(SafetensorsValidationTest, OverlappingTensors) {
  EXPECT_CORRUPT(
      HandFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
               R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
               Zeros(24)),
      "tensors 'a' data_offsets [0,16] and 'b' data_offsets [8,24] overlap");
  // Identical ranges, header order reversed from data order.
  EXPECT_CORRUPT(
      HandFile(R"({"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
               R"("a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
               Zeros(8)),
      "overlap");
  // One range containing another that is not its neighbour in header order.
  EXPECT_CORRUPT(
      HandFile(R"({"c":{"dtype":"U8","shape":[2],"data_offsets":[20,22]},)"
               R"("big":{"dtype":"U8","shape":[30],"data_offsets":[0,30]},)"
               R"("d":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}})",
               Zeros(30)),
      "'big' data_offsets [0,30] and 'd' data_offsets [5,6] overlap");
}

TEST_F(SafetensorsValidationTest, DuplicateKeys) {
  const std::string e = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  const std::string e2 = R"({"dtype":"U8","shape":[1],"data_offsets":[1,2]})";
  EXPECT_CORRUPT(HandFile(R"({"q":)" + e + R"(,"q":)" + e2 + "}", Zeros(2)),
                 "duplicate tensor name 'q'");
  EXPECT_CORRUPT(HandFile(R"({"__metadata__":{},"__metadata__":{}})"),
                 "more than one '__metadata__'");
  EXPECT_CORRUPT(HandFile(R"({"__metadata__":{"k":"a","k":"b"}})"),
                 "__metadata__: duplicate key 'k'");
  EXPECT_CORRUPT(
      HandFile(
          R"({"q":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
          Zeros(1)),
      "tensor 'q': duplicate field 'dtype'");
}

TEST_F(SafetensorsValidationTest, MetadataMustMapStringsToStrings) {
  EXPECT_CORRUPT(HandFile(R"({"__metadata__":[]})"),
                 "__metadata__ must be an object of string values",
                 "an array");
  EXPECT_CORRUPT(HandFile(R"({"__metadata__":"x"})"),
                 "__metadata__ must be an object", "a string");
  EXPECT_CORRUPT(HandFile(R"({"__metadata__":{"n":3}})"),
                 "__metadata__: value of key 'n' must be a string",
                 "the integer 3");
  EXPECT_CORRUPT(HandFile(R"({"__metadata__":{"n":null}})"),
                 "value of key 'n' must be a string", "null");
  EXPECT_CORRUPT(HandFile(R"({"__metadata__":{"n":{"x":"y"}}})"),
                 "value of key 'n' must be a string", "an object");
}

TEST_F(SafetensorsValidationTest, InvalidUtf8Rejected) {
  // Raw 0xff in a tensor name.
  EXPECT_CORRUPT(
      HandFile("{\"q\xff\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}"),
      "invalid UTF-8", "must be valid UTF-8");
  // Truncated multi-byte sequence in a metadata value.
  EXPECT_CORRUPT(HandFile("{\"__metadata__\":{\"k\":\"a\xc3\"}}"),
                 "invalid UTF-8");
  // Overlong encoding of '/'.
  EXPECT_CORRUPT(HandFile("{\"__metadata__\":{\"k\":\"\xc0\xaf\"}}"),
                 "invalid UTF-8");
  // A lone surrogate written as an escape is not a valid code point either.
  EXPECT_CORRUPT(HandFile(R"({"__metadata__":{"k":"\ud800"}})"),
                 "header is not valid JSON", "surrogate");
  // The message itself stays printable ASCII.
  Status s = ParseBytes(HandFile("{\"q\xff\":1}"));
  for (char c : s.message()) {
    EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 &&
                static_cast<unsigned char>(c) < 0x7f)
        << s.message();
  }
}

TEST_F(SafetensorsValidationTest, EveryTruncationAndByteFlipIsHandled) {
  // Robustness sweep: no crash, and every truncation is rejected.
  const std::string h =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})";
  const Bytes good = HandFile(h, Zeros(16));
  ASSERT_TRUE(ParseBytes(good).ok());
  for (size_t n = 0; n < good.size(); ++n) {
    Bytes cut(good.begin(), good.begin() + n);
    EXPECT_FALSE(ParseBytes(cut).ok()) << n;
  }
  for (size_t i = 0; i < 8 + h.size(); ++i) {
    for (uint8_t x : {0x00, 0x01, 0x22, 0x2c, 0x30, 0x39, 0x5b, 0x7b, 0x7d,
                      0x80, 0xff}) {
      Bytes m = good;
      m[i] = x;
      Status s = ParseBytes(m);
      if (!s.ok()) {
        EXPECT_TRUE(s.code() == StatusCode::kCorrupt ||
                    s.code() == StatusCode::kUnimplemented)
            << s.ToString();
      }
    }
  }
}

// ------------------------------------------------------------------ writer --

TEST_F(SafetensorsWriteTest, WriterOutputIsByteExact) {
  const float x[2] = {1.5f, -2.0f};
  const int8_t y[3] = {1, -2, 3};
  const std::string path = Path("exact.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"x", ViewOf(x, DType::kF32, {2})},
                                {"y", ViewOf(y, DType::kI8, {3})}},
                               {{"k", "v"}})
                  .ok());
  std::string header =
      R"({"__metadata__":{"k":"v"},)"
      R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("y":{"dtype":"I8","shape":[3],"data_offsets":[8,11]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  Bytes data = F32Bytes({1.5f, -2.0f});
  data.insert(data.end(), {1, 0xfe, 3});
  EXPECT_EQ(ReadRaw(path), HandFile(header, data));
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"exact.safetensors"});

  Result<Bytes> enc = EncodeSafetensors({{"x", ViewOf(x, DType::kF32, {2})},
                                         {"y", ViewOf(y, DType::kI8, {3})}},
                                        {{"k", "v"}});
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc.value(), HandFile(header, data));
}

TEST_F(SafetensorsWriteTest, WriterOutputFollowsTheFormatRules) {
  // Parse the writer's output with the format rules directly (not our reader).
  const uint8_t a[5] = {1, 2, 3, 4, 5};
  const double b[2] = {0.25, 8.0};
  const uint16_t c[3] = {1, 2, 3};
  const std::string path = Path("rules.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"a", ViewOf(a, DType::kU8, {5})},
                                {"b", ViewOf(b, DType::kF64, {2, 1})},
                                {"c", ViewOf(c, DType::kF16, {3})}},
                               {{"meta", "data"}})
                  .ok());
  const Bytes f = ReadRaw(path);
  ASSERT_GE(f.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{f[i]} << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_LE(8 + n, f.size());
  const std::string header(f.begin() + 8, f.begin() + 8 + n);
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');  // only spaces after the object
  const nlohmann::json j = nlohmann::json::parse(header);
  const size_t data_size = f.size() - 8 - n;
  EXPECT_EQ(j["__metadata__"], (nlohmann::json{{"meta", "data"}}));
  EXPECT_EQ(j["b"]["dtype"], "F64");
  EXPECT_EQ(j["b"]["shape"], (nlohmann::json{2, 1}));
  // Data laid out by decreasing element size: b (8), c (2), a (1).
  EXPECT_EQ(j["b"]["data_offsets"], (nlohmann::json{0, 16}));
  EXPECT_EQ(j["c"]["data_offsets"], (nlohmann::json{16, 22}));
  EXPECT_EQ(j["a"]["data_offsets"], (nlohmann::json{22, 27}));
  EXPECT_EQ(data_size, 27u);
  double b0;
  std::memcpy(&b0, f.data() + 8 + n + 8, 8);
  EXPECT_EQ(b0, 8.0);
  EXPECT_EQ(f[8 + n + 22 + 4], 5);

  // Header order is the caller's order; mapped views are naturally aligned.
  Result<SafetensorsFile> r = SafetensorsFile::Open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->Get("b")->data) % 8, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->Get("c")->data) % 2, 0u);
}

// Fills a tensor's bytes with a pattern that differs per dtype and index and
// is a valid value for every dtype (BOOL gets 0/1).
Tensor PatternTensor(DType dt, const Shape& shape, int seed) {
  Tensor t = Tensor::Zeros(dt, shape).value();
  uint8_t* p = t.data<uint8_t>();
  for (size_t i = 0; i < t.nbytes(); ++i) {
    p[i] = dt == DType::kBool ? static_cast<uint8_t>((i + seed) % 2)
                              : static_cast<uint8_t>(i * 37 + seed * 11 + 1);
  }
  return t;
}

TEST_F(SafetensorsWriteTest, RoundTripEveryDTypeRankAndStride) {
  const DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16,
                        DType::kF64, DType::kI64, DType::kI32,
                        DType::kI8,  DType::kU8,  DType::kBool};
  std::vector<Tensor> storage;
  std::vector<std::pair<std::string, TensorView>> items;
  int seed = 0;
  for (DType dt : kAll) {
    const std::string n = DTypeName(dt);
    storage.push_back(PatternTensor(dt, {}, ++seed));
    items.push_back({n + "_r0", storage.back().view()});
    storage.push_back(PatternTensor(dt, {5}, ++seed));
    items.push_back({n + "_r1", storage.back().view()});
    storage.push_back(PatternTensor(dt, {2, 3, 4, 5}, ++seed));
    const TensorView base = storage.back().view();
    items.push_back({n + "_r4", base});
    // Permuted (non-contiguous) view.
    items.push_back({n + "_perm", base.Permuted({0, 2, 1, 3})});
    items.push_back({n + "_perm_inner", base.Permuted({3, 1, 2, 0})});
    // Every other row of the last dim (stride 2 on the inner axis).
    TensorView step = base;
    step.shape[3] = 3;
    step.strides[3] = 2;
    items.push_back({n + "_step", step});
    // Broadcast (stride 0) view.
    storage.push_back(PatternTensor(dt, {3}, ++seed));
    items.push_back({n + "_bcast",
                     MakeStridedView(storage.back().view().data, dt, {4, 3},
                                     {0, 1})});
    storage.push_back(PatternTensor(dt, {0, 7}, ++seed));
    items.push_back({n + "_empty", storage.back().view()});
  }
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"empty", ""}, {"unicode", "\xce\xbb \xe2\x9c\x93"},
      {"quote\"and\\", "line\nbreak\t"}};
  const std::string path = Path("all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, items, meta).ok());

  Result<SafetensorsFile> r = SafetensorsFile::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->metadata(), meta);
  std::vector<std::string> want_names;
  for (const auto& it : items) want_names.push_back(it.first);
  EXPECT_EQ(r->names(), want_names);
  for (const auto& [name, v] : items) {
    SCOPED_TRACE(name);
    Result<TensorView> got = r->Get(name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->dtype, v.dtype);
    EXPECT_EQ(got->rank, v.rank);
    EXPECT_EQ(got->shape_string(), v.shape_string());
    EXPECT_TRUE(got->is_contiguous());
    Tensor want = Tensor::FromView(v).value();  // row-major gather
    ASSERT_EQ(r->Find(name)->nbytes(), static_cast<int64_t>(want.nbytes()));
    EXPECT_EQ(0, std::memcmp(got->data, want.data<void>(), want.nbytes()));
    Result<Tensor> copy = r->Copy(name);
    ASSERT_TRUE(copy.ok());
    EXPECT_EQ(0, std::memcmp(copy->data<void>(), want.data<void>(),
                             want.nbytes()));
  }
  // Spot-check a permuted element through typed loads.
  const TensorView src = items[3].second;  // F32_perm
  const TensorView got = r->Get("F32_perm").value();
  EXPECT_EQ(got.load(got.offset(1, 2, 1, 4)), src.load(src.offset(1, 2, 1, 4)));
}

TEST_F(SafetensorsWriteTest, OverwritesExistingFile) {
  const float x[1] = {1};
  const std::string path = Path("o.safetensors");
  WriteRaw(path, Bytes(1000, 0xaa));
  ASSERT_TRUE(
      WriteSafetensors(path, {{"x", ViewOf(x, DType::kF32, {1})}}).ok());
  Result<SafetensorsFile> r = SafetensorsFile::Open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Get("x")->load(0), 1.0);
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"o.safetensors"});
}

TEST_F(SafetensorsWriteTest, InvalidInputsRejectedBeforeAnyFileIsCreated) {
  const float x[2] = {1, 2};
  const TensorView v = ViewOf(x, DType::kF32, {2});
  const std::string path = Path("bad.safetensors");
  auto expect_bad = [&](const std::vector<std::pair<std::string, TensorView>>& t,
                        const std::map<std::string, std::string>& m,
                        const std::string& part) {
    EXPECT_TRUE(HasError(WriteSafetensors(path, t, m),
                         StatusCode::kInvalidArgument, {path, part}));
    EXPECT_TRUE(HasError(EncodeSafetensors(t, m).status(),
                         StatusCode::kInvalidArgument, {part}));
    EXPECT_TRUE(DirEntries().empty());
  };
  expect_bad({{"a", v}, {"a", v}}, {}, "duplicate tensor name 'a'");
  expect_bad({{"__metadata__", v}}, {}, "reserved");
  expect_bad({{"a", TensorView{}}}, {}, "absent");
  expect_bad({{"a", MakeView(nullptr, DType::kF32, {2})}}, {}, "null data");
  expect_bad({{"a", MakeView(const_cast<float*>(x), DType::kF32, {-1})}}, {},
             "negative dimension");
  expect_bad({{"a\xff", v}}, {}, "not valid UTF-8");
  expect_bad({{"a", v}}, {{"k", "\xc3"}}, "not valid UTF-8");
  expect_bad({{"a", v}}, {{"\xed\xa0\x80", "v"}}, "not valid UTF-8");
  TensorView huge = v;
  huge.rank = 2;
  huge.shape = {int64_t{1} << 40, int64_t{1} << 40, 0, 0};
  expect_bad({{"a", huge}}, {}, "overflows");

  // A failed write leaves an existing file untouched.
  const std::string keep = Path("keep.safetensors");
  WriteRaw(keep, {1, 2, 3});
  EXPECT_FALSE(WriteSafetensors(keep, {{"a", v}, {"a", v}}).ok());
  EXPECT_EQ(ReadRaw(keep), (Bytes{1, 2, 3}));
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"keep.safetensors"});
}

TEST_F(SafetensorsWriteTest, UnwritableLocationsAreIoErrors) {
  const float x[1] = {1};
  const std::vector<std::pair<std::string, TensorView>> t = {
      {"x", ViewOf(x, DType::kF32, {1})}};
  // Parent directory does not exist.
  const std::string missing = Path("no/such/dir/out.safetensors");
  EXPECT_TRUE(HasError(WriteSafetensors(missing, t), StatusCode::kIoError,
                       {missing}));
  // Parent is a regular file.
  WriteRaw(Path("plain"), {0});
  const std::string under_file = Path("plain/out.safetensors");
  EXPECT_TRUE(HasError(WriteSafetensors(under_file, t), StatusCode::kIoError,
                       {under_file, "not a directory"}));
  // A read-only location even for root.
  const std::string proc = "/proc/attnflow_st_test.safetensors";
  EXPECT_TRUE(HasError(WriteSafetensors(proc, t), StatusCode::kIoError, {proc}));
  EXPECT_NE(::access(proc.c_str(), F_OK), 0);
  // The path is a directory.
  std::filesystem::create_directory(Path("d"));
  EXPECT_TRUE(HasError(WriteSafetensors(Path("d"), t), StatusCode::kIoError,
                       {Path("d"), "is a directory"}));
  EXPECT_TRUE(HasError(WriteSafetensors(Path("d") + "/", t),
                       StatusCode::kIoError, {"directory"}));
  EXPECT_EQ(DirEntries(), (std::vector<std::string>{"d", "plain"}));
  EXPECT_TRUE(std::filesystem::is_empty(Path("d")));
}

// ------------------------------------------------------------- file_util --

TEST_F(SafetensorsFileUtilTest, WriteFileAtomicWritesAndReads) {
  const std::string path = Path("a.txt");
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view("hello")).ok());
  Result<std::string> s = ReadFileString(path);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value(), "hello");
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view("")).ok());
  EXPECT_EQ(ReadFileString(path).value(), "");
  // Relative path (no directory component) works too.
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(dir_);
  Status rel = WriteFileAtomic("rel.txt", std::string_view("r"));
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(rel.ok()) << rel.ToString();
  EXPECT_EQ(ReadFileString(Path("rel.txt")).value(), "r");
  EXPECT_EQ(DirEntries(), (std::vector<std::string>{"a.txt", "rel.txt"}));
}

TEST_F(SafetensorsFileUtilTest, FailingWriterLeavesNothingBehind) {
  const std::string path = Path("f.bin");
  Status s = WriteFileAtomic(path, [](std::FILE* f) -> Status {
    std::fputs("partial", f);
    return IoError("simulated failure");
  });
  EXPECT_TRUE(HasError(s, StatusCode::kIoError, {"simulated failure"}));
  EXPECT_TRUE(DirEntries().empty());

  // Existing content survives a failed rewrite.
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view("old")).ok());
  s = WriteFileAtomic(path, [](std::FILE* f) -> Status {
    std::fputs("new", f);
    return Corrupt("nope");
  });
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(ReadFileString(path).value(), "old");
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"f.bin"});

  // A throwing writer is contained.
  s = WriteFileAtomic(path, [](std::FILE* f) -> Status {
    std::fputs("x", f);
    throw std::runtime_error("boom");
  });
  EXPECT_TRUE(HasError(s, StatusCode::kInternal, {"boom"}));
  EXPECT_EQ(ReadFileString(path).value(), "old");
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"f.bin"});
}

TEST_F(SafetensorsFileUtilTest, PreservesModeOfReplacedFile) {
  const std::string path = Path("m.bin");
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view("1")).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view("2")).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST_F(SafetensorsFileUtilTest, ErrorsNameThePath) {
  const std::string missing = Path("x/y.bin");
  EXPECT_TRUE(HasError(WriteFileAtomic(missing, std::string_view("1")),
                       StatusCode::kIoError, {missing}));
  EXPECT_TRUE(HasError(WriteFileAtomic(dir_, std::string_view("1")),
                       StatusCode::kIoError, {dir_, "directory"}));
  EXPECT_TRUE(HasError(WriteFileAtomic("", std::string_view("1")),
                       StatusCode::kIoError, {"empty path"}));
  EXPECT_TRUE(HasError(ReadFileBytes(missing).status(), StatusCode::kIoError,
                       {missing}));
  EXPECT_TRUE(HasError(ReadFileBytes(dir_).status(), StatusCode::kIoError,
                       {dir_, "directory"}));
  // /proc files report size 0 but have content: read until EOF.
  Result<std::string> st = ReadFileString("/proc/self/status");
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st.value().find("Name:"), std::string::npos);
}

}  // namespace
}  // namespace attnflow
