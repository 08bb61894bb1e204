// safetensors.cc — strict mmap-based safetensors reader and atomic writer.
//
// Invariants:
//  * Parse() accepts a file image only after every rule in
//    docs/safetensors.md holds; the tables (tensors_, index_, metadata_) are
//    filled only for files that pass. All size arithmetic is overflow-checked
//    (u64 header length compared without subtraction underflow, byte sizes
//    via CheckedBytes).
//  * The JSON header is parsed with nlohmann's SAX interface (no exceptions
//    on malformed input) so that duplicate keys — silently collapsed by
//    nlohmann's DOM parser — are detected at every nesting level.
//  * The input file is mapped PROT_READ / MAP_PRIVATE and never written.
//  * The writer validates everything before creating any file and emits
//    through WriteFileAtomic, so failures leave nothing behind.
//  * No exception escapes: nlohmann and allocation failures are caught at the
//    public entry points and turned into Status.
#include "attnflow/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <numeric>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "attnflow/file_util.h"

namespace attnflow {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; attnflow assumes a "
              "little-endian host");

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr char kMetadataKey[] = "__metadata__";
constexpr char kSupportedDTypes[] = "F32, F16, BF16, F64, I64, I32, I8, U8, BOOL";

// Escapes control bytes (and, for invalid UTF-8, every non-ASCII byte) as
// \xNN so that messages are printable; truncates very long strings.
std::string Printable(std::string_view s, bool escape_non_ascii) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const size_t limit = 200;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x20 || c == 0x7F || (escape_non_ascii && c >= 0x80)) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// "'name'" for messages.
std::string Q(std::string_view s) {
  return "'" + Printable(s, !IsValidUtf8(s)) + "'";
}

// Valid safetensors dtypes that attnflow cannot represent.
bool IsKnownUnsupportedDType(std::string_view s) {
  static constexpr const char* kKnown[] = {
      "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
      "I16",     "U16",     "U32",     "U64",     "C64"};
  for (const char* k : kKnown) {
    if (s == k) return true;
  }
  return false;
}

// How a JSON value looks, for "must be X, but it is Y" messages.
std::string Describe(const json& v) {
  switch (v.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::null: return "null";
    case json::value_t::number_integer:
      return "the negative integer " + v.dump();
    case json::value_t::number_unsigned: return "the integer " + v.dump();
    case json::value_t::number_float:
      return "the floating-point number " + v.dump();
    default: return "a " + std::string(v.type_name()) + " value";
  }
}

// SAX handler that builds a DOM like nlohmann's own, but rejects duplicate
// object keys (at any depth), bounds nesting depth, records the order of the
// top-level keys, and never throws on bad input.
class HeaderSax {
 public:
  // The valid schema nests 3 deep (root / entry / shape); anything far deeper
  // is rejected early to bound work on hostile headers.
  static constexpr size_t kMaxDepth = 16;

  json root;
  std::vector<std::string> top_keys;  // header order
  std::string handler_error;          // set when a handler rejects
  bool syntax_error = false;          // set by parse_error
  size_t error_position = 0;
  std::string syntax_message;

  bool null() { return Value(json(nullptr)); }
  bool boolean(bool v) { return Value(json(v)); }
  bool number_integer(json::number_integer_t v) { return Value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) {
    return Value(json(v));
  }
  bool string(std::string& v) { return Value(json(std::move(v))); }
  bool binary(json::binary_t& v) { return Value(json::binary(std::move(v))); }

