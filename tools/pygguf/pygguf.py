"""pygguf: a small GGUF v2/v3 reader and v3 writer in Python 3 with numpy only.

Written independently of edgespec's C code (lib/core/gguf_*.c, quant.c) so each can check the
other: the numpy reference (tools/reference) reads models with it, the trainer's exporter writes
them with it, and tests/gguf/test_pygguf.py compares it with the C reader and writer both ways.

Supported tensor types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 (the quantisers reproduce ggml's
reference quantisers bit for bit); q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl and iq4_xs are read and written as raw
bytes only (tools/reference/kquants.py decodes them; the C library quantises). Files are read
strictly: malformed input raises GGUFError naming the field and its file offset. Not here: other ggml
block types, GGUF v1, big-endian files, nested arrays.

Shapes: GGUF lists dimensions innermost first (ne[0] contiguous); numpy shapes are the reverse.
A matrix with ne = (n_in, n_out) is a numpy array of shape (n_out, n_in).

    r = pygguf.read("model.gguf")
    r.get("llama.block_count"); r.tensors["token_embd.weight"].numpy()

    w = pygguf.Writer()
    w.add("general.architecture", "llama")            # type inferred: str, bool, int (u32/i32/u64/i64), float (f32)
    w.add("llama.rope.freq_base", 10000.0, pygguf.FLOAT32)
    w.add("tokenizer.ggml.tokens", ["<unk>", "<s>"])   # list of str -> string array
    w.add_tensor("token_embd.weight", array, "q8_0")  # float array, quantised here
    w.write("model.gguf")
"""

import os
import struct

import numpy as np

MAGIC = 0x46554747  # "GGUF" little-endian
DEFAULT_ALIGNMENT = 32

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
VTYPE_NAMES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array",
               "uint64", "int64", "float64"]
_SCALAR_FMT = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i", FLOAT32: "<f",
               BOOL: "<B", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
_NP_DTYPE = {UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
             FLOAT32: "<f4", BOOL: "<u1", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8"}

# tensor types: ggml id -> (name, elements per block, bytes per block)
TYPES = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 8: ("q8_0", 32, 34), 30: ("bf16", 1, 2),
         12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210),  # K-quants: raw bytes only
         10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110), 20: ("iq4_nl", 32, 18), 23: ("iq4_xs", 256, 136),
         3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24)}
TYPE_IDS = {v[0]: k for k, v in TYPES.items()}
QK = 32


class GGUFError(Exception):
    """A malformed or unsupported GGUF file, or invalid writer input."""


# ---------------------------------------------------------------------------------------------
# conversions and quantisation (ggml's reference semantics)

