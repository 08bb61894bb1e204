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
 *    by af_s8_prepare() (and af_s8_alibi_prepare / af_s8_mask_prepare), the
 *    only functions that use floating point.
 *  - Masks, ALiBi and sliding windows (af_sdpa_opts) follow semantics.h too:
 *    a bool mask (nonzero = may attend) or an additive mask broadcast to
 *    [B,H,Lq,Lk]; windows relative to the bottom-right diagonal
 *    d = i + Lk - Lq (FlashAttention convention, -1 = unbounded); ALiBi adds
 *    -slope[h] * |d - j| to the scaled score after the mask (slopes [H] or
 *    [B,H]); softcap before the mask; the diagonal d per sequence
 *    (kv_lens[b]) on request. Every constraint
 *    is ANDed. Keys outside the row's window/causal/padding range are never
 *    read.
 *  - Pointers to float and int32 data must be 4-byte aligned
 *    (AF_ERR_ALIGN otherwise: Cortex-M FPU loads fault on misaligned data).
 *  - Outputs (the arena's used bytes included) overlap neither an input nor
 *    each other (AF_ERR_ALIAS), except where a function says it works in
 *    place; an element-wise function then takes the very same array, never a
 *    shifted one.
 *  - f32 inputs are finite and in range (AF_ERR_PARAM otherwise, before
 *    anything is written): the attention calls check q, the keys and values
 *    a row may see, masks and slopes against AF_F32_LIMIT (docs/edge.md
 *    "Inputs the C API refuses"); the other f32 ops check their activations.
 *    Weights are the caller's constants: check them once with
 *    af_check_finite_f32. A status other than AF_OK means no output byte
 *    changed (af_mha_f32 documents its one exception).
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
  AF_ERR_FULL = 5,     /* KV cache full and no sliding window */
  AF_ERR_ALIGN = 6,    /* a pointer is not aligned to its element type */
  AF_ERR_ALIAS = 7     /* an output overlaps an input, the arena or another output */
} af_status;

/* Short name of a status code ("ok", "null pointer", ...). */
const char* af_status_name(af_status s);

typedef enum {
  AF_CAUSAL_NONE = 0,
  AF_CAUSAL_TOP_LEFT = 1,
  AF_CAUSAL_BOTTOM_RIGHT = 2
} af_causal;

/* The f32 range bound (2^125): every term of a scaled score stays below it
 * in magnitude, so their sum (at most three terms) and the softmax
 * accumulators stay finite. Checked on every f32 attention call:
 *   scale * max|q| * max|k| * head_dim <= AF_F32_LIMIT (and without scale),
 *   max|v| * max(kv_len, 1) <= AF_F32_LIMIT, |slope| <= 2^108 (so
 *   |slope| * (q_len + kv_len) < AF_F32_LIMIT), an additive mask value -inf
 *   or finite and <= AF_F32_LIMIT, softcap <= AF_F32_LIMIT
 * (max over the q rows and the keys/values some row may see). The KV cache
 * holds rows with |k| <= AF_F32_CACHE_K_MAX and |v| <= AF_F32_CACHE_V_MAX
 * (af_kv_cache_append refuses others), so a decode step checks q alone. */
#define AF_F32_LIMIT 4.2535296e37f      /* 2^125 */
#define AF_F32_CACHE_K_MAX 1.0995116e12f /* 2^40 */
#define AF_F32_CACHE_V_MAX 1.2676506e30f /* 2^100 */

/* AF_OK if x[0 .. n) are all finite, AF_ERR_PARAM otherwise (AF_ERR_NULL for
 * x NULL with n > 0): the one-time check of f32 weights. */
af_status af_check_finite_f32(const float* x, size_t n);

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

/* ----------------------------------------------- masks, ALiBi, windows --- */

typedef enum {
  AF_MASK_NONE = 0,
  AF_MASK_BOOL = 1, /* uint8_t, nonzero = may attend (f32 and int8 paths) */
  AF_MASK_F32 = 2,  /* float, added to the scaled scores; -INFINITY hides the
                       key (f32 paths) */
  AF_MASK_S32 = 3   /* int32_t, added to the raw int32 q.k scores of the int8
                       path; AF_S8_MASKED hides the key (af_s8_mask_prepare
                       converts a float mask) */
} af_mask_type;

