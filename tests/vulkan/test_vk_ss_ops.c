/* test_vk_ss_ops: Speculative Streaming's Vulkan kernels (lib/vulkan/msa_vk.c records them; the
 * CPU twin is lib/cpu/msa.c) one op at a time, on fresh random inputs with odd shapes, in every
 * feature configuration. Outputs start poisoned with NaN and NaN never passes, so an element a
 * kernel misses fails; what a kernel must not touch (other rows, padding, cache slots) must come
 * back with the poison's bits. Bounds:
 *   ss_rows: exact (copies, gathers of listed rows, and Eq. 3's start x + p, one f32 addition on
 *   both sides).
 *   ss_rope: the Q, K, V biases (qwen2; some cases) added as the CPU adds them, then the CPU
 *     backend's es__cpu_rope_table and es__cpu_rope_token at the node's position, within 1e-6 of
 *     the row's largest |x| (NORM and NEOX, partial rotation); V exact.
 *   qk_norm_rope in the stream pass (qwen3's per-head Q and K norms, which replace ss_rope there):
 *     es__cpu_qkv_prepare at the node's position within 2e-6 of the row's largest value (the
 *     forward's token and fused stream rows: test_vk_ops); V (with its biases) exact.
 *   ss_attn (Eq. 2): a double-precision reference written here from the equation, within 2e-5 of
 *     the largest |v| (tree attention's bound; GQA, random trees and forests, positions past
 *     unaligned n_past, head dimensions 4 to 256, gemma2's soft-capping and sliding windows that
 *     cut the committed slots or the tree); a node's rows are the same bits from the stream
 *     pass (one node) and from the fused forward's dispatch (every node); also with a subgroup per
 *     (stream row, head), a GPU's attention (policy.h attn_team), where the device has subgroup
 *     arithmetic.
 *   the LoRA epilogue of mul_mat (y = W x + B R on stream rows only; store, add (also times a
 *     residual scale, granite's, main and stream rows alike), SwiGLU, and the RoPE epilogue whose
 *     stream rows keep Q, K and V): against a double reference on the dequantised weights within
 *     2e-6 of sum |w x| + sum |b r| (test_vk_mul_mat's bound; for SwiGLU and RoPE propagated as
 *     there), against the CPU backend's ops (es__cpu_matmul, the kernels' dot for B R as
 *     lib/cpu/msa.c adds it, es__cpu_swiglu, es__cpu_add, es__cpu_rope_token) within twice that; the main rows bit-identical to the plain kernel's. */
#include "backend_vk.h"
#include "cpu/kern.h"
#include "cpu/ops.h"
#include "cpu/opsi.h"
#include "oprun.h"
#include "qk_ref.h"
#include "vk_attn_variants.h"

#define ROPE_BOUND 1e-6
#define ATTN_BOUND 2e-5
#define MM_BOUND 2e-6

/* a and b hold the same bits */
static bool same(const float *a, const float *b, size_t n) {
    return memcmp(a, b, sizeof *a * n) == 0;
}

static float *copy_vec(const float *x, size_t n) {
    float *y = malloc(sizeof *y * (n ? n : 1));
    memcpy(y, x, sizeof *y * n);
    return y;
}

/* ---- ss_rows */

/* Checks y after a run from y0: rows y_row0 .. y_row0 + n_rows - 1 hold want's first width floats
 * (rows of width), everything else is y0 bit for bit. */
static bool rows_ok(const float *y, const float *y0, const float *want, uint32_t y_rows, uint32_t stride,
                    uint32_t y_row0, uint32_t n_rows, uint32_t width) {
    for (uint32_t r = 0; r < y_rows; r++) {
        const bool written = r >= y_row0 && r < y_row0 + n_rows;
        const size_t o = (size_t)r * stride;
        if (written && !same(y + o, want + (size_t)(r - y_row0) * width, width)) return false;
        if (!same(y + o + (written ? width : 0), y0 + o + (written ? width : 0), stride - (written ? width : 0)))
            return false;
    }
    return true;
}

