// tensor.cc — dtype helpers, half conversions, views and owning tensors.
// Invariant: every size computation is overflow-checked before allocation.
#include "attnflow/tensor.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <utility>

namespace attnflow {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF64: case DType::kI64: return 8;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

namespace {
constexpr std::pair<DType, const char*> kDTypeNames[] = {
    {DType::kF32, "F32"}, {DType::kF16, "F16"}, {DType::kBF16, "BF16"},
    {DType::kF64, "F64"}, {DType::kI64, "I64"}, {DType::kI32, "I32"},
    {DType::kI8, "I8"},   {DType::kU8, "U8"},   {DType::kBool, "BOOL"}};
}  // namespace

const char* DTypeName(DType t) {
  for (const auto& [d, name] : kDTypeNames)
    if (d == t) return name;
  return "?";
}

bool ParseDType(std::string_view name, DType* out) {
  for (const auto& [d, n] : kDTypeNames) {
    if (name == n) {
      *out = d;
      return true;
    }
  }
  return false;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or nan
    return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {                         // subnormal or zero in f16
    if (ax < 0x33000000u) return sign;            // < 2^-25 rounds to 0
    const uint32_t e = ax >> 23;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) ... number of bits to drop
    // value = mant * 2^(e-150); f16 subnormal unit = 2^-24 -> drop (126-e) bits
    const uint32_t drop = shift;
    uint32_t r = mant >> drop;
    const uint32_t rem = mant & ((1u << drop) - 1);
    const uint32_t half = 1u << (drop - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // normal: rebias exponent, round mantissa 23 -> 10 bits (RNE)
  uint32_t r = ax - 0x38000000u;  // exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

uint16_t F32ToBF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

std::string ShapeString(const int64_t* dims, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}
std::string ShapeString(const Shape& s) {
  return ShapeString(s.data(), static_cast<int>(s.size()));
}

namespace {
// A zero dimension makes a tensor empty whatever its other dims are, and
// their product may not fit int64 (a legal .npy shape (0, 10^13, 10^7), a
// GGUF tensor [4e11, 7e18, 0]: bugs 14 and 15). Every shape product below
// checks this first.
bool HasZeroDim(const int64_t* dims, int rank) {
  for (int i = 0; i < rank; ++i)
    if (dims[i] == 0) return true;
  return false;
}
}  // namespace

bool CheckedNumel(const int64_t* dims, int rank, int64_t* out) {
  for (int i = 0; i < rank; ++i)
    if (dims[i] < 0) return false;
  if (HasZeroDim(dims, rank)) {
    *out = 0;
    return true;
  }
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] != 0 && n > INT64_MAX / dims[i]) return false;
    n *= dims[i];
  }
  *out = n;
  return true;
}

bool CheckedBytes(const int64_t* dims, int rank, DType t, int64_t* out) {
  int64_t n;
  if (!CheckedNumel(dims, rank, &n)) return false;
  const int64_t es = static_cast<int64_t>(DTypeSize(t));
  if (n > INT64_MAX / es) return false;
  *out = n * es;
  return true;
}

