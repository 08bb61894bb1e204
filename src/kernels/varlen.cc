// varlen.cc — variable-length batches (FlashAttention's varlen API) and paged
// KV caches (flash_attn_with_kvcache's block table) on top of Attention and
// AttentionBackward.
//
// Both split a call into one problem per sequence, each with that sequence's
// own lengths, so FlashAttention's alignment rule (bottom-right causal, the
// window and ALiBi counted from each sequence's own end) is the ordinary
// padded rule of the sub-problem:
//  * varlen: sequence b is tokens [cu_q[b], cu_q[b+1]) of q and
//    [cu_k[b], cu_k[b+1]) of k/v — zero-copy strided views [1, H, L_b, D];
//  * paged: sequence b's keys j < cache_seqlens[b] live at
//    k_cache[block_table[b][j / page], j % page]; they are gathered (in
//    their own dtype) into one contiguous buffer, reused across sequences,
//    and attended with Attention. The gather reads K/V once more than a
//    page-aware kernel would (docs/kernels.md "Paged KV").
// Sequences run one after another (each call parallel inside), in index
// order: results do not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "attnflow/kernels.h"

namespace attnflow {
namespace {

int64_t LoadIndex(const TensorView& t, int64_t i) {
  return static_cast<int64_t>(t.load(i * t.strides[0]));
}

Status CheckRank(const char* op, const char* name, const TensorView& t, int rank,
                 const char* layout) {
  if (t.rank != rank) {
    return InvalidArgument(std::string(op) + ": " + name + " " +
                           (t.empty_view() ? std::string("is absent") : t.describe()) +
                           ", expected rank " + std::to_string(rank) + " " + layout);
  }
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] < 0 || t.strides[i] < 0) {
      return InvalidArgument(std::string(op) + ": " + name + " " + t.describe() +
                             " has a negative dimension or stride");
    }
  }
  if (t.numel() > 0 && t.data == nullptr) {
    return InvalidArgument(std::string(op) + ": " + name + " " + t.describe() + " has no data");
  }
  return Status::Ok();
}

bool IsIndex(DType t) { return t == DType::kI32 || t == DType::kI64; }

// cu [B+1] non-decreasing from 0 to total.
Status CheckCuSeqlens(const char* op, const char* name, const TensorView& cu, int64_t total) {
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, name, cu, 1, "[B+1]"));
  if (!IsIndex(cu.dtype) || cu.shape[0] < 1) {
    return InvalidArgument(std::string(op) + ": " + name + " " + cu.describe() +
                           " must be I32 or I64 [B+1] with B >= 0");
  }
  int64_t prev = 0;
  for (int64_t b = 0; b < cu.shape[0]; ++b) {
    const int64_t x = LoadIndex(cu, b);
    if ((b == 0 && x != 0) || x < prev || x > total) {
      return InvalidArgument(
          std::string(op) + ": " + name + "[" + std::to_string(b) + "] = " + std::to_string(x) +
          ": must start at 0, never decrease and end at " + std::to_string(total));
    }
    prev = x;
  }
  if (prev != total) {
    return InvalidArgument(std::string(op) + ": " + name + " ends at " + std::to_string(prev) +
                           ", but the packed tensor has " + std::to_string(total) + " tokens");
  }
  return Status::Ok();
}

Status CheckNoMaskOrKvLens(const char* op, const SdpaOptions& opt) {
  if (!opt.attn_mask.empty_view() || !opt.kv_lens.empty_view()) {
    return InvalidArgument(std::string(op) +
                           ": attn_mask and kv_lens are not used here (the sequence lengths "
                           "come from cu_seqlens / cache_seqlens)");
  }
  return Status::Ok();
}

// [T, heads, dim] packed tensor -> [1, heads, len, dim] view of tokens
// [t0, t0 + len); an absent tensor stays absent.
TensorView SeqView(const TensorView& t, int64_t t0, int64_t len) {
  if (t.empty_view()) return TensorView();
  TensorView v = t;
  v.rank = 4;
  v.shape = {1, t.shape[1], len, t.shape[2]};
  v.strides = {0, t.strides[1], t.strides[0], t.strides[2]};
  v.data =
      static_cast<char*>(t.data) + static_cast<int64_t>(DTypeSize(t.dtype)) * t0 * t.strides[0];
  return v;
}

