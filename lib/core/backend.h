/* backend.h: the backend-neutral forward API between the core (contexts, strategies) and the
 * backends (lib/cpu, lib/vulkan). The core validates every batch and builds an es__fwd; a backend
 * only computes. Backends never know which strategy calls them. */
#ifndef ES_CORE_BACKEND_H
#define ES_CORE_BACKEND_H

#include "batch.h"
#include "common.h"
#include "model.h"
#include "spec_attn.h"

#include <pthread.h>
#include <stdatomic.h>

/* One validated forward call. The batch's keys/values go to the provisional cache slots
 * [n_past, n_past + n). Token j attends to committed slots [0, n_past) and to the provisional slots
 * of its ancestors and itself, i.e. in-batch i with dfs_start[i] <= dfs_start[j] and
 * dfs_end[j] <= dfs_end[i]. The batch is in DFS pre-order (dfs_start[i] == i) and
 * pos[j] == n_past + depth(j), so the keys a token sees are exactly positions 0..pos[j], one each:
 * backends reduce attention over them in position order, which keeps logits batch-invariant.
 *
 * Pruning (prune_threshold > 0, prune.h): the backend decides with es__prune_decide at the input of
 * the adapter's prune layer and goes on with the survivors only (es__prune_compact): survivor r
 * (the r-th unpruned token in batch order) holds provisional slot n_past + r from then on, logits
 * row k is the k-th surviving row of out_rows, and kv_compact and stream_logits take survivor
 * indices. Without pruning, survivor r is batch token r. The core translates batch indices. */
typedef struct es__fwd {
    int32_t n;               /* tokens in the batch                                   */
    int32_t n_past;          /* committed tokens                                      */
    const int32_t *tokens;   /* [n]                                                   */
    const int32_t *pos;      /* [n] absolute positions                                */
    const int32_t *dfs_start;/* [n] == i                                              */
    const int32_t *dfs_end;  /* [n] last pre-order index in the token's subtree       */
    const int32_t *parent;   /* [n] batch index of the parent, -1 for a root           */
    int32_t n_out;           /* rows that want logits                                 */
    const int32_t *out_rows; /* [n_out] ascending batch indices                       */
    float *logits;           /* [n_out, n_vocab] written by the backend (survivors' rows first) */
    /* Speculative Streaming (papers/speculative-streaming.txt); zero in a plain forward. The
     * adapter is ctx->model->ss. Neither changes the surviving tokens' results: their logits stay
     * bit-identical to a forward without streams or pruning. */
    int32_t n_streams;       /* γ stream rows per token in the adapter's MSA layers (Eq. 2, 3):
                                stream_logits may then be asked for any survivor until the next
                                call; when the backend computes them is its own policy; 0 = none */
    float prune_threshold;   /* > 0: tree pruning (3.2.3), above; 0 = none                      */
    uint8_t *pruned;         /* [n] out, zeroed by the caller: 1 = pruned                    */
    /* ALSpec (forward_api.h's es__alspec_call), only for one token in a chain; NULL in a plain
     * forward. Every layer's attention is the speculative flash decode (spec_attn.h); a layer whose
     * speculation is valid, within lambda and not forced to miss goes on with the speculation,
     * every other layer with the exact A, the plain attention bit for bit. */
    const struct es__alspec_call *alspec;
    /* ALSpec over two contexts (forward_api.h's es__alspec_part): one part of a decode token
     * instead of the whole forward; NULL otherwise. alspec is NULL with it. */
    const struct es__alspec_part *part;
    /* Pruning: [n] out, each decided child's parent-to-child probability at the prune layer (what
     * other thresholds would have pruned: es__exit_prob, lib/decode/spec_prune.c); NULL = not
     * wanted. */
    float *exit_p;
} es__fwd;

typedef struct es__backend_vtbl {
    const char *name;
    /* Creates the backend's private state in b->impl (device selection, thread pool, ...). */
    es_status (*init)(es_backend *b, const es_backend_params *p);
    void (*destroy)(es_backend *b);
    /* Uploads or prepares model weights; *weights is handed back to later calls and release. */
    es_status (*model_upload)(es_backend *b, const es_model *m, void **weights);
    void (*model_release)(es_backend *b, void *weights);
    /* Allocates the KV cache (n_ctx slots) and scratch for n_batch tokens in ctx->impl. */
    es_status (*ctx_init)(es_context *ctx);
    void (*ctx_destroy)(es_context *ctx);
    es_status (*forward)(es_context *ctx, const es__fwd *f);
    /* Moves provisional slot n_past + keep[r] to n_past + r for r < n_keep (keep ascending,
     * survivor indices). */
    es_status (*kv_compact)(es_context *ctx, const int32_t *keep, int32_t n_keep);
    /* Speculative Streaming: the logits [g][n_vocab] of the first g (1..n_streams) streams of
     * survivor i of the last forward call (which had n_streams > 0); stream j
     * depends on streams <= j only, so fewer streams cost less and change nothing. NULL = the
     * backend has no multi-stream attention and rejects n_streams > 0 and prune_threshold > 0. */
    es_status (*stream_logits)(es_context *ctx, int32_t i, int32_t g, float *out);
    /* Context shift: committed slots [n_keep + n_discard, n_past) move to [n_keep, n_past -
     * n_discard), values as they are, keys rotated back by n_discard positions. */
    es_status (*kv_shift)(es_context *ctx, int32_t n_keep, int32_t n_discard);
    /* The cache of committed slots [0, n) to or from buf: [n_layer][K, V][n_head_kv][n][head_dim]
     * floats (session files). */
    es_status (*kv_io)(es_context *ctx, int32_t n, float *buf, bool write);
    /* ALSpec (es__fwd.alspec_chunk): chunks must be multiples of this many positions, the tile of
     * the backend's plain attention; 0 = the backend has no speculative attention. */
    int32_t alspec_tile;
    /* Slot pos of layer's cache to or from buf: [K, V][n_head_kv][head_dim] floats (es__kv_slot). */
    es_status (*kv_slot)(es_context *ctx, int32_t layer, int32_t pos, float *buf, bool write);
    /* ALSpec's two-device token with the gating on the devices (forward_api.h's es__dev_pair):
     * a pair of contexts of two backends of this kind; NULL = none (the host gates). */
    es_status (*pair_create)(es_context *a, es_context *b, int32_t chunk, void **out);
    void (*pair_free)(void *pair);
    es_status (*pair_forward)(void *pair, const es__fwd *fa, const es__fwd *fb, const struct es__alspec_call *call,
                              float *logits);
} es__backend_vtbl;

