/* test_unicode.c: the pieces under the encoders: code point classes, UTF-8 decoding (every invalid
 * form), GPT-2's byte map against its Python definition, and the two pre-tokenizer splits on
 * hand-worked cases (tests/tokenizer/pretok_ref.py checks them against a regex engine). */
#include "tvocab.h"
#include "unicode.h"

#include "../test.h"

static void test_classes(void) {
    static const struct {
        uint32_t cp;
        es__ucls cls;
    } cases[] = {
        {'a', ES__UCLS_LETTER},     {'Z', ES__UCLS_LETTER},     {'0', ES__UCLS_NUMBER},    {'9', ES__UCLS_NUMBER},
        {' ', ES__UCLS_SPACE},      {'\t', ES__UCLS_SPACE},     {'\n', ES__UCLS_SPACE},    {'\r', ES__UCLS_SPACE},
        {0x0B, ES__UCLS_SPACE},     {0x0C, ES__UCLS_SPACE},     {0x1C, ES__UCLS_OTHER},    {0x1F, ES__UCLS_OTHER},
        {0x85, ES__UCLS_SPACE},     {0xA0, ES__UCLS_SPACE},     {0x1680, ES__UCLS_SPACE},  {0x2000, ES__UCLS_SPACE},
        {0x200A, ES__UCLS_SPACE},   {0x200B, ES__UCLS_OTHER},   {0x2028, ES__UCLS_SPACE},  {0x202F, ES__UCLS_SPACE},
        {0x205F, ES__UCLS_SPACE},   {0x3000, ES__UCLS_SPACE},   {'!', ES__UCLS_OTHER},     {'\'', ES__UCLS_OTHER},
        {0xAA, ES__UCLS_LETTER},    {0xB2, ES__UCLS_NUMBER},    {0xB5, ES__UCLS_LETTER},   {0xE9, ES__UCLS_LETTER},
        {0xD7, ES__UCLS_OTHER},     {0x0301, ES__UCLS_OTHER},   {0x0660, ES__UCLS_NUMBER}, {0x2160, ES__UCLS_NUMBER},
        {0x4E00, ES__UCLS_LETTER},  {0x9FFF, ES__UCLS_LETTER},  {0xAC00, ES__UCLS_LETTER}, {0x1780, ES__UCLS_LETTER},
        {0x17D2, ES__UCLS_OTHER},   {0x1F600, ES__UCLS_OTHER},  {0xE000, ES__UCLS_OTHER},  {0x10FFFF, ES__UCLS_OTHER},
        {0x20000, ES__UCLS_LETTER}, {0x1D7CE, ES__UCLS_NUMBER}, {0x2581, ES__UCLS_OTHER},  {0x017F, ES__UCLS_LETTER},
        {ES__UTF8_BAD + 0xFF, ES__UCLS_OTHER},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(cases); i++)
        CHECKF(es__unicode_class(cases[i].cp) == cases[i].cls, "U+%04X: class %d, want %d", cases[i].cp,
               es__unicode_class(cases[i].cp), cases[i].cls);
    /* the table: starts at 0, strictly increasing, and the Latin-1 copy agrees with the search */
    CHECK(es__unicode_n_ranges > 100 && (es__unicode_ranges[0] >> 2) == 0);
    int sorted = 1;
    for (uint32_t i = 1; i < es__unicode_n_ranges; i++)
        sorted &= (es__unicode_ranges[i] >> 2) > (es__unicode_ranges[i - 1] >> 2) &&
                  (es__unicode_ranges[i] & 3) != (es__unicode_ranges[i - 1] & 3);
    CHECK(sorted);
    int agree = 1;
    for (uint32_t cp = 0; cp < 256; cp++) agree &= es__unicode_class_slow(cp) == es__unicode_latin1[cp];
    CHECK(agree);
}

