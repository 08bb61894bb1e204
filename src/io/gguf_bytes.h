// io/gguf_bytes.h — little-endian byte appenders shared by the two GGUF
// writers (WriteGgufFile in io/gguf.cc, the streaming WriteGguf in
// io/gguf_writer.cc).
//
// Invariants: values are appended in host order, which GGUF requires to be
// little-endian (the project builds only for little-endian targets); a
// string is its u64 length followed by its bytes (no terminator).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace attnflow::gguf_bytes {

template <typename T>
void Put(std::vector<uint8_t>& b, T v) {
  const size_t o = b.size();
  b.resize(o + sizeof(T));
  std::memcpy(b.data() + o, &v, sizeof(T));
}

inline void PutStr(std::vector<uint8_t>& b, const std::string& s) {
  Put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

}  // namespace attnflow::gguf_bytes
