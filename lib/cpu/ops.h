/* ops.h: op-level entry points of the CPU backend. They are the reference every Vulkan op is
 * tested against and the building blocks of the CPU forward pass (forward.c computes with the same
 * code, so an op here gives bit for bit what the forward gives for the same inputs).
 *
 * Conventions:
 *   - Activations are f32, row-major: [n_tok][width]. Weights are GGUF matrices of any supported
 *     type (F32, F16, BF16, Q8_0, Q4_0): ne[0] = n_in is contiguous, n_out rows one after another.
 *   - pool may be NULL (run on the calling thread). Results never depend on the pool's size, nor on
 *     how many tokens are processed together (batch invariance, DESIGN.md).
 *   - Accumulation is f32. Functions returning es_status check their shapes and types and write
 *     their message to err (may be NULL); the others cannot fail.
 *   - Kernels run at the best level for this CPU (kern.h; EDGESPEC_CPU_KERNELS caps it).
 * Not here: the KV-cache ownership and the model loop (forward.c, backend.c). */
#ifndef ES_CPU_OPS_H
#define ES_CPU_OPS_H

#include "common.h"
#include "gguf.h"
#include "pool.h"
#include "spec_attn.h"

/* y[t][r] = sum_k W[r][k] * x[t][k].  W: (n_out, n_in) of type at w; x: [n_tok][n_in];
 * y: [n_tok][n_out]. n_in must be a multiple of 32 for Q8_0 and Q4_0. */
es_status es__cpu_matmul(es__pool *pool, es__dtype type, const void *w, int64_t n_in, int64_t n_out,
                         const float *x, int64_t n_tok, float *y, es__err *err);
/* n_tok = 1. */
es_status es__cpu_matvec(es__pool *pool, es__dtype type, const void *w, int64_t n_in, int64_t n_out,
                         const float *x, float *y, es__err *err);

/* Embedding lookup: out[i][:] = row ids[i] of the table (n_rows, n_in) of type, as f32 (exact). */
es_status es__cpu_get_rows(es__dtype type, const void *table, int64_t n_in, int64_t n_rows, const int32_t *ids,
                           int64_t n, float *out, es__err *err);

/* RMSNorm: y[t][i] = x[t][i] / sqrt(mean_i(x[t][i]^2) + eps) * w[i]. x, y: [n_tok][n]; y may be x. */
void es__cpu_rmsnorm(const float *x, const float *w, int64_t n, int64_t n_tok, float eps, float *y);

/* Rotary embedding in place on x: [n_tok][n_head][head_dim]. Token t rotates pair i < n_rot / 2 by
 * theta = pos[t] * freq_scale * freq_base^(-2 i / n_rot) (cos/sin evaluated in double, rounded to
 * f32). ES_ROPE_NORM pairs (2i, 2i+1), ES_ROPE_NEOX pairs (i, i + n_rot/2); dims >= n_rot are left
 * alone. n_rot even, 0 < n_rot <= head_dim. */
void es__cpu_rope(float *x, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot, const int32_t *pos,
                  float freq_base, float freq_scale, es_rope_type type);

/* Attention of a batch (chain or token tree) over a KV cache.
 * q: [n][n_head][head_dim] (already rotated). Caches kc, vc: (n_head_kv, n_ctx, head_dim), slot s of
 * kv head g at (g * n_ctx + s) * head_dim; the batch's own keys/values must already be in slots
 * [n_past, n_past + n). Token j sees the committed slots [0, n_past) and slot n_past + i of every
 * in-batch i with dfs_start[i] <= dfs_start[j] && dfs_end[j] <= dfs_end[i] (its ancestors and
 * itself); no mask is built. Query head h reads kv head h / (n_head / n_head_kv).
 * out[j][h][:] = sum_s softmax_s(scale * q.k_s) v_s, reduced over s in slot (= position) order.
 * out: [n][n_head][head_dim]. */
es_status es__cpu_attention(es__pool *pool, const float *q, const float *kc, const float *vc, int32_t n_ctx,
                            int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t n_past, int32_t n,
                            const int32_t *dfs_start, const int32_t *dfs_end, float scale, float *out,
                            es__err *err);

/* The same with the architectures' extras (lib/core/arch.h): pos[n] the batch's positions
 * (committed slot s holds position s; may be NULL without a window), keys at positions
 * <= pos[j] - window unseen (window 0: all seen), scores soft-capped softcap tanh(s / softcap)
 * (0: not). */
es_status es__cpu_attention_ex(es__pool *pool, const float *q, const float *kc, const float *vc, int32_t n_ctx,
                               int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t n_past, int32_t n,
                               const int32_t *dfs_start, const int32_t *dfs_end, const int32_t *pos, int32_t window,
                               float softcap, float scale, float *out, es__err *err);

/* ALSpec's speculative flash decode of one token over the cache slots 0..n-1 (its own key and value
 * already in slot n - 1). q: [n_head][head_dim]. out[n_head][head_dim] is bit for bit what
 * es__cpu_attention gives for this token (n_past = n - 1); when the token has 2S keys or more
 * (es__spec_window), spec[n_head][head_dim] is the attention over the speculation keys alone,
 * computed first and reused for out, and *v holds the check against lambda over all heads; below
 * 2S keys only out is written and v->valid is false. chunk: S, a positive multiple of
 * ES__ATTN_TILE (kern.h). */
es_status es__cpu_attention_spec(es__pool *pool, const float *q, const float *kc, const float *vc, int32_t n_ctx,
                                 int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t n, int32_t chunk,
                                 float lambda, float scale, float *out, float *spec, es__spec_verdict *v,
                                 es__err *err);

/* Writes k_new, v_new: [n][n_head_kv][head_dim] into slots [n_past, n_past + n) of the caches. */
void es__cpu_kv_write(float *kc, float *vc, int32_t n_ctx, int32_t n_head_kv, int32_t head_dim, int32_t n_past,
                      int32_t n, const float *k_new, const float *v_new);

/* SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias either input. */
void es__cpu_swiglu(const float *gate, const float *up, int64_t n, float *out);

/* out[i] = a[i] + b[i]. out may alias either input. */
void es__cpu_add(const float *a, const float *b, int64_t n, float *out);

/* y = softmax(x) over n elements (max-subtracted, sum in index order). y may be x. */
void es__cpu_softmax(const float *x, int64_t n, float *y);

/* Index of the largest element, ties to the lowest index; NaNs are ignored (0 if all are NaN). */
int32_t es__cpu_argmax(const float *x, int64_t n);

/* The k largest elements in descending order of value, ties to the lower index; NaNs ignored.
 * ids[k], vals[k] (vals may be NULL). k <= n. Returns the count written (k unless x has NaNs). */
int32_t es__cpu_topk(const float *x, int64_t n, int32_t k, int32_t *ids, float *vals);

#endif /* ES_CPU_OPS_H */
