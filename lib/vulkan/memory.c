/* memory.c: device memory: buffers with their own allocation (the callers make few, large
 * ones and sub-allocate), texel views, uploads through a staging buffer, fills, and the
 * accounting behind es_backend_stats. Out-of-memory is reported with the size, what the memory
 * was for and the heap size, never as a crash.
 * It deliberately knows nothing about tensors (weights.c places them). */
#include "vk.h"

#include <string.h>

#define ES__BUFFER_USAGE                                                                           \
    (VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |                \
     VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT)

/* Picks a memory type allowed by bits, with all of need and as many of want as possible. */
static int32_t pick_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits, VkMemoryPropertyFlags need,
                         VkMemoryPropertyFlags want) {
    int32_t best = -1;
    int best_score = -1;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & need) != need) continue;
        int score = __builtin_popcount(f & want);
        if (score > best_score) {
            best = (int32_t)i;
            best_score = score;
        }
    }
    return best;
}

static void account(es__vk_dev *d, int64_t delta) {
    if (!d->stats) return;
    d->stats->device_bytes = (uint64_t)((int64_t)d->stats->device_bytes + delta);
    if (d->stats->device_bytes > d->stats->device_peak_bytes) d->stats->device_peak_bytes = d->stats->device_bytes;
}

/* The VkBuffer of out (no memory yet); next: a create-info extension or NULL. */
static es_status make_buffer(es__vk_dev *d, VkDeviceSize size, const void *next, const char *what, es__vk_buf *out) {
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = next};
    bi.size = size;
    bi.usage = ES__BUFFER_USAGE | (d->cond_begin ? VK_BUFFER_USAGE_CONDITIONAL_RENDERING_BIT_EXT : 0);
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    const VkResult r = vkCreateBuffer(d->dev, &bi, NULL, &out->buf);
    if (r == VK_SUCCESS) return ES_OK;
    out->buf = VK_NULL_HANDLE;
    return es__vk_fail(d, r, what);
}

es_status es__vk_buf_create(es__vk_dev *d, VkDeviceSize size, es__vk_mem_kind kind, const char *what,
                            es__vk_buf *out) {
    memset(out, 0, sizeof *out);
    ES_TRY(es__vk_check_lost(d));
    if (size == 0) size = 16;
    ES_TRY(make_buffer(d, size, NULL, what, out));
    VkResult r = VK_SUCCESS;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d->dev, out->buf, &req);
    VkMemoryPropertyFlags need = 0, want = 0;
    switch (kind) {
    case ES__VK_MEM_DEVICE: want = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT; break;
    case ES__VK_MEM_UPLOAD:
        need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        break;
    case ES__VK_MEM_READBACK:
        need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
        want = VK_MEMORY_PROPERTY_HOST_CACHED_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        break;
    }
    const VkPhysicalDeviceMemoryProperties *mp = &d->phys.mem;
    int32_t type = pick_type(mp, req.memoryTypeBits, need | want, 0);
    if (type < 0) type = pick_type(mp, req.memoryTypeBits, need, want);
    if (type < 0) {
        es__vk_buf_destroy(d, out);
        return es__fail(d->err, ES_ERR_BACKEND, "vulkan: no memory type for %s (%s)", what,
                        kind == ES__VK_MEM_DEVICE ? "device-local" : "host-visible");
    }
    const VkMemoryType *mt = &mp->memoryTypes[type];
    const uint64_t heap = mp->memoryHeaps[mt->heapIndex].size;
    if (req.size > heap) {
        es__vk_buf_destroy(d, out);
        return es__fail(d->err, ES_ERR_DEVICE_MEMORY,
                        "vulkan: %s needs %.1f MiB, more than device '%s' memory heap %u holds (%.1f MiB)", what,
                        (double)req.size / 1048576.0, d->phys.props.deviceName, mt->heapIndex, (double)heap / 1048576.0);
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = (uint32_t)type;
    if (!es__vk_fault_due(d, ES__VK_FAULT_ALLOC, &r)) r = vkAllocateMemory(d->dev, &ai, NULL, &out->mem);
    if (r != VK_SUCCESS) {
        out->mem = VK_NULL_HANDLE;
        es__vk_buf_destroy(d, out);
        es__vk_fail(d, r, "vkAllocateMemory");
        if (r != VK_ERROR_OUT_OF_DEVICE_MEMORY && r != VK_ERROR_OUT_OF_HOST_MEMORY) return d->err->status;
        return es__fail(d->err, ES_ERR_DEVICE_MEMORY,
                        "vulkan: out of device memory allocating %.1f MiB for %s (%s; %.1f MiB allocated already, "
                        "heap %.1f MiB)",
                        (double)req.size / 1048576.0, what, es__vk_result_str(r),
                        d->stats ? (double)d->stats->device_bytes / 1048576.0 : 0.0, (double)heap / 1048576.0);
    }
    out->size = size;
    out->alloc_size = req.size;
    account(d, (int64_t)req.size);
    r = vkBindBufferMemory(d->dev, out->buf, out->mem, 0);
    if (r != VK_SUCCESS) {
        es__vk_buf_destroy(d, out);
        return es__vk_fail(d, r, "vkBindBufferMemory");
    }
    out->coherent = (mt->propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) != 0;
    if (kind != ES__VK_MEM_DEVICE) {
        r = vkMapMemory(d->dev, out->mem, 0, VK_WHOLE_SIZE, 0, &out->map);
        if (r != VK_SUCCESS) {
            out->map = NULL;
            es__vk_buf_destroy(d, out);
            return es__vk_fail(d, r, "vkMapMemory");
        }
    }
    return ES_OK;
}

