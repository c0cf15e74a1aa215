/* msa_fused.c: speculative streams that ride in the forward's own phases. The stream pass after
 * a forward (msa.c) reads the top Ns layers' weights a second time, from memory once the model
 * is past the cache (0.35-0.47 ms for the long model's 17 MB, a third of a call); here every
 * survivor's streams run through those layers with the main rows, chunk by chunk, while each
 * chunk of weights is in the core's cache, so they cost their arithmetic. That grows with the
 * rows (survivors x streams) and the pass does not, so a model's first context on a device
 * measures up to how many rows riding is faster on this machine (es__msa_measure_fuse), as the
 * Vulkan backend does, and its later contexts take that answer.
 * A row's bits are the pass's (msa_impl.h). forward.c calls these hooks from its phases.
 * Deliberately not here: the row math (msa_rows.c). */
#include "msa_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

bool es__msa_fuses(const es__msa_job *J) {
    const struct es__msa *m = J->m;
    const es__fwd *f = J->f;
    /* pruning above the streams' start would move rows that already ride */
    const bool prune_above = f->prune_threshold > 0.0f && J->ss->prune_layer > J->ss->msa_start;
    const int64_t rows = (int64_t)f->n * f->n_streams;
    return f->n_streams > 0 && f->n_out > 0 && !prune_above && rows <= ES__MIN(J->c->fuse_rows, m->rows_cap);
}

int64_t es__msa_fz_rows(const es__msa_job *J, int32_t il) {
    if (!J || il < J->ss->msa_start || !J->m->fused) return 0;
    return (int64_t)J->f->n * J->f->n_streams;
}

void es__msa_fz_norm(const es__msa_job *J, int32_t il, int64_t r, int ith) {
    const int32_t G = J->f->n_streams;
    if (il == J->ss->msa_start) es__ssr_init(J, (int32_t)(r / G), (int32_t)(r % G), r);
    else es__ssr_ffn_out(J, il - 1, r, es__ssr_scratch(J, ith));
    es__ssr_norm(J, il < J->hp->n_layer ? J->w->layers[il].attn_norm : J->w->output_norm, r);
}

void es__msa_fz_rope(const es__msa_job *J, int32_t il, int64_t r, int ith) {
    es__ssr_qkv(J, il, (int32_t)(r / J->f->n_streams), r, es__ssr_scratch(J, ith));
}

void es__msa_fz_attend(const es__msa_job *J, int32_t il, int64_t task, int ith) {
    const struct es__msa *m = J->m;
    const int32_t G = J->f->n_streams;
    const int64_t rows = es__msa_fz_rows(J, il), r = task % rows, j = r % G; /* head-major, as the stream pass */
    const int64_t t = (task / rows) * G + j; /* the task's number among its survivor's streams */
    es__ssr_attend_streams(J, il, (int32_t)(r / G), r - j, t, t + 1, m->visible + (size_t)ith * (size_t)m->tok_cap);
}

void es__msa_fz_ffn_norm(const es__msa_job *J, int32_t il, int64_t r, int ith) {
    es__ssr_attn_out_ffn_in(J, il, r, es__ssr_scratch(J, ith));
}

void es__msa_fz_chunk(const es__msa_job *J, int32_t il, es__fz_op op, int64_t lo, int64_t hi, int ith) {
    struct es__msa *m = J->m;
    float *panel = J->c->panel + (size_t)ith * J->c->panel_floats;
    const es__cpu_layer *L = &J->w->layers[il];
    const int64_t R = es__msa_fz_rows(J, il);
    switch (op) {
    case ES__FZ_QKV: { /* rows [lo, hi) of Q, K and V laid end to end, as the main phase's */
        const es__cpu_mat *W[3] = {&L->wq, &L->wk, &L->wv};
        float *y[3] = {m->q, m->kk, m->vv};
        for (int i = 0, off = 0; i < 3; off += (int)W[i]->n_out, i++)
            es__ssr_mm(J, W[i], m->sn, y[i], R, ES__MAX(lo - off, 0), ES__MIN(hi - off, W[i]->n_out), panel);
        return;
    }
    case ES__FZ_WO: es__ssr_mm(J, &L->wo, m->att, m->tmp, R, lo, hi, panel); return;
    case ES__FZ_FFN:
        es__ssr_mm(J, &L->gate, m->sn, m->gate, R, lo, hi, panel);
        es__ssr_mm(J, &L->up, m->sn, m->up, R, lo, hi, panel);
        for (int64_t r = 0; r < R; r++) es__ssr_ffn_cols(J, il, r, lo, hi);
        return;
    case ES__FZ_DOWN: es__ssr_mm(J, &L->down, m->gate, m->tmp, R, lo, hi, panel); return;
    }
}

/* ---- how many rows ride: measured per context */

