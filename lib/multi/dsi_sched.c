/* dsi_sched.c: DSI's scheduler (dsi_sched.h): Algorithm 1 of Timor et al. with lookahead and
 * preemption, for one drafter and a fixed pool of target servers, on worker threads.
 *
 * How it maps to Algorithm 1 (m = 2: f_1 the drafter, f_2 the target):
 *   - the drafter thread is the chain of threads C_(1,1,...,1): it drafts the next token on
 *     the decided tokens and its own drafts, never waiting for a verification (line 6 for j = 1);
 *   - a job is the target thread C_(J,2) of line 6, batched as "Preemption in DSI" says: instead
 *     of one target thread per drafted token, a job verifies a block of `lookahead` drafts (its
 *     rows give f_2 after each prefix of the block), sent to a free server as soon as the block
 *     is drafted; Appendix D's ceil(T_target / (lookahead T_draft)) servers keep up with it;
 *   - the job whose rows include the root (the last decided token) is the current verifier
 *     (lines 3, 11). There always is one: when none covers the root, a job on the root with the
 *     drafts at hand starts at once on a free server (the job that just decided frees one).
 *     That is the non-SI thread of Theorem 1: tokens are decided no later than plain decoding
 *     decides them;
 *   - when the verifier's job ends, the coordinator walks its rows (lines 7-9: the decided token
 *     after each accepted prefix; es__verify decides, so greedy, seeded and rejection sampling
 *     are exactly those of the other strategies), relabels the verifier to the job holding the
 *     new root (lines 11-14: it may have finished already, then the walk goes on) and, where a
 *     draft was rejected, terminates every job and the drafter's call built on it (lines 8, 10):
 *     they are marked stale and their contexts aborted, which stops a forward at its next layer
 *     (ops.abort); a result that arrives anyway is dropped, unless the call was cancelled by the
 *     application too (ops.app_cancelled), which ends the generation as any failure does.
 * Every worker's KV is a prefix of what it last forwarded; `good` says how much of it still
 * agrees with the sequence, and the next call truncates to that and forwards the rest.
 *
 * One mutex guards all shared state; workers hold it only to take and return work, never across
 * a forward call. Deliberately not here: models, logits and sampling (the ops table), params. */
#include "dsi_sched.h"

#include <pthread.h>
#include <string.h>

enum { JOB_FREE, JOB_QUEUED, JOB_RUNNING, JOB_DONE };

typedef struct dsi_job {
    int state;
    int32_t server;
    int32_t keep, n, lo;  /* forward seq[keep..n), rows [lo, n)                              */
    bool stale;           /* built on a rejected draft (or dropped by a quiesce)              */
    bool prefill;         /* es__dsi_sched_prefill's: no rows, not a verification            */
    bool in_use;          /* the coordinator is walking it                                   */
} dsi_job;

typedef struct dsi_worker {
    es__dsi_sched *d;
    int32_t who;          /* ES__DSI_DRAFTER or a server index                              */
    pthread_t thread;
    bool started;
    pthread_cond_t cv;    /* wakes this worker                                              */
    bool cv_ok;
    int32_t *tok;         /* [cap] its copy of the sequence: tok[0..good) == seq[0..good)     */
    int32_t good;         /* KV positions that agree with seq (its running call's, if it ends well) */
    bool busy;            /* inside an operation                                            */
    bool abort_sent;      /* an abort was sent during that operation                        */
    bool app_cancelled;   /* that operation was cancelled by the application (ops.app_cancelled):
                             the generation ends even if the scheduler had dropped the work   */
    es__err err;
    int32_t job;          /* server: the slot it runs or was given, -1                      */
    int32_t pos;          /* drafter: the position being drafted, -1                        */
    bool stale;           /* drafter: the running draft is dropped                          */
    bool prefill_req;     /* drafter: es__dsi_sched_prefill asked it to read the sequence    */
    bool failed;          /* drafter: stopped after a failure until a step reports it       */
    double busy_ms, wasted_ms;
} dsi_worker;

