/* test_dsi_sched.c: DSI's scheduler under stress, on the synthetic harness (dsi_synth.h): random
 * numbers of servers and lookaheads, random latencies (every call's own), random acceptance
 * rates, end-of-text tokens, callers that take 1..64 tokens a step, and now and then a rewind
 * (quiesce, the decided sequence cut back, reset) or a later turn fed (reset, prefill) while
 * work is under way. Thousands of steps: every step returns (no deadlock; meson's timeout would
 * say otherwise) with at least one token, every decided token is the true one (none lost, none
 * twice, none decided from a row computed on a rejected prefix: the oracle refuses those), and
 * work built on rejected drafts is preempted. Then the harness's own sanity: with a perfect
 * drafter and enough servers DSI runs about as fast as the drafter; with a useless one about as
 * fast as the target alone; a worker's failure is reported once by the next step; and the
 * application's abort ends a step even when it lands on a call the scheduler preempts. */
#include "dsi_synth.h"

#include "../test.h"

typedef struct totals {
    int64_t steps, tokens, preempted, jobs, rewinds;
} totals;

/* One run: n tokens (or until the context is nearly full) after a prompt, with rewinds and
 * turns now and then; checks every step. */
static void stress_run(uint64_t seed, totals *tot) {
    test_rng r = {seed};
    synth_cfg c;
    memset(&c, 0, sizeof c);
    c.t_target = 0.2 + 1.5 * (double)(test_rng_u64(&r) % 1000) / 1000.0;
    c.t_draft = c.t_target * (0.05 + 0.9 * (double)(test_rng_u64(&r) % 1000) / 1000.0);
    c.t_target_first = 2.0 * c.t_target;
    c.t_draft_first = 2.0 * c.t_draft;
    c.jitter = 0.9;
    const double accepts[5] = {0.0, 0.3, 0.7, 0.95, 1.0};
    c.accept = accepts[test_rng_u64(&r) % 5];
    c.n_vocab = 50;
    c.eog_every = test_rng_u64(&r) % 3 == 0 ? 25 : 0;
    c.seed = seed * 977 + 1;
    const int32_t n_servers = 1 + (int32_t)(test_rng_u64(&r) % 8), K = 1 + (int32_t)(test_rng_u64(&r) % 15);
    const int32_t n_prompt = 1 + (int32_t)(test_rng_u64(&r) % 40), n = 250 + (int32_t)(test_rng_u64(&r) % 250);
    const int32_t n_ctx = n_prompt + n + (int32_t)(test_rng_u64(&r) % 3) * 8; /* tight: drafts reach the end */
    synth s;
    synth_init(&s, &c, n_ctx, n_servers, K);
    const es__dsi_cfg cfg = {n_servers, K, n_ctx, es__dsi_slots(n_servers), test_rng_u64(&r) % 2 == 0};
    const es__dsi_ops ops = synth_ops(&s);
    es__err err = {ES_OK, ""};
    es__dsi_sched *d = NULL;
    CHECK_OK(es__dsi_sched_create(&cfg, &ops, NULL, &err, &d));
    if (!d) {
        synth_free(&s);
        return;
    }
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)(n_ctx + 2));
    for (int32_t i = 0; i < n_ctx + 2; i++) seq[i] = synth_truth(&c, i);
    memcpy(s.decided, seq, sizeof(int32_t) * (size_t)n_prompt);
    s.n_decided = n_prompt;
    es__dsi_sched_reset(d, seq, n_prompt);
    if (test_rng_u64(&r) % 2) CHECK_OK(es__dsi_sched_prefill(d, &err)); /* else the jobs read the prompt */
    bool ok = true;
    es_dsi_stats st;
    while (ok && s.n_decided < n_ctx) {
        int32_t buf[64], got = 0;
        const int32_t cap = test_rng_u64(&r) % 4 == 0 ? 1 + (int32_t)(test_rng_u64(&r) % 3) : 64;
        const int32_t before = s.n_decided;
        const es_status rc = es__dsi_sched_step(d, cap, buf, &got, &err);
        CHECK_OK(rc);
        ok = rc == ES_OK && got >= 1 && got <= cap && s.n_decided == before + got;
        CHECKF(ok, "step: %d tokens for cap %d (decided %d -> %d)", got, cap, before, s.n_decided);
        for (int32_t i = 0; ok && i < got; i++) {
            ok = buf[i] == seq[before + i];
            CHECKF(ok, "position %d: decided %d, the true token is %d (%d servers, lookahead %d, accept %.2f)", before + i,
                   buf[i], seq[before + i], n_servers, K, c.accept);
        }
        tot->steps++;
        tot->tokens += got;
        const uint64_t event = test_rng_u64(&r) % 40;
        if (ok && event == 0 && s.n_decided > n_prompt + 4) { /* a rewind: the caller stopped earlier */
            es__dsi_sched_quiesce(d);
            s.n_decided -= 1 + (int32_t)(test_rng_u64(&r) % 4);
            es__dsi_sched_reset(d, seq, s.n_decided);
            tot->rewinds++;
        } else if (ok && event == 1 && s.n_decided < n_ctx) { /* a turn: the caller gives tokens */
            es__dsi_sched_quiesce(d);
            const int32_t more = ES__MIN(1 + (int32_t)(test_rng_u64(&r) % 5), n_ctx - s.n_decided);
            memcpy(s.decided + s.n_decided, seq + s.n_decided, sizeof(int32_t) * (size_t)more);
            s.n_decided += more;
            es__dsi_sched_reset(d, seq, s.n_decided);
            CHECK_OK(es__dsi_sched_prefill(d, &err));
            tot->rewinds++;
        }
    }
    es__dsi_sched_stats(d, &st);
    tot->preempted += st.n_jobs_preempted;
    tot->jobs += st.n_jobs;
    CHECK(st.n_targets == n_servers && st.n_jobs >= 1 && st.n_jobs_preempted <= st.n_jobs);
    CHECK(st.n_drafts_dropped <= st.n_draft_calls);
    if (seed % 7 == 0) es__dsi_sched_quiesce(d); /* else freed with work under way */
    es__dsi_sched_free(d);
    free(seq);
    synth_free(&s);
}

