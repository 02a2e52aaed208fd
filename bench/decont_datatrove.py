"""datatrove 0.10.1's n-gram decontamination (`datatrove.pipeline.decont`) as an offline
peer: the evaluation items go to its own NGramsDecontIndexer as input Documents, the
training documents through its own NGramsDecontFilter, both run directly.

Three things of this environment are worked around, none of datatrove's logic: lighteval's
task registry (a stand-in with no tasks), spaCy's word tokenizers (`split_tokenizer`, its
fastest), and xxhash 4's refusal to hash a `str` (the UTF-8 bytes instead). Why each:
docs/benchmarks.md#decontamination-bench_decontamination.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import sys
import tempfile
import types
from collections.abc import Iterator
from unittest import mock

from bench.minhash_datatrove import split_tokenizer, xxhash_of_str


@contextlib.contextmanager
def _lighteval_without_tasks() -> Iterator[None]:
    class Registry:
        def __init__(self, *args, **kwargs):
            pass

        def get_task_dict(self, tasks):
            if tasks:
                raise RuntimeError(f"offline peer: lighteval tasks are not supported ({tasks!r})")
            return {}

    class LightevalTask:
        @staticmethod
        def load_datasets(tasks, *args, **kwargs):
            return None

    mods = {}
    for name in ("lighteval", "lighteval.tasks", "lighteval.tasks.lighteval_task", "lighteval.tasks.registry"):
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=not name.endswith(("_task", "registry")))
        mods[name] = m
    mods["lighteval.tasks.registry"].Registry = Registry
    mods["lighteval.tasks.lighteval_task"].LightevalTask = LightevalTask
    with mock.patch.dict(sys.modules, mods):
        yield


def contaminated(items: list[str], docs: list[str], n: int, workdir: str) -> set[int]:
    """Indices of the documents datatrove's filter drops as contaminated."""
    from datatrove.data import Document
    from datatrove.pipeline.decont import (
        NGramsDecontConfig,
        NGramsDecontFilter,
        NGramsDecontIndexer,
    )

    class OfflineIndexer(NGramsDecontIndexer):
        def __new__(cls, *args, **kwargs):  # PipelineStep.__new__ checks for lighteval
            return object.__new__(cls)

        def run(self, data=None, rank: int = 0, world_size: int = 1):
            with _lighteval_without_tasks():
                return super().run(data, rank=rank, world_size=world_size)

    index_dir = tempfile.mkdtemp(prefix="datatrove_index_", dir=workdir)  # its filter loads every index there
    # find_query_ngrams only so that an item needs no metadata["query"]: the n-grams indexed
    # are then exactly the item's own
    config = NGramsDecontConfig(n_grams=n, find_query_ngrams=True, find_overlap_ngrams=False)
    tok = split_tokenizer()
    indexer = OfflineIndexer(output_folder=index_dir, config=config, language=tok)
    indexer.hash_func = xxhash_of_str(config.hash_config.precision)
    indexer.run(iter(Document(text=t, id=f"item-{i}", metadata={"task": "eval"}) for i, t in enumerate(items)), 0, 1)
    flt = NGramsDecontFilter(index_folder=index_dir, config=config, language=tok)
    flt.hash_func = xxhash_of_str(config.hash_config.precision)
    train = [Document(text=t, id=str(i), metadata={}) for i, t in enumerate(docs)]
    kept = {d.id for d in flt.run(iter(train), 0, 1)}
    return {i for i, d in enumerate(train) if d.id not in kept}
