/* test_generate.c: es_generate's loop against a fake backend whose logits are a hash of the whole
 * committed token sequence, so any mistake in chunking, positions or commits changes the output.
 * An independent loop over the same fake model gives the expected tokens. Covers greedy and
 * seeded sampling (positions continue across calls), prompt chunking without intermediate logits,
 * n_predict, the n_ctx limit, tokens_out capacity, statistics, invalid arguments, and rollback when
 * a forward call fails; with a real vocabulary (../shared/vocab-tests, loaded vocab-only and run
 * on the fake backend): end of generation, streamed pieces and a callback that stops, and
 * es_spec_generate handing out exactly the same. */
#define _GNU_SOURCE /* memmem */
#include "backend.h"
#include "model.h"
#include "tokenizer.h"

#include "../common/test_ctx.h"
#include "../test.h"

enum { V = 97 };

static int32_t g_nv = V;        /* vocabulary size of the model under test */
static int32_t g_eog_at = -1;   /* sequence length after which the model insists on g_eog_id */
static int32_t g_eog_id = -1;

/* ---- the fake backend: KV slots hold token ids; logits hash the sequence up to the token */

typedef struct fake_kv {
    int32_t *slots;   /* [n_ctx] */
    int n_calls, n_calls_without_logits, fail_at_call;
} fake_kv;

static fake_kv *g_fake; /* the one context under test, for inspection */

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 31)) * 0x7FB5D329728EA185ull;
    z = (z ^ (z >> 27)) * 0x81DADEF4BC2DD44Dull;
    return z ^ (z >> 33);
}

/* logits after the sequence seq[0..n): the model under test */
static void model_logits(const int32_t *seq, int n, float *out) {
    uint64_t h = 0x1234;
    for (int i = 0; i < n; i++) h = mix(h ^ (uint64_t)(seq[i] + 1) * 0x9E3779B97F4A7C15ull);
    for (int v = 0; v < g_nv; v++) out[v] = (float)(mix(h + (uint64_t)v) >> 40) / (float)(1 << 24) * 6.0f - 3.0f;
    if (n == g_eog_at) out[g_eog_id] = 50.0f;
}

static es_status fk_init(es_backend *b, const es_backend_params *p) { (void)b; (void)p; return ES_OK; }
static void fk_destroy(es_backend *b) { (void)b; }
static es_status fk_upload(es_backend *b, const es_model *m, void **w) { (void)b; (void)m; *w = (void *)1; return ES_OK; }
static void fk_release(es_backend *b, void *w) { (void)b; (void)w; }
static es_status fk_ctx_init(es_context *ctx) {
    fake_kv *k = calloc(1, sizeof *k);
    k->slots = calloc((size_t)ctx->n_ctx, sizeof(int32_t));
    k->fail_at_call = -1;
    ctx->impl = k;
    g_fake = k;
    return ES_OK;
}
static void fk_ctx_destroy(es_context *ctx) {
    fake_kv *k = ctx->impl;
    free(k->slots);
    free(k);
}
static es_status fk_forward(es_context *ctx, const es__fwd *f) {
    fake_kv *k = ctx->impl;
    if (k->n_calls++ == k->fail_at_call) return es__fail(&ctx->backend->err, ES_ERR_BACKEND, "fake: injected failure");
    if (f->n_out == 0) k->n_calls_without_logits++;
    for (int j = 0; j < f->n; j++) {
        if (f->parent[j] != j - 1 || f->pos[j] != f->n_past + j)
            return es__fail(&ctx->backend->err, ES_ERR_BACKEND, "fake: expected a chain");
        k->slots[f->n_past + j] = f->tokens[j];
    }
    for (int r = 0; r < f->n_out; r++)
        model_logits(k->slots, f->n_past + f->out_rows[r] + 1, f->logits + (size_t)r * (size_t)g_nv);
    return ES_OK;
}
static es_status fk_compact(es_context *ctx, const int32_t *keep, int32_t n_keep) {
    fake_kv *k = ctx->impl;
    for (int r = 0; r < n_keep; r++) k->slots[ctx->n_past + r] = k->slots[ctx->n_past + keep[r]];
    return ES_OK;
}
static const es__backend_vtbl fake_vt = {"fake", fk_init, fk_destroy, fk_upload, fk_release,
                                         fk_ctx_init, fk_ctx_destroy, fk_forward, fk_compact, NULL, NULL, NULL, 0, NULL,
                                         NULL, NULL, NULL};

