/* bench_spec_attn.c: the cost of ALSpec's speculative flash decode against the plain flash decode
 * it replaces (paper, section 4.1: the speculation should come for free), for one decode token at
 * 1K..32K keys, on the CPU backend (es__cpu_attention_spec vs es__cpu_attention, a pool of
 * `threads`, default 1; process CPU time, which a shared machine disturbs less than wall time) or Vulkan (attn.comp + attn_spec.comp vs attn.comp + attn_merge.comp, `reps` calls
 * in one submission). The two are timed alternately, so a busy machine disturbs both alike; the
 * ratio is the median of the per-round ratios. Random inputs; both outputs compared bit for bit
 * (the benchmark fails when the exact output is not the plain one's). JSON lines on stdout.
 * Usage: bench_spec_attn [cpu|vulkan] [rounds] [n_head] [n_head_kv] [head_dim] [chunk] [threads|reps] */
#include "../common/bench_time.h"
#include "cpu/ops.h"
#include "cpu/pool.h"
#include "edgespec.h"
#if ES_BENCH_VULKAN
#include "../common/vk_pin.h"
#include "oprun.h"
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

static uint64_t rng_state = 88172645463325252ull;
static float urand(void) {
    return (float)((double)(bench_xorshift(&rng_state) >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

typedef struct shape {
    int32_t nh, nkv, hd, chunk, n;
} shape;

/* Times one call of the plain (spec == false) or speculative kernel, in ms per call. */
static double time_one(bool spec, const shape *s, es__pool *pool, es_backend *vk, uint32_t reps, const float *q,
                       const float *kc, const float *vc, float *out, float *sp, bool *ok) {
    const float scale = 1.0f / sqrtf((float)s->hd);
    const int32_t zero = 0;
    es__spec_verdict v;
    double ms = 0.0;
    es_status st = ES_OK;
    if (!vk) {
        /* process CPU time: on a shared machine wall time mostly measures the other processes */
        const double t0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
        st = spec ? es__cpu_attention_spec(pool, q, kc, vc, s->n, s->nh, s->nkv, s->hd, s->n, s->chunk, 0.1f, scale,
                                           out, sp, &v, NULL)
                  : es__cpu_attention(pool, q, kc, vc, s->n, s->nh, s->nkv, s->hd, s->n - 1, 1, &zero, &zero, scale,
                                      out, NULL);
        ms = 1e3 * (bench_now(CLOCK_PROCESS_CPUTIME_ID) - t0);
    }
#if ES_BENCH_VULKAN
    else {
        es__vk_attn_bench pb = {NULL, NULL, reps, 0.0, 0, 0.0f};
        st = spec ? es__vk_run_attention_spec(vk, q, kc, vc, (uint32_t)s->n, (uint32_t)s->nh, (uint32_t)s->nkv,
                                              (uint32_t)s->hd, (uint32_t)s->n, (uint32_t)s->chunk, 0.1f, scale, out,
                                              sp, &v, false, reps, &ms)
                  : es__vk_run_attention_bench(vk, q, kc, vc, (uint32_t)s->n, (uint32_t)s->nh, (uint32_t)s->nkv,
                                               (uint32_t)s->hd, (uint32_t)s->n - 1, 1, &zero, scale, out,
                                               &pb);
        if (!spec) ms = pb.ms;
    }
#else
    (void)reps;
#endif
    if (st != ES_OK) {
        fprintf(stderr, "bench_spec_attn: %s\n", es_last_error());
        *ok = false;
    }
    return ms;
}

int main(int argc, char **argv) {
    const bool use_vk = argc > 1 && strcmp(argv[1], "vulkan") == 0;
    const int rounds = argc > 2 ? atoi(argv[2]) : 9;
    shape s = {argc > 3 ? atoi(argv[3]) : 8, argc > 4 ? atoi(argv[4]) : 2, argc > 5 ? atoi(argv[5]) : 64,
               argc > 6 ? atoi(argv[6]) : 256, 0};
    const int knob = argc > 7 ? atoi(argv[7]) : (use_vk ? 10 : 1);
    static const int32_t ns[] = {1024, 2048, 4096, 8192, 16384, 32768};
    es__pool *pool = NULL;
    es_backend *vk = NULL;
    if (!use_vk && knob > 1 && es__pool_create(NULL, knob, 0, NULL, &pool) != ES_OK) return 1;
#if ES_BENCH_VULKAN
    if (use_vk) {
        test_pin_vulkan();
        es_backend_params p = es_backend_default_params();
        p.type = ES_BACKEND_VULKAN;
        if (es_backend_create(&p, &vk) != ES_OK) {
            fprintf(stderr, "bench_spec_attn: no Vulkan backend: %s\n", es_last_error());
            return 1;
        }
    }
#else
    if (use_vk) {
        fprintf(stderr, "bench_spec_attn: built without Vulkan\n");
        return 1;
    }
#endif
    bool ok = true;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0] && ok; i++) {
        s.n = ns[i];
        const size_t qd = (size_t)s.nh * s.hd, cache = (size_t)s.nkv * s.n * s.hd;
        float *q = malloc(sizeof(float) * qd), *kc = malloc(sizeof(float) * cache), *vc = malloc(sizeof(float) * cache);
        float *o1 = malloc(sizeof(float) * qd), *o2 = malloc(sizeof(float) * qd), *sp = malloc(sizeof(float) * qd);
        for (size_t j = 0; j < qd; j++) q[j] = 2.0f * urand();
        for (size_t j = 0; j < cache; j++) kc[j] = urand(), vc[j] = urand();
        double tp[64], ts[64], tr[64];
        const int R = rounds > 64 ? 64 : rounds < 1 ? 1 : rounds;
        time_one(false, &s, pool, vk, (uint32_t)knob, q, kc, vc, o1, sp, &ok); /* warm caches and pipelines */
        time_one(true, &s, pool, vk, (uint32_t)knob, q, kc, vc, o2, sp, &ok);
        for (int r = 0; r < R && ok; r++) {
            /* alternate which goes first, so neither always runs on a warmer cache */
            const bool sf = r % 2;
            if (sf) ts[r] = time_one(true, &s, pool, vk, (uint32_t)knob, q, kc, vc, o2, sp, &ok);
            tp[r] = time_one(false, &s, pool, vk, (uint32_t)knob, q, kc, vc, o1, sp, &ok);
            if (!sf) ts[r] = time_one(true, &s, pool, vk, (uint32_t)knob, q, kc, vc, o2, sp, &ok);
            tr[r] = ts[r] / tp[r];
        }
        if (ok && memcmp(o1, o2, sizeof(float) * qd) != 0) {
            fprintf(stderr, "bench_spec_attn: n %d: the exact output differs from the plain attention\n", s.n);
            ok = false;
        }
        if (ok)
            printf("{\"bench\":\"spec_attn\",\"backend\":\"%s\",\"n\":%d,\"n_head\":%d,\"n_head_kv\":%d,\"head_dim\":%d,"
                   "\"chunk\":%d,\"%s\":%d,\"rounds\":%d,\"plain_ms\":%.4f,\"spec_ms\":%.4f,\"ratio\":%.4f}\n",
                   use_vk ? "vulkan" : "cpu", s.n, s.nh, s.nkv, s.hd, s.chunk, use_vk ? "reps" : "threads", knob, R,
                   bench_median(tp, R), bench_median(ts, R), bench_median(tr, R));
        fflush(stdout);
        free(q), free(kc), free(vc), free(o1), free(o2), free(sp);
    }
    es__pool_destroy(pool);
    es_backend_free(vk);
    return ok ? 0 : 1;
}
