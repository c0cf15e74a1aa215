/* pool.h: the CPU backend's persistent thread pool. n threads run one job together (the caller is
 * thread 0, n - 1 workers wait between jobs); a job synchronises its phases with the pool barrier.
 * Waiting spins briefly (work arrives within microseconds during a forward pass), then sleeps on a
 * condition variable so an idle pool costs nothing. No thread is created per call.
 * It does not split work: jobs partition their own ranges by (ith, nth). */
#ifndef ES_CPU_POOL_H
#define ES_CPU_POOL_H

#include "common.h"

typedef struct es__pool es__pool;

/* Runs on every pool thread: ith in [0, nth). */
typedef void (*es__pool_fn)(void *arg, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads >= 1). spin_us: how long a waiting thread spins before it
 * sleeps; < 0 = default (about 100 us, or 0 when n_threads exceeds the online processors). */
es_status es__pool_create(const es_allocator *alloc, int n_threads, int spin_us, es__err *err, es__pool **out);
/* Stops and joins the workers. NULL is a no-op. */
void es__pool_destroy(es__pool *p);
int es__pool_size(const es__pool *p);

/* Runs fn(arg, ith, n) on all n threads and returns when every one has returned. One job at a time:
 * the caller serialises (the backend lock does). fn must not call es__pool_run. */
void es__pool_run(es__pool *p, es__pool_fn fn, void *arg);

/* Inside a job: returns when all n threads of the pool have reached it; memory written before the
 * barrier by any thread is visible after it to every thread. */
void es__pool_barrier(es__pool *p);

/* The range [*lo, *hi) of [0, n) that thread ith of nth handles, in chunks that are multiples of
 * align (the last may be shorter). */
void es__split_range(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi);

#endif /* ES_CPU_POOL_H */
