/* test_tokenizer_engine.c: both encoders on small vocabularies built in memory, with expected ids
 * worked out by hand from the algorithms' definitions: SentencePiece merge order (score, then
 * leftmost), byte fallback, space prefix; BPE merge order (rank, then leftmost), merges whose
 * result is no token, Llama 3's ignore_merges; special tokens; decoding; buffer contracts; every
 * validation error; allocation failures; concurrent encoding. */
#include "tvocab.h"

#include "../common/test_alloc.h"
#include "../test.h"

#include <pthread.h>

#define SP "\xE2\x96\x81" /* U+2581 */

/* ---- SentencePiece: ids 0..2 <unk> <s> </s>, 3..258 the byte tokens, then these. */
enum { T_SP = 259, T_A, T_B, T_C, T_AB, T_BC, T_ABC, T_SPA, T_SPAB, T_SPSP, T_X, T_Y, T_XY, T_YX, T_USER, T_EOT };

static void spm_vocab(tvocab *t) {
    tv_init(t, "llama", "default");
    tv_add(t, "<unk>", 0, ES__TOK_UNKNOWN);
    tv_add(t, "<s>", 0, ES__TOK_CONTROL);
    tv_add(t, "</s>", 0, ES__TOK_CONTROL);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tv_add(t, name, 0, ES__TOK_BYTE);
    }
    tv_add(t, SP, -10, ES__TOK_NORMAL);
    tv_add(t, "a", -11, ES__TOK_NORMAL);
    tv_add(t, "b", -12, ES__TOK_NORMAL);
    tv_add(t, "c", -13, ES__TOK_NORMAL);
    tv_add(t, "ab", -3, ES__TOK_NORMAL);
    tv_add(t, "bc", -2, ES__TOK_NORMAL);
    tv_add(t, "abc", -1, ES__TOK_NORMAL);
    tv_add(t, SP "a", -4, ES__TOK_NORMAL);
    tv_add(t, SP "ab", -5, ES__TOK_NORMAL);
    tv_add(t, SP SP, -6, ES__TOK_NORMAL);
    tv_add(t, "x", -20, ES__TOK_NORMAL);
    tv_add(t, "y", -20, ES__TOK_NORMAL);
    tv_add(t, "xy", -7, ES__TOK_NORMAL);
    tv_add(t, "yx", -7, ES__TOK_NORMAL);
    tv_add(t, "<user>", 0, ES__TOK_USER_DEFINED);
    tv_add(t, "<|eot_id|>", 0, ES__TOK_CONTROL);
    t->d.special[ES__SPECIAL_BOS] = 1;
    t->d.special[ES__SPECIAL_EOS] = 2;
    t->d.special[ES__SPECIAL_UNK] = 0;
}

#define BYTE(b) (3 + (b))

