/* tree.h: token trees for speculative decoding: building a draft tree from per-level candidates
 * (Speculative Streaming 3.2.2: the tokens drafted by stream g are the children of every token of
 * stream g-1), laying trees out in DFS pre-order with the intervals of FlashSpecInfer 5.1 and the
 * positions n_past + depth that es_batch wants, and validating trees given as parent links.
 * Deliberately no model, logits or sampling here: candidates arrive as (token, log-probability). */
#ifndef ES_CORE_TREE_H
#define ES_CORE_TREE_H

#include "common.h"

/* A token tree in DFS pre-order: node 0 is the root, node i's subtree is [i, dfs_end[i]], and
 * children follow their parent in candidate order. */
typedef struct es__tree {
    int32_t n;          /* nodes                                                         */
    int32_t cap;        /* capacity of every array                                       */
    int32_t max_depth;  /* deepest node's depth (root 0)                                 */
    int32_t *token;     /* [cap]                                                         */
    int32_t *parent;    /* [cap] pre-order index of the parent, -1 for the root          */
    int32_t *depth;     /* [cap]                                                         */
    int32_t *dfs_start; /* [cap] == i                                                    */
    int32_t *dfs_end;   /* [cap] last pre-order index of the node's subtree              */
    int32_t *pos;       /* [cap] n_past + depth                                          */
    int32_t *rank;      /* [cap] the node's rank among its level's candidates (root 0)   */
    float *logp;        /* [cap] summed draft log-probability of the root-to-node path   */
    const uint8_t *skip;/* [n] or NULL: nodes removed by tree pruning, never matched      */
} es__tree;

es_status es__tree_init(es__tree *t, int32_t cap, const es_allocator *a, es__err *err);
void es__tree_free(es__tree *t, const es_allocator *a);

/* A tree with one node: the root token at position n_past. */
void es__tree_root(es__tree *t, int32_t root_token, int32_t n_past);

/* Draft candidates per level: level g (0-based) holds the k[g] candidates for depth g + 1, most
 * preferred first, with their log-probabilities (-INFINITY allowed, NaN is treated as such). */
typedef struct es__levels {
    int32_t n_levels;
    int32_t k[ES_SPEC_MAX_DEPTH];
    const int32_t *tokens[ES_SPEC_MAX_DEPTH]; /* [k[g]] */
    const float *logp[ES_SPEC_MAX_DEPTH];     /* [k[g]] */
    /* Optional cost-aware size (cost_b > 0): with logp the candidates' log-probabilities of
     * acceptance, a call of n nodes costing cost_a + cost_b n, the best-first expansion stops
     * before a node whose probability adds less to the expected tokens per call than the tree so
     * far yields per unit of cost: exp(path logp) / cost_b <= E / T, E = 1 + the selected
     * non-root nodes' probabilities, T = cost_a + cost_b n. */
    double cost_a, cost_b;
} es__levels;

/* Nodes of the full tree over lv: 1 + k0 + k0 k1 + ... (saturates at INT32_MAX). */
int32_t es__levels_full_size(const es__levels *lv);

/* Builds the draft tree rooted at root_token (position n_past) whose depth-g nodes all get level
 * g's candidates as children, keeping the max_nodes most probable nodes: a best-first expansion
 * by path log-probability (ties to the earlier-found node), so the kept set is closed under
 * ancestors. max_nodes is capped at t->cap. */
es_status es__tree_build(es__tree *t, int32_t root_token, const es__levels *lv, int32_t max_nodes,
                         int32_t n_past, const es_allocator *a, es__err *err);

/* The generic layout behind es_tree_flatten (parent links in any order to DFS pre-order rows);
 * depth[r] (optional, may be NULL) receives each row's depth. */
es_status es__tree_flatten(const int32_t *parent, int32_t n, int32_t n_past, int32_t *order, int32_t *pos,
                           int32_t *dfs_start, int32_t *dfs_end, int32_t *depth, const es_allocator *a,
                           es__err *err);

/* Writes the root-to-node path of node (pre-order indices, root first) to path; returns its
 * length (depth + 1). path needs t->max_depth + 1 entries. */
int32_t es__tree_path(const es__tree *t, int32_t node, int32_t *path);

/* The child of node carrying token (skipped nodes excluded), or -1. */
int32_t es__tree_child(const es__tree *t, int32_t node, int32_t token);

#endif /* ES_CORE_TREE_H */