static void test_ss_rows(es_backend *b, test_rng *r, const char *cfg) {
    static const uint32_t widths[][2] = {{4, 0}, {36, 4}, {1000, 24}}; /* width, padding */
    for (size_t wi = 0; wi < ES__ARRAY_LEN(widths); wi++)
        for (uint32_t mode = 0; mode < 4; mode++) {
            const uint32_t width = widths[wi][0], stride = width + widths[wi][1], g = 3, n = 5;
            const uint32_t p_stride = width + 8, y_rows = mode == 2 ? n + n * g + 2 : 7;
            const uint32_t n_rows = mode == 2 ? n * g : mode == 1 ? g : mode == 3 ? 3 : n - 1, y_row0 = mode == 2 ? n : 0;
            const int32_t listed[3] = {1, 2 + (int32_t)(test_rng_u64(r) % 2), 4}; /* mode 3: ascending, as parents */
            const uint32_t node = (uint32_t)(test_rng_u64(r) % n);
            float *x = rand_vec(r, (size_t)n * stride, 4.0f), *p = nan_vec((size_t)g * p_stride);
            float *y = nan_vec((size_t)y_rows * stride), *want = malloc(sizeof *want * n_rows * width);
            for (uint32_t j = 0; j < g; j++)
                for (uint32_t c = 0; c < width; c++) p[(size_t)j * p_stride + c] = test_rng_uniform(r);
            if (mode == 2) /* the forward's rows buffer: the nodes' rows, then their streams' */
                for (uint32_t i = 0; i < n; i++) memcpy(y + (size_t)i * stride, x + (size_t)i * stride, sizeof *y * width);
            float *y0 = copy_vec(y, (size_t)y_rows * stride);
            for (uint32_t k = 0; k < n_rows; k++)
                for (uint32_t c = 0; c < width; c++) {
                    const uint32_t src = mode == 0 ? k : mode == 1 ? node : mode == 3 ? (uint32_t)listed[k] : k / g;
                    const float xv = x[(size_t)src * stride + c];
                    want[(size_t)k * width + c] =
                        mode == 0 || mode == 3 ? xv : xv + p[(size_t)(mode == 1 ? k : k % g) * p_stride + c];
                }
            const es__vk_ss_rows_call call = {mode, g, y_row0, n_rows, node, width, stride, p_stride, stride, listed};
            CHECK_OK(es__vk_run_ss_rows(b, &call, mode == 2 ? NULL : x, n, p, g, y, y_rows));
            CHECKF(rows_ok(y, y0, want, y_rows, stride, y_row0, n_rows, width),
                   "[%s] ss_rows mode %u width %u stride %u: rows differ or untouched floats changed", cfg, mode, width,
                   stride);
            free(x), free(p), free(y), free(y0), free(want);
        }
}

/* ---- ss_rope */

static void test_ss_rope(es_backend *b, test_rng *r, const char *cfg) {
    static const es__vk_op_rope cases[] = {{4, 2, 16, 16, ES_ROPE_NORM, 10000.0f, 1.0f},
                                           {3, 3, 12, 8, ES_ROPE_NEOX, 10000.0f, 0.75f},
                                           {2, 1, 64, 32, ES_ROPE_NORM, 500.0f, 1.0f},
                                           {2, 2, 8, 2, ES_ROPE_NEOX, 10000.0f, 1.0f},
                                           {6, 2, 4, 4, ES_ROPE_NEOX, 1e6f, 1.0f}};
    for (size_t c = 0; c < ES__ARRAY_LEN(cases); c++) {
        const es__vk_op_rope *g = &cases[c];
        const uint32_t width = (g->n_head + 2 * g->n_head_kv) * g->hd, stride = width + 5, n_rows = 3, n = 9;
        int32_t end[9];
        random_tree(r, (int32_t)n, end, 0);
        const es__vk_op_batch batch = {301, n, end, NULL, (uint32_t)(test_rng_u64(r) % n)};
        const int32_t pos = (int32_t)batch.n_past + tree_depth(end, (int32_t)batch.node);
        float *qkv = rand_vec(r, (size_t)n_rows * stride, 1.0f);
        for (uint32_t t = 0; t < n_rows; t++)
            for (uint32_t k = width; k < stride; k++) qkv[(size_t)t * stride + k] = NAN;
        float *bias = c % 2 ? rand_vec(r, width, 0.5f) : NULL; /* qwen2's biases on odd cases */
        float *ref = copy_vec(qkv, (size_t)n_rows * stride), *cs = malloc(sizeof *cs * g->n_rot);
        for (uint32_t t = 0; bias && t < n_rows; t++)
            for (uint32_t k = 0; k < width; k++) ref[(size_t)t * stride + k] += bias[k];
        CHECK_OK(es__vk_run_ss_rope(b, g, &batch, qkv, n_rows, stride, bias));
        const es__rope rope = es__rope_plain((int32_t)g->n_rot, g->freq_base, g->freq_scale);
        es__cpu_rope_table(&rope, &pos, 1, false, cs);
        double d = 0;
        bool rest_same = true;
        for (uint32_t t = 0; t < n_rows; t++) {
            float *row = ref + (size_t)t * stride, *out = qkv + (size_t)t * stride;
            const uint32_t qk = (g->n_head + g->n_head_kv) * g->hd;
            const double scale = max_abs(row, qk);
            es__cpu_rope_token(row, g->n_head, g->hd, g->n_rot, cs, g->type);
            es__cpu_rope_token(row + g->n_head * g->hd, g->n_head_kv, g->hd, g->n_rot, cs, g->type);
            d = fmax(d, diff(out, row, qk, scale));
            rest_same = rest_same && same(out + qk, row + qk, stride - qk); /* V and padding */
        }
        CHECKF(d <= ROPE_BOUND, "[%s] ss_rope case %zu (hd %u, n_rot %u): error %.3g > %.1g", cfg, c, g->hd, g->n_rot, d,
               ROPE_BOUND);
        CHECKF(rest_same, "[%s] ss_rope case %zu changed V or the padding", cfg, c);
        free(qkv), free(ref), free(cs), free(bias);
    }
}

/* ---- qk_norm_rope in the stream pass */

