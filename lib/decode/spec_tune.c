/* spec_tune.c: the cost model and acceptance calibration behind adaptive draft trees (see
 * spec_tune.h). Deliberately small and deterministic given the timings it is fed; it never
 * affects which tokens are emitted, only how many tree nodes each target call carries. */
#include "spec_tune.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define FORGET 0.97  /* weight of past calls per new one: about the last 30 calls count */
#define PRIOR 2.0f   /* pseudo-counts of the raw draft probability in the calibration  */
#define EXPLORE 32   /* calls between explorations (a call that drafts from every stream, or a
                        draft-model step that drafts, whatever the costs say, so that what
                        drafting is worth and costs stays measured) until the costs are known */
#define EXPLORE_SHARE 0.03 /* then as many calls apart as keep an exploration's measured extra
                              cost near this share of the time of plain decoding ...           */
#define EXPLORE_MIN 8      /* ... but at least this many calls apart ...                       */
#define EXPLORE_BACKOFF 16 /* ... and, while explorations confirm that drafting does not pay, up
                              to this many times further apart (doubling each time)            */
#define SPIKE 2.0    /* a timing counts at most SPIKE times what the fit predicts */
#define SEED 2.0     /* calls a probe's timing counts for in the fit */
#define EVIDENCE 4   /* trees whose first level was tested before acceptance counts as measured:
                        until then a depth counts one acceptance more, not 0.3 (the probe's one
                        tree, unlucky, stopped drafting on the long model until the next
                        exploration, a quarter of a 128-token reply); the costs still decide */
#define WARM_PLAIN 4 /* plain calls timed before a tree call's time over them may lower a node's
                        price: a reply's first plain calls may be cold too (the CPU's default
                        model: 0.36-1.4 ms against 0.145), and a warm tree over a cold plain
                        call makes nodes look free */
#define SPREAD 0.1   /* the variance of the fitted calls' sizes below which they are taken to
                        have one size (the slope is not fitted)                             */
