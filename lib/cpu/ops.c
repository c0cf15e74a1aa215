/* ops.c: the ops of ops.h: the per-thread pieces (opsi.h) and whole-op wrappers that check shapes
 * and spread the work over a pool. Reductions follow a fixed order (see kern_impl.c) so results do
 * not depend on the batch or the thread split. Not here: the layer loop (forward.c). */
#include "opsi.h"

#include <math.h>
#include <string.h>

/* ---- per-thread pieces */

void es__cpu_rmsnorm_row(const es__kern *k, const float *x, const float *w, int64_t n, float eps, float *y) {
    const float ss = k->dot(x, x, n);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

/* The RMSNorm of each of n_head heads of hd values, in place (one weight vector for all heads). */
static void head_norm(const es__kern *k, float *x, int32_t n_head, int32_t hd, const float *w, float eps) {
    for (int32_t h = 0; h < n_head; h++) es__cpu_rmsnorm_row(k, x + (size_t)h * (size_t)hd, w, hd, eps, x + (size_t)h * (size_t)hd);
}

void es__cpu_qkv_prepare(const es__kern *k, const es__hparams *hp, const es__cpu_layer *L, float *q, float *kr,
                         float *v, const float *cs) {
    const int32_t hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    es__cpu_add_bias(q, L->bq, qd);
    es__cpu_add_bias(kr, L->bk, kvd);
    es__cpu_add_bias(v, L->bv, kvd);
    if (L->q_norm) {
        head_norm(k, q, hp->n_head, hd, L->q_norm, hp->rms_eps);
        head_norm(k, kr, hp->n_head_kv, hd, L->k_norm, hp->rms_eps);
    }
    es__cpu_rope_token(q, hp->n_head, hd, hp->n_rot, cs, hp->rope_type);
    es__cpu_rope_token(kr, hp->n_head_kv, hd, hp->n_rot, cs, hp->rope_type);
}

void es__cpu_rope_table(const es__rope *r, const int32_t *pos, int64_t n_tok, bool unit, float *cs) {
    const int64_t half = r->n_rot / 2;
    for (int64_t t = 0; t < n_tok; t++) es__rope_cs(r, pos[t], 0, half, unit, cs + t * half * 2);
}

void es__cpu_rope_rows(const es__hparams *hp, int32_t n_ctx, const int32_t *pos, int64_t n_tok, float *cs) {
    const int32_t tables = es__rope_tables(hp);
    const int64_t half = hp->n_rot / 2;
    for (int32_t k = 0; k < tables; k++) {
        const es__rope r = es__rope_table(hp, n_ctx, k);
        for (int64_t t = 0; t < n_tok; t++) es__rope_cs(&r, pos[t], 0, half, false, cs + (t * tables + k) * half * 2);
    }
}

/* Rotates pairs [i0, i1) of every head; cs holds their cos/sin from pair i0 on. */
static void rope_pairs(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot, int64_t i0, int64_t i1,
                       const float *cs, es_rope_type type) {
    const int64_t half = n_rot / 2;
    /* NORM rotates adjacent pairs, NEOX the two halves of the rotated dims */
    const int64_t step = type == ES_ROPE_NEOX ? 1 : 2, off = type == ES_ROPE_NEOX ? half : 1;
    for (int64_t h = 0; h < n_head; h++) {
        float *xh = x + h * head_dim;
        for (int64_t i = i0; i < i1; i++) {
            const float c = cs[2 * (i - i0)], s = cs[2 * (i - i0) + 1];
            float *a = xh + i * step, *b = a + off;
            const float x0 = *a, x1 = *b;
            *a = x0 * c - x1 * s;
            *b = x0 * s + x1 * c;
        }
    }
}

void es__cpu_rope_token(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot, const float *cs,
                        es_rope_type type) {
    rope_pairs(x, n_head, head_dim, n_rot, 0, n_rot / 2, cs, type);
}

/* The first committed slot batch token j sees: keys at positions <= p - window are out of a
 * sliding window (committed slot s holds position s). */
static int32_t first_slot(const es__attn *a, int32_t j) {
    if (a->window <= 0) return 0;
    const int64_t lo = (int64_t)a->pos[j] - a->window + 1;
    return (int32_t)ES__MIN(ES__MAX(lo, 0), (int64_t)a->n_past);
}

/* In-batch keys of batch token j: its ancestors and itself (inside its window), in slot order.
 * Returns the count. */
static int32_t visible_keys(const es__attn *a, int32_t j, int32_t *visible) {
    int32_t n_vis = 0;
    for (int32_t i = 0; i < a->n_batch; i++)
        if (a->dfs_start[i] <= a->dfs_start[j] && a->dfs_end[j] <= a->dfs_end[i] &&
            (a->window <= 0 || a->pos[i] > a->pos[j] - a->window))
            visible[n_vis++] = i;
    return n_vis;
}

void es__cpu_attention_range(const es__kern *k, const es__attn *a, int64_t lo, int64_t hi, int32_t *visible) {
    const int32_t hd = a->head_dim, group = a->n_head / a->n_head_kv, rb = ES__CPU_ATTN_ROWS;
    int32_t cur_block = -1, cur_g = -1, n_vis[ES__CPU_ATTN_ROWS], nq = 0;
    es__attn_q qs[ES__ATTN_MULTI];
    for (int64_t task = lo; task < hi; task++) {
        /* blocks of rb query rows; inside a block head-major, so the queries of one kv head come
         * in a run, and attend_multi reads its keys and values once for the run */
        const int32_t block = (int32_t)(task / ((int64_t)rb * a->n_head));
        const int32_t r0 = block * rb, nr = ES__MIN(rb, a->n_q - r0);
        const int32_t u = (int32_t)(task - (int64_t)block * rb * a->n_head);
        const int32_t h = u / nr, row = r0 + u % nr, g = h / group;
        if (nq > 0 && (block != cur_block || g != cur_g || nq == ES__ATTN_MULTI)) {
            k->attend_multi(nq, qs, hd, a->scale, a->softcap); /* before the visible keys change */
            nq = 0;
        }
        if (block != cur_block) {
            for (int32_t r = 0; r < nr; r++)
                n_vis[r] = visible_keys(a, a->rows ? a->rows[r0 + r] : r0 + r, visible + (size_t)r * (size_t)a->n_batch);
            cur_block = block;
        }
        cur_g = g;
        /* a window starts the committed keys at slot s0: the kernel sees the cache from there, so
         * the keys it reduces are the same sequence whether the token is decoded or prefilled */
        const int32_t s0 = first_slot(a, a->rows ? a->rows[row] : row);
        qs[nq++] = (es__attn_q){.q = a->q + row * a->q_stride + (int64_t)h * hd,
                                .kb = a->kc + ((int64_t)g * a->n_ctx + s0) * hd,
                                .vb = a->vc + ((int64_t)g * a->n_ctx + s0) * hd,
                                .vis = visible + (size_t)(row - r0) * (size_t)a->n_batch,
                                .n_past = a->n_past - s0,
                                .n_vis = n_vis[row - r0],
                                .out = a->out + row * a->out_stride + (int64_t)h * hd};
    }
    if (nq > 0) k->attend_multi(nq, qs, hd, a->scale, a->softcap);
}

void es__cpu_swiglu_range(const es__kern *k, const float *gate, const float *up, int64_t lo, int64_t hi,
                          float *out) {
    if (lo < hi) k->silu_mul(gate + lo, up + lo, hi - lo, out + lo);
}

void es__cpu_geglu_range(const float *gate, const float *up, int64_t lo, int64_t hi, float *out) {
    for (int64_t i = lo; i < hi; i++) {
        const float g = gate[i];
        out[i] = 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g))) * up[i];
    }
}

