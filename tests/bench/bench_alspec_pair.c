/* bench_alspec_pair.c: ALSpec's Algorithm 2 over two devices with the gating on the devices
 * (lib/vulkan/alspec_vk.c) against the same protocol gated by the host (lib/multi/alspec_pair.c),
 * beside plain decoding on the first device, in one process and alternated round by round. Per
 * configuration: the median wall time of a decoded token, the process CPU time per token (every
 * thread's: lavapipe's devices are threads of this process), queue submissions per token, the layer checks that hit, and whether the greedy text is
 * plain decoding's. One JSON line per configuration and round on stdout.
 * usage: bench_alspec_pair MODEL.gguf DEVICES N_PROMPT N_GEN LAMBDA [CHUNK=256] [ROUNDS=3]
 * DEVICES as es_backends_create reads it: "0,0" (two logical devices on one), "0,1". */
#include "alspec_pair.h"
#include "../common/bench_time.h"
#include "forward_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PLAIN, HOST_GATED, DEVICE_GATED, N_MODES };
static const char *const MODE_NAMES[N_MODES] = {"plain", "alspec_host_gated", "alspec_device_gated"};

typedef struct run {
    double ms_median;
    double cpu_ms_per_token; /* process CPU time (every thread's, both devices' included) */
    double submits_per_token;
    int64_t hits, checks;
    int32_t *text;
} run;

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int32_t argmax(const float *l, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

static es_status prefill(es_context *c, const int32_t *prompt, int32_t n) {
    for (int32_t off = 0; off < n; off += 64) {
        const es_batch b = {n - off < 64 ? n - off : 64, (int32_t *)prompt + off, NULL, NULL, NULL, NULL};
        ES_TRY(es_forward(c, &b));
        ES_TRY(es_commit(c, NULL, b.n_tokens));
    }
    return ES_OK;
}

static uint64_t submits(es_backend *const be[2]) {
    uint64_t n = 0;
    for (int k = 0; k < 2; k++) {
        es_backend_stats st;
        if (es_backend_get_stats(be[k], &st) == ES_OK) n += st.n_forward_submits;
    }
    return n;
}

/* One configuration: the prompt on the contexts it uses, then n_gen greedy tokens, each timed. */
static es_status decode(int mode, es_model *m, es_backend *const be[2], const int32_t *prompt, int32_t n_prompt,
                        int32_t n_gen, float lambda, int32_t chunk, run *out) {
    es_context_params cp = es_context_default_params();
    cp.n_ctx = n_prompt + n_gen + 8;
    es_context *c[2] = {NULL, NULL};
    es__alspec_pair *pair = NULL;
    es_model_info mi;
    es_model_get_info(m, &mi);
    const int32_t V = mi.n_vocab, L = mi.n_layer;
    float *logits = malloc(sizeof(float) * (size_t)V);
    double *ms = malloc(sizeof(double) * (size_t)n_gen);
    es__spec_verdict *v = calloc((size_t)L, sizeof *v);
    es_status s = logits && ms && v ? ES_OK : ES_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < (mode == PLAIN ? 1 : 2) && s == ES_OK; k++) {
        cp.backend = be[k];
        s = es_context_create(m, &cp, &c[k]);
        if (s == ES_OK) s = prefill(c[k], prompt, n_prompt);
    }
    if (s == ES_OK && mode != PLAIN) s = es__alspec_pair_create(c[0], c[1], chunk, mode == HOST_GATED, &pair);
    int32_t tok = prompt[n_prompt - 1] ^ 1;
    const uint64_t sub0 = submits(be);
    const double cpu0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
    out->hits = out->checks = 0;
    for (int32_t t = 0; t < n_gen && s == ES_OK; t++) {
        const double t0 = bench_now(CLOCK_MONOTONIC);
        if (mode == PLAIN) {
            const es_batch one = {1, &tok, NULL, NULL, NULL, NULL};
            const float *l = NULL;
            s = es_forward(c[0], &one);
            if (s == ES_OK) s = es_logits(c[0], 0, &l);
            if (s == ES_OK) memcpy(logits, l, sizeof(float) * (size_t)V);
            if (s == ES_OK) s = es_commit(c[0], NULL, 1);
        } else {
            const es__alspec_call call = {chunk, lambda, NULL, v};
            es__err err = {0};
            s = es__alspec_pair_decode(pair, tok, &call, logits, &err);
            if (s != ES_OK) fprintf(stderr, "bench_alspec_pair: %s\n", err.msg);
            for (int32_t l = 0; l < L && s == ES_OK; l++) {
                out->checks += v[l].valid;
                out->hits += v[l].hit;
            }
        }
        ms[t] = 1e3 * (bench_now(CLOCK_MONOTONIC) - t0);
        tok = argmax(logits, V);
        out->text[t] = tok;
    }
    if (s == ES_OK) {
        out->submits_per_token = (double)(submits(be) - sub0) / n_gen;
        out->cpu_ms_per_token = 1e3 * (bench_now(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / n_gen;
        qsort(ms, (size_t)n_gen, sizeof *ms, cmp_double);
        out->ms_median = ms[n_gen / 2];
    }
    es__alspec_pair_free(pair);
    for (int k = 0; k < 2; k++) es_context_free(c[k]);
    free(logits), free(ms), free(v);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench_alspec_pair MODEL.gguf DEVICES N_PROMPT N_GEN LAMBDA [CHUNK=256] [ROUNDS=3]\n");
        return 2;
    }
    const int32_t n_prompt = atoi(argv[3]), n_gen = atoi(argv[4]);
    const float lambda = (float)atof(argv[5]);
    const int32_t chunk = argc > 6 ? atoi(argv[6]) : 256, rounds = argc > 7 ? atoi(argv[7]) : 3;
    if (n_prompt < 2 * chunk || n_gen < 1 || rounds < 1) {
        fprintf(stderr, "bench_alspec_pair: N_PROMPT must be at least 2 CHUNK, N_GEN and ROUNDS at least 1\n");
        return 2;
    }
    es_model *m = NULL;
    if (es_model_load(argv[1], NULL, &m) != ES_OK) {
        fprintf(stderr, "bench_alspec_pair: %s\n", es_last_error());
        return 1;
    }
    es_backend_params bp = es_backend_default_params();
    bp.type = ES_BACKEND_VULKAN;
    bp.device = argv[2];
    es_backend *be[2] = {NULL, NULL};
    size_t n_be = 0;
    if (es_backends_create(&bp, be, 2, &n_be) != ES_OK || n_be != 2) {
        fprintf(stderr, "bench_alspec_pair: devices '%s': %s\n", argv[2], es_last_error());
        return 1;
    }
    es_model_info mi;
    es_model_get_info(m, &mi);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    uint64_t x = 88172645463325252ull;
    for (int32_t i = 0; i < n_prompt; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        prompt[i] = (int32_t)(x % (uint64_t)mi.n_vocab);
    }
    run r[N_MODES];
    for (int k = 0; k < N_MODES; k++) r[k].text = malloc(sizeof(int32_t) * (size_t)n_gen);
    int rc = 0;
    for (int32_t round = 0; round < rounds && rc == 0; round++)
        for (int mode = 0; mode < N_MODES && rc == 0; mode++) {
            if (decode(mode, m, be, prompt, n_prompt, n_gen, lambda, chunk, &r[mode]) != ES_OK) {
                fprintf(stderr, "bench_alspec_pair: %s: %s\n", MODE_NAMES[mode], es_last_error());
                rc = 1;
                break;
            }
            const bool same = memcmp(r[mode].text, r[PLAIN].text, sizeof(int32_t) * (size_t)n_gen) == 0;
            printf("{\"round\": %d, \"config\": \"%s\", \"devices\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, "
                   "\"lambda\": %g, \"chunk\": %d, \"ms_per_token_median\": %.3f, \"cpu_ms_per_token\": %.3f, \"forward_submits_per_token\": %.2f, "
                   "\"hits\": %lld, \"checks\": %lld, \"text_equals_plain\": %s}\n",
                   round, MODE_NAMES[mode], argv[2], n_prompt, n_gen, (double)lambda, chunk, r[mode].ms_median,
                   r[mode].cpu_ms_per_token, r[mode].submits_per_token, (long long)r[mode].hits, (long long)r[mode].checks,
                   same ? "true" : "false");
            fflush(stdout);
        }
    for (int k = 0; k < N_MODES; k++) free(r[k].text);
    free(prompt);
    for (int k = 0; k < 2; k++) es_backend_free(be[k]);
    es_model_free(m);
    return rc;
}
