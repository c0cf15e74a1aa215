/* test_file.h: a whole file in memory, for the tests, tools and fuzz drivers that read fixtures
 * (GGUF files, vocabularies, corpus inputs). Plain stdio, no library code: what it reads is what
 * the library under test is then given. */
#ifndef ES_TEST_FILE_H
#define ES_TEST_FILE_H

#include <stdio.h>
#include <stdlib.h>

/* The bytes of path in a malloc'd buffer with a NUL after them (so text can be read as a
 * string), their count in *size; NULL when the file cannot be opened or read whole, or holds
 * more than max bytes (0 = no limit). */
static inline void *test_read_file(const char *path, size_t max, size_t *size) {
    *size = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    long n = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    char *buf = n >= 0 && (max == 0 || (size_t)n <= max) && fseek(fp, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) {
        buf[n] = 0;
        *size = (size_t)n;
    }
    return buf;
}

#endif
