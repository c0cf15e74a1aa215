/* cpu.h: the CPU backend's private state, shared by backend.c (setup, weights, KV cache) and
 * forward.c (the llama forward pass). */
#ifndef ES_CPU_CPU_H
#define ES_CPU_CPU_H

#include "backend.h"
#include "kern.h"
#include "pool.h"

typedef struct es__cpu_state {
    es__pool *pool;
    const es__kern *kern;
    bool weights_in_place; /* es_backend_params.cpu_weights_in_place */
} es__cpu_state;

/* A weight matrix as the kernels read it: n_out rows of n_in elements of type. */
typedef struct es__cpu_mat {
    es__dtype type;
    const void *data;
    size_t row_bytes;
    int64_t n_in, n_out;
} es__cpu_mat;

typedef struct es__cpu_layer {
    const float *attn_norm, *ffn_norm; /* (n_embd) f32                          */
    es__cpu_mat wq, wk, wv, wo;        /* (n_head*hd | n_head_kv*hd | n_embd, .) */
    es__cpu_mat gate, up, down;        /* (n_ff, n_embd), (n_ff, n_embd), (n_embd, n_ff) */
    const float *bq, *bk, *bv;         /* (n_head*hd), (n_head_kv*hd) x 2; NULL: no biases */
    const float *post_attn_norm, *post_ffn_norm; /* (n_embd); NULL: none (arch.h)         */
    const float *q_norm, *k_norm;      /* (head_dim); NULL: none (arch.h)                  */
} es__cpu_layer;

typedef struct es__cpu_weights {
    const es_model *model;
    es__cpu_mat tok_embd;              /* (n_vocab, n_embd) */
    es__cpu_mat output;                /* (n_vocab, n_embd); the same data when tied */
    const float *output_norm;          /* (n_embd) */
    es__cpu_layer *layers;             /* [n_layer] */
    float *norms;                      /* owned f32 copies of the norm vectors and biases */
    void *repacked;                    /* owned copy of the matrices (NULL = read from the mapping) */
    size_t repacked_size;
} es__cpu_weights;

/* Per-context state: the KV cache and scratch for n_batch tokens. */
typedef struct es__cpu_ctx {
    float *k, *v;        /* (n_layer, n_head_kv, n_ctx, head_dim) each         */
    float *x;            /* [n_batch][n_embd] residual stream                  */
    float *xn;           /* [n_batch][n_embd] normalised                       */
    float *q;            /* [n_batch][n_head * hd]                             */
    float *kn, *vn;      /* [n_batch][n_head_kv * hd] this batch's keys/values  */
    float *att;          /* [n_batch][n_head * hd] attention output            */
    float *tmp;          /* [n_batch][n_embd] projection output                */
    float *gate, *up;    /* [n_batch][n_ff]                                    */
    float *rope;         /* [n_batch][tables][n_rot / 2][2] cos, sin (es__cpu_rope_rows) */
    int32_t *visible;    /* [n_threads][ES__CPU_ATTN_ROWS * n_batch]           */
    float *panel;        /* [n_threads][panel_floats] matmul weight panels      */
    size_t panel_floats; /* kern panel_rows * the widest matrix input           */
    void *act_mem;       /* the block holding x .. panel, each 64-byte aligned  */
    es__sched *sched;    /* phases of one forward (pool.h), 64-byte aligned      */
    void *sched_mem;     /* its allocation                                      */
    int32_t n_phases;
    int n_threads;
    struct es__msa *msa; /* Speculative Streaming state (msa.c), made on first use */
    int32_t fuse_rows;   /* the most stream rows that ride in a forward (msa_fused.c)   */
    /* ALSpec's speculative attention, grown on first use; an ALSpec speculation part leaves its
     * partials here for the attention part that completes the layer */
    float *al_part;        /* [n_head][al_part_floats] tile partials                 */
    size_t al_part_floats;
    float *al_spec;        /* [n_head * hd] the speculation                          */
    double *al_e2;         /* [n_head][2]: (spec - A)^2 and A^2 over the head's dims  */
} es__cpu_ctx;

es_status es__cpu_forward(es_context *ctx, const es__fwd *f);
/* Phases a forward pass of an n_layer model runs (the size of es__cpu_ctx.sched). */
int32_t es__cpu_fwd_phases(int32_t n_layer);

#endif /* ES_CPU_CPU_H */
