// gguf.cc — strict memory-mapped GGUF reader and an in-memory writer for
// tests (the type table and (de)quantisation are in gguf_quants.cc) (see attnflow/gguf.h for the format and the
// invariants every open file satisfies).
//
// Invariant of the parser: every read goes through Reader, which checks the
// requested length against the bytes that remain before touching memory, and
// every count is bounded by (remaining bytes / minimum encoded element size)
// before anything is allocated from it. Errors name the file and the field
// ("kv[3] 'tokenizer.ggml.tokens'", "tensor[12] 'blk.0.attn_q.weight'").
#include "attnflow/gguf.h"
#include "io/gguf_bytes.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <new>

namespace attnflow {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxNameBytes = 64;   // GGML_MAX_NAME (tensor names)
constexpr uint64_t kMaxKeyBytes = 65535;

// Bytes of one encoded scalar of type t (0 for string/array: variable).
uint64_t ScalarBytes(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    default: return 0;
  }
}

bool KnownGgufType(uint32_t t) { return t <= 12; }

// ggml type names, including types attnflow does not dequantise.
const char* kGgmlNames[] = {
    "F32", "F16", "Q4_0", "Q4_1", "Q4_2(removed)", "Q4_3(removed)", "Q5_0",
    "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
    "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
    "Q4_0_4_4(removed)", "Q4_0_4_8(removed)", "Q4_0_8_8(removed)", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4(removed)", "IQ4_NL_4_8(removed)",
    "IQ4_NL_8_8(removed)", "MXFP4"};
constexpr uint32_t kNumGgmlNames = sizeof(kGgmlNames) / sizeof(kGgmlNames[0]);

// Bounds-checked little-endian cursor over the file image.
class Reader {
 public:
  Reader(const uint8_t* p, uint64_t n) : p_(p), n_(n) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return n_ - pos_; }
  bool Has(uint64_t k) const { return k <= remaining(); }
  template <typename T>
  bool Read(T* out) {
    if (!Has(sizeof(T))) return false;
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  const uint8_t* Take(uint64_t k) {
    if (!Has(k)) return nullptr;
    const uint8_t* r = p_ + pos_;
    pos_ += k;
    return r;
  }

 private:
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
};

std::string Quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

const char* GgufTypeName(GgufType t) {
  static const char* names[] = {"u8",  "i8",     "u16",   "i16", "u32",
                                "i32", "f32",    "bool",  "string",
                                "array", "u64",  "i64",   "f64"};
  const uint32_t i = static_cast<uint32_t>(t);
  return i <= 12 ? names[i] : "?";
}

const char* GgmlTypeName(uint32_t type) {
  return type < kNumGgmlNames ? kGgmlNames[type] : "?";
}

// GgmlBlockSize, GgmlBlockBytes, GgmlRowBytes, GgmlTypeSupported: gguf_quants.cc.

size_t GgufValue::size() const {
  if (!is_array) return 1;
  switch (type) {
    case GgufType::kString: return strings.size();
    case GgufType::kArray: return arrays.size();
    case GgufType::kF32: case GgufType::kF64: return floats.size();
    default: return ints.size();
  }
}

bool GgufValue::is_integer() const {
  return type != GgufType::kString && type != GgufType::kArray &&
         type != GgufType::kF32 && type != GgufType::kF64;
}

// ---- lifetime -------------------------------------------------------------

Status GgufFile::Err(StatusCode code, const std::string& field,
                     const std::string& what) const {
  return Status(code, "gguf: " + path_ + ": " + field + ": " + what);
}

Result<GgufFile> GgufFile::Open(const std::string& path) {
  Result<FileBytes> m = FileBytes::Map(path, "gguf: " + path + ": ", "GGUF");
  if (!m.ok()) return m.status();
  GgufFile f;
  ATTNFLOW_RETURN_IF_ERROR(f.Parse(std::move(m).value(), path));
  return f;
}

