/* ops.h: the Vulkan kernels as ops: which variant and specialisation a device gets, the push
 * constants and grid of each dispatch (ops.c), and host-array entry points that run one op on
 * fresh buffers, for the op tests and micro-benchmarks (oprun.c).
 * forward.c records the same ops into a forward pass, so what the tests check is what runs. */
#ifndef ES_VULKAN_OPS_H
#define ES_VULKAN_OPS_H

#include "kernels.h"
#include "weights.h"

/* Attention geometry. Batch invariance needs the split fixed: splits are aligned to absolute
 * positions, whatever the batch. */
#define ES__ATTN_SPLIT 256u /* key positions per split                                     */
#define ES__ATTN_CHUNK 64u  /* tokens per attention dispatch (bounds the partials buffer)  */
#define ES__ATTN_WG 64u     /* (token, head) pairs per attention workgroup                  */

/* Fills the step arrays for a batch (shaders/push.h: ES_STEP_*): n_past, tokens (may be NULL),
 * positions, DFS ends, the rows wanting logits (may be NULL), and the depth order of the tree.
 * s holds ES_STEP_HDR + ES_STEP_ARRAYS * stride ints; depth_count is scratch of n + 2 ints. */
void es__vk_step_write(int32_t *s, uint32_t stride, int32_t n_past, int32_t n, const int32_t *tokens,
                       const int32_t *pos, const int32_t *dfs_end, const int32_t *out_rows, int32_t n_out,
                       int32_t *depth_count);

/* (cos, sin) of pos * freq_scale * freq_base^(-2i / n_rot) for positions [p0, p0 + np) and pairs
 * i < n_rot / 2, evaluated in double and rounded once (as the CPU backend does). */
void es__vk_rope_table(float *dst, uint32_t p0, uint32_t np, uint32_t n_rot, float freq_base, float freq_scale);

/* mul_mat epilogues (spec constant EPI). */
enum { ES__EPI_STORE = 0, ES__EPI_ADD = 1, ES__EPI_SWIGLU = 2, ES__EPI_ROPE_KV = 3 };

/* Kernel shape for mul_mat: tokens per workgroup for a batch of n. Batch invariance does not
 * depend on it. */
uint32_t es__vk_mul_mat_tok(es__dtype type, uint32_t n);
es_status es__vk_mul_mat_pipe(es__vk_dev *d, const es__vk_mat *m, uint32_t tok, uint32_t epi,
                              es__vk_pipeline **out);
/* The same plus a low-rank term, Y = W X + B R (Speculative Streaming's stream-only LoRA, R = A X
 * from a plain mul_mat before): its descriptor sets add R (f32 rows) and B's plane as bindings 8
 * and 9; pc.lora_r and pc.lora_stride give R's width and row stride. */
es_status es__vk_mul_mat_lora_pipe(es__vk_dev *d, const es__vk_mat *m, uint32_t tok, uint32_t epi,
                                   es__vk_pipeline **out);
/* Records Y (+)= W X for every part of m; sets[] holds one descriptor set per part. pc carries
 * the call's fields (n, X and Y placement, the RoPE fields); the part fields (M, y_off,
 * row0, w_off, s_off) are filled here. */
void es__vk_rec_mul_mat(es__vk_rec *r, const char *op, const es__vk_pipeline *p, const es__vk_mat *m,
                        const VkDescriptorSet *sets, const es__pc_mul_mat *pc);

/* Pipelines of the other families, with the workgroup size for the device. */
es_status es__vk_simple_pipe(es__vk_dev *d, const char *family, bool reads, bool reduces, es__vk_pipeline **out);
/* Attention ("attn", or the streams' "ss_attn") for heads of hd: ES__ATTN_WG (row, head) pairs
 * per workgroup. */
es_status es__vk_attn_pipe(es__vk_dev *d, const char *family, uint32_t hd, es__vk_pipeline **out);
es_status es__vk_get_rows_pipe(es__vk_dev *d, es__dtype type, es__vk_pipeline **out);

