/* oprun.h: one Vulkan op on host arrays (oprun.c), through the same pipelines and dispatch
 * records (lib/vulkan/ops.h) that the forward pass uses, on fresh buffers each call: for the op
 * tests (tests/vulkan) and micro-benchmarks (tools/vkbench, tests/bench). Part of the testing
 * library (tests/common/meson.build), never of the shipped one: it is slow and simple on purpose,
 * not for inference. */
#ifndef ES_TESTS_OPRUN_H
#define ES_TESTS_OPRUN_H

#include "ops.h"

/* All run on backend b, which must be a Vulkan backend. reps > 1 repeats the dispatch inside one
 * submission (for timing); *ms (may be NULL) gets the wall time of the submission divided by
 * reps, or with the environment variable EDGESPEC_VKBENCH_CPU_TIME set the process CPU time per
 * rep (all threads), which a busy machine disturbs less: a switch of the tests and tools, never
 * read by the library. */

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
