/* session.c: a context's committed state to a file and back (docs/formats.md "Session files"):
 * the tokens the KV cache holds and the cache itself, so an assistant restarts without reading
 * its conversation again. A file names the model it belongs to by a fingerprint (shapes, tensor
 * names and types, and samples of every tensor's bytes) and ends with a checksum of everything
 * before it, so a wrong model, a truncated file or a flipped byte is an error naming what, not
 * a crash or silently wrong logits. Deliberately no compression and no provisional state. */
#include "backend.h"

#include <stdio.h>
#include <string.h>

#define MAGIC "ESSN"
#define VERSION 1u
#define SAMPLE 64 /* bytes of each tensor's start and end that the fingerprint reads */

/* FNV-1a, 64 bits: enough to tell models and corruption apart, not a security measure. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fingerprint(const es_model *m) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &m->hp, sizeof m->hp);
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const es__tensor *t = &m->tensors[i];
        h = fnv(h, t->name, strlen(t->name));
        h = fnv(h, &t->type, sizeof t->type);
        h = fnv(h, t->ne, sizeof t->ne);
        if (!t->data) continue;
        const size_t n = (size_t)ES__MIN(t->nbytes, (uint64_t)SAMPLE);
        h = fnv(h, t->data, n);
        h = fnv(h, (const uint8_t *)t->data + t->nbytes - n, n);
    }
    return h;
}

typedef struct header {
    char magic[4];
    uint32_t version;
    uint64_t model;          /* fingerprint() of the model                       */
    uint32_t n_layer, n_head_kv, head_dim, n_tokens;
} header;

/* Floats of the cache for n tokens: [n_layer][K, V][n_head_kv][n][head_dim]. */
static bool kv_floats(const es__hparams *hp, uint64_t n, uint64_t *out) {
    uint64_t f = 2 * (uint64_t)hp->n_layer;
    return es__mul_u64(f, (uint64_t)hp->n_head_kv, &f) && es__mul_u64(f, (uint64_t)hp->head_dim, &f) &&
           es__mul_u64(f, n, out) && *out < ((uint64_t)1 << 60);
}

static es_status kv_io(es_context *ctx, int32_t n, float *buf, bool write) {
    es_backend *b = ctx->backend;
    ES_RETURN_IF(!b->vt->kv_io, &ctx->err, ES_ERR_UNSUPPORTED, "session: the %s backend cannot %s its cache",
                 b->vt->name, write ? "write" : "read");
    pthread_mutex_lock(&b->lock);
    es__err_clear(&b->err);
    const es_status st = b->vt->kv_io(ctx, n, buf, write);
    pthread_mutex_unlock(&b->lock);
    return st == ES_OK ? ES_OK : es__fail(&ctx->err, st, "session: %s", b->err.msg);
}

es_status es_context_save(es_context *ctx, const int32_t *tokens, size_t n_tokens, const char *path) {
    if (!ctx || !path || (!tokens && n_tokens)) return es__fail(ctx ? &ctx->err : NULL, ES_ERR_INVALID_ARGUMENT, "es_context_save: NULL argument");
    ES_RETURN_IF(n_tokens != (size_t)ctx->n_past, &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "es_context_save: %zu tokens given, the cache holds %d", n_tokens, ctx->n_past);
    const es__hparams *hp = &ctx->model->hp;
    uint64_t nf = 0;
    ES_RETURN_IF(!kv_floats(hp, n_tokens, &nf), &ctx->err, ES_ERR_OUT_OF_MEMORY, "es_context_save: cache too large");
    float *kv = es__malloc(ctx->alloc, (size_t)ES__MAX(nf, 1) * sizeof(float));
    ES_RETURN_IF(!kv, &ctx->err, ES_ERR_OUT_OF_MEMORY, "es_context_save: out of memory for %llu floats",
                 (unsigned long long)nf);
    es_status st = n_tokens ? kv_io(ctx, (int32_t)n_tokens, kv, false) : ES_OK;
    header h = {{'E', 'S', 'S', 'N'}, VERSION, fingerprint(ctx->model), (uint32_t)hp->n_layer, (uint32_t)hp->n_head_kv,
                (uint32_t)hp->head_dim, (uint32_t)n_tokens};
    FILE *fp = st == ES_OK ? fopen(path, "wb") : NULL;
    if (st == ES_OK && !fp) st = es__fail(&ctx->err, ES_ERR_IO, "es_context_save: cannot create '%s'", path);
    if (fp) {
        uint64_t sum = fnv(0xcbf29ce484222325ull, &h, sizeof h);
        if (n_tokens) sum = fnv(sum, tokens, sizeof(int32_t) * n_tokens);
        if (nf) sum = fnv(sum, kv, sizeof(float) * (size_t)nf);
        /* an empty context has no tokens (NULL is fine then) and no cache to write */
        const bool ok = fwrite(&h, sizeof h, 1, fp) == 1 &&
                        (n_tokens == 0 || fwrite(tokens, sizeof(int32_t), n_tokens, fp) == n_tokens) &&
                        (nf == 0 || fwrite(kv, sizeof(float), (size_t)nf, fp) == (size_t)nf) &&
                        fwrite(&sum, sizeof sum, 1, fp) == 1;
        if (fclose(fp) != 0 || !ok) st = es__fail(&ctx->err, ES_ERR_IO, "es_context_save: writing '%s' failed", path);
    }
    es__free(ctx->alloc, kv);
    return st;
}

