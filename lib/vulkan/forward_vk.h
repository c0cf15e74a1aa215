/* forward_vk.h: what ALSpec's two-device token (alspec_vk.c) records of a decode token through
 * the forward pass's own recorders (forward.c), without seeing its context. */
#ifndef ES_VULKAN_FORWARD_VK_H
#define ES_VULKAN_FORWARD_VK_H

#include "backend.h"
#include "forward_api.h"
#include "vk.h"

/* A context's buffers that the token's copies and flags touch. */
typedef struct es__vk_fwd_io {
    es__vk_dev *d;
    es__vk_bind x, attn, spec;     /* the token's residual, attention output and speculation rows */
    es__vk_buf *step, *verd, *logits;
    uint32_t n_ctx;                /* slots per head in each layer's cache: (n_head_kv, n_ctx, hd) */
} es__vk_fwd_io;

/* Writes f's step (positions, grids) for the recordings below (flushed by the caller). */
void es__vk_fwd_step(es_context *ctx, const es__fwd *f);
/* ENTER(layer) of es__alspec_part: the embedding (layer -1) or layer's post-attention ops, then
 * the next layer's pre-attention ops or the output head. */
es_status es__vk_fwd_rec_enter(es_context *ctx, es__vk_rec *r, int32_t layer);
/* Layer's speculative attention at n_keys keys: the speculation part (spec) or the rest. */
void es__vk_fwd_rec_attn_part(es_context *ctx, es__vk_rec *r, int32_t layer, int32_t chunk, int32_t n_keys, bool spec);
es__vk_fwd_io es__vk_fwd_io_of(es_context *ctx);
/* Layer's K (which 0) or V (1) cache. */
es__vk_bind es__vk_fwd_cache(es_context *ctx, int32_t layer, int which);

/* alspec_vk.c: the backend's es__dev_pair (backend.h's pair_create, pair_free, pair_forward). */
es_status es__vk_pair_create(es_context *a, es_context *b, int32_t chunk, void **out);
void es__vk_pair_free(void *pair);
es_status es__vk_pair_forward(void *pair, const es__fwd *fa, const es__fwd *fb, const es__alspec_call *call,
                              float *logits);

#endif /* ES_VULKAN_FORWARD_VK_H */