void es__cpu_softcap(float *x, int64_t n, float c) {
    for (int64_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] / c);
}

void es__cpu_logits_finish(const es__hparams *hp, float *x, int64_t n) {
    if (hp->logit_mul != 1.0f)
        for (int64_t i = 0; i < n; i++) x[i] *= hp->logit_mul;
    if (hp->final_softcap > 0.0f) es__cpu_softcap(x, n, hp->final_softcap);
}

/* ---- whole ops */

typedef struct matmul_job {
    const es__kern *k;
    es__dtype type;
    const void *w;
    size_t row_bytes;
    int64_t n_in, n_out, n_tok;
    const float *x;
    float *y;
    float *panel; /* [nth][panel_rows * n_in] */
} matmul_job;

static void matmul_thread(void *arg, int ith, int nth) {
    const matmul_job *j = arg;
    int64_t lo, hi;
    es__split_range(j->n_out, 16, ith, nth, &lo, &hi);
    float *panel = j->panel + (size_t)ith * (size_t)j->k->panel_rows * (size_t)j->n_in;
    if (lo < hi)
        j->k->matmul(j->type, j->w, j->row_bytes, j->n_in, lo, hi, j->x, j->n_in, j->n_tok, j->y + lo, j->n_out, panel);
}

static void run(es__pool *pool, es__pool_fn fn, void *arg) {
    if (pool)
        es__pool_run(pool, fn, arg);
    else
        fn(arg, 0, 1);
}

