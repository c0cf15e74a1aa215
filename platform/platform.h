/* platform.h: the operating-system seams: file mapping, clocks, processor count, shared libraries.
 * POSIX implementation in posix.c; Windows/Android/macOS ports replace that one file.
 * Threads use pthreads directly (available on every target, including Android and via
 * winpthreads on Windows), so there is no thread wrapper here. */
#ifndef ES_PLATFORM_H
#define ES_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A read-only view of a whole file. */
typedef struct es__file_map {
    const uint8_t *data; /* NULL for an empty file */
    uint64_t size;       /* bytes                  */
    bool mapped;         /* true: munmap on close; false: data is a heap copy */
} es__file_map;

/* Opens path read-only and maps it (or reads it into malloc'd memory when use_mmap is false).
 * Only regular files: anything else (a FIFO, a device, a directory) is refused by its type
 * without blocking on it. Returns 0 on success, else an errno value or one of the negative
 * ES__FILE_* kinds below; es__file_strerror() says which. The map is untouched on failure. */
enum {
    ES__FILE_DIRECTORY = -1,
    ES__FILE_FIFO = -2,
    ES__FILE_CHAR_DEVICE = -3,
    ES__FILE_BLOCK_DEVICE = -4,
    ES__FILE_SOCKET = -5,
    ES__FILE_NOT_REGULAR = -6,
};
int es__file_map_open(const char *path, bool use_mmap, es__file_map *out);
/* "No such file or directory", "is a FIFO, not a regular file", ...: what es__file_map_open's
 * result means, to follow the path in a message. */
const char *es__file_strerror(int code);
void es__file_map_close(es__file_map *map);

/* Monotonic clock in seconds. */
double es__time_now(void);

/* Online processors (at least 1). */
int es__cpu_count(void);

/* Bytes of memory this process can have resident at most: the machine's physical memory, or the
 * memory limit of its control group (cgroup v2 memory.max, v1 memory.limit_in_bytes) when that is
 * smaller; 0 = unknown. Lets a large request fail before it starts instead of meeting the
 * out-of-memory killer halfway. */
uint64_t es__mem_total(void);

/* Page-granular memory for large, long-lived buffers that are streamed (a backend's copy of the
 * weights): backed by huge pages where the OS offers them, which lets the hardware prefetchers
 * run across 4 KiB boundaries. Zero-filled; NULL on failure. Free with es__pages_free(p, size). */
void *es__pages_alloc(size_t size);
void es__pages_free(void *p, size_t size);

/* Tells the OS that the pages of [p, p + size) (part of a file mapping or any memory) are not
 * needed soon: it may reclaim them if it can do so without losing data. Content stays valid. */
void es__pages_release(const void *p, size_t size);

/* Shared libraries opened at run time (the Vulkan loader: lib/vulkan/loader.c). es__lib_open
 * returns NULL on failure and writes the system's reason, naming the library, to why[why_size].
 * Symbols come back as a generic function pointer, to be cast to the function's own type. */
typedef void (*es__lib_fn)(void);
void *es__lib_open(const char *name, char *why, size_t why_size);
es__lib_fn es__lib_sym(void *lib, const char *name);
void es__lib_close(void *lib);

#endif /* ES_PLATFORM_H */
