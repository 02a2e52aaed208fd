"""The columnar dedup index: the paragraph fixpoint equals its sequential definition,
an incremental index equals a full rebuild, a shard reads only its own rows; and the
stages on a real store extend the index when a shard is added, leaving unchanged shards'
deduped output cached."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.data.dedup.clusters import paragraph_drops, paragraph_hashes
from pipelines.data.dedup.minhash import compute_signatures
from tests.pipelines.data.dedup_corpus import CFG, corpus


def sequential_paragraph_drops(ids, hashes, chars, min_chars):
    """The definition, one document at a time in doc_id order (the pre-columnar code)."""
    seen: set[int] = set()
    drops, rejected = {}, set()
    for i in sorted(range(len(ids)), key=lambda i: ids[i]):
        dup = [j for j, h in enumerate(hashes[i]) if h and h in seen]
        if dup:
            drops[i] = dup
            if sum(c for j, c in enumerate(chars[i]) if j not in set(dup)) < min_chars:
                rejected.add(i)
                continue
        seen |= {h for h in hashes[i] if h}
    return drops, rejected


@pytest.mark.parametrize("seed", range(6))
def test_columnar_paragraph_dedup_equals_sequential_definition(seed: int) -> None:
    # few distinct hashes and lengths near the limit: long chains of rejections that free
    # paragraphs for later documents, which the fixpoint must resolve exactly
    rng = np.random.default_rng(seed)
    n = 300
    ids = [f"d{int(x):05d}" for x in rng.permutation(n)]
    hashes = [rng.integers(0, 40, size=int(rng.integers(0, 6))).tolist() for _ in range(n)]
    chars = [rng.integers(10, 60, size=len(h)).tolist() for h in hashes]
    want = sequential_paragraph_drops(ids, hashes, chars, 90)
    assert want[1], "the case must exercise rejections"
    assert paragraph_drops(ids, hashes, chars, 90) == want


def test_batch_paragraphs_equal_paragraph_hashes() -> None:
    import pyarrow as pa

    from pipelines.data.dedup.clusters import batch_paragraphs

    _, texts = corpus()
    texts = [t.replace(" ", "\n", 3) for t in texts[:20]] + ["", "a\n\n  B  ", "Línea\u00a0con ESPACIO  raro " * 3]
    hashes, chars = batch_paragraphs(pa.array(texts), CFG.min_paragraph_chars)
    assert hashes.to_pylist() == [paragraph_hashes(t, CFG.min_paragraph_chars) for t in texts]
    assert chars.to_pylist() == [[len(x.strip()) for x in t.split("\n")] for t in texts]


def write_signature_shard(path, ids: list[str], texts: list[str]) -> None:
    """A minhash_signatures file as minhash_stage writes it (without the store)."""
    import pyarrow as pa

    from pipelines.data.dedup.clusters import batch_paragraphs
    from pipelines.data.dedup.lsh_index import band_column, band_keys

    sigs = compute_signatures(texts, CFG)
    keys = band_keys(sigs, CFG)
    paras, chars = batch_paragraphs(pa.array(texts, pa.string()), CFG.min_paragraph_chars)
    pq.write_table(pa.table({
        "doc_id": pa.array(ids, pa.string()), "source": pa.array([f"src/{i}" for i in ids], pa.string()),
        **{band_column(b): pa.array(keys[:, b], pa.uint64()) for b in range(CFG.bands)},
        "paragraph_hashes": paras, "line_chars": chars}), path)


def sharded_corpus(tmp_path):
    """Three shards; the planted near-duplicates and a shared paragraph span them, and the
    last shard holds the smallest doc_ids, so adding it changes old shards' decisions."""
    from pipelines.data.dedup.index import ShardInput

    ids, texts = corpus()
    para = "Este párrafo compartido aparece en varias páginas del manual de usuario."
    for i in (3, 70, 140):
        texts[i] = texts[i] + "\n" + para + "\n" + texts[i]
    ids = [("a" if i >= 133 else "z") + d for i, d in enumerate(ids)]
    out = []
    for k, (lo, hi) in enumerate(((0, 66), (66, 133), (133, 200))):
        path = tmp_path / f"s{k}.parquet"
        write_signature_shard(path, ids[lo:hi], texts[lo:hi])
        out.append(ShardInput(f"s{k}", path, f"key{k}"))
    return out


def decisions(index_dir) -> tuple[list, list]:
    near = pq.read_table(index_dir / "near_duplicates.parquet").to_pylist()
    para = pq.read_table(index_dir / "paragraph_drops.parquet").to_pylist()
    return sorted(map(str, near)), sorted(map(str, para))