/* The int8 path's "masked" score value (a key that may not be attended). */
#define AF_S8_MASKED (-2147483647 - 1)

/* Optional attention options; initialise with AF_SDPA_OPTS_INIT or
 * af_sdpa_opts_init() (a zeroed struct means window 0 on both sides, i.e.
 * only the diagonal key: not "no window").
 *  mask / mask_type / mask_shape: one mask, row-major with extents
 *    mask_shape = [B or 1, H or 1, Lq or 1, Lk or 1] (numpy broadcasting of
 *    a rank 2..4 mask, right-aligned and padded with 1s);
 *  window_left / window_right: key j of query row i is visible only if
 *    (window_left < 0 || j >= d - window_left) &&
 *    (window_right < 0 || j <= d + window_right), d = i + Lk - Lq
 *    (d = i + kv_lens[b] - Lq with kv_align AF_KV_ALIGN_PER_SEQUENCE);
 *  alibi_slopes (f32 paths): [H] floats ([B, H] with alibi_per_batch), bias
 *    -slope[h] * |d - j| added to the scaled score (after the mask);
 *  alibi_s8 (int8 path): [H] ([B, H] with alibi_per_batch) slopes in Q8
 *    raw-score units from af_s8_alibi_prepare: bias =
 *    -((alibi_s8[h] * |d - j| + 128) >> 8) added to the raw score (after
 *    the mask);
 *  softcap (f32) / softcap_s8 (int8): logit soft-capping, applied to the
 *    scaled (int8: raw) score before the mask and ALiBi, as semantics.h;
 *  v_layout: AF_V_ROWS (v [B,Hkv,Lk,Dv]) or, int8 path only, AF_V_COLS
 *    (v [B,Hkv,Dv,Lk]).
 * int8 path: an AF_MASK_S32 value is clamped to [-2^30, 2^30] (other than
 * AF_S8_MASKED), then the raw score plus mask plus ALiBi is clamped to
 * [-2^30, 2^30 - 1] (a bias that large already gives the key weight 0 next
 * to any visible key of ordinary score). */
typedef enum {
  AF_V_ROWS = 0, /* v [B, Hkv, Lk, Dv]: each key's values adjacent (default) */
  AF_V_COLS = 1  /* v [B, Hkv, Dv, Lk]: each value dimension's keys adjacent
                    (int8 path only): P.V becomes a dot product over keys,
                    two keys per SMLAD on Cortex-M, and the layout of the
                    int8 KV cache (af_kv_cache_s8) */
} af_v_layout;

/* Which key length places the bottom-right diagonal d of batch b
 * (semantics.h KvAlign): the padded kv_len (default) or, per sequence,
 * kv_lens[b] (FlashAttention's cache_seqlens: d = i + kv_lens[b] - Lq). It
 * moves bottom-right causal, the window and ALiBi; top-left causal is j <= i
 * either way. Without kv_lens both are the same. */
typedef enum { AF_KV_ALIGN_PADDED = 0, AF_KV_ALIGN_PER_SEQUENCE = 1 } af_kv_align;

typedef struct {
  af_mask_type mask_type;
  const void* mask;
  int32_t mask_shape[4];
  int32_t window_left, window_right;
  const float* alibi_slopes;
  const int32_t* alibi_s8;
  af_v_layout v_layout; /* AF_V_COLS: int8 path only */
  /* Added after the fields above (their layout is unchanged): */
  af_kv_align kv_align;    /* the diagonal of windows, bottom-right causal, ALiBi */
  int32_t alibi_per_batch; /* 1: alibi_slopes / alibi_s8 are [B, H] (slope of
                              (b, h) at b * H + h), 0: [H] for every batch */
  float softcap;           /* f32 paths: cap > 0 maps the scaled score x to
                              cap * tanhf(x / cap) before the mask and ALiBi
                              (Gemma 2); 0 = off. Must be 0 on the int8 path. */
  const int32_t* softcap_s8; /* int8 path: [H][4] from af_s8_softcap_prepare
                                (NULL = off); the raw score s becomes
                                round(K * tanh(s / K)), K = cap in raw units,
                                before the mask and ALiBi (integer only).
                                Honoured by af_sdpa_s8_softcap_ex, af_mha_s8
                                and af_sdpa_s8_probe; af_sdpa_s8_ex refuses
                                it (AF_ERR_PARAM) */
} af_sdpa_opts;

