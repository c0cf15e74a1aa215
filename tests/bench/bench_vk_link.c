/* bench_vk_link.c: what shipping one row between two devices costs (lib/vulkan/link.c), the
 * communication term of ALSpec's latency model (../shared/papers/alspec-attention-level-
 * speculation.txt, Appendix F). Two Vulkan backends on the default device (two logical devices on
 * one physical device where there is one), for each link mode (shared host memory, copy):
 *   empty   one empty submission and its wait on one device: the unit everything else is in;
 *   sync    es__vk_link_send on one device, es__vk_link_recv on the other: two submit-waits;
 *   relay   a token of L layers submitted ahead on both devices, the receiver's layer v waiting
 *           for the relay of the sender's layer v (a thread of its own): wall time per layer.
 * Medians of REPS repetitions (relay: of max(REPS / LAYERS, 5) tokens after a warm-up one), JSON
 * on stdout.
 * usage: bench_vk_link [ROW_BYTES=16384] [REPS=200] [LAYERS=32] */
#include "backend.h"
#include "backend_vk.h"
#include "bench_time.h"
#include "vk_pin.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static VkCommandBuffer *alloc_cbs(es__vk_dev *d, uint32_t n) {
    VkCommandBuffer *cb = calloc(n, sizeof *cb);
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = d->pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = n;
    if (cb && vkAllocateCommandBuffers(d->dev, &ai, cb) != VK_SUCCESS) {
        free(cb);
        return NULL;
    }
    return cb;
}

typedef struct relay_job {
    es__vk_link *l;
    uint64_t base;
    int layers;
    VkDeviceSize row;
    es_status status;
} relay_job;

static void *relay_thread(void *arg) {
    relay_job *j = arg;
    for (int v = 1; v <= j->layers && j->status == ES_OK; v++)
        j->status = es__vk_link_relay(j->l, 0, j->base + (uint64_t)v, 0, j->row, 10000000000ull);
    return NULL;
}

