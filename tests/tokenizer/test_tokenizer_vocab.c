/* test_tokenizer_vocab.c: the real vocabularies in ../shared/vocab-tests (SentencePiece
 * llama-spm, byte-level gpt-2): every expected id of their .inp/.out vectors, decoding back to the
 * input, and thousands of random and tricky strings (valid UTF-8 or not) encoded both by the library
 * and by the plain reference encoders of ref_encoders.h, which must agree id for id and decode back.
 * Also special tokens on the real vocabularies and the loader's GGUF wiring. */
#include "gguf.h"
#include "ref_encoders.h"

#include "../test.h"

/* ---- Files. */

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 65536 > cap) {
            cap = (n + 65536) * 2;
            char *b = realloc(buf, cap + 1);
            if (!b) break;
            buf = b;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    if (buf) buf[n] = 0;
    *size = n;
    return buf;
}

/* A vocabulary file, parsed, with its vectors. */
typedef struct vfile {
    char *bytes;
    size_t size;
    es__gguf *g;
    es__vocab *v;
    char *inp, *out;
    size_t inp_len, out_len;
} vfile;

static int open_vocab(const char *name, vfile *f) {
    char path[4200];
    memset(f, 0, sizeof *f);
    snprintf(path, sizeof path, "%s/vocab-tests/%s", tv_shared_dir(), name);
    f->bytes = read_file(path, &f->size);
    CHECKF(f->bytes != NULL, "cannot read %s (set ES_SHARED_DIR)", path);
    if (!f->bytes) return 0;
    es__err err;
    CHECK_OK(es__gguf_parse((const uint8_t *)f->bytes, f->size, NULL, &err, &f->g));
    if (!f->g) return 0;
    CHECK_OK(es__vocab_load(f->g, NULL, &err, &f->v));
    snprintf(path, sizeof path, "%s/vocab-tests/%s.inp", tv_shared_dir(), name);
    f->inp = read_file(path, &f->inp_len);
    snprintf(path, sizeof path, "%s/vocab-tests/%s.out", tv_shared_dir(), name);
    f->out = read_file(path, &f->out_len);
    CHECK(f->inp && f->out);
    return f->v && f->inp && f->out;
}

static void close_vocab(vfile *f) {
    es__vocab_free(f->v);
    es__gguf_free(f->g);
    free(f->bytes);
    free(f->inp);
    free(f->out);
}

/* ---- The .inp/.out vectors. */

static int decode_matches(const es__vocab *v, const int32_t *ids, size_t n, bool spm, const char *want, size_t want_len) {
    size_t cap = want_len * 4 + 64, len = 0;
    char *buf = malloc(cap);
    es_status s = es__detokenize(v, ids, n, spm, false, buf, cap, &len, NULL);
    int ok = s == ES_OK && len == want_len && memcmp(buf, want, len) == 0;
    if (!ok) fprintf(stderr, "decoded \"%.*s\", want \"%.*s\"\n", (int)len, buf, (int)want_len, want);
    free(buf);
    return ok;
}

