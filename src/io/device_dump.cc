// device_dump.cc — the AFDUMP text parser (attnflow/device_dump.h,
// docs/device-dump.md).
//
// One pass over the lines with a small state machine: outside a block, in a
// block, in a part. Lines that do not start with "AFDUMP " (after leading
// spaces) are console noise and skipped. Each stage keeps its parts as
// disjoint intervals [offset, offset + count) in a map (an overlap is found
// at the `part` line that causes it) and a count of covered elements (full
// coverage = no overlap and covered == numel). Values are written straight
// into the stage's storage; each part's FNV-1a hash is computed over the
// values' little-endian bytes as they are parsed and checked at `end`.
// Storage is allocated at the `tensor` line, after the declared elements
// have been checked against what the text can carry (see the header).
#include "attnflow/device_dump.h"

#include <charconv>
#include <cstring>
#include <map>
#include <new>

#include "attnflow/file_util.h"

namespace attnflow {
namespace {

constexpr uint32_t kFnvBasis = 0x811c9dc5u;
constexpr uint32_t kFnvPrime = 0x01000193u;
constexpr int kMaxValuesPerLine = 16;

uint32_t Fnv(uint32_t h, uint8_t byte) { return (h ^ byte) * kFnvPrime; }

// Text for messages: printable ASCII kept, other bytes as \xNN, cut at 64.
std::string Shown(std::string_view s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (o.size() >= 64) {
      o += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      o += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      o += b;
    }
  }
  return o;
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || s.size() > kDeviceDumpMaxName) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s[0])) return false;
  for (char c : s)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

// A stage name: a C identifier, or identifiers and numbers joined by '.'
// (the golden names of layers and decode steps: "layer.3.q",
// "decode.0.weights"); no empty part.
bool IsStageName(std::string_view s) {
  if (s.empty() || s.size() > kDeviceDumpMaxName) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s[0]) || s.back() == '.') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      if (s[i - 1] == '.') return false;
      continue;
    }
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