static int bench_mode(es__vk_dev *a, es__vk_dev *b, bool shared, VkDeviceSize row, int reps, int layers,
                      const char *sep) {
    es__vk_link l;
    es__vk_buf src, dst;
    if (es__vk_link_create(a, b, row, shared, &l) != ES_OK || es__vk_link_sync_create(&l) != ES_OK ||
        es__vk_buf_create(a, row, ES__VK_MEM_DEVICE, "bench src", &src) != ES_OK ||
        es__vk_buf_create(b, row, ES__VK_MEM_DEVICE, "bench dst", &dst) != ES_OK) {
        fprintf(stderr, "bench_vk_link: setup failed: %s\n", es_last_error());
        return 1;
    }
    double *t = calloc((size_t)reps, sizeof *t);
    VkCommandBuffer *scb = alloc_cbs(a, (uint32_t)layers), *rcb = alloc_cbs(b, (uint32_t)layers);
    if (!t || !scb || !rcb) return 1;
    /* empty */
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(scb[0], &bi);
    vkEndCommandBuffer(scb[0]);
    for (int r = 0; r < reps; r++) {
        const double t0 = bench_now(CLOCK_MONOTONIC);
        if (es__vk_submit_wait(a, scb[0]) != ES_OK) return 1;
        t[r] = bench_now(CLOCK_MONOTONIC) - t0;
    }
    const double empty = bench_median(t, reps);
    /* sync */
    for (int r = 0; r < reps; r++) {
        const double t0 = bench_now(CLOCK_MONOTONIC);
        if (es__vk_link_send(&l, 0, &src, 0, 0, row) != ES_OK || es__vk_link_recv(&l, 1, 0, &dst, 0, row) != ES_OK)
            return 1;
        t[r] = bench_now(CLOCK_MONOTONIC) - t0;
    }
    const double sync = bench_median(t, reps);
    /* relay: command buffers recorded once, a token's layers submitted ahead */
    for (int v = 0; v < layers; v++) {
        vkBeginCommandBuffer(scb[v], &bi);
        es__vk_link_cmd_send(&l, 0, scb[v], &src, 0, 0, row);
        vkEndCommandBuffer(scb[v]);
        vkBeginCommandBuffer(rcb[v], &bi);
        es__vk_link_cmd_recv(&l, 1, rcb[v], 0, &dst, 0, row);
        vkEndCommandBuffer(rcb[v]);
    }
    const int tokens = reps / layers > 5 ? reps / layers : 5;
    uint64_t base = 0;
    for (int k = -1; k < tokens; k++, base += (uint64_t)layers) { /* k = -1: a warm-up token */
        relay_job job = {&l, base, layers, row, ES_OK};
        const double t0 = bench_now(CLOCK_MONOTONIC);
        pthread_t th;
        if (pthread_create(&th, NULL, relay_thread, &job) != 0) return 1;
        for (int v = 0; v < layers; v++) {
            const uint64_t value = base + (uint64_t)v + 1;
            if (es__vk_link_submit(&l, 1, rcb[v], value, 0, v == layers - 1 ? b->fence : VK_NULL_HANDLE) != ES_OK ||
                es__vk_link_submit(&l, 0, scb[v], 0, value, VK_NULL_HANDLE) != ES_OK)
                return 1;
        }
        pthread_join(th, NULL);
        vkWaitForFences(b->dev, 1, &b->fence, VK_TRUE, UINT64_MAX);
        vkResetFences(b->dev, 1, &b->fence);
        if (k >= 0) t[k] = (bench_now(CLOCK_MONOTONIC) - t0) / layers;
        if (job.status != ES_OK) return 1;
    }
    vkQueueWaitIdle(a->queue);
    const double relay = bench_median(t, tokens);
    printf("%s    {\"mode\": \"%s\", \"row_bytes\": %llu, \"empty_submit_us\": %.1f, \"sync_us\": %.1f, "
           "\"relay_per_layer_us\": %.1f, \"layers\": %d, \"reps\": %d, \"tokens\": %d}",
           sep, l.mode == ES__VK_LINK_SHARED ? "shared" : "copy", (unsigned long long)row, empty * 1e6, sync * 1e6,
           relay * 1e6, layers, reps, tokens);
    vkFreeCommandBuffers(a->dev, a->pool, (uint32_t)layers, scb);
    vkFreeCommandBuffers(b->dev, b->pool, (uint32_t)layers, rcb);
    free(scb);
    free(rcb);
    free(t);
    es__vk_buf_destroy(a, &src);
    es__vk_buf_destroy(b, &dst);
    es__vk_link_destroy(&l);
    return 0;
}

int main(int argc, char **argv) {
    const VkDeviceSize row = argc > 1 ? (VkDeviceSize)strtoull(argv[1], NULL, 10) : 16384;
    const int reps = argc > 2 ? atoi(argv[2]) : 200, layers = argc > 3 ? atoi(argv[3]) : 32;
    if (row == 0 || reps < 1 || layers < 1) {
        fprintf(stderr, "usage: bench_vk_link [ROW_BYTES] [REPS] [LAYERS]\n");
        return 2;
    }
    test_pin_vulkan();
    es_backend_params p = es_backend_default_params();
    p.type = ES_BACKEND_VULKAN;
    p.device = "";
    es_backend *be[2] = {NULL, NULL};
    if (es_backend_create(&p, &be[0]) != ES_OK || es_backend_create(&p, &be[1]) != ES_OK) {
        fprintf(stderr, "bench_vk_link: %s\n", es_last_error());
        return 1;
    }
    es__vk_dev *a = es__vk_dev_of(be[0]), *b = es__vk_dev_of(be[1]);
    const char *lp = getenv("LP_NUM_THREADS");
    printf("{\"device\": \"%s\", \"LP_NUM_THREADS\": \"%s\", \"results\": [\n", a->phys.props.deviceName,
           lp ? lp : "(unset)");
    int rc = bench_mode(a, b, true, row, reps, layers, "");
    if (rc == 0) rc = bench_mode(a, b, false, row, reps, layers, ",\n");
    printf("\n]}\n");
    es_backend_free(be[0]);
    es_backend_free(be[1]);
    return rc;
}
