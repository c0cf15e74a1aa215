/* forward.c: the llama forward pass on the CPU: token embedding, per layer RMSNorm, Q/K/V
 * projections, RoPE, grouped-query tree attention over the KV cache, output projection and
 * residual, RMSNorm, SwiGLU FFN and residual; final RMSNorm and the output head for the rows that
 * want logits. All pool threads run one job (fwd_thread) through the same sequence of phases; a
 * phase hands its outputs out in chunks (pool.h: own range first, then stealing) and ends when all
 * are done. Every output element is computed by one thread with the same code whatever the split
 * or the chunk it falls in (thread- and batch-invariant).
 * Not here: batch validation (core), the KV-cache allocation and compaction (backend.c). */
#include "cpu.h"
#include "forward_api.h"
#include "msa.h"
#include "opsi.h"

#include <math.h>
#include <string.h>

typedef struct fwd_job {
    const es__fwd *f;
    const es__hparams *hp;
    const es__cpu_weights *w;
    es__cpu_ctx *c;
    const es__kern *k;
    es__pool *pool;
    int32_t n_ctx;
    es__msa_job *msa;     /* Speculative Streaming hooks (msa.c); NULL in a plain forward */
    es_profile_entry *prof; /* [OP_COUNT] phase wall times when the backend profiles, else NULL */
    es_context *ctx;        /* whose cancellation requests the norm phases take             */
    atomic_int *stop_at;    /* the layer the call stops before when it took the request, or -1 */
} fwd_job;

/* Matrix rows are handed out in multiples of this (whole cache lines of each output row). */
#define ROW_ALIGN 16

/* The multiple of ROW_ALIGN a phase over n matrices laid end to end hands its rows out in: the
 * largest power-of-two multiple that divides every matrix and still leaves about eight chunks a
 * thread, so that no chunk straddles two matrices and a thread's chunks in one matrix are equal
 * (the Q4_K kernel's prefetches run on into the next one; kern_ksum.h). */
static int64_t rows_align(const int64_t *n_out, int n, int nth) {
    int64_t rows = 0, a = ROW_ALIGN;
    for (int i = 0; i < n; i++) rows += n_out[i];
    for (bool ok = n > 1; ok;) {
        for (int i = 0; i < n && ok; i++) ok = n_out[i] % (2 * a) == 0 && 2 * a * 8 * nth <= rows;
        if (ok) a *= 2;
    }
    return a;
}

/* What a phase computes, for the profile (es_backend_profile). */
enum { OP_EMBED, OP_NORM, OP_QKV, OP_ROPE, OP_GATHER, OP_ATTN, OP_WO, OP_FFN, OP_DOWN, OP_HEAD, OP_POST_NORM, OP_COUNT };
static const char *const op_names[OP_COUNT] = {
    "get_rows", "rms_norm", "mul_mat_qkv", "rope_kv_write", "gather_rows", "attention",
    "mul_mat_wo", "mul_mat_gate_up_swiglu", "mul_mat_down", "mul_mat_head", "rms_norm_post_add",
};

/* One thread's walk through the job's phases (pool.h: phases with work stealing). */
typedef struct thr {
    const fwd_job *J;
    int ith, nth;
    int phase;       /* the next phase's number: every thread meets the phases in the same order */
    int op;          /* the current phase's OP_ */
    int32_t il;      /* the current layer */
    double t0;       /* when thread 0 began it (profiling only) */
} thr;

static void phase_begin(thr *t, es__work *w, int op, int64_t n, int64_t align) {
    ES_ASSERT(t->phase < t->J->c->n_phases);
    es__work_begin(w, t->J->pool, t->J->c->sched, t->phase++, n, align, t->ith, t->nth);
    t->op = op;
    if (t->J->prof && t->ith == 0) t->t0 = es__time_now();
}

static void prefetch_next(const thr *t);
static size_t cache_offset(const fwd_job *J, int32_t il);

/* Waits for the phase to complete; thread 0 adds its wall time to the profile. */
static void phase_end(thr *t, es__work *w) {
    prefetch_next(t);
    es__work_end(w);
    if (t->J->prof && t->ith == 0) {
        t->J->prof[t->op].calls++;
        t->J->prof[t->op].ms += (es__time_now() - t->t0) * 1e3;
    }
}

