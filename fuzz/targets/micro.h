// micro.h (fuzz harness) — the micro library's C API (include/attnflow/
// micro.h) with fuzzed shapes, options, arena sizes and cache structs, every
// buffer sized exactly as the declared shape needs (so ASan sees any read or
// write past it), under ASan + UBSan.
//
// Properties beyond "no crash, no sanitizer report":
//  * a refused call returns a documented af_status and writes nothing (the
//    outputs keep their fill pattern);
//  * an accepted f32 call writes finite outputs (inputs are finite) and lse
//    values that are finite or -inf;
//  * a call never touches the arena past the size it was given (a canary
//    follows it), and an arena below the reported workspace is refused;
//  * the stage probe accepts exactly what the kernel accepts;
//  * a decode over a cache struct whose window or length was changed after
//    init (the caller's struct) is refused or stays inside the storage;
//  * misuse is refused (include/attnflow/micro.h): a NaN/inf planted in q or
//    a fuzzed huge scale gives AF_ERR_PARAM or finite outputs, never NaN;
//    an output over an input or the arena gives AF_ERR_ALIAS; a fuzzed
//    multiplier out of range gives AF_ERR_PARAM from af_linear_s8; a refused
//    preparing call leaves its output as it was.
#pragma once

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "../common/fuzz_common.h"
#include "attnflow/micro.h"

