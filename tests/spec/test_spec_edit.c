/* test_spec_edit.c: a speculative sequence edited between and during generations stays lossless.
 * For every strategy (Speculative Streaming on a random adapter; a draft model made of the
 * target's first layer, drafting for ES_SPEC_DRAFT and for DSI with two target servers), greedy and seeded sampling, on a context small enough to fill:
 * - es_spec_generate with shift_context runs through several context shifts and emits what
 *   es_generate with shift_context emits, token for token;
 * - es_spec_shift between two generations equals es_context_shift on a context holding all but
 *   the last token, which is then read at its new position (what the pending root means);
 * - es_spec_truncate (into the shifted sequence, and to 0) and a new turn equal plain decoding of
 *   the edited sequence;
 * - a sequence saved with es_context_save and taken up by es_spec_resume on another context goes
 *   on as the original does; taken up by the object that holds it, nothing is computed again;
 * - a step or a generation cancelled with es_context_abort (between steps, and from another
 *   thread at a random moment; DSI, whose own preemptions cancel the same context, at random
 *   moments only) hands out a prefix of plain decoding's tokens, the sequence ends with them,
 *   and the next turn equals plain decoding of the whole;
 * - bad arguments fail and leave the sequence as it was. */
#include "mem_adapter.h"
#include "spec_run.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define N_CTX 40
#define N_GEN 150 /* several shifts of a 40-token context */

static const char *kind_name(es_spec_strategy kind) {
    return kind == ES_SPEC_STREAM ? "stream" : kind == ES_SPEC_DRAFT ? "draft" : "dsi";
}

static es_context *drafter_ctx; /* ES_SPEC_DRAFT's, made per run */

static es_spec *new_spec(es_context *c, const es_model *draft, es_spec_strategy kind, const es_sampler_params *sp) {
    es_spec_params p = es_spec_default_params();
    p.strategy = kind;
    p.sampling = *sp;
    p.ignore_eog = true;
    p.n_streams = 3;
    p.top_k = 2;
    if (kind == ES_SPEC_DRAFT || kind == ES_SPEC_DSI) {
        drafter_ctx = new_ctx(draft, N_CTX, 16);
        p.draft_ctx = drafter_ctx;
        p.lookahead = 3;
        p.dsi.n_targets = 2; /* a server besides the caller's context, whose cache must shift too */
    }
    es_spec *s = NULL;
    CHECK_OK(es_spec_create(c, &p, &s));
    return s;
}

static void free_spec(es_spec *s) {
    es_spec_free(s);
    es_context_free(drafter_ctx);
    drafter_ctx = NULL;
}

static es_generate_params gen_params(const es_sampler_params *sp, int32_t n_predict) {
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = n_predict;
    gp.sampling = *sp;
    gp.ignore_eog = true;
    return gp;
}

static bool same(const int32_t *a, int32_t na, const int32_t *b, int32_t nb, const char *what, const char *strategy,
                 int mode) {
    int32_t diff = -1;
    for (int32_t i = 0; i < na && diff < 0; i++)
        if (i >= nb || a[i] != b[i]) diff = i;
    CHECKF(na == nb && diff < 0, "%s, %s, mode %d: %d vs %d tokens, first difference at %d", what, strategy, mode, nb,
           na, diff);
    if (diff >= 0) { /* want/got, to see where the runs part */
        for (int32_t i = 0; i < na; i++) fprintf(stderr, "%d/%d ", a[i], i < nb ? b[i] : -1);
        fprintf(stderr, "\n");
    }
    return na == nb && diff < 0;
}

/* Generation through full contexts: both shift at the same moments by the same amounts. */
static void check_generate_shift(const es_model *m, const es_model *draft, es_spec_strategy kind,
                                 const es_sampler_params *sp, const int32_t *prompt, int mode) {
    es_generate_params gp = gen_params(sp, N_GEN);
    gp.shift_context = true;
    gp.n_keep = 5;
    int32_t want[N_GEN], got[N_GEN];
    es_generate_stats sw, sg;
    es_context *c = new_ctx(m, N_CTX, 16);
    CHECK_OK(es_generate(c, prompt, 12, &gp, want, N_GEN, &sw));
    es_context_free(c);
    c = new_ctx(m, N_CTX, 16);
    es_spec *s = new_spec(c, draft, kind, sp);
    CHECK_OK(es_spec_generate(s, prompt, 12, &gp, got, N_GEN, &sg));
    same(want, sw.n_generated, got, sg.n_generated, "generation through shifts", kind_name(kind), mode);
    CHECK(sg.n_generated == N_GEN && es_spec_n_tokens(s) <= N_CTX + 1);
    /* a shift that cannot make room fails as es_generate's does */
    gp.n_keep = N_CTX;
    CHECK_FAILS(es_spec_generate(s, prompt, 1, &gp, NULL, 0, NULL), ES_ERR_CONTEXT_FULL, "leaves nothing to drop");
    free_spec(s);
    es_context_free(c);
}