/* Reads and checks path whole; on success *data (the allocator's) holds it. */
static es_status read_session(es_context *ctx, const char *path, uint8_t **data, uint64_t *size, header *h) {
    es__file_map map;
    const int e = es__file_map_open(path, true, &map);
    ES_RETURN_IF(e != 0, &ctx->err, ES_ERR_IO, "es_context_load: cannot read '%s': %s", path, strerror(e));
    es_status st = ES_OK;
    const uint64_t n = map.size;
    if (n < sizeof *h + sizeof(uint64_t))
        st = es__fail(&ctx->err, ES_ERR_FORMAT, "'%s': %llu bytes, too short for a session file", path, (unsigned long long)n);
    if (st == ES_OK) memcpy(h, map.data, sizeof *h);
    if (st == ES_OK && memcmp(h->magic, MAGIC, 4) != 0)
        st = es__fail(&ctx->err, ES_ERR_FORMAT, "'%s': not a session file (magic at offset 0)", path);
    if (st == ES_OK && h->version != VERSION)
        st = es__fail(&ctx->err, ES_ERR_UNSUPPORTED, "'%s': session version %u, this library reads %u", path, h->version,
                      VERSION);
    if (st == ES_OK) {
        *data = es__malloc(ctx->alloc, (size_t)n);
        if (!*data) st = es__fail(&ctx->err, ES_ERR_OUT_OF_MEMORY, "es_context_load: out of memory");
        else memcpy(*data, map.data, (size_t)n);
        *size = n;
    }
    es__file_map_close(&map);
    return st;
}

/* Everything the file says against the context and its own length and checksum. */
static es_status check_session(es_context *ctx, const char *path, const uint8_t *data, uint64_t size, const header *h,
                               uint64_t *nf) {
    const es__hparams *hp = &ctx->model->hp;
    ES_RETURN_IF(h->model != fingerprint(ctx->model) || h->n_layer != (uint32_t)hp->n_layer ||
                     h->n_head_kv != (uint32_t)hp->n_head_kv || h->head_dim != (uint32_t)hp->head_dim,
                 &ctx->err, ES_ERR_INVALID_ARGUMENT,
                 "'%s' was saved with another model (%u layers, %u kv heads of %u; fingerprint %016llx) than '%s' "
                 "(%d, %d of %d; %016llx)", path, h->n_layer, h->n_head_kv, h->head_dim,
                 (unsigned long long)h->model, ctx->model->path, hp->n_layer, hp->n_head_kv, hp->head_dim,
                 (unsigned long long)fingerprint(ctx->model));
    ES_RETURN_IF(h->n_tokens > (uint32_t)ctx->n_ctx, &ctx->err, ES_ERR_CONTEXT_FULL,
                 "'%s' holds %u tokens, the context has room for %d", path, h->n_tokens, ctx->n_ctx);
    uint64_t want = 0;
    ES_RETURN_IF(!kv_floats(hp, h->n_tokens, nf) || !es__mul_u64(*nf, 4, &want) ||
                     !es__add_u64(want, sizeof *h + 4 * (uint64_t)h->n_tokens + sizeof(uint64_t), &want) || want != size,
                 &ctx->err, ES_ERR_FORMAT, "'%s': %llu bytes, %llu expected for %u tokens (truncated or padded)", path,
                 (unsigned long long)size, (unsigned long long)want, h->n_tokens);
    uint64_t sum;
    memcpy(&sum, data + size - sizeof sum, sizeof sum);
    ES_RETURN_IF(fnv(0xcbf29ce484222325ull, data, (size_t)(size - sizeof sum)) != sum, &ctx->err, ES_ERR_FORMAT,
                 "'%s': checksum mismatch at offset %llu (the file is corrupt)", path,
                 (unsigned long long)(size - sizeof sum));
    const int32_t *tok = (const int32_t *)(const void *)(data + sizeof *h);
    for (uint32_t i = 0; i < h->n_tokens; i++)
        ES_RETURN_IF(tok[i] < 0 || tok[i] >= hp->n_vocab, &ctx->err, ES_ERR_FORMAT,
                     "'%s': token %u at offset %llu is %d, outside [0, %d)", path, i,
                     (unsigned long long)(sizeof *h + 4 * (uint64_t)i), tok[i], hp->n_vocab);
    return ES_OK;
}

