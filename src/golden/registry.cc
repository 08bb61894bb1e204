// registry.cc — the one table of golden kinds (attnflow/golden.h,
// GoldenKinds). Adding a kind means adding its row here; golden.cc looks
// kinds up only through FindGoldenKind.
#include <string>
#include <vector>

#include "attnflow/golden.h"
#include "attnflow/nn_golden.h"

namespace attnflow {

const std::vector<GoldenKind>& GoldenKinds() {
  static const std::vector<GoldenKind> kinds = [] {
    std::vector<GoldenKind> k = {{"sdpa", "attention", nullptr}, {"mha", "attention", nullptr}};
    for (const std::string& name : nn::NnGoldenKinds()) {
      // NnGoldenKinds() returns a static list: the c_str() pointers live on.
      k.push_back({name.c_str(), "nn",
                   [](const SafetensorsFile& f, double atol, double rtol) {
                     return nn::VerifyNnCase(f, atol, rtol);
                   }});
    }
    return k;
  }();
  return kinds;
}

const GoldenKind* FindGoldenKind(std::string_view name) {
  for (const GoldenKind& k : GoldenKinds())
    if (name == k.name) return &k;
  return nullptr;
}

}  // namespace attnflow