/* A context holding seq[0..29) shifted by (3, 9): what es_spec_shift(3, 9) leaves of a 30-token
 * sequence whose last token is the pending root. */
static es_context *shifted_reference(const es_model *m, const int32_t *seq) {
    es_context *r = new_ctx(m, N_CTX, 32);
    es_batch b = {29, seq, NULL, NULL, NULL, NULL};
    CHECK_OK(es_forward(r, &b));
    CHECK_OK(es_commit(r, NULL, 0));
    CHECK_OK(es_context_shift(r, 3, 9));
    return r;
}

/* An explicit shift between two turns, and truncations. */
static void check_edits(const es_model *m, const es_model *draft, es_spec_strategy kind, const es_sampler_params *sp,
                        const int32_t *prompt, int mode) {
    const char *name = kind_name(kind);
    es_generate_params gp = gen_params(sp, 10);
    int32_t first[10], want[12], got[12], n_want;
    es_generate_stats st;
    es_context *c = new_ctx(m, N_CTX, 16);
    es_spec *s = new_spec(c, draft, kind, sp);
    CHECK_OK(es_spec_generate(s, prompt, 20, &gp, first, 10, &st));
    CHECK(st.n_generated == 10 && es_spec_n_tokens(s) == 30 && es_context_n_past(c) == 29);
    /* bad edits change nothing */
    CHECK_FAILS(es_spec_shift(s, 3, 27), ES_ERR_INVALID_ARGUMENT, "drop 27 of the 29");
    CHECK_FAILS(es_spec_shift(s, -1, 2), ES_ERR_INVALID_ARGUMENT, "keep -1");
    CHECK_FAILS(es_spec_truncate(s, 31), ES_ERR_INVALID_ARGUMENT, "keep 31 tokens of a sequence of 30");
    CHECK(es_spec_n_tokens(s) == 30 && es_context_n_past(c) == 29);

    /* the reference: the same 30 tokens, all but the last in the cache, shifted, then the last read */
    int32_t seq[30];
    memcpy(seq, prompt, sizeof(int32_t) * 20);
    memcpy(seq + 20, first, sizeof first);
    int32_t turn[4] = {seq[29], prompt[40], prompt[41], prompt[42]};
    gp.n_predict = 12;
    es_context *r = shifted_reference(m, seq);
    CHECK_OK(es_generate(r, turn, 4, &gp, want, 12, &st));
    es_context_free(r);
    CHECK_OK(es_spec_shift(s, 3, 9));
    CHECK(es_spec_n_tokens(s) == 21 && es_context_n_past(c) == 20);
    CHECK_OK(es_spec_generate(s, turn + 1, 3, &gp, got, 12, &st));
    same(want, 12, got, st.n_generated, "a shift between turns", name, mode);

    /* truncate into the shifted first turn, then a new turn: the shifted cache cut back, then the
     * new tokens read after the kept ones */
    CHECK_OK(es_spec_truncate(s, 8));
    CHECK(es_spec_n_tokens(s) == 8 && es_context_n_past(c) == 7);
    r = shifted_reference(m, seq);
    CHECK_OK(es_truncate(r, 7));
    const int32_t again[5] = {seq[12 + 4], prompt[50], prompt[51], prompt[52], prompt[53]};
    CHECK_OK(es_generate(r, again, 5, &gp, want, 12, &st));
    es_context_free(r);
    CHECK_OK(es_spec_generate(s, again + 1, 4, &gp, got, 12, &st));
    same(want, 12, got, st.n_generated, "a truncation", name, mode);

    /* truncate to nothing: a new sequence on the same objects */
    CHECK_OK(es_spec_truncate(s, 0));
    CHECK(es_spec_n_tokens(s) == 0 && es_context_n_past(c) == 0);
    n_want = plain(m, prompt + 30, 6, sp, 12, N_CTX, 16, want);
    CHECK_OK(es_spec_generate(s, prompt + 30, 6, &gp, got, 12, &st));
    same(want, n_want, got, st.n_generated, "a new sequence after truncating to 0", name, mode);
    free_spec(s);
    es_context_free(c);
}

/* A sequence saved to a session file and taken up by another context and object goes on as the
 * original would have. */
