/* adapter.c: loading the Speculative Streaming adapter GGUF (keys and tensors in docs/formats.md)
 * and attaching it to a model. Every key and tensor is checked against the base model's
 * hyperparameters before anything is kept; tensors are converted to f32 copies so the file can
 * be closed at once. Deliberately not here: what the tensors compute (lib/cpu/msa.c, the Vulkan
 * MSA path) and which strategy uses them (lib/decode). */
#include "adapter.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const lora_target_names[ES__SS_LORA_COUNT] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

void es__ss_lora_name(char *buf, size_t size, int32_t il, es__ss_lora_target t, char factor) {
    snprintf(buf, size, "ss.blk.%d.%s.lora_%c", (int)il, lora_target_names[t], factor);
}

/* (n_in, n_out) of a LoRA target's base projection. */
static void lora_dims(const es__hparams *hp, es__ss_lora_target t, int32_t *n_in, int32_t *n_out) {
    const int32_t q = hp->n_head * hp->head_dim, kv = hp->n_head_kv * hp->head_dim;
    switch (t) {
    case ES__SS_LORA_Q: *n_in = hp->n_embd, *n_out = q; break;
    case ES__SS_LORA_K:
    case ES__SS_LORA_V: *n_in = hp->n_embd, *n_out = kv; break;
    case ES__SS_LORA_O: *n_in = q, *n_out = hp->n_embd; break;
    case ES__SS_LORA_GATE:
    case ES__SS_LORA_UP: *n_in = hp->n_embd, *n_out = hp->n_ff; break;
    default: *n_in = hp->n_ff, *n_out = hp->n_embd; break;
    }
}

void es__ss_adapter_free(es__ss_adapter *ad) {
    if (!ad) return;
    const es_allocator *a = ad->alloc;
    es__free(a, ad->stream_embd);
    es__free(a, ad->prune_down);
    es__free(a, ad->prune_up);
    if (ad->lora) {
        for (int32_t i = 0; i < ad->n_msa * ES__SS_LORA_COUNT; i++) {
            es__free(a, ad->lora[i].a);
            es__free(a, ad->lora[i].b);
            es__free(a, ad->lora[i].bt);
        }
        es__free(a, ad->lora);
    }
    pthread_mutex_destroy(&ad->ride_lock);
    es__free(a, ad);
}

bool es__ss_ride_recall(es__ss_adapter *ad, const char *key, int32_t *rows) {
    bool found = false;
    pthread_mutex_lock(&ad->ride_lock);
    for (int32_t i = 0; i < ad->n_ride && !found; i++)
        if (strcmp(ad->ride[i].key, key) == 0) *rows = ad->ride[i].rows, found = true;
    pthread_mutex_unlock(&ad->ride_lock);
    return found;
}

void es__ss_ride_remember(es__ss_adapter *ad, const char *key, int32_t rows) {
    const int32_t cap = (int32_t)ES__ARRAY_LEN(ad->ride);
    pthread_mutex_lock(&ad->ride_lock);
    if (ad->n_ride == cap) memmove(&ad->ride[0], &ad->ride[1], sizeof ad->ride[0] * (size_t)(cap - 1)), ad->n_ride--;
    snprintf(ad->ride[ad->n_ride].key, sizeof ad->ride[0].key, "%s", key);
    ad->ride[ad->n_ride++].rows = rows;
    pthread_mutex_unlock(&ad->ride_lock);
}

typedef struct loader {
    const es__hparams *hp;
    const es__gguf *g;
    const char *name;
    const es_allocator *a;
    es__err *err;
    uint8_t *used; /* [n_tensors] tensors claimed by a known name */
} loader;

static es_status get_u32(loader *L, const char *key, bool required, uint32_t lo, uint32_t hi, int32_t *out) {
    uint32_t v = (uint32_t)*out;
    es_status s = es__gguf_get_u32(L->g, key, required, &v, L->err);
    if (s != ES_OK) return es__fail(L->err, s, "SS adapter '%s': %s", L->name, L->err->msg);
    ES_RETURN_IF(v < lo || v > hi, L->err, ES_ERR_MODEL, "SS adapter '%s': %s = %" PRIu32 ", expected %" PRIu32 "..%" PRIu32,
                 L->name, key, v, lo, hi);
    *out = (int32_t)v;
    return ES_OK;
}

static es_status expect_str(loader *L, const char *key, const char *want) {
    es__str v = {NULL, 0};
    es_status s = es__gguf_get_str(L->g, key, true, &v, L->err);
    if (s != ES_OK) return es__fail(L->err, s, "SS adapter '%s': %s", L->name, L->err->msg);
    ES_RETURN_IF(!es__str_eq(v, want), L->err, ES_ERR_MODEL, "SS adapter '%s': %s = \"%.*s\", expected \"%s\"",
                 L->name, key, (int)ES__MIN(v.len, 64u), v.ptr, want);
    return ES_OK;
}