/* How much of each of its streams a matrix phase's first chunk asks for as the phase before ends:
 * the kernels read a chunk as up to four sequential streams from its quarters (kern_ksum.h, two
 * from its halves elsewhere), each of which would otherwise begin on demand misses until the
 * hardware and the kernels' own prefetches run ahead of it; about one prefetch distance. */
#define PF_START 1280

/* Prefetches the start of each quarter of rows [lo, hi) of W. */
static void prefetch_rows(const es__cpu_mat *W, int64_t lo, int64_t hi) {
    if (lo >= hi) return;
    const int64_t q = (hi - lo) / 4;
    for (int r = 0; r < 4; r++) {
        const uint8_t *p = (const uint8_t *)W->data + (size_t)(lo + r * q) * W->row_bytes;
        for (size_t o = 0; o < PF_START; o += 64) __builtin_prefetch(p + o, 0, 0);
    }
}

/* The cached keys and values the attention of this thread's own heads reads first (one key tile
 * each: the kernel's first), asked for as the thread leaves the Q/K/V phase: the rope phase and
 * the barriers between would otherwise leave the memory idle, and the attention then waits on
 * each head's stream in turn (134m Q4_K decode, 2 threads: about 1.07x under load; docs/perf.md).
 * Small batches only, where the attention's tasks are the heads (ops.c: head-major in a block of
 * rows); ALSpec reads its own windows. */
static void prefetch_kv(const thr *t) {
    const fwd_job *J = t->J;
    const es__hparams *hp = J->hp;
    const int32_t n = J->f->n, hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    if (n > ES__CPU_ATTN_ROWS || J->f->alspec) return;
    int64_t lo, hi;
    es__split_range((int64_t)n * hp->n_head, 1, t->ith, t->nth, &lo, &hi);
    if (lo >= hi) return;
    const size_t bytes = sizeof(float) * (size_t)hd * (size_t)ES__MIN(J->f->n_past, ES__ATTN_TILE);
    for (int64_t g = lo / n / group; g <= (hi - 1) / n / group; g++) {
        const size_t o = cache_offset(J, t->il) + (size_t)g * (size_t)J->n_ctx * (size_t)hd;
        const uint8_t *k = (const uint8_t *)(J->c->k + o), *v = (const uint8_t *)(J->c->v + o);
        for (size_t b = 0; b < bytes; b += 64) {
            __builtin_prefetch(k + b, 0, 3);
            __builtin_prefetch(v + b, 0, 3);
        }
    }
}

/* The start of this thread's first chunk of the next matrix phase (es__work_first), asked for as
 * it leaves a matrix phase: the memory then streams on through the barrier and the small phases
 * between, and the next phase starts on cached lines. */
static void prefetch_next(const thr *t) {
    const fwd_job *J = t->J;
    const es__cpu_layer *L = &J->w->layers[t->il];
    int64_t lo, hi;
    switch (t->op) {
    case OP_EMBED:
    case OP_DOWN: {
        if (t->op == OP_DOWN && t->il + 1 == J->hp->n_layer) {
            es__work_first(J->w->output.n_out, ROW_ALIGN, t->ith, t->nth, &lo, &hi);
            prefetch_rows(&J->w->output, lo, hi);
            return;
        }
        const es__cpu_layer *N = t->op == OP_EMBED ? &J->w->layers[0] : L + 1;
        const es__cpu_mat *m[3] = {&N->wq, &N->wk, &N->wv};
        const int64_t n_out[3] = {m[0]->n_out, m[1]->n_out, m[2]->n_out};
        es__work_first(n_out[0] + n_out[1] + n_out[2], rows_align(n_out, 3, t->nth), t->ith, t->nth, &lo, &hi);
        for (int64_t i = 0, off = 0; i < 3; off += m[i]->n_out, i++)
            prefetch_rows(m[i], ES__MAX(lo - off, 0), ES__MIN(hi - off, m[i]->n_out));
        return;
    }
    case OP_QKV:
        prefetch_kv(t);
        es__work_first(L->wo.n_out, ROW_ALIGN, t->ith, t->nth, &lo, &hi);
        prefetch_rows(&L->wo, lo, hi);
        return;
    case OP_WO:
        es__work_first(L->gate.n_out, ROW_ALIGN, t->ith, t->nth, &lo, &hi);
        prefetch_rows(&L->gate, lo, hi);
        return;
    case OP_FFN:
        es__work_first(L->down.n_out, ROW_ALIGN, t->ith, t->nth, &lo, &hi);
        prefetch_rows(&L->down, lo, hi);
        return;
    default: return;
    }
}