static es_backend *fake_backend(void) {
    es_backend *b = calloc(1, sizeof *b);
    b->vt = &fake_vt;
    b->n_threads = 1;
    snprintf(b->name, sizeof b->name, "fake");
    pthread_mutex_init(&b->lock, NULL);
    return b;
}

static es_model *fake_model(void) {
    es_model *m = calloc(1, sizeof *m);
    m->hp.n_vocab = V;
    m->hp.n_ctx_train = 4096;
    m->has_weights = true;
    m->path = "fake.gguf";
    return m;
}

/* The expected continuation of seq[0..n) (extends seq in place): plain decoding written out. */
static void reference(int32_t *seq, int n, int n_new, const es_sampler_params *sp) {
    es_sampler *s;
    CHECK_OK(es_sampler_create(V, sp, NULL, &s));
    float logits[V];
    for (int i = 0; i < n_new; i++) {
        model_logits(seq, n + i, logits);
        CHECK_OK(es_sample(s, logits, n + i, seq, (size_t)(n + i), &seq[n + i]));
    }
    es_sampler_free(s);
}

static es_generate_params gen_params(int n_predict, float temp, uint64_t seed) {
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = n_predict;
    gp.ignore_eog = true; /* the fake model has no vocabulary */
    gp.sampling.temperature = temp;
    gp.sampling.top_k = 40; /* sampling through every filter */
    gp.sampling.top_p = 0.95f;
    gp.sampling.min_p = 0.05f;
    gp.sampling.seed = seed;
    gp.sampling.repeat_penalty = 1.3f;
    return gp;
}

static void test_greedy_and_chunking(es_model *m, es_backend *b) {
    es_context *ctx = test_ctx(m, b, 256, 8, NULL);
    int32_t prompt[37], want[37 + 20], got[32];
    for (int i = 0; i < 37; i++) prompt[i] = want[i] = (i * 13 + 5) % V;
    es_generate_params gp = gen_params(20, 0.0f, 0);
    reference(want, 37, 20, &gp.sampling);
    for (int i = 0; i < 32; i++) got[i] = -7;
    es_generate_stats st;
    CHECK_OK(es_generate(ctx, prompt, 37, &gp, got, 32, &st));
    int bad = 0;
    for (int i = 0; i < 20; i++) bad += got[i] != want[37 + i];
    CHECKF(bad == 0, "%d of 20 greedy tokens differ from plain decoding", bad);
    CHECK(got[20] == -7); /* nothing written past the generated tokens */
    CHECK(st.n_prompt == 37 && st.n_generated == 20 && st.n_forward_calls == 20);
    CHECK(st.prompt_ms >= 0 && st.decode_ms >= 0);
    /* every generated token is committed; 5 prompt chunks of <= 8, 4 of them without logits */
    CHECK(es_context_n_past(ctx) == 57);
    CHECK(g_fake->n_calls == 5 + 20 && g_fake->n_calls_without_logits == 4);
    for (int i = 0; i < 57; i++) CHECK(g_fake->slots[i] == want[i]);
    es_context_free(ctx);
}

