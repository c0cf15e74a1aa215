/* fuzz_model.h: the tiny llama model the adapter and tree fuzz targets run against, built once per
 * process in memory with tools/mkmodel and loaded through the library's own loader. Its shape is
 * the one the adapter seeds in corpus/adapter were made for (make_fuzz_seeds.sh):
 *   edgespec-mkmodel --n-vocab 260 --n-embd 32 --n-layer 2 --n-head 2 --n-head-kv 1 --n-ff 32
 *                    --n-ctx 64 --seed 5
 * A failure to build it is a broken test, not a finding: it aborts at once. */
#ifndef ES_FUZZ_MODEL_H
#define ES_FUZZ_MODEL_H

#include "mkmodel.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>

static es_mk_params fuzz_model_params(void) {
    es_mk_params p = es_mk_default_params();
    p.n_vocab = 260;
    p.n_embd = 32;
    p.n_layer = 2;
    p.n_head = 2;
    p.n_head_kv = 1;
    p.n_ff = 32;
    p.n_ctx = 64;
    p.seed = 5;
    return p;
}

static es_model *fuzz_model(void) {
    static es_model *m;
    static uint8_t *file;
    if (m) return m;
    es__err err = {ES_OK, ""};
    es_mk_params p = fuzz_model_params();
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    uint64_t size = 0;
    if (!w || es_mk_build(&p, w, &err) != ES_OK || es__gguf_write_mem(w, &file, &size, &err) != ES_OK ||
        es__model_load_mem(file, size, "fuzz-tiny.gguf", NULL, &m) != ES_OK) {
        fprintf(stderr, "fuzz_model: cannot build the tiny model: %s %s\n", err.msg, es_last_error());
        abort();
    }
    es__gguf_writer_free(w);
    return m; /* lives for the process, as libFuzzer's targets do */
}

/* A CPU backend with one thread: inputs are replayed one at a time, and a worker pool would only
 * add threads to every fuzzing run. */
static es_backend *fuzz_backend(void) {
    static es_backend *b;
    if (b) return b;
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 1;
    if (es_backend_create(&bp, &b) != ES_OK) {
        fprintf(stderr, "fuzz_backend: %s\n", es_last_error());
        abort();
    }
    return b;
}

#endif
