/* link.c: a window of host memory between two devices (vk.h, "link.c"), for strategies that run
 * one model on two devices and ship a few rows between them each layer (ALSpec's speculated
 * attention output and priority flag, KV rows). Where both devices import host memory
 * (VK_EXT_external_memory_host) one allocation is a buffer on each, and a row written by one
 * device is read by the other with no host copy; otherwise each device has a host-visible
 * buffer and publishing copies the bytes across. Two backends on one physical device are two
 * VkInstances and VkDevices, so even there nothing but host memory is shared.
 * Deliberately no cross-device synchronisation: when the other side may read is the caller's
 * (a fence, a host wait, a flag in the window). */
#include "vk.h"

#include <string.h>

static VkDeviceSize round_up(VkDeviceSize v, VkDeviceSize a) {
    return (v + a - 1) / a * a;
}

static es_status link_shared(es__vk_link *l, VkDeviceSize size) {
    es__vk_dev *a = l->dev[0], *b = l->dev[1];
    const VkDeviceSize align = ES__MAX(a->phys.host_import_align, b->phys.host_import_align);
    const VkDeviceSize bytes = round_up(size, align);
    l->host_block = es__malloc(l->alloc, (size_t)(bytes + align));
    ES_RETURN_IF(!l->host_block, a->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory for a %llu-byte link window",
                 (unsigned long long)bytes);
    uint8_t *host = (uint8_t *)(((uintptr_t)l->host_block + align - 1) / align * align);
    memset(host, 0, (size_t)bytes);
    ES_TRY(es__vk_buf_import(a, host, bytes, "a link window", &l->win[0]));
    es_status s = es__vk_buf_import(b, host, bytes, "a link window", &l->win[1]);
    if (s != ES_OK) return es__err_forward(a->err, b->err);
    l->map[0] = l->map[1] = host;
    l->mode = ES__VK_LINK_SHARED;
    return ES_OK;
}

static es_status link_copy(es__vk_link *l, VkDeviceSize size) {
    for (int i = 0; i < 2; i++) {
        if (!l->dev[i]) continue;
        es_status s = es__vk_buf_create(l->dev[i], size, ES__VK_MEM_UPLOAD, "a link window", &l->win[i]);
        if (s != ES_OK) return i == 0 ? s : es__err_forward(l->dev[0]->err, l->dev[i]->err);
        l->map[i] = l->win[i].map;
        memset(l->map[i], 0, (size_t)size);
    }
    if (!l->dev[1]) l->map[1] = l->map[0];
    l->mode = l->dev[1] ? ES__VK_LINK_COPY : ES__VK_LINK_HOST;
    return ES_OK;
}

es_status es__vk_link_create(es__vk_dev *a, es__vk_dev *b, VkDeviceSize size, bool allow_shared, es__vk_link *out) {
    memset(out, 0, sizeof *out);
    ES_RETURN_IF(!a || a == b, a ? a->err : NULL, ES_ERR_INVALID_ARGUMENT,
                 "vulkan: a link joins two different devices (or a device and the host)");
    ES_RETURN_IF(size == 0, a->err, ES_ERR_INVALID_ARGUMENT, "vulkan: a link window of 0 bytes");
    out->dev[0] = a;
    out->dev[1] = b;
    out->alloc = a->alloc;
    out->size = size;
    /* Only when both import: one device alone importing would still need the copy. */
    const bool shared = allow_shared && b && a->host_import && b->host_import;
    es_status s = shared ? link_shared(out, size) : link_copy(out, size);
    if (s == ES_ERR_UNSUPPORTED && shared) {
        /* the extension without a coherent type for this memory: the copy works everywhere */
        es__vk_link_destroy(out);
        out->dev[0] = a;
        out->dev[1] = b;
        out->alloc = a->alloc;
        out->size = size;
        s = link_copy(out, size);
    }
    if (s == ES_OK) return ES_OK;
    es__vk_link_destroy(out);
    return s;
}