#define AF_SDPA_OPTS_INIT \
  {AF_MASK_NONE, 0, {1, 1, 1, 1}, -1, -1, 0, 0, AF_V_ROWS, AF_KV_ALIGN_PADDED, 0, 0.f, 0}
void af_sdpa_opts_init(af_sdpa_opts* o);

/* Validates options against a shape (int8 = 1 for the int8 path, which takes
 * AF_MASK_BOOL or AF_MASK_S32 and alibi_s8; the f32 paths take AF_MASK_BOOL
 * or AF_MASK_F32 and alibi_slopes). NULL options are valid (none). */
af_status af_sdpa_check_opts(const af_sdpa_opts* o, const af_sdpa_shape* s, int int8);

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

/* af_sdpa_f32 with masks, ALiBi and windows (o may be NULL). */
af_status af_sdpa_f32_ex(float* out, float* lse, const float* q, const float* k,
                         const float* v, const int32_t* kv_lens, float scale,
                         const af_sdpa_shape* s, const af_sdpa_opts* o, void* arena,
                         size_t arena_bytes);

/* Stage probe (golden checks on the device, docs/edge.md "Stages on the
 * device"): the whole key row of query row i of head h, batch b, computed
 * with the kernel's own arithmetic (the same dot product, scaling, mask and
 * ALiBi arithmetic and exp): scores = q.k, scaled = scores * scale, masked =
 * scaled + mask + ALiBi (-INFINITY for a key the row may not see), weights =
 * softmax(masked) (all 0 for a row with no visible key), *lse. Every output
 * ([kv_len] floats, lse one) may be NULL. No arena. */
af_status af_sdpa_f32_probe(float* scores, float* scaled, float* masked, float* weights,
                            float* lse, const float* q, const float* k, const int32_t* kv_lens,
                            float scale, const af_sdpa_shape* s, const af_sdpa_opts* o,
                            int32_t b, int32_t h, int32_t i);

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
/* af_decode_f32 with ALiBi: alibi_slopes [num_heads] or NULL; the bias of
 * the key at position p is -slope[h] * (length - 1 - p). The cache struct is
 * validated on every call (fields as af_kv_cache_init leaves them). */
af_status af_decode_f32_ex(float* out, float* lse, const float* q, const af_kv_cache* c,
                           int32_t num_heads, float scale, const float* alibi_slopes,
                           void* arena, size_t arena_bytes);
/* af_decode_f32_ex with a softcap (cap > 0: the scaled score x becomes
 * cap * tanhf(x / cap) before ALiBi; 0 = off; NaN, inf or < 0:
 * AF_ERR_PARAM). A decode step is one sequence whose diagonal is its own
 * length - 1, i.e. always per-sequence aligned; [B,H] slopes are that
 * sequence's [H] row. */
af_status af_decode_f32_softcap(float* out, float* lse, const float* q, const af_kv_cache* c,
                                int32_t num_heads, float scale, const float* alibi_slopes,
                                float softcap, void* arena, size_t arena_bytes);

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

/* 0 for an invalid shape or one whose arena would not fit in size_t (the
 * size is computed in 64 bits, so it never wraps on 32-bit targets). */
size_t af_mha_f32_workspace_bytes(const af_mha_shape* s);
/* af_mha_f32 checks x_q, x_k, x_v, the weights and biases (finite) and every
 * overlap before it writes. Its one late refusal: projections of finite
 * inputs that leave the range of AF_F32_LIMIT give AF_ERR_PARAM from the
 * attention of that batch element, after the earlier elements' rows of out
 * (and stages) were written. */
