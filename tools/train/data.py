"""data.py: tokenised corpus and batches for training and evaluation.

A split (train or validation) is its books' verses joined by newlines into one token stream. A
sample starts at a verse boundary as a document would: <s>, then the verse encoded with the
tokenizer's leading space (as a prompt is), then the stream after it. So position 0 is always
<s>, which is what the C library feeds when it adds BOS to a prompt.
Deliberately not here: the tokenizer itself (bpe.py) and the model (model.py).
"""

import numpy as np


class Split:
    def __init__(self, vocab, verses):
        """verses: list of verse strings in reading order."""
        self.vocab = vocab
        nl = vocab.encode("\n", add_bos=False, add_space_prefix=False)
        if len(nl) != 1:
            raise ValueError("newline must be a single token")
        stream, vstart, pref, pref_off, plain_len = [], [], [], [0], []
        for k, v in enumerate(verses):
            if k:
                stream.extend(nl)
            plain = vocab.encode(v, add_bos=False, add_space_prefix=False)
            vstart.append(len(stream))
            stream.extend(plain)
            plain_len.append(len(plain))
            pref.extend(vocab.encode(v, add_bos=False, add_space_prefix=True))
            pref_off.append(len(pref))
        self.stream = np.asarray(stream, dtype=np.int64)
        self.vstart = np.asarray(vstart, dtype=np.int64)
        self.plain_len = np.asarray(plain_len, dtype=np.int64)
        self.pref = np.asarray(pref, dtype=np.int64)
        self.pref_off = np.asarray(pref_off, dtype=np.int64)
        self.n_verses = len(verses)
        self.bos = vocab.bos_id

    def n_tokens(self):
        return len(self.stream)

    def window(self, k, length):
        """<s> + verse k (prefixed) + the stream after it, at most `length` tokens; also returns
        the window offsets where later verses start (verse boundaries inside the window)."""
        head = self.pref[self.pref_off[k]:self.pref_off[k + 1]]
        rest_from = self.vstart[k] + self.plain_len[k]
        need = max(0, length - 1 - len(head))
        rest = self.stream[rest_from:rest_from + need]
        w = np.concatenate(([self.bos], head, rest))[:length]
        return w

    def sample_batch(self, rng, batch, length):
        """batch windows of exactly `length` tokens starting at random verses."""
        out = np.empty((batch, length), dtype=np.int64)
        i = 0
        while i < batch:
            k = int(rng.integers(0, self.n_verses))
            w = self.window(k, length)
            if len(w) < length:
                continue  # too close to the end of the split
            out[i] = w
            i += 1
        return out

    def eval_windows(self, length):
        """Windows covering the split once. Each starts at a verse k and scores the whole verses
        that fit, each with the newline before it. Yields (tokens, n_scored): positions
        [0, n_scored) are scored, i.e. targets at window offsets 1..n_scored. A verse longer than
        a window is cut."""
        n = self.n_verses
        k = 0
        while k < n:
            w = self.window(k, length)
            head = int(self.pref_off[k + 1] - self.pref_off[k])
            rest_from = int(self.vstart[k] + self.plain_len[k])

            def off(k2):  # window offset of verse k2's first token; k2 == n: end of stream
                at = self.vstart[k2] if k2 < n else len(self.stream) + 1
                return 1 + head + int(at - rest_from)

            if off(k + 1) > length:  # verse k alone overflows the window
                yield w, len(w) - 1
                k += 1
                continue
            k2 = k + 1
            while k2 < n and off(k2 + 1) <= length:
                k2 += 1
            yield w, (off(k2) - 1 if k2 < n else len(w) - 1)
            k = k2
