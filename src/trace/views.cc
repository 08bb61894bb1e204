// views.cc — the chapter's systems as player views (docs/player.md "Views"):
// the seeded ViT over an image (CLS -> patch weights on the patch grid), the
// Bahdanau GRU loop (alignment growing one decoder step at a time), the
// encoder–decoder Transformer (encoder self, decoder self (causal) and
// decoder cross-attention), and the "layers" view (every layer's weights);
// plus the ViT's input: the centre crop + area-weighted box-filter resize
// of an image (read by attnflow/image.h) and its pixels as HF ViT scales them.
//
// Invariants:
//  * Every number in a view is a stage the nn float64 code recorded
//    (nn::Vit, nn::BahdanauSeq2Seq, nn::Transformer via a Collector, or a
//    model's StageCapture); nothing here recomputes attention.
//  * The seeded models are fixed by their seed (attnflow::Rng): the same
//    weights on every machine and thread count. They are random, not
//    trained, and every page built from them carries a banner saying so.
#include <algorithm>
#include <cmath>

#include "attnflow/nn.h"
#include "attnflow/nn_align.h"
#include "attnflow/nn_vit.h"
#include "attnflow/rng.h"
#include "attnflow/trace.h"
#include "trace/internal.h"

namespace attnflow::trace {
namespace {

using internal::Collector;
using internal::Elem;
using internal::FindIn;

// Owns seeded tensors and hands out views into them.
class Seeder {
 public:
  Seeder(std::vector<Tensor>* store, uint64_t seed) : store_(store), rng_(seed) {}
  // Uniform(-a, a).
  Result<TensorView> Rand(const Shape& shape, double a) {
    Result<Tensor> t = Tensor::Zeros(DType::kF64, shape);
    if (!t.ok()) return t.status();
    double* p = t->data<double>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = rng_.Uniform(-a, a);
    store_->push_back(std::move(t).value());
    return store_->back().view();
  }
  Result<TensorView> Fill(const Shape& shape, double v) {
    Result<Tensor> t = Tensor::Zeros(DType::kF64, shape);
    if (!t.ok()) return t.status();
    std::fill_n(t->data<double>(), t->numel(), v);
    store_->push_back(std::move(t).value());
    return store_->back().view();
  }
  Rng& rng() { return rng_; }