struct es__dsi_sched {
    es__dsi_cfg cfg;
    es__dsi_ops ops;
    const es_allocator *alloc;
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* the coordinator's: a job ended, a worker went idle, a failure    */
    bool mu_ok, cv_ok;
    bool quit, paused;
    int32_t *seq;         /* [cap] decided tokens, then drafts                              */
    int32_t cap;
    int32_t n_dec, n_seq;
    int32_t max_ahead;
    int32_t ramp;         /* blocks sent since drafts were last cut: their size doubles up to
                             the lookahead (schedule)                                         */
    dsi_job *jobs;        /* [cfg.n_slots]                                                  */
    dsi_worker drafter;
    dsi_worker *servers;  /* [cfg.n_servers]                                                */
    int32_t *chain;       /* [lookahead + 2] the coordinator's copy of a walk's chain        */
    es_status wst;        /* the first worker failure not reported yet                      */
    es__err werr;
    /* The step under way (es__dsi_sched_step): where decided tokens go. While the caller waits
     * in it, whichever thread finds a decision ready makes it (decide_locked), so the worker that
     * finished the verifier's job goes straight on to the next one without waking anyone. */
    bool in_step, deciding, step_over;
    int32_t *out, cap_out, n_out;
    es_status dst;        /* a decision's failure in this step                                */
    es__err derr;
    int32_t n_prefill;    /* prefills still running                                         */
    int64_t n_jobs, n_preempted, n_draft_calls, n_dropped, n_cut;
    double active_ms, t_resume;
};

int32_t es__dsi_slots(int32_t n_servers) {
    return 2 * n_servers + 3;
}

int32_t es__dsi_max_ahead(int32_t n_servers, int32_t lookahead) {
    return lookahead * (n_servers + 1) + 1;
}

static double now_ms(void) {
    return es__time_now() * 1e3;
}

/* ---- bookkeeping, all with d->mu held */

static void fail_locked(es__dsi_sched *d, es_status st, const es__err *err) {
    if (d->wst != ES_OK) return;
    d->wst = st;
    d->werr = *err;
    d->werr.status = st;
}

static void abort_worker(es__dsi_sched *d, dsi_worker *w) {
    if (!w->busy) return; /* not started yet: it looks at the job before it starts */
    d->ops.abort(d->ops.user, w->who);
    w->abort_sent = true;
}

/* Whether the drafter may draft the token at n_seq now. */
static bool drafter_can_draft(const es__dsi_sched *d) {
    const int32_t p = d->n_seq;
    if (d->paused || d->quit || d->drafter.failed || d->n_dec < 1) return false;
    if (p >= d->cfg.n_ctx || p >= d->n_dec + d->max_ahead) return false;
    return !(d->ops.is_eog && d->ops.is_eog(d->ops.user, d->seq[p - 1])); /* nothing follows an end */
}

/* Whether no further draft will come without a decision first (a partial block may go). */
static bool drafter_stalled(const es__dsi_sched *d) {
    return !drafter_can_draft(d) && d->drafter.pos < 0;
}

/* The tokens from position q on changed (a draft rejected there, or the drafts dropped):
 * everything built on them is stale (Algorithm 1, lines 8 and 10). */
static void invalidate(es__dsi_sched *d, int32_t q) {
    d->ramp = 0;
    for (int32_t s = 0; s < d->cfg.n_slots; s++) {
        dsi_job *j = &d->jobs[s];
        if (j->state == JOB_FREE || j->stale || j->prefill || j->n <= q) continue;
        j->stale = true;
        if (j->state == JOB_RUNNING) {
            abort_worker(d, &d->servers[j->server]);
        } else if (j->state == JOB_DONE && !j->in_use) {
            j->state = JOB_FREE;
            d->n_preempted++;
        }
    }
    for (int32_t i = 0; i < d->cfg.n_servers; i++) d->servers[i].good = ES__MIN(d->servers[i].good, q);
    dsi_worker *w = &d->drafter;
    w->good = ES__MIN(w->good, q);
    if (w->pos >= 0 && q <= w->pos) {
        w->stale = true;
        if (q < w->pos) abort_worker(d, w); /* its input changed; at q == pos only its output did */
    }
}

