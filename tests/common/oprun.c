/* oprun.c: runs one op on host arrays through the same pipelines the forward pass records, for
 * the op tests (tests/vulkan) and micro-benchmarks (tools/vkbench, tests/bench). Every call makes
 * fresh buffers, so nothing leaks between calls. Deliberately slow and simple: not for inference,
 * and so in the testing library (tests/common), not in libedgespec.
 * Output buffers start with what the caller's output arrays hold and are read back over them
 * (top-k's packed results excepted): where a kernel writes nothing, the caller's poison comes back,
 * so an element the kernel missed fails the test. */
#include "backend_vk.h"
#include "oprun.h"

#include <math.h>
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
    case ES__DTYPE_Q4_1:
    case ES__DTYPE_Q5_0:
    case ES__DTYPE_Q5_1: return K % 32 ? 0 : (uint64_t)K / 32 * es__q5_block_bytes(type);
    case ES__DTYPE_Q4_K: return K % 256 ? 0 : (uint64_t)K / 256 * 144;
    case ES__DTYPE_Q5_K: return K % 256 ? 0 : (uint64_t)K / 256 * 176;
    case ES__DTYPE_Q6_K: return K % 256 ? 0 : (uint64_t)K / 256 * 210;
    case ES__DTYPE_Q2_K: return K % 256 ? 0 : (uint64_t)K / 256 * 84;
    case ES__DTYPE_Q3_K: return K % 256 ? 0 : (uint64_t)K / 256 * 110;
    case ES__DTYPE_IQ4_NL: return K % 32 ? 0 : (uint64_t)K / 32 * 18;
    case ES__DTYPE_IQ4_XS: return K % 256 ? 0 : (uint64_t)K / 256 * ES__IQ4XS_BYTES;
    }
    return 0;
}

static uint32_t up32(uint32_t x) {
    return (x + 31u) & ~31u;
}

/* ---- the scratch of one run */

typedef struct run {
    es__vk_dev *d;
    es__vk_buf bufs[16];
    uint32_t n_bufs;
    VkBufferView views[16];
    uint32_t n_views;
    es__tensor tens[2];    /* the host views mats were described from            */
    es__vk_mat mats[2];
    es__vk_wset ws[2];     /* the planes of each of mats (a set uploads once)    */
    uint32_t n_mats;
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
    for (uint32_t i = 0; i < r->n_mats; i++) {
        es__vk_mat_free(d, &r->mats[i]);
        es__vk_wset_free(&r->ws[i]);
    }
    if (r->pool) vkDestroyDescriptorPool(d->dev, r->pool, NULL);
    if (r->cb) vkFreeCommandBuffers(d->dev, d->pool, 1, &r->cb);
}

/* Every runner is a chain of `if (s == ES_OK) s = step;` between these, so one exit frees all. */
#define RUN_BEGIN(b)                                                                               \
    run r;                                                                                         \
    es_status s = run_init(&r, (b));
#define RUN_END()                                                                                  \
    run_free(&r);                                                                                  \
    return s;

/* ---- buffers */

