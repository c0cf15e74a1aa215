/* msa.c: Speculative Streaming on the CPU (papers/speculative-streaming.txt 3.2, A.1; the reference
 * is tools/train/model.py, the format docs/formats.md):
 *   - tree pruning (3.2.3) at the input of the adapter's prune layer: for every tree node with
 *     children, the early exit output(output_norm(h + up(down(h)))) gives the parent-to-child
 *     probability of each child's token; a child below the threshold goes with its subtree;
 *   - the γ speculative streams of every remaining node: stream j starts at the input of layer
 *     N - Ns as M + P_j (Eq. 3, identity f_η) and runs the top Ns layers with the layers' weights
 *     (plus the adapter's stream-only LoRA), attending to the main stream's keys/values of the
 *     node's ancestors and itself (the KV cache) and to streams <= j of the same node, in one
 *     softmax (Eq. 2); streams write no KV;
 *   - the streams' logits through output_norm and the output head, for one node on demand.
 * The streams run after the main stream's last layer, when the cache holds every layer's keys and
 * values of the batch: the result is the same as interleaving them layer by layer, and the main
 * stream's code path is left exactly as it is (its logits stay bit-identical).
 * Pruning compacts the batch: the surviving tokens' rows (residual, RoPE, and the KV the earlier
 * layers wrote) move down to consecutive rows and slots, and the remaining layers, the output head
 * and the streams run on them alone; kv_compact and the stream logits translate the core's batch
 * indices (msa_map_keep). A surviving token's arithmetic is unchanged: its ancestors survive, at
 * the same positions, in the same order.
 * Deliberately not here: drafting and verification (lib/decode), the adapter file (adapter.c). */
#include "msa.h"

#include "adapter.h"
#include "opsi.h"

#include <math.h>
#include <string.h>

#define EE_CHUNK 32 /* early-exit rows per pass: bounds the scratch at EE_CHUNK x n_vocab */

struct es__msa {
    int32_t tok_cap, rows_cap;
    size_t scores_stride;    /* floats of scores per thread                                     */
    int32_t n_act;           /* surviving tokens of the last forward                            */
    int32_t n_streams;       /* stream rows per token in the last forward                       */
    int32_t *act;            /* [tok_cap] surviving batch tokens, ascending                     */
    int32_t *row_of;         /* [tok_cap] token -> index in act, -1 when pruned                 */
    int32_t *out_rows;       /* [tok_cap] the surviving out rows                                */
    /* pruning's compaction of the last forward (compact = some token was pruned) */
    bool compact;
    int32_t *map_c;          /* [tok_cap] batch index -> compacted row, -1 when pruned         */
    int32_t *orig_of;        /* [tok_cap] compacted row -> batch index                         */
    int32_t *c_arrays;       /* [5][tok_cap] compacted tokens, pos, dfs_start, dfs_end, parent  */
    int32_t *keep_buf;       /* [tok_cap] translated kv_compact sources                        */
    /* lazy streams: what the stream pass needs of the last forward, and whose rows are computed */
    bool lazy;
    int32_t lazy_node;       /* the token whose streams sit in rows 0..lazy_g-1, or -1          */
    int32_t lazy_g;
    int32_t fwd_n, fwd_n_past;  /* rows of the last forward after compaction; its n_past      */
    int32_t batch_n;         /* tokens of the last forward as the core counts them              */
    int32_t *dfs_s, *dfs_e;  /* [tok_cap] copies of the last forward's DFS intervals            */
    float *x0;               /* [tok_cap][n_embd] main hidden state at the first MSA layer      */
    /* stream rows, row = a * n_streams + j for act[a]'s stream j + 1 */
    float *s, *sn;           /* [rows_cap][n_embd] residual; normalised (final: the output)     */
    float *q, *att;          /* [rows_cap][n_head * hd]                                         */
    float *kk, *vv;          /* [rows_cap][n_head_kv * hd]                                      */
    float *tmp;              /* [rows_cap][n_embd]                                              */
    float *gate, *up;        /* [rows_cap][n_ff]                                                */
    /* per thread */
    float *scores;           /* [threads][n_ctx + tok_cap + n_streams]                          */
    int32_t *visible;        /* [threads][tok_cap]                                              */
    float *lora_tmp;         /* [threads][lora_rank]                                            */
    /* early exit */
    float *ee_x;             /* [EE_CHUNK][n_embd]                                              */
    float *ee_down;          /* [threads][prune_rank]                                           */
    float *ee_logits;        /* [EE_CHUNK][n_vocab]                                             */
    int32_t ee_nodes[EE_CHUNK];
    int32_t ee_n, ee_next;
};

