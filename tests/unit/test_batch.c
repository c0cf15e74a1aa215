/* test_batch.c: batch validation: chains, trees in DFS pre-order, and every rejection rule. */
#include "batch.h"

#include "../test.h"

static es_status run(const es_batch *b, int32_t n_past, int32_t *parent_out, int32_t *n_out) {
    static int32_t pos[64], st[64], en[64], par[64], rows[64];
    es__batch_scratch s = {pos, st, en, par, rows, 64};
    es__err err;
    es_status r = es__batch_validate(b, n_past, 100, 64, 1000, &s, n_out, &err);
    if (r == ES_OK && parent_out) memcpy(parent_out, par, sizeof(int32_t) * (size_t)b->n_tokens);
    return r;
}

int main(void) {
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t parent[8], n_out;

    /* a chain: parents i-1, last row wants logits */
    es_batch chain = {5, toks, NULL, NULL, NULL, NULL};
    CHECK_OK(run(&chain, 10, parent, &n_out));
    CHECK(n_out == 1);
    for (int i = 0; i < 5; i++) CHECK(parent[i] == i - 1);

    /* tree: 0 -> {1 -> {2}, 3 -> {4, 5}} in pre-order */
    int32_t st[6] = {0, 1, 2, 3, 4, 5}, en[6] = {5, 2, 2, 5, 4, 5}, pos[6] = {7, 8, 9, 8, 9, 9};
    uint8_t want[6] = {1, 1, 1, 1, 1, 1};
    es_batch tree = {6, toks, pos, st, en, want};
    CHECK_OK(run(&tree, 7, parent, &n_out));
    CHECK(n_out == 6);
    int32_t expect[6] = {-1, 0, 1, 0, 3, 3};
    for (int i = 0; i < 6; i++) CHECKF(parent[i] == expect[i], "parent[%d] = %d", i, parent[i]);

    /* rejections */
    int32_t badpos[6] = {7, 8, 9, 8, 9, 10};
    es_batch t2 = tree;
    t2.pos = badpos;
    CHECK_FAILS(run(&t2, 7, NULL, &n_out), ES_ERR_INVALID_TREE, "expected n_past + depth = 9");
    int32_t badend[6] = {5, 3, 2, 5, 4, 5}; /* 1's interval [1,3] swallows 3 but 3 ends at 5 */
    t2 = tree;
    t2.dfs_end = badend;
    CHECK_FAILS(run(&t2, 7, NULL, &n_out), ES_ERR_INVALID_TREE, "without nesting");
    int32_t badst[6] = {0, 2, 1, 3, 4, 5};
    t2 = tree;
    t2.dfs_start = badst;
    CHECK_FAILS(run(&t2, 7, NULL, &n_out), ES_ERR_INVALID_TREE, "pre-order");
    int32_t outside[6] = {5, 2, 2, 6, 4, 5};
    t2 = tree;
    t2.dfs_end = outside;
    CHECK_FAILS(run(&t2, 7, NULL, &n_out), ES_ERR_INVALID_TREE, "outside");
    t2 = tree;
    t2.dfs_end = NULL;
    CHECK_FAILS(run(&t2, 7, NULL, &n_out), ES_ERR_INVALID_ARGUMENT, "both");
    int32_t badtok[2] = {1, 1000};
    es_batch bt = {2, badtok, NULL, NULL, NULL, NULL};
    CHECK_FAILS(run(&bt, 0, NULL, &n_out), ES_ERR_INVALID_ARGUMENT, "id 1000");
    es_batch full = {5, toks, NULL, NULL, NULL, NULL};
    CHECK_FAILS(run(&full, 96, NULL, &n_out), ES_ERR_CONTEXT_FULL, "exceeds n_ctx 100");
    es_batch empty = {0, toks, NULL, NULL, NULL, NULL};
    CHECK_FAILS(run(&empty, 0, NULL, &n_out), ES_ERR_INVALID_ARGUMENT, "expected 1..64");
    TEST_MAIN_END();
}
