/* forward.c: a context on the Vulkan backend: the KV cache, activations and step data on the
 * device, descriptor sets made once, and the forward pass as one command buffer per batch
 * shape (tokens, rows with logits), recorded on first use and replayed; per-call values (n_past,
 * tokens, positions, tree intervals) travel in the step buffer, so a forward call is one
 * submission. A call that prunes its tree (Speculative Streaming 3.2.3) is two: the layers
 * below the prune layer with the early exit of the tokens that have children, then, after the
 * host's decision (prune.h), the survivors' rows and KV moved together on the device and the
 * remaining layers and the output head on them alone. KV compaction after verification runs on
 * the device. ALSpec's Algorithm 2 cuts a decode token at each layer's attention
 * (es__alspec_part): each part is recorded into the device's one-off command buffer, its inputs
 * staged in and its outputs read back.
 * It deliberately does not validate batches (lib/core/batch.c did) or pick kernels (ops.c). */
#include "adapter.h"
#include "backend_vk.h"
#include "model_vk.h"
#include "msa_vk.h"
#include "forward_api.h"
#include "forward_vk.h"
#include "prune.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FUSE_TOKENS 8u /* the largest tree whose fused streams a context measures (measure_fused) */

#define ES__CB_CACHE 16
#define ES__MAX_QUERIES 1024

/* What a command buffer runs: the whole forward, or one side of a pruning call's split. */
enum { PART_ALL, PART_BELOW, PART_ABOVE };

typedef struct vk_cb {
    int32_t n, n_out;     /* PART_BELOW: n_out counts the early exit's rows                */
    uint32_t ss;          /* Speculative Streaming hooks recorded (msa_vk.h flags) */
    int part;
    bool compact;         /* PART_ABOVE: moves the survivors' rows and KV down first      */
    uint32_t spec_chunk;  /* ALSpec: every layer's attention is the speculative flash decode */
    VkCommandBuffer cb;
    uint32_t n_dispatch;
    VkQueryPool queries;
    uint32_t n_queries;
    const char **ops;
    uint64_t used;
} vk_cb;

/* Per-layer descriptor sets. */
typedef struct vk_lsets {
    VkDescriptorSet *qkv, *wo, *gateup, *down; /* one per part */
    VkDescriptorSet attn, kv_move, kv_shift;
    VkDescriptorSet qk_norm;                    /* qk_norm architectures: qk_norm_rope.comp's */
    es__vk_region k, v;                         /* this layer's cache: (n_head_kv, n_ctx, hd) each */
    VkBufferView k_view, v_view;
} vk_lsets;

typedef struct vk_ctx {
    es__vk_dev *d;
    es__vk_model *w;
    uint32_t nb, n_ctx;
    uint32_t rows;                      /* row buffers: nb, plus the fused stream rows        */
    uint32_t fused_rows, fused_extra;   /* the device's fused-rows policy; the rows it adds   */
    uint32_t E32, QKV32, Q32, F32, V32; /* row strides (floats), multiples of 32 */
    uint32_t split, max_splits, step_stride, step_ind; /* split: the device's attn_split */
    uint32_t attn_per_wg;               /* (token, head) pairs per attention workgroup (ops.h)  */
    es__vk_arena arena;
    es__vk_region r_x, r_xn, r_qkv, r_attn, r_h, r_part, r_rope, r_spec;
    VkBufferView v_x, v_xn, v_qkv, v_attn, v_h, v_part, v_rope, v_step;
    es__vk_buf step, logits;
    es__vk_buf verd;                    /* ALSpec: [n_layer][2] vec4, attn_spec.comp's in and out */
    es__vk_buf shift_cs;                /* a context shift's cos, sin per rotated pair, one row
                                           of n_rot floats per RoPE table (rope.h)           */
    VkBufferView v_shift_cs;
    VkDescriptorPool pool;
    VkDescriptorSet s_norm, s_merge, s_spec, s_move_x, *s_embd, *s_out;
    vk_lsets *ls;
    es__vk_pipeline *p_norm, *p_attn, *p_merge, *p_spec, *p_kv_move, *p_kv_shift, *p_get_rows;
    es__vk_pipeline *p_qk_norm;         /* qk_norm architectures (arch.h) only               */
    VkDescriptorSet s_post;             /* post-branch norm: xn normalised, added into x     */
    uint32_t bias_floats;               /* per layer Q, K, V biases after the RoPE tables (0: none) */
    vk_cb cbs[ES__CB_CACHE];
    uint64_t clock;
    int32_t *depth_count; /* [nb + 1] scratch for the depth sort */
    struct es__vk_msa *msa; /* Speculative Streaming (msa_vk.c), when the model has an adapter */
    int32_t *parents;       /* [nb] pruning: the tokens with children                        */
    es__pruned_batch kept;  /* pruning: the survivors ([7][nb] in kept_mem)                  */
    int32_t *kept_mem;
} vk_ctx;

static es__vk_dev *ctx_dev(es_context *ctx) {
    return &((es__vk_backend *)ctx->backend->impl)->dev;
}

static uint32_t up32(uint32_t x) {
    return (x + 31u) & ~31u;
}

/* ---- setup */
static es_status make_view(vk_ctx *c, const es__vk_region *r, VkFormat f, VkBufferView *out) {
    if (!c->d->use.texel) return ES_OK;
    return es__vk_view_create(c->d, es__vk_region_buf(&c->arena, r), f, r->off, r->size, out);
}

static es__vk_bind bind_region(vk_ctx *c, const es__vk_region *r, VkBufferView view) {
    return (es__vk_bind){es__vk_region_buf(&c->arena, r)->buf, r->off, r->size, view};
}

static es__vk_bind bind_buf(const es__vk_buf *b, VkBufferView view) {
    return (es__vk_bind){b->buf, 0, b->size, view};
}

static es_status plan_memory(es_context *ctx, vk_ctx *c) {
    es__vk_dev *d = c->d;
    const es__hparams *hp = &ctx->model->hp;
    const uint32_t hd = (uint32_t)hp->head_dim, L = (uint32_t)hp->n_layer;
    const VkDeviceSize nb = c->rows, f = sizeof(float);
    es__vk_arena_init(d, &c->arena);
    ES_TRY(es__vk_arena_reserve(d, &c->arena, nb * c->E32 * f, &c->r_x));
    ES_TRY(es__vk_arena_reserve(d, &c->arena, nb * c->E32 * f, &c->r_xn));
    ES_TRY(es__vk_arena_reserve(d, &c->arena, nb * c->QKV32 * f, &c->r_qkv));
    ES_TRY(es__vk_arena_reserve(d, &c->arena, nb * c->Q32 * f, &c->r_attn));
    ES_TRY(es__vk_arena_reserve(d, &c->arena, nb * c->F32 * f, &c->r_h));
    const VkDeviceSize chunk = ES__MIN(c->nb, ES__ATTN_CHUNK);
    ES_TRY(es__vk_arena_reserve(d, &c->arena, chunk * (VkDeviceSize)hp->n_head * c->max_splits * (hd + 4) * f,
                                &c->r_part));
    /* the RoPE tables (model_vk.h es__vk_rope_off), then every layer's Q, K, V biases (qwen2),
     * which the RoPE epilogue adds */
    const VkDeviceSize rope = (VkDeviceSize)es__vk_rope_table_off(hp, c->n_ctx, es__rope_tables(hp)) * f,
                       rope_all = rope + (VkDeviceSize)L * c->bias_floats * f;
    ES_RETURN_IF(rope_all > d->phys.props.limits.maxStorageBufferRange ||
                     (d->use.texel && rope_all / f > d->phys.props.limits.maxTexelBufferElements),
                 d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: the RoPE tables (%d, %.1f MiB for n_ctx %u) exceed the device's binding limit; use a "
                 "smaller n_ctx", es__rope_tables(hp), (double)rope / 1048576.0, c->n_ctx);
    ES_TRY(es__vk_arena_reserve(d, &c->arena, rope_all, &c->r_rope));
    ES_TRY(es__vk_arena_reserve(d, &c->arena, (VkDeviceSize)c->Q32 * f, &c->r_spec));
    const VkDeviceSize kv = (VkDeviceSize)hp->n_head_kv * c->n_ctx * hd * f;
    const VkDeviceSize limit = d->use.texel ? (VkDeviceSize)d->phys.props.limits.maxTexelBufferElements * 16
                                            : d->phys.props.limits.maxStorageBufferRange;
    ES_RETURN_IF(kv > d->phys.props.limits.maxStorageBufferRange || kv > limit, d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: one layer's KV cache (%.1f MiB for n_ctx %u) exceeds the device's binding limit "
                 "(%.1f MiB); use a smaller n_ctx",
                 (double)kv / 1048576.0, c->n_ctx,
                 (double)ES__MIN(limit, (VkDeviceSize)d->phys.props.limits.maxStorageBufferRange) / 1048576.0);
    for (uint32_t l = 0; l < L; l++) {
        ES_TRY(es__vk_arena_reserve(d, &c->arena, kv, &c->ls[l].k));
        ES_TRY(es__vk_arena_reserve(d, &c->arena, kv, &c->ls[l].v));
    }
    ES_TRY(es__vk_arena_alloc(d, &c->arena, ES__VK_MEM_DEVICE, "the KV cache and activations"));
    /* Zero once: row padding must stay zero (kernels never write it) and be finite. */
    for (uint32_t i = 0; i < c->arena.n; i++) ES_TRY(es__vk_fill(d, &c->arena.chunks[i], 0, VK_WHOLE_SIZE, 0));
    const VkDeviceSize step_bytes = ((VkDeviceSize)c->step_ind + 8 * ((c->nb + ES__ATTN_CHUNK - 1) / ES__ATTN_CHUNK)) * 4;
    ES_TRY(es__vk_buf_create(d, step_bytes, ES__VK_MEM_UPLOAD, "the step buffer", &c->step));
    memset(c->step.map, 0, (size_t)step_bytes);
    ES_TRY(es__vk_buf_create(d, nb * c->V32 * f, ES__VK_MEM_READBACK, "the logits buffer", &c->logits));
    ES_TRY(es__vk_buf_create(d, (VkDeviceSize)L * 8 * f, ES__VK_MEM_READBACK, "ALSpec's verdicts", &c->verd));
    ES_TRY(es__vk_buf_create(d, (VkDeviceSize)es__rope_tables(hp) * ES__MAX(hp->n_rot, 4) * f, ES__VK_MEM_UPLOAD,
                             "the shift table", &c->shift_cs));
    return ES_OK;
}

