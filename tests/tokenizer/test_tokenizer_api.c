/* test_tokenizer_api.c: the public tokenizer API on vocabulary-only models (es_model_load with
 * vocab_only on the files in ../shared/vocab-tests): BOS handling, count-only calls, pieces,
 * decoding, end of generation, argument errors that leave the shared model's message alone,
 * tokenizer errors surfacing from es_model_load, and several threads encoding with one model. */
#include "edgespec.h"
#include "gguf.h"
#include "model.h"
#include "ref_encoders.h"

#include "../test.h"

#include <pthread.h>

static es_model *load(const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/vocab-tests/%s", tv_shared_dir(), name);
    es_model_params p = es_model_default_params();
    p.vocab_only = true;
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, &p, &m));
    return m;
}

static void test_llama(es_model *m) {
    es_model_info info;
    CHECK_OK(es_model_get_info(m, &info));
    CHECK(info.tokenizer == ES_TOKENIZER_LLAMA && info.n_vocab == 32000 && info.bos_id == 1 && info.eos_id == 2);
    int32_t ids[16] = {0};
    size_t n = 0;
    CHECK_OK(es_tokenize(m, "Hello world", 11, true, false, ids, 16, &n));
    CHECK(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186);
    CHECK_OK(es_tokenize(m, "Hello world", 11, false, false, ids, 16, &n));
    CHECK(n == 2 && ids[0] == 15043);
    CHECK(es_tokenize(m, "Hello world", 11, true, false, NULL, 0, &n) == ES_ERR_BUFFER_TOO_SMALL && n == 3);
    CHECK_OK(es_tokenize(m, "<s>Hi</s>", 9, false, true, ids, 16, &n));
    CHECK(n >= 3 && ids[0] == 1 && ids[n - 1] == 2);
    char buf[64];
    size_t len = 0;
    CHECK_OK(es_token_to_piece(m, 15043, false, buf, sizeof buf, &len));
    CHECK(len == 6 && memcmp(buf, " Hello", 6) == 0);
    CHECK_OK(es_token_to_piece(m, 13, false, buf, sizeof buf, &len)); /* <0x0A> */
    CHECK(len == 1 && buf[0] == '\n');
    CHECK_OK(es_token_to_piece(m, 1, true, buf, sizeof buf, &len));
    CHECK(len == 3 && memcmp(buf, "<s>", 3) == 0);
    int32_t seq[3] = {1, 15043, 3186};
    CHECK_OK(es_detokenize(m, seq, 3, true, false, buf, sizeof buf, &len));
    CHECK(len == 11 && strcmp(buf, "Hello world") == 0);
    CHECK_OK(es_detokenize(m, seq, 3, false, true, buf, sizeof buf, &len));
    CHECK(len == 15 && strcmp(buf, "<s> Hello world") == 0);
    CHECK(es_token_is_eog(m, 2) && !es_token_is_eog(m, 1) && !es_token_is_eog(m, 15043));
}

static void test_gpt2(es_model *m) {
    es_model_info info;
    CHECK_OK(es_model_get_info(m, &info));
    CHECK(info.tokenizer == ES_TOKENIZER_GPT2 && info.n_vocab == 50257 && strcmp(info.tokenizer_pre, "gpt-2") == 0);
    int32_t ids[16];
    size_t n = 0, len = 0;
    CHECK_OK(es_tokenize(m, "Hello world", 11, true, false, ids, 16, &n));
    CHECK(n == 2 && ids[0] == 15496 && ids[1] == 995); /* no BOS for GPT-2 */
    char buf[64];
    CHECK_OK(es_detokenize(m, ids, n, true, false, buf, sizeof buf, &len));
    CHECK(len == 11 && strcmp(buf, "Hello world") == 0);
    CHECK(es_token_is_eog(m, 50256));
}

static void test_errors(es_model *m) {
    const char *before = es_model_errmsg(m);
    char saved[ES__ERRMSG_SIZE];
    snprintf(saved, sizeof saved, "%s", before ? before : "");
    int32_t ids[4];
    size_t n = 0, len = 0;
    char buf[8];
    CHECK_FAILS(es_tokenize(NULL, "a", 1, false, false, ids, 4, &n), ES_ERR_INVALID_ARGUMENT, "NULL model");
    CHECK_FAILS(es_tokenize(m, "Hello world", 11, true, false, ids, 2, &n), ES_ERR_BUFFER_TOO_SMALL, "needs 3 tokens");
    CHECK_FAILS(es_tokenize(m, NULL, 5, true, false, ids, 4, &n), ES_ERR_INVALID_ARGUMENT, "NULL text");
    CHECK_FAILS(es_token_to_piece(m, 32000, false, buf, sizeof buf, &len), ES_ERR_INVALID_ARGUMENT,
                "token id 32000 is outside the vocabulary [0, 32000)");
    CHECK_FAILS(es_token_to_piece(m, 15043, false, buf, 3, &len), ES_ERR_BUFFER_TOO_SMALL, "needs 6 bytes");
    CHECK(len == 6);
    int32_t bad[2] = {15043, -5};
    CHECK_FAILS(es_detokenize(m, bad, 2, true, false, buf, sizeof buf, &len), ES_ERR_INVALID_ARGUMENT, "-5");
    CHECK_FAILS(es_detokenize(NULL, bad, 1, true, false, buf, sizeof buf, &len), ES_ERR_INVALID_ARGUMENT, "NULL model");
    CHECK(!es_token_is_eog(NULL, 2));
    const char *after = es_model_errmsg(m);
    CHECK(strcmp(saved, after ? after : "") == 0);
}

