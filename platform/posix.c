/* posix.c: POSIX implementation of platform.h (Linux extras where available: huge pages, page-out). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS and madvise */
#define _POSIX_C_SOURCE 200809L
#include "platform.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int read_all(int fd, uint8_t *dst, uint64_t size) {
    uint64_t done = 0;
    while (done < size) {
        ssize_t n = read(fd, dst + done, (size_t)(size - done > (1u << 30) ? (1u << 30) : size - done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : EIO;
        done += (uint64_t)n;
    }
    return 0;
}

/* What a file that is not a regular file is, for the message. */
static int file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return ES__FILE_DIRECTORY;
    if (S_ISFIFO(mode)) return ES__FILE_FIFO;
    if (S_ISCHR(mode)) return ES__FILE_CHAR_DEVICE;
    if (S_ISBLK(mode)) return ES__FILE_BLOCK_DEVICE;
    if (S_ISSOCK(mode)) return ES__FILE_SOCKET;
    return ES__FILE_NOT_REGULAR;
}

int es__file_map_open(const char *path, bool use_mmap, es__file_map *out) {
    /* O_NONBLOCK: opening a FIFO for reading blocks until a writer comes, and a device's open may
     * wait too; the type is checked on the descriptor (no window between a stat and the open),
     * and O_NONBLOCK means nothing for the regular files that pass. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno == EISDIR ? ES__FILE_DIRECTORY : errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return file_kind(st.st_mode);
    }
    es__file_map m = {NULL, (uint64_t)st.st_size, false};
    int rc = 0;
    if (m.size == 0) {
        /* nothing to map; data stays NULL */
    } else if (use_mmap) {
        void *p = mmap(NULL, (size_t)m.size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            rc = errno;
        else {
            m.data = p;
            m.mapped = true;
        }
    } else {
        uint8_t *p = malloc((size_t)m.size);
        if (!p)
            rc = ENOMEM;
        else if ((rc = read_all(fd, p, m.size)) != 0)
            free(p);
        else
            m.data = p;
    }
    close(fd);
    if (rc == 0) *out = m;
    return rc;
}

const char *es__file_strerror(int code) {
    switch (code) {
    case ES__FILE_DIRECTORY: return "is a directory, not a regular file";
    case ES__FILE_FIFO: return "is a FIFO, not a regular file";
    case ES__FILE_CHAR_DEVICE: return "is a character device, not a regular file";
    case ES__FILE_BLOCK_DEVICE: return "is a block device, not a regular file";
    case ES__FILE_SOCKET: return "is a socket, not a regular file";
    case ES__FILE_NOT_REGULAR: return "is not a regular file";
    default: return strerror(code);
    }
}

void es__file_map_close(es__file_map *map) {
    if (!map || !map->data) return;
    if (map->mapped)
        munmap((void *)map->data, (size_t)map->size);
    else
        free((void *)map->data);
    map->data = NULL;
    map->size = 0;
}

double es__time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int es__cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* A number from a one-line file such as a cgroup limit; 0 when absent or "max". */
static uint64_t read_limit(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *end = NULL;
    unsigned long long v = strtoull(buf, &end, 10);
    return end != buf ? (uint64_t)v : 0;
}

uint64_t es__mem_total(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t total = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    static const char *const limits[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        uint64_t lim = read_limit(limits[i]);
        if (lim > 0 && (total == 0 || lim < total)) total = lim;
    }
    return total;
}

void *es__pages_alloc(size_t size) {
    if (size == 0) return NULL;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE); /* advice only: without transparent huge pages it is 4 KiB pages */
#endif
    return p;
}

void es__pages_free(void *p, size_t size) {
    if (p) munmap(p, size);
}

void es__pages_release(const void *p, size_t size) {
#ifdef MADV_PAGEOUT
    /* whole pages inside the range only; page-out never discards data (a dirty anonymous page
     * would go to swap, a clean file page is read back when touched again) */
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + size) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_PAGEOUT);
#else
    (void)p;
    (void)size;
#endif
}

void *es__lib_open(const char *name, char *why, size_t why_size) {
    /* RTLD_LOCAL: the library's symbols serve whoever asked for them, not the whole process */
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib && why && why_size) {
        const char *e = dlerror();
        snprintf(why, why_size, "%s", e ? e : name);
    }
    return lib;
}

es__lib_fn es__lib_sym(void *lib, const char *name) {
    /* POSIX makes dlsym's result convertible to a function pointer; copying the bits says so
     * without a cast that ISO C leaves undefined */
    _Static_assert(sizeof(es__lib_fn) == sizeof(void *), "function and data pointers differ in size");
    void *p = dlsym(lib, name);
    es__lib_fn fn;
    memcpy(&fn, &p, sizeof fn);
    return fn;
}

void es__lib_close(void *lib) {
    if (lib) dlclose(lib);
}