/* One matrix of a matmul phase: y [n_tok][W.n_out] = W x. */
typedef struct mm_seg {
    const es__cpu_mat *W;
    float *y;
} mm_seg;

/* Rows [lo, hi) of a phase over the rows of several matrices laid end to end. */
static void mm_rows(const thr *t, const mm_seg *seg, int n_seg, const float *x, int64_t n_tok, int64_t lo, int64_t hi) {
    const fwd_job *J = t->J;
    float *panel = J->c->panel + (size_t)t->ith * J->c->panel_floats;
    int64_t off = 0;
    for (int i = 0; i < n_seg; i++) {
        const es__cpu_mat *W = seg[i].W;
        const int64_t a = ES__MAX(lo, off) - off, b = ES__MIN(hi, off + W->n_out) - off;
        if (a < b) J->k->matmul(W->type, W->data, W->row_bytes, W->n_in, a, b, x, W->n_in, n_tok, seg[i].y + a, W->n_out, panel);
        off += W->n_out;
    }
}

/* Speculative stream rows riding in layer il's phases (msa_fused.c); 0 in most calls. */
static int64_t fz_rows(const thr *t, int32_t il) {
    return t->J->msa ? es__msa_fz_rows(t->J->msa, il) : 0;
}

/* The riding stream rows' share of a matrix phase's chunk, while its weights are cached. */
static void fz_chunk(const thr *t, int op, int64_t lo, int64_t hi) {
    if (op != OP_QKV && op != OP_WO && op != OP_FFN && op != OP_DOWN) return; /* the head: no streams */
    if (!fz_rows(t, t->il)) return;
    const es__fz_op fz = op == OP_QKV ? ES__FZ_QKV : op == OP_WO ? ES__FZ_WO : op == OP_FFN ? ES__FZ_FFN : ES__FZ_DOWN;
    es__msa_fz_chunk(t->J->msa, t->il, fz, lo, hi, t->ith);
}

/* A phase computing y = W x for every matrix of seg. */
static void mm_phase(thr *t, int op, const mm_seg *seg, int n_seg, const float *x, int64_t n_tok) {
    int64_t rows = 0, n_out[3];
    ES_ASSERT(n_seg <= 3);
    for (int i = 0; i < n_seg; i++) rows += n_out[i] = seg[i].W->n_out;
    es__work w;
    phase_begin(t, &w, op, rows, rows_align(n_out, n_seg, t->nth));
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
        mm_rows(t, seg, n_seg, x, n_tok, lo, hi);
        fz_chunk(t, op, lo, hi);
    }
    phase_end(t, &w);
}

/* x[t][lo..hi) += y[t][lo..hi) */
/* x += s y (s: the residual scale, 1 but for granite; 1 y is y, bit for bit). */
static void add_rows(float *x, const float *y, float s, int64_t width, int64_t n_tok, int64_t lo, int64_t hi) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = lo; i < hi; i++) x[t * width + i] += s * y[t * width + i];
}

/* A phase computing x += W a (the output projections and their residual). */
static void mm_residual_phase(thr *t, int op, const es__cpu_mat *W, const float *a, int64_t n_tok, float *tmp,
                              float *x) {
    const mm_seg seg = {W, tmp};
    es__work w;
    phase_begin(t, &w, op, W->n_out, ROW_ALIGN);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
        mm_rows(t, &seg, 1, a, n_tok, lo, hi);
        add_rows(x, tmp, t->J->hp->residual_scale, W->n_out, n_tok, lo, hi);
        fz_chunk(t, op, lo, hi);
    }
    phase_end(t, &w);
}

/* A residual branch's output projection: x += W a, or with a post-branch norm (gemma2,
 * arch.h) x += rmsnorm(W a) * post, which needs whole rows of W a first: two phases. */
static void branch_phase(thr *t, int op, const es__cpu_mat *W, const float *post, const float *a, int64_t n_tok,
                         float *tmp, float *x) {
    if (!post) {
        mm_residual_phase(t, op, W, a, n_tok, tmp, x);
        return;
    }
    const fwd_job *J = t->J;
    const int64_t d = J->hp->n_embd;
    const mm_seg seg = {W, tmp};
    mm_phase(t, op, &seg, 1, a, n_tok);
    es__work w;
    phase_begin(t, &w, OP_POST_NORM, n_tok, 1);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);)
        for (int64_t i = lo; i < hi; i++) {
            es__cpu_rmsnorm_row(J->k, tmp + i * d, post, d, J->hp->rms_eps, tmp + i * d);
            add_rows(x + i * d, tmp + i * d, J->hp->residual_scale, d, 1, 0, d);
        }
    phase_end(t, &w);
}