es_status es__vk_buf_import(es__vk_dev *d, void *host, VkDeviceSize size, const char *what, es__vk_buf *out) {
    memset(out, 0, sizeof *out);
    ES_TRY(es__vk_check_lost(d));
    const VkDeviceSize align = d->phys.host_import_align;
    ES_RETURN_IF(!d->host_import, d->err, ES_ERR_UNSUPPORTED, "vulkan: device '%s' cannot import host memory (%s)",
                 d->phys.props.deviceName, what);
    ES_RETURN_IF(size == 0 || size % align != 0 || (uintptr_t)host % align != 0, d->err, ES_ERR_INVALID_ARGUMENT,
                 "vulkan: %s: host memory at %p, %llu bytes, is not aligned to %llu", what, host,
                 (unsigned long long)size, (unsigned long long)align);
    PFN_vkGetMemoryHostPointerPropertiesEXT host_props =
        (PFN_vkGetMemoryHostPointerPropertiesEXT)vkGetDeviceProcAddr(d->dev, "vkGetMemoryHostPointerPropertiesEXT");
    ES_RETURN_IF(!host_props, d->err, ES_ERR_BACKEND, "vulkan: vkGetMemoryHostPointerPropertiesEXT is unavailable");
    const VkExternalMemoryHandleTypeFlagBits ht = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    VkMemoryHostPointerPropertiesEXT hp = {.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    ES_VK_TRY(d, host_props(d->dev, ht, host, &hp));
    VkExternalMemoryBufferCreateInfo ext = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
    ext.handleTypes = ht;
    ES_TRY(make_buffer(d, size, &ext, what, out));
    VkResult r = VK_SUCCESS;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d->dev, out->buf, &req);
    /* Coherent only: the two devices sharing it then need no flushes of a mapping they lack. */
    const VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const int32_t type = pick_type(&d->phys.mem, req.memoryTypeBits & hp.memoryTypeBits, need, 0);
    if (type < 0 || req.size > size) {
        es__vk_buf_destroy(d, out);
        return es__fail(d->err, ES_ERR_UNSUPPORTED, "vulkan: device '%s' offers no coherent memory type for %s",
                        d->phys.props.deviceName, what);
    }
    VkImportMemoryHostPointerInfoEXT imp = {.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
    imp.handleType = ht;
    imp.pHostPointer = host;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &imp};
    ai.allocationSize = size;
    ai.memoryTypeIndex = (uint32_t)type;
    if (!es__vk_fault_due(d, ES__VK_FAULT_ALLOC, &r)) r = vkAllocateMemory(d->dev, &ai, NULL, &out->mem);
    if (r != VK_SUCCESS) {
        out->mem = VK_NULL_HANDLE;
        es__vk_buf_destroy(d, out);
        return es__vk_fail(d, r, "vkAllocateMemory (host import)");
    }
    out->size = size;
    out->alloc_size = size;
    out->coherent = true;
    account(d, (int64_t)size);
    r = vkBindBufferMemory(d->dev, out->buf, out->mem, 0);
    if (r != VK_SUCCESS) {
        es__vk_buf_destroy(d, out);
        return es__vk_fail(d, r, "vkBindBufferMemory");
    }
    return ES_OK;
}

void es__vk_buf_destroy(es__vk_dev *d, es__vk_buf *b) {
    if (!b) return;
    if (b->buf) vkDestroyBuffer(d->dev, b->buf, NULL);
    if (b->mem) {
        if (b->map) vkUnmapMemory(d->dev, b->mem);
        vkFreeMemory(d->dev, b->mem, NULL);
        account(d, -(int64_t)b->alloc_size);
    }
    memset(b, 0, sizeof *b);
}

