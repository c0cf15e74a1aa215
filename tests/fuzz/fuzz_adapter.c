/* fuzz_adapter.c: fuzz target for the Speculative Streaming adapter loader (es__ss_adapter_parse, what
 * es_model_load_adapter runs on a file's bytes) against the tiny model of fuzz_model.h. Any input
 * either loads, with every key in its documented range and every value finite, or fails with a
 * status meant for files and a message naming the adapter; never a crash, hang or leak. An
 * adapter that loads is attached and used: a forward call of a small token tree with all its
 * streams (and tree pruning when it has the tensors), every surviving node's stream logits, a
 * commit, so a shape or range the loader let through cannot reach the kernels unchecked.
 * Seeds: corpus/adapter (make_fuzz_seeds.sh). Built with libFuzzer (-Dfuzzer=true) and with the
 * deterministic driver.c (suite 'fuzz'). */
#include "adapter.h"
#include "edgespec.h"
#include "forward_api.h"
#include "fuzz_model.h"

#include <math.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_adapter: %s\n", what);
    abort();
}

/* The loaded adapter attached to the (otherwise immutable) model for one forward call. */
static void use(es_model *m, es__ss_adapter *ad) {
    const es__hparams *hp = &m->hp;
    if (ad->n_streams < 1 || ad->n_streams > ES_SPEC_MAX_DEPTH || ad->n_msa < 1 || ad->n_msa > hp->n_layer ||
        ad->msa_start != hp->n_layer - ad->n_msa || ad->prune_rank < 0 || ad->prune_rank > hp->n_embd ||
        ad->prune_layer < 0 || ad->prune_layer > hp->n_layer || ad->lora_rank < 0 || ad->lora_rank > hp->n_embd)
        fail("a key outside its documented range was accepted");
    for (int32_t i = 0; i < ad->n_streams * hp->n_embd; i++)
        if (!isfinite(ad->stream_embd[i])) fail("a non-finite stream embedding was accepted");
    m->ss = ad;
    es_context_params cp = es_context_default_params();
    cp.n_ctx = 32;
    cp.n_batch = 8;
    cp.backend = fuzz_backend();
    es_context *ctx = NULL;
    if (es_context_create(m, &cp, &ctx) != ES_OK) fail(es_last_error());
    /* root, two children, a grandchild: 0 -> {1 -> 2, 3} */
    const int32_t parent[4] = {-1, 0, 1, 0}, tokens[4] = {1, 40, 41, 42};
    int32_t order[4], pos[4], ds[4], de[4];
    if (es_tree_flatten(parent, 4, 0, order, pos, ds, de) != ES_OK) fail(es_last_error());
    int32_t toks[4];
    uint8_t want[4] = {1, 1, 1, 1};
    for (int i = 0; i < 4; i++) toks[i] = tokens[order[i]];
    const es_batch b = {4, toks, pos, ds, de, want};
    es__caps caps;
    es__context_caps(ctx, &caps);
    const es__call call = {ad->n_streams, caps.can_prune ? 0.5f : 0.0f};
    es_status s = es__forward(ctx, &b, &call);
    if (s != ES_OK) fail(es_context_errmsg(ctx));
    for (int32_t i = 0; i < 4; i++) {
        if (es__pruned(ctx, i)) continue;
        const float *l = NULL;
        if (es_logits(ctx, i, &l) != ES_OK || es__stream_logits(ctx, i, 0, &l) != ES_OK) fail(es_context_errmsg(ctx));
    }
    const int32_t keep[1] = {0};
    if (es_commit(ctx, keep, 1) != ES_OK) fail(es_context_errmsg(ctx));
    es_context_free(ctx);
    m->ss = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    es_model *m = fuzz_model();
    es__ss_adapter *ad = NULL;
    es__err err = {ES_OK, ""};
    es_status s = es__ss_adapter_parse(&m->hp, data, size, "fuzz.ss.gguf", NULL, &ad, &err);
    if (s == ES_OK) {
        if (!ad) fail("ES_OK without an adapter");
        use(m, ad);
        es__ss_adapter_free(ad);
        return 0;
    }
    if (ad) fail("a failed load left an adapter");
    if (s != ES_ERR_FORMAT && s != ES_ERR_UNSUPPORTED && s != ES_ERR_MODEL && s != ES_ERR_OUT_OF_MEMORY)
        fail("a status not meant for files");
    if (!strstr(err.msg, "SS adapter 'fuzz.ss.gguf'")) fail("the message does not name the adapter");
    return 0;
}