  bool start_object(size_t) { return Open(json::value_t::object); }
  bool start_array(size_t) { return Open(json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(std::string& k) {
    json* obj = stack_.back();
    if (obj->contains(k)) {
      handler_error = DuplicateMessage(k);
      return false;
    }
    if (stack_.size() == 1) top_keys.push_back(k);
    keys_.back() = k;
    slot_ = &(*obj)[k];
    return true;
  }

  bool parse_error(size_t position, const std::string& /*last_token*/,
                   const json::exception& ex) {
    syntax_error = true;
    error_position = position;
    std::string what = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
    const size_t close = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    syntax_message = Printable(what, /*escape_non_ascii=*/true);
    return false;
  }

 private:
  std::string DuplicateMessage(const std::string& k) const {
    if (stack_.size() == 1) {
      if (k == kMetadataKey) return "header has more than one '__metadata__'";
      return "duplicate tensor name " + Q(k);
    }
    if (stack_.size() == 2) {
      if (keys_[0] == kMetadataKey) return "__metadata__: duplicate key " + Q(k);
      return "tensor " + Q(keys_[0]) + ": duplicate field " + Q(k);
    }
    return "header JSON has a duplicate key " + Q(k);
  }

  json* Place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool Value(json&& v) {
    Place(std::move(v));
    return true;
  }
  bool Open(json::value_t t) {
    if (stack_.size() >= kMaxDepth) {
      handler_error = "header JSON nests deeper than " +
                      std::to_string(kMaxDepth) + " levels";
      return false;
    }
    stack_.push_back(Place(json(t)));
    keys_.emplace_back();
    return true;
  }
  bool Close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // current key at each open container
  json* slot_ = nullptr;
};

// Reads a JSON value that must be a non-negative integer fitting int64.
bool GetIndex(const json& v, int64_t* out) {
  if (!v.is_number_unsigned()) return false;
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = static_cast<int64_t>(u);
  return true;
}

std::string IndexProblem(const json& v) {
  if (v.is_number_unsigned()) return Describe(v) + ", which exceeds int64";
  return Describe(v);
}

std::string OffsetsString(int64_t b, int64_t e) {
  return "[" + std::to_string(b) + "," + std::to_string(e) + "]";
}

}  // namespace

// ---------------------------------------------------------------- reader --

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      src_(std::move(o.src_)),
      bytes_(o.bytes_),
      size_(o.size_),
      data_(o.data_),
      data_size_(o.data_size_),
      header_size_(o.header_size_),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {
  o.Release();
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    Release();
    path_ = std::move(o.path_);
    src_ = std::move(o.src_);
    bytes_ = o.bytes_;
    size_ = o.size_;
    data_ = o.data_;
    data_size_ = o.data_size_;
    header_size_ = o.header_size_;
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
    o.Release();
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { Release(); }

// Unmaps (if mapped) and returns to the empty state.
void SafetensorsFile::Release() {
  src_ = FileBytes();
  path_.clear();
  bytes_ = nullptr;
  size_ = 0;
  data_ = nullptr;
  data_size_ = 0;
  header_size_ = 0;
  tensors_.clear();
  index_.clear();
  metadata_.clear();
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path,
                                              uint64_t max_header_bytes) {
  Result<FileBytes> m = FileBytes::Map(path, "safetensors: " + path + ": ", "safetensors");
  if (!m.ok()) return m.status();
  SafetensorsFile f;
  ATTNFLOW_RETURN_IF_ERROR(f.Parse(std::move(m).value(), path, max_header_bytes));
  return f;
}

Result<SafetensorsFile> SafetensorsFile::FromBuffer(std::vector<uint8_t> bytes,
                                                    std::string label) {
  SafetensorsFile f;
  ATTNFLOW_RETURN_IF_ERROR(f.Parse(FileBytes::Own(std::move(bytes)), std::move(label)));
  return f;
}

Result<SafetensorsFile> SafetensorsFile::FromBuffer(const uint8_t* data,
                                                    size_t size,
                                                    std::string label) {
  std::vector<uint8_t> copy;
  try {
    copy.assign(data, data + size);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("safetensors: " + label + ": cannot copy " +
                             std::to_string(size) + " bytes");
  }
  return FromBuffer(std::move(copy), std::move(label));
}

Status SafetensorsFile::Parse(FileBytes src, std::string label, uint64_t max_header_bytes) {
  path_ = std::move(label);
  src_ = std::move(src);
  bytes_ = src_.data();
  size_ = src_.size();
  try {
    const std::string prefix = "safetensors: " + path_ + ": ";
    auto corrupt = [&](const std::string& m) { return Corrupt(prefix + m); };

    if (size_ < 8) {
      return corrupt("file is " + std::to_string(size_) +
                     " bytes, too short for the 8-byte header length");
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes_[i]) << (8 * i);
    if (n == 0) return corrupt("header length is 0 (expected a JSON object)");
    const uint64_t limit = std::min(max_header_bytes, kSafetensorsMaxHeaderBytes);
    if (n > limit) {
      return corrupt("header length " + std::to_string(n) + " exceeds the " +
                     std::to_string(limit) + "-byte limit" +
                     (limit < kSafetensorsMaxHeaderBytes ? " for this kind of file" : ""));
    }
    if (n > size_ - 8) {
      return corrupt("header length " + std::to_string(n) + " exceeds the " +
                     std::to_string(size_ - 8) +
                     " bytes after the length field (truncated file?)");
    }
    header_size_ = n;
    data_ = bytes_ + 8 + n;
    data_size_ = size_ - 8 - static_cast<size_t>(n);

    HeaderSax sax;
    const char* hb = reinterpret_cast<const char*>(bytes_ + 8);
    // nlohmann's lexer treats a NUL byte as end of input (and would accept
    // "{}\0garbage"); raw NUL is never valid JSON text, so reject it here.
    if (const void* nul = std::memchr(hb, 0, n); nul != nullptr) {
      return corrupt("header is not valid JSON: NUL byte at byte " +
                     std::to_string(static_cast<const char*>(nul) - hb) +
                     " of the header (padding must be spaces)");
    }
    // nlohmann skips a UTF-8 byte-order mark; the format has none (the
    // header must start with '{'), so a BOM is corrupt, not ignored.
    if (n >= 3 && std::memcmp(hb, "\xEF\xBB\xBF", 3) == 0) {
      return corrupt("header starts with a UTF-8 byte-order mark (EF BB BF); it must start with '{'");
    }
    const bool parsed = json::sax_parse(hb, hb + n, &sax,
                                        json::input_format_t::json,
                                        /*strict=*/true,
                                        /*ignore_comments=*/false);
    if (!parsed) {
      if (!sax.handler_error.empty()) return corrupt(sax.handler_error);
      if (sax.syntax_message.find("UTF-8") != std::string::npos) {
        return corrupt("header has invalid UTF-8 near byte " +
                       std::to_string(sax.error_position) +
                       " of the header (tensor names and metadata must be "
                       "valid UTF-8): " + sax.syntax_message);
      }
      return corrupt("header is not valid JSON (near byte " +
                     std::to_string(sax.error_position) + " of the header): " +
                     sax.syntax_message);
    }
    const json& root = sax.root;
    if (!root.is_object()) {
      return corrupt("header must be a JSON object, but it is " +
                     Describe(root));
    }

    std::vector<SafetensorsTensorInfo> tensors;
    std::map<std::string, std::string> metadata;
    for (const std::string& key : sax.top_keys) {
      const json& v = root.find(key).value();
      if (key == kMetadataKey) {
        if (!v.is_object()) {
          return corrupt("__metadata__ must be an object of string values, "
                         "but it is " + Describe(v));
        }
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (!it.value().is_string()) {
            return corrupt("__metadata__: value of key " + Q(it.key()) +
                           " must be a string, but it is " +
                           Describe(it.value()));
          }
          metadata.emplace(it.key(), it.value().get<std::string>());
        }
        continue;
      }
      const std::string t = "tensor " + Q(key) + ": ";
      if (!v.is_object()) {
        return corrupt(t + "entry must be an object with dtype, shape and "
                           "data_offsets, but it is " + Describe(v));
      }
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (it.key() != "dtype" && it.key() != "shape" &&
            it.key() != "data_offsets") {
          return corrupt(t + "unexpected field " + Q(it.key()) +
                         " (expected exactly dtype, shape, data_offsets)");
        }
      }
      for (const char* field : {"dtype", "shape", "data_offsets"}) {
        if (!v.contains(field)) {
          return corrupt(t + "missing field '" + field + "'");
        }
      }
      SafetensorsTensorInfo info;
      info.name = key;

      const json& dt = v["dtype"];
      if (!dt.is_string()) {
        return corrupt(t + "field 'dtype' must be a string, but it is " +
                       Describe(dt));
      }
      const std::string& dts = dt.get_ref<const std::string&>();
      if (!ParseDType(dts, &info.dtype)) {
        if (IsKnownUnsupportedDType(dts)) {
          return Unimplemented(prefix + t + "unsupported dtype " + Q(dts) +
                               " (attnflow supports " + kSupportedDTypes +
                               ")");
        }
        return corrupt(t + "unknown dtype " + Q(dts) + " (attnflow supports " +
                       kSupportedDTypes + ")");
      }

      const json& sh = v["shape"];
      if (!sh.is_array()) {
        return corrupt(t + "field 'shape' must be an array of non-negative "
                           "integers, but it is " + Describe(sh));
      }
      info.shape.reserve(sh.size());
      for (size_t i = 0; i < sh.size(); ++i) {
        int64_t d;
        if (!GetIndex(sh[i], &d)) {
          return corrupt(t + "shape[" + std::to_string(i) +
                         "] must be a non-negative integer, but it is " +
                         IndexProblem(sh[i]));
        }
        info.shape.push_back(d);
      }

      const json& off = v["data_offsets"];
      if (!off.is_array() || off.size() != 2) {
        return corrupt(t + "field 'data_offsets' must be an array of 2 "
                           "non-negative integers [begin, end], but it is " +
                       (off.is_array() ? "an array of " +
                                             std::to_string(off.size()) +
                                             " elements"
                                       : Describe(off)));
      }
      for (size_t i = 0; i < 2; ++i) {
        int64_t x;
        if (!GetIndex(off[i], &x)) {
          return corrupt(t + "data_offsets[" + std::to_string(i) +
                         "] must be a non-negative integer, but it is " +
                         IndexProblem(off[i]));
        }
        (i == 0 ? info.begin : info.end) = x;
      }
      const std::string offs = OffsetsString(info.begin, info.end);
      if (info.begin > info.end) {
        return corrupt(t + "data_offsets " + offs + " have begin > end");
      }
      if (static_cast<uint64_t>(info.end) > data_size_) {
        return corrupt(t + "data_offsets " + offs +
                       " extend past the end of the data buffer (" +
                       std::to_string(data_size_) + " bytes)");
      }
      const std::string desc =
          std::string(DTypeName(info.dtype)) + ShapeString(info.shape);
      int64_t need;
      if (!CheckedBytes(info.shape.data(), static_cast<int>(info.shape.size()),
                        info.dtype, &need)) {
        return corrupt(t + "byte size of " + desc + " overflows int64");
      }
      if (need != info.nbytes()) {
        return corrupt(t + "data_offsets " + offs + " give " +
                       std::to_string(info.nbytes()) + " bytes but " + desc +
                       " needs " + std::to_string(need));
      }
      tensors.push_back(std::move(info));
    }

    // Non-empty byte ranges must not overlap: sort by begin and compare
    // neighbours (any overlap implies an overlapping neighbour pair).
    std::vector<size_t> order;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].nbytes() > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const auto& x = tensors[a];
      const auto& y = tensors[b];
      if (x.begin != y.begin) return x.begin < y.begin;
      if (x.end != y.end) return x.end < y.end;
      return a < b;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const auto& a = tensors[order[k - 1]];
      const auto& b = tensors[order[k]];
      if (a.end > b.begin) {
        return corrupt("tensors " + Q(a.name) + " data_offsets " +
                       OffsetsString(a.begin, a.end) + " and " + Q(b.name) +
                       " data_offsets " + OffsetsString(b.begin, b.end) +
                       " overlap");
      }
    }

    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < tensors.size(); ++i) index.emplace(tensors[i].name, i);
    tensors_ = std::move(tensors);
    index_ = std::move(index);
    metadata_ = std::move(metadata);
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("safetensors: " + path_ +
                             ": out of memory while parsing the header");
  } catch (const std::exception& e) {
    return Corrupt("safetensors: " + path_ + ": header: " +
                   Printable(e.what(), true));
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

const SafetensorsTensorInfo* SafetensorsFile::Find(
    const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<TensorView> SafetensorsFile::Get(const std::string& name) const {
  const SafetensorsTensorInfo* info = Find(name);
  const std::string prefix = "safetensors: " + path_ + ": ";
  if (info == nullptr) {
    std::string m = prefix + "no tensor named " + Q(name) + " (the file has " +
                    std::to_string(tensors_.size()) + " tensors";
    for (size_t i = 0; i < tensors_.size() && i < 8; ++i) {
      m += (i == 0 ? ": " : ", ") + Q(tensors_[i].name);
    }
    if (tensors_.size() > 8) m += ", ...";
    return InvalidArgument(m + ")");
  }
  if (info->shape.size() > static_cast<size_t>(kMaxRank)) {
    return Unimplemented(prefix + "tensor " + Q(name) + " has rank " +
                         std::to_string(info->shape.size()) + " (" +
                         DTypeName(info->dtype) + ShapeString(info->shape) +
                         "); attnflow tensors have rank <= " +
                         std::to_string(kMaxRank));
  }
  return MakeView(const_cast<uint8_t*>(data_ + info->begin), info->dtype,
                  info->shape);
}

Result<Tensor> SafetensorsFile::Copy(const std::string& name) const {
  Result<TensorView> v = Get(name);
  if (!v.ok()) return v.status();
  const SafetensorsTensorInfo* info = Find(name);
  Result<Tensor> t = Tensor::Zeros(info->dtype, info->shape);
  if (!t.ok()) return t.status();
  if (info->nbytes() > 0) {
    std::memcpy(t.value().data<uint8_t>(), data_ + info->begin,
                static_cast<size_t>(info->nbytes()));
  }
  return t;
}

// ---------------------------------------------------------------- writer --

namespace {

using Sink = std::function<Status(const void*, size_t)>;

struct PlannedTensor {
  const std::string* name;
  TensorView view;
  int64_t nbytes;
  int64_t begin;
};

struct WritePlan {
  std::string header;  // JSON, space-padded to a multiple of 8
  std::vector<PlannedTensor> layout;  // in data order
  int64_t data_bytes = 0;
};

Status BuildPlan(const std::string& prefix,
                 const std::vector<std::pair<std::string, TensorView>>& tensors,
                 const std::map<std::string, std::string>& metadata,
                 WritePlan* plan) {
  std::unordered_set<std::string> seen;
  std::vector<PlannedTensor> items;
  items.reserve(tensors.size());
  for (const auto& [name, v] : tensors) {
    if (!IsValidUtf8(name)) {
      return InvalidArgument(prefix + "tensor name " + Q(name) +
                             " is not valid UTF-8");
    }
    if (name == kMetadataKey) {
      return InvalidArgument(prefix +
                             "'__metadata__' is reserved, not a tensor name");
    }
    if (!seen.insert(name).second) {
      return InvalidArgument(prefix + "duplicate tensor name " + Q(name));
    }
    const std::string t = "tensor " + Q(name) + ": ";
    if (v.rank < 0 || v.rank > kMaxRank) {
      return InvalidArgument(prefix + t + "invalid view rank " +
                             std::to_string(v.rank) +
                             (v.rank < 0 ? " (absent tensor)" : ""));
    }
    int64_t nbytes;
    if (!CheckedBytes(v.shape.data(), v.rank, v.dtype, &nbytes)) {
      return InvalidArgument(prefix + t + "byte size of " + v.describe() +
                             " overflows or has a negative dimension");
    }
    if (nbytes > 0 && v.data == nullptr) {
      return InvalidArgument(prefix + t + v.describe() +
                             " has elements but a null data pointer");
    }
    items.push_back({&name, v, nbytes, 0});
  }
  for (const auto& [k, val] : metadata) {
    if (!IsValidUtf8(k)) {
      return InvalidArgument(prefix + "__metadata__ key " + Q(k) +
                             " is not valid UTF-8");
    }
    if (!IsValidUtf8(val)) {
      return InvalidArgument(prefix + "__metadata__ value of key " + Q(k) +
                             " is not valid UTF-8");
    }
  }

  // Data order: decreasing element size (stable). Each tensor's byte size is a
  // multiple of its element size and sizes are powers of two, so every begin
  // is a multiple of its own element size; with the 8-aligned data start this
  // makes every tensor naturally aligned within the file.
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return DTypeSize(items[a].view.dtype) > DTypeSize(items[b].view.dtype);
  });
  int64_t off = 0;
  for (size_t i : order) {
    if (items[i].nbytes > INT64_MAX - off) {
      return InvalidArgument(prefix + "total data size overflows int64");
    }
    items[i].begin = off;
    off += items[i].nbytes;
  }

  ordered_json h = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, val] : metadata) m[k] = val;
    h[kMetadataKey] = std::move(m);
  }
  for (const PlannedTensor& p : items) {
    ordered_json e = ordered_json::object();
    e["dtype"] = DTypeName(p.view.dtype);
    e["shape"] = std::vector<int64_t>(p.view.shape.begin(),
                                      p.view.shape.begin() + p.view.rank);
    e["data_offsets"] = {p.begin, p.begin + p.nbytes};
    h[*p.name] = std::move(e);
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  if (header.size() > kSafetensorsMaxHeaderBytes) {
    return InvalidArgument(prefix + "header would be " +
                           std::to_string(header.size()) +
                           " bytes, over the " +
                           std::to_string(kSafetensorsMaxHeaderBytes) +
                           "-byte limit");
  }
  plan->header = std::move(header);
  plan->layout.clear();
  for (size_t i : order) plan->layout.push_back(items[i]);
  plan->data_bytes = off;
  return Status::Ok();
}

