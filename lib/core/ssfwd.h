/* ssfwd.h: the context's Speculative Streaming forward call (internal; lib/decode uses it): a
 * batch as es_forward takes it, plus γ stream rows per token in the adapter's MSA layers and tree
 * pruning (the es__fwd fields in backend.h), then the streams' logits per token.
 * Deliberately not public: what streams predict depends on the adapter a model was trained with,
 * and only the Speculative Streaming strategy knows how to use them. */
#ifndef ES_CORE_SSFWD_H
#define ES_CORE_SSFWD_H

#include "backend.h"

/* es_forward with n_streams (0..the adapter's γ) stream rows per token and, when
 * prune_threshold > 0, tree pruning at the adapter's prune layer. Needs an SS adapter on the
 * context's model and a backend with multi-stream attention. */
es_status es__forward_ss(es_context *ctx, const es_batch *batch, int32_t n_streams, float prune_threshold);

/* The same with a choice of when the streams run: lazy = only for the tokens whose stream logits
 * are asked later (before the next commit or forward), with the same results. The Speculative
 * Streaming strategy asks for one token per step, so lazy saves all other tokens' stream rows. */
es_status es__forward_ss_ex(es_context *ctx, const es_batch *batch, int32_t n_streams, float prune_threshold,
                            bool lazy);

/* Whether batch token i of the last forward call was pruned (false after a commit). */
bool es__token_pruned(const es_context *ctx, int32_t i);

/* The logits [n_streams][n_vocab] of batch token i's streams in the last es__forward_ss call:
 * stream j (row j - 1) predicts the token j + 1 positions after token i. Owned by the context,
 * valid until the next forward or stream_logits call. */
es_status es__stream_logits(es_context *ctx, int32_t i, const float **logits);

/* The same for the first g (1..n_streams) streams only: the same values, less work. */
es_status es__stream_logits_n(es_context *ctx, int32_t i, int32_t g, const float **logits);

#endif /* ES_CORE_SSFWD_H */