es_status es__cpu_matmul(es__pool *pool, es__dtype type, const void *w, int64_t n_in, int64_t n_out,
                         const float *x, int64_t n_tok, float *y, es__err *err) {
    const size_t rb = es__kern_row_bytes(type, n_in);
    ES_RETURN_IF(rb == 0 || n_in <= 0, err, ES_ERR_INVALID_ARGUMENT,
                 "cpu matmul: type %d with n_in %lld (block types need a positive multiple of 32)", (int)type,
                 (long long)n_in);
    ES_RETURN_IF(n_out < 0 || n_tok < 0 || !w || !x || !y, err, ES_ERR_INVALID_ARGUMENT,
                 "cpu matmul: n_out %lld, n_tok %lld, or a NULL pointer", (long long)n_out, (long long)n_tok);
    const es__kern *k = es__kern_best();
    const int nth = pool ? es__pool_size(pool) : 1;
    float *panel = es__calloc(NULL, (size_t)nth * (size_t)k->panel_rows, sizeof(float) * (size_t)n_in);
    ES_RETURN_IF(!panel, err, ES_ERR_OUT_OF_MEMORY, "cpu matmul: out of memory for scratch");
    matmul_job j = {k, type, w, rb, n_in, n_out, n_tok, x, y, panel};
    run(pool, matmul_thread, &j);
    es__free(NULL, panel);
    return ES_OK;
}

es_status es__cpu_matvec(es__pool *pool, es__dtype type, const void *w, int64_t n_in, int64_t n_out,
                         const float *x, float *y, es__err *err) {
    return es__cpu_matmul(pool, type, w, n_in, n_out, x, 1, y, err);
}

es_status es__cpu_get_rows(es__dtype type, const void *table, int64_t n_in, int64_t n_rows, const int32_t *ids,
                           int64_t n, float *out, es__err *err) {
    const size_t rb = es__kern_row_bytes(type, n_in);
    ES_RETURN_IF(rb == 0 || n_in <= 0, err, ES_ERR_INVALID_ARGUMENT, "cpu get_rows: type %d with n_in %lld",
                 (int)type, (long long)n_in);
    for (int64_t i = 0; i < n; i++)
        ES_RETURN_IF(ids[i] < 0 || ids[i] >= n_rows, err, ES_ERR_INVALID_ARGUMENT,
                     "cpu get_rows: id %d at %lld outside [0, %lld)", ids[i], (long long)i, (long long)n_rows);
    const es__kern *k = es__kern_best();
    for (int64_t i = 0; i < n; i++) k->to_f32(type, (const uint8_t *)table + rb * (size_t)ids[i], out + i * n_in, n_in);
    return ES_OK;
}

void es__cpu_rmsnorm(const float *x, const float *w, int64_t n, int64_t n_tok, float eps, float *y) {
    const es__kern *k = es__kern_best();
    for (int64_t t = 0; t < n_tok; t++) es__cpu_rmsnorm_row(k, x + t * n, w, n, eps, y + t * n);
}

void es__cpu_rope(float *x, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot, const int32_t *pos,
                  float freq_base, float freq_scale, es_rope_type type) {
    enum { CHUNK = 256 };
    float cs[2 * CHUNK];
    const es__rope r = es__rope_plain((int32_t)n_rot, freq_base, freq_scale);
    for (int64_t t = 0; t < n_tok; t++) {
        /* a chunk of pairs at a time keeps this free of allocation; same values as the table */
        for (int64_t i0 = 0; i0 < n_rot / 2; i0 += CHUNK) {
            const int64_t i1 = ES__MIN(n_rot / 2, i0 + CHUNK);
            es__rope_cs(&r, pos[t], i0, i1, false, cs);
            rope_pairs(x + t * n_head * head_dim, n_head, head_dim, n_rot, i0, i1, cs, type);
        }
    }
}

typedef struct attn_job {
    const es__kern *k;
    es__attn a;
    int32_t *visible; /* [nth][n_batch] */
} attn_job;