static void test_spm(void) {
    tvocab t;
    spm_vocab(&t);
    es__vocab *v = NULL;
    CHECK_OK(tv_build(&t, &v));
    if (!v) return;
    CHECK(es__vocab_type(v) == ES_TOKENIZER_LLAMA && es__vocab_n_tokens(v) == T_EOT + 1);
    CHECK(strcmp(es__vocab_pre(v), "default") == 0 && es__vocab_bos(v) == 1 && es__vocab_eos(v) == 2);
    /* (b,c) -2 beats (a,b) -3 and (_,a) -4; then (a,bc) -1 gives abc; "_abc" is no token */
    EXPECT_IDS(v, "abc", false, false, T_SP, T_ABC);
    /* (a,b) -3 before (_,a) -4, then (_,ab) -5 */
    EXPECT_IDS(v, "ab", false, false, T_SPAB);
    /* equal scores: the leftmost pair first */
    EXPECT_IDS(v, "xyx", false, false, T_SP, T_XY, T_X);
    EXPECT_IDS(v, "yxy", false, false, T_SP, T_YX, T_Y);
    /* spaces are U+2581, runs pair up from the left */
    EXPECT_IDS(v, "a b", false, false, T_SPA, T_SP, T_B);
    EXPECT_IDS(v, "  ", false, false, T_SPSP, T_SP);
    EXPECT_IDS(v, " ", false, false, T_SPSP);
    /* byte fallback for characters that are no token, and for invalid UTF-8 */
    EXPECT_IDS(v, "\xC3\xA9", false, false, T_SP, BYTE(0xC3), BYTE(0xA9));
    EXPECT_IDS(v, "a\xFF" "b\xE2\x96", false, false, T_SPA, BYTE(0xFF), T_B, BYTE(0xE2), BYTE(0x96));
    CHECK(tv_expect(v, "a\0b", 3, false, false, (int32_t[]){T_SPA, BYTE(0), T_B}, 3)); /* NUL is text */
    /* a literal U+2581 is the same text as an escaped space */
    EXPECT_IDS(v, SP "ab", false, false, T_SP, T_SPAB);
    /* BOS/EOS and special tokens */
    EXPECT_IDS(v, "ab", true, false, 1, T_SPAB);
    EXPECT_IDS(v, "<s>ab", false, true, 1, T_SPAB);
    EXPECT_IDS(v, "<s>ab", false, false, T_SP, BYTE('<'), BYTE('s'), BYTE('>'), T_AB);
    EXPECT_IDS(v, "ab<|eot_id|></s>", false, true, T_SPAB, T_EOT, 2);
    EXPECT_IDS(v, "<user>a", false, false, T_USER, T_SPA); /* user-defined: always, then a prefix */
    EXPECT_IDS(v, "x<user><user>", false, false, T_SP, T_X, T_USER, T_USER);
    size_t n = 99;
    int32_t ids[8];
    CHECK_OK(es__tokenize(v, "", 0, false, false, ids, 8, &n, NULL));
    CHECK(n == 0);
    CHECK_OK(es__tokenize(v, NULL, 0, true, false, ids, 8, &n, NULL));
    CHECK(n == 1 && ids[0] == 1);
    es__vocab_free(v);

    /* add_eos, no space prefix */
    t.d.add_eos = 1;
    t.d.add_space_prefix = 0;
    CHECK_OK(tv_build(&t, &v));
    if (v) {
        EXPECT_IDS(v, "ab", true, false, 1, T_AB, 2);
        EXPECT_IDS(v, "abc", false, false, T_ABC);
        es__vocab_free(v);
    }
    /* no byte tokens: one unknown token per character that is no token */
    tvocab u;
    tv_init(&u, "llama", NULL);
    tv_add(&u, "<unk>", 0, ES__TOK_UNKNOWN);
    tv_add(&u, SP, -1, ES__TOK_NORMAL);
    tv_add(&u, "a", -1, ES__TOK_NORMAL);
    u.d.special[ES__SPECIAL_UNK] = 0;
    CHECK_OK(tv_build(&u, &v));
    if (v) {
        EXPECT_IDS(v, "a\xC3\xA9\xFF" "a", false, false, 1, 2, 0, 0, 2);
        es__vocab_free(v);
    }
    u.d.special[ES__SPECIAL_UNK] = -1;
    CHECK_OK(tv_build(&u, &v));
    if (v) {
        CHECK_FAILS(es__tokenize(v, "\xC3\xA9", 2, false, false, ids, 8, &n, NULL), ES_ERR_INVALID_ARGUMENT,
                    "no unknown token");
        es__vocab_free(v);
    }
    tv_free(&u);
    tv_free(&t);
}

static int decodes_to(const es__vocab *v, const int32_t *ids, size_t n, bool remove_space, bool render, const char *want,
                      size_t want_len) {
    char buf[256];
    memset(buf, 0x55, sizeof buf);
    size_t len = 0;
    es_status s = es__detokenize(v, ids, n, remove_space, render, buf, sizeof buf, &len, NULL);
    int ok = s == ES_OK && len == want_len && memcmp(buf, want, len) == 0 && buf[len] == 0;
    if (!ok) fprintf(stderr, "decoded \"%.*s\" (%zu), want \"%s\"\n", (int)len, buf, len, want);
    return ok;
}

#define DECODES(v, remove, render, want, ...)                                                                     \
    do {                                                                                                         \
        const int32_t ids_[] = {__VA_ARGS__};                                                                    \
        CHECK(decodes_to((v), ids_, sizeof ids_ / sizeof ids_[0], (remove), (render), (want), sizeof(want) - 1)); \
    } while (0)

