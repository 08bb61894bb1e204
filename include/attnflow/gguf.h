// attnflow/gguf.h — strict, memory-mapped reader for GGUF v2/v3 files (the
// llama.cpp model format) and dequantisation of its tensor types.
//
// Format (little-endian): magic "GGUF", u32 version, u64 tensor_count,
// u64 kv_count, kv_count metadata entries (string key, u32 value type,
// value), tensor_count tensor infos (string name, u32 n_dims, n_dims x u64
// ne (innermost first), u32 ggml type, u64 offset relative to the data
// section), padding up to `general.alignment` (default 32), then the data
// section. Strings are u64 length + bytes (no terminator). Arrays are u32
// element type + u64 count + elements. See docs/models-smollm2.md.
//
// Invariants of an open GgufFile (every rule is checked before use; the file
// comes from outside):
//  * Every length, count and offset was checked against the bytes that remain
//    (no allocation is sized by an unchecked count; counts that would overflow
//    are rejected), strings are valid UTF-8, keys and tensor names are unique
//    and non-empty, arrays nest at most kGgufMaxArrayDepth deep.
//  * general.alignment, when present, is a u32 power of two of at most
//    kGgufMaxAlignment.
//  * Each tensor has 1..4 dims, each >= 0 with an overflow-checked product,
//    a supported type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K;
//    other known ggml types
//    give kUnimplemented, unknown ones kCorrupt), ne[0] a multiple of the
//    type's block size, an aligned offset, a byte range inside the data
//    section, and no two non-empty tensors overlap.
//  * The mapping is read-only (PROT_READ, MAP_PRIVATE) and lives as long as
//    the GgufFile (moves keep it alive in the destination).
//  * No exception escapes; errors read "gguf: <path>: <field>: <what>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow {

// Metadata value types (gguf_type).
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6,
  kBool = 7, kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* GgufTypeName(GgufType t);  // "u32", "string", "array", ...

// Tensor types (ggml_type). Only these are supported; the numbers are the
// file's.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
  kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30,
};
// True for the numbers of GgmlType (the types attnflow reads and computes
// with); block layouts are ggml's, see src/io/gguf_quants.cc.
bool GgmlTypeSupported(uint32_t type);
// "F32", "Q4_1", ... also for known-but-unsupported numbers ("Q4_K"); "?"
// for unknown ones.
const char* GgmlTypeName(uint32_t type);
// Elements per block (1, 32, or 256 for the K-quants) and bytes per block.
int64_t GgmlBlockSize(GgmlType t);
int64_t GgmlBlockBytes(GgmlType t);
// Bytes of a row of n elements (n must be a multiple of the block size);
// false on overflow or a bad n.
bool GgmlRowBytes(GgmlType t, int64_t n, int64_t* bytes);

constexpr int kGgufMaxArrayDepth = 4;
constexpr int kGgufMaxDims = 4;
constexpr uint32_t kGgufDefaultAlignment = 32;
// Largest general.alignment read or written: the largest page size in use
// (64 KiB on some arm64 systems); ggml writes 32. Every tensor is padded to
// the alignment, so a larger one only inflates files (a 161-byte file asking
// for 2^31 would make a 2 GiB copy).
constexpr uint32_t kGgufMaxAlignment = 65536;

// One metadata value. Scalars are arrays of length 1 with is_array=false.
// Integer types (and bool) live in `ints` (U64 as its bit pattern), F32/F64 in
// `floats`, strings in `strings`, nested arrays in `arrays`.
struct GgufValue {
  GgufType type = GgufType::kU8;  // element type for arrays
  bool is_array = false;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;
  size_t size() const;  // element count
  bool is_integer() const;  // u8..i64 and bool
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // innermost (contiguous) dim first, as in ggml
  uint64_t offset = 0;      // relative to the data section
  uint64_t nbytes = 0;
  int64_t numel = 0;
  int64_t rows() const { return ne.empty() || ne[0] == 0 ? 0 : numel / ne[0]; }
  // Row-major attnflow shape (ne reversed): ne [576, 49152] -> [49152, 576].
  Shape shape() const { return Shape(ne.rbegin(), ne.rend()); }
};

