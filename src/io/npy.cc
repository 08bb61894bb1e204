// npy.cc — .npy (format 1.0) writer and a strict reader; see attnflow/npy.h.
// Layout: "\x93NUMPY" major minor, u16 (v1) / u32 (v2) little-endian header
// length, an ASCII Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and '\n' to a 64-byte boundary, then the raw data.
#include "attnflow/npy.h"

#include <cstring>
#include <string>

#include "attnflow/file_util.h"

namespace attnflow {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

const char* Descr(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kF64: return "<f8";
    case DType::kI64: return "<i8";
    case DType::kI32: return "<i4";
    case DType::kI8: return "|i1";
    case DType::kU8: return "|u1";
    case DType::kBool: return "|b1";
    default: return nullptr;
  }
}

bool ParseDescr(const std::string& d, DType* t) {
  static const struct {
    const char* names[2];
    DType t;
  } kTable[] = {{{"<f4", "f4"}, DType::kF32}, {{"<f8", "f8"}, DType::kF64},
                {{"<i8", "i8"}, DType::kI64}, {{"<i4", "i4"}, DType::kI32},
                {{"|i1", "i1"}, DType::kI8},  {{"|u1", "u1"}, DType::kU8},
                {{"|b1", "b1"}, DType::kBool}};
  for (const auto& e : kTable) {
    if (d == e.names[0] || d == e.names[1]) {
      *t = e.t;
      return true;
    }
  }
  // Single-byte types may also be written with '<' or '='.
  if (d == "<i1" || d == "=i1") return *t = DType::kI8, true;
  if (d == "<u1" || d == "=u1") return *t = DType::kU8, true;
  if (d == "<b1" || d == "=b1") return *t = DType::kBool, true;
  return false;
}

// Extracts the value text of 'key' in the header dict (up to the next
// top-level comma or closing brace); false if absent.
bool DictValue(const std::string& h, const std::string& key, std::string* out) {
  const std::string k1 = "'" + key + "'", k2 = "\"" + key + "\"";
  size_t p = h.find(k1);
  size_t klen = k1.size();
  if (p == std::string::npos) {
    p = h.find(k2);
    klen = k2.size();
  }
  if (p == std::string::npos) return false;
  p = h.find(':', p + klen);
  if (p == std::string::npos) return false;
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  int depth = 0;
  size_t e = p;
  for (; e < h.size(); ++e) {
    const char c = h[e];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    if (depth < 0) return false;
  }
  *out = h.substr(p, e - p);
  while (!out->empty() && out->back() == ' ') out->pop_back();
  return true;
}

}  // namespace

Result<std::vector<uint8_t>> EncodeNpy(const TensorView& t) {
  if (t.rank < 0) return InvalidArgument("npy: absent tensor");
  const char* descr = Descr(t.dtype);
  if (descr == nullptr) {
    return Unimplemented(std::string("npy: dtype ") + DTypeName(t.dtype) + " is not supported");
  }
  int64_t bytes = 0;
  if (!CheckedBytes(t.shape.data(), t.rank, t.dtype, &bytes)) {
    return ResourceExhausted("npy: size of " + t.describe() + " overflows");
  }
  std::string shape = "(";
  for (int d = 0; d < t.rank; ++d) {
    shape += std::to_string(t.shape[d]);
    if (t.rank == 1 || d + 1 < t.rank) shape += ",";
    if (d + 1 < t.rank) shape += " ";
  }
  shape += ")";
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t prefix = kMagicLen + 2 + 2;
  size_t total = prefix + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) return InvalidArgument("npy: header too long");
  std::vector<uint8_t> out;
  out.reserve(prefix + header.size() + static_cast<size_t>(bytes));
  out.insert(out.end(), kMagic, kMagic + kMagicLen);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<uint8_t>(header.size() & 0xFF));
  out.push_back(static_cast<uint8_t>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  Result<Tensor> c = Tensor::FromView(t);  // row-major copy, any strides
  if (!c.ok()) return c.status();
  const uint8_t* d = c->data<uint8_t>();
  out.insert(out.end(), d, d + c->nbytes());
  return out;
}

