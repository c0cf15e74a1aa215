/* alspec_pair.c: ALSpec's Algorithm 2 over two contexts (alspec_pair.h). Per decode token the
 * priority vector starts as p = [2, 0]: context 0 holds the correct activations. At each layer's
 * speculation point the context with the highest priority is the sender: its speculative flash
 * decode yields the speculation and the exact output together with the check's sums; it ships
 * the speculation and its residual to the receiver (p = 1), which runs the post-attention ops and
 * the next layer's pre-attention ops (its KV slot included) on them. On a hit the sender skips
 * those ops (p = 0) and the receiver becomes the next sender; on a miss the sender runs them on
 * the exact output (p = 2) and the receiver's work is discarded. At the token's end each layer's
 * new KV slot goes from the context that computed it as that layer's sender to the other, so a
 * discarded slot is overwritten before any attention reads it (only a layer's sender attends
 * in a token, and it wrote that slot itself).
 * The gating is decided here, on the host, from the device's sums: one round trip per layer and
 * the activations through host memory. The receiver's part runs on a worker thread of its own
 * (one per pair, each context driven by one thread at a time). The sender's speculative flash
 * decode runs in two parts: the speculation (first and last chunks) goes to the receiver as soon
 * as it exists, and the middle chunks that complete the exact output run while the receiver
 * works, so a hit overlaps the receiver with the rest of the sender's attention and a miss with
 * the sender's exact path too. */
#include "alspec_pair.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The receiver's side: one ENTER part at a time, posted by the sender's thread. */
typedef struct receiver {
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool posted, done, quit;
    es_context *ctx;                 /* the job: enter(ctx, b, layer, x, att, x_out) */
    es_batch b;
    int32_t layer;
    const float *x, *att;
    float *x_out;
    es_status status;                /* the result, and its message (es_last_error is per thread) */
    char why[ES__ERRMSG_SIZE];
} receiver;

struct es__alspec_pair {
    es_context *ctx[2];
    const es_allocator *alloc;
    int32_t n_layer, n_embd, qd, n_vocab, chunk;
    float *x, *x_r;     /* [n_embd] the sender's and the receiver's residual        */
    float *spec, *att;  /* [qd] the sender's speculation and exact output            */
    float *kv;          /* one layer's slot: [K, V][n_head_kv][head_dim]             */
    int8_t *owner;      /* [n_layer] which context was the layer's sender this token */
    float *x_s;         /* [n_embd] the sender's next residual on a miss              */
    receiver rx;
    es__dev_pair *dev;  /* the backends gate on the devices (NULL: the host does)     */
};

es_context *es__alspec_pair_second(const es__alspec_pair *p) {
    return p->ctx[1];
}

static es_status enter(es_context *ctx, const es_batch *b, int32_t layer, const float *x, const float *att, float *x_out) {
    const es__alspec_part part = {ES__AL_ENTER, layer, 0, x, att, x_out, NULL, NULL, NULL};
    return es__forward_alspec_part(ctx, b, &part);
}

