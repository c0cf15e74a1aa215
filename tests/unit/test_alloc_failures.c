/* test_alloc_failures.c: allocation-failure injection across the public API (SQLite's way,
 * STYLE.md). Every entry point that takes an allocator, and every call on an object made with
 * one, is walked: for each k below the number of allocations the call makes, the k-th allocation
 * fails (once, and from there on), and the call must
 *   - fail with ES_ERR_OUT_OF_MEMORY and a message, its out handle NULL, or succeed with the
 *     result it gives without failures (a documented fallback);
 *   - leak nothing: everything is freed with the objects (the allocator's live blocks are 0 once
 *     they are), and a failed call leaves no more behind than a successful one does (a shared
 *     backend's table of uploads, a context's logits store grown by a forward call that went
 *     through before the failing allocation: those belong to the objects);
 *   - leave the objects it was given usable: the same call, with allocations succeeding again,
 *     gives the same result as before the walk (logits bit for bit, the same tokens).
 * Entry points: es_model_load, es_model_load_adapter, es_backend_create (CPU, and Vulkan when
 * built), es_backends_create (a list of two CPU backends), es_context_create (a private backend,
 * and a shared one on each backend), es_sampler_create, es_tokenize, es_forward, es_generate,
 * es_context_kv_copy, es_spec_create and es_spec_generate.
 * On Vulkan, the walks on contexts share one backend, and only the "from there on" failures are
 * walked (a device and its pipelines per step would take minutes on lavapipe).
 * es_tree_flatten takes no allocator (its scratch is the C library's). The model is tiny (the
 * fuzz targets' shape) so that every walk is short; .ci/run runs this under ASan too. */
#include "edgespec.h"
#include "gguf.h"
#include "mkmodel.h"
#include "test_alloc.h"
#include "vk_pin.h"

#include "../test.h"

#include <stdlib.h>
#include <unistd.h>

#define N_PREDICT 6
#define MAX_WALK 20000

static test_alloc T;
static bool vulkan;
static es_allocator A;
static char model_path[512], adapter_path[512];

static void arm(long k, bool once) {
    T.left = k;
    T.once = once;
}
static void disarm(void) {
    T.left = -1;
}

/* One walk: setup() makes what the call is given (allocations succeed), call() makes the call
 * (its allocations may fail), check() compares a success with the reference and undoes it,
 * teardown() frees what setup made. Returns how many k failed. */
typedef struct walk {
    const char *name;
    void (*setup)(void);
    es_status (*call)(void);
    void (*check)(es_status s, const char *when); /* after every call, success or failure */
    void (*teardown)(void);
} walk;

static bool keep_backend; /* Vulkan: one backend for the walks on its contexts (see main) */
static void release_kept(void);

static int run_walk(const walk *w) {
    /* the call's length: allocations it asks for when none fails */
    disarm();
    w->setup();
    const long before = T.calls, live0 = T.live;
    es_status s = w->call();
    const long n = T.calls - before;
    CHECKF(s == ES_OK, "%s: fails without injected failures: %s", w->name, es_last_error());
    w->check(s, "without failures");
    const long kept = T.live - live0; /* what a success leaves with the objects, its result freed */
    w->teardown();
    const long base = T.live; /* 0, or what a kept backend holds */
    int failed = 0;
    for (long k = 0; k < n && k < MAX_WALK; k++) {
        for (int once = 0; once < (vulkan ? 1 : 2); once++) {
            char when[96];
            snprintf(when, sizeof when, "allocation %ld of %ld failing%s", k, n, once ? " (once)" : " (and later ones)");
            w->setup();
            const long live = T.live;
            arm(k, once);
            s = w->call();
            disarm();
            if (s != ES_OK) {
                failed++;
                CHECKF(s == ES_ERR_OUT_OF_MEMORY, "%s, %s: %s (%s)", w->name, when, es_status_str(s), es_last_error());
                CHECKF(es_last_error()[0] != '\0', "%s, %s: no message", w->name, when);
            }
            w->check(s, when); /* frees a constructor's result; after a failure, the call again */
            CHECKF(T.live - live <= kept, "%s, %s: %ld blocks left behind (a success leaves %ld)", w->name, when,
                   T.live - live, kept);
            w->teardown();
            CHECKF(T.live == base, "%s, %s: %ld blocks live after teardown", w->name, when, T.live - base);
        }
    }
    release_kept();
    CHECKF(T.live == 0, "%s: %ld blocks live after everything was freed", w->name, T.live);
    printf("%-28s %5ld allocations, %5d failing walks\n", w->name, n, failed);
    fflush(stdout);
    CHECKF(n == 0 || failed > 0, "%s: no injected failure was reported", w->name);
    return failed;
}

