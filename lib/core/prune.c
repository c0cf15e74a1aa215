/* prune.c: tree pruning's decision and the compacted batch after it (prune.h). */
#include "prune.h"

#include <math.h>

int32_t es__prune_parents(const es__fwd *f, int32_t *parents) {
    int32_t n = 0;
    for (int32_t i = 0; i < f->n; i++)
        if (f->dfs_end[i] > i) parents[n++] = i;
    return n;
}

/* log sum exp of a logits row, in double and a fixed order, so every backend rounds alike */
static double log_sum_exp(const float *l, int32_t n_vocab) {
    float mx = -INFINITY;
    for (int32_t v = 0; v < n_vocab; v++) mx = l[v] > mx ? l[v] : mx;
    double sum = 0.0;
    for (int32_t v = 0; v < n_vocab; v++) sum += exp((double)l[v] - (double)mx);
    return (double)mx + log(sum);
}

void es__prune_decide(const es__fwd *f, const int32_t *parents, int32_t n_parents, const float *logits,
                      size_t row_stride, int32_t n_vocab) {
    for (int32_t t = 0; t < n_parents; t++) {
        const int32_t p = parents[t];
        if (f->pruned[p]) continue; /* an ancestor's decision took it */
        const float *l = logits + (size_t)t * row_stride;
        const double lse = log_sum_exp(l, n_vocab);
        /* 3.2.3: the parent-to-child probability of each child's token */
        for (int32_t c = p + 1; c <= f->dfs_end[p]; c = f->dfs_end[c] + 1) {
            const double q = exp((double)l[f->tokens[c]] - lse);
            if (f->exit_p) f->exit_p[c] = (float)q;
            if (!(q >= (double)f->prune_threshold))
                for (int32_t i = c; i <= f->dfs_end[c]; i++) f->pruned[i] = 1;
        }
    }
}

int32_t es__prune_compact(const es__fwd *f, es__pruned_batch *p) {
    int32_t na = 0;
    for (int32_t i = 0; i < f->n; i++) {
        if (f->pruned[i]) continue;
        p->orig[na] = i;
        p->tokens[na] = f->tokens[i];
        p->pos[na] = f->pos[i];
        p->dfs_start[na] = p->dfs_end[na] = na;
        /* the new index of an earlier survivor: pruning takes whole subtrees, so the parent
         * survived and its new index is the number of survivors before it */
        int32_t par = -1;
        if (f->parent[i] >= 0)
            for (par = na - 1; par >= 0 && p->orig[par] != f->parent[i]; par--) {}
        p->parent[na++] = par;
    }
    /* each subtree ends at its last descendant: children close their parents' intervals */
    for (int32_t r = na - 1; r > 0; r--)
        if (p->parent[r] >= 0 && p->dfs_end[r] > p->dfs_end[p->parent[r]]) p->dfs_end[p->parent[r]] = p->dfs_end[r];
    p->n = na;
    p->n_out = 0;
    for (int32_t o = 0, r = 0; o < f->n_out; o++) {
        const int32_t i = f->out_rows[o];
        if (f->pruned[i]) continue;
        while (p->orig[r] != i) r++;
        p->out_rows[p->n_out++] = r;
    }
    return na;
}
