// attention.h (fuzz harness) — attnflow::Attention checked against the
// float64 reference::Sdpa on fuzzer-chosen problems.
//
// The input bytes choose the STRUCTURE of a call: shapes (including zero
// sizes), GQA grouping, dtypes of q/k/v/out/lse/mask/kv_lens, memory layouts
// (contiguous, [B,L,H,D] permuted, padded strides, stride-0 broadcast, null
// data for empty tensors), bool/float masks of rank 2-4 with broadcasting,
// kv_lens, causal alignment, sliding windows, ALiBi, scale, kernel forcing
// and tile/split overrides, thread count, value magnitudes (up to logits of
// ~1e4) and injected specials (NaN, +-inf, +-1e4, 0, non-0/1 bool bytes) in
// q, k, v, the mask and the slopes. Bulk values come from a generator seeded
// by the input. Optionally one argument is made invalid.
//
// Checks (expected values only from reference::Sdpa or from properties):
//  * invalid calls: reference and Attention fail with the same StatusCode and
//    messages prefixed by their op name; forcing an unsupported kernel is
//    kInvalidArgument "cannot force";
//  * dead rows (reference LSE -inf): out exactly 0, LSE -inf;
//  * NaN rows (reference LSE NaN): out and LSE NaN;
//  * every other element: NaN/inf exactly where the reference has them and
//    finite values within an fp32 error bound derived from the magnitudes
//    (see Tolerance below) — a wrong key, head, mask bit or row moves the
//    output by O(|v|), far above the bound;
//  * every output element is written; padding between output elements and
//    the inputs are left untouched;
//  * results are bit-identical with another thread count, and
//    ExplainAttention picks the kernel Attention reports.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../common/fuzz_common.h"
#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/kernels.h"
#include "attnflow/semantics.h"
#include "attnflow/stages.h"
#include "attnflow/threading.h"
#include "hwy/targets.h"