// [T, heads] lse -> [1, heads, len] view of tokens [t0, t0 + len); an
// absent lse stays absent.
TensorView SeqLseView(const TensorView& t, int64_t t0, int64_t len) {
  if (t.empty_view()) return TensorView();
  TensorView v = t;
  v.rank = 3;
  v.shape = {1, t.shape[1], len, 0};
  v.strides = {0, t.strides[1], t.strides[0], 0};
  v.data =
      static_cast<char*>(t.data) + static_cast<int64_t>(DTypeSize(t.dtype)) * t0 * t.strides[0];
  return v;
}

// ALiBi slopes of sequence b: [H] as given, or row b of [B,H] as an [H] view.
TensorView SeqSlopes(const TensorView& s, int64_t b) {
  if (s.empty_view() || s.rank != 2) return s;
  TensorView v = s;
  v.rank = 1;
  v.shape = {s.shape[1], 0, 0, 0};
  v.strides = {s.strides[1], 0, 0, 0};
  v.data = static_cast<char*>(s.data) + static_cast<int64_t>(DTypeSize(s.dtype)) * b * s.strides[0];
  return v;
}

// The options of sequence b's own attention: its row of [B,H] slopes, and
// its own length as the diagonal (a sequence has no padding).
SdpaOptions SeqOptions(const SdpaOptions& opt, int64_t b) {
  SdpaOptions o = opt;
  o.alibi_slopes = SeqSlopes(opt.alibi_slopes, b);
  o.kv_align = KvAlign::kPadded;
  return o;
}

// Sequence b of a varlen batch: queries [q0, q0 + lq), keys [k0, k0 + lk).
struct SeqRange {
  int64_t q0, lq, k0, lk;
};
SeqRange SeqRangeOf(const TensorView& cu_q, const TensorView& cu_k, int64_t b) {
  const int64_t q0 = LoadIndex(cu_q, b), k0 = LoadIndex(cu_k, b);
  return {q0, LoadIndex(cu_q, b + 1) - q0, k0, LoadIndex(cu_k, b + 1) - k0};
}

struct VarlenDims {
  int64_t batch = 0, tq = 0, tk = 0, heads = 0, kv_heads = 0;
};

Status ValidateVarlen(const char* op, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& cu_q, const TensorView& cu_k, const SdpaOptions& opt,
                      VarlenDims* d) {
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "q", q, 3, "[Tq,H,D]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "k", k, 3, "[Tk,Hkv,D]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "v", v, 3, "[Tk,Hkv,Dv]"));
  if (k.shape[0] != v.shape[0]) {
    return InvalidArgument(std::string(op) + ": k " + k.shape_string() + " and v " +
                           v.shape_string() + " have different token counts");
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckCuSeqlens(op, "cu_seqlens_q", cu_q, q.shape[0]));
  ATTNFLOW_RETURN_IF_ERROR(CheckCuSeqlens(op, "cu_seqlens_k", cu_k, k.shape[0]));
  if (cu_q.shape[0] != cu_k.shape[0]) {
    return InvalidArgument(std::string(op) + ": cu_seqlens_q " + cu_q.shape_string() +
                           " and cu_seqlens_k " + cu_k.shape_string() +
                           " describe different batch sizes");
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckNoMaskOrKvLens(op, opt));
  d->batch = cu_q.shape[0] - 1;
  d->tq = q.shape[0];
  d->tk = k.shape[0];
  d->heads = q.shape[1];
  d->kv_heads = k.shape[1];
  if (!opt.alibi_slopes.empty_view() && opt.alibi_slopes.rank == 2 &&
      opt.alibi_slopes.shape[0] != d->batch) {
    return InvalidArgument(std::string(op) + ": alibi_slopes " + opt.alibi_slopes.describe() +
                           " should be [H] or [B,H] with B = " + std::to_string(d->batch));
  }
  return Status::Ok();
}

