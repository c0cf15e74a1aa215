/* spec_prune.c: which tree-pruning threshold pays on this device, from what decoding calls
 * measured (spec_tune.h says how). Like the rest of the tuner it only decides how much work a
 * call does; the tokens emitted never depend on it. */
#include "spec_tune.h"

#include <math.h>

/* Candidates a factor of 3 to 10 apart: the early exit's probability of a drafted token spans
 * decades. The smallest, the observation's, prunes little (the trained adapters' early exits put
 * about a quarter of the adaptive trees' drafts below 0.01 on the long model) but measures
 * everything. */
const float es__prune_cands[ES__PRUNE_CANDS] = {0.0f, 0.001f, 0.01f, 0.03f, 0.1f};

#define P_FORGET 0.95    /* weight of past observations per new one: about the last 20 count  */
#define P_SPIKE 2.0      /* a pruning call's timing counts at most this many unpruned calls    */
#define PRUNE_GAIN 1.02  /* pruning must promise this much over none: the costs are fitted     */
#define PRUNE_SHARE 0.01 /* observations as far apart as keeps their extra cost near this share */
#define OBSERVE_FIRST 4  /* observations before any choice (every other call until then)       */
#define OBSERVE_MIN 4    /* then calls between observations at least (the choice runs between) */
#define OBSERVE_MAX 256  /* ... and at most                                                    */

void es__tuner_prune_auto(es__tuner *t) {
    if (!t->adaptive) return;
    t->prune_auto = true;
    t->observe_at = 0;
}

/* The fit of pruning calls against the unpruned one: the call's own overhead o and the saving
 * per pruned node u, in ms. */
static bool prune_fit(const es__tuner *t, double *o, double *u) {
    double a, b;
    if (!t->prune_auto || t->rw < 1.5 || !es__tuner_cost(t, &a, &b)) return false;
    const double den = t->rw * t->rxx - t->rx * t->rx;
    /* the saving per pruned node: fitted where the calls pruned different numbers of nodes,
     * else a whole node (optimistic: the calls it makes measure it); never more than a node */
    double save = b;
    if (den > 1e-6 * t->rw * t->rw) save = -(t->rw * t->rxr - t->rx * t->rr) / den;
    save = ES__MIN(ES__MAX(save, 0.0), b);
    *u = save;
    *o = ES__MAX((t->rr + save * t->rx) / t->rw, 0.0);
    return true;
}

bool es__tuner_prune_costs(const es__tuner *t, double *o, double *u) {
    if (!prune_fit(t, o, u)) return false;
    if (t->pw > 0.0) *o += t->pe / t->pw;
    return true;
}

/* Expected tokens per ms of candidate j on the trees observed: a + b n for the unpruned call,
 * plus the pruning call's overhead, less what its pruned nodes save. */
static double rate(const es__tuner *t, int32_t j, double a, double b, double o, double u) {
    const double n = t->on / t->ow, kept = t->okept[j] / t->ow, tok = t->otok[j] / t->ow;
    const double ms = a + b * n + (j > 0 ? o - u * (n - kept) : 0.0);
    return ms > 0.0 ? tok / ms : 0.0;
}

/* The best candidate as measured (0 while unknown), what an observation costs beyond it in units
 * of an unpruned call of the trees observed, and whether no threshold can pay: the overhead
 * outweighs pruning every node below the root, each saving a whole node, and losing nothing (then
 * the first observations need not wait for OBSERVE_FIRST). */
static int32_t choose(const es__tuner *t, double *observe_extra, bool *hopeless) {
    double a, b, o, u;
    *observe_extra = 1.0;
    *hopeless = false;
    if (!(t->ow > 0.0) || !es__tuner_cost(t, &a, &b) || !es__tuner_prune_costs(t, &o, &u)) return 0;
    const double n = t->on / t->ow, unit = a + b * n;
    if (o >= b * (n - 1.0)) {
        *hopeless = true;
        *observe_extra = o / unit;
        return 0;
    }
    if (t->ow < OBSERVE_FIRST - 0.5) return 0;
    int32_t best = 0;
    double best_rate = PRUNE_GAIN * rate(t, 0, a, b, o, u);
    for (int32_t j = 1; j < ES__PRUNE_CANDS; j++) {
        const double r = rate(t, j, a, b, o, u);
        if (r > best_rate) best = j, best_rate = r;
    }
    const double cost_best = best > 0 ? unit + o - u * (n - t->okept[best] / t->ow) : unit;
    const double cost_obs = unit + o - u * (n - t->okept[1] / t->ow);
    *observe_extra = ES__MAX(cost_obs - cost_best, 0.0) / unit;
    return best;
}

