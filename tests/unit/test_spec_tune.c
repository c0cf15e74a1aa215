/* test_spec_tune.c: the cost model and calibration behind adaptive draft trees, and the tree
 * builder's cost-aware stop: exact fits on exact timings, calibration that follows the observed
 * acceptance, stream counts that go to all streams when drafts are accepted and nodes are cheap
 * and to none when they are not, and a best-first tree that stops where the rule says. */
#include "decode/spec_tune.h"

#include "../test.h"

#include <math.h>

static void test_fit(void) {
    es__tuner t;
    es__tuner_init(&t, true);
    double a, b;
    CHECK(!es__tuner_cost(&t, &a, &b));
    for (int i = 0; i < 40; i++) es__tuner_observe_call(&t, 1 + i % 7, 2.0 + 0.5 * (1 + i % 7));
    CHECK(es__tuner_cost(&t, &a, &b));
    CHECKF(fabs(a - 2.0) < 1e-6 && fabs(b - 0.5) < 1e-6, "fit a %g b %g", a, b);
    /* calls of one size only: the slope is unknown */
    es__tuner_init(&t, true);
    for (int i = 0; i < 40; i++) es__tuner_observe_call(&t, 5, 3.0);
    CHECK(!es__tuner_cost(&t, &a, &b));
    /* not adaptive: never a fit */
    es__tuner_init(&t, false);
    for (int i = 0; i < 40; i++) es__tuner_observe_call(&t, 1 + i % 3, 1.0 + i % 3);
    CHECK(!es__tuner_cost(&t, &a, &b));
    CHECK(es__tuner_streams(&t, 4, 2, 32) == 4);
}

/* One-time costs do not steer the fit: a size's first call is not fitted, a later spike counts
 * twice the prediction at most, and trees grow to twice the largest size timed. */
static void test_warmup_and_spikes(void) {
    es__tuner t;
    es__tuner_init(&t, true);
    double a, b;
    CHECK(es__tuner_room(&t) == 2);
    es__tuner_observe_call(&t, 3, 40.0); /* first calls of each size: compiling, say */
    CHECK(es__tuner_room(&t) == 3);
    es__tuner_observe_call(&t, 2, 30.0);
    for (int i = 0; i < 6; i++) es__tuner_observe_call(&t, 2 + i % 2, 2.0 + 0.5 * (2 + i % 2));
    CHECK(es__tuner_cost(&t, &a, &b));
    CHECKF(fabs(a - 2.0) < 1e-6 && fabs(b - 0.5) < 1e-6, "fit a %g b %g", a, b);
    CHECK(es__tuner_room(&t) == 6);
    es__tuner_observe_call(&t, 3, 350.0); /* a spike: counts as 7 ms, twice the predicted 3.5 */
    CHECK(es__tuner_cost(&t, &a, &b));
    CHECKF(a + 3.0 * b < 5.0, "after one spike a %g b %g", a, b); /* unclipped: 96 */
    es__tuner_observe_call(&t, 17, 10.5);
    CHECK(es__tuner_room(&t) == 34);
    /* stream passes: the first of each width is not fitted either */
    es__tuner_observe_streams(&t, 4, 30.0);
    CHECK(t.gw == 0.0);
    for (int i = 0; i < 4; i++) es__tuner_observe_streams(&t, 4, 2.0);
    es__tuner_observe_streams(&t, 4, 90.0);
    CHECKF(t.gt / t.gs < 0.7, "stream cost %g ms per stream", t.gt / t.gs);
    /* fixed trees: no limit */
    es__tuner_init(&t, false);
    CHECK(es__tuner_room(&t) == INT32_MAX);
}

/* A chain tree of depth n: node i at depth i. */
static void chain(es__tree *tr, int32_t n) {
    es__tree_root(tr, 1, 0);
    for (int32_t i = 1; i < n; i++) {
        tr->token[i] = i;
        tr->parent[i] = i - 1;
        tr->depth[i] = i;
        tr->dfs_start[i] = i;
        tr->rank[i] = 0;
    }
    for (int32_t i = 0; i < n; i++) tr->dfs_end[i] = n - 1;
    tr->n = n;
    tr->max_depth = n - 1;
}

