/* verify.c: draft candidates and tree verification for every speculative strategy (see verify.h
 * for the three modes). Greedy and seeded verification decide each target token with es_sample,
 * the very call plain decoding makes, so they are token-exact by construction. The rejection mode
 * follows SpecInfer's multi-step speculative sampling (Miao et al. 2023, Alg. 2), with candidates
 * drawn without replacement (recursive rejection sampling): candidate i, drawn from q_i (the draft
 * distribution without candidates 1..i-1, renormalised), is accepted with probability
 * min(1, p_i(x)/q_i(x)); on rejection p_{i+1} = norm(max(0, p_i - q_i)). The output is distributed
 * as p_1 whatever the proposals, because each stage is the classic speculative-sampling lemma and
 * the last falls back to sampling the residual.
 * Deliberately not here: where logits come from, tree construction, KV bookkeeping. */
#include "verify.h"

#include <math.h>
#include <string.h>

/* Domains of es__spec_uniform, so the draft's and the verifier's random streams never meet. */
enum { DOMAIN_DRAFT = 1, DOMAIN_VERIFY = 2 };

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double es__spec_uniform(uint64_t seed, uint64_t domain, int64_t a, int64_t b) {
    uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ull);
    h = mix64(h ^ (domain * 0xD1B54A32D192ED03ull));
    h = mix64(h ^ mix64((uint64_t)a + 0x632BE59BD9B4E019ull));
    h = mix64(h ^ mix64((uint64_t)b + 0x8CB92BA72F3D8DD7ull));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

es_status es__verifier_init(es__verifier *v, int32_t n_vocab, const es_sampler_params *sp, bool rejection,
                            const es_allocator *a, es__err *err) {
    memset(v, 0, sizeof *v);
    v->alloc = a;
    v->n_vocab = n_vocab;
    v->seed = sp->seed;
    v->mode = sp->temperature == 0.0f ? ES__VERIFY_GREEDY : rejection ? ES__VERIFY_REJECTION : ES__VERIFY_SEEDED;
    es_status s = es_sampler_create(n_vocab, sp, a, &v->sampler);
    if (s != ES_OK) return es__fail(err, s, "%s", es_last_error());
    v->p = es__calloc(a, (size_t)n_vocab, sizeof(double));
    v->q = es__calloc(a, (size_t)n_vocab, sizeof(double));
    v->key = es__calloc(a, (size_t)n_vocab, sizeof(double));
    v->idx = es__calloc(a, (size_t)n_vocab, sizeof(int32_t));
    if (!v->p || !v->q || !v->key || !v->idx) {
        es__verifier_free(v);
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "verifier: out of memory for a %d-token vocabulary", n_vocab);
    }
    return ES_OK;
}

void es__verifier_free(es__verifier *v) {
    if (!v) return;
    es_sampler_free(v->sampler);
    es__free(v->alloc, v->p);
    es__free(v->alloc, v->q);
    es__free(v->alloc, v->key);
    es__free(v->alloc, v->idx);
    memset(v, 0, sizeof *v);
}

/* ---- drafting */

/* Keeps the best k of (key, id) pairs in descending key order, ties to the lower id; *n kept. */
static bool ranks_above(double key, int32_t id, double key2, int32_t id2) {
    return key > key2 || (key == key2 && id < id2);
}

static void topk_insert(double *keys, int32_t *ids, int32_t *n, int32_t k, double key, int32_t id) {
    int32_t i;
    if (*n < k) {
        i = (*n)++;
    } else {
        if (!ranks_above(key, id, keys[k - 1], ids[k - 1])) return;
        i = k - 1;
    }
    for (; i > 0 && ranks_above(key, id, keys[i - 1], ids[i - 1]); i--) {
        keys[i] = keys[i - 1];
        ids[i] = ids[i - 1];
    }
    keys[i] = key;
    ids[i] = id;
}

static es_status check_logits(const float *l, int32_t n, es__err *err) {
    for (int32_t i = 0; i < n; i++)
        ES_RETURN_IF(isnan(l[i]) || (isinf(l[i]) && l[i] > 0), err, ES_ERR_BACKEND,
                     "draft logits: token %d has logit %g", i, (double)l[i]);
    return ES_OK;
}

