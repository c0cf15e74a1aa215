/* msa.c: Speculative Streaming on the CPU (papers/speculative-streaming.txt 3.2, A.1; the reference
 * is tools/train/model.py, the format docs/formats.md):
 *   - tree pruning (3.2.3) at the input of the adapter's prune layer: the early exit
 *     output(output_norm(h + up(down(h)))) of every tree token with children, the decision by the
 *     core's es__prune_decide (prune.h), and the survivors compacted to consecutive rows and cache
 *     slots (their residual, RoPE and the KV the earlier layers wrote), so the remaining layers
 *     and the output head run on them alone, as on every backend (backend.h);
 *   - the γ speculative streams of one surviving token, when its stream logits are asked: stream
 *     j starts at the input of layer N - Ns as M + P_j (Eq. 3, identity f_η, M kept aside by the
 *     forward) and runs the top Ns layers with the layers' weights (plus the adapter's stream-only
 *     LoRA), attending to the main stream's keys/values of the token's ancestors and itself (the
 *     KV cache) and to streams <= j of the same token, in one softmax (Eq. 2); streams write no KV.
 *     Computing them after the forward (the stream pass, here) gives the same values as
 *     interleaving them layer by layer (the cache then holds every layer's keys and values of the
 *     batch), which is what the rows riding in the forward do where the context measured that
 *     faster (msa_fused.c); both run msa_rows.c's row steps, so a row's bits are the same.
 * The main stream's code path is untouched (its logits stay bit-identical).
 * Deliberately not here: drafting and verification (lib/decode), the adapter file (adapter.c),
 * the row math (msa_rows.c). */
#include "msa_impl.h"

#include "opsi.h"

#include <math.h>
#include <string.h>

#define EE_CHUNK 32 /* early-exit rows per pass: bounds the scratch at EE_CHUNK x n_vocab */

void es__msa_free(es__cpu_ctx *c, const es_allocator *a) {
    struct es__msa *m = c->msa;
    if (!m) return;
    void *bufs[] = {m->dfs_s, m->dfs_e, m->pos, m->x0, m->parents, m->kept_mem, m->s, m->sn, m->q, m->att, m->kk, m->vv,
                    m->tmp, m->gate, m->up, m->lg, m->lu, m->visible, m->lora_tmp, m->ee_x, m->ee_down, m->ee_logits};
    for (size_t i = 0; i < ES__ARRAY_LEN(bufs); i++) es__free(a, bufs[i]);
    es__free(a, m);
    c->msa = NULL;
}

/* (Re)allocates *p to n x m elements of size elem when it holds fewer than that (have); contents
 * are scratch. */
static bool grow(const es_allocator *a, void *pp, size_t have, size_t n, size_t m, size_t elem) {
    void **p = pp;
    size_t need;
    if (!es__mul_size(n, m, &need)) return false;
    if (*p && need <= have) return true;
    es__free(a, *p);
    *p = es__calloc(a, need ? need : 1, elem);
    return *p != NULL;
}