af_status af_mha_f32(float* out, const float* x_q, const float* x_k, const float* x_v,
                     const int32_t* kv_lens, const af_mha_weights_f32* w, float scale,
                     const af_mha_shape* s, void* arena, size_t arena_bytes,
                     const af_mha_stages_f32* stages);
/* af_mha_f32 with masks, ALiBi and windows (af_sdpa_opts on the per-head
 * attention, shape [B,H,Lq,Lk]; o may be NULL). */
af_status af_mha_f32_ex(float* out, const float* x_q, const float* x_k, const float* x_v,
                        const int32_t* kv_lens, const af_mha_weights_f32* w, float scale,
                        const af_mha_shape* s, const af_sdpa_opts* o, void* arena,
                        size_t arena_bytes, const af_mha_stages_f32* stages);

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
af_status af_relu_f32(float* x, int32_t n);
af_status af_add_f32(float* y, const float* x, int32_t n); /* residual: y += x */

/* Rotary position embedding of a [num_heads, head_dim] vector at one
 * position, in place; cos/sin [head_dim/2] are that position's row
 * (af_rope_table_f32): pair i rotates by theta_i = pos * base^(-2i/head_dim).
 * Layouts: AF_ROPE_HALF pairs (i, i + D/2) (Llama, NeoX, HF transformers);
 * AF_ROPE_INTERLEAVED pairs (2i, 2i+1) (GPT-J, the Llama paper's code).
 * head_dim must be even. */
typedef enum { AF_ROPE_HALF = 0, AF_ROPE_INTERLEAVED = 1 } af_rope_layout;
af_status af_rope_f32(float* x, int32_t num_heads, int32_t head_dim, const float* cos,
                      const float* sin, af_rope_layout layout);
/* cos/sin [head_dim/2] of position pos for base theta (float64 angles,
 * rounded once; the preparing side, e.g. a table in flash). */
af_status af_rope_table_f32(float* cos, float* sin, int32_t pos, int32_t head_dim, double theta);
/* SiLU x * sigmoid(x) and GELU (erf form, as torch.nn.GELU()), in place;
 * SwiGLU out = silu(gate) * up (out may alias gate or up). */
af_status af_silu_f32(float* x, int32_t n);
af_status af_gelu_f32(float* x, int32_t n);
af_status af_swiglu_f32(float* out, const float* gate, const float* up, int32_t n);

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
af_status af_relu_s8(int8_t* x, int32_t n);
/* RMSNorm over an int32 vector (integer only, like af_layernorm_s8 without
 * the mean and the bias): ms = floor(sum x^2 / n), r = floor(sqrt(ms + eps)),
 * t = (x * floor(2^32 / r)) >> 16 (Q16), y8 = sat8((t * g + 2^23) >> 24) with
 * g the folded gamma (af_rmsnorm_s8_fold). */
af_status af_rmsnorm_s8(int8_t* y, const int32_t* x, const int32_t* g, int32_t n, int32_t eps);
/* The folded parameters of af_rmsnorm_s8 (preparing side, float): for an
 * int32 input of scale s_x (real = s_x * x) and an int8 output of scale s_out,
 * g[i] = round(gamma[i] / s_out * 2^8) and eps_int = max(1, round(eps / s_x^2))
 * (eps of the real variance). AF_ERR_PARAM when a value does not fit. */
af_status af_rmsnorm_s8_fold(int32_t* g, int32_t* eps_int, const float* gamma, int32_t n,
                             float s_x, float s_out, float eps);
/* RoPE on an int8 [num_heads, head_dim] vector in place, integer only:
 * cos/sin [head_dim/2] in Q15 (af_rope_table_s8), each rotated value
 * round((a*c - b*s) / 2^15) saturated to int8 (same scale in and out: a
 * scale calibrated on pair magnitudes, sqrt(a^2 + b^2) <= 127, never
 * saturates; the error is <= 0.5 LSB + 2^-15 relative, docs/edge.md). */
af_status af_rope_s8(int8_t* x, int32_t num_heads, int32_t head_dim, const int16_t* cos_q15,
                     const int16_t* sin_q15, af_rope_layout layout);
af_status af_rope_table_s8(int16_t* cos_q15, int16_t* sin_q15, int32_t pos, int32_t head_dim,
                           double theta);
