/* oprun.c: runs one op on host arrays through the same pipelines the forward pass records, for
 * the op tests (tests/vulkan) and micro-benchmarks (tools/vkbench, tests/bench). Every call makes
 * fresh buffers, so nothing leaks between calls. Deliberately slow and simple: not for inference,
 * and so in the testing library (tests/common), not in libedgespec. */
#include "backend_vk.h"
#include "oprun.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Bytes of a GGUF row of K elements (0 for a bad type or a partial block). */
static uint64_t ggml_row_bytes(es__dtype type, uint32_t K) {
    switch (type) {
    case ES__DTYPE_F32: return (uint64_t)K * 4;
    case ES__DTYPE_F16:
    case ES__DTYPE_BF16: return (uint64_t)K * 2;
    case ES__DTYPE_Q8_0: return K % 32 ? 0 : (uint64_t)K / 32 * 34;
    case ES__DTYPE_Q4_0: return K % 32 ? 0 : (uint64_t)K / 32 * 18;
    }
    return 0;
}

/* Scratch owned by one run. */
typedef struct run {
    es__vk_dev *d;
    es__vk_buf bufs[12];
    uint32_t n_bufs;
    VkBufferView views[12];
    uint32_t n_views;
    VkDescriptorPool pool;
    VkCommandBuffer cb;
} run;

static es_status run_init(run *r, es_backend *b) {
    memset(r, 0, sizeof *r);
    ES_RETURN_IF(!b || b->type != ES_BACKEND_VULKAN, b ? &b->err : NULL, ES_ERR_INVALID_ARGUMENT,
                 "vulkan op: backend is not a Vulkan backend");
    r->d = &((es__vk_backend *)b->impl)->dev;
    es__vk_dev *d = r->d;
    VkDescriptorPoolSize ps[2] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 256}, {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, 256}};
    VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = 64;
    pi.poolSizeCount = 2;
    pi.pPoolSizes = ps;
    ES_VK_TRY(d, vkCreateDescriptorPool(d->dev, &pi, NULL, &r->pool));
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = d->pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    ES_VK_TRY(d, vkAllocateCommandBuffers(d->dev, &ai, &r->cb));
    return ES_OK;
}

static void run_free(run *r) {
    es__vk_dev *d = r->d;
    if (!d) return;
    vkDeviceWaitIdle(d->dev);
    for (uint32_t i = 0; i < r->n_views; i++) vkDestroyBufferView(d->dev, r->views[i], NULL);
    for (uint32_t i = 0; i < r->n_bufs; i++) es__vk_buf_destroy(d, &r->bufs[i]);
    if (r->pool) vkDestroyDescriptorPool(d->dev, r->pool, NULL);
    if (r->cb) vkFreeCommandBuffers(d->dev, d->pool, 1, &r->cb);
}

/* run_free for the ops that uploaded a weight matrix. */
static void run_free_mat(run *r, es__vk_mat *m, es__vk_wset *ws) {
    es__vk_dev *d = r->d;
    run_free(r);
    if (!d) return;
    es__vk_mat_free(d, m);
    es__vk_wset_free(ws);
}

/* A host-visible buffer holding bytes (or zeros when src is NULL). */
static es_status run_buf(run *r, const void *src, size_t bytes, es__vk_buf **out) {
    es__vk_buf *b = &r->bufs[r->n_bufs];
    ES_TRY(es__vk_buf_create(r->d, bytes, ES__VK_MEM_READBACK, "an op test buffer", b));
    r->n_bufs++;
    if (src)
        memcpy(b->map, src, bytes);
    else
        memset(b->map, 0, bytes);
    ES_TRY(es__vk_buf_flush(r->d, b));
    *out = b;
    return ES_OK;
}

