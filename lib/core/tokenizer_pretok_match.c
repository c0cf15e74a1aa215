/* tokenizer_pretok_match.c: the matchers of the pre-tokenizer expressions listed at the top of
 * tokenizer_pretok.c, one function per expression, each following its alternatives in order with the
 * backtracking a regex engine would do. It knows nothing about stages, pieces or names. */
#include "tokenizer_pretok.h"
#include "unicode.h"

#include <stdbool.h>
#include <string.h>

/* The character at t[pos] (pos < len): its code point, class and byte length. */
typedef struct ch {
    uint32_t cp;
    es__ucls cls;
    size_t n;
} ch;

static inline ch char_at(const uint8_t *t, size_t len, size_t pos) {
    ch c;
    c.n = es__utf8_decode(t + pos, len - pos, &c.cp);
    c.cls = es__unicode_class(c.cp);
    return c;
}

/* End of the run of characters of class k that starts at pos, at most max characters. */
static size_t run_end(const uint8_t *t, size_t len, size_t pos, es__ucls k, size_t max) {
    for (size_t count = 0; pos < len && count < max; count++) {
        ch c = char_at(t, len, pos);
        if (c.cls != k) break;
        pos += c.n;
    }
    return pos;
}

/* \s+(?!\S)|\s+ at pos, where a run of whitespace starts: the whole run when the text ends after
 * it or it is a single character, else all but its last character (which then prefixes the next
 * word). crlf_end (0 = none) gets the end of the run's last \r or \n for Llama 3's \s*[\r\n]+. */
static size_t space_run(const uint8_t *t, size_t len, size_t pos, size_t *crlf_end) {
    size_t r = pos, last = pos, count = 0;
    *crlf_end = 0;
    while (r < len) {
        ch c = char_at(t, len, r);
        if (c.cls != ES__UCLS_SPACE) break;
        if (c.cp == '\r' || c.cp == '\n') *crlf_end = r + c.n;
        last = r;
        r += c.n;
        count++;
    }
    if (r == len || count == 1) return r - pos;
    return last - pos;
}

/* \s*[\r\n]+|\s+(?!\S)|\s+ at pos: the whitespace up to its last line break, else as space_run
 * (0 when pos is not whitespace). */
static size_t space_tail(const uint8_t *t, size_t len, size_t pos) {
    size_t crlf, n = space_run(t, len, pos, &crlf);
    return crlf ? crlf - pos : n;
}