/* ---- the objects */

static es_model *model;       /* loaded with A */
static es_backend *backend;   /* made with A: CPU, or Vulkan */
static es_context *ctx;       /* on backend, with A */
static es_status out_status;  /* what a constructor's call returned */
static void *out_obj;         /* and made */

static es_model *load_model(const es_allocator *a) {
    es_model_params mp = es_model_default_params();
    mp.allocator = a;
    es_model *m = NULL;
    CHECK_OK(es_model_load(model_path, &mp, &m));
    return m;
}

/* Frees b after checking the validation layer said nothing (EDGESPEC_VK_VALIDATION=1 runs). */
static void free_backend(es_backend *b) {
    es_backend_stats st;
    if (b && es_backend_get_stats(b, &st) == ES_OK)
        CHECKF(st.validation_messages == 0, "%llu Vulkan validation messages", (unsigned long long)st.validation_messages);
    es_backend_free(b);
}

static es_backend *make_backend(void) {
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    bp.allocator = &A;
    bp.type = vulkan ? ES_BACKEND_VULKAN : ES_BACKEND_CPU;
    es_backend *b = NULL;
    CHECK_OK(es_backend_create(&bp, &b));
    return b;
}

static es_context *make_ctx(es_backend *b) {
    es_context_params cp = es_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    cp.backend = b;
    cp.allocator = &A;
    es_context *c = NULL;
    CHECK_OK(es_context_create(model, &cp, &c));
    return c;
}

static void nothing(void) {}

/* ---- es_model_load */

static es_status call_model_load(void) {
    es_model_params mp = es_model_default_params();
    mp.allocator = &A;
    es_model *m = (es_model *)&T; /* poison: a failure must set it to NULL */
    out_status = es_model_load(model_path, &mp, &m);
    out_obj = m;
    return out_status;
}
static void check_model_load(es_status s, const char *when) {
    es_model *m = out_obj;
    CHECKF(s == ES_OK ? m != NULL : m == NULL, "es_model_load, %s: out handle %p", when, out_obj);
    if (s == ES_OK && m) {
        es_model_info i;
        CHECK_OK(es_model_get_info(m, &i));
        CHECKF(i.n_vocab == 260 && i.n_layer == 2 && i.has_weights, "es_model_load, %s: wrong model", when);
    }
    es_model_free(s == ES_OK ? m : NULL);
}

/* ---- es_model_load_adapter on a model loaded with A */

static void setup_model(void) {
    model = load_model(&A);
}
static void teardown_model(void) {
    es_model_free(model);
    model = NULL;
}
static es_status call_load_adapter(void) {
    return es_model_load_adapter(model, adapter_path);
}
static void check_load_adapter(es_status s, const char *when) {
    es_model_info i;
    CHECK_OK(es_model_get_info(model, &i));
    CHECKF(i.has_ss_adapter == (s == ES_OK), "es_model_load_adapter, %s: has_ss_adapter %d", when, i.has_ss_adapter);
    if (s != ES_OK) CHECKF(es_model_load_adapter(model, adapter_path) == ES_OK, "es_model_load_adapter, %s: the "
                           "model takes no adapter after the failure: %s", when, es_model_errmsg(model));
}

/* ---- es_backend_create */

