/* test_msa.c: multi-stream attention and tree pruning in the forward (CPU, or Vulkan with
 * argv[1]), against a plain double-precision reference written here from the paper's equations
 * (Eq. 2, 3; 3.2.3) and tools/train/model.py's conventions:
 *   - the main stream's logits are bit-identical with and without streams and pruning;
 *   - every stream of every tree node matches the reference within 1e-4 (relative to the row's
 *     largest logit), stream-only LoRA included;
 *   - a node's streams do not depend on the rest of the tree (same bits in a tree and in a chain,
 *     with or without pruning, fused into the forward's rows or from a stream pass on Vulkan),
 *     nor on the order in which nodes' streams are asked;
 *   - pruning removes exactly the subtrees the reference's early exit says, pruned tokens have
 *     neither logits nor streams and cannot be committed, and a committed path whose KV pruning
 *     moved down leaves the next token the bits of a plain chain (streams starting above, at and
 *     below the prune layer). */
#include "../common/test_ctx.h"
#include "cpu/msa.h"
#include "forward_api.h"
#include "../cpu/mem_models.h"
#include "mem_adapter.h"
#ifdef ES_TEST_VULKAN
#include "backend_vk.h"
#include "ops.h"
#endif

#include <math.h>

static es_backend *backend;

/* ---- the reference, in double */

typedef struct ref {
    const es_model *m;
    const es__ss_adapter *ss;
} ref;

/* A tensor's values as f32: quantised ones dequantised once per model (W_forget between models). */
static struct {
    const es__tensor *t;
    float *v;
} w_cache[64];

static const float *W(const es__tensor *t) {
    if (t->type == ES__DTYPE_F32) return (const float *)t->data;
    size_t i = 0;
    for (; i < ES__ARRAY_LEN(w_cache) && w_cache[i].t; i++)
        if (w_cache[i].t == t) return w_cache[i].v;
    CHECK(i < ES__ARRAY_LEN(w_cache));
    if (i == ES__ARRAY_LEN(w_cache)) abort();
    const int64_t n = t->ne[0] * t->ne[1];
    w_cache[i].t = t;
    w_cache[i].v = malloc(sizeof(float) * (size_t)n);
    uint64_t rb = 0;
    es__dtype_row_bytes(t->type, (uint64_t)t->ne[0], &rb);
    for (int64_t r = 0; r < t->ne[1]; r++)
        es__dequantize_row(t->type, (const uint8_t *)t->data + rb * (uint64_t)r, w_cache[i].v + r * t->ne[0], t->ne[0]);
    return w_cache[i].v;
}

static void W_forget(void) {
    for (size_t i = 0; i < ES__ARRAY_LEN(w_cache); i++) free(w_cache[i].v);
    memset(w_cache, 0, sizeof w_cache);
}

static void matvec(const float *w, int64_t n_in, int64_t n_out, const double *x, double *y) {
    for (int64_t o = 0; o < n_out; o++) {
        double s = 0.0;
        for (int64_t i = 0; i < n_in; i++) s += (double)w[o * n_in + i] * x[i];
        y[o] = s;
    }
}

static void lora(const es__ss_lora *l, int32_t rank, const double *x, double *y) {
    if (!l->a) return;
    double t[64];
    for (int32_t r = 0; r < rank; r++) {
        t[r] = 0.0;
        for (int32_t i = 0; i < l->n_in; i++) t[r] += (double)l->a[r * l->n_in + i] * x[i];
    }
    for (int32_t o = 0; o < l->n_out; o++)
        for (int32_t r = 0; r < rank; r++) y[o] += (double)l->b[o * rank + r] * t[r];
}

static void rmsnorm(const double *x, const float *w, int64_t n, double eps, double *y) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const double sc = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * sc * (double)w[i];
}

static void rope(double *x, int32_t n_head, const es__hparams *hp, int32_t pos) {
    const bool neox = hp->rope_type == ES_ROPE_NEOX;
    for (int32_t h = 0; h < n_head; h++)
        for (int32_t i = 0; i < hp->n_rot / 2; i++) { /* NORM: pairs (2i, 2i+1); NEOX: (i, i + n_rot/2) */
            double th = (double)pos * hp->rope_freq_scale * pow(hp->rope_freq_base, -2.0 * i / hp->n_rot);
            double *a = x + h * hp->head_dim + (neox ? i : 2 * i);
            const int32_t o = neox ? hp->n_rot / 2 : 1;
            const double x0 = a[0], x1 = a[o];
            a[0] = x0 * cos(th) - x1 * sin(th);
            a[o] = x0 * sin(th) + x1 * cos(th);
        }
}

