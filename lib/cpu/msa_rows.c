/* msa_rows.c: one speculative stream row through an MSA layer (papers/speculative-streaming.txt
 * 3.2, Eq. 2 and 3; the reference is tools/train/model.py), in the pieces the stream pass (msa.c)
 * and the forward's own phases (msa_fused.c) run between their matrix products. The
 * architecture's steps (arch.h: biases, GeGLU, post-branch norms, soft-capping, sliding windows)
 * are the main stream's. Deliberately not here: which rows run when (the callers). */
#include "msa_impl.h"

#include "opsi.h"

#include <math.h>
#include <string.h>

static const es__ss_lora *layer_lora(const es__msa_job *J, int32_t il) {
    return J->ss->lora + (size_t)(il - J->ss->msa_start) * ES__SS_LORA_COUNT;
}

/* A x into ax: the LoRA's rank-sized inner vector. */
static void lora_in(const es__msa_job *J, const es__ss_lora *lo, const float *x, float *ax) {
    for (int32_t r = 0; r < J->ss->lora_rank; r++) ax[r] = J->k->dot(lo->a + (int64_t)r * lo->n_in, x, lo->n_in);
}

/* out += B ax over all outputs, as rank multiply-adds of B's columns (whole output vectors): a
 * dot product of rank elements per output cost about eight times the arithmetic, mostly in its
 * horizontal sum. */
static void lora_b_add(const es__msa_job *J, const es__ss_lora *lo, const float *ax, float *out) {
    for (int32_t k = 0; k < J->ss->lora_rank; k++) J->k->axpy(out, ax[k], lo->bt + (size_t)k * (size_t)lo->n_out, lo->n_out);
}

float *es__ssr_scratch(const es__msa_job *J, int ith) {
    return J->m->lora_tmp + (size_t)ith * J->m->lora_stride;
}

/* y += B (A x): the stream-only LoRA of one projection, for one row. */
static void lora_row(const es__msa_job *J, const es__ss_lora *lo, const float *x, float *y, float *ltmp) {
    if (!lo->a) return;
    lora_in(J, lo, x, ltmp);
    lora_b_add(J, lo, ltmp, y);
}


/* A residual branch's output (tmp[r]) into the residual, through the post-branch norm when the
 * architecture has one (gemma2), as the forward's branch_phase does. */
static void branch_add(const es__msa_job *J, const float *post, int64_t r) {
    struct es__msa *m = J->m;
    const int64_t d = J->hp->n_embd;
    float *y = m->tmp + r * d;
    if (post) es__cpu_rmsnorm_row(J->k, y, post, d, J->hp->rms_eps, y);
    for (int64_t i = 0; i < d; i++) m->s[r * d + i] += J->hp->residual_scale * y[i];
}

void es__ssr_init(const es__msa_job *J, int32_t b, int32_t j, int64_t r) {
    struct es__msa *m = J->m;
    const int64_t d = J->hp->n_embd;
    const float *x = m->x0 + (int64_t)b * d, *p = J->ss->stream_embd + (int64_t)j * d;
    for (int64_t i = 0; i < d; i++) m->s[r * d + i] = x[i] + p[i];
}

void es__ssr_norm(const es__msa_job *J, const float *w, int64_t r) {
    const int64_t d = J->hp->n_embd;
    es__cpu_rmsnorm_row(J->k, J->m->s + r * d, w, d, J->hp->rms_eps, J->m->sn + r * d);
}

void es__ssr_qkv(const es__msa_job *J, int32_t il, int32_t b, int64_t r, float *ltmp) {
    struct es__msa *m = J->m;
    const es__hparams *hp = J->hp;
    const es__cpu_layer *L = &J->w->layers[il];
    const es__ss_lora *lr = layer_lora(J, il);
    const int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const float *x = m->sn + r * hp->n_embd;
    float *q = m->q + r * qd, *k = m->kk + r * kvd, *v = m->vv + r * kvd;
    lora_row(J, &lr[ES__SS_LORA_Q], x, q, ltmp);
    lora_row(J, &lr[ES__SS_LORA_K], x, k, ltmp);
    lora_row(J, &lr[ES__SS_LORA_V], x, v, ltmp);
    const float *cs = es__cpu_rope_row(J->c->rope, hp, b, il);
    es__cpu_qkv_prepare(J->k, hp, L, q, k, v, cs);
}

/* The committed slots from c0 (slot s holds position s), then the batch tokens of b's ancestors
 * and b in the window (their indices: token i is in slot n_past + i): what b's streams see of
 * the main stream. */
static int32_t visible_slots(const es__msa_job *J, int32_t b, int32_t window, int32_t *c0, int32_t *visible) {
    const es__fwd *f = J->f;
    const int32_t p = f->pos[b];
    *c0 = window > 0 ? ES__MIN(f->n_past, ES__MAX(0, p - window + 1)) : 0;
    int32_t n_vis = 0;
    for (int32_t i = 0; i < f->n; i++)
        if (f->dfs_start[i] <= f->dfs_start[b] && f->dfs_end[b] <= f->dfs_end[i] && (window <= 0 || f->pos[i] > p - window))
            visible[n_vis++] = i;
    return n_vis;
}

