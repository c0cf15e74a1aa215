/* dsi.c: distributed speculative inference (Timor et al., "Distributed Speculative Inference of
 * Large Language Models") as a speculative strategy (ES_SPEC_DSI): the scheduler of
 * dsi_sched.c driven with real contexts. The drafter is the draft model's context (draft_ctx, as
 * ES_SPEC_DRAFT uses it); the target servers are the speculation object's context (server 0)
 * and contexts of the same model that this file makes on backends of their own; every worker
 * forwards, reads logits, commits and truncates only through forward_api.h, and a rejected
 * prefix's work is stopped with es__context_abort_own (the application's es_context_abort on a
 * worker's context still ends the generation). Without a draft model, the drafter is the
 * target's own Speculative Streaming streams (issue "DSI + SS"): a context of the target model
 * whose one call drafts the next token and, through its γ streams, the γ after it. Decisions are es__spec_verify's on the rows a
 * server copied out, so greedy, seeded and rejection sampling are exactly those of the other
 * strategies. The number of servers defaults to Appendix D's ceil(T_target / (lookahead
 * T_draft)), the latencies timed on the contexts at the first feed.
 * Deliberately not here: the scheduling (dsi_sched.c), what a step emits (spec.c). */
#include "decode/spec.h"
#include "dsi_sched.h"

#include <math.h>
#include <string.h>

typedef struct dsi_state {
    es_spec *s;
    es_context *draft;                     /* draft_ctx (not owned), or the streams' own   */
    bool own_draft;                        /* draft made here (streams, no draft_ctx)      */
    es_backend *draft_backend;             /* made here for it (NULL: the target's)        */
    int32_t g;                             /* streams: stream rows per drafter call; 0 = a
                                              draft model drafts                           */
    int32_t c_at, c_n;                     /* streams: the last call drafted positions
                                              c_at .. c_at + c_n - 1 (c_n 0: none held)     */
    int32_t c_tok[ES_SPEC_MAX_DEPTH + 1];
    float c_lp[ES_SPEC_MAX_DEPTH + 1];
    double *c_q;                           /* [γ + 1][V] their distributions (rejection)   */
    int32_t n_srv;                         /* 0 until the first feed starts the servers    */
    es_context *srv[ES_DSI_MAX_TARGETS];   /* [0] = s->ctx; the others made here           */
    es_backend *own[ES_DSI_MAX_TARGETS];   /* backends made here (NULL: given or shared)   */
    es__dsi_sched *sched;
    es__verifier dver;                     /* the drafter's candidates, its thread's only  */
    bool ignore_eog;
    int32_t K, V, n_slots, ring;
    int32_t n_batch, d_batch;              /* the servers' and the drafter's               */
    float *rows;                           /* [n_slots][K + 1][V] each job's target rows   */
    float *dlp;                            /* [ring] each draft's log-probability, by position */
    double *dq;                            /* [ring][V] rejection mode: the draft distributions */
    uint8_t *flags[ES_DSI_MAX_TARGETS + 1];/* [n_batch] logits flags: [0] the drafter's    */
    int32_t w_slot, w_lo;                  /* the walk under way (coordinator)             */
    double t_target_ms, t_draft_ms;        /* measured for the default server count        */
    int64_t jobs_seen;                     /* target calls already added to s->st          */
} dsi_state;

/* ---- the operations the scheduler runs (dsi_sched.h) */

static es_context *ctx_of(dsi_state *ds, int32_t who) {
    return who == ES__DSI_DRAFTER ? ds->draft : ds->srv[who];
}

/* Brings c (whose KV holds at least seq[0..keep)) to seq[0..n): truncates to keep and forwards
 * the rest in chunks of n_batch, committing all but the last chunk, which asks for the logits of
 * the positions >= lo (n - lo <= n_batch) and stays provisional: the caller reads row q with
 * es_logits(c, q - *base), then commits. On failure c holds at most seq[0..keep). */
static es_status forward_chain(es_context *c, const int32_t *seq, int32_t keep, int32_t n, int32_t lo, int32_t n_batch,
                               uint8_t *flags, int32_t *base, es__err *err, const char *who) {
    const int32_t from = ES__MIN(keep, es_context_n_past(c));
    es_truncate(c, from);
    ES_RETURN_IF(from >= n, err, ES_ERR_INVALID_ARGUMENT, "%s: nothing to forward (%d of %d tokens held)", who, from, n);
    for (int32_t off = from;;) {
        const int32_t cnt = n - off > n_batch ? ES__MIN(n_batch, ES__MAX(lo - off, 1)) : n - off;
        for (int32_t i = 0; i < cnt; i++) flags[i] = off + i >= lo;
        es_batch b = {cnt, seq + off, NULL, NULL, NULL, flags};
        es_status st = es_forward(c, &b);
        if (st == ES_OK && off + cnt == n) {
            *base = off;
            return ES_OK;
        }
        if (st == ES_OK) st = es_commit(c, NULL, 0);
        if (st != ES_OK) {
            es_status r = es__fail(err, st, "%s: %s", who, es_context_errmsg(c));
            es_truncate(c, ES__MIN(from, es_context_n_past(c)));
            return r;
        }
        off += cnt;
    }
}