/* Table-based activations of int8 values (integer only at run time): a
 * 256-entry table maps every int8 input to its int8 output,
 * table[x + 128] = sat8(round(act(x * s_in) / s_out)), built once on the
 * preparing side by af_act_table_s8. af_act_s8 applies it in place. */
typedef enum { AF_ACT_SILU = 0, AF_ACT_GELU = 1, AF_ACT_RELU = 2 } af_act;
af_status af_act_table_s8(int8_t* table, af_act act, float s_in, float s_out);
af_status af_act_s8(int8_t* x, int32_t n, const int8_t* table);
/* SwiGLU in int8: out = sat8(mulq(silu_table[gate] * up, m)), with
 * silu_table from af_act_table_s8(AF_ACT_SILU, s_gate, s_act) and m the
 * multiplier s_act * s_up / s_out (out may alias gate or up). */
af_status af_swiglu_s8(int8_t* out, const int8_t* gate, const int8_t* up, int32_t n,
                       const int8_t* silu_table, af_qmult m);

size_t af_sdpa_s8_workspace_bytes(const af_sdpa_shape* s);

/* int8 SDPA (integer arithmetic only; docs/edge.md "int8 scheme"):
 * scores int32 = q.k; weights by an exp2 LUT in Q15 from the Q8 exponent;
 * online (per key tile) rescaling of the int32 accumulators; out int8 =
 * round((sum w*v / sum w) * sv/so), saturated to [-128, 127].
 * Requires kv_len <= 32768. */
/* Largest |out8 - expected| the golden checks allow, in output LSB: the
 * float64 reference on the dequantised inputs, rounded once, against the
 * kernel (derivation and measurements: docs/edge.md "int8 error bounds"). */
#define AF_S8_BOUND_LSB 2

af_status af_sdpa_s8(int8_t* out, const int8_t* q, const int8_t* k,
                     const int8_t* v, const int32_t* kv_lens,
                     const af_s8_params* p, const af_sdpa_shape* s,
                     void* arena, size_t arena_bytes);

/* af_sdpa_s8 with masks (AF_MASK_BOOL or AF_MASK_S32), ALiBi (alibi_s8),
 * windows, per-sequence alignment and the V layout; o may be NULL. It
 * returns AF_ERR_PARAM for o->softcap_s8: the softcap is
 * af_sdpa_s8_softcap_ex, so that an application without it does not link
 * the tanh table and its loop (0.9 KiB of flash, docs/edge.md "Code
 * size"). */
af_status af_sdpa_s8_ex(int8_t* out, const int8_t* q, const int8_t* k, const int8_t* v,
                        const int32_t* kv_lens, const af_s8_params* p, const af_sdpa_shape* s,
                        const af_sdpa_opts* o, void* arena, size_t arena_bytes);
/* af_sdpa_s8_ex that also honours o->softcap_s8 (af_s8_softcap_prepare;
 * NULL = off, the same results as af_sdpa_s8_ex). */
af_status af_sdpa_s8_softcap_ex(int8_t* out, const int8_t* q, const int8_t* k, const int8_t* v,
                                const int32_t* kv_lens, const af_s8_params* p,
                                const af_sdpa_shape* s, const af_sdpa_opts* o, void* arena,
                                size_t arena_bytes);

/* Stage probe of the int8 path (as af_sdpa_f32_probe, integer results):
 * scores [kv_len] = q.k (int32, exact); masked [kv_len] = scores + mask +
 * ALiBi clamped as the kernel does, AF_S8_MASKED for a key the row may not
 * see; weights [kv_len] = the kernel's integer weights of the row against
 * its final max (Q15 >> wshift, 0 for hidden keys); *weight_sum = their sum
 * (0 for a row with no visible key; weights / weight_sum is the softmax).
 * Any output may be NULL. */
af_status af_sdpa_s8_probe(int32_t* scores, int32_t* masked, int32_t* weights,
                           int32_t* weight_sum, const int8_t* q, const int8_t* k,
                           const int32_t* kv_lens, const af_s8_params* p,
                           const af_sdpa_shape* s, const af_sdpa_opts* o, int32_t b,
                           int32_t h, int32_t i);