static void test_ss_qk_norm(es_backend *b, test_rng *r, const char *cfg) {
    static const es__vk_op_rope cases[] = {{4, 2, 32, 32, ES_ROPE_NEOX, 1e6f, 1.0f},
                                           {3, 3, 12, 8, ES_ROPE_NEOX, 1e4f, 0.75f},
                                           {2, 1, 128, 128, ES_ROPE_NEOX, 1e6f, 1.0f},
                                           {4, 2, 16, 16, ES_ROPE_NORM, 1e4f, 1.0f}};
    for (size_t c = 0; c < ES__ARRAY_LEN(cases); c++) {
        const es__vk_op_rope *g = &cases[c];
        const uint32_t qd = g->n_head * g->hd, kvd = g->n_head_kv * g->hd, width = qd + 2 * kvd;
        const uint32_t stride = width + 4, n_rows = 3, n = 9;
        int32_t end[9];
        random_tree(r, (int32_t)n, end, 0);
        const es__vk_op_batch batch = {301, n, end, NULL, (uint32_t)(test_rng_u64(r) % n)};
        const int32_t pos = (int32_t)batch.n_past + tree_depth(end, (int32_t)batch.node);
        float *qkv = rand_vec(r, (size_t)n_rows * stride, 3.0f), *bias = c % 2 ? rand_vec(r, width, 0.5f) : NULL;
        for (uint32_t t = 0; t < n_rows; t++)
            for (uint32_t k = width; k < stride; k++) qkv[(size_t)t * stride + k] = NAN;
        float *qn = rand_vec(r, g->hd, 1.5f), *kn = rand_vec(r, g->hd, 1.5f), *ref = copy_vec(qkv, (size_t)n_rows * stride);
        es__cpu_layer L;
        memset(&L, 0, sizeof L);
        if (bias) L.bq = bias, L.bk = bias + qd, L.bv = bias + qd + kvd;
        L.q_norm = qn;
        L.k_norm = kn;
        /* the stream pass: every row a stream row of the step's node, nothing to the cache */
        const es__vk_qk_norm_call call = {g, n_rows, stride, bias, qn, kn, 1e-6f, 0, 0, 0, NULL, NULL};
        CHECK_OK(es__vk_run_qk_norm_rope(b, &call, &batch, qkv));
        double d = 0;
        bool v_same = true;
        for (uint32_t t = 0; t < n_rows; t++) {
            float *want = ref + (size_t)t * stride, *out = qkv + (size_t)t * stride;
            cpu_qk_prepare(g, &L, 1e-6f, pos, want);
            d = fmax(d, diff(out, want, qd + kvd, max_abs(want, qd + kvd)));
            v_same = v_same && same(out + qd + kvd, want + qd + kvd, stride - qd - kvd); /* V and padding */
        }
        CHECKF(d <= 2e-6, "[%s] stream pass qk_norm_rope case %zu (hd %u, n_rot %u): error %.3g > 2e-6", cfg, c, g->hd,
               g->n_rot, d);
        CHECKF(v_same, "[%s] stream pass qk_norm_rope case %zu: V or the padding differ", cfg, c);
        free(qkv), free(bias), free(qn), free(kn), free(ref);
    }
}

/* ---- ss_attn */

typedef struct attn_case {
    uint32_t n_ctx, n_head, n_head_kv, hd, n_past, n, g;
    int chain;
    uint32_t window; /* 0: none */
    float softcap;   /* 0: none */
} attn_case;

/* Eq. 2 in double: stream j of node a (its rows base + a g + s of qkv, s <= j) attends to the
 * committed slots, the slots of a's ancestors and a itself (those at positions > p - window, a at
 * p), and to its streams 0..j; scores soft-capped when the case says. */
static void ss_attn_ref(const attn_case *c, const int32_t *end, const float *qkv, uint32_t stride, uint32_t base,
                        const float *kc, const float *vc, uint32_t a, uint32_t j, double *o) {
    const uint32_t hd = c->hd, kvd = c->n_head_kv * hd, cap = c->n_past + c->n + c->g;
    double *sc = malloc(sizeof *sc * cap);
    const float **keys = malloc(sizeof *keys * cap), **vals = malloc(sizeof *vals * cap);
    for (uint32_t h = 0; h < c->n_head; h++) {
        const uint32_t kvh = h / (c->n_head / c->n_head_kv);
        const float *q = qkv + (size_t)(base + a * c->g + j) * stride + h * hd;
        uint32_t nk = 0;
        const int64_t p = (int64_t)c->n_past + tree_depth(end, (int32_t)a);
        for (uint32_t s = 0; s < c->n_past + c->n; s++) {
            const uint32_t i = s - c->n_past; /* batch token of slot s */
            if (s >= c->n_past && !(i <= a && (int32_t)a <= end[i])) continue;
            const int64_t ps = s < c->n_past ? (int64_t)s : (int64_t)c->n_past + tree_depth(end, (int32_t)i);
            if (c->window > 0 && ps <= p - (int64_t)c->window) continue;
            keys[nk] = kc + ((size_t)kvh * c->n_ctx + s) * hd;
            vals[nk++] = vc + ((size_t)kvh * c->n_ctx + s) * hd;
        }
        for (uint32_t s = 0; s <= j; s++) {
            const float *row = qkv + (size_t)(base + a * c->g + s) * stride + c->n_head * hd;
            keys[nk] = row + kvh * hd;
            vals[nk++] = row + kvd + kvh * hd;
        }
        double mx = -INFINITY, sum = 0;
        for (uint32_t k = 0; k < nk; k++) {
            double dot = 0;
            for (uint32_t e = 0; e < hd; e++) dot += (double)q[e] * keys[k][e];
            sc[k] = dot / sqrt((double)hd);
            if (c->softcap > 0) sc[k] = c->softcap * tanh(sc[k] / c->softcap);
            mx = fmax(mx, sc[k]);
        }
        for (uint32_t k = 0; k < nk; k++) sum += sc[k] = exp(sc[k] - mx);
        for (uint32_t e = 0; e < hd; e++) {
            double acc = 0;
            for (uint32_t k = 0; k < nk; k++) acc += sc[k] * vals[k][e];
            o[h * hd + e] = acc / sum;
        }
    }
    free(sc), free(keys), free(vals);
}