/* The binding of a whole buffer for a read-only role: a texel view of fmt, or the range. */
static es_status run_ro(run *r, const es__vk_buf *b, VkFormat fmt, es__vk_bind *out) {
    *out = (es__vk_bind){b->buf, 0, b->size, VK_NULL_HANDLE};
    if (r->d->use.texel) {
        ES_TRY(es__vk_view_create(r->d, b, fmt, 0, b->size, &r->views[r->n_views]));
        out->view = r->views[r->n_views++];
    }
    return ES_OK;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + 1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* Submits; *ms gets the wall time per rep, or with EDGESPEC_VKBENCH_CPU_TIME set the process CPU
 * time per rep (all threads), which a busy machine disturbs less. */
static es__vk_bind whole(const es__vk_buf *b);
static es_status run_rows(run *r, const float *src, uint32_t n, uint32_t width, uint32_t stride, es__vk_buf **out);

/* Valid descriptors for the mul_mat bindings an op does not use: a small buffer with views of
 * the formats the shader declares (f32 RoPE table, int step data), and the buffer itself for the
 * cache bindings. */
static es_status run_extras(run *r, es__vk_bind out[4]) {
    es__vk_buf *b;
    ES_TRY(run_buf(r, NULL, 256, &b));
    ES_TRY(run_ro(r, b, VK_FORMAT_R32_SFLOAT, &out[0]));
    ES_TRY(run_ro(r, b, VK_FORMAT_R32_SINT, &out[1]));
    out[2] = out[3] = (es__vk_bind){b->buf, 0, b->size, VK_NULL_HANDLE};
    return ES_OK;
}

static es_status run_submit(run *r, es__vk_rec *rec, uint32_t reps, double *ms) {
    ES_TRY(es__vk_rec_end(rec));
    const bool cpu = getenv("EDGESPEC_VKBENCH_CPU_TIME") != NULL;
    const double t0 = cpu ? cpu_seconds() : es__time_now();
    ES_TRY(es__vk_submit_wait(r->d, r->cb));
    if (ms) *ms = ((cpu ? cpu_seconds() : es__time_now()) - t0) * 1e3 / (reps ? reps : 1);
    return ES_OK;
}

/* One descriptor set per part of m: the part's weight bindings, then tail (bindings 2..7). */
static es_status run_part_sets(run *r, es__vk_wset *ws, const es__vk_mat *m, const es__vk_pipeline *p,
                               const es__vk_bind tail[6], VkDescriptorSet sets[16]) {
    ES_RETURN_IF(m->n_parts > 16, r->d->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: matrix too large");
    for (uint32_t i = 0; i < m->n_parts; i++) {
        es__vk_bind bind[8];
        es__vk_part_binds(ws, &m->parts[i], &bind[0], &bind[1]);
        memcpy(&bind[2], tail, 6 * sizeof *tail);
        ES_TRY(es__vk_set_create(r->d, r->pool, p, bind, &sets[i]));
    }
    return ES_OK;
}

/* Records reps (at least one) mul_mat-family dispatches of p over m's parts and submits them. */
static es_status run_mul_mat_submit(run *r, const char *op, const es__vk_pipeline *p, const es__vk_mat *m,
                                    const VkDescriptorSet *sets, const es__pc_mul_mat *pc, uint32_t reps, double *ms) {
    es__vk_rec rec;
    es__vk_rec_begin(&rec, r->d, r->cb, VK_NULL_HANDLE, 0, NULL);
    for (uint32_t k = 0; k < (reps ? reps : 1); k++) es__vk_rec_mul_mat(&rec, op, p, m, sets, pc);
    return run_submit(r, &rec, reps, ms);
}

es_status es__vk_run_mul_mat(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K,
                             const float *x, uint32_t n, uint32_t epi, float *y, uint32_t reps, double *ms) {
    run r;
    es_status s = run_init(&r, b);
    es__vk_dev *d = r.d;
    es__tensor t = {"op.weight", type, 2, {K, rows, 1, 1}, w, 0, 0};
    t.nbytes = ggml_row_bytes(type, K) * rows;
    if (s == ES_OK && (t.nbytes == 0 || epi == ES__EPI_ROPE_KV))
        s = es__fail(&b->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: bad type %d, K %u or epilogue %u", (int)type, K, epi);
    es__vk_mat m;
    memset(&m, 0, sizeof m);
    es__vk_wset ws;
    memset(&ws, 0, sizeof ws);
    if (d) es__vk_wset_init(&ws, d);
    const es__tensor *src = &t;
    if (s == ES_OK) s = es__vk_mat_init(d, &m, &src, 1, false);
    es__vk_mat *mp = &m;
    if (s == ES_OK) s = es__vk_wset_upload(&ws, &mp, 1, NULL, NULL);
    const uint32_t Kp = m.K, y_cols = epi == ES__EPI_SWIGLU ? rows / 2 : rows;
    es__vk_buf *X = NULL, *Y = NULL;
    if (s == ES_OK) s = run_rows(&r, x, n, K, Kp, &X);
    if (s == ES_OK) s = run_buf(&r, epi == ES__EPI_ADD ? y : NULL, sizeof *y * n * y_cols, &Y);
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_mul_mat_pipe(d, &m, es__vk_mul_mat_tok(type, n), epi, &p);
    VkDescriptorSet sets[16];
    es__vk_bind tail[6];
    if (s == ES_OK) s = run_ro(&r, X, VK_FORMAT_R32G32B32A32_SFLOAT, &tail[0]);
    if (s == ES_OK) tail[1] = whole(Y);
    if (s == ES_OK) s = run_extras(&r, &tail[2]);
    if (s == ES_OK) s = run_part_sets(&r, &ws, &m, p, tail, sets);
    if (s == ES_OK) {
        es__pc_mul_mat pc;
        memset(&pc, 0, sizeof pc);
        pc.n = n;
        pc.x_stride = Kp / 4;
        pc.y_stride = y_cols;
        s = run_mul_mat_submit(&r, "mul_mat", p, &m, sets, &pc, reps, ms);
    }
    if (s == ES_OK) s = es__vk_buf_invalidate(d, Y);
    if (s == ES_OK) memcpy(y, Y->map, sizeof *y * n * y_cols);
    run_free_mat(&r, &m, &ws);
    return s;
}

/* A step buffer for a batch of n tokens at n_past (chain unless dfs_end is given). */
/* The step data; with mask ([n][n] bytes), the mask after it for attn.comp's DENSE_MASK build. */
static es_status run_step_mask(run *r, int32_t n_past, int32_t n, const int32_t *tokens, const int32_t *pos,
                               const int32_t *dfs_end, const int32_t *out_rows, int32_t n_out, const int32_t *keep,
                               int32_t n_keep, const uint8_t *mask, es__vk_buf **out, es__vk_bind *bind) {
    const uint32_t stride = (uint32_t)ES__MAX(n, n_keep) + 1;
    const size_t ints = ES_STEP_HDR + (size_t)ES_STEP_ARRAYS * stride;
    const size_t mask_ints = mask ? ((size_t)n * (size_t)n + 3) / 4 : 0;
    int32_t *s = es__calloc(r->d->alloc, ints + ES__MAX((size_t)stride + 2, mask_ints), sizeof *s);
    ES_RETURN_IF(!s, r->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    int32_t *p = s + ints; /* scratch after the data: positions and then the depth counts */
    int32_t *own_pos = es__calloc(r->d->alloc, (size_t)n + 1, sizeof *own_pos);
    int32_t *own_end = es__calloc(r->d->alloc, (size_t)n + 1, sizeof *own_end);
    es_status st = own_pos && own_end ? ES_OK : es__fail(r->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    if (st == ES_OK) {
        for (int32_t j = 0; j < n; j++) {
            own_end[j] = dfs_end ? dfs_end[j] : n - 1;
            if (pos) {
                own_pos[j] = pos[j];
            } else { /* depth = ancestors i < j whose interval covers j */
                int32_t depth = 0;
                for (int32_t i = 0; i < j; i++) depth += own_end[i] >= j;
                own_pos[j] = n_past + depth;
            }
        }
        es__vk_step_write(s, stride, n_past, n, tokens, own_pos, own_end, out_rows, n_out, p);
        s[ES_STEP_N_KEEP] = n_keep;
        if (keep) memcpy(s + ES_STEP_HDR + ES_STEP_KEEP * stride, keep, sizeof *keep * (size_t)n_keep);
        if (mask) {
            s[ES_STEP_MASK] = (int32_t)ints;
            s[ES_STEP_MASK_N] = n;
            memset(s + ints, 0, sizeof *s * mask_ints); /* the scratch was there */
            memcpy(s + ints, mask, (size_t)n * (size_t)n);
        }
        st = run_buf(r, s, sizeof *s * (ints + mask_ints), out);
    }
    if (st == ES_OK) {
        *bind = (es__vk_bind){(*out)->buf, 0, (*out)->size, VK_NULL_HANDLE};
        if (r->d->use.texel) st = run_ro(r, *out, VK_FORMAT_R32_SINT, bind);
    }
    es__free(r->d->alloc, own_pos);
    es__free(r->d->alloc, own_end);
    es__free(r->d->alloc, s);
    return st;
}

static es_status run_step(run *r, int32_t n_past, int32_t n, const int32_t *tokens, const int32_t *pos,
                          const int32_t *dfs_end, const int32_t *out_rows, int32_t n_out, const int32_t *keep,
                          int32_t n_keep, es__vk_buf **out, es__vk_bind *bind) {
    return run_step_mask(r, n_past, n, tokens, pos, dfs_end, out_rows, n_out, keep, n_keep, NULL, out, bind);
}

static es__vk_bind whole(const es__vk_buf *b) {
    return (es__vk_bind){b->buf, 0, b->size, VK_NULL_HANDLE};
}

/* Copies rows of `width` floats into a buffer with rows of `stride` floats (zero padded). */
static es_status run_rows(run *r, const float *src, uint32_t n, uint32_t width, uint32_t stride, es__vk_buf **out) {
    float *tmp = es__calloc(r->d->alloc, (size_t)n * stride + 4, sizeof *tmp);
    ES_RETURN_IF(!tmp, r->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    for (uint32_t i = 0; src && i < n; i++) memcpy(tmp + (size_t)i * stride, src + (size_t)i * width, sizeof *tmp * width);
    es_status s = run_buf(r, tmp, sizeof *tmp * ((size_t)n * stride + 4), out);
    es__free(r->d->alloc, tmp);
    return s;
}

static void read_rows(const es__vk_buf *b, uint32_t n, uint32_t width, uint32_t stride, float *dst) {
    const float *src = b->map;
    for (uint32_t i = 0; i < n; i++) memcpy(dst + (size_t)i * width, src + (size_t)i * stride, sizeof *dst * width);
}

/* Records one dispatch of p with binds, submits and waits. */
static es_status run_one(run *r, es__vk_pipeline *p, const es__vk_bind *binds, const void *push, uint32_t gx,
                         uint32_t gy, uint32_t gz) {
    VkDescriptorSet set;
    ES_TRY(es__vk_set_create(r->d, r->pool, p, binds, &set));
    es__vk_rec rec;
    ES_VK_TRY(r->d, vkResetCommandBuffer(r->cb, 0));
    es__vk_rec_begin(&rec, r->d, r->cb, VK_NULL_HANDLE, 0, NULL);
    es__vk_rec_dispatch(&rec, "op", p, set, push, gx, gy, gz);
    return run_submit(r, &rec, 1, NULL);
}

#define RUN_BEGIN(b)                                                                               \
    run r;                                                                                         \
    es_status s = run_init(&r, (b));
#define RUN_END()                                                                                  \
    run_free(&r);                                                                                  \
    return s;

es_status es__vk_run_rmsnorm(es_backend *b, const float *x, const float *w, uint32_t E, uint32_t n, float eps,
                             float *y) {
    RUN_BEGIN(b)
    const uint32_t E32 = (E + 31u) & ~31u;
    es__vk_buf *X = NULL, *G = NULL, *Y = NULL, *S = NULL;
    es__vk_bind bx, bg, bs;
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "rmsnorm", true, true, &p);
    if (s == ES_OK) s = run_rows(&r, x, n, E, E32, &X);
    if (s == ES_OK) s = run_rows(&r, w, 1, E, E32, &G);
    if (s == ES_OK) s = run_rows(&r, NULL, n, E, E32, &Y);
    if (s == ES_OK) s = run_ro(&r, X, VK_FORMAT_R32G32B32A32_SFLOAT, &bx);
    if (s == ES_OK) s = run_ro(&r, G, VK_FORMAT_R32G32B32A32_SFLOAT, &bg);
    int32_t pos0 = 0, end0 = 0;
    if (s == ES_OK) s = run_step(&r, 0, 1, NULL, &pos0, &end0, NULL, 0, NULL, 0, &S, &bs);
    if (s == ES_OK) {
        es__vk_bind binds[4] = {bx, bg, bs, whole(Y)};
        es__pc_rmsnorm pc = {E, n, E32, 0, 0, eps};
        s = run_one(&r, p, binds, &pc, n, 1, 1);
    }
    if (s == ES_OK) read_rows(Y, n, E, E32, y);
    RUN_END()
}

es_status es__vk_run_get_rows(es_backend *b, es__dtype type, const void *table, uint32_t K, uint32_t rows,
                              const int32_t *ids, uint32_t n, float *out) {
    RUN_BEGIN(b)
    es__vk_dev *d = r.d;
    es__tensor t = {"op.table", type, 2, {K, rows, 1, 1}, table, ggml_row_bytes(type, K) * rows, 0};
    es__vk_mat m;
    memset(&m, 0, sizeof m);
    es__vk_wset ws;
    memset(&ws, 0, sizeof ws);
    if (d) es__vk_wset_init(&ws, d);
    const es__tensor *src = &t;
    es__vk_mat *mp = &m;
    if (s == ES_OK) s = es__vk_mat_init(d, &m, &src, 1, false);
    if (s == ES_OK) s = es__vk_wset_upload(&ws, &mp, 1, NULL, NULL);
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_get_rows_pipe(d, type, &p);
    es__vk_buf *X = NULL, *S = NULL;
    es__vk_bind bs;
    int32_t *pos = es__calloc(d ? d->alloc : NULL, n, sizeof *pos), *end = es__calloc(d ? d->alloc : NULL, n, sizeof *end);
    if (s == ES_OK && (!pos || !end)) s = es__fail(&b->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    for (uint32_t i = 0; s == ES_OK && i < n; i++) {
        pos[i] = (int32_t)i;
        end[i] = (int32_t)n - 1;
    }
    if (s == ES_OK) s = run_step(&r, 0, (int32_t)n, ids, pos, end, NULL, 0, NULL, 0, &S, &bs);
    const uint32_t E32 = m.K;
    if (s == ES_OK) s = run_rows(&r, NULL, n, K, E32, &X);
    for (uint32_t i = 0; s == ES_OK && i < m.n_parts; i++) {
        es__vk_bind binds[4];
        es__vk_part_binds(&ws, &m.parts[i], &binds[0], &binds[1]);
        binds[2] = bs;
        binds[3] = whole(X);
        es__pc_get_rows pc = {m.K, K, n, m.parts[i].row0, m.parts[i].rows, E32, m.team};
        s = run_one(&r, p, binds, &pc, n, 1, 1);
    }
    if (s == ES_OK) read_rows(X, n, K, E32, out);
    if (d) {
        es__free(d->alloc, pos);
        es__free(d->alloc, end);
    }
    run_free_mat(&r, &m, &ws);
    return s;
}

/* RoPE and the KV write run as the epilogue of the Q/K/V projection (mul_mat.comp); here the
 * projection is an identity matrix (exact in f32), so the epilogue sees qkv itself. With NEOX the
 * identity's rows are permuted the way model upload permutes the projection. */
es_status es__vk_run_rope_kv(es_backend *b, float *qkv, uint32_t n, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                             uint32_t n_rot, es_rope_type type, float freq_base, float freq_scale, const int32_t *pos,
                             uint32_t n_past, uint32_t n_ctx, float *kc, float *vc) {
    RUN_BEGIN(b)
    es__vk_dev *d = r.d;
    const uint32_t width = (n_head + 2 * n_head_kv) * hd;
    int32_t max_pos = 0;
    for (uint32_t t = 0; t < n; t++) max_pos = ES__MAX(max_pos, pos[t]);
    const uint32_t np = (uint32_t)max_pos + 1, half = n_rot / 2;
    float *ident = d ? es__calloc(d->alloc, (size_t)width * width, sizeof *ident) : NULL;
    float *table = d ? es__calloc(d->alloc, (size_t)np * half * 2 + 1, sizeof *table) : NULL;
    if (s == ES_OK && (!ident || !table)) s = es__fail(&b->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    for (uint32_t i = 0; s == ES_OK && i < width; i++) ident[(size_t)i * width + i] = 1.0f;
    es__tensor t = {"op.qkv", ES__DTYPE_F32, 2, {width, width, 1, 1}, ident, (uint64_t)width * width * 4, 0};
    es__vk_mat m;
    memset(&m, 0, sizeof m);
    es__vk_wset ws;
    memset(&ws, 0, sizeof ws);
    if (d) es__vk_wset_init(&ws, d);
    const es__tensor *src = &t;
    es__vk_mat *mp = &m;
    if (s == ES_OK) s = es__vk_mat_init(d, &m, &src, 1, false);
    if (s == ES_OK && type == ES_ROPE_NEOX) {
        m.rope_rows = (n_head + n_head_kv) * hd;
        m.rope_hd = hd;
        m.rope_nrot = n_rot;
    }
    if (s == ES_OK) s = es__vk_wset_upload(&ws, &mp, 1, NULL, NULL);
    es__vk_buf *X = NULL, *Q = NULL, *T = NULL, *K = NULL, *V = NULL, *S = NULL;
    es__vk_bind bx, bt, bs;
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) {
        es__vk_rope_table(table, 0, np, n_rot, freq_base, freq_scale);
        s = es__vk_mul_mat_pipe(d, &m, es__vk_mul_mat_tok(ES__DTYPE_F32, n), ES__EPI_ROPE_KV, &p);
    }
    if (s == ES_OK) s = run_rows(&r, qkv, n, width, m.K, &X);
    if (s == ES_OK) s = run_buf(&r, NULL, sizeof *qkv * n * width, &Q);
    if (s == ES_OK) s = run_buf(&r, table, sizeof *table * ((size_t)np * half * 2 + 1), &T);
    if (s == ES_OK) s = run_buf(&r, kc, sizeof *kc * n_head_kv * n_ctx * hd, &K);
    if (s == ES_OK) s = run_buf(&r, vc, sizeof *vc * n_head_kv * n_ctx * hd, &V);
    if (s == ES_OK) s = run_ro(&r, X, VK_FORMAT_R32G32B32A32_SFLOAT, &bx);
    if (s == ES_OK) s = run_ro(&r, T, VK_FORMAT_R32_SFLOAT, &bt);
    int32_t *end = d ? es__calloc(d->alloc, n, sizeof *end) : NULL;
    for (uint32_t i = 0; end && i < n; i++) end[i] = (int32_t)n - 1;
    if (s == ES_OK && !end) s = es__fail(&b->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    if (s == ES_OK) s = run_step(&r, (int32_t)n_past, (int32_t)n, NULL, pos, end, NULL, 0, NULL, 0, &S, &bs);
    VkDescriptorSet sets[16];
    if (s == ES_OK) {
        const es__vk_bind tail[6] = {bx, whole(Q), bt, bs, whole(K), whole(V)};
        s = run_part_sets(&r, &ws, &m, p, tail, sets);
    }
    if (s == ES_OK) {
        es__pc_mul_mat pc;
        memset(&pc, 0, sizeof pc);
        pc.n = n;
        pc.x_stride = m.K / 4;
        pc.y_stride = width;
        pc.n_head = n_head;
        pc.n_head_kv = n_head_kv;
        pc.hd = hd;
        pc.n_rot = n_rot;
        pc.n_ctx = n_ctx;
        s = run_mul_mat_submit(&r, "rope_kv", p, &m, sets, &pc, 1, NULL);
    }
    if (s == ES_OK) {
        const float *q = Q->map;
        for (uint32_t i = 0; i < n; i++) memcpy(qkv + (size_t)i * width, q + (size_t)i * width, sizeof *q * n_head * hd);
        memcpy(kc, K->map, sizeof *kc * n_head_kv * n_ctx * hd);
        memcpy(vc, V->map, sizeof *vc * n_head_kv * n_ctx * hd);
    }
    if (d) {
        es__free(d->alloc, ident);
        es__free(d->alloc, table);
        es__free(d->alloc, end);
    }
    run_free_mat(&r, &m, &ws);
    return s;
}

es_status es__vk_run_attention(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                               uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_past, uint32_t n,
                               const int32_t *dfs_end, float scale, float *out) {
    return es__vk_run_attention_bench(b, q, kc, vc, n_ctx, n_head, n_head_kv, hd, n_past, n, dfs_end, scale, out, NULL);
}

/* Records every token chunk's attention (and split merge) into r->cb. */
static void rec_attention(es__vk_rec *rec, es__vk_pipeline *pa, es__vk_pipeline *pm, VkDescriptorSet sa,
                          VkDescriptorSet sm, const int32_t *pos, uint32_t n, uint32_t n_head, uint32_t n_head_kv,
                          uint32_t hd, uint32_t n_ctx, float scale) {
    const uint32_t qd = n_head * hd, max_splits = (n_ctx + ES__ATTN_SPLIT - 1) / ES__ATTN_SPLIT;
    for (uint32_t t0 = 0; t0 < n; t0 += ES__ATTN_CHUNK) {
        const uint32_t t1 = ES__MIN(n, t0 + ES__ATTN_CHUNK);
        int32_t maxp = 0;
        for (uint32_t t = t0; t < t1; t++) maxp = ES__MAX(maxp, pos[t]);
        es__pc_attn pc = {t0, t1 - t0, n_head, n_head_kv, hd, qd, n_ctx, ES__ATTN_SPLIT, max_splits, qd, scale};
        es__vk_rec_dispatch(rec, "attn", pa, sa, &pc, ((t1 - t0) * n_head + ES__ATTN_WG - 1) / ES__ATTN_WG,
                            (uint32_t)maxp / ES__ATTN_SPLIT + 1, 1);
        es__pc_attn_merge pm_pc = {t0, n_head, hd, ES__ATTN_SPLIT, max_splits, qd};
        if (max_splits > 1) es__vk_rec_dispatch(rec, "attn_merge", pm, sm, &pm_pc, n_head, t1 - t0, 1);
    }
}

es_status es__vk_run_attention_bench(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                                     uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_past, uint32_t n,
                                     const int32_t *dfs_end, float scale, float *out, es__vk_attn_bench *bench) {
    RUN_BEGIN(b)
    const uint32_t qd = n_head * hd, max_splits = (n_ctx + ES__ATTN_SPLIT - 1) / ES__ATTN_SPLIT;
    es__vk_buf *Q = NULL, *K = NULL, *V = NULL, *S = NULL, *O = NULL, *P = NULL;
    es__vk_bind bq = {0}, bk = {0}, bv = {0}, bs = {0}, bp = {0};
    es__vk_pipeline *pa = NULL, *pm = NULL, custom;
    memset(&custom, 0, sizeof custom);
    if (s == ES_OK && (hd % 4 || hd > 512))
        s = es__fail(&b->err, ES_ERR_UNSUPPORTED, "vulkan op: head dimension %u not supported", hd);
    if (s == ES_OK) s = es__vk_attn_pipe(r.d, "attn", hd, &pa);
    if (s == ES_OK && bench && bench->shader) {
        s = es__vk_pipeline_custom(r.d, bench->shader, pa->spec, pa->n_spec, &custom);
        pa = &custom;
    }
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "attn_merge", true, false, &pm);
    if (s == ES_OK) s = run_buf(&r, q, sizeof *q * n * qd, &Q);
    if (s == ES_OK) s = run_buf(&r, kc, sizeof *kc * n_head_kv * n_ctx * hd, &K);
    if (s == ES_OK) s = run_buf(&r, vc, sizeof *vc * n_head_kv * n_ctx * hd, &V);
    if (s == ES_OK) s = run_buf(&r, NULL, sizeof(float) * n * qd, &O);
    if (s == ES_OK) s = run_buf(&r, NULL, sizeof(float) * ES__ATTN_CHUNK * n_head * max_splits * (hd + 4), &P);
    const VkFormat f4 = VK_FORMAT_R32G32B32A32_SFLOAT;
    if (s == ES_OK) s = run_ro(&r, Q, f4, &bq);
    if (s == ES_OK) s = run_ro(&r, K, f4, &bk);
    if (s == ES_OK) s = run_ro(&r, V, f4, &bv);
    if (s == ES_OK) s = run_ro(&r, P, f4, &bp);
    if (s == ES_OK)
        s = run_step_mask(&r, (int32_t)n_past, (int32_t)n, NULL, NULL, dfs_end, NULL, 0, NULL, 0,
                          bench ? bench->mask : NULL, &S, &bs);
    VkDescriptorSet sa = VK_NULL_HANDLE, sm = VK_NULL_HANDLE;
    if (s == ES_OK) {
        const es__vk_bind ba[6] = {bq, bk, bv, bs, whole(O), whole(P)}, bm[3] = {bp, bs, whole(O)};
        s = es__vk_set_create(r.d, r.pool, pa, ba, &sa);
        if (s == ES_OK) s = es__vk_set_create(r.d, r.pool, pm, bm, &sm);
    }
    if (s == ES_OK) {
        const int32_t *pos = (const int32_t *)S->map + ES_STEP_HDR + ES_STEP_POS * ((const int32_t *)S->map)[ES_STEP_NB];
        const uint32_t reps = bench && bench->reps ? bench->reps : 1;
        es__vk_rec rec;
        es__vk_rec_begin(&rec, r.d, r.cb, VK_NULL_HANDLE, 0, NULL);
        for (uint32_t i = 0; i < reps; i++) rec_attention(&rec, pa, pm, sa, sm, pos, n, n_head, n_head_kv, hd, n_ctx, scale);
        s = run_submit(&r, &rec, reps, bench ? &bench->ms : NULL);
    }
    if (s == ES_OK) memcpy(out, O->map, sizeof *out * n * qd);
    if (custom.pipeline) es__vk_pipeline_release(r.d, &custom);
    RUN_END()
}

bool es__vk_run_texel(es_backend *b) {
    return b && b->type == ES_BACKEND_VULKAN && ((es__vk_backend *)b->impl)->dev.use.texel;
}

es_status es__vk_run_softmax(es_backend *b, const float *x, uint32_t V, uint32_t n, float *y) {
    RUN_BEGIN(b)
    es__vk_buf *X = NULL;
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "softmax", false, true, &p);
    if (s == ES_OK) s = run_buf(&r, x, sizeof *x * V * n, &X);
    if (s == ES_OK) {
        es__vk_bind binds[1] = {whole(X)};
        es__pc_softmax pc = {V, n, V};
        s = run_one(&r, p, binds, &pc, n, 1, 1);
    }
    if (s == ES_OK) memcpy(y, X->map, sizeof *y * V * n);
    RUN_END()
}

es_status es__vk_run_topk(es_backend *b, const float *x, uint32_t V, uint32_t n, uint32_t k, int32_t *ids,
                          float *vals) {
    RUN_BEGIN(b)
    if (s == ES_OK && (k == 0 || k > 64 || k > V)) s = es__fail(&b->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: top-k with k %u", k);
    const uint32_t V4 = (V + 3u) & ~3u;
    es__vk_buf *X = NULL, *R = NULL;
    es__vk_bind bx;
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "topk", true, false, &p);
    if (s == ES_OK) s = run_rows(&r, x, n, V, V4, &X);
    if (s == ES_OK) s = run_buf(&r, NULL, sizeof(uint32_t) * 2 * n * k, &R);
    if (s == ES_OK) s = run_ro(&r, X, VK_FORMAT_R32G32B32A32_SFLOAT, &bx);
    if (s == ES_OK) {
        es__vk_bind binds[2] = {bx, whole(R)};
        es__pc_topk pc = {V, n, k, V4};
        s = run_one(&r, p, binds, &pc, n, 1, 1);
    }
    if (s == ES_OK) {
        const uint32_t *res = R->map;
        for (uint32_t i = 0; i < n * k; i++) {
            ids[i] = (int32_t)res[2 * i];
            if (vals) memcpy(&vals[i], &res[2 * i + 1], sizeof *vals);
        }
    }
    RUN_END()
}

es_status es__vk_run_kv_move(es_backend *b, float *kc, float *vc, uint32_t n_head_kv, uint32_t n_ctx, uint32_t hd,
                             uint32_t n_past, const int32_t *keep, uint32_t n_keep) {
    RUN_BEGIN(b)
    es__vk_buf *K = NULL, *V = NULL, *S = NULL;
    es__vk_bind bs;
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "kv_move", true, false, &p);
    if (s == ES_OK) s = run_buf(&r, kc, sizeof *kc * n_head_kv * n_ctx * hd, &K);
    if (s == ES_OK) s = run_buf(&r, vc, sizeof *vc * n_head_kv * n_ctx * hd, &V);
    int32_t one_pos = (int32_t)n_past, one_end = 0;
    if (s == ES_OK) s = run_step(&r, (int32_t)n_past, 1, NULL, &one_pos, &one_end, NULL, 0, keep, (int32_t)n_keep, &S, &bs);
    if (s == ES_OK) {
        es__vk_bind binds[3] = {bs, whole(K), whole(V)};
        es__pc_kv_move pc = {n_keep, n_past, hd, n_ctx, n_head_kv};
        s = run_one(&r, p, binds, &pc, n_head_kv, 2, 1);
    }
    if (s == ES_OK) {
        memcpy(kc, K->map, sizeof *kc * n_head_kv * n_ctx * hd);
        memcpy(vc, V->map, sizeof *vc * n_head_kv * n_ctx * hd);
    }
    RUN_END()
}
