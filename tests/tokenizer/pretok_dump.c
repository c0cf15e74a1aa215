/* pretok_dump.c: helper for pretok_ref.py. "classes" writes the pre-tokenizer class of every code
 * point U+0000..U+10FFFF as one byte ('0'..'3'), "categories" its es__ugc category ('0'..':'); any
 * tokenizer.ggml.pre name (gpt-2, qwen2, deepseek-llm, ...) reads lines of hex-encoded text from
 * stdin and writes, per line, the byte lengths of the words that name's split gives. */
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
        fprintf(stderr, "usage: pretok_dump classes|categories|PRE-NAME\n");
        return 2;
    }
    if (strcmp(argv[1], "classes") == 0) {
        for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) putchar('0' + (int)es__unicode_class(cp));
        return 0;
    }
    if (strcmp(argv[1], "categories") == 0) {
        for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) putchar('0' + (int)es__unicode_gc(cp));
        return 0;
    }
    es__pretok_info info;
    if (!es__pretok_lookup(argv[1], strlen(argv[1]), &info)) {
        fprintf(stderr, "pretok_dump: no split named '%s'\n", argv[1]);
        return 2;
    }
    static char line[1 << 20];
    static uint8_t text[1 << 19];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = 0;
        for (size_t i = 0; hexval(line[i]) >= 0 && hexval(line[i + 1]) >= 0; i += 2)
            text[n++] = (uint8_t)(hexval(line[i]) * 16 + hexval(line[i + 1]));
        es__pretok_iter it;
        es__pretok_begin(&it, info.kind, text, n);
        size_t w, words = 0;
        while ((w = es__pretok_next(&it)) > 0) printf(words++ ? " %zu" : "%zu", w);
        putchar('\n');
    }
    return 0;
}