/* Error of out's rows base + a g + j against the reference, and whether every other float of out
 * (main rows, padding) kept its poison. */
static double ss_attn_check(const attn_case *c, const int32_t *end, const float *qkv, uint32_t qs, const float *kc,
                            const float *vc, const float *out, const float *out0, uint32_t o_rows, uint32_t os,
                            uint32_t base, double vmax, bool *rest_same) {
    const uint32_t qd = c->n_head * c->hd;
    double *o = malloc(sizeof *o * qd), worst = 0;
    *rest_same = true;
    for (uint32_t row = 0; row < o_rows; row++) {
        const float *got = out + (size_t)row * os;
        const bool stream = row >= base && row < base + c->n * c->g;
        if (!stream) {
            *rest_same = *rest_same && same(got, out0 + (size_t)row * os, os);
            continue;
        }
        const uint32_t a = (row - base) / c->g, j = (row - base) % c->g;
        ss_attn_ref(c, end, qkv, qs, base, kc, vc, a, j, o);
        for (uint32_t e = 0; e < qd; e++) worst = fmax(worst, norm_err(got[e], o[e], vmax));
        *rest_same = *rest_same && same(got + qd, out0 + (size_t)row * os + qd, os - qd);
    }
    free(o);
    return worst;
}

/* The stream pass of node a (its g rows copied to rows 0..), compared bit for bit with the fused
 * dispatch's rows of a in fused ([.][os], from row base). */
static bool ss_attn_pass_same(es_backend *b, const attn_case *c, const es__vk_ss_attn_call *fc, const int32_t *end,
                              const float *qkv, const float *kc, const float *vc, const float *fused, uint32_t a) {
    const uint32_t qs = fc->qkv_stride, os = fc->o_stride, qd = c->n_head * c->hd;
    const uint32_t g = a + 1 == c->n && c->g > 1 ? c->g - 1 : c->g; /* the pass may run fewer streams */
    float *q = copy_vec(qkv + (size_t)(fc->row0 + a * c->g) * qs, (size_t)g * qs), *out = nan_vec((size_t)g * os);
    es__vk_ss_attn_call pc = *fc;
    pc.g = 0, pc.n_rows = g, pc.row0 = 0;
    const es__vk_op_batch batch = {c->n_past, c->n, end, NULL, a};
    CHECK_OK(es__vk_run_ss_attn(b, &pc, &batch, q, g, kc, vc, out, g));
    bool ok = true;
    for (uint32_t j = 0; j < g; j++)
        ok = ok && same(out + (size_t)j * os, fused + (size_t)(fc->row0 + a * c->g + j) * os, qd);
    free(q), free(out);
    return ok;
}

