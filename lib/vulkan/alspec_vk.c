/* alspec_vk.c: ALSpec's two-device token with the gating on the devices (forward_api.h's
 * es__dev_pair; ../shared/papers/alspec-attention-level-speculation.txt, Algorithm 2 with
 * priority gating). Per token the host records the same op sequence on both devices, submits
 * all of it ahead and waits once at the end. Which device is a layer's sender, whether its
 * check missed, and so which dispatches run, the devices decide: alspec_gate.comp writes the
 * flags, conditional rendering reads them. One batch a layer on each device:
 *   [receiver] the sender's speculation and residual from the link window, the layer's
 *              post-attention ops and the next layer's pre-attention ops on them, then (a hit
 *              would make it the next sender) the next layer's speculation, published;
 *   [sender]   the rest of the layer's attention and the check, its verdict published; on a
 *              miss the same ops on the exact output, and the next layer's speculation.
 * Between batches the link's relay exchanges what each side published (host memory imported into
 * both devices, or one memcpy): all the host does per layer is forward timeline values, it
 * decides nothing. So the receiver's work, its next speculation included, runs beside the
 * sender's attention, and a hit hands the next layer to a device whose speculation is ready. At
 * the end each device publishes its new KV slots and takes, for every layer it did not send,
 * the sender's: a receiver's discarded slot is overwritten before anything reads it. Lavapipe has
 * no external semaphores, so the relay is a host thread; with them the same sequence would need
 * none. */
#include "backend_vk.h"
#include "forward_api.h"
#include "forward_vk.h"
#include "kernels.h"
#include "ops.h"

#include <string.h>

/* What a relay job waits for a device: far above a token's layer on any device here. */
#define PAIR_TIMEOUT_NS 30000000000ull

typedef struct side {
    es_context *ctx;
    es__vk_fwd_io io;
    es__vk_buf g;                       /* the gating words (alspec_gate.comp)                 */
    VkDescriptorPool pool;
    VkDescriptorSet s_gate, s_spec_out, s_x_out, s_spec_in, s_x_in;
    VkDescriptorSet *s_kv_out, *s_kv_in; /* [n_layer][K, V]                                     */
    VkCommandBuffer *cbs;               /* [2 n_layer + 2], recorded per token                  */
    es__vk_pipeline *p_copy, *p_gate;
} side;

typedef struct vk_pair {
    side s[2];
    es__vk_link link;
    es__vk_relayer relay;
    const es_allocator *alloc;
    uint32_t L, chunk, qd, embd, kvd, hd, n_head_kv;
    uint32_t w_rec, w_kv;               /* window layout, floats: records, KV slots             */
    uint64_t tl;                        /* the link's timeline values used so far              */
} vk_pair;

static uint32_t up4(uint32_t x) {
    return (x + 3u) & ~3u;
}

/* Window offsets (floats). Side k's record j (0..L): the speculation of layer j and the residual
 * entering it, then the verdict of layer j - 1 (a word), so that what one exchange carries is
 * one record. Side k's copy of layer l's K (w 0) or V (1) slot after the records. */
static uint32_t w_rec(const vk_pair *p, uint32_t k, uint32_t j) {
    return (k * (p->L + 1) + j) * p->w_rec;
}
static uint32_t rec_x(const vk_pair *p) {
    return up4(p->qd);
}
static uint32_t rec_flag(const vk_pair *p) {
    return up4(p->qd) + up4(p->embd);
}
static uint32_t w_kv(const vk_pair *p, uint32_t k, uint32_t l, uint32_t w) {
    return p->w_kv + ((k * p->L + l) * 2u + w) * p->kvd;
}

/* Batches per device and token: one before the layers, one a layer, two for the KV. */
static uint32_t n_batches(const vk_pair *p) {
    return p->L + 3;
}

static es__vk_bind win_bind(const vk_pair *p, int k) {
    return (es__vk_bind){p->link.win[k].buf, 0, p->link.size, VK_NULL_HANDLE};
}

static es__vk_bind buf_bind(const es__vk_buf *b) {
    return (es__vk_bind){b->buf, 0, b->size, VK_NULL_HANDLE};
}

static es_status copy_set(side *sd, es__vk_bind src, es__vk_bind dst, VkDescriptorSet *out) {
    const es__vk_bind b[2] = {src, dst};
    return es__vk_set_create(sd->io.d, sd->pool, sd->p_copy, b, out);
}

