// llama_decode_test.cc — the Llama fused decode step (one parallel region per
// token, core::PhasedRegion, with the attention kernel's planned tasks and
// merge as phases; src/model/llama/llama_model.cc DecodeStep) against the
// op-by-op path (attnflow::Attention per layer) on the tiny synthetic model:
// bit-identical logits step after step. Small and self-contained (no model
// download), so CI's TSan job (tests named *decode*) runs the region
// protocol -- item stealing, per-phase completion counts, per-task residual
// copies -- under ThreadSanitizer with 1, 2, 3 and 7 threads.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/model.h"
#include "attnflow/tensor.h"
#include "gtest/gtest.h"
#include "model/llama/llama_model.h"
#include "util/tiny_llama_util.h"

namespace attnflow {
namespace {

using ::attnflow::testing::LoadTiny;
using ::attnflow::testing::TinyOpts;

double MaxDiff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

// The tiny model's logits after `prompt`, then after each of `steps`, through
// the fused decode step on 1, 2, 3 and 7 threads equal, bit for bit, those of the
// op-by-op path (fused_decode = false, 2 threads); the cache length follows.
void ExpectFusedEqualsOpByOp(const TinyOpts& to, DType kv, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& steps) {
  llama::LlamaOptions ref_o;
  ref_o.kv_dtype = kv;
  ref_o.fused_decode = false;
  ref_o.num_threads = 2;
  auto ref = std::move(LoadTiny(to, ref_o)).value();
  Tensor l;
  ASSERT_TRUE(ref->Forward(prompt, false, &l).ok());
  std::vector<std::vector<float>> want;
  for (int32_t id : steps) {
    ASSERT_TRUE(ref->Forward({id}, false, &l).ok());
    want.emplace_back(l.data<float>(), l.data<float>() + l.numel());
  }
  for (int threads : {1, 2, 3, 7}) {
    llama::LlamaOptions o;
    o.kv_dtype = kv;
    o.num_threads = threads;
    auto m = std::move(LoadTiny(to, o)).value();
    ASSERT_TRUE(m->Forward(prompt, false, &l).ok());
    for (size_t i = 0; i < steps.size(); ++i) {
      ASSERT_TRUE(m->Forward({steps[i]}, false, &l).ok());
      ASSERT_EQ(l.numel(), static_cast<int64_t>(want[i].size()));
      EXPECT_EQ(MaxDiff(l.data<float>(), want[i].data(), l.numel()), 0.0)
          << "step " << i << " (context " << prompt.size() + i + 1 << "), " << threads << " threads";
    }
    EXPECT_EQ(m->CacheLength(), static_cast<int64_t>(prompt.size() + steps.size()));
  }
}

// The fused decode step (matvec chunks with RoPE / SwiGLU / cache append
// applied to each chunk, per-task norms; here one region per token) gives
// exactly the op-by-op path's logits, step after step (so the cache it
// writes is the same too), for 1-7 threads, every cache dtype, tied and
// untied heads and every weight type of the tiny model (quantised, F16, F32).
TEST(LlamaLoader, FusedDecodeStepEqualsOpByOp) {
  for (bool tied : {false, true}) {
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(std::string("tied ") + (tied ? "1" : "0") + ", kv " + DTypeName(kv));
      TinyOpts to;
      to.tied = tied;
      ExpectFusedEqualsOpByOp(to, kv, {256, 72, 105}, {33, 200, 7, 100, 3, 99, 257, 0});
    }
  }
}

// Across the context where the decode kernel starts splitting the keys (one
// split up to 512 keys for the tiny model's 2 kv heads, two past it: the
// attention phase then has (kv head, split) tasks and the merge phase
// combines them), the fused step still gives the op-by-op path's logits bit
// for bit, on 1-7 threads.
TEST(LlamaLoader, FusedDecodeStepEqualsOpByOpAcrossTheSplitBoundary) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 505; ++i) prompt.push_back((i * 37 + 11) % 256);
  TinyOpts to;
  to.context = 1024;
  ExpectFusedEqualsOpByOp(to, DType::kF32, prompt, {33, 200, 7, 100, 3, 99, 257, 0, 12, 48, 5, 250});
}

}  // namespace
}  // namespace attnflow