def f32_to_f16_bits(x):
    """float32 -> IEEE half bits, round to nearest even; NaN kept quiet with its top payload."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16).copy()
    u = x.view(np.uint32)
    nan = np.isnan(x)
    if nan.any():
        h[nan] = (((u[nan] >> 16) & 0x8000) | 0x7E00 | ((u[nan] >> 13) & 0x3FF)).astype(np.uint16)
    return h


def f16_bits_to_f32(h):
    return np.asarray(h, dtype=np.uint16).view(np.float16).astype(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even, NaN kept quiet."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = np.where(nan, (u >> 16) | 0x40, r)
    return r.astype(np.uint16)


def bf16_bits_to_f32(h):
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _blocks(x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    if x.size % QK:
        raise GGUFError("quantisation needs a multiple of %d elements, got %d" % (QK, x.size))
    if not np.isfinite(x).all():
        raise GGUFError("quantisation input holds NaN or infinity")
    return x.reshape(-1, QK)


def _to_int(v, rounding):
    """float32 scaled values to integers like ggml (0 where its C conversion would be undefined)."""
    v64 = v.astype(np.float64)
    ok = np.isfinite(v64)
    v64 = np.where(ok, v64, 0.0)
    if rounding == "half_away":
        q = np.sign(v64) * np.floor(np.abs(v64) + 0.5)  # exact for float32 inputs
    else:
        q = np.trunc(v64)
    return q.astype(np.int64)


def quantize_q8_0(x):
    b = _blocks(x)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        amax = np.abs(b).max(axis=1)
        d = (amax / np.float32(127)).astype(np.float32)
        idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
        scaled = (b * idv[:, None]).astype(np.float32)
    q = _to_int(scaled, "half_away").astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = f32_to_f16_bits(d).reshape(-1, 1).view(np.uint8)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def quantize_q4_0(x):
    b = _blocks(x)
    a = np.abs(b)
    amax = a.max(axis=1)
    first = np.argmax(a, axis=1)  # the first element of largest magnitude, as ggml's strict '<'
    mx = np.where(amax == 0, np.float32(0), b[np.arange(b.shape[0]), first]).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        d = (mx / np.float32(-8)).astype(np.float32)
        idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
        scaled = (b * idv[:, None]).astype(np.float32)
        shifted = (scaled + np.float32(8.5)).astype(np.float32)
    q = np.minimum(_to_int(shifted, "trunc"), 15).astype(np.uint8)
    out = np.empty((b.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = f32_to_f16_bits(d).reshape(-1, 1).view(np.uint8)
    out[:, 2:] = (q[:, :16] & 0xF) | ((q[:, 16:] & 0xF) << 4)
    return out.reshape(-1)


def _pack_q5(out, q, five, qs_at, qh_at):
    """Nibbles of q (blocks x 32) at qs_at; bit 4 of element j as bit j of the little-endian qh."""
    out[:, qs_at:qs_at + 16] = (q[:, :16] & 0xF) | ((q[:, 16:] & 0xF) << 4)
    if five:
        qh = (((q >> 4) & 1).astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)
        out[:, qh_at:qh_at + 4] = qh.reshape(-1, 1).view(np.uint8)


def quantize_q5_0(x):
    b = _blocks(x)
    a = np.abs(b)
    amax = a.max(axis=1)
    first = np.argmax(a, axis=1)
    mx = np.where(amax == 0, np.float32(0), b[np.arange(b.shape[0]), first]).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        d = (mx / np.float32(-16)).astype(np.float32)
        idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
        shifted = ((b * idv[:, None]).astype(np.float32) + np.float32(16.5)).astype(np.float32)
    q = np.minimum(_to_int(shifted, "trunc"), 31)
    out = np.zeros((b.shape[0], 22), dtype=np.uint8)
    out[:, 0:2] = f32_to_f16_bits(d).reshape(-1, 1).view(np.uint8)
    _pack_q5(out, q, True, 6, 2)
    return out.reshape(-1)


def quantize_min(x, bits):
    """q4_1 (bits 4) and q5_1 (bits 5): the block's range over 2^bits - 1 steps, rounded half up."""
    b = _blocks(x)
    lo, hi = b.min(axis=1), b.max(axis=1)
    top = (1 << bits) - 1
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        d = ((hi - lo) / np.float32(top)).astype(np.float32)
        idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
        scaled = ((b - lo[:, None]).astype(np.float32) * idv[:, None]).astype(np.float32)
        shifted = (scaled + np.float32(0.5)).astype(np.float32)
    q = np.minimum(_to_int(shifted, "trunc"), top)
    out = np.zeros((b.shape[0], 20 if bits == 4 else 24), dtype=np.uint8)
    out[:, 0:2] = f32_to_f16_bits(d).reshape(-1, 1).view(np.uint8)
    out[:, 2:4] = f32_to_f16_bits(lo.astype(np.float32)).reshape(-1, 1).view(np.uint8)
    _pack_q5(out, q, bits == 5, 4 if bits == 4 else 8, 4)
    return out.reshape(-1)