/* The finer categories (the whole table is checked against unicodedata by pretok_regex). */
static void test_categories(void) {
    static const struct {
        uint32_t cp;
        es__ugc gc;
    } cases[] = {
        {'A', ES__UGC_LU},       {'a', ES__UGC_LL},     {0x01C5, ES__UGC_LT},    {0x02B0, ES__UGC_LM},
        {0x4F60, ES__UGC_LO},    {0x30FC, ES__UGC_LM},  {0x0301, ES__UGC_MARK},  {0x0903, ES__UGC_MARK},
        {'7', ES__UGC_NUMBER},   {0xBD, ES__UGC_NUMBER}, {'!', ES__UGC_PUNCT},   {0x3001, ES__UGC_PUNCT},
        {'$', ES__UGC_SYMBOL},   {'+', ES__UGC_SYMBOL}, {'`', ES__UGC_SYMBOL},   {0x20AC, ES__UGC_SYMBOL},
        {' ', ES__UGC_SPACE},    {0x3000, ES__UGC_SPACE}, {0x85, ES__UGC_SPACE}, {0x1C, ES__UGC_OTHER},
        {0x200D, ES__UGC_OTHER}, {0xE000, ES__UGC_OTHER}, {ES__UTF8_BAD + 0xFF, ES__UGC_OTHER},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(cases); i++)
        CHECKF(es__unicode_gc(cases[i].cp) == cases[i].gc, "U+%04X: category %d, want %d", cases[i].cp,
               es__unicode_gc(cases[i].cp), cases[i].gc);
    int agree = 1;
    for (uint32_t cp = 0; cp < 256; cp++) agree &= es__unicode_gc_slow(cp) == es__unicode_gc_latin1[cp];
    CHECK(agree);
    /* both tables say the same of letters, numbers and spaces */
    int same = 1;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += 7) {
        es__ugc g = es__unicode_gc(cp);
        es__ucls want = g == ES__UGC_SPACE ? ES__UCLS_SPACE
                        : g >= ES__UGC_LU && g <= ES__UGC_LO ? ES__UCLS_LETTER
                        : g == ES__UGC_NUMBER ? ES__UCLS_NUMBER : ES__UCLS_OTHER;
        same &= es__unicode_class(cp) == want;
    }
    CHECK(same);
}

static void test_utf8(void) {
    static const struct {
        const char *s;
        size_t n;
        uint32_t cp;
        size_t len;
    } cases[] = {
        {"A", 1, 'A', 1},
        {"\xC3\xA9", 2, 0xE9, 2},
        {"\xE2\x96\x81", 3, 0x2581, 3},
        {"\xF0\x9F\x98\x80", 4, 0x1F600, 4},
        {"\xF4\x8F\xBF\xBF", 4, 0x10FFFF, 4},
        {"\xC0\x80", 2, ES__UTF8_BAD + 0xC0, 1},         /* overlong NUL */
        {"\xC1\xBF", 2, ES__UTF8_BAD + 0xC1, 1},         /* overlong */
        {"\xE0\x80\xAF", 3, ES__UTF8_BAD + 0xE0, 1},     /* overlong '/' */
        {"\xF0\x80\x80\xAF", 4, ES__UTF8_BAD + 0xF0, 1}, /* overlong '/' */
        {"\xED\xA0\x80", 3, ES__UTF8_BAD + 0xED, 1},     /* surrogate */
        {"\xF4\x90\x80\x80", 4, ES__UTF8_BAD + 0xF4, 1}, /* above U+10FFFF */
        {"\xF5\x80\x80\x80", 4, ES__UTF8_BAD + 0xF5, 1},
        {"\xFF", 1, ES__UTF8_BAD + 0xFF, 1},
        {"\x80", 1, ES__UTF8_BAD + 0x80, 1},             /* lone continuation */
        {"\xE2\x96", 2, ES__UTF8_BAD + 0xE2, 1},         /* truncated by the end */
        {"\xE2\x96" "A", 3, ES__UTF8_BAD + 0xE2, 1},     /* truncated by a non-continuation */
        {"\xC3\xC3", 2, ES__UTF8_BAD + 0xC3, 1},
    };
    for (size_t i = 0; i < ES__ARRAY_LEN(cases); i++) {
        uint32_t cp = 0;
        size_t len = es__utf8_decode((const uint8_t *)cases[i].s, cases[i].n, &cp);
        CHECKF(cp == cases[i].cp && len == cases[i].len, "case %zu: U+%X len %zu", i, cp, len);
    }
    /* encode/decode agree with the test's own encoder on every scalar value */
    int ok = 1;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x3000 ? 1 : 97)) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        char want[5];
        uint8_t got[4];
        int wn = tv_utf8(cp, want);
        size_t gn = es__utf8_encode(cp, got);
        uint32_t back;
        ok &= (int)gn == wn && memcmp(got, want, gn) == 0 && es__utf8_decode(got, gn, &back) == gn && back == cp;
    }
    CHECK(ok);
    size_t bad = 0;
    CHECK(es__utf8_valid((const uint8_t *)"h\xC3\xA9llo", 6, &bad));
    CHECK(!es__utf8_valid((const uint8_t *)"h\xC3\xA9l\xFFo", 6, &bad) && bad == 4);
}