/* Commits the provisional last chunk of forward_chain. */
static es_status commit_chain(es_context *c, int32_t keep, es__err *err, const char *who) {
    es_status st = es_commit(c, NULL, 0);
    if (st == ES_OK) return ES_OK;
    es__fail(err, st, "%s: %s", who, es_context_errmsg(c));
    es_truncate(c, ES__MIN(keep, es_context_n_past(c)));
    return st;
}

/* ---- the target's own streams as the drafter */

/* Whether the last stream call drafted position n on this very prefix: the drafter's tokens up
 * to keep are the ones it read for that call (keep >= c_at; the scheduler lowers keep wherever
 * seq changed), and the positions since are that call's drafts. */
static bool streams_hold(const dsi_state *ds, const int32_t *seq, int32_t keep, int32_t n) {
    if (ds->c_n == 0 || keep < ds->c_at || n <= ds->c_at || n >= ds->c_at + ds->c_n) return false;
    return memcmp(seq + ds->c_at, ds->c_tok, sizeof(int32_t) * (size_t)(n - ds->c_at)) == 0;
}

/* One call on seq[0..n): the tokens before the last read plainly, the last with γ stream rows;
 * its main row drafts position n, stream j position n + 1 + j, each keyed by its position as
 * op_draft's drafts are. */
static es_status stream_call(dsi_state *ds, const int32_t *seq, int32_t keep, int32_t n, es__err *err) {
    es_context *d = ds->draft;
    int32_t base = 0;
    ds->c_n = 0;
    if (ES__MIN(keep, es_context_n_past(d)) < n - 1) {
        ES_TRY(forward_chain(d, seq, keep, n - 1, n - 1, ds->d_batch, ds->flags[0], &base, err, "dsi drafter"));
        ES_TRY(commit_chain(d, keep, err, "dsi drafter"));
    } else {
        es_truncate(d, n - 1);
    }
    const es__call call = {ds->g, 0.0f};
    uint8_t one = 1;
    es_batch b = {1, seq + n - 1, NULL, NULL, NULL, &one};
    const float *main_row = NULL, *stream_rows = NULL;
    es_status st = es__forward(d, &b, &call);
    if (st == ES_OK) st = es_logits(d, 0, &main_row);
    if (st == ES_OK) st = es__stream_logits(d, 0, ds->g, &stream_rows);
    if (st != ES_OK) {
        es__fail(err, st, "dsi drafter (streams): %s", es_context_errmsg(d));
        es_truncate(d, n - 1);
        return st;
    }
    for (int32_t i = 0; i <= ds->g && st == ES_OK; i++) {
        const float *row = i == 0 ? main_row : stream_rows + (size_t)(i - 1) * (size_t)ds->V;
        int32_t got = 0;
        st = es__draft_candidates(&ds->dver, row, seq, (size_t)n, n + i, (uint64_t)(n + i), 1, ds->c_tok + i,
                                  ds->c_lp + i, ds->c_q ? ds->c_q + (size_t)i * (size_t)ds->V : NULL, &got, err);
        if (st == ES_OK && got < 1) st = es__fail(err, ES_ERR_BACKEND, "dsi drafter: no candidate at position %d", n + i);
    }
    if (st == ES_OK) st = commit_chain(d, n - 1, err, "dsi drafter");
    else es_truncate(d, n - 1);
    if (st != ES_OK) return st;
    ds->c_at = n;
    ds->c_n = ds->g + 1;
    return ES_OK;
}

/* The draft of position n: from the last call when it drafted it on this prefix, else a call. */
static es_status draft_streams(dsi_state *ds, const int32_t *seq, int32_t keep, int32_t n, int32_t *token,
                               es__err *err) {
    if (!streams_hold(ds, seq, keep, n)) ES_TRY(stream_call(ds, seq, keep, n, err));
    const int32_t i = n - ds->c_at, slot = n % ds->ring;
    *token = ds->c_tok[i];
    ds->dlp[slot] = ds->c_lp[i];
    if (ds->dq)
        memcpy(ds->dq + (size_t)slot * (size_t)ds->V, ds->c_q + (size_t)i * (size_t)ds->V, sizeof(double) * (size_t)ds->V);
    return ES_OK;
}

