/* attnflow/micro.h — the edge port kit: heap-free attention in C99 for
 * microcontrollers (docs/edge.md is the porter's guide).
 *
 * Invariants (every function below):
 *  - No heap, no printf, no abort, no static mutable state: all scratch memory
 *    comes from a caller arena whose size the matching *_workspace_bytes()
 *    function returns for a shape. A call never touches arena bytes beyond
 *    that size, and never reads past the documented input extents.
 *  - Shapes are validated first; errors come back as af_status codes and no
 *    output is written on error.
 *  - Semantics are those of include/attnflow/semantics.h / docs/semantics.md:
 *    layout q [B,H,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv], out [B,H,Lq,Dv],
 *    row-major; query head h reads kv head h / (H / Hkv); causal top_left
 *    (j <= i) or bottom_right (j <= i + Lk - Lq) computed on the tensor
 *    lengths; kv_lens[b] pads keys j >= kv_lens[b]; a row with no visible key
 *    gives out 0 and lse -inf (never NaN).
 *  - The f32 path streams over key tiles with an online softmax (no Lq x Lk
 *    buffer, no full score row); fp32 accumulation, no fast-math.
 *  - The int8 path (af_sdpa_s8) executes integer instructions only; its
 *    parameters (af_s8_params) are prepared once, on the host or at start-up,
 *    by af_s8_prepare(), which is the only function that uses floating point.
 */
#ifndef ATTNFLOW_MICRO_H_
#define ATTNFLOW_MICRO_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  AF_OK = 0,
  AF_ERR_NULL = 1,     /* a required pointer is NULL */
  AF_ERR_SHAPE = 2,    /* a dimension is out of range or inconsistent */
  AF_ERR_ARENA = 3,    /* arena too small (or misaligned) */
  AF_ERR_PARAM = 4,    /* a parameter (scale, kv_lens, window) is invalid */
  AF_ERR_FULL = 5      /* KV cache full and no sliding window */
} af_status;

/* Short name of a status code ("ok", "null pointer", ...). */
const char* af_status_name(af_status s);

typedef enum {
  AF_CAUSAL_NONE = 0,
  AF_CAUSAL_TOP_LEFT = 1,
  AF_CAUSAL_BOTTOM_RIGHT = 2
} af_causal;

/* Largest value of any one dimension (keeps every index product in 32 bits
 * for the sizes validated below). */
#define AF_MAX_DIM 65535
/* Key tile widths of the streaming kernels (the scores of one tile per query
 * row in flight live in the arena): f32 and int8. */
#define AF_KEY_TILE 32
#define AF_S8_KEY_TILE 24

typedef struct {
  int32_t batch, num_heads, num_kv_heads, q_len, kv_len, head_dim, v_dim;
  af_causal causal;
} af_sdpa_shape;

/* Validates a shape: every dim >= 1 (q_len/kv_len/batch may be 0 for an empty
 * call), num_heads % num_kv_heads == 0, total element counts < 2^31. */
af_status af_sdpa_check_shape(const af_sdpa_shape* s);

/* ---------------------------------------------------------------- f32 --- */

/* Arena bytes af_sdpa_f32 needs for shape s (0 if the shape is invalid). */
size_t af_sdpa_f32_workspace_bytes(const af_sdpa_shape* s);

/* out [B,H,Lq,Dv] (also the accumulator: must not overlap q, k or v);
 * lse [B,H,Lq] or NULL; kv_lens [B] or NULL (each in [0, kv_len]);
 * scale > 0 and finite (pass 1/sqrt(head_dim) for the default).
 * Arena: >= af_sdpa_f32_workspace_bytes(s) bytes (2 * AF_KEY_TILE floats),
 * 4-byte aligned. */
af_status af_sdpa_f32(float* out, float* lse, const float* q, const float* k,
                      const float* v, const int32_t* kv_lens, float scale,
                      const af_sdpa_shape* s, void* arena, size_t arena_bytes);

/* Decode over a ring-buffer KV cache (one sequence, f32). The cache holds at
 * most `capacity` positions per kv head: k [Hkv, capacity, D],
 * v [Hkv, capacity, Dv]. Position p lives in slot p % capacity. With
 * window == 0 the cache refuses to grow beyond capacity (AF_ERR_FULL); with
 * window > 0 (window <= capacity) the step attends to the last `window`
 * positions (itself included) and older slots are overwritten. */