/* A broken tokenizer makes es_model_load fail with the tokenizer's message. */
static void test_load_errors(void) {
    static const struct {
        const char *model, *pre, *needle;
        es_status status;
    } cases[] = {
        {"bert", NULL, "tokenizer.ggml.model 'bert' is not supported", ES_ERR_UNSUPPORTED},
        {"gpt2", "kimi-k2", "tokenizer.ggml.pre 'kimi-k2' is not supported", ES_ERR_UNSUPPORTED},
        {"llama", NULL, "tokenizer.ggml.tokens[1]: invalid UTF-8", ES_ERR_FORMAT},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(cases); i++) {
        es__gguf_writer *w = es__gguf_writer_create(NULL);
        CHECK_OK(es__gguf_set_str(w, "general.architecture", "llama"));
        CHECK_OK(es__gguf_set_str(w, "tokenizer.ggml.model", cases[i].model));
        if (cases[i].pre) CHECK_OK(es__gguf_set_str(w, "tokenizer.ggml.pre", cases[i].pre));
        const char *toks[3] = {"a", i == 2 ? "\xC3(" : "b", "ab"};
        CHECK_OK(es__gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3));
        const char *merges[1] = {"a b"};
        CHECK_OK(es__gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 1));
        uint8_t *data = NULL;
        uint64_t size = 0;
        es__err err;
        CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
        es_model_params p = es_model_default_params();
        p.vocab_only = true;
        es_model *m = (es_model *)&p;
        CHECK_FAILS(es__model_load_mem(data, size, "mem.gguf", &p, &m), cases[i].status, cases[i].needle);
        CHECK(m == NULL);
        es__free(NULL, data);
        es__gguf_writer_free(w);
    }
}

/* ---- One model, several threads: each encodes its texts while the others run and must get the
 * ids one thread got alone. */
#define N_TEXTS 200

typedef struct job {
    const es_model *m;
    char *text[N_TEXTS];
    size_t len[N_TEXTS];
    int32_t *want[N_TEXTS];
    size_t n_want[N_TEXTS];
    int ok;
} job;

static void *encode_all(void *p) {
    job *j = p;
    int32_t *ids = malloc(8192 * sizeof *ids);
    j->ok = 1;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N_TEXTS; i++) {
            size_t n = 0;
            j->ok &= es_tokenize(j->m, j->text[i], j->len[i], true, true, ids, 8192, &n) == ES_OK;
            j->ok &= n == j->n_want[i] && memcmp(ids, j->want[i], n * sizeof *ids) == 0;
        }
    }
    free(ids);
    return NULL;
}

static void test_threads(const es_model *m) {
    pthread_t th[4];
    job *jobs = calloc(4, sizeof *jobs);
    for (int t = 0; t < 4; t++) {
        uint64_t rng = 100 + (uint64_t)t;
        jobs[t].m = m;
        for (int i = 0; i < N_TEXTS; i++) {
            jobs[t].text[i] = malloc(16 * 200 + 1);
            jobs[t].len[i] = ref_random_text(&rng, jobs[t].text[i], 200);
            jobs[t].want[i] = malloc(8192 * sizeof(int32_t));
            CHECK_OK(es_tokenize(m, jobs[t].text[i], jobs[t].len[i], true, true, jobs[t].want[i], 8192,
                                 &jobs[t].n_want[i]));
        }
    }
    for (int t = 0; t < 4; t++) CHECK(pthread_create(&th[t], NULL, encode_all, &jobs[t]) == 0);
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK(jobs[t].ok);
        for (int i = 0; i < N_TEXTS; i++) {
            free(jobs[t].text[i]);
            free(jobs[t].want[i]);
        }
    }
    free(jobs);
}

int main(void) {
    es_model *spm = load("ggml-vocab-llama-spm.gguf");
    es_model *gpt2 = load("ggml-vocab-gpt-2.gguf");
    if (spm) {
        test_llama(spm);
        test_errors(spm);
        test_threads(spm);
    }
    if (gpt2) {
        test_gpt2(gpt2);
        test_threads(gpt2);
    }
    test_load_errors();
    es_model_free(spm);
    es_model_free(gpt2);
    TEST_MAIN_END();
}
