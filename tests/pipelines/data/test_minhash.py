"""MinHash signatures: bit-exact against datasketch, normalisation, estimator quality."""

from __future__ import annotations

import numpy as np
import pytest
from datasketch import MinHash

from pipelines.config import DedupConfig
from pipelines.data.dedup.minhash import (
    EMPTY,
    compute_signatures,
    minhash_of_hashes,
    normalize_for_dedup,
    shingle_hashes,
)

CFG = DedupConfig()


def vocab(rng: np.random.Generator, size: int = 5000) -> list[str]:
    # Random lowercase ASCII words: normalisation leaves them alone, and a large vocabulary
    # makes unrelated documents share (almost) no 5-grams.
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(3, 10)))) for _ in range(size)]


def random_text(rng: np.random.Generator, words: list[str], n: int) -> str:
    return " ".join(rng.choice(words, size=n).tolist())


def datasketch_signature(text: str) -> np.ndarray:
    """The reference: datasketch's affine32 scheme over our shingle hashes (identity hashfunc)."""
    m = MinHash(num_perm=CFG.num_perm, seed=CFG.seed, scheme="affine32", hashfunc=lambda x: x)
    h = shingle_hashes(normalize_for_dedup(text), CFG.ngram)
    if h.size:
        m.update_batch(h.tolist())
    return m.hashvalues.astype(np.uint32)


def shingle_set(text: str, n: int = CFG.ngram) -> set[tuple[str, ...]]:
    """Ground truth independent of our hashing: the set of word n-gram tuples."""
    w = normalize_for_dedup(text)
    if len(w) < n:
        return {tuple(w)} if w else set()
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def jaccard(x: set, y: set) -> float:
    return len(x & y) / len(x | y)


@pytest.fixture(scope="module")
def words() -> list[str]:
    return vocab(np.random.default_rng(0))


def test_signatures_equal_datasketch(words: list[str]) -> None:
    rng = np.random.default_rng(1)
    texts = [random_text(rng, words, int(n)) for n in rng.integers(20, 300, size=12)]
    texts += [
        random_text(rng, words, 3000),  # > chunk_shingles below: the sliced path
        "dos palabras",  # fewer than 5 words: one shingle of all of them
        "",
        "Él está AQUÍ, con 3 gatos y un perro; ¿vendrá mañana?",
    ]
    rng.shuffle(texts)
    # Small chunks and batches so that permuting flushes several times, the huge document
    # is processed in slices and documents span batches; the defaults must agree.
    small = compute_signatures(texts, CFG, chunk_shingles=256, batch_docs=3)
    default = compute_signatures(texts, CFG)
    assert small.shape == (len(texts), CFG.num_perm) and small.dtype == np.uint32
    np.testing.assert_array_equal(small, default)
    for i, text in enumerate(texts):
        np.testing.assert_array_equal(small[i], datasketch_signature(text), err_msg=text[:40])


def test_minhash_of_hashes_equals_datasketch() -> None:
    h = np.unique(np.random.default_rng(2).integers(0, 1 << 32, 500, dtype=np.uint64))
    m = MinHash(num_perm=CFG.num_perm, seed=CFG.seed, scheme="affine32", hashfunc=lambda x: x)
    m.update_batch(h.tolist())
    np.testing.assert_array_equal(minhash_of_hashes(h, CFG.num_perm, CFG.seed), m.hashvalues)
    empty = minhash_of_hashes(np.empty(0, dtype=np.uint64), CFG.num_perm, CFG.seed)
    assert (empty == EMPTY).all()


def test_short_text_gets_one_shingle() -> None:
    h = shingle_hashes(["dos", "palabras"], CFG.ngram)
    assert h.size == 1
    sig = compute_signatures(["dos palabras"], CFG)[0]
    assert not (sig == EMPTY).all()
    assert shingle_hashes([], CFG.ngram).size == 0


