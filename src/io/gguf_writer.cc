// gguf_writer.cc — streaming GGUF v3 writer (WriteGguf) and whole-file
// quantisation (QuantizeGguf) with llama.cpp's tensor-type mixture rules
// (ChooseQuantTypes; docs/quantize.md states them).
//
// Invariants: a written file is complete or absent (WriteFileAtomic); it
// holds at most one tensor's bytes in memory; every tensor offset is a
// multiple of the alignment and the data section starts at the header end
// rounded up to it (what GgufFile::Parse checks). Quantised bytes depend only
// on the input file and the mix: rows are independent, so the thread count
// only changes who computes which rows.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "attnflow/file_util.h"
#include "attnflow/gguf.h"
#include "attnflow/threading.h"
#include "io/gguf_bytes.h"

namespace attnflow {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"

using gguf_bytes::Put;
using gguf_bytes::PutStr;

std::string FormatFloat(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", static_cast<double>(v));
  return b;
}

// Encodes element i of v (scalar when !v.is_array) of type t.
Status PutElem(std::vector<uint8_t>& b, const GgufValue& v, GgufType t, size_t i, int depth,
               const std::string& key);

Status PutValue(std::vector<uint8_t>& b, const GgufValue& v, int depth, const std::string& key) {
  if (!v.is_array) return PutElem(b, v, v.type, 0, depth, key);
  if (depth >= kGgufMaxArrayDepth) return InvalidArgument("gguf writer: '" + key + "': arrays nest too deep");
  Put<uint32_t>(b, static_cast<uint32_t>(v.type));
  Put<uint64_t>(b, v.size());
  for (size_t i = 0; i < v.size(); ++i) ATTNFLOW_RETURN_IF_ERROR(PutElem(b, v, v.type, i, depth, key));
  return Status::Ok();
}

Status PutElem(std::vector<uint8_t>& b, const GgufValue& v, GgufType t, size_t i, int depth,
               const std::string& key) {
  auto need = [&](size_t n) -> Status {
    return i < n ? Status::Ok()
                 : InvalidArgument("gguf writer: '" + key + "': value of type " + GgufTypeName(t) +
                                   " has no element " + std::to_string(i));
  };
  // An integer element stored at its GGUF width (two's complement for the
  // signed types).
  auto put_int = [&](auto width) -> Status {
    using U = decltype(width);
    ATTNFLOW_RETURN_IF_ERROR(need(v.ints.size()));
    Put<U>(b, static_cast<U>(v.ints[i]));
    return Status::Ok();
  };
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return put_int(uint8_t{});
    case GgufType::kU16: case GgufType::kI16: return put_int(uint16_t{});
    case GgufType::kU32: case GgufType::kI32: return put_int(uint32_t{});
    case GgufType::kU64: case GgufType::kI64: return put_int(uint64_t{});
    case GgufType::kF32:
      ATTNFLOW_RETURN_IF_ERROR(need(v.floats.size()));
      Put<float>(b, static_cast<float>(v.floats[i]));
      return Status::Ok();
    case GgufType::kF64:
      ATTNFLOW_RETURN_IF_ERROR(need(v.floats.size()));
      Put<double>(b, v.floats[i]);
      return Status::Ok();
    case GgufType::kString:
      ATTNFLOW_RETURN_IF_ERROR(need(v.strings.size()));
      PutStr(b, v.strings[i]);
      return Status::Ok();
    case GgufType::kArray:
      ATTNFLOW_RETURN_IF_ERROR(need(v.arrays.size()));
      return PutValue(b, v.arrays[i], depth + 1, key);
  }
  return InvalidArgument("gguf writer: '" + key + "': unknown value type " +
                         std::to_string(static_cast<uint32_t>(t)));
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool Has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// ggml_n_dims: dims up to the last one > 1.
int NDims(const std::vector<int64_t>& ne) {
  int n = 1;
  for (int i = 0; i < static_cast<int>(ne.size()); ++i)
    if (ne[static_cast<size_t>(i)] > 1) n = i + 1;
  return n;
}

// llama.cpp tensor_allows_quantization (the parts that apply to the model
// families attnflow loads; multimodal/RWKV/Mamba names are listed too).
bool AllowsQuantization(const std::string& name, const std::vector<int64_t>& ne) {
  if (NDims(ne) < 2) return false;
  if (!EndsWith(name, "weight")) return false;
  for (const char* skip : {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
                           "ssm_conv1d", "shortconv.conv.weight", "time_mix_", "attn_rel_b.weight",
                           ".position_embd", ".rel_pos", ".patch_embd", ".patch_merger"}) {
    if (Has(name, skip)) return false;
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

enum class Cat { kTokenEmbd, kOutput, kAttnV, kFfnDown, kOther };
Cat Category(const std::string& n) {
  if (n == "output.weight") return Cat::kOutput;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Cat::kTokenEmbd;
  if (Has(n, "attn_qkv.weight") || Has(n, "attn_kv_b.weight") || Has(n, "attn_v.weight")) return Cat::kAttnV;
  if (Has(n, "ffn_down")) return Cat::kFfnDown;
  return Cat::kOther;
}

bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

const char* TypeName(GgmlType t) { return GgmlTypeName(static_cast<uint32_t>(t)); }

// Every scale of these formats (Q8_0 Q4_0 Q5_0: max|x|/levels; Q4_1 Q5_1 and
// the K-quants: range/levels and the minimum; Q6_K: max|x|/32, then /128) is
// at most the row's range 2*max|x|, and F16 stores x itself: a row whose
// weights stay within half the float16 range cannot overflow a float16
// scale, and needs no read-back check.
constexpr double kF16Max = 65504.0;
bool MayOverflowF16(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(x[i]) > kF16Max / 2) return true;
  return false;
}

// A quantised row that may overflow is kept only if it reads back as finite
// numbers (llama.cpp's ggml_validate_row_data checks the same: no inf/NaN
// scale) within half its largest weight (a K-quant search whose float16
// scale overflowed can return a zeroed row, finite but not the weights).
// `x` is the source row (finite: QuantizeRow refuses NaN/inf), `back` its
// quantised form read back.
Status CheckRepresentable(const float* x, const float* back, int64_t n, GgmlType to) {
  int64_t worst = 0, bad = -1;
  double err = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(x[worst])) worst = i;
    if (!std::isfinite(back[i])) {
      if (bad < 0) bad = i;
      continue;
    }
    err = std::max(err, std::fabs(static_cast<double>(back[i]) - x[i]));
  }
  const double amax = std::fabs(static_cast<double>(x[worst]));
  if (bad < 0 && err <= 0.5 * amax) return Status::Ok();
  std::string what = bad >= 0 ? "element " + std::to_string(bad) + " would read back as " +
                                    FormatFloat(back[bad])
                              : "it would read back up to " + FormatFloat(static_cast<float>(err)) +
                                    " away from the weights";
  return OutOfRange("the largest weight " + FormatFloat(x[worst]) + " (element " +
                    std::to_string(worst) + ") is too large for " + TypeName(to) +
                    ": its float16 scales overflow and " + what +
                    " (llama.cpp's quantize refuses such a row too); scale the weights down or "
                    "keep this tensor in F32/BF16");
}

}  // namespace

