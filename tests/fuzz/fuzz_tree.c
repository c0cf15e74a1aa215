/* fuzz_tree.c: fuzz target for token-tree validation: es_tree_flatten on arbitrary parent links,
 * and es_forward's batch validation (positions, DFS intervals, token ids, logits flags, sizes
 * against n_batch and n_ctx) on arbitrary batches, on one context of the tiny model of
 * fuzz_model.h that lives across inputs (so n_past and the provisional batch carry over).
 * Invariants, each an abort when broken:
 *   - es_tree_flatten either fails with ES_ERR_INVALID_TREE and leaves every output untouched, or
 *     gives a permutation in DFS pre-order whose positions are n_past + depth and whose intervals
 *     hold exactly each node's subtree (checked against the parent links); that layout is then a
 *     valid batch: es_forward must take it when it fits n_batch and n_ctx;
 *   - es_forward on a raw batch either succeeds (every flagged token has logits, an unflagged one
 *     none, and the root path commits) or fails with a validation status (invalid argument,
 *     invalid tree, context full) and leaves the context as it was: n_past, and the last good
 *     call's logits still readable.
 * Input: byte 0 picks the mode and flags, the rest are the values (a short input means zeros).
 * Seeds: corpus/tree. Built with libFuzzer (-Dfuzzer=true) and with driver.c (suite 'fuzz'). */
#include "edgespec.h"
#include "forward_api.h"
#include "fuzz_model.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_CTX 40
#define N_BATCH 16
#define MAX_N 24 /* past n_batch on purpose */

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_tree: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t u8(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

/* Small values with the edges fuzzers like: -2..n+1 mostly, sometimes anything. */
static int32_t small(reader *r, int32_t n) {
    const uint8_t b = u8(r);
    if (b == 0xff) return (int32_t)((uint32_t)u8(r) << 24 | (uint32_t)u8(r) << 16 | (uint32_t)u8(r) << 8 | u8(r));
    return (int32_t)(b % (uint32_t)(n + 4)) - 2;
}

/* a + b wrapping, as the values are meant to (a fuzzed value may be anything) */
static int32_t add(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a + (uint32_t)b);
}

static es_context *ctx;
static int32_t last_flagged = -1; /* a batch token of the last good call that has logits */

static es_context *context(void) {
    if (ctx) return ctx;
    es_context_params cp = es_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = N_BATCH;
    cp.backend = fuzz_backend();
    if (es_context_create(fuzz_model(), &cp, &ctx) != ES_OK) fail("context", es_last_error());
    return ctx;
}

/* After a good forward of b: logits exactly where flagged; commit the first token (a root), or
 * make room. */
static void after_good(const es_batch *b) {
    int32_t flagged = -1;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        const bool want = b->logits ? b->logits[i] != 0 : i == b->n_tokens - 1;
        const float *l = NULL;
        const es_status s = es_logits(ctx, i, &l);
        if ((s == ES_OK) != want) fail("logits where none were asked, or none where asked", es_context_errmsg(ctx));
        if (want) flagged = i;
    }
    last_flagged = flagged;
    if (es_context_n_past(ctx) + 1 + N_BATCH > N_CTX) {
        if (es_truncate(ctx, 0) != ES_OK) fail("truncate", es_context_errmsg(ctx));
        last_flagged = -1;
        return;
    }
    const int32_t keep[1] = {0};
    if (flagged < 0 || b->n_tokens % 3 == 0) { /* keep the provisional batch sometimes */
        if (es_commit(ctx, keep, 1) != ES_OK) fail("committing the root", es_context_errmsg(ctx));
        last_flagged = -1;
    }
}

static void after_bad(es_status s, int32_t n_past) {
    if (s != ES_ERR_INVALID_ARGUMENT && s != ES_ERR_INVALID_TREE && s != ES_ERR_CONTEXT_FULL)
        fail("a batch failed with a status that is not a validation failure", es_context_errmsg(ctx));
    if (es_context_n_past(ctx) != n_past) fail("a failed forward changed n_past", NULL);
    const float *l = NULL;
    if (last_flagged >= 0 && es_logits(ctx, last_flagged, &l) != ES_OK)
        fail("a failed forward lost the last call's logits", es_context_errmsg(ctx));
    if (!es_context_errmsg(ctx)[0]) fail("a failed forward left no message", NULL);
}