 private:
  std::vector<Tensor>* store_;
  Rng rng_;
};

#define AF_ASSIGN(dst, expr)                 \
  do {                                       \
    auto _r = (expr);                        \
    if (!_r.ok()) return _r.status();        \
    dst = _r.value();                        \
  } while (0)

// A transformer block's weights (E model dims, H heads, F FFN units).
// `sharp` scales W_q/W_k so random attention is not nearly uniform.
Status SeedBlock(Seeder& s, int64_t E, int64_t F, double sharp, nn::BlockWeights* w) {
  const double a = 1.0 / std::sqrt(static_cast<double>(E));
  AF_ASSIGN(w->attn.w_q, s.Rand({E, E}, a * sharp));
  AF_ASSIGN(w->attn.w_k, s.Rand({E, E}, a * sharp));
  AF_ASSIGN(w->attn.w_v, s.Rand({E, E}, a));
  AF_ASSIGN(w->attn.b_q, s.Rand({E}, 0.1));
  AF_ASSIGN(w->attn.b_k, s.Rand({E}, 0.1));
  AF_ASSIGN(w->attn.b_v, s.Rand({E}, 0.1));
  AF_ASSIGN(w->attn.w_o, s.Rand({E, E}, a));
  AF_ASSIGN(w->attn.b_o, s.Rand({E}, 0.1));
  AF_ASSIGN(w->norm1.weight, s.Fill({E}, 1.0));
  AF_ASSIGN(w->norm1.bias, s.Fill({E}, 0.0));
  AF_ASSIGN(w->norm2.weight, s.Fill({E}, 1.0));
  AF_ASSIGN(w->norm2.bias, s.Fill({E}, 0.0));
  AF_ASSIGN(w->ffn.w_up, s.Rand({F, E}, a));
  AF_ASSIGN(w->ffn.b_up, s.Rand({F}, 0.1));
  AF_ASSIGN(w->ffn.w_down, s.Rand({E, F}, 1.0 / std::sqrt(static_cast<double>(F))));
  AF_ASSIGN(w->ffn.b_down, s.Rand({E}, 0.1));
  return Status::Ok();
}

// Weights [1, H, Lq, Lk] of `n` layers -> a view's [layers, heads, Lq, Lk].
Status FillView(const std::vector<const Tensor*>& per_layer, AttentionView* v) {
  if (per_layer.empty() || per_layer[0] == nullptr) {
    return Status(StatusCode::kInternal, "trace: view " + v->id + ": no weights captured");
  }
  Shape s0 = per_layer[0]->shape();
  if (s0.size() == 3) s0.insert(s0.begin() + 1, 1);  // [1, Lq, Lk]: one head
  if (s0.size() != 4 || s0[0] != 1) {
    return Status(StatusCode::kInternal, "trace: view " + v->id + ": weights are not [1,H,Lq,Lk]");
  }
  v->num_layers = static_cast<int64_t>(per_layer.size());
  v->num_heads = s0[1];
  v->rows = s0[2];
  v->cols = s0[3];
  v->weights.clear();
  v->weights.reserve(static_cast<size_t>(v->num_layers * v->num_heads * v->rows * v->cols));
  for (size_t l = 0; l < per_layer.size(); ++l) {
    const Tensor* t = per_layer[l];
    if (t == nullptr || t->numel() != s0[1] * s0[2] * s0[3]) {
      return Status(StatusCode::kInternal, "trace: view " + v->id + ": layer " + std::to_string(l) +
                                               " weights missing or of another shape");
    }
    for (int64_t i = 0; i < t->numel(); ++i) v->weights.push_back(static_cast<float>(Elem(*t, i)));
  }
  if (v->layer_labels.empty())
    for (int64_t l = 0; l < v->num_layers; ++l) v->layer_labels.push_back("layer " + std::to_string(l));
  return Status::Ok();
}

// The stages of layer `prefix` (nn Block names) under the trace's names.
// `pre`: pre-norm block (attn_in is the attention's normalised input).
void MapBlockStages(Collector& rec, const std::string& prefix, const std::string& layer_in,
                    bool pre, Trace* t) {
  std::vector<NamedTensor> items;
  auto take = [&](const std::string& from, const std::string& to) {
    for (auto& it : rec.items())
      if (it.name == from) {
        Result<Tensor> c = Tensor::FromView(it.value.view());
        if (c.ok()) items.push_back({to, std::move(c).value()});
        return;
      }
  };
  // Layer 0 reads the embeddings (the page's "embed"); later layers the
  // previous layer's output ("layer_in").
  take(layer_in, layer_in.find(".out") == std::string::npos ? "embed" : "layer_in");
  if (pre) take(prefix + "attn_in", "norm");
  for (const char* n : {"q", "k", "v", "scores", "scaled", "masked", "weights", "lse", "heads_out",
                        "concat", "residual", "ffn_hidden", "ffn"})
    take(prefix + n, n);
  take(prefix + "attn_out", "out");
  take(prefix + "norm", pre ? "ffn_norm" : "norm");
  take(prefix + "out", "block_out");
  // In TraceStageOrder().
  for (const auto& name : TraceStageOrder())
    for (auto& it : items)
      if (it.name == name) t->stages.push_back(std::move(it));
}

void RunKernel(Trace* t) {
  t->kernel = internal::RunKernelCheck(t->Find("q"), t->Find("k"), t->Find("v"), t->causal,
                                       t->scale, t->Find("heads_out"), t->Find("lse"),
                                       t->Find("masked"), t->Find("weights"));
}

std::vector<std::string> Words(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s; *p; ++p) {
    if (*p == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(*p);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Starts a seeded encoder–decoder demo model: reserves its tensor store up
// front (the model keeps pointers into it) and sets the source and target
// sentences (split at spaces).
template <class Model>
void StartSeededPair(Model* m, size_t store_tensors, const char* src, const char* tgt) {
  m->store.reserve(store_tensors);
  m->src_tokens = Words(src);
  m->tgt_tokens = Words(tgt);
}

constexpr const char* kRandomBanner =
    "RANDOM WEIGHTS: this model was built from a fixed seed, not trained (no pretrained "
    "weights can be installed here). The attention patterns show the mechanics — shapes, "
    "masks, rows summing to 1 — not what a trained model attends to.";

}  // namespace

// ---------------------------------------------------------------------------
// The "layers" view from per-layer weights (models, toy).
// ---------------------------------------------------------------------------
namespace internal {
Status AddLayersView(const std::vector<const Tensor*>& per_layer,
                     const std::vector<TraceToken>& tokens, Causal causal, Trace* t) {
  AttentionView v;
  v.id = "layers";
  v.kind = "matrix";
  v.title = "Every layer: attention weights";
  v.caption = "The softmax weights of each layer (pick one with the layer buttons or the [ and ] "
              "keys). Early layers often spread out; later ones specialise. The pipeline above "
              "shows one layer in full; this view has every layer's weights only.";
  v.causal = causal;
  ATTNFLOW_RETURN_IF_ERROR(FillView(per_layer, &v));
  for (const auto& tok : tokens) {
    v.row_labels.push_back(tok.text);
    v.col_labels.push_back(tok.text);
  }
  // Square maps only (decoder prefill from an empty cache, encoders).
  if (v.rows != static_cast<int64_t>(tokens.size()) || v.cols != v.rows) {
    return Status(StatusCode::kInternal, "trace: layers view is not tokens × tokens");
  }
  t->views.push_back(std::move(v));
  return Status::Ok();
}
}  // namespace internal

// ---------------------------------------------------------------------------
// ViT
// ---------------------------------------------------------------------------
Result<SeededVit> MakeSeededVit(uint64_t seed) {
  SeededVit m;
  m.store.reserve(256);
  constexpr int64_t E = 64, H = 4, P = 8, G = 11, F = 128, C = 3, N = 4;
  m.cfg.patch_size = P;
  m.cfg.num_heads = H;
  m.cfg.pos_grid = G;
  m.cfg.norm_eps = 1e-12;
  m.image_size = P * G;
  m.hidden = E;
  m.ffn = F;
  Seeder s(&m.store, seed);
  const double a = 1.0 / std::sqrt(static_cast<double>(C * P * P));
  AF_ASSIGN(m.w.patch_w, s.Rand({E, C, P, P}, a));
  AF_ASSIGN(m.w.patch_b, s.Rand({E}, 0.1));
  AF_ASSIGN(m.w.cls, s.Rand({E}, 1.0));
  AF_ASSIGN(m.w.pos, s.Rand({1 + G * G, E}, 0.5));
  m.w.layers.resize(N);
  for (auto& b : m.w.layers) ATTNFLOW_RETURN_IF_ERROR(SeedBlock(s, E, F, 3.0, &b));
  AF_ASSIGN(m.w.final_norm.weight, s.Fill({E}, 1.0));
  AF_ASSIGN(m.w.final_norm.bias, s.Fill({E}, 0.0));
  return m;
}

RgbImage CropResize(const RgbImage& in, int64_t side) {
  const int64_t s = std::min(in.width, in.height);
  const int64_t x0 = (in.width - s) / 2, y0 = (in.height - s) / 2;
  RgbImage out;
  out.width = out.height = side;
  out.rgb.assign(static_cast<size_t>(side * side * 3), 0);
  // Output pixel (oy, ox) covers source [oy·s/side, (oy+1)·s/side) (same in
  // x): area-weighted mean of the source pixels it overlaps.
  const double f = static_cast<double>(s) / static_cast<double>(side);
  for (int64_t oy = 0; oy < side; ++oy) {
    const double ya = oy * f, yb = (oy + 1) * f;
    for (int64_t ox = 0; ox < side; ++ox) {
      const double xa = ox * f, xb = (ox + 1) * f;
      double acc[3] = {0, 0, 0}, wsum = 0;
      for (int64_t y = static_cast<int64_t>(ya); y < std::min<int64_t>(s, static_cast<int64_t>(yb) + 1); ++y) {
        const double wy = std::min<double>(y + 1, yb) - std::max<double>(y, ya);
        if (wy <= 0) continue;
        for (int64_t x = static_cast<int64_t>(xa); x < std::min<int64_t>(s, static_cast<int64_t>(xb) + 1); ++x) {
          const double wx = std::min<double>(x + 1, xb) - std::max<double>(x, xa);
          if (wx <= 0) continue;
          const uint8_t* p = &in.rgb[static_cast<size_t>(((y0 + y) * in.width + (x0 + x)) * 3)];
          for (int c = 0; c < 3; ++c) acc[c] += wy * wx * p[c];
          wsum += wy * wx;
        }
      }
      for (int c = 0; c < 3; ++c)
        out.rgb[static_cast<size_t>((oy * side + ox) * 3 + c)] =
            static_cast<uint8_t>(std::clamp(acc[c] / std::max(wsum, 1e-12) + 0.5, 0.0, 255.0));
    }
  }
  return out;
}

Result<Tensor> VitPixels(const RgbImage& img) {
  if (img.width < 1 || img.height < 1 ||
      img.rgb.size() != static_cast<size_t>(img.width * img.height * 3)) {
    return InvalidArgument("trace: VitPixels: image of " + std::to_string(img.width) + " × " +
                           std::to_string(img.height) + " with " + std::to_string(img.rgb.size()) +
                           " bytes");
  }
  Result<Tensor> t = Tensor::Zeros(DType::kF64, {1, 3, img.height, img.width});
  if (!t.ok()) return t.status();
  double* p = t->data<double>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < img.height; ++y)
      for (int64_t x = 0; x < img.width; ++x)
        p[(c * img.height + y) * img.width + x] =
            (img.rgb[static_cast<size_t>((y * img.width + x) * 3 + c)] / 255.0 - 0.5) / 0.5;
  return t;
}

Result<Trace> TraceVit(const RgbImage& image, const VitTraceOptions& opt) {
  Result<SeededVit> m = MakeSeededVit(kVitSeed);
  if (!m.ok()) return m.status();
  const int64_t layers = static_cast<int64_t>(m->w.layers.size());
  if (opt.layer < 0 || opt.layer >= layers) {
    return OutOfRange("trace: layer = " + std::to_string(opt.layer) + " is outside [0, " +
                      std::to_string(layers - 1) + "] (the seeded ViT has " +
                      std::to_string(layers) + " layers)");
  }
  const RgbImage in = CropResize(image, m->image_size);
  Result<Tensor> px = VitPixels(in);
  if (!px.ok()) return px.status();
  Collector rec;
  ATTNFLOW_RETURN_IF_ERROR(nn::Vit(TensorView(), px->view(), m->w, m->cfg, &rec));
  ATTNFLOW_RETURN_IF_ERROR(rec.status());
  const int64_t G = m->cfg.pos_grid, E = m->hidden, H = m->cfg.num_heads;
  Trace t;
  t.source = "vit";
  t.info.name = "seeded ViT (random weights)";
  t.info.architecture = "vit";
  t.info.num_layers = layers;
  t.info.hidden = E;
  t.info.num_heads = H;
  t.info.num_kv_heads = H;
  t.info.head_dim = E / H;
  t.info.ffn_hidden = m->ffn;
  t.norm = "pre";
  t.ffn_activation = "gelu";
  t.layer = opt.layer;
  t.causal = Causal::kNone;
  t.scale = 1.0 / std::sqrt(static_cast<double>(E / H));
  t.description = "An image through a seeded Vision Transformer (" + std::to_string(layers) +
                  " layers, " + std::to_string(H) + " heads, " + std::to_string(G) + "×" +
                  std::to_string(G) + " patches of " + std::to_string(m->cfg.patch_size) +
                  " px), layer " + std::to_string(opt.layer) + ". Random weights.";
  t.banner = kRandomBanner;
  t.tokens.push_back({0, "[CLS]"});
  for (int64_t r = 0; r < G; ++r)
    for (int64_t c = 0; c < G; ++c)
      t.tokens.push_back({static_cast<int32_t>(1 + r * G + c),
                          "p" + std::to_string(r) + "," + std::to_string(c)});
  const std::string pre = "layer." + std::to_string(opt.layer) + ".";
  MapBlockStages(rec, pre,
                 opt.layer == 0 ? "embeddings" : "layer." + std::to_string(opt.layer - 1) + ".out",
                 /*pre=*/true, &t);
  if (t.Find("weights") == nullptr) return Status(StatusCode::kInternal, "trace: ViT reported no weights");
  RunKernel(&t);

  // The grid view: the CLS query row of every layer and head.
  AttentionView v;
  v.id = "vit";
  v.kind = "grid";
  v.title = "ViT: where [CLS] looks on the patch grid";
  v.caption = "The image was centre-cropped to a square and resized to " +
              std::to_string(m->image_size) + "×" + std::to_string(m->image_size) +
              " px, then cut into " + std::to_string(G) + "×" + std::to_string(G) +
              " patches of " + std::to_string(m->cfg.patch_size) +
              " px; each patch is one token after [CLS]. The overlay is the [CLS] query's "
              "softmax weight on each patch (brighter = more). The weight [CLS] puts on itself "
              "is printed, not drawn. Weights are random (seeded), so the pattern is not "
              "semantic.";
  v.row_axis = "query";
  v.col_axis = "key";
  v.row_labels = {"[CLS]"};
  for (const auto& tok : t.tokens) v.col_labels.push_back(tok.text);
  v.num_layers = layers;
  v.num_heads = H;
  v.rows = 1;
  v.cols = 1 + G * G;
  v.grid_h = G;
  v.grid_w = G;
  v.first_col = 1;
  v.image_w = in.width;
  v.image_h = in.height;
  v.image_rgb = in.rgb;
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor* w = FindIn(rec.items(), "layer." + std::to_string(l) + ".weights");
    if (w == nullptr || w->shape() != Shape{1, H, v.cols, v.cols}) {
      return Status(StatusCode::kInternal, "trace: ViT layer " + std::to_string(l) + " weights missing");
    }
    v.layer_labels.push_back("layer " + std::to_string(l));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < v.cols; ++j)
        v.weights.push_back(static_cast<float>(Elem(*w, (h * v.cols + 0) * v.cols + j)));
  }
  t.views.push_back(std::move(v));
  std::vector<const Tensor*> per;
  for (int64_t l = 0; l < layers; ++l) per.push_back(FindIn(rec.items(), "layer." + std::to_string(l) + ".weights"));
  ATTNFLOW_RETURN_IF_ERROR(internal::AddLayersView(per, t.tokens, Causal::kNone, &t));
  return t;
}