static void test_calibration(void) {
    es__tuner t;
    es__tuner_init(&t, true);
    es__err err;
    es__tree tr;
    CHECK_OK(es__tree_init(&tr, 8, NULL, &err));
    chain(&tr, 4);
    float raw[4] = {0.0f, logf(0.9f), logf(0.9f), logf(0.9f)};
    int32_t path[4] = {0, 1, 2, 3};
    /* drafts that look confident (0.9) but are accepted at depth 1 a quarter of the time only */
    for (int i = 0; i < 400; i++) es__tuner_observe_tree(&t, &tr, path, i % 4 == 0 ? 2 : 1, -1, raw);
    float p1 = expf(es__tuner_accept(&t, 1, logf(0.9f)));
    CHECKF(fabs(p1 - 0.25f) < 0.02f, "calibrated depth-1 acceptance %g", (double)p1);
    /* an unseen probability bin falls back to the draft probability itself */
    CHECK(fabsf(expf(es__tuner_accept(&t, 3, logf(0.45f))) - 0.45f) < 1e-5f);
    CHECK(es__tuner_accept(&t, 1, -INFINITY) == -INFINITY);
    /* the per-depth counts decay, so recent behaviour counts: reach is what was seen */
    CHECK(t.hit[0] / t.tested[0] > 0.2 && t.hit[0] / t.tested[0] < 0.3);
    /* a walk stopped by the emission cap on a matching child counts it as accepted */
    es__tuner u;
    es__tuner_init(&u, true);
    es__tuner_observe_tree(&u, &tr, path, 1, 1, raw);
    CHECK(u.hit[0] == 1.0 && u.tested[0] == 1.0);
    es__tree_free(&tr, NULL);
}

static void test_streams(void) {
    es__err err;
    es__tree tr;
    CHECK_OK(es__tree_init(&tr, 8, NULL, &err));
    chain(&tr, 5);
    float raw[5] = {0.0f, -0.1f, -0.1f, -0.1f, -0.1f};
    int32_t path[5] = {0, 1, 2, 3, 4};
    /* every draft accepted, nodes nearly free: draft from every stream */
    es__tuner t;
    es__tuner_init(&t, true);
    CHECK(es__tuner_streams(&t, 4, 1, 32) == 1); /* costs unknown: the cheapest draft that measures */
    for (int i = 0; i < 63; i++) {
        es__tuner_observe_call(&t, 1 + i % 5, 10.0 + 0.1 * (1 + i % 5));
        es__tuner_observe_streams(&t, 4, 0.4);
        es__tuner_observe_tree(&t, &tr, path, 5, -1, raw);
        es__tuner_chose(&t, es__tuner_streams(&t, 4, 1, 32));
    }
    CHECK(!es__tuner_explores_next(&t) && es__tuner_streams(&t, 4, 1, 32) == 4);
    /* nothing ever accepted and nodes as dear as the call: plain steps (exploration aside) */
    es__tuner_init(&t, true);
    int plain = 0, explored = 0;
    for (int i = 0; i < 1000; i++) {
        es__tuner_observe_call(&t, 1 + i % 5, 1.0 * (1 + i % 5));
        es__tuner_observe_streams(&t, 4, 2.0);
        es__tuner_observe_tree(&t, &tr, path, 1, -1, raw);
        const int32_t g = es__tuner_streams(&t, 4, 2, 32);
        plain += g == 0;
        explored += g == 4 && i > 12;
        es__tuner_chose(&t, g);
    }
    /* not plain: the calls before the fit (sizes 1..5 timed twice) and the explorations. The
     * first comes after 32 calls (costs unknown before); then an exploration's measured cost,
     * a 5-node call and a 4-stream pass, 6 calls beyond a plain one, sets the interval (6 /
     * EXPLORE_SHARE = 200 calls), doubled while each confirms that drafting does not pay: at
     * about 32 and 432 calls, instead of every 32 (31 of them) */
    CHECKF(plain >= 985, "%d of 1000 decisions were plain steps", plain);
    CHECKF(explored == 2, "%d explorations in 1000 calls", explored);
    CHECKF(t.explore_base >= 200 && t.explore_base <= 201, "exploration interval %d", t.explore_base);
    /* once drafting pays again the explorations come at the base interval again, which is now
     * the shortest (an exploration costs 0.08 calls more than a plain one) */
    for (int i = 0; i < 200; i++) {
        es__tuner_observe_call(&t, 1 + i % 5, 10.0 + 0.1 * (1 + i % 5));
        es__tuner_observe_streams(&t, 4, 0.4);
        es__tuner_observe_tree(&t, &tr, path, 5, -1, raw);
        es__tuner_chose(&t, es__tuner_streams(&t, 4, 1, 32));
    }
    CHECKF(t.explore_every == 8 && t.explore_base == 8, "explorations every %d calls after drafting paid (base %d)",
           t.explore_every, t.explore_base);
    es__tree_free(&tr, NULL);
}

