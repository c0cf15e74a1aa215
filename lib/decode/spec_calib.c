/* spec_calib.c: the short calibration behind adaptive draft trees (spec_tune.h). At the first
 * step of an adaptive speculation object (after the prompt, which has warmed the contexts' caches
 * and pages), the target and a drafter run a few calls after the committed tokens, nothing
 * committed: a plain one-token call; a one-node call as the strategy makes it (with its streams)
 * and a pass of every stream; a four-node call and a pass of one stream; two drafter calls. About
 * six one-token calls of the target, counted in the step's time (5% of a 128-token run where
 * drafting does not pay: each is timed once, and the tuner guards against their noise,
 * spec_tune.c), so that the first steps are sized from this device's costs instead of from
 * guesses; the fit then follows every later call. Only timing depends on it: no token,
 * committed cache entry or sampler state. */
#include "spec.h"

#include <string.h>

#define HI 4 /* the larger tree timed: nodes cost about linearly from here on (docs/perf.md) */

/* ms of one forward of a chain of n tokens after ctx's committed ones (logits for every row). */
static es_status timed(es_spec *s, es_context *ctx, int32_t n, const es__call *call, double *ms) {
    int32_t tok[HI], pos[HI], dfs_start[HI], dfs_end[HI];
    uint8_t want[HI];
    const int32_t n_past = es_context_n_past(ctx);
    for (int32_t i = 0; i < n; i++) {
        tok[i] = s->hist[(size_t)i % s->n_hist]; /* any tokens: the sequence's own */
        pos[i] = n_past + i;
        dfs_start[i] = i;
        dfs_end[i] = n - 1;
        want[i] = 1;
    }
    const es_batch b = {n, tok, pos, dfs_start, dfs_end, want};
    const double t0 = es__time_now();
    const es_status st = es__forward(ctx, &b, call);
    *ms = (es__time_now() - t0) * 1e3;
    return st == ES_OK ? ES_OK : es__spec_fail_ctx(s, ctx, st, "calibration");
}

/* A pass of g streams of the last call's first token (each pass follows a call of its own: a
 * backend may keep what it computed for a node). */
static es_status stream_pass(es_spec *s, int32_t g, double *ms) {
    const float *logits;
    const double t0 = es__time_now();
    const es_status st = es__stream_logits(s->ctx, 0, g, &logits);
    *ms = (es__time_now() - t0) * 1e3;
    return st == ES_OK ? ES_OK : es__spec_fail_ctx(s, s->ctx, st, "calibration");
}

static es_status measure(es_spec *s, int32_t G, es_context *drafter, es__tuner_costs *c) {
    const es__call call = {G, s->p.prune_threshold}, *cp = G > 0 ? &call : NULL;
    ES_TRY(timed(s, s->ctx, 1, NULL, &c->plain_ms));
    ES_TRY(timed(s, s->ctx, 1, cp, &c->one_ms));
    if (G) ES_TRY(stream_pass(s, G, &c->pass_hi_ms));
    c->n_hi = ES__MIN(HI, es__spec_tree_room(s));
    if (c->n_hi >= 2) ES_TRY(timed(s, s->ctx, c->n_hi, cp, &c->hi_ms));
    if (c->n_hi >= 2 && G) ES_TRY(stream_pass(s, 1, &c->pass1_ms));
    c->g_hi = G;
    if (drafter) { /* twice, the faster counts: a drafter is cheap, and its cost decides whether to draft */
        double d2;
        ES_TRY(timed(s, drafter, 1, NULL, &c->draft_ms));
        ES_TRY(timed(s, drafter, 1, NULL, &d2));
        c->draft_ms = ES__MIN(c->draft_ms, d2);
    }
    return ES_OK;
}

es_status es__spec_calibrate_costs(es_spec *s, int32_t streams, es_context *drafter) {
    memset(&s->calib, 0, sizeof s->calib);
    if (!s->tune.adaptive || s->n_hist == 0 || es__spec_tree_room(s) < 2) return ES_OK;
    const int32_t n_past = es_context_n_past(s->ctx), d_past = drafter ? es_context_n_past(drafter) : 0;
    const double t0 = es__time_now();
    es_status st = measure(s, streams, drafter, &s->calib);
    es_truncate(s->ctx, n_past);
    if (drafter) es_truncate(drafter, d_past);
    s->calib_ms = (es__time_now() - t0) * 1e3;
    if (st == ES_OK) es__tuner_seed(&s->tune, &s->calib);
    return st;
}
