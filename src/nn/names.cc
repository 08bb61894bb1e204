// nn/names.cc — spellings of the nn enums (used by golden configs, the CLI
// and docs/nn.md) and the stage-prefixing sink.
//
// Invariant: Name(Parse(s)) == s for every accepted spelling; parsing is
// exact (case-sensitive), unknown spellings return false.
#include <string>

#include "attnflow/nn.h"
#include "attnflow/nn_align.h"

namespace attnflow::nn {
namespace {

template <typename E, size_t N>
bool ParseFrom(std::string_view s, const std::pair<E, const char*> (&table)[N], E* out) {
  for (const auto& [e, name] : table) {
    if (s == name) {
      *out = e;
      return true;
    }
  }
  return false;
}

template <typename E, size_t N>
const char* NameFrom(E e, const std::pair<E, const char*> (&table)[N]) {
  for (const auto& [v, name] : table)
    if (v == e) return name;
  return "?";
}

constexpr std::pair<SinusoidalLayout, const char*> kLayouts[] = {
    {SinusoidalLayout::kInterleaved, "interleaved"}, {SinusoidalLayout::kConcat, "concat"}};
constexpr std::pair<RopeLayout, const char*> kRopeLayouts[] = {
    {RopeLayout::kHalf, "half"}, {RopeLayout::kInterleaved, "interleaved"}};
constexpr std::pair<RopeScaling, const char*> kRopeScalings[] = {
    {RopeScaling::kNone, "none"},
    {RopeScaling::kLinear, "linear"},
    {RopeScaling::kNtk, "ntk"},
    {RopeScaling::kDynamicNtk, "dynamic_ntk"}};
constexpr std::pair<NormKind, const char*> kNorms[] = {{NormKind::kLayerNorm, "layernorm"},
                                                       {NormKind::kRmsNorm, "rmsnorm"}};
constexpr std::pair<Activation, const char*> kActs[] = {{Activation::kRelu, "relu"},
                                                        {Activation::kGelu, "gelu"},
                                                        {Activation::kGeluTanh, "gelu_tanh"},
                                                        {Activation::kSwiGlu, "swiglu"}};
constexpr std::pair<PositionKind, const char*> kPositions[] = {{PositionKind::kNone, "none"},
                                                               {PositionKind::kRope, "rope"},
                                                               {PositionKind::kAlibi, "alibi"},
                                                               {PositionKind::kT5, "t5"}};
constexpr std::pair<NormPlacement, const char*> kPlacements[] = {{NormPlacement::kPost, "post"},
                                                                 {NormPlacement::kPre, "pre"}};
constexpr std::pair<AlignScore, const char*> kAligns[] = {{AlignScore::kAdditive, "additive"},
                                                          {AlignScore::kDot, "dot"},
                                                          {AlignScore::kGeneral, "general"}};

}  // namespace

const char* SinusoidalLayoutName(SinusoidalLayout l) { return NameFrom(l, kLayouts); }
bool ParseSinusoidalLayout(std::string_view s, SinusoidalLayout* o) { return ParseFrom(s, kLayouts, o); }
const char* RopeLayoutName(RopeLayout l) { return NameFrom(l, kRopeLayouts); }
bool ParseRopeLayout(std::string_view s, RopeLayout* o) { return ParseFrom(s, kRopeLayouts, o); }
const char* RopeScalingName(RopeScaling s) { return NameFrom(s, kRopeScalings); }
bool ParseRopeScaling(std::string_view s, RopeScaling* o) { return ParseFrom(s, kRopeScalings, o); }
const char* NormKindName(NormKind k) { return NameFrom(k, kNorms); }
bool ParseNormKind(std::string_view s, NormKind* o) { return ParseFrom(s, kNorms, o); }
const char* ActivationName(Activation a) { return NameFrom(a, kActs); }
bool ParseActivation(std::string_view s, Activation* o) { return ParseFrom(s, kActs, o); }
bool IsGated(Activation a) { return a == Activation::kSwiGlu; }
const char* PositionKindName(PositionKind p) { return NameFrom(p, kPositions); }
bool ParsePositionKind(std::string_view s, PositionKind* o) { return ParseFrom(s, kPositions, o); }
const char* NormPlacementName(NormPlacement p) { return NameFrom(p, kPlacements); }
bool ParseNormPlacement(std::string_view s, NormPlacement* o) { return ParseFrom(s, kPlacements, o); }
const char* AlignScoreName(AlignScore s) { return NameFrom(s, kAligns); }
bool ParseAlignScore(std::string_view s, AlignScore* o) { return ParseFrom(s, kAligns, o); }

bool PrefixSink::Wants(std::string_view s) const {
  return inner_ != nullptr && inner_->Wants(prefix_ + std::string(s));
}

void PrefixSink::Put(std::string_view s, const TensorView& t) {
  if (inner_ != nullptr) inner_->Put(prefix_ + std::string(s), t);
}

}  // namespace attnflow::nn