/* What riding stream rows do in a norm phase (msa_fused.c): before layer il's attention (il =
 * n_layer: the output norm), or before its FFN. */
enum { FZ_ATTN_NORM, FZ_FFN_NORM };

/* RMSNorm of n_tok rows of x into y, with the riding stream rows of layer il (fz says their
 * step) as items after them. check_layer >= 0: the layer's first phase, where cancellation
 * (es_context_abort) is looked at: the one thread that computes row 0 takes the request and
 * records the layer before it reports the row done, so every thread finds it once the phase is
 * complete and all stop at the same layer. Returns false when the call stops here. */
static bool norm_phase(thr *t, const float *x, const float *wt, float *y, int64_t n_tok, int32_t check_layer,
                       int32_t il, int fz) {
    const fwd_job *J = t->J;
    const int64_t d = J->hp->n_embd;
    es__work w;
    phase_begin(t, &w, OP_NORM, n_tok + fz_rows(t, il), 1);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
        if (check_layer >= 0 && lo == 0 && es__context_abort_take(J->ctx)) atomic_store(J->stop_at, check_layer);
        for (int64_t i = lo; i < hi; i++) {
            if (i < n_tok) es__cpu_rmsnorm_row(J->k, x + i * d, wt, d, J->hp->rms_eps, y + i * d);
            else if (fz == FZ_ATTN_NORM) es__msa_fz_norm(J->msa, il, i - n_tok, t->ith);
            else es__msa_fz_ffn_norm(J->msa, il, i - n_tok, t->ith);
        }
    }
    phase_end(t, &w);
    return check_layer < 0 || atomic_load(J->stop_at) < 0;
}

/* Moves rows rows[r] to r (rows ascending, so r <= rows[r] and a forward copy is safe). */
static void gather_rows(float *a, int64_t width, const int32_t *rows, int32_t n_rows) {
    for (int32_t r = 0; r < n_rows; r++)
        if (rows[r] != r) memcpy(a + (int64_t)r * width, a + (int64_t)rows[r] * width, sizeof(float) * (size_t)width);
}

/* ALSpec's attention of the one decode token (Algorithm 1, with Algorithm 3's kernel): each head's
 * speculation and exact attention, then the check over all heads in head order; the layer goes on
 * with the speculation when it hits, else with the exact output (already in c->att). */
/* ALSpec's speculative attention of layer il's one token, in the passes asked (ES__SPEC_PASS_*):
 * the speculation leaves each head's partials in the context, the exact pass reads them, checks,
 * and (gated, f->alspec's lambda) puts the speculation in att on a hit. */
static void alspec_attention(thr *t, int32_t il, size_t cache_off, int passes) {
    const fwd_job *J = t->J;
    const es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    es__cpu_ctx *c = J->c;
    const int32_t hd = hp->head_dim, qd = hp->n_head * hd, n = f->n_past + 1, S = f->alspec->chunk;
    const int32_t group = hp->n_head / hp->n_head_kv;
    int32_t s2 = 0;
    es__spec_verdict *v = &f->alspec->verdicts[il];
    const bool valid = es__spec_window(n, S, &s2);
    es__work w;
    phase_begin(t, &w, OP_ATTN, hp->n_head, 1);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);)
        for (int64_t h = lo; h < hi; h++) {
            const size_t kv = cache_off + (size_t)(h / group) * (size_t)J->n_ctx * (size_t)hd;
            float *o = c->att + h * hd, *sp = c->al_spec + h * hd;
            if (!valid) {
                const int32_t zero = 0;
                J->k->attend(c->q + h * hd, c->k + kv, c->v + kv, hd, f->n_past, &zero, 1, NULL, NULL, 0, 0,
                             hp->attn_scale, 0.0f, o);
                continue;
            }
            J->k->attend_spec(c->q + h * hd, c->k + kv, c->v + kv, hd, n, S, s2, hp->attn_scale, passes,
                              c->al_part + (size_t)h * c->al_part_floats, sp, o);
            if (!(passes & ES__SPEC_PASS_EXACT)) continue;
            double e = 0.0, a = 0.0;
            for (int32_t d = 0; d < hd; d++) {
                const double diff = (double)sp[d] - (double)o[d];
                e += diff * diff;
                a += (double)o[d] * (double)o[d];
            }
            c->al_e2[2 * h] = e;
            c->al_e2[2 * h + 1] = a;
        }
    phase_end(t, &w);
    /* section 3.2's check over all heads, in head order whatever the thread split */
    phase_begin(t, &w, OP_ATTN, 1, 1);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
        *v = (es__spec_verdict){valid, false, 0.0, 0.0};
        if (!valid || !(passes & ES__SPEC_PASS_EXACT)) continue;
        for (int32_t h = 0; h < hp->n_head; h++) {
            v->err2 += c->al_e2[2 * h];
            v->norm2 += c->al_e2[2 * h + 1];
        }
        v->hit = es__spec_accept(v->err2, v->norm2, f->alspec->lambda) &&
                 !(f->alspec->force_miss && f->alspec->force_miss[il]);
        if (v->hit) memcpy(c->att, c->al_spec, sizeof(float) * (size_t)qd);
    }
    phase_end(t, &w);
}

