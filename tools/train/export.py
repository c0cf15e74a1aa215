#!/usr/bin/python3
"""export.py: trained models to GGUF, and GGUF back to PyTorch models.

  export.py CKPT.pt OUT.gguf [--type f32|f16|q8_0] [--ss OUT.ss.gguf] [--ss-type f32|f16|q8_0]
            [--name NAME] [--vocab-only]

The base model is a standard llama GGUF with the keys and tensor names llama.cpp writes
(general.architecture = llama, llama.* hyperparameters, tokenizer.ggml.* as a `llama`
SentencePiece vocabulary, token_embd.weight, blk.N.attn_q.weight ..., output_norm.weight,
output.weight unless tied). Like llama.cpp's quantiser, f16 and q8_0 files keep 1-D tensors
(norms) in f32 and store every matrix in the chosen type; q8_0 uses ggml's reference quantiser
(tools/pygguf). RoPE is NORM-ordered in the model already, so Q and K need no permutation.
The Speculative Streaming adapter (--ss) is the separate GGUF of docs/formats.md.
Models of the other architectures (model.ARCHS: qwen2, qwen3, phi3, gemma, gemma2, gemma3, smollm3,
granite) are written and read with their own <arch>.* keys and tensors as llama.cpp names them:
qwen2's blk.N.attn_{q,k,v}.bias, qwen3's (and gemma3's) blk.N.attn_q_norm / attn_k_norm (head_dim each),
phi3's fused blk.N.attn_qkv.weight (Q, K, V rows) and blk.N.ffn_up.weight (gate rows, then up),
gemma2's (and gemma3's) blk.N.post_attention_norm / post_ffw_norm, gemma2's soft-capping keys,
gemma3's rope.freq_base_swa (written where the file read had it; absent, 10000); smollm3 has
llama's tensors and keys under its own name (its layers without RoPE are the architecture's rule);
granite has llama's tensors and its four required multipliers, embedding_scale, attention.scale
(0: head_dim^-1/2), residual_scale and logit_scale, read and written back as found;
edgespec.rope.ordering only where the pairing is not the architecture's own. RoPE scaling is read
and written back as found: rope.scaling.type linear or yarn with its factor (an older file's
rope.scale_linear is written as linear), YaRN's ext_factor and betas, LongRoPE (phi3) with
rope_factors_long/short.weight, llama 3's rope_freqs.weight, original_context_length and
attn_factor (model.Config's rope_* fields); gemma3's sliding layers stay unscaled.
A base read from a GGUF file whose vocabulary is not SentencePiece keeps that file's
tokenizer.ggml.* keys (gguf_vocab.py).
Deliberately not here: training (train.py) and the GGUF byte layout itself (tools/pygguf).
"""

import argparse
import os
import sys

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "pygguf"))
sys.path.insert(0, os.path.join(_HERE, "..", "reference"))
import bpe       # noqa: E402
import gguf_vocab  # noqa: E402
import kquants   # noqa: E402
import model as M  # noqa: E402
import pygguf    # noqa: E402

FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7}  # llama.cpp's llama_ftype: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0

BLOCK_TENSORS = (  # (GGUF suffix, attribute of model.Block)
    ("attn_norm.weight", "attn_norm"),
    ("attn_q.weight", "attn_q"),
    ("attn_k.weight", "attn_k"),
    ("attn_v.weight", "attn_v"),
    ("attn_output.weight", "attn_output"),
    ("ffn_norm.weight", "ffn_norm"),
    ("ffn_gate.weight", "ffn_gate"),
    ("ffn_up.weight", "ffn_up"),
    ("ffn_down.weight", "ffn_down"),
)
MUP_KEYS = (  # (<arch>. key, model.Config field): granite's multipliers (model.ARCHS mup)
    ("embedding_scale", "embedding_scale"),
    ("attention.scale", "attention_scale"),
    ("residual_scale", "residual_scale"),
    ("logit_scale", "logit_scale"),
)
ROPE_DIVISORS = (  # (GGUF tensor, model.Config field): RoPE's per-pair frequency divisors
    ("rope_freqs.weight", "rope_freqs"),
    ("rope_factors_long.weight", "rope_long"),
    ("rope_factors_short.weight", "rope_short"),
)
YARN_KEYS = (  # (<arch>.rope.scaling. key, model.Config field, llama.cpp's default)
    ("yarn_ext_factor", "yarn_ext_factor", 1.0),
    ("yarn_beta_fast", "yarn_beta_fast", 32.0),
    ("yarn_beta_slow", "yarn_beta_slow", 1.0),
)
ARCH_NORMS = (  # (column of model.ARCHS, norm weights of model.Block written as blk.N.<name>.weight)
    ("qk_norm", ("attn_q_norm", "attn_k_norm")),
    ("post_norms", ("post_attention_norm", "post_ffw_norm")),
)


