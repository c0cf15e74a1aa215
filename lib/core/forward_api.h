/* forward_api.h: the one internal interface between decoding strategies (lib/decode, lib/multi)
 * and the forward pass. A strategy sees a context only through this header and the public API in
 * edgespec.h: it forwards a batch or a token tree with a call descriptor (es__forward), reads
 * logits (es_logits) and stream logits (es__stream_logits), learns what pruning removed
 * (es__pruned), commits an accepted path (es_commit) or rolls back (es_truncate), and asks what
 * a context can do (es__context_caps). It never sees es_context's layout, a backend or its vtable,
 * and nothing it passes reaches a backend as a hint about who is calling: the call descriptor
 * says what to compute, never how. The utility headers below (clocks, errors and allocation,
 * token trees, the sampler's distributions) know nothing of contexts either. */
#ifndef ES_CORE_FORWARD_API_H
#define ES_CORE_FORWARD_API_H

#include "../../platform/platform.h"
#include "common.h"
#include "sampler.h"
#include "spec_attn.h"
#include "tree.h"

/* What one forward call computes beyond the main stream's logits. A zeroed descriptor (or
 * NULL) is a plain forward, es_forward. */
typedef struct es__call {
    int32_t n_streams;     /* Speculative Streaming (papers/speculative-streaming.txt Eq. 2, 3): γ
                              stream rows per tree token in the adapter's MSA layers, whose logits
                              es__stream_logits then reads for any surviving token until the next
                              forward, commit or truncate; 0 = none, at most the adapter's γ     */
    float prune_threshold; /* > 0: tree pruning (3.2.3): a token goes, with its subtree, when its
                              probability under its parent's early exit is below this; pruned
                              tokens get no logits, no streams and no KV and cannot be committed;
                              0 = none, at most 1                                                */
} es__call;

/* ALSpec (papers/alspec-attention-level-speculation.txt, Algorithm 1 on one context, with
 * Algorithm 3's kernel): what es__forward_alspec computes besides a plain forward. */
typedef struct es__alspec_call {
    int32_t chunk;                /* S: positions per KV chunk, > 0, a multiple of es__caps.alspec_tile */
    float lambda;                 /* a layer goes on with its speculation when ||spec - A||_2 <
                                     lambda ||A||_2 over all heads; 0 = never (the plain forward)       */
    const uint8_t *force_miss;    /* [n_layer] or NULL: 1 = that layer goes on with the exact A
                                     whatever the check (tests force misses with it)                    */
    es__spec_verdict *verdicts;   /* [n_layer] out: each layer's check; hit = the speculation was used  */
} es__alspec_call;

/* A forward of one token after the committed ones (a batch of one) in which every layer's
 * attention is the speculative flash decode: the layers whose speculation hits go on with it,
 * the others with the exact attention, which is the plain attention bit for bit (lambda = 0, or
 * every layer in force_miss, gives es_forward's logits and KV exactly). Fails with
 * ES_ERR_UNSUPPORTED when the backend has no speculative attention (es__caps.alspec_tile 0). */
es_status es__forward_alspec(es_context *ctx, const es_batch *batch, const es__alspec_call *al);

/* ALSpec over two contexts (Algorithm 2, lib/multi/alspec_pair.c): a decode token's forward cut
 * at every layer's attention, so that two contexts (two devices) can each run part of it. The
 * context keeps the token's provisional state between its parts like one forward call's (es_commit
 * commits it; the logits are valid after the part that reached the output head). */
enum {
    ES__AL_ENTER, /* layer -1: the token's embedding, then layer 0's pre-attention ops (norm, Q/K/V,
                     RoPE, its KV written). layer l >= 0: from x_in and att_in, layer l's
                     post-attention ops (output projection and residual, FFN), then layer l + 1's
                     pre-attention ops, or after the last layer the output head (the logits)   */
    ES__AL_SPEC,  /* layer l's speculation, the first half of its speculative flash decode: the
                     first and last chunks on the query of the context's last part, which must
                     have been ENTER(l - 1), at 2S keys or more; spec_out, verdict->valid. Their
                     partials stay in the context for the ATTN part, so a caller can ship the
                     speculation while the middle chunks run (Algorithm 2's overlap on a hit)  */
    ES__AL_ATTN   /* the second half, right after SPEC(l): the middle chunks merged with the
                     speculation's partials, the plain attention's output bit for bit, and the
                     check's sums; nothing is gated (verdict->hit stays false)                 */
};
typedef struct es__alspec_part {
    int32_t op;                /* ES__AL_ENTER, ES__AL_SPEC or ES__AL_ATTN                       */
    int32_t layer;             /* as above                                                       */
    int32_t chunk;             /* SPEC: S, a multiple of es__caps.alspec_tile                    */
    const float *x_in;         /* ENTER, layer >= 0: [n_embd] the residual before layer's attention
                                  branch was added                                              */
    const float *att_in;       /* ENTER, layer >= 0: [n_head * head_dim] layer's attention output */
    float *x_out;              /* ENTER: [n_embd] the residual entering the next layer (NULL = not
                                  wanted; not written after the last layer)                      */
    float *spec_out;           /* SPEC: [n_head * head_dim] the speculation                      */
    float *exact_out;          /* ATTN: [n_head * head_dim] the exact output, the plain attention's */
    es__spec_verdict *verdict; /* SPEC out: valid; ATTN out: valid, err2, norm2                  */
} es__alspec_part;

