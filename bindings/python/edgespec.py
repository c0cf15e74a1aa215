"""edgespec.py: Python binding of libedgespec through ctypes (standard library only, no compiled
extension): load a model, tokenize, generate with streaming tokens, speculative decoding. It
mirrors the public API of edgespec.h and adds nothing to its behaviour: the tokens it streams are
the ones es_generate / es_spec_generate hand out.

    import edgespec
    model = edgespec.Model("models/default.gguf")
    with model.context(n_ctx=512) as ctx:
        for token, piece in ctx.stream("In the beginning", n_predict=32):
            print(piece, end="", flush=True)

The library is found from EDGESPEC_LIBRARY (a path), else as libedgespec.so.MAJOR on the dynamic
linker's path; edgespec.load_library(path) picks another one. A failed call raises EdgespecError
with the library's status and message. Objects are freed by close(), by `with`, or when garbage
collected; a context keeps its model alive, a speculation object its contexts.
"""
import codecs
import ctypes
import ctypes.util
import os
import queue
import threading

ABI_MAJOR = 0  # the soname (libedgespec.so.0) and ES_VERSION_MAJOR this binding was written for

# ---- the C declarations (edgespec.h); sizes are checked against tests/abi/edgespec.abi --------
c_status = ctypes.c_int
c_log_fn = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
c_progress_fn = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_float, ctypes.c_void_p)
c_token_fn = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_int32, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t,
                              ctypes.c_void_p)
RESERVED = ("reserved", ctypes.c_uint64 * 8)


class ModelParams(ctypes.Structure):
    _fields_ = [("vocab_only", ctypes.c_bool), ("no_mmap", ctypes.c_bool), ("log_fn", c_log_fn),
                ("log_user", ctypes.c_void_p), ("log_level", ctypes.c_int), ("allocator", ctypes.c_void_p),
                ("progress_fn", c_progress_fn), ("progress_user", ctypes.c_void_p), RESERVED]


class ModelInfo(ctypes.Structure):
    _fields_ = [("architecture", ctypes.c_char_p), ("name", ctypes.c_char_p), ("path", ctypes.c_char_p),
                ("gguf_version", ctypes.c_uint32), ("n_vocab", ctypes.c_int32), ("n_ctx_train", ctypes.c_int32),
                ("n_embd", ctypes.c_int32), ("n_layer", ctypes.c_int32), ("n_head", ctypes.c_int32),
                ("n_head_kv", ctypes.c_int32), ("n_ff", ctypes.c_int32), ("head_dim", ctypes.c_int32),
                ("n_rot", ctypes.c_int32), ("rope_freq_base", ctypes.c_float), ("rope_freq_scale", ctypes.c_float),
                ("rms_norm_eps", ctypes.c_float), ("rope_type", ctypes.c_int), ("tied_output", ctypes.c_bool),
                ("has_weights", ctypes.c_bool), ("tokenizer", ctypes.c_int), ("tokenizer_pre", ctypes.c_char_p),
                ("bos_id", ctypes.c_int32), ("eos_id", ctypes.c_int32), ("n_params", ctypes.c_uint64),
                ("weight_bytes", ctypes.c_uint64), ("n_tensors", ctypes.c_int32), ("has_ss_adapter", ctypes.c_bool),
                ("rope_scaling", ctypes.c_char_p), ("rope_n_ctx_orig", ctypes.c_int32),
                ("rope_attn_factor", ctypes.c_float), ("reserved", ctypes.c_uint64 * 6)]


class VkTuning(ctypes.Structure):
    _fields_ = [("fused_stream_rows", ctypes.c_int32), ("solo_row_elements", ctypes.c_int32), RESERVED]


class BackendParams(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("n_threads", ctypes.c_int32), ("cpu_weights_in_place", ctypes.c_bool),
                ("device", ctypes.c_char_p), ("vk_flags", ctypes.c_uint32), ("vk_tuning", VkTuning),
                ("pipeline_cache_path", ctypes.c_char_p), ("profile", ctypes.c_bool), ("log_fn", c_log_fn),
                ("log_user", ctypes.c_void_p), ("log_level", ctypes.c_int), ("allocator", ctypes.c_void_p),
                ("progress_fn", c_progress_fn), ("progress_user", ctypes.c_void_p), RESERVED]


class ContextParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_int32), ("n_batch", ctypes.c_int32), ("backend", ctypes.c_void_p),
                ("log_fn", c_log_fn), ("log_user", ctypes.c_void_p), ("log_level", ctypes.c_int),
                ("allocator", ctypes.c_void_p), RESERVED]