static void attn_thread(void *arg, int ith, int nth) {
    attn_job *j = arg;
    int64_t lo, hi;
    es__split_range((int64_t)j->a.n_q * j->a.n_head, 1, ith, nth, &lo, &hi);
    es__cpu_attention_range(j->k, &j->a, lo, hi, j->visible + (size_t)ith * ES__CPU_ATTN_ROWS * (size_t)j->a.n_batch);
}

es_status es__cpu_attention(es__pool *pool, const float *q, const float *kc, const float *vc, int32_t n_ctx,
                            int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t n_past, int32_t n,
                            const int32_t *dfs_start, const int32_t *dfs_end, float scale, float *out,
                            es__err *err) {
    return es__cpu_attention_ex(pool, q, kc, vc, n_ctx, n_head, n_head_kv, head_dim, n_past, n, dfs_start, dfs_end,
                                NULL, 0, 0.0f, scale, out, err);
}

es_status es__cpu_attention_ex(es__pool *pool, const float *q, const float *kc, const float *vc, int32_t n_ctx,
                               int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t n_past, int32_t n,
                               const int32_t *dfs_start, const int32_t *dfs_end, const int32_t *pos, int32_t window,
                               float softcap, float scale, float *out, es__err *err) {
    ES_RETURN_IF(window < 0 || (window > 0 && !pos) || !(softcap >= 0.0f), err, ES_ERR_INVALID_ARGUMENT,
                 "cpu attention: window %d (positions %s), softcap %g", window, pos ? "given" : "NULL", (double)softcap);
    ES_RETURN_IF(n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv || head_dim <= 0 || n <= 0 || n_past < 0 ||
                     (int64_t)n_past + n > n_ctx,
                 err, ES_ERR_INVALID_ARGUMENT,
                 "cpu attention: n_head %d, n_head_kv %d, head_dim %d, n_past %d, n %d, n_ctx %d", n_head, n_head_kv,
                 head_dim, n_past, n, n_ctx);
    const int nth = pool ? es__pool_size(pool) : 1;
    int32_t *visible = es__malloc(NULL, sizeof(int32_t) * (size_t)nth * ES__CPU_ATTN_ROWS * (size_t)n);
    if (!visible) {
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "cpu attention: out of memory for scratch");
    }
    attn_job j = {es__kern_best(),
                  {q, (int64_t)n_head * head_dim, kc, vc, n_ctx, n_head, n_head_kv, head_dim, n_past, n, n, NULL,
                   dfs_start, dfs_end, scale, out, (int64_t)n_head * head_dim, pos, window, softcap},
                  visible};
    run(pool, attn_thread, &j);
    es__free(NULL, visible);
    return ES_OK;
}

typedef struct spec_job {
    const es__kern *k;
    const float *q, *kc, *vc;
    int32_t n_ctx, n_head, group, hd, n, s1, s2;
    float scale;
    float *out, *spec, *part; /* part: [nth][part_floats] */
    size_t part_floats;
    double *e2; /* [n_head][2]: (spec - out)^2 and out^2 summed over the head's dims */
} spec_job;

static void spec_thread(void *arg, int ith, int nth) {
    const spec_job *j = arg;
    int64_t lo, hi;
    es__split_range(j->n_head, 1, ith, nth, &lo, &hi);
    for (int64_t h = lo; h < hi; h++) {
        const size_t kv = (size_t)(h / j->group) * (size_t)j->n_ctx * (size_t)j->hd;
        float *o = j->out + h * j->hd, *sp = j->spec + h * j->hd;
        j->k->attend_spec(j->q + h * j->hd, j->kc + kv, j->vc + kv, j->hd, j->n, j->s1, j->s2, j->scale,
                          ES__SPEC_PASS_BOTH, j->part + (size_t)ith * j->part_floats, sp, o);
        double e = 0.0, a = 0.0;
        for (int32_t d = 0; d < j->hd; d++) {
            const double diff = (double)sp[d] - (double)o[d];
            e += diff * diff;
            a += (double)o[d] * (double)o[d];
        }
        j->e2[2 * h] = e;
        j->e2[2 * h + 1] = a;
    }
}

