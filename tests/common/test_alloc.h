/* test_alloc.h: an es_allocator for allocation-failure injection (SQLite's way, STYLE.md): a
 * budget of allocations that succeed, then failures, and a count of the blocks still live, so a
 * test can walk every failure point of a call and check that each one fails cleanly and leaks
 * nothing. Allocations and reallocations of a NULL block count as allocations; frees of NULL do
 * not count. Deliberately no checks of its own: the tests decide what a failure must look like. */
#ifndef ES_TEST_ALLOC_H
#define ES_TEST_ALLOC_H

#include "edgespec.h"

#include <stdbool.h>
#include <stdlib.h>

typedef struct test_alloc {
    long left;  /* allocations that succeed before one fails; < 0: none fails                */
    bool once;  /* after the failing one, the rest succeed again (else every later one fails) */
    long live;  /* blocks allocated and not freed                                              */
    long calls; /* allocations asked for so far, failed ones included (a walk's length)        */
} test_alloc;

static inline bool test_alloc_fails(test_alloc *t) {
    t->calls++;
    if (t->left < 0) return false;
    if (t->left > 0) {
        t->left--;
        return false;
    }
    if (t->once) t->left = -1;
    return true;
}

static inline void *test_alloc_alloc(size_t n, void *user) {
    test_alloc *t = user;
    if (test_alloc_fails(t)) return NULL;
    void *p = malloc(n);
    t->live += p != NULL;
    return p;
}

static inline void *test_alloc_realloc(void *p, size_t n, void *user) {
    test_alloc *t = user;
    if (test_alloc_fails(t)) return NULL;
    void *q = realloc(p, n);
    t->live += !p && q;
    return q;
}

static inline void test_alloc_free(void *p, void *user) {
    test_alloc *t = user;
    t->live -= p != NULL;
    free(p);
}

/* The hook for t: allocations left succeed, then they fail (only one, with once). */
static inline es_allocator test_allocator(test_alloc *t, long left, bool once) {
    *t = (test_alloc){left, once, 0, 0};
    return (es_allocator){test_alloc_alloc, test_alloc_realloc, test_alloc_free, t};
}

#endif