#define TMAX 64
#define DMAX 64
#define FMAX 128
#define VMAX 128

/* Layer il's attention + FFN for one row x (in place), attending to keys/values kk/vv[0..n_keys)
 * (kv width); q_out for the caller's keys (already computed). When stream, the LoRA applies. */
typedef struct rows {
    double k[TMAX + 8][DMAX], v[TMAX + 8][DMAX];
} rows;

static void qkv(const ref *r, int32_t il, const double *x, int32_t pos, bool stream, double *q, double *k, double *v) {
    const es__hparams *hp = &r->m->hp;
    const es__layer *L = &r->m->layers[il];
    const int32_t qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    double xn[DMAX];
    rmsnorm(x, W(L->attn_norm), hp->n_embd, hp->rms_eps, xn);
    matvec(W(L->wq), hp->n_embd, qd, xn, q);
    matvec(W(L->wk), hp->n_embd, kvd, xn, k);
    matvec(W(L->wv), hp->n_embd, kvd, xn, v);
    if (stream && r->ss->lora) {
        const es__ss_lora *lr = r->ss->lora + (size_t)(il - r->ss->msa_start) * ES__SS_LORA_COUNT;
        lora(&lr[ES__SS_LORA_Q], r->ss->lora_rank, xn, q);
        lora(&lr[ES__SS_LORA_K], r->ss->lora_rank, xn, k);
        lora(&lr[ES__SS_LORA_V], r->ss->lora_rank, xn, v);
    }
    rope(q, hp->n_head, hp, pos);
    rope(k, hp->n_head_kv, hp, pos);
}