Status WriteNpy(const std::string& path, const TensorView& t) {
  Result<std::vector<uint8_t>> bytes = EncodeNpy(t);
  if (!bytes.ok()) return bytes.status();
  return WriteFileAtomic(
      path, std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
}

Result<Tensor> DecodeNpy(const std::vector<uint8_t>& b, const std::string& label) {
  const std::string where = "npy: " + label + ": ";
  if (b.size() < kMagicLen + 4 || std::memcmp(b.data(), kMagic, kMagicLen) != 0) {
    return Corrupt(where + "not a .npy file (bad magic)");
  }
  const int major = b[6];
  size_t hlen, hstart;
  if (major == 1) {
    hlen = b[8] | (static_cast<size_t>(b[9]) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return Corrupt(where + "truncated header");
    hlen = b[8] | (static_cast<size_t>(b[9]) << 8) | (static_cast<size_t>(b[10]) << 16) |
           (static_cast<size_t>(b[11]) << 24);
    hstart = 12;
  } else {
    return Unimplemented(where + "format version " + std::to_string(major) + " is not supported");
  }
  if (hlen > b.size() - hstart) return Corrupt(where + "header length exceeds the file");
  const std::string h(reinterpret_cast<const char*>(b.data() + hstart), hlen);
  std::string descr, fortran, shape;
  if (!DictValue(h, "descr", &descr) || !DictValue(h, "fortran_order", &fortran) ||
      !DictValue(h, "shape", &shape)) {
    return Corrupt(where + "header lacks descr, fortran_order or shape");
  }
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') ||
      descr.back() != descr.front()) {
    return Corrupt(where + "descr is not a string");
  }
  descr = descr.substr(1, descr.size() - 2);
  DType dt;
  if (!ParseDescr(descr, &dt)) {
    return Unimplemented(where + "dtype '" + descr + "' is not supported");
  }
  if (fortran != "False") return Unimplemented(where + "fortran_order arrays are not supported");
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') {
    return Corrupt(where + "shape is not a tuple");
  }
  Shape dims;
  std::string inner = shape.substr(1, shape.size() - 2);
  size_t p = 0;
  while (p < inner.size()) {
    while (p < inner.size() && (inner[p] == ' ' || inner[p] == ',')) ++p;
    if (p >= inner.size()) break;
    size_t e = p;
    while (e < inner.size() && inner[e] >= '0' && inner[e] <= '9') ++e;
    if (e == p || e - p > 18) return Corrupt(where + "bad shape " + shape);
    dims.push_back(std::stoll(inner.substr(p, e - p)));
    p = e;
    while (p < inner.size() && inner[p] == ' ') ++p;
    if (p < inner.size() && inner[p] != ',') return Corrupt(where + "bad shape " + shape);
  }
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    return Unimplemented(where + "rank " + std::to_string(dims.size()) + " exceeds 4");
  }
  int64_t bytes = 0;
  if (!CheckedBytes(dims.data(), static_cast<int>(dims.size()), dt, &bytes)) {
    return Corrupt(where + "shape " + shape + " overflows");
  }
  const size_t data_start = hstart + hlen;
  if (b.size() - data_start != static_cast<size_t>(bytes)) {
    return Corrupt(where + "data is " + std::to_string(b.size() - data_start) +
                   " bytes, shape " + ShapeString(dims) + " needs " + std::to_string(bytes));
  }
  if (dt == DType::kBool) {
    // numpy writes bools as bytes 0 and 1; anything else is not a bool.
    for (int64_t i = 0; i < bytes; ++i) {
      const uint8_t v = b[data_start + static_cast<size_t>(i)];
      if (v > 1) {
        return Corrupt(where + "bool element " + std::to_string(i) + " is byte " + std::to_string(v) +
                       " (must be 0 or 1)");
      }
    }
  }
  Result<Tensor> t = Tensor::Zeros(dt, dims);
  if (!t.ok()) return t.status();
  if (bytes > 0) std::memcpy(t->data<uint8_t>(), b.data() + data_start, static_cast<size_t>(bytes));
  return t;
}

Result<Tensor> ReadNpy(const std::string& path) {
  Result<std::vector<uint8_t>> b = ReadFileBytes(path);
  if (!b.ok()) return b.status();
  return DecodeNpy(b.value(), path);
}

}  // namespace attnflow