namespace attnflow_fuzz {
namespace attn {

using namespace attnflow;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr float kCanary = -1.2345678e-29f;  // an output value no kernel makes

// Owning storage (8-byte aligned) plus a view into it.
struct Buffer {
  std::vector<double> mem;
  size_t bytes = 0;
  TensorView view;
  void* base() { return mem.empty() ? nullptr : mem.data(); }
};

inline void StoreRaw(DType t, void* base, int64_t off, double v) {
  char* p = static_cast<char*>(base);
  switch (t) {
    case DType::kF32: { const float f = static_cast<float>(v); std::memcpy(p + off * 4, &f, 4); break; }
    case DType::kF64: std::memcpy(p + off * 8, &v, 8); break;
    case DType::kF16: { const uint16_t h = F32ToF16(static_cast<float>(v)); std::memcpy(p + off * 2, &h, 2); break; }
    case DType::kBF16: { const uint16_t h = F32ToBF16(static_cast<float>(v)); std::memcpy(p + off * 2, &h, 2); break; }
    case DType::kI64: { const int64_t i = static_cast<int64_t>(v); std::memcpy(p + off * 8, &i, 8); break; }
    case DType::kI32: { const int32_t i = static_cast<int32_t>(v); std::memcpy(p + off * 4, &i, 4); break; }
    case DType::kBool: case DType::kU8: case DType::kI8: { const uint8_t b = static_cast<uint8_t>(v); std::memcpy(p + off, &b, 1); break; }
  }
}

// Logical [d0..d3] -> storage layout chosen by the input.
//  mode 0: row-major; 1: dims 1 and 2 swapped in storage ([B,L,H,D] for a
//  [B,H,L,D] view); 2: row-major with padded strides; 3: swapped + padded;
//  4: like 0 but one dim of size > 1 broadcast (stride 0; inputs only).
inline void MakeLayout(ByteReader& in, DType dt, const Shape& shape,
                       bool inputs, Buffer* b) {
  const int rank = static_cast<int>(shape.size());
  const int mode = static_cast<int>(in.Pick(inputs ? 6 : 4));
  int order[4] = {0, 1, 2, 3};  // storage order, outermost first
  if ((mode == 1 || mode == 3) && rank == 4) std::swap(order[1], order[2]);
  if ((mode == 1 || mode == 3) && rank == 3) std::swap(order[0], order[1]);
  int64_t pad[4] = {0, 0, 0, 0};
  if (mode == 2 || mode == 3) {
    for (int d = 0; d < rank; ++d) pad[d] = in.Range(0, 3);
  }
  Shape strides(static_cast<size_t>(rank), 0);
  int64_t running = 1;
  for (int k = rank - 1; k >= 0; --k) {
    const int d = order[k];
    strides[static_cast<size_t>(d)] = running;
    running *= shape[static_cast<size_t>(d)] + pad[d];
  }
  if (mode == 4 && rank > 0) {
    const int d = static_cast<int>(in.Pick(static_cast<size_t>(rank)));
    strides[static_cast<size_t>(d)] = 0;
  }
  int64_t numel = 1, span = 1;
  for (int d = 0; d < rank; ++d) {
    numel *= shape[static_cast<size_t>(d)];
    span += (shape[static_cast<size_t>(d)] - 1) * strides[static_cast<size_t>(d)];
  }
  if (numel == 0) span = 0;
  b->bytes = static_cast<size_t>(span) * DTypeSize(dt);
  b->mem.assign((b->bytes + 7) / 8 + 1, 0.0);
  // Empty tensors sometimes come with a null data pointer (legal).
  void* data = (numel == 0 && mode == 5) ? nullptr : b->mem.data();
  b->view = MakeStridedView(data, dt, shape, strides);
}

// Visits every logical element offset of a rank <= 4 view.
template <typename F>
void ForEach(const TensorView& v, F&& f) {
  int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    f(v.offset(idx[0], idx[1], idx[2], idx[3]), idx);
    for (int d = v.rank - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
}

inline void FillNormal(Buffer* b, Rng& rng, double scale) {
  const DType t = b->view.dtype;
  const int64_t n = static_cast<int64_t>(b->bytes / DTypeSize(t));
  for (int64_t i = 0; i < n; ++i) StoreRaw(t, b->mem.data(), i, scale * rng.Normal());
}

inline double SpecialValue(uint8_t code) {
  switch (code % 8) {
    case 0: return kNaN;
    case 1: return kInf;
    case 2: return -kInf;
    case 3: return 1e4;
    case 4: return -1e4;
    case 5: return 0.0;
    case 6: return 300.0;
    default: return -kNaN;
  }
}

inline bool IsFiniteAt(const TensorView& v, int64_t off) {
  return std::isfinite(v.load(off));
}

struct Config {
  int64_t B = 1, H = 1, Hkv = 1, Lq = 1, Lk = 1, D = 1, Dv = 1;
  DType qt = DType::kF32, kt = DType::kF32, vt = DType::kF32;
  DType outt = DType::kF32, lset = DType::kF32;
  bool want_lse = true;
  int mask = 0;  // 0 none, 1 bool, 2 float
  DType maskt = DType::kF32;
  bool mask_full[4] = {false, false, true, true};
  int mask_rank = 2;
  bool kv_lens = false;
  DType kvlt = DType::kI64;
  bool alibi = false;
  DType alibit = DType::kF32;
  SdpaOptions opt;
  KernelOptions kopt;
  double qscale = 1, kscale = 1, vscale = 1, mscale = 1;
  int threads_a = 1, threads_b = 3;
  int invalid = 0;  // 0 = valid call, else which argument to break
  uint64_t seed = 0;
};

inline int64_t PickDim(ByteReader& in, const int64_t* choices, size_t n,
                       int64_t max_free) {
  const uint8_t c = in.U8();
  if (c < 200) return choices[c % n];
  return static_cast<int64_t>(in.U16() % static_cast<uint64_t>(max_free + 1));
}

inline Config Decode(ByteReader& in) {
  Config c;
  static constexpr int64_t kB[] = {1, 1, 2, 3, 1, 2, 0};
  static constexpr int64_t kHkv[] = {1, 1, 2, 1, 3, 4, 2, 0};
  static constexpr int64_t kG[] = {1, 2, 1, 4, 3, 8, 2, 5};
  static constexpr int64_t kLq[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 31, 33, 64, 65, 70, 0, 129};
  static constexpr int64_t kLk[] = {1, 2, 5, 8, 13, 16, 31, 64, 65, 100, 128, 129, 257, 0, 300, 520};
  static constexpr int64_t kD[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 32, 33, 63, 64,
                                   65, 80, 96, 127, 128, 129, 200, 255, 256, 257, 0};
  c.B = kB[in.Pick(7)];
  c.Hkv = kHkv[in.Pick(8)];
  c.H = c.Hkv * kG[in.Pick(8)];
  c.Lq = PickDim(in, kLq, 16, 140);
  c.Lk = PickDim(in, kLk, 16, 600);
  c.D = kD[in.Pick(26)];
  c.Dv = in.Pick(4) == 0 ? kD[in.Pick(26)] : c.D;

  static constexpr DType kKv[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF32, DType::kF64};
  const uint8_t types = in.U8();
  c.kt = kKv[(types & 7) % 5];
  c.vt = kKv[((types >> 3) & 7) % 5];
  c.qt = (types >> 6) == 3 ? (in.Bool() ? DType::kF64 : DType::kF16) : DType::kF32;
  const uint8_t outs = in.U8();
  c.outt = (outs & 7) == 7 ? DType::kF64 : DType::kF32;
  c.want_lse = ((outs >> 3) & 3) != 0;
  c.lset = ((outs >> 5) & 7) == 7 ? DType::kF64 : DType::kF32;

  const uint8_t m = in.U8();
  c.mask = m % 3;
  static constexpr DType kMaskF[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
  c.maskt = c.mask == 1 ? DType::kBool : kMaskF[(m >> 2) & 3];
  c.mask_rank = 2 + (m >> 4) % 3;
  const uint8_t full = in.U8();
  for (int d = 0; d < 4; ++d) c.mask_full[d] = ((full >> d) & 1) != 0 || (d >= 2 && ((full >> (d + 2)) & 1) == 0);

  const uint8_t o = in.U8();
  c.opt.causal = static_cast<Causal>(o % 3);
  c.kv_lens = ((o >> 2) & 3) == 1;
  c.kvlt = ((o >> 4) & 1) ? DType::kI32 : DType::kI64;
  c.alibi = ((o >> 5) & 3) == 1;
  c.alibit = ((o >> 7) & 1) ? DType::kF64 : DType::kF32;
  const uint8_t w = in.U8();
  if ((w & 3) == 1 || (w & 3) == 3) c.opt.window_left = in.Range(0, c.Lk + 2);
  if ((w & 3) == 2 || (w & 3) == 3) c.opt.window_right = in.Range(0, c.Lk + 2);
  static constexpr double kScale[] = {kNaN, kNaN, kNaN, 1.0, 0.5, 0.01, 2.0, -1.0, 0.0, 30.0};
  c.opt.scale = kScale[(w >> 2) % 10];

  const uint8_t k = in.U8();
  static constexpr KernelKind kForce[] = {KernelKind::kAuto, KernelKind::kAuto, KernelKind::kAuto,
                                          KernelKind::kTiledPrefill, KernelKind::kSplitKvDecode,
                                          KernelKind::kReference};
  c.kopt.force = kForce[k % 6];
  if ((k >> 3) & 1) c.kopt.tile_q = in.Range(1, 160);
  if ((k >> 4) & 1) c.kopt.tile_kv = in.Range(1, 300);
  if ((k >> 5) & 1) c.kopt.split_kv = in.Range(1, 700);
  static constexpr int kThreads[] = {1, 2, 3, 7};
  c.threads_a = kThreads[(k >> 6) & 3];
  c.threads_b = c.threads_a == 1 ? 3 : 1;

  static constexpr double kMag[] = {1.0, 1.0, 1.0, 0.1, 10.0, 100.0, 3.0, 1e-3};
  const uint8_t mag = in.U8();
  c.qscale = kMag[mag & 7];
  c.kscale = kMag[(mag >> 3) & 7];
  c.vscale = (mag >> 6) == 3 ? 1e3 : 1.0;
  c.mscale = kMag[in.Pick(8)] * 2.0;
  const uint8_t inv = in.U8();
  c.invalid = inv < 232 ? 0 : 1 + (inv - 232);  // ~10%: one of 24 breakages
  c.seed = in.U64();
  return c;
}

// Independent per-row fp32 error allowance for out and LSE (see the file
// comment): the kernels compute q.k, the scale, mask and ALiBi terms in fp32
// (each with relative error <= (D+2) eps against the magnitudes involved),
// exponentiate and accumulate up to Lk terms in fp32.
struct Tolerance {
  double eps = 0x1.0p-24;
  double Out(double S, double vmax, int64_t D, int64_t Lk) const {
    return eps * vmax * ((2.0 * static_cast<double>(D) + 32.0) * (1.0 + S) +
                         2.0 * static_cast<double>(Lk) + 8.0);
  }
  double Lse(double S, double lse_ref, int64_t D, int64_t Lk) const {
    return eps * ((2.0 * static_cast<double>(D) + 32.0) * (1.0 + S) +
                  2.0 * static_cast<double>(Lk) + 8.0 + 4.0 * std::fabs(lse_ref));
  }
};

struct Problem {
  Config c;
  Buffer q, k, v, mask, kvl, slopes;
  bool v_nonfinite = false;
  std::string injected;  // "v[17]=nan k[3]=inf ..." for messages
  std::string desc;
};

inline std::string Describe(const Config& c) {
  std::string s = "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + "/" +
                  std::to_string(c.Hkv) + " Lq" + std::to_string(c.Lq) + " Lk" +
                  std::to_string(c.Lk) + " D" + std::to_string(c.D) + " Dv" +
                  std::to_string(c.Dv) + " q/k/v " + DTypeName(c.qt) + "/" +
                  DTypeName(c.kt) + "/" + DTypeName(c.vt) + " out " + DTypeName(c.outt) +
                  (c.want_lse ? std::string(" lse ") + DTypeName(c.lset) : " no-lse") +
                  " causal=" + CausalName(c.opt.causal) + " win=(" +
                  std::to_string(c.opt.window_left) + "," + std::to_string(c.opt.window_right) +
                  ") scale=" + std::to_string(c.opt.scale) + " mask=" + std::to_string(c.mask) +
                  (c.mask ? std::string(DTypeName(c.maskt)) : "") +
                  (c.kv_lens ? " kv_lens" : "") + (c.alibi ? " alibi" : "") +
                  " force=" + KernelKindName(c.kopt.force) + " tiles=" +
                  std::to_string(c.kopt.tile_q) + "/" + std::to_string(c.kopt.tile_kv) + "/" +
                  std::to_string(c.kopt.split_kv) + " threads=" + std::to_string(c.threads_a) +
                  "/" + std::to_string(c.threads_b) + " invalid=" + std::to_string(c.invalid) +
                  " seed=" + std::to_string(c.seed);
  return s;
}

// A pool per thread count, created once (creating threads per input would
// dominate the run time).
inline ThreadPool* Pool(int n) {
  static ThreadPool* pools[8] = {};
  if (pools[n] == nullptr) pools[n] = new ThreadPool(n);
  return pools[n];
}

inline void BuildInputs(ByteReader& in, Problem* p) {
  Config& c = p->c;
  Rng rng(c.seed);
  MakeLayout(in, c.qt, {c.B, c.H, c.Lq, c.D}, true, &p->q);
  MakeLayout(in, c.kt, {c.B, c.Hkv, c.Lk, c.D}, true, &p->k);
  MakeLayout(in, c.vt, {c.B, c.Hkv, c.Lk, c.Dv}, true, &p->v);
  FillNormal(&p->q, rng, c.qscale);
  FillNormal(&p->k, rng, c.kscale);
  FillNormal(&p->v, rng, c.vscale);

  if (c.mask != 0) {
    const int64_t full[4] = {c.B, c.H, c.Lq, c.Lk};
    Shape ms;
    for (int d = 4 - c.mask_rank; d < 4; ++d) ms.push_back(c.mask_full[d] ? full[d] : 1);
    MakeLayout(in, c.maskt, ms, true, &p->mask);
    const int64_t n = static_cast<int64_t>(p->mask.bytes / DTypeSize(c.maskt));
    const double p_true = 0.15 + 0.8 * rng.Uniform();
    for (int64_t i = 0; i < n; ++i) {
      if (c.mask == 1) {
        StoreRaw(DType::kBool, p->mask.base(), i, rng.Uniform() < p_true ? 1.0 : 0.0);
      } else {
        const double u = rng.Uniform();
        StoreRaw(c.maskt, p->mask.base(), i, u > p_true ? -kInf : c.mscale * rng.Normal());
      }
    }
    c.opt.attn_mask = p->mask.view;
  }
  if (c.kv_lens) {
    MakeLayout(in, c.kvlt, {c.B}, false, &p->kvl);
    ForEach(p->kvl.view, [&](int64_t off, const int64_t*) {
      const uint8_t sel = in.U8();
      const int64_t len = sel < 64 ? c.Lk : sel < 96 ? 0 : static_cast<int64_t>(rng.Below(static_cast<uint64_t>(c.Lk) + 1));
      StoreRaw(c.kvlt, p->kvl.base(), off, static_cast<double>(len));
    });
    c.opt.kv_lens = p->kvl.view;
  }
  if (c.alibi) {
    MakeLayout(in, c.alibit, {c.H}, false, &p->slopes);
    std::vector<double> std_slopes(static_cast<size_t>(std::max<int64_t>(c.H, 1)));
    if (c.H > 0) AlibiSlopes(c.H, std_slopes.data());
    const bool random = in.Bool();
    ForEach(p->slopes.view, [&](int64_t off, const int64_t* idx) {
      const double s = random ? (rng.Uniform() * 1.5 - 0.25) : std_slopes[static_cast<size_t>(idx[0])];
      StoreRaw(c.alibit, p->slopes.base(), off, s);
    });
    c.opt.alibi_slopes = p->slopes.view;
  }

  // Injected special values.
  const int n_inject = static_cast<int>(in.Pick(5));
  for (int s = 0; s < n_inject; ++s) {
    const uint8_t where = in.U8();
    Buffer* b = nullptr;
    switch (where % 5) {
      case 0: b = &p->q; break;
      case 1: b = &p->k; break;
      case 2: b = &p->v; break;
      case 3: b = c.mask ? &p->mask : &p->v; break;
      default: b = c.alibi ? &p->slopes : &p->k; break;
    }
    const int64_t n = static_cast<int64_t>(b->bytes / DTypeSize(b->view.dtype));
    if (n == 0) continue;
    const int64_t off = static_cast<int64_t>(in.U32() % static_cast<uint64_t>(n));
    const uint8_t code = in.U8();
    static const char* kNames[] = {"q", "k", "v", "mask", "slopes"};
    const char* bname = b == &p->q ? kNames[0] : b == &p->k ? kNames[1] : b == &p->v ? kNames[2]
                        : b == &p->mask ? kNames[3] : kNames[4];
    p->injected += std::string(" ") + bname + "[" + std::to_string(off) + "]=" +
                   (b->view.dtype == DType::kBool ? std::to_string(code) : std::to_string(SpecialValue(code)));
    if (b->view.dtype == DType::kBool) {
      // Any non-zero byte means "may attend".
      StoreRaw(DType::kBool, b->base(), off, static_cast<double>(code == 0 ? 0 : code));
    } else {
      StoreRaw(b->view.dtype, b->base(), off, SpecialValue(code));
    }
  }
  // Does V (as the kernels will read it) contain a non-finite value?
  const int64_t nv = static_cast<int64_t>(p->v.bytes / DTypeSize(c.vt));
  TensorView flat = p->v.view;
  for (int64_t i = 0; i < nv && !p->v_nonfinite; ++i) {
    if (!std::isfinite(flat.load(i))) p->v_nonfinite = true;
  }
}

// Breaks one argument (c.invalid in 1..24); returns a short description.
inline std::string Break(Problem* p, TensorView* out, TensorView* lse,
                         std::vector<int64_t>* bad_kvl) {
  Config& c = p->c;
  TensorView& q = p->q.view;
  TensorView& k = p->k.view;
  TensorView& v = p->v.view;
  switch (c.invalid) {
    case 1: q.rank = 3; return "q rank 3";
    case 2: k.shape[0] += 1; return "k batch";
    case 3: v.shape[2] += 1; return "v kv_len";
    case 4: k.shape[3] += 1; return "k head_dim";
    case 5: k.shape[1] = c.H + 1; v.shape[1] = c.H + 1; return "H % Hkv";
    case 6: q.dtype = DType::kI32; return "q dtype";
    case 7: c.opt.scale = kInf; return "scale inf";
    case 8: c.opt.window_left = -2; return "window -2";
    case 9: out->shape[3] += 1; return "out shape";
    case 10: out->dtype = DType::kF16; return "out dtype";
    case 11: if (lse->rank >= 0) lse->shape[2] += 1; else lse->rank = 2; return "lse shape";
    case 12: q.strides[2] = -1; return "negative stride";
    case 13: q.data = nullptr; return "null q";
    case 14: {
      bad_kvl->assign(static_cast<size_t>(c.B), c.Lk + 1);
      if (c.B == 0) bad_kvl->assign(1, 0);
      c.opt.kv_lens = MakeView(bad_kvl->data(), DType::kI64, {static_cast<int64_t>(bad_kvl->size())});
      return "kv_lens > Lk or wrong size";
    }
    case 15: {
      bad_kvl->assign(static_cast<size_t>(std::max<int64_t>(c.B, 1)), -1);
      c.opt.kv_lens = MakeView(bad_kvl->data(), DType::kI64, {c.B});
      return "kv_lens negative";
    }
    case 16: {
      TensorView m = c.opt.attn_mask.empty_view() ? q : c.opt.attn_mask;
      m.rank = 2;
      m.shape[0] = c.Lq + 1;
      m.shape[1] = c.Lk + 2;
      m.strides[0] = m.shape[1];
      m.strides[1] = 1;
      c.opt.attn_mask = m;
      return "mask not broadcastable";
    }
    case 17:
      if (!c.opt.attn_mask.empty_view()) {
        c.opt.attn_mask.dtype = DType::kI32;
      } else {
        c.opt.attn_mask = q;
        c.opt.attn_mask.rank = 1;
      }
      return "mask dtype/rank";
    case 18: c.opt.alibi_slopes = q; c.opt.alibi_slopes.rank = 1; c.opt.alibi_slopes.shape[0] = c.H + 1; return "slopes shape";
    case 19: k.dtype = DType::kU8; return "k dtype";
    case 20: v.rank = 3; return "v rank 3";
    case 21: c.opt.window_right = -7; return "window_right -7";
    case 22: c.opt.scale = -kInf; return "scale -inf";
    case 23: q.shape[0] = -1; return "negative dim";
    default: {
      bad_kvl->assign(static_cast<size_t>(std::max<int64_t>(c.B, 1)), 0);
      c.opt.kv_lens = MakeView(bad_kvl->data(), DType::kF32, {c.B});
      return "kv_lens dtype";
    }
  }
}

// Every logical element of `v` was written (differs from the canary
// snapshot) and nothing else in its storage was.
inline void CheckWrites(const Buffer& b, const std::vector<double>& before,
                        const TensorView& v, const std::string& what,
                        const std::string& desc) {
  if (b.bytes == 0 || v.data == nullptr) return;
  const size_t es = DTypeSize(v.dtype);
  const size_t n = b.bytes / es;
  std::vector<uint8_t> logical(n, 0);
  ForEach(v, [&](int64_t off, const int64_t*) { logical[static_cast<size_t>(off)] = 1; });
  const char* now = reinterpret_cast<const char*>(b.mem.data());
  const char* was = reinterpret_cast<const char*>(before.data());
  for (size_t i = 0; i < n; ++i) {
    const bool same = std::memcmp(now + i * es, was + i * es, es) == 0;
    if (logical[i]) {
      FUZZ_CHECK(!same, what + " element at storage offset " + std::to_string(i) +
                            " was never written: " + desc);
    } else {
      FUZZ_CHECK(same, what + " padding at storage offset " + std::to_string(i) +
                           " was written: " + desc);
    }
  }
}

inline void FillCanary(Buffer* b) {
  float* f = reinterpret_cast<float*>(b->mem.data());
  for (size_t i = 0; i < b->mem.size() * 2; ++i) f[i] = kCanary;
}

// ATTNFLOW_FUZZ_HWY=AVX2 (or SSE4, EMU128, AVX3, ...) restricts the
// kernels to that Highway target, so one build can fuzz every SIMD width.
// Must happen before the first Attention call (the dispatcher caches it).
inline void SelectHwyTargetOnce() {
  static const bool done = [] {
    const char* want = std::getenv("ATTNFLOW_FUZZ_HWY");
    if (want == nullptr || *want == '\0') return true;
    const int64_t supported = hwy::SupportedTargets();
    for (int64_t bits = supported; bits != 0; bits &= bits - 1) {
      const int64_t t = bits & -bits;
      if (std::string(hwy::TargetName(t)) == want) {
        hwy::SetSupportedTargetsForTest(t);
        std::fprintf(stderr, "attention fuzz: Highway target %s\n", want);
        return true;
      }
    }
    std::fprintf(stderr, "attention fuzz: Highway target %s is not supported here\n", want);
    std::abort();
  }();
  (void)done;
}

inline void FuzzAttention(const uint8_t* data, size_t size) {
  SelectHwyTargetOnce();
  ByteReader in(data, size);
  Problem p;
  p.c = Decode(in);
  Config& c = p.c;
  // Bound the work of one input (the float64 reference is scalar).
  const double work = static_cast<double>(c.B) * static_cast<double>(c.H) *
                      static_cast<double>(c.Lq) * static_cast<double>(c.Lk) *
                      static_cast<double>(c.D + c.Dv + 4);
  const double elems = static_cast<double>(c.B) * static_cast<double>(c.D + c.Dv) *
                       static_cast<double>(c.H * c.Lq + c.Hkv * c.Lk);
  if (work > 4e5 || elems > 1.5e5) return;
  BuildInputs(in, &p);

  // Snapshots of the inputs (must not change).
  const std::vector<double> q0 = p.q.mem, k0 = p.k.mem, v0 = p.v.mem, m0 = p.mask.mem;

  // Kernel outputs (F32 or F64 out, optional LSE), canary-filled.
  Buffer out_a, lse_a, out_b, lse_b;
  {
    ByteReader layout_in = in;
    MakeLayout(in, c.outt, {c.B, c.H, c.Lq, c.Dv}, false, &out_a);
    MakeLayout(layout_in, c.outt, {c.B, c.H, c.Lq, c.Dv}, false, &out_b);
  }
  {
    ByteReader layout_in = in;
    MakeLayout(in, c.lset, {c.B, c.H, c.Lq}, false, &lse_a);
    MakeLayout(layout_in, c.lset, {c.B, c.H, c.Lq}, false, &lse_b);
  }
  for (Buffer* b : {&out_a, &lse_a, &out_b, &lse_b}) FillCanary(b);
  const std::vector<double> out_before = out_a.mem, lse_before = lse_a.mem;
  TensorView out_view = out_a.view;
  TensorView lse_view = c.want_lse ? lse_a.view : TensorView();

  std::vector<int64_t> bad_kvl;
  std::string broken;
  if (c.invalid != 0) broken = Break(&p, &out_view, &lse_view, &bad_kvl);
  p.desc = Describe(c) + (broken.empty() ? "" : " broken: " + broken) +
           (p.injected.empty() ? "" : " injected:" + p.injected);

  // The oracle: float64 out/LSE, and the weights when V has non-finite values
  // (to recognise keys whose weight underflows in fp32).
  Buffer out_ref, lse_ref;
  out_ref.mem.assign(static_cast<size_t>(std::max<int64_t>(c.B * c.H * c.Lq * c.Dv, 0)) + 1, 0.0);
  lse_ref.mem.assign(static_cast<size_t>(std::max<int64_t>(c.B * c.H * c.Lq, 0)) + 1, 0.0);
  const TensorView oref = MakeView(out_ref.mem.data(), DType::kF64, {c.B, c.H, c.Lq, c.Dv});
  const TensorView lref = MakeView(lse_ref.mem.data(), DType::kF64, {c.B, c.H, c.Lq});
  StageRecorder rec(std::vector<std::string>{"weights"});
  const Status st_ref = reference::Sdpa(oref, lref, p.q.view, p.k.view, p.v.view, c.opt,
                                        p.v_nonfinite ? &rec : nullptr);

  KernelOptions kopt = c.kopt;
  kopt.pool = Pool(c.threads_a);
  KernelChoice choice;
  const Status st = Attention(out_view, lse_view, p.q.view, p.k.view, p.v.view, c.opt, kopt, &choice);

  // Inputs untouched.
  auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 8) == 0);
  };
  FUZZ_CHECK(same(p.q.mem, q0) && same(p.k.mem, k0) && same(p.v.mem, v0) && same(p.mask.mem, m0),
             "an input buffer was modified: " + p.desc);