static void check_vectors(vfile *f, bool spm) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    char *p = f->inp, *o = f->out;
    int n_cases = 0, n_ids = 0;
    for (;;) {
        char *e = strstr(p, sep);
        char *eol = strchr(o, '\n');
        if (!e || !eol) break;
        size_t len = (size_t)(e - p);
        int32_t want[4096], got[4096];
        size_t n_want = 0, n_got = 0;
        for (char *q = o; q < eol && n_want < 4096;) {
            char *end;
            long id = strtol(q, &end, 10);
            if (end == q) break;
            want[n_want++] = (int32_t)id;
            q = end;
        }
        es_status s = es__tokenize(f->v, p, len, false, false, got, 4096, &n_got, NULL);
        int ok = s == ES_OK && n_got == n_want && memcmp(got, want, n_want * sizeof *got) == 0;
        CHECKF(ok, "vector %d \"%.*s\": %zu ids, want %zu", n_cases, (int)len, p, n_got, n_want);
        if (!ok) {
            for (size_t i = 0; i < n_got; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
        CHECK(decode_matches(f->v, got, n_got, spm, p, len));
        n_cases++;
        n_ids += (int)n_want;
        p = e + sep_len;
        o = eol + 1;
    }
    CHECKF(n_cases >= 40 && *p == 0 && *o == 0, "%d vectors read, rest of files: %zu / %zu bytes", n_cases,
           strlen(p), strlen(o));
    printf("%d vectors, %d ids\n", n_cases, n_ids);
}

/* ---- Random strings against the reference encoders. */

static void ref_from_gguf(ref_vocab *r, const es__gguf *g) {
    const es__gguf_kv *toks = es__gguf_find(g, "tokenizer.ggml.tokens");
    const es__gguf_kv *scores = es__gguf_find(g, "tokenizer.ggml.scores");
    const es__gguf_kv *merges = es__gguf_find(g, "tokenizer.ggml.merges");
    const es__gguf_kv *types = es__gguf_find(g, "tokenizer.ggml.token_type");
    const es__gguf_kv *unk = es__gguf_find(g, "tokenizer.ggml.unknown_token_id");
    int32_t unk_id = -1;
    if (unk) memcpy(&unk_id, unk->value, 4);
    ref_init(r, toks->strs, toks->arr_n, scores ? scores->value : NULL, types ? types->value : NULL,
             merges ? merges->strs : NULL,
             merges ? merges->arr_n : 0, unk_id);
}

/* Random strings, or with corrupt, strings with up to 3 bytes made invalid UTF-8 (those are encoded
 * as bytes and decode back exactly (GPT-2), or with U+2581 as space (SentencePiece)). */
static void check_random(vfile *f, bool spm, int count, uint64_t seed, bool corrupt) {
    ref_vocab r;
    ref_from_gguf(&r, f->g);
    uint64_t rng = seed;
    static char text[8192], want[8192];
    static int32_t ids[8192], ref[8192];
    int agree = 0, round = 0;
    for (int iter = 0; iter < count; iter++) {
        size_t len = ref_random_text(&rng, text, iter % 10 == 0 ? 400 : 40);
        for (int k = 0; corrupt && k < 3 && len > 0; k++)
            text[ref_rand(&rng) % len] = (char)(0x80 + ref_rand(&rng) % 128);
        size_t n = 0, n_ref = 0;
        es_status s = es__tokenize(f->v, text, len, false, false, ids, 8192, &n, NULL);
        if (spm)
            ref_spm(&r, text, len, true, ref, &n_ref, 8192);
        else
            ref_bpe(&r, ES__PRETOK_GPT2, false, text, len, ref, &n_ref, 8192);
        int same = s == ES_OK && n == n_ref && memcmp(ids, ref, n * sizeof *ids) == 0;
        if (!same && agree == iter) { /* report the first disagreement in full */
            fprintf(stderr, "reference disagrees on \"%s\":\n lib", text);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n ref");
            for (size_t i = 0; i < n_ref; i++) fprintf(stderr, " %d", ref[i]);
            fprintf(stderr, "\n");
        }
        agree += same;
        size_t want_len = spm ? ref_spm_roundtrip(text, len, want) : (memcpy(want, text, len), len);
        round += decode_matches(f->v, ids, n, spm, want, want_len);
    }
    CHECKF(agree == count, "%d of %d random strings%s agree with the reference", agree, count,
           corrupt ? " with invalid UTF-8" : "");
    CHECKF(round == count, "%d of %d random strings%s decode back", round, count, corrupt ? " with invalid UTF-8" : "");
    ref_free(&r);
}

/* ---- The gpt-2 vocabulary under the other splits. */

/* The file's vocabulary with tokenizer.ggml.pre replaced by pre. */
static es__vocab *with_pre(const es__gguf *g, const char *pre) {
    es__vocab_desc d;
    es__vocab_desc_init(&d);
    const es__gguf_kv *toks = es__gguf_find(g, "tokenizer.ggml.tokens");
    const es__gguf_kv *merges = es__gguf_find(g, "tokenizer.ggml.merges");
    d.model = (es__str){"gpt2", 4};
    d.pre = (es__str){pre, strlen(pre)};
    d.tokens = toks->strs, d.n_tokens = toks->arr_n;
    d.merges = merges->strs, d.n_merges = merges->arr_n;
    es__vocab *v = NULL;
    es__err err;
    CHECK_OK(es__vocab_build(&d, NULL, &err, &v));
    return v;
}

/* Encodes text and compares the tokens' texts, joined by '|', with want. */
static int pieces_are(const es__vocab *v, const char *text, const char *want) {
    int32_t ids[256];
    size_t n = 0;
    char got[1024];
    size_t w = 0;
    if (es__tokenize(v, text, strlen(text), false, false, ids, 256, &n, NULL) != ES_OK) return 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        if (w + 64 > sizeof got) return 0;
        if (i) got[w++] = '|';
        if (es__token_to_piece(v, ids[i], false, got + w, 60, &len, NULL) != ES_OK) return 0;
        w += len;
    }
    got[w] = 0;
    if (strcmp(got, want) != 0)
        fprintf(stderr, "%s: \"%s\" gives \"%s\", want \"%s\"\n", es__vocab_pre(v), text, got, want);
    return strcmp(got, want) == 0;
}

