/* forward.c: the llama forward pass on the CPU: token embedding, per layer RMSNorm, Q/K/V
 * projections, RoPE, grouped-query tree attention over the KV cache, output projection and
 * residual, RMSNorm, SwiGLU FFN and residual; final RMSNorm and the output head for the rows that
 * want logits. All pool threads run one job (fwd_thread) and meet at a barrier between phases;
 * each phase splits its outputs over threads, so every output element is computed by one thread
 * with the same code whatever the split (thread- and batch-invariant).
 * Not here: batch validation (core), the KV-cache allocation and compaction (backend.c). */
#include "cpu.h"
#include "msa.h"
#include "opsi.h"

#include <math.h>
#include <string.h>

typedef struct fwd_job {
    const es__fwd *f;
    const es__hparams *hp;
    const es__cpu_weights *w;
    es__cpu_ctx *c;
    const es__kern *k;
    es__pool *pool;
    int32_t n_ctx;
    es__msa_job *msa;     /* Speculative Streaming hooks (msa.c); NULL in a plain forward */
} fwd_job;

/* Threads split matrix rows in multiples of this (whole cache lines of each output row). */
#define ROW_ALIGN 16

/* This thread's rows of y = W x for n_tok tokens: y [n_tok][W.n_out]. */
static void mm_part(const fwd_job *J, const es__cpu_mat *W, const float *x, int64_t n_tok, float *y, int ith,
                    int nth, int64_t *lo_out, int64_t *hi_out) {
    int64_t lo, hi;
    es__split_range(W->n_out, ROW_ALIGN, ith, nth, &lo, &hi);
    float *panel = J->c->panel + (size_t)ith * J->c->panel_floats;
    if (lo < hi)
        J->k->matmul(W->type, W->data, W->row_bytes, W->n_in, lo, hi, x, W->n_in, n_tok, y + lo, W->n_out, panel);
    if (lo_out) *lo_out = lo, *hi_out = hi;
}

/* x[t][lo..hi) += y[t][lo..hi) */
static void add_rows(float *x, const float *y, int64_t width, int64_t n_tok, int64_t lo, int64_t hi) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = lo; i < hi; i++) x[t * width + i] += y[t * width + i];
}

static void norm_rows(const fwd_job *J, const float *x, const float *w, float *y, int64_t n_tok, int ith, int nth) {
    const int64_t d = J->hp->n_embd;
    int64_t lo, hi;
    es__split_range(n_tok, 1, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) es__cpu_rmsnorm_row(J->k, x + t * d, w, d, J->hp->rms_eps, y + t * d);
}

/* Moves rows rows[r] to r (rows ascending, so r <= rows[r] and a forward copy is safe). */
static void gather_rows(float *a, int64_t width, const int32_t *rows, int32_t n_rows) {
    for (int32_t r = 0; r < n_rows; r++)
        if (rows[r] != r) memcpy(a + (int64_t)r * width, a + (int64_t)rows[r] * width, sizeof(float) * (size_t)width);
}