/* The coordinator decided toks[0..m) at positions n_dec, n_dec + 1, ... */
static void apply(es__dsi_sched *d, const int32_t *toks, int32_t m) {
    for (int32_t i = 0; i < m; i++) {
        const int32_t q = d->n_dec, t = toks[i];
        if (q < d->n_seq) {
            if (d->seq[q] != t) { /* the draft at q is rejected: the target's token replaces it */
                d->n_cut += d->n_seq - q - 1;
                d->seq[q] = t;
                d->n_seq = q + 1;
                invalidate(d, q);
            }
        } else { /* past every draft: the drafter is behind, the next blocks start small */
            d->seq[q] = t;
            d->n_seq = q + 1;
            d->ramp = 0;
            if (d->drafter.pos == q) d->drafter.stale = true;
        }
        d->n_dec = q + 1;
    }
    pthread_cond_signal(&d->drafter.cv);
}

static bool job_live(const dsi_job *j) {
    return j->state != JOB_FREE && !j->stale && !j->prefill;
}

/* The live job whose rows include position r (DONE only, if done). */
static dsi_job *covering(es__dsi_sched *d, int32_t r, bool done) {
    for (int32_t s = 0; s < d->cfg.n_slots; s++) {
        dsi_job *j = &d->jobs[s];
        if (job_live(j) && j->lo <= r && r < j->n && (!done || j->state == JOB_DONE)) return j;
    }
    return NULL;
}

static int32_t free_slots(const es__dsi_sched *d, int32_t *first) {
    int32_t n = 0;
    *first = -1;
    for (int32_t s = d->cfg.n_slots - 1; s >= 0; s--)
        if (d->jobs[s].state == JOB_FREE) {
            n++;
            *first = s;
        }
    return n;
}

/* An idle server, the one whose KV agrees with the sequence furthest (least to forward). */
static dsi_worker *free_server(es__dsi_sched *d) {
    dsi_worker *best = NULL;
    for (int32_t i = 0; i < d->cfg.n_servers; i++) {
        dsi_worker *w = &d->servers[i];
        if (w->job < 0 && (!best || w->good > best->good)) best = w;
    }
    return best;
}

static void dispatch(es__dsi_sched *d, dsi_worker *w, int32_t slot, int32_t lo, int32_t n, bool prefill) {
    dsi_job *j = &d->jobs[slot];
    const int32_t keep = ES__MIN(w->good, lo);
    *j = (dsi_job){JOB_QUEUED, w->who, keep, n, lo, false, prefill, false};
    w->job = slot;
    w->good = n; /* if the call fails, back to keep */
    if (!prefill) d->n_jobs++;
    pthread_cond_signal(&w->cv);
}

/* Gives work to idle servers: the verifier's job when none holds the root's rows (the non-SI
 * thread), then the next block of drafts after the furthest job, while servers and slots last.
 * A block is `lookahead` drafts ("Preemption in DSI"), but after drafts were cut the blocks grow
 * from one draft, doubling: the first drafts after a rejection get verified a drafter call after
 * they exist, as SI would verify them, rather than after a whole block, while the steady state
 * keeps to the blocks (and the servers) Appendix D sizes. Any thread holding the lock may call it. */