static es_status call_backend_create(void) {
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    bp.allocator = &A;
    bp.type = vulkan ? ES_BACKEND_VULKAN : ES_BACKEND_CPU;
    es_backend *b = (es_backend *)&T;
    out_status = es_backend_create(&bp, &b);
    out_obj = b;
    return out_status;
}
static void check_backend_create(es_status s, const char *when) {
    CHECKF(s == ES_OK ? out_obj != NULL : out_obj == NULL, "es_backend_create, %s: out handle %p", when, out_obj);
    if (s == ES_OK) free_backend(out_obj);
}

/* ---- es_context_create: a private CPU backend, or the shared one */

static int32_t want_tokens[N_PREDICT];
static float want_logits[260];

static es_status call_context_create(void) {
    es_context_params cp = es_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    cp.backend = backend; /* NULL: a private one, made with A too */
    cp.allocator = &A;
    es_context *c = (es_context *)&T;
    out_status = es_context_create(model, &cp, &c);
    out_obj = c;
    return out_status;
}

static es_status generate(es_context *c, int32_t *out) {
    const int32_t prompt[4] = {1, 40, 41, 42};
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = N_PREDICT;
    gp.ignore_eog = true;
    return es_generate(c, prompt, 4, &gp, out, N_PREDICT, NULL);
}

/* A context made (or kept) through a failure decodes what the reference decodes. */
static void check_decodes(es_context *c, const char *what, const char *when) {
    int32_t got[N_PREDICT] = {0};
    CHECK_OK(es_truncate(c, 0));
    es_status s = generate(c, got);
    CHECKF(s == ES_OK && memcmp(got, want_tokens, sizeof got) == 0, "%s, %s: the context decodes other tokens (%s)",
           what, when, s == ES_OK ? "ok" : es_context_errmsg(c));
}

static void check_context_create(es_status s, const char *when) {
    CHECKF(s == ES_OK ? out_obj != NULL : out_obj == NULL, "es_context_create, %s: out handle %p", when, out_obj);
    if (s == ES_OK) {
        check_decodes(out_obj, "es_context_create", when);
        es_context_free(out_obj);
    } else if (backend) {
        es_context *c = make_ctx(backend); /* the shared backend still makes contexts */
        if (c) check_decodes(c, "es_context_create (the backend afterwards)", when);
        es_context_free(c);
    }
}

static void setup_backend(void) {
    if (!model) model = load_model(&A);
    if (!backend) backend = make_backend();
}
static void teardown_backend(void) {
    if (keep_backend) return;
    free_backend(backend);
    backend = NULL;
    es_model_free(model);
    model = NULL;
}
static void release_kept(void) {
    free_backend(backend);
    backend = NULL;
    es_model_free(model);
    model = NULL;
}

/* A fresh backend for every step of a walk: what es_context_create on it does first (weights
 * upload, pipelines) is walked too. */
static void setup_fresh_backend(void) {
    keep_backend = false;
    setup_backend();
}
static void teardown_fresh_backend(void) {
    teardown_backend();
    keep_backend = vulkan;
}

/* ---- es_sampler_create */

static es_status call_sampler_create(void) {
    es_sampler_params sp = es_sampler_default_params();
    sp.temperature = 0.7f;
    sp.top_k = 20;
    es_sampler *s = (es_sampler *)&T;
    out_status = es_sampler_create(260, &sp, &A, &s);
    out_obj = s;
    return out_status;
}
static void check_sampler_create(es_status s, const char *when) {
    CHECKF(s == ES_OK ? out_obj != NULL : out_obj == NULL, "es_sampler_create, %s: out handle %p", when, out_obj);
    if (s != ES_OK) return;
    float logits[260];
    for (int i = 0; i < 260; i++) logits[i] = (float)((i * 37) % 11);
    int32_t tok = -1;
    CHECK_OK(es_sample(out_obj, logits, 3, NULL, 0, &tok));
    CHECK(tok >= 0 && tok < 260);
    es_sampler_free(out_obj);
}

/* ---- es_tokenize on a model loaded with A */