// ---------------------------------------------------------------------------
// Bahdanau
// ---------------------------------------------------------------------------
Result<SeededBahdanau> MakeSeededBahdanau(uint64_t seed) {
  SeededBahdanau m;
  StartSeededPair(&m, 64, "le chat noir dort sur le tapis <eos>",
                  "the black cat sleeps on the mat <eos>");
  const int64_t S = static_cast<int64_t>(m.src_tokens.size());
  const int64_t T = static_cast<int64_t>(m.tgt_tokens.size());
  constexpr int64_t Ex = 8, Ey = 8, Hs = 8, Ds = 8, A = 8;
  Seeder s(&m.store, seed);
  auto gru = [&](int64_t in, int64_t h, nn::GruWeights* g) -> Status {
    const double a = 1.0 / std::sqrt(static_cast<double>(h));
    AF_ASSIGN(g->w_ih, s.Rand({3 * h, in}, a));
    AF_ASSIGN(g->w_hh, s.Rand({3 * h, h}, a));
    AF_ASSIGN(g->b_ih, s.Rand({3 * h}, a));
    AF_ASSIGN(g->b_hh, s.Rand({3 * h}, a));
    return Status::Ok();
  };
  ATTNFLOW_RETURN_IF_ERROR(gru(Ex, Hs, &m.w.enc_fwd));
  ATTNFLOW_RETURN_IF_ERROR(gru(Ex, Hs, &m.w.enc_bwd));
  ATTNFLOW_RETURN_IF_ERROR(gru(Ey + 2 * Hs, Ds, &m.w.dec));
  AF_ASSIGN(m.w.w_init, s.Rand({Ds, Hs}, 0.5));
  AF_ASSIGN(m.w.b_init, s.Rand({Ds}, 0.1));
  AF_ASSIGN(m.w.align.w_s, s.Rand({A, Ds}, 1.5));
  AF_ASSIGN(m.w.align.w_h, s.Rand({A, 2 * Hs}, 1.5));
  AF_ASSIGN(m.w.align.b, s.Rand({A}, 0.1));
  AF_ASSIGN(m.w.align.v, s.Rand({A}, 3.0));
  // Embeddings: one seeded vector per distinct word (same word, same vector).
  auto embed = [&](const std::vector<std::string>& words, int64_t dim, Tensor* out) -> Status {
    Result<Tensor> e = Tensor::Zeros(DType::kF64, {1, static_cast<int64_t>(words.size()), dim});
    if (!e.ok()) return e.status();
    for (size_t i = 0; i < words.size(); ++i) {
      uint64_t h = 1469598103934665603ull;
      for (char c : words[i]) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      Rng r(seed ^ h);
      for (int64_t d = 0; d < dim; ++d) e->data<double>()[i * dim + d] = r.Uniform(-1, 1);
    }
    *out = std::move(e).value();
    return Status::Ok();
  };
  ATTNFLOW_RETURN_IF_ERROR(embed(m.src_tokens, Ex, &m.src));
  // Teacher forcing: step i reads the previous target (<s> first).
  std::vector<std::string> prev = {"<s>"};
  for (int64_t i = 0; i + 1 < T; ++i) prev.push_back(m.tgt_tokens[static_cast<size_t>(i)]);
  ATTNFLOW_RETURN_IF_ERROR(embed(prev, Ey, &m.prev_targets));
  (void)S;
  return m;
}