float es__tuner_prune(es__tuner *t, int32_t n_nodes) {
    double a, b;
    if (!t->prune_auto || n_nodes < 2) return 0.0f;
    t->prune_last = 0.0f;
    if (t->probing || !es__tuner_cost(t, &a, &b)) return 0.0f;
    if (t->steps >= t->observe_at) return t->prune_last = es__prune_cands[1];
    double extra;
    bool hopeless;
    return t->prune_last = es__prune_cands[choose(t, &extra, &hopeless)];
}

void es__tuner_observe_pruned_call(es__tuner *t, int32_t n_nodes, int32_t kept, double ms) {
    double a, b, o, u;
    if (!(ms >= 0.0) || n_nodes < 1) return;
    /* once pruning's costs are known the unpruned fit learns from this call too, less what
     * pruning measured to add, so that trees stay priced by every call that timed one; before,
     * not at all (on lavapipe a pruning call of a small tree costs nearly two calls, which would
     * price every tree out) */
    const double x = (double)(n_nodes - kept);
    const bool fitted = es__tuner_cost(t, &a, &b);
    if (prune_fit(t, &o, &u)) es__tuner_observe_call(t, n_nodes, ES__MAX(ms - o + u * x, 0.0), false);
    else t->steps++;
    if (!fitted || n_nodes < 2 || n_nodes > 64) return;
    /* a size's first pruning call may carry one-time costs (lavapipe compiles at first dispatch) */
    const uint64_t bit = (uint64_t)1 << (n_nodes - 1);
    const bool first = !(t->seen_p & bit);
    t->seen_p |= bit;
    if (first) return;
    const double unpruned = a + b * n_nodes, r = ES__MIN(ms, P_SPIKE * unpruned) - unpruned;
    t->rw = P_FORGET * t->rw + 1.0;
    t->rx = P_FORGET * t->rx + x;
    t->rxx = P_FORGET * t->rxx + x * x;
    t->rr = P_FORGET * t->rr + r;
    t->rxr = P_FORGET * t->rxr + x * r;
}

void es__tuner_observe_pruned_pass(es__tuner *t, int32_t g, double ms) {
    if (!t->prune_auto || !(ms >= 0.0) || g < 1 || !(t->gs > 0.0)) return;
    const double pass = es__tuner_stream_cost(t, g);
    t->pw = P_FORGET * t->pw + 1.0;
    t->pe = P_FORGET * t->pe + ES__MIN(ES__MAX(ms - pass, 0.0), P_SPIKE * pass);
}

/* Tokens a candidate would have emitted: the accepted path up to its first pruned node, whose
 * token the target then gives itself. */
static int32_t tokens_kept(const uint8_t *pruned, const int32_t *path, int32_t n_path) {
    for (int32_t k = 1; k < n_path; k++)
        if (pruned[path[k]]) return k;
    return n_path;
}

void es__tuner_observe_prune(es__tuner *t, const es__tree *tree, const float *exit_p, float thr, const int32_t *path,
                             int32_t n_path, bool cut) {
    if (!t->prune_auto || thr != es__prune_cands[1] || tree->n < 2 || tree->n > 64) return;
    uint8_t pr[64];
    t->ow = P_FORGET * t->ow + 1.0;
    t->on = P_FORGET * t->on + tree->n;
    t->otok[0] = P_FORGET * t->otok[0] + n_path + (cut ? 1 : 0);
    t->okept[0] = P_FORGET * t->okept[0] + tree->n;
    for (int32_t j = 1; j < ES__PRUNE_CANDS; j++) {
        /* pre-order: a parent is decided before its children; what the observation pruned (or
         * did not compute) every larger threshold prunes too */
        int32_t kept = 1;
        pr[0] = 0;
        for (int32_t i = 1; i < tree->n; i++) {
            const bool skip = tree->skip && tree->skip[i];
            pr[i] = pr[tree->parent[i]] || skip || !(exit_p[i] >= es__prune_cands[j]);
            kept += !pr[i];
        }
        t->otok[j] = P_FORGET * t->otok[j] + tokens_kept(pr, path, n_path);
        t->okept[j] = P_FORGET * t->okept[j] + kept;
    }
    /* the next observation: every other call until OBSERVE_FIRST were seen (unless none can pay;
     * the calls between, unpruned, go on pricing trees), then as far apart as keeps their
     * measured extra cost near PRUNE_SHARE of the time */
    double extra;
    bool hopeless;
    choose(t, &extra, &hopeless);
    const double every =
        t->ow < OBSERVE_FIRST - 0.5 && !hopeless ? 2.0 : ES__MAX(ceil(extra / PRUNE_SHARE), (double)OBSERVE_MIN);
    t->observe_at = t->steps + (int64_t)ES__MIN(every, (double)OBSERVE_MAX);
}