static void check_resume(const es_model *m, const es_model *draft, es_spec_strategy kind, const es_sampler_params *sp,
                         const int32_t *prompt, int mode) {
    char path[] = "/tmp/edgespec-spec-edit-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    es_generate_params gp = gen_params(sp, 9);
    int32_t seq[15 + 9], want[12], got[12];
    es_generate_stats st, sw;
    memcpy(seq, prompt, sizeof(int32_t) * 15);
    es_context *c = new_ctx(m, N_CTX, 16);
    es_spec *s = new_spec(c, draft, kind, sp);
    CHECK_OK(es_spec_generate(s, prompt, 15, &gp, seq + 15, 9, &st));
    CHECK_OK(es_context_save(c, seq, 23, path));
    /* taken up by the object that made it, the target computes nothing again (DSI's server 0 is
     * the caller's context, which holds it): cutting the last token off reads nothing */
    es_backend_stats b0, b1;
    CHECK_OK(es_spec_resume(s, seq, 24));
    CHECK_OK(es_backend_get_stats(backend, &b0));
    CHECK_OK(es_spec_truncate(s, 23));
    CHECK_OK(es_backend_get_stats(backend, &b1));
    CHECKF(b1.n_forward == b0.n_forward, "%s: %llu forward calls to cut back a resumed sequence", kind_name(kind),
           (unsigned long long)(b1.n_forward - b0.n_forward));
    CHECK_OK(es_spec_feed(s, seq + 23, 1)); /* the sequence as saved again */
    gp.n_predict = 12;
    CHECK_OK(es_spec_generate(s, prompt + 40, 3, &gp, want, 12, &sw));
    free_spec(s);
    es_context_free(c);

    c = new_ctx(m, N_CTX, 16);
    s = new_spec(c, draft, kind, sp);
    int32_t loaded[N_CTX];
    size_t n_loaded = 0;
    CHECK_OK(es_context_load(c, path, loaded, N_CTX, &n_loaded));
    CHECK(n_loaded == 23 && memcmp(loaded, seq, sizeof(int32_t) * 23) == 0);
    CHECK_FAILS(es_spec_resume(s, seq, 23), ES_ERR_INVALID_ARGUMENT, "needs the target to hold 22");
    CHECK_OK(es_spec_resume(s, seq, 24));
    CHECK(es_spec_n_tokens(s) == 24);
    CHECK_OK(es_spec_generate(s, prompt + 40, 3, &gp, got, 12, &st));
    same(want, sw.n_generated, got, st.n_generated, "a resumed session", kind_name(kind), mode);
    free_spec(s);
    es_context_free(c);
    remove(path);
}

typedef struct canceller {
    es_context *ctx;
    long delay_us;
} canceller;

static void *abort_later(void *user) {
    canceller *c = user;
    struct timespec ts = {0, c->delay_us * 1000};
    nanosleep(&ts, NULL);
    es_context_abort(c->ctx);
    return NULL;
}

/* The first n tokens: by steps, a step cancelled on the way (how 0: deterministic, the request
 * made between steps); by es_spec_generate with another thread aborting at a random moment (how
 * 1: the call may end first, leaving the request for the next call). *n is what was emitted. */
static es_status cancelled_run(es_spec *s, es_context *c, const es_sampler_params *sp, const int32_t *prompt, int how,
                               test_rng *rng, int32_t *out, int32_t *n, const char *name) {
    *n = 0;
    if (how == 0) {
        ES_TRY(es_spec_feed(s, prompt, 10));
        bool cancelled = false;
        while (*n < 20) {
            if (*n >= 5 && !cancelled) es_context_abort(c);
            int32_t buf[ES_SPEC_MAX_DEPTH + 1];
            size_t got = 0;
            const es_status st = es_spec_step(s, buf, ES__MIN((size_t)(20 - *n), ES__ARRAY_LEN(buf)), &got);
            if (*n >= 5 && !cancelled) {
                cancelled = true;
                CHECKF(st == ES_ERR_CANCELLED && got == 0 && es_spec_n_tokens(s) == (size_t)(10 + *n),
                       "%s: a step with an abort request: %s, %zu tokens", name, es_status_str(st), got);
                continue;
            }
            ES_TRY(st);
            for (size_t i = 0; i < got; i++) out[(*n)++] = buf[i];
        }
        return ES_ERR_CANCELLED;
    }
    canceller cn = {c, (long)(test_rng_u64(rng) % 3000)};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, abort_later, &cn) == 0);
    es_generate_params gp = gen_params(sp, 20);
    es_generate_stats st;
    const es_status rc = es_spec_generate(s, prompt, 10, &gp, out, 20, &st);
    pthread_join(th, NULL);
    *n = st.n_generated;
    return rc;
}

/* Cancellation leaves the sequence with what was handed out, and the next turn equals plain
 * decoding of the whole, for a request that found a call running and for one left pending. */