bool ParseQuantMix(std::string_view name, QuantMix* mix) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "q4_0") *mix = QuantMix::kQ4_0;
  else if (s == "q8_0") *mix = QuantMix::kQ8_0;
  else if (s == "q4_k_m") *mix = QuantMix::kQ4_K_M;
  else if (s == "q5_k_m") *mix = QuantMix::kQ5_K_M;
  else if (s == "q6_k") *mix = QuantMix::kQ6_K;
  else return false;
  return true;
}

Result<std::vector<GgmlType>> ChooseQuantTypes(QuantMix mix, const std::vector<std::string>& names,
                                               const std::vector<std::vector<int64_t>>& ne,
                                               const std::vector<GgmlType>& types) {
  const GgmlType base = mix == QuantMix::kQ4_0   ? GgmlType::kQ4_0
                        : mix == QuantMix::kQ8_0 ? GgmlType::kQ8_0
                        : mix == QuantMix::kQ4_K_M ? GgmlType::kQ4_K
                        : mix == QuantMix::kQ5_K_M ? GgmlType::kQ5_K
                                                   : GgmlType::kQ6_K;
  const bool km = mix == QuantMix::kQ4_K_M || mix == QuantMix::kQ5_K_M;
  bool tied = true;
  int n_wv = 0, n_down = 0;
  for (const std::string& n : names) {
    if (n == "output.weight") tied = false;
    if (Category(n) == Cat::kAttnV) ++n_wv;
    if (Category(n) == Cat::kFfnDown) ++n_down;
  }
  int i_wv = 0, i_down = 0;
  std::vector<GgmlType> out;
  for (size_t k = 0; k < names.size(); ++k) {
    const std::string& n = names[k];
    if (!AllowsQuantization(n, ne[k])) {
      out.push_back(types[k]);
      continue;
    }
    const Cat cat = Category(n);
    GgmlType t = base;
    if (cat == Cat::kOutput || (tied && cat == Cat::kTokenEmbd)) {
      if (ne[k][0] % GgmlBlockSize(base) != 0) t = GgmlType::kQ8_0;
      else if (base != GgmlType::kQ8_0) t = GgmlType::kQ6_K;
    } else if (cat == Cat::kTokenEmbd) {
      // untied input embedding: the base type
    } else if (cat == Cat::kAttnV) {
      if (km && UseMoreBits(i_wv, n_wv)) t = GgmlType::kQ6_K;
      ++i_wv;
    } else if (cat == Cat::kFfnDown) {
      if (km && UseMoreBits(i_down, n_down)) t = GgmlType::kQ6_K;
      ++i_down;
    }
    // Shapes a type cannot hold fall back (llama.cpp tensor_type_fallback).
    if (ne[k][0] % GgmlBlockSize(t) != 0) {
      switch (t) {
        case GgmlType::kQ4_K: t = GgmlType::kQ5_0; break;
        case GgmlType::kQ5_K: t = GgmlType::kQ5_1; break;
        case GgmlType::kQ6_K: t = GgmlType::kQ8_0; break;
        default:
          return InvalidArgument("quantize: tensor '" + n + "': ne[0] = " + std::to_string(ne[k][0]) +
                                 " is not a multiple of the " + TypeName(t) + " block size " +
                                 std::to_string(GgmlBlockSize(t)) + " and " + TypeName(t) +
                                 " has no fallback type");
      }
      if (ne[k][0] % GgmlBlockSize(t) != 0) t = GgmlType::kF16;
    }
    out.push_back(t);
  }
  return out;
}