static int32_t want_text[64];
static size_t want_text_n;

static es_status call_tokenize(void) {
    int32_t toks[64];
    size_t n = 0;
    const char *text = "the quick brown fox, once upon a time";
    es_status s = es_tokenize(model, text, strlen(text), true, false, toks, 64, &n);
    if (s == ES_OK && want_text_n == 0) {
        memcpy(want_text, toks, n * sizeof *toks);
        want_text_n = n;
    } else if (s == ES_OK) {
        CHECK(n == want_text_n && memcmp(toks, want_text, n * sizeof *toks) == 0);
    }
    return s;
}
static void check_tokenize(es_status s, const char *when) {
    if (s != ES_OK) CHECKF(call_tokenize() == ES_OK, "es_tokenize, %s: the model does not tokenize afterwards", when);
}

/* ---- es_forward, es_generate on a context made with A */

static void setup_ctx(void) {
    setup_backend();
    ctx = backend ? make_ctx(backend) : NULL;
}
static void teardown_ctx(void) {
    es_context_free(ctx);
    ctx = NULL;
    teardown_backend();
}

static es_status call_forward(void) {
    if (!ctx) return ES_ERR_INVALID_ARGUMENT;
    const int32_t toks[4] = {1, 40, 41, 42};
    const es_batch b = {4, toks, NULL, NULL, NULL, NULL};
    return es_forward(ctx, &b);
}
static void check_forward(es_status s, const char *when) {
    if (!ctx) return;
    CHECKF(es_context_n_past(ctx) == 0, "es_forward, %s: n_past %d", when, es_context_n_past(ctx));
    if (s != ES_OK) s = call_forward(); /* usable afterwards */
    const float *l = NULL;
    CHECKF(s == ES_OK && es_logits(ctx, 3, &l) == ES_OK && memcmp(l, want_logits, sizeof want_logits) == 0,
           "es_forward, %s: other logits (%s)", when, es_context_errmsg(ctx));
}

/* ---- es_context_kv_copy: ctx holds a committed prompt, kv_dst is empty */
static es_context *kv_dst;
static void setup_kv_copy(void) {
    setup_ctx();
    kv_dst = backend ? make_ctx(backend) : NULL;
    if (!ctx || !kv_dst) return;
    CHECK_OK(call_forward());
    CHECK_OK(es_commit(ctx, NULL, 0));
}
static void teardown_kv_copy(void) {
    es_context_free(kv_dst);
    kv_dst = NULL;
    teardown_ctx();
}
static es_status call_kv_copy(void) {
    return ctx && kv_dst ? es_context_kv_copy(kv_dst, ctx) : ES_ERR_INVALID_ARGUMENT;
}
static void check_kv_copy(es_status s, const char *when) {
    if (!ctx || !kv_dst) return;
    CHECKF(es_context_n_past(kv_dst) == (s == ES_OK ? 4 : 0), "es_context_kv_copy, %s: n_past %d", when,
           es_context_n_past(kv_dst));
    CHECKF(es_context_n_past(ctx) == 4, "es_context_kv_copy, %s: the source's n_past %d", when, es_context_n_past(ctx));
    if (s != ES_OK) CHECKF(call_kv_copy() == ES_OK, "es_context_kv_copy, %s: fails again after the failure: %s", when,
                           es_context_errmsg(kv_dst));
}

/* ---- es_backends_create: a device list of two CPU backends (the list's own work; a Vulkan
 * backend's allocations are es_backend_create's walk) */
static es_status call_backends_create(void) {
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 1;
    bp.allocator = &A;
    bp.device = "host,host";
    es_backend *b[2] = {(es_backend *)&T, (es_backend *)&T};
    size_t n = 0;
    out_status = es_backends_create(&bp, b, 2, &n);
    CHECKF(out_status == ES_OK ? n == 2 && b[0] && b[1] : n == 0 && !b[0] && !b[1],
           "es_backends_create: %s with n %zu and handles %p %p", es_status_str(out_status), n, (void *)b[0],
           (void *)b[1]);
    for (size_t i = 0; out_status == ES_OK && i < n; i++) free_backend(b[i]);
    return out_status;
}
static void check_backends_create(es_status s, const char *when) {
    (void)s;
    (void)when;
}

