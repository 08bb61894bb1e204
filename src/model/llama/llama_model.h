// llama_model.h — Llama-family decoder from a GGUF file (internal API behind
// LoadModel(*.gguf); the CLI and tests use it for the options LoadModel does
// not take).
//
// Architecture (general.architecture = "llama"): token embedding, N blocks of
//   h = RMSNorm(x) * attn_norm
//   q, k, v = h Wq^T, h Wk^T, h Wv^T; RoPE(q, k) at absolute positions
//   x += Attention(q, K cache, V cache; causal bottom_right, GQA) Wo^T
//   h = RMSNorm(x) * ffn_norm
//   x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T
// then RMSNorm * output_norm and logits = h Wout^T (Wout = token_embd when
// output.weight is absent: tied embeddings).
//
// RoPE layout: llama.cpp's HF->GGUF conversion permutes the rows of Wq/Wk
// within each head so that rotated pairs are adjacent (2i, 2i+1) instead of
// HF's halves (i, i + D/2). This model applies RoPE to adjacent pairs on the
// GGUF weights as stored, which gives exactly HF's q.k products; captured q/k
// stages are permuted back to HF's layout.
//
// Invariants: weights are read in place from the read-only mapping (no
// dequantised copy; see ops::QMatMul in attnflow/ops.h); the KV cache holds RoPE'd keys and values
// for positions [0, CacheLength()) in [kv_head, capacity, head_dim] layout
// (head-major: attention streams each head's keys; F32, F16 or BF16); Forward()
// either appends all its ids to the cache or leaves CacheLength() unchanged
// (on error); logits never depend on the thread count.
// A model object holds one sequence's cache: it is not safe to call Forward()
// from several threads at once (load one model per concurrent sequence; the
// weights are a shared read-only mapping, so that costs only the cache).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attnflow/model.h"
#include "attnflow/tensor.h"
#include "attnflow/ops.h"

namespace attnflow::llama {

struct LlamaOptions {
  DType kv_dtype = DType::kF32;  // kF32, kF16 or kBF16
  int num_threads = 0;           // 0 = DefaultPool() (ATTNFLOW_NUM_THREADS)
  // Token count from which matmuls use the packed GEMM path (see ops::QMatMul in attnflow/ops.h).
  int64_t gemm_min_tokens = ops::kDefaultGemmMinTokens;
  // Cap on the context (0 = the model's context_length).
  int64_t max_context = 0;
  // Reserve the KV cache for the whole context up front (address space only:
  // pages are backed as they are written), so appends never copy. false (or
  // a refused reservation) grows it by 1.5x with a copy; tests use false to
  // cover that path.
  bool reserve_kv = true;
  // One-token forward (decode) without stage capture runs each layer's
  // matvecs, norms, RoPE, SwiGLU and cache append in one parallel region per
  // layer (plus the attention call's own); false runs the op-by-op path.
  // Both give bit-identical logits (tests compare them).
  bool fused_decode = true;
  // Opt-in, NOT exact (`--fast-dot`): the fused decode step's matvecs
  // quantise their activation vector to int8 blocks of 32 once and use
  // integer dot products (ops::QMatVecRowsFast; weight types without one
  // keep the exact dot). Prefill, the op-by-op path and stage capture stay
  // exact. Logits still never depend on the thread count.
  bool fast_dot = false;
};

Result<std::unique_ptr<DecoderModel>> LoadLlamaGgufWithOptions(
    const std::string& path, const LlamaOptions& options);

// The same loader on an in-memory GGUF image (fuzzing, tests); `label` names
// it in errors.
Result<std::unique_ptr<DecoderModel>> LoadLlamaGgufFromBuffer(
    std::vector<uint8_t> bytes, const std::string& label, const LlamaOptions& options);

}  // namespace attnflow::llama
