// gguf_quant_test.cc — GGUF (de)quantisation (src/io/gguf_quants.cc) and the
// GGUF writer against independent references:
//  * tests/data/quant/quant_refs.gguf (tools/quant/make_quant_refs.py, pinned
//    gguf-py 0.19.0 / numpy 2.4.6): random blocks of every type and their
//    gguf-py dequantisation (must match bit for bit); random rows and
//    gguf-py's quantisation for the types gguf-py implements (Q4_0 Q4_1 Q5_0
//    Q5_1 Q8_0: bytes must match exactly).
//  * K-quant quantisers (gguf-py has none): mathematical properties of ggml's
//    reference algorithm — every element whose quant is not clamped lies
//    within half a step of its value (the final nearest-rounding pass), zero
//    input gives zero blocks, and the error on Gaussian data stays under the
//    uniform-quantiser bound step/sqrt(12) with the step of the bit width.
//  * Real tensors: SmolLM2's weights quantised to every type by attnflow,
//    dequantised by gguf-py (tools/quant/gguf_py_dequant.py, run with the
//    project venv's python) must equal attnflow's dequantisation bit for bit.
//    Skipped (with the reason) when the model or gguf-py is not installed.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "attnflow/file_util.h"
#include "attnflow/gguf.h"
#include "attnflow/rng.h"
#include "gtest/gtest.h"
#include "util/smollm2_util.h"

namespace attnflow {
namespace {

const char* const kTypes[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"};

std::string RefsPath() { return std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/quant/quant_refs.gguf"; }

GgufFile OpenOrDie(const std::string& path) {
  Result<GgufFile> f = GgufFile::Open(path);
  if (!f.ok()) {
    ADD_FAILURE() << f.status().message();
    std::abort();
  }
  return std::move(f).value();
}

bool SameBits(const float* a, const float* b, int64_t n, int64_t* first) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, 4) != 0) {
      *first = i;
      return false;
    }
  }
  return true;
}

TEST(GgufQuant, DequantizeMatchesGgufPyBitForBit) {
  const GgufFile f = OpenOrDie(RefsPath());
  for (const char* name : kTypes) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* raw = f.FindTensor(std::string("deq.") + name + ".raw");
    ASSERT_NE(raw, nullptr);
    EXPECT_STREQ(GgmlTypeName(static_cast<uint32_t>(raw->type)), name);
    Result<Tensor> got = f.Dequantize(raw->name);
    Result<Tensor> want = f.Dequantize(std::string("deq.") + name + ".f32");
    ASSERT_TRUE(got.ok() && want.ok());
    ASSERT_EQ(got->numel(), want->numel());
    int64_t i = -1;
    EXPECT_TRUE(SameBits(got->data<float>(), want->data<float>(), got->numel(), &i))
        << "element " << i << ": attnflow " << got->data<float>()[i] << " gguf-py " << want->data<float>()[i];
  }
}

TEST(GgufQuant, QuantizeMatchesGgufPyBytes) {
  const GgufFile f = OpenOrDie(RefsPath());
  for (const char* name : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* in = f.FindTensor(std::string("q.") + name + ".in");
    const GgufTensorInfo* raw = f.FindTensor(std::string("q.") + name + ".raw");
    ASSERT_TRUE(in != nullptr && raw != nullptr);
    const int64_t cols = in->ne[0];
    int64_t row_bytes = 0;
    ASSERT_TRUE(GgmlRowBytes(raw->type, cols, &row_bytes));
    const float* x = reinterpret_cast<const float*>(f.TensorData(*in));
    std::vector<uint8_t> got(static_cast<size_t>(row_bytes * in->rows()));
    for (int64_t r = 0; r < in->rows(); ++r) {
      ASSERT_TRUE(QuantizeRow(got.data() + r * row_bytes, x + r * cols, raw->type, cols).ok());
    }
    ASSERT_EQ(got.size(), raw->nbytes);
    const uint8_t* want = f.TensorData(*raw);
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        ADD_FAILURE() << "byte " << i << " (block " << i / GgmlBlockBytes(raw->type) << "): attnflow "
                      << int(got[i]) << " gguf-py " << int(want[i]);
        break;
      }
    }
  }
}