static void test_ss_attn(es_backend *b, test_rng *r, const char *cfg) {
    static const attn_case cases[] = {{40, 2, 2, 8, 0, 1, 1, 1, 0, 0},       {64, 4, 2, 12, 7, 5, 3, 0, 0, 0},
                                      {600, 4, 1, 32, 301, 9, 4, 0, 0, 0},   {300, 3, 3, 64, 250, 6, 2, 1, 0, 0},
                                      {100, 6, 2, 4, 33, 13, 3, 0, 0, 0},    {300, 2, 1, 256, 37, 3, 2, 0, 0, 0},
                                      /* gemma2: windows inside the committed slots, and inside the tree */
                                      {600, 4, 2, 32, 301, 9, 4, 0, 40, 2.0f}, {64, 4, 2, 12, 7, 9, 3, 1, 3, 0.5f},
                                      {100, 2, 1, 16, 33, 13, 2, 0, 2, 0}};
    for (size_t ci = 0; ci < ES__ARRAY_LEN(cases); ci++) {
        const attn_case *c = &cases[ci];
        const uint32_t hd = c->hd, width = (c->n_head + 2 * c->n_head_kv) * hd, qs = width + 4;
        const uint32_t os = c->n_head * hd + 8, rows = c->n + c->n * c->g; /* main rows, then streams */
        int32_t *end = malloc(sizeof *end * c->n);
        random_tree(r, (int32_t)c->n, end, c->chain);
        /* the batch's keys in slots n_past.., NaN beyond them: a stray read fails */
        const size_t cache = (size_t)c->n_head_kv * c->n_ctx * hd;
        float *kc = rand_vec(r, cache, 1.0f), *vc = rand_vec(r, cache, 1.0f);
        for (size_t i = 0; i < cache; i++)
            if ((i / hd) % c->n_ctx >= c->n_past + c->n) kc[i] = vc[i] = NAN;
        float *qkv = rand_vec(r, (size_t)rows * qs, 1.5f);
        for (size_t i = 0; i < (size_t)c->n * qs; i++) qkv[i] = NAN; /* the main rows are not the streams' */
        double vmax = 0;
        for (size_t i = 0; i < cache; i++) vmax = isnan(vc[i]) ? vmax : fmax(vmax, fabs(vc[i]));
        vmax = fmax(vmax, max_abs(qkv + (size_t)c->n * qs, (size_t)c->n * c->g * qs));
        float *out = nan_vec((size_t)rows * os), *out0 = copy_vec(out, (size_t)rows * os);
        const es__vk_ss_attn_call fc = {c->n_head, c->n_head_kv, hd, c->n_ctx, c->g, c->n * c->g, c->n, qs, os,
                                        1.0f / sqrtf((float)hd), c->window, c->softcap};
        const es__vk_op_batch batch = {c->n_past, c->n, end, NULL, 0};
        CHECK_OK(es__vk_run_ss_attn(b, &fc, &batch, qkv, rows, kc, vc, out, rows));
        bool rest_same;
        const double d = ss_attn_check(c, end, qkv, qs, kc, vc, out, out0, rows, os, c->n, vmax, &rest_same);
        CHECKF(d <= ATTN_BOUND, "[%s] ss_attn case %zu (n_past %u, n %u, g %u, hd %u): error %.3g > %.1g", cfg, ci,
               c->n_past, c->n, c->g, hd, d, ATTN_BOUND);
        CHECKF(rest_same, "[%s] ss_attn case %zu wrote outside the stream rows", cfg, ci);
        for (uint32_t a = 0; a < c->n; a += c->n > 4 ? c->n / 3 : 1)
            CHECKF(ss_attn_pass_same(b, c, &fc, end, qkv, kc, vc, out, a),
                   "[%s] ss_attn case %zu: the stream pass of node %u differs from the fused rows", cfg, ci, a);
        free(end), free(kc), free(vc), free(qkv), free(out), free(out0);
    }
}

/* ---- the LoRA epilogue of mul_mat */

typedef struct lora_case {
    int type;
    uint32_t rows, K, n, t0, epi, rank;
    const es__vk_op_rope *rope; /* with ES__EPI_ROPE_KV: the geometry (rows follow from it) */
    uint32_t g;                 /* ES__EPI_ROPE_KV: streams per token (t0 tokens)          */
    float scale;                /* ES__EPI_ADD: y += scale (W x + B R) (granite's residual */
                                /* scale; 0: 1)                                            */
} lora_case;

/* The projection row `row` of token t in double: W x (+ B R on stream rows) and its scale
 * sum |w x| + sum |b r|. */
static double proj_ref(const lora_case *c, const float *deq, const float *x, const float *lb, const float *lr,
                       uint32_t t, uint32_t row, double *scale) {
    double y = 0, s = 0;
    for (uint32_t k = 0; k < c->K; k++) {
        const double p = (double)deq[(size_t)row * c->K + k] * x[(size_t)t * c->K + k];
        y += p, s += fabs(p);
    }
    for (uint32_t k = 0; t >= c->t0 && k < c->rank; k++) {
        const double p = (double)lb[(size_t)row * c->rank + k] * lr[(size_t)(t - c->t0) * c->rank + k];
        y += p, s += fabs(p);
    }
    *scale = s;
    return y;
}

/* The same on the CPU backend: es__cpu_matmul's rows plus B R through the kernels' dot, as
 * lib/cpu/msa.c's lora_rows adds it: full[n][rows]. */
static void proj_cpu(const lora_case *c, const void *w, const float *x, const float *lb, const float *lr, float *full) {
    CHECK_OK(es__cpu_matmul(NULL, (es__dtype)c->type, w, c->K, c->rows, x, c->n, full, NULL));
    const es__kern *k = es__kern_best();
    for (uint32_t t = c->t0; t < c->n; t++)
        for (uint32_t row = 0; row < c->rows; row++)
            full[(size_t)t * c->rows + row] += k->dot(lb + (size_t)row * c->rank, lr + (size_t)(t - c->t0) * c->rank, c->rank);
}

/* Errors of y ([n][cols]) for the store, add and SwiGLU epilogues: against the double reference
 * (err[0]) and the CPU (err[1]), each normalised by the propagated scale. */