void es__ssr_attend_streams(const es__msa_job *J, int32_t il, int32_t b, int64_t r0, int64_t t0, int64_t t1,
                            int32_t *visible) {
    const struct es__msa *m = J->m;
    const es__hparams *hp = J->hp;
    const int32_t G = J->f->n_streams, hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const int64_t qd = (int64_t)hp->n_head * hd, kvd = (int64_t)hp->n_head_kv * hd;
    int32_t c0, cur_g = -1, nq = 0;
    const int32_t n_vis = visible_slots(J, b, es__layer_window(hp, il), &c0, visible);
    es__attn_q qs[ES__ATTN_MULTI];
    for (int64_t task = t0; task < t1; task++) {
        const int32_t h = (int32_t)(task / G), j = (int32_t)(task % G), g = h / group;
        const int64_t r = r0 + j;
        if (nq > 0 && (g != cur_g || nq == ES__ATTN_MULTI)) { /* a run of one kv head's queries */
            J->k->attend_multi(nq, qs, hd, hp->attn_scale, hp->attn_softcap);
            nq = 0;
        }
        cur_g = g;
        const size_t cache = (((size_t)il * (size_t)hp->n_head_kv + (size_t)g) * (size_t)J->n_ctx + (size_t)c0) * (size_t)hd;
        /* the main stream's keys, then streams 0..j of this survivor's (stream rows r0..r) */
        qs[nq++] = (es__attn_q){.q = m->q + r * qd + (int64_t)h * hd, .kb = J->c->k + cache, .vb = J->c->v + cache,
                                .vis = visible, .n_past = J->f->n_past - c0, .n_vis = n_vis,
                                .kx = m->kk + r0 * kvd + (int64_t)g * hd, .vx = m->vv + r0 * kvd + (int64_t)g * hd,
                                .ldx = kvd, .n_x = j + 1, .out = m->att + r * qd + (int64_t)h * hd};
    }
    if (nq > 0) J->k->attend_multi(nq, qs, hd, hp->attn_scale, hp->attn_softcap);
}

void es__ssr_attn_out_ffn_in(const es__msa_job *J, int32_t il, int64_t r, float *ltmp) {
    struct es__msa *m = J->m;
    const es__hparams *hp = J->hp;
    const es__cpu_layer *L = &J->w->layers[il];
    const es__ss_lora *lr = layer_lora(J, il);
    const int64_t qd = (int64_t)hp->n_head * hp->head_dim;
    lora_row(J, &lr[ES__SS_LORA_O], m->att + r * qd, m->tmp + r * hp->n_embd, ltmp);
    branch_add(J, L->post_attn_norm, r);
    es__ssr_norm(J, L->ffn_norm, r);
    const float *x = m->sn + r * hp->n_embd;
    const es__ss_lora *lo[2] = {&lr[ES__SS_LORA_GATE], &lr[ES__SS_LORA_UP]};
    float *out[2] = {m->lg + r * hp->n_ff, m->lu + r * hp->n_ff};
    for (int i = 0; i < 2; i++) {
        if (!lo[i]->a) continue;
        lora_in(J, lo[i], x, ltmp);
        memset(out[i], 0, sizeof(float) * (size_t)lo[i]->n_out);
        lora_b_add(J, lo[i], ltmp, out[i]);
    }
}

void es__ssr_ffn_cols(const es__msa_job *J, int32_t il, int64_t r, int64_t lo, int64_t hi) {
    struct es__msa *m = J->m;
    const es__hparams *hp = J->hp;
    const es__ss_lora *lr = layer_lora(J, il);
    const int64_t ff = hp->n_ff;
    float *gate = m->gate + r * ff, *up = m->up + r * ff;
    if (lr[ES__SS_LORA_GATE].a)
        for (int64_t i = lo; i < hi; i++) gate[i] += m->lg[r * ff + i];
    if (lr[ES__SS_LORA_UP].a)
        for (int64_t i = lo; i < hi; i++) up[i] += m->lu[r * ff + i];
    if (hp->arch && hp->arch->act == ES__ACT_GELU)
        es__cpu_geglu_range(gate, up, lo, hi, gate);
    else
        es__cpu_swiglu_range(J->k, gate, up, lo, hi, gate);
}

void es__ssr_ffn_out(const es__msa_job *J, int32_t il, int64_t r, float *ltmp) {
    struct es__msa *m = J->m;
    const es__cpu_layer *L = &J->w->layers[il];
    lora_row(J, &layer_lora(J, il)[ES__SS_LORA_DOWN], m->gate + r * J->hp->n_ff, m->tmp + r * J->hp->n_embd, ltmp);
    branch_add(J, L->post_ffn_norm, r);
}

void es__ssr_mm(const es__msa_job *J, const es__cpu_mat *W, const float *x, float *y, int64_t n, int64_t lo, int64_t hi,
                float *panel) {
    if (lo < hi && n > 0) J->k->matmul(W->type, W->data, W->row_bytes, W->n_in, lo, hi, x, W->n_in, n, y + lo, W->n_out, panel);
}