Result<GgufFile> GgufFile::FromBuffer(std::vector<uint8_t> bytes, std::string label) {
  GgufFile f;
  ATTNFLOW_RETURN_IF_ERROR(f.Parse(FileBytes::Own(std::move(bytes)), std::move(label)));
  return f;
}

// ---- parsing ---------------------------------------------------------------

namespace {

// Reads one string (u64 length + bytes) for `field`.
Status ReadString(Reader& r, const GgufFile& f, const std::string& field,
                  uint64_t max_len, std::string* out,
                  const std::function<Status(StatusCode, const std::string&,
                                             const std::string&)>& err) {
  uint64_t len;
  if (!r.Read(&len)) return err(StatusCode::kCorrupt, field, "truncated string length");
  if (!r.Has(len)) {
    return err(StatusCode::kCorrupt, field,
               "string length " + std::to_string(len) + " exceeds the " +
                   std::to_string(r.remaining()) + " bytes left in the file");
  }
  if (len > max_len) {
    return err(StatusCode::kCorrupt, field,
               "string length " + std::to_string(len) + " exceeds the limit " +
                   std::to_string(max_len));
  }
  const uint8_t* p = r.Take(len);
  if (!IsValidUtf8(std::string_view(reinterpret_cast<const char*>(p), len))) {
    return err(StatusCode::kCorrupt, field, "string is not valid UTF-8");
  }
  out->assign(reinterpret_cast<const char*>(p), len);
  return Status::Ok();
}

using ErrFn = std::function<Status(StatusCode, const std::string&, const std::string&)>;

Status ReadValue(Reader& r, const GgufFile& f, GgufType type, bool as_array,
                 int depth, const std::string& field, GgufValue* v,
                 const ErrFn& err);

// Appends one scalar of `type` to v.
Status ReadScalar(Reader& r, const GgufFile& f, GgufType type,
                  const std::string& field, GgufValue* v, const ErrFn& err) {
  const auto trunc = [&] { return err(StatusCode::kCorrupt, field, std::string("truncated ") + GgufTypeName(type) + " value"); };
  switch (type) {
    case GgufType::kU8: { uint8_t x; if (!r.Read(&x)) return trunc(); v->ints.push_back(x); break; }
    case GgufType::kI8: { int8_t x; if (!r.Read(&x)) return trunc(); v->ints.push_back(x); break; }
    case GgufType::kU16: { uint16_t x; if (!r.Read(&x)) return trunc(); v->ints.push_back(x); break; }
    case GgufType::kI16: { int16_t x; if (!r.Read(&x)) return trunc(); v->ints.push_back(x); break; }
    case GgufType::kU32: { uint32_t x; if (!r.Read(&x)) return trunc(); v->ints.push_back(x); break; }
    case GgufType::kI32: { int32_t x; if (!r.Read(&x)) return trunc(); v->ints.push_back(x); break; }
    case GgufType::kU64: { uint64_t x; if (!r.Read(&x)) return trunc(); v->ints.push_back(static_cast<int64_t>(x)); break; }
    case GgufType::kI64: { int64_t x; if (!r.Read(&x)) return trunc(); v->ints.push_back(x); break; }
    case GgufType::kF32: { float x; if (!r.Read(&x)) return trunc(); v->floats.push_back(x); break; }
    case GgufType::kF64: { double x; if (!r.Read(&x)) return trunc(); v->floats.push_back(x); break; }
    case GgufType::kBool: {
      uint8_t x;
      if (!r.Read(&x)) return trunc();
      if (x > 1) return err(StatusCode::kCorrupt, field, "bool value " + std::to_string(x) + " is not 0 or 1");
      v->ints.push_back(x);
      break;
    }
    case GgufType::kString: {
      std::string s;
      ATTNFLOW_RETURN_IF_ERROR(ReadString(r, f, field, std::numeric_limits<uint64_t>::max(), &s, err));
      v->strings.push_back(std::move(s));
      break;
    }
    default:
      return err(StatusCode::kInternal, field, "not a scalar type");
  }
  return Status::Ok();
}

Status ReadValue(Reader& r, const GgufFile& f, GgufType type, bool as_array,
                 int depth, const std::string& field, GgufValue* v,
                 const ErrFn& err) {
  if (!as_array) {
    v->type = type;
    v->is_array = false;
    return ReadScalar(r, f, type, field, v, err);
  }
  uint32_t et;
  uint64_t count;
  if (!r.Read(&et)) return err(StatusCode::kCorrupt, field, "truncated array element type");
  if (!KnownGgufType(et)) {
    return err(StatusCode::kCorrupt, field, "unknown array element type " + std::to_string(et));
  }
  if (!r.Read(&count)) return err(StatusCode::kCorrupt, field, "truncated array count");
  const GgufType etype = static_cast<GgufType>(et);
  // Minimum encoded bytes per element: strings 8 (length), arrays 12.
  const uint64_t min_elem = etype == GgufType::kString ? 8
                            : etype == GgufType::kArray ? 12
                                                        : ScalarBytes(etype);
  if (count > r.remaining() / min_elem) {
    return err(StatusCode::kCorrupt, field,
               "array of " + std::to_string(count) + " " + GgufTypeName(etype) +
                   " elements needs at least " +
                   (count > std::numeric_limits<uint64_t>::max() / min_elem
                        ? std::string("more than 2^64")
                        : std::to_string(count * min_elem)) +
                   " bytes, but only " + std::to_string(r.remaining()) + " remain");
  }
  v->type = etype;
  v->is_array = true;
  if (etype == GgufType::kArray) {
    if (depth + 1 >= kGgufMaxArrayDepth) {
      return err(StatusCode::kCorrupt, field, "arrays nested deeper than " + std::to_string(kGgufMaxArrayDepth));
    }
    v->arrays.resize(count);
    for (uint64_t i = 0; i < count; ++i) {
      ATTNFLOW_RETURN_IF_ERROR(ReadValue(r, f, GgufType::kArray, true, depth + 1,
                                         field + "[" + std::to_string(i) + "]", &v->arrays[i], err));
    }
    return Status::Ok();
  }
  if (etype == GgufType::kString) v->strings.reserve(count);
  else if (etype == GgufType::kF32 || etype == GgufType::kF64) v->floats.reserve(count);
  else v->ints.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    Status s = ReadScalar(r, f, etype, field, v, err);
    if (!s.ok()) {
      return Status(s.code(), s.message() + " (element " + std::to_string(i) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Status GgufFile::Parse(FileBytes src, std::string label) {
  path_ = std::move(label);
  src_ = std::move(src);
  bytes_ = src_.data();
  size_ = src_.size();
  const ErrFn err = [this](StatusCode c, const std::string& field, const std::string& what) {
    return Err(c, field, what);
  };
  try {
    Reader r(bytes_, size_);
    uint32_t magic;
    if (!r.Read(&magic)) return Err(StatusCode::kCorrupt, "header", "file is " + std::to_string(size_) + " bytes, too short for a GGUF header");
    if (magic != kMagic) {
      return Err(StatusCode::kCorrupt, "magic", "not a GGUF file (magic bytes are not \"GGUF\")");
    }
    if (!r.Read(&version_)) return Err(StatusCode::kCorrupt, "version", "truncated");
    if (version_ == 0 || (version_ & 0xFFFF) == 0) {
      return Err(StatusCode::kUnimplemented, "version",
                 "version " + std::to_string(version_) + " looks byte-swapped: big-endian GGUF files are not supported");
    }
    if (version_ == 1) {
      return Err(StatusCode::kUnimplemented, "version", "GGUF v1 (32-bit counts) is not supported; convert to v3");
    }
    if (version_ > 3) {
      return Err(StatusCode::kUnimplemented, "version", "GGUF version " + std::to_string(version_) + " is newer than 3");
    }
    uint64_t n_tensors, n_kv;
    if (!r.Read(&n_tensors)) return Err(StatusCode::kCorrupt, "tensor_count", "truncated");
    if (!r.Read(&n_kv)) return Err(StatusCode::kCorrupt, "kv_count", "truncated");
    // A kv entry takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor
    // info at least 8 + 4 + 8 + 4 + 8.
    if (n_kv > r.remaining() / 13) {
      return Err(StatusCode::kCorrupt, "kv_count",
                 std::to_string(n_kv) + " entries cannot fit in the " + std::to_string(r.remaining()) + " bytes that remain");
    }
    if (n_tensors > r.remaining() / 32) {
      return Err(StatusCode::kCorrupt, "tensor_count",
                 std::to_string(n_tensors) + " tensors cannot fit in the " + std::to_string(r.remaining()) + " bytes that remain");
    }

    key_order_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      const std::string field = "kv[" + std::to_string(i) + "]";
      std::string key;
      ATTNFLOW_RETURN_IF_ERROR(ReadString(r, *this, field + " key", kMaxKeyBytes, &key, err));
      if (key.empty()) return Err(StatusCode::kCorrupt, field, "empty key");
      const std::string kfield = field + " " + Quote(key);
      if (kv_.count(key)) return Err(StatusCode::kCorrupt, kfield, "duplicate key");
      uint32_t type;
      if (!r.Read(&type)) return Err(StatusCode::kCorrupt, kfield, "truncated value type");
      if (!KnownGgufType(type)) {
        return Err(StatusCode::kCorrupt, kfield, "unknown value type " + std::to_string(type));
      }
      GgufValue v;
      const GgufType t = static_cast<GgufType>(type);
      ATTNFLOW_RETURN_IF_ERROR(ReadValue(r, *this, t, t == GgufType::kArray, 0, kfield, &v, err));
      key_order_.push_back(key);
      kv_.emplace(std::move(key), std::move(v));
    }

    if (const GgufValue* a = Find("general.alignment")) {
      if (a->is_array || a->type != GgufType::kU32) {
        return Err(StatusCode::kCorrupt, "general.alignment",
                   std::string("must be a u32, got ") + (a->is_array ? "an array" : GgufTypeName(a->type)));
      }
      const int64_t al = a->ints[0];
      if (al <= 0 || (al & (al - 1)) != 0) {
        return Err(StatusCode::kCorrupt, "general.alignment",
                   std::to_string(al) + " is not a power of two");
      }
      if (al > kGgufMaxAlignment) {
        return Err(StatusCode::kCorrupt, "general.alignment",
                   std::to_string(al) + " is larger than the limit " +
                       std::to_string(kGgufMaxAlignment) + " (ggml writes 32)");
      }
      alignment_ = static_cast<uint32_t>(al);
    }

    tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      std::string field = "tensor[" + std::to_string(i) + "]";
      GgufTensorInfo t;
      ATTNFLOW_RETURN_IF_ERROR(ReadString(r, *this, field + " name", kMaxNameBytes, &t.name, err));
      if (t.name.empty()) return Err(StatusCode::kCorrupt, field, "empty tensor name");
      field += " " + Quote(t.name);
      if (tensor_index_.count(t.name)) return Err(StatusCode::kCorrupt, field, "duplicate tensor name");
      uint32_t n_dims;
      if (!r.Read(&n_dims)) return Err(StatusCode::kCorrupt, field, "truncated n_dims");
      if (n_dims == 0 || n_dims > kGgufMaxDims) {
        return Err(StatusCode::kCorrupt, field,
                   "n_dims " + std::to_string(n_dims) + " is outside [1, " + std::to_string(kGgufMaxDims) + "]");
      }
      int64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t ne;
        if (!r.Read(&ne)) return Err(StatusCode::kCorrupt, field, "truncated dims");
        if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Err(StatusCode::kCorrupt, field, "ne[" + std::to_string(d) + "] = " + std::to_string(ne) + " is negative as int64");
        }
        const int64_t n = static_cast<int64_t>(ne);
        if (n != 0 && numel > std::numeric_limits<int64_t>::max() / n) {
          return Err(StatusCode::kCorrupt, field, "element count overflows int64 (dims " +
                                                      ShapeString(t.ne.data(), static_cast<int>(t.ne.size())) + " then " + std::to_string(n) + ")");
        }
        numel *= n;
        t.ne.push_back(n);
      }
      t.numel = numel;
      uint32_t type;
      if (!r.Read(&type)) return Err(StatusCode::kCorrupt, field, "truncated type");
      if (!GgmlTypeSupported(type)) {
        if (type < kNumGgmlNames && std::strstr(kGgmlNames[type], "removed") == nullptr) {
          return Err(StatusCode::kUnimplemented, field,
                     std::string("tensor type ") + kGgmlNames[type] + " (" + std::to_string(type) +
                         ") is not supported (supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K)");
        }
        return Err(StatusCode::kCorrupt, field, "unknown tensor type " + std::to_string(type));
      }
      t.type = static_cast<GgmlType>(type);
      const int64_t bs = GgmlBlockSize(t.type);
      if (t.ne[0] % bs != 0) {
        return Err(StatusCode::kCorrupt, field,
                   std::string("ne[0] = ") + std::to_string(t.ne[0]) + " is not a multiple of the " +
                       GgmlTypeName(type) + " block size " + std::to_string(bs));
      }
      int64_t row_bytes = 0;
      if (!GgmlRowBytes(t.type, t.ne[0], &row_bytes) ||
          (t.ne[0] != 0 && row_bytes != 0 &&
           numel / t.ne[0] > std::numeric_limits<int64_t>::max() / row_bytes)) {
        return Err(StatusCode::kCorrupt, field, "byte size overflows int64");
      }
      t.nbytes = t.ne[0] == 0 ? 0 : static_cast<uint64_t>(row_bytes) * static_cast<uint64_t>(numel / t.ne[0]);
      if (!r.Read(&t.offset)) return Err(StatusCode::kCorrupt, field, "truncated offset");
      if (t.offset % alignment_ != 0) {
        return Err(StatusCode::kCorrupt, field,
                   "offset " + std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(alignment_));
      }
      tensor_index_.emplace(t.name, tensors_.size());
      tensors_.push_back(std::move(t));
    }

    // Data section: the header end rounded up to the alignment.
    const uint64_t hdr_end = r.pos();
    data_offset_ = (hdr_end + alignment_ - 1) / alignment_ * alignment_;
    data_size_ = data_offset_ <= size_ ? size_ - data_offset_ : 0;
    data_ = bytes_ + std::min<uint64_t>(data_offset_, size_);

    std::vector<size_t> order;
    order.reserve(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const GgufTensorInfo& t = tensors_[i];
      if (t.offset > data_size_ || t.nbytes > data_size_ - t.offset) {
        return Err(StatusCode::kCorrupt, "tensor[" + std::to_string(i) + "] " + Quote(t.name),
                   "bytes [" + std::to_string(t.offset) + ", " + std::to_string(t.offset) + " + " +
                       std::to_string(t.nbytes) + ") lie past the end of the data section (" +
                       std::to_string(data_size_) + " bytes starting at file offset " +
                       std::to_string(data_offset_) + ")");
      }
      if (t.nbytes > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return tensors_[a].offset < tensors_[b].offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensorInfo& a = tensors_[order[k - 1]];
      const GgufTensorInfo& b = tensors_[order[k]];
      if (b.offset < a.offset + a.nbytes) {
        return Err(StatusCode::kCorrupt, "tensor " + Quote(b.name),
                   "bytes [" + std::to_string(b.offset) + ", " + std::to_string(b.offset + b.nbytes) +
                       ") overlap tensor " + Quote(a.name) + " [" + std::to_string(a.offset) + ", " +
                       std::to_string(a.offset + a.nbytes) + ")");
      }
    }
  } catch (const std::bad_alloc&) {
    return Err(StatusCode::kResourceExhausted, "header", "out of memory while parsing");
  } catch (const std::length_error&) {
    return Err(StatusCode::kResourceExhausted, "header", "a count is too large to hold in memory");
  }
  return Status::Ok();
}

// ---- accessors ---------------------------------------------------------------

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
// What each accessor accepts, and how its error names the expected type.
bool IsScalarString(const GgufValue& v) { return !v.is_array && v.type == GgufType::kString; }
bool IsScalarInt(const GgufValue& v) {
  return !v.is_array && v.is_integer() && v.type != GgufType::kBool;
}
bool IsScalarFloat(const GgufValue& v) {
  return !v.is_array && (v.type == GgufType::kF32 || v.type == GgufType::kF64);
}
bool IsScalarBool(const GgufValue& v) { return !v.is_array && v.type == GgufType::kBool; }
bool IsStringArray(const GgufValue& v) { return v.is_array && v.type == GgufType::kString; }
bool IsIntArray(const GgufValue& v) { return v.is_array && v.is_integer(); }
}  // namespace

