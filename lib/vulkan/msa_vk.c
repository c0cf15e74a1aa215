/* msa_vk.c: Speculative Streaming on the Vulkan backend (papers/speculative-streaming.txt 3.2;
 * the CPU twin is lib/cpu/msa.c, the reference tools/train/model.py):
 *   - pruning (3.2.3): at the end of a pruning call's first submission (forward.c) the early exit
 *     output(output_norm(h + up(down(h)))) of the rows of the tokens with children, read back for
 *     the core's decision (prune.h); the survivors' kept hidden states move with their rows;
 *   - fused streams, for batches with few stream rows (the device's policy): every node's γ
 *     rows start at the first MSA layer (Eq. 3) as rows after the batch's own and go through
 *     that layer's and the next ones' dispatches with them; the stream-only LoRA adds its B R in
 *     the projections' epilogues for those rows only, their Q and K are rotated at their node's
 *     position and kept in their rows (streams write no KV), and ss_attn_body.glsl (an
 *     invocation, or on GPUs a subgroup, per row and head) gives them attention to the main
 *     stream's KV of the node's ancestors and itself and to streams <= j of the node (Eq. 2); the output head reads their rows after the wanted ones. One submission;
 *   - otherwise the stream pass of one node after the forward (the main stream's hidden states
 *     copied aside at the first MSA layer): its γ rows through the same layers as a command
 *     buffer recorded per context and replayed, the node in the step data. Only the node whose
 *     stream logits are asked runs (the last accepted one, for the strategy); the values are
 *     the same bits as fused rows give.
 * Both take the architecture's steps (arch.h) as the main stream does: Q, K, V biases (the RoPE
 * epilogue's in the fused rows, ss_rope.comp's in the pass), per-head Q and K norms (qwen3:
 * qk_norm_rope.comp after the projection in both, in place of the epilogue and of ss_rope), GeGLU, post-branch norms, scaled
 * and soft-capped scores in the layer's sliding window, and the soft-capped head (which the
 * early exit shares).
 * Deliberately not here: the main stream (forward.c), verification and drafting (lib/decode). */
#include "msa_vk.h"

#include "adapter.h"
#include "prune.h"

#include <string.h>

#define ES__SS_MAX_QUERIES 128 /* timestamps of one stream pass (--profile) */

/* One matrix bound to one (X, Y) pair: a descriptor set per part. */
typedef struct ss_mm {
    const es__vk_mat *m;
    const struct ss_lora *lora; /* added by the same dispatch, or NULL */
    VkDescriptorSet *sets;
} ss_mm;

/* A stream-only LoRA of one fused projection: Y += B (A X), A stacking the targets' A rows, B
 * their B blocks (block diagonal, or interleaved for gate/up). R = A X is a dispatch of its own
 * (ma); the projection's dispatch adds B R in its epilogue (the mul_mat_lora kernels). */
typedef struct ss_lora {
    bool on;
    uint32_t rank;                    /* rows of A: the rank times the fused targets        */
    es__vk_mat a, b;
    es__tensor ta[3], tb;
    float *host_a[3], *host_b;
    ss_mm ma;
} ss_lora;

/* the stream LoRA of each projection, in msa_vk.h's order (forward.c names them by those) */
enum { LO_QKV = ES__VK_SS_QKV, LO_O = ES__VK_SS_WO, LO_GU = ES__VK_SS_GATEUP, LO_DOWN = ES__VK_SS_DOWN, LO_N };

typedef struct ss_layer {
    ss_lora lora[LO_N];
    ss_mm qkv, wo, gateup, down;      /* stream rows as X and Y, with the LoRA when it is on */
    VkDescriptorSet norm_attn, norm_ffn, rope, attn;
    /* fused streams: the forward's rows as X and Y */
    ss_mm fused[LO_N];                /* the projections with the LoRA (where it is on)     */
    ss_mm fused_a[LO_N];              /* the LoRA's R = A X of the stream rows              */
    VkDescriptorSet attn_fused;
} ss_layer;

struct es__vk_msa {
    es__vk_dev *d;
    es_context *ctx;
    const es__ss_adapter *ss;
    es__vk_ss_res res;
    es__vk_bind *kv;                  /* [2][n_layer] copies of res.k, res.v                */
    uint32_t G, R32;                  /* stream rows; width of LoRA's R and the early exit's */
    es__vk_arena arena;
    es__vk_region r_x0, r_s, r_sn, r_qkv, r_att, r_h, r_lt, r_e, r_en, r_p;
    VkBufferView v_x0, v_s, v_sn, v_qkv, v_att, v_h, v_lt, v_e, v_en, v_p;
    es__vk_buf out_streams, out_exit; /* readback: [G][V32], [nb][V32]                    */
    es__vk_wset ws;
    es__vk_mat prune_down, prune_up;
    es__tensor t_pd, t_pu;
    ss_layer *layers;                 /* [n_msa]                                            */
    VkDescriptorPool pool;
    es__vk_pipeline *p_rows, *p_rope, *p_attn, *p_norm, *p_move;
    bool qk_norm;                     /* p_rope is qk_norm_rope.comp's (arch.h qk_norm)       */
    uint32_t attn_per_wg; /* (row, head) pairs per ss_attn workgroup: an invocation or a subgroup each */
    /* forward hooks */
    VkDescriptorSet s_keep_x, s_move_x0, s_copy_e, s_norm_e;
    ss_mm pd, pu, exit_out;
    VkDescriptorSet s_init_fused;
    /* the stream pass */
    VkDescriptorSet s_init, s_norm_out;
    VkDescriptorSet s_post;           /* gemma2: s += rmsnorm(sn) g, the branch stored in sn;
                                         then (norm2) sn = rmsnorm(s) g2                      */
    ss_mm stream_out;
    VkCommandBuffer cbs[ES_SPEC_MAX_DEPTH + 1]; /* the stream pass of g streams at cbs[g]   */
    VkQueryPool queries[ES_SPEC_MAX_DEPTH + 1]; /* and its timestamps when profiling          */
    const char *query_ops[ES_SPEC_MAX_DEPTH + 1][ES__SS_MAX_QUERIES];
    uint32_t n_queries[ES_SPEC_MAX_DEPTH + 1];
    /* the last forward: its survivors (backend.h) */
    bool valid;
    int32_t n, n_streams, cur_node;   /* cur_node: whose stream logits out_streams holds     */
    uint32_t fused_ceiling;           /* the fused-rows cap the buffers were sized for       */
    int32_t cur_g;                    /* and how many of them                               */
    bool fused;                       /* the streams rode in the forward: logits rows after */
    int32_t n_out;                    /* its n_out rows                                     */
};

static uint32_t up32(uint32_t x) {
    return (x + 31u) & ~31u;
}

