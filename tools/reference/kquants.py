"""kquants.py: ggml's K-quant super-blocks (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and the 32-element blocks
of IQ4_NL, Q4_1, Q5_0 and Q5_1 (and IQ4_XS, IQ4_NL's blocks under a super-block scale) decoded in numpy, written from the format description independently of
the C library (lib/core/quant_k.c, lib/core/quant_iq4.c, lib/core/quant_q5.c).

Arithmetic is float32 as ggml's reference does it: the scale products d*sc and dmin*m, then
(d*sc)*q and its difference with dmin*m, so the result equals the C dequantiser bit for bit (every
product is exact; the difference is rounded once). Halves are decoded from their bits by hand.

Layouts per 256 elements (e = element index in the super-block):
  q4_K 144 bytes: d f16, dmin f16, scales[12], qs[128];   q5_K 176: d, dmin, scales[12], qh[32], qs[128]
    sub-block j = e // 32 has a 6-bit scale and min in scales[] (see _scale_min); the 4-bit quant is
    nibble (j % 2) of qs[32 * (e // 64) + e % 32]; q5_K adds bit j of qh[e % 32] as 16.
    x = (d * sc_j) * q - dmin * m_j
  q6_K 210 bytes: ql[128], qh[64], scales[16] (int8), d f16
    x = (d * scales[e // 16]) * (q - 32), q: low nibble of ql[64h + l + 32 (g % 2)] (shifted by 4 when
    g >= 2) and 2 high bits (2g) of qh[32h + l], for h = e // 128, g = (e % 128) // 32, l = e % 32.
  q2_K 84 bytes: scales[16] (scale nibble low, min nibble high), qs[64], d f16, dmin f16
    i = e // 16; q = bits 2g..2g+1 of qs[32h + l]; x = (d * sc_i) * q - dmin * m_i
  q3_K 110 bytes: hmask[32], qs[64], scales[12], d f16
    q = (bits 2g..2g+1 of qs[32h + l]) + 4 * (bit e // 32 of hmask[l]) - 4, in -4..3;
    6-bit s_i: nibble of scales[i % 8] (low for i < 8), 2 top bits at 2 (i // 4) of scales[8 + i % 4];
    x = (d * (s_i - 32)) * q
  iq4_xs 136 bytes: d f16, scales_h u16, scales_l[4], qs[128]; sub-block j = e // 32 has the 6-bit
    ls_j = nibble (j % 2) of scales_l[j // 2] | bits 2j..2j+1 of scales_h << 4, and its nibbles in
    qs[16 j .. 16 j + 15] as iq4_nl's; x = (d * (ls_j - 32)) * GRID[nibble]
Per 32 elements:
  iq4_nl 18 bytes: d f16, qs[16]; element l < 16 low nibble of qs[l], l + 16 its high nibble;
    x = d * GRID[nibble]
  q4_1 20 bytes: d f16, m f16, qs[16]; q the nibble as iq4_nl's; x = d * q + m
  q5_0 22 bytes: d f16, qh[4], qs[16]; q the nibble plus 16 * (bit l of the little-endian qh);
    x = d * (q - 16)
  q5_1 24 bytes: d f16, m f16, qh[4], qs[16]; q as q5_0's; x = d * q + m
"""

import numpy as np

TYPES = {"q2_K": (10, 84), "q3_K": (11, 110), "q4_K": (12, 144), "q5_K": (13, 176), "q6_K": (14, 210),
         "iq4_xs": (23, 136), "iq4_nl": (20, 144), "q4_1": (3, 160), "q5_0": (6, 176), "q5_1": (7, 192)}  # name: (ggml id, bytes per 256)
B32 = {"iq4_nl": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24}  # the 32-element block types: bytes per block
GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
QK_K = 256