static void check_plain_epi(const lora_case *c, const float *deq, const float *x, const float *lb, const float *lr,
                            const float *full, const float *y0, const float *y, double err[2]) {
    const uint32_t cols = c->epi == ES__EPI_SWIGLU ? c->rows / 2 : c->rows;
    err[0] = err[1] = 0;
    for (uint32_t t = 0; t < c->n; t++)
        for (uint32_t col = 0; col < cols; col++) {
            double scale, ref, cpu;
            const float *ft = full + (size_t)t * c->rows;
            if (c->epi == ES__EPI_SWIGLU) { /* first-order error of silu(g) u, as test_vk_mul_mat */
                double gs, us;
                const double gv = proj_ref(c, deq, x, lb, lr, t, 2 * col, &gs), u = proj_ref(c, deq, x, lb, lr, t, 2 * col + 1, &us);
                const double sg = gv / (1 + exp(-gv));
                scale = 1.1 * gs * fabs(u) + fabs(sg) * us + fabs(sg * u);
                ref = sg * u;
                float o;
                es__cpu_swiglu(&ft[2 * col], &ft[2 * col + 1], 1, &o);
                cpu = o;
            } else {
                ref = proj_ref(c, deq, x, lb, lr, t, col, &scale);
                cpu = ft[col];
                if (c->epi == ES__EPI_ADD) { /* as the CPU forward's x += s y */
                    const float *y0t = y0 + (size_t)t * cols, s = c->scale != 0.0f ? c->scale : 1.0f;
                    float o;
                    if (c->scale == 0.0f)
                        es__cpu_add(&y0t[col], &ft[col], 1, &o);
                    else
                        o = y0t[col] + s * ft[col];
                    ref = y0t[col] + s * ref, scale = fabs(y0t[col]) + s * scale, cpu = o;
                }
            }
            err[0] = fmax(err[0], norm_err(y[(size_t)t * cols + col], ref, scale));
            err[1] = fmax(err[1], norm_err(y[(size_t)t * cols + col], cpu, scale));
        }
}

/* Expected contents of one output (y or a cache) of the RoPE epilogue: per float, whether the op
 * writes it, the double reference and its scale, and the CPU's value. */
typedef struct expect {
    size_t n;
    bool *w;
    double *ref, *scale;
    float *cpu;
} expect;

static void expect_init(expect *e, size_t n) {
    e->n = n;
    e->w = calloc(n, sizeof *e->w);
    e->ref = calloc(n, sizeof *e->ref);
    e->scale = calloc(n, sizeof *e->scale);
    e->cpu = calloc(n, sizeof *e->cpu);
}

static void expect_free(expect *e) {
    free(e->w), free(e->ref), free(e->scale), free(e->cpu);
}

static void expect_set(expect *e, size_t i, double ref, double scale, float cpu) {
    e->w[i] = true, e->ref[i] = ref, e->scale[i] = scale, e->cpu[i] = cpu;
}

/* err[0], err[1] against the reference and the CPU; false when an unwritten float changed. */
static bool expect_check(const expect *e, const float *got, const float *before, double err[2]) {
    bool rest = true;
    for (size_t i = 0; i < e->n; i++) {
        if (!e->w[i]) {
            rest = rest && same(&got[i], &before[i], 1);
            continue;
        }
        err[0] = fmax(err[0], norm_err(got[i], e->ref[i], e->scale[i]));
        err[1] = fmax(err[1], norm_err(got[i], e->cpu[i], e->scale[i]));
    }
    return rest;
}

/* RoPE of n_heads heads of v (double) with the CPU's cos/sin, and the scales of the results. */
static void rope_ref(double *v, double *sc, uint32_t n_heads, const es__vk_op_rope *g, const float *cs) {
    const uint32_t half = g->n_rot / 2;
    for (uint32_t h = 0; h < n_heads; h++)
        for (uint32_t i = 0; i < half; i++) {
            const uint32_t i0 = h * g->hd + (g->type == ES_ROPE_NEOX ? i : 2 * i);
            const uint32_t i1 = i0 + (g->type == ES_ROPE_NEOX ? half : 1);
            const double a = v[i0], b = v[i1], c = cs[2 * i], s = cs[2 * i + 1], scale = sc[i0] + sc[i1];
            v[i0] = a * c - b * s, v[i1] = a * s + b * c;
            sc[i0] = sc[i1] = scale;
        }
}

/* Where the RoPE epilogue puts row t's values (Q, K, V in head order): token rows' Q in y and K,
 * V in slot n_past + t of the caches; stream rows' all in y. */
static void rope_expect(const lora_case *c, const float *deq, const float *x, const float *lb, const float *lr,
                        const float *full, const int32_t *pos, uint32_t n_past, uint32_t n_ctx, expect *ey,
                        expect *ek, expect *ev) {
    const es__vk_op_rope *g = c->rope;
    const uint32_t qr = g->n_head * g->hd, kr = g->n_head_kv * g->hd;
    double *ref = malloc(sizeof *ref * c->rows), *sc = malloc(sizeof *sc * c->rows);
    float *cpu = malloc(sizeof *cpu * c->rows), *cs = malloc(sizeof *cs * g->n_rot);
    for (uint32_t t = 0; t < c->n; t++) {
        const bool stream = t >= c->t0;
        const es__rope rope = es__rope_plain((int32_t)g->n_rot, g->freq_base, g->freq_scale);
        es__cpu_rope_table(&rope, &pos[stream ? (t - c->t0) / c->g : t], 1, false, cs);
        for (uint32_t row = 0; row < c->rows; row++) ref[row] = proj_ref(c, deq, x, lb, lr, t, row, &sc[row]);
        memcpy(cpu, full + (size_t)t * c->rows, sizeof *cpu * c->rows);
        rope_ref(ref, sc, g->n_head + g->n_head_kv, g, cs); /* K heads follow Q's */
        es__cpu_rope_token(cpu, g->n_head, g->hd, g->n_rot, cs, g->type);
        es__cpu_rope_token(cpu + qr, g->n_head_kv, g->hd, g->n_rot, cs, g->type);
        for (uint32_t row = 0; row < c->rows; row++) {
            const uint32_t kv = row < qr + kr ? row - qr : row - qr - kr; /* within the K or V part */
            const size_t slot = ((size_t)(kv / g->hd) * n_ctx + n_past + t) * g->hd + kv % g->hd;
            if (row < qr || stream)
                expect_set(ey, (size_t)t * c->rows + row, ref[row], sc[row], cpu[row]);
            else
                expect_set(row < qr + kr ? ek : ev, slot, ref[row], sc[row], cpu[row]);
        }
    }
    free(ref), free(sc), free(cpu), free(cs);
}