static void test_spm_decode(void) {
    tvocab t;
    spm_vocab(&t);
    es__vocab *v = NULL;
    CHECK_OK(tv_build(&t, &v));
    if (!v) return;
    DECODES(v, true, false, "ab", T_SPAB);
    DECODES(v, false, false, " ab", T_SPAB);
    DECODES(v, true, false, "ab", 1, T_SPAB);
    DECODES(v, true, true, "<s> ab", 1, T_SPAB);
    DECODES(v, true, false, " ab", T_SPSP, T_A, T_B);
    DECODES(v, true, false, "\xC3\xA9\xFF", BYTE(0xC3), BYTE(0xA9), BYTE(0xFF));
    DECODES(v, true, false, "\xEF\xBF\xBD", 0);
    DECODES(v, true, true, "<unk>", 0);
    DECODES(v, true, false, "<user>", T_USER);
    DECODES(v, true, false, "", 1, 2);
    char buf[16];
    size_t len = 0;
    CHECK_OK(es__token_to_piece(v, T_SPA, false, buf, sizeof buf, &len, NULL));
    CHECK(len == 2 && memcmp(buf, " a", 2) == 0);
    CHECK_OK(es__token_to_piece(v, BYTE(0x0A), false, buf, sizeof buf, &len, NULL));
    CHECK(len == 1 && buf[0] == '\n');
    CHECK_OK(es__token_to_piece(v, 2, false, buf, sizeof buf, &len, NULL));
    CHECK(len == 0);
    CHECK_OK(es__token_to_piece(v, 2, true, buf, sizeof buf, &len, NULL));
    CHECK(len == 4 && memcmp(buf, "</s>", 4) == 0);
    /* contracts: invalid ids, short buffers leave the buffer untouched and report the size */
    CHECK_FAILS(es__token_to_piece(v, T_EOT + 1, false, buf, sizeof buf, &len, NULL), ES_ERR_INVALID_ARGUMENT,
                "token id 275 is outside the vocabulary [0, 275)");
    CHECK_FAILS(es__token_to_piece(v, -1, false, buf, sizeof buf, &len, NULL), ES_ERR_INVALID_ARGUMENT, "-1");
    memset(buf, 0x55, sizeof buf);
    CHECK_FAILS(es__token_to_piece(v, T_SPAB, false, buf, 2, &len, NULL), ES_ERR_BUFFER_TOO_SMALL, "needs 3 bytes");
    CHECK(len == 3 && (uint8_t)buf[0] == 0x55);
    int32_t ids[2] = {T_A, T_SPAB};
    CHECK_FAILS(es__detokenize(v, ids, 2, false, false, buf, 3, &len, NULL), ES_ERR_BUFFER_TOO_SMALL, "needs 4 bytes");
    CHECK(len == 4 && (uint8_t)buf[0] == 0x55);
    CHECK_OK(es__detokenize(v, ids, 2, false, false, buf, 4, &len, NULL)); /* fits exactly: no NUL */
    CHECK(len == 4 && memcmp(buf, "a ab", 4) == 0 && (uint8_t)buf[4] == 0x55);
    CHECK_OK(es__detokenize(v, ids, 0, false, false, NULL, 0, &len, NULL));
    CHECK(len == 0);
    int32_t bad[2] = {T_A, 100000};
    CHECK_FAILS(es__detokenize(v, bad, 2, false, false, buf, sizeof buf, &len, NULL), ES_ERR_INVALID_ARGUMENT, "100000");
    /* tokenize: too small a buffer reports the count and leaves the buffer as it was */
    int32_t out[4] = {-7, -7, -7, -7};
    size_t n = 0;
    CHECK_FAILS(es__tokenize(v, "abc", 3, true, false, out, 2, &n, NULL), ES_ERR_BUFFER_TOO_SMALL, "needs 3 tokens");
    CHECK(n == 3 && out[0] == -7 && out[1] == -7);
    CHECK(es__tokenize(v, "abc", 3, true, false, NULL, 0, &n, NULL) == ES_ERR_BUFFER_TOO_SMALL && n == 3);
    CHECK_FAILS(es__tokenize(v, NULL, 3, true, false, out, 4, &n, NULL), ES_ERR_INVALID_ARGUMENT, "NULL text");
    CHECK_FAILS(es__tokenize(v, "a", 1, true, false, NULL, 4, &n, NULL), ES_ERR_INVALID_ARGUMENT, "NULL tokens");
    /* end of generation */
    CHECK(es__token_is_eog(v, 2) && es__token_is_eog(v, T_EOT) && !es__token_is_eog(v, 1) && !es__token_is_eog(v, T_A));
    CHECK(!es__token_is_eog(v, -1) && !es__token_is_eog(NULL, 2));
    size_t tl = 0;
    const char *tt = es__vocab_token_text(v, T_SPA, &tl);
    CHECK(tt && tl == 4 && memcmp(tt, SP "a", 4) == 0 && !es__vocab_token_text(v, 9999, &tl));
    es__vocab_free(v);
    tv_free(&t);
}

/* ---- Byte-level BPE: ids 0..255 the mapped bytes in byte order, then these. */
enum { B_AB = 256, B_ABC, B_GA, B_GAB, B_BC, B_HELLO, B_END, B_USER };

