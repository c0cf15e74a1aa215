/* msa_impl.h: the CPU backend's Speculative Streaming state (msa.c) and the stream rows' math
 * (msa_rows.c), shared by the stream pass after a forward (msa.c) and the rows that ride in the
 * forward's own phases (msa_fused.c). A stream row r holds stream j of survivor b; both paths
 * compute every row with the same calls in the same order, so a row's bits do not depend on
 * which path computed it (test_msa). */
#ifndef ES_CPU_MSA_IMPL_H
#define ES_CPU_MSA_IMPL_H

#include "adapter.h"
#include "msa.h"
#include "prune.h"

#define ES__MSA_FUSE_ROWS 64 /* the most stream rows a forward carries in its own phases */

struct es__msa {
    int32_t tok_cap, rows_cap;
    /* the last forward, as the stream pass needs it: its survivors (backend.h) */
    int32_t n_streams;       /* stream rows per token it asked for                              */
    int32_t fwd_n, fwd_n_past;
    int32_t *dfs_s, *dfs_e;  /* [tok_cap] the survivors' DFS intervals                          */
    int32_t *pos;            /* [tok_cap] their positions (sliding windows, arch.h)             */
    float *x0;               /* [tok_cap][n_embd] main hidden state at the first MSA layer      */
    /* the token whose streams the rows hold (-1: none), and how many of them */
    int32_t node, node_g;
    /* whether the last forward carried every survivor's n_streams rows in its phases
     * (msa_fused.c; row b * n_streams + j: stream j + 1 of survivor b) */
    bool fused;
    /* pruning: the tokens with children, and the batch after compaction (prune.h) */
    int32_t *parents;        /* [tok_cap]                                                       */
    es__pruned_batch kept;   /* its arrays: [8][tok_cap] in kept_mem                            */
    int32_t *kept_mem;
    /* stream rows */
    float *s, *sn;           /* [rows_cap][n_embd] residual; normalised (final: the output)     */
    float *q, *att;          /* [rows_cap][n_head * hd]                                         */
    float *kk, *vv;          /* [rows_cap][n_head_kv * hd]                                      */
    float *tmp;              /* [rows_cap][n_embd]                                              */
    float *gate, *up;        /* [rows_cap][n_ff]                                                */
    float *lg, *lu;          /* [rows_cap][n_ff] the gate and up LoRA's B (A x), added per chunk */
    /* per thread */
    int32_t *visible;        /* [threads][tok_cap]                                              */
    float *lora_tmp;         /* [threads][lora_stride]: A x (msa_rows.c)                         */
    size_t lora_stride;      /* floats a thread's lora_tmp holds                                */
    /* early exit */
    float *ee_x;             /* [EE_CHUNK][n_embd]                                              */
    float *ee_down;          /* [threads][prune_rank]                                           */
    float *ee_logits;        /* [EE_CHUNK][n_vocab]                                             */
    int32_t n_parents, ee_first, ee_n;
};

/* ---- one stream row (msa_rows.c); ltmp is the calling thread's lora_tmp (es__ssr_scratch) */

float *es__ssr_scratch(const es__msa_job *J, int ith);

/* Eq. 3: row r starts as stream j of survivor b: M + P_j. */
void es__ssr_init(const es__msa_job *J, int32_t b, int32_t j, int64_t r);
/* sn[r] = rmsnorm(s[r]) with weight w. */
void es__ssr_norm(const es__msa_job *J, const float *w, int64_t r);
/* Layer il's q, k, v of row r (after their matrices): the LoRA, the biases, RoPE at b's position. */
void es__ssr_qkv(const es__msa_job *J, int32_t il, int32_t b, int64_t r, float *ltmp);
/* Attention in layer il (Eq. 2) of survivor b's stream rows r0..r0 + G - 1, tasks [t0, t1) of
 * their G n_head (head, stream) pairs, head-major (task h G + j: head h of stream j): the streams
 * of one kv head in one attend_multi call, which reads its keys once for them. */
void es__ssr_attend_streams(const es__msa_job *J, int32_t il, int32_t b, int64_t r0, int64_t t0, int64_t t1,
                            int32_t *visible);
/* After the output projection (tmp[r]): its LoRA and the residual; then the FFN's input norm and
 * the gate and up LoRA's whole outputs (the FFN's chunks add them). */
void es__ssr_attn_out_ffn_in(const es__msa_job *J, int32_t il, int64_t r, float *ltmp);
/* Columns [lo, hi) of row r's gate and up (after their matrices): their LoRA, the activation. */
void es__ssr_ffn_cols(const es__msa_job *J, int32_t il, int64_t r, int64_t lo, int64_t hi);
/* After the down projection (tmp[r]): its LoRA and the residual. */
void es__ssr_ffn_out(const es__msa_job *J, int32_t il, int64_t r, float *ltmp);
/* Columns [lo, hi) of y = W x for n rows of stream buffers. */
void es__ssr_mm(const es__msa_job *J, const es__cpu_mat *W, const float *x, float *y, int64_t n, int64_t lo, int64_t hi,
                float *panel);

#endif /* ES_CPU_MSA_IMPL_H */