static const es__hparams *hparams(const struct es__vk_msa *m) {
    return &m->ctx->model->hp;
}

/* The architecture's gate/up epilogue, and a branch's (post-branch norms store, the norm adds),
 * as forward.c records them (arch.h). */
static bool post_norms(const struct es__vk_msa *m) {
    return hparams(m)->arch->post_norms;
}
static uint32_t glu_epi(const struct es__vk_msa *m) {
    return hparams(m)->arch->act == ES__ACT_GELU ? ES__EPI_GEGLU : ES__EPI_SWIGLU;
}
static uint32_t branch_epi(const struct es__vk_msa *m) {
    return post_norms(m) ? ES__EPI_STORE : ES__EPI_ADD;
}

/* ss_attn's constants for layer l: the main stream's scale, soft-capping and window. */
static es__pc_ss_attn attn_call(const struct es__vk_msa *m, int32_t l, uint32_t n_rows, uint32_t g, uint32_t row0) {
    const es__hparams *hp = hparams(m);
    return (es__pc_ss_attn){n_rows, g, row0, (uint32_t)hp->n_head, (uint32_t)hp->n_head_kv, (uint32_t)hp->head_dim,
                            m->res.QKV32, m->res.n_ctx, m->res.Q32, (uint32_t)es__layer_window(hp, l), hp->attn_scale,
                            hp->attn_softcap};
}

/* ss_attn's workgroups for `pairs` (stream row, head) pairs. */
static uint32_t attn_groups(const struct es__vk_msa *m, uint32_t pairs) {
    return (pairs + m->attn_per_wg - 1) / m->attn_per_wg;
}

static es__vk_bind bind_of(struct es__vk_msa *m, const es__vk_region *r, VkBufferView view) {
    return (es__vk_bind){es__vk_region_buf(&m->arena, r)->buf, r->off, r->size, view};
}

static es__vk_bind bind_buf(const es__vk_buf *b) {
    return (es__vk_bind){b->buf, 0, b->size, VK_NULL_HANDLE};
}

static es__vk_bind write_bind(es__vk_bind b) {
    b.view = VK_NULL_HANDLE;
    return b;
}

/* ---- setup */

static void tensor_view(es__tensor *t, const char *name, const float *data, int64_t n_in, int64_t n_out) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->type = ES__DTYPE_F32;
    t->n_dims = 2;
    t->ne[0] = n_in;
    t->ne[1] = n_out;
    t->ne[2] = t->ne[3] = 1;
    t->data = data;
    t->nbytes = (uint64_t)n_in * (uint64_t)n_out * sizeof(float);
}

/* The stacked A and block B of one fused LoRA: targets t[0..k) with (n_in, n_out) each; gate/up
 * (interleave) puts target 0's B rows at even rows and target 1's at odd rows. */