class SamplerParams(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float), ("repeat_last_n", ctypes.c_int32),
                ("seed", ctypes.c_uint64), RESERVED]


class GenerateParams(ctypes.Structure):
    _fields_ = [("n_predict", ctypes.c_int32), ("ignore_eog", ctypes.c_bool), ("sampling", SamplerParams),
                ("on_token", c_token_fn), ("user", ctypes.c_void_p),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("n_stop", ctypes.c_size_t), ("max_ms", ctypes.c_double),
                ("shift_context", ctypes.c_bool), ("n_keep", ctypes.c_int32), RESERVED]


class GenerateStats(ctypes.Structure):
    _fields_ = [("n_prompt", ctypes.c_int32), ("n_generated", ctypes.c_int32), ("prompt_ms", ctypes.c_double),
                ("decode_ms", ctypes.c_double), ("n_forward_calls", ctypes.c_int32), RESERVED]


class DsiParams(ctypes.Structure):
    _fields_ = [("n_targets", ctypes.c_int32), ("max_targets", ctypes.c_int32),
                ("backends", ctypes.c_void_p), ("n_backends", ctypes.c_int32), RESERVED]


class SpecParams(ctypes.Structure):
    _fields_ = [("strategy", ctypes.c_int), ("sampling", SamplerParams), ("rejection_sampling", ctypes.c_bool),
                ("n_streams", ctypes.c_int32), ("top_k", ctypes.c_int32), ("max_nodes", ctypes.c_int32),
                ("prune_threshold", ctypes.c_float), ("draft_ctx", ctypes.c_void_p), ("lookahead", ctypes.c_int32),
                ("ignore_eog", ctypes.c_bool), ("fixed_tree", ctypes.c_bool), ("dsi", DsiParams), RESERVED]


# the struct of each name in tests/abi/edgespec.abi, for the binding's test
STRUCTS = {"es_model_params": ModelParams, "es_model_info": ModelInfo, "es_vk_tuning": VkTuning,
           "es_backend_params": BackendParams, "es_context_params": ContextParams,
           "es_sampler_params": SamplerParams, "es_generate_params": GenerateParams,
           "es_generate_stats": GenerateStats, "es_dsi_params": DsiParams, "es_spec_params": SpecParams}

BACKENDS = {"cpu": 0, "vulkan": 1}
STRATEGIES = {"stream": 0, "draft": 1, "dsi": 2}
ERR_BUFFER_TOO_SMALL = 9
ERR_CANCELLED = 10


class EdgespecError(Exception):
    """A failed edgespec call: status (es_status value), status_name (es_status_str) and the
    library's detailed message."""

    def __init__(self, status, status_name, message):
        super().__init__(f"{message} ({status_name})" if message else status_name)
        self.status, self.status_name, self.message = status, status_name, message


_lib = None


