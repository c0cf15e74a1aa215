/* bench.c: edgespec's benchmark: model load time, prefill (ppN: one forward call of N tokens) and
 * decode (tgN: N forward calls of one token each, every token committed, starting from an empty
 * cache or --depth committed tokens) tokens/s over repetitions with medians, the weight bytes one
 * decoded token reads and the bandwidth that implies, the machine's measured read bandwidth,
 * peak resident memory and the load average around the run. One JSON object on stdout.
 * Public API only, so any backend the library offers can be measured the same way.
 * Not here: correctness (tests do that) or comparisons with other programs (docs/perf.md). */
#define _DEFAULT_SOURCE
#include "bench.h"

#include "edgespec.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_PP 16
#define MAX_REPS 1000

typedef struct opts {
    const char *model;
    es_backend_type backend;
    const char *device;
    int threads;   /* 0 = library default */
    int reps;
    int pp[MAX_PP];
    int n_pp;
    int tg;
    int ctx;
    int depth;
    bool membw;
    bool profile;
    unsigned long long seed;
    uint32_t vk_flags; /* ES_VK_* bits for es_backend_params, from --vk-flags */
} opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f, const char *prog) {
    fprintf(f,
            "usage: %s -m MODEL [options]\n"
            "  -m, --model PATH     GGUF model (required)\n"
            "  -b, --backend NAME   cpu (default) or vulkan\n"
            "      --device STR     Vulkan device: index, name substring or type\n"
            "  -t, --threads N      CPU threads (default: all processors)\n"
            "  -r, --reps N         repetitions of each test (default 5); medians are reported\n"
            "  -p, --pp LIST        prefill sizes, comma-separated (default 64,512; 0 = none)\n"
            "  -n, --tg N           decoded tokens per decode test (default 128; 0 = none)\n"
            "  -c, --ctx N          context size in tokens (default 2048)\n"
            "  -d, --depth N        committed tokens before each decode test (default 0)\n"
            "      --no-membw       skip the machine read-bandwidth measurement\n"
            "      --profile        per-op times of the backend over all timed tests\n"
            "      --vk-flags LIST  Vulkan fallbacks to force (es_vk_flags_parse names, e.g. fallbacks)\n"
            "  -s, --seed N         seed of the random prompt tokens (default 1)\n"
            "Prints one JSON object on stdout.\n",
            prog);
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

/* Returns 0 to go on, 1 on a usage error, -1 after --help. */
static int parse_args(int argc, char **argv, opts *o) {
    *o = (opts){NULL, ES_BACKEND_CPU, NULL, 0, 5, {64, 512}, 2, 128, 2048, 0, true, false, 1, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(s, l) (strcmp(a, s) == 0 || strcmp(a, l) == 0)
#define NEED()                                                                                     \
    do {                                                                                           \
        if (!v) {                                                                                  \
            fprintf(stderr, "bench: %s needs a value\n", a);                                       \
            return 1;                                                                              \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
        bool ok = true;
        if (OPT("-h", "--help")) {
            usage(stdout, argv[0]);
            return -1;
        } else if (OPT("-m", "--model")) {
            NEED();
            o->model = v;
        } else if (OPT("-b", "--backend")) {
            NEED();
            if (strcmp(v, "cpu") == 0)
                o->backend = ES_BACKEND_CPU;
            else if (strcmp(v, "vulkan") == 0)
                o->backend = ES_BACKEND_VULKAN;
            else
                ok = false;
        } else if (strcmp(a, "--device") == 0) {
            NEED();
            o->device = v;
        } else if (OPT("-t", "--threads")) {
            NEED();
            ok = parse_int(v, 0, 1024, &o->threads);
        } else if (OPT("-r", "--reps")) {
            NEED();
            ok = parse_int(v, 1, MAX_REPS, &o->reps);
        } else if (OPT("-p", "--pp")) {
            NEED();
            o->n_pp = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && ok; tok = strtok_r(NULL, ",", &save)) {
                int n;
                ok = parse_int(tok, 0, 1 << 20, &n) && o->n_pp < MAX_PP;
                if (ok && n > 0) o->pp[o->n_pp++] = n;
            }
        } else if (OPT("-n", "--tg")) {
            NEED();
            ok = parse_int(v, 0, 1 << 20, &o->tg);
        } else if (OPT("-c", "--ctx")) {
            NEED();
            ok = parse_int(v, 1, 1 << 24, &o->ctx);
        } else if (OPT("-d", "--depth")) {
            NEED();
            ok = parse_int(v, 0, 1 << 24, &o->depth);
        } else if (strcmp(a, "--no-membw") == 0) {
            o->membw = false;
        } else if (strcmp(a, "--profile") == 0) {
            o->profile = true;
        } else if (strcmp(a, "--vk-flags") == 0) {
            NEED();
            if (es_vk_flags_parse(v, &o->vk_flags) != ES_OK) {
                fprintf(stderr, "bench: --vk-flags: %s\n", es_last_error());
                return 1;
            }
        } else if (OPT("-s", "--seed")) {
            NEED();
            int s = 0;
            ok = parse_int(v, 0, 1 << 30, &s);
            o->seed = (unsigned long long)s;
        } else {
            fprintf(stderr, "bench: unknown option '%s' (see --help)\n", a);
            return 1;
        }
        if (!ok) {
            fprintf(stderr, "bench: bad value for %s: '%s'\n", a, v ? v : "");
            return 1;
        }
#undef OPT
#undef NEED
    }
    if (!o->model) {
        fprintf(stderr, "bench: -m MODEL is required\n");
        usage(stderr, argv[0]);
        return 1;
    }
    for (int i = 0; i < o->n_pp; i++)
        if (o->pp[i] > o->ctx) {
            fprintf(stderr, "bench: pp%d does not fit in a context of %d tokens\n", o->pp[i], o->ctx);
            return 1;
        }
    if ((long)o->depth + o->tg > o->ctx) {
        fprintf(stderr, "bench: depth %d + tg %d does not fit in a context of %d tokens\n", o->depth, o->tg, o->ctx);
        return 1;
    }
    return 0;
}

/* ---- machine read bandwidth: n threads each summing its share of a buffer larger than caches */

typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

static void *bw_thread(void *varg) {
    bw_arg *a = varg;
    uint64_t s[8] = {0};
    for (size_t i = 0; i + 8 <= a->n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a->p[i + j];
    a->sum = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
    return NULL;
}

/* Best of 5 passes over 512 MiB, in GB/s (1e9 bytes); < 0 if it could not run. */
static double measure_membw(int n_threads) {
    const size_t bytes = (size_t)512 << 20, n = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(bytes);
    if (!buf) return -1;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 64) n_threads = 64;
    pthread_t th[64];
    bw_arg args[64];
    double best = -1;
    uint64_t sink = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = now_s();
        int started = 0;
        for (int t = 0; t < n_threads; t++) {
            size_t lo = n / (size_t)n_threads * (size_t)t, hi = t == n_threads - 1 ? n : n / (size_t)n_threads * (size_t)(t + 1);
            args[t] = (bw_arg){buf + lo, hi - lo, 0};
            if (t == 0 || pthread_create(&th[t], NULL, bw_thread, &args[t]) == 0) started = t + 1;
            else break;
        }
        bw_thread(&args[0]);
        for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
        double dt = now_s() - t0;
        for (int t = 0; t < started; t++) sink += args[t].sum;
        size_t done = 0;
        for (int t = 0; t < started; t++) done += args[t].n * sizeof(uint64_t);
        double gbs = (double)done / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    return sink == 42 ? best + 0.0 : best; /* sink keeps the sums alive */
}

/* ---- helpers */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double tmp[MAX_REPS];
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static bool read_loadavg(double la[3]) {
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return false;
    bool ok = fscanf(f, "%lf %lf %lf", &la[0], &la[1], &la[2]) == 3;
    fclose(f);
    return ok;
}

static void json_loadavg(const char *key, bool ok, const double la[3]) {
    printf("    \"%s\": ", key);
    if (ok)
        printf("[%.2f, %.2f, %.2f]", la[0], la[1], la[2]);
    else
        printf("null");
}

static unsigned long long rng_next(unsigned long long *s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct test_result {
    char name[32];
    int n_tokens, depth;
    double ms[MAX_REPS];
    double tok_s[MAX_REPS];
} test_result;

static int fail(const char *what, es_status s, const char *msg) {
    fprintf(stderr, "bench: %s failed: %s: %s\n", what, es_status_str(s), msg);
    return 2;
}

/* Weight bytes one decoded token reads: every weight tensor once, except the token embedding of
 * which one row is read (all of it when it doubles as the output head). */
static double decode_weight_bytes(const es_model *m, const es_model_info *mi) {
    double total = 0;
    for (int32_t i = 0; i < mi->n_tensors; i++) {
        es_tensor_info ti;
        if (es_model_tensor_info(m, i, &ti) != ES_OK) continue;
        if (strcmp(ti.name, "token_embd.weight") == 0 && !mi->tied_output)
            total += (double)ti.nbytes / (double)(ti.ne[1] > 0 ? ti.ne[1] : 1);
        else
            total += (double)ti.nbytes;
    }
    return total;
}

/* The type of the first layer's attention query weight, as a short label of the file's type. */
static const char *weight_type(const es_model *m, const es_model_info *mi) {
    for (int32_t i = 0; i < mi->n_tensors; i++) {
        es_tensor_info ti;
        if (es_model_tensor_info(m, i, &ti) == ES_OK && strcmp(ti.name, "blk.0.attn_q.weight") == 0) return ti.type;
    }
    return "unknown";
}

static int run_tests(const opts *o, es_backend *be, es_context *ctx, const es_model_info *mi, test_result *res,
                     int *n_res) {
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)o->ctx);
    if (!toks) return fail("allocation", ES_ERR_OUT_OF_MEMORY, "prompt tokens");
    unsigned long long rs = o->seed;
    for (int i = 0; i < o->ctx; i++) toks[i] = (int32_t)(rng_next(&rs) % (unsigned long long)mi->n_vocab);
    int rc = 0;
    es_status s;
    /* warm-up: touches the weights and the code paths once */
    {
        es_batch b = {o->n_pp > 0 ? (o->pp[0] < 16 ? o->pp[0] : 16) : 1, toks, NULL, NULL, NULL, NULL};
        if ((s = es_truncate(ctx, 0)) != ES_OK || (s = es_forward(ctx, &b)) != ES_OK) {
            rc = fail("warm-up", s, es_context_errmsg(ctx));
            goto done;
        }
        es_backend_profile_reset(be);
    }
    for (int p = 0; p < o->n_pp; p++) {
        test_result *r = &res[(*n_res)++];
        snprintf(r->name, sizeof r->name, "pp%d", o->pp[p]);
        r->n_tokens = o->pp[p];
        r->depth = 0;
        for (int rep = 0; rep < o->reps; rep++) {
            es_batch b = {o->pp[p], toks, NULL, NULL, NULL, NULL};
            es_truncate(ctx, 0);
            double t0 = now_s();
            if ((s = es_forward(ctx, &b)) != ES_OK) {
                rc = fail(r->name, s, es_context_errmsg(ctx));
                goto done;
            }
            double dt = now_s() - t0;
            r->ms[rep] = dt * 1e3;
            r->tok_s[rep] = o->pp[p] / dt;
        }
    }
    if (o->tg > 0) {
        test_result *r = &res[(*n_res)++];
        snprintf(r->name, sizeof r->name, "tg%d", o->tg);
        r->n_tokens = o->tg;
        r->depth = o->depth;
        for (int rep = 0; rep < o->reps; rep++) {
            es_truncate(ctx, 0);
            for (int done_tok = 0; done_tok < o->depth;) {
                int chunk = o->depth - done_tok > 512 ? 512 : o->depth - done_tok;
                es_batch b = {chunk, toks + done_tok, NULL, NULL, NULL, NULL};
                if ((s = es_forward(ctx, &b)) != ES_OK || (s = es_commit(ctx, NULL, 0)) != ES_OK) {
                    rc = fail("depth prefill", s, es_context_errmsg(ctx));
                    goto done;
                }
                done_tok += chunk;
            }
            int32_t tok = toks[o->depth];
            double t0 = now_s();
            for (int i = 0; i < o->tg; i++) {
                es_batch b = {1, &tok, NULL, NULL, NULL, NULL};
                const float *logits;
                if ((s = es_forward(ctx, &b)) != ES_OK || (s = es_logits(ctx, 0, &logits)) != ES_OK) {
                    rc = fail(r->name, s, es_context_errmsg(ctx));
                    goto done;
                }
                int32_t best = 0;
                for (int32_t v = 1; v < mi->n_vocab; v++)
                    if (logits[v] > logits[best]) best = v;
                tok = best;
                if ((s = es_commit(ctx, NULL, 0)) != ES_OK) {
                    rc = fail(r->name, s, es_context_errmsg(ctx));
                    goto done;
                }
            }
            double dt = now_s() - t0;
            r->ms[rep] = dt * 1e3;
            r->tok_s[rep] = o->tg / dt;
        }
    }
done:
    free(toks);
    return rc;
}

static void print_json(const opts *o, const es_model *m, const es_model_info *mi, const es_backend *be, int n_threads,
                       double load_ms, double ctx_ms, const test_result *res, int n_res, double membw, bool la0_ok,
                       const double la0[3], bool la1_ok, const double la1[3], long long peak_rss) {
    const double wbytes = decode_weight_bytes(m, mi);
    printf("{\n  \"tool\": \"edgespec-bench\",\n  \"version\": \"%d.%d.%d\",\n", ES_VERSION_MAJOR, ES_VERSION_MINOR,
           ES_VERSION_PATCH);
    printf("  \"model\": ");
    json_str(o->model);
    printf(",\n  \"model_name\": ");
    json_str(mi->name);
    printf(",\n  \"weight_type\": ");
    json_str(weight_type(m, mi));
    printf(",\n  \"n_params\": %llu,\n  \"weight_bytes\": %llu,\n", (unsigned long long)mi->n_params,
           (unsigned long long)mi->weight_bytes);
    printf("  \"n_vocab\": %d, \"n_embd\": %d, \"n_layer\": %d, \"n_head\": %d, \"n_head_kv\": %d, \"n_ff\": %d,\n",
           mi->n_vocab, mi->n_embd, mi->n_layer, mi->n_head, mi->n_head_kv, mi->n_ff);
    printf("  \"backend\": ");
    json_str(es_backend_name(be));
    printf(",\n  \"n_threads\": %d,\n  \"n_ctx\": %d,\n  \"reps\": %d,\n", n_threads, o->ctx, o->reps);
    printf("  \"load_ms\": %.3f,\n  \"context_ms\": %.3f,\n  \"tests\": [", load_ms, ctx_ms);
    double tg_median = -1;
    for (int i = 0; i < n_res; i++) {
        const test_result *r = &res[i];
        const double med = median(r->tok_s, o->reps);
        if (r->name[0] == 't') tg_median = med;
        printf("%s\n    {\"name\": \"%s\", \"n_tokens\": %d, \"depth\": %d, \"tok_s_median\": %.3f, \"ms_median\": %.3f,",
               i ? "," : "", r->name, r->n_tokens, r->depth, med, median(r->ms, o->reps));
        printf(" \"tok_s\": [");
        for (int k = 0; k < o->reps; k++) printf("%s%.3f", k ? ", " : "", r->tok_s[k]);
        printf("]}");
    }
    printf("\n  ],\n  \"decode\": {\n    \"weight_bytes_per_token\": %.0f,\n", wbytes);
    if (tg_median > 0)
        printf("    \"weight_gbs\": %.3f\n  },\n", wbytes * tg_median / 1e9);
    else
        printf("    \"weight_gbs\": null\n  },\n");
    printf("  \"machine\": {\n");
    if (membw > 0)
        printf("    \"read_gbs\": %.3f,\n    \"read_threads\": %d,\n", membw, n_threads);
    else
        printf("    \"read_gbs\": null,\n    \"read_threads\": null,\n");
    json_loadavg("loadavg_before", la0_ok, la0);
    printf(",\n");
    json_loadavg("loadavg_after", la1_ok, la1);
    printf("\n  },\n");
    if (o->profile) {
        es_profile_entry e[64];
        size_t n = 0;
        es_backend_profile(be, e, 64, &n);
        printf("  \"profile\": [");
        for (size_t i = 0; i < n && i < 64; i++) {
            printf("%s\n    {\"op\": ", i ? "," : "");
            json_str(e[i].op);
            printf(", \"calls\": %llu, \"ms\": %.3f}", (unsigned long long)e[i].calls, e[i].ms);
        }
        printf("\n  ],\n");
    }
    es_backend_stats bs;
    if (es_backend_get_stats(be, &bs) == ES_OK) {
        /* counters since the warm-up (the profile reset clears them), device memory since creation */
        printf("  \"backend_stats\": {\"forward_calls\": %llu, \"dispatches_per_forward\": %.2f, "
               "\"submits_per_forward\": %.2f, \"device_bytes\": %llu, \"device_peak_bytes\": %llu, "
               "\"weight_device_bytes\": %llu},\n",
               (unsigned long long)bs.n_forward, bs.n_forward ? (double)bs.n_dispatches / (double)bs.n_forward : 0.0,
               bs.n_forward ? (double)bs.n_forward_submits / (double)bs.n_forward : 0.0,
               (unsigned long long)bs.device_bytes, (unsigned long long)bs.device_peak_bytes,
               (unsigned long long)bs.weight_bytes);
    }
    printf("  \"peak_rss_bytes\": %lld\n}\n", peak_rss);
}

int es_bench_main(int argc, char **argv) {
    opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr != 0) return pr < 0 ? 0 : 1;
    double la0[3], la1[3];
    bool la0_ok = read_loadavg(la0);

    double t0 = now_s();
    es_model *m = NULL;
    es_model_params mp = es_model_default_params();
    es_status s = es_model_load(o.model, &mp, &m);
    if (s != ES_OK) return fail("es_model_load", s, es_last_error());
    const double load_ms = (now_s() - t0) * 1e3;
    es_model_info mi;
    if ((s = es_model_get_info(m, &mi)) != ES_OK) {
        es_model_free(m);
        return fail("es_model_get_info", s, es_last_error());
    }

    es_backend_params bp = es_backend_default_params();
    bp.type = o.backend;
    bp.n_threads = o.threads;
    bp.device = o.device;
    bp.vk_flags = o.vk_flags;
    bp.profile = o.profile;
    es_backend *be = NULL;
    if ((s = es_backend_create(&bp, &be)) != ES_OK) {
        es_model_free(m);
        return fail("es_backend_create", s, es_last_error());
    }
    int max_pp = 1;
    for (int i = 0; i < o.n_pp; i++) max_pp = o.pp[i] > max_pp ? o.pp[i] : max_pp;
    es_context_params cp = es_context_default_params();
    cp.n_ctx = o.ctx;
    cp.n_batch = max_pp > 512 ? max_pp : 512;
    if (cp.n_batch > o.ctx) cp.n_batch = o.ctx;
    cp.backend = be;
    es_context *ctx = NULL;
    t0 = now_s();
    if ((s = es_context_create(m, &cp, &ctx)) != ES_OK) {
        es_backend_free(be);
        es_model_free(m);
        return fail("es_context_create", s, es_last_error());
    }
    const double ctx_ms = (now_s() - t0) * 1e3;

    static test_result res[MAX_PP + 1];
    int n_res = 0;
    int rc = run_tests(&o, be, ctx, &mi, res, &n_res);
    const int n_threads = o.threads > 0 ? o.threads : 0;
    if (rc == 0) {
        bool la1_ok = read_loadavg(la1);
        /* peak memory before the bandwidth test's 512 MiB buffer */
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        /* the bandwidth test runs after the timed tests so it cannot disturb them */
        int bw_threads = n_threads > 0 ? n_threads : 1;
        double membw = o.membw ? measure_membw(bw_threads) : -1;
        print_json(&o, m, &mi, be, n_threads, load_ms, ctx_ms, res, n_res, membw, la0_ok, la0, la1_ok, la1,
                   (long long)ru.ru_maxrss * 1024);
    }
    es_context_free(ctx);
    es_backend_free(be);
    es_model_free(m);
    return rc;
}