Status WriteGguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& kv,
                 const std::vector<GgufOutTensor>& tensors, uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kGgufMaxAlignment) {
    return InvalidArgument("gguf writer: " + path + ": alignment " + std::to_string(alignment) +
                           " is not a power of two of at most " +
                           std::to_string(kGgufMaxAlignment));
  }
  std::vector<uint8_t> h;
  Put<uint32_t>(h, kMagic);
  Put<uint32_t>(h, 3);
  Put<uint64_t>(h, tensors.size());
  Put<uint64_t>(h, kv.size());
  std::set<std::string> keys;
  for (const auto& [key, value] : kv) {
    if (key.empty() || !keys.insert(key).second) {
      return InvalidArgument("gguf writer: " + path + ": metadata key '" + key + "' is empty or repeated");
    }
    if (key == "general.alignment" &&
        (value.is_array || value.type != GgufType::kU32 || value.ints.size() != 1 ||
         value.ints[0] != static_cast<int64_t>(alignment))) {
      return InvalidArgument("gguf writer: " + path +
                             ": metadata 'general.alignment' must be the u32 " +
                             std::to_string(alignment) + " the data is written at");
    }
    PutStr(h, key);
    Put<uint32_t>(h, static_cast<uint32_t>(value.is_array ? GgufType::kArray : value.type));
    ATTNFLOW_RETURN_IF_ERROR(PutValue(h, value, 0, key));
  }
  std::set<std::string> names;
  std::vector<uint64_t> nbytes;
  uint64_t off = 0;
  for (const GgufOutTensor& t : tensors) {
    const std::string field = "gguf writer: " + path + ": tensor '" + t.name + "': ";
    if (t.name.empty() || t.name.size() >= 64 || !names.insert(t.name).second) {
      return InvalidArgument(field + "name is empty, longer than 63 bytes or repeated");
    }
    if (t.ne.empty() || t.ne.size() > static_cast<size_t>(kGgufMaxDims)) {
      return InvalidArgument(field + std::to_string(t.ne.size()) + " dims (1..4 allowed)");
    }
    int64_t row = 0, rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    if (!GgmlRowBytes(t.type, t.ne[0], &row)) {
      return InvalidArgument(field + "ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                             TypeName(t.type) + " block size " + std::to_string(GgmlBlockSize(t.type)));
    }
    PutStr(h, t.name);
    Put<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) Put<uint64_t>(h, static_cast<uint64_t>(n));
    Put<uint32_t>(h, static_cast<uint32_t>(t.type));
    Put<uint64_t>(h, off);
    nbytes.push_back(static_cast<uint64_t>(row) * static_cast<uint64_t>(rows));
    off += (nbytes.back() + alignment - 1) / alignment * alignment;
  }
  h.resize((h.size() + alignment - 1) / alignment * alignment, 0);
  return WriteFileAtomic(path, [&](std::FILE* f) -> Status {
    if (std::fwrite(h.data(), 1, h.size(), f) != h.size()) return IoError("gguf writer: " + path + ": short write");
    std::vector<uint8_t> buf;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const uint64_t padded = (nbytes[i] + alignment - 1) / alignment * alignment;
      buf.assign(static_cast<size_t>(padded), 0);
      ATTNFLOW_RETURN_IF_ERROR(tensors[i].fill(buf.data(), nbytes[i]));
      if (std::fwrite(buf.data(), 1, buf.size(), f) != buf.size()) {
        return IoError("gguf writer: " + path + ": short write in tensor '" + tensors[i].name + "'");
      }
    }
    return Status::Ok();
  });
}

