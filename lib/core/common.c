/* common.c: error records, logging and the allocator hook. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char es__thread_errmsg[ES__ERRMSG_SIZE];

const char *es_last_error(void) {
    return es__thread_errmsg;
}

es_status es__vfail(es__err *err, es_status status, const char *fmt, va_list ap) {
    char msg[ES__ERRMSG_SIZE];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(es__thread_errmsg, msg, sizeof msg);
    if (err) {
        err->status = status;
        memcpy(err->msg, msg, sizeof msg);
    }
    return status;
}

es_status es__fail(es__err *err, es_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    es__vfail(err, status, fmt, ap);
    va_end(ap);
    return status;
}

void es__err_clear(es__err *err) {
    if (!err) return;
    err->status = ES_OK;
    err->msg[0] = '\0';
}

es_status es__err_forward(es__err *dst, const es__err *src) {
    return es__fail(dst, src->status, "%s", src->msg);
}

void es__logf(const es__log *log, es_log_level level, const char *fmt, ...) {
    if (!log || !log->fn || level > log->level) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log->fn(level, msg, log->user);
}

es_log_level es__log_level(es_log_level level) {
    return level == ES_LOG_DEFAULT ? ES_LOG_WARN : level;
}

const char *es_version(void) {
    return ES_VERSION_STRING;
}

es_status es__check_reserved(const uint64_t *reserved, size_t n, const char *what, es__err *err) {
    for (size_t i = 0; i < n; i++)
        ES_RETURN_IF(reserved[i] != 0, err, ES_ERR_INVALID_ARGUMENT,
                     "%s.reserved[%zu] is not zero: the caller was built against a newer edgespec.h, or did "
                     "not zero the struct (this library is %s)",
                     what, i, ES_VERSION_STRING);
    return ES_OK;
}

const char *es_status_str(es_status s) {
    switch (s) {
    case ES_OK: return "ok";
    case ES_ERR_INVALID_ARGUMENT: return "invalid argument";
    case ES_ERR_IO: return "i/o error";
    case ES_ERR_FORMAT: return "malformed file";
    case ES_ERR_UNSUPPORTED: return "unsupported";
    case ES_ERR_OUT_OF_MEMORY: return "out of host memory";
    case ES_ERR_DEVICE_MEMORY: return "out of device memory";
    case ES_ERR_BACKEND: return "backend error";
    case ES_ERR_CONTEXT_FULL: return "context full";
    case ES_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case ES_ERR_CANCELLED: return "cancelled";
    case ES_ERR_INVALID_TREE: return "invalid token tree";
    case ES_ERR_MODEL: return "invalid model";
    }
    return "unknown status";
}

void *es__malloc(const es_allocator *a, size_t size) {
    if (size == 0) size = 1;
    return a ? a->alloc(size, a->user) : malloc(size);
}

void *es__calloc(const es_allocator *a, size_t n, size_t size) {
    size_t total;
    if (!es__mul_size(n, size, &total)) return NULL;
    /* The C library's calloc hands out large blocks as fresh zero pages without writing them, so
     * memory a context never uses (the unused part of a large KV cache) is never made resident.
     * A user allocator has no calloc: its blocks are zeroed here. */
    if (!a) return calloc(total ? total : 1, 1);
    void *p = es__malloc(a, total);
    if (p) memset(p, 0, total);
    return p;
}

void *es__realloc(const es_allocator *a, void *ptr, size_t size) {
    if (size == 0) size = 1;
    return a ? a->realloc(ptr, size, a->user) : realloc(ptr, size);
}

void es__free(const es_allocator *a, void *ptr) {
    if (!ptr) return;
    if (a)
        a->free(ptr, a->user);
    else
        free(ptr);
}

char *es__strndup(const es_allocator *a, const char *s, size_t n) {
    char *p = es__malloc(a, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}