es_status es__cpu_attention_spec(es__pool *pool, const float *q, const float *kc, const float *vc, int32_t n_ctx,
                                 int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t n, int32_t chunk,
                                 float lambda, float scale, float *out, float *spec, es__spec_verdict *v,
                                 es__err *err) {
    ES_RETURN_IF(chunk <= 0 || chunk % ES__ATTN_TILE || !(lambda >= 0.0f), err, ES_ERR_INVALID_ARGUMENT,
                 "cpu speculative attention: chunk %d (a positive multiple of %d) or lambda %g (>= 0)", chunk,
                 ES__ATTN_TILE, (double)lambda);
    int32_t s2 = 0;
    memset(v, 0, sizeof *v);
    if (!es__spec_window(n, chunk, &s2)) {
        const int32_t zero = 0, n_past = n - 1;
        return es__cpu_attention(pool, q, kc, vc, n_ctx, n_head, n_head_kv, head_dim, n_past, 1, &zero, &zero, scale,
                                 out, err);
    }
    ES_RETURN_IF(n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv || head_dim <= 0 ||
                     head_dim > ES__MAX_HEAD_DIM || n > n_ctx,
                 err, ES_ERR_INVALID_ARGUMENT,
                 "cpu speculative attention: n_head %d, n_head_kv %d, head_dim %d, n %d, n_ctx %d", n_head, n_head_kv,
                 head_dim, n, n_ctx);
    const int nth = pool ? es__pool_size(pool) : 1;
    const size_t part_floats = (size_t)((chunk + n - s2) / ES__ATTN_TILE + 1) * (size_t)(head_dim + 2);
    float *part = es__malloc(NULL, sizeof(float) * (size_t)nth * part_floats);
    double *e2 = es__malloc(NULL, sizeof(double) * 2 * (size_t)n_head);
    if (!part || !e2) {
        es__free(NULL, part);
        es__free(NULL, e2);
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "cpu speculative attention: out of memory for scratch");
    }
    spec_job j = {es__kern_best(), q, kc, vc, n_ctx, n_head, n_head / n_head_kv, head_dim, n, chunk, s2, scale,
                  out, spec, part, part_floats, e2};
    run(pool, spec_thread, &j);
    /* section 3.2's check over all heads, summed in head order whatever the thread split */
    v->valid = true;
    for (int32_t h = 0; h < n_head; h++) {
        v->err2 += e2[2 * h];
        v->norm2 += e2[2 * h + 1];
    }
    v->hit = es__spec_accept(v->err2, v->norm2, lambda);
    es__free(NULL, part);
    es__free(NULL, e2);
    return ES_OK;
}

void es__cpu_kv_write(float *kc, float *vc, int32_t n_ctx, int32_t n_head_kv, int32_t head_dim, int32_t n_past,
                      int32_t n, const float *k_new, const float *v_new) {
    const size_t row = sizeof(float) * (size_t)head_dim;
    for (int32_t i = 0; i < n; i++) {
        for (int32_t g = 0; g < n_head_kv; g++) {
            const size_t dst = ((size_t)g * (size_t)n_ctx + (size_t)(n_past + i)) * (size_t)head_dim;
            const size_t src = ((size_t)i * (size_t)n_head_kv + (size_t)g) * (size_t)head_dim;
            memcpy(kc + dst, k_new + src, row);
            memcpy(vc + dst, v_new + src, row);
        }
    }
}

void es__cpu_swiglu(const float *gate, const float *up, int64_t n, float *out) {
    es__cpu_swiglu_range(es__kern_best(), gate, up, 0, n, out);
}

void es__cpu_add(const float *a, const float *b, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void es__cpu_softmax(const float *x, int64_t n, float *y) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - mx);
        sum += y[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

int32_t es__cpu_argmax(const float *x, int64_t n) {
    int32_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = (int32_t)i;
    return best < 0 ? 0 : best;
}

int32_t es__cpu_topk(const float *x, int64_t n, int32_t k, int32_t *ids, float *vals) {
    /* ids[0..m) sorted by (value desc, index asc); insertion keeps it so, O(n) for small k */
    int32_t m = 0;
    if (k <= 0) return 0;
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        if (isnan(v) || (m == k && !(v > x[ids[m - 1]]))) continue;
        int32_t p = m < k ? m++ : k - 1;
        while (p > 0 && v > x[ids[p - 1]]) {
            ids[p] = ids[p - 1];
            p--;
        }
        ids[p] = (int32_t)i;
    }
    if (vals)
        for (int32_t i = 0; i < m; i++) vals[i] = x[ids[i]];
    return m;
}
