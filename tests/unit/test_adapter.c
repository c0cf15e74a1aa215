/* test_adapter.c: the Speculative Streaming adapter loader on adapters written with the GGUF
 * writer: a full adapter (f16/bf16/q8_0/f32 tensors, pruning, stream-only LoRA) reads back with the
 * values written; every defect (keys, ranges, shapes, missing or unexpected tensors, non-finite
 * values, truncation) is rejected with a message naming it; es_model_load_adapter attaches once. */
#include "adapter.h"
#include "gguf.h"

#include "../test.h"

#include <stdio.h>
#include <unistd.h>

static es__hparams hp;

/* What the adapter under construction looks like; each test breaks one thing. */
typedef struct spec {
    const char *general_type, *adapter_type;
    const char *arch; /* general.architecture; NULL = absent (optional) */
    int64_t n_streams, n_msa, prune_rank, prune_layer, lora_rank; /* -1 = key absent */
    int64_t embd_ne0, embd_ne1;
    es__dtype embd_type;
    bool prune_tensors, lora_a_only, nan, extra_tensor, no_embd;
    int64_t lora_tensor_rank; /* 0 = lora_rank */
} spec;

static spec good(void) {
    spec s = {"adapter", "speculative_streaming", NULL, 3, 2, 4, 4, 2, 0, 0, ES__DTYPE_F16, true, false, false, false, false, 0};
    s.embd_ne0 = hp.n_embd;
    s.embd_ne1 = 3;
    return s;
}

static float val(int64_t tensor, int64_t i) { /* exactly representable in f16, bf16 and q8_0 grids */
    return (float)(((tensor * 7 + i * 3) % 15) - 7) / 8.0f;
}

static void add_f32(es__gguf_writer *w, const char *name, es__dtype type, int64_t ne0, int64_t ne1, int64_t tag,
                    bool nan) {
    size_t n = (size_t)(ne0 * ne1);
    float *f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = val(tag, (int64_t)i);
    if (nan) f[n / 2] = NAN;
    uint8_t *data = malloc(n * 4 + 64);
    if (type == ES__DTYPE_F32) {
        memcpy(data, f, n * 4);
    } else if (type == ES__DTYPE_F16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h = es__f32_to_f16(f[i]);
            memcpy(data + 2 * i, &h, 2);
        }
    } else if (type == ES__DTYPE_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h = es__f32_to_bf16(f[i]);
            memcpy(data + 2 * i, &h, 2);
        }
    } else {
        CHECK(es__quantize_row(type, f, data, (int64_t)n));
    }
    int64_t ne[2] = {ne0, ne1};
    CHECK_OK(es__gguf_add_tensor(w, name, type, 2, ne, data));
    free(f);
    free(data);
}