static const char *epi_name(uint32_t epi) {
    static const char *names[] = {"store", "add", "swiglu", "rope"};
    return epi < 4 ? names[epi] : "?";
}

/* One projection with the LoRA epilogue, checked against the references, and its main rows
 * against the plain kernel's. */
static void check_lora(es_backend *b, test_rng *r, const lora_case *c, const char *cfg) {
    const bool rope_kv = c->epi == ES__EPI_ROPE_KV;
    const uint32_t cols = c->epi == ES__EPI_SWIGLU ? c->rows / 2 : c->rows, n_past = 37, n_ctx = 64;
    float *deq = malloc(sizeof *deq * c->rows * c->K);
    void *w = make_weights(r, c->type, c->rows, c->K, deq);
    float *x = rand_vec(r, (size_t)c->n * c->K, 1.0f), *lb = rand_vec(r, (size_t)c->rows * c->rank, 0.5f);
    float *lr = rand_vec(r, (size_t)(c->n - c->t0) * c->rank, 1.0f);
    float *y = c->epi == ES__EPI_ADD ? rand_vec(r, (size_t)c->n * cols, 1.0f) : nan_vec((size_t)c->n * cols);
    float *y0 = copy_vec(y, (size_t)c->n * cols);
    /* RoPE: t0 tokens of a random tree after n_past, each with g stream rows after them */
    const es__vk_op_rope *g = c->rope;
    const size_t cache = g ? (size_t)g->n_head_kv * n_ctx * g->hd : 0;
    float *kc = rand_vec(r, cache, 1.0f), *vc = rand_vec(r, cache, 1.0f), *kc0 = copy_vec(kc, cache), *vc0 = copy_vec(vc, cache);
    int32_t end[8], pos[8];
    random_tree(r, (int32_t)c->t0, end, 0);
    for (uint32_t t = 0; t < c->t0; t++) pos[t] = (int32_t)n_past + tree_depth(end, (int32_t)t);
    const es__vk_op_batch batch = {n_past, c->t0, end, NULL, 0};
    es__vk_ss_proj ss = {lb, lr, c->rank, c->t0, g, rope_kv ? c->g : 0, &batch, n_ctx, kc, vc, NULL, 0.0f, c->scale};
    CHECK_OK(es__vk_run_mul_mat_ss(b, (es__dtype)c->type, w, c->rows, c->K, x, c->n, c->epi, &ss, y));
    float *full = malloc(sizeof *full * c->n * c->rows);
    proj_cpu(c, w, x, lb, lr, full);
    double err[2] = {0, 0};
    bool rest = true;
    if (rope_kv) {
        expect ey, ek, ev;
        expect_init(&ey, (size_t)c->n * cols), expect_init(&ek, cache), expect_init(&ev, cache);
        rope_expect(c, deq, x, lb, lr, full, pos, n_past, n_ctx, &ey, &ek, &ev);
        const bool ry = expect_check(&ey, y, y0, err), rk = expect_check(&ek, kc, kc0, err);
        rest = ry && rk && expect_check(&ev, vc, vc0, err);
        expect_free(&ey), expect_free(&ek), expect_free(&ev);
    } else {
        check_plain_epi(c, deq, x, lb, lr, full, y0, y, err);
    }
    CHECKF(err[0] <= MM_BOUND && err[1] <= 2 * MM_BOUND && rest,
           "[%s] lora type %d rows %u K %u n %u t0 %u rank %u %s %s scale %g: error %.3g (CPU %.3g)%s", cfg, c->type, c->rows,
           c->K, c->n, c->t0, c->rank, epi_name(c->epi), g ? (g->type == ES_ROPE_NEOX ? "neox" : "norm") : "",
           (double)c->scale, err[0], err[1],
           rest ? "" : ", and it wrote what it must not");
    /* the main rows: the plain kernel on them alone gives the same bits (they get no B R) */
    if (c->t0 > 0) {
        float *ym = copy_vec(y0, (size_t)c->t0 * cols), *km = copy_vec(kc0, cache), *vm = copy_vec(vc0, cache);
        es__vk_ss_proj plain = {NULL, NULL, 0, 0, g, 0, &batch, n_ctx, km, vm, NULL, 0.0f, c->scale};
        CHECK_OK(es__vk_run_mul_mat_ss(b, (es__dtype)c->type, w, c->rows, c->K, x, c->t0, c->epi, &plain, ym));
        CHECKF(same(ym, y, (size_t)c->t0 * cols) && same(km, kc, cache) && same(vm, vc, cache),
               "[%s] lora type %d %s: the main rows differ from the plain kernel's", cfg, c->type, epi_name(c->epi));
        free(ym), free(km), free(vm);
    }
    free(deq), free(w), free(x), free(lb), free(lr), free(y), free(y0), free(kc), free(vc), free(kc0), free(vc0), free(full);
}

