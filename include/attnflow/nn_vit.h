// attnflow/nn_vit.h — the Vision Transformer encoder (Dosovitskiy et al.
// 2021; Hugging Face ViTModel without the pooler), float64.
//
//   patches  p[b, n] = conv(pixels, patch_w, stride = patch) + patch_b
//            (one row per patch, row-major over the grid gh x gw,
//            gh = H / patch, gw = W / patch; a remainder is dropped, as the
//            stride-P convolution does)
//   tokens   x0 = [cls; p] + pos           ([B, 1 + gh·gw, E])
//   blocks   x_{i+1} = Block_pre(x_i)      (pre-norm LayerNorm, GELU, biases)
//   out      LayerNorm(x_N)
//
// Learned positions cover a trained grid of pos_grid x pos_grid patches
// (pos [1 + G², E], row 0 for CLS). With interpolate_pos_encoding the patch
// rows are resized to gh x gw by torch's bicubic interpolation (A = −0.75,
// align_corners = false, source index step·(d + 0.5) − 0.5, taps clamped to
// the grid) as transformers' ViTEmbeddings.interpolate_pos_encoding does,
// unless the grid already matches and the image is square. Two rules, named
// by PosInterpolation, differ in the step:
//   kSize         transformers >= 4.42 (and 5.x), the default:
//                 interpolate(size = (gh, gw)): step G / gh, G / gw
//   kScaleFactor  transformers < 4.42 (4.35's code):
//                 interpolate(scale_factor = ((gh + 0.1) / G, (gw + 0.1) / G)):
//                 step G / (gh + 0.1), G / (gw + 0.1)
// On a non-square or resized image the two give different positions (and
// outputs); both are checked against transformers (tests/data/nn/vit_*).
// Without interpolate_pos_encoding gh·gw must equal G².
//
// Stages: patches, pos (the table added), embeddings, layer.<i>.<block
// stages> (attnflow/nn.h Block), out.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "attnflow/nn.h"
#include "attnflow/stages.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow::nn {

// How learned positions are resized to another patch grid (rules above).
enum class PosInterpolation {
  kSize,         // "size": transformers >= 4.42
  kScaleFactor,  // "scale_factor": transformers < 4.42 (4.35)
};
// "size" / "scale_factor".
const char* PosInterpolationName(PosInterpolation rule);
// Parses a name of PosInterpolationName; false if unknown.
bool ParsePosInterpolation(std::string_view name, PosInterpolation* rule);

struct VitConfig {
  int64_t patch_size = 16;
  int64_t num_heads = 12;
  int64_t pos_grid = 14;  // trained grid side G: pos has 1 + G² rows
  double norm_eps = 1e-12;
  bool interpolate_pos_encoding = false;
  PosInterpolation pos_interpolation = PosInterpolation::kSize;
};

struct VitWeights {
  TensorView patch_w;  // [E, C, P, P]
  TensorView patch_b;  // [E]
  TensorView cls;      // [E] (any shape of E elements)
  TensorView pos;      // [1 + G², E]
  std::vector<BlockWeights> layers;
  NormWeights final_norm;
};

// out [B, 1 + gh·gw, E] (may be absent); pixels [B, C, H, W].
Status Vit(const TensorView& out, const TensorView& pixels, const VitWeights& w,
           const VitConfig& cfg, StageSink* sink = nullptr);

// The positions used for a gh x gw grid (rules above): out [1 + gh·gw, E].
Status VitPositions(const TensorView& out, const TensorView& pos, int64_t pos_grid, int64_t gh,
                    int64_t gw, bool interpolate, bool square_image,
                    PosInterpolation rule = PosInterpolation::kSize);

}  // namespace attnflow::nn