static size_t gpt2_next(const uint8_t *t, size_t len, size_t pos) {
    /* 's|'t|'re|'ve|'m|'ll|'d */
    if (t[pos] == '\'' && pos + 1 < len) {
        uint8_t a = t[pos + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if (pos + 2 < len) {
            uint8_t b = t[pos + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
        }
    }
    ch c0 = char_at(t, len, pos);
    /*  ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+ : an optional space, then a run of one class */
    size_t q = pos + (c0.cp == ' ' ? 1 : 0);
    if (q < len) {
        ch cq = q == pos ? c0 : char_at(t, len, q);
        if (cq.cls != ES__UCLS_SPACE) return run_end(t, len, q, cq.cls, SIZE_MAX) - pos;
    }
    size_t crlf;
    return space_run(t, len, pos, &crlf);
}

/* (?i) folding of the letters in the contractions: ASCII case and U+017F LATIN SMALL LETTER LONG
 * S, which folds to 's'. Anything else gives 0. */
static uint32_t fold(uint32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    if (cp >= 'a' && cp <= 'z') return cp;
    if (cp == 0x17F) return 's';
    return 0;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at pos (pos <= len): its length, or 0. */
static size_t contraction(const uint8_t *t, size_t len, size_t pos) {
    if (pos + 1 >= len || t[pos] != '\'') return 0;
    ch c1 = char_at(t, len, pos + 1);
    uint32_t a = fold(c1.cp);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1 + c1.n;
    if (pos + 1 + c1.n < len) {
        ch c2 = char_at(t, len, pos + 1 + c1.n);
        uint32_t b = fold(c2.cp);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 1 + c1.n + c2.n;
    }
    return 0;
}

/* Llama 3's expression with \p{N}{1,max_digits} (3 for Llama 3, 1 for Qwen2). */
static size_t llama3_next(const uint8_t *t, size_t len, size_t pos, size_t max_digits) {
    size_t k = contraction(t, len, pos);
    if (k) return k;
    ch c0 = char_at(t, len, pos);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0.cls == ES__UCLS_LETTER) return run_end(t, len, pos, ES__UCLS_LETTER, SIZE_MAX) - pos;
    if (c0.cls != ES__UCLS_NUMBER && c0.cp != '\r' && c0.cp != '\n' && pos + c0.n < len) {
        ch c1 = char_at(t, len, pos + c0.n);
        if (c1.cls == ES__UCLS_LETTER) return run_end(t, len, pos + c0.n, ES__UCLS_LETTER, SIZE_MAX) - pos;
    }
    /* \p{N}{1,3} */
    if (c0.cls == ES__UCLS_NUMBER) return run_end(t, len, pos, ES__UCLS_NUMBER, max_digits) - pos;
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t q = pos + (c0.cp == ' ' ? 1 : 0);
    if (q < len) {
        ch cq = q == pos ? c0 : char_at(t, len, q);
        if (cq.cls == ES__UCLS_OTHER) {
            size_t r = run_end(t, len, q, ES__UCLS_OTHER, SIZE_MAX);
            while (r < len && (t[r] == '\r' || t[r] == '\n')) r++;
            return r - pos;
        }
    }
    return space_tail(t, len, pos);
}

size_t es__pm_gpt2(const uint8_t *t, size_t end, size_t pos) { return gpt2_next(t, end, pos); }
size_t es__pm_llama3(const uint8_t *t, size_t end, size_t pos) { return llama3_next(t, end, pos, 3); }
size_t es__pm_qwen2(const uint8_t *t, size_t end, size_t pos) { return llama3_next(t, end, pos, 1); }


/* ---- The finer classes: general categories (es__ugc) as bit masks, and listed ranges. */

typedef struct gch {
    uint32_t cp;
    uint32_t bit; /* 1 << es__ugc */
    size_t n;
} gch;

#define B(g) (1u << (g))
#define B_L (B(ES__UGC_LU) | B(ES__UGC_LL) | B(ES__UGC_LT) | B(ES__UGC_LM) | B(ES__UGC_LO))
#define B_N B(ES__UGC_NUMBER)
#define B_P B(ES__UGC_PUNCT)
#define B_S B(ES__UGC_SYMBOL)
#define B_M B(ES__UGC_MARK)
#define B_SPACE B(ES__UGC_SPACE)
/* tekken's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
#define B_UPPERISH (B(ES__UGC_LU) | B(ES__UGC_LT) | B(ES__UGC_LM) | B(ES__UGC_LO) | B_M)
#define B_LOWERISH (B(ES__UGC_LL) | B(ES__UGC_LM) | B(ES__UGC_LO) | B_M)

static inline gch gch_at(const uint8_t *t, size_t end, size_t pos) {
    gch c;
    c.n = es__utf8_decode(t + pos, end - pos, &c.cp);
    c.bit = B(es__unicode_gc(c.cp));
    return c;
}

/* End of the run of characters whose category is in mask, from pos, at most max characters. */
static size_t run_mask(const uint8_t *t, size_t end, size_t pos, uint32_t mask, size_t max) {
    for (size_t count = 0; pos < end && count < max; count++) {
        gch c = gch_at(t, end, pos);
        if (!(c.bit & mask)) break;
        pos += c.n;
    }
    return pos;
}

typedef bool (*cp_set)(uint32_t cp);

static size_t run_set(const uint8_t *t, size_t end, size_t pos, cp_set in) {
    while (pos < end) {
        uint32_t cp;
        size_t n = es__utf8_decode(t + pos, end - pos, &cp);
        if (!in(cp)) break;
        pos += n;
    }
    return pos;
}

/* cp in one of the sorted, disjoint inclusive ranges r[0..n). */
static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* \s?[set]+ at pos, where \s and the set are disjoint: the end of the match, or 0. */
static size_t space_opt_run(const uint8_t *t, size_t end, size_t pos, cp_set in) {
    gch c0 = gch_at(t, end, pos);
    if (in(c0.cp)) return run_set(t, end, pos, in);
    if ((c0.bit & B_SPACE) && pos + c0.n < end) {
        size_t r = run_set(t, end, pos + c0.n, in);
        if (r > pos + c0.n) return r;
    }
    return 0;
}

/* \s?[classes]+ with classes given as a category mask. */
static size_t space_opt_mask(const uint8_t *t, size_t end, size_t pos, uint32_t mask) {
    gch c0 = gch_at(t, end, pos);
    if (c0.bit & mask) return run_mask(t, end, pos, mask, SIZE_MAX) - pos;
    if ((c0.bit & B_SPACE) && pos + c0.n < end) {
        size_t r = run_mask(t, end, pos + c0.n, mask, SIZE_MAX);
        if (r > pos + c0.n) return r - pos;
    }
    return 0;
}

/* ---- deepseek-llm and deepseek-coder. */

size_t es__pm_crlf(const uint8_t *t, size_t end, size_t pos) {
    (void)end;
    return t[pos] == '\r' || t[pos] == '\n';
}

/* deepseek-llm's letter class, as published: cased letters of these blocks (not all of \p{L}). */
static const uint32_t ds_cased[][2] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},       {0xD8, 0xF6},
    {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2AF},     {0x370, 0x373},
    {0x376, 0x377},     {0x37B, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},
    {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},
    {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

static bool in_ds_cased(uint32_t cp) { return in_ranges(ds_cased, sizeof ds_cased / sizeof ds_cased[0], cp); }

/* [!-/:-~！-／：-～‘-‟　-。]: note that :-~ holds the ASCII letters too */
static bool in_ds_punct(uint32_t cp) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E) || (cp >= 0xFF01 && cp <= 0xFF0F) ||
           (cp >= 0xFF1A && cp <= 0xFF5E) || (cp >= 0x2018 && cp <= 0x201F) || (cp >= 0x3000 && cp <= 0x3002);
}

