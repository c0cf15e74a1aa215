/* edgespec.h: the whole public API of edgespec.
 *
 * edgespec runs llama-family GGUF models on a CPU backend and a Vulkan backend and makes decoding
 * faster with speculation. Conventions:
 *   - Every fallible call returns es_status and writes results through out-parameters; an out
 *     handle is NULL on failure. A failed call leaves the object as it was before the call.
 *   - es_status_str() gives static text for a status; es_*_errmsg(obj) the last detailed message of
 *     an object (file offset, tensor name, expected vs found); es_last_error() the calling thread's
 *     last detailed message, which is where a failed constructor (out handle NULL) leaves it.
 *   - *_params structs are passed by const pointer. A zeroed params struct means all defaults;
 *     NULL params the same. Every field documents its unit and what 0 means, and the library gives
 *     each zero its meaning in one place. es_*_default_params() return the zeroed struct, so
 *     `es_context_params p = {0};` and `p = es_context_default_params();` are the same.
 *   - The library never exits, aborts or prints. It reports through the log callback given in params.
 *   - destroy(NULL) is a harmless no-op.
 * Thread-safety: a loaded es_model is immutable and may be shared by any number of contexts on any
 * number of threads. An es_context, es_sampler or es_spec is used by one thread at a time. An
 * es_backend may be shared by contexts used on different threads (each context by one thread at
 * a time): creating, using and freeing them may overlap, and the backend runs their calls into
 * it one at a time. es_backend_free comes after its last context is freed. An allocator given
 * to objects used on several threads is called from those threads, possibly at once.
 */
#ifndef EDGESPEC_H
#define EDGESPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(ES_BUILDING_SHARED)
#define ES_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define ES_API __attribute__((visibility("default")))
#else
#define ES_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Versions and the ABI. ES_VERSION_* name this header; es_version() the library that runs. The
 * shared library's soname is libedgespec.so.ES_VERSION_MAJOR (libedgespec.so.0 now), and within
 * one major version a program built against an older header runs on a newer library:
 *   - exported functions (only es_* symbols are exported) are never removed and keep their
 *     signatures; new ones come with a minor version (tests/abi/edgespec.abi lists them all, and
 *     the abi test fails when one disappears);
 *   - enum and status values are append-only, macro values never change;
 *   - the structs the library reads or writes (the *_params, *_info and *_stats structs, and
 *     es_vk_tuning, es_profile_entry) keep their size and field offsets: each ends in
 *     `uint64_t reserved[8]`, and a new field takes the room of reserved words (reserved shrinks,
 *     the size does not). Callers zero the whole struct (= {0}, or a *_default_params()), so an
 *     older caller passes zero in a new field, which means its default as every zero does. The
 *     library writes zero into the reserved words of what it returns, and refuses params whose
 *     reserved words are not zero with ES_ERR_INVALID_ARGUMENT: that is a caller built against a
 *     newer header setting a field this library does not have;
 *   - es_allocator, es_chat_message and es_batch have no reserved words: they never change.
 * Anything else (a removal, a changed signature, size or meaning) bumps ES_VERSION_MAJOR and with
 * it the soname; a patch version changes no interface. While the major version is 0 the same
 * rules hold between its minor versions. */
#define ES_VERSION_MAJOR 0
#define ES_VERSION_MINOR 1
#define ES_VERSION_PATCH 0
#define ES_VERSION_STRING "0.1.0"

/* The version of the library that runs, "MAJOR.MINOR.PATCH" (static text): a program may compare
 * it with ES_VERSION_STRING, the header it was built against. */
