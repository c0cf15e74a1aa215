"""corpus.py: the King James Bible corpus (Debian's bible-kjv) and its train/validation split.

`bible -f Gen1:1-Rev22:21` prints every verse as "Ref text" on one line. We keep the text of each
verse (runs of spaces collapsed to one), grouped by book, and hold whole books out for validation.
Deliberately not here: tokenisation (bpe.py) and batching (data.py).
"""

import re
import subprocess

# Books held out for validation: narrative, wisdom, prophecy, epistle, as `bible` abbreviates them.
DEFAULT_VALID_BOOKS = ("Ruth", "Eccl", "Jonah", "Gal", "1Jn")

_REF_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")


def read_kjv(bible_cmd="bible"):
    """Returns [(book, chapter, verse, text)] for the whole Bible, in canonical order."""
    out = subprocess.run([bible_cmd, "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True)
    verses = []
    for line in out.stdout.decode("ascii").split("\n"):
        if not line:
            continue
        m = _REF_RE.match(line)
        if not m:
            raise ValueError("unexpected line from bible: %r" % line[:80])
        text = re.sub(" +", " ", m.group(4).strip())
        verses.append((m.group(1), int(m.group(2)), int(m.group(3)), text))
    return verses


def split_books(verses, valid_books=DEFAULT_VALID_BOOKS):
    """Groups verses into books and splits them: (train_books, valid_books), each a list of
    (book_name, [verse_text])."""
    books = []
    for book, _, _, text in verses:
        if not books or books[-1][0] != book:
            books.append((book, []))
        books[-1][1].append(text)
    names = {b for b, _ in books}
    missing = [b for b in valid_books if b not in names]
    if missing:
        raise ValueError("unknown validation books %s (known: %s)" % (missing, sorted(names)))
    train = [b for b in books if b[0] not in valid_books]
    valid = [b for b in books if b[0] in valid_books]
    return train, valid


def book_text(book_verses):
    """A book as the model sees it: verses separated by newlines."""
    return "\n".join(book_verses)
