/* opsi.h: the per-thread pieces of the ops in ops.h, shared by ops.c (which wraps them into
 * whole ops) and forward.c (which calls them inside one pool job between barriers). Every output
 * element is produced by exactly one call with the same arguments whatever the batch or thread
 * split, which is what keeps the forward batch-invariant. */
#ifndef ES_CPU_OPSI_H
#define ES_CPU_OPSI_H

#include "cpu.h"
#include "kern.h"
#include "model.h"
#include "ops.h"
#include "rope.h"

/* One RMSNorm row. */
void es__cpu_rmsnorm_row(const es__kern *k, const float *x, const float *w, int64_t n, float eps, float *y);

/* cos/sin of every rotated pair for n_tok tokens: cs [n_tok][n_rot / 2][2] (rope.h; unit: magnitude
 * 1, for turning cached keys). */
void es__cpu_rope_table(const es__rope *r, const int32_t *pos, int64_t n_tok, bool unit, float *cs);
/* Every RoPE table's row (rope.h es__rope_tables) for n_tok tokens: cs [n_tok][tables][n_rot / 2][2]. */
void es__cpu_rope_rows(const es__hparams *hp, int32_t n_ctx, const int32_t *pos, int64_t n_tok, float *cs);
/* Token tok's row, for layer il, of a table es__cpu_rope_rows wrote. */
static inline const float *es__cpu_rope_row(const float *cs, const es__hparams *hp, int64_t tok, int32_t il) {
    const int64_t half2 = (hp->n_rot / 2) * 2;
    return cs + (tok * es__rope_tables(hp) + es__rope_table_of(hp, il)) * half2;
}
/* Rotates one token's n_head heads (x: [n_head][head_dim]) with its row of the table. */
void es__cpu_rope_token(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot, const float *cs,
                        es_rope_type type);
/* x += b over n values where the layer has a bias (qwen2's Q, K and V; b NULL: none). */
static inline void es__cpu_add_bias(float *x, const float *b, int64_t n) {
    if (b)
        for (int64_t i = 0; i < n; i++) x[i] += b[i];
}

/* One token's Q, K and V rows (q: n_head heads, k and v: n_head_kv heads of head_dim) made ready
 * for attention as the architecture says (arch.h): the biases, the RMSNorm of each Q and K head,
 * then RoPE with the token's row of the table. The forward and the stream rows share it, so a
 * stream row's attention inputs round as the main stream's. */
void es__cpu_qkv_prepare(const es__kern *k, const es__hparams *hp, const es__cpu_layer *L, float *q, float *kr,
                         float *v, const float *cs);

/* The geometry of one attention call (see es__cpu_attention). */
typedef struct es__attn {
    const float *q;          /* [n_q][n_head][head_dim]                         */
    int64_t q_stride;        /* floats between consecutive query rows            */
    const float *kc, *vc;    /* (n_head_kv, n_ctx, head_dim)                     */
    int32_t n_ctx, n_head, n_head_kv, head_dim;
    int32_t n_past;          /* committed slots                                  */
    int32_t n_batch;         /* batch tokens, in slots [n_past, n_past + n_batch) */
    int32_t n_q;             /* query rows                                       */
    const int32_t *rows;     /* [n_q] batch token of each query row; NULL = identity */
    const int32_t *dfs_start, *dfs_end; /* [n_batch]                             */
    float scale;
    float *out;              /* [n_q][n_head][head_dim]                          */
    int64_t out_stride;
    /* architecture extras (arch.h); zero: none */
    const int32_t *pos;      /* [n_batch] positions; committed slot s holds position s */
    int32_t window;          /* keys at positions <= p - window are not seen (0: all)  */
    float softcap;           /* scores become softcap tanh(s / softcap) (0: not)      */
} es__attn;

/* Query rows per attention block: tasks run block by block, head-major inside a block. */
#define ES__CPU_ATTN_ROWS 16

/* Computes tasks [lo, hi) of the n_q * n_head (query row, head) tasks, numbered block by block
 * (ES__CPU_ATTN_ROWS rows each), head-major inside a block. Per-thread scratch: visible of
 * ES__CPU_ATTN_ROWS * n_batch ints. */
void es__cpu_attention_range(const es__kern *k, const es__attn *a, int64_t lo, int64_t hi, int32_t *visible);

void es__cpu_swiglu_range(const es__kern *k, const float *gate, const float *up, int64_t lo, int64_t hi,
                          float *out);
/* GeGLU: out[i] = gelu(gate[i]) * up[i] for i in [lo, hi), gelu's tanh approximation
 * 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). out may alias either input. */
void es__cpu_geglu_range(const float *gate, const float *up, int64_t lo, int64_t hi, float *out);
/* x[i] = c tanh(x[i] / c) for i < n (soft-capping; c > 0). */
void es__cpu_softcap(float *x, int64_t n, float c);
/* n logits as the architecture finishes them: times hp->logit_mul (granite), then soft-capped
 * (gemma2); nothing for the others. */
void es__cpu_logits_finish(const es__hparams *hp, float *x, int64_t n);

#endif /* ES_CPU_OPSI_H */