// An implementation name: printable ASCII without spaces.
bool IsImplName(std::string_view s) {
  if (s.empty() || s.size() > kDeviceDumpMaxName) return false;
  for (char c : s)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

// A non-negative decimal integer (digits only) that fits int64.
bool ParseCount(std::string_view s, int64_t* out) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

bool ParseHex8(std::string_view s, uint32_t* out) {
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    uint32_t d;
    if (c >= '0' && c <= '9')
      d = uint32_t(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = uint32_t(c - 'a' + 10);
    else
      return false;
    v = (v << 4) | d;
  }
  *out = v;
  return true;
}

// A decimal integer with an optional '-' in [lo, hi].
bool ParseInt(std::string_view s, int64_t lo, int64_t hi, int64_t* out) {
  size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
  if (i >= s.size() || s[i] < '0' || s[i] > '9') return false;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Smallest number of text characters one value of `t` takes (a space and
// the value itself).
int64_t MinChars(DType t) { return t == DType::kF32 ? 9 : 2; }

const char* DumpDTypeName(DType t) {
  return t == DType::kF32 ? "f32" : t == DType::kI8 ? "i8" : "i32";
}

struct StageState {
  std::map<int64_t, std::pair<int64_t, int64_t>> parts;  // offset -> (end, line)
  int64_t covered = 0;
};

class Parser {
 public:
  Parser(std::string_view text, const std::string& label) : text_(text), label_(label) {}

  Result<DeviceDump> Run() {
    DeviceDump dump;
    dump.label = label_;
    size_t pos = 0;
    while (pos < text_.size()) {
      size_t nl = text_.find('\n', pos);
      if (nl == std::string_view::npos) nl = text_.size();
      std::string_view line = text_.substr(pos, nl - pos);
      pos = nl + 1;
      ++line_no_;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      if (line.size() < 7 || line.substr(0, 7) != "AFDUMP ") continue;  // console noise
      Status st = Line(line.substr(7), &dump);
      if (!st.ok()) return st;
    }
    if (in_part_) {
      return Err(line_no_, "the text ends inside part '" + Stage().name + "' " +
                               std::to_string(part_offset_) + " " + std::to_string(part_count_) +
                               " (line " + std::to_string(part_line_) + "): no 'end' line");
    }
    if (block_ != nullptr) {
      return Err(line_no_, "block case=" + block_->case_name + " impl=" + block_->impl + " (line " +
                               std::to_string(block_->line) + ") never ends: no 'done " +
                               block_->case_name + "' line");
    }
    return dump;
  }

 private:
  Status Err(int64_t line, const std::string& what) const {
    return Corrupt("device dump: " + label_ + ":" + std::to_string(line) + ": " + what);
  }
  DumpStage& Stage() { return block_->stages[size_t(part_stage_)]; }

  Status Line(std::string_view rest, DeviceDump* dump) {
    std::vector<std::string_view> f;
    size_t p = 0;
    for (;;) {
      const size_t sp = rest.find(' ', p);
      f.push_back(rest.substr(p, sp == std::string_view::npos ? std::string_view::npos : sp - p));
      if (f.back().empty()) {
        return Err(line_no_,
                   "empty field: the fields of an AFDUMP line are separated by single spaces");
      }
      if (sp == std::string_view::npos) break;
      p = sp + 1;
      if (f.size() > kMaxValuesPerLine + 8) {
        return Err(line_no_, "too many fields on one line (a 'd' line carries 1 to 16 values)");
      }
    }
    const std::string_view kw = f[0];
    if (in_part_ && kw != "d" && kw != "end") {
      return Err(line_no_, "'" + Shown(kw) + "' inside part '" + Stage().name + "' " +
                               std::to_string(part_offset_) + " " + std::to_string(part_count_) +
                               " (line " + std::to_string(part_line_) +
                               "), which has no 'end' line");
    }
    if (kw == "attnflow-dump/1") return Header(f, dump);
    if (kw.substr(0, 14) == "attnflow-dump/") {
      return Err(line_no_, "unsupported dump version '" + Shown(kw) +
                               "' (this attnflow reads attnflow-dump/1)");
    }
    if (kw != "tensor" && kw != "part" && kw != "d" && kw != "end" && kw != "done") {
      return Err(line_no_, "unknown AFDUMP keyword '" + Shown(kw) +
                               "' (expected attnflow-dump/1, tensor, part, d, end or done)");
    }
    if (block_ == nullptr) {
      return Err(line_no_, "'" + std::string(kw) +
                               "' outside a block (no 'AFDUMP attnflow-dump/1' line before it)");
    }
    if (kw == "tensor") return TensorLine(f);
    if (kw == "part") return Part(f);
    if (kw == "d") return Values(f);
    if (kw == "end") return End(f);
    return Done(f);
  }

  Status Header(const std::vector<std::string_view>& f, DeviceDump* dump) {
    if (block_ != nullptr) {
      return Err(line_no_, "a new block opens while block case=" + block_->case_name +
                               " impl=" + block_->impl + " (line " + std::to_string(block_->line) +
                               ") never ended (no 'done " + block_->case_name + "' line)");
    }
    if (f.size() != 4 || f[1].substr(0, 5) != "case=" || f[2].substr(0, 5) != "kind=" ||
        f[3].substr(0, 5) != "impl=") {
      return Err(
          line_no_,
          "a block header is 'AFDUMP attnflow-dump/1 case=<NAME> kind=<KIND> impl=<IMPL>'");
    }
    const std::string_view name = f[1].substr(5), kind = f[2].substr(5), impl = f[3].substr(5);
    if (!IsIdentifier(name)) {
      return Err(line_no_, "case name '" + Shown(name) + "' is not a C identifier of 1 to " +
                               std::to_string(kDeviceDumpMaxName) + " characters");
    }
    if (!IsIdentifier(kind)) {
      return Err(line_no_, "kind '" + Shown(kind) + "' is not a C identifier (sdpa, mha, or a "
                           "model's kind such as decoder)");
    }
    if (!IsImplName(impl)) {
      return Err(line_no_, "impl '" + Shown(impl) + "' is not 1 to " +
                               std::to_string(kDeviceDumpMaxName) + " printable characters");
    }
    const std::string id = std::string(name) + " " + std::string(impl);
    if (auto it = blocks_seen_.find(id); it != blocks_seen_.end()) {
      return Err(line_no_, "block case=" + std::string(name) + " impl=" + std::string(impl) +
                               " appears twice (first at line " + std::to_string(it->second) +
                               "); a block is identified by its case and impl");
    }
    try {
      blocks_seen_.emplace(id, line_no_);
      dump->blocks.emplace_back();
      states_.clear();
      index_.clear();
    } catch (const std::bad_alloc&) {
      return ResourceExhausted("device dump: " + label_ + ": out of memory");
    }
    block_ = &dump->blocks.back();
    block_->case_name = std::string(name);
    block_->kind = std::string(kind);
    block_->impl = std::string(impl);
    block_->line = line_no_;
    return Status::Ok();
  }

  Status TensorLine(const std::vector<std::string_view>& f) {
    if (f.size() < 4) {
      return Err(line_no_, "a tensor line is 'AFDUMP tensor <STAGE> <f32|i8|i32> <RANK> <D0> ...'");
    }
    DumpStage s;
    s.line = line_no_;
    if (!IsStageName(f[1])) {
      return Err(line_no_, "stage name '" + Shown(f[1]) +
                               "' is not a C identifier (or identifiers and numbers joined by "
                               "'.') of 1 to " + std::to_string(kDeviceDumpMaxName) + " characters");
    }
    s.name = std::string(f[1]);
    if (const int64_t o = FindStage(s.name); o >= 0) {
      return Err(line_no_,
                 "stage '" + s.name + "' declared twice in block case=" + block_->case_name +
                     " (first at line " + std::to_string(block_->stages[size_t(o)].line) + ")");
    }
    if (f[2] == "f32")
      s.dtype = DType::kF32;
    else if (f[2] == "i8")
      s.dtype = DType::kI8;
    else if (f[2] == "i32")
      s.dtype = DType::kI32;
    else
      return Err(line_no_,
                 "stage '" + s.name + "': dtype '" + Shown(f[2]) + "' is not f32, i8 or i32");
    int64_t rank = 0;
    if (!ParseCount(f[3], &rank) || rank > kDeviceDumpMaxRank) {
      return Err(line_no_, "stage '" + s.name + "': rank '" + Shown(f[3]) + "' is not 0 to " +
                               std::to_string(kDeviceDumpMaxRank));
    }
    if (f.size() != size_t(4 + rank)) {
      return Err(line_no_, "stage '" + s.name + "': rank " + std::to_string(rank) + " needs " +
                               std::to_string(rank) + " dimensions, the line has " +
                               std::to_string(f.size() - 4));
    }
    for (int64_t i = 0; i < rank; ++i) {
      int64_t d = 0;
      if (!ParseCount(f[size_t(4 + i)], &d)) {
        return Err(line_no_, "stage '" + s.name + "': dimension " + std::to_string(i) + " '" +
                                 Shown(f[size_t(4 + i)]) +
                                 "' is not a non-negative decimal integer");
      }
      s.shape.push_back(d);
    }
    int64_t n = 0;
    if (!CheckedNumel(s.shape.data(), int(rank), &n)) {
      return Err(line_no_, "stage '" + s.name + "': shape " + ShapeString(s.shape) +
                               " has more elements than 2^63");
    }
    // What the text can carry: every value takes MinChars characters.
    const int64_t chars = int64_t(text_.size());
    if (n > (chars - declared_chars_) / MinChars(s.dtype)) {
      return Err(line_no_, "stage '" + s.name + "': shape " + ShapeString(s.shape) + " declares " +
                               std::to_string(n) + " " + DumpDTypeName(s.dtype) +
                               " values, more than the " + std::to_string(chars) +
                               " bytes of the dump can carry");
    }
    declared_chars_ += n * MinChars(s.dtype);
    try {
      if (s.dtype == DType::kF32)
        s.f32.assign(size_t(n), 0.0f);
      else if (s.dtype == DType::kI8)
        s.i8.assign(size_t(n), 0);
      else
        s.i32.assign(size_t(n), 0);
      index_.emplace(s.name, block_->stages.size());
      block_->stages.push_back(std::move(s));
      states_.emplace_back();
    } catch (const std::bad_alloc&) {
      return ResourceExhausted("device dump: " + label_ + ":" + std::to_string(line_no_) +
                               ": out of memory for stage '" + std::string(f[1]) + "'");
    }
    return Status::Ok();
  }

  // The index of the stage named `name` in the open block, or -1.
  int64_t FindStage(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? -1 : int64_t(it->second);
  }

  Status Part(const std::vector<std::string_view>& f) {
    if (f.size() != 4)
      return Err(line_no_, "a part line is 'AFDUMP part <STAGE> <OFFSET> <COUNT>'");
    const int64_t si = FindStage(f[1]);
    if (si < 0) {
      return Err(line_no_, "part of stage '" + Shown(f[1]) +
                               "', which block case=" + block_->case_name +
                               " has not declared (no 'tensor' line before it)");
    }
    const DumpStage& s = block_->stages[size_t(si)];
    int64_t off = 0, count = 0;
    if (!ParseCount(f[2], &off) || !ParseCount(f[3], &count)) {
      return Err(line_no_, "part of stage '" + s.name + "': offset '" + Shown(f[2]) +
                               "' and count '" + Shown(f[3]) +
                               "' must be non-negative decimal integers");
    }
    const int64_t n = s.numel();
    if (off > n || count > n - off) {
      return Err(line_no_, "part " + std::to_string(off) + " " + std::to_string(count) +
                               " lies outside stage '" + s.name + "' " + ShapeString(s.shape) +
                               " (" + std::to_string(n) + " elements)");
    }
    StageState& st = states_[size_t(si)];
    if (count > 0) {
      auto it = st.parts.upper_bound(off);
      const int64_t end = off + count;
      int64_t clash = -1, clash_off = 0, clash_end = 0;
      if (it != st.parts.end() && it->first < end) {
        clash = it->second.second, clash_off = it->first, clash_end = it->second.first;
      }
      if (it != st.parts.begin()) {
        auto prev = std::prev(it);
        if (prev->second.first > off) {
          clash = prev->second.second, clash_off = prev->first, clash_end = prev->second.first;
        }
      }
      if (clash >= 0) {
        return Err(line_no_, "part " + std::to_string(off) + " " + std::to_string(count) +
                                 " of stage '" + s.name + "' overlaps the part of elements [" +
                                 std::to_string(clash_off) + ", " + std::to_string(clash_end) +
                                 ") at line " + std::to_string(clash) +
                                 " (every element is written exactly once)");
      }
      try {
        st.parts.emplace(off, std::make_pair(end, line_no_));
      } catch (const std::bad_alloc&) {
        return ResourceExhausted("device dump: " + label_ + ": out of memory");
      }
      st.covered += count;
    }
    in_part_ = true;
    part_stage_ = si;
    part_offset_ = off;
    part_count_ = count;
    part_line_ = line_no_;
    part_got_ = 0;
    part_hash_ = kFnvBasis;
    return Status::Ok();
  }

  Status Values(const std::vector<std::string_view>& f) {
    if (!in_part_) return Err(line_no_, "a 'd' line outside a part (no open 'part' line)");
    DumpStage& s = Stage();
    const size_t nv = f.size() - 1;
    if (nv < 1 || nv > size_t(kMaxValuesPerLine)) {
      return Err(line_no_, "a 'd' line carries 1 to 16 values, this one " + std::to_string(nv));
    }
    if (part_got_ + int64_t(nv) > part_count_) {
      return Err(line_no_, "more values than the count of part '" + s.name + "' " +
                               std::to_string(part_offset_) + " " + std::to_string(part_count_) +
                               " (line " + std::to_string(part_line_) +
                               "): " + std::to_string(part_got_ + int64_t(nv)) + " so far");
    }
    for (size_t i = 1; i <= nv; ++i) {
      const std::string_view v = f[i];
      const size_t at = size_t(part_offset_ + part_got_);
      uint32_t bits = 0;
      int nbytes = 4;
      if (s.dtype == DType::kF32) {
        if (!ParseHex8(v, &bits)) {
          return Err(line_no_,
                     "f32 value '" + Shown(v) + "' of stage '" + s.name +
                         "' is not 8 lowercase hexadecimal digits (the IEEE-754 bit pattern)");
        }
        std::memcpy(&s.f32[at], &bits, 4);
      } else {
        const bool i8 = s.dtype == DType::kI8;
        int64_t x = 0;
        if (!ParseInt(v, i8 ? -128 : INT32_MIN, i8 ? 127 : INT32_MAX, &x)) {
          return Err(line_no_, std::string(i8 ? "i8" : "i32") + " value '" + Shown(v) +
                                   "' of stage '" + s.name + "' is not a decimal integer in [" +
                                   (i8 ? "-128, 127" : "-2147483648, 2147483647") + "]");
        }
        if (i8) {
          s.i8[at] = static_cast<int8_t>(x);
          bits = static_cast<uint8_t>(static_cast<int8_t>(x));
          nbytes = 1;
        } else {
          s.i32[at] = static_cast<int32_t>(x);
          bits = static_cast<uint32_t>(static_cast<int32_t>(x));
        }
      }
      for (int b = 0; b < nbytes; ++b) part_hash_ = Fnv(part_hash_, uint8_t(bits >> (8 * b)));
      ++part_got_;
    }
    return Status::Ok();
  }

  Status End(const std::vector<std::string_view>& f) {
    if (!in_part_) return Err(line_no_, "an 'end' line without an open part");
    DumpStage& s = Stage();
    const std::string open = "'" + s.name + "' " + std::to_string(part_offset_) + " " +
                             std::to_string(part_count_) + " (line " + std::to_string(part_line_) +
                             ")";
    int64_t off = -1, count = -1;
    uint32_t fnv = 0;
    if (f.size() != 5 || f[1] != s.name || !ParseCount(f[2], &off) || !ParseCount(f[3], &count) ||
        off != part_offset_ || count != part_count_) {
      return Err(line_no_, "this 'end' line does not repeat the open part " + open +
                               " as 'AFDUMP end <STAGE> <OFFSET> <COUNT> <FNV>'");
    }
    if (!ParseHex8(f[4], &fnv)) {
      return Err(line_no_, "checksum '" + Shown(f[4]) + "' of part " + open +
                               " is not 8 lowercase hexadecimal digits");
    }
    if (part_got_ != part_count_) {
      return Err(line_no_, "part " + open + " ends after " + std::to_string(part_got_) +
                               " values, its count is " + std::to_string(part_count_));
    }
    if (fnv != part_hash_) {
      char b[160];
      std::snprintf(b, sizeof(b),
                    "checksum mismatch: the values hash to %08x, the line says %08x "
                    "(characters lost or changed on the wire)",
                    part_hash_, fnv);
      return Err(line_no_, "part " + open + ": " + b);
    }
    in_part_ = false;
    return Status::Ok();
  }

  Status Done(const std::vector<std::string_view>& f) {
    if (f.size() != 2 || f[1] != block_->case_name) {
      return Err(line_no_, "'done' must name the open block: 'AFDUMP done " + block_->case_name +
                               "' (block at line " + std::to_string(block_->line) + ")");
    }
    for (size_t i = 0; i < block_->stages.size(); ++i) {
      const DumpStage& s = block_->stages[i];
      const StageState& st = states_[i];
      if (st.covered == s.numel()) continue;
      int64_t gap = 0;  // first element no part covers
      for (const auto& [o, e] : st.parts) {
        if (o > gap) break;
        gap = e.first;
      }
      return Err(line_no_,
                 "stage '" + s.name + "' (line " + std::to_string(s.line) + ") has " +
                     std::to_string(s.numel() - st.covered) + " of " + std::to_string(s.numel()) +
                     " elements never written (the first: flat index " + std::to_string(gap) + ")");
    }
    block_->done_line = line_no_;
    block_ = nullptr;
    return Status::Ok();
  }

  std::string_view text_;
  const std::string& label_;
  int64_t line_no_ = 0;
  DumpBlock* block_ = nullptr;                        // the open block
  std::vector<StageState> states_;                    // parallel to block_->stages
  std::map<std::string, size_t, std::less<>> index_;  // stage name -> index in block_
  std::map<std::string, int64_t> blocks_seen_;        // "case impl" -> header line
  int64_t declared_chars_ = 0;                        // sum of numel * MinChars over the dump
  bool in_part_ = false;
  int64_t part_stage_ = 0, part_offset_ = 0, part_count_ = 0, part_line_ = 0, part_got_ = 0;
  uint32_t part_hash_ = kFnvBasis;
};

}  // namespace

int64_t DumpStage::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked when the stage was declared
  return n;
}

TensorView DumpStage::view() const {
  if (shape.size() > size_t(kMaxRank)) return TensorView();
  const void* data = dtype == DType::kF32  ? static_cast<const void*>(f32.data())
                     : dtype == DType::kI8 ? static_cast<const void*>(i8.data())
                                           : static_cast<const void*>(i32.data());
  return MakeView(const_cast<void*>(data), dtype, shape);
}

bool LooksLikeDeviceDump(std::string_view text) {
  // Any version: the parser then names an unsupported one.
  constexpr std::string_view kPrefix = "AFDUMP attnflow-dump/";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    size_t b = pos;
    while (b < nl && text[b] == ' ') ++b;
    if (text.substr(b, nl - b).substr(0, kPrefix.size()) == kPrefix) return true;
    pos = nl + 1;
  }
  return false;
}

