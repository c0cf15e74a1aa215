/* backend.c: the CPU backend's vtable: the thread pool and kernel level (init), weight views
 * checked against what the kernels need (model_upload), the KV cache and scratch (ctx_init), and
 * compaction of provisional KV slots after a tree commit (kv_compact). The arithmetic lives in
 * forward.c, ops.c and kern_impl.c. */
#include "cpu.h"
#include "opsi.h"
#include "msa.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static es_status cpu_init(es_backend *b, const es_backend_params *p) {
    es__cpu_state *B = es__calloc(b->alloc, 1, sizeof *B);
    ES_RETURN_IF(!B, &b->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory");
    es_status s = es__pool_create(b->alloc, b->n_threads, -1, &b->err, &B->pool);
    if (s != ES_OK) {
        es__free(b->alloc, B);
        return s;
    }
    B->kern = es__kern_best();
    B->weights_in_place = p->cpu_weights_in_place;
    b->impl = B;
    snprintf(b->name, sizeof b->name, "cpu");
    es__logf(&b->log, ES_LOG_INFO, "cpu backend: %d threads, %s kernels", b->n_threads, B->kern->name);
    return ES_OK;
}

static void cpu_destroy(es_backend *b) {
    es__cpu_state *B = b->impl;
    if (!B) return;
    es__pool_destroy(B->pool);
    es__free(b->alloc, B);
    b->impl = NULL;
}

/* A matrix view of t, checked to be n_out rows of n_in elements of a type the kernels read. */
static es_status mat_view(es_backend *b, const es__tensor *t, int64_t n_in, int64_t n_out, es__cpu_mat *out) {
    ES_RETURN_IF(!t || !t->data, &b->err, ES_ERR_MODEL, "cpu backend: tensor %s has no data", t ? t->name : "(missing)");
    const size_t rb = es__kern_row_bytes(t->type, n_in);
    ES_RETURN_IF(rb == 0, &b->err, ES_ERR_UNSUPPORTED,
                 "cpu backend: tensor %s: type %d with rows of %lld elements is not supported", t->name, (int)t->type,
                 (long long)n_in);
    ES_RETURN_IF(t->ne[0] != n_in || t->ne[1] != n_out || t->nbytes < rb * (uint64_t)n_out, &b->err, ES_ERR_MODEL,
                 "cpu backend: tensor %s is (%lld, %lld) with %llu bytes, expected (%lld, %lld)", t->name,
                 (long long)t->ne[0], (long long)t->ne[1], (unsigned long long)t->nbytes, (long long)n_in,
                 (long long)n_out);
    *out = (es__cpu_mat){t->type, t->data, rb, n_in, n_out};
    return ES_OK;
}

/* An f32 copy of a norm vector of n elements (any float or block type) at dst. */
static es_status norm_copy(es_backend *b, const es__kern *k, const es__tensor *t, int64_t n, float *dst) {
    ES_RETURN_IF(!t || !t->data, &b->err, ES_ERR_MODEL, "cpu backend: norm tensor %s has no data",
                 t ? t->name : "(missing)");
    ES_RETURN_IF(t->ne[0] != n || es__kern_row_bytes(t->type, n) == 0 || t->nbytes < es__kern_row_bytes(t->type, n),
                 &b->err, ES_ERR_MODEL, "cpu backend: norm tensor %s: %lld elements of type %d, expected %lld",
                 t->name, (long long)t->ne[0], (int)t->type, (long long)n);
    k->to_f32(t->type, t->data, dst, n);
    return ES_OK;
}

static void cpu_model_release(es_backend *b, void *weights) {
    es__cpu_weights *W = weights;
    if (!W) return;
    es__pages_free(W->repacked, W->repacked_size);
    es__free(b->alloc, W->layers);
    es__free(b->alloc, W->norms);
    es__free(b->alloc, W);
}

/* Floats of the f32 copies: the output norm, then per layer 4 norms, the Q, K, V biases and the
 * Q and K head norms. */
static size_t norm_floats(const es__hparams *hp) {
    const size_t qkv = (size_t)(hp->n_head + 2 * hp->n_head_kv) * (size_t)hp->head_dim;
    return (size_t)hp->n_embd + (size_t)hp->n_layer * (4 * (size_t)hp->n_embd + qkv + 2 * (size_t)hp->head_dim);
}

