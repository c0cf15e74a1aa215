/* spec_steps.c: the pieces every speculative strategy composes its step from (spec.h): verifying
 * the forwarded tree against the target's logits, calibrating draft candidates for the tree
 * builder, extending the sequence, prefilling a context. Deliberately no strategy here: what to
 * draft and how is the strategy's file. */
#include "spec.h"

#include <string.h>

int32_t es__spec_tree_room(const es_spec *s) {
    const int32_t free_slots = s->caps.n_ctx - es_context_n_past(s->ctx);
    return ES__MIN(ES__MIN(s->p.max_nodes, s->tree.cap), free_slots);
}

es_status es__spec_fail_ctx(es_spec *s, es_context *ctx, es_status st, const char *what) {
    return es__fail(&s->err, st, "%s%s%s", what ? what : "", what ? ": " : "", es_context_errmsg(ctx));
}

/* ---- the verifier's view of the tree: the target's logits per node, the levels' draft
 * distributions (rejection mode), and end-of-generation stops */

/* The verifier's user pointer: s, and where the rows come from (NULL members: s's own). */
typedef struct verify_from {
    es_spec *s;
    const es__spec_rows *rows;
} verify_from;

static es_status src_logits(void *user, int32_t node, const float **logits) {
    const verify_from *v = user;
    es_spec *s = v->s;
    if (v->rows && v->rows->logits) return v->rows->logits(v->rows->user, node, logits);
    es_status st = es_logits(s->ctx, node, logits);
    return st == ES_OK ? ES_OK : es__spec_fail_ctx(s, s->ctx, st, NULL);
}

static es_status src_draft(void *user, int32_t node, const double **q) {
    const verify_from *v = user;
    es_spec *s = v->s;
    if (v->rows && v->rows->draft) return v->rows->draft(v->rows->user, node, q);
    ES_RETURN_IF(!s->cand_q, &s->err, ES_ERR_INVALID_ARGUMENT, "verify: no draft distributions kept");
    *q = s->cand_q + ((size_t)s->cur * (size_t)s->depth + (size_t)s->tree.depth[node]) * (size_t)s->caps.n_vocab;
    return ES_OK;
}

static bool src_stop(void *user, int32_t token) {
    const verify_from *v = user;
    return es_token_is_eog(v->s->model, token);
}

/* What the step's verification says for the statistics and the tuner: how deep the tree reached
 * after pruning, what was accepted, and each tested node's own draft probability. */
static void record_acceptance(es_spec *s, const es__verify_out *out) {
    const es__tree *t = &s->tree;
    int32_t reach = 0, pruned = 0;
    for (int32_t i = 0; i < t->n; i++) {
        if (t->skip && t->skip[i]) pruned++;
        else reach = ES__MAX(reach, t->depth[i]);
    }
    for (int32_t d = 0; d < reach && d < ES_SPEC_MAX_DEPTH; d++) s->st.drafted[d]++;
    /* a walk that stopped (cap, end of generation) on a token its tree had drafted accepted it */
    const int32_t n_acc = out->n_path - 1 + (out->next_child >= 0 ? 1 : 0);
    for (int32_t d = 0; d < n_acc && d < ES_SPEC_MAX_DEPTH; d++) s->st.accepted[d]++;
    for (int32_t i = 1; i < t->n; i++)
        s->node_lp[i] = s->cand_lp[((size_t)s->cur * (size_t)s->depth + (size_t)(t->depth[i] - 1)) * (size_t)s->k +
                                   (size_t)t->rank[i]];
    const int32_t next_child = es__tuner_next_child(t, out->path[out->n_path - 1], out->next, out->next_child);
    es__tuner_observe_tree(&s->tune, t, out->path, out->n_path, next_child, s->node_lp);
    s->st.n_tree_nodes += t->n;
    s->st.n_pruned += pruned;
}

es_status es__spec_verify(es_spec *s, size_t cap, int32_t *tokens, size_t *n_tokens, int32_t *path,
                          int32_t *n_path) {
    return es__spec_verify_rows(s, NULL, cap, tokens, n_tokens, path, n_path);
}