static es_status op_draft(void *user, const int32_t *seq, int32_t keep, int32_t n, int32_t *token, es__err *err) {
    dsi_state *ds = user;
    if (ds->g > 0 && token) return draft_streams(ds, seq, keep, n, token, err);
    ds->c_n = 0; /* a prefill rewrites what the drafter read */
    es_context *d = ds->draft;
    int32_t base = 0;
    ES_TRY(forward_chain(d, seq, keep, n, token ? n - 1 : n, ds->d_batch, ds->flags[0], &base, err, "dsi drafter"));
    const float *logits = NULL;
    es_status st = token ? es_logits(d, n - 1 - base, &logits) : ES_OK;
    if (st != ES_OK) es__fail(err, st, "dsi drafter: %s", es_context_errmsg(d));
    /* the logits stay valid until the next forward call; the commit keeps them */
    if (st == ES_OK) st = commit_chain(d, keep, err, "dsi drafter");
    if (st != ES_OK || !token) return st;
    /* drawn with a key of its position alone: the draft on a given prefix is the same whenever
     * and however often it is drafted, so rejection sampling repeats for a seed */
    const int32_t slot = n % ds->ring;
    int32_t got = 0;
    float lp = 0.0f;
    ES_TRY(es__draft_candidates(&ds->dver, logits, seq, (size_t)n, n, (uint64_t)n, 1, token, &lp,
                                ds->dq ? ds->dq + (size_t)slot * (size_t)ds->V : NULL, &got, err));
    ES_RETURN_IF(got < 1, err, ES_ERR_BACKEND, "dsi drafter: no draft candidate at position %d", n);
    ds->dlp[slot] = lp;
    return ES_OK;
}

static es_status op_target(void *user, int32_t server, const int32_t *seq, int32_t keep, int32_t n, int32_t lo,
                           int32_t slot, es__err *err) {
    dsi_state *ds = user;
    es_context *c = ds->srv[server];
    int32_t base = 0;
    ES_TRY(forward_chain(c, seq, keep, n, lo, ds->n_batch, ds->flags[1 + server], &base, err, "dsi target server"));
    float *out = ds->rows + (size_t)slot * (size_t)(ds->K + 1) * (size_t)ds->V;
    for (int32_t q = lo; q < n; q++) {
        const float *l = NULL;
        es_status st = es_logits(c, q - base, &l);
        if (st != ES_OK) {
            es__fail(err, st, "dsi target server %d: %s", server, es_context_errmsg(c));
            es_truncate(c, ES__MIN(keep, es_context_n_past(c)));
            return st;
        }
        memcpy(out + (size_t)(q - lo) * (size_t)ds->V, l, sizeof(float) * (size_t)ds->V);
    }
    return commit_chain(c, keep, err, "dsi target server");
}

static void op_abort(void *user, int32_t who) {
    es__context_abort_own(ctx_of(user, who));
}

static void op_abort_clear(void *user, int32_t who) {
    es__context_abort_clear(ctx_of(user, who));
}

static bool op_app_cancelled(void *user, int32_t who) {
    return es__context_app_abort_taken(ctx_of(user, who));
}

static bool op_is_eog(void *user, int32_t token) {
    const dsi_state *ds = user;
    return !ds->ignore_eog && es_token_is_eog(ds->s->model, token);
}

/* The walk's rows: node i of the chain tree sits at position s->tree.pos[i]. */
static es_status row_logits(void *user, int32_t node, const float **logits) {
    dsi_state *ds = user;
    const int32_t row = ds->s->tree.pos[node] - ds->w_lo;
    *logits = ds->rows + ((size_t)ds->w_slot * (size_t)(ds->K + 1) + (size_t)row) * (size_t)ds->V;
    return ES_OK;
}

static es_status row_draft(void *user, int32_t node, const double **q) {
    dsi_state *ds = user;
    *q = ds->dq + (size_t)((ds->s->tree.pos[node] + 1) % ds->ring) * (size_t)ds->V;
    return ES_OK;
}

/* The coordinator's decision on a verifier's rows: the chain tree root, drafts, verified by
 * es__spec_verify_rows (the losslessness argument of every strategy), then the sequence grows. */
