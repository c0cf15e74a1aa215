/* mem_adapter.h: random Speculative Streaming adapters for in-memory test models (mem_model.h),
 * written with the GGUF writer and read back by the library's loader, so tests run the real
 * loading path. Free with mem_adapter_model_free (mem_model_free leaves model->ss alone). */
#ifndef ES_TEST_MEM_ADAPTER_H
#define ES_TEST_MEM_ADAPTER_H

#include "../cpu/mem_model.h"
#include "adapter.h"
#include "gguf.h"

typedef struct mem_adapter_cfg {
    int32_t n_streams, n_msa, prune_layer, prune_rank, lora_rank;
    float scale; /* of the random values */
    unsigned long long seed;
} mem_adapter_cfg;

static void mem_adapter_tensor(es__gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, float scale,
                               test_rng *rng) {
    float *v = malloc(sizeof(float) * (size_t)(ne0 * ne1));
    for (int64_t i = 0; i < ne0 * ne1; i++) v[i] = scale * test_rng_uniform(rng);
    int64_t ne[2] = {ne0, ne1};
    CHECK_OK(es__gguf_add_tensor(w, name, ES__DTYPE_F32, 2, ne, v));
    free(v);
}

/* Attaches a random adapter to m (LoRA on every projection of the top MSA layer when lora_rank > 0). */
static void mem_adapter_attach(es_model *m, const mem_adapter_cfg *c) {
    test_rng rng = {c->seed};
    const es__hparams *hp = &m->hp;
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    es__gguf_set_str(w, "general.type", "adapter");
    es__gguf_set_str(w, "edgespec.adapter.type", "speculative_streaming");
    es__gguf_set_u32(w, "edgespec.ss.n_streams", (uint32_t)c->n_streams);
    es__gguf_set_u32(w, "edgespec.ss.n_msa_layers", (uint32_t)c->n_msa);
    if (c->prune_rank > 0) {
        es__gguf_set_u32(w, "edgespec.ss.prune_rank", (uint32_t)c->prune_rank);
        es__gguf_set_u32(w, "edgespec.ss.prune_layer", (uint32_t)c->prune_layer);
    }
    if (c->lora_rank > 0) es__gguf_set_u32(w, "edgespec.ss.lora_rank", (uint32_t)c->lora_rank);
    mem_adapter_tensor(w, "ss.stream_embd.weight", hp->n_embd, c->n_streams, c->scale * 4.0f, &rng);
    if (c->prune_rank > 0) {
        mem_adapter_tensor(w, "ss.prune_down.weight", hp->n_embd, c->prune_rank, c->scale, &rng);
        mem_adapter_tensor(w, "ss.prune_up.weight", c->prune_rank, hp->n_embd, c->scale, &rng);
    }
    if (c->lora_rank > 0) {
        const int32_t q = hp->n_head * hp->head_dim, kv = hp->n_head_kv * hp->head_dim;
        const int32_t dims[ES__SS_LORA_COUNT][2] = {{hp->n_embd, q},  {hp->n_embd, kv},       {hp->n_embd, kv},
                                                   {q, hp->n_embd},  {hp->n_embd, hp->n_ff}, {hp->n_embd, hp->n_ff},
                                                   {hp->n_ff, hp->n_embd}};
        for (int t = 0; t < ES__SS_LORA_COUNT; t++) {
            char name[96];
            es__ss_lora_name(name, sizeof name, hp->n_layer - 1, (es__ss_lora_target)t, 'a');
            mem_adapter_tensor(w, name, dims[t][0], c->lora_rank, c->scale, &rng);
            es__ss_lora_name(name, sizeof name, hp->n_layer - 1, (es__ss_lora_target)t, 'b');
            mem_adapter_tensor(w, name, c->lora_rank, dims[t][1], c->scale, &rng);
        }
    }
    uint8_t *data = NULL;
    uint64_t size = 0;
    es__err err;
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    es__gguf_writer_free(w);
    es__ss_adapter *ad = NULL;
    CHECK_OK(es__ss_adapter_parse(hp, data, size, "(memory adapter)", NULL, &ad, &err));
    es__free(NULL, data);
    m->ss = ad;
}

/* Frees a mem_model_create model and the adapter mem_adapter_attach gave it. */
static inline void mem_adapter_model_free(es_model *m) {
    es__ss_adapter_free(m->ss);
    m->ss = NULL;
    mem_model_free(m);
}

#endif /* ES_TEST_MEM_ADAPTER_H */