static void test_sampling_continues(es_model *m, es_backend *b) {
    /* two calls on one context equal one plain run: the second samples at positions 30.. */
    es_context *ctx = test_ctx(m, b, 256, 16, NULL);
    int32_t seq[128], first[10], second[12];
    for (int i = 0; i < 20; i++) seq[i] = (i * 7 + 1) % V;
    es_generate_params gp = gen_params(10, 0.9f, 4242);
    es_generate_stats st;
    CHECK_OK(es_generate(ctx, seq, 20, &gp, first, 10, &st));
    int32_t more[3] = {4, 5, 6};
    gp.n_predict = 12;
    CHECK_OK(es_generate(ctx, more, 3, &gp, second, 12, &st));
    CHECK(es_context_n_past(ctx) == 20 + 10 + 3 + 12);
    es_context_free(ctx);
    /* the reference: positions are absolute; the penalty sees only the call's own tokens */
    int32_t ref1[64], ref2[64];
    memcpy(ref1, seq, sizeof(int32_t) * 20);
    es_sampler *s;
    CHECK_OK(es_sampler_create(V, &gp.sampling, NULL, &s));
    float logits[V];
    for (int i = 0; i < 10; i++) {
        model_logits(ref1, 20 + i, logits);
        CHECK_OK(es_sample(s, logits, 20 + i, ref1, (size_t)(20 + i), &ref1[20 + i]));
    }
    memcpy(ref2, more, sizeof more);
    int32_t all[64];
    memcpy(all, ref1, sizeof(int32_t) * 30);
    memcpy(all + 30, more, sizeof more);
    for (int i = 0; i < 12; i++) {
        model_logits(all, 33 + i, logits);
        CHECK_OK(es_sample(s, logits, 33 + i, ref2, (size_t)(3 + i), &ref2[3 + i]));
        all[33 + i] = ref2[3 + i];
    }
    es_sampler_free(s);
    int bad = 0;
    for (int i = 0; i < 10; i++) bad += first[i] != ref1[20 + i];
    for (int i = 0; i < 12; i++) bad += second[i] != ref2[3 + i];
    CHECKF(bad == 0, "%d of 22 sampled tokens differ from plain sampling at absolute positions", bad);
}

static void test_context_limit(es_model *m, es_backend *b) {
    es_context *ctx = test_ctx(m, b, 50, 16, NULL);
    int32_t prompt[37], want[64], got[64];
    for (int i = 0; i < 37; i++) prompt[i] = want[i] = (i * 3) % V;
    es_generate_params gp = gen_params(0, 0.0f, 0); /* until the context is full */
    reference(want, 37, 14, &gp.sampling);
    es_generate_stats st;
    CHECK_OK(es_generate(ctx, prompt, 37, &gp, got, 64, &st));
    /* 13 tokens fill slots 37..49; a 14th is sampled from the last slot's logits */
    CHECKF(st.n_generated == 14, "generated %d", st.n_generated);
    CHECK(es_context_n_past(ctx) == 50);
    int bad = 0;
    for (int i = 0; i < 14 && i < st.n_generated; i++) bad += got[i] != want[37 + i];
    CHECK(bad == 0);
    /* tokens_out smaller than the output: only cap entries are written */
    es_truncate(ctx, 0);
    int32_t small[5] = {-1, -1, -1, -1, -1};
    gp.n_predict = 9;
    CHECK_OK(es_generate(ctx, prompt, 37, &gp, small, 4, &st));
    CHECK(st.n_generated == 9 && small[4] == -1);
    for (int i = 0; i < 4; i++) CHECK(small[i] == want[37 + i]);
    /* a prompt that does not fit fails before doing anything */
    es_truncate(ctx, 20);
    CHECK_FAILS(es_generate(ctx, prompt, 31, &gp, NULL, 0, &st), ES_ERR_CONTEXT_FULL, "exceeds n_ctx 50");
    CHECK(es_context_n_past(ctx) == 20);
    es_context_free(ctx);
}

