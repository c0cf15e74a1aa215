/* pretok_dump.c: helper for pretok_ref.py. "classes" writes the pre-tokenizer class of every code
 * point U+0000..U+10FFFF as one byte ('0'..'3'); "gpt2" and "llama3" read lines of hex-encoded
 * text from stdin and write, per line, the byte lengths of the words the split gives. */
#include "tokenizer_impl.h"
#include "unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: pretok_dump classes|gpt2|llama3\n");
        return 2;
    }
    if (strcmp(argv[1], "classes") == 0) {
        for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) putchar('0' + (int)es__unicode_class(cp));
        return 0;
    }
    es__pretok kind = strcmp(argv[1], "gpt2") == 0 ? ES__PRETOK_GPT2 : ES__PRETOK_LLAMA3;
    static char line[1 << 20];
    static uint8_t text[1 << 19];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = 0;
        for (size_t i = 0; hexval(line[i]) >= 0 && hexval(line[i + 1]) >= 0; i += 2)
            text[n++] = (uint8_t)(hexval(line[i]) * 16 + hexval(line[i + 1]));
        for (size_t pos = 0; pos < n;) {
            size_t w = es__pretok_next(kind, text, n, pos);
            printf(pos ? " %zu" : "%zu", w);
            if (w == 0) break;
            pos += w;
        }
        putchar('\n');
    }
    return 0;
}