def _np(t):
    return t.detach().to(torch.float32).cpu().numpy()


def _weight(mod):
    return mod.weight if isinstance(mod, torch.nn.Module) else mod


def _type_for(arr, wtype):
    """1-D tensors stay f32; q8_0 needs rows that are a multiple of 32 (else f16, as llama.cpp
    falls back for such rows)."""
    if arr.ndim < 2 or wtype == "f32":
        return "f32"
    if wtype == "q8_0" and arr.shape[-1] % pygguf.QK:
        return "f16"
    return wtype


def add_vocab(w, vocab):
    if isinstance(vocab, gguf_vocab.GgufVocab):  # a base file's own (BPE) tokenizer, verbatim
        vocab.add_to(w)
        return
    w.add("tokenizer.ggml.model", "llama")
    w.add("tokenizer.ggml.tokens", vocab.tokens)
    w.add("tokenizer.ggml.scores", np.asarray(vocab.scores, dtype=np.float32))
    w.add("tokenizer.ggml.token_type", np.asarray(vocab.types, dtype=np.int32))
    w.add("tokenizer.ggml.bos_token_id", vocab.bos_id, pygguf.UINT32)
    w.add("tokenizer.ggml.eos_token_id", vocab.eos_id, pygguf.UINT32)
    w.add("tokenizer.ggml.unknown_token_id", vocab.unk_id, pygguf.UINT32)
    w.add("tokenizer.ggml.add_bos_token", bool(vocab.add_bos))
    w.add("tokenizer.ggml.add_eos_token", bool(vocab.add_eos))
    w.add("tokenizer.ggml.add_space_prefix", bool(vocab.add_space_prefix))


def base_writer(model, vocab, wtype="f32", name="edgespec", vocab_only=False):
    """A pygguf.Writer holding the base model (or only its hyperparameters and tokenizer)."""
    c = model.cfg
    if wtype not in FILE_TYPE:
        raise ValueError("unsupported type %r" % wtype)
    if len(vocab) != c.n_vocab:
        raise ValueError("tokenizer has %d tokens, model %d" % (len(vocab), c.n_vocab))
    w = pygguf.Writer()
    a = c.arch
    w.add("general.architecture", a)
    w.add("general.name", name)
    w.add("general.file_type", FILE_TYPE[wtype], pygguf.UINT32)
    if wtype == "q8_0":
        w.add("general.quantization_version", 2, pygguf.UINT32)
    w.add(a + ".vocab_size", c.n_vocab, pygguf.UINT32)
    w.add(a + ".context_length", c.n_ctx, pygguf.UINT32)
    w.add(a + ".embedding_length", c.n_embd, pygguf.UINT32)
    w.add(a + ".block_count", c.n_layer, pygguf.UINT32)
    w.add(a + ".feed_forward_length", c.n_ff, pygguf.UINT32)
    w.add(a + ".rope.dimension_count", c.n_rot, pygguf.UINT32)
    w.add(a + ".attention.head_count", c.n_head, pygguf.UINT32)
    w.add(a + ".attention.head_count_kv", c.n_head_kv, pygguf.UINT32)
    if c.head_dim * c.n_head != c.n_embd:
        w.add(a + ".attention.key_length", c.head_dim, pygguf.UINT32)
        w.add(a + ".attention.value_length", c.head_dim, pygguf.UINT32)
    w.add(a + ".attention.layer_norm_rms_epsilon", float(c.rms_eps), pygguf.FLOAT32)
    w.add(a + ".rope.freq_base", float(c.rope_base), pygguf.FLOAT32)
    if c.rope_neox != c.a["neox"]:
        w.add("edgespec.rope.ordering", "neox" if c.rope_neox else "norm")
    if c.n_swa > 0:
        w.add(a + ".attention.sliding_window", c.n_swa, pygguf.UINT32)
    if c.rope_base_swa > 0:
        w.add(a + ".rope.freq_base_swa", float(c.rope_base_swa), pygguf.FLOAT32)
    if c.a["softcap"]:
        w.add(a + ".attn_logit_softcapping", float(c.attn_softcap), pygguf.FLOAT32)
        w.add(a + ".final_logit_softcapping", float(c.final_softcap), pygguf.FLOAT32)
    elif c.attn_softcap or c.final_softcap:
        raise ValueError("%s has no soft-capping" % a)
    if c.a["mup"]:  # granite's multipliers (model.Config; its keys are required)
        for key, value in MUP_KEYS:
            w.add(a + "." + key, float(getattr(c, value)), pygguf.FLOAT32)
    add_rope_scaling(w, c)
    add_vocab(w, vocab)
    if vocab_only:
        return w

    def put(tname, t):
        a = _np(t)
        w.add_tensor(tname, a, _type_for(a, wtype))

    for tname, field in ROPE_DIVISORS:
        if getattr(c, field):
            put(tname, torch.tensor(getattr(c, field), dtype=torch.float32))  # (n_rot / 2)
    put("token_embd.weight", model.token_embd.weight)           # (n_vocab, n_embd)
    put("output_norm.weight", model.output_norm)                # (n_embd)
    if model.output is not None:
        put("output.weight", model.output.weight)               # (n_vocab, n_embd)
    for i, b in enumerate(model.blocks):
        for tname, t in block_tensors(b, c):
            put("blk.%d.%s" % (i, tname), t)
    return w


