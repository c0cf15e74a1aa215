/* test_tree.c: token trees: layout of parent links (random forests up to 4096 nodes, chains, single
 * nodes, every rejection), best-first draft-tree construction against a brute-force selection, and
 * that every layout passes the core's batch validation. */
#include "batch.h"
#include "tree.h"

#include "../test.h"

#include <math.h>

#define NMAX 4096

static int32_t parent[NMAX], order[NMAX], pos[NMAX], st[NMAX], en[NMAX], dep[NMAX];

/* naive: is a an ancestor-or-self of b in parent links */
static bool is_anc(const int32_t *par, int32_t a, int32_t b) {
    for (int32_t v = b; v >= 0; v = par[v])
        if (v == a) return true;
    return false;
}

static int32_t naive_depth(const int32_t *par, int32_t v) {
    int32_t d = 0;
    while (par[v] >= 0) v = par[v], d++;
    return d;
}

/* Checks a layout of par[n] against the naive relation: a permutation, pre-order intervals that
 * encode ancestry exactly, positions n_past + depth, siblings in index order; and batch.c agrees. */
static void check_layout(const int32_t *par, int32_t n, int32_t n_past, test_rng *rng) {
    int32_t *row_of = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) row_of[i] = -1;
    int bad = 0;
    for (int32_t r = 0; r < n; r++) {
        if (order[r] < 0 || order[r] >= n || row_of[order[r]] != -1) bad++;
        else row_of[order[r]] = r;
    }
    CHECKF(bad == 0, "order is not a permutation (%d bad rows)", bad);
    if (bad) {
        free(row_of);
        return;
    }
    for (int32_t r = 0; r < n; r++) {
        int32_t v = order[r];
        if (st[r] != r || en[r] < r || en[r] >= n) bad++;
        if (pos[r] != n_past + naive_depth(par, v) || dep[r] != naive_depth(par, v)) bad++;
        /* a parent's row precedes its child's, and the child lies in the parent's interval */
        if (par[v] >= 0 && !(row_of[par[v]] < r && en[row_of[par[v]]] >= en[r])) bad++;
    }
    CHECKF(bad == 0, "intervals/positions wrong in %d rows (n = %d)", bad, n);
    /* ancestry from the interval test equals the naive relation: all pairs when small, else a sample */
    int64_t pairs = (int64_t)n * n, checks = pairs <= 100000 ? pairs : 20000;
    bad = 0;
    for (int64_t c = 0; c < checks; c++) {
        int32_t i, j;
        if (pairs <= 100000) i = (int32_t)(c / n), j = (int32_t)(c % n);
        else i = (int32_t)(test_rng_u64(rng) % (unsigned)n), j = (int32_t)(test_rng_u64(rng) % (unsigned)n);
        bool by_interval = st[i] <= st[j] && en[j] <= en[i];
        if (by_interval != is_anc(par, order[i], order[j])) bad++;
    }
    CHECKF(bad == 0, "interval ancestry disagrees with parent links in %d pairs (n = %d)", bad, n);
    /* siblings keep their index order */
    bad = 0;
    for (int32_t r = 1; r < n; r++) {
        int32_t v = order[r];
        for (int32_t q = r + 1; q < n && q <= r + 8; q++)
            if (par[order[q]] == par[v] && order[q] < v) bad++;
    }
    CHECKF(bad == 0, "siblings out of index order (%d)", bad);
    /* the core accepts the layout as a batch */
    int32_t *toks = calloc((size_t)n, sizeof(int32_t)), *s5 = malloc(sizeof(int32_t) * 5 * (size_t)n);
    es__batch_scratch s = {s5, s5 + n, s5 + 2 * n, s5 + 3 * n, s5 + 4 * n, n};
    es_batch b = {n, toks, pos, st, en, NULL};
    es__err err;
    int32_t n_out = 0;
    CHECK_OK(es__batch_validate(&b, n_past, n_past + n, n, 10, &s, &n_out, &err));
    bad = 0;
    for (int32_t r = 0; r < n; r++) {
        int32_t p = par[order[r]];
        if (s.parent[r] != (p < 0 ? -1 : row_of[p])) bad++;
    }
    CHECKF(bad == 0, "batch validation derives other parents in %d rows", bad);
    free(toks);
    free(s5);
    free(row_of);
}

static es_status flat(const int32_t *par, int32_t n, int32_t n_past) {
    return es__tree_flatten(par, n, n_past, order, pos, st, en, dep, NULL, NULL);
}

