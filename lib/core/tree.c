/* tree.c: token trees: best-first draft-tree construction from per-level candidates, DFS
 * pre-order layout with intervals (FlashSpecInfer 5.1) and positions, validation of parent links.
 * Deliberately not here: where candidates come from (lib/decode) and how the batch is checked
 * against a context (batch.c, which re-validates whatever this produces). */
#include "tree.h"

#include <math.h>
#include <string.h>

es_status es__tree_init(es__tree *t, int32_t cap, const es_allocator *a, es__err *err) {
    memset(t, 0, sizeof *t);
    ES_RETURN_IF(cap < 1, err, ES_ERR_INVALID_ARGUMENT, "token tree: capacity %d < 1", cap);
    int32_t *ints = es__calloc(a, (size_t)cap * 8, sizeof(int32_t));
    float *f = es__calloc(a, (size_t)cap, sizeof(float));
    if (!ints || !f) {
        es__free(a, ints);
        es__free(a, f);
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "token tree: out of memory for %d nodes", cap);
    }
    t->cap = cap;
    t->token = ints;
    t->parent = ints + cap;
    t->depth = ints + 2 * (size_t)cap;
    t->dfs_start = ints + 3 * (size_t)cap;
    t->dfs_end = ints + 4 * (size_t)cap;
    t->pos = ints + 5 * (size_t)cap;
    t->rank = ints + 6 * (size_t)cap;
    /* ints + 7 cap: scratch for the layout's order array */
    t->logp = f;
    return ES_OK;
}

void es__tree_free(es__tree *t, const es_allocator *a) {
    if (!t) return;
    es__free(a, t->token);
    es__free(a, t->logp);
    memset(t, 0, sizeof *t);
}

void es__tree_root(es__tree *t, int32_t root_token, int32_t n_past) {
    t->n = 1;
    t->max_depth = 0;
    t->token[0] = root_token;
    t->parent[0] = -1;
    t->depth[0] = 0;
    t->dfs_start[0] = 0;
    t->dfs_end[0] = 0;
    t->pos[0] = n_past;
    t->rank[0] = 0;
    t->logp[0] = 0.0f;
    t->skip = NULL;
}

int32_t es__levels_full_size(const es__levels *lv) {
    int64_t total = 1, width = 1;
    for (int32_t g = 0; g < lv->n_levels; g++) {
        width *= lv->k[g] > 0 ? lv->k[g] : 0;
        total += width;
        if (total >= INT32_MAX) return INT32_MAX;
    }
    return (int32_t)total;
}

/* ---- layout of parent links */

/* Orders children lists (CSR: child_off/child) by key (when given) and then by index. */
static void sort_siblings(const int32_t *child_off, int32_t *child, int32_t n, const int32_t *key) {
    if (!key) return;
    for (int32_t p = 0; p <= n; p++) {
        for (int32_t i = child_off[p] + 1; i < child_off[p + 1]; i++) {
            int32_t c = child[i], j = i - 1;
            while (j >= child_off[p] && (key[child[j]] > key[c] || (key[child[j]] == key[c] && child[j] > c))) {
                child[j + 1] = child[j];
                j--;
            }
            child[j + 1] = c;
        }
    }
}

/* The layout shared by es_tree_flatten and es__tree_build. key (may be NULL) orders siblings
 * before their index does. Scratch: 4 n + 2 ints. */
