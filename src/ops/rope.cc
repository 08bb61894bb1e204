// ops/rope.cc — rotary position embedding (ops::RopeInvFreq, RopeTables,
// Rope) in both layouts.
//
// Layouts: kHalf rotates dim i with dim i + r/2 (HF's rotate_half);
// kInterleaved rotates 2i with 2i + 1 (GGUF / llama.cpp order, GPT-J).
// Rounding follows HF exactly: out_i = x_i*cos - x_partner*sin (first half)
// and x_i*cos + x_partner*sin (second half), each product rounded to fp32
// before the sum; cos/sin come from angles computed in fp32 as HF does
// (positions * inv_freq, then cos/sin rounded).
//
// Plain C++: RoPE is one pass over q and k (well under 1% of a decoder
// step); the compiler vectorises the kHalf loop. Tasks are tokens, so the
// split depends on the shape only.
#include <cmath>

#include "attnflow/ops.h"

namespace attnflow::ops {

// As HF computes it in fp32: 1 / base^(float(2c) / rotary_dim), the power
// correctly rounded to fp32 (through double), then the fp32 reciprocal.
void RopeInvFreq(float* inv_freq, double base, int64_t rotary_dim) {
  const float b = static_cast<float>(base);
  for (int64_t c = 0; c < rotary_dim / 2; ++c) {
    const float e = static_cast<float>(2 * c) / static_cast<float>(rotary_dim);
    const float pw = static_cast<float>(std::pow(static_cast<double>(b), static_cast<double>(e)));
    inv_freq[c] = 1.0f / pw;
  }
}

void RopeTables(float* cos, float* sin, const int64_t* positions, const float* inv_freq,
                double pos_scale, int64_t tokens, int64_t rotary_dim) {
  const int64_t half = rotary_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const float pos = static_cast<float>(static_cast<double>(positions[t]) * pos_scale);
    for (int64_t c = 0; c < half; ++c) {
      const float ang = pos * inv_freq[c];
      cos[t * half + c] = std::cos(ang);
      sin[t * half + c] = std::sin(ang);
    }
  }
}

void Rope(float* x, int64_t ldx, const float* cos, const float* sin, RopeLayout layout,
          int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim, ThreadPool& pool) {
  const int64_t half = rotary_dim / 2;
  auto rotate_token = [&](int64_t t, int) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* p = x + t * ldx + h * head_dim;
      if (layout == RopeLayout::kInterleaved) {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = p[2 * i], x1 = p[2 * i + 1];
          const float a0 = x0 * c[i], b0 = x1 * s[i];
          const float a1 = x1 * c[i], b1 = x0 * s[i];
          p[2 * i] = a0 - b0;
          p[2 * i + 1] = a1 + b1;
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = p[i], x1 = p[i + half];
          const float a0 = x0 * c[i], b0 = x1 * s[i];
          const float a1 = x1 * c[i], b1 = x0 * s[i];
          p[i] = a0 - b0;
          p[i + half] = a1 + b1;
        }
      }
    }
  };
  if (tokens <= 0 || half <= 0) return;
  if (tokens < 8) {
    for (int64_t t = 0; t < tokens; ++t) rotate_token(t, 0);
  } else {
    pool.ParallelFor(tokens, rotate_token);
  }
}

}  // namespace attnflow::ops