Result<const GgufValue*> GgufFile::FindTyped(std::string_view key, bool (*fits)(const GgufValue&),
                                             const char* expected) const {
  const GgufValue* v = Find(key);
  if (!v) return Err(StatusCode::kInvalidArgument, std::string(key), "missing metadata key");
  if (!fits(*v)) {
    return Err(StatusCode::kCorrupt, std::string(key),
               std::string("expected ") + expected + ", got " + (v->is_array ? "an array of " : "") +
                   GgufTypeName(v->type));
  }
  return v;
}

Result<std::string> GgufFile::GetString(std::string_view key) const {
  Result<const GgufValue*> v = FindTyped(key, IsScalarString, "a string");
  if (!v.ok()) return v.status();
  return (*v)->strings[0];
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  Result<const GgufValue*> v = FindTyped(key, IsScalarInt, "an integer");
  if (!v.ok()) return v.status();
  if ((*v)->type == GgufType::kU64 && (*v)->ints[0] < 0) {
    return Err(StatusCode::kOutOfRange, std::string(key), "u64 value does not fit in int64");
  }
  return (*v)->ints[0];
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  Result<const GgufValue*> v = FindTyped(key, IsScalarFloat, "f32 or f64");
  return v.ok() ? Result<double>((*v)->floats[0]) : Result<double>(v.status());
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  Result<const GgufValue*> v = FindTyped(key, IsScalarBool, "a bool");
  return v.ok() ? Result<bool>((*v)->ints[0] != 0) : Result<bool>(v.status());
}