def _declare(lib):
    P, I32, SZ = ctypes.c_void_p, ctypes.c_int32, ctypes.c_size_t
    I32P, SZP = ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_size_t)
    sigs = {
        "es_version": (ctypes.c_char_p, []), "es_status_str": (ctypes.c_char_p, [c_status]),
        "es_last_error": (ctypes.c_char_p, []),
        "es_model_load": (c_status, [ctypes.c_char_p, ctypes.POINTER(ModelParams), ctypes.POINTER(P)]),
        "es_model_free": (None, [P]), "es_model_errmsg": (ctypes.c_char_p, [P]),
        "es_model_load_adapter": (c_status, [P, ctypes.c_char_p]),
        "es_model_get_info": (c_status, [P, ctypes.POINTER(ModelInfo)]),
        "es_tokenize": (c_status, [P, ctypes.c_char_p, SZ, ctypes.c_bool, ctypes.c_bool, I32P, SZ, SZP]),
        "es_token_to_piece": (c_status, [P, I32, ctypes.c_bool, ctypes.c_char_p, SZ, SZP]),
        "es_detokenize": (c_status, [P, I32P, SZ, ctypes.c_bool, ctypes.c_bool, ctypes.c_char_p, SZ, SZP]),
        "es_token_is_eog": (ctypes.c_bool, [P, I32]),
        "es_backend_create": (c_status, [ctypes.POINTER(BackendParams), ctypes.POINTER(P)]),
        "es_backend_free": (None, [P]), "es_backend_name": (ctypes.c_char_p, [P]),
        "es_context_create": (c_status, [P, ctypes.POINTER(ContextParams), ctypes.POINTER(P)]),
        "es_context_free": (None, [P]), "es_context_errmsg": (ctypes.c_char_p, [P]),
        "es_context_n_past": (I32, [P]), "es_context_n_ctx": (I32, [P]),
        "es_truncate": (c_status, [P, I32]),
        "es_generate": (c_status, [P, I32P, SZ, ctypes.POINTER(GenerateParams), I32P, SZ,
                                   ctypes.POINTER(GenerateStats)]),
        "es_spec_create": (c_status, [P, ctypes.POINTER(SpecParams), ctypes.POINTER(P)]),
        "es_spec_free": (None, [P]), "es_spec_errmsg": (ctypes.c_char_p, [P]),
        "es_spec_truncate": (c_status, [P, SZ]),
        "es_spec_generate": (c_status, [P, I32P, SZ, ctypes.POINTER(GenerateParams), I32P, SZ,
                                        ctypes.POINTER(GenerateStats)]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args


def load_library(path=None):
    """Loads libedgespec (path, else $EDGESPEC_LIBRARY, else libedgespec.so.MAJOR) and checks that
    its major version is the one this binding mirrors. Returns the ctypes library."""
    global _lib
    path = path or os.environ.get("EDGESPEC_LIBRARY") or ctypes.util.find_library("edgespec") \
        or f"libedgespec.so.{ABI_MAJOR}"
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise OSError(f"{e} (set EDGESPEC_LIBRARY to the path of libedgespec.so.{ABI_MAJOR})") from e
    _declare(lib)
    version = lib.es_version().decode()
    if int(version.split(".")[0]) != ABI_MAJOR:
        raise EdgespecError(4, "unsupported", f"{path} is edgespec {version}; this binding needs {ABI_MAJOR}.x")
    _lib = lib
    return lib


def lib():
    return _lib or load_library()


def version():
    """The version of the library that runs, "MAJOR.MINOR.PATCH"."""
    return lib().es_version().decode()


def _check(status, message_fn=None):
    """Raises EdgespecError for a failed status, with the object's message (message_fn) or the
    calling thread's es_last_error()."""
    if status == 0:
        return
    L = lib()
    msg = message_fn() if message_fn else None
    msg = msg or L.es_last_error()
    raise EdgespecError(status, L.es_status_str(status).decode(), (msg or b"").decode("utf-8", "replace"))


def _tokens(ids):
    ids = list(ids)
    return (ctypes.c_int32 * max(len(ids), 1))(*ids), len(ids)


class _Closing:
    """`with` frees the object at the end of the block (its close())."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Model(_Closing):
    """A loaded GGUF model (es_model_load): immutable, shareable by contexts."""

    def __init__(self, path, vocab_only=False):
        L = self._L = lib()  # kept: close() may run while the interpreter shuts down
        self._h = ctypes.c_void_p()
        p = ModelParams(vocab_only=vocab_only)
        _check(L.es_model_load(os.fsencode(path), ctypes.byref(p), ctypes.byref(self._h)))
        info = ModelInfo()
        _check(L.es_model_get_info(self._h, ctypes.byref(info)))
        self.n_vocab, self.n_ctx_train = info.n_vocab, info.n_ctx_train
        self.bos_id, self.eos_id = info.bos_id, info.eos_id
        self.path = path

    def load_adapter(self, path):
        """Attaches a Speculative Streaming adapter (before any context is made)."""
        _check(lib().es_model_load_adapter(self._h, os.fsencode(path)),
               lambda: lib().es_model_errmsg(self._h))

    def tokenize(self, text, add_special=True, parse_special=True):
        """Token ids of text (str or bytes); add_special adds the model's BOS as its tokenizer says."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        L, need = lib(), ctypes.c_size_t()
        cap = len(data) + 4
        while True:
            buf = (ctypes.c_int32 * cap)()
            s = L.es_tokenize(self._h, data, len(data), add_special, parse_special, buf, cap, ctypes.byref(need))
            if s != ERR_BUFFER_TOO_SMALL:
                _check(s)
                return list(buf[:need.value])
            cap = need.value

    def detokenize(self, ids, remove_leading_space=True, render_special=False):
        """The text of a token sequence (str; invalid UTF-8 replaced)."""
        return self.detokenize_bytes(ids, remove_leading_space, render_special).decode("utf-8", "replace")

    def detokenize_bytes(self, ids, remove_leading_space=True, render_special=False):
        arr, n = _tokens(ids)
        L, need = lib(), ctypes.c_size_t()
        s = L.es_detokenize(self._h, arr, n, remove_leading_space, render_special, None, 0, ctypes.byref(need))
        if s not in (0, ERR_BUFFER_TOO_SMALL):
            _check(s)
        buf = ctypes.create_string_buffer(need.value + 1)
        _check(L.es_detokenize(self._h, arr, n, remove_leading_space, render_special, buf, len(buf),
                               ctypes.byref(need)))
        return buf.raw[:need.value]

    def token_to_piece(self, token, render_special=False):
        """The bytes one token contributes to decoded text."""
        buf, n = ctypes.create_string_buffer(64), ctypes.c_size_t()
        s = lib().es_token_to_piece(self._h, token, render_special, buf, len(buf), ctypes.byref(n))
        if s == ERR_BUFFER_TOO_SMALL:
            buf = ctypes.create_string_buffer(n.value)
            s = lib().es_token_to_piece(self._h, token, render_special, buf, len(buf), ctypes.byref(n))
        _check(s)
        return buf.raw[:n.value]

    def is_eog(self, token):
        return bool(lib().es_token_is_eog(self._h, token))

    def context(self, n_ctx=0, n_batch=0, backend="cpu", device=None, n_threads=0):
        """A new Context on its own backend ("cpu" or "vulkan"; 0 = the library's defaults)."""
        return Context(self, n_ctx, n_batch, backend, device, n_threads)

    def close(self):
        """Frees the model; close its contexts first (each keeps it alive until then)."""
        if getattr(self, "_h", None):
            self._L.es_model_free(self._h)
            self._h = None

    __del__ = close


def _generate_params(n_predict, temperature, top_k, top_p, min_p, seed, stop, ignore_eog):
    gp = GenerateParams(n_predict=n_predict, ignore_eog=ignore_eog)
    gp.sampling = SamplerParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
    keep = []
    if stop:
        words = [s.encode() if isinstance(s, str) else bytes(s) for s in stop]
        arr = (ctypes.c_char_p * len(words))(*words)
        gp.stop, gp.n_stop = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p)), len(words)
        keep = [arr, words]
    return gp, keep