es_status es__spec_verify_rows(es_spec *s, const es__spec_rows *rows, size_t cap, int32_t *tokens,
                               size_t *n_tokens, int32_t *path, int32_t *n_path) {
    verify_from from = {s, rows};
    es__verify_src vs = {&from, src_logits, src_draft, s->p.ignore_eog ? NULL : src_stop};
    es__verify_out out;
    const int32_t max_emit = (int32_t)ES__MIN(cap, (size_t)ES_SPEC_MAX_DEPTH + 1);
    ES_TRY(es__verify(&s->ver, &s->tree, &vs, s->hist, s->n_hist, max_emit, &out, &s->err));
    size_t n = 0;
    for (int32_t i = 1; i < out.n_path; i++) tokens[n++] = s->tree.token[out.path[i]];
    tokens[n++] = out.next;
    *n_tokens = n;
    memcpy(path, out.path, sizeof(int32_t) * (size_t)out.n_path);
    *n_path = out.n_path;
    record_acceptance(s, &out);
    return ES_OK;
}

void es__spec_calibrate(es_spec *s, int32_t buf, es__levels *lv) {
    for (int32_t g = 0; g < lv->n_levels; g++) {
        const size_t at = ((size_t)buf * (size_t)s->depth + (size_t)g) * (size_t)s->k;
        for (int32_t r = 0; r < lv->k[g]; r++)
            s->cand_cal[at + (size_t)r] = es__tuner_accept(&s->tune, g + 1, r, s->cand_lp[at + (size_t)r]);
        lv->logp[g] = s->cand_cal + at;
    }
    /* an exploration's tree is not cut to the costs: its drafts are what it measures. The
     * stream pass and the host work count as the step's, so a node is weighed against all a step
     * costs, not only its call (which made trees smaller than paid) */
    double a, b;
    if (!s->tune.explored && es__tuner_step_cost(&s->tune, lv->n_levels, &a, &b)) {
        lv->cost_a = a;
        lv->cost_b = b;
    }
}

void es__spec_advance(es_spec *s, const int32_t *tokens, size_t n) {
    memcpy(s->hist + s->n_hist, tokens, sizeof(int32_t) * n);
    s->n_hist += n;
}

es_status es__spec_prefill(es_spec *s, es_context *ctx, const int32_t *chain, int32_t n) {
    const int32_t n_past0 = es_context_n_past(ctx);
    es__caps c;
    es__context_caps(ctx, &c);
    const int32_t chunk = ES__MIN(c.n_batch, s->caps.n_batch); /* s->zeros has the target's n_batch */
    for (int32_t off = 0; off < n;) {
        es_batch b = {ES__MIN(chunk, n - off), chain + off, NULL, NULL, NULL, s->zeros};
        es_status st = es_forward(ctx, &b);
        if (st == ES_OK) st = es_commit(ctx, NULL, 0);
        if (st != ES_OK) {
            es__spec_fail_ctx(s, ctx, st, NULL);
            es_truncate(ctx, n_past0);
            return st;
        }
        off += b.n_tokens;
    }
    return ES_OK;
}

es_status es__spec_same_vocab(es_spec *s, const es_model *a, const es_model *b) {
    es_model_info ia, ib;
    ES_TRY(es_model_get_info(a, &ia));
    ES_TRY(es_model_get_info(b, &ib));
    ES_RETURN_IF(ia.n_vocab != ib.n_vocab, &s->err, ES_ERR_INVALID_ARGUMENT,
                 "es_spec_create: the draft model '%s' has %d tokens, the target '%s' %d: they must share a vocabulary",
                 ib.path, ib.n_vocab, ia.path, ia.n_vocab);
    for (int32_t i = 0; i < 64; i++) {
        int32_t t = (int32_t)(((int64_t)ia.n_vocab - 1) * i / 63);
        char pa[64], pb[64];
        size_t la = 0, lb = 0;
        es_status sa = es_token_to_piece(a, t, true, pa, sizeof pa, &la);
        es_status sb = es_token_to_piece(b, t, true, pb, sizeof pb, &lb);
        ES_RETURN_IF(sa != sb || (sa == ES_OK && (la != lb || memcmp(pa, pb, la) != 0)), &s->err,
                     ES_ERR_INVALID_ARGUMENT, "es_spec_create: token %d differs between the target '%s' and the draft '%s'",
                     t, ia.path, ib.path);
    }
    return ES_OK;
}