static void *receiver_main(void *arg) {
    receiver *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->posted && !r->quit) pthread_cond_wait(&r->cv, &r->mu);
        if (r->quit) break;
        r->posted = false;
        pthread_mutex_unlock(&r->mu);
        const es_status s = enter(r->ctx, &r->b, r->layer, r->x, r->att, r->x_out);
        pthread_mutex_lock(&r->mu);
        r->status = s;
        if (s != ES_OK) snprintf(r->why, sizeof r->why, "%s", es_last_error());
        r->done = true;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void receiver_post(receiver *r, es_context *ctx, const es_batch *b, int32_t layer, const float *x,
                          const float *att, float *x_out) {
    pthread_mutex_lock(&r->mu);
    r->ctx = ctx;
    r->b = *b;
    r->layer = layer;
    r->x = x;
    r->att = att;
    r->x_out = x_out;
    r->done = false;
    r->posted = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static es_status receiver_wait(receiver *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
    const es_status s = r->status;
    pthread_mutex_unlock(&r->mu);
    return s == ES_OK ? ES_OK : es__fail(NULL, s, "%s", r->why);
}

void es__alspec_pair_free(es__alspec_pair *p) {
    if (!p) return;
    if (p->rx.started) {
        pthread_mutex_lock(&p->rx.mu);
        p->rx.quit = true;
        pthread_cond_broadcast(&p->rx.cv);
        pthread_mutex_unlock(&p->rx.mu);
        pthread_join(p->rx.thread, NULL);
        pthread_cond_destroy(&p->rx.cv);
        pthread_mutex_destroy(&p->rx.mu);
    }
    es__dev_pair_free(p->dev);
    const es_allocator *al = p->alloc;
    es__free(al, p->x_s);
    es__free(al, p->x);
    es__free(al, p->x_r);
    es__free(al, p->spec);
    es__free(al, p->att);
    es__free(al, p->kv);
    es__free(al, p->owner);
    es__free(al, p);
}

bool es__alspec_pair_device_gated(const es__alspec_pair *p) {
    return p->dev != NULL;
}

es_status es__alspec_pair_create(es_context *ctx, es_context *ctx2, int32_t chunk, bool host_gated,
                                 es__alspec_pair **out) {
    *out = NULL;
    ES_RETURN_IF(!ctx || !ctx2 || ctx == ctx2, NULL, ES_ERR_INVALID_ARGUMENT,
                 "es_alspec_create_pair: two distinct contexts are needed");
    const es_model *m = es_context_model(ctx);
    ES_RETURN_IF(es_context_model(ctx2) != m, NULL, ES_ERR_INVALID_ARGUMENT,
                 "es_alspec_create_pair: the contexts hold different models; both must hold the same es_model");
    es__caps c1, c2;
    es__context_caps(ctx, &c1);
    es__context_caps(ctx2, &c2);
    ES_RETURN_IF(c2.alspec_tile == 0, NULL, ES_ERR_UNSUPPORTED,
                 "es_alspec_create_pair: the second context has no speculative attention");
    ES_RETURN_IF(chunk % c2.alspec_tile, NULL, ES_ERR_INVALID_ARGUMENT,
                 "es_alspec_create_pair: chunk %d is not a multiple of the second context's attention tile %d", chunk,
                 c2.alspec_tile);
    ES_RETURN_IF(c2.n_ctx < c1.n_ctx, NULL, ES_ERR_INVALID_ARGUMENT,
                 "es_alspec_create_pair: the second context has %d slots, fewer than the first's %d", c2.n_ctx, c1.n_ctx);
    es_model_info mi;
    ES_TRY(es_model_get_info(m, &mi));
    const int32_t n_embd = mi.n_embd, n_head = mi.n_head, n_head_kv = mi.n_head_kv, head_dim = mi.head_dim;
    const es_allocator *al = c1.alloc;
    es__alspec_pair *p = es__calloc(al, 1, sizeof *p);
    if (p) {
        p->ctx[0] = ctx;
        p->ctx[1] = ctx2;
        p->alloc = al;
        p->n_layer = c1.n_layer;
        p->n_embd = n_embd;
        p->qd = n_head * head_dim;
        p->n_vocab = c1.n_vocab;
        p->chunk = chunk;
        p->x = es__malloc(al, sizeof(float) * (size_t)n_embd);
        p->x_r = es__malloc(al, sizeof(float) * (size_t)n_embd);
        p->spec = es__malloc(al, sizeof(float) * (size_t)p->qd);
        p->att = es__malloc(al, sizeof(float) * (size_t)p->qd);
        p->kv = es__malloc(al, sizeof(float) * 2 * (size_t)n_head_kv * (size_t)head_dim);
        p->owner = es__calloc(al, (size_t)c1.n_layer, 1);
        p->x_s = es__malloc(al, sizeof(float) * (size_t)n_embd);
    }
    if (!p || !p->x || !p->x_r || !p->spec || !p->att || !p->kv || !p->owner || !p->x_s) {
        es__alspec_pair_free(p);
        return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_alspec_create_pair: out of memory");
    }
    pthread_mutex_init(&p->rx.mu, NULL);
    pthread_cond_init(&p->rx.cv, NULL);
    p->rx.started = pthread_create(&p->rx.thread, NULL, receiver_main, &p->rx) == 0;
    if (!p->rx.started) {
        pthread_cond_destroy(&p->rx.cv);
        pthread_mutex_destroy(&p->rx.mu);
        es__alspec_pair_free(p);
        return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_alspec_create_pair: cannot start the receiver's thread");
    }
    /* where the devices can gate themselves, a token is one submission of everything per device */
    const es_status sd = host_gated ? ES_ERR_UNSUPPORTED : es__dev_pair_create(ctx, ctx2, chunk, &p->dev);
    if (sd != ES_OK && sd != ES_ERR_UNSUPPORTED) {
        es__alspec_pair_free(p);
        return sd;
    }
    *out = p;
    return ES_OK;
}

/* The token on both contexts exactly (no speculation: fewer than 2S keys). */
static es_status both_exact(es__alspec_pair *p, const es_batch *b, float *logits) {
    const float *l = NULL;
    for (int k = 0; k < 2; k++) ES_TRY(es_forward(p->ctx[k], b));
    ES_TRY(es_logits(p->ctx[0], 0, &l));
    memcpy(logits, l, sizeof(float) * (size_t)p->n_vocab);
    return ES_OK;
}

/* Algorithm 2's loop over the layers; leaves the final sender's index. */
static es_status layers(es__alspec_pair *p, const es_batch *b, const es__alspec_call *call, int *sender) {
    int32_t prio[2] = {2, 0}; /* Algorithm 2's p: context 0 holds the correct activations */
    int s = 0;
    ES_TRY(enter(p->ctx[s], b, -1, NULL, NULL, p->x));
    for (int32_t l = 0; l < p->n_layer; l++) {
        p->owner[l] = (int8_t)s; /* the sender ran this layer's pre-attention ops: its slot is right */
        es__spec_verdict v;
        const es__alspec_part spec = {ES__AL_SPEC, l, p->chunk, NULL, NULL, NULL, p->spec, NULL, &v};
        ES_TRY(es__forward_alspec_part(p->ctx[s], b, &spec));
        const int r = 1 - s;
        ES_RETURN_IF(!v.valid, NULL, ES_ERR_BACKEND, "alspec pair: layer %d has no speculation at %d keys", l,
                     es_context_n_past(p->ctx[s]) + 1);
        /* the receiver goes ahead on the speculation and the sender's residual (both read-only
         * until it is done) while the sender's middle chunks complete the exact output; the
         * sender checks, and on a miss goes on with the exact output */
        prio[r] = 1;
        receiver_post(&p->rx, p->ctx[r], b, l, p->x, p->spec, p->x_r);
        const es__alspec_part exact = {ES__AL_ATTN, l, p->chunk, NULL, NULL, NULL, NULL, p->att, &v};
        const es_status sa = es__forward_alspec_part(p->ctx[s], b, &exact);
        if (sa != ES_OK) {
            receiver_wait(&p->rx);
            return sa;
        }
        const bool hit = es__spec_accept(v.err2, v.norm2, call->lambda) && !(call->force_miss && call->force_miss[l]);
        call->verdicts[l] = (es__spec_verdict){true, hit, v.err2, v.norm2};
        prio[s] = hit ? 0 : 2;
        const es_status st = hit ? ES_OK : enter(p->ctx[s], b, l, p->x, p->att, p->x_s);
        const es_status sr = receiver_wait(&p->rx);
        ES_TRY(st);
        ES_TRY(sr);
        /* the next residual is the one of the context with the highest priority */
        float *t = p->x;
        if (prio[r] > prio[s]) {
            p->x = p->x_r;
            p->x_r = t;
            s = r;
        } else { /* the receiver's work is discarded */
            p->x = p->x_s;
            p->x_s = t;
        }
    }
    *sender = s;
    return ES_OK;
}

/* Each layer's new slot from its sender to the other context. */
static es_status sync_kv(es__alspec_pair *p, int32_t pos) {
    for (int32_t l = 0; l < p->n_layer; l++) {
        const int o = p->owner[l];
        ES_TRY(es__kv_slot(p->ctx[o], l, pos, p->kv, false));
        ES_TRY(es__kv_slot(p->ctx[1 - o], l, pos, p->kv, true));
    }
    return ES_OK;
}

static es_status decode(es__alspec_pair *p, int32_t token, const es__alspec_call *call, float *logits) {
    const int32_t n = es_context_n_past(p->ctx[0]);
    ES_RETURN_IF(es_context_n_past(p->ctx[1]) != n, NULL, ES_ERR_INVALID_ARGUMENT,
                 "alspec pair: the contexts hold %d and %d tokens", n, es_context_n_past(p->ctx[1]));
    const es_batch b = {1, &token, NULL, NULL, NULL, NULL};
    int32_t s2 = 0;
    if (!es__spec_window(n + 1, p->chunk, &s2)) {
        for (int32_t l = 0; l < p->n_layer; l++) call->verdicts[l] = (es__spec_verdict){false, false, 0.0, 0.0};
        ES_TRY(both_exact(p, &b, logits));
    } else if (p->dev) {
        ES_TRY(es__dev_pair_forward(p->dev, token, call, logits));
    } else {
        int s = 0;
        const float *l = NULL;
        ES_TRY(layers(p, &b, call, &s));
        ES_TRY(es_logits(p->ctx[s], 0, &l));
        memcpy(logits, l, sizeof(float) * (size_t)p->n_vocab);
        ES_TRY(sync_kv(p, n));
    }
    for (int k = 0; k < 2; k++) ES_TRY(es_commit(p->ctx[k], NULL, 1));
    return ES_OK;
}

es_status es__alspec_pair_decode(es__alspec_pair *p, int32_t token, const es__alspec_call *call, float *logits,
                                 es__err *err) {
    const es_status s = decode(p, token, call, logits);
    if (s == ES_OK) return ES_OK;
    /* neither context keeps the token: back to the committed tokens they agree on */
    const int32_t n = es_context_n_past(p->ctx[0]) < es_context_n_past(p->ctx[1]) ? es_context_n_past(p->ctx[0])
                                                                                   : es_context_n_past(p->ctx[1]);
    es__fail(err, s, "alspec over two devices: %s", es_last_error());
    es_truncate(p->ctx[0], n);
    es_truncate(p->ctx[1], n);
    return s;
}
