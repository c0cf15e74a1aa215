"""model.py: the models edgespec runs (llama and the architectures of ARCHS), with Speculative
Streaming, in PyTorch.

The main stream is exactly the forward pass of edgespec's C library (and llama.cpp's "llama"
graph): token embedding; per block RMSNorm (eps from metadata), attention with RoPE in NORM
ordering (adjacent pairs (x[2i], x[2i+1]) rotated, theta_i = pos * base^(-2i/n_rot)), grouped
query heads (query head h reads key/value head h // (n_head / n_head_kv)), SwiGLU feed-forward;
final RMSNorm and a tied or separate output head. Linear weights are stored (out, in) as GGUF
stores them (ne[0] = in), so export needs no transposes and no Q/K permutation.

The other architectures (Config.arch; docs/formats.md, "Architectures") differ from llama as
llama.cpp runs them, and every difference applies to the streams as to the main stream:
  - qwen2: Q, K and V projections with biases; NEOX RoPE (pairs (x[i], x[i + n_rot/2]));
  - qwen3: qwen2 without the biases, with an RMSNorm of every Q and K head on its own (over
    head_dim, one weight vector per layer for all heads, the model's eps) before RoPE;
  - phi3: llama with NEOX RoPE here (its fused attn_qkv and gate-up tensors are split at load and
    fused again at export, export.py);
  - gemma: embedding rows times sqrt(n_embd), GeGLU (gelu's tanh form) instead of SwiGLU, NEOX
    (its GGUF norm weights already hold gemma's 1 + w, so the norm is the plain one);
  - gemma2: gemma plus an RMSNorm of each branch's output before its residual add, attention
    scores and final logits soft-capped c tanh(x / c), and a sliding window on even layers;
  - gemma3: gemma2's post norms without the soft-capping, qwen3's head norms, five sliding layers
    to one global, the sliding ones rotating with their own unscaled base (Config.rope_base_swa);
  - smollm3: llama whose layers il with (il + 1) % 4 == 0 (3, 7, 11, ...) take no RoPE at all
    (llama.cpp's n_no_rope_layer_step; no GGUF key says it), for the stream rows as for the main;
  - granite: llama with four multipliers from its required keys (Config.embedding_scale,
    attention_scale, residual_scale, logit_scale): the embedding rows times embedding_scale, the
    attention scores times attention_scale (0: the usual head_dim^-1/2), each branch's output
    (W_o's, ffn_down's) times residual_scale before its residual add, the logits divided by
    logit_scale; the stream rows take each step of their layers, and the streams' and the early
    exit's logits the same division.
RoPE scaling (any architecture, as the file asks and the C library's lib/core/rope.c computes it):
linear (positions times 1 / factor), YaRN (the slow pairs interpolated, the fast ones kept, over a
ramp, and cos and sin times 1 + 0.1 ln(factor)), llama 3's per-pair divisors (rope_freqs.weight)
and phi3's LongRoPE (rope_factors_long/short.weight, the long ones when the run covers more
positions than the original context, as the C library's choice by its context size); the file's
rope.scaling.attn_factor multiplies cos and sin. gemma3's sliding layers keep their own unscaled
RoPE. The scaling is frozen: nothing of it trains.
Config.n_swa (any architecture): a query at position p sees keys at positions > p - n_swa in the
sliding layers. The early exit and the streams go through the same (scaled, soft-capped) head.

Speculative Streaming (papers/speculative-streaming.txt, 3.2):
  - gamma stream identifier embeddings P_j; stream j at position t starts at the input of block
    N - Ns as M_t + P_j (Eq. 3 with identity f_eta, as in A.2);
  - in the last Ns blocks (MSA) stream j at t attends to the main stream's keys/values at
    positions <= t and to the keys/values of streams 1..j at t (Eq. 2); stream rows use position t
    for RoPE; streams write no KV, so the main stream is unaffected by them;
  - stream j's final hidden state predicts token t + 1 + j through the shared head;
  - the tree-pruning early exit (3.2.3): e = h + up(down(h)) for the main hidden state h at the
    input of block prune_layer, logits = head(final_norm(e)); rank prune_rank;
  - optional stream-only LoRA in the MSA blocks: y = W x + B (A x) for stream rows only, so the
    main stream's outputs stay those of the base model.

Deliberately not here: training loops (train.py), file formats (export.py), tree drafting and
verification (the C library's job; evaluate.py only simulates acceptance).
"""

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LORA_TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")