/* A host-visible buffer holding bytes (or zeros when src is NULL). */
static es_status run_buf(run *r, const void *src, size_t bytes, es__vk_buf **out) {
    ES_RETURN_IF(r->n_bufs == ES__ARRAY_LEN(r->bufs), r->d->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: too many buffers");
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

/* The first bytes of b, after the device's writes are made visible to the host. */
static es_status run_read(run *r, es__vk_buf *b, void *dst, size_t bytes) {
    ES_TRY(es__vk_buf_invalidate(r->d, b));
    memcpy(dst, b->map, bytes);
    return ES_OK;
}

static es__vk_bind whole(const es__vk_buf *b) {
    return (es__vk_bind){b->buf, 0, b->size, VK_NULL_HANDLE};
}

/* The binding of a whole buffer for a read-only role: a texel view of fmt, or the range. */
static es_status run_ro(run *r, const es__vk_buf *b, VkFormat fmt, es__vk_bind *out) {
    *out = whole(b);
    if (r->d->use.texel) {
        ES_RETURN_IF(r->n_views == ES__ARRAY_LEN(r->views), r->d->err, ES_ERR_INVALID_ARGUMENT,
                     "vulkan op: too many views");
        ES_TRY(es__vk_view_create(r->d, b, fmt, 0, b->size, &r->views[r->n_views]));
        out->view = r->views[r->n_views++];
    }
    return ES_OK;
}

/* A buffer of src and its read-only vec4 binding. */
static es_status run_ro_f4(run *r, const float *src, size_t floats, es__vk_buf **out, es__vk_bind *bind) {
    ES_TRY(run_buf(r, src, sizeof *src * floats, out));
    return run_ro(r, *out, VK_FORMAT_R32G32B32A32_SFLOAT, bind);
}

/* Valid descriptors for the mul_mat bindings an op does not use: a small buffer with views of
 * the formats the shader declares (f32 RoPE table, int step data), and the buffer itself for the
 * cache bindings. */
static es_status run_extras(run *r, es__vk_bind out[4]) {
    es__vk_buf *b = NULL;
    ES_TRY(run_buf(r, NULL, 256, &b));
    ES_TRY(run_ro(r, b, VK_FORMAT_R32_SFLOAT, &out[0]));
    ES_TRY(run_ro(r, b, VK_FORMAT_R32_SINT, &out[1]));
    out[2] = out[3] = whole(b);
    return ES_OK;
}

/* ---- matrices */

/* A matrix of rows x K elements of type (GGUF layout) on the device, placed and repacked as model
 * upload does; perm (may be NULL) = {rows, head dimension, n_rot}: the first rows permuted within
 * heads for NEOX RoPE, as the Q/K/V projection's are (weights.h). Freed by run_free. */
uint64_t es__vk_run_staging;

static es_status run_mat(run *r, const char *name, es__dtype type, const void *data, uint32_t rows, uint32_t K,
                         const uint32_t perm[3], es__vk_mat **out) {
    const uint64_t rb = ggml_row_bytes(type, K);
    ES_RETURN_IF(r->n_mats == ES__ARRAY_LEN(r->mats) || rb == 0, r->d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan op: matrix '%s' of type %d and K %u", name, (int)type, K);
    es__tensor *t = &r->tens[r->n_mats];
    *t = (es__tensor){name, type, 2, {K, rows, 1, 1}, data, rb * rows, 0};
    es__vk_mat *m = &r->mats[r->n_mats];
    es__vk_wset *ws = &r->ws[r->n_mats];
    const es__tensor *src = t;
    es__vk_wset_init(ws, r->d);
    ws->staging_size = es__vk_run_staging;
    r->n_mats++;
    ES_TRY(es__vk_mat_init(r->d, m, &src, 1, false));
    if (perm) {
        m->rope_rows = perm[0];
        m->rope_hd = perm[1];
        m->rope_nrot = perm[2];
    }
    ES_TRY(es__vk_wset_upload(ws, &m, 1, NULL, NULL));
    *out = m;
    return ES_OK;
}

/* The weight set holding m's planes. */
static es__vk_wset *run_ws(run *r, const es__vk_mat *m) {
    return &r->ws[m - r->mats];
}

/* One descriptor set per part of m: the part's weight bindings, then the pipeline's others from
 * tail (bindings 2.., six for mul_mat, eight for mul_mat_lora). */
static es_status run_part_sets(run *r, const es__vk_mat *m, const es__vk_pipeline *p, const es__vk_bind *tail,
                               VkDescriptorSet sets[16]) {
    ES_RETURN_IF(m->n_parts > 16 || p->n_bindings > 10, r->d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan op: matrix too large");
    for (uint32_t i = 0; i < m->n_parts; i++) {
        es__vk_bind bind[10];
        es__vk_part_binds(run_ws(r, m), &m->parts[i], &bind[0], &bind[1]);
        memcpy(&bind[2], tail, (p->n_bindings - 2) * sizeof *tail);
        ES_TRY(es__vk_set_create(r->d, r->pool, p, bind, &sets[i]));
    }
    return ES_OK;
}

/* ---- step data */

/* The step data of n tokens at n_past (chain unless dfs_end is given; positions n_past + depth
 * unless pos is given); with mask ([n][n] bytes), the mask after it for attn.comp's DENSE_MASK
 * build. */
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
        *bind = whole(*out);
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

/* The step data of a batch, with the token whose streams the stream-pass kernels compute. */
static es_status run_batch(run *r, const es__vk_op_batch *bt, es__vk_buf **out, es__vk_bind *bind) {
    ES_RETURN_IF(bt->n == 0 || (bt->node >= bt->n && bt->node > 0), r->d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan op: node %u of a batch of %u", bt->node, bt->n);
    ES_TRY(run_step(r, (int32_t)bt->n_past, (int32_t)bt->n, NULL, bt->pos, bt->dfs_end, NULL, 0, NULL, 0, out, bind));
    ((int32_t *)(*out)->map)[ES_STEP_SS_NODE] = (int32_t)bt->node;
    return es__vk_buf_flush(r->d, *out);
}

/* The positions a step buffer holds. */
static const int32_t *step_positions(const es__vk_buf *step) {
    const int32_t *s = step->map;
    return s + ES_STEP_HDR + ES_STEP_POS * s[ES_STEP_NB];
}

/* As the forward lays out its RoPE tables (lib/vulkan/model_vk.h es__vk_rope_off): a decoy table
 * of NaN first (another layer's: a kernel that ignores rope_off reads it and fails), then the RoPE
 * table (es__vk_rope_table) for positions 0 .. the largest of step's n tokens at *rope_off, then
 * bias[n_bias] when given (its float offset into *bias_off). */
static es_status run_rope_table(run *r, const es__vk_op_rope *rope, const es__vk_buf *step, uint32_t n,
                                const float *bias, uint32_t n_bias, uint32_t *rope_off, uint32_t *bias_off,
                                es__vk_bind *bind) {
    const int32_t *pos = step_positions(step);
    int32_t max_pos = 0;
    for (uint32_t t = 0; t < n; t++) max_pos = ES__MAX(max_pos, pos[t]);
    const size_t tab = (size_t)(max_pos + 1) * (rope->n_rot / 2) * 2, rope_floats = 2 * tab + 1;
    const size_t floats = rope_floats + (bias ? n_bias : 0);
    float *table = es__calloc(r->d->alloc, floats, sizeof *table);
    ES_RETURN_IF(!table, r->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    for (size_t i = 0; i < tab; i++) table[i] = NAN;
    const es__rope plain = es__rope_plain((int32_t)rope->n_rot, rope->freq_base, rope->freq_scale);
    es__vk_rope_table(&plain, table + tab, 0, (uint32_t)max_pos + 1, false);
    if (bias) memcpy(table + rope_floats, bias, sizeof *bias * n_bias);
    *rope_off = (uint32_t)tab;
    *bias_off = bias ? (uint32_t)rope_floats : 0u;
    es__vk_buf *T = NULL;
    es_status s = run_buf(r, table, sizeof *table * floats, &T);
    es__free(r->d->alloc, table);
    ES_TRY(s);
    return run_ro(r, T, VK_FORMAT_R32_SFLOAT, bind);
}

/* ---- submission */

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + 1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* Submits; *ms gets the wall time per rep, or with EDGESPEC_VKBENCH_CPU_TIME set the process CPU
 * time per rep (all threads), which a busy machine disturbs less. */
static es_status run_submit(run *r, es__vk_rec *rec, uint32_t reps, double *ms) {
    ES_TRY(es__vk_rec_end(rec));
    const bool cpu = getenv("EDGESPEC_VKBENCH_CPU_TIME") != NULL;
    const double t0 = cpu ? cpu_seconds() : es__time_now();
    ES_TRY(es__vk_submit_wait(r->d, r->cb));
    if (ms) *ms = ((cpu ? cpu_seconds() : es__time_now()) - t0) * 1e3 / (reps ? reps : 1);
    return ES_OK;
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

/* Records reps (at least one) mul_mat-family dispatches over m's parts and submits them. */
static es_status run_mul_mat_submit(run *r, const char *op, const es__vk_mat *m, uint32_t epi, bool lora,
                                    const VkDescriptorSet *sets, const es__pc_mul_mat *pc, uint32_t reps, double *ms) {
    es__vk_rec rec;
    es__vk_rec_begin(&rec, r->d, r->cb, VK_NULL_HANDLE, 0, NULL);
    for (uint32_t k = 0; k < (reps ? reps : 1); k++) ES_TRY(es__vk_rec_mul_mat(&rec, op, m, epi, lora, sets, pc));
    return run_submit(r, &rec, reps, ms);
}

/* ---- the mul_mat family */

/* Bindings 4..7 of the RoPE epilogue: table, step, caches (uploaded from ss->kc, ss->vc). */
static es_status run_rope_binds(run *r, const es__vk_ss_proj *ss, es__vk_buf **K, es__vk_buf **V, uint32_t *rope_off,
                                uint32_t *bias_off, es__vk_bind b[4]) {
    const es__vk_op_rope *g = ss->rope;
    const size_t cache = (size_t)g->n_head_kv * ss->n_ctx * g->hd;
    es__vk_buf *S = NULL;
    ES_TRY(run_batch(r, ss->batch, &S, &b[1]));
    ES_TRY(run_rope_table(r, g, S, ss->batch->n, ss->bias, (g->n_head + 2 * g->n_head_kv) * g->hd, rope_off, bias_off,
                          &b[0]));
    ES_TRY(run_buf(r, ss->kc, sizeof *ss->kc * cache, K));
    ES_TRY(run_buf(r, ss->vc, sizeof *ss->vc * cache, V));
    b[2] = whole(*K);
    b[3] = whole(*V);
    return ES_OK;
}

/* Bindings 8, 9 of the LoRA kernels: R's rows of r32 floats, and B (uploaded as msa_vk.c does). */
static es_status run_lora_binds(run *r, const es__vk_ss_proj *ss, uint32_t rows, uint32_t n, uint32_t r32,
                                es__vk_bind b[2]) {
    es__vk_mat *mb = NULL;
    ES_TRY(run_mat(r, "op.lora_b", ES__DTYPE_F32, ss->lora_b, rows, ss->rank, NULL, &mb));
    ES_RETURN_IF(mb->n_parts != 1, r->d->err, ES_ERR_UNSUPPORTED, "vulkan op: B larger than one binding range");
    es__vk_buf *R = NULL;
    ES_TRY(run_rows(r, ss->lora_r, n > ss->ss_t0 ? n - ss->ss_t0 : 0, ss->rank, r32, &R));
    ES_TRY(run_ro(r, R, VK_FORMAT_R32G32B32A32_SFLOAT, &b[0]));
    es__vk_bind unused;
    es__vk_part_binds(run_ws(r, mb), &mb->parts[0], &b[1], &unused);
    return ES_OK;
}

static es_status check_proj(es_backend *b, uint32_t rows, uint32_t n, uint32_t epi, const es__vk_ss_proj *ss) {
    const es__vk_op_rope *g = ss->rope;
    ES_RETURN_IF(epi == ES__EPI_ROPE_KV && (!g || !ss->batch || !ss->kc || !ss->vc ||
                                            rows != (g->n_head + 2 * g->n_head_kv) * g->hd),
                 &b->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: the RoPE epilogue needs its geometry, batch and caches");
    ES_RETURN_IF(ss->lora_b && (!ss->lora_r || ss->rank == 0 || ss->ss_t0 > n), &b->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan op: a LoRA term needs R and B of rank > 0");
    return ES_OK;
}

/* y (=, +=, SwiGLU, RoPE) W x with Speculative Streaming's extras in ss; y is read and written
 * whole ([n][cols]). */
static es_status run_proj(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K, const float *x,
                          uint32_t n, uint32_t epi, const es__vk_ss_proj *ss, float *y, uint32_t reps, double *ms) {
    RUN_BEGIN(b)
    const es__vk_op_rope *g = ss->rope;
    const bool lora = ss->lora_b != NULL, rope_kv = epi == ES__EPI_ROPE_KV;
    if (s == ES_OK) s = check_proj(b, rows, n, epi, ss);
    const uint32_t perm[3] = {g ? (g->n_head + g->n_head_kv) * g->hd : 0, g ? g->hd : 0, g ? g->n_rot : 0};
    es__vk_mat *m = NULL;
    if (s == ES_OK) s = run_mat(&r, "op.weight", type, w, rows, K, g && g->type == ES_ROPE_NEOX ? perm : NULL, &m);
    const uint32_t cols = epi == ES__EPI_SWIGLU || epi == ES__EPI_GEGLU ? rows / 2 : rows, r32 = up32(ss->rank);
    uint32_t rope_off = 0, bias_off = 0;
    es__vk_buf *X = NULL, *Y = NULL, *KC = NULL, *VC = NULL;
    es__vk_bind tail[8]; /* bindings 2..9: X, Y, RoPE table, step, K, V caches, R, B */
    if (s == ES_OK) s = run_rows(&r, x, n, K, m->K, &X);
    if (s == ES_OK) s = run_ro(&r, X, VK_FORMAT_R32G32B32A32_SFLOAT, &tail[0]);
    if (s == ES_OK) s = run_buf(&r, y, sizeof *y * n * cols, &Y);
    if (s == ES_OK) tail[1] = whole(Y);
    if (s == ES_OK) s = rope_kv ? run_rope_binds(&r, ss, &KC, &VC, &rope_off, &bias_off, &tail[2]) : run_extras(&r, &tail[2]);
    if (s == ES_OK && lora) s = run_lora_binds(&r, ss, rows, n, r32, &tail[6]);
    es__vk_pipeline *p = NULL;
    const uint32_t tok = es__vk_mul_mat_tok(r.d, type, n);
    if (s == ES_OK) s = lora ? es__vk_mul_mat_lora_pipe(r.d, m, tok, epi, &p) : es__vk_mul_mat_pipe(r.d, m, tok, epi, &p);
    VkDescriptorSet sets[16];
    if (s == ES_OK) s = run_part_sets(&r, m, p, tail, sets);
    if (s == ES_OK) {
        es__pc_mul_mat pc;
        memset(&pc, 0, sizeof pc);
        pc.n = n;
        pc.x_stride = m->K / 4;
        pc.y_stride = cols;
        if (g) pc.n_head = g->n_head, pc.n_head_kv = g->n_head_kv, pc.hd = g->hd, pc.n_rot = g->n_rot;
        pc.n_ctx = ss->n_ctx;
        pc.lora_r = ss->rank;
        pc.lora_stride = r32 / 4;
        pc.ss_t0 = ss->ss_t0;
        pc.ss_g = ss->ss_g;
        pc.bias_off = bias_off;
        pc.softcap = ss->softcap;
        pc.rope_off = rope_off;
        pc.rope_stride = rope_kv ? ss->rope->n_rot : 0u; /* run_rope_table's: a row per position */
        pc.scale = ss->scale;
        s = run_mul_mat_submit(&r, "mul_mat", m, epi, lora, sets, &pc, reps, ms);
    }
    if (s == ES_OK) s = run_read(&r, Y, y, sizeof *y * n * cols);
    const size_t cache = g ? (size_t)g->n_head_kv * ss->n_ctx * g->hd : 0;
    if (s == ES_OK && rope_kv) s = run_read(&r, KC, ss->kc, sizeof *ss->kc * cache);
    if (s == ES_OK && rope_kv) s = run_read(&r, VC, ss->vc, sizeof *ss->vc * cache);
    RUN_END()
}

es_status es__vk_run_mul_mat(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K,
                             const float *x, uint32_t n, uint32_t epi, float *y, uint32_t reps, double *ms) {
    if (epi == ES__EPI_ROPE_KV)
        return es__fail(b ? &b->err : NULL, ES_ERR_INVALID_ARGUMENT, "vulkan op: epilogue %u needs its geometry", epi);
    const es__vk_ss_proj none = {0};
    return run_proj(b, type, w, rows, K, x, n, epi, &none, y, reps, ms);
}

es_status es__vk_run_mul_mat_ss(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K,
                                const float *x, uint32_t n, uint32_t epi, const es__vk_ss_proj *ss, float *y) {
    return run_proj(b, type, w, rows, K, x, n, epi, ss, y, 1, NULL);
}

/* RoPE and the KV write run as the epilogue of the Q/K/V projection (mul_mat.comp); here the
 * projection is an identity matrix (exact in f32), so the epilogue sees qkv itself. With NEOX the
 * identity's rows are permuted the way model upload permutes the projection. */
es_status es__vk_run_rope_kv(es_backend *b, float *qkv, uint32_t n, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                             uint32_t n_rot, es_rope_type type, float freq_base, float freq_scale, const int32_t *pos,
                             uint32_t n_past, uint32_t n_ctx, float *kc, float *vc, const float *bias) {
    const uint32_t width = (n_head + 2 * n_head_kv) * hd;
    float *ident = calloc((size_t)width * width, sizeof *ident);
    if (!ident) return es__fail(b ? &b->err : NULL, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    for (uint32_t i = 0; i < width; i++) ident[(size_t)i * width + i] = 1.0f;
    const es__vk_op_rope rope = {n_head, n_head_kv, hd, n_rot, type, freq_base, freq_scale};
    const es__vk_op_batch batch = {n_past, n, NULL, pos, 0};
    es__vk_ss_proj ss = {0};
    ss.rope = &rope;
    ss.batch = &batch;
    ss.n_ctx = n_ctx;
    ss.kc = kc;
    ss.vc = vc;
    ss.bias = bias;
    /* y = qkv: the epilogue writes Q, and the K and V columns keep what the caller gave */
    const es_status s = run_proj(b, ES__DTYPE_F32, ident, width, width, qkv, n, ES__EPI_ROPE_KV, &ss, qkv, 1, NULL);
    free(ident);
    return s;
}

/* ---- the other ops of the forward pass */

/* rmsnorm.comp on n rows of x into y; with w2 (post-branch norm and the next norm in one
 * dispatch) the rows of x are then overwritten with the next norm of y's, Z bound to x's buffer as
 * the forward binds it. G holds w2 (or zeros) and then w, so that each weight offset is tried at
 * 0 and beyond. */
static es_status run_norm(es_backend *b, float *x, const float *w, const float *w2, uint32_t E, uint32_t n, float eps,
                          float add, float *y) {
    RUN_BEGIN(b)
    const uint32_t E32 = up32(E);
    es__vk_buf *X = NULL, *G = NULL, *Y = NULL, *S = NULL;
    es__vk_bind bx, bg, bs;
    es__vk_pipeline *p = NULL;
    float *gw = s == ES_OK ? calloc((size_t)2 * E32, sizeof *gw) : NULL;
    if (s == ES_OK && !gw) s = es__fail(r.d->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    if (s == ES_OK) {
        if (w2) memcpy(gw, w2, sizeof *gw * E);
        memcpy(gw + E32, w, sizeof *gw * E);
    }
    if (s == ES_OK) s = es__vk_rmsnorm_pipe(r.d, &p);
    if (s == ES_OK) s = run_rows(&r, x, n, E, E32, &X);
    if (s == ES_OK) s = run_rows(&r, gw, 2, E32, E32, &G);
    if (s == ES_OK) s = run_rows(&r, y, n, E, E32, &Y);
    if (s == ES_OK) s = run_ro(&r, X, VK_FORMAT_R32G32B32A32_SFLOAT, &bx);
    if (s == ES_OK) s = run_ro(&r, G, VK_FORMAT_R32G32B32A32_SFLOAT, &bg);
    if (s == ES_OK) s = run_step(&r, 0, 1, NULL, NULL, NULL, NULL, 0, NULL, 0, &S, &bs);
    if (s == ES_OK) {
        es__vk_bind binds[5] = {bx, bg, bs, whole(Y), w2 ? whole(X) : whole(Y)};
        es__pc_rmsnorm pc = {E, n, E32, E32, 0, eps, add, w2 ? 1u : 0u, 0u};
        s = run_one(&r, p, binds, &pc, n, 1, 1);
    }
    if (s == ES_OK) read_rows(Y, n, E, E32, y);
    if (s == ES_OK && w2) read_rows(X, n, E, E32, x);
    free(gw);
    RUN_END()
}

es_status es__vk_run_rmsnorm(es_backend *b, const float *x, const float *w, uint32_t E, uint32_t n, float eps, float add,
                             float *y) {
    return run_norm(b, (float *)x, w, NULL, E, n, eps, add, y); /* x is only read without w2 */
}

es_status es__vk_run_rmsnorm_post(es_backend *b, float *x, const float *w, const float *w2, uint32_t E, uint32_t n,
                                  float eps, float add, float *y) {
    return run_norm(b, x, w, w2, E, n, eps, add, y);
}

es_status es__vk_run_get_rows(es_backend *b, es__dtype type, const void *table, uint32_t K, uint32_t rows,
                              const int32_t *ids, uint32_t n, float scale, float *out) {
    RUN_BEGIN(b)
    es__vk_mat *m = NULL;
    if (s == ES_OK) s = run_mat(&r, "op.table", type, table, rows, K, NULL, &m);
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_get_rows_pipe(r.d, m->type, &p); /* the layout it was uploaded in */
    es__vk_buf *X = NULL, *S = NULL;
    es__vk_bind bs;
    if (s == ES_OK) s = run_step(&r, 0, (int32_t)n, ids, NULL, NULL, NULL, 0, NULL, 0, &S, &bs);
    const uint32_t E32 = m ? m->K : 0;
    if (s == ES_OK) s = run_rows(&r, out, n, K, E32, &X);
    for (uint32_t i = 0; s == ES_OK && i < m->n_parts; i++) {
        es__vk_bind binds[4];
        es__vk_part_binds(run_ws(&r, m), &m->parts[i], &binds[0], &binds[1]);
        binds[2] = bs;
        binds[3] = whole(X);
        es__pc_get_rows pc = {m->K, K, n, m->parts[i].row0, m->parts[i].rows, E32, m->team, scale};
        s = run_one(&r, p, binds, &pc, n, 1, 1);
    }
    if (s == ES_OK) read_rows(X, n, K, E32, out);
    RUN_END()
}

es_status es__vk_run_attention(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                               uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_past, uint32_t n,
                               const int32_t *dfs_end, float scale, float *out) {
    return es__vk_run_attention_bench(b, q, kc, vc, n_ctx, n_head, n_head_kv, hd, n_past, n, dfs_end, scale, out, NULL);
}

/* Records every token chunk's attention (and split merge) into r->cb. */
static void rec_attention(es__vk_rec *rec, es__vk_pipeline *pa, uint32_t per_wg, es__vk_pipeline *pm,
                          VkDescriptorSet sa, VkDescriptorSet sm, const int32_t *pos, uint32_t n, uint32_t n_head,
                          uint32_t n_head_kv, uint32_t hd, uint32_t n_ctx, float scale, uint32_t window, float softcap) {
    const uint32_t qd = n_head * hd, split = rec->d->policy.attn_split, max_splits = (n_ctx + split - 1) / split;
    for (uint32_t t0 = 0; t0 < n; t0 += ES__ATTN_CHUNK) {
        const uint32_t t1 = ES__MIN(n, t0 + ES__ATTN_CHUNK);
        int32_t maxp = 0;
        for (uint32_t t = t0; t < t1; t++) maxp = ES__MAX(maxp, pos[t]);
        es__pc_attn pc = {t0, t1 - t0, n_head, n_head_kv, hd, qd, n_ctx, split, max_splits, qd, scale, window, softcap, 0, 0, 0};
        es__vk_rec_dispatch(rec, "attn", pa, sa, &pc, ((t1 - t0) * n_head + per_wg - 1) / per_wg,
                            (uint32_t)maxp / split + 1, 1);
        es__pc_attn_merge pm_pc = {t0, n_head, hd, split, max_splits, qd};
        if (max_splits > 1) es__vk_rec_dispatch(rec, "attn_merge", pm, sm, &pm_pc, n_head, t1 - t0, 1);
    }
}

es_status es__vk_run_attention_bench(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                                     uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_past, uint32_t n,
                                     const int32_t *dfs_end, float scale, float *out, es__vk_attn_bench *bench) {
    RUN_BEGIN(b)
    const uint32_t qd = n_head * hd, split = r.d->policy.attn_split, max_splits = (n_ctx + split - 1) / split;
    const size_t cache = (size_t)n_head_kv * n_ctx * hd;
    uint32_t per_wg = 0;
    es__vk_buf *Q = NULL, *K = NULL, *V = NULL, *S = NULL, *O = NULL, *P = NULL;
    es__vk_bind bq = {0}, bk = {0}, bv = {0}, bs = {0}, bp = {0};
    es__vk_pipeline *pa = NULL, *pm = NULL, custom;
    memset(&custom, 0, sizeof custom);
    if (s == ES_OK && (hd % 4 || hd > 512))
        s = es__fail(&b->err, ES_ERR_UNSUPPORTED, "vulkan op: head dimension %u not supported", hd);
    if (s == ES_OK) s = es__vk_attn_kernel(r.d, "attn", hd, &pa, &per_wg);
    if (s == ES_OK && bench && bench->shader) {
        s = es__vk_pipeline_custom(r.d, bench->shader, pa->spec, pa->n_spec, &custom);
        pa = &custom;
    }
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "attn_merge", true, false, &pm);
    if (s == ES_OK) s = run_ro_f4(&r, q, (size_t)n * qd, &Q, &bq);
    if (s == ES_OK) s = run_ro_f4(&r, kc, cache, &K, &bk);
    if (s == ES_OK) s = run_ro_f4(&r, vc, cache, &V, &bv);
    if (s == ES_OK) s = run_buf(&r, out, sizeof(float) * n * qd, &O);
    if (s == ES_OK) s = run_ro_f4(&r, NULL, (size_t)ES__ATTN_CHUNK * n_head * max_splits * (hd + 4), &P, &bp);
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
        const uint32_t reps = bench && bench->reps ? bench->reps : 1;
        es__vk_rec rec;
        es__vk_rec_begin(&rec, r.d, r.cb, VK_NULL_HANDLE, 0, NULL);
        for (uint32_t i = 0; i < reps; i++)
            rec_attention(&rec, pa, per_wg, pm, sa, sm, step_positions(S), n, n_head, n_head_kv, hd, n_ctx, scale,
                          bench ? bench->window : 0, bench ? bench->softcap : 0.0f);
        s = run_submit(&r, &rec, reps, bench ? &bench->ms : NULL);
    }
    if (s == ES_OK) s = run_read(&r, O, out, sizeof *out * n * qd);
    if (custom.pipeline) es__vk_pipeline_release(r.d, &custom);
    RUN_END()
}

es_status es__vk_run_attention_spec(es_backend *b, const float *q, const float *kc, const float *vc, uint32_t n_ctx,
                                    uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n, uint32_t chunk,
                                    float lambda, float scale, float *out, float *spec, es__spec_verdict *v,
                                    bool two_parts, uint32_t reps, double *ms) {
    RUN_BEGIN(b)
    const uint32_t qd = n_head * hd, split = r.d->policy.attn_split, max_splits = (n_ctx + split - 1) / split;
    const size_t cache = (size_t)n_head_kv * n_ctx * hd;
    uint32_t per_wg = 0;
    es__vk_buf *Q = NULL, *K = NULL, *V = NULL, *S = NULL, *O = NULL, *SP = NULL, *VD = NULL, *P = NULL;
    es__vk_bind bq = {0}, bk = {0}, bv = {0}, bs = {0}, bp = {0};
    es__vk_pipeline *pa = NULL, *pm = NULL;
    if (s == ES_OK && (hd % 4 || hd > 512 || n == 0 || n > n_ctx || chunk == 0 || chunk % split))
        s = es__fail(&b->err, ES_ERR_UNSUPPORTED, "vulkan op: speculative attention with hd %u, n %u, chunk %u", hd, n,
                     chunk);
    if (s == ES_OK) s = es__vk_attn_kernel(r.d, "attn", hd, &pa, &per_wg);
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "attn_spec", true, false, &pm);
    if (s == ES_OK) s = run_ro_f4(&r, q, qd, &Q, &bq);
    if (s == ES_OK) s = run_ro_f4(&r, kc, cache, &K, &bk);
    if (s == ES_OK) s = run_ro_f4(&r, vc, cache, &V, &bv);
    if (s == ES_OK) s = run_buf(&r, out, sizeof(float) * qd, &O);
    if (s == ES_OK) s = run_buf(&r, spec, sizeof(float) * qd, &SP);
    const float vin[8] = {lambda, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}; /* no gating: out stays exact */
    if (s == ES_OK) s = run_buf(&r, vin, sizeof vin, &VD);
    if (s == ES_OK) s = run_ro_f4(&r, NULL, (size_t)n_head * max_splits * (hd + 4), &P, &bp);
    const int32_t zero = 0;
    if (s == ES_OK) s = run_step_mask(&r, (int32_t)n - 1, 1, NULL, NULL, &zero, NULL, 0, NULL, 0, NULL, &S, &bs);
    VkDescriptorSet sa = VK_NULL_HANDLE, sm = VK_NULL_HANDLE;
    if (s == ES_OK) {
        const es__vk_bind ba[6] = {bq, bk, bv, bs, whole(O), whole(P)}, bm[5] = {bp, bs, whole(O), whole(SP), whole(VD)};
        s = es__vk_set_create(r.d, r.pool, pa, ba, &sa);
        if (s == ES_OK) s = es__vk_set_create(r.d, r.pool, pm, bm, &sm);
    }
    if (s == ES_OK) {
        es__vk_rec rec;
        es__vk_rec_begin(&rec, r.d, r.cb, VK_NULL_HANDLE, 0, NULL);
        int32_t s2 = 0;
        es__spec_window((int32_t)n, (int32_t)chunk, &s2);
        for (uint32_t i = 0; i < (reps ? reps : 1); i++)
            for (uint32_t part = two_parts ? 1 : 0; part <= (two_parts ? 2u : 0u); part++) {
                es__pc_attn pc = {0,  1,     n_head, n_head_kv, hd,   qd,          n_ctx, split, max_splits,
                                  qd, scale, 0,      0.0f,      part, chunk / split, (uint32_t)s2 / split};
                es__vk_rec_dispatch(&rec, "attn", pa, sa, &pc, (n_head + per_wg - 1) / per_wg, (n - 1) / split + 1, 1);
                es__pc_attn_spec ps = {0, n_head, hd, split, max_splits, qd, chunk, 0, part == 1};
                es__vk_rec_dispatch(&rec, "attn_spec", pm, sm, &ps, 1, 1, 1);
            }
        s = run_submit(&r, &rec, reps ? reps : 1, ms);
    }
    if (s == ES_OK) s = run_read(&r, O, out, sizeof *out * qd);
    if (s == ES_OK) s = run_read(&r, SP, spec, sizeof *spec * qd);
    float vd[8] = {0};
    if (s == ES_OK) s = run_read(&r, VD, vd, sizeof vd);
    if (s == ES_OK) *v = (es__spec_verdict){vd[4] != 0.0f, vd[5] != 0.0f, vd[6], vd[7]};
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
    if (s == ES_OK) s = run_read(&r, X, y, sizeof *y * V * n);
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
    if (s == ES_OK) s = es__vk_buf_invalidate(r.d, R);
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
    const size_t cache = (size_t)n_head_kv * n_ctx * hd;
    es__vk_buf *K = NULL, *V = NULL, *S = NULL;
    es__vk_bind bs;
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "kv_move", true, false, &p);
    if (s == ES_OK) s = run_buf(&r, kc, sizeof *kc * cache, &K);
    if (s == ES_OK) s = run_buf(&r, vc, sizeof *vc * cache, &V);
    int32_t one_pos = (int32_t)n_past, one_end = 0;
    if (s == ES_OK) s = run_step(&r, (int32_t)n_past, 1, NULL, &one_pos, &one_end, NULL, 0, keep, (int32_t)n_keep, &S, &bs);
    if (s == ES_OK) {
        es__vk_bind binds[3] = {bs, whole(K), whole(V)};
        es__pc_kv_move pc = {n_keep, n_past, hd, n_ctx, n_head_kv, 0};
        s = run_one(&r, p, binds, &pc, n_head_kv, 2, 1);
    }
    if (s == ES_OK) s = run_read(&r, K, kc, sizeof *kc * cache);
    if (s == ES_OK) s = run_read(&r, V, vc, sizeof *vc * cache);
    RUN_END()
}

/* ---- Speculative Streaming's kernels (recorded by lib/vulkan/msa_vk.c) */

es_status es__vk_run_ss_rows(es_backend *b, const es__vk_ss_rows_call *c, const float *x, uint32_t x_rows,
                             const float *p, uint32_t p_rows, float *y, uint32_t y_rows) {
    RUN_BEGIN(b)
    if (s == ES_OK && ((c->width | c->x_stride | c->p_stride | c->y_stride) % 4 || (c->mode == 2) != (x == NULL)))
        s = es__fail(&b->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: ss_rows takes whole texels, and x only outside mode 2");
    es__vk_pipeline *pipe = NULL;
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "ss_rows", true, false, &pipe);
    es__vk_buf *X = NULL, *P = NULL, *Y = NULL, *S = NULL;
    es__vk_bind bx, bp, bs;
    if (s == ES_OK) s = run_buf(&r, y, sizeof *y * y_rows * c->y_stride, &Y);
    /* mode 2 reads the node rows of the forward's rows buffer and writes its stream rows */
    if (s == ES_OK) s = x ? run_ro_f4(&r, x, (size_t)x_rows * c->x_stride, &X, &bx)
                          : run_ro(&r, Y, VK_FORMAT_R32G32B32A32_SFLOAT, &bx);
    if (s == ES_OK) s = run_ro_f4(&r, p, (size_t)p_rows * c->p_stride, &P, &bp);
    /* a chain as long as x, so the step's arrays have room for mode 3's list */
    const es__vk_op_batch chain = {0, x_rows ? x_rows : 1, NULL, NULL, 0};
    if (s == ES_OK) s = run_batch(&r, &chain, &S, &bs);
    if (s == ES_OK) {
        int32_t *step = S->map;
        step[ES_STEP_SS_NODE] = (int32_t)c->node; /* any row of x, not a batch token */
        for (uint32_t k = 0; c->mode == 3 && k < c->n_rows; k++)
            step[ES_STEP_HDR + ES_STEP_EXIT_ROWS * step[ES_STEP_NB] + k] = c->rows[k];
        s = es__vk_buf_flush(r.d, S);
    }
    if (s == ES_OK) {
        es__vk_bind binds[4] = {bx, bp, bs, whole(Y)};
        es__pc_ss_rows pc = {c->mode,        c->g,           c->y_row0,      c->n_rows,
                             c->width / 4,   c->x_stride / 4, c->p_stride / 4, c->y_stride / 4};
        s = run_one(&r, pipe, binds, &pc, c->n_rows, 1, 1);
    }
    if (s == ES_OK) s = run_read(&r, Y, y, sizeof *y * y_rows * c->y_stride);
    RUN_END()
}

es_status es__vk_run_ss_rope(es_backend *b, const es__vk_op_rope *rope, const es__vk_op_batch *batch, float *qkv,
                             uint32_t n_rows, uint32_t qkv_stride, const float *bias) {
    RUN_BEGIN(b)
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "ss_rope", true, false, &p);
    es__vk_buf *Q = NULL, *S = NULL;
    es__vk_bind bt, bs;
    if (s == ES_OK) s = run_buf(&r, qkv, sizeof *qkv * n_rows * qkv_stride, &Q);
    if (s == ES_OK) s = run_batch(&r, batch, &S, &bs);
    uint32_t rope_off = 0, bias_off = 0;
    const uint32_t n_bias = (rope->n_head + 2 * rope->n_head_kv) * rope->hd;
    if (s == ES_OK) s = run_rope_table(&r, rope, S, batch->n, bias, n_bias, &rope_off, &bias_off, &bt);
    if (s == ES_OK) {
        es__vk_bind binds[3] = {whole(Q), bt, bs};
        es__pc_ss_rope pc = {n_rows, rope->n_head, rope->n_head_kv, rope->hd, rope->n_rot,
                             rope->type == ES_ROPE_NEOX ? 1u : 0u, qkv_stride, bias_off, rope_off, rope->n_rot};
        s = run_one(&r, p, binds, &pc, n_rows, 1, 1);
    }
    if (s == ES_OK) s = run_read(&r, Q, qkv, sizeof *qkv * n_rows * qkv_stride);
    RUN_END()
}

/* The head norms as the model's norm vectors lie: q_norm at float 32 (a layer's are never at 0),
 * k_norm after it, each padded to 32 floats; read as vec4 texels. */
static es_status run_head_norms(run *r, const es__vk_qk_norm_call *c, uint32_t *q_off, uint32_t *k_off,
                                es__vk_bind *bind) {
    const uint32_t hd = c->rope->hd, hd32 = up32(hd);
    float *g = es__calloc(r->d->alloc, 32 + 2 * (size_t)hd32, sizeof *g);
    ES_RETURN_IF(!g, r->d->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    *q_off = 32;
    *k_off = 32 + hd32;
    memcpy(g + *q_off, c->q_norm, sizeof *g * hd);
    memcpy(g + *k_off, c->k_norm, sizeof *g * hd);
    es__vk_buf *G = NULL;
    const es_status s = run_buf(r, g, sizeof *g * (32 + 2 * (size_t)hd32), &G);
    es__free(r->d->alloc, g);
    ES_TRY(s);
    return run_ro(r, G, VK_FORMAT_R32G32B32A32_SFLOAT, bind);
}

es_status es__vk_run_qk_norm_rope(es_backend *b, const es__vk_qk_norm_call *c, const es__vk_op_batch *batch,
                                  float *qkv) {
    RUN_BEGIN(b)
    const es__vk_op_rope *g = c->rope;
    if (s == ES_OK && c->ss_t0 > 0 && (!c->kc || !c->vc))
        s = es__fail(&b->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: token rows need the caches");
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_simple_pipe(r.d, "qk_norm_rope", true, true, &p);
    const size_t cache = c->kc ? (size_t)g->n_head_kv * c->n_ctx * g->hd : 4;
    es__vk_buf *Q = NULL, *S = NULL, *K = NULL, *V = NULL;
    es__vk_bind bt, bs, bg;
    uint32_t rope_off = 0, bias_off = 0, q_off = 0, k_off = 0;
    if (s == ES_OK) s = run_buf(&r, qkv, sizeof *qkv * c->n_rows * c->qkv_stride, &Q);
    if (s == ES_OK) s = run_batch(&r, batch, &S, &bs);
    if (s == ES_OK)
        s = run_rope_table(&r, g, S, batch->n, c->bias, (g->n_head + 2 * g->n_head_kv) * g->hd, &rope_off, &bias_off,
                           &bt);
    if (s == ES_OK) s = run_head_norms(&r, c, &q_off, &k_off, &bg);
    if (s == ES_OK) s = run_buf(&r, c->kc, sizeof(float) * cache, &K);
    if (s == ES_OK) s = run_buf(&r, c->vc, sizeof(float) * cache, &V);
    if (s == ES_OK) {
        es__vk_bind binds[6] = {whole(Q), bt, bs, bg, whole(K), whole(V)};
        es__pc_qk_norm_rope pc = {c->n_rows, g->n_head, g->n_head_kv, g->hd, g->n_rot, g->type == ES_ROPE_NEOX ? 1u : 0u,
                                  c->qkv_stride, c->n_ctx, bias_off, q_off, k_off, c->ss_t0, c->ss_g, c->eps,
                                  rope_off, g->n_rot};
        s = run_one(&r, p, binds, &pc, c->n_rows, g->n_head + g->n_head_kv, 1);
    }
    if (s == ES_OK) s = run_read(&r, Q, qkv, sizeof *qkv * c->n_rows * c->qkv_stride);
    if (s == ES_OK && c->kc) s = run_read(&r, K, c->kc, sizeof(float) * cache);
    if (s == ES_OK && c->vc) s = run_read(&r, V, c->vc, sizeof(float) * cache);
    RUN_END()
}

es_status es__vk_run_ss_attn(es_backend *b, const es__vk_ss_attn_call *c, const es__vk_op_batch *batch,
                             const float *qkv, uint32_t qkv_rows, const float *kc, const float *vc, float *out,
                             uint32_t out_rows) {
    RUN_BEGIN(b)
    if (s == ES_OK && (c->hd % 4 || c->hd > 256 || c->qkv_stride % 4 || c->o_stride % 4))
        s = es__fail(&b->err, ES_ERR_UNSUPPORTED, "vulkan op: ss_attn with head dimension %u, strides %u and %u", c->hd,
                     c->qkv_stride, c->o_stride);
    es__vk_pipeline *p = NULL;
    uint32_t per_wg = 1;
    if (s == ES_OK) s = es__vk_attn_kernel(r.d, "ss_attn", c->hd, &p, &per_wg);
    const size_t cache = (size_t)c->n_head_kv * c->n_ctx * c->hd;
    es__vk_buf *Q = NULL, *K = NULL, *V = NULL, *O = NULL, *S = NULL;
    es__vk_bind bq, bk, bv, bs;
    if (s == ES_OK) s = run_ro_f4(&r, qkv, (size_t)qkv_rows * c->qkv_stride, &Q, &bq);
    if (s == ES_OK) s = run_ro_f4(&r, kc, cache, &K, &bk);
    if (s == ES_OK) s = run_ro_f4(&r, vc, cache, &V, &bv);
    if (s == ES_OK) s = run_buf(&r, out, sizeof *out * out_rows * c->o_stride, &O);
    if (s == ES_OK) s = run_batch(&r, batch, &S, &bs);
    if (s == ES_OK) {
        es__vk_bind binds[5] = {bq, bk, bv, bs, whole(O)};
        es__pc_ss_attn pc = {c->n_rows, c->g, c->row0, c->n_head, c->n_head_kv, c->hd, c->qkv_stride, c->n_ctx,
                             c->o_stride, c->window, c->scale, c->softcap};
        s = run_one(&r, p, binds, &pc, (c->n_rows * c->n_head + per_wg - 1) / per_wg, 1, 1);
    }
    if (s == ES_OK) s = run_read(&r, O, out, sizeof *out * out_rows * c->o_stride);
    RUN_END()
}