/* Finds tensor name with shape (ne0, ne1), converts it to f32 (ne0 contiguous). Absent and not
 * required: *out stays NULL. */
static es_status load_tensor(loader *L, const char *name, int64_t ne0, int64_t ne1, bool required, float **out) {
    *out = NULL;
    const es__gguf_tensor *t = es__gguf_find_tensor(L->g, name);
    if (!t) {
        ES_RETURN_IF(required, L->err, ES_ERR_MODEL, "SS adapter '%s': missing tensor %s", L->name, name);
        return ES_OK;
    }
    L->used[t - L->g->tensors] = 1;
    ES_RETURN_IF(t->n_dims > 2 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1, L->err,
                 ES_ERR_MODEL,
                 "SS adapter '%s': tensor %s (info at offset %" PRIu64 ") has shape [%" PRId64 ", %" PRId64 ", %" PRId64
                 ", %" PRId64 "], expected [%" PRId64 ", %" PRId64 "] for the base model",
                 L->name, name, t->info_offset, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0, ne1);
    size_t n;
    ES_RETURN_IF(!es__mul_size((size_t)ne0, (size_t)ne1, &n), L->err, ES_ERR_MODEL, "SS adapter '%s': %s too large",
                 L->name, name);
    float *f = es__calloc(L->a, n, sizeof(float));
    ES_RETURN_IF(!f, L->err, ES_ERR_OUT_OF_MEMORY, "SS adapter '%s': out of memory for %s", L->name, name);
    if (!t->data || !es__dequantize_row((uint32_t)t->type, t->data, f, (int64_t)n)) {
        es__free(L->a, f);
        return es__fail(L->err, ES_ERR_UNSUPPORTED, "SS adapter '%s': tensor %s: cannot read type %u", L->name, name,
                        (unsigned)t->type);
    }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(f[i])) {
            const double bad = (double)f[i];
            es__free(L->a, f);
            return es__fail(L->err, ES_ERR_MODEL, "SS adapter '%s': tensor %s element %zu is %g (data at offset %" PRIu64
                            ")", L->name, name, i, bad, L->g->data_offset + t->rel_offset);
        }
    }
    *out = f;
    return ES_OK;
}

static es_status load_lora(loader *L, es__ss_adapter *ad) {
    ad->lora = es__calloc(L->a, (size_t)ad->n_msa * ES__SS_LORA_COUNT, sizeof(es__ss_lora));
    ES_RETURN_IF(!ad->lora, L->err, ES_ERR_OUT_OF_MEMORY, "SS adapter '%s': out of memory", L->name);
    const int32_t r = ad->lora_rank;
    for (int32_t i = 0; i < ad->n_msa; i++) {
        for (int32_t t = 0; t < ES__SS_LORA_COUNT; t++) {
            es__ss_lora *lo = &ad->lora[i * ES__SS_LORA_COUNT + t];
            char na[96], nb[96];
            es__ss_lora_name(na, sizeof na, ad->msa_start + i, (es__ss_lora_target)t, 'a');
            es__ss_lora_name(nb, sizeof nb, ad->msa_start + i, (es__ss_lora_target)t, 'b');
            lora_dims(L->hp, (es__ss_lora_target)t, &lo->n_in, &lo->n_out);
            bool has_a = es__gguf_find_tensor(L->g, na) != NULL, has_b = es__gguf_find_tensor(L->g, nb) != NULL;
            ES_RETURN_IF(has_a != has_b, L->err, ES_ERR_MODEL, "SS adapter '%s': tensor %s without %s", L->name,
                         has_a ? na : nb, has_a ? nb : na);
            ES_RETURN_IF(has_a && r == 0, L->err, ES_ERR_MODEL,
                         "SS adapter '%s': tensor %s present but edgespec.ss.lora_rank is 0", L->name, na);
            if (!has_a) continue;
            ES_TRY(load_tensor(L, na, lo->n_in, r, true, &lo->a));  /* (rank, n_in)  */
            ES_TRY(load_tensor(L, nb, r, lo->n_out, true, &lo->b)); /* (n_out, rank) */
            lo->bt = es__calloc(L->a, (size_t)r * (size_t)lo->n_out, sizeof(float));
            ES_RETURN_IF(!lo->bt, L->err, ES_ERR_OUT_OF_MEMORY, "SS adapter '%s': out of memory for %s", L->name, nb);
            for (int32_t o = 0; o < lo->n_out; o++)
                for (int32_t k = 0; k < r; k++) lo->bt[(size_t)k * (size_t)lo->n_out + (size_t)o] = lo->b[(size_t)o * (size_t)r + (size_t)k];
        }
    }
    return ES_OK;
}