/* ----------------------------------------------------------- int8 MHA --- */
/* Multi-head attention with int8 projections (torch.nn.MultiheadAttention
 * semantics as af_mha_f32, GQA/MQA, batch first), integer only:
 *   q8 = sat8(mulq(x8_q . w8_q[row] + b_q[row], m_q[row])) split into H heads
 *   (likewise k8, v8 into Hkv heads), heads_out8 = af_sdpa_s8_ex(q8, k8, v8)
 *   with p (the scales of q, k, v and heads_out), concat, out8 =
 *   sat8(mulq(concat8 . w8_o[row] + b_o[row], m_o[row])).
 * Weights int8 with one scale per output row folded into the multipliers
 * m_* = s_in * s_w[row] / s_out; biases int32 in accumulator units
 * (s_in * s_w[row]) or NULL. Stages (any pointer NULL): q [B,H,Lq,Dh],
 * k/v [B,Hkv,Lk,Dh], heads_out [B,H,Lq,Dh], concat [B,Lq,E], all int8. */
typedef struct {
  const int8_t *w_q, *w_k, *w_v, *w_o;
  const int32_t *b_q, *b_k, *b_v, *b_o; /* each may be NULL */
  const af_qmult *m_q, *m_k, *m_v, *m_o;
} af_mha_weights_s8;
typedef struct {
  int8_t *q, *k, *v, *heads_out, *concat;
} af_mha_stages_s8;
/* 0 for an invalid shape (as af_mha_f32_workspace_bytes). */
size_t af_mha_s8_workspace_bytes(const af_mha_shape* s);
af_status af_mha_s8(int8_t* out, const int8_t* x_q, const int8_t* x_k, const int8_t* x_v,
                    const int32_t* kv_lens, const af_mha_weights_s8* w, const af_s8_params* p,
                    const af_mha_shape* s, const af_sdpa_opts* o, void* arena, size_t arena_bytes,
                    const af_mha_stages_s8* stages);

/* ---------------------------------------------------- int8 KV cache --- */
/* Ring buffer of int8 K and V (one sequence), the int8 twin of af_kv_cache:
 *   k [Hkv, capacity, D]   (a position's key row adjacent),
 *   v [Hkv, Dv, capacity]  (AF_V_COLS: a value dimension's positions
 *                           adjacent, so P.V is a dot product over keys).
 * Position p lives in slot p % capacity; window as af_kv_cache (0: all
 * positions, the cache refuses to grow past capacity; > 0: the last `window`
 * positions, older slots overwritten). The cache holds int8 values only:
 * their scales are the caller's (one per kv head, symmetric, fixed: the
 * scales of the k and v projections), folded into the af_s8_params of
 * af_decode_s8 (sk, sv per query head, equal within a GQA group). Bytes per
 * token: Hkv * (D + Dv). The same format is the host's int8 cache
 * (attnflow bench decode --kv-dtype int8). */
typedef struct {
  int8_t* k;
  int8_t* v;
  int32_t num_kv_heads, head_dim, v_dim, capacity, window;
  int32_t length; /* positions appended so far */
} af_kv_cache_s8;

af_status af_kv_cache_s8_init(af_kv_cache_s8* c, int8_t* k_storage, int8_t* v_storage,
                              int32_t num_kv_heads, int32_t head_dim, int32_t v_dim,
                              int32_t capacity, int32_t window);
/* Appends one position: k_new [Hkv, D], v_new [Hkv, Dv] (int8, in the
 * cache's scales). */
af_status af_kv_cache_s8_append(af_kv_cache_s8* c, const int8_t* k_new, const int8_t* v_new);
size_t af_decode_s8_workspace_bytes(const af_kv_cache_s8* c, int32_t num_heads);
/* One decode step for the newest position, integer only: q [H, D] int8,
 * out [H, Dv] int8; p as for af_sdpa_s8 (per tensor or per query head);
 * alibi_s8 [H] or NULL (bias -((alibi_s8[h] * (length - 1 - pos) + 128) >> 8)).
 * The arithmetic is af_sdpa_s8's for one query row over the visible
 * positions, oldest first, in at most two ring segments (each tiled from its
 * start); the cache struct is re-validated on every call. */