int64_t TensorView::numel() const {
  if (rank < 0 || HasZeroDim(shape.data(), rank)) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  // An empty tensor addresses no element: trivially contiguous.
  if (HasZeroDim(shape.data(), rank)) return true;
  int64_t expect = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::string TensorView::describe() const {
  if (rank < 0) return "<absent>";
  return std::string(DTypeName(dtype)) + shape_string();
}

// Elements are read and written with memcpy: views from SafetensorsFile::Get
// may be unaligned (the format does not align data), and a typed pointer
// dereference of a misaligned address is undefined behaviour. Compilers turn
// these memcpys into plain loads/stores.
namespace {
template <typename T>
T LoadAs(const void* base, int64_t o) {
  T x;
  std::memcpy(&x, static_cast<const char*>(base) + o * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return x;
}
template <typename T>
void StoreAs(void* base, int64_t o, T x) {
  std::memcpy(static_cast<char*>(base) + o * static_cast<int64_t>(sizeof(T)), &x, sizeof(T));
}
}  // namespace

double TensorView::load(int64_t o) const {
  switch (dtype) {
    case DType::kF32: return LoadAs<float>(data, o);
    case DType::kF64: return LoadAs<double>(data, o);
    case DType::kF16: return F16ToF32(LoadAs<uint16_t>(data, o));
    case DType::kBF16: return BF16ToF32(LoadAs<uint16_t>(data, o));
    case DType::kI64: return static_cast<double>(LoadAs<int64_t>(data, o));
    case DType::kI32: return LoadAs<int32_t>(data, o);
    case DType::kI8: return LoadAs<int8_t>(data, o);
    case DType::kU8: return LoadAs<uint8_t>(data, o);
    case DType::kBool: return LoadAs<uint8_t>(data, o) ? 1.0 : 0.0;
  }
  return 0.0;
}

void TensorView::store(int64_t o, double v) const {
  switch (dtype) {
    case DType::kF32: StoreAs<float>(data, o, static_cast<float>(v)); break;
    case DType::kF64: StoreAs<double>(data, o, v); break;
    case DType::kF16: StoreAs<uint16_t>(data, o, F32ToF16(static_cast<float>(v))); break;
    case DType::kBF16: StoreAs<uint16_t>(data, o, F32ToBF16(static_cast<float>(v))); break;
    case DType::kI64: StoreAs<int64_t>(data, o, static_cast<int64_t>(v)); break;
    case DType::kI32: StoreAs<int32_t>(data, o, static_cast<int32_t>(v)); break;
    case DType::kI8: StoreAs<int8_t>(data, o, static_cast<int8_t>(v)); break;
    case DType::kU8: StoreAs<uint8_t>(data, o, static_cast<uint8_t>(v)); break;
    case DType::kBool: StoreAs<uint8_t>(data, o, static_cast<uint8_t>(v != 0.0)); break;
  }
}

TensorView TensorView::Permuted(std::initializer_list<int> perm) const {
  TensorView r = *this;
  int i = 0;
  for (int p : perm) {
    r.shape[i] = shape[p];
    r.strides[i] = strides[p];
    ++i;
  }
  return r;
}

TensorView MakeStridedView(void* data, DType dtype, const Shape& shape,
                           const Shape& strides) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  for (int i = 0; i < v.rank && i < kMaxRank; ++i) {
    v.shape[i] = shape[i];
    v.strides[i] = strides[i];
  }
  return v;
}

TensorView MakeView(void* data, DType dtype, const Shape& shape) {
  // Row-major strides. An empty tensor (some dim 0) addresses nothing, so its
  // strides are never used: they are computed with a zero factor in place of
  // the product, which cannot overflow even when the other dims are huge.
  Shape strides(shape.size(), 1);
  const bool empty = HasZeroDim(shape.data(), static_cast<int>(shape.size()));
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[i] = empty ? 0 : strides[i + 1] * shape[i + 1];
  return MakeStridedView(data, dtype, shape, strides);
}

namespace {
std::atomic<AllocHook> g_alloc_hook{nullptr};
}

void SetAllocHook(AllocHook hook) { g_alloc_hook.store(hook); }

void* AlignedAlloc(size_t bytes) {
  AllocHook hook = g_alloc_hook.load();
  if (hook != nullptr && !hook(bytes)) return nullptr;
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded < bytes) return nullptr;
  return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
}

void AlignedFree(void* p) { std::free(p); }

void Tensor::Free::operator()(void* p) const { AlignedFree(p); }

Result<Tensor> Tensor::Zeros(DType dtype, const Shape& shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return InvalidArgument("Tensor::Zeros: rank " + std::to_string(shape.size()) +
                           " > 4 for shape " + ShapeString(shape));
  }
  int64_t bytes;
  if (!CheckedBytes(shape.data(), static_cast<int>(shape.size()), dtype, &bytes)) {
    return ResourceExhausted("Tensor::Zeros: size of " +
                             std::string(DTypeName(dtype)) + ShapeString(shape) +
                             " overflows or has a negative dimension");
  }
  Tensor t;
  void* p = AlignedAlloc(static_cast<size_t>(bytes));
  if (p == nullptr) {
    return ResourceExhausted("Tensor::Zeros: cannot allocate " +
                             std::to_string(bytes) + " bytes for " +
                             DTypeName(dtype) + ShapeString(shape));
  }
  std::memset(p, 0, static_cast<size_t>(bytes));
  t.mem_.reset(p);
  t.bytes_ = static_cast<size_t>(bytes);
  t.view_ = MakeView(p, dtype, shape);
  return t;
}

Result<Tensor> Tensor::FromView(const TensorView& v) {
  Shape shape(v.shape.begin(), v.shape.begin() + (v.rank < 0 ? 0 : v.rank));
  Result<Tensor> r = Zeros(v.dtype, shape);
  if (!r.ok()) return r;
  Tensor& t = r.value();
  const size_t es = DTypeSize(v.dtype);
  const int64_t n = v.numel();
  const char* src = static_cast<const char*>(v.data);
  char* dst = t.data<char>();
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    int64_t o = 0;
    for (int d = 0; d < v.rank; ++d) o += idx[d] * v.strides[d];
    std::memcpy(dst + e * es, src + o * static_cast<int64_t>(es), es);
    for (int d = v.rank - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

}  // namespace attnflow
