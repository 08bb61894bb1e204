// attnflow/safetensors.h — strict reader (mmap) and atomic writer for the
// safetensors format.
//
// Format: u64 little-endian header length N, N bytes of UTF-8 JSON header
// (may be padded with trailing spaces), then the data buffer. The header maps
// tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data buffer) plus an optional "__metadata__" object of
// string -> string. See docs/safetensors.md for every validation rule.
//
// Invariants:
//  * An open SafetensorsFile has passed full validation: every tensor has a
//    supported dtype, its byte range lies inside the data buffer, matches
//    dtype size x product(shape) (overflow-checked), and no two tensors'
//    non-empty byte ranges overlap. Names are unique, valid UTF-8.
//  * The file is mapped read-only (PROT_READ, MAP_PRIVATE); the input file is
//    never modified. Views returned by Get() point into that mapping and stay
//    valid until the SafetensorsFile is destroyed or moved-from-and-destroyed
//    (moving keeps the mapping alive in the destination).
//  * No exception escapes; all failures are Status values whose message
//    starts with "safetensors: <path>: ".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow {

// Largest header accepted by the reader and produced by the writer (matches
// the reference implementation's limit).
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One header entry, as validated. `shape` may have any rank (the file may hold
// tensors of rank > 4 even though Get() can only hand out rank <= 4).
struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets relative to the start of the data buffer
  int64_t end = 0;
  int64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps and validates a file. kIoError: cannot open/stat/map, not a regular
  // file (e.g. a directory). kCorrupt: malformed content. kUnimplemented: a
  // valid safetensors dtype attnflow does not support (e.g. F8_E4M3, U16).
  // max_header_bytes: a caller that knows its files are small (golden cases)
  // refuses a larger header before parsing it.
  static Result<SafetensorsFile> Open(const std::string& path,
                                      uint64_t max_header_bytes = kSafetensorsMaxHeaderBytes);
  // Validates an in-memory file image (copied / moved in); `label` replaces
  // the path in error messages. Intended for tests and fuzzing.
  static Result<SafetensorsFile> FromBuffer(std::vector<uint8_t> bytes,
                                            std::string label = "<buffer>");
  static Result<SafetensorsFile> FromBuffer(const uint8_t* data, size_t size,
                                            std::string label = "<buffer>");

  // An empty file: no tensors, no metadata, path "". Lets SafetensorsFile be
  // a plain member of structs that hold views into it.
  SafetensorsFile() = default;
  // Moving transfers the mapping (views stay valid); the source becomes empty.
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();  // unmaps

  const std::string& path() const { return path_; }
  // "__metadata__" contents; empty if the header has none.
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // Tensor names in the order they appear in the header JSON (not sorted, not
  // data order).
  std::vector<std::string> names() const;
  // All entries, in header order.
  const std::vector<SafetensorsTensorInfo>& tensors() const {
    return tensors_;
  }
  bool Has(const std::string& name) const { return index_.count(name) != 0; }
  // nullptr when absent.
  const SafetensorsTensorInfo* Find(const std::string& name) const;

  // A zero-copy, row-major view into the mapping. The view's `data` is
  // const-cast from read-only memory: it must NEVER be written through (for
  // Open()ed files that faults, the mapping is PROT_READ). The pointer may be
  // unaligned for the dtype (safetensors does not guarantee alignment; files
  // written by WriteSafetensors are naturally aligned, see docs). Use Copy()
  // for aligned, writable storage. kInvalidArgument if `name` is absent,
  // kUnimplemented if the tensor's rank exceeds kMaxRank (4).
  Result<TensorView> Get(const std::string& name) const;
  // An owned, 64-byte aligned, contiguous copy of the tensor.
  Result<Tensor> Copy(const std::string& name) const;

  // Header JSON length N as stored in the file, and the data buffer size.
  uint64_t header_size() const { return header_size_; }
  size_t data_size() const { return data_size_; }

 private:
  // Takes the image and its label, validates it and fills the tables.
  Status Parse(FileBytes src, std::string label,
               uint64_t max_header_bytes = kSafetensorsMaxHeaderBytes);
  void Release();

  std::string path_;
  FileBytes src_;  // Open: the guarded mapping; FromBuffer: the owned copy
  const uint8_t* bytes_ = nullptr;  // whole file image
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data buffer (bytes_ + 8 + N)
  size_t data_size_ = 0;
  uint64_t header_size_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (any strides; stored row-major) and `metadata` to `path`
// atomically (via WriteFileAtomic: temp file + rename; nothing is left behind
// on failure). Header keys keep the given order ("__metadata__" first, omitted
// when empty); data is laid out by decreasing element size (stable), so that
// every tensor is naturally aligned relative to the file start; the header is
// space-padded to a multiple of 8 bytes.
// kInvalidArgument: absent view (rank < 0), null data with elements, negative
// dims, duplicate or "__metadata__" names, invalid UTF-8 in names/metadata,
// byte sizes that overflow, header over the size limit. kIoError: the file
// cannot be created or written (message names the path).
Status WriteSafetensors(
    const std::string& path,
    const std::vector<std::pair<std::string, TensorView>>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Same encoding into memory (for tests and FromBuffer round trips).
Result<std::vector<uint8_t>> EncodeSafetensors(
    const std::vector<std::pair<std::string, TensorView>>& tensors,
    const std::map<std::string, std::string>& metadata = {});

}  // namespace attnflow
