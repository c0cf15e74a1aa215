"""llama_ref.py: an independent numpy reference of the llama forward pass edgespec computes.

Reads a GGUF file with tools/pygguf (parsing only: the raw bytes of each tensor), dequantises
F32/F16/BF16/Q8_0/Q4_0 here and the K-quants in kquants.py, in numpy (independently of pygguf's and the C library's dequantisers),
and computes logits in float64 (or float32) with plain array code: token embedding, per layer
RMSNorm, Q/K/V, RoPE (NORM and NEOX pairings, partial rotation, frequency base, linear and YaRN
scaling, llama 3's and LongRoPE's per-pair divisors),
causal grouped-query attention, output projection and residual, RMSNorm, SwiGLU FFN and residual;
final RMSNorm and the output head (tied to the embedding when output.weight is absent).

    python3 llama_ref.py MODEL.gguf TOKEN [TOKEN ...]   # prints the argmax of each position

Architectures (docs/formats.md, "Architectures"), each written out here from its public
description rather than taken from the C library's table: llama; qwen2 (Q/K/V biases, NEOX RoPE);
qwen3 (no biases; an RMSNorm over each Q and K head, with attn_q_norm / attn_k_norm, before RoPE; NEOX);
gemma3 (gemma2's post-branch norms and embedding scale, qwen3's head norms, no soft-capping; five
sliding layers to one global, the sliding ones rotating with their own unscaled base,
rope.freq_base_swa or 10000; 27B's (62 layers) query scale as Gemma 2 27B's); smollm3 (llama
whose every fourth layer, il + 1 divisible by 4, has no RoPE at all); granite (llama with four
multipliers from its keys: embedding_scale on the embedding rows, attention.scale on the scores
(0: 1/sqrt(head_dim)), residual_scale on each branch's output before the residual add, and the
logits divided by logit_scale);
phi3 (Q, K, V in one attn_qkv matrix, gate and up rows in one ffn_up matrix, gate first; NEOX);
gemma (embedding times sqrt(n_embd), GeGLU with gelu's tanh form, tied head, NEOX; its GGUF norm
weights already hold the 1 + w); gemma2 (gemma plus RMSNorm of each branch's output before the
residual add, attention scores and final logits soft-capped c tanh(x / c), a sliding window on
even layers, and 27B's query scale (n_embd / n_head)^-1/2). <arch>.attention.sliding_window gives any architecture a window (every layer but
gemma2's odd ones): a query at position p sees keys at positions > p - window.

Deliberately simple and slow; not here: KV caches, batching, trees (a tree node's logits are those
of its root-to-node path, so chains cover them).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pygguf"))
import pygguf  # noqa: E402
import kquants  # noqa: E402


# ---------------------------------------------------------------------------------------------
# dequantisation from raw little-endian bytes

def _f16(u8pairs):
    """(..., 2) uint8 -> float64 via IEEE half decoding by hand."""
    h = u8pairs[..., 0].astype(np.uint32) | (u8pairs[..., 1].astype(np.uint32) << 8)
    sign = np.where(h >> 15, -1.0, 1.0)
    e = ((h >> 10) & 31).astype(np.int64)
    m = (h & 1023).astype(np.float64)
    val = np.where(e == 0, m * 2.0 ** -24, (1024.0 + m) * np.exp2(e.astype(np.float64) - 25.0))
    val = np.where(e == 31, np.where(m == 0, np.inf, np.nan), val)
    return sign * val


def dequantize(raw, type_name, ne):
    """raw: uint8 array of the tensor's bytes; returns float64 in numpy shape (reversed ne)."""
    n = int(np.prod(ne))
    raw = np.asarray(raw, dtype=np.uint8)
    if type_name == "f32":
        v = raw[: 4 * n].view("<f4").astype(np.float64)
    elif type_name == "f16":
        v = _f16(raw[: 2 * n].reshape(-1, 2))
    elif type_name == "bf16":
        b = raw[: 2 * n].reshape(-1, 2).astype(np.uint32)
        v = ((b[:, 0] << 16) | (b[:, 1] << 24)).astype(np.uint32).view(np.float32).astype(np.float64)
    elif type_name == "q8_0":
        blk = raw[: n // 32 * 34].reshape(-1, 34)
        d = _f16(blk[:, 0:2])
        q = blk[:, 2:].view(np.int8).astype(np.float64)
        v = (d[:, None] * q).reshape(-1)
    elif type_name == "q4_0":
        blk = raw[: n // 32 * 18].reshape(-1, 18)
        d = _f16(blk[:, 0:2])
        qs = blk[:, 2:].astype(np.int64)
        q = np.concatenate([(qs & 15) - 8, (qs >> 4) - 8], axis=1).astype(np.float64)
        v = (d[:, None] * q).reshape(-1)
    elif type_name in kquants.TYPES:
        v = kquants.dequantize(raw, type_name, n).astype(np.float64)
    else:
        raise ValueError("unsupported tensor type " + type_name)
    return v.reshape(tuple(reversed(ne)))


# ---------------------------------------------------------------------------------------------
# the model

ARCHS = ("llama", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3", "smollm3", "granite")


class Model:
    """Hyperparameters and dequantised weights of a GGUF file of one of ARCHS."""

    def __init__(self, path, dtype=np.float64):
        r = pygguf.read(path)
        arch = r.get("general.architecture")
        if arch not in ARCHS:
            raise ValueError("architecture %r, expected one of %s" % (arch, ARCHS))
        self.arch = arch

        def key(name, default=None):
            v = r.get(arch + "." + name, default)
            if v is None:
                raise ValueError("missing key %s.%s" % (arch, name))
            return v

        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        self.n_ff = int(key("feed_forward_length"))
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        self.freq_base = float(key("rope.freq_base", 10000.0))
        scale = 1.0
        self.scaling = r.get(arch + ".rope.scaling.type", "none")
        if self.scaling in ("linear", "yarn"):
            scale = float(r.get(arch + ".rope.scaling.factor", 1.0))
        elif r.get(arch + ".rope.scale_linear") is not None:
            scale = float(r.get(arch + ".rope.scale_linear"))
        self.freq_scale = 1.0 / scale if scale else 1.0
        self.rope_factor = scale
        self.n_ctx_orig = int(key("rope.scaling.original_context_length", key("context_length", 0)))
        self.rope_attn_factor = float(key("rope.scaling.attn_factor", 1.0))
        self.yarn_ext = float(key("rope.scaling.yarn_ext_factor", 1.0))
        self.yarn_beta_fast = float(key("rope.scaling.yarn_beta_fast", 32.0))
        self.yarn_beta_slow = float(key("rope.scaling.yarn_beta_slow", 1.0))
        self.eps = float(key("attention.layer_norm_rms_epsilon", 1e-5))
        self.neox = rope_is_neox(r, arch)
        gemma = arch in ("gemma", "gemma2", "gemma3")
        self.embd_scale = np.sqrt(self.n_embd) if gemma else 1.0
        self.gelu = gemma
        # Gemma 2 scales queries by query_pre_attn_scalar^-1/2: 256 = head_dim for 2B and 9B,
        # n_embd / n_head = 144 for 27B (its config); GGUF files do not say, llama.cpp knows 27B
        # by its 46 layers
        big = (arch == "gemma2" and self.n_layer == 46) or (arch == "gemma3" and self.n_layer == 62)
        q_scalar = self.n_embd // self.n_head if big else self.head_dim
        self.q_scale = 1.0 / np.sqrt(q_scalar)
        self.attn_cap = float(key("attn_logit_softcapping", 50.0)) if arch == "gemma2" else 0.0
        self.final_cap = float(key("final_logit_softcapping", 30.0)) if arch == "gemma2" else 0.0
        window = int(key("attention.sliding_window", 0))
        # gemma2 alternates: even layers slide, odd layers see the whole context; gemma3 has five
        # sliding layers, then a global one
        period = {"gemma2": 2, "gemma3": 6}.get(arch, 1)
        self.windows = [window if period == 1 or i % period < period - 1 else 0 for i in range(self.n_layer)]
        # gemma3's sliding layers rotate with a base of their own, unscaled
        self.freq_base_swa = float(key("rope.freq_base_swa", 10000.0)) if arch == "gemma3" else 0.0
        self.no_rope = [arch == "smollm3" and (i + 1) % 4 == 0 for i in range(self.n_layer)]
        self.residual_scale, self.logit_scale = 1.0, 1.0
        if arch == "granite":
            self.embd_scale = float(key("embedding_scale"))
            self.q_scale = float(key("attention.scale")) or self.q_scale
            self.residual_scale = float(key("residual_scale"))
            self.logit_scale = float(key("logit_scale"))

        def w(name):
            t = r.tensors[name]
            return dequantize(t.raw, t.type, t.ne).astype(dtype)

        self.tok_embd = w("token_embd.weight")  # (n_vocab, n_embd)
        # llama 3's per-pair frequency divisors (rope type llama3): pair i turns by theta_i / f_i
        self.rope_freqs = w("rope_freqs.weight").astype(np.float64) if "rope_freqs.weight" in r.tensors else None
        # phi3 LongRoPE (Phi-3/3.5-mini-128k): per-pair divisors, short or long by the context size
        self.rope_long = self.rope_short = None
        if "rope_factors_long.weight" in r.tensors:
            self.rope_long = w("rope_factors_long.weight").astype(np.float64)
            self.rope_short = w("rope_factors_short.weight").astype(np.float64)
        self.output = w("output.weight") if "output.weight" in r.tensors else self.tok_embd
        self.output_norm = w("output_norm.weight")
        self.layers = []
        qd, kvd = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        for i in range(self.n_layer):
            p = "blk.%d." % i
            names = ["attn_norm", "attn_output", "ffn_norm", "ffn_down"]
            names += ["attn_qkv"] if arch == "phi3" else ["attn_q", "attn_k", "attn_v"]
            names += ["ffn_up"] if arch == "phi3" else ["ffn_gate", "ffn_up"]
            names += ["post_attention_norm", "post_ffw_norm"] if arch in ("gemma2", "gemma3") else []
            names += ["attn_q_norm", "attn_k_norm"] if arch in ("qwen3", "gemma3") else []
            L = {k: w(p + k + ".weight") for k in names}
            if arch == "phi3":
                qkv, up = L.pop("attn_qkv"), L.pop("ffn_up")
                L["attn_q"], L["attn_k"], L["attn_v"] = qkv[:qd], qkv[qd:qd + kvd], qkv[qd + kvd:]
                L["ffn_gate"], L["ffn_up"] = up[:self.n_ff], up[self.n_ff:]
            if arch == "qwen2":
                for k in ("attn_q", "attn_k", "attn_v"):
                    L[k + ".bias"] = w(p + k + ".bias")
            self.layers.append(L)
        self.n_vocab = self.tok_embd.shape[0]
        self.dtype = dtype


def rope_is_neox(r, arch="llama"):
    """The rope pairing: edgespec.rope.ordering ("norm" or "neox", docs/formats.md) if present,
    else llama.cpp's rule: NORM for llama, smollm3 and granite, NEOX for the others."""
    v = r.get("edgespec.rope.ordering")
    if v is None:
        return arch not in ("llama", "smollm3", "granite")
    if v not in ("norm", "neox"):
        raise ValueError("edgespec.rope.ordering %r" % (v,))
    return v == "neox"


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def inv_freqs(m, n_ctx):
    """(inverse frequency of each rotated pair, magnitude of cos and sin) in a context of n_ctx,
    written from Hugging Face's rope definitions: linear scaling divides every frequency by the
    factor; YaRN interpolates only the slow pairs, blending over the pairs whose wavelength fits
    between beta_fast and beta_slow turns of the original context, with magnitude
    1 + 0.1 ln(factor); LongRoPE (and llama 3's rope_freqs) divide pair i's frequency by its
    factor, LongRoPE's long factors for contexts beyond the original one. The file's
    rope.scaling.attn_factor multiplies the magnitude."""
    half = m.n_rot // 2
    extrap = m.freq_base ** (-2.0 * np.arange(half, dtype=np.float64) / m.n_rot)
    div = getattr(m, "rope_freqs", None)
    if getattr(m, "rope_long", None) is not None:
        div = m.rope_long if n_ctx > m.n_ctx_orig else m.rope_short
    if div is not None:
        extrap = extrap / div[:half]
    interp = extrap * m.freq_scale
    mag = getattr(m, "rope_attn_factor", 1.0)
    if getattr(m, "scaling", "none") != "yarn":
        return interp, mag

    def corr_dim(turns):
        return m.n_rot * np.log(m.n_ctx_orig / (turns * 2.0 * np.pi)) / (2.0 * np.log(m.freq_base))
    low = max(np.floor(corr_dim(m.yarn_beta_fast)), 0.0)
    high = min(np.ceil(corr_dim(m.yarn_beta_slow)), m.n_rot - 1.0)
    if high == low:
        high += 0.001
    ramp = np.clip((np.arange(half, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = (1.0 - ramp) * m.yarn_ext  # weight of the unscaled (extrapolated) frequency
    if m.yarn_ext != 0.0 and m.rope_factor > 1.0:
        mag = mag * (1.0 + 0.1 * np.log(m.rope_factor))
    return interp * (1.0 - keep) + extrap * keep, mag


def rope(x, pos, m, n_ctx, local=False):
    """x: (n, heads, head_dim); rotates the first n_rot dims of each head by position (local:
    with gemma3's sliding layers' own base, no scaling)."""
    if local:
        freqs, mag = m.freq_base_swa ** (-2.0 * np.arange(m.n_rot // 2, dtype=np.float64) / m.n_rot), 1.0
    else:
        freqs, mag = inv_freqs(m, n_ctx)
    theta = np.asarray(pos, dtype=np.float64)[:, None] * freqs[None, :]
    c = (mag * np.cos(theta))[:, None, :].astype(x.dtype)
    s = (mag * np.sin(theta))[:, None, :].astype(x.dtype)
    half = m.n_rot // 2
    y = x.copy()
    if m.neox:
        a, b = x[..., :half], x[..., half:m.n_rot]
        y[..., :half] = a * c - b * s
        y[..., half:m.n_rot] = a * s + b * c
    else:
        a, b = x[..., 0:m.n_rot:2], x[..., 1:m.n_rot:2]
        y[..., 0:m.n_rot:2] = a * c - b * s
        y[..., 1:m.n_rot:2] = a * s + b * c
    return y


def proj(h, L, name):
    y = h @ L[name].T
    return y + L[name + ".bias"] if name + ".bias" in L else y


def head_norm(y, L, name, eps):
    """qwen3's (gemma3's) RMSNorm of every head of y (n, heads, head_dim) on its own, when the layer has one."""
    return rmsnorm(y, L[name], eps) if name in L else y


def branch(x, y, L, post, eps, scale=1.0):
    """The residual add of a branch's output y, through gemma2's (gemma3's) post-branch norm when it has one,
    times granite's residual scale."""
    return x + scale * (rmsnorm(y, L[post], eps) if post in L else y)


def forward(m, tokens, n_ctx=None):
    """Logits (len(tokens), n_vocab) of a chain starting at position 0, in a context of n_ctx
    positions (default: the chain's length; LongRoPE's choice of factors depends on it)."""
    n = len(tokens)
    n_ctx = n if n_ctx is None else n_ctx
    pos = np.arange(n)
    x = m.tok_embd[np.asarray(tokens)] * m.embd_scale
    group = m.n_head // m.n_head_kv
    causal = np.triu(np.full((n, n), -np.inf), 1)
    for il, L in enumerate(m.layers):
        mask = causal.copy()
        if m.windows[il] > 0:  # keys at positions <= p - window are out of the window
            mask[pos[:, None] - pos[None, :] >= m.windows[il]] = -np.inf
        h = rmsnorm(x, L["attn_norm"], m.eps)
        q = head_norm(proj(h, L, "attn_q").reshape(n, m.n_head, m.head_dim), L, "attn_q_norm", m.eps)
        k = head_norm(proj(h, L, "attn_k").reshape(n, m.n_head_kv, m.head_dim), L, "attn_k_norm", m.eps)
        local = m.freq_base_swa > 0 and m.windows[il] > 0
        if not m.no_rope[il]:
            q, k = rope(q, pos, m, n_ctx, local), rope(k, pos, m, n_ctx, local)
        v = proj(h, L, "attn_v").reshape(n, m.n_head_kv, m.head_dim)
        att = np.empty((n, m.n_head, m.head_dim), dtype=x.dtype)
        for hq in range(m.n_head):
            g = hq // group
            s = q[:, hq, :] @ k[:, g, :].T * m.q_scale
            if m.attn_cap > 0:
                s = m.attn_cap * np.tanh(s / m.attn_cap)
            s = np.exp(s + mask - (s + mask).max(axis=1, keepdims=True))
            att[:, hq, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, g, :]
        x = branch(x, att.reshape(n, -1) @ L["attn_output"].T, L, "post_attention_norm", m.eps, m.residual_scale)
        h = rmsnorm(x, L["ffn_norm"], m.eps)
        gate = h @ L["ffn_gate"].T
        if m.gelu:
            act = 0.5 * gate * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (gate + 0.044715 * gate ** 3)))
        else:
            act = gate / (1.0 + np.exp(-gate))
        x = branch(x, (act * (h @ L["ffn_up"].T)) @ L["ffn_down"].T, L, "post_ffw_norm", m.eps, m.residual_scale)
    logits = rmsnorm(x, m.output_norm, m.eps) @ m.output.T / m.logit_scale
    if m.final_cap > 0:
        logits = m.final_cap * np.tanh(logits / m.final_cap)
    return logits


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-4].strip(), file=sys.stderr)
        return 1
    m = Model(argv[1])
    logits = forward(m, [int(t) for t in argv[2:]])
    print(" ".join(str(int(i)) for i in logits.argmax(axis=1)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
