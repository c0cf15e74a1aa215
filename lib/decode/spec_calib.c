/* spec_calib.c: the short calibration behind adaptive draft trees (spec_tune.h). When an
 * adaptive speculation object is made, the target (and a drafter) run a handful of calls on the
 * empty cache, nothing committed: a plain one-token call (twice: a new context's first call
 * touches its caches and pages, 5-25 ms on the CPU backend here, which the prompt would pay
 * otherwise), three one-node calls as the strategy makes them (with its streams) each followed
 * by a stream pass (of every stream, of one, of every stream), a four-node call (twice), a drafter
 * call (twice). The best of the repeated timings counts. About thirteen one-token calls, so that the first
 * steps are sized from this device's costs instead of from guesses; the fit then follows every
 * later call. Only timing depends on it: no token, cache entry or sampler state. */
#include "spec.h"

#include <string.h>

#define HI 4 /* the larger tree timed: nodes cost about linearly from here on (docs/perf.md) */

/* ms of one forward of a chain of n tokens at positions 0..n-1 (logits for every row), with call. */
static es_status timed(es_spec *s, es_context *ctx, int32_t n, const es__call *call, double *ms) {
    int32_t tok[HI], pos[HI], dfs_start[HI], dfs_end[HI];
    uint8_t want[HI];
    for (int32_t i = 0; i < n; i++) tok[i] = i % s->caps.n_vocab, pos[i] = dfs_start[i] = i, dfs_end[i] = n - 1, want[i] = 1;
    const es_batch b = {n, tok, pos, dfs_start, dfs_end, want};
    const double t0 = es__time_now();
    const es_status st = es__forward(ctx, &b, call);
    *ms = (es__time_now() - t0) * 1e3;
    return st == ES_OK ? ES_OK : es__spec_fail_ctx(s, ctx, st, "calibration");
}

/* The faster of two one-token calls (the first may carry one-time costs: scratch, caches). */
static es_status one_call(es_spec *s, es_context *ctx, const es__call *call, double *ms) {
    double t1, t2;
    ES_TRY(timed(s, ctx, 1, call, &t1));
    ES_TRY(timed(s, ctx, 1, call, &t2));
    *ms = ES__MIN(t1, t2);
    return ES_OK;
}

static es_status stream_pass(es_spec *s, int32_t g, double *ms) {
    const float *logits;
    const double t0 = es__time_now();
    const es_status st = es__stream_logits(s->ctx, 0, g, &logits);
    *ms = (es__time_now() - t0) * 1e3;
    return st == ES_OK ? ES_OK : es__spec_fail_ctx(s, s->ctx, st, "calibration");
}

/* A one-node call with the strategy's streams, then a pass of g of its streams (the pass may keep
 * what it computed for the node: each pass follows a call of its own). */
static es_status call_and_pass(es_spec *s, const es__call *call, int32_t g, double *call_ms, double *pass_ms) {
    double t;
    ES_TRY(timed(s, s->ctx, 1, call, &t));
    *call_ms = ES__MIN(*call_ms, t);
    if (g > 0) {
        ES_TRY(stream_pass(s, g, &t));
        *pass_ms = ES__MIN(*pass_ms, t);
    }
    return ES_OK;
}

static es_status measure(es_spec *s, int32_t streams, es_context *drafter, es__tuner_costs *c) {
    const es__call call = {streams, s->p.prune_threshold}, *cp = streams > 0 ? &call : NULL;
    double first, last;
    ES_TRY(timed(s, s->ctx, 1, NULL, &first)); /* the context's first call: caches, pages */
    /* one-node calls, each followed by a pass of every stream, of one, of every stream: the
     * first pass may size the backend's stream scratch */
    const int32_t G = streams;
    double one = 1e300, p1 = 1e300, pg = 1e300;
    ES_TRY(call_and_pass(s, cp, G, &one, &pg));
    ES_TRY(call_and_pass(s, cp, G ? 1 : 0, &one, &p1));
    ES_TRY(call_and_pass(s, cp, G, &one, &pg));
    c->one_ms = one;
    if (G) c->g_hi = G, c->pass1_ms = p1, c->pass_hi_ms = pg;
    c->n_hi = ES__MIN(HI, es__spec_tree_room(s));
    if (c->n_hi >= 2) { /* twice: a device may compile this tile size at its first dispatch */
        double t1, t2;
        ES_TRY(timed(s, s->ctx, c->n_hi, cp, &t1));
        ES_TRY(timed(s, s->ctx, c->n_hi, cp, &t2));
        c->hi_ms = ES__MIN(t1, t2);
    }
    ES_TRY(timed(s, s->ctx, 1, NULL, &last)); /* a plain call again, now as warm as the others */
    c->plain_ms = ES__MIN(first, last);
    if (drafter) ES_TRY(one_call(s, drafter, NULL, &c->draft_ms));
    return ES_OK;
}

es_status es__spec_calibrate_costs(es_spec *s, int32_t streams, es_context *drafter) {
    memset(&s->calib, 0, sizeof s->calib);
    if (!s->tune.adaptive || es__spec_tree_room(s) < 2 || es_context_n_past(s->ctx) != 0 ||
        (drafter && es_context_n_past(drafter) != 0))
        return ES_OK;
    const double t0 = es__time_now();
    es_status st = measure(s, streams, drafter, &s->calib);
    es_truncate(s->ctx, 0);
    if (drafter) es_truncate(drafter, 0);
    s->calib_ms = (es__time_now() - t0) * 1e3;
    if (st == ES_OK) es__tuner_seed(&s->tune, &s->calib);
    return st;
}