def _dequantize_q5(raw, type_name, n):
    bs = {"q4_1": 20, "q5_0": 22, "q5_1": 24}[type_name]
    blk = raw[: n // QK * bs].reshape(-1, bs)
    has_min, five = type_name != "q5_0", type_name != "q4_1"
    qs = blk[:, 2 + 2 * has_min + 4 * five:][:, :16]
    q = np.concatenate([(qs & 0xF), (qs >> 4)], axis=1).astype(np.int64)
    if five:
        qh = blk[:, 2 + 2 * has_min:6 + 2 * has_min].copy().view("<u4").reshape(-1).astype(np.int64)
        q |= ((qh[:, None] >> np.arange(32)) & 1) << 4
    d = f16_bits_to_f32(blk[:, 0:2].copy().view("<u2").reshape(-1))[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        if not has_min:
            return (d * (q - 16).astype(np.float32)).astype(np.float32).reshape(-1)
        m = f16_bits_to_f32(blk[:, 2:4].copy().view("<u2").reshape(-1))[:, None]
        return (d * q.astype(np.float32) + m).astype(np.float32).reshape(-1)


def quantize(x, type_name):
    """Float array -> raw bytes (np.uint8) of the given type, flattened in row-major order."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    if type_name == "f32":
        return x.view(np.uint8).copy()
    if type_name == "f16":
        return f32_to_f16_bits(x).view(np.uint8)
    if type_name == "bf16":
        return f32_to_bf16_bits(x).view(np.uint8)
    if type_name == "q8_0":
        return quantize_q8_0(x)
    if type_name == "q4_0":
        return quantize_q4_0(x)
    if type_name == "q5_0":
        return quantize_q5_0(x)
    if type_name in ("q4_1", "q5_1"):
        return quantize_min(x, 4 if type_name == "q4_1" else 5)
    raise GGUFError("unsupported tensor type %r" % type_name)


def dequantize(raw, type_name, n):
    """Raw bytes of n elements of the given type -> float32 array of n elements."""
    raw = np.frombuffer(memoryview(np.ascontiguousarray(raw, dtype=np.uint8)), dtype=np.uint8)
    if type_name == "f32":
        return raw[: 4 * n].view("<f4").astype(np.float32)
    if type_name == "f16":
        return f16_bits_to_f32(raw[: 2 * n].view("<u2"))
    if type_name == "bf16":
        return bf16_bits_to_f32(raw[: 2 * n].view("<u2"))
    if type_name in ("q8_0", "q4_0"):
        if n % QK:
            raise GGUFError("%s needs a multiple of %d elements, got %d" % (type_name, QK, n))
        bs = 34 if type_name == "q8_0" else 18
        blk = raw[: n // QK * bs].reshape(-1, bs)
        d = f16_bits_to_f32(blk[:, 0:2].copy().view("<u2").reshape(-1))
        if type_name == "q8_0":
            q = blk[:, 2:].view(np.int8).astype(np.float32)
        else:
            qs = blk[:, 2:]
            q = np.concatenate([(qs & 0xF), (qs >> 4)], axis=1).astype(np.float32) - 8
        with np.errstate(invalid="ignore"):  # a scale stored as f16 infinity times a zero code
            return (q * d[:, None]).astype(np.float32).reshape(-1)
    if type_name in ("q4_1", "q5_0", "q5_1"):
        if n % QK:
            raise GGUFError("%s needs a multiple of %d elements, got %d" % (type_name, QK, n))
        return _dequantize_q5(raw, type_name, n)
    raise GGUFError("unsupported tensor type %r (K-quants: tools/reference/kquants.py)" % type_name)


def row_bytes(type_name, n):
    _, be, bb = TYPES[TYPE_IDS[type_name]]
    if n % be:
        raise GGUFError("%d elements are not a multiple of the %s block size %d" % (n, type_name, be))
    return n // be * bb


# ---------------------------------------------------------------------------------------------
# reader

class Value:
    """A metadata value: type (a value-type id), elem_type (for arrays), value (python/numpy), offset."""

    def __init__(self, vtype, value, offset, elem_type=None):
        self.type, self.value, self.offset, self.elem_type = vtype, value, offset, elem_type

    def __repr__(self):
        t = VTYPE_NAMES[self.type] + ("[%s]" % VTYPE_NAMES[self.elem_type] if self.type == ARRAY else "")
        return "Value(%s, %r)" % (t, self.value)


class Tensor:
    """A tensor view: name, type (name), ne (innermost first), shape (numpy order), offset (absolute),
    nbytes, info_offset, raw (np.uint8 view of its bytes)."""

    def __init__(self, name, type_name, ne, offset, nbytes, info_offset, raw):
        self.name, self.type, self.ne, self.offset = name, type_name, tuple(ne), offset
        self.nbytes, self.info_offset, self.raw = nbytes, info_offset, raw
        self.shape = tuple(reversed(self.ne))

    @property
    def n_elements(self):
        n = 1
        for v in self.ne:
            n *= v
        return n

    def numpy(self):
        """Dequantised float32 array in numpy shape."""
        return dequantize(self.raw, self.type, self.n_elements).reshape(self.shape)


class _Cursor:
    def __init__(self, buf):
        self.buf, self.pos, self.size = buf, 0, len(buf)

    def need(self, n, what):
        if n > self.size - self.pos:
            raise GGUFError("truncated file: %s at offset %d needs %d bytes, found %d" % (
                what, self.pos, n, self.size - self.pos))

    def scalar(self, fmt, what):
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return v

    def string(self, what):
        at = self.pos
        n = self.scalar("<Q", what)
        if n > self.size - self.pos:
            raise GGUFError("%s at offset %d: string length %d runs past the end of the file (%d bytes left)" % (
                what, at, n, self.size - self.pos))
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return s


def _decode(b):
    return b.decode("utf-8", errors="surrogateescape")


class Reader:
    """Parses and validates a GGUF file (path, bytes or a uint8 array)."""

    def __init__(self, source):
        if isinstance(source, (str, os.PathLike)):
            buf = np.memmap(source, dtype=np.uint8, mode="r") if os.path.getsize(source) else np.zeros(0, np.uint8)
        elif isinstance(source, (bytes, bytearray, memoryview)):
            buf = np.frombuffer(source, dtype=np.uint8)
        else:
            buf = np.ascontiguousarray(source, dtype=np.uint8)
        self.buf = buf
        self.kv = {}
        self.tensors = {}
        self._parse(_Cursor(memoryview(buf)))

    def get(self, key, default=None):
        v = self.kv.get(key)
        return default if v is None else v.value

    def _parse(self, c):
        c.need(4, "magic")
        magic = struct.unpack_from("<I", c.buf, 0)[0]
        if magic != MAGIC:
            raise GGUFError("bad magic at offset 0: expected 47 47 55 46 (\"GGUF\"), found %s" %
                            " ".join("%02x" % b for b in bytes(c.buf[0:4])))
        c.pos = 4
        self.version = c.scalar("<I", "version")
        if self.version not in (2, 3):
            raise GGUFError("unsupported GGUF version %d at offset 4 (expected 2 or 3)" % self.version)
        n_tensors = c.scalar("<Q", "tensor count")
        n_kv = c.scalar("<Q", "metadata count")
        left = c.size - c.pos
        if n_kv > left // 14 or n_tensors > (left - 14 * n_kv) // 33:
            raise GGUFError("counts at offset 8 (%d tensors, %d metadata entries) cannot fit in the %d bytes left" % (
                n_tensors, n_kv, left))
        for i in range(n_kv):
            at = c.pos
            key = c.string("key of metadata entry #%d" % i)
            if not key or b"\0" in key:
                raise GGUFError("key of metadata entry #%d at offset %d is empty or holds a NUL byte" % (i, at))
            key = _decode(key)
            if key in self.kv:
                raise GGUFError("duplicate metadata key %r: entry #%d at offset %d repeats the one at offset %d" % (
                    key, i, at, self.kv[key].offset))
            self.kv[key] = self._value(c, "metadata entry #%d %r" % (i, key), at)
        self.alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in self.kv:
            a = self.kv["general.alignment"]
            if a.type != UINT32 or a.value == 0 or a.value & (a.value - 1):
                raise GGUFError("general.alignment (offset %d) must be a uint32 nonzero power of two, found %s %r" % (
                    a.offset, VTYPE_NAMES[a.type], a.value))
            self.alignment = a.value
        infos, names = [], {}
        for i in range(n_tensors):
            info = self._tensor_info(c, i)
            if info[0] in names:
                raise GGUFError("duplicate tensor name %r: tensor #%d (info at offset %d) repeats the one at offset %d"
                                % (info[0], i, info[5], names[info[0]]))
            names[info[0]] = info[5]
            infos.append(info)
        pad = (self.alignment - c.pos % self.alignment) % self.alignment
        self.data_offset = c.pos + pad
        if n_tensors and self.data_offset > c.size:
            raise GGUFError("truncated file: tensor data section should start at offset %d but the file has %d bytes"
                            % (self.data_offset, c.size))
        spans = []
        for (name, tname, ne, rel, nbytes, info_at) in infos:
            start = self.data_offset + rel
            if start + nbytes > c.size:
                raise GGUFError("tensor %r (info at offset %d): data at file offset %d with %d bytes runs past the "
                                "end of the file (size %d)" % (name, info_at, start, nbytes, c.size))
            spans.append((rel, rel + nbytes, name, info_at))
            self.tensors[name] = Tensor(name, tname, ne, start, nbytes, info_at, self.buf[start:start + nbytes])
        spans.sort(key=lambda s: (s[0], s[3]))
        for a, b in zip(spans, spans[1:]):
            if b[0] < a[1]:
                raise GGUFError("tensor data overlap: %r and %r (info at offset %d)" % (a[2], b[2], b[3]))

    def _value(self, c, what, at):
        tat = c.pos
        t = c.scalar("<I", what)
        if t == ARRAY:
            et_at = c.pos
            et = c.scalar("<I", what)
            if et == ARRAY:
                raise GGUFError("%s at offset %d: nested arrays are not supported" % (what, et_at))
            if et > FLOAT64:
                raise GGUFError("%s at offset %d: unknown array element type %d" % (what, et_at, et))
            n_at = c.pos
            n = c.scalar("<Q", what)
            if et == STRING:
                if n > (c.size - c.pos) // 8:
                    raise GGUFError("%s at offset %d: %d strings cannot fit in the file" % (what, n_at, n))
                vals = [_decode(c.string("%s, string #%d" % (what, j))) for j in range(n)]
            else:
                es = struct.calcsize(_SCALAR_FMT[et])
                if n > (c.size - c.pos) // es:
                    raise GGUFError("%s at offset %d: array of %d %s elements runs past the end of the file" % (
                        what, n_at, n, VTYPE_NAMES[et]))
                vals = np.frombuffer(c.buf, dtype=_NP_DTYPE[et], count=n, offset=c.pos).copy()
                if et == BOOL:
                    if (vals > 1).any():
                        raise GGUFError("%s: bool elements must be 0 or 1" % what)
                    vals = vals.astype(bool)
                c.pos += n * es
            return Value(ARRAY, vals, at, et)
        if t == STRING:
            return Value(STRING, _decode(c.string(what)), at)
        if t not in _SCALAR_FMT:
            raise GGUFError("%s: unknown value type %d at offset %d" % (what, t, tat))
        vat = c.pos
        v = c.scalar(_SCALAR_FMT[t], what)
        if t == BOOL:
            if v > 1:
                raise GGUFError("%s: bool value at offset %d is %d (expected 0 or 1)" % (what, vat, v))
            v = bool(v)
        return Value(t, v, at)

    def _tensor_info(self, c, i):
        at = c.pos
        name = c.string("name of tensor info #%d" % i)
        if not name or b"\0" in name:
            raise GGUFError("name of tensor info #%d at offset %d is empty or holds a NUL byte" % (i, at))
        name = _decode(name)
        what = "tensor #%d %r (info at offset %d)" % (i, name, at)
        nd_at = c.pos
        n_dims = c.scalar("<I", what)
        if not 1 <= n_dims <= 4:
            raise GGUFError("%s: n_dims %d at offset %d (expected 1..4)" % (what, n_dims, nd_at))
        ne = []
        n = 1
        for d in range(n_dims):
            d_at = c.pos
            v = c.scalar("<q", what)
            if v <= 0:
                raise GGUFError("%s: ne[%d] = %d at offset %d (expected a positive size)" % (what, d, v, d_at))
            n *= v
            if n >= 1 << 63:
                raise GGUFError("%s: element count overflows at ne[%d] (offset %d)" % (what, d, d_at))
            ne.append(v)
        t_at = c.pos
        t = c.scalar("<I", what)
        if t not in TYPES:
            raise GGUFError("%s: tensor type %d at offset %d is not supported (supported: f32, f16, bf16, q8_0, "
                            "q4_0, q4_1, q5_0, q5_1, q2_K..q6_K, iq4_nl, iq4_xs)" % (what, t, t_at))
        tname, be, bb = TYPES[t]
        if ne[0] % be:
            raise GGUFError("%s: ne[0] = %d is not a multiple of the %s block size %d" % (what, ne[0], tname, be))
        nbytes = n // be * bb
        if nbytes >= 1 << 64:
            raise GGUFError("%s: byte size overflows" % what)
        o_at = c.pos
        rel = c.scalar("<Q", what)
        if rel % self.alignment:
            raise GGUFError("%s: data offset %d (at offset %d) is not a multiple of the alignment %d" % (
                what, rel, o_at, self.alignment))
        return (name, tname, ne, rel, nbytes, at)


def read(source):
    """Reads and validates a GGUF file; see Reader."""
    return Reader(source)


# ---------------------------------------------------------------------------------------------
# writer

class Writer:
    """Builds a version 3 GGUF file laid out as llama.cpp's writer lays it out: header, metadata in
    first-set order, tensor infos in insertion order, zero padding to the alignment, each tensor's data
    at the next aligned offset (padded so the file ends aligned)."""

    def __init__(self):
        self._kv = {}       # key -> serialised value bytes following the key (type + value)
        self._tensors = []  # (name, type id, ne, raw bytes)

    # -- metadata
    def add(self, key, value, vtype=None, elem_type=None):
        """Sets key (replacing an earlier value in place). vtype is inferred when None: bool -> BOOL,
        int -> UINT32/INT32/UINT64/INT64 by range, float -> FLOAT32, str -> STRING, list/tuple/ndarray ->
        ARRAY (elements: str -> STRING, else elem_type or inferred from the first element)."""
        if not isinstance(key, str) or not key or "\0" in key:
            raise GGUFError("invalid key %r" % (key,))
        if vtype is None:
            vtype = _infer(value)
        if vtype == ARRAY:
            body = self._array(value, elem_type)
        elif vtype == STRING:
            b = value.encode("utf-8") if isinstance(value, str) else bytes(value)
            body = struct.pack("<Q", len(b)) + b
        elif vtype in _SCALAR_FMT:
            v = int(bool(value)) if vtype == BOOL else value
            try:
                body = struct.pack(_SCALAR_FMT[vtype], v)
            except struct.error as e:
                raise GGUFError("key %r: %r does not fit %s: %s" % (key, value, VTYPE_NAMES[vtype], e))
        else:
            raise GGUFError("key %r: unknown value type %r" % (key, vtype))
        self._kv[key] = struct.pack("<I", vtype) + body

    def add_kv_from(self, reader, key):
        """Copies key's value from a Reader."""
        v = reader.kv[key]
        self.add(key, v.value, v.type, v.elem_type)

    def _array(self, value, elem_type):
        vals = list(value) if not isinstance(value, np.ndarray) else value
        if elem_type is None:
            if isinstance(value, np.ndarray):
                elem_type = {np.dtype("uint8"): UINT8, np.dtype("int8"): INT8, np.dtype("uint16"): UINT16,
                             np.dtype("int16"): INT16, np.dtype("uint32"): UINT32, np.dtype("int32"): INT32,
                             np.dtype("float32"): FLOAT32, np.dtype("bool"): BOOL, np.dtype("uint64"): UINT64,
                             np.dtype("int64"): INT64, np.dtype("float64"): FLOAT64}.get(value.dtype)
                if elem_type is None:
                    raise GGUFError("array of dtype %s has no GGUF element type" % value.dtype)
            elif len(vals) and isinstance(vals[0], str):
                elem_type = STRING
            elif len(vals):
                elem_type = _infer_many(vals)
            else:
                raise GGUFError("empty array needs an elem_type")
        if elem_type == ARRAY:
            raise GGUFError("nested arrays are not supported")
        head = struct.pack("<IQ", elem_type, len(vals))
        if elem_type == STRING:
            parts = []
            for s in vals:
                b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
                parts.append(struct.pack("<Q", len(b)) + b)
            return head + b"".join(parts)
        arr = np.asarray(vals)
        if elem_type == BOOL:
            arr = arr.astype(bool)
        return head + np.ascontiguousarray(arr, dtype=_NP_DTYPE[elem_type]).tobytes()

    # -- tensors
    def add_tensor(self, name, array, type_name="f32"):
        """Adds a float array (numpy shape; the last axis is contiguous), quantised to type_name."""
        a = np.ascontiguousarray(array, dtype=np.float32)
        ne = tuple(reversed(a.shape)) if a.ndim else (1,)
        self.add_tensor_raw(name, type_name, ne, quantize(a, type_name))

    def add_tensor_raw(self, name, type_name, ne, raw):
        """Adds a tensor from its raw bytes; ne innermost first."""
        if not name or "\0" in name or any(t[0] == name for t in self._tensors):
            raise GGUFError("invalid or duplicate tensor name %r" % name)
        if type_name not in TYPE_IDS:
            raise GGUFError("tensor %r: unsupported type %r" % (name, type_name))
        ne = tuple(int(v) for v in ne)
        if not 1 <= len(ne) <= 4 or min(ne) <= 0:
            raise GGUFError("tensor %r: bad shape %r" % (name, ne))
        n = 1
        for v in ne:
            n *= v
        if ne[0] % TYPES[TYPE_IDS[type_name]][1]:
            raise GGUFError("tensor %r: ne[0] = %d is not a multiple of the %s block size" % (name, ne[0], type_name))
        raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
        if raw.size != row_bytes(type_name, n):
            raise GGUFError("tensor %r: %d bytes given, %d expected" % (name, raw.size, row_bytes(type_name, n)))
        self._tensors.append((name, TYPE_IDS[type_name], ne, raw))

    # -- output
    def _alignment(self):
        v = self._kv.get("general.alignment")
        if v is None:
            return DEFAULT_ALIGNMENT
        t, a = struct.unpack_from("<II", v) if len(v) == 8 else (None, None)
        if t != UINT32 or a == 0 or a & (a - 1):
            raise GGUFError("general.alignment must be a uint32 nonzero power of two")
        return a

    def tobytes(self):
        out = bytearray()
        self._emit(out.extend)
        return bytes(out)

    def write(self, path):
        with open(path, "wb") as f:
            self._emit(f.write)

    def _emit(self, put):
        align = self._alignment()
        pad = lambda n: (align - n % align) % align  # noqa: E731
        head = bytearray(struct.pack("<IIQQ", MAGIC, 3, len(self._tensors), len(self._kv)))
        for k, v in self._kv.items():
            kb = k.encode("utf-8")
            head += struct.pack("<Q", len(kb)) + kb + v
        off = 0
        for name, t, ne, raw in self._tensors:
            nb = name.encode("utf-8")
            head += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne))
            head += struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", t, off)
            off += raw.size + pad(raw.size)
        head += bytes(pad(len(head)))
        put(bytes(head))
        for name, t, ne, raw in self._tensors:
            put(raw.tobytes())
            put(bytes(pad(raw.size)))


def _infer(value):
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return _int_type(int(value))
    if isinstance(value, (float, np.floating)):
        return FLOAT32
    if isinstance(value, str):
        return STRING
    if isinstance(value, (list, tuple, np.ndarray)):
        return ARRAY
    raise GGUFError("cannot infer a GGUF type for %r" % (value,))


def _int_type(v):
    if 0 <= v < 1 << 32:
        return UINT32
    if -(1 << 31) <= v < 0:
        return INT32
    if 0 <= v < 1 << 64:
        return UINT64
    if -(1 << 63) <= v < 0:
        return INT64
    raise GGUFError("integer %d does not fit 64 bits" % v)


def _infer_many(vals):
    if all(isinstance(v, (bool, np.bool_)) for v in vals):
        return BOOL
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
        lo, hi = min(int(v) for v in vals), max(int(v) for v in vals)
        if lo >= 0:
            return UINT32 if hi < 1 << 32 else UINT64
        return INT32 if lo >= -(1 << 31) and hi < 1 << 31 else INT64
    return FLOAT32