es_status es_context_kv_copy(es_context *dst, es_context *src) {
    if (!dst || !src) return es__fail(dst ? &dst->err : NULL, ES_ERR_INVALID_ARGUMENT, "es_context_kv_copy: NULL context");
    ES_RETURN_IF(dst == src, &dst->err, ES_ERR_INVALID_ARGUMENT, "es_context_kv_copy: source and destination are one context");
    const es__hparams *hp = &dst->model->hp;
    ES_RETURN_IF(dst->model != src->model && fingerprint(dst->model) != fingerprint(src->model), &dst->err,
                 ES_ERR_INVALID_ARGUMENT, "es_context_kv_copy: the contexts hold different models ('%s' and '%s')",
                 src->model->path, dst->model->path);
    ES_RETURN_IF(src->n_past > dst->n_ctx, &dst->err, ES_ERR_CONTEXT_FULL,
                 "es_context_kv_copy: the source holds %d tokens, the destination has room for %d", src->n_past,
                 dst->n_ctx);
    const int32_t n = src->n_past;
    uint64_t nf = 0;
    ES_RETURN_IF(!kv_floats(hp, (uint64_t)n, &nf), &dst->err, ES_ERR_OUT_OF_MEMORY, "es_context_kv_copy: cache too large");
    float *kv = es__malloc(dst->alloc, (size_t)ES__MAX(nf, 1) * sizeof(float));
    ES_RETURN_IF(!kv, &dst->err, ES_ERR_OUT_OF_MEMORY, "es_context_kv_copy: out of memory for %llu floats",
                 (unsigned long long)nf);
    es_status st = n ? kv_io(src, n, kv, false) : ES_OK;
    if (st != ES_OK) st = es__err_forward(&dst->err, &src->err); /* dst untouched */
    if (st == ES_OK && n) {
        st = kv_io(dst, n, kv, true);
        if (st != ES_OK) dst->n_past = 0; /* the cache may be half written */
    }
    if (st == ES_OK) {
        dst->n_past = n;
        dst->n_provisional = 0;
    }
    es__free(dst->alloc, kv);
    return st;
}

es_status es_context_load(es_context *ctx, const char *path, int32_t *tokens, size_t cap, size_t *n_tokens) {
    if (!ctx || !path || !n_tokens) return es__fail(ctx ? &ctx->err : NULL, ES_ERR_INVALID_ARGUMENT, "es_context_load: NULL argument");
    header h;
    uint8_t *data = NULL;
    uint64_t size = 0, nf = 0;
    es_status st = read_session(ctx, path, &data, &size, &h);
    if (st == ES_OK) st = check_session(ctx, path, data, size, &h, &nf);
    if (st == ES_OK && h.n_tokens > cap) {
        *n_tokens = h.n_tokens;
        st = es__fail(&ctx->err, ES_ERR_BUFFER_TOO_SMALL, "es_context_load: '%s' holds %u tokens, room for %zu", path,
                      h.n_tokens, cap);
    }
    if (st == ES_OK && h.n_tokens > 0) {
        /* 4-byte aligned: the header is 32 bytes, the tokens 4 each */
        float *kv = (float *)(void *)(data + sizeof h + 4 * (size_t)h.n_tokens);
        st = kv_io(ctx, (int32_t)h.n_tokens, kv, true);
        if (st != ES_OK) ctx->n_past = 0; /* the cache may be half written */
    }
    if (st == ES_OK) {
        if (h.n_tokens) memcpy(tokens, data + sizeof h, sizeof(int32_t) * h.n_tokens);
        *n_tokens = h.n_tokens;
        ctx->n_past = (int32_t)h.n_tokens;
        ctx->n_provisional = 0;
    }
    es__free(ctx->alloc, data);
    return st;
}