/* ---- oprun.c: one op on host arrays (tests, micro-benchmarks). All run on backend b, which
 * must be a Vulkan backend. reps > 1 repeats the dispatch inside one submission (for timing);
 * *ms (may be NULL) gets the wall time of the submission divided by reps. */

/* y[n][rows] (=, +=) W x[n][K], W in GGUF layout (rows of K elements of type). For
 * ES__EPI_SWIGLU W holds 2 * n_ff interleaved rows and y gets [n][rows / 2]. */
es_status es__vk_run_mul_mat(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K,
                             const float *x, uint32_t n, uint32_t epi, float *y, uint32_t reps, double *ms);

/* x[n][E] -> y[n][E], weight w[E]. */
es_status es__vk_run_rmsnorm(es_backend *b, const float *x, const float *w, uint32_t E, uint32_t n, float eps, float *y);
/* out[i][:E] = row ids[i] of table (rows x K of type, GGUF layout), dequantised. */
es_status es__vk_run_get_rows(es_backend *b, es__dtype type, const void *table, uint32_t K, uint32_t rows,
                              const int32_t *ids, uint32_t n, float *out);
/* RoPE of q and k and the cache write: qkv[n][(n_head + 2 n_head_kv) hd] is rotated in place
 * (its K part stays as given: rotated keys go to the cache), slots n_past + t of kc, vc
 * (n_head_kv, n_ctx, hd) receive the rotated K and the V of token t (other slots keep their
 * contents). Positions pos[n]. */
es_status es__vk_run_rope_kv(es_backend *b, float *qkv, uint32_t n, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                             uint32_t n_rot, es_rope_type type, float freq_base, float freq_scale, const int32_t *pos,
                             uint32_t n_past, uint32_t n_ctx, float *kc, float *vc);
/* Tree attention as es__cpu_attention: q[n][n_head][hd], caches (n_head_kv, n_ctx, hd) with the
 * batch's keys in slots [n_past, n_past + n), DFS intervals in pre-order; out[n][n_head][hd]. */
es_status es__vk_run_attention(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                               uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_past, uint32_t n,
                               const int32_t *dfs_end, float scale, float *out);
/* The same for benchmarks: another build of attn.comp (tests/bench's dense-mask baseline, whose
 * [n][n] byte mask goes after the step data), recorded reps times in one submission. */
typedef struct es__vk_attn_bench {
    const es__shader_info *shader; /* family "attn"; NULL: the library's kernel          */
    const uint8_t *mask;           /* mask[t][i] = 1 when batch token i is visible to t  */
    uint32_t reps;
    double ms;                     /* out: wall time per rep                             */
} es__vk_attn_bench;
/* Whether the op runner (and the device) reads read-only data through texel buffers. */
bool es__vk_run_texel(es_backend *b);
es_status es__vk_run_attention_bench(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                                     uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_past, uint32_t n,
                                     const int32_t *dfs_end, float scale, float *out, es__vk_attn_bench *bench);
/* Softmax of each row of x[n][V], into y. */
es_status es__vk_run_softmax(es_backend *b, const float *x, uint32_t V, uint32_t n, float *y);
/* The k largest of each row of x[n][V] (descending, ties to the lower id): ids[n][k], vals[n][k]. */
es_status es__vk_run_topk(es_backend *b, const float *x, uint32_t V, uint32_t n, uint32_t k, int32_t *ids,
                          float *vals);
/* KV compaction of one layer: caches (n_head_kv, n_ctx, hd) in place; slot n_past + keep[r]
 * moves to n_past + r. */
es_status es__vk_run_kv_move(es_backend *b, float *kc, float *vc, uint32_t n_head_kv, uint32_t n_ctx, uint32_t hd,
                             uint32_t n_past, const int32_t *keep, uint32_t n_keep);

#endif