af_status af_decode_s8(int8_t* out, const int8_t* q, const af_kv_cache_s8* c, int32_t num_heads,
                       const af_s8_params* p, const int32_t* alibi_s8, void* arena,
                       size_t arena_bytes);
/* af_decode_s8 with a softcap: softcap_s8 [num_heads][4] from
 * af_s8_softcap_prepare (NULL = off), applied to the raw score before ALiBi
 * as in af_sdpa_s8_ex. Per-sequence alignment and [B,H] slopes as for
 * af_decode_f32_softcap. */
af_status af_decode_s8_softcap(int8_t* out, const int8_t* q, const af_kv_cache_s8* c,
                               int32_t num_heads, const af_s8_params* p, const int32_t* alibi_s8,
                               const int32_t* softcap_s8, void* arena, size_t arena_bytes);

/* ALiBi for the int8 path (float, preparing side): alibi_s8[h] =
 * round(slopes[h] / (sq * sk * scale) * 256) for each of num_heads query
 * heads; sq/sk as for af_s8_prepare ([n], n = 1 or num_heads).
 * AF_ERR_PARAM for a negative or non-finite slope or one that overflows. */
af_status af_s8_alibi_prepare(int32_t* alibi_s8, const float* slopes, int32_t num_heads,
                              const float* sq, const float* sk, int32_t n, float scale);
/* Softcap for the int8 path (float, preparing side): softcap_s8 [num_heads][4]
 * = {in.mult, in.shift, out.mult, out.shift} per query head, with
 * K = cap / (sq * sk * scale) the cap in raw-score units,
 * in = 2^16 / K (raw score -> Q16 tanh argument) and out = K / 2^16 (Q16
 * tanh -> raw score) as af_qmult. The kernel computes, integer only,
 * x = mulq(|s|, in) (Q16), t = tanh(x) in Q16 from a 257-entry table over
 * [0, 8] with linear interpolation, s' = sign(s) * min(mulq(t, out), |s|)
 * (error bound: docs/edge.md "int8 softcap"). AF_ERR_PARAM unless cap is
 * finite and > 0 and both multipliers are representable. */
/* The int8 softcap's error, derived in docs/edge.md "int8 softcap": the
 * capped raw score times sq*sk*scale is within cap * AF_S8_SOFTCAP_ERR plus
 * half a raw-score unit of cap * tanh(scaled / cap). */
#define AF_S8_SOFTCAP_ERR 1.25e-4
af_status af_s8_softcap_prepare(int32_t* softcap_s8, float cap, int32_t num_heads, const float* sq,
                                const float* sk, int32_t n, float scale);
/* An additive float mask (as AF_MASK_F32) -> AF_MASK_S32 for per-tensor
 * scales: round(mask / (sq * sk * scale)) clamped to [-2^30, 2^30], and
 * AF_S8_MASKED for -INFINITY. AF_ERR_PARAM for NaN or +INFINITY. */
af_status af_s8_mask_prepare(int32_t* out, const float* mask, int32_t count, float sq, float sk,
                             float scale);

/* Exposed for tests and the NumPy model: 2^(-u/256) in Q15 for u >= 0
 * (0 for u >= 256*16), and TFLite's MultiplyByQuantizedMultiplier. */
int32_t af_s8_exp2_neg_q15(int32_t u);
int32_t af_s8_mul_by_qmult(int32_t x, af_qmult m);

/* --------------------------------------------------- rounding bounds --- */
/* How far a CORRECT implementation computing in a float type of unit
 * roundoff u (2^-24 for f32, 2^-11 for f16, 2^-8 for bf16) may land from
 * the exact stages of one query row, in any summation order, from the same
 * inputs (docs/golden-format.md "Tolerances" derives each bound). The
 * golden checks on the host (`attnflow verify`) and on the device (the
 * harness) compare each element against these bounds instead of a fixed
 * atol/rtol. The expected masked/weights/lse come from the case (float64
 * reference, stored as float32); q_err/k_err/v_err are the bounds of the
 * inputs' own errors when they were computed (mha: the projections), NULL
 * when they are exact. Outputs may be NULL; b_out needs v. AF_ERR_PARAM
 * when u is not in (0, 1/4) or n*u >= 1/2 for a sum of n terms (no bound). */