def add_rope_scaling(w, c):
    """The keys of model.Config's RoPE scaling (its divisor tensors go with the weights)."""
    k = c.arch + ".rope.scaling."
    if c.rope_scaling != "none":
        w.add(k + "type", c.rope_scaling)
    if c.rope_factor > 0:
        w.add(k + "factor", float(c.rope_factor), pygguf.FLOAT32)
    if c.rope_n_ctx_orig > 0:
        w.add(k + "original_context_length", c.rope_n_ctx_orig, pygguf.UINT32)
    if c.rope_attn_factor > 0:
        w.add(k + "attn_factor", float(c.rope_attn_factor), pygguf.FLOAT32)
    for key, field, _ in YARN_KEYS if c.rope_scaling == "yarn" else ():
        w.add(k + key, float(getattr(c, field)), pygguf.FLOAT32)


def read_rope_scaling(r, a, path):
    """model.Config's RoPE scaling fields from a GGUF file, refused where the C library refuses
    (lib/core/model.c read_rope, bind_rope_divisors)."""
    k = a + ".rope.scaling."
    kind = _get(r, k + "type", "none")
    kw = {}
    if kind in ("linear", "yarn"):
        kw.update(rope_scaling=kind, rope_factor=float(_get(r, k + "factor")))
    elif kind == "none" and float(_get(r, a + ".rope.scale_linear", 0.0)) > 0:  # an older file's linear
        kw.update(rope_scaling="linear", rope_factor=float(_get(r, a + ".rope.scale_linear")))
    elif kind != "none":
        kw["rope_scaling"] = kind  # longrope; anything else model.Config refuses
    kw["rope_n_ctx_orig"] = int(_get(r, k + "original_context_length", 0))
    kw["rope_attn_factor"] = float(_get(r, k + "attn_factor", 0.0))
    if kind == "yarn":
        if float(_get(r, k + "yarn_log_multiplier", 0.0)) != 0.0:
            raise ValueError("%s: YaRN with a log multiplier (DeepSeek's mscale) is not modelled" % path)
        kw.update({field: float(_get(r, k + key, default)) for key, field, default in YARN_KEYS})
    for tname, field in ROPE_DIVISORS:
        if tname in r.tensors:
            kw[field] = tuple(float(v) for v in tensor_f32(r, tname).ravel())
    return kw


def arch_norms(c):
    """The names of the norm weights the architecture has beyond llama's."""
    return [n for col, names in ARCH_NORMS if c.a[col] for n in names]