namespace attnflow_fuzz {

namespace micro_detail {

constexpr uint32_t kCanary = 0xA5A5A5A5u;

inline bool Known(af_status s) { return s >= AF_OK && s <= AF_ERR_ALIAS; }

// f32 and int8 SDPA with options.
inline void Sdpa(ByteReader& r) {
  af_sdpa_shape s;
  s.batch = int32_t(r.Range(-1, 3));
  s.num_heads = int32_t(r.Range(0, 5));
  s.num_kv_heads = int32_t(r.Range(0, 3));
  s.q_len = int32_t(r.Range(-1, 9));
  s.kv_len = int32_t(r.Range(-1, 40));
  s.head_dim = int32_t(r.Range(0, 17));
  s.v_dim = int32_t(r.Range(0, 9));
  s.causal = af_causal(r.Range(0, 3));
  // Buffers sized from the declared shape (0 for negative dims).
  auto dim = [](int32_t x) { return size_t(x > 0 ? x : 0); };
  const size_t nq = dim(s.batch) * dim(s.num_heads) * dim(s.q_len) * dim(s.head_dim);
  const size_t nk = dim(s.batch) * dim(s.num_kv_heads) * dim(s.kv_len) * dim(s.head_dim);
  const size_t nv = dim(s.batch) * dim(s.num_kv_heads) * dim(s.kv_len) * dim(s.v_dim);
  const size_t no = dim(s.batch) * dim(s.num_heads) * dim(s.q_len) * dim(s.v_dim);
  const size_t nl = dim(s.batch) * dim(s.num_heads) * dim(s.q_len);
  std::vector<float> q(nq), k(nk), v(nv), out(no + 1, 7.f), lse(nl + 1, 7.f);
  std::vector<int8_t> q8(nq), k8(nk), v8(nv), out8(no + 1, 7);
  for (size_t i = 0; i < nq; ++i) q8[i] = int8_t(r.U8()), q[i] = q8[i] / 16.f;
  for (size_t i = 0; i < nk; ++i) k8[i] = int8_t(r.U8()), k[i] = k8[i] / 16.f;
  for (size_t i = 0; i < nv; ++i) v8[i] = int8_t(r.U8()), v[i] = v8[i] / 16.f;
  std::vector<int32_t> kv_lens(dim(s.batch));
  const bool use_kl = r.Bool();
  for (auto& x : kv_lens) x = int32_t(r.Range(-1, s.kv_len + 1));
  // Options: a mask with fuzzed extents (buffer sized by them), window, ALiBi.
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  const int mt = int(r.Range(0, 3));
  size_t nm = 1;
  for (int d = 0; d < 4; ++d) {
    const int32_t full[4] = {s.batch, s.num_heads, s.q_len, s.kv_len};
    o.mask_shape[d] = r.Bool() ? full[d] : int32_t(r.Range(0, 3));
    nm *= dim(o.mask_shape[d]);
  }
  std::vector<uint8_t> mb(nm);
  std::vector<float> mf(nm);
  std::vector<int32_t> ms(nm);
  for (size_t i = 0; i < nm; ++i) {
    mb[i] = r.U8() & 1;
    const int sel = int(r.Range(0, 7));
    mf[i] = sel == 0 ? -INFINITY : float(sel - 4);
    ms[i] = sel == 0 ? AF_S8_MASKED : int32_t(r.U32());
  }
  o.window_left = int32_t(r.Range(-2, 12));
  o.window_right = int32_t(r.Range(-2, 4));
  // ALiBi [H] or [B,H] (buffer sized for the declared extents), the
  // diagonal alignment (2 is invalid) and softcap (f32: 0, 0.5, 5, NaN or
  // -1; int8: prepared constants or fuzzed ones, [H][4]).
  const bool alibi_bh = r.Bool();
  std::vector<float> slopes((alibi_bh ? dim(s.batch) : 1) * dim(s.num_heads));
  std::vector<int32_t> slopes8(slopes.size());
  const bool alibi = r.Bool();
  for (size_t h = 0; h < slopes.size(); ++h) {
    slopes[h] = float(r.U8()) / 64.f;
    slopes8[h] = int32_t(r.U32());
  }
  o.kv_align = af_kv_align(r.Range(0, 2));
  const float caps[5] = {0.f, 0.5f, 5.f, NAN, -1.f};
  const float cap = caps[r.Range(0, 4)];
  std::vector<int32_t> cap8(4 * dim(s.num_heads));
  const int cap8_mode = int(r.Range(0, 2));  // none, prepared, fuzzed
  if (cap8_mode == 1 && !cap8.empty()) {
    const float sq = 1.f / 16;
    if (af_s8_softcap_prepare(cap8.data(), 5.f, s.num_heads, &sq, &sq, 1, 0.25f) != AF_OK)
      FUZZ_CHECK(false, "af_s8_softcap_prepare refused a valid cap");
  } else {
    for (auto& x : cap8) x = int32_t(r.U32());
  }
  const size_t arena_req = size_t(r.Range(0, 1024));
  std::vector<uint32_t> arena(arena_req / 4 + 8, kCanary);
  // Misuse: a NaN or inf in q, a scale up to 3e38, out over q.
  const int misuse = int(r.Range(0, 5));
  if (misuse == 1 && nq > 0) q[r.Range(0, int64_t(nq) - 1)] = r.Bool() ? NAN : -INFINITY;
  const float scales[4] = {0.25f, 1e30f, 3e38f, 1e-30f};
  const float scale = misuse == 2 ? scales[r.Range(0, 3)] : 0.25f;
  for (int path = 0; path < 2; ++path) {
    af_sdpa_opts po = o;
    if (mt != 0) {
      po.mask_type = mt == 1 ? AF_MASK_BOOL : (path == 0 ? AF_MASK_F32 : AF_MASK_S32);
      po.mask = mt == 1 ? static_cast<const void*>(mb.data())
                        : (path == 0 ? static_cast<const void*>(mf.data())
                                     : static_cast<const void*>(ms.data()));
    }
    if (alibi) {
      if (path == 0)
        po.alibi_slopes = slopes.empty() ? nullptr : slopes.data();
      else
        po.alibi_s8 = slopes8.empty() ? nullptr : slopes8.data();
      po.alibi_per_batch = alibi_bh;
    }
    if (path == 0)
      po.softcap = cap;
    else if (cap8_mode != 0 && !cap8.empty())
      po.softcap_s8 = cap8.data();
    const bool shape_ok = af_sdpa_check_shape(&s) == AF_OK;
    const bool opts_ok = shape_ok && af_sdpa_check_opts(&po, &s, path) == AF_OK;
    std::fill(out.begin(), out.end(), 7.f);
    std::fill(lse.begin(), lse.end(), 7.f);
    std::fill(out8.begin(), out8.end(), int8_t(7));
    const size_t ws = path ? af_sdpa_s8_workspace_bytes(&s) : af_sdpa_f32_workspace_bytes(&s);
    af_status st;
    if (path == 0) {
      st = af_sdpa_f32_ex(out.data(), lse.data(), q.data(), k.data(), v.data(),
                          use_kl ? kv_lens.data() : nullptr, scale, &s, &po, arena.data(),
                          arena_req);
      if (misuse == 1 && nq > 0)
        FUZZ_CHECK(st != AF_OK, "a NaN/inf in q was accepted");
      if (misuse == 3 && st == AF_OK && nq > 0 && nq <= no) {
        // out over q (q copied first): the same call must now be refused.
        std::vector<float> both(no + 1, 0.f);
        std::copy(q.begin(), q.end(), both.begin());
        const std::vector<float> before = both;
        const af_status sa = af_sdpa_f32_ex(both.data(), nullptr, both.data(), k.data(), v.data(),
                                            use_kl ? kv_lens.data() : nullptr, scale, &s, &po,
                                            arena.data(), arena_req);
        FUZZ_CHECK(sa == AF_ERR_ALIAS, "out over q was not refused as an overlap");
        FUZZ_CHECK(both == before, "a refused overlapping call wrote");
      }
    } else {
      af_s8_params p;
      const float sq = 1.f / 16, one = 1.f;
      if (af_s8_prepare(&p, &sq, &sq, &one, &one, 1, 0.25f) != AF_OK) continue;
      const int32_t* kl = use_kl ? kv_lens.data() : nullptr;
      // The lean entry point refuses a softcap (the softcap one takes it).
      st = af_sdpa_s8_ex(out8.data(), q8.data(), k8.data(), v8.data(), kl, &p, &s, &po,
                         arena.data(), arena_req);
      if (misuse == 4 && st == AF_OK && no > 0)  // the arena over out
        FUZZ_CHECK(af_sdpa_s8_ex(reinterpret_cast<int8_t*>(arena.data()), q8.data(), k8.data(),
                                 v8.data(), kl, &p, &s, &po, arena.data(), arena_req) ==
                       AF_ERR_ALIAS,
                   "an arena over out was not refused");
      FUZZ_CHECK(po.softcap_s8 == nullptr || st != AF_OK, "the lean entry point took a softcap");
      if (po.softcap_s8 != nullptr)
        st = af_sdpa_s8_softcap_ex(out8.data(), q8.data(), k8.data(), v8.data(), kl, &p, &s, &po,
                                   arena.data(), arena_req);
    }
    FUZZ_CHECK(Known(st), "unknown status");
    for (size_t i = arena_req / 4 + 1; i < arena.size(); ++i)
      FUZZ_CHECK(arena[i] == kCanary, "arena written past its size");
    if (st == AF_OK) {
      FUZZ_CHECK(opts_ok && arena_req >= ws, "accepted a call its own checks refuse");
      if (path == 0) {
        for (size_t i = 0; i < no; ++i) FUZZ_CHECK(std::isfinite(out[i]), "non-finite out");
        for (size_t i = 0; i < nl; ++i)
          FUZZ_CHECK(std::isfinite(lse[i]) || lse[i] == -INFINITY, "NaN or +inf lse");
      }
      // The probe accepts the same call, for one row.
      if (s.batch > 0 && s.q_len > 0) {
        // One row per stage (the probe refuses stage rows that overlap).
        const size_t lk = dim(s.kv_len) + 1;
        std::vector<float> row(4 * lk);
        std::vector<int32_t> irow(3 * lk);
        float l;
        int32_t ws8;
        af_s8_params p;
        const float sq = 1.f / 16, one = 1.f;
        af_s8_prepare(&p, &sq, &sq, &one, &one, 1, 0.25f);
        const af_status ps =
            path == 0 ? af_sdpa_f32_probe(row.data(), row.data() + lk, row.data() + 2 * lk,
                                          row.data() + 3 * lk, &l, q.data(), k.data(),
                                          use_kl ? kv_lens.data() : nullptr, scale, &s, &po,
                                          s.batch - 1, s.num_heads - 1, s.q_len - 1)
                      : af_sdpa_s8_probe(irow.data(), irow.data() + lk, irow.data() + 2 * lk,
                                         &ws8, q8.data(),
                                         k8.data(), use_kl ? kv_lens.data() : nullptr, &p, &s,
                                         &po, s.batch - 1, s.num_heads - 1, s.q_len - 1);
        FUZZ_CHECK(ps == AF_OK, "the probe refused a row the kernel accepted");
      }
    } else {
      FUZZ_CHECK(path == 0 ? out[0] == 7.f && lse[0] == 7.f : out8[0] == 7,
                 "a refused call wrote its output");
    }
  }
}

// Decode over a cache whose struct the caller changed after init.
inline void Decode(ByteReader& r) {
  const int32_t hkv = int32_t(r.Range(1, 3)), d = int32_t(r.Range(1, 9)),
                dv = int32_t(r.Range(1, 9)), cap = int32_t(r.Range(1, 12)),
                win = int32_t(r.Range(0, cap));
  std::vector<float> ks(size_t(hkv) * cap * d), vs(size_t(hkv) * cap * dv);
  af_kv_cache c;
  if (af_kv_cache_init(&c, ks.data(), vs.data(), hkv, d, dv, cap, win) != AF_OK) return;
  std::vector<float> kn(size_t(hkv) * d, 0.5f), vn(size_t(hkv) * dv, 0.25f);
  const int steps = int(r.Range(0, 20));
  for (int t = 0; t < steps; ++t) af_kv_cache_append(&c, kn.data(), vn.data());
  const int h = hkv * int32_t(r.Range(1, 3));
  std::vector<float> q(size_t(h) * d, 0.1f), out(size_t(h) * dv + 1, 7.f), slopes(size_t(h), 0.5f);
  std::vector<uint32_t> arena(64, kCanary);
  for (int tamper = 0; tamper < 3; ++tamper) {
    af_kv_cache t = c;
    if (tamper == 1) t.window = int32_t(r.Range(-2, 3 * cap));
    if (tamper == 2) t.length = int32_t(r.Range(-3, 4 * cap));
    const af_status st = af_decode_f32_ex(out.data(), nullptr, q.data(), &t, h, 0.3f,
                                          r.Bool() ? slopes.data() : nullptr, arena.data(), 128);
    FUZZ_CHECK(Known(st), "unknown status");
    if (st == AF_OK)
      for (int i = 0; i < h * dv; ++i) FUZZ_CHECK(std::isfinite(out[i]), "non-finite decode");
    const af_status sa = af_kv_cache_append(&t, kn.data(), vn.data());
    FUZZ_CHECK(Known(sa), "unknown status");
  }
}

// MHA with fuzzed shape and arena size.
inline void Mha(ByteReader& r) {
  af_mha_shape s;
  s.batch = int32_t(r.Range(0, 2));
  s.q_len = int32_t(r.Range(0, 5));
  s.kv_len = int32_t(r.Range(0, 6));
  s.embed = int32_t(r.Range(0, 12));
  s.num_heads = int32_t(r.Range(0, 4));
  s.num_kv_heads = int32_t(r.Range(0, 4));
  s.causal = af_causal(r.Range(0, 2));
  auto dim = [](int32_t x) { return size_t(x > 0 ? x : 0); };
  const size_t e = dim(s.embed), kvw = s.num_heads > 0 && s.embed % s.num_heads == 0
                                           ? dim(s.num_kv_heads) * (e / dim(s.num_heads))
                                           : 0;
  std::vector<float> xq(dim(s.batch) * dim(s.q_len) * e, 0.3f),
      xk(dim(s.batch) * dim(s.kv_len) * e, 0.2f), wq(e * e, 0.1f), wk(kvw * e, 0.1f),
      wo(e * e, 0.1f), out(dim(s.batch) * dim(s.q_len) * e + 1, 7.f);
  af_mha_weights_f32 w = {wq.data(), wk.data(), wk.data(), wo.data(), nullptr, nullptr, nullptr,
                          nullptr};
  const size_t ws = af_mha_f32_workspace_bytes(&s);
  const size_t arena_req = size_t(r.Range(0, 4096));
  std::vector<uint32_t> arena(arena_req / 4 + 8, kCanary);
  const af_status st = af_mha_f32(out.data(), xq.data(), xk.data(), xk.data(), nullptr, &w, 0.5f,
                                  &s, arena.data(), arena_req, nullptr);
  FUZZ_CHECK(Known(st), "unknown status");
  for (size_t i = arena_req / 4 + 1; i < arena.size(); ++i)
    FUZZ_CHECK(arena[i] == kCanary, "mha arena written past its size");
  if (st == AF_OK) FUZZ_CHECK(ws != 0 && arena_req >= ws, "mha accepted a too small arena");
}

// The int8 block pieces and the preparing functions with fuzzed
// multipliers, scales and overlaps.
inline void Pieces(ByteReader& r) {
  const int32_t in = int32_t(r.Range(1, 8)), out = int32_t(r.Range(1, 8));
  std::vector<int8_t> x(size_t(in) + 8), w(size_t(in) * out), y(size_t(out) + 16, 7);
  for (auto& v : x) v = int8_t(r.U8());
  for (auto& v : w) v = int8_t(r.U8());
  std::vector<af_qmult> m(static_cast<size_t>(out));
  bool in_range = true;
  for (auto& q : m) {
    q.mult = r.Bool() ? int32_t(r.U32()) : (1 << 30);
    q.shift = r.Bool() ? int32_t(r.U32()) : int32_t(r.Range(-31, 30));
    in_range = in_range && q.mult >= 0 && q.shift >= -31 && q.shift <= 30;
  }
  const int8_t* xp = r.Bool() ? y.data() + r.Range(0, 7) : x.data();  // x over y?
  const bool overlap = xp != x.data() && xp < y.data() + out;
  const std::vector<int8_t> y0 = y;
  const af_status st = af_linear_s8(y.data(), xp, w.data(), nullptr, m.data(), in, out);
  FUZZ_CHECK(Known(st), "unknown status");
  FUZZ_CHECK((st == AF_OK) == (in_range && !overlap), "af_linear_s8 took misuse or refused a call");
  if (st != AF_OK) FUZZ_CHECK(y == y0, "a refused af_linear_s8 wrote");
  // Preparing: fuzzed scales (some NaN, inf, negative); refused = untouched.
  const float pick[6] = {0.1f, 1e-3f, NAN, INFINITY, -1.f, 1e30f};
  const int32_t n = int32_t(r.Range(1, 4));
  const size_t un = static_cast<size_t>(n);
  std::vector<float> sq(un), sk(un), mask(un * 3);
  for (auto& v : sq) v = pick[r.Range(0, 5)];
  for (auto& v : sk) v = pick[r.Range(0, 5)];
  for (auto& v : mask) v = r.Bool() ? pick[r.Range(0, 5)] : -INFINITY;
  af_s8_params p;
  std::memset(&p, 0x5A, sizeof p);
  af_s8_params p0 = p;
  if (af_s8_prepare(&p, sq.data(), sk.data(), sq.data(), sk.data(), n, 0.25f) != AF_OK)
    FUZZ_CHECK(std::memcmp(&p, &p0, sizeof p) == 0, "a refused af_s8_prepare wrote");
  std::vector<int32_t> al(un, -5), mk(mask.size(), -5);
  if (af_s8_alibi_prepare(al.data(), sq.data(), n, sq.data(), sk.data(), n, 0.25f) != AF_OK)
    for (int32_t v : al) FUZZ_CHECK(v == -5, "a refused af_s8_alibi_prepare wrote");
  if (af_s8_mask_prepare(mk.data(), mask.data(), int32_t(mask.size()), sq[0], sk[0], 0.25f) !=
      AF_OK)
    for (int32_t v : mk) FUZZ_CHECK(v == -5, "a refused af_s8_mask_prepare wrote");
}

}  // namespace micro_detail

inline void FuzzMicro(const uint8_t* data, size_t size) {
  ByteReader r(data, size);
  switch (r.Pick(4)) {
    case 0:
      micro_detail::Sdpa(r);
      break;
    case 1:
      micro_detail::Decode(r);
      break;
    case 2:
      micro_detail::Pieces(r);
      break;
    default:
      micro_detail::Mha(r);
      break;
  }
}

ATTNFLOW_FUZZ_REGISTER(micro, FuzzMicro);

}  // namespace attnflow_fuzz