static es_status side_setup(vk_pair *p, int k) {
    side *sd = &p->s[k];
    es__vk_dev *d = sd->io.d;
    const uint32_t sets = 5 + 4 * p->L;
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3 * sets};
    VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = sets;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &ps;
    ES_VK_TRY(d, vkCreateDescriptorPool(d->dev, &pi, NULL, &sd->pool));
    ES_TRY(es__vk_simple_pipe(d, "alspec_copy", false, false, &sd->p_copy));
    ES_TRY(es__vk_simple_pipe(d, "alspec_gate", false, false, &sd->p_gate));
    ES_TRY(es__vk_buf_create(d, 4 * (2 * (VkDeviceSize)p->L + 4), ES__VK_MEM_READBACK, "ALSpec's gating flags", &sd->g));
    const es__vk_bind gb[3] = {buf_bind(sd->io.verd), buf_bind(&sd->g), win_bind(p, k)};
    ES_TRY(es__vk_set_create(d, sd->pool, sd->p_gate, gb, &sd->s_gate));
    const es__vk_bind win = win_bind(p, k);
    ES_TRY(copy_set(sd, sd->io.spec, win, &sd->s_spec_out));
    ES_TRY(copy_set(sd, sd->io.x, win, &sd->s_x_out));
    ES_TRY(copy_set(sd, win, sd->io.attn, &sd->s_spec_in));
    ES_TRY(copy_set(sd, win, sd->io.x, &sd->s_x_in));
    sd->s_kv_out = es__calloc(p->alloc, 2 * (size_t)p->L, sizeof *sd->s_kv_out);
    sd->s_kv_in = es__calloc(p->alloc, 2 * (size_t)p->L, sizeof *sd->s_kv_in);
    sd->cbs = es__calloc(p->alloc, n_batches(p), sizeof *sd->cbs);
    ES_RETURN_IF(!sd->s_kv_out || !sd->s_kv_in || !sd->cbs, d->err, ES_ERR_OUT_OF_MEMORY, "alspec pair: out of memory");
    for (uint32_t l = 0; l < p->L; l++)
        for (int w = 0; w < 2; w++) {
            const es__vk_bind cache = es__vk_fwd_cache(sd->ctx, (int32_t)l, w);
            ES_TRY(copy_set(sd, cache, win, &sd->s_kv_out[2 * l + (uint32_t)w]));
            ES_TRY(copy_set(sd, win, cache, &sd->s_kv_in[2 * l + (uint32_t)w]));
        }
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = d->pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = n_batches(p);
    ES_VK_TRY(d, vkAllocateCommandBuffers(d->dev, &ai, sd->cbs));
    return ES_OK;
}

void es__vk_pair_free(void *impl) {
    vk_pair *p = impl;
    if (!p) return;
    if (p->relay.running) es__vk_relayer_stop(&p->relay);
    es__vk_link_destroy(&p->link); /* waits for both devices */
    for (int k = 0; k < 2; k++) {
        side *sd = &p->s[k];
        es__vk_dev *d = sd->io.d;
        if (!d) continue;
        if (sd->cbs && sd->cbs[0]) vkFreeCommandBuffers(d->dev, d->pool, n_batches(p), sd->cbs);
        if (sd->pool) vkDestroyDescriptorPool(d->dev, sd->pool, NULL);
        es__vk_buf_destroy(d, &sd->g);
        es__free(p->alloc, sd->s_kv_out);
        es__free(p->alloc, sd->s_kv_in);
        es__free(p->alloc, sd->cbs);
    }
    es__free(p->alloc, p);
}

