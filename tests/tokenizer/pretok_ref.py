#!/usr/bin/python3
"""pretok_ref.py: checks the hand-written pre-tokenizer matchers against Python's regex engine
running the GPT-2 and Llama-3 patterns literally, on random strings drawn from all of Unicode and
from a pool of tricky characters, and checks the generated class table against unicodedata.

\\p{L}, \\p{N} and \\s are spelled out as character classes built from unicodedata (Python's re has no
\\p{..}, and its \\s is not Unicode's White_Space). Usage: pretok_ref.py PRETOK_DUMP_EXECUTABLE
"""
import os
import random
import re
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402

WHITE_SPACE = [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F,
               0x205F, 0x3000]


def ranges(pred):
    out, start = [], None
    for cp in range(0x110000):
        if pred(cp):
            if start is None:
                start = cp
        elif start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def cls(rs):
    return "".join("\\U%08X-\\U%08X" % r if r[0] != r[1] else "\\U%08X" % r[0] for r in rs)


def main():
    dump = sys.argv[1]
    cat = [unicodedata.category(chr(cp)) for cp in range(0x110000)]
    ws = set(WHITE_SPACE)
    L = cls(ranges(lambda cp: cat[cp][0] == "L"))
    N = cls(ranges(lambda cp: cat[cp][0] == "N"))
    S = cls(ranges(lambda cp: cp in ws))
    gpt2 = re.compile(
        "'s|'t|'re|'ve|'m|'ll|'d| ?[%s]+| ?[%s]+| ?[^%s%s%s]+|[%s]+(?![^%s])|[%s]+" % (L, N, S, L, N, S, S, S))
    llama3 = re.compile(
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n%s%s]?[%s]+|[%s]{1,3}| ?[^%s%s%s]+[\\r\\n]*|[%s]*[\\r\\n]+|[%s]+(?![^%s])|[%s]+"
        % (L, N, L, N, S, L, N, S, S, S, S))

    failures = 0
    # the class table, every code point
    got = subprocess.run(testlib.wrap([dump, "classes"]), check=True, capture_output=True).stdout.decode()
    want = "".join("3" if cp in ws else "1" if cat[cp][0] == "L" else "2" if cat[cp][0] == "N" else "0"
                   for cp in range(0x110000))
    bad = [cp for cp in range(0x110000) if got[cp] != want[cp]] if got != want else []
    if len(got) != len(want) or bad:
        print("class table differs from unicodedata %s at %d code points, first U+%04X: regenerate it with "
              "tools/gen_unicode_tables.py" % (unicodedata.unidata_version, len(bad), bad[0] if bad else 0))
        failures += 1

    rng = random.Random(20240607)
    pool = [" ", " ", " ", "\n", "\r", "\t", "a", "b", "Z", "s", "t", "S", "T", "e", "r", "v", "l", "L", "m", "d",
            "D", "'", "'", "0", "7", "\u00b2", "!", ".", "-", "(", "\u00e9", "\u017f", "\u3000", "\u00a0", "\u2028",
            "\u0301", "\u0660", "\u4e00", "\U0001f600", "\u200d", "\x1c", "\x85", "\u2581", "\u0130", "\u212a"]

    def random_cp():
        while True:
            cp = rng.choice([rng.randrange(0x80, 0x3000), rng.randrange(0x3000, 0x10000), rng.randrange(0x10000, 0x110000)])
            if not 0xD800 <= cp <= 0xDFFF:
                return chr(cp)

    texts = []
    for i in range(3000):
        n = rng.randrange(0, 40)
        texts.append("".join(rng.choice(pool) if rng.random() < 0.8 else random_cp() for _ in range(n)))
    for name, pat in (("gpt2", gpt2), ("llama3", llama3)):
        inp = "".join(t.encode("utf-8").hex() + "\n" for t in texts)
        out = subprocess.run(testlib.wrap([dump, name]), input=inp.encode(), check=True, capture_output=True).stdout.decode()
        lines = out.split("\n")
        shown = 0
        for i, text in enumerate(texts):
            want = " ".join(str(len(w.encode("utf-8"))) for w in pat.findall(text))
            if "".join(pat.findall(text)) != text:
                print("%s: the regex does not cover %r" % (name, text))
                failures += 1
            if lines[i] != want:
                failures += 1
                if shown < 5:
                    shown += 1
                    print("%s split of %r: got [%s], regex gives [%s] = %r" % (name, text, lines[i], want,
                                                                              pat.findall(text)))
        print("%s: %d strings checked" % (name, len(texts)))
    print("%d failures" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