void es__vk_link_destroy(es__vk_link *l) {
    if (!l) return;
    for (int i = 0; i < 2; i++) {
        if (!l->dev[i]) continue;
        if (l->done[i] || l->ready[i]) vkDeviceWaitIdle(l->dev[i]->dev); /* nothing may still wait on them */
        if (l->done[i]) vkDestroySemaphore(l->dev[i]->dev, l->done[i], NULL);
        if (l->ready[i]) vkDestroySemaphore(l->dev[i]->dev, l->ready[i], NULL);
        es__vk_buf_destroy(l->dev[i], &l->win[i]);
    }
    es__free(l->alloc, l->host_block);
    memset(l, 0, sizeof *l);
}

es_status es__vk_link_publish(es__vk_link *l, int from, VkDeviceSize off, VkDeviceSize size) {
    es__vk_dev *d = l->dev[0];
    ES_RETURN_IF((from != 0 && from != 1) || off > l->size || size > l->size - off, d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan: link publish of [%llu, +%llu) from side %d: the window has %llu bytes", (unsigned long long)off,
                 (unsigned long long)size, from, (unsigned long long)l->size);
    if (l->mode != ES__VK_LINK_COPY) return ES_OK; /* one memory, coherent */
    memcpy(l->map[1 - from] + off, l->map[from] + off, (size_t)size);
    return ES_OK;
}

static void barrier(VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage,
                    VkAccessFlags dst) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = src;
    mb.dstAccessMask = dst;
    vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

void es__vk_link_cmd_send(const es__vk_link *l, int side, VkCommandBuffer cb, const es__vk_buf *src,
                          VkDeviceSize src_off, VkDeviceSize win_off, VkDeviceSize size) {
    barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_TRANSFER_READ_BIT);
    const VkBufferCopy region = {src_off, win_off, size};
    vkCmdCopyBuffer(cb, src->buf, l->win[side].buf, 1, &region);
    barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
            VK_ACCESS_HOST_READ_BIT);
}

void es__vk_link_cmd_recv(const es__vk_link *l, int side, VkCommandBuffer cb, VkDeviceSize win_off,
                          const es__vk_buf *dst, VkDeviceSize dst_off, VkDeviceSize size) {
    barrier(cb, VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_HOST_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    const VkBufferCopy region = {win_off, dst_off, size};
    vkCmdCopyBuffer(cb, l->win[side].buf, dst->buf, 1, &region);
    barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
}

/* Checks side and the window range, and that side is a device. */
static es_status check(const es__vk_link *l, int side, VkDeviceSize win_off, VkDeviceSize size, const char *what) {
    es__vk_dev *d = l->dev[0];
    ES_RETURN_IF(side != 0 && side != 1, d->err, ES_ERR_INVALID_ARGUMENT, "vulkan: link %s on side %d", what, side);
    ES_RETURN_IF(!l->dev[side], d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan: link %s on the host side: the host reads and writes map[1]", what);
    ES_RETURN_IF(win_off > l->size || size > l->size - win_off, d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan: link %s of [%llu, +%llu): the window has %llu bytes", what, (unsigned long long)win_off,
                 (unsigned long long)size, (unsigned long long)l->size);
    return ES_OK;
}

static es_status begin(es__vk_dev *d) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    ES_TRY(es__vk_check_lost(d));
    ES_VK_TRY(d, vkResetCommandBuffer(d->once, 0));
    ES_VK_TRY(d, vkBeginCommandBuffer(d->once, &bi));
    return ES_OK;
}

es_status es__vk_link_send(es__vk_link *l, int side, const es__vk_buf *src, VkDeviceSize src_off, VkDeviceSize win_off,
                           VkDeviceSize size) {
    ES_TRY(check(l, side, win_off, size, "send"));
    es__vk_dev *d = l->dev[side];
    ES_TRY(begin(d));
    es__vk_link_cmd_send(l, side, d->once, src, src_off, win_off, size);
    ES_VK_TRY(d, vkEndCommandBuffer(d->once));
    ES_TRY(es__vk_submit_wait(d, d->once));
    return es__vk_link_publish(l, side, win_off, size);
}

es_status es__vk_link_recv(es__vk_link *l, int side, VkDeviceSize win_off, const es__vk_buf *dst, VkDeviceSize dst_off,
                           VkDeviceSize size) {
    ES_TRY(check(l, side, win_off, size, "receive"));
    es__vk_dev *d = l->dev[side];
    ES_TRY(begin(d));
    es__vk_link_cmd_recv(l, side, d->once, win_off, dst, dst_off, size);
    ES_VK_TRY(d, vkEndCommandBuffer(d->once));
    return es__vk_submit_wait(d, d->once);
}

/* ---- ordering across devices: timeline semaphores and a host relay */
static es_status timeline(es__vk_dev *d, VkSemaphore *out) {
    VkSemaphoreTypeCreateInfoKHR ti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO_KHR};
    ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE_KHR;
    ti.initialValue = 0;
    VkSemaphoreCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti};
    ES_VK_TRY(d, vkCreateSemaphore(d->dev, &ci, NULL, out));
    return ES_OK;
}

