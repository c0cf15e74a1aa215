/* tokenizer_pretok.c: the pre-tokenizer splits of byte-level BPE vocabularies, written as matchers
 * of the two regular expressions (no regex engine). Each matcher returns the length of the match
 * the expression's alternatives give at a position, taking the first alternative that matches, as
 * a backtracking regex engine does; every position matches some alternative, so the text is cut
 * into consecutive words.
 *   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * \s is the White_Space property. A byte that is not valid UTF-8 counts as one character of its
 * own, in none of \s, \p{L}, \p{N}. Nothing here knows about vocabularies. */
#include "tokenizer_impl.h"
#include "unicode.h"

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

static size_t llama3_next(const uint8_t *t, size_t len, size_t pos) {
    ch c0 = char_at(t, len, pos);
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c0.cp == '\'' && pos + 1 < len) {
        ch c1 = char_at(t, len, pos + 1);
        uint32_t a = fold(c1.cp);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1 + c1.n;
        if (pos + 1 + c1.n < len) {
            ch c2 = char_at(t, len, pos + 1 + c1.n);
            uint32_t b = fold(c2.cp);
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 1 + c1.n + c2.n;
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0.cls == ES__UCLS_LETTER) return run_end(t, len, pos, ES__UCLS_LETTER, SIZE_MAX) - pos;
    if (c0.cls != ES__UCLS_NUMBER && c0.cp != '\r' && c0.cp != '\n' && pos + c0.n < len) {
        ch c1 = char_at(t, len, pos + c0.n);
        if (c1.cls == ES__UCLS_LETTER) return run_end(t, len, pos + c0.n, ES__UCLS_LETTER, SIZE_MAX) - pos;
    }
    /* \p{N}{1,3} */
    if (c0.cls == ES__UCLS_NUMBER) return run_end(t, len, pos, ES__UCLS_NUMBER, 3) - pos;
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
    /* \s*[\r\n]+ takes the whitespace up to its last line break; else \s+(?!\S)|\s+ */
    size_t crlf, n = space_run(t, len, pos, &crlf);
    return crlf ? crlf - pos : n;
}

size_t es__pretok_next(es__pretok kind, const uint8_t *text, size_t len, size_t pos) {
    switch (kind) {
    case ES__PRETOK_GPT2: return gpt2_next(text, len, pos);
    case ES__PRETOK_LLAMA3: return llama3_next(text, len, pos);
    case ES__PRETOK_NONE: break;
    }
    return len - pos;
}
