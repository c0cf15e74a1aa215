/* mem_model.h: random llama models built directly in memory (struct es_model with weight views
 * into malloc'd buffers), for CPU forward tests that need no file: invariance, KV compaction,
 * error paths. Weights are stored in the requested type with the library's quantiser; norms are
 * f32 near 1. Models built here are freed with mem_model_free, never es_model_free. */
#ifndef ES_TEST_MEM_MODEL_H
#define ES_TEST_MEM_MODEL_H

#include "model.h"

#include "../test.h"

typedef struct mem_model_cfg {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot;
    es_rope_type rope;
    float freq_base, freq_scale;
    bool tied;
    es__dtype type;
    unsigned long long seed;
} mem_model_cfg;

static size_t mem_row_bytes(es__dtype t, int64_t n) {
    uint64_t b = 0;
    es__dtype_row_bytes(t, (uint64_t)n, &b);
    return (size_t)b;
}

static void mem_tensor(es__tensor *t, const char *name, es__dtype type, int64_t n_in, int64_t n_out, float scale,
                       float offset, test_rng *rng) {
    t->name = name;
    t->type = type;
    t->n_dims = n_out > 1 ? 2 : 1;
    t->ne[0] = n_in;
    t->ne[1] = n_out;
    t->ne[2] = t->ne[3] = 1;
    size_t rb = mem_row_bytes(type, n_in);
    t->nbytes = rb * (size_t)n_out;
    uint8_t *d = malloc(t->nbytes);
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = offset + scale * test_rng_uniform(rng);
        es__quantize_row(type, row, d + rb * (size_t)r, n_in);
    }
    free(row);
    t->data = d;
}

static es_model *mem_model_create(const mem_model_cfg *c) {
    es_model *m = calloc(1, sizeof *m);
    test_rng rng = {c->seed};
    es__hparams *hp = &m->hp;
    hp->n_vocab = c->n_vocab;
    hp->n_ctx_train = 256;
    hp->n_embd = c->n_embd;
    hp->n_layer = c->n_layer;
    hp->n_head = c->n_head;
    hp->n_head_kv = c->n_head_kv;
    hp->n_ff = c->n_ff;
    hp->head_dim = c->head_dim;
    hp->n_rot = c->n_rot;
    hp->rope_freq_base = c->freq_base;
    hp->rope_freq_scale = c->freq_scale;
    hp->rms_eps = 1e-5f;
    hp->rope_type = c->rope;
    hp->arch = es__arch_find("llama");
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    hp->residual_scale = hp->logit_mul = 1.0f; /* llama's: none (0 would drop every branch) */
    m->has_weights = true;
    m->path = "(memory)";
    m->n_tensors = 3 + 9 * c->n_layer;
    m->tensors = calloc((size_t)m->n_tensors, sizeof *m->tensors);
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    es__tensor *t = m->tensors;
    const int32_t d = c->n_embd, qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    const float sd = 1.0f / sqrtf((float)d), sq = 1.0f / sqrtf((float)qd), sf = 1.0f / sqrtf((float)c->n_ff);
    mem_tensor(t, "token_embd.weight", c->type, d, c->n_vocab, 1.0f, 0.0f, &rng);
    m->tok_embd = t++;
    mem_tensor(t, "output_norm.weight", ES__DTYPE_F32, d, 1, 0.2f, 1.0f, &rng);
    m->output_norm = t++;
    if (c->tied) {
        m->output = m->tok_embd;
        m->tied_output = true;
        m->n_tensors--;
    } else {
        mem_tensor(t, "output.weight", c->type, d, c->n_vocab, 2.0f * sd, 0.0f, &rng);
        m->output = t++;
    }
    for (int32_t l = 0; l < c->n_layer; l++) {
        es__layer *L = &m->layers[l];
        mem_tensor(t, "attn_norm", ES__DTYPE_F32, d, 1, 0.2f, 1.0f, &rng), L->attn_norm = t++;
        mem_tensor(t, "attn_q", c->type, d, qd, 2.0f * sd, 0.0f, &rng), L->wq = t++;
        mem_tensor(t, "attn_k", c->type, d, kvd, 2.0f * sd, 0.0f, &rng), L->wk = t++;
        mem_tensor(t, "attn_v", c->type, d, kvd, 2.0f * sd, 0.0f, &rng), L->wv = t++;
        mem_tensor(t, "attn_output", c->type, qd, d, sq, 0.0f, &rng), L->wo = t++;
        mem_tensor(t, "ffn_norm", ES__DTYPE_F32, d, 1, 0.2f, 1.0f, &rng), L->ffn_norm = t++;
        mem_tensor(t, "ffn_gate", c->type, d, c->n_ff, 2.0f * sd, 0.0f, &rng), L->ffn_gate = t++;
        mem_tensor(t, "ffn_up", c->type, d, c->n_ff, 2.0f * sd, 0.0f, &rng), L->ffn_up = t++;
        mem_tensor(t, "ffn_down", c->type, c->n_ff, d, sf, 0.0f, &rng), L->ffn_down = t++;
    }
    return m;
}

/* llama.cpp's _M mixes on a model of mem_model_create: the output head (the embedding when it is
 * tied), and the last layer's attn_v and ffn_down, redrawn in type t, so that the last layer's
 * Q, K and V differ in type. */
static inline void mem_model_mix(es_model *m, es__dtype t, unsigned long long seed) {
    test_rng rng = {seed};
    const es__hparams *hp = &m->hp;
    es__layer *L = &m->layers[hp->n_layer - 1];
    const int64_t d = hp->n_embd, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const float sd = 1.0f / sqrtf((float)d), sf = 1.0f / sqrtf((float)hp->n_ff);
    es__tensor *head = (es__tensor *)m->output, *v = (es__tensor *)L->wv, *down = (es__tensor *)L->ffn_down;
    free((void *)head->data), free((void *)v->data), free((void *)down->data);
    mem_tensor(head, head->name, t, d, hp->n_vocab, m->tied_output ? 1.0f : 2.0f * sd, 0.0f, &rng);
    mem_tensor(v, v->name, t, d, kvd, 2.0f * sd, 0.0f, &rng);
    mem_tensor(down, down->name, t, hp->n_ff, d, sf, 0.0f, &rng);
}

static void mem_model_free(es_model *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_tensors; i++) free((void *)m->tensors[i].data);
    free(m->tensors);
    free(m->layers);
    free(m);
}

#endif /* ES_TEST_MEM_MODEL_H */