#define FUSE_GAIN 0.95 /* riding must take at most this share of the pass's time: a wrong choice
                          made on a noisy machine then costs little */

/* A chain of n tokens from position 0 with G streams each (nothing is committed: the slots are
 * provisional), then the last token's streams, riding (rows > 0) or from the pass; ms. */
static es_status time_chain(es_context *ctx, int32_t n, int32_t G, int32_t rows, float *logits, double *ms) {
    int32_t tokens[8] = {0}, pos[8], dfs_start[8], dfs_end[8], parent[8], out[8];
    uint8_t pruned[8] = {0};
    for (int32_t i = 0; i < n; i++) pos[i] = dfs_start[i] = out[i] = i, dfs_end[i] = n - 1, parent[i] = i - 1;
    const es__fwd f = {n, 0, tokens, pos, dfs_start, dfs_end, parent, n, out, logits, G, 0.0f, pruned, NULL, NULL, NULL};
    es__msa_set_fuse_rows(ctx, rows);
    const double t0 = es__time_now();
    ES_TRY(es__cpu_forward(ctx, &f));
    ES_TRY(es__msa_stream_logits(ctx, n - 1, G, logits + (size_t)n * (size_t)ctx->model->hp.n_vocab));
    *ms = (es__time_now() - t0) * 1e3;
    return ES_OK;
}

/* Riding's time over the pass's for chains of n: the best of two alternated timings each (noise
 * only adds time), after a first call of each (page faults, cold caches); about six calls. */
static es_status ride_ratio(es_context *ctx, int32_t n, int32_t G, float *logits, double *ratio) {
    double ride = INFINITY, pass = INFINITY, ms = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        ES_TRY(time_chain(ctx, n, G, n * G, logits, &ms));
        if (rep > 0) ride = ES__MIN(ride, ms);
        ES_TRY(time_chain(ctx, n, G, 0, logits, &ms));
        if (rep > 0) pass = ES__MIN(pass, ms);
    }
    *ratio = ride / ES__MAX(pass, 1e-9);
    return ES_OK;
}

es_status es__msa_measure_fuse(es_context *ctx) {
    const int32_t G = ctx->model->ss->n_streams;
    if (G < 1) return ES_OK;
    es_backend *b = ctx->backend;
    /* a later context of the model on this backend's kind of pool reuses the first one's answer:
     * about a dozen forward calls at every creation (20-40 ms on the long model here; on a phone
     * with a model of gigabytes, a second) for the same machine and the same sizes */
    const int32_t sizes = ES__MIN(ES__MIN(8, ES__MSA_FUSE_ROWS / G), ES__MIN(ctx->n_batch, ctx->n_ctx));
    char key[112];
    snprintf(key, sizeof key, "cpu, %d threads, chains of up to %d", b->n_threads, sizes);
    int32_t rows = 0;
    if (es__ss_ride_recall(ctx->model->ss, key, &rows)) {
        es__msa_set_fuse_rows(ctx, rows);
        es__logf(&b->log, ES_LOG_INFO, "cpu backend: streams ride in the forward up to %d rows (as measured for an "
                 "earlier context of this model)", rows);
        return ES_OK;
    }
    const es_backend_stats counted = b->stats; /* the caller's counters are about its own calls */
    const bool profile = b->profile;
    b->profile = false;
    float *logits = es__calloc(b->alloc, (size_t)(8 + G) * (size_t)ctx->model->hp.n_vocab, sizeof(float));
    es_status s = logits ? ES_OK : es__fail(&b->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory");
    int32_t cap = 0, last = 0;
    double ratio = 0.0;
    for (int32_t n = 1; s == ES_OK && n <= sizes; n *= 2) {
        s = ride_ratio(ctx, n, G, logits, &ratio);
        last = n;
        if (s != ES_OK || !(ratio < FUSE_GAIN)) break;
        cap = n * G;
    }
    es__free(b->alloc, logits);
    es__msa_set_fuse_rows(ctx, cap);
    if (s == ES_OK) es__ss_ride_remember(ctx->model->ss, key, cap);
    if (s == ES_OK)
        es__logf(&b->log, ES_LOG_INFO,
                 "cpu backend: streams ride in the forward up to %d rows (measured: a chain of %d with its streams "
                 "riding took %.2fx the time of one with a stream pass)",
                 cap, last, ratio);
    b->profile = profile;
    b->stats = counted;
    return s;
}

void es__msa_set_fuse_rows(es_context *ctx, int32_t rows) {
    ((es__cpu_ctx *)ctx->impl)->fuse_rows = ES__MAX(rows, 0);
}

int32_t es__msa_fuse_rows(const es_context *ctx) {
    return ((const es__cpu_ctx *)ctx->impl)->fuse_rows;
}
