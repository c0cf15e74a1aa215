/* backend.c: es_backend objects: choosing the implementation, serialising calls, and sharing one
 * upload of a model's weights among all contexts on the backend. The computing lives in lib/cpu
 * and lib/vulkan. */
#include "backend.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

es_backend_params es_backend_default_params(void) {
    es_backend_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* The one place the zeros of es_backend_params get their meaning (NULL is all zeros); the rest
 * (type CPU, no device selector, no flags, no cache, copied weights) are zeros the backends read
 * as such. Negative values pass through for es_backend_create to reject. */
static es_backend_params resolve_params(const es_backend_params *params) {
    es_backend_params p = params ? *params : es_backend_default_params();
    if (p.n_threads == 0) p.n_threads = ES__MIN(es__cpu_count(), ES_MAX_THREADS);
    p.log_level = es__log_level(p.log_level);
    return p;
}

static const struct {
    const char *name;
    uint32_t bits;
} vk_flag_names[] = {
    {"no-storage16", ES_VK_NO_STORAGE16}, {"no-storage8", ES_VK_NO_STORAGE8}, {"no-fp16", ES_VK_NO_FP16},
    {"no-subgroup", ES_VK_NO_SUBGROUP},   {"no-int-dot", ES_VK_NO_INT_DOT},
    {"storage-buffers", ES_VK_STORAGE_BUFFERS}, {"texel-buffers", ES_VK_TEXEL_BUFFERS},
    {"fallbacks", ES_VK_FALLBACKS},
};

/* Here rather than in lib/vulkan: an application parses its options whether or not this build has
 * the Vulkan backend, and backend creation is what then reports a missing backend. */
es_status es_vk_flags_parse(const char *s, uint32_t *flags) {
    if (!flags) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_vk_flags_parse: flags is NULL");
    uint32_t bits = 0;
    while (s && *s) {
        while (*s == ',' || *s == ' ') s++;
        if (!*s) break;
        const size_t len = strcspn(s, ", ");
        bool found = false;
        for (size_t i = 0; i < ES__ARRAY_LEN(vk_flag_names); i++) {
            if (strlen(vk_flag_names[i].name) == len && strncmp(vk_flag_names[i].name, s, len) == 0) {
                bits |= vk_flag_names[i].bits;
                found = true;
            }
        }
        if (!found && isdigit((unsigned char)s[0])) {
            char *end = NULL;
            unsigned long v = strtoul(s, &end, 0);
            if (end == s + len && v <= UINT32_MAX) {
                bits |= (uint32_t)v;
                found = true;
            }
        }
        if (!found) {
            char known[256] = "";
            for (size_t i = 0, n = 0; i < ES__ARRAY_LEN(vk_flag_names) && n < sizeof known; i++)
                n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", vk_flag_names[i].name);
            return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "vulkan flags: unknown flag '%.*s' (known: %s)", (int)len, s,
                            known);
        }
        s += len;
    }
    *flags = bits;
    return ES_OK;
}

es_status es_backend_create(const es_backend_params *params, es_backend **out) {
    if (!out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_backend_create: out is NULL");
    *out = NULL;
    const es_backend_params p = resolve_params(params);
    ES_TRY(ES__CHECK_RESERVED(&p, "es_backend_params", NULL));
    ES_TRY(ES__CHECK_RESERVED(&p.vk_tuning, "es_backend_params.vk_tuning", NULL));
    const es__backend_vtbl *vt = NULL;
    if (p.type == ES_BACKEND_CPU)
        vt = &es__cpu_backend;
    else if (p.type == ES_BACKEND_VULKAN)
        vt = es__vulkan_backend_ptr;
    else
        return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_backend_create: unknown backend type %d",
                        (int)p.type);
    if (!vt)
        return es__fail(NULL, ES_ERR_UNSUPPORTED,
                        "es_backend_create: this build has no Vulkan backend (configure with -Dvulkan=enabled)");
    if (p.n_threads < 0)
        return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_backend_create: n_threads %d < 0", p.n_threads);

    es_backend *b = es__calloc(p.allocator, 1, sizeof *b);
    if (!b) return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_backend_create: out of memory");
    if (p.allocator) {
        b->alloc_copy = *p.allocator;
        b->alloc = &b->alloc_copy;
    }
    b->vt = vt;
    b->type = p.type;
    b->log = (es__log){p.log_fn, p.log_user, p.log_level};
    b->n_threads = p.n_threads;
    b->profile = p.profile;
    b->progress_fn = p.progress_fn;
    b->progress_user = p.progress_user;
    snprintf(b->name, sizeof b->name, "%s", vt->name);
    if (pthread_mutex_init(&b->lock, NULL) != 0) {
        es__free(b->alloc, b);
        return es__fail(NULL, ES_ERR_BACKEND, "es_backend_create: pthread_mutex_init failed");
    }
    es_status s = vt->init(b, &p);
    if (s != ES_OK) {
        pthread_mutex_destroy(&b->lock);
        es__fail(NULL, s, "%s", b->err.msg);
        es__free(p.allocator, b);
        return s;
    }
    *out = b;
    return ES_OK;
}