static void test_layouts(void) {
    test_rng rng = {42};
    /* the tree of test_batch given out of order: 5 -> {2 -> {0}, 4 -> {1, 3}} */
    int32_t p6[6] = {2, 4, 5, 4, 5, -1};
    CHECK_OK(flat(p6, 6, 7));
    int32_t want_order[6] = {5, 2, 0, 4, 1, 3}, want_end[6] = {5, 2, 2, 5, 4, 5}, want_pos[6] = {7, 8, 9, 8, 9, 9};
    for (int i = 0; i < 6; i++)
        CHECKF(order[i] == want_order[i] && en[i] == want_end[i] && pos[i] == want_pos[i],
               "row %d: node %d end %d pos %d", i, order[i], en[i], pos[i]);
    check_layout(p6, 6, 7, &rng);
    /* the public entry point gives the same rows */
    int32_t o2[6], p2[6], s2[6], e2[6];
    CHECK_OK(es_tree_flatten(p6, 6, 7, o2, p2, s2, e2));
    CHECK(memcmp(o2, order, sizeof o2) == 0 && memcmp(e2, en, sizeof e2) == 0);

    /* single node, chains in both label orders, a star */
    parent[0] = -1;
    CHECK_OK(flat(parent, 1, 0));
    CHECK(order[0] == 0 && en[0] == 0 && pos[0] == 0);
    for (int32_t n = 1; n <= NMAX; n *= 4) {
        for (int32_t i = 0; i < n; i++) parent[i] = i - 1;
        CHECK_OK(flat(parent, n, 3));
        check_layout(parent, n, 3, &rng);
        for (int32_t i = 0; i < n; i++) parent[i] = i == n - 1 ? -1 : i + 1; /* root last */
        CHECK_OK(flat(parent, n, 0));
        check_layout(parent, n, 0, &rng);
        for (int32_t i = 0; i < n; i++) parent[i] = i == 0 ? -1 : 0;
        CHECK_OK(flat(parent, n, 1));
        check_layout(parent, n, 1, &rng);
    }
    /* random trees and forests of odd sizes, labels shuffled */
    const int32_t sizes[] = {2, 3, 7, 17, 31, 64, 100, 257, 1000, 1023, 2049, 4095, 4096};
    for (size_t si = 0; si < ES__ARRAY_LEN(sizes); si++) {
        int32_t n = sizes[si];
        for (int rep = 0; rep < 2; rep++) {
            int32_t *perm = malloc(sizeof(int32_t) * (size_t)n), *inv = malloc(sizeof(int32_t) * (size_t)n);
            int32_t *raw = malloc(sizeof(int32_t) * (size_t)n);
            for (int32_t i = 0; i < n; i++) perm[i] = i;
            for (int32_t i = n - 1; i > 0; i--) {
                int32_t j = (int32_t)(test_rng_u64(&rng) % (unsigned)(i + 1)), tmp = perm[i];
                perm[i] = perm[j];
                perm[j] = tmp;
            }
            for (int32_t i = 0; i < n; i++) inv[perm[i]] = i;
            /* raw: node i's parent among 0..i-1 (deep when the window is small), some extra roots */
            int32_t window = rep == 0 ? 3 : n;
            for (int32_t i = 0; i < n; i++) {
                bool root = i == 0 || (rep == 1 && test_rng_u64(&rng) % 50 == 0);
                int32_t lo = i - window < 0 ? 0 : i - window;
                raw[i] = root ? -1 : lo + (int32_t)(test_rng_u64(&rng) % (unsigned)(i - lo));
            }
            for (int32_t i = 0; i < n; i++) parent[perm[i]] = raw[i] < 0 ? -1 : perm[raw[i]];
            CHECK_OK(flat(parent, n, 5));
            check_layout(parent, n, 5, &rng);
            free(perm);
            free(inv);
            free(raw);
        }
    }
}