/* Decisions from injected costs (what spec_calib.c measures at es_spec_create), in ms with a plain
 * call of 1 ms: the seeded fit is exact, the first step explores, and then the choice follows the
 * costs and the acceptance seen: plain calls where nodes and stream passes are dear, every stream
 * where they are cheap, and explorations as far apart as their measured cost says. */
static es__tuner seeded(double one_ms, double hi_ms, double pass1, double pass4, double draft_ms) {
    es__tuner t;
    es__tuner_init(&t, true);
    const es__tuner_costs c = {1.0, one_ms, 4, hi_ms, pass4 > 0.0 ? 4 : 0, pass1, pass4, draft_ms};
    es__tuner_seed(&t, &c);
    return t;
}

/* n steps of the stream strategy's loop: accepted at depth 1 in 7 of 10 steps, then to the end
 * of a 5-node chain; the calls cost exactly what the seeded fit says. Returns plain choices. */
static int run_streams(es__tuner *t, es__tree *tr, int n, int *explored) {
    float raw[5] = {0.0f, -0.1f, -0.1f, -0.1f, -0.1f};
    int32_t path[5] = {0, 1, 2, 3, 4};
    double a, b;
    CHECK(es__tuner_cost(t, &a, &b));
    int plain = 0;
    *explored = 0;
    for (int i = 0; i < n; i++) {
        const bool explore = t->steps >= t->explore_at;
        const int32_t g = es__tuner_streams(t, 4, 2, 32);
        es__tuner_chose(t, g);
        plain += g == 0;
        *explored += explore && g == 4;
        es__tuner_observe_call(t, g > 0 ? 4 : 1, a + b * (g > 0 ? 4 : 1));
        if (g == 0) es__tuner_observe_plain(t, 1.0);
        if (g > 0) es__tuner_observe_tree(t, tr, path, i % 10 < 7 ? 5 : 1, -1, raw); /* plain: a root alone */
    }
    return plain;
}

