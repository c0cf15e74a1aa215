/* vk.h: the Vulkan backend's internal interface: device, memory, pipelines, command recording.
 * Shared by the files of lib/vulkan only. Nothing here knows about models or forward passes:
 * weights.c and forward.c build those on top. Everything that can fail reports through the
 * device's es__err with the VkResult named. */
#ifndef ES_VULKAN_VK_H
#define ES_VULKAN_VK_H

#include "backend.h"
#include "policy.h"
#include "shader_registry.h"

#include "loader.h"

/* Optional device features the kernels use, each with a fallback. */
typedef struct es__vk_features {
    bool storage16;      /* 16-bit storage: f16 weights loaded as f16vec4 from storage buffers      */
    bool storage8;       /* 8-bit storage: Q8_0 quants loaded as i8vec4 from storage buffers        */
    bool fp16;           /* shaderFloat16                                                           */
    bool subgroup;       /* subgroup arithmetic in compute: reductions without shared memory        */
    bool int_dot;        /* integer dot product (VK_KHR_shader_integer_dot_product)                 */
    bool size_control;   /* VK_EXT_subgroup_size_control with computeFullSubgroups                  */
    bool texel;          /* texel buffers hold the formats and sizes the kernels need               */
} es__vk_features;

/* A physical device as seen at enumeration. */
typedef struct es__vk_phys {
    VkPhysicalDevice handle;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    es__vk_features have;
    uint32_t subgroup_size;
    uint32_t max_subgroup_size; /* subgroup size control: the largest size (else subgroup_size) */
    uint32_t queue_family;   /* a compute-capable family; UINT32_MAX if none */
    uint64_t device_local_bytes;
    bool has_ext_float16_int8, has_ext_8bit, has_ext_int_dot, has_ext_size_control;
    bool has_ext_host_import;          /* VK_EXT_external_memory_host (link.c)                   */
    bool has_timeline;                 /* VK_KHR_timeline_semaphore with timelineSemaphore       */
    bool has_cond;                     /* VK_EXT_conditional_rendering with conditionalRendering */
    VkDeviceSize host_import_align;    /* its minImportedHostPointerAlignment                    */
} es__vk_phys;

/* One created pipeline: a shader variant with its specialisation. */
typedef struct es__vk_pipeline {
    es__shader_id shader;                 /* ES__SHADER_COUNT for es__vk_pipeline_custom's */
    const char *name;                     /* the variant's, for messages                    */
    uint32_t spec[8];
    uint32_t n_spec;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipeline;
    uint32_t push_size;
    uint32_t n_bindings;
    VkDescriptorType types[ES__SHADER_MAX_BINDINGS];
} es__vk_pipeline;

#define ES__VK_MAX_PIPELINES 256 /* one backend serving models of several weight types (mixed files, tests) */
#define ES__VK_MAX_PROF 32

/* Where a test may inject a Vulkan failure (es__vk_dev.fault). */
typedef enum es__vk_fault_point {
    ES__VK_FAULT_SUBMIT, /* vkQueueSubmit                                                   */
    ES__VK_FAULT_WAIT,   /* the fence wait after a submission (the work itself completed)   */
    ES__VK_FAULT_ALLOC,  /* vkAllocateMemory                                                */
    ES__VK_FAULT_COUNT,
} es__vk_fault_point;