Result<const std::vector<std::string>*> GgufFile::GetStringArray(std::string_view key) const {
  Result<const GgufValue*> v = FindTyped(key, IsStringArray, "an array of strings");
  if (!v.ok()) return v.status();
  return &(*v)->strings;
}

Result<const std::vector<int64_t>*> GgufFile::GetIntArray(std::string_view key) const {
  Result<const GgufValue*> v = FindTyped(key, IsIntArray, "an array of integers");
  if (!v.ok()) return v.status();
  return &(*v)->ints;
}

Result<Tensor> GgufFile::Dequantize(std::string_view name) const {
  const GgufTensorInfo* t = FindTensor(name);
  if (!t) return Err(StatusCode::kInvalidArgument, "tensor '" + std::string(name) + "'", "no such tensor");
  Result<Tensor> out = Tensor::Zeros(DType::kF32, t->shape());
  if (!out.ok()) return Err(out.status().code(), "tensor '" + t->name + "'", out.status().message());
  int64_t row_bytes = 0;
  GgmlRowBytes(t->type, t->ne[0], &row_bytes);
  const int64_t rows = t->rows();
  float* dst = out->data<float>();
  const uint8_t* src = TensorData(*t);
  for (int64_t r = 0; r < rows; ++r) {
    ATTNFLOW_RETURN_IF_ERROR(DequantizeRow(dst + r * t->ne[0], src + r * row_bytes, t->type, t->ne[0]));
  }
  return out;
}

