/* backend_vk.c: the Vulkan backend's vtable: device setup on backend creation, and the model
 * upload / context / forward entry points, which model_vk.c and forward.c implement. */
#include "backend_vk.h"

#include <stdio.h>

static es_status vk_init(es_backend *b, const es_backend_params *p) {
    es__vk_backend *vb = es__calloc(b->alloc, 1, sizeof *vb);
    ES_RETURN_IF(!vb, &b->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    b->impl = vb;
    es_status s = es__vk_dev_create(&vb->dev, p, b);
    if (s != ES_OK) {
        es__vk_dev_destroy(&vb->dev);
        es__free(b->alloc, vb);
        b->impl = NULL;
        return s;
    }
    snprintf(b->name, sizeof b->name, "%s", vb->dev.phys.props.deviceName);
    return ES_OK;
}

static void vk_destroy(es_backend *b) {
    es__vk_backend *vb = b->impl;
    if (!vb) return;
    es__vk_dev_destroy(&vb->dev);
    es__free(b->alloc, vb);
    b->impl = NULL;
}

static es_status vk_model_upload(es_backend *b, const es_model *m, void **weights) {
    (void)m;
    *weights = NULL;
    return es__fail(&b->err, ES_ERR_UNSUPPORTED, "vulkan backend: model upload lands with the forward pass");
}

static void vk_model_release(es_backend *b, void *weights) {
    (void)b;
    (void)weights;
}

static es_status vk_ctx_init(es_context *ctx) {
    return es__fail(&ctx->backend->err, ES_ERR_UNSUPPORTED, "vulkan backend: contexts land with the forward pass");
}

static void vk_ctx_destroy(es_context *ctx) {
    (void)ctx;
}

static es_status vk_forward(es_context *ctx, const es__fwd *f) {
    (void)f;
    return es__fail(&ctx->backend->err, ES_ERR_UNSUPPORTED, "vulkan backend: forward lands next");
}

static es_status vk_kv_compact(es_context *ctx, const int32_t *keep, int32_t n_keep) {
    (void)keep;
    (void)n_keep;
    return es__fail(&ctx->backend->err, ES_ERR_UNSUPPORTED, "vulkan backend: forward lands next");
}

static const es__backend_vtbl vk_vtbl = {
    "vulkan", vk_init, vk_destroy, vk_model_upload, vk_model_release,
    vk_ctx_init, vk_ctx_destroy, vk_forward, vk_kv_compact,
};

const es__backend_vtbl *const es__vulkan_backend_ptr = &vk_vtbl;