# What each architecture does beyond llama, as llama's values changed (lib/core/arch.c has the C
# library's own table).
# swa_pattern: with a window, layer i slides iff i % p < p - 1 (1: every layer; 2: even layers).
# swa_rope_base > 0: the sliding layers rotate with a RoPE of their own, unscaled, this base unless
# the file gives <arch>.rope.freq_base_swa (and the window is required). qscale_layers: a model of
# this many layers scales queries by (n_embd / n_head)^-1/2, not head_dim^-1/2 (GGUF files do not
# say; llama.cpp knows Gemma 2 27B and Gemma 3 27B by their depth). nope_step > 0: layer i takes
# no RoPE where (i + 1) % nope_step == 0 (smollm3's 4: layers 3, 7, 11, ...; no GGUF key says it).
# mup: granite's four multipliers, read from <arch>.embedding_scale, attention.scale,
# residual_scale and logit_scale (Config.embedding_scale ...); every other architecture has none.
LLAMA = dict(neox=False, qkv_bias=False, fused=False, embd_scale=False, gelu=False, post_norms=False, swa_pattern=1,
             softcap=False, qk_norm=False, swa_rope_base=0.0, qscale_layers=0, nope_step=0, mup=False)
ARCHS = {
    "llama": LLAMA,
    "qwen2": dict(LLAMA, neox=True, qkv_bias=True),
    "qwen3": dict(LLAMA, neox=True, qk_norm=True),
    "phi3": dict(LLAMA, neox=True, fused=True),
    "gemma": dict(LLAMA, neox=True, embd_scale=True, gelu=True),
    "gemma2": dict(LLAMA, neox=True, embd_scale=True, gelu=True, post_norms=True, swa_pattern=2, softcap=True,
                   qscale_layers=46),
    "gemma3": dict(LLAMA, neox=True, embd_scale=True, gelu=True, post_norms=True, swa_pattern=6, qk_norm=True,
                   swa_rope_base=10000.0, qscale_layers=62),
    "smollm3": dict(LLAMA, nope_step=4),
    "granite": dict(LLAMA, mup=True),
}