#define GAIN 1.05    /* drafting must promise this much over plain calls: a margin for timing
                        noise and for the work no timing sees (the drafter's own sampling) */

void es__tuner_init(es__tuner *t, bool adaptive) {
    memset(t, 0, sizeof *t);
    t->adaptive = adaptive;
    t->explore_at = EXPLORE;
    t->explore_every = EXPLORE;
    t->explore_base = EXPLORE;
}

static int32_t bin_of(float logp) {
    float q = expf(logp);
    int32_t b = (int32_t)(q * ES__TUNE_BINS);
    return b < 0 ? 0 : b >= ES__TUNE_BINS ? ES__TUNE_BINS - 1 : b;
}

float es__tuner_accept(const es__tuner *t, int32_t d, int32_t rank, float logp) {
    if (!(logp > -INFINITY)) return -INFINITY;
    const int32_t di = ES__MIN(ES__MAX(d, 1), ES_SPEC_MAX_DEPTH) - 1, b = bin_of(logp), ri = rank > 0;
    const float q = expf(logp);
    float acc = 0.0f, cnt = 0.0f;
    for (int32_t k = 0; k < ES__TUNE_BINS; k++) acc += t->acc[di][ri][k], cnt += t->cnt[di][ri][k];
    /* optimism where a bin is untested (spec_tune.h): its pseudo-counts at the higher rate */
    const float pooled = (acc + PRIOR * q) / (cnt + PRIOR), prior = ES__MAX(q, pooled);
    const float p = (t->acc[di][ri][b] + PRIOR * prior) / (t->cnt[di][ri][b] + PRIOR);
    return p > 0.0f ? logf(p) : -INFINITY;
}

static bool sizes_spread(const es__tuner *t) {
    return t->w * t->snn - t->sn * t->sn > SPREAD * t->w * t->w;
}

/* The line's slope and level, or false where it has none to trust: its calls had nearly one
 * size, or its one-node call costs under 3/4 of a plain call. A few calls far from the rest
 * tilt it: one exploration's 9-node tree among 5-node calls on the CPU, dear past its kernels'
 * 6-row tiles, left the level at 0 and a node at 0.23 ms, so that a plain call priced from the
 * line looked cheaper than a 4.6-token step, and the long model went plain for a whole reply. */
static bool fitted_line(const es__tuner *t, double *a, double *b) {
    if (!sizes_spread(t)) return false;
    const double slope = (t->w * t->snt - t->sn * t->st) / (t->w * t->snn - t->sn * t->sn);
    /* a node never costs nothing, nor less than half what the probe measured (costs grow
     * with the context); timing noise may say so, and trees would then look free. The level is
     * fitted under that slope, so the line still passes through the calls' mean */
    *b = ES__MAX(slope > 1e-6 ? slope : 1e-6, t->floor_b);
    *a = ES__MAX((t->st - *b * t->sn) / t->w, 0.0);
    return !(t->plain_ms > 0.0) || *a + *b >= 0.75 * t->plain_ms;
}

bool es__tuner_cost(const es__tuner *t, double *a, double *b) {
    if (!t->adaptive || t->calls < 4) return false;
    if (fitted_line(t, a, b)) return true;
    /* nearly all recent calls had one size (plain calls, while drafting does not pay), or the
     * line is implausible: the slope the probe measured (or a later tree's over a plain call, if
     * less), the level the calls say; without such a slope, unknown, so that the next steps
     * draft small trees of two sizes and time them. With one size a line's slope would rest on
     * the few tree calls left in the decayed sums, which may be a reply's first and cold (the
     * long model, CPU: 0.13-0.21 ms a node where warm trees cost 0.05, and plain calls for a
     * quarter of a reply); an implausible line taken for want of a slope sent the long model to
     * plain calls for the 630 calls left of a reply (test_cold_probe_outlier) */
    if (!(t->seed_b > 0.0)) return false;
    *b = t->seed_b;
    *a = ES__MAX((t->st - t->seed_b * t->sn) / t->w, 0.0);
    return true;
}

/* Marks size n (1..64) timed; true the first time. */
static bool first_timing(uint64_t *seen, int32_t n) {
    if (n < 1 || n > 64) return false;
    const uint64_t bit = (uint64_t)1 << (n - 1);
    const bool first = !(*seen & bit);
    *seen |= bit;
    return first;
}

static void fit_call(es__tuner *t, int32_t n_nodes, double ms) {
    t->steps++;
    t->max_n = ES__MAX(t->max_n, n_nodes);
    const double n = (double)n_nodes;
    double a, b;
    const bool fitted = es__tuner_cost(t, &a, &b);
    /* a size's first call is left out only before the fit: once there is one, the clamp below
     * bounds its one-time costs, and leaving it out let a tree twice the largest timed look as
     * cheap as the fit's line while it took three times that (long model, CPU: 24 nodes) */
    if (first_timing(&t->seen_n, n_nodes) && !fitted) return;
    if (fitted) ms = ES__MIN(ms, SPIKE * (a + b * n));
    t->w = FORGET * t->w + 1.0;
    t->sn = FORGET * t->sn + n;
    t->st = FORGET * t->st + ms;
    t->snn = FORGET * t->snn + n * n;
    t->snt = FORGET * t->snt + n * ms;
    t->calls++;
}

/* The probe keeps the first timing of each kind of call and seeds the fit once it has a plain
 * call and a tree of two or more nodes (a strategy without streams: its one-node call is the
 * plain one). */
static void probe_call(es__tuner *t, int32_t n, double ms, bool plain) {
    es__tuner_costs *c = &t->probe;
    if (plain && !(c->plain_ms > 0.0)) c->plain_ms = ms;
    else if (n == 1 && !plain && !(c->one_ms > 0.0)) c->one_ms = ms;
    else if (n >= 2 && n <= 64 && !(c->hi_ms > 0.0)) c->n_hi = n, c->hi_ms = ms;
    if (!(c->plain_ms > 0.0) || !(c->hi_ms > 0.0)) return;
    if (!(c->one_ms > 0.0)) c->one_ms = c->plain_ms;
    t->probing = false;
    es__tuner_seed(t, c);
}

/* Cost of a stream pass of g streams: a line c0 + c1 g through the passes seen, neither part
 * below 0, or proportional to g while they all had the same g. A slope or level clamped to 0 is
 * a constraint of the fit, not a correction after it: the other part is fitted again under it.
 * (Clamping a negative slope and keeping its intercept priced one stream as the line's far end:
 * 0.65 ms where passes took 0.35, and the long model fell back to plain calls for a reply.) */
double es__tuner_stream_cost(const es__tuner *t, int32_t g) {
    const double den = t->gw * t->gss - t->gs * t->gs, floor = t->floor_g0;
    if (!(den > 1e-9 * t->gw * t->gw)) return ES__MAX(t->gt / t->gs * g, floor);
    double c1 = ES__MAX((t->gw * t->gst - t->gs * t->gt) / den, 0.0), c0 = (t->gt - c1 * t->gs) / t->gw;
    if (c0 < 0.0) c0 = 0.0, c1 = t->gst / t->gss;
    return ES__MAX(c0 + ES__MAX(c1, 1e-6) * g, floor);
}

void es__tuner_observe_streams(es__tuner *t, int32_t g, double ms) {
    if (!(ms >= 0.0) || g < 1) return;
    if (t->probing && !(t->probe.pass_hi_ms > 0.0)) t->probe.g_hi = g, t->probe.pass_hi_ms = ms;
    t->max_g = ES__MAX(t->max_g, g);
    /* the floor is half the cheapest pass seen, not the probe's: a reply's first pass may be
     * cold (the long model, CPU: 1.47 ms against 0.3, and every draft priced above a plain call
     * for as long as the calls stayed plain, which time no pass) */
    t->floor_g0 = ES__MIN(t->floor_g0, 0.5 * ms);
    if (first_timing(&t->seen_g, g) && !(t->gs > 0.0)) return;
    if (t->gs > 0.0) ms = ES__MIN(ms, SPIKE * es__tuner_stream_cost(t, g));
    t->gw = FORGET * t->gw + 1.0;
    t->gs = FORGET * t->gs + g;
    t->gss = FORGET * t->gss + (double)g * g;
    t->gt = FORGET * t->gt + ms;
    t->gst = FORGET * t->gst + (double)g * ms;
}

void es__tuner_observe_host(es__tuner *t, int32_t n_nodes, double ms) {
    if (!t->adaptive || !(ms >= 0.0) || n_nodes < 1) return;
    const double n = (double)n_nodes;
    if (t->hw > 0.0) ms = ES__MIN(ms, SPIKE * ES__MAX(es__tuner_host_cost(t, n_nodes), 1e-3));
    t->hw = FORGET * t->hw + 1.0;
    t->hn = FORGET * t->hn + n;
    t->hnn = FORGET * t->hnn + n * n;
    t->ht = FORGET * t->ht + ms;
    t->hnt = FORGET * t->hnt + n * ms;
}

/* A line through the steps' host work, c0 + c1 n, or their mean while they all verified one size
 * (a step never does less work for more nodes: the slope is at least 0); 0 before any step. */
static void host_line(const es__tuner *t, double *c0, double *c1) {
    *c0 = *c1 = 0.0;
    if (!(t->hw > 0.0)) return;
    const double den = t->hw * t->hnn - t->hn * t->hn;
    if (!(den > 1e-9 * t->hw * t->hw)) {
        *c0 = t->ht / t->hw;
        return;
    }
    *c1 = ES__MAX((t->hw * t->hnt - t->hn * t->ht) / den, 0.0);
    *c0 = ES__MAX((t->ht - *c1 * t->hn) / t->hw, 0.0);
}

double es__tuner_host_cost(const es__tuner *t, int32_t n) {
    double c0, c1;
    host_line(t, &c0, &c1);
    return c0 + c1 * (double)n;
}

bool es__tuner_step_cost(const es__tuner *t, int32_t g, double *a, double *b) {
    double c0, c1;
    if (!es__tuner_cost(t, a, b)) return false;
    host_line(t, &c0, &c1);
    *a += c0 + (g > 0 && t->gs > 0.0 ? es__tuner_stream_cost(t, g) : 0.0);
    *b += c1;
    return true;
}

/* A decayed mean of a call's time that follows a faster call more quickly than a slower one:
 * noise on a loaded machine only adds time, and a cost that looks too high stops the calls that
 * would time it again (plain calls while drafting pays, drafter calls while it does not). */
static void mean_cost(double *mean, double ms) {
    if (!(ms >= 0.0)) return;
    *mean = !(*mean > 0.0) ? ms : ms < *mean ? 0.5 * *mean + 0.5 * ms : 0.9 * *mean + 0.1 * ms;
}

/* A tree call after the probe lowers the probe's node cost and its floor where it took less
 * over a plain call than they say: noise only adds time, and the probe's tree, a reply's first
 * of its size, may carry one-time costs and a cold device (a tree at twice its warm cost there
 * kept a device where trees pay at plain calls for the rest of the reply, test_spec_tune). */
static void lower_seed(es__tuner *t, int32_t n_nodes, double ms) {
    if (t->probing || n_nodes < 2 || !t->seeded || t->plain_calls < WARM_PLAIN) return;
    const double node = ES__MAX(ES__MAX(ms - t->plain_ms, 0.0) / (double)(n_nodes - 1), 1e-6);
    /* a probe whose smaller calls were the colder measured no slope: the first such tree gives it */
    const bool first = !(t->seed_b > 0.0);
    t->seed_b = first ? node : ES__MIN(t->seed_b, node);
    t->floor_b = first ? 0.5 * node : ES__MIN(t->floor_b, 0.5 * node);
}

void es__tuner_observe_call(es__tuner *t, int32_t n_nodes, double ms, bool plain) {
    if (!(ms >= 0.0) || n_nodes < 1) return;
    if (plain) mean_cost(&t->plain_ms, ms), t->plain_calls++;
    t->last_n = n_nodes, t->last_ms = ms;
    lower_seed(t, n_nodes, ms);
    fit_call(t, n_nodes, ms);
    if (plain) t->plain_step = t->steps;
    if (t->probing) probe_call(t, n_nodes, ms, plain);
}

/* A plain one-token call: measured, but never above the fit's one-node call, which does more
 * (its streams): only plain steps time a plain call, so a spike in that timing would otherwise
 * stand, making every draft look cheap, as long as drafting went on. */
static double plain_cost(const es__tuner *t, double a, double b) {
    return t->plain_ms > 0.0 ? ES__MIN(t->plain_ms, a + b) : a + b;
}

/* What an exploration costs beyond a plain call, in plain calls: the largest tree timed, the
 * widest stream pass and the drafter's calls for its chain. */
static double explore_overhead(const es__tuner *t, double a, double b) {
    const double n = (double)ES__MAX(t->max_n, 2);
    const double pass = t->gs > 0.0 ? es__tuner_stream_cost(t, ES__MAX(t->max_g, 1)) : 0.0;
    const double unit = plain_cost(t, a, b) + es__tuner_host_cost(t, 1);
    const double step = a + b * n + pass + es__tuner_host_cost(t, (int32_t)n) + t->draft_ms * (n - 1.0);
    return ES__MAX(step - unit, 0.0) / unit;
}

/* The base interval between explorations from their measured cost (EXPLORE while unknown). */
static int32_t explore_base(const es__tuner *t) {
    double a, b;
    if (!es__tuner_cost(t, &a, &b)) return EXPLORE;
    const double calls = ceil(explore_overhead(t, a, b) / EXPLORE_SHARE);
    return (int32_t)ES__MIN(ES__MAX(calls, (double)EXPLORE_MIN), 4096.0);
}

void es__tuner_seed(es__tuner *t, const es__tuner_costs *c) {
    if (!t->adaptive || !(c->plain_ms > 0.0) || !(c->one_ms > 0.0) || c->n_hi < 2 || c->n_hi > 64 || !(c->hi_ms > 0.0))
        return;
    /* a larger call never costs less than a smaller one: a timing that says so is noise in the
     * smaller one, which takes the larger one's time */
    const double one = ES__MIN(c->one_ms, c->hi_ms);
    const double pts[2][2] = {{1.0, one}, {(double)c->n_hi, c->hi_ms}};
    for (int i = 0; i < 2; i++) {
        const double n = pts[i][0], ms = pts[i][1];
        t->w += SEED, t->sn += SEED * n, t->st += SEED * ms, t->snn += SEED * n * n, t->snt += SEED * n * ms;
        t->seen_n |= (uint64_t)1 << ((int32_t)n - 1);
    }
    t->calls += 4; /* what the fit needs to be believed: SEED calls at each of two sizes */
    t->max_n = ES__MAX(t->max_n, c->n_hi);
    t->plain_ms = t->plain_ms > 0.0 ? ES__MIN(t->plain_ms, one) : ES__MIN(c->plain_ms, one);
    if (c->g_hi >= 1 && c->g_hi <= 64 && c->pass_hi_ms > 0.0) {
        const double g = (double)c->g_hi;
        t->gw += SEED;
        t->gs += SEED * g;
        t->gss += SEED * g * g;
        t->gt += SEED * c->pass_hi_ms;
        t->gst += SEED * g * c->pass_hi_ms;
        t->seen_g |= (uint64_t)1 << (c->g_hi - 1);
        t->max_g = ES__MAX(t->max_g, c->g_hi);
        /* one width timed: a narrower pass is taken to cost at least half of it (most of a pass
         * is its fixed part on the devices measured, docs/perf.md), not g_hi-th of it, until a
         * cheaper pass is timed (es__tuner_observe_streams) */
        t->floor_g0 = 0.5 * c->pass_hi_ms;
    }
    if (c->draft_ms > 0.0) t->draft_ms = t->draft_ms > 0.0 ? ES__MIN(t->draft_ms, c->draft_ms) : c->draft_ms;
    /* a node never costs less than half what the probe measured (see es__tuner_cost) */
    t->seeded = true;
    t->seed_b = ES__MAX(c->hi_ms - one, 0.0) / (double)(c->n_hi - 1);
    t->floor_b = 0.5 * t->seed_b;
    /* explorations as far apart as their measured cost says; one that has run waits for the
     * choice after it (es__tuner_chose) */
    t->explore_base = t->explore_every = explore_base(t);
    if (!t->explored) t->explore_at = t->steps + t->explore_base;
}

void es__tuner_probe(es__tuner *t) {
    if (!t->adaptive) return;
    t->probing = true;
    memset(&t->probe, 0, sizeof t->probe);
    t->explore_at = t->steps + 1; /* the plain call first, then an exploration */
}

bool es__tuner_wants_plain(const es__tuner *t) {
    return t->probing && !(t->probe.plain_ms > 0.0);
}

bool es__tuner_units(const es__tuner *t, double *node, double *pass1, double *pass_max, double *draft) {
    double a, b;
    if (!es__tuner_cost(t, &a, &b)) return false;
    const double unit = plain_cost(t, a, b);
    *node = b / unit;
    *pass1 = t->gs > 0.0 ? es__tuner_stream_cost(t, 1) / unit : 0.0;
    *pass_max = t->gs > 0.0 ? es__tuner_stream_cost(t, ES__MAX(t->max_g, 1)) / unit : 0.0;
    *draft = t->draft_ms / unit;
    return true;
}

int32_t es__tuner_room(const es__tuner *t) {
    double a, b;
    if (!t->adaptive) return INT32_MAX;
    /* the probe's tree: one size is what the seed needs */
    if (!es__tuner_cost(t, &a, &b)) return t->probing ? 3 : 2 + (int32_t)(t->steps & 1);
    return ES__MAX(3, 2 * t->max_n);
}

/* The chance that a step whose accepted path reached depth d - 1 with streams' drafts below it
 * accepts one of them: as seen lately, with one pseudo-count at the rate of the depth above (at
 * 0.3 for the first, 1 before EVIDENCE trees). A depth the recent drafts did not reach is taken
 * to accept as the one above it does, not at a fixed low rate: that rate priced drafting from
 * more streams below what drafting from fewer did, so the deeper depths were never tested and
 * never corrected (the long model, CPU: 30 steps on one stream in a row, at 88% depth-1
 * acceptance, until an exploration). */
static double accept_rate(const es__tuner *t, int32_t d) {
    const double prior = d > 1 ? accept_rate(t, d - 1) : t->trees_tested < EVIDENCE ? 1.0 : 0.3;
    return (t->hit[d - 1] + prior) / (t->tested[d - 1] + 1.0);
}

/* The first depth's rate as the choice of streams takes it: one standard error above what was
 * seen. Stopping costs more than going on: a plain step tests no draft, so a rate that a few
 * early misses put too low stays there until an exploration (and explorations back off), while
 * drafting on corrects it within steps (the long model on the CPU, a held-out prompt: three
 * misses in its first five trees, 88% later, and 7 of 20 replies under 1.5 tokens a call, mostly
 * plain calls after the first trees). The deeper depths follow it through their prior
 * (accept_rate). */
static double first_rate_hopeful(const es__tuner *t) {
    const double r = accept_rate(t, 1);
    return ES__MIN(r + sqrt(r * (1.0 - r) / (t->tested[0] + 1.0)), 1.0);
}

int32_t es__tuner_streams(const es__tuner *t, int32_t gamma, int32_t cap) {
    double a, b;
    if (!t->adaptive || t->steps >= t->explore_at) return gamma;
    if (es__tuner_wants_plain(t)) return 0;
    if (!es__tuner_cost(t, &a, &b) || !(t->gs > 0.0)) return ES__MIN(gamma, 1);
    /* expected tokens per call: 1 + the chances of reaching each depth. A draft of g streams is
     * priced as a chain of g nodes below the root: the builder adds a sibling only where it pays
     * for itself, so a chain's rate is what drafting from g streams yields at least (pricing
     * all 1 + g k nodes made deep drafts look dearer than the trees the builder keeps). */
    double best = 1.0 / (plain_cost(t, a, b) + es__tuner_host_cost(t, 1)), reach = 1.0, expect = 1.0;
    int32_t best_g = 0;
    for (int32_t g = 1; g <= gamma && g <= ES_SPEC_MAX_DEPTH; g++) {
        reach *= g == 1 ? first_rate_hopeful(t) : accept_rate(t, g);
        expect += reach;
        double sa = a, sb = b;
        es__tuner_step_cost(t, g, &sa, &sb);
        const double rate = expect / (sa + sb * ES__MIN(cap, 1 + g));
        if (rate > GAIN * best) best = rate / GAIN, best_g = g;
    }
    return best_g;
}

bool es__tuner_draft_pays(const es__tuner *t) {
    double a, b;
    if (!t->adaptive || t->steps >= t->explore_at) return true;
    if (es__tuner_wants_plain(t)) return false;
    if (!es__tuner_cost(t, &a, &b) || !(t->draft_ms > 0.0)) return true;
    /* without the streams' optimism before EVIDENCE trees: the drafter's first steps were not
     * seen to stop it, and where it cannot pay that optimism drafted four times in 128 steps
     * (test_spec_tune's fallback) */
    const double p = (t->hit[0] + 0.3) / (t->tested[0] + 1.0);
    return (1.0 + p) / (a + 2.0 * b + t->draft_ms) > GAIN / plain_cost(t, a, b);
}

/* Whether the last step gave more tokens for its time than plain calls do: its call, the widest
 * stream pass timed (what an exploration drafts), its drafter calls and its host work. */
static bool explore_paid(const es__tuner *t) {
    double a, b;
    if (!es__tuner_cost(t, &a, &b) || t->last_n < 2) return false;
    const double pass = t->gs > 0.0 ? es__tuner_stream_cost(t, ES__MAX(t->max_g, 1)) : 0.0;
    const double step = t->last_ms + pass + t->draft_ms * (t->last_n - 1) + es__tuner_host_cost(t, t->last_n);
    return t->last_tokens / step > 1.0 / (plain_cost(t, a, b) + es__tuner_host_cost(t, 1));
}

void es__tuner_chose(es__tuner *t, int32_t g) {
    if (!t->adaptive) return;
    t->explore_base = explore_base(t);
    if (t->steps >= t->explore_at) { /* an exploration: the next choice says whether it paid */
        t->explored = true;
        t->explore_at = INT64_MAX;
        return;
    }
    if (g > 0) { /* drafting pays: explorations at the base interval again */
        t->explored = false;
        t->explore_every = t->explore_base;
        t->explore_at = ES__MIN(t->explore_at, t->steps + t->explore_base);
        return;
    }
    if (!t->explored) return;
    t->explored = false;
    /* an exploration that paid for itself cost nothing: the next comes soon, not twice as far
     * off (a reply's first trees may miss where later ones pass: the long model on the CPU, 3 of
     * its first 4, then 85%; backing off after explorations that paid kept it plain for 110 of
     * its first 117 calls) */
    if (explore_paid(t)) {
        t->explore_every = t->explore_base;
        t->explore_at = t->steps + EXPLORE_MIN;
        return;
    }
    t->explore_every = ES__MIN(2 * ES__MAX(t->explore_every, t->explore_base), EXPLORE_BACKOFF * t->explore_base);
    t->explore_at = t->steps + t->explore_every;
}

bool es__tuner_plain_stale(const es__tuner *t) {
    return t->plain_calls < WARM_PLAIN || t->steps - t->plain_step >= t->explore_base;
}

bool es__tuner_explores_next(const es__tuner *t) {
    return t->adaptive && t->steps + 1 >= t->explore_at;
}

void es__tuner_observe_draft_call(es__tuner *t, double ms) {
    mean_cost(&t->draft_ms, ms);
    if (t->probing && ms >= 0.0 && !(t->probe.draft_ms > 0.0 && t->probe.draft_ms <= ms)) t->probe.draft_ms = ms;
}

int32_t es__tuner_next_child(const es__tree *tree, int32_t last, int32_t next, int32_t next_child) {
    if (next_child >= 0 || !tree->skip) return next_child;
    for (int32_t c = last + 1; c <= tree->dfs_end[last]; c = tree->dfs_end[c] + 1)
        if (tree->skip[c] && tree->token[c] == next) return c;
    return -1;
}

void es__tuner_observe_tree(es__tuner *t, const es__tree *tree, const int32_t *path, int32_t n_path,
                            int32_t next_child, const float *raw_logp) {
    t->last_tokens = n_path;
    for (int32_t k = 0; k < n_path; k++) {
        const int32_t p = path[k], next = k + 1 < n_path ? path[k + 1] : next_child;
        bool tested = false;
        for (int32_t c = p + 1; c <= tree->dfs_end[p]; c = tree->dfs_end[c] + 1) tested = tested || !(tree->skip && tree->skip[c]);
        /* a depth's evidence ages as the depth is tested again: a run of plain steps or shallow
         * drafts says nothing about how deep drafts fare, and must not fade what was seen */
        if (tested && tree->depth[p] < ES_SPEC_MAX_DEPTH) {
            const int32_t d = tree->depth[p];
            t->trees_tested += d == 0;
            t->tested[d] = FORGET * t->tested[d] + 1.0;
            t->hit[d] = FORGET * t->hit[d] + (next >= 0);
        }
        for (int32_t c = p + 1; c <= tree->dfs_end[p]; c = tree->dfs_end[c] + 1) {
            if (tree->skip && tree->skip[c]) continue;
            const int32_t d = ES__MIN(tree->depth[c], ES_SPEC_MAX_DEPTH) - 1, b = bin_of(raw_logp[c]);
            const int32_t r = tree->rank[c] > 0;
            t->cnt[d][r][b] += 1.0f;
            if (c == next) t->acc[d][r][b] += 1.0f;
        }
    }
}
