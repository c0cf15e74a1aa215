/* model_vk.c: uploading a llama model's weights to the device: which tensors are fused (Q, K
 * and V rows concatenated, NEOX pairs made adjacent; gate and up rows interleaved for the SwiGLU
 * epilogue), the norm vectors as f32 (qwen3's head norms too), the tied output head. One upload
 * per (backend, model), shared by contexts.
 * It deliberately does not allocate per-context memory (forward.c). */
#include "backend_vk.h"
#include "model_vk.h"
#include "rope.h"
#include "gguf.h"

#include <string.h>

/* A norm vector as f32 into dst[E32] (zero padded). */
static es_status norm_vector(es__vk_dev *d, const es__tensor *t, uint32_t E, uint32_t E32, float *dst) {
    ES_RETURN_IF(!t || !t->data || t->ne[0] != E, d->err, ES_ERR_MODEL, "vulkan: norm tensor '%s' is not (%u)",
                 t ? t->name : "(missing)", E);
    memset(dst, 0, sizeof *dst * E32);
    for (uint32_t i = 0; i < E; i++) {
        if (t->type == ES__DTYPE_F32) {
            memcpy(&dst[i], (const uint8_t *)t->data + 4 * i, 4);
        } else if (t->type == ES__DTYPE_F16 || t->type == ES__DTYPE_BF16) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)t->data + 2 * i, 2);
            if (t->type == ES__DTYPE_F16) {
                dst[i] = es__f16_to_f32(h);
            } else {
                uint32_t x = (uint32_t)h << 16;
                memcpy(&dst[i], &x, 4);
            }
        } else {
            return es__fail(d->err, ES_ERR_UNSUPPORTED, "vulkan: norm tensor '%s' has type %d; expected f32/f16/bf16",
                            t->name, (int)t->type);
        }
    }
    return ES_OK;
}

/* The Q and K head norms (qk_norm, arch.h) after the output norm: head_dim floats each, padded
 * to HD32, two per layer. They get offsets of their own because head_dim is not n_embd. */
static es_status head_norms(es__vk_dev *d, const es_model *m, es__vk_model *w, uint32_t first, float *host) {
    const uint32_t hd = (uint32_t)m->hp.head_dim, HD32 = (hd + 31u) & ~31u;
    es_status s = ES_OK;
    for (uint32_t l = 0; s == ES_OK && m->hp.arch->qk_norm && l < (uint32_t)m->hp.n_layer; l++) {
        es__vk_layer *vl = &w->layers[l];
        vl->q_norm = first + 2 * l * HD32;
        vl->k_norm = vl->q_norm + HD32;
        s = norm_vector(d, m->layers[l].q_norm, hd, HD32, host + vl->q_norm);
        if (s == ES_OK) s = norm_vector(d, m->layers[l].k_norm, hd, HD32, host + vl->k_norm);
    }
    return s;
}