static es_status greedy_candidates(es__verifier *v, const float *l, int32_t k, int32_t *tokens, float *logp,
                                   int32_t *n, es__err *err) {
    ES_TRY(check_logits(l, v->n_vocab, err));
    double *keys = v->key;
    int32_t m = 0;
    float mx = -INFINITY;
    for (int32_t i = 0; i < v->n_vocab; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < v->n_vocab; i++) sum += exp((double)l[i] - (double)mx);
    for (int32_t i = 0; i < v->n_vocab; i++) {
        if (l[i] == -INFINITY) continue;
        topk_insert(keys, tokens, &m, k, (double)l[i], i);
    }
    for (int32_t r = 0; r < m; r++) logp[r] = (float)(keys[r] - (double)mx - log(sum));
    *n = m;
    return ES_OK;
}

es_status es__draft_candidates(es__verifier *v, const float *logits, const int32_t *history, size_t n_history,
                               int64_t pos, uint64_t draw_key, int32_t k, int32_t *tokens, float *logp,
                               double *q, int32_t *n, es__err *err) {
    *n = 0;
    if (k <= 0) return ES_OK;
    if (v->mode == ES__VERIFY_GREEDY) return greedy_candidates(v, logits, k, tokens, logp, n, err);
    es__dist d;
    es_status s = es__sampler_dist(v->sampler, logits, history, n_history, &d);
    if (s != ES_OK) return es__fail(err, s, "draft: %s", es_last_error());
    double *keys = v->key;
    int32_t m = 0;
    if (v->mode == ES__VERIFY_SEEDED) {
        /* the coupled draw first, then the heaviest others */
        int32_t first = es__dist_draw(&d, es_sampler_uniform(v->seed, pos));
        double wfirst = 0.0;
        for (int32_t i = 0; i < d.n; i++) {
            if (d.ids[i] == first) wfirst = d.w[i];
            else if (k > 1) topk_insert(keys, tokens + 1, &m, k - 1, d.w[i], d.ids[i]);
        }
        memmove(keys + 1, keys, sizeof(double) * (size_t)m);
        tokens[0] = first;
        keys[0] = wfirst;
        m++;
        for (int32_t r = 0; r < m; r++) logp[r] = (float)log(keys[r] / d.total);
    } else {
        /* Gumbel-top-k: the k largest log w + Gumbel noise are k draws without replacement, in
         * draw order (Kool et al. 2019) */
        for (int32_t i = 0; i < d.n; i++) {
            double u = es__spec_uniform(v->seed, DOMAIN_DRAFT, (int64_t)draw_key, d.ids[i]);
            u = u > 0.0 ? u : 0x1p-60;
            double g = log(d.w[i]) - log(-log(u));
            topk_insert(keys, tokens, &m, k, g, d.ids[i]);
        }
        if (q) memset(q, 0, sizeof(double) * (size_t)v->n_vocab);
        for (int32_t i = 0; i < d.n; i++)
            if (q) q[d.ids[i]] = d.w[i] / d.total;
        for (int32_t r = 0; r < m; r++) {
            double w = 0.0;
            for (int32_t i = 0; i < d.n; i++)
                if (d.ids[i] == tokens[r]) w = d.w[i];
            logp[r] = (float)log(w / d.total);
        }
    }
    *n = m;
    return ES_OK;
}

/* ---- verification */

/* The rejection-mode decision after `node` (SpecInfer multi-step speculative sampling, candidates
 * without replacement). Returns the token and, when it is a child's, that child (else -1). */
