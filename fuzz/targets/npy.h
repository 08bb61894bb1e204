// npy.h (fuzz harness) — the .npy reader (DecodeNpy) on arbitrary bytes.
//
// Properties: a rejected file gives a Status whose message names the file
// ("fuzz.npy"); an accepted one is a rank <= 4 tensor of a supported dtype
// whose size matches the file's data exactly, and it round-trips: EncodeNpy
// of it decodes to the same dtype, shape and bytes.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "../common/fuzz_common.h"
#include "attnflow/npy.h"

namespace attnflow_fuzz {

inline void FuzzNpy(const uint8_t* data, size_t size) {
  using namespace attnflow;
  const std::vector<uint8_t> bytes(data, data + size);
  Result<Tensor> t = DecodeNpy(bytes, "fuzz.npy");
  if (!t.ok()) {
    FUZZ_CHECK(t.status().message().find("fuzz.npy") != std::string::npos,
               "error does not name the file: " + t.status().ToString());
    return;
  }
  FUZZ_CHECK(t->rank() >= 0 && t->rank() <= kMaxRank, "rank out of range");
  FUZZ_CHECK(t->nbytes() <= size, "decoded more bytes than the file holds");
  Result<std::vector<uint8_t>> enc = EncodeNpy(t->view());
  FUZZ_CHECK(enc.ok(), "re-encoding a decoded tensor failed: " + enc.status().ToString());
  Result<Tensor> back = DecodeNpy(enc.value(), "round-trip");
  FUZZ_CHECK(back.ok(), "re-encoded file rejected: " + back.status().ToString());
  FUZZ_CHECK(back->dtype() == t->dtype() && back->shape() == t->shape(), "dtype/shape changed");
  FUZZ_CHECK(back->nbytes() == t->nbytes() &&
                 (t->nbytes() == 0 || std::memcmp(back->data<uint8_t>(), t->data<uint8_t>(), t->nbytes()) == 0),
             "bytes changed in the round trip");
}

ATTNFLOW_FUZZ_REGISTER(npy, FuzzNpy);

}  // namespace attnflow_fuzz
