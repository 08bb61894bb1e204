// validate.cc — boundary validation for every attention entry point.
//
// Invariant: after ValidateSdpa returns Ok, every index an implementation
// computes from SdpaDims, the (broadcast) mask, kv_lens and alibi_slopes is in
// bounds. Every error message names the operation and the offending shapes or
// values.
#include <cmath>
#include <string>

#include "attnflow/attention.h"

namespace attnflow {
namespace {

std::string Join(const char* op, const std::string& msg) {
  return std::string(op) + ": " + msg;
}

Status CheckRank(const char* op, const char* name, const TensorView& t, int rank,
                 const char* layout) {
  if (t.rank != rank) {
    return InvalidArgument(Join(op, std::string(name) + " has rank " +
                                        std::to_string(t.rank) + " " +
                                        t.shape_string() + ", expected rank " +
                                        std::to_string(rank) + " " + layout));
  }
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] < 0 || t.strides[i] < 0) {
      return InvalidArgument(Join(op, std::string(name) + " " + t.shape_string() +
                                          " has a negative dimension or stride"));
    }
  }
  if (t.numel() > 0 && t.data == nullptr) {
    return InvalidArgument(Join(op, std::string(name) + " " + t.describe() +
                                        " has no data"));
  }
  return Status::Ok();
}

bool IsFloatDType(DType t) { return IsFloat(t); }

}  // namespace

bool BroadcastMask(const TensorView& mask, const int64_t target[4],
                   TensorView* out) {
  if (mask.rank < 2 || mask.rank > 4) return false;
  TensorView r = mask;
  r.rank = 4;
  const int pad = 4 - mask.rank;
  for (int d = 0; d < 4; ++d) {
    const int src = d - pad;
    const int64_t n = src >= 0 ? mask.shape[src] : 1;
    const int64_t s = src >= 0 ? mask.strides[src] : 0;
    if (n == target[d]) {
      r.shape[d] = n;
      r.strides[d] = (n == 1) ? 0 : s;
    } else if (n == 1) {
      r.shape[d] = target[d];
      r.strides[d] = 0;
    } else {
      return false;
    }
  }
  *out = r;
  return true;
}

