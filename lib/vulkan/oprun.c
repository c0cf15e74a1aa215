/* oprun.c: runs one op on host arrays through the same pipelines the forward pass records, for
 * the op tests (tests/vulkan) and micro-benchmarks (tools/vkbench). Every call makes fresh
 * buffers, so nothing leaks between calls. Deliberately slow and simple: not for inference. */
#include "backend_vk.h"
#include "ops.h"

#include <string.h>

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
    es__vk_buf bufs[8];
    uint32_t n_bufs;
    VkBufferView views[8];
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

static es_status run_submit(run *r, es__vk_rec *rec, uint32_t reps, double *ms) {
    ES_TRY(es__vk_rec_end(rec));
    const double t0 = es__time_now();
    ES_TRY(es__vk_submit_wait(r->d, r->cb));
    if (ms) *ms = (es__time_now() - t0) * 1e3 / (reps ? reps : 1);
    return ES_OK;
}

es_status es__vk_run_mul_mat(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K,
                             const float *x, uint32_t n, uint32_t epi, float *y, uint32_t reps, double *ms) {
    run r;
    es_status s = run_init(&r, b);
    es__vk_dev *d = r.d;
    es__tensor t = {"op.weight", type, 2, {K, rows, 1, 1}, w, 0, 0};
    t.nbytes = ggml_row_bytes(type, K) * rows;
    if (s == ES_OK && t.nbytes == 0)
        s = es__fail(&b->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: bad type %d or K %u", (int)type, K);
    es__vk_mat m = {0};
    es__vk_wset ws;
    memset(&ws, 0, sizeof ws);
    if (d) es__vk_wset_init(&ws, d);
    const es__tensor *src = &t;
    if (s == ES_OK) s = es__vk_mat_init(d, &m, &src, 1, false);
    es__vk_mat *mp = &m;
    if (s == ES_OK) s = es__vk_wset_upload(&ws, &mp, 1, NULL, NULL);
    const uint32_t Kp = m.K, y_cols = epi == ES__EPI_SWIGLU ? rows / 2 : rows;
    float *xp = NULL;
    es__vk_buf *X = NULL, *Y = NULL;
    if (s == ES_OK) {
        xp = es__calloc(d->alloc, (size_t)n * Kp, sizeof *xp);
        if (!xp) s = es__fail(&b->err, ES_ERR_OUT_OF_MEMORY, "vulkan op: out of memory");
    }
    if (s == ES_OK) {
        for (uint32_t i = 0; i < n; i++) memcpy(xp + (size_t)i * Kp, x + (size_t)i * K, sizeof *x * K);
        s = run_buf(&r, xp, sizeof *xp * n * Kp, &X);
    }
    if (s == ES_OK) s = run_buf(&r, epi == ES__EPI_ADD ? y : NULL, sizeof *y * n * y_cols, &Y);
    es__vk_pipeline *p = NULL;
    if (s == ES_OK) s = es__vk_mul_mat_pipe(d, type, es__vk_mul_mat_tok(n), epi, &p);
    VkDescriptorSet sets[16];
    es__vk_bind bx;
    if (s == ES_OK) s = run_ro(&r, X, VK_FORMAT_R32G32B32A32_SFLOAT, &bx);
    if (s == ES_OK && m.n_parts > 16) s = es__fail(&b->err, ES_ERR_INVALID_ARGUMENT, "vulkan op: matrix too large");
    for (uint32_t i = 0; s == ES_OK && i < m.n_parts; i++) {
        es__vk_bind bind[4];
        es__vk_part_binds(&ws, &m.parts[i], &bind[0], &bind[1]);
        bind[2] = bx;
        bind[3] = (es__vk_bind){Y->buf, 0, Y->size, VK_NULL_HANDLE};
        s = es__vk_set_create(d, r.pool, p, bind, &sets[i]);
    }
    if (s == ES_OK) {
        es__vk_rec rec;
        es__vk_rec_begin(&rec, d, r.cb, VK_NULL_HANDLE, 0, NULL);
        for (uint32_t k = 0; k < (reps ? reps : 1); k++)
            es__vk_rec_mul_mat(&rec, "mul_mat", p, &m, sets, n, 0, Kp / 4, 0, y_cols);
        s = run_submit(&r, &rec, reps, ms);
    }
    if (s == ES_OK) s = es__vk_buf_invalidate(d, Y);
    if (s == ES_OK) memcpy(y, Y->map, sizeof *y * n * y_cols);
    es__free(d ? d->alloc : NULL, xp);
    run_free(&r);
    if (d) {
        es__vk_mat_free(d, &m);
        es__vk_wset_free(&ws);
    }
    return s;
}