Status CheckPacked(const char* op, const char* name, const TensorView& t, int64_t tokens,
                   int64_t heads, int64_t dim, bool optional) {
  if (t.empty_view() && optional) return Status::Ok();
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, name, t, 3, "[T,heads,dim]"));
  if (t.shape[0] != tokens || t.shape[1] != heads || t.shape[2] != dim) {
    return InvalidArgument(std::string(op) + ": " + name + " " + t.shape_string() + " should be [" +
                           std::to_string(tokens) + "," + std::to_string(heads) + "," +
                           std::to_string(dim) + "]");
  }
  return Status::Ok();
}

Status CheckLse(const char* op, const char* name, const TensorView& t, int64_t tokens,
                int64_t heads) {
  if (t.empty_view()) return Status::Ok();
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, name, t, 2, "[Tq,H]"));
  if (t.shape[0] != tokens || t.shape[1] != heads) {
    return InvalidArgument(std::string(op) + ": " + name + " " + t.shape_string() + " should be [" +
                           std::to_string(tokens) + "," + std::to_string(heads) + "]");
  }
  return Status::Ok();
}

// The forward's outputs (or, in the backward, inputs): out [Tq,H,Dv]
// (optional: may be empty) and lse [Tq,H] (may be empty).
Status CheckOutLse(const char* op, const VarlenDims& d, const TensorView& v, const TensorView& out,
                   bool out_optional, const TensorView& lse) {
  ATTNFLOW_RETURN_IF_ERROR(CheckPacked(op, "out", out, d.tq, d.heads, v.shape[2], out_optional));
  return CheckLse(op, "lse", lse, d.tq, d.heads);
}

// Runs fn(b) for the sequences b = 0..batch-1 in order and stops at the
// first error, which then names its sequence ("op: sequence b: ...").
template <class Fn>
Status ForEachSequence(const char* op, int64_t batch, Fn fn) {
  for (int64_t b = 0; b < batch; ++b) {
    const Status st = fn(b);
    if (!st.ok()) {
      return Status(st.code(),
                    std::string(op) + ": sequence " + std::to_string(b) + ": " + st.message());
    }
  }
  return Status::Ok();
}

}  // namespace

Status AttentionVarlen(const TensorView& out, const TensorView& lse, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& cu_seqlens_q,
                       const TensorView& cu_seqlens_k, const SdpaOptions& opt,
                       const KernelOptions& kopt) {
  const char* op = "attention_varlen";
  VarlenDims d;
  ATTNFLOW_RETURN_IF_ERROR(ValidateVarlen(op, q, k, v, cu_seqlens_q, cu_seqlens_k, opt, &d));
  ATTNFLOW_RETURN_IF_ERROR(CheckOutLse(op, d, v, out, false, lse));
  return ForEachSequence(op, d.batch, [&](int64_t b) {
    const SeqRange r = SeqRangeOf(cu_seqlens_q, cu_seqlens_k, b);
    return Attention(SeqView(out, r.q0, r.lq), SeqLseView(lse, r.q0, r.lq), SeqView(q, r.q0, r.lq),
                     SeqView(k, r.k0, r.lk), SeqView(v, r.k0, r.lk), SeqOptions(opt, b), kopt);
  });
}