/* Every weight type and epilogue by default. The other configurations differ in how the kernels
 * read (texel or storage buffers, R and B included) and reduce (subgroups, shared memory, or one
 * lane per short row), which the fused Q/K/V projection reaches with f32 (short rows) and q8_0
 * (teams of lanes, native 8-bit loads): each new pipeline costs lavapipe up to a second to
 * compile. Batch sizes keep to two tiles (tokens per workgroup) per type, so cases share them. */
static void test_lora(es_backend *b, test_rng *r, const char *cfg, bool all) {
    static const int types[] = {T_F32, T_Q8_0, T_F16, T_BF16, T_Q4_0};
    static const es__vk_op_rope norm = {4, 2, 8, 8, ES_ROPE_NORM, 10000.0f, 1.0f},
                                neox = {3, 1, 12, 8, ES_ROPE_NEOX, 10000.0f, 0.5f};
    for (size_t ti = 0; ti < (all ? ES__ARRAY_LEN(types) : 2); ti++) {
        const int t = types[ti];
        const bool blk = t == T_Q8_0 || t == T_Q4_0;
        const uint32_t K = blk ? 96 : 45;
        /* the fused forward's Q/K/V projection: 3 tokens, 2 (or 1) streams each */
        const lora_case qkv_norm = {t, (4 + 2 * 2) * 8, K, 9, 3, ES__EPI_ROPE_KV, 6, &norm, 2, 0.0f};
        const lora_case qkv_neox = {t, (3 + 2 * 1) * 12, K, 6, 3, ES__EPI_ROPE_KV, 3, &neox, 1, 0.0f};
        /* the stream pass's Q/K/V (store, rows permuted for NEOX, every row a stream row), the
         * fused output and down projections (add) and gate/up (SwiGLU) */
        const lora_case pass_qkv = {t, (3 + 2 * 1) * 12, K, 3, 0, ES__EPI_STORE, 35, &neox, 0, 0.0f};
        const lora_case add = {t, 33, blk ? 64 : 40, 7, 3, ES__EPI_ADD, 2, NULL, 0, 0.0f};
        /* granite's residual scale on the fused branch: the main rows' W x and the stream rows'
         * W x + B R alike */
        const lora_case add_scaled = {t, 33, blk ? 64 : 40, 7, 3, ES__EPI_ADD, 2, NULL, 0, 0.22f};
        const lora_case swiglu = {t, 2 * 37, blk ? 160 : 81, 6, 3, ES__EPI_SWIGLU, 8, NULL, 0, 0.0f};
        check_lora(b, r, &qkv_norm, cfg);
        if (!all) continue;
        check_lora(b, r, &qkv_neox, cfg);
        check_lora(b, r, &pass_qkv, cfg);
        check_lora(b, r, &add, cfg);
        check_lora(b, r, &add_scaled, cfg);
        check_lora(b, r, &swiglu, cfg);
    }
}

int main(void) {
    test_rng r = {1234};
    for (int c = 0; c < VK_N_CONFIGS; c++) {
        es_backend *b = vk_backend(vk_configs[c].flags);
        if (!b) continue;
        const char *cfg = vk_configs[c].name;
        test_ss_rows(b, &r, cfg);
        test_ss_rope(b, &r, cfg);
        test_ss_qk_norm(b, &r, cfg);
        test_ss_attn(b, &r, cfg);
        test_lora(b, &r, cfg, c == 0);
        es_backend_free(b);
    }
    /* a GPU's matrix tiles (policy.h: mm_tile_tokens 32): the tiled kernels' RoPE/KV, LoRA, add
     * and SwiGLU epilogues, in passes (9 tokens: passes of 8 or 4 in a tile of 16) */
    es_backend *b = vk_backend(0);
    if (b) {
        es__vk_dev_of(b)->policy.mm_tile_tokens = ES__VK_TILE_TOK;
        test_lora(b, &r, "tile-32", true);
        es_backend_free(b);
    }
    for (size_t a = 0; a < VK_N_ATTN_VARIANTS; a++) {
        if (!VK_ATTN_VARIANTS[a].team || VK_ATTN_VARIANTS[a].split != ES__ATTN_SPLIT) continue;
        b = vk_backend_attn(a); /* the stream rows' attention takes no splits: one team variant */
        if (!b) continue;
        test_ss_attn(b, &r, VK_ATTN_VARIANTS[a].name);
        es_backend_free(b);
    }
    VK_TEST_END();
}