static es_status make_views(es_context *ctx, vk_ctx *c) {
    const VkFormat f4 = VK_FORMAT_R32G32B32A32_SFLOAT;
    ES_TRY(make_view(c, &c->r_x, f4, &c->v_x));
    ES_TRY(make_view(c, &c->r_xn, f4, &c->v_xn));
    ES_TRY(make_view(c, &c->r_qkv, f4, &c->v_qkv));
    ES_TRY(make_view(c, &c->r_attn, f4, &c->v_attn));
    ES_TRY(make_view(c, &c->r_h, f4, &c->v_h));
    ES_TRY(make_view(c, &c->r_part, f4, &c->v_part));
    ES_TRY(make_view(c, &c->r_rope, VK_FORMAT_R32_SFLOAT, &c->v_rope));
    if (c->d->use.texel) ES_TRY(es__vk_view_create(c->d, &c->step, VK_FORMAT_R32_SINT, 0, c->step.size, &c->v_step));
    if (c->d->use.texel)
        ES_TRY(es__vk_view_create(c->d, &c->shift_cs, VK_FORMAT_R32_SFLOAT, 0, c->shift_cs.size, &c->v_shift_cs));
    for (int32_t l = 0; l < ctx->model->hp.n_layer; l++) {
        ES_TRY(make_view(c, &c->ls[l].k, f4, &c->ls[l].k_view));
        ES_TRY(make_view(c, &c->ls[l].v, f4, &c->ls[l].v_view));
    }
    return ES_OK;
}

/* Float offset in the RoPE region of layer l's biases, in head order (0: the model has none). */
static uint32_t bias_off(const vk_ctx *c, uint32_t l) {
    return es__vk_bias_off(c->w, c->n_ctx, c->bias_floats, l);
}

/* Every layer's Q, K, V biases after the RoPE tables (the model checked them to be f32). */
static es_status upload_biases(es_context *ctx, vk_ctx *c, es__vk_stager *st) {
    const es__hparams *hp = &ctx->model->hp;
    for (uint32_t l = 0; c->bias_floats && l < (uint32_t)hp->n_layer; l++) {
        const es__layer *ml = &ctx->model->layers[l];
        const es__tensor *b[3] = {ml->bq, ml->bk, ml->bv};
        VkDeviceSize off = c->r_rope.off + (VkDeviceSize)bias_off(c, l) * sizeof(float);
        for (int i = 0; i < 3; i++) {
            ES_TRY(es__vk_stage(c->d, st, es__vk_region_buf(&c->arena, &c->r_rope), off, b[i]->data, b[i]->nbytes));
            off += b[i]->nbytes;
        }
    }
    return ES_OK;
}

/* cos and sin of every (table, position, pair), computed in double and rounded once, as the CPU
 * does: table t (rope.h es__rope_table) at es__vk_rope_table_off, a row per position (the
 * identity's one row, model_vk.h). */
static es_status upload_rope(es_context *ctx, vk_ctx *c) {
    const es__hparams *hp = &ctx->model->hp;
    const uint32_t half = (uint32_t)hp->n_rot / 2, n_tab = (uint32_t)es__rope_tables(hp);
    const VkDeviceSize row = (VkDeviceSize)half * 2 * sizeof(float),
                       bytes = (VkDeviceSize)es__vk_rope_table_off(hp, c->n_ctx, (int32_t)n_tab) * sizeof(float);
    if (bytes == 0) return ES_OK;
    es__vk_stager st;
    ES_TRY(es__vk_stager_init(c->d, &st, ES__MIN(bytes, (VkDeviceSize)16 << 20)));
    es_status s = ES_OK;
    const uint32_t rows_per = (uint32_t)ES__MAX(1, (st.staging.size / 2) / row);
    for (uint32_t t = 0; s == ES_OK && t < n_tab; t++) {
        const es__rope rope = es__rope_table(hp, ctx->n_ctx, (int32_t)t);
        const uint32_t rows = es__vk_rope_rows(hp, c->n_ctx, (int32_t)t);
        const VkDeviceSize base = c->r_rope.off + (VkDeviceSize)es__vk_rope_table_off(hp, c->n_ctx, (int32_t)t) * sizeof(float);
        for (uint32_t p0 = 0; s == ES_OK && p0 < rows; p0 += rows_per) {
            const uint32_t np = ES__MIN(rows_per, rows - p0);
            void *ptr = NULL;
            s = es__vk_stage_ptr(c->d, &st, es__vk_region_buf(&c->arena, &c->r_rope), base + p0 * row, np * row, &ptr);
            if (s == ES_OK) es__vk_rope_table(&rope, ptr, (int32_t)p0, np, false);
        }
    }
    if (s == ES_OK) s = upload_biases(ctx, c, &st);
    if (s == ES_OK) s = es__vk_stager_flush(c->d, &st);
    es__vk_stager_free(c->d, &st);
    return s;
}

/* The gate/up epilogue of the architecture's activation (arch.h). */
static uint32_t glu_epi(const vk_ctx *c) {
    return c->w->model->hp.arch->act == ES__ACT_GELU ? ES__EPI_GEGLU : ES__EPI_SWIGLU;
}

/* A residual branch's output projection adds into x, or with post-branch norms (gemma2) stores
 * into xn for the norm that then adds (and, in the same dispatch, does the norm after it:
 * rec_post_norm); either scales the branch by the model's residual scale (granite's; 1 for the
 * others) before its add (branch_call, rec_post_norm). */
static bool post_norms(const vk_ctx *c) {
    return c->w->model->hp.arch->post_norms;
}
static uint32_t branch_epi(const vk_ctx *c) {
    return post_norms(c) ? ES__EPI_STORE : ES__EPI_ADD;
}

static es_status get_pipelines(es_context *ctx, vk_ctx *c) {
    es__vk_dev *d = c->d;
    ES_TRY(es__vk_rmsnorm_pipe(d, &c->p_norm));
    ES_TRY(es__vk_attn_kernel(d, "attn", (uint32_t)ctx->model->hp.head_dim, &c->p_attn, &c->attn_per_wg));
    ES_TRY(es__vk_simple_pipe(d, "attn_merge", true, false, &c->p_merge));
    ES_TRY(es__vk_simple_pipe(d, "attn_spec", true, false, &c->p_spec));
    ES_TRY(es__vk_simple_pipe(d, "kv_move", true, false, &c->p_kv_move));
    ES_TRY(es__vk_simple_pipe(d, "kv_shift", true, false, &c->p_kv_shift));
    ES_TRY(es__vk_get_rows_pipe(d, c->w->tok_embd.type, &c->p_get_rows));
    if (ctx->model->hp.arch->qk_norm) ES_TRY(es__vk_simple_pipe(d, "qk_norm_rope", true, true, &c->p_qk_norm));
    /* every mul_mat the forward may record, so forward calls never compile */
    const es__vk_model *w = c->w;
    for (int32_t l = 0; l < ctx->model->hp.n_layer; l++) {
        const es__vk_layer *vl = &w->layers[l];
        const struct {
            const es__vk_mat *m;
            uint32_t epi;
        } uses[4] = {{&vl->qkv, es__vk_qkv_epi(w)}, {&vl->wo, branch_epi(c)}, {&vl->gateup, glu_epi(c)},
                     {&vl->down, branch_epi(c)}};
        for (int u = 0; u < 4; u++) ES_TRY(es__vk_mul_mat_warm(d, uses[u].m, uses[u].epi, false));
    }
    return es__vk_mul_mat_warm(d, w->out, ES__EPI_STORE, false);
}

static es_status make_pool(es_context *ctx, vk_ctx *c) {
    uint32_t sets = 6 + 2 * c->w->tok_embd.n_parts + c->w->out->n_parts;
    for (int32_t l = 0; l < ctx->model->hp.n_layer; l++) {
        const es__vk_layer *vl = &c->w->layers[l];
        sets += 3 + (c->p_qk_norm ? 1 : 0) + vl->qkv.n_parts + vl->wo.n_parts + vl->gateup.n_parts + vl->down.n_parts;
    }
    VkDescriptorPoolSize ps[2] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, ES__SHADER_MAX_BINDINGS * sets},
                                  {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, ES__SHADER_MAX_BINDINGS * sets}};
    VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = sets;
    pi.poolSizeCount = c->d->use.texel ? 2 : 1;
    pi.pPoolSizes = ps;
    ES_VK_TRY(c->d, vkCreateDescriptorPool(c->d->dev, &pi, NULL, &c->pool));
    return ES_OK;
}

/* One descriptor set per part of m: W, S of the part, X, Y, and what the RoPE epilogue uses
 * (RoPE table, step data, this layer's KV cache; any valid buffer where unused). */