def test_incremental_index_equals_full_rebuild(tmp_path) -> None:
    from pipelines.data.dedup.index import build_index

    shards = sharded_corpus(tmp_path)
    full, first, inc = (tmp_path / d for d in ("full", "first", "inc"))
    for d in (full, first, inc):
        d.mkdir()
    want = build_index(shards, CFG, full)
    before = build_index(shards[:2], CFG, first)
    got = build_index(shards, CFG, inc, previous=first)
    assert got.incremental and not want.incremental
    assert decisions(inc) == decisions(full)
    assert (got.removed, got.clusters, got.paragraph_docs) == (want.removed, want.clusters, want.paragraph_docs) \
        == (2, 1, 2)
    assert got.digests == want.digests
    # the new shard's smaller doc_ids took over keeper (s0 loses row 42) and the shared
    # paragraph (s0 loses it now): s0's decisions changed; s1 lost that paragraph already
    # (to s0), so its digest, and its cached deduped_documents, stay
    assert before.removed == 0 and before.paragraph_docs == 1
    assert before.digests["s0"] != got.digests["s0"] and before.digests["s1"] == got.digests["s1"]
    near = pq.read_table(inc / "near_duplicates.parquet").to_pylist()
    assert {r["keeper_doc_id"] for r in near} == {"a" + "doc-0150"}
    # a changed old shard, or one gone, is a full rebuild
    from dataclasses import replace

    again = tmp_path / "again"
    again.mkdir()
    assert not build_index([replace(shards[0], key="other"), *shards[1:]], CFG, again, previous=first).incremental


@pytest.mark.parametrize("budget", [25, 50])
def test_bands_in_key_ranges_equal_one_sort(tmp_path, budget: int) -> None:
    """A band sorted in key ranges of `budget` documents (8 or 4 ranges for 200) writes the
    same sorted file and finds the same clusters as one sort of the whole band, full and
    incremental; and a key-range read of the persisted band returns exactly that range."""
    from dataclasses import replace

    from pipelines.data.dedup.index import build_index
    from pipelines.data.dedup.lsh_index import band_job, key_range, load_band, partition_bits

    shards = sharded_corpus(tmp_path)
    small = replace(CFG, band_partition_rows=budget)
    dirs = {d: tmp_path / d for d in ("one", "ranges", "first", "inc")}
    for d in dirs.values():
        d.mkdir()
    want = build_index(shards, CFG, dirs["one"])
    got = build_index(shards, small, dirs["ranges"])
    build_index(shards[:2], small, dirs["first"])
    inc = build_index(shards, small, dirs["inc"], previous=dirs["first"])
    assert partition_bits(200, budget) == (3 if budget == 25 else 2)
    assert (got.removed, got.clusters, inc.removed, inc.clusters) == (want.removed, want.clusters) * 2
    assert decisions(dirs["ranges"]) == decisions(dirs["one"]) == decisions(dirs["inc"])
    for b in range(CFG.bands):
        name = f"band_{b:02d}.parquet"
        one = pq.read_table(dirs["one"] / name)
        assert pq.read_table(dirs["ranges"] / name).equals(one)
        assert pq.read_table(dirs["inc"] / name).equals(one)
    # the edges of one band: a planted pair shares it, in whichever range its key falls
    paths = [s.path for s in shards]
    a, b = band_job(paths, [0, 66, 133], 0, None, budget=budget)
    a1, b1 = band_job(paths, [0, 66, 133], 0, None, budget=10**9)
    assert sorted(zip(a, b)) == sorted(zip(a1, b1))
    # a key range of the persisted band holds exactly that range's keys
    keys = pq.read_table(dirs["one"] / "band_00.parquet")["key"].to_numpy()
    lo, hi = key_range(1, 2)
    k, _ = load_band(dirs["one"] / "band_00.parquet", (lo, hi))
    assert k.tolist() == [x for x in keys.tolist() if lo <= x < hi]


def test_a_shard_reads_only_its_rows(tmp_path) -> None:
    import pyarrow as pa

    from pipelines.data.dedup.index import read_shard_rows, write_sorted

    table = pa.table({"doc_id": [f"d{i:03d}" for i in range(90)], "shard": [f"s{i % 3}" for i in range(90)]})
    path = tmp_path / "t.parquet"
    write_sorted(path, table, row_group_size=10)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 9
    for g in range(meta.num_row_groups):  # one shard per row group: the filter skips the others
        st = meta.row_group(g).column(1).statistics
        assert st.min == st.max
    got = read_shard_rows(path, "s1")
    assert got["doc_id"].to_pylist() == [f"d{i:03d}" for i in range(1, 90, 3)]
    assert set(got["shard"].to_pylist()) == {"s1"}