/* A real byte-level BPE vocabulary under every split: random strings encode exactly as the reference
 * BPE applied to the split's words (ref_encoders.h), and decode back; the splits show in the tokens. */
static void check_other_splits(vfile *f) {
    static const struct {
        const char *pre;
        es__pretok kind;
        bool ignore_merges;
        const char *text, *want;
    } cases[] = {
        {"llama-bpe", ES__PRETOK_LLAMA3, true, "Hello world 12345", "Hello| world| |123|45"},
        {"qwen2", ES__PRETOK_QWEN2, false, "Hello world 12345", "Hello| world| |1|2|3|4|5"},
        {"deepseek-llm", ES__PRETOK_DEEPSEEK_LLM, false, "Hello world 12345", "Hello| world| |123|45"},
        {"deepseek-coder", ES__PRETOK_DEEPSEEK_CODER, false, "Hello world 12345", "Hello| world| |1|2|3|4|5"},
        {"deepseek-v3", ES__PRETOK_DEEPSEEK3, false, "Hello world 12345", "Hello| world| |123|45"},
        {"falcon", ES__PRETOK_FALCON, false, "Hello world 12345", "Hello| world| |123|45"},
        {"starcoder", ES__PRETOK_STARCODER, false, "Hello world 12345", "Hello| world| |1|2|3|4|5"},
        {"poro-chat", ES__PRETOK_PORO, false, "Hello, world 12345", "Hello|,| world| 123|45"},
        {"viking", ES__PRETOK_VIKING, false, "Hello, world 12345", "Hello|,| world| |1|2|3|4|5"},
        {"tekken", ES__PRETOK_TEKKEN, true, "HelloWorld 12345", "Hello|World| |1|2|3|4|5"},
        {"gpt-4o", ES__PRETOK_GPT4O, false, "HelloWorld's 12345", "Hello|World|'s| |123|45"},
    };
    ref_vocab r;
    ref_from_gguf(&r, f->g);
    static char text[8192];
    static int32_t ids[8192], ref[8192];
    for (size_t c = 0; c < ES__ARRAY_LEN(cases); c++) {
        es__vocab *v = with_pre(f->g, cases[c].pre);
        if (!v) continue;
        CHECK(pieces_are(v, cases[c].text, cases[c].want));
        uint64_t rng = 100 + c;
        int agree = 0, round = 0, count = 300;
        for (int iter = 0; iter < count; iter++) {
            size_t len = ref_random_text(&rng, text, iter % 10 == 0 ? 400 : 40);
            size_t n = 0, n_ref = 0;
            es_status s = es__tokenize(v, text, len, false, false, ids, 8192, &n, NULL);
            ref_bpe(&r, cases[c].kind, cases[c].ignore_merges, text, len, ref, &n_ref, 8192);
            agree += s == ES_OK && n == n_ref && memcmp(ids, ref, n * sizeof *ids) == 0;
            round += decode_matches(v, ids, n, false, text, len);
        }
        CHECKF(agree == count && round == count, "%s: %d of %d random strings agree with the reference, %d decode back",
               cases[c].pre, agree, count, round);
        es__vocab_free(v);
    }
    ref_free(&r);
}

static void check_specials(vfile *spm, vfile *gpt2) {
    int32_t ids[64];
    size_t n = 0;
    /* Llama: <s> and </s> are control tokens; the text after one gets the space prefix */
    CHECK_OK(es__tokenize(spm->v, "<s>Hello</s>", 12, true, true, ids, 64, &n, NULL));
    CHECK(n == 4 && ids[0] == 1 && ids[1] == 1 && ids[2] == 15043 && ids[3] == 2);
    CHECK_OK(es__tokenize(spm->v, "Hello", 5, true, false, ids, 64, &n, NULL));
    CHECK(n == 2 && ids[0] == 1 && ids[1] == 15043);
    CHECK_OK(es__tokenize(spm->v, "<s>", 3, false, false, ids, 64, &n, NULL));
    CHECK(n > 1 && ids[0] != 1);
    CHECK(es__token_is_eog(spm->v, 2) && !es__token_is_eog(spm->v, 1));
    /* GPT-2: <|endoftext|> */
    CHECK_OK(es__tokenize(gpt2->v, "Hi<|endoftext|>", 15, true, true, ids, 64, &n, NULL));
    CHECK(n == 2 && ids[0] == 17250 && ids[1] == 50256);
    CHECK_OK(es__tokenize(gpt2->v, "Hi<|endoftext|>", 15, true, false, ids, 64, &n, NULL));
    CHECK(n > 2 && ids[n - 1] != 50256);
    char buf[64];
    size_t len;
    CHECK_OK(es__detokenize(gpt2->v, ids, n, false, false, buf, sizeof buf, &len, NULL));
    CHECK(len == 15 && memcmp(buf, "Hi<|endoftext|>", 15) == 0);
    CHECK(es__token_is_eog(gpt2->v, 50256));
}

