#!/usr/bin/python3
"""pretok_ref.py: checks the hand-written pre-tokenizer matchers against Python's regex engine running
each split's published expressions literally (every tokenizer.ggml.pre kind edgespec has: gpt-2,
llama3, qwen2, deepseek-llm, deepseek-coder, deepseek-v3, falcon, starcoder, poro-chat, viking,
tekken, gpt-4o), on fixed strings and on random strings drawn from all of Unicode and from a pool of
tricky characters; and checks the generated class and category tables against unicodedata.

A split of several expressions applies them in turn: each cuts every piece of the one before into its
matches and the gaps between them, and sees only that piece. \\p{..} classes and \\s are spelled out as
character classes built from unicodedata (Python's re has no \\p{..}, and its \\s is not Unicode's
White_Space); $ is written \\Z (the end of the piece). Usage: pretok_ref.py PRETOK_DUMP_EXECUTABLE
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

# deepseek-llm's letter class as published (\s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+), as code point ranges
DS_CASED = [(0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA), (0x1BC, 0x1BF),
            (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D), (0x37F, 0x37F),
            (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481),
            (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA),
            (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15),
            (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59),
            (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC),
            (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB),
            (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102), (0x2107, 0x2107),
            (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126),
            (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F),
            (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4),
            (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F),
            (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17),
            (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3), (0x104D8, 0x104FB),
            (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943)]


def ranges(cps):
    """Sorted code points as inclusive ranges."""
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def cls(rs):
    return "".join("\\U%08X-\\U%08X" % r if r[0] != r[1] else "\\U%08X" % r[0] for r in rs)


def category_ranges(cat):
    """For every category (Lu, ...) and every major class (L, ...), its code point ranges, in one pass."""
    out = {}
    start = 0
    for cp in range(1, 0x110001):
        if cp == 0x110000 or cat[cp] != cat[start]:
            for key in (cat[start], cat[start][0]):
                rs = out.setdefault(key, [])
                if rs and rs[-1][1] == start - 1:
                    rs[-1] = (rs[-1][0], cp - 1)
                else:
                    rs.append((start, cp - 1))
            start = cp
    return out


def splits(cat, ws):
    """The published expressions of every split, with the classes spelled out."""
    by = category_ranges(cat)

    def by_cat(*keys):
        return "".join(cls(by.get(k, [])) for k in keys)
    L, N, P, Sym, M = by_cat("L"), by_cat("N"), by_cat("P"), by_cat("S"), by_cat("M")
    Lu, Ll, Lt, Lm, Lo = by_cat("Lu"), by_cat("Ll"), by_cat("Lt"), by_cat("Lm"), by_cat("Lo")
    S = cls(ranges(sorted(ws)))
    contractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?[%s]+| ?[%s]+| ?[^%s%s%s]+|[%s]+(?![^%s])|[%s]+" % (L, N, S, L, N, S, S, S)
    gpt2_stage = "'s|'t|'re|'ve|'m|'ll|'d| ?[%s]+| ?[%s]+| ?[^%s%s%s]+|[%s]+(?![^%s])" % (L, N, S, L, N, S, S)
    tail = "[%s]*[\\r\\n]+|[%s]+(?![^%s])|[%s]+" % (S, S, S, S)

    def llama3(digits):
        return ("%s|[^\\r\\n%s%s]?[%s]+|[%s]%s| ?[^%s%s%s]+[\\r\\n]*|%s"
                % (contractions, L, N, L, N, digits, S, L, N, tail))
    cjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
    poro = " ?[^(%s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+" % S
    upper, lower = "[%s%s%s%s%s]" % (Lu, Lt, Lm, Lo, M), "[%s%s%s%s]" % (Ll, Lm, Lo, M)
    return {
        "gpt-2": [gpt2],
        "llama-bpe": [llama3("{1,3}")],
        "qwen2": [llama3("")],
        "deepseek-llm": ["[\r\n]", "[%s]?[%s]+" % (S, cls(DS_CASED)),
                         "[%s]?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+" % S,
                         "[%s]+\\Z" % S, cjk, "[%s]+" % N],
        "deepseek-coder": ["[\r\n]", "[%s]?[%s]+" % (S, L), "[%s]?[%s]+" % (S, P), cjk, "[%s]" % N],
        "deepseek-v3": ["[%s]{1,3}" % N, "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                        "[!\"#$%%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n%s%s%s]?[%s%s]+| ?[%s%s]+[\\r\\n]*|%s"
                        % (L, P, Sym, L, M, P, Sym, tail)],
        "falcon": ["[%s\\$\\+<=>\\^~\\|`]+" % P, gpt2_stage, "[0-9][0-9][0-9]"],
        "starcoder": ["[%s]" % N, gpt2_stage],
        "poro-chat": [poro],
        "viking": [poro, "[%s]" % N],
        "tekken": ["[^\\r\\n%s%s]?%s*%s+|[^\\r\\n%s%s]?%s+%s*|[%s]| ?[^%s%s%s]+[\\r\\n/]*|%s"
                   % (L, N, upper, lower, L, N, upper, lower, N, S, L, N, tail)],
        "gpt-4o": ["[^\\r\\n%s%s]?%s*%s+%s?|[^\\r\\n%s%s]?%s+%s*%s?|[%s]{1,3}| ?[^%s%s%s]+[\\r\\n/]*|%s"
                   % (L, N, upper, lower, contractions, L, N, upper, lower, contractions, N, S, L, N, tail)],
    }


def split(stages, text):
    pieces = [text]
    for pat in stages:
        out = []
        for p in pieces:
            pos = 0
            for m in pat.finditer(p):
                assert m.end() > m.start(), "empty match"
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return pieces


FIXED = [
    "ied 4 \u00bd months", "F\u00fchrer", "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\t\n",
    "Hello world", " Hello World!", "Hello, world!", " this is \U0001f999.cpp", "w048 7tuijk dsdfhu",
    "\u043d\u0435\u0449\u043e \u043d\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438",
    "\u1780\u17b6\u1793\u17cb\u178f\u17c2\u1796\u17b7\u179f\u17c1\u179f",
    "\U0001f680 (normal) \U0001f636\u200d\U0001f32b\ufe0f (multiple emojis concatenated) \u2705 (only emoji)",
    "    Hello\n    Hello", " (", "\n =", "' era", "Hello, y'all! How are you \U0001f601 ?\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e",
    "3", "33", "333", "3333", "33333", "333333", "3333333", "33333333", "333333333", "3.3 3..3 3...3",
    "''''''```````\"\"\"\"......!!!!!!??????", "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it",
    "'D you like some tea? We'Ve a'lL", "HELLOworld HelloWorld helloWORLD \u01c5ungla \u02b0x",
    "a/b//\n/c", "x\u3000\u3001y", "\u3000\u3000abc", "tab\t\there  \n  x", "end   ", "\u0964\u06d4\u060c(|)x",
    "\u00b2\u00b3\u2160\u0660\u0661\u0662\u0663", "\u0915\u093f\u0928\u094d\u0928\u0940", "caf\u0065\u0301 \u0301x",
    "hello!!world", "x+$y", "a+b", "x ...y", "f(x)y", "abc123 d", "x+=1", "(abc", "\u65e5\u30c6ab", "a 1234567",
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\U0001f680 (normal) \u2705 \U0001f999\U0001f999 3 33 333 3333 33333 3.3 "
    "3..3 3...3 \u1780\u17b6\u1793\u17cb\U0001f601 ?\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e ------======= "
    "\u043d\u0435\u0449\u043e ```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "a 12", "I'M HE'LL", "x'\u017f", "HelloWorld", "helloWORLD", " ABC", "\u4f60\u597d", "x\u00b2",
    "HTTPServer's", "it's IT'S", "don't we'll they've you're I'm he'd", "THEY'RE You'Ve", "'s", " 's", "x 'll",
    "e\u0301'S \u0301'd", "\u01c5'LL", "'tis", "a'b 'tis", "1234567 12", "a!/\n/b", "x?\r\n\r\n/y",
    "a\r\n\r\n  b", "x  \t\n", " ...\n\nx", "\u4f60's", "IT'S",
]


def main():
    dump = sys.argv[1]
    cat = [unicodedata.category(chr(cp)) for cp in range(0x110000)]
    ws = set(WHITE_SPACE)
    failures = 0
    # the class and category tables, every code point
    gc_of = {"Lu": 2, "Ll": 3, "Lt": 4, "Lm": 5, "Lo": 6}

    def gc(cp):
        if cp in ws:
            return 1
        c = cat[cp]
        return gc_of.get(c, {"M": 7, "N": 8, "P": 9, "S": 10}.get(c[0], 0))
    tables = (("classes", lambda cp: 3 if cp in ws else 1 if cat[cp][0] == "L" else 2 if cat[cp][0] == "N" else 0),
              ("categories", gc))
    for mode, fn in tables:
        got = subprocess.run(testlib.wrap([dump, mode]), check=True, capture_output=True).stdout.decode()
        want = "".join([chr(48 + fn(cp)) for cp in range(0x110000)])
        bad = [cp for cp in range(0x110000) if got[cp] != want[cp]] if got != want else []
        if len(got) != len(want) or bad:
            print("%s table differs from unicodedata %s at %d code points, first U+%04X: regenerate it with "
                  "tools/gen_unicode_tables.py" % (mode, unicodedata.unidata_version, len(bad), bad[0] if bad else 0))
            failures += 1

    rng = random.Random(20240607)
    pool = [" ", " ", " ", "\n", "\r", "\t", "a", "b", "Z", "s", "t", "S", "T", "e", "r", "v", "l", "L", "m", "d",
            "D", "'", "'", "0", "7", "3", "3", "\u00b2", "!", ".", ",", "?", "-", "(", ")", "|", "/", "$", "+", "^",
            "`", "~", "<", "\u00e9", "\u017f", "\u3000", "\u3001", "\u3002", "\u00a0", "\u2028", "\u0301", "\u0903",
            "\u0660", "\u4e00", "\u9fa5", "\u9fa6", "\u6211", "\u3042", "\u30a2", "\u30fc", "\uac00", "\ud7a3",
            "\u07ff", "\u0800", "\u1780", "\u17b6", "\U0001f600", "\u200d", "\x1c", "\x85", "\u2581", "\u0130",
            "\u212a", "\u01c5", "\u02b0", "\u00b5", "\u00df", "\u0390", "\u1fd3", "\u1fbc", "\u0561", "\u0531",
            "\u2026", "\uff0c", "\uff01", "\uff21", "\u2018", "\u201c", "\u0964", "\u06d4", "\u060c", "\u00bd",
            "\u2160", "\u00a9", "\u20ac", "\u00ab", "\u2014", "\u0410", "\u0436"]

    def random_cp():
        while True:
            cp = rng.choice([rng.randrange(0x80, 0x3000), rng.randrange(0x3000, 0x10000), rng.randrange(0x10000, 0x110000)])
            if not 0xD800 <= cp <= 0xDFFF:
                return chr(cp)

    texts = list(FIXED)
    for i in range(2000):
        n = rng.randrange(0, 40)
        texts.append("".join(rng.choice(pool) if rng.random() < 0.85 else random_cp() for _ in range(n)))
    inp = "".join(t.encode("utf-8").hex() + "\n" for t in texts).encode()
    for name, exprs in splits(cat, ws).items():
        stages = [re.compile(e) for e in exprs]
        out = subprocess.run(testlib.wrap([dump, name]), input=inp, check=True, capture_output=True).stdout.decode()
        lines = out.split("\n")
        shown = 0
        for i, text in enumerate(texts):
            words = split(stages, text)
            want = " ".join(str(len(w.encode("utf-8"))) for w in words)
            if "".join(words) != text:
                print("%s: the split does not cover %r" % (name, text))
                failures += 1
            if lines[i] != want:
                failures += 1
                if shown < 5:
                    shown += 1
                    print("%s split of %r: got [%s], the expressions give [%s] = %r" % (name, text, lines[i], want,
                                                                                      words))
        print("%s: %d strings checked" % (name, len(texts)))
    print("%d failures" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