static void bpe_vocab(tvocab *t, const char *pre) {
    uint32_t map[256];
    tv_byte_map(map);
    tv_init(t, "gpt2", pre);
    for (int b = 0; b < 256; b++) {
        char s[5];
        tv_utf8(map[b], s);
        tv_add(t, s, 0, ES__TOK_NORMAL);
    }
    tv_add(t, "ab", 0, ES__TOK_NORMAL);
    tv_add(t, "abc", 0, ES__TOK_NORMAL);
    tv_add(t, "\xC4\xA0" "a", 0, ES__TOK_NORMAL); /* "Ġa" */
    tv_add(t, "\xC4\xA0" "ab", 0, ES__TOK_NORMAL);
    tv_add(t, "bc", 0, ES__TOK_NORMAL);
    tv_add(t, "hello", 0, ES__TOK_NORMAL);
    tv_add(t, "<|end|>", 0, ES__TOK_CONTROL);
    tv_add(t, "<u>", 0, ES__TOK_USER_DEFINED);
    tv_merge(t, "a b");
    tv_merge(t, "b c");
    tv_merge(t, "ab c");
    tv_merge(t, "\xC4\xA0 a");
    tv_merge(t, "\xC4\xA0" "a b");
    tv_merge(t, "x y"); /* "xy" is no token */
    tv_merge(t, "a b"); /* a repeated pair keeps its first rank */
    t->d.special[ES__SPECIAL_EOS] = B_END;
}

static void test_bpe(void) {
    tvocab t;
    bpe_vocab(&t, "gpt-2");
    es__vocab *v = NULL;
    CHECK_OK(tv_build(&t, &v));
    if (!v) return;
    CHECK(es__vocab_type(v) == ES_TOKENIZER_GPT2 && es__vocab_bos(v) == -1);
    EXPECT_IDS(v, "abc", false, false, B_ABC);                 /* (a,b) 0, (b,c) 1 -> ab c -> abc */
    EXPECT_IDS(v, " ab", false, false, ' ', B_AB);             /* (a,b) 0 before (Ġ,a) 3 */
    EXPECT_IDS(v, " a", false, false, B_GA);
    EXPECT_IDS(v, "bcab", false, false, B_BC, B_AB);           /* (a,b) 0 first, then (b,c) 1 */
    EXPECT_IDS(v, "xy", false, false, 'x', 'y');               /* merged, but no token: its bytes */
    EXPECT_IDS(v, "hello", false, false, 'h', 'e', 'l', 'l', 'o'); /* no merges reach it */
    EXPECT_IDS(v, "a  ab", false, false, 'a', ' ', ' ', B_AB);
    CHECK(tv_expect(v, "\xFF\x00", 2, false, false, (int32_t[]){0xFF, 0}, 2)); /* ids equal byte values here */
    EXPECT_IDS(v, "<|end|>", false, true, B_END);
    EXPECT_IDS(v, "<|end|>", false, false, '<', '|', 'e', 'n', 'd', '|', '>');
    EXPECT_IDS(v, "a<u>b", false, false, 'a', B_USER, 'b');
    EXPECT_IDS(v, "ab", true, false, B_AB); /* no BOS by default for GPT-2 */
    DECODES(v, false, false, " ab\xFF", B_GAB, 0xFF);
    DECODES(v, true, false, " ab", B_GAB); /* no space prefix: nothing to remove */
    DECODES(v, false, false, "ab<u>", B_AB, B_USER);
    DECODES(v, false, false, "ab", B_AB, B_END);
    DECODES(v, false, true, "ab<|end|>", B_AB, B_END);
    CHECK(es__token_is_eog(v, B_END));
    es__vocab_free(v);

    /* Llama 3 split, and ignore_merges: a word that is a token is taken whole */
    tv_free(&t);
    bpe_vocab(&t, "llama-bpe");
    CHECK_OK(tv_build(&t, &v));
    if (v) {
        EXPECT_IDS(v, "hello", false, false, B_HELLO);
        EXPECT_IDS(v, "abc", false, false, B_ABC);
        EXPECT_IDS(v, "1234", false, false, '1', '2', '3', '4');
        es__vocab_free(v);
    }
    /* add_space_prefix for byte-level BPE: only where the text does not start with a space */
    tv_free(&t);
    bpe_vocab(&t, "gpt-2");
    t.d.add_space_prefix = 1;
    CHECK_OK(tv_build(&t, &v));
    if (v) {
        EXPECT_IDS(v, "a", false, false, B_GA);
        EXPECT_IDS(v, " a", false, false, B_GA);
        EXPECT_IDS(v, "ab", false, false, ' ', B_AB); /* (a,b) ranks before (Ġ,a) */
        EXPECT_IDS(v, "a<u>a", false, false, B_GA, B_USER, B_GA);
        DECODES(v, true, false, "ab", B_GAB);
        es__vocab_free(v);
    }
    tv_free(&t);
}

/* ---- Validation: each error names the key and the index. */
static es_status build_broken(void (*breaker)(tvocab *), int spm) {
    static tvocab t;
    if (spm)
        spm_vocab(&t);
    else
        bpe_vocab(&t, "gpt-2");
    breaker(&t);
    es__vocab *v = (es__vocab *)&t; /* must come back NULL */
    es_status s = tv_build(&t, &v);
    if (s != ES_OK && v != NULL) {
        fprintf(stderr, "failed build left *out set\n");
        s = ES_OK;
    }
    es__vocab_free(s == ES_OK ? v : NULL);
    tv_free(&t);
    return s;
}