typedef struct es__vk_dev {
    const es_allocator *alloc;
    es__err *err;            /* the owning backend's error record */
    es__log *log;
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    bool validation;
    es__vk_phys phys;
    uint32_t index;          /* the chosen physical device's index */
    VkDevice dev;
    VkQueue queue;
    VkCommandPool pool;
    VkCommandBuffer once;    /* for uploads and one-off work */
    VkFence fence;
    es__vk_features use;     /* what the kernels use after ES_VK_* flags */
    bool host_import;        /* VK_EXT_external_memory_host enabled: host memory imports (link.c) */
    bool timeline;           /* timeline semaphores enabled (link.c's relay)                       */
    /* conditional rendering enabled: dispatches gated by a flag in device memory (es__vk_rec_gate) */
    PFN_vkCmdBeginConditionalRenderingEXT cond_begin;
    PFN_vkCmdEndConditionalRenderingEXT cond_end;
    uint32_t flags;
    uint32_t subgroup_size;  /* lanes per reduction team in kernels */
    es__vk_policy policy;    /* per-device tuning (policy.h)     */
    VkPipelineCache pcache;
    char *pcache_path;
    es__vk_pipeline pipelines[ES__VK_MAX_PIPELINES];
    uint32_t n_pipelines;
    /* accounting: counters and the profile live in the owning es_backend */
    es_backend_stats *stats;
    es_profile_entry *prof;      /* [ES__VK_MAX_PROF] */
    int32_t *n_prof;
    bool profile;
    /* VK_ERROR_DEVICE_LOST is for good: once a call saw it (es__vk_fail records which), every
     * later submission and device allocation fails at once, naming that call, instead of
     * waiting on a device that is gone. NULL while the device works. */
    const char *lost_at;
    /* Fault injection, for tests only (tests/vulkan/test_vk_faults.c sets it; the library never
     * does): the countdown-th call at a point from now returns result instead of what the driver
     * says. 0 = off, which costs one compare per submission and device allocation. */
    struct {
        uint32_t countdown;
        VkResult result;
    } fault[ES__VK_FAULT_COUNT];
} es__vk_dev;

/* Whether an injected fault is due at point; *r gets its result. */
static inline bool es__vk_fault_due(es__vk_dev *d, es__vk_fault_point point, VkResult *r) {
    if (ES__LIKELY(d->fault[point].countdown == 0) || --d->fault[point].countdown != 0) return false;
    *r = d->fault[point].result;
    return true;
}

/* ---- device.c */
/* Creates the instance and device for owner (errors, log, allocator and counters come from it). */
es_status es__vk_dev_create(es__vk_dev *d, const es_backend_params *p, es_backend *owner);
void es__vk_dev_destroy(es__vk_dev *d);
const char *es__vk_result_str(VkResult r);
/* Fails with a message naming the call and the VkResult; device-memory results map to
 * ES_ERR_DEVICE_MEMORY, everything else to ES_ERR_BACKEND. VK_ERROR_DEVICE_LOST also marks the
 * device lost (lost_at = what, which must be static text). */
es_status es__vk_fail(es__vk_dev *d, VkResult r, const char *what);
/* ES_ERR_BACKEND naming the call that lost the device, when it is lost; else ES_OK. */
es_status es__vk_check_lost(es__vk_dev *d);
#define ES_VK_TRY(d, call)                                                                         \
    do {                                                                                           \
        VkResult es__r = (call);                                                                   \
        if (ES__UNLIKELY(es__r != VK_SUCCESS)) return es__vk_fail((d), es__r, #call);              \
    } while (0)

/* ---- memory.c */
typedef enum es__vk_mem_kind {
    ES__VK_MEM_DEVICE,       /* device-local                               */
    ES__VK_MEM_UPLOAD,       /* host-visible, written by the host          */
    ES__VK_MEM_READBACK,     /* host-visible, preferably cached, read back */
} es__vk_mem_kind;

typedef struct es__vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceSize size;
    VkDeviceSize alloc_size;   /* bytes of the allocation (accounting) */
    void *map;               /* host pointer for UPLOAD/READBACK buffers (NULL otherwise) */
    bool coherent;
} es__vk_buf;

es_status es__vk_buf_create(es__vk_dev *d, VkDeviceSize size, es__vk_mem_kind kind, const char *what,
                            es__vk_buf *out);
/* A buffer over size bytes of host memory at host (VK_EXT_external_memory_host; d->host_import),
 * both aligned to d->phys.host_import_align; coherent, not mapped (host is the mapping). The host
 * memory must outlive the buffer. ES_ERR_UNSUPPORTED where the device cannot import it. */