/* The optional vectors of a layer (arch.h): post-branch norms, Q/K/V biases, Q/K head norms,
 * each or none. */
static es_status layer_vectors(es_backend *b, const es__kern *k, const es__hparams *hp, const es__layer *l,
                               float *dst, es__cpu_layer *L) {
    const int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    if (l->post_attn_norm) {
        ES_TRY(norm_copy(b, k, l->post_attn_norm, d, dst));
        ES_TRY(norm_copy(b, k, l->post_ffn_norm, d, dst + d));
        L->post_attn_norm = dst;
        L->post_ffn_norm = dst + d;
    }
    if (l->bq) {
        float *bias = dst + 2 * d;
        ES_TRY(norm_copy(b, k, l->bq, qd, bias));
        ES_TRY(norm_copy(b, k, l->bk, kvd, bias + qd));
        ES_TRY(norm_copy(b, k, l->bv, kvd, bias + qd + kvd));
        L->bq = bias;
        L->bk = bias + qd;
        L->bv = bias + qd + kvd;
    }
    if (l->q_norm) {
        float *hn = dst + 2 * d + qd + 2 * kvd;
        ES_TRY(norm_copy(b, k, l->q_norm, hp->head_dim, hn));
        ES_TRY(norm_copy(b, k, l->k_norm, hp->head_dim, hn + hp->head_dim));
        L->q_norm = hn;
        L->k_norm = hn + hp->head_dim;
    }
    return ES_OK;
}

static es_status upload_views(es_backend *b, const es_model *m, es__cpu_weights *W) {
    const es__hparams *hp = &m->hp;
    const es__kern *k = ((es__cpu_state *)b->impl)->kern;
    const int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    ES_RETURN_IF(hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv || hp->head_dim <= 0 ||
                     hp->n_rot < 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 || hp->n_layer <= 0 || d <= 0 ||
                     hp->n_ff <= 0 || hp->n_vocab <= 0,
                 &b->err, ES_ERR_MODEL,
                 "cpu backend: unsupported shape: n_head %d, n_head_kv %d, head_dim %d, n_rot %d, n_layer %d", hp->n_head,
                 hp->n_head_kv, hp->head_dim, hp->n_rot, hp->n_layer);
    /* models built in memory (tests, tools) set these themselves: 0 would drop every branch */
    ES_RETURN_IF(!(hp->residual_scale > 0.0f) || !(hp->logit_mul > 0.0f) || !isfinite(hp->residual_scale) ||
                     !isfinite(hp->logit_mul),
                 &b->err, ES_ERR_MODEL, "cpu backend: residual scale %g and logit multiplier %g: expected positive",
                 (double)hp->residual_scale, (double)hp->logit_mul);
    ES_TRY(mat_view(b, m->tok_embd, d, hp->n_vocab, &W->tok_embd));
    ES_TRY(mat_view(b, m->output, d, hp->n_vocab, &W->output));
    ES_TRY(norm_copy(b, k, m->output_norm, d, W->norms));
    W->output_norm = W->norms;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const es__layer *l = &m->layers[il];
        es__cpu_layer *L = &W->layers[il];
        const size_t per = (norm_floats(hp) - (size_t)d) / (size_t)hp->n_layer;
        float *nrm = W->norms + (size_t)d + (size_t)il * per;
        ES_TRY(norm_copy(b, k, l->attn_norm, d, nrm));
        ES_TRY(norm_copy(b, k, l->ffn_norm, d, nrm + d));
        L->attn_norm = nrm;
        L->ffn_norm = nrm + d;
        ES_TRY(layer_vectors(b, k, hp, l, nrm + 2 * d, L));
        ES_TRY(mat_view(b, l->wq, d, qd, &L->wq));
        ES_TRY(mat_view(b, l->wk, d, kvd, &L->wk));
        ES_TRY(mat_view(b, l->wv, d, kvd, &L->wv));
        ES_TRY(mat_view(b, l->wo, qd, d, &L->wo));
        ES_TRY(mat_view(b, l->ffn_gate, d, hp->n_ff, &L->gate));
        ES_TRY(mat_view(b, l->ffn_up, d, hp->n_ff, &L->up));
        ES_TRY(mat_view(b, l->ffn_down, hp->n_ff, d, &L->down));
    }
    return ES_OK;
}