static void test_seeded_costs(void) {
    es__err err;
    es__tree tr;
    CHECK_OK(es__tree_init(&tr, 8, NULL, &err));
    chain(&tr, 5);
    /* dear: a node adds half a call, a stream pass 0.9 to 1.5 calls (the default model on this
     * CPU, about): speculation does not pay, so plain calls, exploring now and then */
    es__tuner t = seeded(1.0, 2.5, 0.9, 1.5, 0.0);
    double a, b, node, p1, pmax, dr;
    CHECK(es__tuner_cost(&t, &a, &b));
    CHECKF(fabs(a - 0.5) < 1e-9 && fabs(b - 0.5) < 1e-9, "seeded fit a %g b %g", a, b);
    CHECK(es__tuner_units(&t, &node, &p1, &pmax, &dr));
    CHECKF(fabs(node - 0.5) < 1e-9 && fabs(p1 - 0.9) < 1e-9 && fabs(pmax - 1.5) < 1e-9 && dr == 0.0,
           "units node %g pass %g / %g draft %g", node, p1, pmax, dr);
    CHECK(es__tuner_room(&t) == 8);
    /* an exploration costs a 4-node call and a 4-stream pass: 0.5 + 2 + 1.5 - 1 = 3 calls more
     * than a plain call, so one per 100 calls keeps it at 3% of plain decoding's time */
    CHECKF(t.explore_base >= 100 && t.explore_base <= 101, "exploration interval %d", t.explore_base);
    CHECK(es__tuner_streams(&t, 4, 2, 32) == 4); /* the first step explores: acceptance unknown */
    int explored = 0;
    const int plain = run_streams(&t, &tr, 400, &explored);
    CHECKF(plain >= 396 && explored == 2, "%d plain choices, %d explorations in 400 steps", plain, explored);
    CHECK(es__tuner_streams(&t, 4, 2, 32) == 0);
    /* cheap: a node 0.05 of a call, a pass 0.1 to 0.16 (a memory-bound model on a GPU, say):
     * every stream, and explorations 11 calls apart (0.95 + 0.2 + 0.16 - 1 = 0.31 calls each) */
    t = seeded(1.0, 1.15, 0.1, 0.16, 0.0);
    CHECKF(t.explore_base >= 10 && t.explore_base <= 11, "exploration interval %d", t.explore_base);
    run_streams(&t, &tr, 50, &explored);
    CHECK(es__tuner_streams(&t, 4, 2, 32) == 4);
    CHECK(es__tuner_streams(&t, 4, 2, 3) >= 1); /* a 3-node cap: still worth drafting */
    /* a spike in the calibration's plain call (47 ms against 1 for a one-node call that does
     * more) or its one-stream pass does not make drafts look cheap: both are capped by what
     * does more work */
    es__tuner_init(&t, true);
    const es__tuner_costs spiky = {47.0, 1.0, 4, 2.5, 4, 26.0, 1.5, 0.0};
    es__tuner_seed(&t, &spiky);
    CHECK(es__tuner_units(&t, &node, &p1, &pmax, &dr));
    CHECKF(fabs(node - 0.5) < 1e-6 && p1 <= 1.5 + 1e-4 && pmax <= 1.5 + 1e-4, "units after spikes: node %g pass %g / %g",
           node, p1, pmax);
    CHECK(es__tuner_streams(&t, 4, 2, 32) == 4); /* the first step explores */
    es__tuner_chose(&t, 4);
    es__tuner_observe_call(&t, 4, 2.5);
    CHECK(es__tuner_streams(&t, 4, 2, 32) == 0);
    /* later timings that say nodes and passes are free (noise: n = 1 and 4 at the same time)
     * go no lower than half what the calibration measured */
    t = seeded(1.0, 2.5, 0.9, 1.5, 0.0);
    for (int i = 0; i < 200; i++) {
        es__tuner_observe_call(&t, 1 + 3 * (i % 2), 2.0);
        es__tuner_observe_streams(&t, 1 + 3 * (i % 2), 0.01);
    }
    CHECK(es__tuner_units(&t, &node, &p1, &pmax, &dr));
    CHECKF(node >= 0.25 - 1e-9 && pmax >= 0.75 - 1e-9, "units after noise: node %g, pass %g / %g", node, p1, pmax);
    /* not seeded (bad costs are ignored): the old start, 2 or 3 nodes and one stream */
    es__tuner u;
    es__tuner_init(&u, true);
    const es__tuner_costs bad = {0.0, 1.0, 4, 2.0, 0, 0.0, 0.0, 0.0};
    es__tuner_seed(&u, &bad);
    CHECK(!es__tuner_cost(&u, &a, &b) && es__tuner_streams(&u, 4, 2, 32) == 1 && es__tuner_room(&u) == 2);
    es__tree_free(&tr, NULL);
}

/* A draft-model step drafts only where one draft at the acceptance seen pays for a drafter call
 * and a node; else plain calls (the first step and the explorations aside). */
