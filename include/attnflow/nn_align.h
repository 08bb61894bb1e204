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

// ---------------------------------------------------------------------------
// Bahdanau et al. 2015 in its loop: a bidirectional GRU encoder and a GRU
// decoder that aligns once per output step.
//
// GRU (torch.nn.GRU / GRUCell, gates r, z, n in that order):
//   r = σ(W_ir·x + b_ir + W_hr·h + b_hr)   z = σ(W_iz·x + b_iz + W_hz·h + b_hz)
//   n = tanh(W_in·x + b_in + r ⊙ (W_hn·h + b_hn))   h' = (1 − z) ⊙ n + z ⊙ h
// Encoder: h_j = [→h_j ; ←h_j] ([B, S, 2·Hs]), both directions from zero.
// Decoder (teacher forcing with the given previous-target embeddings y):
//   s_0   = tanh(W_init·←h_1 + b_init)         (paper: from the backward state)
//   e_ij  = vᵀ·tanh(W_s·s_{i−1} + W_h·h_j + b)  α_i = softmax_j(e_i·)
//   c_i   = Σ_j α_ij·h_j
//   s_i   = GRU_dec([y_{i−1} ; c_i], s_{i−1})
// Without attention the decoder would see one fixed vector for the whole
// source; here every step reads a fresh weighted sum of all h_j.
// Stages: enc_states, s0, energy, alignment, context, states — energy,
// alignment, context and states have one row per decoder step ([B, T, ·]).
// ---------------------------------------------------------------------------
struct GruWeights {
  TensorView w_ih, w_hh;  // [3H, In], [3H, H]
  TensorView b_ih, b_hh;  // [3H] each, optional
};

// out [B, L, H]; x [B, L, In]; h0 [B, H] (absent = zeros); reverse runs
// from the last step to the first (out keeps the time order).
Status Gru(const TensorView& out, const TensorView& x, const TensorView& h0,
           const GruWeights& w, bool reverse);

struct BahdanauWeights {
  GruWeights enc_fwd, enc_bwd, dec;  // dec input: [y ; c] (Ey + 2·Hs)
  TensorView w_init, b_init;         // [Ds, Hs], [Ds] optional
  AlignWeights align;                // additive: w_s [A,Ds], w_h [A,2Hs], b, v
};

// alignment [B, T, S] and states [B, T, Ds] (either may be absent);
// src [B, S, Ex], prev_targets [B, T, Ey].
Status BahdanauSeq2Seq(const TensorView& alignment, const TensorView& states,
                       const TensorView& src, const TensorView& prev_targets,
                       const BahdanauWeights& w, StageSink* sink = nullptr);

}  // namespace attnflow::nn