static void test_byte_map(void) {
    uint32_t map[256];
    tv_byte_map(map);
    int ok = 1;
    for (int b = 0; b < 256; b++) ok &= es__byte_to_cp((uint8_t)b) == map[b] && es__cp_to_byte(map[b]) == b;
    CHECK(ok);
    CHECK(es__byte_to_cp(' ') == 0x120 && es__byte_to_cp('\n') == 0x10A); /* 'Ġ', 'Ċ' */
    int unmapped = 0;
    for (uint32_t cp = 0; cp < 0x200; cp++) unmapped += es__cp_to_byte(cp) < 0;
    CHECK(unmapped == 0x200 - 256);
}

/* Splits text and compares with the expected words, given as "a|b|c". */
static int split_is(es__pretok kind, const char *text, size_t len, const char *want) {
    char got[1024];
    size_t w = 0;
    es__pretok_iter it;
    es__pretok_begin(&it, kind, (const uint8_t *)text, len);
    for (size_t pos = 0; pos < len;) {
        size_t n = es__pretok_next(&it);
        if (n == 0 || pos + n > len || w + n + 2 > sizeof got) return 0;
        if (pos) got[w++] = '|';
        memcpy(got + w, text + pos, n);
        w += n;
        pos += n;
    }
    got[w] = 0;
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "split(%d) of \"%s\": got \"%s\", want \"%s\"\n", (int)kind, text, got, want);
        return 0;
    }
    return 1;
}

#define SPLIT(kind, text, want) CHECK(split_is((kind), (text), sizeof(text) - 1, (want)))

static void test_pretok(void) {
    const es__pretok G = ES__PRETOK_GPT2, L = ES__PRETOK_LLAMA3;
    SPLIT(G, "Hello world", "Hello| world");
    SPLIT(G, "  Hello", " | Hello");
    SPLIT(G, "a  \n b", "a|  \n| b");
    SPLIT(G, "it's", "it|'s");
    SPLIT(G, "IT'S", "IT|'|S");
    SPLIT(G, "don't we'll they've you're I'm he'd", "don|'t| we|'ll| they|'ve| you|'re| I|'m| he|'d");
    SPLIT(G, "x 'll", "x| '|ll");
    SPLIT(G, "123abc", "123|abc");
    SPLIT(G, "a 12345", "a| 12345");
    SPLIT(G, "x!!! y", "x|!!!| y");
    SPLIT(G, "a   ", "a|   ");
    SPLIT(G, "a\t\tb", "a|\t|\t|b");
    SPLIT(G, "a\xFF\xFE" "b", "a|\xFF\xFE|b");
    SPLIT(G, " \xC3\xA9t\xC3\xA9 2\xC2\xB2", " \xC3\xA9t\xC3\xA9| 2\xC2\xB2");
    SPLIT(G, "'", "'");
    SPLIT(G, " ", " ");
    SPLIT(G, "\xE3\x80\x80x", "\xE3\x80\x80|x"); /* U+3000 is \s but not the optional space */

    SPLIT(L, "Hello world", "Hello| world");
    SPLIT(L, "I'M HE'LL", "I|'M| HE|'LL");
    SPLIT(L, "x'\xC5\xBF", "x|'\xC5\xBF"); /* U+017F folds to 's' */
    SPLIT(L, "1234567", "123|456|7");
    SPLIT(L, "a 1234", "a| |123|4");
    SPLIT(L, "(hello", "(hello");
    SPLIT(L, "\thello", "\thello");
    SPLIT(L, "a\n\nb", "a|\n\n|b");
    SPLIT(L, "a \n b", "a| \n| b");
    SPLIT(L, "hi!!\n\nthere", "hi|!!\n\n|there");
    SPLIT(L, "  x", " | x");
    SPLIT(L, "\xF0\x9F\x98\x80" "abc", "\xF0\x9F\x98\x80" "abc");
    SPLIT(L, "a  ", "a|  ");
    SPLIT(L, "a\r\n\r\n  b", "a|\r\n\r\n| | b");
    SPLIT(L, "x  \t\n", "x|  \t\n");
    SPLIT(L, "\n1", "\n|1");
    SPLIT(L, " ...\n\nx", " ...\n\n|x");
    SPLIT(L, "\xFF" "abc", "\xFF" "abc");
}