// DequantizeRow / QuantizeRow: gguf_quants.cc.

// ---- writer ------------------------------------------------------------------

namespace {
using gguf_bytes::Put;
using gguf_bytes::PutStr;
}  // namespace

void GgufBuilder::AddU32(const std::string& key, uint32_t v) {
  std::vector<uint8_t> b;
  Put(b, v);
  kvs_.push_back({key, GgufType::kU32, std::move(b)});
}
void GgufBuilder::AddI32(const std::string& key, int32_t v) {
  std::vector<uint8_t> b;
  Put(b, v);
  kvs_.push_back({key, GgufType::kI32, std::move(b)});
}
void GgufBuilder::AddF32(const std::string& key, float v) {
  std::vector<uint8_t> b;
  Put(b, v);
  kvs_.push_back({key, GgufType::kF32, std::move(b)});
}
void GgufBuilder::AddBool(const std::string& key, bool v) {
  kvs_.push_back({key, GgufType::kBool, {static_cast<uint8_t>(v ? 1 : 0)}});
}
void GgufBuilder::AddString(const std::string& key, const std::string& v) {
  std::vector<uint8_t> b;
  PutStr(b, v);
  kvs_.push_back({key, GgufType::kString, std::move(b)});
}
void GgufBuilder::AddStringArray(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> b;
  Put<uint32_t>(b, static_cast<uint32_t>(GgufType::kString));
  Put<uint64_t>(b, v.size());
  for (const auto& s : v) PutStr(b, s);
  kvs_.push_back({key, GgufType::kArray, std::move(b)});
}
void GgufBuilder::AddI32Array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<uint8_t> b;
  Put<uint32_t>(b, static_cast<uint32_t>(GgufType::kI32));
  Put<uint64_t>(b, v.size());
  for (int32_t x : v) Put(b, x);
  kvs_.push_back({key, GgufType::kArray, std::move(b)});
}
void GgufBuilder::AddRaw(const std::string& key, GgufType type, std::vector<uint8_t> value) {
  kvs_.push_back({key, type, std::move(value)});
}
void GgufBuilder::AddTensor(const std::string& name, uint32_t ggml_type,
                            const std::vector<int64_t>& ne, std::vector<uint8_t> bytes) {
  tensors_.push_back({name, ggml_type, ne, std::move(bytes)});
}