typedef struct {
  float* k;
  float* v;
  int32_t num_kv_heads, head_dim, v_dim, capacity, window;
  int32_t length; /* positions appended so far */
} af_kv_cache;

af_status af_kv_cache_init(af_kv_cache* c, float* k_storage, float* v_storage,
                           int32_t num_kv_heads, int32_t head_dim,
                           int32_t v_dim, int32_t capacity, int32_t window);
/* Appends one position: k_new [Hkv, D], v_new [Hkv, Dv]. */
af_status af_kv_cache_append(af_kv_cache* c, const float* k_new,
                             const float* v_new);
size_t af_decode_f32_workspace_bytes(const af_kv_cache* c, int32_t num_heads);
/* One decode step for the newest position: q [H, D], out [H, Dv], lse [H] or
 * NULL. Attends to positions max(0, length - window) .. length-1 (all when
 * window == 0). */
af_status af_decode_f32(float* out, float* lse, const float* q,
                        const af_kv_cache* c, int32_t num_heads, float scale,
                        void* arena, size_t arena_bytes);

/* ---------------------------------------------------------------- MHA --- */

/* torch.nn.MultiheadAttention semantics (batch first) with GQA projections,
 * as reference::Mha / docs/golden-format.md "mha":
 *   x_q [B,Lq,E], x_k/x_v [B,Lk,E]; w_q [E,E], w_k/w_v [Hkv*Dh, E],
 *   w_o [E,E] (row = output feature), biases optional (NULL = 0);
 *   q = x_q w_q^T + b_q split into H heads of Dh = E/H columns, likewise k, v
 *   into Hkv heads; SDPA as af_sdpa_f32; concat heads; out = concat w_o^T + b_o.
 * Arena per batch element (reused): projected q, k, v, the head outputs, one
 * concat row and the SDPA arena. */
typedef struct {
  int32_t batch, q_len, kv_len, embed, num_heads, num_kv_heads;
  af_causal causal;
} af_mha_shape;

typedef struct {
  const float *w_q, *w_k, *w_v, *w_o;
  const float *b_q, *b_k, *b_v, *b_o; /* each may be NULL */
} af_mha_weights_f32;

/* Optional intermediate stages for golden checks (any pointer may be NULL):
 * q [B,H,Lq,Dh], k/v [B,Hkv,Lk,Dh], lse [B,H,Lq], heads_out [B,H,Lq,Dh],
 * concat [B,Lq,E]. */
typedef struct {
  float *q, *k, *v, *lse, *heads_out, *concat;
} af_mha_stages_f32;

size_t af_mha_f32_workspace_bytes(const af_mha_shape* s);
af_status af_mha_f32(float* out, const float* x_q, const float* x_k, const float* x_v,
                     const int32_t* kv_lens, const af_mha_weights_f32* w, float scale,
                     const af_mha_shape* s, void* arena, size_t arena_bytes,
                     const af_mha_stages_f32* stages);

/* ------------------------------------------------------ block pieces --- */
/* LayerNorm over n values (biased variance, as PyTorch), w/b may be NULL
 * (1/0); y may alias x. */
af_status af_layernorm_f32(float* y, const float* x, const float* w, const float* b, int32_t n,
                           float eps);
/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * w; y may alias x. */
af_status af_rmsnorm_f32(float* y, const float* x, const float* w, int32_t n, float eps);
/* y[out] = W[out,in] . x[in] + b (b may be NULL); y must not alias x. */
af_status af_linear_f32(float* y, const float* x, const float* w, const float* b, int32_t in,
                        int32_t out);
void af_relu_f32(float* x, int32_t n);
void af_add_f32(float* y, const float* x, int32_t n); /* residual: y += x */

/* --------------------------------------------------------------- int8 --- */

/* Fixed-point multiplier as in TFLite Micro: real = mult * 2^(shift - 31),
 * mult in [2^30, 2^31) (or 0 for real == 0), shift in [-31, 30]. */
typedef struct {
  int32_t mult;
  int32_t shift;
} af_qmult;

/* Real multiplier -> fixed point (float on the preparing side only).
 * Returns AF_ERR_PARAM if real < 0, not finite or >= 2^30. */