static void br_no_tokens(tvocab *t) { t->omit_tokens = 1; }
static void br_empty_tokens(tvocab *t) { t->empty_tokens = 1; }
static void br_scores_len(tvocab *t) { t->d.scores = t->scores, t->d.n_scores = (uint64_t)t->n - 1; }
static void br_types_len(tvocab *t) { t->d.types = t->types, t->d.n_types = (uint64_t)t->n + 1; }
static void br_nan(tvocab *t) { t->scores[261] = NAN; }
static void br_type(tvocab *t) { t->types[7] = 9; }
static void br_utf8(tvocab *t) { t->toks[262][0] = (char)0xC3; }
static void br_byte(tvocab *t) { t->toks[5][3] = 'g'; }
static void br_bos(tvocab *t) { t->d.special[ES__SPECIAL_BOS] = 275; }
static void br_eot(tvocab *t) { t->d.special[ES__SPECIAL_EOT] = -2; }
static void br_add_bos(tvocab *t) { t->d.special[ES__SPECIAL_BOS] = -1, t->d.add_bos = 1; }
static void br_model(tvocab *t) { t->d.model = (es__str){"bert", 4}; }
static void br_pre(tvocab *t) { t->d.pre = (es__str){"kimi-k2", 7}; } /* a split edgespec lacks */
static void br_merge(tvocab *t) { t->merges[3] = "abc"; }
static void br_merge_space(tvocab *t) { t->merges[2] = "ab "; }
static void br_merge_utf8(tvocab *t) { t->merges[1] = "\xFF b"; }
static void br_no_merges(tvocab *t) { t->n_merges = 0; }

/* ---- The same merges under different splits: the words change, so the tokens do. Ids 0..255 are the
 * bytes (their GPT-2 characters), then these; expected ids worked out by hand from the splits'
 * expressions and the merge ranks. */
enum { S_12 = 256, S_123, S_G1, S_G12, S_BANGS, S_GBANG, S_IT, S_QS, S_ITS, S_RQS, S_UIT, S_UQS, S_UITS };

static void split_vocab(tvocab *t, const char *pre) {
    uint32_t map[256];
    tv_byte_map(map);
    tv_init(t, "gpt2", pre);
    for (int b = 0; b < 256; b++) {
        char s[5];
        tv_utf8(map[b], s);
        tv_add(t, s, 0, ES__TOK_NORMAL);
    }
    /* the last five merge across the ends of words of the other splits: only gpt-4o's words hold them */
    static const char *const toks[] = {"12", "123", ("\xC4\xA0" "1"), ("\xC4\xA0" "12"), "!!", "\xC4\xA0!", "it", "'s",
                                       "it's", "r's", "IT", "'S", "IT'S"};
    static const char *const merges[] = {"1 2", "12 3", "\xC4\xA0 1", ("\xC4\xA0" "1 2"), "! !", "\xC4\xA0 !", "i t",
                                         "' s", "it 's", "r 's", "I T", "' S", "IT 'S"};
    for (size_t i = 0; i < ES__ARRAY_LEN(toks); i++) tv_add(t, toks[i], 0, ES__TOK_NORMAL);
    for (size_t i = 0; i < ES__ARRAY_LEN(merges); i++) tv_merge(t, merges[i]);
}