  if (!st_ref.ok()) {
    FUZZ_CHECK(st_ref.message().rfind("reference::sdpa: ", 0) == 0,
               "reference error does not name the op: " + st_ref.ToString());
    FUZZ_CHECK(!st.ok(), "Attention accepted what the reference rejects (" +
                             st_ref.ToString() + "): " + p.desc);
    FUZZ_CHECK(st.code() == st_ref.code(), "different error codes: reference " +
                                               st_ref.ToString() + " vs " + st.ToString() +
                                               ": " + p.desc);
    FUZZ_CHECK(st.message().rfind("attention: ", 0) == 0,
               "Attention error does not name the op: " + st.ToString());
    return;
  }
  if (!st.ok()) {
    // Legitimate only when the call itself is invalid for Attention (broken
    // out/lse) or a fast kernel was forced where it cannot run.
    const bool out_broken = c.invalid == 9 || c.invalid == 10 || c.invalid == 11;
    const bool forced = c.kopt.force == KernelKind::kTiledPrefill ||
                        c.kopt.force == KernelKind::kSplitKvDecode;
    FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument &&
                   (out_broken || (forced && st.message().find("cannot force") != std::string::npos)),
               "Attention failed on a valid call: " + st.ToString() + ": " + p.desc);
    return;
  }
  FUZZ_CHECK(c.invalid != 9 && c.invalid != 10 && c.invalid != 11,
             "Attention accepted a broken out/lse: " + p.desc);
  // A "breakage" that happens to be valid for this shape (e.g. Hkv = H + 1
  // with H = 0) was accepted by both: nothing more to compare against the
  // config's dimensions.
  if (c.invalid != 0) return;