static void attend_ffn(const ref *r, int32_t il, double *x, const double *q, const rows *kv, int32_t n_keys,
                       bool stream) {
    const es__hparams *hp = &r->m->hp;
    const es__layer *L = &r->m->layers[il];
    const int32_t hd = hp->head_dim, qd = hp->n_head * hd, grp = hp->n_head / hp->n_head_kv;
    const es__ss_lora *lr = stream && r->ss->lora ? r->ss->lora + (size_t)(il - r->ss->msa_start) * ES__SS_LORA_COUNT : NULL;
    double att[DMAX], o[DMAX], xn[DMAX], g[FMAX], u[FMAX];
    for (int32_t h = 0; h < hp->n_head; h++) {
        const int32_t kh = h / grp;
        double s[TMAX + 8], mx = -INFINITY, sum = 0.0;
        for (int32_t t = 0; t < n_keys; t++) {
            s[t] = 0.0;
            for (int32_t e = 0; e < hd; e++) s[t] += q[h * hd + e] * kv->k[t][kh * hd + e];
            s[t] /= sqrt((double)hd);
            mx = s[t] > mx ? s[t] : mx;
        }
        for (int32_t e = 0; e < hd; e++) att[h * hd + e] = 0.0;
        for (int32_t t = 0; t < n_keys; t++) {
            const double w = exp(s[t] - mx);
            sum += w;
            for (int32_t e = 0; e < hd; e++) att[h * hd + e] += w * kv->v[t][kh * hd + e];
        }
        for (int32_t e = 0; e < hd; e++) att[h * hd + e] /= sum;
    }
    matvec(W(L->wo), qd, hp->n_embd, att, o);
    if (lr) lora(&lr[ES__SS_LORA_O], r->ss->lora_rank, att, o);
    for (int32_t i = 0; i < hp->n_embd; i++) x[i] += o[i];
    rmsnorm(x, W(L->ffn_norm), hp->n_embd, hp->rms_eps, xn);
    matvec(W(L->ffn_gate), hp->n_embd, hp->n_ff, xn, g);
    matvec(W(L->ffn_up), hp->n_embd, hp->n_ff, xn, u);
    if (lr) {
        lora(&lr[ES__SS_LORA_GATE], r->ss->lora_rank, xn, g);
        lora(&lr[ES__SS_LORA_UP], r->ss->lora_rank, xn, u);
    }
    for (int32_t i = 0; i < hp->n_ff; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
    matvec(W(L->ffn_down), hp->n_ff, hp->n_embd, g, o);
    if (lr) lora(&lr[ES__SS_LORA_DOWN], r->ss->lora_rank, g, o);
    for (int32_t i = 0; i < hp->n_embd; i++) x[i] += o[i];
}

/* The whole chain seq[0..T) (positions 0..T-1): the streams' logits of its last token
 * [n_streams][n_vocab], and the early-exit probability of every token under its predecessor's
 * distribution (pexit[t] for token t given 0..t-1; pexit[0] unused). */
static void reference(const ref *r, const int32_t *seq, int32_t T, double *stream_logits, double *pexit) {
    const es__hparams *hp = &r->m->hp;
    const es__ss_adapter *ss = r->ss;
    const int32_t d = hp->n_embd, qd = hp->n_head * hp->head_dim, G = ss->n_streams;
    static double x[TMAX][DMAX], x0[DMAX], q[TMAX][DMAX];
    static rows main_kv[8], skv;
    for (int32_t t = 0; t < T; t++)
        for (int32_t i = 0; i < d; i++) x[t][i] = W(r->m->tok_embd)[seq[t] * d + i];
    for (int32_t il = 0; il < hp->n_layer; il++) {
        if (il == ss->prune_layer && ss->prune_rank > 0) {
            for (int32_t t = 0; t + 1 < T; t++) {
                double dn[16], e[DMAX], en[DMAX], l[VMAX], mx = -INFINITY, sum = 0.0;
                matvec(ss->prune_down, d, ss->prune_rank, x[t], dn);
                matvec(ss->prune_up, ss->prune_rank, d, dn, e);
                for (int32_t i = 0; i < d; i++) e[i] += x[t][i];
                rmsnorm(e, W(r->m->output_norm), d, hp->rms_eps, en);
                matvec(W(r->m->output), d, hp->n_vocab, en, l);
                for (int32_t v = 0; v < hp->n_vocab; v++) mx = l[v] > mx ? l[v] : mx;
                for (int32_t v = 0; v < hp->n_vocab; v++) sum += exp(l[v] - mx);
                pexit[t + 1] = exp(l[seq[t + 1]] - mx) / sum;
            }
        }
        if (il == ss->msa_start) memcpy(x0, x[T - 1], sizeof(double) * (size_t)d);
        for (int32_t t = 0; t < T; t++) qkv(r, il, x[t], t, false, q[t], main_kv[il].k[t], main_kv[il].v[t]);
        for (int32_t t = 0; t < T; t++) attend_ffn(r, il, x[t], q[t], &main_kv[il], t + 1, false);
    }
    /* Eq. 3, then Eq. 2 in the MSA layers; the last token's streams only */
    static double s[16][DMAX], sq[16][DMAX];
    for (int32_t j = 0; j < G; j++)
        for (int32_t i = 0; i < d; i++) s[j][i] = x0[i] + (double)ss->stream_embd[j * d + i];
    for (int32_t il = ss->msa_start; il < hp->n_layer; il++) {
        skv = main_kv[il]; /* main keys/values at positions 0..T-1, then the streams' */
        for (int32_t j = 0; j < G; j++) qkv(r, il, s[j], T - 1, true, sq[j], skv.k[T + j], skv.v[T + j]);
        for (int32_t j = 0; j < G; j++) {
            /* keys: main 0..T-1, streams 0..j (rows T..T+j) */
            attend_ffn(r, il, s[j], sq[j], &skv, T + j + 1, true);
        }
    }
    (void)qd;
    for (int32_t j = 0; j < G; j++) {
        double sn[DMAX];
        rmsnorm(s[j], W(r->m->output_norm), d, hp->rms_eps, sn);
        matvec(W(r->m->output), d, hp->n_vocab, sn, stream_logits + (size_t)j * hp->n_vocab);
    }
}

/* ---- the tests */

static int32_t cpu_fuse_rows = -1; /* the CPU's stream rows riding in the forward; -1: measured */

static es_context *new_ctx(const es_model *m) {
    es_context *c = test_ctx(m, backend, 128, 64, NULL);
    if (c && cpu_fuse_rows >= 0) es__msa_set_fuse_rows(c, cpu_fuse_rows);
    return c;
}

static double rel_err(const float *got, const double *want, int32_t n) {
    double mx = 0.0, e = 0.0;
    for (int32_t i = 0; i < n; i++) mx = fabs(want[i]) > mx ? fabs(want[i]) : mx;
    for (int32_t i = 0; i < n; i++) {
        double x = fabs((double)got[i] - want[i]);
        if (!(x <= e)) e = x;
    }
    return e / (mx > 0 ? mx : 1.0);
}

/* A tree of n nodes under the root (node 0), from parent links with parent < child. */
static void tree_batch(const int32_t *parent, int32_t n, int32_t n_past, int32_t *order, int32_t *pos, int32_t *st,
                       int32_t *en) {
    CHECK_OK(es_tree_flatten(parent, n, n_past, order, pos, st, en));
}

/* After a pruning forward of the tree in c (on pre): when a survivor sits below a pruned token in
 * batch order (its KV moved down), commits the path to the one that moved most and checks that
 * the KV it leaves gives the next token the bits of a plain chain (ref: another context).
 * Returns whether it checked; c is left with the path committed. */
static int check_commit_shifted(es_context *c, es_context *plain, const es_batch *pre, const int32_t *toks,
                                const int32_t *ptree, const int32_t *pos, int32_t n, int32_t V) {
    int32_t best = -1, best_shift = 0;
    for (int32_t i = 0, r = 0; i < n; i++) {
        if (es__pruned(c, i)) continue;
        if (i - r > best_shift || (best >= 0 && i - r == best_shift && pos[i] > pos[best])) {
            best = i;
            best_shift = i - r;
        }
        r++;
    }
    if (best < 0) return 0;
    int32_t keep[64], path[64], chain[65], len = 0;
    for (int32_t v = best; v >= 0; v = ptree[v]) path[len++] = v;
    for (int32_t k = 0; k < len; k++) chain[k] = toks[keep[k] = path[len - 1 - k]];
    chain[len] = toks[n - 1];
    CHECK_OK(es_commit(c, keep, len));
    es_batch next = {1, chain + len, NULL, NULL, NULL, NULL}, whole = {len + 1, chain, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(c, &next));
    es_truncate(plain, 0);
    CHECK_OK(es_forward(plain, pre));
    CHECK_OK(es_commit(plain, NULL, 0));
    CHECK_OK(es_forward(plain, &whole));
    const float *la = NULL, *lb = NULL;
    CHECK_OK(es_logits(plain, len, &la));
    CHECK_OK(es_logits(c, 0, &lb));
    CHECKF(la && lb && memcmp(la, lb, sizeof(float) * (size_t)V) == 0,
           "after pruning moved token %d down by %d and a commit of its path, the next token's logits differ "
           "from a plain chain", best, best_shift);
    return 1;
}

/* mix: ES__DTYPE_F32 for none, else mem_model_mix's type */
static void run(const mem_model_cfg *mc, const mem_adapter_cfg *ac, es__dtype mix) {
    es_model *m = mem_model_create(mc);
    if (mix != ES__DTYPE_F32) mem_model_mix(m, mix, mc->seed + 100);
    mem_adapter_attach(m, ac);
    ref r = {m, m->ss};
    const int32_t V = m->hp.n_vocab, G = ac->n_streams;
    test_rng rng = {mc->seed * 3 + 1};
    int32_t prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
    /* a random tree of 14 nodes (parents before children), laid out in pre-order */
    enum { N = 14 };
    int32_t parent[N], order[N], pos[N], st[N], en[N], toks[N], ptree[N];
    for (int32_t i = 0; i < N; i++) parent[i] = i == 0 ? -1 : i <= 2 ? 0 : (int32_t)(test_rng_u64(&rng) % (uint64_t)i);
    tree_batch(parent, N, 8, order, pos, st, en);
    int32_t row_of[N];
    for (int32_t r0 = 0; r0 < N; r0++) row_of[order[r0]] = r0;
    for (int32_t r0 = 0; r0 < N; r0++) {
        toks[r0] = (int32_t)(test_rng_u64(&rng) % (uint64_t)V);
        ptree[r0] = parent[order[r0]] < 0 ? -1 : row_of[parent[order[r0]]];
    }
    uint8_t all[N];
    memset(all, 1, sizeof all);
    es_batch tree = {N, toks, pos, st, en, all};
    es_batch pre = {8, prefix, NULL, NULL, NULL, NULL};

    /* plain forward: the main stream's reference bits */
    es_context *c0 = new_ctx(m), *c1 = new_ctx(m), *c2 = new_ctx(m);
    CHECK_OK(es_forward(c0, &pre));
    CHECK_OK(es_commit(c0, NULL, 0));
    CHECK_OK(es_forward(c0, &tree));
    CHECK_OK(es_forward(c1, &pre));
    CHECK_OK(es_commit(c1, NULL, 0));
    CHECK_OK(es__forward(c1, &tree, &(es__call){G, 0.0f}));
    int bad = 0;
    for (int32_t i = 0; i < N; i++) {
        const float *a = NULL, *b = NULL;
        CHECK_OK(es_logits(c0, i, &a));
        CHECK_OK(es_logits(c1, i, &b));
        if (!a || !b || memcmp(a, b, sizeof(float) * (size_t)V) != 0) bad++;
    }
    CHECKF(bad == 0, "%d main-stream rows differ with streams", bad);

    /* every node's streams against the reference over its root-to-node chain */
    static float streams[N][16 * VMAX];
    static double pexit_node[N]; /* the early-exit probability of each node's token given its parent */
    double worst = 0.0;
    for (int32_t i = 0; i < N; i++) {
        const float *sl = NULL;
        CHECK_OK(es__stream_logits(c1, i, 0, &sl));
        if (!sl) continue;
        memcpy(streams[i], sl, sizeof(float) * (size_t)G * (size_t)V);
        int32_t seq[TMAX], T = 8, path[N], len = 0;
        memcpy(seq, prefix, sizeof prefix);
        for (int32_t v = i; v >= 0; v = ptree[v]) path[len++] = v;
        while (len > 0) seq[T++] = toks[path[--len]];
        static double want[16 * VMAX], pexit[TMAX];
        reference(&r, seq, T, want, pexit);
        pexit_node[i] = pexit[T - 1];
        for (int32_t j = 0; j < G; j++) {
            double e = rel_err(sl + (size_t)j * V, want + (size_t)j * V, V);
            if (!(e <= worst)) worst = e;
        }
    }
    CHECKF(worst < 1e-4, "streams vs reference: max relative error %g", worst);
    printf("streams vs reference: max relative error %.2e (gamma %d, Ns %d, LoRA rank %d)\n", worst, G, ac->n_msa,
           ac->lora_rank);

    /* the same bits in any order of asking, asked twice */
    {
        es_context *c3 = new_ctx(m);
        CHECK_OK(es_forward(c3, &pre));
        CHECK_OK(es_commit(c3, NULL, 0));
        CHECK_OK(es__forward(c3, &tree, &(es__call){G, 0.0f}));
        int order_bad = 0;
        for (int32_t k = 0; k < 2 * N; k++) {
            const int32_t i = (int32_t)((k * 5) % N);
            const float *sl = NULL;
            CHECK_OK(es__stream_logits(c3, i, 0, &sl));
            if (!sl || memcmp(sl, streams[i], sizeof(float) * (size_t)G * (size_t)V) != 0) order_bad++;
        }
        CHECKF(order_bad == 0, "%d stream rows differ when asked in another order", order_bad);
        es_context_free(c3);
    }

    /* a node's streams are the same bits in a chain of its ancestors, every prefix of the leaf's
     * path (on Vulkan the shortest run their streams inside the forward's own rows, the longer
     * ones and the tree above in a stream pass after it), and the main stream's logits are
     * those of a plain forward of the chain */
    {
        int32_t leaf = N - 1, path[N], len = 0, chain[N];
        for (int32_t v = leaf; v >= 0; v = ptree[v]) path[len++] = v;
        for (int32_t k = 0; k < len; k++) chain[k] = toks[path[len - 1 - k]];
        int chain_bad = 0;
        for (int32_t cl = 1; cl <= len; cl++) {
            const int32_t node = path[len - cl];
            es_batch cb = {cl, chain, NULL, NULL, NULL, NULL};
            es_truncate(c2, 0);
            CHECK_OK(es_forward(c2, &pre));
            CHECK_OK(es_commit(c2, NULL, 0));
            CHECK_OK(es_forward(c2, &cb));
            static float plain[VMAX];
            const float *lp = NULL, *ls = NULL, *sl = NULL;
            CHECK_OK(es_logits(c2, cl - 1, &lp));
            memcpy(plain, lp, sizeof(float) * (size_t)V);
            es_truncate(c2, 0);
            CHECK_OK(es_forward(c2, &pre));
            CHECK_OK(es_commit(c2, NULL, 0));
            /* a single token asks at most 3 streams: 4 rows, few enough to fuse on Vulkan for
             * every adapter here (streams <= j do not depend on the others) */
            const int32_t g = cl == 1 && G > 3 ? 3 : G;
            CHECK_OK(es__forward(c2, &cb, &(es__call){g, 0.0f}));
            CHECK_OK(es_logits(c2, cl - 1, &ls));
            CHECK_OK(es__stream_logits(c2, cl - 1, 0, &sl));
            if (!ls || memcmp(ls, plain, sizeof(float) * (size_t)V) != 0) chain_bad++;
            if (!sl || memcmp(sl, streams[node], sizeof(float) * (size_t)g * (size_t)V) != 0) chain_bad++;
        }
        CHECKF(chain_bad == 0, "%d chain rows differ from the tree's streams or the plain forward", chain_bad);
        es_truncate(c2, 0);
    }

    /* pruning: a threshold between two of the reference's parent-to-child probabilities */
    if (ac->prune_rank > 0) {
        double p[N];
        int32_t np = 0;
        for (int32_t i = 1; i < N; i++) p[np++] = pexit_node[i];
        for (int32_t a = 1; a < np; a++)
            for (int32_t b = a; b > 0 && p[b] < p[b - 1]; b--) {
                double t = p[b];
                p[b] = p[b - 1];
                p[b - 1] = t;
            }
        /* every threshold between neighbours whose gap is wide enough that float rounding cannot
         * flip a decision: leaves, subtrees, and at the top everything below the root */
        int32_t n_thr = 0, max_pruned = 0, n_shifted = 0;
        es_context *c3 = new_ctx(m);
        for (int32_t a = 0; a + 1 < np; a++) {
            if (p[a + 1] / p[a] < 1.05) continue;
            const float thr = (float)sqrt(p[a] * p[a + 1]);
            uint8_t want_pruned[N] = {0};
            for (int32_t i = 1; i < N; i++) want_pruned[i] = want_pruned[ptree[i]] || pexit_node[i] < (double)thr;
            es_truncate(c2, 0);
            CHECK_OK(es_forward(c2, &pre));
            CHECK_OK(es_commit(c2, NULL, 0));
            CHECK_OK(es__forward(c2, &tree, &(es__call){G, thr}));
            int32_t n_pruned = 0, mismatch = 0, differ = 0, exit_bad = 0;
            for (int32_t i = 0; i < N; i++) {
                bool pr = es__pruned(c2, i);
                /* what the decision compared, for the tuner: computed below every kept parent */
                const float q = es__exit_prob(c2, i);
                if (i == 0 || want_pruned[ptree[i]]) exit_bad += q != -1.0f;
                else exit_bad += !(fabs(q - pexit_node[i]) <= 1e-3 * pexit_node[i] + 1e-6);
                n_pruned += pr;
                mismatch += pr != want_pruned[i];
                const float *la = NULL, *lb = NULL, *sl = NULL;
                if (pr) {
                    CHECK_FAILS(es_logits(c2, i, &la), ES_ERR_INVALID_ARGUMENT, "no logits");
                    CHECK_FAILS(es__stream_logits(c2, i, 0, &sl), ES_ERR_INVALID_ARGUMENT, "token pruned");
                    continue;
                }
                CHECK_OK(es_logits(c0, i, &la));
                CHECK_OK(es_logits(c2, i, &lb));
                CHECK_OK(es__stream_logits(c2, i, 0, &sl));
                if (!la || !lb || memcmp(la, lb, sizeof(float) * (size_t)V) != 0) differ++;
                if (!sl || memcmp(sl, streams[i], sizeof(float) * (size_t)G * (size_t)V) != 0) differ++;
            }
            CHECKF(mismatch == 0 && n_pruned >= a + 1,
                   "threshold %g: pruned %d, %d disagree with the reference", (double)thr, n_pruned, mismatch);
            CHECKF(differ == 0, "threshold %g: %d surviving rows changed bits under pruning", (double)thr, differ);
            CHECKF(exit_bad == 0, "threshold %g: %d early-exit probabilities differ from the reference's", (double)thr,
                   exit_bad);
            max_pruned = n_pruned > max_pruned ? n_pruned : max_pruned;
            n_shifted += check_commit_shifted(c2, c3, &pre, toks, ptree, pos, N, V);
            n_thr++;
        }
        CHECK(n_thr >= 3);
        CHECKF(n_shifted >= 1, "no threshold left a survivor below a pruned token (%d thresholds)", n_thr);
        es_context_free(c3);
        /* a pruned node cannot be kept */
        int32_t victim = -1;
        for (int32_t i = 1; i < N && victim < 0; i++)
            if (es__pruned(c2, i)) victim = i;
        if (victim > 0) {
            int32_t keep[N], len = 0, path[N];
            for (int32_t v = victim; v >= 0; v = ptree[v]) path[len++] = v;
            for (int32_t k = 0; k < len; k++) keep[k] = path[len - 1 - k];
            CHECK_FAILS(es_commit(c2, keep, len), ES_ERR_INVALID_ARGUMENT, "removed by tree pruning");
        }
        /* the root's path survives and commits */
        int32_t root = 0;
        CHECK_OK(es_commit(c2, &root, 1));
        printf("pruning: %d thresholds checked, up to %d of %d nodes pruned, %d commits of moved paths\n", n_thr,
               max_pruned, N, n_shifted);
    }
    es_context_free(c0);
    es_context_free(c1);
    es_context_free(c2);
    mem_adapter_model_free(m);
    W_forget();
}

static void test_errors(void) {
    mem_model_cfg mc = {50, 32, 2, 2, 2, 16, 48, 16, ES_ROPE_NORM, 10000.0f, 1.0f, true, ES__DTYPE_F32, 3};
    es_model *m = mem_model_create(&mc);
    es_context *c = new_ctx(m);
    int32_t t[2] = {1, 2};
    es_batch b = {2, t, NULL, NULL, NULL, NULL};
    CHECK_FAILS(es__forward(c, &b, &(es__call){2, 0.0f}), ES_ERR_INVALID_ARGUMENT, "no Speculative Streaming adapter");
    es_context_free(c);
    mem_adapter_cfg ac = {2, 1, 1, 0, 0, 0.1f, 4};
    mem_adapter_attach(m, &ac);
    c = new_ctx(m);
    CHECK_FAILS(es__forward(c, &b, &(es__call){3, 0.0f}), ES_ERR_INVALID_ARGUMENT, "3 streams asked, the adapter has 2");
    CHECK_FAILS(es__forward(c, &b, &(es__call){2, 0.5f}), ES_ERR_INVALID_ARGUMENT, "no pruning tensors");
    CHECK_FAILS(es__forward(c, &b, &(es__call){2, -1.0f}), ES_ERR_INVALID_ARGUMENT, "prune threshold");
    CHECK_OK(es_forward(c, &b));
    const float *sl = NULL;
    CHECK_FAILS(es__stream_logits(c, 1, 0, &sl), ES_ERR_INVALID_ARGUMENT, "0 streams");
    CHECK_OK(es__forward(c, &b, &(es__call){1, 0.0f}));
    CHECK_OK(es__stream_logits(c, 1, 0, &sl));
    CHECK_FAILS(es__stream_logits(c, 2, 0, &sl), ES_ERR_INVALID_ARGUMENT, "batch token 2");
    CHECK_OK(es_commit(c, NULL, 0));
    CHECK_FAILS(es__stream_logits(c, 1, 0, &sl), ES_ERR_INVALID_ARGUMENT, "has no streams");
    es_context_free(c);
    mem_adapter_model_free(m);
}

/* A model's later contexts on one device take the first one's riding measurement (the device and
 * the sizes it could try are the key); other sizes measure again. */
static void test_ride_memo(bool vulkan) {
    mem_model_cfg mc = {50, 32, 2, 2, 2, 16, 48, 16, ES_ROPE_NORM, 10000.0f, 1.0f, true, ES__DTYPE_F32, 5};
    es_model *m = mem_model_create(&mc);
    mem_adapter_cfg ac = {2, 1, 1, 0, 0, 0.1f, 6};
    mem_adapter_attach(m, &ac);
    es_context *c1 = test_ctx(m, backend, 128, 64, NULL);
    const int32_t measured = m->ss->n_ride; /* 1, or 0 where a Vulkan profile fixes the cap */
    CHECK(measured == (vulkan ? measured : 1));
    if (measured == 1) m->ss->ride[0].rows = 5; /* what the next context must take, whatever was measured */
    es_context *c2 = test_ctx(m, backend, 128, 64, NULL);
    CHECK(m->ss->n_ride == measured);
    if (!vulkan) CHECKF(es__msa_fuse_rows(c2) == 5, "second context: %d rows", es__msa_fuse_rows(c2));
    es_context *c3 = test_ctx(m, backend, 128, 1, NULL); /* chains of one token only: measured again */
    CHECK(m->ss->n_ride == 2 * measured);
    es_context_free(c3);
    es_context_free(c2);
    es_context_free(c1);
    mem_adapter_model_free(m);
}

/* argv[1]: "cpu" (default) or "vulkan"; argv[2] (Vulkan): "fallbacks" forces every fallback path;
 * (either) "fuse-all" makes every tree's streams ride in the forward's rows (a GPU's profile, past
 * what lavapipe's allows; on the CPU up to its 64 rows; on Vulkan with a GPU's attention too, a
 * subgroup per row and head, where the device has subgroup arithmetic), "never-fuse" runs every
 * stream pass after the forward. Without either, each context's measured choice. */
int main(int argc, char **argv) {
    bool vulkan = false;
    backend = test_backend_from_args(argc, argv, 3, &vulkan); /* 3 threads: an odd split of every range */
    if (!backend) TEST_MAIN_END();
    if (!vulkan && argc > 2) cpu_fuse_rows = strcmp(argv[2], "fuse-all") == 0 ? 1 << 20 : strcmp(argv[2], "never-fuse") == 0 ? 0 : -1;
#ifdef ES_TEST_VULKAN
    if (vulkan && argc > 2 && strcmp(argv[2], "fuse-all") == 0) {
        es__vk_dev_of(backend)->policy.attn_team = true;
        printf("attention by %s\n", es__vk_attn_team(es__vk_dev_of(backend)) ? "subgroups" : "invocations");
    }
#endif
    /* GQA, LoRA on every projection of the top layer, pruning at the MSA start */
    mem_model_cfg m1 = {61, 48, 4, 4, 2, 12, 64, 12, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 21};
    mem_adapter_cfg a1 = {3, 2, 2, 4, 2, 0.2f, 8};
    run(&m1, &a1, ES__DTYPE_F32);
    /* one MSA layer, one stream, no LoRA, pruning below it, tied head, partial rotation */
    mem_model_cfg m2 = {40, 32, 3, 2, 2, 16, 40, 8, ES_ROPE_NORM, 500.0f, 1.0f, true, ES__DTYPE_F32, 22};
    mem_adapter_cfg a2 = {1, 1, 1, 6, 0, 0.3f, 9};
    run(&m2, &a2, ES__DTYPE_F32);
    /* every layer MSA, four streams, pruning at the embeddings */
    mem_model_cfg m3 = {50, 32, 2, 4, 4, 8, 48, 8, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 23};
    mem_adapter_cfg a3 = {4, 2, 0, 3, 1, 0.2f, 10};
    run(&m3, &a3, ES__DTYPE_F32);
    /* NEOX rotation (the Vulkan backend permutes Q and K rows, and the LoRA's rows with them) and
     * a LoRA rank that is not a multiple of 4 */
    mem_model_cfg m4 = {61, 48, 4, 2, 2, 12, 64, 12, ES_ROPE_NEOX, 10000.0f, 1.0f, false, ES__DTYPE_F32, 24};
    mem_adapter_cfg a4 = {2, 2, 1, 4, 3, 0.2f, 11};
    run(&m4, &a4, ES__DTYPE_F32);
    /* streams from below the prune layer: their kept hidden states move with the survivors */
    mem_model_cfg m5 = {53, 32, 4, 4, 2, 8, 40, 8, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 25};
    mem_adapter_cfg a5 = {2, 3, 3, 4, 2, 0.3f, 12};
    run(&m5, &a5, ES__DTYPE_F32);
    /* quantised, the top layer's Q, K (Q4_0) and V (Q8_0) of two types (llama.cpp's _M mixes: on
     * Vulkan, parts of two kernels, the LoRA's too) */
    mem_model_cfg m6 = {57, 64, 2, 4, 2, 16, 96, 16, ES_ROPE_NEOX, 10000.0f, 1.0f, false, ES__DTYPE_Q4_0, 26};
    mem_adapter_cfg a6 = {2, 2, 1, 4, 2, 0.2f, 13};
    run(&m6, &a6, ES__DTYPE_Q8_0);
    /* spec_stream's and spec_edit's model and adapter (mem_models.h), which those tests only
     * compare with plain decoding of the same model: their streams against the reference here,
     * their main stream in test_mem_model_reference.py */
    mem_model_cfg m7 = MEM_CFG_STREAM(3);
    mem_adapter_cfg a7 = MEM_ADAPTER_STREAM;
    run(&m7, &a7, ES__DTYPE_F32);
    test_errors();
    test_ride_memo(vulkan);
    test_backend_end(backend);
    TEST_MAIN_END();
}