/* The other splits, on inputs that tell each apart from its neighbours (digit grouping, contractions,
 * letter classes, punctuation, stage boundaries), worked out by hand from the expressions listed at
 * the top of lib/core/tokenizer_pretok.c (pretok_regex checks the same strings against Python's re). */
static void test_pretok_more(void) {
    const es__pretok Q = ES__PRETOK_QWEN2, DL = ES__PRETOK_DEEPSEEK_LLM, DC = ES__PRETOK_DEEPSEEK_CODER;
    const es__pretok D3 = ES__PRETOK_DEEPSEEK3, F = ES__PRETOK_FALCON, SC = ES__PRETOK_STARCODER;
    const es__pretok P = ES__PRETOK_PORO, V = ES__PRETOK_VIKING, T = ES__PRETOK_TEKKEN, O = ES__PRETOK_GPT4O;
    /* qwen2: Llama 3 with single digits */
    SPLIT(Q, "1234567", "1|2|3|4|5|6|7");
    SPLIT(Q, "a 12", "a| |1|2");
    SPLIT(Q, "I'M HE'LL", "I|'M| HE|'LL");
    SPLIT(Q, "(hello\n\nx", "(hello|\n\n|x");
    /* deepseek-llm: the third stage's class holds the ASCII letters but not U+00FC, so it splits a
     * word the second stage kept whole */
    SPLIT(DL, "F\xC3\xBChrer", "F|\xC3\xBC|hrer");
    SPLIT(DL, "Hello, world!", "Hello|,| world|!");
    SPLIT(DL, "ab  \n", "ab|  |\n");
    SPLIT(DL, "a 12345", "a| |12345");
    SPLIT(DL, "\xE6\x88\x91\xE6\x83\xB3" "apple", "\xE6\x88\x91\xE6\x83\xB3|apple");
    SPLIT(DL, "x\xE3\x80\x80\xE3\x80\x81y", "x|\xE3\x80\x80\xE3\x80\x81|y"); /* U+3000 U+3001 */
    /* deepseek-coder: all of \p{L}, \p{P} but not \p{S}, single digits */
    SPLIT(DC, "F\xC3\xBChrer", "F\xC3\xBChrer");
    SPLIT(DC, "a 12345", "a| |1|2|3|4|5");
    SPLIT(DC, "x ...y", "x| ...|y");
    SPLIT(DC, "a+b", "a|+|b");
    SPLIT(DC, "\r\n", "\r|\n");
    /* deepseek-v3: three digits, kana and CJK runs, ASCII punctuation leading ASCII letters */
    SPLIT(D3, "12345", "123|45");
    SPLIT(D3, "(abc", "(abc");
    SPLIT(D3, " \xC3\xBC" "ber", " \xC3\xBC" "ber");
    SPLIT(D3, "x+=1", "x|+=|1");
    SPLIT(D3, "\xE6\x97\xA5\xE3\x83\x86" "ab", "\xE6\x97\xA5\xE3\x83\x86|ab");
    /* falcon: punctuation runs first, then GPT-2, then three ASCII digits apart */
    SPLIT(F, "a 1234567", "a| |123|456|7");
    SPLIT(F, "a 12", "a| 12");
    SPLIT(F, "hello!!world", "hello|!!|world");
    SPLIT(F, "x+$y", "x|+$|y");
    SPLIT(F, "it's", "it|'|s");
    /* starcoder (refact, command-r, smollm, ...): every \p{N} alone, then GPT-2 */
    SPLIT(SC, "a 123", "a| |1|2|3");
    SPLIT(SC, "it's ok", "it|'s| ok");
    SPLIT(SC, "x\xC2\xB2", "x|\xC2\xB2");
    /* poro (bloom, gpt3-finnish): words with an optional space; the listed punctuation stays apart */
    SPLIT(P, "Hello, world.", "Hello|,| world|.");
    SPLIT(P, "a  b", "a| | b");
    SPLIT(P, "f(x)y", "f|(|x|)|y");
    SPLIT(P, "123abc", "123abc");
    SPLIT(V, "abc123 d", "abc|1|2|3| d");
    /* tekken: case changes split words; '/' follows punctuation */
    SPLIT(T, "HelloWorld", "Hello|World");
    SPLIT(T, "HELLOworld", "HELLOworld");
    SPLIT(T, "helloWORLD", "hello|WORLD");
    SPLIT(T, " ABC", " ABC");
    SPLIT(T, "1234", "1|2|3|4");
    SPLIT(T, "a/b//\n/c", "a|/b|//\n/|c");
    SPLIT(T, "\xE4\xBD\xA0\xE5\xA5\xBD", "\xE4\xBD\xA0\xE5\xA5\xBD"); /* Lo is in both classes */
    SPLIT(T, "HTTPServer's", "HTTPServer|'s");
    SPLIT(T, "IT'S", "IT|'S");
    /* gpt-4o: tekken with a contraction after the letters (any case), and digits in threes */
    SPLIT(O, "HTTPServer's", "HTTPServer's");        /* U* takes HTTPS, W+ erver, then 's */
    SPLIT(O, "it's IT'S", "it's| IT'S");             /* IT'S: only the upper alternative matches */
    SPLIT(O, "don't we'll they've you're I'm he'd", "don't| we'll| they've| you're| I'm| he'd");
    SPLIT(O, "THEY'RE You'Ve", "THEY'RE| You'Ve");
    SPLIT(O, "x'\xC5\xBF", "x'\xC5\xBF");               /* U+017F folds to 's' */
    SPLIT(O, "\xC7\x85'LL", "\xC7\x85'LL");             /* U+01C5 (Lt) is upper only */
    SPLIT(O, "e\xCC\x81'S \xCC\x81'd", "e\xCC\x81'S| \xCC\x81'd"); /* U+0301 (Mn) is in both classes */
    SPLIT(O, "\xE4\xBD\xA0's", "\xE4\xBD\xA0's");       /* so is Lo */
    SPLIT(O, "a'b 'tis", "a|'b| '|tis");             /* no contraction: "'" is a word's one-character prefix */
    SPLIT(O, "x 'll", "x| '|ll");                    /* nor after a space: punctuation, then a word */
    SPLIT(O, "1234567 12", "123|456|7| |12");
    SPLIT(O, "a/b//\n/c", "a|/b|//\n/|c");
    SPLIT(O, "a!/\n/b", "a|!/\n/|b");
    SPLIT(O, "x?\r\n\r\n/y", "x|?\r\n\r\n/|y");
    SPLIT(O, "a\r\n\r\n  b", "a|\r\n\r\n| | b");
    SPLIT(O, "x  \t\n", "x|  \t\n");
    /* an invalid byte is a character in no class (Python's re cannot test these) */
    SPLIT(Q, "\xFF" "abc", "\xFF" "abc");
    SPLIT(DL, "a\xFF" "b", "a|\xFF|b");
    SPLIT(DC, "a\xFF" "b", "a|\xFF|b");
    SPLIT(D3, "a\xFF" "b", "a|\xFF" "b");
    SPLIT(F, "a\xFF" "b", "a|\xFF|b");
    SPLIT(SC, "a\xFF" "b", "a|\xFF|b");
    SPLIT(P, "a\xFF" "b", "a\xFF" "b");
    SPLIT(T, "\xFF" "abc", "\xFF" "abc");
    SPLIT(O, "\xFF" "abc's", "\xFF" "abc's");
    SPLIT(DL, "\xE2\x96", "\xE2\x96"); /* a truncated sequence: two characters, one gap */
}

int main(void) {
    test_classes();
    test_categories();
    test_utf8();
    test_byte_map();
    test_pretok();
    test_pretok_more();
    TEST_MAIN_END();
}