static void test_seeded_draft(void) {
    es__err err;
    es__tree tr;
    CHECK_OK(es__tree_init(&tr, 8, NULL, &err));
    chain(&tr, 2);
    float raw[2] = {0.0f, -0.1f};
    int32_t path[2] = {0, 1};
    for (int cheap = 0; cheap < 2; cheap++) {
        /* nodes at 0.5 of a call: 1.7 tokens for 1.8 calls, no; at 0.05: 1.7 for 1.35, yes */
        es__tuner t = seeded(1.0, cheap ? 1.15 : 2.5, 0.0, 0.0, 0.3);
        CHECK(es__tuner_draft_pays(&t)); /* the first step explores */
        int drafts = 0;
        for (int i = 0; i < 300; i++) {
            const bool d = es__tuner_draft_pays(&t);
            es__tuner_chose(&t, d ? 1 : 0);
            drafts += d;
            if (d) es__tuner_observe_tree(&t, &tr, path, i % 10 < 7 ? 2 : 1, -1, raw);
        }
        CHECKF(cheap ? drafts == 300 : drafts <= 4, "%s nodes: %d of 300 steps drafted", cheap ? "cheap" : "dear", drafts);
    }
    /* a spike in the drafter's timing (30 ms for a 0.3 ms call) fades within a few drafter
     * calls (an exploration's), faster than a slow timing would move it up */
    es__tuner u = seeded(1.0, 1.15, 0.0, 0.0, 30.0);
    for (int i = 0; i < 4; i++) es__tuner_observe_draft_call(&u, 0.3);
    CHECKF(u.draft_ms < 2.5, "drafter cost %g ms after 4 calls of 0.3", u.draft_ms);
    es__tuner_observe_draft_call(&u, 30.0);
    CHECKF(u.draft_ms < 6.0, "drafter cost %g ms after a spike", u.draft_ms);
    /* costs unknown, or fixed trees: always draft */
    es__tuner t;
    es__tuner_init(&t, true);
    CHECK(es__tuner_draft_pays(&t));
    es__tuner_init(&t, false);
    CHECK(es__tuner_draft_pays(&t));
    es__tree_free(&tr, NULL);
}

/* The tree builder stops before the first node whose probability per unit of cost is below the
 * yield of the tree so far. */
static void test_cost_stop(void) {
    es__err err;
    es__tree tr;
    CHECK_OK(es__tree_init(&tr, 64, NULL, &err));
    int32_t tok[4] = {10, 11, 12, 13};
    float lp[4] = {logf(0.8f), logf(0.5f), logf(0.1f), logf(0.05f)};
    es__levels lv;
    memset(&lv, 0, sizeof lv);
    lv.n_levels = 1;
    lv.k[0] = 4;
    lv.tokens[0] = tok;
    lv.logp[0] = lp;
    /* a = 1, b = 0.25: E/T after root 1/1.25 = 0.8; 0.8 / 0.25 = 3.2 > 0.8 keep; then
     * E = 1.8, T = 1.5: 1.2; 0.5 / 0.25 = 2 > 1.2 keep; E = 2.3, T = 1.75: 1.31; 0.1 / 0.25 =
     * 0.4 < 1.31 stop: root + 2 */
    lv.cost_a = 1.0;
    lv.cost_b = 0.25;
    CHECK_OK(es__tree_build(&tr, 1, &lv, 64, 0, NULL, &err));
    CHECKF(tr.n == 3, "tree of %d nodes", tr.n);
    /* free nodes: everything */
    lv.cost_b = 1e-9;
    CHECK_OK(es__tree_build(&tr, 1, &lv, 64, 0, NULL, &err));
    CHECK(tr.n == 5);
    /* dear nodes: the root alone */
    lv.cost_b = 100.0;
    CHECK_OK(es__tree_build(&tr, 1, &lv, 64, 0, NULL, &err));
    CHECK(tr.n == 1);
    es__tree_free(&tr, NULL);
}

int main(void) {
    test_fit();
    test_warmup_and_spikes();
    test_calibration();
    test_streams();
    test_cost_stop();
    test_seeded_costs();
    test_seeded_draft();
    TEST_MAIN_END();
}