static es_status flatten(const int32_t *parent, const int32_t *key, int32_t n, int32_t n_past, int32_t *order,
                         int32_t *pos, int32_t *dfs_start, int32_t *dfs_end, int32_t *depth_out, int32_t *scratch,
                         es__err *err) {
    int32_t *depth = scratch;         /* [n] per node; -1 unknown, -2 on the walk (cycle check) */
    int32_t *child_off = depth + n;   /* [n + 2] CSR offsets; bucket n holds the roots          */
    int32_t *child = child_off + n + 2; /* [n]                                                   */
    int32_t *stack = child + n;       /* [n] */
    for (int32_t i = 0; i < n; i++) {
        ES_RETURN_IF(parent[i] < -1 || parent[i] >= n, err, ES_ERR_INVALID_TREE,
                     "token tree: node %d has parent %d, outside [-1, %d)", i, parent[i], n);
        ES_RETURN_IF(parent[i] == i, err, ES_ERR_INVALID_TREE, "token tree: node %d is its own parent", i);
        depth[i] = -1;
    }
    /* depths by walking up to a known node; meeting a node already on the walk is a cycle */
    for (int32_t i = 0; i < n; i++) {
        int32_t sp = 0, v = i;
        while (v >= 0 && depth[v] == -1) {
            depth[v] = -2;
            stack[sp++] = v;
            v = parent[v];
        }
        ES_RETURN_IF(v >= 0 && depth[v] == -2, err, ES_ERR_INVALID_TREE,
                     "token tree: node %d is its own ancestor (a cycle through node %d)", i, v);
        int32_t d = v < 0 ? -1 : depth[v];
        while (sp > 0) depth[stack[--sp]] = ++d;
    }
    /* children lists, roots in bucket n */
    memset(child_off, 0, sizeof(int32_t) * (size_t)(n + 2));
    for (int32_t i = 0; i < n; i++) child_off[(parent[i] < 0 ? n : parent[i]) + 1]++;
    for (int32_t p = 0; p <= n; p++) child_off[p + 1] += child_off[p];
    for (int32_t i = 0; i < n; i++) child[child_off[parent[i] < 0 ? n : parent[i]]++] = i;
    for (int32_t p = n; p > 0; p--) child_off[p] = child_off[p - 1];
    child_off[0] = 0;
    sort_siblings(child_off, child, n, key);
    /* pre-order: pop a node, give it the next row, push its children last-first */
    int32_t sp = 0, row = 0;
    for (int32_t c = child_off[n + 1] - 1; c >= child_off[n]; c--) stack[sp++] = child[c];
    while (sp > 0) {
        int32_t v = stack[--sp];
        order[row++] = v;
        for (int32_t c = child_off[v + 1] - 1; c >= child_off[v]; c--) stack[sp++] = child[c];
    }
    ES_ASSERT(row == n);
    /* subtree sizes from the last row up: a parent's row precedes its children's */
    int32_t *row_of = stack; /* reuse: node -> row */
    for (int32_t r = 0; r < n; r++) row_of[order[r]] = r;
    for (int32_t r = 0; r < n; r++) dfs_end[r] = r;
    for (int32_t r = n - 1; r >= 0; r--) {
        int32_t p = parent[order[r]];
        if (p >= 0 && dfs_end[r] > dfs_end[row_of[p]]) dfs_end[row_of[p]] = dfs_end[r];
    }
    for (int32_t r = 0; r < n; r++) {
        dfs_start[r] = r;
        pos[r] = n_past + depth[order[r]];
        if (depth_out) depth_out[r] = depth[order[r]];
    }
    return ES_OK;
}

es_status es__tree_flatten(const int32_t *parent, int32_t n, int32_t n_past, int32_t *order, int32_t *pos,
                           int32_t *dfs_start, int32_t *dfs_end, int32_t *depth, const es_allocator *a,
                           es__err *err) {
    ES_RETURN_IF(!parent || !order || !pos || !dfs_start || !dfs_end, err, ES_ERR_INVALID_ARGUMENT,
                 "es_tree_flatten: NULL array");
    ES_RETURN_IF(n < 1, err, ES_ERR_INVALID_TREE, "token tree: %d nodes, expected at least 1", n);
    ES_RETURN_IF(n_past < 0 || (int64_t)n_past + n > INT32_MAX, err, ES_ERR_INVALID_ARGUMENT,
                 "es_tree_flatten: n_past %d out of range for %d nodes", n_past, n);
    /* outputs stay untouched on failure: lay out into scratch first */
    int32_t *scratch = es__calloc(a, (size_t)n * 9 + 2, sizeof(int32_t));
    ES_RETURN_IF(!scratch, err, ES_ERR_OUT_OF_MEMORY, "es_tree_flatten: out of memory for %d nodes", n);
    int32_t *o = scratch + 4 * (size_t)n + 2, *p = o + n, *s = p + n, *e = s + n, *d = e + n;
    es_status st = flatten(parent, NULL, n, n_past, o, p, s, e, d, scratch, err);
    if (st == ES_OK) {
        memcpy(order, o, sizeof(int32_t) * (size_t)n);
        memcpy(pos, p, sizeof(int32_t) * (size_t)n);
        memcpy(dfs_start, s, sizeof(int32_t) * (size_t)n);
        memcpy(dfs_end, e, sizeof(int32_t) * (size_t)n);
        if (depth) memcpy(depth, d, sizeof(int32_t) * (size_t)n);
    }
    es__free(a, scratch);
    return st;
}

es_status es_tree_flatten(const int32_t *parent, int32_t n, int32_t n_past, int32_t *order, int32_t *pos,
                          int32_t *dfs_start, int32_t *dfs_end) {
    return es__tree_flatten(parent, n, n_past, order, pos, dfs_start, dfs_end, NULL, NULL, NULL);
}

/* ---- best-first construction */

typedef struct cand {
    float logp;
    int32_t seq;    /* push order: breaks ties so parents win over their children */
    int32_t parent; /* selection index of the parent */
    int32_t depth;
    int32_t rank;
} cand;

static bool cand_better(const cand *x, const cand *y) {
    if (x->logp != y->logp) return x->logp > y->logp;
    return x->seq < y->seq;
}

static void heap_push(cand *h, int32_t *n, cand c) {
    int32_t i = (*n)++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!cand_better(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, int32_t *n) {
    cand top = h[0], last = h[--*n];
    int32_t i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, b = i;
        const cand *best = &last;
        if (l < *n && cand_better(&h[l], best)) b = l, best = &h[l];
        if (r < *n && cand_better(&h[r], best)) b = r;
        if (b == i) break;
        h[i] = h[b];
        i = b;
    }
    h[i] = last;
    return top;
}

static float clean_logp(float x) {
    return isnan(x) ? -INFINITY : x;
}