af_status af_quantize_multiplier(af_qmult* out, double real);

/* Parameters of one int8 attention call, for every (per-head) scale set:
 *  q_real = sq[h] * q_int8, k_real = sk[g] * k_int8, v_real = sv[g] * v_int8,
 *  out_real = so[h] * out_int8 (symmetric, zero point 0).
 * exp_mult[h] = {M, p}: score difference diff (int32 q.k units) -> base-2
 *   exponent in Q8, u = ((diff * M) >> 32) << p, M = round(r * 2^(32-p)),
 *   r = sq*sk*scale*log2(e)*256, p the smallest in [0, 8] with M < 2^31
 *   (one high multiply per key).
 * out_mult[h]: v units -> out units (sv/so).
 * Per-tensor scales: set num_scale_heads = 1; per head: num_scale_heads = H
 * (kv head g uses the scales of query head g * (H/Hkv), so per-head K/V
 * scales must be equal within a GQA group; the caller passes them so). */
#define AF_S8_MAX_HEADS 16
typedef struct {
  int32_t num_scale_heads;
  af_qmult exp_mult[AF_S8_MAX_HEADS];
  af_qmult out_mult[AF_S8_MAX_HEADS];
} af_s8_params;

/* sq/so: [n] (query heads); sk/sv: [n] indexed by query head as well.
 * n = 1 (per tensor) or n = num_heads. scale as for f32. AF_ERR_PARAM if a
 * scale is not positive and finite or r >= 128 (see exp_mult). */
af_status af_s8_prepare(af_s8_params* p, const float* sq, const float* sk,
                        const float* sv, const float* so, int32_t n,
                        float scale);

/* int8 block pieces (integer only; docs/edge.md "tiny model, int8"):
 * linear: acc = W8[out,in] . x8 + b32 (b may be NULL), then
 *   af_linear_s8:          y8[o] = sat8(mulq(acc, m[o]))   (y must not alias x)
 *   af_linear_s8_residual: r[o] += mulq(acc, m[o])         (int32 residual)
 *   with mulq = af_s8_mul_by_qmult (round half up) and one multiplier per row;
 * LayerNorm over an int32 vector: mean = floor(sum/n), var = floor(sum d^2/n),
 *   sd = floor(sqrt(var + eps)), t = (d * floor(2^32/sd)) >> 16 (Q16),
 *   y8 = sat8((t*g + b + 2^23) >> 24) with g, b the folded gamma/beta. */
af_status af_linear_s8(int8_t* y, const int8_t* x, const int8_t* w, const int32_t* b,
                       const af_qmult* m, int32_t in, int32_t out);
af_status af_linear_s8_residual(int32_t* r, const int8_t* x, const int8_t* w, const int32_t* b,
                                const af_qmult* m, int32_t in, int32_t out);
af_status af_layernorm_s8(int8_t* y, const int32_t* x, const int32_t* g, const int32_t* b,
                          int32_t n, int32_t eps);
void af_relu_s8(int8_t* x, int32_t n);

size_t af_sdpa_s8_workspace_bytes(const af_sdpa_shape* s);

/* int8 SDPA (integer arithmetic only; docs/edge.md "int8 scheme"):
 * scores int32 = q.k; weights by an exp2 LUT in Q15 from the Q8 exponent;
 * online (per key tile) rescaling of the int32 accumulators; out int8 =
 * round((sum w*v / sum w) * sv/so), saturated to [-128, 127].
 * Requires kv_len <= 32768. */
af_status af_sdpa_s8(int8_t* out, const int8_t* q, const int8_t* k,
                     const int8_t* v, const int32_t* kv_lens,
                     const af_s8_params* p, const af_sdpa_shape* s,
                     void* arena, size_t arena_bytes);

/* Exposed for tests and the NumPy model: 2^(-u/256) in Q15 for u >= 0
 * (0 for u >= 256*16), and TFLite's MultiplyByQuantizedMultiplier. */
int32_t af_s8_exp2_neg_q15(int32_t u);
int32_t af_s8_mul_by_qmult(int32_t x, af_qmult m);

#ifdef __cplusplus
}
#endif

#endif /* ATTNFLOW_MICRO_H_ */