Result<Trace> TraceBahdanau() {
  Result<SeededBahdanau> m = MakeSeededBahdanau(kBahdanauSeed);
  if (!m.ok()) return m.status();
  const int64_t S = static_cast<int64_t>(m->src_tokens.size());
  const int64_t T = static_cast<int64_t>(m->tgt_tokens.size());
  Collector rec;
  ATTNFLOW_RETURN_IF_ERROR(nn::BahdanauSeq2Seq(TensorView(), TensorView(), m->src.view(),
                                               m->prev_targets.view(), m->w, &rec));
  ATTNFLOW_RETURN_IF_ERROR(rec.status());
  const Tensor* al = FindIn(rec.items(), "alignment");
  if (al == nullptr || al->shape() != Shape{1, T, S}) {
    return Status(StatusCode::kInternal, "trace: the Bahdanau loop reported no [1,T,S] alignment");
  }
  Trace t;
  t.source = "bahdanau";
  t.info.name = "seeded Bahdanau GRU encoder-decoder (random weights)";
  t.info.architecture = "bahdanau";
  t.info.num_layers = 1;
  t.info.hidden = 8;
  t.info.num_heads = 1;
  t.info.num_kv_heads = 1;
  t.info.head_dim = 8;
  t.causal = Causal::kNone;
  t.scale = 1.0;
  t.description = "Bahdanau et al. (2015): a bidirectional GRU encoder and a GRU decoder that "
                  "aligns once per output step (additive attention). Random weights, teacher "
                  "forcing on a toy sentence pair.";
  t.banner = kRandomBanner;
  t.kernel.note = "additive (Bahdanau) attention has no scaled-dot-product kernel";
  for (int64_t j = 0; j < S; ++j) t.tokens.push_back({static_cast<int32_t>(j), m->src_tokens[static_cast<size_t>(j)]});
  AttentionView v;
  v.id = "bahdanau";
  v.kind = "steps";
  v.title = "Bahdanau alignment, one decoder step at a time";
  v.caption =
      "Without attention, an RNN encoder–decoder squeezes the whole source into one fixed "
      "vector (the encoder's last state) and the decoder must reproduce every word from it: "
      "a bottleneck that hurts long sentences. Additive attention removes it: at every output "
      "step i the decoder state s_{i−1} scores every encoder state h_j "
      "(e_ij = vᵀ·tanh(W_s·s_{i−1} + W_h·h_j + b)), the softmax of those scores is row i of the "
      "alignment, and the context c_i = Σ_j α_ij·h_j is a fresh vector for that step. Step "
      "through the decoder: each step fills one more row.";
  v.row_axis = "output step";
  v.col_axis = "source word";
  v.row_labels = m->tgt_tokens;
  v.col_labels = m->src_tokens;
  v.layer_labels = {"decoder"};
  ATTNFLOW_RETURN_IF_ERROR(FillView({al}, &v));
  v.layer_labels = {"decoder"};
  t.views.push_back(std::move(v));
  return t;
}