/* The scratch sized by the context (its n_batch, n_ctx, threads, the adapter), made once. */
static bool alloc_fixed(struct es__msa *m, es_context *ctx, int32_t n_threads) {
    const es__hparams *hp = &ctx->model->hp;
    const es__ss_adapter *ss = ctx->model->ss;
    const es_allocator *a = ctx->backend->alloc;
    const size_t nb = (size_t)ctx->n_batch, d = (size_t)hp->n_embd, th = (size_t)n_threads;
    const size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim, kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    const size_t ff = (size_t)hp->n_ff, none = 0;
    m->tok_cap = ctx->n_batch;
    m->rows_cap = ES__MAX(ss->n_streams, ES__MSA_FUSE_ROWS);
    const size_t R = (size_t)m->rows_cap, rank = (size_t)ES__MAX(ss->lora_rank, 1);
    m->lora_stride = (rank + 15) / 16 * 16; /* a thread's own cache lines */
    return grow(a, &m->dfs_s, none, nb, 1, sizeof(int32_t)) && grow(a, &m->dfs_e, none, nb, 1, sizeof(int32_t)) &&
           grow(a, &m->pos, none, nb, 1, sizeof(int32_t)) &&
           grow(a, &m->x0, none, nb, d, sizeof(float)) && grow(a, &m->parents, none, nb, 1, sizeof(int32_t)) &&
           grow(a, &m->kept_mem, none, 8, nb, sizeof(int32_t)) && grow(a, &m->s, none, R, d, sizeof(float)) &&
           grow(a, &m->sn, none, R, d, sizeof(float)) && grow(a, &m->q, none, R, qd, sizeof(float)) &&
           grow(a, &m->att, none, R, qd, sizeof(float)) && grow(a, &m->kk, none, R, kvd, sizeof(float)) &&
           grow(a, &m->vv, none, R, kvd, sizeof(float)) && grow(a, &m->tmp, none, R, d, sizeof(float)) &&
           grow(a, &m->gate, none, R, ff, sizeof(float)) && grow(a, &m->up, none, R, ff, sizeof(float)) &&
           grow(a, &m->lg, none, R, ff, sizeof(float)) && grow(a, &m->lu, none, R, ff, sizeof(float)) &&
           grow(a, &m->visible, none, th, nb, sizeof(int32_t)) &&
           grow(a, &m->lora_tmp, none, th, m->lora_stride, sizeof(float)) &&
           grow(a, &m->ee_down, none, th, (size_t)ES__MAX(ss->prune_rank, 1), sizeof(float));
}