es_status es__vk_pair_create(es_context *a, es_context *b, int32_t chunk, void **out) {
    *out = NULL;
    es__vk_dev *da = es__vk_fwd_io_of(a).d, *db = es__vk_fwd_io_of(b).d;
    ES_RETURN_IF(!da->cond_begin || !db->cond_begin || !da->timeline || !db->timeline, da->err, ES_ERR_UNSUPPORTED,
                 "alspec pair: device-side gating needs conditional rendering and timeline semaphores on both "
                 "devices (VK_EXT_conditional_rendering, VK_KHR_timeline_semaphore)");
    const es__hparams *hp = &a->model->hp;
    vk_pair *p = es__calloc(a->alloc, 1, sizeof *p);
    ES_RETURN_IF(!p, da->err, ES_ERR_OUT_OF_MEMORY, "alspec pair: out of memory");
    p->alloc = a->alloc;
    p->L = (uint32_t)hp->n_layer;
    p->chunk = (uint32_t)chunk;
    p->hd = (uint32_t)hp->head_dim;
    p->n_head_kv = (uint32_t)hp->n_head_kv;
    p->qd = (uint32_t)(hp->n_head * hp->head_dim);
    p->embd = (uint32_t)hp->n_embd;
    p->kvd = p->n_head_kv * p->hd;
    p->w_rec = up4(p->qd) + up4(p->embd) + 4;
    p->w_kv = 2 * (p->L + 1) * p->w_rec;
    const VkDeviceSize bytes = 4 * ((VkDeviceSize)p->w_kv + 4 * (VkDeviceSize)p->L * p->kvd);
    es_status s = es__vk_link_create(da, db, bytes, true, &p->link);
    if (s == ES_OK) s = es__vk_link_sync_create(&p->link);
    if (s == ES_OK) s = es__vk_relayer_start(&p->relay, &p->link, PAIR_TIMEOUT_NS);
    for (int k = 0; k < 2 && s == ES_OK; k++) {
        p->s[k].ctx = k ? b : a;
        p->s[k].io = es__vk_fwd_io_of(p->s[k].ctx);
        s = side_setup(p, k);
    }
    if (s != ES_OK) {
        es__vk_pair_free(p);
        return s;
    }
    es__logf(da->log, ES_LOG_INFO,
             "alspec pair: gating on the devices (conditional rendering), link window %s, %.1f KiB",
             p->link.mode == ES__VK_LINK_SHARED ? "in host memory both devices import" : "copied by the relay",
             (double)bytes / 1024.0);
    *out = p;
    return ES_OK;
}

/* ---- one token */

/* What the relay published (host writes, or the other device's through imported memory) made
 * visible to this batch's shaders. */
static void from_host(es__vk_rec *r) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_HOST_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(r->cb, VK_PIPELINE_STAGE_HOST_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0,
                         NULL);
}

static void rec_copy(es__vk_rec *r, const side *sd, VkDescriptorSet set, uint32_t n, uint32_t rows, uint32_t src_off,
                     uint32_t src_stride, uint32_t dst_off, uint32_t dst_stride) {
    const es__pc_alspec_copy pc = {n, rows, src_off, src_stride, dst_off, dst_stride};
    es__vk_rec_dispatch(r, "alspec_copy", sd->p_copy, set, &pc, (n + 255) / 256, rows, 1);
}

static void rec_gate(es__vk_rec *r, const vk_pair *p, const side *sd, int k, uint32_t mode, uint32_t l) {
    const es__pc_alspec_gate pc = {mode, l, (uint32_t)k, p->L, rec_flag(p), p->w_rec};
    es__vk_rec_dispatch(r, "alspec_gate", sd->p_gate, sd->s_gate, &pc, 1, 1, 1);
}

/* Gating words: SND[l] at l, MISS[l] at L + 1 + l. */
static VkDeviceSize g_snd(uint32_t l) {
    return 4 * (VkDeviceSize)l;
}
static VkDeviceSize g_miss(const vk_pair *p, uint32_t l) {
    return 4 * ((VkDeviceSize)p->L + 1 + l);
}

/* Layer l's speculation on side k, published in its record l (the gate is the caller's). */
static void rec_spec(vk_pair *p, int k, uint32_t l, int32_t n_keys, es__vk_rec *r) {
    side *sd = &p->s[k];
    es__vk_fwd_rec_attn_part(sd->ctx, r, (int32_t)l, (int32_t)p->chunk, n_keys, true);
    rec_copy(r, sd, sd->s_spec_out, p->qd, 1, 0, 0, w_rec(p, (uint32_t)k, l), 0);
    rec_copy(r, sd, sd->s_x_out, p->embd, 1, 0, 0, w_rec(p, (uint32_t)k, l) + rec_x(p), 0);
}

/* Before the layers, on the first sender: the embedding, layer 0's pre-attention ops and its
 * speculation. */
static es_status rec_first(vk_pair *p, int k, int32_t n_keys, es__vk_rec *r) {
    side *sd = &p->s[k];
    es__vk_rec_gate_begin(r, &sd->g, g_snd(0), false);
    ES_TRY(es__vk_fwd_rec_enter(sd->ctx, r, -1));
    rec_spec(p, k, 0, n_keys, r);
    es__vk_rec_gate_end(r);
    return ES_OK;
}

/* Layer l on side k: the receiver's work on the speculation and its next speculation; the
 * sender's check and, on a miss, its work on the exact output and the next speculation. */
