/* dsi_synth.h: the latency-controlled harness of DSI's scheduler (lib/multi/dsi_sched.c): the
 * same scheduler code as ES_SPEC_DSI, driven with synthetic forwards, as the paper simulates DSI
 * (Timor et al., 4 "Experiments with thread pools"). A forward call sleeps a fixed latency (the
 * target's or the drafter's; a worker's first call, its prefill, may take another, as TTFT and
 * TPOT differ) and answers from an oracle: the true sequence is a hash of the position; the target
 * on a correct prefix gives the true next token; the drafter on a correct prefix gives it with
 * probability `accept`, drawn once per position (so the drafter is deterministic, and SI, non-SI
 * and DSI see the same acceptances: common random numbers), else another token. A sleeping call
 * wakes at once when aborted (ES_ERR_CANCELLED), as a real forward stops at its next layer; an
 * abort is the scheduler's (ops.abort) or the application's (synth_app_abort), told apart as the
 * library's contexts tell them (es__context_app_abort_taken).
 * Sleeping threads cost no CPU, so 8 servers run on a 2-core machine.
 * Also here: SI (Leviathan et al.; the paper's Appendix D loop) and non-SI on the same forwards,
 * sequential, for the comparisons. Used by tests/multi/test_dsi_sched.c (stress, exactness) and
 * tests/bench/bench_dsi.c (Table 1, Figure 1). */
#ifndef ES_TEST_DSI_SYNTH_H
#define ES_TEST_DSI_SYNTH_H

#include "multi/dsi_sched.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SYNTH_MAX_WORKERS (ES_DSI_MAX_TARGETS + 1)

typedef struct synth_cfg {
    double t_target, t_target_first; /* ms per target call; the first (prefill) call           */
    double t_draft, t_draft_first;   /* ms per drafter call                                    */
    double jitter;                   /* 0: fixed latencies; else each call's is scaled by a
                                        uniform factor in [1 - jitter, 1 + jitter]             */
    double accept;                   /* the drafter's acceptance rate, per position              */
    int32_t n_vocab;
    int32_t eog_every;               /* > 0: about one true token in eog_every is token 0, an
                                        end of text (the drafter stops after drafting one)     */
    uint64_t seed;
} synth_cfg;

typedef struct synth_worker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool abort, app_abort; /* the scheduler's request, the application's                     */
    bool took_app;         /* the last call was cancelled with the application's request     */
    bool sleeping;         /* inside a call, before it has looked at its requests            */
    int64_t calls;
} synth_worker;

typedef struct synth {
    synth_cfg cfg;
    int32_t n_ctx, lookahead;
    int32_t *rows;                 /* [n_slots][lookahead + 1] the target's answers          */
    synth_worker w[SYNTH_MAX_WORKERS]; /* [0] the drafter, [1 + i] server i                   */
    int32_t *decided;              /* [n_ctx + 2] what the coordinator decided (verify)      */
    int32_t n_decided;
    int64_t n_verify_calls;
} synth;

static inline uint64_t synth_mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double synth_u(uint64_t seed, uint64_t a, uint64_t b) {
    return (double)(synth_mix(synth_mix(seed ^ synth_mix(a)) ^ b) >> 11) * (1.0 / 9007199254740992.0);
}

/* The true token at position i. */
static inline int32_t synth_truth(const synth_cfg *c, int32_t i) {
    if (c->eog_every > 0 && synth_u(c->seed, 7, (uint64_t)i) * c->eog_every < 1.0) return 0;
    return 1 + (int32_t)(synth_mix(c->seed * 31 + (uint64_t)i) % (uint64_t)(c->n_vocab - 1));
}

/* The drafter's guess at position i on a correct prefix. */
static inline int32_t synth_guess(const synth_cfg *c, int32_t i) {
    const int32_t t = synth_truth(c, i);
    if (synth_u(c->seed, 3, (uint64_t)i) < c->accept) return t;
    return 1 + (t + (int32_t)(synth_mix(c->seed + (uint64_t)i) % (uint64_t)(c->n_vocab - 2))) % (c->n_vocab - 1);
}

/* First position where seq[0..n) leaves the true sequence (n if none). */
static inline int32_t synth_first_wrong(const synth_cfg *c, const int32_t *seq, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (seq[i] != synth_truth(c, i)) return i;
    return n;
}

static inline double synth_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Sleeps ms on worker w's clock unless aborted (then ES_ERR_CANCELLED, the request taken). */
static inline es_status synth_sleep(synth_worker *w, double ms) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    const double ns = (double)dl.tv_nsec + ms * 1e6;
    dl.tv_sec += (time_t)(ns / 1e9);
    dl.tv_nsec = (long)fmod(ns, 1e9);
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    w->sleeping = true;
    while (!w->abort && !w->app_abort && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->cv, &w->mu, &dl);
    w->sleeping = false;
    const bool cancelled = w->abort || w->app_abort;
    w->took_app = w->app_abort;
    w->abort = w->app_abort = false;
    w->calls++;
    pthread_mutex_unlock(&w->mu);
    return cancelled ? ES_ERR_CANCELLED : ES_OK;
}

