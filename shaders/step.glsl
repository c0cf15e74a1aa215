// step.glsl: the per-call step data the host writes before each forward submission (positions,
// tree intervals, tokens, ...), read through binding STEPBIND as 32-bit ints. Layout in
// shaders/push.h (ES_STEP_*): a header, then arrays of nb entries each.
RO_I1(STEPBIND, STEP)

int step_at(uint i) { return FETCH_I1(STEP, i); }
uint step_nb() { return uint(step_at(ES_STEP_NB)); }
int step_n_past() { return step_at(ES_STEP_N_PAST); }
int step_array(uint which, uint i) { return step_at(ES_STEP_HDR + which * step_nb() + i); }
int step_token(uint t) { return step_array(ES_STEP_TOKENS, t); }
int step_pos(uint t) { return step_array(ES_STEP_POS, t); }

// The cache slot holding the key at position q for batch token t (q <= pos[t]). Committed
// positions and chains (chain = step_at(ES_STEP_CHAIN) != 0, read once by the caller) keep
// position q in slot q; in a tree the ancestor decides.
int step_ancestor(uint t, uint d);
uint step_slot(uint t, uint q, uint n_past, bool chain) {
    if (q < n_past || chain) return q;
    return n_past + uint(step_ancestor(t, q - n_past));
}

// DFS pre-order tree (FlashSpecInfer's DFS intervals): batch token i is an ancestor-or-self of
// token t iff i <= t <= dfs_end[i]. The ancestor of t at depth d is the one such i among the
// tokens at depth d, which the host lists in `order` between level[d] and level[d + 1].
// DENSE_MASK=1 (tests/bench only, never in the library) asks an N x N byte mask instead: the
// baseline the intervals replace, with everything else the same.
#ifndef DENSE_MASK
#define DENSE_MASK 0
#endif
bool step_visible(uint i, uint t) {
#if DENSE_MASK
    const uint bit = t * uint(step_at(ES_STEP_MASK_N)) + i;
    return ((uint(step_at(uint(step_at(ES_STEP_MASK)) + bit / 4u)) >> (8u * (bit % 4u))) & 255u) != 0u;
#else
    return i <= t && int(t) <= step_array(ES_STEP_DFS_END, i);
#endif
}

int step_ancestor(uint t, uint d) {
    int lo = step_array(ES_STEP_LEVEL, d), hi = step_array(ES_STEP_LEVEL, d + 1u);
    for (int k = lo; k < hi; k++) {
        int i = step_array(ES_STEP_ORDER, uint(k));
        if (step_visible(uint(i), t)) return i;
    }
    return int(t); // unreachable for a valid tree: the host validated it
}