static void test_bpe_splits(void) {
    static const struct {
        const char *pre, *text;
        int32_t ids[12];
        size_t n;
    } cases[] = {
        /* " 123": GPT-2 keeps one word, (1,2) then (12,3) rank first and leave the space alone */
        {"gpt-2", " 123", {' ', S_123}, 2},
        {"llama-bpe", " 123", {' ', S_123}, 2},      /* " " and "123", a token taken whole */
        {"qwen2", " 123", {' ', '1', '2', '3'}, 4},   /* single digits */
        {"starcoder", " 123", {' ', '1', '2', '3'}, 4},
        {"deepseek-coder", " 123", {' ', '1', '2', '3'}, 4},
        {"falcon", " 12", {' ', S_12}, 2},            /* GPT-2's " 12"; no three digits to cut */
        {"falcon", " 1234", {' ', S_123, '4'}, 3},    /* " ", "123", "4" */
        {"deepseek-llm", " 12", {' ', S_12}, 2},      /* \p{N}+ cuts the digits from the space */
        {"deepseek-v3", "1234", {S_123, '4'}, 2},
        {"poro-chat", " 12", {' ', S_12}, 2},         /* one word " 12" */
        {"viking", " 12", {' ', '1', '2'}, 3},
        /* contractions: GPT-2 and Qwen2 keep "'s"; falcon's and deepseek-coder's punctuation stage
         * cuts the apostrophe off first */
        {"gpt-2", "it's", {S_IT, S_QS}, 2},
        {"qwen2", "it's", {S_IT, S_QS}, 2},
        {"falcon", "it's", {S_IT, '\'', 's'}, 3},
        {"deepseek-coder", "it's", {S_IT, '\'', 's'}, 3},
        {"tekken", "it's", {S_IT, S_QS}, 2}, /* no contraction rule, but "'" is the optional prefix of the word "s" */
        /* gpt-4o: the contraction stays in the word before it, whatever the case */
        {"gpt-4o", "it's", {S_ITS}, 1},
        {"gpt-4o", "IT'S", {S_UITS}, 1},                 /* (I,T), then (',S), then (IT,'S) */
        {"tekken", "IT'S", {S_UIT, S_UQS}, 2},          /* "IT" and "'S" */
        {"qwen2", "IT'S", {S_UIT, S_UQS}, 2},           /* "IT" and the contraction "'S" */
        {"gpt-2", "IT'S", {S_UIT, '\'', 'S'}, 3},       /* GPT-2's contractions are lower case only */
        {"gpt-4o", "HTTPServer's", {'H', 'T', 'T', 'P', 'S', 'e', 'r', 'v', 'e', S_RQS}, 10},
        {"tekken", "HTTPServer's", {'H', 'T', 'T', 'P', 'S', 'e', 'r', 'v', 'e', 'r', S_QS}, 11},
        {"gpt-4o", "1234", {S_123, '4'}, 2},             /* digits in threes, where tekken has single ones */
        {"tekken", "1234", {'1', '2', '3', '4'}, 4},
        {"gpt-4o", " 123", {' ', S_123}, 2},
        /* " !!": (!,!) ranks before (Ġ,!) */
        {"gpt-2", " !!", {' ', S_BANGS}, 2},
        {"deepseek-llm", " !!", {' ', S_BANGS}, 2},
        {"falcon", " !!", {' ', S_BANGS}, 2},         /* "!!" is a punctuation run; " " its own word */
    };
    for (size_t c = 0; c < ES__ARRAY_LEN(cases); c++) {
        tvocab t;
        split_vocab(&t, cases[c].pre);
        es__vocab *v = NULL;
        CHECK_OK(tv_build(&t, &v));
        if (v) CHECKF(tv_expect(v, cases[c].text, strlen(cases[c].text), false, false, cases[c].ids, cases[c].n),
                      "%s: \"%s\"", cases[c].pre, cases[c].text);
        es__vocab_free(v);
        tv_free(&t);
    }
}

/* ---- Names: each gives its split and llama.cpp's defaults for that name (lib/core/tokenizer_pretok.c). */
static void test_pretok_names(void) {
    static const struct {
        const char *name;
        es__pretok kind;
        bool ignore_merges, add_bos;
    } cases[] = {
        {"gpt-4o", ES__PRETOK_GPT4O, false, false},      {"llama4", ES__PRETOK_GPT4O, false, false},
        {"kanana2", ES__PRETOK_GPT4O, false, false},     {"talkie", ES__PRETOK_GPT4O, false, false},
        {"minimax-m2", ES__PRETOK_GPT4O, false, false},  {"tekken", ES__PRETOK_TEKKEN, true, true},
        {"jina-v2-de", ES__PRETOK_GPT2, false, false},   {"a.x-4.0", ES__PRETOK_GPT2, false, false},
        {"modern-bert", ES__PRETOK_GPT2, false, false},  {"roberta-bpe", ES__PRETOK_GPT2, false, false},
        {"midm-2.0", ES__PRETOK_LLAMA3, true, true},     {"jina-v5-nano", ES__PRETOK_LLAMA3, true, true},
        {"f2llmv2", ES__PRETOK_QWEN2, false, false},     {"solar-open", ES__PRETOK_QWEN2, false, false},
        {"joyai-llm", ES__PRETOK_DEEPSEEK3, false, false}, {"hy_v4", ES__PRETOK_DEEPSEEK3, false, false},
        {"mellum2", ES__PRETOK_STARCODER, false, false},
    };
    for (size_t c = 0; c < ES__ARRAY_LEN(cases); c++) {
        es__pretok_info info;
        bool found = es__pretok_lookup(cases[c].name, strlen(cases[c].name), &info);
        CHECKF(found && info.kind == cases[c].kind && info.ignore_merges == cases[c].ignore_merges &&
                   info.add_bos == cases[c].add_bos,
               "%s", cases[c].name);
    }
    /* names whose expressions differ from every split here, and near misses, stay refused */
    static const char *const refused[] = {"tiny_aya", "granite-embed-multi-97m", "youtu", "qwen35", "gpt-4", "GPT-4o"};
    for (size_t c = 0; c < ES__ARRAY_LEN(refused); c++) {
        es__pretok_info info;
        CHECKF(!es__pretok_lookup(refused[c], strlen(refused[c]), &info), "%s", refused[c]);
    }
    /* the add_bos default reaches the vocabulary: with a BOS id and no add_bos_token, gpt-4o adds no
     * BOS, tekken does */
    tvocab t;
    es__vocab *v = NULL;
    split_vocab(&t, "gpt-4o");
    t.d.special[ES__SPECIAL_BOS] = 0;
    CHECK_OK(tv_build(&t, &v));
    if (v) EXPECT_IDS(v, "it's", true, false, S_ITS);
    es__vocab_free(v);
    tv_free(&t);
    split_vocab(&t, "tekken");
    t.d.special[ES__SPECIAL_BOS] = 0;
    CHECK_OK(tv_build(&t, &v));
    if (v) EXPECT_IDS(v, "it's", true, false, 0, S_IT, S_QS);
    es__vocab_free(v);
    tv_free(&t);
}

