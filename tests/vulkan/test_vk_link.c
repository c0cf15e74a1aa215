/* test_vk_link.c: the window between two devices (lib/vulkan/link.c) moves bytes exactly:
 *   1. between two logical devices on one physical device (two Vulkan backends), in both link
 *      modes: host memory imported into both devices (where both can) and a host-visible buffer
 *      on each with a copy at publishing: random bytes in a device-local buffer on one side come
 *      out bit for bit in a device-local buffer on the other, both ways, at odd offsets;
 *   2. between a device and the host (the CPU backend's side): what the host writes the device
 *      receives, what the device sends the host reads;
 *   3. the window is device memory of each device while it lives (es_backend_stats), and a range
 *      past it, a send on the host side, or a link of a device with itself fail with a message;
 *   4. ordering through the relay (timeline semaphores, no external ones on lavapipe): three
 *      rows, each received by work submitted before the sender's and held until the relay, come
 *      out exactly; a relay for a value never signalled times out with a message;
 *   5. both ways at once (es__vk_link_exchange, the priority all-gather of ALSpec's Algorithm 2):
 *      each device's flag reaches the other;
 *   6. the relayer (lib/vulkan/relay.c): three layers submitted on both devices at once and their
 *      relays queued come out exactly; a relay that times out fails the rest of the queue.
 * In suite 'vulkan' (and under the validation layer in .ci/run). */
#include "backend.h"
#include "backend_vk.h"
#include "vk_test.h"

#include <pthread.h>

#define WIN 4096u   /* window bytes */
#define ROW 1000u   /* a row of 250 floats, as a hidden state row would be */

static uint32_t rng = 12345u;
static void fill_random(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        rng = rng * 1664525u + 1013904223u;
        p[i] = (uint8_t)(rng >> 24);
    }
}

static uint64_t device_bytes(es_backend *b) {
    es_backend_stats st;
    CHECK_OK(es_backend_get_stats(b, &st));
    return st.device_bytes;
}

/* A device-local buffer on d holding bytes (through a staging upload). */
static void upload(es__vk_dev *d, es__vk_buf *b, const uint8_t *bytes, size_t n) {
    es__vk_stager st;
    CHECK_OK(es__vk_buf_create(d, n, ES__VK_MEM_DEVICE, "test buffer", b));
    CHECK_OK(es__vk_stager_init(d, &st, n));
    CHECK_OK(es__vk_stage(d, &st, b, 0, bytes, n));
    CHECK_OK(es__vk_stager_flush(d, &st));
    es__vk_stager_free(d, &st);
}

/* 1 and 3 for one mode */
static void test_devices(es_backend *ba, es_backend *bb, bool allow_shared) {
    es__vk_dev *a = es__vk_dev_of(ba), *b = es__vk_dev_of(bb);
    const uint64_t a0 = device_bytes(ba), b0 = device_bytes(bb);
    es__vk_link l;
    CHECK_OK(es__vk_link_create(a, b, WIN, allow_shared, &l));
    const bool both_import = a->host_import && b->host_import;
    CHECKF(l.mode == (allow_shared && both_import ? ES__VK_LINK_SHARED : ES__VK_LINK_COPY), "mode %d", (int)l.mode);
    printf("link mode %s (host import: %d and %d)\n", l.mode == ES__VK_LINK_SHARED ? "shared" : "copy",
           a->host_import, b->host_import);
    CHECK(device_bytes(ba) >= a0 + WIN && device_bytes(bb) >= b0 + WIN);

    uint8_t want[2][WIN], got[WIN];
    fill_random(want[0], WIN);
    fill_random(want[1], WIN);
    es__vk_buf src[2], dst[2];
    upload(a, &src[0], want[0], WIN);
    upload(b, &src[1], want[1], WIN);
    upload(a, &dst[0], want[1], WIN); /* overwritten below where received */
    upload(b, &dst[1], want[0], WIN);
    CHECK_OK(es__vk_fill(a, &dst[0], 0, WIN, 0xdeadbeefu));
    CHECK_OK(es__vk_fill(b, &dst[1], 0, WIN, 0xdeadbeefu));
    /* a -> b: a row at an odd window offset into an odd destination offset */
    CHECK_OK(es__vk_link_send(&l, 0, &src[0], 12, 100, ROW));
    CHECK_OK(es__vk_link_recv(&l, 1, 100, &dst[1], 36, ROW));
    CHECK_OK(es__vk_read(b, &dst[1], 0, got, WIN));
    CHECK(memcmp(got + 36, want[0] + 12, ROW) == 0);
    CHECK(got[35] == 0xde && got[36 + ROW] == 0xef); /* nothing written around the row */
    /* b -> a: the whole window */
    CHECK_OK(es__vk_link_send(&l, 1, &src[1], 0, 0, WIN));
    CHECK_OK(es__vk_link_recv(&l, 0, 0, &dst[0], 0, WIN));
    CHECK_OK(es__vk_read(a, &dst[0], 0, got, WIN));
    CHECK(memcmp(got, want[1], WIN) == 0);

    /* 3. bad ranges and sides */
    CHECK(es__vk_link_send(&l, 0, &src[0], 0, WIN - 8, 16) == ES_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(es_backend_errmsg(ba), "the window has 4096 bytes") != NULL, "%s", es_backend_errmsg(ba));
    CHECK(es__vk_link_recv(&l, 2, 0, &dst[0], 0, 4) == ES_ERR_INVALID_ARGUMENT);
    CHECK(es__vk_link_publish(&l, 0, WIN, 1) == ES_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < 2; i++) {
        es__vk_buf_destroy(i ? b : a, &src[i]);
        es__vk_buf_destroy(i ? b : a, &dst[i]);
    }
    es__vk_link_destroy(&l);
    CHECK(device_bytes(ba) == a0 && device_bytes(bb) == b0);
    es__vk_link self;
    CHECK(es__vk_link_create(a, a, WIN, allow_shared, &self) == ES_ERR_INVALID_ARGUMENT);
}

