/* spec_tune.h: sizing draft trees to the measured cost of the target's forward calls and the
 * observed acceptance (spec_tune.c). A node's chance of acceptance is its draft probability
 * calibrated by how often drafts of that depth, rank and probability were accepted so far; a
 * call of n tree nodes costs a + b n (a least-squares fit over recent calls), and its step's host
 * work beyond the calls another such fit (es__tuner_observe_host); a tree grows, best node first,
 * while the next node adds more expected tokens per unit of the step's cost (call, stream pass
 * and host work) than the tree yields so far. So a backend where nodes are costly gets small
 * trees (down to plain decoding) and one where they are nearly free gets large ones. Timings are
 * taken with care: before there is a fit, the first call of each tree size and the first stream
 * pass of each width are not fitted (they may carry one-time costs: command recording, and on
 * lavapipe the compilation of every kernel at its first dispatch, 20-30 ms); every later timing
 * counts at most twice the fit's prediction, and a tree grows to at most twice the largest size
 * seen, so no decision rests on a cost extrapolated far beyond what was measured.
 * The first steps probe this device's own costs while they decode (es__tuner_probe): a plain
 * call, then an exploration (a one-node call with every stream and a small tree); what they
 * timed seeds the fit (a node's price never below half of it, until a later tree call takes
 * less over warm plain calls: the probe's tree is a reply's first, and may be cold), so later
 * steps are sized from measurements rather than from guesses, and
 * how often drafting is re-tried while it does not pay follows from what a try costs here. No
 * call is made only to measure: where drafting does not pay, the probe costs one exploration.
 * Losslessness does not depend on any of this. */
#ifndef ES_DECODE_SPEC_TUNE_H
#define ES_DECODE_SPEC_TUNE_H

#include "forward_api.h"

#define ES__TUNE_BINS 10
#define ES__PRUNE_CANDS 5 /* pruning thresholds the tuner chooses among, 0 (none) first */

/* What the probe measured (or a test gives), in ms: the costs every decision starts from. */
typedef struct es__tuner_costs {
    double plain_ms;    /* a plain one-token call (no streams): the unit of cost              */
    double one_ms;      /* a one-node call as the strategy makes it (with its streams)        */
    int32_t n_hi;       /* a larger tree, > 1 nodes ...                                       */
    double hi_ms;       /* ... and its call                                                   */
    int32_t g_hi;       /* a stream pass of g_hi >= 1 streams (0: no streams) ...              */
    double pass_hi_ms;
    double draft_ms;    /* a draft-model call, the fastest of the probe's (0: no drafter)     */
} es__tuner_costs;