Result<DeviceDump> ParseDeviceDump(std::string_view text, const std::string& label) {
  return Parser(text, label).Run();
}

Result<DeviceDump> ReadDeviceDump(const std::string& path) {
  Result<FileBytes> f = FileBytes::Map(path, "device dump: " + path + ": ", "device dump");
  if (!f.ok()) return f.status();
  return ParseDeviceDump(std::string_view(reinterpret_cast<const char*>(f->data()), f->size()),
                         path);
}

Result<const DumpBlock*> SelectDumpBlock(const DeviceDump& dump, const std::string& case_name,
                                         const std::string& impl) {
  std::vector<const DumpBlock*> hit;
  std::string all;
  for (const DumpBlock& b : dump.blocks) {
    if ((case_name.empty() || b.case_name == case_name) && (impl.empty() || b.impl == impl))
      hit.push_back(&b);
    if (&b - dump.blocks.data() < 16) {
      all += (all.empty() ? "" : ", ") + std::string("case=") + b.case_name + " impl=" + b.impl +
             " (line " + std::to_string(b.line) + ")";
    } else if (&b - dump.blocks.data() == 16) {
      all += ", ...";
    }
  }
  if (hit.size() == 1) return hit[0];
  const std::string where = "device dump: " + dump.label + ": ";
  if (dump.blocks.empty()) return InvalidArgument(where + "holds no block");
  std::string asked;
  if (!case_name.empty()) asked += "case=" + case_name;
  if (!impl.empty()) asked += std::string(asked.empty() ? "" : " ") + "impl=" + impl;
  if (hit.empty()) {
    return InvalidArgument(where + "no block with " + asked + "; the dump holds " +
                           std::to_string(dump.blocks.size()) + " block(s): " + all);
  }
  return InvalidArgument(where + std::to_string(hit.size()) + " blocks match" +
                         (asked.empty() ? "" : " " + asked) +
                         "; pick one by case and implementation (verify: --case NAME "
                         "--device-impl IMPL): " +
                         all);
}

}  // namespace attnflow