static es_status op_verify(void *user, int32_t slot, int32_t lo, const int32_t *chain, int32_t n_chain, int32_t n_rows,
                           int32_t root_pos, int32_t cap, int32_t *tokens, int32_t *n_tokens, es__err *err) {
    dsi_state *ds = user;
    es_spec *s = ds->s;
    /* the chain tree, as far as the walk can test it: it stops at the decision after the
     * max_emit-th row, whose candidate is the next chain token (past the rows: the draft after
     * them, when known). create checked that it fits (lookahead + 2 nodes). */
    const int32_t max_emit = ES__MIN(cap, n_rows), n_levels = ES__MIN(n_chain - 1, max_emit);
    es__levels lv;
    memset(&lv, 0, sizeof lv);
    lv.n_levels = n_levels;
    for (int32_t g = 0; g < n_levels; g++) {
        lv.k[g] = 1;
        lv.tokens[g] = chain + 1 + g;
        lv.logp[g] = ds->dlp + (root_pos + 1 + g) % ds->ring;
        s->cand_lp[(size_t)s->cur * (size_t)s->depth + (size_t)g] = *lv.logp[g]; /* the statistics' */
    }
    es_status st = es__tree_build(&s->tree, chain[0], &lv, n_levels + 1, root_pos, s->alloc, &s->err);
    ds->w_slot = slot;
    ds->w_lo = lo;
    const es__spec_rows rows = {ds, row_logits, ds->dq ? row_draft : NULL};
    size_t n = 0;
    int32_t path[ES_SPEC_MAX_DEPTH + 1], n_path = 0;
    if (st == ES_OK) st = es__spec_verify_rows(s, &rows, (size_t)max_emit, tokens, &n, path, &n_path);
    if (st != ES_OK) {
        *err = s->err;
        return st;
    }
    es__spec_advance(s, tokens, n);
    *n_tokens = (int32_t)n;
    return ES_OK;
}

/* ---- setup: the servers, from the latencies when their number is not given */

/* The time of one decode call of token on c (the better of two; nothing is kept), with the
 * streams' rows when call says so. */
static es_status time_call(es_spec *s, es_context *c, int32_t token, const es__call *call, double *ms) {
    const int32_t n_past = es_context_n_past(c);
    double best = 0.0;
    for (int i = 0; i < 2; i++) {
        es_batch b = {1, &token, NULL, NULL, NULL, NULL};
        const double t0 = es__time_now();
        es_status st = es__forward(c, &b, call);
        const double t = (es__time_now() - t0) * 1e3;
        if (st != ES_OK) return es__spec_fail_ctx(s, c, st, "dsi: timing a call");
        best = i == 0 ? t : ES__MIN(best, t);
    }
    es_truncate(c, n_past); /* drops the provisional token */
    *ms = best;
    return ES_OK;
}

/* Appendix D: ceil(T_target / (lookahead T_draft)) servers keep up with a drafter that sends a
 * block every lookahead drafts, each verified in T_target. */
static es_status measure_servers(es_spec *s, dsi_state *ds, int32_t n_dec, int32_t *n_srv) {
    const int32_t root = s->hist[n_dec - 1], d_past = es_context_n_past(ds->draft);
    ES_TRY(es__spec_prefill(s, ds->draft, s->hist + d_past, n_dec - 1 - d_past));
    ES_TRY(time_call(s, s->ctx, root, NULL, &ds->t_target_ms));
    /* the streams draft γ + 1 tokens a call: T_draft is the call's share per token */
    const es__call streams = {ds->g, 0.0f};
    ES_TRY(time_call(s, ds->draft, root, ds->g > 0 ? &streams : NULL, &ds->t_draft_ms));
    ds->t_draft_ms /= (double)(ds->g + 1);
    const double want = ceil(ds->t_target_ms / ((double)ds->K * ES__MAX(ds->t_draft_ms, 1e-3)));
    *n_srv = (int32_t)ES__MAX(1.0, ES__MIN(want, (double)s->p.dsi.max_targets));
    return ES_OK;
}

/* Server i's backend: the caller's, else a 1-thread CPU backend made here for a CPU target, else
 * the target's own (shared: its calls then take turns). */
static es_status server_backend(es_spec *s, dsi_state *ds, int32_t i, es_backend **out) {
    const es_dsi_params *p = &s->p.dsi;
    if (p->n_backends > 0) {
        *out = p->backends[(i - 1) % p->n_backends];
        return ES_OK;
    }
    if (s->caps.backend_type != ES_BACKEND_CPU) {
        *out = s->caps.backend;
        return ES_OK;
    }
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 1;
    bp.allocator = s->alloc;
    es_status st = es_backend_create(&bp, &ds->own[i]);
    if (st != ES_OK) return es__fail(&s->err, st, "dsi: target server %d: %s", i, es_last_error());
    *out = ds->own[i];
    return ES_OK;
}

