/* oprun.h: one Vulkan op on host arrays (oprun.c), through the same pipelines and dispatch
 * records (lib/vulkan/ops.h) that the forward pass uses, on fresh buffers each call: for the op
 * tests (tests/vulkan) and micro-benchmarks (tools/vkbench, tests/bench). Part of the testing
 * library (tests/common/meson.build), never of the shipped one: it is slow and simple on purpose,
 * not for inference. */
#ifndef ES_TESTS_OPRUN_H
#define ES_TESTS_OPRUN_H

#include "ops.h"
#include "spec_attn.h"

/* All run on backend b, which must be a Vulkan backend. reps > 1 repeats the dispatch inside one
 * submission (for timing); *ms (may be NULL) gets the wall time of the submission divided by
 * reps, or with the environment variable EDGESPEC_VKBENCH_CPU_TIME set the process CPU time per
 * rep (all threads), which a busy machine disturbs less: a switch of the tests and tools, never
 * read by the library. */

/* The staging buffer the ops' weight uploads use, bytes (0: the library's default). A small one
 * refills between rows, as a large model's upload does between matrices. */
extern uint64_t es__vk_run_staging;

/* y[n][rows] (=, +=) W x[n][K], W in GGUF layout (rows of K elements of type). For
 * ES__EPI_SWIGLU W holds 2 * n_ff interleaved rows and y gets [n][rows / 2]. */
es_status es__vk_run_mul_mat(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K,
                             const float *x, uint32_t n, uint32_t epi, float *y, uint32_t reps, double *ms);

/* x[n][E] -> y[n][E], weight w[E]; add != 0: y[n][E] += add times the result (gemma2's post-branch
 * norms, add the residual scale). */
es_status es__vk_run_rmsnorm(es_backend *b, const float *x, const float *w, uint32_t E, uint32_t n, float eps, float add,
                             float *y);
/* A post-branch norm and the norm after it in one dispatch (rmsnorm.comp's norm2):
 * y[n][E] += add rmsnorm(x) w, then x[n][E] = rmsnorm(y) w2, in place as the forward does it. */
es_status es__vk_run_rmsnorm_post(es_backend *b, float *x, const float *w, const float *w2, uint32_t E, uint32_t n,
                                  float eps, float add, float *y);
/* out[i][:E] = row ids[i] of table (rows x K of type, GGUF layout), dequantised, times scale. */
es_status es__vk_run_get_rows(es_backend *b, es__dtype type, const void *table, uint32_t K, uint32_t rows,
                              const int32_t *ids, uint32_t n, float scale, float *out);
/* RoPE of q and k and the cache write (bias, [(n_head + 2 n_head_kv) hd] or NULL, added first, as
 * qwen2's Q/K/V biases are): qkv[n][(n_head + 2 n_head_kv) hd] is rotated in place
 * (its K part stays as given: rotated keys go to the cache), slots n_past + t of kc, vc
 * (n_head_kv, n_ctx, hd) receive the rotated K and the V of token t (other slots keep their
 * contents). Positions pos[n]. */
es_status es__vk_run_rope_kv(es_backend *b, float *qkv, uint32_t n, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                             uint32_t n_rot, es_rope_type type, float freq_base, float freq_scale, const int32_t *pos,
                             uint32_t n_past, uint32_t n_ctx, float *kc, float *vc, const float *bias);
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
    uint32_t window;               /* sliding window in positions (0: none; arch.h)      */
    float softcap;                 /* score soft-capping (0: none)                       */
} es__vk_attn_bench;
/* Whether the op runner (and the device) reads read-only data through texel buffers. */
bool es__vk_run_texel(es_backend *b);
es_status es__vk_run_attention_bench(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                                     uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_past, uint32_t n,
                                     const int32_t *dfs_end, float scale, float *out, es__vk_attn_bench *bench);
/* ALSpec's speculative flash decode of one token as es__cpu_attention_spec (attn.comp, then
 * attn_spec.comp): keys in slots 0..n-1, q[n_head][hd]; out, spec [n_head][hd] (spec written only
 * when v->valid); recorded reps times (0 = once) in one submission, *ms (may be NULL) per rep.
 * two_parts runs it as ALSpec's pair does (es__alspec_part): the speculation's splits and their
 * fold first, then the middle splits and the exact fold. */
