"""bpe.py: BPE tokenizer trainer and a SentencePiece-style ("llama") encoder for edgespec.

The trainer learns byte-pair merges on whitespace-delimited chunks and writes the result as a
llama.cpp `llama` vocabulary: <unk> <s> </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, base
characters, then one piece per merge. Each merged piece's score is minus its merge index, so the
SentencePiece rule "merge the adjacent pair whose result has the best score" replays the training
merges in order. The encoder here is that rule exactly as llama.cpp's SPM tokenizer applies it
(UTF-8 symbol split, priority by score then leftmost position, byte fallback), so the C tokenizer
and this one produce the same ids.

Deliberately not here: SentencePiece's unigram model, text normalisation beyond the space
escaping llama.cpp performs, special-token parsing inside text (control tokens are never produced
from plain text).
"""

import collections
import heapq
import json
import re

SPACE = "\u2581"  # "▁", SentencePiece's word-boundary mark

# llama.cpp token types (tokenizer.ggml.token_type)
TYPE_NORMAL = 1
TYPE_UNKNOWN = 2
TYPE_CONTROL = 3
TYPE_BYTE = 6

UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
N_SPECIAL = 3
BYTE_BASE = 3  # <0x00> is token 3, <0xFF> token 258

# Encoding chunks: a newline alone, or an optional word mark followed by ordinary characters.
# When no token holds "▁" after its first character or a newline with other characters (true of
# every vocabulary train_bpe makes), SentencePiece-style encoding is local to these chunks.
_CHUNK_RE = re.compile("\n|" + SPACE + "[^" + SPACE + "\n]*|[^" + SPACE + "\n]+")

# Training chunks split finer: a run of letters and digits (with its word mark), or one other
# character (with its word mark), so punctuation never fuses with words ("▁earth" "," rather
# than "▁earth,") and the vocabulary is spent on words.
_TRAIN_CHUNK_RE = re.compile("\n|" + SPACE + "?[^\\W_]+|" + SPACE + "?[^" + SPACE + "\n]|" + SPACE)


def escape_text(text, add_space_prefix=True):
    """llama.cpp's SPM preprocessing: optional leading space, then every space becomes '▁'."""
    if add_space_prefix:
        text = " " + text
    return text.replace(" ", SPACE)


def _utf8_len(lead):
    # llama.cpp's unicode_len_utf8: by the lead byte's top four bits; stray bytes count as 1.
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]