typedef struct es__tuner {
    bool adaptive;
    double w, sn, st, snn, snt;                   /* decayed sums over calls of (n, ms)          */
    double draft_ms;                              /* decayed mean of one draft-model call        */
    double gw, gs, gss, gt, gst;                  /* decayed sums over stream passes of (g, ms)  */
    double hw, hn, hnn, ht, hnt;                  /* decayed sums over steps of (n, host ms): the
                                                     step's own work beyond its calls            */
    double tested[ES_SPEC_MAX_DEPTH];             /* steps whose accepted path reached depth d
                                                     with drafts below (decayed as depth d is
                                                     tested again, not by steps that skip it)    */
    double hit[ES_SPEC_MAX_DEPTH];                /* of those, steps that accepted one of them   */
    int64_t trees_tested;                         /* steps that tested a first-level draft (all)  */
    float acc[ES_SPEC_MAX_DEPTH][2][ES__TUNE_BINS]; /* accepted drafts per depth, rank (a level's
                                                     first candidate, or a later one) and
                                                     probability                                 */
    float cnt[ES_SPEC_MAX_DEPTH][2][ES__TUNE_BINS]; /* tested drafts (their parent was accepted)  */
    uint64_t seen_n, seen_g;                      /* tree sizes 1..64 and stream widths timed once */
    int32_t max_n;                                /* largest tree timed                          */
    int64_t calls;                                /* calls in the fit                            */
    int64_t steps;                                /* every call timed, fitted or not             */
    int64_t plain_calls;                          /* plain calls timed                           */
    int64_t plain_step;                           /* steps after the last plain call timed       */
    int64_t explore_at;                           /* the call that drafts from every stream next */
    int32_t explore_every;                        /* calls between explorations (backs off)      */
    int32_t explore_base;                         /* ... from the measured cost of exploring     */
    bool explored;                                /* the last choice was an exploration          */
    double plain_ms;                              /* decayed mean of a plain one-token call      */
    int32_t max_g;                                /* widest stream pass timed                    */
    double floor_b, floor_g0;                     /* half the probe's node cost (or a later tree
                                                     call's, if less) and half the cheapest stream
                                                     pass: no fit goes below them                */
    double seed_b;                                /* the probe's node cost (its slope), or a later
                                                     tree call's over a plain call if less (or if
                                                     the probe's was 0: its smaller calls cold)  */
    bool seeded;                                  /* es__tuner_seed has run                      */
    int32_t last_n, last_tokens;                  /* the last call's nodes, the tokens its tree gave */
    double last_ms;                               /* ... and its time                            */
    bool probing;                                 /* the probe has not seeded the fit yet        */
    es__tuner_costs probe;                        /* what it timed so far                        */
    /* tree pruning chosen from measured costs (spec_prune.c) */
    bool prune_auto;                              /* the threshold is chosen here                */
    double ow, on, otok[ES__PRUNE_CANDS], okept[ES__PRUNE_CANDS]; /* observation calls (decayed):
                                                     their nodes, and the tokens and survivors
                                                     each candidate would have given            */
    double rw, rx, rxx, rr, rxr;                  /* pruning calls (decayed): nodes pruned against
                                                     time beyond the unpruned fit's a + b n      */
    uint64_t seen_p;                              /* tree sizes whose pruning call was timed     */
    double pw, pe;                                /* the stream passes after pruning calls
                                                     (decayed): their time beyond the fitted pass */
    int64_t observe_at;                           /* the next observation call                   */
    float prune_last;                             /* the threshold of the last tree call (>1 node) */
} es__tuner;

/* Seeds the fit with c's costs, counted as SEED calls each, and sets the interval between
 * explorations from what one costs. The sizes c names count as timed (their first call is
 * fitted). */
void es__tuner_seed(es__tuner *t, const es__tuner_costs *c);

/* Starts the probe (adaptive only): the next choice is a plain call (es__tuner_wants_plain), the
 * one after it an exploration; the calls' timings are kept (t->probe) and seed the fit as soon as
 * a plain call and a call of two or more nodes have been timed. */
void es__tuner_probe(es__tuner *t);
/* Whether the probe still needs its plain call: the next step should be one. */
bool es__tuner_wants_plain(const es__tuner *t);

/* The fitted costs in units of a plain one-token call: a node beyond the first (*node), a
 * stream pass of one and of max_g streams, a drafter call; false before any fit. */
bool es__tuner_units(const es__tuner *t, double *node, double *pass1, double *pass_max, double *draft);

void es__tuner_init(es__tuner *t, bool adaptive);

/* Calibrated log-probability that a draft at depth d (1-based), its level's candidate of the
 * given rank (0 first), with draft log-probability logp is accepted, given that its parent is.
 * The rank counts apart from the probability: a level's first candidate and the ones after it
 * are accepted at different rates for one draft probability (the long model's streams: a first
 * candidate at 0.13 was accepted 75% of the time, a second at 0.09 13%), and one calibration for
 * both cut chains short and kept siblings that did not pay. A bin with few tests leans on the
 * higher of its draft probability and its depth and rank's rate over all bins: a bin priced at a
 * low draft probability is never drafted, so never tested, however often its drafts would pass. */
float es__tuner_accept(const es__tuner *t, int32_t d, int32_t rank, float logp);