// ---------------------------------------------------------------------------
// The encoder–decoder Transformer
// ---------------------------------------------------------------------------
Result<SeededTransformer> MakeSeededTransformer(uint64_t seed) {
  SeededTransformer m;
  StartSeededPair(&m, 256, "le chat noir dort sur le tapis </s>",
                  "<s> the black cat is sleeping on the mat");
  auto& c = m.cfg;
  c.d_model = 32;
  c.num_heads = 4;
  c.ffn_dim = 64;
  c.num_encoder_layers = 2;
  c.num_decoder_layers = 2;
  c.placement = nn::NormPlacement::kPost;
  Seeder s(&m.store, seed);
  auto ids = [](const std::vector<std::string>& words, Tensor* out, int64_t* vocab) -> Status {
    std::vector<std::string> seen;
    Result<Tensor> t = Tensor::Zeros(DType::kI64, {1, static_cast<int64_t>(words.size())});
    if (!t.ok()) return t.status();
    for (size_t i = 0; i < words.size(); ++i) {
      auto it = std::find(seen.begin(), seen.end(), words[i]);
      if (it == seen.end()) {
        seen.push_back(words[i]);
        it = seen.end() - 1;
      }
      t->data<int64_t>()[i] = it - seen.begin();
    }
    *vocab = static_cast<int64_t>(seen.size());
    *out = std::move(t).value();
    return Status::Ok();
  };
  int64_t vs = 0, vt = 0;
  ATTNFLOW_RETURN_IF_ERROR(ids(m.src_tokens, &m.src_ids, &vs));
  ATTNFLOW_RETURN_IF_ERROR(ids(m.tgt_tokens, &m.tgt_ids, &vt));
  const int64_t E = c.d_model, F = c.ffn_dim;
  AF_ASSIGN(m.w.src_embed, s.Rand({vs, E}, 0.3));
  AF_ASSIGN(m.w.tgt_embed, s.Rand({vt, E}, 0.3));
  m.w.encoder.resize(static_cast<size_t>(c.num_encoder_layers));
  for (auto& b : m.w.encoder) ATTNFLOW_RETURN_IF_ERROR(SeedBlock(s, E, F, 2.0, &b));
  m.w.decoder.resize(static_cast<size_t>(c.num_decoder_layers));
  for (auto& d : m.w.decoder) {
    nn::BlockWeights a, b;
    ATTNFLOW_RETURN_IF_ERROR(SeedBlock(s, E, F, 2.0, &a));
    ATTNFLOW_RETURN_IF_ERROR(SeedBlock(s, E, F, 2.0, &b));
    d.self_attn = a.attn;
    d.cross_attn = b.attn;
    d.norm1 = a.norm1;
    d.norm2 = a.norm2;
    d.norm3 = b.norm1;
    d.ffn = a.ffn;
  }
  AF_ASSIGN(m.w.encoder_norm.weight, s.Fill({E}, 1.0));
  AF_ASSIGN(m.w.encoder_norm.bias, s.Fill({E}, 0.0));
  AF_ASSIGN(m.w.decoder_norm.weight, s.Fill({E}, 1.0));
  AF_ASSIGN(m.w.decoder_norm.bias, s.Fill({E}, 0.0));
  return m;
}