typedef struct {
  const float* q;       /* [head_dim] the query row */
  const float* k;       /* [kv_len, head_dim] its kv head's keys, row-major */
  const float* v;       /* [kv_len, v_dim] */
  const float* q_err;   /* [head_dim] or NULL */
  const float* k_err;   /* [kv_len, head_dim] or NULL */
  const float* v_err;   /* [kv_len, v_dim] or NULL */
  const float* masked;  /* [kv_len] expected masked row (-inf = hidden key) */
  const float* weights; /* [kv_len] expected weights row */
  float lse;            /* expected lse of the row */
  int32_t head_dim, v_dim, kv_len;
  float scale;
  float u; /* unit roundoff of the type that computed the row */
} af_bound_row_in;
af_status af_bound_row(float* b_scores, float* b_scaled, float* b_masked, float* b_weights,
                       float* b_lse, float* b_out, const af_bound_row_in* in);
/* y = x w^T + bias (w [out_features, in_features] row-major; bias may be
 * NULL): b_y[r] bounds |computed y_r - exact y_r|, x_err (NULL = exact x)
 * the bound of x's own error. */
af_status af_bound_linear(float* b_y, const float* x, const float* x_err, const float* w,
                          const float* bias, int32_t in_features, int32_t out_features, float u);

/* The int8 path's stage tolerances (docs/edge.md "Stages on the device"),
 * in the units of the stages the int8 harness checks and dumps: scores
 * and masked in real units (raw integer sums times sq*sk, times scale for
 * masked), weights as the integer weights over their sum, out in output
 * LSB. scores are exact integers (one float rounding each side); masked
 * adds the rounding of a float mask and of ALiBi to raw-score units (<= 1
 * unit) and, with a softcap, the integer tanh's error (cap *
 * AF_S8_SOFTCAP_ERR + half a unit); weights are the Q15 table weights
 * (<= 0.27 % per exponent truncation, 0.5 / sum per rounding); out is
 * within AF_S8_BOUND_LSB. One place for the device harness and `attnflow
 * export-c --s8-expected` (the host's `verify --compare`). */
typedef struct {
  double atol, rtol;
} af_tol;
typedef struct {
  af_tol scores, masked, weights, out;
} af_s8_tolerances;
void af_s8_stage_tolerances(af_s8_tolerances* t, float sq, float sk, float scale, float softcap);

/* ------------------------------------------------------- stage dumps --- */
/* Writers of the AFDUMP text format (docs/device-dump.md), for a port that
 * wants its stages checked on the host (`attnflow verify --compare LOG CASE`).
 * Text goes to the caller's `write(ctx, text, n)` (a UART, semihosting,
 * a buffer); no printf, no heap. Names are C identifiers up to 63 chars;
 * a stage name may also join identifiers and numbers with '.' (the golden
 * names of layers and decode steps: "layer.3.q", "decode.0.weights"). */
typedef void (*af_write_fn)(void* ctx, const char* text, size_t n);
typedef enum { AF_DUMP_F32 = 0, AF_DUMP_I8 = 1, AF_DUMP_I32 = 2 } af_dump_dtype;

af_status af_dump_begin(af_write_fn write, void* ctx, const char* case_name, const char* kind,
                        const char* impl);
/* Declares a stage (rank 0..8). */
af_status af_dump_tensor(af_write_fn write, void* ctx, const char* stage, af_dump_dtype dtype,
                         int32_t rank, const int32_t* dims);
/* Elements [offset, offset + count) of a declared stage; data is float,
 * int8_t or int32_t as the dtype says. */
af_status af_dump_part(af_write_fn write, void* ctx, const char* stage, af_dump_dtype dtype,
                       uint32_t offset, const void* data, uint32_t count);
af_status af_dump_done(af_write_fn write, void* ctx, const char* case_name);

#ifdef __cplusplus
}
#endif

#endif /* ATTNFLOW_MICRO_H_ */