es_status es__tree_build(es__tree *t, int32_t root_token, const es__levels *lv, int32_t max_nodes,
                         int32_t n_past, const es_allocator *a, es__err *err) {
    ES_RETURN_IF(lv->n_levels < 0 || lv->n_levels > ES_SPEC_MAX_DEPTH, err, ES_ERR_INVALID_ARGUMENT,
                 "draft tree: %d levels, expected 0..%d", lv->n_levels, ES_SPEC_MAX_DEPTH);
    int32_t kmax = 0;
    for (int32_t g = 0; g < lv->n_levels; g++) {
        ES_RETURN_IF(lv->k[g] < 0 || (lv->k[g] > 0 && (!lv->tokens[g] || !lv->logp[g])), err,
                     ES_ERR_INVALID_ARGUMENT, "draft tree: level %d has %d candidates and %s arrays", g, lv->k[g],
                     lv->tokens[g] ? "its" : "no");
        kmax = ES__MAX(kmax, lv->k[g]);
    }
    int32_t cap = ES__MIN(ES__MIN(max_nodes, t->cap), es__levels_full_size(lv));
    ES_RETURN_IF(cap < 1, err, ES_ERR_INVALID_ARGUMENT, "draft tree: room for %d nodes", max_nodes);
    /* selected nodes in selection order, then a heap of frontier candidates */
    size_t heap_cap = (size_t)cap * (size_t)kmax + 1;
    int32_t *sel = es__calloc(a, (size_t)cap * 12 + 2, sizeof(int32_t));
    cand *heap = es__calloc(a, heap_cap, sizeof(cand));
    if (!sel || !heap) {
        es__free(a, sel);
        es__free(a, heap);
        return es__fail(err, ES_ERR_OUT_OF_MEMORY, "draft tree: out of memory for %d nodes", cap);
    }
    int32_t *sel_parent = sel, *sel_depth = sel + cap, *sel_rank = sel + 2 * (size_t)cap, *sel_tok = sel + 3 * (size_t)cap;
    int32_t *scratch = sel + 4 * (size_t)cap; /* flatten's 4 cap + 2, then the permutation's 2 cap */
    int32_t n_heap = 0, n_sel = 0, seq = 0;
    heap_push(heap, &n_heap, (cand){0.0f, seq++, -1, 0, 0});
    float *sel_logp = t->logp; /* written in selection order, permuted below */
    double expect = 1.0; /* expected tokens per call of the tree so far (cost-aware size) */
    while (n_sel < cap && n_heap > 0) {
        if (lv->cost_b > 0.0 && n_sel > 0) {
            const double p = exp((double)heap[0].logp), cost = lv->cost_a + lv->cost_b * (double)n_sel;
            if (!(p * cost > expect * lv->cost_b)) break;
            expect += p;
        }
        cand c = heap_pop(heap, &n_heap);
        int32_t s = n_sel++;
        sel_parent[s] = c.parent;
        sel_depth[s] = c.depth;
        sel_rank[s] = c.rank;
        sel_tok[s] = c.depth == 0 ? root_token : lv->tokens[c.depth - 1][c.rank];
        sel_logp[s] = c.logp;
        if (c.depth < lv->n_levels) {
            for (int32_t r = 0; r < lv->k[c.depth]; r++)
                heap_push(heap, &n_heap, (cand){c.logp + clean_logp(lv->logp[c.depth][r]), seq++, s, c.depth + 1, r});
        }
    }
    es__free(a, heap);
    /* lay out: siblings by rank */
    int32_t *order = t->token + 7 * (size_t)t->cap;
    es_status st = flatten(sel_parent, sel_rank, n_sel, n_past, order, t->pos, t->dfs_start, t->dfs_end, t->depth,
                           scratch, err);
    if (st == ES_OK) {
        /* permute selection-order data into rows; row_of is the inverse of order */
        int32_t *row_of = scratch;
        float *lp = (float *)(scratch + cap);
        for (int32_t r = 0; r < n_sel; r++) row_of[order[r]] = r;
        for (int32_t r = 0; r < n_sel; r++) lp[r] = sel_logp[order[r]];
        t->max_depth = 0;
        for (int32_t r = 0; r < n_sel; r++) {
            int32_t s = order[r];
            t->token[r] = sel_tok[s];
            t->rank[r] = sel_rank[s];
            t->parent[r] = sel_parent[s] < 0 ? -1 : row_of[sel_parent[s]];
            t->logp[r] = lp[r];
            t->max_depth = ES__MAX(t->max_depth, t->depth[r]);
        }
        t->n = n_sel;
        t->skip = NULL;
    }
    es__free(a, sel);
    return st;
}

int32_t es__tree_path(const es__tree *t, int32_t node, int32_t *path) {
    int32_t len = t->depth[node] + 1;
    for (int32_t i = len - 1; i >= 0; i--) {
        path[i] = node;
        node = t->parent[node];
    }
    return len;
}

int32_t es__tree_child(const es__tree *t, int32_t node, int32_t token) {
    for (int32_t c = node + 1; c <= t->dfs_end[node]; c = t->dfs_end[c] + 1)
        if (t->token[c] == token && !(t->skip && t->skip[c])) return c;
    return -1;
}