Status AttentionVarlenBackward(const TensorView& dq, const TensorView& dk, const TensorView& dv,
                               const TensorView& dout, const TensorView& dlse, const TensorView& q,
                               const TensorView& k, const TensorView& v, const TensorView& out,
                               const TensorView& lse, const TensorView& cu_seqlens_q,
                               const TensorView& cu_seqlens_k, const SdpaOptions& opt,
                               const KernelOptions& kopt) {
  const char* op = "attention_varlen_backward";
  VarlenDims d;
  ATTNFLOW_RETURN_IF_ERROR(ValidateVarlen(op, q, k, v, cu_seqlens_q, cu_seqlens_k, opt, &d));
  ATTNFLOW_RETURN_IF_ERROR(CheckPacked(op, "dout", dout, d.tq, d.heads, v.shape[2], false));
  ATTNFLOW_RETURN_IF_ERROR(CheckOutLse(op, d, v, out, true, lse));
  ATTNFLOW_RETURN_IF_ERROR(CheckLse(op, "dlse", dlse, d.tq, d.heads));
  ATTNFLOW_RETURN_IF_ERROR(CheckPacked(op, "dq", dq, d.tq, d.heads, q.shape[2], true));
  ATTNFLOW_RETURN_IF_ERROR(CheckPacked(op, "dk", dk, d.tk, d.kv_heads, k.shape[2], true));
  ATTNFLOW_RETURN_IF_ERROR(CheckPacked(op, "dv", dv, d.tk, d.kv_heads, v.shape[2], true));
  return ForEachSequence(op, d.batch, [&](int64_t b) {
    const SeqRange r = SeqRangeOf(cu_seqlens_q, cu_seqlens_k, b);
    const int64_t q0 = r.q0, lq = r.lq, k0 = r.k0, lk = r.lk;
    return AttentionBackward(SeqView(dq, q0, lq), SeqView(dk, k0, lk), SeqView(dv, k0, lk),
                             SeqView(dout, q0, lq), SeqLseView(dlse, q0, lq), SeqView(q, q0, lq),
                             SeqView(k, k0, lk), SeqView(v, k0, lk), SeqView(out, q0, lq),
                             SeqLseView(lse, q0, lq), SeqOptions(opt, b), kopt);
  });
}