@dataclasses.dataclass
class Config:
    n_vocab: int = 2048
    n_embd: int = 256
    n_layer: int = 6
    n_head: int = 4
    n_head_kv: int = 0         # 0 = n_head
    n_ff: int = 704
    n_ctx: int = 512           # context length recorded as llama.context_length
    head_dim: int = 0          # 0 = n_embd // n_head
    n_rot: int = 0             # rotary dims per head; 0 = head_dim
    rms_eps: float = 1e-5
    rope_base: float = 10000.0
    tied: bool = True
    # architecture (ARCHS); None: the architecture's own RoPE pairing
    arch: str = "llama"
    rope_neox: bool = None
    n_swa: int = 0             # sliding window (0 = none)
    attn_softcap: float = 0.0  # attention scores c tanh(s / c) (0 = none)
    final_softcap: float = 0.0 # logits c tanh(l / c) (0 = none)
    rope_base_swa: float = 0.0 # the sliding layers' own RoPE base, as the file gives it (0 = the
                               # architecture's default, ARCHS swa_rope_base, where it has one)
    # granite's multipliers (ARCHS mup; 1, 0, 1, 1 for the others, which have none)
    embedding_scale: float = 1.0  # embedding rows times this
    attention_scale: float = 0.0  # attention scores times this (0: q_scalar^-1/2)
    residual_scale: float = 1.0   # each branch's output times this before its residual add
    logit_scale: float = 1.0      # logits divided by this
    # RoPE scaling, as the file gives it (export.py reads and writes the keys and tensors)
    rope_scaling: str = "none"    # rope.scaling.type: none, linear, yarn or longrope
    rope_factor: float = 0.0      # rope.scaling.factor (linear, yarn)
    rope_n_ctx_orig: int = 0      # rope.scaling.original_context_length (0: absent, n_ctx)
    rope_attn_factor: float = 0.0 # rope.scaling.attn_factor: cos and sin times it (0: absent, 1)
    yarn_ext_factor: float = 1.0  # YaRN's weight of the extrapolated angle
    yarn_beta_fast: float = 32.0  # YaRN's ramp: the pairs that turn between beta_fast and
    yarn_beta_slow: float = 1.0   # beta_slow times in the original context
    rope_freqs: tuple = ()        # llama 3's per-pair divisors (rope_freqs.weight), or ()
    rope_long: tuple = ()         # LongRoPE's per-pair divisors (rope_factors_long/short.weight)
    rope_short: tuple = ()
    # Speculative Streaming
    n_streams: int = 0         # gamma; 0 = plain model
    n_msa: int = 0             # Ns: MSA blocks at the top
    prune_layer: int = -1      # block whose input feeds the early exit; -1 = n_layer - n_msa
    prune_rank: int = 8        # 0 = no pruning adapter
    lora_rank: int = 0         # stream-only LoRA rank in MSA blocks; 0 = none
    lora_targets: tuple = LORA_TARGETS

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError("architecture %r, expected one of %s" % (self.arch, sorted(ARCHS)))
        if self.rope_neox is None:
            self.rope_neox = ARCHS[self.arch]["neox"]
        if self.n_head_kv == 0:
            self.n_head_kv = self.n_head
        if self.head_dim == 0:
            self.head_dim = self.n_embd // self.n_head
        if self.n_rot == 0:
            self.n_rot = self.head_dim
        self.lora_targets = tuple(self.lora_targets)
        self._check_rope_scaling()
        if self.n_streams > 0:
            if not 1 <= self.n_msa <= self.n_layer:
                raise ValueError("n_msa must be in [1, n_layer] when n_streams > 0")
        else:
            self.n_msa = 0
            self.lora_rank = 0
        if self.prune_layer < 0:
            self.prune_layer = self.n_layer - self.n_msa if self.n_streams > 0 else self.n_layer
        if self.prune_rank > 0 and not 0 <= self.prune_layer <= self.n_layer:
            raise ValueError("prune_layer must be in [0, n_layer]")
        if self.n_head % self.n_head_kv:
            raise ValueError("n_head must be a multiple of n_head_kv")
        if self.n_rot % 2 or self.n_rot > self.head_dim:
            raise ValueError("n_rot must be even and <= head_dim")
        if self.a["swa_rope_base"] > 0 and self.n_swa <= 0:  # as the C library (lib/core/model.c)
            raise ValueError("%s needs a sliding window (n_swa > 0)" % self.arch)
        if self.rope_base_swa and not self.a["swa_rope_base"]:
            raise ValueError("%s has no RoPE of its own for the sliding layers" % self.arch)
        mup = (self.embedding_scale, self.attention_scale, self.residual_scale, self.logit_scale)
        if not self.a["mup"] and mup != (1.0, 0.0, 1.0, 1.0):
            raise ValueError("%s has no embedding, attention, residual or logit multipliers" % self.arch)
        # as the C library (lib/core/model.c read_mup_scales): positive, the attention's 0 allowed
        if not all(math.isfinite(v) and v > 0 for v in mup[:1] + mup[2:]) or not (
                math.isfinite(self.attention_scale) and self.attention_scale >= 0):
            raise ValueError("%s multipliers %s: expected positive finite numbers (attention's 0: "
                             "head_dim^-1/2)" % (self.arch, mup))
        bad = [t for t in self.lora_targets if t not in LORA_TARGETS]
        if bad:
            raise ValueError("unknown LoRA targets %s" % bad)

    def _check_rope_scaling(self):
        """The scaling's fields agree with each other, as the C library reads them (model.c)."""
        self.rope_freqs, self.rope_long, self.rope_short = (
            tuple(float(v) for v in t) for t in (self.rope_freqs, self.rope_long, self.rope_short))
        if self.rope_scaling not in ("none", "linear", "yarn", "longrope"):
            raise ValueError("RoPE scaling %r, expected none, linear, yarn or longrope" % self.rope_scaling)
        if (self.rope_scaling in ("linear", "yarn")) != (self.rope_factor > 0):
            raise ValueError("RoPE scaling %r with factor %g" % (self.rope_scaling, self.rope_factor))
        if (self.rope_scaling == "longrope" and not self.rope_long) or bool(self.rope_long) != bool(self.rope_short):
            raise ValueError("LongRoPE needs its long and its short factors")
        if self.rope_freqs and self.rope_long:
            raise ValueError("rope_freqs together with LongRoPE's factors: two sets of per-pair divisors")
        for t in (self.rope_freqs, self.rope_long, self.rope_short):
            if t and (len(t) != self.n_rot // 2 or not all(math.isfinite(v) and v > 0 for v in t)):
                raise ValueError("per-pair RoPE divisors: %d values, expected n_rot / 2 = %d positive ones"
                                 % (len(t), self.n_rot // 2))

    @property
    def msa_start(self):
        return self.n_layer - self.n_msa

    @property
    def a(self):
        """The architecture's row of ARCHS."""
        return ARCHS[self.arch]

    def window(self, il):
        """Layer il's sliding window (0: the whole context)."""
        p = self.a["swa_pattern"]
        return self.n_swa if self.n_swa > 0 and (p <= 1 or il % p < p - 1) else 0

    def rope_local(self, il):
        """Whether layer il rotates with the sliding layers' own RoPE (gemma3's local layers)."""
        return self.a["swa_rope_base"] > 0 and self.window(il) > 0

    def rope_none(self, il):
        """Whether layer il takes no RoPE at all (ARCHS nope_step: smollm3's every fourth layer)."""
        step = self.a["nope_step"]
        return step > 0 and (il + 1) % step == 0

    def rope_kind(self, il):
        """Layer il's RoPE: None (none), True (the sliding layers' own) or False (the model's)."""
        return None if self.rope_none(il) else self.rope_local(il)

    @property
    def local_rope_base(self):
        return self.rope_base_swa or self.a["swa_rope_base"]

    @property
    def q_scalar(self):
        """Queries are scaled by this to the -1/2 (ARCHS qscale_layers)."""
        big = self.n_layer == self.a["qscale_layers"]
        return self.n_embd // self.n_head if big else self.head_dim

    def scale_scores(self, s):
        """Attention scores q.k scaled: times attention_scale (granite) or over sqrt(q_scalar)."""
        return s * self.attention_scale if self.attention_scale > 0 else s / math.sqrt(self.q_scalar)

    def base_dict(self):
        keys = ("n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "n_ctx",
                "head_dim", "n_rot", "rms_eps", "rope_base", "tied", "arch", "rope_neox", "n_swa",
                "attn_softcap", "final_softcap", "rope_base_swa", "embedding_scale", "attention_scale",
                "residual_scale", "logit_scale", "rope_scaling", "rope_factor", "rope_n_ctx_orig",
                "rope_attn_factor", "yarn_ext_factor", "yarn_beta_fast", "yarn_beta_slow", "rope_freqs",
                "rope_long", "rope_short")
        return {k: getattr(self, k) for k in keys}


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def softcap(x, c):
    """gemma2's soft-capping c tanh(x / c); c = 0: x unchanged."""
    return c * torch.tanh(x / c) if c > 0 else x


def rope_tables(n_rot, base, positions, dtype):
    """cos/sin of theta_i = pos * base^(-2i/n_rot), i < n_rot/2, computed in float64."""
    inv = base ** (-torch.arange(0, n_rot, 2, dtype=torch.float64) / n_rot)  # (n_rot/2)
    ang = positions.to(torch.float64)[:, None] * inv[None, :]                 # (T, n_rot/2)
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def scaled_rope_tables(c, positions, n_ctx, dtype):
    """cos/sin of the model's RoPE with its scaling (Config.rope_*), in a context of n_ctx
    positions (LongRoPE's choice of factors), computed in float64 as lib/core/rope.c does: pair i
    turns by theta_e = pos base^(-2i/n_rot) / div_i extrapolated, s theta_e interpolated (s = 1 /
    factor), YaRN blending the two over its ramp; cos and sin times the magnitude."""
    orig = c.rope_n_ctx_orig or c.n_ctx
    i = torch.arange(c.n_rot // 2, dtype=torch.float64)
    div = c.rope_freqs or (c.rope_long if n_ctx > orig else c.rope_short)
    inv = c.rope_base ** (-2.0 * i / c.n_rot) / (torch.tensor(div, dtype=torch.float64) if div else 1.0)
    extrap = positions.to(torch.float64)[:, None] * inv[None, :]  # (T, n_rot/2)
    s = 1.0 / c.rope_factor if c.rope_factor > 0 else 1.0
    ang = extrap * s
    mag = c.rope_attn_factor if c.rope_attn_factor > 0 else 1.0
    if c.rope_scaling == "yarn":
        def corr_dim(turns):  # the pair whose wavelength fits `turns` turns into the original context
            return c.n_rot * math.log(orig / (turns * 2.0 * math.pi)) / (2.0 * math.log(c.rope_base))
        lo = max(0.0, math.floor(corr_dim(c.yarn_beta_fast)))
        hi = min(c.n_rot - 1.0, math.ceil(corr_dim(c.yarn_beta_slow)))
        mix = (1.0 - ((i - lo) / max(0.001, hi - lo)).clamp(0.0, 1.0)) * c.yarn_ext_factor
        ang = ang * (1.0 - mix) + extrap * mix
        if c.yarn_ext_factor != 0.0 and c.rope_factor > 1.0:
            mag *= 1.0 + 0.1 * math.log(c.rope_factor)
    return (torch.cos(ang) * mag).to(dtype), (torch.sin(ang) * mag).to(dtype)


def apply_rope(x, cos, sin, n_rot, neox=False):
    """NORM ordering: pairs (x[2i], x[2i+1]) rotated by theta_i; with neox, NEOX ordering: pairs
    (x[i], x[i + n_rot/2]). x (..., T, H, head_dim); cos/sin (T, n_rot/2). NORM is written as
    x * cos + swap(x) * sin, swap(x) = (-x[2i+1], x[2i]) per pair, which keeps the backward pass
    free of strided-slice scatters."""
    hd = x.shape[-1]
    xr = x if n_rot == hd else x[..., :n_rot]
    if neox:
        c, s, half = cos[:, None, :], sin[:, None, :], n_rot // 2
        a, b = xr[..., :half], xr[..., half:]
        rot = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
        return rot if n_rot == hd else torch.cat((rot, x[..., n_rot:]), dim=-1)
    c = cos.repeat_interleave(2, dim=-1)[:, None, :]        # (T, 1, n_rot)
    s = sin.repeat_interleave(2, dim=-1)[:, None, :]
    sign = torch.tensor([-1.0, 1.0], dtype=x.dtype, device=x.device)
    pairs = xr.reshape(*xr.shape[:-1], n_rot // 2, 2)
    swap = (pairs.flip(-1) * sign).reshape(xr.shape)
    rot = xr * c + swap * s
    if n_rot == hd:
        return rot
    return torch.cat((rot, x[..., n_rot:]), dim=-1)


class LoRA(nn.Module):
    """Low-rank delta B (A x) applied to stream rows only. B starts at zero (no change)."""

    def __init__(self, n_in, n_out, rank):
        super().__init__()
        self.a = nn.Parameter(torch.randn(rank, n_in) / math.sqrt(n_in))  # (rank, n_in)
        self.b = nn.Parameter(torch.zeros(n_out, rank))                    # (n_out, rank)

    def forward(self, x):
        return F.linear(F.linear(x, self.a), self.b)


class Block(nn.Module):
    def __init__(self, cfg, msa):
        super().__init__()
        c = cfg
        self.cfg = c
        d, hd = c.n_embd, c.head_dim
        self.attn_norm = nn.Parameter(torch.ones(d))
        bias = c.a["qkv_bias"]
        self.attn_q = nn.Linear(d, c.n_head * hd, bias=bias)
        self.attn_k = nn.Linear(d, c.n_head_kv * hd, bias=bias)
        self.attn_v = nn.Linear(d, c.n_head_kv * hd, bias=bias)
        self.attn_output = nn.Linear(c.n_head * hd, d, bias=False)
        self.ffn_norm = nn.Parameter(torch.ones(d))
        self.ffn_gate = nn.Linear(d, c.n_ff, bias=False)
        self.ffn_up = nn.Linear(d, c.n_ff, bias=False)
        self.ffn_down = nn.Linear(c.n_ff, d, bias=False)
        if c.a["qk_norm"]:
            self.attn_q_norm = nn.Parameter(torch.ones(hd))  # (hd), shared by all Q heads
            self.attn_k_norm = nn.Parameter(torch.ones(hd))  # (hd), shared by all K heads
        if c.a["post_norms"]:
            self.post_attention_norm = nn.Parameter(torch.ones(d))
            self.post_ffw_norm = nn.Parameter(torch.ones(d))
        self.lora = nn.ModuleDict()
        if msa and c.lora_rank > 0:
            for name in c.lora_targets:
                lin = getattr(self, name)
                self.lora[name] = LoRA(lin.in_features, lin.out_features, c.lora_rank)

    def _proj(self, name, x, stream):
        y = getattr(self, name)(x)
        if stream and name in self.lora:
            y = y + self.lora[name](x)
        return y

    def _branch(self, x, y, post):
        """The residual add of a branch's output y, through gemma2's post-branch norm, times
        granite's residual scale."""
        if self.cfg.a["post_norms"]:
            y = rms_norm(y, getattr(self, post), self.cfg.rms_eps)
        if self.cfg.residual_scale != 1.0:
            y = y * self.cfg.residual_scale
        return x + y

    def _ffn(self, x, stream):
        h = rms_norm(x, self.ffn_norm, self.cfg.rms_eps)
        g = self._proj("ffn_gate", h, stream)
        u = self._proj("ffn_up", h, stream)
        act = F.gelu(g, approximate="tanh") if self.cfg.a["gelu"] else F.silu(g)
        return self._branch(x, self._proj("ffn_down", act * u, stream), "post_ffw_norm")

    def _qkv(self, x, stream, cos, sin):
        c = self.cfg
        h = rms_norm(x, self.attn_norm, c.rms_eps)
        shp = x.shape[:-1]
        q = self._proj("attn_q", h, stream).view(*shp, c.n_head, c.head_dim)
        k = self._proj("attn_k", h, stream).view(*shp, c.n_head_kv, c.head_dim)
        v = self._proj("attn_v", h, stream).view(*shp, c.n_head_kv, c.head_dim)
        if c.a["qk_norm"]:  # qwen3: each head normalised on its own, before RoPE
            q = rms_norm(q, self.attn_q_norm, c.rms_eps)
            k = rms_norm(k, self.attn_k_norm, c.rms_eps)
        nx = c.rope_neox
        if cos is None:  # a layer without RoPE (smollm3's every fourth)
            return q, k, v
        if stream:  # (B, T, G, H, hd): RoPE by the stream's node position t
            q = apply_rope(q.transpose(1, 2), cos, sin, c.n_rot, nx).transpose(1, 2)
            k = apply_rope(k.transpose(1, 2), cos, sin, c.n_rot, nx).transpose(1, 2)
        else:       # (B, T, H, hd)
            q = apply_rope(q, cos, sin, c.n_rot, nx)
            k = apply_rope(k, cos, sin, c.n_rot, nx)
        return q, k, v

    def _expand_kv(self, t, dim):
        rep = self.cfg.n_head // self.cfg.n_head_kv
        return t if rep == 1 else t.repeat_interleave(rep, dim=dim)

    def forward_main(self, x, cos, sin, mask):
        """x (B, T, d). Returns the block's output and the main stream's keys/values per query
        head, (B, H, T, hd) each, which the streams attend to."""
        c = self.cfg
        B, T, _ = x.shape
        q, k, v = self._qkv(x, False, cos, sin)
        qh = q.transpose(1, 2)                                  # (B, H, T, hd)
        kh = self._expand_kv(k.transpose(1, 2), 1)              # (B, H, T, hd)
        vh = self._expand_kv(v.transpose(1, 2), 1)
        att = c.scale_scores(torch.matmul(qh, kh.transpose(-1, -2)))  # (B, H, T, T)
        att = softcap(att, c.attn_softcap).masked_fill(mask, float("-inf")).softmax(-1)
        o = torch.matmul(att, vh).transpose(1, 2).reshape(B, T, -1)
        return self._ffn(self._branch(x, self.attn_output(o), "post_attention_norm"), False), kh, vh

    def forward_streams(self, s, kh, vh, cos, sin, mask):
        """Eq. 2: stream j at t attends to main K/V at <= t and to streams <= j at t.
        s (B, P, G, d): the streams of P positions; kh, vh (B, H, T, hd) from forward_main;
        cos/sin (P, n_rot/2) at the streams' positions; mask (P, T) true where the main key is
        in the future. Returns the streams' output (B, P, G, d)."""
        c = self.cfg
        B, P, G, _ = s.shape
        T = kh.shape[2]
        qs, ks, vs = self._qkv(s, True, cos, sin)              # (B, P, G, H*, hd)
        qs = qs.permute(0, 3, 1, 2, 4)                          # (B, H, P, G, hd)
        ks = self._expand_kv(ks.permute(0, 3, 1, 2, 4), 1)      # (B, H, P, G, hd)
        vs = self._expand_kv(vs.permute(0, 3, 1, 2, 4), 1)
        scale = c.attention_scale if c.attention_scale > 0 else 1.0 / math.sqrt(c.q_scalar)
        sm = softcap(torch.matmul(qs.reshape(B, c.n_head, P * G, -1), kh.transpose(-1, -2)) * scale,
                     c.attn_softcap)
        sm = sm.view(B, c.n_head, P, G, T).masked_fill(mask[:, None, :], float("-inf"))
        # Stream-to-stream scores are G x G per (t, head): elementwise beats tiny batched matmuls.
        ss = softcap((qs.unsqueeze(-2) * ks.unsqueeze(-3)).sum(-1) * scale, c.attn_softcap)  # (B, H, P, G, G)
        smask = torch.ones(G, G, dtype=torch.bool, device=s.device).triu(1)
        ss = ss.masked_fill(smask, float("-inf"))
        # One softmax over the union of both key sets, without materialising their concatenation.
        mx = torch.maximum(sm.amax(-1, keepdim=True), ss.amax(-1, keepdim=True)).detach()
        em = (sm - mx).exp()                                    # (B, H, P, G, T)
        es = (ss - mx).exp()                                    # (B, H, P, G, G)
        den = em.sum(-1, keepdim=True) + es.sum(-1, keepdim=True)
        o = torch.matmul(em.reshape(B, c.n_head, P * G, T), vh).view(B, c.n_head, P, G, -1)
        o = (o + (es.unsqueeze(-1) * vs.unsqueeze(-3)).sum(-2)) / den  # (B, H, P, G, hd)
        o = o.permute(0, 2, 3, 1, 4).reshape(B, P, G, -1)
        return self._ffn(self._branch(s, self._proj("attn_output", o, True), "post_attention_norm"), True)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        c = cfg
        self.token_embd = nn.Embedding(c.n_vocab, c.n_embd)
        self.blocks = nn.ModuleList(
            [Block(c, i >= c.msa_start and c.n_streams > 0) for i in range(c.n_layer)])
        self.output_norm = nn.Parameter(torch.ones(c.n_embd))
        self.output = None if c.tied else nn.Linear(c.n_embd, c.n_vocab, bias=False)
        if c.n_streams > 0:
            self.stream_embd = nn.Parameter(torch.randn(c.n_streams, c.n_embd) * 0.02)  # (G, d)
        else:
            self.stream_embd = None
        if c.prune_rank > 0 and c.n_streams > 0:
            self.prune_down = nn.Linear(c.n_embd, c.prune_rank, bias=False)  # (r, d)
            self.prune_up = nn.Linear(c.prune_rank, c.n_embd, bias=False)    # (d, r)
            nn.init.normal_(self.prune_down.weight, std=1.0 / math.sqrt(c.n_embd))
            nn.init.zeros_(self.prune_up.weight)
        else:
            self.prune_down = self.prune_up = None
        self._init_base()

    def _init_base(self):
        std = 0.02
        nn.init.normal_(self.token_embd.weight, std=std)
        for b in self.blocks:
            for name in ("attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"):
                nn.init.normal_(getattr(b, name).weight, std=std)
            for name in ("attn_output", "ffn_down"):
                nn.init.normal_(getattr(b, name).weight, std=std / math.sqrt(2 * self.cfg.n_layer))
        if self.output is not None:
            nn.init.normal_(self.output.weight, std=std)

    def head_weight(self):
        return self.token_embd.weight if self.output is None else self.output.weight

    def base_parameters(self):
        """Parameters of the base llama model (what base GGUF export writes)."""
        skip = {id(p) for p in self.ss_parameters()}
        return [p for p in self.parameters() if id(p) not in skip]

    def ss_parameters(self):
        """Parameters of the Speculative Streaming adapter (stream embeddings, pruning, LoRA)."""
        ps = []
        if self.stream_embd is not None:
            ps.append(self.stream_embd)
        if self.prune_down is not None:
            ps += [self.prune_down.weight, self.prune_up.weight]
        for b in self.blocks:
            ps += list(b.lora.parameters())
        return ps

    def forward(self, tokens, pos0=0, want_streams=True, want_prune=True, freeze_base=False,
                stream_pos=None):
        """tokens (B, T) at positions pos0..pos0+T-1 (a chain, no KV cache).

        Returns a dict: 'logits' (B, T, V) main stream; 'stream_logits' (B, P, G, V) where stream
        j (1-based) at window offset t predicts token t+1+j; 'prune_logits' (B, P, V) early exit,
        at the P window offsets stream_pos (sorted LongTensor; None = all T). Training samples a
        subset of positions for the streams and the exit to save compute. With freeze_base the
        base model runs without gradients (SS-only fine-tuning): only adapter tensors train.
        """
        c = self.cfg
        B, T = tokens.shape
        dev = tokens.device
        dt = self.token_embd.weight.dtype
        mask = torch.ones(T, T, dtype=torch.bool, device=dev).triu(1)   # (T, T) future keys
        sp = torch.arange(T, device=dev) if stream_pos is None else stream_pos
        ropes = self._ropes(torch.arange(pos0, pos0 + T, device=dev), sp, dt)
        smask = torch.arange(T, device=dev)[None, :] > sp[:, None]       # (P, T)
        masks = {0: (mask, smask)}
        if c.n_swa > 0:  # sliding layers also hide keys at positions <= p - n_swa
            ar = torch.arange(T, device=dev)
            masks[c.n_swa] = (mask | (ar[:, None] - ar[None, :] >= c.n_swa),
                              smask | (sp[:, None] - ar[None, :] >= c.n_swa))
        streams = want_streams and c.n_streams > 0
        grad_base = torch.is_grad_enabled() and not freeze_base
        out = {}
        with torch.set_grad_enabled(grad_base):
            x = self.token_embd(tokens)
            if c.a["embd_scale"]:
                x = x * math.sqrt(c.n_embd)
            if c.embedding_scale != 1.0:  # granite
                x = x * c.embedding_scale
        s = None
        for i, b in enumerate(self.blocks):
            if i == c.prune_layer and want_prune and self.prune_down is not None:
                out["prune_logits"] = self.prune_logits(x[:, sp].detach())
            if streams and i == c.msa_start:
                xs = x[:, sp].detach() if freeze_base else x[:, sp]
                s = xs.unsqueeze(2) + self.stream_embd                    # Eq. 3, identity f_eta
            lmask, lsmask = masks[c.window(i)]
            cos, sin, scos, ssin = ropes[c.rope_kind(i)]
            with torch.set_grad_enabled(grad_base):
                x_new, kh, vh = b.forward_main(x, cos, sin, lmask)
            if s is not None:
                s = b.forward_streams(s, kh, vh, scos, ssin, lsmask)
            x = x_new
        if c.prune_layer == c.n_layer and want_prune and self.prune_down is not None:
            out["prune_logits"] = self.prune_logits(x[:, sp].detach())
        w = self.head_weight()
        with torch.set_grad_enabled(grad_base):
            out["logits"] = self.finish(F.linear(rms_norm(x, self.output_norm, c.rms_eps), w))
        if s is not None:
            hn = rms_norm(s, self.output_norm.detach() if freeze_base else self.output_norm, c.rms_eps)
            out["stream_logits"] = self.finish(F.linear(hn, w.detach() if freeze_base else w))
        return out

    def finish(self, logits):
        """The head's last steps, for the main stream, the streams and the early exit alike: the
        logits over granite's logit_scale, then gemma2's soft-capping."""
        c = self.cfg
        if c.logit_scale != 1.0:
            logits = logits / c.logit_scale
        return softcap(logits, c.final_softcap)

    def _ropes(self, pos, sp, dt):
        """{kind: (cos, sin) at positions pos (T), the same at the streams' offsets sp (P)}, for
        the model's RoPE (False), the sliding layers' own where the model has one (True) and none
        (None: four Nones, for the layers without RoPE; Config.rope_kind): a stream row takes its
        layer's RoPE as the main stream's row does."""
        c = self.cfg
        tables = {False: scaled_rope_tables(c, pos, int(pos[-1]) + 1, dt)}
        if c.a["swa_rope_base"] > 0:
            tables[True] = rope_tables(c.n_rot, c.local_rope_base, pos, dt)
        out = {None: (None, None, None, None)}
        for local, (cos, sin) in tables.items():
            out[local] = (cos, sin, cos[sp], sin[sp])
        return out

    def prune_logits(self, h):
        """3.2.3 early exit: head(final_norm(h + up(down(h)))); the head is not trained by it."""
        e = h + self.prune_up(self.prune_down(h))
        return self.finish(F.linear(rms_norm(e, self.output_norm.detach(), self.cfg.rms_eps),
                                    self.head_weight().detach()))