def f16_to_f32(lo, hi):
    """Two uint8 arrays (low, high byte) -> float32, decoded from sign, exponent and mantissa."""
    h = lo.astype(np.uint32) | (hi.astype(np.uint32) << 8)
    sign = np.where(h >> 15, -1.0, 1.0)
    e = ((h >> 10) & 31).astype(np.float64)
    m = (h & 1023).astype(np.float64)
    v = np.where(e == 0, m * 2.0 ** -24, (1024.0 + m) * np.exp2(e - 25.0))
    with np.errstate(invalid="ignore"):
        v = np.where(e == 31, np.where(m == 0, np.inf, np.nan), v)
    return (sign * v).astype(np.float32)


def _scale_min(s):
    """s: (nb, 12) uint8 -> sc, m: (nb, 8) int. Sub-blocks 0-3 hold both in the low 6 bits of
    bytes j and j+4; 4-7 take a nibble of byte j+4 and the top 2 bits of bytes j-4 / j."""
    s = s.astype(np.int64)
    sc = np.empty((s.shape[0], 8), np.int64)
    m = np.empty((s.shape[0], 8), np.int64)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, m


def _q4_q5(blk, five):
    nb = blk.shape[0]
    d = f16_to_f32(blk[:, 0], blk[:, 1])
    dmin = f16_to_f32(blk[:, 2], blk[:, 3])
    sc, m = _scale_min(blk[:, 4:16])
    qs = blk[:, 48:176] if five else blk[:, 16:144]
    e = np.arange(QK_K)
    j = e // 32
    byte = qs[:, 32 * (e // 64) + e % 32].astype(np.int64)
    q = np.where(j % 2 == 1, byte >> 4, byte & 15)
    if five:
        q = q + 16 * ((blk[:, 16 + e % 32].astype(np.int64) >> j) & 1)
    with np.errstate(invalid="ignore", over="ignore"):
        ds = d[:, None] * sc.astype(np.float32)  # (nb, 8)
        dm = dmin[:, None] * m.astype(np.float32)
        y = ds[:, j] * q.astype(np.float32) - dm[:, j]
    return y.reshape(nb * QK_K)


def _q6(blk):
    nb = blk.shape[0]
    d = f16_to_f32(blk[:, 208], blk[:, 209])
    scales = blk[:, 192:208].view(np.int8).astype(np.float32)
    e = np.arange(QK_K)
    h, g, l = e // 128, (e % 128) // 32, e % 32
    low = (blk[:, 64 * h + l + 32 * (g % 2)].astype(np.int64) >> (4 * (g // 2))) & 15
    high = (blk[:, 128 + 32 * h + l].astype(np.int64) >> (2 * g)) & 3
    q = (low | (high << 4)) - 32
    with np.errstate(invalid="ignore", over="ignore"):
        y = (d[:, None] * scales[:, e // 16]) * q.astype(np.float32)
    return y.reshape(nb * QK_K)


def _low2(qs):
    """The 2-bit field of each element e: bits 2g..2g+1 of qs[32h + l]."""
    e = np.arange(QK_K)
    h, g, l = e // 128, (e % 128) // 32, e % 32
    return (qs[:, 32 * h + l].astype(np.int64) >> (2 * g)) & 3


def _q2(blk):
    nb = blk.shape[0]
    sc = (blk[:, 0:16] & 15).astype(np.float32)
    m = (blk[:, 0:16] >> 4).astype(np.float32)
    d = f16_to_f32(blk[:, 80], blk[:, 81])
    dmin = f16_to_f32(blk[:, 82], blk[:, 83])
    i = np.arange(QK_K) // 16
    q = _low2(blk[:, 16:80]).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (d[:, None] * sc)[:, i] * q - (dmin[:, None] * m)[:, i]
    return y.reshape(nb * QK_K)


def _q3(blk):
    nb = blk.shape[0]
    s = blk[:, 96:108].astype(np.int64)
    idx = np.arange(16)
    low = np.where(idx < 8, s[:, idx % 8] & 15, s[:, idx % 8] >> 4)
    top = (s[:, 8 + idx % 4] >> (2 * (idx // 4))) & 3
    scale = (low | (top << 4)) - 32  # (nb, 16)
    d = f16_to_f32(blk[:, 108], blk[:, 109])
    e = np.arange(QK_K)
    hbit = (blk[:, e % 32].astype(np.int64) >> (e // 32)) & 1
    q = (_low2(blk[:, 32:96]) + 4 * hbit - 4).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (d[:, None] * scale.astype(np.float32))[:, e // 16] * q
    return y.reshape(nb * QK_K)


def _iq4_nl(raw, n):
    if n % 32:
        raise ValueError("iq4_nl needs a multiple of 32 elements, got %d" % n)
    blk = np.asarray(raw, dtype=np.uint8)[: n // 32 * 18].reshape(-1, 18)
    d = f16_to_f32(blk[:, 0], blk[:, 1])
    nib = np.concatenate([blk[:, 2:18] & 15, blk[:, 2:18] >> 4], axis=1)  # elements 0..15, 16..31
    with np.errstate(invalid="ignore", over="ignore"):
        y = d[:, None] * GRID[nib]
    return y.reshape(-1)


def _iq4_xs(blk):
    d = f16_to_f32(blk[:, 0], blk[:, 1])
    sh = blk[:, 2].astype(np.int64) | (blk[:, 3].astype(np.int64) << 8)
    j = np.arange(8)
    lo = (blk[:, 4 + j // 2].astype(np.int64) >> (4 * (j % 2))) & 15
    ls = lo | (((sh[:, None] >> (2 * j)) & 3) << 4)
    qs = blk[:, 8:136].reshape(-1, 8, 16)
    nib = np.concatenate([qs & 15, qs >> 4], axis=2)  # (nb, 8, 32)
    with np.errstate(invalid="ignore", over="ignore"):
        dl = d[:, None] * (ls - 32).astype(np.float32)
        y = dl[:, :, None] * GRID[nib]
    return y.reshape(-1)


def _q5_family(raw, type_name, n):
    if n % 32:
        raise ValueError("%s needs a multiple of 32 elements, got %d" % (type_name, n))
    bb = B32[type_name]
    blk = np.asarray(raw, dtype=np.uint8)[: n // 32 * bb].reshape(-1, bb)
    has_min, five = type_name != "q5_0", type_name != "q4_1"
    qs = blk[:, 2 + 2 * has_min + 4 * five:][:, :16]
    q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int64)
    if five:
        b = blk[:, 2 + 2 * has_min:6 + 2 * has_min].astype(np.int64)
        qh = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
        q |= ((qh[:, None] >> np.arange(32)) & 1) << 4
    d = f16_to_f32(blk[:, 0], blk[:, 1])[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        if not has_min:
            return (d * (q - 16).astype(np.float32)).reshape(-1)
        m = f16_to_f32(blk[:, 2], blk[:, 3])[:, None]
        return (d * q.astype(np.float32) + m).reshape(-1)


def dequantize(raw, type_name, n):
    """Raw bytes of n elements (n a multiple of 256; of 32 for the 32-element blocks) -> float32
    array of n values."""
    if type_name not in TYPES:
        raise ValueError("not a K-quant: %r" % type_name)
    if type_name == "iq4_nl":
        return _iq4_nl(raw, n)
    if type_name in B32:
        return _q5_family(raw, type_name, n)
    if n % QK_K:
        raise ValueError("%s needs a multiple of 256 elements, got %d" % (type_name, n))
    bb = TYPES[type_name][1]
    blk = np.asarray(raw, dtype=np.uint8)[: n // QK_K * bb].reshape(-1, bb)
    if type_name == "q6_K":
        return _q6(blk)
    if type_name == "q2_K":
        return _q2(blk)
    if type_name == "q3_K":
        return _q3(blk)
    if type_name == "iq4_xs":
        return _iq4_xs(blk)
    return _q4_q5(blk, type_name == "q5_K")