static es_status load(loader *L, es__ss_adapter *ad) {
    const es__hparams *hp = L->hp;
    ES_TRY(expect_str(L, "general.type", "adapter"));
    /* optional (tools/train writes it, mkadapter does not); when given, it must be the base
     * model's architecture: the stream layers take that architecture's steps (arch.h) */
    if (es__gguf_find(L->g, "general.architecture"))
        ES_TRY(expect_str(L, "general.architecture", hp->arch ? hp->arch->name : "llama"));
    ES_TRY(expect_str(L, "edgespec.adapter.type", "speculative_streaming"));
    ES_TRY(get_u32(L, "edgespec.ss.n_streams", true, 1, ES_SPEC_MAX_DEPTH, &ad->n_streams));
    ES_TRY(get_u32(L, "edgespec.ss.n_msa_layers", true, 1, (uint32_t)hp->n_layer, &ad->n_msa));
    ad->msa_start = hp->n_layer - ad->n_msa;
    ES_TRY(get_u32(L, "edgespec.ss.prune_rank", false, 0, (uint32_t)hp->n_embd, &ad->prune_rank));
    ad->prune_layer = ad->msa_start;
    ES_TRY(get_u32(L, "edgespec.ss.prune_layer", ad->prune_rank > 0, 0, (uint32_t)hp->n_layer, &ad->prune_layer));
    ES_TRY(get_u32(L, "edgespec.ss.lora_rank", false, 0, (uint32_t)hp->n_embd, &ad->lora_rank));
    ES_TRY(load_tensor(L, "ss.stream_embd.weight", hp->n_embd, ad->n_streams, true, &ad->stream_embd));
    if (ad->prune_rank > 0) {
        ES_TRY(load_tensor(L, "ss.prune_down.weight", hp->n_embd, ad->prune_rank, true, &ad->prune_down));
        ES_TRY(load_tensor(L, "ss.prune_up.weight", ad->prune_rank, hp->n_embd, true, &ad->prune_up));
    }
    ES_TRY(load_lora(L, ad));
    for (uint64_t i = 0; i < L->g->n_tensors; i++) {
        const es__gguf_tensor *t = &L->g->tensors[i];
        ES_RETURN_IF(!L->used[i], L->err, ES_ERR_MODEL,
                     "SS adapter '%s': unexpected tensor %.*s (info at offset %" PRIu64 ")%s", L->name,
                     (int)ES__MIN(t->name.len, 128u), t->name.ptr, t->info_offset,
                     ad->prune_rank == 0 ? " (pruning tensors need edgespec.ss.prune_rank > 0)" : "");
    }
    return ES_OK;
}

es_status es__ss_adapter_parse(const es__hparams *hp, const uint8_t *data, uint64_t size, const char *name,
                               const es_allocator *a, es__ss_adapter **out, es__err *err) {
    *out = NULL;
    es__gguf *g = NULL;
    es_status s = es__gguf_parse(data, size, a, err, &g);
    if (s != ES_OK) return es__fail(err, s, "SS adapter '%s': %s", name, err->msg);
    es__ss_adapter *ad = es__calloc(a, 1, sizeof *ad);
    uint8_t *used = es__calloc(a, (size_t)g->n_tensors + 1, 1);
    const bool locked = ad && pthread_mutex_init(&ad->ride_lock, NULL) == 0;
    if (!ad || !used || !locked) {
        if (locked) pthread_mutex_destroy(&ad->ride_lock);
        es__free(a, ad);
        es__free(a, used);
        es__gguf_free(g);
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "SS adapter '%s': out of memory", name);
    }
    ad->alloc = a;
    loader L = {hp, g, name, a, err, used};
    s = load(&L, ad);
    es__free(a, used);
    es__gguf_free(g);
    if (s != ES_OK) {
        es__ss_adapter_free(ad);
        return s;
    }
    *out = ad;
    return ES_OK;
}

es_status es_model_load_adapter(es_model *model, const char *path) {
    if (!model) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_model_load_adapter: model is NULL");
    ES_RETURN_IF(!path, &model->err, ES_ERR_INVALID_ARGUMENT, "es_model_load_adapter: path is NULL");
    ES_RETURN_IF(model->ss, &model->err, ES_ERR_INVALID_ARGUMENT,
                 "es_model_load_adapter: model '%s' already has an adapter; load the model again for another",
                 model->path);
    es__file_map map;
    int e = es__file_map_open(path, true, &map);
    ES_RETURN_IF(e != 0, &model->err, ES_ERR_IO, "SS adapter '%s': %s", path, es__file_strerror(e));
    es__ss_adapter *ad = NULL;
    es_status s = es__ss_adapter_parse(&model->hp, map.data, map.size, path, model->alloc, &ad, &model->err);
    es__file_map_close(&map);
    if (s != ES_OK) return s;
    model->ss = ad;
    es__logf(&model->log, ES_LOG_INFO, "SS adapter '%s': %d streams, %d MSA layers, prune layer %d rank %d, LoRA rank %d",
             path, ad->n_streams, ad->n_msa, ad->prune_layer, ad->prune_rank, ad->lora_rank);
    return ES_OK;
}
