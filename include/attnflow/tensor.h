// attnflow/tensor.h — dtypes, non-owning strided tensor views, owning tensors.
//
// Invariants:
//  * rank is 0..4; shape[i] >= 0; strides are in ELEMENTS (not bytes) and may
//    be 0 (broadcast) or any non-negative value, so [B,L,H,D] storage is a
//    zero-copy view of logical [B,H,L,D] (see Permuted()).
//  * A TensorView never owns memory. A Tensor owns 64-byte aligned,
//    contiguous (row-major) storage and hands out views of it.
//  * Element counts and byte sizes are computed with overflow checks
//    (CheckedNumel / CheckedBytes) before any allocation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/status.h"

namespace attnflow {

// Open enum: new dtypes are appended, never renumbered.
enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI64, kI32, kI8, kU8, kBool };

size_t DTypeSize(DType t);
// Safetensors spelling: "F32", "F16", "BF16", "F64", "I64", "I32", "I8",
// "U8", "BOOL".
const char* DTypeName(DType t);
bool ParseDType(std::string_view name, DType* out);
inline bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 ||
         t == DType::kF64;
}

// ---- half precision (scalar, exact round-to-nearest-even) -----------------
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
inline float BF16ToF32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t F32ToBF16(float f);

constexpr int kMaxRank = 4;
using Shape = std::vector<int64_t>;

// "[2,8,63,64]"
std::string ShapeString(const int64_t* dims, int rank);
std::string ShapeString(const Shape& s);

// Product of dims with overflow detection; false on overflow or negative.
bool CheckedNumel(const int64_t* dims, int rank, int64_t* out);
bool CheckedBytes(const int64_t* dims, int rank, DType t, int64_t* out);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = -1;  // -1 = "no tensor" (optional argument absent)
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // elements

  bool empty_view() const { return rank < 0; }  // absent optional
  int64_t dim(int i) const { return shape[i]; }
  int64_t numel() const;
  bool is_contiguous() const;
  std::string shape_string() const { return ShapeString(shape.data(), rank); }
  std::string describe() const;  // "F32[2,8,63,64]"

  // Element offset of a multi-index (no bounds check).
  int64_t offset(int64_t i0, int64_t i1 = 0, int64_t i2 = 0,
                 int64_t i3 = 0) const {
    const int64_t idx[4] = {i0, i1, i2, i3};
    int64_t o = 0;
    for (int d = 0; d < rank; ++d) o += idx[d] * strides[d];
    return o;
  }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Reads any float/int element as double.
  double load(int64_t elem_offset) const;
  // Writes a double into F32/F64/F16/BF16 storage (rounding once).
  void store(int64_t elem_offset, double v) const;

  // Zero-copy reorder of dims: out.dim(i) = this->dim(perm[i]).
  TensorView Permuted(std::initializer_list<int> perm) const;
};

// Builds a view over existing memory; strides default to row-major.
TensorView MakeView(void* data, DType dtype, const Shape& shape);
TensorView MakeStridedView(void* data, DType dtype, const Shape& shape,
                           const Shape& strides);
template <typename T>
TensorView ViewOf(T* data, DType dtype, const Shape& shape) {
  return MakeView(const_cast<void*>(static_cast<const void*>(data)), dtype,
                  shape);
}

// Owning, 64-byte aligned, contiguous, zero-initialised storage.
class Tensor {
 public:
  Tensor() = default;
  // Allocates; returns an error (never throws/aborts) on overflow or OOM.
  static Result<Tensor> Zeros(DType dtype, const Shape& shape);
  static Result<Tensor> FromView(const TensorView& v);  // deep copy, any strides

  const TensorView& view() const { return view_; }
  DType dtype() const { return view_.dtype; }
  int rank() const { return view_.rank; }
  const Shape shape() const {
    return Shape(view_.shape.begin(), view_.shape.begin() + view_.rank);
  }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return bytes_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(view_.data);
  }
  bool defined() const { return view_.rank >= 0; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> mem_;
  size_t bytes_ = 0;
  TensorView view_;
};

// ---- allocation (hookable for fault-injection tests) ----------------------
// Returns nullptr on failure. All attnflow allocations of tensor storage and
// kernel scratch go through these.
void* AlignedAlloc(size_t bytes);
void AlignedFree(void* p);
// Test hook: when set, called before every AlignedAlloc; returning false makes
// that allocation fail. Pass nullptr to clear.
using AllocHook = bool (*)(size_t bytes);
void SetAllocHook(AllocHook hook);

}  // namespace attnflow
