// gguf.h (fuzz harness) — the GGUF reader (and the BPE tokenizer built from
// its metadata) on arbitrary bytes.
//
// Properties beyond "no crash, no sanitizer report, no escaping exception":
//  * a rejected file gives kCorrupt / kUnimplemented / kResourceExhausted and
//    a message that starts with "gguf: fuzz.gguf: ";
//  * an accepted file satisfies attnflow/gguf.h's invariants, re-checked
//    here: version 2 or 3, power-of-two alignment, unique non-empty UTF-8
//    keys, every key found by Find, 1..4 dims with the product in numel,
//    nbytes = row bytes x rows, aligned offsets, ranges inside the file, no
//    overlapping non-empty tensors, unique names;
//  * every typed accessor on every key returns a value or an error;
//  * Dequantize gives the tensor's shape and, element for element, the value
//    of the ggml block formula computed here independently (F32 bit copy,
//    F16/BF16 exact, Q8_0 d*q, Q4_0 d*(q-8), Q4_1 fma(d, q, m));
//  * BpeTokenizer::FromGguf accepts or rejects the metadata with a Status; an
//    accepted tokenizer encodes a few texts into in-range ids and decodes
//    them back to the same bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "../common/fuzz_common.h"
#include "bpe.h"  // ByteSymbol (GPT-2 byte alphabet)
#include "attnflow/gguf.h"
#include "model/bpe/bpe_tokenizer.h"

namespace attnflow_fuzz {
namespace gguf_detail {

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return attnflow::F16ToF32(h);
}

// Element `e` of a tensor whose bytes start at `src`, by the ggml formulas.
inline float Expected(attnflow::GgmlType t, const uint8_t* src, int64_t row_bytes,
                      int64_t ne0, int64_t e) {
  using attnflow::GgmlType;
  const int64_t r = e / ne0, c = e % ne0;
  const uint8_t* row = src + r * row_bytes;
  switch (t) {
    case GgmlType::kF32: { float f; std::memcpy(&f, row + 4 * c, 4); return f; }
    case GgmlType::kF16: return Half(row + 2 * c);
    case GgmlType::kBF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * c, 2);
      return attnflow::BF16ToF32(h);
    }
    case GgmlType::kQ8_0: {
      const uint8_t* b = row + (c / 32) * 34;
      return Half(b) * static_cast<float>(static_cast<int8_t>(b[2 + c % 32]));
    }
    case GgmlType::kQ4_0: {
      const uint8_t* b = row + (c / 32) * 18;
      const int j = static_cast<int>(c % 32);
      const int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
      return Half(b) * static_cast<float>(q - 8);
    }
    case GgmlType::kQ4_1: {
      const uint8_t* b = row + (c / 32) * 20;
      const int j = static_cast<int>(c % 32);
      const int q = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
      return std::fma(Half(b), static_cast<float>(q), Half(b + 2));
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      // d (f16) [m (f16)] qh (u32: the 5th bits) qs[16] (nibbles of elements j, j + 16).
      const bool affine = t == GgmlType::kQ5_1;
      const uint8_t* b = row + (c / 32) * (affine ? 24 : 22);
      const uint8_t* qhp = b + (affine ? 4 : 2);
      uint32_t qh;
      std::memcpy(&qh, qhp, 4);
      const int j = static_cast<int>(c % 32);
      const int lo = j < 16 ? (qhp[4 + j] & 15) : (qhp[4 + j - 16] >> 4);
      const int q = lo | static_cast<int>(((qh >> j) & 1u) << 4);
      return affine ? std::fma(Half(b), static_cast<float>(q), Half(b + 2))
                    : Half(b) * static_cast<float>(q - 16);
    }
    default:
      break;
  }
  return 0.0f;
}

// Types with a formula above; the K types (Q4_K, Q5_K, Q6_K) are checked
// against gguf-py in tests/io/gguf_quant_test.cc, here only that they
// dequantise without a fault.
inline bool HasFormula(attnflow::GgmlType t) {
  using attnflow::GgmlType;
  switch (t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
      return true;
    default:
      return false;
  }
}