Result<Trace> TraceTransformer(int64_t layer) {
  Result<SeededTransformer> m = MakeSeededTransformer(kTransformerSeed);
  if (!m.ok()) return m.status();
  const auto& c = m->cfg;
  if (layer < 0 || layer >= c.num_encoder_layers) {
    return OutOfRange("trace: layer = " + std::to_string(layer) + " is outside [0, " +
                      std::to_string(c.num_encoder_layers - 1) + "] (the seeded Transformer has " +
                      std::to_string(c.num_encoder_layers) + " encoder and " +
                      std::to_string(c.num_decoder_layers) + " decoder layers)");
  }
  Collector rec;
  ATTNFLOW_RETURN_IF_ERROR(nn::Transformer(TensorView(), TensorView(), m->src_ids.view(),
                                           m->tgt_ids.view(), TensorView(), TensorView(), m->w,
                                           c, &rec));
  ATTNFLOW_RETURN_IF_ERROR(rec.status());
  const int64_t E = c.d_model, H = c.num_heads;
  Trace t;
  t.source = "transformer";
  t.info.name = "seeded encoder-decoder Transformer (random weights)";
  t.info.architecture = "transformer";
  t.info.num_layers = c.num_encoder_layers;
  t.info.hidden = E;
  t.info.num_heads = H;
  t.info.num_kv_heads = H;
  t.info.head_dim = E / H;
  t.info.ffn_hidden = c.ffn_dim;
  t.norm = "post";
  t.ffn_activation = "relu";
  t.layer = layer;
  t.causal = Causal::kNone;
  t.scale = 1.0 / std::sqrt(static_cast<double>(E / H));
  t.description = "Vaswani et al. (2017) encoder–decoder on a toy sentence pair (teacher "
                  "forcing); the pipeline shows encoder layer " + std::to_string(layer) +
                  ". Random weights.";
  t.banner = kRandomBanner;
  for (size_t j = 0; j < m->src_tokens.size(); ++j)
    t.tokens.push_back({static_cast<int32_t>(m->src_ids.data<int64_t>()[j]), m->src_tokens[j]});
  const std::string pre = "enc." + std::to_string(layer) + ".";
  MapBlockStages(rec, pre, layer == 0 ? "src_in" : "enc." + std::to_string(layer - 1) + ".out",
                 /*pre=*/false, &t);
  if (t.Find("weights") == nullptr) return Status(StatusCode::kInternal, "trace: the Transformer reported no encoder weights");
  RunKernel(&t);

  auto add = [&](const char* id, const char* prefix, const char* stage, int64_t n, Causal causal,
                 const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                 std::string title, std::string caption, std::string row_axis,
                 std::string col_axis) -> Status {
    AttentionView v;
    v.id = id;
    v.kind = "matrix";
    v.title = std::move(title);
    v.caption = std::move(caption);
    v.row_axis = std::move(row_axis);
    v.col_axis = std::move(col_axis);
    v.causal = causal;
    v.row_labels = rows;
    v.col_labels = cols;
    std::vector<const Tensor*> per;
    for (int64_t l = 0; l < n; ++l)
      per.push_back(FindIn(rec.items(), std::string(prefix) + std::to_string(l) + "." + stage));
    ATTNFLOW_RETURN_IF_ERROR(FillView(per, &v));
    if (v.rows != static_cast<int64_t>(rows.size()) || v.cols != static_cast<int64_t>(cols.size())) {
      return Status(StatusCode::kInternal, std::string("trace: view ") + id + " has the wrong shape");
    }
    t.views.push_back(std::move(v));
    return Status::Ok();
  };
  const auto& S = m->src_tokens;
  const auto& T = m->tgt_tokens;
  ATTNFLOW_RETURN_IF_ERROR(add(
      "enc_self", "enc.", "weights", c.num_encoder_layers, Causal::kNone, S, S,
      "Encoder self-attention (source × source)",
      "Each source word reads every source word (no mask): the encoder builds context-aware "
      "source vectors, the memory the decoder will read.",
      "source (query)", "source (key)"));
  ATTNFLOW_RETURN_IF_ERROR(add(
      "dec_self", "dec.", "self.weights", c.num_decoder_layers, Causal::kTopLeft, T, T,
      "Decoder self-attention (target × target, causal)",
      "Each target position reads only itself and earlier target positions (causal mask, "
      "upper triangle exactly 0), so training on the whole target at once cannot peek at the "
      "next word.",
      "target (query)", "target (key)"));
  ATTNFLOW_RETURN_IF_ERROR(add(
      "cross", "dec.", "cross.weights", c.num_decoder_layers, Causal::kNone, T, S,
      "Cross-attention (target queries × source keys)",
      "Queries come from the decoder (one per target position), keys and values from the "
      "encoder's memory (one per source position): row i is where target position i looks in "
      "the source. This is the Transformer's version of Bahdanau's alignment, with several "
      "heads and layers. Not square: " +
          std::to_string(T.size()) + " target rows × " + std::to_string(S.size()) +
          " source columns.",
      "target (query)", "source (key)"));
  return t;
}

}  // namespace attnflow::trace