const int32_t *es__msa_map_keep(es__cpu_ctx *c, const int32_t *keep, int32_t n_keep) {
    struct es__msa *m = c->msa;
    if (!m || !m->compact) return keep;
    for (int32_t r = 0; r < n_keep; r++) m->keep_buf[r] = m->map_c[keep[r]];
    return m->keep_buf;
}

void es__msa_free(es__cpu_ctx *c, const es_allocator *a) {
    struct es__msa *m = c->msa;
    if (!m) return;
    void *bufs[] = {m->map_c, m->orig_of, m->c_arrays, m->keep_buf, m->dfs_s, m->dfs_e, m->act,  m->row_of, m->out_rows, m->x0,     m->s,       m->sn,      m->q,
                    m->att,  m->kk,     m->vv,       m->tmp,    m->gate,    m->up,      m->scores,
                    m->visible, m->lora_tmp, m->ee_x, m->ee_down, m->ee_logits};
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

es_status es__msa_prepare(es_context *ctx, es__fwd *f, es__msa_job *job) {
    es__cpu_ctx *c = ctx->impl;
    const es__hparams *hp = &ctx->model->hp;
    const es__ss_adapter *ss = ctx->model->ss;
    const es_allocator *a = ctx->backend->alloc;
    es__cpu_state *B = ctx->backend->impl;
    if (!c->msa) {
        c->msa = es__calloc(a, 1, sizeof(struct es__msa));
        ES_RETURN_IF(!c->msa, &ctx->backend->err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory for streams");
    }
    struct es__msa *m = c->msa;
    const size_t n = (size_t)f->n, G = (size_t)f->n_streams, d = (size_t)hp->n_embd;
    const size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim, kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    const size_t ff = (size_t)hp->n_ff, th = (size_t)c->n_threads, rows = f->streams_lazy ? G : n * G;
    const size_t tc = (size_t)m->tok_cap, rc = (size_t)m->rows_cap;
    bool ok = grow(a, &m->act, tc, n, 1, sizeof(int32_t)) && grow(a, &m->row_of, tc, n, 1, sizeof(int32_t)) &&
              grow(a, &m->out_rows, tc, n, 1, sizeof(int32_t)) && grow(a, &m->x0, tc * d, n, d, sizeof(float)) &&
              grow(a, &m->dfs_s, tc, n, 1, sizeof(int32_t)) && grow(a, &m->dfs_e, tc, n, 1, sizeof(int32_t)) &&
              grow(a, &m->map_c, tc, n, 1, sizeof(int32_t)) && grow(a, &m->orig_of, tc, n, 1, sizeof(int32_t)) &&
              grow(a, &m->c_arrays, 5 * tc, 5, n, sizeof(int32_t)) && grow(a, &m->keep_buf, tc, n, 1, sizeof(int32_t));
    if (ok) m->tok_cap = (int32_t)ES__MAX(tc, n);
    ok = ok && grow(a, &m->s, rc * d, rows, d, sizeof(float)) && grow(a, &m->sn, rc * d, rows, d, sizeof(float)) &&
         grow(a, &m->q, rc * qd, rows, qd, sizeof(float)) && grow(a, &m->att, rc * qd, rows, qd, sizeof(float)) &&
         grow(a, &m->kk, rc * kvd, rows, kvd, sizeof(float)) && grow(a, &m->vv, rc * kvd, rows, kvd, sizeof(float)) &&
         grow(a, &m->tmp, rc * d, rows, d, sizeof(float)) && grow(a, &m->gate, rc * ff, rows, ff, sizeof(float)) &&
         grow(a, &m->up, rc * ff, rows, ff, sizeof(float));
    if (ok) m->rows_cap = (int32_t)ES__MAX(rc, rows);
    /* per-thread and early-exit scratch: fixed sizes for this context, allocated once */
    m->scores_stride = (size_t)ctx->n_ctx + (size_t)ctx->n_batch + (size_t)ss->n_streams;
    const size_t fixed = SIZE_MAX;
    ok = ok && grow(a, &m->scores, fixed, th, m->scores_stride, sizeof(float)) &&
         grow(a, &m->visible, fixed, th, (size_t)ctx->n_batch, sizeof(int32_t)) &&
         grow(a, &m->lora_tmp, fixed, th, (size_t)ES__MAX(ss->lora_rank, 1), sizeof(float)) &&
         grow(a, &m->ee_down, fixed, th, (size_t)ES__MAX(ss->prune_rank, 1), sizeof(float));
    if (ok && f->prune_threshold > 0.0f)
        ok = grow(a, &m->ee_x, fixed, EE_CHUNK, d, sizeof(float)) &&
             grow(a, &m->ee_logits, fixed, EE_CHUNK, (size_t)hp->n_vocab, sizeof(float));
    ES_RETURN_IF(!ok, &ctx->backend->err, ES_ERR_OUT_OF_MEMORY,
                 "cpu backend: out of memory for %d tokens with %d streams each", f->n, f->n_streams);
    /* without pruning every token survives */
    for (int32_t i = 0; i < f->n; i++) m->act[i] = m->row_of[i] = i;
    m->n_act = f->n;
    m->n_streams = 0; /* set when the streams have run (or can run, when lazy) */
    m->lazy = f->streams_lazy;
    m->lazy_node = -1;
    m->compact = false;
    m->fwd_n = f->n;
    m->batch_n = f->n;
    m->fwd_n_past = f->n_past;
    memcpy(m->dfs_s, f->dfs_start, sizeof(int32_t) * n);
    memcpy(m->dfs_e, f->dfs_end, sizeof(int32_t) * n);
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

/* y_t += B (A x_t) for this thread's rows: the stream-only LoRA of one projection. */
static void lora_rows(const es__msa_job *J, const es__ss_lora *lo, const float *x, float *y, int64_t r0, int64_t r1,
                      float *tmp) {
    if (!lo->a) return;
    const int32_t rank = J->ss->lora_rank;
    for (int64_t t = r0; t < r1; t++) {
        const float *xt = x + t * lo->n_in;
        float *yt = y + t * lo->n_out;
        for (int32_t r = 0; r < rank; r++) tmp[r] = J->k->dot(lo->a + (int64_t)r * lo->n_in, xt, lo->n_in);
        for (int32_t o = 0; o < lo->n_out; o++) yt[o] += J->k->dot(lo->b + (int64_t)o * rank, tmp, rank);
    }
}

/* ---- pruning (3.2.3) */

static void mark_subtree(const es__fwd *f, int32_t c) {
    for (int32_t i = c; i <= f->dfs_end[c]; i++) f->pruned[i] = 1;
}

/* Thread 0: the next nodes with children that are still in the tree, in pre-order. */
static void pick_chunk(struct es__msa *m, const es__fwd *f) {
    m->ee_n = 0;
    while (m->ee_next < f->n && m->ee_n < EE_CHUNK) {
        const int32_t i = m->ee_next++;
        if (f->dfs_end[i] > i && !f->pruned[i]) m->ee_nodes[m->ee_n++] = i;
    }
}

/* Thread 0: prunes the children of the chunk's nodes whose probability is below the threshold. */
static void decide_chunk(const es__msa_job *J) {
    struct es__msa *m = J->m;
    const es__fwd *f = J->f;
    const int32_t V = J->hp->n_vocab;
    for (int32_t t = 0; t < m->ee_n; t++) {
        const int32_t p = m->ee_nodes[t];
        if (f->pruned[p]) continue; /* an ancestor in this chunk went first */
        const float *l = m->ee_logits + (size_t)t * (size_t)V;
        float mx = -INFINITY;
        for (int32_t v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        double sum = 0.0;
        for (int32_t v = 0; v < V; v++) sum += exp((double)l[v] - (double)mx);
        const double lse = (double)mx + log(sum);
        for (int32_t c = p + 1; c <= f->dfs_end[p]; c = f->dfs_end[c] + 1)
            if (!(exp((double)l[f->tokens[c]] - lse) >= (double)f->prune_threshold)) mark_subtree(f, c);
    }
}

/* Thread 0, after the pruning decisions: moves the surviving tokens to consecutive rows and cache
 * slots (ascending, so a source is never overwritten before it is read) and points the call at
 * compacted arrays. */
static void compact_batch(const es__msa_job *J) {
    struct es__msa *m = J->m;
    es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    const int32_t n = f->n, tc = m->tok_cap;
    int32_t na = 0;
    for (int32_t i = 0; i < n; i++) {
        m->map_c[i] = f->pruned[i] ? -1 : na;
        if (!f->pruned[i]) m->orig_of[na++] = i;
    }
    int32_t k = 0;
    for (int32_t o = 0; o < f->n_out; o++)
        if (!f->pruned[f->out_rows[o]]) m->out_rows[k++] = m->map_c[f->out_rows[o]];
    m->n_act = na;
    for (int32_t r = 0; r < na; r++) m->act[r] = r;
    for (int32_t i = 0; i < n; i++) m->row_of[i] = m->map_c[i];
    f->out_rows = m->out_rows;
    f->n_out = k;
    if (na == n) return;
    m->compact = true;
    int32_t *tok = m->c_arrays, *pos = tok + tc, *st = pos + tc, *en = st + tc, *par = en + tc;
    for (int32_t r = 0; r < na; r++) {
        const int32_t o = m->orig_of[r];
        tok[r] = f->tokens[o];
        pos[r] = f->pos[o];
        st[r] = en[r] = r;
        par[r] = f->parent[o] < 0 ? -1 : m->map_c[f->parent[o]]; /* pruning takes whole subtrees */
    }
    for (int32_t r = na - 1; r > 0; r--)
        if (par[r] >= 0 && en[r] > en[par[r]]) en[par[r]] = en[r];
    const int64_t d = hp->n_embd, half2 = (hp->n_rot / 2) * 2, hd = hp->head_dim;
    const bool x0_taken = f->n_streams > 0 && J->ss->msa_start < J->ss->prune_layer;
    for (int32_t r = 0; r < na; r++) {
        const int32_t o = m->orig_of[r];
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
    f->tokens = tok;
    f->pos = pos;
    f->dfs_start = st;
    f->dfs_end = en;
    f->parent = par;
    /* the lazy stream pass reads these after the forward */
    memcpy(m->dfs_s, st, sizeof(int32_t) * (size_t)na);
    memcpy(m->dfs_e, en, sizeof(int32_t) * (size_t)na);
    m->fwd_n = na;
}

static void prune(const es__msa_job *J, int ith, int nth) {
    struct es__msa *m = J->m;
    es__fwd *f = J->f;
    const es__ss_adapter *ss = J->ss;
    const es__hparams *hp = J->hp;
    const int64_t d = hp->n_embd, r = ss->prune_rank;
    if (ith == 0) m->ee_next = 0;
    for (;;) {
        if (ith == 0) pick_chunk(m, f);
        es__pool_barrier(J->pool);
        if (m->ee_n == 0) break;
        /* e = h + up(down(h)), normalised with output_norm: this thread's rows */
        int64_t lo, hi;
        rows_range(m->ee_n, ith, nth, &lo, &hi);
        float *down = m->ee_down + (size_t)ith * (size_t)r;
        for (int64_t t = lo; t < hi; t++) {
            const float *h = J->c->x + (int64_t)m->ee_nodes[t] * d;
            float *e = m->ee_x + t * d;
            for (int64_t k = 0; k < r; k++) down[k] = J->k->dot(ss->prune_down + k * d, h, d);
            for (int64_t i = 0; i < d; i++) e[i] = h[i] + J->k->dot(ss->prune_up + i * r, down, r);
            es__cpu_rmsnorm_row(J->k, e, J->w->output_norm, d, hp->rms_eps, e);
        }
        es__pool_barrier(J->pool);
        mm(J, &J->w->output, m->ee_x, m->ee_n, m->ee_logits, ith, nth);
        es__pool_barrier(J->pool);
        if (ith == 0) decide_chunk(J);
        /* the next pick (thread 0) is followed by a barrier before anyone reads it */
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
        es__pool_barrier(J->pool);
    }
}

/* ---- the streams (Eq. 2) */

/* Stream row (a, j) attends to the committed slots, the batch slots of act[a]'s ancestors and
 * itself (layer il of the cache, written by the main stream), and to streams 0..j of act[a]. */
static void stream_attention(const es__msa_job *J, int32_t il, int ith, int nth) {
    const struct es__msa *m = J->m;
    const es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    const int32_t G = f->n_streams, nh = hp->n_head, hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const int64_t qd = (int64_t)nh * hd, kvd = (int64_t)hp->n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scores = m->scores + (size_t)ith * m->scores_stride;
    int32_t *visible = m->visible + (size_t)ith * (size_t)m->tok_cap;
    int64_t lo, hi;
    es__split_range((int64_t)m->n_act * G * nh, 1, ith, nth, &lo, &hi);
    int32_t cur = -1, n_vis = 0;
    for (int64_t task = lo; task < hi; task++) {
        const int64_t row = task / nh;
        const int32_t h = (int32_t)(task % nh), a = (int32_t)(row / G), j = (int32_t)(row % G), b = m->act[a];
        if (b != cur) {
            n_vis = 0;
            for (int32_t i = 0; i < f->n; i++)
                if (f->dfs_start[i] <= f->dfs_start[b] && f->dfs_end[b] <= f->dfs_end[i]) visible[n_vis++] = i;
            cur = b;
        }
        const int32_t g = h / group;
        const size_t cache = ((size_t)il * (size_t)hp->n_head_kv + (size_t)g) * (size_t)J->n_ctx * (size_t)hd;
        const float *kg = J->c->k + cache, *vg = J->c->v + cache, *q = m->q + row * qd + (int64_t)h * hd;
        const int32_t n_main = f->n_past + n_vis, n_keys = n_main + j + 1;
        float mx = -INFINITY;
        for (int32_t s = 0; s < n_keys; s++) {
            const float *key = s < n_main ? kg + (int64_t)(s < f->n_past ? s : f->n_past + visible[s - f->n_past]) * hd
                                           : m->kk + ((int64_t)a * G + (s - n_main)) * kvd + (int64_t)g * hd;
            const float sc = J->k->dot(q, key, hd) * scale;
            scores[s] = sc;
            mx = sc > mx ? sc : mx;
        }
        float sum = 0.0f;
        for (int32_t s = 0; s < n_keys; s++) {
            scores[s] = expf(scores[s] - mx);
            sum += scores[s];
        }
        float *o = m->att + row * qd + (int64_t)h * hd;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int32_t s = 0; s < n_keys; s++) {
            const float *val = s < n_main ? vg + (int64_t)(s < f->n_past ? s : f->n_past + visible[s - f->n_past]) * hd
                                           : m->vv + ((int64_t)a * G + (s - n_main)) * kvd + (int64_t)g * hd;
            J->k->axpy(o, scores[s], val, hd);
        }
        const float inv = 1.0f / sum;
        for (int32_t e = 0; e < hd; e++) o[e] *= inv;
    }
}

static void norm_range(const es__msa_job *J, const float *x, const float *w, float *y, int64_t n_rows, int ith, int nth) {
    const int64_t d = J->hp->n_embd;
    int64_t lo, hi;
    rows_range(n_rows, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) es__cpu_rmsnorm_row(J->k, x + t * d, w, d, J->hp->rms_eps, y + t * d);
}

/* One MSA layer for all stream rows. */
static void stream_layer(const es__msa_job *J, int32_t il, int ith, int nth) {
    struct es__msa *m = J->m;
    const es__hparams *hp = J->hp;
    const es__cpu_layer *L = &J->w->layers[il];
    const es__ss_lora *lr = J->ss->lora + (size_t)(il - J->ss->msa_start) * ES__SS_LORA_COUNT;
    const int32_t G = J->f->n_streams;
    const int64_t R = (int64_t)m->n_act * G, d = hp->n_embd, ff = hp->n_ff;
    const int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    float *ltmp = m->lora_tmp + (size_t)ith * (size_t)ES__MAX(J->ss->lora_rank, 1);
    int64_t lo, hi;
    rows_range(R, ith, nth, &lo, &hi);

    norm_range(J, m->s, L->attn_norm, m->sn, R, ith, nth);
    es__pool_barrier(J->pool);
    mm(J, &L->wq, m->sn, R, m->q, ith, nth);
    mm(J, &L->wk, m->sn, R, m->kk, ith, nth);
    mm(J, &L->wv, m->sn, R, m->vv, ith, nth);
    es__pool_barrier(J->pool);
    lora_rows(J, &lr[ES__SS_LORA_Q], m->sn, m->q, lo, hi, ltmp);
    lora_rows(J, &lr[ES__SS_LORA_K], m->sn, m->kk, lo, hi, ltmp);
    lora_rows(J, &lr[ES__SS_LORA_V], m->sn, m->vv, lo, hi, ltmp);
    for (int64_t t = lo; t < hi; t++) { /* RoPE at the node's position */
        const float *cs = J->c->rope + (int64_t)m->act[t / G] * (hp->n_rot / 2) * 2;
        es__cpu_rope_token(m->q + t * qd, hp->n_head, hp->head_dim, hp->n_rot, cs, hp->rope_type);
        es__cpu_rope_token(m->kk + t * kvd, hp->n_head_kv, hp->head_dim, hp->n_rot, cs, hp->rope_type);
    }
    es__pool_barrier(J->pool);
    stream_attention(J, il, ith, nth);
    es__pool_barrier(J->pool);
    mm(J, &L->wo, m->att, R, m->tmp, ith, nth);
    es__pool_barrier(J->pool);
    lora_rows(J, &lr[ES__SS_LORA_O], m->att, m->tmp, lo, hi, ltmp);
    for (int64_t i = lo * d; i < hi * d; i++) m->s[i] += m->tmp[i];
    es__pool_barrier(J->pool);

    norm_range(J, m->s, L->ffn_norm, m->sn, R, ith, nth);
    es__pool_barrier(J->pool);
    mm(J, &L->gate, m->sn, R, m->gate, ith, nth);
    mm(J, &L->up, m->sn, R, m->up, ith, nth);
    es__pool_barrier(J->pool);
    lora_rows(J, &lr[ES__SS_LORA_GATE], m->sn, m->gate, lo, hi, ltmp);
    lora_rows(J, &lr[ES__SS_LORA_UP], m->sn, m->up, lo, hi, ltmp);
    for (int64_t i = lo * ff; i < hi * ff; i++) {
        const float g = m->gate[i];
        m->gate[i] = g / (1.0f + expf(-g)) * m->up[i];
    }
    es__pool_barrier(J->pool);
    mm(J, &L->down, m->gate, R, m->tmp, ith, nth);
    es__pool_barrier(J->pool);
    lora_rows(J, &lr[ES__SS_LORA_DOWN], m->gate, m->tmp, lo, hi, ltmp);
    for (int64_t i = lo * d; i < hi * d; i++) m->s[i] += m->tmp[i];
    es__pool_barrier(J->pool);
}

/* The streams of the tokens m->act[0..n_act): Eq. 3, then the MSA layers, then output_norm. */
static void stream_pass(es__msa_job *J, int ith, int nth) {
    const int32_t G = J->f->n_streams;
    struct es__msa *m = J->m;
    const int64_t d = J->hp->n_embd, R = (int64_t)m->n_act * G;
    int64_t lo, hi;
    rows_range(R, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) { /* Eq. 3: S_j = M + P_j */
        const float *x = m->x0 + (int64_t)m->act[t / G] * d, *p = J->ss->stream_embd + (t % G) * d;
        for (int64_t i = 0; i < d; i++) m->s[t * d + i] = x[i] + p[i];
    }
    es__pool_barrier(J->pool);
    for (int32_t il = J->ss->msa_start; il < J->hp->n_layer; il++) stream_layer(J, il, ith, nth);
    norm_range(J, m->s, J->w->output_norm, m->sn, R, ith, nth);
    if (ith == 0) m->n_streams = G;
    es__pool_barrier(J->pool);
}

void es__msa_after_layers(es__msa_job *J, int ith, int nth) {
    if (J->f->n_streams == 0) return;
    if (J->f->streams_lazy) {
        if (ith == 0) J->m->n_streams = J->f->n_streams; /* read after the pool job */
        return;
    }
    stream_pass(J, ith, nth);
}

static void lazy_thread(void *arg, int ith, int nth) {
    stream_pass(arg, ith, nth);
}

/* Lazy mode: token i's streams alone, into rows 0..n_streams-1, from what the forward kept (its
 * hidden state at the first MSA layer, its DFS interval, the cache's provisional slots, the RoPE
 * table). */
static void lazy_streams(es_context *ctx, int32_t i, int32_t g) {
    es__cpu_ctx *c = ctx->impl;
    struct es__msa *m = c->msa;
    es__cpu_state *B = ctx->backend->impl;
    es__fwd lf;
    memset(&lf, 0, sizeof lf);
    lf.n = m->fwd_n;
    lf.n_past = m->fwd_n_past;
    lf.dfs_start = m->dfs_s;
    lf.dfs_end = m->dfs_e;
    lf.n_streams = g;
    es__msa_job J = {&lf, &ctx->model->hp, ctx->weights, c, B->kern, B->pool, ctx->n_ctx, ctx->model->ss, m};
    int32_t *act = m->act, n_act = m->n_act, one = i, n_streams = m->n_streams;
    m->act = &one;
    m->n_act = 1;
    es__pool_run(B->pool, lazy_thread, &J);
    m->act = act;
    m->n_act = n_act;
    m->n_streams = n_streams;
    m->lazy_node = i;
    m->lazy_g = g;
}

void es__msa_finish(es__msa_job *J, const es__fwd *orig) {
    const es__fwd *f = J->f;
    if (f->n_out == orig->n_out) return;
    /* row k holds the token f->out_rows[k] (a compacted row), a subsequence of orig->out_rows:
     * move rows up, last first */
    const size_t V = (size_t)J->hp->n_vocab;
    int32_t k = f->n_out - 1;
    for (int32_t r = orig->n_out - 1; r >= 0 && k >= 0; r--) {
        if (orig->out_rows[r] != J->m->orig_of[f->out_rows[k]]) continue;
        if (r != k) memmove(f->logits + (size_t)r * V, f->logits + (size_t)k * V, sizeof(float) * V);
        k--;
    }
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
    ES_RETURN_IF(!m || m->n_streams == 0 || i < 0 || i >= m->batch_n || m->row_of[i] < 0, &ctx->backend->err,
                 ES_ERR_INVALID_ARGUMENT, "cpu backend: no streams computed for batch token %d", i);
    ES_RETURN_IF(g < 1 || g > m->n_streams, &ctx->backend->err, ES_ERR_INVALID_ARGUMENT,
                 "cpu backend: %d streams asked of %d", g, m->n_streams);
    const int32_t ci = m->row_of[i]; /* the token's row after pruning's compaction */
    if (m->lazy && (m->lazy_node != ci || m->lazy_g < g)) lazy_streams(ctx, ci, g);
    /* eager rows hold every stream of each token; lazy rows the first lazy_g of one token */
    const int64_t row = m->lazy ? 0 : ci;
    const int64_t stride = m->lazy ? m->lazy_g : m->n_streams;
    const es__cpu_weights *w = ctx->weights;
    es__cpu_state *B = ctx->backend->impl;
    const int64_t d = ctx->model->hp.n_embd;
    head_job h = {B->kern, &w->output, m->sn + row * stride * d, g, out,
                  c->panel, c->panel_floats};
    es__pool_run(B->pool, head_thread, &h);
    return ES_OK;
}