class Vocab:
    """A llama-style vocabulary: tokens (str), scores (float), types (int)."""

    def __init__(self, tokens, scores, types, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
                 add_bos=True, add_eos=False, add_space_prefix=True):
        assert len(tokens) == len(scores) == len(types)
        self.tokens = list(tokens)
        self.scores = [float(s) for s in scores]
        self.types = [int(t) for t in types]
        self.bos_id, self.eos_id, self.unk_id = bos_id, eos_id, unk_id
        self.add_bos, self.add_eos, self.add_space_prefix = add_bos, add_eos, add_space_prefix
        # Like llama.cpp's token_to_id map: a later duplicate string wins.
        self.by_bytes = {}
        for i, t in enumerate(self.tokens):
            self.by_bytes[t.encode("utf-8")] = i
        self.byte_ids = []
        for b in range(256):
            tid = self.by_bytes.get(("<0x%02X>" % b).encode("ascii"))
            self.byte_ids.append(tid)
        # Chunk-local encoding is exact when no token could span a chunk boundary.
        self.chunk_local = all(
            len(t) <= 1 or (SPACE not in t[1:] and "\n" not in t) for t in self.tokens)
        self._cache = {}

    def __len__(self):
        return len(self.tokens)

    # -- encoding ---------------------------------------------------------------------------
    def _spm(self, data):
        """SentencePiece-BPE merge of one byte string, as llama.cpp's llm_tokenizer_spm."""
        # symbols: [start, n, prev, next]
        syms = []
        off = 0
        while off < len(data):
            n = min(_utf8_len(data[off]), len(data) - off)
            syms.append([off, n, len(syms) - 1, -1])
            off += n
        for i in range(len(syms) - 1):
            syms[i][3] = i + 1
        heap = []
        scores = self.scores
        by_bytes = self.by_bytes

        def add(left, right):
            if left < 0 or right < 0:
                return
            s = syms[left][0]
            size = syms[left][1] + syms[right][1]
            tid = by_bytes.get(data[s:s + size])
            if tid is None:
                return
            heapq.heappush(heap, (-scores[tid], left, right, size))

        for i in range(1, len(syms)):
            add(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            ls, rs = syms[left], syms[right]
            if ls[1] == 0 or rs[1] == 0 or ls[1] + rs[1] != size:
                continue
            ls[1] += rs[1]
            rs[1] = 0
            ls[3] = rs[3]
            if rs[3] >= 0:
                syms[rs[3]][2] = left
            add(ls[2], left)
            add(left, ls[3])
        out = []
        i = 0 if syms else -1
        while i != -1:
            s, n = syms[i][0], syms[i][1]
            piece = data[s:s + n]
            tid = by_bytes.get(piece)
            if tid is not None:
                out.append(tid)
            else:
                # Every merged symbol is a token, so only unknown characters arrive here.
                for b in piece:
                    bid = self.byte_ids[b]
                    out.append(self.unk_id if bid is None else bid)
            i = syms[i][3]
        return out

    def encode(self, text, add_bos=None, add_eos=None, add_space_prefix=None):
        """Token ids of text, as llama.cpp's llama_tokenize(add_special, parse_special=false)."""
        add_bos = self.add_bos if add_bos is None else add_bos
        add_eos = self.add_eos if add_eos is None else add_eos
        prefix = self.add_space_prefix if add_space_prefix is None else add_space_prefix
        ids = [self.bos_id] if add_bos else []
        if text:
            esc = escape_text(text, prefix)
            if self.chunk_local:
                cache = self._cache
                for chunk in _CHUNK_RE.findall(esc):
                    got = cache.get(chunk)
                    if got is None:
                        got = self._spm(chunk.encode("utf-8"))
                        if len(cache) < 1 << 20:
                            cache[chunk] = got
                    ids.extend(got)
            else:
                ids.extend(self._spm(esc.encode("utf-8")))
        if add_eos:
            ids.append(self.eos_id)
        return ids

    # -- decoding ---------------------------------------------------------------------------
    def piece_bytes(self, tid):
        t, ty = self.tokens[tid], self.types[tid]
        if ty == TYPE_BYTE:
            return bytes([int(t[3:5], 16)])
        if ty in (TYPE_CONTROL, TYPE_UNKNOWN):
            return b""
        return t.replace(SPACE, " ").encode("utf-8")

    def decode(self, ids, remove_leading_space=True):
        data = b"".join(self.piece_bytes(i) for i in ids)
        text = data.decode("utf-8", errors="replace")
        if remove_leading_space and self.add_space_prefix and text.startswith(" "):
            text = text[1:]
        return text

    # -- persistence (GGUF metadata is written by export.py) ---------------------------------
    def to_json(self):
        return {"tokens": self.tokens, "scores": self.scores, "types": self.types,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "unk_id": self.unk_id,
                "add_bos": self.add_bos, "add_eos": self.add_eos,
                "add_space_prefix": self.add_space_prefix}

    @classmethod
    def from_json(cls, d):
        return cls(d["tokens"], d["scores"], d["types"], d["bos_id"], d["eos_id"], d["unk_id"],
                   d["add_bos"], d["add_eos"], d["add_space_prefix"])

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, ensure_ascii=False)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls.from_json(json.load(f))


def _chunk_counts(texts, add_space_prefix=True):
    counts = collections.Counter()
    for text in texts:
        counts.update(_TRAIN_CHUNK_RE.findall(escape_text(text, add_space_prefix)))
    return counts