static void layer(const fwd_job *J, int32_t il, int ith, int nth) {
    const es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    const es__cpu_layer *L = &J->w->layers[il];
    es__cpu_ctx *c = J->c;
    const int32_t n = f->n, d = hp->n_embd, hd = hp->head_dim;
    const int32_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    const bool last = il == hp->n_layer - 1;

    norm_rows(J, c->x, L->attn_norm, c->xn, n, ith, nth);
    es__pool_barrier(J->pool);
    mm_part(J, &L->wq, c->xn, n, c->q, ith, nth, NULL, NULL);
    mm_part(J, &L->wk, c->xn, n, c->kn, ith, nth, NULL, NULL);
    mm_part(J, &L->wv, c->xn, n, c->vn, ith, nth, NULL, NULL);
    es__pool_barrier(J->pool);

    /* RoPE on q and k, then this batch's keys/values into its provisional slots */
    {
        int64_t lo, hi;
        es__split_range(n, 1, ith, nth, &lo, &hi);
        const size_t cache_off = (size_t)il * (size_t)hp->n_head_kv * (size_t)J->n_ctx * (size_t)hd;
        for (int64_t t = lo; t < hi; t++) {
            const float *cs = c->rope + t * (hp->n_rot / 2) * 2;
            es__cpu_rope_token(c->q + t * qd, hp->n_head, hd, hp->n_rot, cs, hp->rope_type);
            es__cpu_rope_token(c->kn + t * kvd, hp->n_head_kv, hd, hp->n_rot, cs, hp->rope_type);
            es__cpu_kv_write(c->k + cache_off, c->v + cache_off, J->n_ctx, hp->n_head_kv, hd, f->n_past + (int32_t)t,
                             1, c->kn + t * kvd, c->vn + t * kvd);
        }
    }
    es__pool_barrier(J->pool);

    /* In the last layer only the rows that want logits go on. */
    int32_t nr = n;
    const int32_t *rows = NULL;
    if (last && f->n_out < n) {
        nr = f->n_out;
        rows = f->out_rows;
        if (ith == 0) {
            gather_rows(c->x, d, rows, nr);
            gather_rows(c->q, qd, rows, nr);
        }
        es__pool_barrier(J->pool);
    }
    if (nr == 0) return;

    {
        const size_t cache_off = (size_t)il * (size_t)hp->n_head_kv * (size_t)J->n_ctx * (size_t)hd;
        es__attn a = {c->q,      qd,           c->k + cache_off, c->v + cache_off, J->n_ctx, hp->n_head,
                      hp->n_head_kv, hd,       f->n_past,        n,                nr,       rows,
                      f->dfs_start,  f->dfs_end, 1.0f / sqrtf((float)hd), c->att, qd};
        int64_t lo, hi;
        es__split_range((int64_t)nr * hp->n_head, 1, ith, nth, &lo, &hi);
        es__cpu_attention_range(J->k, &a, lo, hi, c->scores + (size_t)ith * (size_t)(J->n_ctx + n),
                                c->visible + (size_t)ith * (size_t)n);
    }
    es__pool_barrier(J->pool);

    int64_t lo, hi;
    mm_part(J, &L->wo, c->att, nr, c->tmp, ith, nth, &lo, &hi);
    add_rows(c->x, c->tmp, d, nr, lo, hi);
    es__pool_barrier(J->pool);

    norm_rows(J, c->x, L->ffn_norm, c->xn, nr, ith, nth);
    es__pool_barrier(J->pool);

    mm_part(J, &L->gate, c->xn, nr, c->gate, ith, nth, &lo, &hi);
    mm_part(J, &L->up, c->xn, nr, c->up, ith, nth, NULL, NULL);
    for (int32_t t = 0; t < nr; t++) {
        const int64_t off = (int64_t)t * hp->n_ff;
        es__cpu_swiglu_range(J->k, c->gate + off, c->up + off, lo, hi, c->gate + off);
    }
    es__pool_barrier(J->pool);

    mm_part(J, &L->down, c->gate, nr, c->tmp, ith, nth, &lo, &hi);
    add_rows(c->x, c->tmp, d, nr, lo, hi);
    es__pool_barrier(J->pool);
}

static void fwd_thread(void *arg, int ith, int nth) {
    const fwd_job *J = arg;
    const es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    es__cpu_ctx *c = J->c;
    const int32_t n = f->n, d = hp->n_embd;

    {
        int64_t lo, hi;
        es__split_range(n, 1, ith, nth, &lo, &hi);
        const es__cpu_mat *E = &J->w->tok_embd;
        for (int64_t t = lo; t < hi; t++)
            J->k->to_f32(E->type, (const uint8_t *)E->data + E->row_bytes * (size_t)f->tokens[t], c->x + t * d, d);
        es__cpu_rope_table(f->pos + lo, hi - lo, hp->n_rot, hp->rope_freq_base, hp->rope_freq_scale,
                           c->rope + lo * (hp->n_rot / 2) * 2);
    }
    es__pool_barrier(J->pool);

    for (int32_t il = 0; il < hp->n_layer; il++) {
        if (J->msa) es__msa_before_layer(J->msa, il, ith, nth);
        layer(J, il, ith, nth);
    }
    if (J->msa) es__msa_after_layers(J->msa, ith, nth);
    if (f->n_out == 0) return;

    /* rows 0..n_out-1 of x now hold the wanted tokens (gathered in the last layer) */
    norm_rows(J, c->x, J->w->output_norm, c->xn, f->n_out, ith, nth);
    es__pool_barrier(J->pool);
    mm_part(J, &J->w->output, c->xn, f->n_out, f->logits, ith, nth, NULL, NULL);
}

es_status es__cpu_forward(es_context *ctx, const es__fwd *f) {
    es__cpu_state *B = ctx->backend->impl;
    fwd_job J = {f, &ctx->model->hp, ctx->weights, ctx->impl, B->kern, B->pool, ctx->n_ctx, NULL};
    /* Speculative Streaming works on a copy of the call: pruning narrows the rows that want logits */
    es__fwd ss_f;
    es__msa_job msa;
    if (f->n_streams > 0 || f->prune_threshold > 0.0f) {
        ss_f = *f;
        ES_TRY(es__msa_prepare(ctx, &ss_f, &msa));
        J.f = &ss_f;
        J.msa = &msa;
    }
    es__pool_run(B->pool, fwd_thread, &J);
    if (J.msa) es__msa_finish(&msa, f);
    return ES_OK;
}
