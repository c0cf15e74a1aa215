/* model.h: the loaded model (internal view): hyperparameters, weight views into the mapped GGUF,
 * tokenizer. Validation of llama keys, tensor presence and shapes lives in model.c; this header is
 * what backends read. A model is immutable after es_model_load returns. */
#ifndef ES_CORE_MODEL_H
#define ES_CORE_MODEL_H

#include "arch.h"
#include "common.h"
#include "gguf.h"
#include "../../platform/platform.h"

typedef struct es__vocab es__vocab;

/* A weight tensor: a view into the file mapping. Shapes use GGUF order: ne[0] is contiguous, so a
 * matrix (ne[0] = n_in, ne[1] = n_out) stores one output row of n_in weights after another. */
typedef struct es__tensor {
    const char *name;      /* NUL-terminated, owned by the model          */
    es__dtype type;
    int32_t n_dims;
    int64_t ne[4];         /* unused dims are 1                           */
    const void *data;      /* NULL in a vocab-only model                  */
    uint64_t nbytes;
    uint64_t file_offset;  /* absolute offset of the data in the file     */
} es__tensor;

typedef enum es__rope_scaling {
    ES__ROPE_SCALING_NONE = 0,
    ES__ROPE_SCALING_LINEAR = 1, /* positions times rope_freq_scale                         */
    ES__ROPE_SCALING_YARN = 2,   /* YaRN: interpolate the slow pairs only, scale magnitudes  */
    ES__ROPE_SCALING_LONGROPE = 3, /* the per-pair divisors rope_long/rope_short             */
} es__rope_scaling;

typedef struct es__hparams {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t n_ff;
    int32_t head_dim;      /* per-head query/key/value width                  */
    int32_t n_rot;         /* rotary dims per head (<= head_dim, even)        */
    float rope_freq_base;
    float rope_freq_scale; /* positions are multiplied by this (1 = none)     */
    float rms_eps;
    es_rope_type rope_type;
    const es__arch *arch;  /* what the forward does beyond llama's (arch.h)     */
    float embd_scale;      /* embedding rows are multiplied by it (1 = none)    */
    float attn_scale;      /* attention scores are q.k times it (1/sqrt(head_dim)) */
    float attn_softcap;    /* scores become c tanh(s / c) (0 = none)            */
    float final_softcap;   /* logits become c tanh(l / c) (0 = none)            */
    float residual_scale;  /* branch outputs are multiplied by it before the residual add (1 = none) */
    float logit_mul;       /* logits are multiplied by it, before any soft-capping (1 = none)   */
    const float *rope_freqs; /* [n_rot / 2] divisors of each pair's frequency (llama 3's
                              rope_freqs.weight, f32 in the mapping) or NULL            */
    const float *rope_long, *rope_short; /* phi3 LongRoPE's [n_rot / 2] divisors (rope_factors_
                              long/short.weight) for contexts beyond / within rope_n_ctx_orig, or NULL */
    es__rope_scaling rope_scaling;
    int32_t rope_n_ctx_orig; /* rope.scaling.original_context_length (n_ctx_train when absent) */
    float rope_attn_factor;  /* rope.scaling.attn_factor: cos and sin times it (0 or 1: none)  */
    float yarn_ext_factor, yarn_beta_fast, yarn_beta_slow; /* YaRN's ramp (rope.c)            */
    int32_t n_swa;         /* sliding window: a query at position p sees keys at
                              positions > p - n_swa in sliding layers (0 = none) */
    float rope_freq_base_swa; /* > 0: the sliding layers' own RoPE base, unscaled (gemma3) */
} es__hparams;

/* The sliding window of layer il: hp->n_swa in the layers the architecture's pattern makes
 * sliding, else 0 (the whole context). */
static inline int32_t es__layer_window(const es__hparams *hp, int32_t il) {
    if (hp->n_swa <= 0) return 0;
    const int32_t p = hp->arch ? hp->arch->swa_pattern : 1;
    return p <= 1 || il % p < p - 1 ? hp->n_swa : 0;
}

/* Whether layer il is a sliding layer with a RoPE of its own (rope.h es__rope_table_of). */
static inline bool es__layer_rope_local(const es__hparams *hp, int32_t il) {
    return hp->rope_freq_base_swa > 0.0f && es__layer_window(hp, il) > 0;
}

typedef struct es__layer {
    const es__tensor *attn_norm; /* (n_embd)                          */
    const es__tensor *wq;        /* (n_head * head_dim, n_embd)       */
    const es__tensor *wk;        /* (n_head_kv * head_dim, n_embd)    */
    const es__tensor *wv;        /* (n_head_kv * head_dim, n_embd)    */
    const es__tensor *wo;        /* (n_embd, n_head * head_dim)       */
    const es__tensor *ffn_norm;  /* (n_embd)                          */
    const es__tensor *ffn_gate;  /* (n_ff, n_embd)                    */
    const es__tensor *ffn_up;    /* (n_ff, n_embd)                    */
    const es__tensor *ffn_down;  /* (n_embd, n_ff)                    */
    const es__tensor *bq, *bk, *bv; /* (n_head*hd), (n_head_kv*hd) x 2; NULL without biases */
    const es__tensor *post_attn_norm, *post_ffn_norm; /* (n_embd); NULL unless post_norms */
    const es__tensor *q_norm, *k_norm; /* (head_dim); NULL unless qk_norm                */
    /* row-range views of fused tensors (attn_qkv, ffn_up of phi3) that wq..wv, ffn_gate and
     * ffn_up point at; their names and data are the fused tensor's */
    es__tensor views[5];
} es__layer;

struct es_model {
    es_allocator alloc_copy;     /* the user's allocator, copied        */
    const es_allocator *alloc;   /* &alloc_copy or NULL                  */
    es__log log;
    es__err err;
    es__file_map map;
    es__gguf *gguf;
    char *path;
    char *arch;                  /* general.architecture                 */
    char *name;                  /* general.name or ""                   */
    char *tokenizer_pre;         /* tokenizer.ggml.pre or "default"       */
    es__hparams hp;
    bool has_weights;
    es__tensor *tensors;         /* [n_tensors] all tensors of the file  */
    int32_t n_tensors;
    const es__tensor *tok_embd;  /* (n_vocab, n_embd)                    */
    const es__tensor *output_norm; /* (n_embd)                           */
    const es__tensor *output;    /* (n_vocab, n_embd); == tok_embd when tied */
    bool tied_output;
    es__layer *layers;           /* [n_layer]                            */
    es__vocab *vocab;
    uint64_t n_params;
    uint64_t weight_bytes;
    struct es__ss_adapter *ss;   /* Speculative Streaming adapter (adapter.c) or NULL; freed with the model */
    bool map_borrowed;           /* map.data is the caller's (es__model_load_mem): not unmapped */
};

/* es_model_load on a file image already in memory, which must outlive the model (not copied).
 * name stands in for the path in messages. For fuzzing and for models embedded in a binary. */
es_status es__model_load_mem(const uint8_t *data, uint64_t size, const char *name, const es_model_params *params,
                             es_model **out);

#endif /* ES_CORE_MODEL_H */