es_status es__vk_link_sync_create(es__vk_link *l) {
    es__vk_dev *a = l->dev[0], *b = l->dev[1];
    ES_RETURN_IF(!b, a->err, ES_ERR_INVALID_ARGUMENT, "vulkan: a link with the host needs no relay: the host waits itself");
    ES_RETURN_IF(l->done[0], a->err, ES_ERR_INVALID_ARGUMENT, "vulkan: the link's semaphores exist already");
    ES_RETURN_IF(!a->timeline || !b->timeline, a->err, ES_ERR_UNSUPPORTED,
                 "vulkan: ordering two devices needs timeline semaphores; '%s' has them: %s, '%s': %s",
                 a->phys.props.deviceName, a->timeline ? "yes" : "no", b->phys.props.deviceName,
                 b->timeline ? "yes" : "no");
    for (int i = 0; i < 2; i++) {
        es_status s = timeline(l->dev[i], &l->done[i]);
        if (s == ES_OK) s = timeline(l->dev[i], &l->ready[i]);
        if (s != ES_OK) return i == 0 ? s : es__err_forward(a->err, b->err);
    }
    return ES_OK;
}

es_status es__vk_link_submit(es__vk_link *l, int side, VkCommandBuffer cb, uint64_t wait, uint64_t signal,
                             VkFence fence) {
    ES_TRY(check(l, side, 0, 0, "submission"));
    es__vk_dev *d = l->dev[side];
    ES_RETURN_IF(!l->done[side], d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan: link submission before es__vk_link_sync_create");
    ES_TRY(es__vk_check_lost(d));
    const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT;
    VkTimelineSemaphoreSubmitInfoKHR ts = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO_KHR};
    ts.waitSemaphoreValueCount = wait ? 1 : 0;
    ts.pWaitSemaphoreValues = &wait;
    ts.signalSemaphoreValueCount = signal ? 1 : 0;
    ts.pSignalSemaphoreValues = &signal;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &ts};
    si.waitSemaphoreCount = wait ? 1 : 0;
    si.pWaitSemaphores = &l->ready[side];
    si.pWaitDstStageMask = &stage;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    si.signalSemaphoreCount = signal ? 1 : 0;
    si.pSignalSemaphores = &l->done[side];
    VkResult r;
    if (!es__vk_fault_due(d, ES__VK_FAULT_SUBMIT, &r)) r = vkQueueSubmit(d->queue, 1, &si, fence);
    if (r != VK_SUCCESS) return es__vk_fail(d, r, "vkQueueSubmit");
    if (d->stats) d->stats->n_submits++;
    return ES_OK;
}

/* Waits on the host until side's done semaphore reaches value; errors on l->dev[0]'s record. */
static es_status wait_done(es__vk_link *l, int side, uint64_t value, uint64_t timeout_ns, const char *what) {
    es__vk_dev *d = l->dev[side], *e = l->dev[0];
    PFN_vkWaitSemaphoresKHR wait = (PFN_vkWaitSemaphoresKHR)vkGetDeviceProcAddr(d->dev, "vkWaitSemaphoresKHR");
    ES_RETURN_IF(!wait, e->err, ES_ERR_BACKEND, "vulkan: vkWaitSemaphoresKHR is unavailable");
    VkSemaphoreWaitInfoKHR wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO_KHR};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &l->done[side];
    wi.pValues = &value;
    const VkResult r = wait(d->dev, &wi, timeout_ns);
    ES_RETURN_IF(r == VK_TIMEOUT, e->err, ES_ERR_BACKEND, "vulkan: link %s: side %d did not reach %llu within %llu ns (VK_TIMEOUT)",
                 what, side, (unsigned long long)value, (unsigned long long)timeout_ns);
    if (r == VK_SUCCESS) return ES_OK;
    es__vk_fail(d, r, "vkWaitSemaphoresKHR");
    return d == e ? d->err->status : es__err_forward(e->err, d->err);
}