static void test_rejections(void) {
    for (int i = 0; i < 8; i++) order[i] = pos[i] = st[i] = en[i] = 777;
    int32_t out_of_range[4] = {-1, 0, 4, 1};
    CHECK_FAILS(flat(out_of_range, 4, 0), ES_ERR_INVALID_TREE, "node 2 has parent 4, outside [-1, 4)");
    int32_t below[3] = {-1, -2, 0};
    CHECK_FAILS(flat(below, 3, 0), ES_ERR_INVALID_TREE, "node 1 has parent -2");
    int32_t self[3] = {-1, 1, 0};
    CHECK_FAILS(flat(self, 3, 0), ES_ERR_INVALID_TREE, "node 1 is its own parent");
    int32_t two_cycle[4] = {-1, 2, 1, 0};
    CHECK_FAILS(flat(two_cycle, 4, 0), ES_ERR_INVALID_TREE, "cycle");
    int32_t long_cycle[6] = {-1, 0, 5, 2, 3, 4}; /* 2 -> 5 -> 4 -> 3 -> 2 */
    CHECK_FAILS(flat(long_cycle, 6, 0), ES_ERR_INVALID_TREE, "its own ancestor");
    int32_t all_cycle[3] = {1, 2, 0}; /* no root at all */
    CHECK_FAILS(flat(all_cycle, 3, 0), ES_ERR_INVALID_TREE, "cycle");
    CHECK_FAILS(flat(below, 0, 0), ES_ERR_INVALID_TREE, "0 nodes");
    CHECK_FAILS(es_tree_flatten(NULL, 3, 0, order, pos, st, en), ES_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(flat(self, 3, -1), ES_ERR_INVALID_ARGUMENT, "n_past -1");
    bool untouched = true;
    for (int i = 0; i < 8; i++) untouched = untouched && order[i] == 777 && pos[i] == 777 && st[i] == 777 && en[i] == 777;
    CHECK(untouched);
}

/* ---- draft trees */

typedef struct bnode {
    float logp;
    int32_t depth, parent, tok;
} bnode;

/* Every node of the full level tree, in BFS order. */
static int32_t full_tree(const es__levels *lv, int32_t root, bnode *out) {
    int32_t n = 1, lo = 0;
    out[0] = (bnode){0.0f, 0, -1, root};
    for (int32_t g = 0; g < lv->n_levels; g++) {
        int32_t hi = n;
        for (int32_t p = lo; p < hi; p++)
            for (int32_t r = 0; r < lv->k[g]; r++)
                out[n++] = (bnode){out[p].logp + lv->logp[g][r], g + 1, p, lv->tokens[g][r]};
        lo = hi;
    }
    return n;
}

static void test_build(void) {
    es__tree t;
    es__err err;
    CHECK_OK(es__tree_init(&t, 512, NULL, &err));
    test_rng rng = {7};
    int32_t toks[4][5];
    float lps[4][5];
    es__levels lv;
    memset(&lv, 0, sizeof lv);
    lv.n_levels = 3;
    for (int g = 0; g < 4; g++) {
        lv.k[g] = g == 0 ? 3 : 2;
        lv.tokens[g] = toks[g];
        lv.logp[g] = lps[g];
        for (int r = 0; r < 5; r++) {
            toks[g][r] = 100 * (g + 1) + r;
            lps[g][r] = -0.5f * (float)r - 0.1f * (float)g;
        }
    }
    /* full tree 1 + 3 + 6 + 12 = 22 nodes, siblings by rank, level g's tokens at depth g + 1 */
    CHECK(es__levels_full_size(&lv) == 22);
    CHECK_OK(es__tree_build(&t, 9, &lv, 64, 10, NULL, &err));
    CHECK(t.n == 22 && t.max_depth == 3 && t.token[0] == 9 && t.parent[0] == -1 && t.pos[0] == 10);
    int bad = 0;
    for (int32_t i = 1; i < t.n; i++) {
        int32_t d = t.depth[i];
        if (t.token[i] != toks[d - 1][t.rank[i]] || t.pos[i] != 10 + d || t.depth[t.parent[i]] != d - 1) bad++;
        if (fabsf(t.logp[i] - (t.logp[t.parent[i]] + lps[d - 1][t.rank[i]])) > 1e-6f) bad++;
        if (t.dfs_start[i] != i || t.dfs_end[i] > t.dfs_end[t.parent[i]]) bad++;
    }
    CHECKF(bad == 0, "%d bad nodes in the full tree", bad);
    /* pre-order with siblings by rank: the first path is all rank 0 */
    CHECK(t.rank[1] == 0 && t.rank[2] == 0 && t.rank[3] == 0 && t.depth[3] == 3);
    /* child lookup and paths */
    CHECK(es__tree_child(&t, 0, 101) >= 0 && t.token[es__tree_child(&t, 0, 101)] == 101);
    CHECK(es__tree_child(&t, 0, 200) == -1);
    int32_t path[8];
    int32_t leaf = t.n - 1, len = es__tree_path(&t, leaf, path);
    CHECK(len == t.depth[leaf] + 1 && path[0] == 0 && path[len - 1] == leaf);
    for (int32_t i = 1; i < len; i++) CHECK(t.parent[path[i]] == path[i - 1]);
    /* k = 0 levels and zero levels give the root alone */
    es__levels none;
    memset(&none, 0, sizeof none);
    CHECK_OK(es__tree_build(&t, 5, &none, 64, 0, NULL, &err));
    CHECK(t.n == 1 && t.token[0] == 5);

    /* capped builds select exactly the most probable nodes (distinct random log-probs) */
    static bnode full[1 + 4 + 16 + 64 + 256];
    for (int trial = 0; trial < 200; trial++) {
        lv.n_levels = 1 + (int)(test_rng_u64(&rng) % 4);
        for (int g = 0; g < lv.n_levels; g++) {
            lv.k[g] = 1 + (int)(test_rng_u64(&rng) % 4);
            for (int r = 0; r < lv.k[g]; r++) lps[g][r] = -4.0f * (test_rng_uniform(&rng) + 1.0f);
        }
        int32_t nf = full_tree(&lv, 1, full);
        int32_t cap = 1 + (int32_t)(test_rng_u64(&rng) % (unsigned)nf);
        CHECK_OK(es__tree_build(&t, 1, &lv, cap, 0, NULL, &err));
        /* the cap-th largest path log-prob among all nodes is the threshold */
        float *v = malloc(sizeof(float) * (size_t)nf);
        for (int32_t i = 0; i < nf; i++) v[i] = full[i].logp;
        for (int32_t i = 1; i < nf; i++)
            for (int32_t j = i; j > 0 && v[j] > v[j - 1]; j--) {
                float x = v[j];
                v[j] = v[j - 1];
                v[j - 1] = x;
            }
        float thresh = v[cap - 1];
        free(v);
        int32_t above = 0;
        bad = 0;
        for (int32_t i = 0; i < t.n; i++) {
            if (t.logp[i] < thresh) bad++;
            if (i > 0 && t.logp[i] > t.logp[t.parent[i]]) bad++;
        }
        for (int32_t i = 0; i < nf; i++) above += full[i].logp >= thresh;
        CHECKF(t.n == cap && bad == 0 && above == cap, "trial %d: n %d cap %d bad %d above %d", trial, t.n, cap,
               bad, above);
    }
    /* a tree as deep as the levels allow: chains (k = 1) */
    lv.n_levels = ES_SPEC_MAX_DEPTH;
    int32_t ct[ES_SPEC_MAX_DEPTH];
    float cl[ES_SPEC_MAX_DEPTH];
    for (int g = 0; g < ES_SPEC_MAX_DEPTH; g++) {
        lv.k[g] = 1;
        ct[g] = g;
        cl[g] = -1.0f;
        lv.tokens[g] = &ct[g];
        lv.logp[g] = &cl[g];
    }
    CHECK_OK(es__tree_build(&t, 3, &lv, 100, 2, NULL, &err));
    CHECK(t.n == ES_SPEC_MAX_DEPTH + 1 && t.max_depth == ES_SPEC_MAX_DEPTH);
    for (int32_t i = 1; i < t.n; i++) CHECK(t.parent[i] == i - 1 && t.token[i] == i - 1 && t.dfs_end[i] == t.n - 1);
    /* NaN log-probs rank last, never crash */
    cl[0] = NAN;
    CHECK_OK(es__tree_build(&t, 3, &lv, 5, 0, NULL, &err));
    CHECK(t.n == 5);
    /* bad input */
    lv.n_levels = ES_SPEC_MAX_DEPTH + 1;
    CHECK_FAILS(es__tree_build(&t, 3, &lv, 5, 0, NULL, &err), ES_ERR_INVALID_ARGUMENT, "levels");
    lv.n_levels = 2;
    lv.tokens[1] = NULL;
    CHECK_FAILS(es__tree_build(&t, 3, &lv, 5, 0, NULL, &err), ES_ERR_INVALID_ARGUMENT, "level 1");
    lv.tokens[1] = &ct[1];
    CHECK_FAILS(es__tree_build(&t, 3, &lv, 0, 0, NULL, &err), ES_ERR_INVALID_ARGUMENT, "room for 0");
    es__tree_free(&t, NULL);
}

int main(void) {
    test_layouts();
    test_rejections();
    test_build();
    TEST_MAIN_END();
}
