// safetensors.h (fuzz harness) — the safetensors reader on arbitrary bytes.
//
// Input: a whole file image, fed to SafetensorsFile::FromBuffer.
// Properties checked beyond "no crash, no sanitizer report":
//  * a rejected file gives kCorrupt, kUnimplemented or kResourceExhausted
//    with a message that starts with "safetensors: <label>: ";
//  * an accepted file satisfies every invariant of attnflow/safetensors.h,
//    re-checked here independently: unique valid-UTF-8 names, dtype size x
//    shape == byte range, ranges inside the data buffer, no two non-empty
//    ranges overlap, metadata valid UTF-8, header + data sizes add up;
//  * Get() of every rank <= 4 tensor returns a view of exactly those bytes,
//    Copy() returns the same bytes, rank > 4 gives kUnimplemented;
//  * re-encoding the accepted tensors with EncodeSafetensors and reading the
//    result back gives the same names, dtypes, shapes, bytes and metadata.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "attnflow/safetensors.h"
#include "../common/fuzz_common.h"

namespace attnflow_fuzz {

inline void FuzzSafetensors(const uint8_t* data, size_t size) {
  using namespace attnflow;
  const std::string label = "fuzz.safetensors";
  Result<SafetensorsFile> r = SafetensorsFile::FromBuffer(data, size, label);
  if (!r.ok()) {
    const Status& st = r.status();
    FUZZ_CHECK(st.code() == StatusCode::kCorrupt ||
                   st.code() == StatusCode::kUnimplemented ||
                   st.code() == StatusCode::kResourceExhausted,
               "unexpected status " + st.ToString());
    FUZZ_CHECK(st.message().rfind("safetensors: " + label + ": ", 0) == 0,
               "message does not name the file: " + st.message());
    return;
  }
  const SafetensorsFile& f = r.value();
  FUZZ_CHECK(size >= 8, "accepted a file shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(data[i]) << (8 * i);
  FUZZ_CHECK(f.header_size() == n, "header_size differs from the u64 prefix");
  FUZZ_CHECK(n <= size - 8, "header length beyond the file was accepted");
  FUZZ_CHECK(f.data_size() == size - 8 - n, "data_size does not add up");

  const auto& ts = f.tensors();
  std::vector<std::string> names;
  for (const auto& t : ts) {
    FUZZ_CHECK(IsUtf8(t.name), "accepted a non-UTF-8 tensor name");
    FUZZ_CHECK(t.name != "__metadata__", "__metadata__ accepted as a tensor");
    FUZZ_CHECK(0 <= t.begin && t.begin <= t.end &&
                   static_cast<uint64_t>(t.end) <= f.data_size(),
               "tensor '" + t.name + "' range outside the data buffer");
    // dtype size x shape, computed here in 128-bit arithmetic.
    unsigned __int128 need = DTypeSize(t.dtype);
    bool big = false;
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0, "negative dimension accepted");
      need *= static_cast<unsigned __int128>(d);
      if (need > static_cast<unsigned __int128>(INT64_MAX)) big = true, need = 0;
    }
    FUZZ_CHECK(!big || std::count(t.shape.begin(), t.shape.end(), 0) > 0,
               "byte size overflowing int64 accepted for '" + t.name + "'");
    FUZZ_CHECK(need == static_cast<unsigned __int128>(t.end - t.begin),
               "byte range of '" + t.name + "' does not match dtype x shape");
    FUZZ_CHECK(f.Has(t.name) && f.Find(t.name) == &t, "index broken");
    names.push_back(t.name);
  }
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  FUZZ_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
             "duplicate tensor names accepted");
  FUZZ_CHECK(f.names() == names, "names() differs from tensors() order");
  for (size_t a = 0; a < ts.size(); ++a) {
    for (size_t b = a + 1; b < ts.size() && b < a + 64; ++b) {
      if (ts[a].nbytes() == 0 || ts[b].nbytes() == 0) continue;
      FUZZ_CHECK(ts[a].end <= ts[b].begin || ts[b].end <= ts[a].begin,
                 "overlapping tensors accepted: '" + ts[a].name + "', '" +
                     ts[b].name + "'");
    }
  }
  for (const auto& [k, v] : f.metadata()) {
    FUZZ_CHECK(IsUtf8(k) && IsUtf8(v), "non-UTF-8 metadata accepted");
  }

  const uint8_t* data_start = data + 8 + n;
  std::vector<std::pair<std::string, TensorView>> views;
  size_t copied_bytes = 0;
  for (const auto& t : ts) {
    Result<TensorView> v = f.Get(t.name);
    if (t.shape.size() > static_cast<size_t>(kMaxRank)) {
      FUZZ_CHECK(!v.ok() && v.status().code() == StatusCode::kUnimplemented,
                 "rank > 4 tensor handed out");
      continue;
    }
    FUZZ_CHECK(v.ok(), "Get failed on an accepted tensor: " + v.status().ToString());
    const TensorView& tv = v.value();
    FUZZ_CHECK(tv.rank == static_cast<int>(t.shape.size()) && tv.dtype == t.dtype,
               "Get view rank/dtype mismatch");
    FUZZ_CHECK(tv.is_contiguous(), "Get view is not contiguous");
    const size_t nb = static_cast<size_t>(t.nbytes());
    if (nb > 0) {
      FUZZ_CHECK(std::memcmp(tv.data, data_start + t.begin, nb) == 0,
                 "Get view points at the wrong bytes");
    }
    // Copy() allocates; keep the total bounded (the data is inside the input,
    // so this only skips copies on very large inputs).
    if (copied_bytes + nb <= (size_t{8} << 20)) {
      copied_bytes += nb;
      Result<Tensor> c = f.Copy(t.name);
      FUZZ_CHECK(c.ok(), "Copy failed: " + c.status().ToString());
      FUZZ_CHECK(c->nbytes() == nb, "Copy has the wrong size");
      if (nb > 0) {
        FUZZ_CHECK(std::memcmp(c->data<uint8_t>(), data_start + t.begin, nb) == 0,
                   "Copy has the wrong bytes");
      }
    }
    views.emplace_back(t.name, tv);
  }
  FUZZ_CHECK(!f.Get("\xff no such tensor").ok(), "Get of a missing name succeeded");

  // Round trip through the writer.
  Result<std::vector<uint8_t>> enc = EncodeSafetensors(views, f.metadata());
  FUZZ_CHECK(enc.ok(), "re-encoding an accepted file failed: " + enc.status().ToString());
  Result<SafetensorsFile> back = SafetensorsFile::FromBuffer(std::move(enc).value());
  FUZZ_CHECK(back.ok(), "re-encoded file rejected: " + back.status().ToString());
  FUZZ_CHECK(back->metadata() == f.metadata(), "metadata changed in the round trip");
  FUZZ_CHECK(back->tensors().size() == views.size(), "tensor count changed");
  for (const auto& [name, tv] : views) {
    const SafetensorsTensorInfo* a = f.Find(name);
    const SafetensorsTensorInfo* b = back->Find(name);
    FUZZ_CHECK(b != nullptr, "tensor '" + name + "' lost in the round trip");
    FUZZ_CHECK(a->dtype == b->dtype && a->shape == b->shape,
               "dtype/shape changed in the round trip");
    FUZZ_CHECK(a->nbytes() == b->nbytes(), "size changed in the round trip");
    Result<TensorView> bv = back->Get(name);
    FUZZ_CHECK(bv.ok(), "round trip Get failed");
    if (a->nbytes() > 0) {
      FUZZ_CHECK(std::memcmp(bv->data, tv.data, static_cast<size_t>(a->nbytes())) == 0,
                 "bytes changed in the round trip");
    }
  }
}

ATTNFLOW_FUZZ_REGISTER(safetensors, FuzzSafetensors);

}  // namespace attnflow_fuzz