  // ExplainAttention agrees with what ran.
  {
    KernelChoice ex;
    const Status es = ExplainAttention(out_view, lse_view, p.q.view, p.k.view, p.v.view, c.opt, kopt, &ex);
    FUZZ_CHECK(es.ok() && ex.kernel == choice.kernel,
               "ExplainAttention disagrees with Attention: " + p.desc);
    if (c.kopt.force != KernelKind::kAuto) {
      FUZZ_CHECK(choice.kernel == c.kopt.force, "forced kernel not used: " + p.desc);
    }
  }

  CheckWrites(out_a, out_before, out_view, "out", p.desc);
  if (c.want_lse) CheckWrites(lse_a, lse_before, lse_view, "lse", p.desc);

  // ---- numbers vs the reference ------------------------------------------------
  const int64_t B = c.B, H = c.H, Hkv = c.Hkv, Lq = c.Lq, Lk = c.Lk, D = c.D, Dv = c.Dv;
  const double scale = std::fabs(std::isnan(c.opt.scale) ? DefaultScale(D) : c.opt.scale);
  double mmax = 0, amax = 0;
  if (c.mask == 2) {
    ForEach(p.mask.view, [&](int64_t off, const int64_t*) {
      const double x = p.mask.view.load(off);
      if (std::isfinite(x)) mmax = std::max(mmax, std::fabs(x));
    });
  }
  if (c.alibi) {
    ForEach(p.slopes.view, [&](int64_t off, const int64_t*) {
      const double x = p.slopes.view.load(off);
      if (std::isfinite(x)) amax = std::max(amax, std::fabs(x));
    });
    amax *= static_cast<double>(Lq + Lk + 1);
  }
  const Tensor* weights = rec.Find("weights");
  const Tolerance tol;
  std::vector<double> kmax(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      std::fill(kmax.begin(), kmax.end(), 0.0);
      double vmax = 0;
      for (int64_t j = 0; j < Lk; ++j) {
        for (int64_t x = 0; x < D; ++x) {
          const double kv = p.k.view.load(p.k.view.offset(b, hk, j, x));
          if (std::isfinite(kv)) kmax[static_cast<size_t>(x)] = std::max(kmax[static_cast<size_t>(x)], std::fabs(kv));
        }
        for (int64_t x = 0; x < Dv; ++x) {
          const double vv = p.v.view.load(p.v.view.offset(b, hk, j, x));
          if (std::isfinite(vv)) vmax = std::max(vmax, std::fabs(vv));
        }
      }
      for (int64_t h = hk * (H / Hkv); h < (hk + 1) * (H / Hkv); ++h) {
        for (int64_t i = 0; i < Lq; ++i) {
          double qk = 0;
          for (int64_t x = 0; x < D; ++x) {
            const double qv = p.q.view.load(p.q.view.offset(b, h, i, x));
            if (std::isfinite(qv)) qk += std::fabs(qv) * kmax[static_cast<size_t>(x)];
          }
          const double S = scale * qk + mmax + amax;
          const double lr = lref.load(lref.offset(b, h, i));
          const std::string at = " at [" + std::to_string(b) + "," + std::to_string(h) + "," +
                                 std::to_string(i) + "]: ";
          if (c.want_lse) {
            const double lk = lse_view.load(lse_view.offset(b, h, i));
            if (std::isnan(lr)) {
              FUZZ_CHECK(std::isnan(lk), "LSE should be NaN" + at + std::to_string(lk) + " " + p.desc);
            } else if (std::isinf(lr)) {
              FUZZ_CHECK(lk == lr, "LSE should be " + std::to_string(lr) + at + std::to_string(lk) + " " + p.desc);
            } else {
              FUZZ_CHECK(std::fabs(lk - lr) <= tol.Lse(S, lr, D, Lk),
                         "LSE " + std::to_string(lk) + " vs reference " + std::to_string(lr) + at +
                             "tol " + std::to_string(tol.Lse(S, lr, D, Lk)) + " " + p.desc);
            }
          }
          for (int64_t x = 0; x < Dv; ++x) {
            const double ok_ = out_view.load(out_view.offset(b, h, i, x));
            const double orf = oref.load(oref.offset(b, h, i, x));
            const std::string where = at + "col " + std::to_string(x) + ": got " +
                                      std::to_string(ok_) + " expected " + std::to_string(orf) + " ";
            if (std::isnan(lr)) {
              FUZZ_CHECK(std::isnan(ok_), "NaN row must be NaN" + where + p.desc);
              continue;
            }
            // Keys with a non-finite V in this column whose weight is so
            // small that fp32 may round it to 0 make the column ambiguous
            // (keys hidden from the row, weight exactly 0, are NOT: their V
            // must never matter — bug 1 in docs/errors.md).
            bool ambiguous = false;
            if (p.v_nonfinite && weights != nullptr) {
              for (int64_t j = 0; j < Lk && !ambiguous; ++j) {
                const double wj = weights->data<double>()[((b * H + h) * Lq + i) * Lk + j];
                if (wj > 0 && wj < 1e-25 &&
                    !IsFiniteAt(p.v.view, p.v.view.offset(b, hk, j, x))) {
                  ambiguous = true;
                }
              }
            }
            if (ambiguous) continue;
            if (lr == -kInf) {
              FUZZ_CHECK(ok_ == 0.0, "dead row must be exactly 0" + where + p.desc);
              continue;
            }
            if (std::isnan(orf)) {
              FUZZ_CHECK(std::isnan(ok_), "expected NaN" + where + p.desc);
            } else if (std::isinf(orf)) {
              FUZZ_CHECK(ok_ == orf, "expected infinity" + where + p.desc);
            } else {
              FUZZ_CHECK(std::isfinite(ok_) && std::fabs(ok_ - orf) <= tol.Out(S, vmax, D, Lk),
                         "out differs from the reference beyond the fp32 bound " +
                             std::to_string(tol.Out(S, vmax, D, Lk)) + where + p.desc);
            }
          }
        }
      }
    }
  }

  // ---- determinism across thread counts ---------------------------------------
  const TensorView out_view_b = out_b.view;
  const TensorView lse_view_b = c.want_lse ? lse_b.view : TensorView();
  kopt.pool = Pool(c.threads_b);
  KernelChoice choice_b;
  const Status st_b = Attention(out_view_b, lse_view_b, p.q.view, p.k.view, p.v.view, c.opt, kopt, &choice_b);
  FUZZ_CHECK(st_b.ok() && choice_b.kernel == choice.kernel,
             "second run with another thread count failed: " + st_b.ToString() + " " + p.desc);
  FUZZ_CHECK(out_a.mem.size() == out_b.mem.size() &&
                 std::memcmp(out_a.mem.data(), out_b.mem.data(), out_a.mem.size() * 8) == 0,
             "out differs between " + std::to_string(c.threads_a) + " and " +
                 std::to_string(c.threads_b) + " threads: " + p.desc);
  if (c.want_lse) {
    FUZZ_CHECK(std::memcmp(lse_a.mem.data(), lse_b.mem.data(), lse_a.mem.size() * 8) == 0,
               "LSE differs between thread counts: " + p.desc);
  }
}

}  // namespace attn

inline void FuzzAttention(const uint8_t* data, size_t size) {
  attn::FuzzAttention(data, size);
}

ATTNFLOW_FUZZ_REGISTER(attention, FuzzAttention);

}  // namespace attnflow_fuzz