es_status es__vk_buf_import(es__vk_dev *d, void *host, VkDeviceSize size, const char *what, es__vk_buf *out);
void es__vk_buf_destroy(es__vk_dev *d, es__vk_buf *b);
/* Makes device writes visible to the host for READBACK buffers that are not coherent. */
es_status es__vk_buf_invalidate(es__vk_dev *d, es__vk_buf *b);
es_status es__vk_buf_flush(es__vk_dev *d, es__vk_buf *b);
/* A texel view of [offset, offset + range) of b. */
es_status es__vk_view_create(es__vk_dev *d, const es__vk_buf *b, VkFormat fmt, VkDeviceSize offset,
                             VkDeviceSize range, VkBufferView *out);
/* An arena: regions planned first (es__vk_arena_reserve), then backed by as few allocations of
 * at most ES__VK_CHUNK_MAX bytes as fit them (es__vk_arena_alloc). */
#define ES__VK_CHUNK_MAX ((VkDeviceSize)1 << 30)
#define ES__VK_ARENA_MAX 32
typedef struct es__vk_region {
    uint32_t chunk;
    VkDeviceSize off, size;
} es__vk_region;
typedef struct es__vk_arena {
    es__vk_buf chunks[ES__VK_ARENA_MAX];
    VkDeviceSize sizes[ES__VK_ARENA_MAX];
    uint32_t n;
    VkDeviceSize align;
} es__vk_arena;
void es__vk_arena_init(es__vk_dev *d, es__vk_arena *a);
es_status es__vk_arena_reserve(es__vk_dev *d, es__vk_arena *a, VkDeviceSize size, es__vk_region *out);
es_status es__vk_arena_alloc(es__vk_dev *d, es__vk_arena *a, es__vk_mem_kind kind, const char *what);
void es__vk_arena_free(es__vk_dev *d, es__vk_arena *a);
/* The buffer and range of a region, for a storage-buffer binding or a texel view. */
static inline es__vk_buf *es__vk_region_buf(es__vk_arena *a, const es__vk_region *r) {
    return &a->chunks[r->chunk];
}

/* Copies host bytes into a DEVICE buffer through a staging buffer (one submit per staging fill). */
typedef struct es__vk_stager {
    es__vk_buf staging;
    VkDeviceSize used;
    /* pending copies into their destinations */
    VkBuffer dst[64];
    VkBufferCopy region[64];
    uint32_t n;
} es__vk_stager;
es_status es__vk_stager_init(es__vk_dev *d, es__vk_stager *s, VkDeviceSize size);
es_status es__vk_stage(es__vk_dev *d, es__vk_stager *s, const es__vk_buf *dst, VkDeviceSize dst_off,
                       const void *src, VkDeviceSize size);
/* Reserves size bytes of staging for dst and returns a host pointer to fill (size <= staging).
 * The copy is recorded now and submitted by the next flush, which a later request may make: fill
 * the pointer before asking for another, or make room for all of them first (es__vk_stager_room). */
es_status es__vk_stage_ptr(es__vk_dev *d, es__vk_stager *s, const es__vk_buf *dst, VkDeviceSize dst_off,
                           VkDeviceSize size, void **ptr);
/* Flushes unless the next n requests of bytes in all (alignment included) fit without a flush. */
es_status es__vk_stager_room(es__vk_dev *d, es__vk_stager *s, VkDeviceSize bytes, uint32_t n);
es_status es__vk_stager_flush(es__vk_dev *d, es__vk_stager *s);
void es__vk_stager_free(es__vk_dev *d, es__vk_stager *s);
/* Copies [off, off + size) of a device buffer to host memory (synchronously, through a
 * readback buffer). */