static void schedule(es__dsi_sched *d) {
    if (d->paused || d->quit) return;
    const int32_t R = d->n_dec - 1, K = d->cfg.lookahead;
    if (R < 0 || R >= d->cfg.n_ctx) return;
    const int32_t end = ES__MIN(d->n_seq, d->cfg.n_ctx);
    for (int32_t s = 0; s < d->cfg.n_slots; s++) { /* results wholly behind the root */
        dsi_job *j = &d->jobs[s];
        if (j->state == JOB_DONE && !j->in_use && j->n <= R) j->state = JOB_FREE;
    }
    int32_t slot = -1;
    const dsi_job *cov = covering(d, R, false);
    if (!cov) {
        dsi_worker *w = free_server(d);
        if (!w || free_slots(d, &slot) == 0) return;
        dispatch(d, w, slot, R, ES__MIN(end, R + 1 + K), false);
    } else if (cov->state == JOB_DONE) {
        return; /* the coordinator decides first: the blocks after it may change */
    }
    for (;;) {
        int32_t e = 0;
        for (int32_t s = 0; s < d->cfg.n_slots; s++)
            if (job_live(&d->jobs[s])) e = ES__MAX(e, d->jobs[s].n);
        const int32_t avail = end - e, size = d->ramp < 30 ? ES__MIN(K, 1 << d->ramp) : K;
        if (avail <= 0 || (avail < size && !drafter_stalled(d))) return;
        if (free_slots(d, &slot) < 2) return; /* one stays for the verifier */
        dsi_worker *w = free_server(d);
        if (!w) return;
        dispatch(d, w, slot, e, e + ES__MIN(avail, size), false);
        d->ramp++;
    }
}

/* Makes the decisions the finished verifier jobs allow (Algorithm 1, lines 7-14) into the
 * step's buffer: walks the rows of the job that holds the root, relabels the verifier to the
 * job holding the new root and goes on while one has finished, the step has room and no end of
 * text was decided. The caller (the coordinator, or a worker while the coordinator waits in the
 * step) holds the lock and d->deciding is false; the lock is let go during a walk. */
static void decide_locked(es__dsi_sched *d) {
    d->deciding = true;
    while (d->n_out < d->cap_out && !d->step_over && d->dst == ES_OK) {
        const int32_t R = d->n_dec - 1;
        if (R >= d->cfg.n_ctx) break; /* the context is full */
        dsi_job *j = covering(d, R, true);
        /* wait_draft: the last decision's candidate, the draft after the job's rows, unless the
         * drafter never drafts it (an end token before it, the context's end, a failure) */
        if (!j || (d->cfg.wait_draft && d->n_seq <= j->n && j->n < d->cfg.n_ctx && drafter_can_draft(d))) break;
        const int32_t slot = (int32_t)(j - d->jobs), n_rows = j->n - R;
        const int32_t n_chain = n_rows + (d->n_seq > j->n ? 1 : 0);
        memcpy(d->chain, d->seq + R, sizeof(int32_t) * (size_t)n_chain);
        int32_t *tokens = d->out + d->n_out;
        const int32_t cap = d->cap_out - d->n_out;
        j->in_use = true;
        pthread_mutex_unlock(&d->mu);
        int32_t m = 0;
        es__err verr = {ES_OK, ""};
        const es_status st = d->ops.verify(d->ops.user, slot, j->lo, d->chain, n_chain, n_rows, R, cap, tokens, &m, &verr);
        pthread_mutex_lock(&d->mu);
        j->in_use = false;
        if (st != ES_OK) {
            d->dst = st;
            d->derr = verr;
            d->derr.status = st;
            break;
        }
        apply(d, tokens, m);
        if (j->stale || d->n_dec - 1 >= j->n) j->state = JOB_FREE; /* consumed */
        d->n_out += m;
        d->step_over = d->ops.is_eog && d->ops.is_eog(d->ops.user, tokens[m - 1]);
        schedule(d);
    }
    d->deciding = false;
    pthread_cond_broadcast(&d->cv);
}

/* A worker found a decision may be ready: it makes it when the caller waits in a step. */
static void maybe_decide(es__dsi_sched *d) {
    if (d->in_step && !d->deciding) decide_locked(d);
}

/* ---- workers */