static es_status start(es_spec *s, dsi_state *ds, int32_t n_dec) {
    int32_t n_srv = s->p.dsi.n_targets;
    if (n_srv == 0) ES_TRY(measure_servers(s, ds, n_dec, &n_srv));
    s->p.dsi.n_targets = n_srv;
    ds->srv[0] = s->ctx;
    for (int32_t i = 1; i < n_srv; i++) {
        es_backend *b = NULL;
        ES_TRY(server_backend(s, ds, i, &b));
        es_context_params cp = es_context_default_params();
        cp.n_ctx = s->caps.n_ctx;
        cp.n_batch = s->caps.n_batch;
        cp.backend = b;
        cp.allocator = s->alloc;
        es_status st = es_context_create(s->model, &cp, &ds->srv[i]);
        if (st != ES_OK) return es__fail(&s->err, st, "dsi: target server %d: %s", i, es_last_error());
        ds->n_srv = i + 1; /* the contexts made so far, for dsi_free */
    }
    ds->n_srv = n_srv;
    ds->n_slots = es__dsi_slots(n_srv);
    ds->ring = es__dsi_max_ahead(n_srv, ds->K) + ds->K + 2;
    const bool rejection = ds->dver.mode == ES__VERIFY_REJECTION;
    ds->rows = es__calloc(s->alloc, (size_t)ds->n_slots * (size_t)(ds->K + 1) * (size_t)ds->V, sizeof(float));
    ds->dlp = es__calloc(s->alloc, (size_t)ds->ring, sizeof(float));
    ds->dq = rejection ? es__calloc(s->alloc, (size_t)ds->ring * (size_t)ds->V, sizeof(double)) : NULL;
    bool ok = ds->rows && ds->dlp && (!rejection || ds->dq);
    for (int32_t i = 0; i <= n_srv; i++) {
        ds->flags[i] = es__calloc(s->alloc, (size_t)(i == 0 ? ds->d_batch : ds->n_batch), 1);
        ok = ok && ds->flags[i];
    }
    ES_RETURN_IF(!ok, &s->err, ES_ERR_OUT_OF_MEMORY, "dsi: out of memory for %d target servers", n_srv);
    const es__dsi_cfg cfg = {n_srv, ds->K, s->caps.n_ctx, ds->n_slots, rejection};
    const es__dsi_ops ops = {ds, op_draft, op_target, op_abort, op_abort_clear, op_app_cancelled, op_verify, op_is_eog};
    ES_TRY(es__dsi_sched_create(&cfg, &ops, s->alloc, &s->err, &ds->sched));
    /* what the contexts hold now, as far as the sequence goes */
    es__dsi_sched_reset(ds->sched, s->hist, n_dec);
    es__dsi_sched_set_kv(ds->sched, ES__DSI_DRAFTER, es_context_n_past(ds->draft));
    for (int32_t i = 1; i < n_srv; i++) es__dsi_sched_set_kv(ds->sched, i, 0);
    return ES_OK;
}

/* ---- the strategy */

/* max_targets 0: as many servers as there are processors to run them at once: one per backend
 * given (and server 0's own); on a CPU target the processors the drafter leaves; else (a shared
 * Vulkan backend) one. n_targets 0 stays: measured at the first feed. */
void es__dsi_resolve(es_dsi_params *p, const es__caps *target) {
    if (p->max_targets != 0) return;
    if (p->n_backends > 0) p->max_targets = 1 + p->n_backends;
    else if (target->backend_type == ES_BACKEND_CPU) p->max_targets = ES__MAX(1, es__cpu_count() - 1);
    else p->max_targets = 1;
    p->max_targets = ES__MIN(p->max_targets, ES_DSI_MAX_TARGETS);
}

static void dsi_free(es_spec *s, void *state) {
    dsi_state *ds = state;
    if (!ds) return;
    es__dsi_sched_free(ds->sched);
    for (int32_t i = 1; i < ds->n_srv; i++) es_context_free(ds->srv[i]);
    for (int32_t i = 0; i < ES_DSI_MAX_TARGETS; i++) es_backend_free(ds->own[i]);
    if (ds->own_draft) es_context_free(ds->draft);
    es_backend_free(ds->draft_backend);
    es__free(s->alloc, ds->c_q);
    es__verifier_free(&ds->dver);
    es__free(s->alloc, ds->rows);
    es__free(s->alloc, ds->dlp);
    es__free(s->alloc, ds->dq);
    for (int32_t i = 0; i <= ES_DSI_MAX_TARGETS; i++) es__free(s->alloc, ds->flags[i]);
    es__free(s->alloc, ds);
}