static es_status call_generate(void) {
    int32_t got[N_PREDICT];
    es_status s = ctx ? generate(ctx, got) : ES_ERR_INVALID_ARGUMENT;
    if (s == ES_OK) CHECK(memcmp(got, want_tokens, sizeof got) == 0);
    return s;
}
static void check_generate(es_status s, const char *when) {
    if (!ctx) return;
    if (s != ES_OK) CHECKF(es_context_n_past(ctx) == 0, "es_generate, %s: n_past %d after a failure", when,
                           es_context_n_past(ctx));
    check_decodes(ctx, "es_generate", when);
}

/* ---- es_spec_create, es_spec_generate (Speculative Streaming on the adapter) */

static es_spec *spec;

static void setup_spec_ctx(void) {
    setup_backend();
    es_model_info i;
    if (model && es_model_get_info(model, &i) == ES_OK && !i.has_ss_adapter)
        CHECK_OK(es_model_load_adapter(model, adapter_path));
    ctx = backend ? make_ctx(backend) : NULL;
}

static es_status call_spec_create(void) {
    es_spec_params sp = es_spec_default_params();
    sp.fixed_tree = true;
    es_spec *s = (es_spec *)&T;
    out_status = ctx ? es_spec_create(ctx, &sp, &s) : ES_ERR_INVALID_ARGUMENT;
    out_obj = s;
    return out_status;
}

static es_status spec_generate(es_spec *s, int32_t *got) {
    const int32_t prompt[4] = {1, 40, 41, 42};
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = N_PREDICT;
    gp.ignore_eog = true;
    return es_spec_generate(s, prompt, 4, &gp, got, N_PREDICT, NULL);
}

static void check_spec_create(es_status s, const char *when) {
    if (!ctx) return;
    CHECKF(s == ES_OK ? out_obj != NULL : out_obj == NULL, "es_spec_create, %s: out handle %p", when, out_obj);
    if (s == ES_OK) {
        int32_t got[N_PREDICT];
        CHECKF(spec_generate(out_obj, got) == ES_OK && memcmp(got, want_tokens, sizeof got) == 0,
               "es_spec_create, %s: the object does not decode the reference", when);
        es_spec_free(out_obj);
    }
    check_decodes(ctx, "es_spec_create (the context afterwards)", when);
}

static void setup_spec(void) {
    setup_spec_ctx();
    es_spec_params sp = es_spec_default_params();
    sp.fixed_tree = true;
    if (ctx) CHECK_OK(es_spec_create(ctx, &sp, &spec));
}
static void teardown_spec(void) {
    es_spec_free(spec);
    spec = NULL;
    teardown_ctx();
}
static es_status call_spec_generate(void) {
    int32_t got[N_PREDICT];
    es_status s = spec ? spec_generate(spec, got) : ES_ERR_INVALID_ARGUMENT;
    if (s == ES_OK) CHECK(memcmp(got, want_tokens, sizeof got) == 0);
    return s;
}
static void check_spec_generate(es_status s, const char *when) {
    if (!spec) return;
    es_spec_free(spec); /* the context it drove goes on */
    spec = NULL;
    (void)s;
    check_decodes(ctx, "es_spec_generate (the context afterwards)", when);
}

/* ---- files */

static void write_adapter(void) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    es__gguf_set_str(w, "general.type", "adapter");
    es__gguf_set_str(w, "edgespec.adapter.type", "speculative_streaming");
    es__gguf_set_u32(w, "edgespec.ss.n_streams", 2);
    es__gguf_set_u32(w, "edgespec.ss.n_msa_layers", 1);
    float v[32 * 2];
    for (int i = 0; i < 64; i++) v[i] = 0.01f * (float)((i * 7) % 13 - 6);
    const int64_t ne[2] = {32, 2};
    CHECK_OK(es__gguf_add_tensor(w, "ss.stream_embd.weight", ES__DTYPE_F32, 2, ne, v));
    es__err err;
    CHECK_OK(es__gguf_write_file(w, adapter_path, &err));
    es__gguf_writer_free(w);
}

