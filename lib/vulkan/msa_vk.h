/* msa_vk.h: Speculative Streaming on the Vulkan backend (msa_vk.c): the early exit that prunes
 * draft trees (3.2.3) and the survivors' kept rows; the streams of every node riding in the forward's own dispatches as extra
 * rows of the MSA layers (Eq. 2, 3: the paper's one pass per step); and, for batches too large
 * for that, the stream pass of one tree node after the forward, recorded once per context and
 * replayed. forward.c lends its buffers through es__vk_ss_res and calls the hooks; the main
 * stream's results never change (its rows come first and the kernels are batch-invariant). */
#ifndef ES_VULKAN_MSA_VK_H
#define ES_VULKAN_MSA_VK_H

#include "model_vk.h"

struct es__vk_msa;

/* What the Speculative Streaming code borrows from a context (forward.c). Read bindings carry
 * texel views where the device reads through them (a write binding is the same without it). */
typedef struct es__vk_ss_res {
    es__vk_model *w;
    uint32_t nb, n_ctx;                   /* batch rows and cache slots                      */
    uint32_t fused_rows;                  /* the most rows n (1 + g) of a forward of n tokens
                                             whose g streams each ride in its dispatches (the
                                             device's policy, policy.h); larger batches get the
                                             stream pass                                     */
    uint32_t fused_extra;                 /* stream rows the forward's buffers hold after its
                                             nb: min(fused_rows, nb γ)                       */
    uint32_t E32, QKV32, Q32, F32, V32;   /* padded row widths, as forward.c uses them        */
    es__vk_bind x, xn, qkv, attn, h;      /* the forward's row buffers [nb + fused_extra][..] */
    es__vk_bind step, rope, vecs;         /* step data, RoPE tables, norm vectors            */
    es__vk_buf *step_buf;                 /* the host-mapped step data                       */
    const es__vk_buf *logits;             /* the forward's host-mapped logits rows           */
    const es__vk_bind *k, *v;             /* [n_layer] each layer's cache                    */
    uint32_t bias_floats;                 /* per layer Q, K, V biases after the RoPE tables in
                                             rope (qwen2; 0: none), as forward.c stores them
                                             (model_vk.h es__vk_bias_off)                    */
} es__vk_ss_res;

/* Hook flags of a forward command buffer; with FUSED, the streams per node are in bits 8+.
 * KEEP_X: Eq. 3's M is kept at the first MSA layer for the stream pass; X0_KEPT: an earlier
 * submission of the call kept it (pruning's compaction moves those rows too); FUSED: the
 * streams ride in the forward's rows. */
enum { ES__VK_SS_KEEP_X = 1, ES__VK_SS_X0_KEPT = 2, ES__VK_SS_FUSED = 4 };
#define ES__VK_SS_FUSED_G(flags) ((flags) >> 8)

/* The projections of a layer, in the order of the stream LoRA's fused targets. */
enum { ES__VK_SS_QKV, ES__VK_SS_WO, ES__VK_SS_GATEUP, ES__VK_SS_DOWN };

es_status es__vk_msa_create(es_context *ctx, const es__vk_ss_res *res, struct es__vk_msa **out);
void es__vk_msa_free(struct es__vk_msa *m);

/* The hook flags of a command buffer running layers [lo, hi) for n tokens with g streams each
 * (0 for a plain one; m may be NULL). */
uint32_t es__vk_msa_flags(const struct es__vk_msa *m, uint32_t n, uint32_t g, uint32_t lo, uint32_t hi);
/* Records what layer l's input is needed for (flags of the command buffer), n batch rows. */
es_status es__vk_msa_rec_layer(struct es__vk_msa *m, es__vk_rec *r, int32_t l, uint32_t n, uint32_t flags);
/* Pruning: records the early exit of the n rows listed in the step's EXIT_ROWS (into the
 * readback buffer es__vk_msa_decide reads), and the compaction of the kept rows of M for n
 * survivors listed in KEEP (when flags say an earlier submission kept them). */
es_status es__vk_msa_rec_exit(struct es__vk_msa *m, es__vk_rec *r, uint32_t n);
es_status es__vk_msa_rec_compact(struct es__vk_msa *m, es__vk_rec *r, uint32_t n, uint32_t flags);
/* After the early exit's submission: the core's decision for f's listed parents (f->pruned). */
es_status es__vk_msa_decide(struct es__vk_msa *m, const es__fwd *f, const int32_t *parents, int32_t n_parents);
/* Fused streams (flags with ES__VK_SS_FUSED): the stream rows layer l adds after the n_main
 * tokens' rows (0 below the MSA layers). */
uint32_t es__vk_msa_fused_rows(const struct es__vk_msa *m, int32_t l, uint32_t n_main, uint32_t flags);
/* Sets the fused-rows cap (res.fused_rows) to rows, at most the cap the context was made with. */
void es__vk_msa_set_fused_cap(struct es__vk_msa *m, uint32_t rows);
/* Fused streams at MSA layer l, before projection proj of all n_main + n_main g rows: sets the
 * stream-row fields of pc and, when the projection has a stream LoRA, records R = A X of the
 * stream rows and returns in *sets the projection's descriptor sets with the LoRA (to record with
 * the mul_mat_lora pipeline); else *sets = NULL and the forward's own sets serve. */
es_status es__vk_msa_rec_proj(struct es__vk_msa *m, es__vk_rec *r, int32_t l, int proj, uint32_t n_main, uint32_t g,
                              es__pc_mul_mat *pc, const VkDescriptorSet **sets);
/* Fused streams at MSA layer l, after the main tokens' attention: the stream rows' (Eq. 2). */
void es__vk_msa_rec_attn(struct es__vk_msa *m, es__vk_rec *r, int32_t l, uint32_t n_main, uint32_t g);
/* After the forward's last submission (f: the survivors): what the stream pass needs to know. */
void es__vk_msa_after_forward(struct es__vk_msa *m, const es__fwd *f, uint32_t flags);
/* The logits [n_streams][n_vocab] of survivor i's streams in the last forward call. */
es_status es__vk_msa_stream_logits(struct es__vk_msa *m, int32_t i, int32_t g, float *out);

#endif
