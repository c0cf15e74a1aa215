/* cmd.c: recording dispatch sequences into command buffers (bind, push, dispatch, barrier, and
 * timestamps around each dispatch when profiling), submitting with one fence wait, and turning
 * timestamps into the per-op profile.
 * It deliberately decides nothing about which dispatches a forward pass needs (forward.c). */
#include "vk.h"

#include <string.h>

void es__vk_rec_begin(es__vk_rec *r, es__vk_dev *d, VkCommandBuffer cb, VkQueryPool queries,
                      uint32_t cap_queries, const char **query_ops) {
    memset(r, 0, sizeof *r);
    r->d = d;
    r->cb = cb;
    r->queries = queries;
    r->cap_queries = cap_queries;
    r->query_ops = query_ops;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    r->err = vkBeginCommandBuffer(cb, &bi);
    if (queries && r->err == VK_SUCCESS) {
        vkCmdResetQueryPool(cb, queries, 0, cap_queries);
        vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries, 0);
        r->n_queries = 1;
    }
}

static void barrier(VkCommandBuffer cb) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_INDIRECT_COMMAND_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT, 0, 1, &mb, 0,
                         NULL, 0, NULL);
}

static void prologue(es__vk_rec *r, const es__vk_pipeline *p, VkDescriptorSet set, const void *push) {
    if (r->bound != p->pipeline) {
        vkCmdBindPipeline(r->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
        r->bound = p->pipeline;
    }
    vkCmdBindDescriptorSets(r->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
    if (p->push_size) vkCmdPushConstants(r->cb, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_size, push);
}

static void epilogue(es__vk_rec *r, const char *op) {
    r->n_dispatch++;
    if (r->queries && r->n_queries < r->cap_queries) {
        vkCmdWriteTimestamp(r->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, r->queries, r->n_queries);
        r->query_ops[r->n_queries] = op;
        r->n_queries++;
    }
    barrier(r->cb);
}

void es__vk_rec_dispatch(es__vk_rec *r, const char *op, const es__vk_pipeline *p, VkDescriptorSet set,
                         const void *push, uint32_t gx, uint32_t gy, uint32_t gz) {
    if (r->err != VK_SUCCESS || gx == 0 || gy == 0 || gz == 0) return;
    prologue(r, p, set, push);
    vkCmdDispatch(r->cb, gx, gy, gz);
    epilogue(r, op);
}

void es__vk_rec_dispatch_indirect(es__vk_rec *r, const char *op, const es__vk_pipeline *p,
                                  VkDescriptorSet set, const void *push, VkBuffer buf, VkDeviceSize off) {
    if (r->err != VK_SUCCESS) return;
    prologue(r, p, set, push);
    vkCmdDispatchIndirect(r->cb, buf, off);
    epilogue(r, op);
}

void es__vk_rec_gate_begin(es__vk_rec *r, const es__vk_buf *buf, VkDeviceSize off, bool inverted) {
    if (r->err != VK_SUCCESS) return;
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_CONDITIONAL_RENDERING_READ_BIT_EXT;
    vkCmdPipelineBarrier(r->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_CONDITIONAL_RENDERING_BIT_EXT, 0, 1, &mb, 0, NULL, 0, NULL);
    VkConditionalRenderingBeginInfoEXT ci = {.sType = VK_STRUCTURE_TYPE_CONDITIONAL_RENDERING_BEGIN_INFO_EXT};
    ci.buffer = buf->buf;
    ci.offset = off;
    ci.flags = inverted ? VK_CONDITIONAL_RENDERING_INVERTED_BIT_EXT : 0;
    r->d->cond_begin(r->cb, &ci);
}

void es__vk_rec_gate_end(es__vk_rec *r) {
    if (r->err == VK_SUCCESS) r->d->cond_end(r->cb);
}

es_status es__vk_rec_end(es__vk_rec *r) {
    if (r->err == VK_SUCCESS) {
        VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
        vkCmdPipelineBarrier(r->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
        r->err = vkEndCommandBuffer(r->cb);
    }
    if (r->err != VK_SUCCESS) return es__vk_fail(r->d, r->err, "recording a command buffer");
    return ES_OK;
}

es_status es__vk_submit_wait(es__vk_dev *d, VkCommandBuffer cb) {
    ES_TRY(es__vk_check_lost(d)); /* nothing to wait for on a lost device */
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    ES_VK_TRY(d, vkResetFences(d->dev, 1, &d->fence));
    VkResult r;
    if (!es__vk_fault_due(d, ES__VK_FAULT_SUBMIT, &r)) r = vkQueueSubmit(d->queue, 1, &si, d->fence);
    if (r != VK_SUCCESS) return es__vk_fail(d, r, "vkQueueSubmit");
    if (d->stats) d->stats->n_submits++;
    r = vkWaitForFences(d->dev, 1, &d->fence, VK_TRUE, UINT64_MAX);
    if (r == VK_SUCCESS) es__vk_fault_due(d, ES__VK_FAULT_WAIT, &r); /* after the real wait: nothing pending */
    if (r != VK_SUCCESS) return es__vk_fail(d, r, "vkWaitForFences");
    return ES_OK;
}

es_status es__vk_query_pool_create(es__vk_dev *d, uint32_t n, VkQueryPool *out) {
    VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = n;
    ES_VK_TRY(d, vkCreateQueryPool(d->dev, &qi, NULL, out));
    return ES_OK;
}

es_status es__vk_profile_collect(es__vk_dev *d, VkQueryPool q, uint32_t n_queries, const char **ops) {
    if (!q || n_queries < 2) return ES_OK;
    uint64_t ts[1024];
    if (n_queries > 1024) n_queries = 1024;
    ES_VK_TRY(d, vkGetQueryPoolResults(d->dev, q, 0, n_queries, sizeof ts, ts, sizeof ts[0],
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    const double ns_per_tick = d->phys.props.limits.timestampPeriod;
    for (uint32_t i = 1; i < n_queries; i++) {
        const char *op = ops[i];
        int32_t k = 0;
        while (k < *d->n_prof && strcmp(d->prof[k].op, op) != 0) k++;
        if (k == *d->n_prof) {
            if (k == ES__VK_MAX_PROF) continue;
            d->prof[k] = (es_profile_entry){.op = op};
            (*d->n_prof)++;
        }
        d->prof[k].calls++;
        d->prof[k].ms += (double)(ts[i] - ts[i - 1]) * ns_per_tick * 1e-6;
    }
    return ES_OK;
}