ES_API const char *es_version(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes. Append-only: values are pinned and never reused.
 */
typedef enum es_status {
    ES_OK = 0,
    ES_ERR_INVALID_ARGUMENT = 1, /* NULL handle, parameter out of range, invalid token id        */
    ES_ERR_IO = 2,               /* open, stat, map, read or write failed                         */
    ES_ERR_FORMAT = 3,           /* malformed file: magic, truncation, bounds, overlap, duplicates */
    ES_ERR_UNSUPPORTED = 4,      /* well-formed but unsupported: version, type, architecture      */
    ES_ERR_OUT_OF_MEMORY = 5,    /* host allocation failed                                        */
    ES_ERR_DEVICE_MEMORY = 6,    /* device allocation failed                                      */
    ES_ERR_BACKEND = 7,          /* backend failure (the message names the VkResult)              */
    ES_ERR_CONTEXT_FULL = 8,     /* the KV cache cannot hold the batch                            */
    ES_ERR_BUFFER_TOO_SMALL = 9, /* an output buffer is too small; the needed size is reported    */
    ES_ERR_CANCELLED = 10,       /* a user callback or es_context_abort asked to stop             */
    ES_ERR_INVALID_TREE = 11,    /* token tree: bad parent, cycle, DFS intervals, size            */
    ES_ERR_MODEL = 12,           /* model content: missing key or tensor, shape vs hyperparameters */
} es_status;

ES_API const char *es_status_str(es_status s);

/* The calling thread's last detailed error message from any edgespec call ("" if none). Valid
 * until the thread's next edgespec call. Use it when a constructor failed and left *out NULL. */
ES_API const char *es_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Debug switches: the only environment variables the library reads (everything else it is told
 * through params). Both are read when a backend is created, for tests and debugging:
 *   EDGESPEC_VK_VALIDATION=1   Vulkan: enable the Khronos validation layer (backend creation fails
 *                              when it is not installed) and report each of its messages through
 *                              the log at ES_LOG_ERROR, counted in es_backend_stats.validation_messages.
 *                              Unset, "" or "0" = off. es_vulkan_devices() reads it too.
 *   EDGESPEC_CPU_KERNELS=NAME  CPU: use kernels no better than "generic" or "x86-64-v3", to test the
 *                              fallbacks on a CPU that has more ("generic" also turns off AArch64's
 *                              "neon" level); unset = the best this CPU runs.
 */

/* ---------------------------------------------------------------------------------------------
 * Host services.
 */
typedef enum es_log_level {
    ES_LOG_DEFAULT = 0, /* in params: ES_LOG_WARN. The log callback never receives it. */
    ES_LOG_ERROR = 1,
    ES_LOG_WARN = 2,
    ES_LOG_INFO = 3,
    ES_LOG_DEBUG = 4,
} es_log_level;

/* Called from whichever thread made the library call; msg is valid during the call only. */
typedef void (*es_log_fn)(es_log_level level, const char *msg, void *user);

/* Optional allocator for host memory. All three functions are required when one is given. Large
 * weight memory comes from the file mapping, not from here. */
typedef struct es_allocator {
    void *(*alloc)(size_t size, void *user);                  /* NULL on failure          */
    void *(*realloc)(void *ptr, size_t size, void *user);     /* NULL on failure, ptr kept */
    void (*free)(void *ptr, void *user);                      /* free(NULL) must be a no-op */
    void *user;
} es_allocator;

/* Progress of long work (model load, weight upload): fraction in [0, 1]. Return false to cancel;
 * the call then fails with ES_ERR_CANCELLED. */
typedef bool (*es_progress_fn)(float fraction, void *user);

/* ---------------------------------------------------------------------------------------------
 * Model: a validated GGUF file, mapped read-only. Immutable after load; share freely.
 */
typedef struct es_model es_model;

typedef struct es_model_params {
    bool vocab_only;          /* true = hyperparameters and tokenizer only (weights may be absent);
                                 false = everything                                             */
    bool no_mmap;             /* false (default): map the file read-only; true: read it into host
                                 memory                                                         */
    es_log_fn log_fn;         /* NULL = silent                                                   */
    void *log_user;           /* passed to log_fn; NULL is fine                                  */
    es_log_level log_level;   /* messages above this level are dropped; 0 = ES_LOG_DEFAULT      */
    const es_allocator *allocator; /* NULL = C library; must outlive the model                   */
    es_progress_fn progress_fn;    /* NULL = none                                                */
    void *progress_user;      /* passed to progress_fn; NULL is fine                             */
    uint64_t reserved[8];     /* zero; room for later fields (ABI, at the top)               */
} es_model_params;

/* The zeroed struct (all defaults); kept for source compatibility. */
ES_API es_model_params es_model_default_params(void);

/* Loads and validates path. On success *out owns the mapping; free with es_model_free(). The model
 * must outlive every context, backend upload and speculation object made from it. */
ES_API es_status es_model_load(const char *path, const es_model_params *params, es_model **out);
ES_API void es_model_free(es_model *model);
ES_API const char *es_model_errmsg(const es_model *model);

/* ---------------------------------------------------------------------------------------------
 * Quantisation (`edgespec quantize`): a GGUF model file rewritten with every 2-D "*.weight"
 * tensor in another type, through f32, with ggml's importance-free reference quantisers. Keys and
 * other tensors (norms) are copied; general.file_type is set as llama.cpp sets it. The input's
 * matrices must be f32, f16 or bf16 (a quantised file is refused rather than rounded twice); a
 * matrix whose rows are not whole blocks of the type is stored as q8_0 (rows of 32) or f16, with a
 * warning through log_fn. The output is built in host memory (about its own size) and written at
 * the end, so a failure or a cancel leaves no partial file behind unless writing itself fails.
 */
typedef struct es_quantize_params {
    es_log_fn log_fn;              /* NULL = silent                                               */
    void *log_user;                /* passed to log_fn; NULL is fine                              */
    es_log_level log_level;        /* messages above this level are dropped; 0 = ES_LOG_DEFAULT  */
    const es_allocator *allocator; /* NULL = C library                                            */
    es_progress_fn progress_fn;    /* after each tensor, fraction of the input's tensor bytes done;
                                      NULL = none                                                 */
    void *progress_user;           /* passed to progress_fn; NULL is fine                         */
    uint64_t reserved[8];          /* zero; room for later fields (ABI, at the top)              */
} es_quantize_params;

/* The zeroed struct (all defaults). */
ES_API es_quantize_params es_quantize_default_params(void);

/* Writes in_path's model to out_path with its weight matrices in type ("q4_K", "q5_K", "q6_K",
 * "q3_K", "q2_K", "iq4_nl", "iq4_xs", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "bf16", "f16" or "f32"),
 * or in llama.cpp's mix "q4_K_M" or "q5_K_M" (the output head, and attn_v and ffn_down in some
 * layers, in q6_K; docs/formats.md). params may be NULL. Errors: es_last_error(). */
ES_API es_status es_quantize(const char *in_path, const char *out_path, const char *type,
                             const es_quantize_params *params);

/* Attaches the Speculative Streaming adapter GGUF at path (DESIGN.md "Formats": stream identifier
 * embeddings, tree-pruning adapter, optional stream-only LoRA) to model, after checking its keys
 * and every tensor's type and shape against the model. Its tensors are copied (a few hundred KB
 * at most) and freed by es_model_free(). This is the one call that changes a loaded model: make
 * it before any context is created from the model, while no other thread uses it. A model holds
 * at most one adapter. On failure the model is unchanged and es_model_errmsg(model) says what
 * was wrong and where. */
ES_API es_status es_model_load_adapter(es_model *model, const char *path);

typedef enum es_rope_type {
    ES_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama.cpp's "llama" ordering */
    ES_ROPE_NEOX = 1, /* rotate halves (x[i], x[i + rot/2])                                    */
} es_rope_type;

typedef enum es_tokenizer_type {
    ES_TOKENIZER_NONE = 0,
    ES_TOKENIZER_LLAMA = 1, /* SentencePiece BPE with scores and byte fallback */
    ES_TOKENIZER_GPT2 = 2,  /* byte-level BPE with merges                      */
} es_tokenizer_type;

typedef struct es_model_info {
    const char *architecture;   /* general.architecture, e.g. "llama"; owned by the model */
    const char *name;           /* general.name or ""                                     */
    const char *path;           /* the file it was loaded from; owned by the model        */
    uint32_t gguf_version;
    int32_t n_vocab;
    int32_t n_ctx_train;        /* tokens                                                 */
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t n_ff;
    int32_t head_dim;
    int32_t n_rot;              /* rotary dimensions per head                             */
    float rope_freq_base;
    float rope_freq_scale;
    float rms_norm_eps;
    es_rope_type rope_type;
    bool tied_output;           /* output head shares token_embd.weight                   */
    bool has_weights;           /* false for vocab-only files                             */
    es_tokenizer_type tokenizer;
    const char *tokenizer_pre;  /* tokenizer.ggml.pre or "default"                        */
    int32_t bos_id, eos_id;     /* -1 if absent                                           */
    uint64_t n_params;          /* parameters in weight tensors                           */
    uint64_t weight_bytes;      /* bytes of weight tensor data                            */
    int32_t n_tensors;
    bool has_ss_adapter;        /* a Speculative Streaming adapter is attached             */
    const char *rope_scaling;   /* how positions past the training context are reached: "none",
                                   "linear", "yarn", "longrope" (phi3's rope_factors_*) or
                                   "freqs" (llama 3's rope_freqs.weight); static text     */
    int32_t rope_n_ctx_orig;    /* the context the scaling extends (n_ctx_train if none)  */
    float rope_attn_factor;     /* the file's rope.scaling.attn_factor (1 = none): cos and sin
                                   times it, on top of YaRN's own magnitude scale          */
    uint64_t reserved[6];     /* written as zero; room for later fields (ABI, at the top)    */
} es_model_info;

ES_API es_status es_model_get_info(const es_model *model, es_model_info *out);

typedef struct es_tensor_info {
    const char *name;   /* owned by the model */
    const char *type;   /* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K" ... "q6_K", "iq4_nl", "iq4_xs" */
    int32_t n_dims;
    int64_t ne[4];      /* ne[0] is the contiguous dimension (GGUF order) */
    uint64_t offset;    /* file offset of the data */
    uint64_t nbytes;
    uint64_t reserved[8];     /* written as zero; room for later fields (ABI, at the top)    */
} es_tensor_info;

ES_API es_status es_model_tensor_info(const es_model *model, int32_t index, es_tensor_info *out);

/* Reads a metadata value as text (numbers formatted, arrays summarised). */
ES_API es_status es_model_meta_str(const es_model *model, const char *key, char *buf, size_t buf_size);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer (part of the model; thread-safe).
 */

/* Encodes text (len bytes, need not be NUL-terminated). add_bos follows the model's
 * tokenizer.ggml.add_bos_token when add_special is true; parse_special lets control-token text
 * like "<s>" map to its id. If cap is too small returns ES_ERR_BUFFER_TOO_SMALL and sets *n_tokens
 * to the count needed (tokens is then untouched; cap 0 with tokens NULL just counts).
 * Any bytes are accepted: those that are not valid UTF-8 become byte tokens (the unknown token
 * where the vocabulary has none), so decoding gives them back. User-defined tokens are matched in
 * the text whatever parse_special (as llama.cpp and Hugging Face match added tokens); where
 * special tokens overlap, the leftmost, then the longest, wins. Errors are reported through
 * es_last_error() (the model is shared, so its own message is not touched). */
ES_API es_status es_tokenize(const es_model *model, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t *tokens, size_t cap, size_t *n_tokens);

/* The text of one token as it appears in decoded output (byte tokens give their byte; control
 * and unused tokens give "" and the unknown token U+FFFD, unless render_special). *len gets the byte count; ES_ERR_BUFFER_TOO_SMALL sets
 * *len to the size needed. Output is not NUL-terminated. */
ES_API es_status es_token_to_piece(const es_model *model, int32_t token, bool render_special,
                                   char *buf, size_t buf_size, size_t *len);

/* Decodes a token sequence to text. For llama vocabularies the leading space the encoder adds is
 * removed when remove_leading_space (one space, at the start of the text). Output is
 * NUL-terminated when it fits; *len excludes the NUL. For SentencePiece (llama) vocabularies a
 * U+2581 in encoded text decodes as a space; otherwise encoding then decoding gives the text back. */
ES_API es_status es_detokenize(const es_model *model, const int32_t *tokens, size_t n_tokens,
                               bool remove_leading_space, bool render_special, char *buf,
                               size_t buf_size, size_t *len);

ES_API bool es_token_is_eog(const es_model *model, int32_t token); /* end of generation */

/* ---------------------------------------------------------------------------------------------
 * Chat templates: a conversation as the prompt text a chat model was trained on. The families
 * below are recognised from the model's tokenizer.chat_template (a Jinja program, not run) by the
 * markers they write; a model without one gets the plain template (turns as lines of text).
 */
typedef enum es_chat_template {
    ES_CHAT_PLAIN = 0,   /* each message's content and a newline                                */
    ES_CHAT_LLAMA2 = 1,  /* <s>[INST] <<SYS>>..<</SYS>> user [/INST] answer </s>                   */
    ES_CHAT_LLAMA3 = 2,  /* <|start_header_id|>role<|end_header_id|> ... <|eot_id|>                */
    ES_CHAT_CHATML = 3,  /* <|im_start|>role ... <|im_end|> (Qwen, SmolLM, ...)                     */
    ES_CHAT_PHI3 = 4,    /* <|role|> ... <|end|>                                                   */
    ES_CHAT_GEMMA = 5,   /* <start_of_turn>user|model ... <end_of_turn>; system joins the first user turn */
    ES_CHAT_MISTRAL = 6, /* <s>[INST] user [/INST]answer</s>; system joins the first user turn     */
} es_chat_template;

typedef struct es_chat_message {
    const char *role;    /* "system", "user" or "assistant"                                     */
    const char *content; /* NUL-terminated text                                                  */
} es_chat_message;

/* The model's template: ES_CHAT_PLAIN when it has none, ES_ERR_UNSUPPORTED naming the template's
 * start when it is none of the known families (name one with es_chat_template_from_name). */
ES_API es_status es_chat_template_detect(const es_model *model, es_chat_template *out);
/* "plain", "llama2", "llama3", "chatml", "phi3", "gemma", "mistral": the caller's override. */
ES_API es_status es_chat_template_from_name(const char *name, es_chat_template *out);
ES_API const char *es_chat_template_name(es_chat_template t);
/* The text a model of this family writes to end its turn ("<|im_end|>", "<|eot_id|>", ...; "" for
 * plain): a stop string for generation, where the vocabulary does not already mark it as an
 * end-of-generation token. Static text. */
ES_API const char *es_chat_end_of_turn(es_chat_template t);
/* Renders n_messages messages, then (add_assistant) the opening of the assistant's turn, into buf
 * (NUL-terminated). *len gets the length without the NUL; ES_ERR_BUFFER_TOO_SMALL when buf_size
 * <= *len (buf NULL with buf_size 0 just measures). The text spells control tokens and, where the
 * family has one, the BOS: tokenize it with add_special = false and parse_special = true. */
ES_API es_status es_chat_render(es_chat_template t, const es_chat_message *messages, size_t n_messages,
                                bool add_assistant, char *buf, size_t buf_size, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * Backend: where forward passes run. CPU (reference, multithreaded) or Vulkan on one device.
 * A backend uploads or maps a model's weights on first use and shares them among its contexts;
 * it must outlive them. Contexts on one backend may be created, used and freed on different
 * threads at the same time: the backend serialises their calls (one forward call at a time per
 * backend; use one backend per thread for parallel forward calls). es_backend_get_stats and
 * es_backend_profile may be called meanwhile; es_backend_errmsg is the last failure of any of
 * them (a context's own message, es_context_errmsg, says which call failed).
 */
typedef struct es_backend es_backend;

typedef enum es_backend_type {
    ES_BACKEND_CPU = 0,
    ES_BACKEND_VULKAN = 1,
} es_backend_type;

/* ES_VK_* bits for es_backend_params.vk_flags (es_vk_flags_parse reads them from their names, in
 * quotes below). They force the fallback path of each optional device feature so the fallbacks can
 * be tested on a device that has the feature; results stay within the per-op error bounds, and
 * each configuration is batch-invariant on its own. */
#define ES_VK_NO_STORAGE16    0x01u /* "no-storage16": f16 weights unpacked from 32-bit words        */
#define ES_VK_NO_STORAGE8     0x02u /* "no-storage8": Q8_0 quants unpacked from 32-bit words          */
#define ES_VK_NO_FP16         0x04u /* "no-fp16": no shaderFloat16 arithmetic                         */
#define ES_VK_NO_SUBGROUP     0x08u /* "no-subgroup": reductions through shared memory               */
#define ES_VK_NO_INT_DOT      0x10u /* "no-int-dot": no integer dot product instructions             */
#define ES_VK_STORAGE_BUFFERS 0x20u /* "storage-buffers": read weights and activations through
                                       storage buffers instead of texel buffers                      */
#define ES_VK_TEXEL_BUFFERS   0x40u /* "texel-buffers": insist on texel buffers; backend creation
                                       fails on a device that cannot                                 */
#define ES_VK_FALLBACKS       0x3fu /* "fallbacks": every fallback at once                           */

/* Parses names, a list of the ES_VK_* names above and numbers (16, 0x10) separated by commas or
 * spaces ("fallbacks", "no-subgroup,storage-buffers", "0x10"), into the bits they OR to,
 * so that applications and tools offer the same names. NULL or "" gives 0. An unknown name is
 * ES_ERR_INVALID_ARGUMENT with a message that lists the known ones; *flags is then untouched.
 * Plain string parsing: it works in a build without Vulkan too. */
ES_API es_status es_vk_flags_parse(const char *names, uint32_t *flags);

/* Vulkan choices that are measurements, not facts about a device: each is taken from the
 * device's profile (by device type: lavapipe's measured values for CPU devices, a table for
 * GPUs; docs/perf.md) unless set here. Results never depend on them, only speed. */
typedef struct es_vk_tuning {
    int32_t fused_stream_rows; /* Speculative Streaming: the most rows, tree tokens x (1 + streams),
                                  whose streams ride in the forward's own dispatches instead of a
                                  stream pass after it; 0 = measured by each context (which is
                                  faster on this device, for trees of up to 8 tokens), -1 = never */
    int32_t solo_row_elements; /* weight rows shorter than this many elements are walked by one
                                  invocation instead of a subgroup; 0 = the profile's, -1 = never */
    uint64_t reserved[8];     /* zero; room for later fields (ABI, at the top)               */
} es_vk_tuning;

#define ES_MAX_THREADS 1024   /* the most CPU worker threads a backend takes                */

typedef struct es_backend_params {
    es_backend_type type;     /* 0 = ES_BACKEND_CPU                                              */
    int32_t n_threads;        /* CPU worker threads, 1..ES_MAX_THREADS; 0 = number of online
                                 processors (at most ES_MAX_THREADS)                            */
    bool cpu_weights_in_place; /* CPU: false (0) = copy the matrices decoding streams into
                                  huge-page memory at upload (faster decode; the mapped pages are
                                  released, so resident memory does not double); true = read
                                  them in place from the model's memory                         */
    const char *device;       /* Vulkan: index, name substring or type ("discrete", "integrated",
                                 "cpu"); NULL or "" = the default device (es_device_info.is_default).
                                 es_backends_create reads it as a comma-separated list (below) */
    uint32_t vk_flags;        /* ES_VK_* bits forcing fallback paths; 0 = use what the device has */
    es_vk_tuning vk_tuning;   /* Vulkan: per-device tuning; zeroed = the device's profile       */
    const char *pipeline_cache_path; /* Vulkan pipeline cache file; NULL or "" = none          */
    bool profile;             /* true = collect per-op device timings (es_backend_profile);
                                 false = none                                                   */
    es_log_fn log_fn;         /* NULL = silent                                                   */
    void *log_user;           /* passed to log_fn; NULL is fine                                  */
    es_log_level log_level;   /* messages above this level are dropped; 0 = ES_LOG_DEFAULT      */
    const es_allocator *allocator; /* NULL = C library; must outlive the backend                 */
    es_progress_fn progress_fn; /* weight upload progress; NULL = none                           */
    void *progress_user;      /* passed to progress_fn; NULL is fine                             */
    uint64_t reserved[8];     /* zero; room for later fields (ABI, at the top)               */
} es_backend_params;

/* The zeroed struct (all defaults); kept for source compatibility. */
ES_API es_backend_params es_backend_default_params(void);
ES_API es_status es_backend_create(const es_backend_params *params, es_backend **out);
ES_API void es_backend_free(es_backend *backend);
ES_API const char *es_backend_errmsg(const es_backend *backend);
ES_API const char *es_backend_name(const es_backend *backend); /* "cpu" or the Vulkan device name */

/* Counters and device memory of a backend since creation (or the last es_backend_profile_reset
 * for the counters). Fields a backend does not track are 0. */
typedef struct es_backend_stats {
    uint64_t n_forward;          /* forward calls                                                */
    uint64_t n_submits;          /* Vulkan queue submissions (all of them, uploads included)     */
    uint64_t n_forward_submits;  /* queue submissions made by forward calls                      */
    uint64_t n_dispatches;       /* compute dispatches executed by forward calls                 */
    uint64_t device_bytes;       /* device memory allocated now: weights, KV caches, scratch    */
    uint64_t device_peak_bytes;  /* the most device memory allocated at once                     */
    uint64_t weight_bytes;       /* device memory holding weights                                */
    uint64_t validation_messages;/* messages from the Khronos validation layer (Debug switches) */
    uint64_t reserved[8];     /* written as zero; room for later fields (ABI, at the top)    */
} es_backend_stats;

ES_API es_status es_backend_get_stats(const es_backend *backend, es_backend_stats *out);

/* Per-op device time, collected when es_backend_params.profile is set (Vulkan: timestamp
 * queries around every dispatch). op points at static text. */
typedef struct es_profile_entry {
    const char *op;              /* "mul_mat", "attention", ...                                  */
    uint64_t calls;              /* dispatches                                                   */
    double ms;                   /* total device time                                            */
    uint64_t reserved[8];     /* written as zero; room for later fields (ABI, at the top)    */
} es_profile_entry;

/* Copies up to cap entries (the ops seen so far, in first-seen order) and sets *n to how many
 * exist; ES_ERR_BUFFER_TOO_SMALL when cap < *n (the first cap are still written). */
ES_API es_status es_backend_profile(const es_backend *backend, es_profile_entry *entries, size_t cap,
                                    size_t *n);
/* Clears the profile and the counters of es_backend_stats (not the memory figures). */
ES_API void es_backend_profile_reset(es_backend *backend);

/* A Vulkan physical device and the optional features edgespec uses. */
typedef struct es_device_info {
    int32_t index;               /* what es_backend_params.device = "N" selects                  */
    char name[256];
    const char *type;            /* "discrete", "integrated", "virtual", "cpu" or "other" (static) */
    uint32_t api_version;        /* VK_MAKE_API_VERSION layout                                   */
    uint32_t vendor_id, device_id;
    uint64_t device_local_bytes; /* sum of device-local heaps                                    */
    uint32_t subgroup_size;
    bool storage16, storage8, fp16, subgroup_arith, int_dot;
    bool texel_buffers;          /* the texel formats and sizes the kernels read through        */
    uint64_t max_storage_buffer_range;
    uint32_t max_texel_buffer_elements;
    bool is_default;             /* the device an empty selector picks                           */
    bool host_import;            /* imports host memory (VK_EXT_external_memory_host): two such
                                    devices share rows with no copy between them (link.c)       */
    uint64_t reserved[8];     /* written as zero; room for later fields (ABI, at the top)    */
} es_device_info;

/* Lists the Vulkan devices into out[cap] and sets *n to their count (out may be NULL to count).
 * ES_ERR_UNSUPPORTED in a build without Vulkan, and where no Vulkan loader can be opened (the
 * library opens libvulkan at run time and does not need it to load: es_last_error() then says
 * "no Vulkan loader found" and names the libraries tried); creating an ES_BACKEND_VULKAN backend
 * fails the same way there, and ES_BACKEND_CPU works. ES_ERR_BUFFER_TOO_SMALL when cap < *n. */
ES_API es_status es_vulkan_devices(es_device_info *out, size_t cap, size_t *n);

/* ---------------------------------------------------------------------------------------------
 * Several devices. An es_backend is one device: each Vulkan backend has a VkInstance and a
 * logical VkDevice of its own (its queue, memory, pipelines, its own upload of a model's weights
 * and its own es_backend_stats), so two backends on the same physical device are two logical
 * devices, independent of each other; the CPU backend counts as one device too. Contexts on
 * different backends run at the same time on different threads. Multi-device strategies take
 * an array of backends; es_backends_create makes one from a device list.
 */
#define ES_MAX_DEVICES 8   /* the most entries of a device list */

/* Creates one backend per entry of params->device read as a device list: entries separated by
 * commas (blanks around them ignored), each a Vulkan selector as for es_backend_create (index,
 * type or name substring; a name containing a comma cannot be selected here) or "host" for the
 * CPU backend. "0,1": physical devices 0 and 1; "0,0": two logical devices on device 0 (what a
 * machine with one device, lavapipe for one, offers); "0,host": device 0 and the CPU backend.
 * Every other field of params applies to each backend (n_threads to the CPU ones); entries other
 * than "host" need params->type ES_BACKEND_VULKAN. NULL or "" is one backend of params->type on
 * its default device. Writes the backends to out[0..*n), the caller frees each with
 * es_backend_free. ES_ERR_INVALID_ARGUMENT for an empty entry ("0,,1", a trailing comma), more
 * than ES_MAX_DEVICES entries, or a device that does not exist (es_last_error names the entry);
 * ES_ERR_BUFFER_TOO_SMALL when cap is below the entries (*n says how many). On failure nothing
 * is left created, out[0..cap) are NULL and *n is 0 unless the buffer was too small. */
ES_API es_status es_backends_create(const es_backend_params *params, es_backend **out, size_t cap, size_t *n);

/* ---------------------------------------------------------------------------------------------
 * Context: a KV cache and scratch memory for one sequence on one backend.
 */
typedef struct es_context es_context;

typedef struct es_context_params {
    int32_t n_ctx;            /* tokens of KV cache; 0 = the model's n_ctx_train capped at 4096 */
    int32_t n_batch;          /* most tokens one forward call may take; 0 = 512                */
    es_backend *backend;      /* NULL = a private CPU backend with default params (and this
                                 struct's log and allocator), freed with the context            */
    es_log_fn log_fn;         /* NULL = silent                                                   */
    void *log_user;           /* passed to log_fn; NULL is fine                                  */
    es_log_level log_level;   /* messages above this level are dropped; 0 = ES_LOG_DEFAULT      */
    const es_allocator *allocator; /* NULL = C library; must outlive the context                 */
    uint64_t reserved[8];     /* zero; room for later fields (ABI, at the top)               */
} es_context_params;

/* The zeroed struct (all defaults); kept for source compatibility. */
ES_API es_context_params es_context_default_params(void);

/* Creates a context for model on params->backend. The model and the backend must outlive it;
 * free with es_context_free(). */
ES_API es_status es_context_create(const es_model *model, const es_context_params *params,
                                   es_context **out);
ES_API void es_context_free(es_context *ctx);
ES_API const char *es_context_errmsg(const es_context *ctx);

ES_API int32_t es_context_n_ctx(const es_context *ctx);
ES_API int32_t es_context_n_past(const es_context *ctx);   /* committed tokens in the KV cache */
ES_API const es_model *es_context_model(const es_context *ctx);

/* Asks the forward call running on ctx to stop: cooperative cancellation, never a thread kill.
 * The one context call that may be made from any thread while another thread uses ctx (ctx must
 * stay valid during it). The request is taken at ctx's next check: between layers (CPU: before
 * each layer) or before each queue submission (Vulkan: a plain forward is one submission, a
 * pruning call two) of a running es_forward, else at the start of the next es_forward on ctx.
 * The forward call that takes it fails with ES_ERR_CANCELLED and clears the request; the context
 * stays usable: its committed tokens are intact and the provisional batch (the last forward's
 * uncommitted tokens) is dropped. So a request made while no forward runs cancels the next one;
 * no other call takes or clears a request. A generation whose forward call is cancelled fails with
 * ES_ERR_CANCELLED: es_generate then leaves ctx as before the call; a speculative step changes
 * nothing and es_spec_generate keeps the tokens it handed out (the sequence ends with them).
 * ES_SPEC_DSI also cancels its workers' calls to preempt work, with requests of its own that it
 * tells apart from the application's: a request on the speculation's context or on its draft
 * context ends a DSI generation as it ends the others. */
ES_API void es_context_abort(es_context *ctx);

/* A batch of n tokens for one forward call. Positions and DFS intervals place each token in a
 * token tree: token j may attend to in-batch token i iff dfs_start[i] <= dfs_start[j] and
 * dfs_end[j] <= dfs_end[i]; every token attends to the committed KV [0, n_past). Prefill is a
 * chain, plain decoding a single node, verification a tree: one call serves all three. */
typedef struct es_batch {
    int32_t n_tokens;
    const int32_t *tokens;    /* [n_tokens]                                                    */
    const int32_t *pos;       /* [n_tokens] absolute positions; NULL = n_past + i (a chain)    */
    const int32_t *dfs_start; /* [n_tokens] DFS entry time; NULL (with dfs_end) = a chain      */
    const int32_t *dfs_end;   /* [n_tokens] last DFS entry time inside the token's subtree     */
    const uint8_t *logits;    /* [n_tokens] nonzero = return this token's logits; NULL = last  */
} es_batch;

/* Runs the model on batch. The batch's keys and values are held provisionally in the cache slots
 * [n_past, n_past + n_tokens) until es_commit(); a later forward call without a commit replaces
 * them. On failure the context is as before the call. */
ES_API es_status es_forward(es_context *ctx, const es_batch *batch);

/* The logits (n_vocab floats) of batch token i of the last forward call; owned by the context,
 * valid until the next forward call. ES_ERR_INVALID_ARGUMENT if token i's logits were not asked. */
ES_API es_status es_logits(es_context *ctx, int32_t i, const float **logits);

/* Keeps the provisional KV of the listed batch tokens (indices into the last batch, in ascending
 * order, forming a root-to-node path of consecutive positions n_past, n_past+1, ...), compacted to
 * [n_past, n_past + n_keep); the rest is dropped. keep = NULL keeps the whole batch (a chain). */
ES_API es_status es_commit(es_context *ctx, const int32_t *keep, int32_t n_keep);

/* Drops committed tokens from the end: n_past becomes new_n_past (<= n_past). */
ES_API es_status es_truncate(es_context *ctx, int32_t new_n_past);

/* Context shift: drops the committed tokens [n_keep, n_keep + n_discard) and moves the ones after
 * them down, their keys re-rotated to their new positions (RoPE's rotations compose) instead of
 * recomputed, so a full context can go on: n_past becomes n_past - n_discard. The kept tokens'
 * keys and values still carry what they attended to before the shift (as in llama.cpp); outputs
 * then differ from a fresh prefill of the shorter sequence, as they would after any truncation of
 * history. A later call samples at the new positions. Provisional results are dropped. On a
 * backend failure the context keeps its first n_keep tokens only. */
ES_API es_status es_context_shift(es_context *ctx, int32_t n_keep, int32_t n_discard);

/* Session files (docs/formats.md): the committed tokens (tokens[0..n_tokens), which must be the
 * n_past tokens the cache holds: the context does not keep them itself) and the KV cache, so an
 * application restarts a conversation without reading it again. The file names the model by a
 * fingerprint of its shapes, tensors and samples of their bytes, and ends with a checksum. */
ES_API es_status es_context_save(es_context *ctx, const int32_t *tokens, size_t n_tokens, const char *path);
/* Replaces ctx's committed tokens with a session file's and writes them to tokens[cap]; the next
 * forward continues after them. A file of another model, a truncated or corrupt one, or one that
 * does not fit n_ctx fails with a message naming what, and ctx is as before; so is ctx after
 * ES_ERR_BUFFER_TOO_SMALL, which sets *n_tokens to the count needed. The reloaded cache is the saved
 * one bit for bit, on the backend that saved it or another (the values are f32 either way). */
ES_API es_status es_context_load(es_context *ctx, const char *path, int32_t *tokens, size_t cap,
                                 size_t *n_tokens);

/* Replaces dst's committed tokens with src's: the KV cache of src's n_past committed tokens is
 * copied into dst through host memory, and dst's n_past becomes src's (dst's provisional tokens
 * are dropped; src is not changed). For replicating a sequence on another device after one
 * prefill: the contexts may be on any two backends (CPU and Vulkan, two Vulkan devices, two
 * logical devices on one); the model must be the same (the same es_model or the same file
 * loaded twice). The cache's values move as they are (f32), so on backends that compute alike
 * dst goes on exactly as src would. Both contexts are used by the calling thread for the call;
 * it takes each backend's lock in turn, never both. ES_ERR_CONTEXT_FULL when dst's n_ctx is
 * below src's n_past; when reading src fails dst is unchanged, when writing dst fails dst is
 * left empty (n_past 0). */
ES_API es_status es_context_kv_copy(es_context *dst, es_context *src);

/* Lays out a token tree given by parent links for es_batch: parent[i] is the index of node i's
 * parent or -1 for a root (nodes in any order; several roots make a forest). Writes, per batch
 * row r, order[r] (the node placed there: a depth-first pre-order in which siblings keep their
 * index order), pos[r] = n_past + depth, and the DFS interval dfs_start[r] = r, dfs_end[r] (last
 * row of the subtree). All arrays have n entries. Fails with ES_ERR_INVALID_TREE naming the node
 * for a parent outside [-1, n), a node that is its own ancestor (a cycle), or n < 1, and with
 * ES_ERR_INVALID_ARGUMENT for a NULL array or an n_past < 0 (or n_past + n past INT32_MAX);
 * outputs are then untouched. */
ES_API es_status es_tree_flatten(const int32_t *parent, int32_t n, int32_t n_past, int32_t *order,
                                 int32_t *pos, int32_t *dfs_start, int32_t *dfs_end);

/* ---------------------------------------------------------------------------------------------
 * Sampling. Stateless between calls apart from scratch memory: the random draw for a token is a
 * pure function of (seed, absolute position), so a run is reproducible and speculative strategies
 * reproduce plain sampling token for token.
 */
typedef struct es_sampler es_sampler;

/* The zero of every field is its default, and the defaults are greedy decoding with no filters
 * and no penalty. */
typedef struct es_sampler_params {
    float temperature;        /* >= 0; 0 = greedy (argmax, ties to the lowest id)               */
    int32_t top_k;            /* keep the k most likely; 0 = off                                */
    float top_p;              /* nucleus mass in [0, 1]; 0 = off (the same as 1)                */
    float min_p;              /* drop tokens below min_p * p_max, in [0, 1]; 0 = off            */
    float repeat_penalty;     /* >= 0: divide positive / multiply negative logits of recent tokens
                                 by it; 0 = off (the same as 1)                                 */
    int32_t repeat_last_n;    /* tokens of history the penalty looks at; 0 = 64, -1 = all (the
                                 penalty is off unless repeat_penalty is set)                   */
    uint64_t seed;            /* keys the position-indexed random stream; 0 is a seed like any */
    uint64_t reserved[8];     /* zero; room for later fields (ABI, at the top)               */
} es_sampler_params;

/* The zeroed struct (greedy decoding); kept for source compatibility. */
ES_API es_sampler_params es_sampler_default_params(void);
/* Creates a sampler for a vocabulary of n_vocab tokens; params are checked and copied. allocator
 * (NULL = C library) must outlive the sampler. Free with es_sampler_free(). */
ES_API es_status es_sampler_create(int32_t n_vocab, const es_sampler_params *params,
                                   const es_allocator *allocator, es_sampler **out);
ES_API void es_sampler_free(es_sampler *sampler);

/* Samples the token at absolute position pos (the KV slot the sampled token will occupy, i.e. the
 * context's n_past when plain decoding samples it) from logits[n_vocab]. history holds the preceding
 * tokens (for the repetition penalty). logits are not modified. The chain, in this fixed order:
 *   1. repetition penalty: each distinct token among the last repeat_last_n of history once:
 *      a positive logit is divided by repeat_penalty, a negative or zero one multiplied;
 *   2. temperature == 0 (or top_k == 1): the argmax, ties to the lowest id; done;
 *   3. temperature: logits / temperature, softmax relative to the best token (a token e^87 or
 *      more times less likely than the best gets probability 0);
 *   4. top-k: the k best (ties to the lower id);
 *   5. top-p: the smallest set of most likely tokens (ties to the lower id) whose mass >= top_p;
 *   6. min-p: drop tokens whose probability is below min_p times the best one's;
 *   7. draw u = es_sampler_uniform(seed, pos); the remaining tokens in ascending id order, each with
 *      its renormalised probability, tile [0, 1): the token whose tile holds u is returned.
 * NaN or +inf logits, an all -inf row, history ids outside the vocabulary and pos < 0 are
 * ES_ERR_INVALID_ARGUMENT. */
ES_API es_status es_sample(es_sampler *sampler, const float *logits, int64_t pos,
                           const int32_t *history, size_t n_history, int32_t *token);

/* The uniform draw in [0, 1) that sampling uses at position pos (exposed for verifiers): a pure
 * hash of (seed, pos), so positions may be drawn in any order. */
ES_API double es_sampler_uniform(uint64_t seed, int64_t pos);

/* ---------------------------------------------------------------------------------------------
 * Generation: plain autoregressive decoding with streaming output.
 */

/* Called for each generated token with its text piece (es_token_to_piece without special
 * rendering: control tokens give an empty piece; a multi-byte character may span pieces). The
 * piece is valid during the call only. Return false to stop. With stop strings, text that could
 * still begin one is held back until it cannot: a call's piece may then be empty or hold the text
 * of several tokens, and text still held when generation ends for another reason comes in one
 * last call with token -1. The text of a stop string and all after it is never handed out. */
typedef bool (*es_token_fn)(int32_t token, const char *piece, size_t len, void *user);

typedef struct es_generate_params {
    int32_t n_predict;        /* tokens to generate; 0 = until end of generation or n_ctx       */
    bool ignore_eog;          /* true = keep going past end-of-generation tokens; false = stop  */
    es_sampler_params sampling; /* zeroed = greedy decoding                                     */
    es_token_fn on_token;     /* NULL = none                                                     */
    void *user;               /* passed to on_token; NULL is fine                                */
    const char *const *stop;  /* [n_stop] NUL-terminated strings that end generation where the
                                 generated text contains one, matched across token boundaries and
                                 never handed out (below); NULL = none                            */
    size_t n_stop;            /* 0 = no stop strings                                             */
    double max_ms;            /* wall-time budget of generation (prompt excluded) in ms: the token
                                 handed out when it is spent is the last; 0 = none               */
    bool shift_context;       /* when the context is full: false (0) = stop; true = drop the older
                                 half of the tokens after the first n_keep (es_context_shift) and
                                 go on, so generation can run indefinitely; es_spec_generate
                                 shifts at the same moment by the same amount (es_spec_shift)   */
    int32_t n_keep;           /* tokens a shift keeps at the start (a system prompt); 0 = none  */
    uint64_t reserved[8];     /* zero; room for later fields (ABI, at the top)               */
} es_generate_params;

typedef struct es_generate_stats {
    int32_t n_prompt;         /* prompt tokens processed                                         */
    int32_t n_generated;      /* tokens produced (handed to on_token), the end token excluded     */
    double prompt_ms;         /* wall time of prompt processing, milliseconds                    */
    double decode_ms;         /* wall time of generation (sampling included), milliseconds       */
    int32_t n_forward_calls;  /* forward calls made during generation (prompt calls excluded)    */
    uint64_t reserved[8];     /* written as zero; room for later fields (ABI, at the top)    */
} es_generate_stats;

/* The zeroed struct (all defaults: greedy, no limit, no callback); kept for source compatibility. */
ES_API es_generate_params es_generate_default_params(void);

/* Feeds prompt (n_prompt >= 1 tokens, chunked by the context's n_batch, appended after its
 * committed tokens) and generates: each token is sampled with params->sampling at the position it
 * will occupy, handed to on_token, then forwarded and committed, so after the call the context
 * holds the prompt and the generated tokens and a later call continues the sequence. Stops after
 * n_predict tokens, at an end-of-generation token (not emitted, not committed, unless
 * ignore_eog), when on_token returns false (its token stays uncommitted), or when the context is
 * full (the last token, sampled from the last slot's logits, stays uncommitted). The repetition
 * penalty sees this call's prompt and generated tokens. tokens_out (may be NULL) receives the
 * first cap generated ids; stats (may be NULL) is filled on success and on failure. On failure the
 * context is truncated back to its committed tokens before the call. */
ES_API es_status es_generate(es_context *ctx, const int32_t *prompt, size_t n_prompt,
                             const es_generate_params *params, int32_t *tokens_out, size_t cap,
                             es_generate_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * Speculative decoding. A speculation object drives a context (the target model) and emits the
 * tokens plain decoding would, in fewer target forward calls: each step verifies a draft token
 * tree in one forward call, keeps the longest accepted root-to-node path plus the target's own
 * next token, and drops the rest of the tree's KV. Lossless: greedy decoding (temperature 0) and
 * seeded sampling emit token for token what es_generate emits with the same model, sampler params
 * and seed; rejection sampling emits the same distribution. One thread at a time.
 */
typedef struct es_spec es_spec;

typedef enum es_spec_strategy {
    ES_SPEC_STREAM = 0, /* Speculative Streaming: the target drafts with its own speculative streams
                           in the same forward call that verifies (needs es_model_load_adapter)   */
    ES_SPEC_DRAFT = 1,  /* draft-model speculative decoding (Leviathan et al.): a smaller model with
                           the same vocabulary drafts `lookahead` tokens, one call each             */
    ES_SPEC_DSI = 2,    /* distributed speculative inference (Timor et al., DSI): the draft model
                           (draft_ctx) drafts ahead on its own thread without waiting (without
                           draft_ctx: the target's own Speculative Streaming streams draft, in a
                           context of the target model that the object makes: one call drafts
                           the next token and the n_streams after it); every
                           `lookahead` drafts a pool of target servers (es_dsi_params), each on its
                           own thread and context, verifies them concurrently, while a target
                           call on the last decided token always runs (never slower than plain
                           decoding, on enough cores); work built on a rejected draft is
                           cancelled between layers (es_context_abort). The workers run between
                           es_spec_step calls too (at most a few blocks ahead); a feed, a rewind,
                           the end of es_spec_generate and es_spec_free stop them. The target
                           context needs n_batch and max_nodes >= lookahead + 2               */
} es_spec_strategy;

#define ES_SPEC_MAX_DEPTH 16 /* deepest draft level (γ, lookahead) */
#define ES_DSI_MAX_TARGETS 16 /* most DSI target servers */

/* ES_SPEC_DSI's target servers: server 0 is the context the speculation object decodes into;
 * each further one is a context of the same model that the object makes on a backend of its own
 * (a shared backend serialises its forward calls), so that they compute at the same time. Every
 * server must give the same logits bits as the target context's backend (the same backend type,
 * and for Vulkan the same device and flags), or greedy output may differ from plain decoding in a
 * near tie. The draft context should have a backend of its own too, for the same reason. The
 * target and draft contexts are driven from the worker threads (their log callbacks are called
 * there), which is why nothing else may use them while the object lives. */
typedef struct es_dsi_params {
    int32_t n_targets;             /* target servers, server 0 included, 1..ES_DSI_MAX_TARGETS;
                                      0 = ceil(T_target / (lookahead x T_draft)) (the paper's 3.1,
                                      "Preemption"), the latencies of one target and one draft call
                                      measured at the first es_spec_feed, at most max_targets     */
    int32_t max_targets;           /* cap on the measured default, 1..ES_DSI_MAX_TARGETS; 0 = as
                                      many as can compute at once: 1 + n_backends when backends
                                      are given, else on a CPU target the online processors less
                                      the drafter's (at least 1), else 1                          */
    es_backend *const *backends;   /* where servers 1.. run: server i on backends[(i - 1) %
                                      n_backends]; not owned, must outlive the object. NULL = a
                                      CPU target context gets one 1-thread CPU backend per server,
                                      made and freed by the object; a Vulkan one shares its own
                                      backend (correct, but its servers then take turns)           */
    int32_t n_backends;            /* entries of backends; 0 with backends NULL                    */
    uint64_t reserved[8];     /* zero; room for later fields (ABI, at the top)               */
} es_dsi_params;

typedef struct es_spec_params {
    es_spec_strategy strategy;  /* 0 = ES_SPEC_STREAM                                             */
    es_sampler_params sampling; /* the target's sampler; zeroed = greedy (hard matching)          */
    bool rejection_sampling;    /* temperature > 0: false = emit exactly what es_generate emits with
                                   the same seed; true = multi-candidate rejection sampling
                                   (SpecInfer): drafts sampled from the draft distribution, the same
                                   output distribution as plain sampling, other tokens             */
    int32_t n_streams;          /* stream: γ, streams that draft = tree depth, 1..the adapter's γ;
                                   dsi without draft_ctx: stream rows per drafter call;
                                   0 = the adapter's γ                                              */
    int32_t top_k;              /* stream: tokens drafted per stream; the tree has up to
                                   1 + k + k^2 + ... + k^γ nodes; 0 = 2                             */
    int32_t max_nodes;          /* most tree nodes per target call, root included; the most probable
                                   paths are kept; 0 = 32; always capped by the context's n_batch  */
    float prune_threshold;      /* stream: drop subtrees whose early-exit parent-to-child probability
                                   (paper 3.2.3) is below this; 0 = chosen from measured costs with
                                   adaptive trees where the adapter can prune (es_spec_costs says
                                   what), none with fixed trees; < 0 = no pruning                   */
    es_context *draft_ctx;      /* draft, dsi: a context of the draft model (same vocabulary, any
                                   backend); not owned; must outlive the object. dsi: NULL = the
                                   target's streams draft (needs es_model_load_adapter); their
                                   context gets a 1-thread CPU backend of its own on a CPU target,
                                   the target's backend on Vulkan                                   */
    int32_t lookahead;          /* draft: tokens drafted per step, 1..ES_SPEC_MAX_DEPTH; dsi: drafts
                                   per verification block, 1..ES_SPEC_MAX_DEPTH - 1; 0 = 4        */
    bool ignore_eog;            /* keep going past end-of-generation tokens; false (0) = a step
                                   emits nothing after one                                         */
    bool fixed_tree;            /* false (0): size each draft (tree nodes, drafted tokens) to the
                                   measured cost of the calls and the acceptance seen so far, up to
                                   the limits above, down to plain decoding when drafts do not pay;
                                   true: always draft up to the limits. Rejection sampling's tokens
                                   depend on the drafts: they repeat for a seed only with true
                                   (DSI: always fixed; its drafts are keyed by position, so
                                   rejection sampling repeats for a seed whatever the timing)     */
    es_dsi_params dsi;          /* dsi: the target servers; zeroed = the defaults there          */
    uint64_t reserved[8];     /* zero; room for later fields (ABI, at the top)               */
} es_spec_params;

/* What ES_SPEC_DSI's workers did (es_spec_stats.dsi), as of the end of the last step. */
typedef struct es_dsi_stats {
    int32_t n_targets;          /* target servers                                                  */
    double target_call_ms;      /* the latencies the default n_targets came from (0: not measured) */
    double draft_call_ms;
    int64_t n_jobs;             /* target forward calls started by the servers (verification jobs) */
    int64_t n_jobs_preempted;   /* of those, built on a draft that was rejected meanwhile (or still
                                   running at a quiesce): cancelled between layers, or their result
                                   dropped                                                          */
    int64_t n_draft_calls;      /* drafts made (a drafter forward call each, but with the streams
                                   drafting: one call makes up to n_streams + 1; prefills excluded) */
    int64_t n_drafts_dropped;   /* of those, whose prefix changed while they ran: the draft is lost */
    int64_t n_drafts_cut;       /* drafts published, then removed unverified by a rejection before
                                   them or by a quiesce                                             */
    double active_ms;           /* wall time the workers were running (from a step to a quiesce)   */
    double server_busy_ms[ES_DSI_MAX_TARGETS]; /* each server's time in forward calls; busy /
                                                  active_ms is its utilisation                     */
    double server_preempted_ms[ES_DSI_MAX_TARGETS]; /* of that, on preempted jobs              */
    double draft_busy_ms;       /* the drafter's time in forward calls                            */
    double draft_preempted_ms;  /* of that, on drafts that were dropped                           */
    uint64_t reserved[8];     /* written as zero; room for later fields (ABI, at the top)    */
} es_dsi_stats;

typedef struct es_spec_stats {
    int64_t n_prompt;           /* tokens given to es_spec_feed                                    */
    int64_t n_generated;        /* tokens emitted by es_spec_step                                  */
    int64_t n_target_calls;     /* target forward calls made by steps (one per step)               */
    int64_t n_draft_calls;      /* draft-model forward calls (ES_SPEC_DRAFT)                       */
    double tokens_per_call;     /* n_generated / n_target_calls: the call-reduction ratio against
                                   autoregressive decoding, which makes one call per token          */
    int64_t n_tree_nodes;       /* tree nodes sent to the target over all steps, roots included   */
    int64_t n_pruned;           /* of those, removed by tree pruning inside the forward call       */
    double mean_tree_size;      /* n_tree_nodes / n_target_calls                                   */
    int64_t drafted[ES_SPEC_MAX_DEPTH];  /* steps whose tree reached depth d + 1                  */
    int64_t accepted[ES_SPEC_MAX_DEPTH]; /* steps that accepted a draft token at depth d + 1      */
    double prompt_ms;           /* wall time in es_spec_feed                                       */
    double decode_ms;           /* wall time in es_spec_step                                       */
    double target_ms;           /* of decode_ms: target forward calls (stream logits included)     */
    double draft_ms;            /* of decode_ms: draft-model forward calls                         */
    es_dsi_stats dsi;           /* ES_SPEC_DSI only (zero otherwise). With DSI, n_target_calls and
                                   n_draft_calls count every call the workers made, target_ms and
                                   draft_ms their summed time (they overlap each other and the
                                   steps), and drafted / accepted the verified blocks             */
    uint64_t reserved[8];     /* written as zero; room for later fields (ABI, at the top)    */
} es_spec_stats;

/* What adaptive trees (es_spec_params.fixed_tree false, ES_SPEC_STREAM and ES_SPEC_DRAFT) measured
 * on this device and decide from (es_spec_get_costs): the calibration, timings of the first
 * es_spec_steps' own calls (a plain call, then an exploration: a one-node call with every stream
 * and its stream pass, or drafter calls, and a small tree), then a fit over the calls since.
 * No call is made only to measure. Timings only: they never change which tokens are emitted. */
typedef struct es_spec_costs {
    bool adaptive;              /* false: fixed trees (or DSI): nothing below is measured          */
    bool fitted;                /* the unit costs below are known                                   */
    /* the calibration in the first steps, in ms (0: not yet timed: no step yet, fixed trees, DSI,
     * no room for a tree) */
    double calibrate_ms;        /* time spent on calls made only to measure: 0 (none are, since the
                                   calibration times decoding calls; kept for the ABI)            */
    double calib_plain_ms;      /* a plain one-token call of the target                           */
    double calib_one_ms;        /* a one-node call as the strategy makes it (with its streams)     */
    int32_t calib_n_hi;         /* a call of this many nodes ...                                   */
    double calib_hi_ms;         /* ... took this                                                   */
    int32_t calib_g_hi;         /* a stream pass of this many streams (0: none) ...               */
    double calib_pass1_ms;      /* (a pass of one stream: 0, not timed)                           */
    double calib_pass_hi_ms;
    double calib_draft_ms;      /* a draft-model call, the fastest timed (0: no drafter)          */
    /* as of the last step: the fit, in units of a plain one-token call of the target */
    double call_ms;             /* that call, in ms                                                */
    double node;                /* what one more tree node adds to a call                          */
    double stream_pass_1;       /* a stream pass of one stream (0: no streams)                     */
    double stream_pass_max;     /* a stream pass of max_streams streams                            */
    int32_t max_streams;        /* the widest stream pass timed                                    */
    double draft_call;          /* a draft-model call (0: no drafter)                              */
    int32_t explore_every;      /* calls between explorations (drafting whatever the costs say, to
                                   keep its worth measured), from their measured cost              */
    /* tree pruning (Speculative Streaming): the threshold the last call of a tree ran with (chosen
     * from measured costs when es_spec_params.prune_threshold is 0 on adaptive trees, the smallest
     * candidate on the calls that measure), and what its choice rests on, in plain calls (0:
     * not measured yet) */
    double prune_threshold;
    double prune_call;          /* what a pruning call adds (the early exit, a second submission) */
    double prune_node;          /* what a pruned node saves                                        */
    uint64_t reserved[5];       /* written as zero; room for later fields (ABI, at the top)       */
} es_spec_costs;

/* The zeroed struct (all defaults: Speculative Streaming with the adapter's γ, greedy, adaptive
 * trees); kept for source compatibility. es_spec_get_params says what the defaults resolved to. */
ES_API es_spec_params es_spec_default_params(void);

/* Creates a speculation object that decodes into ctx, starting a new sequence: ctx's (and
 * draft_ctx's) committed tokens are dropped. It does not own the contexts: they (and their
 * models) must outlive it, and nothing else should drive them while it lives. Free with
 * es_spec_free(). */
ES_API es_status es_spec_create(es_context *ctx, const es_spec_params *params, es_spec **out);
ES_API void es_spec_free(es_spec *spec);
ES_API const char *es_spec_errmsg(const es_spec *spec);

/* Appends n_tokens >= 1 tokens (a prompt, or a later user turn) to the sequence and processes
 * them in chunks of n_batch. The next step continues after the last one. */
ES_API es_status es_spec_feed(es_spec *spec, const int32_t *tokens, size_t n_tokens);

/* One speculation step: one target forward call (plus the drafter's calls). Writes the newly
 * decided tokens, 1..cap of them (at most the tree depth + 1), to tokens and their count to
 * *n_tokens. Needs a prior es_spec_feed. ES_ERR_CONTEXT_FULL when the context has no room. */
ES_API es_status es_spec_step(es_spec *spec, int32_t *tokens, size_t cap, size_t *n_tokens);

/* Statistics since es_spec_create (a function named es_spec_stats would clash with the type). */
ES_API es_status es_spec_get_stats(const es_spec *spec, es_spec_stats *out);

/* What adaptive trees measured and decide from (es_spec_costs), as of the last step. */
ES_API es_status es_spec_get_costs(const es_spec *spec, es_spec_costs *out);

/* The parameters the object runs with: those given, every 0 that means a default replaced by
 * the value it stands for (n_streams the adapter's γ, top_k 2, max_nodes 32, lookahead 4; DSI:
 * dsi.max_targets, and dsi.n_targets once measured, at the first es_spec_feed). */
ES_API es_status es_spec_get_params(const es_spec *spec, es_spec_params *out);

/* The sequence's length: the tokens fed and emitted, minus those taken back or shifted out. The
 * last emitted token is decided but its keys and values are computed by the next step, so the
 * target context holds one token fewer. */
ES_API size_t es_spec_n_tokens(const es_spec *spec);
/* Keeps the first n_tokens of the sequence (0 = start a new one), the contexts cut back with it:
 * a chat that edits its history, or a caller taking back tokens. The next es_spec_feed continues
 * after them. */
ES_API es_status es_spec_truncate(es_spec *spec, size_t n_tokens);
/* Takes up a sequence the target context already holds all but the last token of (one restored
 * with es_context_load from a session saved as es_context_save(ctx, tokens, n_tokens - 1)): the
 * sequence becomes tokens[0..n_tokens), the last one read by the next step; a draft model's
 * context re-reads the sequence. The context's tokens are the caller's word: they are not
 * checked against tokens beyond their count. */
ES_API es_status es_spec_resume(es_spec *spec, const int32_t *tokens, size_t n_tokens);
/* es_context_shift for the sequence: drops its tokens [n_keep, n_keep + n_discard), which must lie
 * in the target's cache, and moves the rest down (the target's keys re-rotated; a draft model's
 * context re-reads what follows n_keep). The last token, not in the cache yet, is read at its new
 * position by the next step: decoding then emits what es_generate emits on a context that held
 * all but that token, was shifted alike and then read it. */
ES_API es_status es_spec_shift(es_spec *spec, int32_t n_keep, int32_t n_discard);

/* es_generate with speculation: feeds prompt (es_spec_feed) and steps until n_predict tokens, an
 * end-of-generation token (not handed out, unless the object's ignore_eog), on_token returning
 * false, or a full context, handing every token to on_token as es_generate does: the same
 * tokens, the same text pieces, the same stopping rules. The object's es_spec_params decide the
 * sampling and ignore_eog; params->sampling and params->ignore_eog are not read. Afterwards the
 * sequence ends with the last token handed out (tokens a step decided beyond it are taken back),
 * so a later es_spec_feed or es_spec_generate continues after it. tokens_out (may be NULL)
 * receives the first cap generated ids; stats (may be NULL) counts this call (n_forward_calls:
 * target calls). */
ES_API es_status es_spec_generate(es_spec *spec, const int32_t *prompt, size_t n_prompt,
                                  const es_generate_params *params, int32_t *tokens_out, size_t cap,
                                  es_generate_stats *stats);

/* ---- ALSpec: attention-level speculation (papers/alspec-attention-level-speculation.txt) ----
 * Every layer's attention of a decode token runs as a speculative flash decode: the first and the
 * last chunks of the KV cache are reduced first into a speculation, the rest completes the exact
 * attention reusing it, and the layer goes on with the speculation when ||spec - A||_2 <
 * lambda ||A||_2 over all heads (Algorithm 1's commit), else with the exact attention. With
 * lambda > 0 this is an approximation by design (the paper's): report its text as agreement
 * with the exact run, never as lossless. lambda = 0 is exact: the tokens es_generate emits.
 * es_alspec_create computes Algorithm 1 on one context; es_alspec_create_pair runs Algorithm 2
 * (SGDC with priority gating) over two contexts of one model on two devices: the context holding
 * the correct activations ships each layer's speculation to the other, which runs the
 * post-attention ops ahead; a hit keeps its work, a miss discards it (its KV slots included).
 * Two Vulkan devices decide the gating themselves (the token is submitted ahead on both); other
 * pairs are gated by the host, one round trip per layer. One thread at a time. */
typedef struct es_alspec es_alspec;

#define ES_ALSPEC_MAX_LAYERS 256 /* layers the statistics keep one entry for */

typedef struct es_alspec_params {
    int32_t chunk;              /* S: KV positions per chunk, a multiple of the backend's attention
                                   tile (CPU 64, Vulkan 256); tokens with fewer than 2S keys decode
                                   exactly; 0 = 256                                                */
    float lambda;               /* the check's threshold, >= 0; 0 = never accept: exact decoding  */
    es_sampler_params sampling; /* zeroed = greedy                                                */
    uint64_t reserved[8];          /* zero; room for later fields (ABI, at the top)              */
} es_alspec_params;

typedef struct es_alspec_stats {
    int32_t n_layer;
    int64_t n_tokens;           /* tokens decoded with speculative attention (one forward each)   */
    int64_t n_spec_tokens;      /* of them, tokens with at least 2S keys: every layer speculated  */
    int64_t n_checks;           /* layer speculations checked (n_spec_tokens x n_layer)           */
    int64_t n_hits;             /* of them within lambda, so the layer went on with the speculation */
    int64_t layer_hits[ES_ALSPEC_MAX_LAYERS]; /* hits per layer (the first n_layer entries)       */
    int32_t last_hits;          /* layers that hit in the last decoded token                      */
    uint8_t last_hit[ES_ALSPEC_MAX_LAYERS];   /* the last token's layers: 1 = hit                 */
    float last_ratio[ES_ALSPEC_MAX_LAYERS];   /* ||spec - A|| / ||A|| of the last token's layers;
                                                 -1 where it had no speculation                   */
    double decode_ms;           /* wall time in es_alspec_step                                    */
    uint64_t reserved[8];          /* zero; room for later fields (ABI, at the top)              */
} es_alspec_stats;

/* Creates an ALSpec decoder on ctx, starting a new sequence (ctx's committed tokens are dropped).
 * It does not own ctx: ctx (and its model) must outlive it, and nothing else should drive ctx
 * while it lives. ES_ERR_UNSUPPORTED when ctx's backend has no speculative attention, and
 * ES_ERR_INVALID_ARGUMENT for a chunk that is not a multiple of its tile or lambda < 0. */
ES_API es_status es_alspec_create(es_context *ctx, const es_alspec_params *params, es_alspec **out);
/* es_alspec_create over two contexts holding the same es_model, typically on two backends from
 * es_backends_create ("0,1", "0,0", "0,host"): weights and KV replicated, ctx the first sender.
 * Both sequences start anew; ctx2 needs speculative attention, at least ctx's slots and a tile
 * dividing the chunk; neither context may be driven by anything else while the object lives.
 * The statistics are es_alspec_create's: a layer's hit is a kept receiver's work. */
ES_API es_status es_alspec_create_pair(es_context *ctx, es_context *ctx2, const es_alspec_params *params,
                                       es_alspec **out);
ES_API void es_alspec_free(es_alspec *a);
ES_API const char *es_alspec_errmsg(const es_alspec *a);
/* Appends n_tokens >= 1 tokens to the sequence (exact forward calls, in chunks of n_batch). */
ES_API es_status es_alspec_feed(es_alspec *a, const int32_t *tokens, size_t n_tokens);
/* Decides the next token: the first step after a feed samples from the fed tokens' logits; every
 * later one first decodes the previous step's token with speculative attention. Needs a feed.
 * ES_ERR_CONTEXT_FULL when the context has no room. */
ES_API es_status es_alspec_step(es_alspec *a, int32_t *token);
ES_API es_status es_alspec_get_stats(const es_alspec *a, es_alspec_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* EDGESPEC_H */
