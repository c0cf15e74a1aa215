/* dsi_sched.h: the scheduler of distributed speculative inference (DSI; Timor et al., Algorithm 1
 * with lookahead and preemption), independent of models: a drafter thread that drafts ahead
 * without waiting, a pool of target-server threads that verify drafted blocks concurrently, and
 * a coordinator (the thread calling es__dsi_sched_step) that decides tokens from the server
 * that holds the rows of the last decided token (the current verifier, relabelled as tokens are
 * decided) and preempts every piece of work built on a rejected draft. What a forward call or a
 * verification is comes through a table of operations (es__dsi_ops), so lib/multi/dsi.c drives
 * real contexts with it and the latency-controlled harness (tests/multi/dsi_synth.h) drives
 * sleeping, oracle-answering stand-ins with the very same code.
 *
 * Positions: seq[0..n_dec) are decided (seq[n_dec - 1], the root, is decided but no target has
 * computed its successor yet), seq[n_dec..n_seq) are drafts. A job forwards seq[keep..n) on a
 * server whose KV holds seq[0..keep) and keeps the target's logits rows of positions [lo, n): row
 * q gives the token at q + 1. Every worker's KV is a prefix of what it was last given; the
 * scheduler tracks how much of it still agrees with seq. */
#ifndef ES_MULTI_DSI_SCHED_H
#define ES_MULTI_DSI_SCHED_H

#include "forward_api.h"

/* Who an operation is for: the drafter, or target server 0.. */
#define ES__DSI_DRAFTER (-1)

typedef struct es__dsi_ops {
    void *user;
    /* The drafter: its KV holds at least seq[0..keep); it truncates to keep, forwards
     * seq[keep..n) (committing them) and, when token is not NULL, drafts the token at position n
     * from the last logits (history seq[0..n)). token NULL: a prefill, no logits. Runs on the
     * drafter's thread; ES_ERR_CANCELLED when aborted. Errors go to err. */
    es_status (*draft)(void *user, const int32_t *seq, int32_t keep, int32_t n, int32_t *token, es__err *err);
    /* Target server `server`: truncates to keep, forwards seq[keep..n) (committing them) and
     * keeps the logits rows of positions [lo, n) in result slot `slot` (lo == n: a prefill).
     * Runs on the server's thread. */
    es_status (*target)(void *user, int32_t server, const int32_t *seq, int32_t keep, int32_t n, int32_t lo,
                        int32_t slot, es__err *err);
    /* Asks the running call of `who` to stop (any thread; the scheduler holds its lock). */
    void (*abort)(void *user, int32_t who);
    /* Drops an abort request of `who` that its call did not take (the worker's thread); the
     * application's own requests stay. */
    void (*abort_clear)(void *user, int32_t who);
    /* Whether the call of `who` that just failed with ES_ERR_CANCELLED took the application's
     * request (es_context_abort on the worker's context), not only the scheduler's: then the
     * generation ends, even when the scheduler had dropped that call's work (the worker's
     * thread). */
    bool (*app_cancelled)(void *user, int32_t who);
    /* The coordinator's decision: chain[0] is the root at position root_pos, chain[1..n_chain)
     * the drafts after it; result slot `slot` holds the target's rows of positions [lo, ...)
     * (lo <= root_pos) for the first n_rows chain tokens (n_chain is n_rows, or n_rows + 1 when
     * the draft after the last row is known: the candidate of the last decision). Writes the
     * decided tokens of positions root_pos + 1, ... (accepted drafts, then the target's own
     * token; 1..min(cap, n_rows) of them) and makes them its own (DSI: es_spec's sequence).
     * Errors go to err. */
    es_status (*verify)(void *user, int32_t slot, int32_t lo, const int32_t *chain, int32_t n_chain, int32_t n_rows,
                        int32_t root_pos, int32_t cap, int32_t *tokens, int32_t *n_tokens, es__err *err);
    /* Whether a decided or drafted token ends generation (nothing is drafted after it). */
    bool (*is_eog)(void *user, int32_t token);
} es__dsi_ops;

typedef struct es__dsi_cfg {
    int32_t n_servers;  /* target servers, >= 1                                               */
    int32_t lookahead;  /* drafts per verification block, >= 1                                */
    int32_t n_ctx;      /* positions 0..n_ctx - 1 exist                                      */
    int32_t n_slots;    /* result slots the ops hold, es__dsi_slots(n_servers)               */
    bool wait_draft;    /* decide the token after a job's last row only with the draft there
                           (waiting for the drafter when it is behind, unless it will never
                           draft it): rejection sampling then decides every position with the
                           same candidates whatever the timing, so its tokens repeat for a seed */
} es__dsi_cfg;

/* The result slots a scheduler of n_servers servers uses. */
int32_t es__dsi_slots(int32_t n_servers);

/* Most rows a job keeps (a slot's size): the root and a block of drafts. A walk's chain has one
 * token more: the draft after the last row. */
static inline int32_t es__dsi_max_rows(int32_t lookahead) {
    return lookahead + 1;
}

/* How far the drafter runs ahead of the root: the blocks every server could hold, and one more. */
int32_t es__dsi_max_ahead(int32_t n_servers, int32_t lookahead);

typedef struct es__dsi_sched es__dsi_sched;

/* Starts the drafter and server threads (idle until a step). */
es_status es__dsi_sched_create(const es__dsi_cfg *cfg, const es__dsi_ops *ops, const es_allocator *a, es__err *err,
                               es__dsi_sched **out);
/* Stops every worker (cancelling what runs) and joins them. NULL is a no-op. */
void es__dsi_sched_free(es__dsi_sched *d);

/* Stops the workers: running calls are aborted, results and drafts dropped; returns when every
 * worker is idle. The next step starts them again. */
void es__dsi_sched_quiesce(es__dsi_sched *d);

/* After a quiesce: the decided sequence is now dec[0..n_dec) (a feed appended to it or a rewind
 * cut it); drafts are gone and each worker is known to agree with it up to where it agreed with
 * both. */
void es__dsi_sched_reset(es__dsi_sched *d, const int32_t *dec, int32_t n_dec);

/* After a quiesce: worker `who`'s KV was changed from outside and holds seq[0..n) now. */
void es__dsi_sched_set_kv(es__dsi_sched *d, int32_t who, int32_t n);
/* How much of worker who's KV agrees with the decided sequence (call after a quiesce). */
int32_t es__dsi_sched_kv(const es__dsi_sched *d, int32_t who);

/* After a reset: every worker reads the decided tokens before the root, all at once; returns
 * when they have (the first failure, in err). */
es_status es__dsi_sched_prefill(es__dsi_sched *d, es__err *err);

/* One step: runs the workers and decides 1..cap tokens (fewer than cap when no further decision
 * is ready; stops after an end-of-generation token), written to tokens. A worker's failure is
 * reported here (once) when no token was decided yet. */
es_status es__dsi_sched_step(es__dsi_sched *d, int32_t cap, int32_t *tokens, int32_t *n_tokens, es__err *err);

/* The counters so far (n_targets, the call latencies and the ms fields of es_dsi_stats). */
void es__dsi_sched_stats(es__dsi_sched *d, es_dsi_stats *out);

#endif /* ES_MULTI_DSI_SCHED_H */