static size_t cache_offset(const fwd_job *J, int32_t il) {
    return (size_t)il * (size_t)J->hp->n_head_kv * (size_t)J->n_ctx * (size_t)J->hp->head_dim;
}

/* A layer's pre-attention ops: RMSNorm, Q/K/V, RoPE and the batch's keys/values into their
 * provisional slots. check_layer as norm_phase's; false when the call was cancelled. */
static bool layer_pre(thr *t, int32_t il, int32_t check_layer) {
    const fwd_job *J = t->J;
    const es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    const es__cpu_layer *L = &J->w->layers[il];
    es__cpu_ctx *c = J->c;
    const int32_t n = f->n, hd = hp->head_dim;
    const int32_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    const size_t cache_off = cache_offset(J, il);
    es__work w;

    t->il = il;
    if (!norm_phase(t, c->x, L->attn_norm, c->xn, n, check_layer, il, FZ_ATTN_NORM)) return false;
    const mm_seg qkv[3] = {{&L->wq, c->q}, {&L->wk, c->kn}, {&L->wv, c->vn}};
    mm_phase(t, OP_QKV, qkv, 3, c->xn, n);

    /* RoPE on q and k, then this batch's keys/values into its provisional slots (and the riding
     * stream rows' q, k and v: they write no slots) */
    phase_begin(t, &w, OP_ROPE, n + fz_rows(t, il), 1);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);)
        for (int64_t i = lo; i < hi; i++) {
            if (i >= n) {
                es__msa_fz_rope(J->msa, il, i - n, t->ith);
                continue;
            }
            const float *cs = es__cpu_rope_row(c->rope, hp, i, il);
            es__cpu_qkv_prepare(J->k, hp, L, c->q + i * qd, c->kn + i * kvd, c->vn + i * kvd, cs);
            es__cpu_kv_write(c->k + cache_off, c->v + cache_off, J->n_ctx, hp->n_head_kv, hd, f->n_past + (int32_t)i,
                             1, c->kn + i * kvd, c->vn + i * kvd);
        }
    phase_end(t, &w);
    return true;
}

/* A layer's post-attention ops on nr rows: output projection and residual, RMSNorm, the gated
 * FFN and its residual. */
static void layer_post(thr *t, int32_t il, int32_t nr) {
    const fwd_job *J = t->J;
    const es__hparams *hp = J->hp;
    const es__cpu_layer *L = &J->w->layers[il];
    es__cpu_ctx *c = J->c;
    es__work w;
    t->il = il;
    branch_phase(t, OP_WO, &L->wo, L->post_attn_norm, c->att, nr, c->tmp, c->x);
    norm_phase(t, c->x, L->ffn_norm, c->xn, nr, -1, il, FZ_FFN_NORM);

    /* gate and up for the same rows, then SwiGLU on them */
    const mm_seg g = {&L->gate, c->gate}, u = {&L->up, c->up};
    phase_begin(t, &w, OP_FFN, hp->n_ff, ROW_ALIGN);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
        prefetch_rows(&L->up, lo, hi); /* its streams start while gate's run */
        mm_rows(t, &g, 1, c->xn, nr, lo, hi);
        mm_rows(t, &u, 1, c->xn, nr, lo, hi);
        for (int32_t i = 0; i < nr; i++) {
            const int64_t off = (int64_t)i * hp->n_ff;
            if (hp->arch->act == ES__ACT_GELU)
                es__cpu_geglu_range(c->gate + off, c->up + off, lo, hi, c->gate + off);
            else
                es__cpu_swiglu_range(J->k, c->gate + off, c->up + off, lo, hi, c->gate + off);
        }
        fz_chunk(t, OP_FFN, lo, hi);
    }
    phase_end(t, &w);

    branch_phase(t, OP_DOWN, &L->down, L->post_ffn_norm, c->gate, nr, c->tmp, c->x);
}