static void test_validation(void) {
    CHECK_FAILS(build_broken(br_no_tokens, 1), ES_ERR_MODEL, "tokenizer.ggml.tokens is missing");
    CHECK_FAILS(build_broken(br_empty_tokens, 0), ES_ERR_MODEL, "tokenizer.ggml.tokens is empty");
    CHECK_FAILS(build_broken(br_scores_len, 1), ES_ERR_FORMAT, "tokenizer.ggml.scores has 274 entries, expected 275");
    CHECK_FAILS(build_broken(br_types_len, 1), ES_ERR_FORMAT, "tokenizer.ggml.token_type has 276 entries, expected 275");
    CHECK_FAILS(build_broken(br_nan, 1), ES_ERR_FORMAT, "tokenizer.ggml.scores[261] is NaN");
    CHECK_FAILS(build_broken(br_type, 1), ES_ERR_FORMAT, "tokenizer.ggml.token_type[7] = 9");
    CHECK_FAILS(build_broken(br_utf8, 1), ES_ERR_FORMAT, "tokenizer.ggml.tokens[262]: invalid UTF-8 at byte 0");
    CHECK_FAILS(build_broken(br_byte, 1), ES_ERR_FORMAT, "tokenizer.ggml.tokens[5]: byte token '<0xg2>'");
    CHECK_FAILS(build_broken(br_bos, 1), ES_ERR_MODEL, "tokenizer.ggml.bos_token_id = 275 is outside the vocabulary [0, 275)");
    CHECK_FAILS(build_broken(br_eot, 1), ES_ERR_MODEL, "tokenizer.ggml.eot_token_id = -2");
    CHECK_FAILS(build_broken(br_add_bos, 1), ES_ERR_MODEL, "add_bos_token is true but tokenizer.ggml.bos_token_id is absent");
    CHECK_FAILS(build_broken(br_model, 1), ES_ERR_UNSUPPORTED, "tokenizer.ggml.model 'bert' is not supported");
    CHECK_FAILS(build_broken(br_pre, 0), ES_ERR_UNSUPPORTED, "tokenizer.ggml.pre 'kimi-k2' is not supported");
    CHECK_FAILS(build_broken(br_merge, 0), ES_ERR_FORMAT, "tokenizer.ggml.merges[3]: 'abc' is not two strings");
    CHECK_FAILS(build_broken(br_merge_space, 0), ES_ERR_FORMAT, "tokenizer.ggml.merges[2]");
    CHECK_FAILS(build_broken(br_merge_utf8, 0), ES_ERR_FORMAT, "tokenizer.ggml.merges[1]: invalid UTF-8");
    CHECK_FAILS(build_broken(br_no_merges, 0), ES_ERR_MODEL, "tokenizer.ggml.merges is missing");
    CHECK_OK(build_broken(br_pre, 1)); /* SentencePiece ignores the pre-tokenizer name */

    /* no tokenizer at all: loads, but cannot encode */
    tvocab t;
    tv_init(&t, NULL, NULL);
    es__vocab *v = NULL;
    CHECK_OK(tv_build(&t, &v));
    if (v) {
        size_t n;
        int32_t ids[4];
        CHECK(es__vocab_type(v) == ES_TOKENIZER_NONE && es__vocab_n_tokens(v) == 0);
        CHECK_FAILS(es__tokenize(v, "a", 1, false, false, ids, 4, &n, NULL), ES_ERR_INVALID_ARGUMENT, "no tokenizer");
        es__vocab_free(v);
    }
    /* duplicates, empty tokens: accepted; the last of equal texts is the one encoding gives */
    tv_init(&t, "llama", NULL);
    tv_add(&t, "a", -1, ES__TOK_NORMAL);
    tv_add(&t, "", -1, ES__TOK_CONTROL);
    tv_add(&t, "a", -1, ES__TOK_NORMAL);
    tv_add(&t, SP, -1, ES__TOK_NORMAL);
    t.d.add_space_prefix = 0;
    CHECK_OK(tv_build(&t, &v));
    if (v) {
        EXPECT_IDS(v, "aa", false, true, 2, 2);
        es__vocab_free(v);
    }
    tv_free(&t);
}