es_status es__msa_prepare(es_context *ctx, es__fwd *f, es__msa_job *job) {
    es__cpu_ctx *c = ctx->impl;
    const es__hparams *hp = &ctx->model->hp;
    const es__ss_adapter *ss = ctx->model->ss;
    const es_allocator *a = ctx->backend->alloc;
    es__cpu_state *B = ctx->backend->impl;
    if (!c->msa) {
        c->msa = es__calloc(a, 1, sizeof(struct es__msa));
        ES_RETURN_IF(!c->msa, &ctx->backend->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory for streams");
        if (!alloc_fixed(c->msa, ctx, c->n_threads)) {
            es__msa_free(c, a);
            return es__fail(&ctx->backend->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory for streams");
        }
    }
    struct es__msa *m = c->msa;
    if (f->prune_threshold > 0.0f && !m->ee_x) {
        const bool ok = grow(a, &m->ee_x, 0, EE_CHUNK, (size_t)hp->n_embd, sizeof(float)) &&
                        grow(a, &m->ee_logits, 0, EE_CHUNK, (size_t)hp->n_vocab, sizeof(float));
        ES_RETURN_IF(!ok, &ctx->backend->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory for the early exit");
    }
    const size_t nb = (size_t)m->tok_cap;
    int32_t *k = m->kept_mem;
    m->kept = (es__pruned_batch){0, k, k + nb, k + 2 * nb, k + 3 * nb, k + 4 * nb, k + 5 * nb, 0, k + 6 * nb};
    m->n_parents = f->prune_threshold > 0.0f ? es__prune_parents(f, m->parents) : 0;
    m->n_streams = f->n_streams;
    m->node = -1;
    m->fused = false;
    m->fwd_n = f->n;
    m->fwd_n_past = f->n_past;
    memcpy(m->dfs_s, f->dfs_start, sizeof(int32_t) * (size_t)f->n);
    memcpy(m->dfs_e, f->dfs_end, sizeof(int32_t) * (size_t)f->n);
    memcpy(m->pos, f->pos, sizeof(int32_t) * (size_t)f->n);
    *job = (es__msa_job){f, hp, ctx->weights, c, B->kern, B->pool, ctx->n_ctx, ss, m};
    return ES_OK;
}

/* ---- shared pieces */

/* This thread's output columns of y = W x for n_tok rows. */
static void mm(const es__msa_job *J, const es__cpu_mat *W, const float *x, int64_t n_tok, float *y, int ith, int nth) {
    int64_t lo, hi;
    es__split_range(W->n_out, 16, ith, nth, &lo, &hi);
    float *panel = J->c->panel + (size_t)ith * J->c->panel_floats;
    if (lo < hi && n_tok > 0)
        J->k->matmul(W->type, W->data, W->row_bytes, W->n_in, lo, hi, x, W->n_in, n_tok, y + lo, W->n_out, panel);
}

static void rows_range(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    es__split_range(n, 1, ith, nth, lo, hi);
}

/* The model's finish of n rows of logits (granite's scale, gemma2's soft-capping; arch.h): the
 * early exit and the stream logits go through the same head as the main stream's. */
static void finish_rows(const es__msa_job *J, float *logits, int64_t n, int ith, int nth) {
    if (J->hp->final_softcap <= 0.0f && J->hp->logit_mul == 1.0f) return;
    int64_t lo, hi;
    rows_range(n, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) es__cpu_logits_finish(J->hp, logits + t * J->hp->n_vocab, J->hp->n_vocab);
    es__pool_barrier(J->pool);
}

/* ---- pruning (3.2.3) */

/* Thread 0, after the decisions: the survivors move to consecutive rows and cache slots
 * (ascending, so a source is never overwritten before it is read) and the call goes on with the
 * compacted batch (prune.h). */
static void compact_batch(const es__msa_job *J) {
    struct es__msa *m = J->m;
    es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    es__pruned_batch *p = &m->kept;
    const int32_t na = es__prune_compact(f, p);
    f->n_out = p->n_out;
    f->out_rows = p->out_rows;
    if (na == f->n) return;
    const int64_t d = hp->n_embd, half2 = es__rope_tables(hp) * (hp->n_rot / 2) * 2, hd = hp->head_dim;
    const bool x0_taken = f->n_streams > 0 && J->ss->msa_start < J->ss->prune_layer;
    for (int32_t r = 0; r < na; r++) {
        const int32_t o = p->orig[r];
        if (o == r) continue;
        memcpy(J->c->x + r * d, J->c->x + o * d, sizeof(float) * (size_t)d);
        memcpy(J->c->rope + r * half2, J->c->rope + o * half2, sizeof(float) * (size_t)half2);
        if (x0_taken) memcpy(m->x0 + r * d, m->x0 + o * d, sizeof(float) * (size_t)d);
        for (int32_t l = 0; l < J->ss->prune_layer; l++)
            for (int32_t g = 0; g < hp->n_head_kv; g++) {
                const size_t base = ((size_t)l * (size_t)hp->n_head_kv + (size_t)g) * (size_t)J->n_ctx;
                memcpy(J->c->k + (base + (size_t)(f->n_past + r)) * (size_t)hd,
                       J->c->k + (base + (size_t)(f->n_past + o)) * (size_t)hd, sizeof(float) * (size_t)hd);
                memcpy(J->c->v + (base + (size_t)(f->n_past + r)) * (size_t)hd,
                       J->c->v + (base + (size_t)(f->n_past + o)) * (size_t)hd, sizeof(float) * (size_t)hd);
            }
    }
    f->n = na;
    f->tokens = p->tokens;
    f->pos = p->pos;
    f->dfs_start = p->dfs_start;
    f->dfs_end = p->dfs_end;
    f->parent = p->parent;
    /* the stream pass reads these after the forward */
    memcpy(m->dfs_s, p->dfs_start, sizeof(int32_t) * (size_t)na);
    memcpy(m->dfs_e, p->dfs_end, sizeof(int32_t) * (size_t)na);
    memcpy(m->pos, p->pos, sizeof(int32_t) * (size_t)na);
    m->fwd_n = na;
}

/* The early exit of every token with children, EE_CHUNK at a time, each chunk decided as it
 * comes (pre-order, so a parent's decision precedes its descendants'); every backend computes
 * the same rows (a pruned parent's included), then the survivors go on. */
static void prune(const es__msa_job *J, int ith, int nth) {
    struct es__msa *m = J->m;
    es__fwd *f = J->f;
    const es__ss_adapter *ss = J->ss;
    const es__hparams *hp = J->hp;
    const int64_t d = hp->n_embd, r = ss->prune_rank;
    for (int32_t first = 0; first < m->n_parents; first += EE_CHUNK) {
        const int32_t n = ES__MIN(EE_CHUNK, m->n_parents - first);
        /* e = h + up(down(h)), normalised with output_norm: this thread's rows */
        int64_t lo, hi;
        rows_range(n, ith, nth, &lo, &hi);
        float *down = m->ee_down + (size_t)ith * (size_t)r;
        for (int64_t t = lo; t < hi; t++) {
            const float *h = J->c->x + (int64_t)m->parents[first + t] * d;
            float *e = m->ee_x + t * d;
            for (int64_t k = 0; k < r; k++) down[k] = J->k->dot(ss->prune_down + k * d, h, d);
            for (int64_t i = 0; i < d; i++) e[i] = h[i] + J->k->dot(ss->prune_up + i * r, down, r);
            es__cpu_rmsnorm_row(J->k, e, J->w->output_norm, d, hp->rms_eps, e);
        }
        es__pool_barrier(J->pool);
        mm(J, &J->w->output, m->ee_x, n, m->ee_logits, ith, nth);
        es__pool_barrier(J->pool);
        finish_rows(J, m->ee_logits, n, ith, nth);
        if (ith == 0) es__prune_decide(f, m->parents + first, n, m->ee_logits, (size_t)hp->n_vocab, hp->n_vocab);
        es__pool_barrier(J->pool); /* the next chunk overwrites the logits */
    }
    if (ith == 0) compact_batch(J);
    es__pool_barrier(J->pool);
}

void es__msa_before_layer(es__msa_job *J, int32_t il, int ith, int nth) {
    const es__fwd *f = J->f;
    if (f->prune_threshold > 0.0f && il == J->ss->prune_layer) prune(J, ith, nth);
    if (f->n_streams > 0 && il == J->ss->msa_start) {
        /* Eq. 3: the streams start from the main stream's hidden state at this layer's input */
        const int64_t d = J->hp->n_embd;
        int64_t lo, hi;
        rows_range(f->n, ith, nth, &lo, &hi);
        if (hi > lo) memcpy(J->m->x0 + lo * d, J->c->x + lo * d, sizeof(float) * (size_t)((hi - lo) * d));
        if (ith == 0) J->m->fused = es__msa_fuses(J); /* every thread reads it after the barrier */
        es__pool_barrier(J->pool);
    }
}

/* ---- the stream pass: one survivor's streams after the forward (rows 0..G-1) */

/* One MSA layer for the node's stream rows. */
static void stream_layer(const es__msa_job *J, int32_t il, int ith, int nth) {
    struct es__msa *m = J->m;
    const es__hparams *hp = J->hp;
    const es__cpu_layer *L = &J->w->layers[il];
    const int32_t G = J->f->n_streams, b = m->node;
    float *ltmp = es__ssr_scratch(J, ith);
    int64_t lo, hi;
    rows_range(G, ith, nth, &lo, &hi);

    for (int64_t r = lo; r < hi; r++) es__ssr_norm(J, L->attn_norm, r);
    es__pool_barrier(J->pool);
    mm(J, &L->wq, m->sn, G, m->q, ith, nth);
    mm(J, &L->wk, m->sn, G, m->kk, ith, nth);
    mm(J, &L->wv, m->sn, G, m->vv, ith, nth);
    es__pool_barrier(J->pool);
    for (int64_t r = lo; r < hi; r++) es__ssr_qkv(J, il, b, r, ltmp);
    es__pool_barrier(J->pool);
    /* head-major, whole kv heads to a thread: its streams of one head read its keys once */
    int64_t t0, t1;
    es__split_range((int64_t)G * hp->n_head, (int64_t)G * (hp->n_head / hp->n_head_kv), ith, nth, &t0, &t1);
    es__ssr_attend_streams(J, il, b, 0, t0, t1, m->visible + (size_t)ith * (size_t)m->tok_cap);
    es__pool_barrier(J->pool);
    mm(J, &L->wo, m->att, G, m->tmp, ith, nth);
    es__pool_barrier(J->pool);
    for (int64_t r = lo; r < hi; r++) es__ssr_attn_out_ffn_in(J, il, r, ltmp);
    es__pool_barrier(J->pool);
    mm(J, &L->gate, m->sn, G, m->gate, ith, nth);
    mm(J, &L->up, m->sn, G, m->up, ith, nth);
    es__pool_barrier(J->pool);
    for (int64_t r = lo; r < hi; r++) es__ssr_ffn_cols(J, il, r, 0, hp->n_ff);
    es__pool_barrier(J->pool);
    mm(J, &L->down, m->gate, G, m->tmp, ith, nth);
    es__pool_barrier(J->pool);
    for (int64_t r = lo; r < hi; r++) es__ssr_ffn_out(J, il, r, ltmp);
    es__pool_barrier(J->pool);
}

/* The node's streams: Eq. 3, then the MSA layers, then output_norm. */
static void stream_pass(void *arg, int ith, int nth) {
    es__msa_job *J = arg;
    const int32_t G = J->f->n_streams;
    int64_t lo, hi;
    rows_range(G, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) es__ssr_init(J, J->m->node, (int32_t)r, r);
    es__pool_barrier(J->pool);
    for (int32_t il = J->ss->msa_start; il < J->hp->n_layer; il++) stream_layer(J, il, ith, nth);
    for (int64_t r = lo; r < hi; r++) es__ssr_norm(J, J->w->output_norm, r);
    es__pool_barrier(J->pool);
}

/* The first g streams of survivor i into rows 0..g-1, from what the forward kept (its hidden
 * state at the first MSA layer, the DFS intervals, the cache's provisional slots, the RoPE
 * table). */
static void run_streams(es_context *ctx, int32_t i, int32_t g) {
    es__cpu_ctx *c = ctx->impl;
    struct es__msa *m = c->msa;
    es__cpu_state *B = ctx->backend->impl;
    es__fwd lf;
    memset(&lf, 0, sizeof lf);
    lf.n = m->fwd_n;
    lf.n_past = m->fwd_n_past;
    lf.dfs_start = m->dfs_s;
    lf.dfs_end = m->dfs_e;
    lf.pos = m->pos;
    lf.n_streams = g;
    es__msa_job J = {&lf, &ctx->model->hp, ctx->weights, c, B->kern, B->pool, ctx->n_ctx, ctx->model->ss, m};
    m->node = i;
    es__pool_run(B->pool, stream_pass, &J);
    m->node_g = g;
}

/* ---- stream logits on demand */

typedef struct head_job {
    const es__kern *k;
    const es__cpu_mat *W;
    const float *x;
    int64_t n_tok;
    float *y;
    float *panel; /* [threads][panel_floats] */
    size_t panel_floats;
} head_job;

static void head_thread(void *arg, int ith, int nth) {
    const head_job *h = arg;
    int64_t lo, hi;
    es__split_range(h->W->n_out, 16, ith, nth, &lo, &hi);
    if (lo < hi)
        h->k->matmul(h->W->type, h->W->data, h->W->row_bytes, h->W->n_in, lo, hi, h->x, h->W->n_in, h->n_tok, h->y + lo,
                     h->W->n_out, h->panel + (size_t)ith * h->panel_floats);
}

es_status es__msa_stream_logits(es_context *ctx, int32_t i, int32_t g, float *out) {
    es__cpu_ctx *c = ctx->impl;
    struct es__msa *m = c->msa;
    ES_RETURN_IF(!m || m->n_streams == 0 || i < 0 || i >= m->fwd_n, &ctx->backend->err, ES_ERR_INVALID_ARGUMENT,
                 "cpu backend: no streams for survivor %d of the last forward", i);
    ES_RETURN_IF(g < 1 || g > m->n_streams, &ctx->backend->err, ES_ERR_INVALID_ARGUMENT,
                 "cpu backend: %d streams asked of %d", g, m->n_streams);
    /* rows the forward carried (msa_fused.c) are ready; else the pass computes them */
    const float *rows = m->sn + (size_t)i * (size_t)m->n_streams * (size_t)ctx->model->hp.n_embd;
    if (!m->fused) {
        if (m->node != i || m->node_g < g) run_streams(ctx, i, g);
        rows = m->sn;
    }
    const es__cpu_weights *w = ctx->weights;
    es__cpu_state *B = ctx->backend->impl;
    head_job h = {B->kern, &w->output, rows, g, out, c->panel, c->panel_floats};
    es__pool_run(B->pool, head_thread, &h);
    const es__hparams *hp = &ctx->model->hp;
    es__cpu_logits_finish(hp, out, (int64_t)g * hp->n_vocab);
    return ES_OK;
}