/* [一-龥ࠀ-一가-퟿] */
static bool in_ds_cjk(uint32_t cp) { return (cp >= 0x800 && cp <= 0x9FA5) || (cp >= 0xAC00 && cp <= 0xD7FF); }

/* [一-龥぀-ゟ゠-ヿ] */
static bool in_ds3_kana(uint32_t cp) { return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF); }

size_t es__pm_ds_cased(const uint8_t *t, size_t end, size_t pos) {
    size_t r = space_opt_run(t, end, pos, in_ds_cased);
    return r ? r - pos : 0;
}

/* U+3000 is both \s and in the set: taken as \s or as the set's, the match ends at the same place. */
size_t es__pm_ds_punct(const uint8_t *t, size_t end, size_t pos) {
    size_t r = space_opt_run(t, end, pos, in_ds_punct);
    return r ? r - pos : 0;
}

size_t es__pm_ds_cjk(const uint8_t *t, size_t end, size_t pos) { return run_set(t, end, pos, in_ds_cjk) - pos; }

size_t es__pf_ws_end(const uint8_t *t, size_t end, size_t pos, size_t *at) {
    size_t run = SIZE_MAX; /* start of the whitespace run the scan is in */
    for (size_t p = pos; p < end;) {
        gch c = gch_at(t, end, p);
        if (c.bit & B_SPACE) {
            if (run == SIZE_MAX) run = p;
        } else {
            run = SIZE_MAX;
        }
        p += c.n;
    }
    if (run == SIZE_MAX) return 0;
    *at = run;
    return end - run;
}

size_t es__pm_num_run(const uint8_t *t, size_t end, size_t pos) { return run_mask(t, end, pos, B_N, SIZE_MAX) - pos; }
size_t es__pm_num1(const uint8_t *t, size_t end, size_t pos) { return run_mask(t, end, pos, B_N, 1) - pos; }
size_t es__pm_num3(const uint8_t *t, size_t end, size_t pos) { return run_mask(t, end, pos, B_N, 3) - pos; }

size_t es__pm_space_letters(const uint8_t *t, size_t end, size_t pos) { return space_opt_mask(t, end, pos, B_L); }
size_t es__pm_space_punct(const uint8_t *t, size_t end, size_t pos) { return space_opt_mask(t, end, pos, B_P); }

/* ---- deepseek-v3. */

size_t es__pm_ds3_kana(const uint8_t *t, size_t end, size_t pos) { return run_set(t, end, pos, in_ds3_kana) - pos; }

static bool ascii_punct(uint32_t cp) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
}

