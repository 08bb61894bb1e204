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
// rows are resized to gh x gw by bicubic interpolation exactly as
// transformers 4.35's ViTEmbeddings.interpolate_pos_encoding does
// (torch bicubic, A = −0.75, align_corners = false, scale factors
// (gh + 0.1) / G and (gw + 0.1) / G, indices clamped to the grid) unless the
// grid already matches and the image is square. Without it gh·gw must equal
// G².
//
// Stages: patches, pos (the table added), embeddings, layer.<i>.<block
// stages> (attnflow/nn.h Block), out.
#pragma once

#include <cstdint>
#include <vector>

#include "attnflow/nn.h"
#include "attnflow/stages.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow::nn {

struct VitConfig {
  int64_t patch_size = 16;
  int64_t num_heads = 12;
  int64_t pos_grid = 14;  // trained grid side G: pos has 1 + G² rows
  double norm_eps = 1e-12;
  bool interpolate_pos_encoding = false;
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

// The positions used for a gh x gw grid (rule above): out [1 + gh·gw, E].
Status VitPositions(const TensorView& out, const TensorView& pos, int64_t pos_grid, int64_t gh,
                    int64_t gw, bool interpolate, bool square_image);

}  // namespace attnflow::nn