/* One part of the decode token batch (one token after the committed ones). */
es_status es__forward_alspec_part(es_context *ctx, const es_batch *batch, const es__alspec_part *part);

/* ALSpec over two contexts with the gating on the devices (Algorithm 2 with priority gating,
 * section 4.2): where both contexts' backends can (two Vulkan devices with conditional rendering
 * and timeline semaphores), the host records the token's whole op sequence on both devices at
 * once; each device reads from flags the devices write whether it is a layer's sender or receiver
 * and whether the check missed, so no host round trip decides anything per layer. The pair in
 * lib/multi/alspec_pair.c uses it when es__dev_pair_create succeeds and gates on the host
 * otherwise. */
typedef struct es__dev_pair es__dev_pair;

/* ES_ERR_UNSUPPORTED when the contexts' backends cannot (a CPU backend, different kinds, a
 * device without the extensions); the same preconditions as es__alspec_pair_create otherwise. */
es_status es__dev_pair_create(es_context *a, es_context *b, int32_t chunk, es__dev_pair **out);
void es__dev_pair_free(es__dev_pair *p);
/* Decodes token (one after the committed ones, the same n_past on both, at least 2S keys) on
 * both contexts, leaving it provisional on each (es_commit them): call->verdicts[l] as
 * es__forward_alspec's, logits [n_vocab]. Afterwards both caches hold each layer's slot as the
 * layer's sender wrote it. On failure neither context holds a provisional token, and the pair
 * decodes no more (its relay has stopped): free it. */
es_status es__dev_pair_forward(es__dev_pair *p, int32_t token, const es__alspec_call *call, float *logits);

/* One KV slot of one layer to or from kv: [K, V][n_head_kv][head_dim] floats; pos a committed
 * slot or the provisional one of the last forward call (pos <= n_past). */
es_status es__kv_slot(es_context *ctx, int32_t layer, int32_t pos, float *kv, bool write);

/* es_forward with a call descriptor (NULL = a plain forward). Fails with a clear message when
 * the context's model has no adapter for streams or pruning, or its backend no multi-stream
 * attention (es__context_caps says beforehand). On failure the context is as before the call. */
es_status es__forward(es_context *ctx, const es_batch *batch, const es__call *call);

/* Whether batch token i of the last forward call was removed by tree pruning (false after a
 * commit or for an index outside the batch). */
bool es__pruned(const es_context *ctx, int32_t i);

/* The probability of batch token i's token under its parent's early exit in the last forward
 * call, which pruned (prune_threshold > 0): what pruning compared with the threshold; -1 where
 * it was not computed (no pruning, a root, a token below a pruned one, an index outside). */
float es__exit_prob(const es_context *ctx, int32_t i);

/* The logits [g][n_vocab] of the first g streams of batch token i of the last forward call,
 * which had n_streams > 0: stream j (row j - 1) predicts the token j + 1 positions after token
 * i. g = 0 means all of the call's streams; fewer streams cost less and give the same values.
 * Owned by the context, valid until the next forward or stream_logits call. */
es_status es__stream_logits(es_context *ctx, int32_t i, int32_t g, const float **logits);

/* What a context can do and its sizes, for strategies sizing their work. */
typedef struct es__caps {
    int32_t n_vocab;
    int32_t n_ctx;                /* KV slots                                                  */
    int32_t n_batch;              /* most tokens per forward call                              */
    int32_t n_streams;            /* the adapter's γ where streams can run (adapter on the model
                                     and multi-stream attention in the backend), else 0       */
    bool can_prune;               /* tree pruning can run (n_streams > 0 and pruning tensors,
                                     the prune layer before the output)                        */
    char why_no_streams[320];     /* why n_streams is 0, naming the model or backend ("" when
                                     it is not), to follow "Speculative Streaming ..."         */
    es_status no_streams;         /* and the status to report: ES_ERR_INVALID_ARGUMENT (no
                                     adapter) or ES_ERR_UNSUPPORTED (the backend); ES_OK       */
    const es_allocator *alloc;    /* the context's allocator (NULL = the C library)            */
    es_backend *backend;          /* where it runs, for a strategy that makes more contexts like
                                     it (DSI's target servers); never called through            */
    es_backend_type backend_type;
    int32_t alspec_tile;          /* ALSpec's chunks are multiples of this; 0 = the backend has
                                     no speculative attention                                 */
    int32_t n_layer;
} es__caps;

void es__context_caps(const es_context *ctx, es__caps *out);

/* The context's error record, where a strategy that works on the caller's context (es_generate)
 * leaves its message for es_context_errmsg. */
es__err *es__context_err(es_context *ctx);

/* A strategy's own cancellation of the forward call running on ctx (any thread): as
 * es_context_abort, but told apart from the application's (es__context_app_abort_taken) and
 * dropped by es__context_abort_clear. DSI preempts its workers' calls with it. */
void es__context_abort_own(es_context *ctx);
/* Drops a request of es__context_abort_own that no forward call has taken yet (the
 * application's stay); returns whether there was one. For a strategy that aborted a worker's
 * call which ended before it looked: the request must not cancel the worker's next, unrelated
 * call. */
bool es__context_abort_clear(es_context *ctx);
/* Whether the last es_forward on ctx took a request of the application's (es_context_abort),
 * alone or with the strategy's own: a call cancelled for both ends the generation, not only
 * the preempted work (the thread that made the call). */
bool es__context_app_abort_taken(es_context *ctx);

#endif /* ES_CORE_FORWARD_API_H */