es_status es__vk_read(es__vk_dev *d, const es__vk_buf *src, VkDeviceSize off, void *dst, VkDeviceSize size);
/* Fills [off, off + size) of a device buffer with a 32-bit pattern (synchronously). */
es_status es__vk_fill(es__vk_dev *d, const es__vk_buf *b, VkDeviceSize off, VkDeviceSize size, uint32_t v);

/* ---- link.c: a window of host memory between two devices, for multi-device strategies (an
 * activation row and a flag per layer, KV rows). Each side sees the window as a buffer of its
 * own (bind it in a shader, copy into or out of it); publishing makes one side's writes, once
 * its work has completed, visible on the other side. dev[1] NULL: the other side is the host
 * (the CPU backend), which reads and writes map[1] directly. Not thread-safe: the caller holds
 * the lock of each backend whose device a call submits to. */
typedef enum es__vk_link_mode {
    ES__VK_LINK_SHARED, /* one host allocation imported into both devices: publishing copies nothing */
    ES__VK_LINK_COPY,   /* a host-visible buffer on each device: publishing is one memcpy       */
    ES__VK_LINK_HOST,   /* the host on side 1: side 0's host-visible buffer is the window        */
} es__vk_link_mode;

typedef struct es__vk_link {
    es__vk_dev *dev[2];      /* dev[1] NULL = the host                                            */
    /* Timeline semaphores (es__vk_link_sync_create), two on each device: done[side] is signalled
     * by side's own submissions (its work up to a value is complete), ready[side] by the relay
     * (what the other side published up to a value may be read). NULL until created. */
    VkSemaphore done[2], ready[2];
    es__vk_buf win[2];       /* the window on each device (win[1] empty for the host)             */
    uint8_t *map[2];         /* each side's host view of its window                               */
    void *host_block;        /* SHARED: the allocation behind the aligned window                  */
    const es_allocator *alloc;
    VkDeviceSize size;       /* usable bytes                                                      */
    es__vk_link_mode mode;
} es__vk_link;

/* A window of size bytes between a and b (b NULL = the host). allow_shared false forces the COPY
 * mode even where both devices can import host memory (tests run both). */
es_status es__vk_link_create(es__vk_dev *a, es__vk_dev *b, VkDeviceSize size, bool allow_shared, es__vk_link *out);
void es__vk_link_destroy(es__vk_link *l);
/* After side from's writes to [off, off + size) of its window completed (its fence or a later
 * submission's waited on), makes them visible in the other side's window. */
es_status es__vk_link_publish(es__vk_link *l, int from, VkDeviceSize off, VkDeviceSize size);
/* Records into cb (of side's device): src [src_off, +size) into the window at win_off, then a
 * barrier making the copy available to the host; or the reverse, the window into dst, after a
 * barrier that makes host writes visible and before one that makes the copy visible to shaders. */
void es__vk_link_cmd_send(const es__vk_link *l, int side, VkCommandBuffer cb, const es__vk_buf *src,
                          VkDeviceSize src_off, VkDeviceSize win_off, VkDeviceSize size);
void es__vk_link_cmd_recv(const es__vk_link *l, int side, VkCommandBuffer cb, VkDeviceSize win_off,
                          const es__vk_buf *dst, VkDeviceSize dst_off, VkDeviceSize size);
/* The same, submitted on side's device and waited for: send then publishes the bytes to the other
 * side, recv takes what the other side published. A copy between devices is send on one side and
 * recv on the other; the host side writes map[1], publishes, and side 0 receives. */
es_status es__vk_link_send(es__vk_link *l, int side, const es__vk_buf *src, VkDeviceSize src_off, VkDeviceSize win_off,
                           VkDeviceSize size);
es_status es__vk_link_recv(es__vk_link *l, int side, VkDeviceSize win_off, const es__vk_buf *dst, VkDeviceSize dst_off,
                           VkDeviceSize size);
/* Cross-device ordering without external semaphores (lavapipe has none): each device's
 * submissions signal done[side] and wait on ready[side]; es__vk_link_relay, on any host thread,
 * forwards one to the other. The host records and submits every layer's work ahead; only the
 * relay waits. Needs timeline semaphores on both devices (ES_ERR_UNSUPPORTED otherwise). */