es_status es__vk_run_attention_spec(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                                    uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n, uint32_t chunk,
                                    float lambda, float scale, float *out, float *spec, es__spec_verdict *v,
                                    bool two_parts, uint32_t reps, double *ms);
/* Softmax of each row of x[n][V], into y. */
es_status es__vk_run_softmax(es_backend *b, const float *x, uint32_t V, uint32_t n, float *y);
/* The k largest of each row of x[n][V] (descending, ties to the lower id): ids[n][k], vals[n][k]. */
es_status es__vk_run_topk(es_backend *b, const float *x, uint32_t V, uint32_t n, uint32_t k, int32_t *ids,
                          float *vals);
/* KV compaction of one layer: caches (n_head_kv, n_ctx, hd) in place; slot n_past + keep[r]
 * moves to n_past + r. */
es_status es__vk_run_kv_move(es_backend *b, float *kc, float *vc, uint32_t n_head_kv, uint32_t n_ctx, uint32_t hd,
                             uint32_t n_past, const int32_t *keep, uint32_t n_keep);

/* ---- Speculative Streaming's kernels (lib/vulkan/msa_vk.c records them; shaders/ss_push.h) */

/* A batch as the step data gives it to the kernels: n tokens after n_past committed ones. */
typedef struct es__vk_op_batch {
    uint32_t n_past, n;
    const int32_t *dfs_end; /* [n] DFS pre-order: last index of each token's subtree; NULL = a chain */
    const int32_t *pos;     /* [n] positions; NULL = n_past + depth in the tree                      */
    uint32_t node;          /* the token whose streams the stream pass computes (ES_STEP_SS_NODE)    */
} es__vk_op_batch;

/* Rows of attention's input: n_head query heads, n_head_kv key heads, n_head_kv value heads. */
typedef struct es__vk_op_rope {
    uint32_t n_head, n_head_kv, hd, n_rot;
    es_rope_type type;
    float freq_base, freq_scale;
} es__vk_op_rope;

/* What a projection of Speculative Streaming's rows adds to es__vk_run_mul_mat. */
typedef struct es__vk_ss_proj {
    /* the stream-only LoRA in the epilogue (the mul_mat_lora kernels): Y += B R for rows t >= ss_t0 */
    const float *lora_b;          /* [rows][rank]: B in W's row order; NULL = the plain kernel      */
    const float *lora_r;          /* [n - ss_t0][rank]: R = A X of the stream rows                  */
    uint32_t rank;                /* values per row of R (the rank times the fused targets)         */
    uint32_t ss_t0;               /* the first stream row (0 = every row gets the LoRA term)        */
    /* W's first (n_head + n_head_kv) hd rows are Q and K; with NEOX RoPE they are permuted as model
     * upload does, and the store epilogues write them back in head order. NULL = plain rows. */
    const es__vk_op_rope *rope;
    /* ES__EPI_ROPE_KV: the token rows (t < ss_t0, or every row when ss_g = 0) are the tokens of
     * batch: Q rotated into y, K rotated and V into slot n_past + t of kc, vc; a stream row t (ss_g > 0)
     * takes token (t - ss_t0) / ss_g's position and keeps its rotated Q, K and its V in y. */
    uint32_t ss_g;                /* streams per token                                              */
    const es__vk_op_batch *batch;
    uint32_t n_ctx;
    float *kc, *vc;               /* (n_head_kv, n_ctx, hd), updated in place                       */
    /* the architectures' extras (lib/core/arch.h) */
    const float *bias;            /* ES__EPI_ROPE_KV: [rows] Q, K, V biases in head order (qwen2)   */
    float softcap;                /* ES__EPI_STORE: y = softcap tanh(W x / softcap) (0: plain)      */
    float scale;                  /* ES__EPI_STORE, ES__EPI_ADD: W x (+ B R) times it first: the    */
                                  /* logits' multiplier, a residual branch's scale (granite; 0: 1)  */
} es__vk_ss_proj;
/* y[n][rows] = W x[n][K] as es__vk_run_mul_mat with ss's extras that need no stream rows (bias,
 * softcap); ES__EPI_GEGLU: W holds 2 n_ff interleaved rows and y gets [n][rows / 2]. */
/* y[n][cols] (=, +=, SwiGLU, RoPE) W x + the extras of ss, cols as es__vk_run_mul_mat's; y is read
 * and written whole, so what the kernel does not write comes back as given. */