typedef struct es__upload {
    const es_model *model;
    void *weights;
    int32_t refs;
} es__upload;

struct es_backend {
    const es__backend_vtbl *vt;
    es_backend_type type;
    es_allocator alloc_copy;
    const es_allocator *alloc;
    es__log log;
    es__err err;
    int32_t n_threads;
    bool profile;
    es_progress_fn progress_fn;
    void *progress_user;
    char name[256];
    pthread_mutex_t lock;       /* serialises forward calls from contexts sharing the backend */
    es__upload *uploads;        /* models whose weights this backend holds */
    int32_t n_uploads;
    /* Counters and the per-op profile, kept by the backend implementation; reported by
     * es_backend_get_stats and es_backend_profile. */
    es_backend_stats stats;
    es_profile_entry prof[32];
    int32_t n_prof;
    void *impl;
};

struct es_context {
    const es_model *model;
    es_backend *backend;
    bool owns_backend;
    void *weights;              /* the backend's upload of model */
    es_allocator alloc_copy;
    const es_allocator *alloc;
    es__log log;
    es__err err;
    int32_t n_ctx;
    int32_t n_batch;
    int32_t n_past;
    /* The last forward call's batch, kept for es_commit's path check and es_logits. */
    int32_t n_provisional;      /* 0 after a commit */
    int32_t *prov_parent;       /* [n_batch] */
    int32_t *logits_row;        /* [n_batch] row in logits or -1 */
    int32_t *prov_row;          /* [n_batch] survivor index (es__fwd), -1 when pruned          */
    float *logits;              /* [logits_cap, n_vocab] */
    int32_t logits_cap;
    uint8_t *prov_pruned;       /* [n_batch] tokens of the last batch removed by tree pruning */
    float *prov_exit;           /* [n_batch] their early-exit probabilities (es__exit_prob)     */
    int32_t prov_streams;       /* stream rows per token in the last forward call             */
    float *stream_logits;       /* [stream_cap, n_vocab] es__stream_logits' result            */
    int32_t stream_cap;
    /* A forward call's scratch, made with the context so calls allocate nothing */
    es__batch_scratch scratch;  /* [n_batch] each                                              */
    int32_t *keep_rows;         /* [n_batch] es_commit's keep as survivor indices              */
    /* Cancellation requests, set from any thread: ES__ABORT_APP (es_context_abort) and
     * ES__ABORT_OWN (a strategy preempting its own worker's call, es__context_abort_own). A
     * backend takes both with es__context_abort_take at its checks (between layers, before
     * submissions) and fails the call with ES_ERR_CANCELLED, leaving its committed KV untouched;
     * abort_taken keeps which requests the context's last es_forward took, so that a strategy
     * can tell the application's from its own. */
    atomic_int abort_req;
    atomic_int abort_taken;
    int32_t part_q_layer;       /* ALSpec parts: the layer whose query the last part left, or -1 */
    int32_t part_spec_layer;    /* ALSpec parts: the layer whose speculation the last part was, or -1 */
    void *impl;
};

/* Backend tables; a NULL entry means the backend was not built. */
extern const es__backend_vtbl es__cpu_backend;
extern const es__backend_vtbl *const es__vulkan_backend_ptr;

/* One entry of a device list (devices.c): the CPU backend ("host") or a Vulkan selector. */
typedef struct es__device_sel {
    bool host;
    char sel[64];            /* the entry, blanks trimmed; "" = the default Vulkan device */
} es__device_sel;
/* Splits a device list (es_backends_create) into out[cap]; *n = the entries. Checks only the
 * syntax and that non-host entries come with type Vulkan; which devices exist is the backend's. */
es_status es__device_list_parse(const char *list, es_backend_type type, es__device_sel *out, size_t cap, size_t *n);

/* Upload sharing (backend.c); the caller holds b->lock. */
es_status es__backend_acquire_model(es_backend *b, const es_model *m, void **weights);
void es__backend_release_model(es_backend *b, const es_model *m);

/* es_context's abort_req bits */
#define ES__ABORT_APP 1
#define ES__ABORT_OWN 2

/* Takes ctx's cancellation requests (any thread of its forward call); whether there were any. */
static inline bool es__context_abort_take(es_context *ctx) {
    const int req = atomic_exchange(&ctx->abort_req, 0);
    if (req) atomic_fetch_or(&ctx->abort_taken, req);
    return req != 0;
}

#endif /* ES_CORE_BACKEND_H */