/* A failure in a worker's call is reported by the next step, once; the scheduler goes on. */
static int fail_at = -1, calls_seen;
static es_status failing_target(void *user, int32_t server, const int32_t *seq, int32_t keep, int32_t n, int32_t lo,
                                int32_t slot, es__err *err) {
    if (__atomic_add_fetch(&calls_seen, 1, __ATOMIC_SEQ_CST) == fail_at)
        return es__fail(err, ES_ERR_BACKEND, "synthetic target %d: device lost", server);
    return synth_target(user, server, seq, keep, n, lo, slot, err);
}

/* A scheduler of n_servers and lookahead K on the harness s (400 positions) with ops, its
 * sequence the oracle's first four tokens. */
static es__dsi_sched *sched_on(synth *s, const es__dsi_ops *ops, int32_t n_servers, int32_t K) {
    const es__dsi_cfg cfg = {n_servers, K, 400, es__dsi_slots(n_servers), false};
    es__err err = {ES_OK, ""};
    es__dsi_sched *d = NULL;
    CHECK_OK(es__dsi_sched_create(&cfg, ops, NULL, &err, &d));
    int32_t prompt[4];
    for (int i = 0; i < 4; i++) prompt[i] = synth_truth(&s->cfg, i);
    memcpy(s->decided, prompt, sizeof prompt);
    s->n_decided = 4;
    if (d) es__dsi_sched_reset(d, prompt, 4);
    return d;
}

/* One run in which target call number `at` fails: returns how many steps reported it. */
static int run_failing(int at) {
    synth_cfg c = {0.3, 0.3, 0.1, 0.1, 0.0, 0.5, 50, 0, 77};
    synth s;
    synth_init(&s, &c, 400, 2, 3);
    es__dsi_ops ops = synth_ops(&s);
    ops.target = failing_target;
    es__err err = {ES_OK, ""};
    es__dsi_sched *d = sched_on(&s, &ops, 2, 3);
    calls_seen = 0;
    fail_at = at;
    int failures = 0;
    for (int i = 0; i < 60; i++) {
        int32_t buf[8], got = 0;
        es_status st = es__dsi_sched_step(d, 8, buf, &got, &err);
        if (st != ES_OK) {
            failures++;
            CHECK(st == ES_ERR_BACKEND && got == 0 && strstr(err.msg, "device lost") != NULL);
        }
    }
    CHECK(synth_first_wrong(&c, s.decided, s.n_decided) == s.n_decided && s.n_decided > 60);
    es__dsi_sched_free(d);
    synth_free(&s);
    return failures;
}

/* A failing target call is reported once by the step that needed it, and decoding goes on. A
 * call that fails after its job was preempted is rightly not reported (nothing needed it), and
 * which job a call number falls to depends on the timing: so the failure moves to later calls
 * until one is reported. */
static void test_failure(void) {
    int reported = 0;
    for (int at = 5; at < 25 && !reported; at++) {
        const int failures = run_failing(at);
        CHECKF(failures <= 1, "call %d failed: %d failures reported", at, failures);
        reported = failures;
    }
    CHECK(reported == 1);
    synth_cfg c = {0.3, 0.3, 0.1, 0.1, 0.0, 0.5, 50, 0, 77};
    synth s;
    synth_init(&s, &c, 400, 2, 3);
    es__dsi_ops ops = synth_ops(&s);
    es__err err = {ES_OK, ""};
    /* bad configurations */
    es__dsi_sched *bad = (es__dsi_sched *)1;
    const es__dsi_cfg none = {0, 3, 400, 4, false};
    CHECK_FAILS(es__dsi_sched_create(&none, &ops, NULL, &err, &bad), ES_ERR_INVALID_ARGUMENT, "0 servers");
    CHECK(bad == NULL);
    synth_free(&s);
}