std::vector<uint8_t> GgufBuilder::Build() const {
  std::vector<uint8_t> b;
  Put<uint32_t>(b, kMagic);
  Put<uint32_t>(b, 3);
  Put<uint64_t>(b, tensors_.size());
  Put<uint64_t>(b, kvs_.size());
  for (const Kv& kv : kvs_) {
    PutStr(b, kv.key);
    Put<uint32_t>(b, static_cast<uint32_t>(kv.type));
    b.insert(b.end(), kv.value.begin(), kv.value.end());
  }
  const uint64_t al = alignment_ == 0 ? 1 : alignment_;
  uint64_t off = 0;
  std::vector<uint64_t> offsets;
  for (const T& t : tensors_) {
    PutStr(b, t.name);
    Put<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) Put<uint64_t>(b, static_cast<uint64_t>(n));
    Put<uint32_t>(b, t.type);
    Put<uint64_t>(b, off);
    offsets.push_back(off);
    off += (t.bytes.size() + al - 1) / al * al;
  }
  b.resize((b.size() + al - 1) / al * al, 0);
  const size_t base = b.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    b.resize(base + offsets[i], 0);
    b.insert(b.end(), tensors_[i].bytes.begin(), tensors_[i].bytes.end());
  }
  return b;
}

}  // namespace attnflow