es_status es__vk_buf_invalidate(es__vk_dev *d, es__vk_buf *b) {
    if (b->coherent || !b->map) return ES_OK;
    VkMappedMemoryRange r = {.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
    r.memory = b->mem;
    r.size = VK_WHOLE_SIZE;
    ES_VK_TRY(d, vkInvalidateMappedMemoryRanges(d->dev, 1, &r));
    return ES_OK;
}

es_status es__vk_buf_flush(es__vk_dev *d, es__vk_buf *b) {
    if (b->coherent || !b->map) return ES_OK;
    VkMappedMemoryRange r = {.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
    r.memory = b->mem;
    r.size = VK_WHOLE_SIZE;
    ES_VK_TRY(d, vkFlushMappedMemoryRanges(d->dev, 1, &r));
    return ES_OK;
}

es_status es__vk_view_create(es__vk_dev *d, const es__vk_buf *b, VkFormat fmt, VkDeviceSize offset,
                             VkDeviceSize range, VkBufferView *out) {
    VkBufferViewCreateInfo vi = {.sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
    vi.buffer = b->buf;
    vi.format = fmt;
    vi.offset = offset;
    vi.range = range;
    ES_VK_TRY(d, vkCreateBufferView(d->dev, &vi, NULL, out));
    return ES_OK;
}

/* ---- staging */
es_status es__vk_stager_init(es__vk_dev *d, es__vk_stager *s, VkDeviceSize size) {
    memset(s, 0, sizeof *s);
    return es__vk_buf_create(d, size, ES__VK_MEM_UPLOAD, "the staging buffer", &s->staging);
}

void es__vk_stager_free(es__vk_dev *d, es__vk_stager *s) {
    es__vk_buf_destroy(d, &s->staging);
}

es_status es__vk_stager_flush(es__vk_dev *d, es__vk_stager *s) {
    if (s->n == 0) return ES_OK;
    ES_TRY(es__vk_buf_flush(d, &s->staging));
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    ES_VK_TRY(d, vkResetCommandBuffer(d->once, 0));
    ES_VK_TRY(d, vkBeginCommandBuffer(d->once, &bi));
    for (uint32_t i = 0; i < s->n; i++) vkCmdCopyBuffer(d->once, s->staging.buf, s->dst[i], 1, &s->region[i]);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(d->once, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                         NULL, 0, NULL);
    ES_VK_TRY(d, vkEndCommandBuffer(d->once));
    ES_TRY(es__vk_submit_wait(d, d->once));
    s->n = 0;
    s->used = 0;
    return ES_OK;
}

es_status es__vk_stage_ptr(es__vk_dev *d, es__vk_stager *s, const es__vk_buf *dst, VkDeviceSize dst_off,
                           VkDeviceSize size, void **ptr) {
    ES_RETURN_IF(size > s->staging.size, d->err, ES_ERR_BACKEND,
                 "vulkan: staging request of %llu bytes exceeds the staging buffer (%llu)", (unsigned long long)size,
                 (unsigned long long)s->staging.size);
    ES_RETURN_IF(dst_off + size > dst->size, d->err, ES_ERR_BACKEND,
                 "vulkan: upload of %llu bytes at %llu overruns a %llu-byte buffer", (unsigned long long)size,
                 (unsigned long long)dst_off, (unsigned long long)dst->size);
    const VkDeviceSize at = (s->used + 15) & ~(VkDeviceSize)15;
    if (at + size > s->staging.size || s->n == ES__ARRAY_LEN(s->dst)) {
        ES_TRY(es__vk_stager_flush(d, s));
        return es__vk_stage_ptr(d, s, dst, dst_off, size, ptr);
    }
    s->dst[s->n] = dst->buf;
    s->region[s->n] = (VkBufferCopy){at, dst_off, size};
    s->n++;
    s->used = at + size;
    *ptr = (uint8_t *)s->staging.map + at;
    return ES_OK;
}

es_status es__vk_stager_room(es__vk_dev *d, es__vk_stager *s, VkDeviceSize bytes, uint32_t n) {
    const VkDeviceSize at = (s->used + 15) & ~(VkDeviceSize)15;
    ES_RETURN_IF(bytes > s->staging.size || n > ES__ARRAY_LEN(s->dst), d->err, ES_ERR_BACKEND,
                 "vulkan: %u staging requests of %llu bytes exceed the staging buffer (%llu)", n, (unsigned long long)bytes,
                 (unsigned long long)s->staging.size);
    return at + bytes > s->staging.size || s->n + n > ES__ARRAY_LEN(s->dst) ? es__vk_stager_flush(d, s) : ES_OK;
}

es_status es__vk_stage(es__vk_dev *d, es__vk_stager *s, const es__vk_buf *dst, VkDeviceSize dst_off,
                       const void *src, VkDeviceSize size) {
    const uint8_t *p = src;
    while (size > 0) {
        VkDeviceSize part = size < s->staging.size ? size : s->staging.size;
        void *ptr = NULL;
        ES_TRY(es__vk_stage_ptr(d, s, dst, dst_off, part, &ptr));
        memcpy(ptr, p, (size_t)part);
        p += part;
        dst_off += part;
        size -= part;
    }
    return ES_OK;
}

es_status es__vk_fill(es__vk_dev *d, const es__vk_buf *b, VkDeviceSize off, VkDeviceSize size, uint32_t v) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    ES_VK_TRY(d, vkResetCommandBuffer(d->once, 0));
    ES_VK_TRY(d, vkBeginCommandBuffer(d->once, &bi));
    vkCmdFillBuffer(d->once, b->buf, off, size, v);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(d->once, VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    ES_VK_TRY(d, vkEndCommandBuffer(d->once));
    return es__vk_submit_wait(d, d->once);
}

es_status es__vk_read(es__vk_dev *d, const es__vk_buf *src, VkDeviceSize off, void *dst, VkDeviceSize size) {
    es__vk_buf rb;
    const VkDeviceSize chunk = ES__MIN(size, (VkDeviceSize)16 << 20);
    ES_TRY(es__vk_buf_create(d, chunk ? chunk : 4, ES__VK_MEM_READBACK, "a readback buffer", &rb));
    es_status s = ES_OK;
    for (VkDeviceSize done = 0; s == ES_OK && done < size; done += chunk) {
        const VkDeviceSize n = ES__MIN(chunk, size - done);
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        VkResult r = vkResetCommandBuffer(d->once, 0);
        if (r == VK_SUCCESS) r = vkBeginCommandBuffer(d->once, &bi);
        if (r != VK_SUCCESS) {
            s = es__vk_fail(d, r, "vkBeginCommandBuffer");
            break;
        }
        VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
        vkCmdPipelineBarrier(d->once, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                             NULL, 0, NULL);
        const VkBufferCopy region = {off + done, 0, n};
        vkCmdCopyBuffer(d->once, src->buf, rb.buf, 1, &region);
        mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
        vkCmdPipelineBarrier(d->once, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0,
                             NULL);
        r = vkEndCommandBuffer(d->once);
        s = r == VK_SUCCESS ? es__vk_submit_wait(d, d->once) : es__vk_fail(d, r, "vkEndCommandBuffer");
        if (s == ES_OK) s = es__vk_buf_invalidate(d, &rb);
        if (s == ES_OK) memcpy((uint8_t *)dst + done, rb.map, (size_t)n);
    }
    es__vk_buf_destroy(d, &rb);
    return s;
}

/* ---- arenas */
void es__vk_arena_init(es__vk_dev *d, es__vk_arena *a) {
    const VkPhysicalDeviceLimits *lim = &d->phys.props.limits;
    memset(a, 0, sizeof *a);
    a->align = ES__MAX(256, ES__MAX(lim->minTexelBufferOffsetAlignment, lim->minStorageBufferOffsetAlignment));
}

es_status es__vk_arena_reserve(es__vk_dev *d, es__vk_arena *a, VkDeviceSize size, es__vk_region *out) {
    ES_RETURN_IF(size > ES__VK_CHUNK_MAX, d->err, ES_ERR_DEVICE_MEMORY,
                 "vulkan: one region of %.1f MiB exceeds the %.0f MiB allocation size", (double)size / 1048576.0,
                 (double)ES__VK_CHUNK_MAX / 1048576.0);
    if (size == 0) size = 16;
    if (a->n > 0) {
        VkDeviceSize at = (a->sizes[a->n - 1] + a->align - 1) / a->align * a->align;
        if (at + size <= ES__VK_CHUNK_MAX) {
            *out = (es__vk_region){a->n - 1, at, size};
            a->sizes[a->n - 1] = at + size;
            return ES_OK;
        }
    }
    ES_RETURN_IF(a->n == ES__VK_ARENA_MAX, d->err, ES_ERR_DEVICE_MEMORY, "vulkan: more than %d allocations needed",
                 ES__VK_ARENA_MAX);
    *out = (es__vk_region){a->n, 0, size};
    a->sizes[a->n++] = size;
    return ES_OK;
}

es_status es__vk_arena_alloc(es__vk_dev *d, es__vk_arena *a, es__vk_mem_kind kind, const char *what) {
    for (uint32_t c = 0; c < a->n; c++)
        if (!a->chunks[c].buf) ES_TRY(es__vk_buf_create(d, a->sizes[c], kind, what, &a->chunks[c]));
    return ES_OK;
}

void es__vk_arena_free(es__vk_dev *d, es__vk_arena *a) {
    for (uint32_t c = 0; c < a->n; c++) es__vk_buf_destroy(d, &a->chunks[c]);
    a->n = 0;
}
