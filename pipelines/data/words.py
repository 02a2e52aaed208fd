"""Words for dedup, hashed straight from a batch's UTF-8 bytes in numpy.

The normalisation is recall-oriented, as datatrove's: lowercase, a word is a run of
`str.isalnum` characters, each run of ASCII digits becomes "0", Latin accents fold
("está" == "esta"). `normalize_for_dedup` + `word_hash` are the definition, one string at
a time, used by the tests; `batch_words` gives the same hashes for a whole column without
a Python object per word (numpy passes over Arrow's byte buffer, only distinct words hashed
with xxh3). How, and what it costs: docs/data.md#deduplication.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

_WORD = re.compile(r"[^\W_]+")  # Python's \w minus "_" is exactly str.isalnum()
_DIGITS = re.compile(r"[0-9]+")


def _accent_table() -> dict[int, str]:
    """Latin letters U+00C0..U+024F whose decomposition is one ASCII letter plus marks."""
    table: dict[int, str] = {}
    for cp in range(0xC0, 0x250):
        base = "".join(c for c in unicodedata.normalize("NFKD", chr(cp)) if not unicodedata.combining(c))
        if len(base) == 1 and base.isascii() and base.isalnum():
            table[cp] = base
    return table


_ACCENTS = _accent_table()


def normalize_for_dedup(text: str, fold_digits: bool = True) -> list[str]:
    """Words of `text` after the normalisation: the definition `batch_words` follows
    (`fold_digits=False` keeps digit runs as they are)."""
    words = _WORD.findall(text.lower())
    return [(_DIGITS.sub("0", w) if fold_digits else w).translate(_ACCENTS) for w in words]


def word_hash(word: str) -> int:
    """64-bit hash of a normalised word (as `batch_words` computes it)."""
    return xxhash.xxh3_64_intdigest(word.encode())


@lru_cache(maxsize=1)
def _tables() -> tuple[np.ndarray, np.ndarray]:
    """(alphanumeric flag per BMP code point, ASCII fold target per two-byte sequence)."""
    # the Basic Multilingual Plane (25 ms to build); rarer code points go through _astral
    alnum = np.fromiter((chr(c).isalnum() for c in range(0x10000)), dtype=bool, count=0x10000)
    fold = np.zeros((32, 64), dtype=np.uint8)  # [lead - 0xC0, continuation - 0x80]
    for cp, base in _ACCENTS.items():
        fold[(cp >> 6) - 0x00, cp & 0x3F] = ord(base)
    return alnum, fold


def batch_words(texts: pa.Array, fold_digits: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 `word_hash` of every word of the batch, in order; int64 word offsets per
    document, len(texts) + 1). Null texts have no words. `fold_digits=False` keeps digit
    runs (decontamination: problems that differ only in their numbers are other items)."""
    low = pc.utf8_lower(texts.fill_null("")).cast(pa.large_string())
    _, off_buf, data_buf = low.buffers()
    offs = np.frombuffer(off_buf, dtype=np.int64)[low.offset : low.offset + len(low) + 1]
    b = np.frombuffer(data_buf, dtype=np.uint8)[offs[0] : offs[-1]].copy() if data_buf else np.empty(0, np.uint8)
    offs = offs - offs[0]
    alnum, fold = _tables()
    word = np.zeros(b.size, dtype=bool)
    word[:] = alnum[b]  # ASCII bytes: their own code point; the rest is fixed below
    drop = np.zeros(b.size, dtype=bool)
    high = np.flatnonzero(b >= 0x80)
    if high.size:
        lead = high[b[high] >= 0xC0]
        lb = b[lead].astype(np.int64)
        n = np.where(lb < 0xE0, 2, np.where(lb < 0xF0, 3, 4))
        cont = [b[np.minimum(lead + k, b.size - 1)].astype(np.int64) & 0x3F for k in (1, 2, 3)]
        cp = np.where(n == 2, ((lb & 0x1F) << 6) | cont[0],
                      np.where(n == 3, ((lb & 0x0F) << 12) | (cont[0] << 6) | cont[1],
                               ((lb & 0x07) << 18) | (cont[0] << 12) | (cont[1] << 6) | cont[2]))
        cls = alnum[np.minimum(cp, 0xFFFF)]
        if (astral := cp > 0xFFFF).any():  # emoji, historic scripts: asked one distinct code point at a time
            u, inv = np.unique(cp[astral], return_inverse=True)
            cls[astral] = np.array([chr(c).isalnum() for c in u.tolist()], dtype=bool)[inv]
        word[high] = np.repeat(cls, n)  # every byte of a character is in its class
        two = lead[(n == 2) & (lb < 0xE0)]
        f = fold[b[two] - 0xC0, b[two + 1] - 0x80]
        hit = two[f > 0]
        b[hit] = f[f > 0]  # the letter without its accent, one byte: drop the continuation
        drop[hit + 1] = True
    doc_start = np.zeros(b.size + 1, dtype=bool)
    doc_start[offs] = True
    doc_start = doc_start[: b.size]
    prev_word = np.r_[False, word[:-1]] & ~doc_start
    start = word & ~prev_word
    if fold_digits:
        digit = (b >= 0x30) & (b <= 0x39) & word
        drop |= digit & np.r_[False, digit[:-1]] & ~start  # a digit run keeps its first byte...
        b[digit] = 0x30  # ...as "0"
    keep = word & ~drop
    kb, kstart = b[keep], start[keep]
    starts = np.flatnonzero(kstart)
    # The kept bytes with the word starts as offsets *are* an Arrow binary array of the
    # words: dictionary-encode it (C++ hash table) and hash each distinct word once.
    words = pa.LargeBinaryArray.from_buffers(pa.large_binary(), starts.size,
                                             [None, pa.py_buffer(np.r_[starts, kb.size]), pa.py_buffer(kb)])
    enc = pc.dictionary_encode(words)
    distinct = enc.dictionary.to_pylist()
    dh = np.fromiter(map(xxhash.xxh3_64_intdigest, distinct), dtype=np.uint64, count=len(distinct))
    # word offsets per document: how many words start before each document's first byte
    first_byte = np.flatnonzero(start)  # every word start is kept: the same words
    return dh[enc.indices.to_numpy()], np.searchsorted(first_byte, offs).astype(np.int64)
