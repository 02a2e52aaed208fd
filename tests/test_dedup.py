"""LSH clusters and exact paragraph dedup: planted duplicates found, decisions order-free."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import DedupConfig
from pipelines.data.dedup import (
    drop_lines,
    estimated_jaccard_pairs,
    lsh_clusters,
    paragraph_drops,
    paragraph_hashes,
)
from pipelines.data.minhash import EMPTY, compute_signatures

CFG = DedupConfig()
N_RANDOM = 200
PLANTED = (150, 42, 199)  # rows of the near-duplicate copies


def vocab(rng: np.random.Generator, size: int = 5000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(3, 10)))) for _ in range(size)]


def corpus() -> tuple[list[str], list[str]]:
    """200 unrelated random documents; three of them are one text with one or two words
    changed (true Jaccard of 5-gram sets about 0.9, so LSH 14x8 finds them with
    probability > 0.99; the seed is fixed, so the test is deterministic)."""
    rng = np.random.default_rng(7)
    words = vocab(rng)
    texts = [" ".join(rng.choice(words, size=int(rng.integers(80, 200)))) for _ in range(N_RANDOM)]
    base = rng.choice(words, size=150).tolist()
    for k, pos in enumerate(PLANTED):
        copy = list(base)
        for j in range(k):  # copy 0 exact, copy 1 one edit, copy 2 two edits
            copy[30 + 50 * j] = "cambiado"
        texts[pos] = " ".join(copy)
    # ids not in row order: the copies are doc-0150 (row 150), doc-0154 (row 42) and
    # doc-0163 (row 199), so "keeper = min doc_id" (row 150) is not "keeper = first row"
    ids = [f"doc-{(i * 37) % N_RANDOM:04d}" for i in range(N_RANDOM)]
    return ids, texts


def removed_ids(ids: list[str], texts: list[str]) -> tuple[set[str], dict[str, str]]:
    cl = lsh_clusters(compute_signatures(texts, CFG), ids, CFG)
    keeper_of = {ids[i]: ids[int(cl.keeper[i])] for i in range(len(ids))}
    return {ids[i] for i in cl.to_remove}, keeper_of


def test_planted_cluster_found_and_keeper_is_min_doc_id() -> None:
    ids, texts = corpus()
    cl = lsh_clusters(compute_signatures(texts, CFG), ids, CFG)
    assert cl.n_clusters == 1
    labels = cl.labels[list(PLANTED)]
    assert (labels >= 0).all() and (labels == labels[0]).all()
    others = np.setdiff1d(np.arange(len(ids)), PLANTED)
    assert (cl.labels[others] == -1).all()  # distinct documents don't cluster
    assert (cl.keeper[others] == others).all()
    assert min(ids[i] for i in PLANTED) == ids[150] == "doc-0150"
    assert (cl.keeper[list(PLANTED)] == 150).all()
    assert sorted(cl.to_remove.tolist()) == [42, 199]


def test_result_independent_of_input_order() -> None:
    ids, texts = corpus()
    want_removed, want_keeper = removed_ids(ids, texts)
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(len(ids))
        got_removed, got_keeper = removed_ids([ids[i] for i in perm], [texts[i] for i in perm])
        assert got_removed == want_removed
        assert got_keeper == want_keeper


def test_empty_documents_never_cluster() -> None:
    ids, texts = corpus()
    empties = ["", "   ", "¡¿!?", "", "— —"]
    texts = texts + empties
    ids = ids + [f"empty-{i}" for i in range(len(empties))]
    sigs = compute_signatures(texts, CFG)
    assert (sigs[-len(empties) :] == EMPTY).all()
    cl = lsh_clusters(sigs, ids, CFG)
    assert (cl.labels[-len(empties) :] == -1).all()
    assert cl.n_clusters == 1 and cl.to_remove.size == 2
    # only empty documents: nothing to bucket at all
    only = lsh_clusters(compute_signatures(empties, CFG), [str(i) for i in range(5)], CFG)
    assert only.n_clusters == 0 and only.to_remove.size == 0


def test_exact_duplicates_cluster_transitively() -> None:
    texts = ["uno dos tres cuatro cinco seis siete"] * 4 + ["otra cosa muy distinta aquí"]
    ids = ["d", "b", "c", "a", "e"]
    cl = lsh_clusters(compute_signatures(texts, CFG), ids, CFG)
    assert cl.n_clusters == 1
    assert cl.keeper.tolist() == [3, 3, 3, 3, 4]
    assert sorted(cl.to_remove.tolist()) == [0, 1, 2]


def test_lsh_edge_cases() -> None:
    empty = lsh_clusters(np.empty((0, CFG.num_perm), dtype=np.uint32), [], CFG)
    assert empty.labels.size == 0 and empty.to_remove.size == 0
    with pytest.raises(ValueError, match="signatures have"):
        lsh_clusters(np.zeros((2, 10), dtype=np.uint32), ["a", "b"], CFG)


def test_paragraph_drops_keep_first_by_doc_id() -> None:
    ids = ["b", "a", "c"]
    hashes = [[1, 2, 0], [2, 3, 0], [1, 0, 3, 4, 4]]
    # "a" (index 1) comes first: keeps 2 and 3; "b" keeps 1 and loses 2; "c" loses 1 and
    # 3; the repeat of 4 inside "c" and the short lines (hash 0) are never dropped.
    assert paragraph_drops(ids, hashes) == ({0: [1], 2: [0, 2]}, set())
    assert paragraph_drops([], []) == ({}, set())


def test_a_document_rejected_as_too_short_does_not_claim_its_paragraphs() -> None:
    # "b" shares paragraph 7 with "a" (smaller id, so "b" loses it) and would own
    # paragraph 9, but is too short once 7 is gone: it is rejected, and "c" keeps 9.
    chars = [[100, 50], [100, 100], [100, 100]]
    ids = ["b", "a", "c"]
    hashes = [[7, 9], [7, 8], [9, 5]]
    drops, rejected = paragraph_drops(ids, hashes, chars, min_chars=80)
    assert drops == {0: [0]} and rejected == {0}  # "b" lost 7 to "a", 50 chars left
    # without the rule "c" would lose paragraph 9 to the rejected "b"
    assert paragraph_drops(ids, hashes)[0] == {0: [0], 2: [0]}


def test_paragraph_hashes_and_drop_lines() -> None:
    shared = "Este párrafo se repite en varias páginas de la ayuda de LibreOffice."
    a = f"Título\n{shared}\nTexto propio del documento A, bastante largo para contar."
    b = f"Otro título\n  {shared.upper().replace(' ', '   ')}  \nVéase también"
    ha, hb = paragraph_hashes(a, CFG.min_paragraph_chars), paragraph_hashes(b, 40)
    assert ha[0] == 0 and hb[0] == 0 and hb[2] == 0  # short lines are not deduped
    assert ha[1] == hb[1] != 0  # case and whitespace are ignored
    assert len(ha) == len(a.split("\n"))
    drops, _ = paragraph_drops(["doc-b", "doc-a"], [hb, ha])
    assert drops == {0: [1]}
    assert drop_lines(b, drops[0]) == "Otro título\nVéase también"
    assert drop_lines("x\ny\nz", []) == "x\ny\nz"
    assert drop_lines("x\ny\nz", [0, 2]) == "y"


def test_estimated_jaccard_pairs() -> None:
    _, texts = corpus()
    sample = [texts[PLANTED[0]], texts[3], texts[PLANTED[1]], "", texts[5], ""]
    sigs = compute_signatures(sample, CFG)
    pairs = estimated_jaccard_pairs(sigs, 0.8)
    assert [(i, j) for i, j, _ in pairs] == [(0, 2)]  # copies 0 and 1; empties never pair
    assert 0.8 <= pairs[0][2] <= 1.0
    assert estimated_jaccard_pairs(sigs, 1.01) == []