/* The scheduler's preemption, with the application's es_context_abort landing on the same call
 * the first time that call is still running: the call takes both requests. */
static int app_aborts;
static void abort_with_app(void *user, int32_t who) {
    if (app_aborts == 0 && synth_app_abort(user, who, true)) app_aborts++;
    synth_abort(user, who);
}

/* The application's abort ends the generation even when the call it cancels was preempted by
 * the scheduler at the same moment (that call's result is dropped, and the application's request
 * went with it before the scheduler told the two apart): one step fails with ES_ERR_CANCELLED,
 * and the steps after it go on exactly. */
static void test_app_abort(void) {
    synth_cfg c = {0.5, 0.5, 0.1, 0.1, 0.0, 0.3, 50, 0, 91};
    synth s;
    synth_init(&s, &c, 400, 3, 4);
    es__dsi_ops ops = synth_ops(&s);
    ops.abort = abort_with_app;
    es__err err = {ES_OK, ""};
    es__dsi_sched *d = sched_on(&s, &ops, 3, 4);
    app_aborts = 0;
    int cancelled = 0;
    for (int i = 0; i < 80; i++) {
        int32_t buf[8], got = 0;
        const es_status st = es__dsi_sched_step(d, 8, buf, &got, &err);
        if (st != ES_OK) {
            cancelled++;
            CHECKF(st == ES_ERR_CANCELLED && got == 0, "step %d: %s", i, err.msg);
        }
    }
    CHECKF(app_aborts > 0, "no call was preempted");
    CHECKF(cancelled == 1, "the application's abort ended %d steps", cancelled);
    CHECK(synth_first_wrong(&c, s.decided, s.n_decided) == s.n_decided && s.n_decided > 80);
    es__dsi_sched_free(d);
    synth_free(&s);
}

/* What the pipelining is for, with bounds loose enough for a loaded machine and ThreadSanitizer
 * (the measured numbers are docs/perf.md's, not a test's): a perfect drafter with servers enough
 * runs at least twice as fast as the target alone (SI with the same drafter could not: 4.5 ms a
 * token at best); with a useless one the target's own chain of calls still sets the pace. */
static void test_pace(void) {
    const int32_t n = 60;
    {
        synth_cfg c = {8.0, 8.0, 1.0, 1.0, 0.0, 1.0, 50, 0, 5};
        synth s;
        synth_init(&s, &c, 256, 8, 1);
        bool exact = false;
        const double ms = synth_dsi_ms(&s, 8, 5, n, NULL, &exact);
        CHECK(exact);
        printf("perfect drafter: %d tokens in %.1f ms (target alone: %.1f ms, drafter alone %.1f ms)\n", n, ms, n * 8.0,
               n * 1.0);
        CHECKF(ms > 0 && ms < n * 8.0 / 2.0, "%.1f ms", ms);
        synth_free(&s);
    }
    {
        synth_cfg c = {4.0, 4.0, 1.0, 1.0, 0.0, 0.0, 50, 0, 6};
        synth s;
        synth_init(&s, &c, 256, 4, 1);
        bool exact = false;
        es_dsi_stats st;
        const double ms = synth_dsi_ms(&s, 4, 5, n, &st, &exact);
        CHECK(exact);
        printf("useless drafter: %d tokens in %.1f ms (target alone: %.1f ms), %lld of %lld jobs preempted\n", n, ms,
               n * 4.0, (long long)st.n_jobs_preempted, (long long)st.n_jobs);
        CHECKF(ms > 0 && ms < n * 4.0 * 1.5, "%.1f ms", ms);
        CHECK(st.n_jobs_preempted > 0);
        synth_free(&s);
    }
}

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 24;
    totals tot = {0, 0, 0, 0, 0};
    for (int i = 0; i < runs; i++) stress_run(1000 + (uint64_t)i, &tot);
    printf("stress: %d runs, %lld steps, %lld tokens, %lld rewinds or turns, %lld of %lld jobs preempted\n", runs,
           (long long)tot.steps, (long long)tot.tokens, (long long)tot.rewinds, (long long)tot.preempted,
           (long long)tot.jobs);
    CHECKF(tot.steps >= 100 * runs, "only %lld steps", (long long)tot.steps);
    CHECK(tot.preempted > 0 && tot.rewinds > 0);
    test_failure();
    test_app_abort();
    test_pace();
    TEST_MAIN_END();
}