static bool ascii_letter(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z'); }

size_t es__pm_ds3_main(const uint8_t *t, size_t end, size_t pos) {
    gch c0 = gch_at(t, end, pos);
    size_t p1 = pos + c0.n;
    /* [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ */
    if (ascii_punct(c0.cp) && p1 < end) {
        size_t r = run_set(t, end, p1, ascii_letter);
        if (r > p1) return r - pos;
    }
    /* [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ */
    bool x = c0.cp != '\r' && c0.cp != '\n' && !(c0.bit & (B_L | B_P | B_S));
    if (x && p1 < end) {
        size_t r = run_mask(t, end, p1, B_L | B_M, SIZE_MAX);
        if (r > p1) return r - pos;
    }
    if (c0.bit & (B_L | B_M)) return run_mask(t, end, pos, B_L | B_M, SIZE_MAX) - pos;
    /*  ?[\p{P}\p{S}]+[\r\n]* */
    size_t q = pos + (c0.cp == ' ' ? 1 : 0);
    if (q < end) {
        size_t r = run_mask(t, end, q, B_P | B_S, SIZE_MAX);
        if (r > q) {
            while (r < end && (t[r] == '\r' || t[r] == '\n')) r++;
            return r - pos;
        }
    }
    /* \s*[\r\n]+|\s+(?!\S)|\s+ */
    return space_tail(t, end, pos);
}

/* ---- falcon. */

static bool in_falcon_punct(uint32_t cp) {
    if (cp != 0 && cp < 0x80 && strchr("$+<=>^~|`", (int)cp)) return true;
    return cp <= 0x10FFFF && es__unicode_gc(cp) == ES__UGC_PUNCT;
}

size_t es__pm_falcon_punct(const uint8_t *t, size_t end, size_t pos) {
    return run_set(t, end, pos, in_falcon_punct) - pos;
}

size_t es__pm_digits3(const uint8_t *t, size_t end, size_t pos) {
    if (end - pos < 3) return 0;
    for (int i = 0; i < 3; i++)
        if (t[pos + i] < '0' || t[pos + i] > '9') return 0;
    return 3;
}

/* ---- poro, bloom, gpt3-finnish, viking. */

/* [^(\s|.,!?…。，、।۔،)] */
static bool in_poro_word(uint32_t cp) {
    if (cp < 0x80) return (cp == 0 || !strchr("(|).,!?", (int)cp)) && es__unicode_gc(cp) != ES__UGC_SPACE;
    switch (cp) {
    case 0x2026: case 0x3002: case 0xFF0C: case 0x3001: case 0x0964: case 0x06D4: case 0x060C: return false;
    default: return cp > 0x10FFFF || es__unicode_gc(cp) != ES__UGC_SPACE;
    }
}

size_t es__pm_poro(const uint8_t *t, size_t end, size_t pos) {
    size_t q = pos + (t[pos] == ' ' ? 1 : 0);
    size_t r = q < end ? run_set(t, end, q, in_poro_word) : q;
    return r > q ? r - pos : 0;
}

/* ---- tekken and gpt-4o. */

/* [U]*[W]+ from p (U, W: tekken's upper- and lower-ish classes, which share Lm, Lo and M): U* takes
 * its longest run, then gives characters back until W+ can start; W+ then runs on. The end, or 0. */
static size_t tekken_lower(const uint8_t *t, size_t end, size_t p) {
    size_t last_w_end = 0; /* end of the last W character inside the U run */
    while (p < end) {
        gch c = gch_at(t, end, p);
        if (!(c.bit & B_UPPERISH)) break;
        p += c.n;
        if (c.bit & B_LOWERISH) last_w_end = p;
    }
    if (p < end && (gch_at(t, end, p).bit & B_LOWERISH)) return run_mask(t, end, p, B_LOWERISH, SIZE_MAX);
    /* W+ starts at the last W of the run and stops after it: what follows it is not W */
    return last_w_end;
}

/* [U]+[W]* from p: the end, or 0. */
static size_t tekken_upper(const uint8_t *t, size_t end, size_t p) {
    size_t r = run_mask(t, end, p, B_UPPERISH, SIZE_MAX);
    return r > p ? run_mask(t, end, r, B_LOWERISH, SIZE_MAX) : 0;
}

/* tekken's expression, or with contractions gpt-4o's: the same with (?i:'s|'t|'re|'ve|'m|'ll|'d)?
 * after each letter alternative, and \p{N}{1,max_digits} for \p{N}. The optional suffix cannot
 * fail, so it leaves the letters' match as it was and only extends it. */
static size_t tekken_next(const uint8_t *t, size_t end, size_t pos, bool contractions, size_t max_digits) {
    gch c0 = gch_at(t, end, pos);
    size_t p1 = pos + c0.n, e;
    /* [^\r\n\p{L}\p{N}]? before either letter alternative: tried taken, then not */
    bool x = c0.cp != '\r' && c0.cp != '\n' && !(c0.bit & (B_L | B_N)) && p1 < end;
    if ((x && (e = tekken_lower(t, end, p1))) || (e = tekken_lower(t, end, pos)) ||
        (x && (e = tekken_upper(t, end, p1))) || (e = tekken_upper(t, end, pos)))
        return e - pos + (contractions ? contraction(t, end, e) : 0);
    /* \p{N}{1,max_digits} */
    if (c0.bit & B_N) return run_mask(t, end, pos, B_N, max_digits) - pos;
    /*  ?[^\s\p{L}\p{N}]+[\r\n/]* */
    size_t q = pos + (c0.cp == ' ' ? 1 : 0);
    if (q < end) {
        size_t r = q;
        while (r < end) {
            gch c = gch_at(t, end, r);
            if (c.bit & (B_SPACE | B_L | B_N)) break;
            r += c.n;
        }
        if (r > q) {
            while (r < end && (t[r] == '\r' || t[r] == '\n' || t[r] == '/')) r++;
            return r - pos;
        }
    }
    return space_tail(t, end, pos);
}

size_t es__pm_tekken(const uint8_t *t, size_t end, size_t pos) { return tekken_next(t, end, pos, false, 1); }
size_t es__pm_gpt4o(const uint8_t *t, size_t end, size_t pos) { return tekken_next(t, end, pos, true, 3); }