/* Runs one operation of worker w without the lock; returns its status and time. */
static es_status run_op(es__dsi_sched *d, dsi_worker *w, int32_t keep, int32_t n, int32_t lo, int32_t slot,
                        int32_t *token, double *ms) {
    w->busy = true;
    w->abort_sent = false;
    pthread_mutex_unlock(&d->mu);
    const double t0 = now_ms();
    es_status st = w->who == ES__DSI_DRAFTER
                       ? d->ops.draft(d->ops.user, w->tok, keep, n, token, &w->err)
                       : d->ops.target(d->ops.user, w->who, w->tok, keep, n, lo, slot, &w->err);
    *ms = now_ms() - t0;
    const bool app = st == ES_ERR_CANCELLED && d->ops.app_cancelled(d->ops.user, w->who);
    pthread_mutex_lock(&d->mu);
    w->app_cancelled = app;
    w->busy = false;
    /* an abort sent after the call stopped looking must not cancel the next one */
    if (w->abort_sent) d->ops.abort_clear(d->ops.user, w->who);
    w->abort_sent = false;
    w->busy_ms += *ms;
    return st;
}

static void *server_main(void *arg) {
    dsi_worker *w = arg;
    es__dsi_sched *d = w->d;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->quit && w->job < 0) pthread_cond_wait(&w->cv, &d->mu);
        if (d->quit) break;
        dsi_job *j = &d->jobs[w->job];
        const int32_t keep = j->keep;
        es_status st = ES_OK;
        double ms = 0.0;
        w->app_cancelled = false;
        if (!j->stale) {
            j->state = JOB_RUNNING;
            memcpy(w->tok + keep, d->seq + keep, sizeof(int32_t) * (size_t)(j->n - keep));
            st = run_op(d, w, keep, j->n, j->lo, w->job, NULL, &ms);
        }
        if (j->stale || st != ES_OK) w->good = ES__MIN(w->good, keep);
        if (j->stale && !w->app_cancelled) {
            w->wasted_ms += ms;
            if (!j->prefill) d->n_preempted++;
        } else if (st != ES_OK) {
            fail_locked(d, st, &w->err); /* ES_ERR_CANCELLED here: the application's es_context_abort */
        }
        j->state = (!j->stale && st == ES_OK && !j->prefill) ? JOB_DONE : JOB_FREE;
        if (j->prefill) d->n_prefill--;
        w->job = -1;
        if (j->state == JOB_DONE) maybe_decide(d); /* may hand this server its next job */
        schedule(d);
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void *drafter_main(void *arg) {
    dsi_worker *w = arg;
    es__dsi_sched *d = w->d;
    pthread_mutex_lock(&d->mu);
    while (!d->quit) {
        const bool prefill = w->prefill_req;
        if (!prefill && !drafter_can_draft(d)) {
            pthread_cond_wait(&w->cv, &d->mu);
            continue;
        }
        /* a prefill reads up to the root; a draft needs the logits of the last token: at least
         * that one is forwarded */
        const int32_t p = prefill ? d->n_dec - 1 : d->n_seq;
        const int32_t keep = ES__MAX(0, ES__MIN(w->good, prefill ? p : p - 1));
        w->prefill_req = false;
        if (keep >= p && prefill) {
            d->n_prefill--;
            pthread_cond_broadcast(&d->cv);
            continue;
        }
        memcpy(w->tok + keep, d->seq + keep, sizeof(int32_t) * (size_t)(p - keep));
        w->good = p;
        w->pos = prefill ? -1 : p;
        w->stale = false;
        int32_t token = -1;
        double ms = 0.0;
        const es_status st = run_op(d, w, keep, p, p, 0, prefill ? NULL : &token, &ms);
        const bool stale = w->stale;
        w->pos = -1;
        if (st != ES_OK || stale) w->good = ES__MIN(w->good, keep);
        if (prefill) {
            if (st != ES_OK) fail_locked(d, st, &w->err);
            d->n_prefill--;
        } else if (stale && !w->app_cancelled) {
            d->n_draft_calls++;
            d->n_dropped++;
            w->wasted_ms += ms;
        } else if (st != ES_OK) {
            fail_locked(d, st, &w->err);
            w->failed = true; /* until a step has reported it; the target goes on without drafts */
        } else {
            d->seq[p] = token;
            d->n_seq = p + 1;
            d->n_draft_calls++;
            if (d->cfg.wait_draft) maybe_decide(d); /* the candidate a decision waited for */
            schedule(d);
        }
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- lifecycle */

static es_status init_worker(es__dsi_sched *d, dsi_worker *w, int32_t who, es__err *err) {
    w->d = d;
    w->who = who;
    w->job = -1;
    w->pos = -1;
    w->tok = es__calloc(d->alloc, (size_t)d->cap, sizeof(int32_t));
    ES_RETURN_IF(!w->tok, err, ES_ERR_OUT_OF_MEMORY, "dsi: out of memory");
    ES_RETURN_IF(pthread_cond_init(&w->cv, NULL) != 0, err, ES_ERR_BACKEND, "dsi: pthread_cond_init failed");
    w->cv_ok = true;
    return ES_OK;
}

es_status es__dsi_sched_create(const es__dsi_cfg *cfg, const es__dsi_ops *ops, const es_allocator *a, es__err *err,
                               es__dsi_sched **out) {
    *out = NULL;
    ES_RETURN_IF(cfg->n_servers < 1 || cfg->lookahead < 1 || cfg->n_ctx < 1 || cfg->n_slots < es__dsi_slots(cfg->n_servers),
                 err, ES_ERR_INVALID_ARGUMENT, "dsi: %d servers, lookahead %d, n_ctx %d, %d result slots", cfg->n_servers,
                 cfg->lookahead, cfg->n_ctx, cfg->n_slots);
    es__dsi_sched *d = es__calloc(a, 1, sizeof *d);
    ES_RETURN_IF(!d, err, ES_ERR_OUT_OF_MEMORY, "dsi: out of memory");
    d->cfg = *cfg;
    d->ops = *ops;
    d->alloc = a;
    d->paused = true;
    d->cap = cfg->n_ctx + 2;
    d->max_ahead = es__dsi_max_ahead(cfg->n_servers, cfg->lookahead);
    es_status st = ES_OK;
    d->seq = es__calloc(a, (size_t)d->cap, sizeof(int32_t));
    d->jobs = es__calloc(a, (size_t)cfg->n_slots, sizeof(dsi_job));
    d->servers = es__calloc(a, (size_t)cfg->n_servers, sizeof(dsi_worker));
    d->chain = es__calloc(a, (size_t)es__dsi_max_rows(cfg->lookahead) + 1, sizeof(int32_t));
    if (!d->seq || !d->jobs || !d->servers || !d->chain) st = es__fail(err, ES_ERR_OUT_OF_MEMORY, "dsi: out of memory");
    if (st == ES_OK) {
        d->mu_ok = pthread_mutex_init(&d->mu, NULL) == 0;
        d->cv_ok = pthread_cond_init(&d->cv, NULL) == 0;
        if (!d->mu_ok || !d->cv_ok) st = es__fail(err, ES_ERR_BACKEND, "dsi: pthread_mutex_init failed");
    }
    if (st == ES_OK) st = init_worker(d, &d->drafter, ES__DSI_DRAFTER, err);
    for (int32_t i = 0; st == ES_OK && i < cfg->n_servers; i++) st = init_worker(d, &d->servers[i], i, err);
    if (st == ES_OK) {
        d->drafter.started = pthread_create(&d->drafter.thread, NULL, drafter_main, &d->drafter) == 0;
        if (!d->drafter.started) st = es__fail(err, ES_ERR_BACKEND, "dsi: could not start the drafter thread");
    }
    for (int32_t i = 0; st == ES_OK && i < cfg->n_servers; i++) {
        dsi_worker *w = &d->servers[i];
        w->started = pthread_create(&w->thread, NULL, server_main, w) == 0;
        if (!w->started) st = es__fail(err, ES_ERR_BACKEND, "dsi: could not start target server thread %d", i);
    }
    if (st != ES_OK) {
        es__dsi_sched_free(d);
        return st;
    }
    *out = d;
    return ES_OK;
}

static void free_worker(es__dsi_sched *d, dsi_worker *w) {
    if (w->started) pthread_join(w->thread, NULL);
    if (w->cv_ok) pthread_cond_destroy(&w->cv);
    es__free(d->alloc, w->tok);
}

void es__dsi_sched_free(es__dsi_sched *d) {
    if (!d) return;
    if (d->mu_ok) {
        pthread_mutex_lock(&d->mu);
        d->quit = true;
        for (int32_t s = 0; d->jobs && s < d->cfg.n_slots; s++) d->jobs[s].stale = true;
        abort_worker(d, &d->drafter);
        if (d->drafter.cv_ok) pthread_cond_broadcast(&d->drafter.cv);
        for (int32_t i = 0; d->servers && i < d->cfg.n_servers; i++) {
            abort_worker(d, &d->servers[i]);
            if (d->servers[i].cv_ok) pthread_cond_broadcast(&d->servers[i].cv);
        }
        pthread_mutex_unlock(&d->mu);
    }
    free_worker(d, &d->drafter);
    for (int32_t i = 0; d->servers && i < d->cfg.n_servers; i++) free_worker(d, &d->servers[i]);
    if (d->cv_ok) pthread_cond_destroy(&d->cv);
    if (d->mu_ok) pthread_mutex_destroy(&d->mu);
    es__free(d->alloc, d->seq);
    es__free(d->alloc, d->jobs);
    es__free(d->alloc, d->servers);
    es__free(d->alloc, d->chain);
    es__free(d->alloc, d);
}

void es__dsi_sched_quiesce(es__dsi_sched *d) {
    pthread_mutex_lock(&d->mu);
    if (!d->paused) d->active_ms += now_ms() - d->t_resume;
    d->paused = true;
    for (int32_t s = 0; s < d->cfg.n_slots; s++) {
        dsi_job *j = &d->jobs[s];
        if (j->state == JOB_FREE || j->stale) continue;
        j->stale = true;
        if (j->state == JOB_RUNNING) abort_worker(d, &d->servers[j->server]);
        if (j->state == JOB_DONE) {
            j->state = JOB_FREE;
            d->n_preempted++;
        }
    }
    if (d->drafter.pos >= 0) {
        d->drafter.stale = true;
        abort_worker(d, &d->drafter);
    }
    for (;;) {
        bool idle = !d->drafter.busy;
        for (int32_t i = 0; i < d->cfg.n_servers; i++) idle = idle && d->servers[i].job < 0;
        if (idle) break;
        pthread_cond_wait(&d->cv, &d->mu);
    }
    /* the drafts go: a feed or a rewind changes what follows the root */
    d->n_cut += d->n_seq - d->n_dec;
    invalidate(d, d->n_dec);
    d->n_seq = d->n_dec;
    pthread_mutex_unlock(&d->mu);
}

void es__dsi_sched_reset(es__dsi_sched *d, const int32_t *dec, int32_t n_dec) {
    pthread_mutex_lock(&d->mu);
    n_dec = ES__MIN(n_dec, d->cap);
    int32_t same = 0;
    while (same < n_dec && same < d->n_seq && d->seq[same] == dec[same]) same++;
    invalidate(d, same);
    memcpy(d->seq, dec, sizeof(int32_t) * (size_t)n_dec);
    d->n_dec = d->n_seq = n_dec;
    d->drafter.failed = false;
    pthread_mutex_unlock(&d->mu);
}

static dsi_worker *worker(es__dsi_sched *d, int32_t who) {
    return who == ES__DSI_DRAFTER ? &d->drafter : &d->servers[who];
}

void es__dsi_sched_set_kv(es__dsi_sched *d, int32_t who, int32_t n) {
    pthread_mutex_lock(&d->mu);
    dsi_worker *w = worker(d, who);
    w->good = ES__MIN(n, d->n_seq);
    memcpy(w->tok, d->seq, sizeof(int32_t) * (size_t)w->good);
    pthread_mutex_unlock(&d->mu);
}

int32_t es__dsi_sched_kv(const es__dsi_sched *d, int32_t who) {
    es__dsi_sched *m = (es__dsi_sched *)d; /* the lock only */
    pthread_mutex_lock(&m->mu);
    const int32_t g = worker(m, who)->good;
    pthread_mutex_unlock(&m->mu);
    return g;
}

es_status es__dsi_sched_prefill(es__dsi_sched *d, es__err *err) {
    pthread_mutex_lock(&d->mu);
    const int32_t R = d->n_dec - 1;
    d->n_prefill = 0;
    for (int32_t i = 0; i < d->cfg.n_servers && R > 0; i++) {
        dsi_worker *w = &d->servers[i];
        int32_t slot = -1;
        if (w->good >= R || free_slots(d, &slot) == 0) continue;
        dispatch(d, w, slot, R, R, true);
        d->n_prefill++;
    }
    if (R > 0 && d->drafter.good < R) {
        d->drafter.prefill_req = true;
        d->n_prefill++;
        pthread_cond_signal(&d->drafter.cv);
    }
    while (d->n_prefill > 0) pthread_cond_wait(&d->cv, &d->mu);
    es_status st = d->wst;
    if (st != ES_OK) {
        es__err_forward(err, &d->werr);
        d->wst = ES_OK;
        d->drafter.failed = false;
    }
    pthread_mutex_unlock(&d->mu);
    return st;
}

es_status es__dsi_sched_step(es__dsi_sched *d, int32_t cap, int32_t *tokens, int32_t *n_tokens, es__err *err) {
    *n_tokens = 0;
    pthread_mutex_lock(&d->mu);
    if (d->paused) {
        d->paused = false;
        d->t_resume = now_ms();
        pthread_cond_signal(&d->drafter.cv);
    }
    d->out = tokens;
    d->cap_out = cap;
    d->n_out = 0;
    d->step_over = false;
    d->dst = ES_OK;
    d->in_step = true;
    es_status rc = ES_OK;
    for (;;) {
        if (!d->deciding) {
            if (d->wst != ES_OK && d->n_out == 0) { /* a worker's failure, reported once */
                rc = es__err_forward(err, &d->werr);
                d->wst = ES_OK;
                d->drafter.failed = false;
                pthread_cond_signal(&d->drafter.cv);
                break;
            }
            decide_locked(d);
            if (d->dst != ES_OK || d->n_out >= d->cap_out || d->step_over || d->n_dec - 1 >= d->cfg.n_ctx) break;
            schedule(d);
            if (d->n_out > 0) break;
        }
        pthread_cond_wait(&d->cv, &d->mu);
    }
    while (d->deciding) pthread_cond_wait(&d->cv, &d->mu); /* a worker's walk writes into tokens */
    d->in_step = false;
    if (d->dst != ES_OK) { /* reported now when nothing was decided, else by the next step */
        if (d->n_out == 0) rc = es__err_forward(err, &d->derr);
        else fail_locked(d, d->dst, &d->derr);
        d->dst = ES_OK;
    }
    *n_tokens = rc == ES_OK ? d->n_out : 0;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

void es__dsi_sched_stats(es__dsi_sched *d, es_dsi_stats *out) {
    pthread_mutex_lock(&d->mu);
    out->n_targets = d->cfg.n_servers;
    out->n_jobs = d->n_jobs;
    out->n_jobs_preempted = d->n_preempted;
    out->n_draft_calls = d->n_draft_calls;
    out->n_drafts_dropped = d->n_dropped;
    out->n_drafts_cut = d->n_cut;
    out->active_ms = d->active_ms + (d->paused ? 0.0 : now_ms() - d->t_resume);
    for (int32_t i = 0; i < d->cfg.n_servers && i < ES_DSI_MAX_TARGETS; i++) {
        out->server_busy_ms[i] = d->servers[i].busy_ms;
        out->server_preempted_ms[i] = d->servers[i].wasted_ms;
    }
    out->draft_busy_ms = d->drafter.busy_ms;
    out->draft_preempted_ms = d->drafter.wasted_ms;
    pthread_mutex_unlock(&d->mu);
}
