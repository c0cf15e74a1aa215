/* model_vk.h: a model's weights on a Vulkan device (model_vk.c) and the per-context forward
 * state (forward.c). */
#ifndef ES_VULKAN_MODEL_VK_H
#define ES_VULKAN_MODEL_VK_H

#include "ops.h"

typedef struct es__vk_layer {
    es__vk_mat qkv;          /* (n_head*hd + 2*n_head_kv*hd, n_embd): wq, wk, wv rows      */
    es__vk_mat wo;           /* (n_embd, n_head*hd)                                       */
    es__vk_mat gateup;       /* (2*n_ff, n_embd): gate and up rows interleaved           */
    es__vk_mat down;         /* (n_embd, n_ff)                                            */
    uint32_t attn_norm, ffn_norm; /* float offsets of the norm vectors in vecs            */
    uint32_t post_attn_norm, post_ffn_norm; /* the same for gemma2's post-branch norms (arch.h) */
    uint32_t q_norm, k_norm; /* the same for the Q and K head norms (qk_norm, arch.h): head_dim
                                floats each, padded to 32                                 */
} es__vk_layer;

typedef struct es__vk_model {
    const es_model *model;
    es__vk_wset ws;
    es__vk_mat tok_embd;     /* (n_vocab, n_embd)                                         */
    es__vk_mat output;       /* (n_vocab, n_embd); unused when tied                       */
    const es__vk_mat *out;   /* &output, or &tok_embd when the head is tied               */
    es__vk_layer *layers;    /* [n_layer]                                                 */
    es__vk_buf vecs;         /* f32 norm vectors, each padded to 32 floats                */
    VkBufferView vecs_view;
    uint32_t output_norm;    /* float offset in vecs                                      */
    uint32_t E32;            /* n_embd rounded up to 32: the padded row of every vector   */
} es__vk_model;

es_status es__vk_model_upload(es_backend *b, const es_model *m, es__vk_model **out);
void es__vk_model_free(es_backend *b, es__vk_model *w);

/* The epilogue of a layer's Q/K/V projection: RoPE and the KV write fused (mul_mat.comp), or
 * with per-head Q/K norms (arch.h qk_norm) a plain store that qk_norm_rope.comp then completes. */
static inline uint32_t es__vk_qkv_epi(const es__vk_model *w) {
    return w->model->hp.arch->qk_norm ? ES__EPI_STORE : ES__EPI_ROPE_KV;
}
/* A context's RoPE region (forward.c) holds es__rope_tables(hp) tables of [rows][n_rot / 2][2]
 * (cos, sin) one after another, then every layer's Q, K, V biases (qwen2: bias_floats each). A
 * table has a row per position (n_ctx) but the identity of smollm3's layers without RoPE, whose
 * every row is the same (cos 1, sin 0): one row, read with a position stride of 0 (a table of
 * n_ctx rows was 16 MiB at 32k positions of n_rot 128). The float offsets there of table t, of
 * layer l's table (es__rope_table_of: the model's, gemma3's sliding layers' own, or the
 * identity) with the floats between its positions, and of layer l's biases (0: the model has
 * none). */
static inline uint32_t es__vk_rope_rows(const es__hparams *hp, uint32_t n_ctx, int32_t t) {
    return es__rope_table(hp, (int32_t)n_ctx, t).identity ? 1u : n_ctx;
}
static inline uint64_t es__vk_rope_table_off(const es__hparams *hp, uint32_t n_ctx, int32_t t) {
    uint64_t off = 0; /* 64 bits: forward.c checks the whole region against the binding limits */
    for (int32_t u = 0; u < t; u++) off += (uint64_t)es__vk_rope_rows(hp, n_ctx, u) * (uint64_t)hp->n_rot;
    return off;
}
static inline uint32_t es__vk_rope_off(const es__vk_model *w, uint32_t n_ctx, uint32_t l) {
    const es__hparams *hp = &w->model->hp;
    return (uint32_t)es__vk_rope_table_off(hp, n_ctx, es__rope_table_of(hp, (int32_t)l));
}
static inline uint32_t es__vk_rope_stride(const es__vk_model *w, uint32_t n_ctx, uint32_t l) {
    const es__hparams *hp = &w->model->hp;
    return es__vk_rope_rows(hp, n_ctx, es__rope_table_of(hp, (int32_t)l)) > 1u ? (uint32_t)hp->n_rot : 0u;
}
static inline uint32_t es__vk_bias_off(const es__vk_model *w, uint32_t n_ctx, uint32_t bias_floats, uint32_t l) {
    const es__hparams *hp = &w->model->hp;
    return bias_floats ? (uint32_t)es__vk_rope_table_off(hp, n_ctx, es__rope_tables(hp)) + l * bias_floats : 0u;
}
/* qk_norm_rope's push constants for n rows of QKV (qkv_stride floats apart) of layer l: the
 * model's geometry, the layer's head norms and RoPE table; the caller sets bias_off and the
 * stream rows (ss_t0 = n: none). */
es__pc_qk_norm_rope es__vk_qk_norm_call(const es__vk_model *w, uint32_t l, uint32_t n, uint32_t qkv_stride,
                                        uint32_t n_ctx);

/* forward.c */
es_status es__vk_ctx_init(es_context *ctx);
void es__vk_ctx_destroy(es_context *ctx);
es_status es__vk_forward(es_context *ctx, const es__fwd *f);
es_status es__vk_kv_shift(es_context *ctx, int32_t n_keep, int32_t n_discard);
es_status es__vk_kv_io(es_context *ctx, int32_t n, float *buf, bool write);
es_status es__vk_kv_slot(es_context *ctx, int32_t layer, int32_t pos, float *buf, bool write);
es_status es__vk_kv_compact(es_context *ctx, const int32_t *keep, int32_t n_keep);
/* Speculative Streaming: the streams' logits of batch token i of the last forward (msa_vk.c). */
es_status es__vk_stream_logits(es_context *ctx, int32_t i, int32_t g, float *out);

#endif