def test_stages_extend_the_index_and_keep_unchanged_shards_cached(tmp_path) -> None:
    """On a real store: adding a shard extends the persisted index (no rebuild), gives the
    same decisions as a rebuild, and leaves a shard whose decisions did not change cached."""
    import pyarrow as pa

    from pipelines.data.documents import FILTERED_SCHEMA
    from stages.config import preset
    from stages.data import dedup
    from stages.data.quality import quality_stage
    from stages.store.outputs import DataStore, StageStats

    ids, texts = corpus()
    para = "Este párrafo compartido aparece en varias páginas del manual de usuario."
    for i in (3, 70, 140):
        texts[i] = texts[i] + "\n" + para + "\n" + texts[i]
    ids = [("a" if i >= 133 else "z") + d for i, d in enumerate(ids)]
    # dedup alone: the learned quality signal off (quality_model still says which shards it saw)
    cfg = preset("tiny", {"filters.learned.enabled": False})
    homes = {name: DataStore(tmp_path / name) for name in ("inc", "full")}
    for store in homes.values():
        for k, (lo, hi) in enumerate(((0, 66), (66, 133), (133, 200))):
            rows = [{"doc_id": ids[i], "shard": f"s{k}", "source": f"f{i}.txt", "format": "txt", "text": texts[i],
                     "lang": "es", "lang_score": 1.0} for i in range(lo, hi)]
            store.commit("filtered_documents", f"s{k}", StageStats(key=f"filtered-{k}"),
                         {"part-0.parquet": pa.Table.from_pylist(rows, schema=FILTERED_SCHEMA)})
            dedup.minhash_stage(store, f"s{k}", cfg)
    inc = homes["inc"]
    first = dedup.dedup_index_stage(inc, ["s0", "s1"], cfg)
    assert not first.extra["incremental"] and first.rejected == 0
    quality_stage(inc, ["s0", "s1"], cfg)
    before = {s: dedup.deduped_stage(inc, s, cfg) for s in ("s0", "s1")}
    extended = dedup.dedup_index_stage(inc, ["s0", "s1", "s2"], cfg)
    rebuilt = dedup.dedup_index_stage(homes["full"], ["s0", "s1", "s2"], cfg)
    assert extended.extra["incremental"] and not rebuilt.extra["incremental"]
    assert extended.extra["shard_digests"] == rebuilt.extra["shard_digests"]
    assert extended.rejected == rebuilt.rejected == 2
    assert decisions(inc.dir("dedup_index")) == decisions(homes["full"].dir("dedup_index"))
    quality_stage(inc, ["s0", "s1", "s2"], cfg)
    after = {s: dedup.deduped_stage(inc, s, cfg) for s in ("s0", "s1", "s2")}
    assert after["s1"].cached and after["s1"].key == before["s1"].key  # its decisions did not change
    assert not after["s0"].cached and after["s0"].docs_out == before["s0"].docs_out - 1  # lost row 42
    assert after["s0"].drops == {"near_duplicate": 1}
    # a shard gone from the corpus is a full rebuild, with its documents out of every decision
    smaller = dedup.dedup_index_stage(inc, ["s0", "s2"], cfg)
    assert not smaller.extra["incremental"] and set(smaller.extra["shard_digests"]) == {"s0", "s2"}


def test_only_documents_sharing_a_paragraph_enter_the_fixpoint(tmp_path) -> None:
    import pyarrow as pa

    from pipelines.data.dedup.index import SignatureFiles, sharing_documents

    def spread(h: int) -> int:  # uniform 64-bit values, as real hashes are: the passes split them
        return h and (h * 0x9E3779B97F4A7C15) % (1 << 64)

    paths = []
    for i, lists in enumerate(([[5, 0, 7], [8], [0, 0]], [[7, 9], [9, 9], [11], []])):
        paths.append(tmp_path / f"s{i}.parquet")
        hashes = [[spread(h) for h in row] for row in lists]
        pq.write_table(pa.table({"paragraph_hashes": pa.array(hashes, pa.list_(pa.uint64()))}), paths[-1])
    files = SignatureFiles(paths, np.array([0, 3]), np.array([3, 7]))
    alive = np.ones(7, dtype=bool)
    # 7 is in rows 0 and 3; 9 in rows 3 and 4 (twice in 4); 0 is "not deduped"
    for per_pass in (1 << 24, 2):  # in one pass, and in passes over ranges of hash values
        assert sharing_documents(files, alive, per_pass).tolist() == [0, 3, 4]
    # a removed near-duplicate (row 3) no longer shares: 7 is left in row 0 alone
    alive[3] = False
    assert sharing_documents(files, alive).tolist() == [4]
    assert sharing_documents(files, alive, 2).tolist() == [4]


def test_bands_in_worker_processes_equal_one_process(tmp_path) -> None:
    """`dedup.workers` > 1 builds bands in spawned processes: same files, same decisions."""
    from dataclasses import replace

    from pipelines.data.dedup.index import build_index

    shards = sharded_corpus(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    want = build_index(shards, CFG, one)
    got = build_index(shards, replace(CFG, workers=2), two, workers=2)
    assert (got.removed, got.clusters, got.digests) == (want.removed, want.clusters, want.digests)
    assert decisions(two) == decisions(one)
    for b in range(CFG.bands):
        name = f"band_{b:02d}.parquet"
        assert pq.read_table(two / name).equals(pq.read_table(one / name))
