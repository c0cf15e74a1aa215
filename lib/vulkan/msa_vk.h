/* msa_vk.h: Speculative Streaming on the Vulkan backend (msa_vk.c): the early exit that prunes
 * draft trees (3.2.3) and the hidden states kept for the streams, recorded into the forward's
 * command buffer at the right layers, and the stream pass of one tree node (Eq. 2, 3) with its
 * logits, recorded once per context and replayed. forward.c lends its buffers through
 * es__vk_ss_res and calls the hooks; the main stream's dispatches are not changed. */
#ifndef ES_VULKAN_MSA_VK_H
#define ES_VULKAN_MSA_VK_H

#include "model_vk.h"

struct es__vk_msa;

/* What the stream pass borrows from a context (forward.c). Read bindings carry texel views
 * where the device reads through them. */
typedef struct es__vk_ss_res {
    es__vk_model *w;
    uint32_t nb, n_ctx;                   /* batch rows and cache slots                      */
    uint32_t E32, QKV32, Q32, F32, V32;   /* padded row widths, as forward.c uses them        */
    es__vk_bind x;                        /* the residual rows [nb][E32]                     */
    es__vk_bind step, rope, vecs;         /* step data, RoPE table, norm vectors             */
    es__vk_buf *step_buf;                 /* the host-mapped step data                       */
    const es__vk_bind *k, *v;             /* [n_layer] each layer's cache                    */
} es__vk_ss_res;

/* Hook flags of a forward command buffer. */
enum { ES__VK_SS_KEEP_X = 1, ES__VK_SS_EARLY_EXIT = 2 };

es_status es__vk_msa_create(es_context *ctx, const es__vk_ss_res *res, struct es__vk_msa **out);
void es__vk_msa_free(struct es__vk_msa *m);

/* The hook flags a forward call needs (0 for a plain one). */
uint32_t es__vk_msa_flags(const struct es__vk_msa *m, const es__fwd *f);
/* Records what layer l's input is needed for (flags of the command buffer), n batch rows. */
es_status es__vk_msa_rec_layer(struct es__vk_msa *m, es__vk_rec *r, int32_t l, uint32_t n, uint32_t flags);
/* After the forward's submission: the pruning decisions (f->pruned) from the early exit, and what
 * the stream pass needs to know about the call. */
es_status es__vk_msa_after_forward(struct es__vk_msa *m, const es__fwd *f, uint32_t flags);
/* The logits [n_streams][n_vocab] of batch token i's streams in the last forward call. */
es_status es__vk_msa_stream_logits(struct es__vk_msa *m, int32_t i, int32_t g, float *out);

#endif