/* 2. a device and the host */
static void test_host(es_backend *ba) {
    es__vk_dev *a = es__vk_dev_of(ba);
    es__vk_link l;
    CHECK_OK(es__vk_link_create(a, NULL, WIN, true, &l));
    CHECK(l.mode == ES__VK_LINK_HOST && l.map[1] != NULL);
    uint8_t want[WIN], got[WIN];
    fill_random(want, WIN);
    es__vk_buf buf;
    upload(a, &buf, want, WIN);
    /* device -> host */
    CHECK_OK(es__vk_link_send(&l, 0, &buf, 0, 0, WIN));
    CHECK(memcmp(l.map[1], want, WIN) == 0);
    /* host -> device */
    fill_random(want, WIN);
    memcpy(l.map[1] + 8, want, ROW);
    CHECK_OK(es__vk_link_publish(&l, 1, 8, ROW));
    CHECK_OK(es__vk_link_recv(&l, 0, 8, &buf, 40, ROW));
    CHECK_OK(es__vk_read(a, &buf, 40, got, ROW));
    CHECK(memcmp(got, want, ROW) == 0);
    CHECK(es__vk_link_send(&l, 1, &buf, 0, 0, 4) == ES_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(es_backend_errmsg(ba), "the host side") != NULL, "%s", es_backend_errmsg(ba));
    es__vk_buf_destroy(a, &buf);
    es__vk_link_destroy(&l);
}

static VkCommandBuffer cmd(es__vk_dev *d) {
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = d->pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    CHECK(vkAllocateCommandBuffers(d->dev, &ai, &cb) == VK_SUCCESS);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CHECK(vkBeginCommandBuffer(cb, &bi) == VK_SUCCESS);
    return cb;
}

/* The relay on a thread of its own, as a strategy runs it: values 1..3, each row's range. */
typedef struct relay_job {
    es__vk_link *l;
    es_status status[4];
} relay_job;
static void *relay_thread(void *arg) {
    relay_job *j = arg;
    for (uint64_t v = 1; v <= 3; v++) j->status[v] = es__vk_link_relay(j->l, 0, v, (v - 1) * ROW, ROW, 10000000000ull);
    return NULL;
}

/* 4. ordering: the receiver's work is submitted first, waits for the relay (on another thread),
 * and then reads what the sender wrote; a relay for a value never reached times out */