void es_backend_free(es_backend *b) {
    if (!b) return;
    for (int32_t i = 0; i < b->n_uploads; i++) b->vt->model_release(b, b->uploads[i].weights);
    es__free(b->alloc, b->uploads);
    b->vt->destroy(b);
    pthread_mutex_destroy(&b->lock);
    const es_allocator *a = b->alloc ? b->alloc : NULL;
    es_allocator copy;
    if (a) {
        copy = *a;
        a = &copy;
    }
    es__free(a, b);
}

const char *es_backend_errmsg(const es_backend *b) {
    return b ? b->err.msg : "backend is NULL";
}

const char *es_backend_name(const es_backend *b) {
    return b ? b->name : "";
}

/* The counters and the profile change inside calls that hold b->lock; readers on other threads
 * take it too (the const of the public signatures is the caller's view: the mutex is not data). */
static void lock(const es_backend *b) {
    pthread_mutex_lock((pthread_mutex_t *)&b->lock);
}
static void unlock(const es_backend *b) {
    pthread_mutex_unlock((pthread_mutex_t *)&b->lock);
}

es_status es_backend_get_stats(const es_backend *b, es_backend_stats *out) {
    if (!b || !out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_backend_get_stats: NULL argument");
    lock(b);
    *out = b->stats;
    unlock(b);
    return ES_OK;
}

es_status es_backend_profile(const es_backend *b, es_profile_entry *entries, size_t cap, size_t *n) {
    if (!b || !n || (cap && !entries))
        return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_backend_profile: NULL argument");
    lock(b);
    *n = (size_t)b->n_prof;
    for (size_t i = 0; i < cap && i < *n; i++) entries[i] = b->prof[i];
    unlock(b);
    if (cap < *n)
        return es__fail(NULL, ES_ERR_BUFFER_TOO_SMALL, "es_backend_profile: %zu ops, room for %zu", *n, cap);
    return ES_OK;
}

void es_backend_profile_reset(es_backend *b) {
    if (!b) return;
    lock(b);
    b->n_prof = 0;
    b->stats.n_forward = b->stats.n_submits = b->stats.n_forward_submits = b->stats.n_dispatches = 0;
    unlock(b);
}

/* Returns the backend's upload of m, creating it on first use. Caller holds b->lock. */
es_status es__backend_acquire_model(es_backend *b, const es_model *m, void **weights) {
    for (int32_t i = 0; i < b->n_uploads; i++) {
        if (b->uploads[i].model == m) {
            b->uploads[i].refs++;
            *weights = b->uploads[i].weights;
            return ES_OK;
        }
    }
    es__upload *grown = es__realloc(b->alloc, b->uploads, sizeof *grown * (size_t)(b->n_uploads + 1));
    if (!grown) return es__fail(&b->err, ES_ERR_OUT_OF_MEMORY, "backend: out of memory");
    b->uploads = grown;
    void *w = NULL;
    ES_TRY(b->vt->model_upload(b, m, &w));
    b->uploads[b->n_uploads++] = (es__upload){m, w, 1};
    *weights = w;
    return ES_OK;
}

/* Drops one reference; the last one frees the upload. Caller holds b->lock. */
void es__backend_release_model(es_backend *b, const es_model *m) {
    for (int32_t i = 0; i < b->n_uploads; i++) {
        if (b->uploads[i].model != m) continue;
        if (--b->uploads[i].refs > 0) return;
        b->vt->model_release(b, b->uploads[i].weights);
        b->uploads[i] = b->uploads[--b->n_uploads];
        return;
    }
}

#ifndef ES_HAVE_VULKAN
const es__backend_vtbl *const es__vulkan_backend_ptr = NULL;

es_status es_vulkan_devices(es_device_info *out, size_t cap, size_t *n) {
    (void)out;
    (void)cap;
    if (n) *n = 0;
    return es__fail(NULL, ES_ERR_UNSUPPORTED, "es_vulkan_devices: this build has no Vulkan backend");
}
#endif
