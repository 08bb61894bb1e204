// nn/vit.cc — the Vision Transformer encoder in float64 (equations and the
// position-interpolation rule in attnflow/nn_vit.h).
//
// Invariants: every input is validated (shapes named in the error) before
// any arithmetic; the blocks are nn::Block (pre-norm), so the attention
// stages are the reference SDPA's; the bicubic resize follows torch's
// upsample_bicubic2d term by term (source index inv·(d + 0.5) − 0.5, floor,
// four A = −0.75 coefficients, clamped reads, rows first then columns), with
// the source step of the named rule (PosInterpolation).
#include "attnflow/nn_vit.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "nn/internal.h"

namespace attnflow::nn {
using namespace internal;  // NOLINT: the helpers of this module
namespace {

constexpr double kCubicA = -0.75;

double Cubic1(double x) { return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1; }
double Cubic2(double x) {
  return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA;
}
void CubicCoeffs(double t, double c[4]) {
  c[0] = Cubic2(t + 1.0);
  c[1] = Cubic1(t);
  c[2] = Cubic1(1.0 - t);
  c[3] = Cubic2(2.0 - t);
}

// Bicubic resize of a [G, G] plane (stride E between cells) to [oh, ow].
void ResizePlane(double* out, int64_t out_stride, const double* in, int64_t in_stride, int64_t g,
                 int64_t oh, int64_t ow, double inv_h, double inv_w) {
  auto at = [&](int64_t y, int64_t x) {
    y = std::clamp<int64_t>(y, 0, g - 1);
    x = std::clamp<int64_t>(x, 0, g - 1);
    return in[(y * g + x) * in_stride];
  };
  for (int64_t oy = 0; oy < oh; ++oy) {
    const double ry = inv_h * (static_cast<double>(oy) + 0.5) - 0.5;
    const int64_t iy = static_cast<int64_t>(std::floor(ry));
    double cy[4];
    CubicCoeffs(ry - static_cast<double>(iy), cy);
    for (int64_t ox = 0; ox < ow; ++ox) {
      const double rx = inv_w * (static_cast<double>(ox) + 0.5) - 0.5;
      const int64_t ix = static_cast<int64_t>(std::floor(rx));
      double cx[4];
      CubicCoeffs(rx - static_cast<double>(ix), cx);
      double rows[4];
      for (int m = 0; m < 4; ++m) {
        rows[m] = at(iy - 1 + m, ix - 1) * cx[0] + at(iy - 1 + m, ix) * cx[1] +
                  at(iy - 1 + m, ix + 1) * cx[2] + at(iy - 1 + m, ix + 2) * cx[3];
      }
      out[(oy * ow + ox) * out_stride] =
          rows[0] * cy[0] + rows[1] * cy[1] + rows[2] * cy[2] + rows[3] * cy[3];
    }
  }
}

}  // namespace

const char* PosInterpolationName(PosInterpolation rule) {
  return rule == PosInterpolation::kScaleFactor ? "scale_factor" : "size";
}

bool ParsePosInterpolation(std::string_view name, PosInterpolation* rule) {
  if (name == "size") {
    *rule = PosInterpolation::kSize;
  } else if (name == "scale_factor") {
    *rule = PosInterpolation::kScaleFactor;
  } else {
    return false;
  }
  return true;
}

Status VitPositions(const TensorView& out, const TensorView& pos, int64_t pos_grid, int64_t gh,
                    int64_t gw, bool interpolate, bool square_image, PosInterpolation rule) {
  const char* op = "vit positions";
  if (pos_grid <= 0 || gh <= 0 || gw <= 0) {
    return InvalidArgument(std::string(op) + ": grid sides must be positive (pos_grid " +
                           std::to_string(pos_grid) + ", image grid " + std::to_string(gh) + "x" +
                           std::to_string(gw) + ")");
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "pos", pos, {1 + pos_grid * pos_grid, -1}));
  const int64_t E = pos.shape[1], n = gh * gw;
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {1 + n, E}));
  Result<Tensor> pf = ToF64(pos);
  if (!pf.ok()) return pf.status();
  if (!interpolate || (n == pos_grid * pos_grid && square_image)) {
    if (n != pos_grid * pos_grid) {
      return InvalidArgument(std::string(op) + ": the image gives a " + std::to_string(gh) + "x" +
                             std::to_string(gw) + " patch grid but pos " + pos.describe() +
                             " was trained for " + std::to_string(pos_grid) + "x" +
                             std::to_string(pos_grid) + " (enable interpolate_pos_encoding)");
    }
    StoreTo(out, pf.value());
    return Status::Ok();
  }
  Result<Tensor> r = F64Zeros({1 + n, E});
  if (!r.ok()) return r.status();
  const double* src = P(pf.value());
  double* dst = P(r.value());
  for (int64_t e = 0; e < E; ++e) dst[e] = src[e];  // CLS row
  // The source step of torch's bicubic resize. size = (gh, gw): in / out,
  // computed as torch's area_pixel_compute_scale does (G / gh in double).
  // scale_factor = ((gh + 0.1) / G, (gw + 0.1) / G) (transformers < 4.42):
  // torch uses 1 / scale_factor.
  const double g = static_cast<double>(pos_grid);
  double step_h = g / static_cast<double>(gh), step_w = g / static_cast<double>(gw);
  if (rule == PosInterpolation::kScaleFactor) {
    step_h = 1.0 / ((static_cast<double>(gh) + 0.1) / g);
    step_w = 1.0 / ((static_cast<double>(gw) + 0.1) / g);
  }
  for (int64_t e = 0; e < E; ++e) {
    ResizePlane(dst + E + e, E, src + E + e, E, pos_grid, gh, gw, step_h, step_w);
  }
  StoreTo(out, r.value());
  return Status::Ok();
}