def block_tensors(b, c):
    """(GGUF suffix, tensor) of one block in the file's layout for the architecture."""
    out = [(suffix, _weight(getattr(b, attr))) for suffix, attr in BLOCK_TENSORS]
    if c.a["fused"]:  # phi3: Q, K, V rows in one matrix; gate rows, then up rows in ffn_up
        d = dict(out)
        qkv = torch.cat([d.pop("attn_q.weight"), d.pop("attn_k.weight"), d.pop("attn_v.weight")])
        up = torch.cat([d.pop("ffn_gate.weight"), d.pop("ffn_up.weight")])
        out = [(k, v) for k, v in d.items()] + [("attn_qkv.weight", qkv), ("ffn_up.weight", up)]
    if c.a["qkv_bias"]:
        out += [("%s.bias" % n, getattr(b, n).bias) for n in ("attn_q", "attn_k", "attn_v")]
    return out + [(n + ".weight", getattr(b, n)) for n in arch_norms(c)]


def adapter_writer(model, wtype="f32", name="edgespec"):
    """A pygguf.Writer holding the Speculative Streaming adapter (docs/formats.md)."""
    c = model.cfg
    if c.n_streams <= 0:
        raise ValueError("the model has no speculative streams")
    w = pygguf.Writer()
    w.add("general.architecture", c.arch)
    w.add("general.type", "adapter")
    w.add("general.name", name)
    w.add("edgespec.adapter.type", "speculative_streaming")
    w.add("edgespec.ss.n_streams", c.n_streams, pygguf.UINT32)
    w.add("edgespec.ss.n_msa_layers", c.n_msa, pygguf.UINT32)
    has_prune = model.prune_down is not None
    w.add("edgespec.ss.prune_rank", c.prune_rank if has_prune else 0, pygguf.UINT32)
    if has_prune:
        w.add("edgespec.ss.prune_layer", c.prune_layer, pygguf.UINT32)
    w.add("edgespec.ss.lora_rank", c.lora_rank, pygguf.UINT32)

    def put(tname, t):
        a = _np(t)
        w.add_tensor(tname, a, _type_for(a, wtype))

    put("ss.stream_embd.weight", model.stream_embd)              # (gamma, n_embd)
    if has_prune:
        put("ss.prune_down.weight", model.prune_down.weight)     # (r, n_embd)
        put("ss.prune_up.weight", model.prune_up.weight)         # (n_embd, r)
    for i, b in enumerate(model.blocks):
        for tgt, lo in b.lora.items():
            put("ss.blk.%d.%s.lora_a" % (i, tgt), lo.a)          # (rank, n_in)
            put("ss.blk.%d.%s.lora_b" % (i, tgt), lo.b)          # (n_out, rank)
    return w


# ---------------------------------------------------------------------------------------------
# GGUF -> PyTorch

def _get(r, key, default=None, required=True):
    v = r.get(key)
    if v is None:
        if required and default is None:
            raise ValueError("%s: missing key %s" % (r.path if hasattr(r, "path") else "gguf", key))
        return default
    return v.value if hasattr(v, "value") else v


def load_vocab(r, path=None):
    """bpe.Vocab for a SentencePiece (llama) vocabulary, else the file's tokenizer run by the C
    library (gguf_vocab.py), which needs the file's path."""
    if _get(r, "tokenizer.ggml.model") != "llama":
        if path is None:
            raise ValueError("a %r vocabulary is read by the C library: load_vocab needs the file's path"
                             % _get(r, "tokenizer.ggml.model"))
        return gguf_vocab.GgufVocab(path)
    toks = list(_get(r, "tokenizer.ggml.tokens"))
    toks = [t.decode("utf-8") if isinstance(t, bytes) else t for t in toks]
    return bpe.Vocab(toks, list(_get(r, "tokenizer.ggml.scores")),
                     list(_get(r, "tokenizer.ggml.token_type")),
                     int(_get(r, "tokenizer.ggml.bos_token_id", 1)),
                     int(_get(r, "tokenizer.ggml.eos_token_id", 2)),
                     int(_get(r, "tokenizer.ggml.unknown_token_id", 0)),
                     bool(_get(r, "tokenizer.ggml.add_bos_token", True)),
                     bool(_get(r, "tokenizer.ggml.add_eos_token", False)),
                     bool(_get(r, "tokenizer.ggml.add_space_prefix", True)))