class _Generator(_Closing):
    """What Context and Spec share: one generate call (es_generate or es_spec_generate) with a
    Python callback, and streaming it as an iterator."""

    def _call(self, prompt, on_token, n_predict=128, temperature=0.0, top_k=0, top_p=0.0, min_p=0.0, seed=0,
              stop=None, ignore_eog=False):
        """Runs a generation; on_token(token, piece_bytes) returns False to stop. Returns the ids."""
        model = self._model
        ids = model.tokenize(prompt) if isinstance(prompt, (str, bytes)) else list(prompt)
        if not ids:
            raise EdgespecError(1, "invalid argument", "the prompt has no tokens")
        arr, n = _tokens(ids)
        gp, keep = _generate_params(n_predict, temperature, top_k, top_p, min_p, seed, stop, ignore_eog)
        out, raised = [], []

        def cb(token, piece, length, user):
            try:
                if token >= 0:
                    out.append(token)
                return on_token is None or on_token(token, ctypes.string_at(piece, length)) is not False
            except BaseException as e:  # an exception must not cross the C frames: re-raised below
                raised.append(e)
                return False

        gp.on_token = c_token_fn(cb)
        stats = GenerateStats()
        s = self._run(arr, n, ctypes.byref(gp), ctypes.byref(stats))
        del keep
        if raised:
            raise raised[0]
        _check(s, self._errmsg)
        self.last_stats = stats
        return out

    def generate(self, prompt, on_token=None, **opts):
        """Generates after prompt (text or token ids) and returns the new token ids. on_token(token,
        piece) is called for each token as it comes (piece: its bytes; token -1 for held-back text
        at the end); returning False stops. Options: n_predict (default 128; 0 = until the end of
        generation), temperature (0 = greedy), top_k, top_p, min_p, seed, stop (strings),
        ignore_eog."""
        return self._call(prompt, on_token, **opts)

    def stream(self, prompt, **opts):
        """Yields (token, piece_text) as tokens are generated (pieces decoded incrementally, so a
        multi-byte character never splits). Leaving the loop early stops the generation: the
        context then holds the prompt and exactly the tokens that were yielded."""
        items, replies = queue.Queue(), queue.Queue()
        failure = []

        def on_token(token, piece):
            items.put((token, piece))
            return replies.get()  # True once the consumer has the token, False when it left

        def work():
            try:
                self._call(prompt, on_token, **opts)
            except BaseException as e:
                failure.append(e)
            items.put(None)

        # es_generate runs on a worker thread (ctypes releases the GIL around it) and waits in
        # on_token for the consumer, so the tokens are decided one by one as they are taken
        t = threading.Thread(target=work, daemon=True)
        t.start()
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while True:
                item = items.get()
                if item is None:
                    break
                replies.put(True)
                yield item[0], dec.decode(item[1])
        finally:
            replies.put(False)  # the token being decided, if any, is the one the consumer left before
            t.join()
        if failure:
            raise failure[0]