/* ---- Loader wiring: GGUF type errors name the key. */
static void check_loader_errors(void) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    CHECK_OK(es__gguf_set_str(w, "tokenizer.ggml.model", "llama"));
    int32_t not_strings[3] = {1, 2, 3};
    CHECK_OK(es__gguf_set_arr(w, "tokenizer.ggml.tokens", ES__GGUF_INT32, not_strings, 3));
    uint8_t *data = NULL;
    uint64_t size = 0;
    es__err err;
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    es__gguf *g = NULL;
    es__vocab *v = NULL;
    CHECK_OK(es__gguf_parse(data, size, NULL, &err, &g));
    if (g) {
        CHECK_FAILS(es__vocab_load(g, NULL, &err, &v), ES_ERR_FORMAT, "tokenizer.ggml.tokens");
        CHECK(v == NULL);
        es__gguf_free(g);
    }
    es__free(NULL, data);
    const char *toks[3] = {"<unk>", "a", "b"};
    CHECK_OK(es__gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3));
    CHECK_OK(es__gguf_set_i32(w, "tokenizer.ggml.bos_token_id", 3));
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    CHECK_OK(es__gguf_parse(data, size, NULL, &err, &g));
    if (g) {
        CHECK_FAILS(es__vocab_load(g, NULL, &err, &v), ES_ERR_MODEL, "tokenizer.ggml.bos_token_id = 3");
        es__gguf_free(g);
    }
    es__free(NULL, data);
    CHECK_OK(es__gguf_set_i32(w, "tokenizer.ggml.bos_token_id", 0));
    CHECK_OK(es__gguf_set_str(w, "tokenizer.ggml.add_bos_token", "yes"));
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    CHECK_OK(es__gguf_parse(data, size, NULL, &err, &g));
    if (g) {
        CHECK_FAILS(es__vocab_load(g, NULL, &err, &v), ES_ERR_FORMAT, "tokenizer.ggml.add_bos_token");
        es__gguf_free(g);
    }
    es__free(NULL, data);
    CHECK_OK(es__gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false));
    CHECK_OK(es__gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", false));
    float scores[3] = {0, -1, -2};
    CHECK_OK(es__gguf_set_arr(w, "tokenizer.ggml.scores", ES__GGUF_FLOAT32, scores, 3));
    CHECK_OK(es__gguf_write_mem(w, &data, &size, &err));
    CHECK_OK(es__gguf_parse(data, size, NULL, &err, &g));
    if (g) {
        CHECK_OK(es__vocab_load(g, NULL, &err, &v));
        int32_t ids[4];
        size_t n = 0;
        if (v) {
            CHECK_OK(es__tokenize(v, "ab", 2, true, false, ids, 4, &n, NULL));
            CHECK(n == 2 && ids[0] == 1 && ids[1] == 2);
        }
        es__vocab_free(v);
        es__gguf_free(g);
    }
    es__free(NULL, data);
    es__gguf_writer_free(w);
}

int main(void) {
    vfile spm, gpt2;
    int ok_spm = open_vocab("ggml-vocab-llama-spm.gguf", &spm);
    int ok_gpt2 = open_vocab("ggml-vocab-gpt-2.gguf", &gpt2);
    if (ok_spm) {
        CHECK(es__vocab_type(spm.v) == ES_TOKENIZER_LLAMA && es__vocab_n_tokens(spm.v) == 32000);
        check_vectors(&spm, true);
        check_random(&spm, true, 1500, 1, false);
        check_random(&spm, true, 500, 2, true);
    }
    if (ok_gpt2) {
        CHECK(es__vocab_type(gpt2.v) == ES_TOKENIZER_GPT2 && es__vocab_n_tokens(gpt2.v) == 50257);
        CHECK(strcmp(es__vocab_pre(gpt2.v), "gpt-2") == 0);
        check_vectors(&gpt2, false);
        check_random(&gpt2, false, 1500, 3, false);
        check_random(&gpt2, false, 500, 4, true);
        check_other_splits(&gpt2);
    }
    if (ok_spm && ok_gpt2) check_specials(&spm, &gpt2);
    check_loader_errors();
    close_vocab(&spm);
    close_vocab(&gpt2);
    TEST_MAIN_END();
}