def train_bpe(texts, vocab_size, min_char_count=1, base_chars=None, log=None):
    """Learns merges on texts (each encoded as the tokenizer would: space prefix, '▁' escaping).

    Returns (Vocab, merges). Base characters are the printable ASCII set (so digits and
    punctuation never need byte fallback) plus every character seen at least min_char_count
    times. Merges are chosen by highest pair count; ties go to the smallest (left, right) pair of
    strings, so training is deterministic.
    """
    counts = _chunk_counts(texts)
    char_counts = collections.Counter()
    for chunk, c in counts.items():
        for ch in chunk:
            char_counts[ch] += c
    if base_chars is None:
        base_chars = [chr(c) for c in range(0x21, 0x7F)] + [SPACE, "\n"]
    chars = set(base_chars) | {ch for ch, c in char_counts.items() if c >= min_char_count}
    # Most frequent characters first (ties by code point) so ids are reproducible.
    chars = sorted(chars, key=lambda ch: (-char_counts.get(ch, 0), ch))

    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL] + [TYPE_BYTE] * 256
    n_base = len(tokens) + len(chars)
    if vocab_size < n_base:
        raise ValueError("vocab_size %d is smaller than the %d special, byte and character tokens"
                         % (vocab_size, n_base))
    n_merges_wanted = vocab_size - n_base

    # Words as symbol lists; characters outside the vocabulary stay separate symbols that never
    # merge (they become byte tokens when encoded).
    known = set(chars)
    words = []  # [symbols, count]
    for chunk, c in sorted(counts.items()):
        words.append([list(chunk), c])
    pair_counts = collections.Counter()
    pair_where = collections.defaultdict(set)
    for wi, (syms, c) in enumerate(words):
        for a, b in zip(syms, syms[1:]):
            if a in known and b in known:
                pair_counts[(a, b)] += c
                pair_where[(a, b)].add(wi)

    pieces = []  # merged pieces in creation order
    piece_set = set(tokens) | known
    merges = []
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)
    while len(pieces) < n_merges_wanted and heap:
        negc, pair = heapq.heappop(heap)
        c = pair_counts.get(pair, 0)
        if c <= 0:
            continue
        if -negc != c:  # stale entry: push the current count back
            heapq.heappush(heap, (-c, pair))
            continue
        a, b = pair
        new = a + b
        merges.append(pair)
        if new not in piece_set:
            piece_set.add(new)
            known.add(new)
            pieces.append(new)
        changed = collections.Counter()
        for wi in list(pair_where[pair]):
            syms, wc = words[wi]
            i = 0
            out = []
            hit = False
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                    hit = True
                else:
                    out.append(syms[i])
                    i += 1
            if not hit:
                continue
            for x, y in zip(syms, syms[1:]):
                if x in known and y in known:
                    changed[(x, y)] -= wc
            for x, y in zip(out, out[1:]):
                if x in known and y in known:
                    changed[(x, y)] += wc
                    pair_where[(x, y)].add(wi)
            words[wi][0] = out
        for p, d in changed.items():
            if d == 0:
                continue
            pair_counts[p] += d
            if pair_counts[p] > 0:
                heapq.heappush(heap, (-pair_counts[p], p))
        del pair_counts[pair]
        if log and len(merges) % 1000 == 0:
            log("bpe: %d merges, %d pieces, last %r (count %d)" % (len(merges), len(pieces), new, c))

    n_pieces = len(pieces)
    scores = [0.0] * len(tokens)
    # Merged pieces: minus their creation index (earlier = better); characters after all merges.
    for ch_i, ch in enumerate(chars):
        tokens.append(ch)
        types.append(TYPE_NORMAL)
        scores.append(-float(n_pieces + ch_i))
    for i, p in enumerate(pieces):
        tokens.append(p)
        types.append(TYPE_NORMAL)
        scores.append(-float(i))
    return Vocab(tokens, scores, types), merges


def apply_merges(chunk, merges_rank):
    """Classic BPE encoding of one chunk by merge rank (for measuring agreement with SPM)."""
    syms = list(chunk)
    while len(syms) > 1:
        best = None
        for i in range(len(syms) - 1):
            r = merges_rank.get((syms[i], syms[i + 1]))
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        r, i = best
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    return syms