class Context(_Generator):
    """A KV cache for one sequence on one backend (es_context). One thread at a time."""

    def __init__(self, model, n_ctx=0, n_batch=0, backend="cpu", device=None, n_threads=0):
        L = self._L = lib()
        self._model, self._b, self._h = model, ctypes.c_void_p(), ctypes.c_void_p()
        if backend not in BACKENDS:
            raise EdgespecError(1, "invalid argument", f"unknown backend {backend!r} (cpu, vulkan)")
        bp = BackendParams(type=BACKENDS[backend], n_threads=n_threads, device=device.encode() if device else None)
        _check(L.es_backend_create(ctypes.byref(bp), ctypes.byref(self._b)))
        cp = ContextParams(n_ctx=n_ctx, n_batch=n_batch, backend=self._b)
        try:
            _check(L.es_context_create(model._h, ctypes.byref(cp), ctypes.byref(self._h)))
        except EdgespecError:
            self.close()
            raise
        self.backend_name = L.es_backend_name(self._b).decode()
        self.last_stats = None

    def _run(self, arr, n, gp, stats):
        return lib().es_generate(self._h, arr, n, gp, None, 0, stats)

    def _errmsg(self):
        return lib().es_context_errmsg(self._h)

    @property
    def n_past(self):
        """Tokens in the KV cache: the prompt and output of the generations so far."""
        return lib().es_context_n_past(self._h)

    def reset(self):
        """Forgets the sequence (a new conversation)."""
        _check(lib().es_truncate(self._h, 0), self._errmsg)

    def speculative(self, strategy="stream", draft=None, n_streams=0, top_k=0, max_nodes=0, lookahead=0,
                    temperature=0.0, seed=0, fixed_tree=False):
        """A Spec decoding into this context: strategy "stream" (the model's Speculative
        Streaming adapter, Model.load_adapter), "draft" or "dsi" (draft: a Context of a draft
        model with the same vocabulary). Lossless: it emits what generate() emits."""
        return Spec(self, strategy, draft, n_streams, top_k, max_nodes, lookahead, temperature, seed, fixed_tree)

    def close(self):
        L = getattr(self, "_L", None)
        if getattr(self, "_h", None):
            L.es_context_free(self._h)
            self._h = None
        if getattr(self, "_b", None):
            L.es_backend_free(self._b)
            self._b = None

    __del__ = close


class Spec(_Generator):
    """A speculation object (es_spec) driving a context; generate() and stream() as on Context,
    with the sampling given here (the options' sampling is not read, as in es_spec_generate)."""

    def __init__(self, ctx, strategy, draft, n_streams, top_k, max_nodes, lookahead, temperature, seed, fixed_tree):
        if strategy not in STRATEGIES:
            raise EdgespecError(1, "invalid argument", f"unknown strategy {strategy!r} (stream, draft, dsi)")
        self._ctx, self._draft, self._model = ctx, draft, ctx._model
        sp = SpecParams(strategy=STRATEGIES[strategy], n_streams=n_streams, top_k=top_k, max_nodes=max_nodes,
                        lookahead=lookahead, fixed_tree=fixed_tree,
                        draft_ctx=draft._h if draft is not None else None)
        sp.sampling = SamplerParams(temperature=temperature, seed=seed)
        self._h, self._L = ctypes.c_void_p(), lib()
        _check(self._L.es_spec_create(ctx._h, ctypes.byref(sp), ctypes.byref(self._h)))
        self.last_stats = None

    def _run(self, arr, n, gp, stats):
        return lib().es_spec_generate(self._h, arr, n, gp, None, 0, stats)

    def _errmsg(self):
        return lib().es_spec_errmsg(self._h)

    def reset(self):
        _check(lib().es_spec_truncate(self._h, 0), self._errmsg)

    def close(self):
        if getattr(self, "_h", None):
            self._L.es_spec_free(self._h)
            self._h = None

    __del__ = close