static void test_relay(es_backend *ba, es_backend *bb, bool allow_shared) {
    es__vk_dev *a = es__vk_dev_of(ba), *b = es__vk_dev_of(bb);
    es__vk_link l;
    CHECK_OK(es__vk_link_create(a, b, WIN, allow_shared, &l));
    CHECK_OK(es__vk_link_sync_create(&l));
    uint8_t want[WIN], got[WIN];
    fill_random(want, WIN);
    es__vk_buf src, dst;
    upload(a, &src, want, WIN);
    upload(b, &dst, want, WIN);
    CHECK_OK(es__vk_fill(b, &dst, 0, WIN, 0u));
    VkFence fence = VK_NULL_HANDLE;
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    CHECK(vkCreateFence(b->dev, &fi, NULL, &fence) == VK_SUCCESS);
    relay_job job = {&l, {ES_OK, ES_OK, ES_OK, ES_OK}};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, relay_thread, &job) == 0);
    for (uint64_t v = 1; v <= 3; v++) { /* three layers: a row each */
        const VkDeviceSize at = (v - 1) * ROW;
        VkCommandBuffer rb = cmd(b), sb = cmd(a);
        es__vk_link_cmd_recv(&l, 1, rb, at, &dst, at, ROW);
        es__vk_link_cmd_send(&l, 0, sb, &src, at, at, ROW);
        CHECK(vkEndCommandBuffer(rb) == VK_SUCCESS && vkEndCommandBuffer(sb) == VK_SUCCESS);
        CHECK(vkResetFences(b->dev, 1, &fence) == VK_SUCCESS);
        CHECK_OK(es__vk_link_submit(&l, 1, rb, v, 0, fence));
        CHECK(vkWaitForFences(b->dev, 1, &fence, VK_TRUE, 20000000ull) == VK_TIMEOUT); /* held by the wait */
        CHECK_OK(es__vk_link_submit(&l, 0, sb, 0, v, VK_NULL_HANDLE));
        CHECK(vkWaitForFences(b->dev, 1, &fence, VK_TRUE, 10000000000ull) == VK_SUCCESS);
        CHECK(vkQueueWaitIdle(a->queue) == VK_SUCCESS);
        vkFreeCommandBuffers(b->dev, b->pool, 1, &rb);
        vkFreeCommandBuffers(a->dev, a->pool, 1, &sb);
    }
    pthread_join(th, NULL);
    for (int v = 1; v <= 3; v++) CHECKF(job.status[v] == ES_OK, "relay %d: %s", v, es_status_str(job.status[v]));
    CHECK_OK(es__vk_read(b, &dst, 0, got, WIN));
    CHECK(memcmp(got, want, 3 * ROW) == 0);
    CHECK(got[3 * ROW] == 0 && got[WIN - 1] == 0);
    CHECK(es__vk_link_relay(&l, 0, 99, 0, ROW, 1000000ull) == ES_ERR_BACKEND);
    CHECKF(strstr(es_backend_errmsg(ba), "did not reach 99") != NULL, "%s", es_backend_errmsg(ba));
    CHECK(es__vk_link_sync_create(&l) == ES_ERR_INVALID_ARGUMENT);
    vkDestroyFence(b->dev, fence, NULL);
    es__vk_buf_destroy(a, &src);
    es__vk_buf_destroy(b, &dst);
    es__vk_link_destroy(&l);
}

/* 5. both ways at once (the priority all-gather): each device's flag reaches the other */
static void test_exchange(es_backend *ba, es_backend *bb, bool allow_shared) {
    es__vk_dev *d[2] = {es__vk_dev_of(ba), es__vk_dev_of(bb)};
    es__vk_link l;
    CHECK_OK(es__vk_link_create(d[0], d[1], WIN, allow_shared, &l));
    CHECK_OK(es__vk_link_sync_create(&l));
    const VkDeviceSize off[2] = {0, 64}, size[2] = {4, 4};
    es__vk_buf src[2], dst[2];
    VkFence fence[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(es__vk_buf_create(d[i], 16, ES__VK_MEM_DEVICE, "flag", &src[i]));
        CHECK_OK(es__vk_buf_create(d[i], 16, ES__VK_MEM_DEVICE, "flag received", &dst[i]));
        CHECK(vkCreateFence(d[i]->dev, &fi, NULL, &fence[i]) == VK_SUCCESS);
    }
    for (uint64_t v = 1; v <= 2; v++) {
        VkCommandBuffer send[2], recv[2];
        for (int i = 0; i < 2; i++) {
            CHECK_OK(es__vk_fill(d[i], &src[i], 0, 16, 0x1000u * (uint32_t)(i + 1) + (uint32_t)v));
            recv[i] = cmd(d[i]);
            es__vk_link_cmd_recv(&l, i, recv[i], off[1 - i], &dst[i], 0, 4);
            send[i] = cmd(d[i]);
            es__vk_link_cmd_send(&l, i, send[i], &src[i], 0, off[i], 4);
            CHECK(vkEndCommandBuffer(recv[i]) == VK_SUCCESS && vkEndCommandBuffer(send[i]) == VK_SUCCESS);
            CHECK(vkResetFences(d[i]->dev, 1, &fence[i]) == VK_SUCCESS);
            /* a queue starts its batches in order: what a device sends goes before what it waits for */
            CHECK_OK(es__vk_link_submit(&l, i, send[i], 0, v, VK_NULL_HANDLE));
            CHECK_OK(es__vk_link_submit(&l, i, recv[i], v, 0, fence[i]));
        }
        CHECK_OK(es__vk_link_exchange(&l, v, off, size, 10000000000ull));
        for (int i = 0; i < 2; i++) {
            CHECK(vkWaitForFences(d[i]->dev, 1, &fence[i], VK_TRUE, 10000000000ull) == VK_SUCCESS);
            CHECK(vkQueueWaitIdle(d[i]->queue) == VK_SUCCESS);
            uint32_t got = 0;
            CHECK_OK(es__vk_read(d[i], &dst[i], 0, &got, 4));
            CHECKF(got == 0x1000u * (uint32_t)(2 - i) + (uint32_t)v, "device %d received %#x at round %llu", i, got,
                   (unsigned long long)v);
            vkFreeCommandBuffers(d[i]->dev, d[i]->pool, 1, &send[i]);
            vkFreeCommandBuffers(d[i]->dev, d[i]->pool, 1, &recv[i]);
        }
    }
    const VkDeviceSize overlap[2] = {0, 2};
    CHECK(es__vk_link_exchange(&l, 3, overlap, size, 1000000ull) == ES_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(es_backend_errmsg(ba), "overlap") != NULL, "%s", es_backend_errmsg(ba));
    for (int i = 0; i < 2; i++) {
        vkDestroyFence(d[i]->dev, fence[i], NULL);
        es__vk_buf_destroy(d[i], &src[i]);
        es__vk_buf_destroy(d[i], &dst[i]);
    }
    es__vk_link_destroy(&l);
}