Status AttentionPaged(const TensorView& out, const TensorView& lse, const TensorView& q,
                      const TensorView& k_cache, const TensorView& v_cache,
                      const TensorView& block_table, const TensorView& cache_seqlens,
                      const SdpaOptions& opt, const KernelOptions& kopt) {
  const char* op = "attention_paged";
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "q", q, 4, "[B,H,Lq,D]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "k_cache", k_cache, 4, "[num_blocks,page,Hkv,D]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "v_cache", v_cache, 4, "[num_blocks,page,Hkv,Dv]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "block_table", block_table, 2, "[B,max_blocks]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckRank(op, "cache_seqlens", cache_seqlens, 1, "[B]"));
  ATTNFLOW_RETURN_IF_ERROR(CheckNoMaskOrKvLens(op, opt));
  const int64_t B = q.shape[0], nblocks = k_cache.shape[0], page = k_cache.shape[1];
  const int64_t Hkv = k_cache.shape[2], D = k_cache.shape[3], Dv = v_cache.shape[3];
  const std::string shapes = "q " + q.shape_string() + ", k_cache " + k_cache.shape_string() +
                             ", v_cache " + v_cache.shape_string() + ", block_table " +
                             block_table.shape_string();
  if (v_cache.shape[0] != nblocks || v_cache.shape[1] != page || v_cache.shape[2] != Hkv) {
    return InvalidArgument(std::string(op) + ": k_cache and v_cache disagree: " + shapes);
  }
  if (!IsIndex(block_table.dtype) || !IsIndex(cache_seqlens.dtype)) {
    return InvalidArgument(std::string(op) + ": block_table " + block_table.describe() +
                           " and cache_seqlens " + cache_seqlens.describe() +
                           " must be I32 or I64");
  }
  if (block_table.shape[0] != B || cache_seqlens.shape[0] != B) {
    return InvalidArgument(std::string(op) + ": block_table / cache_seqlens " +
                           cache_seqlens.shape_string() + " must have B = " + std::to_string(B) +
                           " rows: " + shapes);
  }
  if (page < 1 && B > 0) {
    return InvalidArgument(std::string(op) + ": page size (k_cache dim 1) must be >= 1: " + shapes);
  }
  if (!opt.alibi_slopes.empty_view() && opt.alibi_slopes.rank == 2 &&
      opt.alibi_slopes.shape[0] != B) {
    return InvalidArgument(std::string(op) + ": alibi_slopes " + opt.alibi_slopes.describe() +
                           " should be [H] or [B,H] with B = " + std::to_string(B));
  }
  const int64_t max_blocks = block_table.shape[1];
  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = LoadIndex(cache_seqlens, b);
    if (len < 0 || len > max_blocks * page) {
      return OutOfRange(
          std::string(op) + ": cache_seqlens[" + std::to_string(b) + "] = " + std::to_string(len) +
          " is outside [0, max_blocks*page = " + std::to_string(max_blocks * page) + "]");
    }
    for (int64_t j = 0; j < (len + page - 1) / page; ++j) {
      const int64_t blk = static_cast<int64_t>(
          block_table.load(b * block_table.strides[0] + j * block_table.strides[1]));
      if (blk < 0 || blk >= nblocks) {
        return OutOfRange(std::string(op) + ": block_table[" + std::to_string(b) + "][" +
                          std::to_string(j) + "] = " + std::to_string(blk) +
                          " is outside [0, num_blocks=" + std::to_string(nblocks) + ")");
      }
    }
    max_len = std::max(max_len, len);
  }
  // One gather buffer per tensor for the longest sequence: [len][Hkv][dim].
  Result<Tensor> kbuf = Tensor::Zeros(k_cache.dtype, {std::max<int64_t>(max_len, 1), Hkv, D});
  Result<Tensor> vbuf = Tensor::Zeros(v_cache.dtype, {std::max<int64_t>(max_len, 1), Hkv, Dv});
  if (!kbuf.ok() || !vbuf.ok()) {
    return ResourceExhausted(std::string(op) + ": cannot allocate the gather buffers for " +
                             std::to_string(max_len) + " keys: " + shapes);
  }
  auto gather = [&](const TensorView& cache, Tensor* buf, int64_t b, int64_t len) {
    const size_t es = DTypeSize(cache.dtype);
    const int64_t dim = cache.shape[3];
    char* dst = static_cast<char*>(buf->view().data);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t blk = static_cast<int64_t>(
          block_table.load(b * block_table.strides[0] + (j / page) * block_table.strides[1]));
      const char* row =
          static_cast<const char*>(cache.data) +
          static_cast<int64_t>(es) * (blk * cache.strides[0] + (j % page) * cache.strides[1]);
      for (int64_t h = 0; h < Hkv; ++h) {
        const char* src = row + static_cast<int64_t>(es) * h * cache.strides[2];
        char* d = dst + static_cast<int64_t>(es) * ((j * Hkv + h) * dim);
        if (cache.strides[3] == 1) {
          std::memcpy(d, src, es * static_cast<size_t>(dim));
        } else {
          for (int64_t c = 0; c < dim; ++c) {
            std::memcpy(d + es * static_cast<size_t>(c),
                        src + static_cast<int64_t>(es) * c * cache.strides[3], es);
          }
        }
      }
    }
  };
  return ForEachSequence(op, B, [&](int64_t b) {
    const int64_t len = LoadIndex(cache_seqlens, b);
    gather(k_cache, &kbuf.value(), b, len);
    gather(v_cache, &vbuf.value(), b, len);
    // [len][Hkv][dim] as [1, Hkv, len, dim].
    TensorView kv = kbuf->view(), vv = vbuf->view();
    for (TensorView* t : {&kv, &vv}) {
      const int64_t dim = t->shape[2];
      t->rank = 4;
      t->shape = {1, Hkv, len, dim};
      t->strides = {0, dim, Hkv * dim, 1};
    }
    auto batch = [b](const TensorView& t) {
      if (t.empty_view()) return t;
      TensorView r = t;
      r.shape[0] = 1;
      r.strides[0] = 0;
      r.data =
          static_cast<char*>(t.data) + static_cast<int64_t>(DTypeSize(t.dtype)) * b * t.strides[0];
      return r;
    };
    return Attention(batch(out), batch(lse), batch(q), kv, vv, SeqOptions(opt, b), kopt);
  });
}

}  // namespace attnflow