/* Signals side's ready semaphore to value from the host. */
static es_status signal_ready(es__vk_link *l, int side, uint64_t value) {
    es__vk_dev *d = l->dev[side], *e = l->dev[0];
    PFN_vkSignalSemaphoreKHR signal = (PFN_vkSignalSemaphoreKHR)vkGetDeviceProcAddr(d->dev, "vkSignalSemaphoreKHR");
    ES_RETURN_IF(!signal, e->err, ES_ERR_BACKEND, "vulkan: vkSignalSemaphoreKHR is unavailable");
    VkSemaphoreSignalInfoKHR si = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO_KHR};
    si.semaphore = l->ready[side];
    si.value = value;
    const VkResult r = signal(d->dev, &si);
    if (r == VK_SUCCESS) return ES_OK;
    es__vk_fail(d, r, "vkSignalSemaphoreKHR");
    return d == e ? d->err->status : es__err_forward(e->err, d->err);
}

es_status es__vk_link_relay(es__vk_link *l, int from, uint64_t value, VkDeviceSize off, VkDeviceSize size,
                            uint64_t timeout_ns) {
    ES_TRY(check(l, from, off, size, "relay"));
    ES_RETURN_IF(!l->done[from] || !l->dev[1 - from], l->dev[0]->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan: link relay before es__vk_link_sync_create");
    ES_TRY(wait_done(l, from, value, timeout_ns, "relay"));
    ES_TRY(es__vk_link_publish(l, from, off, size));
    return signal_ready(l, 1 - from, value);
}

es_status es__vk_link_exchange(es__vk_link *l, uint64_t value, const VkDeviceSize off[2], const VkDeviceSize size[2],
                               uint64_t timeout_ns) {
    ES_TRY(check(l, 0, off[0], size[0], "exchange"));
    ES_TRY(check(l, 1, off[1], size[1], "exchange"));
    ES_RETURN_IF(!l->done[0], l->dev[0]->err, ES_ERR_INVALID_ARGUMENT, "vulkan: link exchange before es__vk_link_sync_create");
    ES_RETURN_IF(off[0] < off[1] + size[1] && off[1] < off[0] + size[0], l->dev[0]->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan: link exchange: the ranges [%llu, +%llu) and [%llu, +%llu) overlap",
                 (unsigned long long)off[0], (unsigned long long)size[0], (unsigned long long)off[1],
                 (unsigned long long)size[1]);
    for (int side = 0; side < 2; side++) ES_TRY(wait_done(l, side, value, timeout_ns, "exchange"));
    for (int side = 0; side < 2; side++) ES_TRY(es__vk_link_publish(l, side, off[side], size[side]));
    for (int side = 0; side < 2; side++) ES_TRY(signal_ready(l, side, value));
    return ES_OK;
}

es_status es__vk_link_release(es__vk_link *l, uint64_t value) {
    for (int side = 0; side < 2; side++) {
        es__vk_dev *d = l->dev[side];
        if (!d || !l->ready[side]) continue;
        PFN_vkGetSemaphoreCounterValueKHR get =
            (PFN_vkGetSemaphoreCounterValueKHR)vkGetDeviceProcAddr(d->dev, "vkGetSemaphoreCounterValueKHR");
        uint64_t now = 0;
        ES_RETURN_IF(!get, l->dev[0]->err, ES_ERR_BACKEND, "vulkan: vkGetSemaphoreCounterValueKHR is unavailable");
        if (get(d->dev, l->ready[side], &now) == VK_SUCCESS && now < value) ES_TRY(signal_ready(l, side, value));
    }
    return ES_OK;
}
