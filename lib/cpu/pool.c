/* pool.c: persistent worker threads with a spin-then-sleep barrier (see pool.h). The sleeping path
 * uses one mutex and condition variable; a thread announces itself in n_sleepers (sequentially
 * consistent) before it re-checks the generation it waits on, and a releaser bumps the generation
 * before it looks at n_sleepers, so a wake-up is never lost. */
#include "pool.h"

#include "../../platform/platform.h"

#include <pthread.h>
#include <stdatomic.h>

#define ES__CACHE_LINE 64

struct es__pool {
    int n;                       /* threads including the caller                        */
    double spin_s;               /* spin this long before sleeping                      */
    const es_allocator *alloc;
    pthread_t *threads;          /* [n - 1]                                             */
    int n_started;
    es__pool_fn fn;              /* the current job, published by job_gen               */
    void *arg;
    bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Alignas(ES__CACHE_LINE) atomic_uint job_gen;
    _Alignas(ES__CACHE_LINE) atomic_uint bar_count;
    _Alignas(ES__CACHE_LINE) atomic_uint bar_gen;
    _Alignas(ES__CACHE_LINE) atomic_int n_sleepers;
};

typedef struct worker_arg {
    es__pool *pool;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

/* Returns once *var differs from old. */
static void wait_change(es__pool *p, atomic_uint *var, unsigned old) {
    if (atomic_load_explicit(var, memory_order_acquire) != old) return;
    if (p->spin_s > 0) {
        double t0 = es__time_now();
        for (unsigned i = 1;; i++) {
            cpu_relax();
            if (atomic_load_explicit(var, memory_order_acquire) != old) return;
            if ((i & 63) == 0 && es__time_now() - t0 > p->spin_s) break;
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleepers, 1);
    while (atomic_load(var) == old) pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

/* Bumps *var and wakes sleepers. */
static void release(es__pool *p, atomic_uint *var) {
    atomic_fetch_add(var, 1);
    if (atomic_load(&p->n_sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

void es__pool_barrier(es__pool *p) {
    if (p->n == 1) return;
    unsigned gen = atomic_load(&p->bar_gen);
    if (atomic_fetch_add(&p->bar_count, 1) == (unsigned)p->n - 1) {
        atomic_store(&p->bar_count, 0);
        release(p, &p->bar_gen);
    } else {
        wait_change(p, &p->bar_gen, gen);
    }
}

static void *worker_main(void *varg) {
    worker_arg *wa = varg;
    es__pool *p = wa->pool;
    const int ith = wa->ith;
    unsigned seen = 0;
    for (;;) {
        wait_change(p, &p->job_gen, seen);
        seen = atomic_load(&p->job_gen);
        if (p->stop) break;
        p->fn(p->arg, ith, p->n);
        es__pool_barrier(p);
    }
    return NULL;
}

void es__pool_run(es__pool *p, es__pool_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    release(p, &p->job_gen);
    fn(arg, 0, p->n);
    es__pool_barrier(p);
}

static void stop_workers(es__pool *p) {
    p->stop = true;
    release(p, &p->job_gen);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

es_status es__pool_create(const es_allocator *alloc, int n_threads, int spin_us, es__err *err, es__pool **out) {
    *out = NULL;
    ES_RETURN_IF(n_threads < 1 || n_threads > ES_MAX_THREADS, err, ES_ERR_INVALID_ARGUMENT,
                 "cpu backend: n_threads %d outside [1, %d]", n_threads, ES_MAX_THREADS);
    es__pool *p = es__calloc(alloc, 1, sizeof *p);
    ES_RETURN_IF(!p, err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory for the thread pool");
    p->n = n_threads;
    p->alloc = alloc;
    if (spin_us < 0) spin_us = n_threads > es__cpu_count() ? 0 : 100;
    p->spin_s = spin_us * 1e-6;
    atomic_init(&p->job_gen, 0);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_gen, 0);
    atomic_init(&p->n_sleepers, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        es__free(alloc, p);
        return es__fail(err, ES_ERR_BACKEND, "cpu backend: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        es__free(alloc, p);
        return es__fail(err, ES_ERR_BACKEND, "cpu backend: pthread_cond_init failed");
    }
    /* worker args live right after the thread handles */
    p->threads = es__calloc(alloc, (size_t)n_threads, sizeof(pthread_t) + sizeof(worker_arg));
    if (!p->threads) {
        es__pool_destroy(p);
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "cpu backend: out of memory for %d threads", n_threads);
    }
    worker_arg *args = (worker_arg *)(void *)(p->threads + n_threads);
    for (int i = 0; i < n_threads - 1; i++) {
        args[i] = (worker_arg){p, i + 1};
        if (pthread_create(&p->threads[i], NULL, worker_main, &args[i]) != 0) {
            es__pool_destroy(p);
            return es__fail(err, ES_ERR_BACKEND, "cpu backend: could not start worker thread %d of %d", i + 1,
                            n_threads - 1);
        }
        p->n_started++;
    }
    *out = p;
    return ES_OK;
}

void es__pool_destroy(es__pool *p) {
    if (!p) return;
    stop_workers(p);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    es__free(p->alloc, p->threads);
    es__free(p->alloc, p);
}

int es__pool_size(const es__pool *p) {
    return p->n;
}

/* ---- phases with work stealing */

typedef struct sched_slot {
    _Alignas(ES__CACHE_LINE) atomic_llong v;
} sched_slot;

/* Per phase: one slot for the units done, then one cursor per thread (offset into its range). */
struct es__sched {
    sched_slot slots[1];
};

size_t es__sched_bytes(int n_threads, int n_phases) {
    return sizeof(sched_slot) * (size_t)n_phases * (size_t)(n_threads + 1);
}

void es__sched_reset(es__sched *s, int n_threads, int n_phases) {
    const size_t n = (size_t)n_phases * (size_t)(n_threads + 1);
    for (size_t i = 0; i < n; i++) atomic_init(&s->slots[i].v, 0);
}

static sched_slot *phase_slots(es__sched *s, int phase, int nth) {
    return s->slots + (size_t)phase * (size_t)(nth + 1);
}

/* Chunks: about 8 per thread's range, in multiples of align (rounded down), at most 256 aligns. */
static int64_t chunk_of(int64_t n, int64_t align, int nth) {
    const int64_t per = (n + nth - 1) / nth;
    const int64_t chunk = (per + 7) / 8 / align * align;
    return ES__MAX(align, ES__MIN(chunk, 256 * align));
}

void es__work_begin(es__work *w, es__pool *p, es__sched *s, int phase, int64_t n, int64_t align, int ith, int nth) {
    if (align < 1) align = 1;
    *w = (es__work){p, s, phase, ith, nth, n, chunk_of(n, align, nth), align, ith, 0};
}

void es__work_first(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi) {
    if (align < 1) align = 1;
    es__split_range(n, align, ith, nth, lo, hi);
    *hi = ES__MIN(*hi, *lo + chunk_of(n, align, nth));
}

/* Adds the pending units to the phase's done count; wakes sleepers when that completes it. */
static void report_done(es__work *w, sched_slot *ph) {
    if (!w->pending) return;
    const long long done = atomic_fetch_add(&ph[0].v, w->pending) + w->pending;
    w->pending = 0;
    if (done >= w->n && atomic_load(&w->pool->n_sleepers) > 0) {
        pthread_mutex_lock(&w->pool->mu);
        pthread_cond_broadcast(&w->pool->cv);
        pthread_mutex_unlock(&w->pool->mu);
    }
}

/* Thread v's range of units, in the same multiples as es__split_range. */
static void range_of(const es__work *w, int v, int64_t *lo, int64_t *hi) {
    es__split_range(w->n, w->align, v, w->nth, lo, hi);
}

/* The units a thread completes are reported once, when it finds no chunk left (es__work_end): the
 * done count is the one line every thread writes, and an atomic add per chunk would move it between
 * the cores as often as chunks start. */
bool es__work_next(es__work *w, int64_t *lo, int64_t *hi) {
    sched_slot *ph = phase_slots(w->s, w->phase, w->nth);
    /* own range first, then the others' in turn */
    for (int tries = 0; tries < w->nth; tries++) {
        const int v = w->victim;
        int64_t rlo, rhi;
        range_of(w, v, &rlo, &rhi);
        if (rlo < rhi) {
            const int64_t off = atomic_fetch_add_explicit(&ph[1 + v].v, w->chunk, memory_order_relaxed);
            if (rlo + off < rhi) {
                *lo = rlo + off;
                *hi = ES__MIN(rhi, *lo + w->chunk);
                w->pending += *hi - *lo;
                return true;
            }
        }
        w->victim = (v + 1) % w->nth;
    }
    return false;
}

void es__work_end(es__work *w) {
    es__pool *p = w->pool;
    sched_slot *ph = phase_slots(w->s, w->phase, w->nth);
    report_done(w, ph);
    if (atomic_load_explicit(&ph[0].v, memory_order_acquire) >= w->n) return;
    /* wait for chunks other threads still hold: spin, then sleep until a finisher wakes us */
    if (p->spin_s > 0) {
        double t0 = es__time_now();
        for (unsigned i = 1;; i++) {
            cpu_relax();
            if (atomic_load_explicit(&ph[0].v, memory_order_acquire) >= w->n) return;
            if ((i & 63) == 0 && es__time_now() - t0 > p->spin_s) break;
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleepers, 1);
    while (atomic_load(&ph[0].v) < w->n) pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

void es__split_range(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi) {
    if (align < 1) align = 1;
    int64_t chunks = (n + align - 1) / align;
    int64_t c0 = chunks * ith / nth, c1 = chunks * (ith + 1) / nth;
    *lo = ES__MIN(n, c0 * align);
    *hi = ES__MIN(n, c1 * align);
}