static es_status reject_step(es__verifier *v, const es__tree *t, int32_t node, const float *logits,
                             const int32_t *history, size_t n_history, int64_t pos, const es__verify_src *src,
                             int32_t *tok, int32_t *child, es__err *err) {
    const int32_t nv = v->n_vocab;
    es__dist d;
    es_status s = es__sampler_dist(v->sampler, logits, history, n_history, &d);
    if (s != ES_OK) return es__fail(err, s, "verify: %s", es_last_error());
    double *p = v->p, *q = v->q;
    memset(p, 0, sizeof(double) * (size_t)nv);
    for (int32_t i = 0; i < d.n; i++) p[d.ids[i]] = d.w[i] / d.total;
    int32_t i_cand = 0;
    if (node < t->dfs_end[node]) { /* has children */
        const double *q0 = NULL;
        ES_TRY(src->draft(src->user, node, &q0));
        memcpy(q, q0, sizeof(double) * (size_t)nv);
        for (int32_t c = node + 1; c <= t->dfs_end[node]; c = t->dfs_end[c] + 1) {
            int32_t x = t->token[c];
            double qx = q[x], px = p[x];
            if (!(qx > 0.0)) continue; /* not drawable from q: skipping it changes nothing */
            if (t->skip && t->skip[c]) {
                /* pruned: never tested, but later candidates were drawn without it, so the
                 * proposal loses it while the target stays as it is */
                if (!(qx < 1.0)) break;
                q[x] = 0.0;
                for (int32_t y = 0; y < nv; y++) q[y] /= 1.0 - qx;
                continue;
            }
            double u = es__spec_uniform(v->seed, DOMAIN_VERIFY, pos, i_cand++);
            if (u * qx < px) { /* accept with probability min(1, p(x) / q(x)) */
                *tok = x;
                *child = c;
                return ES_OK;
            }
            double total = 0.0;
            for (int32_t y = 0; y < nv; y++) total += p[y] > q[y] ? p[y] - q[y] : 0.0;
            if (total > 0.0) /* zero only when p == q, where rejection has probability 0 */
                for (int32_t y = 0; y < nv; y++) p[y] = p[y] > q[y] ? (p[y] - q[y]) / total : 0.0;
            double rest = 1.0 - qx;
            q[x] = 0.0;
            if (!(rest > 0.0)) break;
            for (int32_t y = 0; y < nv; y++) q[y] /= rest;
        }
    }
    /* every candidate rejected: draw from the residual, ascending ids */
    double u = es__spec_uniform(v->seed, DOMAIN_VERIFY, pos, 1000000 + i_cand), cum = 0.0, total = 0.0;
    int32_t last = -1;
    for (int32_t y = 0; y < nv; y++) total += p[y];
    *tok = -1;
    for (int32_t y = 0; y < nv && *tok < 0; y++) {
        if (!(p[y] > 0.0)) continue;
        last = y;
        cum += p[y];
        if (u * total < cum) *tok = y;
    }
    if (*tok < 0) *tok = last;
    ES_RETURN_IF(*tok < 0, err, ES_ERR_BACKEND, "verify: empty target distribution at position %lld", (long long)pos);
    *child = es__tree_child(t, node, *tok);
    return ES_OK;
}

es_status es__verify(es__verifier *v, const es__tree *t, const es__verify_src *src, int32_t *history,
                     size_t n_history, int32_t max_emit, es__verify_out *out, es__err *err) {
    ES_RETURN_IF(max_emit < 1, err, ES_ERR_INVALID_ARGUMENT, "verify: max_emit %d < 1", max_emit);
    ES_RETURN_IF(t->max_depth > ES_SPEC_MAX_DEPTH, err, ES_ERR_INVALID_ARGUMENT, "verify: tree depth %d > %d",
                 t->max_depth, ES_SPEC_MAX_DEPTH);
    int32_t node = 0;
    size_t nh = n_history;
    out->n_path = 1;
    out->path[0] = 0;
    out->next_child = -1;
    for (;;) {
        const float *logits = NULL;
        ES_TRY(src->logits(src->user, node, &logits));
        int64_t pos = (int64_t)t->pos[node] + 1; /* the position of the token decided here */
        int32_t tok = -1, child = -1;
        if (v->mode == ES__VERIFY_REJECTION) {
            ES_TRY(reject_step(v, t, node, logits, history, nh, pos, src, &tok, &child, err));
        } else {
            es_status s = es_sample(v->sampler, logits, pos, history, nh, &tok);
            if (s != ES_OK) return es__fail(err, s, "verify: %s", es_last_error());
            child = es__tree_child(t, node, tok);
        }
        bool stop = src->stop && src->stop(src->user, tok);
        if (child < 0 || stop || out->n_path >= max_emit) {
            out->next = tok;
            out->next_child = child;
            return ES_OK;
        }
        out->path[out->n_path++] = child;
        history[nh++] = tok;
        node = child;
    }
}