/* No draft model: the drafter is a context of the target model, whose streams draft; on a CPU
 * target it gets a 1-thread backend of its own (its calls then run beside the servers'), on
 * Vulkan the target's backend (its calls take turns with server 0's). */
static es_status make_stream_drafter(es_spec *s, dsi_state *ds) {
    es_backend *b = s->caps.backend;
    es_status st = ES_OK;
    if (s->caps.backend_type == ES_BACKEND_CPU) {
        es_backend_params bp = es_backend_default_params();
        bp.n_threads = 1;
        bp.allocator = s->alloc;
        st = es_backend_create(&bp, &ds->draft_backend);
        b = ds->draft_backend;
    }
    es_context_params cp = es_context_default_params();
    cp.n_ctx = s->caps.n_ctx;
    cp.n_batch = s->caps.n_batch;
    cp.backend = b;
    cp.allocator = s->alloc;
    if (st == ES_OK) st = es_context_create(s->model, &cp, &ds->draft);
    if (st != ES_OK) return es__fail(&s->err, st, "es_spec_create: DSI's streams drafter: %s", es_last_error());
    ds->own_draft = true;
    return ES_OK;
}

static es_status check_params(es_spec *s) {
    const es_spec_params *p = &s->p;
    const es_dsi_params *dp = &p->dsi;
    ES_RETURN_IF(p->draft_ctx == s->ctx, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: DSI's draft_ctx is the target context; it needs a second context (of the draft model)");
    ES_RETURN_IF(!p->draft_ctx && s->caps.n_streams == 0, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: DSI needs draft_ctx, a second context (of the draft model), or a target whose "
                 "Speculative Streaming streams draft: %s", s->caps.why_no_streams);
    ES_RETURN_IF(!p->draft_ctx && (p->n_streams < 1 || p->n_streams > s->caps.n_streams), &s->err,
                 ES_ERR_INVALID_ARGUMENT, "es_spec_create: n_streams %d outside [0, %d] (0 = the adapter's)",
                 p->n_streams, s->caps.n_streams);
    ES_RETURN_IF(p->lookahead < 1 || p->lookahead > ES_SPEC_MAX_DEPTH - 1, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: DSI's lookahead %d outside [0, %d] (0 = 4)", p->lookahead, ES_SPEC_MAX_DEPTH - 1);
    ES_RETURN_IF(dp->n_targets < 0 || dp->n_targets > ES_DSI_MAX_TARGETS, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: dsi.n_targets %d outside [0, %d] (0 = from measured latencies)", dp->n_targets,
                 ES_DSI_MAX_TARGETS);
    ES_RETURN_IF(dp->max_targets < 1 || dp->max_targets > ES_DSI_MAX_TARGETS, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: dsi.max_targets %d outside [0, %d] (0 = 4)", dp->max_targets, ES_DSI_MAX_TARGETS);
    ES_RETURN_IF(dp->n_backends < 0 || (dp->n_backends > 0) != (dp->backends != NULL), &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: dsi.backends %s with n_backends %d", dp->backends ? "given" : "NULL", dp->n_backends);
    for (int32_t i = 0; i < dp->n_backends; i++)
        ES_RETURN_IF(!dp->backends[i], &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_create: dsi.backends[%d] is NULL", i);
    const int32_t room = ES__MIN(s->caps.n_batch, p->max_nodes);
    ES_RETURN_IF(room < p->lookahead + 2, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: DSI verifies blocks of lookahead %d drafts: the target context's n_batch and max_nodes "
                 "must be >= %d, are %d and %d", p->lookahead, p->lookahead + 2, s->caps.n_batch, p->max_nodes);
    if (!p->draft_ctx) return ES_OK;
    es__caps dc;
    es__context_caps(p->draft_ctx, &dc);
    ES_RETURN_IF(dc.n_ctx < s->caps.n_ctx, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: the draft context needs n_ctx >= %d (the target's), has %d", s->caps.n_ctx, dc.n_ctx);
    return es__spec_same_vocab(s, s->model, es_context_model(p->draft_ctx));
}

static es_status dsi_create(es_spec *s, void **state) {
    const es_spec_params *p = &s->p;
    ES_TRY(check_params(s));
    s->depth = p->lookahead + 1; /* a block and the draft after it */
    s->k = 1;
    dsi_state *ds = es__calloc(s->alloc, 1, sizeof *ds);
    ES_RETURN_IF(!ds, &s->err, ES_ERR_OUT_OF_MEMORY, "es_spec_create: out of memory");
    ds->s = s;
    ds->draft = p->draft_ctx;
    ds->g = p->draft_ctx ? 0 : p->n_streams;
    ds->ignore_eog = p->ignore_eog;
    ds->K = p->lookahead;
    ds->V = s->caps.n_vocab;
    ds->n_batch = s->caps.n_batch;
    es_status st = ds->draft ? ES_OK : make_stream_drafter(s, ds);
    if (st == ES_OK) st = es__verifier_init(&ds->dver, ds->V, &p->sampling, p->rejection_sampling, s->alloc, &s->err);
    if (st == ES_OK && ds->g > 0 && ds->dver.mode == ES__VERIFY_REJECTION) {
        ds->c_q = es__calloc(s->alloc, (size_t)(ds->g + 1) * (size_t)ds->V, sizeof(double));
        if (!ds->c_q) st = es__fail(&s->err, ES_ERR_OUT_OF_MEMORY, "es_spec_create: out of memory");
    }
    if (st != ES_OK) {
        dsi_free(s, ds);
        return st;
    }
    es__caps dc;
    es__context_caps(ds->draft, &dc);
    ds->d_batch = dc.n_batch;
    *state = ds;
    return ES_OK;
}

/* Copies the workers' counters into s->st (as of now). */
static void update_stats(es_spec *s, dsi_state *ds) {
    es_dsi_stats st;
    memset(&st, 0, sizeof st);
    es__dsi_sched_stats(ds->sched, &st);
    st.target_call_ms = ds->t_target_ms;
    st.draft_call_ms = ds->t_draft_ms;
    s->st.dsi = st;
    s->st.n_draft_calls = st.n_draft_calls;
    double busy = 0.0;
    for (int32_t i = 0; i < st.n_targets; i++) busy += st.server_busy_ms[i];
    s->st.target_ms = busy;
    s->st.draft_ms = st.draft_busy_ms;
}

static es_status dsi_quiesce(es_spec *s, void *state) {
    dsi_state *ds = state;
    if (!ds->sched) return ES_OK;
    es__dsi_sched_quiesce(ds->sched);
    update_stats(s, ds);
    /* server 0 is the caller's context: it holds the sequence but for the pending root again */
    const int32_t want = s->has_root ? (int32_t)s->n_hist - 1 : 0;
    const int32_t good = ES__MIN(es__dsi_sched_kv(ds->sched, 0), want);
    es_truncate(s->ctx, good);
    es_status st = good < want ? es__spec_prefill(s, s->ctx, s->hist + good, want - good) : ES_OK;
    es__dsi_sched_set_kv(ds->sched, 0, es_context_n_past(s->ctx));
    return st;
}

static es_status dsi_feed(es_spec *s, void *state, const int32_t *chain, int32_t n_chain) {
    dsi_state *ds = state;
    /* the decided sequence after this feed: hist[0..n_dec), the new root last */
    const int32_t n_dec = (int32_t)(chain - s->hist) + n_chain + 1;
    if (!ds->sched) ES_TRY(start(s, ds, n_dec));
    ds->c_n = 0;
    es__dsi_sched_reset(ds->sched, s->hist, n_dec);
    es__dsi_sched_set_kv(ds->sched, 0, es_context_n_past(s->ctx));
    /* the other servers and the drafter read it now, all at once */
    es_status st = es__dsi_sched_prefill(ds->sched, &s->err);
    if (st != ES_OK) { /* spec.c cuts s->ctx back; the sequence is the old one */
        es__dsi_sched_reset(ds->sched, s->hist, (int32_t)s->n_hist);
        es__dsi_sched_set_kv(ds->sched, 0, s->has_root ? (int32_t)s->n_hist - 1 : 0);
    }
    return st;
}

static void dsi_rewind(es_spec *s, void *state, int32_t n_past) {
    dsi_state *ds = state;
    ds->c_n = 0;
    if (!ds->sched) {
        if (es_context_n_past(ds->draft) > n_past) es_truncate(ds->draft, n_past);
        return;
    }
    es__dsi_sched_reset(ds->sched, s->hist, (int32_t)s->n_hist);
    /* past n_past nothing a worker holds counts, even where the tokens agree: what a shifted
     * cache holds there is not what reading the tokens again gives */
    for (int32_t who = ES__DSI_DRAFTER; who < ds->n_srv; who++)
        es__dsi_sched_set_kv(ds->sched, who, ES__MIN(es__dsi_sched_kv(ds->sched, who), n_past));
    /* server 0 is the caller's context, which spec.c keeps holding the sequence's first tokens:
     * after es_spec_resume all but the last (rewound to 0 for the strategy's own state), which
     * server 0 would otherwise read again from the start */
    es__dsi_sched_set_kv(ds->sched, 0, es_context_n_past(s->ctx));
}

/* Shifts every worker but server 0 (spec.c shifts that one) as es_context_shift(n_keep,
 * n_discard) shifts the target; a worker's cache must first hold the whole sequence. On failure
 * the workers keep seq[0..n_keep) only, which agrees with the unshifted sequence. */
static es_status shift_workers(es_spec *s, dsi_state *ds, int32_t n_keep, int32_t n_discard) {
    const int32_t n_past = (int32_t)s->n_hist - 1;
    for (int32_t who = ES__DSI_DRAFTER; who < ds->n_srv; who++) {
        if (who == 0) continue;
        es_context *c = ctx_of(ds, who);
        es_status st = es_truncate(c, n_past);
        if (st == ES_OK) st = es_context_shift(c, n_keep, n_discard);
        if (st == ES_OK) continue;
        es__fail(&s->err, st, "es_spec_shift: DSI %s: %s", who == ES__DSI_DRAFTER ? "drafter" : "target server",
                 es_context_errmsg(c));
        for (int32_t w = ES__DSI_DRAFTER; w < ds->n_srv; w++) {
            if (w == 0) continue;
            es_truncate(ctx_of(ds, w), ES__MIN(n_keep, es_context_n_past(ctx_of(ds, w))));
            es__dsi_sched_set_kv(ds->sched, w, es_context_n_past(ctx_of(ds, w)));
        }
        return st;
    }
    return ES_OK;
}

/* A shifted cache keeps, past n_keep, entries computed with the dropped tokens in view: a
 * server that recomputed them from the shifted sequence would decide other tokens than
 * es_generate does. So every worker reads the whole sequence first, then shifts with the target. */
static es_status dsi_shift(es_spec *s, void *state, int32_t n_keep, int32_t n_discard) {
    dsi_state *ds = state;
    ds->c_n = 0;
    if (!ds->sched) {
        es_truncate(ds->draft, ES__MIN(n_keep, es_context_n_past(ds->draft)));
        return ES_OK;
    }
    const int32_t n_seq = (int32_t)s->n_hist;
    es__dsi_sched_reset(ds->sched, s->hist, n_seq);
    ES_TRY(es__dsi_sched_prefill(ds->sched, &s->err));
    ES_TRY(shift_workers(s, ds, n_keep, n_discard));
    int32_t *moved = es__malloc(s->alloc, sizeof(int32_t) * (size_t)n_seq);
    ES_RETURN_IF(!moved, &s->err, ES_ERR_OUT_OF_MEMORY, "es_spec_shift: out of memory");
    memcpy(moved, s->hist, sizeof(int32_t) * (size_t)n_keep);
    memcpy(moved + n_keep, s->hist + n_keep + n_discard, sizeof(int32_t) * (size_t)(n_seq - n_keep - n_discard));
    es__dsi_sched_reset(ds->sched, moved, n_seq - n_discard);
    es__free(s->alloc, moved);
    /* server 0 included: spec.c shifts it next (and rewinds us if that fails) */
    for (int32_t who = ES__DSI_DRAFTER; who < ds->n_srv; who++)
        es__dsi_sched_set_kv(ds->sched, who, n_seq - n_discard - 1);
    return ES_OK;
}

static es_status dsi_step(es_spec *s, void *state, int32_t *tokens, size_t cap, size_t *n_tokens) {
    dsi_state *ds = state;
    ES_RETURN_IF(!ds->sched, &s->err, ES_ERR_INVALID_ARGUMENT, "es_spec_step: feed a prompt first (es_spec_feed)");
    int32_t n = 0;
    const es_status st = es__dsi_sched_step(ds->sched, (int32_t)ES__MIN(cap, (size_t)INT32_MAX), tokens, &n, &s->err);
    update_stats(s, ds);
    if (st != ES_OK) return st;
    /* es_spec_step counts one target call per step; DSI's are the jobs its servers ran */
    s->st.n_target_calls += s->st.dsi.n_jobs - ds->jobs_seen - 1;
    ds->jobs_seen = s->st.dsi.n_jobs;
    *n_tokens = (size_t)n;
    es__tree_root(&s->tree, s->hist[s->n_hist - 1], (int32_t)s->n_hist - 1);
    return ES_OK;
}

const es__strategy es__strategy_dsi = {"dsi",      dsi_create, dsi_feed,  dsi_step,
                                       dsi_rewind, dsi_free,   dsi_quiesce, dsi_shift};