/* ---- Allocation failure: every allocation of a build and of an encode may fail cleanly. */
static void test_alloc_failure(void) {
    test_alloc f; /* f.left allocations succeed, then every one fails */
    es_allocator a = test_allocator(&f, -1, false);
    tvocab t;
    bpe_vocab(&t, "gpt-2");
    static es__str toks[TV_MAX], merges[TV_MAX];
    for (int i = 0; i < t.n; i++) toks[i] = (es__str){t.toks[i], strlen(t.toks[i])};
    for (int i = 0; i < t.n_merges; i++) merges[i] = (es__str){t.merges[i], strlen(t.merges[i])};
    es__vocab_desc d = t.d;
    d.tokens = toks, d.n_tokens = (uint64_t)t.n;
    d.merges = merges, d.n_merges = (uint64_t)t.n_merges;
    d.types = t.types, d.n_types = (uint64_t)t.n;
    int oom_ok = 1, built = 0;
    for (long k = 0; k < 400 && !built; k++) {
        f.left = k;
        es__vocab *v = NULL;
        es__err err;
        es_status s = es__vocab_build(&d, &a, &err, &v);
        if (s == ES_OK) {
            built = 1;
            /* now the encoder's allocations: a failed encode leaves the vocabulary's blocks */
            const long held = f.live;
            int enc_ok = 0;
            for (long j = 0; j < 50 && !enc_ok; j++) {
                f.left = j;
                int32_t ids[16] = {0};
                size_t n = 0;
                s = es__tokenize(v, "abc hello <|end|>", 17, true, true, ids, 16, &n, &err);
                if (s == ES_OK) enc_ok = n == 9 && ids[0] == B_ABC && ids[8] == B_END;
                else oom_ok &= s == ES_ERR_OUT_OF_MEMORY;
                oom_ok &= f.live == held;
            }
            CHECK(enc_ok);
            f.left = -1;
            es__vocab_free(v);
        } else {
            oom_ok &= s == ES_ERR_OUT_OF_MEMORY && v == NULL && strstr(err.msg, "out of memory") != NULL;
        }
        CHECKF(f.live == 0, "allocation %ld failing: %ld blocks leaked", k, f.live);
    }
    CHECK(oom_ok && built);
    tv_free(&t);
}

/* ---- Concurrency: one vocabulary, several threads encoding at once, same answers. */
typedef struct job {
    const es__vocab *v;
    int ok;
} job;

static void *encode_many(void *p) {
    job *j = p;
    static const char text[] = "abc xyx  a b \xC3\xA9\xFF <s>ab<user>yxy";
    /* (_,a) -4 beats (_,_) -6 in "__a" */
    static const int32_t want[] = {1, T_SP, T_ABC, T_SP, T_XY, T_X, T_SP, T_SPA, T_SP, T_B, T_SP, BYTE(0xC3),
                                   BYTE(0xA9), BYTE(0xFF), T_SP, 1, T_SPAB, T_USER, T_SP, T_YX, T_Y};
    j->ok = 1;
    for (int i = 0; i < 2000; i++) {
        int32_t ids[64];
        size_t n = 0;
        es_status s = es__tokenize(j->v, text, sizeof text - 1, true, true, ids, 64, &n, NULL);
        j->ok &= s == ES_OK && n == ES__ARRAY_LEN(want) && memcmp(ids, want, sizeof want) == 0;
    }
    return NULL;
}

static void test_threads(void) {
    tvocab t;
    spm_vocab(&t);
    es__vocab *v = NULL;
    CHECK_OK(tv_build(&t, &v));
    if (!v) return;
    pthread_t th[4];
    job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){v, 0};
        CHECK(pthread_create(&th[i], NULL, encode_many, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].ok);
    }
    es__vocab_free(v);
    tv_free(&t);
}

int main(void) {
    test_spm();
    test_spm_decode();
    test_bpe();
    test_bpe_splits();
    test_pretok_names();
    test_validation();
    test_alloc_failure();
    test_threads();
    TEST_MAIN_END();
}