/* 6. the relayer: a token's three layers submitted on both devices at once, their relays queued,
 * nothing waited for on this thread until the end; a relay that times out fails the rest */
static void test_relayer(es_backend *ba, es_backend *bb) {
    es__vk_dev *a = es__vk_dev_of(ba), *b = es__vk_dev_of(bb);
    es__vk_link l;
    CHECK_OK(es__vk_link_create(a, b, WIN, true, &l));
    CHECK_OK(es__vk_link_sync_create(&l));
    uint8_t want[WIN], got[WIN];
    fill_random(want, WIN);
    es__vk_buf src, dst;
    upload(a, &src, want, WIN);
    upload(b, &dst, want, WIN);
    CHECK_OK(es__vk_fill(b, &dst, 0, WIN, 0u));
    es__vk_relayer r;
    CHECK_OK(es__vk_relayer_start(&r, &l, 10000000000ull));
    VkCommandBuffer rb[3], sb[3];
    for (int v = 0; v < 3; v++) {
        const VkDeviceSize at = (VkDeviceSize)v * ROW;
        rb[v] = cmd(b);
        es__vk_link_cmd_recv(&l, 1, rb[v], at, &dst, at, ROW);
        sb[v] = cmd(a);
        es__vk_link_cmd_send(&l, 0, sb[v], &src, at, at, ROW);
        CHECK(vkEndCommandBuffer(rb[v]) == VK_SUCCESS && vkEndCommandBuffer(sb[v]) == VK_SUCCESS);
        CHECK_OK(es__vk_link_submit(&l, 1, rb[v], (uint64_t)v + 1, 0, VK_NULL_HANDLE));
        CHECK_OK(es__vk_link_submit(&l, 0, sb[v], 0, (uint64_t)v + 1, VK_NULL_HANDLE));
        CHECK_OK(es__vk_relayer_relay(&r, 0, (uint64_t)v + 1, at, ROW));
    }
    CHECK_OK(es__vk_relayer_drain(&r));
    CHECK(vkQueueWaitIdle(b->queue) == VK_SUCCESS && vkQueueWaitIdle(a->queue) == VK_SUCCESS);
    CHECK_OK(es__vk_read(b, &dst, 0, got, WIN));
    CHECK(memcmp(got, want, 3 * ROW) == 0);
    CHECK_OK(es__vk_relayer_stop(&r));
    /* a value never signalled: the relay times out, the rest is refused with its status */
    CHECK_OK(es__vk_relayer_start(&r, &l, 1000000ull));
    CHECK_OK(es__vk_relayer_relay(&r, 0, 99, 0, ROW));
    CHECK(es__vk_relayer_drain(&r) == ES_ERR_BACKEND);
    CHECK(es__vk_relayer_relay(&r, 0, 100, 0, ROW) == ES_ERR_BACKEND);
    CHECK(es__vk_relayer_stop(&r) == ES_ERR_BACKEND);
    CHECKF(strstr(es_backend_errmsg(ba), "did not reach 99") != NULL, "%s", es_backend_errmsg(ba));
    for (int v = 0; v < 3; v++) {
        vkFreeCommandBuffers(b->dev, b->pool, 1, &rb[v]);
        vkFreeCommandBuffers(a->dev, a->pool, 1, &sb[v]);
    }
    es__vk_buf_destroy(a, &src);
    es__vk_buf_destroy(b, &dst);
    es__vk_link_destroy(&l);
}

int main(void) {
    es_backend *a = vk_backend(0), *b = vk_backend(0);
    if (a && b) {
        test_devices(a, b, true);
        test_devices(a, b, false);
        test_host(a);
        test_relay(a, b, true);
        test_relay(a, b, false);
        test_exchange(a, b, true);
        test_exchange(a, b, false);
        test_relayer(a, b);
    }
    es_backend_free(a);
    es_backend_free(b);
    VK_TEST_END();
}