// Decoded quant of element e of a K block and the block's step there
// (d*sc), from the ggml layout (independent of gguf_quants.cc's helpers).
struct KQuant {
  int q, qmax;
  float step;
};
KQuant KQuantAt(GgmlType t, const uint8_t* b, int e) {
  auto half = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return F16ToF32(h);
  };
  if (t == GgmlType::kQ6_K) {
    const int hf = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const int ql = (b[64 * hf + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF;
    const int qh = (b[128 + 32 * hf + l] >> (2 * k)) & 3;
    const int8_t sc = static_cast<int8_t>(b[192 + 8 * hf + l / 16 + 2 * k]);
    return {ql | (qh << 4), 63, std::fabs(half(b + 208) * sc)};
  }
  const bool five = t == GgmlType::kQ5_K;
  const int s = e / 32, l = e % 32, c = s / 2;
  const uint8_t* sc = b + 4;
  const int scale = s < 4 ? sc[s] & 63 : (sc[s + 4] & 0xF) | ((sc[s - 4] >> 6) << 4);
  const uint8_t* qs = b + (five ? 48 : 16);
  int q = (s % 2) ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
  if (five) q |= ((b[16 + l] >> s) & 1) << 4;
  return {q, five ? 31 : 15, half(b) * static_cast<float>(scale)};
}

TEST(GgufQuant, KQuantsRoundToNearestStepAndStayUnderUniformBound) {
  // Uniform-quantiser RMS error step/sqrt(12) with step = range/(levels-1);
  // for blocks of N(0,1) the per-(sub)block range is about 4.2 sigma (32
  // samples, Q4_K/Q5_K) and the symmetric Q6_K range 2*max|x| about 3.8
  // sigma (16 samples). Bounds below are those values plus 25%.
  struct Case {
    GgmlType t;
    double rms_bound;
  };
  for (Case c : {Case{GgmlType::kQ4_K, 1.25 * 4.2 / 15 / std::sqrt(12.0)},
                 Case{GgmlType::kQ5_K, 1.25 * 4.2 / 31 / std::sqrt(12.0)},
                 Case{GgmlType::kQ6_K, 1.25 * 3.8 / 63 / std::sqrt(12.0)}}) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(c.t)));
    const int64_t n = 256 * 64;
    Rng rng(7 + static_cast<uint64_t>(c.t));
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (auto& v : x) v = static_cast<float>(rng.Normal());
    int64_t bytes = 0;
    ASSERT_TRUE(GgmlRowBytes(c.t, n, &bytes));
    std::vector<uint8_t> q(static_cast<size_t>(bytes));
    ASSERT_TRUE(QuantizeRow(q.data(), x.data(), c.t, n).ok());
    ASSERT_TRUE(DequantizeRow(y.data(), q.data(), c.t, n).ok());
    double se = 0;
    int64_t interior = 0;
    for (int64_t e = 0; e < n; ++e) {
      const double err = double(x[e]) - y[e];
      se += err * err;
      const KQuant k = KQuantAt(c.t, q.data() + (e / 256) * GgmlBlockBytes(c.t), static_cast<int>(e % 256));
      if (k.q > 0 && k.q < k.qmax && k.step > 0) {
        ++interior;
        ASSERT_LE(std::fabs(err), 0.5 * k.step * (1 + 1e-5) + 1e-7) << "element " << e;
      }
    }
    EXPECT_GT(interior, n / 2);
    EXPECT_LE(std::sqrt(se / n), c.rms_bound);
  }
}

