/* alspec_pair.h: ALSpec's Algorithm 2 (SGDC with priority gating,
 * ../shared/papers/alspec-attention-level-speculation.txt section 4.2) over two contexts of one
 * model, for the decoder in alspec.c. Weights and KV are replicated; each decode token goes layer
 * by layer through the context that holds the correct activations (the sender, the one with the
 * highest priority), which ships the speculation and the residual to the other (the receiver)
 * to run the post-attention ops ahead; the check keeps the receiver's work (the roles swap) or
 * discards it (the sender goes on with the exact attention). Gating is decided on the devices
 * where both can (forward_api.h's es__dev_pair), else on the host from the device-computed check,
 * one round trip per layer. */
#ifndef ES_MULTI_ALSPEC_PAIR_H
#define ES_MULTI_ALSPEC_PAIR_H

#include "forward_api.h"

typedef struct es__alspec_pair es__alspec_pair;

/* Pairs ctx (device 1, the first sender) with ctx2 (device 2): the same model, speculative
 * attention on both, chunk a multiple of both backends' tiles. Where both backends can gate on
 * their devices (es__dev_pair: two Vulkan devices) a token is recorded and submitted ahead on
 * both; host_gated asks for the host's gating all the same (tests and benchmarks compare them). */
es_status es__alspec_pair_create(es_context *ctx, es_context *ctx2, int32_t chunk, bool host_gated,
                                 es__alspec_pair **out);
/* Whether the devices gate (es__dev_pair) rather than the host. */
bool es__alspec_pair_device_gated(const es__alspec_pair *p);
void es__alspec_pair_free(es__alspec_pair *p);

/* The second context, for the exact forward calls that replicate a prompt on it. */
es_context *es__alspec_pair_second(const es__alspec_pair *p);

/* Decodes token (one after both contexts' committed ones, which must agree) and commits it on
 * both: call->verdicts[l] is layer l's check (hit: the receiver's work was kept), force_miss
 * forces misses; logits [n_vocab] out. Afterwards both caches agree slot for slot: each layer's
 * new slot is the one its sender wrote (a discarded receiver's slot is overwritten). Tokens with
 * fewer than 2S keys have no speculation: both contexts decode them exactly. On failure neither
 * context has committed the token. */
es_status es__alspec_pair_decode(es__alspec_pair *p, int32_t token, const es__alspec_call *call, float *logits,
                                 es__err *err);

#endif /* ES_MULTI_ALSPEC_PAIR_H */