es_status es__vk_link_sync_create(es__vk_link *l);
/* Submits cb on side's queue: waiting (at the top of the pipe) until ready[side] >= wait (0 = no
 * wait), signalling done[side] = signal when done (0 = none) and fence (may be NULL). A queue
 * starts its batches in order (lavapipe runs them one after another): a batch that signals what
 * the relay needs must be submitted before one on the same queue that waits for the relay. */
es_status es__vk_link_submit(es__vk_link *l, int side, VkCommandBuffer cb, uint64_t wait, uint64_t signal,
                             VkFence fence);
/* Waits until done[from] >= value (at most timeout_ns: ES_ERR_BACKEND naming VK_TIMEOUT), publishes
 * [off, off + size) of from's window, then signals ready[1 - from] = value. Values of each
 * semaphore only grow (e.g. token * n_layer + layer + 1). */
es_status es__vk_link_relay(es__vk_link *l, int from, uint64_t value, VkDeviceSize off, VkDeviceSize size,
                            uint64_t timeout_ns);
/* Both ways at once, ALSpec's all-gather of the priority vector (Algorithm 2) for two devices:
 * waits until done[0] >= value and done[1] >= value, publishes [off[0], +size[0]) from side 0
 * and [off[1], +size[1]) from side 1 (disjoint ranges), then signals ready[0] = ready[1] = value. */
es_status es__vk_link_exchange(es__vk_link *l, uint64_t value, const VkDeviceSize off[2], const VkDeviceSize size[2],
                               uint64_t timeout_ns);

/* After a failure, lets every batch still waiting on a ready value up to value run (signals both
 * ready semaphores there from the host), so the queues drain instead of waiting forever. */
es_status es__vk_link_release(es__vk_link *l, uint64_t value);

/* ---- relay.c: a host thread running a link's relays and exchanges in the order queued, so the
 * thread that submits a token's per-layer work on both devices waits for none of them. Jobs run
 * one after another, each with the relayer's timeout; after a failure the rest are skipped and
 * every later call returns the first failure's status. The message is written, from the
 * relayer's thread, into the error record of the link's dev[0] (its backend's
 * es_backend_errmsg): read it after es__vk_relayer_drain or _stop returned the failure. */
#define ES__VK_RELAY_QUEUE 256
typedef struct es__vk_relay_job {
    int from;                /* 0 or 1: es__vk_link_relay from that side; -1: es__vk_link_exchange */
    uint64_t value;
    VkDeviceSize off[2], size[2];
} es__vk_relay_job;

typedef struct es__vk_relayer {
    es__vk_link *link;
    uint64_t timeout_ns;     /* each job's                                                       */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    es__vk_relay_job jobs[ES__VK_RELAY_QUEUE];
    uint64_t head, tail;     /* jobs [head, tail) are queued; head's runs                        */
    es_status status;        /* the first failure                                                */
    bool stop, running;
} es__vk_relayer;

es_status es__vk_relayer_start(es__vk_relayer *r, es__vk_link *l, uint64_t timeout_ns);
/* Queue a relay or an exchange (blocks while the queue is full). */
es_status es__vk_relayer_relay(es__vk_relayer *r, int from, uint64_t value, VkDeviceSize off, VkDeviceSize size);
es_status es__vk_relayer_exchange(es__vk_relayer *r, uint64_t value, const VkDeviceSize off[2], const VkDeviceSize size[2]);
/* Waits until every queued job ran; the first failure's status. */
es_status es__vk_relayer_drain(es__vk_relayer *r);
/* Runs what is queued, then ends the thread (a job waiting for work never submitted ends at its
 * timeout); the first failure's status. */
es_status es__vk_relayer_stop(es__vk_relayer *r);