class GgufFile {
 public:
  // kIoError: cannot open/stat/map or not a regular file. kCorrupt: malformed
  // content. kUnimplemented: valid but unsupported (version 1, big-endian,
  // known tensor types other than the supported ones).
  // The mapping is guarded against truncation (see FileBytes).
  static Result<GgufFile> Open(const std::string& path);
  // Validates an in-memory image (tests, fuzzing); `label` names it.
  static Result<GgufFile> FromBuffer(std::vector<uint8_t> bytes, std::string label = "<buffer>");
  // Move-only (FileBytes); a move keeps TensorData() pointers valid.

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  // Metadata keys in file order.
  const std::vector<std::string>& keys() const { return key_order_; }
  const GgufValue* Find(std::string_view key) const;
  // Typed accessors; errors name the file and key (missing key, wrong type,
  // value out of range).
  Result<std::string> GetString(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;  // any integer type
  Result<double> GetFloat(std::string_view key) const;  // F32 / F64
  Result<bool> GetBool(std::string_view key) const;
  Result<const std::vector<std::string>*> GetStringArray(
      std::string_view key) const;
  Result<const std::vector<int64_t>*> GetIntArray(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // Start of a tensor's bytes inside the mapping (read-only memory).
  const uint8_t* TensorData(const GgufTensorInfo& t) const {
    return data_ + t.offset;
  }
  // The whole tensor dequantised to a row-major F32 Tensor (rank <= 4).
  Result<Tensor> Dequantize(std::string_view name) const;

 private:
  // Takes the image and its label, then validates it and fills the tables.
  Status Parse(FileBytes src, std::string label);
  // The value at `key` if `fits` accepts it; else kInvalidArgument (missing)
  // or kCorrupt "expected <expected>, got <type>", naming the file and key.
  Result<const GgufValue*> FindTyped(std::string_view key, bool (*fits)(const GgufValue&),
                                     const char* expected) const;
  Status Err(StatusCode code, const std::string& field,
             const std::string& what) const;

  std::string path_;
  FileBytes src_;  // Open: the guarded mapping; FromBuffer: the owned copy
  const uint8_t* bytes_ = nullptr;
  uint64_t size_ = 0;
  const uint8_t* data_ = nullptr;
  uint64_t data_offset_ = 0;
  uint64_t data_size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  std::vector<std::string> key_order_;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Dequantises n consecutive elements (n a multiple of the block size) of a
// tensor of type `t` starting at a block boundary. Values equal gguf-py's
// dequantize() bit for bit: Q4_1 d*q+m (one rounding), Q4_0 d*(q-8), Q8_0
// d*q, Q5_0 d*(q-16), Q5_1 d*q+m, Q4_K/Q5_K (d*sc)*q - dmin*m (the products
// are exact, one rounding), Q6_K (d*sc)*q (one rounding), F16/BF16 exact.
// (src/io/gguf_quants.cc)
Status DequantizeRow(float* dst, const void* src, GgmlType t, int64_t n);

// Quantises n floats (n a multiple of the block size) into `dst` (row bytes
// from GgmlRowBytes). Q8_0 Q4_0 Q4_1 Q5_0 Q5_1: gguf-py's quantize() bit for
// bit (for Q8_0 also ggml's quantize_row_q8_0_ref). Q4_K Q5_K Q6_K: the
// semantics of ggml's reference quantizers without an importance matrix
// (quantize_row_q{4,5,6}_K_ref: make_qkx2_quants / make_qx_quants), which is
// what llama.cpp's quantize tool writes when no imatrix is given. F32, F16
// and BF16 round to nearest even. (src/io/gguf_quants.cc)
Status QuantizeRow(void* dst, const float* src, GgmlType t, int64_t n);

// ---- streaming writer and quantisation of whole files (gguf_writer.cc) ------

// One tensor of a file being written: `fill` writes its nbytes bytes (the
// row bytes of `type` times the rows of `ne`) into dst.
struct GgufOutTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // innermost first, as in ggml
  std::function<Status(uint8_t* dst, uint64_t nbytes)> fill;
};

// Writes a GGUF v3 file atomically (WriteFileAtomic: nothing at `path` on
// failure): the metadata in the given order, the tensor infos, then each
// tensor's data at `alignment`, one tensor in memory at a time. Checks names
// (unique, 1..63 bytes), dims (1..4, ne[0] a multiple of the block size),
// value/type consistency and the alignment (a power of two of at most
// kGgufMaxAlignment; a "general.alignment" entry must equal it); errors name
// the key or tensor.
Status WriteGguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& kv,
                 const std::vector<GgufOutTensor>& tensors, uint32_t alignment = kGgufDefaultAlignment);

// llama.cpp's file types (general.file_type) that `attnflow quantize` makes.
enum class QuantMix : uint32_t { kQ4_0 = 2, kQ8_0 = 7, kQ4_K_M = 15, kQ5_K_M = 17, kQ6_K = 18 };
// "q4_k_m" -> kQ4_K_M, ...; false for other names.
bool ParseQuantMix(std::string_view name, QuantMix* mix);

// The type llama.cpp's quantize tool (no imatrix, no overrides) gives each
// tensor for `mix` (docs/quantize.md): `names`/`ne`/`types` are the model's
// tensors in file order; returns one type per tensor, or an error for a
// shape no rule covers (ne[0] not a multiple of 32 for Q8_0/Q4_0).
Result<std::vector<GgmlType>> ChooseQuantTypes(QuantMix mix, const std::vector<std::string>& names,
                                               const std::vector<std::vector<int64_t>>& ne,
                                               const std::vector<GgmlType>& types);

struct QuantizeStats {
  int64_t tensors = 0, requantized = 0, copied = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  std::map<std::string, int64_t> type_counts;  // "Q4_K" -> tensors written as Q4_K
};
// Reads `in`, chooses each tensor's type with ChooseQuantTypes, copies
// tensors already of that type byte for byte, dequantises the others to F32
// (DequantizeRow) and quantises them (QuantizeRow), rows split over
// `threads` workers (<= 0: hardware concurrency; the bytes do not depend on
// the count), and writes `out` with general.file_type = mix,
// general.quantization_version = 2 and the default alignment 32 (as
// llama.cpp's quantize; a general.alignment entry of the input is rewritten
// to 32). Refused before anything is written: `out` naming the same file as
// `in` (CheckOutputIsNotInput). Refused while converting, naming the tensor,
// the row and the value (nothing is written): a row that the target type
// cannot hold (every quantised type stores its scales as float16, so e.g.
// Q8_0 overflows above about 8.3e6 and Q4_0 above about 5.2e5; F16 above
// 65504) or that holds NaN or an infinity. A row with a weight beyond half
// the float16 range (the only rows whose scales can overflow) is read back
// and kept only if every value is finite and within half its largest
// weight. llama.cpp's quantize refuses the same rows ("quantized
// data validation failed": ggml_validate_row_data finds the inf/NaN scale).
Status QuantizeGguf(const std::string& in, const std::string& out, QuantMix mix, int threads,
                    QuantizeStats* stats);

// ---- writer (tests and tools) ----------------------------------------------
// Builds a GGUF v3 image in memory: metadata in the given order, tensors laid
// out at `alignment` with the given raw bytes. No validation beyond what is
// needed to write; the reader checks the result.
class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t alignment = kGgufDefaultAlignment)
      : alignment_(alignment) {}
  void AddU32(const std::string& key, uint32_t v);
  void AddI32(const std::string& key, int32_t v);
  void AddF32(const std::string& key, float v);
  void AddBool(const std::string& key, bool v);
  void AddString(const std::string& key, const std::string& v);
  void AddStringArray(const std::string& key, const std::vector<std::string>& v);
  void AddI32Array(const std::string& key, const std::vector<int32_t>& v);
  // Raw entry: key, type and already-encoded value bytes.
  void AddRaw(const std::string& key, GgufType type, std::vector<uint8_t> value);
  void AddTensor(const std::string& name, uint32_t ggml_type,
                 const std::vector<int64_t>& ne, std::vector<uint8_t> bytes);
  std::vector<uint8_t> Build() const;

 private:
  struct Kv {
    std::string key;
    GgufType type;
    std::vector<uint8_t> value;
  };
  struct T {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
  };
  uint32_t alignment_;
  std::vector<Kv> kvs_;
  std::vector<T> tensors_;
};

}  // namespace attnflow
