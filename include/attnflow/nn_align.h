// attnflow/nn_align.h — RNN-era attention: Bahdanau additive and Luong
// dot/general alignment of decoder states over encoder states, float64.
//
//   additive (Bahdanau et al. 2015): e[t,j] = vᵀ·tanh(W_s·s_t + W_h·h_j + b)
//   dot      (Luong et al. 2015):    e[t,j] = s_t · h_j            (Ds == Dh)
//   general  (Luong et al. 2015):    e[t,j] = s_tᵀ · W_a · h_j     (W_a [Ds,Dh])
//   alignment a[t,:] = softmax_j(e[t,:]) over valid source positions
//   context   c[t]   = Σ_j a[t,j]·h_j
// Shapes: s [B,T,Ds] (T decoder states, e.g. s_{i−1} of an RNN decoder, one
// per step), h [B,S,Dh]. Source positions with key_mask false get weight 0; a
// row with no valid source position has alignment 0 and context 0 (never NaN).
// Outputs first: context [B,T,Dh], alignment [B,T,S] (either may be absent).
// Stages: energy (the scores e), masked (−inf where invalid), alignment,
// context.
#pragma once

#include <cstdint>
#include <string_view>

#include "attnflow/stages.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow::nn {

enum class AlignScore : uint8_t { kAdditive, kDot, kGeneral };
const char* AlignScoreName(AlignScore s);  // "additive", "dot", "general"
bool ParseAlignScore(std::string_view s, AlignScore* out);

struct AlignWeights {
  TensorView w_s, w_h, b, v;  // additive: [A,Ds], [A,Dh], [A] optional, [A]
  TensorView w_a;             // general: [Ds,Dh]
};

Status Align(const TensorView& context, const TensorView& alignment,
             const TensorView& s, const TensorView& h, const AlignWeights& w,
             AlignScore score, const TensorView& key_mask,
             StageSink* sink = nullptr);

}  // namespace attnflow::nn