/* ---- pipeline.c */
/* Returns the pipeline for shader with these specialisation constants, creating it (and
 * checking its interface against the shader table) on first use. */
es_status es__vk_pipeline_get(es__vk_dev *d, es__shader_id shader, const uint32_t *spec, uint32_t n_spec,
                              es__vk_pipeline **out);
void es__vk_pipelines_destroy(es__vk_dev *d);
/* A pipeline from SPIR-V outside the registry (tests/bench: baselines kept out of the library),
 * checked against sh->family like the registry's; the caller releases it. */
es_status es__vk_pipeline_custom(es__vk_dev *d, const es__shader_info *sh, const uint32_t *spec, uint32_t n_spec,
                                 es__vk_pipeline *out);
void es__vk_pipeline_release(es__vk_dev *d, es__vk_pipeline *p);
/* Looks a variant up by its table name. */
es_status es__vk_shader_find(es__vk_dev *d, const char *name, es__shader_id *out);
es_status es__vk_pcache_load(es__vk_dev *d, const char *path);
void es__vk_pcache_save(es__vk_dev *d);

/* What a binding holds, for descriptor writes. */
typedef struct es__vk_bind {
    VkBuffer buf;            /* storage buffers: buffer, offset, range */
    VkDeviceSize offset, range;
    VkBufferView view;       /* texel buffers */
} es__vk_bind;
/* Allocates a descriptor set for pipe from pool and writes binds[pipe->n_bindings]. */
es_status es__vk_set_create(es__vk_dev *d, VkDescriptorPool pool, const es__vk_pipeline *pipe,
                            const es__vk_bind *binds, VkDescriptorSet *out);

/* ---- cmd.c: recording a sequence of dispatches into one command buffer. */
typedef struct es__vk_rec {
    es__vk_dev *d;
    VkCommandBuffer cb;
    VkPipeline bound;
    VkResult err;            /* first recording failure */
    uint32_t n_dispatch;
    VkQueryPool queries;     /* timestamps when profiling (NULL otherwise) */
    uint32_t n_queries, cap_queries;
    const char **query_ops;  /* [cap_queries] op name of the dispatch ending at each query */
} es__vk_rec;

void es__vk_rec_begin(es__vk_rec *r, es__vk_dev *d, VkCommandBuffer cb, VkQueryPool queries,
                      uint32_t cap_queries, const char **query_ops);
/* Dispatches between es__vk_rec_gate_begin and _end run only where the 32-bit word at off of buf
 * (written by earlier dispatches, or the host before the submission) is nonzero (zero when
 * inverted): a decision taken on the device, no host round trip. Needs d->cond_begin. */
void es__vk_rec_gate_begin(es__vk_rec *r, const es__vk_buf *buf, VkDeviceSize off, bool inverted);
void es__vk_rec_gate_end(es__vk_rec *r);
/* Records bind + push + dispatch + a compute-to-compute barrier. */
void es__vk_rec_dispatch(es__vk_rec *r, const char *op, const es__vk_pipeline *p, VkDescriptorSet set,
                         const void *push, uint32_t gx, uint32_t gy, uint32_t gz);
void es__vk_rec_dispatch_indirect(es__vk_rec *r, const char *op, const es__vk_pipeline *p,
                                  VkDescriptorSet set, const void *push, VkBuffer buf, VkDeviceSize off);
/* Ends with a barrier that makes shader writes visible to the host. */
es_status es__vk_rec_end(es__vk_rec *r);
/* Submits cb and waits for it. */
es_status es__vk_submit_wait(es__vk_dev *d, VkCommandBuffer cb);
/* Adds the timestamps of a finished submission to the device's profile. */
/* A timestamp query pool of n queries (profiling). */
es_status es__vk_query_pool_create(es__vk_dev *d, uint32_t n, VkQueryPool *out);
es_status es__vk_profile_collect(es__vk_dev *d, VkQueryPool q, uint32_t n_queries, const char **ops);

#endif /* ES_VULKAN_VK_H */