Status ValidateSdpa(const char* op, const TensorView& out,
                    const TensorView& lse, const TensorView& q,
                    const TensorView& k, const TensorView& v,
                    const SdpaOptions& opt, SdpaDims* dims) {
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "q", q, 4, "[B,H,Lq,D]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "k", k, 4, "[B,Hkv,Lk,D]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "v", v, 4, "[B,Hkv,Lk,Dv]"));
  for (const auto* t : {&q, &k, &v}) {
    if (!IsFloatDType(t->dtype)) {
      return InvalidArgument(Join(op, "q/k/v must be F32, F16, BF16 or F64; got q " +
                                          q.describe() + ", k " + k.describe() +
                                          ", v " + v.describe()));
    }
  }
  const std::string shapes = "q " + q.shape_string() + ", k " + k.shape_string() +
                             ", v " + v.shape_string();
  SdpaDims d{};
  d.batch = q.shape[0];
  d.num_heads = q.shape[1];
  d.q_len = q.shape[2];
  d.head_dim = q.shape[3];
  d.num_kv_heads = k.shape[1];
  d.kv_len = k.shape[2];
  d.v_dim = v.shape[3];
  if (k.shape[0] != d.batch || v.shape[0] != d.batch) {
    return InvalidArgument(Join(op, "batch sizes differ: " + shapes));
  }
  if (v.shape[1] != d.num_kv_heads || v.shape[2] != d.kv_len) {
    return InvalidArgument(Join(op, "k and v disagree on [Hkv, Lk]: " + shapes));
  }
  if (k.shape[3] != d.head_dim) {
    return InvalidArgument(Join(op, "q and k head_dim differ: " + shapes));
  }
  if (d.num_kv_heads == 0 ? d.num_heads != 0 : d.num_heads % d.num_kv_heads != 0) {
    return InvalidArgument(Join(op, "num_heads H=" + std::to_string(d.num_heads) +
                                        " is not a multiple of num_kv_heads Hkv=" +
                                        std::to_string(d.num_kv_heads) + ": " + shapes));
  }
  // Scale.
  if (std::isnan(opt.scale)) {
    d.scale = DefaultScale(d.head_dim);
  } else if (!std::isfinite(opt.scale)) {
    return InvalidArgument(Join(op, "scale must be finite, got " +
                                        std::to_string(opt.scale)));
  } else {
    d.scale = opt.scale;
  }
  if (opt.window_left < -1 || opt.window_right < -1) {
    return InvalidArgument(Join(op, "window (" + std::to_string(opt.window_left) +
                                        ", " + std::to_string(opt.window_right) +
                                        ") must be >= -1 (-1 = unbounded)"));
  }
  // Outputs.
  if (!out.empty_view()) {
    ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "out", out, 4, "[B,H,Lq,Dv]"));
    if (out.shape[0] != d.batch || out.shape[1] != d.num_heads ||
        out.shape[2] != d.q_len || out.shape[3] != d.v_dim) {
      return InvalidArgument(Join(op, "out " + out.shape_string() + " should be [" +
                                          std::to_string(d.batch) + "," +
                                          std::to_string(d.num_heads) + "," +
                                          std::to_string(d.q_len) + "," +
                                          std::to_string(d.v_dim) + "] for " + shapes));
    }
    if (out.dtype != DType::kF32 && out.dtype != DType::kF64) {
      return InvalidArgument(Join(op, "out must be F32 or F64, got " + out.describe()));
    }
  }
  if (!lse.empty_view()) {
    ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "lse", lse, 3, "[B,H,Lq]"));
    if (lse.shape[0] != d.batch || lse.shape[1] != d.num_heads ||
        lse.shape[2] != d.q_len) {
      return InvalidArgument(Join(op, "lse " + lse.shape_string() + " should be [B,H,Lq] = [" +
                                          std::to_string(d.batch) + "," +
                                          std::to_string(d.num_heads) + "," +
                                          std::to_string(d.q_len) + "]"));
    }
    if (lse.dtype != DType::kF32 && lse.dtype != DType::kF64) {
      return InvalidArgument(Join(op, "lse must be F32 or F64, got " + lse.describe()));
    }
  }
  // Mask.
  if (!opt.attn_mask.empty_view()) {
    const TensorView& m = opt.attn_mask;
    if (m.rank < 2 || m.rank > 4) {
      return InvalidArgument(Join(op, "attn_mask has rank " + std::to_string(m.rank) +
                                          " " + m.shape_string() +
                                          ", expected rank 2 to 4 broadcastable to [B,H,Lq,Lk]"));
    }
    if (m.dtype != DType::kBool && !IsFloatDType(m.dtype)) {
      return InvalidArgument(Join(op, "attn_mask must be BOOL or float, got " +
                                          m.describe()));
    }
    const int64_t target[4] = {d.batch, d.num_heads, d.q_len, d.kv_len};
    TensorView b;
    if (!BroadcastMask(m, target, &b)) {
      return InvalidArgument(Join(op, "attn_mask " + m.shape_string() +
                                          " is not broadcastable to [B,H,Lq,Lk] = " +
                                          ShapeString(target, 4)));
    }
    ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "attn_mask", m, m.rank, "[..,Lq,Lk]"));
  }
  // kv_lens.
  if (!opt.kv_lens.empty_view()) {
    const TensorView& kl = opt.kv_lens;
    if (kl.rank != 1 || kl.shape[0] != d.batch) {
      return InvalidArgument(Join(op, "kv_lens " + kl.shape_string() + " should be [B] = [" +
                                          std::to_string(d.batch) + "]"));
    }
    if (kl.dtype != DType::kI64 && kl.dtype != DType::kI32) {
      return InvalidArgument(Join(op, "kv_lens must be I64 or I32, got " + kl.describe()));
    }
    ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "kv_lens", kl, 1, "[B]"));
    for (int64_t b = 0; b < d.batch; ++b) {
      const double len = kl.load(b * kl.strides[0]);
      if (len < 0 || len > static_cast<double>(d.kv_len)) {
        return OutOfRange(Join(op, "kv_lens[" + std::to_string(b) + "] = " +
                                       std::to_string(static_cast<int64_t>(len)) +
                                       " is outside [0, Lk=" +
                                       std::to_string(d.kv_len) + "]"));
      }
    }
  }
  // ALiBi slopes: [H] or [B,H].
  if (!opt.alibi_slopes.empty_view()) {
    const TensorView& s = opt.alibi_slopes;
    const bool per_head = s.rank == 1 && s.shape[0] == d.num_heads;
    const bool per_batch = s.rank == 2 && s.shape[0] == d.batch && s.shape[1] == d.num_heads;
    if (!(per_head || per_batch) || !IsFloatDType(s.dtype)) {
      return InvalidArgument(Join(op, "alibi_slopes " + s.describe() +
                                          " should be float [H] = [" +
                                          std::to_string(d.num_heads) + "] or [B,H] = [" +
                                          std::to_string(d.batch) + "," +
                                          std::to_string(d.num_heads) + "]"));
    }
    ATTNFLOW_RETURN_IF_ERROR(
        CheckRank(op, "alibi_slopes", s, s.rank, per_head ? "[H]" : "[B,H]"));
  }
  // Softcap and the diagonal alignment.
  if (!(opt.softcap >= 0.0) || !std::isfinite(opt.softcap)) {
    return InvalidArgument(Join(op, "softcap must be finite and >= 0 (0 = off), got " +
                                        std::to_string(opt.softcap)));
  }
  if (opt.kv_align != KvAlign::kPadded && opt.kv_align != KvAlign::kPerSequence) {
    return InvalidArgument(Join(op, "kv_align must be padded or per_sequence"));
  }
  if (dims != nullptr) *dims = d;
  return Status::Ok();
}

}  // namespace attnflow
