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

/* ---- Phases with work stealing. A job's phases are numbered 0, 1, ... in the order every thread
 * meets them. Each phase splits its units [0, n) into one contiguous range per thread (sequential
 * weight streams stay sequential) and hands them out in chunks; a thread that finishes its range
 * takes chunks from the others' ranges, so a thread the OS has descheduled (or a slower core)
 * holds up at most the chunk it is working on. A phase ends when every unit is done (not when
 * every thread has arrived): es__work_end waits for that, and a latecomer finds nothing left.
 * Which thread computes a unit never changes what the unit computes. */
typedef struct es__sched es__sched;

/* Bytes of a schedule for n_phases phases of n_threads threads. */
size_t es__sched_bytes(int n_threads, int n_phases);
/* Clears a schedule (caller-allocated, es__sched_bytes, 64-byte aligned) before a job. */
void es__sched_reset(es__sched *s, int n_threads, int n_phases);

typedef struct es__work {
    es__pool *pool;
    es__sched *s;
    int phase, ith, nth;
    int64_t n, chunk, align;
    int victim;          /* next thread whose range to take from */
    int64_t pending;     /* units claimed and not yet reported done */
} es__work;

/* Starts this thread's part of phase `phase` over n units; chunks are multiples of align. */
void es__work_begin(es__work *w, es__pool *p, es__sched *s, int phase, int64_t n, int64_t align, int ith, int nth);
/* Claims the next chunk [*lo, *hi); false when none is left (es__work_end then reports them done). */
bool es__work_next(es__work *w, int64_t *lo, int64_t *hi);
/* Reports the last chunk done and returns when the whole phase is done. */
void es__work_end(es__work *w);
/* The first chunk [*lo, *hi) thread ith of nth claims in a phase over n units (its own range comes
 * first), known before the phase starts: what it may prefetch while the phase before ends. */
void es__work_first(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi);

#endif /* ES_CPU_POOL_H */
