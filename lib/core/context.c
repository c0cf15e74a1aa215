/* context.c: es_context: KV-cache bookkeeping (committed and provisional tokens), batch
 * validation, logits storage. The numbers are computed by the backend through its vtable. */
#include "adapter.h"
#include "backend.h"
#include "forward_api.h"
#include "prune.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

es_context_params es_context_default_params(void) {
    es_context_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* The one place the zeros of es_context_params get their meaning, for model m (a NULL backend is
 * made by context_setup). Sizes were checked to be >= 0. */
static es_context_params resolve_params(const es_model *m, const es_context_params *params) {
    es_context_params p = *params;
    if (p.n_ctx == 0) p.n_ctx = m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    p.n_batch = ES__MIN(p.n_batch > 0 ? p.n_batch : 512, p.n_ctx);
    p.log_level = es__log_level(p.log_level);
    return p;
}

static void context_release(es_context *ctx) {
    /* Under the backend's lock like every other call into it: destroying a context frees device
     * memory (the backend's accounting), waits for the shared queue and returns command buffers
     * to the shared pool while other threads' contexts run on the same backend. */
    if (ctx->impl || ctx->weights) {
        pthread_mutex_lock(&ctx->backend->lock);
        if (ctx->impl) ctx->backend->vt->ctx_destroy(ctx);
        if (ctx->weights) es__backend_release_model(ctx->backend, ctx->model);
        pthread_mutex_unlock(&ctx->backend->lock);
    }
    es__free(ctx->alloc, ctx->prov_parent);
    es__free(ctx->alloc, ctx->logits_row);
    es__free(ctx->alloc, ctx->prov_row);
    es__free(ctx->alloc, ctx->scratch.pos);
    es__free(ctx->alloc, ctx->keep_rows);
    es__free(ctx->alloc, ctx->logits);
    es__free(ctx->alloc, ctx->prov_pruned);
    es__free(ctx->alloc, ctx->prov_exit);
    es__free(ctx->alloc, ctx->stream_logits);
    if (ctx->owns_backend) es_backend_free(ctx->backend);
}

void es_context_free(es_context *ctx) {
    if (!ctx) return;
    context_release(ctx);
    es_allocator copy;
    const es_allocator *a = NULL;
    if (ctx->alloc) {
        copy = *ctx->alloc;
        a = &copy;
    }
    es__free(a, ctx);
}

static es_status context_setup(es_context *ctx, const es_context_params *params) {
    const es_model *m = ctx->model;
    ES_RETURN_IF(!m->has_weights, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "es_context_create: model '%s' was loaded without weights (vocab_only)", m->path);
    ES_RETURN_IF(params->n_ctx < 0 || params->n_batch < 0, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "es_context_create: n_ctx %d / n_batch %d must not be negative", params->n_ctx, params->n_batch);
    const es_context_params rp = resolve_params(m, params), *p = &rp;
    ctx->n_ctx = p->n_ctx;
    ctx->n_batch = p->n_batch;
    ctx->log = (es__log){p->log_fn, p->log_user, p->log_level};
    if (p->backend) {
        ctx->backend = p->backend;
    } else {
        es_backend_params bp = es_backend_default_params();
        bp.log_fn = p->log_fn;
        bp.log_user = p->log_user;
        bp.log_level = p->log_level;
        bp.allocator = p->allocator;
        es_status s = es_backend_create(&bp, &ctx->backend);
        if (s != ES_OK) return es__fail(&ctx->err, s, "%s", es_last_error());
        ctx->owns_backend = true;
    }
    const size_t nb = (size_t)ctx->n_batch;
    ctx->prov_parent = es__calloc(ctx->alloc, nb, sizeof(int32_t));
    ctx->logits_row = es__calloc(ctx->alloc, nb, sizeof(int32_t));
    ctx->prov_row = es__calloc(ctx->alloc, nb, sizeof(int32_t));
    ctx->prov_pruned = es__calloc(ctx->alloc, nb, 1);
    ctx->prov_exit = es__calloc(ctx->alloc, nb, sizeof(float));
    ctx->keep_rows = es__calloc(ctx->alloc, nb, sizeof(int32_t));
    int32_t *scratch = es__calloc(ctx->alloc, 5 * nb, sizeof(int32_t));
    ctx->scratch = (es__batch_scratch){scratch, scratch + nb, scratch + 2 * nb, scratch + 3 * nb, scratch + 4 * nb,
                                       ctx->n_batch};
    ES_RETURN_IF(!ctx->prov_parent || !ctx->logits_row || !ctx->prov_row || !ctx->prov_pruned || !ctx->prov_exit ||
                     !ctx->keep_rows || !scratch,
                 &ctx->err, ES_ERR_OUT_OF_MEMORY, "es_context_create: out of memory");
    es_backend *b = ctx->backend;
    pthread_mutex_lock(&b->lock);
    es_status s = es__backend_acquire_model(b, m, &ctx->weights);
    if (s == ES_OK) {
        s = b->vt->ctx_init(ctx);
        if (s != ES_OK) {
            es__backend_release_model(b, m);
            ctx->weights = NULL;
            ctx->impl = NULL;
        }
    }
    /* the backend's message is read while the lock keeps other threads' calls from replacing it */
    if (s != ES_OK) es__fail(&ctx->err, s, "%s", b->err.msg[0] ? b->err.msg : es_last_error());
    pthread_mutex_unlock(&b->lock);
    return s;
}

es_status es_context_create(const es_model *model, const es_context_params *params, es_context **out) {
    if (!out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_context_create: out is NULL");
    *out = NULL;
    if (!model) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_context_create: model is NULL");
    es_context_params p = params ? *params : es_context_default_params();
    ES_TRY(ES__CHECK_RESERVED(&p, "es_context_params", NULL));
    es_context *ctx = es__calloc(p.allocator, 1, sizeof *ctx);
    if (!ctx) return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_context_create: out of memory");
    if (p.allocator) {
        ctx->alloc_copy = *p.allocator;
        ctx->alloc = &ctx->alloc_copy;
    }
    ctx->model = model;
    atomic_init(&ctx->abort_req, 0);
    atomic_init(&ctx->abort_taken, 0);
    ctx->part_q_layer = -1;
    ctx->part_spec_layer = -1;
    es_status s = context_setup(ctx, &p);
    if (s != ES_OK) {
        char msg[ES__ERRMSG_SIZE];
        memcpy(msg, ctx->err.msg, sizeof msg);
        es_context_free(ctx);
        return es__fail(NULL, s, "%s", msg);
    }
    *out = ctx;
    return ES_OK;
}

const char *es_context_errmsg(const es_context *ctx) {
    return ctx ? ctx->err.msg : "context is NULL";
}
int32_t es_context_n_ctx(const es_context *ctx) {
    return ctx ? ctx->n_ctx : 0;
}
int32_t es_context_n_past(const es_context *ctx) {
    return ctx ? ctx->n_past : 0;
}
const es_model *es_context_model(const es_context *ctx) {
    return ctx ? ctx->model : NULL;
}

void es_context_abort(es_context *ctx) {
    if (ctx) atomic_fetch_or(&ctx->abort_req, ES__ABORT_APP);
}

void es__context_abort_own(es_context *ctx) {
    atomic_fetch_or(&ctx->abort_req, ES__ABORT_OWN);
}

bool es__context_abort_clear(es_context *ctx) {
    return (atomic_fetch_and(&ctx->abort_req, ~ES__ABORT_OWN) & ES__ABORT_OWN) != 0;
}

bool es__context_app_abort_taken(es_context *ctx) {
    return (atomic_load(&ctx->abort_taken) & ES__ABORT_APP) != 0;
}

/* Grows the logits store to rows x n_vocab; on failure the old store is kept. */
static es_status reserve_logits(es_context *ctx, int32_t rows) {
    if (rows <= ctx->logits_cap) return ES_OK;
    size_t n;
    ES_RETURN_IF(!es__mul_size((size_t)rows, (size_t)ctx->model->hp.n_vocab, &n) || n > SIZE_MAX / sizeof(float),
                 &ctx->err, ES_ERR_OUT_OF_MEMORY, "es_forward: logits for %d rows overflow", rows);
    float *grown = es__realloc(ctx->alloc, ctx->logits, n * sizeof(float));
    ES_RETURN_IF(!grown, &ctx->err, ES_ERR_OUT_OF_MEMORY, "es_forward: out of memory for %d logits rows", rows);
    ctx->logits = grown;
    ctx->logits_cap = rows;
    return ES_OK;
}

void es__context_caps(const es_context *ctx, es__caps *out) {
    memset(out, 0, sizeof *out);
    const es_model *m = ctx->model;
    const es__ss_adapter *ss = m->ss;
    out->n_vocab = m->hp.n_vocab;
    out->n_ctx = ctx->n_ctx;
    out->n_batch = ctx->n_batch;
    out->alloc = ctx->alloc;
    out->backend = ctx->backend;
    out->backend_type = ctx->backend->type;
    /* ALSpec's speculative attention is the plain one's partials without a window or a cap */
    out->alspec_tile = m->hp.n_swa > 0 || m->hp.attn_softcap > 0.0f ? 0 : ctx->backend->vt->alspec_tile;
    out->n_layer = m->hp.n_layer;
    if (!ss) {
        out->no_streams = ES_ERR_INVALID_ARGUMENT;
        snprintf(out->why_no_streams, sizeof out->why_no_streams,
                 "needs an adapter on model '%s' (es_model_load_adapter)", m->path);
    } else if (!ctx->backend->vt->stream_logits) {
        out->no_streams = ES_ERR_UNSUPPORTED;
        snprintf(out->why_no_streams, sizeof out->why_no_streams,
                 "needs multi-stream attention, which the %s backend does not have", ctx->backend->vt->name);
    } else {
        out->n_streams = ss->n_streams;
    }
    out->can_prune = out->n_streams > 0 && ss->prune_rank > 0 && ss->prune_layer < m->hp.n_layer;
}

es__err *es__context_err(es_context *ctx) {
    return &ctx->err;
}

/* Checks a forward call's descriptor against what the context can do. */
static es_status check_alspec(es_context *ctx, const es__alspec_call *al, const es_batch *batch) {
    const int32_t tile = ctx->backend->vt->alspec_tile;
    ES_RETURN_IF(tile == 0, &ctx->err, ES_ERR_UNSUPPORTED,
                 "forward: ALSpec asked, but the %s backend has no speculative attention", ctx->backend->vt->name);
    ES_RETURN_IF(ctx->model->hp.n_swa > 0 || ctx->model->hp.attn_softcap > 0.0f, &ctx->err, ES_ERR_UNSUPPORTED,
                 "forward: ALSpec asked, but model '%s' has sliding-window or soft-capped attention, which "
                 "speculative attention does not do yet", ctx->model->path);
    ES_RETURN_IF(al->chunk <= 0 || al->chunk % tile, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: ALSpec chunk %d is not a positive multiple of the %s backend's attention tile %d",
                 al->chunk, ctx->backend->vt->name, tile);
    ES_RETURN_IF(!(al->lambda >= 0.0f) || !al->verdicts, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: ALSpec lambda %g (must be >= 0) or no verdict array", (double)al->lambda);
    ES_RETURN_IF(!batch || batch->n_tokens != 1, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: ALSpec decodes one token after the committed ones, %d asked", batch ? batch->n_tokens : 0);
    return ES_OK;
}

/* Checks one part of a decode token over two contexts (es__alspec_part). */
static es_status check_part(es_context *ctx, const es__alspec_part *p, const es_batch *batch) {
    const int32_t L = ctx->model->hp.n_layer;
    if (p->op == ES__AL_SPEC) {
        const es__alspec_call al = {p->chunk, 0.0f, NULL, p->verdict};
        ES_TRY(check_alspec(ctx, &al, batch));
        ES_RETURN_IF(!p->spec_out, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                     "forward: ALSpec speculation part of layer %d without its output", p->layer);
        ES_RETURN_IF(p->layer < 0 || p->layer >= L || ctx->part_q_layer != p->layer, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                     "forward: ALSpec speculation part of layer %d, but the context's last part left layer %d's query",
                     p->layer, ctx->part_q_layer);
        int32_t s2 = 0;
        ES_RETURN_IF(!es__spec_window(ctx->n_past + 1, p->chunk, &s2), &ctx->err, ES_ERR_INVALID_ARGUMENT,
                     "forward: ALSpec speculation part at %d keys: a speculation needs 2S = %d", ctx->n_past + 1,
                     2 * p->chunk);
        return ES_OK;
    }
    if (p->op == ES__AL_ATTN) {
        ES_RETURN_IF(!p->exact_out || !p->verdict, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                     "forward: ALSpec attention part of layer %d without its outputs", p->layer);
        ES_RETURN_IF(p->layer < 0 || p->layer >= L || ctx->part_spec_layer != p->layer, &ctx->err,
                     ES_ERR_INVALID_ARGUMENT,
                     "forward: ALSpec attention part of layer %d, but the context's last part was not its speculation "
                     "part", p->layer);
        return ES_OK;
    }
    ES_RETURN_IF(p->op != ES__AL_ENTER || p->layer < -1 || p->layer >= L, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: ALSpec part %d at layer %d (the model has %d layers)", p->op, p->layer, L);
    ES_RETURN_IF(p->layer >= 0 && (!p->x_in || !p->att_in), &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: ALSpec part entering after layer %d without its residual or attention output", p->layer);
    ES_RETURN_IF(!batch || batch->n_tokens != 1 || ctx->backend->vt->alspec_tile == 0, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: ALSpec parts decode one token on a backend with speculative attention");
    return ES_OK;
}

static es_status check_call(es_context *ctx, const es__call *call) {
    if (call->n_streams == 0 && call->prune_threshold == 0.0f) return ES_OK;
    const es__ss_adapter *ss = ctx->model->ss;
    ES_RETURN_IF(!ss, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: streams or pruning asked, but model '%s' has no Speculative Streaming adapter "
                 "(es_model_load_adapter)", ctx->model->path);
    ES_RETURN_IF(call->n_streams < 0 || call->n_streams > ss->n_streams, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: %d streams asked, the adapter has %d", call->n_streams, ss->n_streams);
    const float thr = call->prune_threshold;
    ES_RETURN_IF(!(thr >= 0.0f && thr <= 1.0f), &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: prune threshold %g outside [0, 1]", (double)thr);
    ES_RETURN_IF(thr > 0.0f && ss->prune_rank == 0, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: pruning asked, but the adapter has no pruning tensors (edgespec.ss.prune_rank 0)");
    ES_RETURN_IF(thr > 0.0f && ss->prune_layer >= ctx->model->hp.n_layer, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "forward: the adapter's prune layer %d is the model's output (n_layer %d): nothing left to save",
                 ss->prune_layer, ctx->model->hp.n_layer);
    ES_RETURN_IF(!ctx->backend->vt->stream_logits, &ctx->err, ES_ERR_UNSUPPORTED,
                 "forward: the %s backend has no multi-stream attention (Speculative Streaming)",
                 ctx->backend->vt->name);
    return ES_OK;
}

/* After a successful forward: where each batch token's results are (backend.h: survivors are
 * renumbered in batch order, logits rows are the surviving wanted rows in order). */
static void keep_call(es_context *ctx, const es__fwd *f) {
    for (int32_t i = 0, r = 0; i < f->n; i++) {
        ctx->prov_row[i] = f->pruned[i] ? -1 : r;
        r += !f->pruned[i];
        ctx->logits_row[i] = -1;
    }
    for (int32_t o = 0, k = 0; o < f->n_out; o++)
        if (!f->pruned[f->out_rows[o]]) ctx->logits_row[f->out_rows[o]] = k++;
    memcpy(ctx->prov_parent, f->parent, sizeof(int32_t) * (size_t)f->n);
    ctx->n_provisional = f->n;
    ctx->prov_streams = f->n_streams;
}

/* A batch checked and laid out, in the context's scratch, as the backends' forward call. */
static es_status lay_out(es_context *ctx, const es_batch *batch, const es__call *call, const es__alspec_call *al,
                         const es__alspec_part *part, es__fwd *f) {
    es__batch_scratch *s = &ctx->scratch;
    int32_t n_out = 0;
    ES_TRY(es__batch_validate(batch, ctx->n_past, ctx->n_ctx, ctx->n_batch, ctx->model->hp.n_vocab, s, &n_out,
                              &ctx->err));
    ES_TRY(reserve_logits(ctx, n_out));
    memset(ctx->prov_pruned, 0, (size_t)batch->n_tokens);
    *f = (es__fwd){batch->n_tokens, ctx->n_past, batch->tokens, s->pos, s->dfs_start, s->dfs_end, s->parent,
                   n_out, s->out_rows, ctx->logits, call->n_streams, call->prune_threshold, ctx->prov_pruned, al, part,
                   NULL};
    return ES_OK;
}

static es_status forward(es_context *ctx, const es_batch *batch, const es__call *call, const es__alspec_call *al,
                         const es__alspec_part *part) {
    if (!ctx) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_forward: ctx is NULL");
    const es__call plain = {0, 0.0f};
    if (!call) call = &plain;
    ES_TRY(check_call(ctx, call));
    if (al) ES_TRY(check_alspec(ctx, al, batch));
    if (part) ES_TRY(check_part(ctx, part, batch));
    const int32_t q_layer = ctx->part_q_layer;
    ctx->part_q_layer = -1;
    ctx->part_spec_layer = -1;
    es__fwd f;
    ES_TRY(lay_out(ctx, batch, call, al, part, &f));
    /* es_context_abort before the call began: nothing computed, the provisional batch goes */
    atomic_store(&ctx->abort_taken, 0);
    if (es__context_abort_take(ctx)) {
        ctx->n_provisional = 0;
        return es__fail(&ctx->err, ES_ERR_CANCELLED, "es_forward: cancelled by es_context_abort before it began");
    }
    es_backend *b = ctx->backend;
    pthread_mutex_lock(&b->lock);
    es__err_clear(&b->err);
    /* a backend may write the context's record itself; a status left from an earlier failure
     * must not pass for that (the new message would be lost) */
    const es_status prev = ctx->err.status;
    ctx->err.status = ES_OK;
    for (int32_t i = 0; i < batch->n_tokens; i++) ctx->prov_exit[i] = -1.0f;
    f.exit_p = f.prune_threshold > 0.0f ? ctx->prov_exit : NULL;
    es_status st = b->vt->forward(ctx, &f);
    if (st != ES_OK && ctx->err.status != st) es__fail(&ctx->err, st, "%s", b->err.msg);
    if (st == ES_OK) ctx->err.status = prev;
    pthread_mutex_unlock(&b->lock);
    if (st != ES_OK) {
        /* the provisional slots may hold partial results now: they are no longer a valid batch */
        ctx->n_provisional = 0;
        return st;
    }
    keep_call(ctx, &f);
    /* the query an attention part reads: left by an entering part, kept by the attention parts */
    if (part && part->op != ES__AL_ENTER) ctx->part_q_layer = q_layer;
    if (part && part->op == ES__AL_ENTER) ctx->part_q_layer = part->layer + 1 < ctx->model->hp.n_layer ? part->layer + 1 : -1;
    if (part && part->op == ES__AL_SPEC) ctx->part_spec_layer = part->layer;
    return ES_OK;
}

es_status es__forward(es_context *ctx, const es_batch *batch, const es__call *call) {
    return forward(ctx, batch, call, NULL, NULL);
}

es_status es__forward_alspec(es_context *ctx, const es_batch *batch, const es__alspec_call *al) {
    if (!al) return es__fail(ctx ? &ctx->err : NULL, ES_ERR_INVALID_ARGUMENT, "es__forward_alspec: no ALSpec call");
    return forward(ctx, batch, NULL, al, NULL);
}

es_status es__forward_alspec_part(es_context *ctx, const es_batch *batch, const es__alspec_part *part) {
    if (!part) return es__fail(ctx ? &ctx->err : NULL, ES_ERR_INVALID_ARGUMENT, "es__forward_alspec_part: no part");
    return forward(ctx, batch, NULL, NULL, part);
}

struct es__dev_pair {
    es_context *ctx[2];
    void *impl;
};

/* Both backends' locks (each serialises the forward calls of its contexts), in one order
 * whoever takes them. */
static void lock_both(es_backend *a, es_backend *b, bool lock) {
    es_backend *first = (uintptr_t)a < (uintptr_t)b ? a : b, *second = first == a ? b : a;
    if (lock) {
        pthread_mutex_lock(&first->lock);
        pthread_mutex_lock(&second->lock);
    } else {
        pthread_mutex_unlock(&second->lock);
        pthread_mutex_unlock(&first->lock);
    }
}

es_status es__dev_pair_create(es_context *a, es_context *b, int32_t chunk, es__dev_pair **out) {
    *out = NULL;
    ES_RETURN_IF(!a || !b || a == b, NULL, ES_ERR_INVALID_ARGUMENT, "es__dev_pair_create: two distinct contexts are needed");
    const es__backend_vtbl *vt = a->backend->vt;
    ES_RETURN_IF(b->backend->vt != vt || !vt->pair_create || a->backend == b->backend, NULL, ES_ERR_UNSUPPORTED,
                 "es__dev_pair_create: %s and %s backends: no device-side gating between them", vt->name,
                 b->backend->vt->name);
    ES_RETURN_IF(a->model != b->model, NULL, ES_ERR_INVALID_ARGUMENT, "es__dev_pair_create: the contexts hold different models");
    es__dev_pair *p = es__calloc(a->alloc, 1, sizeof *p);
    ES_RETURN_IF(!p, NULL, ES_ERR_OUT_OF_MEMORY, "es__dev_pair_create: out of memory");
    p->ctx[0] = a;
    p->ctx[1] = b;
    lock_both(a->backend, b->backend, true);
    const es_status s = vt->pair_create(a, b, chunk, &p->impl);
    lock_both(a->backend, b->backend, false);
    if (s != ES_OK) {
        es__free(a->alloc, p);
        return s;
    }
    *out = p;
    return ES_OK;
}

void es__dev_pair_free(es__dev_pair *p) {
    if (!p) return;
    lock_both(p->ctx[0]->backend, p->ctx[1]->backend, true);
    p->ctx[0]->backend->vt->pair_free(p->impl);
    lock_both(p->ctx[0]->backend, p->ctx[1]->backend, false);
    es__free(p->ctx[0]->alloc, p);
}

/* One context's side of a pair token: checked and laid out as a forward call of one token. */
static es_status pair_side(es_context *ctx, const es_batch *batch, const es__alspec_call *call, es__fwd *f) {
    ES_TRY(check_alspec(ctx, call, batch));
    const es__call plain = {0, 0.0f};
    ES_TRY(lay_out(ctx, batch, &plain, call, NULL, f));
    ctx->part_q_layer = -1;
    ctx->part_spec_layer = -1;
    return ES_OK;
}

es_status es__dev_pair_forward(es__dev_pair *p, int32_t token, const es__alspec_call *call, float *logits) {
    es_context *a = p->ctx[0], *b = p->ctx[1];
    ES_RETURN_IF(a->n_past != b->n_past, &a->err, ES_ERR_INVALID_ARGUMENT,
                 "alspec pair: the contexts hold %d and %d tokens", a->n_past, b->n_past);
    int32_t s2 = 0;
    ES_RETURN_IF(!call || !es__spec_window(a->n_past + 1, call->chunk, &s2), &a->err, ES_ERR_INVALID_ARGUMENT,
                 "alspec pair: a device-gated token needs 2S keys, it has %d", a->n_past + 1);
    const es_batch batch = {1, &token, NULL, NULL, NULL, NULL};
    es__fwd fa, fb;
    ES_TRY(pair_side(a, &batch, call, &fa));
    ES_TRY(pair_side(b, &batch, call, &fb));
    lock_both(a->backend, b->backend, true);
    es__err_clear(&a->backend->err);
    es__err_clear(&b->backend->err);
    const es_status st = a->backend->vt->pair_forward(p->impl, &fa, &fb, call, logits);
    lock_both(a->backend, b->backend, false);
    a->n_provisional = b->n_provisional = 0;
    if (st != ES_OK) {
        const char *why = a->backend->err.status != ES_OK ? a->backend->err.msg : b->backend->err.msg;
        return es__fail(&a->err, st, "alspec pair: %s", why);
    }
    keep_call(a, &fa);
    keep_call(b, &fb);
    return ES_OK;
}

es_status es__kv_slot(es_context *ctx, int32_t layer, int32_t pos, float *kv, bool write) {
    ES_RETURN_IF(!ctx || !kv, ctx ? &ctx->err : NULL, ES_ERR_INVALID_ARGUMENT, "es__kv_slot: NULL argument");
    ES_RETURN_IF(layer < 0 || layer >= ctx->model->hp.n_layer || pos < 0 || pos > ctx->n_past || pos >= ctx->n_ctx,
                 &ctx->err, ES_ERR_INVALID_ARGUMENT, "es__kv_slot: layer %d slot %d outside %d layers, %d committed slots",
                 layer, pos, ctx->model->hp.n_layer, ctx->n_past);
    ES_RETURN_IF(!ctx->backend->vt->kv_slot, &ctx->err, ES_ERR_UNSUPPORTED,
                 "es__kv_slot: the %s backend cannot read or write single KV slots", ctx->backend->vt->name);
    es_backend *b = ctx->backend;
    pthread_mutex_lock(&b->lock);
    es__err_clear(&b->err);
    const es_status st = b->vt->kv_slot(ctx, layer, pos, kv, write);
    if (st != ES_OK) es__fail(&ctx->err, st, "es__kv_slot: %s", b->err.msg);
    pthread_mutex_unlock(&b->lock);
    return st;
}

es_status es_forward(es_context *ctx, const es_batch *batch) {
    return es__forward(ctx, batch, NULL);
}

bool es__pruned(const es_context *ctx, int32_t i) {
    return i >= 0 && i < ctx->n_provisional && ctx->prov_pruned[i];
}

float es__exit_prob(const es_context *ctx, int32_t i) {
    return i >= 0 && i < ctx->n_provisional ? ctx->prov_exit[i] : -1.0f;
}

es_status es__stream_logits(es_context *ctx, int32_t i, int32_t g, const float **logits) {
    ES_RETURN_IF(ctx->prov_streams == 0 || i < 0 || i >= ctx->n_provisional || ctx->prov_pruned[i], &ctx->err,
                 ES_ERR_INVALID_ARGUMENT, "stream logits: batch token %d has no streams (last batch: %d tokens, %d streams%s)",
                 i, ctx->n_provisional, ctx->prov_streams,
                 i >= 0 && i < ctx->n_provisional && ctx->prov_pruned[i] ? ", token pruned" : "");
    if (g == 0) g = ctx->prov_streams;
    ES_RETURN_IF(g < 1 || g > ctx->prov_streams, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "stream logits: %d streams asked, the last forward had %d", g, ctx->prov_streams);
    if (g > ctx->stream_cap) {
        float *grown = es__realloc(ctx->alloc, ctx->stream_logits, sizeof(float) * (size_t)g * (size_t)ctx->model->hp.n_vocab);
        ES_RETURN_IF(!grown, &ctx->err, ES_ERR_OUT_OF_MEMORY, "stream logits: out of memory");
        ctx->stream_logits = grown;
        ctx->stream_cap = g;
    }
    es_backend *b = ctx->backend;
    pthread_mutex_lock(&b->lock);
    es__err_clear(&b->err);
    es_status st = b->vt->stream_logits(ctx, ctx->prov_row[i], g, ctx->stream_logits);
    if (st != ES_OK) es__fail(&ctx->err, st, "%s", b->err.msg);
    pthread_mutex_unlock(&b->lock);
    if (st != ES_OK) return st;
    *logits = ctx->stream_logits;
    return ES_OK;
}

es_status es_logits(es_context *ctx, int32_t i, const float **logits) {
    if (!ctx || !logits) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_logits: NULL argument");
    ES_RETURN_IF(i < 0 || i >= ctx->n_provisional || ctx->logits_row[i] < 0, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "es_logits: no logits for batch token %d (the last batch has %d tokens%s)", i,
                 ctx->n_provisional, ctx->n_provisional ? "; was it flagged in batch.logits?" : ", or it was committed");
    *logits = ctx->logits + (size_t)ctx->logits_row[i] * (size_t)ctx->model->hp.n_vocab;
    return ES_OK;
}

/* Checks keep against the last batch: a root-to-node path of unpruned tokens (keep NULL: the
 * whole batch, which must be a chain). */
static es_status check_keep(es_context *ctx, const int32_t *keep, int32_t n_keep) {
    const int32_t n = ctx->n_provisional;
    es__err *err = &ctx->err;
    if (!keep) {
        for (int32_t i = 0; i < n; i++) {
            ES_RETURN_IF(i > 0 && ctx->prov_parent[i] != i - 1, err, ES_ERR_INVALID_ARGUMENT,
                         "es_commit: keep = NULL needs a chain, but token %d's parent is %d", i, ctx->prov_parent[i]);
            ES_RETURN_IF(ctx->prov_pruned[i], err, ES_ERR_INVALID_ARGUMENT,
                         "es_commit: keep = NULL, but token %d was removed by tree pruning", i);
        }
        return ES_OK;
    }
    ES_RETURN_IF(n_keep < 0 || n_keep > n, err, ES_ERR_INVALID_ARGUMENT, "es_commit: n_keep %d outside [0, %d]",
                 n_keep, n);
    for (int32_t r = 0; r < n_keep; r++) {
        int32_t want_parent = r == 0 ? -1 : keep[r - 1];
        ES_RETURN_IF(keep[r] < 0 || keep[r] >= n || ctx->prov_parent[keep[r]] != want_parent, err,
                     ES_ERR_INVALID_ARGUMENT, "es_commit: keep[%d] = %d is not the child of %d on a root-to-node path",
                     r, keep[r], want_parent);
        ES_RETURN_IF(ctx->prov_pruned[keep[r]], err, ES_ERR_INVALID_ARGUMENT,
                     "es_commit: keep[%d] = %d was removed by tree pruning", r, keep[r]);
    }
    return ES_OK;
}

es_status es_commit(es_context *ctx, const int32_t *keep, int32_t n_keep) {
    if (!ctx) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_commit: ctx is NULL");
    ES_RETURN_IF(ctx->n_provisional == 0, &ctx->err, ES_ERR_INVALID_ARGUMENT, "es_commit: no forward call to commit");
    ES_TRY(check_keep(ctx, keep, n_keep));
    if (!keep) n_keep = ctx->n_provisional;
    /* the backend holds survivor r in slot n_past + r: keep what is not already in place */
    bool identity = true;
    for (int32_t r = 0; keep && r < n_keep; r++) {
        ctx->keep_rows[r] = ctx->prov_row[keep[r]];
        identity = identity && ctx->keep_rows[r] == r;
    }
    if (!identity) {
        es_backend *b = ctx->backend;
        pthread_mutex_lock(&b->lock);
        es__err_clear(&b->err);
        es_status st = b->vt->kv_compact(ctx, ctx->keep_rows, n_keep);
        if (st != ES_OK) es__fail(&ctx->err, st, "%s", b->err.msg);
        pthread_mutex_unlock(&b->lock);
        if (st != ES_OK) return st;
    }
    ctx->n_past += n_keep;
    ctx->n_provisional = 0;
    ctx->part_q_layer = -1;
    ctx->part_spec_layer = -1;
    return ES_OK;
}

es_status es_context_shift(es_context *ctx, int32_t n_keep, int32_t n_discard) {
    if (!ctx) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_context_shift: ctx is NULL");
    ES_RETURN_IF(n_keep < 0 || n_discard < 1 || (int64_t)n_keep + n_discard > ctx->n_past, &ctx->err,
                 ES_ERR_INVALID_ARGUMENT, "es_context_shift: keep %d and drop %d of %d committed tokens", n_keep,
                 n_discard, ctx->n_past);
    ES_RETURN_IF(!ctx->backend->vt->kv_shift, &ctx->err, ES_ERR_UNSUPPORTED,
                 "es_context_shift: the %s backend cannot shift its cache", ctx->backend->vt->name);
    es_backend *b = ctx->backend;
    pthread_mutex_lock(&b->lock);
    es__err_clear(&b->err);
    const es_status st = b->vt->kv_shift(ctx, n_keep, n_discard);
    pthread_mutex_unlock(&b->lock);
    if (st != ES_OK) {
        /* the cache may be half moved: only the kept prefix is certainly intact */
        ctx->n_past = n_keep;
        ctx->n_provisional = 0;
        return es__fail(&ctx->err, st, "%s", b->err.msg);
    }
    ctx->n_past -= n_discard;
    ctx->n_provisional = 0;
    return ES_OK;
}

es_status es_truncate(es_context *ctx, int32_t new_n_past) {
    if (!ctx) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_truncate: ctx is NULL");
    ES_RETURN_IF(new_n_past < 0 || new_n_past > ctx->n_past, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "es_truncate: new n_past %d outside [0, %d]", new_n_past, ctx->n_past);
    ctx->n_past = new_n_past;
    ctx->n_provisional = 0;
    ctx->part_q_layer = -1;
    ctx->part_spec_layer = -1;
    return ES_OK;
}
