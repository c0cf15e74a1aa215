/* driver.c: runs a libFuzzer-style target (LLVMFuzzerTestOneInput) without libFuzzer, as a
 * deterministic meson test: every file of the seed directories, then N mutations of them
 * (structure-aware for GGUF-like inputs: 32/64-bit fields overwritten with boundary values,
 * bit flips, truncation, chunk duplication and deletion), all from a fixed RNG seed so a failure
 * reproduces. usage: driver [-n MUTATIONS] [-s SEED] [-o DIR_FOR_FAILING_INPUT] DIR|FILE...
 * A crash is the failure signal (sanitizer builds report it); the last input is written to -o
 * first so it can be replayed. */
#define _DEFAULT_SOURCE
#include "../common/test_file.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seed {
    uint8_t *data;
    size_t size;
} seed;

static seed *seeds;
static size_t n_seeds, cap_seeds;

static void add_file(const char *path) {
    size_t n = 0;
    uint8_t *p = test_read_file(path, (size_t)16 << 20, &n);
    if (!p) return;
    if (n_seeds == cap_seeds) {
        cap_seeds = cap_seeds ? 2 * cap_seeds : 16;
        seeds = realloc(seeds, cap_seeds * sizeof *seeds);
    }
    seeds[n_seeds++] = (seed){p, n};
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "driver: cannot stat %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        add_file(path);
        return;
    }
    DIR *d = opendir(path);
    struct dirent *e;
    char *names[4096];
    size_t n = 0;
    while (d && (e = readdir(d)) && n < 4096)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    if (d) closedir(d);
    qsort(names, n, sizeof *names, cmp_str); /* directory order is not stable; the test must be */
    for (size_t i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        add_file(full);
        free(names[i]);
    }
}

static uint64_t rng_state;
static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One mutation of buf[0..*n) (capacity cap) in place. */
static void mutate(uint8_t *buf, size_t *n, size_t cap) {
    static const uint64_t interesting[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 31, 32, 33, 63, 64, 255, 256,
                                           0x7fff, 0xffff, 0x10000, 0x7fffffff, 0x80000000u, 0xffffffffu,
                                           0x100000000ull, 0x7fffffffffffffffull, 0x8000000000000000ull,
                                           0xffffffffffffffffull, 0xfffffffffffffff0ull};
    size_t len = *n;
    uint64_t r = rnd();
    switch (r % 8) {
    case 0: /* flip a bit */
        if (len) buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
        break;
    case 1: /* a 64-bit field to a boundary value (or near the input size) */
    case 2:
        if (len >= 8) {
            size_t at = (size_t)(rnd() % (len - 7));
            if (rnd() % 2) at &= ~(size_t)3;
            uint64_t v = rnd() % 4 ? interesting[rnd() % (sizeof interesting / sizeof *interesting)]
                                   : (uint64_t)len - rnd() % 64;
            for (int i = 0; i < 8; i++) buf[at + i] = (uint8_t)(v >> (8 * i));
        }
        break;
    case 3: /* a 32-bit field (types, n_dims, version) to a small or boundary value */
        if (len >= 4) {
            size_t at = (size_t)(rnd() % (len - 3)) & ~(size_t)3;
            uint32_t v = rnd() % 2 ? (uint32_t)(rnd() % 40) : (uint32_t)interesting[rnd() % 25];
            for (int i = 0; i < 4; i++) buf[at + i] = (uint8_t)(v >> (8 * i));
        }
        break;
    case 4: /* truncate */
        if (len) *n = (size_t)(rnd() % len);
        break;
    case 5: /* random byte */
        if (len) buf[rnd() % len] = (uint8_t)rnd();
        break;
    case 6: /* duplicate a chunk elsewhere (grows the input) */
        if (len > 1) {
            size_t from = (size_t)(rnd() % len), k = 1 + (size_t)(rnd() % 64), to = (size_t)(rnd() % len);
            if (from + k > len) k = len - from;
            if (len + k <= cap) {
                memmove(buf + to + k, buf + to, len - to);
                memmove(buf + to, buf + (from >= to ? from + k : from), k);
                *n = len + k;
            }
        }
        break;
    default: /* delete a chunk */
        if (len > 1) {
            size_t at = (size_t)(rnd() % len), k = 1 + (size_t)(rnd() % 32);
            if (at + k > len) k = len - at;
            memmove(buf + at, buf + at + k, len - at - k);
            *n = len - k;
        }
        break;
    }
}

static const char *out_dir;
static void save_current(const uint8_t *p, size_t n) {
    if (!out_dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/last-input", out_dir);
    FILE *fp = fopen(path, "wb");
    if (fp) {
        fwrite(p, 1, n, fp);
        fclose(fp);
    }
}

int main(int argc, char **argv) {
    long n_mut = 3000;
    uint64_t seed_value = 1;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i += 2) {
        if (i + 1 >= argc) break;
        if (!strcmp(argv[i], "-n")) n_mut = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-s")) seed_value = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "-o")) out_dir = argv[i + 1];
    }
    for (; i < argc; i++) add_path(argv[i]);
    if (n_seeds == 0) {
        fprintf(stderr, "driver: no seed inputs\n");
        return 2;
    }
    for (size_t s = 0; s < n_seeds; s++) {
        save_current(seeds[s].data, seeds[s].size);
        LLVMFuzzerTestOneInput(seeds[s].data, seeds[s].size);
    }
    rng_state = seed_value;
    size_t max = 0;
    for (size_t s = 0; s < n_seeds; s++) max = seeds[s].size > max ? seeds[s].size : max;
    size_t cap = max + 4096;
    uint8_t *buf = malloc(cap);
    for (long m = 0; m < n_mut; m++) {
        const seed *sd = &seeds[(size_t)m % n_seeds];
        size_t n = sd->size;
        memcpy(buf, sd->data, n);
        int k = 1 + (int)(rnd() % 4);
        for (int j = 0; j < k; j++) mutate(buf, &n, cap);
        /* a copy of exactly n bytes, so reads past the end hit the sanitizer's redzone */
        uint8_t *exact = malloc(n ? n : 1);
        memcpy(exact, buf, n);
        save_current(exact, n);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
    }
    free(buf);
    for (size_t s = 0; s < n_seeds; s++) free(seeds[s].data);
    free(seeds);
    printf("%zu seeds, %ld mutations: no crash\n", n_seeds, n_mut);
    return 0;
}
