/* msa.h: Speculative Streaming in the CPU forward pass (papers/speculative-streaming.txt 3.2):
 * tree pruning with the early-exit adapter at the input of the prune layer (3.2.3), and the γ
 * speculative streams of a surviving tree node through the top Ns layers with multi-stream
 * attention (Eq. 2, 3) when its stream logits are asked. forward.c calls the hooks from inside
 * its pool job; the main stream's computation is untouched, so its logits stay bit-identical to a
 * forward without streams. */
#ifndef ES_CPU_MSA_H
#define ES_CPU_MSA_H

#include "cpu.h"

struct es__ss_adapter;

/* One forward call's Speculative Streaming work. f is the forward's own copy of the call:
 * pruning narrows it to the survivors (backend.h). */
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
/* Inside the pool job, on every thread, before layer il runs: pruning at the prune layer, the
 * streams' starting state (Eq. 3's M) kept at the first MSA layer. */
void es__msa_before_layer(es__msa_job *J, int32_t il, int ith, int nth);

/* ---- streams that ride in the forward's phases (msa_fused.c): every survivor's, where the
 * context's measured cap allows (es__msa_measure_fuse); then stream_logits only runs the head */

/* Whether this forward's streams ride (decided once the survivors are known). */
bool es__msa_fuses(const es__msa_job *J);
/* Stream rows riding in layer il's phases (il = n_layer: the final norm); 0 = none. */
int64_t es__msa_fz_rows(const es__msa_job *J, int32_t il);
/* Row r's share of layer il's phases: the attention norm (with the previous layer's down
 * projection's LoRA and residual, or Eq. 3 at the first MSA layer; il = n_layer: the output
 * norm), the RoPE phase, attention task (row, head), and the FFN norm. */
void es__msa_fz_norm(const es__msa_job *J, int32_t il, int64_t r, int ith);
void es__msa_fz_rope(const es__msa_job *J, int32_t il, int64_t r, int ith);
void es__msa_fz_attend(const es__msa_job *J, int32_t il, int64_t task, int ith);
void es__msa_fz_ffn_norm(const es__msa_job *J, int32_t il, int64_t r, int ith);
/* The stream rows' share of a matrix phase's chunk [lo, hi) of output rows, right after the main
 * rows': the weights are in the core's cache. */
typedef enum { ES__FZ_QKV, ES__FZ_WO, ES__FZ_FFN, ES__FZ_DOWN } es__fz_op;
void es__msa_fz_chunk(const es__msa_job *J, int32_t il, es__fz_op op, int64_t lo, int64_t hi, int ith);
/* At context creation (an adapter with streams): times chains of 1, 2, 4, 8 tokens with their
 * streams riding against a stream pass and sets the cap where riding stops being faster; or takes
 * what an earlier context of the model measured with the same threads and sizes. */
es_status es__msa_measure_fuse(es_context *ctx);
/* Sets the cap (rows; 0 = every stream from a pass); tests force either path with it. */
void es__msa_set_fuse_rows(es_context *ctx, int32_t rows);
/* The cap in force. */
int32_t es__msa_fuse_rows(const es_context *ctx);

/* The vtable's stream_logits: out [g][n_vocab] for survivor i of the last forward. */
es_status es__msa_stream_logits(es_context *ctx, int32_t i, int32_t g, float *out);
void es__msa_free(es__cpu_ctx *c, const es_allocator *a);
#endif /* ES_CPU_MSA_H */