static void fuzz_flatten(reader *r, uint8_t flags) {
    const int32_t n = flags & 0x40 ? small(r, MAX_N) : 1 + (int32_t)(u8(r) % MAX_N);
    const int32_t n_past = flags & 0x20 ? es_context_n_past(ctx) : small(r, 8);
    int32_t parent[MAX_N], order[MAX_N], pos[MAX_N], ds[MAX_N], de[MAX_N], toks[MAX_N];
    const int32_t cap = n > 0 && n <= MAX_N ? n : 0;
    for (int32_t i = 0; i < cap; i++) parent[i] = flags & 0x10 ? small(r, cap) : (i ? (int32_t)(u8(r) % (uint32_t)i) : -1);
    for (int32_t i = 0; i < MAX_N; i++) order[i] = pos[i] = ds[i] = de[i] = 0x5a5a5a5a;
    if (n < 1 || n > MAX_N) {
        if (n < 1 && es_tree_flatten(parent, n, n_past, order, pos, ds, de) == ES_OK) fail("n < 1 was accepted", NULL);
        return;
    }
    const es_status s = es_tree_flatten(parent, n, n_past, order, pos, ds, de);
    if (s != ES_OK) {
        const bool bad_past = n_past < 0 || (int64_t)n_past + n > INT32_MAX;
        if (s != (bad_past ? ES_ERR_INVALID_ARGUMENT : ES_ERR_INVALID_TREE))
            fail("es_tree_flatten: not the documented status", es_last_error());
        for (int32_t i = 0; i < MAX_N; i++)
            if (order[i] != 0x5a5a5a5a || pos[i] != 0x5a5a5a5a || ds[i] != 0x5a5a5a5a || de[i] != 0x5a5a5a5a)
                fail("a failed es_tree_flatten wrote its outputs", NULL);
        return;
    }
    /* a permutation in pre-order: row of each node, parents before children */
    int32_t row[MAX_N];
    for (int32_t i = 0; i < n; i++) row[i] = -1;
    for (int32_t k = 0; k < n; k++) {
        if (order[k] < 0 || order[k] >= n || row[order[k]] >= 0) fail("order is not a permutation", NULL);
        row[order[k]] = k;
    }
    for (int32_t k = 0; k < n; k++) {
        const int32_t v = order[k], p = parent[v];
        if (p < -1 || p >= n) fail("a tree with a parent outside [-1, n) was accepted", NULL);
        if (ds[k] != k || de[k] < k || de[k] >= n) fail("a DFS interval out of place", NULL);
        int32_t depth = 0;
        for (int32_t a = p; a >= 0; a = parent[a]) {
            if (++depth > n) fail("a cycle was accepted", NULL);
            if (row[a] >= k) fail("a parent after its child", NULL);
        }
        if (pos[k] != n_past + depth) fail("a position is not n_past + depth", NULL);
        /* node j is inside k's interval exactly when k's node is j's ancestor or j itself */
        for (int32_t j = 0; j < n; j++) {
            bool anc = false;
            for (int32_t a = order[j]; a >= 0 && !anc; a = parent[a]) anc = a == v;
            if (anc != (j >= k && j <= de[k])) fail("an interval does not hold exactly the subtree", NULL);
        }
    }
    /* the layout is a batch: it must run when it fits */
    context();
    const int32_t past = es_context_n_past(ctx);
    if (n_past != past || n > N_BATCH || past + n > N_CTX) return;
    for (int32_t k = 0; k < n; k++) toks[k] = (int32_t)((uint32_t)order[k] * 37u % 260u);
    uint8_t want[MAX_N];
    for (int32_t k = 0; k < n; k++) want[k] = (uint8_t)(k == 0 || (k * 7 + n) % 3 == 0);
    const es_batch b = {n, toks, pos, ds, de, want};
    /* a forest too: every root sits at n_past, and es_forward takes several */
    if (es_forward(ctx, &b) != ES_OK) fail("a flattened tree that fits was refused", es_context_errmsg(ctx));
    after_good(&b);
}

static void fuzz_batch(reader *r, uint8_t flags) {
    context();
    const int32_t past = es_context_n_past(ctx);
    const int32_t n = flags & 0x40 ? small(r, MAX_N) : 1 + (int32_t)(u8(r) % MAX_N);
    const int32_t cap = n > 0 && n <= MAX_N ? n : MAX_N;
    int32_t toks[MAX_N], pos[MAX_N], ds[MAX_N], de[MAX_N];
    uint8_t want[MAX_N];
    for (int32_t i = 0; i < cap; i++) {
        toks[i] = flags & 0x10 ? add(small(r, 300), -20) : (int32_t)(u8(r) % 200u);
        /* mostly a plausible tree (pre-order, positions from the depth) with edits */
        pos[i] = add(past, small(r, 4));
        ds[i] = add(i, u8(r) % 8 == 0 ? small(r, 2) : 0);
        de[i] = add(i, small(r, cap - i));
        want[i] = u8(r) & 1;
    }
    const es_batch b = {n, toks, flags & 0x08 ? NULL : pos, flags & 0x04 ? NULL : ds, flags & 0x02 ? NULL : de,
                        flags & 0x01 ? NULL : want};
    const es_status s = es_forward(ctx, &b);
    if (s == ES_OK) after_good(&b);
    else after_bad(s, past);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    const uint8_t mode = u8(&r);
    context();
    if (mode & 0x80) fuzz_batch(&r, mode);
    else fuzz_flatten(&r, mode);
    return 0;
}