/* One layer; false when the call was cancelled before it. */
static bool layer(thr *t, int32_t il) {
    const fwd_job *J = t->J;
    const es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    es__cpu_ctx *c = J->c;
    const int32_t n = f->n, d = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd;
    const bool last = il == hp->n_layer - 1;
    const size_t cache_off = cache_offset(J, il);
    es__work w;

    if (!layer_pre(t, il, il)) return false;

    /* In the last layer only the rows that want logits go on. */
    int32_t nr = n;
    const int32_t *rows = NULL;
    if (last && f->n_out < n) {
        nr = f->n_out;
        rows = f->out_rows;
        phase_begin(t, &w, OP_GATHER, 1, 1);
        for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
            gather_rows(c->x, d, rows, nr);
            gather_rows(c->q, qd, rows, nr);
        }
        phase_end(t, &w);
    }
    if (nr == 0) return true;

    if (f->alspec) {
        alspec_attention(t, il, cache_off, ES__SPEC_PASS_BOTH);
    } else {
        const es__attn a = {c->q,          qd,          c->k + cache_off,        c->v + cache_off, J->n_ctx,
                            hp->n_head,    hp->n_head_kv, hd,                    f->n_past,        n,
                            nr,            rows,        f->dfs_start,            f->dfs_end,
                            hp->attn_scale,             c->att,                  qd,
                            f->pos,        es__layer_window(hp, il),             hp->attn_softcap};
        const int64_t main_tasks = (int64_t)nr * hp->n_head; /* then the riding stream rows' (row, head) */
        /* chunks of whole kv heads of the first block: a chunk's queries share their keys' reads */
        const int64_t kv_run = (int64_t)ES__MIN(nr, ES__CPU_ATTN_ROWS) * (hp->n_head / hp->n_head_kv);
        phase_begin(t, &w, OP_ATTN, main_tasks + fz_rows(t, il) * hp->n_head, kv_run);
        for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
            if (lo < main_tasks)
                es__cpu_attention_range(J->k, &a, lo, ES__MIN(hi, main_tasks),
                                        c->visible + (size_t)t->ith * ES__CPU_ATTN_ROWS * (size_t)n);
            for (int64_t task = ES__MAX(lo, main_tasks); task < hi; task++)
                es__msa_fz_attend(J->msa, il, task - main_tasks, t->ith);
        }
        phase_end(t, &w);
    }
    layer_post(t, il, nr);
    return true;
}

/* Phases of one forward: the embedding, 12 per layer at most (9, 2 post-branch norms and ALSpec's
 * check), the final norm and the head. */
int32_t es__cpu_fwd_phases(int32_t n_layer) {
    return 12 * n_layer + 3;
}

/* The batch's embeddings into x and its RoPE table. */
static void embed(thr *t) {
    const fwd_job *J = t->J;
    const es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    es__cpu_ctx *c = J->c;
    const int32_t d = hp->n_embd;
    es__work w;
    phase_begin(t, &w, OP_EMBED, f->n, 1);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
        const es__cpu_mat *E = &J->w->tok_embd;
        for (int64_t i = lo; i < hi; i++) {
            float *xi = c->x + i * d;
            J->k->to_f32(E->type, (const uint8_t *)E->data + E->row_bytes * (size_t)f->tokens[i], xi, d);
            if (hp->embd_scale != 1.0f)
                for (int32_t j = 0; j < d; j++) xi[j] *= hp->embd_scale;
        }
        es__cpu_rope_rows(hp, J->n_ctx, f->pos + lo, hi - lo, c->rope + lo * es__rope_tables(hp) * (hp->n_rot / 2) * 2);
    }
    phase_end(t, &w);
}