static es_status mat_sets(vk_ctx *c, const es__vk_mat *m, es__vk_bind x, es__vk_bind y, es__vk_bind kc, es__vk_bind vc,
                          VkDescriptorSet **out) {
    es__vk_pipeline *p;
    ES_TRY(es__vk_mul_mat_pipe(c->d, m, 1, ES__EPI_STORE, &p));
    *out = es__calloc(c->d->alloc, m->n_parts, sizeof **out);
    ES_RETURN_IF(!*out, c->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    for (uint32_t i = 0; i < m->n_parts; i++) {
        es__vk_bind b[8];
        es__vk_part_binds(&c->w->ws, &m->parts[i], &b[0], &b[1]);
        b[2] = x;
        b[3] = y;
        b[4] = bind_region(c, &c->r_rope, c->v_rope);
        b[5] = bind_buf(&c->step, c->v_step);
        b[6] = kc;
        b[7] = vc;
        ES_TRY(es__vk_set_create(c->d, c->pool, p, b, &(*out)[i]));
    }
    return ES_OK;
}

static es_status make_sets(es_context *ctx, vk_ctx *c) {
    es__vk_dev *d = c->d;
    es__vk_model *w = c->w;
    const es__vk_bind x = bind_region(c, &c->r_x, c->v_x), xn = bind_region(c, &c->r_xn, c->v_xn),
                      qkv = bind_region(c, &c->r_qkv, c->v_qkv), attn = bind_region(c, &c->r_attn, c->v_attn),
                      h = bind_region(c, &c->r_h, c->v_h), part = bind_region(c, &c->r_part, c->v_part),
                      step = bind_buf(&c->step, c->v_step),
                      vecs = bind_buf(&w->vecs, w->vecs_view), logits = bind_buf(&c->logits, VK_NULL_HANDLE);
    {
        const es__vk_bind xn_w = bind_region(c, &c->r_xn, VK_NULL_HANDLE);
        es__vk_bind b[5] = {x, vecs, step, xn_w, xn_w}; /* Z unused */
        ES_TRY(es__vk_set_create(d, c->pool, c->p_norm, b, &c->s_norm));
    }
    {
        es__vk_bind b[3] = {part, step, attn};
        ES_TRY(es__vk_set_create(d, c->pool, c->p_merge, b, &c->s_merge));
        es__vk_bind bs[5] = {part, step, bind_region(c, &c->r_attn, VK_NULL_HANDLE),
                             bind_region(c, &c->r_spec, VK_NULL_HANDLE), bind_buf(&c->verd, VK_NULL_HANDLE)};
        ES_TRY(es__vk_set_create(d, c->pool, c->p_spec, bs, &c->s_spec));
    }
    if (post_norms(c)) { /* x += rmsnorm(xn) g, then (norm2) xn = rmsnorm(x) g2 */
        es__vk_bind b[5] = {xn, vecs, step, bind_region(c, &c->r_x, VK_NULL_HANDLE),
                            bind_region(c, &c->r_xn, VK_NULL_HANDLE)};
        ES_TRY(es__vk_set_create(d, c->pool, c->p_norm, b, &c->s_post));
    }
    {
        /* the residual rows as kv_move's one-head "cache" (pruning's compaction) */
        const es__vk_bind xw = bind_region(c, &c->r_x, VK_NULL_HANDLE);
        es__vk_bind b[3] = {step, xw, xw};
        ES_TRY(es__vk_set_create(d, c->pool, c->p_kv_move, b, &c->s_move_x));
    }
    c->s_embd = es__calloc(d->alloc, w->tok_embd.n_parts, sizeof *c->s_embd);
    ES_RETURN_IF(!c->s_embd, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    for (uint32_t i = 0; i < w->tok_embd.n_parts; i++) {
        es__vk_bind b[4];
        es__vk_part_binds(&w->ws, &w->tok_embd.parts[i], &b[0], &b[1]);
        b[2] = step;
        b[3] = x;
        ES_TRY(es__vk_set_create(d, c->pool, c->p_get_rows, b, &c->s_embd[i]));
    }
    const es__vk_bind any = bind_region(c, &c->r_h, VK_NULL_HANDLE); /* for unused storage slots */
    ES_TRY(mat_sets(c, w->out, xn, logits, any, any, &c->s_out));
    for (int32_t l = 0; l < ctx->model->hp.n_layer; l++) {
        vk_lsets *s = &c->ls[l];
        const es__vk_layer *vl = &w->layers[l];
        es__vk_bind k_w = bind_region(c, &s->k, VK_NULL_HANDLE), v_w = bind_region(c, &s->v, VK_NULL_HANDLE);
        es__vk_bind k_r = bind_region(c, &s->k, s->k_view), v_r = bind_region(c, &s->v, s->v_view);
        ES_TRY(mat_sets(c, &vl->qkv, xn, bind_region(c, &c->r_qkv, VK_NULL_HANDLE), k_w, v_w, &s->qkv));
        const es__vk_bind branch_out = bind_region(c, post_norms(c) ? &c->r_xn : &c->r_x, VK_NULL_HANDLE);
        ES_TRY(mat_sets(c, &vl->wo, attn, branch_out, any, any, &s->wo));
        ES_TRY(mat_sets(c, &vl->gateup, xn, bind_region(c, &c->r_h, VK_NULL_HANDLE), any, any, &s->gateup));
        ES_TRY(mat_sets(c, &vl->down, h, branch_out, any, any, &s->down));
        es__vk_bind ba[6] = {qkv, k_r, v_r, step, bind_region(c, &c->r_attn, VK_NULL_HANDLE),
                             bind_region(c, &c->r_part, VK_NULL_HANDLE)};
        ES_TRY(es__vk_set_create(d, c->pool, c->p_attn, ba, &s->attn));
        es__vk_bind bm[3] = {step, k_w, v_w};
        ES_TRY(es__vk_set_create(d, c->pool, c->p_kv_move, bm, &s->kv_move));
        es__vk_bind bs[3] = {bind_buf(&c->shift_cs, c->v_shift_cs), k_w, v_w};
        ES_TRY(es__vk_set_create(d, c->pool, c->p_kv_shift, bs, &s->kv_shift));
        if (c->p_qk_norm) {
            es__vk_bind bq[6] = {bind_region(c, &c->r_qkv, VK_NULL_HANDLE), bind_region(c, &c->r_rope, c->v_rope), step,
                                 vecs, k_w, v_w};
            ES_TRY(es__vk_set_create(d, c->pool, c->p_qk_norm, bq, &s->qk_norm));
        }
    }
    return ES_OK;
}

static void ctx_free(es_context *ctx, vk_ctx *c) {
    es__vk_dev *d = c->d;
    vkDeviceWaitIdle(d->dev);
    es__vk_msa_free(c->msa);
    for (int i = 0; i < ES__CB_CACHE; i++) {
        if (c->cbs[i].cb) vkFreeCommandBuffers(d->dev, d->pool, 1, &c->cbs[i].cb);
        if (c->cbs[i].queries) vkDestroyQueryPool(d->dev, c->cbs[i].queries, NULL);
        es__free(d->alloc, c->cbs[i].ops);
    }
    if (c->pool) vkDestroyDescriptorPool(d->dev, c->pool, NULL);
    VkBufferView views[] = {c->v_x, c->v_xn, c->v_qkv, c->v_attn, c->v_h, c->v_part, c->v_rope, c->v_step, c->v_shift_cs};
    for (size_t i = 0; i < ES__ARRAY_LEN(views); i++)
        if (views[i]) vkDestroyBufferView(d->dev, views[i], NULL);
    for (int32_t l = 0; c->ls && l < ctx->model->hp.n_layer; l++) {
        vk_lsets *s = &c->ls[l];
        if (s->k_view) vkDestroyBufferView(d->dev, s->k_view, NULL);
        if (s->v_view) vkDestroyBufferView(d->dev, s->v_view, NULL);
        es__free(d->alloc, s->qkv);
        es__free(d->alloc, s->wo);
        es__free(d->alloc, s->gateup);
        es__free(d->alloc, s->down);
    }
    es__free(d->alloc, c->ls);
    es__free(d->alloc, c->s_embd);
    es__free(d->alloc, c->s_out);
    es__free(d->alloc, c->depth_count);
    es__free(d->alloc, c->parents);
    es__free(d->alloc, c->kept_mem);
    es__vk_buf_destroy(d, &c->step);
    es__vk_buf_destroy(d, &c->logits);
    es__vk_buf_destroy(d, &c->verd);
    es__vk_buf_destroy(d, &c->shift_cs);
    es__vk_arena_free(d, &c->arena);
    es__free(d->alloc, c);
}

/* What the Speculative Streaming stream pass borrows from the context (msa_vk.c). */
static es_status ss_setup(es_context *ctx, vk_ctx *c) {
    const int32_t L = ctx->model->hp.n_layer;
    es__vk_bind *kv = es__calloc(c->d->alloc, 2 * (size_t)L, sizeof *kv);
    ES_RETURN_IF(!kv, c->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    for (int32_t l = 0; l < L; l++) {
        kv[l] = bind_region(c, &c->ls[l].k, c->ls[l].k_view);
        kv[L + l] = bind_region(c, &c->ls[l].v, c->ls[l].v_view);
    }
    const es__vk_ss_res res = {c->w, c->nb, c->n_ctx, c->fused_rows, c->fused_extra, c->E32, c->QKV32, c->Q32, c->F32, c->V32,
                               bind_region(c, &c->r_x, c->v_x), bind_region(c, &c->r_xn, c->v_xn),
                               bind_region(c, &c->r_qkv, c->v_qkv), bind_region(c, &c->r_attn, c->v_attn),
                               bind_region(c, &c->r_h, c->v_h), bind_buf(&c->step, c->v_step),
                               bind_region(c, &c->r_rope, c->v_rope), bind_buf(&c->w->vecs, c->w->vecs_view),
                               &c->step, &c->logits, kv, kv + L, c->bias_floats};
    es_status s = es__vk_msa_create(ctx, &res, &c->msa);
    es__free(c->d->alloc, kv);
    return s;
}

/* One forward of a chain of n tokens (the warm-up's), with what call asks. */
static es_status warm_forward(es_context *ctx, int32_t n, int32_t n_streams, float prune, float *logits) {
    int32_t tokens[8] = {0}, pos[8], dfs_start[8], dfs_end[8], parent[8], out[8];
    uint8_t pruned[8] = {0};
    for (int32_t i = 0; i < n; i++) pos[i] = dfs_start[i] = out[i] = i, dfs_end[i] = n - 1, parent[i] = i - 1;
    const es__fwd f = {n,      0,         tokens, pos,    dfs_start, dfs_end, parent, n,
                       out,    logits,    n_streams, prune, pruned, NULL,    NULL,   NULL};
    return es__vk_forward(ctx, &f);
}

/* Devices that compile kernels at their first dispatch (policy.h: warm_up) run here, once per
 * context on the empty cache's provisional slots (nothing is committed), one forward of each tile
 * size a verification tree of up to 8 nodes records, then with each stream count (fused into the
 * call where the policy allows, else the stream pass after it) and with pruning: what the first
 * speculative steps then pay is their arithmetic, not the compiler. */
static es_status warm_up(es_context *ctx, vk_ctx *c) {
    static const int32_t sizes[] = {1, 2, 4, 8};
    const es__ss_adapter *ss = ctx->model->ss;
    const int32_t G = ss ? ss->n_streams : 0;
    const bool prune = ss && ss->prune_rank > 0 && ss->prune_layer < ctx->model->hp.n_layer;
    /* the caller's counters and profile are about its own calls */
    const es_backend_stats counted = *c->d->stats;
    const bool profile = c->d->profile;
    c->d->profile = false;
    float *logits = es__calloc(c->d->alloc, (size_t)(8 + G) * (size_t)ctx->model->hp.n_vocab, sizeof(float));
    es_status s = logits ? ES_OK : es__fail(c->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    for (size_t i = 0; s == ES_OK && i < ES__ARRAY_LEN(sizes) && sizes[i] <= (int32_t)c->nb; i++)
        s = warm_forward(ctx, sizes[i], 0, 0.0f, logits);
    for (int32_t g = 1; s == ES_OK && g <= G; g++) {
        s = warm_forward(ctx, 1, g, 0.0f, logits);
        if (s == ES_OK) s = es__vk_msa_stream_logits(c->msa, 0, g, logits);
    }
    for (int32_t n = 2; s == ES_OK && G > 0 && n <= 8 && n <= (int32_t)c->nb; n *= 2) {
        s = warm_forward(ctx, n, G, prune ? 1e-9f : 0.0f, logits);
        if (s == ES_OK) s = warm_forward(ctx, n, 1, 0.0f, logits);
    }
    es__free(c->d->alloc, logits);
    c->d->profile = profile;
    c->d->stats->n_forward = counted.n_forward;
    c->d->stats->n_forward_submits = counted.n_forward_submits;
    c->d->stats->n_dispatches = counted.n_dispatches;
    c->d->stats->n_submits = counted.n_submits;
    return s;
}

/* ms of what a step needs from a forward of a chain of n tokens with G streams each: the forward
 * and the streams of its first token (fused: in its rows; else: the stream pass), best of two. */
static es_status time_streams(es_context *ctx, vk_ctx *c, int32_t n, int32_t G, float *logits, double *ms) {
    *ms = INFINITY;
    for (int rep = 0; rep < 2; rep++) {
        const double t0 = es__time_now();
        ES_TRY(warm_forward(ctx, n, G, 0.0f, logits));
        ES_TRY(es__vk_msa_stream_logits(c->msa, 0, G, logits));
        *ms = ES__MIN(*ms, (es__time_now() - t0) * 1e3);
    }
    return ES_OK;
}

/* How many rows fuse (policy.h: measure_fused): for trees of 1, 2, 4, ... tokens with every stream
 * (what a Speculative Streaming step asks), the forward with its streams fused against the forward
 * and a stream pass; the cap grows while fusing is faster. The first timing of a variant may
 * carry its compilation (llvmpipe), so each counts its best of two. Both paths give the same bits
 * (test_msa): this decides time only. About 4 one-token calls per size tried. */
static es_status measure_fused(es_context *ctx, vk_ctx *c) {
    const int32_t G = ctx->model->ss->n_streams;
    const uint32_t ceiling = c->fused_rows;
    /* a later context of the model on this device reuses the first one's answer (msa_fused.c) */
    char key[112];
    snprintf(key, sizeof key, "vulkan %.80s, up to %u rows", ctx->backend->name, ceiling);
    int32_t known = 0;
    if (es__ss_ride_recall(ctx->model->ss, key, &known)) {
        c->fused_rows = (uint32_t)known;
        es__vk_msa_set_fused_cap(c->msa, c->fused_rows);
        es__logf(c->d->log, ES_LOG_INFO,
                 "vulkan: streams fused into the forward up to %u rows (as measured for an earlier context of this "
                 "model)", c->fused_rows);
        return ES_OK;
    }
    const es_backend_stats counted = *c->d->stats; /* the caller's counters are about its own calls */
    const bool profile = c->d->profile;
    c->d->profile = false;
    float *logits = es__calloc(c->d->alloc, (size_t)(FUSE_TOKENS + G) * (size_t)ctx->model->hp.n_vocab, sizeof(float));
    es_status s = logits ? ES_OK : es__fail(c->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    uint32_t cap = 0;
    double fused = 0.0, pass = 0.0;
    for (uint32_t n = 1; s == ES_OK && n <= FUSE_TOKENS && n * (1 + (uint32_t)G) <= ceiling; n *= 2) {
        es__vk_msa_set_fused_cap(c->msa, n * (1 + (uint32_t)G));
        s = time_streams(ctx, c, (int32_t)n, G, logits, &fused);
        es__vk_msa_set_fused_cap(c->msa, 0);
        if (s == ES_OK) s = time_streams(ctx, c, (int32_t)n, G, logits, &pass);
        if (s != ES_OK || !(fused < pass)) break;
        cap = n * (1 + (uint32_t)G);
    }
    es__free(c->d->alloc, logits);
    c->fused_rows = cap;
    es__vk_msa_set_fused_cap(c->msa, cap);
    if (s == ES_OK) es__ss_ride_remember(ctx->model->ss, key, (int32_t)cap);
    if (s == ES_OK)
        es__logf(c->d->log, ES_LOG_INFO,
                 "vulkan: streams fused into the forward up to %u rows (measured; last size tried: fused %.3f ms, "
                 "forward and stream pass %.3f ms)",
                 cap, fused, pass);
    c->d->profile = profile;
    *c->d->stats = counted;
    return s;
}

es_status es__vk_ctx_init(es_context *ctx) {
    es__vk_dev *d = ctx_dev(ctx);
    const es__hparams *hp = &ctx->model->hp;
    vk_ctx *c = es__calloc(d->alloc, 1, sizeof *c);
    ES_RETURN_IF(!c, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    c->d = d;
    c->w = ctx->weights;
    c->nb = (uint32_t)ctx->n_batch;
    /* fused streams add at most n g <= min(cap, n_batch γ) rows after the batch's; the cap is the
     * override's, or, measured (measure_fused), at most FUSE_TOKENS tree tokens' rows */
    const uint32_t G = ctx->model->ss ? (uint32_t)ctx->model->ss->n_streams : 0u;
    c->fused_rows = !G ? 0u : d->policy.measure_fused ? ES__MIN(c->nb, FUSE_TOKENS) * (1 + G) : d->policy.fused_stream_rows;
    c->fused_extra = ctx->model->ss ? (uint32_t)ES__MIN((uint64_t)c->fused_rows, (uint64_t)c->nb * (uint64_t)ctx->model->ss->n_streams) : 0u;
    c->rows = c->nb + c->fused_extra;
    c->n_ctx = (uint32_t)ctx->n_ctx;
    c->E32 = up32((uint32_t)hp->n_embd);
    c->Q32 = up32((uint32_t)(hp->n_head * hp->head_dim));
    c->QKV32 = up32((uint32_t)((hp->n_head + 2 * hp->n_head_kv) * hp->head_dim));
    c->F32 = up32((uint32_t)hp->n_ff);
    c->bias_floats = ctx->model->layers[0].bq ? (uint32_t)((hp->n_head + 2 * hp->n_head_kv) * hp->head_dim) : 0u;
    c->V32 = up32((uint32_t)hp->n_vocab);
    c->split = d->policy.attn_split;
    c->max_splits = (c->n_ctx + c->split - 1) / c->split;
    c->step_stride = c->rows + 1; /* OUT_ROWS lists the fused stream rows too */
    c->step_ind = ES_STEP_HDR + ES_STEP_ARRAYS * c->step_stride;
    c->ls = es__calloc(d->alloc, (size_t)hp->n_layer, sizeof *c->ls);
    c->depth_count = es__calloc(d->alloc, (size_t)c->nb + 2, sizeof *c->depth_count);
    c->parents = es__calloc(d->alloc, (size_t)c->nb, sizeof *c->parents);
    c->kept_mem = es__calloc(d->alloc, 7 * (size_t)c->nb, sizeof *c->kept_mem);
    es_status s = c->ls && c->depth_count && c->parents && c->kept_mem
                      ? ES_OK
                      : es__fail(d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    if (s == ES_OK) {
        int32_t *k = c->kept_mem;
        const size_t nb = c->nb;
        c->kept = (es__pruned_batch){0, k, k + nb, k + 2 * nb, k + 3 * nb, k + 4 * nb, k + 5 * nb, 0, k + 6 * nb};
    }
    if (s == ES_OK) s = get_pipelines(ctx, c);
    if (s == ES_OK) s = plan_memory(ctx, c);
    if (s == ES_OK) s = make_views(ctx, c);
    if (s == ES_OK) s = upload_rope(ctx, c);
    if (s == ES_OK) s = make_pool(ctx, c);
    if (s == ES_OK) s = make_sets(ctx, c);
    if (s == ES_OK && ctx->model->ss) s = ss_setup(ctx, c);
    if (s == ES_OK) ctx->impl = c; /* the warm-up runs forwards on it */
    if (s == ES_OK && G && d->policy.measure_fused) s = measure_fused(ctx, c);
    if (s == ES_OK && d->policy.warm_up) s = warm_up(ctx, c);
    if (s != ES_OK) {
        ctx->impl = NULL;
        ctx_free(ctx, c);
        return s;
    }
    ctx->impl = c;
    return ES_OK;
}

void es__vk_ctx_destroy(es_context *ctx) {
    if (ctx->impl) ctx_free(ctx, ctx->impl);
    ctx->impl = NULL;
}

/* ---- recording */
#define NO_NORM UINT32_MAX /* rec_post_norm: no norm follows in the same dispatch */

static void rec_norm(vk_ctx *c, es__vk_rec *r, uint32_t n, uint32_t g_off, bool gather, float eps) {
    es__pc_rmsnorm pc = {(uint32_t)c->w->model->hp.n_embd, n, c->E32, g_off, gather ? 1u : 0u, eps, 0.0f, 0u, 0u};
    es__vk_rec_dispatch(r, gather ? "rmsnorm_out" : "rmsnorm", c->p_norm, c->s_norm, &pc, n, 1, 1);
}

/* gemma2's post-branch norm: x += s rmsnorm(xn) * g (the branch's projection stored into xn; s the
 * residual scale); unless next is NO_NORM, then the norm that comes next over the same rows in
 * the same dispatch, xn = rmsnorm(x) * g2 (next: the float offset of g2), the same bits as its
 * own dispatch gives (rmsnorm.comp). Where decode is bound by dispatches (a 0.6B model on an H200,
 * ~10 us each, docs/perf.md) the two a layer saves so were gemma3's 0.83x of llama's tokens/s. */
static void rec_post_norm(vk_ctx *c, es__vk_rec *r, uint32_t n, uint32_t g_off, uint32_t next, float eps) {
    const es__hparams *hp = &c->w->model->hp;
    const bool fuse = next != NO_NORM;
    es__pc_rmsnorm pc = {(uint32_t)hp->n_embd, n, c->E32, g_off, 0u, eps, hp->residual_scale, fuse ? 1u : 0u,
                         fuse ? next : 0u};
    es__vk_rec_dispatch(r, fuse ? "rmsnorm_post_add_norm" : "rmsnorm_post_add", c->p_norm, c->s_post, &pc, n, 1, 1);
}

/* The fields of a mul_mat call that do not depend on the part. */
static es__pc_mul_mat mat_call(const vk_ctx *c, uint32_t n, uint32_t x_stride, uint32_t y_stride) {
    const es__hparams *hp = &c->w->model->hp;
    es__pc_mul_mat pc;
    memset(&pc, 0, sizeof pc);
    pc.n = n;
    pc.x_stride = x_stride / 4;
    pc.y_stride = y_stride;
    pc.n_head = (uint32_t)hp->n_head;
    pc.n_head_kv = (uint32_t)hp->n_head_kv;
    pc.hd = (uint32_t)hp->head_dim;
    pc.n_rot = (uint32_t)hp->n_rot;
    pc.n_ctx = c->n_ctx;
    return pc;
}

/* mat_call for a residual branch's output projection (branch_epi): its add scales the branch. */
static es__pc_mul_mat branch_call(const vk_ctx *c, uint32_t n, uint32_t x_stride) {
    es__pc_mul_mat pc = mat_call(c, n, x_stride, c->E32);
    if (!post_norms(c)) pc.scale = c->w->model->hp.residual_scale;
    return pc;
}

/* Projection proj of layer l over n_main token rows and n_ss fused stream rows after them (the
 * streams' LoRA, when they have one, through msa_vk.c). */
static es_status rec_proj(vk_ctx *c, es__vk_rec *r, const char *op, uint32_t l, int proj, const es__vk_mat *m,
                          const VkDescriptorSet *sets, uint32_t epi, es__pc_mul_mat *pc, uint32_t n_main, uint32_t g) {
    if (pc->n == n_main) return es__vk_rec_mul_mat(r, op, m, epi, false, sets, pc);
    const VkDescriptorSet *lora_sets = NULL;
    ES_TRY(es__vk_msa_rec_proj(c->msa, r, (int32_t)l, proj, n_main, g, pc, &lora_sets));
    if (!lora_sets) return es__vk_rec_mul_mat(r, op, m, epi, false, sets, pc);
    return es__vk_rec_mul_mat(r, op, m, epi, true, lora_sets, pc);
}

static void rec_embed(vk_ctx *c, es__vk_rec *r, uint32_t n) {
    const es__vk_model *w = c->w;
    for (uint32_t i = 0; i < w->tok_embd.n_parts; i++) {
        const es__vk_part *pt = &w->tok_embd.parts[i];
        es__pc_get_rows pc = {w->tok_embd.K, (uint32_t)w->model->hp.n_embd, n, pt->row0, pt->rows, c->E32,
                              w->tok_embd.team, w->model->hp.embd_scale};
        es__vk_rec_dispatch(r, "get_rows", c->p_get_rows, c->s_embd[i], &pc, n, 1, 1);
    }
}

/* Layer l's pre-attention ops over nl rows: RMSNorm (unless the previous layer's post-branch
 * norm did it: normed); QKV projection with RoPE and the KV write fused (n token rows, the fused
 * stream rows after them through msa_vk.c). With per-head Q/K norms (qk_norm) the projection
 * stores the rows and one more dispatch does biases, norms, RoPE and the KV write
 * (qk_norm_rope.comp), stream rows (g per token) at their node's position. */
static es_status rec_pre(vk_ctx *c, es__vk_rec *r, uint32_t l, uint32_t n, uint32_t nl, uint32_t g, bool normed) {
    const es__hparams *hp = &c->w->model->hp;
    const es__vk_layer *vl = &c->w->layers[l];
    if (!normed) rec_norm(c, r, nl, vl->attn_norm, false, hp->rms_eps);
    es__pc_mul_mat pc = mat_call(c, nl, c->E32, c->QKV32);
    pc.bias_off = bias_off(c, l);
    pc.rope_off = es__vk_rope_off(c->w, c->n_ctx, l);
    pc.rope_stride = es__vk_rope_stride(c->w, c->n_ctx, l);
    const uint32_t epi = es__vk_qkv_epi(c->w);
    ES_TRY(rec_proj(c, r, "mul_mat_qkv", l, ES__VK_SS_QKV, &vl->qkv, c->ls[l].qkv, epi, &pc, n, g));
    if (epi == ES__EPI_ROPE_KV) return ES_OK;
    es__pc_qk_norm_rope pq = es__vk_qk_norm_call(c->w, l, nl, c->QKV32, c->n_ctx);
    pq.bias_off = bias_off(c, l);
    pq.ss_t0 = n;
    pq.ss_g = g;
    es__vk_rec_dispatch(r, "qk_norm_rope", c->p_qk_norm, c->ls[l].qk_norm, &pq, nl, (uint32_t)(hp->n_head + hp->n_head_kv), 1);
    return ES_OK;
}

/* Layer l's tree attention over n token rows, [merge]; with spec_chunk (ALSpec, one decode
 * token) the speculative flash decode's reducer instead of the merge. */
static void rec_attn(vk_ctx *c, es__vk_rec *r, uint32_t l, uint32_t n, uint32_t spec_chunk) {
    const es__hparams *hp = &c->w->model->hp;
    const uint32_t hd = (uint32_t)hp->head_dim;
    for (uint32_t t0 = 0, k = 0; t0 < n; t0 += ES__ATTN_CHUNK, k++) {
        es__pc_attn pa = {t0, ES__MIN(ES__ATTN_CHUNK, n - t0), (uint32_t)hp->n_head, (uint32_t)hp->n_head_kv, hd,
                          c->QKV32, c->n_ctx, c->split, c->max_splits, c->Q32, hp->attn_scale,
                          (uint32_t)es__layer_window(hp, (int32_t)l), hp->attn_softcap, 0, 0, 0};
        es__vk_rec_dispatch_indirect(r, "attn", c->p_attn, c->ls[l].attn, &pa, c->step.buf,
                                     ((VkDeviceSize)c->step_ind + 8 * k) * 4);
        if (spec_chunk) { /* ALSpec: one decode token; the reducer gates on its own verdict */
            es__pc_attn_spec ps = {0, (uint32_t)hp->n_head, hd, c->split, c->max_splits, c->Q32, spec_chunk, l, 0};
            es__vk_rec_dispatch(r, "attn_spec", c->p_spec, c->s_spec, &ps, 1, 1, 1);
        } else if (c->max_splits > 1) { /* its grid is empty when no token of the chunk needs two splits */
            es__pc_attn_merge pm = {t0, (uint32_t)hp->n_head, hd, c->split, c->max_splits, c->Q32};
            es__vk_rec_dispatch_indirect(r, "attn_merge", c->p_merge, c->s_merge, &pm, c->step.buf,
                                         ((VkDeviceSize)c->step_ind + 8 * k + 4) * 4);
        }
    }
}

/* ALSpec's attention of one decode token in two parts (forward_part): the speculation's splits
 * (the first chunk and those of the last S keys) folded into SPEC alone, or the middle splits
 * and the exact fold with the check over every split's partials, the first part's included. */
static void rec_attn_part(vk_ctx *c, es__vk_rec *r, uint32_t l, uint32_t chunk, int32_t n_keys, bool spec) {
    const es__hparams *hp = &c->w->model->hp;
    const uint32_t hd = (uint32_t)hp->head_dim;
    int32_t s2 = 0;
    es__spec_window(n_keys, (int32_t)chunk, &s2);
    const es__pc_attn pa = {0, 1, (uint32_t)hp->n_head, (uint32_t)hp->n_head_kv, hd, c->QKV32, c->n_ctx, c->split,
                            c->max_splits, c->Q32, hp->attn_scale, (uint32_t)es__layer_window(hp, (int32_t)l),
                            hp->attn_softcap, spec ? 1u : 2u, chunk / c->split, (uint32_t)s2 / c->split};
    es__vk_rec_dispatch_indirect(r, "attn", c->p_attn, c->ls[l].attn, &pa, c->step.buf, (VkDeviceSize)c->step_ind * 4);
    const es__pc_attn_spec ps = {0, (uint32_t)hp->n_head, hd, c->split, c->max_splits, c->Q32, chunk, l, spec};
    es__vk_rec_dispatch(r, "attn_spec", c->p_spec, c->s_spec, &ps, 1, 1, 1);
}

/* Layer l's post-attention ops over nl rows: output projection + residual; RMSNorm; gate/up
 * projection with SwiGLU fused; down projection + residual. With post-branch norms (gemma2) each
 * branch's norm and add is one dispatch with the norm after it: the FFN's, and after the down
 * projection `next` (the float offset of the next norm's weights, or NO_NORM: record_next). */
static es_status rec_post(vk_ctx *c, es__vk_rec *r, uint32_t l, uint32_t n, uint32_t nl, uint32_t g, uint32_t next) {
    const es__hparams *hp = &c->w->model->hp;
    const es__vk_layer *vl = &c->w->layers[l];
    const vk_lsets *s = &c->ls[l];
    es__pc_mul_mat pc = branch_call(c, nl, c->Q32);
    ES_TRY(rec_proj(c, r, "mul_mat_wo", l, ES__VK_SS_WO, &vl->wo, s->wo, branch_epi(c), &pc, n, g));
    if (post_norms(c))
        rec_post_norm(c, r, nl, vl->post_attn_norm, vl->ffn_norm, hp->rms_eps);
    else
        rec_norm(c, r, nl, vl->ffn_norm, false, hp->rms_eps);
    pc = mat_call(c, nl, c->E32, c->F32);
    ES_TRY(rec_proj(c, r, "mul_mat_gateup", l, ES__VK_SS_GATEUP, &vl->gateup, s->gateup, glu_epi(c), &pc, n, g));
    pc = branch_call(c, nl, c->F32);
    ES_TRY(rec_proj(c, r, "mul_mat_down", l, ES__VK_SS_DOWN, &vl->down, s->down, branch_epi(c), &pc, n, g));
    if (post_norms(c)) rec_post_norm(c, r, nl, vl->post_ffn_norm, next, hp->rms_eps);
    return ES_OK;
}

/* Rows layer l runs over: the n token rows, plus the fused stream rows in the MSA layers. */
static uint32_t layer_rows(const vk_ctx *c, uint32_t l, uint32_t n, uint32_t ss) {
    return n + es__vk_msa_fused_rows(c->msa, (int32_t)l, n, ss);
}

/* With post-branch norms, the norm rec_post_norm does after layer l's post-FFN norm (NO_NORM:
 * none) when the recording goes on to layer l + 1 < hi, or to the head when hi is the last
 * layer and head is set: layer l + 1's attention norm over the same rows (not where the fused
 * stream rows join, at the first MSA layer: they are not in x yet), or the output norm when the
 * head reads every row in place: n_out == n, as out_rows ascend they are 0..n - 1, the fused
 * stream rows after them (write_step). Otherwise the head gathers rows (rmsnorm_out) that other
 * workgroups of the same dispatch would still be updating, so it keeps its own norm, and so does
 * the upper part of a pruning call (its rows moved by the compaction, x alone); the lower part
 * ends in the early exit, which reads x. */
static uint32_t record_next(const vk_ctx *c, uint32_t l, uint32_t hi, bool head, uint32_t n, uint32_t n_out,
                            uint32_t ss) {
    if (!post_norms(c)) return NO_NORM;
    if (l + 1 < hi)
        return layer_rows(c, l + 1, n, ss) == layer_rows(c, l, n, ss) ? c->w->layers[l + 1].attn_norm : NO_NORM;
    return head && l + 1 == (uint32_t)c->w->model->hp.n_layer && n_out == n ? c->w->output_norm : NO_NORM;
}

/* Layer l over n token rows: seven dispatches (eight when attention needs its merge; one more
 * with per-head Q/K norms), post-branch norms included (their pre-norms ride in them: normed,
 * next). With fused streams the MSA layers carry each token's stream rows after the n token rows
 * through the same dispatches, plus their own attention (and their LoRA's A products). */
static es_status rec_layer(vk_ctx *c, es__vk_rec *r, uint32_t l, uint32_t n, uint32_t ss, uint32_t spec_chunk,
                           bool normed, uint32_t next) {
    const uint32_t g = ES__VK_SS_FUSED_G(ss);
    if (ss) ES_TRY(es__vk_msa_rec_layer(c->msa, r, (int32_t)l, n, ss));
    const uint32_t nl = layer_rows(c, l, n, ss);
    ES_TRY(rec_pre(c, r, l, n, nl, g, normed));
    rec_attn(c, r, l, n, spec_chunk);
    if (nl > n) es__vk_msa_rec_attn(c->msa, r, (int32_t)l, n, g);
    return rec_post(c, r, l, n, nl, g, next);
}

/* The output head over the wanted rows, then (fused streams) the stream rows; normed: the last
 * layer's post-branch norm did the output norm (record_next). */
static es_status rec_head(vk_ctx *c, es__vk_rec *r, uint32_t n, uint32_t n_out, uint32_t ss, bool normed) {
    const es__hparams *hp = &c->w->model->hp;
    const uint32_t n_head = n_out + (ss & ES__VK_SS_FUSED ? n * ES__VK_SS_FUSED_G(ss) : 0u);
    if (!normed) rec_norm(c, r, n_head, c->w->output_norm, true, hp->rms_eps);
    es__pc_mul_mat pc = mat_call(c, n_head, c->E32, c->V32);
    pc.scale = hp->logit_mul; /* granite's, before gemma2's soft-capping */
    pc.softcap = hp->final_softcap;
    return es__vk_rec_mul_mat(r, "mul_mat_out", c->w->out, ES__EPI_STORE, false, c->s_out, &pc);
}

/* Pruning's compaction of n survivors (their batch indices in the step's KEEP array): the
 * residual rows and the KV the layers below the prune layer wrote move down, in ascending order
 * within each column (kv_move.comp), so no source is overwritten before it is read. */
static es_status rec_compact(vk_ctx *c, es__vk_rec *r, uint32_t n, uint32_t below, uint32_t ss) {
    const es__hparams *hp = &c->w->model->hp;
    es__pc_kv_move pc = {n, 0, c->E32, c->rows, 1, 0};
    es__vk_rec_dispatch(r, "prune_move", c->p_kv_move, c->s_move_x, &pc, 1, 1, 1);
    ES_TRY(es__vk_msa_rec_compact(c->msa, r, n, ss));
    /* the command buffer is replayed at other n_past: the kernel reads it from the step data */
    es__pc_kv_move pk = {n, 0, (uint32_t)hp->head_dim, c->n_ctx, (uint32_t)hp->n_head_kv, 1};
    for (uint32_t l = 0; l < below; l++)
        es__vk_rec_dispatch(r, "prune_move", c->p_kv_move, c->ls[l].kv_move, &pk, (uint32_t)hp->n_head_kv, 2, 1);
    return ES_OK;
}

/* Records cb: the whole forward (PART_ALL), or a pruning call's layers below the prune layer
 * and the early exit (PART_BELOW), or the layers from the prune layer on and the head
 * (PART_ABOVE, after the compaction when some tokens went). */
static es_status record(es_context *ctx, vk_ctx *c, vk_cb *cb) {
    const uint32_t n = (uint32_t)cb->n, L = (uint32_t)ctx->model->hp.n_layer;
    const uint32_t P = ctx->model->ss ? (uint32_t)ctx->model->ss->prune_layer : L;
    es__vk_rec r;
    es__vk_rec_begin(&r, c->d, cb->cb, cb->queries, cb->queries ? ES__MAX_QUERIES : 0, cb->ops);
    if (cb->part != PART_ABOVE) rec_embed(c, &r, n);
    if (cb->compact) ES_TRY(rec_compact(c, &r, n, P, cb->ss));
    const uint32_t lo = cb->part == PART_ABOVE ? P : 0, hi = cb->part == PART_BELOW ? P : L;
    const bool head = cb->part != PART_BELOW;
    bool normed = false; /* the previous layer's post-branch norm did this one's pre-norm */
    for (uint32_t l = lo; l < hi; l++) {
        const uint32_t next = record_next(c, l, hi, head, n, (uint32_t)cb->n_out, cb->ss);
        ES_TRY(rec_layer(c, &r, l, n, cb->ss, cb->spec_chunk, normed, next));
        normed = next != NO_NORM;
    }
    if (!head)
        ES_TRY(es__vk_msa_rec_exit(c->msa, &r, (uint32_t)cb->n_out));
    else
        ES_TRY(rec_head(c, &r, n, (uint32_t)cb->n_out, cb->ss, normed));
    ES_TRY(es__vk_rec_end(&r));
    cb->n_dispatch = r.n_dispatch;
    cb->n_queries = r.n_queries;
    return ES_OK;
}

/* The command buffer for key: cached, else recorded into the least recently used slot. */
static es_status get_cb(es_context *ctx, vk_ctx *c, const vk_cb *key, vk_cb **out) {
    es__vk_dev *d = c->d;
    vk_cb *lru = &c->cbs[0];
    for (int i = 0; i < ES__CB_CACHE; i++) {
        vk_cb *e = &c->cbs[i];
        if (e->cb && e->n == key->n && e->n_out == key->n_out && e->ss == key->ss && e->part == key->part &&
            e->compact == key->compact && e->spec_chunk == key->spec_chunk &&
            (e->queries != VK_NULL_HANDLE) == d->profile) {
            e->used = ++c->clock;
            *out = e;
            return ES_OK;
        }
        if (!e->cb || e->used < lru->used) lru = e;
    }
    if (!lru->cb) {
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        ai.commandPool = d->pool;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        ES_VK_TRY(d, vkAllocateCommandBuffers(d->dev, &ai, &lru->cb));
    } else {
        ES_VK_TRY(d, vkResetCommandBuffer(lru->cb, 0));
    }
    if (d->profile && !lru->queries) {
        ES_TRY(es__vk_query_pool_create(d, ES__MAX_QUERIES, &lru->queries));
        lru->ops = es__calloc(d->alloc, ES__MAX_QUERIES, sizeof *lru->ops);
        ES_RETURN_IF(!lru->ops, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    } else if (!d->profile && lru->queries) {
        vkDestroyQueryPool(d->dev, lru->queries, NULL);
        lru->queries = VK_NULL_HANDLE;
    }
    lru->n = key->n;
    lru->n_out = key->n_out;
    lru->ss = key->ss;
    lru->part = key->part;
    lru->compact = key->compact;
    lru->spec_chunk = key->spec_chunk;
    lru->used = ++c->clock;
    es_status s = record(ctx, c, lru);
    if (s != ES_OK) {
        lru->n = 0; /* never reuse a half-recorded buffer */
        return s;
    }
    *out = lru;
    return ES_OK;
}

/* ---- forward */
/* Writes the step data of f and the attention grids of its token chunks. */
static void write_step(const es_context *ctx, vk_ctx *c, const es__fwd *f, uint32_t ss) {
    int32_t *s = c->step.map;
    es__vk_step_write(s, c->step_stride, f->n_past, f->n, f->tokens, f->pos, f->dfs_end, f->out_rows, f->n_out,
                      c->depth_count);
    /* fused streams: the output head's rows after the wanted ones are the stream rows */
    int32_t *out_rows = s + ES_STEP_HDR + ES_STEP_OUT_ROWS * c->step_stride + f->n_out;
    for (int32_t i = 0; (ss & ES__VK_SS_FUSED) && i < f->n * f->n_streams; i++) out_rows[i] = f->n + i;
    /* per token chunk: the attention grid (splits up to the chunk's largest position) and the
     * merge grid, empty when no token of the chunk needs more than one split */
    uint32_t *ind = (uint32_t *)(s + c->step_ind);
    const uint32_t n = (uint32_t)f->n, heads = (uint32_t)ctx->model->hp.n_head;
    for (uint32_t t0 = 0, k = 0; t0 < n; t0 += ES__ATTN_CHUNK, k++) {
        const uint32_t t1 = ES__MIN(n, t0 + ES__ATTN_CHUNK);
        int32_t maxp = 0;
        for (uint32_t t = t0; t < t1; t++) maxp = ES__MAX(maxp, f->pos[t]);
        const uint32_t splits = (uint32_t)maxp / c->split + 1;
        const uint32_t grids[8] = {((t1 - t0) * heads + c->attn_per_wg - 1) / c->attn_per_wg, splits, 1, 0,
                                   splits > 1 ? heads : 0, t1 - t0, 1, 0};
        memcpy(ind + 8 * k, grids, sizeof grids);
    }
}

/* es_context_abort is taken before each submission of a forward call, so a cancelled call
 * stops within one submission; the KV the call has not written yet is untouched. */
static es_status check_abort(es_context *ctx, vk_ctx *c, const char *part) {
    if (!es__context_abort_take(ctx)) return ES_OK;
    return es__fail(c->d->err, ES_ERR_CANCELLED, "forward cancelled by es_context_abort before %s", part);
}

/* Flushes the step data, submits cb and waits. */
static es_status run_cb(vk_ctx *c, const vk_cb *cb) {
    es__vk_dev *d = c->d;
    ES_TRY(es__vk_buf_flush(d, &c->step));
    ES_TRY(es__vk_submit_wait(d, cb->cb));
    d->stats->n_forward_submits++;
    d->stats->n_dispatches += cb->n_dispatch;
    if (cb->queries) ES_TRY(es__vk_profile_collect(d, cb->queries, cb->n_queries, cb->ops));
    return ES_OK;
}

/* ALSpec: each layer's lambda and flags (gate; force a miss) for attn_spec.comp. */
static es_status alspec_in(vk_ctx *c, const es__fwd *f, uint32_t L) {
    float *v = c->verd.map;
    for (uint32_t l = 0; l < L; l++) {
        const bool force = f->alspec->force_miss && f->alspec->force_miss[l];
        const float in[8] = {f->alspec->lambda, force ? 3.0f : 1.0f, 0, 0, 0, 0, 0, 0};
        memcpy(v + 8 * l, in, sizeof in);
    }
    return es__vk_buf_flush(c->d, &c->verd);
}

/* ALSpec: each layer's verdict, as the device decided it. */
static es_status alspec_out(vk_ctx *c, const es__fwd *f, uint32_t L) {
    ES_TRY(es__vk_buf_invalidate(c->d, &c->verd));
    const float *v = c->verd.map;
    for (uint32_t l = 0; l < L; l++)
        f->alspec->verdicts[l] = (es__spec_verdict){v[8 * l + 4] != 0.0f, v[8 * l + 5] != 0.0f, v[8 * l + 6], v[8 * l + 7]};
    return ES_OK;
}

/* The layers from `part`'s first on and the head for f (its step data written), then the logits
 * and what the streams need to know. */
static es_status run_to_head(es_context *ctx, vk_ctx *c, const es__fwd *f, int part, bool compact, uint32_t lo) {
    const uint32_t L = (uint32_t)ctx->model->hp.n_layer;
    const uint32_t ss = es__vk_msa_flags(c->msa, (uint32_t)f->n, (uint32_t)f->n_streams, lo, L);
    write_step(ctx, c, f, ss);
    if (compact) memcpy((int32_t *)c->step.map + ES_STEP_HDR + ES_STEP_KEEP * c->step_stride, c->kept.orig,
                        sizeof(int32_t) * (size_t)f->n);
    const vk_cb key = {.n = f->n, .n_out = f->n_out, .ss = ss, .part = part, .compact = compact,
                       .spec_chunk = f->alspec ? (uint32_t)f->alspec->chunk : 0};
    vk_cb *cb = NULL;
    ES_TRY(get_cb(ctx, c, &key, &cb));
    ES_TRY(check_abort(ctx, c, part == PART_ABOVE ? "the layers above the prune layer" : "its submission"));
    if (f->alspec) ES_TRY(alspec_in(c, f, L));
    ES_TRY(run_cb(c, cb));
    if (f->alspec) ES_TRY(alspec_out(c, f, L));
    ES_TRY(es__vk_buf_invalidate(c->d, &c->logits));
    const uint32_t V = (uint32_t)ctx->model->hp.n_vocab;
    const float *src = c->logits.map;
    for (int32_t r = 0; r < f->n_out; r++)
        memcpy(f->logits + (size_t)r * V, src + (size_t)r * c->V32, sizeof(float) * V);
    if (c->msa) es__vk_msa_after_forward(c->msa, f, ss);
    return ES_OK;
}

/* A pruning call (backend.h): the layers below the prune layer and the early exit of the
 * n_parents tokens with children, the decision, then the survivors alone. */
static es_status forward_pruned(es_context *ctx, vk_ctx *c, const es__fwd *f, int32_t n_parents) {
    const uint32_t P = (uint32_t)ctx->model->ss->prune_layer;
    const uint32_t ss = es__vk_msa_flags(c->msa, (uint32_t)f->n, (uint32_t)f->n_streams, 0, P);
    write_step(ctx, c, f, ss);
    memcpy((int32_t *)c->step.map + ES_STEP_HDR + ES_STEP_EXIT_ROWS * c->step_stride, c->parents,
           sizeof(int32_t) * (size_t)n_parents);
    const vk_cb key = {.n = f->n, .n_out = n_parents, .ss = ss, .part = PART_BELOW};
    vk_cb *cb = NULL;
    ES_TRY(get_cb(ctx, c, &key, &cb));
    ES_TRY(check_abort(ctx, c, "its submission"));
    ES_TRY(run_cb(c, cb));
    ES_TRY(es__vk_msa_decide(c->msa, f, c->parents, n_parents));
    if (es__prune_compact(f, &c->kept) == f->n) return run_to_head(ctx, c, f, PART_ABOVE, false, P);
    const es__pruned_batch *k = &c->kept;
    es__fwd above = *f;
    above.n = k->n;
    above.tokens = k->tokens;
    above.pos = k->pos;
    above.dfs_start = k->dfs_start;
    above.dfs_end = k->dfs_end;
    above.parent = k->parent;
    above.n_out = k->n_out;
    above.out_rows = k->out_rows;
    return run_to_head(ctx, c, &above, PART_ABOVE, true, P);
}

/* ALSpec's ENTER(layer) of one decode token (es__alspec_part): the embedding (layer -1) or
 * layer's post-attention ops on x and attn, then the next layer's pre-attention ops or the head
 * (one row: the head's is row 0 in place, record_next). With post-branch norms as the forward
 * records them, though ALSpec refuses both architectures that have them today (gemma2 always
 * soft-caps, gemma3 always has sliding layers: es__context_caps). */
static es_status rec_enter(vk_ctx *c, es__vk_rec *r, int32_t layer) {
    const int32_t L = c->w->model->hp.n_layer;
    uint32_t next = NO_NORM;
    if (layer < 0) {
        rec_embed(c, r, 1);
    } else {
        next = record_next(c, (uint32_t)layer, (uint32_t)L, true, 1, 1, 0);
        ES_TRY(rec_post(c, r, (uint32_t)layer, 1, 1, 0, next));
    }
    if (layer + 1 < L) return rec_pre(c, r, (uint32_t)(layer + 1), 1, 1, 0, next != NO_NORM);
    return rec_head(c, r, 1, 1, 0, next != NO_NORM);
}

/* One part of a decode token over two contexts (es__alspec_part), recorded into the device's
 * one-off command buffer: its inputs staged into x and attn, the dispatches, its outputs read
 * back. The attention parts' reducer runs ungated with lambda 0: the caller decides; the
 * speculation part leaves its splits' partials for the attention part that follows it (the core
 * checks the order; nothing else runs on the context in between). */
static es_status forward_part(es_context *ctx, vk_ctx *c, const es__fwd *f) {
    es__vk_dev *d = c->d;
    const es__alspec_part *p = f->part;
    const es__hparams *hp = &ctx->model->hp;
    const uint32_t L = (uint32_t)hp->n_layer, qd = (uint32_t)(hp->n_head * hp->head_dim);
    const VkDeviceSize fl = sizeof(float);
    write_step(ctx, c, f, 0);
    ES_TRY(es__vk_buf_flush(d, &c->step));
    if (p->op == ES__AL_ENTER && p->layer >= 0) {
        es__vk_stager st;
        ES_TRY(es__vk_stager_init(d, &st, (c->E32 + c->Q32) * fl));
        es_status s = es__vk_stage(d, &st, es__vk_region_buf(&c->arena, &c->r_x), c->r_x.off, p->x_in, hp->n_embd * fl);
        if (s == ES_OK) s = es__vk_stage(d, &st, es__vk_region_buf(&c->arena, &c->r_attn), c->r_attn.off, p->att_in, qd * fl);
        if (s == ES_OK) s = es__vk_stager_flush(d, &st);
        es__vk_stager_free(d, &st);
        ES_TRY(s);
    }
    if (p->op != ES__AL_ENTER) {
        memset(c->verd.map, 0, (size_t)L * 8 * sizeof(float)); /* lambda 0, no flags: ungated */
        ES_TRY(es__vk_buf_flush(d, &c->verd));
    }
    es__vk_rec r;
    ES_VK_TRY(d, vkResetCommandBuffer(d->once, 0));
    es__vk_rec_begin(&r, d, d->once, VK_NULL_HANDLE, 0, NULL);
    const uint32_t l = (uint32_t)p->layer;
    if (p->op != ES__AL_ENTER)
        rec_attn_part(c, &r, l, (uint32_t)p->chunk, f->n_past + 1, p->op == ES__AL_SPEC);
    else
        ES_TRY(rec_enter(c, &r, p->layer));
    ES_TRY(es__vk_rec_end(&r));
    ES_TRY(es__vk_submit_wait(d, d->once));
    d->stats->n_forward_submits++;
    d->stats->n_dispatches += r.n_dispatch;
    if (p->op != ES__AL_ENTER) {
        ES_TRY(es__vk_buf_invalidate(d, &c->verd));
        const float *v = (const float *)c->verd.map + 8 * l;
        *p->verdict = (es__spec_verdict){v[4] != 0.0f, false, v[6], v[7]};
        if (p->op == ES__AL_ATTN)
            ES_TRY(es__vk_read(d, es__vk_region_buf(&c->arena, &c->r_attn), c->r_attn.off, p->exact_out, qd * fl));
        else
            ES_TRY(es__vk_read(d, es__vk_region_buf(&c->arena, &c->r_spec), c->r_spec.off, p->spec_out, qd * fl));
    } else if (p->layer + 1 < (int32_t)L) {
        if (p->x_out) ES_TRY(es__vk_read(d, es__vk_region_buf(&c->arena, &c->r_x), c->r_x.off, p->x_out, hp->n_embd * fl));
    } else {
        ES_TRY(es__vk_buf_invalidate(d, &c->logits));
        memcpy(f->logits, c->logits.map, sizeof(float) * (size_t)hp->n_vocab);
    }
    return ES_OK;
}

es_status es__vk_forward(es_context *ctx, const es__fwd *f) {
    vk_ctx *c = ctx->impl;
    c->d->stats->n_forward++;
    if (f->part) return forward_part(ctx, c, f);
    const int32_t n_parents = f->prune_threshold > 0.0f ? es__prune_parents(f, c->parents) : 0;
    if (n_parents > 0) return forward_pruned(ctx, c, f, n_parents);
    return run_to_head(ctx, c, f, PART_ALL, false, 0);
}

es_status es__vk_stream_logits(es_context *ctx, int32_t i, int32_t g, float *out) {
    vk_ctx *c = ctx->impl;
    ES_RETURN_IF(!c->msa, c->d->err, ES_ERR_INVALID_ARGUMENT, "vulkan: the model has no Speculative Streaming adapter");
    return es__vk_msa_stream_logits(c->msa, i, g, out);
}

es_status es__vk_kv_compact(es_context *ctx, const int32_t *keep, int32_t n_keep) {
    vk_ctx *c = ctx->impl;
    es__vk_dev *d = c->d;
    const es__hparams *hp = &ctx->model->hp;
    int32_t *s = c->step.map;
    s[ES_STEP_NB] = (int32_t)c->step_stride;
    memcpy(s + ES_STEP_HDR + ES_STEP_KEEP * c->step_stride, keep, sizeof *keep * (size_t)n_keep);
    ES_TRY(es__vk_buf_flush(d, &c->step));
    es__vk_rec r;
    es__pc_kv_move pc = {(uint32_t)n_keep, (uint32_t)ctx->n_past, (uint32_t)hp->head_dim, c->n_ctx,
                         (uint32_t)hp->n_head_kv, 0};
    ES_VK_TRY(d, vkResetCommandBuffer(d->once, 0));
    es__vk_rec_begin(&r, d, d->once, VK_NULL_HANDLE, 0, NULL);
    for (int32_t l = 0; l < hp->n_layer; l++)
        es__vk_rec_dispatch(&r, "kv_move", c->p_kv_move, c->ls[l].kv_move, &pc, (uint32_t)hp->n_head_kv, 2, 1);
    ES_TRY(es__vk_rec_end(&r));
    return es__vk_submit_wait(d, d->once);
}

es_status es__vk_kv_shift(es_context *ctx, int32_t n_keep, int32_t n_discard) {
    vk_ctx *c = ctx->impl;
    es__vk_dev *d = c->d;
    const es__hparams *hp = &ctx->model->hp;
    /* one row of the turn back by n_discard positions per table; each layer reads its own */
    for (int32_t t = 0; t < es__rope_tables(hp); t++) {
        const es__rope rope = es__rope_table(hp, ctx->n_ctx, t);
        es__vk_rope_table(&rope, (float *)c->shift_cs.map + (size_t)t * (size_t)hp->n_rot, -n_discard, 1, true);
    }
    ES_TRY(es__vk_buf_flush(d, &c->shift_cs));
    es__pc_kv_shift pc = {(uint32_t)n_keep, (uint32_t)n_discard, (uint32_t)ctx->n_past, (uint32_t)hp->head_dim,
                          c->n_ctx, (uint32_t)hp->n_rot, hp->rope_type == ES_ROPE_NEOX ? 1u : 0u, 0};
    es__vk_rec r;
    ES_VK_TRY(d, vkResetCommandBuffer(d->once, 0));
    es__vk_rec_begin(&r, d, d->once, VK_NULL_HANDLE, 0, NULL);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        pc.cs_off = (uint32_t)es__rope_table_of(hp, l) * (uint32_t)hp->n_rot;
        es__vk_rec_dispatch(&r, "kv_shift", c->p_kv_shift, c->ls[l].kv_shift, &pc, (uint32_t)hp->n_head_kv, 2, 1);
    }
    ES_TRY(es__vk_rec_end(&r));
    return es__vk_submit_wait(d, d->once);
}

es_status es__vk_kv_io(es_context *ctx, int32_t n, float *buf, bool write) {
    vk_ctx *c = ctx->impl;
    es__vk_dev *d = c->d;
    const es__hparams *hp = &ctx->model->hp;
    const VkDeviceSize hd = (VkDeviceSize)hp->head_dim, run = (VkDeviceSize)n * hd * sizeof(float);
    es__vk_stager st;
    if (write) ES_TRY(es__vk_stager_init(d, &st, ES__MAX(run, (VkDeviceSize)16) * 4));
    es_status s = ES_OK;
    for (int32_t l = 0; s == ES_OK && l < hp->n_layer; l++)
        for (int kv = 0; s == ES_OK && kv < 2; kv++) {
            const es__vk_region *r = kv ? &c->ls[l].v : &c->ls[l].k;
            const es__vk_buf *b = es__vk_region_buf(&c->arena, r);
            for (int32_t g = 0; s == ES_OK && g < hp->n_head_kv; g++) {
                const VkDeviceSize off = r->off + (VkDeviceSize)g * c->n_ctx * hd * sizeof(float);
                s = write ? es__vk_stage(d, &st, b, off, buf, run) : es__vk_read(d, b, off, buf, run);
                buf += (size_t)n * (size_t)hd;
            }
        }
    if (write) {
        if (s == ES_OK) s = es__vk_stager_flush(d, &st);
        es__vk_stager_free(d, &st);
    }
    return s;
}

es_status es__vk_kv_slot(es_context *ctx, int32_t layer, int32_t pos, float *buf, bool write) {
    vk_ctx *c = ctx->impl;
    es__vk_dev *d = c->d;
    const es__hparams *hp = &ctx->model->hp;
    const VkDeviceSize hd = (VkDeviceSize)hp->head_dim, run = hd * sizeof(float);
    es__vk_stager st;
    if (write) ES_TRY(es__vk_stager_init(d, &st, run * 2 * (VkDeviceSize)hp->n_head_kv));
    es_status s = ES_OK;
    for (int kv = 0; s == ES_OK && kv < 2; kv++) {
        const es__vk_region *r = kv ? &c->ls[layer].v : &c->ls[layer].k;
        const es__vk_buf *b = es__vk_region_buf(&c->arena, r);
        for (int32_t g = 0; s == ES_OK && g < hp->n_head_kv; g++) {
            const VkDeviceSize off = r->off + ((VkDeviceSize)g * c->n_ctx + (VkDeviceSize)pos) * run;
            s = write ? es__vk_stage(d, &st, b, off, buf, run) : es__vk_read(d, b, off, buf, run);
            buf += hd;
        }
    }
    if (write) {
        if (s == ES_OK) s = es__vk_stager_flush(d, &st);
        es__vk_stager_free(d, &st);
    }
    return s;
}

/* ---- for alspec_vk.c (forward_vk.h) */
void es__vk_fwd_step(es_context *ctx, const es__fwd *f) {
    write_step(ctx, ctx->impl, f, 0);
}

es_status es__vk_fwd_rec_enter(es_context *ctx, es__vk_rec *r, int32_t layer) {
    return rec_enter(ctx->impl, r, layer);
}

void es__vk_fwd_rec_attn_part(es_context *ctx, es__vk_rec *r, int32_t layer, int32_t chunk, int32_t n_keys, bool spec) {
    rec_attn_part(ctx->impl, r, (uint32_t)layer, (uint32_t)chunk, n_keys, spec);
}

es__vk_fwd_io es__vk_fwd_io_of(es_context *ctx) {
    vk_ctx *c = ctx->impl;
    return (es__vk_fwd_io){c->d, bind_region(c, &c->r_x, VK_NULL_HANDLE), bind_region(c, &c->r_attn, VK_NULL_HANDLE),
                           bind_region(c, &c->r_spec, VK_NULL_HANDLE), &c->step, &c->verd, &c->logits, c->n_ctx};
}

es__vk_bind es__vk_fwd_cache(es_context *ctx, int32_t layer, int which) {
    vk_ctx *c = ctx->impl;
    return bind_region(c, which ? &c->ls[layer].v : &c->ls[layer].k, VK_NULL_HANDLE);
}