static es_status rec_layer(vk_pair *p, int k, uint32_t l, int32_t n_keys, es__vk_rec *r) {
    side *sd = &p->s[k];
    const uint32_t other = 1u - (uint32_t)k;
    const bool next = l + 1 < p->L;
    from_host(r);
    if (l > 0) rec_gate(r, p, sd, k, ES_ALSPEC_GATE_ADVANCE, l - 1);
    es__vk_rec_gate_begin(r, &sd->g, g_snd(l), true);
    rec_copy(r, sd, sd->s_spec_in, p->qd, 1, w_rec(p, other, l), 0, 0, 0);
    rec_copy(r, sd, sd->s_x_in, p->embd, 1, w_rec(p, other, l) + rec_x(p), 0, 0, 0);
    ES_TRY(es__vk_fwd_rec_enter(sd->ctx, r, (int32_t)l));
    if (next) rec_spec(p, k, l + 1, n_keys, r);
    es__vk_rec_gate_end(r);
    es__vk_rec_gate_begin(r, &sd->g, g_snd(l), false);
    es__vk_fwd_rec_attn_part(sd->ctx, r, (int32_t)l, (int32_t)p->chunk, n_keys, false);
    es__vk_rec_gate_end(r);
    rec_gate(r, p, sd, k, ES_ALSPEC_GATE_CHECK, l);
    es__vk_rec_gate_begin(r, &sd->g, g_miss(p, l), false);
    ES_TRY(es__vk_fwd_rec_enter(sd->ctx, r, (int32_t)l));
    if (next) rec_spec(p, k, l + 1, n_keys, r);
    es__vk_rec_gate_end(r);
    return ES_OK;
}

/* The token's end on side k: publish (out) every layer's new KV slot, or take (in) the sender's
 * slot of every layer this side did not send. */
static void rec_kv(vk_pair *p, int k, uint32_t pos, bool in, es__vk_rec *r) {
    side *sd = &p->s[k];
    const uint32_t other = 1u - (uint32_t)k, slot = pos * p->hd, stride = sd->io.n_ctx * p->hd;
    from_host(r);
    if (!in) rec_gate(r, p, sd, k, ES_ALSPEC_GATE_ADVANCE, p->L - 1);
    for (uint32_t l = 0; l < p->L; l++) {
        if (in) es__vk_rec_gate_begin(r, &sd->g, g_snd(l), true);
        for (uint32_t w = 0; w < 2; w++) {
            if (in)
                rec_copy(r, sd, sd->s_kv_in[2 * l + w], p->hd, p->n_head_kv, w_kv(p, other, l, w), p->hd, slot, stride);
            else
                rec_copy(r, sd, sd->s_kv_out[2 * l + w], p->hd, p->n_head_kv, slot, stride, w_kv(p, (uint32_t)k, l, w),
                         p->hd);
        }
        if (in) es__vk_rec_gate_end(r);
    }
}

/* Records batch i of side k (0: before the layers; 1 + l: layer l; L + 1, L + 2: the KV's). */
static es_status record(vk_pair *p, int k, uint32_t i, int32_t n_past) {
    side *sd = &p->s[k];
    es__vk_dev *d = sd->io.d;
    es__vk_rec r;
    ES_VK_TRY(d, vkResetCommandBuffer(sd->cbs[i], 0));
    es__vk_rec_begin(&r, d, sd->cbs[i], VK_NULL_HANDLE, 0, NULL);
    if (i == 0) ES_TRY(rec_first(p, k, n_past + 1, &r));
    else if (i <= p->L) ES_TRY(rec_layer(p, k, i - 1, n_past + 1, &r));
    else rec_kv(p, k, (uint32_t)n_past, i == p->L + 2, &r);
    ES_TRY(es__vk_rec_end(&r));
    d->stats->n_dispatches += r.n_dispatch;
    return ES_OK;
}

/* The token's inputs on side k: its step, each layer's lambda and forced miss, the first sender. */
static es_status inputs(vk_pair *p, int k, const es__fwd *f, const es__alspec_call *call) {
    side *sd = &p->s[k];
    es__vk_dev *d = sd->io.d;
    es__vk_fwd_step(sd->ctx, f);
    ES_TRY(es__vk_buf_flush(d, sd->io.step));
    float *v = sd->io.verd->map;
    memset(v, 0, sizeof(float) * 8 * p->L);
    for (uint32_t l = 0; l < p->L; l++) {
        v[8 * l] = call->lambda;
        /* no gate flag: the exact output stays where the sender's miss path reads it; a hit's
         * speculation reaches the receiver through the window */
        v[8 * l + 1] = call->force_miss && call->force_miss[l] ? 2.0f : 0.0f;
    }
    ES_TRY(es__vk_buf_flush(d, sd->io.verd));
    uint32_t *g = sd->g.map;
    memset(g, 0, (size_t)sd->g.size);
    g[0] = k == 0;
    return es__vk_buf_flush(d, &sd->g);
}