/* The final norm and the output head over rows 0..n_out-1 of x (gathered in the last layer). */
static void head(thr *t) {
    const fwd_job *J = t->J;
    const es__fwd *f = J->f;
    const es__hparams *hp = J->hp;
    es__cpu_ctx *c = J->c;
    es__work w;
    norm_phase(t, c->x, J->w->output_norm, c->xn, f->n_out, -1, hp->n_layer, FZ_ATTN_NORM);
    const mm_seg head = {&J->w->output, f->logits};
    if (hp->final_softcap <= 0.0f && hp->logit_mul == 1.0f) {
        mm_phase(t, OP_HEAD, &head, 1, c->xn, f->n_out);
        return;
    }
    /* scaled (granite) or soft-capped (gemma2) logits: each thread finishes the rows of the
     * vocabulary it computed */
    const int64_t V = J->w->output.n_out;
    phase_begin(t, &w, OP_HEAD, V, ROW_ALIGN);
    for (int64_t lo, hi; es__work_next(&w, &lo, &hi);) {
        mm_rows(t, &head, 1, c->xn, f->n_out, lo, hi);
        for (int32_t i = 0; i < f->n_out; i++) es__cpu_logits_finish(hp, f->logits + i * V + lo, hi - lo);
    }
    phase_end(t, &w);
}

static void fwd_thread(void *arg, int ith, int nth) {
    const fwd_job *J = arg;
    thr t = {J, ith, nth, 0, 0, 0, 0.0};
    embed(&t);
    for (int32_t il = 0; il < J->hp->n_layer; il++) {
        if (J->msa) es__msa_before_layer(J->msa, il, ith, nth);
        if (!layer(&t, il)) return;
    }
    if (J->f->n_out > 0) head(&t);
}

/* One part of a decode token over two contexts (es__alspec_part): the caller put the part's
 * inputs into x and att, and the token's RoPE table. */
static void part_thread(void *arg, int ith, int nth) {
    const fwd_job *J = arg;
    const es__alspec_part *p = J->f->part;
    thr t = {J, ith, nth, 0, 0, 0, 0.0};
    if (p->op != ES__AL_ENTER) {
        alspec_attention(&t, p->layer, cache_offset(J, p->layer),
                         p->op == ES__AL_SPEC ? ES__SPEC_PASS_SPEC : ES__SPEC_PASS_EXACT);
        return;
    }
    if (p->layer < 0)
        embed(&t);
    else
        layer_post(&t, p->layer, 1);
    if (p->layer + 1 < J->hp->n_layer)
        layer_pre(&t, p->layer + 1, -1);
    else
        head(&t);
}

/* Adds one forward call's phase times to the backend's profile, ops in first-seen order. */
static void add_profile(es_backend *b, const es_profile_entry *prof) {
    for (int op = 0; op < OP_COUNT; op++) {
        if (!prof[op].calls) continue;
        int32_t k = 0;
        while (k < b->n_prof && strcmp(b->prof[k].op, op_names[op]) != 0) k++;
        if (k == b->n_prof) {
            if (b->n_prof == (int32_t)ES__ARRAY_LEN(b->prof)) continue;
            b->prof[b->n_prof++] = (es_profile_entry){.op = op_names[op]};
        }
        b->prof[k].calls += prof[op].calls;
        b->prof[k].ms += prof[op].ms;
    }
}

/* ALSpec's scratch in the context, grown to a token at n keys with chunk S (alspec_attention). */
static es_status alspec_scratch(es_context *ctx, int32_t S, int32_t n) {
    const es__hparams *hp = &ctx->model->hp;
    es__cpu_ctx *c = ctx->impl;
    int32_t s2 = n;
    es__spec_window(n, S, &s2);
    const size_t pf = (size_t)((S + n - s2) / ES__ATTN_TILE + 1) * (size_t)(hp->head_dim + 2);
    if (pf > c->al_part_floats) {
        es__free(NULL, c->al_part);
        c->al_part = es__malloc(NULL, sizeof(float) * (size_t)hp->n_head * pf);
        c->al_part_floats = c->al_part ? pf : 0;
    }
    if (!c->al_spec) c->al_spec = es__malloc(NULL, sizeof(float) * (size_t)hp->n_head * (size_t)hp->head_dim);
    if (!c->al_e2) c->al_e2 = es__malloc(NULL, sizeof(double) * 2 * (size_t)hp->n_head);
    if (c->al_part && c->al_spec && c->al_e2) return ES_OK;
    return es__fail(&ctx->backend->err, ES_ERR_OUT_OF_MEMORY, "cpu forward: out of memory for ALSpec's scratch");
}