static void references(void) {
    disarm();
    model = load_model(NULL);
    es_context_params cp = es_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    bp.type = vulkan ? ES_BACKEND_VULKAN : ES_BACKEND_CPU;
    CHECK_OK(es_backend_create(&bp, &backend));
    cp.backend = backend;
    CHECK_OK(es_context_create(model, &cp, &ctx));
    if (ctx) {
        CHECK_OK(generate(ctx, want_tokens));
        CHECK_OK(es_truncate(ctx, 0));
        CHECK_OK(call_forward());
        const float *l = NULL;
        CHECK_OK(es_logits(ctx, 3, &l));
        if (l) memcpy(want_logits, l, sizeof want_logits);
    }
    es_context_free(ctx);
    ctx = NULL;
    free_backend(backend);
    backend = NULL;
    es_model_free(model);
    model = NULL;
}

int main(int argc, char **argv) {
    vulkan = argc > 1 && strcmp(argv[1], "vulkan") == 0;
    /* A Vulkan backend costs a device and its pipelines: the walks on its contexts share one
     * (made, with its pipelines, by the walk's first run), the context-creation walk makes a fresh
     * one each step, and only the "from there on" failures are walked (the CPU walks both). */
    keep_backend = vulkan;
    if (vulkan) test_pin_vulkan();
    A = test_allocator(&T, -1, false);
    snprintf(model_path, sizeof model_path, "alloc-failures-%d.gguf", (int)getpid());
    snprintf(adapter_path, sizeof adapter_path, "alloc-failures-%d.ss.gguf", (int)getpid());
    es_mk_params p = es_mk_default_params();
    p.n_vocab = 260;
    p.n_embd = 32;
    p.n_layer = 2;
    p.n_head = 2;
    p.n_head_kv = 1;
    p.n_ff = 32;
    p.n_ctx = 64;
    p.seed = 5;
    es__err err = {ES_OK, ""};
    CHECKF(es_mk_write(&p, model_path, &err) == ES_OK, "mkmodel: %s", err.msg);
    write_adapter();
    references();

    const walk walks[] = {
        {"es_model_load", nothing, call_model_load, check_model_load, nothing},
        {"es_model_load_adapter", setup_model, call_load_adapter, check_load_adapter, teardown_model},
        {"es_backend_create", nothing, call_backend_create, check_backend_create, nothing},
        {"es_backends_create", nothing, call_backends_create, check_backends_create, nothing},
        {"es_context_create (private)", setup_model, call_context_create, check_context_create, teardown_model},
        {"es_context_create (shared)", setup_fresh_backend, call_context_create, check_context_create,
         teardown_fresh_backend},
        {"es_sampler_create", nothing, call_sampler_create, check_sampler_create, nothing},
        {"es_tokenize", setup_model, call_tokenize, check_tokenize, teardown_model},
        {"es_forward", setup_ctx, call_forward, check_forward, teardown_ctx},
        {"es_generate", setup_ctx, call_generate, check_generate, teardown_ctx},
        {"es_context_kv_copy", setup_kv_copy, call_kv_copy, check_kv_copy, teardown_kv_copy},
        {"es_spec_create", setup_spec_ctx, call_spec_create, check_spec_create, teardown_ctx},
        {"es_spec_generate", setup_spec, call_spec_generate, check_spec_generate, teardown_spec},
    };
    for (size_t i = 0; i < sizeof walks / sizeof *walks; i++) {
        /* the private-backend walk is the CPU's: a NULL backend in params is always a CPU one */
        if (vulkan && walks[i].setup == setup_model && walks[i].call == call_context_create) continue;
        run_walk(&walks[i]);
    }
    remove(model_path);
    remove(adapter_path);
    TEST_MAIN_END();
}