/* The matrices one decoded token streams: the output head and every layer's projections. */
static int32_t streamed_mats(es__cpu_weights *W, int32_t n_layer, es__cpu_mat **mats) {
    int32_t n = 0;
    mats[n++] = &W->output;
    for (int32_t il = 0; il < n_layer; il++) {
        es__cpu_layer *L = &W->layers[il];
        es__cpu_mat *l[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < ES__ARRAY_LEN(l); i++) mats[n++] = l[i];
    }
    return n;
}

/* Copies the streamed matrices out of the file mapping into one block of huge-page-backed memory
 * (es__pages_alloc): decode reads every weight once per token, and on the development VM streaming
 * from 4 KiB file pages ran clearly slower than from huge pages (docs/perf.md). The copied range
 * of the mapping is then released to the OS (es__pages_release: page-out, content stays valid), so
 * resident memory does not double. es_backend_params.cpu_weights_in_place skips the copy.
 * The embedding (one row per token) stays in the mapping unless it is also the output head. */
static es_status copy_weights(es_backend *b, const es_model *m, es__cpu_weights *W) {
    if (((es__cpu_state *)b->impl)->weights_in_place) return ES_OK;
    es__cpu_mat **mats = es__calloc(b->alloc, 1 + 7 * (size_t)m->hp.n_layer, sizeof *mats);
    ES_RETURN_IF(!mats, &b->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory");
    const int32_t n = streamed_mats(W, m->hp.n_layer, mats);
    const size_t align = 4096;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += (mats[i]->row_bytes * (size_t)mats[i]->n_out + align - 1) / align * align;
    uint8_t *mem = es__pages_alloc(total);
    if (!mem) {
        /* not fatal: read the weights in place */
        es__logf(&b->log, ES_LOG_WARN, "cpu backend: could not allocate %zu bytes for the weights; reading them from the file mapping", total);
        es__free(b->alloc, mats);
        return ES_OK;
    }
    const bool tied = W->output.data == W->tok_embd.data;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        const size_t sz = mats[i]->row_bytes * (size_t)mats[i]->n_out;
        memcpy(mem + off, mats[i]->data, sz);
        es__pages_release(mats[i]->data, sz);
        mats[i]->data = mem + off;
        off += (sz + align - 1) / align * align;
        if (b->progress_fn && !b->progress_fn((float)off / (float)total, b->progress_user)) {
            es__pages_free(mem, total);
            es__free(b->alloc, mats);
            return es__fail(&b->err, ES_ERR_CANCELLED, "cpu backend: weight upload cancelled");
        }
    }
    if (tied) W->tok_embd.data = W->output.data;
    W->repacked = mem;
    W->repacked_size = total;
    es__free(b->alloc, mats);
    return ES_OK;
}