static inline double synth_latency(synth *s, synth_worker *w, double first, double later) {
    pthread_mutex_lock(&w->mu);
    const int64_t k = w->calls;
    pthread_mutex_unlock(&w->mu);
    const double base = k == 0 ? first : later;
    if (s->cfg.jitter <= 0.0) return base;
    const double u = synth_u(s->cfg.seed ^ 0x5555, (uint64_t)(w - s->w), (uint64_t)k);
    return base * (1.0 - s->cfg.jitter + 2.0 * s->cfg.jitter * u);
}

static es_status synth_draft(void *user, const int32_t *seq, int32_t keep, int32_t n, int32_t *token, es__err *err) {
    synth *s = user;
    (void)keep;
    const es_status st = synth_sleep(&s->w[0], synth_latency(s, &s->w[0], s->cfg.t_draft_first, s->cfg.t_draft));
    if (st != ES_OK) return es__fail(err, st, "synthetic drafter: cancelled");
    if (token)
        *token = synth_first_wrong(&s->cfg, seq, n) == n ? synth_guess(&s->cfg, n)
                                                         : 1 + (int32_t)(synth_mix((uint64_t)seq[n - 1] * 7 + (uint64_t)n) %
                                                                         (uint64_t)(s->cfg.n_vocab - 1));
    return ES_OK;
}

static es_status synth_target(void *user, int32_t server, const int32_t *seq, int32_t keep, int32_t n, int32_t lo,
                              int32_t slot, es__err *err) {
    synth *s = user;
    (void)keep;
    synth_worker *w = &s->w[1 + server];
    const es_status st = synth_sleep(w, synth_latency(s, w, s->cfg.t_target_first, s->cfg.t_target));
    if (st != ES_OK) return es__fail(err, st, "synthetic target %d: cancelled", server);
    const int32_t wrong = synth_first_wrong(&s->cfg, seq, n);
    for (int32_t q = lo; q < n; q++)
        s->rows[slot * (s->lookahead + 1) + (q - lo)] = q < wrong ? synth_truth(&s->cfg, q + 1) : -1 - q;
    return ES_OK;
}

static void synth_abort(void *user, int32_t who) {
    synth_worker *w = &((synth *)user)->w[1 + who];
    pthread_mutex_lock(&w->mu);
    w->abort = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void synth_abort_clear(void *user, int32_t who) {
    synth_worker *w = &((synth *)user)->w[1 + who];
    pthread_mutex_lock(&w->mu);
    w->abort = false;
    pthread_mutex_unlock(&w->mu);
}

static bool synth_app_cancelled(void *user, int32_t who) {
    synth_worker *w = &((synth *)user)->w[1 + who];
    pthread_mutex_lock(&w->mu);
    const bool app = w->took_app;
    pthread_mutex_unlock(&w->mu);
    return app;
}

/* The application's es_context_abort on worker `who`'s context (any thread); with
 * only_in_call, only while a call runs that has not looked at its requests yet. Returns whether
 * the request was made. */
static inline bool synth_app_abort(synth *s, int32_t who, bool only_in_call) {
    synth_worker *w = &s->w[1 + who];
    pthread_mutex_lock(&w->mu);
    const bool made = !only_in_call || w->sleeping;
    if (made) {
        w->app_abort = true;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return made;
}

static bool synth_is_eog(void *user, int32_t token) {
    const synth *s = user;
    return s->cfg.eog_every > 0 && token == 0;
}

/* Hard matching on the oracle's answers, as es__verify's greedy walk. */
static es_status synth_verify(void *user, int32_t slot, int32_t lo, const int32_t *chain, int32_t n_chain, int32_t n_rows,
                              int32_t root_pos, int32_t cap, int32_t *tokens, int32_t *n_tokens, es__err *err) {
    synth *s = user;
    const int32_t max_emit = cap < n_rows ? cap : n_rows;
    int32_t m = 0;
    for (int32_t j = 0; j < max_emit; j++) {
        const int32_t t = s->rows[slot * (s->lookahead + 1) + (root_pos + j - lo)];
        ES_RETURN_IF(t < 0, err, ES_ERR_BACKEND, "synthetic verify: the row of position %d was computed on a wrong prefix",
                     root_pos + j);
        tokens[m++] = t;
        if (j + 1 >= n_chain || chain[j + 1] != t || synth_is_eog(s, t)) break;
    }
    memcpy(s->decided + s->n_decided, tokens, sizeof(int32_t) * (size_t)m);
    s->n_decided += m;
    s->n_verify_calls++;
    *n_tokens = m;
    return ES_OK;
}

static inline void synth_init(synth *s, const synth_cfg *cfg, int32_t n_ctx, int32_t n_servers, int32_t lookahead) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->n_ctx = n_ctx;
    s->lookahead = lookahead;
    s->rows = calloc((size_t)es__dsi_slots(n_servers) * (size_t)(lookahead + 1), sizeof(int32_t));
    s->decided = calloc((size_t)n_ctx + 2, sizeof(int32_t));
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int i = 0; i < SYNTH_MAX_WORKERS; i++) {
        pthread_mutex_init(&s->w[i].mu, NULL);
        pthread_cond_init(&s->w[i].cv, &ca);
    }
    pthread_condattr_destroy(&ca);
}