def test_normalisation() -> None:
    got = normalize_for_dedup("Hola, MUNDO! Año 2024 costó 3,50 € — café_con leche ¿Qué? v2.10b")
    # every run of digits is one "0"; "_" and punctuation separate words
    assert got == ["hola", "mundo", "ano", "0", "costo", "0", "0", "cafe", "con", "leche", "que", "v0", "0b"]
    # case, digits, punctuation and accents do not change the signature
    a = "El Administrador revisó los 12 registros, cada SEMANA: ¡sin excepción!"
    b = "el administrador reviso los 7 registros cada semana sin excepcion"
    sa, sb = compute_signatures([a, b], CFG)
    np.testing.assert_array_equal(sa, sb)
    # non-Latin scripts survive (only Latin accents are folded)
    assert normalize_for_dedup("Ελληνικά über") == ["ελληνικά", "uber"]


def test_batch_words_follow_the_definition() -> None:
    """The numpy byte passes give exactly the words and hashes of the Python definition,
    on text that exercises each of them: multi-byte punctuation and symbols, other
    scripts, 3- and 4-byte characters, combining marks, folded and unfolded letters,
    digit runs (also across a document boundary), empty and null documents."""
    import pyarrow as pa

    from pipelines.data.words import batch_words, word_hash

    texts = ["Él está AQUÍ, con 3 gatos; ¿vendrá mañana? «Sí» — 12,5 %", "", None, "0",
             "99 ÆØÅ æøå ĳ Œuvre ǅ Ḁ ß ﬁ x²", "Ελληνικά über 東京タワー 🙂emoji😀 𝒜𝒷 नमस्ते", "e\u0301 café\u0301",
             "tab\tand\nnew_line v1.2.3 ...", "7"]
    hashes, offsets = batch_words(pa.array(texts, pa.string()))
    want = [normalize_for_dedup(t or "") for t in texts]
    assert np.diff(offsets).tolist() == [len(w) for w in want]
    assert hashes.tolist() == [word_hash(w) for ws in want for w in ws]
    assert len(set(hashes.tolist())) == len({w for ws in want for w in ws})


@pytest.mark.parametrize("text", ["", "   \n\t", "¡¿...!?", "— · —"])
def test_text_without_words_is_empty_row(text: str) -> None:
    sig = compute_signatures([text, "uno dos tres cuatro cinco seis"], CFG)
    assert (sig[0] == EMPTY).all()
    assert not (sig[1] == EMPTY).all()


@pytest.mark.parametrize("edits", [3, 10, 25, 50])
def test_estimated_jaccard_close_to_true(words: list[str], edits: int) -> None:
    rng = np.random.default_rng(100 + edits)
    base = rng.choice(words, size=400).tolist()
    other = list(base)
    for pos in rng.choice(len(other), size=edits, replace=False):
        other[int(pos)] = str(rng.choice(words))
    ta, tb = " ".join(base), " ".join(other)
    true = jaccard(shingle_set(ta), shingle_set(tb))
    # our 32-bit shingle hashes must not lose n-grams (collisions are astronomically rare)
    assert shingle_hashes(normalize_for_dedup(ta), CFG.ngram).size == len(shingle_set(ta))
    sa, sb = compute_signatures([ta, tb], CFG)
    est = float((sa == sb).mean())
    # standard error sqrt(J(1-J)/112) <= 0.047; 0.1 is about two of them
    assert abs(est - true) < 0.1, (edits, true, est)


def test_word_order_matters(words: list[str]) -> None:
    w = ["uno", "dos", "tres", "cuatro", "cinco"]
    assert set(shingle_hashes(w, 5).tolist()).isdisjoint(shingle_hashes(w[::-1], 5).tolist())
    swapped = ["dos", "uno", "tres", "cuatro", "cinco"]
    assert shingle_hashes(w, 5)[0] != shingle_hashes(swapped, 5)[0]
    # a shuffled document has the same words but (almost) no shared 5-grams
    rng = np.random.default_rng(3)
    doc = rng.choice(words, size=300).tolist()
    shuffled = list(doc)
    rng.shuffle(shuffled)
    sa, sb = compute_signatures([" ".join(doc), " ".join(shuffled)], CFG)
    assert (sa == sb).mean() < 0.1
