"""A home whose documents went through the real read -> clean -> filter stages, with a shard
of junk of several kinds so that several rules drop: the filter report's tests and
`yunque inspect rejected`'s read it."""

from __future__ import annotations

import random
from pathlib import Path

from pipelines.data.corpus import list_shards, open_corpus
from stages.config import preset
from stages.data.ingest import clean_stage, filter_stage, read_stage
from stages.store.outputs import DataStore
from tests.support.factory import spanish_text, write_two_shards


def write_junk_shard(root: Path, seed: int = 3) -> None:
    """A shard of good Spanish pages and junk of several kinds, so that several rules drop."""
    rng = random.Random(seed)
    d = root / "basura"
    d.mkdir(parents=True)
    for i in range(4):
        (d / f"bueno{i}.txt").write_text(spanish_text(rng), encoding="utf-8")
    junk = {
        "repetido.txt": "Compre ahora la mejor oferta del año.\n" * 40,
        "lorem.txt": "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30,
        "numeros.txt": "\n".join(" ".join(str(rng.randint(0, 999)) for _ in range(8)) for _ in range(40)),
        "corto2.txt": "Sí, claro que sí.",
        # a page of code (one line of code in a page of prose is prose: the docs profile drops the line)
        "codigo.txt": "Un ejemplo de la función:\n" + "".join(f"function f{i}(x) {{ return x + {i}; }}\n" for i in range(30)),
    }
    for name, text in junk.items():
        (d / name).write_text(text, encoding="utf-8")


def build_home(corpus: Path, home: Path | str) -> tuple[DataStore, dict]:
    """The two-shard corpus plus the junk shard, read, cleaned and filtered into `home` by
    the real stages (tiny preset): the store and each shard's filter stats."""
    write_two_shards(corpus)
    write_junk_shard(corpus)
    store = DataStore(home)
    cfg = preset("tiny")
    fs, root = open_corpus(str(corpus))
    stats = {}
    for s in list_shards(fs, root):
        read_stage(store, fs, root, s, cfg)
        clean_stage(store, s.key, cfg)
        stats[s.key] = filter_stage(store, s.key, cfg)
    return store, stats