TEST(GgufQuant, ZerosQuantizeToZeroBlocksAndBadInputIsNamed) {
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(t)));
    const int64_t n = 512;
    std::vector<float> x(n, 0.0f), y(n, 1.0f);
    int64_t bytes = 0;
    ASSERT_TRUE(GgmlRowBytes(t, n, &bytes));
    std::vector<uint8_t> q(static_cast<size_t>(bytes), 0xAB);
    ASSERT_TRUE(QuantizeRow(q.data(), x.data(), t, n).ok());
    ASSERT_TRUE(DequantizeRow(y.data(), q.data(), t, n).ok());
    for (float v : y) ASSERT_EQ(v, 0.0f);
    x[300] = std::nanf("");
    Status st = QuantizeRow(q.data(), x.data(), t, n);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("element 300"), std::string::npos) << st.message();
    st = QuantizeRow(q.data(), x.data(), t, n - 1);
    EXPECT_NE(st.message().find("block size"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace attnflow

namespace attnflow {
namespace {

std::string VenvPython() {
  if (const char* v = std::getenv("ATTNFLOW_VENV"); v != nullptr && *v != 0) return std::string(v) + "/bin/python";
  return std::string(ATTNFLOW_SOURCE_DIR) + "/.cache/venv/bin/python";
}

TEST(GgufQuant, RealTensorsDequantizeLikeGgufPy) {
  const std::string model = testing::SmolLm2Path();
  if (model.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (tools/deps/smollm2.pip)";
  const std::string py = VenvPython();
  if (std::system((py + " -c 'import gguf' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << py << " cannot import gguf (tools/deps/gguf.pip)";
  }
  const GgufFile f = OpenOrDie(model);
  GgufBuilder b;
  // The file's own blocks (Q4_1 weights, Q8_0 embeddings), then a real
  // weight matrix quantised by attnflow to every type.
  const int64_t rows = 6;
  for (const char* name : {"blk.0.attn_q.weight", "token_embd.weight"}) {
    const GgufTensorInfo* t = f.FindTensor(name);
    ASSERT_NE(t, nullptr);
    int64_t rb = 0;
    ASSERT_TRUE(GgmlRowBytes(t->type, t->ne[0], &rb));
    const uint8_t* p = f.TensorData(*t);
    b.AddTensor(std::string("orig.") + name, static_cast<uint32_t>(t->type), {t->ne[0], rows},
                std::vector<uint8_t>(p, p + rb * rows));
  }
  const GgufTensorInfo* down = f.FindTensor("blk.3.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  const int64_t cols = down->ne[0];
  std::vector<float> x(static_cast<size_t>(cols * rows));
  int64_t in_rb = 0;
  ASSERT_TRUE(GgmlRowBytes(down->type, cols, &in_rb));
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_TRUE(DequantizeRow(x.data() + r * cols, f.TensorData(*down) + r * in_rb, down->type, cols).ok());
  for (const char* name : kTypes) {
    GgmlType t = GgmlType::kF32;
    for (uint32_t k = 0; k < 31; ++k)
      if (GgmlTypeSupported(k) && std::string(GgmlTypeName(k)) == name) t = static_cast<GgmlType>(k);
    int64_t rb = 0;
    ASSERT_TRUE(GgmlRowBytes(t, cols, &rb));
    std::vector<uint8_t> q(static_cast<size_t>(rb * rows));
    for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(QuantizeRow(q.data() + r * rb, x.data() + r * cols, t, cols).ok());
    b.AddTensor(std::string("down.") + name, static_cast<uint32_t>(t), {cols, rows}, std::move(q));
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("attnflow_quant_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string in = (dir / "in.gguf").string(), out = (dir / "out.gguf").string();
  {
    const std::vector<uint8_t> bytes = b.Build();
    ASSERT_TRUE(WriteFileAtomic(in, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())).ok());
  }
  const std::string cmd = py + " " + ATTNFLOW_SOURCE_DIR + "/tools/quant/gguf_py_dequant.py " + in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const GgufFile mine = OpenOrDie(in);
  const GgufFile ref = OpenOrDie(out);
  ASSERT_EQ(mine.tensors().size(), 2 + std::size(kTypes));
  for (const GgufTensorInfo& t : mine.tensors()) {
    SCOPED_TRACE(t.name);
    Result<Tensor> got = mine.Dequantize(t.name);
    Result<Tensor> want = ref.Dequantize(t.name);
    ASSERT_TRUE(got.ok() && want.ok());
    ASSERT_EQ(got->numel(), want->numel());
    int64_t i = -1;
    EXPECT_TRUE(SameBits(got->data<float>(), want->data<float>(), got->numel(), &i))
        << "element " << i << ": attnflow " << got->data<float>()[i] << " gguf-py " << want->data<float>()[i];
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnflow
