/* msa.h: Speculative Streaming in the CPU forward pass (papers/speculative-streaming.txt 3.2):
 * tree pruning with the early-exit adapter at the input of the prune layer (3.2.3), and the γ
 * speculative streams of every remaining tree node through the top Ns layers with multi-stream
 * attention (Eq. 2, 3), then their logits on demand. forward.c calls the hooks from inside its
 * pool job; the main stream's computation is untouched, so its logits stay bit-identical to a
 * forward without streams. */
#ifndef ES_CPU_MSA_H
#define ES_CPU_MSA_H

#include "cpu.h"

struct es__ss_adapter;

/* One forward call's Speculative Streaming work. f is the forward's own copy of the call:
 * pruning narrows f->out_rows / f->n_out to the tokens that survive. */
typedef struct es__msa_job {
    es__fwd *f;
    const es__hparams *hp;
    const es__cpu_weights *w;
    es__cpu_ctx *c;
    const es__kern *k;
    es__pool *pool;
    int32_t n_ctx;
    const struct es__ss_adapter *ss;
    struct es__msa *m;
} es__msa_job;

/* Before the pool job, on the calling thread: sizes the context's stream state for f and fills
 * job (f is the caller's mutable copy of the call). */
es_status es__msa_prepare(es_context *ctx, es__fwd *f, es__msa_job *job);
/* Inside the pool job, on every thread: before layer il runs (pruning at the prune layer, the
 * streams' starting state at the first MSA layer), and after the last layer (the streams). */
void es__msa_before_layer(es__msa_job *J, int32_t il, int ith, int nth);
void es__msa_after_layers(es__msa_job *J, int ith, int nth);
/* After the pool job: puts the logits rows of the surviving tokens back where the core expects
 * them (row r for the original out_rows[r]). */
void es__msa_finish(es__msa_job *J, const es__fwd *orig);

/* The vtable's stream_logits: out [g][n_vocab] for batch token i of the last forward. */
es_status es__msa_stream_logits(es_context *ctx, int32_t i, int32_t g, float *out);
void es__msa_free(es__cpu_ctx *c, const es_allocator *a);
/* kv_compact's sources in the cache's slots: the core's batch indices, or after pruning compacted
 * the batch, their compacted rows (keep never holds a pruned token). */
const int32_t *es__msa_map_keep(es__cpu_ctx *c, const int32_t *keep, int32_t n_keep);

#endif /* ES_CPU_MSA_H */