static es_status cpu_model_upload(es_backend *b, const es_model *m, void **weights) {
    *weights = NULL;
    ES_RETURN_IF(!m->has_weights, &b->err, ES_ERR_INVALID_ARGUMENT, "cpu backend: model has no weights (vocab_only)");
    es__cpu_weights *W = es__calloc(b->alloc, 1, sizeof *W);
    if (W) {
        W->model = m;
        W->layers = es__calloc(b->alloc, (size_t)m->hp.n_layer, sizeof *W->layers);
        W->norms = es__calloc(b->alloc, norm_floats(&m->hp), sizeof(float));
    }
    if (!W || !W->layers || !W->norms) {
        cpu_model_release(b, W);
        return es__fail(&b->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory for weight views");
    }
    es_status s = upload_views(b, m, W);
    if (s == ES_OK) s = copy_weights(b, m, W);
    if (s != ES_OK) {
        cpu_model_release(b, W);
        return s;
    }
    if (b->progress_fn && !b->progress_fn(1.0f, b->progress_user)) {
        cpu_model_release(b, W);
        return es__fail(&b->err, ES_ERR_CANCELLED, "cpu backend: weight upload cancelled");
    }
    *weights = W;
    return ES_OK;
}

static void cpu_ctx_destroy(es_context *ctx) {
    es__cpu_ctx *c = ctx->impl;
    if (!c) return;
    const es_allocator *a = ctx->backend->alloc;
    void *bufs[] = {c->k, c->v, c->act_mem, c->visible, c->sched_mem};
    for (size_t i = 0; i < ES__ARRAY_LEN(bufs); i++) es__free(a, bufs[i]);
    es__free(NULL, c->al_part);
    es__free(NULL, c->al_spec);
    es__free(NULL, c->al_e2);
    es__msa_free(c, a);
    es__free(a, c);
    ctx->impl = NULL;
}

/* n x m floats (or ints), overflow-checked. */
static void *alloc_arr(const es_allocator *a, size_t n, size_t m, size_t elem) {
    size_t nm;
    if (!es__mul_size(n, m, &nm)) return NULL;
    return es__calloc(a, nm ? nm : 1, elem);
}

/* The activations a forward's matrix products read, in one block, each array starting on a
 * 64-byte boundary: an AVX-512 load of a row that straddles two cache lines costs two, and a
 * batch's tile loads T activation vectors for every weight vector (calloc's large blocks start
 * 16 bytes past a page; docs/perf.md, the 5-node call). Sizes in floats; false on overflow or
 * when out of memory. */
static bool alloc_acts(const es_allocator *a, es__cpu_ctx *c, float **const *arr, const size_t (*dims)[2], int n) {
    size_t total = 64, off[16];
    ES_ASSERT(n <= 16);
    for (int i = 0; i < n; i++) {
        size_t sz;
        if (!es__mul_size(dims[i][0], dims[i][1], &sz) || sz > SIZE_MAX / sizeof(float) - 64) return false;
        sz = (sz * sizeof(float) + 63) / 64 * 64;
        off[i] = total - 64;
        if (total > SIZE_MAX - sz) return false;
        total += sz;
    }
    c->act_mem = es__calloc(a, total, 1);
    if (!c->act_mem) return false;
    uint8_t *base = (uint8_t *)(((uintptr_t)c->act_mem + 63) & ~(uintptr_t)63);
    for (int i = 0; i < n; i++) *arr[i] = (float *)(void *)(base + off[i]);
    return true;
}

/* A KV cache of n floats, never written here, so that a slot's pages become resident only when
 * generation first writes the slot: without an allocator calloc's fresh pages; with one, its
 * block unzeroed (nothing reads a slot before a forward call wrote it: attention reads the
 * committed slots and the batch's own). */
static float *kv_alloc(const es_allocator *a, size_t n) {
    return a ? es__malloc(a, n ? n * sizeof(float) : 1) : es__calloc(NULL, n ? n : 1, sizeof(float));
}

/* Fails before allocating when the context's memory (the KV cache, kv_bytes, and the scratch,
 * about its n_ctx-independent part) could never be resident on this machine: the
 * pages would otherwise be handed out untouched and the process killed when generation reaches
 * them. Memory that merely is not free right now is the OS's business. */
static es_status check_fits(es_context *ctx, size_t kv_bytes, size_t per_token, size_t other_bytes) {
    const uint64_t have = es__mem_total();
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const uint64_t need = (uint64_t)kv_bytes + (uint64_t)other_bytes;
    if (have == 0 || need <= have) return ES_OK;
    const uint64_t fit = have > other_bytes ? (have - other_bytes) / (per_token ? per_token : 1) : 0;
    return es__fail(&ctx->backend->err, ES_ERR_OUT_OF_MEMORY,
                    "cpu backend: a context of %d tokens needs %.1f GiB (KV cache %.1f GiB: %zu bytes per token), "
                    "more than the %.1f GiB of memory this machine has; at most about %llu tokens fit (n_ctx)",
                    ctx->n_ctx, (double)need / gib, (double)kv_bytes / gib, per_token, (double)have / gib,
                    (unsigned long long)ES__MIN(fit, (uint64_t)INT32_MAX));
}

static es_status cpu_ctx_init(es_context *ctx) {
    es_backend *b = ctx->backend;
    const es__hparams *hp = &ctx->model->hp;
    const es_allocator *a = b->alloc;
    es__cpu_ctx *c = es__calloc(a, 1, sizeof *c);
    ES_RETURN_IF(!c, &b->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory");
    ctx->impl = c;
    const size_t nb = (size_t)ctx->n_batch, d = (size_t)hp->n_embd;
    const size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim, kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    size_t cache;
    bool ok = es__mul_size((size_t)hp->n_layer * kvd, (size_t)ctx->n_ctx, &cache);
    const es__cpu_state *B = b->impl;
    c->n_threads = es__pool_size(B->pool);
    c->panel_floats = (size_t)B->kern->panel_rows * ES__MAX(ES__MAX(d, qd), (size_t)hp->n_ff);
    if (ok && cache <= SIZE_MAX / (2 * sizeof(float))) {
        /* per token: K and V of every layer */
        const size_t per_token = (size_t)hp->n_layer * kvd * 2 * sizeof(float);
        const size_t scratch = nb * (4 * d + 2 * qd + 2 * kvd + 2 * (size_t)hp->n_ff) * sizeof(float) +
                               (size_t)c->n_threads * c->panel_floats * sizeof(float);
        es_status fits = check_fits(ctx, cache * 2 * sizeof(float), per_token, scratch);
        if (fits != ES_OK) {
            cpu_ctx_destroy(ctx);
            return fits;
        }
    }
    if (ok) {
        c->k = kv_alloc(a, cache);
        c->v = kv_alloc(a, cache);
        float **const arr[] = {&c->x, &c->xn, &c->q, &c->kn, &c->vn, &c->att, &c->tmp, &c->gate, &c->up, &c->rope, &c->panel};
        const size_t dims[][2] = {{nb, d},   {nb, d},    {nb, qd},   {nb, kvd},
                                  {nb, kvd}, {nb, qd},   {nb, d},    {nb, (size_t)hp->n_ff},
                                  {nb, (size_t)hp->n_ff}, {nb, (size_t)es__rope_tables(hp) * (size_t)(hp->n_rot / 2) * 2},
                                  {(size_t)c->n_threads, c->panel_floats}};
        ok = alloc_acts(a, c, arr, dims, (int)ES__ARRAY_LEN(arr));
        c->visible = alloc_arr(a, (size_t)c->n_threads * ES__CPU_ATTN_ROWS, nb, sizeof(int32_t));
        c->n_phases = es__cpu_fwd_phases(hp->n_layer);
        c->sched_mem = es__malloc(a, es__sched_bytes(c->n_threads, c->n_phases) + 64);
        if (c->sched_mem) c->sched = (es__sched *)(void *)(((uintptr_t)c->sched_mem + 63) & ~(uintptr_t)63);
    }
    if (!ok || !c->k || !c->v || !c->x || !c->xn || !c->q || !c->kn || !c->vn || !c->att || !c->tmp || !c->gate ||
        !c->up || !c->rope || !c->visible || !c->panel || !c->sched) {
        cpu_ctx_destroy(ctx);
        return es__fail(&b->err, ES_ERR_OUT_OF_MEMORY,
                        "cpu backend: out of memory for a KV cache of %d tokens and scratch for %d", ctx->n_ctx,
                        ctx->n_batch);
    }
    es_status s = ctx->model->ss ? es__msa_measure_fuse(ctx) : ES_OK;
    if (s != ES_OK) cpu_ctx_destroy(ctx);
    return s;
}

static es_status cpu_forward(es_context *ctx, const es__fwd *f) {
    return es__cpu_forward(ctx, f);
}

static es_status cpu_kv_compact(es_context *ctx, const int32_t *keep, int32_t n_keep) {
    const es__hparams *hp = &ctx->model->hp;
    es__cpu_ctx *c = ctx->impl;
    const size_t hd = (size_t)hp->head_dim, n_ctx = (size_t)ctx->n_ctx;
    const size_t heads = (size_t)hp->n_layer * (size_t)hp->n_head_kv;
    /* keep is ascending with keep[r] >= r: moving r = 0, 1, ... never overwrites a later source */
    for (size_t g = 0; g < heads; g++) {
        float *kb = c->k + g * n_ctx * hd, *vb = c->v + g * n_ctx * hd;
        for (int32_t r = 0; r < n_keep; r++) {
            if (keep[r] == r) continue;
            const size_t src = (size_t)(ctx->n_past + keep[r]) * hd, dst = (size_t)(ctx->n_past + r) * hd;
            memmove(kb + dst, kb + src, hd * sizeof(float));
            memmove(vb + dst, vb + src, hd * sizeof(float));
        }
    }
    return ES_OK;
}

/* Slots [n_keep + d, n_past) move down by d in ascending order (a source is read before any
 * later move overwrites it); keys turn by -d positions with the rotation table of position -d
 * (RoPE's angles are linear in the position, so R(p - d) = R(-d) R(p)). */
static es_status cpu_kv_shift(es_context *ctx, int32_t n_keep, int32_t d) {
    const es__hparams *hp = &ctx->model->hp;
    es__cpu_ctx *c = ctx->impl;
    const size_t hd = (size_t)hp->head_dim, n_ctx = (size_t)ctx->n_ctx;
    const size_t heads = (size_t)hp->n_layer * (size_t)hp->n_head_kv;
    const int32_t tables = es__rope_tables(hp), half2 = (hp->n_rot / 2) * 2;
    float *cs = es__malloc(ctx->alloc, sizeof(float) * (size_t)(tables * ES__MAX(half2, 2)));
    ES_RETURN_IF(!cs, &ctx->backend->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory");
    const int32_t minus_d = -d;
    for (int32_t k = 0; k < tables; k++) {
        const es__rope r = es__rope_table(hp, ctx->n_ctx, k);
        es__cpu_rope_table(&r, &minus_d, 1, true, cs + k * half2);
    }
    for (size_t g = 0; g < heads; g++) {
        float *kb = c->k + g * n_ctx * hd, *vb = c->v + g * n_ctx * hd;
        const float *turn = cs + es__rope_table_of(hp, (int32_t)(g / (size_t)hp->n_head_kv)) * half2;
        for (int32_t s = n_keep + d; s < ctx->n_past; s++) {
            float *kd = kb + (size_t)(s - d) * hd;
            memcpy(kd, kb + (size_t)s * hd, hd * sizeof(float));
            memcpy(vb + (size_t)(s - d) * hd, vb + (size_t)s * hd, hd * sizeof(float));
            es__cpu_rope_token(kd, 1, hp->head_dim, hp->n_rot, turn, hp->rope_type);
        }
    }
    es__free(ctx->alloc, cs);
    return ES_OK;
}

static es_status cpu_kv_io(es_context *ctx, int32_t n, float *buf, bool write) {
    const es__hparams *hp = &ctx->model->hp;
    es__cpu_ctx *c = ctx->impl;
    const size_t hd = (size_t)hp->head_dim, n_ctx = (size_t)ctx->n_ctx, run = (size_t)n * hd;
    for (int32_t l = 0; l < hp->n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int32_t g = 0; g < hp->n_head_kv; g++) {
                float *cache = (kv ? c->v : c->k) + ((size_t)l * (size_t)hp->n_head_kv + (size_t)g) * n_ctx * hd;
                if (write) memcpy(cache, buf, run * sizeof(float));
                else memcpy(buf, cache, run * sizeof(float));
                buf += run;
            }
    return ES_OK;
}

static es_status cpu_kv_slot(es_context *ctx, int32_t layer, int32_t pos, float *buf, bool write) {
    const es__hparams *hp = &ctx->model->hp;
    es__cpu_ctx *c = ctx->impl;
    const size_t hd = (size_t)hp->head_dim, n_ctx = (size_t)ctx->n_ctx;
    for (int kv = 0; kv < 2; kv++)
        for (int32_t g = 0; g < hp->n_head_kv; g++) {
            float *slot = (kv ? c->v : c->k) + (((size_t)layer * (size_t)hp->n_head_kv + (size_t)g) * n_ctx + (size_t)pos) * hd;
            if (write) memcpy(slot, buf, hd * sizeof(float));
            else memcpy(buf, slot, hd * sizeof(float));
            buf += hd;
        }
    return ES_OK;
}

const es__backend_vtbl es__cpu_backend = {
    "cpu", cpu_init, cpu_destroy, cpu_model_upload, cpu_model_release,
    cpu_ctx_init, cpu_ctx_destroy, cpu_forward, cpu_kv_compact,
    es__msa_stream_logits, cpu_kv_shift, cpu_kv_io, ES__ATTN_TILE, cpu_kv_slot,
    NULL, NULL, NULL, /* no device-side ALSpec pair: the host gates (lib/multi/alspec_pair.c) */
};
