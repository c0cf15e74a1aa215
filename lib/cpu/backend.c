/* backend.c: the CPU backend's vtable. Placeholder entry points until the CPU forward lands;
 * every call fails cleanly so nothing pretends to compute. */
#include "backend.h"

#include <stdio.h>

static es_status cpu_init(es_backend *b, const es_backend_params *p) {
    (void)p;
    snprintf(b->name, sizeof b->name, "cpu");
    return ES_OK;
}
static void cpu_destroy(es_backend *b) {
    (void)b;
}
static es_status cpu_model_upload(es_backend *b, const es_model *m, void **weights) {
    (void)m;
    *weights = NULL;
    return es__fail(&b->err, ES_ERR_UNSUPPORTED, "cpu backend: forward pass not built yet");
}
static void cpu_model_release(es_backend *b, void *weights) {
    (void)b;
    (void)weights;
}
static es_status cpu_ctx_init(es_context *ctx) {
    return es__fail(&ctx->backend->err, ES_ERR_UNSUPPORTED, "cpu backend: forward pass not built yet");
}
static void cpu_ctx_destroy(es_context *ctx) {
    (void)ctx;
}
static es_status cpu_forward(es_context *ctx, const es__fwd *f) {
    (void)f;
    return es__fail(&ctx->backend->err, ES_ERR_UNSUPPORTED, "cpu backend: forward pass not built yet");
}
static es_status cpu_kv_compact(es_context *ctx, const int32_t *keep, int32_t n_keep) {
    (void)keep;
    (void)n_keep;
    return es__fail(&ctx->backend->err, ES_ERR_UNSUPPORTED, "cpu backend: forward pass not built yet");
}

const es__backend_vtbl es__cpu_backend = {
    "cpu", cpu_init, cpu_destroy, cpu_model_upload, cpu_model_release,
    cpu_ctx_init, cpu_ctx_destroy, cpu_forward, cpu_kv_compact,
};
