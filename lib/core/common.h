/* common.h: internal conventions shared by every part of the library: error records, the
 * allocator hook, logging, checked arithmetic. Never installed; symbols use the es__ prefix.
 * Deliberately no global state apart from the thread-local last-error text of es_last_error(). */
#ifndef ES_CORE_COMMON_H
#define ES_CORE_COMMON_H

#include "edgespec.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ES__ERRMSG_SIZE 512

/* Where a detailed error message lands: each object carries one. */
typedef struct es__err {
    es_status status;
    char msg[ES__ERRMSG_SIZE];
} es__err;

/* Logging sink copied from params into each object. */
typedef struct es__log {
    es_log_fn fn;
    void *user;
    es_log_level level;
} es__log;

#if defined(__GNUC__) || defined(__clang__)
#define ES__PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#define ES__LIKELY(x) __builtin_expect(!!(x), 1)
#define ES__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define ES__PRINTF(fmt_idx, arg_idx)
#define ES__LIKELY(x) (x)
#define ES__UNLIKELY(x) (x)
#endif

/* Records status and message in err (may be NULL) and in the thread's last-error slot; returns
 * status so callers can `return es__fail(...)`. */
es_status es__fail(es__err *err, es_status status, const char *fmt, ...) ES__PRINTF(3, 4);
es_status es__vfail(es__err *err, es_status status, const char *fmt, va_list ap);
void es__err_clear(es__err *err);
/* Copies src's message to dst (and the thread slot) and returns its status. */
es_status es__err_forward(es__err *dst, const es__err *src);

/* The ABI rule of edgespec.h: reserved words of a params struct are zero (else a newer caller
 * sets a field this library lacks). what names the struct in the message. */
es_status es__check_reserved(const uint64_t *reserved, size_t n, const char *what, es__err *err);
#define ES__CHECK_RESERVED(p, what, err) es__check_reserved((p)->reserved, sizeof (p)->reserved / sizeof (p)->reserved[0], (what), (err))

void es__logf(const es__log *log, es_log_level level, const char *fmt, ...) ES__PRINTF(3, 4);
/* The level a params struct's log_level asks for: ES_LOG_DEFAULT becomes ES_LOG_WARN. The one
 * place that default is given; each struct's resolve function calls it. */
es_log_level es__log_level(es_log_level level);

/* Return with a message when cond holds. Needs an `es__err *` in scope under the name given. */
#define ES_RETURN_IF(cond, err, status, ...)                                                       \
    do {                                                                                           \
        if (ES__UNLIKELY(cond)) return es__fail((err), (status), __VA_ARGS__);                     \
    } while (0)

/* Propagate a failed es_status (the message is already recorded). */
#define ES_TRY(expr)                                                                               \
    do {                                                                                           \
        es_status es__s = (expr);                                                                  \
        if (ES__UNLIKELY(es__s != ES_OK)) return es__s;                                            \
    } while (0)

/* Internal invariants only (never input validation); compiled out with NDEBUG. */
#ifdef NDEBUG
#define ES_ASSERT(x) ((void)0)
#else
#include <assert.h>
#define ES_ASSERT(x) assert(x)
#endif

/* Allocation through the user's allocator (NULL = C library). */
void *es__malloc(const es_allocator *a, size_t size);
/* Overflow-checked, zeroed. Without an allocator, calloc: large blocks are not touched (their
 * pages become resident when first written); with one, alloc + memset. */
void *es__calloc(const es_allocator *a, size_t n, size_t size);
void *es__realloc(const es_allocator *a, void *ptr, size_t size);
void es__free(const es_allocator *a, void *ptr);
char *es__strndup(const es_allocator *a, const char *s, size_t n);

/* Overflow-checked arithmetic: return false on overflow and leave *out unspecified. */
static inline bool es__mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool es__add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline bool es__mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

#define ES__MIN(a, b) ((a) < (b) ? (a) : (b))
#define ES__MAX(a, b) ((a) > (b) ? (a) : (b))
#define ES__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* ES_CORE_COMMON_H */