def tensor_f32(r, name):
    """A tensor of a read file as float32 in numpy shape: pygguf's types, and the K-quants and
    IQ4 types (the files people have, Q4_K_M and the like) through tools/reference/kquants.py,
    whose decoding equals the C library's bit for bit."""
    v = r.tensors[name]
    a = kquants.dequantize(v.raw, v.type, v.n_elements).reshape(v.shape) if v.type in kquants.TYPES else v.numpy()
    return np.array(a, dtype=np.float32)


def load_gguf_model(path, adapter=None):
    """(Model, Vocab) from a base GGUF (weights dequantised to f32) and an optional SS adapter."""
    r = pygguf.read(path)
    a = _get(r, "general.architecture")
    if a not in M.ARCHS:
        raise ValueError("%s: architecture %r, expected one of %s" % (path, a, sorted(M.ARCHS)))
    vocab = load_vocab(r, path)
    n_embd = int(_get(r, a + ".embedding_length"))
    n_head = int(_get(r, a + ".attention.head_count"))
    own = M.ARCHS[a]["swa_rope_base"] > 0  # the sliding layers' own RoPE: the window is required
    kw = dict(n_vocab=len(vocab), n_embd=n_embd, n_layer=int(_get(r, a + ".block_count")),
              n_head=n_head, n_head_kv=int(_get(r, a + ".attention.head_count_kv", n_head)),
              n_ff=int(_get(r, a + ".feed_forward_length")),
              n_ctx=int(_get(r, a + ".context_length")),
              head_dim=int(_get(r, a + ".attention.key_length", n_embd // n_head)),
              rms_eps=float(_get(r, a + ".attention.layer_norm_rms_epsilon")),
              rope_base=float(_get(r, a + ".rope.freq_base", 10000.0)),
              tied="output.weight" not in r.tensors, arch=a,
              n_swa=int(_get(r, a + ".attention.sliding_window", None if own else 0, required=own)))
    kw["n_rot"] = int(_get(r, a + ".rope.dimension_count", kw["head_dim"]))
    kw.update(read_rope_scaling(r, a, path))
    order = _get(r, "edgespec.rope.ordering", "", required=False)
    if order not in ("", "norm", "neox"):
        raise ValueError("%s: edgespec.rope.ordering %r" % (path, order))
    if order:
        kw["rope_neox"] = order == "neox"
    if own:  # the base kept as the file has it: absent (0) is written absent
        swa = r.get(a + ".rope.freq_base_swa")
        if swa is not None and not swa > 0:  # the C library refuses it too
            raise ValueError("%s: %s.rope.freq_base_swa is %g" % (path, a, swa))
        kw["rope_base_swa"] = float(swa or 0.0)
    if M.ARCHS[a]["softcap"]:  # llama.cpp's defaults when the keys are absent, as the C library
        kw["attn_softcap"] = float(_get(r, a + ".attn_logit_softcapping", 50.0))
        kw["final_softcap"] = float(_get(r, a + ".final_logit_softcapping", 30.0))
    if M.ARCHS[a]["mup"]:  # required and positive, as the C library reads them (attention's 0 allowed)
        for key, value in MUP_KEYS:
            kw[value] = v = float(_get(r, a + "." + key))
            if not (np.isfinite(v) and (v > 0 or (v == 0 and key == "attention.scale"))):
                raise ValueError("%s: %s.%s is %g" % (path, a, key, v))
    ra = None
    if adapter:
        ra = pygguf.read(adapter)
        if _get(ra, "edgespec.adapter.type") != "speculative_streaming":
            raise ValueError("%s: not a Speculative Streaming adapter" % adapter)
        if ra.get("general.architecture") not in (None, a):
            raise ValueError("%s: an adapter for %s, the base is %s" % (adapter, ra.get("general.architecture"), a))
        kw.update(n_streams=int(_get(ra, "edgespec.ss.n_streams")),
                  n_msa=int(_get(ra, "edgespec.ss.n_msa_layers")),
                  prune_rank=int(_get(ra, "edgespec.ss.prune_rank", 0, required=False)),
                  prune_layer=int(_get(ra, "edgespec.ss.prune_layer", -1, required=False)),
                  lora_rank=int(_get(ra, "edgespec.ss.lora_rank", 0, required=False)))
        targets = sorted({n.split(".")[3] for n in ra.tensors if n.startswith("ss.blk.")})
        kw["lora_targets"] = tuple(t for t in M.LORA_TARGETS if t in targets)
    try:
        m = M.Model(M.Config(**kw))
    except ValueError as e:
        raise ValueError("%s: %s" % (path, e)) from None

    def t(rr, name):
        return torch.from_numpy(tensor_f32(rr, name))

    with torch.no_grad():
        m.token_embd.weight.copy_(t(r, "token_embd.weight"))
        m.output_norm.copy_(t(r, "output_norm.weight"))
        if m.output is not None:
            m.output.weight.copy_(t(r, "output.weight"))
        for i, b in enumerate(m.blocks):
            load_block(b, m.cfg, lambda n: t(r, "blk.%d.%s" % (i, n)))
        if ra is not None:
            m.stream_embd.copy_(t(ra, "ss.stream_embd.weight"))
            if m.prune_down is not None:
                m.prune_down.weight.copy_(t(ra, "ss.prune_down.weight"))
                m.prune_up.weight.copy_(t(ra, "ss.prune_up.weight"))
            for i, b in enumerate(m.blocks):
                for tgt, lo in b.lora.items():
                    lo.a.copy_(t(ra, "ss.blk.%d.%s.lora_a" % (i, tgt)))
                    lo.b.copy_(t(ra, "ss.blk.%d.%s.lora_b" % (i, tgt)))
    return m, vocab


def load_block(b, c, get):
    """Copies one block's tensors (get(GGUF suffix)) into model.Block b, splitting phi3's fused
    matrices."""
    names = [(suffix, attr) for suffix, attr in BLOCK_TENSORS]
    if c.a["fused"]:
        qd, kvd = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        qkv, up = get("attn_qkv.weight"), get("ffn_up.weight")
        b.attn_q.weight.copy_(qkv[:qd])
        b.attn_k.weight.copy_(qkv[qd:qd + kvd])
        b.attn_v.weight.copy_(qkv[qd + kvd:])
        b.ffn_gate.weight.copy_(up[:c.n_ff])
        b.ffn_up.weight.copy_(up[c.n_ff:])
        names = [(s, a) for s, a in names if a not in ("attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up")]
    for suffix, attr in names:
        _weight(getattr(b, attr)).copy_(get(suffix))
    if c.a["qkv_bias"]:
        for n in ("attn_q", "attn_k", "attn_v"):
            getattr(b, n).bias.copy_(get(n + ".bias"))
    for n in arch_norms(c):
        getattr(b, n).copy_(get(n + ".weight"))


def load_checkpoint(path):
    ck = torch.load(path, map_location="cpu")
    m = M.Model(M.Config(**ck["config"]))
    m.load_state_dict(ck["model"])
    return m, gguf_vocab.from_json(ck["vocab"], bpe.Vocab.from_json)


def load_any(path, adapter=None):
    """(Model, Vocab) from a checkpoint (.pt) or a GGUF base with an optional adapter."""
    if path.endswith(".pt"):
        if adapter:
            raise ValueError("an adapter goes with a GGUF base, not a checkpoint")
        return load_checkpoint(path)
    return load_gguf_model(path, adapter)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", help="checkpoint (.pt) from train.py")
    ap.add_argument("out", help="base GGUF to write")
    ap.add_argument("--type", default="f32", choices=sorted(FILE_TYPE))
    ap.add_argument("--ss", help="also write the Speculative Streaming adapter here")
    ap.add_argument("--ss-type", default="f32", choices=sorted(FILE_TYPE))
    ap.add_argument("--name", default="edgespec")
    ap.add_argument("--vocab-only", action="store_true", help="hyperparameters and tokenizer only")
    args = ap.parse_args(argv)
    model, vocab = load_checkpoint(args.ckpt)
    base_writer(model, vocab, args.type, args.name, args.vocab_only).write(args.out)
    print("wrote %s (%s, %d bytes)" % (args.out, args.type, os.path.getsize(args.out)))
    if args.ss:
        adapter_writer(model, args.ss_type, args.name).write(args.ss)
        print("wrote %s (%s, %d bytes)" % (args.ss, args.ss_type, os.path.getsize(args.ss)))


if __name__ == "__main__":
    main()