/* One part of a decode token (es__alspec_part): its inputs in, the phases, its outputs out. The
 * attention parts run alspec_attention ungated (lambda 0): the caller decides. An attention part
 * completes the speculation part the context ran last (the core checks the order) on the
 * partials it left. */
static es_status cpu_part(es_context *ctx, const es__fwd *f, fwd_job *J) {
    const es__alspec_part *p = f->part;
    const es__hparams *hp = &ctx->model->hp;
    es__cpu_ctx *c = ctx->impl;
    const size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim, d = (size_t)hp->n_embd;
    es__cpu_state *B = ctx->backend->impl;
    es__spec_verdict *v = es__calloc(NULL, (size_t)hp->n_layer, sizeof *v);
    ES_RETURN_IF(!v, &ctx->backend->err, ES_ERR_OUT_OF_MEMORY, "cpu forward: out of memory for an ALSpec part");
    es__fwd fp = *f;
    const es__alspec_call al = {p->chunk, 0.0f, NULL, v};
    es_status s = ES_OK;
    if (p->op != ES__AL_ENTER) {
        fp.alspec = &al;
        J->f = &fp;
        s = alspec_scratch(ctx, p->chunk, f->n_past + 1);
    } else if (p->layer >= 0) {
        memcpy(c->x, p->x_in, sizeof(float) * d);
        memcpy(c->att, p->att_in, sizeof(float) * qd);
        es__cpu_rope_rows(hp, J->n_ctx, f->pos, 1, c->rope);
    }
    if (s == ES_OK) {
        es__sched_reset(c->sched, es__pool_size(B->pool), c->n_phases);
        es__pool_run(B->pool, part_thread, J);
        ctx->backend->stats.n_forward++;
    }
    if (s == ES_OK && p->op == ES__AL_SPEC) {
        *p->verdict = v[p->layer];
        memcpy(p->spec_out, c->al_spec, sizeof(float) * qd);
    } else if (s == ES_OK && p->op == ES__AL_ATTN) {
        *p->verdict = v[p->layer];
        memcpy(p->exact_out, c->att, sizeof(float) * qd);
    } else if (s == ES_OK && p->x_out && p->layer + 1 < hp->n_layer) {
        memcpy(p->x_out, c->x, sizeof(float) * d);
    }
    es__free(NULL, v);
    return s;
}

es_status es__cpu_forward(es_context *ctx, const es__fwd *f) {
    es__cpu_state *B = ctx->backend->impl;
    es_backend *b = ctx->backend;
    es_profile_entry prof[OP_COUNT];
    memset(prof, 0, sizeof prof);
    atomic_int stop_at;
    atomic_init(&stop_at, -1);
    fwd_job J = {f,    &ctx->model->hp, ctx->weights, ctx->impl, B->kern, B->pool, ctx->n_ctx, NULL, b->profile ? prof : NULL,
                 ctx, &stop_at};
    if (f->part) return cpu_part(ctx, f, &J);
    if (f->alspec) ES_TRY(alspec_scratch(ctx, f->alspec->chunk, f->n_past + 1));
    /* Speculative Streaming works on a copy of the call: pruning narrows it to the survivors */
    es__fwd ss_f;
    es__msa_job msa;
    if (f->n_streams > 0 || f->prune_threshold > 0.0f) {
        ss_f = *f;
        ES_TRY(es__msa_prepare(ctx, &ss_f, &msa));
        J.f = &ss_f;
        J.msa = &msa;
    }
    es__cpu_ctx *c = ctx->impl;
    es__sched_reset(c->sched, es__pool_size(B->pool), c->n_phases);
    es__pool_run(B->pool, fwd_thread, &J);
    b->stats.n_forward++;
    if (J.prof) add_profile(b, prof);
    const int stopped = atomic_load(&stop_at);
    if (stopped >= 0)
        return es__fail(&b->err, ES_ERR_CANCELLED, "forward cancelled by es_context_abort before layer %d of %d", stopped,
                        ctx->model->hp.n_layer);
    return ES_OK;
}
