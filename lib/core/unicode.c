/* unicode.c: class lookup by binary search over the generated ranges, UTF-8 encoding and
 * validation. Decoding is inline in unicode.h because the pre-tokenizers call it per character. */
#include "unicode.h"

/* The value of the last range of r[0..n) whose first code point (entry >> shift) is <= cp. */
static uint32_t range_lookup(const uint32_t *r, uint32_t n, unsigned shift, uint32_t cp) {
    uint32_t lo = 0, hi = n; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if ((r[mid] >> shift) <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return r[lo] & ((1u << shift) - 1);
}

es__ucls es__unicode_class_slow(uint32_t cp) {
    if (cp > 0x10FFFF) return ES__UCLS_OTHER; /* undecodable bytes */
    return (es__ucls)range_lookup(es__unicode_ranges, es__unicode_n_ranges, 2, cp);
}

es__ugc es__unicode_gc_slow(uint32_t cp) {
    if (cp > 0x10FFFF) return ES__UGC_OTHER;
    return (es__ugc)range_lookup(es__unicode_gc_ranges, es__unicode_gc_n_ranges, 4, cp);
}

size_t es__utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

bool es__utf8_valid(const uint8_t *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = es__utf8_decode(s + i, n - i, &cp);
        if (cp >= ES__UTF8_BAD) {
            if (bad) *bad = i;
            return false;
        }
        i += len;
    }
    return true;
}