static void check_abort(const es_model *m, const es_model *draft, es_spec_strategy kind, const es_sampler_params *sp,
                        const int32_t *prompt, int mode, int how, test_rng *rng) {
    const char *name = kind_name(kind);
    es_context *c = new_ctx(m, N_CTX, 16);
    es_spec *s = new_spec(c, draft, kind, sp);
    int32_t got[20], want[40], seq[40], n = 0;
    es_status rc = cancelled_run(s, c, sp, prompt, how, rng, got, &n, name);
    CHECKF(rc == ES_ERR_CANCELLED || (how == 1 && rc == ES_OK), "%s, mode %d, how %d: %s (%s)", name, mode, how,
           es_status_str(rc), es_spec_errmsg(s));
    int32_t n_want = plain(m, prompt, 10, sp, 20, N_CTX, 16, want);
    same(want, n, got, ES__MIN(n, n_want), "the tokens around a cancellation", name, mode);
    /* a request that came during the prompt's prefill leaves nothing: the prompt comes again */
    const bool none = how == 1 && rc == ES_ERR_CANCELLED && n == 0 && es_spec_n_tokens(s) == 0;
    CHECKF(none || es_spec_n_tokens(s) == (size_t)(10 + n), "%s, mode %d, how %d: a sequence of %zu tokens after %d emitted",
           name, mode, how, es_spec_n_tokens(s), n);

    memcpy(seq, prompt, sizeof(int32_t) * 10);
    memcpy(seq + 10, got, sizeof(int32_t) * (size_t)n);
    memcpy(seq + 10 + n, prompt + 40, sizeof(int32_t) * 3);
    n_want = plain(m, seq, 13 + n, sp, 5, N_CTX, 16, want);
    const int32_t *turn = none ? seq : prompt + 40, n_turn = none ? 13 : 3;
    const size_t held = es_spec_n_tokens(s);
    es_generate_params gp = gen_params(sp, 5);
    es_generate_stats st;
    if (how == 0) es_context_abort(c); /* pending: the next call fails at its first forward */
    rc = es_spec_generate(s, turn, (size_t)n_turn, &gp, got, 5, &st);
    if (rc == ES_ERR_CANCELLED) {
        CHECKF(es_spec_n_tokens(s) == held && st.n_generated == 0,
               "%s, mode %d, how %d: a call cancelled at once left %zu tokens (not %zu) and emitted %d", name, mode, how,
               es_spec_n_tokens(s), held, st.n_generated);
        rc = es_spec_generate(s, turn, (size_t)n_turn, &gp, got, 5, &st);
    } else {
        CHECK(how == 1);
    }
    CHECK_OK(rc);
    same(want, n_want, got, st.n_generated, "the turn after a cancellation", name, mode);
    free_spec(s);
    es_context_free(c);
}

/* argv[1]: "cpu" (default) or "vulkan". */
int main(int argc, char **argv) {
    backend = test_backend_from_args(argc, argv, 1, NULL);
    if (!backend) TEST_MAIN_END();
    /* a small vocabulary, so that drafts are often accepted and steps emit several tokens */
    mem_model_cfg mc = MEM_CFG_STREAM(3);
    es_model *m = mem_model_create(&mc);
    mem_adapter_cfg ac = MEM_ADAPTER_STREAM;
    mem_adapter_attach(m, &ac);
    mem_model_cfg dc = MEM_CFG_STREAM(1);
    es_model *draft = mem_model_create(&dc);

    test_rng rng = {41};
    int32_t prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % 12);
    es_sampler_params greedy = es_sampler_default_params(), sampled = es_sampler_default_params();
    sampled.temperature = 0.9f;
    sampled.top_p = 0.95f;
    sampled.seed = 19;
    const es_sampler_params *modes[2] = {&greedy, &sampled};
    const es_spec_strategy kinds[3] = {ES_SPEC_STREAM, ES_SPEC_DRAFT, ES_SPEC_DSI};
    for (int k = 0; k < 3; k++)
        for (int mode = 0; mode < 2; mode++) {
            check_generate_shift(m, draft, kinds[k], modes[mode], prompt, mode);
            check_edits(m, draft, kinds[k], modes[mode], prompt, mode);
            check_resume(m, draft, kinds[k], modes[mode], prompt, mode);
            /* DSI's workers run between steps: a request made between them is taken by whichever
             * later step's work server 0 runs, not necessarily the next; DSI is cancelled at
             * random moments only */
            for (int how = kinds[k] == ES_SPEC_DSI; how < 2; how++)
                for (int r = 0; r < (how ? 4 : 1); r++) check_abort(m, draft, kinds[k], modes[mode], prompt, mode, how, &rng);
        }

    mem_adapter_model_free(m);
    mem_model_free(draft);
    test_backend_end(backend);
    TEST_MAIN_END();
}