es_status es__vk_run_mul_mat_ss(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K,
                                const float *x, uint32_t n, uint32_t epi, const es__vk_ss_proj *ss, float *y);

/* ss_rows: mode 0 copies n_rows rows of x into y; mode 1 starts the stream pass's n_rows streams of
 * row `node` of x (Eq. 3: y[j] = x[node] + p[j]); mode 2 every node's g streams, as they ride in the
 * forward: x is NULL, y is the rows buffer read (node rows r / g) and written (rows y_row0 + r);
 * mode 3 gathers the rows of x listed in `rows` (the pruning early exit's input, its list in the
 * step data). Widths and strides in floats, multiples of 4. y (y_rows rows) is read and written
 * whole. */
typedef struct es__vk_ss_rows_call {
    uint32_t mode, g, y_row0, n_rows, node;
    uint32_t width, x_stride, p_stride, y_stride;
    const int32_t *rows; /* mode 3: [n_rows] rows of x, each < x_rows */
} es__vk_ss_rows_call;
es_status es__vk_run_ss_rows(es_backend *b, const es__vk_ss_rows_call *c, const float *x, uint32_t x_rows,
                             const float *p, uint32_t p_rows, float *y, uint32_t y_rows);

/* ss_rope: adds bias (NULL: none; else (n_head + 2 n_head_kv) hd floats, Q, K, V in head order) to
 * n_rows rows of qkv ([n_rows][qkv_stride]) and rotates their Q and K heads in place at the
 * position of batch->node (streams write no KV). */
es_status es__vk_run_ss_rope(es_backend *b, const es__vk_op_rope *rope, const es__vk_op_batch *batch, float *qkv,
                             uint32_t n_rows, uint32_t qkv_stride, const float *bias);

/* qk_norm_rope (qk_norm architectures such as qwen3; shaders/qk_norm_rope.comp): n_rows rows of qkv
 * ([n_rows][qkv_stride], Q, K, V heads) get bias (NULL: none; else (n_head + 2 n_head_kv) hd floats
 * in head order), the RMSNorm of each Q head with q_norm[hd] and of each K head with k_norm[hd],
 * then RoPE. Rows t < ss_t0 are batch token t: Q rotated in place, K rotated and V into slot
 * n_past + t of kc, vc (the row's K and V get the biases alone); rows t >= ss_t0 are stream rows, rotated
 * in place (V too keeps its place) at token (t - ss_t0) / ss_g's position, or with ss_g = 0 at
 * batch->node's (the stream pass). */
typedef struct es__vk_qk_norm_call {
    const es__vk_op_rope *rope;
    uint32_t n_rows, qkv_stride;
    const float *bias;
    const float *q_norm, *k_norm;
    float eps;
    uint32_t ss_t0, ss_g;
    uint32_t n_ctx;               /* slots per head of kc, vc                                      */
    float *kc, *vc;               /* (n_head_kv, n_ctx, hd), updated in place; NULL when ss_t0 = 0 */
} es__vk_qk_norm_call;
es_status es__vk_run_qk_norm_rope(es_backend *b, const es__vk_qk_norm_call *c, const es__vk_op_batch *batch,
                                  float *qkv);

/* ss_attn: multi-stream attention (Eq. 2) of stream rows of qkv (q, k, v heads per row) over the
 * caches (n_head_kv, n_ctx, hd), whose slots n_past .. n_past + n - 1 hold the batch's keys. g = 0:
 * the stream pass, the n_rows streams of batch->node from row 0; g > 0: every token's g streams,
 * token i's at rows row0 + i g. out ([out_rows][o_stride], the same rows) is read and written whole. */
typedef struct es__vk_ss_attn_call {
    uint32_t n_head, n_head_kv, hd, n_ctx;
    uint32_t g, n_rows, row0;
    uint32_t qkv_stride, o_stride; /* floats, multiples of 4 */
    float scale;
    uint32_t window;               /* sliding window: keys at positions <= p - window unseen (0: all) */
    float softcap;                 /* scores softcap tanh(s / softcap) (0: not)                      */
} es__vk_ss_attn_call;
es_status es__vk_run_ss_attn(es_backend *b, const es__vk_ss_attn_call *c, const es__vk_op_batch *batch,
                             const float *qkv, uint32_t qkv_rows, const float *kc, const float *vc, float *out,
                             uint32_t out_rows);

#endif