static es_status upload_vectors(es__vk_dev *d, const es_model *m, es__vk_model *w) {
    const uint32_t L = (uint32_t)m->hp.n_layer, E = (uint32_t)m->hp.n_embd, E32 = w->E32;
    const uint32_t per = m->hp.arch->post_norms ? 4 : 2; /* norm vectors per layer */
    const size_t HD32 = ((size_t)m->hp.head_dim + 31u) & ~(size_t)31u;
    const size_t n_floats = (per * (size_t)L + 1) * E32 + (m->hp.arch->qk_norm ? 2 * (size_t)L * HD32 : 0);
    float *host = es__calloc(d->alloc, n_floats, sizeof *host);
    ES_RETURN_IF(!host, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    es_status s = ES_OK;
    for (uint32_t l = 0; s == ES_OK && l < L; l++) {
        es__vk_layer *vl = &w->layers[l];
        vl->attn_norm = per * l * E32;
        vl->ffn_norm = (per * l + 1) * E32;
        s = norm_vector(d, m->layers[l].attn_norm, E, E32, host + vl->attn_norm);
        if (s == ES_OK) s = norm_vector(d, m->layers[l].ffn_norm, E, E32, host + vl->ffn_norm);
        if (s == ES_OK && per == 4) {
            vl->post_attn_norm = (per * l + 2) * E32;
            vl->post_ffn_norm = (per * l + 3) * E32;
            s = norm_vector(d, m->layers[l].post_attn_norm, E, E32, host + vl->post_attn_norm);
            if (s == ES_OK) s = norm_vector(d, m->layers[l].post_ffn_norm, E, E32, host + vl->post_ffn_norm);
        }
    }
    w->output_norm = per * L * E32;
    if (s == ES_OK) s = norm_vector(d, m->output_norm, E, E32, host + w->output_norm);
    if (s == ES_OK) s = head_norms(d, m, w, (per * L + 1) * E32, host);
    const VkDeviceSize bytes = sizeof *host * n_floats;
    if (s == ES_OK) s = es__vk_buf_create(d, bytes, ES__VK_MEM_DEVICE, "norm weights", &w->vecs);
    es__vk_stager st;
    if (s == ES_OK) s = es__vk_stager_init(d, &st, bytes);
    if (s == ES_OK) {
        s = es__vk_stage(d, &st, &w->vecs, 0, host, bytes);
        if (s == ES_OK) s = es__vk_stager_flush(d, &st);
        es__vk_stager_free(d, &st);
    }
    if (s == ES_OK && d->use.texel) s = es__vk_view_create(d, &w->vecs, VK_FORMAT_R32G32B32A32_SFLOAT, 0, bytes, &w->vecs_view);
    es__free(d->alloc, host);
    return s;
}

es__pc_qk_norm_rope es__vk_qk_norm_call(const es__vk_model *w, uint32_t l, uint32_t n, uint32_t qkv_stride,
                                        uint32_t n_ctx) {
    const es__hparams *hp = &w->model->hp;
    return (es__pc_qk_norm_rope){n, (uint32_t)hp->n_head, (uint32_t)hp->n_head_kv, (uint32_t)hp->head_dim,
                                 (uint32_t)hp->n_rot, hp->rope_type == ES_ROPE_NEOX ? 1u : 0u, qkv_stride, n_ctx,
                                 0, w->layers[l].q_norm, w->layers[l].k_norm, n, 0, hp->rms_eps,
                                 es__vk_rope_off(w, n_ctx, l), es__vk_rope_stride(w, n_ctx, l)};
}

/* Shapes the kernels rely on, checked once so they never see one they cannot handle. */
static es_status check_shapes(es__vk_dev *d, const es_model *m) {
    const es__hparams *hp = &m->hp;
    ES_RETURN_IF(hp->head_dim % 4 != 0 || hp->head_dim > 512 || hp->head_dim < 4, d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: head_dim %d; the attention kernel needs a multiple of 4 up to 512", hp->head_dim);
    ES_RETURN_IF(hp->n_rot % 2 != 0 || hp->n_rot > hp->head_dim, d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: n_rot %d must be even and at most head_dim %d", hp->n_rot, hp->head_dim);
    ES_RETURN_IF(hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0, d->err, ES_ERR_MODEL,
                 "vulkan: n_head %d is not a multiple of n_head_kv %d", hp->n_head, hp->n_head_kv);
    return ES_OK;
}

es_status es__vk_model_upload(es_backend *b, const es_model *m, es__vk_model **out) {
    es__vk_dev *d = &((es__vk_backend *)b->impl)->dev;
    *out = NULL;
    ES_TRY(check_shapes(d, m));
    const uint32_t L = (uint32_t)m->hp.n_layer;
    es__vk_model *w = es__calloc(d->alloc, 1, sizeof *w);
    ES_RETURN_IF(!w, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    w->model = m;
    es__vk_wset_init(&w->ws, d);
    w->layers = es__calloc(d->alloc, L ? L : 1, sizeof *w->layers);
    w->E32 = ((uint32_t)m->hp.n_embd + 31u) & ~31u;
    es__vk_mat **mats = es__calloc(d->alloc, 4 * (size_t)L + 2, sizeof *mats);
    es_status s = w->layers && mats ? ES_OK : es__fail(d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    uint32_t n = 0;
    for (uint32_t l = 0; s == ES_OK && l < L; l++) {
        const es__layer *ml = &m->layers[l];
        es__vk_layer *vl = &w->layers[l];
        const es__tensor *qkv[3] = {ml->wq, ml->wk, ml->wv}, *gu[2] = {ml->ffn_gate, ml->ffn_up};
        s = es__vk_mat_init(d, &vl->qkv, qkv, 3, false);
        /* NEOX pairs made adjacent for the RoPE epilogue; qk_norm's kernel reads whole heads and
         * the projection stores them, so its rows stay in head order */
        if (m->hp.rope_type == ES_ROPE_NEOX && !m->hp.arch->qk_norm) {
            vl->qkv.rope_rows = (uint32_t)((m->hp.n_head + m->hp.n_head_kv) * m->hp.head_dim);
            vl->qkv.rope_hd = (uint32_t)m->hp.head_dim;
            vl->qkv.rope_nrot = (uint32_t)m->hp.n_rot;
        }
        if (s == ES_OK) s = es__vk_mat_init(d, &vl->wo, &ml->wo, 1, false);
        if (s == ES_OK) s = es__vk_mat_init(d, &vl->gateup, gu, 2, true);
        if (s == ES_OK) s = es__vk_mat_init(d, &vl->down, &ml->ffn_down, 1, false);
        mats[n++] = &vl->qkv;
        mats[n++] = &vl->wo;
        mats[n++] = &vl->gateup;
        mats[n++] = &vl->down;
    }
    if (s == ES_OK) { /* mats is NULL when its allocation failed */
        s = es__vk_mat_init(d, &w->tok_embd, &m->tok_embd, 1, false);
        mats[n++] = &w->tok_embd;
    }
    w->out = &w->tok_embd;
    if (s == ES_OK && !m->tied_output) {
        s = es__vk_mat_init(d, &w->output, &m->output, 1, false);
        mats[n++] = &w->output;
        w->out = &w->output;
    }
    if (s == ES_OK) s = es__vk_wset_upload(&w->ws, mats, n, b->progress_fn, b->progress_user);
    if (s == ES_OK) s = upload_vectors(d, m, w);
    es__free(d->alloc, mats);
    if (s != ES_OK) {
        es__vk_model_free(b, w);
        return s;
    }
    es__logf(d->log, ES_LOG_INFO, "vulkan: uploaded %.1f MiB of weights for '%s'", (double)w->ws.bytes / 1048576.0,
             m->name ? m->name : "");
    *out = w;
    return ES_OK;
}

void es__vk_model_free(es_backend *b, es__vk_model *w) {
    if (!w) return;
    es__vk_dev *d = &((es__vk_backend *)b->impl)->dev;
    vkDeviceWaitIdle(d->dev);
    for (int32_t l = 0; w->layers && l < w->model->hp.n_layer; l++) {
        es__vk_mat_free(d, &w->layers[l].qkv);
        es__vk_mat_free(d, &w->layers[l].wo);
        es__vk_mat_free(d, &w->layers[l].gateup);
        es__vk_mat_free(d, &w->layers[l].down);
    }
    es__vk_mat_free(d, &w->tok_embd);
    es__vk_mat_free(d, &w->output);
    if (w->vecs_view) vkDestroyBufferView(d->dev, w->vecs_view, NULL);
    es__vk_buf_destroy(d, &w->vecs);
    es__vk_wset_free(&w->ws);
    es__free(d->alloc, w->layers);
    es__free(d->alloc, w);
}