// Emits one view row-major (gathering strided data through a staging buffer).
Status EmitRowMajor(const TensorView& v, int64_t nbytes, const Sink& sink) {
  if (nbytes == 0) return Status::Ok();
  if (v.is_contiguous()) return sink(v.data, static_cast<size_t>(nbytes));
  const size_t es = DTypeSize(v.dtype);
  const char* base = static_cast<const char*>(v.data);
  constexpr size_t kStage = 1 << 20;
  std::vector<char> stage(kStage);
  size_t used = 0;
  const int last = v.rank - 1;  // rank >= 1 here: rank 0 is contiguous
  const int64_t inner = v.shape[last];
  const int64_t inner_stride = v.strides[last];
  int64_t idx[kMaxRank] = {0, 0, 0, 0};
  const int64_t rows = v.numel() / inner;  // inner > 0 since nbytes > 0
  for (int64_t r = 0; r < rows; ++r) {
    int64_t row_off = 0;
    for (int d = 0; d < last; ++d) row_off += idx[d] * v.strides[d];
    for (int64_t j = 0; j < inner; ++j) {
      if (used + es > kStage) {
        ATTNFLOW_RETURN_IF_ERROR(sink(stage.data(), used));
        used = 0;
      }
      std::memcpy(stage.data() + used,
                  base + (row_off + j * inner_stride) * static_cast<int64_t>(es),
                  es);
      used += es;
    }
    for (int d = last - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
  if (used > 0) ATTNFLOW_RETURN_IF_ERROR(sink(stage.data(), used));
  return Status::Ok();
}

Status Emit(const WritePlan& plan, const Sink& sink) {
  uint8_t len[8];
  const uint64_t n = plan.header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  ATTNFLOW_RETURN_IF_ERROR(sink(len, 8));
  ATTNFLOW_RETURN_IF_ERROR(sink(plan.header.data(), plan.header.size()));
  for (const PlannedTensor& p : plan.layout) {
    ATTNFLOW_RETURN_IF_ERROR(EmitRowMajor(p.view, p.nbytes, sink));
  }
  return Status::Ok();
}

}  // namespace

Status WriteSafetensors(
    const std::string& path,
    const std::vector<std::pair<std::string, TensorView>>& tensors,
    const std::map<std::string, std::string>& metadata) {
  const std::string prefix = "safetensors: " + path + ": ";
  try {
    WritePlan plan;
    ATTNFLOW_RETURN_IF_ERROR(BuildPlan(prefix, tensors, metadata, &plan));
    return WriteFileAtomic(path, [&](std::FILE* f) -> Status {
      return Emit(plan, [&](const void* p, size_t n) -> Status {
        if (std::fwrite(p, 1, n, f) != n) {
          return IoError(prefix + "write failed: " + std::strerror(errno));
        }
        return Status::Ok();
      });
    });
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(prefix + "out of memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal,
                  prefix + "unexpected exception: " + Printable(e.what(), true));
  }
}

Result<std::vector<uint8_t>> EncodeSafetensors(
    const std::vector<std::pair<std::string, TensorView>>& tensors,
    const std::map<std::string, std::string>& metadata) {
  const std::string prefix = "safetensors: <buffer>: ";
  try {
    WritePlan plan;
    ATTNFLOW_RETURN_IF_ERROR(BuildPlan(prefix, tensors, metadata, &plan));
    std::vector<uint8_t> out;
    out.reserve(8 + plan.header.size() + static_cast<size_t>(plan.data_bytes));
    ATTNFLOW_RETURN_IF_ERROR(Emit(plan, [&](const void* p, size_t n) -> Status {
      const uint8_t* b = static_cast<const uint8_t*>(p);
      out.insert(out.end(), b, b + n);
      return Status::Ok();
    }));
    return out;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(prefix + "out of memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal,
                  prefix + "unexpected exception: " + Printable(e.what(), true));
  }
}

}  // namespace attnflow
