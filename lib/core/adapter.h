/* adapter.h: the Speculative Streaming adapter (DESIGN.md "Formats", docs/formats.md): stream
 * identifier embeddings P_j (Eq. 3), the tree-pruning early exit (3.2.3) and optional stream-only
 * LoRA in the MSA layers, validated against a base model and held as f32 in host memory (a few
 * hundred KB at most), where every backend reads or uploads it from. */
#ifndef ES_CORE_ADAPTER_H
#define ES_CORE_ADAPTER_H

#include "common.h"
#include "model.h"

#include <pthread.h>

/* The projections a stream-only LoRA may adapt, in the order of the lora array. */
typedef enum es__ss_lora_target {
    ES__SS_LORA_Q = 0,
    ES__SS_LORA_K,
    ES__SS_LORA_V,
    ES__SS_LORA_O,
    ES__SS_LORA_GATE,
    ES__SS_LORA_UP,
    ES__SS_LORA_DOWN,
    ES__SS_LORA_COUNT
} es__ss_lora_target;

/* y = W x + b (a x) for stream rows only. */
typedef struct es__ss_lora {
    float *a;       /* (rank, n_in)  NULL when this projection has no LoRA */
    float *b;       /* (n_out, rank)                                       */
    float *bt;      /* (rank, n_out): b transposed, for B (A x) as rank
                       multiply-adds of whole output vectors (the CPU's)    */
    int32_t n_in, n_out;
} es__ss_lora;

struct es__ss_adapter {
    int32_t n_streams;   /* γ                                                        */
    int32_t n_msa;       /* Ns: MSA layers at the top                                */
    int32_t msa_start;   /* n_layer - Ns: streams start at this layer's input (Eq. 3) */
    int32_t prune_layer; /* the early exit reads this layer's input; n_layer = final  */
    int32_t prune_rank;  /* 0 = no pruning adapter                                   */
    int32_t lora_rank;   /* 0 = no stream-only LoRA                                  */
    float *stream_embd;  /* (n_streams, n_embd)                                      */
    float *prune_down;   /* (prune_rank, n_embd)                                     */
    float *prune_up;     /* (n_embd, prune_rank)                                     */
    es__ss_lora *lora;   /* [n_msa][ES__SS_LORA_COUNT]: layer msa_start + i at i     */
    const es_allocator *alloc;
    /* How many stream rows may ride in a forward, as a context measured it per device (the
     * backends' measurements at context creation): later contexts of the model on the same
     * device reuse it instead of timing a dozen forward calls again (es__ss_ride_recall). */
    pthread_mutex_t ride_lock;
    struct {
        char key[112];
        int32_t rows;
    } ride[8];
    int32_t n_ride;
};
typedef struct es__ss_adapter es__ss_adapter;

/* Validates the adapter GGUF in data[size] against hp and copies its tensors to f32. name is used
 * in messages (the path). On failure *out is NULL and err says what and where. */
es_status es__ss_adapter_parse(const es__hparams *hp, const uint8_t *data, uint64_t size, const char *name,
                               const es_allocator *a, es__ss_adapter **out, es__err *err);
void es__ss_adapter_free(es__ss_adapter *ad);

/* The riding cap measured earlier under key (the device and the sizes its measurement could
 * try: a backend's own wording), if any. Thread-safe: contexts of one model may be created on
 * several threads and backends at once. */
bool es__ss_ride_recall(es__ss_adapter *ad, const char *key, int32_t *rows);
/* Keeps a measured cap under key (the oldest entry makes room). */
void es__ss_ride_remember(es__ss_adapter *ad, const char *key, int32_t rows);

/* The GGUF tensor name of a LoRA factor (a: 'a', b: 'b') of target in layer il. */
void es__ss_lora_name(char *buf, size_t size, int32_t il, es__ss_lora_target t, char factor);

#endif /* ES_CORE_ADAPTER_H */