Status QuantizeGguf(const std::string& in, const std::string& out, QuantMix mix, int threads,
                    QuantizeStats* stats) {
  ATTNFLOW_RETURN_IF_ERROR(CheckOutputIsNotInput("quantize", in, out));
  Result<GgufFile> fr = GgufFile::Open(in);
  if (!fr.ok()) return fr.status();
  const GgufFile& f = *fr;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> ne;
  std::vector<GgmlType> types;
  for (const GgufTensorInfo& t : f.tensors()) {
    names.push_back(t.name);
    ne.push_back(t.ne);
    types.push_back(t.type);
  }
  Result<std::vector<GgmlType>> chosen = ChooseQuantTypes(mix, names, ne, types);
  if (!chosen.ok()) return chosen.status();

  std::vector<std::pair<std::string, GgufValue>> kv;
  GgufValue u32;
  u32.type = GgufType::kU32;
  bool have_ft = false, have_qv = false;
  for (const std::string& key : f.keys()) {
    GgufValue v = *f.Find(key);
    if (key == "general.file_type") {
      v = u32;
      v.ints = {static_cast<int64_t>(mix)};
      have_ft = true;
    } else if (key == "general.quantization_version") {
      v = u32;
      v.ints = {2};
      have_qv = true;
    } else if (key == "general.alignment") {  // the output is written at 32
      v = u32;
      v.ints = {static_cast<int64_t>(kGgufDefaultAlignment)};
    }
    kv.emplace_back(key, std::move(v));
  }
  if (!have_qv) {
    kv.emplace_back("general.quantization_version", u32);
    kv.back().second.ints = {2};
  }
  if (!have_ft) {
    kv.emplace_back("general.file_type", u32);
    kv.back().second.ints = {static_cast<int64_t>(mix)};
  }

  QuantizeStats st;
  ThreadPool pool(threads);
  std::vector<GgufOutTensor> outs;
  for (size_t k = 0; k < f.tensors().size(); ++k) {
    const GgufTensorInfo& t = f.tensors()[k];
    const GgmlType to = (*chosen)[k];
    ++st.tensors;
    st.bytes_in += t.nbytes;
    st.type_counts[TypeName(to)]++;
    GgufOutTensor o{t.name, to, t.ne, nullptr};
    if (to == t.type) {
      ++st.copied;
      o.fill = [&f, &t](uint8_t* dst, uint64_t n) -> Status {
        if (n != t.nbytes) return Corrupt("quantize: '" + t.name + "': size mismatch");
        std::memcpy(dst, f.TensorData(t), static_cast<size_t>(n));
        return Status::Ok();
      };
    } else {
      ++st.requantized;
      o.fill = [&f, &t, to, &pool](uint8_t* dst, uint64_t) -> Status {
        const int64_t cols = t.ne[0], rows = t.rows();
        int64_t in_row = 0, out_row = 0;
        GgmlRowBytes(t.type, cols, &in_row);
        GgmlRowBytes(to, cols, &out_row);
        // Per worker: the row as F32, and the quantised row read back.
        std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.NumWorkers()),
                                                std::vector<float>(static_cast<size_t>(2 * cols)));
        std::mutex mu;
        Status first = Status::Ok();
        // The lowest failing row is reported, whatever the thread count:
        // after a failure only rows below it still run.
        std::atomic<int64_t> first_row{rows};
        pool.ParallelFor(rows, [&](int64_t r, int worker) {
          if (r > first_row.load()) return;
          float* x = scratch[static_cast<size_t>(worker)].data();
          float* back = x + cols;
          Status s = DequantizeRow(x, f.TensorData(t) + r * in_row, t.type, cols);
          if (s.ok()) s = QuantizeRow(dst + r * out_row, x, to, cols);
          if (s.ok() && MayOverflowF16(x, cols)) {
            s = DequantizeRow(back, dst + r * out_row, to, cols);
            if (s.ok()) s = CheckRepresentable(x, back, cols, to);
          }
          if (!s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (r < first_row.load()) {
              first_row.store(r);
              first = Status(s.code(), "quantize: tensor '" + t.name + "' row " + std::to_string(r) +
                                           " (" + TypeName(t.type) + " -> " + TypeName(to) +
                                           "): " + s.message());
            }
          }
        });
        return first;
      };
    }
    int64_t row = 0, rows = 1;
    GgmlRowBytes(to, t.ne[0], &row);
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    st.bytes_out += static_cast<uint64_t>(row * rows);
    outs.push_back(std::move(o));
  }
  ATTNFLOW_RETURN_IF_ERROR(WriteGguf(out, kv, outs, kGgufDefaultAlignment));
  if (stats) *stats = st;
  return Status::Ok();
}

}  // namespace attnflow