/* The fitted cost of a call, a + b n in ms; false while the calls seen do not determine it, or
 * when not adaptive. Where recent calls nearly all had one size, or the line through them prices
 * a one-node call under 3/4 of a plain call, the probe's b (or a later warm tree's) is the slope;
 * without one, false. */
bool es__tuner_cost(const es__tuner *t, double *a, double *b);

/* A call of n_nodes tree nodes took ms; plain: a one-token call without streams, the unit of
 * cost. */
void es__tuner_observe_call(es__tuner *t, int32_t n_nodes, double ms, bool plain);
/* The most tree nodes the next call may carry: 3 for the probe's tree, 2 or 3 in turn while the
 * costs are otherwise unknown, then twice the largest tree timed; unlimited when not adaptive. */
int32_t es__tuner_room(const es__tuner *t);
/* A stream pass computing g streams took ms. */
void es__tuner_observe_streams(es__tuner *t, int32_t g, double ms);
/* What a pass of g streams costs as fitted, in ms; only once a pass was fitted (t->gs > 0). */
double es__tuner_stream_cost(const es__tuner *t, int32_t g);
/* A step whose call verified n_nodes tree nodes spent ms on the host beyond its forward call and
 * stream pass: verification, commit, the next tree. Where a forward call takes a tenth of a
 * millisecond (a model in the cache), that work decides whether a tree pays. */
void es__tuner_observe_host(es__tuner *t, int32_t n_nodes, double ms);
/* The fitted host work of a step verifying n nodes, ms (0 before any step was timed). */
double es__tuner_host_cost(const es__tuner *t, int32_t n);
/* What a step that drafts from g streams (0: none) costs per tree node it verifies, as a + b n
 * in ms: its call, its stream pass of g streams and its host work; false before the call fit. */
bool es__tuner_step_cost(const es__tuner *t, int32_t g, double *a, double *b);

/* How many streams the next draft should come from (0 = none: a plain step), the one among
 * 0..gamma that maximises expected tokens per unit of cost, a draft of g streams priced as a chain
 * of at most cap tree nodes; gamma when not adaptive or on an exploration call; 0 while the probe
 * needs its plain call; 1 while the costs are otherwise unknown (the cheapest draft that measures
 * a node and a stream pass). */
int32_t es__tuner_streams(const es__tuner *t, int32_t gamma, int32_t cap);
/* Whether a draft-model step should draft at all (else a plain step): one draft at the depth-1
 * acceptance seen so far, per its cost (a drafter call and a node), against a plain call. True
 * while the costs are unknown (false while the probe needs its plain call), when not adaptive and
 * on an exploration call. */
bool es__tuner_draft_pays(const es__tuner *t);
/* The strategy drafts from g streams or g drafts (what es__tuner_streams or _draft_pays said).
 * Schedules the next exploration: while drafting pays, within the base interval (as many calls
 * as keep what an exploration costs, measured, near EXPLORE_SHARE of the decoding time);
 * twice as far apart each time an exploration is followed by a choice not to draft, up to
 * EXPLORE_BACKOFF times the base. */
void es__tuner_chose(es__tuner *t, int32_t g);

/* Whether the plain call's timing, the unit of cost, needs a plain call: fewer than a few timed
 * (a reply's first may be cold), or the last older than the interval between explorations. */
bool es__tuner_plain_stale(const es__tuner *t);

/* Whether the next call is one that drafts from every stream whatever the costs (exploration). */
bool es__tuner_explores_next(const es__tuner *t);
void es__tuner_observe_draft_call(es__tuner *t, double ms);
/* The child of `last` (the accepted path's last node) to count as carrying the target's next
 * token: next_child where the walk stopped on one, else a pruned child with that token, which
 * would have been accepted (or pruning would pass for lower acceptance, and trees would shrink);
 * -1 for none. */