static void test_invalid_and_rollback(es_model *m, es_backend *b) {
    es_context *ctx = test_ctx(m, b, 64, 8, NULL);
    int32_t prompt[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    es_generate_params gp = gen_params(5, 0.0f, 0);
    es_generate_stats st;
    CHECK_FAILS(es_generate(NULL, prompt, 3, &gp, NULL, 0, &st), ES_ERR_INVALID_ARGUMENT, "ctx is NULL");
    CHECK_FAILS(es_generate(ctx, prompt, 0, &gp, NULL, 0, &st), ES_ERR_INVALID_ARGUMENT, "prompt is empty");
    CHECK_FAILS(es_generate(ctx, NULL, 3, &gp, NULL, 0, &st), ES_ERR_INVALID_ARGUMENT, "prompt is empty");
    int32_t bad_tok[2] = {1, V};
    CHECK_FAILS(es_generate(ctx, bad_tok, 2, &gp, NULL, 0, &st), ES_ERR_INVALID_ARGUMENT, "prompt token 1");
    gp.n_predict = -1;
    CHECK_FAILS(es_generate(ctx, prompt, 3, &gp, NULL, 0, &st), ES_ERR_INVALID_ARGUMENT, "n_predict -1");
    gp = gen_params(5, 0.0f, 0);
    gp.sampling.top_p = 2.0f;
    CHECK_FAILS(es_generate(ctx, prompt, 3, &gp, NULL, 0, &st), ES_ERR_INVALID_ARGUMENT, "top_p");
    CHECK(es_context_n_past(ctx) == 0 && g_fake->n_calls == 0);
    CHECK(strstr(es_context_errmsg(ctx), "top_p") != NULL);

    /* a failing forward call in the prompt or in decoding: error, context back where it was */
    gp = gen_params(5, 0.0f, 0);
    CHECK_OK(es_generate(ctx, prompt, 3, &gp, NULL, 0, &st));
    const int32_t n_past0 = es_context_n_past(ctx);
    for (int fail_at = 0; fail_at < 5; fail_at++) {
        g_fake->n_calls = 0;
        g_fake->fail_at_call = fail_at; /* calls 0, 1: prompt chunks; 2..: decoding */
        CHECK_FAILS(es_generate(ctx, prompt, 12, &gp, NULL, 0, &st), ES_ERR_BACKEND, "injected failure");
        CHECK(es_context_n_past(ctx) == n_past0);
        CHECK(strstr(es_context_errmsg(ctx), "injected failure") != NULL);
    }
    g_fake->fail_at_call = -1;
    /* and the context still generates exactly what a fresh one would */
    int32_t got[5], want[64];
    CHECK_OK(es_generate(ctx, prompt, 12, &gp, got, 5, &st));
    es_context_free(ctx);
    ctx = test_ctx(m, b, 64, 8, NULL);
    CHECK_OK(es_generate(ctx, prompt, 3, &gp, NULL, 0, &st));
    CHECK_OK(es_generate(ctx, prompt, 12, &gp, want, 5, &st));
    for (int i = 0; i < 5; i++) CHECK(got[i] == want[i]);
    es_context_free(ctx);
}

typedef struct sink {
    char text[4096];
    size_t len;
    int32_t tokens[64];
    int n, stop_after;
} sink;

static bool collect(int32_t token, const char *piece, size_t len, void *user) {
    sink *k = user;
    if (k->len + len < sizeof k->text) memcpy(k->text + k->len, piece, len);
    k->len += len;
    if (k->n < 64) k->tokens[k->n] = token;
    k->n++;
    return k->stop_after < 0 || k->n < k->stop_after;
}

/* es_spec_generate hands out what es_generate does: the same tokens and pieces, the same stops
 * (end of generation, n_predict inside a step, a callback that says stop), and the sequence
 * ends with the last token handed out, so a later call continues after it. Draft-model
 * speculation with the target itself as drafter (every draft accepted: 5 tokens a step). */
static void test_spec_generate(es_model *m, es_backend *b, const int32_t *prompt, size_t n_prompt) {
    es_context *plain = test_ctx(m, b, 128, 8, NULL), *target = test_ctx(m, b, 128, 8, NULL),
               *drafter = test_ctx(m, b, 128, 8, NULL);
    es_spec_params sp = es_spec_default_params();
    sp.strategy = ES_SPEC_DRAFT;
    sp.draft_ctx = drafter;
    sp.lookahead = 4;
    sp.fixed_tree = true;
    sp.sampling.temperature = 0.0f;
    es_generate_params gp = es_generate_default_params();
    gp.sampling = sp.sampling;
    gp.on_token = collect;
    int32_t want[40], got[40];
    es_generate_stats st, sst;
    const struct {
        int eog_after, n_predict, stop_after;
    } cases[] = {{9, 40, -1}, {-1, 6, -1}, {-1, 0, 3}, {-1, 11, 7}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        g_eog_at = cases[c].eog_after < 0 ? -1 : (int32_t)n_prompt + cases[c].eog_after;
        gp.n_predict = cases[c].n_predict;
        sink kp = {{0}, 0, {0}, 0, cases[c].stop_after}, ks = kp;
        es_truncate(plain, 0);
        gp.user = &kp;
        CHECK_OK(es_generate(plain, prompt, n_prompt, &gp, want, 40, &st));
        es_spec *s = NULL;
        CHECK_OK(es_spec_create(target, &sp, &s));
        if (!s) continue;
        gp.user = &ks;
        CHECK_OK(es_spec_generate(s, prompt, n_prompt, &gp, got, 40, &sst));
        CHECKF(sst.n_generated == st.n_generated && ks.n == kp.n && ks.len == kp.len &&
                   memcmp(ks.text, kp.text, kp.len) == 0 && memcmp(got, want, sizeof(int32_t) * (size_t)kp.n) == 0,
               "case %zu: speculative run handed out %d tokens '%.*s', plain %d '%.*s'", c, ks.n, (int)ks.len, ks.text,
               kp.n, (int)kp.len, kp.text);
        /* the sequence ends with the last token handed out, pending: the KV holds the rest */
        CHECKF(es_context_n_past(target) == (int32_t)n_prompt + ks.n - 1, "case %zu: n_past %d after %d tokens", c,
               es_context_n_past(target), ks.n);
        /* and continues from there as plain decoding of the whole sequence would */
        int32_t seq[128], n = 0, more[5];
        for (size_t i = 0; i < n_prompt; i++) seq[n++] = prompt[i];
        for (int i = 0; i < ks.n; i++) seq[n++] = got[i];
        seq[n++] = prompt[n_prompt - 1];
        g_eog_at = -1;
        es_generate_params gm = gp;
        gm.on_token = NULL;
        gm.n_predict = 5;
        CHECK_OK(es_spec_generate(s, prompt + n_prompt - 1, 1, &gm, more, 5, &sst));
        float *logits = malloc(sizeof(float) * (size_t)g_nv);
        for (int i = 0; i < 5 && logits; i++) {
            model_logits(seq, n, logits);
            int32_t best = 0;
            for (int32_t v = 1; v < g_nv; v++) best = logits[v] > logits[best] ? v : best;
            CHECKF(more[i] == best, "case %zu: continuation token %d is %d, plain decoding says %d", c, i, more[i], best);
            seq[n++] = best;
        }
        free(logits);
        es_spec_free(s);
    }
    g_eog_at = -1;
    es_context_free(plain);
    es_context_free(target);
    es_context_free(drafter);
}

/* Stop strings: one that spans a token boundary ends generation at the token completing it, and
 * no byte of it (or after it) is handed out; one that never occurs changes nothing (the text held
 * back while it might begin one comes out in the end, in a call with token -1); the speculative
 * run hands out the same; a spent time budget ends generation; bad stop strings fail cleanly. */
static void test_stop_strings(es_model *m, es_backend *b, const int32_t *prompt, size_t n_prompt) {
    es_context *c = test_ctx(m, b, 128, 8, NULL);
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = 30;
    gp.on_token = collect;
    sink all = {{0}, 0, {0}, 0, -1};
    gp.user = &all;
    CHECK_OK(es_generate(c, prompt, n_prompt, &gp, NULL, 0, NULL));
    /* a stop string from the middle of the text, across the boundary after token 6's piece */
    size_t cut = 0;
    for (int i = 0; i <= 6; i++) {
        char piece[64];
        size_t len = 0;
        CHECK_OK(es_token_to_piece(m, all.tokens[i], false, piece, sizeof piece, &len));
        cut += len;
    }
    CHECK(cut >= 2 && cut + 2 <= all.len);
    char stop[5];
    memcpy(stop, all.text + cut - 2, 4);
    stop[4] = '\0';
    const char *first = memmem(all.text, all.len, stop, 4);
    CHECK(first != NULL);
    const size_t want = (size_t)(first - all.text);
    const char *stops[2] = {"never-in-this-text", stop};
    gp.stop = stops;
    gp.n_stop = 2;
    for (int spec = 0; spec < 2; spec++) {
        sink k = {{0}, 0, {0}, 0, -1};
        gp.user = &k;
        es_truncate(c, 0);
        es_context *d = spec ? test_ctx(m, b, 128, 8, NULL) : NULL;
        es_spec *sp = NULL;
        if (spec) {
            es_spec_params p = es_spec_default_params();
            p.strategy = ES_SPEC_DRAFT;
            p.draft_ctx = d;
            CHECK_OK(es_spec_create(c, &p, &sp));
        }
        es_generate_stats st;
        CHECK_OK(spec ? es_spec_generate(sp, prompt, n_prompt, &gp, NULL, 0, &st)
                      : es_generate(c, prompt, n_prompt, &gp, NULL, 0, &st));
        CHECKF(k.len == want && memcmp(k.text, all.text, want) == 0,
               "%s: with the stop string '%s' %zu bytes came out, %zu expected", spec ? "speculative" : "plain", stop,
               k.len, want);
        CHECKF(st.n_generated <= 8 && memmem(k.text, k.len, stop, 4) == NULL, "%s: %d tokens generated",
               spec ? "speculative" : "plain", st.n_generated);
        es_spec_free(sp);
        es_context_free(d);
    }
    /* stop strings that never occur: the same text; one that the text's last two bytes begin
     * keeps them back until the end, then hands them out in a last call with token -1 */
    char almost[8];
    memcpy(almost, all.text + all.len - 2, 2);
    memcpy(almost + 2, "\x01\x02", 3);
    stops[1] = almost;
    sink k = {{0}, 0, {0}, 0, -1};
    gp.user = &k;
    es_truncate(c, 0);
    CHECK_OK(es_generate(c, prompt, n_prompt, &gp, NULL, 0, NULL));
    CHECK(k.len == all.len && memcmp(k.text, all.text, all.len) == 0);
    CHECKF(k.n == all.n + 1 && k.tokens[k.n - 1] == -1, "%d calls (%d without the stop strings), last token %d", k.n,
           all.n, k.tokens[k.n - 1]);
    /* a spent time budget: the first token is the last */
    gp.n_stop = 0;
    gp.max_ms = 1e-9;
    es_generate_stats st;
    es_truncate(c, 0);
    CHECK_OK(es_generate(c, prompt, n_prompt, &gp, NULL, 0, &st));
    CHECK(st.n_generated == 1);
    gp.max_ms = -1.0;
    CHECK_FAILS(es_generate(c, prompt, n_prompt, &gp, NULL, 0, &st), ES_ERR_INVALID_ARGUMENT, "max_ms");
    gp.max_ms = 0.0;
    const char *empty[1] = {""};
    gp.stop = empty;
    gp.n_stop = 1;
    CHECK_FAILS(es_generate(c, prompt, n_prompt, &gp, NULL, 0, &st), ES_ERR_INVALID_ARGUMENT, "stop string 0 is empty");
    es_context_free(c);
}

static void test_with_vocabulary(es_backend *b) {
    char path[1024];
    const char *shared = getenv("ES_SHARED_DIR");
    snprintf(path, sizeof path, "%s/vocab-tests/ggml-vocab-llama-spm.gguf", shared ? shared : "../shared");
    es_model_params mp = es_model_default_params();
    mp.vocab_only = true;
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, &mp, &m));
    if (!m) return;
    m->has_weights = true; /* the fake backend needs no weights */
    g_nv = m->hp.n_vocab > 0 ? m->hp.n_vocab : es__vocab_n_tokens(m->vocab);
    m->hp.n_vocab = g_nv;
    g_eog_id = es__vocab_eos(m->vocab);
    CHECK(g_eog_id >= 0 && es_token_is_eog(m, g_eog_id));
    int32_t prompt[6];
    size_t n_prompt = 0;
    CHECK_OK(es_tokenize(m, "In the beginning", 16, true, false, prompt, 6, &n_prompt));

    /* the model ends the text after 9 generated tokens: 9 come out, the end token does not */
    es_context *ctx = test_ctx(m, b, 128, 4, NULL);
    g_eog_at = (int32_t)n_prompt + 9;
    sink k = {{0}, 0, {0}, 0, -1};
    es_generate_params gp = es_generate_default_params();
    gp.sampling.temperature = 0.0f;
    gp.n_predict = 40;
    gp.on_token = collect;
    gp.user = &k;
    int32_t out[40];
    es_generate_stats st;
    CHECK_OK(es_generate(ctx, prompt, n_prompt, &gp, out, 40, &st));
    CHECKF(st.n_generated == 9 && k.n == 9, "generated %d, streamed %d", st.n_generated, k.n);
    CHECK(es_context_n_past(ctx) == (int32_t)n_prompt + 9);
    for (int i = 0; i < k.n && i < 9; i++) CHECK(k.tokens[i] == out[i] && out[i] != g_eog_id);
    /* the streamed pieces are the text of the generated tokens */
    char text[4096];
    size_t len = 0;
    CHECK_OK(es_detokenize(m, out, 9, false, false, text, sizeof text, &len));
    CHECKF(len == k.len && memcmp(text, k.text, len) == 0, "pieces '%.*s' vs text '%.*s'", (int)k.len, k.text,
           (int)len, text);
    /* ignore_eog keeps going through the end token */
    es_truncate(ctx, 0);
    k = (sink){{0}, 0, {0}, 0, -1};
    gp.ignore_eog = true;
    gp.n_predict = 12;
    CHECK_OK(es_generate(ctx, prompt, n_prompt, &gp, out, 40, &st));
    CHECK(st.n_generated == 12 && out[9] == g_eog_id);
    /* a callback that says stop: the token it saw is the last, and it is not committed */
    es_truncate(ctx, 0);
    k = (sink){{0}, 0, {0}, 0, 3};
    gp.ignore_eog = false;
    gp.n_predict = 0;
    CHECK_OK(es_generate(ctx, prompt, n_prompt, &gp, out, 40, &st));
    CHECK(st.n_generated == 3 && k.n == 3 && es_context_n_past(ctx) == (int32_t)n_prompt + 2);
    es_context_free(ctx);
    test_spec_generate(m, b, prompt, n_prompt);
    g_eog_at = -1;
    test_stop_strings(m, b, prompt, n_prompt);
    g_nv = V;
    m->has_weights = false;
    es_model_free(m);
}

int main(void) {
    es_model *m = fake_model();
    es_backend *b = fake_backend();
    test_greedy_and_chunking(m, b);
    test_sampling_continues(m, b);
    test_context_limit(m, b);
    test_invalid_and_rollback(m, b);
    test_with_vocabulary(b);
    es_backend_free(b);
    free(m);
    TEST_MAIN_END();
}