static es_status build_and_parse(const spec *s, es__ss_adapter **out, uint8_t **file, uint64_t *file_size) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    if (s->general_type) es__gguf_set_str(w, "general.type", s->general_type);
    if (s->arch) es__gguf_set_str(w, "general.architecture", s->arch);
    if (s->adapter_type) es__gguf_set_str(w, "edgespec.adapter.type", s->adapter_type);
    if (s->n_streams >= 0) es__gguf_set_u32(w, "edgespec.ss.n_streams", (uint32_t)s->n_streams);
    if (s->n_msa >= 0) es__gguf_set_u32(w, "edgespec.ss.n_msa_layers", (uint32_t)s->n_msa);
    if (s->prune_rank >= 0) es__gguf_set_u32(w, "edgespec.ss.prune_rank", (uint32_t)s->prune_rank);
    if (s->prune_layer >= 0) es__gguf_set_u32(w, "edgespec.ss.prune_layer", (uint32_t)s->prune_layer);
    if (s->lora_rank >= 0) es__gguf_set_u32(w, "edgespec.ss.lora_rank", (uint32_t)s->lora_rank);
    if (!s->no_embd) add_f32(w, "ss.stream_embd.weight", s->embd_type, s->embd_ne0, s->embd_ne1, 1, s->nan);
    if (s->prune_tensors) {
        int64_t r = s->prune_rank > 0 ? s->prune_rank : 4;
        add_f32(w, "ss.prune_down.weight", ES__DTYPE_BF16, hp.n_embd, r, 2, false);
        add_f32(w, "ss.prune_up.weight", ES__DTYPE_F32, r, hp.n_embd, 3, false);
    }
    if (s->lora_rank > 0 || s->lora_a_only || s->lora_tensor_rank > 0) {
        int64_t r = s->lora_tensor_rank > 0 ? s->lora_tensor_rank : s->lora_rank > 0 ? s->lora_rank : 2;
        char name[96];
        /* layer n_layer - 1 (the top MSA layer): q and ffn_down */
        es__ss_lora_name(name, sizeof name, hp.n_layer - 1, ES__SS_LORA_Q, 'a');
        add_f32(w, name, ES__DTYPE_F32, hp.n_embd, r, 4, false);
        if (!s->lora_a_only) {
            es__ss_lora_name(name, sizeof name, hp.n_layer - 1, ES__SS_LORA_Q, 'b');
            add_f32(w, name, ES__DTYPE_F32, r, hp.n_head * hp.head_dim, 5, false);
        }
        es__ss_lora_name(name, sizeof name, hp.n_layer - 1, ES__SS_LORA_DOWN, 'a');
        add_f32(w, name, ES__DTYPE_F16, hp.n_ff, r, 6, false);
        es__ss_lora_name(name, sizeof name, hp.n_layer - 1, ES__SS_LORA_DOWN, 'b');
        add_f32(w, name, ES__DTYPE_F16, r, hp.n_embd, 7, false);
    }
    if (s->extra_tensor) add_f32(w, "ss.mystery.weight", ES__DTYPE_F32, 4, 1, 8, false);
    uint8_t *data = NULL;
    uint64_t size = 0;
    es__err err;
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    es__gguf_writer_free(w);
    es_status st = es__ss_adapter_parse(&hp, data, size, "test.ss.gguf", NULL, out, &err);
    if (file) {
        *file = data;
        *file_size = size;
    } else {
        es__free(NULL, data);
    }
    return st;
}

static void test_good(void) {
    spec s = good();
    es__ss_adapter *ad = NULL;
    CHECK_OK(build_and_parse(&s, &ad, NULL, NULL));
    es__ss_adapter_free(ad);
    s.arch = "llama"; /* as tools/train writes it */
    ad = NULL;
    CHECK_OK(build_and_parse(&s, &ad, NULL, NULL));
    if (!ad) return;
    CHECK(ad->n_streams == 3 && ad->n_msa == 2 && ad->msa_start == hp.n_layer - 2 && ad->prune_layer == 4 &&
          ad->prune_rank == 4 && ad->lora_rank == 2);
    int bad = 0;
    for (int64_t i = 0; i < 3 * hp.n_embd; i++) bad += ad->stream_embd[i] != val(1, i);
    for (int64_t i = 0; i < 4 * hp.n_embd; i++) bad += ad->prune_down[i] != val(2, i) || ad->prune_up[i] != val(3, i);
    CHECKF(bad == 0, "%d values differ", bad);
    /* LoRA only where written: the top layer's q and ffn_down */
    const es__ss_lora *top = ad->lora + (size_t)(ad->n_msa - 1) * ES__SS_LORA_COUNT;
    CHECK(top[ES__SS_LORA_Q].a && top[ES__SS_LORA_Q].b && top[ES__SS_LORA_DOWN].a && !top[ES__SS_LORA_K].a);
    CHECK(top[ES__SS_LORA_Q].n_in == hp.n_embd && top[ES__SS_LORA_Q].n_out == hp.n_head * hp.head_dim);
    CHECK(top[ES__SS_LORA_DOWN].n_in == hp.n_ff && top[ES__SS_LORA_DOWN].n_out == hp.n_embd);
    CHECK(top[ES__SS_LORA_DOWN].b[5] == val(7, 5) && top[ES__SS_LORA_Q].a[7] == val(4, 7));
    for (int t = 0; t < ES__SS_LORA_COUNT; t++) CHECK(ad->lora[t].a == NULL); /* the lower MSA layer has none */
    es__ss_adapter_free(ad);

    /* minimal: no pruning, no LoRA, q8_0 stream embeddings; prune_layer defaults to the MSA start */
    s.prune_rank = -1;
    s.prune_layer = -1;
    s.lora_rank = -1;
    s.prune_tensors = false;
    s.embd_type = ES__DTYPE_Q8_0;
    s.n_streams = 1;
    s.embd_ne1 = 1;
    CHECK_OK(build_and_parse(&s, &ad, NULL, NULL));
    if (ad) {
        CHECK(ad->prune_rank == 0 && ad->lora_rank == 0 && !ad->prune_down && ad->prune_layer == ad->msa_start);
        CHECK(fabsf(ad->stream_embd[hp.n_embd - 1] - val(1, hp.n_embd - 1)) < 0.01f); /* q8_0 rounding */
        es__ss_adapter_free(ad);
    }
}