int32_t es__tuner_next_child(const es__tree *tree, int32_t last, int32_t next, int32_t next_child);
/* Counts, for every child of an accepted node, whether it was accepted: path[1..n_path) were,
 * and of the last path node's children next_child (or none, -1). raw_logp[i] is node i's own
 * draft log-probability (not the path's). */
void es__tuner_observe_tree(es__tuner *t, const es__tree *tree, const int32_t *path, int32_t n_path,
                            int32_t next_child, const float *raw_logp);

/* ---- tree pruning chosen from measured costs (spec_prune.c)
 *
 * Pruning (papers/speculative-streaming.txt 3.2.3) saves a pruned node the layers above the prune
 * layer, costs every pruning call its early exit (and on Vulkan a second submission), and loses
 * the tokens below a pruned node that would have been accepted. Which of the candidate
 * thresholds (es__prune_cands: none, then from small to large) pays is measured on decoding
 * calls, never by a call made only to measure:
 *   - what each threshold would have pruned and accepted: an observation call prunes at the
 *     smallest candidate, and since pruning changes nothing for the nodes it keeps (lossless,
 *     batch-invariant), its early-exit probabilities (es__exit_prob) and its verification say
 *     exactly which nodes every larger threshold would have kept and where it would have cut the
 *     accepted path; no pruning is taken to yield what the observation accepted, one token more
 *     where it pruned the target's own next token;
 *   - what a pruning call costs: its time beyond the unpruned fit's a + b n (which learns from
 *     the call too, less that, once known), fitted as o - u x over the x nodes it pruned: o the
 *     call's overhead, u what a pruned node saves (while the calls seen do not determine u,
 *     u = b: optimistic, so a threshold that might pay is run, and its calls measure u); plus
 *     what its stream pass takes beyond the fitted pass (which does not learn from it).
 * The next tree call prunes at the candidate with the most expected tokens per unit of cost,
 * and only where that beats no pruning by PRUNE_GAIN; observations come every other tree call
 * until a few were seen, then as far apart as keeps their measured extra cost near PRUNE_SHARE
 * of the decoding time, and back off at once where the overhead alone rules pruning out. */
extern const float es__prune_cands[ES__PRUNE_CANDS];

/* Lets the tuner choose the threshold (adaptive trees, the adapter can prune, none given). */
void es__tuner_prune_auto(es__tuner *t);
/* The threshold for the next call of n_nodes tree nodes: 0 (no pruning) for one node, while
 * probing or before the fit, or when not choosing; the smallest candidate on an observation
 * call; else the best candidate as measured. */
float es__tuner_prune(es__tuner *t, int32_t n_nodes);
/* A call of n_nodes nodes that pruned at thr > 0 kept `kept` of them and took ms (instead of
 * es__tuner_observe_call): fitted against a + b n, which learns from it less the fitted o - u x
 * once that is known. */
void es__tuner_observe_pruned_call(es__tuner *t, int32_t n_nodes, int32_t kept, double ms);
/* The stream pass after a pruning call of the tuner's took ms for g streams: what it took beyond
 * the fitted pass counts as that call's (on Vulkan a pruning call's streams may not ride in it),
 * and the pass fit does not see it. */
void es__tuner_observe_pruned_pass(es__tuner *t, int32_t g, double ms);
/* After a pruning call's verification: tree (its skip marks what thr pruned), exit_p[i] each
 * node's early-exit probability (-1 where not computed), the accepted path (root first) and
 * whether the target's next token was a pruned child of the path's last node. Counts for every
 * candidate only after an observation call (thr the smallest candidate). */
void es__tuner_observe_prune(es__tuner *t, const es__tree *tree, const float *exit_p, float thr, const int32_t *path,
                             int32_t n_path, bool cut);
/* The pruning call's measured overhead o (its stream pass's extra included) and per-node saving
 * u in ms; false while unknown. */
bool es__tuner_prune_costs(const es__tuner *t, double *o, double *u);

#endif /* ES_DECODE_SPEC_TUNE_H */