inline bool SameFloat(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

}  // namespace gguf_detail

inline void FuzzGguf(const uint8_t* data, size_t size) {
  using namespace attnflow;
  const std::string label = "fuzz.gguf";
  Result<GgufFile> r = GgufFile::FromBuffer(std::vector<uint8_t>(data, data + size), label);
  if (!r.ok()) {
    const Status& st = r.status();
    FUZZ_CHECK(st.code() == StatusCode::kCorrupt || st.code() == StatusCode::kUnimplemented ||
                   st.code() == StatusCode::kResourceExhausted,
               "unexpected status " + st.ToString());
    FUZZ_CHECK(st.message().rfind("gguf: " + label + ": ", 0) == 0,
               "message does not name the file: " + st.message());
    return;
  }
  const GgufFile& f = r.value();
  FUZZ_CHECK(f.version() == 2 || f.version() == 3, "accepted version " + std::to_string(f.version()));
  FUZZ_CHECK(f.alignment() != 0 && (f.alignment() & (f.alignment() - 1)) == 0,
             "alignment not a power of two");
  FUZZ_CHECK(f.file_size() == size, "file_size differs from the input size");
  FUZZ_CHECK(f.data_offset() % f.alignment() == 0, "data section not aligned");

  std::vector<std::string> keys = f.keys();
  for (const auto& k : keys) {
    FUZZ_CHECK(!k.empty() && IsUtf8(k), "empty or non-UTF-8 key accepted");
    const GgufValue* v = f.Find(k);
    FUZZ_CHECK(v != nullptr, "key '" + k + "' listed but not found");
    if (v->type == GgufType::kString) {
      for (const auto& s : v->strings) FUZZ_CHECK(IsUtf8(s), "non-UTF-8 string accepted");
    }
    (void)f.GetString(k);
    (void)f.GetInt(k);
    (void)f.GetFloat(k);
    (void)f.GetBool(k);
    (void)f.GetStringArray(k);
    (void)f.GetIntArray(k);
  }
  std::sort(keys.begin(), keys.end());
  FUZZ_CHECK(std::adjacent_find(keys.begin(), keys.end()) == keys.end(), "duplicate keys accepted");
  FUZZ_CHECK(!f.GetInt("\x01no such key").ok(), "missing key found");

  // The data section may start past the end when every tensor is empty.
  const uint64_t data_size = f.data_offset() <= size ? size - f.data_offset() : 0;
  std::vector<std::string> names;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  int64_t dequantized = 0;
  for (const auto& t : f.tensors()) {
    FUZZ_CHECK(!t.name.empty() && IsUtf8(t.name), "empty or non-UTF-8 tensor name");
    FUZZ_CHECK(f.FindTensor(t.name) == &t, "tensor index broken");
    FUZZ_CHECK(t.ne.size() >= 1 && t.ne.size() <= static_cast<size_t>(kGgufMaxDims),
               "tensor rank outside 1..4");
    unsigned __int128 numel = 1;
    for (int64_t d : t.ne) {
      FUZZ_CHECK(d >= 0, "negative dimension accepted");
      numel *= static_cast<unsigned __int128>(d);
      if (numel > static_cast<unsigned __int128>(INT64_MAX)) numel = static_cast<unsigned __int128>(INT64_MAX) + 1;
    }
    FUZZ_CHECK(numel == static_cast<unsigned __int128>(t.numel), "numel differs from the product of ne");
    FUZZ_CHECK(t.ne[0] % GgmlBlockSize(t.type) == 0, "ne[0] not a multiple of the block size");
    int64_t row_bytes = 0;
    FUZZ_CHECK(GgmlRowBytes(t.type, t.ne[0], &row_bytes), "row bytes overflow on an accepted tensor");
    // rows = product of ne[1..], computed independently of
    // GgufTensorInfo::rows() (which once divided by ne[0] == 0; regression
    // inputs tests/regress/gguf/ne0_zero_*).
    unsigned __int128 rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= static_cast<unsigned __int128>(t.ne[d]);
    FUZZ_CHECK(t.ne[0] == 0 ? t.nbytes == 0
                            : static_cast<unsigned __int128>(row_bytes) * rows == t.nbytes,
               "nbytes differs from row bytes x rows for '" + t.name + "'");
    FUZZ_CHECK(t.offset % f.alignment() == 0, "unaligned tensor offset accepted");
    FUZZ_CHECK(t.offset <= data_size && t.nbytes <= data_size - t.offset,
               "tensor '" + t.name + "' extends past the end of the file");
    names.push_back(t.name);
    if (t.nbytes > 0) ranges.emplace_back(t.offset, t.offset + t.nbytes);

    if (dequantized + t.numel > (int64_t{1} << 22)) continue;
    dequantized += t.numel;
    Result<Tensor> dq = f.Dequantize(t.name);
    FUZZ_CHECK(dq.ok(), "Dequantize failed on an accepted tensor: " + dq.status().ToString());
    FUZZ_CHECK(dq->shape() == t.shape(), "Dequantize shape differs");
    const float* out = dq->data<float>();
    if (!gguf_detail::HasFormula(t.type)) continue;
    for (int64_t e = 0; e < t.numel; ++e) {
      const float want = gguf_detail::Expected(t.type, f.TensorData(t), row_bytes, t.ne[0], e);
      FUZZ_CHECK(gguf_detail::SameFloat(out[e], want),
                 "dequantized element " + std::to_string(e) + " of '" + t.name + "' (" +
                     GgmlTypeName(static_cast<uint32_t>(t.type)) + ") is " +
                     std::to_string(out[e]) + ", block formula gives " + std::to_string(want));
    }
  }
  std::sort(names.begin(), names.end());
  FUZZ_CHECK(std::adjacent_find(names.begin(), names.end()) == names.end(),
             "duplicate tensor names accepted");
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    FUZZ_CHECK(ranges[i - 1].second <= ranges[i].first, "overlapping tensors accepted");
  }

  // The tokenizer from the same metadata.
  Result<std::unique_ptr<bpe::BpeTokenizer>> tok = bpe::BpeTokenizer::FromGguf(f);
  if (!tok.ok()) return;
  const bpe::BpeTokenizer& t = *tok.value();
  // Bytes without a symbol token are dropped (HF behaviour, bpe_tokenizer.h),
  // so the round trip is lossless only with a complete byte alphabet.
  bool complete = false;
  if (Result<const std::vector<std::string>*> toks = f.GetStringArray("tokenizer.ggml.tokens"); toks.ok()) {
    std::set<std::string> have((*toks)->begin(), (*toks)->end());
    complete = true;
    for (int b = 0; b < 256 && complete; ++b) complete = have.count(bpe_detail::ByteSymbol(b)) != 0;
  }
  static const char* kTexts[] = {"Hello world, it's 2024!", "  caf\xc3\xa9 \xe4\xb8\xad\xf0\x9f\x98\x80\n",
                                 "", "<|im_start|>user\nhi<|im_end|>"};
  for (const char* text : kTexts) {
    Result<std::vector<int32_t>> ids = t.Encode(text, false);
    FUZZ_CHECK(ids.ok(), "Encode failed: " + ids.status().ToString());
    for (int32_t id : ids.value()) {
      FUZZ_CHECK(id >= 0 && id < t.VocabSize(), "id out of range");
    }
    Result<std::string> back = t.Decode(ids.value(), false);
    FUZZ_CHECK(back.ok(), "Decode failed: " + back.status().ToString());
    // Byte-level BPE is lossless, unless the file marks a token that BPE
    // itself produces (e.g. the byte symbol of '\n') as CONTROL: Decode then
    // prints its literal text (see docs/errors.md, note on bpe). Checked only
    // when no produced id is special.
    bool any_special = false;
    for (int32_t id : ids.value()) any_special = any_special || t.IsSpecial(id);
    if (complete && !any_special) FUZZ_CHECK(back.value() == text, "Decode(Encode(text)) != text");
  }
}

ATTNFLOW_FUZZ_REGISTER(gguf, FuzzGguf);

}  // namespace attnflow_fuzz
