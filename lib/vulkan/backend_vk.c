/* backend_vk.c: the Vulkan backend's vtable: device setup on backend creation; the model upload,
 * context and forward entry points live in model_vk.c and forward.c. */
#include "backend_vk.h"
#include "forward_vk.h"
#include "model_vk.h"

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
    es__vk_model *w = NULL;
    ES_TRY(es__vk_model_upload(b, m, &w));
    *weights = w;
    return ES_OK;
}

static void vk_model_release(es_backend *b, void *weights) {
    es__vk_model_free(b, weights);
}

static const es__backend_vtbl vk_vtbl = {
    .name = "vulkan",
    .init = vk_init,
    .destroy = vk_destroy,
    .model_upload = vk_model_upload,
    .model_release = vk_model_release,
    .ctx_init = es__vk_ctx_init,
    .ctx_destroy = es__vk_ctx_destroy,
    .forward = es__vk_forward,
    .kv_compact = es__vk_kv_compact,
    .stream_logits = es__vk_stream_logits,
    .kv_shift = es__vk_kv_shift,
    .kv_io = es__vk_kv_io,
    .alspec_tile = ES__ATTN_SPLIT, /* ALSpec's chunks are whole splits of attn.comp */
    .kv_slot = es__vk_kv_slot,
    .pair_create = es__vk_pair_create,
    .pair_free = es__vk_pair_free,
    .pair_forward = es__vk_pair_forward,
};

const es__backend_vtbl *const es__vulkan_backend_ptr = &vk_vtbl;