Status Vit(const TensorView& out, const TensorView& pixels, const VitWeights& w,
           const VitConfig& cfg, StageSink* sink) {
  const char* op = "vit";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "pixels", pixels, {-1, -1, -1, -1}));
  const int64_t B = pixels.shape[0], C = pixels.shape[1], H = pixels.shape[2],
                W = pixels.shape[3], Pz = cfg.patch_size;
  if (Pz <= 0 || H < Pz || W < Pz) {
    return InvalidArgument(std::string(op) + ": patch_size " + std::to_string(Pz) +
                           " does not fit pixels " + pixels.describe());
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "patch_w", w.patch_w, {-1, C, Pz, Pz}));
  const int64_t E = w.patch_w.shape[0], gh = H / Pz, gw = W / Pz, N = gh * gw, T = 1 + N;
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "patch_b", w.patch_b, {E}));
  if (w.cls.numel() != E || !IsFloat(w.cls.dtype)) {
    return InvalidArgument(std::string(op) + ": cls is " + w.cls.describe() + ", expected " +
                           std::to_string(E) + " float elements");
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {B, T, E}, true));

  // Patch embedding: the stride-P convolution as one dot per (patch, e).
  Result<Tensor> px = ToF64(pixels);
  Result<Tensor> pw = ToF64(w.patch_w);
  Result<Tensor> pb = ToF64(w.patch_b);
  Result<Tensor> cls = ToF64(w.cls);
  for (auto* t : {&px, &pw, &pb, &cls})
    if (!t->ok()) return t->status();
  Result<Tensor> patches = F64Zeros({B, N, E});
  if (!patches.ok()) return patches.status();
  const double *xp = P(px.value()), *wp = P(pw.value());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t py = 0; py < gh; ++py)
      for (int64_t pxi = 0; pxi < gw; ++pxi)
        for (int64_t e = 0; e < E; ++e) {
          double acc = P(pb.value())[e];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < Pz; ++i)
              for (int64_t j = 0; j < Pz; ++j)
                acc += wp[((e * C + c) * Pz + i) * Pz + j] *
                       xp[((b * C + c) * H + py * Pz + i) * W + pxi * Pz + j];
          P(patches.value())[(b * N + py * gw + pxi) * E + e] = acc;
        }
  Emit(sink, "patches", patches.value());

  Result<Tensor> pos = F64Zeros({T, E});
  if (!pos.ok()) return pos.status();
  ATTNFLOW_RETURN_IF_ERROR(Wrap(op, VitPositions(pos->view(), w.pos, cfg.pos_grid, gh, gw,
                                                 cfg.interpolate_pos_encoding, H == W,
                                                 cfg.pos_interpolation)));
  Emit(sink, "pos", pos.value());

  Result<Tensor> x = F64Zeros({B, T, E});
  if (!x.ok()) return x.status();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e)
        P(x.value())[(b * T + t) * E + e] =
            (t == 0 ? P(cls.value())[e] : P(patches.value())[(b * N + t - 1) * E + e]) +
            P(pos.value())[t * E + e];
  Emit(sink, "embeddings", x.value());

  AttentionConfig attn;
  attn.num_heads = cfg.num_heads;
  const BlockConfig bc{.attn = attn, .act = Activation::kGelu, .norm = NormKind::kLayerNorm,
                       .norm_eps = cfg.norm_eps, .placement = NormPlacement::kPre};
  for (size_t i = 0; i < w.layers.size(); ++i) {
    Result<Tensor> y = F64Zeros({B, T, E});
    if (!y.ok()) return y.status();
    PrefixSink ps(sink, "layer." + std::to_string(i) + ".");
    ATTNFLOW_RETURN_IF_ERROR(Wrap(op, Block(y->view(), x->view(), w.layers[i], bc, AttentionMasks(),
                                            nullptr, sink != nullptr ? &ps : nullptr)));
    x = std::move(y);
  }
  Result<Tensor> o = F64Zeros({B, T, E});
  if (!o.ok()) return o.status();
  ATTNFLOW_RETURN_IF_ERROR(
      Wrap(op, Norm(o->view(), x->view(), w.final_norm, NormKind::kLayerNorm, cfg.norm_eps)));
  Emit(sink, "out", o.value());
  if (HasView(out)) StoreTo(out, o.value());
  return Status::Ok();
}

}  // namespace attnflow::nn