#define EXPECT_FAIL(mutate, status, needle)                                                        \
    do {                                                                                           \
        spec s = good();                                                                           \
        mutate;                                                                                    \
        es__ss_adapter *ad = (es__ss_adapter *)1;                                                  \
        CHECK_FAILS(build_and_parse(&s, &ad, NULL, NULL), status, needle);                         \
        CHECK(ad == NULL);                                                                         \
    } while (0)

static void test_bad(void) {
    EXPECT_FAIL(s.general_type = NULL, ES_ERR_MODEL, "general.type");
    EXPECT_FAIL(s.general_type = "model", ES_ERR_MODEL, "general.type = \"model\", expected \"adapter\"");
    EXPECT_FAIL(s.adapter_type = "lora", ES_ERR_MODEL, "expected \"speculative_streaming\"");
    /* an adapter for another architecture: general.architecture is optional, but checked */
    EXPECT_FAIL(s.arch = "gpt2", ES_ERR_MODEL, "general.architecture = \"gpt2\", expected \"llama\"");
    EXPECT_FAIL(s.arch = "", ES_ERR_MODEL, "general.architecture = \"\", expected \"llama\"");
    EXPECT_FAIL(s.n_streams = -1, ES_ERR_MODEL, "edgespec.ss.n_streams");
    EXPECT_FAIL(s.n_streams = 0, ES_ERR_MODEL, "edgespec.ss.n_streams = 0, expected 1..16");
    EXPECT_FAIL((s.n_streams = 17, s.embd_ne1 = 17), ES_ERR_MODEL, "n_streams = 17");
    EXPECT_FAIL(s.n_msa = 0, ES_ERR_MODEL, "n_msa_layers = 0");
    EXPECT_FAIL(s.n_msa = hp.n_layer + 1, ES_ERR_MODEL, "n_msa_layers = 7, expected 1..6");
    EXPECT_FAIL(s.prune_layer = -1, ES_ERR_MODEL, "edgespec.ss.prune_layer");
    EXPECT_FAIL(s.prune_layer = hp.n_layer + 1, ES_ERR_MODEL, "prune_layer = 7");
    EXPECT_FAIL(s.embd_ne1 = 2, ES_ERR_MODEL, "ss.stream_embd.weight (info at offset");
    EXPECT_FAIL(s.embd_ne0 = hp.n_embd + 1, ES_ERR_MODEL, "expected [64, 3] for the base model");
    EXPECT_FAIL(s.no_embd = true, ES_ERR_MODEL, "missing tensor ss.stream_embd.weight");
    EXPECT_FAIL(s.prune_tensors = false, ES_ERR_MODEL, "missing tensor ss.prune_down.weight");
    EXPECT_FAIL((s.prune_rank = 0, s.prune_layer = -1), ES_ERR_MODEL, "unexpected tensor ss.prune_down.weight");
    EXPECT_FAIL(s.lora_a_only = true, ES_ERR_MODEL, "without ss.blk.5.attn_q.lora_b");
    EXPECT_FAIL((s.lora_rank = 0, s.lora_tensor_rank = 2), ES_ERR_MODEL, "lora_rank is 0");
    EXPECT_FAIL(s.lora_tensor_rank = 3, ES_ERR_MODEL, "ss.blk.5.attn_q.lora_a (info at offset");
    EXPECT_FAIL(s.nan = true, ES_ERR_MODEL, "is nan");
    EXPECT_FAIL(s.extra_tensor = true, ES_ERR_MODEL, "unexpected tensor ss.mystery.weight");
    /* every truncation of a good file fails cleanly, naming the adapter */
    spec s = good();
    es__ss_adapter *ad = NULL;
    uint8_t *file = NULL;
    uint64_t size = 0;
    CHECK_OK(build_and_parse(&s, &ad, &file, &size));
    es__ss_adapter_free(ad);
    int crashes_or_passes = 0;
    es__err err;
    for (uint64_t cut = 0; cut < size; cut += (cut < 512 ? 1 : 97)) {
        es__ss_adapter *t = NULL;
        es_status st = es__ss_adapter_parse(&hp, file, cut, "cut.gguf", NULL, &t, &err);
        if (st == ES_OK || t || !strstr(err.msg, "SS adapter 'cut.gguf'")) crashes_or_passes++;
    }
    CHECKF(crashes_or_passes == 0, "%d truncated files accepted or unnamed", crashes_or_passes);
    /* through the public entry point: attach once, then refuse a second adapter */
    char path[64];
    snprintf(path, sizeof path, "test_adapter_%d.gguf", (int)getpid());
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(file, 1, size, f) == size);
    if (f) fclose(f);
    es__free(NULL, file);
    es_model *m = calloc(1, sizeof *m);
    m->hp = hp;
    m->path = "base.gguf";
    /* every architecture runs streams (lib/core/arch.h), but an adapter trained for another
     * one is refused, naming both */
    {
        spec sl = good();
        sl.arch = "llama";
        es__ss_adapter *al = NULL;
        uint8_t *fl = NULL;
        uint64_t nl = 0;
        CHECK_OK(build_and_parse(&sl, &al, &fl, &nl));
        es__ss_adapter_free(al);
        char pl[64];
        snprintf(pl, sizeof pl, "test_adapter_llama_%d.gguf", (int)getpid());
        FILE *fh = fopen(pl, "wb");
        CHECK(fh && fwrite(fl, 1, nl, fh) == nl);
        if (fh) fclose(fh);
        es__free(NULL, fl);
        m->hp.arch = es__arch_find("gemma2");
        CHECK_FAILS(es_model_load_adapter(m, pl), ES_ERR_MODEL, "general.architecture = \"llama\", expected \"gemma2\"");
        CHECK(m->ss == NULL);
        remove(pl);
    }
    m->hp.arch = es__arch_find("llama");
    CHECK_FAILS(es_model_load_adapter(m, "/nonexistent/x.ss.gguf"), ES_ERR_IO, "x.ss.gguf");
    CHECK(m->ss == NULL);
    CHECK_OK(es_model_load_adapter(m, path));
    CHECK(m->ss && m->ss->n_streams == 3);
    CHECK_FAILS(es_model_load_adapter(m, path), ES_ERR_INVALID_ARGUMENT, "already has an adapter");
    CHECK_FAILS(es_model_load_adapter(NULL, path), ES_ERR_INVALID_ARGUMENT, "model is NULL");
    es__ss_adapter_free(m->ss);
    free(m);
    remove(path);
}

int main(void) {
    hp.n_vocab = 100;
    hp.n_embd = 64;
    hp.n_layer = 6;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    hp.n_ff = 96;
    hp.n_rot = 16;
    test_good();
    test_bad();
    TEST_MAIN_END();
}