/* What the exchange after batch i carries from side k: record i (the next layer's speculation
 * and the verdict of the layer batch i checked), the KV slots, or nothing at the end. */
static void published(const vk_pair *p, uint32_t k, uint32_t i, VkDeviceSize *off, VkDeviceSize *size) {
    const uint32_t at = i <= p->L ? w_rec(p, k, i) : w_kv(p, k, 0, 0);
    const uint32_t len = i <= p->L ? p->w_rec : i == p->L + 1 ? 2 * p->L * p->kvd : 0;
    *off = 4 * (VkDeviceSize)at;
    *size = 4 * (VkDeviceSize)len;
}

/* Submits both sides' batches and queues the relay's exchanges; the last value used. */
static es_status submit(vk_pair *p, uint64_t *last) {
    const uint64_t v0 = p->tl;
    const uint32_t n = n_batches(p);
    for (int k = 0; k < 2; k++)
        for (uint32_t i = 0; i < n; i++) {
            ES_TRY(es__vk_link_submit(&p->link, k, p->s[k].cbs[i], i ? v0 + i : 0, v0 + i + 1, VK_NULL_HANDLE));
            p->s[k].io.d->stats->n_forward_submits++;
        }
    *last = v0 + n;
    for (uint32_t i = 0; i < n; i++) {
        VkDeviceSize off[2], size[2];
        for (uint32_t k = 0; k < 2; k++) published(p, k, i, &off[k], &size[k]);
        ES_TRY(es__vk_relayer_exchange(&p->relay, v0 + i + 1, off, size));
    }
    return ES_OK;
}

/* After the token: each layer's verdict from its sender, the logits from the device that ran the
 * output head. */
static es_status results(vk_pair *p, const es__fwd *const f[2], const es__alspec_call *call, float *logits) {
    const uint32_t *g[2];
    for (int k = 0; k < 2; k++) {
        ES_TRY(es__vk_buf_invalidate(p->s[k].io.d, &p->s[k].g));
        ES_TRY(es__vk_buf_invalidate(p->s[k].io.d, p->s[k].io.verd));
        g[k] = p->s[k].g.map;
    }
    for (uint32_t l = 0; l <= p->L; l++)
        ES_RETURN_IF(g[0][l] + g[1][l] != 1, p->s[0].io.d->err, ES_ERR_BACKEND,
                     "alspec pair: the devices disagree on layer %u's sender (%u, %u)", l, g[0][l], g[1][l]);
    for (uint32_t l = 0; l < p->L; l++) {
        const float *v = (const float *)p->s[g[0][l] ? 0 : 1].io.verd->map + 8 * l;
        call->verdicts[l] = (es__spec_verdict){v[4] != 0.0f, v[5] != 0.0f, v[6], v[7]};
    }
    const side *h = &p->s[g[0][p->L] ? 0 : 1];
    ES_TRY(es__vk_buf_invalidate(h->io.d, h->io.logits));
    const size_t bytes = sizeof(float) * (size_t)h->ctx->model->hp.n_vocab;
    memcpy(logits, h->io.logits->map, bytes);
    for (int k = 0; k < 2; k++) memcpy(f[k]->logits, logits, bytes);
    return ES_OK;
}

es_status es__vk_pair_forward(void *impl, const es__fwd *fa, const es__fwd *fb, const es__alspec_call *call,
                               float *logits) {
    vk_pair *p = impl;
    const es__fwd *f[2] = {fa, fb};
    for (int k = 0; k < 2; k++) {
        ES_TRY(es__vk_check_lost(p->s[k].io.d));
        ES_TRY(inputs(p, k, f[k], call));
        for (uint32_t i = 0; i < n_batches(p); i++) ES_TRY(record(p, k, i, fa->n_past));
    }
    uint64_t last = p->tl;
    es_status s = submit(p, &last);
    const es_status sd = es__vk_relayer_drain(&p->relay);
    if (s == ES_OK) s = sd;
    p->tl = last;
    if (s != ES_OK) { /* nothing may stay waiting on a value the relay will not send */
        es__vk_link_release(&p->link, last);
        for (int k = 0; k < 2; k++) vkQueueWaitIdle(p->s[k].io.d->queue);
        return s;
    }
    for (int k = 0; k < 2; k++) p->s[k].io.d->stats->n_forward++;
    return results(p, f, call, logits);
}