static es_status lora_build(struct es__vk_msa *m, ss_lora *lo, const es__ss_lora *src, const es__ss_lora_target *t,
                            uint32_t k, bool interleave) {
    const int32_t r = m->ss->lora_rank;
    bool any = false;
    for (uint32_t i = 0; i < k; i++) any = any || src[t[i]].a;
    if (!any) return ES_OK;
    int32_t n_out_total = 0;
    for (uint32_t i = 0; i < k; i++) n_out_total += src[t[i]].n_out;
    const int32_t kr = (int32_t)k * r;
    lo->host_b = es__calloc(m->d->alloc, (size_t)n_out_total * (size_t)kr, sizeof(float));
    ES_RETURN_IF(!lo->host_b, m->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory for the stream LoRA");
    int32_t row0 = 0;
    const es__tensor *ta[3];
    for (uint32_t i = 0; i < k; i++) {
        const es__ss_lora *l = &src[t[i]];
        /* A: the target's rows, or zeros when the target has no LoRA */
        const float *a = l->a;
        if (!a) {
            lo->host_a[i] = es__calloc(m->d->alloc, (size_t)r * (size_t)l->n_in, sizeof(float));
            ES_RETURN_IF(!lo->host_a[i], m->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
            a = lo->host_a[i];
        }
        tensor_view(&lo->ta[i], "ss lora a", a, l->n_in, r);
        ta[i] = &lo->ta[i];
        for (int32_t o = 0; l->b && o < l->n_out; o++) {
            const int32_t row = interleave ? 2 * o + (int32_t)i : row0 + o;
            memcpy(lo->host_b + (size_t)row * (size_t)kr + (size_t)i * (size_t)r, l->b + (size_t)o * (size_t)r,
                   sizeof(float) * (size_t)r);
        }
        row0 += l->n_out;
    }
    tensor_view(&lo->tb, "ss lora b", lo->host_b, kr, n_out_total);
    lo->rank = (uint32_t)kr;
    ES_TRY(es__vk_mat_init(m->d, &lo->a, ta, k, false));
    ES_TRY(es__vk_mat_init(m->d, &lo->b, (const es__tensor *const[]){&lo->tb}, 1, false));
    lo->on = true;
    return ES_OK;
}

static es_status upload(struct es__vk_msa *m) {
    const es__ss_adapter *ss = m->ss;
    const es__hparams *hp = &m->ctx->model->hp;
    es__vk_mat *mats[2 + 8 * 16];
    uint32_t n = 0;
    if (ss->prune_rank > 0) {
        tensor_view(&m->t_pd, "ss.prune_down.weight", ss->prune_down, hp->n_embd, ss->prune_rank);
        tensor_view(&m->t_pu, "ss.prune_up.weight", ss->prune_up, ss->prune_rank, hp->n_embd);
        ES_TRY(es__vk_mat_init(m->d, &m->prune_down, (const es__tensor *const[]){&m->t_pd}, 1, false));
        ES_TRY(es__vk_mat_init(m->d, &m->prune_up, (const es__tensor *const[]){&m->t_pu}, 1, false));
        mats[n++] = &m->prune_down;
        mats[n++] = &m->prune_up;
    }
    static const es__ss_lora_target qkv[3] = {ES__SS_LORA_Q, ES__SS_LORA_K, ES__SS_LORA_V},
                                     o[1] = {ES__SS_LORA_O}, gu[2] = {ES__SS_LORA_GATE, ES__SS_LORA_UP},
                                     dn[1] = {ES__SS_LORA_DOWN};
    for (int32_t i = 0; ss->lora_rank > 0 && i < ss->n_msa; i++) {
        const es__ss_lora *src = ss->lora + (size_t)i * ES__SS_LORA_COUNT;
        ss_layer *L = &m->layers[i];
        ES_TRY(lora_build(m, &L->lora[LO_QKV], src, qkv, 3, false));
        ES_TRY(lora_build(m, &L->lora[LO_O], src, o, 1, false));
        ES_TRY(lora_build(m, &L->lora[LO_GU], src, gu, 2, true));
        ES_TRY(lora_build(m, &L->lora[LO_DOWN], src, dn, 1, false));
        for (int k = 0; k < LO_N; k++)
            if (L->lora[k].on && n + 2 <= ES__ARRAY_LEN(mats)) {
                mats[n++] = &L->lora[k].a;
                mats[n++] = &L->lora[k].b;
            }
    }
    if (n > 0) ES_TRY(es__vk_wset_upload(&m->ws, mats, n, NULL, NULL));
    /* the stream embeddings, one padded row per stream */
    const size_t bytes = (size_t)m->G * m->res.E32 * sizeof(float);
    float *p = es__calloc(m->d->alloc, (size_t)m->G * m->res.E32, sizeof(float));
    ES_RETURN_IF(!p, m->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    for (uint32_t j = 0; j < m->G; j++)
        memcpy(p + (size_t)j * m->res.E32, ss->stream_embd + (size_t)j * (size_t)hp->n_embd, sizeof(float) * (size_t)hp->n_embd);
    es__vk_stager st;
    es_status s = es__vk_stager_init(m->d, &st, bytes);
    if (s == ES_OK) {
        s = es__vk_stage(m->d, &st, es__vk_region_buf(&m->arena, &m->r_p), m->r_p.off, p, bytes);
        if (s == ES_OK) s = es__vk_stager_flush(m->d, &st);
        es__vk_stager_free(m->d, &st);
    }
    es__free(m->d->alloc, p);
    return s;
}

static es_status plan_memory(struct es__vk_msa *m) {
    es__vk_dev *d = m->d;
    const es__vk_ss_res *r = &m->res;
    const VkDeviceSize f = sizeof(float), G = m->G, nb = r->nb;
    es__vk_arena_init(d, &m->arena);
    struct {
        es__vk_region *reg;
        VkDeviceSize bytes;
    } plan[] = {
        {&m->r_x0, nb * r->E32 * f},      {&m->r_s, G * r->E32 * f},          {&m->r_sn, G * r->E32 * f},
        {&m->r_qkv, G * r->QKV32 * f},    {&m->r_att, G * r->Q32 * f},        {&m->r_h, G * r->F32 * f},
        {&m->r_lt, ES__MAX(ES__MAX(G, nb), r->fused_extra) * m->R32 * f},
        {&m->r_e, nb * r->E32 * f},       {&m->r_en, nb * r->E32 * f},        {&m->r_p, G * r->E32 * f},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(plan); i++) ES_TRY(es__vk_arena_reserve(d, &m->arena, plan[i].bytes, plan[i].reg));
    ES_TRY(es__vk_arena_alloc(d, &m->arena, ES__VK_MEM_DEVICE, "the Speculative Streaming rows"));
    /* zero once: row padding stays zero and finite, as the kernels expect */
    for (uint32_t i = 0; i < m->arena.n; i++) ES_TRY(es__vk_fill(d, &m->arena.chunks[i], 0, VK_WHOLE_SIZE, 0));
    ES_TRY(es__vk_buf_create(d, G * r->V32 * f, ES__VK_MEM_READBACK, "the stream logits", &m->out_streams));
    if (m->ss->prune_rank > 0)
        ES_TRY(es__vk_buf_create(d, nb * r->V32 * f, ES__VK_MEM_READBACK, "the early-exit logits", &m->out_exit));
    if (!d->use.texel) return ES_OK;
    const VkFormat f4 = VK_FORMAT_R32G32B32A32_SFLOAT;
    struct {
        es__vk_region *reg;
        VkBufferView *view;
    } views[] = {{&m->r_x0, &m->v_x0}, {&m->r_s, &m->v_s},   {&m->r_sn, &m->v_sn}, {&m->r_qkv, &m->v_qkv},
                 {&m->r_att, &m->v_att}, {&m->r_h, &m->v_h}, {&m->r_lt, &m->v_lt},
                 {&m->r_e, &m->v_e},   {&m->r_en, &m->v_en}, {&m->r_p, &m->v_p}};
    for (size_t i = 0; i < ES__ARRAY_LEN(views); i++)
        ES_TRY(es__vk_view_create(d, es__vk_region_buf(&m->arena, views[i].reg), f4, views[i].reg->off,
                                  views[i].reg->size, views[i].view));
    return ES_OK;
}

/* Descriptor sets of mat (whose planes live in ws) with X and Y, the KV cache the RoPE epilogue
 * writes (kc, vc), and when lo is on, its R (rows of m->r_lt) and B. */
static es_status mm_sets_kv(struct es__vk_msa *m, ss_mm *out, const es__vk_mat *mat, es__vk_wset *ws, es__vk_bind x,
                            es__vk_bind y, es__vk_bind kc, es__vk_bind vc, const ss_lora *lo) {
    const bool lora = lo && lo->on;
    es__vk_pipeline *p;
    if (lora)
        ES_TRY(es__vk_mul_mat_lora_pipe(m->d, mat, 1, ES__EPI_STORE, &p));
    else
        ES_TRY(es__vk_mul_mat_pipe(m->d, mat, 1, ES__EPI_STORE, &p));
    ES_RETURN_IF(lora && lo->b.n_parts != 1, m->d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: a stream LoRA larger than one binding range");
    out->m = mat;
    out->lora = lora ? lo : NULL;
    out->sets = es__calloc(m->d->alloc, mat->n_parts, sizeof *out->sets);
    ES_RETURN_IF(!out->sets, m->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    for (uint32_t i = 0; i < mat->n_parts; i++) {
        /* W, S, X, Y, then what only mul_mat's RoPE epilogue reads, then the LoRA's A and B */
        es__vk_bind b[10], unused;
        es__vk_part_binds(ws, &mat->parts[i], &b[0], &b[1]);
        b[2] = x;
        b[3] = y;
        b[4] = m->res.rope;
        b[5] = m->res.step;
        b[6] = kc;
        b[7] = vc;
        if (lora) {
            b[8] = bind_of(m, &m->r_lt, m->v_lt);
            es__vk_part_binds(&m->ws, &lo->b.parts[0], &b[9], &unused);
        }
        ES_TRY(es__vk_set_create(m->d, m->pool, p, b, &out->sets[i]));
    }
    return ES_OK;
}

static es_status mm_sets_lora(struct es__vk_msa *m, ss_mm *out, const es__vk_mat *mat, es__vk_wset *ws,
                              es__vk_bind x, es__vk_bind y, const ss_lora *lo) {
    return mm_sets_kv(m, out, mat, ws, x, y, y, y, lo);
}

static es_status mm_sets(struct es__vk_msa *m, ss_mm *out, const es__vk_mat *mat, es__vk_wset *ws, es__vk_bind x,
                         es__vk_bind y) {
    return mm_sets_lora(m, out, mat, ws, x, y, NULL);
}

static es_status set4(struct es__vk_msa *m, const es__vk_pipeline *p, es__vk_bind a, es__vk_bind b, es__vk_bind c,
                      es__vk_bind dd, VkDescriptorSet *out) {
    es__vk_bind bs[4] = {a, b, c, dd};
    return es__vk_set_create(m->d, m->pool, p, bs, out);
}

/* An rmsnorm set: rows x normalised into y (or with add, added into it), then with norm2 y's
 * rows normalised into z (x's rows); without, z is unused and y stands in for it. */
static es_status norm_set(struct es__vk_msa *m, es__vk_bind x, es__vk_bind y, const es__vk_bind *z,
                          VkDescriptorSet *out) {
    es__vk_bind bs[5] = {x, m->res.vecs, m->res.step, y, z ? *z : y};
    return es__vk_set_create(m->d, m->pool, m->p_norm, bs, out);
}

/* The fused streams' sets: the forward's own row buffers, stream rows after the tokens' rows. */
static es_status make_fused_sets(struct es__vk_msa *m) {
    const es__vk_ss_res *r = &m->res;
    const es__vk_bind lt_w = bind_of(m, &m->r_lt, VK_NULL_HANDLE);
    ES_TRY(set4(m, m->p_rows, r->x, bind_of(m, &m->r_p, m->v_p), r->step, write_bind(r->x), &m->s_init_fused));
    for (int32_t i = 0; i < m->ss->n_msa; i++) {
        const int32_t l = m->ss->msa_start + i;
        const es__vk_layer *vl = &r->w->layers[l];
        ss_layer *L = &m->layers[i];
        const es__vk_mat *mats[LO_N] = {&vl->qkv, &vl->wo, &vl->gateup, &vl->down};
        const es__vk_bind in[LO_N] = {r->xn, r->attn, r->xn, r->h};
        const es__vk_bind branch = write_bind(post_norms(m) ? r->xn : r->x); /* forward.c's branch output */
        const es__vk_bind out[LO_N] = {write_bind(r->qkv), branch, write_bind(r->h), branch};
        const uint32_t epi[LO_N] = {es__vk_qkv_epi(r->w), branch_epi(m), glu_epi(m), branch_epi(m)};
        for (int k = 0; k < LO_N; k++) {
            const ss_lora *lo = &L->lora[k];
            if (!lo->on) continue;
            const bool kv = k == LO_QKV;
            ES_TRY(mm_sets(m, &L->fused_a[k], &lo->a, &m->ws, in[k], lt_w));
            ES_TRY(mm_sets_kv(m, &L->fused[k], mats[k], &r->w->ws, in[k], out[k], kv ? write_bind(r->k[l]) : out[k],
                              kv ? write_bind(r->v[l]) : out[k], lo));
            /* every kernel this may record, so forward calls never compile */
            ES_TRY(es__vk_mul_mat_warm(m->d, mats[k], epi[k], true));
            ES_TRY(es__vk_mul_mat_warm(m->d, &lo->a, ES__EPI_STORE, false));
        }
        es__vk_bind b[5] = {r->qkv, r->k[l], r->v[l], r->step, write_bind(r->attn)};
        ES_TRY(es__vk_set_create(m->d, m->pool, m->p_attn, b, &L->attn_fused));
    }
    return ES_OK;
}

static es_status make_sets(struct es__vk_msa *m) {
    const es__vk_ss_res *r = &m->res;
    const es__ss_adapter *ss = m->ss;
    const es__vk_model *w = r->w;
    uint32_t n_sets = 19 + w->out->n_parts * 2;
    for (int32_t i = 0; i < ss->n_msa; i++) {
        const es__vk_layer *vl = &w->layers[ss->msa_start + i];
        /* the stream pass's sets and the fused streams' (projections twice, the LoRA A twice) */
        n_sets += 9 + 2 * (vl->qkv.n_parts + vl->wo.n_parts + vl->gateup.n_parts + vl->down.n_parts);
        for (int k = 0; k < LO_N; k++) n_sets += 2 * m->layers[i].lora[k].a.n_parts;
    }
    if (ss->prune_rank > 0) n_sets += m->prune_down.n_parts + m->prune_up.n_parts;
    VkDescriptorPoolSize ps[2] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 10 * n_sets},
                                  {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, 10 * n_sets}};
    VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = n_sets;
    pi.poolSizeCount = m->d->use.texel ? 2 : 1;
    pi.pPoolSizes = ps;
    ES_VK_TRY(m->d, vkCreateDescriptorPool(m->d->dev, &pi, NULL, &m->pool));

    const es__vk_bind x0 = bind_of(m, &m->r_x0, m->v_x0), s = bind_of(m, &m->r_s, m->v_s),
                      sn = bind_of(m, &m->r_sn, m->v_sn), qkv = bind_of(m, &m->r_qkv, m->v_qkv),
                      att = bind_of(m, &m->r_att, m->v_att), h = bind_of(m, &m->r_h, m->v_h),
                      lt = bind_of(m, &m->r_lt, m->v_lt),
                      e = bind_of(m, &m->r_e, m->v_e), en = bind_of(m, &m->r_en, m->v_en),
                      p = bind_of(m, &m->r_p, m->v_p);
    const es__vk_bind qkv_w = bind_of(m, &m->r_qkv, VK_NULL_HANDLE);
    /* the forward's hooks */
    const es__vk_bind x0_w = bind_of(m, &m->r_x0, VK_NULL_HANDLE);
    ES_TRY(set4(m, m->p_rows, r->x, p, r->step, x0_w, &m->s_keep_x));
    {
        es__vk_bind b[3] = {r->step, x0_w, x0_w}; /* the kept rows as kv_move's one-head cache */
        ES_TRY(es__vk_set_create(m->d, m->pool, m->p_move, b, &m->s_move_x0));
    }
    if (ss->prune_rank > 0) {
        /* the early exit works on the gathered rows of the tokens with children */
        ES_TRY(set4(m, m->p_rows, r->x, p, r->step, bind_of(m, &m->r_e, VK_NULL_HANDLE), &m->s_copy_e));
        ES_TRY(mm_sets(m, &m->pd, &m->prune_down, &m->ws, e, bind_of(m, &m->r_lt, VK_NULL_HANDLE)));
        ES_TRY(mm_sets(m, &m->pu, &m->prune_up, &m->ws, lt, bind_of(m, &m->r_e, VK_NULL_HANDLE)));
        ES_TRY(norm_set(m, e, bind_of(m, &m->r_en, VK_NULL_HANDLE), NULL, &m->s_norm_e));
        ES_TRY(mm_sets(m, &m->exit_out, w->out, &r->w->ws, en, bind_buf(&m->out_exit)));
    }
    /* the stream pass */
    ES_TRY(set4(m, m->p_rows, x0, p, r->step, bind_of(m, &m->r_s, VK_NULL_HANDLE), &m->s_init));
    for (int32_t i = 0; i < ss->n_msa; i++) {
        const int32_t l = ss->msa_start + i;
        const es__vk_layer *vl = &w->layers[l];
        ss_layer *L = &m->layers[i];
        const es__vk_bind sn_w = bind_of(m, &m->r_sn, VK_NULL_HANDLE), s_w = bind_of(m, &m->r_s, VK_NULL_HANDLE),
                          h_w = bind_of(m, &m->r_h, VK_NULL_HANDLE), att_w = bind_of(m, &m->r_att, VK_NULL_HANDLE);
        ES_TRY(norm_set(m, s, sn_w, NULL, &L->norm_attn));
        ES_TRY(norm_set(m, s, sn_w, NULL, &L->norm_ffn));
        ES_TRY(mm_sets_lora(m, &L->qkv, &vl->qkv, &r->w->ws, sn, qkv_w, &L->lora[LO_QKV]));
        const es__vk_bind branch_w = post_norms(m) ? sn_w : s_w; /* post-branch norms read it from sn */
        ES_TRY(mm_sets_lora(m, &L->wo, &vl->wo, &r->w->ws, att, branch_w, &L->lora[LO_O]));
        ES_TRY(mm_sets_lora(m, &L->gateup, &vl->gateup, &r->w->ws, sn, h_w, &L->lora[LO_GU]));
        ES_TRY(mm_sets_lora(m, &L->down, &vl->down, &r->w->ws, h, branch_w, &L->lora[LO_DOWN]));
        const es__vk_bind lora_in[LO_N] = {sn, att, sn, h}, lt_w = bind_of(m, &m->r_lt, VK_NULL_HANDLE);
        for (int k = 0; k < LO_N; k++)
            if (L->lora[k].on) ES_TRY(mm_sets(m, &L->lora[k].ma, &L->lora[k].a, &m->ws, lora_in[k], lt_w));
        {
            /* qk_norm_rope in the pass writes no cache: its K and V bindings alias the rows */
            es__vk_bind b[6] = {qkv_w, r->rope, r->step, r->vecs, qkv_w, qkv_w};
            ES_TRY(es__vk_set_create(m->d, m->pool, m->p_rope, b, &L->rope));
        }
        {
            es__vk_bind b[5] = {qkv, m->kv[l], m->kv[r->w->model->hp.n_layer + l], r->step, att_w};
            ES_TRY(es__vk_set_create(m->d, m->pool, m->p_attn, b, &L->attn));
        }
    }
    const es__vk_bind sn_w = bind_of(m, &m->r_sn, VK_NULL_HANDLE);
    ES_TRY(norm_set(m, s, sn_w, NULL, &m->s_norm_out));
    if (post_norms(m)) ES_TRY(norm_set(m, sn, bind_of(m, &m->r_s, VK_NULL_HANDLE), &sn_w, &m->s_post));
    ES_TRY(mm_sets(m, &m->stream_out, w->out, &r->w->ws, sn, bind_buf(&m->out_streams)));
    return make_fused_sets(m);
}

void es__vk_msa_free(struct es__vk_msa *m) {
    if (!m) return;
    es__vk_dev *d = m->d;
    vkDeviceWaitIdle(d->dev);
    for (int i = 0; i <= ES_SPEC_MAX_DEPTH; i++) {
        if (m->cbs[i]) vkFreeCommandBuffers(d->dev, d->pool, 1, &m->cbs[i]);
        if (m->queries[i]) vkDestroyQueryPool(d->dev, m->queries[i], NULL);
    }
    if (m->pool) vkDestroyDescriptorPool(d->dev, m->pool, NULL);
    VkBufferView views[] = {m->v_x0, m->v_s, m->v_sn, m->v_qkv, m->v_att, m->v_h,
                            m->v_lt, m->v_e, m->v_en, m->v_p};
    for (size_t i = 0; i < ES__ARRAY_LEN(views); i++)
        if (views[i]) vkDestroyBufferView(d->dev, views[i], NULL);
    ss_mm *mms[] = {&m->pd, &m->pu, &m->exit_out, &m->stream_out};
    for (size_t i = 0; i < ES__ARRAY_LEN(mms); i++) es__free(d->alloc, mms[i]->sets);
    for (int32_t i = 0; m->layers && i < m->ss->n_msa; i++) {
        ss_layer *L = &m->layers[i];
        es__free(d->alloc, L->qkv.sets);
        es__free(d->alloc, L->wo.sets);
        es__free(d->alloc, L->gateup.sets);
        es__free(d->alloc, L->down.sets);
        for (int k = 0; k < LO_N; k++) {
            es__free(d->alloc, L->fused[k].sets);
            es__free(d->alloc, L->fused_a[k].sets);
            ss_lora *lo = &L->lora[k];
            es__vk_mat_free(d, &lo->a);
            es__vk_mat_free(d, &lo->b);
            es__free(d->alloc, lo->ma.sets);
            es__free(d->alloc, lo->host_b);
            for (int t = 0; t < 3; t++) es__free(d->alloc, lo->host_a[t]);
        }
    }
    es__vk_mat_free(d, &m->prune_down);
    es__vk_mat_free(d, &m->prune_up);
    es__vk_wset_free(&m->ws);
    es__vk_buf_destroy(d, &m->out_streams);
    es__vk_buf_destroy(d, &m->out_exit);
    es__vk_arena_free(d, &m->arena);
    es__free(d->alloc, m->layers);
    es__free(d->alloc, m->kv);
    es__free(d->alloc, m);
}

es_status es__vk_msa_create(es_context *ctx, const es__vk_ss_res *res, struct es__vk_msa **out) {
    *out = NULL;
    es__vk_dev *d = res->w->ws.d;
    const es__ss_adapter *ss = ctx->model->ss;
    const es__hparams *hp = &ctx->model->hp;
    ES_RETURN_IF(hp->head_dim % 4 != 0 || hp->head_dim > 256, d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: streams need a head dimension that is a multiple of 4, at most 256 (have %d)", hp->head_dim);
    struct es__vk_msa *m = es__calloc(d->alloc, 1, sizeof *m);
    ES_RETURN_IF(!m, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    m->d = d;
    m->ctx = ctx;
    m->ss = ss;
    m->res = *res;
    m->fused_ceiling = res->fused_rows;
    m->G = (uint32_t)ss->n_streams;
    m->R32 = up32((uint32_t)ES__MAX(3 * ss->lora_rank, ES__MAX(ss->prune_rank, 1)));
    m->cur_node = -1;
    es__vk_wset_init(&m->ws, d);
    const size_t L = (size_t)hp->n_layer;
    m->kv = es__calloc(d->alloc, 2 * L, sizeof *m->kv);
    m->layers = es__calloc(d->alloc, (size_t)ss->n_msa, sizeof *m->layers);
    es_status s = m->kv && m->layers ? ES_OK : es__fail(d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    if (s == ES_OK) {
        memcpy(m->kv, res->k, sizeof *m->kv * L);
        memcpy(m->kv + L, res->v, sizeof *m->kv * L);
        m->res.k = m->kv;
        m->res.v = m->kv + L;
    }
    if (s == ES_OK) s = es__vk_simple_pipe(d, "ss_rows", true, false, &m->p_rows);
    m->qk_norm = hp->arch->qk_norm;
    if (s == ES_OK && m->qk_norm) s = es__vk_simple_pipe(d, "qk_norm_rope", true, true, &m->p_rope);
    else if (s == ES_OK) s = es__vk_simple_pipe(d, "ss_rope", true, false, &m->p_rope);
    if (s == ES_OK) s = es__vk_attn_kernel(d, "ss_attn", (uint32_t)hp->head_dim, &m->p_attn, &m->attn_per_wg);
    if (s == ES_OK) s = es__vk_rmsnorm_pipe(d, &m->p_norm);
    if (s == ES_OK) s = es__vk_simple_pipe(d, "kv_move", true, false, &m->p_move);
    if (s == ES_OK) s = plan_memory(m);
    if (s == ES_OK) s = upload(m);
    if (s == ES_OK) s = make_sets(m);
    if (s != ES_OK) {
        es__vk_msa_free(m);
        return s;
    }
    *out = m;
    return ES_OK;
}

/* ---- recording */

/* mm of n rows of X from row x_row0 (strides in floats) into Y's first n rows; the store or add
 * epilogue multiplies by scale first (0: 1). The head, wherever it runs, finishes the logits as
 * the forward's does: times the model's multiplier, then soft-capped. */
static es_status rec_mm_scaled(struct es__vk_msa *m, es__vk_rec *r, const char *op, const ss_mm *mm, uint32_t n,
                               uint32_t epi, uint32_t x_stride, uint32_t y_stride, uint32_t x_row0, float scale) {
    es__pc_mul_mat pc;
    memset(&pc, 0, sizeof pc);
    pc.n = n;
    pc.x_off = x_row0 * (x_stride / 4);
    pc.x_stride = x_stride / 4;
    pc.y_stride = y_stride;
    pc.lora_r = mm->lora ? mm->lora->rank : 0;
    pc.lora_stride = m->R32 / 4;
    pc.scale = scale;
    if (mm->m == m->res.w->out) {
        pc.scale = hparams(m)->logit_mul;
        pc.softcap = hparams(m)->final_softcap;
    }
    return es__vk_rec_mul_mat(r, op, mm->m, epi, mm->lora != NULL, mm->sets, &pc);
}

static es_status rec_mm_from(struct es__vk_msa *m, es__vk_rec *r, const char *op, const ss_mm *mm, uint32_t n,
                             uint32_t epi, uint32_t x_stride, uint32_t y_stride, uint32_t x_row0) {
    return rec_mm_scaled(m, r, op, mm, n, epi, x_stride, y_stride, x_row0, 0.0f);
}

static es_status rec_mm(struct es__vk_msa *m, es__vk_rec *r, const char *op, const ss_mm *mm, uint32_t n,
                        uint32_t epi, uint32_t x_stride, uint32_t y_stride) {
    return rec_mm_from(m, r, op, mm, n, epi, x_stride, y_stride, 0);
}

static void rec_rows(struct es__vk_msa *m, es__vk_rec *r, const char *op, VkDescriptorSet set, uint32_t mode,
                     uint32_t n_rows, uint32_t width, uint32_t x_stride, uint32_t y_stride) {
    es__pc_ss_rows pc = {mode, 0, 0, n_rows, width / 4, x_stride / 4, m->res.E32 / 4, y_stride / 4};
    es__vk_rec_dispatch(r, op, m->p_rows, set, &pc, n_rows, 1, 1);
}

/* rmsnorm of n rows; add != 0: into the residual, times add, then with norm2 the next norm of
 * the residual's rows with the weights at g2_off (rmsnorm.comp). */
static void rec_norm_add(struct es__vk_msa *m, es__vk_rec *r, const char *op, VkDescriptorSet set, uint32_t n,
                         uint32_t g_off, float add, bool norm2, uint32_t g2_off) {
    const es__hparams *hp = &m->ctx->model->hp;
    es__pc_rmsnorm pc = {(uint32_t)hp->n_embd, n, m->res.E32, g_off, 0, hp->rms_eps, add, norm2 ? 1u : 0u, g2_off};
    es__vk_rec_dispatch(r, op, m->p_norm, set, &pc, n, 1, 1);
}

static void rec_norm(struct es__vk_msa *m, es__vk_rec *r, const char *op, VkDescriptorSet set, uint32_t n,
                     uint32_t g_off) {
    rec_norm_add(m, r, op, set, n, g_off, 0.0f, false, 0);
}

/* The stream pass's residual branch: its output projection from X (x_stride floats a row) adds
 * into the streams' x, or with post-branch norms stores for the norm (post, the layer's weight)
 * that then adds, in one dispatch with the norm that follows it (next: its weights), as the
 * forward's post-branch norms do; either scales the branch by the model's residual scale first,
 * as the forward's fused rows do. *normed: whether it did that norm. */
static es_status rec_branch(struct es__vk_msa *m, es__vk_rec *r, const char *op, const ss_mm *mm, uint32_t G,
                            uint32_t x_stride, uint32_t post, uint32_t next, bool *normed) {
    const float s = hparams(m)->residual_scale;
    ES_TRY(rec_mm_scaled(m, r, op, mm, G, branch_epi(m), x_stride, m->res.E32, 0, post_norms(m) ? 0.0f : s));
    *normed = post_norms(m);
    if (post_norms(m)) rec_norm_add(m, r, "ss_post_norm", m->s_post, G, post, s, true, next);
    return ES_OK;
}

uint32_t es__vk_msa_flags(const struct es__vk_msa *m, uint32_t n, uint32_t g, uint32_t lo, uint32_t hi) {
    if (!m || g == 0) return 0;
    const uint32_t start = (uint32_t)m->ss->msa_start;
    if (start < lo) return ES__VK_SS_X0_KEPT;
    if (start >= hi) return 0;
    /* the streams ride in the forward's rows when they are few enough for the device (policy.h):
     * one submission and 16 fewer dispatches per step than a stream pass after the forward; with
     * more rows the pass, which computes one node's streams only, is cheaper where rows cost
     * arithmetic (docs/perf.md) */
    if (hi == (uint32_t)m->ctx->model->hp.n_layer && (uint64_t)n * (1 + g) <= m->res.fused_rows)
        return ES__VK_SS_FUSED | (g << 8);
    return ES__VK_SS_KEEP_X;
}

void es__vk_msa_set_fused_cap(struct es__vk_msa *m, uint32_t rows) {
    if (m) m->res.fused_rows = ES__MIN(rows, m->fused_ceiling);
}

uint32_t es__vk_msa_fused_rows(const struct es__vk_msa *m, int32_t l, uint32_t n_main, uint32_t flags) {
    if (!m || !(flags & ES__VK_SS_FUSED) || l < m->ss->msa_start) return 0;
    return n_main * ES__VK_SS_FUSED_G(flags);
}

es_status es__vk_msa_rec_proj(struct es__vk_msa *m, es__vk_rec *r, int32_t l, int proj, uint32_t n_main, uint32_t g,
                              es__pc_mul_mat *pc, const VkDescriptorSet **sets) {
    const ss_layer *L = &m->layers[l - m->ss->msa_start];
    const ss_lora *lo = &L->lora[proj];
    pc->ss_t0 = n_main;
    pc->ss_g = g;
    *sets = NULL;
    if (!lo->on) return ES_OK;
    const uint32_t x_stride[LO_N] = {m->res.E32, m->res.Q32, m->res.E32, m->res.F32};
    ES_TRY(rec_mm_from(m, r, "ss_lora_a", &L->fused_a[proj], n_main * g, ES__EPI_STORE, x_stride[proj], m->R32,
                       n_main));
    pc->lora_r = lo->rank;
    pc->lora_stride = m->R32 / 4;
    *sets = L->fused[proj].sets;
    return ES_OK;
}

void es__vk_msa_rec_attn(struct es__vk_msa *m, es__vk_rec *r, int32_t l, uint32_t n_main, uint32_t g) {
    const es__hparams *hp = &m->ctx->model->hp;
    const es__pc_ss_attn pa = attn_call(m, l, n_main * g, g, n_main);
    es__vk_rec_dispatch(r, "ss_attn", m->p_attn, m->layers[l - m->ss->msa_start].attn_fused, &pa,
                        attn_groups(m, n_main * g * (uint32_t)hp->n_head), 1, 1);
}

es_status es__vk_msa_rec_exit(struct es__vk_msa *m, es__vk_rec *r, uint32_t n) {
    const es__vk_ss_res *res = &m->res;
    /* e = h + up(down(h)) of the listed rows, normalised, through the output head (3.2.3) */
    rec_rows(m, r, "ss_exit_copy", m->s_copy_e, 3, n, res->E32, res->E32, res->E32);
    ES_TRY(rec_mm(m, r, "ss_exit_down", &m->pd, n, ES__EPI_STORE, res->E32, m->R32));
    ES_TRY(rec_mm(m, r, "ss_exit_up", &m->pu, n, ES__EPI_ADD, m->R32, res->E32));
    rec_norm(m, r, "ss_exit_norm", m->s_norm_e, n, res->w->output_norm);
    return rec_mm(m, r, "ss_exit_head", &m->exit_out, n, ES__EPI_STORE, res->E32, res->V32);
}

es_status es__vk_msa_rec_compact(struct es__vk_msa *m, es__vk_rec *r, uint32_t n, uint32_t flags) {
    if (!m || !(flags & ES__VK_SS_X0_KEPT)) return ES_OK;
    es__pc_kv_move pc = {n, 0, m->res.E32, m->res.nb, 1, 0};
    es__vk_rec_dispatch(r, "prune_move", m->p_move, m->s_move_x0, &pc, 1, 1, 1);
    return ES_OK;
}

es_status es__vk_msa_rec_layer(struct es__vk_msa *m, es__vk_rec *r, int32_t l, uint32_t n, uint32_t flags) {
    const es__vk_ss_res *res = &m->res;
    if ((flags & ES__VK_SS_KEEP_X) && l == m->ss->msa_start)
        rec_rows(m, r, "ss_keep_x", m->s_keep_x, 0, n, res->E32, res->E32, res->E32); /* Eq. 3's M */
    if ((flags & ES__VK_SS_FUSED) && l == m->ss->msa_start) { /* Eq. 3 for every node */
        const uint32_t g = ES__VK_SS_FUSED_G(flags), e4 = res->E32 / 4;
        es__pc_ss_rows pc = {2, g, n, n * g, e4, e4, e4, e4};
        es__vk_rec_dispatch(r, "ss_init", m->p_rows, m->s_init_fused, &pc, n * g, 1, 1);
    }
    return ES_OK;
}

/* The stream pass's biases and RoPE of G rows of layer l, in place at the step's node's position;
 * with per-head Q/K norms (qk_norm) qk_norm_rope.comp does the norms too, every row a stream row. */
static void rec_rope(struct es__vk_msa *m, es__vk_rec *r, int32_t l, uint32_t G) {
    const es__vk_ss_res *res = &m->res;
    const es__hparams *hp = hparams(m);
    const uint32_t bias_off = es__vk_bias_off(res->w, res->n_ctx, res->bias_floats, (uint32_t)l);
    const VkDescriptorSet set = m->layers[l - m->ss->msa_start].rope;
    if (m->qk_norm) {
        es__pc_qk_norm_rope pq = es__vk_qk_norm_call(res->w, (uint32_t)l, G, res->QKV32, res->n_ctx);
        pq.bias_off = bias_off;
        pq.ss_t0 = 0;
        es__vk_rec_dispatch(r, "ss_qk_norm_rope", m->p_rope, set, &pq, G, pq.n_head + pq.n_head_kv, 1);
        return;
    }
    es__pc_ss_rope pr = {G, (uint32_t)hp->n_head, (uint32_t)hp->n_head_kv, (uint32_t)hp->head_dim, (uint32_t)hp->n_rot,
                         hp->rope_type == ES_ROPE_NEOX ? 1u : 0u, res->QKV32, bias_off,
                         es__vk_rope_off(res->w, res->n_ctx, (uint32_t)l),
                         es__vk_rope_stride(res->w, res->n_ctx, (uint32_t)l)};
    es__vk_rec_dispatch(r, "ss_rope", m->p_rope, set, &pr, G, 1, 1);
}

/* The stream pass of G streams of the step's node: Eq. 3, the MSA layers, the output head. */
static es_status record_streams(struct es__vk_msa *m, uint32_t G) {
    es__vk_dev *d = m->d;
    const es__vk_ss_res *res = &m->res;
    const es__hparams *hp = &m->ctx->model->hp;
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = d->pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cb;
    ES_VK_TRY(d, vkAllocateCommandBuffers(d->dev, &ai, &cb));
    if (d->profile && !m->queries[G]) {
        const es_status qs = es__vk_query_pool_create(d, ES__SS_MAX_QUERIES, &m->queries[G]);
        if (qs != ES_OK) {
            vkFreeCommandBuffers(d->dev, d->pool, 1, &cb);
            return qs;
        }
    }
    es__vk_rec r;
    es__vk_rec_begin(&r, d, cb, m->queries[G], m->queries[G] ? ES__SS_MAX_QUERIES : 0, m->query_ops[G]);
    rec_rows(m, &r, "ss_init", m->s_init, 1, G, res->E32, res->E32, res->E32);
    bool normed = false; /* the previous layer's post-branch norm did this one's pre-norm */
    for (int32_t i = 0; i < m->ss->n_msa; i++) {
        const int32_t l = m->ss->msa_start + i;
        const es__vk_layer *vl = &res->w->layers[l];
        const ss_layer *L = &m->layers[i];
        const ss_lora *lo = L->lora;
        /* the norm after the layer: the next one's attention norm, or the output norm */
        const uint32_t next = i + 1 < m->ss->n_msa ? res->w->layers[l + 1].attn_norm : res->w->output_norm;
        if (!normed) rec_norm(m, &r, "ss_norm", L->norm_attn, G, vl->attn_norm);
        if (lo[LO_QKV].on) ES_TRY(rec_mm(m, &r, "ss_lora_a", &lo[LO_QKV].ma, G, ES__EPI_STORE, res->E32, m->R32));
        ES_TRY(rec_mm(m, &r, "ss_qkv", &L->qkv, G, ES__EPI_STORE, res->E32, res->QKV32));
        rec_rope(m, &r, l, G);
        const es__pc_ss_attn pa = attn_call(m, l, G, 0, 0);
        es__vk_rec_dispatch(&r, "ss_attn", m->p_attn, L->attn, &pa, attn_groups(m, G * (uint32_t)hp->n_head), 1, 1);
        if (lo[LO_O].on) ES_TRY(rec_mm(m, &r, "ss_lora_a", &lo[LO_O].ma, G, ES__EPI_STORE, res->Q32, m->R32));
        ES_TRY(rec_branch(m, &r, "ss_wo", &L->wo, G, res->Q32, vl->post_attn_norm, vl->ffn_norm, &normed));
        if (!normed) rec_norm(m, &r, "ss_norm", L->norm_ffn, G, vl->ffn_norm);
        if (lo[LO_GU].on) ES_TRY(rec_mm(m, &r, "ss_lora_a", &lo[LO_GU].ma, G, ES__EPI_STORE, res->E32, m->R32));
        ES_TRY(rec_mm(m, &r, "ss_gateup", &L->gateup, G, glu_epi(m), res->E32, res->F32));
        if (lo[LO_DOWN].on) ES_TRY(rec_mm(m, &r, "ss_lora_a", &lo[LO_DOWN].ma, G, ES__EPI_STORE, res->F32, m->R32));
        ES_TRY(rec_branch(m, &r, "ss_down", &L->down, G, res->F32, vl->post_ffn_norm, next, &normed));
    }
    if (!normed) rec_norm(m, &r, "ss_norm_out", m->s_norm_out, G, res->w->output_norm);
    es_status s = rec_mm(m, &r, "ss_head", &m->stream_out, G, ES__EPI_STORE, res->E32, res->V32);
    if (s == ES_OK) s = es__vk_rec_end(&r);
    if (s != ES_OK) {
        vkFreeCommandBuffers(d->dev, d->pool, 1, &cb);
        return s;
    }
    m->cbs[G] = cb;
    m->n_queries[G] = r.n_queries;
    return ES_OK;
}

/* ---- after the forward, and on demand */

es_status es__vk_msa_decide(struct es__vk_msa *m, const es__fwd *f, const int32_t *parents, int32_t n_parents) {
    ES_TRY(es__vk_buf_invalidate(m->d, &m->out_exit));
    es__prune_decide(f, parents, n_parents, m->out_exit.map, m->res.V32, m->ctx->model->hp.n_vocab);
    return ES_OK;
}

void es__vk_msa_after_forward(struct es__vk_msa *m, const es__fwd *f, uint32_t flags) {
    m->valid = true;
    m->n = f->n;
    m->n_streams = f->n_streams;
    m->cur_node = -1;
    m->fused = (flags & ES__VK_SS_FUSED) != 0;
    m->n_out = f->n_out;
}

es_status es__vk_msa_stream_logits(struct es__vk_msa *m, int32_t i, int32_t g, float *out) {
    es__vk_dev *d = m->d;
    ES_RETURN_IF(!m->valid || m->n_streams == 0 || i < 0 || i >= m->n || g < 1 || g > m->n_streams, d->err,
                 ES_ERR_INVALID_ARGUMENT, "vulkan: no %d streams for survivor %d of the last forward call", g, i);
    const uint32_t V = (uint32_t)m->ctx->model->hp.n_vocab, G = (uint32_t)g;
    if (m->fused) { /* the forward's logits rows after its n_out: node i's streams at n_out + i G */
        const float *src = (const float *)m->res.logits->map + ((size_t)m->n_out + (size_t)i * (size_t)m->n_streams) * m->res.V32;
        for (uint32_t j = 0; j < G; j++) memcpy(out + (size_t)j * V, src + (size_t)j * m->res.V32, sizeof(float) * V);
        return ES_OK;
    }
    if (m->cur_node != i || m->cur_g < g) {
        if (!m->cbs[G]) ES_TRY(record_streams(m, G));
        int32_t *step = m->res.step_buf->map;
        step[ES_STEP_SS_NODE] = i;
        ES_TRY(es__vk_buf_flush(d, m->res.step_buf));
        ES_TRY(es__vk_submit_wait(d, m->cbs[G]));
        if (m->queries[G]) ES_TRY(es__vk_profile_collect(d, m->queries[G], m->n_queries[G], m->query_ops[G]));
        ES_TRY(es__vk_buf_invalidate(d, &m->out_streams));
        m->cur_node = i;
        m->cur_g = g;
    }
    const float *src = m->out_streams.map;
    for (uint32_t j = 0; j < G; j++) memcpy(out + (size_t)j * V, src + (size_t)j * m->res.V32, sizeof(float) * V);
    return ES_OK;
}
