// attnflow/kernels.h — fast exact attention with explainable dispatch.
//
// Attention() validates like reference::Sdpa, then picks a kernel:
//   "tiled_prefill"   FlashAttention-style tiled online softmax (Highway SIMD)
//   "split_kv_decode" flash-decoding for few query rows over a long KV cache
//   "reference"       the float64 oracle, for anything no fast path covers
//   "naive"           materialised fp32 S and P (write S, read S, write P,
//                     read P); only when forced, never chosen by auto
// and reports the choice and the reason in KernelChoice (CLI: --explain).
// Results are fp32 (accumulated in fp32), never depend on the thread count,
// and follow attnflow/semantics.h exactly. See docs/kernels.md.
//
// Fast kernels cover: q F32, k/v F32/F16/BF16 (any mix), out F32, lse F32
// (optional), any strides, head dims 1..256, GQA/MQA, bool and float masks
// (F32/F64/F16/BF16, broadcast), kv_lens, causal (both alignments), sliding
// window, ALiBi, custom scale. Anything else goes to reference::Sdpa.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "attnflow/attention.h"
#include "attnflow/threading.h"

namespace attnflow {

enum class KernelKind : uint8_t { kAuto, kReference, kTiledPrefill, kSplitKvDecode, kNaive };
// "auto", "reference", "tiled_prefill", "split_kv_decode", "naive".
const char* KernelKindName(KernelKind k);
bool ParseKernelKind(std::string_view s, KernelKind* out);

// Largest q_len for which kAuto picks split_kv_decode.
constexpr int64_t kDecodeMaxQueryLen = 4;
// Largest head_dim / v_dim the fast kernels handle.
constexpr int64_t kFastMaxHeadDim = 256;

struct KernelOptions {
  KernelKind force = KernelKind::kAuto;  // kAuto = let dispatch decide
  ThreadPool* pool = nullptr;            // nullptr = DefaultPool()
  // Tuning overrides (0 = automatic). They change the fp32 reduction order
  // (so results may differ in the last bits between settings) but never make
  // results depend on the thread count. Values beyond the problem are clamped
  // (tile_q to min(4096, G*Lq), tile_kv to min(65536, Lk), split_kv to Lk).
  int64_t tile_q = 0;   // prefill: query rows per tile (rounded up to the SIMD row block)
  int64_t tile_kv = 0;  // keys per tile (rounded up to a multiple of 16)
  int64_t split_kv = 0; // decode: keys per split (rounded up to tile_kv)
};

struct KernelChoice {
  KernelKind kernel = KernelKind::kReference;
  std::string reason;       // why this kernel (and why not the others)
  std::string simd_target;  // Highway target name, e.g. "AVX3"
  int64_t tile_q = 0, tile_kv = 0;  // tile sizes chosen (0 = n/a)
  int64_t num_splits = 0;           // decode KV splits (0 = n/a)
  int64_t num_tasks = 0;            // parallel tasks (0 = n/a)
  // "tiled_prefill [AVX3] tile_q=64 tile_kv=128 tasks=128: q_len=1024 > ..."
  // (the reason without its leading "<kernel>: ").
  std::string ToString() const;
};

// Chooses without running (validates the arguments first).
Status ExplainAttention(const TensorView& out, const TensorView& lse,
                        const TensorView& q, const TensorView& k,
                        const TensorView& v, const SdpaOptions& opt,
                        const KernelOptions& kopt, KernelChoice* choice);

// out [B,H,Lq,Dv] F32; lse [B,H,Lq] F32 optional. See attention.h for shapes.
Status Attention(const TensorView& out, const TensorView& lse,
                 const TensorView& q, const TensorView& k, const TensorView& v,
                 const SdpaOptions& opt, const KernelOptions& kopt = {},
                 KernelChoice* choice = nullptr);

// Modelled DRAM traffic of one attention call in bytes (fp32 elements; each
// pass reads or writes its tensors once, no reuse across passes; see
// docs/kernels.md "Bytes, not math"):
//   naive: read Q, K, V; write S, read S, write P, read P; write O.
//   flash: read Q, write O; K and V once per query tile of tile_q rows
//          (G = num_heads / num_kv_heads heads share a tile; tile_q 0 = one tile).
struct IoModel {
  double naive_bytes = 0, flash_bytes = 0;
  double s_and_p_bytes = 0;  // the naive part: 4 · batch·num_heads·q_len·kv_len·4
};
IoModel ModelAttentionIo(int64_t batch, int64_t num_heads, int64_t num_kv_heads, int64_t q_len,
                         int64_t kv_len, int64_t head_dim, int64_t tile_q);

}  // namespace attnflow
