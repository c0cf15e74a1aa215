"""gguf_vocab.py: a base GGUF file's own tokenizer, run by the C library, for the vocabularies
tools/train does not implement (bpe.py is SentencePiece only): GPT-2-style BPE files such as
Qwen2's and Llama 3's. Text is encoded by es_tokenize through the Python binding
(bindings/python/edgespec.py; the library is found as the binding says: $EDGESPEC_LIBRARY, else
libedgespec.so on the loader's path), so training sees exactly the ids the library gives a prompt,
and an exported base gets the file's tokenizer.ggml.* keys verbatim.
Deliberately not here: SentencePiece vocabularies (bpe.py), reading the model (export.py).
"""

import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "pygguf"))
sys.path.insert(0, os.path.join(_HERE, "..", "..", "bindings", "python"))
import pygguf  # noqa: E402

KEY = "gguf_tokenizer"  # the JSON form: {KEY: path of the GGUF file}


class GgufVocab:
    """The tokenizer of the GGUF file at path, with bpe.Vocab's interface as train.py, data.py
    and export.py use it."""

    def __init__(self, path):
        import edgespec  # the binding loads libedgespec only now: SentencePiece runs need neither
        self.path = os.path.abspath(path)
        self._m = edgespec.Model(self.path, vocab_only=True)
        self.eos_id = self._m.eos_id
        # a sample starts with BOS (data.py); files without one start with their EOS instead
        self.bos_id = self._m.bos_id if self._m.bos_id >= 0 else self.eos_id

    def __len__(self):
        return self._m.n_vocab

    def encode(self, text, add_bos=None, add_eos=None, add_space_prefix=None):
        """Token ids of text as es_tokenize gives them (special tokens as text). add_bos None: the
        file's own rule; add_space_prefix is the file's own rule always (BPE files have none)."""
        del add_space_prefix
        ids = self._m.tokenize(text, add_special=add_bos is None, parse_special=False)
        if add_bos and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id] + ids
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def to_json(self):
        return {KEY: self.path}

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f)

    def add_to(self, writer):
        """Copies the file's tokenizer.ggml.* keys into a pygguf.Writer."""
        r = pygguf.read(self.path)
        for k in r.kv:
            if k.startswith("tokenizer."):
                writer.add_kv_from(r, k)


def from_json(d, spm_from_json):
    """The vocabulary a checkpoint holds: a GgufVocab, or SentencePiece (spm_from_json(d))."""
    return GgufVocab(d[KEY]) if KEY in d else spm_from_json(d)