static inline void synth_free(synth *s) {
    for (int i = 0; i < SYNTH_MAX_WORKERS; i++) {
        pthread_mutex_destroy(&s->w[i].mu);
        pthread_cond_destroy(&s->w[i].cv);
    }
    free(s->rows);
    free(s->decided);
}

static inline es__dsi_ops synth_ops(synth *s) {
    const es__dsi_ops ops = {s,           synth_draft,  synth_target, synth_abort, synth_abort_clear, synth_app_cancelled,
                             synth_verify, synth_is_eog};
    return ops;
}

/* ---- the baselines on the same forwards, sequential */

/* Non-SI: one target call per token. Returns the wall time of n tokens after the prompt. */
static inline double synth_nonsi_ms(synth *s, int32_t n_prompt, int32_t n) {
    synth_worker *w = &s->w[1];
    w->calls = 1; /* prefilled */
    const double t0 = synth_now_ms();
    for (int32_t i = 0; i < n; i++) synth_sleep(w, synth_latency(s, w, s->cfg.t_target_first, s->cfg.t_target));
    (void)n_prompt;
    return synth_now_ms() - t0;
}

/* SI (Leviathan et al.; the paper's Appendix D): draft k tokens one call each, verify them in one
 * target call, keep the accepted ones and the target's next token. *calls counts target calls. */
static inline double synth_si_ms(synth *s, int32_t n_prompt, int32_t n, int32_t k, int64_t *calls) {
    synth_worker *d = &s->w[0], *t = &s->w[1];
    d->calls = t->calls = 1;
    int32_t pos = n_prompt, done = 0;
    *calls = 0;
    const double t0 = synth_now_ms();
    while (done < n) {
        int32_t m = 0; /* leading drafts that are right */
        for (int32_t i = 0; i < k; i++) {
            synth_sleep(d, synth_latency(s, d, s->cfg.t_draft_first, s->cfg.t_draft));
            if (m == i && synth_guess(&s->cfg, pos + i) == synth_truth(&s->cfg, pos + i)) m++;
        }
        synth_sleep(t, synth_latency(s, t, s->cfg.t_target_first, s->cfg.t_target));
        (*calls)++;
        pos += m + 1;
        done += m + 1;
    }
    return synth_now_ms() - t0;
}

/* DSI through the scheduler: prompt truth[0..n_prompt) fed and read by every worker (not timed),
 * then steps until n tokens are decided. Returns the wall time of the steps, or a negative value
 * when a step failed; *exact says whether every decided token is the true one. */
static inline double synth_dsi_ms(synth *s, int32_t n_servers, int32_t n_prompt, int32_t n, es_dsi_stats *stats,
                                  bool *exact) {
    const es__dsi_cfg cfg = {n_servers, s->lookahead, s->n_ctx, es__dsi_slots(n_servers), false};
    const es__dsi_ops ops = synth_ops(s);
    es__err err = {ES_OK, ""};
    es__dsi_sched *d = NULL;
    *exact = false;
    if (es__dsi_sched_create(&cfg, &ops, NULL, &err, &d) != ES_OK) return -1.0;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    for (int32_t i = 0; i < n_prompt; i++) prompt[i] = synth_truth(&s->cfg, i);
    memcpy(s->decided, prompt, sizeof(int32_t) * (size_t)n_prompt);
    s->n_decided = n_prompt;
    es__dsi_sched_reset(d, prompt, n_prompt);
    es_status st = es__dsi_sched_prefill(d, &err);
    const double t0 = synth_now_ms();
    int32_t buf[64];
    while (st == ES_OK && s->n_decided < n_prompt + n) {
        int32_t got = 0;
        st = es__dsi_sched_step(d, 64, buf, &got, &err);
    }
    const double ms = synth_now_ms() - t0;
    es__dsi_sched_quiesce(d);
    if (stats) es__dsi_sched_stats(d, stats);
    es__dsi_sched_free(d);
    *exact = st == ES_OK && synth_first_wrong(&s->cfg, s->decided, s->n_decided) == s->n_decided;
    free(prompt);
    return st == ES_OK ? ms : -1.0;
}

#endif /* ES_TEST_DSI_SYNTH_H */
